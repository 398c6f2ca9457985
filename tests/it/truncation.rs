//! KIP-320 truncation detection through the stream, on the fake broker: a log truncated under
//! the stream's position by an unclean leader change is found — by the fetch's diverging
//! epoch, or by OffsetForLeaderEpoch before the next plan — and reported as data loss with the
//! exact range of records that were handed out but are no longer in the log. Records are
//! never skipped and never handed out twice at one offset without that report.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use kdirect::commit::checkpoint::CheckpointStore;
use kdirect::engine::plan::{DataLossReason, PlanError, StartPolicy};
use kdirect::engine::ErrorKind;
use kdirect::DirectStream;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::support::{read_and_commit_to, read_to, records, rt, tempdir, Records};

/// Appends `n` single-record batches valued `{tag}{offset}` to t-0.
fn append(fake: &FakeCluster, tag: &str, n: i64) {
    for _ in 0..n {
        let at = fake.high_watermark("t", 0).unwrap();
        fake.append_records(
            "t",
            0,
            &[FakeRecord::value(Bytes::from(format!("{tag}{at}")))],
            Codec::None,
        )
        .unwrap();
    }
}

/// Appends `n` records valued `{tag}{offset}` to t-0 as one batch (a stream sees all or none).
fn append_batch(fake: &FakeCluster, tag: &str, n: i64) {
    let at = fake.high_watermark("t", 0).unwrap();
    let records: Vec<FakeRecord> = (at..at + n)
        .map(|o| FakeRecord::value(Bytes::from(format!("{tag}{o}"))))
        .collect();
    fake.append_records("t", 0, &records, Codec::None).unwrap();
}

async fn stream(fake: &FakeCluster, fail_on_data_loss: bool) -> DirectStream {
    DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .topics(&["t"])
        .start(StartPolicy::Earliest)
        .fail_on_data_loss(fail_on_data_loss)
        .build()
        .await
        .unwrap()
}

/// Two brokers, t-0 led by the first at epoch 0 for [0, 10) (`a0`..`a9`), then by the second
/// at epoch 1 for [10, 15) (`b10`..`b14`), in single-record batches. Returns the fake and the
/// first broker.
async fn led_by_two() -> (FakeCluster, i32) {
    let fake = FakeCluster::builder()
        .brokers(2)
        .topic("t", 1)
        .build()
        .await
        .unwrap();
    let (first, _) = fake.leader("t", 0).unwrap();
    let second = *fake.broker_ids().iter().find(|b| **b != first).unwrap();
    append(&fake, "a", 10);
    fake.move_leader("t", 0, second).unwrap();
    append(&fake, "b", 5);
    (fake, first)
}

/// Broker 1 leads at epoch 0 for [0, 10); broker 2 at epoch 1 for [10, 15); the stream reads
/// all 15. Then broker 1 comes back as leader by an unclean election with only [0, 12), at
/// epoch 2. Returns the fake.
async fn read_then_truncate(fail: bool) -> (FakeCluster, DirectStream) {
    let (fake, first) = led_by_two().await;
    let mut s = stream(&fake, fail).await;
    let (got, lost) = read_to(&mut s, 15).await.unwrap();
    assert_eq!(got.len(), 15);
    assert!(lost.is_empty());
    let (epoch, end) = fake.truncate_on_leader_change("t", 0, first, 12).unwrap();
    assert_eq!((epoch, end), (2, 12));
    (fake, s)
}

fn truncated(reason: &DataLossReason) -> bool {
    matches!(
        reason,
        DataLossReason::Truncated {
            last_fetched_epoch: 1,
            leader_epoch: 1,
            ..
        }
    )
}

/// The new leader writes past the old position: the next fetch (from 15, last fetched epoch
/// 1) gets the diverging epoch (1, 12). failOnDataLoss=true: a typed error with [12, 15).
#[test]
fn truncation_under_the_position_fails_the_stream_with_the_exact_range() {
    rt().block_on(async {
        let (fake, mut s) = read_then_truncate(true).await;
        append(&fake, "c", 8);
        let e = read_to(&mut s, 20).await.unwrap_err();
        let engine = match e.kind() {
            kdirect::error::Kind::Engine(e) => e,
            other => panic!("{other}"),
        };
        let ErrorKind::Plan(PlanError::DataLoss {
            topic,
            partition,
            lost_from,
            lost_until,
            reason,
        }) = engine.root().kind()
        else {
            panic!("{e}")
        };
        assert_eq!((topic.as_str(), *partition), ("t", 0));
        assert_eq!((*lost_from, *lost_until), (12, 15), "{e}");
        assert!(truncated(reason), "{reason:?}");
        // The question a loop asks, without matching on kinds.
        let lost = e.data_loss().expect("data loss");
        assert_eq!((lost.topic, lost.partition, lost.offsets), ("t", 0, 12..15));
        assert!(!e.is_retriable() && !e.is_fenced(), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("offsets [12, 15)"), "{msg}");
        assert!(msg.contains("truncated after a leader change"), "{msg}");
    });
}

