//! The fetcher's state machine, without I/O: which requests to send next, and what a response
//! means. Like the planner, it is driven from outside — by [`super::fetch_ranges_within`],
//! which owns the sockets, the tasks, the memory-budget permits and the backoff — and unit
//! tests drive it with hand-made metadata and responses.
//!
//! A round: [`FetchSession::next_requests`] groups the open ranges by leader and sizes each
//! request (partition bytes from what earlier chunks taught, the budget's room shared in
//! proportion); the driver sends them and hands each answer to
//! [`FetchSession::on_response`] (or a failure to [`FetchSession::on_error`]); then
//! [`FetchSession::end_round`] says whether to go again at once, or after a backoff and a
//! metadata refresh (and why). A round that moved no position and changed nothing in how the
//! next one is asked is never repeated at once: a broker that keeps answering without data
//! (a partition left out of the answer, the same old batch, a batch cut short) is retried
//! with backoff until `default.api.timeout.ms`, then reported.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kdirect_proto::api::fetch::{EpochEnd, FetchParams, FetchView, PartitionFetch, TopicFetch};
use kdirect_proto::message::Api;
use kdirect_proto::{ErrorCode, IsolationLevel};
use tokio::sync::OwnedSemaphorePermit;

use super::epoch::{judge_epoch_end, EpochVerdict};
use super::{Chunk, FetchConfig, FetchState, Fetcher, ObservedEnds, RangeData, ScratchPool};
use crate::cluster::ClusterView;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::plan::{OffsetRange, Topic};
use crate::record::{DecodeOptions, RecordBatch};

/// One Fetch request to one leader (or to the replica a leader pointed at, KIP-392), as the
/// session planned it.
#[derive(Debug, Clone)]
pub struct LeaderRequest {
    /// The node asked: the partitions' leader, or their preferred read replica.
    pub leader: i32,
    /// `client.rack`, sent in the request.
    pub rack: String,
    /// Bytes of the memory budget to reserve before sending; the response keeps what it uses.
    pub reserve: usize,
    /// Request parameters; `max_bytes` is fitted to `reserve`.
    pub params: FetchParams,
    /// The partitions asked, by topic.
    pub topics: Vec<TopicFetch>,
    /// Topic ids to names, for decoding the response (Fetch v13+ names topics by id).
    pub names: HashMap<[u8; 16], Arc<str>>,
    /// The ranges asked: index into the session's ranges, and the bytes asked for each.
    items: Vec<(usize, usize)>,
}

impl LeaderRequest {
    /// Whether every topic has an id (Fetch v13+ may be used).
    pub fn has_topic_ids(&self) -> bool {
        self.topics.iter().all(|t| t.id != [0; 16])
    }
}

/// The state of reading a set of ranges whole; see the module docs.
#[derive(Debug)]
pub struct FetchSession {
    ranges: Vec<OffsetRange>,
    /// The next offset to fetch per range.
    pos: Vec<i64>,
    /// Per range, what the session knows of it besides its position (one allocation for
    /// all of them).
    slots: Vec<Slot>,
    out: Vec<RangeData>,
    cfg: FetchConfig,
    isolation: IsolationLevel,
    /// The stream's decompression buffers (walks take one and give it back).
    scratch: Arc<ScratchPool>,
    budget_total: usize,
    /// Bytes of fetched data the session holds.
    held: usize,
    /// Why the round must be retried after a backoff, if it must.
    retry: Option<Error>,
    /// Whether this round moved a position or changed how the next one asks.
    changed: bool,
    /// Whether the ranges may end early to fit the session's room ([`Self::fit_to_room`]).
    fit: bool,
    /// Whether they did: the open ranges were cut at their positions.
    cut: bool,
}

/// What a [`FetchSession`] knows of one range besides its position.
#[derive(Debug)]
struct Slot {
    /// Came back empty while asked for less than `max.partition.fetch.bytes` (a
    /// batch larger than any seen so far): asked for the full size from then on.
    uncapped: bool,
    /// Its partition got no whole batch because another partition's data came first
    /// in the answer: a broker returns a batch larger than the limits only for the first
    /// partition with data (KIP-74), so these go first in the next round's requests.
    starved: bool,
    /// The broker it was last asked of.
    asked_of: Option<BrokerName>,
    /// KIP-320: per range, the `partition_leader_epoch` of the last batch read before its
    /// position (-1: unknown), sent as the next fetch's `last_fetched_epoch`; what it was at
    /// the range's `from`; the leader epoch the range was last asked under; and how many
    /// diverging-epoch answers it had (a bound against a broker that keeps sending them).
    last_epoch: i32,
    start_epoch: i32,
    asked_epoch: i32,
    divergences: u8,
    /// Per range, what it read past `until` (see [`Leftover`]): kept for the partition's
    /// next range (see [`super::Carried`]).
    straddling: Option<Leftover>,
    /// A sub-range that ends before the range it was cut from: where it ends is not where
    /// the partition's next fetch starts.
    inner: bool,
}

