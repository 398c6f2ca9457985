//! ListOffsets (key 2), versions 1–10: where each partition begins and ends.
//!
//! Special timestamps: -2 earliest (log start), -1 latest (high watermark, or the last stable
//! offset under read_committed — KIP-98, v2+), -3 the offset of the record with the largest
//! timestamp (KIP-734, v7+). A real timestamp gives the first offset whose timestamp is at or
//! after it (offset -1 when there is none). The isolation level is sent from v2; leader epochs
//! are sent and returned from v4 (KIP-320). v6 is the first flexible version.
//!
//! [`decode`] reads a response frame straight into [`PartitionOffset`]s with kdirect's bounded
//! reader; [`view`] builds the same list from kafka-protocol's [`ListOffsetsResponse`].

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};

pub use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::{api, topic_name, IsolationLevel};
use crate::code::ErrorCode;
use crate::error::ProtoError;
use crate::message::{check_version, Api};
use crate::read::{Reader, Res};

api!(
    /// ListOffsets: offsets by time.
    ListOffsets, ListOffsets, ListOffsetsRequest, ListOffsetsResponse, 1, 10
);

/// Which offset to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The high watermark (or last stable offset under read_committed).
    Latest,
    /// The first offset whose timestamp is at or after this many ms since the Unix epoch.
    Timestamp(i64),
    /// The offset of the record with the largest timestamp (v7+).
    MaxTimestamp,
}

impl OffsetSpec {
    /// The wire value of the `timestamp` field.
    pub fn wire_timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// One partition to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetQuery {
    /// Partition index.
    pub partition: i32,
    /// What to look up.
    pub spec: OffsetSpec,
    /// The leader epoch the client knows, -1 if none (lets the broker fence stale clients).
    pub current_leader_epoch: i32,
}

/// A request at `version` for several partitions of several topics, sent to their common
/// leader. The isolation level exists from v2 (read_committed below it is an error: the broker
/// would answer the high watermark), leader epochs from v4 (dropped below it), the
/// `max-timestamp` spec from v7.
pub fn request(
    isolation: IsolationLevel,
    topics: &[(&str, Vec<OffsetQuery>)],
    version: i16,
) -> Result<ListOffsetsRequest, ProtoError> {
    let refuse = |reason: String| ProtoError::Encode {
        api: ListOffsets::KEY,
        version,
        reason,
    };
    if version < 2 && isolation == IsolationLevel::ReadCommitted {
        return Err(refuse(
            "read_committed needs ListOffsets v2 (Kafka 0.11+)".to_owned(),
        ));
    }
    if version < 7
        && topics
            .iter()
            .any(|(_, qs)| qs.iter().any(|q| q.spec == OffsetSpec::MaxTimestamp))
    {
        return Err(refuse(
            "max-timestamp needs ListOffsets v7 (Kafka 3.0+)".to_owned(),
        ));
    }
    let epochs = version >= 4;
    Ok(ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(if version >= 2 { isolation.as_i8() } else { 0 })
        .with_topics(
            topics
                .iter()
                .map(|(t, qs)| {
                    ListOffsetsTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(
                            qs.iter()
                                .map(|q| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(q.partition)
                                        .with_timestamp(q.spec.wire_timestamp())
                                        .with_current_leader_epoch(if epochs {
                                            q.current_leader_epoch
                                        } else {
                                            -1
                                        })
                                })
                                .collect(),
                        )
                })
                .collect(),
        ))
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Partition-level error.
    pub error: ErrorCode,
    /// The offset, -1 if none (a timestamp past the last record).
    pub offset: i64,
    /// The timestamp as the broker returned it (-1 for earliest/latest on most brokers).
    pub timestamp: i64,
    /// The leader epoch, -1 if not sent.
    pub leader_epoch: i32,
}

/// Flattens a response.
pub fn view(resp: &ListOffsetsResponse) -> Vec<PartitionOffset> {
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| PartitionOffset {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                error: ErrorCode(p.error_code),
                offset: p.offset,
                timestamp: p.timestamp,
                leader_epoch: p.leader_epoch,
            })
        })
        .collect()
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 6;

/// Decodes a ListOffsets response frame body (size prefix removed, header included) at
/// `version` into the same list as [`view`], with every count and length checked against the
/// bytes that remain. Topic names longer than Kafka's 249-character limit are
/// [`ProtoError::Decode`] errors; bytes after the last field are ignored, as kafka-protocol
/// ignores them. Returns the correlation id and the list.
pub fn decode(frame: Bytes, version: i16) -> Result<(i32, Vec<PartitionOffset>), ProtoError> {
    check_version::<ListOffsets>(version)?;
    let mut r = Reader::new(&frame, ListOffsets::KEY, version, false);
    let cid = r.header(if version >= FIRST_FLEXIBLE_VERSION {
        1
    } else {
        0
    })?;
    r.flexible = version >= FIRST_FLEXIBLE_VERSION;
    let out = walk(&mut r, version, true)?;
    Ok((cid, out))
}

/// Reads a ListOffsets response body; builds the list only when `build`.
pub(crate) fn walk(r: &mut Reader<'_>, version: i16, build: bool) -> Res<Vec<PartitionOffset>> {
    if version >= 2 {
        r.i32("throttle_time_ms")?;
    }
    let topic_min = r.len_size(false) + r.len_size(true) + r.tags_size();
    let partition_min = 4 + 2 + 8 + 8 + if version >= 4 { 4 } else { 0 } + r.tags_size();
    let n = r.count(topic_min, "topics count")?;
    let mut out = Vec::new();
    for _ in 0..n {
        let topic = r.topic_name(false, "topic name")?.unwrap_or_default();
        let np = r.count(partition_min, "partitions count")?;
        if build {
            out.reserve(np);
        }
        for _ in 0..np {
            let partition = r.i32("partition_index")?;
            let error = r.i16("error_code")?;
            let timestamp = r.i64("timestamp")?;
            let offset = r.i64("offset")?;
            let leader_epoch = if version >= 4 {
                r.i32("leader_epoch")?
            } else {
                -1
            };
            r.skip_tags("partition tagged fields")?;
            if build {
                out.push(PartitionOffset {
                    topic: topic.to_owned(),
                    partition,
                    error: ErrorCode(error),
                    offset,
                    timestamp,
                    leader_epoch,
                });
            }
        }
        r.skip_tags("topic tagged fields")?;
    }
    r.skip_tags("response tagged fields")?;
    Ok(out)
}
