//! The fake broker's wire behaviour, checked with kafka-protocol's decoders (an encoder and
//! decoder kdirect did not write): versions, Fetch limits and waits, read_committed,
//! ListOffsets, bad input.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use kdirect_fake_broker::{codes, Codec, FakeCluster, FakeRecord};
use support::*;

fn values(n: usize, size: usize) -> Vec<FakeRecord> {
    (0..n)
        .map(|i| {
            FakeRecord::value(Bytes::from(vec![b'a' + (i % 26) as u8; size]))
                .with_timestamp(1000 + i as i64)
        })
        .collect()
}

/// Offsets of every record in a Fetch partition's records bytes.
fn offsets_in(records: &Option<Bytes>) -> Vec<i64> {
    let mut b = records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while !b.is_empty() {
        let set = RecordBatchDecoder::decode(&mut b).unwrap();
        out.extend(set.records.iter().filter(|r| !r.control).map(|r| r.offset));
    }
    out
}

#[test]
fn api_versions_advertises_and_refuses_unknown_versions() {
    let cluster = FakeCluster::builder().start().unwrap();
    let mut c = RawClient::connect(cluster.broker_addr(1).unwrap());
    let r: ApiVersionsResponse = c
        .send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .unwrap();
    assert_eq!(r.error_code, 0);
    let fetch = r
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Fetch as i16)
        .unwrap();
    assert_eq!((fetch.min_version, fetch.max_version), (4, 16));
    assert!(r
        .api_keys
        .iter()
        .all(|k| k.api_key != ApiKey::JoinGroup as i16));
    // v4 is newer than the fake speaks: UNSUPPORTED_VERSION in a v0 body, header v0.
    let (_, mut body) = c
        .send_raw(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default())
        .unwrap();
    let _ = ResponseHeader::decode(&mut body, 0).unwrap();
    let r = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(r.error_code, codes::UNSUPPORTED_VERSION);
    assert!(!r.api_keys.is_empty());
}

#[test]
fn every_fetch_and_metadata_version_decodes() {
    let cluster = FakeCluster::builder()
        .brokers(2)
        .topic("t", 2)
        .start()
        .unwrap();
    for _ in 0..3 {
        cluster
            .append_records("t", 0, &values(5, 10), Codec::None)
            .unwrap();
    }
    let id = cluster.topic_id("t").unwrap();
    let (leader, _) = cluster.leader("t", 0).unwrap();
    let mut c = RawClient::connect(cluster.broker_addr(leader).unwrap());
    for v in 1..=12 {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))))]));
        let r: MetadataResponse = c.send(ApiKey::Metadata, v, &req).unwrap();
        assert_eq!(r.brokers.len(), 2, "v{v}");
        assert_eq!(r.topics[0].partitions.len(), 2, "v{v}");
        assert_eq!(
            r.topics[0].topic_id,
            if v >= 10 { id } else { uuid::Uuid::nil() }
        );
    }
    for v in 4..=16 {
        let req = fetch_request("t", id, &[(0, 3)], 1 << 20, 1 << 20, 0);
        let r: FetchResponse = c.send(ApiKey::Fetch, v, &req).unwrap();
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "v{v}");
        assert_eq!(p.high_watermark, 15);
        // The batch holding offset 3 starts at 0: clients skip the records below.
        assert_eq!(offsets_in(&p.records), (0..15).collect::<Vec<_>>(), "v{v}");
    }
    // Unknown topic id (v13+).
    let req = fetch_request(
        "t",
        uuid::Uuid::from_u128(7),
        &[(0, 0)],
        1 << 20,
        1 << 20,
        0,
    );
    let r: FetchResponse = c.send(ApiKey::Fetch, 13, &req).unwrap();
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        codes::UNKNOWN_TOPIC_ID
    );
}