/// What a range read past its `until`: the stored batch it ended inside of (its last batch
/// reaches past `until`), or the rest of what was carried in when the range lay wholly inside
/// that.
#[derive(Debug)]
struct Leftover {
    batches: Vec<RecordBatch>,
    /// Where the read that brought them stopped (see [`super::Carried::until`]).
    until: i64,
    broker: BrokerName,
    /// For data carried in already: its share of the budget (shared with the range's chunk),
    /// so it is carried on without a copy or a new reservation.
    kept: Option<Arc<OwnedSemaphorePermit>>,
    /// For a batch of a response just read: the response's share of the budget (the whole
    /// frame's bytes), for carrying the batch as a view of the frame instead of a copy.
    frame: Option<Arc<OwnedSemaphorePermit>>,
}

/// What a range read past its `until`, as [`FetchSession::take_straddling`] gives it.
#[derive(Debug)]
pub(super) struct Straddling {
    pub(super) topic: String,
    pub(super) partition: i32,
    /// The range's `until`: where the next range starts to use it.
    pub(super) from: i64,
    /// Where the read that brought the batches stopped.
    pub(super) until: i64,
    pub(super) batches: Vec<RecordBatch>,
    pub(super) broker: BrokerName,
    /// The leader epoch the range was last asked under.
    pub(super) leader_epoch: i32,
    /// For data carried in already: its share of the budget (the batches are in buffers of
    /// their own, or in a long-poll's answer, already).
    pub(super) kept: Option<Arc<OwnedSemaphorePermit>>,
    /// For a batch of a response just read: the response's share of the budget; the batch
    /// can be carried as a view of the response's frame, which keeps the whole frame.
    pub(super) frame: Option<Arc<OwnedSemaphorePermit>>,
}

/// Diverging-epoch answers one range may have in a session before the session stops moving
/// its position and retries with backoff (a consistent leader sends at most one per range
/// and leader change).
const MAX_DIVERGENCES: u8 = 4;

/// What the driver does after a round.
#[derive(Debug)]
pub enum RoundEnd {
    /// Every range is whole.
    Done,
    /// Send the next round now.
    Continue,
    /// Back off, refresh the metadata, then send the next round; the error is what to report
    /// if the retry deadline passes.
    Retry(Error),
}

impl FetchSession {
    /// A session for `ranges` (disjoint per partition; empty ones are returned with no
    /// chunks), sharing what `budget` learned about the data.
    pub fn new(ranges: &[OffsetRange], cfg: &FetchConfig, fetcher: &Fetcher) -> Self {
        let isolation = cfg.params.isolation;
        // A range that starts where the last fetch of its partition ended knows the epoch of
        // the batch before it.
        let slots = ranges
            .iter()
            .map(|r| {
                let start_epoch = fetcher
                    .state()
                    .last_fetched(&r.topic, r.partition)
                    .filter(|f| f.position == r.from)
                    .map_or(-1, |f| f.epoch);
                Slot {
                    uncapped: false,
                    starved: false,
                    asked_of: None,
                    last_epoch: start_epoch,
                    start_epoch,
                    asked_epoch: -1,
                    divergences: 0,
                    straddling: None,
                    inner: false,
                }
            })
            .collect();
        FetchSession {
            ranges: ranges.to_vec(),
            pos: ranges.iter().map(|r| r.from).collect(),
            slots,
            out: ranges
                .iter()
                .map(|r| RangeData {
                    range: r.clone(),
                    chunks: Vec::new(),
                    observed: None,
                    max_decompressed: cfg.max_decompressed,
                    scratch: fetcher.scratch.clone(),
                })
                .collect(),
            cfg: cfg.clone(),
            isolation,
            scratch: fetcher.scratch.clone(),
            budget_total: fetcher.total(),
            held: 0,
            retry: None,
            changed: false,
            fit: false,
            cut: false,
        }
    }

    /// Lets the ranges end early, each at a stored batch's end, when the session's room
    /// (the budget, or its share) is full: a freshly planned batch is read up to what fits,
    /// whole stored batches each, instead of failing with [`ErrorKind::BudgetExceeded`] or
    /// being planned in slivers of stored batches (issue 32). The data's
    /// [`RangeData::range`] then names where each range really ends. A logged plan re-run
    /// after a crash must be read exactly and never uses this.
    pub fn fit_to_room(&mut self) {
        self.fit = true;
    }

