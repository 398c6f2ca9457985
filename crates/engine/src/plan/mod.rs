//! The planner: which exact offset ranges the next batch reads.
//!
//! A pure state machine in the style of `quinn-proto`: no tokio, no sockets, no clock. The
//! driver (the layer that owns sockets and timers) asks the brokers where every partition
//! starts and ends (ListOffsets earliest and latest — the high watermark, or the last stable
//! offset under `read_committed`), passes that snapshot and `now` to [`Planner::plan`], and gets
//! back either a [`BatchPlan`] — a batch id and one exact `[from, until)` range per partition —
//! or [`PlanOutcome::Wait`] ("no batch yet"), or a typed [`PlanError`]. Time is a [`Duration`]
//! since an epoch the driver chooses; tests drive it with virtual time.
//!
//! # The model (Spark's "Direct" approach)
//! Spark's `DirectKafkaInputDStream` (spark-streaming-kafka-0-10) introduced the model: the
//! driver, not a consumer group, decides each batch as exact per-partition offset ranges
//! (`OffsetRange(topic, partition, fromOffset, untilOffset)`, `HasOffsetRanges`), so a batch can
//! be re-read exactly after a failure and its end offsets stored atomically with results.
//! Structured Streaming's `KafkaMicroBatchStream` kept the model and added its own limits and
//! `KafkaOffsetRangeCalculator` for splitting. This module reproduces the behaviour of both
//! (read from Spark's sources, not copied):
//!
//! - Positions: the planner holds the next offset to read per partition (a committed offset in
//!   Kafka's sense: the exclusive end of what was planned). Each emitted plan advances every
//!   partition to its `until`, as `DirectKafkaInputDStream.compute` sets
//!   `currentOffsets = untilOffsets`. [`Planner::resume`] starts from stored positions and a
//!   batch id, for the offset stores.
//! - Start ([`StartPolicy`]): where a partition has no position at the planner's first plan:
//!   earliest, latest, a timestamp, explicit offsets, or `None` — an error naming the
//!   partitions (`auto.offset.reset=none`). Partitions that appear later (new partitions of a
//!   subscribed topic) start from the log start, as Structured Streaming's
//!   `KafkaOffsetReader.getOffsetRangesFromResolvedOffsets` does.
//! - Data loss ([`DataLossPolicy`], Spark's `failOnDataLoss`): a position below the log start
//!   (retention), past the end (topic recreated, log truncated), an end that moved backwards,
//!   or a new partition whose log does not start at 0. `Fail` (the default) returns
//!   [`PlanError::DataLoss`] with the exact lost range; `Earliest` resets to the log start and
//!   reports each [`LostRange`] in the next plan.
//! - Rate limits ([`RatePolicy`]), each optional, the most restrictive winning
//!   per partition: `maxRatePerPartition` × batch seconds and backpressure (the DStream's
//!   `maxMessagesPerPartition`, fed by the [`PidRateEstimator`]); `maxOffsetsPerTrigger` split
//!   by lag (`KafkaMicroBatchStream.rateLimit`); `minOffsetsPerTrigger` with `maxTriggerDelay`
//!   (`KafkaMicroBatchStream.delayBatch`).
//! - Partitions per batch ([`PlannerConfig::max_partitions_per_batch`], kdirect's own): at
//!   most so many partitions with data get a non-empty range, taken in turn (a round-robin
//!   cursor kept here), before the rate limits split the batch among them. Kafka returns whole
//!   stored batches (KIP-74), so each range costs at least one; a driver bounds the partitions
//!   to bound a batch's memory. Spark has no such limit.
//! - Splitting ([`split_ranges`]): sub-ranges for parallel fetch, as
//!   `KafkaOffsetRangeCalculator` does with `minPartitions` and `maxRecordsPerPartition`.
//!
//! Offsets are counted, not records: a range of `n` offsets may hold fewer records (compaction
//! gaps, transaction markers), as Spark's `KafkaOffsetRange.size` notes.
//!
//! # Architecture invariant
//! Nothing here reads a clock, opens a socket or knows where offsets are stored. Every input
//! comes in as an argument; the same inputs give the same plans.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

mod pid;
mod rate;
mod rotate;
mod split;
mod start;
mod topic;

#[cfg(test)]
mod tests;

pub use pid::{BatchCompletion, PidConfig, PidRateEstimator};
pub use rate::RatePolicy;
pub(crate) use split::divide;
pub use split::{split_ranges, SplitPolicy};
pub use start::{DataLossPolicy, StartOffset, StartPolicy, TimestampLookup, TimestampStrategy};
pub use topic::{Topic, Topics};

