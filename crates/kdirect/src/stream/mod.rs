//! `DirectStream`: the driver that ties the cluster view, the planner and the fetcher together
//! and hands the user one batch at a time, each knowing its exact offset ranges (Spark's
//! `HasOffsetRanges`).
//!
//! Each batch: refresh the subscribed topics' metadata (new partitions are picked up here),
//! ask every leader where its partitions begin and end (ListOffsets earliest, and latest — the
//! last stable offset under read_committed), let the [`Planner`] cut exact ranges under the
//! rate policy, and fetch them within the memory budget: a planned batch is read in whole
//! stored batches up to what fits in half the budget, and its ranges end where the reading
//! stopped (the planner is told, before the plan is logged), so a batch planned larger than
//! memory is read as the part that fits and the next batch goes on from there. Without a
//! rate limit a batch is sized at a quarter of the budget by the data's bytes per offset.
//! Every range costs at least one whole stored batch (KIP-74), so a batch reads at most
//! `max(1, budget / 4 / largest stored batch)` partitions with data, taken in turn by the
//! planner's rotation (1 MiB per stored batch is assumed until a fetch has seen one). A
//! logged plan re-run after a crash is read exactly. While the user holds batch N,
//! batch N+1 is planned and fetched in the background (prefetch); the memory budget is shared,
//! so the prefetch waits when the user holds too much.
//!
//! With an offset store ([`DirectStreamBuilder::store`]) the stream runs the commit protocol
//! itself: `build` loads the committed positions and re-runs a batch whose plan was logged but
//! not committed (exactly its ranges), `next_batch` logs each plan before handing the batch
//! out (stores that log plans), and [`DirectStream::commit`] stores the batch's positions with
//! compare-and-set once the caller's output succeeded. Without a store, positions live in
//! memory and [`DirectStream::done`] releases a batch.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[cfg(feature = "sql")]
use kdirect_commit::sql::{Begun, SinkRow, SinkTable, SqlStore, SqlTxn};
use kdirect_commit::{
    open_store, Capabilities, CommitContext, CommitOutcome, Committed, OffsetStore, OpenOptions,
    PlannedBatch, StoreError,
};

use kdirect_engine::cluster::Cluster;
use kdirect_engine::conn::ConnConfig;
use kdirect_engine::fetch::{FetchConfig, Fetcher, MemoryBudget, RangeData, RangeRecords};
use kdirect_engine::group::{GroupConfig, GroupMember};
use kdirect_engine::plan::{
    BatchCompletion, DataLossPolicy, LostRange, OffsetRange, PidConfig, Planner, PlannerConfig,
    RatePolicy, StartOffset, StartPolicy, TimestampStrategy, TopicPartition, Trigger,
};
use kdirect_engine::record::{OwnedRecord, Record};
use kdirect_engine::security::{
    EndpointIdentification, SaslMechanism, Secret, Security, SecurityProtocol,
};
use kdirect_engine::{Error as EngineError, ErrorKind};

use crate::error::Misuse;
use crate::Error;
use kdirect_proto::IsolationLevel;
use tokio::task::JoinHandle;

mod core;
mod driver;
mod settings;

use core::{CoreConfig, StreamCore};
use driver::{subscribed, Chunk, Driver};
pub use settings::{closest, find as find_setting, Setting, SETTINGS};

/// When no rate limit is set, batches are still bounded so that one batch takes at most a
/// quarter of the memory budget: the first batch assumes 1 KiB per offset, later ones use the
/// bytes per offset the previous batch actually took, within these bounds.
pub const ADAPTIVE_MIN_OFFSETS_PER_BATCH: u64 = 1_000;
/// See [`ADAPTIVE_MIN_OFFSETS_PER_BATCH`].
pub const ADAPTIVE_MAX_OFFSETS_PER_BATCH: u64 = 1_000_000;

/// Chunked ([`StreamConfig::chunked`]), a batch is not bounded by memory (its chunks are), so
/// without a rate limit it takes this many budgets' worth of data (512 MiB for the default
/// 64 MiB; about a second of reading at full speed on a 2-core machine): a batch is what one
/// commit covers, and each batch end cuts the stored batch every partition it read ends
/// inside of, which the next batch fetches again unless it could be carried. With a quarter
/// of the budget, as unchunked batches take, a 64-partition topic of 1 MB producer batches
/// read about twice its bytes from the broker (issue 32).
pub const CHUNKED_BATCH_BUDGETS: f64 = 8.0;
/// See [`CHUNKED_BATCH_BUDGETS`]: the most offsets an adaptive chunked batch takes.
pub const CHUNKED_MAX_OFFSETS_PER_BATCH: u64 = 10_000_000;

/// The adaptive batch size: a quarter of the budget in offsets of `bytes_per_offset` (at most
/// [`ADAPTIVE_MAX_OFFSETS_PER_BATCH`]), or chunked, [`CHUNKED_BATCH_BUDGETS`] budgets (at most
/// [`CHUNKED_MAX_OFFSETS_PER_BATCH`]); at least [`ADAPTIVE_MIN_OFFSETS_PER_BATCH`].
fn adaptive_offsets(chunked: bool, budget: usize, bytes_per_offset: f64) -> u64 {
    let (budgets, most) = if chunked {
        (CHUNKED_BATCH_BUDGETS, CHUNKED_MAX_OFFSETS_PER_BATCH)
    } else {
        (0.25, ADAPTIVE_MAX_OFFSETS_PER_BATCH)
    };
    let cap = (budget as f64 * budgets / bytes_per_offset.max(1.0)) as u64;
    cap.clamp(ADAPTIVE_MIN_OFFSETS_PER_BATCH, most)
}

/// The stored batch size assumed before anything was fetched: librdkafka's default
/// `batch.size` (1 MiB), larger than the Java producer's 16 KiB, so the first batch is safe.
const ASSUMED_STORED_BATCH_BYTES: usize = 1 << 20;

/// How many partitions one batch may read: a range costs at least one whole stored batch
/// (Kafka returns whole batches, KIP-74), so with the same rule as [`adaptive_offsets`] — a batch
/// takes at most a quarter of the budget — `max(1, budget / 4 / largest stored batch)`.
/// `largest_batch` is the largest seen so far ([`Fetcher::largest_batch`]), or
/// [`ASSUMED_STORED_BATCH_BYTES`] before the first fetch. Applies with or without a rate
/// limit: the budget is always a hard limit. One partition whose batch exceeds the whole
/// budget is still [`ErrorKind::BudgetExceeded`] when fetched.
fn partition_cap(budget: usize, largest_batch: Option<usize>) -> usize {
    let batch = largest_batch.unwrap_or(ASSUMED_STORED_BATCH_BYTES).max(1);
    (budget / 4 / batch).max(1)
}

/// Chunked: each partition a batch takes gets at least this many stored batches' worth of
/// offsets (when the batch's offset limit allows), so the stored batch its range ends inside
/// of, fetched again by its next range unless carried, is at most 1/16 of what it reads.
const STORED_BATCHES_PER_TURN: f64 = 16.0;

/// Chunked ([`StreamConfig::chunked`]): memory bounds the chunks, not the batch, so the
/// partitions a batch reads are bounded only to keep its ranges from being slivers of stored
/// batches: each partition taken should get [`STORED_BATCHES_PER_TURN`] stored batches' worth
/// of the batch's offsets (with fewer, each range ends inside the stored batch the next range
/// fetches again, on every partition: on 256 partitions of 256 KB producer batches that was
/// 0.6× librdkafka's rate and five times the broker's CPU), unless the stored batches the
/// ranges end inside of can all be carried to the next ranges, which is what
/// [`partition_cap`] allows. So the larger of [`partition_cap`] and `max_offsets / (16 ×
/// largest stored batch / bytes per offset)`, assuming what [`adaptive_offsets`] and
/// [`partition_cap`] assume before anything was fetched; `None` (every partition) without an
/// offset limit. The planner applies the bound only when the data available is more than a
/// batch takes ([`PlannerConfig::max_partitions_per_batch`]).
fn chunked_partition_cap(
    budget: usize,
    max_offsets: Option<u64>,
    largest_batch: Option<usize>,
    bytes_per_offset: Option<f64>,
) -> Option<usize> {
    let max = max_offsets?;
    let batch = largest_batch.unwrap_or(ASSUMED_STORED_BATCH_BYTES).max(1) as f64;
    let offsets_per_stored = (batch / bytes_per_offset.unwrap_or(1024.0).max(1.0)).max(1.0);
    let whole = (max as f64 / (offsets_per_stored * STORED_BATCHES_PER_TURN)) as usize;
    Some(whole.max(partition_cap(budget, largest_batch)))
}

/// Everything a [`DirectStream`] is configured with. Build it with [`DirectStreamBuilder`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StreamConfig {
    /// `bootstrap.servers`.
    pub bootstrap: Vec<String>,
    /// Topics to read.
    pub topics: Vec<String>,
    /// Or every topic whose name matches (Spark's `subscribePattern`), internal topics
    /// excepted; topics created later are picked up from their start.
    pub pattern: Option<regex::Regex>,
    /// Only these partitions (of every topic); all when `None`.
    pub partitions: Option<Vec<i32>>,
    /// Connection settings.
    pub conn: ConnConfig,
    /// Fetch settings (isolation level included).
    pub fetch: FetchConfig,
    /// Where to start partitions that have no position.
    pub start: StartPolicy,
    /// What a detected data loss does.
    pub data_loss: DataLossPolicy,
    /// Rate limits.
    pub rate: RatePolicy,
    /// The batch interval (for rates per second and backpressure).
    pub batch_interval: Duration,
    /// Fetched-but-not-released bytes, at most.
    pub memory_budget: usize,
    /// `batch.chunked`: a batch is exactly its planned ranges, read and handed over in chunks
    /// that fit the memory budget ([`DirectStream::next_chunk`]); false (the default): a
    /// batch is read up to what fits in memory and its ranges end there, so all its records
    /// are in memory at once.
    pub chunked: bool,
    /// Where the stream ends (`None`: it never does). [`Ending::Latest`] is
    /// [`Trigger::AvailableNow`]'s and `until_latest`'s.
    pub ending: Option<Ending>,
    /// When batches start.
    pub trigger: Trigger,
    /// What a start by timestamp does when no record is that recent.
    pub timestamp_strategy: TimestampStrategy,
    /// Positions to resume from (next offset per partition), e.g. from an offset store.
    pub resume_positions: BTreeMap<TopicPartition, i64>,
    /// KIP-320: per resumed position, the epoch of the last record batch read before it
    /// ([`Batch::leader_epochs`] as committed): checked with the partition's leader before the
    /// first plan, so a log truncated while the stream was down is reported as data loss.
    pub resume_epochs: BTreeMap<TopicPartition, i32>,
    /// KIP-516: the ids of the resumed positions' topics ([`Batch::topic_ids`] as committed):
    /// a topic whose id the cluster now gives differently was deleted and re-created while
    /// the stream was down, and is handled as such (`failOnDataLoss`) before the first plan.
    pub resume_topic_ids: BTreeMap<String, [u8; 16]>,
    /// The batch id to resume at.
    pub resume_batch_id: u64,
    /// A batch to re-run first with exactly its ranges (a write-ahead-logged batch that was
    /// never committed), and the stored positions they move back from.
    pub replay: Option<PlannedBatch>,
    /// `metadata.max.age.ms`: metadata is refreshed when older than this (and after any
    /// error), not for every batch. New topics of a pattern and new partitions are seen
    /// within it. Default 5 s (the Java client's 5 min is long for a stream that plans
    /// batches from partitions).
    pub metadata_max_age: Duration,
    /// `ends.max.age.ms`: a partition's log start and end as a Fetch answer gave them plan
    /// the next batch while younger than this, instead of a ListOffsets round. Default 1 s;
    /// 0 asks ListOffsets for every batch.
    pub ends_max_age: Duration,
    /// Group membership ([`DirectStreamBuilder::subscribe`]): this process reads only the
    /// partitions the group's coordinator assigns it. `None`: every partition of the topics.
    pub membership: Option<GroupConfig>,
}

