//! "A checkpoint that no longer fits": consume with a checkpoint, `kdirect offsets migrate` the
//! positions to PostgreSQL (or SQLite when PostgreSQL is not configured), append more data,
//! consume again from the new store — nothing lost, nothing repeated. Also: a checkpoint is
//! editable with `kdirect offsets set`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

fn kdirect(args: &[&str]) -> std::process::Output {
    let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "kdirect {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn append(fake: &FakeCluster, from: i64, to: i64) {
    for p in 0..3 {
        let recs: Vec<FakeRecord> = (from..to)
            .map(|i| FakeRecord::value(Bytes::from(format!("{p}:{i}"))))
            .collect();
        fake.append_records("m", p, &recs, Codec::Zstd).unwrap();
    }
}

fn offsets_in(dir: &Path, seen: &mut BTreeMap<(i64, i64), u32>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "jsonl") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                *seen
                    .entry((
                        v["partition"].as_i64().unwrap(),
                        v["offset"].as_i64().unwrap(),
                    ))
                    .or_insert(0) += 1;
            }
        }
    }
}

#[test]
fn migrate_checkpoint_to_sql_and_continue() {
    let fake = FakeCluster::builder()
        .brokers(1)
        .topic("m", 3)
        .start()
        .unwrap();
    append(&fake, 0, 700);
    let boot = fake.bootstrap();
    let tmp = std::env::temp_dir().join(format!(
        "kdirect-migrate-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let ckpt = format!("checkpoint:{}", tmp.join("ckpt").display());
    let out1 = tmp.join("out1");
    let out2 = tmp.join("out2");
    kdirect(&[
        "consume",
        "-b",
        &boot,
        "-t",
        "m",
        "--starting",
        "earliest",
        "--until-latest",
        "--store",
        &ckpt,
        "--output-dir",
        out1.to_str().unwrap(),
        "--max-offsets-per-batch",
        "500",
    ]);
    let (to, cleanup) =
        match crate::support::service("KDIRECT_TEST_POSTGRES", "migrate to postgres") {
            Some(u) => (u, true),
            None => {
                println!("migrating to SQLite instead");
                (
                    format!("sqlite:{}", tmp.join("offsets.db").display()),
                    false,
                )
            }
        };
    let group = format!("migrate_{}", std::process::id());
    // The target from the environment (KDIRECT_MIGRATE_TO), as a URL with a password is
    // best given: on a command line `ps` shows it.
    let o = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["offsets", "migrate", "--store", &ckpt, "-g", &group])
        .env("KDIRECT_MIGRATE_TO", &to)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shown = kdirect(&["offsets", "show", "--store", &to, "-g", &group]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("700"), "{shown}");
    append(&fake, 700, 1000);
    kdirect(&[
        "consume",
        "-b",
        &boot,
        "-t",
        "m",
        "--until-latest",
        "--starting",
        "none",
        "--store",
        &to,
        "-g",
        &group,
        "--output-dir",
        out2.to_str().unwrap(),
    ]);
    let mut seen = BTreeMap::new();
    offsets_in(&out1, &mut seen);
    let first = seen.len();
    offsets_in(&out2, &mut seen);
    assert_eq!(first, 2100, "the checkpoint run read 3 × 700");
    for p in 0..3 {
        for o in 0..1000 {
            assert_eq!(seen.get(&(p, o)), Some(&1), "m-{p} offset {o}");
        }
    }
    assert_eq!(seen.len(), 3000);
    if cleanup {
        println!("(group {group} left in the kdirect_offsets table)");
    }
}

#[test]
fn checkpoint_is_editable_with_offsets_set() {
    let fake = FakeCluster::builder()
        .brokers(1)
        .topic("m", 3)
        .start()
        .unwrap();
    append(&fake, 0, 100);
    let boot = fake.bootstrap();
    let tmp = std::env::temp_dir().join(format!(
        "kdirect-set-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let ckpt = format!("checkpoint:{}", tmp.join("ckpt").display());
    kdirect(&[
        "offsets", "set", "--store", &ckpt, "-g", "x", "-t", "m", "0=90", "1=95", "2=100",
    ]);
    // The files are text a person can read.
    let offsets_dir = tmp.join("ckpt").join("offsets");
    let any = std::fs::read_dir(&offsets_dir)
        .ok()
        .and_then(|mut d| d.next())
        .map(|e| e.unwrap().path());
    let commits_dir = tmp.join("ckpt").join("commits");
    let file = any
        .or_else(|| {
            std::fs::read_dir(&commits_dir)
                .unwrap()
                .next()
                .map(|e| e.unwrap().path())
        })
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("v1"), "{text}");
    let out = tmp.join("out");
    kdirect(&[
        "consume",
        "-b",
        &boot,
        "-t",
        "m",
        "--until-latest",
        "--starting",
        "none",
        "--store",
        &ckpt,
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let mut seen = BTreeMap::new();
    offsets_in(&out, &mut seen);
    let expect: Vec<(i64, i64)> = (90..100)
        .map(|o| (0, o))
        .chain((95..100).map(|o| (1, o)))
        .collect();
    assert_eq!(seen.keys().copied().collect::<Vec<_>>(), expect);
}
