//! The driver of a [`ConsumerMembership`] (KIP-848): the coordinator connection
//! ([`Coordinator`]) and the heartbeat task. [`ConsumerMember::join`] is what the stream calls between batches, as for
//! the classic protocol: the first time it joins (epoch 0, the full heartbeat); later it
//! reconciles the target assignment the heartbeats brought (names the topic ids through a
//! Metadata refresh, gives up what the target leaves out, takes the rest) and acknowledges the
//! result at once with a heartbeat, so that the coordinator can hand the given-up partitions
//! on without waiting for the heartbeat interval.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use kdirect_proto::api::consumer_group_heartbeat::{self, ConsumerGroupHeartbeat, HeartbeatParams};
use kdirect_proto::message::Api;
use kdirect_proto::{ErrorCode, ProtoError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::state::{Beat, ConsumerMembership, NextHeartbeat, TopicId};
use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::group::common::{code_error, fault_error, lock, Fault, Generation, Joined, State, Tick};
use crate::group::coordinator::{Attempt, Coordinator};
use crate::group::GroupConfig;
use crate::plan::TopicPartition;

/// A member of a KIP-848 consumer group: see the module docs. Dropping it stops its
/// heartbeats; call [`leave`](Self::leave) first to hand its partitions over at once.
#[derive(Debug)]
pub struct ConsumerMember {
    inner: Arc<Inner>,
    heartbeat: JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<ConsumerMembership>,
    coordinator: Coordinator,
    /// One heartbeat at a time (the join's and the task's), in the order they are built.
    beating: tokio::sync::Mutex<()>,
    /// Bumped whenever the member comes to need the stream's join (a target assignment to
    /// reconcile, lost partitions, a fatal answer).
    changed: watch::Sender<u64>,
    /// An answer no rejoin fixes.
    fatal: Mutex<Option<(BrokerName, Fault)>>,
}

impl Inner {
    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn group(&self) -> String {
        lock(&self.state).config().group.clone()
    }
}

/// A fresh member id (KIP-1082: the client's own, a random UUID, in its usual text form).
fn new_member_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

impl ConsumerMember {
    /// A member of `config.group` on `cluster`; it joins on the first [`join`](Self::join).
    /// Starts the heartbeat task (on [`crate::io::handle`]: it beats while the caller's thread
    /// is busy with a batch, even on a current-thread runtime).
    pub fn new(cluster: Arc<Cluster>, config: GroupConfig) -> Result<ConsumerMember, Error> {
        config.validate().map_err(ErrorKind::Config)?;
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            coordinator: Coordinator::new(cluster, &config.group),
            state: Mutex::new(ConsumerMembership::new(config, new_member_id())),
            beating: tokio::sync::Mutex::new(()),
            changed,
            fatal: Mutex::new(None),
        });
        let heartbeat = crate::io::spawn(heartbeats(Arc::downgrade(&inner)));
        Ok(ConsumerMember { inner, heartbeat })
    }

    /// The settings.
    pub fn config(&self) -> GroupConfig {
        lock(&self.inner.state).config().clone()
    }

    /// Whether the stream must call [`join`](Self::join) before it reads on.
    pub fn needs_join(&self) -> bool {
        lock(&self.inner.state).needs_join()
    }

    /// Resolves once the member needs the stream's join (at once if it does already).
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

    /// The identity to commit under (the member epoch), while the member owns its partitions.
    pub fn generation(&self) -> Option<Generation> {
        lock(&self.inner.state).generation()
    }

    /// Why the member lost its partitions, if it did.
    pub fn lost(&self) -> Option<String> {
        match lock(&self.inner.state).state() {
            State::Lost(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// The member lost its partitions (a store refused its commit as fenced): the next batch
    /// rejoins with epoch 0.
    pub fn lose(&self, reason: impl Into<String>) {
        lock(&self.inner.state).lose(reason);
        self.inner.wake();
    }

    /// The member id.
    pub fn member_id(&self) -> String {
        lock(&self.inner.state).member_id().to_owned()
    }

    /// The partitions owned (reconciled).
    pub fn assigned(&self) -> BTreeSet<TopicPartition> {
        lock(&self.inner.state).assigned()
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
        let group = self.inner.group();
        lock(&self.inner.fatal).as_ref().map(|(broker, f)| {
            fault_error(
                &group,
                broker.clone(),
                ConsumerGroupHeartbeat::KEY,
                f.clone(),
            )
        })
    }

    /// Joins (epoch 0) if the member is not in the group, subscribing to `topics`, then
    /// reconciles the target assignment and acknowledges it. Coordinator errors and lost
    /// connections are retried with backoff for `default.api.timeout.ms`.
    pub async fn join(&self, topics: &[String]) -> Result<Joined, Error> {
        if let Some(e) = self.fatal() {
            return Err(e);
        }
        let inner = &self.inner;
        let group = inner.group();
        lock(&inner.state).subscribe(topics);
        if !lock(&inner.state).in_group() {
            let group = group.as_str();
            inner
                .coordinator
                .retry(
                    "joining the group",
                    |e| e,
                    |conn| async move {
                        match beat_on(inner, &conn).await {
                            Ok(_) if lock(&inner.state).in_group() => Ok(()),
                            // Lost at epoch 0 (the coordinator forgot the member as it joined):
                            // again, with backoff.
                            Ok(b) => Err(Attempt::Retry(Error::from(ErrorKind::Task {
                                what: "joining the group",
                                reason: format!(
                                    "group '{group}': the join heartbeat's answer meant {b:?}"
                                ),
                            }))),
                            // Coordinator errors (retriable codes) and lost connections retry.
                            Err(e) => Err(Attempt::of(e)),
                        }
                    },
                )
                .await?;
        }
        if lock(&inner.state).next_heartbeat().topics.is_some() {
            // A changed subscription: tell the coordinator now, not at the next interval.
            if let Err(e) = beat(inner).await {
                tracing::debug!(group = group.as_str(), "subscription heartbeat: {e}");
            }
        }
        // Name the target's topic ids (the subscribed topics' metadata).
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let view = inner.coordinator.cluster().refresh(Some(&names)).await?;
        let ids: BTreeMap<TopicId, String> = view
            .topics
            .values()
            .filter(|t| t.error.is_ok() && t.id != [0; 16])
            .map(|t| (t.id, t.name.clone()))
            .collect();
        let r = lock(&inner.state).reconcile(&ids);
        if r.unresolved > 0 {
            tracing::info!(
                group = group.as_str(),
                "{} assigned topic ids are not in the metadata yet: taken once they are",
                r.unresolved
            );
        }
        if !r.revoked.is_empty() || !r.added.is_empty() {
            // Acknowledge at once; a failure here is the heartbeat task's to retry.
            if let Err(e) = beat(inner).await {
                tracing::debug!(group = group.as_str(), "acknowledging heartbeat: {e}");
            }
        }
        let s = lock(&inner.state);
        let joined = Joined {
            generation_id: s.epoch(),
            member_id: s.member_id().to_owned(),
            leader: false,
            assignor: s.config().remote_assignor.clone().unwrap_or_default(),
            partitions: r.partitions,
        };
        tracing::info!(
            group = group.as_str(),
            epoch = joined.generation_id,
            member = joined.member_id.as_str(),
            "reconciled: {} partitions ({} given up, {} taken)",
            joined.partitions.len(),
            r.revoked.len(),
            r.added.len()
        );
        Ok(joined)
    }

    /// Leaves the group (a heartbeat with epoch -1, or -2 for a static member, whose
    /// partitions then wait for it for the session timeout).
    pub async fn leave(&self) -> Result<(), Error> {
        let hb = lock(&self.inner.state).leave();
        self.inner.wake();
        let Some(hb) = hb else { return Ok(()) };
        send_leave(&self.inner, &hb).await
    }
}

impl Drop for ConsumerMember {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// The negotiated version, or one clear line for a broker without the consumer protocol.
fn version(inner: &Inner, conn: &BrokerConnection) -> Result<i16, Error> {
    let ours = ConsumerGroupHeartbeat::VERSIONS;
    conn.versions()
        .negotiate::<ConsumerGroupHeartbeat>()
        .map_err(|e| {
            let offered = match e {
                ProtoError::NoCommonVersion {
                    theirs: Some(t), ..
                } => format!("offers ConsumerGroupHeartbeat {t}, kdirect speaks {ours}"),
                _ => "does not offer ConsumerGroupHeartbeat (KIP-848)".to_owned(),
            };
            ErrorKind::Group {
                group: inner.group(),
                broker: conn.broker().clone(),
                api: ConsumerGroupHeartbeat::KEY,
                code: ErrorCode::UNSUPPORTED_VERSION,
                message: Some(format!(
                    "the broker {offered}: group.protocol=consumer needs Kafka 4.0 or later; use \
                 group.protocol=classic"
                )),
            }
            .into()
        })
}

fn params<'a>(group: &'a str, hb: &'a NextHeartbeat, member_id: &'a str) -> HeartbeatParams<'a> {
    HeartbeatParams {
        group,
        member_id,
        member_epoch: hb.member_epoch,
        instance_id: hb.instance_id.as_deref(),
        rack_id: hb.rack_id.as_deref(),
        rebalance_timeout_ms: hb.rebalance_timeout_ms,
        topics: hb.topics.as_deref(),
        server_assignor: hb.server_assignor.as_deref(),
        owned: hb.owned.as_deref(),
    }
}

/// Sends the next heartbeat and reads its answer into the state. A fatal answer is kept for
/// [`ConsumerMember::fatal`] and returned as an error; a coordinator error or a transient
/// code is returned as a retriable [`ErrorKind::Broker`] error.
async fn beat(inner: &Inner) -> Result<Beat, Error> {
    let conn = inner.coordinator.connection().await?;
    beat_on(inner, &conn).await
}

/// [`beat`] on `conn`, the coordinator's connection.
async fn beat_on(inner: &Inner, conn: &BrokerConnection) -> Result<Beat, Error> {
    let _one = inner.beating.lock().await;
    let group = inner.group();
    let version = version(inner, conn)?;
    let (hb, member_id) = {
        let s = lock(&inner.state);
        let hb = s.next_heartbeat();
        // v0: the coordinator hands the member id out on the first join.
        let id = if version == 0 && !s.id_confirmed() {
            String::new()
        } else {
            hb.member_id.clone()
        };
        (hb, id)
    };
    let req = consumer_group_heartbeat::request(&params(&group, &hb, &member_id), version);
    let resp = match conn
        .request_at::<ConsumerGroupHeartbeat>(&req, version)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            lock(&inner.state).heartbeat_failed();
            inner.coordinator.forget().await;
            return Err(e);
        }
    };
    let view = consumer_group_heartbeat::view(&resp);
    let step = lock(&inner.state).on_heartbeat(&hb, &view);
    match step {
        Ok(b) => {
            if !matches!(b, Beat::FindCoordinator | Beat::Retry) {
                lock(&inner.state).answered(Instant::now());
            }
            match b {
                Beat::Reconcile => inner.wake(),
                Beat::Lost => {
                    tracing::warn!(
                        group = group.as_str(),
                        member = hb.member_id.as_str(),
                        "lost the partitions ({}): rejoining after this batch",
                        view.error
                    );
                    inner.wake();
                }
                Beat::FindCoordinator | Beat::Retry => {
                    if b == Beat::FindCoordinator {
                        inner.coordinator.forget().await;
                    }
                    // A coordinator error or a transient code: retriable.
                    return Err(code_error(
                        conn.broker(),
                        ConsumerGroupHeartbeat::KEY,
                        view.error,
                    ));
                }
                Beat::Alive => {}
            }
            Ok(b)
        }
        Err(f) => {
            let e = fault_error(
                &group,
                conn.broker().clone(),
                ConsumerGroupHeartbeat::KEY,
                f.clone(),
            );
            *lock(&inner.fatal) = Some((conn.broker().clone(), f));
            inner.wake();
            Err(e)
        }
    }
}

