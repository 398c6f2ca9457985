//! Kafka consumer-group offsets: the group's committed offsets in `__consumer_offsets`, where
//! standard Kafka tooling (`kafka-consumer-groups.sh`, librdkafka's `committed_offsets`) sees
//! them.
//!
//! - FindCoordinator (key 10) finds the group's coordinator, reached over a connection of the
//!   store's own ([`Coordinator`], the one the group members use).
//! - OffsetCommit (key 8) under the committing member's identity (generation or member epoch,
//!   member id, instance id: [`CommitContext::member`], read when each attempt is sent), or as
//!   a standalone consumer — generation -1, empty member id — outside a group and for
//!   administration, with
//!   `kdirect:batch=<N> topicId=<32 hex digits>` in each partition's commit metadata (the
//!   topic id, KIP-516, where the batch knew it: a stream resumed from the group tells a
//!   topic deleted and re-created while it was down from a truncated log).
//! - OffsetFetch (key 9) reads positions and the batch id back.
//! - `NOT_COORDINATOR`, `COORDINATOR_LOAD_IN_PROGRESS`, `COORDINATOR_NOT_AVAILABLE` (and a lost
//!   connection or timeout) are retried: the coordinator is looked up again after a backoff
//!   (100 ms doubling to 2 s, with jitter) until `default.api.timeout.ms` has passed since the
//!   first failure, as the Java client does ([`kdirect_engine::group::coordinator`]'s policy).
//!
//! **At-least-once.** Kafka has no compare-and-set on committed offsets. Before committing,
//! this store reads the group's offsets (OffsetFetch) and refuses with a conflict if a
//! partition holds another position than the batch's `from` — which catches a second writer or
//! a zombie most of the time, but not atomically: two writers can both pass the check. After a
//! crash between the user's output and the commit, the batch is re-planned and its records are
//! delivered again. Pair it with an idempotent sink (the file sink) for no duplicates in the
//! output; for exactly-once offsets, use the checkpoint or a SQL store.
//!
//! In a group the coordinator refuses the commit of a member that lost its partitions
//! (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID,
//! FENCED_MEMBER_EPOCH: [`StoreErrorKind::Fenced`]), which is what this store declares
//! ([`Capabilities::FENCED_BY_GENERATION`]); a wrapper that forwards the [`CommitContext`]
//! keeps it.
//!
//! This store logs no plans: [`OffsetStore::log_plan`] is a no-op.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kdirect_engine::cluster::Cluster;
use kdirect_engine::conn::BrokerConnection;
use kdirect_engine::group::coordinator::{Attempt, Coordinator, GiveUp};
use kdirect_engine::group::Generation;
use kdirect_proto::api::offset_commit::{self, CommitEntry, Committer, OffsetCommit};
use kdirect_proto::api::offset_fetch::{self, OffsetFetch};
use kdirect_proto::ErrorCode;

use crate::{
    Capabilities, CommitContext, CommitOutcome, Committed, Epochs, OffsetStore, PlannedBatch,
    Positions, StoreError, StoreErrorKind, TopicIds, TopicPartition,
};

/// The prefix of kdirect's commit metadata; the batch id follows, then, after a space,
/// `topicId=` and the topic's id in hex where it is known.
pub const METADATA_PREFIX: &str = "kdirect:batch=";

/// What the group holds for the partitions asked.
struct Fetched {
    positions: Positions,
    /// The highest batch id in kdirect's commit metadata.
    batch: Option<u64>,
    epochs: Epochs,
    topic_ids: TopicIds,
}

/// Kafka group offsets as an [`OffsetStore`].
#[derive(Debug)]
pub struct KafkaGroupStore {
    group: String,
    coordinator: Coordinator,
}

impl GiveUp for StoreError {
    /// An engine error (a lost connection, a coordinator that never came back) says how often
    /// and for how long it was retried; an error code says itself.
    fn gave_up(self, attempts: u32, elapsed: Duration) -> StoreError {
        match self.into_kind() {
            StoreErrorKind::Kafka { group, source } => StoreErrorKind::Kafka {
                group,
                source: source.gave_up(attempts, elapsed),
            }
            .into(),
            other => other.into(),
        }
    }
}

