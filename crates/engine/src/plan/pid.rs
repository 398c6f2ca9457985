//! Backpressure: Spark Streaming's PID rate estimator (see [`PidRateEstimator`]).

use std::time::Duration;

use super::PlanError;

/// The PID estimator's coefficients and rates.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PidConfig {
    /// Kp, the weight of the current error (Spark: 1.0).
    pub proportional: f64,
    /// Ki, the weight of the accumulated error seen as scheduling delay (Spark: 0.2).
    pub integral: f64,
    /// Kd, the weight of the error's rate of change (Spark: 0.0).
    pub derivative: f64,
    /// The lowest rate the estimator returns, records/s (Spark: 100).
    pub min_rate: f64,
    /// Records/s across all partitions until the estimator has published a rate
    /// (`spark.streaming.backpressure.initialRate`). `None`: no bound until then.
    pub initial_rate: Option<u64>,
}

impl PidConfig {
    /// kdirect's default initial rate, records/s across all partitions.
    pub const DEFAULT_INITIAL_RATE: u64 = 1000;

    /// With other coefficients (Kp, Ki, Kd).
    pub fn with_coefficients(mut self, proportional: f64, integral: f64, derivative: f64) -> Self {
        self.proportional = proportional;
        self.integral = integral;
        self.derivative = derivative;
        self
    }

    /// With another minimum rate.
    pub fn with_min_rate(mut self, min_rate: f64) -> Self {
        self.min_rate = min_rate;
        self
    }

    /// With another initial rate (`None`: unbounded until the first estimate).
    pub fn with_initial_rate(mut self, initial_rate: Option<u64>) -> Self {
        self.initial_rate = initial_rate;
        self
    }

    pub(super) fn validate(&self) -> Result<(), PlanError> {
        // The same requirements as PIDRateEstimator's constructor.
        if self.proportional.is_nan() || self.proportional < 0.0 {
            return Err(PlanError::InvalidConfig(
                "PID proportional term must be >= 0",
            ));
        }
        if self.integral.is_nan() || self.integral < 0.0 {
            return Err(PlanError::InvalidConfig("PID integral term must be >= 0"));
        }
        if self.derivative.is_nan() || self.derivative < 0.0 {
            return Err(PlanError::InvalidConfig("PID derivative term must be >= 0"));
        }
        if self.min_rate.is_nan() || self.min_rate <= 0.0 {
            return Err(PlanError::InvalidConfig("PID minimum rate must be > 0"));
        }
        Ok(())
    }
}

impl Default for PidConfig {
    /// Spark's coefficients and minimum rate, and kdirect's initial rate.
    fn default() -> Self {
        Self {
            proportional: 1.0,
            integral: 0.2,
            derivative: 0.0,
            min_rate: 100.0,
            initial_rate: Some(Self::DEFAULT_INITIAL_RATE),
        }
    }
}

/// A finished batch, as the backpressure estimator needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchCompletion {
    /// When processing ended (on the planner's clock; Spark's `processingEndTime`).
    pub time: Duration,
    /// Records in the batch.
    pub records: u64,
    /// How long processing took.
    pub processing_delay: Duration,
    /// How long the batch waited before processing started.
    pub scheduling_delay: Duration,
}

impl BatchCompletion {
    /// A completion record.
    pub fn new(
        time: Duration,
        records: u64,
        processing_delay: Duration,
        scheduling_delay: Duration,
    ) -> Self {
        Self {
            time,
            records,
            processing_delay,
            scheduling_delay,
        }
    }
}

/// Spark Streaming's PID rate estimator, for backpressure.
///
/// Reproduces the behaviour of `org.apache.spark.streaming.scheduler.rate.PIDRateEstimator`
/// (read, not copied). After each batch it is told when the batch finished, how many records
/// it held, how long it took to process (processing delay) and how long it waited to start
/// (scheduling delay), all in milliseconds, and computes a new ingestion rate in records/s:
///
/// ```text
/// processingRate  = elements / processingDelay × 1000
/// error           = latestRate − processingRate
/// historicalError = schedulingDelay × processingRate / batchInterval
/// dError          = (error − latestError) / delaySinceUpdate        (seconds)
/// newRate         = max(latestRate − Kp·error − Ki·historicalError − Kd·dError, minRate)
/// ```
///
/// It publishes nothing (`None`) when the batch time is not after the previous one, when the
/// batch was empty, or when the processing delay is 0 ms; and on its first valid batch, which
/// only seeds `latestRate` with the measured processing rate and `latestError` with 0. Spark's
/// defaults: Kp 1.0, Ki 0.2, Kd 0.0, min rate 100 (`spark.streaming.backpressure.pid.*`).
///
/// Until the estimator publishes, the DStream reads at `spark.streaming.backpressure.initialRate`
/// (unset in Spark, which leaves a first batch on a large backlog unbounded unless
/// `maxRatePerPartition` is set). kdirect defaults the initial rate to
/// [`PidConfig::DEFAULT_INITIAL_RATE`] so the first batches are bounded; `None` restores
/// Spark's behaviour.
#[derive(Clone, Debug)]
pub struct PidRateEstimator {
    batch_interval_ms: i64,
    config: PidConfig,
    first_run: bool,
    latest_time: i64,
    latest_rate: f64,
    latest_error: f64,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl PidRateEstimator {
    /// An estimator for this batch interval.
    pub fn new(batch_interval: Duration, config: PidConfig) -> Result<Self, PlanError> {
        config.validate()?;
        let batch_interval_ms = millis(batch_interval);
        if batch_interval_ms <= 0 {
            return Err(PlanError::InvalidConfig(
                "batch interval must be at least 1 ms",
            ));
        }
        Ok(Self {
            batch_interval_ms,
            config,
            first_run: true,
            latest_time: -1,
            latest_rate: -1.0,
            latest_error: -1.0,
        })
    }

    /// Computes a new rate in records/s from a finished batch, or `None` when it publishes
    /// none (see [`PidRateEstimator`]). Times are taken in whole milliseconds, as Spark's.
    pub fn compute(
        &mut self,
        time: Duration,
        elements: u64,
        processing_delay: Duration,
        scheduling_delay: Duration,
    ) -> Option<f64> {
        let time = millis(time);
        let processing_delay = millis(processing_delay);
        let scheduling_delay = millis(scheduling_delay);
        if !(time > self.latest_time && elements > 0 && processing_delay > 0) {
            return None;
        }
        let delay_since_update = (time - self.latest_time) as f64 / 1000.0;
        let processing_rate = elements as f64 / processing_delay as f64 * 1000.0;
        let error = self.latest_rate - processing_rate;
        let historical_error =
            scheduling_delay as f64 * processing_rate / self.batch_interval_ms as f64;
        let d_error = (error - self.latest_error) / delay_since_update;
        let new_rate = (self.latest_rate
            - self.config.proportional * error
            - self.config.integral * historical_error
            - self.config.derivative * d_error)
            .max(self.config.min_rate);

        self.latest_time = time;
        if self.first_run {
            self.latest_rate = processing_rate;
            self.latest_error = 0.0;
            self.first_run = false;
            None
        } else {
            self.latest_rate = new_rate;
            self.latest_error = error;
            Some(new_rate)
        }
    }
}
