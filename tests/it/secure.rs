//! TLS and SASL against Apache Kafka (issue 12): the `secure` cluster of `tests/kafka/kafka.sh`
//! (Kafka 4.1.1, one node) with a SASL_PLAINTEXT listener (SCRAM-SHA-256/512), an SSL listener
//! that requires client certificates, and a SASL_SSL listener (PLAIN, SCRAM, OAUTHBEARER); user
//! `alice`, password `alice-secret` (SCRAM credentials made at format time with `--add-scram`,
//! PLAIN's in the listener's JAAS). The Java tools write through its PLAINTEXT port; kdirect
//! reads through the secured ones, and commits group offsets that Kafka's own group tool reads
//! back. Every usual mistake gets one test of the error it gives.
//!
//! Skips without `KDIRECT_TEST_KAFKA_SECURE`; fails under `KDIRECT_REQUIRE_SERVICES=1`.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use kdirect::engine::plan::StartPolicy;
use kdirect::{DirectStream, ErrorKind, SaslProblem, TlsProblem};

use crate::real_kafka::{topic, Kafka};
use crate::support::{rt, service};

const PASSWORD: &str = "alice-secret";

struct Secure {
    kafka: Kafka,
    certs: PathBuf,
    sasl_plaintext: String,
    ssl: String,
    sasl_ssl: String,
}

impl Secure {
    fn get(test: &str) -> Option<Secure> {
        let kafka = Kafka::secure(test)?;
        Some(Secure {
            kafka,
            certs: PathBuf::from(service("KDIRECT_TEST_KAFKA_CERTS", test)?),
            sasl_plaintext: service("KDIRECT_TEST_KAFKA_SASL_PLAINTEXT", test)?,
            ssl: service("KDIRECT_TEST_KAFKA_SSL", test)?,
            sasl_ssl: service("KDIRECT_TEST_KAFKA_SASL_SSL", test)?,
        })
    }

    fn cert(&self, name: &str) -> String {
        self.certs.join(name).to_str().unwrap().to_owned()
    }

    /// A topic of 3 partitions with `count` records, written by Kafka's Java producer.
    fn topic_with(&self, name: &str, count: u64) -> String {
        let t = topic(name);
        self.kafka.create(&t, 3, &[]);
        self.kafka.produce(&t, 3, count, &[]);
        t
    }

    /// The group's committed offset per partition, as Kafka's group tool describes it.
    fn committed(&self, group: &str, t: &str) -> BTreeMap<i32, i64> {
        let describe = self.kafka.java(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            &[
                "--bootstrap-server",
                &self.kafka.bootstrap,
                "--describe",
                "--group",
                group,
            ],
        );
        // Columns: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
        describe
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(t))
            .map(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                (c[2].parse().unwrap(), c[3].parse().unwrap())
            })
            .collect()
    }
}

/// Reads `t` whole through `bootstrap` with `settings`, committing each batch to the group
/// `group` through the `kafka` store (whose coordinator connection is secured the same way);
/// returns the records' values.
async fn read_and_commit(
    bootstrap: &str,
    t: &str,
    group: Option<&str>,
    settings: &[(&str, &str)],
) -> Result<Vec<String>, kdirect::Error> {
    let mut b = DirectStream::builder()
        .bootstrap(bootstrap)
        .topics(&[t])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .set("default.api.timeout.ms", "10000")?
        .set("maxOffsetsPerTrigger", "250")?;
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

/// Reads a whole topic of 600 records through a secured listener, commits group offsets, and
/// checks both: every record once, and the group at the end offsets in Kafka's own tool.
fn reads_whole_topic_and_commits(s: &Secure, bootstrap: &str, settings: &[(&str, &str)]) {
    let t = s.topic_with("secure", 600);
    let group = format!("{t}-g");
    let mut values = rt()
        .block_on(read_and_commit(bootstrap, &t, Some(&group), settings))
        .unwrap_or_else(|e| panic!("{settings:?}: {e}"));
    values.sort();
    let before = values.len();
    values.dedup();
    assert_eq!(before, 600, "every record read once");
    assert_eq!(values.len(), 600, "no record twice");
    let committed = s.committed(&group, &t);
    let ends = s.kafka.end_offsets(&t);
    assert_eq!(
        committed.values().copied().collect::<Vec<_>>(),
        ends,
        "the group's committed offsets are the partitions' ends"
    );
    assert_eq!(ends.iter().sum::<i64>(), 600);
}

/// The error reading through `bootstrap` with `settings` gives, as the engine's kind and text.
fn error_of(bootstrap: &str, settings: &[(&str, &str)]) -> (ErrorKind, String) {
    let e = rt()
        .block_on(read_and_commit(bootstrap, "no-such-topic", None, settings))
        .expect_err("must fail");
    let text = e.to_string();
    assert!(!text.contains(PASSWORD), "a secret in an error: {text}");
    let kdirect::error::Kind::Engine(e) = e.into_kind() else {
        panic!("not an engine error: {text}")
    };
    (e.into_kind(), text)
}

fn scram(mechanism: &'static str, protocol: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("security.protocol", protocol),
        ("sasl.mechanism", mechanism),
        ("sasl.username", "alice"),
        ("sasl.password", PASSWORD),
    ]
}