/// STALE_MEMBER_EPOCH (KIP-848): the commit's member epoch is older than the member's.
const STALE_MEMBER_EPOCH: ErrorCode = ErrorCode(113);

/// The coordinator's answers to a commit from a member that lost its partitions (classic:
/// the generation; KIP-848: FENCED_MEMBER_EPOCH, an epoch the coordinator never gave).
fn is_fenced(code: ErrorCode) -> bool {
    code == ErrorCode::ILLEGAL_GENERATION
        || code == ErrorCode::UNKNOWN_MEMBER_ID
        || code == ErrorCode::REBALANCE_IN_PROGRESS
        || code == ErrorCode::FENCED_INSTANCE_ID
        || code.0 == 110
}

fn is_coordinator_error(code: ErrorCode) -> bool {
    code == ErrorCode::NOT_COORDINATOR
        || code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        || code == ErrorCode::COORDINATOR_NOT_AVAILABLE
        || code == ErrorCode::REQUEST_TIMED_OUT
}

impl KafkaGroupStore {
    /// No plan log, no atomic compare-and-set (Kafka has none on committed offsets); fenced by
    /// the group's generation.
    pub const CAPABILITIES: Capabilities = Capabilities::FENCED_BY_GENERATION;

    /// The store for consumer group `group` on `cluster`.
    pub fn new(cluster: Arc<Cluster>, group: &str) -> KafkaGroupStore {
        KafkaGroupStore {
            group: group.to_owned(),
            coordinator: Coordinator::new(cluster, group),
        }
    }

    /// The first backoff between retries (default 100 ms; doubles up to 2 s, with jitter).
    /// Retries go on until the cluster's `default.api.timeout.ms` has passed.
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.coordinator = self.coordinator.with_backoff(backoff);
        self
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    fn kafka_err(&self, source: kdirect_engine::Error) -> StoreError {
        StoreErrorKind::Kafka {
            group: self.group.clone(),
            source,
        }
        .into()
    }

    fn code_err(&self, api: &'static str, tp: Option<(&str, i32)>, code: ErrorCode) -> StoreError {
        StoreErrorKind::KafkaCode {
            group: self.group.clone(),
            api,
            topic: tp.map(|(t, _)| t.to_owned()),
            partition: tp.map(|(_, p)| p),
            code,
        }
        .into()
    }

    fn engine_attempt(&self, e: kdirect_engine::Error) -> Attempt<StoreError> {
        if e.is_retriable() {
            Attempt::Retry(self.kafka_err(e))
        } else {
            Attempt::Fatal(self.kafka_err(e))
        }
    }

    /// Runs `op` against the coordinator, retrying retriable failures with a fresh
    /// coordinator lookup and backoff ([`Coordinator::retry`]).
    async fn with_retry<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: FnMut(BrokerConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt<StoreError>>>,
    {
        self.coordinator
            .retry(what, |e| self.kafka_err(e), op)
            .await
    }

    /// Partitions of `topics` from the cluster's metadata.
    async fn partitions(&self, topics: &[String]) -> Result<Vec<(String, Vec<i32>)>, StoreError> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let view = self
            .coordinator
            .cluster()
            .ensure_topics(&names)
            .await
            .map_err(|e| self.kafka_err(e))?;
        let mut out = Vec::new();
        for t in topics {
            let info = view.topic(t).map_err(|e| self.kafka_err(e))?;
            out.push((
                t.clone(),
                info.partitions.iter().map(|p| p.partition).collect(),
            ));
        }
        Ok(out)
    }

