//! Each scripted fault, driven against librdkafka's consumer (recovery: every record exactly
//! once) and a raw kafka-protocol client (the error code on the wire).

mod support;

use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use kdirect_fake_broker::{codes, Codec, FakeCluster};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Offset;
use support::*;

const TOPIC: &str = "t";

/// `batches` batches of 10 records in each partition; returns what a reader must see.
fn load(cluster: &FakeCluster, partitions: i32, batches: usize, from: usize) -> Vec<Consumed> {
    let mut expected = Vec::new();
    for p in 0..partitions {
        for b in 0..batches {
            let recs: Vec<_> = (0..10).map(|i| record(p, (from + b) * 10 + i)).collect();
            let base = cluster
                .append_records(TOPIC, p, &recs, Codec::None)
                .unwrap();
            for (k, r) in recs.iter().enumerate() {
                expected.push(Consumed::from_fake(p, base + k as i64, r));
            }
        }
    }
    expected
}

/// A consumer that fetches about one batch per request, so faults land mid-stream.
fn small_fetch_consumer(cluster: &FakeCluster, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut cfg = vec![("fetch.message.max.bytes", "1000")];
    cfg.extend_from_slice(extra);
    consumer(&cluster.bootstrap(), &cfg)
}

fn read_exactly(c: &BaseConsumer, expected: &[Consumed], timeout: Duration) {
    let (got, _errors) = poll_records(c, expected.len(), timeout);
    let extra = poll_extra(c, Duration::from_millis(300));
    assert!(extra.is_empty(), "duplicates or extras: {extra:?}");
    assert_eq!(sorted(got), sorted(expected.to_vec()));
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

fn raw_fetch_code(
    c: &mut RawClient,
    cluster: &FakeCluster,
    offset: i64,
    epoch: i32,
) -> (i16, usize) {
    let mut req = fetch_request(
        TOPIC,
        cluster.topic_id(TOPIC).unwrap(),
        &[(0, offset)],
        1 << 20,
        1 << 20,
        0,
    );
    req.topics[0].partitions[0].current_leader_epoch = epoch;
    let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req).unwrap();
    let p = &r.responses[0].partitions[0];
    (p.error_code, p.records.as_ref().map_or(0, |r| r.len()))
}

#[test]
fn drop_connection_after_n_requests_then_client_reconnects() {
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    let expected = load(&cluster, 1, 30, 0);
    cluster.drop_connection_after(1, 6).unwrap();
    let c = small_fetch_consumer(&cluster, &[]);
    assign(&c, TOPIC, 1, Offset::Beginning);
    read_exactly(&c, &expected, Duration::from_secs(20));
    let s = cluster.stats(1).unwrap();
    assert!(s.connections_accepted >= 2, "a reconnect happened: {s:?}");

    // Raw view (a fresh cluster, so no other client's requests count): the Nth request gets
    // no answer, the connection is closed.
    drop(c);
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    load(&cluster, 1, 1, 0);
    cluster.drop_connection_after(1, 2).unwrap();
    let mut raw = RawClient::connect(cluster.broker_addr(1).unwrap());
    assert_eq!(raw_fetch_code(&mut raw, &cluster, 0, -1).0, 0);
    let req = fetch_request(
        TOPIC,
        cluster.topic_id(TOPIC).unwrap(),
        &[(0, 0)],
        1 << 20,
        1 << 20,
        0,
    );
    assert!(
        raw.send_raw(ApiKey::Fetch, 12, &req).is_err(),
        "connection dropped"
    );
}

