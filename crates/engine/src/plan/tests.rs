//! The planner's tests: virtual time, numbers worked by hand in the comments.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

const T: &str = "t";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn snap(partition: i32, log_start: i64, end: i64) -> PartitionSnapshot {
    PartitionSnapshot::new(T, partition, log_start, end)
}

/// Partitions 0.. of topic `t`, each with log `[0, end)`.
fn logs(ends: &[i64]) -> Vec<PartitionSnapshot> {
    (0..).zip(ends).map(|(p, &end)| snap(p, 0, end)).collect()
}

fn planner(config: PlannerConfig) -> Planner {
    Planner::new(config).unwrap()
}

fn earliest(interval: Duration, rate: RatePolicy) -> Planner {
    planner(
        PlannerConfig::new(interval)
            .with_rate(rate)
            .with_start(StartPolicy::Earliest),
    )
}

fn batch(outcome: Result<PlanOutcome, PlanError>) -> BatchPlan {
    match outcome.unwrap() {
        PlanOutcome::Batch(b) => b,
        PlanOutcome::Wait(w) => panic!("expected a batch, got {w:?}"),
    }
}

fn wait(outcome: Result<PlanOutcome, PlanError>) -> Wait {
    match outcome.unwrap() {
        PlanOutcome::Wait(w) => w,
        PlanOutcome::Batch(b) => panic!("expected no batch, got {b:?}"),
    }
}

/// `(partition, from, until)` of each range.
fn spans(plan: &BatchPlan) -> Vec<(i32, i64, i64)> {
    plan.ranges
        .iter()
        .map(|r| (r.partition, r.from, r.until))
        .collect()
}

/// The number of offsets each range holds.
fn takes(plan: &BatchPlan) -> Vec<u64> {
    plan.ranges.iter().map(OffsetRange::len).collect()
}

// ---------------------------------------------------------------------------------------
// maxOffsetsPerTrigger (KafkaMicroBatchStream.rateLimit)
// ---------------------------------------------------------------------------------------

#[test]
fn max_offsets_per_trigger_is_split_by_lag() {
    // Lags 100/300/600, total 1000, limit 50:
    //   50 × 100/1000 = 5, 50 × 300/1000 = 15, 50 × 600/1000 = 30 (all ≥ 1: floor).
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_offsets_per_trigger(50),
    );
    let b = batch(p.plan(secs(0), &logs(&[100, 300, 600])));
    assert_eq!(spans(&b), [(0, 0, 5), (1, 0, 15), (2, 0, 30)]);
    assert_eq!(b.offset_count(), 50);
    // The next batch starts where this one ended: lags 95/285/570, total 950:
    //   50 × 95/950 = 5, 50 × 285/950 = 15, 50 × 570/950 = 30.
    let b = batch(p.plan(secs(1), &logs(&[100, 300, 600])));
    assert_eq!(spans(&b), [(0, 5, 10), (1, 15, 30), (2, 30, 60)]);
}

#[test]
fn max_offsets_share_below_one_rounds_up_else_down() {
    // Lags 4/996, total 1000, limit 100:
    //   100 × 4/1000 = 0.4 → < 1 → ceil → 1;  100 × 996/1000 = 99.6 → floor → 99.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_offsets_per_trigger(100),
    );
    let b = batch(p.plan(secs(0), &logs(&[4, 996])));
    assert_eq!(takes(&b), [1, 99]);
}

#[test]
fn max_offsets_rounding_up_may_exceed_the_limit() {
    // Lags 10/10/10, limit 2: each share 2 × 1/3 = 0.67 → ceil → 1; total 3 > 2. Spark's
    // "don't completely starve small topicpartitions" rule, kept.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_offsets_per_trigger(2),
    );
    let b = batch(p.plan(secs(0), &logs(&[10, 10, 10])));
    assert_eq!(takes(&b), [1, 1, 1]);
}

#[test]
fn max_offsets_ignores_partitions_without_lag_and_caps_at_the_end() {
    // Lags 0/30, limit 100: only partition 1 has lag, share 100 × 30/30 = 100, but the range
    // stops at the end offset: 30.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_offsets_per_trigger(100),
    );
    let b = batch(p.plan(secs(0), &logs(&[0, 30])));
    assert_eq!(spans(&b), [(0, 0, 0), (1, 0, 30)]);
}

// ---------------------------------------------------------------------------------------
// maxRatePerPartition (DirectKafkaInputDStream.maxMessagesPerPartition)
// ---------------------------------------------------------------------------------------

#[test]
fn max_rate_per_partition_times_batch_seconds() {
    // 1000 records/s × 2 s = 2000 per partition. Lags 5000/1500 → 2000/1500.
    let mut p = earliest(
        secs(2),
        RatePolicy::default().with_max_rate_per_partition(1000),
    );
    let b = batch(p.plan(secs(0), &logs(&[5000, 1500])));
    assert_eq!(takes(&b), [2000, 1500]);
    // Next: lag 3000/0 → 2000/0.
    let b = batch(p.plan(secs(2), &logs(&[5000, 1500])));
    assert_eq!(spans(&b), [(0, 2000, 4000), (1, 1500, 1500)]);
}

#[test]
fn max_rate_truncates_and_respects_min_rate_per_partition() {
    // 5/s × 0.5 s = 2.5 → truncated → 2.
    let mut p = earliest(
        ms(500),
        RatePolicy::default().with_max_rate_per_partition(5),
    );
    assert_eq!(takes(&batch(p.plan(secs(0), &logs(&[100])))), [2]);
    // 1/s × 0.5 s = 0.5 → 0 → raised to minRatePerPartition 1.
    let mut p = earliest(
        ms(500),
        RatePolicy::default().with_max_rate_per_partition(1),
    );
    assert_eq!(takes(&batch(p.plan(secs(0), &logs(&[100])))), [1]);
    // 5/s × 0.5 s = 2 → raised to a configured minRatePerPartition of 10.
    let mut p = earliest(
        ms(500),
        RatePolicy::default()
            .with_max_rate_per_partition(5)
            .with_min_rate_per_partition(10),
    );
    assert_eq!(takes(&batch(p.plan(secs(0), &logs(&[100])))), [10]);
}

#[test]
fn most_restrictive_limit_wins_per_partition() {
    // Lags 2000/8000/10000 (total 20000), maxOffsetsPerTrigger 6000:
    //   6000 × 0.1 = 600, 6000 × 0.4 = 2400, 6000 × 0.5 = 3000.
    // maxRatePerPartition 1000/s × 2 s = 2000 each.
    // min per partition: 600, 2000, 2000.
    let mut p = earliest(
        secs(2),
        RatePolicy::default()
            .with_max_offsets_per_trigger(6000)
            .with_max_rate_per_partition(1000),
    );
    let b = batch(p.plan(secs(0), &logs(&[2000, 8000, 10000])));
    assert_eq!(takes(&b), [600, 2000, 2000]);
}

// ---------------------------------------------------------------------------------------
// Backpressure (PIDRateEstimator + maxMessagesPerPartition)
// ---------------------------------------------------------------------------------------

#[test]
fn pid_with_spark_defaults_worked_sequence() {
    // Batch interval 1 s; Kp 1.0, Ki 0.2, Kd 0, min rate 100.
    let mut e = PidRateEstimator::new(secs(1), PidConfig::default()).unwrap();
    // 1) t=1000 ms, 1000 records in 500 ms: processing rate 1000/500×1000 = 2000/s.
    //    First valid batch: only seeds latestRate = 2000, latestError = 0. Nothing published.
    assert_eq!(e.compute(ms(1000), 1000, ms(500), ms(0)), None);
    // 2) t=2000, 1000 records in 1000 ms: rate 1000. error = 2000 − 1000 = 1000,
    //    historicalError = 0 × 1000 / 1000 = 0. new = 2000 − 1.0×1000 − 0.2×0 = 1000.
    assert_eq!(e.compute(ms(2000), 1000, ms(1000), ms(0)), Some(1000.0));
    // 3) t=3000, 1000 records in 2000 ms, waited 1000 ms: rate 500. error = 1000 − 500 = 500,
    //    historicalError = 1000 × 500 / 1000 = 500. new = 1000 − 500 − 0.2×500 = 400.
    assert_eq!(e.compute(ms(3000), 1000, ms(2000), ms(1000)), Some(400.0));
    // 4) t=4000, 100 records in 2000 ms, waited 4000 ms: rate 50. error = 400 − 50 = 350,
    //    historicalError = 4000 × 50 / 1000 = 200. new = 400 − 350 − 40 = 10 → min rate 100.
    assert_eq!(e.compute(ms(4000), 100, ms(2000), ms(4000)), Some(100.0));
}

#[test]
fn pid_publishes_nothing_for_stale_empty_or_instant_batches() {
    let mut e = PidRateEstimator::new(secs(1), PidConfig::default()).unwrap();
    // No records, or 0 ms of processing (999 µs is 0 whole ms, as in Spark's Long ms): skipped,
    // and the first run has not happened yet.
    assert_eq!(e.compute(ms(1000), 0, ms(500), ms(0)), None);
    assert_eq!(
        e.compute(ms(1000), 10, Duration::from_micros(999), ms(0)),
        None
    );
    // First run: seeds 2000/s.
    assert_eq!(e.compute(ms(1000), 1000, ms(500), ms(0)), None);
    // Not after the last update (t=1000 again, then earlier): skipped, state unchanged.
    assert_eq!(e.compute(ms(1000), 1000, ms(1000), ms(0)), None);
    assert_eq!(e.compute(ms(900), 1000, ms(1000), ms(0)), None);
    // Same as step 2 of the worked sequence: 2000 − (2000 − 1000) = 1000.
    assert_eq!(e.compute(ms(2000), 1000, ms(1000), ms(0)), Some(1000.0));
}

