//! The driver of a [`Membership`]: the coordinator connection, the join/sync loop and the
//! heartbeat task. The stream calls [`ClassicMember::join`] between batches, tells the member
//! when it hands a batch out and when it is asked for the next one (the `max.poll.interval.ms`
//! clock), and asks [`ClassicMember::generation`] for the identity to commit under.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_proto::api::heartbeat::{self, Heartbeat};
use kdirect_proto::api::join_group::{self, JoinGroup, JoinParams};
use kdirect_proto::api::leave_group::{self, LeaveGroup};
use kdirect_proto::api::sync_group::{self, SyncGroup};
use kdirect_proto::kafka_protocol::messages::ApiKey;
use kdirect_proto::message::Api;
use kdirect_proto::ErrorCode;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::assignor::Assignor;
use super::membership::{Beat, Fault, Generation, JoinStep, Membership, State, SyncStep};
use super::GroupConfig;
use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::plan::TopicPartition;

/// The outcome of a join: this member's part of the new generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The generation id.
    pub generation_id: i32,
    /// This member's id.
    pub member_id: String,
    /// Whether this member led the generation (computed everyone's partitions).
    pub leader: bool,
    /// The assignor: the one the coordinator chose (classic), or the coordinator's own
    /// (consumer protocol; `group.remote.assignor`, empty for the broker's default).
    pub assignor: String,
    /// This member's partitions.
    pub partitions: BTreeSet<TopicPartition>,
}

/// A member of a consumer group speaking the classic protocol: see the module docs. Dropping
/// it stops its heartbeats; call [`leave`](Self::leave) first to hand its partitions over at
/// once. [`super::GroupMember`] is this or a consumer-protocol member.
#[derive(Debug)]
pub struct ClassicMember {
    inner: Arc<Inner>,
    heartbeat: JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    cluster: Arc<Cluster>,
    state: Mutex<Membership>,
    coordinator: tokio::sync::Mutex<Option<BrokerConnection>>,
    /// Bumped whenever the member comes to need a rejoin (a rebalance, a lost generation).
    changed: watch::Sender<u64>,
    /// Since when the user holds a batch (`max.poll.interval.ms` runs from here).
    holding_since: Mutex<Option<Instant>>,
    /// A JoinGroup/SyncGroup round is in progress: no heartbeats.
    joining: AtomicBool,
    /// The last heartbeat the coordinator answered (or the last join).
    last_answer: Mutex<Instant>,
    /// A heartbeat answer no rejoin fixes (FENCED_INSTANCE_ID, an authorization failure).
    fatal: Mutex<Option<(ApiKey, BrokerName, Fault)>>,
}