/// Builds a [`DirectStream`] from Kafka-style keys or typed setters.
#[derive(Debug, Clone)]
pub struct DirectStreamBuilder {
    config: StreamConfig,
    rate_set: bool,
    store: Option<StoreChoice>,
    group: String,
    listener: Option<RebalanceListener>,
}

/// The user's rebalance callback ([`DirectStreamBuilder::on_rebalance`]).
#[derive(Clone)]
struct RebalanceListener(Arc<Mutex<RebalanceFn>>);

type RebalanceFn = dyn FnMut(&Rebalance) + Send;

impl std::fmt::Debug for RebalanceListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RebalanceListener")
    }
}

/// The store a builder was given: a value, or a spec opened by `build` (after connecting,
/// so that the `kafka` store shares the stream's connections).
#[derive(Clone)]
enum StoreChoice {
    Given(Arc<dyn DynStore>),
    Spec(String),
}

/// The spec's password never shows (`{:?}` of a builder is what users log).
impl std::fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreChoice::Given(s) => f.debug_tuple("Given").field(s).finish(),
            StoreChoice::Spec(spec) => f
                .debug_tuple("Spec")
                .field(&kdirect_commit::redact(spec))
                .finish(),
        }
    }
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// [`OffsetStore`] made object-safe, so that the stream is not generic over its store. What
/// the stream knows of a store is what the store declares ([`OffsetStore::capabilities`],
/// `OffsetStore::as_sql`), never its type: a user's wrapper is treated as what it wraps.
trait DynStore: Send + Sync {
    fn describe(&self) -> String;
    fn capabilities(&self) -> Capabilities;
    #[cfg(feature = "sql")]
    fn as_sql(&self) -> Option<&SqlStore>;
    fn load<'a>(&'a self, topics: &'a [String]) -> StoreFuture<'a, Committed>;
    fn log_plan<'a>(&'a self, batch: &'a PlannedBatch) -> StoreFuture<'a, ()>;
    fn commit<'a>(
        &'a self,
        batch: &'a PlannedBatch,
        ctx: &'a CommitContext<'a>,
    ) -> StoreFuture<'a, CommitOutcome>;
}

impl<S: OffsetStore> DynStore for S {
    fn describe(&self) -> String {
        OffsetStore::describe(self)
    }
    fn capabilities(&self) -> Capabilities {
        OffsetStore::capabilities(self)
    }
    #[cfg(feature = "sql")]
    fn as_sql(&self) -> Option<&SqlStore> {
        OffsetStore::as_sql(self)
    }
    fn load<'a>(&'a self, topics: &'a [String]) -> StoreFuture<'a, Committed> {
        Box::pin(OffsetStore::load(self, topics))
    }
    fn log_plan<'a>(&'a self, batch: &'a PlannedBatch) -> StoreFuture<'a, ()> {
        Box::pin(OffsetStore::log_plan(self, batch))
    }
    fn commit<'a>(
        &'a self,
        batch: &'a PlannedBatch,
        ctx: &'a CommitContext<'a>,
    ) -> StoreFuture<'a, CommitOutcome> {
        Box::pin(OffsetStore::commit(self, batch, ctx))
    }
}

impl std::fmt::Debug for dyn DynStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Default for DirectStreamBuilder {
    fn default() -> Self {
        Self {
            config: StreamConfig {
                bootstrap: Vec::new(),
                topics: Vec::new(),
                pattern: None,
                partitions: None,
                conn: ConnConfig::default(),
                fetch: FetchConfig::default(),
                start: StartPolicy::Latest,
                data_loss: DataLossPolicy::Fail,
                rate: RatePolicy::default(),
                batch_interval: Duration::from_secs(1),
                memory_budget: MemoryBudget::DEFAULT,
                chunked: false,
                ending: None,
                trigger: Trigger::AsFastAsPossible,
                timestamp_strategy: TimestampStrategy::Latest,
                resume_positions: BTreeMap::new(),
                resume_epochs: BTreeMap::new(),
                resume_topic_ids: BTreeMap::new(),
                resume_batch_id: 0,
                replay: None,
                metadata_max_age: Duration::from_secs(5),
                ends_max_age: Duration::from_secs(1),
                membership: None,
            },
            rate_set: false,
            store: None,
            group: "kdirect".to_owned(),
            listener: None,
        }
    }
}

/// Where a bounded stream ends (Spark's `endingOffsets` and `endingTimestamp`), resolved
/// once, at the first snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// The end offsets seen at start (the last stable offsets under read_committed).
    Latest,
    /// These offsets, exclusive; every partition read must be listed (-1: its latest).
    Offsets(BTreeMap<TopicPartition, i64>),
    /// Per partition, the first offset whose timestamp is at or after this many ms since
    /// the Unix epoch (ListOffsets by time), exclusive; the end seen at start when no record
    /// is that recent.
    Timestamp(i64),
}

/// Spark's offsets JSON, `{"topic":{"0":23,"1":-1}}` (-1 latest, -2 earliest), as
/// per-partition offsets. For `startingOffsets` and `endingOffsets`.
pub fn parse_offsets_json(json: &str) -> Result<BTreeMap<TopicPartition, i64>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not JSON ({e}): {json}"))?;
    let topics = v
        .as_object()
        .ok_or_else(|| format!("expected {{\"topic\":{{\"0\":offset}}}}: {json}"))?;
    let mut out = BTreeMap::new();
    for (topic, parts) in topics {
        let parts = parts
            .as_object()
            .ok_or_else(|| format!("'{topic}': expected {{\"partition\":offset}}"))?;
        for (p, o) in parts {
            let p: i32 =
                p.parse().ok().filter(|p| *p >= 0).ok_or_else(|| {
                    format!("'{topic}': partition '{p}' is not a partition number")
                })?;
            let o = o
                .as_i64()
                .filter(|o| *o >= -2)
                .ok_or_else(|| format!("{topic}-{p}: offset {o} is not an offset, -1 or -2"))?;
            out.insert(TopicPartition::new(topic.clone(), p), o);
        }
    }
    Ok(out)
}

/// Spark's `startingOffsets` JSON as a start policy: each listed partition at its offset
/// (-2 earliest, -1 latest); a partition read but not listed is an error at the first plan.
pub fn starting_offsets_json(json: &str) -> Result<StartPolicy, String> {
    Ok(StartPolicy::Explicit(
        parse_offsets_json(json)?
            .into_iter()
            .map(|(tp, o)| {
                let start = match o {
                    -2 => StartOffset::Earliest,
                    -1 => StartOffset::Latest,
                    o => StartOffset::Offset(o),
                };
                (tp, start)
            })
            .collect(),
    ))
}

/// `as-fast-as-possible`, `available-now`, or `processing-time=<ms>` (Spark's names in
/// camel case are accepted too).
pub fn parse_trigger(value: &str) -> Option<Trigger> {
    let v = value.to_ascii_lowercase().replace(['-', '_'], "");
    match v.as_str() {
        "asfastaspossible" | "default" => Some(Trigger::AsFastAsPossible),
        "availablenow" | "once" => Some(Trigger::AvailableNow),
        _ => {
            let ms: u64 = v
                .strip_prefix("processingtime=")?
                .trim_end_matches("ms")
                .parse()
                .ok()?;
            (ms > 0).then(|| Trigger::ProcessingTime(Duration::from_millis(ms)))
        }
    }
}

impl DirectStreamBuilder {
    /// Sets one setting by its Kafka, Spark or kdirect name (or an alias): every key of
    /// [`SETTINGS`], with its default and meaning in `docs/config.md`. An unknown key is
    /// [`ErrorKind::Config`] naming the closest known key when it looks like a typo; a value
    /// that does not parse names the key (never a secret's value).
    pub fn set(self, key: &str, value: &str) -> Result<Self, EngineError> {
        settings::apply(self, key, value)
    }

    /// Every security setting at once (`security.protocol`, `sasl.*`, `ssl.*`).
    pub fn security(mut self, security: Security) -> Self {
        self.config.conn.security = security;
        self
    }

    /// `sasl.mechanism=OAUTHBEARER` with a token from `f`, asked for a fresh token on every new
    /// connection (bootstrap, leaders, the group coordinator, and the reconnection that
    /// re-authenticates before the broker's session lifetime ends): for tokens that expire
    /// (an OAuth client-credentials flow, a cloud provider's IAM token). An `Err` fails the
    /// connection with its words.
    pub fn sasl_oauthbearer_token_provider<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Secret, String>> + Send + 'static,
    {
        self.config.conn.security.sasl_mechanism = Some(SaslMechanism::OAuthBearer);
        self.config.conn.security.sasl_oauthbearer_token_provider =
            Some(kdirect_engine::security::TokenProvider::new(f));
        self
    }

    /// `security.protocol`: PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL.
    pub fn security_protocol(mut self, protocol: SecurityProtocol) -> Self {
        self.config.conn.security.protocol = protocol;
        self
    }

    /// `sasl.mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with `sasl.username` and
    /// `sasl.password` (set `security_protocol` to a SASL one too).
    pub fn sasl(mut self, mechanism: SaslMechanism, username: &str, password: Secret) -> Self {
        let s = &mut self.config.conn.security;
        s.sasl_mechanism = Some(mechanism);
        s.sasl_username = Some(username.to_owned());
        s.sasl_password = Some(password);
        self
    }

    /// `sasl.mechanism=OAUTHBEARER` with a static token (`sasl.oauthbearer.token`).
    pub fn sasl_oauthbearer_token(mut self, token: Secret) -> Self {
        let s = &mut self.config.conn.security;
        s.sasl_mechanism = Some(SaslMechanism::OAuthBearer);
        s.sasl_oauthbearer_token = Some(token);
        self
    }

