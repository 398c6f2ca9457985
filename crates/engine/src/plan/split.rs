//! Splitting planned ranges into sub-ranges for parallel fetch (see [`split_ranges`]).

use super::OffsetRange;

/// How to split ranges for parallel fetch. Both off by default: one range per partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SplitPolicy {
    /// At least this many ranges, when there are at least this many offsets
    /// (`minPartitions`).
    pub min_partitions: Option<usize>,
    /// At most this many offsets per range (`maxRecordsPerPartition`).
    pub max_records_per_range: Option<u64>,
}

impl SplitPolicy {
    /// With a minimum number of ranges.
    pub fn with_min_partitions(mut self, n: usize) -> Self {
        self.min_partitions = Some(n);
        self
    }

    /// With a maximum number of offsets per range.
    pub fn with_max_records_per_range(mut self, n: u64) -> Self {
        self.max_records_per_range = Some(n);
        self
    }
}

/// Splits the non-empty `ranges` into sub-ranges for parallel fetch. The output keeps the
/// input's order, and each range's pieces are in offset order.
///
/// Follows Structured Streaming's `KafkaOffsetRangeCalculator.getRanges`
/// (spark-sql-kafka-0-10), read, not copied:
///
/// 1. Empty ranges are dropped.
/// 2. `maxRecordsPerPartition`: a range of `size` offsets becomes `ceil(size / max)` parts.
/// 3. `minPartitions`, when there are fewer ranges than that: a range whose proportional share
///    `round(size / total × minPartitions)` is 1 stays whole; the others share
///    `minPartitions − #whole` parts in proportion to their size (`round`, at least 1).
/// 4. A range cut into `n` parts: part `k` takes `remaining / (n − k)` offsets, so the last
///    parts absorb the rounding.
///
/// Two deliberate differences, both only adding parts: Spark keys "stays whole" by topic
/// partition, which after step 2 lumps the pieces of one partition together; here each piece is
/// judged on its own. And Spark's count is approximate ("can be less or more depending on
/// rounding errors"); here, if rounding leaves fewer than `minPartitions` parts, the piece with
/// the most offsets per part gets one more part until the minimum is met or every part is a
/// single offset. So the result has at least `min(minPartitions, total offsets)` ranges.
///
/// Whatever the policy, the sub-ranges of a range are contiguous, non-overlapping, in offset
/// order, and their union is the range.
pub fn split_ranges(ranges: &[OffsetRange], policy: &SplitPolicy) -> Vec<OffsetRange> {
    let mut pieces: Vec<OffsetRange> = ranges.iter().filter(|r| !r.is_empty()).cloned().collect();

    if let Some(max) = policy.max_records_per_range.filter(|m| *m > 0) {
        pieces = pieces
            .iter()
            .flat_map(|r| divide(r, r.len().div_ceil(max)))
            .collect();
    }

    let Some(min) = policy.min_partitions.filter(|m| *m > pieces.len()) else {
        return pieces;
    };
    let sizes: Vec<u64> = pieces.iter().map(OffsetRange::len).collect();
    let total: u64 = sizes.iter().sum();
    let part_count = |size: u64, total: u64, parts: usize| -> u64 {
        // Spark's getPartCount: max(round(size / total × parts), 1).
        ((size as f64 / total as f64 * parts as f64).round() as u64).max(1)
    };
    let whole: Vec<bool> = sizes
        .iter()
        .map(|&s| part_count(s, total, min) == 1)
        .collect();
    let whole_count = whole.iter().filter(|w| **w).count();
    let whole_total: u64 = sizes
        .iter()
        .zip(&whole)
        .filter(|(_, w)| **w)
        .map(|(s, _)| s)
        .sum();
    let split_total = total - whole_total;
    let split_min = min.saturating_sub(whole_count).max(1);
    let mut parts: Vec<u64> = sizes
        .iter()
        .zip(&whole)
        .map(|(&size, &w)| {
            let n = if w {
                1
            } else {
                part_count(size, split_total, split_min)
            };
            n.min(size)
        })
        .collect();

    // Top up what rounding left short: one more part for the piece with the most offsets per
    // part (the first such piece on ties), while a piece can still be split.
    let mut count: u64 = parts.iter().sum();
    while count < min as u64 {
        let best = (0..parts.len())
            .filter(|&i| parts[i] < sizes[i])
            .max_by(|&a, &b| {
                // sizes[a]/parts[a] vs sizes[b]/parts[b], exactly; earlier index wins ties.
                let lhs = u128::from(sizes[a]) * u128::from(parts[b]);
                let rhs = u128::from(sizes[b]) * u128::from(parts[a]);
                lhs.cmp(&rhs).then(b.cmp(&a))
            });
        let Some(i) = best else { break };
        parts[i] += 1;
        count += 1;
    }

    pieces
        .iter()
        .zip(&parts)
        .flat_map(|(r, &n)| divide(r, n))
        .collect()
}

/// Cuts `range` into `parts` contiguous pieces: piece `k` takes `remaining / (parts − k)`
/// offsets. Empty pieces are dropped.
/// `range` cut into `parts` consecutive non-empty sub-ranges (fewer when it has fewer
/// offsets), the last ones absorbing the rounding: the one way a range is cut, for
/// [`split_ranges`] and for the fetcher's sub-ranges of a large range.
pub(crate) fn divide(range: &OffsetRange, parts: u64) -> Vec<OffsetRange> {
    let mut remaining = range.len();
    let parts = parts.min(remaining).max(1);
    let mut from = range.from;
    let mut out = Vec::with_capacity(usize::try_from(parts.min(remaining)).unwrap_or(0));
    for k in 0..parts {
        let take = remaining / (parts - k);
        remaining -= take;
        let until = from + i64::try_from(take).unwrap_or(i64::MAX);
        if until > from {
            out.push(OffsetRange::new(
                range.topic.clone(),
                range.partition,
                from,
                until,
            ));
        }
        from = until;
    }
    out
}
