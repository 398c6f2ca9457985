//! Kill tests: `kdirect consume` is killed with SIGKILL at random moments, at least 20 times,
//! while it consumes from the fake broker (120k records, and more arriving during the kill
//! phase), and restarted until it finishes.
//! Checkpoint + file sink and SQL + sink table must end with every offset exactly once; the
//! Kafka group store (at-least-once) must lose nothing. The `*_against_kafka` tests run the
//! same loop against Apache Kafka, with Kafka's Java producer writing throughout.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::real_kafka::Kafka;
use crate::support::{service, tempdir, CutProxy};
use bytes::Bytes;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

const PARTITIONS: i32 = 4;
const PER_PARTITION: i64 = 30_000;
const KILLS: usize = 12;

/// Where the records come from: kdirect's fake broker, or a topic on Apache Kafka.
enum Source {
    Fake(FakeCluster),
    Kafka { kafka: Kafka, topic: String },
}

impl Source {
    fn bootstrap(&self) -> String {
        match self {
            Source::Fake(f) => f.bootstrap(),
            Source::Kafka { kafka, .. } => kafka.bootstrap.clone(),
        }
    }

    fn topic(&self) -> &str {
        match self {
            Source::Fake(_) => "k",
            Source::Kafka { topic, .. } => topic,
        }
    }

    /// Each partition's end offset (the high watermark).
    fn ends(&self) -> Vec<i64> {
        match self {
            Source::Fake(f) => (0..PARTITIONS)
                .map(|p| f.high_watermark("k", p).unwrap())
                .collect(),
            Source::Kafka { kafka, topic } => kafka.end_offsets(topic),
        }
    }

