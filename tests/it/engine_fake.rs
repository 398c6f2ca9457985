//! kdirect's cluster view, ListOffsets and fetcher against kdirect's own fake broker: what
//! librdkafka's mock cannot do — transactions with markers, compaction gaps, truncated
//! responses, retention, lookups by timestamp, scripted faults.

use bytes::Bytes;
use kdirect::engine::cluster::Cluster;
use kdirect::engine::conn::ConnConfig;
use kdirect::engine::fetch::{
    fetch_ranges, fetch_ranges_within, FetchConfig, Fetcher, OffsetRange, RangeData,
};
use kdirect::engine::plan::PlanError;
use kdirect::engine::ErrorKind;
use kdirect::proto::api::list_offsets::OffsetSpec;
use kdirect::proto::kafka_protocol::messages::ApiKey;
use kdirect::proto::{ErrorCode, IsolationLevel};
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::support::rt;

fn cfg(iso: IsolationLevel) -> FetchConfig {
    let mut c = FetchConfig::default();
    c.params.max_wait_ms = 20;
    c.params.isolation = iso;
    c.partition_max_bytes = 2048;
    c.retry_backoff = std::time::Duration::from_millis(10);
    c
}

fn rec(p: i32, i: i64, ts: i64) -> FakeRecord {
    FakeRecord::value(Bytes::from(format!("v{p}-{i}")))
        .with_key(Bytes::from(format!("k{p}-{i}")))
        .with_timestamp(ts)
}

fn offsets_and_values(d: &RangeData) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    d.for_each_record(|r| {
        out.push((
            r.offset(),
            String::from_utf8(r.value().unwrap().to_vec()).unwrap(),
        ))
    })
    .unwrap();
    out
}

async fn connect(fake: &FakeCluster) -> Cluster {
    Cluster::connect(&[fake.bootstrap()], ConnConfig::default())
        .await
        .unwrap()
}

#[test]
fn list_offsets_by_timestamp_and_read_committed_end() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(2)
            .topic("t", 2)
            .build()
            .await
            .unwrap();
        let ts0 = 1_700_000_000_000;
        for p in 0..2 {
            for chunk in 0..4 {
                let recs: Vec<FakeRecord> = (0..10)
                    .map(|i| rec(p, chunk * 10 + i, ts0 + (chunk * 10 + i) * 1000))
                    .collect();
                fake.append_records("t", p, &recs, Codec::Lz4).unwrap();
            }
        }
        // An open transaction on partition 1: the last stable offset stays before it.
        let mut txn = fake.begin_transaction();
        fake.append_transactional(&mut txn, "t", 1, &[rec(1, 40, ts0 + 40_000)], Codec::None)
            .unwrap();
        let cluster = connect(&fake).await;
        let parts: Vec<(String, i32)> = (0..2).map(|p| ("t".to_owned(), p)).collect();
        let at = cluster
            .list_offsets(
                &parts,
                OffsetSpec::Timestamp(ts0 + 20_500),
                IsolationLevel::ReadUncommitted,
            )
            .await
            .unwrap();
        assert_eq!(at.len(), 2);
        for o in &at {
            assert_eq!(o.offset, 21, "first record at or after ts0+20.5s");
            assert_eq!(o.timestamp, ts0 + 21_000);
        }
        let hw = cluster
            .list_offsets(&parts, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
            .await
            .unwrap();
        let lso = cluster
            .list_offsets(&parts, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
            .await
            .unwrap();
        assert_eq!((hw[0].offset, hw[1].offset), (40, 41));
        assert_eq!(
            (lso[0].offset, lso[1].offset),
            (40, 40),
            "open transaction holds the LSO"
        );
        fake.commit_transaction(txn).unwrap();
    });
}

