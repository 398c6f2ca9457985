//! [`GroupMember`]: one API over both group protocols, so that the stream and the `kafka`
//! store do not care which one `group.protocol` chose.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::classic::ClassicMember;
use super::common::{Generation, Joined};
use super::kip848::ConsumerMember;
use super::{GroupConfig, GroupProtocol};
use crate::cluster::Cluster;
use crate::error::Error;
use crate::plan::TopicPartition;

/// A member of a consumer group, speaking the protocol of its `group.protocol`: see the module
/// docs of [`super`]. Dropping it stops its heartbeats; call [`leave`](Self::leave) first to
/// hand its partitions over at once.
#[derive(Debug)]
pub enum GroupMember {
    /// The classic protocol ([`super::classic`]).
    Classic(ClassicMember),
    /// KIP-848's consumer protocol ([`super::kip848`]).
    Consumer(ConsumerMember),
}

macro_rules! each {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            GroupMember::Classic($m) => $e,
            GroupMember::Consumer($m) => $e,
        }
    };
}

impl GroupMember {
    /// A member of `config.group` on `cluster`; it joins on the first [`join`](Self::join).
    /// Starts the heartbeat task (on [`crate::io::handle`]: it beats while the caller's thread
    /// is busy with a batch, even on a current-thread runtime).
    pub fn new(cluster: Arc<Cluster>, config: GroupConfig) -> Result<GroupMember, Error> {
        Ok(match config.protocol {
            GroupProtocol::Classic => GroupMember::Classic(ClassicMember::new(cluster, config)?),
            GroupProtocol::Consumer => GroupMember::Consumer(ConsumerMember::new(cluster, config)?),
        })
    }

    /// The group id.
    pub fn group(&self) -> String {
        each!(self, m => m.group())
    }

    /// The settings.
    pub fn config(&self) -> GroupConfig {
        each!(self, m => m.config())
    }

    /// Whether the member must join before it reads on: never joined, its partitions lost, a
    /// rebalance asked for (classic) or a target assignment to reconcile (consumer).
    pub fn needs_join(&self) -> bool {
        each!(self, m => m.needs_join())
    }

    /// Resolves once the member needs to join (at once if it does already).
    pub async fn join_needed(&self) {
        each!(self, m => m.join_needed().await)
    }

    /// Whether the member keeps its partitions while it rejoins: cooperative-sticky, and the
    /// consumer protocol always.
    pub fn is_cooperative(&self) -> bool {
        each!(self, m => m.is_cooperative())
    }

    /// The identity to commit under (generation or member epoch), while the member owns its
    /// partitions.
    pub fn generation(&self) -> Option<Generation> {
        each!(self, m => m.generation())
    }

    /// Why the member lost its partitions, if it did.
    pub fn lost(&self) -> Option<String> {
        each!(self, m => m.lost())
    }

    /// The member lost its partitions (a store refused its commit as fenced): the next batch
    /// rejoins.
    pub fn lose(&self, reason: impl Into<String>) {
        each!(self, m => m.lose(reason))
    }

    /// The member id (classic: empty before the first join).
    pub fn member_id(&self) -> String {
        each!(self, m => m.member_id())
    }

    /// The partitions the member owns.
    pub fn assigned(&self) -> BTreeSet<TopicPartition> {
        each!(self, m => m.assigned())
    }

    /// The user was handed a batch: `max.poll.interval.ms` starts.
    pub fn handed_out(&self) {
        each!(self, m => m.handed_out())
    }

    /// The user asked for the next batch: it holds none.
    pub fn polling(&self) {
        each!(self, m => m.polling())
    }

    /// An answer that no rejoin fixes, as an error.
    pub fn fatal(&self) -> Option<Error> {
        each!(self, m => m.fatal())
    }

    /// Joins the group subscribing to `topics` (classic: JoinGroup and SyncGroup; consumer:
    /// the epoch-0 heartbeat if not in the group, then the reconciliation of its target
    /// assignment).
    pub async fn join(&self, topics: &[String]) -> Result<Joined, Error> {
        each!(self, m => m.join(topics).await)
    }

    /// Leaves the group, so that its partitions go to the other members at once.
    pub async fn leave(&self) -> Result<(), Error> {
        each!(self, m => m.leave().await)
    }
}
