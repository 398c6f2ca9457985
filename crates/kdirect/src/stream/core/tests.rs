//! The stream core over virtual time: each test feeds snapshots and fetch answers and checks
//! what the core decides. No broker, no clock, no runtime.

use super::*;
use kdirect_engine::error::BrokerName;
use kdirect_engine::plan::{RatePolicy, StartPolicy, WaitReason};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(data_loss: DataLossPolicy) -> CoreConfig {
    CoreConfig {
        planner: PlannerConfig::new(Duration::from_secs(1))
            .with_start(StartPolicy::Earliest)
            .with_data_loss(data_loss),
        data_loss,
        ending: None,
        partitions: None,
        metadata_max_age: Duration::from_secs(300),
        ends_max_age: Duration::from_secs(1),
        max_wait: Duration::from_millis(500),
        adaptive: false,
        chunked: false,
    }
}

fn core_with(cfg: CoreConfig) -> StreamCore {
    let planner = Planner::new(cfg.planner.clone()).unwrap();
    StreamCore::new(cfg, planner, None, BTreeMap::new(), false)
}

fn resumed(cfg: CoreConfig, positions: &[(&str, i32, i64)]) -> StreamCore {
    let positions: BTreeMap<TopicPartition, i64> = positions
        .iter()
        .map(|(t, p, o)| (TopicPartition::new(*t, *p), *o))
        .collect();
    let planner = Planner::resume(cfg.planner.clone(), 7, positions).unwrap();
    StreamCore::new(cfg, planner, None, BTreeMap::new(), false)
}

fn snap(parts: &[(&str, i32, i64, i64)]) -> Vec<PartitionSnapshot> {
    parts
        .iter()
        .map(|(t, p, s, e)| PartitionSnapshot::new(*t, *p, *s, *e))
        .collect()
}

fn range(t: &str, p: i32, from: i64, until: i64) -> OffsetRange {
    OffsetRange::new(t, p, from, until)
}

fn fetch_of(step: Step) -> FetchPlan {
    match step {
        Step::Fetch(f) => f,
        Step::Wait(w) => panic!("expected a batch, got {w:?}"),
    }
}

fn wait_of(step: Step) -> Wait {
    match step {
        Step::Wait(w) => w,
        Step::Fetch(f) => panic!("expected a wait, got {f:?}"),
    }
}

/// A range as a test's fetch read it.
#[derive(Clone, Copy, Debug)]
struct Read<'a> {
    range: &'a OffsetRange,
    observed: Option<ObservedEnds>,
    bytes: usize,
}

impl ReadRange for Read<'_> {
    fn range(&self) -> &OffsetRange {
        self.range
    }
    fn observed(&self) -> Option<ObservedEnds> {
        self.observed
    }
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What a fetch read of `range`, with the partition's end as its answer gave it.
fn got(range: &OffsetRange, end: Option<i64>) -> Read<'_> {
    Read {
        range,
        observed: end.map(|end| ObservedEnds { log_start: 0, end }),
        bytes: 1,
    }
}

const SIZING: Sizing = Sizing {
    budget: 64 << 20,
    bytes_per_offset: None,
    largest_batch: None,
};

/// Reads each wanted range whole, with the ends given.
fn read_all(
    core: &mut StreamCore,
    now: Duration,
    fetch: FetchPlan,
    ends: Option<ObservedEnds>,
) -> Finished {
    let want = fetch.want.clone();
    let read: Vec<Read<'_>> = want
        .iter()
        .map(|r| Read {
            range: r,
            observed: ends,
            bytes: 100 * r.len() as usize,
        })
        .collect();
    core.finish(now, fetch, &read, SIZING)
}

fn truncation(t: &str, p: i32, lost_from: i64, lost_until: i64) -> Truncation {
    Truncation {
        partition: TopicPartition::new(t, p),
        lost_from,
        lost_until,
        last_fetched_epoch: 3,
        leader_epoch: 2,
        broker: BrokerName {
            node_id: Some(1),
            addr: "127.0.0.1:9092".into(),
        },
    }
}

