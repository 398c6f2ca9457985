//! The protocol layer's error type.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

use crate::api::consumer_protocol::ConsumerMessage;

/// What went wrong turning messages into bytes or bytes into messages.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// kdirect does not speak this version of the API (a caller bug, or a negotiation bypass).
    #[error("{api:?} v{version} is outside the versions kdirect speaks ({supported})")]
    VersionNotSpoken {
        /// The API.
        api: ApiKey,
        /// The version asked for.
        version: i16,
        /// What kdirect speaks.
        supported: VersionRange,
    },
    /// Broker and client share no version of an API.
    #[error("no common version for {api:?}: kdirect speaks {ours}, the broker {}", theirs.map_or_else(|| "does not support it at all".to_string(), |t| format!("speaks {t}")))]
    NoCommonVersion {
        /// The API.
        api: ApiKey,
        /// What kdirect speaks.
        ours: VersionRange,
        /// What the broker advertised, `None` if it did not list the API.
        theirs: Option<VersionRange>,
    },
    /// A message could not be encoded.
    #[error("cannot encode {api:?} v{version} request: {reason}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// Why.
        reason: String,
    },
    /// A response could not be decoded.
    #[error(
        "malformed {api:?} v{version} response ({len} bytes, failed at byte {position}): {reason}"
    )]
    Decode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// Length of the frame body.
        len: usize,
        /// How far decoding had come (bytes consumed from the start of the frame body).
        position: usize,
        /// Why.
        reason: String,
    },
    /// A response references something the request did not ask for, or lacks something it
    /// must contain.
    #[error("inconsistent {api:?} response: {reason}")]
    Inconsistent {
        /// The API.
        api: ApiKey,
        /// What is wrong.
        reason: String,
    },
    /// Consumer-protocol bytes (a member's subscription in JoinGroup metadata, or its
    /// assignment in SyncGroup) could not be decoded.
    #[error(
        "malformed consumer-protocol {message}{} ({len} bytes, failed at byte {position}): {reason}",
        version.map_or_else(String::new, |v| format!(" v{v}"))
    )]
    ConsumerProtocolDecode {
        /// Which message.
        message: ConsumerMessage,
        /// The version its prefix announced, `None` if decoding stopped before it.
        version: Option<i16>,
        /// Length of the message (version prefix included).
        len: usize,
        /// Where the offending field starts, from the start of the message.
        position: usize,
        /// Which field, and why.
        reason: String,
    },
    /// A consumer-protocol message could not be encoded (a version below 0, or a field the
    /// wire format or Kafka cannot carry).
    #[error("cannot encode consumer-protocol {message} v{version}: {reason}")]
    ConsumerProtocolEncode {
        /// Which message.
        message: ConsumerMessage,
        /// The version asked for.
        version: i16,
        /// Which field, and why.
        reason: String,
    },
}
