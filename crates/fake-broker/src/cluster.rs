//! The public handle: build a cluster, load data, script faults.
//!
//! The cluster runs on its own tokio runtime (its own threads), so every control method is a
//! plain synchronous call that works from `#[test]`, `#[tokio::test]` and a CLI alike, and a
//! blocking client (librdkafka's `BaseConsumer`) cannot starve the brokers.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::runtime::{Handle, Runtime};

use crate::api::sasl::SaslConfig;
use crate::batch::{
    encode_batch, encode_control_batch, split_batches, BatchOptions, Codec, ControlType, FakeRecord,
};
use crate::error::FakeError;
use crate::server::{spawn_broker, BrokerTask};
use crate::state::{BrokerState, InjectedError, Shared, State};
use crate::tls::FakeTls;

/// Builds a [`FakeCluster`].
#[derive(Debug, Clone)]
pub struct FakeClusterBuilder {
    brokers: i32,
    topics: Vec<(String, i32)>,
    host: String,
    first_port: u16,
    worker_threads: usize,
    cluster_id: String,
    tls: Option<FakeTls>,
    sasl: Option<SaslConfig>,
}

impl Default for FakeClusterBuilder {
    fn default() -> Self {
        Self {
            brokers: 1,
            topics: Vec::new(),
            host: "127.0.0.1".into(),
            first_port: 0,
            worker_threads: 2,
            cluster_id: "kdirect-fake-cluster".into(),
            tls: None,
            sasl: None,
        }
    }
}

impl FakeClusterBuilder {
    /// Number of brokers (ids 1..=n), each with its own listener. Default 1.
    pub fn brokers(mut self, n: i32) -> Self {
        self.brokers = n.max(1);
        self
    }

    /// Declares a topic; partition leaders go round-robin over the brokers.
    pub fn topic(mut self, name: impl Into<String>, partitions: i32) -> Self {
        self.topics.push((name.into(), partitions));
        self
    }

    /// Loopback address to listen on. Default 127.0.0.1.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    /// Port of broker 1; broker k listens on `port + k - 1`. Default 0: every port OS-chosen.
    pub fn port(mut self, port: u16) -> Self {
        self.first_port = port;
        self
    }

    /// Threads of the cluster's own runtime. Default 2.
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.worker_threads = n.max(1);
        self
    }

    /// Every broker's listener speaks TLS with `tls`'s certificate (the client trusts
    /// [`FakeTls::ca_pem`]); a plaintext client is answered with a TLS alert and closed.
    pub fn tls(mut self, tls: FakeTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Every listener requires SASL PLAIN (`security.protocol=SASL_PLAINTEXT`, or `SASL_SSL`
    /// with [`tls`](Self::tls)); `user` may log in with `password`. Call once per user. The
    /// only mechanism enabled is PLAIN; see `docs/fake-broker.md` for what is refused and how.
    pub fn sasl_plain_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl
            .get_or_insert_with(SaslConfig::default)
            .users
            .insert(user.into(), password.into());
        self
    }

    /// KIP-368 (`connections.max.reauth.ms`): SaslAuthenticate v1+ announces `lifetime`, and a
    /// request arriving on a connection whose session is older than that closes it
    /// ([`BrokerStats::sessions_expired`] counts those). Needs [`sasl_plain_user`](Self::sasl_plain_user).
    pub fn sasl_session_lifetime(mut self, lifetime: Duration) -> Self {
        self.sasl
            .get_or_insert_with(SaslConfig::default)
            .session_lifetime = Some(lifetime);
        self
    }

    /// Starts the cluster (binds every listener). Usable from async code; the cluster still
    /// runs on its own runtime.
    pub async fn build(self) -> Result<FakeCluster, FakeError> {
        self.start()
    }

    /// Starts the cluster from synchronous code.
    pub fn start(self) -> Result<FakeCluster, FakeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.worker_threads)
            .thread_name("kdirect-fake-broker")
            .enable_all()
            .build()
            .map_err(|e| FakeError::Io {
                broker: 0,
                source: e,
            })?;
        let mut state = State::new(self.cluster_id);
        let mut listeners = Vec::new();
        for k in 0..self.brokers {
            let id = k + 1;
            let port = if self.first_port == 0 {
                0
            } else {
                self.first_port.saturating_add(k as u16)
            };
            let l = TcpListener::bind((self.host.as_str(), port)).map_err(|e| FakeError::Io {
                broker: id,
                source: e,
            })?;
            let addr = l.local_addr().map_err(|e| FakeError::Io {
                broker: id,
                source: e,
            })?;
            state.brokers.push(BrokerState {
                id,
                host: self.host.clone(),
                port: addr.port(),
                running: true,
                drop_after: None,
                delay: Duration::ZERO,
                connections_accepted: 0,
                requests: 0,
                requests_by_api: Default::default(),
                tls_handshakes_failed: 0,
                sasl_authentications: 0,
                sasl_failures: 0,
                unauthenticated_requests: 0,
                sessions_expired: 0,
                fetched_record_bytes: 0,
                fetch_sessions_enabled: true,
                fetches_at_once: 0,
                fetch_sessions: Default::default(),
                next_fetch_session: 1,
                fetch_sessions_opened: 0,
                fetch_partitions_asked: 0,
                fetch_partitions_answered: 0,
                fetch_log: Default::default(),
            });
            listeners.push((id, l));
        }
        for (name, parts) in &self.topics {
            state.create_topic(name, *parts)?;
        }
        let tls = self.tls.as_ref().map(FakeTls::server_config).transpose()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            data_changed: tokio::sync::Notify::new(),
            tls,
            sasl: self.sasl,
        });
        let handle = runtime.handle().clone();
        let mut tasks = Vec::new();
        for (id, l) in listeners {
            let task = spawn_broker(&handle, shared.clone(), id, l).map_err(|e| FakeError::Io {
                broker: id,
                source: e,
            })?;
            tasks.push(Mutex::new(Some(task)));
        }
        Ok(FakeCluster {
            shared,
            handle,
            tasks,
            runtime: Some(runtime),
        })
    }
}

