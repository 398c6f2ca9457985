//! The facade's one error type: what a [`DirectStream`](crate::DirectStream) loop meets, so
//! that the loop is `?` only.
//!
//! [`Error`] is one pointer wide (csv's shape: `Error(Box<Kind>)`) and answers the questions a
//! loop asks of it — [`is_retriable`](Error::is_retriable), [`is_fenced`](Error::is_fenced),
//! [`data_loss`](Error::data_loss), [`broker`](Error::broker),
//! [`partition`](Error::partition) — so that a caller rarely needs to match on where it came
//! from ([`Error::kind`]).

use std::fmt;

use kdirect_commit::StoreError;
use kdirect_engine::error::BrokerName;
use kdirect_engine::{ErrorKind as EngineKind, LostOffsets};

use crate::admin::AdminError;
use crate::sink::SinkError;

/// An error from a [`DirectStream`](crate::DirectStream) or a [sink](crate::sink). See
/// [`Kind`] for where it came from and the methods for what to do about it.
#[derive(Debug)]
pub struct Error(Box<Kind>);

/// Where an [`Error`] came from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Kind {
    /// From the engine: connections, metadata, ListOffsets, Fetch, planning, group
    /// membership, and record data that does not decode ([`EngineKind::Decode`], which names
    /// the broker, the topic and partition, the batch's offset and the byte position).
    #[error(transparent)]
    Engine(kdirect_engine::Error),
    /// From the offset store: load, plan log, commit (a compare-and-set conflict included).
    #[error(transparent)]
    Store(StoreError),
    /// From a sink ([`crate::sink`]): writing or committing a batch's output.
    #[error(transparent)]
    Sink(SinkError),
    /// The stream was used in an order that would break its guarantees.
    #[error(transparent)]
    Misuse(Misuse),
    /// An administration request ([`crate::admin`]) refused before anything was written.
    #[error(transparent)]
    Admin(AdminError),
}

/// A call out of order, or a stream put together in a way that cannot keep its guarantees.
/// Each is a bug in the calling code, not a condition to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Misuse {
    /// A store that logs each batch's plan before it runs (a checkpoint directory, ZooKeeper,
    /// the Parquet sink's log) handed to a stream in a consumer group: that log orders one
    /// writer's batches.
    #[error(
        "{store} cannot be shared by the members of a group: it logs each batch's plan before \
         the batch runs (a checkpoint directory, ZooKeeper), and that log orders one stream's \
         batches (one writer, as in Spark). Use --store kafka (the group's offsets, \
         at-least-once), a SQL store or --sink delta: (exactly-once) with --join, or drop \
         --join"
    )]
    StoreNotForGroups {
        /// The store, as it describes itself.
        store: String,
    },
    /// The next batch was asked for while a chunked batch has chunks not read yet.
    #[error(
        "batch {batch} has chunks not read yet: read them (next_chunk, or \
         DirectStream::try_for_each_record) before asking for the next batch"
    )]
    ChunksUnread {
        /// The batch.
        batch: u64,
    },
    /// A chunked batch was dropped before all its chunks were read; the stream cannot go on
    /// without skipping the rest of it.
    #[error(
        "batch {batch} was released before all its chunks were read: the stream cannot go on \
         without skipping the rest of it; build a new stream"
    )]
    Released {
        /// The batch.
        batch: u64,
    },
    /// The next batch was asked for while the one handed out is not committed (a second
    /// logged plan over an uncommitted one would lose the first on a restart).
    #[error(
        "batch {batch} was handed out and not committed: commit it before asking for the next \
         batch"
    )]
    NotCommitted {
        /// The batch handed out.
        batch: u64,
    },
    /// A batch that is not the one this stream is reading (another stream's, or an old one).
    #[error("batch {batch} is not the batch this stream is reading")]
    NotReading {
        /// The batch given.
        batch: u64,
    },
    /// A chunked batch committed (or begun) before all its chunks were read.
    #[error(
        "batch {batch} cannot be {action} before all its chunks are read (next_chunk): {} left",
        left.join(", ")
    )]
    ChunksLeft {
        /// The batch.
        batch: u64,
        /// What was asked: `committed`, `begun`.
        action: &'static str,
        /// The ranges not read yet, as `topic-partition [from, until)`.
        left: Vec<String>,
    },
    /// [`DirectStream::begin`](crate::DirectStream::begin) on a stream whose store is not
    /// transactional (SQL).
    #[error(
        "begin needs a SQL store (sqlite:, postgres://, mysql://); with other stores, write the \
         output and call commit"
    )]
    NotTransactional,
}

