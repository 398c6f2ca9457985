//! `kdirect::admin` against the fake broker: log bounds keyed by partition (two brokers, so
//! the partitions' answers come from different leaders), resets with the
//! kafka-consumer-groups vocabulary written to a checkpoint and read back by a stream, the
//! batch-id continuation rule, and the questions the CLI used to answer itself.
use std::collections::BTreeMap;

use kdirect::admin::{inside_log, Admin, LogBounds, ResetTo};
use kdirect::{CheckpointStore, DirectStream, IsolationLevel, OffsetStore, TopicPartition};
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::support::{rt, tempdir};

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("adm", p)
}

async fn cluster() -> FakeCluster {
    let fake = FakeCluster::builder()
        .brokers(2)
        .topic("adm", 3)
        .build()
        .await
        .unwrap();
    for p in 0..3 {
        let recs: Vec<FakeRecord> = (0..10 * (p + 1))
            .map(|i| FakeRecord::value(format!("{p}-{i}")))
            .collect();
        fake.append_records("adm", p, &recs, Codec::None).unwrap();
    }
    // Retention moved partition 2's log start.
    fake.set_log_start("adm", 2, 12).unwrap();
    fake
}

#[test]
fn log_bounds_are_keyed_by_partition_across_leaders() {
    rt().block_on(async {
        let fake = cluster().await;
        let admin = Admin::connect(&fake.bootstrap(), &[]).await.unwrap();
        let bounds = admin
            .log_bounds(&["adm".into()], IsolationLevel::ReadUncommitted)
            .await
            .unwrap();
        let want = BTreeMap::from([
            (tp(0), LogBounds { start: 0, end: 10 }),
            (tp(1), LogBounds { start: 0, end: 20 }),
            (tp(2), LogBounds { start: 12, end: 30 }),
        ]);
        assert_eq!(bounds, want);
        // Checked against them: retention and a partition the topic does not have.
        let given = kdirect::Positions::from([(tp(2), 3), (tp(7), 0)]);
        let refused = inside_log(&given, &bounds, true).unwrap_err();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].partition, tp(7));
        let (clamped, moved) =
            inside_log(&kdirect::Positions::from([(tp(2), 3)]), &bounds, true).unwrap();
        assert_eq!(clamped[&tp(2)], 12);
        assert!(moved[0].to_string().contains("retention"), "{}", moved[0]);
    });
}

#[test]
fn a_reset_planned_executed_and_resumed_from() {
    rt().block_on(async {
        let fake = cluster().await;
        let admin = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .admin()
            .await
            .unwrap();
        let dir = tempdir("admin-reset");
        let store = CheckpointStore::open(&dir, 10).unwrap();
        let topics = ["adm".to_owned()];
        // --to-offset 15: kept within each log.
        let reset = admin
            .plan_reset(&store, &topics, &ResetTo::Offset(15))
            .await
            .unwrap();
        assert_eq!(reset.before.batch_id, None);
        let want = kdirect::Positions::from([(tp(0), 10), (tp(1), 15), (tp(2), 15)]);
        assert_eq!(reset.positions, want);
        // A dry run writes nothing.
        assert_eq!(store.load(&[]).await.unwrap().batch_id, None);
        reset.execute(&store).await.unwrap();
        let c = store.load(&[]).await.unwrap();
        assert_eq!((c.batch_id, &c.positions), (Some(0), &want));
        // --shift-by -5 from there, as batch 1.
        let back = admin
            .plan_reset(&store, &topics, &ResetTo::ShiftBy(-5))
            .await
            .unwrap();
        let want = kdirect::Positions::from([(tp(0), 5), (tp(1), 10), (tp(2), 12)]);
        assert_eq!(back.positions, want);
        back.execute(&store).await.unwrap();
        assert_eq!(store.load(&[]).await.unwrap().batch_id, Some(1));
        // A stream on the store reads from exactly there to the ends.
        let mut s = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["adm"])
            .until_latest(true)
            .store(CheckpointStore::open(&dir, 10).unwrap())
            .build()
            .await
            .unwrap();
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        let mut n = 0;
        while let Some(b) = s.next_batch().await.unwrap() {
            b.for_each_record(|r, rec| {
                first.entry(r.partition).or_insert(rec.offset());
                n += 1;
            })
            .unwrap();
            s.commit(b).await.unwrap();
        }
        assert_eq!(first, BTreeMap::from([(0, 5), (1, 10), (2, 12)]));
        assert_eq!(n, 5 + 10 + 18);
        // Positions from a file naming a partition the cluster does not have: refused.
        let file = ResetTo::Positions(kdirect::Positions::from([(tp(9), 0)]));
        let e = admin.plan_reset(&store, &topics, &file).await.unwrap_err();
        assert_eq!(e.partition(), Some(("adm", 9)), "{e}");
        // set_positions continues the store's batch ids.
        let set = kdirect::Positions::from([(tp(0), 1)]);
        let before = kdirect::admin::set_positions(&store, &set).await.unwrap();
        let after = store.load(&[]).await.unwrap();
        assert_eq!(after.batch_id, Some(before.batch_id.unwrap() + 1));
        assert_eq!(after.positions[&tp(0)], 1);
    });
}

