//! `StreamCore`: the stream's decisions, sans-IO.
//!
//! The core owns everything a stream decides between two network answers: the planner (and
//! through it positions, rate limits, trigger and the data-loss check of a snapshot), the
//! logged batch to re-run, each topic's id, the ends recent Fetch answers showed, the ending
//! of a bounded stream, the group assignment, and every rule that turns a plan into the
//! ranges to fetch and a fetch's answer into the batch handed out: the data-loss policy for a
//! log start that moved, a truncation (KIP-320) and a re-created topic (KIP-516), reading a
//! batch up to what fits in memory and ending its ranges where the reading stopped, the
//! adaptive batch size. It is owned through `&mut`; it never awaits, never reads a clock (the
//! driver passes `now`, the time since the stream started) and never touches a socket. The
//! driver ([`super::driver`]) asks it what to do, does it, and hands the answers back, as
//! quinn-proto's `Connection` is driven by quinn's endpoint. So every rule here is tested
//! over virtual time in milliseconds (`core/tests.rs`).
//!
//! CI keeps it that way: `.ci/run` refuses `async`, `tokio`, `Instant` and `Mutex` in this
//! file.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kdirect_commit::{Committed, PlannedBatch};
use kdirect_engine::fetch::{ObservedEnds, RangeData, Truncation};
use kdirect_engine::plan::{
    BatchCompletion, DataLossPolicy, DataLossReason, LostRange, OffsetRange, PartitionSnapshot,
    PlanError, PlanOutcome, Planner, PlannerConfig, TimestampLookup, Topic, TopicPartition, Topics,
    Wait,
};
use kdirect_engine::{Error as EngineError, ErrorKind};
use kdirect_proto::api::list_offsets::PartitionOffset;

use super::{adaptive_offsets, chunked_partition_cap, partition_cap, Ending};

#[cfg(test)]
mod tests;

/// Long-polls in a row that may be answered at once with nothing new before the stream polls
/// at intervals instead (a broker that does not hold fetches).
const QUICK_POLLS: u32 = 3;

/// What the core needs of the stream's settings.
#[derive(Clone, Debug)]
pub(crate) struct CoreConfig {
    /// The planner's settings, for a new planner per group assignment.
    pub planner: PlannerConfig,
    /// `failOnDataLoss`.
    pub data_loss: DataLossPolicy,
    /// A bounded stream's end.
    pub ending: Option<Ending>,
    /// Only these partitions of each topic (`None`: all).
    pub partitions: Option<Vec<i32>>,
    /// `metadata.max.age.ms`.
    pub metadata_max_age: Duration,
    /// `ends.max.age.ms`.
    pub ends_max_age: Duration,
    /// `fetch.max.wait.ms`; zero: no long-poll.
    pub max_wait: Duration,
    /// No rate limit was set: batches are sized by the memory their data takes.
    pub adaptive: bool,
    /// `batch.chunked`: a batch is exactly its planned ranges, read in chunks that fit the
    /// memory budget (handed out one after the other), instead of being ended where the first
    /// read that fits stopped.
    pub chunked: bool,
}

/// Partitions a Fetch answer showed with nothing past the position.
#[derive(Clone, Copy, Debug)]
struct CaughtUp {
    ends: ObservedEnds,
    at: Duration,
    /// The planner's next batch id when the answer came.
    batch: u64,
}

/// What a fetch read of one range, as the core sees it: the range as the reading ended it,
/// the partition's ends as the Fetch answer gave them (`None`: no answer for it, a range read
/// from a carried batch), and the bytes held. The driver hands its [`RangeData`] as they are;
/// the tests hand plain values.
pub(crate) trait ReadRange {
    fn range(&self) -> &OffsetRange;
    fn observed(&self) -> Option<ObservedEnds>;
    fn bytes(&self) -> usize;
}

impl ReadRange for RangeData {
    fn range(&self) -> &OffsetRange {
        &self.range
    }
    fn observed(&self) -> Option<ObservedEnds> {
        self.observed
    }
    fn bytes(&self) -> usize {
        RangeData::bytes(self)
    }
}

/// What the memory budget knows of the data's size, for sizing the next batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizing {
    /// The budget's bytes.
    pub budget: usize,
    /// Bytes of data per offset seen so far.
    pub bytes_per_offset: Option<f64>,
    /// The largest stored batch seen so far.
    pub largest_batch: Option<usize>,
}

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Fetch a planned batch's ranges.
    Fetch(FetchPlan),
    /// No batch yet.
    Wait(Wait),
}

/// A planned batch and the ranges to fetch for it.
#[derive(Debug)]
pub(crate) struct FetchPlan {
    /// The batch id.
    pub batch_id: u64,
    /// The plan's ranges (what the store commits), one per partition.
    pub ranges: Vec<OffsetRange>,
    /// The ranges to fetch: the plan's non-empty ones, widened back where the log start or a
    /// truncation says so.
    pub want: Vec<OffsetRange>,
    /// Read up to what fits in memory, in whole stored batches, and end the ranges where the
    /// reading stopped (a freshly planned batch; chunked, any batch: the rest is read by
    /// later chunks); false: read `want` exactly.
    pub fit: bool,
    /// Data lost, reported with the batch.
    pub lost: Vec<LostRange>,
    /// Partitions moved back (see `BatchPlan::moved_back`).
    pub moved_back: BTreeMap<TopicPartition, i64>,
    /// When the batch was planned.
    pub planned_at: Duration,
    /// A logged batch re-run (exactly its ranges).
    pub replay: bool,
}

