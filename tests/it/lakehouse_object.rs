//! Issue 34 on object storage: `--sink parquet:s3://BUCKET/PREFIX` against moto
//! (`KDIRECT_TEST_S3`, `http://HOST:PORT/BUCKET`) and `parquet:az://CONTAINER/PREFIX` against
//! Azurite (`KDIRECT_TEST_AZURE`, `http://HOST:PORT/ACCOUNT/CONTAINER`), both started by
//! tests/services.sh, read back by pyarrow (`KDIRECT_TEST_PYARROW`, PyPI's) through its own S3
//! and Azure clients: `pyarrow.dataset` on the prefix, which skips `_`/`.` names as it does on
//! a disk. Each test skips with a printed reason when its variables are unset (and fails then
//! under KDIRECT_REQUIRE_SERVICES=1).
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use kdirect::commit::object::Bucket;
use kdirect::sink::parquet::{ParquetOptions, ParquetSink};
use kdirect::sink::{BatchWriter, Sink};
use kdirect::{DirectStream, StartPolicy};
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::lakehouse::Rows;
use crate::support::{rt, service, tempdir, unique};

/// Azurite's documented development key (every copy of the emulator has it; not a secret).
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An object store under test: where the sink goes and how kdirect and pyarrow reach it.
pub(crate) struct Target {
    /// `s3://bucket` or `az://container`.
    pub(crate) root: String,
    /// The environment the CLI reads (AWS_* or AZURE_STORAGE_*).
    pub(crate) env: Vec<(&'static str, String)>,
    /// The same settings by object_store's names, for the library.
    config: Vec<(&'static str, String)>,
    /// pyarrow's filesystem: `s3 HOST:PORT` or `az ACCOUNT KEY HOST:PORT`.
    pyarrow_fs: Vec<String>,
    /// The bucket's name as pyarrow's paths start (`bucket`, `container`).
    bucket: String,
}

impl Target {
    fn config(&self) -> Vec<(&str, &str)> {
        self.config.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
}

pub(crate) fn s3(test: &str) -> Option<Target> {
    let v = service("KDIRECT_TEST_S3", test)?;
    let (endpoint, bucket) = v.rsplit_once('/').unwrap();
    let host = endpoint.trim_start_matches("http://").to_owned();
    let common = [
        ("allow_http", "true"),
        ("access_key_id", "test"),
        ("secret_access_key", "test"),
        ("region", "us-east-1"),
    ];
    let mut env = vec![("AWS_ENDPOINT", endpoint.to_owned())];
    let mut config = vec![("aws_endpoint", endpoint.to_owned())];
    for (k, v) in common {
        env.push((
            match k {
                "allow_http" => "AWS_ALLOW_HTTP",
                "access_key_id" => "AWS_ACCESS_KEY_ID",
                "secret_access_key" => "AWS_SECRET_ACCESS_KEY",
                _ => "AWS_REGION",
            },
            v.to_owned(),
        ));
        config.push((
            match k {
                "allow_http" => "aws_allow_http",
                "access_key_id" => "aws_access_key_id",
                "secret_access_key" => "aws_secret_access_key",
                _ => "aws_region",
            },
            v.to_owned(),
        ));
    }
    Some(Target {
        root: format!("s3://{bucket}"),
        env,
        config,
        pyarrow_fs: vec!["s3".into(), host],
        bucket: bucket.to_owned(),
    })
}

pub(crate) fn azure(test: &str) -> Option<Target> {
    let v = service("KDIRECT_TEST_AZURE", test)?;
    let (endpoint, container) = v.rsplit_once('/').unwrap();
    let (base, account) = endpoint.rsplit_once('/').unwrap();
    let host = base.trim_start_matches("http://").to_owned();
    Some(Target {
        root: format!("az://{container}"),
        env: vec![
            ("AZURE_STORAGE_ENDPOINT", endpoint.to_owned()),
            ("AZURE_STORAGE_ACCOUNT_NAME", account.to_owned()),
            ("AZURE_STORAGE_ACCESS_KEY", AZURITE_KEY.to_owned()),
            ("AZURE_ALLOW_HTTP", "true".to_owned()),
        ],
        config: vec![
            ("azure_storage_endpoint", endpoint.to_owned()),
            ("azure_storage_account_name", account.to_owned()),
            ("azure_storage_access_key", AZURITE_KEY.to_owned()),
            ("azure_allow_http", "true".to_owned()),
        ],
        pyarrow_fs: vec!["az".into(), account.to_owned(), AZURITE_KEY.into(), host],
        bucket: container.to_owned(),
    })
}

/// What pyarrow.dataset (PyPI's pyarrow, its own S3/Azure client) sees under `prefix` of the
/// target's bucket: the schema, every (partition, offset) counted, and the visible file
/// names. `None` (after a printed reason) without pyarrow.
pub(crate) fn pyarrow_rows(
    t: &Target,
    prefix: &str,
    test: &str,
) -> Option<(String, Rows, Vec<String>)> {
    let python = service("KDIRECT_TEST_PYARROW", test)?;
    let script = r#"
import sys
import pyarrow.dataset as ds
import pyarrow.fs as pafs
path, kind, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if kind == "s3":
    fs = pafs.S3FileSystem(endpoint_override=args[0], scheme="http", access_key="test",
                           secret_key="test", region="us-east-1")
else:
    fs = pafs.AzureFileSystem(account_name=args[0], account_key=args[1],
                              blob_storage_authority=args[2], blob_storage_scheme="http",
                              dfs_storage_authority=args[2], dfs_storage_scheme="http")
d = ds.dataset(path, format="parquet", filesystem=fs)
for f in d.files:
    print("file", f.rsplit("/", 1)[-1])
t = d.to_table()
for f in t.schema:
    print("field", f.name, f.type)
for p, o in zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()):
    print(p, o)
# Out before the interpreter's exit: the C++ S3 client's teardown at exit sometimes aborts
# ("terminate called without an active exception") after the answer was complete.
sys.stdout.flush()
import os
os._exit(0)
"#;
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(format!("{}/{prefix}", t.bucket))
        .args(&t.pyarrow_fs)
        .output()
        .unwrap_or_else(|e| panic!("{test}: running {python}: {e}"));
    assert!(
        out.status.success(),
        "{test}: pyarrow: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (mut schema, mut rows, mut files) = (String::new(), BTreeMap::new(), Vec::new());
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("field ") {
            schema.push_str(f);
            schema.push('\n');
        } else if let Some(f) = line.strip_prefix("file ") {
            files.push(f.to_owned());
        } else {
            let (p, o) = line.split_once(' ').unwrap();
            *rows
                .entry((p.parse().unwrap(), o.parse().unwrap()))
                .or_insert(0) += 1;
        }
    }
    files.sort();
    Some((schema, rows, files))
}

/// Topic `t` on a fake broker: 3 partitions × 40 records, keys, a header.
fn fake_topic(topic: &str) -> FakeCluster {
    let fake = FakeCluster::builder().topic(topic, 3).start().unwrap();
    for p in 0..3 {
        let recs: Vec<FakeRecord> = (0..40)
            .map(|i| {
                FakeRecord::value(Bytes::from(format!("v{p}-{i}")))
                    .with_key(Bytes::from(format!("k{i}")))
                    .with_header("h", Some(Bytes::from("x")))
                    .with_timestamp(1_700_000_000_000 + i)
            })
            .collect();
        fake.append_records(topic, p, &recs, Codec::Zstd).unwrap();
    }
    fake
}

fn every_offset() -> Rows {
    (0..3)
        .flat_map(|p| (0..40).map(move |o| ((p, o), 1)))
        .collect()
}

/// `kdirect consume --sink parquet:<target>/<prefix>` until the latest offsets, with the
/// target's environment.
fn consume(t: &Target, fake: &FakeCluster, topic: &str, prefix: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["consume", "-b", &fake.bootstrap(), "-t", topic])
        .args(["--until-latest", "--stats"])
        .args(if extra.is_empty() {
            &["--max-offsets-per-batch", "75"][..]
        } else {
            extra
        })
        .arg("--sink")
        .arg(format!("parquet:{}/{prefix}", t.root))
        .envs(t.env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// The CLI lands a topic on the object store; pyarrow.dataset on the prefix reads Spark's
/// Kafka schema with every offset once, the batches' `part-*` objects only (the log under
/// `_kdirect_metadata` skipped); a second run resumes from the log there and writes nothing
/// twice; more records later are appended as new batches.
fn the_cli_lands_a_topic_on(t: &Target, test: &str) {
    let fake = fake_topic("obj");
    let prefix = unique("pq");
    consume(t, &fake, "obj", &prefix, &[]);
    let again = consume(t, &fake, "obj", &prefix, &[]);
    assert!(
        again.contains("records=0 "),
        "the re-run read again: {again}"
    );
    let Some((schema, rows, files)) = pyarrow_rows(t, &prefix, test) else {
        return;
    };
    assert_eq!(rows, every_offset(), "{test}: what pyarrow sees");
    assert_eq!(
        schema,
        "key binary\nvalue binary\ntopic string\npartition int32\noffset int64\n\
         timestamp timestamp[ms, tz=UTC]\ntimestampType int32\n\
         headers list<element: struct<key: string not null, value: binary> not null>\n"
    );
    // 120 records in batches of at most 75 offsets: 2 batches.
    assert_eq!(
        files,
        ["part-0000000000-000.parquet", "part-0000000001-000.parquet"]
    );
}

#[test]
fn parquet_sink_on_s3_pyarrow_sees_every_offset_once() {
    let test = "parquet_sink_on_s3_pyarrow_sees_every_offset_once";
    if let Some(t) = s3(test) {
        the_cli_lands_a_topic_on(&t, test);
    }
}

#[test]
fn parquet_sink_on_azure_pyarrow_sees_every_offset_once() {
    let test = "parquet_sink_on_azure_pyarrow_sees_every_offset_once";
    if let Some(t) = azure(test) {
        the_cli_lands_a_topic_on(&t, test);
    }
}

/// A stream over the fake broker whose store is the sink's log, 75 offsets a batch (of the
/// 120: batch 0 and batch 1 hold every offset).
async fn stream(fake: &FakeCluster, topic: &str, sink: &ParquetSink) -> DirectStream {
    DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .topics(&[topic])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .max_offsets_per_trigger(75)
        .store(sink.log())
        .build()
        .await
        .unwrap()
}

/// The crash replay on object storage: batch 1 was written and its object uploaded under its
/// final name (what the process that crashed before `commits/1` leaves), but never committed.
/// pyarrow sees each offset once before the restart; the restart re-runs batch 1 from the log
/// with exactly its ranges and replaces the object; pyarrow then sees every offset exactly
/// once, and the log lists exactly the visible objects.
fn a_crash_between_upload_and_commit_is_replayed_once(t: &Target, test: &str) {
    let topic = "crash";
    let fake = fake_topic(topic);
    let prefix = unique("pq-crash");
    let url = format!("{}/{prefix}", t.root);
    let rt = rt();
    let local = tempdir("obj-crash");
    {
        let sink = rt
            .block_on(ParquetSink::open_object(
                &url,
                ParquetOptions::default(),
                &t.config(),
            ))
            .unwrap();
        let b1 = rt.block_on(async {
            let mut s = stream(&fake, topic, &sink).await;
            let b0 = s.next_batch().await.unwrap().unwrap();
            let mut w = sink.begin(b0.id()).unwrap();
            w.write(&b0).unwrap();
            w.commit().unwrap();
            s.commit(b0).await.unwrap();
            let b1 = s.next_batch().await.unwrap().unwrap();
            assert_eq!(b1.id(), 1);
            // The attempt's writer finishes; its store commit never comes (the crash).
            let mut w = sink.begin(1).unwrap();
            w.write(&b1).unwrap();
            w.commit().unwrap();
            // The same records, as the crashed attempt's uploaded object: written as the
            // sink writes them (a sink on a local directory) and uploaded under batch 1's
            // name by the object_store client.
            let disk = ParquetSink::open(&local, ParquetOptions::default()).unwrap();
            let mut w = disk.begin(1).unwrap();
            w.write(&b1).unwrap();
            w.commit().unwrap();
            b1.id()
        });
        let bucket = {
            let _in_rt = rt.enter();
            Bucket::open(Path::new(&url), &t.config()).unwrap()
        };
        let name = ParquetSink::file_name(b1);
        bucket
            .upload_file(&bucket.url().join(&name), &local.join(&name))
            .unwrap();
        assert_eq!(sink.last_committed().unwrap(), Some(0));
        assert!(!sink.is_committed(1).unwrap());
    }
    if let Some((_, rows, _)) = pyarrow_rows(t, &prefix, test) {
        // Batch 0 (offsets 0..25) and the uncommitted batch 1 (25..40), each offset once.
        assert_eq!(
            rows,
            every_offset(),
            "{test}: what pyarrow sees before the restart"
        );
    }
    // The restart.
    let sink = rt
        .block_on(ParquetSink::open_object(
            &url,
            ParquetOptions::default(),
            &t.config(),
        ))
        .unwrap();
    rt.block_on(async {
        let mut s = stream(&fake, topic, &sink).await;
        let mut replayed = false;
        while let Some(b) = s.next_batch().await.unwrap() {
            replayed |= b.id() == 1 && b.is_replay();
            let mut w = sink.begin(b.id()).unwrap();
            w.write(&b).unwrap();
            w.commit().unwrap();
            s.commit(b).await.unwrap();
        }
        assert!(replayed, "{test}: batch 1 was not re-run from the log");
    });
    let listed: Vec<String> = sink
        .committed_files()
        .unwrap()
        .values()
        .flatten()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(sink.last_committed().unwrap(), Some(1));
    let _ = std::fs::remove_dir_all(&local);
    let Some((_, rows, files)) = pyarrow_rows(t, &prefix, test) else {
        return;
    };
    assert_eq!(
        rows,
        every_offset(),
        "{test}: what pyarrow sees after the replay"
    );
    assert_eq!(files, listed, "{test}: the log lists the visible objects");
}

#[test]
fn parquet_sink_on_s3_replays_a_crashed_batch_once() {
    let test = "parquet_sink_on_s3_replays_a_crashed_batch_once";
    if let Some(t) = s3(test) {
        a_crash_between_upload_and_commit_is_replayed_once(&t, test);
    }
}

#[test]
fn parquet_sink_on_azure_replays_a_crashed_batch_once() {
    let test = "parquet_sink_on_azure_replays_a_crashed_batch_once";
    if let Some(t) = azure(test) {
        a_crash_between_upload_and_commit_is_replayed_once(&t, test);
    }
}

/// A batch file larger than one upload part (8 MiB) goes up as a multipart upload and is
/// one object, every record once.
#[test]
fn parquet_sink_on_s3_uploads_a_large_batch_in_parts() {
    let test = "parquet_sink_on_s3_uploads_a_large_batch_in_parts";
    let Some(t) = s3(test) else {
        return;
    };
    let fake = FakeCluster::builder().topic("big", 1).start().unwrap();
    // Values that do not compress: 12 MB of them.
    let mut seed = 0x2545_f491_u32;
    for _ in 0..12 {
        let recs: Vec<FakeRecord> = (0..100)
            .map(|_| {
                let v: Vec<u8> = (0..10_000)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        seed as u8
                    })
                    .collect();
                FakeRecord::value(Bytes::from(v))
            })
            .collect();
        fake.append_records("big", 0, &recs, Codec::None).unwrap();
    }
    let prefix = unique("pq-big");
    consume(
        &t,
        &fake,
        "big",
        &prefix,
        &[
            "--max-offsets-per-batch",
            "100000",
            "--parquet-compression",
            "none",
        ],
    );
    let Some((_, rows, files)) = pyarrow_rows(&t, &prefix, test) else {
        return;
    };
    assert_eq!(files, ["part-0000000000-000.parquet"]);
    assert_eq!(rows.len(), 1200);
    assert!(rows.values().all(|n| *n == 1));
}

/// A bucket that does not exist is one error naming it, not a panic.
#[test]
fn parquet_sink_on_a_missing_bucket_names_it() {
    let test = "parquet_sink_on_a_missing_bucket_names_it";
    let Some(t) = s3(test) else {
        return;
    };
    let fake = fake_topic("nob");
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "nob",
            "--until-latest",
        ])
        .args(["--sink", "parquet:s3://no-such-bucket-kdirect/p"])
        .envs(t.env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("s3://no-such-bucket-kdirect/p"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// What the Python `deltalake` package (delta-rs's binding, from PyPI: its own object_store
/// client, not kdirect's) reads from the table at `url` on the target: every (partition,
/// offset) counted, and the txn version of each of `app_ids`.
#[cfg(feature = "delta")]
pub(crate) fn deltalake_rows(
    python: &str,
    t: &Target,
    url: &str,
    app_ids: &[&str],
) -> (Rows, Vec<Option<i64>>) {
    let script = r#"
import sys, json
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1], storage_options=json.loads(sys.argv[2]))
t = dt.to_pyarrow_table()
for p, o in zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()):
    print(p, o)
