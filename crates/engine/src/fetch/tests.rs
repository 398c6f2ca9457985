//! The fetch session driven by hand, as `plan/tests.rs` drives the planner: metadata and
//! Fetch answers are made up, so every branch (leader moves, sizing, partial answers, budget
//! shares, answers that never make progress) is reached without a socket.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use bytes::Bytes;
use kdirect_proto::api::fetch::{FetchView, FetchedPartition};
use kdirect_proto::api::metadata::{BrokerInfo, PartitionInfo, TopicInfo};
use kdirect_proto::ErrorCode;

use super::{FetchConfig, FetchSession, Fetcher, LeaderRequest, RoundEnd};
use crate::cluster::ClusterView;
use crate::error::{BrokerName, ErrorKind};
use crate::plan::OffsetRange;

const TOPIC_ID: [u8; 16] = [7; 16];

/// A cluster of brokers 1 and 2; topic `t` with `leaders[p]` leading partition `p`.
fn view(leaders: &[i32]) -> ClusterView {
    let mut brokers = BTreeMap::new();
    for id in [1, 2] {
        brokers.insert(
            id,
            BrokerInfo {
                node_id: id,
                host: "127.0.0.1".into(),
                port: 9000 + id,
                rack: None,
            },
        );
    }
    let partitions = leaders
        .iter()
        .enumerate()
        .map(|(p, &leader)| PartitionInfo {
            partition: p as i32,
            error: ErrorCode::NONE,
            leader,
            leader_epoch: 5,
            replicas: vec![leader],
            isr: vec![leader],
        })
        .collect();
    let mut topics = BTreeMap::new();
    topics.insert(
        "t".to_owned(),
        TopicInfo {
            name: "t".into(),
            id: TOPIC_ID,
            error: ErrorCode::NONE,
            internal: false,
            partitions,
        },
    );
    ClusterView {
        brokers,
        topics,
        ..ClusterView::default()
    }
}

fn broker(id: i32) -> BrokerName {
    BrokerName {
        node_id: Some(id),
        addr: format!("127.0.0.1:{}", 9000 + id),
    }
}

