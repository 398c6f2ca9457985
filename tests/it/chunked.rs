//! Batches of any size (issue 32, `batch.chunked`): a batch is exactly its planned ranges,
//! however much memory they take, and its records arrive in chunks that fit the budget.
use std::collections::BTreeMap;

use bytes::Bytes;
use kdirect::commit::checkpoint::CheckpointStore;
use kdirect::commit::CommitOutcome;
use kdirect::engine::plan::{OffsetRange, StartPolicy};
use kdirect::DirectStream;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::support::{rt, tempdir};

const PARTITIONS: i32 = 8;
/// Stored batches per partition.
const STORED: i64 = 12;
/// Records per stored batch (1 kB values: ~16 kB stored batches).
const PER_STORED: i64 = 16;
const BUDGET: usize = 256 * 1024;

/// 8 partitions × 12 stored batches of 16 × 1 kB records: ~1.5 MB, six times the budget.
async fn wide_topic() -> FakeCluster {
    let fake = FakeCluster::builder()
        .brokers(2)
        .topic("wide", PARTITIONS)
        .build()
        .await
        .unwrap();
    fill(&fake);
    fake
}

fn fill(fake: &FakeCluster) {
    for p in 0..PARTITIONS {
        for b in 0..STORED {
            let recs: Vec<FakeRecord> = (0..PER_STORED)
                .map(|i| {
                    let mut v = vec![b'v'; 1000];
                    v.extend_from_slice(format!("{p}-{}", b * PER_STORED + i).as_bytes());
                    FakeRecord::value(Bytes::from(v))
                })
                .collect();
            fake.append_records("wide", p, &recs, Codec::None).unwrap();
        }
    }
}

fn builder(fake: &FakeCluster) -> kdirect::DirectStreamBuilder {
    DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .topics(&["wide"])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .memory_budget(BUDGET)
        .set("maxOffsetsPerTrigger", "10000000")
        .unwrap()
        .set("batch.chunked", "true")
        .unwrap()
}

/// The (partition, offset) of every record of `batch`, chunk after chunk, checking that each
/// chunk holds at most half the budget and the stream never more than all of it.
async fn read_all(stream: &mut DirectStream, batch: &mut kdirect::Batch) -> Vec<(i32, i64)> {
    let mut seen = Vec::new();
    loop {
        assert!(
            batch.byte_count() <= BUDGET / 2,
            "chunk {} of batch {} holds {} bytes",
            batch.chunks(),
            batch.id(),
            batch.byte_count()
        );
        assert!(
            stream.memory_in_use() <= BUDGET,
            "{}",
            stream.memory_in_use()
        );
        batch
            .for_each_record(|range, r| {
                let value = r.value().unwrap();
                let tail = std::str::from_utf8(&value[1000..]).unwrap();
                assert_eq!(tail, format!("{}-{}", range.partition, r.offset()));
                seen.push((range.partition, r.offset()));
            })
            .unwrap();
        if !stream.next_chunk(batch).await.unwrap() {
            return seen;
        }
    }
}

fn every_offset_once(mut seen: Vec<(i32, i64)>) {
    let n = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), n, "no record twice");
    let want: Vec<(i32, i64)> = (0..PARTITIONS)
        .flat_map(|p| (0..STORED * PER_STORED).map(move |o| (p, o)))
        .collect();
    assert_eq!(seen, want, "every record once");
}