/// failOnDataLoss=false: the batch reports [12, 15) as lost (handed out, gone from the log)
/// and the stream goes on at 12 with the new leader's records: each of its offsets once,
/// none skipped.
#[test]
fn truncation_with_fail_on_data_loss_off_reports_and_reads_the_new_records() {
    rt().block_on(async {
        let (fake, mut s) = read_then_truncate(false).await;
        append(&fake, "c", 8);
        let (got, lost) = read_to(&mut s, 20).await.unwrap();
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!((lost[0].from, lost[0].until), (12, 15));
        assert!(truncated(&lost[0].reason), "{lost:?}");
        let want: Vec<(i64, String)> = (12..20).map(|o| (o, format!("c{o}"))).collect();
        assert_eq!(got, want, "the new leader's records, once each");
    });
}

/// The new leader's log ends below the position (one record after the truncation point):
/// nothing is planned at 15, so only OffsetForLeaderEpoch can tell how much went. The
/// planner alone would say [13, 15) ("past the end"); the check says [12, 15).
#[test]
fn a_log_now_ending_below_the_position_is_checked_with_offset_for_leader_epoch() {
    rt().block_on(async {
        let (fake, mut s) = read_then_truncate(true).await;
        append(&fake, "c", 1);
        let e = read_to(&mut s, 13).await.unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("offsets [12, 15)"), "{msg}");
        assert!(msg.contains("truncated after a leader change"), "{msg}");

        let (fake, mut s) = read_then_truncate(false).await;
        append(&fake, "c", 1);
        let (got, lost) = read_to(&mut s, 13).await.unwrap();
        assert_eq!(
            lost.iter()
                .map(|l| (l.from, l.until, truncated(&l.reason)))
                .collect::<Vec<_>>(),
            vec![(12, 15, true)],
            "{lost:?}"
        );
        assert_eq!(got, vec![(12, "c12".to_owned())]);
        // And it goes on from there.
        append(&fake, "d", 2);
        let (got, lost) = read_to(&mut s, 15).await.unwrap();
        assert!(lost.is_empty(), "{lost:?}");
        let got: BTreeMap<i64, String> = got.into_iter().collect();
        assert_eq!(
            got,
            BTreeMap::from([(13, "d13".to_owned()), (14, "d14".to_owned())])
        );
    });
}

/// A leader change without truncation (the new leader has everything): no loss reported, no
/// record twice.
#[test]
fn a_clean_leader_change_is_no_data_loss() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(2)
            .topic("t", 1)
            .build()
            .await
            .unwrap();
        let (first, _) = fake.leader("t", 0).unwrap();
        let second = *fake.broker_ids().iter().find(|b| **b != first).unwrap();
        append(&fake, "a", 10);
        let mut s = stream(&fake, true).await;
        let (got, _) = read_to(&mut s, 10).await.unwrap();
        assert_eq!(got.len(), 10);
        fake.move_leader("t", 0, second).unwrap();
        append(&fake, "b", 5);
        fake.move_leader("t", 0, first).unwrap();
        append(&fake, "c", 5);
        let (got, lost) = read_to(&mut s, 20).await.unwrap();
        assert!(lost.is_empty(), "{lost:?}");
        let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, (10..20).collect::<Vec<_>>());
    });
}

/// Where a resumed stream keeps its positions, for the restart tests.
#[derive(Clone, Copy, Debug)]
enum Kept {
    /// A checkpoint directory (`leaderEpochs` in each commit file).
    Checkpoint,
    /// The Kafka group's offsets (OffsetCommit's committed leader epoch).
    Group,
    /// A SQLite table (`sqlite:DIR/offsets.db`; its `leader_epoch` column).
    Sqlite,
}

