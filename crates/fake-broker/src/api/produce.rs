//! Produce v3–v9, to load data with an ordinary producer. Each partition's records are appended
//! as sent (base offsets rewritten); no idempotence or transaction checks: transactional
//! batches and control batches written by tests drive the transaction state instead.

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::Ctx;
use crate::codes;

/// CORRUPT_MESSAGE.
const CORRUPT_MESSAGE: i16 = 2;

pub(crate) fn handle(ctx: &Ctx<'_>, req: ProduceRequest) -> ProduceResponse {
    let v = ctx.version;
    let mut st = ctx.shared.lock();
    let mut appended = false;
    let responses = req
        .topic_data
        .into_iter()
        .map(|t| {
            let partition_responses = t
                .partition_data
                .iter()
                .map(|p| {
                    let mut r = PartitionProduceResponse::default().with_index(p.index);
                    let part = match st.partition_mut(&t.name.0, p.index) {
                        Ok(part) => part,
                        Err(_) => return r.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
                    };
                    if part.leader != ctx.broker {
                        return r.with_error_code(codes::NOT_LEADER_OR_FOLLOWER);
                    }
                    let Some(records) = &p.records else {
                        return r.with_error_code(CORRUPT_MESSAGE);
                    };
                    match part.log.append(records) {
                        Ok((base, _)) => {
                            appended = true;
                            r.base_offset = base;
                            if v >= 5 {
                                r.log_start_offset = part.log.log_start;
                            }
                            r
                        }
                        Err(_) => r.with_error_code(CORRUPT_MESSAGE),
                    }
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name)
                .with_partition_responses(partition_responses)
        })
        .collect();
    drop(st);
    if appended {
        ctx.shared.data_changed.notify_waiters();
    }
    ProduceResponse::default().with_responses(responses)
}
