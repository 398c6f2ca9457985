//! Administration through the library: what `kdirect offsets` and `kdirect lag` do, for an
//! embedder — each partition's log bounds as a map, positions reset with
//! `kafka-consumer-groups`' vocabulary ([`ResetTo`]), positions checked against the log
//! ([`inside_log`]), positions written to any store as the batch after its last
//! ([`set_positions`]), positions copied from one store to another ([`migrate`]), positions
//! imported from a Spark Structured Streaming checkpoint ([`Admin::plan_import_spark`]) or
//! from the layouts Spark Streaming jobs keep their own offsets in ([`Admin::plan_import`]), a
//! store's lag against the log ([`Admin::lag`]) and a group's members
//! ([`Admin::describe_group`]).
//!
//! ```no_run
//! # async fn f() -> Result<(), kdirect::Error> {
//! use kdirect::admin::{Admin, ResetTo};
//! let admin = Admin::connect("127.0.0.1:9092", &[]).await?;
//! let store = kdirect::CheckpointStore::open("/data/ckpt", 100)?;
//! // What `kdirect offsets reset --to-earliest -t events` prints (a dry run)…
//! let reset = admin.plan_reset(&store, &["events".into()], &ResetTo::Earliest).await?;
//! for (tp, o) in &reset.positions {
//!     println!("{tp}: {:?} -> {o}", reset.before.positions.get(tp));
//! }
//! // …and what `--execute` writes.
//! reset.execute(&store).await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kdirect_commit::{Committed, OffsetStore, Positions};
use kdirect_engine::cluster::Cluster;
use kdirect_engine::plan::TopicPartition;
use kdirect_proto::api::describe_groups::GroupDescription;
use kdirect_proto::api::list_offsets::OffsetSpec;
use kdirect_proto::IsolationLevel;

use crate::{DirectStream, Error};

pub use kdirect_commit::import::{Source, SqlLayout, REDIS_KEY};
pub use kdirect_commit::spark::{SparkCheckpoint, SparkImport, Take};

/// An administration request refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The program imported from holds no position for the topic.
    #[error("{from} holds no offsets for topic {topic}; nothing was written")]
    NoPositions {
        /// Where the positions were read, as [`Source::describe`] names it.
        from: String,
        /// The topic.
        topic: String,
    },
    /// Positions outside their partitions' logs (or of partitions the cluster does not have),
    /// every one of them named ([`inside_log`]).
    #[error(
        "{}; nothing was written",
        refused.iter().map(|o| o.describe(whose)).collect::<Vec<_>>().join("; ")
    )]
    OutsideLog {
        /// Whose positions they are, for the message: `the source's`, `Spark's`.
        whose: &'static str,
        /// Each position refused.
        refused: Vec<OutsideLog>,
    },
    /// A line of a positions CSV ([`positions_from_csv`]) that is not
    /// `topic,partition,offset`.
    #[error("line {line}: expected topic,partition,offset")]
    Csv {
        /// The line, from 1.
        line: usize,
    },
}

/// One partition's lag, as `kafka-consumer-groups --describe` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLag {
    /// The position the store holds (`None`: none committed).
    pub committed: Option<i64>,
    /// The partition's log.
    pub log: LogBounds,
}

impl PartitionLag {
    /// Records between the committed position and the log end (never below 0); `None`
    /// without a committed position (not 0: nothing is known).
    pub fn lag(&self) -> Option<i64> {
        self.committed.map(|c| (self.log.end - c).max(0))
    }

    /// Offsets between the log start and the committed position: how many records retention
    /// may still remove before it eats unread data (negative: it already removed that many).
    pub fn margin(&self) -> Option<i64> {
        self.committed.map(|c| c - self.log.start)
    }
}

/// A store's positions against the log, partition by partition ([`Admin::lag`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lag {
    /// The last batch id the store committed.
    pub batch_id: Option<u64>,
    /// Every partition of the topics asked for.
    pub partitions: BTreeMap<TopicPartition, PartitionLag>,
}

impl Lag {
    /// The sum of the known lags; `None` when no partition has a committed position.
    pub fn total(&self) -> Option<i64> {
        let known: Vec<i64> = self.partitions.values().filter_map(|p| p.lag()).collect();
        (!known.is_empty()).then(|| known.iter().sum())
    }

