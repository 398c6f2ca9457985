//! Fetch semantics over the batch walk: fetch offset, `until`, control batches, read_committed,
//! and the offset where the next fetch starts.
use bytes::Bytes;
use kdirect_proto::IsolationLevel;

use super::batch::{BatchHeader, Batches, RecordBatch, Tail};
use super::compression::Scratch;
use super::error::DecodeError;
use super::records::Records;
use super::txn::{AbortedTransaction, ControlRecordType, TxnFilter};

/// Options for [`RecordBatchReader`]. Build with [`DecodeOptions::new`] and the setters.
#[derive(Debug, Clone)]
pub struct DecodeOptions {
    check_crc: bool,
    max_decompressed: usize,
    fetch_offset: i64,
    until: i64,
    isolation: IsolationLevel,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions::new()
    }
}

impl DecodeOptions {
    /// The default decompressed-size cap: 128 MiB per batch.
    pub const DEFAULT_MAX_DECOMPRESSED: usize = 128 << 20;

    /// CRC checked, 128 MiB cap, fetch offset 0, no `until`, read_uncommitted.
    pub fn new() -> DecodeOptions {
        DecodeOptions {
            check_crc: true,
            max_decompressed: Self::DEFAULT_MAX_DECOMPRESSED,
            fetch_offset: 0,
            until: i64::MAX,
            isolation: IsolationLevel::ReadUncommitted,
        }
    }
    /// Verify each batch's CRC32C (default true, like the Java client's `check.crcs`).
    pub fn check_crc(mut self, check: bool) -> Self {
        self.check_crc = check;
        self
    }
    /// The most bytes one batch may decompress to; more is a typed error.
    pub fn max_decompressed(mut self, cap: usize) -> Self {
        self.max_decompressed = cap;
        self
    }
    /// The offset the fetch asked for: records below it are skipped (a fetch can return a batch
    /// that starts earlier).
    pub fn fetch_offset(mut self, offset: i64) -> Self {
        self.fetch_offset = offset;
        self
    }
    /// Exclusive end: records at or past it are not returned, and reading stops at the first
    /// batch that starts there.
    pub fn until(mut self, offset: i64) -> Self {
        self.until = offset;
        self
    }
    /// The isolation level.
    pub fn isolation(mut self, isolation: IsolationLevel) -> Self {
        self.isolation = isolation;
        self
    }
    /// Whether CRCs are checked.
    pub fn checks_crc(&self) -> bool {
        self.check_crc
    }
    /// The decompressed-size cap.
    pub fn decompressed_cap(&self) -> usize {
        self.max_decompressed
    }
}

/// Reads the data batches of one partition's `records` bytes with fetch semantics:
///
/// - records below the fetch offset and at or past `until` are skipped;
/// - a whole batch at or past `until` ends the read and proves that the offsets between the
///   last batch read and `until` hold no records (compacted away, or any other gap): the
///   position moves to `until`, and the batch is kept ([`take_past_until`](Self::take_past_until))
///   for the range that starts there;
/// - control batches are never returned but advance the position;
/// - with [`IsolationLevel::ReadCommitted`], batches of aborted transactions are skipped whole;
/// - a truncated final batch ends the read without error ([`tail`](Self::tail));
/// - [`next_offset`](Self::next_offset) says where the next fetch starts, assuming every
///   returned batch is consumed.
///
/// It owns a [`Scratch`] for decompression; move one in and out with
/// [`with_scratch`](Self::with_scratch) / [`into_scratch`](Self::into_scratch) to reuse it
/// across fetch responses.
#[derive(Debug)]
pub struct RecordBatchReader {
    batches: Batches,
    opts: DecodeOptions,
    txn: TxnFilter,
    scratch: Scratch,
    next_offset: i64,
    /// The `partition_leader_epoch` of the batch that last moved `next_offset` (-1: none).
    last_epoch: i32,
    reached_until: bool,
    /// The whole batch at or past `until` that ended the read.
    past_until: Option<RecordBatch>,
    failed: bool,
}

impl RecordBatchReader {
    /// A reader over `records` (a Fetch response partition's `records` bytes).
    pub fn new(records: Bytes, opts: DecodeOptions) -> RecordBatchReader {
        RecordBatchReader {
            batches: Batches::new(records, opts.check_crc),
            next_offset: opts.fetch_offset,
            last_epoch: -1,
            opts,
            txn: TxnFilter::default(),
            scratch: Scratch::new(),
            reached_until: false,
            past_until: None,
            failed: false,
        }
    }

    /// The partition's aborted transactions from the Fetch response; used only with
    /// [`IsolationLevel::ReadCommitted`]. Their order does not matter.
    pub fn with_aborted_transactions(
        mut self,
        aborted: impl IntoIterator<Item = AbortedTransaction>,
    ) -> Self {
        if self.opts.isolation == IsolationLevel::ReadCommitted {
            self.txn = TxnFilter::new(aborted);
        }
        self
    }

