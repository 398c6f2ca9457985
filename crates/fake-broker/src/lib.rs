//! kdirect's fake Kafka broker: a **test double**, in the spirit of franz-go's `kfake`.
//!
//! It runs one or more in-memory brokers on loopback ports, inside the test's process, and
//! speaks enough of the Kafka protocol for a consumer: ApiVersions, Metadata, ListOffsets,
//! Fetch, FindCoordinator, OffsetCommit, OffsetFetch, OffsetForLeaderEpoch and Produce (see
//! `docs/fake-broker.md` for the versions). Data is loaded as v2 record batches built with
//! kafka-protocol's encoder (any codec, headers, transactions with COMMIT/ABORT markers,
//! offset gaps) and served straight from memory; Fetch responses reference the stored batch
//! bytes instead of copying them. Faults are scripted from the test: dropped connections,
//! partition error codes, leader moves, delays, truncated responses, retention, broker
//! restarts.
//!
//! What it is **not**: a Kafka replacement. There is no replication, no persistence, no
//! consumer-group membership (JoinGroup/SyncGroup), no idempotence or transaction coordinator,
//! no SASL mechanism but PLAIN, no ACLs, no quotas. It trusts the test that loads it.
//!
//! Listeners can speak TLS ([`FakeClusterBuilder::tls`], with certificates made in-process by
//! [`FakeTls`]) and require SASL PLAIN ([`FakeClusterBuilder::sasl_plain_user`]), with an
//! optional KIP-368 session lifetime ([`FakeClusterBuilder::sasl_session_lifetime`]).
//!
//! ```
//! use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};
//!
//! let cluster = FakeCluster::builder().brokers(3).topic("t", 4).start().unwrap();
//! cluster
//!     .append_records("t", 0, &[FakeRecord::value("hello")], Codec::Lz4)
//!     .unwrap();
//! assert_eq!(cluster.high_watermark("t", 0).unwrap(), 1);
//! println!("bootstrap.servers={}", cluster.bootstrap());
//! ```
//!
//! Architecture Invariant: this crate depends on `kdirect-proto` (framing) and kafka-protocol,
//! never on `kdirect-engine`: the fake must not share the engine's mistakes.

mod api;
mod batch;
mod cluster;
pub mod codes;
mod error;
mod log;
mod server;
mod state;
mod tls;
mod wire;

pub use batch::{
    encode_batch, encode_control_batch, BatchOptions, Codec, ControlType, FakeRecord, UnknownCodec,
};
pub use cluster::{BrokerStats, FakeCluster, FakeClusterBuilder, FetchFault, Transaction};
pub use error::FakeError;
/// Re-exported so tests can name the API an injected error applies to.
pub use kafka_protocol::messages::ApiKey;
pub use tls::FakeTls;
