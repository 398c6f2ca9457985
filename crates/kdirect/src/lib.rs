//! kdirect: a pure-Rust Kafka consumer engine in the "Direct" model (Spark's direct Kafka
//! stream, Structured Streaming's Kafka source).
//!
//! A [`DirectStream`] asks the brokers where each partition begins and ends, plans each batch
//! as exact per-partition offset ranges `[from, until)` under rate limits, fetches exactly
//! those ranges and decodes the record batches zero-copy (records are views over the fetch
//! buffers), and hands you one [`Batch`] at a time. With an [`OffsetStore`] the stream owns
//! the commit protocol: it resumes from the committed positions, re-runs a batch whose plan
//! was logged but not committed with exactly its ranges, and commits each batch's positions
//! with compare-and-set once your output succeeded.
//!
//! Exactly-once with a checkpoint directory and the idempotent file sink (one file per batch,
//! replaced whole when a batch is re-run after a crash):
//!
//! ```no_run
//! use kdirect::{CheckpointStore, DirectStream, FileSink, StartPolicy};
//!
//! # async fn run() -> Result<(), kdirect::Error> {
//! let sink = FileSink::open("/data/out")?;
//! let mut stream = DirectStream::builder()
//!     .bootstrap("127.0.0.1:9092")
//!     .topics(&["events"])
//!     .start(StartPolicy::Earliest)
//!     .store(CheckpointStore::open("/data/ckpt", 100)?)
//!     .build()
//!     .await?;
//! while let Some(batch) = stream.next_batch().await? {
//!     let mut file = sink.begin(batch.id())?;
//!     batch.try_for_each_record(|range, record| -> Result<(), kdirect::Error> {
//!         let line = format!("{}-{} {}", range.topic, range.partition, record.offset());
//!         Ok(file.write_line(line.as_bytes())?)
//!     })?;
//!     file.finish()?;
//!     stream.commit(batch).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! The [`sink`] module writes a batch's records exactly-once with the stream's commit: the
//! [`Sink`] trait (one output per batch id, made visible at once by committing its writer,
//! replacing an earlier attempt), the JSON-lines sink, and behind features the Arrow view of a
//! batch (`arrow`) and the Parquet sink whose log is the stream's store (`parquet`).
//!
//! The [`admin`] module does what `kdirect offsets` and `kdirect lag` do, for an embedder:
//! log bounds, resets in `kafka-consumer-groups`' vocabulary, migrations between stores,
//! imports from a Spark checkpoint or a Spark Streaming job's own offsets, and lag.
//!
//! With a SQL store (feature `sql`), [`DirectStream::begin`] opens the transaction that
//! holds both the batch's offsets and your results; [`DirectStream::commit_transaction`]
//! commits them together.
//!
//! Over TLS and SASL ([`DirectStreamBuilder::security`]: PLAIN, SCRAM-SHA-256/512,
//! OAUTHBEARER), and as a member of a consumer group ([`DirectStreamBuilder::subscribe`]:
//! the classic protocol with eager or cooperative assignors, or KIP-848's), the stream reads
//! only the partitions the group assigns and commits through the group's offsets by default.
//! What it does not do: produce, or authenticate with Kerberos (GSSAPI).
//!
//! # Features
//! - `cli` (default): the `kdirect` binary; implies `sql`, `redis` and `unstable`, and
//!   compiles clap and the fake broker. Library users: `default-features = false`.
//! - `sql`: the SQLite, PostgreSQL and MySQL/MariaDB stores (sqlx), and exactly-once with
//!   results in the offsets' transaction.
//! - `redis`: the Redis store.
//! - `arrow`: a batch as Arrow `RecordBatch`es in Spark's Kafka source schema
//!   ([`sink::arrow`]).
//! - `parquet` (in `cli`): the exactly-once Parquet sink ([`sink::parquet`]); implies `arrow`.
//! - `unstable`: the workspace's crates as modules — [`proto`] (the sans-IO protocol layer),
//!   [`engine`] (connections, cluster view, planner, fetcher, record decoder) and [`commit`]
//!   (the stores) — with no stability promise. The items re-exported at the top level are
//!   the supported surface.
#![forbid(unsafe_code)]

pub mod admin;
pub mod error;
pub mod sink;
pub mod stream;

pub use error::{Error, Misuse};

#[cfg(feature = "unstable")]
pub use kdirect_commit as commit;
#[cfg(feature = "unstable")]
pub use kdirect_engine as engine;
#[cfg(feature = "unstable")]
pub use kdirect_proto as proto;

pub use kdirect_engine::group::{Assignor, Generation, GroupConfig};
#[cfg(feature = "sql")]
pub use stream::Transaction;
pub use stream::{
    parse_offsets_json, parse_trigger, starting_offsets_json, Batch, BatchRecords, DirectStream,
    DirectStreamBuilder, Ending, Rebalance,
};

pub use kdirect_engine::error::BrokerName;
pub use kdirect_engine::fetch::{RangeData, RangeRecords};
pub use kdirect_engine::plan::{
    DataLossPolicy, DataLossReason, LostRange, OffsetRange, PidConfig, RatePolicy, StartOffset,
    StartPolicy, TimestampStrategy, TopicPartition, Trigger,
};
pub use kdirect_engine::record::{Header, Headers, OwnedHeader, OwnedRecord, Record};
pub use kdirect_engine::security::{
    EndpointIdentification, SaslMechanism, Secret, Security, SecurityProtocol,
};
pub use kdirect_engine::{
    ErrorKind, KerberosFailure, KerberosProblem, LostOffsets, SaslProblem, TlsProblem,
};
pub use kdirect_proto::IsolationLevel;

pub use sink::{BatchWriter, JsonLinesSink, Sink, SinkCommit, SinkError, SinkErrorKind};

pub use kdirect_commit::checkpoint::CheckpointStore;
pub use kdirect_commit::file_sink::FileSink;
#[cfg(feature = "redis")]
pub use kdirect_commit::redis::RedisStore;
#[cfg(feature = "sql")]
pub use kdirect_commit::sql::{SinkTable, SqlStore};
pub use kdirect_commit::{
    open_store, AnyStore, Capabilities, CommitContext, CommitOutcome, Committed, OffsetStore,
    PlannedBatch, Positions, StoreError, StoreErrorKind,
};

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