#[test]
fn a_fresh_batch_is_read_to_what_fits_and_the_next_goes_on_from_where_it_stopped() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    let s = snap(&[("t", 0, 0, 1000), ("t", 1, 0, 500)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    assert!(fetch.fit, "a fresh plan is read up to what fits");
    assert_eq!(
        fetch.ranges,
        vec![range("t", 0, 0, 1000), range("t", 1, 0, 500)]
    );
    // The fetch stopped at 300 in t-0 (memory full) and read t-1 whole.
    let short = range("t", 0, 0, 300);
    let whole = range("t", 1, 0, 500);
    let ends = Some(ObservedEnds {
        log_start: 0,
        end: 1000,
    });
    let read = [
        Read {
            range: &short,
            observed: ends,
            bytes: 30_000,
        },
        Read {
            range: &whole,
            observed: Some(ObservedEnds {
                log_start: 0,
                end: 500,
            }),
            bytes: 50_000,
        },
    ];
    let done = core.finish(ms(1), fetch, &read, SIZING);
    assert_eq!(done.ranges, vec![short.clone(), whole]);
    assert_eq!(core.positions()[&TopicPartition::new("t", 0)], 300);
    // The next batch starts at 300, planned from the ends the answers gave (no ListOffsets).
    let parts = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
    let known = core.known_ends(ms(2), &parts);
    assert_eq!(known.len(), 2, "both partitions' ends are known: {known:?}");
    let next = fetch_of(core.plan(ms(2), &s).unwrap());
    assert_eq!(next.want, vec![range("t", 0, 300, 1000)]);
}

#[test]
fn chunked_a_batch_keeps_its_planned_ranges_and_the_rest_is_read_in_chunks() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.chunked = true;
    let mut core = core_with(cfg);
    let s = snap(&[("t", 0, 0, 1000), ("t", 1, 0, 500), ("t", 2, 0, 40)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    assert!(fetch.fit);
    // The first chunk stopped at 300 in t-0, read nothing of t-1 and all of t-2.
    let (a, b, c) = (
        range("t", 0, 0, 300),
        range("t", 1, 0, 0),
        range("t", 2, 0, 40),
    );
    let read = [got(&a, Some(1000)), got(&b, Some(500)), got(&c, Some(40))];
    let done = core.finish(ms(1), fetch, &read, SIZING);
    assert_eq!(
        done.ranges,
        vec![
            range("t", 0, 0, 1000),
            range("t", 1, 0, 500),
            range("t", 2, 0, 40)
        ],
        "the batch is its plan, not what the first chunk read"
    );
    assert_eq!(
        done.rest,
        vec![range("t", 0, 300, 1000), range("t", 1, 0, 500)]
    );
    // The planner goes on after the whole plan: the next batch starts past it.
    assert_eq!(core.positions()[&TopicPartition::new("t", 0)], 1000);
    assert_eq!(core.positions()[&TopicPartition::new("t", 1)], 500);
    // The second chunk reads t-0 to its end and part of t-1; the third the rest of t-1.
    let (a2, b2) = (range("t", 0, 300, 1000), range("t", 1, 0, 200));
    let rest = core.chunk_read(
        ms(2),
        &done.rest,
        &[got(&a2, Some(1000)), got(&b2, Some(500))],
    );
    assert_eq!(rest, vec![range("t", 1, 200, 500)]);
    let b3 = range("t", 1, 200, 500);
    assert!(core
        .chunk_read(ms(3), &rest, &[got(&b3, Some(500))])
        .is_empty());
}

#[test]
fn chunked_a_logged_batch_re_run_is_read_in_chunks_and_keeps_its_ranges() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.chunked = true;
    let planner = Planner::resume(cfg.planner.clone(), 4, BTreeMap::new()).unwrap();
    let logged = PlannedBatch::new(4, vec![range("t", 0, 10, 90)]);
    let mut core = StreamCore::new(cfg, planner, Some(logged), BTreeMap::new(), false);
    let batch = core.take_replay().unwrap();
    let fetch = core.replay_plan(ms(0), batch, |_| None).unwrap();
    assert!(
        fetch.fit && fetch.replay,
        "chunked, a replay may be read in parts too"
    );
    let short = range("t", 0, 10, 40);
    let done = core.finish(ms(1), fetch, &[got(&short, None)], SIZING);
    assert_eq!(done.ranges, vec![range("t", 0, 10, 90)]);
    assert_eq!(done.rest, vec![range("t", 0, 40, 90)]);
}

#[test]
fn a_logged_batch_re_run_is_read_exactly_and_never_ended_early() {
    let cfg = config(DataLossPolicy::Fail);
    let planner = Planner::resume(cfg.planner.clone(), 4, BTreeMap::new()).unwrap();
    let logged = PlannedBatch::new(4, vec![range("t", 0, 10, 90), range("t", 1, 5, 5)]);
    let mut core = StreamCore::new(cfg, planner, Some(logged), BTreeMap::new(), false);
    let batch = core.take_replay().unwrap();
    let fetch = core.replay_plan(ms(0), batch, |_| None).unwrap();
    assert!(!fetch.fit && fetch.replay);
    assert_eq!(
        fetch.want,
        vec![range("t", 0, 10, 90)],
        "empty ranges are not fetched"
    );
    let short = range("t", 0, 10, 40);
    let read = [got(&short, None)];
    let done = core.finish(ms(1), fetch, &read, SIZING);
    assert_eq!(
        done.ranges[0],
        range("t", 0, 10, 90),
        "a replay keeps its logged ranges"
    );
    assert!(core.take_replay().is_none(), "a replay runs once");
}

#[test]
fn a_replayed_topic_re_created_since_is_reported_lost_not_read_in_the_new_log() {
    let mut cfg = config(DataLossPolicy::Earliest);
    cfg.planner = cfg.planner.with_data_loss(DataLossPolicy::Earliest);
    let planner = Planner::resume(cfg.planner.clone(), 4, BTreeMap::new()).unwrap();
    let ids = BTreeMap::from([("t".to_owned(), [1; 16]), ("u".to_owned(), [2; 16])]);
    let logged = PlannedBatch::new(4, vec![range("t", 0, 10, 90), range("u", 0, 0, 5)]);
    let mut core = StreamCore::new(cfg, planner, Some(logged), ids, false);
    let batch = core.take_replay().unwrap();
    let fetch = core
        .replay_plan(ms(0), batch, |t| {
            Some(if t == "t" { [9; 16] } else { [2; 16] })
        })
        .unwrap();
    assert_eq!(fetch.want, vec![range("u", 0, 0, 5)]);
    assert_eq!(fetch.lost.len(), 1);
    assert_eq!(
        (
            fetch.lost[0].from,
            fetch.lost[0].until,
            fetch.lost[0].reason
        ),
        (10, 90, DataLossReason::TopicRecreated)
    );
}

#[test]
fn a_re_created_topic_fails_by_default_and_starts_over_at_zero_otherwise() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 40)]);
    assert!(!core.check_topic_id("t", [1; 16]).unwrap(), "first sight");
    let e = core.check_topic_id("t", [2; 16]).unwrap_err();
    assert!(
        matches!(e.root().kind(), ErrorKind::TopicRecreated { .. }),
        "{e}"
    );

    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 40)]);
    core.check_topic_id("t", [1; 16]).unwrap();
    assert!(core.check_topic_id("t", [2; 16]).unwrap());
    let fetch = fetch_of(core.plan(ms(0), &snap(&[("t", 0, 0, 10)])).unwrap());
    assert_eq!(fetch.want, vec![range("t", 0, 0, 10)]);
    assert!(fetch.moved_back.contains_key(&TopicPartition::new("t", 0)));
    let lost: Vec<_> = fetch.lost.iter().map(|l| (l.from, l.reason)).collect();
    assert_eq!(lost, vec![(40, DataLossReason::TopicRecreated)]);
    // An id of all zeros (a broker without topic ids) is never a re-creation.
    assert!(!core.check_topic_id("t", [0; 16]).unwrap());
}

