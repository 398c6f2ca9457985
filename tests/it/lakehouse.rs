//! Issue 34: what `kdirect consume --sink parquet:DIR` writes, read back by readers kdirect did
//! not write — the parquet crate's own reader, and pyarrow (`pyarrow.dataset` on the
//! directory, which skips `_`/`.` names as Spark and Hive do). pyarrow is PyPI's; tests/services.sh installs it into
//! target/pyarrow and sets `KDIRECT_TEST_PYARROW` to that Python (the tests skip with a
//! printed reason without it, unless KDIRECT_REQUIRE_SERVICES=1).
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use bytes::Bytes;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::support::{service, tempdir};

/// (partition, offset) → how many rows hold it.
pub(crate) type Rows = BTreeMap<(i32, i64), u32>;

/// Every (partition, offset) of the visible Parquet files (names not starting with `_` or
/// `.`), counted, read with the parquet crate's reader.
pub(crate) fn parquet_rows(dir: &Path) -> Rows {
    let mut seen = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        let file = std::fs::File::open(e.path()).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
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
                *seen.entry((p.value(i), o.value(i))).or_insert(0) += 1;
            }
        }
    }
    seen
}

/// What pyarrow.dataset sees in `dir`: the schema (one line per field) and every
/// (partition, offset), counted. `None` (after a printed reason) without pyarrow.
pub(crate) fn pyarrow_rows(dir: &Path, test: &str) -> Option<(String, Rows)> {
    let python = service("KDIRECT_TEST_PYARROW", test)?;
    let script = r#"
import sys
import pyarrow.dataset as ds
d = ds.dataset(sys.argv[1], format="parquet")
t = d.to_table()
for f in t.schema:
    print("field", f.name, f.type)
parts = t.column("partition").to_pylist()
offs = t.column("offset").to_pylist()
for p, o in zip(parts, offs):
    print(p, o)
"#;
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("{test}: running {python}: {e}"));
    assert!(
        out.status.success(),
        "{test}: pyarrow: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut schema = String::new();
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("field ") {
            schema.push_str(f);
            schema.push('\n');
            continue;
        }
        let (p, o) = line.split_once(' ').unwrap();
        *seen
            .entry((p.parse().unwrap(), o.parse().unwrap()))
            .or_insert(0) += 1;
    }
    Some((schema, seen))
}

/// Spark's Kafka schema as pyarrow prints it, keys, tombstones and headers read back.
#[test]
fn pyarrow_reads_the_parquet_sink_with_sparks_kafka_schema() {
    let fake = FakeCluster::builder().topic("pq", 2).start().unwrap();
    for p in 0..2 {
        let recs: Vec<FakeRecord> = (0..50)
            .map(|i| {
                FakeRecord::value(Bytes::from(format!("v{i}")))
                    .with_key(Bytes::from(format!("k{i}")))
                    .with_header("h", Some(Bytes::from("x")))
                    .with_timestamp(1_700_000_000_000 + i)
            })
            .collect();
        fake.append_records("pq", p, &recs, Codec::Zstd).unwrap();
    }
    let dir = tempdir("pyarrow");
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "pq",
            "--until-latest",
        ])
        .args(["--max-offsets-per-batch", "30", "--sink"])
        .arg(format!("parquet:{}", dir.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = parquet_rows(&dir);
    assert_eq!(ours.len(), 100);
    assert!(ours.values().all(|n| *n == 1));
    // A second run resumes from the sink's log: nothing new, nothing twice.
    let again = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "pq",
            "--until-latest",
            "--sink",
        ])
        .arg(format!("parquet:{}", dir.display()))
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(parquet_rows(&dir), ours);
    let Some((schema, seen)) = pyarrow_rows(
        &dir,
        "pyarrow_reads_the_parquet_sink_with_sparks_kafka_schema",
    ) else {
        return;
    };
    assert_eq!(seen, ours, "pyarrow sees other rows than the parquet crate");
    assert_eq!(
        schema,
        "key binary\nvalue binary\ntopic string\npartition int32\noffset int64\n\
         timestamp timestamp[ms, tz=UTC]\ntimestampType int32\n\
         headers list<element: struct<key: string not null, value: binary> not null>\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A batch larger than `--memory-mib` (read in chunks, issue 32) is one Parquet file: 8
/// partitions × 192 records of 1 kB (~1.5 MB) under a 1 MiB budget, as one batch.
#[test]
fn the_cli_writes_a_batch_larger_than_its_memory_as_one_parquet_file() {
    let fake = FakeCluster::builder().topic("wide", 8).start().unwrap();
    for p in 0..8 {
        for _ in 0..12 {
            let recs: Vec<FakeRecord> = (0..16)
                .map(|_| FakeRecord::value(Bytes::from(vec![b'v'; 1000])))
                .collect();
            fake.append_records("wide", p, &recs, Codec::None).unwrap();
        }
    }
    let dir = tempdir("parquet-chunked-cli");
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "wide",
            "--until-latest",
        ])
        .args([
            "--memory-mib",
            "1",
            "--max-offsets-per-batch",
            "10000000",
            "--stats",
        ])
        .arg("--sink")
        .arg(format!("parquet:{}", dir.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("batches=1 "), "{stderr}");
    let visible: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('_'))
        .collect();
    assert_eq!(
        visible,
        ["part-0000000000-000.parquet"],
        "one batch, one file"
    );
    let rows = parquet_rows(&dir);
    assert_eq!(rows.len(), 8 * 192);
    assert!(rows.values().all(|n| *n == 1));
    let _ = std::fs::remove_dir_all(&dir);
}
