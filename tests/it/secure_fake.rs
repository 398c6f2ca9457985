//! TLS and SASL PLAIN against kdirect's fake broker: fast (no JVM), and what the real
//! broker's fixed listeners cannot show — an expired certificate, a certificate for another
//! host, a session lifetime of a few seconds whose expiry the broker enforces and counts.
//! `secure.rs` has the same mistakes against Apache Kafka.
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use kdirect::engine::plan::StartPolicy;
use kdirect::{DirectStream, ErrorKind, SaslProblem, TlsProblem};
use kdirect_fake_broker::{Codec, FakeCluster, FakeRecord, FakeTls};

use crate::support::{rt, wait_until};

const USER: &str = "alice";
const PASSWORD: &str = "fake-alice-secret";

/// A cluster of `brokers` with topic `t` (3 partitions × `per_partition` records), TLS when
/// `tls` is given, SASL PLAIN for alice when `sasl`.
fn cluster(
    brokers: i32,
    tls: Option<&FakeTls>,
    sasl: bool,
    lifetime: Option<Duration>,
    per_partition: usize,
) -> FakeCluster {
    let mut b = FakeCluster::builder().brokers(brokers).topic("t", 3);
    if let Some(tls) = tls {
        b = b.tls(tls.clone());
    }
    if sasl {
        b = b
            .sasl_plain_user(USER, PASSWORD)
            .sasl_plain_user("bob", "bob-pw");
    }
    if let Some(l) = lifetime {
        b = b.sasl_session_lifetime(l);
    }
    let c = b.start().unwrap();
    for p in 0..3 {
        let records: Vec<FakeRecord> = (0..per_partition)
            .map(|i| FakeRecord::value(format!("v{p}-{i}")))
            .collect();
        // A few batches per partition, so a paced stream takes several triggers.
        for chunk in records.chunks(20) {
            c.append_records("t", p, chunk, Codec::Lz4).unwrap();
        }
    }
    c
}

/// The CA's PEM in a file of its own, for ssl.ca.location.
fn ca_file(tls: &FakeTls, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kdirect-fake-tls-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ca.pem");
    std::fs::write(&path, tls.ca_pem()).unwrap();
    path
}

fn sasl_ssl(ca: &str, password: &'static str) -> Vec<(&'static str, String)> {
    vec![
        ("security.protocol", "SASL_SSL".to_owned()),
        ("sasl.mechanism", "PLAIN".to_owned()),
        ("sasl.username", USER.to_owned()),
        ("sasl.password", password.to_owned()),
        ("ssl.ca.location", ca.to_owned()),
    ]
}

/// Reads `t` whole through `bootstrap`; with a group, commits each batch through the `kafka`
/// store (FindCoordinator and OffsetCommit on the secured connections too).
async fn read(
    bootstrap: &str,
    group: Option<&str>,
    settings: &[(&str, String)],
) -> Result<Vec<String>, kdirect::Error> {
    let mut b = DirectStream::builder()
        .bootstrap(bootstrap)
        .topics(&["t"])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .set("default.api.timeout.ms", "10000")?;
    for (k, v) in settings {
        b = b.set(k, v)?;
    }
    if let Some(g) = group {
        b = b.group(g).store_spec("kafka");
    }
    let mut stream = b.build().await?;
    let mut values = Vec::new();
    while let Some(batch) = stream.next_batch().await? {
        batch.for_each_record(|_, r| {
            values.push(String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned())
        })?;
        if group.is_some() {
            stream.commit(batch).await?;
        } else {
            stream.done(batch);
        }
    }
    Ok(values)
}

/// The error a read gives, as the engine's kind and the text; a guard turns a hang into a
/// failure.
fn error_of(bootstrap: &str, settings: &[(&str, String)]) -> (ErrorKind, String) {
    let e = rt()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), read(bootstrap, None, settings)).await
        })
        .expect("the client gives up instead of hanging")
        .expect_err("must fail");
    let text = e.to_string();
    assert!(!text.contains(PASSWORD), "a secret in an error: {text}");
    let kdirect::error::Kind::Engine(e) = e.into_kind() else {
        panic!("not an engine error: {text}")
    };
    (e.into_kind(), text)
}

