//! The fetcher: reads planned offset ranges `[from, until)` exactly, from the partitions'
//! leaders, across as many Fetch requests as it takes.
//!
//! Partitions are grouped by leader and all leaders are fetched concurrently. Each response is
//! walked once ([`FetchSession::on_response`]): every CRC32C checked, control batches and
//! aborted transactions dropped, and the data batches kept as [`RecordBatch`] views of the
//! response frame (no copy), with where the next fetch starts (one past the last whole
//! batch's last offset; a truncated final batch is the broker cutting at the byte limit, not
//! an error). NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
//! LEADER_NOT_AVAILABLE, connection drops and rounds that move nothing refresh the metadata and
//! retry with backoff; OFFSET_OUT_OF_RANGE and other errors end the fetch with an error that
//! names the range. A range is never returned partly: the result holds every range whole, or
//! it is an error.
//!
//! [`FetchSession`] (`session.rs`) is the state machine, without I/O; this file's
//! [`fetch_ranges_within`] drives it. The prefetching of the next batch is the
//! `DirectStream`'s (crate `kdirect`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kdirect_proto::api::fetch::{self, Fetch, FetchParams, FetchView};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::plan::{Topic, TopicPartition};
use crate::record::{DecodeError, DecodeOptions, OwnedRecord, Record, RecordBatch, Scratch};

mod epoch;
mod session;
mod state;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::incremental::FetchSessionStats;
use crate::incremental::{self, SessionPool};
pub use crate::retry::backoff;
pub use epoch::{check_truncation, judge_epoch_end, EpochVerdict, Truncation};
pub use session::{FetchSession, LeaderRequest, RoundEnd};
pub(crate) use state::Carried;
pub use state::{ByPartition, FetchState, LastFetched};

pub use crate::plan::OffsetRange;

/// Fetcher settings (the Java client's names and defaults).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FetchConfig {
    /// `fetch.max.wait.ms`, `fetch.min.bytes`, `fetch.max.bytes`, `isolation.level`.
    pub params: FetchParams,
    /// `max.partition.fetch.bytes` (default 1 MiB).
    pub partition_max_bytes: i32,
    /// `check.crcs` (default true).
    pub check_crcs: bool,
    /// Largest decompressed size of one batch (a stream takes at most half its memory budget:
    /// [`Fetcher::max_decompressed`]).
    pub max_decompressed: usize,
    /// First retry backoff, doubled each retry up to 1 s (`retry.backoff.ms`, default 100).
    pub retry_backoff: Duration,
    /// `client.rack` (KIP-392): sent in Fetch requests, so that a broker with a rack-aware
    /// replica selector points each partition at a replica in this rack; the stream then
    /// reads from it (falling back to the leader on any error from it). Empty: the leader.
    pub client_rack: String,
    /// `fetch.in.flight.per.leader` (default 2): Fetch requests kept in flight to each
    /// leader, each for its own share of the leader's partitions (see
    /// [`fetch_ranges_within`]). 1: one request per leader at a time.
    pub in_flight_per_leader: usize,
    /// `fetch.sessions` (default true): incremental fetch sessions (KIP-227) with brokers
    /// that offer them (Fetch v7+), so that a request lists only the partitions whose
    /// position changed and an answer only those with news. False: every request is full.
    pub sessions: bool,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            params: FetchParams::default(),
            partition_max_bytes: 1_048_576,
            check_crcs: true,
            max_decompressed: DecodeOptions::DEFAULT_MAX_DECOMPRESSED,
            retry_backoff: Duration::from_millis(100),
            client_rack: String::new(),
            in_flight_per_leader: 2,
            sessions: true,
        }
    }
}

/// A hard limit on fetched-but-not-released bytes, shared by every fetch that uses it (the
/// current batch, the prefetched one): permits and nothing else. Each Fetch request reserves
/// its `fetch.max.bytes` before it is sent and keeps exactly its response's size once it
/// arrives; the bytes are released when the last [`RangeData`] holding them is dropped. The
/// one excess Kafka forces: a broker returns a first batch larger than `fetch.max.bytes`
/// whole (KIP-74), and such a response is accounted in full once it has arrived.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    sem: Arc<Semaphore>,
    total: usize,
    /// Reservations that found the budget full and waited for room.
    waits: Arc<std::sync::atomic::AtomicU64>,
}

/// A share of the memory budget held by data read from one response, released when the last
/// holder drops it.
pub(crate) type SharedPermit = Arc<OwnedSemaphorePermit>;

/// At most this fraction of the memory budget is held by carried batches (1/`CARRY_SHARE`).
const CARRY_SHARE: usize = 4;

impl MemoryBudget {
    /// The default budget: 64 MiB.
    pub const DEFAULT: usize = 64 << 20;

    /// A budget of `total` bytes.
    pub fn new(total: usize) -> MemoryBudget {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        MemoryBudget {
            sem: Arc::new(Semaphore::new(total)),
            total,
            waits: Arc::default(),
        }
    }

    /// The budget's size in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes reserved or held right now.
    pub fn in_use(&self) -> usize {
        self.total - self.sem.available_permits()
    }

    /// How many reservations found the budget full and waited for room (the prefetch waiting
    /// for the caller to release batches, mostly): backpressure, as a count.
    pub fn waits(&self) -> u64 {
        self.waits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `n` bytes of the budget if they are free now, without waiting.
    fn try_reserve(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n).ok()?;
        self.sem.clone().try_acquire_many_owned(n).ok()
    }

    /// [`Self::reserve`] for `n` bytes of response frames read into `pool`'s buffers: first
    /// frees the idle buffers the budget will no longer have room for.
    async fn reserve_frames(
        &self,
        pool: &crate::conn::FramePool,
        n: usize,
    ) -> Result<OwnedSemaphorePermit, Error> {
        pool.make_room(&self.sem, n);
        self.reserve(n).await
    }

    async fn reserve(&self, n: usize) -> Result<OwnedSemaphorePermit, Error> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if let Ok(permit) = self.sem.clone().try_acquire_many_owned(n) {
            return Ok(permit);
        }
        self.waits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The semaphore is never closed; the error path exists only to avoid a panic.
        self.sem.clone().acquire_many_owned(n).await.map_err(|_| {
            ErrorKind::Task {
                what: "memory budget",
                reason: "closed".to_owned(),
            }
            .into()
        })
    }
}

/// What the fetches of one stream share: the memory budget (permits), the [`FetchState`]
/// (what they learned and keep between fetches), and the decompression buffers. Cheap to
/// clone (a handle). The state is lent to one decision at a time ([`Fetcher::state`]: a lock
/// held for that decision, never across an await).
#[derive(Debug, Clone)]
pub struct Fetcher {
    budget: MemoryBudget,
    state: Arc<Mutex<FetchState>>,
    scratch: Arc<ScratchPool>,
}