async fn stored_stream(
    fake: &FakeCluster,
    kept: Kept,
    dir: &std::path::Path,
    fail_on_data_loss: bool,
) -> DirectStream {
    let b = DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .topics(&["t"])
        .start(StartPolicy::Earliest)
        .fail_on_data_loss(fail_on_data_loss);
    let b = match kept {
        Kept::Checkpoint => b.store(CheckpointStore::open(dir, 10).unwrap()),
        Kept::Group => b.group("kip320-resume").store_spec("kafka"),
        Kept::Sqlite => b.store_spec(&format!("sqlite:{}", dir.join("offsets.db").display())),
    };
    b.build().await.unwrap()
}

/// The stream reads [0, 15) (the last 5 under epoch 1), commits, and stops. While it is down,
/// broker 1 comes back by an unclean election holding [0, 12) only, and 5 new records go to
/// offsets [12, 17). Returns the fake and the checkpoint directory.
async fn commit_then_truncate_while_down(kept: Kept, name: &str) -> (FakeCluster, PathBuf) {
    let (fake, first) = led_by_two().await;
    let dir = tempdir(name);
    let mut s = stored_stream(&fake, kept, &dir, true).await;
    let (got, lost) = read_and_commit_to(&mut s, 15).await.unwrap();
    assert_eq!(got.len(), 15);
    assert!(lost.is_empty());
    let last = s.positions();
    assert_eq!(last.values().copied().collect::<Vec<_>>(), vec![15]);
    drop(s);
    if let Kept::Checkpoint = kept {
        // The commit file keeps the epoch of the last batch read before 15: broker 2's, 1.
        let c = CheckpointStore::open(&dir, 10)
            .unwrap()
            .load_sync()
            .unwrap();
        assert_eq!(c.positions.values().copied().collect::<Vec<_>>(), vec![15]);
        assert_eq!(
            c.epochs.values().copied().collect::<Vec<_>>(),
            vec![1],
            "{c:?}"
        );
    }
    fake.truncate_on_leader_change("t", 0, first, 12).unwrap();
    append(&fake, "c", 5);
    assert_eq!(fake.high_watermark("t", 0).unwrap(), 17);
    (fake, dir)
}

/// A log truncated under the committed position while the stream was down: the resumed
/// stream (failOnDataLoss=true) checks its stored epoch with the leader before its first
/// plan and fails with the exact range, [12, 15) — it never reads 15.. as if nothing had
/// happened (the records now at 12..15 are new, and 12..15 as read are gone).
#[test]
fn a_log_truncated_while_the_stream_was_down_fails_the_resumed_stream() {
    for kept in [Kept::Checkpoint, Kept::Group, Kept::Sqlite] {
        rt().block_on(async {
            let (fake, dir) =
                commit_then_truncate_while_down(kept, &format!("resume-fail-{kept:?}")).await;
            let mut s = stored_stream(&fake, kept, &dir, true).await;
            let e = match s.next_batch().await {
                Err(e) => e,
                Ok(b) => panic!("{kept:?}: a truncated log must fail the stream, got {b:?}"),
            };
            let kind = match e.kind() {
                kdirect::error::Kind::Engine(en) => Some(en.root().kind()),
                _ => None,
            };
            match kind {
                Some(ErrorKind::Plan(PlanError::DataLoss {
                    lost_from: 12,
                    lost_until: 15,
                    reason,
                    ..
                })) if truncated_at(reason, 1) => {}
                other => panic!("{kept:?}: expected data loss [12, 15), got {other:?} ({e})"),
            }
        });
    }
}

/// failOnDataLoss=false: the resumed stream reports [12, 15) as lost and reads the new
/// leader's records from 12, each once; the next commit stores positions and epochs past
/// them.
#[test]
fn a_log_truncated_while_the_stream_was_down_is_reported_and_read_on_after_resume() {
    for kept in [Kept::Checkpoint, Kept::Group, Kept::Sqlite] {
        rt().block_on(async {
            let (fake, dir) =
                commit_then_truncate_while_down(kept, &format!("resume-go-on-{kept:?}")).await;
            let mut s = stored_stream(&fake, kept, &dir, false).await;
            let (got, lost) = read_and_commit_to(&mut s, 17).await.unwrap();
            assert_eq!(
                lost.iter().map(|l| (l.from, l.until)).collect::<Vec<_>>(),
                vec![(12, 15)],
                "{kept:?}: {lost:?}"
            );
            assert!(truncated_at(&lost[0].reason, 1), "{lost:?}");
            let want: Vec<(i64, String)> = (12..17).map(|o| (o, format!("c{o}"))).collect();
            assert_eq!(
                got, want,
                "{kept:?}: the new leader's records at 12..17, once each"
            );
        });
    }
}

