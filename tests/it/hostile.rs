//! Hostile brokers (issue 17): answers that never move a partition's position must end in a
//! clear error after `default.api.timeout.ms`, retried with backoff — never a tight loop of
//! Fetch requests, never a run that does not end.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_fake_broker::{encode_batch, BatchOptions, Codec, FakeCluster, FakeRecord, FetchFault};

use crate::support::rt;

/// `kdirect consume --until-latest` against a partition whose every Fetch answer has `fault`.
/// Returns the exit status, stderr and the broker's request count.
fn consume_under(fault: FetchFault) -> (std::process::ExitStatus, String, u64) {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("h", 1).build().await.unwrap() });
    for b in 0..4 {
        let recs: Vec<FakeRecord> = (0..500)
            .map(|i| FakeRecord::value(Bytes::from(format!("r{b}-{i}"))))
            .collect();
        fake.append_batch(
            "h",
            0,
            encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
        )
        .unwrap();
    }
    fake.set_fetch_fault("h", 0, Some(fault)).unwrap();
    let before = fake.stats(1).unwrap().requests;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "h",
            "--until-latest",
            "--output",
            "null",
            "-X",
            "default.api.timeout.ms=1500",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Before the fix this never ended (~4,500 Fetch requests a second): kill it and fail.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            let requests = fake.stats(1).unwrap().requests - before;
            panic!("{fault:?}: consume did not end in 60 s ({requests} requests): it spins");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let requests = fake.stats(1).unwrap().requests - before;
    (status, stderr, requests)
}

#[test]
fn answers_that_never_move_the_position_end_in_a_clear_error_not_a_spin() {
    for fault in [
        FetchFault::Omit,
        FetchFault::Empty,
        FetchFault::WrongPartition,
        FetchFault::StaleBatch,
        FetchFault::Overlong,
    ] {
        let (status, stderr, requests) = consume_under(fault);
        assert!(!status.success(), "{fault:?}: exit 0: {stderr}");
        assert!(
            stderr.contains("no progress fetching h-0"),
            "{fault:?}: the error names the partition: {stderr}"
        );
        assert!(
            stderr.contains("broker 1"),
            "{fault:?}: the error names the broker: {stderr}"
        );
        // The summary says how many attempts over how long.
        assert!(
            stderr.contains("gave up after") && stderr.contains("attempts over"),
            "{fault:?}: the retry summary: {stderr}"
        );
        // Backoff doubles from 100 ms: a handful of Fetch rounds (each with a metadata
        // refresh) in 1.5 s, not thousands.
        assert!(
            requests < 100,
            "{fault:?}: {requests} requests in one retry window"
        );
    }
}

/// Secrets never reach a message: store specs with a password in every shape (a mistyped
/// scheme, `@` inside the password, `?password=`, the user-info of a Redis URL that refuses),
/// from `--store` and from `KDIRECT_STORE`, through `offsets show`, `lag`, `consume` and
/// `--help`. The password is grepped for in everything printed.
#[test]
fn store_secrets_are_never_printed() {
    const PW: &str = "Pa55w0rdXyZ";
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("s", 1).build().await.unwrap() });
    let boot = fake.bootstrap();
    let specs = [
        format!("postgress://user:{PW}@127.0.0.1:1/db"),
        format!("postgres//user:{PW}@127.0.0.1:1/db"),
        format!("mysq://user:x@{PW}@127.0.0.1:1/db"),
        format!("postgre://127.0.0.1:1/db?user=u&password={PW}"),
        format!("redis://:{PW}@127.0.0.1:1/0"),
        format!("redis://user:{PW}@@127.0.0.1:1/0"),
        format!("hbase://user:{PW}@127.0.0.1:1"),
        format!("zk://user:{PW}@127.0.0.1:1"),
    ];
    let run = |args: &[&str], env: Option<&str>| -> String {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kdirect"));
        c.args(args);
        match env {
            Some(spec) => c.env("KDIRECT_STORE", spec),
            None => c.env_remove("KDIRECT_STORE"),
        };
        let o = c.output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    for spec in &specs {
        let outputs = [
            run(&["offsets", "show", "--store", spec, "-g", "g"], None),
            run(&["offsets", "show", "-g", "g"], Some(spec)),
            run(
                &["lag", "--store", spec, "-g", "g", "-b", &boot, "-t", "s"],
                None,
            ),
            run(
                &[
                    "consume",
                    "-b",
                    &boot,
                    "-t",
                    "s",
                    "--until-latest",
                    "--store",
                    spec,
                ],
                None,
            ),
            run(
                &["consume", "-b", &boot, "-t", "s", "--until-latest"],
                Some(spec),
            ),
            run(&["consume", "--help"], Some(spec)),
            run(&["offsets", "show", "--help"], Some(spec)),
        ];
        for out in outputs {
            assert!(
                !out.contains(PW),
                "{spec}: the password was printed:\n{out}"
            );
            assert!(
                !out.contains("XyZ"),
                "{spec}: a piece of the password was printed:\n{out}"
            );
        }
    }
}

