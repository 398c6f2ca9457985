//! The cluster view: brokers, topics, partitions, leaders and leader epochs, from Metadata,
//! refreshed on demand; connections to each broker; and `list_offsets` for many partitions at
//! once, one request per leader.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use kdirect_proto::api::find_coordinator::{self, FindCoordinator};
use kdirect_proto::api::list_offsets::{
    self, ListOffsets, OffsetQuery, OffsetSpec, PartitionOffset,
};
use kdirect_proto::api::metadata::{self, BrokerInfo, Metadata, TopicInfo};
use kdirect_proto::message::Api;
use kdirect_proto::{ErrorCode, IsolationLevel};

use crate::conn::{BrokerConnection, ConnConfig};
use crate::error::{Error, ErrorKind};

/// How many connections a metadata refresh tries when the one it asked dropped.
const METADATA_ATTEMPTS: u32 = 3;

/// A snapshot of the cluster's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Cluster id, if the broker sent one.
    pub cluster_id: Option<String>,
    /// Controller node id.
    pub controller_id: i32,
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Topics by name (only those asked for since the last full refresh).
    pub topics: BTreeMap<String, TopicInfo>,
}

impl ClusterView {
    /// `host:port` of a broker.
    pub fn broker_addr(&self, node_id: i32) -> Option<String> {
        self.brokers
            .get(&node_id)
            .map(|b| format!("{}:{}", b.host, b.port))
    }

    /// A topic, if known and without a topic-level error.
    pub fn topic(&self, name: &str) -> Result<&TopicInfo, Error> {
        match self.topics.get(name) {
            Some(t) if t.error.is_ok() => Ok(t),
            Some(t)
                if t.error != ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                    && t.error != ErrorCode::UNKNOWN_TOPIC_ID =>
            {
                Err(ErrorKind::TopicError {
                    topic: name.to_owned(),
                    code: t.error,
                }
                .into())
            }
            _ => Err(ErrorKind::UnknownTopic {
                topic: name.to_owned(),
            }
            .into()),
        }
    }

    /// The leader node id and leader epoch of a partition.
    pub fn leader(&self, topic: &str, partition: i32) -> Result<(i32, i32), Error> {
        let t = self.topic(topic)?;
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .ok_or_else(|| ErrorKind::UnknownPartition {
                topic: topic.to_owned(),
                partition,
            })?;
        if p.leader < 0 || !self.brokers.contains_key(&p.leader) {
            return Err(ErrorKind::NoLeader {
                topic: topic.to_owned(),
                partition,
            }
            .into());
        }
        Ok((p.leader, p.leader_epoch))
    }
}

/// A client's view of one cluster: bootstrap addresses, one connection per broker, metadata.
#[derive(Debug)]
pub struct Cluster {
    bootstrap: Vec<String>,
    config: ConnConfig,
    conns: DashMap<i32, BrokerConnection>,
    bootstrap_conn: tokio::sync::Mutex<Option<BrokerConnection>>,
    view: RwLock<Arc<ClusterView>>,
    /// KIP-227 fetch sessions, per broker (see `fetch/incremental.rs`).
    fetch_sessions: Arc<crate::incremental::SessionPool>,
}

impl Cluster {
    /// Connects to the first reachable bootstrap address and reads the brokers (no topics yet).
    /// Each entry may itself be a comma-separated list, as `bootstrap.servers` is.
    pub async fn connect(bootstrap: &[String], config: ConnConfig) -> Result<Cluster, Error> {
        let bootstrap: Vec<String> = bootstrap
            .iter()
            .flat_map(|b| b.split(','))
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(str::to_owned)
            .collect();
        if bootstrap.is_empty() {
            return Err(ErrorKind::Config("bootstrap.servers is empty".to_owned()).into());
        }
        let cluster = Cluster {
            bootstrap,
            config,
            conns: DashMap::new(),
            bootstrap_conn: tokio::sync::Mutex::new(None),
            view: RwLock::new(Arc::new(ClusterView::default())),
            fetch_sessions: Arc::default(),
        };
        cluster.refresh(Some(&[])).await?;
        Ok(cluster)
    }