/// A topic name and a partition number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic.
    pub topic: Topic,
    /// The partition.
    pub partition: i32,
}

impl TopicPartition {
    /// A topic partition.
    pub fn new(topic: impl Into<Topic>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    /// `topic-partition`, as Kafka's Java `TopicPartition` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Offsets `[from, until)` of one partition: `until` is exclusive, as in Spark's `OffsetRange`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetRange {
    /// The topic.
    pub topic: Topic,
    /// The partition.
    pub partition: i32,
    /// First offset to read.
    pub from: i64,
    /// One past the last offset to read.
    pub until: i64,
}

impl OffsetRange {
    /// A range `[from, until)`.
    pub fn new(topic: impl Into<Topic>, partition: i32, from: i64, until: i64) -> Self {
        Self {
            topic: topic.into(),
            partition,
            from,
            until,
        }
    }

    /// The number of offsets in the range (an upper bound on its records).
    pub fn len(&self) -> u64 {
        u64::try_from(self.until.saturating_sub(self.from)).unwrap_or(0)
    }

    /// Whether the range holds no offsets.
    pub fn is_empty(&self) -> bool {
        self.until <= self.from
    }

    /// Its topic partition.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

impl fmt::Display for OffsetRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{} [{}, {})",
            self.topic, self.partition, self.from, self.until
        )
    }
}

/// Why offsets were lost (see [`DataLossPolicy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataLossReason {
    /// The position is below the log start offset: retention (or `DeleteRecords`) removed
    /// records that were never read. Lost: `[position, log_start)`.
    BelowLogStart,
    /// The position is past the end offset: the topic was deleted and recreated, or the log
    /// was truncated (unclean leader election). Lost: `[end, position)`, offsets the planner
    /// had passed that the log no longer has.
    PastEnd,
    /// The end offset is lower than in an earlier snapshot (recreated or truncated), though
    /// the position is still within the log. Lost: `[end, previous_end)`.
    EndMovedBack {
        /// The end offset seen before.
        previous_end: i64,
    },
    /// A partition that appeared after the first plan does not start at offset 0, so records
    /// were removed before the planner saw it (Spark: "Added partition starts from X instead
    /// of 0"). Lost: `[0, log_start)`.
    NewPartitionNotFromZero,
    /// The topic was deleted and re-created under the same name: its topic id (KIP-516)
    /// changed between two metadata refreshes. The old log is gone, so how many of its
    /// records were unread is unknown: the range is empty, at the old position; the
    /// partition goes on from the new log's start.
    TopicRecreated,
    /// KIP-320: the log was truncated under the position after a leader change (an unclean
    /// election, or records acknowledged with `acks=1` that the new leader never had). The
    /// new leader's log ends the epoch of the last batch read (or the largest epoch it has
    /// below that one) at an offset below the position: the records read at
    /// `[end_offset, position)` are no longer in the log, and the offsets from `end_offset` on
    /// hold the new leader's records. Lost: `[end_offset, position)`, records that were read
    /// (and delivered, when the truncation is found before a later fetch) but are gone; the
    /// partition goes on at `end_offset`, as the Java consumer resets to "the first offset
    /// known to diverge" (`SubscriptionState.maybeCompleteValidation`).
    Truncated {
        /// The `partition_leader_epoch` of the last batch read before the position.
        last_fetched_epoch: i32,
        /// The largest epoch at or below it in the leader's log (`end_offset` is its end).
        leader_epoch: i32,
        /// The broker (node id) that answered.
        broker: i32,
    },
}

impl fmt::Display for DataLossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BelowLogStart => f.write_str("position is below the log start (retention)"),
            Self::PastEnd => {
                f.write_str("position is past the end offset (topic recreated or log truncated)")
            }
            Self::EndMovedBack { previous_end } => write!(
                f,
                "end offset moved back from {previous_end} (topic recreated or log truncated)"
            ),
            Self::NewPartitionNotFromZero => {
                f.write_str("new partition does not start at offset 0")
            }
            Self::TopicRecreated => {
                f.write_str("topic was deleted and re-created (its topic id changed)")
            }
            Self::Truncated {
                last_fetched_epoch,
                leader_epoch,
                broker,
            } => write!(
                f,
                "the log was truncated after a leader change: the records were read at leader \
                 epoch {last_fetched_epoch}, and leader {broker}'s log ends epoch {leader_epoch} \
                 below them (unclean leader election, or acks=1 records the new leader never had)"
            ),
        }
    }
}

/// Offsets `[from, until)` of one partition that will never be read, found by the data-loss
/// check and skipped under [`DataLossPolicy::Earliest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRange {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// First lost offset.
    pub from: i64,
    /// One past the last lost offset.
    pub until: i64,
    /// Why.
    pub reason: DataLossReason,
}

