//! Where each partition starts, and the data-loss check.
//!
//! A partition without a position at the planner's first plan follows the [`StartPolicy`]
//! (Spark's `startingOffsets`: `KafkaMicroBatchStream.getOrCreateInitialPartitionOffsets`;
//! Kafka's `auto.offset.reset`). A partition that appears later — a new partition of a
//! subscribed topic — starts from its log start, as Structured Streaming's
//! `getOffsetRangesFromResolvedOffsets` does with `fetchEarliestOffsets(newPartitions)`. So do
//! partitions missing from a resumed planner's positions when other partitions of their topic
//! have one (they were added while the application was down).
//!
//! Every position is then checked against the partition's log (Spark's `failOnDataLoss`
//! cases): below the log start, past the end, an end lower than the last one seen, or a new
//! partition not starting at 0. See [`DataLossReason`](super::DataLossReason).

use std::collections::BTreeMap;

use super::{DataLossReason, LostRange, PartitionSnapshot, PlanError, TopicPartition};

/// Where a partition without a position starts, at the planner's first plan.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartPolicy {
    /// The log start offset.
    Earliest,
    /// The end offset (only records produced from now on).
    Latest,
    /// The first offset whose timestamp is at or after this many ms since the Unix epoch, as
    /// ListOffsets answers it ([`PartitionSnapshot::timestamp_lookup`]); the end offset when no
    /// record is that recent.
    Timestamp(i64),
    /// These offsets; a partition not listed is an error ([`PlanError::NoPosition`]), as
    /// Spark requires every assigned partition in a `startingOffsets` JSON.
    Explicit(BTreeMap<TopicPartition, StartOffset>),
    /// No default: [`PlanError::NoPosition`] naming the partitions (`auto.offset.reset=none`).
    None,
    /// This offset in every partition (kcat's `-o N`); past the end, the end; below the log
    /// start, data loss as for any position.
    Offset(i64),
    /// This many offsets before the end of every partition, or the log start when it has
    /// fewer (kcat's `-o -N`).
    FromEnd(u64),
}

/// One partition's explicit start (Spark's JSON uses -2 for earliest and -1 for latest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartOffset {
    /// The log start offset.
    Earliest,
    /// The end offset.
    Latest,
    /// This offset (checked for data loss like any position).
    Offset(i64),
    /// The first offset whose timestamp is at or after this many ms since the Unix epoch
    /// (Spark's `startingOffsetsByTimestamp`); when no record is that recent,
    /// [`TimestampStrategy`] decides.
    Timestamp(i64),
}

/// What a start by timestamp does when no record is that recent (Spark's
/// `startingOffsetsByTimestampStrategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampStrategy {
    /// Start at the end offset: only records produced from now on (kdirect's default).
    #[default]
    Latest,
    /// Fail with [`PlanError::NoOffsetForTimestamp`] naming the partitions (Spark's default).
    Error,
}

/// The ListOffsets answer for the start timestamp, per partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimestampLookup {
    /// Not looked up.
    #[default]
    NotDone,
    /// The earliest offset whose timestamp is at or after the timestamp.
    Offset(i64),
    /// No record at or after the timestamp (ListOffsets answered offset -1).
    NoMatch,
}

/// What a detected data loss does (Spark's `failOnDataLoss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataLossPolicy {
    /// Stop with [`PlanError::DataLoss`] naming the exact lost range.
    #[default]
    Fail,
    /// Restart the partition at its log start and report the [`LostRange`] in the next plan.
    Earliest,
}

pub(super) struct ResolveInput<'a> {
    pub policy: &'a StartPolicy,
    pub timestamp_strategy: TimestampStrategy,
    pub data_loss: DataLossPolicy,
    pub parts: &'a BTreeMap<TopicPartition, &'a PartitionSnapshot>,
    pub positions: &'a BTreeMap<TopicPartition, i64>,
    pub last_end: &'a BTreeMap<TopicPartition, i64>,
    pub is_new: &'a dyn Fn(&TopicPartition) -> bool,
}

pub(super) struct Resolved {
    /// A checked position for every partition of the snapshot.
    pub positions: BTreeMap<TopicPartition, i64>,
    /// Losses skipped under [`DataLossPolicy::Earliest`].
    pub lost: Vec<LostRange>,
}

