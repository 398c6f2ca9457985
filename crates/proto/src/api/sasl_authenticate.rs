//! SaslAuthenticate (key 36), versions 0–2: one SASL token each way (KIP-152).
//!
//! v1 adds `session_lifetime_ms` (KIP-368: the broker closes a connection whose session
//! expired unless the client re-authenticates before); v2 is the first flexible version.
//! A failed authentication answers SASL_AUTHENTICATION_FAILED with the broker's reason in
//! `error_message`, and the broker then closes the connection.

use bytes::Bytes;

pub use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};

use super::api;
use crate::read::{Reader, Res};

api!(
    /// SaslAuthenticate: a SASL token each way.
    SaslAuthenticate, SaslAuthenticate, SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2
);

/// The request carrying `token`.
pub fn request(token: Vec<u8>) -> SaslAuthenticateRequest {
    SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token))
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 2;

/// Checks a SaslAuthenticate response body with every length bounded by the bytes that remain.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    r.i16("error_code")?;
    r.nullable_str("error_message")?;
    if r.nullable_bytes("auth_bytes")?.is_none() {
        return Err(r.error_at(r.position(), "auth_bytes: null where a value is required"));
    }
    if version >= 1 {
        r.i64("session_lifetime_ms")?;
    }
    r.skip_tags("response tagged fields")
}
