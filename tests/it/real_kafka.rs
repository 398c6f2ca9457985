//! kdirect against Apache Kafka itself (KRaft, Kafka's own jars, started by
//! `tests/kafka/kafka.sh` through `tests/run.sh`). The data is written by Kafka's Java producer
//! and checked against Kafka's Java consumer (`tests/kafka/KTool.java`) and Kafka's own tools
//! (ConsumerGroupCommand), never by kdirect itself.
//!
//! Without `KDIRECT_TEST_KAFKA` (plain `cargo test`) every test here prints why it skips; under
//! `KDIRECT_REQUIRE_SERVICES=1` a missing broker fails instead.
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kdirect::engine::plan::{DataLossPolicy, StartPolicy};
use kdirect::proto::IsolationLevel;
use kdirect::DirectStream;

use crate::support::{read_and_commit_to, read_records, rt, service, wait_until_async};

/// One of the clusters `tests/kafka/kafka.sh` runs, and the Java tools to drive it.
pub struct Kafka {
    pub bootstrap: String,
    /// `single`, `trio` or `old`: the cluster name `kafka.sh stop|start|kill` takes.
    cluster: &'static str,
    classpath: String,
}

impl Kafka {
    fn get(var: &str, cluster: &'static str, test: &str) -> Option<Kafka> {
        let bootstrap = service(var, test)?;
        let classpath = service("KDIRECT_TEST_KAFKA_CP", test)?;
        Some(Kafka {
            bootstrap,
            cluster,
            classpath,
        })
    }

    /// The 1-node Kafka 4.1 cluster most tests use.
    pub fn single(test: &str) -> Option<Kafka> {
        Self::get("KDIRECT_TEST_KAFKA", "single", test)
    }

    /// The 3-node Kafka 4.1 cluster (replication factor 3) for failover tests.
    pub fn trio(test: &str) -> Option<Kafka> {
        Self::get("KDIRECT_TEST_KAFKA_TRIO", "trio", test)
    }

    /// The 1-node Kafka 3.9 cluster (the older protocol versions).
    pub fn old(test: &str) -> Option<Kafka> {
        Self::get("KDIRECT_TEST_KAFKA_OLD", "old", test)
    }

    /// The 1-node Kafka 4.1 cluster with SASL and TLS listeners; `bootstrap` is its PLAINTEXT
    /// port, for the Java tools (`tests/it/secure.rs` has the secured ones).
    pub fn secure(test: &str) -> Option<Kafka> {
        Self::get("KDIRECT_TEST_KAFKA_SECURE", "secure", test)
    }

    /// The 1-node Kafka 4.1 cluster with a SASL_PLAINTEXT GSSAPI listener (Kerberos);
    /// `bootstrap` is its PLAINTEXT port, for the Java tools (`tests/it/kerberos.rs` has the
    /// GSSAPI one).
    pub fn kerberos(test: &str) -> Option<Kafka> {
        Self::get("KDIRECT_TEST_KAFKA_KERBEROS", "kerberos", test)
    }

    /// Runs a Java main class on Kafka's classpath; panics with its stderr when it fails.
    pub fn java(&self, class: &str, args: &[&str]) -> String {
        let out = Command::new("java")
            .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
            .arg("-Dlog4j2.level=WARN")
            .arg("-cp")
            .arg(&self.classpath)
            .arg(class)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run java");
        assert!(
            out.status.success(),
            "java {class} {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `KTool COMMAND --bootstrap B ARGS...` as a child process (a producer that keeps going).
    pub fn spawn_tool(&self, command: &str, args: &[&str]) -> std::process::Child {
        Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-cp",
                &self.classpath,
                "KTool",
            ])
            .args([command, "--bootstrap", &self.bootstrap])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run java")
    }