#[test]
fn pid_derivative_term() {
    // Kd = 0.1. Step 1 as above (seeds 2000/s, error 0, t=1000).
    // Step 2: error 1000, delaySinceUpdate (2000 − 1000)/1000 = 1 s,
    //   dError = (1000 − 0)/1 = 1000. new = 2000 − 1000 − 0 − 0.1×1000 = 900.
    let config = PidConfig::default().with_coefficients(1.0, 0.2, 0.1);
    let mut e = PidRateEstimator::new(secs(1), config).unwrap();
    assert_eq!(e.compute(ms(1000), 1000, ms(500), ms(0)), None);
    assert_eq!(e.compute(ms(2000), 1000, ms(1000), ms(0)), Some(900.0));
}

#[test]
fn pid_config_is_validated() {
    for bad in [
        PidConfig::default().with_coefficients(-1.0, 0.2, 0.0),
        PidConfig::default().with_coefficients(1.0, -0.2, 0.0),
        PidConfig::default().with_coefficients(1.0, 0.2, f64::NAN),
        PidConfig::default().with_min_rate(0.0),
    ] {
        assert!(matches!(
            PidRateEstimator::new(secs(1), bad),
            Err(PlanError::InvalidConfig(_))
        ));
    }
    assert!(matches!(
        PidRateEstimator::new(Duration::from_micros(10), PidConfig::default()),
        Err(PlanError::InvalidConfig(_))
    ));
}

#[test]
fn backpressure_initial_rate_bounds_the_first_batch_on_a_backlog() {
    // Initial rate 500/s over 1 s; two partitions with 1,000,000 offsets of lag each:
    //   500 × 1e6/2e6 = 250/s each × 1 s = 250 each: a 500-offset first batch.
    let pid = PidConfig::default().with_initial_rate(Some(500));
    let mut p = earliest(secs(1), RatePolicy::default().with_backpressure(pid));
    let b = batch(p.plan(secs(0), &logs(&[1_000_000, 1_000_000])));
    assert_eq!(takes(&b), [250, 250]);
    // The default initial rate is 1000/s: 500 each.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_backpressure(PidConfig::default()),
    );
    let b = batch(p.plan(secs(0), &logs(&[1_000_000, 1_000_000])));
    assert_eq!(takes(&b), [500, 500]);
}

#[test]
fn backpressure_without_initial_rate_is_unbounded_like_spark() {
    let pid = PidConfig::default().with_initial_rate(None);
    let mut p = earliest(secs(1), RatePolicy::default().with_backpressure(pid));
    let b = batch(p.plan(secs(0), &logs(&[1_000_000, 1_000_000])));
    assert_eq!(takes(&b), [1_000_000, 1_000_000]);
    // With maxRatePerPartition as well, that rate applies until the first estimate
    // (Spark's `case None`): 300/s × 1 s = 300.
    let pid = PidConfig::default().with_initial_rate(None);
    let mut p = earliest(
        secs(1),
        RatePolicy::default()
            .with_backpressure(pid)
            .with_max_rate_per_partition(300),
    );
    let b = batch(p.plan(secs(0), &logs(&[1_000_000, 1_000_000])));
    assert_eq!(takes(&b), [300, 300]);
}

/// Drives the planner's estimator to publish exactly 1000/s with a 2 s interval:
/// 1) t=2000 ms, 1000 records in 500 ms → seeds 2000/s (nothing published);
/// 2) t=4000 ms, 2000 records in 2000 ms → rate 1000, error 1000, new = 2000 − 1000 = 1000.
fn publish_1000_per_s(p: &mut Planner) {
    assert_eq!(
        p.on_batch_completed(&BatchCompletion::new(ms(2000), 1000, ms(500), ms(0))),
        None
    );
    assert_eq!(
        p.on_batch_completed(&BatchCompletion::new(ms(4000), 2000, ms(2000), ms(0))),
        Some(1000)
    );
    assert_eq!(p.latest_rate(), Some(1000));
}

#[test]
fn backpressure_rate_is_split_by_lag_and_capped_by_max_rate() {
    // Published rate 1000/s, interval 2 s, lags 1000/3000/6000 (total 10000):
    //   per-partition rates 100/300/600/s × 2 s = 200/600/1200.
    let mut p = earliest(
        secs(2),
        RatePolicy::default().with_backpressure(PidConfig::default()),
    );
    publish_1000_per_s(&mut p);
    let b = batch(p.plan(secs(4), &logs(&[1000, 3000, 6000])));
    assert_eq!(takes(&b), [200, 600, 1200]);

    // With maxRatePerPartition 250: rates min(100, 250), min(300, 250), min(600, 250)
    //   = 100/250/250 × 2 s = 200/500/500.
    let mut p = earliest(
        secs(2),
        RatePolicy::default()
            .with_backpressure(PidConfig::default())
            .with_max_rate_per_partition(250),
    );
    publish_1000_per_s(&mut p);
    let b = batch(p.plan(secs(4), &logs(&[1000, 3000, 6000])));
    assert_eq!(takes(&b), [200, 500, 500]);
}

#[test]
fn backpressure_share_rounds_down_then_min_rate_per_partition() {
    // Initial rate 1000/s, 1 s, lags 1/9999 (total 10000):
    //   1000 × 1/10000 = 0.1 → 0 → raised to minRatePerPartition 1;
    //   1000 × 9999/10000 = 999.9 → 999.
    let pid = PidConfig::default().with_initial_rate(Some(1000));
    let mut p = earliest(secs(1), RatePolicy::default().with_backpressure(pid));
    let b = batch(p.plan(secs(0), &logs(&[1, 9999])));
    assert_eq!(takes(&b), [1, 999]);
}

#[test]
fn published_rate_is_truncated_like_spark_rate_controller() {
    // Step 1 seeds 2000/s. Step 2: 1000 records in 3000 ms → rate 333.33…, error 1666.67,
    //   new = 2000 − 1666.67 = 333.33… → stored as a Long: 333.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_backpressure(PidConfig::default()),
    );
    p.on_batch_completed(&BatchCompletion::new(ms(1000), 1000, ms(500), ms(0)));
    let rate = p.on_batch_completed(&BatchCompletion::new(ms(2000), 1000, ms(3000), ms(0)));
    assert_eq!(rate, Some(333));
    // 333/s × 1 s on one partition: 333.
    assert_eq!(takes(&batch(p.plan(secs(2), &logs(&[10_000])))), [333]);
    // Without backpressure there is nothing to feed.
    let mut p = earliest(secs(1), RatePolicy::default());
    assert_eq!(
        p.on_batch_completed(&BatchCompletion::new(ms(1000), 1000, ms(500), ms(0))),
        None
    );
}

// ---------------------------------------------------------------------------------------
// minOffsetsPerTrigger / maxTriggerDelay (KafkaMicroBatchStream.delayBatch)
// ---------------------------------------------------------------------------------------

#[test]
fn min_offsets_with_max_trigger_delay() {
    // min 500 offsets, max delay 10 s.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_min_offsets_per_trigger(500, secs(10)),
    );
    // t=0: no batch yet, so the check fires (Spark's lastTriggerMillis starts at 0) even with
    // only 100 available. Last trigger = 0.
    assert_eq!(spans(&batch(p.plan(secs(0), &logs(&[100])))), [(0, 0, 100)]);
    // t=1: 300 − 100 = 200 < 500, 1 s < 10 s: wait until 0 + 10 = 10 s.
    let w = wait(p.plan(secs(1), &logs(&[300])));
    assert_eq!(
        w,
        Wait {
            reason: WaitReason::BelowMinOffsets {
                available: 200,
                min: 500
            },
            retry_at: Some(secs(10)),
        }
    );
    // t=5: 599 − 100 = 499 < 500: still waiting.
    assert!(matches!(
        wait(p.plan(secs(5), &logs(&[599]))).reason,
        WaitReason::BelowMinOffsets { available: 499, .. }
    ));
    // t=6: 600 − 100 = 500 ≥ 500: batch [100, 600). Last trigger = 6 s.
    assert_eq!(
        spans(&batch(p.plan(secs(6), &logs(&[600])))),
        [(0, 100, 600)]
    );
    // t=7: 10 available: wait until 6 + 10 = 16 s.
    assert_eq!(
        wait(p.plan(secs(7), &logs(&[610]))).retry_at,
        Some(secs(16))
    );
    // t=16: 16 − 6 = 10 s ≥ 10 s: the delay has passed, batch with the 10.
    assert_eq!(
        spans(&batch(p.plan(secs(16), &logs(&[610])))),
        [(0, 600, 610)]
    );
    // Batch ids counted only emitted plans: 0, 1, 2.
    assert_eq!(p.next_batch_id(), 3);
}

#[test]
fn min_offsets_then_max_offsets() {
    // Composite limit, as Spark's CompositeReadLimit: min 100 decides whether to fire, then
    // max 50 bounds the batch. t=0 fires (first); t=1 has 150 − 50 = 100 ≥ 100 → fire, and
    // max 50 → [50, 100).
    let mut p = earliest(
        secs(1),
        RatePolicy::default()
            .with_min_offsets_per_trigger(100, secs(60))
            .with_max_offsets_per_trigger(50),
    );
    assert_eq!(spans(&batch(p.plan(secs(0), &logs(&[150])))), [(0, 0, 50)]);
    assert_eq!(
        spans(&batch(p.plan(secs(1), &logs(&[150])))),
        [(0, 50, 100)]
    );
    // 150 − 100 = 50 < 100 and 1 s < 60 s: wait.
    assert!(matches!(
        wait(p.plan(secs(2), &logs(&[150]))).reason,
        WaitReason::BelowMinOffsets {
            available: 50,
            min: 100
        }
    ));
}