#[test]
fn a_batch_larger_than_the_budget_is_its_whole_plan_read_in_chunks() {
    rt().block_on(async {
        let fake = wide_topic().await;
        let mut stream = builder(&fake).build().await.unwrap();
        let mut batch = stream.next_batch().await.unwrap().unwrap();
        let end = STORED * PER_STORED;
        let whole: Vec<OffsetRange> = (0..PARTITIONS)
            .map(|p| OffsetRange::new("wide", p, 0, end))
            .collect();
        assert_eq!(
            batch.ranges(),
            &whole[..],
            "the batch is its plan: every offset"
        );
        assert!(
            !batch.is_read(),
            "six budgets of data cannot come in one chunk"
        );
        let seen = read_all(&mut stream, &mut batch).await;
        assert!(batch.chunks() > 2, "{} chunks", batch.chunks());
        assert!(batch.is_read());
        every_offset_once(seen);
        // Each partition's epoch at its range's end is known once the batch is read.
        assert_eq!(batch.leader_epochs().len(), PARTITIONS as usize);
        stream.commit(batch).await.unwrap();
        assert!(
            stream.next_batch().await.unwrap().is_none(),
            "the stream is at its end"
        );
        // Stored batches are fetched whole, about once each: no sliver of one read again
        // and again (an answer past a chunk's room is dropped and asked again by the next).
        let fetched: u64 = fake
            .broker_ids()
            .iter()
            .map(|b| fake.stats(*b).unwrap().fetched_record_bytes)
            .sum();
        let stored = (PARTITIONS as u64) * (STORED * PER_STORED) as u64 * 1000;
        eprintln!("fetched {fetched} record bytes for {stored} bytes of values");
        assert!(fetched < stored * 3 / 2, "fetched {fetched} for {stored}");
    });
}

#[test]
fn the_walk_over_every_chunk_on_the_stream_hands_each_record_once() {
    rt().block_on(async {
        let fake = wide_topic().await;
        let mut stream = builder(&fake).build().await.unwrap();
        let mut batch = stream.next_batch().await.unwrap().unwrap();
        let mut seen = Vec::new();
        let n = stream
            .try_for_each_record(&mut batch, |range, r| {
                seen.push((range.partition, r.offset()));
                Ok::<(), kdirect::Error>(())
            })
            .await
            .unwrap();
        assert_eq!(n as usize, seen.len());
        every_offset_once(seen);
        stream.commit(batch).await.unwrap();
    });
}