#[test]
fn read_committed_hides_aborted_records_and_markers() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("tx", 1)
            .build()
            .await
            .unwrap();
        let mut expect_committed = Vec::new();
        let mut all = Vec::new();
        let mut n = 0i64;
        for round in 0..6 {
            let mut txn = fake.begin_transaction();
            let recs: Vec<FakeRecord> = (0..5).map(|i| rec(0, n + i, 1)).collect();
            let base = fake
                .append_transactional(&mut txn, "tx", 0, &recs, Codec::Zstd)
                .unwrap();
            for i in 0..5 {
                all.push(base + i);
                if round % 3 != 1 {
                    expect_committed.push(base + i);
                }
            }
            n += 5;
            if round % 3 == 1 {
                fake.abort_transaction(txn).unwrap();
            } else {
                fake.commit_transaction(txn).unwrap();
            }
        }
        let end = fake.high_watermark("tx", 0).unwrap();
        let cluster = connect(&fake).await;
        let range = vec![OffsetRange {
            topic: "tx".into(),
            partition: 0,
            from: 0,
            until: end,
        }];
        let committed = fetch_ranges(&cluster, &range, &cfg(IsolationLevel::ReadCommitted))
            .await
            .unwrap();
        let got: Vec<i64> = offsets_and_values(&committed[0])
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        assert_eq!(
            got, expect_committed,
            "aborted records and control markers hidden"
        );
        let uncommitted = fetch_ranges(&cluster, &range, &cfg(IsolationLevel::ReadUncommitted))
            .await
            .unwrap();
        let got: Vec<i64> = offsets_and_values(&uncommitted[0])
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        assert_eq!(
            got, all,
            "read_uncommitted sees aborted data, never markers"
        );
    });
}

#[test]
fn compaction_gaps_truncation_and_faults() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(3)
            .topic("g", 3)
            .build()
            .await
            .unwrap();
        let mut expect: Vec<Vec<i64>> = vec![Vec::new(); 3];
        for p in 0..3 {
            for chunk in 0..20 {
                let base = fake.high_watermark("g", p).unwrap();
                let recs: Vec<FakeRecord> = (0..10).map(|i| rec(p, base + i, 1)).collect();
                fake.append_records("g", p, &recs, Codec::Snappy).unwrap();
                expect[p as usize].extend(base..base + 10);
                if chunk % 4 == 0 {
                    fake.skip_offsets("g", p, 7).unwrap(); // a compaction gap
                }
            }
        }
        let cluster = connect(&fake).await;
        // Faults during the run: truncated responses, a retriable error, a leader move, a
        // dropped connection.
        fake.truncate_fetches("g", 0, 3).unwrap();
        fake.inject_error(
            "g",
            1,
            ApiKey::Fetch,
            ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
            Some(2),
        )
        .unwrap();
        let (leader2, _) = fake.leader("g", 2).unwrap();
        let ids = fake.broker_ids();
        let other = *ids.iter().find(|b| **b != leader2).unwrap();
        fake.move_leader("g", 2, other).unwrap();
        fake.drop_connection_after(ids[0], 3).unwrap();
        let ranges: Vec<OffsetRange> = (0..3)
            .map(|p| OffsetRange {
                topic: "g".into(),
                partition: p,
                from: 5,
                until: fake.high_watermark("g", p).unwrap() - 3,
            })
            .collect();
        let data = fetch_ranges(&cluster, &ranges, &cfg(IsolationLevel::ReadUncommitted))
            .await
            .unwrap();
        for (p, d) in data.iter().enumerate() {
            let got = offsets_and_values(d);
            let want: Vec<i64> = expect[p]
                .iter()
                .copied()
                .filter(|o| *o >= 5 && *o < d.range.until)
                .collect();
            assert_eq!(
                got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
                want,
                "g-{p}"
            );
            for (o, v) in &got {
                assert_eq!(v, &format!("v{p}-{o}"));
            }
        }
    });
}

/// Records removed by retention under a planned range: the broker answers
/// OFFSET_OUT_OF_RANGE with its log start, and the fetcher names it as data loss with the
/// exact offsets lost.
#[test]
fn retention_under_a_range_is_data_loss_with_the_lost_offsets() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("r", 1)
            .build()
            .await
            .unwrap();
        for _ in 0..5 {
            let base = fake.high_watermark("r", 0).unwrap();
            let recs: Vec<FakeRecord> = (0..10).map(|i| rec(0, base + i, 1)).collect();
            fake.append_records("r", 0, &recs, Codec::None).unwrap();
        }
        fake.set_log_start("r", 0, 30).unwrap();
        let cluster = connect(&fake).await;
        let earliest = cluster
            .list_offsets(
                &[("r".to_owned(), 0)],
                OffsetSpec::Earliest,
                IsolationLevel::ReadUncommitted,
            )
            .await
            .unwrap();
        assert_eq!(earliest[0].offset, 30);
        let range = vec![OffsetRange {
            topic: "r".into(),
            partition: 0,
            from: 10,
            until: 40,
        }];
        let err = fetch_ranges(&cluster, &range, &cfg(IsolationLevel::ReadUncommitted))
            .await
            .unwrap_err();
        match err.kind() {
            ErrorKind::Plan(PlanError::DataLoss {
                topic,
                partition: 0,
                lost_from,
                lost_until,
                ..
            }) => {
                assert_eq!(topic, "r");
                assert_eq!((*lost_from, *lost_until), (10, 30));
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("data loss in r-0"), "{err}");
    });
}