#[test]
fn no_new_data_waits_unless_empty_batches_are_wanted() {
    let mut p = earliest(secs(1), RatePolicy::default());
    assert_eq!(
        wait(p.plan(secs(0), &logs(&[0, 0]))),
        Wait {
            reason: WaitReason::NoNewData,
            retry_at: None
        }
    );
    assert_eq!(p.next_batch_id(), 0);

    let mut p = planner(
        PlannerConfig::new(secs(1))
            .with_start(StartPolicy::Earliest)
            .with_empty_batches(true),
    );
    let b = batch(p.plan(secs(0), &logs(&[0, 0])));
    assert_eq!((b.batch_id, spans(&b)), (0, vec![(0, 0, 0), (1, 0, 0)]));
    assert!(b.is_empty());
}

// ---------------------------------------------------------------------------------------
// Start policies
// ---------------------------------------------------------------------------------------

fn start(policy: StartPolicy) -> Planner {
    planner(
        PlannerConfig::new(secs(1))
            .with_start(policy)
            .with_empty_batches(true),
    )
}

#[test]
fn start_earliest_and_latest() {
    let parts = [snap(0, 10, 100), snap(1, 0, 50)];
    let b = batch(start(StartPolicy::Earliest).plan(secs(0), &parts));
    assert_eq!(spans(&b), [(0, 10, 100), (1, 0, 50)]);
    let b = batch(start(StartPolicy::Latest).plan(secs(0), &parts));
    assert_eq!(spans(&b), [(0, 100, 100), (1, 50, 50)]);
}

#[test]
fn start_latest_is_bound_at_the_first_plan() {
    // Latest resolves once, at the first plan: records produced afterwards are read.
    let mut p = planner(PlannerConfig::new(secs(1)));
    assert_eq!(
        wait(p.plan(secs(0), &logs(&[100]))).reason,
        WaitReason::NoNewData
    );
    assert_eq!(p.positions()[&tp(T, 0)], 100);
    let b = batch(p.plan(secs(1), &logs(&[130])));
    assert_eq!((b.batch_id, spans(&b)), (0, vec![(0, 100, 130)]));
}

#[test]
fn start_timestamp() {
    let ts = 1_700_000_000_000;
    let mut p = start(StartPolicy::Timestamp(ts));
    let parts = [
        snap(0, 0, 100).with_timestamp_lookup(TimestampLookup::Offset(40)),
        snap(1, 0, 100).with_timestamp_lookup(TimestampLookup::NoMatch),
    ];
    assert_eq!(
        p.timestamp_lookups(&[tp(T, 0), tp(T, 1)]),
        [(tp(T, 0), ts), (tp(T, 1), ts)]
    );
    // Offset 40 for partition 0; no record that recent in partition 1 → its end.
    let b = batch(p.plan(secs(0), &parts));
    assert_eq!(spans(&b), [(0, 40, 100), (1, 100, 100)]);
    // Positioned now: nothing more to look up.
    assert!(p.timestamp_lookups(&[tp(T, 0)]).is_empty());
}

#[test]
fn start_timestamp_without_lookup_is_an_error() {
    let mut p = start(StartPolicy::Timestamp(5));
    let err = p.plan(secs(0), &logs(&[10, 10])).unwrap_err();
    assert_eq!(
        err,
        PlanError::MissingTimestampLookup {
            timestamp: 5,
            partitions: vec![tp(T, 0), tp(T, 1)],
        }
    );
}

#[test]
fn start_explicit() {
    let offsets = BTreeMap::from([
        (tp(T, 0), StartOffset::Offset(25)),
        (tp(T, 1), StartOffset::Earliest),
        (tp(T, 2), StartOffset::Latest),
    ]);
    let mut p = start(StartPolicy::Explicit(offsets.clone()));
    let b = batch(p.plan(secs(0), &[snap(0, 0, 50), snap(1, 5, 50), snap(2, 0, 50)]));
    assert_eq!(spans(&b), [(0, 25, 50), (1, 5, 50), (2, 50, 50)]);

    // A partition not listed has no position.
    let mut p = start(StartPolicy::Explicit(offsets));
    let err = p.plan(secs(0), &logs(&[50, 50, 50, 50])).unwrap_err();
    assert_eq!(
        err,
        PlanError::NoPosition {
            partitions: vec![tp(T, 3)]
        }
    );
}

#[test]
fn start_explicit_offset_below_log_start_is_data_loss() {
    let offsets = BTreeMap::from([(tp(T, 0), StartOffset::Offset(3))]);
    let err = start(StartPolicy::Explicit(offsets))
        .plan(secs(0), &[snap(0, 10, 50)])
        .unwrap_err();
    assert_eq!(
        err,
        PlanError::DataLoss {
            topic: T.into(),
            partition: 0,
            lost_from: 3,
            lost_until: 10,
            reason: DataLossReason::BelowLogStart,
        }
    );
}

#[test]
fn start_none_names_every_partition_without_position() {
    let mut p = Planner::resume(
        PlannerConfig::new(secs(1)).with_start(StartPolicy::None),
        0,
        [(tp("a", 0), 5)],
    )
    .unwrap();
    let parts = [
        PartitionSnapshot::new("b", 1, 0, 10),
        PartitionSnapshot::new("a", 0, 0, 10),
        PartitionSnapshot::new("b", 0, 0, 10),
    ];
    let err = p.plan(secs(0), &parts).unwrap_err();
    assert_eq!(
        err,
        PlanError::NoPosition {
            partitions: vec![tp("b", 0), tp("b", 1)]
        }
    );
    assert_eq!(
        err.to_string(),
        "no position for partitions [b-0, b-1] and the start policy gives none"
    );
    // The failed plan changed nothing.
    assert_eq!(p.positions().len(), 1);
    assert_eq!(p.next_batch_id(), 0);
}

// ---------------------------------------------------------------------------------------
// Data loss
// ---------------------------------------------------------------------------------------

fn resumed(policy: DataLossPolicy, position: i64) -> Planner {
    Planner::resume(
        PlannerConfig::new(secs(1))
            .with_data_loss(policy)
            .with_empty_batches(true),
        7,
        [(tp(T, 0), position)],
    )
    .unwrap()
}

#[test]
fn below_log_start_fails_with_the_exact_range() {
    // Position 100, retention moved the log start to 150: [100, 150) is lost.
    let mut p = resumed(DataLossPolicy::Fail, 100);
    let err = p.plan(secs(0), &[snap(0, 150, 300)]).unwrap_err();
    assert_eq!(
        err,
        PlanError::DataLoss {
            topic: T.into(),
            partition: 0,
            lost_from: 100,
            lost_until: 150,
            reason: DataLossReason::BelowLogStart,
        }
    );
    assert_eq!(
        err.to_string(),
        "data loss in t-0: offsets [100, 150) are lost: position is below the log start \
         (retention)"
    );
    // Sticky until someone moves the position; the state did not change.
    assert_eq!(p.positions()[&tp(T, 0)], 100);
    assert!(p.plan(secs(1), &[snap(0, 150, 300)]).is_err());
    p.set_position(tp(T, 0), 150);
    let b = batch(p.plan(secs(2), &[snap(0, 150, 300)]));
    assert_eq!((b.batch_id, spans(&b)), (7, vec![(0, 150, 300)]));
}

#[test]
fn below_log_start_earliest_resets_and_reports() {
    let mut p = resumed(DataLossPolicy::Earliest, 100);
    let b = batch(p.plan(secs(0), &[snap(0, 150, 300)]));
    assert_eq!(spans(&b), [(0, 150, 300)]);
    assert_eq!(
        b.lost,
        [LostRange {
            topic: T.into(),
            partition: 0,
            from: 100,
            until: 150,
            reason: DataLossReason::BelowLogStart,
        }]
    );
    // Reported once.
    assert!(batch(p.plan(secs(1), &[snap(0, 150, 300)])).lost.is_empty());
}

#[test]
fn lost_ranges_are_reported_even_without_data() {
    // Earliest policy, empty batches off: the log is empty after the reset ([150, 150)), yet
    // the plan is emitted so the loss and the new position are not silent.
    let mut p = Planner::resume(
        PlannerConfig::new(secs(1)).with_data_loss(DataLossPolicy::Earliest),
        0,
        [(tp(T, 0), 100)],
    )
    .unwrap();
    let b = batch(p.plan(secs(0), &[snap(0, 150, 150)]));
    assert_eq!(spans(&b), [(0, 150, 150)]);
    assert_eq!((b.lost[0].from, b.lost[0].until), (100, 150));
}

#[test]
fn past_end_fails_or_resets() {
    // Position 500 but the log is [0, 200) (topic recreated): [200, 500) lost.
    let err = resumed(DataLossPolicy::Fail, 500)
        .plan(secs(0), &[snap(0, 0, 200)])
        .unwrap_err();
    assert_eq!(
        err,
        PlanError::DataLoss {
            topic: T.into(),
            partition: 0,
            lost_from: 200,
            lost_until: 500,
            reason: DataLossReason::PastEnd,
        }
    );
    let b = batch(resumed(DataLossPolicy::Earliest, 500).plan(secs(0), &[snap(0, 0, 200)]));
    assert_eq!(spans(&b), [(0, 0, 200)]);
    assert_eq!(
        (b.lost[0].from, b.lost[0].until, b.lost[0].reason),
        (200, 500, DataLossReason::PastEnd)
    );
}

#[test]
fn end_moving_back_is_data_loss() {
    // max 100 per batch: plan [0, 100) while the end is 1000. Then the end is 300 (recreated
    // and refilled, or truncated): the position 100 is inside the log, but [300, 1000)
    // vanished.
    let config = PlannerConfig::new(secs(1))
        .with_start(StartPolicy::Earliest)
        .with_rate(RatePolicy::default().with_max_offsets_per_trigger(100));
    let mut p = planner(config.clone());
    batch(p.plan(secs(0), &logs(&[1000])));
    let err = p.plan(secs(1), &logs(&[300])).unwrap_err();
    assert_eq!(
        err,
        PlanError::DataLoss {
            topic: T.into(),
            partition: 0,
            lost_from: 300,
            lost_until: 1000,
            reason: DataLossReason::EndMovedBack { previous_end: 1000 },
        }
    );

    let mut p = planner(config.with_data_loss(DataLossPolicy::Earliest));
    batch(p.plan(secs(0), &logs(&[1000])));
    let b = batch(p.plan(secs(1), &logs(&[300])));
    assert_eq!(spans(&b), [(0, 0, 100)]);
    assert_eq!(
        b.lost[0].reason,
        DataLossReason::EndMovedBack { previous_end: 1000 }
    );
    // The range starts below where the last plan left the partition (100): the plan names
    // that position, which a store holds and must expect.
    assert_eq!(b.moved_back, BTreeMap::from([(tp(T, 0), 100)]));
}

