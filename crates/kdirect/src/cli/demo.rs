//! `kdirect demo`: kdirect's whole job on one machine, with nothing else installed.
//!
//! 1. Starts kdirect's fake broker in this process (a test double, not a Kafka) with a topic of
//!    4 partitions × 250,000 lz4-compressed records. Every value names its own partition and
//!    offset (`p01-o000012345-…`), so the output can be checked record by record.
//! 2. Consumes it with a [`DirectStream`], a checkpoint directory (`DIR/checkpoint`) and the
//!    idempotent file sink (`DIR/output/<batchId>.jsonl`), printing progress to stderr.
//! 3. Part way, kills its own consumer: batch K's plan is logged (`offsets/K`) and its output
//!    file written, and the stream is dropped before `commits/K` — a crash at the worst moment.
//! 4. Restarts from the checkpoint as a new process would: re-runs batch K with exactly its
//!    logged ranges (its output file is replaced, not duplicated), then resumes the stream.
//! 5. Reads every finished `.jsonl` file back and proves, per partition, that each offset
//!    appears exactly once with its own value: counts, first and last offsets, duplicates,
//!    gaps. Exits non-zero if the proof fails.
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use bytes::Bytes;
use kdirect::commit::file_sink::FileSink;
use kdirect::engine::fetch::RangeData;
use kdirect::engine::plan::{OffsetRange, StartPolicy};
use kdirect::stream::DirectStream;
use kdirect_fake_broker::{encode_batch, BatchOptions, Codec, FakeCluster, FakeRecord};

use super::decode::{push_record_json, BytesFormat};
use super::CliError;

const TOPIC: &str = "demo";
const RECORDS_PER_FAKE_BATCH: u64 = 1000;

/// Arguments of `kdirect demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the checkpoint and the output go (default: a new temporary directory, removed at
    /// the end unless the proof fails).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Partitions of the sample topic.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Records in each partition.
    #[arg(long, default_value_t = 250_000)]
    records_per_partition: u64,
    /// Value size in bytes (at least 16: the value starts with its partition and offset).
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Compression codec of the sample topic: none, gzip, snappy, lz4, zstd.
    #[arg(long, default_value = "lz4")]
    codec: Codec,
    /// Offsets per batch (maxOffsetsPerTrigger); default: a tenth of the topic.
    #[arg(long)]
    batch_offsets: Option<u64>,
    /// Kill the consumer during this batch (after its plan is logged and its output written,
    /// before it is committed); default: the middle batch.
    #[arg(long)]
    crash_at_batch: Option<u64>,
}

/// What one consumer run ended with.
enum RunEnd {
    /// Killed during this batch.
    Crashed(u64),
    /// Read everything.
    Finished,
}

