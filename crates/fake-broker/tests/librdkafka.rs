//! librdkafka's own consumer (a client kdirect's authors did not write) reads the fake broker.

mod support;

use std::time::Duration;

use kdirect_fake_broker::{Codec, FakeCluster};
use rdkafka::consumer::Consumer;
use rdkafka::Offset;
use support::*;

const TOPIC: &str = "t";

/// Every codec: several batches per partition, keys, headers, timestamps; records compared
/// exactly, CRCs checked by librdkafka.
#[test]
fn librdkafka_reads_every_record_in_every_codec() {
    for codec in Codec::ALL {
        let cluster = FakeCluster::builder()
            .brokers(3)
            .topic(TOPIC, 4)
            .start()
            .unwrap();
        let mut expected = Vec::new();
        for p in 0..4 {
            let mut i = 0;
            for batch_len in [1usize, 7, 100, 3] {
                let recs: Vec<_> = (i..i + batch_len).map(|i| record(p, i)).collect();
                let base = cluster.append_records(TOPIC, p, &recs, codec).unwrap();
                for (k, r) in recs.iter().enumerate() {
                    expected.push(Consumed::from_fake(p, base + k as i64, r));
                }
                i += batch_len;
            }
        }
        let c = consumer(&cluster.bootstrap(), &[]);
        assign(&c, TOPIC, 4, Offset::Beginning);
        let (got, errors) = poll_records(&c, expected.len(), Duration::from_secs(20));
        assert_eq!(got.len(), expected.len(), "{codec:?}: errors {errors:?}");
        assert_eq!(sorted(got), sorted(expected), "{codec:?}");
        assert!(errors.is_empty(), "{codec:?}: {errors:?}");
        let (lo, hi) = c
            .fetch_watermarks(TOPIC, 2, Duration::from_secs(5))
            .unwrap();
        assert_eq!((lo, hi), (0, 111));
    }
}

/// librdkafka with isolation.level=read_committed hides aborted records and control records,
/// and read_uncommitted shows aborted data but never markers — an independent check of the
/// fake's LSO and aborted-transaction lists.
#[test]
fn librdkafka_read_committed_hides_aborted_transactions() {
    let cluster = FakeCluster::builder()
        .brokers(2)
        .topic(TOPIC, 2)
        .start()
        .unwrap();
    let mut committed = Vec::new();
    let mut all = Vec::new();
    for round in 0..6 {
        for p in 0..2 {
            let plain: Vec<_> = (0..3).map(|i| record(p, round * 100 + i)).collect();
            let base = cluster
                .append_records(TOPIC, p, &plain, Codec::Snappy)
                .unwrap();
            for (k, r) in plain.iter().enumerate() {
                committed.push(Consumed::from_fake(p, base + k as i64, r));
                all.push(Consumed::from_fake(p, base + k as i64, r));
            }
        }
        let mut txn = cluster.begin_transaction();
        for p in 0..2 {
            for chunk in 0..2 {
                let recs: Vec<_> = (0..4)
                    .map(|i| record(p, round * 100 + 50 + chunk * 10 + i))
                    .collect();
                let codec = Codec::ALL[(round + chunk) % 5];
                let base = cluster
                    .append_transactional(&mut txn, TOPIC, p, &recs, codec)
                    .unwrap();
                for (k, r) in recs.iter().enumerate() {
                    let c = Consumed::from_fake(p, base + k as i64, r);
                    all.push(c.clone());
                    if round % 2 == 0 {
                        committed.push(c);
                    }
                }
            }
        }
        if round % 2 == 0 {
            cluster.commit_transaction(txn).unwrap();
        } else {
            cluster.abort_transaction(txn).unwrap();
        }
    }
    // An open transaction at the end: invisible to read_committed (beyond the LSO).
    let mut open = cluster.begin_transaction();
    let r = record(0, 999);
    let base = cluster
        .append_transactional(&mut open, TOPIC, 0, std::slice::from_ref(&r), Codec::None)
        .unwrap();
    all.push(Consumed::from_fake(0, base, &r));

    let c = consumer(
        &cluster.bootstrap(),
        &[("isolation.level", "read_committed")],
    );
    assign(&c, TOPIC, 2, Offset::Beginning);
    let (got, errors) = poll_records(&c, committed.len(), Duration::from_secs(20));
    assert!(errors.is_empty(), "{errors:?}");
    let extra = poll_extra(&c, Duration::from_millis(500));
    assert!(extra.is_empty(), "read_committed saw {extra:?}");
    assert_eq!(sorted(got), sorted(committed));

    let c = consumer(&cluster.bootstrap(), &[]);
    assign(&c, TOPIC, 2, Offset::Beginning);
    let (got, errors) = poll_records(&c, all.len(), Duration::from_secs(20));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(sorted(got), sorted(all));
    // Once the open transaction commits, read_committed readers see its record too.
    cluster.commit_transaction(open).unwrap();
    let (lo, hi) = c
        .fetch_watermarks(TOPIC, 0, Duration::from_secs(5))
        .unwrap();
    assert_eq!((lo, hi), (0, cluster.high_watermark(TOPIC, 0).unwrap()));
}

/// Offsets with compaction-style gaps (inside a batch and between batches) come through with
/// their real offsets.
#[test]
fn librdkafka_reads_offset_gaps() {
    let cluster = FakeCluster::builder().topic(TOPIC, 1).start().unwrap();
    let recs: Vec<_> = [0, 2, 3, 9]
        .iter()
        .map(|d| record(0, *d as usize).with_offset_delta(*d))
        .collect();
    let b0 = cluster.append_records(TOPIC, 0, &recs, Codec::Lz4).unwrap();
    cluster.skip_offsets(TOPIC, 0, 5).unwrap();
    let r = record(0, 77);
    let b1 = cluster
        .append_records(TOPIC, 0, std::slice::from_ref(&r), Codec::None)
        .unwrap();
    assert_eq!((b0, b1), (0, 15));
    let mut expected: Vec<_> = recs
        .iter()
        .map(|r| Consumed::from_fake(0, i64::from(r.offset_delta.unwrap()), r))
        .collect();
    expected.push(Consumed::from_fake(0, 15, &r));
    let c = consumer(&cluster.bootstrap(), &[]);
    assign(&c, TOPIC, 1, Offset::Beginning);
    let (got, errors) = poll_records(&c, expected.len(), Duration::from_secs(10));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(sorted(got), expected);
}