    /// The fetch sessions this client holds with its brokers.
    pub(crate) fn fetch_sessions(&self) -> &Arc<crate::incremental::SessionPool> {
        &self.fetch_sessions
    }

    /// What this client's fetch sessions (KIP-227) did so far, over every broker.
    pub fn fetch_session_stats(&self) -> crate::incremental::FetchSessionStats {
        self.fetch_sessions.stats()
    }

    /// The connection settings.
    pub fn config(&self) -> &ConnConfig {
        &self.config
    }

    /// The current metadata snapshot.
    pub fn view(&self) -> Arc<ClusterView> {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Refreshes metadata for `topics` (`None`: every topic, replacing the topic list) and the
    /// broker list, and returns the new snapshot.
    pub async fn refresh(&self, topics: Option<&[&str]>) -> Result<Arc<ClusterView>, Error> {
        // Any live connection will do; one that turns out dead (its broker just went down) is
        // closed and the next one asked, a few times, before the error is the caller's.
        let mut attempts = 0;
        let resp = loop {
            let conn = self.any_connection().await?;
            let version = conn.version::<Metadata>()?;
            match conn
                .request_at::<Metadata>(&metadata::request(topics, version), version)
                .await
            {
                Ok(r) => break r,
                Err(e) => {
                    conn.close("metadata request failed");
                    attempts += 1;
                    if !e.is_retriable() || attempts >= METADATA_ATTEMPTS {
                        return Err(e);
                    }
                }
            }
        };
        let fresh = metadata::view(&resp);
        let mut guard = self.view.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = if topics.is_none() {
            ClusterView::default()
        } else {
            (**guard).clone()
        };
        next.cluster_id = fresh.cluster_id;
        next.controller_id = fresh.controller_id;
        next.brokers = fresh.brokers.into_iter().map(|b| (b.node_id, b)).collect();
        for t in fresh.topics {
            next.topics.insert(t.name.clone(), t);
        }
        // Forget connections to brokers that left, or whose address changed.
        self.conns.retain(|id, c| {
            next.broker_addr(*id).as_deref() == Some(c.broker().addr.as_str()) && c.is_usable()
        });
        let next = Arc::new(next);
        *guard = next.clone();
        Ok(next)
    }

    /// Makes sure the view knows `topics`, refreshing those it does not know.
    pub async fn ensure_topics(&self, topics: &[&str]) -> Result<Arc<ClusterView>, Error> {
        let view = self.view();
        let missing: Vec<&str> = topics
            .iter()
            .copied()
            .filter(|t| !view.topics.contains_key(*t))
            .collect();
        if missing.is_empty() {
            return Ok(view);
        }
        self.refresh(Some(&missing)).await
    }

    /// The connection to broker `node_id`, opened if needed.
    pub async fn connection(&self, node_id: i32) -> Result<BrokerConnection, Error> {
        if let Some(c) = self.conns.get(&node_id) {
            if c.is_usable() {
                return Ok(c.clone());
            }
        }
        let addr = self
            .view()
            .broker_addr(node_id)
            .ok_or_else(|| Error::from(ErrorKind::UnknownBroker { node_id }))?;
        let conn = BrokerConnection::connect(&addr, Some(node_id), &self.config).await?;
        self.conns.insert(node_id, conn.clone());
        Ok(conn)
    }

    /// The coordinator of consumer group `group` (FindCoordinator, key type 0): its node id
    /// and `host:port`. A retriable error code (the coordinator loading, not available yet)
    /// is an [`ErrorKind::Broker`] error whose [`Error::is_retriable`] says so.
    pub async fn find_coordinator(&self, group: &str) -> Result<(i32, String), Error> {
        let conn = self.any_connection().await?;
        let version = conn.version::<FindCoordinator>()?;
        let resp = match conn
            .request_at::<FindCoordinator>(&find_coordinator::request(group, version), version)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                conn.close("FindCoordinator request failed");
                return Err(e);
            }
        };
        let broker = conn.broker().clone();
        let Some(found) = find_coordinator::view(&resp, group, version) else {
            return Err(ErrorKind::Broker {
                broker,
                api: FindCoordinator::KEY,
                code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
            }
            .into());
        };
        if let Some(code) = found.error.err() {
            return Err(ErrorKind::Broker {
                broker,
                api: FindCoordinator::KEY,
                code,
            }
            .into());
        }
        Ok((found.node_id, format!("{}:{}", found.host, found.port)))
    }

    /// Any live connection: a broker's, or the bootstrap one (reconnecting through the
    /// bootstrap list in order if none is open).
    async fn any_connection(&self) -> Result<BrokerConnection, Error> {
        if let Some(c) = self.conns.iter().find(|c| c.is_usable()) {
            return Ok(c.clone());
        }
        let mut boot = self.bootstrap_conn.lock().await;
        if let Some(c) = boot.as_ref() {
            if c.is_usable() {
                return Ok(c.clone());
            }
        }
        let mut tried = Vec::new();
        // Known brokers first (the bootstrap list may be stale), then the bootstrap list.
        let known: Vec<(Option<i32>, String)> = self
            .view()
            .brokers
            .values()
            .map(|b| (Some(b.node_id), format!("{}:{}", b.host, b.port)))
            .collect();
        let candidates = known
            .into_iter()
            .chain(self.bootstrap.iter().map(|a| (None, a.clone())));
        for (id, addr) in candidates {
            match BrokerConnection::connect(&addr, id, &self.config).await {
                Ok(c) => {
                    *boot = Some(c.clone());
                    return Ok(c);
                }
                Err(e) => {
                    // A version mismatch, refused credentials, a TLS certificate or setting
                    // problem will not get better on another broker of the cluster.
                    if !e.is_retriable()
                        && matches!(
                            e.kind(),
                            ErrorKind::Protocol { .. }
                                | ErrorKind::Tls { .. }
                                | ErrorKind::Sasl { .. }
                                | ErrorKind::Config(_)
                        )
                    {
                        return Err(e);
                    }
                    tried.push((addr, error_reason(&e)));
                }
            }
        }
        Err(ErrorKind::Bootstrap { tried }.into())
    }

    /// Looks up offsets for many partitions at once: one ListOffsets request per leader, all
    /// leaders concurrently. Partitions whose leader moved are retried after a metadata
    /// refresh. Results are sorted by topic, then partition.
    pub async fn list_offsets(
        &self,
        partitions: &[(String, i32)],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<Vec<PartitionOffset>, Error> {
        let topics: Vec<&str> = {
            let mut t: Vec<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        let mut view = self.ensure_topics(&topics).await?;
        let mut todo: Vec<(String, i32)> = partitions.to_vec();
        let mut done: Vec<PartitionOffset> = Vec::with_capacity(todo.len());
        let mut attempt = 0;
        let mut first_failure: Option<tokio::time::Instant> = None;
        loop {
            let mut by_leader: HashMap<i32, BTreeMap<String, Vec<OffsetQuery>>> = HashMap::new();
            let mut retry: Vec<(String, i32)> = Vec::new();
            let mut last_err: Option<Error> = None;
            for (topic, partition) in &todo {
                match view.leader(topic, *partition) {
                    Ok((leader, epoch)) => by_leader
                        .entry(leader)
                        .or_default()
                        .entry(topic.clone())
                        .or_default()
                        .push(OffsetQuery {
                            partition: *partition,
                            spec,
                            current_leader_epoch: epoch,
                        }),
                    Err(e) if e.is_retriable() => {
                        retry.push((topic.clone(), *partition));
                        last_err = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            let mut tasks = tokio::task::JoinSet::new();
            for (leader, topics) in by_leader {
                let conn =
                    match self.connection(leader).await {
                        Ok(c) => c,
                        Err(e) if e.is_retriable() => {
                            retry.extend(topics.iter().flat_map(|(t, qs)| {
                                qs.iter().map(move |q| (t.clone(), q.partition))
                            }));
                            last_err = Some(e);
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                tasks.spawn(async move {
                    let asked: Vec<(String, i32)> = topics
                        .iter()
                        .flat_map(|(t, qs)| qs.iter().map(move |q| (t.clone(), q.partition)))
                        .collect();
                    let version = conn.version::<ListOffsets>()?;
                    let req_topics: Vec<(&str, Vec<OffsetQuery>)> = topics
                        .iter()
                        .map(|(t, qs)| (t.as_str(), qs.clone()))
                        .collect();
                    let req = list_offsets::request(isolation, &req_topics, version)
                        .map_err(|source| conn.protocol_error(source))?;
                    let result = conn.request_at::<ListOffsets>(&req, version).await;
                    Ok::<_, Error>((conn, asked, result))
                });
            }
            while let Some(joined) = tasks.join_next().await {
                let (conn, asked, result) = joined.map_err(|e| {
                    Error::from(ErrorKind::Task {
                        what: "list_offsets request",
                        reason: e.to_string(),
                    })
                })??;
                let resp = match result {
                    Ok(r) => r,
                    Err(e) if e.is_retriable() => {
                        retry.extend(asked);
                        last_err = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let mut answered = 0;
                for p in list_offsets::view(&resp) {
                    if !asked
                        .iter()
                        .any(|(t, n)| *t == p.topic && *n == p.partition)
                    {
                        continue;
                    }
                    answered += 1;
                    match p.error.err() {
                        None => done.push(p),
                        Some(code) if code.is_retriable() => {
                            last_err = Some(
                                ErrorKind::Partition {
                                    broker: conn.broker().clone(),
                                    api: ListOffsets::KEY,
                                    topic: p.topic.clone(),
                                    partition: p.partition,
                                    code,
                                }
                                .into(),
                            );
                            retry.push((p.topic, p.partition));
                        }
                        Some(code) => {
                            return Err(partition_error(&conn, &p.topic, p.partition, code));
                        }
                    }
                }
                if answered != asked.len() {
                    return Err(ErrorKind::Protocol {
                        broker: conn.broker().clone(),
                        source: kdirect_proto::ProtoError::Inconsistent {
                            api: ListOffsets::KEY,
                            reason: format!("asked for {} partitions, got {answered}", asked.len()),
                        },
                    }
                    .into());
                }
            }
            if retry.is_empty() {
                done.sort_by(|a, b| {
                    (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition))
                });
                return Ok(done);
            }
            attempt += 1;
            let since = *first_failure.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= self.config.retry_timeout {
                let last = last_err.unwrap_or_else(|| {
                    ErrorKind::Task {
                        what: "ListOffsets",
                        reason: "partitions left to retry without an error".to_owned(),
                    }
                    .into()
                });
                return Err(last.gave_up(attempt, since.elapsed()));
            }
            tokio::time::sleep(crate::retry::backoff(
                Duration::from_millis(50),
                attempt,
                Duration::from_millis(1600),
            ))
            .await;
            view = self.refresh(Some(&topics)).await?;
            todo = retry;
        }
    }
}

fn partition_error(conn: &BrokerConnection, topic: &str, partition: i32, code: ErrorCode) -> Error {
    if code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION {
        return ErrorKind::UnknownTopic {
            topic: topic.to_owned(),
        }
        .into();
    }
    ErrorKind::Partition {
        broker: conn.broker().clone(),
        api: ListOffsets::KEY,
        topic: topic.to_owned(),
        partition,
        code,
    }
    .into()
}

/// The error's text without the broker name (for lists that already name it).
fn error_reason(e: &Error) -> String {
    match e.kind() {
        ErrorKind::Connect { source, .. } => source.to_string(),
        ErrorKind::Disconnected { reason, .. } => reason.clone(),
        _ => e.to_string(),
    }
}
