//! `kdirect-commit`: where offsets live, and when they are written.
//!
//! What it does: one [`OffsetStore`] trait and its strategies, one file per backend:
//! - [`checkpoint`]: a Structured Streaming–style checkpoint directory (`offsets/<N>` written
//!   before batch N runs, `commits/<N>` after), plain text a person can read and edit, on a
//!   local disk, (feature `object-store`) on S3 (`checkpoint:s3://bucket/prefix`) or Azure
//!   Blob (`checkpoint:az://container/prefix`), or (feature `hdfs`) on HDFS
//!   (`checkpoint:hdfs://namenode:port/path`);
//! - [`kafka`]: Kafka consumer-group offsets (FindCoordinator, OffsetCommit as a standalone
//!   consumer, OffsetFetch), visible to standard Kafka tooling;
//! - `sql` (feature `sql`): SQLite, PostgreSQL and MySQL/MariaDB through sqlx, with the
//!   transactional exactly-once API ([`sql::SqlStore::begin`]) and the sink-table helper;
//! - `redis` (feature `redis`): a hash per group and topic, compare-and-set in a Lua script;
//! - `hbase` (feature `hbase`): a row per group and topic through HBase's REST gateway,
//!   compare-and-set by check-and-put;
//! - `zookeeper` (feature `zookeeper`): the old Kafka consumer's
//!   `/consumers/<group>/offsets/<topic>/<partition>` znodes, committed in one multi-op
//!   transaction with version checks, and a plan log beside them;
//! - [`file_sink`]: the idempotent file sink (one atomically written file per batch id);
//! - [`spark`]: reads an Apache Spark Structured Streaming checkpoint (read only), to import
//!   where Spark stopped;
//! - [`import`]: reads offsets other programs keep in Redis, SQL tables, ZooKeeper or Kafka,
//!   in the layouts of the Spark Streaming articles (read only).
//!
//! What it does not do: it never fetches records or plans batches (that is `kdirect-engine`),
//! and it never formats the user's output. Direction: `proto` ← `engine` ← `commit` ←
//! `kdirect`. This crate uses the engine's broker connection (for the Kafka-group store); the
//! engine never imports a store.
//!
//! # How a stream uses a store
//! 1. [`OffsetStore::load`] once at start: the last committed batch id, the next offset per
//!    partition, and — for stores that log plans (the checkpoint) — a [`Committed::pending`]
//!    batch that was logged but not committed. A pending batch is re-run with exactly its
//!    ranges before anything new is planned; otherwise the planner resumes with
//!    `Planner::resume(config, committed.next_batch_id(), committed.positions)`.
//! 2. [`OffsetStore::log_plan`] before the batch is processed (write-ahead; a no-op for stores
//!    that cannot log).
//! 3. [`OffsetStore::commit`] after the user's output succeeded, with the [`CommitContext`]
//!    of who commits (the group member, in a group). It compares-and-sets on each range's
//!    `from`: if the store holds another position, a second writer or a zombie moved it, and
//!    the commit fails with [`StoreErrorKind::Conflict`]. Committing a batch that is already
//!    committed returns [`CommitOutcome::AlreadyCommitted`].
//!
//! Each store says what it guarantees through [`OffsetStore::capabilities`] (the stream asks
//! it, never the store's type: a store of the user's own, or a wrapper, is judged by what it
//! declares). Which guarantee each store gives, with each output, is in `docs/stores.md`.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use kdirect_engine::cluster::Cluster;
use kdirect_engine::group::{Generation, GroupMember};
use kdirect_engine::plan::BatchPlan;
pub use kdirect_engine::plan::{OffsetRange, TopicPartition};

pub mod checkpoint;
mod error;
pub mod file_sink;
#[cfg(feature = "hbase")]
pub mod hbase;
#[cfg(feature = "hdfs")]
mod hdfs;
pub mod import;
pub mod kafka;
pub mod resume;
pub(crate) use resume::{hex, unhex};
#[cfg(feature = "object-store")]
pub mod object;
#[cfg(feature = "redis")]
pub mod redis;
pub mod spark;
#[cfg(feature = "sql")]
pub mod sql;
#[cfg(any(
    feature = "sql",
    feature = "redis",
    feature = "hbase",
    feature = "zookeeper",
    feature = "hdfs"
))]
mod transport;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use error::{StoreError, StoreErrorKind, Stored};

/// Positions: the next offset to read per partition.
pub type Positions = BTreeMap<TopicPartition, i64>;

/// KIP-320: per partition, the `partition_leader_epoch` of the last record batch read before
/// its position. A stream resumed from a store that keeps them asks each partition's leader
/// (OffsetForLeaderEpoch) whether its log still holds what was read up to the position before
/// reading on, so a log truncated while the stream was down (an unclean leader election) is
/// reported as data loss with its exact range instead of being read over silently.
pub type Epochs = BTreeMap<TopicPartition, i32>;

/// The id of each topic (KIP-516: 16 bytes, all zero when the broker has none) the positions
/// were read from. A stream resumed from a store that keeps them (every store here) compares
/// them with the cluster's before reading on, so a topic deleted and re-created while the
/// stream was down is reported as such (`failOnDataLoss`) and read from its new start, instead
/// of the stored positions (and epochs) being taken for positions in the new log.
pub type TopicIds = BTreeMap<String, [u8; 16]>;

/// An epoch not known, as the stores that keep one per row or cell write it (SQL's
/// `leader_epoch`, Redis's commit script, HBase's `o:epoch:<partition>`): it replaces, and so
/// drops, the stored one.
pub(crate) const EPOCH_UNKNOWN: i32 = -1;

/// What a committed batch leaves of the epochs and topic ids a store keeps beside its
/// positions (the rules every store that keeps them follows):
/// - a partition the batch moves takes the batch's epoch, or none if the fetch did not know
///   it (the old one is for another position; a move back with no records moves it too); a
///   partition the batch does not move keeps its own unless the batch names one;
/// - the batch's topic ids replace the stored ones (an id the stream did not know, all
///   zeros, says nothing).
///
/// The caller drops the ids of topics with no position left.
pub(crate) fn merge_resume_state(
    epochs: &mut Epochs,
    topic_ids: &mut TopicIds,
    batch: &PlannedBatch,
) {
    for r in &batch.ranges {
        match batch.epoch_to_store(r) {
            Some(EPOCH_UNKNOWN) => {
                epochs.remove(&r.topic_partition());
            }
            Some(e) => {
                epochs.insert(r.topic_partition(), e);
            }
            None => {}
        }
    }
    for (t, id) in &batch.topic_ids {
        if *id != [0; 16] {
            topic_ids.insert(t.clone(), *id);
        }
    }
}

