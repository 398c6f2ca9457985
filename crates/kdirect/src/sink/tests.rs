//! The sinks against batches a real stream reads from the fake broker.

use std::collections::BTreeMap;

use bytes::Bytes;
use kdirect_fake_broker::{encode_batch, BatchOptions, Codec, FakeCluster, FakeRecord};

use crate::{DirectStream, StartPolicy};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    kdirect_test_support::tempdir(&format!("sink-{tag}"))
}

/// Topic `t`: 3 partitions × `per` records, in stored batches of 10, partition 1 zstd; keys
/// on even offsets, headers on every third record, a tombstone at offset 5.
async fn fake(per: i32) -> FakeCluster {
    let fake = FakeCluster::builder().topic("t", 3).build().await.unwrap();
    for p in 0..3 {
        for b in 0..per / 10 {
            let recs: Vec<FakeRecord> = (0..10)
                .map(|i| {
                    let o = b * 10 + i;
                    let mut r = if o == 5 {
                        FakeRecord::value(Bytes::new())
                    } else {
                        FakeRecord::value(Bytes::from(format!("v{p}-{o}")))
                    };
                    if o == 5 {
                        r.value = None;
                    }
                    if o % 2 == 0 {
                        r = r.with_key(Bytes::from(format!("k{o}")));
                    }
                    if o % 3 == 0 {
                        r = r
                            .with_header("h", Some(Bytes::from(format!("{o}"))))
                            .with_header("n", None);
                    }
                    r.with_timestamp(1_700_000_000_000 + i64::from(o))
                })
                .collect();
            let codec = if p == 1 { Codec::Zstd } else { Codec::None };
            fake.append_batch(
                "t",
                p,
                encode_batch(&recs, &BatchOptions::codec(codec)).unwrap(),
            )
            .unwrap();
        }
    }
    fake
}

#[cfg(feature = "arrow")]
#[test]
fn arrow_view_has_sparks_kafka_schema_and_every_record() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
    use arrow_array::Array;

    use super::arrow::{kafka_schema, ArrowConverter};

    rt().block_on(async {
        let fake = fake(30).await;
        let mut stream = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["t"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .build()
            .await
            .unwrap();
        let mut seen = BTreeMap::new();
        // Rows cut at 7: several RecordBatches per batch.
        let mut conv = ArrowConverter::new().with_max_rows(7);
        while let Some(batch) = stream.next_batch().await.unwrap() {
            for rb in conv.to_record_batches(&batch).unwrap() {
                assert_eq!(rb.schema(), kafka_schema());
                assert!(rb.num_rows() <= 7);
                let key = rb.column(0).as_binary::<i32>();
                let value = rb.column(1).as_binary::<i32>();
                let topic = rb.column(2).as_string::<i32>();
                let part = rb.column(3).as_primitive::<Int32Type>();
                let off = rb.column(4).as_primitive::<Int64Type>();
                let ts = rb.column(5).as_primitive::<TimestampMillisecondType>();
                let ts_type = rb.column(6).as_primitive::<Int32Type>();
                let headers = rb.column(7).as_list::<i32>();
                for i in 0..rb.num_rows() {
                    let (p, o) = (part.value(i), off.value(i));
                    assert_eq!(topic.value(i), "t");
                    assert_eq!(ts.value(i), 1_700_000_000_000 + o);
                    assert_eq!(ts_type.value(i), 0);
                    assert_eq!(key.is_null(i), o % 2 != 0, "{p}-{o}");
                    if o % 2 == 0 {
                        assert_eq!(key.value(i), format!("k{o}").as_bytes());
                    }
                    if o == 5 {
                        assert!(value.is_null(i));
                    } else {
                        assert_eq!(value.value(i), format!("v{p}-{o}").as_bytes());
                    }
                    // Spark's source: null headers for a record without any.
                    assert_eq!(headers.is_null(i), o % 3 != 0, "{p}-{o}");
                    if o % 3 == 0 {
                        let h = headers.value(i);
                        let h = h.as_struct();
                        assert_eq!(h.len(), 2);
                        let (k, v) = (
                            h.column(0).as_string::<i32>(),
                            h.column(1).as_binary::<i32>(),
                        );
                        assert_eq!((k.value(0), v.value(0)), ("h", format!("{o}").as_bytes()));
                        assert_eq!(k.value(1), "n");
                        assert!(v.is_null(1));
                    }
                    assert!(seen.insert((p, o), ()).is_none(), "{p}-{o} twice");
                }
            }
            stream.commit(batch).await.unwrap();
        }
        assert_eq!(seen.len(), 90);
    });
}