/// Gives every partition of the snapshot a checked position, or the first error (in this
/// order: partitions without a position, missing timestamp look-ups, data loss).
pub(super) fn resolve(input: &ResolveInput<'_>) -> Result<Resolved, PlanError> {
    let mut positions = BTreeMap::new();
    let mut losses: Vec<LostRange> = Vec::new();
    let mut no_position = Vec::new();
    let mut no_lookup = Vec::new();
    let mut no_match = Vec::new();

    for (tp, snap) in input.parts {
        let position = if let Some(&p) = input.positions.get(tp) {
            p
        } else if (input.is_new)(tp) {
            if snap.log_start > 0 {
                losses.push(lost(
                    tp,
                    0,
                    snap.log_start,
                    DataLossReason::NewPartitionNotFromZero,
                ));
            }
            snap.log_start
        } else {
            match start_position(input.policy, input.timestamp_strategy, tp, snap) {
                Start::At(p) => p,
                Start::NoPosition => {
                    no_position.push(tp.clone());
                    continue;
                }
                Start::NoLookup(ts) => {
                    no_lookup.push((tp.clone(), ts));
                    continue;
                }
                Start::NoMatch(ts) => {
                    no_match.push((tp.clone(), ts));
                    continue;
                }
            }
        };
        let position = match check(position, snap, input.last_end.get(tp).copied()) {
            Some((from, until, reason)) => {
                losses.push(lost(tp, from, until, reason));
                snap.log_start
            }
            None => position,
        };
        positions.insert(tp.clone(), position);
    }

    if !no_position.is_empty() {
        return Err(PlanError::NoPosition {
            partitions: no_position,
        });
    }
    if let Some(&(_, timestamp)) = no_lookup.first() {
        return Err(PlanError::MissingTimestampLookup {
            timestamp,
            partitions: no_lookup.into_iter().map(|(tp, _)| tp).collect(),
        });
    }
    if let Some(&(_, timestamp)) = no_match.first() {
        return Err(PlanError::NoOffsetForTimestamp {
            timestamp,
            partitions: no_match.into_iter().map(|(tp, _)| tp).collect(),
        });
    }
    match (input.data_loss, losses.first()) {
        (DataLossPolicy::Fail, Some(first)) => Err(PlanError::DataLoss {
            topic: first.topic.clone(),
            partition: first.partition,
            lost_from: first.from,
            lost_until: first.until,
            reason: first.reason,
        }),
        _ => Ok(Resolved {
            positions,
            lost: losses,
        }),
    }
}

enum Start {
    At(i64),
    NoPosition,
    /// The timestamp was not looked up.
    NoLookup(i64),
    /// No record at or after the timestamp, and the strategy is an error.
    NoMatch(i64),
}

/// The timestamp a partition without a position starts at, if its start is by time.
pub(super) fn start_timestamp(policy: &StartPolicy, tp: &TopicPartition) -> Option<i64> {
    match policy {
        StartPolicy::Timestamp(ts) => Some(*ts),
        StartPolicy::Explicit(offsets) => match offsets.get(tp) {
            Some(StartOffset::Timestamp(ts)) => Some(*ts),
            _ => None,
        },
        _ => None,
    }
}

fn start_position(
    policy: &StartPolicy,
    strategy: TimestampStrategy,
    tp: &TopicPartition,
    snap: &PartitionSnapshot,
) -> Start {
    if let Some(ts) = start_timestamp(policy, tp) {
        return match (snap.timestamp_lookup, strategy) {
            (TimestampLookup::Offset(o), _) => Start::At(o),
            (TimestampLookup::NoMatch, TimestampStrategy::Latest) => Start::At(snap.end),
            (TimestampLookup::NoMatch, TimestampStrategy::Error) => Start::NoMatch(ts),
            (TimestampLookup::NotDone, _) => Start::NoLookup(ts),
        };
    }
    match policy {
        StartPolicy::Earliest => Start::At(snap.log_start),
        StartPolicy::Latest => Start::At(snap.end),
        StartPolicy::Explicit(offsets) => match offsets.get(tp) {
            Some(StartOffset::Earliest) => Start::At(snap.log_start),
            Some(StartOffset::Latest) => Start::At(snap.end),
            Some(StartOffset::Offset(o)) => Start::At(*o),
            _ => Start::NoPosition,
        },
        StartPolicy::Offset(o) => Start::At((*o).min(snap.end)),
        StartPolicy::FromEnd(n) => Start::At(
            snap.end
                .saturating_sub(i64::try_from(*n).unwrap_or(i64::MAX))
                .max(snap.log_start),
        ),
        _ => Start::NoPosition,
    }
}

/// The data-loss check of one position: the lost range and why, if any.
fn check(
    position: i64,
    snap: &PartitionSnapshot,
    last_end: Option<i64>,
) -> Option<(i64, i64, DataLossReason)> {
    if position < snap.log_start {
        Some((position, snap.log_start, DataLossReason::BelowLogStart))
    } else if position > snap.end {
        Some((snap.end, position, DataLossReason::PastEnd))
    } else {
        match last_end {
            Some(previous_end) if snap.end < previous_end => Some((
                snap.end,
                previous_end,
                DataLossReason::EndMovedBack { previous_end },
            )),
            _ => None,
        }
    }
}

fn lost(tp: &TopicPartition, from: i64, until: i64, reason: DataLossReason) -> LostRange {
    LostRange {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        from,
        until,
        reason,
    }
}
