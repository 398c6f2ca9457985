//! `FetchState`: what the fetches of one stream learned and keep between fetches, sans-IO.
//!
//! Per partition: where its last fetch ended and the epoch of the last batch read there
//! (KIP-320), the replica its leader pointed this client at (KIP-392), and the data read ahead
//! of its next range (the stored batch a range ended inside of, a long-poll's answer); for
//! the data as a whole, its bytes per offset and largest stored batch, which size the next
//! requests and batches. It is plain data with `&`/`&mut` methods: no lock, no clock, no
//! I/O. A stream's fetches share one through [`super::Fetcher`], which lends it to each
//! decision (a session's round, a truncation check, a long-poll) under one lock held for
//! that decision only, never across an await; the memory budget ([`super::MemoryBudget`])
//! is only permits.
//!
//! CI keeps it that way: `.ci/run` refuses `async`, `tokio`, `Instant` and `Mutex` here.

use std::collections::HashMap;

use super::SharedPermit;

use crate::error::BrokerName;
use crate::plan::Topic;
use crate::record::RecordBatch;

/// What the fetches of one stream learned and keep between fetches. See the module docs.
#[derive(Debug, Default)]
pub struct FetchState {
    /// Bytes per offset × 1024, from every chunk fetched so far (0: nothing yet). A range
    /// needs about `remaining offsets × bytes per offset`, and asking each partition for
    /// `max.partition.fetch.bytes` regardless brings back (and holds in the budget) up to
    /// that much past the range's end.
    bytes_per_offset_x1024: u64,
    /// The largest record batch seen, in bytes: a request never asks a partition for less.
    max_batch: u64,
    /// KIP-392: the replica each partition's leader pointed this client at (`client.rack`),
    /// by topic and partition. Dropped on any error from that replica (back to the leader).
    read_replicas: ByPartition<i32>,
    /// KIP-320: where the last completed fetch of each partition ended, with the epoch of the
    /// last batch it read (sent as `last_fetched_epoch` by the next fetch from there).
    fetched: ByPartition<LastFetched>,
    /// The stored batches the last fetch's ranges ended inside of, by topic and partition:
    /// the next range of the partition starts with it instead of fetching it again.
    carried: HashMap<(Topic, i32), Carried>,
}

/// Values by topic and partition, looked up by `&str` without building a key: a lookup per
/// partition per batch allocated a `String` for a `(String, i32)` key (issue 35: no allocation
/// per batch at a trickle). A topic's name is allocated once, when its first partition is
/// inserted. The fetch state keys its per-partition maps by it, and the stream its
/// per-partition metrics.
#[derive(Debug)]
pub struct ByPartition<V>(HashMap<String, HashMap<i32, V>>);

impl<V> Default for ByPartition<V> {
    fn default() -> Self {
        ByPartition(HashMap::new())
    }
}

impl<V> ByPartition<V> {
    /// The value of `topic`-`partition`.
    pub fn get(&self, topic: &str, partition: i32) -> Option<&V> {
        self.0.get(topic)?.get(&partition)
    }

    /// Sets the value of `topic`-`partition`, giving back the one it replaces.
    pub fn insert(&mut self, topic: &str, partition: i32, v: V) -> Option<V> {
        self.partitions_of(topic).insert(partition, v)
    }

    /// The value of `topic`-`partition`, made by `make` if it has none.
    pub fn get_or_insert_with(
        &mut self,
        topic: &str,
        partition: i32,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        self.partitions_of(topic)
            .entry(partition)
            .or_insert_with(make)
    }

    /// Removes the value of `topic`-`partition`.
    pub fn remove(&mut self, topic: &str, partition: i32) -> Option<V> {
        self.0.get_mut(topic)?.remove(&partition)
    }

    /// `topic`'s partitions, its name allocated the first time only.
    fn partitions_of(&mut self, topic: &str) -> &mut HashMap<i32, V> {
        if !self.0.contains_key(topic) {
            self.0.insert(topic.to_owned(), HashMap::new());
        }
        self.0.get_mut(topic).expect("inserted above when missing")
    }
}

