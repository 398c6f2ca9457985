//! Fetch (key 1), versions 4–17: read record batches from partition leaders.
//!
//! v4 brought the isolation level, the last stable offset and aborted transactions (KIP-98);
//! v5 the log start offset; v7 fetch sessions (KIP-227: [`request_in_session`] sends a
//! session's id and epoch and the partitions it forgets; [`request`] a full, sessionless
//! fetch); v9 the current leader epoch (KIP-320);
//! v11 the preferred read replica (KIP-392); v12 is the first flexible version (KIP-482) and
//! carries the last fetched epoch in the request and the diverging epoch in the answer
//! (KIP-320's truncation detection: the broker compares the epoch of the last batch the
//! client read with its own log and, when they diverge, answers with no records and the
//! largest epoch at or below it that it has, with that epoch's end offset);
//! v13 replaces topic names by topic ids (KIP-516); v15 moves the replica id into
//! `replica_state` (KIP-903). The `records` of each partition are a slice of the response
//! frame, never a copy: decode the frame as [`bytes::Bytes`].
//!
//! [`decode`] reads a response frame straight into a [`FetchView`] with kdirect's bounded
//! reader (every count and length checked against the bytes that remain; see the crate
//! docs). `view` (feature `test-support`) flattens kafka-protocol's [`FetchResponse`] the
//! same way: the reference `decode` is tested against.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

pub use kafka_protocol::messages::{FetchRequest, FetchResponse};

use super::{api, topic_name, IsolationLevel};
use crate::code::ErrorCode;
use crate::error::ProtoError;
use crate::message::Api;
use crate::read::{Reader, Res};

/// Topic ids to names, for answers that name topics by id (v13+): the names are shared with
/// the view's partitions.
pub type TopicNames = HashMap<[u8; 16], Arc<str>>;

api!(
    /// Fetch: read record batches.
    Fetch, Fetch, FetchRequest, FetchResponse, 4, 17
);

/// The first version that names topics by id instead of by name.
pub const FIRST_TOPIC_ID_VERSION: i16 = 13;

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 12;

/// Request-wide fetch settings (the Java client's names and defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchParams {
    /// `fetch.max.wait.ms` (default 500).
    pub max_wait_ms: i32,
    /// `fetch.min.bytes` (default 1).
    pub min_bytes: i32,
    /// `fetch.max.bytes` (default 52428800).
    pub max_bytes: i32,
    /// `isolation.level`.
    pub isolation: IsolationLevel,
}

impl Default for FetchParams {
    fn default() -> Self {
        Self {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 52_428_800,
            isolation: IsolationLevel::ReadUncommitted,
        }
    }
}

/// One partition to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    /// Partition index.
    pub partition: i32,
    /// The offset to start at.
    pub fetch_offset: i64,
    /// `max.partition.fetch.bytes` (default 1048576).
    pub partition_max_bytes: i32,
    /// The leader epoch the client knows, -1 if none.
    pub current_leader_epoch: i32,
    /// The `partition_leader_epoch` of the last record batch read before `fetch_offset`, -1
    /// if unknown (sent from v12 on; KIP-320). The broker answers a position its log does not
    /// have at that epoch with [`FetchedPartition::diverging_epoch`].
    pub last_fetched_epoch: i32,
}

/// One topic to fetch. `id` is needed from v13 on; `name` below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFetch {
    /// Topic name.
    pub name: String,
    /// Topic id from Metadata v10+, all zeros if unknown.
    pub id: [u8; 16],
    /// Partitions.
    pub partitions: Vec<PartitionFetch>,
}

/// Builds a request for `version` (names or ids are chosen by version).
pub fn request(
    params: &FetchParams,
    topics: &[TopicFetch],
    version: i16,
) -> Result<FetchRequest, ProtoError> {
    request_from_rack(params, topics, "", version)
}

