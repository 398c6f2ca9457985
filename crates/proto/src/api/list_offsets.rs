//! ListOffsets (key 2), versions 1–10: where each partition begins and ends.
//!
//! Special timestamps: -2 earliest (log start), -1 latest (high watermark, or the last stable
//! offset under read_committed — KIP-98, v2+), -3 the offset of the record with the largest
//! timestamp (KIP-734, v7+). A real timestamp gives the first offset whose timestamp is at or
//! after it (offset -1 when there is none). The isolation level is sent from v2; leader epochs
//! are sent and returned from v4 (KIP-320).

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};

pub use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::{api, topic_name, IsolationLevel};
use crate::code::ErrorCode;

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

/// A request for several partitions of several topics, sent to their common leader.
pub fn request(
    isolation: IsolationLevel,
    topics: &[(&str, Vec<OffsetQuery>)],
) -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation.as_i8())
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
                                        .with_current_leader_epoch(q.current_leader_epoch)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
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
