//! kdirect's fake broker as a fair stand-in: the same data in librdkafka's mock cluster and in
//! the fake gives the same Metadata / ListOffsets / Fetch results, seen through kdirect's engine
//! and through librdkafka's own consumer; and the `kdirect fake-broker` CLI serves librdkafka.
//! The ignored `bench_librdkafka_consumes_fake_broker` measures throughput and the fake
//! broker's own CPU time (see docs/fake-broker.md for how to run it).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect::engine::cluster::Cluster;
use kdirect::engine::conn::ConnConfig;
use kdirect::engine::fetch::{fetch_ranges, FetchConfig, OffsetRange};
use kdirect::proto::api::list_offsets::OffsetSpec;
use kdirect::proto::IsolationLevel;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::support::{rt, Mock};

const TS0: i64 = 1_700_000_000_000;
const PARTS: i32 = 3;
const PER_PARTITION: usize = 120;

/// The fake loaded with exactly what `Mock::produce(topic, PARTS, PER_PARTITION, TS0)` writes:
/// key `k{p}-{i}`, value `value {p}-{i}`, timestamp `TS0 + i·1000`, here in batches of 10.
fn fake_like_mock(topic: &str, brokers: i32) -> FakeCluster {
    let fake = FakeCluster::builder()
        .brokers(brokers)
        .topic(topic, PARTS)
        .start()
        .unwrap();
    for p in 0..PARTS {
        for chunk in 0..PER_PARTITION / 10 {
            let recs: Vec<FakeRecord> = (chunk * 10..chunk * 10 + 10)
                .map(|i| {
                    FakeRecord::value(Bytes::from(format!("value {p}-{i}")))
                        .with_key(Bytes::from(format!("k{p}-{i}")))
                        .with_timestamp(TS0 + i as i64 * 1000)
                })
                .collect();
            fake.append_records(topic, p, &recs, Codec::ALL[chunk % 5])
                .unwrap();
        }
    }
    fake
}

fn rd_consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "fake-vs-mock")
        .set("enable.auto.commit", "false")
        .set("check.crcs", "true")
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap()
}

type Row = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, i64);

/// librdkafka's view: watermarks, offsets for times, every record.
fn librdkafka_view(bootstrap: &str, topic: &str) -> (Vec<(i64, i64)>, Vec<i64>, Vec<Row>) {
    let c = rd_consumer(bootstrap);
    let t = Duration::from_secs(10);
    let marks = (0..PARTS)
        .map(|p| c.fetch_watermarks(topic, p, t).unwrap())
        .collect();
    let mut times = Vec::new();
    for ts in [
        0,
        TS0,
        TS0 + 500,
        TS0 + 37_000,
        TS0 + 119_000,
        TS0 + 10_000_000,
    ] {
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTS {
            tpl.add_partition_offset(topic, p, Offset::Offset(ts))
                .unwrap();
        }
        let r = c.offsets_for_times(tpl, t).unwrap();
        for e in r.elements() {
            times.push(match e.offset() {
                Offset::Offset(o) => o,
                Offset::End => -1,
                other => panic!("unexpected {other:?}"),
            });
        }
    }
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut rows = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows.len() < PARTS as usize * PER_PARTITION && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            rows.push((
                m.partition(),
                m.offset(),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                m.timestamp().to_millis().unwrap_or(-1),
            ));
        }
    }
    rows.sort();
    (marks, times, rows)
}

#[test]
fn fake_and_mock_agree_for_librdkafka() {
    let mock = Mock::new(3);
    mock.create_topic("same", PARTS);
    mock.produce("same", PARTS, PER_PARTITION, TS0);
    let fake = fake_like_mock("same", 3);
    let from_mock = librdkafka_view(&mock.bootstrap(), "same");
    let from_fake = librdkafka_view(&fake.bootstrap(), "same");
    assert_eq!(from_mock.2.len(), PARTS as usize * PER_PARTITION);
    assert_eq!(from_mock.0, from_fake.0, "watermarks");
    assert!(from_mock.2 == from_fake.2, "records differ");
    // librdkafka's mock answers every ListOffsets by timestamp with -1 (it implements only
    // earliest/latest), so the fake is checked against the data itself: per timestamp
    // 0, TS0, TS0+500, TS0+37s, TS0+119s, past the end — the first offset at or after it.
    let expect: Vec<i64> = [0, 0, 1, 37, 119, -1]
        .iter()
        .flat_map(|o| [*o; PARTS as usize])
        .collect();
    assert_eq!(from_fake.1, expect, "fake offsets_for_times");
    assert!(
        from_mock.1.iter().all(|o| *o == -1) || from_mock.1 == expect,
        "the mock now answers by timestamp: {:?}",
        from_mock.1
    );
}

