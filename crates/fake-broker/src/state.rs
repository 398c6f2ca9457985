//! The cluster's shared state: brokers, topics, partitions, committed offsets, faults.
//!
//! One `Mutex` guards it all. Handlers take it briefly to gather `Bytes` handles (cheap
//! reference-count bumps) and encode responses after releasing it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::error::FakeError;
use crate::log::PartitionLog;

/// State shared by the control handle and every broker task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub state: Mutex<State>,
    /// Woken whenever a log changes (appends, retention), for Fetch's max-wait.
    pub data_changed: Notify,
    /// Every listener's TLS (set at start, never changed).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Every listener's SASL PLAIN users (set at start, never changed).
    pub sasl: Option<crate::api::sasl::SaslConfig>,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a control-API caller panicked mid-update; the state is still
        // structurally valid (every update is a few field writes), so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
pub(crate) struct BrokerState {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub running: bool,
    /// Close the connection carrying the Nth request from now on (1 = the next request).
    pub drop_after: Option<u32>,
    pub delay: Duration,
    pub connections_accepted: u64,
    pub requests: u64,
    /// Requests by API key.
    pub requests_by_api: std::collections::BTreeMap<i16, u64>,
    pub tls_handshakes_failed: u64,
    pub sasl_authentications: u64,
    pub sasl_failures: u64,
    pub unauthenticated_requests: u64,
    pub sessions_expired: u64,
    /// Bytes of record batches sent in Fetch answers.
    pub fetched_record_bytes: u64,
    /// KIP-227: whether this broker opens fetch sessions (else it answers session id 0).
    pub fetch_sessions_enabled: bool,
    /// Fetch requests still to be answered at once, whatever `min_bytes` and `max_wait_ms`
    /// ask (as Kafka answers a session's request whose partitions' ends moved since).
    pub fetches_at_once: u32,
    /// The fetch sessions it holds, by id.
    pub fetch_sessions: std::collections::HashMap<i32, FetchSessionState>,
    /// The id of the next session it opens.
    pub next_fetch_session: i32,
    /// Fetch sessions opened, partitions listed in Fetch requests and in Fetch answers.
    pub fetch_sessions_opened: u64,
    pub fetch_partitions_asked: u64,
    pub fetch_partitions_answered: u64,
    /// (partition, fetch offset) of every partition Fetch requests listed, oldest first
    /// (the last [`FETCH_LOG_MAX`]).
    pub fetch_log: std::collections::VecDeque<(i32, i64)>,
}

/// Entries [`BrokerState::fetch_log`] keeps.
pub(crate) const FETCH_LOG_MAX: usize = 100_000;

/// A fetch session as a broker holds it (KIP-227): the epoch its next request must carry and
/// its partitions, in the order the broker reads them (one that returned records moves to
/// the back, as Kafka's `FetchSession` does).
#[derive(Debug, Default)]
pub(crate) struct FetchSessionState {
    pub epoch: i32,
    pub parts: Vec<SessionPartition>,
}

/// One partition of a fetch session: what the client last asked of it, and the ends the
/// session's last answer listing it gave (`None` until listed).
#[derive(Debug, Clone)]
pub(crate) struct SessionPartition {
    /// The topic as the request named it: by name below Fetch v13, by id from v13 on.
    pub topic: kafka_protocol::messages::TopicName,
    pub topic_id: uuid::Uuid,
    pub fetch: kafka_protocol::messages::fetch_request::FetchPartition,
    pub ends: Option<(i64, i64, i64)>,
}

#[derive(Debug)]
pub(crate) struct InjectedError {
    pub api: ApiKey,
    pub code: i16,
    pub remaining: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct PartitionState {
    pub leader: i32,
    pub leader_epoch: i32,
    pub log: PartitionLog,
    pub errors: Vec<InjectedError>,
    pub truncate_fetches: u32,
    /// A malformed Fetch answer for this partition, for every request while set.
    pub fetch_fault: Option<crate::FetchFault>,
    /// ListOffsets answers for earliest and latest forced to these values (a broker whose
    /// offsets make no sense), while set.
    pub offsets_override: Option<(i64, i64)>,
}

impl PartitionState {
    /// Takes one use of an injected error for `api`, if any.
    pub fn take_error(&mut self, api: ApiKey) -> Option<i16> {
        let i = self.errors.iter().position(|e| e.api == api)?;
        let code = self.errors[i].code;
        if let Some(n) = &mut self.errors[i].remaining {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.errors.remove(i);
            }
        }
        Some(code)
    }