/// A batch read: its ranges as read, ready to hand out.
#[derive(Debug)]
pub(crate) struct Finished {
    pub batch_id: u64,
    pub ranges: Vec<OffsetRange>,
    /// Chunked: what is left to read of the batch's ranges, for the next chunks (empty: the
    /// batch is whole).
    pub rest: Vec<OffsetRange>,
    pub lost: Vec<LostRange>,
    pub moved_back: BTreeMap<TopicPartition, i64>,
    pub planned_at: Duration,
    pub replay: bool,
    pub topic_ids: BTreeMap<String, [u8; 16]>,
}

/// One partition's figures for the metrics after a plan.
#[derive(Debug)]
pub(crate) struct PartitionLag<'a> {
    pub snapshot: &'a PartitionSnapshot,
    pub position: i64,
    pub lag: u64,
}

/// The stream's state machine. See the module docs.
#[derive(Debug)]
pub(crate) struct StreamCore {
    cfg: CoreConfig,
    planner: Planner,
    /// A logged batch to re-run before planning.
    replay: Option<PlannedBatch>,
    /// Each topic's id (KIP-516) as first seen; all zeros when the broker sends none.
    topic_ids: BTreeMap<String, [u8; 16]>,
    /// The topics' names, shared by the keys built per partition per batch.
    topics: Topics,
    /// Partitions of re-created topics, and truncations found before a plan (KIP-320),
    /// reported with the next batch.
    pending_lost: Vec<LostRange>,
    /// KIP-320 under `failOnDataLoss=false`: partitions whose log was truncated under the
    /// position while the new leader's log reaches past it. The next batch's fetch of each
    /// starts at the truncation point (the planned range, which the store commits, is left
    /// as planned: the stored position is still the old one).
    rewinds: BTreeMap<TopicPartition, i64>,
    /// With an ending: each partition's end, resolved at the first snapshot.
    until: Option<BTreeMap<TopicPartition, i64>>,
    /// The last metadata refresh and the topics it subscribed: reused for
    /// `metadata.max.age.ms`, dropped on any error.
    metadata: Option<(Duration, Arc<[String]>)>,
    /// Each partition's ends as the last Fetch answer for it gave them, and when: they plan
    /// the next batch while younger than `ends.max.age.ms`, instead of a ListOffsets round.
    observed: BTreeMap<TopicPartition, (ObservedEnds, Duration)>,
    /// Partitions a Fetch answer (a batch's or a long-poll's) showed with nothing past the
    /// position. They plan a batch while every partition is caught up (the planner waits, and
    /// the long-poll sees a new record at once), or within one batch of the answer; older,
    /// while other partitions keep the stream busy, they are asked by ListOffsets, so a record
    /// there waits at most a batch or two, never `ends.max.age.ms`.
    caught_up: BTreeMap<TopicPartition, CaughtUp>,
    /// The offsets left to read as of the last plan.
    lag: Option<u64>,
    /// Group mode: the partitions the group assigned this member (`None`: not a member,
    /// every partition is read).
    assigned: Option<BTreeSet<TopicPartition>>,
    /// Group mode: each subscribed topic's partition count when the member joined.
    joined_topics: BTreeMap<String, usize>,
    /// Long-polls in a row answered at once with nothing new.
    quick_polls: u32,
    /// Times the stream fell back to polling at intervals.
    interval_polls: u64,
}

impl StreamCore {
    /// A core starting from `planner`, with a logged batch to re-run first, the topic ids the
    /// positions were read at, and (group mode) an empty assignment until the group assigns.
    pub fn new(
        cfg: CoreConfig,
        planner: Planner,
        replay: Option<PlannedBatch>,
        topic_ids: BTreeMap<String, [u8; 16]>,
        member: bool,
    ) -> Self {
        StreamCore {
            cfg,
            planner,
            replay,
            topic_ids,
            topics: Topics::default(),
            pending_lost: Vec::new(),
            rewinds: BTreeMap::new(),
            until: None,
            metadata: None,
            observed: BTreeMap::new(),
            caught_up: BTreeMap::new(),
            lag: None,
            assigned: member.then(BTreeSet::new),
            joined_topics: BTreeMap::new(),
            quick_polls: 0,
            interval_polls: 0,
        }
    }

    /// The next offset to read per partition, as planned so far.
    pub fn positions(&self) -> &BTreeMap<TopicPartition, i64> {
        self.planner.positions()
    }

    /// The batch id the next plan gets.
    pub fn next_batch_id(&self) -> u64 {
        self.planner.next_batch_id()
    }

    /// When the rate limits or the trigger let the next batch start.
    pub fn not_before(&self) -> Option<Duration> {
        self.planner.not_before()
    }

    /// The offsets left to read as of the last plan.
    pub fn lag(&self) -> Option<u64> {
        self.lag
    }

    /// A bounded stream's ends, once resolved.
    pub fn until(&self) -> Option<&BTreeMap<TopicPartition, i64>> {
        self.until.as_ref()
    }

    /// Group mode: the partitions assigned.
    pub fn assigned(&self) -> Option<&BTreeSet<TopicPartition>> {
        self.assigned.as_ref()
    }

    /// Times the stream fell back to polling at intervals.
    pub fn interval_polls(&self) -> u64 {
        self.interval_polls
    }

    /// The caller finished with a batch (the backpressure estimator's input).
    pub fn on_batch_completed(&mut self, completion: &BatchCompletion) {
        self.planner.on_batch_completed(completion);
    }

    /// Group mode, before a join: the member holds nothing until the new assignment. Returns
    /// what it held.
    pub fn give_up_assignment(&mut self) -> BTreeSet<TopicPartition> {
        self.assigned.replace(BTreeSet::new()).unwrap_or_default()
    }

