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
