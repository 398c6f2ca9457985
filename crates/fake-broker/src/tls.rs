//! TLS listeners: a certificate authority and a server certificate made in-process (rcgen),
//! served with rustls (the `ring` provider, as the engine uses).
//!
//! A test asks for [`FakeTls::new`] (a certificate valid for the names given) or one of the
//! broken variants a client must refuse ([`FakeTls::expired`]); the CA's PEM
//! ([`FakeTls::ca_pem`]) is what the client trusts (`ssl.ca.location`).
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

use crate::error::FakeError;

/// A CA and the server certificate it signed, for a fake cluster's TLS listeners
/// ([`FakeClusterBuilder::tls`](crate::FakeClusterBuilder::tls)).
#[derive(Clone)]
pub struct FakeTls {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key_der: Vec<u8>,
}

impl std::fmt::Debug for FakeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTls").finish_non_exhaustive()
    }
}

fn tls_error(what: &str, e: impl std::fmt::Display) -> FakeError {
    FakeError::Tls(format!("{what}: {e}"))
}

impl FakeTls {
    /// A fresh CA and a server certificate it signs for `names` (host names or IP addresses,
    /// e.g. `["127.0.0.1", "localhost"]`), valid from a day ago for a year.
    pub fn new(names: &[&str]) -> Result<FakeTls, FakeError> {
        Self::make(names, false)
    }

    /// The same, with a server certificate that expired (valid in 2019 only): a client must
    /// refuse it.
    pub fn expired(names: &[&str]) -> Result<FakeTls, FakeError> {
        Self::make(names, true)
    }

    fn make(names: &[&str], expired: bool) -> Result<FakeTls, FakeError> {
        let ca_key = KeyPair::generate().map_err(|e| tls_error("CA key", e))?;
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kdirect fake broker CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params
            .self_signed(&ca_key)
            .map_err(|e| tls_error("CA certificate", e))?;

        let key = KeyPair::generate().map_err(|e| tls_error("server key", e))?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("fake"));
        for name in names {
            let san = match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    (*name)
                        .try_into()
                        .map_err(|e| tls_error(&format!("host name {name:?}"), e))?,
                ),
            };
            params.subject_alt_names.push(san);
        }
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        } else {
            let now = std::time::SystemTime::now();
            params.not_before = (now - std::time::Duration::from_secs(86_400)).into();
            params.not_after = (now + std::time::Duration::from_secs(365 * 86_400)).into();
        }
        let cert = params
            .signed_by(&key, &ca, &ca_key)
            .map_err(|e| tls_error("server certificate", e))?;
        Ok(FakeTls {
            ca_pem: ca.pem(),
            chain: vec![cert.der().clone(), ca.der().clone()],
            key_der: key.serialize_der(),
        })
    }

    /// The CA certificate (PEM), for the client's `ssl.ca.location`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The rustls server configuration (no client certificates asked for): the fake
    /// cluster's TLS listeners, and a test's own TLS server (the stores' HTTPS tests).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, FakeError> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| tls_error("TLS versions", e))?
                .with_no_client_auth()
                .with_single_cert(self.chain.clone(), key)
                .map_err(|e| tls_error("server certificate and key", e))?;
        Ok(Arc::new(config))
    }
}
