//! The member's side of KIP-848's consumer group protocol (`group.protocol=consumer`) as a pure
//! state machine: which heartbeat to send next, what an answer means and when its clocks
//! expire, without sockets or a clock of its own (the time is passed in; the driver in
//! [`super::driver`] owns the connection and the timer).
//!
//! The coordinator computes the assignment (its `uniform` or `range` assignor) and hands each
//! member its *target* by topic id in a ConsumerGroupHeartbeat answer. The member reconciles:
//! it gives up the partitions the target leaves out and takes the new ones — here only when the
//! stream asks, between batches ([`ConsumerMembership::reconcile`]) — and acknowledges what it
//! owns in its next heartbeat (`topic_partitions`); the coordinator hands a partition to a new
//! owner only once the old one acknowledged giving it up. Partitions the member keeps are never
//! given up, as with KIP-429's cooperative protocol.
//!
//! The member epoch is the identity commits are made under (OffsetCommit v9's
//! `generation_id_or_member_epoch`). A member joins with epoch 0 and the full heartbeat; later
//! heartbeats carry only what changed (null fields mean "unchanged"), and the next one after
//! any failed or unanswered heartbeat is full again. UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH
//! mean the member lost its partitions: it rejoins with epoch 0 (keeping its member id, as the
//! Java client does). A member leaves with epoch -1, a static one (`group.instance.id`) with
//! -2 so that its partitions wait for it; a batch held past `max.poll.interval.ms` leaves with
//! -1 even when static, so that the partitions move on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kdirect_proto::api::consumer_group_heartbeat::{
    HeartbeatView, JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH,
};
use kdirect_proto::ErrorCode;

use crate::group::common::{Expired, Fault, Generation, Liveness, State, Tick};
use crate::group::driver::MemberState;
use crate::group::GroupConfig;
use crate::plan::TopicPartition;

/// The heartbeat interval until the coordinator says (its default,
/// `group.consumer.heartbeat.interval.ms`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// A topic id, as Metadata and ConsumerGroupHeartbeat carry it.
pub type TopicId = [u8; 16];

/// The owned heartbeat to send: the fields of
/// [`HeartbeatParams`](kdirect_proto::api::consumer_group_heartbeat::HeartbeatParams), owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHeartbeat {
    /// The member id.
    pub member_id: String,
    /// The member epoch.
    pub member_epoch: i32,
    /// Whether every field is sent (a join, or after a failed heartbeat).
    pub full: bool,
    /// `group.instance.id` (full heartbeats).
    pub instance_id: Option<String>,
    /// `client.rack` (full heartbeats).
    pub rack_id: Option<String>,
    /// `max.poll.interval.ms` (full heartbeats; -1 otherwise).
    pub rebalance_timeout_ms: i32,
    /// The subscription, when full or changed.
    pub topics: Option<Vec<String>>,
    /// `group.remote.assignor` (full heartbeats).
    pub server_assignor: Option<String>,
    /// The partitions owned, when full or changed.
    pub owned: Option<Vec<(TopicId, Vec<i32>)>>,
}

/// What a heartbeat answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// Still a member; nothing to do.
    Alive,
    /// A new target assignment: reconcile at the next batch boundary.
    Reconcile,
    /// The member lost its partitions (fenced, or forgotten): rejoin with epoch 0.
    Lost,
    /// The coordinator moved or is unavailable: look it up again, then send a full heartbeat.
    FindCoordinator,
    /// A transient error: send a full heartbeat again after the interval.
    Retry,
}

/// The outcome of a reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The partitions the member owns now.
    pub partitions: BTreeSet<TopicPartition>,
    /// The ones it gave up.
    pub revoked: BTreeSet<TopicPartition>,
    /// The ones it took.
    pub added: BTreeSet<TopicPartition>,
    /// Target topic ids the metadata did not name (taken once it does: each heartbeat asks
    /// for a reconciliation again while one is left).
    pub unresolved: usize,
}

