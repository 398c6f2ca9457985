//! Kill tests: `kdirect consume` is killed with SIGKILL at random moments, at least 20 times,
//! while it consumes 120k records from the fake broker, and restarted until it finishes.
//! Checkpoint + file sink and SQL + sink table must end with every offset exactly once; the
//! Kafka group store (at-least-once) must lose nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

const PARTITIONS: i32 = 4;
const PER_PARTITION: i64 = 30_000;
const KILLS: usize = 20;

fn fake() -> FakeCluster {
    let fake = FakeCluster::builder()
        .brokers(2)
        .topic("k", PARTITIONS)
        .start()
        .unwrap();
    for p in 0..PARTITIONS {
        let mut o = 0;
        while o < PER_PARTITION {
            let recs: Vec<FakeRecord> = (o..o + 500)
                .map(|i| FakeRecord::value(Bytes::from(format!("{p}:{i}:{}", "x".repeat(80)))))
                .collect();
            fake.append_records("k", p, &recs, Codec::Lz4).unwrap();
            o += 500;
        }
    }
    fake
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

fn spawn(boot: &str, extra: &[&str]) -> Child {
    let mut args = vec![
        "consume",
        "-b",
        boot,
        "-t",
        "k",
        "--starting",
        "earliest",
        "--until-latest",
        "--max-offsets-per-batch",
        "200",
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Kills the consumer at random points until `KILLS` kills happened, then lets it finish.
fn run_with_kills(name: &str, boot: &str, extra: &[&str]) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("{name}: seed {seed}");
    let mut rng = Lcg(seed);
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        assert!(Instant::now() < deadline, "{name}: did not finish");
        let mut child = spawn(boot, extra);
        if kills < KILLS {
            std::thread::sleep(Duration::from_millis(rng.next(10, 150)));
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
                continue;
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if kills >= KILLS {
            break;
        }
        // Finished before enough kills: the data is consumed; nothing more to kill.
        panic!("{name}: finished after only {kills} kills; make the run longer");
    }
    println!("{name}: {kills} kills");
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

fn assert_all(seen: &BTreeMap<(i32, i64), u32>, exactly_once: bool, name: &str) {
    for p in 0..PARTITIONS {
        for o in 0..PER_PARTITION {
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
        PARTITIONS as i64 * PER_PARTITION,
        "{name}: records outside the topic"
    );
}

#[test]
fn checkpoint_and_file_sink_survive_kill_9_exactly_once() {
    let fake = fake();
    let tmp = tempdir("ckpt");
    let ckpt = format!("checkpoint:{}", tmp.join("ckpt").display());
    let out = tmp.join("out");
    run_with_kills(
        "checkpoint",
        &fake.bootstrap(),
        &["--store", &ckpt, "--output-dir", out.to_str().unwrap()],
    );
    assert_all(&read_files(&out), true, "checkpoint + file sink");
    // No file being written is left looking finished.
    for e in std::fs::read_dir(&out).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(n.ends_with(".jsonl") || n.contains(".tmp"), "{n}");
    }
}

#[test]
fn kafka_group_and_file_sink_lose_nothing() {
    let fake = fake();
    let tmp = tempdir("kafka");
    let out = tmp.join("out");
    let group = format!("kill-{}", std::process::id());
    run_with_kills(
        "kafka",
        &fake.bootstrap(),
        &[
            "--store",
            "kafka",
            "--group",
            &group,
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), false, "kafka group + file sink");
}

#[test]
fn sqlite_sink_table_survives_kill_9_exactly_once() {
    let fake = fake();
    let tmp = tempdir("sqlite");
    let url = format!("sqlite:{}", tmp.join("offsets.db").display());
    run_with_kills(
        "sqlite",
        &fake.bootstrap(),
        &["--store", &url, "--group", "g", "--sink-table", "records"],
    );
    assert_sql(&url, "records");
}

#[test]
fn postgres_sink_table_survives_kill_9_exactly_once() {
    let Some(url) = service("KDIRECT_TEST_POSTGRES") else {
        return;
    };
    let fake = fake();
    let table = format!("kill_{}", std::process::id());
    run_with_kills(
        "postgres",
        &fake.bootstrap(),
        &["--store", &url, "--group", &table, "--sink-table", &table],
    );
    assert_sql(&url, &table);
}

#[test]
fn mysql_sink_table_survives_kill_9_exactly_once() {
    let Some(url) = service("KDIRECT_TEST_MYSQL") else {
        return;
    };
    let fake = fake();
    let table = format!("kill_{}", std::process::id());
    run_with_kills(
        "mysql",
        &fake.bootstrap(),
        &["--store", &url, "--group", &table, "--sink-table", &table],
    );
    assert_sql(&url, &table);
}

fn service(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            println!("skipped: {var} is not set (CI sets it; it names a database to test against)");
            None
        }
    }
}

fn assert_sql(url: &str, table: &str) {
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
    assert_all(&seen, true, url);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "kdirect-kill-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn redis_and_file_sink_lose_nothing() {
    let Some(url) = service("KDIRECT_TEST_REDIS") else {
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
    run_with_kills(
        "redis",
        &fake.bootstrap(),
        &[
            "--store",
            &url,
            "--group",
            &group,
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    assert_all(&read_files(&out), false, "redis + file sink");
}