async fn send_leave(inner: &Inner, hb: &NextHeartbeat) -> Result<(), Error> {
    let _one = inner.beating.lock().await;
    let group = inner.group();
    let conn = inner.coordinator.connection().await?;
    let version = version(inner, &conn)?;
    let req = consumer_group_heartbeat::request(&params(&group, hb, &hb.member_id), version);
    let resp = conn
        .request_at::<ConsumerGroupHeartbeat>(&req, version)
        .await?;
    let view = consumer_group_heartbeat::view(&resp);
    // UNKNOWN_MEMBER_ID: the coordinator had dropped the member already.
    match view.error.err() {
        Some(code) if code != ErrorCode::UNKNOWN_MEMBER_ID && code.0 != 110 => Err(fault_error(
            &group,
            conn.broker().clone(),
            ConsumerGroupHeartbeat::KEY,
            Fault {
                code,
                detail: view.message,
            },
        )),
        _ => {
            tracing::info!(
                group = group.as_str(),
                member = hb.member_id.as_str(),
                epoch = hb.member_epoch,
                "left the group"
            );
            Ok(())
        }
    }
}

/// The heartbeat task: every heartbeat interval (the coordinator's) while the member is in the
/// group; applies `max.poll.interval.ms`. Ends when the member is dropped.
async fn heartbeats(inner: Weak<Inner>) {
    let mut last_beat = Instant::now();
    loop {
        let (interval, max_poll) = match inner.upgrade() {
            Some(i) => {
                let s = lock(&i.state);
                (s.interval(), s.config().max_poll_interval)
            }
            None => return,
        };
        // The coordinator's interval can be far longer than max.poll.interval.ms allows a
        // batch to be held past its end: look at the batch more often than heartbeats go.
        let tick = interval.min((max_poll / 4).max(Duration::from_millis(100)));
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        let (in_group, config) = {
            let s = lock(&inner.state);
            (s.in_group(), s.config().clone())
        };
        if !in_group {
            continue;
        }
        let tick = lock(&inner.state).tick(Instant::now());
        match tick {
            Tick::Alive => {}
            Tick::PollExpired { leave } => {
                inner.wake();
                if let Some(hb) = leave {
                    tracing::warn!(
                        group = config.group.as_str(),
                        member = hb.member_id.as_str(),
                        "a batch was held longer than max.poll.interval.ms ({} ms): leaving \
                         the group; its commit will be refused",
                        config.max_poll_interval.as_millis()
                    );
                    if let Err(e) = send_leave(&inner, &hb).await {
                        tracing::warn!(group = config.group.as_str(), "leaving heartbeat: {e}");
                    }
                }
                continue;
            }
            Tick::SessionExpired(_) => {
                inner.wake();
                continue;
            }
        }
        if last_beat.elapsed() < interval {
            continue;
        }
        last_beat = Instant::now();
        if let Err(e) = beat(&inner).await {
            tracing::debug!(group = config.group.as_str(), "heartbeat: {e}");
        }
    }
}
