//! The HBase store against `KDIRECT_TEST_HBASE` (standalone HBase and its REST gateway, from
//! Maven Central jars, started by tests/hbase/hbase.sh).
use kdirect_commit::hbase::HBaseStore;
use kdirect_commit::OffsetStore;

use crate::common::{batch, exercise, keeps_epochs_and_ids, pos, two_writers};
use crate::support::{rt, service, unique};

#[test]
fn hbase_store_conformance() {
    let Some(url) = service("KDIRECT_TEST_HBASE", "hbase_store_conformance") else {
        return;
    };
    rt().block_on(async {
        let group = unique("g");
        let (a, b) = two_writers(&url, &group).await;
        exercise(&a, &b, &unique("topic")).await;
        let group = unique("g");
        let (a, b) = two_writers(&url, &group).await;
        keeps_epochs_and_ids(&a, &b, &unique("topic")).await;
    });
}

/// Two writers commit from the same position at once, many times: HBase's check-and-put lets
/// exactly one through each time, and both partitions of the row move together.
#[test]
fn hbase_store_two_writers_at_once_one_wins() {
    let Some(url) = service(
        "KDIRECT_TEST_HBASE",
        "hbase_store_two_writers_at_once_one_wins",
    ) else {
        return;
    };
    rt().block_on(async {
        let table = format!("{url}/{}", unique("kd"));
        let (group, topic) = (unique("g"), unique("t"));
        let a = HBaseStore::connect(&table, &group).await.unwrap();
        let b = HBaseStore::connect(&table, &group).await.unwrap();
        a.commit(&batch(0, &topic, &[(0, 0, 10), (1, 0, 10)]))
            .await
            .unwrap();
        for round in 0..10i64 {
            let from = 10 + round * 10;
            let id = 1 + round as u64;
            let one = batch(id, &topic, &[(0, from, from + 10), (1, from, from + 10)]);
            let other = batch(id, &topic, &[(0, from, from + 5), (1, from, from + 10)]);
            let (ra, rb) = tokio::join!(a.commit(&one), b.commit(&other));
            assert_eq!(
                [ra.is_ok(), rb.is_ok()].iter().filter(|x| **x).count(),
                1,
                "round {round}: {ra:?} {rb:?}"
            );
            let loser = if ra.is_ok() { rb } else { ra };
            assert!(loser.unwrap_err().is_conflict());
            let c = a.load(&[]).await.unwrap();
            assert_eq!(
                c.positions[&kdirect_commit::TopicPartition::new(topic.as_str(), 1)],
                from + 10
            );
            a.set_positions(id, &pos(&topic, &[(0, from + 10)]))
                .await
                .unwrap();
        }
    });
}

/// A group whose name extends another's (`g` and `g:x`) never reads the other's rows.
#[test]
fn hbase_store_groups_sharing_a_prefix_stay_apart() {
    let Some(url) = service(
        "KDIRECT_TEST_HBASE",
        "hbase_store_groups_sharing_a_prefix_stay_apart",
    ) else {
        return;
    };
    rt().block_on(async {
        let g = unique("g");
        let t = unique("t");
        let a = HBaseStore::connect(&url, &g).await.unwrap();
        let b = HBaseStore::connect(&url, &format!("{g}:x")).await.unwrap();
        b.commit(&batch(0, &t, &[(0, 0, 5)])).await.unwrap();
        assert!(a.load(&[]).await.unwrap().positions.is_empty());
        assert_eq!(b.load(&[]).await.unwrap().positions, pos(&t, &[(0, 5)]));
    });
}

#[test]
fn hbase_store_unreachable_is_one_clear_error() {
    rt().block_on(async {
        let e = HBaseStore::connect("hbase://127.0.0.1:1", "g")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    });
}
