//! The checkpoint directory: the common behaviour, the plan log and restart, the layout a
//! person reads, and corrupt files (truncated, garbage, a gap) that must be reported by name
//! with nothing overwritten.
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use kdirect_commit::checkpoint::CheckpointStore;
use kdirect_commit::{CommitContext, CommitOutcome, OffsetStore, StoreErrorKind};

use crate::common::{batch, exercise, keeps_epochs_and_ids, pos, two_writers};
use crate::support::{rt, tmpdir};

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for sub in ["", "offsets", "commits"] {
        for e in fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                out.insert(p.clone(), fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn checkpoint_common_behaviour() {
    let dir = tmpdir("ckpt-common");
    rt().block_on(async {
        let (a, b) = two_writers(&format!("checkpoint:{}", dir.display()), "g").await;
        assert_eq!(a.capabilities(), CheckpointStore::CAPABILITIES);
        exercise(&a, &b, "events").await;
        let fresh = tmpdir("ckpt-epochs-ids");
        let (a, b) = two_writers(&format!("checkpoint:{}", fresh.display()), "g").await;
        keeps_epochs_and_ids(&a, &b, "events").await;
    });
    // Readable by a person: the layout and the three-line format.
    assert!(dir.join("metadata").is_file());
    let text = fs::read_to_string(dir.join("commits/3")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "v1");
    assert!(lines[1].starts_with("{\"batchId\":3,"), "{text}");
    assert_eq!(lines[2], r#"{"events":{"0":25,"1":110,"2":1}}"#);
    let text = fs::read_to_string(dir.join("offsets/3")).unwrap();
    assert!(
        text.contains(r#""from":{"events":{"0":20,"1":100,"2":1}}"#),
        "{text}"
    );
    // A plan that moves a partition back names the stored position it moves back from.
    let text = fs::read_to_string(dir.join("offsets/4")).unwrap();
    assert!(
        text.contains(r#""movedBackFrom":{"events":{"0":25}}"#),
        "{text}"
    );
    let text = fs::read_to_string(dir.join("offsets/6")).unwrap();
    assert!(!text.contains("movedBackFrom"), "{text}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn plan_log_restart_reruns_exact_ranges() {
    let dir = tmpdir("ckpt-restart");
    rt().block_on(async {
        let s = CheckpointStore::open(&dir, 100).unwrap();
        let b0 = batch(0, "t", &[(0, 0, 50), (1, 0, 40)]);
        s.log_plan(&b0).await.unwrap();
        s.commit(&b0, &CommitContext::STANDALONE).await.unwrap();
        let b1 = batch(1, "t", &[(0, 50, 90), (1, 40, 41)]);
        s.log_plan(&b1).await.unwrap();
        // "Crash" before the commit: a new process opens the checkpoint.
        drop(s);
        let s = CheckpointStore::open(&dir, 100).unwrap();
        let c = s.load(&[]).await.unwrap();
        assert_eq!(c.batch_id, Some(0));
        assert_eq!(c.positions, pos("t", &[(0, 50), (1, 40)]));
        assert_eq!(c.pending.as_ref(), Some(&b1), "the logged plan is re-run exactly");
        assert_eq!(c.next_batch_id(), 1);
        // The re-run logs the same plan (fine) and commits it.
        s.log_plan(&b1).await.unwrap();
        s.commit(&b1, &CommitContext::STANDALONE).await.unwrap();
        let c = s.load(&[]).await.unwrap();
        assert_eq!(c.pending, None);
        assert_eq!(c.positions, pos("t", &[(0, 90), (1, 41)]));
        // A different plan for an id already logged is refused: two writers fail loudly.
        let other = batch(2, "t", &[(0, 90, 95)]);
        s.log_plan(&other).await.unwrap();
        let e = s
            .log_plan(&batch(2, "t", &[(0, 90, 99)]))
            .await
            .unwrap_err();
        assert!(
            matches!(e.kind(), StoreErrorKind::AlreadyExists { path, .. } if path.ends_with("offsets/2")),
            "{e}"
        );
    });
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn retention_keeps_the_last_k_batches() {
    let dir = tmpdir("ckpt-retention");
    rt().block_on(async {
        let s = CheckpointStore::open(&dir, 5).unwrap();
        for id in 0..20u64 {
            let b = batch(id, "t", &[(0, id as i64, id as i64 + 1)]);
            s.log_plan(&b).await.unwrap();
            s.commit(&b, &CommitContext::STANDALONE).await.unwrap();
        }
        let c = s.load(&[]).await.unwrap();
        assert_eq!(c.batch_id, Some(19));
    });
    let mut names: Vec<String> = fs::read_dir(dir.join("commits"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["15", "16", "17", "18", "19"]);
    let _ = fs::remove_dir_all(&dir);
}

/// A checkpoint with batches 0..=3 committed and 4 logged.
fn populated(name: &str) -> PathBuf {
    let dir = tmpdir(name);
    rt().block_on(async {
        let s = CheckpointStore::open(&dir, 100).unwrap();
        for id in 0..4u64 {
            let b = batch(id, "t", &[(0, id as i64 * 10, id as i64 * 10 + 10)]);
            s.log_plan(&b).await.unwrap();
            s.commit(&b, &CommitContext::STANDALONE).await.unwrap();
        }
        s.log_plan(&batch(4, "t", &[(0, 40, 50)])).await.unwrap();
    });
    dir
}

/// Opening, loading, logging and committing all fail naming `bad`, and no byte changes.
fn assert_refused(dir: &Path, bad: &Path) {
    let before = snapshot(dir);
    rt().block_on(async {
        let s = CheckpointStore::open(dir, 100).unwrap();
        let e = s.load(&[]).await.unwrap_err();
        assert!(
            e.to_string().contains(&bad.display().to_string()),
            "the error names {}: {e}",
            bad.display()
        );
        let b4 = batch(4, "t", &[(0, 40, 50)]);
        assert!(s.log_plan(&b4).await.is_err());
        assert!(s.commit(&b4, &CommitContext::STANDALONE).await.is_err());
        let b5 = batch(5, "t", &[(0, 50, 60)]);
        assert!(s.commit(&b5, &CommitContext::STANDALONE).await.is_err());
        assert!(s.set_positions(5, &pos("t", &[(0, 0)])).await.is_err());
    });
    assert_eq!(snapshot(dir), before, "nothing was overwritten or added");
}

#[test]
fn truncated_file_is_named_and_nothing_overwritten() {
    let dir = populated("ckpt-truncated");
    let bad = dir.join("commits/3");
    let text = fs::read(&bad).unwrap();
    fs::write(&bad, &text[..text.len() - 8]).unwrap();
    assert_refused(&dir, &bad);
    let _ = fs::remove_dir_all(&dir);
    // Cut at a line boundary: the offsets line is missing.
    let dir = populated("ckpt-truncated-line");
    let bad = dir.join("offsets/4");
    let text = fs::read_to_string(&bad).unwrap();
    let cut = text.find('\n').unwrap() + 1;
    fs::write(&bad, &text[..cut]).unwrap();
    assert_refused(&dir, &bad);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn garbage_file_is_named_and_nothing_overwritten() {
    let dir = populated("ckpt-garbage");
    let bad = dir.join("offsets/2");
    fs::write(&bad, b"\x00\xffPK\x03\x04 not a checkpoint").unwrap();
    assert_refused(&dir, &bad);
    // Valid UTF-8, wrong content.
    fs::write(&bad, "v1\n{\"batchId\":2}\n{\"t\":{\"zero\":1}}\n").unwrap();
    assert_refused(&dir, &bad);
    // A batch id that does not match the name.
    fs::write(&bad, "v1\n{\"batchId\":7}\n{\"t\":{\"0\":1}}\n").unwrap();
    assert_refused(&dir, &bad);
    // Another version.
    fs::write(&bad, "v9\n{\"batchId\":2}\n{\"t\":{\"0\":1}}\n").unwrap();
    assert_refused(&dir, &bad);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn gap_in_batch_ids_is_named_and_nothing_overwritten() {
    let dir = populated("ckpt-gap");
    fs::remove_file(dir.join("commits/1")).unwrap();
    let e = rt()
        .block_on(CheckpointStore::open(&dir, 100).unwrap().load(&[]))
        .unwrap_err();
    match e.kind() {
        StoreErrorKind::Gap { missing, .. } => assert!(missing.ends_with("commits/1"), "{e}"),
        other => panic!("expected a gap, got {other:?}"),
    }
    assert_refused(&dir, &dir.join("commits/1"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn edited_by_hand_is_honoured() {
    // A person edits the latest commit file with a text editor (no final newline).
    let dir = populated("ckpt-edit");
    fs::remove_file(dir.join("offsets/4")).unwrap();
    fs::write(
        dir.join("commits/3"),
        "v1\n{\"batchId\":3,\"timestampMs\":0}\n{\"t\":{\"0\":1234,\"1\":5}}",
    )
    .unwrap();
    let c = rt()
        .block_on(CheckpointStore::open(&dir, 100).unwrap().load(&[]))
        .unwrap();
    assert_eq!(c.positions, pos("t", &[(0, 1234), (1, 5)]));
    assert_eq!(c.next_batch_id(), 4);
    let _ = fs::remove_dir_all(&dir);
}

/// One fdatasync per batch file leaves, after a crash, at most the newest file of a directory
/// torn the way page writeback tears: empty, NUL-filled, or cut at a page boundary. It was
/// never acknowledged, so it counts as not written: a torn commit leaves its batch pending
/// (re-run, then committed over the torn file), a torn plan leaves nothing pending.
#[test]
fn a_torn_newest_file_counts_as_not_written_and_is_replaced() {
    // commits/3 torn three ways.
    for torn in [Vec::new(), vec![0u8; 120], {
        let mut page = b"v1\n{\"batchId\":3,\"timestampMs\":0}\n{\"t\":{\"0\":".to_vec();
        page.resize(4096, b' ');
        page
    }] {
        let dir = populated("ckpt-torn-commit");
        fs::remove_file(dir.join("offsets/4")).unwrap();
        fs::write(dir.join("commits/3"), &torn).unwrap();
        rt().block_on(async {
            let s = CheckpointStore::open(&dir, 100).unwrap();
            let c = s.load(&[]).await.unwrap();
            assert_eq!(c.batch_id, Some(2));
            let pending = c.pending.expect("batch 3 is pending again");
            assert_eq!(pending.id, 3);
            assert_eq!(
                s.commit(&pending, &CommitContext::STANDALONE)
                    .await
                    .unwrap(),
                CommitOutcome::Committed
            );
            let c = s.load(&[]).await.unwrap();
            assert_eq!((c.batch_id, c.pending), (Some(3), None));
            assert_eq!(c.positions, pos("t", &[(0, 40)]));
        });
        let _ = fs::remove_dir_all(&dir);
    }
    // offsets/4 torn: no batch pending; batch 4 is planned again and committed.
    let dir = populated("ckpt-torn-plan");
    fs::write(dir.join("offsets/4"), [0u8; 64]).unwrap();
    rt().block_on(async {
        let s = CheckpointStore::open(&dir, 100).unwrap();
        let c = s.load(&[]).await.unwrap();
        assert_eq!((c.batch_id, c.pending.is_none()), (Some(3), true));
        let b4 = batch(4, "t", &[(0, 40, 45)]);
        s.log_plan(&b4).await.unwrap();
        assert_eq!(
            s.commit(&b4, &CommitContext::STANDALONE).await.unwrap(),
            CommitOutcome::Committed
        );
    });
    let _ = fs::remove_dir_all(&dir);
    // Torn anywhere but the newest file is corruption.
    let dir = populated("ckpt-torn-old");
    let bad = dir.join("commits/1");
    fs::write(&bad, []).unwrap();
    assert_refused(&dir, &bad);
    let _ = fs::remove_dir_all(&dir);
}