#[test]
fn sasl_plaintext_scram_sha_256_reads_a_topic_and_commits_group_offsets() {
    let Some(s) =
        Secure::get("sasl_plaintext_scram_sha_256_reads_a_topic_and_commits_group_offsets")
    else {
        return;
    };
    reads_whole_topic_and_commits(
        &s,
        &s.sasl_plaintext,
        &scram("SCRAM-SHA-256", "SASL_PLAINTEXT"),
    );
}

#[test]
fn sasl_ssl_scram_sha_512_reads_a_topic_and_commits_group_offsets() {
    let Some(s) = Secure::get("sasl_ssl_scram_sha_512_reads_a_topic_and_commits_group_offsets")
    else {
        return;
    };
    let ca = s.cert("ca.pem");
    let mut settings = scram("SCRAM-SHA-512", "SASL_SSL");
    settings.push(("ssl.ca.location", &ca));
    reads_whole_topic_and_commits(&s, &s.sasl_ssl, &settings);
}

#[test]
fn sasl_ssl_plain_reads_a_topic_and_commits_group_offsets() {
    let Some(s) = Secure::get("sasl_ssl_plain_reads_a_topic_and_commits_group_offsets") else {
        return;
    };
    let ca = s.cert("ca.pem");
    let mut settings = scram("PLAIN", "SASL_SSL");
    settings.push(("ssl.ca.location", &ca));
    // By host name this time: the certificate names localhost too, and SNI carries it.
    let port = s.sasl_ssl.rsplit_once(':').unwrap().1;
    reads_whole_topic_and_commits(&s, &format!("localhost:{port}"), &settings);
}

/// An unsecured JWT (`alg: none`), which the broker's default OAUTHBEARER validator accepts.
fn unsecured_jwt(sub: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#);
    let claims = URL_SAFE_NO_PAD.encode(format!(
        r#"{{"sub":"{sub}","iat":{now},"exp":{}}}"#,
        now + 3600
    ));
    format!("{header}.{claims}.")
}

#[test]
fn sasl_ssl_oauthbearer_with_a_static_token_reads_a_topic() {
    let Some(s) = Secure::get("sasl_ssl_oauthbearer_with_a_static_token_reads_a_topic") else {
        return;
    };
    let ca = s.cert("ca.pem");
    let token = unsecured_jwt("alice");
    let settings = [
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.token", token.as_str()),
        ("ssl.ca.location", &ca),
    ];
    reads_whole_topic_and_commits(&s, &s.sasl_ssl, &settings);
}

#[test]
fn ssl_mutual_tls_reads_a_topic_with_pkcs8_rsa_and_ec_keys() {
    let Some(s) = Secure::get("ssl_mutual_tls_reads_a_topic_with_pkcs8_rsa_and_ec_keys") else {
        return;
    };
    let ca = s.cert("ca.pem");
    for (cert, key) in [
        ("client.pem", "client.key"),       // PKCS#8 (BEGIN PRIVATE KEY)
        ("client.pem", "client-rsa.key"),   // PKCS#1 (BEGIN RSA PRIVATE KEY)
        ("client-ec.pem", "client-ec.key"), // SEC1 (BEGIN EC PRIVATE KEY)
    ] {
        let key_pem = std::fs::read_to_string(s.cert(key)).unwrap();
        let form = key_pem.lines().next().unwrap().to_owned();
        let (cert, key) = (s.cert(cert), s.cert(key));
        let settings = [
            ("security.protocol", "SSL"),
            ("ssl.ca.location", ca.as_str()),
            ("ssl.certificate.location", cert.as_str()),
            ("ssl.key.location", key.as_str()),
        ];
        eprintln!("mutual TLS with a {form} key");
        reads_whole_topic_and_commits(&s, &s.ssl, &settings);
    }
}