/// What the brokers say about one partition, as of this plan.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionSnapshot {
    /// The topic.
    pub topic: Topic,
    /// The partition.
    pub partition: i32,
    /// The log start offset (ListOffsets "earliest").
    pub log_start: i64,
    /// The end offset (ListOffsets "latest": the high watermark, or the last stable offset
    /// under `read_committed`).
    pub end: i64,
    /// The answer to ListOffsets for [`StartPolicy::Timestamp`]'s timestamp; needed only for
    /// partitions without a position under that policy (see [`Planner::timestamp_lookups`]).
    pub timestamp_lookup: TimestampLookup,
}

impl PartitionSnapshot {
    /// A snapshot of a partition whose log is `[log_start, end)`.
    pub fn new(topic: impl Into<Topic>, partition: i32, log_start: i64, end: i64) -> Self {
        Self {
            topic: topic.into(),
            partition,
            log_start,
            end,
            timestamp_lookup: TimestampLookup::NotDone,
        }
    }

    /// With the answer to the start timestamp's ListOffsets.
    pub fn with_timestamp_lookup(mut self, lookup: TimestampLookup) -> Self {
        self.timestamp_lookup = lookup;
        self
    }

    fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

/// One planned batch: exact offset ranges, `until` exclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    /// The batch id: one more than the previous plan's.
    pub batch_id: u64,
    /// One range per partition of the snapshot, sorted by topic and partition. A partition
    /// with nothing to read has an empty range (`from == until`), so the ranges' `until`s are
    /// every partition's position after this batch (what an offset store records).
    pub ranges: Vec<OffsetRange>,
    /// Offsets skipped by the data-loss check under [`DataLossPolicy::Earliest`] since the
    /// previous plan.
    pub lost: Vec<LostRange>,
    /// Partitions whose range starts below where the previous plan left them (or where the
    /// planner was resumed): the data-loss check under [`DataLossPolicy::Earliest`] found
    /// their log ending below the position (a topic re-created, a log truncated), or
    /// [`Planner::set_position`] moved them back. Each maps to that earlier position — the
    /// one an offset store holds, and so the one its compare-and-set must expect for the
    /// batch to commit the move back.
    pub moved_back: BTreeMap<TopicPartition, i64>,
    /// The `now` this plan was made at.
    pub planned_at: Duration,
}

impl BatchPlan {
    /// The number of offsets planned (an upper bound on the records).
    pub fn offset_count(&self) -> u64 {
        self.ranges.iter().map(OffsetRange::len).sum()
    }

    /// Whether no range holds an offset.
    pub fn is_empty(&self) -> bool {
        self.ranges.iter().all(OffsetRange::is_empty)
    }

    /// The non-empty ranges, split for parallel fetch (see [`split_ranges`]).
    pub fn split(&self, policy: &SplitPolicy) -> Vec<OffsetRange> {
        split_ranges(&self.ranges, policy)
    }
}

/// Why [`Planner::plan`] made no batch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitReason {
    /// Fewer offsets are available than `minOffsetsPerTrigger`, and `maxTriggerDelay` has not
    /// passed since the last batch.
    BelowMinOffsets {
        /// Offsets available across all partitions.
        available: u64,
        /// The configured minimum.
        min: u64,
    },
    /// Nothing to read and [`PlannerConfig::emit_empty_batches`] is off.
    NoNewData,
    /// Too early: the trigger's interval has not passed since the last batch started, or the
    /// last batch used the rate limits' allowance up to `retry_at` (records per second held
    /// in wall-clock time).
    Paced,
}

/// When batches start, as Structured Streaming names its triggers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Trigger {
    /// Each batch as soon as there is data (Spark's default).
    #[default]
    AsFastAsPossible,
    /// A batch starts at most every interval; a batch that overruns it starts the next at
    /// once (`Trigger.ProcessingTime`).
    ProcessingTime(Duration),
    /// Everything up to the end offsets seen at start, then stop (`Trigger.AvailableNow`):
    /// for the planner the same as [`AsFastAsPossible`](Self::AsFastAsPossible), still under
    /// the rate limits; the driver stops at the ends.
    AvailableNow,
}

/// "No batch yet".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// Why.
    pub reason: WaitReason,
    /// When the planner will fire regardless of the data available (the max trigger delay),
    /// if such a time exists. The driver may plan earlier, when new data arrives.
    pub retry_at: Option<Duration>,
}

/// The result of one [`Planner::plan`] call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanOutcome {
    /// A batch to fetch.
    Batch(BatchPlan),
    /// No batch yet.
    Wait(Wait),
}