    /// The group's committed offsets of `topics` (each with its partitions), with the batch id
    /// from the metadata.
    async fn fetch(&self, topics: &[(String, Vec<i32>)]) -> Result<Fetched, StoreError> {
        self.with_retry("reading the group's offsets", |conn| async move {
            let version = conn
                .version::<OffsetFetch>()
                .map_err(|e| self.engine_attempt(e))?;
            let asked: Vec<(&str, Vec<i32>)> = topics
                .iter()
                .map(|(t, ps)| (t.as_str(), ps.clone()))
                .collect();
            let req = offset_fetch::request(&self.group, &asked, version);
            let resp = conn
                .request_at::<OffsetFetch>(&req, version)
                .await
                .map_err(|e| self.engine_attempt(e))?;
            let (group_code, parts) = offset_fetch::view(&resp, version);
            if let Some(code) = group_code.err() {
                let e = self.code_err("OffsetFetch", None, code);
                return Err(
                    if is_coordinator_error(code)
                        || code.is_retriable()
                        || code == STALE_MEMBER_EPOCH
                    {
                        Attempt::Retry(e)
                    } else {
                        Attempt::Fatal(e)
                    },
                );
            }
            let mut positions = Positions::new();
            let mut epochs = Epochs::new();
            let mut topic_ids = TopicIds::new();
            let mut batch: Option<u64> = None;
            for p in parts {
                if let Some(code) = p.error.err() {
                    let e = self.code_err("OffsetFetch", Some((&p.topic, p.partition)), code);
                    // UNSTABLE_OFFSET_COMMIT (88) is retriable too: a transaction is pending;
                    // and STALE_MEMBER_EPOCH (KIP-848) is never "no offset".
                    return Err(
                        if code.is_retriable() || code.0 == 88 || code == STALE_MEMBER_EPOCH {
                            Attempt::Retry(e)
                        } else {
                            Attempt::Fatal(e)
                        },
                    );
                }
                if p.offset < 0 {
                    continue;
                }
                let tp = TopicPartition::new(p.topic.clone(), p.partition);
                // KIP-320: the committed leader epoch (OffsetFetch v5+; -1 when not kept).
                if p.leader_epoch >= 0 {
                    epochs.insert(tp.clone(), p.leader_epoch);
                }
                positions.insert(tp, p.offset);
                let (id, topic_id) =
                    crate::resume::parse_commit_metadata(p.metadata.as_deref().unwrap_or(""));
                if let Some(id) = id {
                    batch = Some(batch.map_or(id, |b| b.max(id)));
                }
                if let Some(topic_id) = topic_id {
                    topic_ids.insert(p.topic.clone(), topic_id);
                }
            }
            Ok(Fetched {
                positions,
                batch,
                epochs,
                topic_ids,
            })
        })
        .await
    }

    /// The committing member's identity now (`None`: a standalone commit), or
    /// [`StoreErrorKind::Fenced`] once the member lost its partitions.
    fn generation(&self, ctx: &CommitContext<'_>) -> Result<Option<Generation>, StoreError> {
        ctx.generation(&self.describe())
    }

    async fn commit_positions(
        &self,
        batch_id: u64,
        positions: &Positions,
        epochs: &Epochs,
        topic_ids: &TopicIds,
        ctx: &CommitContext<'_>,
    ) -> Result<(), StoreError> {
        // Checked before the first attempt, and again before each retry (the consumer
        // protocol's member epoch moves on while a batch is held).
        self.generation(ctx)?;
        let mut by_topic: BTreeMap<&str, Vec<CommitEntry>> = BTreeMap::new();
        for (tp, &offset) in positions {
            by_topic
                .entry(tp.topic.as_str())
                .or_default()
                .push(CommitEntry {
                    partition: tp.partition,
                    offset,
                    // KIP-320: OffsetCommit v6+ keeps it (older versions drop it).
                    leader_epoch: epochs.get(tp).copied().unwrap_or(-1),
                    metadata: Some(crate::resume::commit_metadata(
                        batch_id,
                        topic_ids.get(tp.topic.as_str()),
                    )),
                });
        }
        let topics: Vec<(&str, Vec<CommitEntry>)> = by_topic.into_iter().collect();
        self.with_retry("committing the group's offsets", |conn| {
            let topics = &topics;
            async move {
                let generation = self.generation(ctx).map_err(Attempt::Fatal)?;
                let in_group = generation.is_some();
                let committer = generation
                    .as_ref()
                    .map_or(Committer::STANDALONE, |g| Committer {
                        generation_id: g.generation_id,
                        member_id: &g.member_id,
                        instance_id: g.instance_id.as_deref(),
                    });
                let version = conn
                    .version::<OffsetCommit>()
                    .map_err(|e| self.engine_attempt(e))?;
                let req = offset_commit::request_as(&self.group, committer, topics, version);
                let resp = conn
                    .request_at::<OffsetCommit>(&req, version)
                    .await
                    .map_err(|e| self.engine_attempt(e))?;
                for (topic, partition, code) in offset_commit::view(&resp) {
                    if code == STALE_MEMBER_EPOCH && in_group {
                        // KIP-848: the member epoch moved on (a heartbeat answered meanwhile);
                        // retried under the member's current one, if it still owns its
                        // partitions.
                        return Err(Attempt::Retry(self.code_err(
                            "OffsetCommit",
                            Some((&topic, partition)),
                            code,
                        )));
                    }
                    if is_fenced(code) && in_group {
                        return Err(Attempt::Fatal(
                            StoreErrorKind::Fenced {
                                store: self.describe(),
                                reason: format!(
                                    "the coordinator refused the commit of {topic}-{partition} \
                                     with {code}"
                                ),
                            }
                            .into(),
                        ));
                    }
                    if let Some(code) = code.err() {
                        let e = self.code_err("OffsetCommit", Some((&topic, partition)), code);
                        return Err(if is_coordinator_error(code) || code.is_retriable() {
                            Attempt::Retry(e)
                        } else {
                            Attempt::Fatal(e)
                        });
                    }
                }
                Ok(())
            }
        })
        .await
    }
}