for app in sys.argv[3:]:
    print("txn", app, dt.transaction_version(app))
# Out before the interpreter's exit (see pyarrow_rows).
sys.stdout.flush()
import os
os._exit(0)
"#;
    let options: BTreeMap<&str, &str> = t.config.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(url)
        .arg(serde_json::to_string(&options).unwrap())
        .args(app_ids)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "deltalake: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut rows, mut txns) = (Rows::new(), Vec::new());
    for line in String::from_utf8(out.stdout).unwrap().lines() {
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
    (rows, txns)
}

/// `kdirect consume --sink delta:<target>/<prefix>` twice (the second resumes from the
/// table's `txn`s and adds nothing), read back by Python `deltalake` from the object store:
/// every offset once, each partition's txn at its last offset.
#[cfg(feature = "delta")]
fn the_cli_lands_a_delta_table_on(t: &Target, test: &str) {
    let fake = fake_topic("dobj");
    let url = format!("{}/{}", t.root, unique("delta"));
    for _ in 0..2 {
        let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args([
                "consume",
                "-b",
                &fake.bootstrap(),
                "-t",
                "dobj",
                "--until-latest",
            ])
            .args(["--max-offsets-per-batch", "50", "--sink"])
            .arg(format!("delta:{url}"))
            .envs(t.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{test}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let Some(python) = crate::lakehouse::delta_python(test) else {
        return;
    };
    let (rows, txns) = deltalake_rows(&python, t, &url, &["dobj-0", "dobj-1", "dobj-2"]);
    assert_eq!(rows, every_offset(), "{test}: what deltalake sees");
    assert_eq!(txns, [Some(39), Some(39), Some(39)]);
}

#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_s3_deltalake_reads_every_offset_once() {
    let test = "delta_sink_on_s3_deltalake_reads_every_offset_once";
    if let Some(t) = s3(test) {
        the_cli_lands_a_delta_table_on(&t, test);
    }
}

#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_azure_deltalake_reads_every_offset_once() {
    let test = "delta_sink_on_azure_deltalake_reads_every_offset_once";
    if let Some(t) = azure(test) {
        the_cli_lands_a_delta_table_on(&t, test);
    }
}