/// `Admin::lag`, what `kdirect lag` prints: a checkpoint's positions against each
/// partition's log, with the retention margin; and `describe_group` on a broker without
/// DescribeGroups (the fake broker) is an error naming the group, not a panic or a hang.
#[test]
fn lag_of_a_store_against_the_log() {
    rt().block_on(async {
        let fake = cluster().await;
        let admin = Admin::connect(&fake.bootstrap(), &[]).await.unwrap();
        let dir = tempdir("admin-lag");
        let store = CheckpointStore::open(&dir, 10).unwrap();
        // adm-0 read to 4 of 10; adm-2 at 5, below its log start 12 (retention ate 7 unread
        // offsets); adm-1 never committed.
        let set = kdirect::Positions::from([(tp(0), 4), (tp(2), 5)]);
        kdirect::admin::set_positions(&store, &set).await.unwrap();
        let lag = admin
            .lag(&store, &["adm".into()], IsolationLevel::ReadUncommitted)
            .await
            .unwrap();
        assert_eq!(lag.partitions.len(), 3);
        assert_eq!(lag.partitions[&tp(0)].lag(), Some(6));
        assert_eq!(lag.partitions[&tp(1)].committed, None);
        assert_eq!(lag.partitions[&tp(2)].lag(), Some(25));
        assert_eq!(lag.total(), Some(31));
        assert_eq!(lag.without_position(), 1);
        assert_eq!(lag.lost(), 7);
        assert_eq!(lag.batch_id, Some(0));
        let e = admin.describe_group("adm-g").await.unwrap_err().to_string();
        assert!(e.contains("adm-g") && e.contains("DescribeGroups"), "{e}");
    });
}

/// `admin::migrate`, what `kdirect offsets migrate` does: a checkpoint's positions copied into
/// another store, continuing its batch ids when the destination is empty, and its own after
/// that; a source without positions writes nothing.
#[test]
fn migrate_copies_positions_and_continues_batch_ids() {
    rt().block_on(async {
        let (a, b) = (tempdir("admin-migrate-a"), tempdir("admin-migrate-b"));
        let from = CheckpointStore::open(&a, 10).unwrap();
        let to = CheckpointStore::open(&b, 10).unwrap();
        let empty = kdirect::admin::migrate(&from, &to, &[]).await.unwrap();
        assert!(empty.positions.is_empty());
        assert_eq!(
            to.load(&[]).await.unwrap().batch_id,
            None,
            "nothing written"
        );
        for n in [3, 5, 8] {
            let set = kdirect::Positions::from([(tp(0), n), (tp(1), n * 2)]);
            kdirect::admin::set_positions(&from, &set).await.unwrap();
        }
        let m = kdirect::admin::migrate(&from, &to, &[]).await.unwrap();
        assert_eq!(m.batch_id, 2, "continues the source's ids (its last was 2)");
        let got = to.load(&[]).await.unwrap();
        assert_eq!(
            got.positions,
            kdirect::Positions::from([(tp(0), 8), (tp(1), 16)])
        );
        assert_eq!(got.batch_id, Some(2));
        // Again: the destination has its own ids now.
        let again = kdirect::admin::migrate(&from, &to, &[]).await.unwrap();
        assert_eq!(again.batch_id, 3);
        assert_eq!(again.before.positions, got.positions);
    });
}