/// A clean restart (nothing truncated, the leader moved while the stream was down): the
/// stored epoch is checked and found valid; no loss, nothing read twice.
#[test]
fn a_clean_restart_with_stored_epochs_is_no_data_loss() {
    for kept in [Kept::Checkpoint, Kept::Group, Kept::Sqlite] {
        rt().block_on(async {
            let fake = FakeCluster::builder()
                .brokers(2)
                .topic("t", 1)
                .build()
                .await
                .unwrap();
            let (first, _) = fake.leader("t", 0).unwrap();
            let second = *fake.broker_ids().iter().find(|b| **b != first).unwrap();
            append(&fake, "a", 10);
            let dir = tempdir(&format!("resume-clean-{kept:?}"));
            let mut s = stored_stream(&fake, kept, &dir, true).await;
            read_and_commit_to(&mut s, 10).await.unwrap();
            drop(s);
            fake.move_leader("t", 0, second).unwrap();
            append(&fake, "b", 5);
            let mut s = stored_stream(&fake, kept, &dir, true).await;
            let (got, lost) = read_and_commit_to(&mut s, 15).await.unwrap();
            assert!(lost.is_empty(), "{kept:?}: {lost:?}");
            assert_eq!(
                got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
                (10..15).collect::<Vec<_>>()
            );
        });
    }
}

fn truncated_at(reason: &DataLossReason, last_fetched: i32) -> bool {
    matches!(
        reason,
        DataLossReason::Truncated { last_fetched_epoch, .. } if *last_fetched_epoch == last_fetched
    )
}

/// Partition 0's leader and another of its replicas, from `KTool describe`.
fn leader_and_follower(k: &crate::real_kafka::Kafka, t: &str) -> (u32, u32) {
    // The tools' own log lines may come first on stdout.
    let out = k.tool("describe", &["--topic", t]);
    let line = out.lines().find(|l| l.starts_with("0 ")).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let leader: u32 = fields[1].parse().unwrap();
    let follower: u32 = fields[2]
        .split(',')
        .map(|r| r.parse::<u32>().unwrap())
        .find(|r| *r != leader)
        .unwrap();
    (leader, follower)
}

/// Starts the nodes it holds when dropped (a failed assertion included): the trio is left
/// with every node running.
struct Restart<'a>(&'a crate::real_kafka::Kafka, Vec<u32>);

impl Drop for Restart<'_> {
    fn drop(&mut self) {
        for &n in &self.1 {
            self.0.node("start", n);
        }
    }
}

