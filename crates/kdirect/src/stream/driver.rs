//! The stream's driver: carries out what the [`StreamCore`] decides. It owns the cluster (its
//! connections), the memory budget and the clock; it asks the brokers for metadata, ends,
//! truncation checks and records, sleeps for the rate limits and long-polls caught-up
//! partitions, and hands every answer to the core. Everything it decides itself is about
//! I/O: when to retry, how long to back off, when a failed long-poll falls back to polling.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kdirect_engine::cluster::{Cluster, ClusterView};
use kdirect_engine::error::BrokerName;
use kdirect_engine::fetch::{
    fetch_ranges_fitting, fetch_ranges_within, ByPartition, Fetcher, RangeData,
};
use kdirect_engine::plan::{
    LostRange, OffsetRange, PartitionSnapshot, TimestampLookup, TopicPartition, WaitReason,
};
use kdirect_engine::retry::Budget;
use kdirect_engine::{Error as EngineError, ErrorKind};
use kdirect_proto::api::list_offsets::OffsetSpec;

use super::core::{FetchPlan, Sizing, Step, StreamCore};
use super::{Batch, Ending, StreamConfig};

/// The next chunk of a chunked batch ([`Driver::chunk`]).
#[derive(Debug)]
pub(super) struct Chunk {
    /// What it read, one entry per range it read on.
    pub data: Vec<RangeData>,
    /// What is left of the batch's ranges after it.
    pub rest: Vec<OffsetRange>,
    /// Data lost under `failOnDataLoss=false` while reading it.
    pub lost: Vec<LostRange>,
}

/// How long a stream has been unable to reach the brokers, and the backoff before its next try:
/// one retry budget with the fetches' and ListOffsets' own ([`Budget`]), so that what they
/// gave up on after `default.api.timeout.ms` is not retried for as long again.
#[derive(Debug, Default)]
pub(super) struct Reconnect {
    budget: Budget,
}

impl Reconnect {
    /// Sleeps before the next try after `e` (retriable), or gives `e` back once
    /// `reconnect.timeout.ms` has passed since the first failure, an inner layer's included
    /// (`default.api.timeout.ms` for a bounded stream without one; unbounded otherwise).
    /// Backoff doubles from `retry.backoff.ms` up to 5 s.
    async fn wait(&mut self, e: EngineError, c: &StreamConfig) -> Result<(), EngineError> {
        let limit = c
            .conn
            .reconnect_timeout
            .or(c.ending.is_some().then_some(c.conn.retry_timeout));
        let (retry, e) = match self.budget.fail(e, limit) {
            Ok(retry) => retry,
            Err(e) => {
                tracing::error!(
                    attempts = self.budget.attempts(),
                    elapsed_ms = self.budget.elapsed().as_millis() as u64,
                    "still failing after reconnect.timeout.ms, giving up: {e}"
                );
                return Err(e);
            }
        };
        metrics::counter!("kdirect_reconnect_attempts_total").increment(1);
        let backoff =
            kdirect_engine::retry::backoff(c.fetch.retry_backoff, retry, Duration::from_secs(5));
        tracing::warn!(
            attempt = retry,
            elapsed_ms = self.budget.elapsed().as_millis() as u64,
            backoff_ms = backoff.as_millis() as u64,
            "retrying: {e}"
        );
        tokio::time::sleep(backoff).await;
        Ok(())
    }
}

/// A logged plan re-run exactly (not chunked) that needs more than the budget: the usual
/// advice, a smaller `maxOffsetsPerTrigger`, cannot help (a logged plan is re-run as logged,
/// e.g. one a chunked `kdirect consume` wrote); what can is reading it in chunks.
fn replay_too_large(fetch: &FetchPlan, e: EngineError) -> EngineError {
    match e.into_kind() {
        ErrorKind::BudgetExceeded {
            whole_batch: true,
            what,
            needed,
            budget,
            ..
        } => ErrorKind::BudgetExceeded {
            whole_batch: true,
            what: format!(
                "{what}, the re-run of logged batch {} (re-run exactly as logged, whatever \
                 maxOffsetsPerTrigger says now)",
                fetch.batch_id
            ),
            needed,
            budget,
            fix: "read it in chunks with batch.chunked=true (DirectStreamBuilder::chunked; \
                  kdirect consume does), or raise memory.budget.bytes",
        }
        .into(),
        other => other.into(),
    }
}