#[test]
fn wrong_password_and_unknown_user_are_refused_with_the_brokers_words() {
    let Some(s) = Secure::get("wrong_password_and_unknown_user_are_refused_with_the_brokers_words")
    else {
        return;
    };
    let ca = s.cert("ca.pem");
    for (bootstrap, mechanism, protocol, user, password) in [
        (
            &s.sasl_plaintext,
            "SCRAM-SHA-256",
            "SASL_PLAINTEXT",
            "alice",
            "not-her-password",
        ),
        (
            &s.sasl_plaintext,
            "SCRAM-SHA-512",
            "SASL_PLAINTEXT",
            "mallory",
            "whatever",
        ),
        (
            &s.sasl_ssl,
            "PLAIN",
            "SASL_SSL",
            "alice",
            "not-her-password",
        ),
    ] {
        let settings = [
            ("security.protocol", protocol),
            ("sasl.mechanism", mechanism),
            ("sasl.username", user),
            ("sasl.password", password),
            ("ssl.ca.location", &ca),
        ];
        let (kind, text) = error_of(bootstrap, &settings);
        let ErrorKind::Sasl {
            problem: SaslProblem::Refused(words),
            ..
        } = kind
        else {
            panic!("{mechanism} {user}: {text}")
        };
        // Kafka's words: "Authentication failed during authentication due to invalid
        // credentials with SASL mechanism SCRAM-SHA-256".
        assert!(words.contains("Authentication failed"), "{text}");
        assert!(
            text.contains(bootstrap.as_str()) && text.contains(mechanism),
            "{text}"
        );
        assert!(
            !text.contains(password),
            "the password is not in the error: {text}"
        );
    }
}

#[test]
fn a_mechanism_the_listener_does_not_enable_lists_what_it_offers() {
    let Some(s) = Secure::get("a_mechanism_the_listener_does_not_enable_lists_what_it_offers")
    else {
        return;
    };
    let (kind, text) = error_of(&s.sasl_plaintext, &scram("PLAIN", "SASL_PLAINTEXT"));
    let ErrorKind::Sasl {
        problem: SaslProblem::MechanismNotEnabled { offered },
        ..
    } = kind
    else {
        panic!("{text}")
    };
    let mut sorted = offered.clone();
    sorted.sort();
    assert_eq!(sorted, ["SCRAM-SHA-256", "SCRAM-SHA-512"], "{text}");
    assert!(
        text.contains(&offered.join(", ")) && text.contains(&s.sasl_plaintext),
        "{text}"
    );
}

#[test]
fn plaintext_client_on_a_tls_port_is_told_to_set_ssl() {
    let Some(s) = Secure::get("plaintext_client_on_a_tls_port_is_told_to_set_ssl") else {
        return;
    };
    for (bootstrap, settings) in [
        (&s.ssl, vec![]),
        (&s.sasl_ssl, scram("SCRAM-SHA-512", "SASL_PLAINTEXT")),
    ] {
        let (kind, text) = error_of(bootstrap, &settings);
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
            text.contains("security.protocol=SSL") && text.contains(bootstrap.as_str()),
            "{text}"
        );
    }
}

#[test]
fn tls_client_on_a_plaintext_port_is_told_the_port_does_not_speak_tls() {
    let Some(s) = Secure::get("tls_client_on_a_plaintext_port_is_told_the_port_does_not_speak_tls")
    else {
        return;
    };
    let ca = s.cert("ca.pem");
    let mut sasl_ssl = scram("SCRAM-SHA-256", "SASL_SSL");
    sasl_ssl.push(("ssl.ca.location", &ca));
    for (bootstrap, settings) in [
        (
            &s.kafka.bootstrap,
            vec![("security.protocol", "SSL"), ("ssl.ca.location", &ca)],
        ),
        (&s.sasl_plaintext, sasl_ssl),
    ] {
        let (kind, text) = error_of(bootstrap, &settings);
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
            text.contains("does not speak TLS on this port") && text.contains(bootstrap.as_str()),
            "{text}"
        );
    }
}