#[test]
fn injected_partition_errors_are_answered_then_cleared() {
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    let expected = load(&cluster, 1, 20, 0);
    let mut raw = RawClient::connect(cluster.broker_addr(1).unwrap());
    // NOT_LEADER_OR_FOLLOWER for the next 2 Fetches.
    cluster
        .inject_error(
            TOPIC,
            0,
            ApiKey::Fetch,
            codes::NOT_LEADER_OR_FOLLOWER,
            Some(2),
        )
        .unwrap();
    let seen: Vec<i16> = (0..3)
        .map(|_| raw_fetch_code(&mut raw, &cluster, 0, -1).0)
        .collect();
    assert_eq!(seen, vec![6, 6, 0]);
    // OFFSET_OUT_OF_RANGE until cleared.
    cluster
        .inject_error(TOPIC, 0, ApiKey::Fetch, codes::OFFSET_OUT_OF_RANGE, None)
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            raw_fetch_code(&mut raw, &cluster, 0, -1),
            (codes::OFFSET_OUT_OF_RANGE, 0)
        );
    }
    cluster.clear_errors(TOPIC, 0).unwrap();
    assert_eq!(raw_fetch_code(&mut raw, &cluster, 0, -1).0, 0);
    // ListOffsets errors are separate from Fetch errors.
    cluster
        .inject_error(
            TOPIC,
            0,
            ApiKey::ListOffsets,
            codes::LEADER_NOT_AVAILABLE,
            Some(1),
        )
        .unwrap();
    let lo = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name())
            .with_partitions(vec![
                ListOffsetsPartition::default().with_timestamp(-1)
            ])]);
    let r: ListOffsetsResponse = raw.send(ApiKey::ListOffsets, 7, &lo).unwrap();
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        codes::LEADER_NOT_AVAILABLE
    );
    let r: ListOffsetsResponse = raw.send(ApiKey::ListOffsets, 7, &lo).unwrap();
    assert_eq!(r.topics[0].partitions[0].offset, 200);

    // librdkafka retries through retriable errors and still reads everything exactly once.
    cluster
        .inject_error(
            TOPIC,
            0,
            ApiKey::Fetch,
            codes::NOT_LEADER_OR_FOLLOWER,
            Some(4),
        )
        .unwrap();
    let c = small_fetch_consumer(&cluster, &[]);
    assign(&c, TOPIC, 1, Offset::Beginning);
    read_exactly(&c, &expected, Duration::from_secs(20));
}

#[test]
fn moved_leader_is_followed() {
    let cluster = FakeCluster::builder()
        .brokers(2)
        .topic(TOPIC, 1)
        .start()
        .unwrap();
    assert_eq!(cluster.leader(TOPIC, 0).unwrap(), (1, 0));
    let mut expected = load(&cluster, 1, 10, 0);
    let c = small_fetch_consumer(&cluster, &[]);
    assign(&c, TOPIC, 1, Offset::Beginning);
    let (first, _) = poll_records(&c, 50, Duration::from_secs(10));
    assert_eq!(first.len(), 50);
    assert_eq!(cluster.move_leader(TOPIC, 0, 2).unwrap(), 1);
    expected.extend(load(&cluster, 1, 10, 10));
    let (rest, _) = poll_records(&c, expected.len() - 50, Duration::from_secs(20));
    let mut got = first;
    got.extend(rest);
    assert_eq!(sorted(got), sorted(expected));
    assert!(
        cluster.stats(2).unwrap().requests > 0,
        "the new leader was asked"
    );

    // Raw: old leader refuses, new leader fences the old epoch, Metadata shows the move.
    let mut old = RawClient::connect(cluster.broker_addr(1).unwrap());
    assert_eq!(
        raw_fetch_code(&mut old, &cluster, 0, -1).0,
        codes::NOT_LEADER_OR_FOLLOWER
    );
    let mut new = RawClient::connect(cluster.broker_addr(2).unwrap());
    assert_eq!(
        raw_fetch_code(&mut new, &cluster, 0, 0).0,
        codes::FENCED_LEADER_EPOCH
    );
    assert_eq!(
        raw_fetch_code(&mut new, &cluster, 0, 5).0,
        codes::UNKNOWN_LEADER_EPOCH
    );
    assert_eq!(raw_fetch_code(&mut new, &cluster, 0, 1).0, codes::NONE);
    let md: MetadataResponse = old
        .send(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name()))
            ])),
        )
        .unwrap();
    let p = &md.topics[0].partitions[0];
    assert_eq!((p.leader_id.0, p.leader_epoch), (2, 1));
}

#[test]
fn delayed_responses_arrive_late_but_complete() {
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    let expected = load(&cluster, 1, 5, 0);
    cluster
        .set_response_delay(1, Duration::from_millis(300))
        .unwrap();
    let mut raw = RawClient::connect(cluster.broker_addr(1).unwrap());
    let t0 = Instant::now();
    assert_eq!(raw_fetch_code(&mut raw, &cluster, 0, -1).0, 0);
    assert!(
        t0.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t0.elapsed()
    );
    let c = consumer(&cluster.bootstrap(), &[]);
    assign(&c, TOPIC, 1, Offset::Beginning);
    read_exactly(&c, &expected, Duration::from_secs(20));
    // Cleared: a 30 s delay set and then cleared does not hold the next answer. (The margin is
    // the whole 30 s, so a loaded machine cannot fail this.)
    cluster
        .set_response_delay(1, Duration::from_secs(30))
        .unwrap();
    cluster.set_response_delay(1, Duration::ZERO).unwrap();
    let t0 = Instant::now();
    raw_fetch_code(&mut raw, &cluster, 0, -1);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the cleared delay still held the answer: {:?}",
        t0.elapsed()
    );
}