/// One stored batch of `n` uncompressed records starting at `base`, with a right CRC.
fn batch(base: i64, n: i32) -> Vec<u8> {
    let mut records = Vec::new();
    for i in 0..n {
        // length, attributes, timestampDelta 0, offsetDelta i, key null, value "v", no headers.
        let body = [0u8, 0, (i as u8) << 1, 1, 2, b'v', 0];
        records.push((body.len() as u8) << 1);
        records.extend_from_slice(&body);
    }
    let mut b = Vec::new();
    b.extend_from_slice(&base.to_be_bytes());
    let len = (49 + records.len()) as i32;
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, below
    b.extend_from_slice(&0i16.to_be_bytes()); // attributes
    b.extend_from_slice(&(n - 1).to_be_bytes()); // last offset delta
    b.extend_from_slice(&0i64.to_be_bytes()); // base timestamp
    b.extend_from_slice(&0i64.to_be_bytes()); // max timestamp
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    b.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    b.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    b.extend_from_slice(&n.to_be_bytes());
    b.extend_from_slice(&records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

pub(crate) fn part(p: i32, hw: i64, records: Vec<u8>) -> FetchedPartition {
    FetchedPartition {
        topic: "t".into(),
        partition: p,
        error: ErrorCode::NONE,
        high_watermark: hw,
        last_stable_offset: hw,
        log_start_offset: 0,
        aborted_transactions: Vec::new(),
        preferred_read_replica: -1,
        current_leader: (-1, -1),
        diverging_epoch: None,
        records: Bytes::from(records),
    }
}

fn answer(parts: Vec<FetchedPartition>) -> FetchView {
    FetchView {
        session_id: 0,
        error: ErrorCode::NONE,
        throttle_time_ms: 0,
        partitions: parts,
    }
}

/// Feeds `s` broker 1's answer to `req` (`parts`, `size` bytes on the wire, no permit held),
/// which must be taken.
fn respond(
    budget: &Fetcher,
    s: &mut FetchSession,
    req: &LeaderRequest,
    parts: Vec<FetchedPartition>,
    size: usize,
) {
    s.on_response(
        &mut budget.state(),
        req,
        &broker(1),
        answer(parts),
        size,
        None,
    )
    .unwrap();
}

fn ranges(spec: &[(i32, i64, i64)]) -> Vec<OffsetRange> {
    spec.iter()
        .map(|&(p, from, until)| OffsetRange::new("t", p, from, until))
        .collect()
}

#[test]
fn first_round_asks_one_partition_then_everyone_by_leader() {
    let budget = Fetcher::new(64 << 20);
    let mut s = FetchSession::new(
        &ranges(&[(0, 0, 10), (1, 0, 10), (2, 0, 10)]),
        &FetchConfig::default(),
        &budget,
    );
    let v = view(&[1, 2, 1]);
    // Nothing learned yet: one partition goes first, asked for max.partition.fetch.bytes.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].leader, 1);
    assert_eq!(reqs[0].topics[0].partitions.len(), 1);
    assert_eq!(reqs[0].topics[0].partitions[0].partition_max_bytes, 1 << 20);
    assert_eq!(reqs[0].topics[0].partitions[0].current_leader_epoch, 5);
    assert!(reqs[0].has_topic_ids());
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 10, batch(0, 10))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    assert_eq!(s.positions(), &[10, 0, 0]);
    assert_eq!(s.held(), 500);
    // Now sized from what was learned, grouped by leader: p2 on broker 1, p1 on broker 2.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    let mut leaders: Vec<(i32, Vec<i32>)> = reqs
        .iter()
        .map(|r| {
            (
                r.leader,
                r.topics[0].partitions.iter().map(|p| p.partition).collect(),
            )
        })
        .collect();
    leaders.sort();
    assert_eq!(leaders, vec![(1, vec![2]), (2, vec![1])]);
    for r in &reqs {
        let asked = r.topics[0].partitions[0].partition_max_bytes;
        assert!(
            asked < 1 << 20,
            "sized from the learned bytes per offset: {asked}"
        );
    }
    let (r1, r2) = if reqs[0].leader == 1 {
        (&reqs[0], &reqs[1])
    } else {
        (&reqs[1], &reqs[0])
    };
    s.on_response(
        &mut budget.state(),
        r1,
        &broker(1),
        answer(vec![part(2, 10, batch(0, 10))]),
        400,
        None,
    )
    .unwrap();
    s.on_response(
        &mut budget.state(),
        r2,
        &broker(2),
        answer(vec![part(1, 10, batch(0, 10))]),
        400,
        None,
    )
    .unwrap();
    assert!(matches!(s.end_round(), RoundEnd::Done));
    let data = s.finish(&mut budget.state());
    assert_eq!(data.len(), 3);
    for d in &data {
        assert_eq!(d.for_each_record(|_| {}).unwrap(), 10, "{:?}", d.range);
        assert_eq!(
            d.chunks[0].broker().node_id,
            Some(if d.range.partition == 1 { 2 } else { 1 })
        );
    }
}

#[test]
fn a_partition_left_out_of_every_answer_is_a_retry_not_a_resend_loop() {
    let budget = Fetcher::new(64 << 20);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 10)]), &FetchConfig::default(), &budget);
    let v = view(&[1]);
    for shape in [
        answer(vec![]),
        answer(vec![part(5, 10, batch(0, 10))]),
        // The same old batch again: nothing past the position once it moved.
    ] {
        let reqs = s.next_requests(&v, &budget.state()).unwrap();
        s.on_response(&mut budget.state(), &reqs[0], &broker(1), shape, 100, None)
            .unwrap();
        match s.end_round() {
            RoundEnd::Retry(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        ErrorKind::NoProgress {
                            partition: 0,
                            offset: 0,
                            ..
                        }
                    ),
                    "{e}"
                );
                assert!(e.is_retriable());
                assert!(e.to_string().contains("broker 1"), "{e}");
            }
            other => panic!("expected a retry, got {other:?}"),
        }
    }
    // The same old batch after the position moved past it.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 20, batch(0, 5))],
        100,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    assert_eq!(s.positions(), &[5]);
    // The old batch again: first taken for a batch larger than asked (asked again at the
    // full size, once), then a retry with backoff.
    let old = || answer(vec![part(0, 20, batch(0, 5))]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    s.on_response(&mut budget.state(), &reqs[0], &broker(1), old(), 100, None)
        .unwrap();
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].partition_max_bytes, 1 << 20);
    s.on_response(&mut budget.state(), &reqs[0], &broker(1), old(), 100, None)
        .unwrap();
    assert!(
        matches!(s.end_round(), RoundEnd::Retry(_)),
        "an old batch moves nothing"
    );
}

#[test]
fn a_batch_cut_short_is_asked_again_for_the_full_size_then_retried() {
    let budget = Fetcher::new(64 << 20);
    let mut s = FetchSession::new(
        &ranges(&[(0, 0, 10), (1, 0, 100)]),
        &FetchConfig::default(),
        &budget,
    );
    let v = view(&[1, 1]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 10, batch(0, 10))],
        300,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    // p1 asked for little (sized from p0's small batch); its batch is cut short.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    let asked = reqs[0].topics[0].partitions[0].partition_max_bytes;
    assert!(asked < 1 << 20);
    let mut cut = batch(0, 100);
    cut.truncate(100);
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(1, 100, cut.clone())],
        200,
    );
    assert!(
        matches!(s.end_round(), RoundEnd::Continue),
        "asked again, uncapped, at once"
    );
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].partition_max_bytes, 1 << 20);
    // Still cut short at the full size: that is the broker's doing, retried with backoff.
    respond(&budget, &mut s, &reqs[0], vec![part(1, 100, cut)], 200);
    match s.end_round() {
        RoundEnd::Retry(e) => assert!(
            matches!(e.kind(), ErrorKind::NoProgress { partition: 1, .. }),
            "{e}"
        ),
        other => panic!("expected a retry, got {other:?}"),
    }
}

