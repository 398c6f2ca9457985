//! KIP-320 truncation detection through the stream, on the fake broker: a log truncated under
//! the stream's position by an unclean leader change is found — by the fetch's diverging
//! epoch, or by OffsetForLeaderEpoch before the next plan — and reported as data loss with the
//! exact range of records that were handed out but are no longer in the log. Records are
//! never skipped and never handed out twice at one offset without that report.

use std::collections::BTreeMap;

use bytes::Bytes;
use kdirect::engine::plan::{DataLossReason, PlanError, StartPolicy};
use kdirect::engine::ErrorKind;
use kdirect::DirectStream;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::support::rt;

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

/// Reads batches until `until` is reached on t-0: (offset, value) of every record, and the
/// lost ranges the batches reported.
async fn read_to(
    s: &mut DirectStream,
    until: i64,
) -> Result<(Vec<(i64, String)>, Vec<kdirect::engine::plan::LostRange>), kdirect::Error> {
    let mut got = Vec::new();
    let mut lost = Vec::new();
    let mut reached = 0;
    while reached < until {
        let b = s.next_batch().await?.expect("an unbounded stream");
        lost.extend(b.lost().iter().cloned());
        b.for_each_record(|_, r| {
            got.push((
                r.offset(),
                String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned(),
            ))
        })
        .unwrap();
        reached = b.ranges().iter().map(|r| r.until).max().unwrap_or(reached);
        s.done(b);
    }
    Ok((got, lost))
}

/// Broker 1 leads at epoch 0 for [0, 10); broker 2 at epoch 1 for [10, 15); the stream reads
/// all 15. Then broker 1 comes back as leader by an unclean election with only [0, 12), at
/// epoch 2. Returns the fake.
async fn read_then_truncate(fail: bool) -> (FakeCluster, DirectStream) {
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
        let engine = match &e {
            kdirect::Error::Engine(e) => e,
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
    let t = topic("kip320-unclean");
    k.tool("create", &["--topic", &t, "--partitions", "1", "--rf", "2"]);
    // The tools' own log lines may come first on stdout.
    let out = k.tool("describe", &["--topic", &t]);
    let line = out.lines().find(|l| l.starts_with("0 ")).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let leader: u32 = fields[1].parse().unwrap();
    let follower: u32 = fields[2]
        .split(',')
        .map(|r| r.parse::<u32>().unwrap())
        .find(|r| *r != leader)
        .unwrap();
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
