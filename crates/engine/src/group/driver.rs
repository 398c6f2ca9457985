//! The one member driver both protocols share: a [`Member`] is a protocol's state machine
//! ([`MemberState`]) behind a lock, the coordinator ([`Coordinator`]), and one heartbeat task.
//! What differs between the protocols is only the exchanges with the coordinator, which each
//! protocol's driver file implements as a [`Protocol`]: the join (classic: JoinGroup and
//! SyncGroup; KIP-848: the epoch-0 heartbeat and the reconciliation), one heartbeat, and the
//! leave. Everything else is here, once: the accessors the stream and the stores read, the
//! wake-up the stream waits on between batches, the answer no rejoin fixes, and the heartbeat
//! loop that reads the member's clocks ([`MemberState::tick`]) and acts on what they say.
//!
//! One exchange with the coordinator at a time: a join holds the driver's `exchange` for its
//! whole round (classic) or each heartbeat it sends (KIP-848), a heartbeat or a leave for its
//! request (taken once it has a connection, so a slow connect holds nothing up), and the
//! heartbeat task does not read the clocks or beat while a join holds it, so a heartbeat never
//! overtakes a join's answer and a classic member does not heartbeat a generation it is
//! leaving.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use kdirect_proto::kafka_protocol::messages::ApiKey;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::group::common::{fault_error, lock, Fault, Generation, Joined, Liveness, State, Tick};
use crate::group::coordinator::Coordinator;
use crate::group::GroupConfig;
use crate::plan::TopicPartition;

/// What the driver reads and tells a protocol's state machine (sans-IO: the time is passed
/// in). [`classic::Membership`](crate::group::classic::Membership) and
/// [`kip848::ConsumerMembership`](crate::group::kip848::ConsumerMembership) implement it.
pub trait MemberState: std::fmt::Debug + Send + 'static {
    /// What leaving tells the coordinator: the generation to leave (classic LeaveGroup) or
    /// the leaving heartbeat (KIP-848).
    type Leave: Send + 'static;

    /// The group's settings.
    fn config(&self) -> &GroupConfig;

    /// Where the member stands.
    fn state(&self) -> &State;

    /// Where the member stands, to change (the shared rules below: [`lose`](Self::lose)).
    fn state_mut(&mut self) -> &mut State;

    /// The member's two clocks, to change ([`handed_out`](Self::handed_out),
    /// [`polling`](Self::polling)).
    fn liveness_mut(&mut self) -> &mut Liveness;

    /// The member id (classic: empty before the first join).
    fn member_id(&self) -> &str;

    /// The partitions the member owns.
    fn assigned(&self) -> BTreeSet<TopicPartition>;

    /// Whether the stream must join before it reads on: never joined, lost, a rebalance asked
    /// for (classic) or a target assignment to reconcile (KIP-848).
    fn needs_join(&self) -> bool {
        !matches!(self.state(), State::Stable)
    }

    /// Whether the member is in a generation (owns its partitions): heartbeats are due.
    fn in_group(&self) -> bool;

    /// The identity to commit under, while the member owns its partitions.
    fn generation(&self) -> Option<Generation>;

    /// Whether the member keeps its partitions while it rejoins (classic cooperative-sticky;
    /// KIP-848 always).
    fn is_cooperative(&self) -> bool;

    /// The member lost its partitions, for `reason` (a store refused a commit as fenced, a
    /// fencing answer): nothing may be committed until it rejoins.
    fn lose(&mut self, reason: String) {
        let state = self.state_mut();
        if !matches!(state, State::Unjoined) {
            *state = State::Lost(reason);
        }
    }

    /// The user was handed a batch at `now`: `max.poll.interval.ms` starts.
    fn handed_out(&mut self, now: Instant) {
        self.liveness_mut().handed_out(now);
    }

    /// The user asked for the next batch: it holds none.
    fn polling(&mut self) {
        self.liveness_mut().polling();
    }

    /// Reads the member's clocks at `now` (`max.poll.interval.ms`, the session) and applies
    /// what expired.
    fn tick(&mut self, now: Instant) -> Tick<Self::Leave>;

    /// How often heartbeats go (classic: `heartbeat.interval.ms`; KIP-848: the
    /// coordinator's interval).
    fn heartbeat_interval(&self) -> Duration;

    /// The member leaves the group (it is closing): it is unjoined, and this is what to tell
    /// the coordinator, if anything (nothing before a join, nothing for a classic static
    /// member, whose partitions wait for it).
    fn close(&mut self) -> Option<Self::Leave>;
}

