//! The ZooKeeper store against `KDIRECT_TEST_ZOOKEEPER` (ZooKeeper from Debian's package,
//! started by tests/services.sh).
use kdirect_commit::zookeeper::ZooKeeperStore;
use kdirect_commit::{CommitContext, OffsetStore, StoreErrorKind};
use zookeeper_client as zk;

use crate::common::{batch, exercise, keeps_epochs_and_ids, pos, two_writers};
use crate::support::{rt, service, unique};

fn url() -> Option<String> {
    service("KDIRECT_TEST_ZOOKEEPER", "zookeeper_store")
}

/// A client of our own on the same server, to look at (and tamper with) the znodes as another
/// program would.
async fn raw(url: &str) -> zk::Client {
    let hosts = url.trim_start_matches("zk://").split('/').next().unwrap();
    zk::Client::connect(hosts).await.unwrap()
}

#[test]
fn zookeeper_store_conformance() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let chroot = format!("{url}/{}", unique("kdirect"));
        let group = unique("g");
        let (a, b) = two_writers(&chroot, &group).await;
        assert_eq!(a.capabilities(), ZooKeeperStore::CAPABILITIES);
        exercise(&a, &b, &unique("topic")).await;
        let group = unique("g");
        let (a, b) = two_writers(&chroot, &group).await;
        keeps_epochs_and_ids(&a, &b, &unique("topic")).await;
    });
}

#[test]
fn zookeeper_store_keeps_the_old_consumers_layout() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (group, topic) = (unique("g"), unique("t"));
        let store = ZooKeeperStore::connect(&url, &group).await.unwrap();
        store
            .commit(
                &batch(0, &topic, &[(0, 0, 42), (3, 5, 9)]),
                &CommitContext::STANDALONE,
            )
            .await
            .unwrap();
        // What the old high-level consumer and the Spark articles read: the next offset as text.
        let zk = raw(&url).await;
        let (data, _) = zk
            .get_data(&format!("/consumers/{group}/offsets/{topic}/0"))
            .await
            .unwrap();
        assert_eq!(data, b"42");
        let (data, _) = zk
            .get_data(&format!("/consumers/{group}/offsets/{topic}/3"))
            .await
            .unwrap();
        assert_eq!(data, b"9");

        // Offsets written by such a job (no kdirect znodes at all) load as positions.
        let (group, topic) = (unique("g"), unique("t"));
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let dir = format!("/consumers/{group}/offsets/{topic}");
        zk.mkdir(&dir, &opts).await.unwrap();
        zk.create(&format!("{dir}/0"), b"1000", &opts)
            .await
            .unwrap();
        zk.create(&format!("{dir}/1"), b"2000\n", &opts)
            .await
            .unwrap();
        let store = ZooKeeperStore::connect(&url, &group).await.unwrap();
        let c = store.load(&[]).await.unwrap();
        assert_eq!(c.positions, pos(&topic, &[(0, 1000), (1, 2000)]));
        assert_eq!(c.batch_id, None);
        // ...and a stream carries on from there.
        store
            .commit(
                &batch(0, &topic, &[(0, 1000, 1010), (1, 2000, 2000)]),
                &CommitContext::STANDALONE,
            )
            .await
            .unwrap();
        let c = store.load(std::slice::from_ref(&topic)).await.unwrap();
        assert_eq!(c.positions, pos(&topic, &[(0, 1010), (1, 2000)]));

        // Garbage in a znode is an error naming it, never a position.
        zk.set_data(&format!("{dir}/1"), b"twelve", None)
            .await
            .unwrap();
        let e = store.load(&[]).await.unwrap_err();
        assert!(
            matches!(e.kind(), StoreErrorKind::ZooKeeper { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains(&format!("{dir}/1")), "{e}");
        assert!(e.to_string().contains("twelve"), "{e}");
    });
}