    /// `KTool COMMAND --bootstrap B ARGS...`.
    /// A `java KTool COMMAND --bootstrap …` command, not started (stdin closed).
    pub fn tool_command(&self, command: &str) -> Command {
        let mut c = Command::new("java");
        c.args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-cp",
            &self.classpath,
            "KTool",
        ])
        .args([command, "--bootstrap", &self.bootstrap])
        .stdin(Stdio::null());
        c
    }

    pub fn tool(&self, command: &str, args: &[&str]) -> String {
        let mut all = vec![command, "--bootstrap", &self.bootstrap];
        all.extend_from_slice(args);
        self.java("KTool", &all)
    }

    /// Creates `topic` with `partitions` partitions, replicated to every node.
    pub fn create(&self, topic: &str, partitions: i32, extra: &[&str]) {
        let rf = self.bootstrap.split(',').count().to_string();
        let p = partitions.to_string();
        let mut args = vec!["--topic", topic, "--partitions", &p, "--rf", &rf];
        args.extend_from_slice(extra);
        self.tool("create", &args);
    }

    /// Produces `count` records round-robin over `partitions` with Kafka's Java producer: the
    /// n-th record of partition p has key `k{p}-{n}` and value `value {p}-{n}`.
    pub fn produce(&self, topic: &str, partitions: i32, count: u64, extra: &[&str]) {
        let p = partitions.to_string();
        let c = count.to_string();
        let mut args = vec!["--topic", topic, "--partitions", &p, "--count", &c];
        args.extend_from_slice(extra);
        self.tool("produce", &args);
    }

    /// Deletes `topic` and creates it again, one partition, with `count` records whose values
    /// start at 1000 (`value 0-1000`, ...): the same name, a new topic (a new id).
    pub fn recreate(&self, topic: &str, count: u64) {
        self.tool("delete-topic", &["--topic", topic]);
        self.create(topic, 1, &[]);
        self.produce(topic, 1, count, &["--from", "1000"]);
    }

    /// Each partition's end offset (high watermark) as the Java consumer's `endOffsets` sees it.
    pub fn end_offsets(&self, topic: &str) -> Vec<i64> {
        // "p offset" lines; the Java client's own log lines (a node down) may come first.
        self.tool("end-offsets", &["--topic", topic])
            .lines()
            .filter_map(|l| {
                let (p, o) = l.split_once(' ')?;
                p.parse::<i32>().ok()?;
                o.trim().parse().ok()
            })
            .collect()
    }

    /// What Kafka's Java consumer reads from `topic` up to its end offsets, one line a record.
    pub fn java_lines(&self, topic: &str, isolation: &str) -> Vec<String> {
        self.tool("consume", &["--topic", topic, "--isolation", isolation])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// [`Kafka::node`] as a function that can move to another thread.
    pub fn node_fn(&self, action: &'static str) -> impl Fn(u32) + Send + 'static {
        let cluster = self.cluster;
        move |node| node_action(cluster, action, node)
    }

    /// `kafka.sh stop|start|kill CLUSTER NODE`.
    pub fn node(&self, action: &str, node: u32) {
        node_action(self.cluster, action, node)
    }
}

/// `kafka.sh stop|start|kill CLUSTER NODE`.
fn node_action(cluster: &str, action: &str, node: u32) {
    {
        let script = std::env::var("KDIRECT_TEST_KAFKA_SCRIPT").expect("KDIRECT_TEST_KAFKA_SCRIPT");
        let st = Command::new("bash")
            .args([&script, action, cluster, &node.to_string()])
            .status()
            .expect("run kafka.sh");
        assert!(st.success(), "kafka.sh {action} {cluster} {node} failed");
    }
}

/// A topic name unique to this run (the broker outlives test runs).
pub fn topic(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{name}-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn hex(b: Option<&[u8]>) -> String {
    match b {
        None => "-".into(),
        Some(b) => {
            let mut s = String::with_capacity(1 + 2 * b.len());
            s.push('x');
            for x in b {
                s.push_str(&format!("{x:02x}"));
            }
            s
        }
    }
}

/// Reads `topic` from its start to the end offsets seen at start with kdirect, in the line
/// format of [`Kafka::java_lines`], in batches of 997 offsets.
pub fn kdirect_lines(bootstrap: &str, topic: &str, isolation: IsolationLevel) -> Vec<String> {
    kdirect_lines_with(bootstrap, topic, isolation, Some(997), false)
}

/// [`kdirect_lines`] with batches of at most `max_offsets` offsets (`maxOffsetsPerTrigger`),
/// or with the default settings.
pub fn kdirect_lines_with(
    bootstrap: &str,
    topic: &str,
    isolation: IsolationLevel,
    max_offsets: Option<u64>,
    chunked: bool,
) -> Vec<String> {
    rt().block_on(async {
        let mut builder = DirectStream::builder()
            .bootstrap(bootstrap)
            .topics(&[topic])
            .start(StartPolicy::Earliest)
            .isolation(isolation)
            .chunked(chunked)
            .until_latest(true);
        if let Some(n) = max_offsets {
            builder = builder.max_offsets_per_trigger(n);
        }
        let mut stream = builder.build().await.expect("build stream");
        let mut by_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        while let Some(mut batch) = stream.next_batch().await.expect("next batch") {
            stream
                .try_for_each_record(&mut batch, |range, r| {
                    let headers: Vec<String> = r
                        .headers()
                        .map(|h| format!("{}={}", String::from_utf8_lossy(h.key()), hex(h.value())))
                        .collect();
                    by_partition
                        .entry(range.partition)
                        .or_default()
                        .push(format!(
                            "{} {} {} {} {}",
                            range.partition,
                            r.offset(),
                            hex(r.key()),
                            hex(r.value()),
                            if headers.is_empty() {
                                "-".to_string()
                            } else {
                                headers.join(",")
                            }
                        ));
                    Ok::<(), kdirect::Error>(())
                })
                .await
                .expect("decode");
            stream.done(batch);
        }
        by_partition.into_values().flatten().collect()
    })
}

/// Runs the `kdirect` binary; panics with its stderr unless it succeeds. Returns its stdout.
pub fn kdirect_cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kdirect {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Compares line lists and names the first difference (the lists can be long).
fn assert_same(kdirect: &[String], java: &[String], what: &str) {
    for (i, (k, j)) in kdirect.iter().zip(java).enumerate() {
        assert_eq!(k, j, "{what}: record {i} differs (kdirect, then Java)");
    }
    assert_eq!(
        kdirect.len(),
        java.len(),
        "{what}: kdirect read {} records, Kafka's Java consumer {}",
        kdirect.len(),
        java.len()
    );
}

#[test]
fn every_codec_with_keys_and_headers_equals_the_java_consumer() {
    let Some(kafka) = Kafka::single("every_codec_with_keys_and_headers_equals_the_java_consumer")
    else {
        return;
    };
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let t = topic(&format!("codec-{codec}"));
        kafka.create(&t, 3, &[]);
        // Small batches and big ones: many record batches per fetch, and batches over 16 KiB.
        kafka.produce(
            &t,
            3,
            3000,
            &["--codec", codec, "--headers", "--batch-size", "4096"],
        );
        kafka.produce(
            &t,
            3,
            3000,
            &["--codec", codec, "--from", "3000", "--value-size", "700"],
        );
        let java = kafka.java_lines(&t, "read_uncommitted");
        assert_eq!(
            java.len(),
            6000,
            "{codec}: the Java consumer read everything"
        );
        let ours = kdirect_lines(&kafka.bootstrap, &t, IsolationLevel::ReadUncommitted);
        assert_same(&ours, &java, codec);
    }
}

#[test]
fn read_committed_with_aborted_transactions_equals_the_java_consumer() {
    if let Some(kafka) =
        Kafka::single("read_committed_with_aborted_transactions_equals_the_java_consumer")
    {
        committed_and_aborted_transactions_equal_the_java_consumer(&kafka);
    }
}

fn committed_and_aborted_transactions_equal_the_java_consumer(kafka: &Kafka) {
    let t = topic("txn");
    kafka.create(&t, 2, &[]);
    let txid = format!("{t}-tx");
    // Transactions of 20 records; every third aborted. Then plain records after them.
    kafka.produce(
        &t,
        2,
        600,
        &[
            "--transactional-id",
            &txid,
            "--abort-every",
            "3",
            "--codec",
            "lz4",
        ],
    );
    kafka.produce(&t, 2, 40, &["--from", "600"]);

    let java_committed = kafka.java_lines(&t, "read_committed");
    let ours_committed = kdirect_lines(&kafka.bootstrap, &t, IsolationLevel::ReadCommitted);
    assert_same(&ours_committed, &java_committed, "read_committed");
    // 30 transactions, 10 aborted: 400 committed + 40 plain records.
    assert_eq!(java_committed.len(), 440);
    assert!(ours_committed
        .iter()
        .all(|l| !l.contains(&hex(Some(b" txn 2")))));

    let java_all = kafka.java_lines(&t, "read_uncommitted");
    let ours_all = kdirect_lines(&kafka.bootstrap, &t, IsolationLevel::ReadUncommitted);
    assert_same(&ours_all, &java_all, "read_uncommitted");
    assert_eq!(
        java_all.len(),
        640,
        "aborted records are visible read_uncommitted"
    );
}

#[test]
fn metadata_and_offsets_work_against_kafka_3_9() {
    let Some(kafka) = Kafka::old("metadata_and_offsets_work_against_kafka_3_9") else {
        return;
    };
    let t = topic("old");
    kafka.create(&t, 2, &[]);
    kafka.produce(&t, 2, 500, &["--codec", "zstd", "--headers"]);
    let java = kafka.java_lines(&t, "read_committed");
    let ours = kdirect_lines(&kafka.bootstrap, &t, IsolationLevel::ReadCommitted);
    assert_same(&ours, &java, "Kafka 3.9");
    assert_eq!(ours.len(), 500);
}

#[test]
fn data_loss_under_the_position_is_reported_with_its_exact_range() {
    let Some(kafka) =
        Kafka::single("data_loss_under_the_position_is_reported_with_its_exact_range")
    else {
        return;
    };
    let t = topic("loss");
    kafka.create(&t, 1, &[]);
    kafka.produce(&t, 1, 1000, &["--batch-size", "1024"]);
    // Records below 600 deleted while the position (from an explicit start) is 100.
    kafka.tool(
        "delete-records",
        &["--topic", &t, "--partition", "0", "--before", "600"],
    );
    assert_loss_reported(&kafka, &t, 100, 600, 400);
}

/// Read partition 0 of `t` from an explicit start offset `from` to its end: with
/// failOnDataLoss=true an error naming the topic and the lost range `[from, log_start)`; with
/// false the batch reports exactly that range and reading resumes at `log_start`, with `n` records.
fn assert_loss_reported(kafka: &Kafka, t: &str, from: i64, log_start: i64, n: usize) {
    let read = |policy: DataLossPolicy| {
        let tp = kdirect::engine::plan::TopicPartition::new(t, 0);
        rt().block_on(async move {
            let mut stream = DirectStream::builder()
                .bootstrap(&kafka.bootstrap)
                .topics(&[t])
                .start(StartPolicy::Explicit(BTreeMap::from([(
                    tp,
                    kdirect::engine::plan::StartOffset::Offset(from),
                )])))
                .data_loss(policy)
                .until_latest(true)
                .build()
                .await?;
            let mut first = None;
            let mut lost = Vec::new();
            let mut n = 0;
            while let Some(batch) = stream.next_batch().await? {
                lost.extend(batch.lost().iter().map(|l| (l.from, l.until)));
                batch
                    .for_each_record(|_, r| {
                        first.get_or_insert(r.offset());
                        n += 1;
                    })
                    .unwrap();
                stream.done(batch);
            }
            Ok::<_, kdirect::Error>((first, n, lost))
        })
    };
    let err = read(DataLossPolicy::Fail).expect_err("failOnDataLoss=true fails");
    let msg = err.to_string();
    assert!(
        msg.contains(&from.to_string()) && msg.contains(&log_start.to_string()) && msg.contains(t),
        "the error names the topic and the lost range [{from}, {log_start}): {msg}"
    );
    let (first, got, lost) = read(DataLossPolicy::Earliest).expect("earliest policy resumes");
    assert_eq!(
        lost,
        vec![(from, log_start)],
        "the lost range is reported exactly"
    );
    assert_eq!(first, Some(log_start), "resumes from the log start");
    assert_eq!(got, n);
}

#[test]
fn records_removed_by_retention_are_reported_as_lost() {
    let Some(kafka) = Kafka::single("records_removed_by_retention_are_reported_as_lost") else {
        return;
    };
    let t = topic("retention");
    // A day of retention, and 300 records stamped two days ago: the broker's retention check
    // (every second here) removes their segments, rolling the active one.
    kafka.create(&t, 1, &["--config", "retention.ms=86400000"]);
    let two_days_ago = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 2 * 86_400_000;
    kafka.produce(
        &t,
        1,
        300,
        &[
            "--timestamp-base",
            &two_days_ago.to_string(),
            "--batch-size",
            "2048",
        ],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = kdirect_cli(&[
            "offsets",
            "list",
            "-b",
            &kafka.bootstrap,
            "-t",
            &t,
            "--at",
            "earliest",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        if v["partitions"][0]["offset"].as_i64() == Some(300) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never removed the records: {v}"
        );
        // The poll interval of this deadline loop (each poll runs `kdirect offsets list`).
        std::thread::sleep(Duration::from_millis(500));
    }
    kafka.produce(&t, 1, 50, &["--from", "300"]);
    assert_loss_reported(&kafka, &t, 20, 300, 50);
}

#[test]
fn ends_and_timestamps_match_the_java_client() {
    let Some(kafka) = Kafka::single("ends_and_timestamps_match_the_java_client") else {
        return;
    };
    let t = topic("ts");
    // Timestamps from 2023: without retention.ms=-1 the broker deletes them within a second.
    kafka.create(&t, 2, &["--config", "retention.ms=-1"]);
    // Record n of each partition at 1_700_000_000_000 + n s.
    kafka.produce(&t, 2, 200, &["--timestamp-base", "1700000000000"]);
    let kd = kdirect_cli;
    let json = |at: &str| -> serde_json::Value {
        serde_json::from_str(&kd(&[
            "offsets",
            "list",
            "-b",
            &kafka.bootstrap,
            "-t",
            &t,
            "--at",
            at,
            "--json",
        ]))
        .unwrap()
    };
    let offsets = |v: &serde_json::Value| -> Vec<i64> {
        let mut rows: Vec<(i64, i64)> = v
            .as_array()
            .or_else(|| v["partitions"].as_array())
            .unwrap_or_else(|| panic!("unexpected JSON {v}"))
            .iter()
            .map(|p| {
                (
                    p["partition"].as_i64().unwrap(),
                    p["offset"].as_i64().unwrap(),
                )
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|r| r.1).collect()
    };
    let java_ends = kafka.end_offsets(&t);
    assert_eq!(offsets(&json("latest")), java_ends);
    assert_eq!(offsets(&json("latest")), vec![100, 100]);
    assert_eq!(offsets(&json("earliest")), vec![0, 0]);
    // The first record at or after +42.5 s is offset 43.
    assert_eq!(offsets(&json("1700000042500")), vec![43, 43]);
    // max-timestamp: the offset of the record with the largest timestamp (the last here).
    assert_eq!(offsets(&json("max-timestamp")), vec![99, 99]);

    // `--starting none` with nothing stored names the partitions instead of guessing.
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &kafka.bootstrap,
            "-t",
            &t,
            "--starting",
            "none",
            "--until-latest",
            "--output",
            "null",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "--starting none with no position fails"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&t), "the error names the topic: {err}");

    // Starting from a timestamp reads from offset 43 of each partition.
    let lines = kd(&[
        "consume",
        "-b",
        &kafka.bootstrap,
        "-t",
        &t,
        "--starting",
        "1700000042500",
        "--until-latest",
    ]);
    assert_eq!(lines.lines().count(), 2 * 57);

    // endingTimestamp against Kafka's ListOffsets by time: from +10 s up to (not including)
    // the first record at or after +42.5 s, offsets [10, 43) of each partition; and Spark's
    // offsets JSON for both ends.
    let lines = kd(&[
        "consume",
        "-b",
        &kafka.bootstrap,
        "-t",
        &t,
        "--starting",
        "1700000010000",
        "--ending-timestamp",
        "1700000042500",
    ]);
    assert_eq!(lines.lines().count(), 2 * 33, "{lines}");
    let lines = kd(&[
        "consume",
        "-b",
        &kafka.bootstrap,
        "-t",
        &t,
        "--starting",
        &format!(r#"{{"{t}":{{"0":-2,"1":90}}}}"#),
        "--ending-offsets",
        &format!(r#"{{"{t}":{{"0":5,"1":-1}}}}"#),
    ]);
    assert_eq!(lines.lines().count(), 5 + 10, "{lines}");
}

#[test]
fn kafka_group_offsets_show_in_and_follow_the_java_group_tool() {
    if let Some(kafka) = Kafka::single("kafka_group_offsets_show_in_and_follow_the_java_group_tool")
    {
        group_offsets_follow_the_java_group_tool(&kafka);
    }
}

#[test]
fn kafka_group_offsets_and_transactions_on_kafka_3_9() {
    if let Some(kafka) = Kafka::old("kafka_group_offsets_and_transactions_on_kafka_3_9") {
        group_offsets_follow_the_java_group_tool(&kafka);
        committed_and_aborted_transactions_equal_the_java_consumer(&kafka);
    }
}

fn group_offsets_follow_the_java_group_tool(kafka: &Kafka) {
    let t = topic("group");
    let group = format!("{t}-g");
    kafka.create(&t, 2, &[]);
    kafka.produce(&t, 2, 400, &[]);
    let consume = || -> usize {
        kdirect_cli(&[
            "consume",
            "-b",
            &kafka.bootstrap,
            "-t",
            &t,
            "--store",
            "kafka",
            "-g",
            &group,
            "--until-latest",
            "--max-offsets-per-batch",
            "150",
        ])
        .lines()
        .count()
    };
    assert_eq!(consume(), 400);
    let group_tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    let describe = kafka.java(
        group_tool,
        &[
            "--bootstrap-server",
            &kafka.bootstrap,
            "--describe",
            "--group",
            &group,
        ],
    );
    // Columns: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    let committed: BTreeMap<i32, (i64, i64)> = describe
        .lines()
        .filter(|l| l.contains(&t))
        .map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (
                c[2].parse().unwrap(),
                (c[3].parse().unwrap(), c[4].parse().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        committed,
        BTreeMap::from([(0, (200, 200)), (1, (200, 200))]),
        "what kdirect committed shows in kafka-consumer-groups --describe:\n{describe}"
    );

    // Reset with the Java tool; kdirect resumes there.
    kafka.java(
        group_tool,
        &[
            "--bootstrap-server",
            &kafka.bootstrap,
            "--reset-offsets",
            "--group",
            &group,
            "--topic",
            &t,
            "--to-offset",
            "150",
            "--execute",
        ],
    );
    assert_eq!(
        consume(),
        100,
        "resumes from the reset offsets (150 of 200, twice)"
    );
}

#[test]
fn partitions_added_while_consuming_are_read_from_their_start() {
    let Some(kafka) = Kafka::single("partitions_added_while_consuming_are_read_from_their_start")
    else {
        return;
    };
    let t = topic("grow");
    kafka.create(&t, 1, &[]);
    kafka.produce(&t, 1, 100, &[]);
    let seen = rt().block_on(async {
        let mut stream = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .topics(&[&t])
            .start(StartPolicy::Latest)
            .build()
            .await
            .unwrap();
        // Started at latest: the first snapshot (taken by the first next_batch, as the Java
        // consumer resolves positions at its first poll) finds nothing to read yet. One poll
        // starts it (next_batch is cancel-safe: the batch it waits for is kept); it resolves
        // partition 0 to its end, 100, and waits there (what it reads later starts at 100).
        let _ = tokio::time::timeout(Duration::ZERO, stream.next_batch()).await;
        let tp0 = kdirect::engine::plan::TopicPartition::new(t.clone(), 0);
        wait_until_async(
            Duration::from_secs(60),
            "the first snapshot resolved partition 0 to its end",
            || stream.positions().contains_key(&tp0),
        )
        .await;
        assert_eq!(stream.positions().get(&tp0), Some(&100));
        // Then the topic grows to 3 partitions, and records land in every partition.
        kafka.tool("add-partitions", &["--topic", &t, "--total", "3"]);
        kafka.produce(&t, 3, 30, &["--from", "300"]);
        let mut seen: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while seen.values().map(Vec::len).sum::<usize>() < 30 {
            assert!(std::time::Instant::now() < deadline, "saw only {seen:?}");
            let batch = stream.next_batch().await.unwrap().unwrap();
            batch
                .for_each_record(|range, r| {
                    seen.entry(range.partition).or_default().push(r.offset())
                })
                .unwrap();
            stream.done(batch);
        }
        seen
    });
    assert_eq!(seen[&0], (100..110).collect::<Vec<_>>());
    assert_eq!(
        seen[&1],
        (0..10).collect::<Vec<_>>(),
        "new partition 1 from offset 0"
    );
    assert_eq!(
        seen[&2],
        (0..10).collect::<Vec<_>>(),
        "new partition 2 from offset 0"
    );
}

/// The failover tests stop and start the trio's nodes: one at a time.
pub static TRIO: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn brokers_stopped_killed_and_restarted_mid_consume_lose_and_duplicate_nothing() {
    let test = "brokers_stopped_killed_and_restarted_mid_consume_lose_and_duplicate_nothing";
    let Some(kafka) = Kafka::trio(test) else {
        return;
    };
    let _one_at_a_time = TRIO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let t = topic("failover");
    // Replication factor 3, one partition led by each node (the controller spreads leaders).
    kafka.create(&t, 3, &[]);
    kafka.produce(&t, 3, 30_000, &["--value-size", "100", "--codec", "lz4"]);
    let mut seen: BTreeMap<(i32, i64), u32> = BTreeMap::new();
    rt().block_on(async {
        let mut stream = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .topics(&[&t])
            .start(StartPolicy::Earliest)
            .set("maxOffsetsPerTrigger", "1500")
            .unwrap()
            .set("request.timeout.ms", "10000")
            .unwrap()
            .build()
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        let mut batches = 0;
        // The faults, each after some batches: a controlled stop (leadership moves), more
        // records written while that node is down, its restart, then a SIGKILL of another
        // node (leadership moves only after the session times out) and its restart.
        while seen.len() < 33_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "read only {} of 33000 records",
                seen.len()
            );
            let batch = stream
                .next_batch()
                .await
                .expect("the stream carries on")
                .unwrap();
            batch
                .for_each_record(|range, r| {
                    *seen.entry((range.partition, r.offset())).or_insert(0) += 1;
                })
                .unwrap();
            stream.done(batch);
            batches += 1;
            match batches {
                3 => kafka.node("stop", 2),
                5 => kafka.produce(&t, 3, 3_000, &["--from", "90000", "--value-size", "100"]),
                8 => kafka.node("start", 2),
                12 => kafka.node("kill", 3),
                16 => kafka.node("start", 3),
                _ => {}
            }
        }
        if batches < 16 {
            kafka.node("start", 2);
            kafka.node("start", 3);
        }
    });
    // Back to full strength before the next test.
    kafka.tool("wait-isr", &["--topic", &t, "--replicas", "3"]);
    for p in 0..3 {
        for o in 0..11_000 {
            match seen.get(&(p, o)) {
                Some(1) => {}
                None => panic!("{t}-{p} offset {o} lost"),
                Some(n) => panic!("{t}-{p} offset {o} read {n} times"),
            }
        }
    }
    assert_eq!(seen.len(), 33_000, "records outside the topic");
}

/// Reconnect like a long-running consumer: every node of the 3-node cluster stopped for
/// several seconds in the middle of a consume (no broker answers at all), then started again:
/// the stream waits with backoff and carries on, every record once.
#[test]
fn the_whole_cluster_stopped_and_restarted_mid_consume_loses_and_duplicates_nothing() {
    let test = "the_whole_cluster_stopped_and_restarted_mid_consume_loses_and_duplicates_nothing";
    let Some(kafka) = Kafka::trio(test) else {
        return;
    };
    let _one_at_a_time = TRIO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let t = topic("outage");
    kafka.create(&t, 3, &[]);
    kafka.produce(&t, 3, 12_000, &["--value-size", "100"]);
    let mut seen: BTreeMap<(i32, i64), u32> = BTreeMap::new();
    rt().block_on(async {
        let mut stream = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .topics(&[&t])
            .start(StartPolicy::Earliest)
            .set("maxOffsetsPerTrigger", "1500")
            .unwrap()
            .build()
            .await
            .unwrap();
        let mut batches = 0;
        while seen.len() < 12_000 {
            let batch = stream
                .next_batch()
                .await
                .expect("the stream waits the outage out")
                .unwrap();
            batch
                .for_each_record(|range, r| {
                    *seen.entry((range.partition, r.offset())).or_insert(0) += 1;
                })
                .unwrap();
            stream.done(batch);
            batches += 1;
            if batches == 2 {
                // The whole cluster down (killed: an outage, not a controlled shutdown)
                // before the next batch is asked for, and started again 4 s later, the
                // nodes together (a KRaft node alone has no quorum to finish starting with).
                for n in [1, 2, 3] {
                    kafka.node("kill", n);
                }
                let start = kafka.node_fn("start");
                tokio::task::spawn_blocking(move || {
                    std::thread::sleep(Duration::from_secs(4));
                    std::thread::scope(|s| {
                        for n in [1, 2, 3] {
                            let start = &start;
                            s.spawn(move || start(n));
                        }
                    });
                });
            }
        }
    });
    kafka.tool("wait-isr", &["--topic", &t, "--replicas", "3"]);
    for p in 0..3 {
        for o in 0..4_000 {
            match seen.get(&(p, o)) {
                Some(1) => {}
                None => panic!("{t}-{p} offset {o} lost"),
                Some(n) => panic!("{t}-{p} offset {o} read {n} times"),
            }
        }
    }
    assert_eq!(seen.len(), 12_000, "records outside the topic");
}

#[test]
fn a_topic_deleted_and_recreated_is_reported_never_mixed() {
    let test = "a_topic_deleted_and_recreated_is_reported_never_mixed";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    for fail in [true, false] {
        let t = topic("recreate");
        kafka.create(&t, 1, &[]);
        kafka.produce(&t, 1, 100, &[]);
        let result = rt().block_on(async {
            let mut stream = DirectStream::builder()
                .bootstrap(&kafka.bootstrap)
                .topics(&[&t])
                .start(StartPolicy::Earliest)
                .data_loss(if fail {
                    DataLossPolicy::Fail
                } else {
                    DataLossPolicy::Earliest
                })
                .build()
                .await
                .unwrap();
            let first = stream.next_batch().await.unwrap().unwrap();
            assert_eq!(first.ranges()[0].until, 100);
            stream.done(first);
            // The same name, a new topic: 150 records, so offsets 100.. exist in it too and
            // reading on at the old position would silently mix the two.
            kafka.recreate(&t, 150);
            read_records(&mut stream, 150, false).await
        });
        if fail {
            let err = result.expect_err("failOnDataLoss=true fails on a re-created topic");
            assert!(
                matches!(err.engine_kind(), Some(kdirect::engine::ErrorKind::TopicRecreated { topic, .. }) if *topic == t),
                "{err}"
            );
        } else {
            let (records, lost) = result.expect("failOnDataLoss=false carries on");
            assert_eq!(lost.len(), 1, "{lost:?}");
            assert_eq!(
                lost[0].reason,
                kdirect::engine::plan::DataLossReason::TopicRecreated
            );
            assert_eq!((lost[0].from, lost[0].until), (100, 100));
            // The new topic, whole, from its start: values 1000.. of the Java producer.
            let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
            assert_eq!(offsets, (0..150).collect::<Vec<_>>());
            assert_eq!(records[0].1, "value 0-1000");
        }
    }
}

/// A topic deleted and re-created while the stream was down, resumed from a checkpoint or a
/// SQLite table (both keep leader epochs and topic ids). failOnDataLoss=true: the restart fails naming the re-created topic.
/// false: the new topic is read whole, from its start (offset 0, the Java producer's values
/// 1000..), the loss is reported, and the batch commits (its range starts below the stored
/// position: the move back). With the Kafka group store, Kafka itself removed the deleted
/// topic's offsets from the group: the restart starts by its start policy, in both modes.
/// Was: the checkpoint kept no topic ids, so the stored epoch made the restart ask the new
/// topic's leader where epoch 0 ends, and the new topic was taken for the old log truncated at
/// 40: `true` reported [40, 100) lost to a truncation, `false` went on at 40, skipping the new
/// topic's 40 records (and waited for more); the SQL table kept neither, so the restart saw its
/// position 100 past the new log's end and `true` reported [40, 100) lost ("position is past
/// the end offset") instead of naming the re-created topic.
#[test]
fn a_topic_re_created_while_the_stream_was_down_is_read_from_its_start() {
    let test = "a_topic_re_created_while_the_stream_was_down_is_read_from_its_start";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    for (kept, fail) in [
        ("group", true),
        ("group", false),
        ("checkpoint", true),
        ("checkpoint", false),
        ("sqlite", true),
        ("sqlite", false),
    ] {
        let group = kept == "group";
        let t = topic("recreate-down");
        let dir = crate::support::tempdir(&format!("recreate-down-{kept}-{fail}"));
        let sqlite = format!("sqlite:{}", dir.join("offsets.db").display());
        let g = format!("{t}-group");
        let open = |fail: bool| {
            let b = DirectStream::builder()
                .bootstrap(&kafka.bootstrap)
                .topics(&[&t])
                .start(StartPolicy::Earliest)
                .fail_on_data_loss(fail);
            let b = match kept {
                "group" => b.group(&g).store_spec("kafka"),
                "sqlite" => b.store_spec(&sqlite),
                _ => b.store(kdirect::commit::checkpoint::CheckpointStore::open(&dir, 10).unwrap()),
            };
            b.build()
        };
        kafka.create(&t, 1, &[]);
        kafka.produce(&t, 1, 100, &[]);
        rt().block_on(async {
            let mut s = open(true).await.unwrap();
            read_and_commit_to(&mut s, 100).await.unwrap();
        });
        kafka.recreate(&t, 40);
        let result = rt().block_on(async {
            let mut s = open(fail).await?;
            if group {
                // Kafka removed the deleted topic's offsets from the group.
                assert!(
                    s.stored_positions().is_empty(),
                    "{:?}",
                    s.stored_positions()
                );
            }
            read_records(&mut s, 40, true).await
        });
        if fail && !group {
            let err = result.expect_err("failOnDataLoss=true fails on a re-created topic");
            let text = err.to_string();
            assert!(
                text.contains(&t) && text.contains("re-created"),
                "{kept}: {err}"
            );
            continue;
        }
        let (records, lost) = result.unwrap_or_else(|e| panic!("{kept}: {e}"));
        assert_eq!(lost.len(), usize::from(!group), "{kept}: {lost:?}");
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        assert_eq!(offsets, (0..40).collect::<Vec<_>>(), "{lost:?}");
        assert_eq!(records[0].1, "value 0-1000");
        // Restarted: at 40, where the commit left it.
        let stored = rt().block_on(async { open(false).await.unwrap().stored_positions().clone() });
        assert_eq!(stored.values().copied().collect::<Vec<_>>(), vec![40]);
    }
}

/// A batch logged in the checkpoint and never committed (a crash between the plan and the
/// commit), its topic deleted and re-created while the stream was down. The re-run cannot
/// read the logged ranges (their records went with the old topic). failOnDataLoss=true: the
/// restart fails naming the re-created topic. false: the re-run commits what it can, the loss
/// is reported, and the new topic is then read whole from offset 0, once. Was: the re-run
/// fetched the old ranges from the new topic before any id check, so `true` reported a
/// truncation instead of the re-created topic.
#[test]
fn a_logged_batch_over_a_topic_re_created_while_down_follows_the_data_loss_policy() {
    let test = "a_logged_batch_over_a_topic_re_created_while_down_follows_the_data_loss_policy";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    for fail in [true, false] {
        let t = topic("recreate-replay");
        let dir = crate::support::tempdir(&format!("recreate-replay-{fail}"));
        let open = |fail: bool| {
            DirectStream::builder()
                .bootstrap(&kafka.bootstrap)
                .topics(&[&t])
                .start(StartPolicy::Earliest)
                .fail_on_data_loss(fail)
                .store(kdirect::commit::checkpoint::CheckpointStore::open(&dir, 10).unwrap())
                .build()
        };
        kafka.create(&t, 1, &[]);
        kafka.produce(&t, 1, 100, &[]);
        rt().block_on(async {
            let mut s = open(true).await.unwrap();
            read_and_commit_to(&mut s, 100).await.unwrap();
        });
        kafka.produce(&t, 1, 20, &["--from", "100"]);
        rt().block_on(async {
            let mut s = open(true).await.unwrap();
            let b = s.next_batch().await.unwrap().unwrap();
            assert!(b.ranges()[0].from == 100 && b.ranges()[0].until > 100);
            // Crashed before the commit: the plan stays logged.
        });
        kafka.recreate(&t, 40);
        let result = rt().block_on(async {
            let mut s = open(fail).await?;
            read_records(&mut s, 40, true).await
        });
        if fail {
            let err = result.expect_err("failOnDataLoss=true fails on a re-created topic");
            let text = err.to_string();
            assert!(text.contains(&t) && text.contains("re-created"), "{err}");
            continue;
        }
        let (records, lost) = result.expect("failOnDataLoss=false carries on");
        assert!(
            lost.iter()
                .any(|l| l.reason == kdirect::engine::plan::DataLossReason::TopicRecreated),
            "{lost:?}"
        );
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        assert_eq!(offsets, (0..40).collect::<Vec<_>>(), "{lost:?}");
        assert_eq!(records[0].1, "value 0-1000");
        let stored = rt().block_on(async { open(false).await.unwrap().stored_positions().clone() });
        assert_eq!(stored.values().copied().collect::<Vec<_>>(), vec![40]);
    }
}

#[test]
fn read_committed_stops_at_the_last_stable_offset_of_an_open_transaction() {
    let test = "read_committed_stops_at_the_last_stable_offset_of_an_open_transaction";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("lso");
    kafka.create(&t, 2, &[]);
    kafka.produce(&t, 2, 40, &[]);
    // Two committed transactions of 20, then one left open (a record per partition).
    let mut open = kafka.spawn_tool(
        "produce",
        &[
            "--topic",
            &t,
            "--partitions",
            "2",
            "--count",
            "40",
            "--from",
            "40",
            "--transactional-id",
            &format!("{t}-tx"),
            "--hold-open",
        ],
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(open.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "OPEN");
    let committed = kdirect_lines(&kafka.bootstrap, &t, IsolationLevel::ReadCommitted);
    let java_committed = kafka.java_lines(&t, "read_committed");
    let uncommitted = kdirect_lines(&kafka.bootstrap, &t, IsolationLevel::ReadUncommitted);
    open.kill().unwrap();
    open.wait().unwrap();
    assert_same(
        &committed,
        &java_committed,
        "read_committed under an open transaction",
    );
    // 40 plain + 40 committed; the open transaction's records are above the LSO.
    assert_eq!(committed.len(), 80);
    assert!(committed.iter().all(|l| !l.contains(&hex(Some(b"open")))));
    // read_uncommitted reads up to the high watermark: the open records too (the two commit
    // markers take offsets but are not records).
    assert_eq!(uncommitted.len(), 82);
}

/// A compacted topic (issue 32): keys rewritten many times, tombstones, the log cleaner run,
/// so the log starts at 0 but its first stored batches hold offsets far above it. Read in
/// batches of 997 offsets (most of them inside the gaps) and with the default settings, kdirect
/// reads exactly the (partition, offset, key, value) records Kafka's Java consumer reads. Was:
/// no records, then "no progress fetching ... no whole record batch" after a minute: a range
/// whose offsets were all compacted away was taken for a broker that sends nothing.
#[test]
fn a_compacted_topic_is_read_as_the_java_consumer_reads_it() {
    let Some(kafka) = Kafka::single("a_compacted_topic_is_read_as_the_java_consumer_reads_it")
    else {
        return;
    };
    let t = topic("compacted");
    kafka.create(
        &t,
        2,
        &[
            "--config",
            "cleanup.policy=compact,segment.bytes=1048576,min.cleanable.dirty.ratio=0.01,\
             delete.retention.ms=0,min.compaction.lag.ms=0",
        ],
    );
    // About 3.5 MB a partition, so three segments roll and are cleaned (the active one never
    // is); 100 keys a partition, every 7th record a tombstone.
    let count = 30_000u64;
    kafka.produce(
        &t,
        2,
        count,
        &[
            "--value-size",
            "200",
            "--key-space",
            "100",
            "--tombstone-every",
            "7",
        ],
    );
    // The cleaner runs every 500 ms on the test brokers (log.cleaner.backoff.ms): wait until
    // the Java consumer reads far fewer records than the log's offsets, and the first stored
    // batch of each partition starts well past offset 0 (each look takes a JVM: a few s).
    let mut java = Vec::new();
    for _ in 0..30 {
        java = kafka.java_lines(&t, "read_uncommitted");
        let firsts: Vec<i64> = (0..2)
            .filter_map(|p| {
                let prefix = format!("{p} ");
                java.iter()
                    .find(|l| l.starts_with(&prefix))
                    .and_then(|l| l.split(' ').nth(1)?.parse().ok())
            })
            .collect();
        if java.len() < count as usize / 2 && firsts.len() == 2 && firsts.iter().all(|&f| f > 2_000)
        {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let firsts = java.first().cloned().unwrap_or_default();
    assert!(
        java.len() < count as usize / 2,
        "the log cleaner did not compact {t} in 30 looks ({} records left, first {firsts})",
        java.len()
    );
    assert_eq!(kafka.end_offsets(&t).iter().sum::<i64>(), count as i64);
    // Chunked too: a batch over the whole log, read in chunks through the gaps.
    for (max, chunked) in [(Some(997), false), (None, false), (Some(10_000_000), true)] {
        let iso = IsolationLevel::ReadUncommitted;
        let ours = kdirect_lines_with(&kafka.bootstrap, &t, iso, max, chunked);
        assert_same(
            &ours,
            &java,
            &format!("compacted topic, maxOffsetsPerTrigger {max:?}, chunked {chunked}"),
        );
    }
}

/// Records of several MB (issue 32): 40 records of 3 MB over 2 partitions (120 MB, almost
/// twice the default 64 MiB memory budget), written by Kafka's Java producer, read with the
/// default settings: every record once, in order, its bytes as the producer wrote them
/// (value byte j of the n-th record of a partition is 'a' + (n + j) mod 26). Was:
/// "needs more than the memory budget (… > 67108864 bytes): lower maxOffsetsPerTrigger" at
/// the first batch.
#[test]
fn records_of_several_mb_are_read_with_the_default_budget() {
    let Some(kafka) = Kafka::single("records_of_several_mb_are_read_with_the_default_budget")
    else {
        return;
    };
    let t = topic("big-records");
    kafka.create(&t, 2, &["--config", "max.message.bytes=10485760"]);
    let size = 3_000_000usize;
    kafka.produce(
        &t,
        2,
        40,
        &[
            "--value-size",
            &size.to_string(),
            "--max-request-size",
            "10485760",
        ],
    );
    // Default, then chunked: the topic (120 MB) as one batch, its records in chunks.
    for chunked in [false, true] {
        let read = rt().block_on(async {
            let mut builder = DirectStream::builder()
                .bootstrap(&kafka.bootstrap)
                .topics(&[t.as_str()])
                .start(StartPolicy::Earliest)
                .until_latest(true);
            if chunked {
                // A plan over every offset (the default: the adaptive size, ended where
                // memory ends).
                builder = builder.chunked(true).max_offsets_per_trigger(1000);
            }
            let mut stream = builder.build().await.expect("build stream");
            let mut read: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
            let (mut batches, mut chunks) = (0, 0);
            while let Some(mut batch) = stream.next_batch().await.expect("next batch") {
                batches += 1;
                loop {
                    chunks += 1;
                    assert!(
                        batch.byte_count() <= 64 << 20,
                        "batch {} holds {} bytes",
                        batch.id(),
                        batch.byte_count()
                    );
                    batch
                        .for_each_record(|range, r| {
                            let n = i64::try_from(read.get(&range.partition).map_or(0, Vec::len))
                                .unwrap();
                            let v = r.value().expect("a value");
                            assert_eq!(
                                v.len(),
                                size,
                                "{}-{} at {}",
                                range.topic,
                                range.partition,
                                r.offset()
                            );
                            let right = v
                                .iter()
                                .enumerate()
                                .all(|(j, &b)| b == b'a' + ((n + j as i64) % 26) as u8);
                            assert!(
                                right,
                                "{}-{} at {}: not the producer's bytes",
                                range.topic,
                                range.partition,
                                r.offset()
                            );
                            read.entry(range.partition).or_default().push(r.offset());
                        })
                        .expect("decode");
                    if !stream.next_chunk(&mut batch).await.expect("next chunk") {
                        break;
                    }
                }
                stream.done(batch);
            }
            if chunked {
                assert_eq!(
                    (batches, chunks > 1),
                    (1, true),
                    "{batches} batches, {chunks} chunks"
                );
            } else {
                assert!(batches > 1, "{batches} batches");
            }
            read
        });
        for p in 0..2 {
            assert_eq!(
                read.get(&p).cloned().unwrap_or_default(),
                (0..20).collect::<Vec<_>>(),
                "partition {p}, chunked {chunked}"
            );
        }
    }
}

/// `maxOffsetsPerTrigger` far above what memory holds, on a wide topic of large producer
/// batches (issue 32): 64 partitions written with `batch.size` 256 KB, ~100 MB, read by
/// `kdirect consume --max-offsets-per-batch 10000000` with the default 64 MiB budget: one
/// batch, read in chunks, every record (the same count and checksum as the batches that end
/// where memory does, `-X batch.chunked=false`).
#[test]
fn max_offsets_per_trigger_far_above_memory_on_a_wide_topic_of_large_batches_is_one_batch() {
    let Some(kafka) = Kafka::single(
        "max_offsets_per_trigger_far_above_memory_on_a_wide_topic_of_large_batches_is_one_batch",
    ) else {
        return;
    };
    let t = topic("wide-256k");
    kafka.create(&t, 64, &[]);
    let count = 800_000u64;
    kafka.produce(
        &t,
        64,
        count,
        &[
            "--value-size",
            "100",
            "--batch-size",
            "262144",
            "--linger-ms",
            "50",
        ],
    );
    let stats = |chunked: &str| -> (String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &kafka.bootstrap, "-t", &t])
            .args([
                "--starting",
                "earliest",
                "--until-latest",
                "--output",
                "null",
            ])
            .args(["--max-offsets-per-batch", "10000000", "--stats"])
            .args(["-X", &format!("batch.chunked={chunked}")])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let line = stderr.lines().last().unwrap_or_default().to_owned();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_default()
                .to_owned()
        };
        (
            format!("{} {}", field("records="), field("checksum=")),
            field("batches="),
        )
    };
    let (chunked, batches) = stats("true");
    assert_eq!(batches, "1", "one batch: {chunked}");
    assert!(chunked.starts_with(&format!("{count} ")), "{chunked}");
    let (ended, batches) = stats("false");
    assert_eq!(chunked, ended, "the same records either way");
    assert!(
        batches.parse::<u32>().unwrap() > 1,
        "{batches} batches without chunks"
    );
}

/// The version kdirect negotiates for each API with the broker at `bootstrap`.
fn negotiated(bootstrap: &str) -> BTreeMap<&'static str, i16> {
    use kdirect::proto::api::{
        api_versions::ApiVersions, fetch::Fetch, find_coordinator::FindCoordinator,
        list_offsets::ListOffsets, metadata::Metadata, offset_commit::OffsetCommit,
        offset_fetch::OffsetFetch,
    };
    let addr = bootstrap.split(',').next().unwrap().to_owned();
    rt().block_on(async move {
        let conn = kdirect::engine::conn::BrokerConnection::connect(
            &addr,
            None,
            &kdirect::engine::conn::ConnConfig::default(),
        )
        .await
        .unwrap();
        BTreeMap::from([
            ("ApiVersions", conn.version::<ApiVersions>().unwrap()),
            ("Metadata", conn.version::<Metadata>().unwrap()),
            ("ListOffsets", conn.version::<ListOffsets>().unwrap()),
            ("Fetch", conn.version::<Fetch>().unwrap()),
            (
                "FindCoordinator",
                conn.version::<FindCoordinator>().unwrap(),
            ),
            ("OffsetCommit", conn.version::<OffsetCommit>().unwrap()),
            ("OffsetFetch", conn.version::<OffsetFetch>().unwrap()),
        ])
    })
}

#[test]
fn negotiates_its_newest_versions_with_kafka_4_1_and_older_ones_with_3_9() {
    let test = "negotiates_its_newest_versions_with_kafka_4_1_and_older_ones_with_3_9";
    let (Some(new), Some(old)) = (Kafka::single(test), Kafka::old(test)) else {
        return;
    };
    // Kafka 4.1 speaks every version kdirect does: kdirect uses its newest of each.
    assert_eq!(
        negotiated(&new.bootstrap),
        BTreeMap::from([
            ("ApiVersions", 4),
            ("Metadata", 12),
            ("ListOffsets", 10),
            ("Fetch", 17),
            ("FindCoordinator", 6),
            ("OffsetCommit", 9),
            ("OffsetFetch", 9),
        ])
    );
    // Kafka 3.9 stops at ListOffsets v9 (v10 came with 4.0); the rest as 4.1.
    let mut want = negotiated(&new.bootstrap);
    want.insert("ListOffsets", 9);
    assert_eq!(negotiated(&old.bootstrap), want);
}

/// subscribePattern against Kafka: `-t '^prefix.*'` reads every matching topic (Metadata for
/// all topics, internal ones such as `__consumer_offsets` excluded) and no other.
#[test]
fn pattern_subscription_reads_matching_topics_only() {
    let Some(kafka) = Kafka::single("pattern_subscription_reads_matching_topics_only") else {
        return;
    };
    let prefix = topic("pat");
    let (a, b) = (format!("{prefix}.a"), format!("{prefix}.b"));
    let other = format!("{prefix}x");
    kafka.create(&a, 2, &[]);
    kafka.create(&b, 1, &[]);
    kafka.create(&other, 1, &[]);
    kafka.produce(&a, 2, 120, &[]);
    kafka.produce(&b, 1, 30, &[]);
    kafka.produce(&other, 1, 10, &[]);
    let pattern = format!("^{}\\..*", regex_escape(&prefix));
    let lines = kdirect_cli(&[
        "consume",
        "-b",
        &kafka.bootstrap,
        "-t",
        &pattern,
        "--starting",
        "earliest",
        "--until-latest",
    ]);
    let mut per_topic: BTreeMap<String, usize> = BTreeMap::new();
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        *per_topic
            .entry(v["topic"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_topic, BTreeMap::from([(a, 120), (b, 30)]));
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

/// Fetch from the closest replica (KIP-392) on the 3-node cluster (node N in rack rack-N, the
/// rack-aware replica selector): with client.rack=rack-2 every partition is read from node 2,
/// leader or not, and the records are the topic's, each once; without a rack, partitions whose
/// leader is another node are never read from node 2.
#[test]
fn client_rack_reads_from_the_replica_in_its_rack() {
    let test = "client_rack_reads_from_the_replica_in_its_rack";
    let Some(kafka) = Kafka::trio(test) else {
        return;
    };
    let t = topic("rack");
    kafka.create(&t, 3, &[]);
    kafka.tool("wait-isr", &["--topic", &t, "--replicas", "3"]);
    kafka.produce(&t, 3, 3000, &[]);
    let read = |rack: Option<&str>| {
        rt().block_on(async {
            let mut b = DirectStream::builder()
                .bootstrap(&kafka.bootstrap)
                .topics(&[&t])
                .start(StartPolicy::Earliest)
                .until_latest(true);
            if let Some(r) = rack {
                b = b.client_rack(r);
            }
            let mut s = b.build().await.unwrap();
            let leaders: BTreeMap<i32, i32> = s
                .cluster()
                .view()
                .topic(&t)
                .unwrap()
                .partitions
                .iter()
                .map(|p| (p.partition, p.leader))
                .collect();
            // partition -> (node that served it -> records), and every offset read
            let mut served: BTreeMap<i32, BTreeMap<i32, u64>> = BTreeMap::new();
            let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
            while let Some(batch) = s.next_batch().await.unwrap() {
                for d in batch.range_data() {
                    for c in &d.chunks {
                        let node = c.broker().node_id.unwrap_or(-1);
                        let n = c.batches().len() as u64;
                        *served
                            .entry(d.range.partition)
                            .or_default()
                            .entry(node)
                            .or_default() += n;
                    }
                }
                batch
                    .for_each_record(|r, rec| {
                        offsets.entry(r.partition).or_default().push(rec.offset())
                    })
                    .unwrap();
                s.done(batch);
            }
            (leaders, served, offsets)
        })
    };
    let (leaders, served, offsets) = read(Some("rack-2"));
    for p in 0..3 {
        let o = &offsets[&p];
        assert_eq!(o.len(), 1000, "partition {p}");
        assert!(
            o.windows(2).all(|w| w[1] == w[0] + 1),
            "partition {p} in order, once"
        );
        assert!(
            served[&p].contains_key(&2),
            "partition {p} (leader {}) was not read from rack-2's node: {served:?}",
            leaders[&p]
        );
    }
    assert!(
        leaders.values().any(|l| *l != 2),
        "every leader is node 2: the test shows nothing"
    );
    let (leaders, served, _) = read(None);
    for (p, l) in &leaders {
        if *l != 2 {
            assert!(
                !served[p].contains_key(&2),
                "partition {p} read from node 2: {served:?}"
            );
        }
    }
}

/// KIP-227 against Apache Kafka: the stream's Fetch requests go in incremental fetch
/// sessions the broker opens; every record is read exactly once, and the caught-up stream's
/// long-polls list almost no partition and Kafka's answers to them leave out the partitions
/// with nothing new.
#[test]
fn fetch_sessions_on_kafka_read_every_record_once_and_idle_polls_list_nothing() {
    let Some(kafka) =
        Kafka::single("fetch_sessions_on_kafka_read_every_record_once_and_idle_polls_list_nothing")
    else {
        return;
    };
    const PARTITIONS: i32 = 24;
    let t = topic("sessions");
    kafka.create(&t, PARTITIONS, &[]);
    kafka.produce(&t, PARTITIONS, 24 * 300, &["--batch-size", "2048"]);
    let ends = kafka.end_offsets(&t);
    assert_eq!(ends.iter().sum::<i64>(), 24 * 300);
    rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .topics(&[&t])
            .start(StartPolicy::Earliest)
            .max_partition_fetch_bytes(4096)
            .fetch_max_wait(Duration::from_millis(100))
            .build()
            .await
            .unwrap();
        let mut seen: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        let total = |seen: &BTreeMap<i32, Vec<i64>>| seen.values().map(Vec::len).sum::<usize>();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while total(&seen) < 24 * 300 {
            assert!(
                std::time::Instant::now() < deadline,
                "read only {}",
                total(&seen)
            );
            let b = s.next_batch().await.unwrap().unwrap();
            b.for_each_record(|r, rec| seen.entry(r.partition).or_default().push(rec.offset()))
                .unwrap();
            s.done(b);
        }
        for (p, end) in ends.iter().enumerate() {
            assert_eq!(
                seen.get(&(p as i32)).cloned().unwrap_or_default(),
                (0..*end).collect::<Vec<_>>(),
                "partition {p}: every offset once, in order"
            );
        }
        let read = s.cluster().fetch_session_stats();
        assert!(read.opened >= 1, "Kafka opened a session: {read:?}");
        assert!(read.incremental_requests > 0, "{read:?}");
        // Idle: the next batch long-polls until something arrives.
        let next = tokio::spawn(async move {
            let b = s.next_batch().await.unwrap().unwrap();
            let mut got = Vec::new();
            b.for_each_record(|r, rec| got.push((r.partition, rec.offset())))
                .unwrap();
            s.done(b);
            (got, s)
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        kafka.produce(&t, PARTITIONS, 24, &["--from", "300"]);
        let (mut got, s) = tokio::time::timeout(Duration::from_secs(60), next)
            .await
            .unwrap()
            .unwrap();
        let mut s = s;
        while got.len() < 24 {
            let b = tokio::time::timeout(Duration::from_secs(60), s.next_batch())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            b.for_each_record(|r, rec| got.push((r.partition, rec.offset())))
                .unwrap();
            s.done(b);
        }
        got.sort_unstable();
        let want: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, ends[p as usize])).collect();
        assert_eq!(got, want, "the records written while idle, each once");
        let idle = s.cluster().fetch_session_stats();
        let polls = idle.incremental_requests - read.incremental_requests;
        let listed = idle.partitions_listed - read.partitions_listed;
        let wanted = idle.partitions_wanted - read.partitions_wanted;
        assert!(
            polls >= 5,
            "the idle stream long-polled in its session: {idle:?}"
        );
        assert!(
            idle.partitions_left_out - read.partitions_left_out >= 4 * PARTITIONS as u64,
            "Kafka's answers to the idle polls left out the partitions with nothing new: {idle:?}"
        );
        assert!(
            listed * 4 < wanted,
            "idle polls listed {listed} of the {wanted} partitions they wanted: {idle:?}"
        );
    });
}