#[test]
fn leader_changes_and_retriable_errors_retry_fatal_ones_end() {
    let budget = Fetcher::new(64 << 20);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 10)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&view(&[1]), &budget.state()).unwrap();
    let mut p = part(0, 10, Vec::new());
    p.error = ErrorCode::NOT_LEADER_OR_FOLLOWER;
    respond(&budget, &mut s, &reqs[0], vec![p], 100);
    assert!(
        matches!(s.end_round(), RoundEnd::Retry(e) if matches!(e.kind(), ErrorKind::Range { .. }))
    );
    // No leader in the metadata: a retry, and the other ranges are still asked.
    let reqs = s.next_requests(&view(&[-1]), &budget.state()).unwrap();
    assert!(reqs.is_empty());
    assert!(
        matches!(s.end_round(), RoundEnd::Retry(e) if matches!(e.kind(), ErrorKind::NoLeader { .. }))
    );
    // A leader the broker list does not name is retriable too.
    assert!(crate::Error::from(ErrorKind::UnknownBroker { node_id: 9 }).is_retriable());
    let reqs = s.next_requests(&view(&[1]), &budget.state()).unwrap();
    let mut p = part(0, 10, Vec::new());
    p.error = ErrorCode::OFFSET_OUT_OF_RANGE;
    let e = s
        .on_response(
            &mut budget.state(),
            &reqs[0],
            &broker(1),
            answer(vec![p]),
            100,
            None,
        )
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Range { at: 0, .. }), "{e}");
}

#[test]
fn a_range_past_the_log_end_is_past_end_not_configuration() {
    let budget = Fetcher::new(64 << 20);
    let mut s = FetchSession::new(&ranges(&[(0, 10, 20)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&view(&[1]), &budget.state()).unwrap();
    let e = s
        .on_response(
            &mut budget.state(),
            &reqs[0],
            &broker(1),
            answer(vec![part(0, 10, Vec::new())]),
            100,
            None,
        )
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::PastEnd {
                from: 10,
                until: 20,
                end: 10,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("broker 1"), "{e}");
}

#[test]
fn the_budget_is_shared_in_proportion_and_its_end_is_an_error() {
    let budget = Fetcher::new(4 << 20);
    let cfg = FetchConfig::default();
    let mut s = FetchSession::new(&ranges(&[(0, 0, 10), (1, 0, 10)]), &cfg, &budget);
    let v = view(&[1, 2]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    // One partition first, for max.partition.fetch.bytes: within the room.
    assert_eq!(reqs[0].reserve, 1 << 20);
    assert!(reqs[0].params.max_bytes < 1 << 20, "framing room left");
    // Holding the whole budget, the session cannot ask for more.
    s.on_response(
        &mut budget.state(),
        &reqs[0],
        &broker(1),
        answer(vec![part(0, 10, batch(0, 5))]),
        4 << 20,
        None,
    )
    .unwrap();
    let e = s.next_requests(&v, &budget.state()).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::BudgetExceeded {
                whole_batch: true,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("t-0 [0, 10), t-1 [0, 10)"), "{msg}");
    assert!(msg.contains("maxOffsetsPerTrigger"), "{msg}");
}

#[test]
fn records_removed_under_the_range_are_data_loss_with_the_exact_range() {
    let budget = Fetcher::new(64 << 20);
    let cfg = FetchConfig::default();
    let mut s = FetchSession::new(&ranges(&[(0, 0, 10)]), &cfg, &budget);
    let reqs = s.next_requests(&view(&[1]), &budget.state()).unwrap();
    let mut p = part(0, 10, Vec::new());
    p.error = ErrorCode::OFFSET_OUT_OF_RANGE;
    p.log_start_offset = 7;
    let e = s
        .on_response(
            &mut budget.state(),
            &reqs[0],
            &broker(1),
            answer(vec![p]),
            100,
            None,
        )
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Plan(crate::plan::PlanError::DataLoss {
                lost_from: 0,
                lost_until: 7,
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("data loss in t-0"), "{e}");
}

#[test]
fn a_reservation_that_does_not_fit_waits_and_is_counted() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let budget = Fetcher::new(100);
        let first = budget.budget().reserve(60).await.unwrap();
        assert_eq!((budget.in_use(), budget.waits()), (60, 0), "60 fit at once");
        let b = budget.clone();
        let second = tokio::spawn(async move { b.budget().reserve(60).await.unwrap() });
        // On this one-thread runtime the spawned reservation runs when this task yields.
        for _ in 0..100 {
            if budget.waits() > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(budget.waits(), 1, "60 more do not fit beside the first 60");
        assert!(!second.is_finished());
        drop(first);
        let second = second.await.unwrap();
        assert_eq!((budget.in_use(), budget.waits()), (60, 1));
        drop(second);
        assert_eq!(budget.in_use(), 0, "everything released");
    });
}

/// KIP-392: a leader that points at a preferred read replica (no records for the partition)
/// sends the next round there, and later batches too (the budget remembers it); an error
/// from that replica, or a replica not caught up to the range, sends the partition back to
/// its leader. The rack goes in every request.
#[test]
fn a_preferred_read_replica_is_followed_and_left_on_error() {
    let budget = Fetcher::new(64 << 20);
    let cfg = FetchConfig {
        client_rack: "rack-2".into(),
        ..FetchConfig::default()
    };
    let v = view(&[1]);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 10)]), &cfg, &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!((reqs[0].leader, reqs[0].rack.as_str()), (1, "rack-2"));
    let mut redirect = part(0, 10, Vec::new());
    redirect.preferred_read_replica = 2;
    respond(&budget, &mut s, &reqs[0], vec![redirect], 100);
    assert!(
        matches!(s.end_round(), RoundEnd::Continue),
        "a change, not a stall"
    );
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].leader, 2, "the replica in the client's rack");
    s.on_response(
        &mut budget.state(),
        &reqs[0],
        &broker(2),
        answer(vec![part(0, 10, batch(0, 5))]),
        300,
        None,
    )
    .unwrap();
    assert_eq!(s.positions(), &[5]);
    // The replica's high watermark lags the range's end: back to the leader.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].leader, 2);
    s.on_response(
        &mut budget.state(),
        &reqs[0],
        &broker(2),
        answer(vec![part(0, 5, Vec::new())]),
        100,
        None,
    )
    .unwrap();
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].leader, 1);
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 10, batch(5, 5))],
        300,
    );
    assert!(matches!(s.end_round(), RoundEnd::Done));
    // A later batch on the same budget: the leader points again, then the replica errs.
    let mut s = FetchSession::new(&ranges(&[(0, 10, 20)]), &cfg, &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    let mut redirect = part(0, 20, Vec::new());
    redirect.preferred_read_replica = 2;
    respond(&budget, &mut s, &reqs[0], vec![redirect], 100);
    s.end_round();
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].leader, 2);
    let mut err = part(0, 20, Vec::new());
    err.error = ErrorCode::NOT_LEADER_OR_FOLLOWER;
    s.on_response(
        &mut budget.state(),
        &reqs[0],
        &broker(2),
        answer(vec![err]),
        100,
        None,
    )
    .unwrap();
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(
        reqs[0].leader, 1,
        "back to the leader after the replica's error"
    );
    let mut s2 = FetchSession::new(&ranges(&[(0, 10, 20)]), &cfg, &budget);
    assert_eq!(s2.next_requests(&v, &budget.state()).unwrap()[0].leader, 1);
}