/// `consume --store … --output FILE` run twice: the second run resumes where the first
/// committed and appends, so the file holds every record exactly once (it used to truncate the
/// file and lose the first run's records for good).
#[test]
fn a_resumed_consume_appends_to_its_output_file() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("ap", 1).build().await.unwrap() });
    let append = |from: u64| {
        let recs: Vec<FakeRecord> = (from..from + 100)
            .map(|i| FakeRecord::value(Bytes::from(format!("v{i}"))))
            .collect();
        fake.append_batch(
            "ap",
            0,
            encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
        )
        .unwrap();
    };
    let dir = crate::support::tempdir("append");
    let out = dir.join("out.jsonl");
    let store = format!("checkpoint:{}", dir.join("ckpt").display());
    let consume = || {
        let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args([
                "consume",
                "-b",
                &fake.bootstrap(),
                "-t",
                "ap",
                "--until-latest",
                "--store",
                &store,
                "--output",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    append(0);
    consume();
    append(100);
    consume();
    let offsets: Vec<i64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["offset"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(offsets, (0..200).collect::<Vec<_>>());
}

/// The output file's cover sidecar is written through a temp file nobody can guess, created
/// only if absent (issue 36): it was `<output>.kdirect-cover.tmp` opened with `File::create`,
/// so a symlink planted there had its target overwritten.
#[cfg(unix)]
#[test]
fn consume_follows_no_symlink_planted_at_a_temp_name() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("sy", 1).build().await.unwrap() });
    let recs: Vec<FakeRecord> = (0..10)
        .map(|i| FakeRecord::value(Bytes::from(format!("v{i}"))))
        .collect();
    fake.append_batch(
        "sy",
        0,
        encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
    )
    .unwrap();
    let dir = crate::support::tempdir("symlink");
    let out = dir.join("out.jsonl");
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("out.jsonl.kdirect-cover.tmp")).unwrap();
    let store = format!("checkpoint:{}", dir.join("ckpt").display());
    let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "sy",
            "--until-latest",
            "--store",
            &store,
            "--output",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 10);
    let temps: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(temps.is_empty(), "temp files left: {temps:?}");
}

/// Reconnect like a long-running consumer: the whole (one-broker) cluster stops for 3 s in the
/// middle of a rate-limited `consume --until-latest`; the run carries on when it is back and
/// delivers every record exactly once (it used to exit within milliseconds with "no bootstrap
/// broker reachable").
#[test]
fn a_cluster_restart_mid_run_is_waited_out_with_nothing_lost_or_doubled() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("rs", 1).build().await.unwrap() });
    for b in 0..30 {
        let recs: Vec<FakeRecord> = (0..1000)
            .map(|i| FakeRecord::value(Bytes::from(format!("r{}", b * 1000 + i))))
            .collect();
        fake.append_batch(
            "rs",
            0,
            encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
        )
        .unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "rs",
            "--until-latest",
            "--max-rate-per-partition",
            "5000",
            "--bytes",
            "utf8",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run's output, read as it comes.
    let stdout = child.stdout.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                lines.lock().unwrap().push(l.unwrap());
            }
        })
    };
    // Once the first batch (5,000 records, then a 1 s pause for the rate) is delivered, the
    // broker goes away for 3 s: the outage is the scenario, so that sleep is its subject.
    crate::support::wait_until(Duration::from_secs(60), "the first batch", || {
        lines.lock().unwrap().len() >= 5_000
    });
    fake.stop_broker(1).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    fake.restart_broker(1).unwrap();
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the run did not survive the restart: {stderr}"
    );
    // A log line per attempt while the broker was away.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("retrying")),
        "no reconnect log line: {stderr}"
    );
    let mut offsets: Vec<i64> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["offset"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let n = offsets.len();
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(offsets.len(), n, "records delivered twice");
    assert_eq!(offsets, (0..30_000).collect::<Vec<_>>());
}