/// One member's view of its KIP-848 group.
#[derive(Debug, Clone)]
pub struct ConsumerMembership {
    config: GroupConfig,
    member_id: String,
    epoch: i32,
    state: State,
    /// The partitions the stream reads (reconciled), with their topic ids.
    owned: BTreeMap<TopicPartition, TopicId>,
    /// The last target assignment the coordinator gave.
    target: Vec<(TopicId, Vec<i32>)>,
    /// The subscription.
    topics: Vec<String>,
    /// What the last answered heartbeat carried (`None`: the next one is full).
    sent_topics: Option<Vec<String>>,
    sent_owned: Option<Vec<(TopicId, Vec<i32>)>>,
    /// The coordinator's heartbeat interval, in ms (0: not told yet).
    interval_ms: i32,
    /// Whether the coordinator answered with the member id (at v0 the first join sends none).
    id_confirmed: bool,
    liveness: Liveness,
}

fn is_coordinator_error(code: ErrorCode) -> bool {
    code == ErrorCode::NOT_COORDINATOR
        || code == ErrorCode::COORDINATOR_NOT_AVAILABLE
        || code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
}

/// What a person should do about a fatal heartbeat answer (beyond the hints every group
/// error gets, in the engine's error type).
fn hint(code: ErrorCode) -> Option<&'static str> {
    Some(match code.0 {
        35 => {
            "the broker does not speak the consumer group protocol (KIP-848 needs Kafka 4.0+, \
             or group.coordinator.rebalance.protocols=classic,consumer on 3.7-3.9); use \
             group.protocol=classic"
        }
        111 => {
            "another member with this group.instance.id has not left yet; stop it or wait for \
             its session to expire"
        }
        112 => {
            "the coordinator has no such assignor: group.remote.assignor must name one of the \
             broker's group.consumer.assignors (uniform, range)"
        }
        42 => "the coordinator refused the heartbeat as invalid",
        29 => "this principal may not describe a subscribed topic",
        _ => return None,
    })
}

fn fault(code: ErrorCode, message: Option<&str>) -> Fault {
    let detail = match (hint(code), message) {
        (Some(h), Some(m)) => Some(format!("{m}; {h}")),
        (Some(h), None) => Some(h.to_owned()),
        (None, Some(m)) => Some(m.to_owned()),
        (None, None) => None,
    };
    Fault { code, detail }
}

fn by_topic(owned: &BTreeMap<TopicPartition, TopicId>) -> Vec<(TopicId, Vec<i32>)> {
    let mut m: BTreeMap<TopicId, Vec<i32>> = BTreeMap::new();
    for (tp, id) in owned {
        m.entry(*id).or_default().push(tp.partition);
    }
    m.into_iter().collect()
}

impl ConsumerMembership {
    /// A member that has not joined yet, with member id `member_id` (v1: the client's UUID;
    /// v0: empty, the coordinator hands one out).
    pub fn new(config: GroupConfig, member_id: String) -> ConsumerMembership {
        ConsumerMembership {
            config,
            member_id,
            epoch: JOIN_EPOCH,
            state: State::Unjoined,
            owned: BTreeMap::new(),
            target: Vec::new(),
            topics: Vec::new(),
            sent_topics: None,
            sent_owned: None,
            interval_ms: 0,
            id_confirmed: false,
            liveness: Liveness::new(),
        }
    }

    /// Whether a coordinator answered with this member id (a v0 join sends an empty one until
    /// then: the coordinator hands it out).
    pub fn id_confirmed(&self) -> bool {
        self.id_confirmed
    }

    /// The member epoch (0 before the join is answered).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// The coordinator's heartbeat interval, once it said.
    pub fn interval_ms(&self) -> Option<u64> {
        u64::try_from(self.interval_ms).ok().filter(|&ms| ms > 0)
    }