/// [`batch`] written by a leader at `epoch` (the header's partition_leader_epoch sits before
/// the CRC'd bytes).
fn batch_at_epoch(base: i64, n: i32, epoch: i32) -> Vec<u8> {
    let mut b = batch(base, n);
    b[12..16].copy_from_slice(&epoch.to_be_bytes());
    b
}

fn diverging(p: i32, hw: i64, epoch: i32, end_offset: i64) -> FetchedPartition {
    let mut d = part(p, hw, Vec::new());
    d.diverging_epoch = Some(kdirect_proto::api::fetch::EpochEnd { epoch, end_offset });
    d
}

/// Reads `[from, until)` of t-0 whole in one answer holding one batch at `epoch`.
fn read_whole(budget: &Fetcher, from: i64, until: i64, epoch: i32) {
    let mut s = FetchSession::new(
        &ranges(&[(0, from, until)]),
        &FetchConfig::default(),
        budget,
    );
    let reqs = s.next_requests(&view(&[1]), &budget.state()).unwrap();
    let n = i32::try_from(until - from).unwrap();
    respond(
        budget,
        &mut s,
        &reqs[0],
        vec![part(0, until, batch_at_epoch(from, n, epoch))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Done));
    s.finish(&mut budget.state());
}

/// KIP-320: the epoch of the last batch read is sent with the next fetch from where it ended,
/// within a session and across sessions sharing a budget (the stream's batches); a range that
/// does not start there sends -1 (nothing to validate against).
#[test]
fn the_last_fetched_epoch_follows_the_position() {
    let budget = Fetcher::new(64 << 20);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 20)]), &FetchConfig::default(), &budget);
    let v = view(&[1]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, -1);
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 20, batch_at_epoch(0, 10, 3))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].fetch_offset, 10);
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, 3);
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 20, batch_at_epoch(10, 10, 4))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Done));
    s.finish(&mut budget.state());
    let f = budget.last_fetched("t", 0).unwrap();
    assert_eq!((f.position, f.epoch, f.leader_epoch), (20, 4, 5));
    // The next batch from 20 sends epoch 4; one from elsewhere (a seek) sends -1.
    let mut next = FetchSession::new(&ranges(&[(0, 20, 30)]), &FetchConfig::default(), &budget);
    let reqs = next.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, 4);
    let mut elsewhere =
        FetchSession::new(&ranges(&[(0, 25, 30)]), &FetchConfig::default(), &budget);
    let reqs = elsewhere.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, -1);
}

