//! One file per Kafka API, each saying which versions it speaks. `SUPPORTED` is exactly what
//! ApiVersions advertises.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]

use std::sync::Arc;

use kafka_protocol::messages::ApiKey;

use crate::state::Shared;

pub(crate) mod api_versions;
pub(crate) mod fetch;
pub(crate) mod group;
pub(crate) mod list_offsets;
pub(crate) mod metadata;
pub(crate) mod produce;
pub(crate) mod sasl;

/// (API, min version, max version) — what the fake broker implements and advertises.
pub(crate) const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 5),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The version range the fake broker speaks for `key`.
pub(crate) fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// What a handler needs: the cluster, which broker it runs as, the request version.
pub(crate) struct Ctx<'a> {
    pub shared: &'a Arc<Shared>,
    pub broker: i32,
    pub version: i16,
}