    /// The heartbeat interval: the coordinator's, or [`DEFAULT_INTERVAL`] until it said.
    pub fn interval(&self) -> Duration {
        self.interval_ms()
            .map_or(DEFAULT_INTERVAL, Duration::from_millis)
    }

    /// Subscribes to `topics` (the next heartbeat carries them if they changed). A member that
    /// is not in the group starts joining: epoch 0 and a full heartbeat; one that lost its
    /// partitions gives them up here.
    pub fn subscribe(&mut self, topics: &[String]) {
        self.topics = topics.to_vec();
        if !self.in_group() {
            self.owned.clear();
            self.target.clear();
            self.epoch = JOIN_EPOCH;
            self.sent_topics = None;
            self.sent_owned = None;
            self.state = State::Unjoined;
        }
    }

    /// The heartbeat to send now.
    pub fn next_heartbeat(&self) -> NextHeartbeat {
        let full = self.epoch == JOIN_EPOCH || self.sent_topics.is_none();
        let owned = by_topic(&self.owned);
        NextHeartbeat {
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            full,
            instance_id: self.config.instance_id.clone().filter(|_| full),
            rack_id: self.config.rack.clone().filter(|_| full),
            rebalance_timeout_ms: if full {
                i32::try_from(self.config.max_poll_interval.as_millis()).unwrap_or(i32::MAX)
            } else {
                -1
            },
            topics: (full || self.sent_topics.as_ref() != Some(&self.topics))
                .then(|| self.topics.clone()),
            server_assignor: self.config.remote_assignor.clone().filter(|_| full),
            owned: (full || self.sent_owned.as_ref() != Some(&owned)).then_some(owned),
        }
    }

    /// A heartbeat went unanswered (a lost connection, a timeout): the next one is full.
    pub fn heartbeat_failed(&mut self) {
        self.sent_topics = None;
        self.sent_owned = None;
    }

    /// Reads the answer to `sent`.
    pub fn on_heartbeat(&mut self, sent: &NextHeartbeat, v: &HeartbeatView) -> Result<Beat, Fault> {
        let code = v.error;
        if code.is_ok() {
            if let Some(id) = v.member_id.as_deref().filter(|id| !id.is_empty()) {
                id.clone_into(&mut self.member_id);
                self.id_confirmed = true;
            }
            if sent.member_epoch < 0 {
                return Ok(Beat::Alive);
            }
            self.epoch = v.member_epoch;
            self.interval_ms = v.heartbeat_interval_ms;
            if let Some(t) = &sent.topics {
                self.sent_topics = Some(t.clone());
            }
            if let Some(o) = &sent.owned {
                self.sent_owned = Some(o.clone());
            }
            if self.sent_topics.is_none() {
                // A partial heartbeat answered after a failure reset what was sent.
                self.sent_topics = Some(self.topics.clone());
            }
            if let Some(a) = &v.assignment {
                let mut a: Vec<(TopicId, Vec<i32>)> = a
                    .iter()
                    .map(|(id, ps)| {
                        let mut ps = ps.clone();
                        ps.sort_unstable();
                        ps.dedup();
                        (*id, ps)
                    })
                    .filter(|(_, ps)| !ps.is_empty())
                    .collect();
                a.sort();
                self.target = a;
            }
            let pending = self.target != by_topic(&self.owned);
            if matches!(self.state, State::Unjoined | State::Stable) || pending {
                self.state = if pending {
                    State::RejoinRequested
                } else {
                    State::Stable
                };
            }
            return Ok(if pending {
                Beat::Reconcile
            } else {
                Beat::Alive
            });
        }
        self.heartbeat_failed();
        if code == ErrorCode::UNKNOWN_MEMBER_ID || code.0 == 110 {
            // FENCED_MEMBER_EPOCH (110), UNKNOWN_MEMBER_ID: the partitions may be someone
            // else's already.
            self.lose(format!(
                "the coordinator answered {code} to epoch {}: the member lost its partitions",
                sent.member_epoch
            ));
            self.epoch = JOIN_EPOCH;
            return Ok(Beat::Lost);
        }
        if is_coordinator_error(code) {
            return Ok(Beat::FindCoordinator);
        }
        if hint(code).is_none() && code.is_retriable() {
            return Ok(Beat::Retry);
        }
        self.lose(format!("ConsumerGroupHeartbeat answered {code}"));
        Err(fault(code, v.message.as_deref()))
    }

