//! `DirectStream` with an offset store: the stream runs the commit protocol itself (load and
//! resume, replay a logged-but-uncommitted batch exactly, log each plan, commit with
//! compare-and-set), and refuses the call order that would lose a batch.
use kdirect::commit::checkpoint::CheckpointStore;
use kdirect::commit::CommitOutcome;
use kdirect::engine::plan::{OffsetRange, StartPolicy};
use kdirect::DirectStream;
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord};

use crate::support::{rt, tempdir};

async fn stream(fake: &FakeCluster, ckpt: &std::path::Path) -> DirectStream {
    DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .topics(&["s"])
        .start(StartPolicy::Earliest)
        .set("maxOffsetsPerTrigger", "100")
        .unwrap()
        .store(CheckpointStore::open(ckpt, 10).unwrap())
        .build()
        .await
        .unwrap()
}

#[test]
fn the_stream_replays_an_uncommitted_batch_exactly_and_resumes_after_a_commit() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("s", 2)
            .build()
            .await
            .unwrap();
        for p in 0..2 {
            let recs: Vec<FakeRecord> = (0..300)
                .map(|i| FakeRecord::value(format!("{p}-{i}")))
                .collect();
            fake.append_records("s", p, &recs, Codec::Lz4).unwrap();
        }
        let ckpt = tempdir("replay").join("ckpt");

        // PlannedBatch 0 committed; batch 1 handed out, its plan logged, then a "crash".
        let mut s = stream(&fake, &ckpt).await;
        let b0 = s.next_batch().await.unwrap().unwrap();
        assert_eq!(b0.id(), 0);
        let b0_ranges: Vec<OffsetRange> = b0.ranges().to_vec();
        assert_eq!(s.commit(b0).await.unwrap(), CommitOutcome::Committed);
        let b1 = s.next_batch().await.unwrap().unwrap();
        let b1_ranges: Vec<OffsetRange> = b1.ranges().to_vec();
        assert_eq!(b1.id(), 1);
        // Asking for the next batch before committing this one would log a second plan over
        // an uncommitted one: refused.
        let misuse = s.next_batch().await.unwrap_err();
        assert_eq!(
            misuse.misuse(),
            Some(&kdirect::Misuse::NotCommitted { batch: 1 }),
            "{misuse}"
        );
        assert!(misuse.to_string().contains("batch 1"), "{misuse}");
        drop(b1);
        drop(s);

        // The restart re-runs batch 1 with exactly its ranges, then goes on after them.
        let mut s = stream(&fake, &ckpt).await;
        let again = s.next_batch().await.unwrap().unwrap();
        assert_eq!(again.id(), 1);
        assert_eq!(again.ranges(), &b1_ranges[..], "the logged ranges, exactly");
        let mut values = Vec::new();
        again
            .for_each_record(|range, r| {
                values.push((range.partition, r.offset()));
            })
            .unwrap();
        assert_eq!(values.len() as u64, again.offset_count());
        assert_eq!(s.commit(again).await.unwrap(), CommitOutcome::Committed);
        let b2 = s.next_batch().await.unwrap().unwrap();
        assert_eq!(b2.id(), 2);
        assert_eq!(b2.ranges().len(), 2);
        for r in b2.ranges() {
            let prev = b1_ranges
                .iter()
                .find(|x| x.partition == r.partition)
                .unwrap();
            assert_eq!(r.from, prev.until, "batch 2 starts where batch 1 ended");
        }
        s.commit(b2).await.unwrap();
        drop(s);

        // PlannedBatch 0's ranges and batch 1's are contiguous and start at 0.
        assert_eq!(b0_ranges.len(), 2);
        for r in &b0_ranges {
            assert_eq!(r.from, 0);
        }
        // A third start resumes after batch 2: no batch is re-run.
        let mut s = stream(&fake, &ckpt).await;
        let b3 = s.next_batch().await.unwrap().unwrap();
        assert_eq!(b3.id(), 3);
        s.commit(b3).await.unwrap();
    });
}