/// What positions set by hand leave of the epochs and topic ids: a partition set elsewhere
/// than `stored` has no known epoch, and its topic no known id (it is set for the topic as it
/// is now); a partition set to where it is keeps both.
pub(crate) fn forget_set_positions(
    epochs: &mut Epochs,
    topic_ids: &mut TopicIds,
    stored: &Positions,
    set: &Positions,
) {
    for (tp, o) in set {
        if stored.get(tp) != Some(o) {
            epochs.remove(tp);
            topic_ids.remove(tp.topic.as_str());
        }
    }
}

/// A batch as the stores see it: its id and its exact ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBatch {
    /// The batch id.
    pub id: u64,
    /// One range per partition, `[from, until)`.
    pub ranges: Vec<OffsetRange>,
    /// KIP-320: the epoch of the last record batch read before each range's `until`, where
    /// the fetch knew it. Filled when the batch is committed (its records were read); empty
    /// in a plan logged before the batch runs. Every store here writes them beside the
    /// positions (the checkpoint's `leaderEpochs`, the Kafka group's committed leader epoch,
    /// the SQL `leader_epoch` column, Redis's `epochs` hash, ZooKeeper's `kdirect/resume`,
    /// HBase's `o:epoch:<partition>`).
    pub epochs: Epochs,
    /// For a partition whose range starts *below* the stored position, that stored position:
    /// the stream moved the partition back after data loss under `failOnDataLoss=false` (its
    /// log now ends below the position: a topic deleted and re-created, a log truncated below
    /// it). The compare-and-set of every store expects this position instead of the range's
    /// `from` ([`expected_from`](Self::expected_from)), so the batch commits the move back;
    /// stores that log plans log it with the plan, so a re-run commits the same way.
    pub moved_back: Positions,
    /// The ids of the topics the batch read (filled when it is committed, where the stream
    /// knew them). Every store here writes them beside the positions.
    pub topic_ids: TopicIds,
}

impl PlannedBatch {
    /// A batch (with no epochs: see [`with_epochs`](Self::with_epochs)).
    pub fn new(id: u64, ranges: Vec<OffsetRange>) -> Self {
        Self {
            id,
            ranges,
            epochs: Epochs::new(),
            moved_back: Positions::new(),
            topic_ids: TopicIds::new(),
        }
    }

    /// The batch with the ids of the topics it read (see [`topic_ids`](Self::topic_ids)).
    pub fn with_topic_ids(mut self, topic_ids: TopicIds) -> Self {
        self.topic_ids = topic_ids;
        self
    }

    /// The batch with the stored positions its ranges move back from (see
    /// [`moved_back`](Self::moved_back)).
    pub fn with_moved_back(mut self, moved_back: Positions) -> Self {
        self.moved_back = moved_back;
        self
    }

    /// The position a store must hold for `r`'s partition for this batch to commit (its
    /// compare-and-set): the range's `from`, or the stored position the range moves back
    /// from.
    pub fn expected_from(&self, r: &OffsetRange) -> i64 {
        if self.moved_back.is_empty() {
            return r.from;
        }
        self.moved_back
            .get(&r.topic_partition())
            .copied()
            .unwrap_or(r.from)
    }

    /// Whether committing `r` changes its partition's stored position (a non-empty range, or
    /// a move back): what tells a re-commit of this batch (every such range already at its
    /// `until` under this batch id) from a batch with nothing to write.
    pub fn moves(&self, r: &OffsetRange) -> bool {
        self.expected_from(r) != r.until
    }

    /// The epoch a store keeps for `r`'s partition once this batch commits, by the rule of
    /// [`merge_resume_state`]: the batch's epoch; [`EPOCH_UNKNOWN`] when the batch moves the
    /// partition without knowing one (the stored one is for another position: drop it);
    /// `None` when the batch does not move it (keep the stored one).
    pub(crate) fn epoch_to_store(&self, r: &OffsetRange) -> Option<i32> {
        match self.epochs.get(&r.topic_partition()) {
            Some(&e) if e >= 0 => Some(e),
            _ if self.moves(r) => Some(EPOCH_UNKNOWN),
            _ => None,
        }
    }

    /// The id the batch knows for `topic`, in hex (none for an id it did not know, all
    /// zeros): what a store writes over the stored one.
    pub(crate) fn topic_id_hex(&self, topic: &str) -> Option<String> {
        self.topic_ids
            .get(topic)
            .filter(|id| **id != [0; 16])
            .map(hex)
    }

    /// The batch with the epochs of the last record batch read before its ranges' `until`s.
    pub fn with_epochs(mut self, epochs: Epochs) -> Self {
        self.epochs = epochs;
        self
    }

    /// Each partition's position after the batch (its ranges' `until`).
    pub fn positions(&self) -> Positions {
        self.ranges
            .iter()
            .map(|r| (r.topic_partition(), r.until))
            .collect()
    }
}

impl From<&BatchPlan> for PlannedBatch {
    fn from(plan: &BatchPlan) -> Self {
        PlannedBatch::new(plan.batch_id, plan.ranges.clone())
            .with_moved_back(plan.moved_back.clone())
    }
}

/// What a store holds for a group (or a checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// The last committed batch id, if any batch was committed.
    pub batch_id: Option<u64>,
    /// The next offset to read per partition, as committed.
    pub positions: Positions,
    /// A batch that was logged before it ran but never committed (stores that log plans
    /// only). Re-run it with exactly these ranges.
    pub pending: Option<PlannedBatch>,
    /// KIP-320: the epoch of the last record batch read before each committed position,
    /// where the store keeps it (every store here; a store of the caller's own may not) and
    /// the commit knew it. A position without one is resumed unchecked.
    pub epochs: Epochs,
    /// The ids of the committed positions' topics, where the store keeps them and the commit
    /// knew them. A topic without one is resumed unchecked.
    pub topic_ids: TopicIds,
}

impl Committed {
    /// The id the next batch gets: the pending batch's, else one past the last committed, else 0.
    pub fn next_batch_id(&self) -> u64 {
        match (&self.pending, self.batch_id) {
            (Some(p), _) => p.id,
            (None, Some(b)) => b + 1,
            (None, None) => 0,
        }
    }