    /// `ssl.ca.location`: the PEM file of the CA(s) to trust instead of the built-in roots.
    pub fn ssl_ca_location(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config.conn.security.ssl_ca_location = Some(path.into());
        self
    }

    /// `ssl.certificate.location` and `ssl.key.location`: the client's certificate chain and
    /// private key (PEM; PKCS#8, RSA or EC), for mutual TLS.
    pub fn ssl_client_certificate(
        mut self,
        certificate: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        let s = &mut self.config.conn.security;
        s.ssl_certificate_location = Some(certificate.into());
        s.ssl_key_location = Some(key.into());
        self
    }

    /// `ssl.key.password`: the password of an encrypted PKCS#8 client key (PEM
    /// `ENCRYPTED PRIVATE KEY`).
    pub fn ssl_key_password(mut self, password: Secret) -> Self {
        self.config.conn.security.ssl_key_password = Some(password);
        self
    }

    /// `ssl.endpoint.identification.algorithm`: `Https` (the default) checks the broker's
    /// certificate against its host name; `None` does not (a warning is printed).
    pub fn ssl_endpoint_identification(mut self, check: EndpointIdentification) -> Self {
        self.config.conn.security.ssl_endpoint_identification = check;
        self
    }

    /// `client.id`, sent with every request (default `kdirect`).
    pub fn client_id(mut self, id: &str) -> Self {
        self.config.conn.client_id = id.to_owned();
        self
    }

