//! FindCoordinator v0–v5, OffsetCommit v2–v9, OffsetFetch v1–v9: committed offsets for
//! assign-mode consumers. There is no group membership (no JoinGroup): commits are accepted
//! whatever the generation. A group's coordinator is a stable hash of its name over the
//! brokers; other brokers answer NOT_COORDINATOR.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::Ctx;
use crate::codes;
use crate::state::{Committed, State};

pub(crate) fn find_coordinator(
    ctx: &Ctx<'_>,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let st = ctx.shared.lock();
    let locate = |key: &StrBytes| {
        let b = st.coordinator(key);
        (
            b.id,
            StrBytes::from_string(b.host.clone()),
            i32::from(b.port),
        )
    };
    if ctx.version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                let (id, host, port) = locate(k);
                Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(BrokerId(id))
                    .with_host(host)
                    .with_port(port)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let (id, host, port) = locate(&req.key);
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(id))
            .with_host(host)
            .with_port(port)
    }
}

fn is_coordinator(st: &State, broker: i32, group: &str) -> bool {
    st.coordinator(group).id == broker
}

pub(crate) fn offset_commit(ctx: &Ctx<'_>, req: OffsetCommitRequest) -> OffsetCommitResponse {
    let mut st = ctx.shared.lock();
    let group = req.group_id.0.to_string();
    let coordinator = is_coordinator(&st, ctx.broker, &group);
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = if !coordinator {
                        codes::NOT_COORDINATOR
                    } else if st.partition(&name, p.partition_index).is_err() {
                        codes::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        st.committed.insert(
                            (group.clone(), name.clone(), p.partition_index),
                            Committed {
                                offset: p.committed_offset,
                                leader_epoch: p.committed_leader_epoch,
                                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            },
                        );
                        codes::NONE
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// (partition, offset, leader epoch, metadata) for each requested or committed partition.
type Found = Vec<(String, Vec<(i32, Committed)>)>;

fn lookup(st: &State, group: &str, topics: Option<Vec<(String, Vec<i32>)>>) -> Found {
    let none = Committed {
        offset: -1,
        leader_epoch: -1,
        metadata: Some(String::new()),
    };
    match topics {
        Some(list) => list
            .into_iter()
            .map(|(t, parts)| {
                let v = parts
                    .into_iter()
                    .map(|p| {
                        let c = st
                            .committed
                            .get(&(group.to_string(), t.clone(), p))
                            .cloned()
                            .unwrap_or_else(|| none.clone());
                        (p, c)
                    })
                    .collect();
                (t, v)
            })
            .collect(),
        None => {
            let mut by_topic: std::collections::BTreeMap<String, Vec<(i32, Committed)>> =
                Default::default();
            for ((g, t, p), c) in &st.committed {
                if g == group {
                    by_topic.entry(t.clone()).or_default().push((*p, c.clone()));
                }
            }
            by_topic.into_iter().collect()
        }
    }
}

pub(crate) fn offset_fetch(ctx: &Ctx<'_>, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let st = ctx.shared.lock();
    let meta = |c: &Committed| {
        c.metadata
            .as_ref()
            .map(|m| StrBytes::from_string(m.clone()))
    };
    if ctx.version >= 8 {
        let groups = req
            .groups
            .iter()
            .map(|g| {
                let group = g.group_id.0.to_string();
                let r = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                if !is_coordinator(&st, ctx.broker, &group) {
                    return r.with_error_code(codes::NOT_COORDINATOR);
                }
                let wanted = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let topics = lookup(&st, &group, wanted)
                    .into_iter()
                    .map(|(t, parts)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(StrBytes::from_string(t)))
                            .with_partitions(
                                parts
                                    .iter()
                                    .map(|(p, c)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(c.offset)
                                            .with_committed_leader_epoch(c.leader_epoch)
                                            .with_metadata(meta(c))
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                r.with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let group = req.group_id.0.to_string();
    if !is_coordinator(&st, ctx.broker, &group) {
        let mut r = OffsetFetchResponse::default();
        if ctx.version >= 2 {
            r.error_code = codes::NOT_COORDINATOR;
        }
        return r;
    }
    let wanted = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let topics = lookup(&st, &group, wanted)
        .into_iter()
        .map(|(t, parts)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(t)))
                .with_partitions(
                    parts
                        .iter()
                        .map(|(p, c)| {
                            let mut r = OffsetFetchResponsePartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(c.offset)
                                .with_metadata(meta(c));
                            if ctx.version >= 5 {
                                r.committed_leader_epoch = c.leader_epoch;
                            }
                            r
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}
