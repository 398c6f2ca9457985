//! The member's side of the classic group protocol as a pure state machine: what to send next,
//! what an answer means and when its clocks expire, without sockets or a clock of its own (the
//! time is passed in; the driver in [`super::driver`] owns the connection and the timer). Kafka protocol guide, "The Consumer Group Protocol"; KIP-345 (static membership),
//! KIP-394 (MEMBER_ID_REQUIRED).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_proto::api::consumer_protocol::{Assignment, Subscription};
use kdirect_proto::api::join_group::JoinView;
use kdirect_proto::api::sync_group::SyncView;
use kdirect_proto::ErrorCode;

use super::assignor::{Assignor, MemberSubscription};
use crate::group::common::{Expired, Liveness, Tick};
pub use crate::group::common::{Fault, Generation, State};
use crate::group::driver::MemberState;
use crate::group::GroupConfig;
use crate::plan::TopicPartition;

/// The subscription and assignment version kdirect writes (the Java client's current one; a
/// member of an older client reads the fields it knows and ignores the rest).
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// What to do after a JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinStep {
    /// Send JoinGroup again at once (the coordinator handed out a member id, or forgot ours).
    Again,
    /// Look the coordinator up again and retry after a backoff.
    FindCoordinator(ErrorCode),
    /// This member leads the generation: compute everyone's partitions with `assignor`.
    Lead {
        /// The protocol the coordinator chose.
        assignor: Assignor,
        /// Every member's subscription.
        members: Vec<MemberSubscription>,
    },
    /// Another member leads: send SyncGroup with no assignments.
    Follow,
}

/// What to do after a SyncGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncStep {
    /// The generation's partitions for this member.
    Assigned(BTreeSet<TopicPartition>),
    /// Join again at once.
    Rejoin,
    /// Look the coordinator up again, then join again.
    FindCoordinator(ErrorCode),
}

/// What a heartbeat answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// Still a member of the generation.
    Alive,
    /// The group is rebalancing: finish the batch, then rejoin.
    Rejoin,
    /// The generation is over for this member.
    Lost,
    /// The coordinator moved or is unavailable: look it up again.
    FindCoordinator,
}

/// One member's view of its group.
#[derive(Debug, Clone)]
pub struct Membership {
    config: GroupConfig,
    member_id: String,
    generation_id: i32,
    protocol: Option<Assignor>,
    leader: bool,
    assigned: BTreeSet<TopicPartition>,
    state: State,
    liveness: Liveness,
}

fn is_coordinator_error(code: ErrorCode) -> bool {
    code == ErrorCode::NOT_COORDINATOR
        || code == ErrorCode::COORDINATOR_NOT_AVAILABLE
        || code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        || code == ErrorCode::REQUEST_TIMED_OUT
}

impl Membership {
    /// A member that has not joined yet.
    pub fn new(config: GroupConfig) -> Membership {
        Membership {
            config,
            member_id: String::new(),
            generation_id: -1,
            protocol: None,
            leader: false,
            assigned: BTreeSet::new(),
            state: State::Unjoined,
            liveness: Liveness::new(),
        }
    }

    /// The generation id (-1 before the first join).
    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    /// Whether this member led the last generation it joined.
    pub fn is_leader(&self) -> bool {
        self.leader
    }

    /// The assignor the coordinator chose for the last generation.
    pub fn protocol(&self) -> Option<Assignor> {
        self.protocol
    }