    /// Keeps only the partitions of `topics` (all of them when `topics` is empty).
    pub fn retain_topics(&mut self, topics: &[String]) {
        if topics.is_empty() {
            return;
        }
        self.positions
            .retain(|tp, _| topics.iter().any(|t| *t == tp.topic));
        self.epochs
            .retain(|tp, _| topics.iter().any(|t| *t == tp.topic));
        self.topic_ids.retain(|t, _| topics.contains(t));
    }
}

/// The result of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitOutcome {
    /// The batch's positions are now stored.
    Committed,
    /// The batch was already committed with the same positions (a retried commit, or a re-run
    /// after a crash between commit and acknowledgement): nothing was written.
    AlreadyCommitted,
}

/// What a store guarantees, as it declares it ([`OffsetStore::capabilities`]): a set of the
/// flags below, combined with `|`. The stream decides by these, never by the store's type, so
/// a wrapper around a store declares what it keeps of the inner store's (forwarding
/// `capabilities` keeps them all).
///
/// | store | [`LOGS_PLANS`](Self::LOGS_PLANS) | [`ATOMIC_COMMIT`](Self::ATOMIC_COMMIT) | [`TRANSACTIONAL`](Self::TRANSACTIONAL) | [`FENCED_BY_GENERATION`](Self::FENCED_BY_GENERATION) |
/// | --- | --- | --- | --- | --- |
/// | checkpoint (disk, S3, Azure, HDFS) | yes | yes | | |
/// | kafka (group offsets) | | | | yes |
/// | sql (SQLite, PostgreSQL, MySQL) | | yes | yes | |
/// | redis | | yes | | |
/// | zookeeper | yes | yes | | |
/// | hbase | | yes | | |
/// | [`AnyStore`] | the store it holds | | | |
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Capabilities(u8);

impl Capabilities {
    /// Nothing beyond the trait's contract: positions are stored after the output, and a
    /// restart re-plans from them.
    pub const NONE: Capabilities = Capabilities(0);
    /// The store logs each batch's plan before the batch runs ([`OffsetStore::log_plan`]
    /// writes), and [`OffsetStore::load`] gives back a logged batch that was not committed
    /// ([`Committed::pending`]), to be re-run with exactly its ranges. That log orders one
    /// stream's batches: **one writer only** (as Spark's checkpoint), so such a store cannot be
    /// shared by the members of a group, and the stream refuses it with one.
    pub const LOGS_PLANS: Capabilities = Capabilities(1);
    /// [`OffsetStore::commit`]'s compare-and-set on each range's `from` is atomic: of two
    /// writers committing from the same positions, exactly one succeeds and the other gets
    /// [`StoreErrorKind::Conflict`]. Without it the check is best-effort (read, then write).
    pub const ATOMIC_COMMIT: Capabilities = Capabilities(2);
    /// The offsets can be committed in one transaction with the user's output: the store is
    /// SQL, handed out by `OffsetStore::as_sql` (feature `sql`), which a store declaring this
    /// answers with `Some`.
    pub const TRANSACTIONAL: Capabilities = Capabilities(4);
    /// Commits carry the committing group member's identity ([`CommitContext::member`]), and
    /// the group's coordinator refuses the commit of a member that lost its partitions
    /// ([`StoreErrorKind::Fenced`]): the Kafka group's offsets.
    pub const FENCED_BY_GENERATION: Capabilities = Capabilities(8);

    const NAMES: [(Capabilities, &'static str); 4] = [
        (Self::LOGS_PLANS, "LOGS_PLANS"),
        (Self::ATOMIC_COMMIT, "ATOMIC_COMMIT"),
        (Self::TRANSACTIONAL, "TRANSACTIONAL"),
        (Self::FENCED_BY_GENERATION, "FENCED_BY_GENERATION"),
    ];

    /// Whether every flag of `other` is in `self`.
    pub const fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets' flags.
    pub const fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }

    /// [`LOGS_PLANS`](Self::LOGS_PLANS): write-ahead plan log, one writer only.
    pub const fn logs_plans(self) -> bool {
        self.contains(Self::LOGS_PLANS)
    }

    /// [`ATOMIC_COMMIT`](Self::ATOMIC_COMMIT).
    pub const fn atomic_commit(self) -> bool {
        self.contains(Self::ATOMIC_COMMIT)
    }

    /// [`TRANSACTIONAL`](Self::TRANSACTIONAL).
    pub const fn transactional(self) -> bool {
        self.contains(Self::TRANSACTIONAL)
    }

    /// [`FENCED_BY_GENERATION`](Self::FENCED_BY_GENERATION).
    pub const fn fenced_by_generation(self) -> bool {
        self.contains(Self::FENCED_BY_GENERATION)
    }
}

impl std::ops::BitOr for Capabilities {
    type Output = Capabilities;
    fn bitor(self, other: Capabilities) -> Capabilities {
        self.union(other)
    }
}

/// The flags by name: `LOGS_PLANS | ATOMIC_COMMIT`, `NONE`.
impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names = Self::NAMES
            .iter()
            .filter(|(c, _)| self.contains(*c))
            .map(|(_, n)| *n);
        match names.next() {
            None => f.write_str("NONE"),
            Some(first) => {
                f.write_str(first)?;
                names.try_for_each(|n| write!(f, " | {n}"))
            }
        }
    }
}

/// Who commits a batch, handed to each [`OffsetStore::commit`]: nobody in particular outside a
/// group ([`STANDALONE`](Self::STANDALONE)), or the group member whose partitions the batch
/// read ([`member`](Self::member)). The member is a live handle, not a copy of its identity:
/// a store reads the identity when it sends the commit (and again on each retry), since the
/// generation or member epoch can move on while a batch is held. A store that is not
/// [`Capabilities::FENCED_BY_GENERATION`] ignores it; a wrapper store passes it on unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitContext<'a> {
    member: Option<&'a GroupMember>,
}

impl CommitContext<'static> {
    /// A commit outside a group.
    pub const STANDALONE: CommitContext<'static> = CommitContext { member: None };
}

impl<'a> CommitContext<'a> {
    /// A commit by group member `member`.
    pub fn member(member: &'a GroupMember) -> CommitContext<'a> {
        CommitContext {
            member: Some(member),
        }
    }

    /// The committing group member, if the commit is made in a group.
    pub fn group_member(&self) -> Option<&'a GroupMember> {
        self.member
    }