    /// `request.timeout.ms`: how long one request may wait for its response.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.conn.request_timeout = timeout;
        self
    }

    /// `default.api.timeout.ms`: how long retriable failures (a leader moving, a broker
    /// restarting) are retried before the stream gives up (default 60 s).
    pub fn default_api_timeout(mut self, timeout: Duration) -> Self {
        self.config.conn.retry_timeout = timeout;
        self
    }

    /// `reconnect.timeout.ms`: how long the stream keeps trying when the brokers are
    /// unreachable before it fails; `None` (the default) keeps trying for as long as it runs
    /// (a bounded stream: `default.api.timeout.ms`).
    pub fn reconnect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.conn.reconnect_timeout = timeout;
        self
    }

    /// `metadata.max.age.ms`: how old metadata may get before a batch refreshes it (it is
    /// refreshed after any error too). Default 5 s.
    pub fn metadata_max_age(mut self, age: Duration) -> Self {
        self.config.metadata_max_age = age;
        self
    }

    /// `ends.max.age.ms`: how old the ends a Fetch answer reported may be and still plan the
    /// next batch without a ListOffsets round. Default 1 s; zero turns the reuse off.
    pub fn ends_max_age(mut self, age: Duration) -> Self {
        self.config.ends_max_age = age;
        self
    }

    /// `fetch.min.bytes`.
    pub fn fetch_min_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch.params.min_bytes = bytes;
        self
    }

    /// `fetch.max.bytes`: the most record bytes one Fetch response may bring.
    pub fn fetch_max_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch.params.max_bytes = bytes;
        self
    }

    /// `fetch.max.wait.ms`.
    pub fn fetch_max_wait(mut self, wait: Duration) -> Self {
        self.config.fetch.params.max_wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        self
    }

    /// `max.partition.fetch.bytes`.
    pub fn max_partition_fetch_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch.partition_max_bytes = bytes;
        self
    }

    /// `fetch.in.flight.per.leader` (default 2): Fetch requests kept in flight to each
    /// leader, each for a share of its partitions, so that the broker reads the next answer
    /// while the client walks the last. 1 sends one request per leader at a time.
    pub fn fetch_in_flight_per_leader(mut self, n: usize) -> Self {
        self.config.fetch.in_flight_per_leader = n.max(1);
        self
    }

    /// `fetch.sessions` (default true): incremental fetch sessions (KIP-227) with brokers
    /// that offer them, so that a Fetch lists only the partitions whose position changed and
    /// its answer only those with records or news; an idle wide topic's long-poll then costs
    /// a few bytes. False: every Fetch lists every partition.
    pub fn fetch_sessions(mut self, on: bool) -> Self {
        self.config.fetch.sessions = on;
        self
    }

    /// `check.crcs` (default true).
    pub fn check_crcs(mut self, on: bool) -> Self {
        self.config.fetch.check_crcs = on;
        self
    }

    /// `maxOffsetsPerTrigger`: at most this many offsets per batch, split across partitions
    /// by lag.
    pub fn max_offsets_per_trigger(mut self, offsets: u64) -> Self {
        self.config.rate = self
            .config
            .rate
            .clone()
            .with_max_offsets_per_trigger(offsets);
        self.rate_set = true;
        self
    }

    /// `maxRatePerPartition`: at most this many records per partition per second of batch
    /// interval.
    pub fn max_rate_per_partition(mut self, records_per_s: u64) -> Self {
        self.config.rate = self
            .config
            .rate
            .clone()
            .with_max_rate_per_partition(records_per_s);
        self.rate_set = true;
        self
    }

    /// `minOffsetsPerTrigger` with `maxTriggerDelay`: wait for at least `offsets` new
    /// offsets, but no longer than `max_delay`.
    pub fn min_offsets_per_trigger(mut self, offsets: u64, max_delay: Duration) -> Self {
        self.config.rate = self
            .config
            .rate
            .clone()
            .with_min_offsets_per_trigger(offsets, max_delay);
        self
    }

    /// `maxTriggerDelay`: how long `minOffsetsPerTrigger` may hold a batch back (default 15
    /// minutes, as in Spark).
    pub fn max_trigger_delay(mut self, delay: Duration) -> Self {
        self.config.rate.max_trigger_delay = delay;
        self
    }

    /// `backpressure.enabled`: PID rate estimation from each batch's processing time
    /// (Spark's `spark.streaming.backpressure.enabled`).
    pub fn backpressure(mut self, on: bool) -> Self {
        if on {
            self.config.rate = self
                .config
                .rate
                .clone()
                .with_backpressure(PidConfig::default());
            self.rate_set = true;
        } else {
            self.config.rate.backpressure = None;
        }
        self
    }

    /// The batch interval: the time base of rates per second and of backpressure.
    pub fn batch_interval(mut self, interval: Duration) -> Self {
        self.config.batch_interval = interval;
        self
    }

    /// `bootstrap.servers`.
    pub fn bootstrap(mut self, servers: &str) -> Self {
        self.config.bootstrap = servers
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        self
    }

    /// Topics to read.
    pub fn topics<S: AsRef<str>>(mut self, topics: &[S]) -> Self {
        self.config.pattern = None;
        self.config.topics = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        self
    }

    /// Topics to read as a member of the consumer group ([`group`](Self::group)): the
    /// processes that subscribe with the same group share the topics' partitions, each
    /// reading only those the group's coordinator assigns it (the classic protocol, with the
    /// Java client's assignors, so Java consumers can share the group). Partitions change
    /// hands only between batches: the current batch is committed (or abandoned) first, and a
    /// partition newly assigned starts from the store's position. The store defaults to the
    /// group's offsets in Kafka; a SQL store gives exactly-once, its compare-and-set refusing
    /// the commit of a member that lost the partition. Group settings: `group.instance.id`,
    /// `session.timeout.ms`, `heartbeat.interval.ms`, `max.poll.interval.ms`,
    /// `partition.assignment.strategy`, `client.rack`. `group.protocol=consumer` speaks
    /// KIP-848 instead (Kafka 4.0+: the coordinator assigns, with `group.remote.assignor`),
    /// behind the same API: partitions still change hands only between batches.
    pub fn subscribe<S: AsRef<str>>(self, topics: &[S]) -> Self {
        self.topics(topics).join_group(true)
    }

    /// Group membership on or off for the topics or the pattern set so far
    /// ([`subscribe`](Self::subscribe) turns it on).
    pub fn join_group(mut self, on: bool) -> Self {
        if !on {
            self.config.membership = None;
        } else if self.config.membership.is_none() {
            self.config.membership = Some(GroupConfig::new(&self.group));
        }
        self
    }

    /// Group mode: `f` is called with each revocation and assignment, inside `next_batch`,
    /// when it happens (the Java client's `ConsumerRebalanceListener`). Revocations come
    /// between batches: the batches handed out before were committed or abandoned.
    pub fn on_rebalance(mut self, f: impl FnMut(&Rebalance) + Send + 'static) -> Self {
        self.listener = Some(RebalanceListener(Arc::new(Mutex::new(f))));
        self
    }

    /// `client.rack` (KIP-392): fetch from a replica in this rack when the brokers have a
    /// rack-aware replica selector (`replica.selector.class`), falling back to the leader on
    /// any error from it; also sent in a group member's subscription.
    pub fn client_rack(mut self, rack: &str) -> Self {
        self.config.fetch.client_rack = rack.to_owned();
        self
    }

    /// Changes the group settings, turning membership on.
    fn with_membership(self, f: impl FnOnce(&mut GroupConfig)) -> Self {
        let mut me = self.join_group(true);
        if let Some(g) = me.config.membership.as_mut() {
            f(g);
        }
        me
    }

    /// Every topic whose whole name matches `pattern` (Spark's `subscribePattern`; internal
    /// topics excepted), re-evaluated at each batch: topics created later are read from their
    /// start. Replaces [`topics`](Self::topics).
    pub fn subscribe_pattern(mut self, pattern: &str) -> Result<Self, EngineError> {
        let anchored = format!("^(?:{pattern})$");
        let re = regex::Regex::new(&anchored).map_err(|e| {
            ErrorKind::Config(format!("subscribePattern: '{pattern}' is not a regex: {e}"))
        })?;
        self.config.pattern = Some(re);
        self.config.topics.clear();
        Ok(self)
    }

    /// Only these partitions.
    pub fn partitions(mut self, partitions: Vec<i32>) -> Self {
        self.config.partitions = Some(partitions);
        self
    }

    /// Where partitions without a position start.
    pub fn start(mut self, start: StartPolicy) -> Self {
        self.config.start = start;
        self
    }

    /// The isolation level.
    pub fn isolation(mut self, isolation: IsolationLevel) -> Self {
        self.config.fetch.params.isolation = isolation;
        self
    }

    /// Rate limits (replaces the default batch bound).
    pub fn rate(mut self, rate: RatePolicy) -> Self {
        self.config.rate = rate;
        self.rate_set = true;
        self
    }

    /// `failOnDataLoss`: `true` (the default) fails on records gone before they were read, and
    /// on records already read that a leader change truncated away (KIP-320: an unclean
    /// election, or `acks=1` records the new leader never had); `false` reports the lost
    /// range with the batch and goes on from the log start (for a truncation: from where the
    /// new leader's log diverges, reading its records there).
    pub fn fail_on_data_loss(self, fail: bool) -> Self {
        self.data_loss(if fail {
            DataLossPolicy::Fail
        } else {
            DataLossPolicy::Earliest
        })
    }

    /// What a detected data loss does.
    pub fn data_loss(mut self, policy: DataLossPolicy) -> Self {
        self.config.data_loss = policy;
        self
    }

    /// The memory budget in bytes (default 64 MiB).
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.config.memory_budget = bytes;
        self
    }

    /// Batches of any size, read in chunks (default off): each batch is exactly its planned
    /// ranges (`maxOffsetsPerTrigger`, a replayed plan, a bounded stream's end), however
    /// much memory they would take, as a Spark batch is; its records arrive in chunks that
    /// fit the memory budget, each fetched while the caller works on the one before. Walk a
    /// batch with [`DirectStream::try_for_each_record`] (every chunk), or with
    /// [`Batch::try_for_each_record`] and [`DirectStream::next_chunk`]; only a batch read to
    /// its end can be committed. Off, a batch is ended where what fits in memory ends, and
    /// all its records are in memory together.
    pub fn chunked(mut self, on: bool) -> Self {
        self.config.chunked = on;
        self
    }

    /// Stop at the end offsets seen at start (what [`Trigger::AvailableNow`] does).
    pub fn until_latest(mut self, on: bool) -> Self {
        self.config.ending = on.then_some(Ending::Latest);
        self
    }

    /// Where the stream ends: `next_batch` returns `None` once every partition reached its
    /// end (Spark's `endingOffsets` / `endingTimestamp`). See [`Ending`].
    pub fn ending(mut self, ending: Ending) -> Self {
        self.config.ending = Some(ending);
        self
    }

    /// When batches start: [`Trigger::AsFastAsPossible`] (the default),
    /// [`Trigger::ProcessingTime`] (a batch at most every interval, which also becomes the
    /// batch interval of the rates), or [`Trigger::AvailableNow`] (everything up to the ends
    /// seen at start, then `next_batch` returns `None`; rate limits still hold). Whatever the
    /// trigger, `maxRatePerPartition` and backpressure hold in wall-clock time.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        match trigger {
            Trigger::ProcessingTime(interval) => self.config.batch_interval = interval,
            Trigger::AvailableNow => {
                self.config.ending.get_or_insert(Ending::Latest);
            }
            _ => {}
        }
        self.config.trigger = trigger;
        self
    }

    /// What a start by timestamp (`startingTimestamp`, `startingOffsetsByTimestamp`) does
    /// when a partition has no record that recent: start at its end (the default) or fail
    /// naming it (Spark's `startingOffsetsByTimestampStrategy`).
    pub fn timestamp_strategy(mut self, strategy: TimestampStrategy) -> Self {
        self.config.timestamp_strategy = strategy;
        self
    }

    /// `minRatePerPartition`: the least a partition takes per batch under
    /// `maxRatePerPartition` or backpressure (default 1, so no partition stalls).
    pub fn min_rate_per_partition(mut self, records: u64) -> Self {
        self.config.rate = self
            .config
            .rate
            .clone()
            .with_min_rate_per_partition(records);
        self
    }

    /// Resume from stored positions and batch id.
    pub fn resume(mut self, next_batch_id: u64, positions: BTreeMap<TopicPartition, i64>) -> Self {
        self.config.resume_batch_id = next_batch_id;
        self.config.resume_positions = positions;
        self
    }

    /// KIP-320, with [`resume`](Self::resume): the epochs stored with the positions (each
    /// committed batch's [`Batch::leader_epochs`]). Before the first plan, each partition's
    /// leader is asked whether its log still holds what was read up to the position; a log
    /// truncated while the stream was down (an unclean leader election) is data loss, handled
    /// by `failOnDataLoss` with its exact range. The stores that keep epochs (the checkpoint,
    /// the Kafka group's offsets) do this by themselves.
    pub fn resume_epochs(mut self, epochs: BTreeMap<TopicPartition, i32>) -> Self {
        self.config.resume_epochs = epochs;
        self
    }

    /// KIP-516, with [`resume`](Self::resume): the topic ids stored with the positions (each
    /// committed batch's [`Batch::topic_ids`]). A topic the cluster now gives another id was
    /// deleted and re-created while the stream was down: `failOnDataLoss=true` fails naming
    /// it; `false` reads it from its new start and reports it lost. Without them, a stored
    /// epoch makes a re-created topic look like a truncated log (read on at the new log's
    /// end, skipping its records). The checkpoint store does this by itself.
    pub fn resume_topic_ids(mut self, ids: BTreeMap<String, [u8; 16]>) -> Self {
        self.config.resume_topic_ids = ids;
        self
    }

    /// Re-runs batch `id` with exactly `ranges` before planning anything new (a batch an
    /// offset store logged but never committed). The planner resumes after it: set
    /// [`resume`](Self::resume) to `id + 1` and positions that include the ranges' `until`s.
    pub fn replay(mut self, id: u64, ranges: Vec<OffsetRange>) -> Self {
        self.config.replay = Some(PlannedBatch::new(id, ranges));
        self
    }

    /// Like [`replay`](Self::replay), with the logged batch as [`Batch::planned`] gave it:
    /// its ranges and the stored positions they move back from
    /// ([`PlannedBatch::moved_back`]), which the re-run batch hands back to the store.
    pub fn replay_planned(mut self, batch: PlannedBatch) -> Self {
        self.config.replay = Some(batch);
        self
    }

    /// Where committed offsets live: the stream then owns the commit protocol. `build` loads
    /// the committed positions (they replace [`resume`](Self::resume) and
    /// [`replay`](Self::replay)) and re-runs a logged-but-uncommitted batch with exactly its
    /// ranges; `next_batch` logs each plan first (stores that log plans); and
    /// [`DirectStream::commit`] stores each batch's positions once its output succeeded. With
    /// the checkpoint store and an idempotent sink that is exactly-once.
    pub fn store<S: OffsetStore + 'static>(mut self, store: S) -> Self {
        self.store = Some(StoreChoice::Given(Arc::new(store)));
        self
    }

    /// Like [`store`](Self::store), with the store named by a spec (`checkpoint:DIR`, `kafka`,
    /// `sqlite:PATH`, `postgres://…`, `mysql://…`, `redis://…`, `zk://…`), opened by `build` for the
    /// [`group`](Self::group). The `kafka` store commits through the stream's own
    /// connections.
    pub fn store_spec(mut self, spec: &str) -> Self {
        self.store = Some(StoreChoice::Spec(spec.to_owned()));
        self
    }

    /// `group.id`: the consumer group whose offsets a store keeps (default `kdirect`; the
    /// checkpoint directory ignores it: a checkpoint belongs to one stream).
    pub fn group(mut self, group: &str) -> Self {
        self.group = group.to_owned();
        if let Some(g) = self.config.membership.as_mut() {
            g.group = group.to_owned();
        }
        self
    }

    /// Fetch settings.
    pub fn fetch_config(mut self, fetch: FetchConfig) -> Self {
        self.config.fetch = fetch;
        self
    }

    /// The configuration as built so far.
    pub fn config(&self) -> &StreamConfig {
        &self.config
    }

    /// Connects and returns the stream (after loading the store's positions, if it has one).
    /// An [`Admin`](crate::admin::Admin) on the cluster this builder names, with its
    /// connection settings (bootstrap, security, timeouts, client id); the rest of the
    /// builder is not used.
    pub async fn admin(self) -> Result<crate::admin::Admin, Error> {
        let c = self.config;
        let cluster = Cluster::connect(&c.bootstrap, c.conn).await?;
        Ok(crate::admin::Admin::on(Arc::new(cluster)))
    }

    pub async fn build(self) -> Result<DirectStream, Error> {
        let mut c = self.config;
        if c.topics.is_empty() && c.pattern.is_none() {
            return Err(EngineError::from(ErrorKind::Config("no topic to read".to_owned())).into());
        }
        if let Some(g) = c.membership.as_mut() {
            g.group.clone_from(&self.group);
            if !c.fetch.client_rack.is_empty() {
                g.rack = Some(c.fetch.client_rack.clone());
            }
            g.validate()
                .map_err(|e| EngineError::from(ErrorKind::Config(e)))?;
            if c.ending.is_some() {
                return Err(EngineError::from(ErrorKind::Config(
                    "a bounded stream (an ending, available-now, --until-latest) cannot be a \
                     group member: its end is the partitions' ends at start, and a group moves \
                     partitions between members"
                        .to_owned(),
                ))
                .into());
            }
            if c.partitions.is_some() || c.replay.is_some() || !c.resume_positions.is_empty() {
                return Err(EngineError::from(ErrorKind::Config(
                    "a group member reads the partitions the group assigns it, from the \
                     store's positions: it takes no partition list, resume positions or replay"
                        .to_owned(),
                ))
                .into());
            }
        }
        let cluster = Arc::new(Cluster::connect(&c.bootstrap, c.conn.clone()).await?);
        let store_choice = match (&self.store, &c.membership) {
            // A group member without a store commits to the group's offsets in Kafka, as
            // every Kafka consumer does.
            (None, Some(_)) => Some(StoreChoice::Spec("kafka".to_owned())),
            _ => self.store.clone(),
        };
        let store: Option<Arc<dyn DynStore>> = match store_choice {
            None => None,
            Some(StoreChoice::Given(s)) => Some(s),
            Some(StoreChoice::Spec(spec)) => {
                let mut options = OpenOptions::default();
                options.cluster = Some(cluster.clone());
                Some(Arc::new(open_store(&spec, &self.group, &options).await?))
            }
        };
        let member = match (&c.membership, &store) {
            (Some(g), Some(store)) => {
                // Decided by what the store declares: a store of the user's own, or a wrapper
                // around a checkpoint, is refused as the checkpoint is.
                if store.capabilities().logs_plans() {
                    return Err(Misuse::StoreNotForGroups {
                        store: store.describe(),
                    }
                    .into());
                }
                // The member's identity goes with each commit (`CommitContext::member`).
                Some(Arc::new(GroupMember::new(cluster.clone(), g.clone())?))
            }
            _ => None,
        };
        let mut stored = BTreeMap::new();
        if let (Some(store), None) = (&store, &member) {
            let mut committed = store.load(&c.topics).await?;
            if let Some(re) = &c.pattern {
                committed.positions.retain(|tp, _| re.is_match(&tp.topic));
            }
            c.resume_batch_id = committed.next_batch_id();
            stored.clone_from(&committed.positions);
            c.resume_positions = committed.positions;
            c.resume_epochs = committed.epochs;
            c.resume_topic_ids = committed.topic_ids;
            c.replay = committed.pending;
        }
        // The resumed positions that carry the epoch of the last batch read before them (the
        // replayed batch, if any, starts at them).
        let resumed_epochs: Vec<(TopicPartition, i64, i32)> = c
            .resume_positions
            .iter()
            .filter_map(|(tp, &pos)| Some((tp.clone(), pos, *c.resume_epochs.get(tp)?)))
            .collect();
        if let Some(PlannedBatch { id, ranges, .. }) = &c.replay {
            // The planner continues after the replayed batch.
            c.resume_batch_id = c.resume_batch_id.max(id + 1);
            for r in ranges {
                c.resume_positions.insert(r.topic_partition(), r.until);
            }
        }
        let adaptive = !self.rate_set && c.rate.max_offsets_per_trigger.is_none();
        if adaptive {
            c.rate = c
                .rate
                .clone()
                .with_max_offsets_per_trigger(adaptive_offsets(c.chunked, c.memory_budget, 1024.0));
        }
        // A topic-level Metadata error that is retriable (LEADER_NOT_AVAILABLE while a topic
        // is being created) is waited out for up to default.api.timeout.ms, as the Java
        // consumer waits for metadata; any other is reported as itself.
        let waiting_since = Instant::now();
        let (view, names) = loop {
            let (view, names) = subscribed(&cluster, &c).await?;
            let retriable = names
                .iter()
                .filter(|_| c.pattern.is_none())
                .find_map(|t| view.topic(t).err().filter(EngineError::is_retriable));
            match retriable {
                Some(e) if waiting_since.elapsed() < c.conn.retry_timeout => {
                    tracing::warn!("waiting for topic metadata: {e}");
                    tokio::time::sleep(c.fetch.retry_backoff.max(Duration::from_millis(100))).await;
                }
                Some(e) => return Err(e.into()),
                None => break (view, names),
            }
        };
        let topics: Vec<&str> = names.iter().map(String::as_str).collect();
        for t in topics.iter().filter(|_| c.pattern.is_none()) {
            let info = view.topic(t)?;
            if let Some(ps) = &c.partitions {
                for p in ps {
                    if !info.partitions.iter().any(|x| x.partition == *p) {
                        return Err(EngineError::from(ErrorKind::UnknownPartition {
                            topic: (*t).to_owned(),
                            partition: *p,
                        })
                        .into());
                    }
                }
            }
        }
        // Resuming a topic whose stored positions leave out some of its partitions (added
        // since, or a store edited by hand): those start by the start policy, said aloud.
        for t in &topics {
            let Ok(info) = view.topic(t) else { continue };
            let stored = |p: i32| {
                c.resume_positions
                    .contains_key(&TopicPartition::new((*t).to_owned(), p))
            };
            if !info.partitions.iter().any(|p| stored(p.partition)) {
                continue;
            }
            for p in info.partitions.iter().filter(|p| !stored(p.partition)) {
                if c.partitions
                    .as_ref()
                    .is_some_and(|ps| !ps.contains(&p.partition))
                {
                    continue;
                }
                tracing::warn!(
                    "{t}-{} has no committed position in the store (its other partitions \
                     have): it starts by the start policy ({:?})",
                    p.partition,
                    c.start
                );
            }
        }
        let budget = Fetcher::new(c.memory_budget);
        // Decompressed data is bounded by the budget too (half of it per batch).
        c.fetch.max_decompressed = budget.max_decompressed(c.fetch.max_decompressed);
        for (tp, pos, epoch) in &resumed_epochs {
            budget.resume_at(&tp.topic, tp.partition, *pos, *epoch);
        }
        let planner_cfg = PlannerConfig::new(c.batch_interval)
            .with_trigger(c.trigger)
            .with_timestamp_strategy(c.timestamp_strategy)
            .with_rate(c.rate.clone())
            .with_start(c.start.clone())
            .with_data_loss(c.data_loss)
            .with_max_partitions_per_batch(if c.chunked {
                chunked_partition_cap(
                    budget.total(),
                    c.rate.max_offsets_per_trigger,
                    budget.largest_batch(),
                    budget.bytes_per_offset(),
                )
            } else {
                Some(partition_cap(budget.total(), budget.largest_batch()))
            });
        let planner = if c.resume_positions.is_empty() && c.resume_batch_id == 0 {
            Planner::new(planner_cfg.clone()).map_err(EngineError::from)?
        } else {
            Planner::resume(
                planner_cfg.clone(),
                c.resume_batch_id,
                c.resume_positions.clone(),
            )
            .map_err(EngineError::from)?
        };
        let replay = c.replay.take();
        // The ids the positions were read at, where the store kept them: the first snapshot
        // compares them with the cluster's (a topic re-created while the stream was down).
        let topic_ids = topics
            .iter()
            .filter_map(|t| {
                let id = c
                    .resume_topic_ids
                    .get(*t)
                    .copied()
                    .filter(|id| {
                        *id != [0; 16] && c.resume_positions.keys().any(|tp| tp.topic == *t)
                    })
                    .or_else(|| view.topic(t).ok().map(|i| i.id))?;
                Some(((*t).to_owned(), id))
            })
            .collect();
        let core = StreamCore::new(
            CoreConfig {
                planner: planner_cfg,
                data_loss: c.data_loss,
                ending: c.ending.clone(),
                partitions: c.partitions.clone(),
                metadata_max_age: c.metadata_max_age,
                ends_max_age: c.ends_max_age,
                max_wait: Duration::from_millis(
                    u64::try_from(c.fetch.params.max_wait_ms).unwrap_or(0),
                ),
                adaptive,
                chunked: c.chunked,
            },
            planner,
            replay,
            topic_ids,
            // A member reads nothing until the group assigns it partitions.
            member.is_some(),
        );
        let driver = Arc::new(Driver::new(core, cluster, c, budget));
        Ok(DirectStream {
            driver,
            pending: None,
            chunk: None,
            unfinished: None,
            store,
            outstanding: None,
            stored,
            member,
            listener: self.listener,
        })
    }
}

