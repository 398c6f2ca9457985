//! KIP-320 truncation detection: is a position still in the leader's log?
//!
//! Every fetch from a position the fetcher reached itself sends the `partition_leader_epoch`
//! of the last batch it read before it (`last_fetched_epoch`, Fetch v12+); the broker answers
//! a log that no longer holds those records with a diverging epoch (handled in
//! `session.rs`). After a leader change (the partition's leader epoch in the metadata moved
//! since the position was read), [`check_truncation`] asks the new leader directly, before the
//! next batch is planned, with OffsetForLeaderEpoch: "where does my last epoch end in your
//! log?". An end offset below the position means the records read at `[end, position)` are
//! gone: an unclean leader election, or records acknowledged with `acks=1` that the new leader
//! never replicated. That check matters when the new leader's log ends below the position
//! (nothing would be fetched, so no diverging epoch could come back) and for the exact start
//! of the loss (the end offset moving back shows only part of it).
//!
//! The rule is the Java client's (`SubscriptionState.maybeCompleteValidation`, used for both
//! OffsetForLeaderEpoch answers and Fetch's diverging epoch): the position is valid when the
//! leader's end offset for the epoch is at or past it; otherwise the records from that end
//! offset on are truncated, and the consumer goes on from it ("the first offset known to
//! diverge"). An undefined answer (epoch -1, offset -1: the leader has no epoch at or below the
//! one asked) tells no end offset: the Java consumer resets with its reset policy.
//!
//! A position resumed from a store that kept its epoch (the checkpoint's `leaderEpochs`, the
//! Kafka group's committed leader epoch) is checked the same way before the stream's first
//! plan ([`Fetcher::resume_at`]), as the Java consumer validates a committed offset that
//! carries an epoch: a log truncated while the stream was down is found. A position stored
//! without one (the SQL, Redis, ZooKeeper and HBase stores keep none) is checked only once the
//! stream has read from it.

use std::collections::BTreeMap;

use kdirect_proto::api::fetch::EpochEnd;
use kdirect_proto::api::offset_for_leader_epoch::{self as ofle, EpochQuery, OffsetForLeaderEpoch};
use kdirect_proto::message::Api;

use super::{futures_join_all, Fetcher, LastFetched};
use crate::cluster::Cluster;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::plan::{DataLossReason, LostRange, PlanError, TopicPartition};

/// What a leader's end offset for the epoch of the last batch read says about a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochVerdict {
    /// The leader's log holds everything below the position at that epoch.
    Valid,
    /// The log was truncated under the position: records from `lost_from` on are not the ones
    /// read; the partition goes on at `lost_from`.
    Truncated {
        /// The leader's end offset for the epoch (where its log stops agreeing).
        lost_from: i64,
    },
    /// The leader has no epoch at or below the one asked, and no log start is known to go on
    /// from.
    Unknown,
}

/// Judges a leader's `end` for the epoch of the last batch read before `position` (a Fetch
/// answer's diverging epoch, or an OffsetForLeaderEpoch answer). `log_start` (-1 if unknown)
/// is where an undefined answer (the leader has no such epoch at all) resumes.
pub fn judge_epoch_end(position: i64, end: EpochEnd, log_start: i64) -> EpochVerdict {
    if end.end_offset >= position {
        EpochVerdict::Valid
    } else if end.end_offset >= 0 {
        EpochVerdict::Truncated {
            lost_from: end.end_offset,
        }
    } else if (0..position).contains(&log_start) {
        EpochVerdict::Truncated {
            lost_from: log_start,
        }
    } else {
        EpochVerdict::Unknown
    }
}

/// A position the partition's leader no longer has (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The partition.
    pub partition: TopicPartition,
    /// The leader's end offset for the epoch: the first offset lost, and where the partition
    /// goes on.
    pub lost_from: i64,
    /// The position checked: one past the last offset lost.
    pub lost_until: i64,
    /// The epoch of the last batch read before the position.
    pub last_fetched_epoch: i32,
    /// The epoch the leader answered with (the largest it has at or below that one).
    pub leader_epoch: i32,
    /// The leader that answered.
    pub broker: BrokerName,
}

