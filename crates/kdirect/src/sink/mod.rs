//! Sinks: where a batch's records are written, exactly-once with the stream's commit.
//!
//! A [`Sink`] holds one batch's output per batch id. [`Sink::begin`] starts batch N's output
//! (a [`BatchWriter`]); the writer takes the batch's records once or several times
//! ([`BatchWriter::write`]: the whole [`Batch`], or each chunk of it as it is delivered), and
//! [`BatchWriter::commit`] makes them visible at once, atomically. Until then nothing of batch
//! N is visible; a writer dropped before its commit leaves nothing behind (and any earlier
//! committed output of batch N in place).
//!
//! The rule every sink keeps, which is what makes exactly-once possible: **the output of
//! batch N has one name, and a commit of batch N replaces whatever an earlier attempt at
//! batch N left, never adds to it**. With a store that re-runs a logged plan with exactly its
//! ranges after a crash (the checkpoint, or the Parquet sink's own log), the re-run rewrites the
//! same records under the same name, so each offset is in the output once however often the
//! batch ran; with a store that re-plans (Kafka group offsets), nothing is lost and the re-run
//! replaces the earlier attempt's output.
//!
//! The order for one batch, which the types make the only one: `next_batch` (the store logs
//! the plan), `begin` + `write`…, `commit` of the writer (the output is visible), then
//! `DirectStream::commit` (the positions move past it). A crash anywhere in between re-runs
//! the batch.
//!
//! Sinks here:
//! - [`JsonLinesSink`]: one JSON-lines file per batch, `DIR/<batchId>.jsonl` (the CLI's
//!   `--output-dir`), on [`FileSink`](kdirect_commit::file_sink::FileSink).
//! - [`cover`]: one output file appended to by every batch, exactly-once with any store that
//!   keeps one stream's positions: the file is cut back on resume to what the store covers
//!   (the CLI's `--output FILE` with `--store`).
//! - [`arrow`] (feature `arrow`): not a sink but the Arrow view every columnar sink builds on —
//!   a batch as `RecordBatch`es in Spark's Kafka source schema; [`ddl`] reads a values'
//!   schema written as Spark SQL's DDL (`id BIGINT, name STRING`).
//! - [`parquet`] (feature `parquet`): one Parquet file per batch, hidden until committed, with
//!   its own commit log inside the directory that is also the stream's offset store, so the
//!   directory alone is exactly-once (the CLI's `--sink parquet:DIR`).
//! - [`delta`] (feature `delta`): a Delta Lake table (delta-rs), one Parquet data file per
//!   batch, added in the same Delta commit that moves the batch's partitions' `txn` actions
//!   (kafka-delta-ingest's layout), so the table is the stream's offset store and alone
//!   exactly-once (the CLI's `--sink delta:PATH`).
//!
//! The Delta sink bends one line of this: its writer's `commit` finishes and stages the file,
//! and the batch becomes visible in the store's commit (`DirectStream::commit`), the one Delta
//! commit that also moves the positions — the sink's commit is the store's.
//!
//! The Parquet and Delta sinks also write to object storage (`s3://`, `az://`, with the
//! checkpoint's clients: `kdirect_commit::object::Bucket`); the JSON-lines sinks write to local
//! disks only, and no sink writes to HDFS yet.

use std::path::PathBuf;

use crate::Batch;

#[cfg(feature = "arrow")]
pub mod arrow;
pub mod cover;
#[cfg(feature = "arrow")]
pub mod ddl;
#[cfg(feature = "delta")]
pub mod delta;
mod error;
mod jsonl;
#[cfg(feature = "parquet")]
pub mod parquet;

#[cfg(test)]
mod tests;

pub use error::{SinkError, SinkErrorKind};
pub use jsonl::{JsonLinesSink, JsonLinesWriter, LineFormat};

/// Where batches' records go; one output per batch id. See the [module docs](self).
///
/// Not object-safe on purpose: a writer is committed by consuming it (as rusqlite's
/// `Transaction`), so the order of calls is checked by the compiler; pick a sink at run time
/// with an enum or a generic function.
pub trait Sink {
    /// One batch's output being written.
    type Writer: BatchWriter;

    /// A short name for messages: `parquet sink /data/events`, `jsonl sink /data/out`.
    fn describe(&self) -> String;

    /// Starts batch `batch_id`'s output. Nothing of it is visible until
    /// [`BatchWriter::commit`].
    fn begin(&self, batch_id: u64) -> Result<Self::Writer, SinkError>;

    /// Whether batch `batch_id`'s output was committed (is visible), by this run or an
    /// earlier one: a re-run of it replaces that output.
    fn is_committed(&self, batch_id: u64) -> Result<bool, SinkError>;

    /// The highest batch id whose output was committed, if any (where a resumed run stands,
    /// as far as the sink knows).
    fn last_committed(&self) -> Result<Option<u64>, SinkError>;
}

/// One batch's output being written; see [`Sink::begin`]. Dropping it uncommitted discards
/// what was written.
pub trait BatchWriter {
    /// Adds every record `batch` holds now: the whole batch, or the chunk it holds (a batch
    /// delivered in several chunks is written chunk by chunk into the same writer). Records
    /// are added in the order the batch gives them. Another batch than the writer's is
    /// refused ([`SinkErrorKind::WrongBatch`]).
    fn write(&mut self, batch: &Batch) -> Result<(), SinkError>;

    /// Records written so far.
    fn records(&self) -> u64;

    /// Makes everything written visible at once, replacing any output an earlier attempt at
    /// the same batch id committed. Durable when it returns (fsynced).
    fn commit(self) -> Result<SinkCommit, SinkError>;
}

/// What a [`BatchWriter::commit`] made visible.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkCommit {
    /// The batch id.
    pub batch_id: u64,
    /// Records written.
    pub records: u64,
    /// The files that now hold the batch (none for a batch without records, where the sink
    /// writes no file for it).
    pub files: Vec<PathBuf>,
}
