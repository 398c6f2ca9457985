//! read_committed filtering (KIP-98), as the Java client's `CompletedFetch` does it:
//!
//! - The broker's aborted transactions, (producerId, firstOffset) pairs, go into a min-heap by
//!   first offset (the broker's order is not trusted).
//! - For each batch with a producer id, every entry with `firstOffset <= batch.lastOffset` moves
//!   into a set of aborted producer ids.
//! - A control batch whose first record is an ABORT marker removes its producer id from the set.
//! - A transactional batch whose producer id is in the set is skipped whole.
//! - Control batches are never returned as data.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use super::batch::BatchHeader;
use super::error::{DecodeErrorKind, Field};

/// One aborted transaction from a Fetch response (read_committed only): the protocol layer's
/// type, the one kdirect has.
pub use kdirect_proto::api::fetch::AbortedTransaction;

/// The type of a control record (its key: version i16, type i16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlRecordType {
    /// Transaction abort marker (type 0).
    Abort,
    /// Transaction commit marker (type 1).
    Commit,
    /// Another type (e.g. KRaft's leader change, snapshot markers): ignored, as Java does.
    Unknown(i16),
}

impl ControlRecordType {
    /// Parses a control record key. Like the Java client, needs at least 4 bytes and a
    /// non-negative version.
    pub fn parse(key: Option<&[u8]>) -> Result<ControlRecordType, DecodeErrorKind> {
        let bad = |len: usize| DecodeErrorKind::BadLength {
            field: Field::ControlKey,
            length: len as i64,
        };
        let key = key.ok_or(bad(0))?;
        let Some(&[v0, v1, t0, t1]) = key.get(..4) else {
            return Err(bad(key.len()));
        };
        if i16::from_be_bytes([v0, v1]) < 0 {
            return Err(bad(key.len()));
        }
        Ok(match i16::from_be_bytes([t0, t1]) {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            t => ControlRecordType::Unknown(t),
        })
    }
}

/// The read_committed state for one partition's fetch response.
#[derive(Debug, Default, Clone)]
pub(crate) struct TxnFilter {
    pending: BinaryHeap<Reverse<(i64, i64)>>,
    aborted_producers: HashSet<i64>,
}

impl TxnFilter {
    pub(crate) fn new(aborted: impl IntoIterator<Item = AbortedTransaction>) -> TxnFilter {
        TxnFilter {
            pending: aborted
                .into_iter()
                .map(|a| Reverse((a.first_offset, a.producer_id)))
                .collect(),
            aborted_producers: HashSet::new(),
        }
    }

    /// Moves every aborted transaction starting at or before `offset` into the producer set.
    pub(crate) fn consume_up_to(&mut self, offset: i64) {
        while let Some(Reverse((first, _))) = self.pending.peek() {
            if *first > offset {
                break;
            }
            if let Some(Reverse((_, pid))) = self.pending.pop() {
                self.aborted_producers.insert(pid);
            }
        }
    }

    /// Applies an ABORT marker of `producer_id`.
    pub(crate) fn abort_marker(&mut self, producer_id: i64) {
        self.aborted_producers.remove(&producer_id);
    }

    /// Whether a (non-control) batch belongs to an aborted transaction.
    pub(crate) fn is_aborted(&self, h: &BatchHeader) -> bool {
        h.is_transactional() && self.aborted_producers.contains(&h.producer_id)
    }
}
