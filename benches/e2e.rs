//! End-to-end throughput: one fake broker in its own process on loopback, the same data read
//! whole by kdirect and by librdkafka (and rskafka), each client in its own process so that
//! its CPU seconds and peak RSS are its own. A whole-system run is its own binary (quinn's
//! `perf/`), not a criterion group.
//!
//! ```text
//! cargo bench --bench e2e -- [--records N] [--partitions P] [--value-size S] [--codec C]
//!     [--clients kdirect,kdirect-nocrc,floor,librdkafka,librdkafka-nocrc,rskafka]
//!     [--suite default|scaling|kafka|tls|latency|shapes|lakehouse] [--broker fake|kafka|secure] [--memory-mib M]
//!     [--batch-size B] [--shape-partitions 1,8,..] [--shape-batch-sizes 16384,..] [--shape-values 100,..]
//!     [--kdirect-set k=v,..] [--rdkafka-set k=v,..] [--rate R] [--seconds S]
//! ```
//!
//! Defaults: 10M records of 100 B over 8 partitions, codec none, 1000 records per stored batch.
//! `--suite default` runs that plus lz4, zstd and 1 KB values; `--suite scaling` runs 1, 8, 64
//! and 512 partitions at 100 B, 1 KB and 10 KB values (fewer records for bigger values: about
//! 1 GB of payload per run; 512 partitions get a 256 MiB budget). Stored batches hold 1000
//! records or ~1 MB, whichever is less. Every client touches every key and value byte and reports a
//! checksum (a wrapping sum of per-record CRC32C(key)+value, independent of order); the run
//! fails if the clients disagree or if any client reads fewer records than were served.
//! `floor` is the network floor (issue 35): the Fetch requests kdirect's defaults make, each
//! answer read and dropped after framing its record batches' headers (no CRC, no
//! record, no checksum; one request in flight per leader): kdirect's CPU above it is what
//! decoding and delivering cost. It runs by default on the fake broker and on Kafka.
//!
//! `--broker kafka` reads from Apache Kafka instead (the 1-node KRaft broker of
//! `tests/kafka/kafka.sh`, started if it is not up): the data is written once by Kafka's Java
//! producer into a topic named after the run (`bench-<records>-<size>-<partitions>-<codec>-b<batch size>`,
//! reused by later runs), and the clients are kdirect, librdkafka and Kafka's Java consumer
//! (`KTool perf`, `check.crcs` on). Each row also gives the broker's CPU seconds while that
//! client read. `--suite kafka` runs 10M × 100 B over 8 partitions and 1M × 1 KB.
//!
//! `--suite shapes` (issue 32) reads Apache Kafka topics of every shape producers make, each
//! written by Kafka's own `ProducerPerformance` with the `batch.size` named (see [`shapes`]),
//! with kdirect, librdkafka and Kafka's Java consumer at their default settings. `--batch-size
//! B` writes a single run's topic that way too.
//!
//! `--broker secure` reads from the `secure` cluster of `tests/kafka/kafka.sh` (its variables
//! from `kafka.sh env` in the environment, else the cluster is started): the topic is written
//! through its PLAINTEXT listener, and the clients are kdirect on that listener and kdirect,
//! librdkafka and Kafka's Java consumer on its SASL_SSL listener (SCRAM-SHA-512, user alice,
//! the cluster's CA), which serves the same log: what TLS and SASL cost each client.
//! `--suite tls` is `--broker secure` with those four clients.
//!
//! `--suite latency` measures produce-to-delivery time instead of throughput (issue 14): on the
//! 1-node Kafka (started if it is not up) a fresh topic `latency-<µs since the epoch>` of
//! `--partitions` (8) partitions with `message.timestamp.type=LogAppendTime`; kdirect (the
//! stream with its defaults: the as-fast-as-possible trigger, from the earliest offset) and
//! librdkafka (a consumer with its defaults in a group of its own, `auto.offset.reset=earliest`)
//! each in its own process, reading at the same time, both ready (the stream built, the group
//! assignment received) before a producer child (librdkafka, `linger.ms=0`) writes `--rate`
//! (1000) records a second for `--seconds` (30): record `i` at start + i / rate by the clock, to
//! partition `i % P`, its value the sequence number and the send time (µs since the epoch, read
//! just before the send), padded to `--value-size`. Each client takes, per record, its delivery
//! time (as `for_each_record` or `poll` hands it to user code) minus the send time, and minus
//! the broker's append time (ms), skips the first 2 s of records (warm-up) and prints p50,
//! p90, p99, p99.9 and max; the run fails unless each client received every record produced,
//! once. `--clients kdirect` (or `librdkafka`) runs one alone, to see what it costs the broker.
//!
//! `--suite lakehouse` (issue 34 item 6; build with `--features delta`) lands one Apache Kafka
//! topic of JSON values (`--records`, default 10M, × `--value-size` 100 B, `--partitions` 8) as
//! a Delta table twice: `kdirect consume --until-latest --sink delta:DIR` and Spark Structured
//! Streaming's Delta sink (Spark 3.5.4 + delta-spark, local[*], Trigger.AvailableNow; see
//! [`lakehouse_suite`]), each a process of its own under GNU time, and checks with Spark that
//! each table holds every offset once.
//!
//! The binary runs itself in hidden modes for the children: `--serve` (the fake broker),
//! `--produce` (the latency suite's producer) and `--client NAME --bootstrap B` (one consumer,
//! printing a `RESULT` line, or `LATENCY` for `latency-kdirect` and `latency-librdkafka`).
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use kdirect::engine::plan::StartPolicy;
use kdirect::stream::DirectStream;
use kdirect_fake_broker::{encode_batch, BatchOptions, Codec, FakeCluster, FakeRecord};

const TOPIC: &str = "bench";
const BATCH_RECORDS: u64 = 1000;

#[derive(Debug, Clone)]
struct Opts {
    records: u64,
    partitions: i32,
    value_size: usize,
    codec: String,
    clients: Vec<String>,
    suite: Option<String>,
    memory_mib: usize,
    /// `--batch-size`: the producer's `batch.size` on Apache Kafka (0: the run's default).
    batch_size: usize,
    /// Whether `--clients` was given.
    clients_set: bool,
    /// `--suite shapes`: which cells of the grid to run (empty: all).
    shape_partitions: Vec<i32>,
    shape_batch_sizes: Vec<usize>,
    shape_values: Vec<usize>,
    kdirect_set: Vec<(String, String)>,
    rdkafka_set: Vec<(String, String)>,
    kdirect_threads: usize,
    /// `fake` (kdirect's fake broker, one per run) or `kafka` (Apache Kafka on loopback).
    broker: String,
    topic: String,
    /// `--suite latency`: records per second the producer writes, for how many seconds, and
    /// how many seconds of them are warm-up (not measured).
    rate: u64,
    seconds: u64,
    warmup_secs: u64,
    // child modes
    serve: bool,
    produce: bool,
    client: Option<String>,
    bootstrap: String,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            records: 10_000_000,
            partitions: 8,
            value_size: 100,
            codec: "none".into(),
            clients: [
                "kdirect",
                "kdirect-nocrc",
                "floor",
                "librdkafka",
                "librdkafka-nocrc",
            ]
            .map(String::from)
            .to_vec(),
            suite: None,
            memory_mib: 64,
            batch_size: 0,
            clients_set: false,
            shape_partitions: Vec::new(),
            shape_batch_sizes: Vec::new(),
            shape_values: Vec::new(),
            kdirect_set: Vec::new(),
            rdkafka_set: Vec::new(),
            kdirect_threads: 1,
            broker: "fake".into(),
            topic: TOPIC.into(),
            rate: 1000,
            seconds: 30,
            warmup_secs: 2,
            serve: false,
            produce: false,
            client: None,
            bootstrap: String::new(),
        }
    }
}