    /// Keeps records arriving until `stop` is set.
    fn write_until(&self, stop: &AtomicBool) {
        match self {
            Source::Fake(fake) => {
                while !stop.load(Ordering::Relaxed) {
                    for p in 0..PARTITIONS {
                        let base = fake.high_watermark("k", p).unwrap();
                        // At most three times as many again as the topic began with: the
                        // last run reads what the killed runs left, and a loop's kills can
                        // take a minute or two (killed runs that find nothing to read prove
                        // little, so the writer goes on for that long).
                        if base < 4 * PER_PARTITION {
                            append(fake, p, base, base + 100);
                        }
                    }
                    // The writer's pace (100 records per partition every 50 ms), not a wait.
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Source::Kafka { kafka, topic } => {
                let mut producer = kafka.spawn_tool(
                    "produce",
                    &[
                        "--topic",
                        topic,
                        "--partitions",
                        &PARTITIONS.to_string(),
                        "--from",
                        &(PARTITIONS as i64 * PER_PARTITION).to_string(),
                        "--value-size",
                        "80",
                        // 2,000 records/s: the last run reads what the killed runs left,
                        // and a loop's kills can take a minute or two.
                        "--rate",
                        "2000",
                        "--keep-going",
                    ],
                );
                // Polls the stop flag; the producer writes meanwhile.
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                producer.kill().unwrap();
                producer.wait().unwrap();
            }
        }
    }
}

/// A topic of `PARTITIONS` × `PER_PARTITION` records on Apache Kafka, written by Kafka's Java
/// producer (lz4).
fn kafka_source(test: &str) -> Option<Source> {
    let kafka = Kafka::single(test)?;
    let topic = crate::real_kafka::topic("kill");
    kafka.create(&topic, PARTITIONS, &[]);
    kafka.produce(
        &topic,
        PARTITIONS,
        (PARTITIONS as i64 * PER_PARTITION) as u64,
        &["--value-size", "80", "--codec", "lz4"],
    );
    Some(Source::Kafka { kafka, topic })
}

fn fake() -> Source {
    let fake = FakeCluster::builder()
        .brokers(2)
        .topic("k", PARTITIONS)
        .start()
        .unwrap();
    for p in 0..PARTITIONS {
        let mut o = 0;
        while o < PER_PARTITION {
            append(&fake, p, o, o + 500);
            o += 500;
        }
    }
    Source::Fake(fake)
}

/// A small deterministic generator (seeded from the clock, printed for reruns).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

/// `kdirect consume` from the earliest offsets in batches of 200 (unless `extra` sets
/// `--max-offsets-per-batch`); with `ending`, up to the
/// ends seen at its start (`--until-latest`), else on and on.
fn spawn(boot: &str, topic: &str, extra: &[&str], ending: bool) -> Child {
    spawn_env(boot, topic, extra, ending, &[])
}

/// [`spawn`] with environment variables for the consumer (a store's settings).
fn spawn_env(
    boot: &str,
    topic: &str,
    extra: &[&str],
    ending: bool,
    envs: &[(&str, &str)],
) -> Child {
    let mut args = vec!["consume", "-b", boot, "-t", topic, "--starting", "earliest"];
    // Batches of 200 unless the test asks for its own size.
    if !extra.contains(&"--max-offsets-per-batch") {
        args.extend_from_slice(&["--max-offsets-per-batch", "200"]);
    }
    if ending {
        args.push("--until-latest");
    }
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(&args)
        // Each commit logged (the loops count the kills that came after one).
        .env("KDIRECT_LOG", "warn,kdirect::commit=debug")
        .envs(envs.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Kills the consumer at random points until `KILLS` kills happened, then lets it finish.
/// Records keep arriving during the kill phase (so a fast consumer always has work); the
/// killed runs have no ending (each would read on forever), and the kill window adapts (see
/// [`run_with_kills_from`]) — the test does not depend on how fast the machine is, and a
/// quarter of the kills at least come after a commit. Returns each partition's end offset at
/// the end (the last run reads with `--until-latest` after the writer stopped).
fn run_with_kills(name: &str, source: &Source, extra: &[&str]) -> Vec<i64> {
    run_with_kills_under(name, source, extra, false, &[])
}

/// [`run_with_kills`] with environment variables for every run, for a store whose runs take
/// seconds to start and to commit (object storage, an emulator's Delta table): each kill
/// falls within the first `within_ms` of a run, instead of the first 100 ms, which would kill
/// every run before its first commit.
fn run_with_kills_within(
    name: &str,
    source: &Source,
    extra: &[&str],
    envs: &[(&str, &str)],
    within_ms: u64,
) -> Vec<i64> {
    run_with_kills_from(name, source, extra, false, envs, within_ms)
}

/// [`run_with_kills`], the killed runs with an ending (`--until-latest`) or without one (they
/// never finish on their own; the last run, with the ending, does), with environment variables
/// for every run.
fn run_with_kills_under(
    name: &str,
    source: &Source,
    extra: &[&str],
    ending: bool,
    envs: &[(&str, &str)],
) -> Vec<i64> {
    run_with_kills_from(name, source, extra, ending, envs, 100)
}

/// [`run_with_kills_under`], each kill within the first `within_ms` of a run at first: the
/// window doubles after a kill that came before the run's first commit, grows to twice the
/// time a run took to its first commit (up to 30 s), and halves when a run finishes before
/// its kill, so that kills land on both sides of the first commit whatever the machine's
/// speed; at least a quarter of them must come after one.
fn run_with_kills_from(
    name: &str,
    source: &Source,
    extra: &[&str],
    ending: bool,
    envs: &[(&str, &str)],
    within_ms: u64,
) -> Vec<i64> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("{name}: seed {seed}");
    let boot = source.bootstrap();
    let topic = source.topic();
    let mut rng = Lcg(seed);
    let mut kills = 0;
    // Kills that came after the run's first commit: a loop whose kills all fall before it
    // (the store slow to open, the window too short) proves nothing about recovery.
    let mut after_commit = 0;
    let mut hi = within_ms;
    let deadline = Instant::now() + Duration::from_secs(300);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| source.write_until(&stop));
        // Stops the writer when the loop ends, also on a failed assertion (the scope waits
        // for the writer, so a panic would otherwise hang the test instead of failing it).
        let _stop = StopOnDrop(&stop);
        while kills < KILLS {
            assert!(
                Instant::now() < deadline,
                "{name}: only {kills} kills before the deadline"
            );
            let started = Instant::now();
            let mut child = spawn_env(&boot, topic, extra, ending, envs);
            // Drained while it runs (a full pipe would stall the consumer), noting when the
            // first commit's line came.
            let stderr = child.stderr.take().unwrap();
            let drain = std::thread::spawn(move || {
                let (mut text, mut first_commit) = (String::new(), None);
                for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
                    let Ok(line) = line else { break };
                    if first_commit.is_none() && committed_once(&line) {
                        first_commit = Some(started.elapsed());
                    }
                    text.push_str(&line);
                    text.push('\n');
                }
                (text, first_commit)
            });
            // The random moment of the kill: the thing under test, not a wait.
            let at = rng.next(1, hi + 1);
            std::thread::sleep(Duration::from_millis(at));
            if child.try_wait().unwrap().is_some() {
                let status = child.wait().unwrap();
                let (stderr, _) = drain.join().unwrap();
                assert!(status.success(), "{name}: {stderr}");
                hi = (hi / 2).max(1);
                continue;
            }
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            let first_commit = drain.join().unwrap().1;
            println!("{name}: kill at {at} ms (window {hi} ms), first commit at {first_commit:?}");
            match first_commit {
                // Half the kills after the first commit, if runs keep that pace.
                Some(t) => {
                    after_commit += 1;
                    hi = hi.max((2 * t.as_millis() as u64).min(30_000));
                }
                None => hi = (hi * 2).min(30_000),
            }
            kills += 1;
        }
        // `_stop` stops the writer here (and on a panic).
    });
    // Let it finish: everything produced up to now.
    let out = spawn_env(&boot, topic, extra, true, envs)
        .wait_with_output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{name}: {kills} kills, {after_commit} of them after the run's first commit");
    assert!(
        after_commit * 4 >= kills,
        "{name}: only {after_commit} of {kills} kills came after a commit: the loop proves \
         little about recovery (widen its kill window)"
    );
    // --until-latest read up to the ends seen at its start, after the writer stopped.
    source.ends()
}

