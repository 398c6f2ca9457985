//! Security settings, by the names of the Java client and librdkafka: `security.protocol`,
//! `sasl.*` and `ssl.*`.
//!
//! [`Security`] is part of [`crate::conn::ConnConfig`]; every connection the engine opens
//! (bootstrap, leaders, the group coordinator) goes through
//! [`BrokerConnection::connect`](crate::conn::BrokerConnection::connect), which applies it:
//! TLS first (`SSL`, `SASL_SSL`; see `tls.rs`), then the ApiVersions handshake, then SASL (`SASL_PLAINTEXT`, `SASL_SSL`; see [`crate::sasl`]).
//! Secrets (`sasl.password`, `sasl.oauthbearer.token`, `ssl.key.password`) are held as [`Secret`], whose `Debug`
//! prints `<redacted>`, and never appear in an error.

use std::fmt;
use std::path::PathBuf;

use crate::error::{Error, ErrorKind};

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No TLS, no SASL (the default).
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Parses `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` (any case).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Self::Plaintext,
            "SSL" => Self::Ssl,
            "SASL_PLAINTEXT" => Self::SaslPlaintext,
            "SASL_SSL" => Self::SaslSsl,
            _ => return None,
        })
    }

    /// The setting's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether the connection is TLS.
    pub fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether the connection authenticates with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616): the password is sent as is; use it over TLS only.
    Plain,
    /// `SCRAM-SHA-256` (RFC 5802, RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER` (RFC 7628, KIP-255) with a static token (`sasl.oauthbearer.token`).
    OAuthBearer,
    /// `GSSAPI` (Kerberos V5, RFC 4752): a ticket from the default ticket cache
    /// (`KRB5CCNAME`) or from `sasl.kerberos.keytab`, for the broker's service principal
    /// `sasl.kerberos.service.name`/host. Only with the `gssapi` feature, which loads the
    /// system's GSSAPI library (`libgssapi_krb5.so.2`) when the first GSSAPI connection opens.
    Gssapi,
}

impl SaslMechanism {
    /// Parses a mechanism name (any case).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PLAIN" => Self::Plain,
            "SCRAM-SHA-256" => Self::ScramSha256,
            "SCRAM-SHA-512" => Self::ScramSha512,
            "OAUTHBEARER" => Self::OAuthBearer,
            "GSSAPI" => Self::Gssapi,
            _ => return None,
        })
    }

    /// The name the broker knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => "OAUTHBEARER",
            Self::Gssapi => "GSSAPI",
        }
    }
}

/// A password or token: `Debug` prints `<redacted>`, and nothing else prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The future a [`TokenProvider`] returns: a fresh OAUTHBEARER token, or why there is none.
pub type TokenFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Secret, String>> + Send>>;

/// An OAUTHBEARER token callback (the Java client's `sasl.login.callback.handler.class`, in
/// the library): called for every SASL authentication — of each new connection (bootstrap,
/// leaders, the group coordinator) and each re-authentication in place before the broker's
/// session lifetime ends (KIP-368) — so a token that expires is replaced by a fresh one.
#[derive(Clone)]
pub struct TokenProvider(std::sync::Arc<dyn Fn() -> TokenFuture + Send + Sync>);

impl TokenProvider {
    /// A provider calling `f`.
    pub fn new<F, Fut>(f: F) -> TokenProvider
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Secret, String>> + Send + 'static,
    {
        TokenProvider(std::sync::Arc::new(move || Box::pin(f()) as TokenFuture))
    }

    /// A fresh token.
    pub fn token(&self) -> TokenFuture {
        (self.0)()
    }
}

impl fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenProvider")
    }
}