struct Demo {
    bootstrap: String,
    store_spec: String,
    sink: FileSink,
    batch_offsets: u64,
    total: u64,
    started: Instant,
    delivered: u64,
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    if args.partitions < 1 || args.records_per_partition < 1 || args.value_size < 16 {
        return Err(CliError(
            "--partitions and --records-per-partition must be at least 1, --value-size at least 16"
                .into(),
        ));
    }
    let total = args.records_per_partition * args.partitions as u64;
    let batch_offsets = args.batch_offsets.unwrap_or(total.div_ceil(10)).max(1);
    let batches = total.div_ceil(batch_offsets);
    if batches < 2 {
        return Err(CliError(
            "the topic fits one batch: nothing to crash in the middle of (use more records or \
             a smaller --batch-offsets)"
                .into(),
        ));
    }
    let crash_at = args.crash_at_batch.unwrap_or(batches / 2);
    let (dir, temporary) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("kdirect-demo-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir).map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    let ckpt = dir.join("checkpoint");
    let out = dir.join("output");
    for d in [&ckpt, &out] {
        if d.exists()
            && std::fs::read_dir(d)
                .map_err(|e| CliError(format!("{}: {e}", d.display())))?
                .next()
                .is_some()
        {
            return Err(CliError(format!(
                "{} is not empty: the demo starts from scratch (remove it, or pick another --dir)",
                d.display()
            )));
        }
    }

    let started = Instant::now();
    let cluster = FakeCluster::builder()
        .topic(TOPIC, args.partitions)
        .worker_threads(1)
        .build()
        .await?;
    load(&cluster, &args)?;
    eprintln!(
        "demo: fake broker at {} (in this process; a test double, not a Kafka): topic '{TOPIC}', \
         {} partitions × {} records of {} B, {}, loaded in {:.2?}",
        cluster.bootstrap(),
        args.partitions,
        args.records_per_partition,
        args.value_size,
        args.codec.name(),
        started.elapsed()
    );
    eprintln!(
        "demo: consuming with checkpoint:{} and the file sink {} ({batch_offsets} offsets per \
         batch); the consumer will be killed during batch {crash_at}",
        ckpt.display(),
        out.display()
    );

    let mut demo = Demo {
        bootstrap: cluster.bootstrap(),
        store_spec: format!("checkpoint:{}", ckpt.display()),
        sink: FileSink::open(&out)?,
        batch_offsets,
        total,
        started: Instant::now(),
        delivered: 0,
    };
    match demo.consume(Some(crash_at)).await? {
        RunEnd::Crashed(id) => eprintln!(
            "demo: ✗ consumer killed during batch {id}: offsets/{id} logged, {id}.jsonl written, \
             commits/{id} missing"
        ),
        RunEnd::Finished => {
            return Err(CliError(format!(
                "the stream ended before batch {crash_at}: nothing was killed (pick a smaller \
                 --crash-at-batch)"
            )))
        }
    }
    eprintln!("demo: restarting from the checkpoint");
    if let RunEnd::Crashed(_) = demo.consume(None).await? {
        return Err(CliError("the restarted consumer stopped early".into()));
    }
    let secs = demo.started.elapsed().as_secs_f64();
    eprintln!(
        "demo: done: {} records delivered (one batch twice) in {secs:.2} s, {:.0} records/s",
        demo.delivered,
        demo.delivered as f64 / secs.max(1e-9)
    );
    drop(cluster);

    let proof = prove(&out, args.partitions, args.records_per_partition)?;
    print!("{}", proof.report);
    if proof.ok {
        if temporary {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "demo: the proof FAILED; checkpoint and output kept in {}",
            dir.display()
        );
        Ok(ExitCode::FAILURE)
    }
}

/// The value of `partition`'s record at `offset`: it names both, then a filler pattern.
fn value_of(partition: i32, offset: u64, size: usize) -> Vec<u8> {
    let mut v = format!("p{partition:02}-o{offset:09}-").into_bytes();
    let head = v.len();
    v.extend((head..size).map(|j| b'a' + ((offset as usize + j) % 26) as u8));
    v.truncate(size.max(head));
    v
}

/// Fills the topic, one fake batch of up to 1000 records at a time.
fn load(cluster: &FakeCluster, args: &Args) -> Result<(), CliError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let opts = BatchOptions::codec(args.codec);
    for p in 0..args.partitions {
        let mut offset = 0;
        while offset < args.records_per_partition {
            let n = RECORDS_PER_FAKE_BATCH.min(args.records_per_partition - offset);
            let records: Vec<FakeRecord> = (offset..offset + n)
                .map(|o| {
                    FakeRecord::value(Bytes::from(value_of(p, o, args.value_size)))
                        .with_timestamp(now)
                })
                .collect();
            cluster.append_batch(TOPIC, p, encode_batch(&records, &opts)?)?;
            offset += n;
        }
    }
    Ok(())
}

impl Demo {
    /// One consumer's life: open the store, re-run a pending batch, then stream until the end
    /// (or until killed during batch `crash_at`).
    async fn consume(&mut self, crash_at: Option<u64>) -> Result<RunEnd, CliError> {
        // The stream owns the commit protocol: it loads the checkpoint, re-runs a batch logged
        // but never committed with exactly its logged ranges (the same offsets go to the same
        // file name), and logs each plan before handing the batch out.
        let mut stream = DirectStream::builder()
            .bootstrap(&self.bootstrap)
            .topics(&[TOPIC])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .set("maxOffsetsPerTrigger", &self.batch_offsets.to_string())?
            .store_spec(&self.store_spec)
            .build()
            .await?;
        let mut lag_end: BTreeMap<i32, i64> = BTreeMap::new();
        while let Some(batch) = stream.next_batch().await? {
            if lag_end.is_empty() {
                if let Some(u) = stream.until_offsets() {
                    lag_end = u.iter().map(|(tp, o)| (tp.partition, *o)).collect();
                }
            }
            let id = batch.id();
            let n = self.write_output(id, batch.range_data())?;
            self.delivered += n;
            if crash_at == Some(id) {
                // The crash: plan logged (by next_batch), output written, nothing committed.
                // Everything this consumer held goes away without a goodbye.
                drop(batch);
                drop(stream);
                return Ok(RunEnd::Crashed(id));
            }
            let replay = batch.is_replay();
            let ranges = ranges_text(batch.ranges());
            let lag: i64 = batch
                .ranges()
                .iter()
                .map(|r| {
                    lag_end
                        .get(&r.partition)
                        .map_or(0, |e| (e - r.until).max(0))
                })
                .sum();
            stream.commit(batch).await?;
            if replay {
                eprintln!(
                    "demo: re-ran batch {id} from offsets/{id}: exactly its logged ranges {ranges}, \
                     {n} records; {id}.jsonl replaced, commits/{id} written",
                );
                continue;
            }
            let secs = self.started.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "demo: batch {id:>3}: {n:>7} records  {:>9.0} records/s  lag {lag:>8}  ({:.0}% read)",
                self.delivered as f64 / secs,
                100.0 * (self.total as i64 - lag) as f64 / self.total.max(1) as f64
            );
        }
        Ok(RunEnd::Finished)
    }

    /// Writes a batch's records to `<id>.jsonl` (atomically; a re-run replaces the file).
    fn write_output(&self, id: u64, data: &[RangeData]) -> Result<u64, CliError> {
        let mut file = self.sink.begin(id)?;
        let mut line = String::with_capacity(256);
        let mut failed = None;
        for d in data {
            d.for_each_record(|r| {
                line.clear();
                push_record_json(
                    &mut line,
                    Some((&d.range.topic, d.range.partition)),
                    r,
                    BytesFormat::Utf8,
                );
                if let Err(e) = file.write_line(line.trim_end().as_bytes()) {
                    failed.get_or_insert(e);
                }
            })
            .map_err(|e| CliError(format!("batch {id}: {e}")))?;
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        let n = file.lines();
        file.finish()?;
        Ok(n)
    }
}