#[test]
fn an_unknown_ca_is_named() {
    let Some(s) = Secure::get("an_unknown_ca_is_named") else {
        return;
    };
    // Without ssl.ca.location, Mozilla's roots: the test CA is not among them.
    let (kind, text) = error_of(&s.sasl_ssl, &scram("SCRAM-SHA-512", "SASL_SSL"));
    assert!(
        matches!(
            kind,
            ErrorKind::Tls {
                problem: TlsProblem::UnknownCa,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("ssl.ca.location") && text.contains(&s.sasl_ssl),
        "{text}"
    );
    // A CA file that did not sign the broker's certificate: the same.
    let other = s.cert("other-ca.pem");
    let (kind, text) = error_of(
        &s.ssl,
        &[("security.protocol", "SSL"), ("ssl.ca.location", &other)],
    );
    assert!(
        matches!(
            kind,
            ErrorKind::Tls {
                problem: TlsProblem::UnknownCa,
                ..
            }
        ),
        "{text}"
    );
}

#[test]
fn mutual_tls_without_a_client_certificate_is_refused() {
    let Some(s) = Secure::get("mutual_tls_without_a_client_certificate_is_refused") else {
        return;
    };
    let ca = s.cert("ca.pem");
    let (kind, text) = error_of(
        &s.ssl,
        &[("security.protocol", "SSL"), ("ssl.ca.location", &ca)],
    );
    assert!(
        matches!(
            kind,
            ErrorKind::Tls {
                problem: TlsProblem::ClientCertificateRefused(_),
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("ssl.certificate.location") && text.contains(&s.ssl),
        "{text}"
    );
}

/// What a new user does: `kdirect consume` and `kdirect lag` on the SASL_SSL listener with
/// SCRAM credentials from the environment; the password appears in no output, and a wrong
/// one gives one clear line.
#[test]
fn cli_reads_sasl_ssl_with_credentials_from_the_environment_and_never_prints_them() {
    let Some(s) = Secure::get(
        "cli_reads_sasl_ssl_with_credentials_from_the_environment_and_never_prints_them",
    ) else {
        return;
    };
    let t = s.topic_with("secure-cli", 300);
    let group = format!("{t}-g");
    let run = |args: &[&str], password: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(args)
            .env("KDIRECT_SECURITY_PROTOCOL", "SASL_SSL")
            .env("KDIRECT_SASL_MECHANISM", "SCRAM-SHA-512")
            .env("KDIRECT_SASL_USERNAME", "alice")
            .env("KDIRECT_SASL_PASSWORD", password)
            .env("KDIRECT_SSL_CA_LOCATION", s.cert("ca.pem"))
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            !stdout.contains(password) && !stderr.contains(password),
            "{args:?}: the password was printed:\n{stdout}\n{stderr}"
        );
        (out.status.success(), stdout, stderr)
    };
    let consume = [
        "consume",
        "-b",
        &s.sasl_ssl,
        "-t",
        &t,
        "--until-latest",
        "--store",
        "kafka",
        "-g",
        &group,
    ];
    let (ok, stdout, stderr) = run(&consume, PASSWORD);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.lines().count(), 300, "{stderr}");
    let (ok, stdout, stderr) = run(
        &[
            "lag",
            "--store",
            "kafka",
            "-g",
            &group,
            "-t",
            &t,
            "-b",
            &s.sasl_ssl,
        ],
        PASSWORD,
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&t), "lag names the topic: {stdout}");
    assert_eq!(s.committed(&group, &t).values().sum::<i64>(), 300);
    // --help shows no value from the environment.
    let (_, help, _) = run(&["consume", "--help"], PASSWORD);
    assert!(help.contains("KDIRECT_SASL_PASSWORD"), "{help}");

    let (ok, stdout, stderr) = run(&consume, "wrong-password-123");
    assert!(!ok && stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one clear line: {stderr}");
    assert!(
        lines[0].contains("SASL SCRAM-SHA-512 authentication")
            && lines[0].contains(&s.sasl_ssl)
            && lines[0].contains("Authentication failed"),
        "{stderr}"
    );
}

/// KIP-368: the listener's SCRAM-SHA-512 sessions last 3 s. Once a connection's session is
/// between 85% and 95% through, its next request re-authenticates it in place first
/// (SaslHandshake and a new SCRAM exchange on the same connection), as the Java client does;
/// the broker would close a connection whose session ended at its next request. A slow
/// stream over several session lifetimes reads every record.
#[test]
fn sasl_sessions_that_end_are_reauthenticated_in_place() {
    use kdirect::engine::cluster::Cluster;
    use kdirect::engine::conn::ConnConfig;
    use kdirect::proto::api::metadata::{self, Metadata};
    use std::time::Duration;

    let Some(s) = Secure::get("sasl_sessions_that_end_are_reauthenticated_in_place") else {
        return;
    };
    let settings = scram("SCRAM-SHA-512", "SASL_PLAINTEXT");
    rt().block_on(async {
        let mut config = ConnConfig::default();
        for (k, v) in &settings {
            assert!(config.security.set(k, v).unwrap());
        }
        let cluster = Cluster::connect(std::slice::from_ref(&s.sasl_plaintext), config)
            .await
            .unwrap();
        let node = *cluster.view().brokers.keys().next().unwrap();
        let first = cluster.connection(node).await.unwrap();
        let lifetime = first
            .sasl_session_lifetime()
            .expect("the broker announces the session's lifetime");
        assert!(
            lifetime <= Duration::from_secs(3) && lifetime > Duration::ZERO,
            "{lifetime:?}"
        );
        kdirect_test_support::wait_until_async(
            lifetime * 2,
            "the re-authentication comes due",
            || first.reauthentication_due(),
        )
        .await;
        let v = first.version::<Metadata>().unwrap();
        first
            .request_at::<Metadata>(&metadata::request(Some(&[]), v), v)
            .await
            .expect("the request re-authenticates first, on the same connection");
        assert_eq!(first.sasl_reauthentications(), 1);
        assert!(first.is_usable() && first.sasl_session_lifetime().is_some());
        cluster
            .refresh(Some(&[]))
            .await
            .expect("the renewed session");
    });
    // A stream paced over about three session lifetimes.
    let t = s.topic_with("secure-reauth", 300);
    let mut paced = settings.clone();
    paced.extend([
        ("trigger", "processing-time=1000"),
        ("maxOffsetsPerTrigger", "60"),
    ]);
    let values = rt()
        .block_on(read_and_commit(
            &s.sasl_plaintext,
            &t,
            Some(&format!("{t}-g")),
            &paced,
        ))
        .unwrap();
    assert_eq!(values.len(), 300);
}

#[test]
fn sasl_and_plain_listeners_mismatched_with_the_client_are_named() {
    let Some(s) = Secure::get("sasl_and_plain_listeners_mismatched_with_the_client_are_named")
    else {
        return;
    };
    // A SASL client on the PLAINTEXT listener: Kafka answers SaslHandshake ILLEGAL_SASL_STATE.
    let (kind, text) = error_of(
        &s.kafka.bootstrap,
        &scram("SCRAM-SHA-256", "SASL_PLAINTEXT"),
    );
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
    assert!(
        text.contains("security.protocol=PLAINTEXT or SSL"),
        "{text}"
    );
    // A client without SASL on the SASL listener: Kafka answers ApiVersions, then closes the
    // connection at the next request.
    let (kind, text) = error_of(&s.sasl_plaintext, &[("default.api.timeout.ms", "1000")]);
    assert!(matches!(kind, ErrorKind::Disconnected { .. }), "{text}");
    assert!(
        text.contains("SASL listener") && text.contains("security.protocol=SASL_PLAINTEXT"),
        "{text}"
    );
}

/// No Kafka needed: the builder's (and so the stream config's) `Debug` never shows a secret,
/// whether it came through `set` or the typed setters, and a bad value's error names the key.
#[test]
fn secrets_never_show_in_debug_output_or_setting_errors() {
    use kdirect::{SaslMechanism, Secret, SecurityProtocol};
    let b = DirectStream::builder()
        .bootstrap("127.0.0.1:9093")
        .set("security.protocol", "SASL_SSL")
        .unwrap()
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .unwrap()
        .set("sasl.username", "alice")
        .unwrap()
        .set("sasl.password", "pw-from-set-42")
        .unwrap()
        .set("sasl.oauthbearer.token", "token-from-set-42")
        .unwrap();
    let debug = format!("{b:?}");
    assert!(
        !debug.contains("pw-from-set-42") && !debug.contains("token-from-set-42"),
        "{debug}"
    );
    assert!(
        debug.contains("<redacted>") && debug.contains("alice"),
        "{debug}"
    );
    let b = b.security_protocol(SecurityProtocol::SaslPlaintext).sasl(
        SaslMechanism::Plain,
        "bob",
        Secret::new("pw-typed-42"),
    );
    let debug = format!("{:?}", b.config());
    assert!(
        !debug.contains("pw-typed-42") && debug.contains("bob"),
        "{debug}"
    );
    // A store spec's password neither (the builder's derived Debug printed it whole).
    let b = DirectStream::builder().store_spec("postgres://kd:pw-in-spec-42@127.0.0.1:5432/db");
    let debug = format!("{b:?}");
    assert!(!debug.contains("pw-in-spec-42"), "{debug}");
    let e = DirectStream::builder()
        .set("security.protocol", "TLS")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("security.protocol") && e.contains("SASL_SSL"),
        "{e}"
    );
}

