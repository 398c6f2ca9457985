//! kdirect: a pure-Rust Kafka consumer engine in the "Direct" model.
//!
//! The driver asks the brokers where each partition begins and ends, plans each batch as exact
//! per-partition offset ranges, fetches exactly those ranges and decodes the record batches
//! zero-copy, and commits the ranges through one offset-store trait once the user's output
//! succeeded.
//!
//! This crate is the facade over the workspace's crates:
//! - [`proto`]: the sans-IO Kafka protocol layer;
//! - [`engine`]: broker connections, the cluster view, the record-batch decoder;
//! - [`commit`]: where offsets live.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kdirect::engine::Error> {
//! use kdirect::engine::cluster::Cluster;
//! use kdirect::engine::conn::ConnConfig;
//! use kdirect::proto::api::list_offsets::OffsetSpec;
//! use kdirect::proto::IsolationLevel;
//!
//! let cluster = Cluster::connect(&["127.0.0.1:9092".to_string()], ConnConfig::default()).await?;
//! let ends = cluster
//!     .list_offsets(&[("events".to_string(), 0)], OffsetSpec::Latest, IsolationLevel::ReadCommitted)
//!     .await?;
//! println!("events-0 ends at {}", ends[0].offset);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod error;
pub mod stream;

pub use error::Error;

pub use kdirect_commit as commit;
pub use kdirect_engine as engine;
pub use kdirect_proto as proto;
pub use stream::{Batch, DirectStream, DirectStreamBuilder, Transaction};

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
