//! The classic protocol's exchanges with the coordinator ([`Classic`], a [`Protocol`] for the
//! one member [`Driver`]): the JoinGroup/SyncGroup round (the leader computes everyone's
//! partitions), one Heartbeat, and LeaveGroup. The stream calls [`ClassicMember::join`] between
//! batches; the driver's heartbeat task does the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_proto::api::heartbeat::{self, Heartbeat};
use kdirect_proto::api::join_group::{self, JoinGroup, JoinParams};
use kdirect_proto::api::leave_group::{self, LeaveGroup};
use kdirect_proto::api::sync_group::{self, SyncGroup};
use kdirect_proto::message::Api;
use kdirect_proto::ErrorCode;

use super::assignor::Assignor;
use super::state::{Beat, JoinStep, Membership, SyncStep};
use crate::conn::BrokerConnection;
use crate::error::{Error, ErrorKind};
use crate::group::common::{code_error, fault_error, lock, millis, Fault, Generation, Joined};
use crate::group::coordinator::Attempt;
use crate::group::driver::{Driver, Member, MemberState, Protocol};
use crate::group::GroupConfig;

/// The classic protocol's exchanges with the coordinator, for the one [`Driver`].
#[derive(Debug)]
pub struct Classic;

/// A member of a consumer group speaking the classic protocol: see the module docs.
/// [`GroupMember`](crate::group::GroupMember) is this or a KIP-848 member.
pub type ClassicMember = Member<Classic>;

impl Protocol for Classic {
    type State = Membership;

    fn new_state(config: GroupConfig) -> Membership {
        Membership::new(config)
    }

    /// Joins the group subscribing to `topics` (JoinGroup, then SyncGroup; the leader computes
    /// the assignment from every member's subscription and the metadata), giving up whatever
    /// it owned first (eager) or what the new assignment leaves out (cooperative). The
    /// exchange is held for the whole round: no heartbeat goes meanwhile.
    async fn join(d: &Driver<Classic>, topics: &[String]) -> Result<Joined, Error> {
        let _one = d.exchange.lock().await;
        lock(&d.state).start_join();
        d.coordinator
            .retry(
                "joining the group",
                |e| e,
                |conn| join_round(d, conn, topics),
            )
            .await
    }

    async fn heartbeat(d: &Driver<Classic>) {
        heartbeat(d).await;
    }

    async fn leave(
        d: &Driver<Classic>,
        leave: Generation,
        reason: &'static str,
    ) -> Result<(), Error> {
        send_leave(d, &leave.member_id, reason).await
    }
}

/// JoinGroup and SyncGroup on `conn` until the member has its partitions (again at once
/// when the coordinator hands out a member id, asks for a rejoin, or a cooperative member
/// gave partitions up); a coordinator that moved or a lost connection is the retry's.
async fn join_round(
    inner: &Driver<Classic>,
    conn: BrokerConnection,
    topics: &[String],
) -> Result<Joined, Attempt<Error>> {
    let config = lock(&inner.state).config().clone();
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

/// LeaveGroup for `member_id`, with `reason` (KIP-800).
async fn send_leave(inner: &Driver<Classic>, member_id: &str, reason: &str) -> Result<(), Error> {
    let group = inner.group();
    let group = group.as_str();
    let conn = inner.coordinator.connection().await?;
    let _one = inner.exchange.lock().await;
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

/// One Heartbeat for the member's generation (skipped if a join holds the exchange), its answer read into the
/// state: a rebalance or a lost generation wakes the stream, an answer no rejoin fixes is kept.
async fn heartbeat(inner: &Driver<Classic>) {
    let (group, generation) = {
        let s = lock(&inner.state);
        (s.config().group.clone(), s.generation())
    };
    let Some(generation) = generation else { return };
    let group = group.as_str();
    let conn = match inner.coordinator.connection().await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(group, "heartbeat: no coordinator: {e}");
            return;
        }
    };
    let Ok(_one) = inner.exchange.try_lock() else {
        return;
    };
    let version = match conn.version::<Heartbeat>() {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(group, "heartbeat: {e}");
            return;
        }
    };
    let req = heartbeat::request(
        group,
        generation.generation_id,
        &generation.member_id,
        generation.instance_id.as_deref(),
        version,
    );
    let code = match conn.request_at::<Heartbeat>(&req, version).await {
        Ok(resp) => heartbeat::view(&resp),
        Err(e) => {
            tracing::debug!(group, "heartbeat failed: {e}");
            inner.coordinator.forget().await;
            return;
        }
    };
    // An answer for a generation the member has left meanwhile (a store found it fenced)
    // says nothing.
    if lock(&inner.state).generation().as_ref() != Some(&generation) {
        return;
    }
    let beat = lock(&inner.state).on_heartbeat(code);
    match beat {
        Ok(Beat::Alive) => lock(&inner.state).answered(Instant::now()),
        Ok(Beat::Rejoin) => {
            lock(&inner.state).answered(Instant::now());
            tracing::info!(
                group,
                "the group is rebalancing: rejoining after this batch"
            );
            inner.wake();
        }
        Ok(Beat::Lost) => {
            tracing::warn!(
                group,
                member = generation.member_id.as_str(),
                "lost the group's generation {} ({code}): rejoining after this batch",
                generation.generation_id
            );
            inner.wake();
        }
        Ok(Beat::FindCoordinator) => inner.coordinator.forget().await,
        Err(f) => {
            inner.fail(Heartbeat::KEY, conn.broker(), f);
        }
    }
}