/// `Admin::plan_import`, what `kdirect offsets import --from kafka` does: another group's
/// committed offsets read through the admin's cluster, checked against the log (refused with
/// every partition named, or clamped), the partitions the source left out listed, and written
/// as the batch after the destination's last; a source without positions is refused.
#[test]
fn an_import_from_another_groups_offsets_planned_checked_and_executed() {
    use kdirect::admin::{AdminError, Source, SqlLayout, REDIS_KEY};
    rt().block_on(async {
        let fake = cluster().await;
        let conn = kdirect::engine::conn::ConnConfig::default();
        let cluster = std::sync::Arc::new(
            kdirect::engine::cluster::Cluster::connect(&[fake.bootstrap()], conn)
                .await
                .unwrap(),
        );
        let admin = Admin::from_cluster(cluster.clone());
        let mut options = kdirect::commit::OpenOptions::default();
        options.cluster = Some(cluster);
        let old = kdirect::open_store("kafka", "old-job", &options)
            .await
            .unwrap();
        // Partition 2's log starts at 12: 3 is below it; partition 1 has no position.
        kdirect::admin::set_positions(&old, &kdirect::Positions::from([(tp(0), 4), (tp(2), 3)]))
            .await
            .unwrap();
        let source = Source::parse("kafka", SqlLayout::default(), REDIS_KEY).unwrap();
        let e = admin
            .plan_import(&source, "adm", "old-job", false)
            .await
            .unwrap_err();
        let Some(AdminError::OutsideLog { refused, .. }) = e.admin() else {
            panic!("{e}");
        };
        assert_eq!(refused.len(), 1);
        assert_eq!(
            e.to_string(),
            "adm-2: the source's position 3 is outside the log [12, 30] (retention deleted the \
             records since); nothing was written"
        );
        let import = admin
            .plan_import(&source, "adm", "old-job", true)
            .await
            .unwrap();
        assert_eq!(
            import.positions,
            kdirect::Positions::from([(tp(0), 4), (tp(2), 12)])
        );
        assert_eq!(import.clamped.len(), 1);
        assert_eq!(import.unread, vec![tp(1)]);
        let dir = tempdir("admin-import");
        let store = CheckpointStore::open(&dir, 10).unwrap();
        kdirect::admin::set_positions(&store, &kdirect::Positions::from([(tp(1), 1)]))
            .await
            .unwrap();
        let done = import.execute(&store).await.unwrap();
        assert_eq!((done.batch_id, done.before.batch_id), (1, Some(0)));
        let got = store.load(&[]).await.unwrap();
        assert_eq!(
            got.positions,
            kdirect::Positions::from([(tp(0), 4), (tp(1), 1), (tp(2), 12)])
        );
        // Another group holds nothing.
        let e = admin
            .plan_import(&source, "adm", "nobody", false)
            .await
            .unwrap_err();
        assert!(
            matches!(e.admin(), Some(AdminError::NoPositions { .. })),
            "{e}"
        );
    });
}

/// `Admin::plan_import_spark`, what `kdirect offsets import-spark` does: a Structured
/// Streaming checkpoint's positions checked against the log, an empty store continuing
/// Spark's batch ids; a position past the end refused, nothing written.
#[test]
fn a_spark_checkpoint_imported_continues_sparks_batch_ids() {
    use kdirect::admin::{AdminError, SparkCheckpoint};
    let spark = |dir: &std::path::Path, o: [i64; 3]| {
        for d in ["offsets", "commits"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        for id in 0..=4 {
            std::fs::write(
                dir.join(format!("offsets/{id}")),
                format!(
                    "v1\n{{\"batchWatermarkMs\":0,\"batchTimestampMs\":1,\"conf\":{{}}}}\n\
                     {{\"adm\":{{\"0\":{},\"1\":{},\"2\":{}}}}}",
                    o[0], o[1], o[2]
                ),
            )
            .unwrap();
            std::fs::write(
                dir.join(format!("commits/{id}")),
                "v1\n{\"nextBatchWatermarkMs\":0}",
            )
            .unwrap();
        }
    };
    rt().block_on(async {
        let fake = cluster().await;
        let admin = Admin::connect(&fake.bootstrap(), &[]).await.unwrap();
        let tmp = tempdir("admin-spark");
        spark(&tmp.join("spark"), [5, 20, 13]);
        let resolved = SparkCheckpoint::read(tmp.join("spark"))
            .unwrap()
            .resolve(None, None)
            .unwrap();
        assert_eq!(resolved.batch_id, Some(4));
        let import = admin.plan_import_spark(&resolved).await.unwrap();
        assert!(import.unread.is_empty() && import.clamped.is_empty());
        let store = CheckpointStore::open(tmp.join("kd"), 10).unwrap();
        let done = import.execute(&store).await.unwrap();
        assert_eq!(done.batch_id, 4, "an empty store continues Spark's ids");
        let got = store.load(&[]).await.unwrap();
        assert_eq!(got.batch_id, Some(4));
        assert_eq!(got.positions, import.positions);
        // Once the store holds batches, its own ids go on.
        assert_eq!(import.batch_id(&got), 5);

        spark(&tmp.join("far"), [5, 21, 13]);
        let far = SparkCheckpoint::read(tmp.join("far"))
            .unwrap()
            .resolve(None, None)
            .unwrap();
        let e = admin.plan_import_spark(&far).await.unwrap_err();
        assert!(
            matches!(e.admin(), Some(AdminError::OutsideLog { .. })),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("adm-1: Spark's position 21 is outside the log [0, 20]"),
            "{e}"
        );
    });
}