#[test]
fn retention_below_the_position_keeps_the_range_start_where_the_store_has_it() {
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 10)]);
    let fetch = fetch_of(core.plan(ms(0), &snap(&[("t", 0, 25, 60)])).unwrap());
    // The store's compare-and-set expects 10; the fetch starts at the log start.
    assert_eq!(fetch.ranges, vec![range("t", 0, 10, 60)]);
    assert_eq!(fetch.want, vec![range("t", 0, 25, 60)]);
    let lost: Vec<_> = fetch
        .lost
        .iter()
        .map(|l| (l.from, l.until, l.reason))
        .collect();
    assert_eq!(lost, vec![(10, 25, DataLossReason::BelowLogStart)]);
    assert!(fetch.fit);
}

#[test]
fn retention_below_the_position_fails_the_plan_by_default() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10)]);
    let e = core.plan(ms(0), &snap(&[("t", 0, 25, 60)])).unwrap_err();
    assert!(e.to_string().contains("t-0"), "{e}");
}

#[test]
fn a_truncation_fails_by_default_naming_the_lost_range() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 50)]);
    let s = snap(&[("t", 0, 0, 80)]);
    let e = core
        .on_truncations(vec![truncation("t", 0, 42, 50)], &s)
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("t-0") && text.contains("42"), "{text}");
}

#[test]
fn a_truncation_under_a_log_that_reaches_past_the_position_rewinds_the_fetch_only() {
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 50)]);
    let s = snap(&[("t", 0, 0, 80)]);
    core.on_truncations(vec![truncation("t", 0, 42, 50)], &s)
        .unwrap();
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    // The plan (what the store commits) starts at the stored position; the fetch reads the
    // records the new leader has in place of those handed out, exactly.
    assert_eq!(fetch.ranges, vec![range("t", 0, 50, 80)]);
    assert_eq!(fetch.want, vec![range("t", 0, 42, 80)]);
    assert!(
        !fetch.fit,
        "a range read below its plan's start is read exactly"
    );
    assert_eq!(fetch.lost.len(), 1);
    // Once: the next plan reads from the position.
    let done = read_all(&mut core, ms(1), fetch, None);
    assert_eq!(done.ranges, vec![range("t", 0, 50, 80)]);
    let s = snap(&[("t", 0, 0, 90)]);
    let next = fetch_of(core.plan(ms(2), &s).unwrap());
    assert_eq!(next.want, vec![range("t", 0, 80, 90)]);
    assert!(next.lost.is_empty());
}

#[test]
fn a_truncation_of_the_partition_s_whole_range_re_reads_it_from_the_truncation_point() {
    // Nothing new since the position: the rewind adds the range itself.
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 50)]);
    let s = snap(&[("t", 0, 0, 50)]);
    core.on_truncations(vec![truncation("t", 0, 45, 50)], &s)
        .unwrap();
    // The planner has nothing to read at 50 of 50: no batch until data arrives.
    assert_eq!(
        wait_of(core.plan(ms(0), &s).unwrap()).reason,
        WaitReason::NoNewData
    );
    let s = snap(&[("t", 0, 0, 52)]);
    let fetch = fetch_of(core.plan(ms(1), &s).unwrap());
    assert_eq!(fetch.want, vec![range("t", 0, 45, 52)]);
}

#[test]
fn a_truncation_under_a_log_ending_below_the_position_moves_the_position_back() {
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 50)]);
    let s = snap(&[("t", 0, 0, 44)]);
    core.on_truncations(vec![truncation("t", 0, 42, 50)], &s)
        .unwrap();
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    assert_eq!(fetch.ranges, vec![range("t", 0, 42, 44)]);
    assert_eq!(
        fetch.moved_back.get(&TopicPartition::new("t", 0)),
        Some(&50),
        "the store's compare-and-set expects the old position"
    );
}