/// kdirect's engine view: (partition count, broker count), offsets per spec, fetched records.
async fn engine_view(
    bootstrap: String,
    topic: &str,
) -> (
    usize,
    usize,
    Vec<(i32, i64, i64)>,
    Vec<(i64, Vec<u8>, Vec<u8>, i64)>,
) {
    let cluster = Cluster::connect(&[bootstrap], ConnConfig::default())
        .await
        .unwrap();
    let view = cluster.refresh(Some(&[topic])).await.unwrap();
    let parts: Vec<(String, i32)> = (0..PARTS).map(|p| (topic.to_string(), p)).collect();
    let mut offsets = Vec::new();
    for spec in [
        OffsetSpec::Earliest,
        OffsetSpec::Latest,
        OffsetSpec::Timestamp(TS0 + 37_000),
        OffsetSpec::Timestamp(TS0 + 37_001),
        OffsetSpec::Timestamp(TS0 + 10_000_000),
    ] {
        for o in cluster
            .list_offsets(&parts, spec, IsolationLevel::ReadUncommitted)
            .await
            .unwrap()
        {
            offsets.push((o.partition, o.offset, i64::from(o.error.0)));
        }
    }
    let ranges: Vec<OffsetRange> = (0..PARTS)
        .map(|p| OffsetRange {
            topic: topic.into(),
            partition: p,
            from: 7,
            until: PER_PARTITION as i64 - 3,
        })
        .collect();
    let mut cfg = FetchConfig::default();
    cfg.params.max_wait_ms = 20;
    cfg.partition_max_bytes = 1500;
    let data = fetch_ranges(&cluster, &ranges, &cfg).await.unwrap();
    let mut records = Vec::new();
    for d in &data {
        d.for_each_record(|r| {
            records.push((
                r.offset(),
                r.key().unwrap_or_default().to_vec(),
                r.value().unwrap_or_default().to_vec(),
                r.timestamp(),
            ))
        })
        .unwrap();
    }
    (
        view.topic(topic).unwrap().partitions.len(),
        view.brokers.len(),
        offsets,
        records,
    )
}

#[test]
fn fake_and_mock_agree_for_kdirect_engine() {
    let mock = Mock::new(2);
    mock.create_topic("eng", PARTS);
    mock.produce("eng", PARTS, PER_PARTITION, TS0);
    let fake = fake_like_mock("eng", 2);
    rt().block_on(async {
        let m = engine_view(mock.bootstrap(), "eng").await;
        let f = engine_view(fake.bootstrap(), "eng").await;
        assert_eq!(m.3.len(), PARTS as usize * (PER_PARTITION - 10));
        assert_eq!((m.0, m.1), (f.0, f.1), "partition and broker counts");
        assert!(m.3 == f.3, "fetched records differ");
        // Earliest and latest agree with the mock; by timestamp, the mock answers -1 (it
        // implements only earliest/latest), so the fake is checked against the data: TS0+37s
        // is offset 37, TS0+37.001s is 38, past the end is -1.
        let n = PARTS as usize;
        assert_eq!(m.2[..2 * n], f.2[..2 * n], "earliest/latest");
        let by_time: Vec<i64> = f.2[2 * n..].iter().map(|(_, o, _)| *o).collect();
        let expect: Vec<i64> = [37, 38, -1].iter().flat_map(|o| [*o; 3]).collect();
        assert_eq!(by_time, expect);
        assert!(f.2.iter().all(|(_, _, e)| *e == 0));
    });
}

/// Starts `kdirect fake-broker ARGS`; returns the child and its bootstrap address.
fn spawn_cli(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .arg("fake-broker")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn kdirect fake-broker");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let bootstrap = line
        .trim()
        .strip_prefix("bootstrap=")
        .unwrap_or_else(|| panic!("first line {line:?}"))
        .to_string();
    (child, bootstrap)
}

/// Counts records (and touches every payload byte) until `want` arrived or `timeout`.
fn drain(c: &BaseConsumer, want: u64, timeout: Duration) -> (u64, u64, u64) {
    let (mut n, mut bytes, mut sum) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + timeout;
    while n < want && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            let v = m.payload().unwrap_or_default();
            n += 1;
            bytes += v.len() as u64;
            sum = v.iter().fold(sum, |s, b| s.wrapping_add(u64::from(*b)));
        }
    }
    (n, bytes, sum)
}

