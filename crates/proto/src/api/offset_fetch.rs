//! OffsetFetch (key 9), versions 1–9: read a group's committed offsets.
//!
//! v1 reads offsets stored in Kafka (v0 read ZooKeeper); v2 adds a top-level error; v6 is the
//! first flexible version; v7 adds `require_stable` (KIP-447); v8 batches several groups into
//! `groups` (KIP-709). kdirect asks for one group and reads either shape.

use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};

use super::{api, topic_name};
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// OffsetFetch: read committed offsets.
    OffsetFetch, OffsetFetch, OffsetFetchRequest, OffsetFetchResponse, 1, 9
);

/// The request for `group`'s offsets of `topics` at `version`.
pub fn request(group: &str, topics: &[(&str, Vec<i32>)], version: i16) -> OffsetFetchRequest {
    let gid = GroupId(StrBytes::from_string(group.to_owned()));
    if version >= 8 {
        OffsetFetchRequest::default()
            .with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(gid)
                .with_topics(Some(
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            OffsetFetchRequestTopics::default()
                                .with_name(topic_name(t))
                                .with_partition_indexes(ps.clone())
                        })
                        .collect(),
                ))])
            .with_require_stable(true)
    } else {
        OffsetFetchRequest::default()
            .with_group_id(gid)
            .with_topics(Some(
                topics
                    .iter()
                    .map(|(t, ps)| {
                        OffsetFetchRequestTopic::default()
                            .with_name(topic_name(t))
                            .with_partition_indexes(ps.clone())
                    })
                    .collect(),
            ))
            .with_require_stable(version >= 7)
    }
}

/// One partition's committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Next offset to read, -1 if none committed.
    pub offset: i64,
    /// Leader epoch, -1 if unknown.
    pub leader_epoch: i32,
    /// Commit metadata.
    pub metadata: Option<String>,
    /// Partition-level error.
    pub error: ErrorCode,
}

/// The group-level error and the partitions, from either response shape.
pub fn view(resp: &OffsetFetchResponse, version: i16) -> (ErrorCode, Vec<CommittedOffset>) {
    if version >= 8 {
        let Some(g) = resp.groups.first() else {
            return (ErrorCode::NONE, Vec::new());
        };
        let parts = g
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| CommittedOffset {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.as_ref().map(|m| m.to_string()),
                    error: ErrorCode(p.error_code),
                })
            })
            .collect();
        (ErrorCode(g.error_code), parts)
    } else {
        let parts = resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| CommittedOffset {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.as_ref().map(|m| m.to_string()),
                    error: ErrorCode(p.error_code),
                })
            })
            .collect();
        (ErrorCode(resp.error_code), parts)
    }
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 6;

/// Checks an OffsetFetch response body against its schema with every count and length
/// bounded by the bytes that remain, so that kafka-protocol's decoder, run after it, allocates
/// in proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 3 {
        r.i32("throttle_time_ms")?;
    }
    if version <= 7 {
        let partition_min =
            4 + 8 + if version >= 5 { 4 } else { 0 } + r.len_size(false) + 2 + r.tags_size();
        let topic_min = r.len_size(false) + r.len_size(true) + r.tags_size();
        let n = r.count(topic_min, "topics count")?;
        for _ in 0..n {
            r.str("topic name")?;
            let np = r.count(partition_min, "partitions count")?;
            for _ in 0..np {
                r.i32("partition_index")?;
                r.i64("committed_offset")?;
                if version >= 5 {
                    r.i32("committed_leader_epoch")?;
                }
                r.nullable_str("metadata")?;
                r.i16("error_code")?;
                r.skip_tags("partition tagged fields")?;
            }
            r.skip_tags("topic tagged fields")?;
        }
        if version >= 2 {
            r.i16("error_code")?;
        }
    } else {
        let n = r.count(1 + 1 + 2 + 1, "groups count")?;
        for _ in 0..n {
            r.str("group_id")?;
            let topic_min = if version <= 9 { 1 } else { 16 } + 1 + 1;
            let nt = r.count(topic_min, "topics count")?;
            for _ in 0..nt {
                if version <= 9 {
                    r.str("topic name")?;
                } else {
                    r.uuid("topic_id")?;
                }
                let np = r.count(4 + 8 + 4 + 1 + 2 + 1, "partitions count")?;
                for _ in 0..np {
                    r.i32("partition_index")?;
                    r.i64("committed_offset")?;
                    r.i32("committed_leader_epoch")?;
                    r.nullable_str("metadata")?;
                    r.i16("error_code")?;
                    r.skip_tags("partition tagged fields")?;
                }
                r.skip_tags("topic tagged fields")?;
            }
            r.i16("group error_code")?;
            r.skip_tags("group tagged fields")?;
        }
    }
    r.skip_tags("response tagged fields")
}
