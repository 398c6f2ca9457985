//! One file per Kafka API, each saying which versions kdirect speaks and turning kdirect's
//! inputs into kafka-protocol requests and responses into kdirect's views.
//!
//! Versions are always explicit: pick them with [`crate::versions::BrokerVersions::negotiate`].

pub mod api_versions;
pub mod consumer_group_heartbeat;
pub mod consumer_protocol;
pub mod describe_groups;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod join_group;
pub mod leave_group;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;

use kafka_protocol::messages::{ApiKey, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::read::{Reader, Res};

/// Declares a marker type implementing [`crate::message::Api`].
macro_rules! api {
    ($(#[$doc:meta])* $name:ident, $key:ident, $req:ty, $resp:ty, $min:expr, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;
        impl $name {
            /// The versions kdirect speaks, as a value.
            pub const VERSIONS_RANGE: kafka_protocol::protocol::VersionRange =
                kafka_protocol::protocol::VersionRange { min: $min, max: $max };
        }
        impl crate::message::Api for $name {
            const KEY: kafka_protocol::messages::ApiKey = kafka_protocol::messages::ApiKey::$key;
            const VERSIONS: kafka_protocol::protocol::VersionRange = Self::VERSIONS_RANGE;
            type Request = $req;
            type Response = $resp;
        }
    };
}
pub(crate) use api;

/// The first flexible version of `key`'s response (KIP-482), for the APIs kdirect speaks.
pub(crate) fn first_flexible_version(key: ApiKey) -> Option<i16> {
    Some(match key {
        ApiKey::ApiVersions => api_versions::FIRST_FLEXIBLE_VERSION,
        ApiKey::Metadata => metadata::FIRST_FLEXIBLE_VERSION,
        ApiKey::ListOffsets => list_offsets::FIRST_FLEXIBLE_VERSION,
        ApiKey::Fetch => fetch::FIRST_FLEXIBLE_VERSION,
        ApiKey::FindCoordinator => find_coordinator::FIRST_FLEXIBLE_VERSION,
        ApiKey::OffsetCommit => offset_commit::FIRST_FLEXIBLE_VERSION,
        ApiKey::OffsetFetch => offset_fetch::FIRST_FLEXIBLE_VERSION,
        ApiKey::OffsetForLeaderEpoch => offset_for_leader_epoch::FIRST_FLEXIBLE_VERSION,
        ApiKey::SaslHandshake => sasl_handshake::FIRST_FLEXIBLE_VERSION,
        ApiKey::SaslAuthenticate => sasl_authenticate::FIRST_FLEXIBLE_VERSION,
        ApiKey::JoinGroup => join_group::FIRST_FLEXIBLE_VERSION,
        ApiKey::SyncGroup => sync_group::FIRST_FLEXIBLE_VERSION,
        ApiKey::Heartbeat => heartbeat::FIRST_FLEXIBLE_VERSION,
        ApiKey::LeaveGroup => leave_group::FIRST_FLEXIBLE_VERSION,
        ApiKey::DescribeGroups => describe_groups::FIRST_FLEXIBLE_VERSION,
        ApiKey::ConsumerGroupHeartbeat => consumer_group_heartbeat::FIRST_FLEXIBLE_VERSION,
        _ => return None,
    })
}

/// Checks a response body of `key` at `version` with kdirect's bounded reader (positioned
/// after the header), before kafka-protocol decodes it: see the crate docs. An API without a
/// bounded reader is refused rather than handed over unchecked.
pub(crate) fn check_body(key: ApiKey, version: i16, r: &mut Reader<'_>) -> Res<()> {
    let no_reader = |r: &Reader<'_>| {
        r.error_at(
            r.position(),
            format!("kdirect-proto has no bounded reader for {key:?} responses"),
        )
    };
    let Some(flexible_from) = first_flexible_version(key) else {
        return Err(no_reader(r));
    };
    r.flexible = version >= flexible_from;
    match key {
        ApiKey::ApiVersions => api_versions::check(r, version),
        ApiKey::Metadata => metadata::walk(r, version, false).map(drop),
        ApiKey::ListOffsets => list_offsets::walk(r, version, false).map(drop),
        ApiKey::Fetch => fetch::walk(r, version, None).map(drop),
        ApiKey::FindCoordinator => find_coordinator::check(r, version),
        ApiKey::OffsetCommit => offset_commit::check(r, version),
        ApiKey::SaslHandshake => sasl_handshake::check(r, version),
        ApiKey::SaslAuthenticate => sasl_authenticate::check(r, version),
        ApiKey::OffsetFetch => offset_fetch::check(r, version),
        ApiKey::OffsetForLeaderEpoch => offset_for_leader_epoch::walk(r, false).map(drop),
        ApiKey::JoinGroup => join_group::check(r, version),
        ApiKey::SyncGroup => sync_group::check(r, version),
        ApiKey::Heartbeat => heartbeat::check(r, version),
        ApiKey::LeaveGroup => leave_group::check(r, version),
        ApiKey::DescribeGroups => describe_groups::check(r, version),
        ApiKey::ConsumerGroupHeartbeat => consumer_group_heartbeat::check(r, version),
        // first_flexible_version and this match list the same keys; one added to the first
        // and not here is refused, never read with another API's schema.
        _ => Err(no_reader(r)),
    }
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// Isolation level of Fetch and ListOffsets (KIP-98).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IsolationLevel {
    /// See every record up to the high watermark (the Java client's default).
    #[default]
    ReadUncommitted,
    /// See records up to the last stable offset; aborted transactions are reported.
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value.
    pub fn as_i8(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}