#[test]
fn cli_fake_broker_serves_librdkafka_with_transactions() {
    let (mut child, bootstrap) = spawn_cli(&[
        "--port",
        "0",
        "--topic",
        "cli",
        "--partitions",
        "3",
        "--records",
        "10000",
        "--value-size",
        "20",
        "--codec",
        "lz4",
        "--brokers",
        "2",
        "--transactions",
        "abort-every=3",
        "--batch-records",
        "100",
    ]);
    // 3334/3333/3333 records per partition in batches of 100 → 34 transactions each; every
    // third (11 of them, all full batches) aborted: 3300 records hidden from read_committed.
    for (iso, want) in [("read_committed", 6700u64), ("read_uncommitted", 10_000)] {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "cli")
            .set("check.crcs", "true")
            .set("isolation.level", iso)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition_offset("cli", p, Offset::Beginning)
                .unwrap();
        }
        c.assign(&tpl).unwrap();
        let (n, bytes, _) = drain(&c, want, Duration::from_secs(30));
        assert_eq!((n, bytes), (want, want * 20), "{iso}");
        let (extra, _, _) = drain(&c, u64::MAX, Duration::from_millis(500));
        assert_eq!(extra, 0, "{iso}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Throughput: librdkafka's consumer reading `kdirect fake-broker` (10M × 100 B over 8
/// partitions by default; override with KDIRECT_BENCH_RECORDS / _PARTITIONS / _VALUE_SIZE /
/// _CODEC). Prints records/s, MB/s and the fake broker's own CPU seconds. Run with
/// `cargo test --release --test it fake_broker::bench -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark: run explicitly"]
fn bench_librdkafka_consumes_fake_broker() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let records = env("KDIRECT_BENCH_RECORDS", "10000000");
    let partitions = env("KDIRECT_BENCH_PARTITIONS", "8");
    let value_size = env("KDIRECT_BENCH_VALUE_SIZE", "100");
    let codec = env("KDIRECT_BENCH_CODEC", "none");
    let (mut child, bootstrap) = spawn_cli(&[
        "--port",
        "0",
        "--topic",
        "bench",
        "--partitions",
        &partitions,
        "--records",
        &records,
        "--value-size",
        &value_size,
        "--codec",
        &codec,
    ]);
    let want: u64 = records.parse().unwrap();
    let cpu_before = proc_cpu_seconds(child.id());
    let self_before = proc_cpu_seconds(std::process::id());
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &bootstrap)
        .set("group.id", "bench")
        .set("enable.auto.commit", "false")
        .set("check.crcs", "true")
        // librdkafka stops fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
        // local queue holds more than queued.min.messages (default 100000): a broker this
        // fast fills it in milliseconds, and the default turns the run into 1 s pauses.
        // Override with KDIRECT_BENCH_RDKAFKA="key=value,…" (e.g. to measure the defaults).
        .set("fetch.queue.backoff.ms", "10")
        .set("queued.min.messages", "1000000");
    for kv in env("KDIRECT_BENCH_RDKAFKA", "")
        .split(',')
        .filter(|s| !s.is_empty())
    {
        if let Some((k, v)) = kv.split_once('=') {
            cfg.set(k, v);
        }
    }
    if let Ok(d) = std::env::var("RDKAFKA_DEBUG") {
        cfg.set("debug", &d);
    }
    let c: BaseConsumer = cfg.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions.parse::<i32>().unwrap() {
        tpl.add_partition_offset("bench", p, Offset::Beginning)
            .unwrap();
    }
    let t0 = Instant::now();
    c.assign(&tpl).unwrap();
    let (n, bytes, sum) = drain(&c, want, Duration::from_secs(600));
    let secs = t0.elapsed().as_secs_f64();
    let cpu = proc_cpu_seconds(child.id()) - cpu_before;
    let consumer_cpu = proc_cpu_seconds(std::process::id()) - self_before;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(n, want);
    println!(
        "librdkafka from kdirect fake-broker: {n} records, {bytes} B in {secs:.2} s: \
         {:.0} records/s, {:.1} MB/s (checksum {sum}); fake broker CPU {cpu:.2} s \
         ({:.0}% of one core); consumer process CPU {consumer_cpu:.2} s",
        n as f64 / secs,
        bytes as f64 / secs / 1e6,
        cpu / secs * 100.0
    );
}

/// utime + stime of a process, from /proc/PID/stat (Linux), in seconds.
fn proc_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let hz = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    ticks / hz
}