    /// The identity to commit under now: `None` outside a group; in a group, the member's
    /// current generation (member id, instance id), or [`StoreErrorKind::Fenced`] (naming
    /// `store`) once the member lost its partitions.
    pub fn generation(&self, store: &str) -> Result<Option<Generation>, StoreError> {
        let Some(m) = self.member else {
            return Ok(None);
        };
        match m.generation() {
            Some(g) => Ok(Some(g)),
            None => Err(StoreErrorKind::Fenced {
                store: store.to_owned(),
                reason: m
                    .lost()
                    .unwrap_or_else(|| "the member is not in a generation".to_owned()),
            }
            .into()),
        }
    }
}

/// Where offsets live. Implemented by every store and by [`AnyStore`], which the CLI picks at
/// run time from a spec string ([`open_store`]).
///
/// Methods return `Send` futures, so a stream generic over `S: OffsetStore` can be spawned.
///
/// A store of the user's own (or a wrapper around one of these) implements the same methods;
/// a wrapper forwards [`capabilities`](Self::capabilities), `as_sql` and the [`CommitContext`]
/// of each commit, so the stream treats it as the store it wraps.
pub trait OffsetStore: Send + Sync {
    /// A short name for messages: `checkpoint /data/ckpt`, `postgres table kdirect_offsets`, ….
    fn describe(&self) -> String;

    /// What this store guarantees (see [`Capabilities`]): the stream refuses a store that
    /// [logs plans](Capabilities::LOGS_PLANS) in a group, and reaches the transactional API
    /// through `as_sql` (feature `sql`) only. Declared, never guessed from the type: declare
    /// only what the store does.
    fn capabilities(&self) -> Capabilities;

    /// The SQL store for the transactional exactly-once API and the sink table, when this is
    /// one (or a wrapper that hands the inner one out): what
    /// [`Capabilities::TRANSACTIONAL`] promises. `None` by default.
    #[cfg(feature = "sql")]
    fn as_sql(&self) -> Option<&sql::SqlStore> {
        None
    }

    /// The committed state. `topics` filters the positions (empty: every topic the store holds).
    fn load(&self, topics: &[String])
        -> impl Future<Output = Result<Committed, StoreError>> + Send;

    /// Logs a batch's ranges before it runs (write-ahead), so that a restart re-runs exactly
    /// them. A no-op for stores that cannot log plans.
    fn log_plan(&self, batch: &PlannedBatch)
        -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Stores the batch's positions after its output succeeded, comparing-and-setting on each
    /// range's `from` (see [`StoreErrorKind::Conflict`]; atomically if the store is
    /// [`Capabilities::ATOMIC_COMMIT`]). `ctx` says who commits: a store
    /// [`Capabilities::FENCED_BY_GENERATION`] commits under the member's identity as it is
    /// when the commit is sent, and fails with [`StoreErrorKind::Fenced`] once the member lost
    /// its partitions; other stores ignore it.
    fn commit(
        &self,
        batch: &PlannedBatch,
        ctx: &CommitContext<'_>,
    ) -> impl Future<Output = Result<CommitOutcome, StoreError>> + Send;

    /// Overwrites positions without compare-and-set, as batch `batch_id` (administration:
    /// `kdirect offsets set|reset|migrate`), as no group member (the Kafka group's
    /// coordinator accepts it only while the group is empty). Partitions not named keep their
    /// positions.
    fn set_positions(
        &self,
        batch_id: u64,
        positions: &Positions,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A parsed store spec: `checkpoint:DIR | kafka | sqlite:PATH | postgres://… | mysql://… |
/// redis://… | zk://… | hbase://…`. Its `Debug` redacts passwords ([`redact`]).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// `checkpoint:DIR`: a local directory, `s3://BUCKET/PREFIX`, `az://CONTAINER/PREFIX` or
    /// `hdfs://NAMENODE:PORT/PATH`.
    Checkpoint(PathBuf),
    /// `kafka`: the group's offsets in Kafka.
    Kafka,
    /// `sqlite:PATH` (or `sqlite://PATH`, `sqlite::memory:`), the URL as given.
    Sqlite(String),
    /// `postgres://…` / `postgresql://…`.
    Postgres(String),
    /// `mysql://…` / `mariadb://…` (the latter rewritten to `mysql://`).
    MySql(String),
    /// `redis://…` / `rediss://…`.
    Redis(String),
    /// `zk://host:port[,host:port…][/chroot]` (or `zookeeper://…`), as given.
    ZooKeeper(String),
    /// `hbase://host:port[/table]`: HBase's REST gateway.
    HBase(String),
}

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Checkpoint(dir) => f.debug_tuple("Checkpoint").field(dir).finish(),
            StoreSpec::Kafka => f.write_str("Kafka"),
            StoreSpec::Sqlite(u) => f.debug_tuple("Sqlite").field(&redact(u)).finish(),
            StoreSpec::Postgres(u) => f.debug_tuple("Postgres").field(&redact(u)).finish(),
            StoreSpec::MySql(u) => f.debug_tuple("MySql").field(&redact(u)).finish(),
            StoreSpec::Redis(u) => f.debug_tuple("Redis").field(&redact(u)).finish(),
            StoreSpec::ZooKeeper(u) => f.debug_tuple("ZooKeeper").field(&redact(u)).finish(),
            StoreSpec::HBase(u) => f.debug_tuple("HBase").field(&redact(u)).finish(),
        }
    }
}

impl StoreSpec {
    /// Parses a spec.
    pub fn parse(spec: &str) -> Result<StoreSpec, StoreError> {
        let bad = |reason: &str| -> StoreError {
            StoreErrorKind::Spec {
                spec: redact(spec),
                reason: reason.to_owned(),
            }
            .into()
        };
        if let Some(dir) = spec.strip_prefix("checkpoint:") {
            if dir.is_empty() {
                return Err(bad(
                    "checkpoint: needs a directory, e.g. checkpoint:/data/ckpt",
                ));
            }
            return Ok(StoreSpec::Checkpoint(PathBuf::from(dir)));
        }
        if spec == "kafka" {
            return Ok(StoreSpec::Kafka);
        }
        if let Some(rest) = spec.strip_prefix("sqlite:") {
            if rest.trim_start_matches('/').is_empty() {
                return Err(bad("sqlite: needs a file, e.g. sqlite:offsets.db"));
            }
            return Ok(StoreSpec::Sqlite(spec.to_owned()));
        }
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            return Ok(StoreSpec::Postgres(spec.to_owned()));
        }
        if spec.starts_with("mysql://") {
            return Ok(StoreSpec::MySql(spec.to_owned()));
        }
        if let Some(rest) = spec.strip_prefix("mariadb://") {
            return Ok(StoreSpec::MySql(format!("mysql://{rest}")));
        }
        if spec.starts_with("redis://") || spec.starts_with("rediss://") {
            return Ok(StoreSpec::Redis(spec.to_owned()));
        }
        if spec.starts_with("zk://") || spec.starts_with("zookeeper://") {
            return Ok(StoreSpec::ZooKeeper(spec.to_owned()));
        }
        if spec.starts_with("hbase://") || spec.starts_with("hbases://") {
            return Ok(StoreSpec::HBase(spec.to_owned()));
        }
        Err(bad(
            "expected checkpoint:DIR, kafka, sqlite:PATH, postgres://…, mysql://…, redis://…, \
             zk://… or hbase://…",
        ))
    }
}