    /// How many partitions have no committed position.
    pub fn without_position(&self) -> usize {
        self.partitions
            .values()
            .filter(|p| p.committed.is_none())
            .count()
    }

    /// The smallest retention margin ([`PartitionLag::margin`]).
    pub fn min_margin(&self) -> Option<i64> {
        self.partitions.values().filter_map(|p| p.margin()).min()
    }

    /// Offsets retention removed below committed positions, summed (0: none lost).
    pub fn lost(&self) -> i64 {
        self.partitions
            .values()
            .filter_map(|p| p.margin())
            .filter(|m| *m < 0)
            .map(|m| -m)
            .sum()
    }
}

/// A connection to a cluster for administration (no stream, no group membership).
#[derive(Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

/// One partition's log: offsets `[start, end)` can be read; a position may be anywhere in
/// `[start, end]` (at `end`: nothing left to read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    /// The log start offset (earliest).
    pub start: i64,
    /// The end: the high watermark, or the last stable offset under read_committed (latest).
    pub end: i64,
}

impl LogBounds {
    /// Whether `position` lies in `[start, end]`.
    pub fn contains(&self, position: i64) -> bool {
        (self.start..=self.end).contains(&position)
    }

    /// `position` moved to the nearest bound when outside the log.
    pub fn clamp(&self, position: i64) -> i64 {
        position.clamp(self.start, self.end.max(self.start))
    }
}

/// Where [`Admin::plan_reset`] moves each partition: `kafka-consumer-groups --reset-offsets`'
/// targets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetTo {
    /// Each partition's log start (`--to-earliest`).
    Earliest,
    /// Each partition's end (`--to-latest`).
    Latest,
    /// This offset in every partition, kept within the log (`--to-offset`).
    Offset(i64),
    /// The first record at or after this time, in ms since the Unix epoch; the end where no
    /// record is that recent (`--to-datetime`).
    Datetime(i64),
    /// The first record at or after now minus this long (`--by-duration`).
    ByDuration(Duration),
    /// The stored position moved by N (negative: back), kept within the log; partitions
    /// without a stored position are left out (`--shift-by`).
    ShiftBy(i64),
    /// The stored positions as they are (`--to-current`, to export them).
    Current,
    /// These positions (`--from-file`); each must be a partition of the cluster.
    Positions(Positions),
}

/// What a reset would write, and what the store held before: a dry run prints it,
/// [`execute`](Self::execute) writes it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Reset {
    /// The store's state before the reset.
    pub before: Committed,
    /// The new positions.
    pub positions: Positions,
}

impl Reset {
    /// Writes the new positions as the batch after the store's last ([`set_positions`]).
    pub async fn execute<S: OffsetStore>(&self, store: &S) -> Result<(), Error> {
        store
            .set_positions(batch_id_for(&self.before, None), &self.positions)
            .await?;
        Ok(())
    }
}

/// A position outside its partition's log, or of a partition the cluster does not have;
/// see [`inside_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutsideLog {
    /// The partition.
    pub partition: TopicPartition,
    /// The position given.
    pub position: i64,
    /// The partition's log, `None` when the cluster has no such partition.
    pub log: Option<LogBounds>,
}

impl OutsideLog {
    /// Why, in words: retention, a re-created topic, another cluster.
    pub fn reason(&self) -> &'static str {
        match self.log {
            None => "not a partition of the cluster (topic re-created with fewer partitions?)",
            Some(l) if self.position < l.start => "retention deleted the records since",
            Some(_) => "past the end: topic re-created or another cluster?",
        }
    }
}

impl OutsideLog {
    /// The refusal in words, `whose` naming where the position came from (`the source's`,
    /// `Spark's`): `t-1: Spark's position 600 is outside the log [0, 100] (past the end: …)`.
    pub fn describe(&self, whose: &str) -> String {
        let tp = &self.partition;
        match self.log {
            None => format!(
                "{}-{}: in {whose} offsets but {}",
                tp.topic,
                tp.partition,
                self.reason()
            ),
            Some(l) => format!(
                "{}-{}: {whose} position {} is outside the log [{}, {}] ({})",
                tp.topic,
                tp.partition,
                self.position,
                l.start,
                l.end,
                self.reason()
            ),
        }
    }
}

