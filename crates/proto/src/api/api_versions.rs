//! ApiVersions (key 18), versions 0–4 (KIP-35, KIP-511 adds the client software name/version
//! at v3, flexible from v3).
//!
//! The response header is always v0, whatever the request version, so a client can read the
//! answer of a broker that does not know the version it asked for. Such a broker answers
//! `UNSUPPORTED_VERSION` with a v0-shaped body listing its ranges; [`decode`] turns that into
//! [`ApiVersionsOutcome::RetryAt`] with the version to retry at.

use bytes::Bytes;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use super::api;
use crate::code::ErrorCode;
use crate::error::ProtoError;
use crate::message::{decode_response_with_header, Api};

api!(
    /// ApiVersions: which versions of each API the broker speaks.
    ApiVersions, ApiVersions, ApiVersionsRequest, ApiVersionsResponse, 0, 4
);

/// The request, naming kdirect and its version (KIP-511; ignored below v3).
pub fn request() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("kdirect"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")))
}

/// What an ApiVersions answer means for the handshake.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiVersionsOutcome {
    /// The broker answered at the requested version.
    Supported(ApiVersionsResponse),
    /// The broker does not speak the requested version: ask again at this one.
    RetryAt(i16),
}

/// Decodes an ApiVersions response frame body sent in answer to a request at `version`.
pub fn decode(frame: Bytes, version: i16) -> Result<(i32, ApiVersionsOutcome), ProtoError> {
    // Header v0 always; the error code is the first body field at every version.
    let error = frame
        .get(4..6)
        .map(|b| ErrorCode(i16::from_be_bytes([b[0], b[1]])));
    if error == Some(ErrorCode::UNSUPPORTED_VERSION) && version > 0 {
        let (cid, v0) = decode_response_with_header::<ApiVersions>(frame, 0, 0)?;
        let ours = ApiVersions::VERSIONS;
        let retry = v0
            .api_keys
            .iter()
            .find(|k| k.api_key == ApiVersions::KEY as i16)
            .map_or(0, |k| k.max_version.min(ours.max).max(0));
        // Never ask again at the same or a higher version: that would loop.
        let retry = if retry >= version { 0 } else { retry };
        return Ok((cid, ApiVersionsOutcome::RetryAt(retry)));
    }
    let (cid, resp) = decode_response_with_header::<ApiVersions>(frame, version, 0)?;
    Ok((cid, ApiVersionsOutcome::Supported(resp)))
}
