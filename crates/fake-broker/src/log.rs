//! One partition's in-memory log: stored batches, offsets, open and aborted transactions.
//!
//! A stored batch keeps its base offset apart from the rest of its bytes (`body`, which starts
//! at `batchLength`). The base offset is outside the CRC, so the broker can serve one encoded
//! body many times at different offsets, and write it to the socket without copying.

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{control_type, split_batches, BatchHeader, ControlType};
use crate::error::FakeError;

/// A batch as stored: everything after `baseOffset` is shared, immutable bytes.
#[derive(Debug, Clone)]
pub(crate) struct StoredBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub control: bool,
    /// The batch from `batchLength` on (its `partitionLeaderEpoch`, bytes 4–8, stamped with
    /// the leader epoch it was appended under).
    pub body: Bytes,
}

impl StoredBatch {
    /// Size on the wire, `baseOffset` included.
    pub fn wire_len(&self) -> usize {
        8 + self.body.len()
    }
}

/// An aborted transaction's span in one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
}

/// One partition's log.
#[derive(Debug, Default)]
pub(crate) struct PartitionLog {
    pub batches: Vec<StoredBatch>,
    pub log_start: i64,
    /// Log end offset = high watermark (there are no followers).
    pub end: i64,
    /// producer id → first offset of its open transaction.
    pub open_txns: Vec<(i64, i64)>,
    pub aborted: Vec<AbortedTransaction>,
    /// The leader epoch batches are appended under (stamped in their header, as a Kafka
    /// leader does).
    pub epoch: i32,
    /// The leader-epoch cache (Kafka's `LeaderEpochFileCache`): each epoch and the offset it
    /// started at, ascending. Empty: every batch is epoch 0 from offset 0.
    pub epochs: Vec<(i32, i64)>,
}

impl PartitionLog {
    pub fn high_watermark(&self) -> i64 {
        self.end
    }

    /// Last stable offset: the first offset of the oldest open transaction, else the HW.
    pub fn last_stable_offset(&self) -> i64 {
        self.open_txns
            .iter()
            .map(|(_, first)| *first)
            .min()
            .unwrap_or(self.end)
    }

    /// Appends every batch in `bytes` at the log end; returns (first base offset, new end).
    pub fn append(&mut self, bytes: &Bytes) -> Result<(i64, i64), FakeError> {
        let batches = split_batches(bytes)?;
        if batches.is_empty() {
            return Err(FakeError::MalformedBatch {
                position: 0,
                reason: "no batch in an empty buffer".into(),
            });
        }
        let first = self.end;
        for (h, b) in batches {
            self.push(h, b.slice(8..), control_type(&b));
        }
        Ok((first, self.end))
    }

    /// `body` (from `batchLength` on) with `partitionLeaderEpoch` set to the log's epoch: a
    /// copy only when the header holds another (the field is outside the CRC).
    pub fn stamp(&self, body: Bytes) -> Bytes {
        let epoch = self.epoch.to_be_bytes();
        match body.get(4..8) {
            Some(e) if e != epoch => {
                let mut v = body.to_vec();
                if let Some(e) = v.get_mut(4..8) {
                    e.copy_from_slice(&epoch);
                }
                Bytes::from(v)
            }
            _ => body,
        }
    }

    /// A new leader epoch from the log end on (a leader elected: Kafka's
    /// `maybeAssignEpochStartOffset`). Cache entries starting at or past the end go.
    pub fn assign_epoch(&mut self, epoch: i32) {
        if self.epochs.is_empty() && epoch != 0 {
            self.epochs.push((self.epoch, 0));
        }
        let end = self.end;
        self.epochs.retain(|&(_, start)| start < end);
        self.epochs.push((epoch, end));
        self.epoch = epoch;
    }

    /// Kafka's `LeaderEpochFileCache.endOffsetFor`: the largest epoch at or below `requested`
    /// and its end offset (the next epoch's start; the log end for the current epoch);
    /// (-1, -1) when `requested` is -1 or above every epoch known.
    pub fn end_offset_for(&self, requested: i32) -> (i32, i64) {
        let epochs: &[(i32, i64)] = if self.epochs.is_empty() {
            &[(0, 0)]
        } else {
            &self.epochs
        };
        let latest = epochs.last().map_or(0, |e| e.0);
        if requested < 0 {
            return (-1, -1);
        }
        if requested == latest {
            return (latest, self.end);
        }
        let Some(&(_, higher_start)) = epochs.iter().find(|e| e.0 > requested) else {
            return (-1, -1);
        };
        match epochs.iter().rev().find(|e| e.0 <= requested) {
            Some(&(floor, _)) => (floor, higher_start),
            None => (requested, higher_start),
        }
    }

