//! The engine's error type: `Error(Box<ErrorKind>)` with [`Error::kind`], so that a `Result`
//! stays one pointer wide on the hot path and the kinds can grow (`#[non_exhaustive]`).
//!
//! Every kind names where it happened: the broker (`node 1 at 127.0.0.1:9092`), and the
//! topic and partition where there is one.

use std::fmt;
use std::time::Duration;

use kdirect_proto::kafka_protocol::messages::ApiKey;
use kdirect_proto::{ErrorCode, FrameError, ProtoError};

/// An engine error. See [`ErrorKind`].
#[derive(Debug)]
pub struct Error(Box<ErrorKind>);

impl Error {
    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0
    }

    /// Consumes the error, giving its kind.
    pub fn into_kind(self) -> ErrorKind {
        *self.0
    }

    /// The error under any retry summary ([`ErrorKind::GaveUp`]): what actually failed.
    pub fn root(&self) -> &Error {
        match self.kind() {
            ErrorKind::GaveUp { last, .. } => last.root(),
            _ => self,
        }
    }

    /// `self` as given up after `attempts` over `elapsed` (one summary, however many times
    /// it is wrapped).
    pub fn gave_up(self, attempts: u32, elapsed: Duration) -> Error {
        let last = match *self.0 {
            ErrorKind::GaveUp { last, .. } => last,
            other => Error(Box::new(other)),
        };
        ErrorKind::GaveUp {
            attempts,
            elapsed,
            last,
        }
        .into()
    }

    /// Whether retrying the same operation (possibly after a metadata refresh or reconnect)
    /// may succeed.
    pub fn is_retriable(&self) -> bool {
        match self.kind() {
            ErrorKind::Connect { .. }
            | ErrorKind::Disconnected { .. }
            | ErrorKind::Timeout { .. }
            | ErrorKind::NoLeader { .. }
            | ErrorKind::UnknownBroker { .. }
            | ErrorKind::NoProgress { .. }
            // Every bootstrap address refused: the cluster may be restarting.
            | ErrorKind::Bootstrap { .. } => true,
            ErrorKind::Partition { code, .. }
            | ErrorKind::Broker { code, .. }
            | ErrorKind::TopicError { code, .. } => code.is_retriable(),
            ErrorKind::GaveUp { last, .. } => last.is_retriable(),
            _ => false,
        }
    }
}

impl From<ErrorKind> for Error {
    fn from(k: ErrorKind) -> Self {
        Error(Box::new(k))
    }
}

impl From<crate::plan::PlanError> for Error {
    fn from(e: crate::plan::PlanError) -> Self {
        ErrorKind::Plan(e).into()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A broker as errors name it: node id (if known) and address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerName {
    /// Node id; `None` for a bootstrap address before Metadata named it.
    pub node_id: Option<i32>,
    /// `host:port`.
    pub addr: String,
}

impl fmt::Display for BrokerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node_id {
            Some(id) => write!(f, "broker {id} at {}", self.addr),
            None => write!(f, "bootstrap broker {}", self.addr),
        }
    }
}