/// [`request`] from a client in rack `rack` (`client.rack`, v11+; KIP-392): a broker with a
/// rack-aware replica selector answers with a preferred read replica in the same rack.
pub fn request_from_rack(
    params: &FetchParams,
    topics: &[TopicFetch],
    rack: &str,
    version: i16,
) -> Result<FetchRequest, ProtoError> {
    request_in_session(params, topics, &[], rack, SessionFields::NONE, version)
}

/// A fetch session's place in a request (KIP-227, v7+): its id (0: none) and the epoch of
/// this request in it. Epoch 0 asks for a new session (closing `id`'s, if any), -1 is a
/// sessionless request (closing `id`'s, if any), and 1 on are incremental requests of session
/// `id`, which list only the partitions added or changed since the last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionFields {
    /// The session's id, 0 for none.
    pub id: i32,
    /// This request's epoch in the session.
    pub epoch: i32,
}

impl SessionFields {
    /// A full fetch outside any session.
    pub const NONE: SessionFields = SessionFields { id: 0, epoch: -1 };
}

/// Partitions a fetch session stops fetching (`forgotten_topics_data`, v7+): by name below
/// v13, by id from v13 on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicForget {
    /// Topic name.
    pub name: String,
    /// Topic id, all zeros if unknown.
    pub id: [u8; 16],
    /// Partition indices.
    pub partitions: Vec<i32>,
}

/// A request in a fetch session (KIP-227): `topics` are the partitions added to or changed
/// in the session (all of them when `session.epoch` is 0 or -1), `forgotten` those it drops.
/// Below v7 the session fields are not on the wire and a session is an encoding error.
pub fn request_in_session(
    params: &FetchParams,
    topics: &[TopicFetch],
    forgotten: &[TopicForget],
    rack: &str,
    session: SessionFields,
    version: i16,
) -> Result<FetchRequest, ProtoError> {
    if version < 7 && (session != SessionFields::NONE || !forgotten.is_empty()) {
        return Err(ProtoError::Encode {
            api: Fetch::KEY,
            version,
            reason: "fetch sessions need Fetch v7+".to_owned(),
        });
    }
    let mut out = Vec::with_capacity(topics.len());
    for t in topics {
        let (name, id) = topic_key(&t.name, t.id, "topic", version)?;
        let ft = FetchTopic::default()
            .with_topic(name)
            .with_topic_id(id)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p.partition)
                            .with_fetch_offset(p.fetch_offset)
                            .with_partition_max_bytes(p.partition_max_bytes)
                            .with_current_leader_epoch(if version >= 9 {
                                p.current_leader_epoch
                            } else {
                                -1
                            })
                            .with_last_fetched_epoch(if version >= FIRST_FLEXIBLE_VERSION {
                                p.last_fetched_epoch
                            } else {
                                -1
                            })
                            .with_log_start_offset(-1)
                    })
                    .collect(),
            );
        out.push(ft);
    }
    let mut forget = Vec::with_capacity(forgotten.len());
    for t in forgotten {
        let (name, id) = topic_key(&t.name, t.id, "forgotten topic", version)?;
        forget.push(
            ForgottenTopic::default()
                .with_topic(name)
                .with_topic_id(id)
                .with_partitions(t.partitions.clone()),
        );
    }
    Ok(FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(params.max_wait_ms)
        .with_min_bytes(params.min_bytes)
        .with_max_bytes(params.max_bytes)
        .with_isolation_level(params.isolation.as_i8())
        .with_session_id(session.id)
        .with_session_epoch(session.epoch)
        .with_forgotten_topics_data(forget)
        .with_rack_id(if version >= 11 {
            StrBytes::from_string(rack.to_owned())
        } else {
            StrBytes::from_static_str("")
        })
        .with_topics(out))
}

