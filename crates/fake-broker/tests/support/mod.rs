//! Helpers shared by the fake broker's integration tests: librdkafka's own consumer as the
//! independent reader.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_fake_broker::FakeRecord;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message, Timestamp};
use rdkafka::{Offset, TopicPartitionList};

/// One record as librdkafka delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: i64,
}

impl Consumed {
    pub fn from_fake(partition: i32, offset: i64, r: &FakeRecord) -> Self {
        Consumed {
            partition,
            offset,
            key: r.key.as_ref().map(|k| k.to_vec()),
            value: r.value.as_ref().map(|v| v.to_vec()),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.as_ref().map(|v| v.to_vec())))
                .collect(),
            timestamp: r.timestamp,
        }
    }
}

/// A librdkafka consumer with CRC checks on, not in a group (assign mode).
pub fn consumer(bootstrap: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", "kdirect-fake-broker-tests")
        .set("enable.auto.commit", "false")
        .set("check.crcs", "true")
        .set("isolation.level", "read_uncommitted")
        .set("socket.timeout.ms", "10000")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .set("topic.metadata.refresh.interval.ms", "500")
        .set("fetch.wait.max.ms", "100");
    if let Ok(d) = std::env::var("RDKAFKA_DEBUG") {
        cfg.set("debug", &d);
    }
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    cfg.create().expect("librdkafka consumer")
}

/// Assigns every partition from `offset`.
pub fn assign(c: &BaseConsumer, topic: &str, partitions: i32, offset: Offset) {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, offset).unwrap();
    }
    c.assign(&tpl).unwrap();
}

/// Polls until `want` records arrived or `timeout` passed; errors are collected, not fatal.
pub fn poll_records(
    c: &BaseConsumer,
    want: usize,
    timeout: Duration,
) -> (Vec<Consumed>, Vec<String>) {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        match c.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => out.push(Consumed {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default(),
                timestamp: match m.timestamp() {
                    Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => t,
                    Timestamp::NotAvailable => -1,
                },
            }),
            Some(Err(e)) => errors.push(e.to_string()),
            None => {}
        }
    }
    (out, errors)
}

/// Polls for `quiet` and returns anything that still arrives (should be nothing).
pub fn poll_extra(c: &BaseConsumer, quiet: Duration) -> Vec<Consumed> {
    poll_records(c, usize::MAX, quiet).0
}

/// Sorts by (partition, offset).
pub fn sorted(mut v: Vec<Consumed>) -> Vec<Consumed> {
    v.sort_by_key(|c| (c.partition, c.offset));
    v
}

/// A deterministic record: key, value, two headers, a timestamp.
pub fn record(partition: i32, i: usize) -> FakeRecord {
    FakeRecord::value(Bytes::from(format!(
        "value-{partition}-{i}-{}",
        "x".repeat(i % 50)
    )))
    .with_key(Bytes::from(format!("key-{i}")))
    .with_header("h1", Some(Bytes::from(format!("{i}"))))
    .with_header("null-header", None)
    .with_timestamp(1_700_000_000_000 + i as i64 * 10)
}

/// A minimal blocking Kafka client over kafka-protocol's types, for asserting on raw
/// responses (error codes, limits, aborted lists) that a full client would hide.
pub struct RawClient {
    stream: std::net::TcpStream,
    correlation_id: i32,
}

impl RawClient {
    pub fn connect(addr: std::net::SocketAddr) -> Self {
        let stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        RawClient {
            stream,
            correlation_id: 0,
        }
    }

    /// Sends one request; returns the raw response body (header stripped).
    pub fn send_raw<Req>(
        &mut self,
        key: kafka_protocol::messages::ApiKey,
        version: i16,
        req: &Req,
    ) -> std::io::Result<(i32, Bytes)>
    where
        Req: kafka_protocol::protocol::Encodable,
    {
        use kafka_protocol::protocol::Encodable;
        use std::io::{Read, Write};
        self.correlation_id += 1;
        let header = kafka_protocol::messages::RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                "raw-test",
            )));
        let mut buf = bytes::BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        req.encode(&mut buf, version).unwrap();
        let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        self.stream.write_all(&frame)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body)?;
        Ok((self.correlation_id, Bytes::from(body)))
    }

    /// Sends one request and decodes the response with kafka-protocol.
    pub fn send<Req, Resp>(
        &mut self,
        key: kafka_protocol::messages::ApiKey,
        version: i16,
        req: &Req,
    ) -> std::io::Result<Resp>
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
    {
        let (corr, mut body) = self.send_raw(key, version, req)?;
        let header = kafka_protocol::messages::ResponseHeader::decode(
            &mut body,
            Resp::header_version(version),
        )
        .unwrap();
        assert_eq!(header.correlation_id, corr);
        let resp = Resp::decode(&mut body, version).unwrap();
        assert!(body.is_empty(), "{} trailing bytes", body.len());
        Ok(resp)
    }
}

use kafka_protocol::protocol::Decodable as _;

/// A Fetch request for one partition.
pub fn fetch_request(
    topic: &str,
    topic_id: uuid::Uuid,
    partitions: &[(i32, i64)],
    partition_max_bytes: i32,
    max_bytes: i32,
    isolation_level: i8,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, TopicName};
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(kafka_protocol::protocol::StrBytes::from_string(
                topic.to_string(),
            )))
            .with_topic_id(topic_id)
            .with_partitions(
                partitions
                    .iter()
                    .map(|(p, o)| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_fetch_offset(*o)
                            .with_partition_max_bytes(partition_max_bytes)
                    })
                    .collect(),
            )])
}

#[allow(unused_imports)] // not every test binary that includes this module waits
pub use kdirect_test_support::wait_until;