/// Why the planner cannot plan. Each error names the partitions and offsets involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Partitions have no position and the start policy gives none ([`StartPolicy::None`], or
    /// [`StartPolicy::Explicit`] without them).
    #[error("no position for partitions {} and the start policy gives none", List(.partitions))]
    NoPosition {
        /// The partitions, sorted.
        partitions: Vec<TopicPartition>,
    },
    /// Partitions need a position from [`StartPolicy::Timestamp`] but the snapshot carries no
    /// ListOffsets answer for the timestamp ([`TimestampLookup::NotDone`]).
    #[error(
        "partitions {} need the offset for timestamp {timestamp} but it was not looked up",
        List(.partitions)
    )]
    MissingTimestampLookup {
        /// The timestamp, in ms since the Unix epoch.
        timestamp: i64,
        /// The partitions, sorted.
        partitions: Vec<TopicPartition>,
    },
    /// A start by timestamp found no record that recent, and the strategy is
    /// [`TimestampStrategy::Error`] (Spark's `startingOffsetsByTimestampStrategy=error`).
    #[error(
        "no record at or after {timestamp} ms in {}: nothing to start from (the strategy is \
         error; `latest` starts at the end instead)",
        List(.partitions)
    )]
    NoOffsetForTimestamp {
        /// The (first such) timestamp, in ms since the Unix epoch.
        timestamp: i64,
        /// The partitions, sorted.
        partitions: Vec<TopicPartition>,
    },
    /// Data loss under [`DataLossPolicy::Fail`]: offsets `[lost_from, lost_until)` of the
    /// partition can never be read.
    #[error(
        "data loss in {topic}-{partition}: offsets [{lost_from}, {lost_until}) are lost: {reason}"
    )]
    DataLoss {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// First lost offset.
        lost_from: i64,
        /// One past the last lost offset.
        lost_until: i64,
        /// Why.
        reason: DataLossReason,
    },
    /// The snapshot is inconsistent: a negative log start, or an end below the log start.
    #[error(
        "the broker's offsets for {topic}-{partition} make no sense: log start {log_start}, \
         end {end} (a log start is never negative nor past the end)"
    )]
    InvalidSnapshot {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The log start given.
        log_start: i64,
        /// The end given.
        end: i64,
    },
    /// The snapshot lists a partition twice.
    #[error("partition {topic}-{partition} appears twice in the snapshot")]
    DuplicatePartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// The configuration cannot work (a zero batch interval, a zero limit, a negative PID
    /// coefficient, …).
    #[error("invalid planner configuration: {0}")]
    InvalidConfig(&'static str),
}

/// Formats a list of partitions as `[t-0, t-1]`.
struct List<'a>(&'a [TopicPartition]);

impl fmt::Display for List<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, tp) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{tp}")?;
        }
        f.write_str("]")
    }
}

/// The planner's configuration.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PlannerConfig {
    /// The batch interval: the seconds `maxRatePerPartition` and backpressure rates are
    /// multiplied by, and the PID estimator's batch duration.
    pub batch_interval: Duration,
    /// Rate limits; all off by default.
    pub rate: RatePolicy,
    /// Where partitions without a position start at the first plan. Default
    /// [`StartPolicy::Latest`] (Kafka's `auto.offset.reset` and Spark's streaming
    /// `startingOffsets` default).
    pub start: StartPolicy,
    /// What a detected data loss does. Default [`DataLossPolicy::Fail`].
    pub data_loss: DataLossPolicy,
    /// Whether to emit a plan when no partition has anything to read (the DStream does, once
    /// per interval; Structured Streaming does not). Default off: [`WaitReason::NoNewData`].
    pub emit_empty_batches: bool,
    /// At most this many partitions get a non-empty range in one batch; all when `None` (the
    /// default). When more partitions have data, the batch takes this many of them in turn:
    /// in topic-partition order, starting after the last partition the previous such batch
    /// served and wrapping around, skipping partitions without data. The others get an empty
    /// range at their position. The rate limits are then computed over the partitions taken
    /// only; `minOffsetsPerTrigger` still counts the offsets available in every partition.
    /// Under `maxOffsetsPerTrigger` the bound applies only when the data available is more
    /// than that: a batch that takes everything ends every range at its log's end, where no
    /// stored batch is cut, and leaving partitions out would only delay them.
    pub max_partitions_per_batch: Option<usize>,
    /// What a start by timestamp does when no record is that recent. Default
    /// [`TimestampStrategy::Latest`].
    pub timestamp_strategy: TimestampStrategy,
    /// When batches start. Whatever the trigger, `maxRatePerPartition` and backpressure hold
    /// in wall-clock time: a partition that took `n` offsets under a per-batch cap `c` (its
    /// rate × the batch interval) lets the next batch start `n / c` of an interval later, so no
    /// partition delivers more than its rate averaged over a few batches.
    pub trigger: Trigger,
}