#[test]
fn zookeeper_store_logs_plans_and_finds_the_pending_one() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (group, topic) = (unique("g"), unique("t"));
        let a = ZooKeeperStore::connect(&url, &group).await.unwrap();
        let b0 = batch(0, &topic, &[(0, 0, 10)]);
        a.log_plan(&b0).await.unwrap();
        a.commit(&b0, &CommitContext::STANDALONE).await.unwrap();
        // Batch 1 is logged, then the process dies before its commit.
        let b1 = batch(1, &topic, &[(0, 10, 25), (1, 0, 4)]);
        a.log_plan(&b1).await.unwrap();
        drop(a);

        let b = ZooKeeperStore::connect(&url, &group).await.unwrap();
        let c = b.load(&[]).await.unwrap();
        assert_eq!(c.batch_id, Some(0));
        assert_eq!(c.pending, Some(b1.clone()));
        assert_eq!(c.next_batch_id(), 1);
        // Administration may not write over a logged batch.
        let e = b
            .set_positions(1, &pos(&topic, &[(0, 0)]))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("logged but not committed"), "{e}");
        // The re-run logs the same plan again (fine) and commits it; the plan is gone after.
        b.log_plan(&b1).await.unwrap();
        // Another plan under the same id is a second writer.
        let e = b
            .log_plan(&batch(1, &topic, &[(0, 10, 11)]))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("another plan"), "{e}");
        b.commit(&b1, &CommitContext::STANDALONE).await.unwrap();
        let c = b.load(&[]).await.unwrap();
        assert_eq!(c.pending, None);
        assert_eq!(c.batch_id, Some(1));
        assert_eq!(c.positions, pos(&topic, &[(0, 25), (1, 4)]));
        let zk = raw(&url).await;
        let plans = zk
            .list_children(&format!("/consumers/{group}/kdirect/plans"))
            .await
            .unwrap();
        assert!(plans.is_empty(), "{plans:?}");
    });
}

#[test]
fn zookeeper_store_two_writers_at_once_one_wins() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (group, topic) = (unique("g"), unique("t"));
        let a = ZooKeeperStore::connect(&url, &group).await.unwrap();
        let b = ZooKeeperStore::connect(&url, &group).await.unwrap();
        a.commit(
            &batch(0, &topic, &[(0, 0, 10), (1, 0, 10)]),
            &CommitContext::STANDALONE,
        )
        .await
        .unwrap();
        for round in 0..20i64 {
            let from = 10 + round * 10;
            let (one, other) = (
                batch(
                    1 + round as u64,
                    &topic,
                    &[(0, from, from + 10), (1, from, from + 10)],
                ),
                batch(
                    1 + round as u64,
                    &topic,
                    &[(0, from, from + 5), (1, from, from + 10)],
                ),
            );
            let (ra, rb) = tokio::join!(
                a.commit(&one, &CommitContext::STANDALONE),
                b.commit(&other, &CommitContext::STANDALONE)
            );
            let won: Vec<bool> = vec![ra.is_ok(), rb.is_ok()];
            assert_eq!(
                won.iter().filter(|x| **x).count(),
                1,
                "round {round}: {ra:?} {rb:?}"
            );
            let loser = if ra.is_ok() { rb } else { ra };
            assert!(loser.unwrap_err().is_conflict());
            // Whoever won, the partitions moved together: never one writer's 0 and the other's 1.
            let c = a.load(&[]).await.unwrap();
            let p0 = c.positions[&kdirect_commit::TopicPartition::new(topic.as_str(), 0)];
            let p1 = c.positions[&kdirect_commit::TopicPartition::new(topic.as_str(), 1)];
            assert_eq!(p1, from + 10);
            assert!(p0 == from + 10 || p0 == from + 5, "{p0}");
            // Next round starts from a common position.
            a.set_positions(1 + round as u64, &pos(&topic, &[(0, from + 10)]))
                .await
                .unwrap();
        }
    });
}

#[test]
fn zookeeper_store_unreachable_is_one_clear_error() {
    // Nothing listens on port 1: the error names the server, and comes back (no hang).
    rt().block_on(async {
        let e = ZooKeeperStore::connect("zk://127.0.0.1:1/x", "g")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    });
}

