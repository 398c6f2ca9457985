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
