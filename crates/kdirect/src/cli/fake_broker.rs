//! `kdirect fake-broker`: serve generated data from kdirect's in-memory fake broker (a test
//! double, not a Kafka replacement — see docs/fake-broker.md) until interrupted.
//!
//! The first line of stdout is `bootstrap=HOST:PORT[,HOST:PORT…]`, for scripts.
use std::io::Write;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Instant;

use bytes::Bytes;
use kdirect_fake_broker::{
    encode_batch, encode_control_batch, BatchOptions, Codec, ControlType, FakeCluster, FakeRecord,
};

use super::CliError;

/// Arguments of `kdirect fake-broker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port of the first broker (broker k listens on PORT+k-1); 0 lets the OS choose.
    #[arg(long, default_value_t = 9092)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Topic to create and fill.
    #[arg(long, default_value = "test")]
    topic: String,
    /// Partitions of the topic (leaders round-robin over the brokers).
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Records in total, spread evenly over the partitions.
    #[arg(long, default_value_t = 0)]
    records: u64,
    /// Value size of each record, in bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Compression codec: none, gzip, snappy, lz4, zstd.
    #[arg(long, default_value = "none")]
    codec: Codec,
    /// Number of brokers.
    #[arg(long, default_value_t = 1)]
    brokers: i32,
    /// Records per batch.
    #[arg(long, default_value_t = 1000)]
    batch_records: usize,
    /// Write every batch in its own transaction and abort every Kth: `abort-every=K`.
    #[arg(long)]
    transactions: Option<Transactions>,
    /// Threads of the broker's runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// `--transactions abort-every=K`.
#[derive(Debug, Clone, Copy)]
pub struct Transactions {
    abort_every: u64,
}

impl FromStr for Transactions {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let k = s
            .strip_prefix("abort-every=")
            .ok_or_else(|| format!("expected abort-every=K, got {s:?}"))?;
        let abort_every: u64 = k
            .parse()
            .map_err(|_| format!("abort-every needs a positive integer, got {k:?}"))?;
        if abort_every == 0 {
            return Err("abort-every must be at least 1".into());
        }
        Ok(Transactions { abort_every })
    }
}

/// A batch of `n` records whose values follow a cheap deterministic pattern.
fn batch(n: usize, value_size: usize, codec: Codec, opts: BatchOptions) -> Result<Bytes, CliError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<FakeRecord> = (0..n)
        .map(|i| {
            let value: Vec<u8> = (0..value_size)
                .map(|j| b'a' + ((i + j) % 26) as u8)
                .collect();
            FakeRecord::value(value).with_timestamp(now)
        })
        .collect();
    Ok(encode_batch(&records, &BatchOptions { codec, ..opts })?)
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    if args.partitions < 1 || args.brokers < 1 || args.batch_records < 1 {
        return Err(CliError(
            "--partitions, --brokers and --batch-records must be at least 1".into(),
        ));
    }
    let started = Instant::now();
    let cluster = FakeCluster::builder()
        .brokers(args.brokers)
        .host(args.host.clone())
        .port(args.port)
        .worker_threads(args.threads)
        .topic(args.topic.clone(), args.partitions)
        .build()
        .await?;
    let parts = args.partitions as u64;
    let per_batch = args.batch_records;
    let full = batch(
        per_batch,
        args.value_size,
        args.codec,
        BatchOptions::default(),
    )?;
    let mut aborted_records = 0u64;
    for p in 0..args.partitions {
        let count = args.records / parts + u64::from((p as u64) < args.records % parts);
        let (batches, tail) = (
            count / per_batch as u64,
            (count % per_batch as u64) as usize,
        );
        match args.transactions {
            None => {
                cluster.append_batch_repeated(&args.topic, p, full.clone(), batches as usize)?;
                if tail > 0 {
                    let b = batch(tail, args.value_size, args.codec, BatchOptions::default())?;
                    cluster.append_batch(&args.topic, p, b)?;
                }
            }
            Some(t) => {
                let pid = 1000 + i64::from(p);
                let txn = BatchOptions {
                    producer_id: pid,
                    producer_epoch: 0,
                    base_sequence: 0,
                    transactional: true,
                    ..BatchOptions::default()
                };
                let body = batch(per_batch, args.value_size, args.codec, txn)?;
                let tail_body = batch(tail.max(1), args.value_size, args.codec, txn)?;
                let commit = encode_control_batch(pid, 0, ControlType::Commit, 0)?;
                let abort = encode_control_batch(pid, 0, ControlType::Abort, 0)?;
                let total = batches + u64::from(tail > 0);
                for k in 0..total {
                    let (b, n) = if k < batches {
                        (&body, per_batch as u64)
                    } else {
                        (&tail_body, tail as u64)
                    };
                    cluster.append_batch(&args.topic, p, b.clone())?;
                    if (k + 1) % t.abort_every == 0 {
                        cluster.append_batch(&args.topic, p, abort.clone())?;
                        aborted_records += n;
                    } else {
                        cluster.append_batch(&args.topic, p, commit.clone())?;
                    }
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "bootstrap={}", cluster.bootstrap())?;
    out.flush()?;
    drop(out);
    eprintln!(
        "kdirect fake-broker: topic {} with {} partitions on {} broker(s): {} records \
         ({} in aborted transactions), {} B values, codec {}, loaded in {:.2?}; \
         a test double, not a Kafka replacement. Ctrl-C to stop.",
        args.topic,
        args.partitions,
        args.brokers,
        args.records,
        aborted_records,
        args.value_size,
        args.codec.name(),
        started.elapsed()
    );
    // Serve until the process is interrupted (SIGINT/SIGTERM end it; nothing to flush).
    std::future::pending::<()>().await;
    drop(cluster);
    Ok(ExitCode::SUCCESS)
}