impl std::fmt::Display for OutsideLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tp = &self.partition;
        match self.log {
            None => write!(f, "{tp}: position {}: {}", self.position, self.reason()),
            Some(l) => write!(
                f,
                "{tp}: position {} is outside the log [{}, {}] ({})",
                self.position,
                l.start,
                l.end,
                self.reason()
            ),
        }
    }
}

/// Checks `positions` against the log: every partition known to `bounds`, every position in
/// `[start, end]`. With `clamp`, a position outside its log is moved to the nearest bound
/// and reported in the second list; a partition the cluster does not have is always an
/// error. Without `clamp`, every position outside is an error. The errors, all of them, or
/// the positions to write.
pub fn inside_log(
    positions: &Positions,
    bounds: &BTreeMap<TopicPartition, LogBounds>,
    clamp: bool,
) -> Result<(Positions, Vec<OutsideLog>), Vec<OutsideLog>> {
    let mut out = Positions::new();
    let (mut moved, mut refused) = (Vec::new(), Vec::new());
    for (tp, &position) in positions {
        let log = bounds.get(tp).copied();
        let outside = || OutsideLog {
            partition: tp.clone(),
            position,
            log,
        };
        match log {
            Some(l) if l.contains(position) => {
                out.insert(tp.clone(), position);
            }
            Some(l) if clamp => {
                out.insert(tp.clone(), l.clamp(position));
                moved.push(outside());
            }
            _ => refused.push(outside()),
        }
    }
    if refused.is_empty() {
        Ok((out, moved))
    } else {
        Err(refused)
    }
}

/// The batch id positions written to a store holding `dest` take: the next of its own
/// ([`Committed::next_batch_id`]: the pending batch's when a plan is logged and not
/// committed, which the write then settles); for an empty store continuing another's
/// positions (a migration, an import from Spark) whose last batch was `continuing`, that
/// batch's id, so that the next batch is the other's next.
pub fn batch_id_for(dest: &Committed, continuing: Option<u64>) -> u64 {
    match continuing {
        Some(last) if dest.batch_id.is_none() && dest.pending.is_none() => last,
        _ => dest.next_batch_id(),
    }
}

/// Writes `positions` to `store` as the batch after its last (the pending batch's id when a
/// plan is logged and not committed, which the write then settles), without compare-and-set:
/// administration, for a stream that is not running. Partitions not named keep their
/// positions. What the store held before.
pub async fn set_positions<S: OffsetStore>(
    store: &S,
    positions: &Positions,
) -> Result<Committed, Error> {
    let topics: Vec<String> = {
        let mut t: Vec<String> = positions.keys().map(|tp| tp.topic.to_string()).collect();
        t.dedup();
        t
    };
    let before = store.load(&topics).await?;
    store
        .set_positions(batch_id_for(&before, None), positions)
        .await?;
    Ok(before)
}

/// What [`migrate`] copied.
#[derive(Debug, Clone)]
pub struct Migrated {
    /// The positions copied (empty: the source held none, and nothing was written).
    pub positions: Positions,
    /// The batch id they were written under in the destination.
    pub batch_id: u64,
    /// What the destination held before.
    pub before: Committed,
    /// A batch the source had logged and not committed: its committed positions were copied,
    /// and a stream on the destination re-plans from them.
    pub source_pending: Option<u64>,
}

/// Copies `from`'s committed positions for `topics` (every topic it holds when empty) into
/// `to` (any two stores: a checkpoint into Kafka group offsets, ZooKeeper into PostgreSQL),
/// as the batch after `to`'s last; an empty destination continues `from`'s batch ids, so a
/// stream moved to it goes on with the next batch. Nothing is written when `from` holds no
/// position. Administration: no stream may be running on either store.
pub async fn migrate<A: OffsetStore, B: OffsetStore>(
    from: &A,
    to: &B,
    topics: &[String],
) -> Result<Migrated, Error> {
    let src = from.load(topics).await?;
    let before = to.load(topics).await?;
    let batch_id = batch_id_for(&before, Some(src.batch_id.unwrap_or(0)));
    if !src.positions.is_empty() {
        to.set_positions(batch_id, &src.positions).await?;
    }
    Ok(Migrated {
        positions: src.positions,
        batch_id,
        before,
        source_pending: src.pending.map(|p| p.id),
    })
}

