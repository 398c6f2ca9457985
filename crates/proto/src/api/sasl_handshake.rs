//! SaslHandshake (key 17), versions 0–1: pick a SASL mechanism and learn the listener's
//! mechanisms (KIP-43).
//!
//! v0 sent the SASL tokens as raw, unframed bytes after the handshake; v1 (KIP-152) wraps
//! them in SaslAuthenticate requests, which is the only way kdirect speaks: it asks for v1.
//! An UNSUPPORTED_SASL_MECHANISM answer lists what the listener enables.

use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};

use super::api;
use crate::read::{Reader, Res};

api!(
    /// SaslHandshake: choose the SASL mechanism.
    SaslHandshake, SaslHandshake, SaslHandshakeRequest, SaslHandshakeResponse, 0, 1
);

/// The request for `mechanism` (`PLAIN`, `SCRAM-SHA-256`, …).
pub fn request(mechanism: &str) -> SaslHandshakeRequest {
    SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.to_owned()))
}

/// No version of SaslHandshake is flexible.
pub const FIRST_FLEXIBLE_VERSION: i16 = i16::MAX;

/// Checks a SaslHandshake response body with every count bounded by the bytes that remain.
pub(crate) fn check(r: &mut Reader<'_>, _version: i16) -> Res<()> {
    r.i16("error_code")?;
    let n = r.count(2, "mechanisms count")?;
    for _ in 0..n {
        r.str("mechanism")?;
    }
    Ok(())
}
