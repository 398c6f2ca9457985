//! OffsetCommit (key 8), versions 2–9: store a group's committed offsets in
//! `__consumer_offsets`.
//!
//! kdirect commits as a standalone consumer: generation -1 and an empty member id, which the
//! broker accepts for a group with no active members (the "simple consumer" path of the Java
//! client's `commitSync` without `subscribe`). The commit metadata carries kdirect's batch id.
//! v2–v4 carry a retention time (-1 = broker default); v5 drops it; v6 adds the leader epoch;
//! v8 is the first flexible version.

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::{api, topic_name};
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// OffsetCommit: store committed offsets.
    OffsetCommit, OffsetCommit, OffsetCommitRequest, OffsetCommitResponse, 2, 9
);

/// One partition's offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitEntry {
    /// Partition index.
    pub partition: i32,
    /// The next offset to read.
    pub offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub leader_epoch: i32,
    /// Free-form metadata (kdirect writes its batch id here).
    pub metadata: Option<String>,
}

/// A group member's identity for OffsetCommit: the coordinator refuses a commit from a member
/// of an older generation (ILLEGAL_GENERATION) or one it forgot (UNKNOWN_MEMBER_ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committer<'a> {
    /// The generation id (-1: a standalone consumer).
    pub generation_id: i32,
    /// The member id (empty: a standalone consumer).
    pub member_id: &'a str,
    /// `group.instance.id` (sent from v7 on).
    pub instance_id: Option<&'a str>,
}

impl Committer<'_> {
    /// A standalone consumer: no generation, no member.
    pub const STANDALONE: Committer<'static> = Committer {
        generation_id: -1,
        member_id: "",
        instance_id: None,
    };
}

/// A standalone-consumer commit for `group` at `version` (leader epochs are sent from v6 on).
pub fn request(
    group: &str,
    topics: &[(&str, Vec<CommitEntry>)],
    version: i16,
) -> OffsetCommitRequest {
    request_as(group, Committer::STANDALONE, topics, version)
}

/// A commit for `group` by `committer` at `version`.
pub fn request_as(
    group: &str,
    committer: Committer<'_>,
    topics: &[(&str, Vec<CommitEntry>)],
    version: i16,
) -> OffsetCommitRequest {
    let epochs = version >= 6;
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(committer.generation_id)
        .with_member_id(StrBytes::from_string(committer.member_id.to_owned()))
        .with_group_instance_id(
            committer
                .instance_id
                .filter(|_| version >= 7)
                .map(|i| StrBytes::from_string(i.to_owned())),
        )
        .with_retention_time_ms(-1)
        .with_topics(
            topics
                .iter()
                .map(|(t, es)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(
                            es.iter()
                                .map(|e| {
                                    OffsetCommitRequestPartition::default()
                                        .with_partition_index(e.partition)
                                        .with_committed_offset(e.offset)
                                        .with_committed_leader_epoch(if epochs {
                                            e.leader_epoch
                                        } else {
                                            -1
                                        })
                                        .with_committed_metadata(
                                            e.metadata
                                                .as_ref()
                                                .map(|m| StrBytes::from_string(m.clone())),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// Per-partition results: (topic, partition, error).
pub fn view(resp: &OffsetCommitResponse) -> Vec<(String, i32, ErrorCode)> {
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    ErrorCode(p.error_code),
                )
            })
        })
        .collect()
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 8;

/// Checks an OffsetCommit response body against its schema with every count and length
/// bounded by the bytes that remain, so that kafka-protocol's decoder, run after it, allocates
/// in proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 3 {
        r.i32("throttle_time_ms")?;
    }
    let topic_min =
        if version <= 9 { r.len_size(false) } else { 16 } + r.len_size(true) + r.tags_size();
    let n = r.count(topic_min, "topics count")?;
    for _ in 0..n {
        if version <= 9 {
            r.str("topic name")?;
        } else {
            r.uuid("topic_id")?;
        }
        let np = r.count(4 + 2 + r.tags_size(), "partitions count")?;
        for _ in 0..np {
            r.i32("partition_index")?;
            r.i16("error_code")?;
            r.skip_tags("partition tagged fields")?;
        }
        r.skip_tags("topic tagged fields")?;
    }
    r.skip_tags("response tagged fields")
}