    /// Whether [`fit_to_room`](Self::fit_to_room) cut any range short.
    pub fn was_cut(&self) -> bool {
        self.cut
    }

    /// Ends every open range at its position: what was read so far is the range
    /// ([`fit_to_room`](Self::fit_to_room)).
    pub(super) fn cut_at_positions(&mut self) {
        for i in 0..self.ranges.len() {
            let (Some(r), Some(&p), Some(out)) =
                (self.ranges.get_mut(i), self.pos.get(i), self.out.get_mut(i))
            else {
                continue;
            };
            if p < r.until {
                r.until = p.max(r.from);
                out.range.until = r.until;
                self.cut = true;
            }
        }
    }

    /// Whether a response of `size` more bytes than reserved should be dropped and the session
    /// cut instead ([`fit_to_room`](Self::fit_to_room)): it holds data already, and the
    /// response would take it past its room.
    pub(super) fn cut_instead_of(&self, extra: usize) -> bool {
        self.fit && self.held > 0 && self.held.saturating_add(extra) > self.budget_total
    }

    /// Starts each range with what was `carried` for its partition (see
    /// [`super::Carried`]), when the range starts where that starts and the partition's
    /// leader epoch and the topic's id in `view` are the ones it was read under; the range's fetching goes on from
    /// where the carried read stopped. A range that the carried data covers is read from it
    /// alone, with no Fetch (its data reports no ends: see [`RangeData::observed`]), and what
    /// is left past its `until` is carried on to the partition's next range. Carried data no
    /// range uses is dropped (its bytes of the budget freed).
    pub(super) fn start_with(
        &mut self,
        mut carried: HashMap<(Topic, i32), super::Carried>,
        view: &ClusterView,
    ) {
        if carried.is_empty() {
            return;
        }
        for i in 0..self.ranges.len() {
            let Some(r) = self.ranges.get(i) else {
                continue;
            };
            if r.is_empty() {
                continue;
            }
            let Some(c) = carried.remove(&(r.topic.clone(), r.partition)) else {
                continue;
            };
            let same_leader = view
                .leader(&r.topic, r.partition)
                .is_ok_and(|(_, epoch)| epoch == c.leader_epoch);
            let same_topic = view.topic(&r.topic).is_ok_and(|t| t.id == c.topic_id);
            if c.from != r.from || !same_leader || !same_topic || c.until <= r.from {
                continue;
            }
            let (mut used, mut rest) = (Vec::new(), Vec::new());
            for b in c.batches {
                let h = b.header();
                if h.next_offset() <= r.from {
                    continue;
                }
                if h.base_offset < r.until {
                    used.push(b.bounded(r.from, r.until));
                }
                if h.next_offset() > r.until {
                    rest.push(b);
                }
            }
            // The epoch of the last batch read before the range's end: of the last one used,
            // or, when the range lies in a gap before the carried batches, of the first batch
            // after it (see `RecordBatchReader::take_past_until`).
            let epoch = used
                .last()
                .or(rest.first())
                .map(|b| b.header().partition_leader_epoch);
            if c.until > r.until && !rest.is_empty() {
                // Whoever drops last of the chunk and the data carried on frees the bytes.
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.straddling = Some(Leftover {
                        batches: rest,
                        until: c.until,
                        broker: c.broker.clone(),
                        kept: Some(c.permit.clone()),
                        frame: None,
                    });
                }
            }
            let bytes: usize = used.iter().map(|b| b.bytes().len()).sum();
            if let (Some(slot), Some(epoch)) = (self.slots.get_mut(i), epoch) {
                slot.last_epoch = epoch;
            }
            if let Some(out) = self.out.get_mut(i) {
                out.chunks.push(Chunk {
                    fetch_offset: r.from,
                    next_offset: c.until.min(r.until),
                    broker: c.broker,
                    batches: used,
                    bytes,
                    _budget: Some(c.permit),
                });
            }
            // Where the range's fetching goes on; a range the carried data covers ends at its
            // `until`, where the partition's next range (and its epoch, KIP-320) starts.
            if let Some(p) = self.pos.get_mut(i) {
                *p = c.until.min(r.until);
            }
            if let Some(slot) = self.slots.get_mut(i) {
                slot.asked_epoch = c.leader_epoch;
            }
            self.held += bytes;
        }
    }

    /// Marks the ranges that are sub-ranges ending before the range they were cut from
    /// (`inner[i]` for range `i`): neither their stored batch at the end nor their last epoch
    /// is kept for the partition's next fetch.
    pub(super) fn mark_inner(&mut self, inner: &[bool]) {
        for (slot, &v) in self.slots.iter_mut().zip(inner) {
            slot.inner = v;
        }
    }

    /// The stored batches the ranges ended inside of, once [`is_done`](Self::is_done).
    pub(super) fn take_straddling(&mut self) -> Vec<Straddling> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let (Some(left), Some(r)) = (slot.straddling.take(), self.ranges.get(i)) else {
                continue;
            };
            if slot.inner {
                continue;
            }
            out.push(Straddling {
                topic: r.topic.to_string(),
                partition: r.partition,
                from: r.until,
                until: left.until,
                batches: left.batches,
                broker: left.broker,
                leader_epoch: slot.asked_epoch,
                kept: left.kept,
                frame: left.frame,
            });
        }
        out
    }

    /// Limits the room this session fills to `share` bytes of the budget (it shares the budget
    /// with other sessions reading at the same time).
    pub fn limit_room(&mut self, share: usize) {
        self.budget_total = self.budget_total.min(share.max(1));
    }

    /// The topics of the ranges, sorted, once each.
    pub fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self.ranges.iter().map(|r| r.topic.to_string()).collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// Whether every range is whole.
    pub fn is_done(&self) -> bool {
        self.open().next().is_none()
    }

    /// Bytes of fetched data the session holds (counted once a response's data is kept).
    pub fn held(&self) -> usize {
        self.held
    }

    /// The next offset to fetch per range.
    pub fn positions(&self) -> &[i64] {
        &self.pos
    }

    fn open(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ranges.len()).filter(|&i| self.pos.get(i) < self.ranges.get(i).map(|r| &r.until))
    }

    /// The bytes to ask range `i` for.
    fn part_bytes(&self, state: &FetchState, i: usize) -> i32 {
        let max = self.cfg.partition_max_bytes;
        if self.slots.get(i).is_none_or(|s| s.uncapped) {
            return max;
        }
        let (Some(r), Some(&p)) = (self.ranges.get(i), self.pos.get(i)) else {
            return max;
        };
        state
            .partition_bytes(r.until - p)
            .map_or(max, |b| max.min(i32::try_from(b).unwrap_or(i32::MAX)))
    }

    /// The session's ranges as errors name them (the first few).
    pub(super) fn describe_ranges(&self) -> String {
        let mut out: Vec<String> = self
            .ranges
            .iter()
            .take(4)
            .map(|r| format!("{}-{} [{}, {})", r.topic, r.partition, r.from, r.until))
            .collect();
        if self.ranges.len() > 4 {
            out.push(format!("and {} more", self.ranges.len() - 4));
        }
        out.join(", ")
    }

    /// The requests of the next round, one per leader, against `view`. A range whose leader
    /// is unknown makes the round a retry (the others are still asked).
    /// [`ErrorKind::BudgetExceeded`] when the session alone fills the budget.
    pub fn next_requests(
        &mut self,
        view: &ClusterView,
        state: &FetchState,
    ) -> Result<Vec<LeaderRequest>, Error> {
        self.retry = None;
        self.changed = false;
        let fetch_max = usize::try_from(self.cfg.params.max_bytes.max(1)).unwrap_or(usize::MAX);
        let part_max = usize::try_from(self.cfg.partition_max_bytes.max(1)).unwrap_or(usize::MAX);
        let mut open: Vec<usize> = self.open().collect();
        // Starved partitions first (see `starved`); the rest in range order.
        open.sort_by_key(|&i| !self.slots.get(i).is_some_and(|s| s.starved));
        // The first fetch on a budget knows nothing of the data: asking every partition for
        // max.partition.fetch.bytes would fill the budget with bytes past the ranges' ends.
        // One partition goes first, and the others are asked for what their ranges need.
        if state.partition_bytes(1).is_none() {
            open.truncate(1);
        }
        let mut by_leader: BTreeMap<i32, Vec<(usize, i32)>> = BTreeMap::new();
        for i in open {
            let Some(r) = self.ranges.get(i) else {
                continue;
            };
            match view.leader(&r.topic, r.partition) {
                Ok((leader, epoch)) => {
                    // KIP-392: the replica the leader pointed at, while the metadata knows it.
                    let node = state
                        .read_replica(&r.topic, r.partition)
                        .filter(|n| view.brokers.contains_key(n))
                        .unwrap_or(leader);
                    by_leader.entry(node).or_default().push((i, epoch));
                }
                Err(e) if e.is_retriable() => self.retry = Some(e),
                Err(e) => return Err(e),
            }
        }
        // Each leader's request may bring back up to min(fetch.max.bytes, its partitions ×
        // max.partition.fetch.bytes); when that does not fit the room left, the room is
        // shared in proportion. (A broker still returns a first batch larger than the limit.)
        let room = self.budget_total.saturating_sub(self.held);
        // Fitting the room: once it has less left than a stored batch (the least an answer
        // brings, KIP-74), the ranges end where they are.
        let least = state.largest_batch().unwrap_or(0).max(1);
        if self.fit && self.held > 0 && room < least && !by_leader.is_empty() {
            self.cut_at_positions();
            self.retry = None;
            return Ok(Vec::new());
        }
        if room == 0 && !by_leader.is_empty() {
            return Err(ErrorKind::BudgetExceeded {
                whole_batch: true,
                what: format!(
                    "the batch (ranges {}) with {} bytes fetched so far",
                    self.describe_ranges(),
                    self.held
                ),
                needed: self.held + 1,
                budget: self.budget_total,
                fix: "lower maxOffsetsPerTrigger (or maxRatePerPartition) so a batch holds \
                      less, or raise memory.budget.bytes",
            }
            .into());
        }
        let asked =
            |s: &Self, i: usize| usize::try_from(s.part_bytes(state, i).max(1)).unwrap_or(part_max);
        let wants: BTreeMap<i32, usize> = by_leader
            .iter()
            .map(|(l, items)| {
                let sum: usize = items.iter().map(|&(i, _)| asked(self, i)).sum();
                (*l, fetch_max.min(sum))
            })
            .collect();
        let want_sum: usize = wants.values().sum();
        let mut requests = Vec::with_capacity(by_leader.len());
        for (leader, items) in by_leader {
            let want = wants.get(&leader).copied().unwrap_or(fetch_max);
            let reserve = if want_sum <= room {
                want
            } else {
                ((room as u128 * want as u128 / want_sum.max(1) as u128) as usize).max(1)
            };
            // Topics in the order their first partition is asked (a starved one first).
            let mut topics: Vec<TopicFetch> = Vec::new();
            let mut names: HashMap<[u8; 16], Arc<str>> = HashMap::new();
            let mut asked_items = Vec::with_capacity(items.len());
            for &(i, epoch) in &items {
                let (Some(r), Some(&p)) = (self.ranges.get(i), self.pos.get(i)) else {
                    continue;
                };
                let id = view.topic(&r.topic).map(|t| t.id).unwrap_or([0; 16]);
                names
                    .entry(id)
                    .or_insert_with(|| Arc::<str>::from(&r.topic));
                let bytes = self.part_bytes(state, i);
                asked_items.push((i, usize::try_from(bytes).unwrap_or(0)));
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.asked_epoch = epoch;
                }
                let at = match topics.iter().position(|t| t.name == r.topic) {
                    Some(at) => at,
                    None => {
                        topics.push(TopicFetch {
                            name: r.topic.to_string(),
                            id,
                            partitions: Vec::new(),
                        });
                        topics.len() - 1
                    }
                };
                let Some(topic) = topics.get_mut(at) else {
                    continue;
                };
                topic.partitions.push(PartitionFetch {
                    partition: r.partition,
                    fetch_offset: p,
                    partition_max_bytes: bytes,
                    current_leader_epoch: epoch,
                    last_fetched_epoch: self.slots.get(i).map_or(-1, |s| s.last_epoch),
                });
            }
            // fetch.max.bytes limits the records; the response also carries per-partition
            // fields (about 60 bytes each at v16) and headers. Leave room for them, or a
            // response that fills its records limit overflows its reservation.
            let framing = 1024 + 128 * items.len();
            let mut params = self.cfg.params;
            params.max_bytes =
                i32::try_from(reserve.saturating_sub(framing).max(1)).unwrap_or(i32::MAX);
            requests.push(LeaderRequest {
                leader,
                rack: self.cfg.client_rack.clone(),
                reserve,
                params,
                topics,
                names,
                items: asked_items,
            });
        }
        Ok(requests)
    }

    /// A request that failed before or instead of its response (no connection, a dropped
    /// connection, a timeout): retriable errors make the round a retry, others end the fetch.
    pub fn on_error(&mut self, e: Error) -> Result<(), Error> {
        if e.is_retriable() {
            self.retry = Some(e);
            Ok(())
        } else {
            Err(e)
        }
    }

    /// `req`'s response from `broker`: `size` bytes in all, holding `hold` (its share of the
    /// memory budget) for as long as a chunk keeps its data. Validates every batch once (CRC,
    /// control batches, aborted transactions), keeps the data batches as chunks, and moves the
    /// positions.
    pub fn on_response(
        &mut self,
        state: &mut FetchState,
        req: &LeaderRequest,
        broker: &BrokerName,
        resp: FetchView,
        size: usize,
        hold: Option<Arc<OwnedSemaphorePermit>>,
    ) -> Result<(), Error> {
        if let Some(code) = resp.error.err() {
            return self.on_error(
                ErrorKind::Broker {
                    broker: broker.clone(),
                    api: kdirect_proto::api::fetch::Fetch::KEY,
                    code,
                }
                .into(),
            );
        }
        for &(i, _) in &req.items {
            if let Some(slot) = self.slots.get_mut(i) {
                slot.asked_of = Some(broker.clone());
            }
        }
        let mut kept = false;
        // Whether a partition before this one in the answer had data (see `starved`).
        let mut data_before = false;
        for p in resp.partitions {
            let after_data = data_before;
            data_before |= !p.records.is_empty();
            // Partitions the request did not ask for (or asked twice) are ignored.
            let Some(&(i, asked)) = req.items.iter().find(|(i, _)| {
                self.ranges
                    .get(*i)
                    .is_some_and(|r| r.topic == p.topic && r.partition == p.partition)
            }) else {
                continue;
            };
            let (Some(r), Some(&at)) = (self.ranges.get(i), self.pos.get(i)) else {
                continue;
            };
            let r = r.clone();
            // Asked of a replica other than the leader (KIP-392)?
            let from_replica = state.read_replica(&r.topic, r.partition) == Some(req.leader);
            if p.preferred_read_replica >= 0 && p.preferred_read_replica != req.leader {
                // The leader points at a replica in the client's rack (its answer carries no
                // records for the partition): read from there from the next round on.
                state.set_read_replica(&r.topic, r.partition, Some(p.preferred_read_replica));
                self.changed = true;
                continue;
            }
            if from_replica
                && (p.error.err().is_some() || high_watermark_behind(&p, at, self.isolation))
            {
                // Any error from the replica, or a replica not caught up to the range yet:
                // back to the leader, which has the answer.
                state.set_read_replica(&r.topic, r.partition, None);
                self.changed = true;
                continue;
            }
            if let Some(d) = p.diverging_epoch {
                self.diverged(i, &r, at, d, p.log_start_offset, broker, req.leader)?;
                continue;
            }
            if let Some(code) = p.error.err() {
                // Retention (or DeleteRecords) removed records of the range after it was
                // planned: data loss, named with the exact offsets lost.
                if code == ErrorCode::OFFSET_OUT_OF_RANGE && p.log_start_offset > at {
                    return Err(crate::plan::PlanError::DataLoss {
                        topic: r.topic.to_string(),
                        partition: r.partition,
                        lost_from: at,
                        lost_until: p.log_start_offset,
                        reason: crate::plan::DataLossReason::BelowLogStart,
                    }
                    .into());
                }
                let e = range_error(broker, &r, at, code);
                if is_leader_change(code) || code.is_retriable() {
                    self.retry = Some(e);
                    continue;
                }
                return Err(e);
            }
            let opts = DecodeOptions::new()
                .check_crc(self.cfg.check_crcs)
                .max_decompressed(self.cfg.max_decompressed)
                .fetch_offset(at)
                .until(r.until)
                .isolation(self.isolation);
            // The partition's ends as this answer saw them: what plans the next batch when
            // fresh (no ListOffsets round for it).
            if p.log_start_offset >= 0 {
                let end = partition_end(&p, self.isolation);
                if end >= p.log_start_offset {
                    if let Some(out) = self.out.get_mut(i) {
                        out.observed = Some(ObservedEnds {
                            log_start: p.log_start_offset,
                            end,
                        });
                    }
                }
            }
            let walked = super::walk_answer(&p, opts, &self.scratch).map_err(|source| {
                Error::from(ErrorKind::Decode {
                    broker: broker.clone(),
                    topic: r.topic.to_string(),
                    partition: r.partition,
                    source,
                })
            })?;
            let (batches, next, next_epoch) = (walked.batches, walked.next, walked.last_epoch);
            let max_batch = batches.iter().map(|b| b.bytes().len()).max().unwrap_or(0);
            let used: usize = batches.iter().map(|b| b.bytes().len()).sum();
            if next > at {
                if !batches.is_empty() {
                    // The bytes are whole stored batches, which may start before the position and
                    // end past the range (a range inside a batch): count the offsets the batches
                    // span, or the bytes per offset come out several times too large and every
                    // request after asks (and the budget holds) that much more.
                    let first = batches
                        .first()
                        .map_or(at, |b: &RecordBatch| b.header().base_offset.min(at));
                    let last = batches
                        .last()
                        .map_or(next, |b: &RecordBatch| b.header().next_offset().max(next));
                    state.learn(used, last - first, max_batch);
                }
                // The range ends inside its last batch, or the answer holds the whole batch
                // after its end (after a gap, or where the range ended at a batch's end):
                // that batch starts the partition's next range.
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.straddling = batches
                        .last()
                        .filter(|b| next >= r.until && b.header().next_offset() > r.until)
                        .cloned()
                        .or(walked.past_until)
                        .map(|b| Leftover {
                            until: b.header().next_offset(),
                            batches: vec![b],
                            broker: broker.clone(),
                            kept: None,
                            frame: hold.clone(),
                        });
                }
                if let Some(out) = self.out.get_mut(i) {
                    out.chunks.push(Chunk {
                        fetch_offset: at,
                        next_offset: next,
                        broker: broker.clone(),
                        batches,
                        bytes: p.records.len(),
                        _budget: hold.clone(),
                    });
                }
                if let Some(pos) = self.pos.get_mut(i) {
                    *pos = next;
                }
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.starved = false;
                }
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.last_epoch = next_epoch;
                }
                self.changed = true;
                kept = true;
                continue;
            }
            // No whole batch past the position. Up to the high watermark (or the last stable
            // offset) there is nothing more: the range reaches past the data the partition has.
            let end = partition_end(&p, self.isolation);
            if end <= at {
                return Err(ErrorKind::PastEnd {
                    broker: broker.clone(),
                    topic: r.topic.to_string(),
                    partition: r.partition,
                    from: r.from,
                    until: r.until,
                    end,
                }
                .into());
            }
            if after_data || (p.records.is_empty() && size.saturating_add(asked) > req.reserve) {
                // Other partitions' data came first: the response reached fetch.max.bytes
                // before this partition's turn, or its first batch is larger than the limits,
                // which a broker returns only for the first partition with data (KIP-74; 1 MB
                // producer batches against max.partition.fetch.bytes 1 MiB). It goes first in
                // the next round (was: a retry after a backoff, for each such partition).
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.starved = true;
                }
                continue;
            }
            let part_max =
                usize::try_from(self.cfg.partition_max_bytes.max(1)).unwrap_or(usize::MAX);
            if asked < part_max {
                // Asked for less than a batch that is larger than any seen so far.
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.uncapped = true;
                }
                self.changed = true;
                continue;
            }
            self.retry = Some(
                ErrorKind::NoProgress {
                    broker: broker.clone(),
                    topic: r.topic.to_string(),
                    partition: r.partition,
                    offset: at,
                    reason: format!(
                        "no whole record batch in {} bytes (max.partition.fetch.bytes {})",
                        p.records.len(),
                        self.cfg.partition_max_bytes
                    ),
                }
                .into(),
            );
        }
        if kept {
            self.held += size;
        }
        Ok(())
    }

    /// Ends a round: done, go on at once, or retry after a backoff. A round that moved no
    /// position and changed nothing about how the next is asked is a retry even when no
    /// response said why (a partition left out of every answer, an answer with no data).
    pub fn end_round(&mut self) -> RoundEnd {
        if let Some(e) = self.retry.take() {
            return RoundEnd::Retry(e);
        }
        if self.is_done() {
            return RoundEnd::Done;
        }
        if self.changed {
            return RoundEnd::Continue;
        }
        let i = self.open().next().unwrap_or(0);
        let (topic, partition) = self
            .ranges
            .get(i)
            .map_or((String::new(), -1), |r| (r.topic.to_string(), r.partition));
        let broker = self
            .slots
            .get(i)
            .and_then(|s| s.asked_of.clone())
            .unwrap_or(BrokerName {
                node_id: None,
                addr: "no broker".to_owned(),
            });
        RoundEnd::Retry(
            ErrorKind::NoProgress {
                broker,
                topic,
                partition,
                offset: self.pos.get(i).copied().unwrap_or(-1),
                reason: "the answers held no data for it".to_owned(),
            }
            .into(),
        )
    }

    /// A diverging epoch (KIP-320) in the answer for range `i` fetched at `at`: the leader's
    /// log does not hold what was read before `at` at the epoch sent. Records the range read
    /// in this session (not delivered yet) are dropped and read again; records below the
    /// range's `from` (delivered by an earlier batch) that are gone are data loss,
    /// [`DataLossReason::Truncated`](crate::plan::DataLossReason::Truncated), from the
    /// leader's end of that epoch to `from`.
    #[allow(clippy::too_many_arguments)]
    fn diverged(
        &mut self,
        i: usize,
        r: &OffsetRange,
        at: i64,
        d: EpochEnd,
        log_start: i64,
        broker: &BrokerName,
        node: i32,
    ) -> Result<(), Error> {
        let sent = self.slots.get(i).map_or(-1, |s| s.last_epoch);
        let tries = self.slots.get(i).map_or(u8::MAX, |s| s.divergences);
        let no_progress = |reason: String| -> Error {
            ErrorKind::NoProgress {
                broker: broker.clone(),
                topic: r.topic.to_string(),
                partition: r.partition,
                offset: at,
                reason,
            }
            .into()
        };
        if tries >= MAX_DIVERGENCES {
            self.retry = Some(no_progress(format!(
                "the broker keeps answering a diverging epoch {} (end offset {}) to last \
                 fetched epoch {sent}",
                d.epoch, d.end_offset
            )));
            return Ok(());
        }
        if let Some(slot) = self.slots.get_mut(i) {
            slot.divergences += 1;
        }
        self.changed = true;
        match judge_epoch_end(at, d, log_start) {
            EpochVerdict::Valid => {
                // The leader's log holds everything below `at`; only the epoch number
                // differs. Fetch on with the leader's.
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.last_epoch = d.epoch;
                }
                Ok(())
            }
            EpochVerdict::Truncated { lost_from } if lost_from >= r.from => {
                // Only records this session read are gone (never handed out): read the range
                // again from its start.
                tracing::info!(
                    "{}-{}: the log was truncated at {lost_from} under records read for \
                     [{}, {at}) (leader {node}, epoch {}); reading the range again",
                    r.topic,
                    r.partition,
                    r.from,
                    d.epoch
                );
                if let Some(out) = self.out.get_mut(i) {
                    out.chunks.clear();
                }
                if let Some(slot) = self.slots.get_mut(i) {
                    slot.straddling = None;
                }
                if let Some(p) = self.pos.get_mut(i) {
                    *p = r.from;
                }
                if let Some(s) = self.slots.get_mut(i) {
                    s.last_epoch = s.start_epoch;
                }
                Ok(())
            }
            EpochVerdict::Truncated { lost_from } => Err(crate::plan::PlanError::DataLoss {
                topic: r.topic.to_string(),
                partition: r.partition,
                lost_from,
                lost_until: r.from,
                reason: crate::plan::DataLossReason::Truncated {
                    last_fetched_epoch: sent,
                    leader_epoch: d.epoch,
                    broker: broker.node_id.unwrap_or(node),
                },
            }
            .into()),
            EpochVerdict::Unknown => {
                self.retry = Some(no_progress(format!(
                    "the leader has no epoch at or below last fetched epoch {sent} and no log \
                     start to resume from"
                )));
                Ok(())
            }
        }
    }

    /// The ranges' data, once [`is_done`](Self::is_done). Remembers where each range ended
    /// and the epoch of its last batch, for the next fetch from there (KIP-320).
    pub fn finish(self, state: &mut FetchState) -> Vec<RangeData> {
        for (i, r) in self.ranges.iter().enumerate() {
            let (Some(&position), Some(slot)) = (self.pos.get(i), self.slots.get(i)) else {
                continue;
            };
            let (epoch, leader_epoch) = (slot.last_epoch, slot.asked_epoch);
            if r.is_empty() || slot.inner {
                continue;
            }
            let at = (epoch >= 0).then_some(super::LastFetched {
                position,
                epoch,
                leader_epoch,
            });
            state.set_last_fetched(&r.topic, r.partition, at);
        }
        self.out
    }
}

