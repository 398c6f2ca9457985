//! The driver of a [`Membership`]: the coordinator connection ([`Coordinator`]), the join/sync
//! loop and the heartbeat task. The stream calls [`ClassicMember::join`] between batches, tells
//! the member when it hands a batch out and when it is asked for the next one (the
//! `max.poll.interval.ms` clock, which the state machine reads), and asks
//! [`ClassicMember::generation`] for the identity to commit under.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
use super::state::{Beat, JoinStep, Membership, SyncStep};
use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::group::common::{
    code_error, fault_error, lock, millis, Fault, Generation, Joined, State, Tick,
};
use crate::group::coordinator::{Attempt, Coordinator};
use crate::group::GroupConfig;
use crate::plan::TopicPartition;

/// A member of a consumer group speaking the classic protocol: see the module docs. Dropping
/// it stops its heartbeats; call [`leave`](Self::leave) first to hand its partitions over at
/// once. [`GroupMember`](crate::group::GroupMember) is this or a KIP-848 member.
#[derive(Debug)]
pub struct ClassicMember {
    inner: Arc<Inner>,
    heartbeat: JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<Membership>,
    coordinator: Coordinator,
    /// Bumped whenever the member comes to need a rejoin (a rebalance, a lost generation).
    changed: watch::Sender<u64>,
    /// A JoinGroup/SyncGroup round is in progress: no heartbeats.
    joining: AtomicBool,
    /// A heartbeat answer no rejoin fixes (FENCED_INSTANCE_ID, an authorization failure).
    fatal: Mutex<Option<(ApiKey, BrokerName, Fault)>>,
}

impl Inner {
    /// Tells whoever waits in [`ClassicMember::join_needed`] to look again.
    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

impl ClassicMember {
    /// A member of `config.group` on `cluster`; it joins on the first [`join`](Self::join).
    /// Starts the heartbeat task (on [`crate::io::handle`]: it beats while the caller's thread
    /// is busy with a batch, even on a current-thread runtime).
    pub fn new(cluster: Arc<Cluster>, config: GroupConfig) -> Result<ClassicMember, Error> {
        config.validate().map_err(ErrorKind::Config)?;
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            coordinator: Coordinator::new(cluster, &config.group),
            state: Mutex::new(Membership::new(config)),
            changed,
            joining: AtomicBool::new(false),
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
        lock(&self.inner.state).handed_out(Instant::now());
    }

    /// The user asked for the next batch: it holds none.
    pub fn polling(&self) {
        lock(&self.inner.state).polling();
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
        inner
            .coordinator
            .retry(
                "joining the group",
                |e| e,
                |conn| self.join_round(conn, topics),
            )
            .await
    }