    /// Reconciles the owned partitions with the target assignment, naming topic ids through
    /// `names` (the metadata's id → name). Partitions the target leaves out are given up (the
    /// stream holds no batch of them when it calls this), new ones taken; the next heartbeat
    /// acknowledges the result.
    pub fn reconcile(&mut self, names: &BTreeMap<TopicId, String>) -> Reconciled {
        let mut next: BTreeMap<TopicPartition, TopicId> = BTreeMap::new();
        let mut unresolved = 0;
        for (id, ps) in &self.target {
            let Some(name) = names.get(id) else {
                unresolved += 1;
                continue;
            };
            for p in ps {
                next.insert(TopicPartition::new(name.clone(), *p), *id);
            }
        }
        let revoked = self
            .owned
            .keys()
            .filter(|tp| !next.contains_key(*tp))
            .cloned()
            .collect();
        let added = next
            .keys()
            .filter(|tp| !self.owned.contains_key(*tp))
            .cloned()
            .collect();
        self.owned = next;
        if matches!(self.state, State::RejoinRequested) {
            self.state = State::Stable;
        }
        Reconciled {
            partitions: self.assigned(),
            revoked,
            added,
            unresolved,
        }
    }

    /// The epoch to leave with: -1, or -2 for a static member (its partitions wait for it).
    pub fn leave_epoch(&self) -> i32 {
        if self.config.instance_id.is_some() {
            STATIC_LEAVE_EPOCH
        } else {
            LEAVE_EPOCH
        }
    }

    /// The member held a batch past `max.poll.interval.ms`: it leaves with epoch -1 (static or
    /// not, so its partitions move on) and rejoins with epoch 0 at the next batch.
    pub fn poll_expired(&mut self) -> Option<NextHeartbeat> {
        if !self.in_group() {
            return None;
        }
        let leave = NextHeartbeat {
            member_epoch: LEAVE_EPOCH,
            ..self.leave_heartbeat()
        };
        self.lose(format!(
            "the batch was held longer than max.poll.interval.ms ({} ms)",
            self.config.max_poll_interval.as_millis()
        ));
        Some(leave)
    }

    /// The coordinator answered a heartbeat at `now`: the session runs from here.
    pub fn answered(&mut self, now: Instant) {
        self.liveness.answered(now);
    }

    /// The member leaves the group: the heartbeat to send (if it was in it), and the member is
    /// unjoined.
    pub fn leave(&mut self) -> Option<NextHeartbeat> {
        let was_in = self.in_group() || matches!(self.state, State::Lost(_)) && self.epoch > 0;
        let hb = self.leave_heartbeat();
        self.owned.clear();
        self.target.clear();
        self.epoch = JOIN_EPOCH;
        self.state = State::Unjoined;
        self.heartbeat_failed();
        was_in.then_some(hb)
    }

    fn leave_heartbeat(&self) -> NextHeartbeat {
        NextHeartbeat {
            member_id: self.member_id.clone(),
            member_epoch: self.leave_epoch(),
            full: false,
            instance_id: self.config.instance_id.clone(),
            rack_id: None,
            rebalance_timeout_ms: -1,
            topics: None,
            server_assignor: None,
            owned: None,
        }
    }
}

impl MemberState for ConsumerMembership {
    type Leave = NextHeartbeat;