    /// The subscribed topics of the last metadata refresh, while younger than
    /// `metadata.max.age.ms`.
    pub fn cached_topics(&self, now: Duration) -> Option<Arc<[String]>> {
        self.metadata
            .as_ref()
            .filter(|(at, _)| now.saturating_sub(*at) < self.cfg.metadata_max_age)
            .map(|(_, names)| Arc::clone(names))
    }

    /// A metadata refresh found `names` subscribed.
    pub fn metadata_refreshed(&mut self, now: Duration, names: Arc<[String]>) {
        self.metadata = Some((now, names));
    }

    /// After an error (or a rejoin): the next snapshot refreshes metadata and asks
    /// ListOffsets.
    pub fn forget(&mut self) {
        self.metadata = None;
        self.observed.clear();
        self.caught_up.clear();
    }

    /// Whether the stream reads `tp` (the `partitions` setting and, in a group, the
    /// assignment).
    pub fn reads(&self, topic: &str, partition: i32) -> bool {
        self.cfg
            .partitions
            .as_ref()
            .is_none_or(|ps| ps.contains(&partition))
            && self
                .assigned
                .as_ref()
                .is_none_or(|a| a.contains(&TopicPartition::new(topic, partition)))
    }

    /// Group mode: whether the subscribed topics' partition counts (`now`) differ from those
    /// at the join: the member then rejoins (the leader assigns the new partitions), as the
    /// Java consumer's metadata check does. Outside a group: never.
    pub fn subscription_changed(&self, now: &BTreeMap<String, usize>) -> bool {
        self.assigned.is_some() && self.joined_topics != *now
    }

    /// A logged batch to re-run, once.
    pub fn take_replay(&mut self) -> Option<PlannedBatch> {
        self.replay.take()
    }

    /// The fetch of a logged batch re-run: its non-empty ranges, except those of topics
    /// re-created since (their records went with the old topic: reported lost, never read at
    /// the old offsets in the new log). `id_of` gives each topic's id in the cluster now
    /// (`None`: not known).
    pub fn replay_plan(
        &mut self,
        now: Duration,
        batch: PlannedBatch,
        id_of: impl Fn(&str) -> Option<[u8; 16]>,
    ) -> Result<FetchPlan, EngineError> {
        let PlannedBatch {
            id,
            ranges,
            moved_back,
            ..
        } = batch;
        let mut want: Vec<OffsetRange> = ranges.iter().filter(|r| !r.is_empty()).cloned().collect();
        let mut lost = Vec::new();
        let topics: BTreeSet<String> = want.iter().map(|r| r.topic.to_string()).collect();
        for t in topics {
            let Some(cluster_id) = id_of(&t) else {
                continue;
            };
            if !self.check_topic_id(&t, cluster_id)? {
                continue;
            }
            for r in want.iter().filter(|r| r.topic == t) {
                lost.push(LostRange {
                    topic: t.clone(),
                    partition: r.partition,
                    from: r.from,
                    until: r.until,
                    reason: DataLossReason::TopicRecreated,
                });
            }
            want.retain(|r| r.topic != t);
        }
        Ok(FetchPlan {
            batch_id: id,
            ranges,
            want,
            // Exactly its ranges: chunked, in as many chunks as memory needs.
            fit: self.cfg.chunked,
            lost,
            moved_back,
            planned_at: now,
            replay: true,
        })
    }

    /// A topic whose id changed was deleted and re-created: never read its new log at the old
    /// positions. `failOnDataLoss` (the default) fails; otherwise its partitions start again
    /// at the new log's start (as new partitions) and the next batch reports them as lost.
    /// True when the topic was re-created (and `failOnDataLoss=false` moved its partitions
    /// to the new log's start).
    pub fn check_topic_id(&mut self, topic: &str, id: [u8; 16]) -> Result<bool, EngineError> {
        // The steady state (the id seen before) allocates nothing.
        let previous = match self.topic_ids.get(topic) {
            Some(&previous) if previous == id => return Ok(false),
            Some(&previous) => previous,
            None => id,
        };
        if previous == id || previous == [0; 16] || id == [0; 16] {
            self.topic_ids.insert(topic.to_owned(), id);
            return Ok(false);
        }
        if self.cfg.data_loss == DataLossPolicy::Fail {
            let hex = |b: [u8; 16]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            return Err(ErrorKind::TopicRecreated {
                topic: topic.to_owned(),
                previous: hex(previous),
                now: hex(id),
            }
            .into());
        }
        self.topic_ids.insert(topic.to_owned(), id);
        let old: Vec<(TopicPartition, i64)> = self
            .planner
            .positions()
            .iter()
            .filter(|(tp, _)| tp.topic == topic)
            .map(|(tp, p)| (tp.clone(), *p))
            .collect();
        for (tp, pos) in old {
            // Offset 0 is the start of every new log (a later data-loss check reports any
            // records already removed from it).
            self.planner.set_position(tp.clone(), 0);
            self.pending_lost.push(LostRange {
                topic: tp.topic.into(),
                partition: tp.partition,
                from: pos,
                until: pos,
                reason: DataLossReason::TopicRecreated,
            });
        }
        Ok(true)
    }

    /// `e` is "unknown topic" for a topic this stream has read before (deleted, maybe about
    /// to be re-created: waited for, as the Java consumer keeps polling a subscribed topic
    /// that is gone).
    pub fn was_known(&self, e: &EngineError) -> bool {
        let ErrorKind::UnknownTopic { topic } = e.root().kind() else {
            return false;
        };
        self.topic_ids.contains_key(topic)
    }

