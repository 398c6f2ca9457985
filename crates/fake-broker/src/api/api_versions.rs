//! ApiVersions v0–v3 (KIP-35, KIP-511). An unknown version gets UNSUPPORTED_VERSION with the
//! supported ranges in a v0 body, as a real broker answers, so the client can retry at v0.
//! The response header is always v0.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;

use super::SUPPORTED;
use crate::codes;
use crate::wire::{encode_response, Chunks, WireError};

pub(crate) fn handle(correlation_id: i32, version: i16) -> Result<Chunks, WireError> {
    let (lo, hi) =
        super::supported(kafka_protocol::messages::ApiKey::ApiVersions).unwrap_or((0, 0));
    let (error_code, version) = if version < lo || version > hi {
        (codes::UNSUPPORTED_VERSION, 0)
    } else {
        (codes::NONE, version)
    };
    let api_keys = SUPPORTED
        .iter()
        .map(|(k, min, max)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let resp = ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys);
    encode_response(correlation_id, version, &resp)
}