    /// Kafka's leader-epoch check (KIP-320): -1 skips it.
    pub fn check_epoch(&self, requested: i32) -> Option<i16> {
        match requested {
            -1 => None,
            e if e < self.leader_epoch => Some(crate::codes::FENCED_LEADER_EPOCH),
            e if e > self.leader_epoch => Some(crate::codes::UNKNOWN_LEADER_EPOCH),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct TopicState {
    pub id: Uuid,
    pub partitions: Vec<PartitionState>,
}

#[derive(Debug, Clone)]
pub(crate) struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub cluster_id: String,
    pub brokers: Vec<BrokerState>,
    pub topics: BTreeMap<String, TopicState>,
    /// (group, topic, partition) → committed offset.
    pub committed: HashMap<(String, String, i32), Committed>,
    pub next_producer_id: i64,
    /// Topic-level Metadata error codes injected by tests (topic → code), until cleared.
    pub topic_errors: HashMap<String, i16>,
    topics_created: usize,
}

impl State {
    pub fn new(cluster_id: String) -> Self {
        Self {
            cluster_id,
            brokers: Vec::new(),
            topics: BTreeMap::new(),
            committed: HashMap::new(),
            next_producer_id: 1000,
            topic_errors: HashMap::new(),
            topics_created: 0,
        }
    }

    pub fn broker(&self, id: i32) -> Result<&BrokerState, FakeError> {
        self.brokers
            .iter()
            .find(|b| b.id == id)
            .ok_or(FakeError::UnknownBroker { broker: id })
    }

    pub fn broker_mut(&mut self, id: i32) -> Result<&mut BrokerState, FakeError> {
        self.brokers
            .iter_mut()
            .find(|b| b.id == id)
            .ok_or(FakeError::UnknownBroker { broker: id })
    }

    pub fn create_topic(&mut self, name: &str, partitions: i32) -> Result<(), FakeError> {
        if self.topics.contains_key(name) {
            return Err(FakeError::TopicExists {
                topic: name.to_string(),
            });
        }
        let n = self.brokers.len().max(1);
        let first = self.topics_created;
        self.topics_created += 1;
        let parts = (0..partitions.max(0) as usize)
            .map(|p| PartitionState {
                leader: self.brokers.get((first + p) % n).map_or(1, |b| b.id),
                leader_epoch: 0,
                log: PartitionLog::default(),
                errors: Vec::new(),
                truncate_fetches: 0,
                fetch_fault: None,
                offsets_override: None,
            })
            .collect();
        self.topics.insert(
            name.to_string(),
            TopicState {
                id: topic_uuid(name),
                partitions: parts,
            },
        );
        Ok(())
    }

    pub fn partition(&self, topic: &str, p: i32) -> Result<&PartitionState, FakeError> {
        let t = self
            .topics
            .get(topic)
            .ok_or_else(|| FakeError::UnknownTopic {
                topic: topic.to_string(),
            })?;
        usize::try_from(p)
            .ok()
            .and_then(|i| t.partitions.get(i))
            .ok_or_else(|| FakeError::UnknownPartition {
                topic: topic.to_string(),
                partition: p,
            })
    }

    pub fn partition_mut(&mut self, topic: &str, p: i32) -> Result<&mut PartitionState, FakeError> {
        let t = self
            .topics
            .get_mut(topic)
            .ok_or_else(|| FakeError::UnknownTopic {
                topic: topic.to_string(),
            })?;
        usize::try_from(p)
            .ok()
            .and_then(|i| t.partitions.get_mut(i))
            .ok_or_else(|| FakeError::UnknownPartition {
                topic: topic.to_string(),
                partition: p,
            })
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<(&String, &TopicState)> {
        self.topics.iter().find(|(_, t)| t.id == id)
    }

    /// The group coordinator for `key`: a stable hash over the brokers.
    pub fn coordinator(&self, key: &str) -> &BrokerState {
        let h = fnv1a(key.as_bytes());
        &self.brokers[(h % self.brokers.len() as u64) as usize]
    }
}

fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A deterministic, non-nil topic id derived from the name (version-4 layout bits set).
fn topic_uuid(name: &str) -> Uuid {
    let hi = fnv1a(name.as_bytes());
    let lo = fnv1a(&[name.as_bytes(), b"#kdirect"].concat());
    uuid::Builder::from_u128((u128::from(hi) << 64) | u128::from(lo))
        .with_version(uuid::Version::Random)
        .with_variant(uuid::Variant::RFC4122)
        .into_uuid()
}