impl Fetcher {
    /// Fetches within a budget of `total` bytes, knowing nothing yet.
    pub fn new(total: usize) -> Fetcher {
        Fetcher {
            budget: MemoryBudget::new(total),
            state: Arc::default(),
            scratch: Arc::new(ScratchPool::new(total / 4)),
        }
    }

    /// No practical memory limit.
    pub fn unlimited() -> Fetcher {
        Fetcher::new(Semaphore::MAX_PERMITS)
    }

    /// The memory budget.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// The fetch state, lent for one decision (do not hold it across an await).
    pub fn state(&self) -> MutexGuard<'_, FetchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The budget's size in bytes.
    pub fn total(&self) -> usize {
        self.budget.total()
    }

    /// Bytes of the budget reserved or held right now.
    pub fn in_use(&self) -> usize {
        self.budget.in_use()
    }

    /// See [`MemoryBudget::waits`].
    pub fn waits(&self) -> u64 {
        self.budget.waits()
    }

    /// The largest decompressed size of one record batch a stream on this budget reads: half
    /// the budget, or `configured` if less (issue 36: decompressed data is bounded by the
    /// budget, not by a fixed 128 MiB beside it). A batch past it is
    /// [`DecodeErrorKind::DecompressedTooLarge`](crate::record::DecodeErrorKind::DecompressedTooLarge).
    pub fn max_decompressed(&self, configured: usize) -> usize {
        configured.min(self.total() / 2).max(1)
    }

    /// Bytes of the idle decompression buffers kept for reuse (at most a quarter of the
    /// budget).
    pub fn idle_scratch_bytes(&self) -> usize {
        self.scratch.idle_bytes()
    }

    /// Gives a decompression buffer back to the pool (tools and tests that walk batches with
    /// their own [`Scratch`]).
    pub fn give_scratch(&self, scratch: Scratch) {
        self.scratch.give(scratch);
    }

    /// See [`FetchState::largest_batch`].
    pub fn largest_batch(&self) -> Option<usize> {
        self.state().largest_batch()
    }

    /// See [`FetchState::bytes_per_offset`].
    pub fn bytes_per_offset(&self) -> Option<f64> {
        self.state().bytes_per_offset()
    }

    /// See [`FetchState::last_fetched`].
    pub fn last_fetched(&self, topic: &str, partition: i32) -> Option<LastFetched> {
        self.state().last_fetched(topic, partition)
    }

    /// See [`FetchState::resume_at`].
    pub fn resume_at(&self, topic: &str, partition: i32, position: i64, epoch: i32) {
        self.state().resume_at(topic, partition, position, epoch);
    }

    /// See [`FetchState::epoch_at`].
    pub fn epoch_at(&self, topic: &str, partition: i32, position: i64) -> Option<i32> {
        self.state().epoch_at(topic, partition, position)
    }

    fn try_reserve(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        self.budget.try_reserve(n)
    }

    async fn reserve_frames(
        &self,
        pool: &crate::conn::FramePool,
        n: usize,
    ) -> Result<OwnedSemaphorePermit, Error> {
        self.budget.reserve_frames(pool, n).await
    }
}

/// One Fetch response's records for a range: the data batches the fetcher validated (CRC,
/// read_committed, the fetch offset and the range's end applied), as views of the response
/// frame. Consumption iterates them without walking the response again.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The offset this chunk was fetched at.
    pub fetch_offset: i64,
    /// Where the next chunk starts (capped at the range's `until`).
    pub next_offset: i64,
    /// The broker that sent it.
    broker: BrokerName,
    /// The data batches to deliver, in offset order.
    batches: Vec<RecordBatch>,
    /// Bytes of the response's `records` this chunk keeps alive.
    bytes: usize,
    /// This response's share of the memory budget, released when the last chunk of the
    /// response is dropped.
    _budget: Option<Arc<OwnedSemaphorePermit>>,
}

impl Chunk {
    /// The broker that sent this chunk.
    pub fn broker(&self) -> &BrokerName {
        &self.broker
    }

    /// The data batches to deliver (control batches and aborted transactions removed).
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }
}

/// Decompression buffers shared by the fetches and the consumption of one stream (one
/// [`Fetcher`]): a walk takes one and gives it back, so a stream that consumes its batches
/// one after the other reuses one buffer, and decompression stops allocating after the
/// first few batches. What it keeps idle is bounded by bytes, not only by count (issue 36: a
/// buffer grows to its batch's decompressed size, and two kept at the 128 MiB cap pinned
/// 256 MiB beside a 64 MiB budget): a buffer that would take the idle ones past
/// `idle_limit` (a quarter of the budget) is freed when given back.
#[derive(Debug, Default)]
pub(crate) struct ScratchPool {
    idle: Mutex<Vec<Scratch>>,
    idle_limit: usize,
}

/// Buffers kept for reuse; more are dropped.
const POOLED_SCRATCH: usize = 2;

impl ScratchPool {
    /// A pool keeping at most `idle_limit` bytes of idle buffers.
    fn new(idle_limit: usize) -> ScratchPool {
        ScratchPool {
            idle: Mutex::default(),
            idle_limit,
        }
    }

    fn take(&self) -> Scratch {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
    }

    fn give(&self, scratch: Scratch) {
        let mut pool = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let held: usize = pool.iter().map(Scratch::capacity).sum();
        if pool.len() < POOLED_SCRATCH && held.saturating_add(scratch.capacity()) <= self.idle_limit
        {
            pool.push(scratch);
        }
    }

    /// Bytes of the idle buffers.
    fn idle_bytes(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(Scratch::capacity)
            .sum()
    }
}

/// What [`walk_answer`] read of one partition's records in a Fetch answer.
struct Walked {
    /// The data batches, in offset order.
    batches: Vec<RecordBatch>,
    /// Where the walk stopped: the next offset to fetch.
    next: i64,
    /// The `partition_leader_epoch` of the last batch read (-1: none).
    last_epoch: i32,
    /// The whole batch at or past the walk's `until` that ended it, if one did.
    past_until: Option<RecordBatch>,
}

