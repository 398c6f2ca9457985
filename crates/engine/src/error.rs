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
            // A TLS handshake closed by a broker the metadata named (so this client reached
            // the cluster with these settings before) is a broker restarting; the same from a
            // bootstrap address is a plaintext port, and retrying would only hide that.
            ErrorKind::Tls {
                broker,
                problem: TlsProblem::NotTls { .. },
            } => broker.node_id.is_some(),
            _ => false,
        }
    }
    /// True when this member lost its partitions ([`ErrorKind::NotAMember`]: its session
    /// expired, it held a batch past `max.poll.interval.ms`, or the group moved to a newer
    /// generation). The batch is not committed; the stream rejoins at its next batch.
    pub fn is_fenced(&self) -> bool {
        matches!(self.root().kind(), ErrorKind::NotAMember { .. })
    }

    /// The offsets that can never be read, when the error is data loss (retention or
    /// DeleteRecords removed a range before it was read, a log truncated below a position, a
    /// new partition not starting at 0: [`PlanError::DataLoss`](crate::plan::PlanError::DataLoss)),
    /// or a planned range that reaches past its partition's end ([`ErrorKind::PastEnd`]: the
    /// log was truncated under it, so `[end, until)` is gone).
    pub fn data_loss(&self) -> Option<LostOffsets<'_>> {
        match self.root().kind() {
            ErrorKind::Plan(crate::plan::PlanError::DataLoss {
                topic,
                partition,
                lost_from,
                lost_until,
                ..
            }) => Some(LostOffsets {
                topic,
                partition: *partition,
                offsets: *lost_from..*lost_until,
            }),
            ErrorKind::PastEnd {
                topic,
                partition,
                from,
                until,
                end,
                ..
            } => Some(LostOffsets {
                topic,
                partition: *partition,
                offsets: (*end).max(*from)..*until,
            }),
            _ => None,
        }
    }

    /// The broker the error concerns, where there is one (the last attempt's, after
    /// retries).
    pub fn broker(&self) -> Option<&BrokerName> {
        use ErrorKind as K;
        match self.root().kind() {
            K::Connect { broker, .. }
            | K::Disconnected { broker, .. }
            | K::Timeout { broker, .. }
            | K::Frame { broker, .. }
            | K::Protocol { broker, .. }
            | K::Broker { broker, .. }
            | K::Partition { broker, .. }
            | K::Range { broker, .. }
            | K::Decode { broker, .. }
            | K::PastEnd { broker, .. }
            | K::NoProgress { broker, .. }
            | K::Tls { broker, .. }
            | K::Sasl { broker, .. }
            | K::Group { broker, .. }
            | K::GroupProtocol { broker, .. } => Some(broker),
            _ => None,
        }
    }

    /// The topic-partition the error concerns, where there is one.
    pub fn partition(&self) -> Option<(&str, i32)> {
        use crate::plan::PlanError as P;
        use ErrorKind as K;
        match self.root().kind() {
            K::Partition {
                topic, partition, ..
            }
            | K::UnknownPartition { topic, partition }
            | K::NoLeader { topic, partition }
            | K::Range {
                topic, partition, ..
            }
            | K::Decode {
                topic, partition, ..
            }
            | K::PastEnd {
                topic, partition, ..
            }
            | K::NoProgress {
                topic, partition, ..
            }
            | K::Plan(
                P::DataLoss {
                    topic, partition, ..
                }
                | P::InvalidSnapshot {
                    topic, partition, ..
                }
                | P::DuplicatePartition { topic, partition },
            ) => Some((topic, *partition)),
            _ => None,
        }
    }
}

/// Offsets of one partition that can never be read; see [`Error::data_loss`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostOffsets<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
    /// The offsets lost, `[from, until)`.
    pub offsets: std::ops::Range<i64>,
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