/// A diverging epoch whose end is below the range's start: records an earlier batch read
/// (and handed out) are gone. Data loss with the exact range, the epochs and the leader.
#[test]
fn a_diverging_epoch_below_the_range_is_truncation_data_loss() {
    let budget = Fetcher::new(64 << 20);
    read_whole(&budget, 0, 10, 5);
    let mut s = FetchSession::new(&ranges(&[(0, 10, 15)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&view(&[1]), &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, 5);
    let e = s
        .on_response(
            &mut budget.state(),
            &reqs[0],
            &broker(1),
            answer(vec![diverging(0, 15, 5, 7)]),
            100,
            None,
        )
        .unwrap_err();
    let ErrorKind::Plan(crate::plan::PlanError::DataLoss {
        lost_from,
        lost_until,
        reason,
        ..
    }) = e.kind()
    else {
        panic!("{e}")
    };
    assert_eq!((*lost_from, *lost_until), (7, 10));
    assert_eq!(
        *reason,
        crate::plan::DataLossReason::Truncated {
            last_fetched_epoch: 5,
            leader_epoch: 5,
            broker: 1
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("data loss in t-0: offsets [7, 10)"), "{msg}");
    assert!(msg.contains("leader 1"), "{msg}");
}

/// A diverging epoch whose end lies inside what this session read (not handed out yet): the
/// range is read again from its start, no data loss; an end at or past the position only
/// updates the epoch sent.
#[test]
fn a_diverging_epoch_inside_the_session_rereads_the_range() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1]);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 20)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 20, batch_at_epoch(0, 10, 5))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    // Epoch 5 now ends at 12 in the leader's log: at or past 10, nothing lost.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![diverging(0, 20, 4, 12)],
        100,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    assert_eq!(s.positions(), &[10]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, 4);
    // Then: epoch 4 ends at 6, below 10 but inside the range: read [0, 20) again.
    respond(&budget, &mut s, &reqs[0], vec![diverging(0, 20, 4, 6)], 100);
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    assert_eq!(s.positions(), &[0]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].fetch_offset, 0);
    assert_eq!(reqs[0].topics[0].partitions[0].last_fetched_epoch, -1);
    let mut log = batch_at_epoch(0, 6, 4);
    log.extend(batch_at_epoch(6, 14, 6));
    respond(&budget, &mut s, &reqs[0], vec![part(0, 20, log)], 500);
    assert!(matches!(s.end_round(), RoundEnd::Done));
    let data = s.finish(&mut budget.state());
    let offsets: Vec<i64> = data[0].records().map(|r| r.unwrap().offset()).collect();
    assert_eq!(offsets, (0..20).collect::<Vec<_>>(), "no record twice");
    assert_eq!(budget.last_fetched("t", 0).unwrap().epoch, 6);
}

/// A broker that answers every fetch with a diverging epoch that moves nothing does not
/// spin the session: after a few, the round is a retry (with backoff, bounded by
/// default.api.timeout.ms in the driver) naming the partition and the epochs.
#[test]
fn endless_diverging_answers_become_a_retry() {
    let budget = Fetcher::new(64 << 20);
    read_whole(&budget, 0, 10, 5);
    let v = view(&[1]);
    let mut s = FetchSession::new(&ranges(&[(0, 10, 20)]), &FetchConfig::default(), &budget);
    let mut rounds = 0;
    let e = loop {
        rounds += 1;
        assert!(rounds < 20, "never gave up");
        let reqs = s.next_requests(&v, &budget.state()).unwrap();
        respond(
            &budget,
            &mut s,
            &reqs[0],
            vec![diverging(0, 20, 5, 30)],
            100,
        );
        match s.end_round() {
            RoundEnd::Continue => {}
            RoundEnd::Retry(e) => break e,
            RoundEnd::Done => panic!("done without data"),
        }
    };
    assert!(matches!(e.kind(), ErrorKind::NoProgress { .. }), "{e}");
    assert!(e.to_string().contains("diverging epoch 5"), "{e}");
}