/// What to do about a topic-level Metadata error, for the ones with one clear fix.
fn topic_error_hint(code: ErrorCode) -> &'static str {
    match code.0 {
        29 => ": this principal may not read the topic (grant it DESCRIBE and READ on the topic)",
        5 => ": the topic has no leader yet (being created, or its brokers are down)",
        _ => "",
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The TCP connection could not be made.
    #[error("cannot connect to {broker}: {source}")]
    Connect {
        /// The broker.
        broker: BrokerName,
        /// The OS error.
        source: std::io::Error,
    },
    /// The connection dropped (or was closed) with the request in flight.
    #[error("connection to {broker} lost: {reason}")]
    Disconnected {
        /// The broker.
        broker: BrokerName,
        /// Why, as far as known.
        reason: String,
    },
    /// No response within `request.timeout.ms`.
    #[error("{api:?} request to {broker} timed out after {} ms", after.as_millis())]
    Timeout {
        /// The broker.
        broker: BrokerName,
        /// The API of the request.
        api: ApiKey,
        /// The timeout that expired.
        after: Duration,
    },
    /// Bytes from the broker could not be framed.
    #[error("bad frame from {broker}: {source}")]
    Frame {
        /// The broker.
        broker: BrokerName,
        /// The framing error.
        source: FrameError,
    },
    /// A request could not be encoded or a response decoded, or versions do not match.
    #[error("{broker}: {source}")]
    Protocol {
        /// The broker.
        broker: BrokerName,
        /// The protocol error.
        source: ProtoError,
    },
    /// The broker answered with an error code for the whole request.
    #[error("{broker} answered {api:?} with {code}")]
    Broker {
        /// The broker.
        broker: BrokerName,
        /// The API.
        api: ApiKey,
        /// The error code.
        code: ErrorCode,
    },
    /// The broker answered with an error code for one partition.
    #[error("{broker} answered {api:?} for {topic}-{partition} with {code}")]
    Partition {
        /// The broker.
        broker: BrokerName,
        /// The API.
        api: ApiKey,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The error code.
        code: ErrorCode,
    },
    /// No bootstrap broker could be reached.
    #[error("no bootstrap broker reachable: {}", tried.iter().map(|(a, e)| format!("{a}: {e}")).collect::<Vec<_>>().join("; "))]
    Bootstrap {
        /// Each address tried, with why it failed.
        tried: Vec<(String, String)>,
    },
    /// The topic does not exist.
    #[error("unknown topic '{topic}'")]
    UnknownTopic {
        /// The topic.
        topic: String,
    },
    /// Metadata answered a topic-level error other than "unknown topic" (an authorization
    /// failure, LEADER_NOT_AVAILABLE while the topic is being created, ...): reported as
    /// itself, retried when retriable.
    #[error("Metadata for topic '{topic}' answered {code}{}", topic_error_hint(*code))]
    TopicError {
        /// The topic.
        topic: String,
        /// The topic-level error code.
        code: ErrorCode,
    },
    /// The partition does not exist.
    #[error("unknown partition {topic}-{partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A topic was deleted and re-created under the same name while it was read: its topic id
    /// (KIP-516) changed, so positions in the old topic mean nothing in the new one.
    #[error(
        "topic '{topic}' was deleted and re-created (topic id {previous} is now {now}): \
         positions in the old topic do not apply to the new one; reset them (kdirect offsets \
         reset) or set failOnDataLoss=false to read the new topic from its start"
    )]
    TopicRecreated {
        /// The topic.
        topic: String,
        /// The topic id seen before, in hex.
        previous: String,
        /// The topic id now, in hex.
        now: String,
    },
    /// The partition has no leader right now, or its leader is not among the known brokers.
    #[error("no leader for {topic}-{partition}")]
    NoLeader {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// Fetching a range failed with a partition error.
    #[error("{broker} answered Fetch for {topic}-{partition} at offset {at} (range [{from}, {until})) with {code}")]
    Range {
        /// The broker.
        broker: BrokerName,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The range's first offset.
        from: i64,
        /// The range's end (exclusive).
        until: i64,
        /// The offset the failing request fetched at.
        at: i64,
        /// The error code.
        code: ErrorCode,
    },
    /// Fetched bytes could not be decoded.
    #[error("bad record data from {broker} for {topic}-{partition}: {source}")]
    Decode {
        /// The broker.
        broker: BrokerName,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The decoder's error (byte position, base offset, what failed).
        source: crate::record::DecodeError,
    },
    /// The planner refused to plan (no position, data loss, bad input).
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    /// Fetched data needs more memory than the whole budget.
    #[error("{what} needs more than the memory budget ({needed} > {budget} bytes): {fix}")]
    BudgetExceeded {
        /// What needs the memory: the batch's data, or one record batch (with its
        /// topic-partition and offset).
        what: String,
        /// Bytes it would hold.
        needed: usize,
        /// The budget (`memory.budget.bytes`).
        budget: usize,
        /// The one setting that helps.
        fix: &'static str,
    },
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A partition's leader is a broker the metadata's broker list does not name (the
    /// metadata is changing): retried after a refresh.
    #[error("broker {node_id} is not in the metadata's broker list")]
    UnknownBroker {
        /// The node id.
        node_id: i32,
    },
    /// A range reaches past the end of its partition's log (the log was truncated after the
    /// batch was planned, or the plan is wrong).
    #[error(
        "{broker}: range {topic}-{partition} [{from}, {until}) reaches past the partition's \
         end {end}"
    )]
    PastEnd {
        /// The broker.
        broker: BrokerName,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The range's first offset.
        from: i64,
        /// The range's end (exclusive).
        until: i64,
        /// The partition's end (high watermark, or last stable offset under read_committed).
        end: i64,
    },
    /// Fetch answers that never move a partition's position (no data for it, no whole batch,
    /// the partition left out): retried with backoff, then reported.
    #[error("{broker}: no progress fetching {topic}-{partition} at offset {offset}: {reason}")]
    NoProgress {
        /// The broker asked last.
        broker: BrokerName,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The position that did not move.
        offset: i64,
        /// What the answers held.
        reason: String,
    },
    /// Retries ran out (`default.api.timeout.ms`): the last error, with how many attempts
    /// were made over how long.
    #[error("{last} (gave up after {attempts} attempts over {:.1} s)", elapsed.as_secs_f64())]
    GaveUp {
        /// Attempts made, the first included.
        attempts: u32,
        /// From the first failure to giving up.
        elapsed: Duration,
        /// The last attempt's error.
        last: Error,
    },
    /// A task of the engine failed (panicked or was cancelled), or a resource it waits on
    /// was closed.
    #[error("{what} failed: {reason}")]
    Task {
        /// What the task did.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
}