/// Each topic-level Metadata error is reported as itself (it used to read "unknown topic"
/// whatever the broker said), at once when it cannot pass; LEADER_NOT_AVAILABLE (a topic
/// being created) is waited out and the stream then reads everything.
#[test]
fn topic_metadata_errors_are_reported_as_themselves_and_retriable_ones_waited_out() {
    use kdirect::engine::plan::StartPolicy;
    use kdirect::DirectStream;
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    const LEADER_NOT_AVAILABLE: i16 = 5;
    let rt = rt();
    rt.block_on(async {
        let fake = FakeCluster::builder().topic("m", 1).build().await.unwrap();
        let recs: Vec<FakeRecord> = (0..100)
            .map(|i| FakeRecord::value(Bytes::from(format!("r{i}"))))
            .collect();
        fake.append_batch(
            "m",
            0,
            encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
        )
        .unwrap();
        let build = || {
            DirectStream::builder()
                .bootstrap(&fake.bootstrap())
                .topics(&["m"])
                .start(StartPolicy::Earliest)
                .until_latest(true)
                .build()
        };
        fake.set_topic_error("m", Some(TOPIC_AUTHORIZATION_FAILED));
        let err = build().await.expect_err("an authorization failure fails");
        let msg = err.to_string();
        assert!(msg.contains("TOPIC_AUTHORIZATION_FAILED"), "{msg}");
        assert!(
            msg.contains("'m'") && !msg.contains("unknown topic"),
            "{msg}"
        );
        // Not retriable: reported at once, not after default.api.timeout.ms.
        match err.engine_kind() {
            Some(kdirect::ErrorKind::TopicError { code, .. }) => {
                assert!(!code.is_retriable(), "{msg}")
            }
            other => panic!("{other:?}"),
        }

        fake.set_topic_error("m", Some(LEADER_NOT_AVAILABLE));
        let cleared = async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            fake.set_topic_error("m", None);
        };
        let (stream, ()) = tokio::join!(build(), cleared);
        let mut stream = stream.expect("LEADER_NOT_AVAILABLE is waited out");
        let mut n = 0;
        while let Some(batch) = stream.next_batch().await.unwrap() {
            n += batch.records().count();
            stream.done(batch);
        }
        assert_eq!(n, 100);
    });
}

/// An unreachable PostgreSQL or MySQL store is reported at once with its cause ("connection
/// refused"), not as "pool timed out" after the pool's 30 s acquire timeout.
#[test]
fn an_unreachable_sql_store_is_reported_at_once_with_its_cause() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    rt().block_on(async {
        for url in [
            format!("postgres://kd:hunter2@127.0.0.1:{port}/db"),
            format!("mysql://kd:hunter2@127.0.0.1:{port}/db"),
        ] {
            let err = kdirect::SqlStore::connect(&url, "g").await.err().unwrap();
            let msg = err.to_string();
            assert!(msg.to_lowercase().contains("refused"), "{msg}");
            assert!(!msg.contains("timed out"), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    });
}

/// Broker offsets that make no sense end in an error naming the partition and the offsets,
/// never in an empty run that exits 0: a negative log start, an earliest past the latest, a
/// negative end.
#[test]
fn nonsense_broker_offsets_are_an_error_not_an_empty_run() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("n", 1).build().await.unwrap() });
    let recs: Vec<FakeRecord> = (0..10)
        .map(|i| FakeRecord::value(Bytes::from(format!("r{i}"))))
        .collect();
    fake.append_batch(
        "n",
        0,
        encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
    )
    .unwrap();
    for (earliest, latest) in [(-5, 10), (20, 10), (0, -7)] {
        fake.set_list_offsets("n", 0, Some((earliest, latest)))
            .unwrap();
        let boot = fake.bootstrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &boot, "-t", "n", "--until-latest"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "({earliest}, {latest}): exit 0: {stderr}"
        );
        assert!(
            stderr.contains("n-0") && stderr.contains(&earliest.to_string()),
            "({earliest}, {latest}): {stderr}"
        );
    }
}

