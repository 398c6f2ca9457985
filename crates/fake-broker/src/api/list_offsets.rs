//! ListOffsets v1–v8 and OffsetForLeaderEpoch v2–v4.
//!
//! ListOffsets timestamps: −2 earliest (log start), −4 earliest-local (KIP-1005, the same here),
//! −1 latest (high watermark, or last stable offset under read_committed), −3 max timestamp
//! (KIP-734, v7+), ≥ 0 the first offset whose timestamp is at or after it.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use super::Ctx;
use crate::codes;
use crate::state::PartitionState;

pub(crate) fn handle(ctx: &Ctx<'_>, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let v = ctx.version;
    let read_committed = v >= 2 && req.isolation_level == 1;
    let mut st = ctx.shared.lock();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let part = match st.partition_mut(&t.name.0, p.partition_index) {
                        Ok(part) => part,
                        Err(_) => return r.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
                    };
                    if let Some(code) =
                        check_leader(part, ctx.broker, p.current_leader_epoch, v >= 4)
                            .or_else(|| part.take_error(ApiKey::ListOffsets))
                    {
                        return r.with_error_code(code);
                    }
                    let log = &part.log;
                    if let (Some((earliest, latest)), -2 | -4 | -1) =
                        (part.offsets_override, p.timestamp)
                    {
                        r.offset = if p.timestamp == -1 { latest } else { earliest };
                        r.timestamp = -1;
                        return r;
                    }
                    let (offset, ts) = match p.timestamp {
                        -2 | -4 => (log.log_start, -1),
                        -1 if read_committed => (log.last_stable_offset(), -1),
                        -1 => (log.high_watermark(), -1),
                        -3 => log.max_timestamp().unwrap_or((-1, -1)),
                        t if t >= 0 => log.offset_for_timestamp(t).unwrap_or((-1, -1)),
                        _ => return r.with_error_code(codes::UNSUPPORTED_VERSION),
                    };
                    r.offset = offset;
                    r.timestamp = ts;
                    if v >= 4 {
                        r.leader_epoch = part.leader_epoch;
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// NOT_LEADER_OR_FOLLOWER if `broker` does not lead, then the leader-epoch check.
pub(crate) fn check_leader(
    part: &PartitionState,
    broker: i32,
    current_leader_epoch: i32,
    has_epoch: bool,
) -> Option<i16> {
    if part.leader != broker {
        return Some(codes::NOT_LEADER_OR_FOLLOWER);
    }
    if has_epoch {
        part.check_epoch(current_leader_epoch)
    } else {
        None
    }
}

pub(crate) fn offset_for_leader_epoch(
    ctx: &Ctx<'_>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let st = ctx.shared.lock();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let r = EpochEndOffset::default().with_partition(p.partition);
                    let Ok(part) = st.partition(&t.topic.0, p.partition) else {
                        return r.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION);
                    };
                    if let Some(code) = check_leader(part, ctx.broker, p.current_leader_epoch, true)
                    {
                        return r.with_error_code(code);
                    }
                    // From the leader-epoch cache, as Kafka's LeaderEpochFileCache answers.
                    let (epoch, end) = part.log.end_offset_for(p.leader_epoch);
                    r.with_leader_epoch(epoch).with_end_offset(end)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