fn ranges_text(ranges: &[OffsetRange]) -> String {
    ranges
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| format!("{}-{} [{}, {})", r.topic, r.partition, r.from, r.until))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Proof {
    report: String,
    ok: bool,
}

/// Reads every finished output file and checks that each offset of each partition appears
/// exactly once, carrying its own value.
fn prove(out: &Path, partitions: i32, per_partition: u64) -> Result<Proof, CliError> {
    let n = usize::try_from(per_partition).unwrap_or(usize::MAX);
    let mut seen: Vec<Vec<u8>> = vec![vec![0u8; n]; partitions as usize];
    let (mut files, mut lines, mut bad_values, mut strangers) = (0u64, 0u64, 0u64, 0u64);
    let mut names: Vec<PathBuf> = std::fs::read_dir(out)
        .map_err(|e| CliError(format!("{}: {e}", out.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    names.sort();
    for path in &names {
        files += 1;
        let f =
            std::fs::File::open(path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
        for line in std::io::BufReader::with_capacity(1 << 20, f).lines() {
            let line = line.map_err(|e| CliError(format!("{}: {e}", path.display())))?;
            lines += 1;
            let v: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| CliError(format!("{}: {e}: {line}", path.display())))?;
            let p = v["partition"].as_i64().unwrap_or(-1);
            let o = v["offset"].as_i64().unwrap_or(-1);
            if v["topic"] != TOPIC
                || p < 0
                || p >= i64::from(partitions)
                || o < 0
                || o as u64 >= per_partition
            {
                strangers += 1;
                continue;
            }
            let want = value_of(p as i32, o as u64, 0);
            if !v["value"]
                .as_str()
                .is_some_and(|s| s.as_bytes().starts_with(&want))
            {
                bad_values += 1;
            }
            let slot = &mut seen[p as usize][o as usize];
            *slot = slot.saturating_add(1);
        }
    }
    let mut report = format!(
        "\nproof, from the output files ({} finished .jsonl files, {lines} lines):\n\
         partition   records     first      last  duplicates  missing\n",
        files
    );
    let (mut dups, mut missing, mut records) = (0u64, 0u64, 0u64);
    for (p, s) in seen.iter().enumerate() {
        let count = s.iter().filter(|&&c| c > 0).count() as u64;
        let d: u64 = s.iter().map(|&c| u64::from(c.saturating_sub(1))).sum();
        let m = s.iter().filter(|&&c| c == 0).count() as u64;
        let first = s.iter().position(|&c| c > 0);
        let last = s.iter().rposition(|&c| c > 0);
        let show = |x: Option<usize>| x.map_or("-".to_owned(), |x| x.to_string());
        report.push_str(&format!(
            "{p:>9} {count:>9} {:>9} {:>9} {d:>11} {m:>8}\n",
            show(first),
            show(last)
        ));
        dups += d;
        missing += m;
        records += count;
    }
    let ok = dups == 0 && missing == 0 && bad_values == 0 && strangers == 0;
    report.push_str(&format!(
        "total: {records} of {} records, duplicates found: {dups}, missing: {missing}, \
         wrong values: {bad_values}, unexpected records: {strangers}\n{}\n",
        per_partition * partitions as u64,
        if ok {
            "OK: every record exactly once, across a crash and a restart"
        } else {
            "FAILED: the output does not hold every record exactly once"
        }
    ));
    Ok(Proof { report, ok })
}
