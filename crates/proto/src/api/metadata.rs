//! Metadata (key 3), versions 1–12: brokers, topics, partitions, leaders and leader epochs.
//!
//! v1 made an empty topic list mean "no topics" and null mean "all" (v0 used empty for all,
//! so kdirect starts at v1). Leader epochs arrive at v7 (KIP-320), topic ids at v10 (KIP-516).
//! kdirect never asks the broker to auto-create topics. v9 is the first flexible version.
//!
//! [`decode`] reads a response frame straight into a [`MetadataView`] with kdirect's bounded
//! reader; [`view`] builds the same view from kafka-protocol's [`MetadataResponse`].

use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::TopicName;

pub use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

use super::{api, topic_name};
use crate::code::ErrorCode;
use crate::error::ProtoError;
use crate::message::{check_version, Api};
use crate::read::{Reader, Res};

api!(
    /// Metadata: the cluster's brokers, topics and partition leaders.
    Metadata, Metadata, MetadataRequest, MetadataResponse, 1, 12
);

/// The first version that carries `allow_auto_topic_creation` (below it, the broker's
/// `auto.create.topics.enable` alone decides).
pub const FIRST_AUTO_CREATE_VERSION: i16 = 4;

/// A request at `version` for `topics`, or for every topic when `None`. From v4 on it asks
/// the broker not to create missing topics; below v4 the field does not exist.
pub fn request(topics: Option<&[&str]>, version: i16) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(version < FIRST_AUTO_CREATE_VERSION)
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

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 9;

/// Decodes a Metadata response frame body (size prefix removed, header included) at `version`
/// into a [`MetadataView`] (the same view as [`view`]), with every count and length checked
/// against the bytes that remain. Topic names longer than Kafka's 249-character limit are
/// [`ProtoError::Decode`] errors; bytes after the last field are ignored, as kafka-protocol
/// ignores them. Returns the correlation id
/// and the view.
pub fn decode(frame: Bytes, version: i16) -> Result<(i32, MetadataView), ProtoError> {
    check_version::<Metadata>(version)?;
    let mut r = Reader::new(&frame, Metadata::KEY, version, false);
    let cid = r.header(if version >= FIRST_FLEXIBLE_VERSION {
        1
    } else {
        0
    })?;
    r.flexible = version >= FIRST_FLEXIBLE_VERSION;
    let view = walk(&mut r, version, true)?;
    Ok((cid, view))
}

/// Reads a Metadata response body; builds the view only when `build`.
pub(crate) fn walk(r: &mut Reader<'_>, version: i16, build: bool) -> Res<MetadataView> {
    if version >= 3 {
        r.i32("throttle_time_ms")?;
    }
    let broker_min = 4
        + r.len_size(false)
        + 4
        + if version >= 1 { r.len_size(false) } else { 0 }
        + r.tags_size();
    let n = r.count(broker_min, "brokers count")?;
    let mut brokers = Vec::with_capacity(if build { n } else { 0 });
    for _ in 0..n {
        let node_id = r.i32("broker node_id")?;
        let host = r.str("broker host")?;
        let port = r.i32("broker port")?;
        let rack = if version >= 1 {
            r.nullable_str("broker rack")?
        } else {
            None
        };
        r.skip_tags("broker tagged fields")?;
        if build {
            brokers.push(BrokerInfo {
                node_id,
                host: host.to_owned(),
                port,
                rack: rack.map(str::to_owned),
            });
        }
    }
    let cluster_id = if version >= 2 {
        r.nullable_str("cluster_id")?
    } else {
        None
    };
    let controller_id = if version >= 1 {
        r.i32("controller_id")?
    } else {
        -1
    };
    let topic_min = 2
        + r.len_size(false)
        + if version >= 10 { 16 } else { 0 }
        + if version >= 1 { 1 } else { 0 }
        + r.len_size(true)
        + if version >= 8 { 4 } else { 0 }
        + r.tags_size();
    let partition_min = 2
        + 4
        + 4
        + if version >= 7 { 4 } else { 0 }
        + 2 * r.len_size(true)
        + if version >= 5 { r.len_size(true) } else { 0 }
        + r.tags_size();
    let n = r.count(topic_min, "topics count")?;
    let mut topics = Vec::with_capacity(if build { n } else { 0 });
    for _ in 0..n {
        let error = r.i16("topic error_code")?;
        // Nullable at every version in kafka-protocol's type; null names are left out.
        let name = r.topic_name(true, "topic name")?;
        let id = if version >= 10 {
            r.uuid("topic_id")?
        } else {
            [0; 16]
        };
        let internal = version >= 1 && r.bool("is_internal")?;
        let np = r.count(partition_min, "partitions count")?;
        let mut partitions = Vec::with_capacity(if build { np } else { 0 });
        for _ in 0..np {
            let error = r.i16("partition error_code")?;
            let partition = r.i32("partition_index")?;
            let leader = r.i32("leader_id")?;
            let leader_epoch = if version >= 7 {
                r.i32("leader_epoch")?
            } else {
                -1
            };
            let replicas = node_ids(r, build, "replica_nodes")?;
            let isr = node_ids(r, build, "isr_nodes")?;
            if version >= 5 {
                node_ids(r, false, "offline_replicas")?;
            }
            r.skip_tags("partition tagged fields")?;
            if build {
                partitions.push(PartitionInfo {
                    partition,
                    error: ErrorCode(error),
                    leader,
                    leader_epoch,
                    replicas,
                    isr,
                });
            }
        }
        if version >= 8 {
            r.i32("topic_authorized_operations")?;
        }
        r.skip_tags("topic tagged fields")?;
        if let (true, Some(name)) = (build, name) {
            partitions.sort_by_key(|p| p.partition);
            topics.push(TopicInfo {
                name: name.to_owned(),
                id,
                error: ErrorCode(error),
                internal,
                partitions,
            });
        }
    }
    if (8..=10).contains(&version) {
        r.i32("cluster_authorized_operations")?;
    }
    if version >= 13 {
        r.i16("error_code")?;
    }
    r.skip_tags("response tagged fields")?;
    brokers.sort_by_key(|b| b.node_id);
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(MetadataView {
        brokers,
        cluster_id: cluster_id.filter(|_| build).map(str::to_owned),
        controller_id,
        topics,
    })
}

/// An array of node ids (`int32`s); collected only when `build`.
fn node_ids(r: &mut Reader<'_>, build: bool, what: &str) -> Res<Vec<i32>> {
    let n = r.count(4, what)?;
    let mut out = Vec::with_capacity(if build { n } else { 0 });
    for _ in 0..n {
        let id = r.i32(what)?;
        if build {
            out.push(id);
        }
    }
    Ok(out)
}
