//! One file per Kafka API, each saying which versions kdirect speaks and turning kdirect's
//! inputs into kafka-protocol requests and responses into kdirect's views.
//!
//! Versions are always explicit: pick them with [`crate::versions::BrokerVersions::negotiate`].

pub mod api_versions;
pub mod fetch;
pub mod find_coordinator;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

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
