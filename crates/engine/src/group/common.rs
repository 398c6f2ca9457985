//! What both group protocols share: where a member stands ([`State`]), the identity a commit is
//! made under ([`Generation`]), an answer no rejoin fixes ([`Fault`]), the outcome of a join
//! ([`Joined`]), and the member's two clocks ([`Liveness`]: `max.poll.interval.ms` and the
//! session), decided here with the time passed in, so that each protocol's state machine
//! applies the same rules and its tests run over virtual time.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kdirect_proto::kafka_protocol::messages::ApiKey;
use kdirect_proto::ErrorCode;

use crate::error::{BrokerName, Error, ErrorKind};
use crate::plan::TopicPartition;

/// Where the member stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Not in a generation (never joined, or left).
    Unjoined,
    /// In a generation with an assignment.
    Stable,
    /// In a generation whose coordinator asked everyone to join again (a member joined or
    /// left, the subscription changed): the assignment is still ours, and commits under it
    /// are still accepted, until the member rejoins.
    RejoinRequested,
    /// The generation is over for this member (its session expired, it held a batch past
    /// `max.poll.interval.ms`, the coordinator forgot it): its partitions may be someone
    /// else's already. Nothing may be committed under it.
    Lost(String),
}

/// An answer that no rejoin fixes, with its code and the coordinator's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The error code.
    pub code: ErrorCode,
    /// What the member could not read, when it is a decoding problem rather than a code.
    pub detail: Option<String>,
}

/// The identity a commit is made under (OffsetCommit's generation and member ids; under
/// KIP-848 the member epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The generation id (classic) or the member epoch (KIP-848).
    pub generation_id: i32,
    /// This member's id.
    pub member_id: String,
    /// `group.instance.id`, if static.
    pub instance_id: Option<String>,
}

/// The outcome of a join: this member's part of the new generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The generation id (classic) or the member epoch (KIP-848).
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

/// What a member's clocks say at a given time ([`Liveness::expired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// The user held a batch longer than `max.poll.interval.ms`: the member leaves the group
    /// (its commit will be refused), as the Java client's does.
    Poll,
    /// No heartbeat was answered for this long (the session deadline): the member gives its
    /// partitions up by itself, since the coordinator has given them to others by now.
    Session(Duration),
}

/// What a member's state machine decided when its clocks were read (`tick`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tick<L> {
    /// Nothing expired.
    Alive,
    /// The batch was held past `max.poll.interval.ms`: the member left its generation; `leave`
    /// is what to tell the coordinator (none for a classic static member, whose partitions
    /// wait for it).
    PollExpired {
        /// The LeaveGroup's identity (classic) or the leaving heartbeat (KIP-848).
        leave: Option<L>,
    },
    /// No heartbeat was answered within this deadline: the member gave its partitions up.
    SessionExpired(Duration),
}

/// A member's two clocks, as the Java client keeps them: `max.poll.interval.ms` runs from the
/// moment a batch is handed out until the user asks for the next one, and the session from the
/// coordinator's last answer. Pure: every method takes the time, so the rules are tested over
/// virtual time and both protocols' state machines apply them alike.
#[derive(Debug, Clone, Default)]
pub struct Liveness {
    /// Since when the user holds a batch.
    holding_since: Option<Instant>,
    /// The coordinator's last answer (a heartbeat's, a join's); none before the first.
    last_answer: Option<Instant>,
}

impl Liveness {
    /// Clocks not started: no batch held, no answer yet (no session to expire).
    pub fn new() -> Liveness {
        Liveness::default()
    }

    /// The user was handed a batch at `now`: `max.poll.interval.ms` starts.
    pub fn handed_out(&mut self, now: Instant) {
        self.holding_since = Some(now);
    }

    /// The user asked for the next batch: it holds none.
    pub fn polling(&mut self) {
        self.holding_since = None;
    }

    /// The coordinator answered at `now` (a heartbeat, a join).
    pub fn answered(&mut self, now: Instant) {
        self.last_answer = Some(self.last_answer.map_or(now, |t| t.max(now)));
    }

    /// What has expired at `now`, if anything: the batch held past `max_poll` first (the
    /// member must leave), then no answer for longer than `session`.
    pub fn expired(&self, now: Instant, max_poll: Duration, session: Duration) -> Option<Expired> {
        let since = |t: Instant| now.saturating_duration_since(t);
        if self.holding_since.is_some_and(|t| since(t) > max_poll) {
            return Some(Expired::Poll);
        }
        self.last_answer
            .is_some_and(|t| since(t) > session)
            .then_some(Expired::Session(session))
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// A coordinator's error code as an error naming the coordinator (retriable when the code
/// is).
pub(crate) fn code_error(broker: &BrokerName, api: ApiKey, code: ErrorCode) -> Error {
    ErrorKind::Broker {
        broker: broker.clone(),
        api,
        code,
    }
    .into()
}

/// An answer no rejoin fixes, as an error naming the group and the coordinator.
pub(crate) fn fault_error(group: &str, broker: BrokerName, api: ApiKey, f: Fault) -> Error {
    ErrorKind::Group {
        group: group.to_owned(),
        broker,
        api,
        code: f.code,
        message: f.detail,
    }
    .into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_secs(300);
    const SESSION: Duration = Duration::from_secs(45);

    #[test]
    fn a_batch_held_past_max_poll_interval_expires_the_poll_clock_only_then() {
        let t0 = Instant::now();
        let mut l = Liveness::new();
        l.answered(t0);
        l.handed_out(t0);
        // Heartbeats keep the session alive meanwhile.
        l.answered(t0 + POLL);
        assert_eq!(l.expired(t0 + POLL, POLL, SESSION), None);
        assert_eq!(
            l.expired(t0 + POLL + Duration::from_millis(1), POLL, SESSION),
            Some(Expired::Poll)
        );
        // Asking for the next batch stops the clock.
        l.polling();
        l.answered(t0 + POLL * 2);
        assert_eq!(l.expired(t0 + POLL * 2, POLL, SESSION), None);
    }

    #[test]
    fn no_answer_for_the_session_expires_the_session() {
        let t0 = Instant::now();
        let mut l = Liveness::new();
        // No session before the first answer.
        assert_eq!(l.expired(t0 + SESSION * 10, POLL, SESSION), None);
        l.answered(t0);
        assert_eq!(l.expired(t0 + SESSION, POLL, SESSION), None);
        let late = t0 + SESSION + Duration::from_millis(1);
        assert_eq!(
            l.expired(late, POLL, SESSION),
            Some(Expired::Session(SESSION))
        );
        l.answered(late);
        assert_eq!(l.expired(late + SESSION, POLL, SESSION), None);
        // An answer read late (an older time) does not move the clock back.
        l.answered(t0);
        assert_eq!(l.expired(late + SESSION, POLL, SESSION), None);
    }

    #[test]
    fn the_poll_clock_wins_when_both_expired() {
        let t0 = Instant::now();
        let mut l = Liveness::new();
        l.answered(t0);
        l.handed_out(t0);
        assert_eq!(l.expired(t0 + POLL * 2, POLL, SESSION), Some(Expired::Poll));
    }
}