impl Error {
    /// Where the error came from.
    pub fn kind(&self) -> &Kind {
        &self.0
    }

    /// Consumes the error, giving where it came from.
    pub fn into_kind(self) -> Kind {
        *self.0
    }

    /// The engine's error kind, when the error came from the engine (decode errors
    /// included).
    pub fn engine_kind(&self) -> Option<&EngineKind> {
        match self.kind() {
            Kind::Engine(e) => Some(e.kind()),
            _ => None,
        }
    }

    /// The misuse, when the error is one.
    pub fn misuse(&self) -> Option<&Misuse> {
        match self.kind() {
            Kind::Misuse(m) => Some(m),
            _ => None,
        }
    }

    /// Whether a new stream, built again and resumed from the store, may succeed where this
    /// one failed: a broker or store unreachable, a connection dropped, a timeout, a leader
    /// moving, a retriable broker code. (The stream already retried within
    /// `default.api.timeout.ms` before giving up.) False for data loss, bad record data,
    /// authentication and authorization failures, conflicts, fencing and misuse.
    pub fn is_retriable(&self) -> bool {
        match self.kind() {
            Kind::Engine(e) => e.is_retriable(),
            Kind::Store(s) => s.is_retriable(),
            Kind::Sink(_) | Kind::Misuse(_) | Kind::Admin(_) => false,
        }
    }

    /// True when this stream no longer owns the batch's partitions: the group moved them to
    /// another member (its session expired, it held the batch past
    /// `max.poll.interval.ms`, a newer generation), or the store's compare-and-set found
    /// another writer's commit. The batch is not committed and its output must not be
    /// published; in a group the stream rejoins at its next batch.
    pub fn is_fenced(&self) -> bool {
        match self.kind() {
            Kind::Engine(e) => e.is_fenced(),
            Kind::Store(s) => s.is_fenced(),
            Kind::Sink(_) | Kind::Misuse(_) | Kind::Admin(_) => false,
        }
    }

    /// True for data loss: offsets that can never be read ([`data_loss`](Self::data_loss)
    /// names them).
    pub fn is_data_loss(&self) -> bool {
        self.data_loss().is_some()
    }

    /// The offsets that can never be read, when the error is data loss (retention removed a
    /// range before it was read, a log truncated below a position, under
    /// `failOnDataLoss=true`).
    pub fn data_loss(&self) -> Option<LostOffsets<'_>> {
        match self.kind() {
            Kind::Engine(e) => e.data_loss(),
            _ => None,
        }
    }

    /// True for record data that does not decode (a CRC mismatch, a truncated or malformed
    /// record, offsets that contradict their batch).
    pub fn is_decode(&self) -> bool {
        matches!(self.engine_kind(), Some(EngineKind::Decode { .. }))
    }

    /// The broker the error concerns, where there is one.
    pub fn broker(&self) -> Option<&BrokerName> {
        match self.kind() {
            Kind::Engine(e) => e.broker(),
            _ => None,
        }
    }

    /// The topic-partition the error concerns, where the engine names one.
    pub fn partition(&self) -> Option<(&str, i32)> {
        match self.kind() {
            Kind::Engine(e) => e.partition(),
            _ => None,
        }
    }

    /// The refusal, when an administration request ([`crate::admin`]) was refused.
    pub fn admin(&self) -> Option<&AdminError> {
        match self.kind() {
            Kind::Admin(a) => Some(a),
            _ => None,
        }
    }

    /// The store's error, when the error came from the offset store.
    pub fn store(&self) -> Option<&StoreError> {
        match self.kind() {
            Kind::Store(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.0)
    }
}

