//! TLS for `security.protocol=SSL|SASL_SSL`, with rustls (the `ring` provider; no OpenSSL).
//!
//! The client configuration is built per connection from [`Security`]: the CA file
//! (`ssl.ca.location`) or Mozilla's roots, the client certificate and key for mutual TLS
//! (PEM; PKCS#8, PKCS#1 RSA or SEC1 EC keys), host-name verification unless
//! `ssl.endpoint.identification.algorithm=none`, and SNI with the broker's host name (rustls
//! sends none for an IP address, which it checks against the certificate's IP SANs). rustls
//! errors become [`TlsProblem`]s a person can act on.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::TlsProblem;
use crate::security::{EndpointIdentification, Security};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn setup(what: &str, path: &Path, e: impl std::fmt::Display) -> TlsProblem {
    TlsProblem::Setup(format!("{what} '{}': {e}", path.display()))
}

/// The rustls client configuration for `security`.
pub(crate) fn client_config(security: &Security) -> Result<Arc<ClientConfig>, TlsProblem> {
    let mut roots = RootCertStore::empty();
    match &security.ssl_ca_location {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| setup("cannot read ssl.ca.location", path, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| setup("cannot read ssl.ca.location", path, e))?;
            if certs.is_empty() {
                return Err(setup(
                    "ssl.ca.location",
                    path,
                    "no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| setup("a certificate in ssl.ca.location", path, e))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsProblem::Setup(e.to_string()))?;
    let builder = match security.ssl_endpoint_identification {
        EndpointIdentification::Https => builder.with_root_certificates(roots),
        EndpointIdentification::None => {
            // Warned once by BrokerConnection::connect (Security::warnings).
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsProblem::Setup(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostName(inner)))
        }
    };
    let config = match (
        &security.ssl_certificate_location,
        &security.ssl_key_location,
    ) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| setup("cannot read ssl.certificate.location", cert, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| setup("cannot read ssl.certificate.location", cert, e))?;
            if chain.is_empty() {
                return Err(setup(
                    "ssl.certificate.location",
                    cert,
                    "no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                ));
            }
            let key = private_key(key, security.ssl_key_password.as_ref())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsProblem::Setup(format!("the client certificate and key: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The PEM label of an encrypted PKCS#8 key (RFC 5958, RFC 7468).
const ENCRYPTED_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// The client's private key from `path`: a PEM PKCS#8, PKCS#1 RSA or SEC1 EC key, or an
/// encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`: PBES2, as `openssl pkcs8 -topk8 -v2
/// aes-256-cbc` and Java's tools write) decrypted with `ssl.key.password`. Errors name the
/// file and the setting to change, never the password.
pub(crate) fn private_key(
    path: &Path,
    password: Option<&crate::security::Secret>,
) -> Result<PrivateKeyDer<'static>, TlsProblem> {
    const WHAT: &str = "ssl.key.location";
    // A key file is a few KiB; a larger one is not a key.
    let meta =
        std::fs::metadata(path).map_err(|e| setup("cannot read ssl.key.location", path, e))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(setup(
            WHAT,
            path,
            "not a PEM key file (a regular file of at most 1 MiB)",
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| setup("cannot read ssl.key.location", path, e))?;
    let begin = format!("-----BEGIN {ENCRYPTED_LABEL}-----");
    let Some(start) = text.find(&begin) else {
        // OpenSSL's legacy encryption of a PKCS#1/SEC1 key (`Proc-Type: 4,ENCRYPTED`).
        if text.contains("Proc-Type: 4,ENCRYPTED") {
            return Err(setup(
                WHAT,
                path,
                "the key is encrypted the legacy OpenSSL way (Proc-Type: 4,ENCRYPTED), which \
                 kdirect does not read: convert it to an encrypted PKCS#8 key with \
                 `openssl pkcs8 -topk8 -v2 aes-256-cbc -in KEY -out KEY.p8`",
            ));
        }
        return PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| {
            setup(
                "cannot read a private key (PKCS#8, RSA or EC PEM) from ssl.key.location",
                path,
                e,
            )
        });
    };
    let Some(password) = password else {
        return Err(setup(
            WHAT,
            path,
            "the key is encrypted (ENCRYPTED PRIVATE KEY): set ssl.key.password \
             (KDIRECT_SSL_KEY_PASSWORD)",
        ));
    };
    let end = format!("-----END {ENCRYPTED_LABEL}-----");
    let block = text
        .get(start..)
        .and_then(|rest| rest.find(&end).and_then(|e| rest.get(..e + end.len())))
        .ok_or_else(|| setup(WHAT, path, format!("'{begin}' without its '{end}'")))?;
    let (label, doc) = pkcs8::Document::from_pem(block)
        .map_err(|e| setup(WHAT, path, format!("the encrypted key's PEM: {e}")))?;
    if label != ENCRYPTED_LABEL {
        return Err(setup(
            WHAT,
            path,
            format!("a PEM '{label}' block, not a key"),
        ));
    }
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes())
        .map_err(|e| setup(WHAT, path, format!("the encrypted key: {e}")))?;
    let wrong = || {
        setup(
            WHAT,
            path,
            "cannot decrypt the key with ssl.key.password: wrong password (or a key \
             encrypted with a cipher kdirect lacks: it reads PBES2 with PBKDF2 or scrypt \
             and AES-CBC)",
        )
    };
    let plain = info.decrypt(password.expose()).map_err(|e| match e {
        // A wrong password shows as bad padding after decryption (which pkcs5 0.7 reports
        // as EncryptFailed).
        pkcs8::Error::EncryptedPrivateKey(
            pkcs8::pkcs5::Error::DecryptFailed | pkcs8::pkcs5::Error::EncryptFailed,
        ) => wrong(),
        other => setup(WHAT, path, format!("cannot decrypt the key: {other}")),
    })?;
    // One wrong password in a few hundred still ends in valid padding: the bytes must then
    // parse as a PKCS#8 key.
    pkcs8::PrivateKeyInfo::try_from(plain.as_bytes()).map_err(|_| wrong())?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

/// The host part of `host:port` (`[v6]:port` too).
pub(crate) fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The TLS handshake over `tcp` with the broker at `addr`.
pub(crate) async fn handshake(
    tcp: TcpStream,
    addr: &str,
    config: Arc<ClientConfig>,
) -> Result<TlsStream<TcpStream>, TlsProblem> {
    let host = host_of(addr);
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| TlsProblem::Setup(format!("'{host}' is not a host name for TLS: {e}")))?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| handshake_problem(&e, host))
}

/// A failed handshake's problem: rustls's error if it has one, else the socket's.
fn handshake_problem(e: &io::Error, host: &str) -> TlsProblem {
    if let Some(p) = io_problem(e, host) {
        return p;
    }
    match e.kind() {
        // Kafka's plaintext listener reads the ClientHello's first bytes as a frame size
        // (hundreds of MB), refuses it and closes the socket.
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => TlsProblem::NotTls {
            detail: "it closed the connection during the TLS handshake".to_owned(),
        },
        _ => TlsProblem::Other(format!("TLS handshake failed: {e}")),
    }
}

/// The TLS problem inside an I/O error from a TLS stream, if it is one.
pub(crate) fn io_problem(e: &io::Error, host: &str) -> Option<TlsProblem> {
    let inner = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(problem(inner, host))
}

/// What a rustls error means for the person running kdirect.
pub(crate) fn problem(e: &rustls::Error, host: &str) -> TlsProblem {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => TlsProblem::UnknownCa,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsProblem::HostnameMismatch {
                    host: host.to_owned(),
                }
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsProblem::Expired
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                TlsProblem::NotYetValid
            }
            CertificateError::Revoked => TlsProblem::Revoked,
            other => TlsProblem::BadCertificate(format!("{other:?}")),
        },
        // Bytes that are not TLS records: a plaintext server answered.
        E::InvalidMessage(m) => TlsProblem::NotTls {
            detail: format!("it answered with bytes that are not TLS ({m:?})"),
        },
        E::AlertReceived(
            a @ (AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied),
        ) => TlsProblem::ClientCertificateRefused(format!("TLS alert {a:?}")),
        other => TlsProblem::Other(other.to_string()),
    }
}

/// `ssl.endpoint.identification.algorithm=none`: the chain is verified as usual, a name that
/// does not match is accepted.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // webpki checks the name last, after the chain and the dates.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_come_out_of_addresses() {
        assert_eq!(host_of("broker-1.example:9093"), "broker-1.example");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("bare"), "bare");
    }

    use crate::conn::{BrokerConnection, ConnConfig};
    use crate::ErrorKind;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    use tokio::io::AsyncReadExt;

    /// A test CA.
    fn ca() -> (rcgen::Certificate, KeyPair) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        (p.self_signed(&key).unwrap(), key)
    }

    /// A TLS server on loopback with a certificate for `names` signed by `ca` (expired when
    /// asked), which reads a little and closes: it speaks no Kafka. Returns its address.
    async fn tls_server(
        names: &[&str],
        ca: &(rcgen::Certificate, KeyPair),
        expired: bool,
    ) -> String {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut p = CertificateParams::new(names).unwrap();
        if expired {
            p.not_before = rcgen::date_time_ymd(2019, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca.0, &ca.1).unwrap();
        let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut s) = acceptor.accept(tcp).await {
                        let mut buf = [0u8; 64];
                        let _ = s.read(&mut buf).await;
                    }
                });
            }
        });
        addr
    }

    fn config_trusting(ca: &rcgen::Certificate, name: &str) -> ConnConfig {
        let dir = std::env::temp_dir().join(format!("kdirect-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ca.pem");
        std::fs::write(&path, ca.pem()).unwrap();
        let mut c = ConnConfig::default();
        c.security.set("security.protocol", "SSL").unwrap();
        c.security
            .set("ssl.ca.location", path.to_str().unwrap())
            .unwrap();
        c
    }

    async fn tls_problem_of(addr: &str, config: &ConnConfig) -> (TlsProblem, String) {
        let e = BrokerConnection::connect(addr, Some(7), config)
            .await
            .expect_err("the handshake must fail");
        let text = e.to_string();
        match e.into_kind() {
            ErrorKind::Tls { broker, problem } => {
                assert_eq!(broker.addr, addr);
                (problem, text)
            }
            other => panic!("not a TLS error: {other}"),
        }
    }

    #[tokio::test]
    async fn a_certificate_for_another_host_is_a_hostname_mismatch_unless_checks_are_off() {
        let ca = ca();
        let addr = tls_server(&["kafka.other.example"], &ca, false).await;
        let mut config = config_trusting(&ca.0, "mismatch");
        let (problem, text) = tls_problem_of(&addr, &config).await;
        assert_eq!(
            problem,
            TlsProblem::HostnameMismatch {
                host: "127.0.0.1".to_owned()
            },
            "{text}"
        );
        assert!(
            text.contains("broker 7 at 127.0.0.1:") && text.contains("not valid for '127.0.0.1'"),
            "{text}"
        );
        // ssl.endpoint.identification.algorithm=none: the handshake goes through (the
        // server then closes without answering Kafka).
        config
            .security
            .set("ssl.endpoint.identification.algorithm", "none")
            .unwrap();
        let e = BrokerConnection::connect(&addr, Some(7), &config)
            .await
            .expect_err("the server speaks no Kafka");
        assert!(matches!(e.kind(), ErrorKind::Disconnected { .. }), "{e}");
    }

    #[tokio::test]
    async fn an_expired_certificate_is_named() {
        let ca = ca();
        let addr = tls_server(&["127.0.0.1"], &ca, true).await;
        let (problem, text) = tls_problem_of(&addr, &config_trusting(&ca.0, "expired")).await;
        assert_eq!(problem, TlsProblem::Expired, "{text}");
        assert!(text.contains("has expired"), "{text}");
    }

    #[tokio::test]
    async fn a_private_ca_without_ssl_ca_location_is_an_unknown_ca() {
        let ca = ca();
        let addr = tls_server(&["127.0.0.1"], &ca, false).await;
        let mut config = ConnConfig::default();
        config.security.set("security.protocol", "SSL").unwrap();
        let (problem, text) = tls_problem_of(&addr, &config).await;
        assert_eq!(problem, TlsProblem::UnknownCa, "{text}");
        // And with the CA trusted, the same server passes the handshake.
        let e = BrokerConnection::connect(&addr, None, &config_trusting(&ca.0, "ok"))
            .await
            .expect_err("the server speaks no Kafka");
        assert!(matches!(e.kind(), ErrorKind::Disconnected { .. }), "{e}");
    }

    #[test]
    fn missing_or_empty_pem_files_are_named() {
        let mut s = Security::default();
        s.set("ssl.ca.location", "/nonexistent/ca.pem").unwrap();
        let e = client_config(&s).unwrap_err().to_string();
        assert!(
            e.contains("ssl.ca.location") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("kdirect-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        s.set("ssl.ca.location", empty.to_str().unwrap()).unwrap();
        let e = client_config(&s).unwrap_err().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn encrypted_pkcs8_keys_are_decrypted_with_ssl_key_password() {
        use pkcs8::der::pem::LineEnding;
        let dir = std::env::temp_dir().join(format!("kdirect-tls-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = KeyPair::generate().unwrap();
        let der = key.serialize_der();
        // OpenSSL's `pkcs8 -topk8 -v2 aes-256-cbc`: PBKDF2-SHA256, 2048 rounds, AES-256-CBC.
        let params = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(
            2048,
            b"salt5678",
            b"iv-of-16-bytes!!",
        )
        .unwrap();
        let encrypted = pkcs8::PrivateKeyInfo::try_from(der.as_slice())
            .unwrap()
            .encrypt_with_params(params, b"key-pass-123")
            .unwrap()
            .to_pem(ENCRYPTED_LABEL, LineEnding::LF)
            .unwrap();
        let path = dir.join("client.key.p8");
        // Text around the block, as `openssl pkcs12` writes ("Bag Attributes").
        std::fs::write(
            &path,
            format!("Bag Attributes\n    friendlyName: c\n{}", *encrypted),
        )
        .unwrap();
        let secret = crate::security::Secret::new;

        let k = private_key(&path, Some(&secret("key-pass-123"))).unwrap();
        assert_eq!(k.secret_der(), der.as_slice(), "the same key comes out");

        let shown = path.display().to_string();
        for (password, expect) in [
            (Some("not-the-pass-456"), "wrong password"),
            (None, "set ssl.key.password (KDIRECT_SSL_KEY_PASSWORD)"),
        ] {
            let e = private_key(&path, password.map(secret).as_ref())
                .unwrap_err()
                .to_string();
            assert!(e.contains(expect) && e.contains(&shown), "{e}");
            assert!(
                !e.contains("not-the-pass") && !e.contains("key-pass-123"),
                "{e}"
            );
        }
        // Through the client configuration, as a connection builds it.
        let cert = CertificateParams::new(vec!["client".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = dir.join("client.pem");
        std::fs::write(&cert_path, cert.pem()).unwrap();
        let mut s = Security::default();
        for (k, v) in [
            ("security.protocol", "SSL"),
            ("ssl.certificate.location", cert_path.to_str().unwrap()),
            ("ssl.key.location", path.to_str().unwrap()),
        ] {
            s.set(k, v).unwrap();
        }
        let e = client_config(&s).unwrap_err().to_string();
        assert!(e.contains("set ssl.key.password"), "{e}");
        s.set("ssl.key.password", "key-pass-123").unwrap();
        client_config(&s).unwrap();

        // A plain key is read as before, the password ignored; OpenSSL's legacy encryption
        // is named with the command that converts it.
        let plain = dir.join("plain.key");
        std::fs::write(&plain, key.serialize_pem()).unwrap();
        assert_eq!(
            private_key(&plain, Some(&secret("unused")))
                .unwrap()
                .secret_der(),
            der.as_slice()
        );
        let legacy = dir.join("legacy.key");
        std::fs::write(
            &legacy,
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = private_key(&legacy, Some(&secret("x")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("openssl pkcs8 -topk8") && e.contains("legacy.key"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
