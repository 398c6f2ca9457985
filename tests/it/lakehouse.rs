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

/// Runs `script` with `python` and `args`, failing the test (naming `what`) if it fails: the
/// schema it printed (its `field NAME TYPE` lines, each as `NAME TYPE\n`) and its other lines.
fn run_python(
    python: &str,
    script: &str,
    args: &[&std::ffi::OsStr],
    what: &str,
) -> (String, Vec<String>) {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: running {python}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut schema, mut lines) = (String::new(), Vec::new());
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        match line.strip_prefix("field ") {
            Some(f) => {
                schema.push_str(f);
                schema.push('\n');
            }
            None => lines.push(line.to_owned()),
        }
    }
    (schema, lines)
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
    let (schema, lines) = run_python(
        &python,
        script,
        &[dir.as_os_str()],
        &format!("{test}: pyarrow"),
    );
    let mut seen = BTreeMap::new();
    for line in lines {
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

/// What delta-rs (not kdirect's code) reads from the Delta table at `dir`: every
/// (partition, offset) of the files its snapshot lists, counted (the parquet crate reads them),
/// and the txn version of each of `app_ids`.
#[cfg(feature = "delta")]
pub(crate) fn delta_rows(dir: &Path, app_ids: &[&str]) -> (Rows, Vec<Option<i64>>) {
    use deltalake_core::DeltaTableBuilder;
    crate::support::rt().block_on(async {
        let url = url::Url::from_directory_path(std::fs::canonicalize(dir).unwrap()).unwrap();
        let table = DeltaTableBuilder::from_url(url)
            .unwrap()
            .load()
            .await
            .unwrap();
        let mut rows = Rows::new();
        let uris: Vec<String> = table.get_file_uris().unwrap().collect();
        for uri in uris {
            let path = url::Url::parse(&uri)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .unwrap_or_else(|| uri.clone().into());
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{uri}: {e}"));
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
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
    })
}

/// The Python that reads Delta tables: `KDIRECT_TEST_PYARROW` (tests/services.sh's venv, which
/// has `deltalake` and `pyarrow` from PyPI) or `python3`, if it imports both. `None` after a
/// printed reason otherwise, or a failure under KDIRECT_REQUIRE_SERVICES=1.
#[cfg(feature = "delta")]
pub(crate) fn delta_python(test: &str) -> Option<String> {
    let python = std::env::var("KDIRECT_TEST_PYARROW")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".to_owned());
    let ok = Command::new(&python)
        .args(["-c", "import deltalake, pyarrow"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    if std::env::var_os("KDIRECT_REQUIRE_SERVICES").is_some_and(|v| v == "1") {
        panic!(
            "{test}: {python} cannot import deltalake and pyarrow, and KDIRECT_REQUIRE_SERVICES=1 \
             forbids skipping (tests/services.sh installs them into target/pyarrow)"
        );
    }
    println!(
        "skipping {test}: {python} cannot import deltalake and pyarrow (pip install deltalake \
         pyarrow, or run tests/run.sh)"
    );
    None
}

/// What the Python `deltalake` package (delta-rs's Python binding, from PyPI) reads from the
/// table at `dir`: the schema (one line per field), every (partition, offset) counted, and the
/// txn version of each of `app_ids`.
#[cfg(feature = "delta")]
pub(crate) fn deltalake_rows(
    python: &str,
    dir: &Path,
    app_ids: &[&str],
) -> (String, Rows, Vec<Option<i64>>) {
    let script = r#"
import sys
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
t = dt.to_pyarrow_table()
for f in t.schema:
    print("field", f.name, f.type)
for p, o in zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()):
    print(p, o)
for app in sys.argv[2:]:
    print("txn", app, dt.transaction_version(app))
"#;
    let mut args = vec![dir.as_os_str()];
    args.extend(app_ids.iter().map(std::ffi::OsStr::new));
    let (schema, lines) = run_python(python, script, &args, "deltalake");
    let (mut rows, mut txns) = (Rows::new(), Vec::new());
    for line in lines {
        if let Some(t) = line.strip_prefix("txn ") {
            let (_, v) = t.rsplit_once(' ').unwrap();
            txns.push(v.parse().ok());
        } else {
            let (p, o) = line.split_once(' ').unwrap();
            *rows
                .entry((p.parse().unwrap(), o.parse().unwrap()))
                .or_insert(0) += 1;
        }
    }
    (schema, rows, txns)
}

/// `kdirect consume --sink delta:PATH` read back by the Python `deltalake` package: every
/// offset once, Spark's Kafka schema (timestamp in microseconds, Delta's type), and each
/// partition's txn (kafka-delta-ingest's `<topic>-<partition>`) at the last offset written.
/// A second run adds nothing; a third, after more records, adds exactly those.
#[cfg(feature = "delta")]
#[test]
fn deltalake_reads_the_delta_sink_every_offset_once() {
    let test = "deltalake_reads_the_delta_sink_every_offset_once";
    let fake = FakeCluster::builder().topic("dl", 2).start().unwrap();
    let produce = |p: i32, from: i64, n: i64| {
        let recs: Vec<FakeRecord> = (from..from + n)
            .map(|i| {
                FakeRecord::value(Bytes::from(format!("v{i}")))
                    .with_key(Bytes::from(format!("k{i}")))
                    .with_header("h", Some(Bytes::from("x")))
                    .with_timestamp(1_700_000_000_000 + i)
            })
            .collect();
        fake.append_records("dl", p, &recs, Codec::Zstd).unwrap();
    };
    produce(0, 0, 50);
    produce(1, 0, 50);
    let dir = tempdir("delta-cli");
    let consume = || {
        let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &fake.bootstrap(), "-t", "dl"])
            .args(["--until-latest", "--max-offsets-per-batch", "30", "--sink"])
            .arg(format!("delta:{}", dir.display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    consume();
    consume();
    let once = |ends: [i64; 2]| -> Rows {
        (0..2)
            .flat_map(|p| (0..ends[p as usize]).map(move |o| ((p, o), 1)))
            .collect()
    };
    assert_eq!(
        delta_rows(&dir, &["dl-0", "dl-1"]),
        (once([50, 50]), vec![Some(49), Some(49)])
    );
    let Some(python) = delta_python(test) else {
        return;
    };
    let (schema, rows, txns) = deltalake_rows(&python, &dir, &["dl-0", "dl-1"]);
    assert_eq!(rows, once([50, 50]));
    assert_eq!(txns, [Some(49), Some(49)]);
    assert_eq!(
        schema,
        "key binary\nvalue binary\ntopic string\npartition int32\noffset int64\n\
         timestamp timestamp[us, tz=UTC]\ntimestampType int32\n\
         headers list<element: struct<key: string not null, value: binary> not null>\n"
    );
    produce(0, 50, 10);
    consume();
    let (_, rows, txns) = deltalake_rows(&python, &dir, &["dl-0", "dl-1"]);
    assert_eq!(rows, once([60, 50]));
    assert_eq!(txns, [Some(59), Some(49)]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The values' schema of the `--value-schema` tests, as Spark's DDL.
pub(crate) const VALUE_DDL: &str =
    "id BIGINT NOT NULL, name STRING, price DOUBLE, tags ARRAY<STRING>, \
                         at TIMESTAMP, who STRUCT<city: STRING>";

/// Appends `n` JSON values to `topic`-`p` from record `from` on: `id` is `p * 1000 + i`,
/// every tenth record has no `name`, and each has a field the schema does not name.
pub(crate) fn produce_json(fake: &FakeCluster, topic: &str, p: i32, from: i64, n: i64) {
    let recs: Vec<FakeRecord> = (from..from + n)
        .map(|i| {
            let name = if i % 10 == 3 {
                String::new()
            } else {
                format!(r#""name": "n{i}", "#)
            };
            FakeRecord::value(Bytes::from(format!(
                r#"{{"id": {}, {name}"price": {}, "tags": ["t{i}", "x"], "at": "2026-12-08T01:02:{:02}Z", "who": {{"city": "c{p}"}}, "extra": [1, 2]}}"#,
                i64::from(p) * 1000 + i,
                i as f64 * 0.5,
                i % 60
            )))
            .with_key(Bytes::from(format!("k{i}")))
        })
        .collect();
    fake.append_records(topic, p, &recs, Codec::Lz4).unwrap();
}

/// What the independent reader must see for record `i` of partition `p`, as the Python
/// script below prints it.
fn json_row(p: i32, i: i64) -> serde_json::Value {
    serde_json::json!([
        p,
        i,
        i64::from(p) * 1000 + i,
        if i % 10 == 3 {
            None
        } else {
            Some(format!("n{i}"))
        },
        i as f64 * 0.5,
        [format!("t{i}"), "x"],
        format!("2026-12-08T01:02:{:02}+00:00", i % 60),
        format!("c{p}"),
        format!("k{i}"),
    ])
}

/// Reads the table or dataset at `dir` with Python (`pyarrow.dataset`, or the `deltalake`
/// package when `delta`): the schema, one line per field, and each row as `json_row` has it.
fn python_json_rows(python: &str, dir: &Path, delta: bool) -> (String, Vec<serde_json::Value>) {
    let script = r#"
import sys, json
if sys.argv[2] == "delta":
    from deltalake import DeltaTable
    t = DeltaTable(sys.argv[1]).to_pyarrow_table()
else:
    import pyarrow.dataset as ds
    t = ds.dataset(sys.argv[1], format="parquet").to_table()
for f in t.schema:
    print("field", f.name, f.type)
for r in t.to_pylist():
    print(json.dumps([r["partition"], r["offset"], r["id"], r["name"], r["price"], r["tags"],
        r["at"].isoformat(), r["who"]["city"], r["key"].decode()]))
"#;
    let kind = std::ffi::OsStr::new(if delta { "delta" } else { "parquet" });
    let (schema, lines) = run_python(python, script, &[dir.as_os_str(), kind], "python");
    let mut rows: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows.sort_by_key(|r: &serde_json::Value| (r[0].as_i64(), r[1].as_i64()));
    (schema, rows)
}

/// The rows `json_row` gives for offsets `0..ends[p]` of partitions 0 and 1.
fn json_rows(ends: [i64; 2]) -> Vec<serde_json::Value> {
    (0..2)
        .flat_map(|p| (0..ends[p as usize]).map(move |i| json_row(p, i)))
        .collect()
}

fn consume_with_schema(
    fake: &FakeCluster,
    topic: &str,
    sink: &str,
    ddl: &str,
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["consume", "-b", &fake.bootstrap(), "-t", topic])
        .args(["--until-latest", "--max-offsets-per-batch", "25"])
        .args(["--sink", sink, "--value-schema", ddl])
        .output()
        .unwrap()
}

/// `--sink parquet:DIR --value-schema DDL`: each JSON value's fields are typed columns
/// (nested, lists, a UTC timestamp, a missing field null, a field not named dropped), read
/// back by pyarrow; a value that is not JSON fails its batch naming its partition and offset,
/// and what was committed before it stays, each offset once.
#[test]
fn the_parquet_sink_writes_json_values_as_the_columns_of_a_spark_ddl_schema() {
    let test = "the_parquet_sink_writes_json_values_as_the_columns_of_a_spark_ddl_schema";
    let fake = FakeCluster::builder().topic("js", 2).start().unwrap();
    produce_json(&fake, "js", 0, 0, 40);
    produce_json(&fake, "js", 1, 0, 30);
    let dir = tempdir("parquet-json");
    let sink = format!("parquet:{}", dir.display());
    let out = consume_with_schema(&fake, "js", &sink, VALUE_DDL);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = parquet_rows(&dir);
    assert_eq!(rows.len(), 70);
    assert!(rows.values().all(|n| *n == 1));
    // A value that is not one JSON object: the batch fails, naming it; nothing of it shows.
    fake.append_records(
        "js",
        1,
        &[FakeRecord::value(Bytes::from_static(
            b"{\"id\": 1} trailing",
        ))],
        Codec::None,
    )
    .unwrap();
    let bad = consume_with_schema(&fake, "js", &sink, VALUE_DDL);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "{stderr}");
    assert!(
        stderr.contains("js-1 offset 30: the value is not one JSON object"),
        "{stderr}"
    );
    assert_eq!(parquet_rows(&dir), rows);
    // NOT NULL is in the files (pyarrow.dataset's schema does not show it).
    let first = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .unwrap();
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(first).unwrap()).unwrap();
    let fields = reader.schema().fields().clone();
    assert!(
        !fields[0].is_nullable() && fields[1].is_nullable(),
        "{fields:?}"
    );
    // The schema is checked before anything is read.
    let typo = consume_with_schema(&fake, "js", &sink, "id BIGINT, at TIMESTMP");
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(
        stderr.contains("--value-schema")
            && stderr.contains("at character 15: unknown type 'TIMESTMP'"),
        "{stderr}"
    );
    let Some(python) = service("KDIRECT_TEST_PYARROW", test) else {
        return;
    };
    let (schema, seen) = python_json_rows(&python, &dir, false);
    assert_eq!(
        schema,
        "id int64\nname string\nprice double\ntags list<element: string>\n\
         at timestamp[us, tz=UTC]\nwho struct<city: string>\nkey binary\ntopic string\n\
         partition int32\noffset int64\ntimestamp timestamp[ms, tz=UTC]\ntimestampType int32\n\
         headers list<element: struct<key: string not null, value: binary> not null>\n"
    );
    assert_eq!(seen, json_rows([40, 30]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--sink delta:PATH --value-schema DDL`: the table's columns are the values' fields, then
/// the Kafka columns; the Python `deltalake` package reads every offset once with its fields;
/// a run with another schema is refused before it reads anything.
#[cfg(feature = "delta")]
#[test]
fn the_delta_sink_writes_json_values_as_the_columns_of_a_spark_ddl_schema() {
    let test = "the_delta_sink_writes_json_values_as_the_columns_of_a_spark_ddl_schema";
    let fake = FakeCluster::builder().topic("jd", 2).start().unwrap();
    produce_json(&fake, "jd", 0, 0, 40);
    produce_json(&fake, "jd", 1, 0, 30);
    let dir = tempdir("delta-json");
    let sink = format!("delta:{}", dir.display());
    let out = consume_with_schema(&fake, "jd", &sink, VALUE_DDL);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    produce_json(&fake, "jd", 0, 40, 10);
    let out = consume_with_schema(&fake, "jd", &sink, VALUE_DDL);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let once: Rows = (0..2)
        .flat_map(|p: i32| (0..[50, 30][p as usize]).map(move |o| ((p, o), 1)))
        .collect();
    assert_eq!(
        delta_rows(&dir, &["jd-0", "jd-1"]),
        (once, vec![Some(49), Some(29)])
    );
    let other = consume_with_schema(&fake, "jd", &sink, "id BIGINT NOT NULL, name STRING");
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success(), "{stderr}");
    assert!(
        stderr.contains("the table's schema is not the one the Delta sink writes"),
        "{stderr}"
    );
    let plain = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "jd",
            "--until-latest",
        ])
        .arg("--sink")
        .arg(&sink)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(
        !plain.status.success() && stderr.contains("not Spark's Kafka source schema"),
        "{stderr}"
    );
    let Some(python) = delta_python(test) else {
        return;
    };
    let (schema, seen) = python_json_rows(&python, &dir, true);
    assert_eq!(
        schema,
        "id int64\nname string\nprice double\ntags list<element: string>\n\
         at timestamp[us, tz=UTC]\nwho struct<city: string>\nkey binary\ntopic string\n\
         partition int32\noffset int64\ntimestamp timestamp[us, tz=UTC]\ntimestampType int32\n\
         headers list<element: struct<key: string not null, value: binary> not null>\n"
    );
    assert_eq!(seen, json_rows([50, 30]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--sink delta:PATH -G GROUP`: two members of one consumer group on Apache Kafka land a
/// 4-partition topic in one Delta table, the second joining while the first reads (a
/// rebalance), records arriving meanwhile; each member commits its own partitions' `txn`s.
/// Every offset is in the table once, the `txn`s at each partition's last offset, and both
/// members committed. `--sink parquet:` refuses a group (its log orders one writer's batches).
#[cfg(feature = "delta")]
#[test]
fn two_group_members_land_one_topic_in_one_delta_table_every_offset_once() {
    use std::process::Stdio;
    use std::time::Duration;
    let test = "two_group_members_land_one_topic_in_one_delta_table_every_offset_once";
    let Some(kafka) = crate::real_kafka::Kafka::single(test) else {
        return;
    };
    let t = crate::real_kafka::topic("delta-group");
    kafka.create(&t, 4, &[]);
    kafka.produce(&t, 4, 1200, &[]);
    let dir = tempdir("delta-group");
    let logs = tempdir("delta-group-logs");
    let group = format!("{t}-g");
    let member = |n: usize| {
        let log = std::fs::File::create(logs.join(format!("m{n}.log"))).unwrap();
        Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &kafka.bootstrap, "-t", &t, "-G", &group])
            .args(["--starting", "earliest", "--max-offsets-per-batch", "100"])
            .args([
                "--session-timeout-ms",
                "6000",
                "-X",
                "heartbeat.interval.ms=500",
            ])
            .arg("--sink")
            .arg(format!("delta:{}", dir.display()))
            .env("KDIRECT_LOG", "warn,kdirect::commit=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let rows = || -> usize {
        if !dir.join("_delta_log").exists() {
            return 0;
        }
        delta_rows(&dir, &[]).0.len()
    };
    let mut first = member(1);
    crate::support::wait_until(
        Duration::from_secs(90),
        "the first member's commits",
        || rows() >= 100,
    );
    let mut second = member(2);
    kafka.produce(&t, 4, 2000, &["--from", "1200"]);
    let ends = kafka.end_offsets(&t);
    let total: i64 = ends.iter().sum();
    let log = |n: usize| std::fs::read_to_string(logs.join(format!("m{n}.log"))).unwrap();
    crate::support::wait_until(
        Duration::from_secs(180),
        "every record in the table",
        || rows() as i64 >= total,
    );
    for c in [&first, &second] {
        crate::group::signal(c, "-TERM");
    }
    let (s1, s2) = (first.wait().unwrap(), second.wait().unwrap());
    assert!(s1.success() && s2.success(), "{}\n---\n{}", log(1), log(2));
    let app_ids: Vec<String> = (0..4).map(|p| format!("{t}-{p}")).collect();
    let app_ids: Vec<&str> = app_ids.iter().map(String::as_str).collect();
    let (seen, txns) = delta_rows(&dir, &app_ids);
    let once: Rows = (0..4)
        .flat_map(|p| (0..ends[p as usize]).map(move |o| ((p, o), 1)))
        .collect();
    assert_eq!(seen, once, "{}\n---\n{}", log(1), log(2));
    let last: Vec<Option<i64>> = ends.iter().map(|e| Some(e - 1)).collect();
    assert_eq!(txns, last);
    for n in [1, 2] {
        assert!(
            crate::kill::committed_once(&log(n)),
            "member {n} committed nothing: {}",
            log(n)
        );
    }
    // The Parquet sink's log is one writer's.
    let parquet = tempdir("parquet-group");
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &kafka.bootstrap,
            "-t",
            &t,
            "-G",
            "pq-group",
        ])
        .arg("--sink")
        .arg(format!("parquet:{}", parquet.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("cannot be shared by the members of a group"),
        "{stderr}"
    );
    for d in [dir, logs, parquet] {
        let _ = std::fs::remove_dir_all(d);
    }
}
