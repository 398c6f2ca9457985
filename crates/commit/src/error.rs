//! The stores' error type: `StoreError(Box<StoreErrorKind>)` with [`StoreError::kind`], as in the
//! engine. Every kind names where it happened: the file, the table, the Redis key, the group and
//! the topic-partition.

use std::fmt;
use std::path::PathBuf;

use kdirect_proto::ErrorCode;

/// An offset-store error. See [`StoreErrorKind`].
#[derive(Debug)]
pub struct StoreError(Box<StoreErrorKind>);

impl StoreError {
    /// What went wrong.
    pub fn kind(&self) -> &StoreErrorKind {
        &self.0
    }

    /// Consumes the error, giving its kind.
    pub fn into_kind(self) -> StoreErrorKind {
        *self.0
    }

    /// True for [`StoreErrorKind::Conflict`]: another writer (or a zombie of this one) moved the
    /// stored position; this writer must stop, not retry.
    pub fn is_conflict(&self) -> bool {
        matches!(*self.0, StoreErrorKind::Conflict { .. })
    }

    /// True for [`StoreErrorKind::Fenced`] and [`StoreErrorKind::Conflict`]: in group mode,
    /// both mean the partitions moved to another member; the stream rejoins.
    pub fn is_fenced(&self) -> bool {
        matches!(
            *self.0,
            StoreErrorKind::Fenced { .. } | StoreErrorKind::Conflict { .. }
        )
    }

    /// Whether trying the same operation again (a new stream resuming from the store) may
    /// succeed: a connection to the database, Redis or the brokers refused, dropped or timed
    /// out, a pool timed out, a file operation interrupted or timed out, a retriable broker
    /// code. False for what a retry cannot fix (a conflict, a fenced member, corrupt data, a
    /// refused statement) and for the ZooKeeper and HBase stores' errors, which their clients
    /// report as text (their own retries run inside the store, by `default.api.timeout.ms`).
    pub fn is_retriable(&self) -> bool {
        match &*self.0 {
            StoreErrorKind::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::TimedOut
            ),
            #[cfg(feature = "sql")]
            StoreErrorKind::Sql { source, .. } => {
                matches!(source, sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut)
            }
            #[cfg(feature = "redis")]
            StoreErrorKind::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
            }
            StoreErrorKind::Kafka { source, .. } => source.is_retriable(),
            StoreErrorKind::KafkaCode { code, .. } => code.is_retriable(),
            _ => false,
        }
    }
}

