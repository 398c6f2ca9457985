//! Metadata v1–v12. Topic ids (v10+) let Fetch v13+ name topics by UUID. Unknown topics are
//! never auto-created. Every broker is listed, running or stopped, so a client keeps retrying
//! a stopped broker's address (which a restart binds again).

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::Ctx;
use crate::codes;
use crate::state::{State, TopicState};

pub(crate) fn handle(ctx: &Ctx<'_>, req: MetadataRequest) -> MetadataResponse {
    let v = ctx.version;
    let mut st = ctx.shared.lock();
    let brokers = st
        .brokers
        .iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id))
                .with_host(StrBytes::from_string(b.host.clone()))
                .with_port(i32::from(b.port))
        })
        .collect();
    let wanted: Vec<Result<String, uuid::Uuid>> = match &req.topics {
        None => st.topics.keys().cloned().map(Ok).collect(),
        Some(list) => list
            .iter()
            .map(|t| match &t.name {
                Some(n) => Ok(n.0.to_string()),
                None => Err(t.topic_id),
            })
            .collect(),
    };
    let mut topics = Vec::with_capacity(wanted.len());
    for w in wanted {
        let name = match w {
            Ok(n) => n,
            Err(id) => match st.topic_by_id(id) {
                Some((n, _)) => n.clone(),
                None => {
                    topics.push(
                        MetadataResponseTopic::default()
                            .with_error_code(codes::UNKNOWN_TOPIC_ID)
                            .with_topic_id(id),
                    );
                    continue;
                }
            },
        };
        topics.push(topic_entry(&mut st, &name, v));
    }
    let controller = st.brokers.first().map_or(-1, |b| b.id);
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_controller_id(BrokerId(controller))
        .with_topics(topics);
    if v >= 2 {
        resp.cluster_id = Some(StrBytes::from_string(st.cluster_id.clone()));
    }
    resp
}

fn topic_entry(st: &mut State, name: &str, v: i16) -> MetadataResponseTopic {
    let tname = TopicName(StrBytes::from_string(name.to_string()));
    if let Some(&code) = st.topic_errors.get(name) {
        // As Kafka answers an authorization failure or a topic being created: the code, no
        // partitions.
        return MetadataResponseTopic::default()
            .with_error_code(code)
            .with_name(Some(tname));
    }
    let Some(TopicState { id, partitions }) = st.topics.get_mut(name) else {
        return MetadataResponseTopic::default()
            .with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION)
            .with_name(Some(tname));
    };
    let parts = partitions
        .iter_mut()
        .enumerate()
        .map(|(i, p)| {
            let leader = BrokerId(p.leader);
            MetadataResponsePartition::default()
                .with_error_code(p.take_error(ApiKey::Metadata).unwrap_or(codes::NONE))
                .with_partition_index(i as i32)
                .with_leader_id(leader)
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(vec![leader])
                .with_isr_nodes(vec![leader])
        })
        .collect();
    let mut t = MetadataResponseTopic::default()
        .with_name(Some(tname))
        .with_partitions(parts);
    if v >= 10 {
        t.topic_id = *id;
    }
    t
}