#[test]
fn a_fetch_that_finds_retention_moved_goes_on_from_the_log_start() {
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 10)]);
    let mut fetch = fetch_of(core.plan(ms(0), &snap(&[("t", 0, 0, 60)])).unwrap());
    let gone: EngineError = PlanError::DataLoss {
        topic: "t".into(),
        partition: 0,
        lost_from: 10,
        lost_until: 30,
        reason: DataLossReason::BelowLogStart,
    }
    .into();
    core.on_fetch_loss(&mut fetch, gone).unwrap();
    assert_eq!(fetch.want, vec![range("t", 0, 30, 60)]);
    assert_eq!(
        fetch
            .lost
            .iter()
            .map(|l| (l.from, l.until))
            .collect::<Vec<_>>(),
        vec![(10, 30)]
    );
    // Past the whole range: the error stands (no endless retry).
    let past: EngineError = PlanError::DataLoss {
        topic: "t".into(),
        partition: 0,
        lost_from: 30,
        lost_until: 30,
        reason: DataLossReason::BelowLogStart,
    }
    .into();
    assert!(core.on_fetch_loss(&mut fetch, past).is_err());
}

#[test]
fn a_fetch_that_finds_a_truncation_widens_back_and_reads_exactly() {
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 10)]);
    let mut fetch = fetch_of(core.plan(ms(0), &snap(&[("t", 0, 0, 60)])).unwrap());
    assert!(fetch.fit);
    let t = truncation("t", 0, 4, 10);
    core.on_fetch_loss(&mut fetch, t.to_error()).unwrap();
    assert_eq!(fetch.want, vec![range("t", 0, 4, 60)]);
    assert!(!fetch.fit);
    // A truncation point at or past the range's start cannot move it: the error stands.
    assert!(core.on_fetch_loss(&mut fetch, t.to_error()).is_err());
}

/// A later chunk of a chunked batch that finds the log truncated below where the chunk
/// starts (records of that range already handed out) fails instead of reading from the
/// truncation point: that would hand the same offsets out twice in one batch (the review of
/// the chunked batches found it). The first chunk still widens back as any fetch does.
#[test]
fn a_truncation_below_what_earlier_chunks_handed_out_fails_the_batch() {
    let mut core = resumed(config(DataLossPolicy::Earliest), &[("t", 0, 10)]);
    let mut fetch = fetch_of(core.plan(ms(0), &snap(&[("t", 0, 0, 60)])).unwrap());
    assert_eq!(fetch.ranges, vec![range("t", 0, 10, 60)]);
    // Chunks 1.. read [10, 40): the next chunk wants [40, 60).
    fetch.want = vec![range("t", 0, 40, 60)];
    let t = truncation("t", 0, 30, 45);
    let e = core.on_fetch_loss(&mut fetch, t.to_error()).unwrap_err();
    assert!(e.to_string().contains("t-0"), "{e}");
    assert_eq!(fetch.want, vec![range("t", 0, 40, 60)], "not moved back");
    assert!(fetch.lost.is_empty());
}

#[test]
fn a_fetch_loss_fails_the_stream_by_default() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10)]);
    let mut fetch = fetch_of(core.plan(ms(0), &snap(&[("t", 0, 0, 60)])).unwrap());
    let t = truncation("t", 0, 4, 10);
    assert!(core.on_fetch_loss(&mut fetch, t.to_error()).is_err());
}

#[test]
fn ends_from_fetch_answers_plan_until_they_are_older_than_ends_max_age() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    let s = snap(&[("t", 0, 0, 100)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    let short = range("t", 0, 0, 60);
    let read = [Read {
        range: &short,
        observed: Some(ObservedEnds {
            log_start: 0,
            end: 100,
        }),
        bytes: 6000,
    }];
    core.finish(ms(10), fetch, &read, SIZING);
    let parts = [TopicPartition::new("t", 0)];
    assert_eq!(core.known_ends(ms(500), &parts).len(), 1);
    assert!(
        core.known_ends(ms(1010), &parts).is_empty(),
        "ends.max.age.ms passed: ListOffsets again"
    );
    // Asked by ListOffsets (position 60, end 120: more to read): the older Fetch answer is
    // dropped, and the partition is asked again next time.
    core.listed_ends(
        ms(1020),
        &offsets(&[("t", 0, 0)]),
        &offsets(&[("t", 0, 120)]),
    );
    assert!(core.known_ends(ms(1030), &parts).is_empty());
}

/// A snapshot merges partitions ListOffsets answered with those whose ends recent answers
/// gave, in (topic, partition) order, each checked alike.
#[test]
fn a_snapshot_merges_listed_and_known_ends_in_order() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    let known = BTreeMap::from([(
        TopicPartition::new("t", 0),
        ObservedEnds {
            log_start: 5,
            end: 40,
        },
    )]);
    let s = core
        .snapshot(
            offsets(&[("t", 1, 0)]),
            offsets(&[("t", 1, 20)]),
            known,
            BTreeMap::new(),
            None,
        )
        .unwrap();
    assert_eq!(s, snap(&[("t", 0, 5, 40), ("t", 1, 0, 20)]));
    let bad = BTreeMap::from([(
        TopicPartition::new("t", 2),
        ObservedEnds {
            log_start: 50,
            end: 40,
        },
    )]);
    let e = core
        .snapshot(Vec::new(), Vec::new(), bad, BTreeMap::new(), None)
        .unwrap_err();
    assert!(e.to_string().contains("t-2"), "{e}");
}