/// Two providers are the same when they are the same callback.
impl PartialEq for TokenProvider {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TokenProvider {}

/// How connections are secured. The default is plaintext.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Security {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// `sasl.mechanism`; required with `SASL_*` (GSSAPI, the Java client's default, only
    /// with the `gssapi` feature).
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl.username` (PLAIN and SCRAM).
    pub sasl_username: Option<String>,
    /// `sasl.password` (PLAIN and SCRAM).
    pub sasl_password: Option<Secret>,
    /// `sasl.oauthbearer.token`: a static OAUTHBEARER token (a JWT).
    pub sasl_oauthbearer_token: Option<Secret>,
    /// An OAUTHBEARER token callback, asked for a fresh token at every authentication (it
    /// takes precedence over `sasl.oauthbearer.token`).
    pub sasl_oauthbearer_token_provider: Option<TokenProvider>,
    /// `sasl.kerberos.service.name` (GSSAPI): the primary of the brokers' Kerberos principal,
    /// `kafka` in `kafka/broker1.example.com@REALM`; required, as in the Java client.
    pub sasl_kerberos_service_name: Option<String>,
    /// `sasl.kerberos.keytab` (GSSAPI, librdkafka's name): log in as
    /// `sasl.kerberos.principal` with this keytab instead of using the ticket cache. The
    /// tickets are kept in memory, in this process only; the ticket cache is not touched.
    pub sasl_kerberos_keytab: Option<PathBuf>,
    /// `sasl.kerberos.principal` (GSSAPI, librdkafka's name): the client's principal
    /// (`alice@EXAMPLE.COM`); required with a keytab. Without one, the ticket cache must hold
    /// this principal's tickets (by default: whichever principal the cache holds).
    pub sasl_kerberos_principal: Option<String>,
    /// `ssl.ca.location`: a PEM file of CA certificates to trust instead of the built-in
    /// roots (Mozilla's, from `webpki-roots`).
    pub ssl_ca_location: Option<PathBuf>,
    /// `ssl.certificate.location`: the client's certificate chain (PEM), for mutual TLS.
    pub ssl_certificate_location: Option<PathBuf>,
    /// `ssl.key.location`: the client's private key (PEM: PKCS#8, RSA or EC, or an encrypted
    /// PKCS#8 key with `ssl.key.password`).
    pub ssl_key_location: Option<PathBuf>,
    /// `ssl.key.password`: the password of an encrypted `ssl.key.location` (PEM
    /// `ENCRYPTED PRIVATE KEY`).
    pub ssl_key_password: Option<Secret>,
    /// `ssl.endpoint.identification.algorithm`: `https` (the default, `true`) checks that the
    /// broker's certificate names the host connected to; `none` (`false`) skips that check
    /// (the chain is still verified) and prints a warning.
    pub ssl_endpoint_identification: EndpointIdentification,
}

/// `ssl.endpoint.identification.algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EndpointIdentification {
    /// `https`: the certificate must name the broker's host (the default).
    #[default]
    Https,
    /// `none`: the host name is not checked.
    None,
}

/// The keys [`Security::set`] knows, in the order the documentation lists them.
pub const KEYS: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.token",
    "sasl.kerberos.service.name",
    "sasl.kerberos.keytab",
    "sasl.kerberos.principal",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
];

/// The keys whose values are secrets.
pub const SECRET_KEYS: &[&str] = &[
    "sasl.password",
    "sasl.oauthbearer.token",
    "ssl.key.password",
];

impl Security {
    /// What these settings leave open, one line each, for a connection to `host` (empty:
    /// nothing to say): PLAIN's password or OAUTHBEARER's token over `SASL_PLAINTEXT` to a
    /// host that is not loopback (SCRAM never sends the password), and a TLS connection whose
    /// certificate is not checked against the host name
    /// (`ssl.endpoint.identification.algorithm=none`) — with Mozilla's roots, any publicly
    /// issued certificate for any host. Each names the setting that closes it.
    pub fn warnings(&self, host: &str) -> Vec<String> {
        let mut out = Vec::new();
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if self.protocol == SecurityProtocol::SaslPlaintext && !loopback {
            match self.sasl_mechanism {
                Some(SaslMechanism::Plain) => out.push(
                    "security.protocol=SASL_PLAINTEXT with sasl.mechanism=PLAIN sends the password \
                     (and every record) in clear text: use SASL_SSL"
                        .to_owned(),
                ),
                Some(SaslMechanism::OAuthBearer) => out.push(
                    "security.protocol=SASL_PLAINTEXT with sasl.mechanism=OAUTHBEARER sends the \
                     token (and every record) in clear text: use SASL_SSL"
                        .to_owned(),
                ),
                _ => {}
            }
        }
        if self.protocol.tls() && self.ssl_endpoint_identification == EndpointIdentification::None {
            out.push(match self.ssl_ca_location {
                Some(_) => "ssl.endpoint.identification.algorithm=none: brokers' certificates \
                            are checked against ssl.ca.location but not against their host names"
                    .to_owned(),
                None => "ssl.endpoint.identification.algorithm=none without ssl.ca.location: \
                         any certificate a public CA issued, for any host, is accepted as the \
                         broker's; set ssl.ca.location to your CA, or leave the host-name check on"
                    .to_owned(),
            });
        }
        out
    }