/// What [`open_store`] needs besides the spec.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpenOptions {
    /// The cluster, for the `kafka` store (which commits through the engine's connections).
    pub cluster: Option<Arc<Cluster>>,
    /// Checkpoint retention: how many batches' files to keep (default 100).
    pub retention: usize,
    /// SQL stores: the offsets table (default `kdirect_offsets`).
    pub table: String,
    /// Open only a store that exists (a checkpoint directory, an SQLite file): for commands
    /// that only read or repair, so a mistyped path is an error and creates nothing.
    pub must_exist: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            cluster: None,
            retention: checkpoint::DEFAULT_RETENTION,
            table: "kdirect_offsets".to_owned(),
            must_exist: false,
        }
    }
}

/// One of the stores, chosen at run time.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// A checkpoint directory.
    Checkpoint(checkpoint::CheckpointStore),
    /// Kafka group offsets.
    Kafka(kafka::KafkaGroupStore),
    /// SQLite, PostgreSQL or MySQL/MariaDB.
    #[cfg(feature = "sql")]
    Sql(sql::SqlStore),
    /// Redis.
    #[cfg(feature = "redis")]
    Redis(redis::RedisStore),
    /// ZooKeeper.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(zookeeper::ZooKeeperStore),
    /// HBase.
    #[cfg(feature = "hbase")]
    HBase(hbase::HBaseStore),
}

/// Opens the store named by `spec` for consumer group `group` (the checkpoint directory
/// ignores the group: a checkpoint belongs to one stream).
pub async fn open_store(
    spec: &str,
    group: &str,
    options: &OpenOptions,
) -> Result<AnyStore, StoreError> {
    let parsed = StoreSpec::parse(spec)?;
    if options.must_exist {
        let missing = |reason: String| -> StoreError {
            StoreErrorKind::Missing {
                spec: redact(spec),
                reason,
            }
            .into()
        };
        match &parsed {
            StoreSpec::Checkpoint(dir)
                if !checkpoint::CheckpointStore::is_object_url(dir)
                    && !checkpoint::CheckpointStore::is_hdfs_url(dir)
                    && !dir.join("metadata").is_file() =>
            {
                return Err(missing(format!(
                    "{} is not a kdirect checkpoint (no metadata file)",
                    dir.display()
                )))
            }
            StoreSpec::Sqlite(url) => {
                let path = url
                    .trim_start_matches("sqlite:")
                    .trim_start_matches("//")
                    .split('?')
                    .next()
                    .unwrap_or_default();
                if path != ":memory:" && !std::path::Path::new(path).is_file() {
                    return Err(missing(format!("no SQLite file {path}")));
                }
            }
            _ => {}
        }
    }
    match parsed {
        #[cfg(feature = "object-store")]
        StoreSpec::Checkpoint(dir) if checkpoint::CheckpointStore::is_object_url(&dir) => {
            Ok(AnyStore::Checkpoint(
                checkpoint::CheckpointStore::open_object(
                    dir.to_str().unwrap_or_default(),
                    options.retention,
                )
                .await?,
            ))
        }
        #[cfg(not(feature = "object-store"))]
        StoreSpec::Checkpoint(dir) if checkpoint::CheckpointStore::is_object_url(&dir) => {
            Err(StoreErrorKind::FeatureDisabled {
                spec: redact(spec),
                feature: "object-store",
            }
            .into())
        }
        #[cfg(feature = "hdfs")]
        StoreSpec::Checkpoint(dir) if checkpoint::CheckpointStore::is_hdfs_url(&dir) => {
            Ok(AnyStore::Checkpoint(
                checkpoint::CheckpointStore::open_hdfs(
                    dir.to_str().unwrap_or_default(),
                    options.retention,
                )
                .await?,
            ))
        }
        #[cfg(not(feature = "hdfs"))]
        StoreSpec::Checkpoint(dir) if checkpoint::CheckpointStore::is_hdfs_url(&dir) => {
            Err(StoreErrorKind::FeatureDisabled {
                spec: redact(spec),
                feature: "hdfs",
            }
            .into())
        }
        StoreSpec::Checkpoint(dir) => Ok(AnyStore::Checkpoint(checkpoint::CheckpointStore::open(
            dir,
            options.retention,
        )?)),
        StoreSpec::Kafka => {
            let cluster = options
                .cluster
                .clone()
                .ok_or_else(|| StoreErrorKind::NeedsCluster { spec: redact(spec) })?;
            Ok(AnyStore::Kafka(kafka::KafkaGroupStore::new(cluster, group)))
        }
        #[cfg(feature = "sql")]
        StoreSpec::Sqlite(url) | StoreSpec::Postgres(url) | StoreSpec::MySql(url) => Ok(
            AnyStore::Sql(sql::SqlStore::connect_with_table(&url, group, &options.table).await?),
        ),
        #[cfg(not(feature = "sql"))]
        StoreSpec::Sqlite(_) | StoreSpec::Postgres(_) | StoreSpec::MySql(_) => {
            Err(StoreErrorKind::FeatureDisabled {
                spec: redact(spec),
                feature: "sql",
            }
            .into())
        }
        #[cfg(feature = "redis")]
        StoreSpec::Redis(url) => Ok(AnyStore::Redis(
            redis::RedisStore::connect(&url, group).await?,
        )),
        #[cfg(not(feature = "redis"))]
        StoreSpec::Redis(_) => Err(StoreErrorKind::FeatureDisabled {
            spec: redact(spec),
            feature: "redis",
        }
        .into()),
        #[cfg(feature = "zookeeper")]
        StoreSpec::ZooKeeper(url) => Ok(AnyStore::ZooKeeper(
            zookeeper::ZooKeeperStore::connect(&url, group).await?,
        )),
        #[cfg(not(feature = "zookeeper"))]
        StoreSpec::ZooKeeper(_) => Err(StoreErrorKind::FeatureDisabled {
            spec: redact(spec),
            feature: "zookeeper",
        }
        .into()),
        #[cfg(feature = "hbase")]
        StoreSpec::HBase(url) => Ok(AnyStore::HBase(
            hbase::HBaseStore::connect(&url, group).await?,
        )),
        #[cfg(not(feature = "hbase"))]
        StoreSpec::HBase(_) => Err(StoreErrorKind::FeatureDisabled {
            spec: redact(spec),
            feature: "hbase",
        }
        .into()),
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Checkpoint($s) => $e,
            AnyStore::Kafka($s) => $e,
            #[cfg(feature = "sql")]
            AnyStore::Sql($s) => $e,
            #[cfg(feature = "redis")]
            AnyStore::Redis($s) => $e,
            #[cfg(feature = "zookeeper")]
            AnyStore::ZooKeeper($s) => $e,
            #[cfg(feature = "hbase")]
            AnyStore::HBase($s) => $e,
        }
    };
}