/// A ListOffsets answer with a partition's end at its position: caught up as of the answer,
/// as after a batch read to the end. Without this, each trickle batch asked ListOffsets for
/// every partition it did not read, and the asking forgot them again.
#[test]
fn a_partition_listed_at_its_position_is_caught_up() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10), ("t", 1, 20)]);
    core.listed_ends(
        ms(0),
        &offsets(&[("t", 0, 0), ("t", 1, 0)]),
        &offsets(&[("t", 0, 10), ("t", 1, 25)]),
    );
    let parts = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
    let known = core.known_ends(ms(1), &parts);
    assert_eq!(known.len(), 1, "{known:?}");
    assert_eq!(known[&parts[0]].end, 10);
}

#[test]
fn caught_up_partitions_plan_only_while_all_are_or_within_a_batch() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    let s = snap(&[("t", 0, 0, 10), ("t", 1, 0, 1000)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    let r0 = range("t", 0, 0, 10);
    let r1 = range("t", 1, 0, 100);
    let read = [got(&r0, Some(10)), got(&r1, Some(1000))];
    core.finish(ms(1), fetch, &read, SIZING);
    let parts = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
    // t-0 caught up, t-1 busy: t-0's answer plans the very next batch only.
    assert_eq!(core.known_ends(ms(2), &parts).len(), 2);
    let s = snap(&[("t", 0, 0, 10), ("t", 1, 0, 1000)]);
    let fetch = fetch_of(core.plan(ms(3), &s).unwrap());
    let r1 = range("t", 1, 100, 200);
    let read = [got(&r1, Some(1000))];
    core.finish(ms(4), fetch, &read, SIZING);
    let fetch = fetch_of(core.plan(ms(5), &s).unwrap());
    let r1 = range("t", 1, 200, 300);
    let read = [got(&r1, Some(1000))];
    core.finish(ms(5), fetch, &read, SIZING);
    let known = core.known_ends(ms(6), &parts);
    assert!(
        !known.contains_key(&parts[0]),
        "two batches later t-0 is asked by ListOffsets: {known:?}"
    );
}

#[test]
fn long_polls_answered_at_once_with_nothing_new_fall_back_to_polling_after_three() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10)]);
    let s = snap(&[("t", 0, 0, 10)]);
    let asked = core.long_poll_asks(&s);
    assert_eq!(asked, vec![(TopicPartition::new("t", 0), 10)]);
    let same = || {
        vec![(
            TopicPartition::new("t", 0),
            ObservedEnds {
                log_start: 0,
                end: 10,
            },
        )]
    };
    for i in 0..3 {
        assert!(core.on_long_poll(ms(i), &asked, ms(1), same()), "poll {i}");
    }
    assert!(!core.on_long_poll(ms(3), &asked, ms(1), same()));
    assert_eq!(core.interval_polls(), 1);
    // A held answer (the broker waited) resets the count.
    assert!(core.on_long_poll(ms(4), &asked, ms(400), same()));
    assert!(core.on_long_poll(ms(5), &asked, ms(1), same()));
    // New data: its end plans the next batch.
    let more = vec![(
        TopicPartition::new("t", 0),
        ObservedEnds {
            log_start: 0,
            end: 15,
        },
    )];
    assert!(core.on_long_poll(ms(6), &asked, ms(1), more));
    let known = core.known_ends(ms(7), &[TopicPartition::new("t", 0)]);
    assert_eq!(known[&TopicPartition::new("t", 0)].end, 15);
}

#[test]
fn no_long_poll_without_fetch_max_wait() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.max_wait = Duration::ZERO;
    let core = resumed(cfg, &[("t", 0, 10)]);
    assert!(core.long_poll_asks(&snap(&[("t", 0, 0, 10)])).is_empty());
}

fn offsets(o: &[(&str, i32, i64)]) -> Vec<PartitionOffset> {
    o.iter()
        .map(|(t, p, offset)| PartitionOffset {
            topic: (*t).to_owned(),
            partition: *p,
            error: kdirect_proto::ErrorCode::NONE,
            offset: *offset,
            timestamp: -1,
            leader_epoch: -1,
        })
        .collect()
}

#[test]
fn a_bounded_stream_resolves_its_ends_at_the_first_snapshot_and_stops_there() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.ending = Some(Ending::Latest);
    let mut core = core_with(cfg);
    assert!(core.ending_unresolved());
    let s = core
        .snapshot(
            offsets(&[("t", 1, 0), ("t", 0, 0)]),
            offsets(&[("t", 0, 30), ("t", 1, 20)]),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        )
        .unwrap();
    assert_eq!(s, snap(&[("t", 0, 0, 30), ("t", 1, 0, 20)]));
    // Later ends are held to the first ones.
    let s = core
        .snapshot(
            offsets(&[("t", 0, 0), ("t", 1, 0)]),
            offsets(&[("t", 0, 90), ("t", 1, 90)]),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        )
        .unwrap();
    assert_eq!(s, snap(&[("t", 0, 0, 30), ("t", 1, 0, 20)]));
    assert!(!core.reached_until());
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    read_all(&mut core, ms(1), fetch, None);
    assert!(core.reached_until());
}