/// A real truncation on the 3-node Kafka 4.1.1 cluster: a topic with two replicas (leader L,
/// follower F); kdirect reads 10 records; F is stopped and 5 more are written to L alone (the
/// ISR is {L}) and read by kdirect; L is killed, F started and made leader by an unclean
/// election (Admin.electLeaders UNCLEAN, which KRaft supports since 3.9), holding only
/// [0, 10); 7 new records go to F at offsets [10, 17). kdirect (failOnDataLoss=false) must
/// report exactly [10, 15) as lost (read, then gone from the log) and hand out the 7 new
/// records at 10..17, each once: no silent re-read, no skip. Needs KDIRECT_TEST_KAFKA_CP with
/// this branch's KTool (its `describe` and `elect-unclean` commands).
#[test]
fn an_unclean_election_on_the_trio_is_reported_with_the_exact_range() {
    use crate::real_kafka::{topic, Kafka};
    let Some(k) = Kafka::trio("an_unclean_election_on_the_trio_is_reported_with_the_exact_range")
    else {
        return;
    };
    // It stops and starts nodes: one such test at a time.
    let _one_at_a_time = crate::real_kafka::TRIO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let t = topic("kip320-unclean");
    k.tool("create", &["--topic", &t, "--partitions", "1", "--rf", "2"]);
    let (leader, follower) = leader_and_follower(&k, &t);
    k.tool("wait-isr", &["--topic", &t, "--replicas", "2"]);
    k.produce(&t, 1, 10, &[]);
    rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&k.bootstrap)
            .topics(&[t.as_str()])
            .start(StartPolicy::Earliest)
            .fail_on_data_loss(false)
            .build()
            .await
            .unwrap();
        let (got, lost) = read_to(&mut s, 10).await.unwrap();
        assert_eq!(got.len(), 10);
        assert!(lost.is_empty());
        let _restart = Restart(&k, vec![follower, leader]);
        k.node("stop", follower);
        k.produce(&t, 1, 5, &["--from", "10"]);
        let (got, lost) = read_to(&mut s, 15).await.unwrap();
        assert_eq!(
            got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
            (10..15).collect::<Vec<_>>()
        );
        assert!(lost.is_empty());
        k.node("kill", leader);
        k.node("start", follower);
        // The killed leader stays leader in the metadata until the controller fences it
        // (broker.session.timeout.ms): the election is retried until another node leads.
        let leader_s = leader.to_string();
        let elected = k.tool("elect-unclean", &["--topic", &t, "--not", &leader_s]);
        assert_eq!(
            elected.lines().last().map(str::trim),
            Some(follower.to_string().as_str()),
            "the stale follower leads"
        );
        assert_eq!(k.end_offsets(&t), vec![10], "the new leader's log ends at 10");
        k.produce(&t, 1, 7, &["--from", "100"]);
        let (got, lost) = read_to(&mut s, 17).await.unwrap();
        assert_eq!(
            lost.iter().map(|l| (l.from, l.until)).collect::<Vec<_>>(),
            vec![(10, 15)],
            "{lost:?}"
        );
        assert!(
            matches!(lost[0].reason, DataLossReason::Truncated { broker, .. } if broker == follower as i32),
            "{lost:?}"
        );
        let want: Vec<(i64, String)> = (0..7)
            .map(|i| (10 + i, format!("value 0-{}", 100 + i)))
            .collect();
        assert_eq!(got, want, "the new leader's records at 10..17, once each");
    });
    // Both nodes back (the guard started them); the old leader truncates to the new one's log.
    k.tool("wait-isr", &["--topic", &t, "--replicas", "2"]);
}

/// The restart case on the 3-node Kafka 4.1.1 cluster, with the Kafka group's offsets as the
/// store (OffsetCommit keeps the committed leader epoch, OffsetFetch gives it back): kdirect
/// reads 15 records (the last 5 written to the leader alone), commits and stops; while it is
/// down the leader is killed, the stale follower elected uncleanly (its log ends at 10), and 7
/// new records written. The restarted stream (failOnDataLoss=false) must report exactly
/// [10, 15) as lost before reading, and hand out the 7 new records at 10..17, each once —
/// without the stored epoch it would resume at 15 and silently skip 10..15's new records.
#[test]
fn a_truncation_while_the_stream_was_down_is_found_on_restart_on_the_trio() {
    use crate::real_kafka::{topic, Kafka};
    let Some(k) =
        Kafka::trio("a_truncation_while_the_stream_was_down_is_found_on_restart_on_the_trio")
    else {
        return;
    };
    let _one_at_a_time = crate::real_kafka::TRIO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let t = topic("kip320-restart");
    let group = format!("{t}-g");
    k.tool("create", &["--topic", &t, "--partitions", "1", "--rf", "2"]);
    let (leader, follower) = leader_and_follower(&k, &t);
    k.tool("wait-isr", &["--topic", &t, "--replicas", "2"]);
    k.produce(&t, 1, 10, &[]);
    let open = || async {
        DirectStream::builder()
            .bootstrap(&k.bootstrap)
            .topics(&[t.as_str()])
            .start(StartPolicy::Earliest)
            .fail_on_data_loss(false)
            .group(&group)
            .store_spec("kafka")
            .build()
            .await
            .unwrap()
    };
    let _restart = Restart(&k, vec![follower, leader]);
    rt().block_on(async {
        let mut s = open().await;
        let (got, _) = read_and_commit_to(&mut s, 10).await.unwrap();
        assert_eq!(got.len(), 10);
        k.node("stop", follower);
        k.produce(&t, 1, 5, &["--from", "10"]);
        let (got, lost) = read_and_commit_to(&mut s, 15).await.unwrap();
        assert_eq!(
            got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
            (10..15).collect::<Vec<_>>()
        );
        assert!(lost.is_empty());
    });
    // kdirect is down from here.
    k.node("kill", leader);
    k.node("start", follower);
    let leader_s = leader.to_string();
    let elected = k.tool("elect-unclean", &["--topic", &t, "--not", &leader_s]);
    assert_eq!(
        elected.lines().last().map(str::trim),
        Some(follower.to_string().as_str()),
        "the stale follower leads"
    );
    assert_eq!(
        k.end_offsets(&t),
        vec![10],
        "the new leader's log ends at 10"
    );
    k.produce(&t, 1, 7, &["--from", "100"]);
    rt().block_on(async {
        let mut s = open().await;
        assert_eq!(s.stored_positions().values().copied().collect::<Vec<_>>(), vec![15]);
        let (got, lost) = read_and_commit_to(&mut s, 17).await.unwrap();
        assert_eq!(
            lost.iter().map(|l| (l.from, l.until)).collect::<Vec<_>>(),
            vec![(10, 15)],
            "{lost:?}"
        );
        assert!(
            matches!(lost[0].reason, DataLossReason::Truncated { broker, .. } if broker == follower as i32),
            "{lost:?}"
        );
        let want: Vec<(i64, String)> = (0..7)
            .map(|i| (10 + i, format!("value 0-{}", 100 + i)))
            .collect();
        assert_eq!(got, want, "the new leader's records at 10..17, once each");
    });
    drop(_restart);
    k.tool("wait-isr", &["--topic", &t, "--replicas", "2"]);
}