fn kv_list(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn num_list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>, String>
where
    T::Err: std::fmt::Display,
{
    s.split(',')
        .map(|x| x.trim().parse().map_err(|e| format!("{what} {x}: {e}")))
        .collect()
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--records" => o.records = val()?.parse().map_err(|e| format!("--records: {e}"))?,
            "--partitions" => {
                o.partitions = val()?.parse().map_err(|e| format!("--partitions: {e}"))?
            }
            "--value-size" => {
                o.value_size = val()?.parse().map_err(|e| format!("--value-size: {e}"))?
            }
            "--codec" => o.codec = val()?,
            "--clients" => {
                o.clients = val()?.split(',').map(String::from).collect();
                o.clients_set = true;
            }
            "--suite" => o.suite = Some(val()?),
            "--memory-mib" => {
                o.memory_mib = val()?.parse().map_err(|e| format!("--memory-mib: {e}"))?
            }
            "--batch-size" => {
                o.batch_size = val()?.parse().map_err(|e| format!("--batch-size: {e}"))?
            }
            "--shape-partitions" => o.shape_partitions = num_list(&val()?, &a)?,
            "--shape-batch-sizes" => o.shape_batch_sizes = num_list(&val()?, &a)?,
            "--shape-values" => o.shape_values = num_list(&val()?, &a)?,
            "--kdirect-set" => o.kdirect_set = kv_list(&val()?),
            "--rdkafka-set" => o.rdkafka_set = kv_list(&val()?),
            "--kdirect-threads" => {
                o.kdirect_threads = val()?
                    .parse()
                    .map_err(|e| format!("--kdirect-threads: {e}"))?
            }
            "--broker" => o.broker = val()?,
            "--topic" => o.topic = val()?,
            "--rate" => o.rate = val()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--seconds" => o.seconds = val()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--warmup-secs" => {
                o.warmup_secs = val()?.parse().map_err(|e| format!("--warmup-secs: {e}"))?
            }
            "--serve" => o.serve = true,
            "--produce" => o.produce = true,
            "--client" => o.client = Some(val()?),
            "--bootstrap" => o.bootstrap = val()?,
            // cargo bench passes --bench; libtest-style filters are ignored.
            "--bench" => {}
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            _ => {}
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("e2e: {e}");
            return ExitCode::from(2);
        }
    };
    let r = if o.serve {
        serve(&o)
    } else if o.produce {
        produce(&o)
    } else if let Some(c) = o.client.clone() {
        client(&o, &c)
    } else {
        orchestrate(&o)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2e: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The orchestrator

#[derive(Debug, Clone, Default)]
struct Outcome {
    records: u64,
    bytes: u64,
    secs: f64,
    cpu: f64,
    rss_kib: u64,
    checksum: u64,
    /// CPU seconds the broker spent while this client read (Apache Kafka runs only).
    broker_cpu: f64,
}

fn orchestrate(o: &Opts) -> Result<(), String> {
    let mut o = o.clone();
    if o.suite.as_deref() == Some("tls") {
        o.broker = "secure".into();
    }
    if o.broker == "kafka" && !std::env::args().any(|a| a == "--clients") {
        o.clients = ["kdirect", "floor", "librdkafka", "java"]
            .map(String::from)
            .to_vec();
    }
    if o.broker == "secure" && !std::env::args().any(|a| a == "--clients") {
        o.clients = [
            "kdirect",
            "kdirect-sasl-ssl",
            "librdkafka-sasl-ssl",
            "java-sasl-ssl",
        ]
        .map(String::from)
        .to_vec();
    }
    if o.suite.as_deref() == Some("lakehouse") && !o.clients_set {
        o.clients = ["kdirect", "spark"].map(String::from).to_vec();
    }
    let o = &o;
    if o.suite.as_deref() == Some("latency") {
        return latency_suite(o);
    }
    if o.suite.as_deref() == Some("lakehouse") {
        return lakehouse_suite(o);
    }
    let runs: Vec<Opts> = match o.suite.as_deref() {
        None | Some("tls") => vec![o.clone()],
        Some("kafka") => vec![
            o.clone(),
            Opts {
                value_size: 1000,
                records: o.records / 10,
                ..o.clone()
            },
        ],
        Some("default") => {
            let mut v = Vec::new();
            for (codec, size, records) in [
                ("none", 100, o.records),
                ("lz4", 100, o.records),
                ("zstd", 100, o.records),
                ("none", 1000, o.records / 10),
            ] {
                v.push(Opts {
                    codec: codec.into(),
                    value_size: size,
                    records,
                    ..o.clone()
                });
            }
            v
        }
        Some("scaling") => {
            let mut v = Vec::new();
            for (size, records) in [(100, 10_000_000), (1000, 1_000_000), (10_000, 100_000)] {
                for partitions in [1, 8, 64, 512] {
                    // 512 partitions × one stored batch each is more than 64 MiB per batch.
                    let memory_mib = if partitions >= 512 {
                        o.memory_mib.max(256)
                    } else {
                        o.memory_mib
                    };
                    v.push(Opts {
                        value_size: size,
                        records,
                        partitions,
                        memory_mib,
                        ..o.clone()
                    });
                }
            }
            v
        }
        Some("shapes") => shapes(o),
        Some(s) => {
            return Err(format!(
                "unknown suite {s} (default, scaling, kafka, tls, latency, shapes, lakehouse)"
            ))
        }
    };
    println!("{}", machine());
    if runs
        .iter()
        .any(|r| r.broker == "kafka" || r.broker == "secure")
    {
        println!(
            "| data | client | records/s | MB/s | wall s | CPU s | CPU s / M records | peak RSS MiB | broker CPU s | records/s vs Java | CPU vs Java | records/s vs librdkafka |"
        );
        println!(
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
    } else {
        println!(
            "| data | client | records/s | MB/s | wall s | CPU s | peak RSS MiB | records/s vs librdkafka | CPU vs librdkafka |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    }
    let mut failed = false;
    for run in &runs {
        match one_run(run) {
            Ok(rows) if run.broker == "kafka" || run.broker == "secure" => {
                print_kafka_rows(run, &rows)
            }
            Ok(rows) => print_rows(run, &rows),
            Err(e) => {
                failed = true;
                println!("| {} | error: {e} | | | | | | | |", data_name(run));
            }
        }
    }
    if failed {
        Err("a run failed (see the table)".into())
    } else {
        Ok(())
    }
}

/// `--suite shapes` (issue 32): the topic shapes producers make, each written by Kafka's own
/// `ProducerPerformance` with `batch.size` as named (`acks=all linger.ms=5`, `buffer.memory`
/// raised so every partition's batch fills) and read with default settings: partitions {1, 8,
/// 64, 256, 1024} × `batch.size` {16 KB, 256 KB, 1 MB} × values {100 B, 1 KB}, plus lz4 at 64
/// partitions; 5M records of 100 B or 500k of 1 KB a cell. `--shape-partitions`,
/// `--shape-batch-sizes` and `--shape-values` (comma lists) pick cells of the grid.
fn shapes(o: &Opts) -> Vec<Opts> {
    let pick = |all: &[usize], chosen: &[usize]| -> Vec<usize> {
        all.iter()
            .copied()
            .filter(|x| chosen.is_empty() || chosen.contains(x))
            .collect()
    };
    let parts: Vec<i32> = [1, 8, 64, 256, 1024]
        .into_iter()
        .filter(|p| o.shape_partitions.is_empty() || o.shape_partitions.contains(p))
        .collect();
    let clients: Vec<String> = if o.clients_set {
        o.clients.clone()
    } else {
        ["kdirect", "floor", "librdkafka", "java"]
            .map(String::from)
            .to_vec()
    };
    let o = &Opts {
        clients,
        ..o.clone()
    };
    let mut v = Vec::new();
    for value_size in pick(&[100, 1000], &o.shape_values) {
        let records = if value_size >= 1000 {
            500_000
        } else {
            5_000_000
        };
        for &partitions in &parts {
            for batch_size in pick(&[16_384, 262_144, 1_048_576], &o.shape_batch_sizes) {
                v.push(Opts {
                    broker: "kafka".into(),
                    value_size,
                    records,
                    partitions,
                    batch_size,
                    codec: "none".into(),
                    ..o.clone()
                });
            }
        }
    }
    if parts.contains(&64) && (o.shape_values.is_empty() || o.shape_values.contains(&100)) {
        for batch_size in pick(&[262_144], &o.shape_batch_sizes) {
            v.push(Opts {
                broker: "kafka".into(),
                value_size: 100,
                records: 5_000_000,
                partitions: 64,
                batch_size,
                codec: "lz4".into(),
                ..o.clone()
            });
        }
    }
    v
}

fn data_name(o: &Opts) -> String {
    let batch = if o.batch_size > 0 {
        format!(", batch.size {} KB", o.batch_size / 1024)
    } else {
        String::new()
    };
    format!(
        "{}M × {} B, {} p, {}{batch}, {} MiB",
        o.records as f64 / 1e6,
        o.value_size,
        o.partitions,
        o.codec,
        o.memory_mib
    )
}

fn print_rows(o: &Opts, rows: &[(String, Outcome)]) {
    let base = |crc: bool| {
        rows.iter()
            .find(|(c, _)| {
                c == if crc {
                    "librdkafka"
                } else {
                    "librdkafka-nocrc"
                }
            })
            .map(|(_, r)| r.clone())
    };
    for (c, r) in rows {
        let rate = r.records as f64 / r.secs.max(1e-9);
        let vs = base(!c.ends_with("-nocrc")).filter(|_| !c.starts_with("librdkafka"));
        let (ratio, cpu_ratio) = match vs {
            Some(b) => (
                format!("{:.2}×", rate / (b.records as f64 / b.secs.max(1e-9))),
                format!("{:.2}×", r.cpu / b.cpu.max(1e-9)),
            ),
            None => (String::new(), String::new()),
        };
        println!(
            "| {} | {c} | {:.0} | {:.1} | {:.2} | {:.2} | {:.1} | {ratio} | {cpu_ratio} |",
            data_name(o),
            rate,
            r.bytes as f64 / r.secs.max(1e-9) / 1e6,
            r.secs,
            r.cpu,
            r.rss_kib as f64 / 1024.0,
        );
    }
    let _ = std::io::stdout().flush();
}

/// Apache Kafka rows: each client against Java and librdkafka over the same protocol (a
/// `-sasl-ssl` client against `java-sasl-ssl` and `librdkafka-sasl-ssl`).
fn print_kafka_rows(o: &Opts, rows: &[(String, Outcome)]) {
    let rate = |r: &Outcome| r.records as f64 / r.secs.max(1e-9);
    let find = |name: &str| rows.iter().find(|(c, _)| c == name).map(|(_, r)| r.clone());
    for (c, r) in rows {
        let suffix = if c.ends_with(SASL_SSL_SUFFIX) {
            SASL_SSL_SUFFIX
        } else {
            ""
        };
        let (java_name, rdk_name) = (format!("java{suffix}"), format!("librdkafka{suffix}"));
        let (java, rdk) = (find(&java_name), find(&rdk_name));
        let vs = |b: &Option<Outcome>, f: &dyn Fn(&Outcome) -> f64| match b {
            Some(b) if *c != java_name && *c != rdk_name => {
                format!("{:.2}×", f(r) / f(b).max(1e-9))
            }
            _ => String::new(),
        };
        println!(
            "| {} | {c} | {:.0} | {:.1} | {:.2} | {:.2} | {:.3} | {:.1} | {:.2} | {} | {} | {} |",
            data_name(o),
            rate(r),
            r.bytes as f64 / r.secs.max(1e-9) / 1e6,
            r.secs,
            r.cpu,
            r.cpu / (r.records as f64 / 1e6).max(1e-9),
            r.rss_kib as f64 / 1024.0,
            r.broker_cpu,
            vs(&java, &rate),
            vs(&java, &|x: &Outcome| x.cpu),
            vs(&rdk, &rate),
        );
    }
    if let (Some(plain), Some(tls)) = (find("kdirect"), find("kdirect-sasl-ssl")) {
        eprintln!(
            "e2e: {}: kdirect over SASL_SSL reads {:.0}% of its plaintext records/s",
            data_name(o),
            100.0 * rate(&tls) / rate(&plain).max(1e-9)
        );
    }
    let _ = std::io::stdout().flush();
}

/// The suffix of a client reading through the secure cluster's SASL_SSL listener.
const SASL_SSL_SUFFIX: &str = "-sasl-ssl";

/// The `secure` cluster (`tests/kafka/kafka.sh`): its PLAINTEXT and SASL_SSL addresses,
/// the Java tools' classpath, the broker's pid, and each client's SASL_SSL settings
/// (SCRAM-SHA-512 as alice, the cluster's CA): kdirect's and librdkafka's (the same keys),
/// and the Java consumer's.
struct SecureKafka {
    plaintext: String,
    sasl_ssl: String,
    classpath: String,
    pid: u32,
    client_settings: Vec<(String, String)>,
    java_settings: Vec<(String, String)>,
}

fn secure_up() -> Result<SecureKafka, String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!("{root}/tests/kafka/kafka.sh");
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let vars = [
        "KDIRECT_TEST_KAFKA_SECURE",
        "KDIRECT_TEST_KAFKA_SASL_SSL",
        "KDIRECT_TEST_KAFKA_CERTS",
        "KDIRECT_TEST_KAFKA_CP",
    ];
    let values: Vec<String> = if vars.iter().all(|v| from_env(v).is_some()) {
        vars.iter().filter_map(|v| from_env(v)).collect()
    } else {
        let st = Command::new("bash")
            .args([&script, "up"])
            .env("KDIRECT_KAFKA_CLUSTERS", "secure")
            .stdout(Stdio::inherit())
            .status()
            .map_err(|e| format!("{script}: {e}"))?;
        if !st.success() {
            return Err(format!("{script} up failed"));
        }
        let env = Command::new("bash")
            .args([&script, "env"])
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        let env = String::from_utf8_lossy(&env.stdout).into_owned();
        vars.iter()
            .map(|name| {
                env.lines()
                    .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                    .map(|v| v.trim_matches('\'').to_owned())
                    .ok_or_else(|| format!("kafka.sh env did not set {name}"))
            })
            .collect::<Result<_, _>>()?
    };
    let [plaintext, sasl_ssl, certs, classpath] =
        <[String; 4]>::try_from(values).map_err(|_| "four variables expected".to_owned())?;
    let home =
        std::env::var("KDIRECT_KAFKA_HOME").unwrap_or_else(|_| format!("{root}/target/kafka"));
    let pid = std::fs::read_to_string(format!("{home}/secure/node1/pid"))
        .map_err(|e| format!("{home}/secure/node1/pid: {e} (set KDIRECT_KAFKA_HOME)"))?
        .trim()
        .parse()
        .map_err(|e| format!("the broker's pid: {e}"))?;
    let ca = format!("{certs}/ca.pem");
    let kv = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    Ok(SecureKafka {
        plaintext,
        sasl_ssl,
        classpath,
        pid,
        client_settings: kv(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "alice-secret"),
            ("ssl.ca.location", &ca),
        ]),
        java_settings: kv(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required \
                 username=\"alice\" password=\"alice-secret\";",
            ),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", &ca),
        ]),
    })
}