/// A plan whose range starts below where the previous plan (or the resume) left a partition
/// names that position in `moved_back` — the stored position an offset store's
/// compare-and-set must expect for the move back to commit — and only that plan does. Moves
/// forward (retention) and untouched partitions are not named.
#[test]
fn a_move_back_names_the_position_it_moves_back_from() {
    // Past the end (topic re-created): 500 → 0.
    let mut p = resumed(DataLossPolicy::Earliest, 500);
    let b = batch(p.plan(secs(0), &[snap(0, 0, 200)]));
    assert_eq!(spans(&b), [(0, 0, 200)]);
    assert_eq!(b.moved_back, BTreeMap::from([(tp(T, 0), 500)]));
    let b = batch(p.plan(secs(1), &[snap(0, 0, 210)]));
    assert!(b.moved_back.is_empty(), "{b:?}");
    // Below the log start (retention) moves forward: nothing named.
    let b = batch(resumed(DataLossPolicy::Earliest, 100).plan(secs(0), &[snap(0, 150, 300)]));
    assert!(b.moved_back.is_empty(), "{b:?}");
    // set_position back, then again before the plan: the first position (where the plan
    // left it) is named; a move forward names nothing.
    let mut p = resumed(DataLossPolicy::Earliest, 100);
    p.set_position(tp(T, 0), 80);
    p.set_position(tp(T, 0), 60);
    let b = batch(p.plan(secs(0), &[snap(0, 0, 300)]));
    assert_eq!(spans(&b), [(0, 60, 300)]);
    assert_eq!(b.moved_back, BTreeMap::from([(tp(T, 0), 100)]));
    p.set_position(tp(T, 0), 400);
    let b = batch(p.plan(secs(1), &[snap(0, 0, 500)]));
    assert!(b.moved_back.is_empty(), "{b:?}");
    // Moved back and forward to where it was: nothing to name.
    let mut p = resumed(DataLossPolicy::Earliest, 100);
    p.set_position(tp(T, 0), 50);
    p.set_position(tp(T, 0), 100);
    let b = batch(p.plan(secs(0), &[snap(0, 0, 300)]));
    assert!(b.moved_back.is_empty(), "{b:?}");
}

// ---------------------------------------------------------------------------------------
// New partitions
// ---------------------------------------------------------------------------------------

#[test]
fn new_partitions_start_from_earliest_not_the_start_policy() {
    // Start policy latest: partition 0 starts at its end, 100.
    let mut p = planner(PlannerConfig::new(secs(1)));
    wait(p.plan(secs(0), &logs(&[100])));
    // Partition 1 appears with log [0, 40): new, so from 0, not from 40.
    let b = batch(p.plan(secs(1), &logs(&[110, 40])));
    assert_eq!(spans(&b), [(0, 100, 110), (1, 0, 40)]);
    assert!(b.lost.is_empty());
}

#[test]
fn new_partition_not_starting_at_zero_is_data_loss() {
    let mut p = planner(PlannerConfig::new(secs(1)).with_start(StartPolicy::Earliest));
    batch(p.plan(secs(0), &logs(&[10])));
    // Partition 1 appears with log [20, 50): [0, 20) was removed before it was seen.
    let parts = [snap(0, 0, 10), snap(1, 20, 50)];
    assert_eq!(
        p.plan(secs(1), &parts).unwrap_err(),
        PlanError::DataLoss {
            topic: T.into(),
            partition: 1,
            lost_from: 0,
            lost_until: 20,
            reason: DataLossReason::NewPartitionNotFromZero,
        }
    );

    let mut p = planner(
        PlannerConfig::new(secs(1))
            .with_start(StartPolicy::Earliest)
            .with_data_loss(DataLossPolicy::Earliest),
    );
    batch(p.plan(secs(0), &logs(&[10])));
    let b = batch(p.plan(secs(1), &parts));
    assert_eq!(spans(&b), [(0, 10, 10), (1, 20, 50)]);
    assert_eq!(b.lost[0].reason, DataLossReason::NewPartitionNotFromZero);
}