/// Data read ahead of a partition's next range, kept (with its share of the memory budget)
/// until that range, which starts at `from`, uses it instead of fetching it:
/// - the stored batch a range ended inside of (`until` fell between its first and last
///   offsets), copied out of its response. Without it the next range fetches the batch again:
///   with ranges a few stored batches long (a wide topic, a rate limit, batches of about 1 MB
///   as producers write them), that doubled the bytes read from the broker, and over TLS the
///   broker's work (it cannot `sendfile` what it encrypts);
/// - what a caught-up stream's long-poll was answered with ([`wait_for_data`](super::wait_for_data)): the record
///   that ended the wait is delivered from the answer, not fetched by a second round trip.
#[derive(Debug)]
pub(crate) struct Carried {
    /// Where the next range must start to use it.
    pub(crate) from: i64,
    /// Where the read that brought it stopped: `batches` hold every record of
    /// `[from, until)` (offsets between them hold no data: control records, aborted
    /// transactions, compacted away).
    pub(crate) until: i64,
    /// The data batches, in offset order.
    pub(crate) batches: Vec<RecordBatch>,
    /// The broker that sent them.
    pub(crate) broker: BrokerName,
    /// The partition's leader epoch they were fetched under: after a leader change they are
    /// not used (an unclean election may have truncated what they hold past the old high
    /// watermark's reach), and the range fetches from the new leader.
    pub(crate) leader_epoch: i32,
    /// The topic's id (KIP-516) when they were fetched: a topic deleted and re-created under
    /// the same name (a new id, its leader epochs starting again) never gets them.
    pub(crate) topic_id: [u8; 16],
    /// Their bytes of the memory budget (shared with the chunks of ranges that used them, and
    /// with other partitions' data from the same long-poll answer).
    pub(crate) permit: SharedPermit,
}

/// KIP-320: where the last completed fetch of a partition left it, and the epoch of the last
/// record batch read before there. A fetch that starts at `position` sends `epoch` as its
/// `last_fetched_epoch`, and the broker answers a log that no longer has those records with
/// a diverging epoch; after a leader change, [`check_truncation`](super::check_truncation) asks the new leader
/// (OffsetForLeaderEpoch) before anything more is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastFetched {
    /// The next offset to read.
    pub position: i64,
    /// The `partition_leader_epoch` of the last batch read before `position`.
    pub epoch: i32,
    /// The partition's leader epoch in the metadata when it was read (or last validated).
    pub leader_epoch: i32,
}

impl FetchState {
    /// The replica to read `topic`-`partition` from instead of its leader, if one was given.
    pub(crate) fn read_replica(&self, topic: &str, partition: i32) -> Option<i32> {
        self.read_replicas.get(topic, partition).copied()
    }

    /// Reads `topic`-`partition` from `replica` (`None`: from its leader again).
    pub(crate) fn set_read_replica(&mut self, topic: &str, partition: i32, replica: Option<i32>) {
        match replica {
            Some(r) => self.read_replicas.insert(topic, partition, r),
            None => self.read_replicas.remove(topic, partition),
        };
    }

    /// KIP-320: where the last completed fetch left `topic`-`partition`, and the epoch of the
    /// last batch it read; `None` if no fetch read it (or a truncation check dropped it).
    pub fn last_fetched(&self, topic: &str, partition: i32) -> Option<LastFetched> {
        self.fetched.get(topic, partition).copied()
    }

    /// Remembers (or, with `None`, forgets) where a fetch left `topic`-`partition`.
    pub(crate) fn set_last_fetched(
        &mut self,
        topic: &str,
        partition: i32,
        at: Option<LastFetched>,
    ) {
        match at {
            Some(at) => self.fetched.insert(topic, partition, at),
            None => self.fetched.remove(topic, partition),
        };
    }

    /// KIP-320: `topic`-`partition` resumes at `position` from a store that kept `epoch`, the
    /// `partition_leader_epoch` of the last record batch read before it. The next truncation
    /// check asks the partition's leader whether its log still holds that epoch up to the
    /// position, and the first fetch from it sends the epoch as its `last_fetched_epoch`. A
    /// fetch that left the partition at `position` already knows as much and is kept; a
    /// negative epoch (none kept) changes nothing.
    pub fn resume_at(&mut self, topic: &str, partition: i32, position: i64, epoch: i32) {
        if epoch < 0
            || self
                .last_fetched(topic, partition)
                .is_some_and(|f| f.position == position)
        {
            return;
        }
        self.set_last_fetched(
            topic,
            partition,
            Some(LastFetched {
                position,
                epoch,
                leader_epoch: -1,
            }),
        );
    }

    /// The `partition_leader_epoch` of the last record batch read before `position` of
    /// `topic`-`partition`, if it was the last fetch's end there (or resumed there with one:
    /// [`resume_at`](Self::resume_at)).
    pub fn epoch_at(&self, topic: &str, partition: i32, position: i64) -> Option<i32> {
        self.last_fetched(topic, partition)
            .filter(|f| f.position == position && f.epoch >= 0)
            .map(|f| f.epoch)
    }

