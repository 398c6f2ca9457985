//! Commit latency per offset store: one batch of 4 partitions committed per iteration, each
//! batch starting where the previous one ended (so every commit passes compare-and-set and
//! writes). Named `commit/<store>/4p`.
//!
//! - fdatasync-floor: a new 120-byte file and one fdatasync in the same directory, the floor
//!   a checkpoint commit (one durable write) is quoted against.
//! - checkpoint: on local disk (under cargo's target tmpdir), one fdatasync per batch file;
//!   `log_plan` runs outside the timed part, as it runs before the batch.
//! - sqlite: a file in the same place (WAL, synchronous=FULL).
//! - postgres / mysql / redis / zookeeper: `KDIRECT_TEST_POSTGRES`, `KDIRECT_TEST_MYSQL`,
//!   `KDIRECT_TEST_REDIS`, `KDIRECT_TEST_ZOOKEEPER`; skipped with a printed reason when unset.
//! - hbase: the REST gateway of `KDIRECT_TEST_HBASE` (standalone HBase on the same machine).
//! - s3-checkpoint: the checkpoint on the S3-compatible server of `KDIRECT_TEST_S3`
//!   (`http://HOST:PORT/BUCKET`, moto in the test setup: its latency is moto's, not S3's).
//! - azure-checkpoint: the checkpoint on the Azure Blob emulator of `KDIRECT_TEST_AZURE`
//!   (`http://HOST:PORT/ACCOUNT/CONTAINER`, Azurite in the test setup: its latency is
//!   Azurite's, not Azure's).
//! - hdfs-checkpoint: the checkpoint on the HDFS of `KDIRECT_TEST_HDFS` (`hdfs://HOST:PORT`,
//!   a MiniDFSCluster with one DataNode on the same machine in the test setup).
//!
//! Besides criterion's estimates, each store prints its p50 and p99 over every timed commit.
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kdirect::commit::{
    open_store, AnyStore, CommitContext, OffsetRange, OffsetStore, OpenOptions, PlannedBatch,
};

const PARTITIONS: i32 = 4;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

use kdirect_test_support::unique;

fn tmp() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("kdirect-bench-commit"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn batch(id: u64, topic: &str) -> PlannedBatch {
    let from = id as i64 * 100;
    PlannedBatch::new(
        id,
        (0..PARTITIONS)
            .map(|p| OffsetRange::new(topic, p, from, from + 100))
            .collect(),
    )
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn bench_store(c: &mut Criterion, name: &str, spec: Option<String>) {
    let Some(spec) = spec else {
        return;
    };
    let rt = rt();
    let store: AnyStore = rt
        .block_on(open_store(&spec, &unique("bench"), &OpenOptions::default()))
        .unwrap_or_else(|e| panic!("open {name}: {e}"));
    let topic = unique("t");
    let mut next = 0u64;
    let samples = Mutex::new(Vec::<Duration>::new());
    c.bench_function(&format!("commit/{name}/{PARTITIONS}p"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let batch = batch(next, &topic);
                next += 1;
                rt.block_on(store.log_plan(&batch)).unwrap();
                let t = Instant::now();
                rt.block_on(store.commit(&batch, &CommitContext::STANDALONE))
                    .unwrap();
                let d = t.elapsed();
                samples.lock().unwrap().push(d);
                total += d;
            }
            total
        })
    });
    report(
        &format!("commit/{name}/{PARTITIONS}p"),
        samples.into_inner().unwrap(),
        "commits",
    );
}

/// Prints the p50 and p99 of every timed iteration (criterion's estimates are means).
fn report(name: &str, mut samples: Vec<Duration>, what: &str) {
    samples.sort();
    println!(
        "{name}: p50 {:.3} ms, p99 {:.3} ms over {} {what}",
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.len()
    );
}

fn service(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            eprintln!("skipping its commit bench: {var} is not set");
            None
        }
    }
}

/// The floor a checkpoint commit is measured against: creating a small file of a commit's
/// size in the same directory and one fdatasync of it, nothing else.
fn bench_fdatasync(c: &mut Criterion, dir: &std::path::Path) {
    use std::io::Write;
    let floor = dir.join("floor");
    std::fs::create_dir_all(&floor).unwrap();
    let bytes = vec![b'x'; 120];
    let mut next = 0u64;
    let samples = Mutex::new(Vec::<Duration>::new());
    c.bench_function("commit/fdatasync-floor", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let path = floor.join(next.to_string());
                next += 1;
                let t = Instant::now();
                let mut f = std::fs::File::create_new(&path).unwrap();
                f.write_all(&bytes).unwrap();
                f.sync_data().unwrap();
                let d = t.elapsed();
                samples.lock().unwrap().push(d);
                total += d;
            }
            total
        })
    });
    report(
        "commit/fdatasync-floor",
        samples.into_inner().unwrap(),
        "writes",
    );
}

fn commit(c: &mut Criterion) {
    let dir = tmp();
    bench_fdatasync(c, &dir);
    bench_store(
        c,
        "checkpoint",
        Some(format!("checkpoint:{}", dir.join("ckpt").display())),
    );
    bench_store(
        c,
        "sqlite",
        Some(format!("sqlite:{}", dir.join("offsets.db").display())),
    );
    bench_store(c, "postgres", service("KDIRECT_TEST_POSTGRES"));
    bench_store(c, "mysql", service("KDIRECT_TEST_MYSQL"));
    bench_store(c, "redis", service("KDIRECT_TEST_REDIS"));
    bench_store(
        c,
        "zookeeper",
        service("KDIRECT_TEST_ZOOKEEPER").map(|u| format!("{u}/{}", unique("bench"))),
    );
    bench_store(c, "hbase", service("KDIRECT_TEST_HBASE"));
    let s3 = service("KDIRECT_TEST_S3").map(|v| {
        let (endpoint, bucket) = v
            .rsplit_once('/')
            .expect("KDIRECT_TEST_S3=http://HOST:PORT/BUCKET");
        // The object store reads its settings from the environment, as every S3 tool does;
        // set before the store opens, while this is the only thread.
        for (k, v) in [
            ("AWS_ENDPOINT", endpoint),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ] {
            std::env::set_var(k, v);
        }
        format!("checkpoint:s3://{bucket}/{}", unique("bench"))
    });
    bench_store(c, "s3-checkpoint", s3);
    let azure = service("KDIRECT_TEST_AZURE").map(|v| {
        let (endpoint, container) = v
            .rsplit_once('/')
            .expect("KDIRECT_TEST_AZURE=http://HOST:PORT/ACCOUNT/CONTAINER");
        let account = endpoint.rsplit('/').next().unwrap_or_default();
        // As for S3: the Azure settings from the environment, set while this is the only
        // thread. The key is Azurite's documented development key (not a secret).
        for (k, v) in [
            ("AZURE_STORAGE_ENDPOINT", endpoint),
            ("AZURE_STORAGE_ACCOUNT_NAME", account),
            (
                "AZURE_STORAGE_ACCESS_KEY",
                "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
            ),
            ("AZURE_ALLOW_HTTP", "true"),
        ] {
            std::env::set_var(k, v);
        }
        format!("checkpoint:az://{container}/{}", unique("bench"))
    });
    bench_store(c, "azure-checkpoint", azure);
    bench_store(
        c,
        "hdfs-checkpoint",
        service("KDIRECT_TEST_HDFS")
            .map(|nn| format!("checkpoint:{nn}/kdirect-bench/{}", unique("bench"))),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = commit
}
criterion_main!(benches);