impl PlannerConfig {
    /// The defaults, with this batch interval.
    pub fn new(batch_interval: Duration) -> Self {
        Self {
            batch_interval,
            rate: RatePolicy::default(),
            start: StartPolicy::Latest,
            data_loss: DataLossPolicy::Fail,
            emit_empty_batches: false,
            max_partitions_per_batch: None,
            trigger: Trigger::AsFastAsPossible,
            timestamp_strategy: TimestampStrategy::Latest,
        }
    }

    /// With this strategy for starts by timestamp that find no record.
    pub fn with_timestamp_strategy(mut self, strategy: TimestampStrategy) -> Self {
        self.timestamp_strategy = strategy;
        self
    }

    /// With this trigger.
    pub fn with_trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = trigger;
        self
    }

    /// With these rate limits.
    pub fn with_rate(mut self, rate: RatePolicy) -> Self {
        self.rate = rate;
        self
    }

    /// With this start policy.
    pub fn with_start(mut self, start: StartPolicy) -> Self {
        self.start = start;
        self
    }

    /// With this data-loss policy.
    pub fn with_data_loss(mut self, data_loss: DataLossPolicy) -> Self {
        self.data_loss = data_loss;
        self
    }

    /// Emitting plans with nothing to read, or not.
    pub fn with_empty_batches(mut self, emit: bool) -> Self {
        self.emit_empty_batches = emit;
        self
    }

    /// With at most this many partitions per batch, taken in turn (see
    /// [`max_partitions_per_batch`](Self::max_partitions_per_batch)).
    pub fn with_max_partitions_per_batch(mut self, max: Option<usize>) -> Self {
        self.max_partitions_per_batch = max;
        self
    }

    fn validate(&self) -> Result<(), PlanError> {
        if self.batch_interval.is_zero() {
            return Err(PlanError::InvalidConfig("batch interval must be positive"));
        }
        if self.trigger == Trigger::ProcessingTime(Duration::ZERO) {
            return Err(PlanError::InvalidConfig(
                "a processing-time trigger needs a positive interval",
            ));
        }
        if self.max_partitions_per_batch == Some(0) {
            return Err(PlanError::InvalidConfig(
                "max partitions per batch must be positive",
            ));
        }
        self.rate.validate()
    }
}

/// The planner state machine. See the [module docs](self).
#[derive(Debug)]
pub struct Planner {
    config: PlannerConfig,
    next_batch_id: u64,
    /// Next offset to read per partition.
    positions: BTreeMap<TopicPartition, i64>,
    /// The end offset of each partition in the last snapshot (to see it move back).
    last_end: BTreeMap<TopicPartition, i64>,
    /// Topics with a position when the planner was resumed: their other partitions are new.
    known_topics: BTreeSet<String>,
    /// Whether a plan call has succeeded: from then on every partition without a position is
    /// a new partition.
    initialized: bool,
    /// When the min-offsets trigger last fired (`KafkaMicroBatchStream.lastTriggerMillis`).
    last_trigger: Option<Duration>,
    pid: Option<PidRateEstimator>,
    /// The backpressure rate last published by the estimator, records/s, truncated as
    /// Spark's `RateController` stores it (`rateLimit.set(s.toLong)`); -1 until the first.
    latest_rate: i64,
    /// Lost ranges not yet reported in a plan.
    pending_lost: Vec<LostRange>,
    /// Partitions moved below their position since the last plan, with that position (the
    /// first one: where the last plan left them). See [`BatchPlan::moved_back`].
    pending_moved_back: BTreeMap<TopicPartition, i64>,
    /// The last partition served by a batch that could not take every partition with data
    /// (see [`PlannerConfig::max_partitions_per_batch`]): the next such batch starts after it.
    rotation: Option<TopicPartition>,
    /// The next batch does not start before this time (the trigger's interval, the rate
    /// limits' pacing).
    not_before: Option<Duration>,
    /// When the last batch was planned and its ranges' rates (records/s, by range), to pace
    /// the next batch by what the last one really read ([`Planner::end_early`]).
    last_pace: Option<(Duration, Option<Vec<f64>>)>,
}

/// `map[tp] = v` without a new key when `tp` is there already (every batch after the first).
fn set(map: &mut BTreeMap<TopicPartition, i64>, tp: &TopicPartition, v: i64) {
    match map.get_mut(tp) {
        Some(old) => *old = v,
        None => {
            map.insert(tp.clone(), v);
        }
    }
}

