//! `kdirect offsets import --from SOURCE`: a Spark Streaming (DStream) job's own offsets, in
//! the layouts the articles keep them in, written by the tools those jobs use (redis-cli, SQL,
//! a ZooKeeper client, Kafka's group offsets), imported into a kdirect store; `kdirect consume`
//! then reads exactly the records after them. Each source against its real server.
use bytes::Bytes;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::spark::{consume, expected, ok, refused};
use crate::support::{service, tempdir, unique};

/// A fake cluster with topic `imp`: 2 partitions of 100 records.
fn cluster() -> FakeCluster {
    let fake = FakeCluster::builder()
        .brokers(1)
        .topic("imp", 2)
        .start()
        .unwrap();
    for p in 0..2 {
        let recs: Vec<FakeRecord> = (0..100)
            .map(|i| FakeRecord::value(Bytes::from(format!("{p}:{i}"))))
            .collect();
        fake.append_records("imp", p, &recs, Codec::None).unwrap();
    }
    fake
}

/// Imports from `from` (with `extra` flags) into a fresh checkpoint: the dry run shows the
/// positions and writes nothing, `--execute` writes them, and consume reads exactly
/// `[30, 100)` of partition 0 and `[20, 100)` of partition 1.
fn import_and_resume(fake: &FakeCluster, from: &str, group: &str, extra: &[&str]) {
    let boot = fake.bootstrap();
    let tmp = tempdir("import");
    let ckpt = format!("checkpoint:{}", tmp.join("kd").display());
    let mut args = vec![
        "offsets", "import", "--from", from, "-t", "imp", "--store", &ckpt, "-g", group, "-b",
        &boot,
    ];
    args.extend_from_slice(extra);
    let dry = ok(&args);
    assert!(dry.contains("imp\t0\t-\t30\nimp\t1\t-\t20\n"), "{dry}");
    assert!(dry.contains("dry run: nothing written"), "{dry}");
    assert!(!tmp.join("kd").exists(), "a dry run creates nothing");
    args.push("--execute");
    ok(&args);
    let read = consume(&boot, "imp", &ckpt, group, &tmp);
    assert_eq!(read, expected(&[30, 20], &[100, 100]), "{from}");
}

