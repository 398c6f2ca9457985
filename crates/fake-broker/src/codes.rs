//! Kafka error codes the fake broker answers with (protocol guide, "Error Codes").
//!
//! Plain `i16` constants so tests can pass any code, including ones listed here.

/// No error.
pub const NONE: i16 = 0;
/// OFFSET_OUT_OF_RANGE.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// UNKNOWN_TOPIC_OR_PARTITION.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// LEADER_NOT_AVAILABLE.
pub const LEADER_NOT_AVAILABLE: i16 = 5;
/// NOT_LEADER_OR_FOLLOWER.
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// REQUEST_TIMED_OUT.
pub const REQUEST_TIMED_OUT: i16 = 7;
/// NOT_COORDINATOR.
pub const NOT_COORDINATOR: i16 = 16;
/// UNSUPPORTED_VERSION.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// FETCH_SESSION_ID_NOT_FOUND.
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// FENCED_LEADER_EPOCH.
pub const FENCED_LEADER_EPOCH: i16 = 74;
/// UNKNOWN_LEADER_EPOCH.
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
/// UNKNOWN_TOPIC_ID.
pub const UNKNOWN_TOPIC_ID: i16 = 100;
/// UNSUPPORTED_SASL_MECHANISM.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// ILLEGAL_SASL_STATE.
pub const ILLEGAL_SASL_STATE: i16 = 34;
/// SASL_AUTHENTICATION_FAILED.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