impl Planner {
    /// A fresh planner: batch ids from 0, no positions (the start policy decides them).
    pub fn new(config: PlannerConfig) -> Result<Self, PlanError> {
        config.validate()?;
        let pid = config
            .rate
            .backpressure
            .map(|pid| PidRateEstimator::new(config.batch_interval, pid))
            .transpose()?;
        Ok(Self {
            config,
            next_batch_id: 0,
            positions: BTreeMap::new(),
            last_end: BTreeMap::new(),
            known_topics: BTreeSet::new(),
            initialized: false,
            last_trigger: None,
            pid,
            latest_rate: -1,
            pending_lost: Vec::new(),
            pending_moved_back: BTreeMap::new(),
            rotation: None,
            not_before: None,
            last_pace: None,
        })
    }

    /// A planner resumed from an offset store: the next plan gets `next_batch_id` and starts
    /// each partition at its stored position. At the first plan, a partition without a
    /// position whose topic has positions is a new partition (from the log start); a
    /// partition of a topic without any position follows the start policy.
    pub fn resume(
        config: PlannerConfig,
        next_batch_id: u64,
        positions: impl IntoIterator<Item = (TopicPartition, i64)>,
    ) -> Result<Self, PlanError> {
        let mut planner = Self::new(config)?;
        planner.next_batch_id = next_batch_id;
        planner.positions = positions.into_iter().collect();
        planner.known_topics = planner
            .positions
            .keys()
            .map(|tp| tp.topic.to_string())
            .collect();
        Ok(planner)
    }

    /// The configuration.
    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    /// The id the next plan will have.
    pub fn next_batch_id(&self) -> u64 {
        self.next_batch_id
    }

    /// The next offset to read per partition (the `until`s of the last plan).
    pub fn positions(&self) -> &BTreeMap<TopicPartition, i64> {
        &self.positions
    }

    /// The backpressure rate in records/s last published by the PID estimator, if any.
    pub fn latest_rate(&self) -> Option<i64> {
        (self.latest_rate > 0).then_some(self.latest_rate)
    }

    /// Changes `maxOffsetsPerTrigger` from the next plan on (a driver that bounds batches by
    /// the memory they will need, from the bytes per offset it has seen).
    pub fn set_max_offsets_per_trigger(&mut self, offsets: Option<u64>) {
        self.config.rate.max_offsets_per_trigger = offsets;
    }

    /// Changes the bound on partitions per batch from the next plan on (a driver that bounds
    /// batches by memory, from the largest stored batch it has seen). A bound of 0 is taken as
    /// 1. The rotation continues where it was.
    pub fn set_max_partitions_per_batch(&mut self, max: Option<usize>) {
        self.config.max_partitions_per_batch = max.map(|m| m.max(1));
    }

    /// The batch last planned was read only up to each of `read`'s `until`s: a driver that
    /// reads a plan in whole stored batches up to what fits in memory ended its ranges there,
    /// before handing the batch out (issue 32). `read` is the plan's ranges, in the plan's
    /// order, each `until` where its reading stopped. Each partition's next range starts at
    /// its `until` (an `until` at or past the position, or below the range's `from`, changes
    /// nothing; this is not a move back: nothing past it was handed out), and the rate limits
    /// pace the next batch by what was read.
    pub fn end_early(&mut self, read: &[OffsetRange]) {
        for r in read {
            if let Some(p) = self.positions.get_mut(&r.topic_partition()) {
                if r.until < *p && r.until >= r.from {
                    *p = r.until;
                }
            }
        }
        if let Some((at, rates)) = self.last_pace.take() {
            self.not_before = self.next_start(at, read, rates.as_deref());
            self.last_pace = Some((at, rates));
        }
    }

    /// Moves a partition's position (data loss handled under [`DataLossPolicy::Earliest`], or
    /// an operator's answer to a data-loss error). Forgets the partition's previous end offset,
    /// so the end-moved-back check restarts. A move below the position is reported in the next
    /// plan's [`BatchPlan::moved_back`].
    pub fn set_position(&mut self, tp: TopicPartition, offset: i64) {
        self.last_end.remove(&tp);
        self.note_move(&tp, offset);
        self.positions.insert(tp, offset);
    }

    /// Records a move of `tp` below its position (the first since the last plan wins: that is
    /// where the last plan left it).
    fn note_move(&mut self, tp: &TopicPartition, to: i64) {
        if let Some(&old) = self.positions.get(tp) {
            if to < old {
                self.pending_moved_back.entry(tp.clone()).or_insert(old);
            }
        }
    }