    /// The group's settings.
    fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Where the member stands (`RejoinRequested`: a target assignment to reconcile).
    fn state(&self) -> &State {
        &self.state
    }

    fn state_mut(&mut self) -> &mut State {
        &mut self.state
    }

    fn liveness_mut(&mut self) -> &mut Liveness {
        &mut self.liveness
    }

    /// The member id.
    fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The partitions the member owns (reconciled).
    fn assigned(&self) -> BTreeSet<TopicPartition> {
        self.owned.keys().cloned().collect()
    }
    /// Whether the member is in the group with an epoch (heartbeats are due).
    fn in_group(&self) -> bool {
        matches!(self.state, State::Stable | State::RejoinRequested) && self.epoch > 0
    }

    /// The identity to commit under: the member epoch, while the member still owns its
    /// partitions.
    fn generation(&self) -> Option<Generation> {
        self.in_group().then(|| Generation {
            generation_id: self.epoch,
            member_id: self.member_id.clone(),
            instance_id: self.config.instance_id.clone(),
        })
    }

    /// Reads the member's clocks at `now` (the driver does, more often than heartbeats go):
    /// a batch held past `max.poll.interval.ms` leaves the group with epoch -1
    /// ([`poll_expired`](Self::poll_expired): the heartbeat to send); no heartbeat answered
    /// for `session.timeout.ms` — never less than three of the coordinator's intervals, since
    /// the coordinator's own session (`group.consumer.session.timeout.ms`) decides — gives the
    /// partitions up.
    fn tick(&mut self, now: Instant) -> Tick<NextHeartbeat> {
        if !self.in_group() {
            return Tick::Alive;
        }
        let session = self.config.session_timeout.max(self.interval() * 3);
        match self
            .liveness
            .expired(now, self.config.max_poll_interval, session)
        {
            None => Tick::Alive,
            Some(Expired::Poll) => Tick::PollExpired {
                leave: self.poll_expired(),
            },
            Some(Expired::Session(d)) => {
                self.lose(format!(
                    "no heartbeat was answered for {} ms",
                    d.as_millis()
                ));
                Tick::SessionExpired(d)
            }
        }
    }

    fn is_cooperative(&self) -> bool {
        true
    }

    fn heartbeat_interval(&self) -> Duration {
        self.interval()
    }