/// A batch logged before the crash (write-ahead, never committed) is re-run with exactly its
/// ranges after the restart; if the log was truncated under its start meanwhile, the fetch
/// (sending the stored epoch) finds it. failOnDataLoss=false: the re-run batch reports
/// [12, 15) as lost and hands out the new records from 12 — the widened read the live path
/// does — then commits as logged; failOnDataLoss=true: the restart fails with the range. Was:
/// the re-run read [15, 20) as if nothing had happened (no epoch), and with the epoch but
/// failOnDataLoss=false it failed on every restart.
#[test]
fn a_batch_re_run_after_a_crash_over_a_truncated_log_follows_the_data_loss_policy() {
    for fail in [false, true] {
        rt().block_on(async {
            let (fake, first) = led_by_two().await;
            let dir = tempdir(&format!("replay-{fail}"));
            let mut s = stored_stream(&fake, Kept::Checkpoint, &dir, true).await;
            read_and_commit_to(&mut s, 15).await.unwrap();
            append_batch(&fake, "b", 5);
            // Handed out (its plan logged), never committed: a crash.
            let b = s.next_batch().await.unwrap().unwrap();
            assert_eq!(
                b.ranges()
                    .iter()
                    .map(|r| (r.from, r.until))
                    .collect::<Vec<_>>(),
                vec![(15, 20)]
            );
            drop(b);
            drop(s);
            fake.truncate_on_leader_change("t", 0, first, 12).unwrap();
            append_batch(&fake, "c", 10);
            let mut s = stored_stream(&fake, Kept::Checkpoint, &dir, fail).await;
            let first_batch = s.next_batch().await;
            if fail {
                let e = first_batch.expect_err("the re-run batch's log was truncated");
                let msg = e.to_string();
                assert!(msg.contains("offsets [12, 15)"), "{msg}");
                return;
            }
            let b = first_batch.unwrap().unwrap();
            assert!(b.is_replay());
            assert_eq!(
                b.ranges()
                    .iter()
                    .map(|r| (r.from, r.until))
                    .collect::<Vec<_>>(),
                vec![(15, 20)],
                "the logged ranges"
            );
            assert_eq!(
                b.lost()
                    .iter()
                    .map(|l| (l.from, l.until))
                    .collect::<Vec<_>>(),
                vec![(12, 15)]
            );
            let mut got = records(&b);
            s.commit(b).await.unwrap();
            let (rest, lost) = read_and_commit_to(&mut s, 22).await.unwrap();
            assert!(lost.is_empty(), "{lost:?}");
            got.extend(rest);
            let want: Vec<(i64, String)> = (12..22).map(|o| (o, format!("c{o}"))).collect();
            assert_eq!(got, want, "the new leader's records from 12, once each");
        });
    }
}