/// A Direct stream over some topics. See the module docs.
#[derive(Debug)]
pub struct DirectStream {
    driver: Arc<Driver>,
    pending: Option<JoinHandle<Result<Option<Batch>, EngineError>>>,
    /// Chunked: the next chunk of the batch handed out, being fetched.
    chunk: Option<JoinHandle<Result<Chunk, EngineError>>>,
    /// Chunked: the batch handed out whose records are not all read yet, and whether it was
    /// released (done) so: the stream cannot go on without skipping its rest.
    unfinished: Option<(u64, bool)>,
    store: Option<Arc<dyn DynStore>>,
    /// With a store: the batch handed out and not committed yet.
    outstanding: Option<u64>,
    /// The store's positions when the stream was built.
    stored: BTreeMap<TopicPartition, i64>,
    /// Group mode: this process's membership.
    member: Option<Arc<GroupMember>>,
    /// Group mode: the user's rebalance callback.
    listener: Option<RebalanceListener>,
}

/// A change of the partitions a group member reads ([`DirectStreamBuilder::on_rebalance`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rebalance {
    /// The member gave these partitions up (before rejoining; the batches handed out before
    /// were committed or abandoned).
    Revoked {
        /// The partitions.
        partitions: BTreeSet<TopicPartition>,
    },
    /// The group assigned the member these partitions; each starts at the store's position.
    Assigned {
        /// The generation.
        generation: i32,
        /// This member's id.
        member_id: String,
        /// Whether this member computed the assignment.
        leader: bool,
        /// The partitions.
        partitions: BTreeSet<TopicPartition>,
    },
}

impl DirectStream {
    /// A builder.
    pub fn builder() -> DirectStreamBuilder {
        DirectStreamBuilder::default()
    }

    /// The next batch; `None` when the stream is done (`until_latest` reached). The batch after
    /// it is fetched in the background while the caller holds this one.
    ///
    /// Cancel-safe: if the returned future is dropped before it completes (a `select!` or a
    /// timeout), the batch being fetched is kept and the next call returns it.
    ///
    /// With a store, the batch's plan is logged before it is returned, and the batch must be
    /// [committed](Self::commit) before the next is asked for ([`Misuse`] otherwise: a
    /// second logged plan over an uncommitted one would lose the first on a restart). After any
    /// error, drop the stream and build a new one: it resumes from the store.
    ///
    /// The order is `next_batch`, then [`commit`](Self::commit) (or [`done`](Self::done)
    /// without a store, or `begin` then `commit_transaction` with a SQL store), then
    /// `next_batch` again. Each step consumes the batch, and a SQL transaction owns the batch
    /// it was begun for, so committing a batch twice, or with another batch's transaction,
    /// does not compile. What stays a run-time check ([`Misuse`]), because a batch is an owned
    /// value the caller may hand to another task while the stream waits: asking for the next
    /// batch while one is uncommitted (`NotCommitted`), and going on after a chunked batch was
    /// released before its last chunk (`Released`, `ChunksUnread`).
    pub async fn next_batch(&mut self) -> Result<Option<Batch>, Error> {
        if let Some((id, released)) = self.unfinished {
            return Err(if released {
                Misuse::Released { batch: id }
            } else {
                Misuse::ChunksUnread { batch: id }
            }
            .into());
        }
        if let (Some(_), Some(id)) = (&self.store, self.outstanding) {
            return Err(Misuse::NotCommitted { batch: id }.into());
        }
        let joined = match self.member.clone() {
            None => {
                let driver = self.driver.clone();
                let task = self
                    .pending
                    .get_or_insert_with(|| kdirect_engine::io::spawn(driver.next()));
                task.await
            }
            Some(member) => loop {
                member.polling();
                if let Some(e) = member.fatal() {
                    return Err(e.into());
                }
                if member.needs_join() || *self.driver.subscription_changed.borrow() {
                    self.rejoin(&member).await?;
                }
                let driver = self.driver.clone();
                let task = self
                    .pending
                    .get_or_insert_with(|| kdirect_engine::io::spawn(driver.next()));
                let mut changed = self.driver.subscription_changed.subscribe();
                tokio::select! {
                    r = task => break r,
                    // A rebalance while waiting for data (or while fetching): the batch in
                    // the making is dropped (it was not handed out, nor logged), the member
                    // rejoins.
                    () = member.join_needed() => {}
                    _ = changed.wait_for(|c| *c) => {}
                }
                if let Some(t) = self.pending.take() {
                    t.abort();
                }
            },
        };
        self.pending = None;
        let mut batch = joined.map_err(|e| {
            EngineError::from(ErrorKind::Task {
                what: "stream batch",
                reason: e.to_string(),
            })
        })??;
        if let (Some(store), Some(b)) = (&self.store, &batch) {
            store.log_plan(&b.planned()).await?;
            self.outstanding = Some(b.id);
        }
        if let Some(b) = batch.as_mut() {
            b.handed_at = self.driver.now();
            if let Some(m) = &self.member {
                m.handed_out();
            }
            if b.rest.is_empty() {
                self.pending = Some(kdirect_engine::io::spawn(self.driver.clone().next()));
            } else {
                // Chunked, and more to read: the next chunk is fetched while the caller works
                // on this one (the next batch only once this one is read).
                self.unfinished = Some((b.id, false));
                self.chunk = Some(kdirect_engine::io::spawn(self.driver.clone().chunk(
                    b.id,
                    b.ranges.clone(),
                    b.rest.clone(),
                )));
            }
        }
        Ok(batch)
    }