    /// Keeps the ends the Fetch answers of `data` reported: for partitions with more to read
    /// past their range in `observed`, for partitions the batch caught up in `caught_up`.
    pub fn observe(&mut self, now: Duration, data: &[impl ReadRange]) {
        let batch = self.planner.next_batch_id();
        for d in data {
            let tp = d.range().topic_partition();
            match d.observed() {
                Some(o) if o.end > d.range().until => {
                    self.caught_up.remove(&tp);
                    self.observed.insert(tp, (o, now));
                }
                Some(ends) => {
                    self.observed.remove(&tp);
                    self.caught_up.insert(
                        tp,
                        CaughtUp {
                            ends,
                            at: now,
                            batch,
                        },
                    );
                }
                // No answer for it (a range read from a carried batch): what was seen before
                // keeps its own age.
                None => {
                    self.caught_up.remove(&tp);
                }
            }
        }
    }

    /// Whether the first snapshot of a bounded stream is still to resolve its ends (its ends
    /// are then asked of the brokers, never taken from Fetch answers).
    pub fn ending_unresolved(&self) -> bool {
        self.cfg.ending.is_some() && self.until.is_none()
    }

    /// The partitions of `parts` whose ends recent Fetch answers give, so that they need no
    /// ListOffsets round: those seen with more to read within `ends.max.age.ms` (the end is at
    /// most that old: a batch planned from it is smaller at worst, never wrong), and those
    /// seen caught up — while every partition is, or within one batch of the answer.
    pub fn known_ends(
        &self,
        now: Duration,
        parts: &[TopicPartition],
    ) -> BTreeMap<TopicPartition, ObservedEnds> {
        if self.ending_unresolved() {
            return BTreeMap::new();
        }
        let young = |at: Duration| now.saturating_sub(at) < self.cfg.ends_max_age;
        // Built by inserts (a few partitions: one node), not collected (a sorted copy first).
        let mut fresh: BTreeMap<TopicPartition, ObservedEnds> = BTreeMap::new();
        for tp in parts {
            if let Some((o, _)) = self.observed.get(tp).filter(|(_, at)| young(*at)) {
                fresh.insert(tp.clone(), *o);
            }
        }
        // When every partition is caught up, the planner waits and the stream long-polls the
        // leaders at once (a Fetch the broker answers as soon as a record is appended), where
        // ListOffsets for earliest and latest would be two more round trips between a
        // record's append and its delivery, at every batch of a stream that keeps up. While
        // others have data, only answers from the last batch or the long-poll before it plan.
        if self.cfg.max_wait.is_zero() {
            return fresh;
        }
        let pos = self.planner.positions();
        let caught = |tp: &TopicPartition| {
            let c = *self.caught_up.get(tp)?;
            let still = pos.get(tp).is_some_and(|p| c.ends.end <= *p);
            (still && young(c.at)).then_some(c)
        };
        let idle = fresh
            .iter()
            .all(|(tp, o)| pos.get(tp).is_some_and(|p| o.end <= *p))
            && parts
                .iter()
                .all(|tp| fresh.contains_key(tp) || caught(tp).is_some());
        let next = self.planner.next_batch_id();
        for tp in parts {
            if let Some(c) = caught(tp) {
                if idle || next.saturating_sub(c.batch) <= 1 {
                    fresh.insert(tp.clone(), c.ends);
                }
            }
        }
        fresh
    }

    /// A ListOffsets round answered `starts` and `ends` (each partition in both): what Fetch
    /// answers showed of them is older than what the plan uses (dropped: a later plan would
    /// take it for the log's end moving back). A partition answered with its end at the
    /// planner's position is caught up as of now, as after a batch that read to its end: the
    /// next snapshot plans from that without asking again, and when every partition is caught
    /// up the stream long-polls instead (asking every partition it did not just read at every
    /// batch, as a trickle on several partitions did, cost two round trips per record).
    pub fn listed_ends(
        &mut self,
        now: Duration,
        starts: &[PartitionOffset],
        ends: &[PartitionOffset],
    ) {
        let batch = self.planner.next_batch_id();
        for e in ends {
            let tp = TopicPartition::new(e.topic.clone(), e.partition);
            self.observed.remove(&tp);
            // Both answers are sorted by topic, then partition.
            let start = starts
                .binary_search_by(|s| {
                    (s.topic.as_str(), s.partition).cmp(&(e.topic.as_str(), e.partition))
                })
                .ok()
                .map(|i| &starts[i]);
            let at_end = self
                .planner
                .positions()
                .get(&tp)
                .is_some_and(|p| e.offset <= *p);
            match start {
                Some(s) if at_end && s.offset >= 0 && s.offset <= e.offset => {
                    let ends = ObservedEnds {
                        log_start: s.offset,
                        end: e.offset,
                    };
                    self.caught_up.insert(
                        tp,
                        CaughtUp {
                            ends,
                            at: now,
                            batch,
                        },
                    );
                }
                _ => {
                    self.caught_up.remove(&tp);
                }
            }
        }
    }

    /// Partitions whose start is asked by timestamp (a start policy by time).
    pub fn timestamp_lookups(&self, parts: &[TopicPartition]) -> Vec<(TopicPartition, i64)> {
        self.planner.timestamp_lookups(parts.iter())
    }