/// OAUTHBEARER with a token callback: every connection (bootstrap, the leader, the group
/// coordinator) asks it for a fresh token, and the whole topic is read and committed; a
/// callback that fails names its own words in the error.
#[test]
fn sasl_ssl_oauthbearer_with_a_token_callback_reads_a_topic() {
    let Some(s) = Secure::get("sasl_ssl_oauthbearer_with_a_token_callback_reads_a_topic") else {
        return;
    };
    let ca = s.cert("ca.pem");
    let t = s.topic_with("secure-cb", 300);
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = calls.clone();
    let read = rt().block_on(async {
        let mut stream = DirectStream::builder()
            .bootstrap(&s.sasl_ssl)
            .topics(&[&t])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .set("security.protocol", "SASL_SSL")
            .unwrap()
            .set("ssl.ca.location", &ca)
            .unwrap()
            .sasl_oauthbearer_token_provider(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok(kdirect::Secret::new(unsecured_jwt("alice"))) }
            })
            .group(&format!("{t}-g"))
            .store_spec("kafka")
            .build()
            .await
            .unwrap();
        let mut n = 0;
        while let Some(b) = stream.next_batch().await.unwrap() {
            n += b.offset_count();
            stream.commit(b).await.unwrap();
        }
        n
    });
    assert_eq!(read, 300);
    let n = calls.load(std::sync::atomic::Ordering::SeqCst);
    // The bootstrap connection, the leader's, and the coordinator's (at least).
    assert!(n >= 2, "the callback was asked {n} times");
    let e = rt()
        .block_on(
            DirectStream::builder()
                .bootstrap(&s.sasl_ssl)
                .topics(&[&t])
                .set("security.protocol", "SASL_SSL")
                .unwrap()
                .set("ssl.ca.location", &ca)
                .unwrap()
                .sasl_oauthbearer_token_provider(|| async {
                    Err("the identity provider is down".to_owned())
                })
                .build(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token callback failed: the identity provider is down"),
        "{e}"
    );
}