/// Everything forwards to the store it holds, its capabilities and the SQL store included.
impl OffsetStore for AnyStore {
    fn describe(&self) -> String {
        dispatch!(self, s => s.describe())
    }

    fn capabilities(&self) -> Capabilities {
        dispatch!(self, s => s.capabilities())
    }

    #[cfg(feature = "sql")]
    fn as_sql(&self) -> Option<&sql::SqlStore> {
        dispatch!(self, s => s.as_sql())
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        dispatch!(self, s => s.load(topics).await)
    }

    async fn log_plan(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        dispatch!(self, s => s.log_plan(batch).await)
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        dispatch!(self, s => s.commit(batch, ctx).await)
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        dispatch!(self, s => s.set_positions(batch_id, positions).await)
    }
}

/// Query parameters whose values are secrets (compared without case; also any name that
/// contains `pass`, `secret` or `token`).
const SECRET_PARAMS: &[&str] = &["pwd", "auth", "key", "sslkey", "apikey"];

/// `spec` with its secrets replaced by `***`, for every message and `Debug` output: the
/// password in the user-info (everything between the user name and the **last** `@`, so a
/// password containing `@`, `/` or `?` does not leak its tail) and the values of query
/// parameters that carry secrets (`?password=…`, `&sslpassword=…`, `token`, …; an `@` inside
/// such a value hides what follows it up to the next parameter). A spec whose
/// shape is unclear (no `://` but an `@`) loses everything before the `@`: over-redacting is
/// the safe mistake.
pub fn redact(spec: &str) -> String {
    let (scheme, rest) = match spec.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, spec),
    };
    let (userinfo, tail) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = String::with_capacity(spec.len());
    match (scheme, userinfo) {
        (Some(s), Some(u)) => {
            out.push_str(s);
            out.push_str("://");
            match u.split_once(':') {
                Some((user, _)) => {
                    // A user name, or a query whose secret value holds `:` and `@`.
                    redact_path_query(user, &mut out);
                    out.push_str(":***@");
                }
                None => {
                    // A user name, or (with an `@` in a query value) a host, path and query.
                    redact_path_query(u, &mut out);
                    out.push('@');
                }
            }
        }
        (Some(s), None) => {
            out.push_str(s);
            out.push_str("://");
        }
        (None, Some(_)) => out.push_str("***@"),
        (None, None) => {}
    }
    // An `@` inside a secret query value (`?password=s3@cr3t`) is the last `@`: what follows
    // it is the rest of that value, up to the next parameter.
    let in_secret_value = userinfo
        .and_then(|u| u.split_once('?'))
        .and_then(|(_, query)| query.rsplit('&').next())
        .and_then(|kv| kv.split_once('='))
        .is_some_and(|(k, _)| is_secret_param(k));
    if in_secret_value {
        out.push_str("***");
        if let Some((_, params)) = tail.split_once('&') {
            out.push('&');
            redact_query(params, &mut out);
        }
        return out;
    }
    redact_path_query(tail, &mut out);
    out
}

/// Appends `path?query` with the values of secret parameters replaced.
fn redact_path_query(s: &str, out: &mut String) {
    match s.split_once('?') {
        None => out.push_str(s),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            redact_query(query, out);
        }
    }
}

/// Appends `a=1&password=…` with the values of secret parameters replaced.
fn redact_query(query: &str, out: &mut String) {
    for (i, kv) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match kv.split_once('=') {
            Some((k, _)) if is_secret_param(k) => {
                out.push_str(k);
                out.push_str("=***");
            }
            _ => out.push_str(kv),
        }
    }
}

fn is_secret_param(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("pass")
        || n.contains("secret")
        || n.contains("token")
        || SECRET_PARAMS.contains(&n.as_str())
}

/// Compare-and-set against `stored` positions, by the one commit rule ([`decide`]) with no
/// batch ids stored (so nothing counts as committed already): the first range whose partition
/// holds another position than the batch expects ([`PlannedBatch::expected_from`]) is a
/// conflict. A partition without a position accepts any `from`.
pub(crate) fn check_from(
    store: &str,
    stored: &Positions,
    batch: &PlannedBatch,
) -> Result<(), StoreError> {
    let found = found_in(batch, stored, None);
    decided(store, batch, decide(batch, &found)).map(|_| ())
}

/// What each of `batch`'s ranges finds in `stored`, as [`decide`] takes it: its partition's
/// position, written by `batch_id` (a store that keeps one batch id for all its partitions).
pub(crate) fn found_in(
    batch: &PlannedBatch,
    stored: &Positions,
    batch_id: Option<u64>,
) -> Vec<Option<StoredPosition>> {
    batch
        .ranges
        .iter()
        .map(|r| {
            stored
                .get(&r.topic_partition())
                .map(|&position| StoredPosition { position, batch_id })
        })
        .collect()
}

/// A store's answer for [`decide`]'s decision: `Ok(true)` to write, `Ok(false)` committed
/// already, the conflict as [`StoreErrorKind::Conflict`].
pub(crate) fn decided(
    store: &str,
    batch: &PlannedBatch,
    decision: CommitDecision,
) -> Result<bool, StoreError> {
    match decision {
        CommitDecision::Write => Ok(true),
        CommitDecision::AlreadyCommitted => Ok(false),
        CommitDecision::Conflict { index, stored } => {
            let r = batch.ranges.get(index).ok_or_else(|| {
                StoreError::from(StoreErrorKind::Invalid {
                    what: "batch id",
                    value: batch.id.to_string(),
                    reason: format!("a conflict on range {index}, which the batch does not have"),
                })
            })?;
            Err(conflict(store, r, batch.expected_from(r), stored))
        }
    }
}