/// What to do about a group error, for the ones with one clear fix.
fn group_error_hint(code: ErrorCode) -> &'static str {
    match code.0 {
        23 => {
            ": the group's members share no partition.assignment.strategy (kdirect speaks \
               range and roundrobin; Java's default list includes range), or a member of \
               another kind (not a consumer) uses the group id"
        }
        24 => ": the group id is empty or invalid",
        26 => {
            ": session.timeout.ms must lie within the broker's group.min.session.timeout.ms \
               and group.max.session.timeout.ms (6000 and 1800000 by default)"
        }
        30 => ": this principal may not use the group (grant it READ on the group)",
        81 => {
            ": the group has group.max.size members already (group.consumer.max.size for the \
               consumer protocol)"
        }
        82 => ": another member runs with the same group.instance.id (give each process its own)",
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
        /// Whether it is the batch's data (its ranges together) that needs the memory, which
        /// a smaller batch fixes; false for one stored record batch, which nothing but a
        /// larger budget fixes.
        whole_batch: bool,
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
    /// TLS with a broker failed, or the broker's port and `security.protocol` disagree about
    /// TLS.
    #[error("TLS with {broker}: {problem}")]
    Tls {
        /// The broker.
        broker: BrokerName,
        /// What failed.
        problem: TlsProblem,
    },
    /// SASL authentication with a broker failed.
    #[error("SASL {mechanism} authentication with {broker} failed: {problem}")]
    Sasl {
        /// The broker.
        broker: BrokerName,
        /// The mechanism (`sasl.mechanism`).
        mechanism: &'static str,
        /// What failed.
        problem: SaslProblem,
    },
    /// The group coordinator refused the member (JoinGroup, SyncGroup, Heartbeat,
    /// LeaveGroup) with an error the member cannot recover from by rejoining.
    #[error("group '{group}': {broker} answered {api:?} with {code}{}{}", message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default(), group_error_hint(*code))]
    Group {
        /// The group.
        group: String,
        /// The coordinator.
        broker: BrokerName,
        /// The API.
        api: ApiKey,
        /// The error code.
        code: ErrorCode,
        /// The coordinator's error message, if it sent one.
        message: Option<String>,
    },
    /// A group's coordinator could not be asked about the group: it speaks no version of the
    /// API kdirect does, or its answer is malformed or does not name the group.
    #[error("group '{group}': {broker}: {source}")]
    GroupProtocol {
        /// The group.
        group: String,
        /// The coordinator.
        broker: BrokerName,
        /// The protocol error.
        source: ProtoError,
    },
    /// This member lost its partitions before the batch was committed (its session expired,
    /// it held the batch past `max.poll.interval.ms`, or the group moved on to a newer
    /// generation): the commit is refused, and the next batch rejoins the group.
    #[error("member {member_id} of group '{group}' lost its partitions ({reason}): batch {batch} was not committed; the next batch rejoins the group")]
    NotAMember {
        /// The group.
        group: String,
        /// The member id it had.
        member_id: String,
        /// The batch whose commit was refused.
        batch: u64,
        /// Why.
        reason: String,
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

/// What went wrong with TLS (see [`ErrorKind::Tls`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsProblem {
    /// A plaintext client met a TLS port: the broker answered with a TLS alert.
    #[error("this port speaks TLS: set security.protocol=SSL (or SASL_SSL)")]
    PortSpeaksTls,
    /// A TLS client met a plaintext port: the broker closed the connection during the TLS
    /// handshake, or answered with bytes that are not TLS.
    #[error(
        "the broker does not speak TLS on this port ({detail}): set security.protocol=PLAINTEXT \
         (or SASL_PLAINTEXT), or connect to the broker's TLS listener"
    )]
    NotTls {
        /// What was seen.
        detail: String,
    },
    /// The broker's certificate chain does not lead to a trusted CA.
    #[error(
        "the broker's certificate is not signed by a trusted CA: set ssl.ca.location to the PEM \
         file of the CA that signed it"
    )]
    UnknownCa,
    /// The broker's certificate does not name the host connected to.
    #[error(
        "the broker's certificate is not valid for '{host}' (its subjectAltName does not name \
         it); connect by a name it has, or set ssl.endpoint.identification.algorithm=none"
    )]
    HostnameMismatch {
        /// The host connected to.
        host: String,
    },
    /// The broker's certificate (or one in its chain) has expired.
    #[error("the broker's certificate has expired")]
    Expired,
    /// The broker's certificate (or one in its chain) is not valid yet.
    #[error("the broker's certificate is not valid yet (check this machine's clock)")]
    NotYetValid,
    /// The broker's certificate was revoked.
    #[error("the broker's certificate was revoked")]
    Revoked,
    /// The broker's certificate was refused for another reason.
    #[error("the broker's certificate was refused: {0}")]
    BadCertificate(String),
    /// The broker refused this client's certificate, or asked for one and got none (mutual
    /// TLS: `ssl.client.auth=required`).
    #[error(
        "the broker refused the client certificate ({0}): set ssl.certificate.location and \
         ssl.key.location to a certificate signed by a CA the broker trusts"
    )]
    ClientCertificateRefused(String),
    /// The client's own TLS settings could not be used (a file, a key).
    #[error("{0}")]
    Setup(String),
    /// Anything else TLS reported.
    #[error("{0}")]
    Other(String),
}