#[test]
fn without_a_store_commit_only_releases_the_batch() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("m", 1)
            .build()
            .await
            .unwrap();
        let recs: Vec<FakeRecord> = (0..50).map(|i| FakeRecord::value(format!("{i}"))).collect();
        fake.append_records("m", 0, &recs, Codec::None).unwrap();
        let mut s = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["m"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .build()
            .await
            .unwrap();
        let mut n = 0;
        let first = s.next_batch().await.unwrap().unwrap();
        // try_for_each_record stops at the caller's first error (of the caller's own type)
        // and returns it.
        #[derive(Debug)]
        enum Stop {
            At(i64),
            // Read by Debug, when the assertion below fails.
            #[allow(dead_code)]
            Stream(kdirect::Error),
        }
        impl From<kdirect::Error> for Stop {
            fn from(e: kdirect::Error) -> Self {
                Stop::Stream(e)
            }
        }
        let mut seen = 0;
        let stopped = first.try_for_each_record(|_, r| {
            seen += 1;
            if r.offset() == 9 {
                return Err(Stop::At(r.offset()));
            }
            Ok(())
        });
        assert!(matches!(stopped, Err(Stop::At(9))), "{stopped:?}");
        assert_eq!(seen, 10);
        assert_eq!(
            first
                .try_for_each_record(|_, _| Ok::<_, kdirect::Error>(()))
                .unwrap(),
            first.offset_count()
        );
        n += first.offset_count();
        s.commit(first).await.unwrap();
        // Without a store, asking again before committing is allowed (positions in memory).
        while let Some(b) = s.next_batch().await.unwrap() {
            n += b.offset_count();
            assert_eq!(s.commit(b).await.unwrap(), CommitOutcome::Committed);
        }
        assert_eq!(n, 50);
    });
}

/// The Kafka group store with a broker down that is not the group's coordinator: the store
/// asks any live broker where the coordinator is. Was: FindCoordinator always went to the
/// lowest node id of the cached metadata, so with that broker down every attempt of a commit
/// failed (seen on the 3-node Kafka cluster with a node stopped).
#[test]
fn the_group_store_commits_with_the_lowest_broker_down() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(3)
            .topic("s", 1)
            .build()
            .await
            .unwrap();
        let lowest = *fake.broker_ids().iter().min().unwrap();
        let group = (0..100)
            .map(|i| format!("g{i}"))
            .find(|g| fake.group_coordinator(g) != lowest)
            .unwrap();
        // The topic's leader must not be the stopped broker either.
        let leader = fake.leader("s", 0).unwrap().0;
        if leader == lowest {
            let other = *fake.broker_ids().iter().find(|b| **b != lowest).unwrap();
            fake.move_leader("s", 0, other).unwrap();
        }
        let recs: Vec<FakeRecord> = (0..10)
            .map(|i| FakeRecord::value(bytes::Bytes::from(format!("v{i}"))))
            .collect();
        fake.append_records("s", 0, &recs, Codec::None).unwrap();
        let open = || async {
            DirectStream::builder()
                .bootstrap(&fake.bootstrap())
                .topics(&["s"])
                .start(StartPolicy::Earliest)
                .group(&group)
                .store_spec("kafka")
                .build()
                .await
                .unwrap()
        };
        let mut s = open().await;
        // Every broker is in the stream's metadata; then the lowest id stops.
        fake.stop_broker(lowest).unwrap();
        let b = s.next_batch().await.unwrap().unwrap();
        assert_eq!(b.ranges()[0].until, 10);
        assert_eq!(s.commit(b).await.unwrap(), CommitOutcome::Committed);
        drop(s);
        let s = open().await;
        assert_eq!(
            s.stored_positions().values().copied().collect::<Vec<_>>(),
            vec![10]
        );
    });
}