/// Apache Kafka for `--broker kafka`: `tests/kafka/kafka.sh` starts the 1-node cluster if it
/// is not up. Returns the bootstrap address, the Java tools' classpath and the broker's pid.
fn kafka_up() -> Result<(String, String, u32), String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!("{root}/tests/kafka/kafka.sh");
    let st = Command::new("bash")
        .args([&script, "up"])
        .env("KDIRECT_KAFKA_CLUSTERS", "single")
        .stdout(Stdio::inherit())
        .status()
        .map_err(|e| format!("{script}: {e}"))?;
    if !st.success() {
        return Err(format!("{script} up failed"));
    }
    let env = Command::new("bash")
        .args([&script, "env"])
        .output()
        .map_err(|e| format!("{script}: {e}"))?;
    let env = String::from_utf8_lossy(&env.stdout);
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .map(|v| v.trim_matches('\'').to_owned())
            .ok_or_else(|| format!("kafka.sh env did not set {name}"))
    };
    let home =
        std::env::var("KDIRECT_KAFKA_HOME").unwrap_or_else(|_| format!("{root}/target/kafka"));
    let pid = std::fs::read_to_string(format!("{home}/single/node1/pid"))
        .map_err(|e| {
            format!(
                "{home}/single/node1/pid: {e} (a broker started from another checkout is up on \
                 the same port: stop it with that checkout's `tests/kafka/kafka.sh down`)"
            )
        })?
        .trim()
        .parse()
        .map_err(|e| format!("the broker's pid: {e}"))?;
    Ok((
        var("KDIRECT_TEST_KAFKA")?,
        var("KDIRECT_TEST_KAFKA_CP")?,
        pid,
    ))
}

fn ktool(classpath: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("java")
        .args(["-Xmx512m", "-cp", classpath, "KTool"])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("java KTool: {e}"))?;
    if !out.status.success() {
        return Err(format!("KTool {args:?} failed: {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The run's topic on Apache Kafka, written by Kafka's Java producer unless a topic of that
/// name already holds exactly the run's records.
fn kafka_topic(o: &Opts, bootstrap: &str, classpath: &str) -> Result<String, String> {
    if o.batch_size > 0 {
        return perf_topic(o, bootstrap, classpath);
    }
    // Stored batches of up to 1 MB, as a producer batching well writes them. The producer's
    // buffer.memory (32 MiB) must hold a batch per partition: with 1 MB batches over 64
    // partitions it ran out and wrote one record per stored batch (78,125 batches of 178 B
    // per partition), which measured per-batch overhead, not a wide topic.
    let batch_size = 1_000_000usize.min((24usize << 20) / o.partitions.max(1) as usize);
    let topic = format!(
        "bench-{}-{}-{}-{}-b{}",
        o.records, o.value_size, o.partitions, o.codec, batch_size
    );
    if !create_unless_written(o, bootstrap, classpath, &topic)? {
        return Ok(topic);
    }
    let p = o.partitions.to_string();
    eprintln!(
        "e2e: writing {} records into {topic} with Kafka's Java producer",
        o.records
    );
    ktool(
        classpath,
        &[
            "produce",
            "--bootstrap",
            bootstrap,
            "--topic",
            &topic,
            "--partitions",
            &p,
            "--count",
            &o.records.to_string(),
            "--value-size",
            &o.value_size.to_string(),
            "--codec",
            &o.codec,
            "--batch-size",
            &batch_size.to_string(),
            "--linger-ms",
            "20",
        ],
    )?;
    Ok(topic)
}

/// Whether `topic` is to be written: `false` when it holds exactly the run's records already
/// (reused), `true` after creating it with the run's partitions; a topic holding other
/// records is an error.
fn create_unless_written(
    o: &Opts,
    bootstrap: &str,
    classpath: &str,
    topic: &str,
) -> Result<bool, String> {
    match kafka_records(bootstrap, classpath, topic) {
        Some(n) if n == o.records => return Ok(false),
        Some(n) => {
            return Err(format!(
                "topic {topic} holds {n} records, not {}: delete it",
                o.records
            ))
        }
        None => {}
    }
    let p = o.partitions.to_string();
    ktool(
        classpath,
        &[
            "create",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--partitions",
            &p,
        ],
    )?;
    Ok(true)
}

/// Records already in `topic` (the sum of its end offsets), `None` if it does not exist.
fn kafka_records(bootstrap: &str, classpath: &str, topic: &str) -> Option<u64> {
    Command::new("java")
        .args([
            "-cp",
            classpath,
            "KTool",
            "end-offsets",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
        ])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split(' ').nth(1)?.parse::<u64>().ok())
                .sum()
        })
}

/// The run's topic written by Kafka's own `ProducerPerformance` with `batch.size` =
/// `o.batch_size` (`--batch-size`, the shapes suite): `acks=all linger.ms=5`, as the issue's
/// figures were measured, and `buffer.memory` large enough for a full batch per partition
/// (twice over), so batches are cut by `batch.size`, not by the producer running out of
/// buffer. Reused by later runs when it holds exactly the run's records.
fn perf_topic(o: &Opts, bootstrap: &str, classpath: &str) -> Result<String, String> {
    let topic = format!(
        "shape-{}-{}-{}-{}-bs{}",
        o.records, o.value_size, o.partitions, o.codec, o.batch_size
    );
    if !create_unless_written(o, bootstrap, classpath, &topic)? {
        return Ok(topic);
    }
    let buffer = (o.batch_size * o.partitions.max(1) as usize * 2).clamp(32 << 20, 2 << 30);
    let heap = format!("-Xmx{}m", (buffer >> 20) + 1024);
    eprintln!(
        "e2e: writing {} records into {topic} with Kafka's ProducerPerformance \
         (batch.size {}, buffer.memory {buffer})",
        o.records, o.batch_size
    );
    let props = [
        format!("bootstrap.servers={bootstrap}"),
        "acks=all".to_owned(),
        "linger.ms=5".to_owned(),
        format!("batch.size={}", o.batch_size),
        format!("buffer.memory={buffer}"),
        format!("compression.type={}", o.codec),
        // A broker on 2 cores that takes a thousand partitions' batches slowly: records wait
        // longer than the default 120 s in the producer's buffer, and were expired (888 of 5M
        // at 1,024 partitions × 16 KB on 2026-12-07), leaving the topic short.
        "delivery.timeout.ms=900000".to_owned(),
        "request.timeout.ms=300000".to_owned(),
    ];
    let st = Command::new("java")
        .args([&heap, "-cp", classpath])
        .arg("org.apache.kafka.tools.ProducerPerformance")
        .args(["--topic", &topic, "--num-records", &o.records.to_string()])
        .args([
            "--record-size",
            &o.value_size.to_string(),
            "--throughput",
            "-1",
        ])
        .arg("--producer-props")
        .args(&props)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("java ProducerPerformance: {e}"))?;
    if !st.success() {
        return Err(format!("ProducerPerformance into {topic} failed: {st}"));
    }
    // ProducerPerformance exits 0 even when records expired: a short topic would have every
    // client wait for records that do not exist (the 2026-12-07 run hung so).
    let written = kafka_records(bootstrap, classpath, &topic).unwrap_or(0);
    if written != o.records {
        return Err(format!(
            "ProducerPerformance wrote {written} of the {} records into {topic} (the others \
             expired in the producer: the broker did not keep up); not read",
            o.records
        ));
    }
    Ok(topic)
}

