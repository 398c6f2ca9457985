//! The fetcher against librdkafka's mock cluster: data written by librdkafka's producer in
//! every codec, several brokers, injected errors and a leader move. Every record of every
//! range arrives exactly once, in order, and nothing outside the ranges.

use std::time::Duration;

use kdirect::engine::cluster::Cluster;
use kdirect::engine::conn::ConnConfig;
use kdirect::engine::fetch::{fetch_ranges, FetchConfig, OffsetRange};
use kdirect::engine::ErrorKind;
use kdirect::proto::ErrorCode;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use crate::support::{rt, Mock};

fn cfg() -> FetchConfig {
    let mut c = FetchConfig::default();
    c.params.max_wait_ms = 50;
    // Small responses, so each range takes several Fetch requests.
    c.partition_max_bytes = 4096;
    c.retry_backoff = Duration::from_millis(20);
    c
}

/// Every range asked came back, and each holds exactly its offsets' records.
fn check(ranges: &[OffsetRange], data: &[kdirect::engine::fetch::RangeData]) {
    let mut got: Vec<&OffsetRange> = data.iter().map(|d| &d.range).collect();
    got.sort_by_key(|r| (r.topic.clone(), r.partition));
    assert_eq!(got, ranges.iter().collect::<Vec<_>>(), "the ranges fetched");
    for d in data {
        let r = &d.range;
        let mut expect = r.from;
        let n = d
            .for_each_record(|rec| {
                assert_eq!(rec.offset(), expect, "{}-{}", r.topic, r.partition);
                let want = format!("value {}-{}", r.partition, rec.offset());
                assert_eq!(rec.value(), Some(want.as_bytes()));
                let key = format!("k{}-{}", r.partition, rec.offset());
                assert_eq!(rec.key(), Some(key.as_bytes()));
                expect += 1;
            })
            .unwrap();
        assert_eq!(expect, r.until, "{}-{} ended early", r.topic, r.partition);
        assert_eq!(n as i64, r.until - r.from);
        assert!(d.chunks.len() > 1, "expected several fetches per range");
    }
}

#[test]
fn reads_exact_ranges_in_every_codec() {
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let mock = Mock::new(3);
        let topic = format!("f-{codec}");
        mock.create_topic(&topic, 3);
        mock.produce_with(
            &topic,
            3,
            600,
            &[("compression.codec", codec), ("batch.num.messages", "50")],
        );
        rt().block_on(async {
            let boot: Vec<String> = mock.bootstrap().split(',').map(str::to_owned).collect();
            let cluster = Cluster::connect(&boot, ConnConfig::default())
                .await
                .unwrap();
            let ranges: Vec<OffsetRange> = (0..3)
                .map(|p| OffsetRange {
                    topic: topic.clone().into(),
                    partition: p,
                    from: 37 + p as i64,
                    until: 571,
                })
                .collect();
            let data = fetch_ranges(&cluster, &ranges, &cfg()).await.unwrap();
            check(&ranges, &data);
        });
    }
}

#[test]
fn retries_injected_errors_and_follows_a_leader_move() {
    let mock = Mock::new(3);
    mock.create_topic("moving", 2);
    mock.produce_with("moving", 2, 400, &[("batch.num.messages", "20")]);
    rt().block_on(async {
        let boot: Vec<String> = mock.bootstrap().split(',').map(str::to_owned).collect();
        let cluster = Cluster::connect(&boot, ConnConfig::default())
            .await
            .unwrap();
        let view = cluster.refresh(Some(&["moving"])).await.unwrap();
        let (leader, _) = view.leader("moving", 0).unwrap();
        // The next Fetch requests fail: NOT_LEADER_OR_FOLLOWER then REQUEST_TIMED_OUT (as
        // top-level request errors, which the mock applies to every partition).
        mock.cluster.request_errors(
            RDKafkaApiKey::Fetch,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            ],
        );
        // Move partition 0's leadership to another broker.
        let other = if leader == 1 { 2 } else { 1 };
        mock.cluster
            .partition_leader("moving", 0, Some(other))
            .unwrap();
        let ranges = vec![
            OffsetRange {
                topic: "moving".into(),
                partition: 0,
                from: 0,
                until: 400,
            },
            OffsetRange {
                topic: "moving".into(),
                partition: 1,
                from: 100,
                until: 300,
            },
        ];
        let data = fetch_ranges(&cluster, &ranges, &cfg()).await.unwrap();
        check(&ranges, &data);
        let view = cluster.view();
        assert_eq!(
            view.leader("moving", 0).unwrap().0,
            other,
            "metadata refreshed after the move"
        );
    });
}

#[test]
fn offset_out_of_range_names_the_range() {
    let mock = Mock::new(1);
    mock.create_topic("short", 1);
    mock.produce_with("short", 1, 10, &[]);
    rt().block_on(async {
        let boot: Vec<String> = mock.bootstrap().split(',').map(str::to_owned).collect();
        let cluster = Cluster::connect(&boot, ConnConfig::default())
            .await
            .unwrap();
        let ranges = vec![OffsetRange {
            topic: "short".into(),
            partition: 0,
            from: 50,
            until: 60,
        }];
        let err = fetch_ranges(&cluster, &ranges, &cfg()).await.unwrap_err();
        match err.kind() {
            ErrorKind::Range {
                code, from, until, ..
            } => {
                assert_eq!(*code, ErrorCode::OFFSET_OUT_OF_RANGE);
                assert_eq!((*from, *until), (50, 60));
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("short-0"), "{err}");
    });
}
