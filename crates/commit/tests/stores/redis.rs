//! The Redis store against `KDIRECT_TEST_REDIS`.
use kdirect_commit::redis::RedisStore;
use kdirect_commit::{CommitContext, OffsetStore};

use crate::common::{batch, exercise, keeps_epochs_and_ids, two_writers};
use crate::support::{rt, service, unique};

#[test]
fn redis_store() {
    let Some(url) = service("KDIRECT_TEST_REDIS", "redis_store") else {
        return;
    };
    rt().block_on(async {
        let group = unique("g");
        let (a, b) = two_writers(&url, &group).await;
        exercise(&a, &b, &unique("topic")).await;
        let group = unique("g");
        let (a, b) = two_writers(&url, &group).await;
        keeps_epochs_and_ids(&a, &b, &unique("topic")).await;

        // Two writers at once on the same batch: the script is atomic, one wins.
        let group = unique("g");
        let topic = unique("t");
        let a = RedisStore::connect(&url, &group).await.unwrap();
        let b = RedisStore::connect(&url, &group).await.unwrap();
        a.commit(&batch(0, &topic, &[(0, 0, 10)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let (one, other) = (
            batch(1, &topic, &[(0, 10, 20)]),
            batch(1, &topic, &[(0, 10, 15)]),
        );
        let (ra, rb) = tokio::join!(
            a.commit(&one, &CommitContext::STANDALONE),
            b.commit(&other, &CommitContext::STANDALONE)
        );
        assert_eq!(
            [ra.is_ok(), rb.is_ok()].iter().filter(|x| **x).count(),
            1,
            "{ra:?} {rb:?}"
        );
    });
}

/// `rediss://` against a Redis that speaks TLS only and asks every client for a certificate
/// (tests/services.sh: `--tls-port`, `--tls-auth-clients yes`, the test CA's certificates):
/// with `cacert=`, `cert=` and `key=` it passes the conformance suite, by address and by
/// name; without `cacert=` the system's CA store does not know the test CA and the
/// connection is refused, saying so; without a client certificate the server refuses it.
/// Before the redis crate had TLS: "can't connect with TLS, the feature is not enabled".
#[test]
fn redis_store_over_tls() {
    let (Some(url), Some(ca)) = (
        service("KDIRECT_TEST_REDIS_TLS", "redis_store_over_tls"),
        service("KDIRECT_TEST_TLS_CA", "redis_store_over_tls"),
    ) else {
        return;
    };
    // The client certificate beside the CA (tests/services.sh makes both).
    let dir = std::path::Path::new(&ca)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let client = format!("cert={dir}/client.pem&key={dir}/client.key");
    rt().block_on(async {
        let tls = format!("{url}?cacert={ca}&{client}");
        let group = unique("g");
        let (a, b) = two_writers(&tls, &group).await;
        exercise(&a, &b, &unique("topic")).await;
        let by_name = tls.replacen("//127.0.0.1:", "//localhost:", 1);
        let s = RedisStore::connect(&by_name, &unique("g")).await.unwrap();
        assert!(s.load(&[]).await.unwrap().positions.is_empty());

        let e = RedisStore::connect(&format!("{url}?{client}"), &unique("g"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        let no_client = format!("{url}?cacert={ca}");
        assert!(RedisStore::connect(&no_client, &unique("g")).await.is_err());
    });
}

/// The commit script is the one commit rule (`kdirect_commit::decide`, issue 33): 400
/// pseudo-random cases — ranges over three partitions with small offsets (so that positions
/// meet starts and ends often), nothing or something stored for each, the group's stored batch
/// id this batch's or another — each set up in Redis and committed through the script, and
/// decided by `decide` on the same state: the same outcome, the same range named.
#[test]
fn the_commit_script_decides_as_the_commit_rule() {
    use kdirect_commit::{decide, CommitDecision, CommitOutcome, StoreErrorKind, StoredPosition};
    let Some(url) = service(
        "KDIRECT_TEST_REDIS",
        "the_commit_script_decides_as_the_commit_rule",
    ) else {
        return;
    };
    // xorshift64: the same cases on every run.
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    rt().block_on(async {
        let (mut writes, mut already, mut conflicts) = (0, 0, 0);
        for case in 0..400 {
            let group = unique("rule");
            let topic = unique("t");
            let store = RedisStore::connect(&url, &group).await.unwrap();
            let parts = 1 + next(3) as i32;
            let ranges: Vec<(i32, i64, i64)> = (0..parts)
                .map(|p| {
                    let from = next(3) as i64;
                    (p, from, from + next(3) as i64)
                })
                .collect();
            let b = batch(7, &topic, &ranges);
            let stored_batch = if next(2) == 0 { 7 } else { 6 };
            let stored: Vec<Option<i64>> = (0..parts)
                .map(|_| (next(4) > 0).then(|| next(5) as i64))
                .collect();
            let positions = crate::common::pos(
                &topic,
                &stored
                    .iter()
                    .enumerate()
                    .filter_map(|(p, s)| Some((p as i32, (*s)?)))
                    .collect::<Vec<_>>(),
            );
            let any = !positions.is_empty();
            if any {
                store.set_positions(stored_batch, &positions).await.unwrap();
            }
            let found: Vec<Option<StoredPosition>> = stored
                .iter()
                .map(|s| {
                    s.map(|position| StoredPosition {
                        position,
                        batch_id: any.then_some(stored_batch),
                    })
                })
                .collect();
            let want = decide(&b, &found);
            let got = store.commit(&b, &CommitContext::STANDALONE).await;
            let what = format!(
                "case {case}: ranges {ranges:?}, stored {stored:?} by batch {stored_batch}"
            );
            match (want, got) {
                (CommitDecision::Write, Ok(CommitOutcome::Committed)) => writes += 1,
                (CommitDecision::AlreadyCommitted, Ok(CommitOutcome::AlreadyCommitted)) => {
                    already += 1
                }
                (CommitDecision::Conflict { index, .. }, Err(e)) => match e.kind() {
                    StoreErrorKind::Conflict { partition, .. } => {
                        assert_eq!(*partition, ranges[index].0, "{what}");
                        conflicts += 1;
                    }
                    other => panic!("{what}: {other:?}"),
                },
                (want, got) => panic!("{what}: the rule says {want:?}, the script {got:?}"),
            }
        }
        // The cases reach every outcome.
        assert!(
            writes > 20 && already > 5 && conflicts > 20,
            "{writes} {already} {conflicts}"
        );
    });
}
