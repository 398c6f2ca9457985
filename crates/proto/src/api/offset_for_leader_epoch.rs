//! OffsetForLeaderEpoch (key 23), versions 2–4: where a leader epoch ends in the leader's log
//! (KIP-101, KIP-320).
//!
//! A consumer asks the leader, for each partition, about the epoch of the last record batch it
//! read (`leader_epoch`), fenced by the epoch it believes current (`current_leader_epoch`,
//! v2+). The leader answers the largest epoch it has at or below the one asked, and that
//! epoch's end offset (the start offset of the next epoch, or its log end offset for the
//! current one). A position above that end offset was truncated away: records the consumer
//! read at `[end_offset, position)` are no longer in the log (the Java client's
//! `OffsetsForLeaderEpochUtils` and `SubscriptionState.maybeCompleteValidation`). An answer of
//! epoch -1 and offset -1 (`UNDEFINED`) means the leader has no epoch at or below the one
//! asked. v3 adds `replica_id` (-1 for a consumer: `CONSUMER_REPLICA_ID`, and -2 is a debug
//! replica — kafka-protocol's `Default` is -2, so it is always set here); v4 is the first
//! flexible version. Kafka 4.0 dropped v0–v1 (KIP-896); Kafka 3.9 and 4.1 serve 2–4.
//!
//! [`decode`] reads a response frame straight into [`EpochEndOffset`]s with kdirect's bounded
//! reader; [`view`] builds the same list from kafka-protocol's
//! [`OffsetForLeaderEpochResponse`].

use bytes::Bytes;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};

pub use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::{api, topic_name};
use crate::code::ErrorCode;
use crate::error::ProtoError;
use crate::message::{check_version, Api};
use crate::read::{Reader, Res};

api!(
    /// OffsetForLeaderEpoch: the end offset of a leader epoch.
    OffsetForLeaderEpoch, OffsetForLeaderEpoch, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, 2, 4
);

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 4;

/// The replica id a consumer sends (v3+): not a broker.
pub const CONSUMER_REPLICA_ID: i32 = -1;

/// One partition to ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochQuery {
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the client believes current (fences a stale leader), -1 if unknown.
    pub current_leader_epoch: i32,
    /// The epoch whose end offset is asked: the epoch of the last batch read.
    pub leader_epoch: i32,
}

/// A request at `version` for partitions of several topics, sent to their common leader.
pub fn request(topics: &[(&str, Vec<EpochQuery>)], version: i16) -> OffsetForLeaderEpochRequest {
    OffsetForLeaderEpochRequest::default()
        .with_replica_id(CONSUMER_REPLICA_ID.into())
        .with_topics(
            topics
                .iter()
                .map(|(t, qs)| {
                    OffsetForLeaderTopic::default()
                        .with_topic(topic_name(t))
                        .with_partitions(
                            qs.iter()
                                .map(|q| {
                                    OffsetForLeaderPartition::default()
                                        .with_partition(q.partition)
                                        .with_current_leader_epoch(if version >= 2 {
                                            q.current_leader_epoch
                                        } else {
                                            -1
                                        })
                                        .with_leader_epoch(q.leader_epoch)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochEndOffset {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Partition-level error (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
    /// NOT_LEADER_OR_FOLLOWER… are the leader having moved).
    pub error: ErrorCode,
    /// The largest epoch at or below the one asked that the leader has, -1 if none.
    pub leader_epoch: i32,
    /// The end offset of that epoch, -1 if none.
    pub end_offset: i64,
}

/// Flattens kafka-protocol's decoding of a response (the reference [`decode`] is tested
/// against).
pub fn view(resp: &OffsetForLeaderEpochResponse) -> Vec<EpochEndOffset> {
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| EpochEndOffset {
                topic: t.topic.0.to_string(),
                partition: p.partition,
                error: ErrorCode(p.error_code),
                leader_epoch: p.leader_epoch,
                end_offset: p.end_offset,
            })
        })
        .collect()
}

/// Decodes an OffsetForLeaderEpoch response frame body (size prefix removed, header
/// included) at `version`, with every count and length checked against the bytes that
/// remain before anything is allocated. Topic names longer than Kafka's 249-character limit
/// are [`ProtoError::Decode`] errors; bytes after the last field are ignored, as
/// kafka-protocol ignores them. Returns the correlation id and the answers.
pub fn decode(frame: Bytes, version: i16) -> Result<(i32, Vec<EpochEndOffset>), ProtoError> {
    check_version::<OffsetForLeaderEpoch>(version)?;
    let mut r = Reader::new(&frame, OffsetForLeaderEpoch::KEY, version, false);
    let cid = r.header(if version >= FIRST_FLEXIBLE_VERSION {
        1
    } else {
        0
    })?;
    r.flexible = version >= FIRST_FLEXIBLE_VERSION;
    let out = walk(&mut r, true)?;
    Ok((cid, out))
}

/// Reads a response body; builds the list only when `build`.
pub(crate) fn walk(r: &mut Reader<'_>, build: bool) -> Res<Vec<EpochEndOffset>> {
    r.i32("throttle_time_ms")?;
    let topic_min = r.len_size(false) + r.len_size(true) + r.tags_size();
    let partition_min = 2 + 4 + 4 + 8 + r.tags_size();
    let n = r.count(topic_min, "topics count")?;
    let mut out = Vec::new();
    for _ in 0..n {
        let topic = r.topic_name(false, "topic")?.unwrap_or_default();
        let np = r.count(partition_min, "partitions count")?;
        if build {
            out.reserve(np);
        }
        for _ in 0..np {
            let error = r.i16("error_code")?;
            let partition = r.i32("partition")?;
            let leader_epoch = r.i32("leader_epoch")?;
            let end_offset = r.i64("end_offset")?;
            r.skip_tags("partition tagged fields")?;
            if build {
                out.push(EpochEndOffset {
                    topic: topic.to_owned(),
                    partition,
                    error: ErrorCode(error),
                    leader_epoch,
                    end_offset,
                });
            }
        }
        r.skip_tags("topic tagged fields")?;
    }
    r.skip_tags("response tagged fields")?;
    Ok(out)
}
