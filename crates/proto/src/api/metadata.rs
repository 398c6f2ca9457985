//! Metadata (key 3), versions 1–12: brokers, topics, partitions, leaders and leader epochs.
//!
//! v1 made an empty topic list mean "no topics" and null mean "all" (v0 used empty for all,
//! so kdirect starts at v1). Leader epochs arrive at v7 (KIP-320), topic ids at v10 (KIP-516).
//! kdirect never asks the broker to auto-create topics.

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::TopicName;

pub use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

use super::{api, topic_name};
use crate::code::ErrorCode;

api!(
    /// Metadata: the cluster's brokers, topics and partition leaders.
    Metadata, Metadata, MetadataRequest, MetadataResponse, 1, 12
);

/// A request for `topics`, or for every topic when `None`.
pub fn request(topics: Option<&[&str]>) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(false)
}

/// A broker as listed in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerInfo {
    /// Node id.
    pub node_id: i32,
    /// Host name.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
}

/// A partition as listed in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Partition-level error (e.g. `LEADER_NOT_AVAILABLE`).
    pub error: ErrorCode,
    /// Leader node id, -1 if none.
    pub leader: i32,
    /// Leader epoch, -1 when the broker does not send it (Metadata < v7).
    pub leader_epoch: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
}

/// A topic as listed in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Topic id (all zeros when the broker does not send one).
    pub id: [u8; 16],
    /// Topic-level error (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error: ErrorCode,
    /// Internal topic (such as `__consumer_offsets`).
    pub internal: bool,
    /// Partitions, sorted by index.
    pub partitions: Vec<PartitionInfo>,
}

/// A Metadata response in kdirect's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataView {
    /// Brokers, sorted by node id.
    pub brokers: Vec<BrokerInfo>,
    /// Cluster id, if sent.
    pub cluster_id: Option<String>,
    /// Controller node id, -1 if unknown.
    pub controller_id: i32,
    /// Topics, sorted by name. Topics without a name (an id-only answer) are left out.
    pub topics: Vec<TopicInfo>,
}

/// Turns a decoded response into a [`MetadataView`].
pub fn view(resp: &MetadataResponse) -> MetadataView {
    let mut brokers: Vec<BrokerInfo> = resp
        .brokers
        .iter()
        .map(|b| BrokerInfo {
            node_id: b.node_id.0,
            host: b.host.to_string(),
            port: b.port,
            rack: b.rack.as_ref().map(|r| r.to_string()),
        })
        .collect();
    brokers.sort_by_key(|b| b.node_id);
    let mut topics: Vec<TopicInfo> = resp
        .topics
        .iter()
        .filter_map(|t| {
            let name: &TopicName = t.name.as_ref()?;
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    error: ErrorCode(p.error_code),
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
                    isr: p.isr_nodes.iter().map(|r| r.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            Some(TopicInfo {
                name: name.0.to_string(),
                id: *t.topic_id.as_bytes(),
                error: ErrorCode(t.error_code),
                internal: t.is_internal,
                partitions,
            })
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    MetadataView {
        brokers,
        cluster_id: resp.cluster_id.as_ref().map(|c| c.to_string()),
        controller_id: resp.controller_id.0,
        topics,
    }
}
