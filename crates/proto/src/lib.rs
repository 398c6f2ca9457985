//! `kdirect-proto`: the Kafka wire protocol, sans-IO.
//!
//! What it does: turns kdirect's requests into bytes and response bytes into typed messages —
//! framing ([`frame`]), request/response headers and any API's encode/decode with an explicit
//! version ([`message`]), one file per API kdirect uses ([`api`]: ApiVersions, Metadata,
//! ListOffsets, Fetch, FindCoordinator, OffsetCommit, OffsetFetch), version negotiation
//! against a broker's ApiVersions answer ([`versions`]) and Kafka error codes as data
//! ([`code`]). Message types come from the `kafka-protocol` crate.
//!
//! What it does not do: it never touches a socket, a clock or an async runtime (CI checks that
//! tokio is absent from its dependency tree), and it does not decode record batches — that hot
//! path lives in `kdirect-engine`'s `record` module.
#![forbid(unsafe_code)]

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