#[test]
fn each_leaders_partitions_are_dealt_among_the_requests_in_flight() {
    let v = view(&[1, 2, 1, 2, 1, 1]);
    let rs = ranges(&[
        (0, 0, 10),
        (1, 0, 10),
        (2, 0, 10),
        (3, 0, 10),
        (4, 0, 10),
        (5, 0, 0),
    ]);
    let budget = Fetcher::new(64 << 20);
    // Nothing learned yet: one session (its first round probes one partition).
    assert_eq!(
        super::pipeline_groups(&v, &rs, 2, &budget),
        vec![vec![0, 1, 2, 3, 4, 5]]
    );
    budget.state().learn(100_000, 1000, 100_000);
    // Leader 1 has 0, 2, 4; leader 2 has 1, 3; the empty range goes to the first group.
    assert_eq!(
        super::pipeline_groups(&v, &rs, 2, &budget),
        vec![vec![5, 0, 4, 1], vec![2, 3]]
    );
    assert_eq!(super::pipeline_groups(&v, &rs, 1, &budget).len(), 1);
    assert_eq!(super::pipeline_groups(&v, &rs, 3, &budget).len(), 3);
    // Stored batches too large for a share of the budget: one session.
    budget.state().learn(10 << 20, 1000, 10 << 20);
    assert_eq!(super::pipeline_groups(&v, &rs, 2, &budget).len(), 1);
}

/// Data carried for a partition's next range (the stored batch a range ended inside of, or a
/// long-poll's answer) is used only under the topic id and the leader epoch it was read
/// under: a topic deleted and re-created under the same name has a new id and starts its
/// leader epochs again, so its ranges fetch rather than get the old topic's records.
#[test]
fn carried_data_needs_the_same_topic_id_and_leader_epoch() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1]);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 50)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 100, batch(0, 100))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Done));
    let left = s.take_straddling();
    assert_eq!((left.len(), left[0].from, left[0].until), (1, 50, 100));
    let carried = |topic_id: [u8; 16], leader_epoch: i32| {
        let c = super::Carried {
            from: 50,
            until: left[0].until,
            batches: left[0].batches.clone(),
            broker: broker(1),
            leader_epoch,
            topic_id,
            permit: std::sync::Arc::new(budget.try_reserve(1).unwrap()),
        };
        std::collections::HashMap::from([(("t".into(), 0), c)])
    };
    for (id, epoch, used) in [
        (TOPIC_ID, 5, true),
        ([8; 16], 5, false),
        (TOPIC_ID, 6, false),
    ] {
        let mut next =
            FetchSession::new(&ranges(&[(0, 50, 100)]), &FetchConfig::default(), &budget);
        next.start_with(carried(id, epoch), &v);
        assert_eq!(
            next.is_done(),
            used,
            "topic id {id:?}, leader epoch {epoch}"
        );
    }
}

/// A stored batch a range ends inside of is carried as a view of the response frame (no copy)
/// when the carried batches are a large part of that frame: the straddle holds the frame's
/// reservation, and `frames_to_share` picks the frame. A frame the carried batch is a small
/// part of is not kept whole for it (the batch is copied instead).
#[test]
fn a_straddled_batch_is_carried_in_its_frame_when_it_is_a_large_part_of_it() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1]);
    let straddle = |frame_bytes: usize| {
        let mut s = FetchSession::new(&ranges(&[(0, 0, 50)]), &FetchConfig::default(), &budget);
        let reqs = s.next_requests(&v, &budget.state()).unwrap();
        let batch_len = batch(0, 100).len();
        let hold = std::sync::Arc::new(budget.try_reserve(frame_bytes.max(batch_len)).unwrap());
        s.on_response(
            &mut budget.state(),
            &reqs[0],
            &broker(1),
            answer(vec![part(0, 100, batch(0, 100))]),
            frame_bytes,
            Some(hold.clone()),
        )
        .unwrap();
        assert!(matches!(s.end_round(), RoundEnd::Done));
        let left = s.take_straddling();
        assert_eq!(left.len(), 1);
        assert!(
            left[0]
                .frame
                .as_ref()
                .is_some_and(|f| std::sync::Arc::ptr_eq(f, &hold)),
            "the straddle holds the response's reservation"
        );
        (super::frames_to_share(&left), hold, batch_len)
    };
    let len = batch(0, 100).len();
    // The carried batch is the whole frame, or a quarter of it: kept in the frame.
    for frame in [len, 4 * len] {
        let (shared, hold, _) = straddle(frame);
        assert_eq!(
            shared,
            vec![std::sync::Arc::as_ptr(&hold)],
            "frame of {frame} bytes"
        );
    }
    // A frame 10 times the batch: copied rather than keeping 10 times its bytes.
    let (shared, _, _) = straddle(10 * len);
    assert!(shared.is_empty());
}