/// A store whose positions leave out a partition of a topic it has others of: the partition
/// starts by the start policy, and a warning says so (it used to happen silently).
#[test]
fn a_partition_missing_from_the_store_is_said_aloud() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("mp", 2).build().await.unwrap() });
    for p in 0..2 {
        let recs: Vec<FakeRecord> = (0..10)
            .map(|i| FakeRecord::value(Bytes::from(format!("r{i}"))))
            .collect();
        fake.append_batch(
            "mp",
            p,
            encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
        )
        .unwrap();
    }
    let dir = crate::support::tempdir("mp");
    let store = format!("checkpoint:{}", dir.join("ck").display());
    let boot = fake.bootstrap();
    let kd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = kd(&[
        "offsets", "set", "-b", &boot, "--store", &store, "-g", "g", "-t", "mp", "0=4",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = kd(&[
        "consume",
        "-b",
        &boot,
        "-t",
        "mp",
        "--until-latest",
        "--store",
        &store,
        "--output",
        "null",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("mp-1 has no committed position in the store"),
        "{stderr}"
    );
    assert!(!stderr.contains("mp-0 has no"), "{stderr}");
}

/// A broker that accepts connections and never answers: a bounded run gives up after about
/// `default.api.timeout.ms` (plus at most one `request.timeout.ms` in flight), with an error
/// naming the broker and the timeout — it used to take 338 s with the defaults.
#[test]
fn a_silent_broker_ends_a_bounded_run_within_the_api_timeout() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("si", 1).build().await.unwrap() });
    let recs: Vec<FakeRecord> = (0..10)
        .map(|i| FakeRecord::value(Bytes::from(format!("r{i}"))))
        .collect();
    fake.append_batch(
        "si",
        0,
        encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
    )
    .unwrap();
    let boot = fake.bootstrap();
    // Silent from the first Fetch on: the run gets its metadata and offsets, then nothing.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &boot,
            "-t",
            "si",
            "--until-latest",
            "--output",
            "null",
            "-X",
            "default.api.timeout.ms=3000",
            "-X",
            "request.timeout.ms=1000",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fake.set_fetch_fault("si", 0, None).unwrap();
    fake.set_response_delay(1, Duration::from_secs(3600))
        .unwrap();
    // Bounded: it must end; 60 s is a guard far above the 3 s + 1 s the settings allow.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("a silent broker kept the bounded run going for 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("timed out"), "{stderr}");
    assert!(
        stderr.contains(&boot),
        "the error names the broker: {stderr}"
    );
    // Silent in the middle of a run (the stream built, its first batch planned): the same
    // bounded end, through the fetcher's retries and the stream's.
    fake.set_response_delay(1, Duration::ZERO).unwrap();
    rt.block_on(async {
        use kdirect::engine::plan::StartPolicy;
        let mut stream = kdirect::DirectStream::builder()
            .bootstrap(&boot)
            .topics(&["si"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .set("default.api.timeout.ms", "3000")
            .unwrap()
            .set("request.timeout.ms", "1000")
            .unwrap()
            .build()
            .await
            .unwrap();
        fake.set_response_delay(1, Duration::from_secs(3600))
            .unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(60), stream.next_batch()).await;
        let err = guard
            .expect("a silent broker kept next_batch waiting for 60 s")
            .expect_err("no batch from a silent broker");
        let msg = err.to_string();
        assert!(msg.contains("timed out") && msg.contains(&boot), "{msg}");
        assert!(msg.contains("gave up after"), "{msg}");
    });
}

/// `--log-format json` writes each log line as one JSON object (here the warnings while a
/// topic has no leader yet); `-v` and KDIRECT_LOG choose how much.
#[test]
fn log_lines_can_be_json() {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("lj", 1).build().await.unwrap() });
    fake.append_records("lj", 0, &[FakeRecord::value(Bytes::from("x"))], Codec::None)
        .unwrap();
    fake.set_topic_error("lj", Some(5)); // LEADER_NOT_AVAILABLE
    let child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "--log-format",
            "json",
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "lj",
            "-e",
        ])
        .env_remove("KDIRECT_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The topic gets its leader after a moment (the wait is the scenario).
    std::thread::sleep(Duration::from_millis(600));
    fake.set_topic_error("lj", None);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warns: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!warns.is_empty(), "no log line");
    assert_eq!(warns[0]["level"], "WARN", "{stderr}");
    assert!(
        warns[0]["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("LEADER_NOT_AVAILABLE"),
        "{stderr}"
    );
}