/// Positions another program kept, checked against the log and ready to be written to a store
/// ([`Admin::plan_import`], [`Admin::plan_import_spark`]): a dry run prints it,
/// [`execute`](Self::execute) writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Import {
    /// The positions to write, each inside its partition's log.
    pub positions: Positions,
    /// Positions that were outside their logs and were moved to the nearest bound (only when
    /// the plan was asked to clamp), as given.
    pub clamped: Vec<OutsideLog>,
    /// The partitions of the topics that the program kept no position for: a stream starts
    /// them by its start policy.
    pub unread: Vec<TopicPartition>,
    /// The last batch id of the program imported from (Spark's batch), which a store holding
    /// nothing continues ([`batch_id_for`]); `None` for programs without batch ids.
    pub continuing: Option<u64>,
}

/// What [`Import::execute`] wrote.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Imported {
    /// What the store held before.
    pub before: Committed,
    /// The batch id the positions were written under.
    pub batch_id: u64,
}

impl Import {
    /// The topics the positions name, sorted, each once.
    pub fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .positions
            .keys()
            .map(|tp| tp.topic.to_string())
            .collect();
        t.dedup();
        t
    }

    /// The batch id the positions take in a store holding `dest` ([`batch_id_for`]: an empty
    /// store continues the program's batch ids, one that holds batches keeps its own).
    pub fn batch_id(&self, dest: &Committed) -> u64 {
        batch_id_for(dest, self.continuing)
    }

    /// Writes the positions to `store` under [`batch_id`](Self::batch_id), without
    /// compare-and-set (administration: no stream may be running on the store). Partitions
    /// not named keep their positions.
    pub async fn execute<S: OffsetStore>(&self, store: &S) -> Result<Imported, Error> {
        let before = store.load(&self.topics()).await?;
        let batch_id = self.batch_id(&before);
        store.set_positions(batch_id, &self.positions).await?;
        Ok(Imported { before, batch_id })
    }
}

/// Positions from the CSV `kafka-consumer-groups --reset-offsets --export` writes and
/// `--from-file` reads ([`ResetTo::Positions`]): `topic,partition,offset` lines, blank lines
/// and `#` comments skipped; the topic is everything before the last two commas. A line that
/// is not one (a negative partition or offset included) is [`AdminError::Csv`] with its number.
pub fn positions_from_csv(text: &str) -> Result<Positions, AdminError> {
    let mut out = Positions::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || AdminError::Csv { line: n + 1 };
        let mut f = line.rsplitn(3, ',');
        let (Some(o), Some(p), Some(t)) = (f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        let p: i32 = p.trim().parse().map_err(|_| bad())?;
        let o: i64 = o.trim().parse().map_err(|_| bad())?;
        if p < 0 || o < 0 {
            return Err(bad());
        }
        out.insert(TopicPartition::new(t.trim().to_owned(), p), o);
    }
    Ok(out)
}

/// `positions` as `topic,partition,offset` lines, what `kafka-consumer-groups
/// --reset-offsets --export` prints and [`positions_from_csv`] reads back.
pub fn positions_to_csv(positions: &Positions) -> String {
    positions
        .iter()
        .map(|(tp, o)| format!("{},{},{o}\n", tp.topic, tp.partition))
        .collect()
}

/// The positions `to` names, from the partitions' logs (`bounds`), what the store holds
/// (`current`) and, for a time, the first offset at or after it (`by_time`, `None` where no
/// record is that recent). Pure: [`Admin::plan_reset`] gathers the inputs.
pub fn reset_positions(
    to: &ResetTo,
    bounds: &BTreeMap<TopicPartition, LogBounds>,
    current: &Positions,
    by_time: &BTreeMap<TopicPartition, Option<i64>>,
) -> Positions {
    let mut out = Positions::new();
    for (tp, log) in bounds {
        let now = current.get(tp).copied();
        let new = match to {
            ResetTo::Earliest => Some(log.start),
            ResetTo::Latest => Some(log.end),
            ResetTo::Offset(o) => Some(log.clamp(*o)),
            ResetTo::ShiftBy(n) => now.map(|c| log.clamp(c.saturating_add(*n))),
            ResetTo::Current => now,
            ResetTo::Positions(p) => p.get(tp).copied(),
            ResetTo::Datetime(_) | ResetTo::ByDuration(_) => {
                by_time.get(tp).map(|o| o.unwrap_or(log.end))
            }
        };
        if let Some(o) = new {
            out.insert(tp.clone(), o);
        }
    }
    out
}