    /// The ListOffsets-by-timestamp look-ups the next [`plan`](Self::plan) needs: partitions
    /// of `partitions` that have no position and will follow [`StartPolicy::Timestamp`],
    /// with the timestamp.
    pub fn timestamp_lookups<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<(TopicPartition, i64)> {
        partitions
            .into_iter()
            .filter(|tp| !self.positions.contains_key(*tp) && !self.is_new_partition(tp))
            .filter_map(|tp| Some((tp.clone(), start::start_timestamp(&self.config.start, tp)?)))
            .collect()
    }

    /// Feeds the backpressure estimator with a finished batch (Spark's
    /// `RateController.onBatchCompleted`). Returns the newly published rate in records/s, or
    /// `None` when backpressure is off or the estimator publishes nothing (see
    /// [`PidRateEstimator::compute`]).
    pub fn on_batch_completed(&mut self, completion: &BatchCompletion) -> Option<i64> {
        let rate = self.pid.as_mut()?.compute(
            completion.time,
            completion.records,
            completion.processing_delay,
            completion.scheduling_delay,
        )?;
        // Spark's RateController keeps the rate as a Long: `rateLimit.set(s.toLong)`.
        self.latest_rate = rate as i64;
        Some(self.latest_rate)
    }

    /// The earliest time the next batch may start (the trigger's interval and the rate limits'
    /// pacing), if the last batch set one. A driver sleeps until then instead of asking the
    /// brokers for a snapshot [`plan`](Self::plan) would only answer with
    /// [`WaitReason::Paced`].
    pub fn not_before(&self) -> Option<Duration> {
        self.not_before
    }

    fn is_new_partition(&self, tp: &TopicPartition) -> bool {
        self.initialized || self.known_topics.contains(tp.topic.as_str())
    }

    /// When the batch after one planned at `now` with `ranges` may start: the trigger's
    /// interval after `now`, and under a rate (`maxRatePerPartition`, backpressure; `rates`
    /// in records per second, index-aligned with `ranges`) the time the most loaded partition's
    /// records take at its rate (`taken / rate`), so that rates hold in wall-clock time even
    /// when `minRatePerPartition` raises a batch's cap above `rate × interval`.
    fn next_start(
        &self,
        now: Duration,
        ranges: &[OffsetRange],
        rates: Option<&[f64]>,
    ) -> Option<Duration> {
        let mut at = now;
        if let Trigger::ProcessingTime(interval) = self.config.trigger {
            at = at.max(now.saturating_add(interval));
        }
        if let Some(rates) = rates {
            let secs = ranges
                .iter()
                .zip(rates)
                .filter(|(_, &rate)| rate > 0.0)
                .map(|(r, &rate)| r.len() as f64 / rate)
                .fold(0.0f64, f64::max);
            if secs > 0.0 && secs.is_finite() {
                // At most a day: a rate so small that one record takes longer is a
                // configuration to take literally, not to sleep through.
                let pace = Duration::from_secs_f64(secs.min(86_400.0));
                at = at.max(now.saturating_add(pace));
            }
        }
        (at > now).then_some(at)
    }

