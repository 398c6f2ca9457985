//! The HBase store against `KDIRECT_TEST_HBASE` (standalone HBase and its REST gateway, from
//! Maven Central jars, started by tests/hbase/hbase.sh).
use kdirect_commit::hbase::HBaseStore;
use kdirect_commit::{CommitContext, OffsetStore};

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
        a.commit(
            &batch(0, &topic, &[(0, 0, 10), (1, 0, 10)]),
            &CommitContext::STANDALONE,
        )
        .await
        .unwrap();
        for round in 0..10i64 {
            let from = 10 + round * 10;
            let id = 1 + round as u64;
            let one = batch(id, &topic, &[(0, from, from + 10), (1, from, from + 10)]);
            let other = batch(id, &topic, &[(0, from, from + 5), (1, from, from + 10)]);
            let (ra, rb) = tokio::join!(
                a.commit(&one, &CommitContext::STANDALONE),
                b.commit(&other, &CommitContext::STANDALONE)
            );
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
        b.commit(&batch(0, &t, &[(0, 0, 5)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
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

/// `hbases://` against HBase's own REST gateway serving HTTPS (tests/hbase/hbase.sh:
/// `hbase.rest.ssl.enabled` with the test certificate, on 39531): with `cacert=` the store
/// passes the conformance suite, by address and by name; without it the system's CA store
/// does not know the test CA and the gateway is refused, saying why.
#[test]
fn hbase_store_over_https_at_the_gateway() {
    let (Some(url), Some(ca)) = (
        service(
            "KDIRECT_TEST_HBASE_TLS",
            "hbase_store_over_https_at_the_gateway",
        ),
        service(
            "KDIRECT_TEST_TLS_CA",
            "hbase_store_over_https_at_the_gateway",
        ),
    ) else {
        return;
    };
    let url = url.trim_end_matches('/');
    rt().block_on(async {
        for url in [
            url.to_owned(),
            url.replacen("//127.0.0.1:", "//localhost:", 1),
        ] {
            let spec = format!("{url}/{}?cacert={ca}", unique("kd"));
            let group = unique("g");
            let (a, b) = two_writers(&spec, &group).await;
            exercise(&a, &b, &unique("topic")).await;
        }
        let e = HBaseStore::connect(url, "g").await.unwrap_err();
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    });
}

/// A TLS listener on 127.0.0.1 with a certificate for 127.0.0.1 and localhost, signed by a CA
/// made here (the fake broker's), which closes each connection after the handshake. Returns
/// its port and the CA's PEM file.
async fn tls_listener() -> (u16, std::path::PathBuf) {
    use kdirect_fake_broker::FakeTls;
    let tls = FakeTls::new(&["127.0.0.1", "localhost"]).unwrap();
    let ca = std::env::temp_dir().join(format!("{}.pem", unique("kdirect-hbase-ca")));
    std::fs::write(&ca, tls.ca_pem()).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(socket).await;
            });
        }
    });
    (port, ca)
}

/// Without a gateway: `hbases://` speaks TLS and checks the certificate. Trusting only the
/// system's CA store, the listener's certificate is refused and the error says why (the cause
/// was hidden behind reqwest's "error sending request"); the password is in no message.
#[test]
fn hbase_https_refuses_an_unknown_ca_and_says_so() {
    rt().block_on(async {
        let (port, ca) = tls_listener().await;
        let e = HBaseStore::connect(&format!("hbases://bob:S3CRETPW@127.0.0.1:{port}"), "g")
            .await
            .unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("S3CRETPW"), "{shown}");
        assert!(shown.contains("https://bob:***@127.0.0.1"), "{shown}");
        assert!(shown.contains("UnknownIssuer"), "{shown}");
        // A CA file that holds no certificate, a missing one, and cacert= without TLS: spec
        // errors that name the file or the fix.
        let not_pem = ca.with_extension("txt");
        std::fs::write(&not_pem, "hello").unwrap();
        for (spec, expected) in [
            (
                format!("hbases://127.0.0.1:{port}?cacert={}", not_pem.display()),
                "holds no PEM certificate",
            ),
            (
                format!("hbases://127.0.0.1:{port}?cacert={}.missing", ca.display()),
                "cannot read cacert file",
            ),
            (
                format!("hbase://127.0.0.1:{port}?cacert={}", ca.display()),
                "use hbases://",
            ),
            (
                format!("hbases://127.0.0.1:{port}?ca={}", ca.display()),
                "unknown parameter 'ca'",
            ),
        ] {
            let e = HBaseStore::connect(&spec, "g").await.unwrap_err();
            assert!(e.to_string().contains(expected), "{spec}: {e}");
        }
        let _ = std::fs::remove_file(ca);
        let _ = std::fs::remove_file(not_pem);
    });
}