/// What went wrong with SASL (see [`ErrorKind::Sasl`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SaslProblem {
    /// The listener does not enable this mechanism.
    #[error(
        "the listener does not enable it; it offers {}: set sasl.mechanism to one of them",
        if offered.is_empty() { "none".to_owned() } else { offered.join(", ") }
    )]
    MechanismNotEnabled {
        /// The mechanisms the listener enables, from SaslHandshake.
        offered: Vec<String>,
    },
    /// The listener does not use SASL.
    #[error(
        "this port does not use SASL (the broker answered {0}): set security.protocol=PLAINTEXT \
         or SSL, or connect to the broker's SASL listener"
    )]
    NotSaslListener(String),
    /// The broker refused the credentials (wrong password, unknown user, invalid token); the
    /// broker's own words.
    #[error("{0}")]
    Refused(String),
    /// SCRAM: the broker's signature is wrong, so it does not know this user's password (or is
    /// not the broker it claims to be).
    #[error("the broker's SCRAM signature does not match: it does not hold this password")]
    ServerSignature,
    /// SCRAM: the broker asks for an iteration count outside Kafka's own bounds (4096 to
    /// 16384): a broker that asks for more makes the client spin (or is not Kafka).
    #[error(
        "the broker asks for {iterations} SCRAM iterations; Kafka's bounds are \
         {min}..={max}",
        min = crate::sasl::MIN_SCRAM_ITERATIONS,
        max = crate::sasl::MAX_SCRAM_ITERATIONS
    )]
    ScramIterations {
        /// The count the broker sent.
        iterations: u32,
    },
    /// The broker's SASL messages could not be understood, or it lacks SaslAuthenticate.
    #[error("{0}")]
    Protocol(String),
    /// The OAUTHBEARER token callback gave no token; its own words.
    #[error("the OAUTHBEARER token callback failed: {0}")]
    TokenCallback(String),
    /// GSSAPI (Kerberos): the system's GSSAPI library, the KDC or the broker's answer failed
    /// the exchange (see [`KerberosProblem`]).
    #[error("{0}")]
    Kerberos(KerberosProblem),
}

/// What failed in a Kerberos (SASL/GSSAPI) authentication: which step, the GSSAPI library's
/// own words for the major and minor status (`gss_display_status`), and what that most
/// likely means ([`KerberosFailure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KerberosProblem {
    /// What the failure most likely means.
    pub failure: KerberosFailure,
    /// What kdirect was doing: the GSSAPI call (`gss_acquire_cred`, `gss_init_sec_context`,
    /// `gss_unwrap`, ...) or the RFC 4752 step.
    pub step: &'static str,
    /// The principal concerned: the client's (`sasl.kerberos.principal`, or the ticket cache's
    /// default) for credential failures, the broker's service (`kafka@host`) for the rest.
    pub principal: Option<String>,
    /// The GSS major status (0 when the failure is not the library's).
    pub major: u32,
    /// The mechanism's minor status: for MIT Kerberos, a `krb5_error_code` such as
    /// `KRB5KRB_AP_ERR_SKEW` (-1765328347) as an unsigned number.
    pub minor: u32,
    /// The library's text for both (`gss_display_status`), or kdirect's own.
    pub status: String,
}