/// The lag of `committed` over `bounds` (every partition of `bounds`).
pub fn lag_of(committed: &Committed, bounds: BTreeMap<TopicPartition, LogBounds>) -> Lag {
    Lag {
        batch_id: committed.batch_id,
        partitions: bounds
            .into_iter()
            .map(|(tp, log)| {
                let committed = committed.positions.get(&tp).copied();
                (tp, PartitionLag { committed, log })
            })
            .collect(),
    }
}

impl Admin {
    /// Connects to `bootstrap` (`HOST:PORT[,HOST:PORT…]`) with `settings` by the names a
    /// stream takes ([`DirectStreamBuilder::set`](crate::DirectStreamBuilder::set): `security.protocol`, `sasl.*`, `ssl.*`,
    /// `client.id`, `request.timeout.ms`, …; settings that only a stream uses are accepted and
    /// have no effect here).
    pub async fn connect(bootstrap: &str, settings: &[(&str, &str)]) -> Result<Admin, Error> {
        let mut b = DirectStream::builder().bootstrap(bootstrap);
        for (k, v) in settings {
            b = b.set(k, v)?;
        }
        b.admin().await
    }

    /// An admin on a cluster connection already made.
    pub(crate) fn on(cluster: Arc<Cluster>) -> Admin {
        Admin { cluster }
    }

    /// An admin on a connection made with the engine's API (feature `unstable`).
    #[cfg(feature = "unstable")]
    pub fn from_cluster(cluster: Arc<Cluster>) -> Admin {
        Admin { cluster }
    }

    /// Every partition of `topics` (fresh metadata) with its log start and end: one Metadata
    /// request, then ListOffsets earliest and latest, keyed by partition.
    pub async fn log_bounds(
        &self,
        topics: &[String],
        isolation: IsolationLevel,
    ) -> Result<BTreeMap<TopicPartition, LogBounds>, Error> {
        let partitions = self.partitions(topics).await?;
        let ends = self
            .offsets(&partitions, OffsetSpec::Latest, isolation)
            .await?;
        let starts = self
            .offsets(&partitions, OffsetSpec::Earliest, isolation)
            .await?;
        let mut out = BTreeMap::new();
        for (tp, start) in starts {
            // Both answers name every partition asked for (ListOffsets fails otherwise).
            if let Some(Some(end)) = ends.get(&tp) {
                out.insert(
                    tp,
                    LogBounds {
                        start: start.unwrap_or(0),
                        end: *end,
                    },
                );
            }
        }
        Ok(out)
    }

    /// `store`'s positions for `topics` against each partition's log (what `kdirect lag`
    /// prints): every partition the cluster has for `topics`, with the committed position where
    /// the store holds one. `isolation` picks the end: the high watermark, or the last stable
    /// offset under read_committed.
    pub async fn lag<S: OffsetStore>(
        &self,
        store: &S,
        topics: &[String],
        isolation: IsolationLevel,
    ) -> Result<Lag, Error> {
        let committed = store.load(topics).await?;
        let bounds = self.log_bounds(topics, isolation).await?;
        Ok(lag_of(&committed, bounds))
    }