#[test]
fn fetch_honours_byte_limits_and_returns_an_oversized_first_batch() {
    let cluster = FakeCluster::builder().topic("t", 2).start().unwrap();
    // Partition 0: 4 batches of ~1 KiB; partition 1: one batch of ~4 KiB.
    for _ in 0..4 {
        cluster
            .append_records("t", 0, &values(10, 100), Codec::None)
            .unwrap();
    }
    cluster
        .append_records("t", 1, &values(40, 100), Codec::None)
        .unwrap();
    let id = cluster.topic_id("t").unwrap();
    let mut c = RawClient::connect(cluster.broker_addr(1).unwrap());
    let fetch = |c: &mut RawClient, part_max: i32, max: i32| -> FetchResponse {
        c.send(
            ApiKey::Fetch,
            12,
            &fetch_request("t", id, &[(0, 0), (1, 0)], part_max, max, 0),
        )
        .unwrap()
    };
    // Roomy limits: everything.
    let r = fetch(&mut c, 1 << 20, 1 << 20);
    assert_eq!(offsets_in(&r.responses[0].partitions[0].records).len(), 40);
    assert_eq!(offsets_in(&r.responses[0].partitions[1].records).len(), 40);
    // partition_max_bytes 2500: two whole batches of partition 0; partition 1's 4 KiB batch
    // is not the response's first, so it is left out.
    let r = fetch(&mut c, 2500, 1 << 20);
    assert_eq!(offsets_in(&r.responses[0].partitions[0].records).len(), 20);
    assert_eq!(offsets_in(&r.responses[0].partitions[1].records).len(), 0);
    // max_bytes 100 (smaller than any batch): still the first batch, nothing else.
    let r = fetch(&mut c, 1 << 20, 100);
    assert_eq!(
        offsets_in(&r.responses[0].partitions[0].records),
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(offsets_in(&r.responses[0].partitions[1].records).len(), 0);
    // Ask only for partition 1 with a tiny per-partition limit: its big batch comes whole.
    let r: FetchResponse = c
        .send(
            ApiKey::Fetch,
            12,
            &fetch_request("t", id, &[(1, 0)], 10, 1 << 20, 0),
        )
        .unwrap();
    assert_eq!(offsets_in(&r.responses[0].partitions[0].records).len(), 40);
}

#[test]
fn fetch_waits_for_min_bytes_up_to_max_wait() {
    let cluster = FakeCluster::builder().topic("t", 1).start().unwrap();
    let id = cluster.topic_id("t").unwrap();
    let mut c = RawClient::connect(cluster.broker_addr(1).unwrap());
    let req = fetch_request("t", id, &[(0, 0)], 1 << 20, 1 << 20, 0)
        .with_min_bytes(1)
        .with_max_wait_ms(300);
    let t0 = Instant::now();
    let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(offsets_in(&r.responses[0].partitions[0].records).len(), 0);
    // Data appended during the wait ends it early. The data is appended once the broker has
    // received the request (it counts them).
    let req = req.with_max_wait_ms(5000);
    let before = cluster.stats(1).unwrap().requests;
    let appender = std::thread::scope(|s| {
        let h = s.spawn(|| {
            wait_until(
                Duration::from_secs(10),
                "the Fetch reached the broker",
                || cluster.stats(1).unwrap().requests > before,
            );
            cluster
                .append_records("t", 0, &values(3, 10), Codec::None)
                .unwrap();
        });
        let t0 = Instant::now();
        let r: FetchResponse = c.send(ApiKey::Fetch, 12, &req).unwrap();
        h.join().unwrap();
        (t0.elapsed(), r)
    });
    assert!(appender.0 < Duration::from_secs(3), "{:?}", appender.0);
    assert_eq!(
        offsets_in(&appender.1.responses[0].partitions[0].records).len(),
        3
    );
}

#[test]
fn read_committed_stops_at_lso_and_lists_aborted_transactions() {
    let cluster = FakeCluster::builder().topic("t", 1).start().unwrap();
    let id = cluster.topic_id("t").unwrap();
    cluster
        .append_records("t", 0, &values(2, 10), Codec::None)
        .unwrap(); // 0,1
    let mut aborted = cluster.begin_transaction();
    cluster
        .append_transactional(&mut aborted, "t", 0, &values(3, 10), Codec::Zstd)
        .unwrap(); // 2..4
    cluster.abort_transaction(aborted).unwrap(); // marker 5
    let mut open = cluster.begin_transaction();
    cluster
        .append_transactional(&mut open, "t", 0, &values(2, 10), Codec::None)
        .unwrap(); // 6,7
    assert_eq!(cluster.high_watermark("t", 0).unwrap(), 8);
    assert_eq!(cluster.last_stable_offset("t", 0).unwrap(), 6);
    let mut c = RawClient::connect(cluster.broker_addr(1).unwrap());
    let r: FetchResponse = c
        .send(
            ApiKey::Fetch,
            12,
            &fetch_request("t", id, &[(0, 0)], 1 << 20, 1 << 20, 1),
        )
        .unwrap();
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.last_stable_offset, 6);
    assert_eq!(offsets_in(&p.records), vec![0, 1, 2, 3, 4]); // data below the LSO, marker hidden by the filter
    let a = p.aborted_transactions.as_ref().unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].first_offset, 2);
    // read_uncommitted: everything, aborted list null.
    let r: FetchResponse = c
        .send(
            ApiKey::Fetch,
            12,
            &fetch_request("t", id, &[(0, 0)], 1 << 20, 1 << 20, 0),
        )
        .unwrap();
    let p = &r.responses[0].partitions[0];
    assert_eq!(offsets_in(&p.records), vec![0, 1, 2, 3, 4, 6, 7]);
    assert!(p.aborted_transactions.is_none());
    // ListOffsets latest: HW vs LSO.
    let lo = |c: &mut RawClient, ts: i64, iso: i8| -> (i16, i64, i64) {
        let req = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_isolation_level(iso)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(ts)])]);
        let r: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req).unwrap();
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    };
    assert_eq!(lo(&mut c, -1, 0).1, 8);
    assert_eq!(lo(&mut c, -1, 1).1, 6);
    assert_eq!(lo(&mut c, -2, 0).1, 0);
    assert_eq!(lo(&mut c, 1001, 0), (0, 1, 1001));
    assert_eq!(lo(&mut c, 1002, 0), (0, 4, 1002)); // first record with ts ≥ 1002 is in the txn batch
    assert_eq!(lo(&mut c, 5000, 0), (0, -1, -1));
    assert_eq!(lo(&mut c, -3, 0), (0, 4, 1002));
    cluster.commit_transaction(open).unwrap();
    assert_eq!(lo(&mut c, -1, 1).1, 9);
}

#[test]
fn garbage_closes_only_that_connection() {
    use std::io::{Read, Write};
    let cluster = FakeCluster::builder().topic("t", 1).start().unwrap();
    let addr = cluster.broker_addr(1).unwrap();
    for garbage in [
        &[0x7f, 0xff, 0xff, 0xff][..],                           // 2 GiB frame
        &[0, 0, 0, 4, 0, 1, 0, 0][..],                           // shorter than a header
        &[0, 0, 0, 8, 0x7f, 0, 0, 0, 0, 0, 0, 1][..],            // unknown API key
        &[0, 0, 0, 10, 0, 1, 0, 12, 0, 0, 0, 1, 0xff, 0xff][..], // Fetch v12, truncated body
    ] {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(garbage).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "connection closed");
    }
    let mut c = RawClient::connect(addr);
    let r: MetadataResponse = c
        .send(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(None),
        )
        .unwrap();
    assert_eq!(r.topics.len(), 1);
}