/// The one walk over a partition's records in a Fetch answer, a batch's or a long-poll's:
/// CRCs, control batches, aborted transactions, as `opts` say (the fetch offset, the end,
/// the isolation). The batches it keeps are what consumption iterates.
fn walk_answer(
    p: &fetch::FetchedPartition,
    opts: DecodeOptions,
    scratch: &ScratchPool,
) -> Result<Walked, DecodeError> {
    let mut reader = crate::record::RecordBatchReader::new(p.records.clone(), opts)
        .with_aborted_transactions(p.aborted_transactions.iter().copied())
        .with_scratch(scratch.take());
    let mut batches = Vec::new();
    let walked = loop {
        match reader.next_batch() {
            Ok(Some(b)) => batches.push(b),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let (next, last_epoch) = (reader.next_offset(), reader.last_epoch());
    let past_until = reader.take_past_until();
    scratch.give(reader.into_scratch());
    walked.map(|()| Walked {
        batches,
        next,
        last_epoch,
        past_until,
    })
}

/// A range read whole.
#[derive(Debug, Clone)]
pub struct RangeData {
    /// The range.
    pub range: OffsetRange,
    /// The chunks, in offset order; together they cover `[from, until)`.
    pub chunks: Vec<Chunk>,
    /// The partition's log start and end (high watermark, or last stable offset under
    /// read_committed) as the last Fetch answer for it gave them (Fetch v5+). `None` when no
    /// answer gave them: a range read wholly from a batch carried from the partition's last
    /// range sends no Fetch (ends from that older answer could be older than ends a plan has
    /// used since, and would look like the log's end moving back).
    pub observed: Option<ObservedEnds>,
    max_decompressed: usize,
    scratch: Arc<ScratchPool>,
}

/// A partition's ends as a Fetch answer reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedEnds {
    /// The log start offset.
    pub log_start: i64,
    /// The high watermark, or the last stable offset under read_committed.
    pub end: i64,
}

impl RangeData {
    /// Bytes held by this range's chunks.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes).sum()
    }

    /// Calls `f` with every data record of the range, in offset order. The batches were
    /// validated when the range was fetched (CRC, read_committed) and are not walked again;
    /// a record that does not decode is [`ErrorKind::Decode`], naming the broker, the
    /// partition, the batch's offset and the byte.
    pub fn for_each_record(&self, mut f: impl FnMut(&Record<'_>)) -> Result<u64, Error> {
        self.try_for_each_record(|r| {
            f(r);
            Ok::<(), Error>(())
        })
    }

    /// Like [`for_each_record`](Self::for_each_record), but `f` can fail: the first error
    /// (the caller's, or a decode error converted into `E`) stops the walk and is returned.
    pub fn try_for_each_record<E: From<Error>>(
        &self,
        mut f: impl FnMut(&Record<'_>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut scratch = self.scratch.take();
        let walked = self.walk(&mut scratch, &mut f);
        self.scratch.give(scratch);
        walked
    }

    /// The range's records as [`OwnedRecord`]s (`Bytes` views, no copy for uncompressed
    /// batches), in offset order: for handing records to other tasks or keeping them past
    /// the batch. Slower than [`for_each_record`](Self::for_each_record), which lends views.
    /// After an error the iterator ends.
    pub fn records(&self) -> RangeRecords<'_> {
        RangeRecords {
            data: self,
            chunk: 0,
            batch: 0,
            ready: VecDeque::new(),
            scratch: None,
            failed: false,
            error: None,
        }
    }

    fn decode_error(&self, chunk: &Chunk, source: DecodeError) -> Error {
        ErrorKind::Decode {
            broker: chunk.broker.clone(),
            topic: self.range.topic.to_string(),
            partition: self.range.partition,
            source,
        }
        .into()
    }

    fn walk<E: From<Error>>(
        &self,
        scratch: &mut Scratch,
        f: &mut impl FnMut(&Record<'_>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut n = 0;
        for c in &self.chunks {
            let fail = |source: DecodeError| -> E { self.decode_error(c, source).into() };
            for b in &c.batches {
                for r in b.records(scratch, self.max_decompressed).map_err(fail)? {
                    f(&r.map_err(fail)?)?;
                    n += 1;
                }
            }
        }
        Ok(n)
    }
}

/// The records of a [`RangeData`] as [`OwnedRecord`]s; see [`RangeData::records`].
#[derive(Debug)]
pub struct RangeRecords<'a> {
    data: &'a RangeData,
    /// The next stored batch to decode: `data.chunks[chunk].batches[batch]`.
    chunk: usize,
    batch: usize,
    /// The decoded records of the current stored batch not yet returned.
    ready: VecDeque<OwnedRecord>,
    scratch: Option<Scratch>,
    /// A decode fault: the iteration ends with `error` once `ready` is empty.
    failed: bool,
    error: Option<Error>,
}

impl Iterator for RangeRecords<'_> {
    type Item = Result<OwnedRecord, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Some(Ok(r));
            }
            if self.failed {
                return self.error.take().map(Err);
            }
            let chunk = self.data.chunks.get(self.chunk)?;
            let Some(batch) = chunk.batches.get(self.batch) else {
                self.chunk += 1;
                self.batch = 0;
                continue;
            };
            self.batch += 1;
            let scratch = self.scratch.get_or_insert_with(|| self.data.scratch.take());
            if let Err(e) =
                batch.owned_records(scratch, self.data.max_decompressed, &mut self.ready)
            {
                // The records decoded before the fault come first, as with for_each_record.
                self.failed = true;
                self.error = Some(self.data.decode_error(chunk, e));
            }
        }
    }
}

impl Drop for RangeRecords<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.scratch.take() {
            self.data.scratch.give(s);
        }
    }
}

/// Reads every range whole. Ranges must be disjoint per partition; empty ranges are returned
/// with no chunks.
pub async fn fetch_ranges(
    cluster: &Cluster,
    ranges: &[OffsetRange],
    cfg: &FetchConfig,
) -> Result<Vec<RangeData>, Error> {
    fetch_ranges_within(cluster, ranges, cfg, &Fetcher::unlimited()).await
}

/// [`fetch_ranges`] within a memory budget: requests wait for room, and the returned data
/// holds its bytes of the budget until dropped. A set of ranges that cannot fit the budget on
/// its own is [`ErrorKind::BudgetExceeded`] (bound the batch with a rate limit).
///
/// The ranges are split into `fetch.in.flight.per.leader` groups, each leader's partitions
/// dealt among them, and each group is read by its own [`FetchSession`] at the same time:
/// so each leader has that many Fetch requests in flight, and while the client walks one
/// answer the broker is already reading (and, over TLS, encrypting) the next. Each group may
/// fill its share of the budget. A budget that has seen stored batches too large for a share
/// (or has seen none yet) is read by one session.
///
/// A session's driver sends each round's requests concurrently (one per leader), reserves
/// their share of the budget, hands the answers to the session, and backs off (doubling from
/// `retry.backoff.ms` up to 1 s) and refreshes the metadata when the session asks for a
/// retry, for up to `default.api.timeout.ms` from the first failure.
pub async fn fetch_ranges_within(
    cluster: &Cluster,
    ranges: &[OffsetRange],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
) -> Result<Vec<RangeData>, Error> {
    fetch(cluster, ranges, cfg, fetcher, false).await
}

/// [`fetch_ranges_within`] for a batch that is planned, not yet handed out: each range is read
/// from its `from` in whole stored batches for as long as the data fits half the budget (the
/// other half is for the batch before it, which the caller may still hold), and ends where the
/// reading stopped — at a stored batch's end, or its `until`. [`RangeData::range`] names where
/// each range ends; a range can end at its `from` (nothing read). So a batch planned larger
/// than memory (a large `maxOffsetsPerTrigger`, records of several MB, many partitions of
/// large stored batches) is read as the part of it that fits, never as slivers of stored
/// batches (issue 32). Only a single stored batch larger than the whole budget is
/// [`ErrorKind::BudgetExceeded`].
pub async fn fetch_ranges_fitting(
    cluster: &Cluster,
    ranges: &[OffsetRange],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
) -> Result<Vec<RangeData>, Error> {
    fetch(cluster, ranges, cfg, fetcher, true).await
}