/// A range that ends inside a stored batch leaves that batch to the partition's next range:
/// the broker sends it once, not once per range (with ranges a few stored batches long, the
/// re-read doubled the bytes fetched). A range wholly inside the kept batch is read from it
/// with no Fetch at all and passes it on to the next range (at 512 partitions most ranges are
/// shorter than a stored batch: fetching those again read the log about twice). After a
/// leader change, or when the next range starts elsewhere, the batch is not used and the
/// range fetches what it needs.
#[test]
fn a_stored_batch_a_range_ends_inside_is_not_fetched_again_by_the_next_range() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(2)
            .topic("c", 1)
            .build()
            .await
            .unwrap();
        // Eight stored batches of 100 records of the same size.
        for b in 0..8i64 {
            let recs: Vec<FakeRecord> = (0..100)
                .map(|i| FakeRecord::value(Bytes::from(format!("v{:06}", b * 100 + i))))
                .collect();
            fake.append_records("c", 0, &recs, Codec::None).unwrap();
        }
        let cluster = connect(&fake).await;
        let budget = Fetcher::new(64 << 20);
        let cfg = cfg(IsolationLevel::ReadUncommitted);
        let served = || {
            fake.broker_ids()
                .iter()
                .map(|&b| fake.stats(b).unwrap().fetched_record_bytes)
                .sum::<u64>()
        };
        let read = |from: i64, until: i64| {
            let cluster = &cluster;
            let budget = &budget;
            let cfg = &cfg;
            async move {
                let range = vec![OffsetRange {
                    topic: "c".into(),
                    partition: 0,
                    from,
                    until,
                }];
                let data = fetch_ranges_within(cluster, &range, cfg, budget)
                    .await
                    .unwrap();
                let got = offsets_and_values(&data[0]);
                let want: Vec<(i64, String)> =
                    (from..until).map(|o| (o, format!("v{o:06}"))).collect();
                assert_eq!(got, want, "[{from}, {until})");
            }
        };
        // Learn the batch size: [0, 100) is exactly the first batch.
        read(0, 100).await;
        let batch = served();
        // [100, 150) ends inside the second batch; [150, 250) starts with it, then fetches
        // the third.
        read(100, 150).await;
        assert_eq!(served(), 2 * batch);
        assert!(
            budget.in_use() > 0,
            "the second batch is kept for the next range"
        );
        read(150, 250).await;
        assert_eq!(served(), 3 * batch, "the second batch was sent once");
        // Ranges wholly inside the kept batch need no fetch: each passes it on to the next,
        // and the one that reaches past it fetches only the fourth batch.
        let before = budget.in_use();
        read(250, 260).await;
        read(260, 270).await;
        assert_eq!(
            served(),
            3 * batch,
            "no fetch for ranges inside the kept batch"
        );
        assert_eq!(budget.in_use(), before, "the kept batch is reserved once");
        read(270, 300).await;
        assert_eq!(served(), 3 * batch);
        read(300, 350).await;
        assert_eq!(served(), 4 * batch);
        // The next range starts elsewhere: the kept batch is dropped, its budget freed, and
        // the range fetches the fourth batch again and the fifth.
        read(360, 420).await;
        assert_eq!(served(), 6 * batch);
        // A leader change the client knows of: the batch kept from [350, 420) is not used
        // (records it holds past the old leader's reach may be gone after an unclean
        // election; a change the client has not seen yet is the stream's truncation check's).
        let (leader, _) = fake.leader("c", 0).unwrap();
        fake.move_leader("c", 0, if leader == 1 { 2 } else { 1 })
            .unwrap();
        cluster.refresh(Some(&["c"])).await.unwrap();
        let before = served();
        read(420, 500).await;
        assert_eq!(
            served(),
            before + batch,
            "the fifth batch was fetched again"
        );
        // Nothing is kept past the log's end, and once no range uses what is kept, the
        // budget is all free.
        read(700, 800).await;
        assert_eq!(budget.in_use(), 0);
    });
}