    /// The JoinGroup protocols: each assignor in order of preference, each with the same
    /// subscription (the topics, the partitions owned now, the generation, the rack).
    pub fn protocols(&self, topics: &[String]) -> Result<Vec<(&'static str, Bytes)>, String> {
        let mut owned: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for tp in &self.assigned {
            owned
                .entry(tp.topic.to_string())
                .or_default()
                .push(tp.partition);
        }
        let subscription = Subscription {
            topics: topics.to_vec(),
            user_data: None,
            owned_partitions: owned.into_iter().collect(),
            generation_id: self.generation_id,
            rack_id: self.config.rack.clone(),
        };
        let metadata = subscription
            .encode(CONSUMER_PROTOCOL_VERSION)
            .map_err(|e| format!("the subscription does not encode: {e}"))?;
        // cooperative-sticky also carries the generation in its user data, where Java
        // leaders older than subscription v2 look for it.
        let sticky = Subscription {
            user_data: Some(Bytes::copy_from_slice(&self.generation_id.to_be_bytes())),
            ..subscription
        }
        .encode(CONSUMER_PROTOCOL_VERSION)
        .map_err(|e| format!("the subscription does not encode: {e}"))?;
        Ok(self
            .config
            .assignors
            .iter()
            .map(|a| {
                let m = if a.is_cooperative() {
                    &sticky
                } else {
                    &metadata
                };
                (a.name(), m.clone())
            })
            .collect())
    }

    /// The member is about to send JoinGroup. An eager member gives up whatever it owned;
    /// a cooperative one keeps it (and says so in its subscription) until the new assignment
    /// leaves it out.
    pub fn start_join(&mut self) {
        if !self.is_cooperative() || matches!(self.state, State::Lost(_)) {
            self.assigned.clear();
        }
        self.state = State::Unjoined;
    }