/// Issue 36: decompressed data is bounded by the memory budget, not by a fixed 128 MiB beside
/// it. A zstd batch of a few kB that inflates to 48 MB (a decompression bomb, or a very
/// compressible producer batch) is refused under a 64 MiB budget (half of it per batch),
/// naming the setting that helps, and read under a 128 MiB one.
#[test]
fn a_batch_that_inflates_past_half_the_budget_is_refused_naming_the_budget() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("bomb", 1)
            .build()
            .await
            .unwrap();
        let records: Vec<FakeRecord> = (0..6)
            .map(|_| FakeRecord::value(Bytes::from(vec![0u8; 8_000_000])))
            .collect();
        fake.append_records("bomb", 0, &records, Codec::Zstd)
            .unwrap();
        let read = |budget: usize| {
            let boot = fake.bootstrap();
            async move {
                let mut stream = kdirect::DirectStream::builder()
                    .bootstrap(&boot)
                    .topics(&["bomb"])
                    .start(kdirect::engine::plan::StartPolicy::Earliest)
                    .until_latest(true)
                    .memory_budget(budget)
                    .build()
                    .await
                    .unwrap();
                let mut n = 0u64;
                while let Some(b) = stream.next_batch().await? {
                    n +=
                        b.for_each_record(|_, r| assert_eq!(r.value().unwrap().len(), 8_000_000))?;
                    stream.done(b);
                }
                Ok::<u64, kdirect::Error>(n)
            }
        };
        let e = read(64 << 20).await.unwrap_err().to_string();
        assert!(
            e.contains("decompressed zstd records exceed the cap of 33554432 bytes")
                && e.contains("memory.budget.bytes")
                && e.contains("bomb-0"),
            "{e}"
        );
        assert_eq!(read(128 << 20).await.unwrap(), 6);
    });
}

/// Issue 36 (low): text from a broker, another client or an argument echoed back reaches the
/// terminal escaped. A topic name with an escape sequence (set the window title, clear the
/// screen) and a bidirectional override is shown by `kdirect metadata` as `\u001b…`, and a
/// final error line that names such a topic carries no raw control character. Before, both
/// were written as they came.
#[test]
fn text_from_outside_reaches_the_terminal_escaped() {
    let evil = "t\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}";
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic(evil, 1).build().await.unwrap() });
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["metadata", "-b", &fake.bootstrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(r"t\u001b]0;owned\u0007\u001b[2J\u202e"),
        "the name shown escaped: {stdout:?}"
    );
    assert!(
        !stdout.contains(['\u{1b}', '\u{7}', '\u{202e}']),
        "no raw control character: {stdout:?}"
    );
    // The JSON form escapes as JSON does, and stays parseable.
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["metadata", "-b", &fake.bootstrap(), "--json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["topics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["topic"] == evil));

    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "gone\u{1b}[2J",
            "--until-latest",
            "--output",
            "null",
            "-X",
            "default.api.timeout.ms=1000",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(r"gone\u001b[2J"), "{stderr:?}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// Issue 36 (low): SIGTERM (or SIGINT) while `kdirect consume` is still connecting or
/// joining its group is handled as in the middle of a run: what is in progress finishes, the
/// stream closes (a group member sends LeaveGroup) and the run exits 0. Before, the handler
/// was installed after the stream was built, so a signal then took the default action: the
/// process died at once, and a group member kept its partitions until the session timeout.
/// Here every broker answer takes 400 ms, so the signal lands while the stream is being built.
#[test]
fn a_signal_while_connecting_closes_the_stream_and_exits_0() {
    use std::os::unix::process::ExitStatusExt;
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("s", 1).build().await.unwrap() });
    fake.append_batch(
        "s",
        0,
        encode_batch(
            &[FakeRecord::value(Bytes::from_static(b"one"))],
            &BatchOptions::codec(Codec::None),
        )
        .unwrap(),
    )
    .unwrap();
    fake.set_response_delay(1, Duration::from_millis(400))
        .unwrap();
    let before = fake.stats(1).unwrap().requests;
    let child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "s",
            "--output",
            "null",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Signalled once its first request (ApiVersions) arrived: the stream is being built, and
    // Metadata and ListOffsets take 800 ms more at least.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.stats(1).unwrap().requests == before {
        assert!(Instant::now() < deadline, "no request from kdirect in 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        None,
        "killed by the signal's default action: {stderr}"
    );
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("SIGTERM: finishing what is in progress"),
        "{stderr}"
    );
}