    fn close(&mut self) -> Option<NextHeartbeat> {
        self.leave()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::group::GroupProtocol;

    const A: TopicId = [1; 16];
    const B: TopicId = [2; 16];

    fn config() -> GroupConfig {
        let mut c = GroupConfig::new("g");
        c.protocol = GroupProtocol::Consumer;
        c.remote_assignor = Some("uniform".to_owned());
        c.max_poll_interval = Duration::from_secs(60);
        c
    }

    fn names() -> BTreeMap<TopicId, String> {
        [(A, "a".to_owned()), (B, "b".to_owned())].into()
    }

    fn ok(epoch: i32, assignment: Option<Vec<(TopicId, Vec<i32>)>>) -> HeartbeatView {
        HeartbeatView {
            error: ErrorCode::NONE,
            message: None,
            member_id: Some("m".to_owned()),
            member_epoch: epoch,
            heartbeat_interval_ms: 5000,
            assignment,
        }
    }

    fn err(code: i16) -> HeartbeatView {
        HeartbeatView {
            error: ErrorCode(code),
            message: Some("from the coordinator".to_owned()),
            member_id: None,
            member_epoch: -1,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }

    fn tps(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
        list.iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect()
    }

    /// A member that joined and owns a-0 and a-1 at epoch 3.
    fn joined() -> ConsumerMembership {
        let mut m = ConsumerMembership::new(config(), "m".to_owned());
        m.subscribe(&["a".to_owned(), "b".to_owned()]);
        let hb = m.next_heartbeat();
        m.on_heartbeat(&hb, &ok(3, Some(vec![(A, vec![1, 0])])))
            .unwrap();
        m.reconcile(&names());
        let hb = m.next_heartbeat();
        assert_eq!(m.on_heartbeat(&hb, &ok(3, None)).unwrap(), Beat::Alive);
        m
    }

    #[test]
    fn the_join_is_full_with_epoch_zero_and_later_heartbeats_carry_only_changes() {
        let mut m = ConsumerMembership::new(config(), "m".to_owned());
        m.subscribe(&["a".to_owned()]);
        assert!(m.needs_join() && m.generation().is_none());
        let hb = m.next_heartbeat();
        assert!(hb.full);
        assert_eq!(hb.member_epoch, 0);
        assert_eq!(hb.rebalance_timeout_ms, 60_000);
        assert_eq!(hb.server_assignor.as_deref(), Some("uniform"));
        assert_eq!(hb.topics, Some(vec!["a".to_owned()]));
        assert_eq!(hb.owned, Some(vec![]));
        // The join answered with the epoch and no assignment yet: in the group, nothing owned.
        assert_eq!(m.on_heartbeat(&hb, &ok(1, None)).unwrap(), Beat::Alive);
        assert!(!m.needs_join());
        assert_eq!(m.generation().unwrap().generation_id, 1);
        assert_eq!(m.interval_ms(), Some(5000));
        let hb = m.next_heartbeat();
        assert!(!hb.full);
        assert_eq!((hb.member_epoch, hb.rebalance_timeout_ms), (1, -1));
        assert_eq!(
            (hb.topics, hb.owned, hb.server_assignor),
            (None, None, None)
        );
        // A changed subscription goes out alone.
        m.subscribe(&["a".to_owned(), "b".to_owned()]);
        let hb = m.next_heartbeat();
        assert_eq!(hb.topics.as_ref().unwrap().len(), 2);
        assert!(hb.owned.is_none());
    }

    #[test]
    fn a_target_is_reconciled_at_the_boundary_and_acknowledged_in_the_next_heartbeat() {
        let mut m = joined();
        assert_eq!(m.assigned(), tps(&[("a", 0), ("a", 1)]));
        assert_eq!(m.next_heartbeat().owned, None, "acknowledged already");
        // The coordinator takes a-1 away and gives b-0.
        let hb = m.next_heartbeat();
        let beat = m
            .on_heartbeat(&hb, &ok(3, Some(vec![(A, vec![0]), (B, vec![0])])))
            .unwrap();
        assert_eq!(beat, Beat::Reconcile);
        assert!(m.needs_join());
        // Until the stream reconciles, a-1 is still owned and commits go under epoch 3.
        assert_eq!(m.assigned(), tps(&[("a", 0), ("a", 1)]));
        assert_eq!(m.generation().unwrap().generation_id, 3);
        let r = m.reconcile(&names());
        assert_eq!(r.revoked, tps(&[("a", 1)]));
        assert_eq!(r.added, tps(&[("b", 0)]));
        assert_eq!(r.partitions, tps(&[("a", 0), ("b", 0)]));
        assert!(!m.needs_join());
        let hb = m.next_heartbeat();
        assert_eq!(hb.owned, Some(vec![(A, vec![0]), (B, vec![0])]));
        // The acknowledgement answered with the new epoch.
        assert_eq!(m.on_heartbeat(&hb, &ok(4, None)).unwrap(), Beat::Alive);
        assert_eq!(m.generation().unwrap().generation_id, 4);
        assert_eq!(m.next_heartbeat().owned, None);
    }

    #[test]
    fn a_topic_id_the_metadata_does_not_name_waits() {
        let mut m = joined();
        let hb = m.next_heartbeat();
        m.on_heartbeat(&hb, &ok(4, Some(vec![(A, vec![0, 1]), ([9; 16], vec![0])])))
            .unwrap();
        let r = m.reconcile(&names());
        assert_eq!(r.unresolved, 1);
        assert!(r.revoked.is_empty() && r.added.is_empty());
        // Each heartbeat asks for a reconciliation again (with fresh metadata) until the
        // topic is named.
        let hb = m.next_heartbeat();
        assert_eq!(m.on_heartbeat(&hb, &ok(4, None)).unwrap(), Beat::Reconcile);
        let mut more = names();
        more.insert([9; 16], "c".to_owned());
        let r = m.reconcile(&more);
        assert_eq!((r.unresolved, r.added), (0, tps(&[("c", 0)])));
        let hb = m.next_heartbeat();
        assert_eq!(m.on_heartbeat(&hb, &ok(5, None)).unwrap(), Beat::Alive);
    }

    #[test]
    fn fencing_answers_lose_the_partitions_and_rejoin_with_epoch_zero() {
        for code in [25, 110] {
            let mut m = joined();
            let hb = m.next_heartbeat();
            assert_eq!(m.on_heartbeat(&hb, &err(code)).unwrap(), Beat::Lost);
            assert!(m.generation().is_none(), "nothing may be committed");
            assert!(matches!(m.state(), State::Lost(_)));
            assert!(m.needs_join());
            m.subscribe(&["a".to_owned()]);
            assert!(m.assigned().is_empty());
            let hb = m.next_heartbeat();
            assert!(hb.full);
            assert_eq!((hb.member_epoch, hb.member_id.as_str()), (0, "m"));
            assert_eq!(hb.owned, Some(vec![]));
        }
    }

    #[test]
    fn coordinator_errors_and_transient_ones_retry_with_a_full_heartbeat() {
        for (code, beat) in [
            (14, Beat::FindCoordinator),
            (15, Beat::FindCoordinator),
            (16, Beat::FindCoordinator),
            (7, Beat::Retry),
        ] {
            let mut m = joined();
            let hb = m.next_heartbeat();
            assert_eq!(m.on_heartbeat(&hb, &err(code)).unwrap(), beat);
            assert_eq!(m.generation().unwrap().generation_id, 3, "still a member");
            let hb = m.next_heartbeat();
            assert!(hb.full);
            assert_eq!(hb.member_epoch, 3);
            assert_eq!(hb.owned, Some(vec![(A, vec![0, 1])]));
        }
        let mut m = joined();
        m.heartbeat_failed();
        assert!(m.next_heartbeat().full);
    }

    #[test]
    fn answers_no_rejoin_fixes_are_faults_with_hints() {
        for (code, words) in [
            (35, "group.protocol=classic"),
            (111, "group.instance.id"),
            (112, "group.remote.assignor"),
            (42, "invalid"),
            (29, "describe"),
        ] {
            let mut m = joined();
            let hb = m.next_heartbeat();
            let f = m.on_heartbeat(&hb, &err(code)).unwrap_err();
            assert_eq!(f.code, ErrorCode(code));
            let d = f.detail.unwrap();
            assert!(
                d.contains(words) && d.contains("from the coordinator"),
                "{d}"
            );
            assert!(m.generation().is_none());
        }
        // Codes the engine's error hints at already (group.consumer.max.size, authorization).
        for code in [81, 30, 82] {
            let mut m = joined();
            let hb = m.next_heartbeat();
            let f = m.on_heartbeat(&hb, &err(code)).unwrap_err();
            assert_eq!(f.code, ErrorCode(code));
            assert_eq!(f.detail.as_deref(), Some("from the coordinator"));
        }
    }

    #[test]
    fn the_v0_coordinator_hands_out_the_member_id() {
        let mut m = ConsumerMembership::new(config(), String::new());
        m.subscribe(&["a".to_owned()]);
        let hb = m.next_heartbeat();
        assert_eq!(hb.member_id, "");
        m.on_heartbeat(&hb, &ok(1, None)).unwrap();
        assert_eq!(m.member_id(), "m");
        assert_eq!(m.next_heartbeat().member_id, "m");
    }

    #[test]
    fn leaving_uses_epoch_minus_one_or_minus_two_for_a_static_member() {
        let mut m = joined();
        let hb = m.leave().unwrap();
        assert_eq!(hb.member_epoch, -1);
        assert!(m.assigned().is_empty() && m.generation().is_none());
        assert!(m.leave().is_none(), "left already");
        let mut c = config();
        c.instance_id = Some("i".to_owned());
        let mut m = ConsumerMembership::new(c, "m".to_owned());
        m.subscribe(&["a".to_owned()]);
        let hb = m.next_heartbeat();
        assert_eq!(hb.instance_id.as_deref(), Some("i"));
        m.on_heartbeat(&hb, &ok(2, None)).unwrap();
        let hb = m.leave().unwrap();
        assert_eq!(
            (hb.member_epoch, hb.instance_id.as_deref()),
            (-2, Some("i"))
        );
        // The answer to a leave changes nothing.
        assert_eq!(m.on_heartbeat(&hb, &ok(-2, None)).unwrap(), Beat::Alive);
        assert!(m.generation().is_none());
    }

    #[test]
    fn a_batch_held_too_long_leaves_with_minus_one_even_when_static() {
        let mut c = config();
        c.instance_id = Some("i".to_owned());
        let mut m = ConsumerMembership::new(c, "m".to_owned());
        m.subscribe(&["a".to_owned()]);
        let hb = m.next_heartbeat();
        m.on_heartbeat(&hb, &ok(2, Some(vec![(A, vec![0])])))
            .unwrap();
        m.reconcile(&names());
        let leave = m.poll_expired().unwrap();
        assert_eq!(leave.member_epoch, -1);
        assert!(m.generation().is_none());
        assert!(m.poll_expired().is_none());
        let State::Lost(why) = m.state() else {
            panic!("{:?}", m.state())
        };
        assert!(why.contains("max.poll.interval.ms"), "{why}");
        m.subscribe(&["a".to_owned()]);
        assert_eq!(m.next_heartbeat().member_epoch, 0);
    }

    // The clocks over virtual time: a batch held past max.poll.interval.ms (60 s here) leaves
    // with epoch -1 once; the session deadline is session.timeout.ms (45 s), never under three
    // of the coordinator's intervals.
    #[test]
    fn the_clocks_leave_on_a_held_batch_and_give_up_on_a_silent_coordinator() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = joined();
        m.answered(t0);
        m.handed_out(t0);
        m.answered(t0 + ms(60_000));
        assert_eq!(m.tick(t0 + ms(60_000)), Tick::Alive);
        let Tick::PollExpired { leave: Some(hb) } = m.tick(t0 + ms(60_001)) else {
            panic!("{:?}", m.state())
        };
        assert_eq!(hb.member_epoch, -1);
        assert_eq!(m.tick(t0 + ms(60_001)), Tick::Alive);

        let mut m = joined();
        m.answered(t0);
        assert_eq!(m.tick(t0 + ms(45_000)), Tick::Alive);
        assert_eq!(m.tick(t0 + ms(45_001)), Tick::SessionExpired(ms(45_000)));
        assert!(m.generation().is_none() && m.needs_join());

        // A coordinator interval of 20 s: the member waits three of them (60 s).
        let mut m = joined();
        let hb = m.next_heartbeat();
        let mut slow = ok(3, None);
        slow.heartbeat_interval_ms = 20_000;
        m.on_heartbeat(&hb, &slow).unwrap();
        m.answered(t0);
        assert_eq!(m.tick(t0 + ms(59_000)), Tick::Alive);
        assert_eq!(m.tick(t0 + ms(60_001)), Tick::SessionExpired(ms(60_000)));
    }

    #[test]
    fn a_store_refusal_loses_the_partitions() {
        let mut m = joined();
        m.lose("the store refused".into());
        assert!(m.generation().is_none() && m.needs_join());
    }
}