    /// Plans the next batch from a snapshot of the partitions, at `now`.
    ///
    /// Partitions with a position but absent from the snapshot keep their position and get
    /// no range. On error the planner's state is unchanged.
    pub fn plan(
        &mut self,
        now: Duration,
        snapshot: &[PartitionSnapshot],
    ) -> Result<PlanOutcome, PlanError> {
        if let Some(at) = self.not_before.filter(|at| now < *at) {
            return Ok(PlanOutcome::Wait(Wait {
                reason: WaitReason::Paced,
                retry_at: Some(at),
            }));
        }
        let mut parts: BTreeMap<TopicPartition, &PartitionSnapshot> = BTreeMap::new();
        for snap in snapshot {
            if snap.log_start < 0 || snap.end < snap.log_start {
                return Err(PlanError::InvalidSnapshot {
                    topic: snap.topic.to_string(),
                    partition: snap.partition,
                    log_start: snap.log_start,
                    end: snap.end,
                });
            }
            if parts.insert(snap.topic_partition(), snap).is_some() {
                return Err(PlanError::DuplicatePartition {
                    topic: snap.topic.to_string(),
                    partition: snap.partition,
                });
            }
        }

        let resolved = start::resolve(&start::ResolveInput {
            policy: &self.config.start,
            timestamp_strategy: self.config.timestamp_strategy,
            data_loss: self.config.data_loss,
            parts: &parts,
            positions: &self.positions,
            last_end: &self.last_end,
            is_new: &|tp| self.is_new_partition(tp),
        })?;

        // From here on nothing fails: commit the resolution.
        self.initialized = true;
        for (tp, snap) in &parts {
            set(&mut self.last_end, tp, snap.end);
        }
        self.pending_lost.extend(resolved.lost);
        let froms: Vec<(&TopicPartition, i64, i64)> = parts
            .iter()
            .map(|(tp, snap)| (tp, resolved.positions[tp], snap.end))
            .collect();
        for (tp, from, _) in &froms {
            self.note_move(tp, *from);
            set(&mut self.positions, tp, *from);
        }

        let available: Vec<u64> = froms
            .iter()
            .map(|(_, from, end)| u64::try_from(end - from).unwrap_or(0))
            .collect();

        // minOffsetsPerTrigger / maxTriggerDelay (KafkaMicroBatchStream.delayBatch): checked
        // first, on everything available.
        if let Some(min) = self.config.rate.min_offsets_per_trigger {
            let available = available.iter().sum::<u64>();
            match rate::delay_batch(
                min,
                self.config.rate.max_trigger_delay,
                self.last_trigger,
                now,
                available,
            ) {
                rate::Trigger::Fire => self.last_trigger = Some(now),
                rate::Trigger::Delay { retry_at } => {
                    return Ok(PlanOutcome::Wait(Wait {
                        reason: WaitReason::BelowMinOffsets { available, min },
                        retry_at: Some(retry_at),
                    }));
                }
            }
        }

        // At most max_partitions_per_batch partitions with data, in turn, when the data is
        // more than one batch takes. The others count as having nothing to read in this
        // batch, so the rate limits split over the ones taken.
        let fits = self
            .config
            .rate
            .max_offsets_per_trigger
            .is_some_and(|max| available.iter().sum::<u64>() <= max);
        let (lags, rotation) = match self.config.max_partitions_per_batch {
            None => (available, None),
            Some(_) if fits => (available, None),
            Some(max) => {
                let tps: Vec<&TopicPartition> = froms.iter().map(|(tp, _, _)| *tp).collect();
                let (taken, last) = rotate::choose(&tps, &available, max, self.rotation.as_ref());
                let lags = available
                    .iter()
                    .zip(&taken)
                    .map(|(lag, taken)| if *taken { *lag } else { 0 })
                    .collect();
                (lags, last.cloned())
            }
        };

        let estimated_rate = self.config.rate.backpressure.map(|pid| {
            // DirectKafkaInputDStream.maxMessagesPerPartition: the latest published rate, or
            // the initial rate before the estimator published one.
            if self.latest_rate > 0 {
                self.latest_rate as f64
            } else {
                pid.initial_rate.unwrap_or(0) as f64
            }
        });
        let caps = rate::caps(
            &lags,
            &self.config.rate,
            estimated_rate,
            self.config.batch_interval,
        );
        let rates = rate::dstream_rates(
            &lags,
            self.config.rate.max_rate_per_partition,
            estimated_rate,
        );

        let ranges: Vec<OffsetRange> = froms
            .iter()
            .zip(&lags)
            .zip(&caps)
            .map(|(((tp, from, _), lag), cap)| {
                let take = cap.map_or(*lag, |cap| cap.min(*lag));
                let until = from.saturating_add(i64::try_from(take).unwrap_or(i64::MAX));
                OffsetRange::new(tp.topic.clone(), tp.partition, *from, until)
            })
            .collect();

        let nothing = ranges.iter().all(OffsetRange::is_empty);
        if nothing && self.pending_lost.is_empty() && !self.config.emit_empty_batches {
            return Ok(PlanOutcome::Wait(Wait {
                reason: WaitReason::NoNewData,
                retry_at: None,
            }));
        }

        for r in &ranges {
            self.positions.insert(r.topic_partition(), r.until);
        }
        if rotation.is_some() {
            self.rotation = rotation;
        }
        self.not_before = self.next_start(now, &ranges, rates.as_deref());
        self.last_pace = Some((now, rates));
        let batch_id = self.next_batch_id;
        self.next_batch_id += 1;
        // The moves of the partitions this plan has a range for; a partition the snapshot
        // lacked keeps its move for a later plan.
        let mut moved_back = BTreeMap::new();
        for r in &ranges {
            if let Some(old) = self.pending_moved_back.remove(&r.topic_partition()) {
                if old != r.from {
                    moved_back.insert(r.topic_partition(), old);
                }
            }
        }
        Ok(PlanOutcome::Batch(BatchPlan {
            batch_id,
            ranges,
            lost: std::mem::take(&mut self.pending_lost),
            moved_back,
            planned_at: now,
        }))
    }
}