/// A large range of a leader's only partition is read as sub-ranges at the same time (one
/// per Fetch in flight): the second sub-range is asked from its own start (an offset inside a
/// stored batch, which only a cut there asks), every record comes back once and in order, the
/// log is served about once (the batch at the cut twice), and the partition's next range
/// still starts from the kept batch at the range's end. With one Fetch in flight, or while the
/// sizing knows nothing yet, the range is read whole.
#[test]
fn a_large_range_of_a_lone_partition_is_read_as_sub_ranges_at_once() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .topic("big", 1)
            .build()
            .await
            .unwrap();
        // 40 stored batches of 500 records of ~110 bytes: about 2.2 MB.
        for b in 0..40i64 {
            let recs: Vec<FakeRecord> = (0..500)
                .map(|i| FakeRecord::value(Bytes::from(format!("v{:0100}", b * 500 + i))))
                .collect();
            fake.append_records("big", 0, &recs, Codec::None).unwrap();
        }
        let cluster = connect(&fake).await;
        let served = || fake.stats(1).unwrap().fetched_record_bytes;
        let range = |from: i64, until: i64| {
            vec![OffsetRange {
                topic: "big".into(),
                partition: 0,
                from,
                until,
            }]
        };
        let check = |d: &RangeData, from: i64, until: i64| {
            let got = offsets_and_values(d);
            let want: Vec<(i64, String)> =
                (from..until).map(|o| (o, format!("v{o:0100}"))).collect();
            assert_eq!(got.len(), want.len(), "[{from}, {until})");
            assert!(got == want, "[{from}, {until}) in order, once each");
        };
        for depth in [2usize, 1] {
            let budget = Fetcher::new(64 << 20);
            let mut cfg = cfg(IsolationLevel::ReadUncommitted);
            cfg.partition_max_bytes = 64 << 10;
            cfg.in_flight_per_leader = depth;
            // The first range teaches the sizing the data.
            let d = fetch_ranges_within(&cluster, &range(0, 500), &cfg, &budget)
                .await
                .unwrap();
            check(&d[0], 0, 500);
            drop(d);
            let (asked_before, served_before) = (fake.fetch_offsets(1).unwrap().len(), served());
            // [500, 19_499): the cut at 500 + 18_999 / 2 = 9_999 is inside a stored batch.
            let d = fetch_ranges_within(&cluster, &range(500, 19_499), &cfg, &budget)
                .await
                .unwrap();
            check(&d[0], 500, 19_499);
            assert_eq!((d[0].range.from, d[0].range.until), (500, 19_499));
            drop(d);
            let asked: Vec<i64> = fake.fetch_offsets(1).unwrap()[asked_before..]
                .iter()
                .map(|&(_, o)| o)
                .collect();
            let sent = served() - served_before;
            let batch = 500 * 110;
            if depth == 2 {
                assert!(
                    asked.contains(&9_999),
                    "the second sub-range from its start: {asked:?}"
                );
                assert!(
                    sent <= 40 * batch as u64,
                    "about once: {sent} bytes for a {} byte range",
                    38 * batch
                );
            } else {
                assert!(!asked.contains(&9_999), "read whole: {asked:?}");
            }
            // The next range starts with the batch 19_499 falls inside, kept from the last
            // sub-range: only the batch after it is fetched.
            let before = served();
            let d = fetch_ranges_within(&cluster, &range(19_499, 19_700), &cfg, &budget)
                .await
                .unwrap();
            check(&d[0], 19_499, 19_700);
            let next = served() - before;
            assert!(
                next < batch as u64 * 3 / 2,
                "the stored batch at the range's end was kept for the next range: {next} bytes"
            );
        }
    });
}