/// The stream finds a truncation (failOnDataLoss=false) and widens its next batch back to
/// the truncation point: the batch's plan, logged as [15, 20), hands out 12..20. A crash
/// before its commit re-runs it: the re-run finds the same truncation with the committed
/// epoch and hands out the same records, 12..20, not 15..20 (which would skip the new records
/// at 12..15 for good once committed). (The truncation happens while the stream is down, so
/// that the stream never sees the log ending below its position: see
/// `a_log_now_ending_below_the_position_is_checked_with_offset_for_leader_epoch`.)
#[test]
fn a_widened_batch_re_run_after_a_crash_hands_out_the_same_records() {
    rt().block_on(async {
        let (fake, first) = led_by_two().await;
        let dir = tempdir("replay-widened");
        let mut s = stored_stream(&fake, Kept::Checkpoint, &dir, false).await;
        read_and_commit_to(&mut s, 15).await.unwrap();
        drop(s);
        fake.truncate_on_leader_change("t", 0, first, 12).unwrap();
        append_batch(&fake, "c", 8);
        let mut s = stored_stream(&fake, Kept::Checkpoint, &dir, false).await;
        let b = s.next_batch().await.unwrap().unwrap();
        let live = (
            b.ranges()
                .iter()
                .map(|r| (r.from, r.until))
                .collect::<Vec<_>>(),
            b.lost()
                .iter()
                .map(|l| (l.from, l.until))
                .collect::<Vec<_>>(),
            records(&b),
        );
        assert_eq!(live.0, vec![(15, 20)], "{live:?}");
        assert_eq!(live.1, vec![(12, 15)], "{live:?}");
        let want: Vec<(i64, String)> = (12..20).map(|o| (o, format!("c{o}"))).collect();
        assert_eq!(live.2, want);
        drop(b);
        drop(s);
        let mut s = stored_stream(&fake, Kept::Checkpoint, &dir, false).await;
        let b = s.next_batch().await.unwrap().unwrap();
        assert!(b.is_replay());
        let again = (
            b.ranges()
                .iter()
                .map(|r| (r.from, r.until))
                .collect::<Vec<_>>(),
            b.lost()
                .iter()
                .map(|l| (l.from, l.until))
                .collect::<Vec<_>>(),
            records(&b),
        );
        assert_eq!(again, live, "the re-run hands out what the crashed run did");
        s.commit(b).await.unwrap();
    });
}

/// Retention removed records below the committed position while the stream was down
/// (failOnDataLoss=false): the resumed stream reports [10, 15) lost and reads on from the log
/// start, and its batch commits — its range starts at the stored position, so the store's
/// compare-and-set on `from` holds (was: the range started at the log start, and every
/// commit failed with a conflict, on every restart). With the checkpoint and the group store.
#[test]
fn records_removed_below_the_committed_position_are_skipped_and_the_batch_commits() {
    for kept in [Kept::Checkpoint, Kept::Group] {
        rt().block_on(async {
            let fake = FakeCluster::builder().topic("t", 1).build().await.unwrap();
            append(&fake, "a", 10);
            let dir = tempdir(&format!("below-start-{kept:?}"));
            let mut s = stored_stream(&fake, kept, &dir, false).await;
            read_and_commit_to(&mut s, 10).await.unwrap();
            drop(s);
            append(&fake, "a", 10);
            fake.set_log_start("t", 0, 15).unwrap();
            let mut s = stored_stream(&fake, kept, &dir, false).await;
            let (got, lost) = read_and_commit_to(&mut s, 20).await.unwrap();
            assert_eq!(
                lost.iter()
                    .map(|l| (l.from, l.until, l.reason))
                    .collect::<Vec<_>>(),
                vec![(10, 15, DataLossReason::BelowLogStart)],
                "{kept:?}"
            );
            let want: Vec<(i64, String)> = (15..20).map(|o| (o, format!("a{o}"))).collect();
            assert_eq!(got, want, "{kept:?}");
            drop(s);
            let s = stored_stream(&fake, kept, &dir, false).await;
            assert_eq!(
                s.stored_positions().values().copied().collect::<Vec<_>>(),
                vec![20],
                "{kept:?}"
            );
        });
    }
}

/// The stream reads [0, 15) and commits; while it is down an unclean election leaves the log
/// ending at 12, and one new record goes to 12: the log now ends (13) below the stored
/// position. Returns the fake and the store's directory.
async fn commit_then_truncate_below(kept: Kept, name: &str) -> (FakeCluster, PathBuf) {
    let (fake, first) = led_by_two().await;
    let dir = tempdir(name);
    let mut s = stored_stream(&fake, kept, &dir, true).await;
    read_and_commit_to(&mut s, 15).await.unwrap();
    drop(s);
    fake.truncate_on_leader_change("t", 0, first, 12).unwrap();
    append(&fake, "c", 1);
    assert_eq!(fake.high_watermark("t", 0).unwrap(), 13);
    (fake, dir)
}