    /// Applies one setting by its Kafka name. `Ok(false)`: `key` is not a security setting.
    /// The error never quotes a secret's value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, Error> {
        let bad = |what: &str| -> Error {
            ErrorKind::Config(format!("{key}: '{value}' is not {what}")).into()
        };
        let path = |v: &str| (!v.is_empty()).then(|| PathBuf::from(v));
        match key {
            "security.protocol" => {
                self.protocol = SecurityProtocol::parse(value)
                    .ok_or_else(|| bad("PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"))?;
            }
            "sasl.mechanism" => {
                let m = SaslMechanism::parse(value).ok_or_else(|| {
                    bad("PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI")
                })?;
                if m == SaslMechanism::Gssapi && !GSSAPI_BUILT {
                    return Err(ErrorKind::Config(GSSAPI_NOT_BUILT.to_owned()).into());
                }
                self.sasl_mechanism = Some(m);
            }
            "sasl.username" => self.sasl_username = Some(value.to_owned()),
            "sasl.password" => self.sasl_password = Some(Secret::new(value)),
            "sasl.oauthbearer.token" => self.sasl_oauthbearer_token = Some(Secret::new(value)),
            "sasl.kerberos.service.name" => {
                self.sasl_kerberos_service_name = (!value.is_empty()).then(|| value.to_owned())
            }
            "sasl.kerberos.keytab" => self.sasl_kerberos_keytab = path(value),
            "sasl.kerberos.principal" => {
                self.sasl_kerberos_principal = (!value.is_empty()).then(|| value.to_owned())
            }
            "ssl.ca.location" => self.ssl_ca_location = path(value),
            "ssl.certificate.location" => self.ssl_certificate_location = path(value),
            "ssl.key.location" => self.ssl_key_location = path(value),
            "ssl.key.password" => {
                self.ssl_key_password = (!value.is_empty()).then(|| Secret::new(value))
            }
            "ssl.endpoint.identification.algorithm" => {
                self.ssl_endpoint_identification = match value.to_ascii_lowercase().as_str() {
                    "https" => EndpointIdentification::Https,
                    "none" | "" => EndpointIdentification::None,
                    _ => return Err(bad("https or none")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks that the settings go together (a SASL protocol has a mechanism and its
    /// credentials; a client certificate has its key).
    pub fn check(&self) -> Result<(), Error> {
        let config = |m: String| -> Error { ErrorKind::Config(m).into() };
        let p = self.protocol.as_str();
        if self.sasl_mechanism == Some(SaslMechanism::Gssapi) && !GSSAPI_BUILT {
            return Err(config(GSSAPI_NOT_BUILT.to_owned()));
        }
        if self.protocol.sasl() {
            let Some(m) = self.sasl_mechanism else {
                return Err(config(format!(
                    "security.protocol={p} needs sasl.mechanism (PLAIN, SCRAM-SHA-256, \
                     SCRAM-SHA-512, OAUTHBEARER or GSSAPI)"
                )));
            };
            match m {
                SaslMechanism::Gssapi => self.check_gssapi()?,
                SaslMechanism::OAuthBearer => {
                    if self.sasl_oauthbearer_token.is_none()
                        && self.sasl_oauthbearer_token_provider.is_none()
                    {
                        return Err(config(
                            "sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token (or, in \
                             the library, a token callback)"
                                .to_owned(),
                        ));
                    }
                }
                _ => {
                    if self.sasl_username.is_none() || self.sasl_password.is_none() {
                        return Err(config(format!(
                            "sasl.mechanism={} needs sasl.username and sasl.password",
                            m.name()
                        )));
                    }
                }
            }
        }
        if self.ssl_certificate_location.is_some() != self.ssl_key_location.is_some() {
            return Err(config(
                "ssl.certificate.location and ssl.key.location go together (mutual TLS)".to_owned(),
            ));
        }
        Ok(())
    }
}

/// Whether this build speaks GSSAPI (the `gssapi` feature).
const GSSAPI_BUILT: bool = cfg!(feature = "gssapi");

/// The error for `sasl.mechanism=GSSAPI` in a build without it.
const GSSAPI_NOT_BUILT: &str = "sasl.mechanism=GSSAPI (Kerberos) needs kdirect built with the \
     `gssapi` feature (cargo build --features kdirect/gssapi; it loads the system's GSSAPI \
     library, libgssapi_krb5.so.2 from MIT Kerberos, when a GSSAPI connection opens)";

impl Security {
    /// GSSAPI's settings: the service name, and a keytab goes with its principal.
    fn check_gssapi(&self) -> Result<(), Error> {
        let config = |m: &str| -> Error { ErrorKind::Config(m.to_owned()).into() };
        if self.sasl_kerberos_service_name.is_none() {
            return Err(config(
                "sasl.mechanism=GSSAPI needs sasl.kerberos.service.name: the primary of the \
                 brokers' Kerberos principal (`kafka` for kafka/HOST@REALM), as the broker's \
                 sasl.kerberos.service.name says",
            ));
        }
        if let Some(keytab) = &self.sasl_kerberos_keytab {
            if self.sasl_kerberos_principal.is_none() {
                return Err(config(
                    "sasl.kerberos.keytab needs sasl.kerberos.principal: the client principal \
                     to log in as with it (`klist -k KEYTAB` lists those it holds)",
                ));
            }
            if let Err(e) = std::fs::metadata(keytab) {
                return Err(ErrorKind::Config(format!(
                    "sasl.kerberos.keytab: {}: {e}",
                    keytab.display()
                ))
                .into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36: PLAIN and OAUTHBEARER over SASL_PLAINTEXT, and no host-name check, each have
    /// their one-line warning (the first was silent; the second said nothing of the public
    /// roots); SCRAM, loopback and the defaults have none.
    #[test]
    fn settings_that_leave_something_open_are_named() {
        let with = |pairs: &[(&str, &str)]| {
            let mut s = Security::default();
            for (k, v) in pairs {
                s.set(k, v).unwrap();
            }
            s
        };
        let plain = with(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "S3CRETPW"),
        ]);
        let w = plain.warnings("kafka.example.com");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("sends the password") && w[0].contains("SASL_SSL"),
            "{w:?}"
        );
        assert!(!w[0].contains("S3CRETPW"));
        assert!(plain.warnings("127.0.0.1").is_empty());
        assert!(plain.warnings("localhost").is_empty());
        let oauth = with(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.token", "t"),
        ]);
        assert!(oauth.warnings("10.0.0.1")[0].contains("sends the token"));
        let scram = with(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
        ]);
        assert!(scram.warnings("10.0.0.1").is_empty());
        let none = with(&[
            ("security.protocol", "SSL"),
            ("ssl.endpoint.identification.algorithm", "none"),
        ]);
        let w = none.warnings("127.0.0.1");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("any certificate a public CA issued"), "{w:?}");
        let none_ca = with(&[
            ("security.protocol", "SASL_SSL"),
            ("ssl.endpoint.identification.algorithm", ""),
            ("ssl.ca.location", "/etc/ca.pem"),
        ]);
        assert!(none_ca.warnings("h")[0].contains("checked against ssl.ca.location"));
        assert!(Security::default().warnings("h").is_empty());
        assert!(with(&[("security.protocol", "SSL")])
            .warnings("h")
            .is_empty());
    }

    #[test]
    fn keys_parse_and_secrets_never_print() {
        let mut s = Security::default();
        for (k, v) in [
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "hunter2-secret"),
            ("sasl.oauthbearer.token", "tok-secret"),
            ("ssl.key.password", "keypass-secret"),
            ("ssl.ca.location", "/etc/ca.pem"),
            ("ssl.endpoint.identification.algorithm", "none"),
        ] {
            assert!(s.set(k, v).unwrap(), "{k}");
        }
        assert!(!s.set("fetch.max.bytes", "1").unwrap());
        assert_eq!(s.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(s.sasl_mechanism, Some(SaslMechanism::ScramSha512));
        assert_eq!(s.sasl_password.as_ref().unwrap().expose(), "hunter2-secret");
        assert_eq!(s.ssl_endpoint_identification, EndpointIdentification::None);
        s.check().unwrap();
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("hunter2")
                && !debug.contains("tok-secret")
                && !debug.contains("keypass-secret"),
            "{debug}"
        );
        assert!(
            debug.contains("<redacted>") && debug.contains("alice"),
            "{debug}"
        );
    }

    #[test]
    fn bad_values_and_missing_settings_are_named() {
        let mut s = Security::default();
        let e = s.set("security.protocol", "TLS").unwrap_err().to_string();
        assert!(
            e.contains("security.protocol") && e.contains("SASL_SSL"),
            "{e}"
        );
        let e = s.set("sasl.mechanism", "KERBEROS").unwrap_err().to_string();
        assert!(e.contains("GSSAPI"), "{e}");
        s.set("security.protocol", "SASL_PLAINTEXT").unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("needs sasl.mechanism"), "{e}");
        s.set("sasl.mechanism", "PLAIN").unwrap();
        s.set("sasl.username", "alice").unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("sasl.password"), "{e}");
        s.set("sasl.password", "x").unwrap();
        s.set("ssl.certificate.location", "/c.pem").unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("ssl.key.location"), "{e}");
    }

    /// Without the `gssapi` feature, GSSAPI is a configuration error that says which feature
    /// to build with, whether set by name or in the struct.
    #[cfg(not(feature = "gssapi"))]
    #[test]
    fn gssapi_without_the_feature_names_the_feature() {
        let mut s = Security::default();
        let e = s.set("sasl.mechanism", "GSSAPI").unwrap_err().to_string();
        assert!(
            e.contains("`gssapi` feature") && e.contains("--features kdirect/gssapi"),
            "{e}"
        );
        s.protocol = SecurityProtocol::SaslPlaintext;
        s.sasl_mechanism = Some(SaslMechanism::Gssapi);
        s.sasl_kerberos_service_name = Some("kafka".to_owned());
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("`gssapi` feature"), "{e}");
    }

    /// GSSAPI's settings: the service name is required (as in the Java client), a keytab
    /// needs its principal and must exist; the ticket cache needs neither.
    #[cfg(feature = "gssapi")]
    #[test]
    fn gssapi_settings_are_checked() {
        let mut s = Security::default();
        s.set("security.protocol", "SASL_PLAINTEXT").unwrap();
        s.set("sasl.mechanism", "gssapi").unwrap();
        assert_eq!(s.sasl_mechanism, Some(SaslMechanism::Gssapi));
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("sasl.kerberos.service.name"), "{e}");
        s.set("sasl.kerberos.service.name", "kafka").unwrap();
        s.check().unwrap();
        let keytab = std::env::temp_dir().join(format!("kdirect-{}.keytab", std::process::id()));
        s.set("sasl.kerberos.keytab", keytab.to_str().unwrap())
            .unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("needs sasl.kerberos.principal"), "{e}");
        s.set("sasl.kerberos.principal", "alice@EXAMPLE.COM")
            .unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains(keytab.to_str().unwrap()), "{e}");
        std::fs::write(&keytab, b"").unwrap();
        let checked = s.check();
        std::fs::remove_file(&keytab).unwrap();
        checked.unwrap();
        assert!(KEYS.contains(&"sasl.kerberos.keytab"));
        // No secret in these settings, and no warning over SASL_PLAINTEXT (tickets are not
        // replayable credentials, as SCRAM's proof is not).
        assert!(s.warnings("10.0.0.1").is_empty());
    }
}