    /// Reads a JoinGroup answer.
    pub fn on_join(&mut self, v: &JoinView) -> Result<JoinStep, Fault> {
        let code = v.error;
        if code == ErrorCode::MEMBER_ID_REQUIRED {
            // KIP-394: join again with the id the coordinator just handed out.
            self.member_id.clone_from(&v.member_id);
            return Ok(JoinStep::Again);
        }
        if code == ErrorCode::UNKNOWN_MEMBER_ID {
            self.forget_identity();
            return Ok(JoinStep::Again);
        }
        if code == ErrorCode::ILLEGAL_GENERATION || code == ErrorCode::REBALANCE_IN_PROGRESS {
            return Ok(JoinStep::Again);
        }
        if is_coordinator_error(code) {
            return Ok(JoinStep::FindCoordinator(code));
        }
        if code.err().is_some() {
            return Err(Fault { code, detail: None });
        }
        self.member_id.clone_from(&v.member_id);
        self.generation_id = v.generation_id;
        let name = v.protocol_name.as_deref().unwrap_or_default();
        let assignor = self
            .config
            .assignors
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| Fault {
                code: ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                detail: Some(format!(
                    "the coordinator chose protocol '{name}', which this member did not offer"
                )),
            })?;
        self.protocol = Some(assignor);
        self.leader = v.leader == v.member_id;
        if !self.leader || v.skip_assignment {
            // KIP-814's skip_assignment: the leader of a static group whose assignment the
            // broker kept; it syncs like a follower.
            return Ok(JoinStep::Follow);
        }
        let mut members = Vec::with_capacity(v.members.len());
        for m in &v.members {
            let s = Subscription::decode(&m.metadata).map_err(|e| Fault {
                code: ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                detail: Some(format!(
                    "member {}'s subscription does not decode: {e}",
                    m.member_id
                )),
            })?;
            members.push(MemberSubscription {
                member_id: m.member_id.clone(),
                instance_id: m.group_instance_id.clone(),
                topics: s.topics,
                owned: s
                    .owned_partitions
                    .iter()
                    .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
                    .collect(),
                generation: s.generation_id,
            });
        }
        Ok(JoinStep::Lead { assignor, members })
    }

    /// The leader's SyncGroup assignments: each member's partitions, encoded.
    pub fn assignments(
        &self,
        assignor: Assignor,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> Result<Vec<(String, Bytes)>, String> {
        assignor
            .assign(members, partitions)
            .into_iter()
            .map(|(member, set)| {
                let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for tp in set {
                    by_topic
                        .entry(tp.topic.into())
                        .or_default()
                        .push(tp.partition);
                }
                let a = Assignment {
                    partitions: by_topic.into_iter().collect(),
                    user_data: None,
                };
                let bytes = a
                    .encode(CONSUMER_PROTOCOL_VERSION)
                    .map_err(|e| format!("the assignment of {member} does not encode: {e}"))?;
                Ok((member, bytes))
            })
            .collect()
    }

    /// Reads a SyncGroup answer.
    pub fn on_sync(&mut self, v: &SyncView) -> Result<SyncStep, Fault> {
        let code = v.error;
        if code == ErrorCode::UNKNOWN_MEMBER_ID {
            self.forget_identity();
            return Ok(SyncStep::Rejoin);
        }
        if code == ErrorCode::ILLEGAL_GENERATION || code == ErrorCode::REBALANCE_IN_PROGRESS {
            return Ok(SyncStep::Rejoin);
        }
        if is_coordinator_error(code) {
            return Ok(SyncStep::FindCoordinator(code));
        }
        if code.err().is_some() {
            return Err(Fault { code, detail: None });
        }
        let a = Assignment::decode(&v.assignment).map_err(|e| Fault {
            code: ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
            detail: Some(format!("the assignment does not decode: {e}")),
        })?;
        let set: BTreeSet<TopicPartition> = a
            .partitions
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
            .collect();
        // Cooperative: a partition given up must be revoked, then the member joins again so
        // the leader can hand it on (KIP-429's second rebalance).
        let revoked = self.assigned.difference(&set).next().is_some();
        self.assigned.clone_from(&set);
        self.state = if self.is_cooperative() && revoked {
            State::RejoinRequested
        } else {
            State::Stable
        };
        Ok(SyncStep::Assigned(set))
    }

    /// Reads a Heartbeat answer.
    pub fn on_heartbeat(&mut self, code: ErrorCode) -> Result<Beat, Fault> {
        if code.is_ok() {
            return Ok(Beat::Alive);
        }
        if code == ErrorCode::REBALANCE_IN_PROGRESS {
            if self.state == State::Stable {
                self.state = State::RejoinRequested;
            }
            return Ok(Beat::Rejoin);
        }
        if code == ErrorCode::ILLEGAL_GENERATION {
            self.lose(format!("generation {} is over", self.generation_id));
            return Ok(Beat::Lost);
        }
        if code == ErrorCode::UNKNOWN_MEMBER_ID {
            self.lose("the coordinator no longer knows this member (its session expired)".into());
            self.forget_identity();
            return Ok(Beat::Lost);
        }
        if is_coordinator_error(code) {
            return Ok(Beat::FindCoordinator);
        }
        self.lose(format!("Heartbeat answered {code}"));
        Err(Fault { code, detail: None })
    }

    /// The member held a batch past `max.poll.interval.ms`: it leaves the generation (a
    /// dynamic member also gives up its member id, as the Java client does on LeaveGroup).
    pub fn poll_expired(&mut self) {
        self.lose(format!(
            "the batch was held longer than max.poll.interval.ms ({} ms)",
            self.config.max_poll_interval.as_millis()
        ));
        if self.config.instance_id.is_none() {
            self.forget_identity();
        }
    }

    /// The coordinator answered at `now` (a heartbeat, the end of a join): the session runs
    /// from here.
    pub fn answered(&mut self, now: Instant) {
        self.liveness.answered(now);
    }

    /// The member left the group (LeaveGroup sent, or about to be).
    pub fn left(&mut self) {
        self.assigned.clear();
        self.state = State::Unjoined;
        if self.config.instance_id.is_none() {
            self.forget_identity();
        }
    }

    /// The next JoinGroup goes as a new member: no member id, no generation.
    fn forget_identity(&mut self) {
        self.member_id.clear();
        self.generation_id = -1;
    }
}