fn is_leader_change(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::FENCED_LEADER_EPOCH
            | ErrorCode::UNKNOWN_LEADER_EPOCH
            | ErrorCode::LEADER_NOT_AVAILABLE
    )
}

fn range_error(broker: &BrokerName, r: &OffsetRange, at: i64, code: ErrorCode) -> Error {
    ErrorKind::Range {
        broker: broker.clone(),
        topic: r.topic.to_string(),
        partition: r.partition,
        from: r.from,
        until: r.until,
        at,
        code,
    }
    .into()
}

/// Whether a replica's answer holds nothing past `at` because its high watermark (or last
/// stable offset) has not reached it yet: a follower learns the leader's high watermark a
/// moment later than the leader moves it.
fn high_watermark_behind(
    p: &kdirect_proto::api::fetch::FetchedPartition,
    at: i64,
    isolation: IsolationLevel,
) -> bool {
    partition_end(p, isolation) <= at
}

/// Where a Fetch answer says the partition's readable data ends: the last stable offset under
/// read_committed (when the broker sent one), else the high watermark.
pub(super) fn partition_end(
    p: &kdirect_proto::api::fetch::FetchedPartition,
    isolation: IsolationLevel,
) -> i64 {
    if isolation == IsolationLevel::ReadCommitted && p.last_stable_offset >= 0 {
        p.last_stable_offset
    } else {
        p.high_watermark
    }
}