#[test]
fn jsonl_sink_writes_one_file_per_batch_and_a_rerun_replaces_it() {
    use super::{BatchWriter, JsonLinesSink, LineFormat, Sink};

    rt().block_on(async {
        let fake = fake(10).await;
        let dir = tempdir("jsonl");
        let format: LineFormat = std::sync::Arc::new(|line, range, r| {
            line.push_str(&format!(
                "{}-{} {}",
                range.topic,
                range.partition,
                r.offset()
            ));
        });
        let sink = JsonLinesSink::open(&dir, format).unwrap();
        assert_eq!(sink.last_committed().unwrap(), None);
        let mut stream = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["t"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .build()
            .await
            .unwrap();
        let batch = stream.next_batch().await.unwrap().unwrap();
        // Written twice (a re-run, or two chunks of a batch into one writer): the file has
        // each line as often as it was written into the committed writer, never more.
        for _ in 0..2 {
            let mut w = sink.begin(batch.id()).unwrap();
            w.write(&batch).unwrap();
            assert_eq!(w.records(), 30);
            let c = w.commit().unwrap();
            assert_eq!(c.files, vec![dir.join("0.jsonl")]);
        }
        let text = std::fs::read_to_string(dir.join("0.jsonl")).unwrap();
        assert_eq!(text.lines().count(), 30);
        assert!(text.starts_with("t-0 0\n"), "{text}");
        assert!(sink.is_committed(0).unwrap());
        assert!(!sink.is_committed(1).unwrap());
        assert_eq!(sink.last_committed().unwrap(), Some(0));
        // A writer dropped uncommitted leaves the committed file alone.
        {
            let mut w = sink.begin(0).unwrap();
            w.write(&batch).unwrap();
            w.write(&batch).unwrap();
        }
        assert_eq!(std::fs::read_to_string(dir.join("0.jsonl")).unwrap(), text);
        // A writer takes its own batch only.
        let e = sink.begin(7).unwrap().write(&batch).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                super::SinkErrorKind::WrongBatch {
                    writer: 7,
                    batch: 0
                }
            ),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[cfg(feature = "parquet")]
mod parquet_sink {
    use std::collections::BTreeSet;
    use std::path::Path;

    use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};

    use super::*;
    use crate::sink::parquet::{ParquetCompression, ParquetOptions, ParquetSink};
    use crate::sink::{BatchWriter, Sink};

    /// (partition, offset) of every row of every visible `part-*.parquet` file, read with the
    /// parquet crate's own reader (not kdirect's code), as a reader that knows nothing of
    /// kdirect sees the directory: names starting with `_` or `.` skipped.
    pub(crate) fn read_back(dir: &Path) -> Vec<(i32, i64)> {
        let mut rows = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(e.path()).unwrap())
                    .unwrap()
                    .build()
                    .unwrap();
            for rb in reader {
                let rb = rb.unwrap();
                let p = rb
                    .column_by_name("partition")
                    .unwrap()
                    .as_primitive::<Int32Type>();
                let o = rb
                    .column_by_name("offset")
                    .unwrap()
                    .as_primitive::<Int64Type>();
                for i in 0..rb.num_rows() {
                    rows.push((p.value(i), o.value(i)));
                }
            }
        }
        rows.sort_unstable();
        rows
    }

    fn every_offset(per: i64) -> Vec<(i32, i64)> {
        (0..3).flat_map(|p| (0..per).map(move |o| (p, o))).collect()
    }

    async fn stream(fake: &FakeCluster, sink: &ParquetSink) -> DirectStream {
        DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["t"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .max_offsets_per_trigger(20)
            .store(sink.log())
            .build()
            .await
            .unwrap()
    }

    /// A crash after the batch's file was renamed into place but before the log committed it:
    /// the restarted stream re-runs the batch (same ranges, same file name), and every
    /// (partition, offset) is in the directory once, before the re-run and after.
    #[test]
    fn crash_between_rename_and_log_commit_reruns_the_batch_once() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("parquet-crash");
            let opts = ParquetOptions::default().compression(ParquetCompression::Snappy);
            {
                let sink = ParquetSink::open(&dir, opts.clone()).unwrap();
                let mut s = stream(&fake, &sink).await;
                let b0 = s.next_batch().await.unwrap().unwrap();
                let mut w = sink.begin(b0.id()).unwrap();
                w.write(&b0).unwrap();
                w.commit().unwrap();
                s.commit(b0).await.unwrap();
                let b1 = s.next_batch().await.unwrap().unwrap();
                assert_eq!(b1.id(), 1);
                let mut w = sink.begin(1).unwrap();
                w.write(&b1).unwrap();
                w.commit().unwrap();
                // The crash: no stream commit; and a temp file the crash left half-written.
                drop(b1);
                drop(s);
                std::fs::write(dir.join(".part-0000000002-000.parquet.tmp-1-0123"), b"PAR1")
                    .unwrap();
            }
            let before = read_back(&dir);
            let unique: BTreeSet<_> = before.iter().collect();
            assert_eq!(
                unique.len(),
                before.len(),
                "a row seen twice before the restart"
            );
            assert_eq!(sink_last(&dir, &opts), Some(0));
            // The restart: the log's pending batch 1 is re-run with exactly its ranges.
            let sink = ParquetSink::open(&dir, opts).unwrap();
            let mut s = stream(&fake, &sink).await;
            let mut replayed = false;
            while let Some(b) = s.next_batch().await.unwrap() {
                replayed |= b.id() == 1 && b.is_replay();
                let mut w = sink.begin(b.id()).unwrap();
                w.write(&b).unwrap();
                w.commit().unwrap();
                s.commit(b).await.unwrap();
            }
            assert!(replayed, "batch 1 was not re-run from the log");
            assert_eq!(read_back(&dir), every_offset(30));
            // The log lists each committed batch's files, and they are the visible ones.
            let listed: BTreeSet<String> = sink
                .committed_files()
                .unwrap()
                .values()
                .flatten()
                .map(|f| f.name.clone())
                .collect();
            let visible: BTreeSet<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('_') && !n.starts_with('.'))
                .collect();
            assert_eq!(listed, visible);
            // No temp file survives the reopen.
            assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp-")));
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// A chunked batch (issue 32) larger than the memory budget is written chunk by chunk into
    /// its one writer: one file per batch, every record once.
    #[test]
    fn a_chunked_batch_goes_into_one_file() {
        rt().block_on(async {
            let fake = FakeCluster::builder().topic("w", 4).build().await.unwrap();
            // Every value different (a dictionary would otherwise fold them to nothing).
            let mut seed = 0x9e37_79b9_u32;
            let mut value = move || {
                let v: Vec<u8> = (0..1000)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        seed as u8
                    })
                    .collect();
                FakeRecord::value(Bytes::from(v))
            };
            for p in 0..4 {
                for _ in 0..8 {
                    let recs: Vec<FakeRecord> = (0..16).map(|_| value()).collect();
                    fake.append_records("w", p, &recs, Codec::None).unwrap();
                }
            }
            let dir = tempdir("parquet-chunked");
            // Row groups written out at 64 KiB (of 1000-byte values, incompressible):
            // the writer holds a bounded row group, not the whole batch, however many rows
            // the batch has (the review of the chunked batches found it held them all).
            let sink = ParquetSink::open(
                &dir,
                ParquetOptions::default()
                    .compression(ParquetCompression::None)
                    .row_group_bytes(64 << 10),
            )
            .unwrap();
            let mut s = DirectStream::builder()
                .bootstrap(&fake.bootstrap())
                .topics(&["w"])
                .start(StartPolicy::Earliest)
                .until_latest(true)
                .memory_budget(256 * 1024)
                .set("maxOffsetsPerTrigger", "10000000")
                .unwrap()
                .set("batch.chunked", "true")
                .unwrap()
                .store(sink.log())
                .build()
                .await
                .unwrap();
            let mut batches = 0;
            let mut most_chunks = 0;
            while let Some(mut b) = s.next_batch().await.unwrap() {
                let mut w = sink.begin(b.id()).unwrap();
                loop {
                    w.write(&b).unwrap();
                    if !s.next_chunk(&mut b).await.unwrap() {
                        break;
                    }
                }
                most_chunks = most_chunks.max(b.chunks());
                let c = w.commit().unwrap();
                assert!(c.files.len() <= 1);
                s.commit(b).await.unwrap();
                batches += 1;
            }
            assert!(most_chunks > 1, "no batch came in chunks");
            // 512 KB of values: several row groups of at most ~64 KiB each.
            let mut groups = 0;
            for e in std::fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                if !e.file_name().to_string_lossy().starts_with("part-") {
                    continue;
                }
                let meta = ParquetRecordBatchReaderBuilder::try_new(
                    std::fs::File::open(e.path()).unwrap(),
                )
                .unwrap()
                .metadata()
                .clone();
                groups += meta.num_row_groups();
                for g in meta.row_groups() {
                    assert!(g.total_byte_size() < 200 << 10, "{}", g.total_byte_size());
                }
            }
            assert!(groups >= 4, "{groups} row groups for 512 KB");
            let rows = read_back(&dir);
            let want: Vec<(i32, i64)> =
                (0..4).flat_map(|p| (0..128).map(move |o| (p, o))).collect();
            assert_eq!(rows, want);
            let files = std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with("part-")
                })
                .count();
            assert!(files <= batches);
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    fn sink_last(dir: &Path, opts: &ParquetOptions) -> Option<u64> {
        ParquetSink::open(dir, opts.clone())
            .unwrap()
            .last_committed()
            .unwrap()
    }

    /// The log refuses to commit a batch whose output was not committed through the sink.
    #[test]
    fn commit_before_output_is_refused() {
        rt().block_on(async {
            let fake = fake(10).await;
            let dir = tempdir("parquet-order");
            let sink = ParquetSink::open(&dir, ParquetOptions::default()).unwrap();
            let mut s = stream(&fake, &sink).await;
            let b = s.next_batch().await.unwrap().unwrap();
            let e = s.commit(b).await.unwrap_err().to_string();
            assert!(e.contains("before its output"), "{e}");
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// Each codec and a small row group size: the parquet crate reads the rows back with the
    /// values written, and the file says which batch it holds.
    #[test]
    fn files_read_back_with_the_parquet_reader() {
        rt().block_on(async {
            let fake = fake(20).await;
            for codec in [
                ParquetCompression::Zstd,
                ParquetCompression::Snappy,
                ParquetCompression::None,
            ] {
                let dir = tempdir("parquet-codec");
                let sink = ParquetSink::open(
                    &dir,
                    ParquetOptions::default()
                        .compression(codec)
                        .row_group_rows(8),
                )
                .unwrap();
                let mut s = stream(&fake, &sink).await;
                while let Some(b) = s.next_batch().await.unwrap() {
                    let mut w = sink.begin(b.id()).unwrap();
                    w.write(&b).unwrap();
                    w.commit().unwrap();
                    s.commit(b).await.unwrap();
                }
                assert_eq!(read_back(&dir), every_offset(20), "{codec:?}");
                let first = dir.join(ParquetSink::file_name(0));
                let builder =
                    ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&first).unwrap())
                        .unwrap();
                let meta = builder.metadata().clone();
                assert!(
                    meta.num_row_groups() >= 2,
                    "{codec:?}: row groups of 8 rows"
                );
                let kv = meta.file_metadata().key_value_metadata().unwrap();
                assert!(kv
                    .iter()
                    .any(|k| k.key == "kdirect.batchId" && k.value.as_deref() == Some("0")));
                let mut values = Vec::new();
                for rb in builder.build().unwrap() {
                    let rb = rb.unwrap();
                    let v = rb.column_by_name("value").unwrap().as_binary::<i32>();
                    let p = rb
                        .column_by_name("partition")
                        .unwrap()
                        .as_primitive::<Int32Type>();
                    let o = rb
                        .column_by_name("offset")
                        .unwrap()
                        .as_primitive::<Int64Type>();
                    for i in 0..rb.num_rows() {
                        if o.value(i) != 5 {
                            assert_eq!(
                                v.value(i),
                                format!("v{}-{}", p.value(i), o.value(i)).as_bytes()
                            );
                            values.push(());
                        }
                    }
                }
                assert!(!values.is_empty());
                let _ = std::fs::remove_dir_all(&dir);
            }
        });
    }
}