    /// Consumer group `group` as its coordinator describes it (DescribeGroups): state,
    /// protocol, members with their client ids, hosts and partitions. Read-only: describing
    /// never joins the group. A group that does not exist is `Dead` with no members.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription, Error> {
        Ok(kdirect_engine::group::describe_group(&self.cluster, group).await?)
    }

    /// For each partition, the first offset whose record's timestamp is at or after `ms`
    /// (ms since the Unix epoch), `None` where no record is that recent.
    pub async fn offsets_for_time(
        &self,
        partitions: &[TopicPartition],
        ms: i64,
        isolation: IsolationLevel,
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>, Error> {
        let asked: Vec<(String, i32)> = partitions
            .iter()
            .map(|tp| (tp.topic.to_string(), tp.partition))
            .collect();
        self.offsets(&asked, OffsetSpec::Timestamp(ms), isolation)
            .await
    }

    /// What resetting `topics`' positions in `store` to `to` would write, with what the store
    /// holds now (nothing is written: [`Reset::execute`] writes it). Every partition the
    /// cluster has for `topics` is considered, read uncommitted; [`ResetTo::Positions`] naming
    /// a partition the cluster does not have is refused.
    pub async fn plan_reset<S: OffsetStore>(
        &self,
        store: &S,
        topics: &[String],
        to: &ResetTo,
    ) -> Result<Reset, Error> {
        let iso = IsolationLevel::ReadUncommitted;
        let before = store.load(topics).await?;
        let bounds = self.log_bounds(topics, iso).await?;
        if let ResetTo::Positions(p) = to {
            if let Some(tp) = p.keys().find(|tp| !bounds.contains_key(*tp)) {
                return Err(kdirect_engine::Error::from(
                    kdirect_engine::ErrorKind::UnknownPartition {
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                    },
                )
                .into());
            }
        }
        let at = match to {
            ResetTo::Datetime(ms) => Some(*ms),
            ResetTo::ByDuration(d) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .saturating_sub(*d);
                Some(i64::try_from(now.as_millis()).unwrap_or(i64::MAX))
            }
            _ => None,
        };
        let by_time = match at {
            Some(ms) => {
                let all: Vec<TopicPartition> = bounds.keys().cloned().collect();
                self.offsets_for_time(&all, ms, iso).await?
            }
            None => BTreeMap::new(),
        };
        let positions = reset_positions(to, &bounds, &before.positions, &by_time);
        Ok(Reset { before, positions })
    }

    /// Where a Spark Streaming (DStream) job's own offsets say `topic` stands for `group`,
    /// read from `source` in the layouts the articles keep them in (a Redis hash, a SQL
    /// table, ZooKeeper's `/consumers/<group>/offsets/<topic>/<partition>`, or the group's
    /// offsets in Kafka, read through this admin's cluster), checked against each
    /// partition's log: a position outside it is refused
    /// ([`AdminError::OutsideLog`], every one named) unless `clamp` moves it to the nearest
    /// bound. A source that holds nothing for `topic` is [`AdminError::NoPositions`]. Nothing
    /// is written: [`Import::execute`] writes the plan.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), kdirect::Error> {
    /// use kdirect::admin::{Admin, Source, SqlLayout, REDIS_KEY};
    /// let admin = Admin::connect("127.0.0.1:9092", &[]).await?;
    /// let source = Source::parse("redis://127.0.0.1:6379", SqlLayout::default(), REDIS_KEY)?;
    /// let import = admin.plan_import(&source, "events", "spark-job", false).await?;
    /// import.execute(&kdirect::CheckpointStore::open("/data/ckpt", 100)?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn plan_import(
        &self,
        source: &Source,
        topic: &str,
        group: &str,
        clamp: bool,
    ) -> Result<Import, Error> {
        let read = source
            .read(topic, group, Some(self.cluster.clone()))
            .await?;
        if read.is_empty() {
            return Err(AdminError::NoPositions {
                from: source.describe(topic, group),
                topic: topic.to_owned(),
            }
            .into());
        }
        self.checked_import(read, &[topic.to_owned()], "the source's", clamp, None)
            .await
    }

    /// Where a Spark Structured Streaming query stopped, as an import of its Kafka source's
    /// positions (`import`, from [`SparkCheckpoint::resolve`]), checked against each
    /// partition's log: a position outside it is refused ([`AdminError::OutsideLog`]: Spark
    /// never leaves one there, so the checkpoint is another cluster's or the topic was
    /// re-created). A store holding nothing continues Spark's batch ids (its next batch is
    /// Spark's next). Nothing is written: [`Import::execute`] writes the plan.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), kdirect::Error> {
    /// use kdirect::admin::{Admin, SparkCheckpoint};
    /// let admin = Admin::connect("127.0.0.1:9092", &[]).await?;
    /// let spark = SparkCheckpoint::read("/data/spark-checkpoint")?.resolve(None, None)?;
    /// let import = admin.plan_import_spark(&spark).await?;
    /// import.execute(&kdirect::CheckpointStore::open("/data/ckpt", 100)?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn plan_import_spark(&self, import: &SparkImport) -> Result<Import, Error> {
        let mut topics: Vec<String> = import
            .positions
            .keys()
            .map(|tp| tp.topic.to_string())
            .collect();
        topics.dedup();
        let continuing = Some(import.batch_id.unwrap_or(0));
        self.checked_import(
            import.positions.clone(),
            &topics,
            "Spark's",
            false,
            continuing,
        )
        .await
    }

    /// `read` checked against the logs of `topics` ([`inside_log`]), with the partitions it
    /// leaves out.
    async fn checked_import(
        &self,
        read: Positions,
        topics: &[String],
        whose: &'static str,
        clamp: bool,
        continuing: Option<u64>,
    ) -> Result<Import, Error> {
        let bounds = self
            .log_bounds(topics, IsolationLevel::ReadUncommitted)
            .await?;
        let (positions, clamped) = inside_log(&read, &bounds, clamp)
            .map_err(|refused| AdminError::OutsideLog { whose, refused })?;
        let unread = bounds
            .into_keys()
            .filter(|tp| !positions.contains_key(tp))
            .collect();
        Ok(Import {
            positions,
            clamped,
            unread,
            continuing,
        })
    }

    async fn partitions(&self, topics: &[String]) -> Result<Vec<(String, i32)>, Error> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let view = self.cluster.refresh(Some(&names)).await?;
        let mut out = Vec::new();
        for t in topics {
            for p in &view.topic(t)?.partitions {
                out.push((t.clone(), p.partition));
            }
        }
        Ok(out)
    }

    /// ListOffsets for `partitions`, keyed by partition; `None` for "no such offset" (-1).
    async fn offsets(
        &self,
        partitions: &[(String, i32)],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>, Error> {
        Ok(self
            .cluster
            .list_offsets(partitions, spec, isolation)
            .await?
            .into_iter()
            .map(|p| {
                let o = (p.offset >= 0).then_some(p.offset);
                (TopicPartition::new(p.topic, p.partition), o)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn bounds() -> BTreeMap<TopicPartition, LogBounds> {
        BTreeMap::from([
            (
                tp(0),
                LogBounds {
                    start: 10,
                    end: 100,
                },
            ),
            (tp(1), LogBounds { start: 0, end: 0 }),
            (tp(2), LogBounds { start: 50, end: 60 }),
        ])
    }

    #[test]
    fn each_target_as_kafka_consumer_groups_reads_it() {
        let current = Positions::from([(tp(0), 40), (tp(2), 55)]);
        let none = BTreeMap::new();
        let r = |to: ResetTo| reset_positions(&to, &bounds(), &current, &none);
        assert_eq!(
            r(ResetTo::Earliest),
            Positions::from([(tp(0), 10), (tp(1), 0), (tp(2), 50)])
        );
        assert_eq!(
            r(ResetTo::Latest),
            Positions::from([(tp(0), 100), (tp(1), 0), (tp(2), 60)])
        );
        // Kept within each log.
        assert_eq!(
            r(ResetTo::Offset(55)),
            Positions::from([(tp(0), 55), (tp(1), 0), (tp(2), 55)])
        );
        // Only partitions with a stored position move; clamped.
        assert_eq!(
            r(ResetTo::ShiftBy(-35)),
            Positions::from([(tp(0), 10), (tp(2), 50)])
        );
        assert_eq!(
            r(ResetTo::ShiftBy(1000)),
            Positions::from([(tp(0), 100), (tp(2), 60)])
        );
        assert_eq!(r(ResetTo::Current), current);
        let file = Positions::from([(tp(1), 0)]);
        assert_eq!(r(ResetTo::Positions(file.clone())), file);
    }

    #[test]
    fn lag_is_unknown_without_a_position_and_says_what_retention_ate() {
        let committed = Committed {
            batch_id: Some(3),
            // t-0 behind by 60; t-2 below the log start (5 offsets lost), caught up with the
            // end; t-1 without a position.
            positions: Positions::from([(tp(0), 40), (tp(2), 45)]),
            ..Committed::default()
        };
        let lag = lag_of(&committed, bounds());
        assert_eq!(lag.batch_id, Some(3));
        let p0 = lag.partitions[&tp(0)];
        assert_eq!((p0.lag(), p0.margin()), (Some(60), Some(30)));
        assert_eq!(lag.partitions[&tp(1)].lag(), None);
        assert_eq!(lag.partitions[&tp(2)].lag(), Some(15));
        assert_eq!(lag.total(), Some(75));
        assert_eq!(lag.without_position(), 1);
        assert_eq!((lag.min_margin(), lag.lost()), (Some(-5), 5));
        // Nothing committed anywhere: no total (not 0).
        let none = lag_of(&Committed::default(), bounds());
        assert_eq!((none.total(), none.without_position()), (None, 3));
        // A position past the end (a truncated log) is no negative lag.
        let past = lag_of(
            &Committed {
                positions: Positions::from([(tp(1), 9)]),
                ..Committed::default()
            },
            bounds(),
        );
        assert_eq!(past.total(), Some(0));
    }

    #[test]
    fn a_time_with_no_record_that_recent_is_the_end() {
        let by_time = BTreeMap::from([(tp(0), Some(42)), (tp(1), None), (tp(2), None)]);
        let got = reset_positions(
            &ResetTo::Datetime(1_000),
            &bounds(),
            &Positions::new(),
            &by_time,
        );
        assert_eq!(got, Positions::from([(tp(0), 42), (tp(1), 0), (tp(2), 60)]));
    }

    #[test]
    fn an_empty_store_continues_the_batch_ids_it_takes_positions_from() {
        let empty = Committed::default();
        assert_eq!(batch_id_for(&empty, None), 0);
        assert_eq!(batch_id_for(&empty, Some(41)), 41);
        let held = Committed {
            batch_id: Some(7),
            ..Committed::default()
        };
        assert_eq!(batch_id_for(&held, Some(41)), 8);
        assert_eq!(batch_id_for(&held, None), 8);
    }

    #[test]
    fn positions_csv_round_trips_as_kafka_consumer_groups_writes_it() {
        let p = Positions::from([(tp(0), 5), (TopicPartition::new("a,b", 1), 7)]);
        let text = positions_to_csv(&p);
        assert_eq!(text, "a,b,1,7\nt,0,5\n");
        let read = positions_from_csv(&format!("# exported\n\n{text}")).unwrap();
        assert_eq!(read, p);
        for (bad, line) in [
            ("t,0", 1),
            ("t,1,2\nt,-1,3", 2),
            ("t,0,z", 1),
            ("t,0,-4", 1),
        ] {
            assert_eq!(
                positions_from_csv(bad),
                Err(AdminError::Csv { line }),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_import_takes_the_batch_after_the_stores_or_continues_the_programs() {
        let import = Import {
            positions: Positions::from([(tp(2), 1), (tp(0), 3), (TopicPartition::new("u", 0), 0)]),
            clamped: Vec::new(),
            unread: Vec::new(),
            continuing: Some(9),
        };
        assert_eq!(import.topics(), ["t", "u"]);
        assert_eq!(import.batch_id(&Committed::default()), 9);
        let held = Committed {
            batch_id: Some(2),
            ..Committed::default()
        };
        assert_eq!(import.batch_id(&held), 3);
        let refused = AdminError::OutsideLog {
            whose: "Spark's",
            refused: vec![OutsideLog {
                partition: tp(7),
                position: 1,
                log: None,
            }],
        };
        assert_eq!(
            refused.to_string(),
            "t-7: in Spark's offsets but not a partition of the cluster (topic re-created with \
             fewer partitions?); nothing was written"
        );
    }

    #[test]
    fn inside_log_refuses_or_clamps_and_names_each_partition() {
        let given = Positions::from([(tp(0), 5), (tp(2), 61), (tp(1), 0)]);
        let refused = inside_log(&given, &bounds(), false).unwrap_err();
        assert_eq!(refused.len(), 2);
        assert_eq!(
            refused[0].to_string(),
            "t-0: position 5 is outside the log [10, 100] (retention deleted the records since)"
        );
        assert!(
            refused[1].to_string().contains("past the end"),
            "{}",
            refused[1]
        );
        let (clamped, moved) = inside_log(&given, &bounds(), true).unwrap();
        assert_eq!(
            clamped,
            Positions::from([(tp(0), 10), (tp(1), 0), (tp(2), 60)])
        );
        assert_eq!(moved.len(), 2);
        // A partition the cluster does not have is refused even with clamp.
        let unknown = Positions::from([(tp(9), 0)]);
        let refused = inside_log(&unknown, &bounds(), true).unwrap_err();
        assert!(refused[0]
            .to_string()
            .contains("not a partition of the cluster"));
    }
}