    /// An unclean election's effect on the new leader's log: everything from the first batch
    /// holding an offset at or past `offset` is gone (whole batches, as a follower's log ends).
    /// Returns the new end.
    pub fn truncate_to(&mut self, offset: i64) -> i64 {
        let keep = self.batches.partition_point(|b| b.last_offset < offset);
        self.batches.truncate(keep);
        self.end = self
            .batches
            .last()
            .map_or(self.log_start, |b| b.last_offset + 1)
            .max(self.log_start);
        let end = self.end;
        self.epochs.retain(|&(_, start)| start < end || start == 0);
        self.open_txns.retain(|&(_, first)| first < end);
        self.aborted.retain(|a| a.last_offset < end);
        end
    }

    /// Appends a batch body (from `batchLength` on) at the log end.
    pub fn push(&mut self, h: BatchHeader, body: Bytes, marker: Option<ControlType>) {
        let body = self.stamp(body);
        let base = self.end;
        let last = base + i64::from(h.last_offset_delta);
        if h.is_transactional() && h.producer_id >= 0 {
            let open = self.open_txns.iter().position(|(p, _)| *p == h.producer_id);
            if h.is_control() {
                if let Some(i) = open {
                    let (pid, first) = self.open_txns.swap_remove(i);
                    if marker == Some(ControlType::Abort) {
                        self.aborted.push(AbortedTransaction {
                            producer_id: pid,
                            first_offset: first,
                            last_offset: base,
                        });
                    }
                }
            } else if open.is_none() {
                self.open_txns.push((h.producer_id, base));
            }
        }
        self.batches.push(StoredBatch {
            base_offset: base,
            last_offset: last,
            max_timestamp: h.max_timestamp,
            control: h.is_control(),
            body,
        });
        self.end = last + 1;
    }

    /// Moves the log end without data (offsets removed by compaction).
    pub fn skip(&mut self, n: i64) {
        self.end += n.max(0);
    }

    /// Retention: the log starts at `offset` (clamped to the end); whole batches below go.
    pub fn advance_start(&mut self, offset: i64) {
        let offset = offset.min(self.end);
        if offset <= self.log_start {
            return;
        }
        self.log_start = offset;
        let keep = self.batches.partition_point(|b| b.last_offset < offset);
        self.batches.drain(..keep);
        self.aborted.retain(|a| a.last_offset >= offset);
    }

    /// Index of the first batch whose last offset is at or above `offset`.
    pub fn first_batch_at(&self, offset: i64) -> usize {
        self.batches.partition_point(|b| b.last_offset < offset)
    }

    /// Aborted transactions overlapping `[from, to]`, sorted by first offset.
    pub fn aborted_in(&self, from: i64, to: i64) -> Vec<AbortedTransaction> {
        let mut v: Vec<_> = self
            .aborted
            .iter()
            .filter(|a| a.first_offset <= to && a.last_offset >= from)
            .copied()
            .collect();
        v.sort_by_key(|a| a.first_offset);
        v
    }

    /// ListOffsets by timestamp: the first offset whose record timestamp is ≥ `ts`, with that
    /// record's timestamp; `None` if there is none. Decodes at most one batch.
    pub fn offset_for_timestamp(&self, ts: i64) -> Option<(i64, i64)> {
        let i = self
            .batches
            .iter()
            .position(|b| !b.control && b.max_timestamp >= ts)?;
        self.records_of(i)
            .into_iter()
            .find(|(o, t)| *t >= ts && *o >= self.log_start)
    }