#[test]
fn import_from_a_redis_hash() {
    let Some(url) = service("KDIRECT_TEST_REDIS", "import_from_a_redis_hash") else {
        return;
    };
    let fake = cluster();
    let group = unique("redis");
    let key = format!("offset:imp:{group}");
    let cli = |args: &[&str]| {
        let o = std::process::Command::new("redis-cli")
            .args(["-u", &url])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    // What the articles' `jedis.hset("offset:" + topic + ":" + group, partition, untilOffset)`
    // leaves.
    cli(&["HSET", &key, "0", "30", "1", "20"]);
    import_and_resume(&fake, &url, &group, &[]);

    // A position past the end is refused with the range; --clamp moves it to the end.
    cli(&["HSET", &key, "1", "500"]);
    let tmp = tempdir("import-far");
    let ckpt = format!("checkpoint:{}", tmp.join("kd").display());
    let boot = fake.bootstrap();
    let args = [
        "offsets",
        "import",
        "--from",
        &url,
        "-t",
        "imp",
        "--store",
        &ckpt,
        "-g",
        &group,
        "-b",
        &boot,
        "--execute",
    ];
    let err = refused(&args);
    assert!(
        err.contains("imp-1: the source's position 500 is outside the log [0, 100]"),
        "{err}"
    );
    assert!(err.contains("--clamp"), "{err}");
    assert!(!tmp.join("kd").exists(), "{err}");
    let mut clamped = args.to_vec();
    clamped.push("--clamp");
    let out = ok(&clamped);
    assert!(out.contains("--clamp moves it to 100"), "{out}");
    let read = consume(&boot, "imp", &ckpt, &group, &tmp);
    assert_eq!(read, expected(&[30, 100], &[100, 100]));

    // A field that is not a partition is an error naming the key.
    cli(&["HSET", &key, "x", "1"]);
    let err = refused(&args);
    assert!(
        err.contains(&key) && err.contains("'x' is not a partition"),
        "{err}"
    );
}

/// The articles' table, with the newest row per partition winning (jobs that insert a row per
/// batch instead of updating one), in PostgreSQL and MariaDB, where `partition` and `offset`
/// are reserved words.
#[test]
fn import_from_a_sql_table() {
    let test = "import_from_a_sql_table";
    let (Some(pg), Some(my)) = (
        service("KDIRECT_TEST_POSTGRES", test),
        service("KDIRECT_TEST_MYSQL", test),
    ) else {
        return;
    };
    let fake = cluster();
    let rt = crate::support::rt();
    for (url, ddl_ts, quote) in [(&pg, "timestamptz", '"'), (&my, "timestamp(3)", '`')] {
        let table = unique("offsets");
        let group = unique("sql");
        rt.block_on(async {
            sqlx::any::install_default_drivers();
            let mut c = <sqlx::AnyConnection as sqlx::Connection>::connect(url)
                .await
                .unwrap();
            let q = |s: &str| s.replace('"', &quote.to_string());
            sqlx::raw_sql(&q(&format!(
                "CREATE TABLE {table} (topic varchar(255), group_id varchar(255), \
                 \"partition\" int, \"offset\" bigint, \"timestamp\" {ddl_ts})"
            )))
            .execute(&mut c)
            .await
            .unwrap();
            sqlx::raw_sql(&q(&format!(
                "INSERT INTO {table} (topic, group_id, \"partition\", \"offset\", \"timestamp\") \
                 VALUES ('imp', '{group}', 0, 10, '2026-01-01 00:00:00'), \
                 ('imp', '{group}', 0, 30, '2026-01-02 00:00:00'), \
                 ('imp', '{group}', 1, 20, '2026-01-02 00:00:00'), \
                 ('other', '{group}', 0, 99, '2026-01-02 00:00:00'), \
                 ('imp', 'someone-else', 0, 77, '2026-01-03 00:00:00')"
            )))
            .execute(&mut c)
            .await
            .unwrap();
        });
        import_and_resume(&fake, url, &group, &["--from-table", &table]);

        // Without the timestamp column, two rows for one partition are ambiguous: refused.
        let boot = fake.bootstrap();
        let tmp = tempdir("import-sql");
        let ckpt = format!("checkpoint:{}", tmp.join("kd").display());
        let err = refused(&[
            "offsets",
            "import",
            "--from",
            url,
            "-t",
            "imp",
            "--store",
            &ckpt,
            "-g",
            &group,
            "-b",
            &boot,
            "--from-table",
            &table,
            "--from-columns",
            "topic,group_id,partition,offset",
        ]);
        assert!(err.contains("imp-0 has several rows"), "{err}");
        assert!(!err.contains("kdirect@"), "no password in {err}");
    }
}

#[test]
fn import_from_zookeeper_the_old_consumers_layout() {
    let Some(url) = service(
        "KDIRECT_TEST_ZOOKEEPER",
        "import_from_zookeeper_the_old_consumers_layout",
    ) else {
        return;
    };
    let fake = cluster();
    let group = unique("zk");
    let chroot = unique("spark");
    crate::support::rt().block_on(async {
        use zookeeper_client as zk;
        let hosts = url.trim_start_matches("zk://");
        let c = zk::Client::connect(hosts).await.unwrap();
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        // What `ZkUtils.updatePersistentPath("/consumers/<group>/offsets/<topic>/<p>", …)`
        // leaves, under a chroot.
        let dir = format!("/{chroot}/consumers/{group}/offsets/imp");
        c.mkdir(&dir, &opts).await.unwrap();
        c.create(&format!("{dir}/0"), b"30", &opts).await.unwrap();
        c.create(&format!("{dir}/1"), b"20", &opts).await.unwrap();
    });
    import_and_resume(&fake, &format!("{url}/{chroot}"), &group, &[]);
}

#[test]
fn import_from_kafka_group_offsets_of_another_group() {
    let fake = cluster();
    let boot = fake.bootstrap();
    // The old job's group offsets (what a DStream's commitAsync leaves).
    ok(&[
        "offsets", "set", "--store", "kafka", "-g", "old-job", "-t", "imp", "-b", &boot, "0=30",
        "1=20",
    ]);
    import_and_resume(&fake, "kafka", "new-job", &["--from-group", "old-job"]);
}