async fn fetch(
    cluster: &Cluster,
    ranges: &[OffsetRange],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
    fit: bool,
) -> Result<Vec<RangeData>, Error> {
    let carried = fetcher.state().take_carried();
    let mut topics: Vec<&str> = ranges.iter().map(|r| r.topic.as_str()).collect();
    topics.sort_unstable();
    topics.dedup();
    let view = cluster.ensure_topics(&topics).await?;
    // The pieces read: each range, or a large range of a leader with fewer ranges than
    // requests in flight cut into consecutive sub-ranges, each read by its own group.
    let mut pieces = split_large(&view, ranges, cfg, fetcher);
    let mut piece_ranges: Vec<OffsetRange> = pieces.iter().map(|p| p.range.clone()).collect();
    let mut groups = pipeline_groups(&view, &piece_ranges, cfg.in_flight_per_leader, fetcher);
    if pieces.len() != ranges.len() && !one_piece_per_partition(&groups, &piece_ranges) {
        // The pieces do not go to different groups (they do not fit the groups' shares): a
        // partition is asked once per request, so read the ranges whole.
        pieces = whole_pieces(ranges);
        piece_ranges = ranges.to_vec();
        groups = pipeline_groups(&view, &piece_ranges, cfg.in_flight_per_leader, fetcher);
    }
    let read = read_groups(cluster, &view, &pieces, &groups, cfg, fetcher, carried, fit).await;
    let (read_pieces, straddling) = match read {
        Err(e)
            if groups.len() > 1 && matches!(e.root().kind(), ErrorKind::BudgetExceeded { .. }) =>
        {
            // A group outgrew its share of the budget (the sizing's estimate was short): what
            // the groups read is dropped, and the ranges are read again by one session with
            // all of the budget, which is what fits or not.
            tracing::debug!("fetch groups outgrew their shares ({e}): reading as one");
            pieces = whole_pieces(ranges);
            let one = vec![(0..ranges.len()).collect()];
            read_groups(
                cluster,
                &view,
                &pieces,
                &one,
                cfg,
                fetcher,
                Default::default(),
                fit,
            )
            .await?
        }
        r => r?,
    };
    let mut out: Vec<Option<RangeData>> = (0..ranges.len()).map(|_| None).collect();
    // Each range from its pieces, in offset order (the stored batch a cut falls inside of is
    // in both pieces, each bounded to its own offsets). A piece that ended early (fitting the
    // budget) ends its range: the pieces after it are dropped.
    for (piece, d) in pieces.iter().zip(read_pieces) {
        let (Some(d), Some(slot)) = (d, out.get_mut(piece.of)) else {
            continue;
        };
        match slot {
            None => {
                let mut d = d;
                if let Some(r) = ranges.get(piece.of) {
                    d.range = OffsetRange::new(r.topic.clone(), r.partition, r.from, d.range.until);
                }
                *slot = Some(d);
            }
            Some(whole) if whole.range.until != d.range.from => {}
            Some(whole) => {
                whole.range.until = d.range.until;
                whole.chunks.extend(d.chunks);
                whole.observed = match (whole.observed, d.observed) {
                    (Some(a), Some(b)) => Some(if b.end >= a.end { b } else { a }),
                    (a, b) => b.or(a),
                };
            }
        }
    }
    // Keep the stored batches the ranges ended inside of, for the partitions' next ranges,
    // while they fit their share of the budget.
    let mut room = fetcher.total() / CARRY_SHARE;
    let shared = frames_to_share(&straddling);
    let mut charged: Vec<*const OwnedSemaphorePermit> = Vec::new();
    for s in straddling {
        let n: usize = s.batches.iter().map(|b| b.bytes().len()).sum();
        // A shared frame is charged once, whole, however many batches are carried out of it;
        // one that does not fit the room left has its batches copied instead.
        let mut frame = None;
        if let Some(f) = s.frame.filter(|f| shared.contains(&Arc::as_ptr(f))) {
            let at = Arc::as_ptr(&f);
            if charged.contains(&at) {
                frame = Some(f);
            } else if f.num_permits() <= room {
                room -= f.num_permits();
                charged.push(at);
                frame = Some(f);
            }
        }
        let (batches, permit) = match (s.kept, frame) {
            // Carried in already and on again: the same buffers and reservation.
            (Some(permit), _) => {
                if n > room {
                    continue;
                }
                room -= n;
                (s.batches, permit)
            }
            // Views of the response frame, which the carry keeps (with its reservation).
            (None, Some(frame)) => (s.batches, frame),
            // Copied, so that the response frame is freed with the ranges' data.
            (None, None) => {
                if n > room {
                    continue;
                }
                let Some(permit) = fetcher.try_reserve(n) else {
                    continue;
                };
                room -= n;
                let copies = s.batches.iter().map(RecordBatch::detached).collect();
                (copies, Arc::new(permit))
            }
        };
        let carried = Carried {
            from: s.from,
            until: s.until,
            batches,
            broker: s.broker,
            leader_epoch: s.leader_epoch,
            topic_id: view.topic(&s.topic).map_or([0; 16], |t| t.id),
            permit,
        };
        fetcher.state().put_carried(&s.topic, s.partition, carried);
    }
    Ok(out.into_iter().flatten().collect())
}

/// A frame's carried batches are kept as views of it (the frame kept whole) when they are at
/// least 1/`SHARE_FRAME_FRACTION` of its bytes; below that, a copy of them holds less memory.
const SHARE_FRAME_FRACTION: usize = 4;

/// The response frames (by their budget reservations) whose straddling batches are carried as
/// views rather than copies: those the carried batches make up a large part of. When every
/// range ends inside a stored batch (ranges of a stored batch or two, as a wide topic's are),
/// copying them would copy a third to a half of all the bytes read.
fn frames_to_share(straddling: &[session::Straddling]) -> Vec<*const OwnedSemaphorePermit> {
    let mut per_frame: Vec<(*const OwnedSemaphorePermit, usize, usize)> = Vec::new();
    for s in straddling {
        let Some(f) = s.frame.as_ref().filter(|_| s.kept.is_none()) else {
            continue;
        };
        let n: usize = s.batches.iter().map(|b| b.bytes().len()).sum();
        let at = Arc::as_ptr(f);
        match per_frame.iter_mut().find(|(p, _, _)| *p == at) {
            Some((_, _, carried)) => *carried += n,
            None => per_frame.push((at, f.num_permits(), n)),
        }
    }
    per_frame
        .into_iter()
        .filter(|&(_, size, carried)| carried.saturating_mul(SHARE_FRAME_FRACTION) >= size)
        .map(|(at, _, _)| at)
        .collect()
}