/// Per-broker counters, for tests that assert on reconnects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerStats {
    /// Connections accepted since the cluster started.
    pub connections_accepted: u64,
    /// Requests received since the cluster started.
    pub requests: u64,
    /// Those requests by API key (`ApiKey as i16`).
    pub requests_by_api: std::collections::BTreeMap<i16, u64>,
    /// Whether the broker is serving.
    pub running: bool,
    /// Connections closed because their TLS handshake failed (a plaintext client on a TLS
    /// listener, a client that refused the certificate).
    pub tls_handshakes_failed: u64,
    /// Successful SASL authentications.
    pub sasl_authentications: u64,
    /// SaslHandshake or SaslAuthenticate refusals (wrong password, unknown user, mechanism not
    /// enabled, out of order).
    pub sasl_failures: u64,
    /// Connections closed for a request sent before authenticating.
    pub unauthenticated_requests: u64,
    /// Connections closed for a request that arrived after the SASL session's lifetime.
    pub sessions_expired: u64,
    /// Bytes of record batches sent in Fetch answers (what a client read, and read again).
    pub fetched_record_bytes: u64,
    /// Fetch sessions (KIP-227) opened, and those open now.
    pub fetch_sessions_opened: u64,
    pub fetch_sessions_open: usize,
    /// Partitions listed in Fetch requests, and in Fetch answers (an incremental request or
    /// answer lists only what changed).
    pub fetch_partitions_asked: u64,
    pub fetch_partitions_answered: u64,
}

/// A malformed Fetch answer for one partition ([`FakeCluster::set_fetch_fault`]). Each keeps
/// the client's position where it is; none carries an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FetchFault {
    /// The partition is left out of the answer.
    Omit,
    /// The partition is answered with no records, while its high watermark says there are.
    Empty,
    /// The partition is answered under another partition number (one not asked for).
    WrongPartition,
    /// The answer holds the log's first batch again, whatever offset was asked.
    StaleBatch,
    /// The first batch is cut halfway: its header claims more bytes than the answer holds.
    Overlong,
}

/// An open transaction: batches appended with it stay invisible to read_committed readers
/// until [`FakeCluster::commit_transaction`]; [`FakeCluster::abort_transaction`] hides them.
#[derive(Debug)]
pub struct Transaction {
    producer_id: i64,
    producer_epoch: i16,
    /// (topic, partition, next sequence) touched so far.
    partitions: Vec<(String, i32, i32)>,
}

impl Transaction {
    /// The transaction's producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
}