    /// Chunked ([`DirectStreamBuilder::chunked`]): replaces the records `batch` holds with its
    /// next chunk, and returns true; false when `batch` is read to its end (always, for a
    /// batch that came whole). The chunk held before is released first (its memory is what
    /// the next one is read into); the next chunk was being fetched meanwhile. Records a
    /// caller keeps ([`Batch::records`]) keep their own buffers.
    ///
    /// Cancel-safe: if the future is dropped, the chunk being fetched is kept and the next
    /// call returns it.
    pub async fn next_chunk(&mut self, batch: &mut Batch) -> Result<bool, Error> {
        if batch.rest.is_empty() {
            return Ok(false);
        }
        if self.unfinished != Some((batch.id, false)) {
            return Err(Misuse::NotReading { batch: batch.id }.into());
        }
        drop(std::mem::take(&mut batch.data));
        let driver = self.driver.clone();
        let task = self.chunk.get_or_insert_with(|| {
            kdirect_engine::io::spawn(driver.chunk(
                batch.id,
                batch.ranges.clone(),
                batch.rest.clone(),
            ))
        });
        let joined = task.await;
        self.chunk = None;
        let chunk = joined.map_err(|e| {
            EngineError::from(ErrorKind::Task {
                what: "stream chunk",
                reason: e.to_string(),
            })
        })??;
        batch.data = chunk.data;
        batch.rest = chunk.rest;
        batch.lost.extend(chunk.lost);
        batch.chunks += 1;
        // Asking for the next chunk is the caller coming back for records, as a poll is to
        // the Java consumer: max.poll.interval.ms counts from here, not from the batch's first
        // chunk (a batch as large as its plan can take longer than the interval to read, and
        // its member was dropped from the group, the commit refused and the same batch
        // planned again, over and over).
        if let Some(m) = &self.member {
            m.handed_out();
        }
        if batch.rest.is_empty() {
            batch.epochs = self.driver.epochs(&batch.ranges);
            self.unfinished = None;
            self.pending = Some(kdirect_engine::io::spawn(self.driver.clone().next()));
        } else {
            self.chunk = Some(kdirect_engine::io::spawn(self.driver.clone().chunk(
                batch.id,
                batch.ranges.clone(),
                batch.rest.clone(),
            )));
        }
        Ok(true)
    }

    /// Calls `f` with every record of `batch` from the chunk it holds now to its end, chunk
    /// after chunk ([`next_chunk`](Self::next_chunk)), range by range, in offset order
    /// within each partition; for a batch that came whole, what
    /// [`Batch::try_for_each_record`] does. The first error (`f`'s, a decode error, or a
    /// chunk's fetch failing, converted into `E`) stops the walk and is returned. Afterwards
    /// the batch holds its last chunk and can be committed.
    pub async fn try_for_each_record<E: From<Error>>(
        &mut self,
        batch: &mut Batch,
        mut f: impl FnMut(&OffsetRange, &Record<'_>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut n = 0;
        loop {
            n += batch.try_for_each_record(&mut f)?;
            if !self.next_chunk(batch).await? {
                return Ok(n);
            }
        }
    }

    /// Refuses to commit (or release) a chunked batch before all its records were handed
    /// out: its positions would move past records nobody read.
    fn check_read(batch: &Batch, action: &'static str) -> Result<(), Error> {
        if batch.rest.is_empty() {
            return Ok(());
        }
        let left = batch
            .rest
            .iter()
            .map(|r| format!("{}-{} [{}, {})", r.topic, r.partition, r.from, r.until))
            .collect();
        Err(Misuse::ChunksLeft {
            batch: batch.id,
            action,
            left,
        }
        .into())
    }

    /// Group mode: gives up the partitions held (the batch in the making is dropped), joins
    /// the group again, and plans from the store's positions of the new assignment.
    async fn rejoin(&mut self, member: &Arc<GroupMember>) -> Result<(), Error> {
        if let Some(t) = self.pending.take() {
            t.abort();
        }
        let held = self.driver.core().give_up_assignment();
        // Eager: everything is given up before joining. Cooperative: only what the new
        // assignment leaves out, once it is known.
        let cooperative = member.is_cooperative();
        if !held.is_empty() && !cooperative {
            self.notify(&Rebalance::Revoked {
                partitions: held.clone(),
            });
        }
        let c = &self.driver.config;
        let (view, topics) = subscribed(&self.driver.cluster, c).await?;
        let counts: BTreeMap<String, usize> = topics
            .iter()
            .filter_map(|t| view.topic(t).ok().map(|i| (t.clone(), i.partitions.len())))
            .collect();
        let joined = member.join(&topics).await?;
        if cooperative {
            let revoked: BTreeSet<TopicPartition> =
                held.difference(&joined.partitions).cloned().collect();
            if !revoked.is_empty() {
                self.notify(&Rebalance::Revoked {
                    partitions: revoked,
                });
            }
        }
        let committed = match &self.store {
            Some(store) => {
                let mut assigned_topics: Vec<String> = joined
                    .partitions
                    .iter()
                    .map(|tp| tp.topic.to_string())
                    .collect();
                assigned_topics.dedup();
                if assigned_topics.is_empty() {
                    Committed::default()
                } else {
                    store.load(&assigned_topics).await?
                }
            }
            None => Committed::default(),
        };
        self.stored = committed
            .positions
            .iter()
            .filter(|(tp, _)| joined.partitions.contains(*tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let epochs = self
            .driver
            .core()
            .reassign(joined.partitions.clone(), &committed, counts)?;
        // KIP-320: positions another member committed (or this one, earlier) with their
        // epochs are checked with their leaders before the first plan of the assignment.
        for (tp, pos, epoch) in epochs {
            self.driver
                .fetcher
                .resume_at(&tp.topic, tp.partition, pos, epoch);
        }
        self.driver.subscription_changed.send_replace(false);
        self.notify(&Rebalance::Assigned {
            generation: joined.generation_id,
            member_id: joined.member_id,
            leader: joined.leader,
            partitions: joined.partitions,
        });
        Ok(())
    }

    fn notify(&self, r: &Rebalance) {
        tracing::info!("rebalance: {r:?}");
        if let Some(l) = &self.listener {
            (l.0.lock().unwrap_or_else(PoisonError::into_inner))(r);
        }
    }

    /// Group mode: the partitions this member reads now (`None` when not a group member).
    pub fn assignment(&self) -> Option<BTreeSet<TopicPartition>> {
        self.driver.core().assigned().cloned()
    }

    /// Group mode: this member's id and generation, while it is in one.
    pub fn group_generation(&self) -> Option<kdirect_engine::group::Generation> {
        self.member.as_ref().and_then(|m| m.generation())
    }

    /// Stops the stream: the batch in the making is dropped, and a group member leaves its
    /// group (LeaveGroup), so that its partitions go to the other members at once instead of
    /// after `session.timeout.ms` (a static member sends nothing: its partitions wait for it),
    /// and the fetch sessions (KIP-227) the stream holds with the brokers are closed, so that
    /// they do not take the brokers' session slots until evicted (best effort, within
    /// `request.timeout.ms` or 5 s, whichever is less).
    pub async fn close(mut self) -> Result<(), Error> {
        if let Some(t) = self.chunk.take() {
            t.abort();
            let _ = t.await;
        }
        if let Some(t) = self.pending.take() {
            t.abort();
            // The prefetch's fetch sessions go back to the pool once it is gone.
            let _ = t.await;
        }
        let left = match self.member.take() {
            Some(m) => m.leave().await,
            None => Ok(()),
        };
        let timeout = self
            .driver
            .cluster
            .config()
            .request_timeout
            .min(Duration::from_secs(5));
        kdirect_engine::fetch::close_sessions(&self.driver.cluster, timeout).await;
        left?;
        Ok(())
    }

    /// Group mode: refuses a commit once the member's generation is over (the partitions may
    /// be another member's by now), and after a commit the store refused as fenced. Either
    /// way the batch counts as abandoned: the next `next_batch` rejoins.
    fn check_member(&mut self, batch: &Batch) -> Result<(), Error> {
        let Some(m) = &self.member else {
            return Ok(());
        };
        if m.generation().is_some() {
            return Ok(());
        }
        if self.outstanding == Some(batch.id) {
            self.outstanding = None;
        }
        Err(EngineError::from(ErrorKind::NotAMember {
            group: m.group(),
            member_id: m.member_id(),
            batch: batch.id,
            reason: m
                .lost()
                .unwrap_or_else(|| "the member is not in a generation".to_owned()),
        })
        .into())
    }

    /// Who commits: the group member (its identity as it is when the store sends the commit),
    /// or nobody in particular outside a group.
    fn commit_context(&self) -> CommitContext<'_> {
        self.member
            .as_deref()
            .map_or(CommitContext::STANDALONE, CommitContext::member)
    }

    /// Group mode: a store error that says the partitions moved (compare-and-set conflict,
    /// or the coordinator refusing the generation) abandons the batch, so that the next
    /// `next_batch` rejoins instead of refusing as misuse.
    fn on_store_error(&mut self, batch_id: u64, e: &StoreError) {
        if self.member.is_some() && e.is_fenced() {
            if self.outstanding == Some(batch_id) {
                self.outstanding = None;
            }
            if let Some(m) = &self.member {
                m.lose(format!("the store refused batch {batch_id}: {e}"));
            }
        }
    }

    /// The batch's output succeeded: stores its positions (with a store, compare-and-set on
    /// each range's `from`; [`CommitOutcome::AlreadyCommitted`] when a re-run batch was
    /// committed before), then releases it as [`done`](Self::done) does. Without a store it
    /// only releases the batch.
    pub async fn commit(&mut self, batch: Batch) -> Result<CommitOutcome, Error> {
        Self::check_read(&batch, "committed")?;
        self.check_member(&batch)?;
        let started = Instant::now();
        let committed = match &self.store {
            Some(store) => Some(store.commit(&batch.planned(), &self.commit_context()).await),
            None => None,
        };
        let outcome = match committed {
            Some(Ok(o)) => o,
            Some(Err(e)) => {
                self.on_store_error(batch.id, &e);
                return Err(e.into());
            }
            None => CommitOutcome::Committed,
        };
        if self.store.is_some() {
            metrics::histogram!("kdirect_commit_seconds").record(started.elapsed().as_secs_f64());
            tracing::debug!(
                target: "kdirect::commit",
                "batch {} committed ({outcome:?}, {} ranges)",
                batch.id,
                batch.ranges().len()
            );
        }
        if self.outstanding == Some(batch.id) {
            self.outstanding = None;
        }
        self.done(batch);
        Ok(outcome)
    }

    #[cfg(feature = "sql")]
    /// The SQL store, when the stream has one (for [`SqlStore::sink_table`] and the
    /// transaction of [`begin`](Self::begin)).
    pub fn sql_store(&self) -> Option<&SqlStore> {
        self.store.as_deref().and_then(|s| s.as_sql())
    }

    /// Whether the stream's store logs each plan before the batch is handed out (the
    /// checkpoint and ZooKeeper do, as [`Capabilities::LOGS_PLANS`] declares): a restart then
    /// re-runs an uncommitted batch with exactly its ranges.
    pub fn logs_plans(&self) -> bool {
        self.store
            .as_deref()
            .is_some_and(|s| s.capabilities().logs_plans())
    }

    #[cfg(feature = "sql")]
    /// Exactly-once with a SQL store: opens the transaction that commits `batch`, which moves
    /// into it (as sqlx's `Transaction` owns its connection), so that a transaction commits
    /// exactly the batch it was begun for. The batch's offsets are written in it first
    /// (compare-and-set on each range's `from`; the rows stay locked until it ends); put the
    /// results in the same transaction ([`Transaction::insert_batch`], [`Transaction::sql`],
    /// reading the records through [`Transaction::batch`]), then
    /// [`commit_transaction`](Self::commit_transaction) commits both at once. Dropping the
    /// transaction rolls everything back. [`Misuse`] when the store is not SQL.
    pub async fn begin(&mut self, batch: Batch) -> Result<Transaction, Error> {
        let Some(sql) = self.sql_store() else {
            return Err(Misuse::NotTransactional.into());
        };
        let begun = sql.begin(&batch.planned()).await;
        let tx = match begun {
            Ok(Begun::Open(tx)) => Some(tx),
            Ok(Begun::AlreadyCommitted) => None,
            Err(e) => {
                self.on_store_error(batch.id, &e);
                return Err(e.into());
            }
        };
        Ok(Transaction { batch, tx })
    }

    #[cfg(feature = "sql")]
    /// Commits `tx` (its batch's offsets and the caller's writes, together), then releases
    /// the batch as [`commit`](Self::commit) does. [`CommitOutcome::AlreadyCommitted`] when
    /// another run had committed the batch already (the transaction held nothing).
    pub async fn commit_transaction(&mut self, tx: Transaction) -> Result<CommitOutcome, Error> {
        let Transaction { batch, tx } = tx;
        Self::check_read(&batch, "committed")?;
        // A member past max.poll.interval.ms (or whose session expired) rolls back: the
        // transaction is dropped uncommitted.
        self.check_member(&batch)?;
        let outcome = match tx {
            Some(tx) => {
                tx.commit().await?;
                CommitOutcome::Committed
            }
            None => CommitOutcome::AlreadyCommitted,
        };
        tracing::debug!(
            target: "kdirect::commit",
            "batch {} committed in its transaction ({outcome:?}, {} ranges)",
            batch.id,
            batch.ranges().len()
        );
        if self.outstanding == Some(batch.id) {
            self.outstanding = None;
        }
        self.done(batch);
        Ok(outcome)
    }

    /// Marks a batch done: the user's output for it succeeded. Feeds the backpressure
    /// estimator and releases the batch's memory. A chunked batch released before its last
    /// chunk ends the stream: the next [`next_batch`](Self::next_batch) is
    /// [`Misuse`] (going on would skip the rest of it).
    pub fn done(&mut self, batch: Batch) {
        if !batch.rest.is_empty() && self.unfinished == Some((batch.id, false)) {
            tracing::warn!(
                "{}",
                Self::check_read(&batch, "released")
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            );
            self.unfinished = Some((batch.id, true));
            if let Some(t) = self.chunk.take() {
                t.abort();
            }
        }
        // Spark's estimator inputs: the processing delay is the caller's time with the batch
        // (from next_batch handing it out to commit/done); the scheduling delay the time
        // from its plan to that hand-out (fetching, then waiting for the previous batch).
        let now = self.driver.now();
        let completion = BatchCompletion::new(
            now,
            batch.offset_count(),
            now.saturating_sub(batch.handed_at),
            batch.handed_at.saturating_sub(batch.planned_at),
        );
        self.driver.core().on_batch_completed(&completion);
    }

    /// The next offset to read per partition, as planned so far.
    pub fn positions(&self) -> BTreeMap<TopicPartition, i64> {
        self.driver.core().positions().clone()
    }

    /// The positions the store held when the stream was built, before any replay (empty
    /// without a store): what the output committed so far covers.
    pub fn stored_positions(&self) -> &BTreeMap<TopicPartition, i64> {
        &self.stored
    }

    /// The batch id the next plan will get.
    pub fn next_batch_id(&self) -> u64 {
        self.driver.core().next_batch_id()
    }

    /// The offsets left to read as of the last planned batch: the sum over the partitions
    /// that plan saw (a member's assigned ones in group mode) of the log end its snapshot
    /// found minus the position after the batch. `None` before the first planned batch.
    /// Records produced since are not counted until the next plan.
    pub fn lag(&self) -> Option<u64> {
        self.driver.core().lag()
    }

    /// The end offsets captured at start with `until_latest`.
    pub fn until_offsets(&self) -> Option<BTreeMap<TopicPartition, i64>> {
        self.driver.core().until().cloned()
    }

    /// Bytes of the memory budget in use (held batches plus the prefetch).
    pub fn memory_in_use(&self) -> usize {
        self.driver.fetcher.in_use()
    }

    /// How many times this caught-up stream fell back to polling at intervals (up to 200 ms
    /// apart) because its long-polls were answered at once with nothing new, more than a few
    /// times in a row: a broker that does not hold fetches (`fetch.max.wait.ms`).
    pub fn interval_polls(&self) -> u64 {
        self.driver.core().interval_polls()
    }

    /// How many Fetch requests found the memory budget full and waited for room before being
    /// sent (the prefetch waiting for held batches to be released, mostly).
    pub fn memory_waits(&self) -> u64 {
        self.driver.fetcher.waits()
    }

    /// The cluster this stream reads from (for ListOffsets, lag, offset stores).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.driver.cluster
    }
}

impl Drop for DirectStream {
    fn drop(&mut self) {
        if let Some(t) = self.pending.take() {
            t.abort();
        }
        if let Some(t) = self.chunk.take() {
            t.abort();
        }
        // A member dropped without close(): leave the group in the background if a runtime
        // is still there (best effort; close() waits for it).
        if let Some(m) = self.member.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = m.leave().await;
                });
            }
        }
    }
}