#[test]
fn resume_treats_missing_partitions_of_known_topics_as_new() {
    // Resumed with t-0 and t-1; t-2 was added while down (new: from 0), u is a topic without
    // any position (start policy: latest).
    let mut p = Planner::resume(
        PlannerConfig::new(secs(1)),
        41,
        [(tp(T, 0), 10), (tp(T, 1), 20)],
    )
    .unwrap();
    assert!(p.timestamp_lookups(&[tp(T, 2)]).is_empty());
    let parts = [
        snap(0, 0, 15),
        snap(1, 0, 20),
        snap(2, 0, 7),
        PartitionSnapshot::new("u", 0, 0, 99),
    ];
    let b = batch(p.plan(secs(0), &parts));
    assert_eq!(b.batch_id, 41);
    let got: Vec<_> = b
        .ranges
        .iter()
        .map(|r| (r.topic.as_str(), r.partition, r.from, r.until))
        .collect();
    assert_eq!(
        got,
        [
            ("t", 0, 10, 15),
            ("t", 1, 20, 20),
            ("t", 2, 0, 7),
            ("u", 0, 99, 99)
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Batch ids, positions, input checks
// ---------------------------------------------------------------------------------------

#[test]
fn batch_ids_increase_by_one_and_positions_advance() {
    let mut p = Planner::resume(
        PlannerConfig::new(secs(1))
            .with_rate(RatePolicy::default().with_max_offsets_per_trigger(10)),
        41,
        [(tp(T, 0), 0), (tp(T, 9), 5)],
    )
    .unwrap();
    let b = batch(p.plan(secs(0), &logs(&[25])));
    assert_eq!((b.batch_id, spans(&b)), (41, vec![(0, 0, 10)]));
    let b = batch(p.plan(secs(1), &logs(&[25])));
    assert_eq!((b.batch_id, spans(&b)), (42, vec![(0, 10, 20)]));
    assert_eq!(b.planned_at, secs(1));
    assert_eq!(p.next_batch_id(), 43);
    // t-9 was not in the snapshots: it keeps its position and gets no range.
    assert_eq!(p.positions()[&tp(T, 9)], 5);
    assert_eq!(p.positions()[&tp(T, 0)], 20);
}

#[test]
fn invalid_snapshots_and_configs_are_rejected() {
    let mut p = start(StartPolicy::Earliest);
    assert_eq!(
        p.plan(secs(0), &[snap(0, 10, 5)]).unwrap_err(),
        PlanError::InvalidSnapshot {
            topic: T.into(),
            partition: 0,
            log_start: 10,
            end: 5
        }
    );
    assert_eq!(
        p.plan(secs(0), &[snap(0, 0, 5), snap(0, 0, 5)])
            .unwrap_err(),
        PlanError::DuplicatePartition {
            topic: T.into(),
            partition: 0
        }
    );
    for bad in [
        PlannerConfig::new(Duration::ZERO),
        PlannerConfig::new(secs(1))
            .with_rate(RatePolicy::default().with_max_offsets_per_trigger(0)),
        PlannerConfig::new(secs(1)).with_rate(RatePolicy::default().with_max_rate_per_partition(0)),
        PlannerConfig::new(secs(1)).with_rate(
            RatePolicy::default().with_backpressure(PidConfig::default().with_min_rate(-1.0)),
        ),
    ] {
        assert!(matches!(
            Planner::new(bad),
            Err(PlanError::InvalidConfig(_))
        ));
    }
}

// ---------------------------------------------------------------------------------------
// Partitions per batch (rotation)
// ---------------------------------------------------------------------------------------

fn rotating(max: usize, rate: RatePolicy) -> Planner {
    planner(
        PlannerConfig::new(secs(1))
            .with_rate(rate)
            .with_start(StartPolicy::Earliest)
            .with_max_partitions_per_batch(Some(max)),
    )
}

/// The partitions with a non-empty range.
fn served(plan: &BatchPlan) -> Vec<i32> {
    plan.ranges
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| r.partition)
        .collect()
}

#[test]
fn rotation_takes_partitions_in_turn_and_wraps_around() {
    // 5 partitions with 100 offsets each, at most 2 per batch, maxRatePerPartition 10 × 1 s
    // = 10 offsets per partition per batch. Left-out partitions get [position, position).
    let mut p = rotating(2, RatePolicy::default().with_max_rate_per_partition(10));
    let ends = [100; 5];
    // From the start: 0, 1. Cursor → 1.
    let b = batch(p.plan(secs(0), &logs(&ends)));
    assert_eq!(
        spans(&b),
        [(0, 0, 10), (1, 0, 10), (2, 0, 0), (3, 0, 0), (4, 0, 0)]
    );
    // After 1: 2, 3. Cursor → 3.
    let b = batch(p.plan(secs(1), &logs(&ends)));
    assert_eq!(
        spans(&b),
        [(0, 10, 10), (1, 10, 10), (2, 0, 10), (3, 0, 10), (4, 0, 0)]
    );
    // After 3: 4, then wrap to 0. Cursor → 0 (the last taken, in rotation order).
    let b = batch(p.plan(secs(2), &logs(&ends)));
    assert_eq!(
        spans(&b),
        [
            (0, 10, 20),
            (1, 10, 10),
            (2, 10, 10),
            (3, 10, 10),
            (4, 0, 10)
        ]
    );
    // After 0: 1, 2.
    let b = batch(p.plan(secs(3), &logs(&ends)));
    assert_eq!(served(&b), [1, 2]);
    assert_eq!(b.batch_id, 3);
    // Left-out partitions kept their positions.
    assert_eq!(p.positions()[&tp(T, 3)], 10);
    assert_eq!(p.positions()[&tp(T, 1)], 20);
}

/// Under maxOffsetsPerTrigger, the partition bound holds only when the data is more than a
/// batch takes: a batch that takes everything ends each range at its log's end (no stored
/// batch cut there), and leaving partitions out would only delay them (a stream caught up on
/// many partitions read them a few at a time, batch after batch).
#[test]
fn the_partition_bound_holds_only_when_the_data_is_more_than_a_batch() {
    let mut p = rotating(2, RatePolicy::default().with_max_offsets_per_trigger(100));
    // 5 × 20 = 100 offsets: all of it fits one batch, every partition read to its end.
    let b = batch(p.plan(secs(0), &logs(&[20; 5])));
    assert_eq!(served(&b), [0, 1, 2, 3, 4]);
    assert_eq!(takes(&b), [20; 5]);
    // 5 × 40 more = 200 > 100: two partitions, in turn from the start (the cursor did not
    // move), each to its end (80 ≤ 100).
    let b = batch(p.plan(secs(1), &logs(&[60; 5])));
    assert_eq!(served(&b), [0, 1]);
    assert_eq!(takes(&b), [40, 40, 0, 0, 0]);
    // 3 × 40 = 120 > 100: the next two.
    let b = batch(p.plan(secs(2), &logs(&[60; 5])));
    assert_eq!(served(&b), [2, 3]);
    // 40 left, in 4: fits.
    let b = batch(p.plan(secs(3), &logs(&[60; 5])));
    assert_eq!(served(&b), [4]);
    assert_eq!(takes(&b), [0, 0, 0, 0, 40]);
}

#[test]
fn partitions_without_data_take_no_slot() {
    // Lags 0/5/0/0/7/3, at most 2: the first two with data are 1 and 4 (0, 2, 3 skipped).
    // Cursor → 4.
    let mut p = rotating(2, RatePolicy::default());
    let b = batch(p.plan(secs(0), &logs(&[0, 5, 0, 0, 7, 3])));
    assert_eq!(served(&b), [1, 4]);
    assert_eq!(takes(&b), [0, 5, 0, 0, 7, 0]);
    // Same ends: only 5 has data (3 offsets); one partition fits the bound, so it is read and
    // the cursor stays at 4.
    let b = batch(p.plan(secs(1), &logs(&[0, 5, 0, 0, 7, 3])));
    assert_eq!(spans(&b)[5], (5, 0, 3));
    assert_eq!(served(&b), [5]);
    // Data in 0 (4), 1 (5 more), 4 (5 more): 3 > 2. After 4: 5 has none, wrap to 0, 1.
    let b = batch(p.plan(secs(2), &logs(&[4, 10, 0, 0, 12, 3])));
    assert_eq!(spans(&b)[..2], [(0, 0, 4), (1, 5, 10)]);
    assert_eq!(served(&b), [0, 1]);
    // Then 4, the only one left.
    let b = batch(p.plan(secs(3), &logs(&[4, 10, 0, 0, 12, 3])));
    assert_eq!(served(&b), [4]);
    // Nothing anywhere: no batch, as without a bound.
    assert_eq!(
        wait(p.plan(secs(4), &logs(&[4, 10, 0, 0, 12, 3]))).reason,
        WaitReason::NoNewData
    );
}

#[test]
fn max_offsets_per_trigger_is_split_over_the_partitions_taken() {
    // Lags 100/300/600/1000, at most 2 partitions, maxOffsetsPerTrigger 50.
    // Batch 0 takes 0, 1 (total lag 400): 50 × 100/400 = 12.5 → 12, 50 × 300/400 = 37.5 → 37.
    // (Split over all four, total 2000, partition 0 would get 50 × 100/2000 = 2.5 → 2.)
    let mut p = rotating(2, RatePolicy::default().with_max_offsets_per_trigger(50));
    let ends = [100, 300, 600, 1000];
    let b = batch(p.plan(secs(0), &logs(&ends)));
    assert_eq!(takes(&b), [12, 37, 0, 0]);
    // Batch 1 takes 2, 3 (total 1600): 50 × 600/1600 = 18.75 → 18, 50 × 1000/1600 = 31.25 → 31.
    let b = batch(p.plan(secs(1), &logs(&ends)));
    assert_eq!(takes(&b), [0, 0, 18, 31]);
    // Batch 2 wraps to 0, 1 with lags 88/263 (total 351): 50 × 88/351 = 12.54 → 12,
    // 50 × 263/351 = 37.46 → 37.
    let b = batch(p.plan(secs(2), &logs(&ends)));
    assert_eq!(spans(&b)[..2], [(0, 12, 24), (1, 37, 74)]);
}

#[test]
fn backpressure_rate_is_split_over_the_partitions_taken() {
    // Backpressure with an initial rate of 100/s, 1 s batches, lags 100/100/100/100, at most
    // 2: the rate is split over the two taken (total lag 200): 100/200 × 100 = 50 each.
    // (Over all four: 25 each.)
    let mut p = rotating(
        2,
        RatePolicy::default().with_backpressure(PidConfig::default().with_initial_rate(Some(100))),
    );
    let b = batch(p.plan(secs(0), &logs(&[100; 4])));
    assert_eq!(takes(&b), [50, 50, 0, 0]);
}

#[test]
fn rotation_serves_every_partition_within_ceil_n_over_max_batches() {
    // n partitions that always have data, at most `max` per batch, one offset each per batch
    // (maxRatePerPartition 1 × 1 s): each batch serves min(n, max) partitions, and no
    // partition waits more than ceil(n / max) batches between two turns. E.g. n 7, max 3:
    // {0,1,2}, {3,4,5}, {6,0,1}, {2,3,4}, … — partition 2 is served at batches 0 and 3.
    for n in 1..=9usize {
        for max in 1..=n + 1 {
            let mut p = rotating(max, RatePolicy::default().with_max_rate_per_partition(1));
            let ends = vec![1_000; n];
            let bound = n.div_ceil(max);
            let mut last_turn: Vec<Option<usize>> = vec![None; n];
            for k in 0..4 * n {
                let b = batch(p.plan(secs(k as u64), &logs(&ends)));
                let s = served(&b);
                assert_eq!(s.len(), n.min(max), "n {n}, max {max}, batch {k}");
                for &part in &s {
                    let part = part as usize;
                    let gap = last_turn[part].map_or(k + 1, |t| k - t);
                    assert!(
                        gap <= bound,
                        "n {n}, max {max}: p{part} waited {gap} batches"
                    );
                    last_turn[part] = Some(k);
                }
            }
            // Served at least once in the last ceil(n / max) batches.
            for (part, t) in last_turn.iter().enumerate() {
                assert!(
                    t.is_some_and(|t| 4 * n - 1 - t < bound),
                    "n {n}, max {max}: p{part}"
                );
            }
        }
    }
}

#[test]
fn no_bound_plans_exactly_as_before() {
    // A bound of None, and a bound no smaller than the partitions with data, give the same
    // plans: every partition with data, split as without the option.
    let rate = RatePolicy::default()
        .with_max_offsets_per_trigger(70)
        .with_max_rate_per_partition(30);
    let mut none = earliest(secs(1), rate.clone());
    assert_eq!(none.config().max_partitions_per_batch, None);
    let mut wide = rotating(3, rate);
    for (k, ends) in [[10, 200, 50], [40, 400, 50], [40, 900, 51]]
        .iter()
        .enumerate()
    {
        let a = none.plan(secs(k as u64), &logs(ends));
        let b = wide.plan(secs(k as u64), &logs(ends));
        assert_eq!(a, b);
    }
    // Lifting the bound between batches: the next plan covers everything.
    let mut p = rotating(1, RatePolicy::default());
    assert_eq!(served(&batch(p.plan(secs(0), &logs(&[5, 5, 5])))), [0]);
    p.set_max_partitions_per_batch(None);
    assert_eq!(served(&batch(p.plan(secs(1), &logs(&[5, 5, 5])))), [1, 2]);
}

#[test]
fn min_offsets_counts_every_partition_under_a_bound() {
    // minOffsetsPerTrigger 100 over 4 partitions, at most 1 per batch: "available" counts all
    // four, as without a bound.
    let mut p = planner(
        PlannerConfig::new(secs(1))
            .with_rate(RatePolicy::default().with_min_offsets_per_trigger(100, secs(60)))
            .with_start(StartPolicy::Earliest)
            .with_max_partitions_per_batch(Some(1)),
    );
    // t=0: the first check fires; partition 0 is read: [0, 30).
    let b = batch(p.plan(secs(0), &logs(&[30, 30, 30, 30])));
    assert_eq!(served(&b), [0]);
    // t=1: 30 + 30 + 30 = 90 available < 100: wait (though one partition alone has 30).
    assert!(matches!(
        wait(p.plan(secs(1), &logs(&[30, 30, 30, 30]))).reason,
        WaitReason::BelowMinOffsets {
            available: 90,
            min: 100
        }
    ));
    // t=2: 30 + 30 + 40 = 100 ≥ 100: fire; the rotation (cursor 0, untouched by the wait)
    // takes partition 1.
    let b = batch(p.plan(secs(2), &logs(&[30, 30, 30, 40])));
    assert_eq!(spans(&b)[1], (1, 0, 30));
    assert_eq!(served(&b), [1]);
}

#[test]
fn data_loss_and_new_partitions_are_resolved_for_partitions_left_out() {
    // Resumed at 5 in partitions 0 and 1; retention moved 1's log start to 20. Under the
    // Earliest policy with at most 1 partition per batch, batch 7 reads partition 0 only, yet
    // reports [5, 20) of partition 1 lost and moves it to 20; partition 2 is new (from 0).
    let mut p = Planner::resume(
        PlannerConfig::new(secs(1))
            .with_data_loss(DataLossPolicy::Earliest)
            .with_max_partitions_per_batch(Some(1)),
        7,
        [(tp(T, 0), 5), (tp(T, 1), 5)],
    )
    .unwrap();
    let snaps = [snap(0, 0, 100), snap(1, 20, 100), snap(2, 0, 100)];
    let b = batch(p.plan(secs(0), &snaps));
    assert_eq!(spans(&b), [(0, 5, 100), (1, 20, 20), (2, 0, 0)]);
    assert_eq!(
        b.lost
            .iter()
            .map(|l| (l.partition, l.from, l.until))
            .collect::<Vec<_>>(),
        [(1, 5, 20)]
    );
    // Then 1 from 20, then 2 from 0.
    let b = batch(p.plan(secs(1), &snaps));
    assert_eq!(spans(&b)[1], (1, 20, 100));
    assert!(b.lost.is_empty());
    let b = batch(p.plan(secs(2), &snaps));
    assert_eq!(spans(&b)[2], (2, 0, 100));
}

#[test]
fn a_zero_bound_is_rejected_or_taken_as_one() {
    assert!(matches!(
        Planner::new(PlannerConfig::new(secs(1)).with_max_partitions_per_batch(Some(0))),
        Err(PlanError::InvalidConfig(_))
    ));
    let mut p = rotating(2, RatePolicy::default());
    p.set_max_partitions_per_batch(Some(0));
    assert_eq!(p.config().max_partitions_per_batch, Some(1));
    assert_eq!(served(&batch(p.plan(secs(0), &logs(&[5, 5])))), [0]);
}

// ---------------------------------------------------------------------------------------
// Splitting (KafkaOffsetRangeCalculator)
// ---------------------------------------------------------------------------------------

fn r(partition: i32, from: i64, until: i64) -> OffsetRange {
    OffsetRange::new(T, partition, from, until)
}

fn cut(ranges: &[OffsetRange], policy: SplitPolicy) -> Vec<(i32, i64, i64)> {
    split_ranges(ranges, &policy)
        .iter()
        .map(|r| (r.partition, r.from, r.until))
        .collect()
}

#[test]
fn split_min_partitions_proportionally() {
    // Sizes 100/200/700 (total 1000), minPartitions 10:
    //   round(100/1000 × 10) = 1 → whole; split total 900, split minimum 10 − 1 = 9;
    //   round(200/900 × 9) = 2, round(700/900 × 9) = 7 → 1 + 2 + 7 = 10 ranges of 100.
    let got = cut(
        &[r(0, 0, 100), r(1, 0, 200), r(2, 1000, 1700)],
        SplitPolicy::default().with_min_partitions(10),
    );
    let mut want = vec![(0, 0, 100), (1, 0, 100), (1, 100, 200)];
    want.extend((0..7).map(|k| (2, 1000 + 100 * k, 1100 + 100 * k)));
    assert_eq!(got, want);
}

#[test]
fn split_last_parts_absorb_the_rounding() {
    // [0, 10) into 3: 10/3 = 3, then 7/2 = 3, then 4/1 = 4.
    assert_eq!(
        cut(
            &[r(0, 0, 10)],
            SplitPolicy::default().with_min_partitions(3)
        ),
        [(0, 0, 3), (0, 3, 6), (0, 6, 10)]
    );
}

#[test]
fn split_max_records_per_range() {
    // 1001 offsets, at most 500: ceil(1001/500) = 3 parts: 333, 668/2 = 334, 334.
    assert_eq!(
        cut(
            &[r(0, 0, 1001), r(1, 0, 500)],
            SplitPolicy::default().with_max_records_per_range(500)
        ),
        [(0, 0, 333), (0, 333, 667), (0, 667, 1001), (1, 0, 500)]
    );
}

#[test]
fn split_max_records_then_min_partitions() {
    // Sizes 1000 and 100, at most 300: ceil(1000/300) = 4 pieces of 250, and 100 stays: 5.
    // minPartitions 8 > 5: total 1100; round(250/1100 × 8) = round(1.82) = 2 each;
    // round(100/1100 × 8) = round(0.73) = 1 → whole. Split total 1000, minimum 8 − 1 = 7:
    // round(250/1000 × 7) = round(1.75) = 2 each → 4 × 2 + 1 = 9 ranges; 125 offsets each.
    let got = cut(
        &[r(0, 0, 1000), r(1, 0, 100)],
        SplitPolicy::default()
            .with_max_records_per_range(300)
            .with_min_partitions(8),
    );
    let mut want: Vec<_> = (0..8).map(|k| (0, 125 * k, 125 * (k + 1))).collect();
    want.push((1, 0, 100));
    assert_eq!(got, want);
}

#[test]
fn split_tops_up_what_spark_rounding_leaves_short() {
    // Sizes 5/5/5, minPartitions 4: round(5/15 × 4) = round(1.33) = 1 for each, so Spark
    // leaves all three whole (3 < 4). The top-up splits the first of the largest: 5 → 2 + 3.
    assert_eq!(
        cut(
            &[r(0, 0, 5), r(1, 0, 5), r(2, 0, 5)],
            SplitPolicy::default().with_min_partitions(4)
        ),
        [(0, 0, 2), (0, 2, 5), (1, 0, 5), (2, 0, 5)]
    );
    // Never below one offset per range: 2 offsets, minPartitions 5 → 2 ranges.
    assert_eq!(
        cut(&[r(0, 0, 2)], SplitPolicy::default().with_min_partitions(5)),
        [(0, 0, 1), (0, 1, 2)]
    );
}

#[test]
fn split_drops_empty_ranges_and_keeps_enough_partitions_whole() {
    let ranges = [r(0, 5, 5), r(1, 0, 10), r(2, 0, 3)];
    assert_eq!(
        cut(&ranges, SplitPolicy::default()),
        [(1, 0, 10), (2, 0, 3)]
    );
    assert_eq!(
        cut(&ranges, SplitPolicy::default().with_min_partitions(2)),
        [(1, 0, 10), (2, 0, 3)]
    );
    // Through the plan.
    let plan = BatchPlan {
        batch_id: 0,
        ranges: ranges.to_vec(),
        lost: Vec::new(),
        moved_back: BTreeMap::new(),
        planned_at: secs(0),
    };
    assert_eq!(plan.split(&SplitPolicy::default()).len(), 2);
}

proptest! {
    /// Splits keep exact coverage: for every input range, its pieces are non-empty,
    /// contiguous, in order, and their union is the range; pieces respect the maximum; and
    /// there are at least min(minPartitions, total offsets) of them.
    #[test]
    fn split_keeps_exact_coverage(
        sizes in prop::collection::vec((0i64..1_000_000, 0i64..5_000), 0..12),
        min_partitions in prop::option::of(1usize..64),
        max_records in prop::option::of(1u64..2_000),
    ) {
        let ranges: Vec<OffsetRange> = (0..)
            .zip(&sizes)
            .map(|(p, &(from, len))| r(p, from, from + len))
            .collect();
        let policy = SplitPolicy { min_partitions, max_records_per_range: max_records };
        let pieces = split_ranges(&ranges, &policy);

        let mut it = pieces.iter().peekable();
        for range in ranges.iter().filter(|r| !r.is_empty()) {
            let mut at = range.from;
            while let Some(piece) = it.next_if(|p| p.partition == range.partition) {
                prop_assert!(!piece.is_empty());
                prop_assert_eq!(piece.from, at);
                if let Some(max) = max_records {
                    prop_assert!(piece.len() <= max);
                }
                at = piece.until;
            }
            prop_assert_eq!(at, range.until);
        }
        prop_assert!(it.next().is_none());

        let total: u64 = ranges.iter().map(OffsetRange::len).sum();
        if let Some(min) = min_partitions {
            prop_assert!(pieces.len() as u64 >= (min as u64).min(total));
        }
    }

    /// Successive plans are contiguous per partition and stay within the log, whatever the
    /// limits; with maxOffsetsPerTrigger the batch exceeds the limit by at most one offset per
    /// partition (the ceiling of shares below one); with a partition bound, at most that many
    /// ranges are non-empty.
    #[test]
    fn plans_are_contiguous_and_bounded(
        growth in prop::collection::vec(prop::collection::vec(0i64..5_000, 3), 1..8),
        max_offsets in prop::option::of(1u64..3_000),
        max_rate in prop::option::of(1u64..3_000),
        max_partitions in prop::option::of(1usize..4),
    ) {
        let rate = RatePolicy {
            max_offsets_per_trigger: max_offsets,
            max_rate_per_partition: max_rate,
            ..RatePolicy::default()
        };
        let mut p = earliest(secs(1), rate);
        p.set_max_partitions_per_batch(max_partitions);
        let mut ends = vec![0i64; 3];
        let mut next = [0i64; 3];
        let mut expected_id = 0;
        for (i, step) in growth.iter().enumerate() {
            for (end, g) in ends.iter_mut().zip(step) {
                *end += g;
            }
            let available: u64 = ends.iter().zip(&next).map(|(e, n)| (e - n) as u64).sum();
            match p.plan(secs(i as u64), &logs(&ends)).unwrap() {
                PlanOutcome::Batch(b) => {
                    prop_assert_eq!(b.batch_id, expected_id);
                    expected_id += 1;
                    for (k, range) in b.ranges.iter().enumerate() {
                        prop_assert_eq!(range.from, next[k]);
                        prop_assert!(range.from <= range.until && range.until <= ends[k]);
                        if let Some(rate) = max_rate {
                            prop_assert!(range.len() <= rate);
                        }
                        next[k] = range.until;
                    }
                    if let Some(max) = max_offsets {
                        prop_assert!(b.offset_count() <= max + 3);
                    }
                    // The bound holds when the data is more than a batch takes.
                    let split = max_offsets.is_none_or(|m| available > m);
                    if let (Some(max), true) = (max_partitions, split) {
                        prop_assert!(served(&b).len() <= max);
                    }
                }
                PlanOutcome::Wait(w) => prop_assert_eq!(w.reason, WaitReason::NoNewData),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Triggers and wall-clock pacing
// ---------------------------------------------------------------------------------------

/// Plans every `step` from 0 to `until` (a driver polling as fast as possible) and returns
/// `(planned_at, offsets per partition)` of each batch.
fn run_paced(
    p: &mut Planner,
    logs: &[PartitionSnapshot],
    step: Duration,
    until: Duration,
) -> Vec<(Duration, Vec<u64>)> {
    let mut out = Vec::new();
    let mut now = Duration::ZERO;
    while now <= until {
        match p.plan(now, logs).unwrap() {
            PlanOutcome::Batch(b) => out.push((now, takes(&b))),
            PlanOutcome::Wait(w) => {
                if w.reason == WaitReason::Paced {
                    assert_eq!(w.retry_at, p.not_before(), "a paced wait says until when");
                    assert!(w.retry_at.unwrap() > now);
                }
            }
        }
        now += step;
    }
    out
}

#[test]
fn max_rate_holds_in_wall_clock_time_as_fast_as_possible() {
    // 100 records/s per partition, interval 1 s, a backlog of 10,000: a driver that asks every
    // 10 ms gets one batch of 100 per partition per second, never more.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_rate_per_partition(100),
    );
    let batches = run_paced(&mut p, &logs(&[10_000, 10_000]), ms(10), ms(9_999));
    assert_eq!(batches.len(), 10, "{batches:?}");
    for (i, (at, take)) in batches.iter().enumerate() {
        assert_eq!(
            *at,
            secs(i as u64),
            "batch {i} starts one interval after the previous"
        );
        assert_eq!(take, &[100, 100]);
    }
    // Any window of w seconds holds at most 100 × (w + 1) records per partition.
    let total: u64 = batches.iter().map(|(_, t)| t[0]).sum();
    assert_eq!(total, 1000);
}

#[test]
fn a_partial_batch_uses_only_its_share_of_the_interval() {
    // Rate 100/s, interval 1 s: partition 0 has 30 records, so the batch used 30/100 of an
    // interval and the next may start 300 ms later; a caught-up stream is not held back a
    // whole interval.
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_rate_per_partition(100),
    );
    let b = batch(p.plan(secs(0), &logs(&[30])));
    assert_eq!(takes(&b), [30]);
    assert_eq!(p.not_before(), Some(ms(300)));
    let w = wait(p.plan(ms(200), &logs(&[200])));
    assert_eq!(w.reason, WaitReason::Paced);
    assert_eq!(w.retry_at, Some(ms(300)));
    let b = batch(p.plan(ms(300), &logs(&[200])));
    assert_eq!(spans(&b), [(0, 30, 130)]);
    assert_eq!(p.not_before(), Some(ms(1300)));
}

#[test]
fn backpressure_rate_holds_in_wall_clock_time() {
    // Published rate 1000/s over lags 1000/3000 (interval 2 s): caps 500/1500 per batch, so
    // 2000 records per 2 s, and the next batch 2 s later.
    let mut p = earliest(
        secs(2),
        RatePolicy::default().with_backpressure(PidConfig::default()),
    );
    publish_1000_per_s(&mut p);
    let b = batch(p.plan(secs(4), &logs(&[1000, 3000])));
    assert_eq!(takes(&b), [500, 1500]);
    assert_eq!(p.not_before(), Some(secs(6)));
    assert_eq!(
        wait(p.plan(secs(5), &logs(&[1000, 3000]))).reason,
        WaitReason::Paced
    );
    batch(p.plan(secs(6), &logs(&[1000, 3000])));
}

#[test]
fn processing_time_trigger_starts_at_most_every_interval_and_overruns_start_at_once() {
    let mut p = planner(
        PlannerConfig::new(secs(5))
            .with_start(StartPolicy::Earliest)
            .with_trigger(Trigger::ProcessingTime(secs(5))),
    );
    batch(p.plan(secs(0), &logs(&[10])));
    let w = wait(p.plan(secs(1), &logs(&[20])));
    assert_eq!((w.reason, w.retry_at), (WaitReason::Paced, Some(secs(5))));
    // Due at 5 s; the driver comes back at 7 s (the previous batch overran): at once.
    let b = batch(p.plan(secs(7), &logs(&[20])));
    assert_eq!(spans(&b), [(0, 10, 20)]);
    // The next is due one interval after that start.
    assert_eq!(p.not_before(), Some(secs(12)));
    // No data when due: no batch, and the next one starts as soon as data comes.
    assert_eq!(
        wait(p.plan(secs(12), &logs(&[20]))).reason,
        WaitReason::NoNewData
    );
    batch(p.plan(secs(13), &logs(&[21])));
}

#[test]
fn without_a_rate_or_interval_batches_are_not_paced() {
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_offsets_per_trigger(10),
    );
    batch(p.plan(secs(0), &logs(&[100])));
    assert_eq!(p.not_before(), None);
    batch(p.plan(secs(0), &logs(&[100])));
}

#[test]
fn a_processing_time_trigger_needs_an_interval() {
    let e = Planner::new(
        PlannerConfig::new(secs(1)).with_trigger(Trigger::ProcessingTime(Duration::ZERO)),
    )
    .unwrap_err();
    assert!(matches!(e, PlanError::InvalidConfig(_)), "{e}");
}

proptest! {
    /// Whatever the poll times, a partition never gets more than `rate × (window + interval)`
    /// records in any window, with maxRatePerPartition `rate`.
    #[test]
    fn max_rate_bounds_every_window(
        rate in 1u64..500,
        interval_ms in 100u64..3000,
        steps in proptest::collection::vec(1u64..700, 1..200),
    ) {
        let mut p = earliest(ms(interval_ms), RatePolicy::default().with_max_rate_per_partition(rate));
        let logs = logs(&[1_000_000]);
        let mut now = Duration::ZERO;
        let mut got: Vec<(Duration, u64)> = Vec::new();
        for s in steps {
            if let PlanOutcome::Batch(b) = p.plan(now, &logs).unwrap() {
                got.push((now, takes(&b)[0]));
            }
            now += ms(s);
        }
        for (i, (start, _)) in got.iter().enumerate() {
            for (end, _) in &got[i..] {
                let window = (*end - *start).as_secs_f64();
                let n: u64 = got.iter().filter(|(t, _)| t >= start && t <= end).map(|(_, n)| n).sum();
                let cap_per_batch = ((interval_ms as f64 / 1000.0) * rate as f64) as u64;
                let bound = rate as f64 * window + cap_per_batch.max(1) as f64;
                prop_assert!(n as f64 <= bound + 1e-6, "{n} records in {window} s > {bound}");
            }
        }
    }
}

#[test]
fn start_by_timestamp_per_partition_with_a_strategy() {
    // Spark's startingOffsetsByTimestamp: one timestamp per partition, mixed with offsets.
    let policy = StartPolicy::Explicit(BTreeMap::from([
        (tp(T, 0), StartOffset::Timestamp(1_000)),
        (tp(T, 1), StartOffset::Timestamp(2_000)),
        (tp(T, 2), StartOffset::Offset(7)),
    ]));
    let mut p = start(policy.clone());
    assert_eq!(
        p.timestamp_lookups(&[tp(T, 0), tp(T, 1), tp(T, 2)]),
        [(tp(T, 0), 1_000), (tp(T, 1), 2_000)]
    );
    let parts = [
        snap(0, 0, 100).with_timestamp_lookup(TimestampLookup::Offset(40)),
        snap(1, 0, 100).with_timestamp_lookup(TimestampLookup::NoMatch),
        snap(2, 0, 100),
    ];
    // Strategy latest (the default): no record that recent → the end.
    let b = batch(p.plan(secs(0), &parts));
    assert_eq!(spans(&b), [(0, 40, 100), (1, 100, 100), (2, 7, 100)]);
    // Strategy error: names the partition, and the planner is unchanged.
    let mut p = planner(
        PlannerConfig::new(secs(1))
            .with_start(policy)
            .with_timestamp_strategy(TimestampStrategy::Error),
    );
    let e = p.plan(secs(0), &parts).unwrap_err();
    assert_eq!(
        e,
        PlanError::NoOffsetForTimestamp {
            timestamp: 2_000,
            partitions: vec![tp(T, 1)]
        }
    );
    assert!(e.to_string().contains("t-1"), "{e}");
    assert!(p.positions().is_empty());
    // Not looked up at all: the driver's mistake, named.
    let e = p
        .plan(
            secs(0),
            &[snap(0, 0, 100), snap(1, 0, 100), snap(2, 0, 100)],
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            PlanError::MissingTimestampLookup {
                timestamp: 1_000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn kcat_offset_and_from_end_starts() {
    // Logs [10, 100) and [0, 30): `-o 50` starts at 50 and at the end 30 (past it); `-o -25`
    // starts 25 before each end, at the log start when a partition has fewer.
    let logs = [snap(0, 10, 100), snap(1, 0, 30)];
    let mut p = planner(PlannerConfig::new(secs(1)).with_start(StartPolicy::Offset(50)));
    let b = batch(p.plan(secs(0), &logs));
    assert_eq!(spans(&b), [(0, 50, 100), (1, 30, 30)]);
    let mut p = planner(PlannerConfig::new(secs(1)).with_start(StartPolicy::FromEnd(25)));
    let b = batch(p.plan(secs(0), &logs));
    assert_eq!(spans(&b), [(0, 75, 100), (1, 5, 30)]);
    let mut p = planner(PlannerConfig::new(secs(1)).with_start(StartPolicy::FromEnd(95)));
    let b = batch(p.plan(secs(0), &logs));
    assert_eq!(spans(&b), [(0, 10, 100), (1, 0, 30)]);
    // Below the log start: data loss, as for any position.
    let mut p = planner(PlannerConfig::new(secs(1)).with_start(StartPolicy::Offset(5)));
    assert!(matches!(
        p.plan(secs(0), &logs),
        Err(PlanError::DataLoss {
            lost_from: 5,
            lost_until: 10,
            ..
        })
    ));
}

/// A batch read only up to what fits in memory (issue 32): its ranges end early, and the next
/// plan starts each partition where its range really ended; that is not a move back (nothing
/// past it was handed out), and a value at or past the position changes nothing.
#[test]
fn a_range_ended_early_is_where_the_next_batch_starts() {
    let mut p = earliest(secs(1), RatePolicy::default());
    let b = batch(p.plan(secs(0), &logs(&[100, 100])));
    assert_eq!(spans(&b), [(0, 0, 100), (1, 0, 100)]);
    let read = |spans: &[(i32, i64, i64)]| -> Vec<OffsetRange> {
        spans
            .iter()
            .map(|&(p, from, until)| OffsetRange::new(T, p, from, until))
            .collect()
    };
    p.end_early(&read(&[(0, 0, 40), (1, 0, 0)]));
    // Past the position, below the range's start, an unknown partition: nothing.
    p.end_early(&read(&[(1, 0, 500), (9, 0, 5)]));
    p.end_early(&read(&[(0, 50, 45)]));
    assert_eq!(p.positions().get(&tp(T, 0)), Some(&40));
    let b = batch(p.plan(secs(1), &logs(&[100, 100])));
    assert_eq!(spans(&b), [(0, 40, 100), (1, 0, 100)]);
    assert!(b.moved_back.is_empty());
    assert!(!p.positions().contains_key(&tp(T, 9)));
}

/// maxRatePerPartition paces the next batch by what the last one read, not by what it
/// planned: a batch planned for 100 records a partition at 10/s waits 10 s; read only up to
/// 20 of them (memory), it waits 2 s.
#[test]
fn a_batch_ended_early_is_paced_by_what_it_read() {
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_max_rate_per_partition(10),
    );
    let b = batch(p.plan(secs(0), &logs(&[1000])));
    assert_eq!(spans(&b), [(0, 0, 10)]);
    assert_eq!(p.not_before(), Some(secs(1)));
    p.end_early(&[OffsetRange::new(T, 0, 0, 2)]);
    assert_eq!(p.not_before(), Some(ms(200)));
    let b = batch(p.plan(ms(200), &logs(&[1000])));
    assert_eq!(spans(&b), [(0, 2, 12)]);
}

// ---------------------------------------------------------------------------------------
// Found by cargo-mutants (docs/mutants.md): behaviour no test above pinned down
// ---------------------------------------------------------------------------------------

#[test]
fn ranges_partitions_and_losses_print_as_kafka_names_them() {
    let cases: [(String, &str); 4] = [
        (tp(T, 3).to_string(), "t-3"),
        (OffsetRange::new(T, 3, 5, 10).to_string(), "t-3 [5, 10)"),
        (
            DataLossReason::EndMovedBack { previous_end: 42 }.to_string(),
            "end offset moved back from 42 (topic recreated or log truncated)",
        ),
        (
            PlanError::MissingTimestampLookup {
                timestamp: 7,
                partitions: vec![tp(T, 0), tp(T, 1)],
            }
            .to_string(),
            "partitions [t-0, t-1] need the offset for timestamp 7 but it was not looked up",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
}

#[test]
fn a_plan_is_empty_only_when_no_range_holds_an_offset() {
    let plan = |ranges: &[(i64, i64)]| BatchPlan {
        batch_id: 0,
        ranges: (0..)
            .zip(ranges)
            .map(|(p, &(from, until))| r(p, from, until))
            .collect(),
        lost: Vec::new(),
        moved_back: BTreeMap::new(),
        planned_at: secs(0),
    };
    for (ranges, empty, offsets) in [
        (&[][..], true, 0),
        (&[(5, 5), (7, 7)][..], true, 0),
        (&[(5, 5), (7, 9)][..], false, 2),
        (&[(0, 3)][..], false, 3),
    ] {
        let plan = plan(ranges);
        assert_eq!(
            (plan.is_empty(), plan.offset_count()),
            (empty, offsets),
            "{ranges:?}"
        );
    }
}

/// A published rate below 1 record/s is stored as 0 (Spark's `toLong`), which is "no rate
/// yet": the planner reports none and plans at the initial rate, as
/// `maxMessagesPerPartition` does with `if (lr > 0) lr else initialRate`.
#[test]
fn a_published_rate_truncated_to_zero_counts_as_no_rate() {
    let mut p = earliest(
        secs(1),
        RatePolicy::default().with_backpressure(PidConfig::default().with_min_rate(0.5)),
    );
    // Seeds 2000/s; then 1 record in 10 s: 0.1/s, new rate max(2000 − 1999.9, 0.5) = 0.5.
    p.on_batch_completed(&BatchCompletion::new(ms(1000), 1000, ms(500), ms(0)));
    let rate = p.on_batch_completed(&BatchCompletion::new(ms(2000), 1, ms(10_000), ms(0)));
    assert_eq!(rate, Some(0));
    assert_eq!(p.latest_rate(), None);
    // The initial rate (1000/s) × 1 s.
    assert_eq!(takes(&batch(p.plan(secs(2), &logs(&[10_000])))), [1000]);
}

#[test]
fn max_offsets_per_trigger_changes_from_the_next_plan_on() {
    let mut p = earliest(secs(1), RatePolicy::default());
    p.set_max_offsets_per_trigger(Some(30));
    assert_eq!(takes(&batch(p.plan(secs(0), &logs(&[100, 100])))), [15, 15]);
    p.set_max_offsets_per_trigger(None);
    assert_eq!(takes(&batch(p.plan(secs(1), &logs(&[100, 100])))), [85, 85]);
}

/// `set_position` at the position itself is no move back, even when the data-loss check
/// then moves the partition forward to the log start.
#[test]
fn setting_a_position_to_itself_is_no_move_back() {
    let mut p = resumed(DataLossPolicy::Earliest, 50);
    p.set_position(tp(T, 0), 50);
    let b = batch(p.plan(secs(0), &[snap(0, 100, 200)]));
    assert_eq!(spans(&b), [(0, 100, 200)]);
    assert_eq!(b.lost.len(), 1);
    assert!(b.moved_back.is_empty(), "{b:?}");
}

/// After the first plan a partition without a position is new: it starts at its log start,
/// so it needs no look-up by timestamp.
#[test]
fn new_partitions_need_no_timestamp_lookup() {
    let mut p = start(StartPolicy::Timestamp(5));
    let parts = [snap(0, 0, 10).with_timestamp_lookup(TimestampLookup::Offset(4))];
    batch(p.plan(secs(0), &parts));
    assert!(p.timestamp_lookups(&[tp(T, 0), tp(T, 1)]).is_empty());
}

/// A zero maximum per range is no maximum (as `None`), not a division by zero.
#[test]
fn split_with_a_zero_max_records_per_range_keeps_ranges_whole() {
    assert_eq!(
        cut(
            &[r(0, 0, 10), r(1, 5, 8)],
            SplitPolicy::default().with_max_records_per_range(0)
        ),
        [(0, 0, 10), (1, 5, 8)]
    );
}

/// As many ranges as `minPartitions` already: nothing is cut (Spark returns the ranges as
/// they are), though the proportional shares would give one range 2 parts: sizes 1 × 6, 90
/// and 30 (total 126), minPartitions 8: 90 → round(5.7) = 6 and 30 → round(1.9) = 2 are not
/// whole; the 8 − 6 = 2 parts split 120 offsets as round(1.5) = 2 and round(0.5) = 1.
#[test]
fn split_cuts_nothing_when_there_are_min_partitions_ranges_already() {
    let mut ranges: Vec<OffsetRange> = (0..6).map(|p| r(p, 0, 1)).collect();
    ranges.extend([r(6, 0, 90), r(7, 0, 30)]);
    let want: Vec<(i32, i64, i64)> = ranges
        .iter()
        .map(|r| (r.partition, r.from, r.until))
        .collect();
    assert_eq!(
        cut(&ranges, SplitPolicy::default().with_min_partitions(8)),
        want
    );
    // One more wanted (9): the 90 is cut in round(90/120 × 3) = 2, the 30 stays whole.
    assert_eq!(
        cut(&ranges, SplitPolicy::default().with_min_partitions(9)).len(),
        9
    );
}

/// The top-up gives the next part to the piece with the most offsets per part, compared
/// exactly, the first on ties: sizes 4/3/3, minPartitions 8: round(4/10 × 8) = 3 and
/// round(3/10 × 8) = 2 twice (7); the eighth goes to the first 3/2 (1.5 > 4/3).
#[test]
fn split_top_up_takes_the_most_offsets_per_part_first_on_ties() {
    assert_eq!(
        cut(
            &[r(0, 0, 4), r(1, 0, 3), r(2, 0, 3)],
            SplitPolicy::default().with_min_partitions(8)
        ),
        [
            (0, 0, 1),
            (0, 1, 2),
            (0, 2, 4),
            (1, 0, 1),
            (1, 1, 2),
            (1, 2, 3),
            (2, 0, 1),
            (2, 1, 3)
        ]
    );
}

/// `divide` hands out non-empty pieces only: an empty range gives none, whatever the parts.
#[test]
fn divide_drops_empty_pieces() {
    for (range, parts, want) in [
        (r(0, 5, 5), 3, vec![]),
        (r(0, 5, 7), 3, vec![(0, 5, 6), (0, 6, 7)]),
        (r(0, 5, 8), 0, vec![(0, 5, 8)]),
    ] {
        let got: Vec<(i32, i64, i64)> = divide(&range, parts)
            .iter()
            .map(|r| (r.partition, r.from, r.until))
            .collect();
        assert_eq!(got, want, "{range} in {parts}");
    }
}