#[test]
fn ending_offsets_must_name_every_partition_and_minus_one_is_latest() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.ending = Some(Ending::Offsets(BTreeMap::from([(
        TopicPartition::new("t", 0),
        -1,
    )])));
    let mut core = core_with(cfg.clone());
    let s = core
        .snapshot(
            offsets(&[("t", 0, 0)]),
            offsets(&[("t", 0, 30)]),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        )
        .unwrap();
    assert_eq!(s, snap(&[("t", 0, 0, 30)]));
    let mut core = core_with(cfg);
    let e = core
        .snapshot(
            offsets(&[("t", 0, 0), ("t", 1, 0)]),
            offsets(&[("t", 0, 30), ("t", 1, 5)]),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("t-1"), "{e}");
}

#[test]
fn a_snapshot_pairs_each_start_with_its_own_partition_s_end() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    // The broker left t-1 out of the ends: an error naming t-1, never t-2's end for t-1.
    let e = core
        .snapshot(
            offsets(&[("t", 0, 0), ("t", 1, 5), ("t", 2, 0)]),
            offsets(&[("t", 0, 30), ("t", 2, 50)]),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("t-1"), "{e}");
    // An end below the log start is the broker's fault, not "nothing to read".
    let e = core
        .snapshot(
            offsets(&[("t", 0, 10)]),
            offsets(&[("t", 0, 5)]),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("make no sense"), "{e}");
}

#[test]
fn a_position_outside_the_log_is_seen_before_the_plan() {
    let core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 50)]);
    assert!(!core.outside_the_log(&snap(&[("t", 0, 0, 50)])));
    assert!(core.outside_the_log(&snap(&[("t", 0, 0, 40)])));
    assert!(core.outside_the_log(&snap(&[("t", 0, 60, 70)])));
}