impl MemberState for Membership {
    type Leave = Generation;

    /// The group's settings.
    fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Where the member stands.
    fn state(&self) -> &State {
        &self.state
    }

    fn state_mut(&mut self) -> &mut State {
        &mut self.state
    }

    fn liveness_mut(&mut self) -> &mut Liveness {
        &mut self.liveness
    }

    /// The member id (empty before the first join).
    fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The partitions of the current generation (empty unless stable or rejoin requested).
    fn assigned(&self) -> BTreeSet<TopicPartition> {
        self.assigned.clone()
    }

    /// Whether the member keeps its partitions while it rejoins (KIP-429's cooperative
    /// protocol): only when every assignor it offers is cooperative, as the Java client
    /// decides. Otherwise it gives everything up before JoinGroup (eager).
    fn is_cooperative(&self) -> bool {
        self.config.assignors.iter().all(|a| a.is_cooperative())
    }
    /// The identity to commit under, while the generation is still this member's.
    fn generation(&self) -> Option<Generation> {
        matches!(self.state, State::Stable | State::RejoinRequested).then(|| Generation {
            generation_id: self.generation_id,
            member_id: self.member_id.clone(),
            instance_id: self.config.instance_id.clone(),
        })
    }

    /// Reads the member's clocks at `now` (the driver does, every heartbeat interval, outside
    /// a join): a batch held past `max.poll.interval.ms` ends the generation for this member
    /// ([`poll_expired`](Self::poll_expired); the generation to leave with LeaveGroup, unless
    /// static), and so does no heartbeat answered for `session.timeout.ms` (the coordinator
    /// has dropped the member by then).
    fn tick(&mut self, now: Instant) -> Tick<Generation> {
        let Some(generation) = self.generation() else {
            return Tick::Alive;
        };
        let c = &self.config;
        match self
            .liveness
            .expired(now, c.max_poll_interval, c.session_timeout)
        {
            None => Tick::Alive,
            Some(Expired::Poll) => {
                self.poll_expired();
                Tick::PollExpired {
                    leave: generation.instance_id.is_none().then_some(generation),
                }
            }
            Some(Expired::Session(d)) => {
                self.lose(format!(
                    "no heartbeat was answered for session.timeout.ms ({} ms)",
                    d.as_millis()
                ));
                Tick::SessionExpired(d)
            }
        }
    }

    fn in_group(&self) -> bool {
        matches!(self.state, State::Stable | State::RejoinRequested)
    }

    fn heartbeat_interval(&self) -> Duration {
        self.config.heartbeat_interval
    }

