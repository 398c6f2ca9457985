//! Rate limits: how many offsets each partition may contribute to one batch (see
//! [`RatePolicy`]).

use std::time::Duration;

use super::{PidConfig, PlanError};

/// Rate limits, each optional. The most restrictive applicable limit wins per partition.
///
/// Two families, as in Spark, combined per partition by taking the smallest cap:
///
/// - The DStream's (`DirectKafkaInputDStream.maxMessagesPerPartition`,
///   spark-streaming-kafka-0-10): a rate in records per second per partition, times the batch
///   interval in seconds. The rate is `maxRatePerPartition`, or, with backpressure, the
///   estimator's total rate split across partitions in proportion to their lag
///   (`lag / totalLag × rate`) and capped by `maxRatePerPartition`. The product is truncated
///   (`(secsPerBatch × limit).toLong`) and raised to `minRatePerPartition` (default 1) so no
///   partition stalls.
/// - Structured Streaming's (`KafkaMicroBatchStream`, spark-sql-kafka-0-10):
///   `maxOffsetsPerTrigger` split across partitions with lag in proportion to it
///   (`rateLimit`: `prorate = limit × (size / total)`, then `ceil` when `prorate < 1` — "don't
///   completely starve small topicpartitions" — and `floor` otherwise), and
///   `minOffsetsPerTrigger` with `maxTriggerDelay` (`delayBatch`): skip the batch while fewer
///   offsets are available than the minimum, unless the delay has passed since the last batch.
///
/// The ceiling rule lets a batch exceed `maxOffsetsPerTrigger` slightly when many partitions
/// have tiny shares (three partitions with equal lag and a limit of 2 read one offset each).
/// That is Spark's behaviour, kept on purpose.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RatePolicy {
    /// Records per second per partition (`spark.streaming.kafka.maxRatePerPartition`),
    /// multiplied by the batch interval in seconds.
    pub max_rate_per_partition: Option<u64>,
    /// The floor of the DStream caps, per partition per batch
    /// (`spark.streaming.kafka.minRatePerPartition`, default 1). Applies only when
    /// `max_rate_per_partition` or backpressure is set.
    pub min_rate_per_partition: u64,
    /// Offsets per batch across all partitions, split by lag (`maxOffsetsPerTrigger`).
    pub max_offsets_per_trigger: Option<u64>,
    /// Offsets that must be available before a batch is made (`minOffsetsPerTrigger`). As in
    /// Spark, the first check after the planner starts always fires (Spark's last-trigger time
    /// starts at 0), and each batch made restarts the `max_trigger_delay` clock.
    pub min_offsets_per_trigger: Option<u64>,
    /// How long `min_offsets_per_trigger` may hold batches back (`maxTriggerDelay`, default
    /// 15 minutes as in Spark).
    pub max_trigger_delay: Duration,
    /// Backpressure with a PID rate estimator (`spark.streaming.backpressure.enabled`).
    pub backpressure: Option<PidConfig>,
}

impl Default for RatePolicy {
    fn default() -> Self {
        Self {
            max_rate_per_partition: None,
            min_rate_per_partition: 1,
            max_offsets_per_trigger: None,
            min_offsets_per_trigger: None,
            max_trigger_delay: Duration::from_secs(15 * 60),
            backpressure: None,
        }
    }
}

impl RatePolicy {
    /// With a maximum rate per partition, in records per second.
    pub fn with_max_rate_per_partition(mut self, records_per_s: u64) -> Self {
        self.max_rate_per_partition = Some(records_per_s);
        self
    }

    /// With a minimum number of offsets per partition per batch for the DStream caps.
    pub fn with_min_rate_per_partition(mut self, records: u64) -> Self {
        self.min_rate_per_partition = records;
        self
    }

    /// With a maximum number of offsets per batch, split by lag.
    pub fn with_max_offsets_per_trigger(mut self, offsets: u64) -> Self {
        self.max_offsets_per_trigger = Some(offsets);
        self
    }

    /// With a minimum number of offsets per batch and the longest a batch may wait for them.
    pub fn with_min_offsets_per_trigger(mut self, offsets: u64, max_delay: Duration) -> Self {
        self.min_offsets_per_trigger = Some(offsets);
        self.max_trigger_delay = max_delay;
        self
    }

    /// With backpressure.
    pub fn with_backpressure(mut self, pid: PidConfig) -> Self {
        self.backpressure = Some(pid);
        self
    }

    pub(super) fn validate(&self) -> Result<(), PlanError> {
        if self.max_rate_per_partition == Some(0) {
            return Err(PlanError::InvalidConfig(
                "max rate per partition must be positive",
            ));
        }
        if self.max_offsets_per_trigger == Some(0) {
            return Err(PlanError::InvalidConfig(
                "max offsets per trigger must be positive",
            ));
        }
        if let Some(pid) = &self.backpressure {
            pid.validate()?;
        }
        Ok(())
    }
}