impl Inner {
    /// Tells whoever waits in [`ClassicMember::join_needed`] to look again.
    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClassicMember {
    /// A member of `config.group` on `cluster`; it joins on the first [`join`](Self::join).
    /// Starts the heartbeat task (on [`crate::io::handle`]: it beats while the caller's thread
    /// is busy with a batch, even on a current-thread runtime).
    pub fn new(cluster: Arc<Cluster>, config: GroupConfig) -> Result<ClassicMember, Error> {
        config.validate().map_err(ErrorKind::Config)?;
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            cluster,
            state: Mutex::new(Membership::new(config)),
            coordinator: tokio::sync::Mutex::new(None),
            changed,
            holding_since: Mutex::new(None),
            joining: AtomicBool::new(false),
            last_answer: Mutex::new(Instant::now()),
            fatal: Mutex::new(None),
        });
        let heartbeat = crate::io::spawn(heartbeats(Arc::downgrade(&inner)));
        Ok(ClassicMember { inner, heartbeat })
    }

    /// The group id.
    pub fn group(&self) -> String {
        lock(&self.inner.state).config().group.clone()
    }

    /// The settings.
    pub fn config(&self) -> GroupConfig {
        lock(&self.inner.state).config().clone()
    }

    /// Whether the member must join (again) before it reads: never joined, a rebalance was
    /// asked for, or its generation is over.
    pub fn needs_join(&self) -> bool {
        lock(&self.inner.state).needs_join()
    }

    /// Resolves once the member needs to join again (at once if it does already).
    pub async fn join_needed(&self) {
        let mut rx = self.inner.changed.subscribe();
        loop {
            if self.needs_join() {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether the member keeps its partitions while it rejoins (cooperative-sticky only).
    pub fn is_cooperative(&self) -> bool {
        lock(&self.inner.state).is_cooperative()
    }

    /// The identity to commit under, while this member's generation lasts.
    pub fn generation(&self) -> Option<Generation> {
        lock(&self.inner.state).generation()
    }

    /// Why the generation is over for this member, if it is.
    pub fn lost(&self) -> Option<String> {
        match lock(&self.inner.state).state() {
            State::Lost(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// The generation is over for this member (a store refused its commit as fenced): the
    /// next batch rejoins.
    pub fn lose(&self, reason: impl Into<String>) {
        lock(&self.inner.state).lose(reason);
        self.inner.wake();
    }

    /// The member id (empty before the first join).
    pub fn member_id(&self) -> String {
        lock(&self.inner.state).member_id().to_owned()
    }

    /// The partitions of the current generation.
    pub fn assigned(&self) -> BTreeSet<TopicPartition> {
        lock(&self.inner.state).assigned().clone()
    }

    /// The user was handed a batch: `max.poll.interval.ms` starts.
    pub fn handed_out(&self) {
        *lock(&self.inner.holding_since) = Some(Instant::now());
    }

    /// The user asked for the next batch: it holds none.
    pub fn polling(&self) {
        *lock(&self.inner.holding_since) = None;
    }

    /// A heartbeat answer that no rejoin fixes, as an error.
    pub fn fatal(&self) -> Option<Error> {
        let group = self.group();
        lock(&self.inner.fatal)
            .as_ref()
            .map(|(api, broker, f)| fault_error(&group, broker.clone(), *api, f.clone()))
    }

    /// Joins the group subscribing to `topics` (JoinGroup, then SyncGroup; the leader computes
    /// the assignment from every member's subscription and the metadata), giving up whatever
    /// it owned first. Coordinator errors and lost connections are retried with backoff for
    /// `default.api.timeout.ms`.
    pub async fn join(&self, topics: &[String]) -> Result<Joined, Error> {
        if let Some(e) = self.fatal() {
            return Err(e);
        }
        let inner = &self.inner;
        inner.joining.store(true, Ordering::SeqCst);
        let _joining = Joining(&inner.joining);
        lock(&inner.state).start_join();
        let config = self.config();
        let retry_timeout = inner.cluster.config().retry_timeout;
        let base = Duration::from_millis(100);
        let started = Instant::now();
        let mut attempts = 0u32;
        // A failure worth retrying after a fresh coordinator lookup and a backoff, within
        // default.api.timeout.ms.
        macro_rules! retry {
            ($e:expr) => {{
                let e: Error = $e;
                *inner.coordinator.lock().await = None;
                attempts += 1;
                if started.elapsed() >= retry_timeout {
                    return Err(e.gave_up(attempts, started.elapsed()));
                }
                let wait = crate::retry::backoff(base, attempts, Duration::from_secs(2));
                tracing::warn!(
                    group = config.group.as_str(),
                    attempt = attempts,
                    "joining the group: {e}; retrying in {} ms",
                    wait.as_millis()
                );
                tokio::time::sleep(wait).await;
                continue;
            }};
        }
        loop {
            let conn = match self.coordinator().await {
                Ok(c) => c,
                Err(e) if e.is_retriable() => retry!(e),
                Err(e) => return Err(e),
            };
            let broker = conn.broker().clone();
            let (protocols, member_id) = {
                let s = lock(&inner.state);
                (
                    s.protocols(topics).map_err(ErrorKind::Config)?,
                    s.member_id().to_owned(),
                )
            };
            let version = conn.version::<JoinGroup>()?;
            let protocol_refs: Vec<(&str, Bytes)> =
                protocols.iter().map(|(n, b)| (*n, b.clone())).collect();
            let params = JoinParams {
                group: &config.group,
                session_timeout_ms: millis(config.session_timeout),
                rebalance_timeout_ms: millis(config.max_poll_interval),
                member_id: &member_id,
                group_instance_id: config.instance_id.as_deref(),
                protocol_type: "consumer",
                protocols: &protocol_refs,
                reason: None,
            };
            // The coordinator holds JoinGroup until every member rejoined, up to the
            // rebalance timeout.
            let wait = config.max_poll_interval + Duration::from_secs(5);
            let resp = match conn
                .request_within::<JoinGroup>(&join_group::request(&params, version), version, wait)
                .await
            {
                Ok(r) => r,
                Err(e) if e.is_retriable() => retry!(e),
                Err(e) => return Err(e),
            };
            let view = join_group::view(&resp);
            let step = lock(&inner.state)
                .on_join(&view)
                .map_err(|f| fault_error(&config.group, broker.clone(), JoinGroup::KEY, f))?;
            let assignments = match step {
                JoinStep::Again => continue,
                JoinStep::FindCoordinator(code) => {
                    retry!(code_error(&broker, JoinGroup::KEY, code))
                }
                JoinStep::Follow => Vec::new(),
                JoinStep::Lead { assignor, members } => {
                    let wanted: BTreeSet<&str> = members
                        .iter()
                        .flat_map(|m| m.topics.iter().map(String::as_str))
                        .collect();
                    let wanted: Vec<&str> = wanted.into_iter().collect();
                    let view = match inner.cluster.refresh(Some(&wanted)).await {
                        Ok(v) => v,
                        Err(e) if e.is_retriable() => retry!(e),
                        Err(e) => return Err(e),
                    };
                    let counts: BTreeMap<String, i32> = wanted
                        .iter()
                        .filter_map(|t| {
                            let info = view.topic(t).ok()?;
                            Some(((*t).to_owned(), info.partitions.len() as i32))
                        })
                        .collect();
                    let out = lock(&inner.state)
                        .assignments(assignor, &members, &counts)
                        .map_err(ErrorKind::Config)?;
                    tracing::info!(
                        group = config.group.as_str(),
                        generation = view_generation(&inner.state),
                        members = members.len(),
                        "leading the group: assigned {} partitions with {}",
                        counts.values().sum::<i32>(),
                        assignor.name()
                    );
                    out
                }
            };
            let (generation_id, member_id, protocol) = {
                let s = lock(&inner.state);
                (
                    s.generation_id(),
                    s.member_id().to_owned(),
                    s.protocol().map(Assignor::name),
                )
            };
            let refs: Vec<(&str, Bytes)> = assignments
                .iter()
                .map(|(m, b)| (m.as_str(), b.clone()))
                .collect();
            let version = conn.version::<SyncGroup>()?;
            let req = sync_group::request(
                &config.group,
                generation_id,
                &member_id,
                config.instance_id.as_deref(),
                Some("consumer"),
                protocol,
                &refs,
                version,
            );
            let resp = match conn.request_within::<SyncGroup>(&req, version, wait).await {
                Ok(r) => r,
                Err(e) if e.is_retriable() => retry!(e),
                Err(e) => return Err(e),
            };
            let view = sync_group::view(&resp);
            let step = lock(&inner.state)
                .on_sync(&view)
                .map_err(|f| fault_error(&config.group, broker.clone(), SyncGroup::KEY, f))?;
            match step {
                SyncStep::Rejoin => continue,
                SyncStep::FindCoordinator(code) => {
                    retry!(code_error(&broker, SyncGroup::KEY, code))
                }
                SyncStep::Assigned(partitions) => {
                    *lock(&inner.last_answer) = Instant::now();
                    if lock(&inner.state).needs_join() {
                        // Cooperative: partitions were revoked; join again at once so the
                        // leader can hand them on.
                        tracing::info!(
                            group = config.group.as_str(),
                            "revoked partitions: joining again to hand them on"
                        );
                        lock(&inner.state).start_join();
                        continue;
                    }
                    let s = lock(&inner.state);
                    let joined = Joined {
                        generation_id: s.generation_id(),
                        member_id: s.member_id().to_owned(),
                        leader: s.is_leader(),
                        assignor: s.protocol().unwrap_or(Assignor::Range).name().to_owned(),
                        partitions,
                    };
                    tracing::info!(
                        group = config.group.as_str(),
                        generation = joined.generation_id,
                        member = joined.member_id.as_str(),
                        "joined: {} partitions",
                        joined.partitions.len()
                    );
                    return Ok(joined);
                }
            }
        }
    }

    /// Leaves the group (LeaveGroup), so that its partitions go to the other members at once
    /// rather than after `session.timeout.ms`. A static member sends nothing (KIP-345: its
    /// partitions wait for it for the session timeout).
    pub async fn leave(&self) -> Result<(), Error> {
        let (group, member_id, instance) = {
            let s = lock(&self.inner.state);
            (
                s.config().group.clone(),
                s.member_id().to_owned(),
                s.config().instance_id.clone(),
            )
        };
        lock(&self.inner.state).left();
        self.inner.wake();
        if instance.is_some() || member_id.is_empty() {
            return Ok(());
        }
        send_leave(&self.inner, &group, &member_id, "the consumer is closing").await
    }

    async fn coordinator(&self) -> Result<BrokerConnection, Error> {
        coordinator(&self.inner).await
    }
}

impl Drop for ClassicMember {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Clears the joining flag when the join ends, however it ends.
struct Joining<'a>(&'a AtomicBool);

impl Drop for Joining<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

fn view_generation(state: &Mutex<Membership>) -> i32 {
    lock(state).generation_id()
}

pub(super) fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

pub(super) fn code_error(broker: &BrokerName, api: ApiKey, code: ErrorCode) -> Error {
    ErrorKind::Broker {
        broker: broker.clone(),
        api,
        code,
    }
    .into()
}

pub(super) fn fault_error(group: &str, broker: BrokerName, api: ApiKey, f: Fault) -> Error {
    ErrorKind::Group {
        group: group.to_owned(),
        broker,
        api,
        code: f.code,
        message: f.detail,
    }
    .into()
}

/// The coordinator's connection: a connection of the member's own, not the cluster's shared
/// one (the coordinator holds JoinGroup for up to the rebalance timeout, and a broker answers
/// a connection's requests in order).
async fn coordinator(inner: &Inner) -> Result<BrokerConnection, Error> {
    let mut cached = inner.coordinator.lock().await;
    if let Some(c) = cached.as_ref() {
        if c.is_usable() {
            return Ok(c.clone());
        }
    }
    let group = lock(&inner.state).config().group.clone();
    let (node, addr) = inner.cluster.find_coordinator(&group).await?;
    let conn = BrokerConnection::connect(&addr, Some(node), inner.cluster.config()).await?;
    *cached = Some(conn.clone());
    Ok(conn)
}

async fn send_leave(
    inner: &Inner,
    group: &str,
    member_id: &str,
    reason: &str,
) -> Result<(), Error> {
    let conn = coordinator(inner).await?;
    let version = conn.version::<LeaveGroup>()?;
    let req = leave_group::request(group, member_id, None, Some(reason), version);
    let resp = conn.request_at::<LeaveGroup>(&req, version).await?;
    let view = leave_group::view(&resp);
    // UNKNOWN_MEMBER_ID: the coordinator had dropped the member already; nothing to leave.
    let code = std::iter::once(view.error)
        .chain(view.members.iter().map(|m| m.2))
        .find(|c| c.err().is_some() && *c != ErrorCode::UNKNOWN_MEMBER_ID);
    match code {
        Some(code) => Err(fault_error(
            group,
            conn.broker().clone(),
            LeaveGroup::KEY,
            Fault { code, detail: None },
        )),
        None => {
            tracing::info!(group, member = member_id, "left the group");
            Ok(())
        }
    }
}

/// The heartbeat task: every `heartbeat.interval.ms` while the member is in a generation and
/// not joining. Ends when the member is dropped.
async fn heartbeats(inner: std::sync::Weak<Inner>) {
    loop {
        let interval = match inner.upgrade() {
            Some(i) => lock(&i.state).config().heartbeat_interval,
            None => return,
        };
        tokio::time::sleep(interval).await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.joining.load(Ordering::SeqCst) {
            continue;
        }
        let config = lock(&inner.state).config().clone();
        let Some(generation) = lock(&inner.state).generation() else {
            continue;
        };
        let held = *lock(&inner.holding_since);
        if held.is_some_and(|since| since.elapsed() > config.max_poll_interval) {
            lock(&inner.state).poll_expired();
            inner.wake();
            tracing::warn!(
                group = config.group.as_str(),
                member = generation.member_id.as_str(),
                "a batch was held longer than max.poll.interval.ms ({} ms): leaving the group; \
                 its commit will be refused",
                config.max_poll_interval.as_millis()
            );
            if generation.instance_id.is_none() {
                if let Err(e) = send_leave(
                    &inner,
                    &config.group,
                    &generation.member_id,
                    "max.poll.interval.ms exceeded",
                )
                .await
                {
                    tracing::warn!(group = config.group.as_str(), "LeaveGroup failed: {e}");
                }
            }
            continue;
        }
        let silent = lock(&inner.last_answer).elapsed();
        if silent > config.session_timeout {
            lock(&inner.state).lose(format!(
                "no heartbeat was answered for session.timeout.ms ({} ms)",
                config.session_timeout.as_millis()
            ));
            inner.wake();
            continue;
        }
        let conn = match coordinator(&inner).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(
                    group = config.group.as_str(),
                    "heartbeat: no coordinator: {e}"
                );
                continue;
            }
        };
        let version = match conn.version::<Heartbeat>() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(group = config.group.as_str(), "heartbeat: {e}");
                continue;
            }
        };
        let req = heartbeat::request(
            &config.group,
            generation.generation_id,
            &generation.member_id,
            generation.instance_id.as_deref(),
            version,
        );
        let code = match conn.request_at::<Heartbeat>(&req, version).await {
            Ok(resp) => heartbeat::view(&resp),
            Err(e) => {
                tracing::debug!(group = config.group.as_str(), "heartbeat failed: {e}");
                *inner.coordinator.lock().await = None;
                continue;
            }
        };
        // An answer for a generation the member has left meanwhile says nothing.
        if inner.joining.load(Ordering::SeqCst)
            || lock(&inner.state).generation().as_ref() != Some(&generation)
        {
            continue;
        }
        let beat = lock(&inner.state).on_heartbeat(code);
        match beat {
            Ok(Beat::Alive) => *lock(&inner.last_answer) = Instant::now(),
            Ok(Beat::Rejoin) => {
                *lock(&inner.last_answer) = Instant::now();
                tracing::info!(
                    group = config.group.as_str(),
                    "the group is rebalancing: rejoining after this batch"
                );
                inner.wake();
            }
            Ok(Beat::Lost) => {
                tracing::warn!(
                    group = config.group.as_str(),
                    member = generation.member_id.as_str(),
                    "lost the group's generation {} ({code}): rejoining after this batch",
                    generation.generation_id
                );
                inner.wake();
            }
            Ok(Beat::FindCoordinator) => *inner.coordinator.lock().await = None,
            Err(f) => {
                *lock(&inner.fatal) = Some((Heartbeat::KEY, conn.broker().clone(), f));
                inner.wake();
            }
        }
    }
}