    /// A dynamic member that has a member id leaves with LeaveGroup; a static one sends
    /// nothing (KIP-345: its partitions wait for it for the session timeout).
    fn close(&mut self) -> Option<Generation> {
        let leave =
            (self.config.instance_id.is_none() && !self.member_id.is_empty()).then(|| Generation {
                generation_id: self.generation_id,
                member_id: self.member_id.clone(),
                instance_id: None,
            });
        self.left();
        leave
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use kdirect_proto::api::join_group::JoinMember;

    use super::*;

    fn config() -> GroupConfig {
        GroupConfig::new("g")
    }

    fn join_ok(
        member: &str,
        leader: &str,
        generation: i32,
        members: &[(&str, &[&str])],
    ) -> JoinView {
        JoinView {
            error: ErrorCode::NONE,
            generation_id: generation,
            protocol_name: Some("range".to_owned()),
            leader: leader.to_owned(),
            member_id: member.to_owned(),
            skip_assignment: false,
            members: members
                .iter()
                .map(|(id, topics)| JoinMember {
                    member_id: (*id).to_owned(),
                    group_instance_id: None,
                    metadata: Subscription {
                        topics: topics.iter().map(|t| (*t).to_owned()).collect(),
                        user_data: None,
                        owned_partitions: Vec::new(),
                        generation_id: -1,
                        rack_id: None,
                    }
                    .encode(CONSUMER_PROTOCOL_VERSION)
                    .unwrap(),
                })
                .collect(),
        }
    }

    fn error_join(code: ErrorCode, member: &str) -> JoinView {
        JoinView {
            error: code,
            generation_id: -1,
            protocol_name: None,
            leader: String::new(),
            member_id: member.to_owned(),
            skip_assignment: false,
            members: Vec::new(),
        }
    }

    #[test]
    fn member_id_required_then_lead_then_sync() {
        let mut m = Membership::new(config());
        assert!(m.needs_join());
        assert_eq!(m.generation(), None);
        m.start_join();
        let step = m
            .on_join(&error_join(ErrorCode::MEMBER_ID_REQUIRED, "m-1"))
            .unwrap();
        assert_eq!(step, JoinStep::Again);
        assert_eq!(m.member_id(), "m-1");
        let step = m
            .on_join(&join_ok(
                "m-1",
                "m-1",
                7,
                &[("m-1", &["t"]), ("m-2", &["t"])],
            ))
            .unwrap();
        let JoinStep::Lead { assignor, members } = step else {
            panic!("{step:?}")
        };
        assert_eq!(assignor, Assignor::Range);
        let counts = BTreeMap::from([("t".to_owned(), 4)]);
        let out = m.assignments(assignor, &members, &counts).unwrap();
        assert_eq!(out.len(), 2);
        let mine = out.iter().find(|(id, _)| id == "m-1").unwrap().1.clone();
        let step = m
            .on_sync(&SyncView {
                error: ErrorCode::NONE,
                protocol_name: Some("range".to_owned()),
                assignment: mine,
            })
            .unwrap();
        let SyncStep::Assigned(set) = step else {
            panic!("{step:?}")
        };
        assert_eq!(
            set.into_iter().map(|tp| tp.partition).collect::<Vec<_>>(),
            [0, 1]
        );
        assert!(!m.needs_join());
        assert_eq!(m.generation().unwrap().generation_id, 7);
    }

    // A cooperative member keeps its partitions through JoinGroup, and one that loses some in
    // the new assignment asks to join again at once.
    #[test]
    fn a_cooperative_member_rejoins_after_a_revocation() {
        let mut c = config();
        c.assignors = vec![Assignor::CooperativeSticky];
        let mut m = Membership::new(c);
        assert!(m.is_cooperative());
        let mut v = join_ok("m", "x", 1, &[]);
        v.protocol_name = Some("cooperative-sticky".to_owned());
        m.on_join(&v).unwrap();
        let two = Assignment {
            partitions: vec![("t".to_owned(), vec![0, 1])],
            user_data: None,
        };
        m.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: two.encode(CONSUMER_PROTOCOL_VERSION).unwrap(),
        })
        .unwrap();
        assert_eq!(m.state(), &State::Stable);
        m.start_join();
        assert_eq!(m.assigned().len(), 2, "kept through the join");
        let s = Subscription::decode(&m.protocols(&["t".to_owned()]).unwrap()[0].1).unwrap();
        assert_eq!(s.owned_partitions, vec![("t".to_owned(), vec![0, 1])]);
        assert_eq!(s.user_data.as_deref(), Some(&1i32.to_be_bytes()[..]));
        let mut v = join_ok("m", "x", 2, &[]);
        v.protocol_name = Some("cooperative-sticky".to_owned());
        m.on_join(&v).unwrap();
        let one = Assignment {
            partitions: vec![("t".to_owned(), vec![0])],
            user_data: None,
        };
        m.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: one.encode(CONSUMER_PROTOCOL_VERSION).unwrap(),
        })
        .unwrap();
        assert_eq!(m.state(), &State::RejoinRequested, "t-1 was revoked");
        // Eager members (range in the list) give everything up.
        let mut e = Membership::new(config());
        assert!(!e.is_cooperative());
        e.on_join(&join_ok("m", "x", 1, &[])).unwrap();
        e.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: two.encode(CONSUMER_PROTOCOL_VERSION).unwrap(),
        })
        .unwrap();
        e.start_join();
        assert!(e.assigned().is_empty());
    }

    #[test]
    fn follower_and_an_empty_assignment() {
        let mut m = Membership::new(config());
        let step = m.on_join(&join_ok("m-2", "m-1", 3, &[])).unwrap();
        assert_eq!(step, JoinStep::Follow);
        let step = m
            .on_sync(&SyncView {
                error: ErrorCode::NONE,
                protocol_name: None,
                assignment: Bytes::new(),
            })
            .unwrap();
        assert_eq!(step, SyncStep::Assigned(BTreeSet::new()));
        assert_eq!(m.state(), &State::Stable);
    }

    #[test]
    fn heartbeat_outcomes() {
        let mut m = Membership::new(config());
        m.on_join(&join_ok("m", "x", 1, &[])).unwrap();
        m.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: Bytes::new(),
        })
        .unwrap();
        assert_eq!(m.on_heartbeat(ErrorCode::NONE).unwrap(), Beat::Alive);
        assert_eq!(
            m.on_heartbeat(ErrorCode::REBALANCE_IN_PROGRESS).unwrap(),
            Beat::Rejoin
        );
        // Commits are still made under the old generation until the member rejoins.
        assert_eq!(m.state(), &State::RejoinRequested);
        assert!(m.generation().is_some());
        assert!(m.needs_join());
        assert_eq!(
            m.on_heartbeat(ErrorCode::NOT_COORDINATOR).unwrap(),
            Beat::FindCoordinator
        );
        assert_eq!(
            m.on_heartbeat(ErrorCode::UNKNOWN_MEMBER_ID).unwrap(),
            Beat::Lost
        );
        assert!(matches!(m.state(), State::Lost(_)));
        assert_eq!(m.generation(), None);
        assert_eq!(m.member_id(), "");
        assert!(m.on_heartbeat(ErrorCode::FENCED_INSTANCE_ID).is_err());
    }

    #[test]
    fn a_poll_timeout_loses_the_generation() {
        let mut m = Membership::new(config());
        m.on_join(&join_ok("m", "x", 1, &[])).unwrap();
        m.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: Bytes::new(),
        })
        .unwrap();
        m.poll_expired();
        let State::Lost(why) = m.state() else {
            panic!()
        };
        assert!(why.contains("max.poll.interval.ms"), "{why}");
        assert_eq!(m.generation(), None);
    }

    /// A member in generation 1 whose join was answered at `t0`.
    fn stable_at(c: GroupConfig, t0: Instant) -> Membership {
        let mut m = Membership::new(c);
        m.on_join(&join_ok("m", "x", 1, &[])).unwrap();
        m.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: Bytes::new(),
        })
        .unwrap();
        m.answered(t0);
        m
    }

    // max.poll.interval.ms, over virtual time: a batch held past it leaves the generation once
    // (a dynamic member with LeaveGroup, a static one silently), and only while it is held.
    #[test]
    fn holding_a_batch_past_max_poll_interval_leaves_the_generation_once() {
        let t0 = Instant::now();
        let poll = config().max_poll_interval;
        let mut m = stable_at(config(), t0);
        m.handed_out(t0);
        // Heartbeats answered all along: the session never expires here.
        m.answered(t0 + poll);
        assert_eq!(m.tick(t0 + poll), Tick::Alive);
        let late = t0 + poll + std::time::Duration::from_millis(1);
        let Tick::PollExpired { leave: Some(g) } = m.tick(late) else {
            panic!("{:?}", m.state())
        };
        assert_eq!((g.generation_id, g.member_id.as_str()), (1, "m"));
        assert!(matches!(m.state(), State::Lost(why) if why.contains("max.poll.interval.ms")));
        // Said once: the generation is over, nothing more to leave.
        assert_eq!(m.tick(late), Tick::Alive);

        // Asking for the next batch in time stops the clock.
        let mut m = stable_at(config(), t0);
        m.handed_out(t0);
        m.polling();
        m.answered(t0 + poll * 2);
        assert_eq!(m.tick(t0 + poll * 2), Tick::Alive);

        // A static member leaves its generation without LeaveGroup (KIP-345).
        let mut c = config();
        c.instance_id = Some("i-1".to_owned());
        let mut m = stable_at(c, t0);
        m.handed_out(t0);
        assert_eq!(m.tick(late), Tick::PollExpired { leave: None });
    }

    #[test]
    fn no_answer_for_session_timeout_loses_the_generation() {
        let t0 = Instant::now();
        let session = config().session_timeout;
        let mut m = stable_at(config(), t0);
        assert_eq!(m.tick(t0 + session), Tick::Alive);
        assert_eq!(
            m.tick(t0 + session + std::time::Duration::from_millis(1)),
            Tick::SessionExpired(session)
        );
        assert!(matches!(m.state(), State::Lost(why) if why.contains("session.timeout.ms")));
        // Before the first join nothing runs.
        let mut fresh = Membership::new(config());
        assert_eq!(fresh.tick(t0 + session * 100), Tick::Alive);
    }

    #[test]
    fn static_members_keep_their_id_when_they_leave() {
        let mut c = config();
        c.instance_id = Some("i-1".to_owned());
        let mut m = Membership::new(c);
        m.on_join(&join_ok("m", "x", 1, &[])).unwrap();
        m.left();
        assert_eq!(m.member_id(), "m");
    }

    #[test]
    fn join_errors() {
        let mut m = Membership::new(config());
        assert_eq!(
            m.on_join(&error_join(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, ""))
                .unwrap(),
            JoinStep::FindCoordinator(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        );
        assert_eq!(
            m.on_join(&error_join(ErrorCode::UNKNOWN_MEMBER_ID, ""))
                .unwrap(),
            JoinStep::Again
        );
        let f = m
            .on_join(&error_join(ErrorCode::INCONSISTENT_GROUP_PROTOCOL, ""))
            .unwrap_err();
        assert_eq!(f.code, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        let mut v = join_ok("m", "m", 1, &[]);
        v.protocol_name = Some("sticky".to_owned());
        let f = m.on_join(&v).unwrap_err();
        assert!(f.detail.unwrap().contains("sticky"));
        let mut v = join_ok("m", "m", 1, &[]);
        v.members.push(JoinMember {
            member_id: "java".to_owned(),
            group_instance_id: None,
            metadata: Bytes::from_static(&[0, 3, 0, 0, 0, 9]),
        });
        let f = m.on_join(&v).unwrap_err();
        assert!(f.detail.unwrap().contains("java"));
    }

    #[test]
    fn the_subscription_carries_what_is_owned() {
        let mut m = Membership::new(config());
        m.on_join(&join_ok("m", "x", 4, &[])).unwrap();
        let a = Assignment {
            partitions: vec![("t".to_owned(), vec![2, 5])],
            user_data: None,
        };
        m.on_sync(&SyncView {
            error: ErrorCode::NONE,
            protocol_name: None,
            assignment: a.encode(CONSUMER_PROTOCOL_VERSION).unwrap(),
        })
        .unwrap();
        let protocols = m.protocols(&["t".to_owned()]).unwrap();
        assert_eq!(
            protocols.iter().map(|p| p.0).collect::<Vec<_>>(),
            ["range", "roundrobin"]
        );
        let s = Subscription::decode(&protocols[0].1).unwrap();
        assert_eq!(s.owned_partitions, vec![("t".to_owned(), vec![2, 5])]);
        assert_eq!(s.generation_id, 4);
    }
}