/// The usual Kerberos failures, each with what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KerberosFailure {
    /// The GSSAPI library could not be loaded (`libgssapi_krb5.so.2`).
    Library,
    /// No credentials: no ticket cache (`KRB5CCNAME`), an empty one, or none for the principal.
    NoCredentials,
    /// The keytab holds no key for `sasl.kerberos.principal`, or cannot be read.
    Keytab,
    /// The KDC does not know the client principal.
    UnknownClient,
    /// The KDC does not know the broker's service principal (`sasl.kerberos.service.name` /
    /// host).
    UnknownService,
    /// The ticket (or the ticket-granting ticket in the cache) has expired.
    Expired,
    /// The clocks of this host and the KDC (or the broker) differ by more than the allowed
    /// skew (`clockskew`, 5 minutes by default).
    ClockSkew,
    /// The key or password was refused (pre-authentication failed; a stale keytab).
    WrongKey,
    /// No KDC could be reached for the realm, or none is configured.
    KdcUnreachable,
    /// The broker's GSSAPI messages are not what RFC 4752 says (bad token, security layer
    /// offer, no mutual authentication).
    Protocol,
    /// Anything else the library reported.
    Other,
}

impl KerberosFailure {
    /// What to check, for the message.
    fn hint(self) -> &'static str {
        match self {
            Self::Library => "the system's GSSAPI library could not be loaded",
            Self::NoCredentials => {
                "no Kerberos credentials: run kinit (the ticket cache is KRB5CCNAME or \
                 krb5.conf's default), or set sasl.kerberos.keytab and sasl.kerberos.principal"
            }
            Self::Keytab => {
                "the keytab has no key for this principal (check sasl.kerberos.principal \
                 against `klist -k` of sasl.kerberos.keytab)"
            }
            Self::UnknownClient => {
                "the KDC does not know this client principal (check sasl.kerberos.principal)"
            }
            Self::UnknownService => {
                "the KDC does not know the broker's service principal (check \
                 sasl.kerberos.service.name and that the broker's host name is the one in its \
                 principal)"
            }
            Self::Expired => "the Kerberos ticket has expired: run kinit again (or use a keytab)",
            Self::ClockSkew => {
                "this host's clock and the KDC's (or the broker's) differ by more than the \
                 allowed skew: synchronise the clocks (NTP)"
            }
            Self::WrongKey => {
                "the KDC refused the key or password (pre-authentication failed: a keytab \
                 older than the principal's current key?)"
            }
            Self::KdcUnreachable => {
                "no KDC could be reached for the realm (check krb5.conf's [realms] and \
                 KRB5_CONFIG)"
            }
            Self::Protocol => "the broker's GSSAPI exchange is not what RFC 4752 says",
            Self::Other => "Kerberos authentication failed",
        }
    }
}

impl fmt::Display for KerberosProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.failure.hint())?;
        if let Some(p) = &self.principal {
            write!(f, " [{p}]")?;
        }
        write!(f, ": {}: {}", self.step, self.status)?;
        if self.major != 0 || self.minor != 0 {
            // The minor status as MIT's krb5_error_code prints it (signed).
            write!(
                f,
                " (GSS major 0x{:08x}, minor {})",
                self.major, self.minor as i32
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for KerberosProblem {}

#[cfg(test)]
mod security_tests {
    use super::*;

    fn tls(node_id: Option<i32>, problem: TlsProblem) -> Error {
        ErrorKind::Tls {
            broker: BrokerName {
                node_id,
                addr: "127.0.0.1:9093".to_owned(),
            },
            problem,
        }
        .into()
    }

    #[test]
    fn only_a_closed_handshake_with_a_known_broker_is_retried() {
        let closed = || TlsProblem::NotTls {
            detail: "it closed the connection during the TLS handshake".to_owned(),
        };
        assert!(!tls(None, closed()).is_retriable(), "a bootstrap address");
        assert!(tls(Some(1), closed()).is_retriable(), "a broker restarting");
        for p in [
            TlsProblem::UnknownCa,
            TlsProblem::Expired,
            TlsProblem::PortSpeaksTls,
        ] {
            assert!(!tls(Some(1), p).is_retriable());
        }
        let sasl: Error = ErrorKind::Sasl {
            broker: BrokerName {
                node_id: Some(1),
                addr: "b:9092".to_owned(),
            },
            mechanism: "PLAIN",
            problem: SaslProblem::Refused("Authentication failed".to_owned()),
        }
        .into();
        assert!(!sasl.is_retriable());
        assert_eq!(
            sasl.to_string(),
            "SASL PLAIN authentication with broker 1 at b:9092 failed: Authentication failed"
        );
    }
}