impl From<StoreErrorKind> for StoreError {
    fn from(k: StoreErrorKind) -> Self {
        StoreError(Box::new(k))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A stored position as a conflict reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored(pub Option<i64>);

impl fmt::Display for Stored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(o) => write!(f, "{o}"),
            None => f.write_str("no position"),
        }
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// Compare-and-set on `from` failed: the store holds another position for the partition
    /// than the batch started from. Another writer, or a zombie of this one, committed in
    /// between; the batch's output must not be published.
    #[error("offset conflict in {store} for {topic}-{partition}: the batch expects the store to hold {expected_from} (where it starts, or the position it moves back from), but it holds {stored} (a second writer or a zombie committed in between)")]
    Conflict {
        /// The store (`checkpoint /path`, `table kdirect_offsets`, `redis key …`, `kafka group …`).
        store: String,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// What the batch expected the store to hold: its range's `from`, or the stored
        /// position the range moves back from ([`crate::PlannedBatch::moved_back`]).
        expected_from: i64,
        /// What the store holds.
        stored: Stored,
    },
    /// Group mode: the member lost its partitions before this commit (a rebalance gave them
    /// to another member), so the commit was refused; the batch's output must not be
    /// published (a transaction is rolled back).
    #[error("{store} refused the commit: this member no longer owns the partitions ({reason})")]
    Fenced {
        /// The store.
        store: String,
        /// Why.
        reason: String,
    },
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`create`, `read`, `fsync`, `rename`, …).
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A checkpoint file does not parse (truncated, garbage, wrong version, wrong batch id).
    #[error("corrupt checkpoint file {}: {reason}; nothing was overwritten — fix or remove the file", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line where known.
        reason: String,
    },
    /// A file of a Spark Structured Streaming checkpoint does not parse (import).
    #[error("Spark checkpoint file {}{}: {reason}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    SparkFormat {
        /// The file.
        path: PathBuf,
        /// The line (1-based), when the fault is on one.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// Spark's last batch was planned (`offsets/N`) but its sink never committed
    /// (`commits/N` is absent): Spark would re-run it. An import must be told which side to take.
    #[error("Spark's batch {batch_id} was planned ({}) but never committed: Spark would re-run it from {start}; say which side to take — the committed side (where Spark stopped: batch {batch_id}'s records are read again) or the planned side (batch {batch_id}'s end: its records are skipped)", path.display(), start = batch_id.checked_sub(1).map_or_else(|| "the initial offsets (sources/<i>/0)".to_owned(), |p| format!("batch {p}'s end")))]
    SparkUncommitted {
        /// The uncommitted batch's `offsets/N`.
        path: PathBuf,
        /// N.
        batch_id: u64,
    },
    /// A Spark checkpoint has no Kafka source to import, several where one was expected, or
    /// none of the offsets asked for.
    #[error("Spark checkpoint {}: {reason}", dir.display())]
    SparkSource {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// Batch ids in a checkpoint directory are not contiguous.
    #[error("checkpoint gap: {} is missing (found {} and {}); nothing was overwritten", missing.display(), before.display(), after.display())]
    Gap {
        /// The file that should exist.
        missing: PathBuf,
        /// The file before the gap.
        before: PathBuf,
        /// The file after the gap.
        after: PathBuf,
    },
    /// A checkpoint's offset log and commit log do not fit together.
    #[error("inconsistent checkpoint: {} — {reason}; nothing was overwritten", path.display())]
    Inconsistent {
        /// The file that does not fit.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A batch file exists with other content: a second writer on the same checkpoint.
    #[error("{} already exists with different content: {reason}", path.display())]
    AlreadyExists {
        /// The file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// A batch id out of order (a checkpoint's batch ids must be contiguous).
    #[error("{store}: batch {got} is out of order (expected batch {expected})")]
    BatchOrder {
        /// The store.
        store: String,
        /// The batch id the store expects next.
        expected: u64,
        /// The batch id given.
        got: u64,
    },
    /// An administrative write while a logged batch is not committed.
    #[error("{store}: batch {batch_id} is logged but not committed ({}); let the stream finish it, or remove that file first", path.display())]
    Pending {
        /// The store.
        store: String,
        /// The logged batch.
        batch_id: u64,
        /// Its offsets file.
        path: PathBuf,
    },
    /// A store spec that does not parse.
    #[error("store spec '{spec}': {reason}")]
    Spec {
        /// The spec.
        spec: String,
        /// Why.
        reason: String,
    },
    /// The store needs a cargo feature this build does not have.
    #[error("store spec '{spec}' needs kdirect-commit's cargo feature '{feature}'")]
    FeatureDisabled {
        /// The spec.
        spec: String,
        /// The feature.
        feature: &'static str,
    },
    /// A SQL statement failed.
    #[cfg(feature = "sql")]
    #[error("{database} table {table}: {context}: {source}")]
    Sql {
        /// The database, password removed (`postgres://postgres@127.0.0.1:5432/test`).
        database: String,
        /// The table.
        table: String,
        /// What was being done, with the group and topic-partition where there is one.
        context: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A Redis command failed.
    #[cfg(feature = "redis")]
    #[error("redis {server} key {key}: {source}")]
    Redis {
        /// The server, password removed.
        server: String,
        /// The key (or key pattern).
        key: String,
        /// The driver's error.
        source: redis::RedisError,
    },
    /// A ZooKeeper request failed, or a znode holds what the store cannot read.
    #[error("zookeeper {server} znode {path}: {reason}")]
    ZooKeeper {
        /// The connect string (`host:port,…/chroot`).
        server: String,
        /// The znode (below the chroot).
        path: String,
        /// The client's error, or what is wrong with the znode's data.
        reason: String,
    },
    /// An HBase REST gateway request failed, or a row holds what the store cannot read.
    #[error("hbase {server}: {what}: {reason}")]
    HBase {
        /// The gateway and table.
        server: String,
        /// What was being done, with the row.
        what: String,
        /// The HTTP error or status, or what is wrong with the row.
        reason: String,
    },
    /// A broker request failed (connection, timeout, protocol) for the Kafka-group store.
    #[error("kafka group '{group}': {source}")]
    Kafka {
        /// The consumer group.
        group: String,
        /// The engine's error (names the broker).
        source: kdirect_engine::Error,
    },
    /// A broker answered with an error code for the Kafka-group store.
    #[error("kafka group '{group}': {api} {}answered {code}", match (topic, partition) { (Some(t), Some(p)) => format!("for {t}-{p} "), _ => String::new() })]
    KafkaCode {
        /// The consumer group.
        group: String,
        /// The API (`FindCoordinator`, `OffsetCommit`, `OffsetFetch`).
        api: &'static str,
        /// Topic, for a partition-level error.
        topic: Option<String>,
        /// Partition, for a partition-level error.
        partition: Option<i32>,
        /// The error code.
        code: ErrorCode,
    },
    /// The store needs a broker connection (`kafka`) and none was given.
    #[error("store spec '{spec}' needs a broker connection (-b HOST:PORT)")]
    NeedsCluster {
        /// The spec.
        spec: String,
    },
    /// A read-only command named a store that does not exist (a mistyped path): nothing was
    /// created.
    #[error("no store at '{spec}': {reason} (nothing was created; check the path)")]
    Missing {
        /// The spec, password removed.
        spec: String,
        /// What is missing.
        reason: String,
    },
    /// A store kept outside this crate (the Delta Lake table of `kdirect::sink::delta`, a
    /// store of the user's own) failed; `source` is its library's error.
    #[error("{store}: {what}: {source}")]
    Backend {
        /// The store (its `describe`).
        store: String,
        /// What was being done.
        what: String,
        /// The backend library's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A name that cannot be used as a SQL identifier or a value out of range.
    #[error("invalid {what} '{value}': {reason}")]
    Invalid {
        /// What (`table name`, `batch id`, …).
        what: &'static str,
        /// The value.
        value: String,
        /// Why.
        reason: String,
    },
}

pub(crate) fn io(
    path: impl Into<PathBuf>,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.into();
    move |source| StoreErrorKind::Io { path, op, source }.into()
}
