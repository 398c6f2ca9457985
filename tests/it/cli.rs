//! The `kdirect` binary as a person runs it, against librdkafka's mock cluster.

use std::process::{Command, Output};

use crate::support::{dead_addr, Mock};

fn kdirect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(args)
        .env_remove("KDIRECT_BOOTSTRAP")
        .output()
        .expect("run kdirect")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn offsets_list_json_earliest_and_latest() {
    let mock = Mock::new(2);
    mock.create_topic("cli", 3);
    mock.produce("cli", 3, 7, 1_700_000_000_000);
    let boot = mock.bootstrap();
    let o = kdirect(&[
        "offsets",
        "list",
        "--bootstrap",
        &boot,
        "--topic",
        "cli",
        "--at",
        "latest",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["topic"], "cli");
    let parts = v["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(p["partition"], i as i64);
        assert_eq!(p["offset"], 7);
        assert!(p["timestamp"].is_i64());
    }
    let o = kdirect(&[
        "offsets", "list", "-b", &boot, "-t", "cli", "--at", "earliest", "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["offset"] == 0));
    // By timestamp: the mock answers -1 to every lookup (it does not implement them), and
    // the CLI prints the broker's answer as it is.
    let o = kdirect(&[
        "offsets",
        "list",
        "-b",
        &boot,
        "-t",
        "cli",
        "--at",
        "1700000003000",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["partitions"].as_array().unwrap().len(), 3);
    // Text output: one tab-separated line per partition.
    let o = kdirect(&[
        "offsets", "list", "-b", &boot, "-t", "cli", "--at", "latest",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[2].starts_with("cli\t2\t7\t"), "{lines:?}");
}

#[test]
fn metadata_text_and_json() {
    let mock = Mock::new(3);
    mock.create_topic("m", 4);
    let boot = mock.bootstrap();
    let o = kdirect(&["metadata", "--bootstrap", &boot, "--topic", "m", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["brokers"].as_array().unwrap().len(), 3);
    assert_eq!(v["topics"][0]["topic"], "m");
    assert_eq!(v["topics"][0]["partitions"].as_array().unwrap().len(), 4);
    let o = kdirect(&["metadata", "-b", &boot]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("3 brokers") && text.contains("topic \"m\" with 4 partitions"),
        "{text}"
    );
}

#[test]
fn errors_are_one_actionable_line() {
    // Connection refused names the broker.
    let dead = dead_addr();
    let o = kdirect(&["offsets", "list", "--bootstrap", &dead, "--topic", "x"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&dead) && err.to_lowercase().contains("refused"),
        "{err}"
    );

    // Unknown topic.
    let mock = Mock::new(1);
    let boot = mock.bootstrap();
    let o = kdirect(&["offsets", "list", "--bootstrap", &boot, "--topic", "nope"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown topic 'nope'"), "{err}");

    // A bad --at value is refused by the argument parser, non-zero.
    let o = kdirect(&[
        "offsets",
        "list",
        "--bootstrap",
        &boot,
        "--topic",
        "t",
        "--at",
        "yesterday",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("yesterday"));
}

#[test]
fn timeout_is_one_line() {
    // A listener that accepts but never answers: the handshake times out.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let o = kdirect(&[
        "metadata",
        "--bootstrap",
        &addr,
        "--request-timeout-ms",
        "300",
    ]);
    drop(l);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("timed out") && err.contains(&addr), "{err}");
}

/// Read-only commands never create a store: `offsets show` and `lag` on a mistyped checkpoint
/// directory or SQLite path fail and leave nothing behind (they used to create both).
#[test]
fn read_only_commands_on_a_mistyped_store_create_nothing() {
    let mock = Mock::new(1);
    mock.create_topic("ro", 2);
    let boot = mock.bootstrap();
    let dir = crate::support::tempdir("ro");
    let typo = dir.join("chekpoint");
    let db = dir.join("offsets.dbb");
    for store in [
        format!("checkpoint:{}", typo.display()),
        format!("sqlite:{}", db.display()),
    ] {
        let o = kdirect(&["offsets", "show", "--store", &store, "-g", "g"]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("no store at"), "{}", stderr(&o));
        let o = kdirect(&["lag", "-b", &boot, "--store", &store, "-g", "g", "-t", "ro"]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("nothing was created"), "{}", stderr(&o));
    }
    assert!(!typo.exists(), "a checkpoint directory was created");
    assert!(!db.exists(), "an SQLite file was created");
}

/// `offsets set` refuses a partition the topic does not have (it used to write it), and `lag`
/// does not call an unknown lag 0.
#[test]
fn offsets_set_refuses_missing_partitions_and_lag_says_what_is_unknown() {
    let mock = Mock::new(1);
    mock.create_topic("ps", 2);
    mock.produce("ps", 2, 10, 1_700_000_000_000);
    let boot = mock.bootstrap();
    let dir = crate::support::tempdir("ps");
    let store = format!("checkpoint:{}", dir.join("ck").display());
    let o = kdirect(&[
        "offsets", "set", "-b", &boot, "--store", &store, "-g", "g", "-t", "ps", "5=3",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no partition 5"), "{}", stderr(&o));
    let o = kdirect(&["offsets", "show", "--store", &store, "-g", "g"]);
    assert!(!stdout(&o).contains("ps\t5"), "{}", stdout(&o));
    // One partition known, one not: the total says so.
    let o = kdirect(&[
        "offsets", "set", "-b", &boot, "--store", &store, "-g", "g", "-t", "ps", "0=2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = kdirect(&["lag", "-b", &boot, "--store", &store, "-g", "g", "-t", "ps"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("total lag\t8 (plus 1 partitions without a committed position)"),
        "{}",
        stdout(&o)
    );
    // Nothing known at all: not "0".
    let empty = format!("checkpoint:{}", dir.join("empty").display());
    let o = kdirect(&[
        "offsets", "set", "--store", &empty, "-g", "g", "-t", "other", "0=1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = kdirect(&["lag", "-b", &boot, "--store", &empty, "-g", "g", "-t", "ps"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("total lag\t- (no committed position"),
        "{}",
        stdout(&o)
    );
}

/// kcat's `-o` start forms, `-e` and `-c` (issue 16): `-o beginning` used to write a 6 MB file
/// named `beginning` (it was `--output`); output moved to the long flag.
#[test]
fn kcat_start_forms_exit_at_end_and_count() {
    // kdirect's fake broker: librdkafka's mock does not answer ListOffsets by time.
    let rt = crate::support::rt();
    let fake = rt.block_on(async {
        kdirect_fake_broker::FakeCluster::builder()
            .topic("kc", 2)
            .build()
            .await
            .unwrap()
    });
    for p in 0..2 {
        let recs: Vec<kdirect_fake_broker::FakeRecord> = (0..10)
            .map(|i| {
                kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from(format!("v{p}-{i}")))
                    .with_timestamp(1_700_000_000_000 + i * 1000)
            })
            .collect();
        fake.append_records("kc", p, &recs, kdirect_fake_broker::Codec::None)
            .unwrap();
    }
    let boot = fake.bootstrap();
    let dir = crate::support::tempdir("kcat");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &boot, "-t", "kc", "--bytes", "utf8"])
            .args(args)
            .current_dir(&dir)
            .env_remove("KDIRECT_BOOTSTRAP")
            .output()
            .unwrap();
        let offsets: Vec<(i64, i64)> = stdout(&o)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["partition"].as_i64().unwrap(),
                    v["offset"].as_i64().unwrap(),
                )
            })
            .collect();
        (o, offsets)
    };
    let (o, all) = run(&["-o", "beginning", "-e"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(all.len(), 20);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "-o wrote a file in the working directory"
    );
    let (_, none) = run(&["-o", "end", "-e"]);
    assert!(none.is_empty(), "{none:?}");
    let (_, last) = run(&["-o", "-3", "-e"]);
    let mut want: Vec<(i64, i64)> = (0..2).flat_map(|p| (7..10).map(move |o| (p, o))).collect();
    let mut got = last.clone();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    let (_, from5) = run(&["-o", "5", "-e"]);
    assert_eq!(from5.len(), 10);
    assert!(from5.iter().all(|&(_, o)| o >= 5));
    // s@: the first record at or after 1_700_000_004_000 is offset 4 of each partition.
    let (_, since) = run(&["-o", "s@1700000004000", "-e"]);
    assert_eq!(since.len(), 12);
    // e@: up to (not including) the record at 1_700_000_002_000: offsets 0 and 1.
    let (_, until) = run(&["-o", "e@1700000002000"]);
    assert_eq!(until.len(), 4, "{until:?}");
    // -c: exactly that many records, then exit 0 (no -e needed).
    let (o, counted) = run(&["-o", "beginning", "-c", "7"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(counted.len(), 7);
    // Mistakes are named.
    let (o, _) = run(&["-o", "stored", "-e"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--store"), "{}", stderr(&o));
    let (o, _) = run(&["-o", "begining"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("beginning, end, stored"),
        "{}",
        stderr(&o)
    );
}

/// `-F file.properties` passes settings like -X (-X wins), and a mistyped key names the one it
/// meant, from either.
#[test]
fn properties_files_and_mistyped_keys() {
    let rt = crate::support::rt();
    let fake = rt.block_on(async {
        kdirect_fake_broker::FakeCluster::builder()
            .topic("pf", 1)
            .build()
            .await
            .unwrap()
    });
    let recs: Vec<kdirect_fake_broker::FakeRecord> = (0..20)
        .map(|i| kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from(format!("v{i}"))))
        .collect();
    fake.append_records("pf", 0, &recs, kdirect_fake_broker::Codec::None)
        .unwrap();
    let boot = fake.bootstrap();
    let dir = crate::support::tempdir("props");
    let props = dir.join("kdirect.properties");
    std::fs::write(
        &props,
        "# a comment\n\n! another\nmaxOffsetsPerTrigger = 5\nclient.id: from-file\n",
    )
    .unwrap();
    let p = props.to_str().unwrap();
    let consume = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args([
                "consume",
                "-b",
                &boot,
                "-t",
                "pf",
                "-e",
                "--progress-interval",
                "0",
                "--output",
                "null",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let batches = |o: &Output| {
        stderr(o)
            .lines()
            .filter(|l| l.contains("kdirect: batch"))
            .count()
    };
    let o = consume(&["-F", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(batches(&o), 4, "{}", stderr(&o));
    // -X wins over the file.
    let o = consume(&["-F", p, "-X", "maxOffsetsPerTrigger=10"]);
    assert_eq!(batches(&o), 2, "{}", stderr(&o));
    // A typo, from -X or from the file, names the key meant.
    let o = consume(&["-X", "maxOfsetsPerTrigger=10"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("did you mean 'maxOffsetsPerTrigger'"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&props, "fetch.max.wait=100\n").unwrap();
    let o = consume(&["-F", p]);
    assert!(
        stderr(&o).contains("did you mean 'fetch.max.wait.ms'"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&props, "sasl.password hunter2\n").unwrap();
    let o = consume(&["-F", p]);
    assert!(
        stderr(&o).contains(":1: expected key=value"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
}

/// kcat's output shapes: -f format strings, -J with kcat's field names, -K key delimiter, -u.
#[test]
fn kcat_output_formats() {
    let rt = crate::support::rt();
    let fake = rt.block_on(async {
        kdirect_fake_broker::FakeCluster::builder()
            .topic("of", 1)
            .build()
            .await
            .unwrap()
    });
    let recs = vec![
        kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from("v0"))
            .with_key(bytes::Bytes::from("k0"))
            .with_header("h", Some(bytes::Bytes::from("x")))
            .with_timestamp(1_700_000_000_000),
        kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from("v1"))
            .with_timestamp(1_700_000_001_000),
    ];
    fake.append_records("of", 0, &recs, kdirect_fake_broker::Codec::None)
        .unwrap();
    let boot = fake.bootstrap();
    let consume = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &boot, "-t", "of", "-e"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(
        consume(&["-f", "%t/%p/%o %k=%s (%K,%S) %T [%h] 100%%\\n"]),
        "of/0/0 k0=v0 (2,2) 1700000000000 [h=x] 100%\nof/0/1 =v1 (-1,2) 1700000001000 [] 100%\n"
    );
    let json: Vec<serde_json::Value> = consume(&["-J"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        json[0],
        serde_json::json!({"topic": "of", "partition": 0, "offset": 0, "tstype": "create",
            "ts": 1_700_000_000_000i64, "headers": ["h", "x"], "key": "k0", "payload": "v0"})
    );
    assert_eq!(json[1]["key"], serde_json::Value::Null);
    assert_eq!(consume(&["-K", ":", "-u"]), "k0:v0\n:v1\n");
}

/// `lag` shows each partition's log start and the margin retention has before it eats unread
/// data (negative: it already did, said in words), in text and JSON; `--watch` repeats.
#[test]
fn lag_shows_the_retention_margin_and_watches() {
    let rt = crate::support::rt();
    let fake = rt.block_on(async {
        kdirect_fake_broker::FakeCluster::builder()
            .topic("lm", 2)
            .build()
            .await
            .unwrap()
    });
    for p in 0..2 {
        let recs: Vec<kdirect_fake_broker::FakeRecord> = (0..100)
            .map(|i| kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from(format!("v{i}"))))
            .collect();
        fake.append_records("lm", p, &recs, kdirect_fake_broker::Codec::None)
            .unwrap();
    }
    let boot = fake.bootstrap();
    let dir = crate::support::tempdir("lagm");
    let store = format!("checkpoint:{}", dir.join("ck").display());
    let o = kdirect(&[
        "offsets", "set", "-b", &boot, "--store", &store, "-g", "g", "-t", "lm", "0=60", "1=20",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    fake.set_log_start("lm", 0, 50).unwrap();
    fake.set_log_start("lm", 1, 30).unwrap();
    let o = kdirect(&[
        "lag", "-b", &boot, "--store", &store, "-g", "g", "-t", "lm", "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let parts = v["partitions"].as_array().unwrap();
    assert_eq!(parts[0]["log_start"], 50);
    assert_eq!(parts[0]["retention_margin"], 10);
    assert_eq!(parts[0]["lag"], 40);
    assert_eq!(parts[1]["retention_margin"], -10);
    assert_eq!(v["min_retention_margin"], -10);
    let o = kdirect(&["lag", "-b", &boot, "--store", &store, "-g", "g", "-t", "lm"]);
    let text = stdout(&o);
    assert!(text.contains("lm\t0\t60\t50\t100\t40\t10"), "{text}");
    assert!(text.contains("data lost\t10 offsets"), "{text}");
    // --watch prints again until stopped.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "lag", "-b", &boot, "--store", &store, "-g", "g", "-t", "lm", "--watch", "0.2",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut headers = 0;
    while headers < 2 {
        if lines.next().unwrap().unwrap().starts_with("topic\t") {
            headers += 1;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `offsets reset` speaks kafka-consumer-groups: a dry run unless --execute, --to-earliest,
/// --to-latest, --to-offset and --shift-by kept within the log, --to-datetime, --by-duration,
/// --export / --from-file round trip, --all-topics.
#[test]
fn offsets_reset_with_kafka_vocabulary_and_a_dry_run_by_default() {
    let rt = crate::support::rt();
    let fake = rt.block_on(async {
        kdirect_fake_broker::FakeCluster::builder()
            .topic("rz", 2)
            .build()
            .await
            .unwrap()
    });
    for p in 0..2 {
        let recs: Vec<kdirect_fake_broker::FakeRecord> = (0..100)
            .map(|i| {
                kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from(format!("v{i}")))
                    .with_timestamp(1_700_000_000_000 + i * 1000)
            })
            .collect();
        fake.append_records("rz", p, &recs, kdirect_fake_broker::Codec::None)
            .unwrap();
    }
    fake.set_log_start("rz", 1, 10).unwrap();
    let boot = fake.bootstrap();
    let dir = crate::support::tempdir("reset");
    let store = format!("checkpoint:{}", dir.join("ck").display());
    let base = ["-b", boot.as_str(), "--store", store.as_str(), "-g", "g"];
    let reset = |extra: &[&str]| {
        let mut args = vec!["offsets", "reset"];
        args.extend_from_slice(&base);
        args.extend_from_slice(extra);
        let o = kdirect(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        stdout(&o)
    };
    let show = || {
        let o = kdirect(&["offsets", "show", "--store", &store, "-g", "g"]);
        stdout(&o)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let set = kdirect(&[
        "offsets", "set", "-b", &boot, "--store", &store, "-g", "g", "-t", "rz", "0=50", "1=50",
    ]);
    assert!(set.status.success(), "{}", stderr(&set));
    // A dry run prints and writes nothing.
    let dry = reset(&["-t", "rz", "--to-earliest"]);
    assert!(dry.contains("g\trz\t1\t50\t10"), "{dry}");
    assert!(dry.contains("dry run"), "{dry}");
    assert_eq!(show(), ["rz\t0\t50", "rz\t1\t50"]);
    // Kept within the log.
    let out = reset(&["-t", "rz", "--shift-by", "-45"]);
    assert!(
        out.contains("rz\t0\t50\t5") && out.contains("rz\t1\t50\t10"),
        "{out}"
    );
    let out = reset(&["-t", "rz", "--to-offset", "1000"]);
    assert!(out.contains("rz\t0\t50\t100"), "{out}");
    // 22:13:30 UTC is 10 s after the first record: offset 10.
    let out = reset(&["-t", "rz", "--to-datetime", "2023-11-14T22:13:30Z"]);
    assert!(out.contains("rz\t0\t50\t10"), "{out}");
    // A day ago is after every record: the end.
    let out = reset(&["--all-topics", "--by-duration", "P1D"]);
    assert!(out.contains("rz\t0\t50\t100"), "{out}");
    // --export, then --from-file --execute writes exactly that.
    let csv = reset(&["-t", "rz", "--to-latest", "--export"]);
    assert_eq!(csv, "rz,0,100\nrz,1,100\n");
    let file = dir.join("plan.csv");
    std::fs::write(&file, "rz,0,7\nrz,1,12\n").unwrap();
    reset(&["--from-file", file.to_str().unwrap(), "--execute"]);
    assert_eq!(show(), ["rz\t0\t7", "rz\t1\t12"]);
    reset(&["-t", "rz", "--to-latest", "--execute"]);
    assert_eq!(show(), ["rz\t0\t100", "rz\t1\t100"]);
}

/// `kdirect check` catches a wrong port, a wrong topic, a position lost to retention and an
/// unreachable store, each with a fix; all ✓ exits 0, any ✗ exits 1; --json says the same.
#[test]
fn check_catches_the_usual_mistakes_each_with_a_fix() {
    let rt = crate::support::rt();
    let fake = rt.block_on(async {
        kdirect_fake_broker::FakeCluster::builder()
            .topic("orders", 2)
            .build()
            .await
            .unwrap()
    });
    for p in 0..2 {
        let recs: Vec<kdirect_fake_broker::FakeRecord> = (0..100)
            .map(|i| kdirect_fake_broker::FakeRecord::value(bytes::Bytes::from(format!("v{i}"))))
            .collect();
        fake.append_records("orders", p, &recs, kdirect_fake_broker::Codec::Lz4)
            .unwrap();
    }
    let boot = fake.bootstrap();
    let dir = crate::support::tempdir("check");
    let store = format!("checkpoint:{}", dir.join("ck").display());
    let check = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .arg("check")
            .args(args)
            .env_remove("KDIRECT_STORE")
            .output()
            .unwrap();
        (o.status.code(), stdout(&o))
    };
    // All well (the store does not exist yet: the first run creates it).
    let (code, out) = check(&["-b", &boot, "-t", "orders", "--store", &store]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("✓ brokers") && out.contains("✓ records"),
        "{out}"
    );
    assert!(!out.contains('✗'), "{out}");
    // A wrong port.
    let (code, out) = check(&["-b", &crate::support::dead_addr(), "-t", "orders"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("✗ brokers") && out.contains("fix: check -b"),
        "{out}"
    );
    // A wrong topic, with the one meant.
    let (code, out) = check(&["-b", &boot, "-t", "order"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("✗ topic order") && out.contains("did you mean 'orders'"),
        "{out}"
    );
    // A position lost to retention: the exact range.
    let set = kdirect(&[
        "offsets", "set", "-b", &boot, "--store", &store, "-g", "g", "-t", "orders", "0=5", "1=60",
    ]);
    assert!(set.status.success(), "{}", stderr(&set));
    fake.set_log_start("orders", 0, 40).unwrap();
    let (code, out) = check(&["-b", &boot, "-t", "orders", "--store", &store, "-g", "g"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("orders-0: offsets [5, 40) were removed by retention"),
        "{out}"
    );
    assert!(out.contains("fix: accept the loss"), "{out}");
    // An unreachable store.
    let dead = format!("postgres://kd:pw@{}/db", crate::support::dead_addr());
    let (code, out) = check(&["-b", &boot, "-t", "orders", "--store", &dead, "--json"]);
    assert_eq!(code, Some(1), "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ok"], false);
    let store_check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "store")
        .unwrap();
    assert_eq!(store_check["ok"], false, "{store_check}");
    assert!(
        store_check["fix"].as_str().unwrap().contains("reachable"),
        "{store_check}"
    );
    assert!(!out.contains(":pw@"), "{out}");
}

/// `docs/cli.md` is the CLI reference, generated from the clap definitions (every command's
/// and subcommand's `--help`), so it cannot drift: this test regenerates it and fails when the
/// committed file differs. `KDIRECT_UPDATE_DOCS=1 cargo test --test it cli_reference` rewrites
/// it.
#[test]
fn the_cli_reference_is_generated_from_the_clap_definitions() {
    fn help(path: &[&str]) -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(path)
            .arg("--help")
            .env_clear()
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        assert!(out.status.success(), "kdirect {path:?} --help");
        String::from_utf8(out.stdout).unwrap()
    }
    fn commands(help: &str) -> Vec<String> {
        help.lines()
            .skip_while(|l| *l != "Commands:")
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_owned)
            .collect()
    }
    fn walk(path: &mut Vec<String>, out: &mut String) {
        let refs: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&refs);
        let depth = path.len().min(3);
        out.push_str(&format!(
            "{} `kdirect{}{}`\n\n```text\n{}```\n\n",
            "#".repeat(depth + 1),
            if path.is_empty() { "" } else { " " },
            path.join(" "),
            text
        ));
        for c in commands(&text) {
            path.push(c);
            walk(path, out);
            path.pop();
        }
    }
    let mut doc = String::from(
        "# kdirect command-line reference\n\n\
         Generated from the clap definitions by `tests/it/cli.rs` \
         (`the_cli_reference_is_generated_from_the_clap_definitions`); do not edit by hand: \
         `KDIRECT_UPDATE_DOCS=1 cargo test --test it cli_reference` rewrites it.\n\n",
    );
    walk(&mut Vec::new(), &mut doc);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
    if std::env::var_os("KDIRECT_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &doc).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == doc,
        "docs/cli.md is not what the clap definitions say: run \
         KDIRECT_UPDATE_DOCS=1 cargo test --test it cli_reference"
    );
}

/// `docs/config.md` is the table of every setting with its aliases and default, generated
/// from `kdirect::stream::SETTINGS`, the one table `set` reads; the engine's security keys
/// are all in it. `KDIRECT_UPDATE_DOCS=1 cargo test --test it config_reference` rewrites it.
#[test]
fn the_config_reference_lists_every_setting() {
    use kdirect::stream::SETTINGS;
    for key in kdirect::engine::security::KEYS {
        assert!(
            SETTINGS.iter().any(|s| s.key == *key),
            "the security setting {key} is not in SETTINGS"
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for name in SETTINGS.iter().flat_map(kdirect::stream::Setting::names) {
        assert!(names.insert(name), "{name} names two settings");
    }
    let mut doc = String::from(
        "# kdirect settings\n\n\
         Every key `DirectStreamBuilder::set`, `consume -X key=value`, `-F file.properties` and \
         the `KDIRECT_<KEY>` environment variables take, with its default. Generated from \
         `SETTINGS` (`crates/kdirect/src/stream/settings.rs`) by `tests/it/cli.rs`; \
         `KDIRECT_UPDATE_DOCS=1 cargo test --test it config_reference` rewrites it.\n\n\
         | key | default | meaning |\n| --- | --- | --- |\n",
    );
    for s in SETTINGS {
        let aliases: String = s.aliases.iter().map(|a| format!(" (or `{a}`)")).collect();
        doc.push_str(&format!(
            "| `{}`{aliases} | {} | {} |\n",
            s.key, s.default, s.doc
        ));
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/config.md");
    if std::env::var_os("KDIRECT_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &doc).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap_or_default() == doc,
        "docs/config.md drifted: run KDIRECT_UPDATE_DOCS=1 cargo test --test it config_reference"
    );
}

/// A password in an HBase or ZooKeeper store spec never reaches the terminal (issue 36): `lag`,
/// `check` and `offsets show` on an unreachable store used to print
/// `http://bob:S3CRETPW@127.0.0.1:1` and `zookeeper bob:S3CRETPW@127.0.0.1:1`.
#[test]
fn store_passwords_are_never_printed() {
    let mock = Mock::new(1);
    mock.create_topic("pw", 1);
    let boot = mock.bootstrap();
    for store in [
        "hbase://bob:S3CRETPW@127.0.0.1:1",
        "zk://bob:S3CRETPW@127.0.0.1:1",
    ] {
        for args in [
            vec!["offsets", "show", "--store", store, "-g", "g"],
            vec!["lag", "-b", &boot, "--store", store, "-g", "g", "-t", "pw"],
            vec![
                "check", "-b", &boot, "--store", store, "-g", "g", "-t", "pw",
            ],
        ] {
            let o = kdirect(&args);
            let all = format!("{}{}", stdout(&o), stderr(&o));
            assert!(!all.contains("S3CRETPW"), "{args:?}: {all}");
            assert!(
                all.contains("127.0.0.1:1"),
                "{args:?} names no server: {all}"
            );
        }
    }
}

/// This machine's address on its default route, when it has one that is not loopback (no
/// packet is sent: a UDP socket's connect only picks the route).
fn own_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.254:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A TCP forwarder listening on `ip` (port chosen by the system) to `target`: a service
/// bound to loopback, reached as if it ran on another host. Lives as long as the process.
fn forward(ip: std::net::IpAddr, target: String) -> u16 {
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(&target) else {
                continue;
            };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut c, mut s) = (client, server);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c, &mut s2);
                let _ = s2.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

/// Issue 36: PostgreSQL and MariaDB reached on a host that is not loopback (this machine's own
/// address, forwarded to the real servers) warn once when the connection is in clear text —
/// `sslmode=disable`, `ssl-mode=DISABLED` — and stay quiet when it is encrypted, including
/// the default `prefer`/`PREFERRED` that got TLS (the server is asked: pg_stat_ssl,
/// Ssl_cipher). The warning names the store without its password.
#[test]
fn a_sql_store_in_clear_text_on_another_host_warns_and_tls_does_not() {
    let (Some(pg), Some(my)) = (
        crate::support::service(
            "KDIRECT_TEST_POSTGRES",
            "a_sql_store_in_clear_text_on_another_host_warns_and_tls_does_not",
        ),
        crate::support::service(
            "KDIRECT_TEST_MYSQL",
            "a_sql_store_in_clear_text_on_another_host_warns_and_tls_does_not",
        ),
    ) else {
        return;
    };
    let Some(ip) = own_address() else {
        eprintln!("skipping a_sql_store_in_clear_text_on_another_host_warns_and_tls_does_not: this machine has no address but loopback");
        return;
    };
    for (url, clear, tls) in [
        (pg, "sslmode=disable", ["sslmode=prefer", "sslmode=require"]),
        (
            my,
            "ssl-mode=DISABLED",
            ["ssl-mode=PREFERRED", "ssl-mode=REQUIRED"],
        ),
    ] {
        // scheme://user:password@127.0.0.1:PORT/db
        let (head, rest) = url.split_once('@').unwrap();
        let (hostport, db) = rest.split_once('/').unwrap();
        let port = forward(ip, hostport.to_owned());
        let password = head.rsplit_once(':').unwrap().1;
        let at = |mode: &str| format!("{head}@{ip}:{port}/{db}?{mode}");
        let o = kdirect(&["offsets", "show", "--store", &at(clear), "-g", "g"]);
        let err = stderr(&o);
        assert!(o.status.success(), "{clear}: {err}");
        assert_eq!(err.matches("without TLS").count(), 1, "{clear}: {err}");
        assert!(err.contains(&format!("{ip}:{port}")), "{err}");
        assert!(!err.contains(&format!(":{password}@")), "{err}");
        for mode in tls {
            let o = kdirect(&["offsets", "show", "--store", &at(mode), "-g", "g"]);
            let err = stderr(&o);
            assert!(o.status.success(), "{mode}: {err}");
            assert!(!err.contains("without TLS"), "{mode}: {err}");
        }
    }
}

/// Issue 36: `-X sasl.password=…` on the command line warns once, naming the environment
/// variable to use and never the value; PLAIN over SASL_PLAINTEXT to a host that is not
/// loopback warns once that the password crosses in clear text (both were silent). The
/// password from the environment gives no command-line warning. (The broker's port is closed:
/// the warnings come before the connection fails.)
#[test]
fn secrets_on_the_command_line_and_clear_text_sasl_warn() {
    let Some(ip) = own_address() else {
        eprintln!("skipping secrets_on_the_command_line_and_clear_text_sasl_warn: this machine has no address but loopback");
        return;
    };
    let broker = format!("{ip}:1");
    let sasl = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanism=PLAIN",
        "-X",
        "sasl.username=u",
    ];
    let mut args = vec!["metadata", "-b", &broker];
    args.extend(sasl);
    args.extend(["-X", "sasl.password=S3CRETPW"]);
    let o = kdirect(&args);
    let err = stderr(&o);
    assert!(!err.contains("S3CRETPW"), "{err}");
    assert_eq!(err.matches("KDIRECT_SASL_PASSWORD").count(), 1, "{err}");
    assert_eq!(err.matches("sends the password").count(), 1, "{err}");

    let mut args = vec!["metadata", "-b", &broker];
    args.extend(sasl);
    let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(&args)
        .env_remove("KDIRECT_BOOTSTRAP")
        .env("KDIRECT_SASL_PASSWORD", "S3CRETPW")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(
        !err.contains("S3CRETPW") && !err.contains("visible to every user"),
        "{err}"
    );
    assert_eq!(err.matches("sends the password").count(), 1, "{err}");
}

/// Issue 36: a store reached in clear text on a host that is not loopback warns, once per
/// store, naming the store without its password and the scheme that turns TLS on; on
/// loopback it stays quiet. (The store's port is closed: the warning comes before the
/// connection fails.)
#[test]
fn a_store_in_clear_text_on_another_host_warns_once() {
    let Some(ip) = own_address() else {
        eprintln!("skipping a_store_in_clear_text_on_another_host_warns_once: this machine has no address but loopback");
        return;
    };
    for (store, fix) in [
        (format!("redis://:S3CRETPW@{ip}:1/"), "rediss://"),
        (format!("hbase://bob:S3CRETPW@{ip}:1"), "hbases://"),
    ] {
        let o = kdirect(&["offsets", "show", "--store", &store, "-g", "g"]);
        let err = stderr(&o);
        assert_eq!(err.matches("without TLS").count(), 1, "{store}: {err}");
        assert!(err.contains(fix), "{store}: {err}");
        assert!(err.contains(&format!("{ip}:1")), "{store}: {err}");
        assert!(!err.contains("S3CRETPW"), "{err}");
    }
    let o = kdirect(&[
        "offsets",
        "show",
        "--store",
        "redis://:S3CRETPW@127.0.0.1:1/",
        "-g",
        "g",
    ]);
    assert!(!stderr(&o).contains("without TLS"), "{}", stderr(&o));
}
