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
use crate::message::{decode_response_with_header, peek_correlation_id, Api};
use crate::read::{Reader, Res};

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
        .get(4..)
        .and_then(<[u8]>::first_chunk::<2>)
        .map(|b| ErrorCode(i16::from_be_bytes(*b)));
    if error == Some(ErrorCode::UNSUPPORTED_VERSION) && version > 0 {
        // Kafka brokers write this answer v0-shaped; librdkafka's mock cluster (2.12) writes
        // it in the requested version's shape with a wrong array count. Read whichever
        // parses, and take the broker's ApiVersions range from it if it is there.
        let cid = peek_correlation_id(&frame).unwrap_or(-1);
        let listed = decode_response_with_header::<ApiVersions>(frame.clone(), 0, 0)
            .or_else(|_| decode_response_with_header::<ApiVersions>(frame, version, 0))
            .ok()
            .and_then(|(_, body)| {
                body.api_keys
                    .iter()
                    .find(|k| k.api_key == ApiVersions::KEY as i16)
                    .map(|k| k.max_version)
            });
        let ours = ApiVersions::VERSIONS;
        let retry = listed.map_or(0, |max| max.min(ours.max).max(0));
        // Never ask again at the same or a higher version: that would loop.
        let retry = if retry >= version { 0 } else { retry };
        return Ok((cid, ApiVersionsOutcome::RetryAt(retry)));
    }
    let (cid, resp) = decode_response_with_header::<ApiVersions>(frame, version, 0)?;
    Ok((cid, ApiVersionsOutcome::Supported(resp)))
}

/// The first flexible version (KIP-482); the response header stays v0 regardless.
pub const FIRST_FLEXIBLE_VERSION: i16 = 3;

/// Checks an ApiVersions response body against its schema with every count and length bounded
/// by the bytes that remain, so that kafka-protocol's decoder, run after it, allocates in
/// proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    r.i16("error_code")?;
    let n = r.count(6 + r.tags_size(), "api_keys count")?;
    for _ in 0..n {
        r.i16("api_key")?;
        r.i16("min_version")?;
        r.i16("max_version")?;
        r.skip_tags("api_keys tagged fields")?;
    }
    if version >= 1 {
        r.i32("throttle_time_ms")?;
    }
    r.tags("response tagged fields", |tag, t| {
        match tag {
            // supported_features / finalized_features: name, two int16s (KIP-584).
            0 | 2 => {
                let n = t.count(1 + 2 + 2 + 1, "features count")?;
                for _ in 0..n {
                    t.str("feature name")?;
                    t.i16("feature version")?;
                    t.i16("feature version")?;
                    t.skip_tags("feature tagged fields")?;
                }
            }
            1 => {
                t.i64("finalized_features_epoch")?;
            }
            3 => {
                t.bool("zk_migration_ready")?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use super::*;

    /// Bytes librdkafka 2.12.1's mock cluster sent in answer to an ApiVersions v4 request
    /// (captured by kdirect's connection in `tests/it/cluster.rs`): header v0 with
    /// correlation id 0, error 35, a one-byte array count of 1 (which says "0 entries" in
    /// compact encoding) followed by one entry (ApiVersions 0..2), tags, throttle time.
    const MOCK_UNSUPPORTED: &[u8] = &[
        0x00, 0x00, 0x00, 0x00, 0x00, 0x23, 0x01, 0x00, 0x12, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00,
    ];

    #[test]
    fn unsupported_version_from_librdkafka_mock_retries_lower() {
        let (cid, out) = decode(Bytes::from_static(MOCK_UNSUPPORTED), 4).unwrap();
        assert_eq!(cid, 0);
        assert_eq!(out, ApiVersionsOutcome::RetryAt(0));
    }

    /// A v0-shaped UNSUPPORTED_VERSION answer, as the Java broker writes it
    /// (`ApiVersionsResponse` v0 per the protocol guide: error_code, [api_key min max]):
    /// correlation id 7, error 35, one entry ApiVersions 0..3.
    #[test]
    fn unsupported_version_v0_shaped_retries_at_brokers_max() {
        let bytes: &[u8] = &[0, 0, 0, 7, 0, 35, 0, 0, 0, 1, 0, 18, 0, 0, 0, 3];
        let (cid, out) = decode(Bytes::from_static(bytes), 4).unwrap();
        assert_eq!(cid, 7);
        assert_eq!(out, ApiVersionsOutcome::RetryAt(3));
        // Asked at 3 already: go to 0 rather than loop.
        let (_, out) = decode(Bytes::from_static(bytes), 3).unwrap();
        assert_eq!(out, ApiVersionsOutcome::RetryAt(0));
    }
}