fn one_run(o: &Opts) -> Result<Vec<(String, Outcome)>, String> {
    if o.broker == "kafka" || o.broker == "secure" {
        return one_kafka_run(o);
    }
    if o.broker != "fake" {
        return Err(format!("unknown broker {} (fake, kafka, secure)", o.broker));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut broker = Command::new(&exe)
        .args([
            "--serve",
            "--records",
            &o.records.to_string(),
            "--partitions",
            &o.partitions.to_string(),
            "--value-size",
            &o.value_size.to_string(),
            "--codec",
            &o.codec,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn the fake broker: {e}"))?;
    let mut line = String::new();
    BufReader::new(broker.stdout.take().ok_or("no broker stdout")?)
        .read_line(&mut line)
        .map_err(|e| format!("read the broker's bootstrap line: {e}"))?;
    let bootstrap = line
        .trim()
        .strip_prefix("bootstrap=")
        .ok_or_else(|| format!("broker said {line:?}"))?
        .to_owned();
    let mut rows = Vec::new();
    let mut result = Ok(());
    for c in &o.clients {
        let broker_cpu = proc_cpu(&format!("/proc/{}/stat", broker.id()));
        match run_client(&exe, o, c, &bootstrap) {
            Ok(r) => {
                eprintln!(
                    "e2e: {} {c}: {} records in {:.2} s, CPU {:.2} s, peak RSS {:.1} MiB, \
                     checksum {:016x}; fake broker CPU {:.2} s",
                    data_name(o),
                    r.records,
                    r.secs,
                    r.cpu,
                    r.rss_kib as f64 / 1024.0,
                    r.checksum,
                    proc_cpu(&format!("/proc/{}/stat", broker.id())) - broker_cpu
                );
                rows.push((c.clone(), r))
            }
            Err(e) => {
                result = Err(format!("{c}: {e}"));
                break;
            }
        }
    }
    let _ = broker.kill();
    let _ = broker.wait();
    result?;
    check_agreement(o, &rows)?;
    Ok(rows)
}

fn one_kafka_run(o: &Opts) -> Result<Vec<(String, Outcome)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let secure = if o.broker == "secure" {
        Some(secure_up()?)
    } else {
        None
    };
    let (bootstrap, classpath, broker_pid) = match &secure {
        Some(s) => (s.plaintext.clone(), s.classpath.clone(), s.pid),
        None => kafka_up()?,
    };
    let topic = kafka_topic(o, &bootstrap, &classpath)?;
    if secure.is_none() {
        warm_page_cache(&topic);
    }
    let run = Opts { topic, ..o.clone() };
    let stat = format!("/proc/{broker_pid}/stat");
    let mut rows: Vec<(String, Outcome)> = Vec::new();
    for c in &o.clients {
        // A `-sasl-ssl` client reads the same log through the SASL_SSL listener.
        let (name, bootstrap, run, java_settings) = match (c.strip_suffix(SASL_SSL_SUFFIX), &secure)
        {
            (Some(base), Some(s)) => {
                let mut run = run.clone();
                run.kdirect_set.extend(s.client_settings.iter().cloned());
                run.rdkafka_set.extend(s.client_settings.iter().cloned());
                (base, s.sasl_ssl.as_str(), run, s.java_settings.as_slice())
            }
            (Some(_), None) => {
                return Err(format!("{c}: SASL_SSL clients need --broker secure"));
            }
            (None, _) => (c.as_str(), bootstrap.as_str(), run.clone(), &[][..]),
        };
        let before = proc_cpu(&stat);
        let mut r = if name == "java" {
            java_client(&run, bootstrap, &classpath, java_settings)?
        } else {
            run_client(&exe, &run, name, bootstrap)?
        };
        r.broker_cpu = proc_cpu(&stat) - before;
        eprintln!(
            "e2e: {} {c} (Kafka): {} records in {:.2} s, CPU {:.2} s, peak RSS {:.1} MiB, \
             checksum {:016x}; broker CPU {:.2} s",
            data_name(o),
            r.records,
            r.secs,
            r.cpu,
            r.rss_kib as f64 / 1024.0,
            r.checksum,
            r.broker_cpu
        );
        rows.push((c.clone(), r));
    }
    check_agreement(o, &rows)?;
    Ok(rows)
}

/// Reads every log segment of `topic` on the 1-node broker (`tests/kafka/kafka.sh`'s data
/// dir) once, so that the page cache holds it before the first client reads: with many
/// topics (the shapes suite writes ~15 GB) the topic of a cell is often no longer cached, and
/// the first client paid for the broker's disk reads (in its own wall time and system CPU,
/// its receives trickling in) while the ones after it read from memory. Best effort.
fn warm_page_cache(topic: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let home =
        std::env::var("KDIRECT_KAFKA_HOME").unwrap_or_else(|_| format!("{root}/target/kafka"));
    let data = format!("{home}/single/node1/data");
    let Ok(dirs) = std::fs::read_dir(&data) else {
        return;
    };
    let prefix = format!("{topic}-");
    let mut bytes = 0u64;
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let is_partition = name
            .strip_prefix(&prefix)
            .is_some_and(|p| p.parse::<u32>().is_ok());
        if !is_partition {
            continue;
        }
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for f in files.flatten() {
            if f.path().extension().is_some_and(|e| e == "log") {
                if let Ok(mut file) = std::fs::File::open(f.path()) {
                    bytes += std::io::copy(&mut file, &mut std::io::sink()).unwrap_or(0);
                }
            }
        }
    }
    eprintln!("e2e: {topic}: {bytes} bytes of log read into the page cache");
}

/// Kafka's Java consumer (`KTool perf`), in its own JVM, with extra consumer `settings`
/// (`--consumer.KEY VALUE`).
fn java_client(
    o: &Opts,
    bootstrap: &str,
    classpath: &str,
    settings: &[(String, String)],
) -> Result<Outcome, String> {
    let records = o.records.to_string();
    let keys: Vec<String> = settings
        .iter()
        .map(|(k, _)| format!("--consumer.{k}"))
        .collect();
    let mut args = vec![
        "perf",
        "--bootstrap",
        bootstrap,
        "--topic",
        &o.topic,
        "--records",
        &records,
    ];
    for (key, (_, value)) in keys.iter().zip(settings) {
        args.extend([key.as_str(), value.as_str()]);
    }
    let out = ktool(classpath, &args)?;
    parse_result(&out)
}

fn check_agreement(o: &Opts, rows: &[(String, Outcome)]) -> Result<(), String> {
    // The floor reads no record (no checksum): its count only.
    let reference = rows.iter().find(|(c, _)| c != "floor").or(rows.first());
    if let Some((c0, r0)) = reference {
        for (c, r) in rows {
            let same = c == "floor" || r.checksum == r0.checksum;
            if r.records != o.records || !same {
                return Err(format!(
                    "{c} read {} records with checksum {:016x}; {c0} read {} with {:016x}; {} were served",
                    r.records, r.checksum, r0.records, r0.checksum, o.records
                ));
            }
        }
    }
    Ok(())
}

fn run_client(
    exe: &std::path::Path,
    o: &Opts,
    c: &str,
    bootstrap: &str,
) -> Result<Outcome, String> {
    let kv = |v: &[(String, String)]| {
        v.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let out = Command::new(exe)
        .args([
            "--client",
            c,
            "--bootstrap",
            bootstrap,
            "--records",
            &o.records.to_string(),
            "--partitions",
            &o.partitions.to_string(),
            "--memory-mib",
            &o.memory_mib.to_string(),
            "--value-size",
            &o.value_size.to_string(),
            "--kdirect-threads",
            &o.kdirect_threads.to_string(),
            "--topic",
            &o.topic,
            "--kdirect-set",
            &kv(&o.kdirect_set),
            "--rdkafka-set",
            &kv(&o.rdkafka_set),
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("spawn: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("exited with {}: {stdout}", out.status));
    }
    parse_result(&stdout)
}

/// A client's `RESULT k=v ...` line.
fn parse_result(stdout: &str) -> Result<Outcome, String> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| format!("no RESULT line in {stdout:?}"))?;
    let f: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let num = |k: &str| f.get(k).copied().unwrap_or("0");
    Ok(Outcome {
        records: num("records").parse().unwrap_or(0),
        bytes: num("bytes").parse().unwrap_or(0),
        secs: num("secs").parse().unwrap_or(0.0),
        cpu: num("cpu").parse().unwrap_or(0.0),
        rss_kib: num("rss_kib").parse().unwrap_or(0),
        checksum: u64::from_str_radix(num("checksum"), 16).unwrap_or(0),
        broker_cpu: 0.0,
    })
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|r| r.trim().to_owned()))
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("machine: {cpus} CPUs ({model}), MemTotal {mem}\n")
}