/// The topics a stream reads now, with fresh metadata: the configured ones, or every
/// non-internal topic matching the pattern (one Metadata request for all topics).
pub(super) async fn subscribed(
    cluster: &Cluster,
    c: &StreamConfig,
) -> Result<(Arc<ClusterView>, Vec<String>), EngineError> {
    let Some(re) = &c.pattern else {
        let topics: Vec<&str> = c.topics.iter().map(String::as_str).collect();
        return Ok((cluster.refresh(Some(&topics)).await?, c.topics.clone()));
    };
    let view = cluster.refresh(None).await?;
    let names = view
        .topics
        .values()
        .filter(|t| !t.internal && t.error.is_ok() && re.is_match(&t.name))
        .map(|t| t.name.clone())
        .collect();
    Ok((view, names))
}

/// Carries out the core's steps. Shared with the prefetch task; the core is locked only
/// between awaits, never across one.
pub(super) struct Driver {
    core: Mutex<StreamCore>,
    pub(super) cluster: Arc<Cluster>,
    pub(super) config: StreamConfig,
    pub(super) fetcher: Fetcher,
    started: Instant,
    /// Set when the metadata shows the subscription changed since the join.
    pub(super) subscription_changed: tokio::sync::watch::Sender<bool>,
    /// Each partition's gauges, registered once: building their labels allocated four
    /// strings per partition per batch, a third of what a batch allocated at a trickle.
    gauges: Mutex<ByPartition<Gauges>>,
}

/// One partition's gauges: position, end offset, log start offset, lag.
struct Gauges([metrics::Gauge; 4]);

impl Gauges {
    /// The partition's gauges, registered with the installed recorder.
    fn register(topic: &str, partition: i32) -> Gauges {
        let labels = [
            ("topic", topic.to_owned()),
            ("partition", partition.to_string()),
        ];
        Gauges([
            metrics::gauge!("kdirect_partition_position", &labels),
            metrics::gauge!("kdirect_partition_end_offset", &labels),
            metrics::gauge!("kdirect_partition_log_start_offset", &labels),
            metrics::gauge!("kdirect_partition_lag", &labels),
        ])
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("topics", &self.config.topics)
            .finish_non_exhaustive()
    }
}

impl Driver {
    pub(super) fn new(
        core: StreamCore,
        cluster: Arc<Cluster>,
        config: StreamConfig,
        fetcher: Fetcher,
    ) -> Self {
        Driver {
            core: Mutex::new(core),
            cluster,
            config,
            fetcher,
            started: Instant::now(),
            subscription_changed: tokio::sync::watch::channel(false).0,
            gauges: Mutex::default(),
        }
    }

    /// The core, for one decision (never held across an await).
    pub(super) fn core(&self) -> MutexGuard<'_, StreamCore> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The stream's clock: the time since it started.
    pub(super) fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn sizing(&self) -> Sizing {
        Sizing {
            budget: self.fetcher.total(),
            bytes_per_offset: self.fetcher.bytes_per_offset(),
            largest_batch: self.fetcher.largest_batch(),
        }
    }

    /// The subscribed topics with their metadata: refreshed when older than
    /// `metadata.max.age.ms` or after an error, else the cluster's current view (which the
    /// fetcher refreshes itself when a leader moves).
    async fn metadata(&self) -> Result<(Arc<ClusterView>, Arc<[String]>), EngineError> {
        let cached = self.core().cached_topics(self.now());
        if let Some(names) = cached {
            return Ok((self.cluster.view(), names));
        }
        let (view, names) = subscribed(&self.cluster, &self.config).await?;
        let names: Arc<[String]> = names.into();
        self.core()
            .metadata_refreshed(self.now(), Arc::clone(&names));
        Ok((view, names))
    }

    /// Group mode: the member rejoins when the subscribed topics' partition counts changed
    /// since the join (see [`StreamCore::subscription_changed`]).
    fn check_subscription(&self, view: &ClusterView, topics: &[&str]) {
        let now: BTreeMap<String, usize> = topics
            .iter()
            .filter_map(|t| {
                view.topic(t)
                    .ok()
                    .map(|i| ((*t).to_owned(), i.partitions.len()))
            })
            .collect();
        if self.core().subscription_changed(&now) && !*self.subscription_changed.borrow() {
            tracing::info!("the subscription changed since the group was joined: rejoining");
            self.subscription_changed.send_replace(true);
        }
    }