/// One batch: its id, its exact ranges, and their records, borrowed from the fetch buffers.
#[derive(Debug)]
pub struct Batch {
    id: u64,
    ranges: Vec<OffsetRange>,
    /// Chunked: what is left to read of the ranges after the chunk held (empty: the batch is
    /// read to its end).
    rest: Vec<OffsetRange>,
    /// Chunks handed out so far (1 for a batch that came whole).
    chunks: u32,
    /// KIP-320: the epoch of the last record batch read before each range's `until`.
    epochs: BTreeMap<TopicPartition, i32>,
    /// The stored positions of partitions whose range starts below them (a move back after
    /// data loss under `failOnDataLoss=false`).
    moved_back: BTreeMap<TopicPartition, i64>,
    /// KIP-516: the ids of the topics of the ranges, where the cluster gives them.
    topic_ids: BTreeMap<String, [u8; 16]>,
    data: Vec<RangeData>,
    lost: Vec<LostRange>,
    planned_at: Duration,
    /// When `next_batch` handed it to the caller.
    handed_at: Duration,
    replay: bool,
}

impl Batch {
    /// The batch id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this batch re-runs a plan the store logged and never committed (a crash
    /// between output and commit): its ranges are exactly the logged ones, so an idempotent
    /// sink that names its output by batch id replaces what the crashed run wrote.
    pub fn is_replay(&self) -> bool {
        self.replay
    }

    /// Every partition's range, sorted (empty ranges included: their `until`s are the
    /// positions after this batch, which is what an offset store records).
    pub fn ranges(&self) -> &[OffsetRange] {
        &self.ranges
    }

    /// Ranges lost to retention and skipped under the `earliest` data-loss policy.
    pub fn lost(&self) -> &[LostRange] {
        &self.lost
    }

    /// Offsets planned (records can be fewer: compaction gaps, control batches, aborted
    /// transactions).
    pub fn offset_count(&self) -> u64 {
        self.ranges.iter().map(OffsetRange::len).sum()
    }

    /// Bytes of fetch buffers this batch holds (its chunk held now, when chunked).
    pub fn byte_count(&self) -> usize {
        self.data.iter().map(RangeData::bytes).sum()
    }

    /// The fetched data, one entry per non-empty range (chunked: of the chunk held now, each
    /// entry's range the part of the batch's range the chunk covers).
    pub fn range_data(&self) -> &[RangeData] {
        &self.data
    }

    /// Whether every record of the batch has been handed out: true for a batch that came
    /// whole; chunked, once the chunk held is its last ([`DirectStream::next_chunk`]). Only
    /// such a batch can be committed.
    pub fn is_read(&self) -> bool {
        self.rest.is_empty()
    }

    /// Chunked: what is left to read of the batch's ranges after the chunk held now.
    pub fn rest(&self) -> &[OffsetRange] {
        &self.rest
    }

    /// How many chunks of the batch have been handed out (1 for a batch that came whole).
    pub fn chunks(&self) -> u32 {
        self.chunks
    }

    /// Calls `f` with every record, range by range, in offset order within each partition
    /// (chunked: of the chunk held now; [`DirectStream::try_for_each_record`] walks them all).
    /// A record that does not decode ends the walk with [`ErrorKind::Decode`]
    /// ([`Error::is_decode`]), naming the broker, the partition, the batch's offset and the
    /// byte.
    pub fn for_each_record(
        &self,
        mut f: impl FnMut(&OffsetRange, &Record<'_>),
    ) -> Result<u64, Error> {
        self.try_for_each_record(|range, r| {
            f(range, r);
            Ok::<(), Error>(())
        })
    }

    /// Every record as an [`OwnedRecord`] with its
    /// range, range by range, in offset order within each partition. Keys, values and headers
    /// are `Bytes` views (no copy for uncompressed batches; one buffer per compressed stored
    /// batch), so records can go to other tasks and outlive the batch (they keep their
    /// buffers, and so their share of the memory budget, alive). Slower than
    /// [`try_for_each_record`](Self::try_for_each_record), which lends views. After an
    /// error the iterator ends. Chunked: the records of the chunk held now.
    pub fn records(&self) -> BatchRecords<'_> {
        BatchRecords {
            ranges: self.data.iter(),
            current: None,
        }
    }

    /// The batch as an offset store sees it: its id, its ranges and the epochs of the last
    /// record batches read before their `until`s.
    pub fn planned(&self) -> PlannedBatch {
        PlannedBatch::new(self.id, self.ranges.clone())
            .with_epochs(self.epochs.clone())
            .with_moved_back(self.moved_back.clone())
            .with_topic_ids(self.topic_ids.clone())
    }