    /// ListOffsets −3 (KIP-734): the offset and timestamp of the record with the largest
    /// timestamp (the first such record).
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        let mut best: Option<usize> = None;
        for (i, b) in self.batches.iter().enumerate() {
            if b.control {
                continue;
            }
            if best.is_none_or(|j| b.max_timestamp > self.batches[j].max_timestamp) {
                best = Some(i);
            }
        }
        let i = best?;
        let max = self.batches[i].max_timestamp;
        self.records_of(i).into_iter().find(|(_, t)| *t == max)
    }

    /// (offset, timestamp) of every record of batch `i`, decoding it.
    fn records_of(&self, i: usize) -> Vec<(i64, i64)> {
        let b = &self.batches[i];
        let mut whole = Vec::with_capacity(b.wire_len());
        whole.extend_from_slice(&b.base_offset.to_be_bytes());
        whole.extend_from_slice(&b.body);
        let mut buf = Bytes::from(whole);
        match RecordBatchDecoder::decode(&mut buf) {
            Ok(set) => set
                .records
                .iter()
                .map(|r| (r.offset, r.timestamp))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{encode_batch, encode_control_batch, BatchOptions, FakeRecord};

    fn recs(n: usize, ts0: i64) -> Vec<FakeRecord> {
        (0..n)
            .map(|i| FakeRecord::value(format!("r{i}")).with_timestamp(ts0 + i as i64))
            .collect()
    }

    #[test]
    fn append_rewrites_offsets_and_tracks_transactions() {
        let mut log = PartitionLog::default();
        let b = encode_batch(&recs(3, 100), &BatchOptions::default()).unwrap();
        assert_eq!(log.append(&b).unwrap(), (0, 3));
        assert_eq!(log.append(&b).unwrap(), (3, 6));
        let txn = BatchOptions {
            producer_id: 9,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
            ..BatchOptions::default()
        };
        log.append(&encode_batch(&recs(2, 200), &txn).unwrap())
            .unwrap();
        assert_eq!(log.last_stable_offset(), 6);
        assert_eq!(log.high_watermark(), 8);
        log.append(&encode_control_batch(9, 0, ControlType::Abort, 300).unwrap())
            .unwrap();
        assert_eq!(log.last_stable_offset(), 9);
        assert_eq!(
            log.aborted_in(0, 100),
            vec![AbortedTransaction {
                producer_id: 9,
                first_offset: 6,
                last_offset: 8
            }]
        );
        assert_eq!(log.aborted_in(0, 5), vec![]);
        assert_eq!(log.offset_for_timestamp(101), Some((1, 101)));
        assert_eq!(log.offset_for_timestamp(201), Some((7, 201)));
        assert_eq!(log.offset_for_timestamp(1000), None);
        assert_eq!(log.max_timestamp(), Some((7, 201)));
        log.advance_start(4);
        assert_eq!(log.batches[0].base_offset, 3);
        assert_eq!(log.first_batch_at(4), 0);
    }

    /// Kafka's `LeaderEpochFileCache.endOffsetFor` on a log led at epochs 0 [0, 4), 1 [4, 6),
    /// then truncated to 5 by an unclean election at epoch 2.
    #[test]
    fn epoch_ends_follow_the_leader_epoch_cache() {
        let mut log = PartitionLog::default();
        let one = encode_batch(&recs(1, 0), &BatchOptions::default()).unwrap();
        for _ in 0..4 {
            log.append(&one).unwrap();
        }
        assert_eq!(
            log.end_offset_for(0),
            (0, 4),
            "the current epoch ends at the log end"
        );
        log.assign_epoch(1);
        log.append(&one).unwrap();
        log.append(&one).unwrap();
        // Appends are stamped with the epoch they were written under.
        assert_eq!(&log.batches[4].body[4..8], &1i32.to_be_bytes());
        assert_eq!(&log.batches[0].body[4..8], &0i32.to_be_bytes());
        assert_eq!(log.end_offset_for(0), (0, 4));
        assert_eq!(log.end_offset_for(1), (1, 6));
        assert_eq!(log.end_offset_for(7), (-1, -1), "above every epoch known");
        assert_eq!(log.end_offset_for(-1), (-1, -1));
        assert_eq!(log.truncate_to(5), 5);
        log.assign_epoch(2);
        log.append(&one).unwrap();
        assert_eq!(
            log.end_offset_for(1),
            (1, 5),
            "epoch 1 now ends at the truncation"
        );
        assert_eq!(log.end_offset_for(2), (2, 6));
        // An epoch between known ones answers the largest below it.
        log.assign_epoch(5);
        assert_eq!(log.end_offset_for(3), (2, 6));
    }
}
