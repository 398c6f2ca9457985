//! KIP-848's exchanges with the coordinator ([`Kip848`], a [`Protocol`] for the one member
//! [`Driver`]). [`ConsumerMember::join`] is what the stream calls between batches, as for the
//! classic protocol: the first time it joins (epoch 0, the full heartbeat); later it reconciles
//! the target assignment the heartbeats brought (names the topic ids through a Metadata
//! refresh, gives up what the target leaves out, takes the rest) and acknowledges the result at
//! once with a heartbeat, so that the coordinator can hand the given-up partitions on without
//! waiting for the heartbeat interval.

use std::collections::BTreeMap;
use std::time::Instant;

use kdirect_proto::api::consumer_group_heartbeat::{self, ConsumerGroupHeartbeat, HeartbeatParams};
use kdirect_proto::message::Api;
use kdirect_proto::{ErrorCode, ProtoError};

use super::state::{Beat, ConsumerMembership, NextHeartbeat, TopicId};
use crate::conn::BrokerConnection;
use crate::error::{Error, ErrorKind};
use crate::group::common::{code_error, fault_error, lock, Fault, Joined};
use crate::group::coordinator::Attempt;
use crate::group::driver::{Driver, Member, MemberState, Protocol};
use crate::group::GroupConfig;

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

/// KIP-848's exchanges with the coordinator, for the one [`Driver`].
#[derive(Debug)]
pub struct Kip848;

/// A member of a KIP-848 consumer group: see the module docs.
pub type ConsumerMember = Member<Kip848>;

impl Protocol for Kip848 {
    type State = ConsumerMembership;

    fn new_state(config: GroupConfig) -> ConsumerMembership {
        ConsumerMembership::new(config, new_member_id())
    }

    /// Joins (epoch 0) if the member is not in the group, subscribing to `topics`, then
    /// reconciles the target assignment and acknowledges it. Coordinator errors and lost
    /// connections are retried with backoff for `default.api.timeout.ms`.
    async fn join(inner: &Driver<Kip848>, topics: &[String]) -> Result<Joined, Error> {
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

    async fn heartbeat(inner: &Driver<Kip848>) {
        if let Err(e) = beat(inner).await {
            tracing::debug!(group = inner.group().as_str(), "heartbeat: {e}");
        }
    }

    /// The leaving heartbeat (epoch -1, or -2 for a static member closing, whose partitions
    /// then wait for it for the session timeout).
    async fn leave(
        inner: &Driver<Kip848>,
        hb: NextHeartbeat,
        reason: &'static str,
    ) -> Result<(), Error> {
        send_leave(inner, &hb, reason).await
    }
}

/// The negotiated version, or one clear line for a broker without the consumer protocol.
fn version(inner: &Driver<Kip848>, conn: &BrokerConnection) -> Result<i16, Error> {
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
async fn beat(inner: &Driver<Kip848>) -> Result<Beat, Error> {
    let conn = inner.coordinator.connection().await?;
    beat_on(inner, &conn).await
}

/// [`beat`] on `conn`, the coordinator's connection.
async fn beat_on(inner: &Driver<Kip848>, conn: &BrokerConnection) -> Result<Beat, Error> {
    let _one = inner.exchange.lock().await;
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
        Err(f) => Err(inner.fail(ConsumerGroupHeartbeat::KEY, conn.broker(), f)),
    }
}

/// Sends the leaving heartbeat `hb`, for `reason` (logged: the heartbeat has no field for it).
async fn send_leave(inner: &Driver<Kip848>, hb: &NextHeartbeat, reason: &str) -> Result<(), Error> {
    let group = inner.group();
    let conn = inner.coordinator.connection().await?;
    let _one = inner.exchange.lock().await;
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
                "left the group: {reason}"
            );
            Ok(())
        }
    }
}