/// `r`'s partition holds `stored` where the batch expected `expected`.
pub(crate) fn conflict(
    store: &str,
    r: &OffsetRange,
    expected: i64,
    stored: Option<i64>,
) -> StoreError {
    StoreErrorKind::Conflict {
        store: store.to_owned(),
        topic: r.topic.to_string(),
        partition: r.partition,
        expected_from: expected,
        stored: Stored(stored),
    }
    .into()
}

/// What a store holds for one partition when a batch is committed: its position and the
/// batch that wrote it (`None` for a store that does not keep batch ids per partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredPosition {
    /// The stored next offset.
    pub position: i64,
    /// The batch that stored it.
    pub batch_id: Option<u64>,
}

/// What committing a batch does over what is stored: [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitDecision {
    /// Every range moves its partition from where it is stored (or from nothing): write.
    Write,
    /// Every range that moves its partition finds it at the range's end, written by this
    /// batch: an earlier commit of the same batch (a re-run after a crash between the commit
    /// and its acknowledgement). Nothing to write.
    AlreadyCommitted,
    /// Range `index` finds its partition elsewhere (`stored`; `None`: nothing stored), or the
    /// batch is half committed: some ranges at their ends by this batch, others at their
    /// starts, which no single writer leaves (all of a batch's positions are written
    /// atomically), so another writer moved them.
    Conflict {
        /// The range's index in the batch.
        index: usize,
        /// What it found stored.
        stored: Option<i64>,
    },
}

/// The one commit rule (issue 33): from what is stored for each of `batch`'s ranges
/// (`stored[i]` for `batch.ranges[i]`, `None`: nothing stored) to what the commit does.
///
/// - A range finds its partition at [`PlannedBatch::expected_from`], or nothing stored: it
///   writes.
/// - A range that moves its partition finds it at its `until` with this batch's id: it is
///   committed already.
/// - Anything else is a conflict: another writer moved the partition.
///
/// The batch is [`CommitDecision::AlreadyCommitted`] when every range that moves its
/// partition is committed already, [`CommitDecision::Write`] when none is, and a
/// [`CommitDecision::Conflict`] when some are and some are not (committing the rest would
/// run the batch's output again for the partitions that had it). A range that does not move
/// its partition (empty, at its start) counts for neither. Each store applies it inside its
/// own atomic step (a transaction, a script, a compare-and-set).
pub fn decide(batch: &PlannedBatch, stored: &[Option<StoredPosition>]) -> CommitDecision {
    let (mut already, mut first_write) = (0usize, None);
    let mut moving = 0usize;
    for (index, r) in batch.ranges.iter().enumerate() {
        let found = stored.get(index).copied().flatten();
        let expected = batch.expected_from(r);
        let moves = batch.moves(r);
        moving += usize::from(moves);
        let position = found.map(|p| p.position);
        match found {
            // Nothing stored, or where the range starts: it writes.
            _ if position.is_none_or(|p| p == expected) => {
                if moves {
                    first_write.get_or_insert((index, position));
                }
            }
            Some(p) if moves && p.position == r.until && p.batch_id == Some(batch.id) => {
                already += 1;
            }
            _ => {
                return CommitDecision::Conflict {
                    index,
                    stored: position,
                }
            }
        }
    }
    match first_write {
        _ if moving > 0 && already == moving => CommitDecision::AlreadyCommitted,
        Some((index, stored)) if already > 0 => CommitDecision::Conflict { index, stored },
        _ => CommitDecision::Write,
    }
}

