//! The behaviour every store shares, run against each of them.
#![allow(dead_code)]

use kdirect_commit::{
    open_store, AnyStore, CommitContext, CommitOutcome, OffsetRange, OffsetStore, OpenOptions,
    PlannedBatch, Positions, StoreErrorKind, Stored, TopicPartition,
};

/// Two handles (two writers) on `group` of the store `spec` names, opened as the CLI opens it.
pub async fn two_writers(spec: &str, group: &str) -> (AnyStore, AnyStore) {
    let open = || async {
        open_store(spec, group, &OpenOptions::default())
            .await
            .unwrap()
    };
    (open().await, open().await)
}

pub fn batch(id: u64, topic: &str, ranges: &[(i32, i64, i64)]) -> PlannedBatch {
    PlannedBatch::new(
        id,
        ranges
            .iter()
            .map(|&(p, f, u)| OffsetRange::new(topic, p, f, u))
            .collect(),
    )
}

pub fn pos(topic: &str, ps: &[(i32, i64)]) -> Positions {
    ps.iter()
        .map(|&(p, o)| (TopicPartition::new(topic, p), o))
        .collect()
}

/// Load on empty, commit, load, idempotent re-commit, CAS conflict from a second writer (and a
/// zombie replaying an old batch), set_positions, commit from the new positions.
/// `a` and `b` are two handles (two writers) on the same group.
pub async fn exercise<S: OffsetStore>(a: &S, b: &S, topic: &str) {
    let topics = vec![topic.to_owned()];
    let c = a.load(&topics).await.unwrap();
    assert_eq!(c.batch_id, None, "{}", a.describe());
    assert!(c.positions.is_empty());
    assert_eq!(c.next_batch_id(), 0);

    let b0 = batch(0, topic, &[(0, 0, 10), (1, 0, 7), (2, 0, 0)]);
    a.log_plan(&b0).await.unwrap();
    assert_eq!(
        a.commit(&b0, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(c.batch_id, Some(0));
    assert_eq!(c.positions, pos(topic, &[(0, 10), (1, 7), (2, 0)]));
    assert_eq!(c.next_batch_id(), 1);

    // The same batch again (a retried commit): nothing written, no error.
    assert_eq!(
        a.commit(&b0, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::AlreadyCommitted
    );

    // The second writer commits batch 1; the first, still at its own batch 1 from the old
    // positions with other ranges, is refused.
    let b1 = batch(1, topic, &[(0, 10, 20), (1, 7, 9), (2, 0, 1)]);
    b.log_plan(&b1).await.unwrap();
    assert_eq!(
        b.commit(&b1, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let zombie = batch(2, topic, &[(0, 10, 15), (1, 7, 8), (2, 0, 0)]);
    let e = match a.log_plan(&zombie).await {
        Err(e) => e,
        Ok(()) => a
            .commit(&zombie, &CommitContext::STANDALONE)
            .await
            .unwrap_err(),
    };
    match e.kind() {
        StoreErrorKind::Conflict {
            topic: t,
            partition,
            expected_from,
            stored,
            ..
        } => {
            assert_eq!(t, topic);
            assert_eq!(*partition, 0);
            assert_eq!(*expected_from, 10);
            assert_eq!(*stored, Stored(Some(20)));
        }
        other => panic!("{}: expected a conflict, got {other:?}", a.describe()),
    }
    assert!(e.to_string().contains(&format!("{topic}-0")), "{e}");
    let c = a.load(&topics).await.unwrap();
    assert_eq!(c.positions, pos(topic, &[(0, 20), (1, 9), (2, 1)]));
    assert_eq!(c.batch_id, Some(1));

    // Administration: set one partition, others keep theirs; the stream continues from there.
    a.set_positions(2, &pos(topic, &[(1, 100)])).await.unwrap();
    let c = a.load(&topics).await.unwrap();
    assert_eq!(c.positions, pos(topic, &[(0, 20), (1, 100), (2, 1)]));
    assert_eq!(c.batch_id, Some(2));
    let b3 = batch(3, topic, &[(0, 20, 25), (1, 100, 110), (2, 1, 1)]);
    a.log_plan(&b3).await.unwrap();
    assert_eq!(
        a.commit(&b3, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&[]).await.unwrap();
    assert_eq!(c.positions, pos(topic, &[(0, 25), (1, 110), (2, 1)]));

    move_back(a, b, topic).await;
}

/// After [`exercise`] (positions 25, 110, 1): the stream moves partitions back after data
/// loss (failOnDataLoss=false, a log that now ends below the position): a range below the
/// stored position commits when the batch names the position it moves back from, and only
/// then; a store that logs plans gives the plan back with it, so a re-run commits the same
/// way; a re-commit is no change. Was: every store compared the range's `from` with the
/// stored position, and the move back was refused as a conflict on every attempt.
async fn move_back<S: OffsetStore>(a: &S, b: &S, topic: &str) {
    let topics = vec![topic.to_owned()];
    let ranges = [(0, 5, 8), (1, 110, 110), (2, 1, 1)];
    // Without the stored position: a conflict, as from any writer that did not see 25.
    let blind = batch(4, topic, &ranges);
    let e = match a.log_plan(&blind).await {
        Err(e) => e,
        Ok(()) => a
            .commit(&blind, &CommitContext::STANDALONE)
            .await
            .unwrap_err(),
    };
    assert!(
        matches!(
            e.kind(),
            StoreErrorKind::Conflict {
                partition: 0,
                expected_from: 5,
                stored: Stored(Some(25)),
                ..
            }
        ),
        "{}: {e}",
        a.describe()
    );
    // Moving back from another position than the stored one: a conflict too.
    let stale = batch(4, topic, &ranges).with_moved_back(pos(topic, &[(0, 20)]));
    let e = match a.log_plan(&stale).await {
        Err(e) => e,
        Ok(()) => a
            .commit(&stale, &CommitContext::STANDALONE)
            .await
            .unwrap_err(),
    };
    assert!(
        matches!(
            e.kind(),
            StoreErrorKind::Conflict {
                partition: 0,
                expected_from: 20,
                stored: Stored(Some(25)),
                ..
            }
        ),
        "{}: {e}",
        a.describe()
    );
    let back = batch(4, topic, &ranges).with_moved_back(pos(topic, &[(0, 25)]));
    a.log_plan(&back).await.unwrap();
    if let Some(pending) = b.load(&topics).await.unwrap().pending {
        assert_eq!(pending, back, "{}: the logged plan", a.describe());
    }
    assert_eq!(
        a.commit(&back, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(c.positions, pos(topic, &[(0, 8), (1, 110), (2, 1)]));
    assert_eq!(c.batch_id, Some(4));
    assert_eq!(
        a.commit(&back, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::AlreadyCommitted,
        "{}",
        a.describe()
    );
    // A move back with no records (the log ends at the new position): the position moves.
    let empty = batch(5, topic, &[(0, 8, 8), (1, 0, 0), (2, 1, 1)])
        .with_moved_back(pos(topic, &[(1, 110)]));
    a.log_plan(&empty).await.unwrap();
    assert_eq!(
        a.commit(&empty, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(c.positions, pos(topic, &[(0, 8), (1, 0), (2, 1)]));
    assert_eq!(
        a.commit(&empty, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::AlreadyCommitted,
        "{}",
        a.describe()
    );
    // The stream goes on from there.
    let next = batch(6, topic, &[(0, 8, 9), (1, 0, 3), (2, 1, 1)]);
    a.log_plan(&next).await.unwrap();
    assert_eq!(
        a.commit(&next, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(c.positions, pos(topic, &[(0, 9), (1, 3), (2, 1)]));
}

/// Two writers of one store log and commit the same ten batches at once: each batch is
/// committed once (the other writer sees it already committed, or is refused), and the
/// store ends at the last one. Both may log the same plan (identical content is a re-run);
/// the commit is what is created only if absent.
pub async fn two_writers_commit_each_batch_once<S: OffsetStore>(a: &S, b: &S, topic: &str) {
    for id in 0..10u64 {
        let from = id as i64 * 10;
        let one = batch(id, topic, &[(0, from, from + 10)]);
        let (ra, rb) = tokio::join!(
            async {
                a.log_plan(&one).await?;
                a.commit(&one, &CommitContext::STANDALONE).await
            },
            async {
                b.log_plan(&one).await?;
                b.commit(&one, &CommitContext::STANDALONE).await
            }
        );
        let committed = [&ra, &rb]
            .iter()
            .filter(|r| matches!(r, Ok(CommitOutcome::Committed)))
            .count();
        assert_eq!(committed, 1, "batch {id}: {ra:?} {rb:?}");
    }
    let c = a.load(&[]).await.unwrap();
    assert_eq!(c.batch_id, Some(9));
}

/// KIP-320 and KIP-516 across a restart: a store keeps, with each position, the epoch of the
/// last record batch read before it and the id of its topic, so a stream resumed from it finds
/// a log truncated or a topic re-created while it was down. A partition the batch moves takes
/// the batch's epoch (none if the batch does not know it); a partition it does not move keeps
/// its own; a topic id the batch does not know keeps the stored one; a position set by hand
/// has no epoch. Runs on a fresh group.
pub async fn keeps_epochs_and_ids<S: OffsetStore>(a: &S, b: &S, topic: &str) {
    let topics = vec![topic.to_owned()];
    let tp = |p: i32| TopicPartition::new(topic, p);
    let (x, y) = ([0x5c; 16], [0xa7; 16]);
    let b0 = batch(0, topic, &[(0, 0, 10), (1, 0, 3), (2, 0, 4)])
        .with_epochs([(tp(0), 5), (tp(2), 6)].into())
        .with_topic_ids([(topic.to_owned(), x)].into());
    a.log_plan(&b0).await.unwrap();
    assert_eq!(
        a.commit(&b0, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(
        c.epochs,
        [(tp(0), 5), (tp(2), 6)].into(),
        "{}",
        a.describe()
    );
    assert_eq!(
        c.topic_ids,
        [(topic.to_owned(), x)].into(),
        "{}",
        a.describe()
    );

    // Partition 0 moves without a known epoch: it has none. Partition 2 does not move: it
    // keeps 6. No topic id in the batch: the stored one stays.
    let b1 = batch(1, topic, &[(0, 10, 12), (1, 3, 3), (2, 4, 4)]);
    a.log_plan(&b1).await.unwrap();
    assert_eq!(
        a.commit(&b1, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(c.epochs, [(tp(2), 6)].into(), "{}", a.describe());
    assert_eq!(
        c.topic_ids,
        [(topic.to_owned(), x)].into(),
        "{}",
        a.describe()
    );

    // A new epoch and a new id (the stream saw the topic re-created and moved on).
    let b2 = batch(2, topic, &[(0, 12, 15), (1, 3, 4), (2, 4, 4)])
        .with_epochs([(tp(0), 7), (tp(1), 7)].into())
        .with_topic_ids([(topic.to_owned(), y)].into());
    a.log_plan(&b2).await.unwrap();
    assert_eq!(
        a.commit(&b2, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = b.load(&topics).await.unwrap();
    assert_eq!(
        c.epochs,
        [(tp(0), 7), (tp(1), 7), (tp(2), 6)].into(),
        "{}",
        a.describe()
    );
    assert_eq!(
        c.topic_ids,
        [(topic.to_owned(), y)].into(),
        "{}",
        a.describe()
    );
    assert_eq!(c.positions, pos(topic, &[(0, 15), (1, 4), (2, 4)]));

    // Set by hand: that position has no epoch (the others keep theirs), and its topic no id
    // (set for the topic as it is now: a stream resumed from it must not take the topic for
    // re-created).
    a.set_positions(3, &pos(topic, &[(0, 100)])).await.unwrap();
    let c = b.load(&topics).await.unwrap();
    assert_eq!(
        c.epochs,
        [(tp(1), 7), (tp(2), 6)].into(),
        "{}",
        a.describe()
    );
    assert_eq!(c.positions, pos(topic, &[(0, 100), (1, 4), (2, 4)]));
    assert!(c.topic_ids.is_empty(), "{}: {c:?}", a.describe());
}