#[test]
fn a_rate_limited_batch_ended_early_is_paced_by_what_it_read() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.planner = cfg
        .planner
        .with_rate(RatePolicy::default().with_max_rate_per_partition(1000));
    let mut core = core_with(cfg);
    let s = snap(&[("t", 0, 0, 100_000)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    assert_eq!(fetch.ranges, vec![range("t", 0, 0, 1000)], "1000/s × 1 s");
    let short = range("t", 0, 0, 200);
    let read = [got(&short, None)];
    core.finish(ms(1), fetch, &read, SIZING);
    // 200 offsets at 1000/s: the next batch may start 200 ms after the first, not 1 s.
    let at = core.not_before().unwrap();
    assert!(at <= ms(250), "paced by what was read: {at:?}");
    assert_eq!(
        wait_of(core.plan(at / 2, &s).unwrap()).reason,
        WaitReason::Paced
    );
    let next = fetch_of(core.plan(at, &s).unwrap());
    assert_eq!(next.want[0].from, 200);
}

#[test]
fn the_adaptive_size_follows_bytes_per_offset_not_bytes_held() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.adaptive = true;
    let mut core = core_with(cfg);
    let s = snap(&[("t", 0, 0, 10_000_000)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    let r = range("t", 0, 0, 16);
    // A sliver that held a whole 256 KB stored batch: sized by the data, 100 B an offset.
    let read = [Read {
        range: &r,
        observed: None,
        bytes: 256 << 10,
    }];
    let sizing = Sizing {
        bytes_per_offset: Some(100.0),
        ..SIZING
    };
    core.finish(ms(1), fetch, &read, sizing);
    let next = fetch_of(core.plan(ms(2), &s).unwrap());
    let len = next.want[0].len();
    assert_eq!(len, adaptive_offsets(false, 64 << 20, 100.0));
    assert!(len > 100_000, "not a sliver: {len}");
}

#[test]
fn a_group_member_reads_only_its_assignment_and_rejoins_on_a_changed_subscription() {
    let cfg = config(DataLossPolicy::Fail);
    let planner = Planner::new(cfg.planner.clone()).unwrap();
    let mut core = StreamCore::new(cfg, planner, None, BTreeMap::new(), true);
    assert!(!core.reads("t", 0), "nothing before the group assigns");
    let committed = Committed {
        positions: BTreeMap::from([
            (TopicPartition::new("t", 1), 40),
            (TopicPartition::new("t", 2), 7),
        ]),
        epochs: BTreeMap::from([(TopicPartition::new("t", 1), 5)]),
        ..Committed::default()
    };
    let counts = BTreeMap::from([("t".to_owned(), 3)]);
    let epochs = core
        .reassign(
            BTreeSet::from([TopicPartition::new("t", 1)]),
            &committed,
            counts.clone(),
        )
        .unwrap();
    assert_eq!(epochs, vec![(TopicPartition::new("t", 1), 40, 5)]);
    assert!(core.reads("t", 1) && !core.reads("t", 0) && !core.reads("t", 2));
    assert_eq!(
        core.positions().len(),
        1,
        "only the assigned partition's position"
    );
    assert!(!core.subscription_changed(&counts));
    assert!(core.subscription_changed(&BTreeMap::from([("t".to_owned(), 4)])));
    let held = core.give_up_assignment();
    assert_eq!(held, BTreeSet::from([TopicPartition::new("t", 1)]));
    assert!(!core.reads("t", 1));
}

#[test]
fn metadata_is_reused_until_metadata_max_age_and_dropped_on_forget() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    assert!(core.cached_topics(ms(0)).is_none());
    core.metadata_refreshed(ms(0), vec!["t".to_owned()].into());
    assert_eq!(
        core.cached_topics(ms(1000)),
        Some(vec!["t".to_owned()].into())
    );
    assert!(core.cached_topics(Duration::from_secs(300)).is_none());
    core.metadata_refreshed(ms(0), vec!["t".to_owned()].into());
    core.forget();
    assert!(core.cached_topics(ms(1)).is_none());
}

#[test]
fn lag_is_what_is_left_after_the_batch() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    let s = snap(&[("t", 0, 0, 100), ("t", 1, 0, 50)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    let r0 = range("t", 0, 0, 30);
    let r1 = range("t", 1, 0, 50);
    let read = [got(&r0, None), got(&r1, None)];
    core.finish(ms(1), fetch, &read, SIZING);
    let lags: Vec<u64> = core.record_lag(&s).iter().map(|l| l.lag).collect();
    assert_eq!(lags, vec![70, 0]);
    assert_eq!(core.lag(), Some(70));
}

/// Chunked, with no rate limit (issue 32, the cliff at 1 KB records): a batch takes
/// [`CHUNKED_BATCH_BUDGETS`] budgets of data and every partition when the backlog fits it, so
/// no range ends inside a stored batch but at its log's end; a larger backlog is taken a few
/// partitions at a time, each range 16 stored batches or more. With batches of a quarter of
/// the budget (16k offsets over 64 partitions of 1 MB stored batches, 250 offsets a range),
/// every stored batch was cut by four batches and fetched about twice.
#[test]
fn chunked_batches_take_every_partition_when_the_backlog_fits_and_long_turns_when_not() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.adaptive = true;
    cfg.chunked = true;
    let first = adaptive_offsets(true, 64 << 20, 1024.0);
    cfg.planner = cfg
        .planner
        .with_rate(RatePolicy::default().with_max_offsets_per_trigger(first))
        .with_max_partitions_per_batch(chunked_partition_cap(64 << 20, Some(first), None, None));
    let mut core = core_with(cfg);
    // 64 partitions × 7,800 offsets of 1 KB (499,200 ≤ 524,288): one batch, every partition
    // to its end.
    let parts: Vec<(&str, i32, i64, i64)> = (0..64).map(|p| ("t", p, 0, 7_800)).collect();
    let fetch = fetch_of(core.plan(ms(0), &snap(&parts)).unwrap());
    assert_eq!(fetch.want.len(), 64);
    assert!(fetch.want.iter().all(|r| (r.from, r.until) == (0, 7_800)));
    let read: Vec<OffsetRange> = fetch.want.clone();
    let reads: Vec<Read<'_>> = read
        .iter()
        .map(|r| Read {
            range: r,
            observed: None,
            bytes: r.len() as usize * 1070,
        })
        .collect();
    let sizing = Sizing {
        budget: 64 << 20,
        bytes_per_offset: Some(1070.0),
        largest_batch: Some(1 << 20),
    };
    core.finish(ms(1), fetch, &reads, sizing);
    // 20,000 more each (1.28M > 501k): 31 partitions in turn, each ≥ 16 stored batches of
    // 980 offsets.
    let parts: Vec<(&str, i32, i64, i64)> = (0..64).map(|p| ("t", p, 0, 27_800)).collect();
    let next = fetch_of(core.plan(ms(2), &snap(&parts)).unwrap());
    let served: Vec<&OffsetRange> = next.want.iter().filter(|r| !r.is_empty()).collect();
    assert_eq!(served.len(), 31, "{:?}", next.want);
    assert!(served.iter().all(|r| r.len() >= 16 * 980), "{:?}", served);
}

// Found by cargo-mutants (docs/mutants.md): behaviour no test above pinned down.

#[test]
fn a_truncated_partition_with_nothing_new_is_re_read_in_another_partition_s_batch() {
    let mut core = resumed(
        config(DataLossPolicy::Earliest),
        &[("t", 0, 50), ("t", 1, 10)],
    );
    let s = snap(&[("t", 0, 0, 50), ("t", 1, 0, 20)]);
    core.on_truncations(vec![truncation("t", 0, 45, 50)], &s)
        .unwrap();
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    assert_eq!(
        fetch.ranges,
        vec![range("t", 0, 50, 50), range("t", 1, 10, 20)]
    );
    // t-0's plan is empty; its fetch reads the new leader's [45, 50), exactly.
    assert_eq!(
        fetch.want,
        vec![range("t", 1, 10, 20), range("t", 0, 45, 50)]
    );
    assert!(!fetch.fit);
}

/// `fetch.max.wait.ms` is 500 ms: an answer after 250 ms was held (not "at once"), however
/// many in a row.
#[test]
fn a_long_poll_held_half_its_wait_never_falls_back_to_polling() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10)]);
    let asked = core.long_poll_asks(&snap(&[("t", 0, 0, 10)]));
    let same = vec![(
        TopicPartition::new("t", 0),
        ObservedEnds {
            log_start: 0,
            end: 10,
        },
    )];
    for i in 0..5 {
        assert!(
            core.on_long_poll(ms(i), &asked, ms(250), same.clone()),
            "poll {i}"
        );
    }
    assert_eq!(core.interval_polls(), 0);
}