    /// Takes every carried batch (those the next session does not use are dropped, and
    /// their bytes of the budget freed).
    pub(crate) fn take_carried(&mut self) -> HashMap<(Topic, i32), Carried> {
        std::mem::take(&mut self.carried)
    }

    /// Keeps `c` for the next range of `topic`-`partition`.
    pub(crate) fn put_carried(&mut self, topic: impl Into<Topic>, partition: i32, c: Carried) {
        self.carried.insert((topic.into(), partition), c);
    }

    /// Learns from `bytes` of stored batches spanning `offsets` offsets, the largest of them
    /// `max_batch` bytes.
    pub(crate) fn learn(&mut self, bytes: usize, offsets: i64, max_batch: usize) {
        if offsets > 0 {
            let x = (bytes as u64).saturating_mul(1024) / offsets as u64;
            let old = self.bytes_per_offset_x1024;
            // A moving average that follows changes in record size within a few chunks.
            let new = if old == 0 { x } else { (old * 3 + x) / 4 };
            self.bytes_per_offset_x1024 = new.max(1);
        }
        self.max_batch = self.max_batch.max(max_batch as u64);
    }

    /// The bytes to ask a partition for when `remaining` offsets of its range are left;
    /// `None` before anything was learned.
    pub(crate) fn partition_bytes(&self, remaining: i64) -> Option<usize> {
        let bpo = self.bytes_per_offset_x1024;
        if bpo == 0 {
            return None;
        }
        let want = (remaining.max(0) as u64).saturating_mul(bpo) / 1024;
        // A quarter more for batches that straddle the range's end, and never less than one
        // whole batch (or the broker may have nothing to return for this partition).
        let want = want.saturating_add(want / 4).saturating_add(1024);
        let floor = self.max_batch.saturating_add(1024);
        Some(usize::try_from(want.max(floor)).unwrap_or(usize::MAX))
    }

    /// The largest stored record batch read so far, in bytes; `None` before the first. A
    /// range costs at least one whole stored batch however few offsets it asks for (KIP-74).
    pub fn largest_batch(&self) -> Option<usize> {
        (self.max_batch > 0).then(|| usize::try_from(self.max_batch).unwrap_or(usize::MAX))
    }

    /// The bytes an offset takes in the stored batches read so far (a moving average over
    /// the offsets the batches span); `None` before the first. This is the data's size, not
    /// what a batch held: a range of a few offsets holds a whole stored batch (KIP-74), and
    /// sizing batches by what they held shrank them to slivers of a stored batch on wide
    /// topics (issue 32).
    pub fn bytes_per_offset(&self) -> Option<f64> {
        (self.bytes_per_offset_x1024 > 0).then(|| self.bytes_per_offset_x1024 as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_data_and_never_ask_less_than_the_largest_batch() {
        let mut s = FetchState::default();
        assert_eq!(s.partition_bytes(10), None, "nothing learned yet");
        s.learn(100_000, 1000, 20_000);
        assert_eq!(s.bytes_per_offset(), Some(100.0));
        assert_eq!(s.largest_batch(), Some(20_000));
        // 10 offsets × 100 B, and a quarter more, is below one stored batch: the batch.
        assert_eq!(s.partition_bytes(10), Some(21_024));
        // 1000 offsets: 100 kB + 25 kB + 1 kB.
        assert_eq!(s.partition_bytes(1000), Some(126_024));
        // A moving average: three parts old, one part new.
        s.learn(200_000, 1000, 10_000);
        assert_eq!(s.bytes_per_offset(), Some(125.0));
        assert_eq!(s.largest_batch(), Some(20_000));
    }

    #[test]
    fn an_epoch_is_known_only_at_the_position_the_last_fetch_left() {
        let mut s = FetchState::default();
        s.resume_at("t", 0, 50, 3);
        assert_eq!(s.epoch_at("t", 0, 50), Some(3));
        assert_eq!(s.epoch_at("t", 0, 51), None);
        // A fetch that left the partition at the position is kept over the store's word.
        s.set_last_fetched(
            "t",
            0,
            Some(LastFetched {
                position: 80,
                epoch: 5,
                leader_epoch: 5,
            }),
        );
        s.resume_at("t", 0, 80, 4);
        assert_eq!(s.epoch_at("t", 0, 80), Some(5));
        s.resume_at("t", 1, 10, -1);
        assert_eq!(
            s.last_fetched("t", 1),
            None,
            "no epoch kept: nothing to check"
        );
        s.set_read_replica("t", 0, Some(2));
        assert_eq!(s.read_replica("t", 0), Some(2));
        s.set_read_replica("t", 0, None);
        assert_eq!(s.read_replica("t", 0), None);
    }
}
