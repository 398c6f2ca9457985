//! Hostile brokers (issue 17): answers that never move a partition's position must end in a
//! clear error after `default.api.timeout.ms`, retried with backoff — never a tight loop of
//! Fetch requests, never a run that does not end.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kdirect_fake_broker::{encode_batch, BatchOptions, Codec, FakeCluster, FakeRecord, FetchFault};

use crate::support::rt;

/// `kdirect consume --until-latest` against a partition whose every Fetch answer has `fault`.
/// Returns the exit status, stderr and the broker's request count.
fn consume_under(fault: FetchFault) -> (std::process::ExitStatus, String, u64) {
    let rt = rt();
    let fake = rt.block_on(async { FakeCluster::builder().topic("h", 1).build().await.unwrap() });
    for b in 0..4 {
        let recs: Vec<FakeRecord> = (0..500)
            .map(|i| FakeRecord::value(Bytes::from(format!("r{b}-{i}"))))
            .collect();
        fake.append_batch(
            "h",
            0,
            encode_batch(&recs, &BatchOptions::codec(Codec::None)).unwrap(),
        )
        .unwrap();
    }
    fake.set_fetch_fault("h", 0, Some(fault)).unwrap();
    let before = fake.stats(1).unwrap().requests;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args([
            "consume",
            "-b",
            &fake.bootstrap(),
            "-t",
            "h",
            "--until-latest",
            "--output",
            "null",
            "-X",
            "default.api.timeout.ms=1500",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Before the fix this never ended (~4,500 Fetch requests a second): kill it and fail.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            let requests = fake.stats(1).unwrap().requests - before;
            panic!("{fault:?}: consume did not end in 60 s ({requests} requests): it spins");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let requests = fake.stats(1).unwrap().requests - before;
    (status, stderr, requests)
}

#[test]
fn answers_that_never_move_the_position_end_in_a_clear_error_not_a_spin() {
    for fault in [
        FetchFault::Omit,
        FetchFault::Empty,
        FetchFault::WrongPartition,
        FetchFault::StaleBatch,
        FetchFault::Overlong,
    ] {
        let (status, stderr, requests) = consume_under(fault);
        assert!(!status.success(), "{fault:?}: exit 0: {stderr}");
        assert!(
            stderr.contains("no progress fetching h-0"),
            "{fault:?}: the error names the partition: {stderr}"
        );
        assert!(
            stderr.contains("broker 1"),
            "{fault:?}: the error names the broker: {stderr}"
        );
        // Backoff doubles from 100 ms: a handful of Fetch rounds (each with a metadata
        // refresh) in 1.5 s, not thousands.
        assert!(
            requests < 100,
            "{fault:?}: {requests} requests in one retry window"
        );
    }
}
