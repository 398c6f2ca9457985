//! At most so many partitions per batch, taken in turn (see
//! [`PlannerConfig::max_partitions_per_batch`](super::PlannerConfig::max_partitions_per_batch)).
//!
//! Kafka returns whole stored record batches (KIP-74), so a range costs at least one stored
//! batch however few offsets it asks for: a batch spread over many partitions with large
//! stored batches can need more memory than any offset limit suggests. Bounding the partitions
//! bounds that cost; rotating them keeps every partition with data served.

use super::TopicPartition;

/// Which partitions one batch reads when at most `max` may: those with data (`lag > 0`),
/// in order starting after `after` (the last partition served) and wrapping around.
///
/// `tps` is sorted and index-aligned with `lags`. Returns a mask aligned with them, and the
/// last partition taken when fewer than all with data were (the next call's `after`); `None`
/// when every partition with data fits, since then any starting point is as fair as another.
pub(super) fn choose<'a>(
    tps: &[&'a TopicPartition],
    lags: &[u64],
    max: usize,
    after: Option<&TopicPartition>,
) -> (Vec<bool>, Option<&'a TopicPartition>) {
    let with_data = lags.iter().filter(|lag| **lag > 0).count();
    if with_data <= max {
        return (lags.iter().map(|lag| *lag > 0).collect(), None);
    }
    // The first partition after the cursor; the cursor itself may have left the snapshot.
    let start = after.map_or(0, |after| tps.partition_point(|tp| *tp <= after));
    let mut chosen = vec![false; tps.len()];
    let mut last = None;
    let mut taken = 0;
    for i in (start..tps.len()).chain(0..start) {
        if taken == max {
            break;
        }
        if lags[i] > 0 {
            chosen[i] = true;
            last = Some(tps[i]);
            taken += 1;
        }
    }
    (chosen, last)
}
