//! `kdirect-proto`: the Kafka wire protocol, sans-IO.
//!
//! What it does: turns kdirect's requests into bytes and response bytes into typed messages —
//! framing ([`frame`]), request/response headers and any API's encode/decode with an explicit
//! version ([`message`]), one file per API kdirect uses ([`api`]: ApiVersions, Metadata,
//! ListOffsets, Fetch, FindCoordinator, OffsetCommit, OffsetFetch, SaslHandshake,
//! SaslAuthenticate, and the classic consumer-group protocol: JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup), the consumer protocol's subscription and assignment bytes that
//! JoinGroup and SyncGroup carry ([`api::consumer_protocol`]), version negotiation
//! against a broker's ApiVersions answer ([`versions`]) and Kafka error codes as data
//! ([`code`]). Message types come from the `kafka-protocol` crate.
//!
//! # Bounded decoding
//!
//! Nothing read off the wire sizes an allocation unchecked. kafka-protocol's generated
//! decoders reserve `Vec::with_capacity(n)` for an array count `n` read from the frame
//! without comparing it with the bytes that remain, so a few malformed bytes could make them
//! reserve gigabytes. kdirect-proto therefore reads every response it decodes with its own
//! bounded reader (`read.rs`): an array of `n` elements whose smallest encoding is `m` bytes
//! is refused unless `n × m` bytes remain, a string or byte field must fit in what remains,
//! varints are at most five bytes, and a tagged field must fit its announced size. A
//! malformed frame is a [`ProtoError::Decode`] naming the API, version, frame length, byte
//! position and field, never a panic.
//!
//! - **Hand-written decoders** read a frame straight into kdirect's views, without
//!   kafka-protocol: [`api::fetch::decode`] (Fetch 4–17 into a `FetchView` whose `records`
//!   are slices of the frame), [`api::metadata::decode`] (Metadata 1–12 into a
//!   `MetadataView`), [`api::list_offsets::decode`] (ListOffsets 1–10) and the consumer
//!   protocol's [`api::consumer_protocol::Subscription::decode`] and
//!   [`api::consumer_protocol::Assignment::decode`]. What they allocate
//!   is a constant factor of the frame's length: every `Vec` is reserved only after its count
//!   passed the check above, strings are at most their wire length, and topic names (which
//!   the Fetch and ListOffsets views repeat per partition) are refused beyond Kafka's
//!   249-character limit.
//! - **Everything else through kafka-protocol** ([`message::decode_response`] for any of the
//!   other APIs, and the ApiVersions handshake in [`api::api_versions::decode`]) first walks
//!   the whole frame with the same bounded reader against the API's schema at that version
//!   (allocating nothing), and only then hands it to kafka-protocol. The walk reads exactly
//!   what kafka-protocol reads, field for field, and is stricter where they could differ
//!   (over-long varints, known tagged fields that overrun their size), so every count
//!   kafka-protocol then reserves for has passed the `n × m` check: its allocations are at
//!   most `size_of::<T>() / m` times the frame length per nesting level. Versions outside
//!   those kdirect speaks are refused ([`ProtoError::VersionNotSpoken`]), as is an API with
//!   no bounded walk.
//!
//! Bytes after the last field are ignored, as kafka-protocol, the Java client and
//! librdkafka ignore them. The frame itself is bounded before any of this by
//! [`frame::FrameDecoder`]'s maximum frame size.
//!
//! What it does not do: it never touches a socket, a clock or an async runtime (CI checks that
//! tokio is absent from its dependency tree), and it does not decode record batches — that hot
//! path lives in `kdirect-engine`'s `record` module.
#![forbid(unsafe_code)]
// Every byte decoded here comes off the network: no panicking index, unwrap or panic outside
// tests (as in kdirect-engine's `record` module).
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]

pub mod api;
pub mod code;
pub mod error;
pub mod frame;
pub mod message;
mod read;
pub mod versions;

pub use api::IsolationLevel;
pub use code::ErrorCode;
pub use error::ProtoError;
pub use frame::{FrameDecoder, FrameError};
pub use message::{decode_response, encode_request, Api};
pub use versions::BrokerVersions;

/// kafka-protocol, re-exported so that users of these types name the same version.
pub use kafka_protocol;