/// `ssl.key.password`: the client key of the mutual-TLS listener, re-encrypted by the test as
/// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it (PEM `ENCRYPTED PRIVATE KEY`), reads the
/// topic with the password; without it, or with a wrong one, one error naming the key file,
/// never the password.
#[test]
fn ssl_mutual_tls_with_an_encrypted_pkcs8_key_and_ssl_key_password() {
    let Some(s) = Secure::get("ssl_mutual_tls_with_an_encrypted_pkcs8_key_and_ssl_key_password")
    else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kdirect-secure-p8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let encrypted = dir.join("client.key.p8");
    let key_password = "key-pass-7781";
    let out = Command::new("openssl")
        .args(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in"])
        .arg(s.cert("client.key"))
        .arg("-out")
        .arg(&encrypted)
        .args(["-passout", &format!("pass:{key_password}")])
        .output()
        .expect("the openssl binary (Debian's openssl package)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pem = std::fs::read_to_string(&encrypted).unwrap();
    assert!(
        pem.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"),
        "{pem}"
    );

    let (ca, cert) = (s.cert("ca.pem"), s.cert("client.pem"));
    let key = encrypted.to_str().unwrap();
    let mut settings = vec![
        ("security.protocol", "SSL"),
        ("ssl.ca.location", ca.as_str()),
        ("ssl.certificate.location", cert.as_str()),
        ("ssl.key.location", key),
    ];
    let (kind, text) = error_of(&s.ssl, &settings);
    assert!(
        matches!(
            kind,
            ErrorKind::Tls {
                problem: TlsProblem::Setup(_),
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("set ssl.key.password") && text.contains(key),
        "{text}"
    );
    settings.push(("ssl.key.password", "not-the-key-pass"));
    let (_, text) = error_of(&s.ssl, &settings);
    assert!(
        text.contains("wrong password") && text.contains(key),
        "{text}"
    );
    assert!(!text.contains("not-the-key-pass"), "{text}");
    settings.pop();
    settings.push(("ssl.key.password", key_password));
    reads_whole_topic_and_commits(&s, &s.ssl, &settings);
    let _ = std::fs::remove_dir_all(&dir);
}