/// The crash replay of a Delta table on object storage: batch 1's data file is written and
/// uploaded (an object the Delta log does not list: what a crash between the upload and the
/// Delta commit leaves), but its commit never happens. The restart re-plans from the
/// table's `txn`s; Python `deltalake` sees every offset exactly once.
#[cfg(feature = "delta")]
fn a_delta_crash_before_the_commit_is_replayed_once(t: &Target, test: &str) {
    use kdirect::sink::delta::{DeltaOptions, DeltaSink};
    let topic = "dcrash";
    let fake = fake_topic(topic);
    let url = format!("{}/{}", t.root, unique("delta-crash"));
    let rt = rt();
    let local = tempdir("delta-obj-crash");
    let stream = |sink: DeltaSink| {
        let fake = &fake;
        async move {
            DirectStream::builder()
                .bootstrap(&fake.bootstrap())
                .topics(&[topic])
                .start(StartPolicy::Earliest)
                .until_latest(true)
                .max_offsets_per_trigger(75)
                .store(sink.log())
                .build()
                .await
                .unwrap()
        }
    };
    rt.block_on(async {
        let sink = DeltaSink::open_object(&url, DeltaOptions::default(), &t.config())
            .await
            .unwrap();
        let mut s = stream(sink.clone()).await;
        let b0 = s.next_batch().await.unwrap().unwrap();
        let mut w = sink.begin(b0.id()).unwrap();
        w.write(&b0).unwrap();
        w.commit().unwrap();
        s.commit(b0).await.unwrap();
        let b1 = s.next_batch().await.unwrap().unwrap();
        let mut w = sink.begin(b1.id()).unwrap();
        w.write(&b1).unwrap();
        w.commit().unwrap();
        // The crashed attempt's uploaded data file: the same records, uploaded under a data
        // file's name in the table, never added by a commit.
        let disk = ParquetSink::open(&local, ParquetOptions::default()).unwrap();
        let mut w = disk.begin(b1.id()).unwrap();
        w.write(&b1).unwrap();
        w.commit().unwrap();
    });
    let bucket = {
        let _in_rt = rt.enter();
        Bucket::open(Path::new(&url), &t.config()).unwrap()
    };
    bucket
        .upload_file(
            &bucket.url().join("part-0000000001-crashed.zstd.parquet"),
            &local.join(ParquetSink::file_name(1)),
        )
        .unwrap();
    let _ = std::fs::remove_dir_all(&local);
    // The restart.
    rt.block_on(async {
        let sink = DeltaSink::open_object(&url, DeltaOptions::default(), &t.config())
            .await
            .unwrap();
        let mut s = stream(sink.clone()).await;
        while let Some(b) = s.next_batch().await.unwrap() {
            let mut w = sink.begin(b.id()).unwrap();
            w.write(&b).unwrap();
            w.commit().unwrap();
            s.commit(b).await.unwrap();
        }
    });
    let Some(python) = crate::lakehouse::delta_python(test) else {
        return;
    };
    let (rows, txns) = deltalake_rows(&python, t, &url, &["dcrash-0", "dcrash-1", "dcrash-2"]);
    assert_eq!(
        rows,
        every_offset(),
        "{test}: what deltalake sees after the replay"
    );
    assert_eq!(txns, [Some(39), Some(39), Some(39)]);
}