    /// The snapshot the planner plans from: each partition's log start and end (ListOffsets
    /// answers and Fetch answers merged by the caller, in any order), with the timestamp
    /// lookups' answers. The first snapshot of a bounded stream resolves its ends from
    /// `latest` (and, for an ending by time, `at_time`); later ends are held to them.
    pub fn snapshot(
        &mut self,
        mut starts: Vec<PartitionOffset>,
        mut ends: Vec<PartitionOffset>,
        known: BTreeMap<TopicPartition, ObservedEnds>,
        mut found: BTreeMap<TopicPartition, TimestampLookup>,
        at_time: Option<Vec<PartitionOffset>>,
    ) -> Result<Vec<PartitionSnapshot>, EngineError> {
        let order = |a: &PartitionOffset, b: &PartitionOffset| {
            (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition))
        };
        starts.sort_unstable_by(order);
        ends.sort_unstable_by(order);
        if self.until.is_none() {
            if let Some(ending) = &self.cfg.ending {
                self.until = Some(resolve_until(ending, &ends, at_time.as_deref())?);
            }
        }
        let mut snap = Vec::with_capacity(starts.len() + known.len());
        for s in &starts {
            let tp = TopicPartition::new(self.topics.get(&s.topic), s.partition);
            // Each start is paired with its own partition's end (the lists are sorted alike;
            // a partition missing from the ends is the broker's fault, never another
            // partition's end).
            let end = ends
                .binary_search_by(|e| {
                    (e.topic.as_str(), e.partition).cmp(&(s.topic.as_str(), s.partition))
                })
                .map_or(-1, |i| ends[i].offset);
            snap.push(self.partition_snapshot(tp, s.offset, end, &mut found)?);
        }
        for (tp, o) in known {
            snap.push(self.partition_snapshot(tp, o.log_start, o.end, &mut found)?);
        }
        snap.sort_unstable_by(|a, b| {
            (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition))
        });
        Ok(snap)
    }

    /// One partition's snapshot: its log `[log_start, end)` checked, its end held to the
    /// stream's until, with its timestamp lookup's answer.
    fn partition_snapshot(
        &self,
        tp: TopicPartition,
        log_start: i64,
        mut end: i64,
        found: &mut BTreeMap<TopicPartition, TimestampLookup>,
    ) -> Result<PartitionSnapshot, EngineError> {
        // The end is asked after the start, and a log start never passes the end at any
        // moment, so these two can only disagree when the broker's offsets are wrong.
        // Offsets that make no sense (a negative log start, an end below it) are the
        // broker's fault, reported as such: never read as "nothing to read".
        if log_start < 0 || end < log_start {
            return Err(PlanError::InvalidSnapshot {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                log_start,
                end,
            }
            .into());
        }
        if let Some(u) = &self.until {
            // Partitions that appeared after the start have nothing to read in this run.
            end = end.min(u.get(&tp).copied().unwrap_or(log_start));
        }
        let mut ps = PartitionSnapshot::new(
            tp.topic.clone(),
            tp.partition,
            log_start,
            end.max(log_start),
        );
        if let Some(l) = found.remove(&tp) {
            ps = ps.with_timestamp_lookup(l);
        }
        Ok(ps)
    }

    /// The shared name of topic `name` ([`Topics`]): keys built from it cost no allocation.
    pub fn topic(&mut self, name: &str) -> Topic {
        self.topics.get(name)
    }

    /// Whether a snapshot shows a partition's position outside its log (below the log start
    /// or past the end): what the planner would report as data loss. A topic deleted and
    /// re-created under the same name shows that before the cached metadata shows its new
    /// id, so the driver asks the metadata again before anything is lost.
    pub fn outside_the_log(&self, snap: &[PartitionSnapshot]) -> bool {
        let pos = self.planner.positions();
        snap.iter().any(|s| {
            pos.get(&TopicPartition::new(s.topic.clone(), s.partition))
                .is_some_and(|p| *p < s.log_start || *p > s.end)
        })
    }

    /// The positions to check for truncation (KIP-320) before a plan: every partition of the
    /// snapshot the planner has a position for.
    pub fn positions_in(&self, snap: &[PartitionSnapshot]) -> Vec<(TopicPartition, i64)> {
        let pos = self.planner.positions();
        let mut out = Vec::with_capacity(snap.len());
        out.extend(snap.iter().filter_map(|s| {
            let tp = TopicPartition::new(s.topic.clone(), s.partition);
            let p = *pos.get(&tp)?;
            Some((tp, p))
        }));
        out
    }

    /// Truncations found before a plan (KIP-320). `failOnDataLoss=true` (the default) fails,
    /// naming the partition, the exact lost range and the leader; otherwise each is reported
    /// with the next batch, and the partition goes on at the truncation point — by widening
    /// the next fetch back to it when the new log reaches the position (the plan and the
    /// store keep the old position), or by moving the planner's position back when the new
    /// log ends below it (the planner would otherwise see a position past the end and
    /// restart from the log start).
    pub fn on_truncations(
        &mut self,
        found: Vec<Truncation>,
        snap: &[PartitionSnapshot],
    ) -> Result<(), EngineError> {
        for t in found {
            if self.cfg.data_loss == DataLossPolicy::Fail {
                return Err(t.to_error());
            }
            tracing::warn!(
                "{} (failOnDataLoss=false: {}-{} goes on at {})",
                t.to_error(),
                t.partition.topic,
                t.partition.partition,
                t.lost_from
            );
            let end = snap
                .iter()
                .find(|s| s.topic == t.partition.topic && s.partition == t.partition.partition)
                .map(|s| s.end);
            if end.is_some_and(|end| end < t.lost_until) {
                self.planner.set_position(t.partition.clone(), t.lost_from);
            } else {
                self.rewinds.insert(t.partition.clone(), t.lost_from);
            }
            self.pending_lost.push(t.lost());
        }
        Ok(())
    }

    /// Plans the next batch from `snap`: the ranges to fetch, or why not yet.
    ///
    /// The fetch reads the plan's non-empty ranges, except: a range whose start retention
    /// removed (`failOnDataLoss=false`) keeps its start where the partition stood, so that an
    /// offset store's compare-and-set on `from` (the stored position) holds, the lost offsets
    /// are inside the committed range, and a re-run of the logged plan finds the same loss;
    /// a truncation found before the plan reads again from where the new leader's log stops
    /// agreeing with what was read. A fresh plan is read up to what fits in memory (`fit`),
    /// unless a range reads below the plan's start.
    pub fn plan(&mut self, now: Duration, snap: &[PartitionSnapshot]) -> Result<Step, EngineError> {
        let mut plan = match self.planner.plan(now, snap)? {
            PlanOutcome::Batch(plan) => plan,
            PlanOutcome::Wait(w) => return Ok(Step::Wait(w)),
        };
        let mut want: Vec<OffsetRange> = plan
            .ranges
            .iter()
            .filter(|r| !r.is_empty())
            .cloned()
            .collect();
        for l in &plan.lost {
            if l.reason != DataLossReason::BelowLogStart {
                continue;
            }
            if let Some(r) = plan.ranges.iter_mut().find(|r| {
                r.topic == l.topic
                    && r.partition == l.partition
                    && r.from == l.until
                    && l.from < r.from
            }) {
                r.from = l.from;
            }
        }
        for (tp, from) in std::mem::take(&mut self.rewinds) {
            let same = |r: &&mut OffsetRange| r.topic == tp.topic && r.partition == tp.partition;
            if let Some(w) = want.iter_mut().find(same) {
                w.from = w.from.min(from);
            } else if let Some(p) = plan
                .ranges
                .iter()
                .find(|r| r.topic == tp.topic && r.partition == tp.partition)
                .filter(|r| from < r.until)
            {
                want.push(OffsetRange::new(tp.topic, tp.partition, from, p.until));
            }
        }
        let fit = want.iter().all(|w| {
            plan.ranges
                .iter()
                .find(|r| r.topic == w.topic && r.partition == w.partition)
                .is_none_or(|r| w.from >= r.from)
        });
        let mut lost = std::mem::take(&mut self.pending_lost);
        lost.append(&mut plan.lost);
        Ok(Step::Fetch(FetchPlan {
            batch_id: plan.batch_id,
            ranges: plan.ranges,
            want,
            fit,
            lost,
            moved_back: plan.moved_back,
            planned_at: plan.planned_at,
            replay: false,
        }))
    }

    /// A fetch of `fetch.want` failed with `e`. Under `failOnDataLoss=false`, data lost
    /// between the plan and the fetch goes by the policy and the fetch is tried again (`Ok`):
    /// a range truncated under records an earlier batch handed out widens back to where the
    /// new leader's log stops agreeing (KIP-320; the fetch is then exact, never ended early);
    /// one whose start retention removed goes on from the log start. Anything else is the
    /// error back. Each retry moves a range's start (back to a truncation point, or forward
    /// past lost offsets): finite.
    pub fn on_fetch_loss(
        &mut self,
        fetch: &mut FetchPlan,
        e: EngineError,
    ) -> Result<(), EngineError> {
        let (
            DataLossPolicy::Earliest,
            ErrorKind::Plan(PlanError::DataLoss {
                topic,
                partition,
                lost_from,
                lost_until,
                reason,
            }),
        ) = (self.cfg.data_loss, e.root().kind())
        else {
            return Err(e);
        };
        let Some(r) = fetch
            .want
            .iter_mut()
            .find(|r| r.topic == *topic && r.partition == *partition)
        else {
            return Err(e);
        };
        let lost = if let DataLossReason::Truncated { .. } = reason {
            if *lost_from >= r.from || *lost_from < 0 {
                return Err(e);
            }
            // A later chunk of a chunked batch (its range already read from the plan's start
            // up to `r.from`): the records below `r.from` were handed out, from the log as it
            // was. Reading from the truncation point would hand [lost_from, r.from) out a
            // second time in the one batch (the old leader's and the new one's), and commit
            // both. The error stands: a restarted stream re-runs the logged plan from its
            // start, where the truncation is read as any other.
            let chunk_read_past = fetch
                .ranges
                .iter()
                .any(|p| p.topic == *topic && p.partition == *partition && r.from > p.from);
            if chunk_read_past {
                return Err(e);
            }
            tracing::warn!(
                "{e} (failOnDataLoss=false: {topic}-{partition} goes on at {lost_from})"
            );
            r.from = *lost_from;
            fetch.fit = false;
            (*lost_from, *lost_until)
        } else {
            // Retention removed records of the range: the whole range up to the log start is
            // lost (a failed fetch keeps none of what it read).
            let until = (*lost_until).min(r.until);
            if until <= r.from {
                return Err(e);
            }
            let lost = (r.from.min(*lost_from), until);
            r.from = until;
            lost
        };
        fetch.lost.push(LostRange {
            topic: topic.clone(),
            partition: *partition,
            from: lost.0,
            until: lost.1,
            reason: *reason,
        });
        fetch.want.retain(|r| !r.is_empty());
        self.forget();
        Ok(())
    }

    /// The fetch of `fetch` read `data`. A batch read up to what fitted has its ranges ended
    /// where the reading stopped, and the planner is told (its positions and the rate limits'
    /// pacing follow what was read), unless the stream is chunked: then the batch keeps its
    /// ranges and what is left of them is the [`Finished::rest`] the next chunks read. The
    /// answers' ends are kept for the next snapshot; the next batch is sized by the data's
    /// bytes per offset (no rate limit set) and reads at most as many partitions as a quarter
    /// of the budget holds stored batches.
    pub fn finish(
        &mut self,
        now: Duration,
        mut fetch: FetchPlan,
        data: &[impl ReadRange],
        sizing: Sizing,
    ) -> Finished {
        let mut rest = Vec::new();
        if fetch.fit && self.cfg.chunked {
            rest = rest_of(&fetch.want, data);
        } else if fetch.fit {
            let mut early = false;
            for d in data {
                let read = d.range();
                let Some(r) = fetch
                    .ranges
                    .iter_mut()
                    .find(|r| r.partition == read.partition && r.topic == read.topic)
                else {
                    continue;
                };
                if read.until < r.until {
                    r.until = read.until.max(r.from);
                    early = true;
                }
            }
            if early {
                self.planner.end_early(&fetch.ranges);
            }
        }
        self.observe(now, data);
        if !fetch.replay {
            let offsets: u64 = data.iter().map(|d| d.range().len()).sum();
            if self.cfg.adaptive && offsets > 0 {
                // By the data's bytes per offset, not the bytes this batch held: a short range
                // holds a whole stored batch, and sizing by what it held made the next ranges
                // shorter still, down to a few records of a stored batch per partition, each
                // fetched again and again (issue 32).
                let bytes: usize = data.iter().map(ReadRange::bytes).sum();
                let per_offset = sizing
                    .bytes_per_offset
                    .unwrap_or(bytes as f64 / offsets as f64);
                let cap = adaptive_offsets(self.cfg.chunked, sizing.budget, per_offset);
                self.planner.set_max_offsets_per_trigger(Some(cap));
            }
            let partitions = if self.cfg.chunked {
                chunked_partition_cap(
                    sizing.budget,
                    self.planner.config().rate.max_offsets_per_trigger,
                    sizing.largest_batch,
                    sizing.bytes_per_offset,
                )
            } else {
                Some(partition_cap(sizing.budget, sizing.largest_batch))
            };
            self.planner.set_max_partitions_per_batch(partitions);
        }
        let topic_ids = self.topic_ids_of(&fetch.ranges);
        Finished {
            batch_id: fetch.batch_id,
            ranges: fetch.ranges,
            rest,
            lost: fetch.lost,
            moved_back: fetch.moved_back,
            planned_at: fetch.planned_at,
            replay: fetch.replay,
            topic_ids,
        }
    }

    /// Chunked: a chunk of a batch read `data` of `want` (what was left of the batch before
    /// it). Keeps the answers' ends, and gives what is left after it: the next chunk's
    /// `want`, empty once the batch is whole.
    pub fn chunk_read(
        &mut self,
        now: Duration,
        want: &[OffsetRange],
        data: &[impl ReadRange],
    ) -> Vec<OffsetRange> {
        self.observe(now, data);
        rest_of(want, data)
    }

    /// After a batch: each partition of the snapshot it was planned from, with its position
    /// now and the offsets left to read (the metrics' figures); their sum is [`Self::lag`].
    pub fn record_lag<'a>(&mut self, snap: &'a [PartitionSnapshot]) -> Vec<PartitionLag<'a>> {
        let positions = self.planner.positions();
        let lags: Vec<PartitionLag<'a>> = snap
            .iter()
            .map(|s| {
                let position = positions
                    .get(&TopicPartition::new(s.topic.clone(), s.partition))
                    .copied()
                    .unwrap_or(s.log_start);
                PartitionLag {
                    snapshot: s,
                    position,
                    lag: (s.end - position).max(0) as u64,
                }
            })
            .collect();
        self.lag = Some(lags.iter().map(|l| l.lag).fold(0, u64::saturating_add));
        lags
    }

    /// KIP-516: the ids of the ranges' topics, as the stream last saw them (none for a
    /// broker without topic ids).
    fn topic_ids_of(&self, ranges: &[OffsetRange]) -> BTreeMap<String, [u8; 16]> {
        let mut out = BTreeMap::new();
        for r in ranges {
            if out.contains_key(r.topic.as_str()) {
                continue;
            }
            if let Some(id) = self
                .topic_ids
                .get(r.topic.as_str())
                .filter(|id| **id != [0; 16])
            {
                out.insert(r.topic.to_string(), *id);
            }
        }
        out
    }

    /// The partitions of `snap` to long-poll: those the planner has a position for that is
    /// at the end (nothing to read).
    pub fn long_poll_asks(&self, snap: &[PartitionSnapshot]) -> Vec<(TopicPartition, i64)> {
        if self.cfg.max_wait.is_zero() {
            return Vec::new();
        }
        let pos = self.planner.positions();
        snap.iter()
            .filter_map(|s| {
                let tp = TopicPartition::new(s.topic.clone(), s.partition);
                let p = *pos.get(&tp)?;
                (p >= s.end).then_some((tp, p))
            })
            .collect()
    }

    /// A long-poll of `asked` was answered after `waited` with `ends`. An answer at once
    /// with nothing new comes from a broker that does not hold fetches, or one that answered
    /// because something else changed (Kafka answers a fetch session's request at once when
    /// the ends it last sent that session moved, which with several sessions per broker
    /// happens while records arrive). The first few such answers in a row poll again at once
    /// (the next one is held); after that the stream polls at intervals rather than spin:
    /// false. True when the answer's ends plan the next batch.
    pub fn on_long_poll(
        &mut self,
        now: Duration,
        asked: &[(TopicPartition, i64)],
        waited: Duration,
        ends: Vec<(TopicPartition, ObservedEnds)>,
    ) -> bool {
        let asked_at: BTreeMap<&TopicPartition, i64> =
            asked.iter().map(|(tp, p)| (tp, *p)).collect();
        let nothing_new =
            |tp: &TopicPartition, e: &ObservedEnds| asked_at.get(tp).is_some_and(|p| e.end <= *p);
        let quick_and_empty =
            waited * 2 < self.cfg.max_wait && ends.iter().all(|(tp, e)| nothing_new(tp, e));
        if quick_and_empty {
            self.quick_polls += 1;
            if self.quick_polls > QUICK_POLLS {
                self.interval_polls += 1;
                return false;
            }
        }
        if ends.is_empty() {
            return false;
        }
        if !quick_and_empty {
            self.quick_polls = 0;
        }
        let batch = self.planner.next_batch_id();
        for (tp, e) in ends {
            // Nothing new there yet: caught up, as after a batch (a record appended while
            // other partitions keep the stream busy is asked for within a batch).
            if nothing_new(&tp, &e) {
                self.observed.remove(&tp);
                self.caught_up.insert(
                    tp,
                    CaughtUp {
                        ends: e,
                        at: now,
                        batch,
                    },
                );
            } else {
                self.caught_up.remove(&tp);
                self.observed.insert(tp, (e, now));
            }
        }
        true
    }

    /// True once every partition of a bounded stream reached its end.
    pub fn reached_until(&self) -> bool {
        let Some(until) = &self.until else {
            return false;
        };
        let pos = self.planner.positions();
        until
            .iter()
            .all(|(tp, end)| pos.get(tp).is_some_and(|p| p >= end))
    }

    /// Group mode: a new assignment. The planner starts again from the store's positions for
    /// exactly these partitions (the others were given up with the old generation). Returns
    /// the positions with a committed leader epoch, for the fetcher to check with their
    /// leaders before the first plan (KIP-320).
    pub fn reassign(
        &mut self,
        partitions: BTreeSet<TopicPartition>,
        committed: &Committed,
        topics: BTreeMap<String, usize>,
    ) -> Result<Vec<(TopicPartition, i64, i32)>, EngineError> {
        let positions: BTreeMap<TopicPartition, i64> = committed
            .positions
            .iter()
            .filter(|(tp, _)| partitions.contains(*tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let next_id = committed.next_batch_id().max(self.planner.next_batch_id());
        let epochs = positions
            .iter()
            .filter_map(|(tp, pos)| Some((tp.clone(), *pos, *committed.epochs.get(tp)?)))
            .collect();
        // KIP-516: positions committed under another id of their topic (re-created since)
        // are found by the next snapshot's id check, as in a resumed stream.
        for (topic, id) in &committed.topic_ids {
            if *id != [0; 16] && positions.keys().any(|tp| tp.topic == *topic) {
                self.topic_ids.insert(topic.clone(), *id);
            }
        }
        self.planner = Planner::resume(self.cfg.planner.clone(), next_id, positions)
            .map_err(EngineError::from)?;
        self.forget();
        self.assigned = Some(partitions);
        self.joined_topics = topics;
        Ok(epochs)
    }
}

/// What is left of `want` after reading `data`: each range the reading ended before its
/// `until`, from where it ended. A fetch reads at least one stored batch when it holds
/// nothing (only a read that already holds data is cut), so every chunk moves some range on.
fn rest_of(want: &[OffsetRange], data: &[impl ReadRange]) -> Vec<OffsetRange> {
    data.iter()
        .filter_map(|d| {
            let read = d.range();
            let w = want
                .iter()
                .find(|w| w.partition == read.partition && w.topic == read.topic)?;
            (read.until < w.until).then(|| {
                OffsetRange::new(
                    w.topic.clone(),
                    w.partition,
                    read.until.max(w.from),
                    w.until,
                )
            })
        })
        .collect()
}

/// A bounded stream's ends, from the log ends at its start.
fn resolve_until(
    ending: &Ending,
    latest: &[PartitionOffset],
    at_time: Option<&[PartitionOffset]>,
) -> Result<BTreeMap<TopicPartition, i64>, EngineError> {
    let latest: BTreeMap<TopicPartition, i64> = latest
        .iter()
        .map(|e| (TopicPartition::new(e.topic.clone(), e.partition), e.offset))
        .collect();
    Ok(match ending {
        Ending::Latest => latest,
        Ending::Offsets(wanted) => {
            let mut m = BTreeMap::new();
            for (tp, end) in latest {
                match wanted.get(&tp) {
                    Some(&o) if o >= 0 => m.insert(tp, o),
                    // -1: the latest offset, as in Spark's JSON.
                    Some(_) => m.insert(tp, end),
                    None => {
                        return Err(ErrorKind::Config(format!(
                            "endingOffsets names no offset for {}-{} (give every partition \
                             read, -1 for latest)",
                            tp.topic, tp.partition
                        ))
                        .into())
                    }
                };
            }
            m
        }
        Ending::Timestamp(_) => {
            let found: BTreeMap<TopicPartition, i64> = at_time
                .into_iter()
                .flatten()
                .map(|o| (TopicPartition::new(o.topic.clone(), o.partition), o.offset))
                .collect();
            latest
                .into_iter()
                .map(|(tp, end)| {
                    // No record that recent: everything up to the end seen now.
                    let at = found.get(&tp).copied().filter(|o| *o >= 0).unwrap_or(end);
                    (tp, at.min(end))
                })
                .collect()
        }
    })
}