    /// Each partition's log start and end: from recent Fetch answers where the core has them,
    /// else from ListOffsets (earliest and latest, the last stable offset under
    /// read_committed), with the start policy's timestamp lookups and, at the first snapshot
    /// of a stream ending at a time, the offsets at that time.
    async fn snapshot(&self) -> Result<Vec<PartitionSnapshot>, EngineError> {
        let (view, names) = self.metadata().await?;
        let topics: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut parts: Vec<TopicPartition> = Vec::new();
        {
            let mut core = self.core();
            for t in &topics {
                core.check_topic_id(t, view.topic(t)?.id)?;
            }
            for t in &topics {
                for p in &view.topic(t)?.partitions {
                    if core.reads(t, p.partition) {
                        let topic = core.topic(t);
                        parts.push(TopicPartition::new(topic, p.partition));
                    }
                }
            }
        }
        if self.core().assigned().is_some() {
            self.check_subscription(&view, &topics);
        }
        let iso = self.config.fetch.params.isolation;
        let known = self.core().known_ends(self.now(), &parts);
        let ask: Vec<(String, i32)> = parts
            .iter()
            .filter(|tp| !known.contains_key(*tp))
            .map(|tp| (tp.topic.to_string(), tp.partition))
            .collect();
        let (starts, ends) = if ask.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let starts = self
                .cluster
                .list_offsets(&ask, OffsetSpec::Earliest, iso)
                .await?;
            let ends = self
                .cluster
                .list_offsets(&ask, OffsetSpec::Latest, iso)
                .await?;
            self.core().listed_ends(self.now(), &starts, &ends);
            (starts, ends)
        };
        let lookups = self.core().timestamp_lookups(&parts);
        let mut found: BTreeMap<TopicPartition, TimestampLookup> = BTreeMap::new();
        // One ListOffsets round per distinct timestamp (usually one).
        let mut by_time: BTreeMap<i64, Vec<(String, i32)>> = BTreeMap::new();
        for (tp, ts) in &lookups {
            by_time
                .entry(*ts)
                .or_default()
                .push((tp.topic.to_string(), tp.partition));
        }
        for (ts, ask) in by_time {
            for o in self
                .cluster
                .list_offsets(&ask, OffsetSpec::Timestamp(ts), iso)
                .await?
            {
                let l = if o.offset < 0 {
                    TimestampLookup::NoMatch
                } else {
                    TimestampLookup::Offset(o.offset)
                };
                found.insert(TopicPartition::new(o.topic, o.partition), l);
            }
        }
        let unresolved = self.core().ending_unresolved();
        let at_time = match (&self.config.ending, unresolved) {
            (Some(Ending::Timestamp(ts)), true) => {
                let all: Vec<(String, i32)> = parts
                    .iter()
                    .map(|tp| (tp.topic.to_string(), tp.partition))
                    .collect();
                Some(
                    self.cluster
                        .list_offsets(&all, OffsetSpec::Timestamp(*ts), iso)
                        .await?,
                )
            }
            _ => None,
        };
        self.core().snapshot(starts, ends, known, found, at_time)
    }

    /// KIP-320: before planning, asks the leaders of partitions whose leader epoch moved since
    /// the stream read up to its position whether the log still holds what was read
    /// ([`kdirect_engine::fetch::check_truncation`]); the core decides what a truncation means
    /// ([`StreamCore::on_truncations`]).
    async fn check_truncation(&self, snap: &[PartitionSnapshot]) -> Result<(), EngineError> {
        let positions = self.core().positions_in(snap);
        let found =
            match kdirect_engine::fetch::check_truncation(&self.cluster, &self.fetcher, &positions)
                .await
            {
                Ok(found) => found,
                // Unchecked this time; asked again before the next plan (and the fetch sends the
                // last fetched epoch meanwhile).
                Err(e) if e.is_retriable() => {
                    tracing::debug!("truncation check postponed: {e}");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
        self.core().on_truncations(found, snap)
    }

    /// Fetches `fetch.want`: up to what fits in memory with `fetch.fit`
    /// ([`fetch_ranges_fitting`]: each data's range says where it ends), else exactly. A
    /// fetch that ran out of retries while the brokers are away is tried again, the same
    /// ranges; data lost between the plan and the fetch goes by the core's data-loss policy
    /// ([`StreamCore::on_fetch_loss`]).
    async fn fetch(
        &self,
        fetch: &mut FetchPlan,
        reconnect: &mut Reconnect,
    ) -> Result<Vec<RangeData>, EngineError> {
        loop {
            let (cluster, cfg, fetcher) = (&self.cluster, &self.config.fetch, &self.fetcher);
            let fetched = if fetch.fit {
                fetch_ranges_fitting(cluster, &fetch.want, cfg, fetcher).await
            } else {
                fetch_ranges_within(cluster, &fetch.want, cfg, fetcher).await
            };
            match fetched {
                Ok(d) => return Ok(d),
                Err(e) if e.is_retriable() => {
                    self.core().forget();
                    reconnect.wait(e, &self.config).await?
                }
                Err(e)
                    if fetch.replay
                        && !fetch.fit
                        && matches!(e.kind(), ErrorKind::BudgetExceeded { .. }) =>
                {
                    return Err(replay_too_large(fetch, e))
                }
                Err(e) => self.core().on_fetch_loss(fetch, e)?,
            }
        }
    }

    /// The batch handed out for a fetched plan: its records, and each partition's leader
    /// epoch at the range's end, as the fetch that just read the ranges left them (KIP-320;
    /// batches are fetched one after the other, and the next one's fetch starts after this).
    fn batch(&self, fetch: FetchPlan, data: Vec<RangeData>) -> Batch {
        let now = self.now();
        let done = self.core().finish(now, fetch, &data, self.sizing());
        let epochs = if done.rest.is_empty() {
            self.epochs(&done.ranges)
        } else {
            BTreeMap::new()
        };
        Batch {
            id: done.batch_id,
            ranges: done.ranges,
            rest: done.rest,
            chunks: 1,
            epochs,
            topic_ids: done.topic_ids,
            moved_back: done.moved_back,
            data,
            lost: done.lost,
            planned_at: if done.replay { now } else { done.planned_at },
            handed_at: now,
            replay: done.replay,
        }
    }

    /// KIP-320: each range's partition's leader epoch at the range's end, as the fetch that
    /// read up to it left it.
    pub(super) fn epochs(&self, ranges: &[OffsetRange]) -> BTreeMap<TopicPartition, i32> {
        ranges
            .iter()
            .filter_map(|r| {
                let e = self.fetcher.epoch_at(&r.topic, r.partition, r.until)?;
                Some((r.topic_partition(), e))
            })
            .collect()
    }

    /// Chunked: reads the next chunk of batch `batch_id` (planned as `ranges`), whose ranges
    /// left to read are `want`: up to what fits in memory, whole stored batches each, with
    /// the retries and the data-loss policy of a batch's fetch. A chunk that moved no range
    /// on is [`ErrorKind::NoProgress`] (a fetch holding nothing always reads a stored batch,
    /// so this is a broker answering with nothing, not a full budget).
    pub(super) async fn chunk(
        self: Arc<Self>,
        batch_id: u64,
        ranges: Vec<OffsetRange>,
        want: Vec<OffsetRange>,
    ) -> Result<Chunk, EngineError> {
        let mut fetch = FetchPlan {
            batch_id,
            ranges,
            want,
            fit: true,
            lost: Vec::new(),
            moved_back: BTreeMap::new(),
            planned_at: self.now(),
            replay: false,
        };
        let started = Instant::now();
        let data = self.fetch(&mut fetch, &mut Reconnect::default()).await?;
        let rest = self.core().chunk_read(self.now(), &fetch.want, &data);
        let moved = rest.len() < fetch.want.len() || rest.iter().any(|r| !fetch.want.contains(r));
        if let (false, Some(stuck)) = (moved, rest.first()) {
            let view = self.cluster.view();
            let node = view.leader(&stuck.topic, stuck.partition).ok().map(|l| l.0);
            return Err(ErrorKind::NoProgress {
                broker: BrokerName {
                    addr: node
                        .and_then(|n| view.broker_addr(n))
                        .unwrap_or_else(|| "the partition's leader".to_owned()),
                    node_id: node,
                },
                topic: stuck.topic.to_string(),
                partition: stuck.partition,
                offset: stuck.from,
                reason: format!(
                    "a chunk of batch {batch_id} read nothing of any of its {} ranges",
                    rest.len()
                ),
            }
            .into());
        }
        let offsets: u64 = data.iter().map(|d| d.range.len()).sum();
        let bytes: usize = data.iter().map(RangeData::bytes).sum();
        metrics::counter!("kdirect_chunks_total").increment(1);
        metrics::counter!("kdirect_offsets_total").increment(offsets);
        metrics::counter!("kdirect_fetched_bytes_total").increment(bytes as u64);
        metrics::histogram!("kdirect_fetch_seconds").record(started.elapsed().as_secs_f64());
        metrics::gauge!("kdirect_memory_in_use_bytes").set(self.fetcher.in_use() as f64);
        Ok(Chunk {
            data,
            rest,
            lost: fetch.lost,
        })
    }

    /// The stream's metrics after a batch is fetched (through the `metrics` facade: nothing
    /// is recorded unless the application installs a recorder): each partition's position,
    /// end, log start and lag, the batch's offsets, bytes and fetch time, memory in use.
    fn record_metrics(&self, snap: &[PartitionSnapshot], data: &[RangeData], fetch: Duration) {
        let offsets: u64 = data.iter().map(|d| d.range.len()).sum();
        let bytes: usize = data.iter().map(RangeData::bytes).sum();
        metrics::counter!("kdirect_batches_total").increment(1);
        metrics::counter!("kdirect_offsets_total").increment(offsets);
        metrics::counter!("kdirect_fetched_bytes_total").increment(bytes as u64);
        metrics::histogram!("kdirect_fetch_seconds").record(fetch.as_secs_f64());
        metrics::gauge!("kdirect_memory_in_use_bytes").set(self.fetcher.in_use() as f64);
        let lags = self.core().record_lag(snap);
        let mut gauges = self.gauges.lock().unwrap_or_else(PoisonError::into_inner);
        for l in lags {
            let s = l.snapshot;
            let values = [
                l.position as f64,
                s.end as f64,
                s.log_start as f64,
                l.lag as f64,
            ];
            let g = gauges.get_or_insert_with(&s.topic, s.partition, || {
                Gauges::register(&s.topic, s.partition)
            });
            for (g, v) in g.0.iter().zip(values) {
                g.set(v);
            }
        }
    }

    /// Long-polls every partition of `snap` that the planner has read up to its end (see
    /// [`kdirect_engine::fetch::wait_for_data`]); the core keeps the ends the brokers answered
    /// with, so the next snapshot needs no ListOffsets round, and the fetcher keeps the
    /// records the answers held for the batch planned from them (no second Fetch between a
    /// record's append and its delivery). False when nothing could be asked, the poll failed
    /// or brokers keep answering at once (the caller falls back to polling at intervals).
    async fn long_poll(&self, snap: &[PartitionSnapshot]) -> bool {
        let asked = self.core().long_poll_asks(snap);
        if asked.is_empty() {
            return false;
        }
        let started = Instant::now();
        let answer = kdirect_engine::fetch::wait_for_data(
            &self.cluster,
            &asked,
            &self.config.fetch,
            &self.fetcher,
        )
        .await;
        match answer {
            Ok(ends) => {
                let mut core = self.core();
                let before = core.interval_polls();
                let planned = core.on_long_poll(self.now(), &asked, started.elapsed(), ends);
                if core.interval_polls() > before {
                    metrics::counter!("kdirect_interval_polls_total").increment(1);
                }
                planned
            }
            Err(e) => {
                tracing::debug!("long-poll failed, polling at intervals instead: {e}");
                false
            }
        }
    }

    /// The next batch: a logged batch re-run first, then batches planned from snapshots,
    /// waiting while the core says to. `None` once a bounded stream reached its end.
    pub(super) async fn next(self: Arc<Self>) -> Result<Option<Batch>, EngineError> {
        let replay = self.core().take_replay();
        if let Some(logged) = replay {
            // A topic re-created while the stream was down: checked before the fetch, which
            // would read the old offsets in the new log.
            let view = self.metadata().await.ok().map(|(view, _)| view);
            let id_of = |t: &str| Some(view.as_ref()?.topic(t).ok()?.id);
            let mut fetch = self.core().replay_plan(self.now(), logged, id_of)?;
            let data = self.fetch(&mut fetch, &mut Reconnect::default()).await?;
            return Ok(Some(self.batch(fetch, data)));
        }
        // Since when a topic read before has been missing from the metadata (deleted, maybe
        // about to be re-created): waited for up to default.api.timeout.ms, as the Java
        // consumer keeps polling a subscribed topic that is gone.
        let mut missing_since: Option<Instant> = None;
        let mut reconnect = Reconnect::default();
        let mut loss_rechecked = false;
        loop {
            if self.core().reached_until() {
                return Ok(None);
            }
            // Paced by the trigger or the rate limits: sleep until the next batch may start,
            // without asking the brokers for a snapshot the planner would only refuse.
            let not_before = self.core().not_before();
            if let Some(at) = not_before {
                let wait = at.saturating_sub(self.now());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            let snap = match self.snapshot().await {
                Ok(snap) => snap,
                Err(e) if self.core().was_known(&e) => {
                    self.core().forget();
                    let since = *missing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.config.conn.retry_timeout {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                // The brokers are unreachable (a restart, a network cut): keep trying with
                // backoff, as a long-running consumer does, for reconnect.timeout.ms.
                Err(e) if e.is_retriable() => {
                    self.core().forget();
                    reconnect.wait(e, &self.config).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            missing_since = None;
            reconnect = Reconnect::default();
            // A position outside the log is data loss only if the topic is still the one read:
            // a topic deleted and re-created under the same name shows a log ending below the
            // position (ListOffsets asks by name) before the cached metadata shows its new id.
            // So the metadata is asked again, and the ends with it, before anything is lost.
            if !loss_rechecked && self.core().outside_the_log(&snap) {
                loss_rechecked = true;
                self.core().forget();
                continue;
            }
            self.check_truncation(&snap).await?;
            let step = self.core().plan(self.now(), &snap)?;
            match step {
                Step::Fetch(mut fetch) => {
                    let fetch_started = Instant::now();
                    let data = self.fetch(&mut fetch, &mut reconnect).await?;
                    let batch = self.batch(fetch, data);
                    self.record_metrics(&snap, &batch.data, fetch_started.elapsed());
                    return Ok(Some(batch));
                }
                Step::Wait(w) => {
                    if self.core().reached_until() {
                        return Ok(None);
                    }
                    if w.reason == WaitReason::Paced {
                        continue;
                    }
                    // Caught up: long-poll the leaders (fetch.max.wait.ms) instead of asking
                    // ListOffsets again and again; their answer's ends plan the next batch.
                    if w.reason == WaitReason::NoNewData && self.long_poll(&snap).await {
                        continue;
                    }
                    let poll = self.config.batch_interval.min(Duration::from_millis(200));
                    let sleep = w
                        .retry_at
                        .map_or(poll, |at| at.saturating_sub(self.now()).min(poll));
                    tokio::time::sleep(sleep.max(Duration::from_millis(5))).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::DirectStreamBuilder;

    fn no_progress() -> EngineError {
        ErrorKind::NoProgress {
            broker: BrokerName {
                addr: "127.0.0.1:1".to_owned(),
                node_id: Some(1),
            },
            topic: "h".to_owned(),
            partition: 0,
            offset: 0,
            reason: "no whole record batch".to_owned(),
        }
        .into()
    }

    /// Issue 36 item 6: a bounded stream whose fetch already retried for
    /// `default.api.timeout.ms` gives up at once, instead of retrying the fetch for another
    /// `default.api.timeout.ms` (122 s with the 60 s default); an unbounded one keeps trying.
    #[tokio::test(start_paused = true)]
    async fn a_fetch_that_spent_the_retry_budget_is_not_retried_for_another() {
        let mut config = DirectStreamBuilder::default().config;
        config.ending = Some(Ending::Latest);
        let budget = config.conn.retry_timeout;
        let spent = || no_progress().gave_up(12, budget);
        let started = tokio::time::Instant::now();
        let e = Reconnect::default()
            .wait(spent(), &config)
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::ZERO, "no backoff slept");
        let ErrorKind::GaveUp {
            attempts,
            elapsed,
            last,
        } = e.kind()
        else {
            panic!("{e}")
        };
        assert_eq!((*attempts, *elapsed), (12, budget), "{e}");
        assert!(matches!(last.kind(), ErrorKind::NoProgress { .. }), "{e}");

        // Half the budget spent by the fetch: the other half is retried, no more.
        let mut r = Reconnect::default();
        r.wait(no_progress().gave_up(3, budget / 2), &config)
            .await
            .unwrap();
        let mut tries = 1;
        while r.wait(no_progress(), &config).await.is_ok() {
            tries += 1;
        }
        assert!(started.elapsed() < budget, "{:?}", started.elapsed());
        assert!(tries > 1);

        // Unbounded (no ending, no reconnect.timeout.ms): retried however long it takes.
        config.ending = None;
        let mut r = Reconnect::default();
        for _ in 0..3 {
            r.wait(spent(), &config).await.unwrap();
        }
    }
}