/// A compacted log (issue 32): the range's offsets were all removed, and the answer's first
/// whole batch starts past the range's end. That batch proves the range holds no records: the
/// range completes with none (not "no progress"), the fetch from its end sends that batch's
/// epoch (KIP-320), and the batch is carried to the range it belongs to, which reads it
/// without asking again.
#[test]
fn a_range_inside_a_compaction_gap_completes_empty_and_carries_the_next_batch() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1]);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 1000)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    // Records 0..10 are left of [0, 93326); then the log goes on at 93326.
    let mut records = batch_at_epoch(0, 10, 2);
    records.extend(batch_at_epoch(93_326, 50, 3));
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 93_376, records)],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Done));
    let left = s.take_straddling();
    assert_eq!((left.len(), left[0].from, left[0].until), (1, 1000, 93_376));
    let data = s.finish(&mut budget.state());
    let mut got = Vec::new();
    data[0].for_each_record(|r| got.push(r.offset())).unwrap();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    let f = budget.last_fetched("t", 0).unwrap();
    assert_eq!((f.position, f.epoch), (1000, 3));

    // The next ranges: one more inside the gap, then the one holding the batch; both read
    // from the carried batch alone (no Fetch).
    let carried = |left: &super::session::Straddling| {
        let c = super::Carried {
            from: left.from,
            until: left.until,
            batches: left.batches.clone(),
            broker: broker(1),
            leader_epoch: 5,
            topic_id: TOPIC_ID,
            permit: std::sync::Arc::new(budget.try_reserve(1).unwrap()),
        };
        std::collections::HashMap::from([(("t".into(), 0), c)])
    };
    let mut gap = FetchSession::new(
        &ranges(&[(0, 1000, 2000)]),
        &FetchConfig::default(),
        &budget,
    );
    gap.start_with(carried(&left[0]), &v);
    assert!(
        gap.is_done(),
        "a range inside the gap is read from the carried batch"
    );
    let left = gap.take_straddling();
    assert_eq!((left.len(), left[0].from, left[0].until), (1, 2000, 93_376));
    let data = gap.finish(&mut budget.state());
    assert_eq!(data[0].for_each_record(|_| ()).unwrap(), 0);
    assert_eq!(budget.epoch_at("t", 0, 2000), Some(3));

    let mut tail = FetchSession::new(
        &ranges(&[(0, 2000, 93_350)]),
        &FetchConfig::default(),
        &budget,
    );
    tail.start_with(carried(&left[0]), &v);
    assert!(tail.is_done());
    let mut got = Vec::new();
    tail.finish(&mut budget.state())[0]
        .for_each_record(|r| got.push(r.offset()))
        .unwrap();
    assert_eq!(got, (93_326..93_350).collect::<Vec<_>>());
}

/// The same gap met at the start of a range's second fetch: the first answer held records
/// below the gap only (the broker cut it at the byte limit), the second starts past the
/// range. Was "no progress ... no whole record batch" after retrying for a minute.
#[test]
fn a_gap_met_by_a_later_fetch_of_the_range_ends_it() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1]);
    let mut s = FetchSession::new(&ranges(&[(0, 0, 1000)]), &FetchConfig::default(), &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 93_376, batch(0, 10))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(reqs[0].topics[0].partitions[0].fetch_offset, 10);
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 93_376, batch(93_326, 50))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Done));
    assert_eq!(s.positions(), &[1000]);
}

/// Fitting the room (issue 32): a freshly planned batch whose ranges need more than the
/// session's room is read in whole stored batches until less than a stored batch of room is
/// left, and each open range ends where it stands (a range never reached ends at its `from`),
/// instead of failing with BudgetExceeded or being planned as slivers. Without fitting, the
/// ranges are read whole (they are a logged plan, re-run).
#[test]
fn fitting_the_room_ends_the_ranges_at_whole_stored_batches() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1, 1]);
    let mut s = FetchSession::new(
        &ranges(&[(0, 0, 100), (1, 0, 100)]),
        &FetchConfig::default(),
        &budget,
    );
    s.fit_to_room();
    s.limit_room(2_000);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    // Nothing is known of the data: one partition goes first. Its answer leaves less room
    // than a stored batch.
    assert_eq!(reqs[0].topics[0].partitions.len(), 1);
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 100, batch(0, 10))],
        1_950,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    assert!(s.next_requests(&v, &budget.state()).unwrap().is_empty());
    assert!(s.was_cut());
    assert!(matches!(s.end_round(), RoundEnd::Done));
    let data = s.finish(&mut budget.state());
    let ends: Vec<(i32, i64, i64)> = data
        .iter()
        .map(|d| (d.range.partition, d.range.from, d.range.until))
        .collect();
    assert_eq!(ends, vec![(0, 0, 10), (1, 0, 0)]);
    assert_eq!(data[0].for_each_record(|_| ()).unwrap(), 10);
    // The partition's next fetch starts where the range ended, with its epoch.
    assert_eq!(budget.last_fetched("t", 0).unwrap().position, 10);

    // A response larger than the room left, once the session holds data: dropped, the
    // ranges cut (never for the first response: one stored batch always fits).
    let mut s = FetchSession::new(&ranges(&[(0, 0, 100)]), &FetchConfig::default(), &budget);
    s.fit_to_room();
    s.limit_room(2_000);
    assert!(!s.cut_instead_of(5_000), "nothing held yet");
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 100, batch(0, 10))],
        500,
    );
    assert!(s.cut_instead_of(5_000));
    assert!(!s.cut_instead_of(1_000));
    s.cut_at_positions();
    assert!(s.is_done());
    assert_eq!(s.finish(&mut budget.state())[0].range.until, 10);

    // Not fitting: the same room asks again (or fails when full), never cuts.
    let mut s = FetchSession::new(&ranges(&[(0, 0, 100)]), &FetchConfig::default(), &budget);
    s.limit_room(2_000);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 100, batch(0, 10))],
        1_950,
    );
    assert!(!s.cut_instead_of(5_000));
    assert_eq!(s.next_requests(&v, &budget.state()).unwrap().len(), 1);
    assert!(!s.was_cut());
}