#[test]
fn a_chunked_batch_is_committed_only_when_read_and_replayed_exactly_after_a_crash() {
    rt().block_on(async {
        let fake = wide_topic().await;
        let ckpt = tempdir("chunked").join("ckpt");
        let with_store = || {
            builder(&fake)
                .until_latest(false)
                .store(CheckpointStore::open(&ckpt, 10).unwrap())
        };
        let mut stream = with_store().build().await.unwrap();
        let mut batch = stream.next_batch().await.unwrap().unwrap();
        let planned = batch.ranges().to_vec();
        // Two chunks read, then a commit: refused, naming what is left.
        assert!(stream.next_chunk(&mut batch).await.unwrap());
        let left = batch.rest().to_vec();
        assert!(!left.is_empty());
        let e = stream.commit(batch).await.unwrap_err();
        assert!(
            matches!(
                e.misuse(),
                Some(kdirect::Misuse::ChunksLeft {
                    batch: 0,
                    action: "committed",
                    ..
                })
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("batch 0") && e.to_string().contains("wide-"),
            "{e}"
        );
        // A "crash": the stream goes away with the batch uncommitted.
        drop(stream);

        // The restart re-runs batch 0: the same ranges, in chunks, every record once.
        let mut stream = with_store().build().await.unwrap();
        let mut again = stream.next_batch().await.unwrap().unwrap();
        assert_eq!(again.id(), 0);
        assert!(again.is_replay());
        assert_eq!(again.ranges(), &planned[..]);
        let seen = read_all(&mut stream, &mut again).await;
        every_offset_once(seen);
        assert_eq!(
            stream.commit(again).await.unwrap(),
            CommitOutcome::Committed
        );
        drop(stream);

        // Committed: the next run starts at the end.
        let stream = with_store().build().await.unwrap();
        let stored: BTreeMap<_, _> = stream.stored_positions().clone();
        assert_eq!(stored.len(), PARTITIONS as usize);
        assert!(
            stored.values().all(|&o| o == STORED * PER_STORED),
            "{stored:?}"
        );
    });
}

/// A plan logged by a chunked stream (as `kdirect consume` logs them) and re-run by a stream
/// that is not chunked cannot fit its budget: the error says to read it in chunks, not to
/// lower maxOffsetsPerTrigger, which a re-run ignores (the review of the chunked batches
/// found that advice, on every restart). The same plan re-run chunked reads every record once.
#[test]
fn a_chunked_plan_re_run_without_chunks_says_to_read_it_in_chunks() {
    rt().block_on(async {
        let fake = wide_topic().await;
        let ckpt = tempdir("chunked-replay").join("ckpt");
        let with_store = |chunked: &str| {
            builder(&fake)
                .until_latest(false)
                .set("batch.chunked", chunked)
                .unwrap()
                .store(CheckpointStore::open(&ckpt, 10).unwrap())
        };
        let mut stream = with_store("true").build().await.unwrap();
        let batch = stream.next_batch().await.unwrap().unwrap();
        assert!(
            !batch.rest().is_empty(),
            "the plan is larger than the budget"
        );
        drop(batch);
        drop(stream);

        let mut stream = with_store("false").build().await.unwrap();
        let e = stream.next_batch().await.unwrap_err().to_string();
        assert!(
            e.contains("re-run of logged batch 0") && e.contains("batch.chunked=true"),
            "{e}"
        );
        assert!(!e.contains("lower maxOffsetsPerTrigger"), "{e}");
        drop(stream);

        let mut stream = with_store("true").build().await.unwrap();
        let mut again = stream.next_batch().await.unwrap().unwrap();
        assert!(again.is_replay());
        every_offset_once(read_all(&mut stream, &mut again).await);
    });
}

#[test]
fn a_chunked_batch_released_before_its_end_stops_the_stream_instead_of_skipping() {
    rt().block_on(async {
        let fake = wide_topic().await;
        let mut stream = builder(&fake).build().await.unwrap();
        let batch = stream.next_batch().await.unwrap().unwrap();
        assert!(!batch.is_read());
        // Asking for the next batch while this one has chunks left is refused.
        let e = stream.next_batch().await.unwrap_err();
        assert!(e.to_string().contains("chunks not read"), "{e}");
        stream.done(batch);
        let e = stream.next_batch().await.unwrap_err();
        assert!(
            matches!(e.misuse(), Some(kdirect::Misuse::Released { .. })),
            "{e}"
        );
        assert!(
            e.to_string().contains("released before all its chunks"),
            "{e}"
        );
    });
}

#[test]
fn without_chunks_the_same_plan_is_ended_where_memory_ends() {
    rt().block_on(async {
        let fake = wide_topic().await;
        let mut stream = builder(&fake)
            .set("batch.chunked", "false")
            .unwrap()
            .build()
            .await
            .unwrap();
        let (mut batches, mut seen) = (0, Vec::new());
        while let Some(b) = stream.next_batch().await.unwrap() {
            batches += 1;
            assert!(b.is_read() && b.chunks() == 1);
            b.for_each_record(|range, r| seen.push((range.partition, r.offset())))
                .unwrap();
            stream.done(b);
        }
        assert!(batches > 1, "{batches}");
        every_offset_once(seen);
    });
}

/// `kdirect consume` writes a batch as large as `--max-offsets-per-batch` asks, whatever the
/// memory budget, chunk by chunk: one batch file, every record once, and a second run resumes
/// after it.
#[test]
fn the_cli_writes_a_batch_larger_than_its_memory_as_one_batch() {
    let fake = FakeCluster::builder()
        .brokers(2)
        .topic("wide", PARTITIONS)
        .start()
        .unwrap();
    fill(&fake);
    let dir = tempdir("chunked-cli");
    let (ckpt, out) = (dir.join("ckpt"), dir.join("out"));
    let run = || {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &fake.bootstrap(), "-t", "wide"])
            .args([
                "--starting",
                "earliest",
                "--until-latest",
                "--memory-mib",
                "1",
            ])
            .args(["--max-offsets-per-batch", "10000000", "--stats"])
            .arg("--store")
            .arg(format!("checkpoint:{}", ckpt.display()))
            .arg("--output-dir")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{stderr}");
        stderr
    };
    let stderr = run();
    assert!(stderr.contains("batches=1 "), "{stderr}");
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, ["0.jsonl"], "one batch, one file");
    let text = std::fs::read_to_string(out.join("0.jsonl")).unwrap();
    let seen: Vec<(i32, i64)> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["partition"].as_i64().unwrap() as i32,
                v["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    every_offset_once(seen);
    // A second run finds the batch committed: nothing more to write.
    let again = run();
    assert!(again.contains("records=0 "), "{again}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}