/// How a request names a topic at `version`: by name below v13, by id from v13 on (an
/// unknown id there is an encoding error naming `what` and the topic).
fn topic_key(
    name: &str,
    id: [u8; 16],
    what: &str,
    version: i16,
) -> Result<(kafka_protocol::messages::TopicName, Uuid), ProtoError> {
    if version < FIRST_TOPIC_ID_VERSION {
        return Ok((topic_name(name), Uuid::nil()));
    }
    if id == [0; 16] {
        return Err(ProtoError::Encode {
            api: Fetch::KEY,
            version,
            reason: format!("{what} '{name}' has no topic id, which Fetch v13+ needs"),
        });
    }
    Ok((Default::default(), Uuid::from_bytes(id)))
}

/// An aborted transaction reported under read_committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AbortedTransaction {
    /// The producer id.
    pub producer_id: i64,
    /// The first offset of the aborted transaction in this partition.
    pub first_offset: i64,
}

/// One partition of a Fetch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    /// Topic name (resolved from the id at v13+), shared by the answer's partitions of one
    /// topic (and with the caller's `names`): cloning it allocates nothing.
    pub topic: Arc<str>,
    /// Partition index.
    pub partition: i32,
    /// Partition-level error.
    pub error: ErrorCode,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset (-1 if unknown).
    pub last_stable_offset: i64,
    /// Log start offset (-1 if unknown).
    pub log_start_offset: i64,
    /// Aborted transactions overlapping the returned data (read_committed only; never trust
    /// the order, and ignore them under read_uncommitted).
    pub aborted_transactions: Vec<AbortedTransaction>,
    /// Preferred read replica, -1 if none.
    pub preferred_read_replica: i32,
    /// The new leader id and epoch when the broker says it is not the leader (v12+), -1 if
    /// not sent.
    pub current_leader: (i32, i32),
    /// KIP-320 (v12+): the log diverges from the client's at its `last_fetched_epoch` — the
    /// largest epoch the leader has at or below it, and where that epoch ends in the leader's
    /// log. `None` when not sent (the broker sends it only when asked with a last fetched
    /// epoch and the logs diverge; the answer then carries no records).
    pub diverging_epoch: Option<EpochEnd>,
    /// The record batches as sent: a slice of the response frame (may end in a partial batch).
    pub records: Bytes,
}

/// A leader epoch and where it ends in a log (the next offset after its last record): Fetch's
/// diverging epoch, OffsetForLeaderEpoch's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    /// The leader epoch (-1: the log has no epoch at or below the one asked).
    pub epoch: i32,
    /// The end offset of that epoch (-1: unknown).
    pub end_offset: i64,
}

/// A Fetch response in kdirect's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchView {
    /// Top-level error (v7+).
    pub error: ErrorCode,
    /// Throttle time the broker asked for.
    pub throttle_time_ms: i32,
    /// The fetch session the answer belongs to (v7+; KIP-227): the new session's id in
    /// answer to a request for one, 0 when the broker declined or none was asked.
    pub session_id: i32,
    /// Partitions in response order. In answer to an incremental request, only those with
    /// records, an error, or ends that changed since the session's last answer.
    pub partitions: Vec<FetchedPartition>,
}