    /// JoinGroup and SyncGroup on `conn` until the member has its partitions (again at once
    /// when the coordinator hands out a member id, asks for a rejoin, or a cooperative member
    /// gave partitions up); a coordinator that moved or a lost connection is the retry's.
    async fn join_round(
        &self,
        conn: BrokerConnection,
        topics: &[String],
    ) -> Result<Joined, Attempt<Error>> {
        let inner = &self.inner;
        let config = self.config();
        let broker = conn.broker().clone();
        // The coordinator holds JoinGroup until every member rejoined, up to the rebalance
        // timeout.
        let wait = config.max_poll_interval + Duration::from_secs(5);
        loop {
            let (protocols, member_id) = {
                let s = lock(&inner.state);
                (
                    s.protocols(topics)
                        .map_err(|e| Attempt::Fatal(ErrorKind::Config(e).into()))?,
                    s.member_id().to_owned(),
                )
            };
            let version = conn.version::<JoinGroup>().map_err(Attempt::of)?;
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
            let resp = conn
                .request_within::<JoinGroup>(&join_group::request(&params, version), version, wait)
                .await
                .map_err(Attempt::of)?;
            let view = join_group::view(&resp);
            let step = lock(&inner.state).on_join(&view).map_err(|f| {
                Attempt::Fatal(fault_error(
                    &config.group,
                    broker.clone(),
                    JoinGroup::KEY,
                    f,
                ))
            })?;
            let assignments = match step {
                JoinStep::Again => continue,
                JoinStep::FindCoordinator(code) => {
                    return Err(Attempt::Retry(code_error(&broker, JoinGroup::KEY, code)))
                }
                JoinStep::Follow => Vec::new(),
                JoinStep::Lead { assignor, members } => {
                    let wanted: BTreeSet<&str> = members
                        .iter()
                        .flat_map(|m| m.topics.iter().map(String::as_str))
                        .collect();
                    let wanted: Vec<&str> = wanted.into_iter().collect();
                    let view = inner
                        .coordinator
                        .cluster()
                        .refresh(Some(&wanted))
                        .await
                        .map_err(Attempt::of)?;
                    let counts: BTreeMap<String, i32> = wanted
                        .iter()
                        .filter_map(|t| {
                            let info = view.topic(t).ok()?;
                            Some(((*t).to_owned(), info.partitions.len() as i32))
                        })
                        .collect();
                    let out = lock(&inner.state)
                        .assignments(assignor, &members, &counts)
                        .map_err(|e| Attempt::Fatal(ErrorKind::Config(e).into()))?;
                    tracing::info!(
                        group = config.group.as_str(),
                        generation = lock(&inner.state).generation_id(),
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
            let version = conn.version::<SyncGroup>().map_err(Attempt::of)?;
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
            let resp = conn
                .request_within::<SyncGroup>(&req, version, wait)
                .await
                .map_err(Attempt::of)?;
            let view = sync_group::view(&resp);
            let step = lock(&inner.state).on_sync(&view).map_err(|f| {
                Attempt::Fatal(fault_error(
                    &config.group,
                    broker.clone(),
                    SyncGroup::KEY,
                    f,
                ))
            })?;
            match step {
                SyncStep::Rejoin => continue,
                SyncStep::FindCoordinator(code) => {
                    return Err(Attempt::Retry(code_error(&broker, SyncGroup::KEY, code)))
                }
                SyncStep::Assigned(partitions) => {
                    let mut s = lock(&inner.state);
                    s.answered(Instant::now());
                    if s.needs_join() {
                        // Cooperative: partitions were revoked; join again at once so the
                        // leader can hand them on.
                        tracing::info!(
                            group = config.group.as_str(),
                            "revoked partitions: joining again to hand them on"
                        );
                        s.start_join();
                        continue;
                    }
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

async fn send_leave(
    inner: &Inner,
    group: &str,
    member_id: &str,
    reason: &str,
) -> Result<(), Error> {
    let conn = inner.coordinator.connection().await?;
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
        let tick = lock(&inner.state).tick(Instant::now());
        match tick {
            Tick::Alive => {}
            Tick::PollExpired { leave } => {
                inner.wake();
                tracing::warn!(
                    group = config.group.as_str(),
                    member = generation.member_id.as_str(),
                    "a batch was held longer than max.poll.interval.ms ({} ms): leaving the \
                     group; its commit will be refused",
                    config.max_poll_interval.as_millis()
                );
                if let Some(g) = leave {
                    let why = "max.poll.interval.ms exceeded";
                    if let Err(e) = send_leave(&inner, &config.group, &g.member_id, why).await {
                        tracing::warn!(group = config.group.as_str(), "LeaveGroup failed: {e}");
                    }
                }
                continue;
            }
            Tick::SessionExpired(_) => {
                inner.wake();
                continue;
            }
        }
        let conn = match inner.coordinator.connection().await {
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
                inner.coordinator.forget().await;
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
            Ok(Beat::Alive) => lock(&inner.state).answered(Instant::now()),
            Ok(Beat::Rejoin) => {
                lock(&inner.state).answered(Instant::now());
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
            Ok(Beat::FindCoordinator) => inner.coordinator.forget().await,
            Err(f) => {
                *lock(&inner.fatal) = Some((Heartbeat::KEY, conn.broker().clone(), f));
                inner.wake();
            }
        }
    }
}