/// A fake Kafka cluster: in-memory brokers on loopback ports. See the crate docs.
#[derive(Debug)]
pub struct FakeCluster {
    shared: Arc<Shared>,
    handle: Handle,
    tasks: Vec<Mutex<Option<BrokerTask>>>,
    runtime: Option<Runtime>,
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl FakeCluster {
    /// A builder: one broker, no topics, OS-chosen ports.
    pub fn builder() -> FakeClusterBuilder {
        FakeClusterBuilder::default()
    }

    /// `host:port` of every broker, comma-separated (a `bootstrap.servers` value).
    pub fn bootstrap(&self) -> String {
        let st = self.shared.lock();
        st.brokers
            .iter()
            .map(|b| format!("{}:{}", b.host, b.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Broker ids (1..=n).
    pub fn broker_ids(&self) -> Vec<i32> {
        self.shared.lock().brokers.iter().map(|b| b.id).collect()
    }

    /// The coordinator of consumer group `group` (a hash of the name over the brokers, stopped
    /// ones included: it does not move).
    pub fn group_coordinator(&self, group: &str) -> i32 {
        self.shared.lock().coordinator(group).id
    }

    /// A broker's listening address.
    pub fn broker_addr(&self, broker: i32) -> Result<SocketAddr, FakeError> {
        let st = self.shared.lock();
        let b = st.broker(broker)?;
        format!("{}:{}", b.host, b.port)
            .parse()
            .map_err(|_| FakeError::UnknownBroker { broker })
    }

    /// A broker's counters.
    pub fn stats(&self, broker: i32) -> Result<BrokerStats, FakeError> {
        let st = self.shared.lock();
        let b = st.broker(broker)?;
        Ok(BrokerStats {
            connections_accepted: b.connections_accepted,
            requests: b.requests,
            requests_by_api: b.requests_by_api.clone(),
            running: b.running,
            tls_handshakes_failed: b.tls_handshakes_failed,
            sasl_authentications: b.sasl_authentications,
            sasl_failures: b.sasl_failures,
            unauthenticated_requests: b.unauthenticated_requests,
            sessions_expired: b.sessions_expired,
            fetched_record_bytes: b.fetched_record_bytes,
            fetch_sessions_opened: b.fetch_sessions_opened,
            fetch_sessions_open: b.fetch_sessions.len(),
            fetch_partitions_asked: b.fetch_partitions_asked,
            fetch_partitions_answered: b.fetch_partitions_answered,
        })
    }

    /// Creates a topic after start.
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), FakeError> {
        self.shared.lock().create_topic(name, partitions)
    }

    /// The topic's id (Metadata v10+, Fetch v13+).
    pub fn topic_id(&self, topic: &str) -> Result<uuid::Uuid, FakeError> {
        let st = self.shared.lock();
        st.topics
            .get(topic)
            .map(|t| t.id)
            .ok_or_else(|| FakeError::UnknownTopic {
                topic: topic.to_string(),
            })
    }

    fn with_log<T>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut crate::state::PartitionState) -> Result<T, FakeError>,
    ) -> Result<T, FakeError> {
        let r = {
            let mut st = self.shared.lock();
            f(st.partition_mut(topic, partition)?)
        };
        self.shared.data_changed.notify_waiters();
        r
    }

    /// Appends every v2 batch in `batches` at the log end, rewriting base offsets; returns the
    /// first batch's new base offset. Transactional batches open a transaction for their
    /// producer id; COMMIT/ABORT control batches close it.
    pub fn append_batch(
        &self,
        topic: &str,
        partition: i32,
        batches: Bytes,
    ) -> Result<i64, FakeError> {
        self.with_log(topic, partition, |p| p.log.append(&batches).map(|(b, _)| b))
    }

    /// Appends the same encoded batch `times` times at consecutive offsets, sharing its bytes
    /// (one copy in memory however many times it is served). Returns the new log end.
    pub fn append_batch_repeated(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        times: usize,
    ) -> Result<i64, FakeError> {
        let mut split = split_batches(&batch)?;
        if split.len() != 1 {
            return Err(FakeError::MalformedBatch {
                position: 0,
                reason: format!("expected exactly one batch, found {}", split.len()),
            });
        }
        let (header, bytes) = split.remove(0);
        if header.is_transactional() || header.is_control() {
            return Err(FakeError::MalformedBatch {
                position: 0,
                reason: "only non-transactional batches can be repeated".into(),
            });
        }
        let body = bytes.slice(8..);
        self.with_log(topic, partition, |p| {
            // Stamped once, so that every copy shares the same bytes.
            let body = p.log.stamp(body);
            for _ in 0..times {
                p.log.push(header, body.clone(), None);
            }
            Ok(p.log.end)
        })
    }

    /// Encodes `records` as one batch with `codec` and appends it; returns its base offset.
    pub fn append_records(
        &self,
        topic: &str,
        partition: i32,
        records: &[FakeRecord],
        codec: Codec,
    ) -> Result<i64, FakeError> {
        let batch = encode_batch(records, &BatchOptions::codec(codec))?;
        self.append_batch(topic, partition, batch)
    }

    /// Moves the log end forward by `n` offsets with no data, as compaction leaves gaps.
    pub fn skip_offsets(&self, topic: &str, partition: i32, n: i64) -> Result<i64, FakeError> {
        self.with_log(topic, partition, |p| {
            p.log.skip(n);
            Ok(p.log.end)
        })
    }

    /// High watermark (= log end offset; there are no followers).
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Result<i64, FakeError> {
        Ok(self
            .shared
            .lock()
            .partition(topic, partition)?
            .log
            .high_watermark())
    }

    /// Last stable offset (first offset of the oldest open transaction, else the HW).
    pub fn last_stable_offset(&self, topic: &str, partition: i32) -> Result<i64, FakeError> {
        Ok(self
            .shared
            .lock()
            .partition(topic, partition)?
            .log
            .last_stable_offset())
    }

    /// Log start offset.
    pub fn log_start(&self, topic: &str, partition: i32) -> Result<i64, FakeError> {
        Ok(self
            .shared
            .lock()
            .partition(topic, partition)?
            .log
            .log_start)
    }

    /// Opens a transaction with a fresh producer id.
    pub fn begin_transaction(&self) -> Transaction {
        let mut st = self.shared.lock();
        let producer_id = st.next_producer_id;
        st.next_producer_id += 1;
        Transaction {
            producer_id,
            producer_epoch: 0,
            partitions: Vec::new(),
        }
    }

    /// Appends `records` as one transactional batch of `txn`; returns its base offset.
    pub fn append_transactional(
        &self,
        txn: &mut Transaction,
        topic: &str,
        partition: i32,
        records: &[FakeRecord],
        codec: Codec,
    ) -> Result<i64, FakeError> {
        let i = match txn
            .partitions
            .iter()
            .position(|(t, p, _)| t == topic && *p == partition)
        {
            Some(i) => i,
            None => {
                txn.partitions.push((topic.to_string(), partition, 0));
                txn.partitions.len() - 1
            }
        };
        let seq = txn.partitions[i].2;
        let batch = encode_batch(
            records,
            &BatchOptions {
                codec,
                producer_id: txn.producer_id,
                producer_epoch: txn.producer_epoch,
                base_sequence: seq,
                transactional: true,
            },
        )?;
        let base = self.append_batch(topic, partition, batch)?;
        txn.partitions[i].2 = seq.wrapping_add(records.len() as i32);
        Ok(base)
    }

    /// Writes COMMIT markers to every partition the transaction touched.
    pub fn commit_transaction(&self, txn: Transaction) -> Result<(), FakeError> {
        self.end_transaction(txn, ControlType::Commit)
    }

    /// Writes ABORT markers to every partition the transaction touched; read_committed readers
    /// never see its records.
    pub fn abort_transaction(&self, txn: Transaction) -> Result<(), FakeError> {
        self.end_transaction(txn, ControlType::Abort)
    }

    fn end_transaction(&self, txn: Transaction, kind: ControlType) -> Result<(), FakeError> {
        let marker = encode_control_batch(txn.producer_id, txn.producer_epoch, kind, now_ms())?;
        for (topic, partition, _) in &txn.partitions {
            self.append_batch(topic, *partition, marker.clone())?;
        }
        Ok(())
    }

    // ---- Fault injection -------------------------------------------------------------------

    /// The `n`th request `broker` receives from now on (1 = the next) is not answered: its
    /// connection is closed instead. One-shot.
    pub fn drop_connection_after(&self, broker: i32, n: u32) -> Result<(), FakeError> {
        self.shared.lock().broker_mut(broker)?.drop_after = Some(n.max(1));
        Ok(())
    }

    /// Answers `api` requests for this partition with `code`: for the next `times` requests,
    /// or until [`clear_errors`](Self::clear_errors) when `times` is `None`. Applies to
    /// Fetch, ListOffsets and Metadata (partition-level error code).
    pub fn inject_error(
        &self,
        topic: &str,
        partition: i32,
        api: ApiKey,
        code: i16,
        times: Option<u32>,
    ) -> Result<(), FakeError> {
        let mut st = self.shared.lock();
        let p = st.partition_mut(topic, partition)?;
        if times != Some(0) {
            p.errors.push(InjectedError {
                api,
                code,
                remaining: times,
            });
        }
        Ok(())
    }

    /// Removes every injected error and pending truncation for the partition.
    pub fn clear_errors(&self, topic: &str, partition: i32) -> Result<(), FakeError> {
        let mut st = self.shared.lock();
        let p = st.partition_mut(topic, partition)?;
        p.errors.clear();
        p.truncate_fetches = 0;
        p.fetch_fault = None;
        Ok(())
    }

    /// ListOffsets answers `earliest` for the log start and `latest` for the end of the
    /// partition (whatever its log holds), until cleared with `None`: offsets that make no
    /// sense (negative, earliest past latest) for testing clients' checks.
    pub fn set_list_offsets(
        &self,
        topic: &str,
        partition: i32,
        answer: Option<(i64, i64)>,
    ) -> Result<(), FakeError> {
        self.shared
            .lock()
            .partition_mut(topic, partition)?
            .offsets_override = answer;
        Ok(())
    }

    /// Metadata answers for `topic` carry the topic-level error `code` (and no partitions),
    /// until cleared with `None`; the topic need not exist.
    pub fn set_topic_error(&self, topic: &str, code: Option<i16>) {
        let mut st = self.shared.lock();
        match code {
            Some(c) => st.topic_errors.insert(topic.to_owned(), c),
            None => st.topic_errors.remove(topic),
        };
    }

    /// Every Fetch answer for the partition is malformed in the way `fault` says, until
    /// cleared with `None` (or [`clear_errors`](Self::clear_errors)). For testing that a
    /// client neither spins nor hangs on answers that never move its position.
    pub fn set_fetch_fault(
        &self,
        topic: &str,
        partition: i32,
        fault: Option<FetchFault>,
    ) -> Result<(), FakeError> {
        self.shared
            .lock()
            .partition_mut(topic, partition)?
            .fetch_fault = fault;
        Ok(())
    }

    /// The partition's leader id and leader epoch.
    pub fn leader(&self, topic: &str, partition: i32) -> Result<(i32, i32), FakeError> {
        let st = self.shared.lock();
        let p = st.partition(topic, partition)?;
        Ok((p.leader, p.leader_epoch))
    }

    /// Moves the partition's leadership to `broker` and bumps the leader epoch. The old
    /// leader answers NOT_LEADER_OR_FOLLOWER from now on.
    pub fn move_leader(&self, topic: &str, partition: i32, broker: i32) -> Result<i32, FakeError> {
        let mut st = self.shared.lock();
        st.broker(broker)?;
        let p = st.partition_mut(topic, partition)?;
        p.leader = broker;
        p.leader_epoch += 1;
        let epoch = p.leader_epoch;
        p.log.assign_epoch(epoch);
        drop(st);
        self.shared.data_changed.notify_waiters();
        Ok(epoch)
    }

    /// An unclean leader election (KIP-320's case): `broker` becomes the leader with a
    /// bumped epoch, and its log had only the offsets below `offset` (rounded down to a batch
    /// boundary): the rest is gone, and what is appended next is new records at those
    /// offsets, under the new epoch. Fetches that send a last fetched epoch the log no longer
    /// agrees with are answered with a diverging epoch, and OffsetForLeaderEpoch answers from
    /// the leader-epoch cache, as Kafka does. Returns the new epoch and the new log end.
    pub fn truncate_on_leader_change(
        &self,
        topic: &str,
        partition: i32,
        broker: i32,
        offset: i64,
    ) -> Result<(i32, i64), FakeError> {
        let mut st = self.shared.lock();
        st.broker(broker)?;
        let p = st.partition_mut(topic, partition)?;
        let end = p.log.truncate_to(offset);
        p.leader = broker;
        p.leader_epoch += 1;
        let epoch = p.leader_epoch;
        p.log.assign_epoch(epoch);
        drop(st);
        self.shared.data_changed.notify_waiters();
        Ok((epoch, end))
    }

    /// (partition, fetch offset) of each partition the Fetch requests `broker` received
    /// listed, oldest first (the last 100,000; an incremental request lists only what
    /// changed).
    pub fn fetch_offsets(&self, broker: i32) -> Result<Vec<(i32, i64)>, FakeError> {
        Ok(self
            .shared
            .lock()
            .broker(broker)?
            .fetch_log
            .iter()
            .copied()
            .collect())
    }

    /// Whether `broker` opens fetch sessions (KIP-227; on by default, as Kafka's). Off, it
    /// answers every request for one with session id 0 (full requests from then on);
    /// sessions it holds stay until evicted.
    pub fn set_fetch_sessions(&self, broker: i32, enabled: bool) -> Result<(), FakeError> {
        self.shared
            .lock()
            .broker_mut(broker)?
            .fetch_sessions_enabled = enabled;
        Ok(())
    }

    /// Makes `broker` answer its next `n` Fetch requests at once, whatever their `min_bytes`
    /// and `max_wait_ms` ask (Kafka answers a fetch session's request at once when the ends it
    /// last sent that session moved, data for the asked offsets or not).
    pub fn answer_fetches_at_once(&self, broker: i32, n: u32) -> Result<(), FakeError> {
        self.shared.lock().broker_mut(broker)?.fetches_at_once = n;
        Ok(())
    }

    /// Evicts every fetch session `broker` holds (as a full session cache or a restart does):
    /// their next incremental request is answered FETCH_SESSION_ID_NOT_FOUND.
    pub fn evict_fetch_sessions(&self, broker: i32) -> Result<(), FakeError> {
        self.shared
            .lock()
            .broker_mut(broker)?
            .fetch_sessions
            .clear();
        Ok(())
    }

    /// Delays every response of `broker` by `delay` (zero to stop).
    pub fn set_response_delay(&self, broker: i32, delay: Duration) -> Result<(), FakeError> {
        self.shared.lock().broker_mut(broker)?.delay = delay;
        Ok(())
    }

    /// The next `times` Fetch responses carrying data for this partition end inside a batch:
    /// the records field is cut halfway through its last batch.
    pub fn truncate_fetches(
        &self,
        topic: &str,
        partition: i32,
        times: u32,
    ) -> Result<(), FakeError> {
        self.shared
            .lock()
            .partition_mut(topic, partition)?
            .truncate_fetches = times;
        Ok(())
    }

    /// Retention: the log now starts at `offset` (clamped to the high watermark); fetches
    /// below it get OFFSET_OUT_OF_RANGE and ListOffsets earliest answers it.
    pub fn set_log_start(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, FakeError> {
        self.with_log(topic, partition, |p| {
            p.log.advance_start(offset);
            Ok(p.log.log_start)
        })
    }

    /// Stops a broker: closes its listener and every connection. Its partitions keep their
    /// leader (clients retry it); [`restart_broker`](Self::restart_broker) brings it back on
    /// the same port.
    pub fn stop_broker(&self, broker: i32) -> Result<(), FakeError> {
        let slot = self.task_slot(broker)?;
        let task = slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or(FakeError::BrokerState {
                broker,
                state: "stopped",
            })?;
        task.stop();
        self.shared.lock().broker_mut(broker)?.running = false;
        Ok(())
    }

    /// Restarts a stopped broker on its old port.
    pub fn restart_broker(&self, broker: i32) -> Result<(), FakeError> {
        let slot = self.task_slot(broker)?;
        let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_some() {
            return Err(FakeError::BrokerState {
                broker,
                state: "running",
            });
        }
        let addr = self.broker_addr(broker)?;
        let listener = TcpListener::bind(addr).map_err(|e| FakeError::Io { broker, source: e })?;
        let task = spawn_broker(&self.handle, self.shared.clone(), broker, listener)
            .map_err(|e| FakeError::Io { broker, source: e })?;
        *guard = Some(task);
        self.shared.lock().broker_mut(broker)?.running = true;
        Ok(())
    }

    fn task_slot(&self, broker: i32) -> Result<&Mutex<Option<BrokerTask>>, FakeError> {
        usize::try_from(broker - 1)
            .ok()
            .and_then(|i| self.tasks.get(i))
            .ok_or(FakeError::UnknownBroker { broker })
    }

    /// Stops every broker and the cluster's runtime.
    pub fn shutdown(mut self) {
        for slot in &self.tasks {
            if let Some(t) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                t.stop();
            }
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