/// A group protocol's exchanges with the coordinator; the [`Driver`] does the rest.
pub trait Protocol: Sized + Send + Sync + 'static {
    /// The protocol's state machine.
    type State: MemberState;

    /// A member that has not joined yet.
    fn new_state(config: GroupConfig) -> Self::State;

    /// Joins (or rejoins, or reconciles) subscribing to `topics`, with the coordinator's
    /// errors and lost connections retried for `default.api.timeout.ms`.
    fn join(
        d: &Driver<Self>,
        topics: &[String],
    ) -> impl Future<Output = Result<Joined, Error>> + Send;

    /// One heartbeat, its answer read into the state; takes the driver's `exchange` for its
    /// request (a classic member skips the beat if a join holds it).
    fn heartbeat(d: &Driver<Self>) -> impl Future<Output = ()> + Send;

    /// Tells the coordinator the member leaves, for `reason`; takes the driver's `exchange`
    /// for its request.
    fn leave(
        d: &Driver<Self>,
        leave: <Self::State as MemberState>::Leave,
        reason: &'static str,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// What a member's tasks share: its state machine, its coordinator, and the signals between
/// the heartbeat task and the stream.
#[derive(Debug)]
pub struct Driver<P: Protocol> {
    /// The protocol's state machine.
    pub(crate) state: Mutex<P::State>,
    /// The group's coordinator and the member's own connection to it.
    pub(crate) coordinator: Coordinator,
    /// One exchange with the coordinator at a time (see the module docs).
    pub(crate) exchange: tokio::sync::Mutex<()>,
    /// Bumped whenever the member comes to need the stream's join.
    changed: watch::Sender<u64>,
    /// An answer no rejoin fixes (FENCED_INSTANCE_ID, an authorization failure): the API
    /// that got it, from which coordinator.
    fatal: Mutex<Option<(ApiKey, BrokerName, Fault)>>,
}

impl<P: Protocol> Driver<P> {
    /// Tells whoever waits in [`Member::join_needed`] to look again.
    pub(crate) fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// The group id.
    pub(crate) fn group(&self) -> String {
        lock(&self.state).config().group.clone()
    }

    /// Keeps `fault`, `broker`'s answer to `api` that no rejoin fixes, for
    /// [`Member::fatal`], and wakes the stream; returns it as an error.
    pub(crate) fn fail(&self, api: ApiKey, broker: &BrokerName, fault: Fault) -> Error {
        let e = fault_error(&self.group(), broker.clone(), api, fault.clone());
        *lock(&self.fatal) = Some((api, broker.clone(), fault));
        self.wake();
        e
    }

    /// The answer no rejoin fixes, as an error.
    fn fatal(&self) -> Option<Error> {
        let group = self.group();
        lock(&self.fatal)
            .as_ref()
            .map(|(api, broker, f)| fault_error(&group, broker.clone(), *api, f.clone()))
    }
}

/// A member of a consumer group speaking protocol `P`. Dropping it stops its heartbeats; call
/// [`leave`](Self::leave) first to hand its partitions over at once.
#[derive(Debug)]
pub struct Member<P: Protocol> {
    driver: Arc<Driver<P>>,
    heartbeat: JoinHandle<()>,
}

impl<P: Protocol> Member<P> {
    /// A member of `config.group` on `cluster`; it joins on the first [`join`](Self::join).
    /// Starts the heartbeat task (on [`crate::io::handle`]: it beats while the caller's thread
    /// is busy with a batch, even on a current-thread runtime).
    pub fn new(cluster: Arc<Cluster>, config: GroupConfig) -> Result<Member<P>, Error> {
        config.validate().map_err(ErrorKind::Config)?;
        let (changed, _) = watch::channel(0);
        let driver = Arc::new(Driver {
            coordinator: Coordinator::new(cluster, &config.group),
            state: Mutex::new(P::new_state(config)),
            exchange: tokio::sync::Mutex::new(()),
            changed,
            fatal: Mutex::new(None),
        });
        let heartbeat = crate::io::spawn(heartbeats(Arc::downgrade(&driver)));
        Ok(Member { driver, heartbeat })
    }

    /// The group id.
    pub fn group(&self) -> String {
        self.driver.group()
    }

    /// The settings.
    pub fn config(&self) -> GroupConfig {
        lock(&self.driver.state).config().clone()
    }

    /// Whether the member must join before it reads on.
    pub fn needs_join(&self) -> bool {
        lock(&self.driver.state).needs_join()
    }

    /// Resolves once the member needs to join (at once if it does already).
    pub async fn join_needed(&self) {
        let mut rx = self.driver.changed.subscribe();
        loop {
            if self.needs_join() {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether the member keeps its partitions while it rejoins.
    pub fn is_cooperative(&self) -> bool {
        lock(&self.driver.state).is_cooperative()
    }

    /// The identity to commit under (generation or member epoch), while the member owns its
    /// partitions.
    pub fn generation(&self) -> Option<Generation> {
        lock(&self.driver.state).generation()
    }

    /// Why the member lost its partitions, if it did.
    pub fn lost(&self) -> Option<String> {
        match lock(&self.driver.state).state() {
            State::Lost(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// The member lost its partitions (a store refused its commit as fenced): the next batch
    /// rejoins.
    pub fn lose(&self, reason: impl Into<String>) {
        lock(&self.driver.state).lose(reason.into());
        self.driver.wake();
    }

    /// The member id (classic: empty before the first join).
    pub fn member_id(&self) -> String {
        lock(&self.driver.state).member_id().to_owned()
    }

    /// The partitions the member owns.
    pub fn assigned(&self) -> BTreeSet<TopicPartition> {
        lock(&self.driver.state).assigned()
    }

    /// The user was handed a batch: `max.poll.interval.ms` starts.
    pub fn handed_out(&self) {
        lock(&self.driver.state).handed_out(Instant::now());
    }

    /// The user asked for the next batch: it holds none.
    pub fn polling(&self) {
        lock(&self.driver.state).polling();
    }

    /// An answer that no rejoin fixes, as an error.
    pub fn fatal(&self) -> Option<Error> {
        self.driver.fatal()
    }

    /// Joins the group subscribing to `topics`; see [`Protocol::join`].
    pub async fn join(&self, topics: &[String]) -> Result<Joined, Error> {
        if let Some(e) = self.fatal() {
            return Err(e);
        }
        P::join(&self.driver, topics).await
    }

    /// Leaves the group, so that its partitions go to the other members at once rather than
    /// after the session timeout (a static member's wait for it, as KIP-345 and KIP-848 say).
    pub async fn leave(&self) -> Result<(), Error> {
        let d = &self.driver;
        let leave = lock(&d.state).close();
        d.wake();
        match leave {
            Some(l) => P::leave(d, l, "the consumer is closing").await,
            None => Ok(()),
        }
    }
}

impl<P: Protocol> Drop for Member<P> {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// The heartbeat task: reads the member's clocks more often than heartbeats go (a batch held
/// past `max.poll.interval.ms` is noticed within a quarter of it), acts on what expired, and
/// beats every heartbeat interval while the member is in a generation and nothing else talks
/// to the coordinator. Ends when the member is dropped.
async fn heartbeats<P: Protocol>(driver: Weak<Driver<P>>) {
    let mut last_beat: Option<Instant> = None;
    loop {
        let period = match driver.upgrade() {
            Some(d) => {
                let s = lock(&d.state);
                let poll = s.config().max_poll_interval;
                s.heartbeat_interval()
                    .min((poll / 4).max(Duration::from_millis(100)))
            }
            None => return,
        };
        tokio::time::sleep(period).await;
        let Some(d) = driver.upgrade() else { return };
        // A join (or a leave, or the join's own heartbeat) is talking to the coordinator:
        // its answers keep the member alive, and its outcome decides what comes next.
        if d.exchange.try_lock().is_err() {
            continue;
        }
        let now = Instant::now();
        let (tick, interval) = {
            let mut s = lock(&d.state);
            (s.tick(now), s.heartbeat_interval())
        };
        match tick {
            Tick::Alive => {}
            Tick::PollExpired { leave } => {
                d.wake();
                // Read only here: an ordinary tick copies nothing.
                let (group, member, max_poll) = {
                    let s = lock(&d.state);
                    let c = s.config();
                    (
                        c.group.clone(),
                        s.member_id().to_owned(),
                        c.max_poll_interval,
                    )
                };
                tracing::warn!(
                    group = group.as_str(),
                    member = member.as_str(),
                    "a batch was held longer than max.poll.interval.ms ({} ms): leaving the \
                     group; its commit will be refused",
                    max_poll.as_millis()
                );
                if let Some(l) = leave {
                    if let Err(e) = P::leave(&d, l, "max.poll.interval.ms exceeded").await {
                        tracing::warn!(group = group.as_str(), "leaving the group failed: {e}");
                    }
                }
                continue;
            }
            Tick::SessionExpired(_) => {
                d.wake();
                continue;
            }
        }
        if !lock(&d.state).in_group() || last_beat.is_some_and(|t| now - t < interval) {
            continue;
        }
        last_beat = Some(now);
        P::heartbeat(&d).await;
    }
}