/// Flattens kafka-protocol's own decoding of a response (the reference the zero-copy
/// [`decode`] is tested against; feature `test-support`). From v13 on, topics are named by
/// id: `names` maps ids to names, and an id the request did not name is an
/// [`ProtoError::Inconsistent`] error.
#[cfg(feature = "test-support")]
pub fn view(
    resp: FetchResponse,
    version: i16,
    names: &TopicNames,
) -> Result<FetchView, ProtoError> {
    let mut partitions = Vec::new();
    for t in resp.responses {
        let topic = if version >= FIRST_TOPIC_ID_VERSION {
            let id = *t.topic_id.as_bytes();
            names
                .get(&id)
                .cloned()
                .ok_or_else(|| ProtoError::Inconsistent {
                    api: Fetch::KEY,
                    reason: format!(
                        "response names topic id {} that was not fetched",
                        t.topic_id
                    ),
                })?
        } else {
            Arc::from(t.topic.0.as_str())
        };
        for p in t.partitions {
            partitions.push(FetchedPartition {
                topic: topic.clone(),
                partition: p.partition_index,
                error: ErrorCode(p.error_code),
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                log_start_offset: p.log_start_offset,
                aborted_transactions: p
                    .aborted_transactions
                    .unwrap_or_default()
                    .iter()
                    .map(|a| AbortedTransaction {
                        producer_id: a.producer_id.0,
                        first_offset: a.first_offset,
                    })
                    .collect(),
                preferred_read_replica: p.preferred_read_replica.0,
                current_leader: (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
                // kafka-protocol writes the field only when it differs from its default
                // (epoch -1, end offset -1): that default is "not sent".
                diverging_epoch: (version >= FIRST_FLEXIBLE_VERSION
                    && (p.diverging_epoch.epoch != -1 || p.diverging_epoch.end_offset != -1))
                    .then_some(EpochEnd {
                        epoch: p.diverging_epoch.epoch,
                        end_offset: p.diverging_epoch.end_offset,
                    }),
                records: p.records.unwrap_or_default(),
            });
        }
    }
    Ok(FetchView {
        error: ErrorCode(resp.error_code),
        throttle_time_ms: resp.throttle_time_ms,
        session_id: resp.session_id,
        partitions,
    })
}

/// Decodes a Fetch response frame body (size prefix already removed; header included) at
/// `version` into a [`FetchView`], without kafka-protocol's intermediate structs. Each
/// partition's `records` is a slice of `frame`. From v13 on, topic ids are resolved through
/// `names` (an id the request did not name is [`ProtoError::Inconsistent`]).
///
/// Every count and length is checked against the bytes that remain before anything is
/// allocated; malformed input is [`ProtoError::Decode`] with the byte position, and a topic
/// name longer than Kafka's 249-character limit is one too (each partition repeats its
/// topic's name, so the limit keeps the view proportional to the frame). Bytes after the last
/// field are ignored, as kafka-protocol ignores them. Returns the correlation id and the view.
pub fn decode(
    frame: Bytes,
    version: i16,
    names: &TopicNames,
) -> Result<(i32, FetchView), ProtoError> {
    crate::message::check_version::<Fetch>(version)?;
    let mut r = Reader::new(&frame, Fetch::KEY, version, false);
    let cid = r.header(if version >= FIRST_FLEXIBLE_VERSION {
        1
    } else {
        0
    })?;
    r.flexible = version >= FIRST_FLEXIBLE_VERSION;
    let view = walk(&mut r, version, Some((&frame, names)))?;
    Ok((cid, view))
}

/// Reads a Fetch response body from `r`. With `out`, builds the view (slicing `records` out
/// of the frame and resolving topic ids); without it, only checks the body and returns an
/// empty view.
pub(crate) fn walk(
    r: &mut Reader<'_>,
    version: i16,
    out: Option<(&Bytes, &TopicNames)>,
) -> Res<FetchView> {
    let throttle_time_ms = r.i32("throttle_time_ms")?;
    let (error, session_id) = if version >= 7 {
        (r.i16("error_code")?, r.i32("session_id")?)
    } else {
        (0, 0)
    };
    let topic_min = match version {
        ..=11 => 2,
        12 => 1,
        _ => 16,
    } + r.len_size(true)
        + r.tags_size();
    let partition_min = 4
        + 2
        + 8
        + 8
        + if version >= 5 { 8 } else { 0 }
        + r.len_size(true)
        + if version >= 11 { 4 } else { 0 }
        + r.len_size(true)
        + r.tags_size();
    let aborted_min = 16 + r.tags_size();
    let topics = r.count(topic_min, "responses count")?;
    let mut partitions = Vec::new();
    for _ in 0..topics {
        let topic = if version >= FIRST_TOPIC_ID_VERSION {
            let id = r.uuid("topic_id")?;
            match out {
                Some((_, names)) => {
                    names
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| ProtoError::Inconsistent {
                            api: Fetch::KEY,
                            reason: format!(
                                "response names topic id {} that was not fetched",
                                Uuid::from_bytes(id)
                            ),
                        })?
                }
                None => Arc::from(""),
            }
        } else {
            let name = r.topic_name(false, "topic")?.unwrap_or_default();
            if out.is_some() {
                Arc::from(name)
            } else {
                Arc::from("")
            }
        };
        let n = r.count(partition_min, "partitions count")?;
        if out.is_some() {
            partitions.reserve(n);
        }
        for _ in 0..n {
            let partition = r.i32("partition_index")?;
            let error = r.i16("error_code")?;
            let high_watermark = r.i64("high_watermark")?;
            let last_stable_offset = r.i64("last_stable_offset")?;
            let log_start_offset = if version >= 5 {
                r.i64("log_start_offset")?
            } else {
                -1
            };
            let aborted = r.nullable_count(aborted_min, "aborted_transactions count")?;
            let mut aborted_transactions = Vec::with_capacity(if out.is_some() {
                aborted.unwrap_or(0)
            } else {
                0
            });
            for _ in 0..aborted.unwrap_or(0) {
                let producer_id = r.i64("aborted producer_id")?;
                let first_offset = r.i64("aborted first_offset")?;
                r.skip_tags("aborted transaction tagged fields")?;
                if out.is_some() {
                    aborted_transactions.push(AbortedTransaction {
                        producer_id,
                        first_offset,
                    });
                }
            }
            let preferred_read_replica = if version >= 11 {
                r.i32("preferred_read_replica")?
            } else {
                -1
            };
            let records = r.nullable_bytes("records")?;
            let mut current_leader = (-1, -1);
            let mut diverging_epoch = None;
            r.tags("partition tagged fields", |tag, t| match tag {
                // diverging_epoch: epoch, end_offset (KIP-320).
                0 => {
                    let d = EpochEnd {
                        epoch: t.i32("diverging_epoch.epoch")?,
                        end_offset: t.i64("diverging_epoch.end_offset")?,
                    };
                    // The field's default (-1, -1) is "no divergence", sent or not.
                    diverging_epoch = (d.epoch != -1 || d.end_offset != -1).then_some(d);
                    t.skip_tags("diverging_epoch tagged fields")?;
                    Ok(true)
                }
                // current_leader: leader_id, leader_epoch (KIP-951).
                1 => {
                    current_leader = (
                        t.i32("current_leader.leader_id")?,
                        t.i32("current_leader.leader_epoch")?,
                    );
                    t.skip_tags("current_leader tagged fields")?;
                    Ok(true)
                }
                // snapshot_id: end_offset, epoch (KIP-630).
                2 => {
                    t.i64("snapshot_id.end_offset")?;
                    t.i32("snapshot_id.epoch")?;
                    t.skip_tags("snapshot_id tagged fields")?;
                    Ok(true)
                }
                _ => Ok(false),
            })?;
            if let Some((frame, _)) = out {
                partitions.push(FetchedPartition {
                    topic: topic.clone(),
                    partition,
                    error: ErrorCode(error),
                    high_watermark,
                    last_stable_offset,
                    log_start_offset,
                    aborted_transactions,
                    preferred_read_replica,
                    current_leader,
                    diverging_epoch,
                    records: records.map_or_else(Bytes::new, |range| frame.slice(range)),
                });
            }
        }
        r.skip_tags("topic tagged fields")?;
    }
    r.tags("response tagged fields", |tag, t| {
        if tag != 0 || version < 16 {
            return Ok(false);
        }
        // node_endpoints (KIP-951): node_id, host, port, rack.
        let n = t.count(4 + 1 + 4 + 1 + 1, "node_endpoints count")?;
        for _ in 0..n {
            t.i32("node_endpoints.node_id")?;
            t.str("node_endpoints.host")?;
            t.i32("node_endpoints.port")?;
            t.nullable_str("node_endpoints.rack")?;
            t.skip_tags("node_endpoints tagged fields")?;
        }
        Ok(true)
    })?;
    Ok(FetchView {
        error: ErrorCode(error),
        throttle_time_ms,
        session_id,
        partitions,
    })
}