#[cfg(feature = "delta")]
mod delta_sink {
    use std::collections::BTreeMap;
    use std::path::Path;

    use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties};
    use deltalake_core::kernel::{Action, Transaction};
    use deltalake_core::protocol::{DeltaOperation, OutputMode};
    use deltalake_core::DeltaTableBuilder;
    use kdirect_commit::{CommitContext, CommitOutcome, OffsetStore};

    use super::*;
    use crate::sink::delta::{DeltaOptions, DeltaSink};
    use crate::sink::{BatchWriter, Sink};

    /// The table as delta-rs (not kdirect's code) reads it: every (partition, offset) of the
    /// files its snapshot lists, counted, and the txn version of `app_ids`.
    async fn read_table(
        dir: &Path,
        app_ids: &[&str],
    ) -> (BTreeMap<(i32, i64), u32>, Vec<Option<i64>>) {
        let url = url::Url::from_directory_path(std::fs::canonicalize(dir).unwrap()).unwrap();
        let table = DeltaTableBuilder::from_url(url)
            .unwrap()
            .load()
            .await
            .unwrap();
        let mut rows = BTreeMap::new();
        for uri in table.get_file_uris().unwrap() {
            let path = url::Url::parse(&uri)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .unwrap_or_else(|| uri.clone().into());
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
                    .unwrap()
                    .build()
                    .unwrap();
            for rb in reader {
                let rb = rb.unwrap();
                let p = rb
                    .column_by_name("partition")
                    .unwrap()
                    .as_primitive::<Int32Type>();
                let o = rb
                    .column_by_name("offset")
                    .unwrap()
                    .as_primitive::<Int64Type>();
                for i in 0..rb.num_rows() {
                    *rows.entry((p.value(i), o.value(i))).or_insert(0) += 1;
                }
            }
        }
        let snapshot = table.snapshot().unwrap();
        let mut versions = Vec::new();
        for a in app_ids {
            versions.push(
                snapshot
                    .transaction_version(table.log_store().as_ref(), *a)
                    .await
                    .unwrap(),
            );
        }
        (rows, versions)
    }

    fn once(per: i64) -> BTreeMap<(i32, i64), u32> {
        (0..3)
            .flat_map(|p| (0..per).map(move |o| ((p, o), 1)))
            .collect()
    }

    async fn stream(fake: &FakeCluster, sink: &DeltaSink) -> DirectStream {
        DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["t"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .max_offsets_per_trigger(20)
            .store(sink.log())
            .build()
            .await
            .unwrap()
    }

    /// Writes and commits batches until the stream ends or `limit` batches were committed;
    /// the records written.
    async fn run(s: &mut DirectStream, sink: &DeltaSink, limit: usize) -> u64 {
        let mut records = 0;
        for _ in 0..limit {
            let Some(b) = s.next_batch().await.unwrap() else {
                break;
            };
            let mut w = sink.begin(b.id()).unwrap();
            w.write(&b).unwrap();
            records += w.records();
            w.commit().unwrap();
            assert_eq!(s.commit(b).await.unwrap(), CommitOutcome::Committed);
        }
        records
    }

    /// Two batches, a stop, a resume from the table's txns to the end, a third run that finds
    /// nothing new: every offset once, and each partition's txn version is its last offset
    /// (kafka-delta-ingest's `version`, one below the next offset to read).
    #[test]
    fn round_trip_resume_and_a_rerun_adds_nothing() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-resume");
            {
                let sink = DeltaSink::open(&dir, DeltaOptions::default())
                    .await
                    .unwrap();
                let mut s = stream(&fake, &sink).await;
                assert!(run(&mut s, &sink, 2).await > 0);
                assert_eq!(sink.last_committed().unwrap(), Some(1));
            }
            let sink = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            assert_eq!(sink.last_committed().unwrap(), Some(1));
            let mut s = stream(&fake, &sink).await;
            assert!(
                !s.stored_positions().is_empty(),
                "nothing resumed from the txns"
            );
            assert_eq!(s.next_batch_id(), 2);
            run(&mut s, &sink, usize::MAX).await;
            let (rows, versions) = read_table(&dir, &["t-0", "t-1", "t-2"]).await;
            assert_eq!(rows, once(30));
            assert_eq!(versions, vec![Some(29), Some(29), Some(29)]);
            // A re-run: the positions are at the end, nothing is written.
            drop(s);
            let sink = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let mut s = stream(&fake, &sink).await;
            assert_eq!(run(&mut s, &sink, usize::MAX).await, 0);
            assert_eq!(read_table(&dir, &[]).await.0, once(30));
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// A crash after the data file was written and staged but before the Delta commit: the
    /// table shows nothing of the batch, and the restart reads it again — every offset once.
    #[test]
    fn a_crash_before_the_delta_commit_leaves_nothing_visible() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-crash");
            let first = {
                let sink = DeltaSink::open(&dir, DeltaOptions::default())
                    .await
                    .unwrap();
                let mut s = stream(&fake, &sink).await;
                let first = run(&mut s, &sink, 1).await;
                let b = s.next_batch().await.unwrap().unwrap();
                let mut w = sink.begin(b.id()).unwrap();
                w.write(&b).unwrap();
                let files = w.commit().unwrap().files;
                assert_eq!(files.len(), 1);
                assert!(files[0].exists());
                // The crash: no stream commit.
                first
            };
            let (rows, _) = read_table(&dir, &[]).await;
            assert_eq!(rows.len() as u64, first, "only batch 0 is in the table");
            assert!(rows.values().all(|n| *n == 1));
            let sink = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let mut s = stream(&fake, &sink).await;
            run(&mut s, &sink, usize::MAX).await;
            assert_eq!(read_table(&dir, &[]).await.0, once(30));
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// Two writers from the same positions: the first commits, the second finds the txns
    /// moved and is refused (a conflict); its file stays out of the table. A retried commit
    /// of a committed batch is `AlreadyCommitted`, not a second copy.
    #[test]
    fn a_second_writer_is_refused_and_a_retry_is_already_committed() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-conflict");
            let a = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let b = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let mut sa = stream(&fake, &a).await;
            let mut sb = stream(&fake, &b).await;
            let ba = sa.next_batch().await.unwrap().unwrap();
            let bb = sb.next_batch().await.unwrap().unwrap();
            assert_eq!(ba.ranges(), bb.ranges());
            let planned = ba.planned();
            let mut w = a.begin(ba.id()).unwrap();
            w.write(&ba).unwrap();
            let first = w.records();
            w.commit().unwrap();
            assert_eq!(sa.commit(ba).await.unwrap(), CommitOutcome::Committed);
            // The retry of the same commit (its answer lost): nothing written twice.
            let again = a
                .log()
                .commit(&planned, &CommitContext::STANDALONE)
                .await
                .unwrap();
            assert_eq!(again, CommitOutcome::AlreadyCommitted);
            let mut w = b.begin(bb.id()).unwrap();
            w.write(&bb).unwrap();
            w.commit().unwrap();
            let e = sb.commit(bb).await.unwrap_err();
            assert!(
                e.store()
                    .is_some_and(kdirect_commit::StoreError::is_conflict),
                "not a conflict: {e}"
            );
            let (rows, _) = read_table(&dir, &[]).await;
            assert_eq!(rows.len() as u64, first);
            assert!(rows.values().all(|n| *n == 1), "a row twice");
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// Two writers on different partitions of one table (a group's members): both commit,
    /// the second after reading the first's commit.
    #[test]
    fn writers_of_different_partitions_both_commit() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-members");
            let a = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let b = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let member = |sink: &DeltaSink, parts: Vec<i32>| {
                DirectStream::builder()
                    .bootstrap(&fake.bootstrap())
                    .topics(&["t"])
                    .partitions(parts)
                    .start(StartPolicy::Earliest)
                    .until_latest(true)
                    .store(sink.log())
                    .build()
            };
            let mut sa = member(&a, vec![0]).await.unwrap();
            let mut sb = member(&b, vec![1, 2]).await.unwrap();
            let ba = sa.next_batch().await.unwrap().unwrap();
            let bb = sb.next_batch().await.unwrap().unwrap();
            for (sink, s, batch) in [(&a, &mut sa, ba), (&b, &mut sb, bb)] {
                let mut w = sink.begin(batch.id()).unwrap();
                w.write(&batch).unwrap();
                w.commit().unwrap();
                assert_eq!(s.commit(batch).await.unwrap(), CommitOutcome::Committed);
            }
            let (rows, versions) = read_table(&dir, &["t-0", "t-1", "t-2"]).await;
            assert_eq!(rows, once(30));
            assert_eq!(versions, vec![Some(29), Some(29), Some(29)]);
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// A table another program (kafka-delta-ingest's layout, app id `job`) left at offset 9
    /// of partition 1 (its txn version: the last offset written) is continued from offset 10.
    #[test]
    fn continues_a_table_with_kafka_delta_ingest_txns() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-kdi");
            let options = DeltaOptions::default().app_id("t", "job");
            let sink = DeltaSink::open(&dir, options.clone()).await.unwrap();
            {
                // The other program's commit: a txn alone, written with delta-rs.
                let url =
                    url::Url::from_directory_path(std::fs::canonicalize(&dir).unwrap()).unwrap();
                let table = DeltaTableBuilder::from_url(url)
                    .unwrap()
                    .load()
                    .await
                    .unwrap();
                CommitBuilder::from(CommitProperties::default())
                    .with_actions(vec![Action::Txn(Transaction::new("job-1", 9))])
                    .build(
                        Some(table.snapshot().unwrap()),
                        table.log_store(),
                        DeltaOperation::StreamingUpdate {
                            output_mode: OutputMode::Append,
                            query_id: "kafka-delta-ingest".into(),
                            epoch_id: 0,
                        },
                    )
                    .await
                    .unwrap();
            }
            let mut s = stream(&fake, &sink).await;
            assert_eq!(
                s.stored_positions()
                    .get(&crate::TopicPartition::new("t", 1)),
                Some(&10)
            );
            run(&mut s, &sink, usize::MAX).await;
            let (rows, versions) = read_table(&dir, &["job-0", "job-1", "job-2", "t-0"]).await;
            let mut want = once(30);
            want.retain(|(p, o), _| *p != 1 || *o >= 10);
            assert_eq!(rows, want);
            assert_eq!(versions, vec![Some(29), Some(29), Some(29), None]);
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// Log checkpoints every 2 commits, then the commit files before the last checkpoint
    /// removed (as Delta's log cleanup does after the retention period; the checkpoint's own
    /// version stays): the positions are still found (the checkpoint's txn column), and the
    /// resumed run writes each offset once.
    #[test]
    fn resumes_from_a_checkpointed_log_without_its_old_commits() {
        rt().block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-checkpoint");
            let options = DeltaOptions::default().checkpoint_interval(2);
            {
                let sink = DeltaSink::open(&dir, options.clone()).await.unwrap();
                let mut s = stream(&fake, &sink).await;
                run(&mut s, &sink, 3).await;
            }
            let log = dir.join("_delta_log");
            let last: serde_json::Value =
                serde_json::from_slice(&std::fs::read(log.join("_last_checkpoint")).unwrap())
                    .unwrap();
            let cp = last["version"].as_i64().unwrap();
            assert!(cp >= 2, "no checkpoint: {last}");
            for e in std::fs::read_dir(&log).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                let v = name
                    .strip_suffix(".json")
                    .and_then(|v| v.parse::<i64>().ok());
                if v.is_some_and(|v| v < cp) {
                    std::fs::remove_file(log.join(&name)).unwrap();
                }
            }
            let (before, versions) = read_table(&dir, &["t-0", "t-1", "t-2"]).await;
            assert!(versions.iter().all(Option::is_some), "{versions:?}");
            let sink = DeltaSink::open(&dir, options).await.unwrap();
            let mut s = stream(&fake, &sink).await;
            let stored: Vec<i64> = s.stored_positions().values().copied().collect();
            let want: Vec<i64> = versions.iter().map(|v| v.unwrap() + 1).collect();
            assert_eq!(stored, want);
            let written = run(&mut s, &sink, usize::MAX).await;
            assert_eq!(before.len() as u64 + written, 90);
            assert_eq!(read_table(&dir, &[]).await.0, once(30));
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// Two writers of the same partitions committing the same batch at once (a race for the
    /// same table version, or one reading the other's commit): exactly one is committed, the
    /// other refused as a conflict; the table holds the batch once.
    #[test]
    fn concurrent_writers_of_the_same_partitions_one_wins() {
        let rt = kdirect_test_support::rt();
        rt.block_on(async {
            let fake = fake(30).await;
            let dir = tempdir("delta-race");
            let a = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let b = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap();
            let mut sa = stream(&fake, &a).await;
            let mut sb = stream(&fake, &b).await;
            let ba = sa.next_batch().await.unwrap().unwrap();
            let bb = sb.next_batch().await.unwrap().unwrap();
            let mut records = 0;
            for (sink, batch) in [(&a, &ba), (&b, &bb)] {
                let mut w = sink.begin(batch.id()).unwrap();
                w.write(batch).unwrap();
                records = w.records();
                w.commit().unwrap();
            }
            let (pa, pb) = (ba.planned(), bb.planned());
            let (la, lb) = (a.log(), b.log());
            let ctx = CommitContext::STANDALONE;
            let (ra, rb) = tokio::join!(
                tokio::spawn(async move { la.commit(&pa, &ctx).await }),
                tokio::spawn(async move { lb.commit(&pb, &CommitContext::STANDALONE).await }),
            );
            let outcomes = [ra.unwrap(), rb.unwrap()];
            let won = outcomes
                .iter()
                .filter(|r| matches!(r, Ok(CommitOutcome::Committed)))
                .count();
            let refused = outcomes
                .iter()
                .filter(|r| r.as_ref().is_err_and(|e| e.is_conflict()))
                .count();
            assert_eq!((won, refused), (1, 1), "{outcomes:?}");
            let (rows, _) = read_table(&dir, &[]).await;
            assert_eq!(rows.len() as u64, records);
            assert!(rows.values().all(|n| *n == 1));
            let _ = std::fs::remove_dir_all(&dir);
        });
    }

    /// A table of another schema (kafka-delta-ingest's hold the values' JSON fields as
    /// columns) is refused at open, naming its columns; nothing is written to it.
    #[test]
    fn a_table_of_another_schema_is_refused() {
        rt().block_on(async {
            let dir = tempdir("delta-schema");
            std::fs::create_dir_all(&dir).unwrap();
            let url = url::Url::from_directory_path(std::fs::canonicalize(&dir).unwrap()).unwrap();
            let table = DeltaTableBuilder::from_url(url).unwrap().build().unwrap();
            deltalake_core::operations::create::CreateBuilder::new()
                .with_log_store(table.log_store())
                .with_column(
                    "id",
                    deltalake_core::kernel::DataType::LONG,
                    true,
                    None,
                )
                .await
                .unwrap();
            let e = DeltaSink::open(&dir, DeltaOptions::default())
                .await
                .unwrap_err();
            assert!(
                matches!(e.kind(), crate::SinkErrorKind::Spec { reason, .. } if reason.contains("\"id\"")),
                "{e}"
            );
            let log: Vec<_> = std::fs::read_dir(dir.join("_delta_log"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(log.len(), 1, "{log:?}");
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
}

/// Topic `j`, one partition, the given values (None: a tombstone) from offset 0.
#[cfg(feature = "json-values")]
async fn json_topic(values: &[Option<&str>]) -> FakeCluster {
    let fake = FakeCluster::builder().topic("j", 1).build().await.unwrap();
    let recs: Vec<FakeRecord> = values
        .iter()
        .map(|v| {
            let mut r = FakeRecord::value(Bytes::from(v.unwrap_or("").to_owned()));
            if v.is_none() {
                r.value = None;
            }
            r
        })
        .collect();
    fake.append_records("j", 0, &recs, Codec::None).unwrap();
    fake
}

/// Every batch of topic `j` through a converter decoding values with `schema`.
#[cfg(feature = "json-values")]
async fn json_batches(
    fake: &FakeCluster,
    schema: arrow_schema::SchemaRef,
) -> Result<Vec<arrow_array::RecordBatch>, super::SinkError> {
    let mut stream = DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .topics(&["j"])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .build()
        .await
        .unwrap();
    let mut conv = super::arrow::ArrowConverter::new()
        .with_max_rows(4)
        .with_json_values(schema)?;
    let mut out = Vec::new();
    while let Some(batch) = stream.next_batch().await.unwrap() {
        let rbs = conv.to_record_batches(&batch);
        stream.done(batch);
        for rb in rbs? {
            assert_eq!(rb.schema(), conv.schema());
            out.push(rb);
        }
    }
    Ok(out)
}

#[cfg(feature = "json-values")]
fn id_name_schema() -> arrow_schema::SchemaRef {
    use arrow_schema::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "at",
            DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
    ]))
}

/// Issue 34 item 1: values decoded to columns as Spark's `from_json` does: fields the schema
/// does not name ignored, a missing one null, a tombstone a row of nulls; the Kafka columns
/// but `value` follow.
#[cfg(feature = "json-values")]
#[test]
fn json_values_become_columns_of_the_given_schema() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;

    rt().block_on(async {
        let values: Vec<String> = (0..10)
            .map(|o| {
                format!(
                    r#"{{"id": {o}, "name": "n{o}", "at": "2026-12-07T10:00:0{o}Z", "extra": [1, {{"x": true}}]}}"#
                )
            })
            .collect();
        let mut vals: Vec<Option<&str>> = values.iter().map(|v| Some(v.as_str())).collect();
        vals[3] = Some(r#"{"id": 3}"#);
        vals[5] = None;
        vals[6] = Some(" \n {\"name\": \"six\", \"id\": null} \t");
        let fake = json_topic(&vals).await;
        let rbs = json_batches(&fake, id_name_schema()).await.unwrap();
        let names: Vec<String> = rbs[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "id",
                "name",
                "at",
                "key",
                "topic",
                "partition",
                "offset",
                "timestamp",
                "timestampType",
                "headers"
            ]
        );
        let mut rows = 0;
        for rb in &rbs {
            let id = rb.column(0).as_primitive::<Int64Type>();
            let name = rb.column(1).as_string::<i32>();
            let at = rb.column(2).as_primitive::<arrow_array::types::TimestampMillisecondType>();
            let off = rb.column(6).as_primitive::<Int64Type>();
            for i in 0..rb.num_rows() {
                let o = off.value(i);
                assert_eq!(o, rows, "offsets in order");
                rows += 1;
                match o {
                    3 => {
                        assert_eq!(id.value(i), 3);
                        assert!(name.is_null(i), "a missing field is null");
                    }
                    5 => assert!(id.is_null(i) && name.is_null(i), "a tombstone: nulls"),
                    6 => {
                        assert!(id.is_null(i));
                        assert_eq!(name.value(i), "six");
                    }
                    _ => {
                        assert_eq!(id.value(i), o);
                        assert_eq!(name.value(i), format!("n{o}"));
                        // 2026-12-07T10:00:00Z, plus o seconds.
                        assert_eq!(at.value(i), 1_796_637_600_000 + o * 1000);
                    }
                }
            }
        }
        assert_eq!(rows, 10);
    });
}

/// A value that is not one JSON object of the schema fails the batch, naming the record: a
/// type the schema does not allow (found when the columns are built), two objects in one
/// value, a truncated object, text that is not JSON, an empty value. A field of the values'
/// schema named like a Kafka column is refused up front.
#[cfg(feature = "json-values")]
#[test]
fn a_value_that_is_not_one_json_object_of_the_schema_is_an_error_naming_it() {
    use super::SinkErrorKind;

    rt().block_on(async {
        for (bad, what) in [
            (r#"{"id": "seven"}"#, ""),
            (r#"{"id": 1}{"id": 2}"#, "more than one JSON value"),
            (r#"{"id": 1"#, "not a whole JSON object"),
            ("not json", ""),
            ("", "empty"),
        ] {
            let mut vals: Vec<Option<&str>> = vec![Some(r#"{"id": 1}"#); 10];
            vals[7] = Some(bad);
            let fake = json_topic(&vals).await;
            let err = json_batches(&fake, id_name_schema()).await.unwrap_err();
            match err.kind() {
                SinkErrorKind::JsonValue {
                    topic,
                    partition,
                    offset,
                    reason,
                    ..
                } => {
                    assert_eq!(
                        (topic.as_str(), *partition, *offset),
                        ("j", 0, 7),
                        "{bad:?}: {err}"
                    );
                    assert!(reason.contains(what), "{bad:?}: {reason}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
            assert!(err.to_string().contains("j-0 offset 7"), "{err}");
        }
        let clash = std::sync::Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "offset",
            arrow_schema::DataType::Int64,
            true,
        )]));
        let err = super::arrow::ArrowConverter::new()
            .with_json_values(clash)
            .unwrap_err();
        assert!(err.to_string().contains("'offset'"), "{err}");
    });
}