/// Batch ids are stored as signed 64-bit integers by SQL and Kafka metadata readers.
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
pub(crate) fn batch_id_i64(id: u64) -> Result<i64, StoreError> {
    i64::try_from(id).map_err(|_| {
        StoreErrorKind::Invalid {
            what: "batch id",
            value: id.to_string(),
            reason: "above 2^63-1".to_owned(),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(position: i64, batch_id: Option<u64>) -> Option<StoredPosition> {
        Some(StoredPosition { position, batch_id })
    }

    /// The one commit rule, case by case: batch 7 moves t-0 [10, 20) and t-1 [5, 9), and
    /// leaves t-2 at 3 (an empty range).
    #[test]
    fn the_commit_rule_decides_write_already_or_conflict() {
        let b = PlannedBatch::new(
            7,
            vec![
                OffsetRange::new("t", 0, 10, 20),
                OffsetRange::new("t", 1, 5, 9),
                OffsetRange::new("t", 2, 3, 3),
            ],
        );
        use CommitDecision::*;
        let cases: [(&str, [Option<StoredPosition>; 3], CommitDecision); 8] = [
            (
                "all at their starts",
                [at(10, Some(6)), at(5, Some(3)), at(3, None)],
                Write,
            ),
            ("nothing stored yet", [None, None, None], Write),
            (
                "one new, one at its start",
                [None, at(5, None), at(3, None)],
                Write,
            ),
            (
                "all at their ends by batch 7",
                [at(20, Some(7)), at(9, Some(7)), at(3, Some(2))],
                AlreadyCommitted,
            ),
            // The empty range says nothing: at its start either way.
            (
                "at the ends, the empty range elsewhere",
                [at(20, Some(7)), at(9, Some(7)), at(4, None)],
                Conflict {
                    index: 2,
                    stored: Some(4),
                },
            ),
            (
                "at its end by another batch",
                [at(20, Some(8)), at(5, None), at(3, None)],
                Conflict {
                    index: 0,
                    stored: Some(20),
                },
            ),
            (
                "moved on by someone else",
                [at(10, None), at(7, None), at(3, None)],
                Conflict {
                    index: 1,
                    stored: Some(7),
                },
            ),
            // Half committed: t-0 by batch 7, t-1 still at its start. Writing t-1 would run
            // the batch's output again for t-0.
            (
                "half committed",
                [at(20, Some(7)), at(5, Some(6)), at(3, None)],
                Conflict {
                    index: 1,
                    stored: Some(5),
                },
            ),
        ];
        for (what, stored, want) in cases {
            assert_eq!(decide(&b, &stored), want, "{what}");
        }
        // A batch of empty ranges only: nothing moves, a write of nothing.
        let empty = PlannedBatch::new(8, vec![OffsetRange::new("t", 0, 20, 20)]);
        assert_eq!(decide(&empty, &[at(20, Some(7))]), Write);
    }

    #[test]
    fn specs_parse() {
        assert_eq!(
            StoreSpec::parse("checkpoint:/tmp/x").unwrap(),
            StoreSpec::Checkpoint("/tmp/x".into())
        );
        assert_eq!(StoreSpec::parse("kafka").unwrap(), StoreSpec::Kafka);
        assert_eq!(
            StoreSpec::parse("sqlite:o.db").unwrap(),
            StoreSpec::Sqlite("sqlite:o.db".into())
        );
        assert_eq!(
            StoreSpec::parse("mariadb://root@h/db").unwrap(),
            StoreSpec::MySql("mysql://root@h/db".into())
        );
        assert!(StoreSpec::parse("checkpoint:").is_err());
        let e = StoreSpec::parse("s3://bucket").unwrap_err();
        assert!(e.to_string().contains("s3://bucket"), "{e}");
    }

    #[test]
    fn redact_hides_every_password_shape() {
        let cases = [
            ("postgres://u:s3cr3t@h/db", "postgres://u:***@h/db"),
            ("mysql://root@h/db", "mysql://root@h/db"),
            // A password with '@', '/' and '?' in it: everything up to the last '@' goes.
            (
                "postgres://u:s3@cr/3?t@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            (
                "postgres://h/db?user=u&password=s3cr3t&sslmode=require",
                "postgres://h/db?user=u&password=***&sslmode=require",
            ),
            (
                "redis://h:6379/0?token=s3cr3t",
                "redis://h:6379/0?token=***",
            ),
            // Mistyped schemes and shapes: over-redacted, never leaked.
            ("postgress://u:s3cr3t@h/db", "postgress://u:***@h/db"),
            ("postgres//u:s3cr3t@h/db", "***@h/db"),
            ("checkpoint:/data/ckpt", "checkpoint:/data/ckpt"),
        ];
        for (spec, want) in cases {
            assert_eq!(redact(spec), want, "{spec}");
            assert!(!redact(spec).contains("s3"), "{spec}");
        }
        let e = StoreSpec::parse("postgress://u:s3cr3t@h/db").unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        assert!(!format!("{e:?}").contains("s3cr3t"), "{e:?}");
        let s = StoreSpec::parse("postgres://u:s3cr3t@h/db").unwrap();
        assert!(!format!("{s:?}").contains("s3cr3t"), "{s:?}");
    }

    /// Found by the `store_spec` fuzz target: an `@` inside a secret query value became the
    /// user-info's `@`, so the value's tail was printed as the host (and, without a password
    /// in the user-info, its head as the user name).
    #[test]
    fn redact_hides_a_query_secret_holding_an_at_sign() {
        let cases = [
            (
                "mysql://u:pw@h/d?ssl=on&password=s3@cr3t",
                "mysql://u:***@***",
            ),
            (
                "redis://h:6379/0?password=s3@cr3t&db=1&token=s3x",
                "redis://h:***@***&db=1&token=***",
            ),
            ("postgres//h/d?password=s3@cr3t", "***@***"),
            // No ':' in what precedes the '@': not a password, but still a query.
            (
                "redis://h/0?password=s3@cr3t",
                "redis://h/0?password=***@***",
            ),
            // ... and with a ':' in the secret before its '@'.
            (
                "redis://h/0?password=s3:cr@3t",
                "redis://h/0?password=***:***@***",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(redact(spec), want, "{spec}");
            assert_eq!(redact(want), want, "redacting twice changes {want}");
        }
    }

    /// Each store's declared capabilities are the table in [`Capabilities`]' docs (read from
    /// this file, so the docs cannot drift from the code), row by row.
    #[test]
    fn every_store_declares_what_the_docs_say() {
        let declared = [
            ("checkpoint", checkpoint::CheckpointStore::CAPABILITIES),
            ("kafka", kafka::KafkaGroupStore::CAPABILITIES),
            #[cfg(feature = "sql")]
            ("sql", sql::SqlStore::CAPABILITIES),
            #[cfg(feature = "redis")]
            ("redis", redis::RedisStore::CAPABILITIES),
            #[cfg(feature = "zookeeper")]
            ("zookeeper", zookeeper::ZooKeeperStore::CAPABILITIES),
            #[cfg(feature = "hbase")]
            ("hbase", hbase::HBaseStore::CAPABILITIES),
        ];
        let columns = [
            Capabilities::LOGS_PLANS,
            Capabilities::ATOMIC_COMMIT,
            Capabilities::TRANSACTIONAL,
            Capabilities::FENCED_BY_GENERATION,
        ];
        let doc = include_str!("lib.rs");
        let mut rows = 0;
        for line in doc.lines().map(str::trim) {
            let Some(row) = line.strip_prefix("/// | ") else {
                continue;
            };
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let store = cells[0].split(' ').next().unwrap_or_default();
            let Some((_, caps)) = declared.iter().find(|(name, _)| *name == store) else {
                continue;
            };
            rows += 1;
            for (cell, flag) in cells[1..].iter().zip(columns) {
                assert_eq!(
                    caps.contains(flag),
                    *cell == "yes",
                    "{store}: {flag:?} is declared {} but the docs say '{cell}'",
                    caps.contains(flag)
                );
            }
        }
        assert_eq!(rows, declared.len(), "a store without its row in the docs");
        assert_eq!(
            format!("{:?}", checkpoint::CheckpointStore::CAPABILITIES),
            "LOGS_PLANS | ATOMIC_COMMIT"
        );
        assert_eq!(format!("{:?}", Capabilities::NONE), "NONE");
    }

    /// `AnyStore` declares the capabilities of the store it holds, and hands the SQL store out.
    #[test]
    fn any_store_forwards_its_stores_capabilities() {
        let dir = std::env::temp_dir().join(format!(
            "kdirect-any-caps-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let any = AnyStore::Checkpoint(checkpoint::CheckpointStore::open(&dir, 1).unwrap());
        assert_eq!(
            any.capabilities(),
            checkpoint::CheckpointStore::CAPABILITIES
        );
        #[cfg(feature = "sql")]
        assert!(any.as_sql().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn next_batch_id() {
        let mut c = Committed::default();
        assert_eq!(c.next_batch_id(), 0);
        c.batch_id = Some(4);
        assert_eq!(c.next_batch_id(), 5);
        c.pending = Some(PlannedBatch::new(5, vec![]));
        assert_eq!(c.next_batch_id(), 5);
    }
}