/// Reads `pieces` in `groups` (indices into `pieces`) at the same time, each group within its
/// share of the budget; `carried` batches go to the first group holding their partition.
/// Returns each piece's data and the stored batches the pieces ended inside of.
#[allow(clippy::too_many_arguments)]
async fn read_groups(
    cluster: &Cluster,
    view: &Arc<crate::cluster::ClusterView>,
    pieces: &[Piece],
    groups: &[Vec<usize>],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
    mut carried: std::collections::HashMap<(Topic, i32), Carried>,
    fit: bool,
) -> Result<(Vec<Option<RangeData>>, Vec<session::Straddling>), Error> {
    // Fitting, a group's session fills half its share (the rest is the held batch's).
    let share = fetcher.total() / groups.len().max(1) / if fit { 2 } else { 1 };
    let reads: Vec<_> = groups
        .iter()
        .map(|g| {
            let group: Vec<OffsetRange> = g
                .iter()
                .filter_map(|&i| pieces.get(i).map(|p| p.range.clone()))
                .collect();
            // A sub-range that ends before its range does is not where the partition's next
            // fetch starts (no carried batch, no epoch to remember from there).
            let inner: Vec<bool> = g
                .iter()
                .map(|&i| pieces.get(i).is_some_and(|p| !p.last))
                .collect();
            let mine: std::collections::HashMap<(Topic, i32), Carried> = group
                .iter()
                .filter_map(|r| {
                    let k = (r.topic.clone(), r.partition);
                    carried.remove(&k).map(|c| (k, c))
                })
                .collect();
            let view = view.clone();
            async move {
                read_group(
                    cluster, view, &group, &inner, cfg, fetcher, share, mine, fit,
                )
                .await
            }
        })
        .collect();
    // Carried batches no range starts with are freed before anything waits for room.
    drop(carried);
    let mut straddling = Vec::new();
    let mut read_pieces: Vec<Option<RangeData>> = (0..pieces.len()).map(|_| None).collect();
    for (g, read) in groups.iter().zip(futures_join_all(reads).await) {
        let (data, s) = read?;
        straddling.extend(s);
        for (&i, d) in g.iter().zip(data) {
            if let Some(slot) = read_pieces.get_mut(i) {
                *slot = Some(d);
            }
        }
    }
    Ok((read_pieces, straddling))
}

/// A range, or one of the consecutive sub-ranges a large one is read as.
#[derive(Debug, Clone)]
struct Piece {
    /// Index of the range it is (part of).
    of: usize,
    range: OffsetRange,
    /// Whether it ends where its range does.
    last: bool,
}

/// Each range as one piece.
fn whole_pieces(ranges: &[OffsetRange]) -> Vec<Piece> {
    ranges
        .iter()
        .enumerate()
        .map(|(i, r)| Piece {
            of: i,
            range: r.clone(),
            last: true,
        })
        .collect()
}

/// Whether no group holds two pieces of one partition.
fn one_piece_per_partition(groups: &[Vec<usize>], pieces: &[OffsetRange]) -> bool {
    groups.iter().all(|g| {
        let mut seen = std::collections::HashSet::new();
        g.iter()
            .filter_map(|&i| pieces.get(i))
            .filter(|r| !r.is_empty())
            .all(|r| seen.insert((r.topic.as_str(), r.partition)))
    })
}

/// Sub-ranges of one partition read at the same time need at least this many requests'
/// worth (`max.partition.fetch.bytes` each) apiece: below that the cut costs more (a stored
/// batch fetched twice, one more request) than the overlap gains.
const MIN_PIECE_REQUESTS: usize = 2;

/// The pieces `ranges` are read as. A leader with fewer open ranges than
/// `fetch.in.flight.per.leader` would leave requests idle: each of its ranges is cut into
/// that many consecutive sub-ranges (as evenly as the offsets allow), read by different
/// groups, when the sizing estimates each piece at [`MIN_PIECE_REQUESTS`] full-size requests
/// or more. Every other range is one piece.
fn split_large(
    view: &crate::cluster::ClusterView,
    ranges: &[OffsetRange],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
) -> Vec<Piece> {
    let depth = cfg.in_flight_per_leader.max(1);
    if depth == 1 {
        return whole_pieces(ranges);
    }
    let leader = |r: &OffsetRange| view.leader(&r.topic, r.partition).ok().map(|(l, _)| l);
    let mut per_leader: std::collections::HashMap<i32, usize> = Default::default();
    for r in ranges.iter().filter(|r| !r.is_empty()) {
        if let Some(l) = leader(r) {
            *per_leader.entry(l).or_default() += 1;
        }
    }
    let min_piece = usize::try_from(cfg.partition_max_bytes.max(1))
        .unwrap_or(usize::MAX)
        .saturating_mul(MIN_PIECE_REQUESTS);
    let mut out = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        let len = r.until - r.from;
        let n = leader(r)
            .and_then(|l| per_leader.get(&l).copied())
            .unwrap_or(0);
        let k = if r.is_empty() || n == 0 { 1 } else { depth / n };
        let fits = || fetcher.state().partition_bytes(len / k as i64).unwrap_or(0) >= min_piece;
        // One piece (the range itself) unless cutting it in `k` is worth it.
        if !(k >= 2 && len >= k as i64 && fits()) {
            out.push(Piece {
                of: i,
                range: r.clone(),
                last: true,
            });
            continue;
        }
        let parts = crate::plan::divide(r, k as u64);
        let n = parts.len();
        out.extend(parts.into_iter().enumerate().map(|(j, range)| Piece {
            of: i,
            range,
            last: j + 1 == n,
        }));
    }
    out
}

/// The groups of range indices read at the same time: each leader's partitions dealt
/// round-robin into `depth` groups (a range whose leader is unknown goes to the first). One
/// group when `depth` is 1, when the budget has seen no stored batch yet, when a share of
/// the budget would hold fewer than four of the largest seen, or when a group's ranges
/// would need more than half its share (as the sizing estimates them).
fn pipeline_groups(
    view: &crate::cluster::ClusterView,
    ranges: &[OffsetRange],
    depth: usize,
    fetcher: &Fetcher,
) -> Vec<Vec<usize>> {
    let depth = depth.max(1);
    let fits = fetcher
        .largest_batch()
        .is_some_and(|b| b.saturating_mul(4) <= fetcher.total() / depth);
    if depth == 1 || !fits {
        return vec![(0..ranges.len()).collect()];
    }
    let mut by_leader: std::collections::BTreeMap<i32, Vec<usize>> = Default::default();
    for (i, r) in ranges.iter().enumerate() {
        let leader = if r.is_empty() {
            -1
        } else {
            view.leader(&r.topic, r.partition).map_or(-1, |(l, _)| l)
        };
        by_leader.entry(leader).or_default().push(i);
    }
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (leader, idx) in by_leader {
        for (n, i) in idx.into_iter().enumerate() {
            let g = if leader < 0 { 0 } else { n % depth };
            if let Some(group) = groups.get_mut(g) {
                group.push(i);
            }
        }
    }
    groups.retain(|g| !g.is_empty());
    // Each group must fit its share with room to spare: a session never waits for room that
    // only another group's data, held until every group is done, would free.
    let share = fetcher.total() / groups.len().max(1);
    let fits_share = groups.iter().all(|g| {
        let need = g.iter().try_fold(0usize, |sum, &i| {
            let r = ranges.get(i)?;
            if r.is_empty() {
                return Some(sum);
            }
            sum.checked_add(fetcher.state().partition_bytes(r.until - r.from)?)
        });
        need.is_some_and(|n| n <= share / 2)
    });
    if groups.len() <= 1 || !fits_share {
        return vec![(0..ranges.len()).collect()];
    }
    groups
}

