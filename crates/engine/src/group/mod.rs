//! Consumer groups: several processes share a topic's partitions through Kafka's group
//! coordinator, with the classic protocol (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) or, opted into with `group.protocol=consumer`, KIP-848's (ConsumerGroupHeartbeat
//! alone; the coordinator assigns). The classic protocol uses
//! protocol type `consumer` and the Java client's subscription and assignment encoding, so
//! that Kafka's tools list kdirect's members and a kdirect member and a Java `KafkaConsumer` can
//! share one group.
//!
//! The layout follows the protocols:
//!
//! - [`classic`]: JoinGroup/SyncGroup/Heartbeat: its state machine ([`classic::state`]: what
//!   each answer means), its exchanges ([`classic::driver`]: the join/sync round, a heartbeat,
//!   LeaveGroup), and the client-side assignors ([`classic::assignor`]: `range` and `roundrobin`, as
//!   the Java client computes them, and `cooperative-sticky`, KIP-429).
//! - [`kip848`]: KIP-848's consumer protocol: its state machine ([`kip848::state`]: epochs,
//!   incremental heartbeats, reconciliation of the target assignment by topic id, fencing,
//!   leave epochs) and its exchanges ([`kip848::driver`]).
//! - [`common`]: what both share: the member's [`State`], the commit identity
//!   ([`Generation`]), [`Joined`], and the member's clocks ([`Liveness`]:
//!   `max.poll.interval.ms` and the session), which each state machine reads with the time
//!   passed in (`tick`), so both protocols apply the same timeout rules and their tests run
//!   over virtual time.
//! - [`coordinator`]: finding the group's coordinator, a connection of the caller's own to it,
//!   and the one retry policy (by time, `default.api.timeout.ms`, with jittered backoff) used by
//!   both members, [`describe_group`] and the `kafka` offset store.
//! - [`driver`]: the one member driver, [`Member`]: a protocol's state machine (a
//!   [`MemberState`]) behind a lock, its coordinator, and the heartbeat task that reads the
//!   clocks and beats; a protocol adds only its exchanges with the coordinator ([`Protocol`]:
//!   join, heartbeat, leave).
//! - [`GroupMember`]: either member behind one API, picked by [`GroupConfig::protocol`]; the
//!   stream and the `kafka` store use only it. Under KIP-848 a member is always incremental
//!   (like cooperative-sticky): the stream's join reconciles, keeping what the new target
//!   keeps, and the commit identity is the member epoch (OffsetCommit v9).
//! - [`describe`]: a group's state and members as its coordinator describes them
//!   (DescribeGroups), for `kdirect lag`.
//!
//! Both protocols run in that one shape: a dedicated coordinator connection (JoinGroup is held by the
//! coordinator for up to the rebalance timeout, and a broker answers one request per
//! connection at a time, so it must not share the fetcher's), a join the stream calls between
//! batches, and a heartbeat task that keeps the membership alive while the user processes a
//! batch and reads the clocks.
//!
//! Classic members are eager by default: partitions are given up, all of them, when the member
//! rejoins, which the stream does only between batches. A member whose only assignor is
//! `cooperative-sticky` is cooperative (KIP-429): it keeps its partitions through the join,
//! gives up only those the new assignment leaves out, and then joins again at once so the
//! leader can hand them on.

pub mod classic;
pub mod common;
pub mod coordinator;
pub mod describe;
pub mod driver;
pub mod kip848;
mod member;

use std::time::Duration;

pub use classic::assignor::Assignor;
pub use common::{Generation, Joined, Liveness, State};
pub use coordinator::Coordinator;
pub use describe::describe_group;
pub use driver::{Member, MemberState, Protocol};
pub use member::GroupMember;

/// A member's settings, by the Java client's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.id`.
    pub group: String,
    /// `group.instance.id`: static membership (KIP-345). A static member that restarts within
    /// `session.timeout.ms` gets its partitions back without a rebalance, and sends no
    /// LeaveGroup when it stops.
    pub instance_id: Option<String>,
    /// `session.timeout.ms` (default 45 s): how long the coordinator waits for a heartbeat
    /// before it drops the member.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 3 s).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (default 300 s): the longest a batch may be held between
    /// `next_batch` calls before the member leaves the group (its commit is then refused);
    /// also the rebalance timeout sent in JoinGroup.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`, in order of preference (default `range`,
    /// `roundrobin`).
    pub assignors: Vec<Assignor>,
    /// `client.rack`, sent in the subscription.
    pub rack: Option<String>,
    /// `group.protocol`: classic (the default) or KIP-848's consumer protocol.
    pub protocol: GroupProtocol,
    /// `group.remote.assignor`: the coordinator's assignor for the consumer protocol
    /// (`uniform`, `range`; `None`: the broker's default, the first of its
    /// `group.consumer.assignors`).
    pub remote_assignor: Option<String>,
}

/// `group.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup/Heartbeat with a client-side assignor: every broker.
    #[default]
    Classic,
    /// KIP-848 (ConsumerGroupHeartbeat, broker-side assignment, member epochs): Kafka 4.0+.
    Consumer,
}

impl GroupProtocol {
    /// The setting's value.
    pub fn name(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }

    /// The protocol named `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<GroupProtocol> {
        match name.to_ascii_lowercase().as_str() {
            "classic" => Some(GroupProtocol::Classic),
            "consumer" => Some(GroupProtocol::Consumer),
            _ => None,
        }
    }
}

impl GroupConfig {
    /// The defaults of the Java client for group `group`.
    pub fn new(group: &str) -> GroupConfig {
        GroupConfig {
            group: group.to_owned(),
            instance_id: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            assignors: vec![Assignor::Range, Assignor::RoundRobin],
            rack: None,
            protocol: GroupProtocol::Classic,
            remote_assignor: None,
        }
    }

    /// Checks the settings against each other, as the Java client does at construction.
    pub fn validate(&self) -> Result<(), String> {
        if self.group.is_empty() {
            return Err("group.id is empty: a group member needs a group".to_owned());
        }
        if self.assignors.is_empty() {
            return Err("partition.assignment.strategy names no assignor".to_owned());
        }
        if self.heartbeat_interval >= self.session_timeout {
            return Err(format!(
                "heartbeat.interval.ms ({}) must be lower than session.timeout.ms ({})",
                self.heartbeat_interval.as_millis(),
                self.session_timeout.as_millis()
            ));
        }
        if self.instance_id.as_deref() == Some("") {
            return Err("group.instance.id is empty".to_owned());
        }
        if self.remote_assignor.as_deref() == Some("") {
            return Err("group.remote.assignor is empty".to_owned());
        }
        if self.remote_assignor.is_some() && self.protocol == GroupProtocol::Classic {
            return Err(
                "group.remote.assignor is a setting of group.protocol=consumer (the classic \
                 protocol's members assign: partition.assignment.strategy)"
                    .to_owned(),
            );
        }
        Ok(())
    }
}