    /// Uses `scratch` (e.g. from the previous response) for decompression.
    pub fn with_scratch(mut self, scratch: Scratch) -> Self {
        self.scratch = scratch;
        self
    }

    /// Gives the scratch buffer back for the next response.
    pub fn into_scratch(self) -> Scratch {
        self.scratch
    }

    /// The offset where the next fetch starts: after the last whole batch read (data, control
    /// or aborted), capped at `until`; `until` once a whole batch at or past it was met (see
    /// [`take_past_until`](Self::take_past_until)); the fetch offset if no batch was read.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The `partition_leader_epoch` of the last whole batch read (data, control or aborted)
    /// that moved [`next_offset`](Self::next_offset), -1 if none did: the "last fetched epoch"
    /// a consumer sends with its next fetch at `next_offset` (KIP-320).
    pub fn last_epoch(&self) -> i32 {
        self.last_epoch
    }

    /// How the buffer ended, once [`next_batch`](Self::next_batch) returned `None` (and not
    /// because of `until`).
    pub fn tail(&self) -> Option<Tail> {
        self.batches.tail()
    }

    /// Whether reading stopped at a batch starting at or past `until`.
    pub fn reached_until(&self) -> bool {
        self.reached_until
    }

    /// The whole batch at or past `until` that ended the read, if one did: the first batch of
    /// the partition's next range (its records are not bounded to any range yet).
    pub fn take_past_until(&mut self) -> Option<RecordBatch> {
        self.past_until.take()
    }

    /// Byte position of the next batch in the buffer.
    pub fn position(&self) -> usize {
        self.batches.position()
    }

    fn advance(&mut self, h: &BatchHeader) {
        let next = h.next_offset().min(self.opts.until);
        if next > self.next_offset {
            self.next_offset = next;
            self.last_epoch = h.partition_leader_epoch;
        }
    }

    /// The next data batch, or `Ok(None)` when the buffer (or the range) is done. After an
    /// error, returns `Ok(None)`.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, DecodeError> {
        if self.failed {
            return Ok(None);
        }
        let res = self.next_batch_inner();
        self.failed = res.is_err();
        res
    }

    fn next_batch_inner(&mut self) -> Result<Option<RecordBatch>, DecodeError> {
        loop {
            if self.reached_until {
                return Ok(None);
            }
            let Some(mut batch) = self.batches.next_batch()? else {
                return Ok(None);
            };
            let h = *batch.header();
            if h.base_offset >= self.opts.until {
                // Batches come in offset order, so no record lies between the last batch read
                // and this one: whatever of the range is left is a gap (a compacted log, an
                // aborted transaction's or a control batch's offsets removed), complete with
                // no records, as the Java consumer reads through it.
                self.reached_until = true;
                if self.opts.until > self.next_offset {
                    self.next_offset = self.opts.until;
                    // The epoch of a record batch at or past the new position: every offset
                    // below it was written under this epoch or an earlier one, so a fetch from
                    // the new position with it as its last fetched epoch is valid (KIP-320).
                    self.last_epoch = h.partition_leader_epoch;
                }
                self.past_until = Some(batch);
                return Ok(None);
            }
            if self.opts.isolation == IsolationLevel::ReadCommitted && h.has_producer_id() {
                self.txn.consume_up_to(h.last_offset());
                if h.is_control() {
                    if self.control_type(&batch)? == Some(ControlRecordType::Abort) {
                        self.txn.abort_marker(h.producer_id);
                    }
                } else if self.txn.is_aborted(&h) {
                    self.advance(&h);
                    continue;
                }
            }
            if h.is_control() || h.next_offset() <= self.opts.fetch_offset {
                self.advance(&h);
                continue;
            }
            batch.skip_below = self.opts.fetch_offset;
            batch.until = self.opts.until;
            self.advance(&h);
            return Ok(Some(batch));
        }
    }

    /// The type of a control batch's first record, `None` for an empty batch.
    fn control_type(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<Option<ControlRecordType>, DecodeError> {
        let mut records = batch.records(&mut self.scratch, self.opts.max_decompressed)?;
        match records.next() {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(r)) => ControlRecordType::parse(r.key()).map(Some).map_err(|kind| {
                DecodeError::new(kind, batch.position(), Some(batch.header().base_offset))
            }),
        }
    }

    /// The records of a batch from [`next_batch`](Self::next_batch), decompressed into the
    /// reader's scratch buffer when compressed.
    pub fn records<'a>(&'a mut self, batch: &'a RecordBatch) -> Result<Records<'a>, DecodeError> {
        batch.records(&mut self.scratch, self.opts.max_decompressed)
    }
}