impl Truncation {
    /// The data-loss reason.
    pub fn reason(&self) -> DataLossReason {
        DataLossReason::Truncated {
            last_fetched_epoch: self.last_fetched_epoch,
            leader_epoch: self.leader_epoch,
            broker: self.broker.node_id.unwrap_or(-1),
        }
    }

    /// The lost range, as a batch reports it under `failOnDataLoss=false`.
    pub fn lost(&self) -> LostRange {
        LostRange {
            topic: self.partition.topic.to_string(),
            partition: self.partition.partition,
            from: self.lost_from,
            until: self.lost_until,
            reason: self.reason(),
        }
    }

    /// The error under `failOnDataLoss=true`: [`PlanError::DataLoss`].
    pub fn to_error(&self) -> Error {
        PlanError::DataLoss {
            topic: self.partition.topic.to_string(),
            partition: self.partition.partition,
            lost_from: self.lost_from,
            lost_until: self.lost_until,
            reason: self.reason(),
        }
        .into()
    }
}

/// Checks the positions whose partition's leader epoch moved since a fetch on `budget` read
/// up to them (see the module docs): one OffsetForLeaderEpoch request per leader, all leaders
/// at once, against the cluster's current metadata (refresh it first). Positions the budget
/// knows no epoch for, or read under the current leader epoch, are not asked. Returns the
/// truncations found, sorted by partition; a position found valid is remembered as checked
/// under the current leader epoch, a truncated one is forgotten (the stream goes on from the
/// truncation point without an epoch).
///
/// A leader that cannot be reached or answers a partition with a retriable error
/// (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER: the metadata is behind
/// or ahead of the leader) leaves those positions unchecked: the next call asks again, and a
/// fetch meanwhile sends the last fetched epoch, so a truncation is still found there. Other
/// partition errors are returned.
pub async fn check_truncation(
    cluster: &Cluster,
    fetcher: &Fetcher,
    positions: &[(TopicPartition, i64)],
) -> Result<Vec<Truncation>, Error> {
    let view = cluster.view();
    type Ask = (TopicPartition, i64, LastFetched, i32);
    let mut by_leader: BTreeMap<i32, Vec<Ask>> = BTreeMap::new();
    for (tp, pos) in positions {
        let Some(f) = fetcher
            .last_fetched(&tp.topic, tp.partition)
            .filter(|f| f.position == *pos && f.epoch >= 0)
        else {
            continue;
        };
        let Ok((leader, epoch)) = view.leader(&tp.topic, tp.partition) else {
            continue;
        };
        if epoch < 0 || epoch == f.leader_epoch {
            continue;
        }
        by_leader
            .entry(leader)
            .or_default()
            .push((tp.clone(), *pos, f, epoch));
    }
    if by_leader.is_empty() {
        return Ok(Vec::new());
    }
    let asks = by_leader.into_iter().map(|(leader, asks)| async move {
        let conn = match cluster.connection(leader).await {
            Ok(c) => c,
            Err(e) if e.is_retriable() => {
                tracing::debug!("truncation check skipped for leader {leader}: {e}");
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let Ok(version) = conn.version::<OffsetForLeaderEpoch>() else {
            // A broker without OffsetForLeaderEpoch v2+ (before Kafka 2.1): only the fetch's
            // checks (which also need Fetch v12+) remain.
            tracing::debug!(
                "{} does not speak OffsetForLeaderEpoch v2+: positions not checked after a \
                 leader change",
                conn.broker()
            );
            return Ok(Vec::new());
        };
        let mut topics: BTreeMap<&str, Vec<EpochQuery>> = BTreeMap::new();
        for (tp, _, f, epoch) in &asks {
            topics
                .entry(tp.topic.as_str())
                .or_default()
                .push(EpochQuery {
                    partition: tp.partition,
                    current_leader_epoch: *epoch,
                    leader_epoch: f.epoch,
                });
        }
        let topics: Vec<(&str, Vec<EpochQuery>)> = topics.into_iter().collect();
        let req = ofle::request(&topics, version);
        let frame = match conn.round_trip::<OffsetForLeaderEpoch>(&req, version).await {
            Ok(f) => f,
            Err(e) if e.is_retriable() => {
                tracing::debug!("truncation check skipped for leader {leader}: {e}");
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let (_, answers) =
            ofle::decode(frame, version).map_err(|source| conn.protocol_error(source))?;
        let mut found = Vec::new();
        for (tp, pos, f, epoch) in asks {
            let Some(a) = answers
                .iter()
                .find(|a| a.topic == tp.topic && a.partition == tp.partition)
            else {
                continue;
            };
            if let Some(code) = a.error.err() {
                if code.is_retriable() {
                    tracing::debug!(
                        "truncation check of {}-{} at {pos}: {} answered {}; asked again later",
                        tp.topic,
                        tp.partition,
                        conn.broker(),
                        code
                    );
                    continue;
                }
                return Err(ErrorKind::Partition {
                    broker: conn.broker().clone(),
                    api: OffsetForLeaderEpoch::KEY,
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    code,
                }
                .into());
            }
            let end = EpochEnd {
                epoch: a.leader_epoch,
                end_offset: a.end_offset,
            };
            match judge_epoch_end(pos, end, -1) {
                EpochVerdict::Valid => fetcher.state().set_last_fetched(
                    &tp.topic,
                    tp.partition,
                    Some(LastFetched {
                        leader_epoch: epoch,
                        ..f
                    }),
                ),
                EpochVerdict::Truncated { lost_from } => {
                    fetcher
                        .state()
                        .set_last_fetched(&tp.topic, tp.partition, None);
                    found.push(Truncation {
                        partition: tp,
                        lost_from,
                        lost_until: pos,
                        last_fetched_epoch: f.epoch,
                        leader_epoch: a.leader_epoch,
                        broker: conn.broker().clone(),
                    });
                }
                EpochVerdict::Unknown => {
                    // No epoch at or below ours in the leader's log: the planner's checks
                    // against the log's start and end decide.
                    tracing::warn!(
                        "{}-{}: leader {} has no epoch at or below {} (the position {pos} was \
                         read at it); left to the log start and end checks",
                        tp.topic,
                        tp.partition,
                        conn.broker(),
                        f.epoch
                    );
                    fetcher
                        .state()
                        .set_last_fetched(&tp.topic, tp.partition, None);
                }
            }
        }
        Ok::<_, Error>(found)
    });
    let mut out = Vec::new();
    for r in futures_join_all(asks).await {
        out.extend(r?);
    }
    out.sort_by(|a, b| a.partition.cmp(&b.partition));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(epoch: i32, end_offset: i64) -> EpochEnd {
        EpochEnd { epoch, end_offset }
    }

    #[test]
    fn an_end_at_or_past_the_position_is_valid() {
        assert_eq!(judge_epoch_end(10, end(5, 10), 0), EpochVerdict::Valid);
        assert_eq!(judge_epoch_end(10, end(5, 400), 0), EpochVerdict::Valid);
    }

    #[test]
    fn an_end_below_the_position_is_the_first_lost_offset() {
        assert_eq!(
            judge_epoch_end(10, end(5, 7), 0),
            EpochVerdict::Truncated { lost_from: 7 }
        );
        // The whole epoch gone: the leader's largest epoch below ours ends at 0.
        assert_eq!(
            judge_epoch_end(10, end(2, 0), 0),
            EpochVerdict::Truncated { lost_from: 0 }
        );
    }

    #[test]
    fn an_undefined_answer_resumes_from_the_log_start_when_known() {
        assert_eq!(
            judge_epoch_end(10, end(-1, -1), 4),
            EpochVerdict::Truncated { lost_from: 4 }
        );
        assert_eq!(judge_epoch_end(10, end(-1, -1), -1), EpochVerdict::Unknown);
        // A log start at or past the position is not a truncation under it.
        assert_eq!(judge_epoch_end(10, end(-1, -1), 10), EpochVerdict::Unknown);
    }
}