/// A partition whose stored batch is larger than the limits gets nothing when another
/// partition's data comes first in the answer: a broker returns an oversized batch only for
/// the first partition with data (KIP-74; 1 MB producer batches against the default
/// max.partition.fetch.bytes). That is not "no progress": it goes first in the next round's
/// request, where the broker returns its batch (issue 32: was a retry after a backoff for
/// each such partition, 0.1–0.15× librdkafka at 64–1024 partitions of 1 MB batches).
#[test]
fn a_partition_starved_by_an_oversized_batch_goes_first_next_round() {
    let budget = Fetcher::new(64 << 20);
    let v = view(&[1, 1]);
    // Batches larger than this (KIP-74): each partition is asked for all of it.
    let cfg = FetchConfig {
        partition_max_bytes: 100,
        ..FetchConfig::default()
    };
    let mut s = FetchSession::new(&ranges(&[(0, 0, 20), (1, 0, 10)]), &cfg, &budget);
    // The first round asks one partition (nothing learned); p0 reads half its range.
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 20, batch(0, 10))],
        500,
    );
    assert!(matches!(s.end_round(), RoundEnd::Continue));
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    let order: Vec<i32> = reqs[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.partition)
        .collect();
    assert_eq!(order, vec![0, 1]);
    // p0's data comes first; p1 (asked for max.partition.fetch.bytes) gets nothing.
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 20, batch(10, 10)), part(1, 10, Vec::new())],
        500,
    );
    assert!(
        matches!(s.end_round(), RoundEnd::Continue),
        "p0 moved: no backoff"
    );
    assert_eq!(s.positions(), &[20, 0]);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    let order: Vec<i32> = reqs[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.partition)
        .collect();
    assert_eq!(order, vec![1], "the starved partition is asked (first)");

    // Two open partitions: the starved one is listed first.
    let mut s = FetchSession::new(&ranges(&[(0, 0, 30), (1, 0, 10)]), &cfg, &budget);
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    assert_eq!(
        reqs[0].topics[0].partitions.len(),
        2,
        "the budget learned the data"
    );
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(0, 30, batch(0, 10)), part(1, 10, Vec::new())],
        500,
    );
    assert!(
        matches!(s.end_round(), RoundEnd::Continue),
        "p0 moved: no backoff"
    );
    let reqs = s.next_requests(&v, &budget.state()).unwrap();
    let order: Vec<i32> = reqs[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.partition)
        .collect();
    assert_eq!(order, vec![1, 0]);
    // Asked first and still nothing: that is no progress (a retry after a backoff).
    respond(
        &budget,
        &mut s,
        &reqs[0],
        vec![part(1, 10, Vec::new()), part(0, 30, batch(10, 10))],
        50,
    );
    assert!(matches!(s.end_round(), RoundEnd::Retry(_)));
}

/// Issue 36: idle decompression buffers are bounded by bytes (a quarter of the budget), not
/// only by count: one grown by a large batch is freed when given back.
#[test]
fn idle_decompression_buffers_stay_within_a_quarter_of_the_budget() {
    use crate::record::{Compression, Scratch};
    let fetcher = Fetcher::new(4 << 20);
    let grown = |n: usize| {
        let mut s = Scratch::new();
        s.inflate(Compression::None, &vec![7u8; n], usize::MAX)
            .unwrap();
        s
    };
    fetcher.give_scratch(grown(2 << 20));
    assert_eq!(
        fetcher.idle_scratch_bytes(),
        0,
        "a 2 MiB buffer is not kept under 4 MiB"
    );
    fetcher.give_scratch(grown(512 << 10));
    let kept = fetcher.idle_scratch_bytes();
    assert!((512 << 10..=1 << 20).contains(&kept), "{kept}");
    fetcher.give_scratch(grown(700 << 10));
    assert_eq!(
        fetcher.idle_scratch_bytes(),
        kept,
        "the two would pass 1 MiB"
    );
    assert_eq!(
        fetcher.max_decompressed(128 << 20),
        2 << 20,
        "half the budget"
    );
    assert_eq!(
        fetcher.max_decompressed(1 << 20),
        1 << 20,
        "or less if configured"
    );
}