/// One group's [`FetchSession`], driven to the end within `share` bytes of the budget.
/// `view` is the metadata the caller made sure holds the topics. Returns the ranges' data in
/// order and the stored batches they ended inside of.
#[allow(clippy::too_many_arguments)]
async fn read_group(
    cluster: &Cluster,
    mut view: Arc<crate::cluster::ClusterView>,
    ranges: &[OffsetRange],
    inner: &[bool],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
    share: usize,
    carried: std::collections::HashMap<(Topic, i32), Carried>,
    fit: bool,
) -> Result<(Vec<RangeData>, Vec<session::Straddling>), Error> {
    let mut session = FetchSession::new(ranges, cfg, fetcher);
    session.limit_room(share);
    if fit {
        session.fit_to_room();
    }
    session.mark_inner(inner);
    let topics = session.topics();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    session.start_with(carried, &view);
    let mut retries = 0u32;
    let mut first_failure: Option<tokio::time::Instant> = None;
    while !session.is_done() {
        let requests = session.next_requests(&view, &fetcher.state())?;
        let mut tasks = tokio::task::JoinSet::new();
        for req in requests {
            let conn = match cluster.connection(req.leader).await {
                Ok(c) => c,
                Err(e) => {
                    session.on_error(e)?;
                    continue;
                }
            };
            let permit = fetcher
                .reserve_frames(&cluster.config().frame_pool, req.reserve)
                .await?;
            let pool = cfg.sessions.then(|| cluster.fetch_sessions().clone());
            tasks.spawn(async move {
                let answer = send(pool.as_ref(), &conn, &req, permit).await;
                (conn, req, answer)
            });
        }
        let mut answers = Vec::with_capacity(tasks.len());
        while let Some(joined) = tasks.join_next().await {
            answers.push(joined.map_err(|e| {
                Error::from(ErrorKind::Task {
                    what: "fetch request",
                    reason: e.to_string(),
                })
            })?);
        }
        // Responses larger than their reservation (a first batch larger than the limit,
        // KIP-74) wait for room, so they go last: by then every other response of this round
        // holds only what it keeps, and the room they wait for is never held by this call's
        // own reservations (waiting for those would never end).
        let oversized = |req: &LeaderRequest, a: &Result<Answer, Error>| matches!(a, Ok(a) if a.size > req.reserve);
        answers.sort_by_key(|(_, req, a)| oversized(req, a));
        let mut reserved_by_oversized: usize = answers
            .iter()
            .filter(|(_, req, a)| oversized(req, a))
            .map(|(_, req, _)| req.reserve)
            .sum();
        let mut cut = false;
        for (conn, req, answer) in answers {
            let mut a = match answer {
                Ok(a) => a,
                Err(e) => {
                    session.on_error(e)?;
                    continue;
                }
            };
            if a.size > req.reserve {
                // Account for all of it, waiting for room unless this call alone would
                // overflow the budget.
                reserved_by_oversized -= req.reserve;
                if session.cut_instead_of(a.size - req.reserve) {
                    // Fitting the budget: the ranges end where they are (this answer's
                    // partitions are read by a later batch).
                    cut = true;
                    continue;
                }
                let needed = session.held() + reserved_by_oversized + a.size;
                if needed > fetcher.total() {
                    return Err(oversized_error(&a.view, &session, needed, fetcher.total()));
                }
                let more = fetcher
                    .reserve_frames(&cluster.config().frame_pool, a.size - req.reserve)
                    .await?;
                a.permit.merge(more);
            }
            // The permit is released when the last chunk keeping it is dropped: a response
            // whose data is all dropped gives its bytes back right away.
            session.on_response(
                &mut fetcher.state(),
                &req,
                conn.broker(),
                a.view,
                a.size,
                Some(Arc::new(a.permit)),
            )?;
        }
        if cut {
            session.cut_at_positions();
        }
        match session.end_round() {
            RoundEnd::Done | RoundEnd::Continue => {}
            RoundEnd::Retry(e) => {
                retries += 1;
                let since = *first_failure.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= cluster.config().retry_timeout {
                    return Err(e.gave_up(retries, since.elapsed()));
                }
                // A broker that cannot be reached is worth a warning per attempt; a leader
                // moving is routine.
                if matches!(
                    e.root().kind(),
                    ErrorKind::Connect { .. }
                        | ErrorKind::Disconnected { .. }
                        | ErrorKind::Timeout { .. }
                        | ErrorKind::Bootstrap { .. }
                ) {
                    tracing::warn!(attempt = retries, "fetch retrying: {e}");
                } else {
                    tracing::debug!(attempt = retries, "fetch round retried: {e}");
                }
                tokio::time::sleep(backoff(cfg.retry_backoff, retries, Duration::from_secs(1)))
                    .await;
                // A refresh that cannot reach any broker keeps the old view: the next round's
                // connections fail and are retried the same way, until the deadline.
                match cluster.refresh(Some(&topic_refs)).await {
                    Ok(v) => view = v,
                    Err(e) if e.is_retriable() => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let straddling = session.take_straddling();
    Ok((session.finish(&mut fetcher.state()), straddling))
}

/// A response that cannot fit the budget. A broker answers more than was asked only with a
/// first record batch larger than the limit (KIP-74): one batch cannot be split, so only a
/// larger budget helps; the error names that batch.
fn oversized_error(
    view: &FetchView,
    session: &FetchSession,
    needed: usize,
    budget: usize,
) -> Error {
    // The largest first batch in the response: base offset (8 bytes) and batch length (4
    // bytes, counting what follows it) open every record batch.
    let largest = view
        .partitions
        .iter()
        .filter_map(|p| {
            let head = p.records.get(..12)?;
            let base = i64::from_be_bytes(head.get(..8)?.try_into().ok()?);
            let len = i32::from_be_bytes(head.get(8..12)?.try_into().ok()?);
            let size = usize::try_from(len).ok()?.saturating_add(12);
            Some((size, p, base))
        })
        .max_by_key(|(size, _, _)| *size);
    let (whole_batch, what, fix) = match largest {
        Some((size, p, base)) if size > budget => (
            false,
            format!(
                "the record batch of {}-{} at offset {base} ({size} bytes)",
                p.topic, p.partition
            ),
            "a record batch cannot be split: raise memory.budget.bytes above its size",
        ),
        _ => (
            true,
            format!(
                "the batch (ranges {}) with {} bytes fetched so far",
                session.describe_ranges(),
                session.held()
            ),
            "lower maxOffsetsPerTrigger (or maxRatePerPartition) so a batch holds less, or \
             raise memory.budget.bytes",
        ),
    };
    ErrorKind::BudgetExceeded {
        whole_batch,
        what,
        needed,
        budget,
        fix,
    }
    .into()
}

/// Long-poll while caught up: one Fetch per leader at each partition's position, which the
/// broker holds until `fetch.min.bytes` arrived or `fetch.max.wait.ms` passed (the Java
/// consumer's idle poll), so an idle stream costs one request per leader per wait and a new
/// record is seen as soon as it is written. Returns the ends each answered partition reports
/// (log start, high watermark or last stable offset), from which the next batch is planned.
///
/// The records the answer holds are kept, validated as a batch's fetch validates them (CRC,
/// control batches, aborted transactions, the leader epoch of the last batch read), for the
/// partitions' next ranges, as carried batches are: the batch planned from the answer's ends
/// is read from the answer, where a second Fetch would be one more round trip between a
/// record's append and its delivery. Each leader's poll may bring back up to its share of a quarter of
/// the budget, reserved before it is sent; when that room is not free (the caller holds its
/// batches), the poll asks for no data (1 byte) and the batch fetches its ranges. Partitions
/// whose leader is unknown or whose answer carries an error are left out (the next snapshot
/// sees them afresh); a partition whose answer is anything but plain data (a diverging epoch,
/// a preferred read replica, records that do not decode) keeps no data, and its batch's
/// fetch meets the same answer and handles it.
pub async fn wait_for_data(
    cluster: &Cluster,
    positions: &[(TopicPartition, i64)],
    cfg: &FetchConfig,
    fetcher: &Fetcher,
) -> Result<Vec<(TopicPartition, ObservedEnds)>, Error> {
    let view = cluster.view();
    // Per leader, each partition asked: its position, leader epoch and topic id.
    type Part<'p> = (&'p TopicPartition, i64, i32, [u8; 16]);
    let mut by_leader: std::collections::BTreeMap<i32, Vec<Part<'_>>> = Default::default();
    for (tp, pos) in positions {
        if let Ok((leader, epoch)) = view.leader(&tp.topic, tp.partition) {
            let id = view.topic(&tp.topic).map_or([0; 16], |t| t.id);
            by_leader
                .entry(leader)
                .or_default()
                .push((tp, *pos, epoch, id));
        }
    }
    let iso = cfg.params.isolation;
    let leaders = by_leader.len().max(1);
    let polls = by_leader.into_iter().map(|(leader, parts)| {
        async move {
            let conn = cluster.connection(leader).await?;
            let part_max = usize::try_from(cfg.partition_max_bytes.max(1)).unwrap_or(1);
            let want = (fetcher.total() / CARRY_SHARE / leaders)
                .min(usize::try_from(cfg.params.max_bytes.max(1)).unwrap_or(1))
                .min(part_max.saturating_mul(parts.len()));
            // Room for the answer's records, or a poll that asks for none.
            let mut hold = fetcher.try_reserve(want).filter(|_| want > 1);
            let (part_bytes, max_bytes) = match hold {
                Some(_) => (
                    cfg.partition_max_bytes,
                    i32::try_from(want).unwrap_or(i32::MAX),
                ),
                None => (1, 1),
            };
            // Sorted by topic, then partition: one entry per topic below, and the answer's
            // partitions found by binary search.
            let mut parts = parts;
            parts.sort_unstable_by(|a, b| {
                (a.0.topic.as_str(), a.0.partition).cmp(&(b.0.topic.as_str(), b.0.partition))
            });
            let mut topics: Vec<fetch::TopicFetch> = Vec::new();
            let mut names = std::collections::HashMap::new();
            {
                let state = fetcher.state();
                for &(tp, pos, epoch, id) in &parts {
                    // KIP-320: the records kept are validated as the batch's fetch would be.
                    let last_fetched_epoch = state
                        .last_fetched(&tp.topic, tp.partition)
                        .filter(|f| f.position == pos)
                        .map_or(-1, |f| f.epoch);
                    let partition = fetch::PartitionFetch {
                        partition: tp.partition,
                        fetch_offset: pos,
                        partition_max_bytes: part_bytes,
                        current_leader_epoch: epoch,
                        last_fetched_epoch,
                    };
                    match topics.last_mut() {
                        Some(t) if t.name == *tp.topic => t.partitions.push(partition),
                        _ => {
                            names
                                .entry(id)
                                .or_insert_with(|| Arc::<str>::from(&tp.topic));
                            topics.push(fetch::TopicFetch {
                                name: tp.topic.to_string(),
                                id,
                                partitions: vec![partition],
                            });
                        }
                    }
                }
            }
            let mut version = conn.version::<Fetch>()?;
            if topics.iter().any(|t| t.id == [0; 16]) {
                version = version.min(fetch::FIRST_TOPIC_ID_VERSION - 1);
            }
            let mut params = cfg.params;
            params.max_bytes = max_bytes;
            let asked = Asked {
                params: &params,
                topics: &topics,
                rack: "",
                names: &names,
            };
            let pool = cfg.sessions.then(|| cluster.fetch_sessions());
            let (answer, size) = round_trip(pool, &conn, leader, asked, version).await?;
            // Keep exactly the answer's size of the reservation; a first batch larger than
            // the limit (KIP-74) is kept only if the rest is free now.
            if let Some(permit) = hold.as_mut() {
                if size <= want {
                    drop(permit.split(want - size));
                } else if let Some(more) = fetcher.try_reserve(size - want) {
                    permit.merge(more);
                } else {
                    hold = None;
                }
            }
            let hold = hold.map(Arc::new);
            let mut ends = Vec::with_capacity(answer.partitions.len());
            for p in answer.partitions {
                if p.error.err().is_some() {
                    continue;
                }
                let end = session::partition_end(&p, iso);
                let asked = parts
                    .binary_search_by(|a| {
                        (a.0.topic.as_str(), a.0.partition).cmp(&(&*p.topic, p.partition))
                    })
                    .ok()
                    .and_then(|i| parts.get(i))
                    .map(|&(tp, pos, epoch, id)| (tp, (pos, epoch, id)));
                if let (Some(hold), Some((_, at))) = (&hold, asked) {
                    let plain = p.diverging_epoch.is_none()
                        && (p.preferred_read_replica < 0 || p.preferred_read_replica == leader);
                    if plain && !p.records.is_empty() {
                        keep_polled(&p, at, end, hold, conn.broker(), cfg, fetcher);
                    }
                }
                // The key the caller asked with (its topic shared, no allocation).
                let tp = asked.map_or_else(
                    || TopicPartition::new(p.topic.clone(), p.partition),
                    |(tp, _)| tp.clone(),
                );
                ends.push((
                    tp,
                    ObservedEnds {
                        log_start: p.log_start_offset,
                        end,
                    },
                ));
            }
            Ok::<_, Error>(ends)
        }
    });
    let mut out = Vec::new();
    for r in futures_join_all(polls).await {
        out.extend(r?);
    }
    Ok(out)
}

/// Keeps a long-poll's records of one partition, asked at `pos` under `leader_epoch` of the
/// topic `topic_id`, for its next range (see [`wait_for_data`]); records that do not decode
/// are not kept.
fn keep_polled(
    p: &fetch::FetchedPartition,
    (pos, leader_epoch, topic_id): (i64, i32, [u8; 16]),
    end: i64,
    hold: &Arc<OwnedSemaphorePermit>,
    broker: &BrokerName,
    cfg: &FetchConfig,
    fetcher: &Fetcher,
) {
    let opts = DecodeOptions::new()
        .check_crc(cfg.check_crcs)
        .max_decompressed(cfg.max_decompressed)
        .fetch_offset(pos)
        .until(end)
        .isolation(cfg.params.isolation);
    let walked = match walk_answer(p, opts, &fetcher.scratch) {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!(
                "long-poll answer of {}-{} at {pos} not kept: {e}",
                p.topic,
                p.partition
            );
            return;
        }
    };
    if walked.next > pos {
        fetcher.state().put_carried(
            &p.topic,
            p.partition,
            Carried {
                from: pos,
                until: walked.next,
                batches: walked.batches,
                broker: broker.clone(),
                leader_epoch,
                topic_id,
                permit: hold.clone(),
            },
        );
    }
}

/// Closes the fetch sessions (KIP-227) this client holds open with its brokers: one request
/// per session naming it at epoch -1 with no partitions, so that the broker frees its slot
/// now rather than when it evicts the session (a broker keeps
/// `max.incremental.fetch.session.cache.slots`, 1,000 by default, for all its clients, and a
/// consumer that restarts often would otherwise fill them). Best effort within `timeout`:
/// returns how many the brokers answered; failures are logged at debug level.
pub async fn close_sessions(cluster: &Cluster, timeout: Duration) -> usize {
    let open = cluster.fetch_sessions().drain_open();
    let closes = open.into_iter().map(|(node, id)| async move {
        let conn = cluster.connection(node).await?;
        let version = conn.version::<Fetch>()?;
        let mut params = FetchParams::default();
        params.max_wait_ms = 0;
        params.min_bytes = 0;
        params.max_bytes = 1;
        let session = fetch::SessionFields { id, epoch: -1 };
        let body = fetch::request_in_session(&params, &[], &[], "", session, version).map_err(
            |source| {
                Error::from(ErrorKind::Protocol {
                    broker: conn.broker().clone(),
                    source,
                })
            },
        )?;
        conn.round_trip::<Fetch>(&body, version).await?;
        Ok::<_, Error>(())
    });
    match tokio::time::timeout(timeout, futures_join_all(closes)).await {
        Ok(done) => done
            .into_iter()
            .filter(|r| {
                if let Err(e) = r {
                    tracing::debug!("closing a fetch session: {e}");
                }
                r.is_ok()
            })
            .count(),
        Err(_) => {
            tracing::debug!("closing the fetch sessions took longer than {timeout:?}");
            0
        }
    }
}

/// Runs the futures concurrently and returns their outputs in order (without a dependency
/// on the futures crate).
async fn futures_join_all<F: std::future::Future>(
    futs: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// A response as received: decoded, its size, and its reservation of the budget.
struct Answer {
    view: FetchView,
    size: usize,
    permit: OwnedSemaphorePermit,
}

/// Sends one request and decodes its response (the bounded, zero-copy decoder: `records`
/// are slices of the frame). The reservation shrinks to the response's size.
async fn send(
    sessions: Option<&Arc<SessionPool>>,
    conn: &BrokerConnection,
    req: &LeaderRequest,
    mut permit: OwnedSemaphorePermit,
) -> Result<Answer, Error> {
    let mut version = conn.version::<Fetch>()?;
    // Fetch v13+ names topics by id; without ids (an older Metadata answer), stay below it.
    if !req.has_topic_ids() {
        version = version.min(fetch::FIRST_TOPIC_ID_VERSION - 1);
    }
    let asked = Asked {
        params: &req.params,
        topics: &req.topics,
        rack: &req.rack,
        names: &req.names,
    };
    let (view, size) = round_trip(sessions, conn, req.leader, asked, version).await?;
    if size < req.reserve {
        // Keep exactly the response's size of the reservation.
        drop(permit.split(req.reserve - size));
    }
    Ok(Answer { view, size, permit })
}

/// What one Fetch asks: every partition wanted.
#[derive(Clone, Copy)]
struct Asked<'a> {
    params: &'a FetchParams,
    topics: &'a [fetch::TopicFetch],
    rack: &'a str,
    names: &'a std::collections::HashMap<[u8; 16], Arc<str>>,
}

/// One Fetch round trip to broker `node` at `version`, in one of the client's fetch sessions
/// with it (from `sessions`) when the version has them (v7+; KIP-227), else sessionless. The answer lists every partition asked either way (a session's answer gets
/// back the partitions it left out, see `incremental.rs`); a broker that lost the session
/// (evicted, restarted) or its epoch is asked again at once, in full. Returns the answer and
/// the size of the frame it came in.
async fn round_trip(
    sessions: Option<&Arc<SessionPool>>,
    conn: &BrokerConnection,
    node: i32,
    asked: Asked<'_>,
    version: i16,
) -> Result<(FetchView, usize), Error> {
    let protocol = |source| {
        Error::from(ErrorKind::Protocol {
            broker: conn.broker().clone(),
            source,
        })
    };
    let mut lent = sessions
        .filter(|_| version >= 7)
        .and_then(|p| p.checkout(node));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let body = match lent.as_mut() {
            Some(s) => {
                let r = s.prepare(asked.topics);
                fetch::request_in_session(
                    asked.params,
                    &r.topics,
                    &r.forgotten,
                    asked.rack,
                    r.session,
                    version,
                )
            }
            None => fetch::request_from_rack(asked.params, asked.topics, asked.rack, version),
        }
        .map_err(protocol)?;
        // A failure here drops the lent session with its request in flight, which resets it.
        let frame = conn.round_trip::<Fetch>(&body, version).await?;
        let size = frame.len();
        let (_, mut view) = fetch::decode(frame, version, asked.names).map_err(protocol)?;
        if let Some(s) = lent.as_mut() {
            if let incremental::Completed::Resend(code) = s.complete(&mut view) {
                if attempt == 1 {
                    tracing::debug!(broker = %conn.broker(), %code, "fetch session lost: asking again in full");
                    continue;
                }
            }
        }
        return Ok((view, size));
    }
}