/// Whether a consumer's stderr (`KDIRECT_LOG=…,kdirect::commit=debug`) shows a commit.
pub(crate) fn committed_once(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.contains("DEBUG batch ") && l.contains(" committed"))
}

/// Sets the flag when dropped, also while unwinding.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn append(fake: &FakeCluster, p: i32, from: i64, to: i64) {
    let recs: Vec<FakeRecord> = (from..to)
        .map(|i| FakeRecord::value(Bytes::from(format!("{p}:{i}:{}", "x".repeat(80)))))
        .collect();
    fake.append_records("k", p, &recs, Codec::Lz4).unwrap();
}

/// Every (partition, offset) from the sink files, counted.
fn read_files(dir: &Path) -> BTreeMap<(i32, i64), u32> {
    let mut seen = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
            let key = (
                v["partition"].as_i64().unwrap() as i32,
                v["offset"].as_i64().unwrap(),
            );
            *seen.entry(key).or_insert(0) += 1;
        }
    }
    seen
}

fn assert_all(seen: &BTreeMap<(i32, i64), u32>, ends: &[i64], exactly_once: bool, name: &str) {
    assert_eq!(ends.len(), PARTITIONS as usize);
    for (p, &n) in (0..PARTITIONS).zip(ends) {
        for o in 0..n {
            match seen.get(&(p, o)) {
                None => panic!("{name}: k-{p} offset {o} lost"),
                Some(n) if exactly_once && *n != 1 => {
                    panic!("{name}: k-{p} offset {o} seen {n} times")
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        seen.len() as i64,
        ends.iter().sum::<i64>(),
        "{name}: records outside the topic"
    );
}

#[test]
fn checkpoint_and_file_sink_survive_kill_9_exactly_once() {
    let fake = fake();
    let tmp = tempdir("ckpt");
    let ckpt = format!("checkpoint:{}", tmp.join("ckpt").display());
    let out = tmp.join("out");
    let n = run_with_kills(
        "checkpoint",
        &fake,
        &["--store", &ckpt, "--output-dir", out.to_str().unwrap()],
    );
    assert_all(&read_files(&out), &n, true, "checkpoint + file sink");
    // No file being written is left looking finished.
    for e in std::fs::read_dir(&out).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(n.ends_with(".jsonl") || n.contains(".tmp"), "{n}");
    }
}

/// Issue 34: `--sink parquet:DIR` alone (its log is the store) through the kill -9s: every
/// offset in the visible Parquet files once, read back by the parquet crate's reader and by
/// pyarrow.dataset (when KDIRECT_TEST_PYARROW is set).
#[test]
fn parquet_sink_survives_kill_9_exactly_once() {
    let test = "parquet_sink_survives_kill_9_exactly_once";
    parquet_sink_survives_kill_9(&fake(), "parquet", test);
}

/// The same against Apache Kafka, Kafka's Java producer writing (issue 34 item 5).
#[test]
fn parquet_sink_survives_kill_9_against_kafka() {
    let test = "parquet_sink_survives_kill_9_against_kafka";
    if let Some(source) = kafka_source(test) {
        parquet_sink_survives_kill_9(&source, "parquet (Kafka)", test);
    }
}

fn parquet_sink_survives_kill_9(source: &Source, name: &str, test: &str) {
    let tmp = tempdir("parquet-kill");
    let out = tmp.join("lake");
    let sink = format!("parquet:{}", out.display());
    let n = run_with_kills(
        name,
        source,
        &["--sink", &sink, "--parquet-compression", "snappy"],
    );
    let rows = crate::lakehouse::parquet_rows(&out);
    assert_all(&rows, &n, true, &format!("{name} (parquet crate)"));
    if let Some((_, seen)) = crate::lakehouse::pyarrow_rows(&out, test) {
        assert_all(&seen, &n, true, &format!("{name} (pyarrow)"));
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Issue 34 on object storage: `--sink parquet:s3://BUCKET/PREFIX` alone (moto) through the
/// kill -9s: every offset once in what pyarrow.dataset (its own S3 client) sees under the
/// prefix.
#[test]
fn parquet_sink_on_s3_survives_kill_9_exactly_once() {
    let test = "parquet_sink_on_s3_survives_kill_9_exactly_once";
    if let Some(t) = crate::lakehouse_object::s3(test) {
        parquet_sink_on_survives_kill_9(&fake(), &t, "parquet on s3", test);
    }
}

/// The same against Apache Kafka, Kafka's Java producer writing (issue 34 item 5).
#[test]
fn parquet_sink_on_s3_survives_kill_9_against_kafka() {
    let test = "parquet_sink_on_s3_survives_kill_9_against_kafka";
    let Some(t) = crate::lakehouse_object::s3(test) else {
        return;
    };
    if let Some(source) = kafka_source(test) {
        parquet_sink_on_survives_kill_9(&source, &t, "parquet on s3 (Kafka)", test);
    }
}

/// The same on Azure Blob Storage (Azurite), read back by pyarrow's own Azure client.
#[test]
fn parquet_sink_on_azure_survives_kill_9_exactly_once() {
    let test = "parquet_sink_on_azure_survives_kill_9_exactly_once";
    if let Some(t) = crate::lakehouse_object::azure(test) {
        parquet_sink_on_survives_kill_9(&fake(), &t, "parquet on azure", test);
    }
}

/// `--sink parquet:<target>/PREFIX` through the kill -9s, read back by pyarrow.dataset.
fn parquet_sink_on_survives_kill_9(
    source: &Source,
    t: &crate::lakehouse_object::Target,
    name: &str,
    test: &str,
) {
    let prefix = crate::support::unique("pq-kill");
    let sink = format!("parquet:{}/{prefix}", t.root);
    let envs: Vec<(&str, &str)> = t.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Kills within 1.5 s of a start (a run reads its log from the emulator before its first
    // batch), batches of 2000 offsets (each a file upload and a log commit).
    let n = run_with_kills_within(
        name,
        source,
        &["--sink", &sink, "--max-offsets-per-batch", "2000"],
        &envs,
        1500,
    );
    if let Some((_, seen, _)) = crate::lakehouse_object::pyarrow_rows(t, &prefix, test) {
        assert_all(&seen, &n, true, &format!("{name} (pyarrow)"));
    }
}

/// Issue 34: `--sink delta:PATH` alone (the table is the store) through the kill -9s: every
/// offset once in the table, as delta-rs reads it and as the Python `deltalake` package reads
/// it (when it is installed), and each partition's txn at its last offset.
#[cfg(feature = "delta")]
#[test]
fn delta_sink_survives_kill_9_exactly_once() {
    let test = "delta_sink_survives_kill_9_exactly_once";
    delta_sink_survives_kill_9(&fake(), "delta", test);
}

/// The same against Apache Kafka, Kafka's Java producer writing (issue 34 item 5).
#[cfg(feature = "delta")]
#[test]
fn delta_sink_survives_kill_9_against_kafka() {
    let test = "delta_sink_survives_kill_9_against_kafka";
    if let Some(source) = kafka_source(test) {
        delta_sink_survives_kill_9(&source, "delta (Kafka)", test);
    }
}

#[cfg(feature = "delta")]
fn delta_sink_survives_kill_9(source: &Source, name: &str, test: &str) {
    let tmp = tempdir("delta-kill");
    let out = tmp.join("table");
    let sink = format!("delta:{}", out.display());
    // Batches of 1000 offsets: each batch is a Delta commit (tens of ms here).
    let n = run_with_kills(
        name,
        source,
        &["--sink", &sink, "--max-offsets-per-batch", "1000"],
    );
    let app_ids: Vec<String> = (0..PARTITIONS)
        .map(|p| format!("{}-{p}", source.topic()))
        .collect();
    let app_ids: Vec<&str> = app_ids.iter().map(String::as_str).collect();
    let last: Vec<Option<i64>> = n.iter().map(|&e| Some(e - 1)).collect();
    let (rows, txns) = crate::lakehouse::delta_rows(&out, &app_ids);
    assert_all(&rows, &n, true, &format!("{name} (delta-rs)"));
    assert_eq!(txns, last, "{name}: txn versions");
    if let Some(python) = crate::lakehouse::delta_python(test) {
        let (_, seen, txns) = crate::lakehouse::deltalake_rows(&python, &out, &app_ids);
        assert_all(&seen, &n, true, &format!("{name} (Python deltalake)"));
        assert_eq!(txns, last, "{name} (Python deltalake): txn versions");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Issue 34 on object storage: `--sink delta:s3://BUCKET/PREFIX` alone (moto; the table is the
/// store) through the kill -9s: every offset once in the table as the Python `deltalake`
/// package (its own S3 client) reads it, and each partition's txn at its last offset.
#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_s3_survives_kill_9_exactly_once() {
    let test = "delta_sink_on_s3_survives_kill_9_exactly_once";
    if let Some(t) = crate::lakehouse_object::s3(test) {
        delta_sink_on_survives_kill_9(&t, "delta on s3", test);
    }
}

/// The same on Azure Blob Storage (Azurite).
#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_azure_survives_kill_9_exactly_once() {
    let test = "delta_sink_on_azure_survives_kill_9_exactly_once";
    if let Some(t) = crate::lakehouse_object::azure(test) {
        delta_sink_on_survives_kill_9(&t, "delta on azure", test);
    }
}

/// `--sink delta:<target>/PREFIX` through the kill -9s, read back by Python `deltalake`.
#[cfg(feature = "delta")]
fn delta_sink_on_survives_kill_9(t: &crate::lakehouse_object::Target, name: &str, test: &str) {
    let Some(python) = crate::lakehouse::delta_python(test) else {
        return;
    };
    let fake = fake();
    let url = format!("{}/{}", t.root, crate::support::unique("delta-kill"));
    let sink = format!("delta:{url}");
    let envs: Vec<(&str, &str)> = t.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // A Delta commit on an emulator costs about a second (a debug build, the log listed and
    // read back at each): batches of 200 would take the rest of the run as hundreds of
    // commits, and kills within 100 ms of a start would all fall before the first commit.
    let n = run_with_kills_within(
        name,
        &fake,
        &["--sink", &sink, "--max-offsets-per-batch", "20000"],
        &envs,
        3000,
    );
    let app_ids: Vec<String> = (0..PARTITIONS).map(|p| format!("k-{p}")).collect();
    let app_ids: Vec<&str> = app_ids.iter().map(String::as_str).collect();
    let (seen, txns) = crate::lakehouse_object::deltalake_rows(&python, t, &url, &app_ids);
    assert_all(&seen, &n, true, &format!("{name} (Python deltalake)"));
    let last: Vec<Option<i64>> = n.iter().map(|&e| Some(e - 1)).collect();
    assert_eq!(txns, last, "{name}: txn versions");
}

/// The trigger decides when batches start, not how they are logged and committed: the
/// checkpoint with the file sink stays exactly-once through kill -9 with the
/// as-fast-as-possible trigger and no ending (each killed run would read on forever) and with
/// a processing-time trigger.
#[test]
fn checkpoint_and_file_sink_survive_kill_9_under_every_trigger() {
    for (trigger, ending) in [
        ("as-fast-as-possible", false),
        ("processing-time=5", false),
        ("processing-time=5", true),
    ] {
        let fake = fake();
        let tmp = tempdir("ckpt-trigger");
        let ckpt = format!("checkpoint:{}", tmp.join("ckpt").display());
        let out = tmp.join("out");
        let name = format!("checkpoint, {trigger}, ending {ending}");
        let n = run_with_kills_under(
            &name,
            &fake,
            &[
                "--trigger",
                trigger,
                "--store",
                &ckpt,
                "--output-dir",
                out.to_str().unwrap(),
            ],
            ending,
            &[],
        );
        assert_all(&read_files(&out), &n, true, &name);
    }
}

/// `consume --store … --output FILE` is exactly-once through kill -9: each run cuts FILE back
/// to what the store covers (FILE.kdirect-cover) before appending, so a batch written but not
/// committed is neither lost nor written twice. With the checkpoint and with the Kafka group
/// store (which logs no plans: the cut is by positions).
#[test]
fn the_output_file_is_cut_back_to_the_store_through_kill_9_exactly_once() {
    for store in ["checkpoint", "kafka"] {
        let fake = fake();
        let tmp = tempdir(&format!("cover-{store}"));
        let out = tmp.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let file = out.join("records.jsonl");
        let spec = match store {
            "checkpoint" => format!("checkpoint:{}", tmp.join("ckpt").display()),
            _ => "kafka".to_owned(),
        };
        let group = format!("cover-{}", std::process::id());
        let n = run_with_kills(
            store,
            &fake,
            &[
                "--store",
                &spec,
                "--group",
                &group,
                "--output",
                file.to_str().unwrap(),
            ],
        );
        assert_all(
            &read_files(&out),
            &n,
            true,
            &format!("{store} + output file"),
        );
    }
}

#[test]
fn kafka_group_and_file_sink_lose_nothing() {
    let fake = fake();
    let tmp = tempdir("kafka");
    let out = tmp.join("out");
    let group = format!("kill-{}", std::process::id());
    let n = run_with_kills(
        "kafka",
        &fake,
        &[
            "--store",
            "kafka",
            "--group",
            &group,
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), &n, false, "kafka group + file sink");
}

#[test]
fn sqlite_sink_table_survives_kill_9_exactly_once() {
    let fake = fake();
    let tmp = tempdir("sqlite");
    let url = format!("sqlite:{}", tmp.join("offsets.db").display());
    let n = run_with_kills(
        "sqlite",
        &fake,
        &["--store", &url, "--group", "g", "--sink-table", "records"],
    );
    assert_sql(&url, "records", &n);
}

#[test]
fn postgres_sink_table_survives_kill_9_exactly_once() {
    let Some(url) = service(
        "KDIRECT_TEST_POSTGRES",
        "postgres_sink_table_survives_kill_9_exactly_once",
    ) else {
        return;
    };
    let fake = fake();
    let table = format!("kill_{}", std::process::id());
    let n = run_with_kills(
        "postgres",
        &fake,
        &["--store", &url, "--group", &table, "--sink-table", &table],
    );
    assert_sql(&url, &table, &n);
}

#[test]
fn mysql_sink_table_survives_kill_9_exactly_once() {
    let Some(url) = service(
        "KDIRECT_TEST_MYSQL",
        "mysql_sink_table_survives_kill_9_exactly_once",
    ) else {
        return;
    };
    let fake = fake();
    let table = format!("kill_{}", std::process::id());
    let n = run_with_kills(
        "mysql",
        &fake,
        &["--store", &url, "--group", &table, "--sink-table", &table],
    );
    assert_sql(&url, &table, &n);
}

fn assert_sql(url: &str, table: &str, n: &[i64]) {
    let rows: Vec<(i32, i64)> = crate::support::rt().block_on(async {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(url).await.unwrap();
        let q = format!("SELECT partition_id, record_offset FROM {table}");
        let rows: Vec<(i32, i64)> = sqlx::query_as(&q).fetch_all(&pool).await.unwrap();
        if !url.starts_with("sqlite") {
            sqlx::query(&format!("DROP TABLE {table}"))
                .execute(&pool)
                .await
                .unwrap();
        }
        rows
    });
    let mut seen = BTreeMap::new();
    for (p, o) in rows {
        *seen.entry((p, o)).or_insert(0) += 1;
    }
    assert_all(&seen, n, true, url);
}

#[test]
fn redis_and_file_sink_lose_nothing() {
    let Some(url) = service("KDIRECT_TEST_REDIS", "redis_and_file_sink_lose_nothing") else {
        return;
    };
    let fake = fake();
    let tmp = tempdir("redis");
    let out = tmp.join("out");
    let group = format!(
        "kill-{}-{}",
        std::process::id(),
        tmp.file_name().unwrap().to_string_lossy()
    );
    let n = run_with_kills(
        "redis",
        &fake,
        &[
            "--store",
            &url,
            "--group",
            &group,
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), &n, false, "redis + file sink");
}

/// The ZooKeeper store logs each plan before its batch runs, as the checkpoint does, so with
/// the idempotent file sink a kill -9 at any moment loses and doubles nothing.
#[test]
fn zookeeper_and_file_sink_survive_kill_9_exactly_once() {
    let test = "zookeeper_and_file_sink_survive_kill_9_exactly_once";
    let Some(url) = service("KDIRECT_TEST_ZOOKEEPER", test) else {
        return;
    };
    let fake = fake();
    let tmp = tempdir("zk");
    let out = tmp.join("out");
    let store = format!("{url}/kill-{}", tmp.file_name().unwrap().to_string_lossy());
    let n = run_with_kills(
        "zookeeper",
        &fake,
        &[
            "--store",
            &store,
            "--group",
            "kill",
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), &n, true, "zookeeper + file sink");
}

/// A checkpoint on object storage (an S3-compatible server) with the file sink: the
/// conditional create of each batch object keeps the checkpoint's exactly-once through kill -9.
#[test]
fn object_store_checkpoint_and_file_sink_survive_kill_9_exactly_once() {
    let test = "object_store_checkpoint_and_file_sink_survive_kill_9_exactly_once";
    let Some(s3) = service("KDIRECT_TEST_S3", test) else {
        return;
    };
    let (endpoint, bucket) = s3.rsplit_once('/').unwrap();
    let fake = fake();
    let tmp = tempdir("s3");
    let out = tmp.join("out");
    let ckpt = format!(
        "checkpoint:s3://{bucket}/kill-{}",
        tmp.file_name().unwrap().to_string_lossy()
    );
    let envs = [
        ("AWS_ENDPOINT", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    // Kills within 1 s of a start (a run reads the checkpoint from moto before its first
    // batch, so kills within 100 ms would all fall before it), batches of 2000 offsets.
    let n = run_with_kills_within(
        "s3 checkpoint",
        &fake,
        &[
            "--store",
            &ckpt,
            "--output-dir",
            out.to_str().unwrap(),
            "--max-offsets-per-batch",
            "2000",
        ],
        &envs,
        1000,
    );
    assert_all(&read_files(&out), &n, true, "s3 checkpoint + file sink");
}

/// A checkpoint on Azure Blob Storage (Azurite, its emulator) with the file sink: the
/// conditional create (`If-None-Match: *`) of each batch blob keeps exactly-once through kill -9.
#[test]
fn azure_checkpoint_and_file_sink_survive_kill_9_exactly_once() {
    let test = "azure_checkpoint_and_file_sink_survive_kill_9_exactly_once";
    let Some(az) = service("KDIRECT_TEST_AZURE", test) else {
        return;
    };
    let (endpoint, container) = az.rsplit_once('/').unwrap();
    let account = endpoint.rsplit('/').next().unwrap();
    let fake = fake();
    let tmp = tempdir("azure");
    let out = tmp.join("out");
    let ckpt = format!(
        "checkpoint:az://{container}/kill-{}",
        tmp.file_name().unwrap().to_string_lossy()
    );
    let envs = [
        ("AZURE_STORAGE_ENDPOINT", endpoint),
        ("AZURE_STORAGE_ACCOUNT_NAME", account),
        // Azurite's documented development key (every emulator has it; not a secret).
        (
            "AZURE_STORAGE_ACCESS_KEY",
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        ),
        ("AZURE_ALLOW_HTTP", "true"),
    ];
    // As on S3: kills within 1 s of a start, batches of 2000 offsets.
    let n = run_with_kills_within(
        "azure checkpoint",
        &fake,
        &[
            "--store",
            &ckpt,
            "--output-dir",
            out.to_str().unwrap(),
            "--max-offsets-per-batch",
            "2000",
        ],
        &envs,
        1000,
    );
    assert_all(&read_files(&out), &n, true, "azure checkpoint + file sink");
}

/// A checkpoint on HDFS (Hadoop's MiniDFSCluster) with the file sink: each batch file renamed
/// into place without overwrite keeps the checkpoint's exactly-once through kill -9 (a writer
/// killed mid-write leaves only a temp file no reader looks at).
#[test]
fn hdfs_checkpoint_and_file_sink_survive_kill_9_exactly_once() {
    let test = "hdfs_checkpoint_and_file_sink_survive_kill_9_exactly_once";
    let Some(nn) = service("KDIRECT_TEST_HDFS", test) else {
        return;
    };
    let fake = fake();
    let tmp = tempdir("hdfs");
    let out = tmp.join("out");
    let ckpt = format!(
        "checkpoint:{nn}/kdirect-kill/{}",
        tmp.file_name().unwrap().to_string_lossy()
    );
    let n = run_with_kills(
        "hdfs checkpoint",
        &fake,
        &["--store", &ckpt, "--output-dir", out.to_str().unwrap()],
    );
    assert_all(&read_files(&out), &n, true, "hdfs checkpoint + file sink");
}

/// The same against Apache Kafka, on a topic its Java producer wrote.
#[test]
fn zookeeper_and_file_sink_survive_kill_9_against_kafka() {
    let test = "zookeeper_and_file_sink_survive_kill_9_against_kafka";
    let Some(url) = service("KDIRECT_TEST_ZOOKEEPER", test) else {
        return;
    };
    let Some(source) = kafka_source(test) else {
        return;
    };
    let tmp = tempdir("zk-kafka");
    let out = tmp.join("out");
    let store = format!("{url}/kill-{}", tmp.file_name().unwrap().to_string_lossy());
    let n = run_with_kills(
        "zookeeper (Kafka)",
        &source,
        &[
            "--store",
            &store,
            "--group",
            "kill",
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), &n, true, "zookeeper + file sink (Kafka)");
}

/// HBase through its REST gateway: a row per topic, check-and-put; no plan log, so with the
/// file sink a kill -9 loses nothing (a batch written but not committed is read again).
#[test]
fn hbase_and_file_sink_lose_nothing() {
    let Some(url) = service("KDIRECT_TEST_HBASE", "hbase_and_file_sink_lose_nothing") else {
        return;
    };
    let fake = fake();
    let tmp = tempdir("hbase");
    let out = tmp.join("out");
    let group = format!(
        "kill-{}-{}",
        std::process::id(),
        tmp.file_name().unwrap().to_string_lossy()
    );
    let n = run_with_kills(
        "hbase",
        &fake,
        &[
            "--store",
            &url,
            "--group",
            &group,
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), &n, false, "hbase + file sink");
}

#[test]
fn checkpoint_and_file_sink_survive_kill_9_against_kafka() {
    let test = "checkpoint_and_file_sink_survive_kill_9_against_kafka";
    let Some(source) = kafka_source(test) else {
        return;
    };
    let tmp = tempdir("ckpt-kafka");
    let ckpt = format!("checkpoint:{}", tmp.join("ckpt").display());
    let out = tmp.join("out");
    let n = run_with_kills(
        "checkpoint (Kafka)",
        &source,
        &["--store", &ckpt, "--output-dir", out.to_str().unwrap()],
    );
    assert_all(
        &read_files(&out),
        &n,
        true,
        "checkpoint + file sink (Kafka)",
    );
}

#[test]
fn postgres_sink_table_survives_kill_9_against_kafka() {
    let test = "postgres_sink_table_survives_kill_9_against_kafka";
    let Some(url) = service("KDIRECT_TEST_POSTGRES", test) else {
        return;
    };
    let Some(source) = kafka_source(test) else {
        return;
    };
    let table = format!("killk_{}", std::process::id());
    let n = run_with_kills(
        "postgres (Kafka)",
        &source,
        &["--store", &url, "--group", &table, "--sink-table", &table],
    );
    assert_sql(&url, &table, &n);
}

/// A small filesystem of its own (tmpfs), unmounted when dropped. Mounting needs root: the
/// README's test command runs as root (CI) or through sudo; plain `cargo test` as a user
/// skips, saying why.
struct SmallDisk(std::path::PathBuf, bool);

/// `mount`/`umount` as root: directly, or through `sudo -n` when `sudo` is true.
fn as_root(sudo: bool, cmd: &str, args: &[&std::ffi::OsStr]) -> bool {
    let mut c = if sudo {
        let mut c = Command::new("sudo");
        c.args(["-n", cmd]);
        c
    } else {
        Command::new(cmd)
    };
    c.args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl SmallDisk {
    fn mount(dir: &Path, size: &str, test: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let opts = format!("size={size}");
        let args = [
            "-t".as_ref(),
            "tmpfs".as_ref(),
            "-o".as_ref(),
            opts.as_ref(),
            "tmpfs".as_ref(),
            dir.as_os_str(),
        ];
        for sudo in [false, true] {
            if as_root(sudo, "mount", &args) {
                return Some(SmallDisk(dir.to_owned(), sudo));
            }
        }
        if std::env::var_os("KDIRECT_REQUIRE_SERVICES").is_some_and(|v| v == "1") {
            panic!("{test}: cannot mount a tmpfs (not root?), and KDIRECT_REQUIRE_SERVICES=1 forbids skipping");
        }
        println!("skipping {test}: mounting a small tmpfs needs root");
        None
    }

    fn resize(&self, size: &str) {
        let opts = format!("remount,size={size}");
        let ok = as_root(
            self.1,
            "mount",
            &["-o".as_ref(), opts.as_ref(), self.0.as_os_str()],
        );
        assert!(ok, "remount {}", self.0.display());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        as_root(self.1, "umount", &[self.0.as_os_str()]);
    }
}

/// The disk under the checkpoint directory fills up mid-run: `consume` stops with an error
/// naming the file and the cause, having committed nothing it did not write; once there is
/// room again, the next run carries on, and the output file holds every record exactly once
/// (cut back to what the store covers).
#[test]
fn a_full_disk_under_the_checkpoint_is_a_clear_error_and_nothing_is_lost_or_doubled() {
    let test = "a_full_disk_under_the_checkpoint_is_a_clear_error_and_nothing_is_lost_or_doubled";
    let tmp = tempdir("full");
    let Some(disk) = SmallDisk::mount(&tmp.join("disk"), "48k", test) else {
        return;
    };
    let fake = fake();
    let ckpt = format!("checkpoint:{}", disk.0.join("ck").display());
    let out = tmp.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let file = out.join("records.jsonl");
    let run = || {
        spawn(
            &fake.bootstrap(),
            fake.topic(),
            &["--store", &ckpt, "--output", file.to_str().unwrap()],
            true,
        )
        .wait_with_output()
        .unwrap()
    };
    // 48 KiB is a dozen 4 KiB pages: a few batches' plan and commit files.
    let o = run();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the disk never filled: {stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains(&disk.0.display().to_string()), "{stderr}");
    disk.resize("4m");
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_all(&read_files(&out), &fake.ends(), true, "full disk");
}

/// Runs `consume` (with `extra`) against `fake` while `proxy` cuts the store away at random
/// moments (mostly mid-commit: commits are most of what the store sees) and lets it back
/// 1–2 s later. A run the cut stops must end in an error naming the store, not a panic or a
/// hang; the next run resumes. Returns how many runs the cuts stopped.
fn run_with_store_cuts(name: &str, fake: &Source, proxy: &CutProxy, extra: &[&str]) -> u32 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("{name}: seed {seed}");
    let mut rng = Lcg(seed);
    let (boot, topic) = (fake.bootstrap(), fake.topic().to_owned());
    // Every run that does not finish was stopped by a cut: four cut runs, then one without.
    for stopped in 0..40 {
        let child = spawn(&boot, &topic, extra, true);
        if stopped < 4 {
            let delay = Duration::from_millis(rng.next(50, 400));
            let back = Duration::from_millis(rng.next(1000, 2000));
            // The random moment of the cut, and how long the store stays away: the fault
            // under test, not a wait.
            std::thread::sleep(delay);
            proxy.cut();
            std::thread::sleep(back);
            proxy.restore();
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        if out.status.success() {
            // Done (a run the cut missed, or survived, read everything).
            return stopped;
        }
        println!(
            "{name}: stopped: {}",
            stderr.trim_end().lines().last().unwrap_or("")
        );
        assert!(
            stderr.contains(&format!("127.0.0.1:{}", proxy.port)),
            "{name}: the error names the store: {stderr}"
        );
    }
    panic!("{name}: never finished");
}

/// PostgreSQL cut away during commits (a proxy drops every connection, then lets them back):
/// each stopped run says which store failed, the next one resumes, and the sink table holds
/// every record exactly once.
#[test]
fn postgres_cut_during_commits_loses_and_doubles_nothing() {
    let test = "postgres_cut_during_commits_loses_and_doubles_nothing";
    let Some(url) = service("KDIRECT_TEST_POSTGRES", test) else {
        return;
    };
    let proxy = CutProxy::start("127.0.0.1:5432");
    let via = url.replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port));
    let fake = fake();
    let table = format!("cut_{}", std::process::id());
    let stopped = run_with_store_cuts(
        "postgres",
        &fake,
        &proxy,
        &["--store", &via, "--group", &table, "--sink-table", &table],
    );
    println!("postgres: {stopped} runs stopped by a cut");
    assert_sql(&url, &table, &fake.ends());
}

/// Redis cut away during commits, with `--output FILE`: the file is cut back to what Redis
/// covers at each start, so it holds every record exactly once.
#[test]
fn redis_cut_during_commits_loses_and_doubles_nothing() {
    let test = "redis_cut_during_commits_loses_and_doubles_nothing";
    let Some(url) = service("KDIRECT_TEST_REDIS", test) else {
        return;
    };
    let proxy = CutProxy::start("127.0.0.1:6379");
    let via = url.replace("127.0.0.1:6379", &format!("127.0.0.1:{}", proxy.port));
    let fake = fake();
    let tmp = tempdir("redis-cut");
    let out = tmp.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let file = out.join("records.jsonl");
    let group = format!(
        "cut-{}-{}",
        std::process::id(),
        tmp.display().to_string().len()
    );
    let stopped = run_with_store_cuts(
        "redis",
        &fake,
        &proxy,
        &[
            "--store",
            &via,
            "--group",
            &group,
            "--output",
            file.to_str().unwrap(),
        ],
    );
    println!("redis: {stopped} runs stopped by a cut");
    assert_all(&read_files(&out), &fake.ends(), true, "redis cut");
}