impl OffsetStore for KafkaGroupStore {
    fn describe(&self) -> String {
        format!("kafka group '{}'", self.group)
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        let topics: Vec<String> = if topics.is_empty() {
            // Every topic of the cluster: Kafka cannot list a group's topics without the group
            // APIs, and a null topic list in OffsetFetch is not answered alike by every broker.
            let view = self
                .coordinator
                .cluster()
                .refresh(None)
                .await
                .map_err(|e| self.kafka_err(e))?;
            view.topics
                .iter()
                .filter(|(name, t)| t.error.is_ok() && !name.starts_with("__"))
                .map(|(name, _)| name.clone())
                .collect()
        } else {
            topics.to_vec()
        };
        if topics.is_empty() {
            return Ok(Committed::default());
        }
        let asked = self.partitions(&topics).await?;
        let Fetched {
            mut positions,
            batch,
            mut epochs,
            mut topic_ids,
        } = self.fetch(&asked).await?;
        positions.retain(|tp, _| topics.iter().any(|t| *t == tp.topic));
        epochs.retain(|tp, _| positions.contains_key(tp));
        topic_ids.retain(|t, _| topics.contains(t));
        Ok(Committed {
            batch_id: batch,
            positions,
            pending: None,
            epochs,
            topic_ids,
        })
    }

    async fn log_plan(&self, _batch: &PlannedBatch) -> Result<(), StoreError> {
        Ok(())
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        // Best-effort check (not atomic: Kafka has no compare-and-set).
        let mut asked: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for r in &batch.ranges {
            asked
                .entry(r.topic.to_string())
                .or_default()
                .push(r.partition);
        }
        let asked: Vec<(String, Vec<i32>)> = asked.into_iter().collect();
        if !asked.is_empty() {
            let Fetched {
                positions: stored,
                batch: stored_batch,
                ..
            } = self.fetch(&asked).await?;
            // The one commit rule over the group's committed offsets (the batch id each
            // carries in its metadata).
            let found = crate::found_in(batch, &stored, stored_batch);
            let decision = crate::decide(batch, &found);
            if !crate::decided(&self.describe(), batch, decision)? {
                return Ok(CommitOutcome::AlreadyCommitted);
            }
        }
        self.commit_positions(
            batch.id,
            &batch.positions(),
            &batch.epochs,
            &batch.topic_ids,
            ctx,
        )
        .await?;
        Ok(CommitOutcome::Committed)
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        // A position set by hand has no known epoch, and its topic no known id (it is set for
        // the topic as it is now).
        self.commit_positions(
            batch_id,
            positions,
            &Epochs::new(),
            &TopicIds::new(),
            &CommitContext::STANDALONE,
        )
        .await
    }
}