/// What a move back must look like: every store keeps the leader epoch, so the stream finds
/// the truncation (OffsetForLeaderEpoch) and goes on at 12. (Was, with SQLite, which kept no
/// epoch: the stream saw a position past the end and read the log again from its start,
/// [0, 12) a second time.)
fn moved_back_read(_kept: Kept) -> (Vec<(i64, i64)>, Records) {
    (vec![(12, 15)], vec![(12, "c12".to_owned())])
}

/// failOnDataLoss=false, and the log now ends below the committed position (truncated below
/// it while the stream was down and not written past it since; the same holds for a topic
/// deleted and re-created): the stream reports the loss, moves the partition back, and the
/// batch commits — it names the stored position it moves back from
/// (`Batch::moved_back`), which the store's compare-and-set expects. Restarted, the stream
/// goes on from the new position, nothing lost twice, nothing read twice. Was: the batch's
/// range started below the stored position and every commit failed with a conflict, on
/// every restart.
#[test]
fn a_log_now_ending_below_the_committed_position_moves_back_and_commits() {
    for kept in [Kept::Checkpoint, Kept::Group, Kept::Sqlite] {
        rt().block_on(async {
            let (fake, dir) =
                commit_then_truncate_below(kept, &format!("move-back-{kept:?}")).await;
            let mut s = stored_stream(&fake, kept, &dir, false).await;
            let b = s.next_batch().await.unwrap().unwrap();
            let (want_lost, want_records) = moved_back_read(kept);
            assert_eq!(
                b.lost()
                    .iter()
                    .map(|l| (l.from, l.until))
                    .collect::<Vec<_>>(),
                want_lost,
                "{kept:?}: {:?}",
                b.lost()
            );
            assert_eq!(records(&b), want_records, "{kept:?}");
            assert_eq!(
                b.moved_back().values().copied().collect::<Vec<_>>(),
                vec![15],
                "{kept:?}: the batch names the stored position it moves back from"
            );
            s.commit(b)
                .await
                .unwrap_or_else(|e| panic!("{kept:?}: {e}"));
            drop(s);
            // Restarted: from 13, where the commit left it; the next records once each.
            append(&fake, "c", 2);
            let mut s = stored_stream(&fake, kept, &dir, false).await;
            assert_eq!(
                s.stored_positions().values().copied().collect::<Vec<_>>(),
                vec![13],
                "{kept:?}"
            );
            let (got, lost) = read_and_commit_to(&mut s, 15).await.unwrap();
            assert!(lost.is_empty(), "{kept:?}: {lost:?}");
            assert_eq!(
                got,
                vec![(13, "c13".to_owned()), (14, "c14".to_owned())],
                "{kept:?}"
            );
        });
    }
}

/// The moved-back batch is handed out (its plan logged with the position it moves back
/// from) and the process dies before its commit: the restart re-runs it with the same
/// ranges and the same stored position, and its commit holds. Was: the re-run's commit was
/// refused with a conflict, on every restart.
#[test]
fn a_moved_back_batch_re_run_after_a_crash_commits() {
    rt().block_on(async {
        let kept = Kept::Checkpoint;
        let (fake, dir) = commit_then_truncate_below(kept, "move-back-replay").await;
        let mut s = stored_stream(&fake, kept, &dir, false).await;
        let b = s.next_batch().await.unwrap().unwrap();
        let live = (b.ranges().to_vec(), b.moved_back().clone(), records(&b));
        drop(b);
        drop(s);
        let mut s = stored_stream(&fake, kept, &dir, false).await;
        let b = s.next_batch().await.unwrap().unwrap();
        assert!(b.is_replay());
        assert_eq!(
            (b.ranges().to_vec(), b.moved_back().clone(), records(&b)),
            live,
            "the re-run is the logged plan"
        );
        s.commit(b).await.unwrap();
        drop(s);
        let s = stored_stream(&fake, kept, &dir, false).await;
        assert_eq!(
            s.stored_positions().values().copied().collect::<Vec<_>>(),
            vec![13]
        );
    });
}