#[test]
fn truncated_fetch_responses_end_inside_a_batch() {
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    let expected = load(&cluster, 1, 20, 0);
    let id = cluster.topic_id(TOPIC).unwrap();
    let mut raw = RawClient::connect(cluster.broker_addr(1).unwrap());
    let full = raw_fetch_code(&mut raw, &cluster, 0, -1).1;
    cluster.truncate_fetches(TOPIC, 0, 1).unwrap();
    let r: FetchResponse = raw
        .send(
            ApiKey::Fetch,
            12,
            &fetch_request(TOPIC, id, &[(0, 0)], 1 << 20, 1 << 20, 0),
        )
        .unwrap();
    let mut records = r.responses[0].partitions[0].records.clone().unwrap();
    assert!(records.len() < full);
    let mut whole = 0;
    while !records.is_empty() {
        match RecordBatchDecoder::decode(&mut records) {
            Ok(_) => whole += 1,
            Err(_) => break,
        }
    }
    assert_eq!(whole, 19, "19 whole batches, then a cut one");
    assert!(!records.is_empty(), "a partial batch remains");
    assert_eq!(
        raw_fetch_code(&mut raw, &cluster, 0, -1).1,
        full,
        "one-shot"
    );

    // librdkafka skips the partial batch and fetches it again.
    cluster.truncate_fetches(TOPIC, 0, 5).unwrap();
    let c = consumer(&cluster.bootstrap(), &[("fetch.message.max.bytes", "3000")]);
    assign(&c, TOPIC, 1, Offset::Beginning);
    read_exactly(&c, &expected, Duration::from_secs(20));
}

#[test]
fn retention_moves_log_start_and_old_offsets_go_out_of_range() {
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    let expected = load(&cluster, 1, 10, 0);
    assert_eq!(cluster.set_log_start(TOPIC, 0, 50).unwrap(), 50);
    let mut raw = RawClient::connect(cluster.broker_addr(1).unwrap());
    assert_eq!(
        raw_fetch_code(&mut raw, &cluster, 0, -1).0,
        codes::OFFSET_OUT_OF_RANGE
    );
    assert_eq!(
        raw_fetch_code(&mut raw, &cluster, 49, -1).0,
        codes::OFFSET_OUT_OF_RANGE
    );
    assert_eq!(raw_fetch_code(&mut raw, &cluster, 50, -1).0, codes::NONE);
    // librdkafka asked for offset 10 resets to the earliest (50) and reads only what is left.
    let c = consumer(&cluster.bootstrap(), &[("auto.offset.reset", "earliest")]);
    assert_eq!(
        c.fetch_watermarks(TOPIC, 0, Duration::from_secs(5))
            .unwrap(),
        (50, 100)
    );
    assign(&c, TOPIC, 1, Offset::Offset(10));
    let (got, errors) = poll_records(&c, 50, Duration::from_secs(20));
    assert_eq!(sorted(got), expected[50..].to_vec(), "{errors:?}");
}

#[test]
fn stopped_broker_restarts_on_the_same_port_and_consumption_completes() {
    let cluster = FakeCluster::builder()
        .brokers(2)
        .topic(TOPIC, 2)
        .start()
        .unwrap();
    assert_eq!(cluster.leader(TOPIC, 0).unwrap().0, 1);
    assert_eq!(cluster.leader(TOPIC, 1).unwrap().0, 2);
    let mut expected = load(&cluster, 2, 5, 0);
    let c = consumer(&cluster.bootstrap(), &[]);
    assign(&c, TOPIC, 2, Offset::Beginning);
    let (mut got, _) = poll_records(&c, expected.len(), Duration::from_secs(10));
    assert_eq!(got.len(), expected.len());
    let addr = cluster.broker_addr(1).unwrap();
    let accepted = cluster.stats(1).unwrap().connections_accepted;
    cluster.stop_broker(1).unwrap();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "broker 1 is down"
    );
    let new = load(&cluster, 2, 5, 5);
    expected.extend(new.iter().cloned());
    // Partition 1 (broker 2) keeps flowing while broker 1 is down: all of its new records
    // arrive, and nothing of partition 0.
    let (more, _) = poll_records(&c, 50, Duration::from_secs(10));
    let new_on_1: Vec<Consumed> = new.into_iter().filter(|r| r.partition == 1).collect();
    assert_eq!(sorted(more.clone()), new_on_1);
    got.extend(more);
    cluster.restart_broker(1).unwrap();
    assert_eq!(cluster.broker_addr(1).unwrap(), addr);
    let (rest, _) = poll_records(&c, expected.len() - got.len(), Duration::from_secs(20));
    got.extend(rest);
    assert_eq!(sorted(got), sorted(expected));
    assert!(
        cluster.stats(1).unwrap().connections_accepted > accepted,
        "reconnected"
    );
}