#[test]
fn caught_up_partitions_plan_however_old_while_every_partition_is() {
    let mut core = core_with(config(DataLossPolicy::Fail));
    let s = snap(&[("t", 0, 0, 10), ("t", 1, 0, 300)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    let (r0, r1) = (range("t", 0, 0, 10), range("t", 1, 0, 100));
    core.finish(
        ms(1),
        fetch,
        &[got(&r0, Some(10)), got(&r1, Some(300))],
        SIZING,
    );
    // t-1 read to its end two batches later: every partition is caught up, t-0 since batch 0.
    for (at, from) in [(2, 100), (4, 200)] {
        let fetch = fetch_of(core.plan(ms(at), &s).unwrap());
        let r1 = range("t", 1, from, from + 100);
        core.finish(ms(at + 1), fetch, &[got(&r1, Some(300))], SIZING);
    }
    let parts = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
    let known = core.known_ends(ms(6), &parts);
    assert_eq!(known.len(), 2, "{known:?}");
}

/// Before the budget knows the data's bytes per offset, the first batch's own give it.
#[test]
fn the_first_adaptive_size_comes_from_the_batch_s_own_bytes_per_offset() {
    let mut cfg = config(DataLossPolicy::Fail);
    cfg.adaptive = true;
    let mut core = core_with(cfg);
    let s = snap(&[("t", 0, 0, 10_000_000)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    let r = range("t", 0, 0, 16);
    let read = [Read {
        range: &r,
        observed: None,
        bytes: 16 * 200,
    }];
    core.finish(ms(1), fetch, &read, SIZING);
    let next = fetch_of(core.plan(ms(2), &s).unwrap());
    assert_eq!(next.want[0].len(), adaptive_offsets(false, 64 << 20, 200.0));
}

#[test]
fn an_unbounded_stream_outside_a_group_has_no_until_and_no_assignment() {
    let core = core_with(config(DataLossPolicy::Fail));
    assert_eq!((core.until(), core.assigned()), (None, None));
    let cfg = config(DataLossPolicy::Fail);
    let planner = Planner::new(cfg.planner.clone()).unwrap();
    let mut member = StreamCore::new(cfg, planner, None, BTreeMap::new(), true);
    assert_eq!(member.assigned(), Some(&BTreeSet::new()));
    let t1 = BTreeSet::from([TopicPartition::new("t", 1)]);
    member
        .reassign(t1.clone(), &Committed::default(), BTreeMap::new())
        .unwrap();
    assert_eq!(member.assigned(), Some(&t1));
}

#[test]
fn the_positions_checked_for_truncation_are_the_snapshot_s_with_a_position() {
    let core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10), ("t", 2, 30)]);
    assert_eq!(
        core.positions_in(&snap(&[("t", 0, 0, 20), ("t", 1, 0, 20)])),
        vec![(TopicPartition::new("t", 0), 10)]
    );
}

/// A ListOffsets answer whose log start is past its end makes no sense: the partition is not
/// caught up from it (the next snapshot asks again).
#[test]
fn a_listed_log_start_past_the_end_is_not_caught_up() {
    let mut core = resumed(config(DataLossPolicy::Fail), &[("t", 0, 10)]);
    core.listed_ends(ms(0), &offsets(&[("t", 0, 30)]), &offsets(&[("t", 0, 10)]));
    assert!(core
        .known_ends(ms(1), &[TopicPartition::new("t", 0)])
        .is_empty());
}

/// The range widened back to the stored position is the lost partition's own, though another
/// partition's range starts where the loss ends.
#[test]
fn retention_widens_only_the_lost_partition_s_range() {
    let mut core = resumed(
        config(DataLossPolicy::Earliest),
        &[("t", 0, 25), ("t", 1, 10)],
    );
    let s = snap(&[("t", 0, 0, 60), ("t", 1, 25, 60)]);
    let fetch = fetch_of(core.plan(ms(0), &s).unwrap());
    assert_eq!(
        fetch.ranges,
        vec![range("t", 0, 25, 60), range("t", 1, 10, 60)]
    );
    assert_eq!(
        fetch.want,
        vec![range("t", 0, 25, 60), range("t", 1, 25, 60)]
    );
    // A broker without topic ids: none handed out with the batch.
    let done = read_all(&mut core, ms(1), fetch, None);
    assert!(done.topic_ids.is_empty(), "{:?}", done.topic_ids);
}

/// A member keeps the committed topic ids of the topics it was assigned only: a topic it does
/// not read is not checked against an old id.
#[test]
fn a_member_keeps_the_committed_topic_ids_of_its_assignment_only() {
    let cfg = config(DataLossPolicy::Fail);
    let planner = Planner::new(cfg.planner.clone()).unwrap();
    let mut core = StreamCore::new(cfg, planner, None, BTreeMap::new(), true);
    let committed = Committed {
        positions: BTreeMap::from([
            (TopicPartition::new("t", 0), 5),
            (TopicPartition::new("u", 0), 5),
        ]),
        topic_ids: BTreeMap::from([("t".to_owned(), [1; 16]), ("u".to_owned(), [2; 16])]),
        ..Committed::default()
    };
    core.reassign(
        BTreeSet::from([TopicPartition::new("t", 0)]),
        &committed,
        BTreeMap::new(),
    )
    .unwrap();
    // t's id was kept: another one is a re-created topic (an error by default).
    assert!(core.check_topic_id("t", [3; 16]).is_err());
    // u is not read: its committed id is not kept, so any id is the first seen.
    assert!(!core.check_topic_id("u", [3; 16]).unwrap());
}