/// Issue 36 (low): with `user:password@` in the spec the store authenticates (`digest`) and
/// creates its znodes for those credentials alone (`creator_all`): another client without
/// them can neither read nor change a position, nor log a plan; one with them can. The
/// conformance suite passes with credentials. Without credentials the znodes stay open to
/// anyone, as the old consumer made them. Before, `user:password@` was taken for part of the
/// host name, and every znode was world-writable.
#[test]
fn zookeeper_store_with_credentials_keeps_its_znodes_to_itself() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let hosts = url.trim_start_matches("zk://").split('/').next().unwrap();
        let chroot = unique("kdirect-acl");
        let authed = format!("zk://kd:S3cret-pw@{hosts}/{chroot}");
        let group = unique("g");
        let (a, b) = two_writers(&authed, &group).await;
        exercise(&a, &b, &unique("topic")).await;

        let (group, topic) = (unique("g"), unique("t"));
        let store = ZooKeeperStore::connect(&authed, &group).await.unwrap();
        assert!(
            !store.describe().contains("S3cret-pw"),
            "{}",
            store.describe()
        );
        store
            .commit(&batch(0, &topic, &[(0, 0, 42)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let path = format!("/{chroot}/consumers/{group}/offsets/{topic}/0");
        // Another program, no credentials: refused.
        let anon = raw(&url).await;
        assert!(
            matches!(anon.get_data(&path).await, Err(zk::Error::NoAuth)),
            "read without credentials"
        );
        assert!(
            matches!(
                anon.set_data(&path, b"0", None).await,
                Err(zk::Error::NoAuth)
            ),
            "written without credentials"
        );
        // Nor its ACL (READ_ACL is the creator's too); with the credentials, it is theirs only.
        assert!(matches!(anon.get_acl(&path).await, Err(zk::Error::NoAuth)));
        let authed_raw = zk::Client::connector()
            .with_auth("digest", b"kd:S3cret-pw")
            .connect(hosts)
            .await
            .unwrap();
        let (acl, _) = authed_raw.get_acl(&path).await.unwrap();
        assert!(
            !acl.is_empty() && acl.iter().all(|a| a.scheme() == "digest"),
            "creator only: {acl:?}"
        );
        let (data, _) = authed_raw.get_data(&path).await.unwrap();
        assert_eq!(data, b"42");
        // Wrong password: the store cannot read its positions either.
        let wrong = format!("zk://kd:wrong@{hosts}/{chroot}");
        let other = ZooKeeperStore::connect(&wrong, &group).await;
        match other {
            Err(e) => assert!(!e.to_string().contains("wrong@"), "{e}"),
            Ok(s) => assert!(s.load(&[]).await.is_err(), "read with the wrong password"),
        }
        // The same credentials: read back.
        let again = ZooKeeperStore::connect(&authed, &group).await.unwrap();
        let c = again.load(std::slice::from_ref(&topic)).await.unwrap();
        assert_eq!(c.positions, pos(&topic, &[(0, 42)]));

        // Without credentials: open to anyone, as before.
        let (group, topic) = (unique("g"), unique("t"));
        let open = ZooKeeperStore::connect(&url, &group).await.unwrap();
        open.commit(&batch(0, &topic, &[(0, 0, 7)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let (acl, _) = anon
            .get_acl(&format!("/consumers/{group}/offsets/{topic}/0"))
            .await
            .unwrap();
        assert!(acl.iter().any(|a| a.scheme() == "world"), "{acl:?}");
    });
}

/// A batch found half committed — one partition at its end by this very batch, the other still
/// at its start — is a conflict, not a write of the rest (issue 33, the one commit rule: the
/// store wrote the rest, and the batch's output ran twice for the partition that had it).
#[test]
fn zookeeper_store_refuses_a_half_committed_batch() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let chroot = format!("{url}/{}", unique("kdirect"));
        let (group, topic) = (unique("g"), unique("t"));
        let store = ZooKeeperStore::connect(&chroot, &group).await.unwrap();
        store
            .set_positions(3, &pos(&topic, &[(1, 0)]))
            .await
            .unwrap();
        store
            .set_positions(4, &pos(&topic, &[(0, 10)]))
            .await
            .unwrap();
        let b4 = batch(4, &topic, &[(0, 0, 10), (1, 0, 10)]);
        match store.commit(&b4, &CommitContext::STANDALONE).await {
            Err(e) if matches!(e.kind(), StoreErrorKind::Conflict { .. }) => {}
            other => panic!("a half-committed batch must be a conflict, got {other:?}"),
        }
        let loaded = store.load(&[]).await.unwrap().positions;
        assert_eq!(loaded, pos(&topic, &[(0, 10), (1, 0)]));
    });
}