/// Per-partition caps (index-aligned with `lags`), `None` where no limit applies.
pub(super) fn caps(
    lags: &[u64],
    policy: &RatePolicy,
    estimated_rate: Option<f64>,
    batch_interval: Duration,
) -> Vec<Option<u64>> {
    let dstream = dstream_caps(
        lags,
        policy.max_rate_per_partition,
        policy.min_rate_per_partition,
        estimated_rate,
        batch_interval,
    );
    let trigger = policy
        .max_offsets_per_trigger
        .and_then(|limit| max_offsets_caps(lags, limit));
    (0..lags.len())
        .map(|i| {
            let a = dstream.as_ref().map(|c| c[i]);
            let b = trigger.as_ref().and_then(|c| c[i]);
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        })
        .collect()
}

/// The DStream's `maxMessagesPerPartition`: offsets per partition for one batch from
/// `maxRatePerPartition` and the backpressure rate, or `None` when neither limits anything.
///
/// `estimated_rate` is `Some` when backpressure is on: the latest published rate, or the
/// initial rate before one was published (a rate ≤ 0 means "none yet", as in Spark).
pub(super) fn dstream_caps(
    lags: &[u64],
    max_rate_per_partition: Option<u64>,
    min_rate_per_partition: u64,
    estimated_rate: Option<f64>,
    batch_interval: Duration,
) -> Option<Vec<u64>> {
    let rates = dstream_rates(lags, max_rate_per_partition, estimated_rate)?;
    let secs_per_batch = batch_interval.as_millis() as f64 / 1000.0;
    Some(
        rates
            .iter()
            // `as u64` truncates like Scala's `toLong` (and saturates).
            .map(|limit| ((secs_per_batch * limit) as u64).max(min_rate_per_partition))
            .collect(),
    )
}

/// The records per second each partition may deliver under `maxRatePerPartition` and the
/// backpressure rate (split by lag), or `None` when neither limits anything.
pub(super) fn dstream_rates(
    lags: &[u64],
    max_rate_per_partition: Option<u64>,
    estimated_rate: Option<f64>,
) -> Option<Vec<f64>> {
    let max_rate = max_rate_per_partition.map(|r| r as f64);
    let rates: Vec<f64> = match estimated_rate.filter(|r| *r > 0.0) {
        Some(rate) => {
            let total_lag: u64 = lags.iter().sum();
            if total_lag == 0 {
                // Spark divides by zero here (NaN rates, whose sum is not > 0): no caps.
                // Nothing is available anyway.
                return None;
            }
            lags.iter()
                .map(|lag| {
                    let backpressure = *lag as f64 / total_lag as f64 * rate;
                    max_rate.map_or(backpressure, |m| backpressure.min(m))
                })
                .collect()
        }
        None => lags.iter().map(|_| max_rate.unwrap_or(0.0)).collect(),
    };
    if rates.iter().sum::<f64>() <= 0.0 {
        return None;
    }
    Some(rates)
}

/// Structured Streaming's `rateLimit`: `limit` offsets split across the partitions with lag in
/// proportion to it. `None` when there is no lag at all (Spark returns the latest offsets
/// unchanged); otherwise a cap for each partition with lag and `None` for the others.
pub(super) fn max_offsets_caps(lags: &[u64], limit: u64) -> Option<Vec<Option<u64>>> {
    let total = lags.iter().sum::<u64>() as f64;
    if total < 1.0 {
        return None;
    }
    Some(
        lags.iter()
            .map(|&size| {
                (size > 0).then(|| {
                    // Same operation order as Spark: limit * (size / total).
                    let prorate = limit as f64 * (size as f64 / total);
                    let prorate = if prorate < 1.0 {
                        prorate.ceil()
                    } else {
                        prorate.floor()
                    };
                    prorate as u64
                })
            })
            .collect(),
    )
}

/// The outcome of the min-offsets check.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Trigger {
    /// Make a batch (the caller records `now` as the last trigger).
    Fire,
    /// Hold the batch back until more offsets arrive or `retry_at`.
    Delay { retry_at: Duration },
}

/// `KafkaMicroBatchStream.delayBatch`: fire when `max_delay` has passed since the last batch
/// (or there was none: Spark's `lastTriggerMillis` starts at 0, so its first check always
/// fires), or when at least `min` offsets are available; otherwise delay.
pub(super) fn delay_batch(
    min: u64,
    max_delay: Duration,
    last_trigger: Option<Duration>,
    now: Duration,
    available: u64,
) -> Trigger {
    let Some(last) = last_trigger else {
        return Trigger::Fire;
    };
    if now.saturating_sub(last) >= max_delay || available >= min {
        Trigger::Fire
    } else {
        Trigger::Delay {
            retry_at: last + max_delay,
        }
    }
}