    /// KIP-516: the id of each topic the batch read, where the cluster gives one. A store kept
    /// by the caller saves them with the positions and gives them back with
    /// [`DirectStreamBuilder::resume_topic_ids`], so that a restarted stream tells a topic
    /// deleted and re-created while it was down from a truncated log.
    pub fn topic_ids(&self) -> &BTreeMap<String, [u8; 16]> {
        &self.topic_ids
    }

    /// Partitions whose range starts *below* the position the previous batch left them at,
    /// with that position: under `failOnDataLoss=false` the stream found the log ending below
    /// it (a topic deleted and re-created, a log truncated below it; [`lost`](Self::lost)
    /// says which) and reads on from where the log now is. A store of the caller's own must
    /// compare-and-set such a partition against this position, not the range's `from`
    /// ([`PlannedBatch::expected_from`]); the stores kdirect ships do.
    pub fn moved_back(&self) -> &BTreeMap<TopicPartition, i64> {
        &self.moved_back
    }

    /// KIP-320: per partition, the `partition_leader_epoch` of the last record batch read
    /// before its range's `until`, where the fetch knew it (an empty range: where the
    /// partition's last read stopped). A store kept by the caller saves them with the
    /// positions and gives them back with [`DirectStreamBuilder::resume_epochs`], so that a
    /// restarted stream finds a log truncated under its positions while it was down.
    pub fn leader_epochs(&self) -> &BTreeMap<TopicPartition, i32> {
        &self.epochs
    }

    /// Calls `f` with every record, range by range, in offset order within each partition
    /// (chunked: of the chunk held now; [`DirectStream::try_for_each_record`] walks them all);
    /// the first error (`f`'s, or a decode error converted into `E`, e.g. [`crate::Error`]
    /// itself) stops the walk and is returned.
    pub fn try_for_each_record<E: From<Error>>(
        &self,
        mut f: impl FnMut(&OffsetRange, &Record<'_>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut n = 0;
        for d in &self.data {
            n += d
                .try_for_each_record(|r| f(&d.range, r).map_err(Stop::Caller))
                .map_err(|e| match e {
                    Stop::Caller(e) => e,
                    Stop::Engine(e) => E::from(Error::from(e)),
                })?;
        }
        Ok(n)
    }

    /// The partitions in this batch.
    pub fn partitions(&self) -> BTreeSet<TopicPartition> {
        self.ranges
            .iter()
            .map(OffsetRange::topic_partition)
            .collect()
    }
}

/// The records of a [`Batch`]; see [`Batch::records`].
#[derive(Debug)]
pub struct BatchRecords<'a> {
    ranges: std::slice::Iter<'a, RangeData>,
    current: Option<(&'a OffsetRange, RangeRecords<'a>)>,
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = Result<(&'a OffsetRange, OwnedRecord), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((range, records)) = &mut self.current {
                match records.next() {
                    Some(Ok(r)) => return Some(Ok((range, r))),
                    Some(Err(e)) => {
                        self.ranges = [].iter();
                        self.current = None;
                        return Some(Err(e.into()));
                    }
                    None => self.current = None,
                }
            }
            let d = self.ranges.next()?;
            self.current = Some((&d.range, d.records()));
        }
    }
}

/// Why a walk over a range stopped: the caller's error, or the engine's.
enum Stop<E> {
    Caller(E),
    Engine(EngineError),
}

impl<E> From<EngineError> for Stop<E> {
    fn from(e: EngineError) -> Self {
        Stop::Engine(e)
    }
}

#[cfg(feature = "sql")]
/// A batch's open transaction on a SQL store, from [`DirectStream::begin`]: the batch's
/// offsets are already written in it; the caller's results go in before
/// [`DirectStream::commit_transaction`]. Dropping it rolls back.
#[derive(Debug)]
pub struct Transaction {
    /// The batch it commits.
    batch: Batch,
    /// `None`: the batch was committed before (by another run): nothing to write.
    tx: Option<SqlTxn>,
}

#[cfg(feature = "sql")]
impl Transaction {
    /// The batch this transaction commits: its records, for the caller's writes.
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// The batch, to read its next chunk into ([`DirectStream::next_chunk`]): a chunked
    /// batch's chunks all go into the one transaction.
    pub fn batch_mut(&mut self) -> &mut Batch {
        &mut self.batch
    }

    /// The id of the batch this transaction commits.
    pub fn batch_id(&self) -> u64 {
        self.batch.id
    }

    /// False when the batch was already committed by another run: skip the writes (they are
    /// in the database already) and commit, which does nothing.
    pub fn is_open(&self) -> bool {
        self.tx.is_some()
    }

    /// The open SQL transaction, for the caller's own statements
    /// (`sqlx::query(…).execute(tx.sql().unwrap().conn())`); `None` when not
    /// [open](Self::is_open).
    pub fn sql(&mut self) -> Option<&mut SqlTxn> {
        self.tx.as_mut()
    }

    /// Inserts every record of the batch (its chunk read last, for a chunked batch) into the
    /// sink table `sink` (from [`SqlStore::sink_table`]) inside this transaction; the records
    /// are copied out of the fetch buffers for the insert. Returns the rows inserted (0 when
    /// not [open](Self::is_open)).
    pub async fn insert_batch(&mut self, sink: &SinkTable) -> Result<u64, Error> {
        let Some(tx) = self.tx.as_mut() else {
            return Ok(0);
        };
        let batch = &self.batch;
        struct Row {
            range: usize,
            offset: i64,
            timestamp_ms: i64,
            key: Option<Vec<u8>>,
            value: Option<Vec<u8>>,
        }
        let mut rows: Vec<Row> = Vec::new();
        for (i, d) in batch.data.iter().enumerate() {
            d.for_each_record(|r| {
                rows.push(Row {
                    range: i,
                    offset: r.offset(),
                    timestamp_ms: r.timestamp(),
                    key: r.key().map(<[u8]>::to_vec),
                    value: r.value().map(<[u8]>::to_vec),
                })
            })
            .map_err(Error::from)?;
        }
        let sink_rows = rows.iter().filter_map(|r| {
            let range = &batch.data.get(r.range)?.range;
            Some(SinkRow {
                topic: &range.topic,
                partition: range.partition,
                offset: r.offset,
                timestamp_ms: r.timestamp_ms,
                key: r.key.as_deref(),
                value: r.value.as_deref(),
            })
        });
        Ok(tx.insert_records(sink, sink_rows).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a group each commit carries the member, whose identity the store reads when it
    /// sends the commit (`CommitContext::member`); outside one, nobody. Nothing here depends on
    /// the store's type (the group's default `kafka` store here).
    #[tokio::test]
    async fn commits_carry_the_member_in_a_group_and_nobody_outside_one() {
        let fake = kdirect_fake_broker::FakeCluster::builder()
            .brokers(1)
            .topic("ctx", 1)
            .build()
            .await
            .unwrap();
        let s = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .subscribe(&["ctx"])
            .build()
            .await
            .unwrap();
        let member = s.member.as_deref().expect("a member");
        let carried = s.commit_context().group_member().expect("the member");
        assert!(std::ptr::eq(carried, member));
        assert!(!s.logs_plans());
        let s = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["ctx"])
            .build()
            .await
            .unwrap();
        assert!(s.commit_context().group_member().is_none());
    }

    /// Negative partition numbers are not partitions (the checkpoint reader refuses them too).
    #[test]
    fn offsets_json_refuses_negative_partitions() {
        let e = parse_offsets_json(r#"{"events":{"-1":5}}"#).unwrap_err();
        assert!(e.contains("events") && e.contains("'-1'"), "{e}");
        let b = DirectStream::builder().set("startingOffsets", r#"{"events":{"-3":-2}}"#);
        assert!(b.is_err());
        let ok = parse_offsets_json(r#"{"events":{"0":5,"+1":-1}}"#).unwrap();
        assert_eq!(ok.len(), 2);
    }

    #[test]
    fn chunked_batches_take_as_many_partitions_as_get_a_stored_batch_each() {
        const B: usize = 64 << 20;
        // 98k offsets, 256 KB stored batches of 170 B offsets (1542 each): 3 partitions get
        // 16 stored batches each, but 64 stored batches can be carried (16 MiB): 64.
        assert_eq!(
            chunked_partition_cap(B, Some(98_000), Some(262_144), Some(170.0)),
            Some(64)
        );
        // 10M offsets of 16 kB batches (15.75 offsets each): 16 stored batches each for
        // 39,672 partitions.
        assert_eq!(
            chunked_partition_cap(B, Some(10_000_000), Some(16_384), Some(1040.0)),
            Some(39_672)
        );
        // 1M offsets of 1 MiB batches of 100 B offsets (10,485 each): 16 stored batches each
        // for 5 partitions; 16 can be carried.
        assert_eq!(
            chunked_partition_cap(B, Some(1_000_000), Some(1 << 20), Some(100.0)),
            Some(16)
        );
        // Fewer offsets than one stored batch: what carried batches allow (16 of 1 MiB), at
        // least one; no limit: all.
        assert_eq!(
            chunked_partition_cap(B, Some(10), Some(1 << 20), Some(100.0)),
            Some(16)
        );
        assert_eq!(
            chunked_partition_cap(1, Some(10), Some(1 << 20), Some(100.0)),
            Some(1)
        );
        assert_eq!(
            chunked_partition_cap(B, None, Some(1 << 20), Some(100.0)),
            None
        );
    }

    #[test]
    fn a_chunked_batch_takes_eight_budgets_of_data_unchunked_a_quarter() {
        const B: usize = 64 << 20;
        // 1 KB offsets: 16,384 offsets unchunked, 524,288 chunked.
        assert_eq!(adaptive_offsets(false, B, 1024.0), 16_384);
        assert_eq!(adaptive_offsets(true, B, 1024.0), 524_288);
        // 100 B offsets: 5.4M chunked, 168k unchunked.
        assert_eq!(adaptive_offsets(true, B, 100.0), 5_368_709);
        assert_eq!(adaptive_offsets(false, B, 100.0), 167_772);
        // Tiny records: at most 10M; huge ones: at least 1,000 either way.
        assert_eq!(adaptive_offsets(true, B, 10.0), 10_000_000);
        assert_eq!(adaptive_offsets(true, B, 8e6), 1_000);
    }

    #[test]
    fn partition_cap_is_a_quarter_of_the_budget_in_stored_batches() {
        // 64 MiB before any fetch: 16 MiB / 1 MiB assumed = 16 partitions.
        assert_eq!(partition_cap(64 << 20, None), 16);
        // 4 MiB with 260 kB stored batches: 1 MiB / 260 kB = 4.03 → 4.
        assert_eq!(partition_cap(4 << 20, Some(260_000)), 4);
        // 256 MiB with 1 MB batches: 64 MiB / 1 MB = 67.1 → 67.
        assert_eq!(partition_cap(256 << 20, Some(1_000_000)), 67);
        // A budget smaller than four batches still reads one partition at a time.
        assert_eq!(partition_cap(64 << 10, Some(1 << 20)), 1);
        assert_eq!(partition_cap(0, Some(0)), 1);
    }
}
