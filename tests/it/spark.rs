//! Migration from Spark (issue 16 item 6): `kdirect offsets import-spark` reads a Structured
//! Streaming checkpoint and writes where Spark stopped into a store; `kdirect consume --store`
//! then reads exactly the records after Spark's positions.
//!
//! Two checkpoints:
//! - one written by **Apache Spark itself** (3.5.4, spark-sql-kafka-0-10, local mode, from
//!   Maven Central: `tests/spark/spark.sh`, run once for this file by
//!   `import_spark_from_a_real_spark_checkpoint` against Apache Kafka), with an uncommitted
//!   last batch made the way a crash leaves it (Spark wrote `offsets/N`, the sink never
//!   finished, so `commits/N` is absent) and a query with two Kafka sources;
//! - one written by hand in the same format, against kdirect's fake broker, so plain
//!   `cargo test` covers the command too.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use bytes::Bytes;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::real_kafka::{topic, Kafka};
use crate::support::{service, tempdir};

fn kdirect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn ok(args: &[&str]) -> String {
    let o = kdirect(args);
    assert!(
        o.status.success(),
        "kdirect {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

pub(crate) fn refused(args: &[&str]) -> String {
    let o = kdirect(args);
    assert!(!o.status.success(), "kdirect {args:?} should fail");
    String::from_utf8(o.stderr).unwrap()
}

/// `kdirect consume --store SPEC -g G --starting none --until-latest`: the (partition, offset)
/// pairs read. `--starting none` fails on any partition the store has no position for, so
/// every record read started from an imported position.
pub(crate) fn consume(
    boot: &str,
    topic: &str,
    store: &str,
    group: &str,
    dir: &Path,
) -> BTreeSet<(i64, i64)> {
    let out = dir.join(format!("out-{}.jsonl", group));
    ok(&[
        "consume",
        "-b",
        boot,
        "-t",
        topic,
        "--starting",
        "none",
        "--until-latest",
        "--store",
        store,
        "-g",
        group,
        "--output",
        out.to_str().unwrap(),
    ]);
    let mut seen = BTreeSet::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (
            v["partition"].as_i64().unwrap(),
            v["offset"].as_i64().unwrap(),
        );
        assert!(seen.insert(key), "{key:?} read twice");
    }
    seen
}

/// Every (partition, offset) in `[from[p], until[p])`.
pub(crate) fn expected(from: &[i64], until: &[i64]) -> BTreeSet<(i64, i64)> {
    let mut out = BTreeSet::new();
    for (p, (&f, &u)) in from.iter().zip(until).enumerate() {
        for o in f..u {
            out.insert((p as i64, o));
        }
    }
    out
}

/// The offsets a source line of `offsets/N` holds for `topic`, by partition.
fn spark_line(file: &Path, source: usize, topic: &str) -> Vec<i64> {
    let text = std::fs::read_to_string(file).unwrap();
    let line = text.lines().nth(2 + source).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let parts = v[topic].as_object().unwrap();
    (0..parts.len())
        .map(|p| parts[&p.to_string()].as_i64().unwrap())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn last_batch(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("offsets"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap()
}

#[test]
fn import_spark_from_a_real_spark_checkpoint() {
    let test = "import_spark_from_a_real_spark_checkpoint";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let Some(spark) = service("KDIRECT_TEST_SPARK", test) else {
        return;
    };
    let a = topic("spark-a");
    let b = topic("spark-b");
    kafka.create(&a, 2, &[]);
    kafka.create(&b, 1, &[]);
    kafka.produce(&a, 2, 100, &[]);
    kafka.produce(&b, 1, 20, &[]);
    let tmp = tempdir("spark");
    let one = tmp.join("one");
    let two = tmp.join("two");
    // Spark once for the whole file: query `one` reads topic a, query `two` reads a and b as two
    // sources; at most 30 records per micro-batch, so each query writes several batches.
    let run = Command::new("bash")
        .arg(&spark)
        .args(["run", &kafka.bootstrap, "30"])
        .arg(format!("{}={a}", one.display()))
        .arg(format!("{}={a}+{b}", two.display()))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "Spark failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    // After Spark stopped, more records: what kdirect must read.
    kafka.produce(&a, 2, 60, &[]);
    let ends = kafka.end_offsets(&a);
    assert_eq!(ends, vec![80, 80]);

    // Every batch committed: where Spark stopped is the last offsets file.
    let last = last_batch(&one);
    assert!(last >= 2, "Spark wrote {last} batches");
    let stopped = spark_line(&one.join(format!("offsets/{last}")), 0, &a);
    assert_eq!(stopped, vec![50, 50], "Spark read all 100 records");
    let ckpt = format!("checkpoint:{}", tmp.join("kd-one").display());
    let dry = ok(&[
        "offsets",
        "import-spark",
        one.to_str().unwrap(),
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &kafka.bootstrap,
    ]);
    assert!(
        dry.contains("TOPIC\tPARTITION\tNEW-OFFSET\tSPARK-BATCH"),
        "{dry}"
    );
    assert!(dry.contains(&format!("{a}\t0\t50\t{last}")), "{dry}");
    assert!(dry.contains("dry run"), "{dry}");
    assert!(!tmp.join("kd-one").exists(), "a dry run creates nothing");
    ok(&[
        "offsets",
        "import-spark",
        one.to_str().unwrap(),
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &kafka.bootstrap,
        "--execute",
    ]);
    let read = consume(&kafka.bootstrap, &a, &ckpt, "g", &tmp);
    assert_eq!(read, expected(&stopped, &ends));

    // The same checkpoint as a crash leaves it: offsets/N written, commits/N not.
    let unc = tmp.join("uncommitted");
    copy_dir(&one, &unc);
    std::fs::remove_file(unc.join(format!("commits/{last}"))).unwrap();
    let _ = std::fs::remove_file(unc.join(format!("commits/.{last}.crc")));
    let unc_s = unc.to_str().unwrap();
    let err = refused(&[
        "offsets",
        "import-spark",
        unc_s,
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &kafka.bootstrap,
    ]);
    assert!(err.contains(&format!("batch {last} was planned")), "{err}");
    assert!(err.contains("--take committed or --take planned"), "{err}");
    // --take committed: the last committed batch's end, into Kafka's group offsets.
    let committed = spark_line(&unc.join(format!("offsets/{}", last - 1)), 0, &a);
    let group = topic("spark-group");
    let dry = ok(&[
        "offsets",
        "import-spark",
        unc_s,
        "--store",
        "kafka",
        "-g",
        &group,
        "-b",
        &kafka.bootstrap,
        "--take",
        "committed",
    ]);
    assert!(
        dry.contains(&format!("{a}\t1\t{}\t{}", committed[1], last - 1)),
        "{dry}"
    );
    ok(&[
        "offsets",
        "import-spark",
        unc_s,
        "--store",
        "kafka",
        "-g",
        &group,
        "-b",
        &kafka.bootstrap,
        "--take",
        "committed",
        "--execute",
    ]);
    let read = consume(&kafka.bootstrap, &a, "kafka", &group, &tmp);
    assert_eq!(read, expected(&committed, &ends), "batch {last} read again");
    // --take planned: the uncommitted batch's end.
    let planned_store = format!("checkpoint:{}", tmp.join("kd-planned").display());
    ok(&[
        "offsets",
        "import-spark",
        unc_s,
        "--store",
        &planned_store,
        "-g",
        "p",
        "-b",
        &kafka.bootstrap,
        "--take",
        "planned",
        "--execute",
    ]);
    let read = consume(&kafka.bootstrap, &a, &planned_store, "p", &tmp);
    assert_eq!(read, expected(&stopped, &ends), "batch {last} skipped");

    // Two Kafka sources: refused unless --source says which.
    let two_s = two.to_str().unwrap();
    let err = refused(&[
        "offsets",
        "import-spark",
        two_s,
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &kafka.bootstrap,
    ]);
    assert!(err.contains("2 Kafka sources"), "{err}");
    assert!(
        err.contains(&format!("source 1: Kafka, topics {b}")),
        "{err}"
    );
    let dry = ok(&[
        "offsets",
        "import-spark",
        two_s,
        "--source",
        "1",
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &kafka.bootstrap,
    ]);
    let b_last = last_batch(&two);
    assert!(dry.contains(&format!("{b}\t0\t20\t{b_last}")), "{dry}");
    assert!(!dry.contains(&format!("{a}\t")), "{dry}");
    let _ = std::fs::remove_dir_all(&tmp);
}

const META: &str = r#"{"batchWatermarkMs":0,"batchTimestampMs":1796153251401,"conf":{"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider","spark.sql.streaming.multipleWatermarkPolicy":"min","spark.sql.shuffle.partitions":"1"}}"#;

/// A checkpoint written by hand in Spark 3.5's format (the shape `tests/spark` records from
/// real Spark): query metadata, `sources/0/0` with its leading NUL, batch 0 committed, batch 1
/// planned but not committed; source 1 is a file source (`{"logOffset":…}`), not Kafka.
fn hand_written(dir: &Path, topic: &str, b0: [i64; 2], b1: [i64; 2]) {
    for d in ["offsets", "commits", "sources/0", "sources/1"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join("metadata"),
        "{\"id\":\"5eed4e37-45d9-4140-866f-dafefb6b779e\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("sources/0/0"),
        format!("\0v1\n{{\"{topic}\":{{\"0\":0,\"1\":0}}}}"),
    )
    .unwrap();
    for (id, o, lo) in [(0, b0, 0), (1, b1, 1)] {
        std::fs::write(
            dir.join(format!("offsets/{id}")),
            format!(
                "v1\n{META}\n{{\"{topic}\":{{\"1\":{},\"0\":{}}}}}\n{{\"logOffset\":{lo}}}",
                o[1], o[0]
            ),
        )
        .unwrap();
    }
    std::fs::write(dir.join("commits/0"), "v1\n{\"nextBatchWatermarkMs\":0}").unwrap();
}

#[test]
fn import_spark_hand_written_checkpoint_against_the_fake_broker() {
    let fake = FakeCluster::builder()
        .brokers(1)
        .topic("hs", 2)
        .start()
        .unwrap();
    for p in 0..2 {
        let recs: Vec<FakeRecord> = (0..100)
            .map(|i| FakeRecord::value(Bytes::from(format!("{p}:{i}"))))
            .collect();
        fake.append_records("hs", p, &recs, Codec::Lz4).unwrap();
    }
    let boot = fake.bootstrap();
    let tmp = tempdir("spark-hand");
    let spark = tmp.join("spark");
    hand_written(&spark, "hs", [30, 20], [60, 45]);
    let spark_s = spark.to_str().unwrap();
    let ckpt = format!("checkpoint:{}", tmp.join("kd").display());
    let err = refused(&[
        "offsets",
        "import-spark",
        spark_s,
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &boot,
    ]);
    assert!(err.contains("batch 1 was planned"), "{err}");
    let dry = ok(&[
        "offsets",
        "import-spark",
        spark_s,
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &boot,
        "--take",
        "committed",
    ]);
    assert!(
        dry.contains("query 5eed4e37-45d9-4140-866f-dafefb6b779e"),
        "{dry}"
    );
    assert!(dry.contains("hs\t0\t30\t0\nhs\t1\t20\t0\n"), "{dry}");
    assert!(dry.contains("as batch 0"), "{dry}");
    ok(&[
        "offsets",
        "import-spark",
        spark_s,
        "--store",
        &ckpt,
        "-g",
        "g",
        "-b",
        &boot,
        "--take",
        "committed",
        "--execute",
    ]);
    let shown = ok(&["offsets", "show", "--store", &ckpt, "-g", "g"]);
    assert!(shown.contains("last committed batch 0"), "{shown}");
    let read = consume(&boot, "hs", &ckpt, "g", &tmp);
    assert_eq!(read, expected(&[30, 20], &[100, 100]));

    // A position past the log's end is refused with the range, and nothing is written.
    let far = tmp.join("far");
    hand_written(&far, "hs", [30, 500], [60, 600]);
    let other = format!("checkpoint:{}", tmp.join("kd-far").display());
    let err = refused(&[
        "offsets",
        "import-spark",
        far.to_str().unwrap(),
        "--store",
        &other,
        "-g",
        "g",
        "-b",
        &boot,
        "--take",
        "planned",
        "--execute",
    ]);
    assert!(
        err.contains("hs-1: Spark's position 600 is outside the log [0, 100]"),
        "{err}"
    );
    assert!(!tmp.join("kd-far").exists(), "{err}");
    // A malformed file names itself and the line.
    std::fs::write(
        far.join("offsets/1"),
        format!("v1\n{META}\n{{\"hs\":{{\"0\":"),
    )
    .unwrap();
    let err = refused(&[
        "offsets",
        "import-spark",
        far.to_str().unwrap(),
        "--store",
        &other,
        "-g",
        "g",
        "-b",
        &boot,
        "--take",
        "planned",
    ]);
    assert!(
        err.contains("offsets/1 line 3: source 0 is not JSON"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `bytes` as lowercase hex, as `SparkDelta read` prints values.
#[cfg(feature = "delta")]
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What Apache Spark (delta-spark, local mode) reads from the Delta table at `table`
/// (`SparkDelta read`): its schema as Spark prints it, each `txn` app id's version in Spark's
/// snapshot, and each row's (topic, partition, offset, value as hex or `-` for null).
#[cfg(feature = "delta")]
pub(crate) struct SparkRead {
    pub(crate) schema: String,
    pub(crate) txns: std::collections::BTreeMap<String, i64>,
    pub(crate) rows: Vec<(String, i32, i64, String)>,
}

#[cfg(feature = "delta")]
pub(crate) fn spark_read(spark: &str, table: &Path) -> SparkRead {
    let out = Command::new("bash")
        .arg(spark)
        .args(["delta", "read"])
        .arg(table)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Spark failed to read {}: {}",
        table.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut read = SparkRead {
        schema: String::new(),
        txns: Default::default(),
        rows: Vec::new(),
    };
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut f = line.split(' ');
        match f.next() {
            Some("SCHEMA") => read.schema = f.collect::<Vec<_>>().join(" "),
            Some("TXN") => {
                let (app, version) = (f.next().unwrap(), f.next().unwrap());
                read.txns.insert(app.to_owned(), version.parse().unwrap());
            }
            Some("ROW") => {
                let v: Vec<&str> = f.collect();
                read.rows.push((
                    v[0].to_owned(),
                    v[1].parse().unwrap(),
                    v[2].parse().unwrap(),
                    v[3].to_owned(),
                ));
            }
            _ => {}
        }
    }
    read
}

/// Issue 34 item 5: Apache Spark with delta-spark (`tests/spark`, local mode,
/// `DeltaSparkSessionExtension`) reads the table `kdirect consume --sink delta:` wrote over
/// three runs (the second finds nothing new, the third reads records appended since): every
/// (partition, offset) once with its value (keys, headers and a null value among them), in
/// Spark's Kafka source schema as Spark itself names the types, and the `txn` versions in
/// Spark's snapshot are the ones kdirect committed (delta-rs reads the same) — the last offset
/// written per partition, kafka-delta-ingest's `<topic>-<partition>`.
#[cfg(feature = "delta")]
#[test]
fn spark_reads_the_delta_sink_every_offset_once() {
    let test = "spark_reads_the_delta_sink_every_offset_once";
    let Some(spark) = service("KDIRECT_TEST_SPARK", test) else {
        return;
    };
    let fake = FakeCluster::builder().topic("sd", 2).start().unwrap();
    let value = |p: i32, i: i64| (i % 7 != 3).then(|| format!("p{p}-v{i}"));
    let produce = |p: i32, from: i64, n: i64| {
        let recs: Vec<FakeRecord> = (from..from + n)
            .map(|i| FakeRecord {
                key: Some(Bytes::from(format!("k{i}"))),
                value: value(p, i).map(Bytes::from),
                headers: vec![("h".to_owned(), Some(Bytes::from("x")))],
                timestamp: 1_700_000_000_000 + i,
                offset_delta: None,
            })
            .collect();
        fake.append_records("sd", p, &recs, Codec::Zstd).unwrap();
    };
    produce(0, 0, 50);
    produce(1, 0, 40);
    let tmp = tempdir("spark-delta");
    let table = tmp.join("table");
    let consume = || {
        ok(&[
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "sd",
            "--until-latest",
            "--max-offsets-per-batch",
            "30",
            "--sink",
            &format!("delta:{}", table.display()),
        ]);
    };
    consume();
    consume();
    produce(0, 50, 25);
    consume();
    let ends = [75i64, 40];

    let read = spark_read(&spark, &table);
    assert_eq!(
        read.schema,
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,\
         timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    );
    let mut seen = std::collections::BTreeMap::new();
    for (topic, p, o, v) in &read.rows {
        assert_eq!(topic, "sd");
        assert!(seen.insert((*p, *o), v.clone()).is_none(), "{p}/{o} twice");
    }
    let want: std::collections::BTreeMap<(i32, i64), String> = (0..2)
        .flat_map(|p| {
            (0..ends[p as usize]).map(move |i| {
                let v = value(p, i).map_or_else(|| "-".to_owned(), |v| hex(v.as_bytes()));
                ((p, i), v)
            })
        })
        .collect();
    assert_eq!(
        seen, want,
        "Spark reads other rows or values than were produced"
    );

    // The positions: what Spark's snapshot holds is what kdirect committed, as delta-rs
    // (kdirect's own dependency, not its code) reads it too.
    let (_, committed) = crate::lakehouse::delta_rows(&table, &["sd-0", "sd-1"]);
    assert_eq!(committed, [Some(74), Some(39)]);
    let spark_txns: Vec<Option<i64>> = ["sd-0", "sd-1"]
        .iter()
        .map(|a| read.txns.get(*a).copied())
        .collect();
    assert_eq!(spark_txns, committed, "Spark's txns: {:?}", read.txns);
    assert_eq!(read.txns.len(), 2, "{:?}", read.txns);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--sink delta: --value-schema DDL`, read by Apache Spark (delta-spark): the table's
/// schema is the DDL's fields (as Spark itself prints them: the DDL round-trips) then the
/// Kafka columns, and every offset is one row holding its JSON value's fields (a missing
/// field null, a field the schema does not name dropped).
#[cfg(feature = "delta")]
#[test]
fn spark_reads_json_values_the_delta_sink_wrote_as_columns() {
    let test = "spark_reads_json_values_the_delta_sink_wrote_as_columns";
    let Some(spark) = service("KDIRECT_TEST_SPARK", test) else {
        return;
    };
    let fake = FakeCluster::builder().topic("sj", 2).start().unwrap();
    crate::lakehouse::produce_json(&fake, "sj", 0, 0, 40);
    crate::lakehouse::produce_json(&fake, "sj", 1, 0, 25);
    let tmp = tempdir("spark-json");
    let table = tmp.join("table");
    ok(&[
        "consume",
        "-b",
        &fake.bootstrap(),
        "-t",
        "sj",
        "--until-latest",
        "--max-offsets-per-batch",
        "30",
        "--sink",
        &format!("delta:{}", table.display()),
        "--value-schema",
        crate::lakehouse::VALUE_DDL,
    ]);
    let out = Command::new("bash")
        .arg(&spark)
        .args(["delta", "json"])
        .arg(&table)
        .arg("partition,offset,id,name,price,tags,at,who,key")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Spark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let schema = text
        .lines()
        .find_map(|l| l.strip_prefix("SCHEMA "))
        .unwrap_or_else(|| panic!("no schema in {text}"));
    assert_eq!(
        schema,
        "struct<id:bigint,name:string,price:double,tags:array<string>,at:timestamp,\
         who:struct<city:string>,key:binary,topic:string,partition:int,offset:bigint,\
         timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    );
    let mut seen = std::collections::BTreeMap::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("JSON ")) {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let (p, o) = (
            row["partition"].as_i64().unwrap(),
            row["offset"].as_i64().unwrap(),
        );
        assert!(seen.insert((p, o), row).is_none(), "{p}/{o} twice");
    }
    assert_eq!(seen.len(), 65);
    for ((p, i), row) in &seen {
        assert_eq!(row["id"], serde_json::json!(p * 1000 + i), "{row}");
        let name = (i % 10 != 3).then(|| format!("n{i}"));
        assert_eq!(
            row.get("name").and_then(|n| n.as_str()),
            name.as_deref(),
            "{row}"
        );
        assert_eq!(row["price"], serde_json::json!(*i as f64 * 0.5), "{row}");
        assert_eq!(
            row["tags"],
            serde_json::json!([format!("t{i}"), "x"]),
            "{row}"
        );
        let at = row["at"].as_str().unwrap();
        assert!(
            at.starts_with(&format!("2026-12-08T01:02:{:02}", i % 60)),
            "{row}"
        );
        assert_eq!(
            row["who"]["city"],
            serde_json::json!(format!("c{p}")),
            "{row}"
        );
        assert!(row.get("extra").is_none(), "{row}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Issue 34 item 5, a table begun by Spark: Spark Structured Streaming's Kafka source
/// (`includeHeaders`, so the same eight columns as kdirect's) into Spark's Delta sink, 30
/// records per micro-batch, for the 100 records there were; then `kdirect consume --sink
/// delta:` continues Spark's table from where Spark's checkpoint says it stopped. Spark
/// declares every column and nested field nullable (`headers` is `array<struct<key: string,
/// value: binary>>` with nullable elements and a nullable key) where the sink writes some
/// not null: the sink takes such a table (`DeltaSink::open` refused it before). Spark then
/// reads every offset of the topic once, its 100 rows and kdirect's 60 after them, and the
/// table holds kdirect's positions as `txn`s beside Spark's own.
#[cfg(feature = "delta")]
#[test]
fn the_delta_sink_continues_a_table_begun_by_sparks_delta_sink() {
    let test = "the_delta_sink_continues_a_table_begun_by_sparks_delta_sink";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let Some(spark) = service("KDIRECT_TEST_SPARK", test) else {
        return;
    };
    let t = topic("spark-delta");
    kafka.create(&t, 2, &[]);
    kafka.produce(&t, 2, 100, &["--headers"]);
    let tmp = tempdir("spark-delta-continue");
    let (ckpt, table) = (tmp.join("checkpoint"), tmp.join("table"));
    let run = Command::new("bash")
        .arg(&spark)
        .args(["delta", "stream", &kafka.bootstrap, &t, "30"])
        .args([&ckpt, &table])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "Spark failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let last = last_batch(&ckpt);
    let stopped = spark_line(&ckpt.join(format!("offsets/{last}")), 0, &t);
    assert_eq!(stopped, [50, 50], "Spark read all 100 records");
    kafka.produce(&t, 2, 60, &["--headers", "--from", "100"]);
    let starting = format!("{{\"{t}\":{{\"0\":{},\"1\":{}}}}}", stopped[0], stopped[1]);
    let before = spark_read(&spark, &table);
    assert_eq!(before.rows.len(), 100);
    ok(&[
        "consume",
        "-b",
        &kafka.bootstrap,
        "-t",
        &t,
        "--starting",
        &starting,
        "--until-latest",
        "--sink",
        &format!("delta:{}", table.display()),
    ]);
    let after = spark_read(&spark, &table);
    let mut seen: Vec<(i32, i64)> = after.rows.iter().map(|r| (r.1, r.2)).collect();
    seen.sort_unstable();
    let want: Vec<(i32, i64)> = (0..2).flat_map(|p| (0..80).map(move |o| (p, o))).collect();
    assert_eq!(seen, want, "every offset of both partitions once");
    // Spark's rows are still there as Spark wrote them.
    for row in &before.rows {
        assert!(after.rows.contains(row), "Spark's row {row:?} is gone");
    }
    // kdirect's positions, as kafka-delta-ingest keeps them (the last offset written).
    assert_eq!(
        after.txns.get(&format!("{t}-0")),
        Some(&79),
        "{:?}",
        after.txns
    );
    assert_eq!(
        after.txns.get(&format!("{t}-1")),
        Some(&79),
        "{:?}",
        after.txns
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