fn sorted_unique(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

#[test]
fn sasl_ssl_plain_reads_a_whole_topic_from_the_fake_broker_and_commits() {
    let tls = FakeTls::new(&["127.0.0.1", "localhost"]).unwrap();
    let c = cluster(2, Some(&tls), true, None, 200);
    let ca = ca_file(&tls, "whole");
    let settings = sasl_ssl(ca.to_str().unwrap(), PASSWORD);
    let values = rt()
        .block_on(read(&c.bootstrap(), Some("g-fake-tls"), &settings))
        .unwrap();
    assert_eq!(values.len(), 600, "every record once");
    assert_eq!(sorted_unique(values).len(), 600, "no record twice");
    for b in c.broker_ids() {
        let s = c.stats(b).unwrap();
        assert!(s.sasl_authentications >= 1, "broker {b}: {s:?}");
        assert_eq!(
            (
                s.sasl_failures,
                s.unauthenticated_requests,
                s.tls_handshakes_failed
            ),
            (0, 0, 0),
            "broker {b}: {s:?}"
        );
    }
    // The group's offsets went through the secured coordinator: a second read resumes at the
    // end.
    let again = rt()
        .block_on(read(&c.bootstrap(), Some("g-fake-tls"), &settings))
        .unwrap();
    assert!(again.is_empty(), "{} records read again", again.len());
    // SASL PLAIN without TLS on a listener that has no TLS.
    let plain = cluster(1, None, true, None, 10);
    let mut settings = sasl_ssl("", PASSWORD);
    settings[0].1 = "SASL_PLAINTEXT".to_owned();
    settings.pop();
    let values = rt()
        .block_on(read(&plain.bootstrap(), None, &settings))
        .unwrap();
    assert_eq!(values.len(), 30);
}

#[test]
fn wrong_password_and_a_mechanism_not_enabled_are_refused_in_the_brokers_words() {
    let tls = FakeTls::new(&["127.0.0.1"]).unwrap();
    let c = cluster(1, Some(&tls), true, None, 5);
    let ca = ca_file(&tls, "refused");
    let bootstrap = c.bootstrap();
    let (kind, text) = error_of(
        &bootstrap,
        &sasl_ssl(ca.to_str().unwrap(), "not-her-password"),
    );
    let ErrorKind::Sasl {
        problem: SaslProblem::Refused(words),
        ..
    } = kind
    else {
        panic!("{text}")
    };
    assert_eq!(words, "Authentication failed: Invalid username or password");
    assert!(
        text.contains(&bootstrap) && text.contains("PLAIN") && !text.contains("not-her-password"),
        "{text}"
    );

    let mut scram = sasl_ssl(ca.to_str().unwrap(), PASSWORD);
    scram[1].1 = "SCRAM-SHA-512".to_owned();
    let (kind, text) = error_of(&bootstrap, &scram);
    let ErrorKind::Sasl {
        problem: SaslProblem::MechanismNotEnabled { offered },
        ..
    } = kind
    else {
        panic!("{text}")
    };
    assert_eq!(offered, ["PLAIN"], "{text}");
    assert!(
        text.contains("PLAIN") && text.contains(&bootstrap),
        "{text}"
    );
    let s = c.stats(1).unwrap();
    assert_eq!(s.sasl_failures, 2, "{s:?}");
    assert_eq!(s.sasl_authentications, 0, "{s:?}");

    // A client that does not authenticate on a SASL listener: the broker closes it after
    // ApiVersions, and the error says what to set.
    let tls_only = vec![
        ("security.protocol", "SSL".to_owned()),
        ("ssl.ca.location", ca.to_str().unwrap().to_owned()),
    ];
    let (kind, text) = error_of(&bootstrap, &tls_only);
    assert!(matches!(kind, ErrorKind::Disconnected { .. }), "{text}");
    assert!(
        text.contains("SASL_SSL") && text.contains(&bootstrap),
        "{text}"
    );
    assert!(c.stats(1).unwrap().unauthenticated_requests >= 1);
}

#[test]
fn tls_and_plaintext_clients_on_the_wrong_fake_port_are_told_so_without_hanging() {
    let tls = FakeTls::new(&["127.0.0.1"]).unwrap();
    let secure = cluster(1, Some(&tls), false, None, 5);
    let plain = cluster(1, None, false, None, 5);
    let ca = ca_file(&tls, "ports");
    let ssl = vec![
        ("security.protocol", "SSL".to_owned()),
        ("ssl.ca.location", ca.to_str().unwrap().to_owned()),
    ];
    // TLS on both sides works.
    let values = rt()
        .block_on(read(&secure.bootstrap(), None, &ssl))
        .unwrap();
    assert_eq!(values.len(), 15);

    // A plaintext client on the TLS port reads the broker's TLS alert.
    let (kind, text) = error_of(&secure.bootstrap(), &[]);
    assert!(
        matches!(
            kind,
            ErrorKind::Tls {
                problem: TlsProblem::PortSpeaksTls,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("security.protocol=SSL") && text.contains(&secure.bootstrap()),
        "{text}"
    );
    // rustls sends its alert before the broker task counts the failed handshake, so the
    // client can read the alert first: wait for the count rather than race it.
    wait_until(
        Duration::from_secs(10),
        "the fake broker to count the failed handshake",
        || secure.stats(1).unwrap().tls_handshakes_failed >= 1,
    );

    // A TLS client on the plaintext port.
    let (kind, text) = error_of(&plain.bootstrap(), &ssl);
    assert!(
        matches!(
            kind,
            ErrorKind::Tls {
                problem: TlsProblem::NotTls { .. },
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("does not speak TLS on this port") && text.contains(&plain.bootstrap()),
        "{text}"
    );

    // A SASL client on a listener without SASL.
    let mut sasl = sasl_ssl(ca.to_str().unwrap(), PASSWORD);
    sasl[0].1 = "SASL_PLAINTEXT".to_owned();
    let (kind, text) = error_of(&plain.bootstrap(), &sasl);
    assert!(
        matches!(
            kind,
            ErrorKind::Sasl {
                problem: SaslProblem::NotSaslListener(_),
                ..
            }
        ),
        "{text}"
    );
}

/// What a new user sees from `kdirect consume`: each TLS mistake is one line on stderr naming
/// the broker, and the password shows nowhere.
#[test]
fn cli_tls_mistakes_against_the_fake_broker_are_one_clear_line_each() {
    let good = FakeTls::new(&["127.0.0.1"]).unwrap();
    let expired = FakeTls::expired(&["127.0.0.1"]).unwrap();
    let other_host = FakeTls::new(&["kafka.other.example"]).unwrap();
    let run = |c: &FakeCluster, ca: Option<&PathBuf>, password: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kdirect"));
        cmd.args(["consume", "-b", &c.bootstrap(), "-t", "t", "--until-latest"])
            .env("KDIRECT_SECURITY_PROTOCOL", "SASL_SSL")
            .env("KDIRECT_SASL_MECHANISM", "PLAIN")
            .env("KDIRECT_SASL_USERNAME", USER)
            .env("KDIRECT_SASL_PASSWORD", password);
        if let Some(ca) = ca {
            cmd.env("KDIRECT_SSL_CA_LOCATION", ca);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            !stdout.contains(password) && !stderr.contains(password),
            "the password was printed:\n{stdout}\n{stderr}"
        );
        (out.status.success(), stdout, stderr)
    };
    let one_line = |stderr: &str, c: &FakeCluster, words: &str| {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one clear line: {stderr}");
        assert!(
            lines[0].contains(&c.bootstrap()) && lines[0].contains(words),
            "{words}: {stderr}"
        );
    };

    let ok = cluster(1, Some(&good), true, None, 4);
    let ca = ca_file(&good, "cli-good");
    let (success, stdout, stderr) = run(&ok, Some(&ca), PASSWORD);
    assert!(success, "{stderr}");
    assert_eq!(stdout.lines().count(), 12, "{stderr}");

    let (success, stdout, stderr) = run(&ok, Some(&ca), "wrong-password-42");
    assert!(!success && stdout.is_empty());
    one_line(&stderr, &ok, "Invalid username or password");

    // Mozilla's roots do not include the fake broker's CA.
    let (success, _, stderr) = run(&ok, None, PASSWORD);
    assert!(!success);
    one_line(&stderr, &ok, "ssl.ca.location");

    let c = cluster(1, Some(&expired), true, None, 1);
    let ca = ca_file(&expired, "cli-expired");
    let (success, _, stderr) = run(&c, Some(&ca), PASSWORD);
    assert!(!success);
    one_line(&stderr, &c, "has expired");

    let c = cluster(1, Some(&other_host), true, None, 1);
    let ca = ca_file(&other_host, "cli-host");
    let (success, _, stderr) = run(&c, Some(&ca), PASSWORD);
    assert!(!success);
    one_line(&stderr, &c, "not valid for '127.0.0.1'");
}

/// KIP-368 with a broker that enforces it: the fake's sessions last 3 s and a request after
/// that closes the connection (counted in `sessions_expired`). kdirect re-authenticates a
/// connection in place (SaslHandshake and SaslAuthenticate again) once its session is between
/// 85% and 95% through, before the next request; a stream paced over about five lifetimes
/// reads everything with no request on an ended session, and the broker counts more
/// authentications than connections: the sessions were renewed on the connections they
/// belong to.
#[test]
fn sasl_sessions_are_reauthenticated_in_place_before_the_fake_broker_would_close_them() {
    use kdirect::engine::cluster::Cluster;
    use kdirect::engine::conn::ConnConfig;
    use kdirect::proto::api::metadata::{self, Metadata};

    let lifetime = Duration::from_secs(3);
    let tls = FakeTls::new(&["127.0.0.1"]).unwrap();
    let c = cluster(1, Some(&tls), true, Some(lifetime), 100);
    let ca = ca_file(&tls, "renew");
    let settings = sasl_ssl(ca.to_str().unwrap(), PASSWORD);

    rt().block_on(async {
        let mut config = ConnConfig::default();
        for (k, v) in &settings {
            assert!(config.security.set(k, v).unwrap());
        }
        let cluster = Cluster::connect(&[c.bootstrap()], config).await.unwrap();
        let first = cluster.connection(1).await.unwrap();
        assert_eq!(first.sasl_session_lifetime(), Some(lifetime));
        assert_eq!(first.sasl_reauthentications(), 0);
        kdirect_test_support::wait_until_async(
            lifetime * 2,
            "the re-authentication comes due",
            || first.reauthentication_due(),
        )
        .await;
        let before = c.stats(1).unwrap();
        let v = first.version::<Metadata>().unwrap();
        first
            .request_at::<Metadata>(&metadata::request(Some(&[]), v), v)
            .await
            .expect("the request re-authenticates first, on the same connection");
        assert_eq!(first.sasl_reauthentications(), 1);
        assert!(first.is_usable() && !first.reauthentication_due());
        assert_eq!(first.sasl_session_lifetime(), Some(lifetime));
        let after = c.stats(1).unwrap();
        assert_eq!(after.connections_accepted, before.connections_accepted);
        assert_eq!(after.sasl_authentications, before.sasl_authentications + 1);
        assert_eq!(after.sessions_expired, 0, "{after:?}");
    });

    let before = c.stats(1).unwrap();
    let mut paced = settings.clone();
    paced.extend([
        ("trigger", "processing-time=800".to_owned()),
        ("maxOffsetsPerTrigger", "15".to_owned()),
    ]);
    let values = rt()
        .block_on(read(&c.bootstrap(), Some("g-fake-renew"), &paced))
        .unwrap();
    assert_eq!(sorted_unique(values).len(), 300);
    let after = c.stats(1).unwrap();
    assert_eq!(
        after.sessions_expired, before.sessions_expired,
        "no request arrived on a connection past its session: {after:?}"
    );
    let connections = after.connections_accepted - before.connections_accepted;
    let authentications = after.sasl_authentications - before.sasl_authentications;
    assert!(
        authentications >= connections + 3,
        "sessions were renewed in place: {connections} connections, {authentications} \
         authentications ({before:?} → {after:?})"
    );
}