impl From<Kind> for Error {
    fn from(k: Kind) -> Self {
        Error(Box::new(k))
    }
}

impl From<kdirect_engine::Error> for Error {
    fn from(e: kdirect_engine::Error) -> Self {
        Kind::Engine(e).into()
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Kind::Store(e).into()
    }
}

impl From<SinkError> for Error {
    fn from(e: SinkError) -> Self {
        Kind::Sink(e).into()
    }
}

impl From<AdminError> for Error {
    fn from(e: AdminError) -> Self {
        Kind::Admin(e).into()
    }
}

impl From<Misuse> for Error {
    fn from(m: Misuse) -> Self {
        Kind::Misuse(m).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kdirect_commit::StoreErrorKind;
    use kdirect_engine::plan::{DataLossReason, PlanError};
    use kdirect_engine::ErrorKind;

    fn broker() -> BrokerName {
        BrokerName {
            node_id: Some(1),
            addr: "127.0.0.1:9092".into(),
        }
    }

    #[test]
    fn one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn data_loss_names_the_offsets_even_after_retries() {
        let e = kdirect_engine::Error::from(PlanError::DataLoss {
            topic: "t".into(),
            partition: 3,
            lost_from: 10,
            lost_until: 25,
            reason: DataLossReason::BelowLogStart,
        });
        let e = Error::from(e.gave_up(3, std::time::Duration::from_secs(1)));
        assert!(e.is_data_loss());
        let lost = e.data_loss().expect("data loss");
        assert_eq!((lost.topic, lost.partition, lost.offsets), ("t", 3, 10..25));
        assert_eq!(e.partition(), Some(("t", 3)));
        assert!(!e.is_retriable() && !e.is_fenced());
    }

    #[test]
    fn a_range_past_the_end_loses_what_lies_past_it() {
        let e = Error::from(kdirect_engine::Error::from(ErrorKind::PastEnd {
            broker: broker(),
            topic: "t".into(),
            partition: 0,
            from: 100,
            until: 200,
            end: 150,
        }));
        assert_eq!(e.data_loss().map(|l| l.offsets), Some(150..200));
        assert_eq!(e.broker(), Some(&broker()));
    }

    #[test]
    fn fenced_from_the_group_or_the_store() {
        let member = Error::from(kdirect_engine::Error::from(ErrorKind::NotAMember {
            group: "g".into(),
            member_id: "m".into(),
            batch: 4,
            reason: "session expired".into(),
        }));
        assert!(member.is_fenced() && !member.is_retriable() && !member.is_data_loss());
        let store = Error::from(StoreError::from(StoreErrorKind::Fenced {
            store: "kafka group 'g'".into(),
            reason: "generation 3 is not 4".into(),
        }));
        assert!(store.is_fenced() && store.store().is_some());
    }

    #[test]
    fn retriable_from_the_engine_and_the_store() {
        let timeout = Error::from(kdirect_engine::Error::from(ErrorKind::Timeout {
            broker: broker(),
            api: kdirect_proto::kafka_protocol::messages::ApiKey::Fetch,
            after: std::time::Duration::from_secs(30),
        }));
        assert!(timeout.is_retriable() && timeout.broker().is_some());
        let io = Error::from(StoreError::from(StoreErrorKind::Io {
            path: "/x".into(),
            op: "write",
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        }));
        assert!(!io.is_retriable());
        let misuse = Error::from(Misuse::NotCommitted { batch: 2 });
        assert!(!misuse.is_retriable());
        assert_eq!(misuse.misuse(), Some(&Misuse::NotCommitted { batch: 2 }));
        assert_eq!(
            misuse.to_string(),
            "batch 2 was handed out and not committed: commit it before asking for the next batch"
        );
    }

    #[test]
    fn released_message_reads_as_one_sentence() {
        let m = Misuse::Released { batch: 7 }.to_string();
        assert!(!m.contains("  "), "{m}");
    }
}