/// utime + stime of a process from its `stat` file, in seconds (USER_HZ is 100 on Linux).
fn proc_cpu(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// The fake broker (child)

/// The same data as `kdirect fake-broker`: one encoded batch of 1000 records per partition,
/// served at every offset.
fn serve(o: &Opts) -> Result<(), String> {
    let codec: Codec = o.codec.parse().map_err(|e| format!("{e:?}"))?;
    let cluster = FakeCluster::builder()
        .topic(TOPIC, o.partitions)
        .worker_threads(2)
        .start()
        .map_err(|e| e.to_string())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let batch = |n: u64| {
        let records: Vec<FakeRecord> = (0..n as usize)
            .map(|i| {
                let value: Vec<u8> = (0..o.value_size)
                    .map(|j| b'a' + ((i + j) % 26) as u8)
                    .collect();
                FakeRecord::value(value).with_timestamp(now)
            })
            .collect();
        encode_batch(&records, &BatchOptions::codec(codec)).map_err(|e| e.to_string())
    };
    // Like a producer under max.request.size (1 MiB): at most 1000 records and ~1 MB a batch.
    let per_batch = BATCH_RECORDS.min((1_000_000 / o.value_size.max(1) as u64).max(1));
    let full = batch(per_batch)?;
    let parts = o.partitions as u64;
    // Bytes of record batches in the log, for the stats below.
    let mut log_bytes = 0u64;
    for p in 0..o.partitions {
        let count = o.records / parts + u64::from((p as u64) < o.records % parts);
        cluster
            .append_batch_repeated(TOPIC, p, full.clone(), (count / per_batch) as usize)
            .map_err(|e| e.to_string())?;
        log_bytes += full.len() as u64 * (count / per_batch);
        if !count.is_multiple_of(per_batch) {
            let rest = batch(count % per_batch)?;
            log_bytes += rest.len() as u64;
            cluster
                .append_batch(TOPIC, p, rest)
                .map_err(|e| e.to_string())?;
        }
    }
    println!("bootstrap={}", cluster.bootstrap());
    let _ = std::io::stdout().flush();
    // Serve until the orchestrator kills this process. With KDIRECT_BENCH_BROKER_STATS set,
    // each second that saw requests prints what the brokers served in it (to stderr): how many
    // Fetch requests, the partitions they listed and the record bytes they returned, against
    // the log's own size (bytes read twice show as more than the log).
    if std::env::var_os("KDIRECT_BENCH_BROKER_STATS").is_none() {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    const FETCH: i16 = 1;
    let mut last = (0u64, 0u64, 0u64);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let mut now = (0u64, 0u64, 0u64);
        for id in cluster.broker_ids() {
            let Ok(s) = cluster.stats(id) else { continue };
            now.0 += s.requests_by_api.get(&FETCH).copied().unwrap_or(0);
            now.1 += s.fetch_partitions_asked;
            now.2 += s.fetched_record_bytes;
        }
        if now != last {
            eprintln!(
                "fake broker: {} Fetch requests, {} partitions listed, {:.1} MB of records sent \
                 (in all: {:.1} MB, the log holds {:.1} MB)",
                now.0 - last.0,
                now.1 - last.1,
                (now.2 - last.2) as f64 / 1e6,
                now.2 as f64 / 1e6,
                log_bytes as f64 / 1e6
            );
            last = now;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The clients (children)

#[derive(Debug, Default)]
struct Sum {
    records: u64,
    bytes: u64,
    checksum: u64,
}

impl Sum {
    /// The same checksum as `kdirect consume --stats`: every key and value byte, any order.
    #[inline]
    fn add(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let k = key.unwrap_or_default();
        let v = value.unwrap_or_default();
        self.records += 1;
        self.bytes += (k.len() + v.len()) as u64;
        let c = crc32c::crc32c_append(crc32c::crc32c(k), v);
        self.checksum = self.checksum.wrapping_add(u64::from(c));
    }
}

fn client(o: &Opts, name: &str) -> Result<(), String> {
    let started = Instant::now();
    let sum = match name {
        "kdirect" => kdirect_client(o, true)?,
        "kdirect-nocrc" => kdirect_client(o, false)?,
        "librdkafka" => rdkafka_client(o, true)?,
        "librdkafka-nocrc" => rdkafka_client(o, false)?,
        "rskafka" => rskafka_client(o)?,
        "floor" => floor_client(o)?,
        "latency-kdirect" => return latency_report(&kdirect_latency(o)?),
        "latency-librdkafka" => return latency_report(&rdkafka_latency(o)?),
        other => return Err(format!("unknown client {other}")),
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "RESULT records={} bytes={} secs={secs:.4} cpu={:.2} rss_kib={} checksum={:016x}",
        sum.records,
        sum.bytes,
        proc_cpu("/proc/self/stat"),
        peak_rss_kib(),
        sum.checksum
    );
    Ok(())
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    }
    .enable_all()
    .build()
    .map_err(|e| e.to_string())
}

/// kdirect as `kdirect consume --until-latest --output null` runs it: a `DirectStream` on a
/// current-thread runtime, batch by batch, every record handed to the checksum.
fn kdirect_client(o: &Opts, crc: bool) -> Result<Sum, String> {
    runtime(o.kdirect_threads)?.block_on(async {
        let mut b = DirectStream::builder()
            .bootstrap(&o.bootstrap)
            .topics(&[&o.topic])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .memory_budget(o.memory_mib << 20)
            // As `kdirect consume` reads.
            .chunked(true)
            .set("check.crcs", if crc { "true" } else { "false" })
            .map_err(|e| e.to_string())?;
        // Batches as the stream sizes them (chunked: eight budgets of data, read a chunk at a
        // time within the budget); no maxOffsetsPerTrigger.
        for (k, v) in &o.kdirect_set {
            b = b.set(k, v).map_err(|e| e.to_string())?;
        }
        let mut stream = b.build().await.map_err(|e| e.to_string())?;
        let mut sum = Sum::default();
        while let Some(mut batch) = stream.next_batch().await.map_err(|e| e.to_string())? {
            // Every chunk of the batch (one, unless `batch.chunked` is set).
            stream
                .try_for_each_record(&mut batch, |_, r| {
                    sum.add(r.key(), r.value());
                    Ok::<(), kdirect::Error>(())
                })
                .await
                .map_err(|e| e.to_string())?;
            stream.done(batch);
        }
        Ok(sum)
    })
}

/// librdkafka's `BaseConsumer` on assigned partitions, tuned as a performance user would:
/// big fetches, a local queue as large as kdirect's memory budget, and no 1 s fetch pause when
/// the queue is full (see docs/fake-broker.md: with the defaults the same run is 5× slower).
/// `queued.min.messages=1000000` was measured too: no faster, and 410 MiB of RSS.
fn rdkafka_client(o: &Opts, crc: bool) -> Result<Sum, String> {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{Offset, TopicPartitionList};

    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &o.bootstrap)
        .set("group.id", "e2e")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("check.crcs", if crc { "true" } else { "false" })
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "4194304")
        .set(
            "queued.max.messages.kbytes",
            (o.memory_mib * 1024).to_string(),
        )
        .set("fetch.queue.backoff.ms", "10");
    for (k, v) in &o.rdkafka_set {
        cfg.set(k, v);
    }
    let c: BaseConsumer = cfg.create().map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..o.partitions {
        tpl.add_partition_offset(&o.topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let mut sum = Sum::default();
    let deadline = Instant::now() + Duration::from_secs(900);
    while sum.records < o.records {
        if Instant::now() > deadline {
            return Err(format!("timed out after {} records", sum.records));
        }
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => sum.add(m.key(), m.payload()),
            Some(Err(e)) => return Err(e.to_string()),
            None => {}
        }
    }
    Ok(sum)
}

/// The network floor (issue 35 item 2): Fetch requests as kdirect's defaults make them (one
/// request per leader for every partition not yet read to its end, `max.partition.fetch.bytes`
/// 1 MiB, `fetch.max.bytes` 50 MiB) through kdirect's own connection, the answers read into
/// memory and then dropped: the frame parsed down to each partition's record bytes (zero-copy,
/// as kdirect's decoder does), the record batches framed by the decoder's batch walk (CRC off)
/// for their last offset and record count, and nothing else — no CRC, no record walk, no checksum. What kdirect's
/// CPU per record is above this is what decoding and delivering cost.
fn floor_client(o: &Opts) -> Result<Sum, String> {
    use kdirect::engine::cluster::Cluster;
    use kdirect::engine::conn::ConnConfig;
    use kdirect::engine::record::Batches;
    use kdirect::proto::api::fetch::{self, Fetch, FetchParams, PartitionFetch, TopicFetch};
    use kdirect::proto::api::list_offsets::OffsetSpec;
    use kdirect::proto::IsolationLevel;

    runtime(o.kdirect_threads)?.block_on(async {
        let e = |e: kdirect::engine::Error| e.to_string();
        let cluster = Cluster::connect(std::slice::from_ref(&o.bootstrap), ConnConfig::default())
            .await
            .map_err(e)?;
        let view = cluster.ensure_topics(&[&o.topic]).await.map_err(e)?;
        let topic = view.topic(&o.topic).map_err(e)?.clone();
        let ask: Vec<(String, i32)> = topic
            .partitions
            .iter()
            .map(|p| (o.topic.clone(), p.partition))
            .collect();
        let ends: BTreeMap<i32, i64> = cluster
            .list_offsets(&ask, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
            .await
            .map_err(e)?
            .into_iter()
            .map(|p| (p.partition, p.offset))
            .collect();
        let mut pos: BTreeMap<i32, i64> = ends.keys().map(|&p| (p, 0)).collect();
        let names = std::collections::HashMap::from([(
            topic.id,
            std::sync::Arc::<str>::from(o.topic.as_str()),
        )]);
        let mut sum = Sum::default();
        let deadline = Instant::now() + Duration::from_secs(900);
        loop {
            let mut by_leader: BTreeMap<i32, Vec<PartitionFetch>> = BTreeMap::new();
            for p in &topic.partitions {
                let (at, end) = (pos[&p.partition], ends[&p.partition]);
                if at < end {
                    by_leader.entry(p.leader).or_default().push(PartitionFetch {
                        partition: p.partition,
                        fetch_offset: at,
                        partition_max_bytes: 1 << 20,
                        current_leader_epoch: p.leader_epoch,
                        last_fetched_epoch: -1,
                    });
                }
            }
            if by_leader.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("timed out after {} records", sum.records));
            }
            let mut calls = Vec::new();
            for (leader, partitions) in by_leader {
                let conn = cluster.connection(leader).await.map_err(e)?;
                let version = conn.version::<Fetch>().map_err(e)?;
                let topics = [TopicFetch {
                    name: o.topic.clone(),
                    id: topic.id,
                    partitions,
                }];
                let req = fetch::request(&FetchParams::default(), &topics, version)
                    .map_err(|e| e.to_string())?;
                calls.push(async move {
                    let frame = conn.round_trip::<Fetch>(&req, version).await?;
                    Ok::<_, kdirect::engine::Error>((frame, version))
                });
            }
            for call in calls {
                let (frame, version) = call.await.map_err(e)?;
                let (_, answer) =
                    fetch::decode(frame, version, &names).map_err(|e| e.to_string())?;
                for p in &answer.partitions {
                    let Some(at) = pos.get_mut(&p.partition) else {
                        continue;
                    };
                    // Whole record batches, framed by the decoder's own batch walk without
                    // the CRC: a header each, no record touched.
                    for b in Batches::new(p.records.clone(), false) {
                        let b = b.map_err(|e| e.to_string())?;
                        let next = b.header().next_offset();
                        if next > *at {
                            sum.records += u64::try_from(b.header().record_count).unwrap_or(0);
                            sum.bytes += b.bytes().len() as u64;
                            *at = next;
                        }
                    }
                }
            }
        }
        Ok(sum)
    })
}

/// rskafka (a pure-Rust client): one task per partition fetching 4 MiB at a time.
fn rskafka_client(o: &Opts) -> Result<Sum, String> {
    use rskafka::client::partition::UnknownTopicHandling;
    use rskafka::client::ClientBuilder;

    runtime(o.kdirect_threads)?.block_on(async {
        let client = ClientBuilder::new(vec![o.bootstrap.clone()])
            .build()
            .await
            .map_err(|e| e.to_string())?;
        let parts = o.partitions as u64;
        let mut tasks = tokio::task::JoinSet::new();
        for p in 0..o.partitions {
            let pc = client
                .partition_client(&o.topic, p, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| e.to_string())?;
            let want = (o.records / parts + u64::from((p as u64) < o.records % parts)) as i64;
            tasks.spawn(async move {
                let mut sum = Sum::default();
                let mut offset = 0i64;
                while offset < want {
                    let (records, _hw) = pc
                        .fetch_records(offset, 1..4 << 20, 500)
                        .await
                        .map_err(|e| e.to_string())?;
                    for r in &records {
                        sum.add(r.record.key.as_deref(), r.record.value.as_deref());
                        offset = offset.max(r.offset + 1);
                    }
                }
                Ok::<_, String>(sum)
            });
        }
        let mut total = Sum::default();
        while let Some(j) = tasks.join_next().await {
            let s = j.map_err(|e| e.to_string())??;
            total.records += s.records;
            total.bytes += s.bytes;
            total.checksum = total.checksum.wrapping_add(s.checksum);
        }
        Ok(total)
    })
}

// ---------------------------------------------------------------------------------------------
// The latency suite: produce-to-delivery time at a steady rate (issue 14)

/// Wall-clock microseconds since the epoch: the producer's send time and a client's delivery
/// time, both read on this machine's clock.
fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A latency record's value: its sequence number and its send time (both u64 little-endian),
/// padded with `b'x'` to `--value-size`.
const LATENCY_HEADER: usize = 16;

/// `--suite latency`: a fresh topic on the 1-node Kafka, kdirect and librdkafka reading it at
/// the same time (each in its own process, each ready before the first record is written),
/// and a producer child writing `--rate` records a second for `--seconds`, paced by the clock.
fn latency_suite(o: &Opts) -> Result<(), String> {
    if o.rate == 0 || o.seconds <= o.warmup_secs {
        return Err("--rate must be above 0 and --seconds above the warm-up (2 s)".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let (bootstrap, classpath, broker_pid) = kafka_up()?;
    let topic = format!("latency-{}", now_micros());
    let partitions = o.partitions.to_string();
    ktool(
        &classpath,
        &[
            "create",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--partitions",
            &partitions,
            // The broker stamps each batch as it appends it: append → delivery is the
            // consumer's share of the latency, send → append the producer's and the broker's.
            "--config",
            "message.timestamp.type=LogAppendTime",
        ],
    )?;
    let records = o.rate * o.seconds;
    let warmup = o.rate * o.warmup_secs;
    println!("{}", machine());
    println!(
        "latency: {records} records of {} B, {} a second for {} s over {} partitions of {topic}; \
         the first {} s ({warmup} records) are warm-up, not measured; load average before: {}",
        o.value_size.max(LATENCY_HEADER),
        o.rate,
        o.seconds,
        o.partitions,
        o.warmup_secs,
        loadavg()
    );
    let child_args = |mode: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = mode.iter().map(|s| (*s).to_owned()).collect();
        for (k, v) in [
            ("--bootstrap", bootstrap.clone()),
            ("--topic", topic.clone()),
            ("--partitions", partitions.clone()),
            ("--rate", o.rate.to_string()),
            ("--seconds", o.seconds.to_string()),
            ("--warmup-secs", o.warmup_secs.to_string()),
            ("--value-size", o.value_size.to_string()),
            ("--kdirect-threads", o.kdirect_threads.to_string()),
        ] {
            a.extend([k.to_owned(), v]);
        }
        for (flag, set) in [
            ("--kdirect-set", &o.kdirect_set),
            ("--rdkafka-set", &o.rdkafka_set),
        ] {
            let kv: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
            a.extend([flag.to_owned(), kv.join(",")]);
        }
        a
    };
    // Both by default; `--clients kdirect` (or `librdkafka`) runs one alone, to see what it
    // costs the broker.
    let clients: Vec<&str> = if std::env::args().any(|a| a == "--clients") {
        o.clients.iter().map(String::as_str).collect()
    } else {
        vec!["kdirect", "librdkafka"]
    };
    let mut children = Vec::new();
    for c in clients {
        let mut child = Command::new(&exe)
            .args(child_args(&["--client", &format!("latency-{c}")]))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn {c}: {e}"))?;
        let out = BufReader::new(child.stdout.take().ok_or("no client stdout")?);
        children.push((c, child, out));
    }
    // Both clients read the topic (empty) before the first record is written.
    for (c, _, out) in &mut children {
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| format!("{c}: read its READY line: {e}"))?;
        if line.trim() != "READY" {
            return Err(format!("{c} said {line:?} instead of READY"));
        }
    }
    let broker_cpu = proc_cpu(&format!("/proc/{broker_pid}/stat"));
    let produced = Command::new(&exe)
        .args(child_args(&["--produce"]))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("spawn the producer: {e}"))?;
    let produced_out = String::from_utf8_lossy(&produced.stdout).into_owned();
    if !produced.status.success() {
        return Err(format!(
            "the producer exited with {}: {produced_out}",
            produced.status
        ));
    }
    let fields = |line: &str| -> BTreeMap<String, String> {
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    let p = produced_out
        .lines()
        .find_map(|l| l.strip_prefix("PRODUCED "))
        .map(fields)
        .ok_or_else(|| format!("no PRODUCED line in {produced_out:?}"))?;
    let get = |m: &BTreeMap<String, String>, k: &str| -> u64 {
        m.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    let mut rows = Vec::new();
    for (c, mut child, mut out) in children {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest)
            .map_err(|e| format!("{c}: read its output: {e}"))?;
        let status = child.wait().map_err(|e| format!("{c}: {e}"))?;
        let r = rest
            .lines()
            .find_map(|l| l.strip_prefix("LATENCY "))
            .map(fields)
            .ok_or_else(|| format!("{c} exited with {status} and no LATENCY line: {rest:?}"))?;
        rows.push((c, r));
    }
    let broker_cpu = proc_cpu(&format!("/proc/{broker_pid}/stat")) - broker_cpu;
    println!(
        "producer: {} records in {:.2} s (librdkafka, linger.ms=0), {} failed, at most {:.1} ms \
         behind its schedule; broker CPU {broker_cpu:.2} s; load average after: {}",
        get(&p, "records"),
        get(&p, "micros") as f64 / 1e6,
        get(&p, "failed"),
        get(&p, "behind_max_us") as f64 / 1e3,
        loadavg()
    );
    println!(
        "send → delivery: the producer's clock before the send to the client's as it hands the \
         record over; append → delivery: from the broker's LogAppendTime (ms, so 0–1 ms high)"
    );
    println!();
    println!(
        "| client | received | measured | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | p99 vs librdkafka | append → delivery p50 / p99 / max ms |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let ms = |r: &BTreeMap<String, String>, k: &str| get(r, k) as f64 / 1e3;
    let base = rows
        .iter()
        .find(|(c, _)| *c == "librdkafka")
        .map(|(_, r)| ms(r, "p99"));
    for (c, r) in &rows {
        let vs = match base {
            Some(b) if *c != "librdkafka" => format!("{:.2}×", ms(r, "p99") / b.max(1e-3)),
            _ => String::new(),
        };
        println!(
            "| {c} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {vs} | {:.1} / {:.1} / {:.1} |",
            get(r, "received"),
            get(r, "measured"),
            ms(r, "p50"),
            ms(r, "p90"),
            ms(r, "p99"),
            ms(r, "p999"),
            ms(r, "max"),
            ms(r, "a_p50"),
            ms(r, "a_p99"),
            ms(r, "a_max"),
        );
    }
    for (c, r) in &rows {
        let batches = match get(r, "batches") {
            0 => String::new(),
            n => format!(", {n} batches"),
        };
        println!("{c}: CPU {:.2} s{batches}", get(r, "cpu_ms") as f64 / 1e3);
    }
    let _ = std::io::stdout().flush();
    if get(&p, "records") != records || get(&p, "failed") != 0 {
        return Err(format!(
            "the producer wrote {} of {records} records ({} failed)",
            get(&p, "records"),
            get(&p, "failed")
        ));
    }
    for (c, r) in &rows {
        if get(r, "received") != records {
            return Err(format!(
                "{c} received {} distinct records of {records} (first missing: {})",
                get(r, "received"),
                r.get("first_missing").map_or("?", String::as_str)
            ));
        }
    }
    Ok(())
}

/// The 1-, 5- and 15-minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The producer child: librdkafka's producer with `linger.ms=0`, record `i` sent at
/// `start + i / rate` (a sleep until then; no sleep when behind) to partition `i % P`, its send
/// time read just before the send.
fn produce(o: &Opts) -> Result<(), String> {
    use rdkafka::config::ClientConfig;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
    use rdkafka::ClientContext;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Deliveries(AtomicU64);
    impl ClientContext for Deliveries {}
    impl ProducerContext for Deliveries {
        type DeliveryOpaque = ();
        fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
            if let Err((e, _)) = r {
                eprintln!("e2e producer: a record failed: {e}");
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let p: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &o.bootstrap)
        .set("linger.ms", "0")
        .create_with_context(Deliveries(AtomicU64::new(0)))
        .map_err(|e| e.to_string())?;
    let records = o.rate * o.seconds;
    let mut value = vec![b'x'; o.value_size.max(LATENCY_HEADER)];
    let started = Instant::now();
    let mut behind = Duration::ZERO;
    for i in 0..records {
        let due = started + Duration::from_nanos(i * 1_000_000_000 / o.rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        } else {
            behind = behind.max(now - due);
        }
        value[..8].copy_from_slice(&i.to_le_bytes());
        value[8..16].copy_from_slice(&now_micros().to_le_bytes());
        let partition = (i % o.partitions.max(1) as u64) as i32;
        loop {
            let record = BaseRecord::to(&o.topic)
                .partition(partition)
                .payload(&value[..]);
            match p.send::<(), [u8]>(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    p.poll(Duration::from_millis(1))
                }
                Err((e, _)) => return Err(format!("send record {i}: {e}")),
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(30))
        .map_err(|e| format!("flush: {e}"))?;
    println!(
        "PRODUCED records={records} failed={} micros={} behind_max_us={}",
        p.context().0.load(Ordering::Relaxed),
        started.elapsed().as_micros(),
        behind.as_micros()
    );
    Ok(())
}

/// What a latency client saw: each sequence number once, and the delivery latency of each
/// record past the warm-up.
#[derive(Debug)]
struct Latencies {
    seen: Vec<bool>,
    received: u64,
    duplicates: u64,
    malformed: u64,
    warmup: u64,
    /// Send → delivery, µs, of each record past the warm-up.
    micros: Vec<u64>,
    /// Append (the broker's LogAppendTime, ms) → delivery, µs.
    appended: Vec<u64>,
    /// Batches (kdirect) the records came in.
    batches: u64,
}

impl Latencies {
    fn new(o: &Opts) -> Self {
        let records = o.rate * o.seconds;
        Latencies {
            seen: vec![false; records as usize],
            received: 0,
            duplicates: 0,
            malformed: 0,
            warmup: o.rate * o.warmup_secs,
            micros: Vec::with_capacity(records as usize),
            appended: Vec::with_capacity(records as usize),
            batches: 0,
        }
    }

    /// One record handed to user code at `now` (microseconds since the epoch), appended at
    /// `append_ms` (milliseconds since the epoch).
    #[inline]
    fn add(&mut self, value: Option<&[u8]>, append_ms: i64, now: u64) {
        let Some(v) = value.filter(|v| v.len() >= LATENCY_HEADER) else {
            self.malformed += 1;
            return;
        };
        let word = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().unwrap_or_default());
        let (seq, sent) = (word(0), word(8));
        match self.seen.get_mut(seq as usize) {
            None => self.malformed += 1,
            Some(true) => self.duplicates += 1,
            Some(s) => {
                *s = true;
                self.received += 1;
                if seq >= self.warmup {
                    self.micros.push(now.saturating_sub(sent));
                    let appended = u64::try_from(append_ms).unwrap_or(0) * 1000;
                    self.appended.push(now.saturating_sub(appended));
                }
            }
        }
    }

    fn complete(&self) -> bool {
        self.received == self.seen.len() as u64
    }

    /// How long a client waits for the last record: the production time and a minute.
    fn deadline(o: &Opts) -> Instant {
        Instant::now() + Duration::from_secs(o.seconds + 60)
    }
}

/// The client's `LATENCY` line: counts, and p50, p90, p99, p99.9 and max in microseconds
/// (nearest rank).
fn latency_report(l: &Latencies) -> Result<(), String> {
    let sorted = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    let (v, a) = (sorted(&l.micros), sorted(&l.appended));
    let rank = |v: &[u64], q: f64| -> u64 {
        if v.is_empty() {
            return 0;
        }
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    };
    let first_missing = l
        .seen
        .iter()
        .position(|s| !s)
        .map_or("none".to_owned(), |i| i.to_string());
    println!(
        "LATENCY received={} duplicates={} malformed={} measured={} p50={} p90={} p99={} \
         p999={} max={} a_p50={} a_p99={} a_max={} first_missing={first_missing} cpu_ms={} \
         batches={}",
        l.received,
        l.duplicates,
        l.malformed,
        v.len(),
        rank(&v, 0.5),
        rank(&v, 0.9),
        rank(&v, 0.99),
        rank(&v, 0.999),
        rank(&v, 1.0),
        rank(&a, 0.5),
        rank(&a, 0.99),
        rank(&a, 1.0),
        (proc_cpu("/proc/self/stat") * 1e3) as u64,
        l.batches,
    );
    Ok(())
}

/// Tells the orchestrator this client reads: the producer may start.
fn ready() {
    println!("READY");
    let _ = std::io::stdout().flush();
}

/// kdirect's stream with its defaults (the as-fast-as-possible trigger), from the earliest
/// offset of the empty topic; each record's latency taken as `for_each_record` hands it over.
fn kdirect_latency(o: &Opts) -> Result<Latencies, String> {
    runtime(o.kdirect_threads)?.block_on(async {
        let mut b = DirectStream::builder()
            .bootstrap(&o.bootstrap)
            .topics(&[&o.topic])
            .start(StartPolicy::Earliest);
        for (k, v) in &o.kdirect_set {
            b = b.set(k, v).map_err(|e| e.to_string())?;
        }
        let mut stream = b.build().await.map_err(|e| e.to_string())?;
        ready();
        let mut lat = Latencies::new(o);
        let deadline = tokio::time::Instant::from_std(Latencies::deadline(o));
        while !lat.complete() {
            let Ok(next) = tokio::time::timeout_at(deadline, stream.next_batch()).await else {
                break;
            };
            let Some(mut batch) = next.map_err(|e| e.to_string())? else {
                break;
            };
            stream
                .try_for_each_record(&mut batch, |_, r| {
                    lat.add(r.value(), r.timestamp(), now_micros());
                    Ok::<(), kdirect::Error>(())
                })
                .await
                .map_err(|e| e.to_string())?;
            stream.done(batch);
            lat.batches += 1;
        }
        Ok(lat)
    })
}

/// librdkafka's consumer with its defaults, subscribed in a group of its own with
/// `auto.offset.reset=earliest`; ready once the group assigned it every partition. Each
/// record's latency is taken as `poll` returns it.
fn rdkafka_latency(o: &Opts) -> Result<Latencies, String> {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;

    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &o.bootstrap)
        .set("group.id", format!("{}-librdkafka", o.topic))
        .set("auto.offset.reset", "earliest");
    for (k, v) in &o.rdkafka_set {
        cfg.set(k, v);
    }
    let c: BaseConsumer = cfg.create().map_err(|e| e.to_string())?;
    c.subscribe(&[&o.topic]).map_err(|e| e.to_string())?;
    let mut lat = Latencies::new(o);
    fn take(
        lat: &mut Latencies,
        m: Option<rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'_>>>,
    ) -> Result<(), String> {
        match m {
            Some(Ok(m)) => {
                let appended = m.timestamp().to_millis().unwrap_or(0);
                lat.add(m.payload(), appended, now_micros());
                Ok(())
            }
            Some(Err(e)) => Err(format!("librdkafka: {e}")),
            None => Ok(()),
        }
    }
    let joined_by = Instant::now() + Duration::from_secs(60);
    while c.assignment().map_or(0, |a| a.count()) < o.partitions as usize {
        if Instant::now() > joined_by {
            return Err("librdkafka: no assignment within 60 s".into());
        }
        take(&mut lat, c.poll(Duration::from_millis(100)))?;
    }
    ready();
    let deadline = Latencies::deadline(o);
    while !lat.complete() && Instant::now() < deadline {
        take(&mut lat, c.poll(Duration::from_millis(100)))?;
    }
    Ok(lat)
}

// ---------------------------------------------------------------------------------------------
// The lakehouse suite (issue 34 item 6): Kafka → Delta Lake, kdirect against Spark

/// `--suite lakehouse`: one topic on Apache Kafka (`--records` JSON values of `--value-size`
/// bytes, `--partitions` partitions; written once by librdkafka's producer into
/// `lakehouse-<records>-json<size>-<partitions>` and reused), landed as a Delta table by
/// `kdirect consume --until-latest --sink delta:DIR` and by Spark Structured Streaming's Delta
/// sink (`tests/spark/spark.sh delta stream`: the Kafka source into `format("delta")`,
/// Trigger.AvailableNow, local[*]), each in its own process under GNU time (wall, user + system
/// CPU, peak RSS of the process). Each table is then read by Spark (`SparkDelta check`), which
/// must find every offset of every partition exactly once. Needs the `delta` feature (the
/// `kdirect` binary is built with the bench's features) and Apache Kafka:
/// `KDIRECT_TEST_KAFKA`/`KDIRECT_TEST_KAFKA_CP` if set, else `tests/kafka/kafka.sh up`.
fn lakehouse_suite(o: &Opts) -> Result<(), String> {
    if !cfg!(feature = "delta") {
        return Err(
            "--suite lakehouse needs the Delta sink: cargo bench --bench e2e \
                    --features delta -- --suite lakehouse"
                .into(),
        );
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let (bootstrap, classpath) = match (
        std::env::var("KDIRECT_TEST_KAFKA"),
        std::env::var("KDIRECT_TEST_KAFKA_CP"),
    ) {
        (Ok(b), Ok(cp)) if !b.is_empty() && !cp.is_empty() => (b, cp),
        _ => {
            let (b, cp, _) = kafka_up()?;
            (b, cp)
        }
    };
    let spark = format!("{root}/tests/spark/spark.sh");
    let st = Command::new("bash")
        .args([&spark, "fetch"])
        .status()
        .map_err(|e| format!("{spark}: {e}"))?;
    if !st.success() {
        return Err(format!("{spark} fetch failed"));
    }
    let topic = format!(
        "lakehouse-{}-json{}-{}",
        o.records, o.value_size, o.partitions
    );
    let run = Opts {
        topic: topic.clone(),
        bootstrap: bootstrap.clone(),
        ..o.clone()
    };
    if create_unless_written(o, &bootstrap, &classpath, &topic)? {
        produce_json(&run)?;
    }
    let written = kafka_records(&bootstrap, &classpath, &topic).unwrap_or(0);
    if written != o.records {
        return Err(format!(
            "{topic} holds {written} records, not {}",
            o.records
        ));
    }
    let ends = end_offsets(&bootstrap, &classpath, &topic)?;
    warm_page_cache(&topic);
    let work = std::path::PathBuf::from(format!("{root}/target/lakehouse-bench"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let kdirect = env!("CARGO_BIN_EXE_kdirect");

    println!("{}", machine());
    println!(
        "topic {topic}: {} records, {} partitions, {} B JSON values, uncompressed; Apache Kafka at \
         {bootstrap}; load average before: {}",
        o.records,
        o.partitions,
        o.value_size,
        loadavg()
    );
    let mut rows: Vec<(String, Timed)> = Vec::new();
    for client in &o.clients {
        let table = work.join(format!("{client}-table"));
        let table_s = table.to_str().ok_or("a non-UTF-8 path")?.to_owned();
        let mut cmd = match client.as_str() {
            "kdirect" => {
                let mut c = Command::new(kdirect);
                c.args(["consume", "-b", &bootstrap, "-t", &topic])
                    .args(["--starting", "earliest", "--until-latest", "--sink"])
                    .arg(format!("delta:{table_s}"));
                c
            }
            "spark" => {
                let ckpt = work.join("spark-checkpoint");
                let mut c = Command::new("bash");
                c.args([&spark, "delta", "stream", &bootstrap, &topic, "0"])
                    .arg(&ckpt)
                    .arg(&table)
                    // What a Spark user gets: every core, Spark's default driver memory (1g),
                    // the JVM's default collector and JIT.
                    .env("KDIRECT_SPARK_MASTER", "local[*]")
                    .env("KDIRECT_SPARK_JVM_OPTS", "-Xmx1g");
                c
            }
            other => return Err(format!("unknown lakehouse client {other} (kdirect, spark)")),
        };
        eprintln!("e2e: lakehouse {client}: landing {topic} in {table_s}");
        let timed = time_process(&mut cmd).map_err(|e| format!("{client}: {e}"))?;
        eprintln!(
            "e2e: lakehouse {client}: {:.2} s wall, {:.2} s CPU, peak RSS {:.1} MiB{}",
            timed.wall,
            timed.cpu,
            timed.rss_kib as f64 / 1024.0,
            timed
                .inner_secs
                .map_or(String::new(), |s| format!(", query {s:.2} s"))
        );
        check_table(&spark, &table, &ends).map_err(|e| format!("{client}'s table: {e}"))?;
        eprintln!("e2e: lakehouse {client}: Spark reads every offset once");
        rows.push((client.clone(), timed));
    }
    let reference = rows
        .iter()
        .find(|(c, _)| c == "spark")
        .map(|(_, t)| t.clone());
    println!(
        "| client | records | wall s | records/s | CPU s | CPU s / M records | peak RSS MiB | \
         records/s vs Spark | CPU vs Spark |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (client, t) in &rows {
        let rate = o.records as f64 / t.wall;
        let (vs_rate, vs_cpu) = match &reference {
            Some(s) => (
                format!("{:.1}×", rate / (o.records as f64 / s.wall)),
                format!("1/{:.1}", s.cpu / t.cpu),
            ),
            None => (String::new(), String::new()),
        };
        println!(
            "| {client}{} | {} | {:.2} | {:.0} | {:.2} | {:.2} | {:.1} | {vs_rate} | {vs_cpu} |",
            t.inner_secs
                .map_or(String::new(), |s| format!(" (query alone {s:.2} s)")),
            o.records,
            t.wall,
            rate,
            t.cpu,
            t.cpu / (o.records as f64 / 1e6),
            t.rss_kib as f64 / 1024.0,
        );
    }
    println!("load average after: {}", loadavg());
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// A process's cost as GNU time measures it.
#[derive(Debug, Clone)]
struct Timed {
    wall: f64,
    /// User + system CPU seconds.
    cpu: f64,
    rss_kib: u64,
    /// The `secs=` of a `RESULT` line on stdout (Spark's query alone, after the JVM started).
    inner_secs: Option<f64>,
}

/// Runs `cmd` under `/usr/bin/time` (GNU time: wall, user + system CPU and peak RSS of the
/// process, the JVM included, as a user pays them).
fn time_process(cmd: &mut Command) -> Result<Timed, String> {
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "TIMED %e %U %S %M"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    let out = timed
        .output()
        .map_err(|e| format!("/usr/bin/time (GNU time): {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("exited with {}: {stderr}", out.status));
    }
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("TIMED "))
        .ok_or_else(|| format!("no GNU time line in {stderr:?}"))?;
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|v| v.parse().map_err(|e| format!("time's {line:?}: {e}")))
        .collect::<Result<_, String>>()?;
    let [wall, user, sys, rss] = f[..] else {
        return Err(format!("time's {line:?}"));
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let inner_secs = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|r| {
            r.split_whitespace()
                .find_map(|kv| kv.strip_prefix("secs="))
                .and_then(|s| s.parse().ok())
        });
    Ok(Timed {
        wall,
        cpu: user + sys,
        rss_kib: rss as u64,
        inner_secs,
    })
}

/// Each partition's end offset (KTool end-offsets).
fn end_offsets(bootstrap: &str, classpath: &str, topic: &str) -> Result<Vec<i64>, String> {
    let text = ktool(
        classpath,
        &["end-offsets", "--bootstrap", bootstrap, "--topic", topic],
    )?;
    let mut ends = BTreeMap::new();
    for l in text.lines() {
        if let Some((p, o)) = l.split_once(' ') {
            let p: i32 = p.parse().map_err(|e| format!("end-offsets {l:?}: {e}"))?;
            ends.insert(p, o.parse().map_err(|e| format!("end-offsets {l:?}: {e}"))?);
        }
    }
    Ok(ends.into_values().collect())
}

/// Spark reads the table at `table` (`SparkDelta check`): each partition must hold offsets
/// `0..end` exactly once (rows = distinct offsets = end, min 0, max end - 1).
fn check_table(spark: &str, table: &std::path::Path, ends: &[i64]) -> Result<(), String> {
    let out = Command::new("bash")
        .args([spark, "delta", "check"])
        .arg(table)
        .env("KDIRECT_SPARK_MASTER", "local[*]")
        .env("KDIRECT_SPARK_JVM_OPTS", "-Xmx1g")
        .output()
        .map_err(|e| format!("{spark}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "Spark's check failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut seen = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = l.strip_prefix("PART ") else {
            continue;
        };
        let f: Vec<i64> = rest
            .split(' ')
            .map(|v| v.parse().map_err(|e| format!("{l:?}: {e}")))
            .collect::<Result<_, String>>()?;
        seen.insert(f[0], (f[1], f[2], f[3], f[4]));
    }
    for (p, &end) in ends.iter().enumerate() {
        let want = (end, end, 0, end - 1);
        let got = seen.remove(&(p as i64));
        if end > 0 && got != Some(want) {
            return Err(format!(
                "partition {p}: (rows, distinct offsets, min, max) = {got:?}, not {want:?}"
            ));
        }
    }
    if !seen.is_empty() {
        return Err(format!("partitions the topic does not have: {seen:?}"));
    }
    Ok(())
}

/// Writes `o.records` JSON values of exactly `o.value_size` bytes into `o.topic` with
/// librdkafka's producer, round-robin over `o.partitions` partitions (record `i` to partition
/// `i % P`), no key, uncompressed, batched (`linger.ms=20`, `batch.size=1000000`).
fn produce_json(o: &Opts) -> Result<(), String> {
    use rdkafka::config::ClientConfig;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
    use rdkafka::ClientContext;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Failures(AtomicU64);
    impl ClientContext for Failures {}
    impl ProducerContext for Failures {
        type DeliveryOpaque = ();
        fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
            if r.is_err() {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    eprintln!(
        "e2e: writing {} JSON records into {} with librdkafka's producer",
        o.records, o.topic
    );
    let p: BaseProducer<Failures> = ClientConfig::new()
        .set("bootstrap.servers", &o.bootstrap)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("acks", "all")
        .set("queue.buffering.max.kbytes", "262144")
        .create_with_context(Failures(AtomicU64::new(0)))
        .map_err(|e| e.to_string())?;
    let mut value = Vec::with_capacity(o.value_size + 64);
    for i in 0..o.records {
        let partition = (i % o.partitions.max(1) as u64) as i32;
        json_value(&mut value, i, partition, o.value_size);
        loop {
            let record = BaseRecord::to(&o.topic)
                .partition(partition)
                .payload(&value[..]);
            match p.send::<(), [u8]>(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    p.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(format!("send record {i}: {e}")),
            }
        }
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(300))
        .map_err(|e| format!("flush: {e}"))?;
    let failed = p.context().0.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(format!("{failed} records were not delivered"));
    }
    Ok(())
}

/// Record `i`'s value: a JSON object of exactly `size` bytes (padded with its `pad` field) when
/// `size` allows, e.g. `{"id":42,"partition":2,"user":"u42","event":"click","ts":1700000042000,"pad":"xxxx"}`.
fn json_value(out: &mut Vec<u8>, i: u64, partition: i32, size: usize) {
    const EVENTS: [&str; 4] = ["click", "view", "purchase", "scroll"];
    out.clear();
    let _ = write!(
        out,
        "{{\"id\":{i},\"partition\":{partition},\"user\":\"u{}\",\"event\":\"{}\",\"ts\":{},\"pad\":\"",
        i % 100_000,
        EVENTS[(i % 4) as usize],
        1_700_000_000_000u64 + i
    );
    while out.len() + 2 < size {
        out.push(b'x');
    }
    out.extend_from_slice(b"\"}");
}