#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_s3_replays_a_crashed_batch_once() {
    let test = "delta_sink_on_s3_replays_a_crashed_batch_once";
    if let Some(t) = s3(test) {
        a_delta_crash_before_the_commit_is_replayed_once(&t, test);
    }
}

#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_azure_replays_a_crashed_batch_once() {
    let test = "delta_sink_on_azure_replays_a_crashed_batch_once";
    if let Some(t) = azure(test) {
        a_delta_crash_before_the_commit_is_replayed_once(&t, test);
    }
}

/// Two writers race for the same table version on S3: both read the same batch 0 of the same
/// partitions and commit at once; exactly one wins (the other's commit file is refused by the
/// conditional put, and on reading the table again it finds the partitions moved: a
/// conflict). And a commit file that exists is never overwritten: a put-if-absent of it
/// through the same client is refused.
#[cfg(feature = "delta")]
#[test]
fn delta_sink_on_s3_two_writers_one_wins() {
    use kdirect::commit::object::object_store::{PutMode, PutOptions, PutPayload};
    use kdirect::sink::delta::{DeltaOptions, DeltaSink};
    let test = "delta_sink_on_s3_two_writers_one_wins";
    let Some(t) = s3(test) else {
        return;
    };
    let topic = "drace";
    let fake = fake_topic(topic);
    let url = format!("{}/{}", t.root, unique("delta-race"));
    let rt = rt();
    let config = t.config();
    let won = rt.block_on(async {
        let open = || DeltaSink::open_object(&url, DeltaOptions::default(), &config);
        let (a, b) = (open().await.unwrap(), open().await.unwrap());
        let mut streams = Vec::new();
        for sink in [&a, &b] {
            let mut s = DirectStream::builder()
                .bootstrap(&fake.bootstrap())
                .topics(&[topic])
                .start(StartPolicy::Earliest)
                .until_latest(true)
                .store(sink.log())
                .build()
                .await
                .unwrap();
            let batch = s.next_batch().await.unwrap().unwrap();
            let mut w = sink.begin(batch.id()).unwrap();
            w.write(&batch).unwrap();
            w.commit().unwrap();
            streams.push((s, batch));
        }
        let (mut sb, bb) = streams.pop().unwrap();
        let (mut sa, ba) = streams.pop().unwrap();
        let (ra, rb) = tokio::join!(sa.commit(ba), sb.commit(bb));
        assert!(
            ra.is_ok() != rb.is_ok(),
            "{test}: both or neither won: {ra:?} {rb:?}"
        );
        // The winner's commit file (version 1) exists; creating it again is refused.
        let bucket = Bucket::open(Path::new(&url), &t.config()).unwrap();
        let key = bucket.key(&bucket.url().join("_delta_log/00000000000000000001.json"));
        let again = bucket
            .store()
            .put_opts(
                &key,
                PutPayload::from_static(b"{}"),
                PutOptions {
                    mode: PutMode::Create,
                    ..PutOptions::default()
                },
            )
            .await;
        assert!(again.is_err(), "{test}: a commit file was overwritten");
        a.version().await.max(b.version().await)
    });
    assert_eq!(
        won,
        Some(1),
        "{test}: one commit after the table's creation"
    );
    let Some(python) = crate::lakehouse::delta_python(test) else {
        return;
    };
    let (rows, _) = deltalake_rows(&python, &t, &url, &[]);
    assert_eq!(rows, every_offset(), "{test}: each offset once");
}
