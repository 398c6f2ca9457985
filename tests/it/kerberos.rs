//! SASL/GSSAPI (Kerberos) against Apache Kafka (issue 36): the `kerberos` cluster of
//! `tests/kafka/kafka.sh` (Kafka 4.1.1, one node, a SASL_PLAINTEXT listener with GSSAPI only,
//! advertised as `localhost`; service principal `kafka/localhost`) and the MIT KDC of
//! `tests/kerberos/kdc.sh` (realm KDIRECT.TEST: `alice` with a keytab; `ghost`, whose keytab
//! outlived its principal). Kafka's Java tools write through the node's PLAINTEXT port;
//! kdirect reads through the GSSAPI one with a keytab and with a ticket cache that `kinit`
//! filled, and each usual mistake gets the error it gives: an unknown client or service
//! principal, a principal not in the keytab, no ticket cache, an expired ticket (at start, and
//! in the middle of a run), a clock skewed past the KDC's limit. The node's GSSAPI sessions
//! last 3 s: paced consumers re-authenticate in place (KIP-368), and a keytab login of
//! `brief`, whose tickets last 20 s, reads for more than two ticket lifetimes.
//!
//! Every run is the `kdirect` CLI in a process of its own, with the realm's `krb5.conf`
//! (`KRB5_CONFIG`) and a ticket cache of the test's own (`KRB5CCNAME`): the Kerberos library
//! reads both from the environment, which a test must not change in this shared,
//! multi-threaded process. The skewed clock is libfaketime's (`LD_PRELOAD`) on that process.
//!
//! Skips without `KDIRECT_TEST_KAFKA_GSSAPI`, or in a build without the `gssapi` feature;
//! fails under `KDIRECT_REQUIRE_SERVICES=1` (tests/run.sh builds with the feature).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::real_kafka::{topic, Kafka};
use crate::support::service;

struct Realm {
    kafka: Kafka,
    /// The GSSAPI listener, `localhost:38092`.
    gssapi: String,
    /// tests/kerberos/kdc.sh's directory: krb5.conf, the keytabs.
    home: PathBuf,
    realm: String,
    /// This test's own files (ticket caches).
    scratch: PathBuf,
}

impl Realm {
    fn get(test: &str) -> Option<Realm> {
        if !cfg!(feature = "gssapi") {
            assert!(
                std::env::var_os("KDIRECT_REQUIRE_SERVICES").is_none_or(|v| v != "1"),
                "{test}: kdirect was built without the gssapi feature, and \
                 KDIRECT_REQUIRE_SERVICES=1 forbids skipping (tests/run.sh builds with \
                 --features kdirect/gssapi)"
            );
            println!(
                "skipping {test}: built without the gssapi feature (--features kdirect/gssapi)"
            );
            return None;
        }
        let kafka = Kafka::kerberos(test)?;
        let gssapi = service("KDIRECT_TEST_KAFKA_GSSAPI", test)?;
        let home = PathBuf::from(service("KDIRECT_TEST_KERBEROS", test)?);
        let realm = service("KDIRECT_TEST_KERBEROS_REALM", test)?;
        let scratch = std::env::temp_dir().join(topic(&format!("kdirect-krb-{test}")));
        std::fs::create_dir_all(&scratch).unwrap();
        Some(Realm {
            kafka,
            gssapi,
            home,
            realm,
            scratch,
        })
    }

    fn file(&self, name: &str) -> String {
        self.home.join(name).to_str().unwrap().to_owned()
    }

    fn principal(&self, user: &str) -> String {
        format!("{user}@{}", self.realm)
    }

    /// A ticket cache of this test's own, `FILE:` + path.
    fn cache(&self, name: &str) -> (PathBuf, String) {
        let path = self.scratch.join(name);
        let spec = format!("FILE:{}", path.display());
        (path, spec)
    }

    /// `kinit` as `user` from its keytab into `cache`, with more arguments (`-l 2s`).
    fn kinit(&self, user: &str, cache: &str, extra: &[&str]) {
        let out = Command::new("kinit")
            .args(extra)
            .args(["-k", "-t", &self.file(&format!("{user}.keytab"))])
            .arg(self.principal(user))
            .env("KRB5_CONFIG", self.file("krb5.conf"))
            .env("KRB5CCNAME", cache)
            .output()
            .expect("run kinit (tests/kerberos/kdc.sh installs krb5-user)");
        assert!(
            out.status.success(),
            "kinit {user}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kdirect ARGS` on the GSSAPI listener with `settings` (`-X`), the realm's krb5.conf and
    /// `cache` as the ticket cache, and `env` on top (libfaketime).
    fn kdirect(
        &self,
        args: &[&str],
        settings: &[(&str, &str)],
        cache: &str,
        env: &[(&str, &str)],
    ) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kdirect"));
        c.args(args)
            .args(["-b", &self.gssapi])
            .args(["-X", "security.protocol=SASL_PLAINTEXT"])
            .args(["-X", "sasl.mechanism=GSSAPI"]);
        for (k, v) in settings {
            c.args(["-X", &format!("{k}={v}")]);
        }
        c.env("KRB5_CONFIG", self.file("krb5.conf"))
            .env("KRB5CCNAME", cache)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// A topic of 3 partitions with `count` records, written by Kafka's Java producer.
    fn topic_with(&self, name: &str, count: u64) -> String {
        let t = topic(name);
        self.kafka.create(&t, 3, &[]);
        self.kafka.produce(&t, 3, count, &[]);
        t
    }
}

impl Drop for Realm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// The one line a failed run prints, after checking that it failed with nothing on stdout.
fn one_error_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected a failure:\n{stdout}\n{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one clear line: {stderr}");
    lines[0].to_owned()
}

fn ok_lines(out: &Output) -> usize {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// What a user of a Kerberized cluster does: `kdirect consume` with a keytab (committing the
/// group's offsets through the coordinator, also over GSSAPI, which Kafka's group tool reads
/// back), then with the ticket cache `kinit` filled. The keytab login keeps its tickets in
/// memory: the ticket cache it was given is never created.
#[test]
fn gssapi_reads_with_a_keytab_and_with_a_ticket_cache() {
    let Some(r) = Realm::get("gssapi_reads_with_a_keytab_and_with_a_ticket_cache") else {
        return;
    };
    let t = r.topic_with("gssapi-read", 300);
    let group = format!("{t}-g");
    let (untouched, untouched_spec) = r.cache("never-written");
    let keytab = r.file("alice.keytab");
    let alice = r.principal("alice");
    let with_keytab = [
        ("sasl.kerberos.service.name", "kafka"),
        ("sasl.kerberos.keytab", keytab.as_str()),
        ("sasl.kerberos.principal", alice.as_str()),
    ];
    let consume = [
        "consume",
        "-t",
        &t,
        "--until-latest",
        "--store",
        "kafka",
        "-g",
        &group,
    ];
    let out = r.kdirect(&consume, &with_keytab, &untouched_spec, &[]);
    assert_eq!(ok_lines(&out), 300);
    assert!(
        !untouched.exists(),
        "a keytab login wrote the ticket cache {}",
        untouched.display()
    );
    // The group's offsets, as Kafka's own tool reads them (through the PLAINTEXT port).
    let describe = r.kafka.java(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            &r.kafka.bootstrap,
            "--describe",
            "--group",
            &group,
        ],
    );
    let committed: i64 = describe
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(t.as_str()))
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(committed, 300, "{describe}");

    // The ticket cache: kinit, then no keytab setting at all.
    let (_, cache) = r.cache("alice");
    r.kinit("alice", &cache, &[]);
    let out = r.kdirect(
        &["consume", "-t", &t, "--until-latest"],
        &[("sasl.kerberos.service.name", "kafka")],
        &cache,
        &[],
    );
    assert_eq!(ok_lines(&out), 300);
}

/// The usual mistakes, each one line naming the broker, the principal and the library's
/// words: a client principal the KDC does not know, a service name the KDC does not know, a
/// principal the keytab has no key for, no ticket cache, and no service name at all.
#[test]
fn gssapi_wrong_principals_and_missing_credentials_are_named() {
    let Some(r) = Realm::get("gssapi_wrong_principals_and_missing_credentials_are_named") else {
        return;
    };
    let (_, no_cache) = r.cache("none");
    let list = ["metadata"];
    let broker = format!(
        "SASL GSSAPI authentication with bootstrap broker {}",
        r.gssapi
    );
    let keytab = |user: &str| r.file(&format!("{user}.keytab"));

    let ghost = r.principal("ghost");
    let line = one_error_line(&r.kdirect(
        &list,
        &[
            ("sasl.kerberos.service.name", "kafka"),
            ("sasl.kerberos.keytab", &keytab("ghost")),
            ("sasl.kerberos.principal", &ghost),
        ],
        &no_cache,
        &[],
    ));
    for want in [
        broker.as_str(),
        "the KDC does not know this client principal",
        &format!("[{ghost}]"),
        "not found in Kerberos database",
        "minor -1765328378",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }

    let alice = r.principal("alice");
    let line = one_error_line(&r.kdirect(
        &list,
        &[
            ("sasl.kerberos.service.name", "kafka-nope"),
            ("sasl.kerberos.keytab", &keytab("alice")),
            ("sasl.kerberos.principal", &alice),
        ],
        &no_cache,
        &[],
    ));
    for want in [
        broker.as_str(),
        "does not know the broker's service principal",
        "[kafka-nope@localhost]",
        "kafka-nope/localhost@KDIRECT.TEST not found in Kerberos database",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }

    let bob = r.principal("bob");
    let line = one_error_line(&r.kdirect(
        &list,
        &[
            ("sasl.kerberos.service.name", "kafka"),
            ("sasl.kerberos.keytab", &keytab("alice")),
            ("sasl.kerberos.principal", &bob),
        ],
        &no_cache,
        &[],
    ));
    assert!(
        line.contains(&broker) && line.contains("the keytab has no key") && line.contains(&bob),
        "{line}"
    );

    let line = one_error_line(&r.kdirect(
        &list,
        &[("sasl.kerberos.service.name", "kafka")],
        &no_cache,
        &[],
    ));
    assert!(
        line.contains(&broker)
            && line.contains("no Kerberos credentials: run kinit")
            && line.contains(&format!("[ticket cache {no_cache}]")),
        "{line}"
    );

    // sasl.kerberos.principal without a keytab: the ticket cache must hold that principal.
    let (_, alices) = r.cache("alice");
    r.kinit("alice", &alices, &[]);
    let line = one_error_line(&r.kdirect(
        &list,
        &[
            ("sasl.kerberos.service.name", "kafka"),
            ("sasl.kerberos.principal", &bob),
        ],
        &alices,
        &[],
    ));
    assert!(
        line.contains(&broker)
            && line.contains("no Kerberos credentials: run kinit")
            && line.contains(&format!("[{bob}]")),
        "{line}"
    );

    let line = one_error_line(&r.kdirect(&list, &[], &no_cache, &[]));
    assert!(line.contains("needs sasl.kerberos.service.name"), "{line}");
}

/// A ticket that expired (kinit -l 2s, then a wait) is named as such, with what to do.
#[test]
fn gssapi_expired_ticket_is_named() {
    let Some(r) = Realm::get("gssapi_expired_ticket_is_named") else {
        return;
    };
    let (_, cache) = r.cache("brief");
    r.kinit("alice", &cache, &["-l", "2s"]);
    let issued = Instant::now();
    std::thread::sleep(Duration::from_secs(3).saturating_sub(issued.elapsed()));
    let line = one_error_line(&r.kdirect(
        &["metadata"],
        &[("sasl.kerberos.service.name", "kafka")],
        &cache,
        &[],
    ));
    for want in [
        "SASL GSSAPI authentication with bootstrap broker",
        "the Kerberos ticket has expired: run kinit again",
        &format!("[ticket cache {cache}]"),
        "Ticket expired",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
}

/// libfaketime's shared object, where Debian's `faketime` package puts it.
fn libfaketime() -> Option<PathBuf> {
    let lib = Path::new("/usr/lib");
    std::fs::read_dir(lib)
        .ok()?
        .filter_map(Result::ok)
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .chain([lib.join("faketime/libfaketime.so.1")])
        .find(|p| p.exists())
}

/// A clock 15 minutes ahead of the KDC's (the realm allows 5): with a ticket cache (the KDC
/// refuses the request for the service ticket) and with a keytab (it refuses the login's
/// pre-authentication), both named as clock skew; and with a cache that already holds the
/// broker's service ticket (from a run with the right time), where the broker is the one that
/// refuses, in Kafka's words for any failure, with the clock named as the likely cause.
#[test]
fn gssapi_clock_skew_is_named() {
    let Some(r) = Realm::get("gssapi_clock_skew_is_named") else {
        return;
    };
    let Some(faketime) = libfaketime() else {
        assert!(
            std::env::var_os("KDIRECT_REQUIRE_SERVICES").is_none_or(|v| v != "1"),
            "no libfaketime (tests/kerberos/kdc.sh installs Debian's faketime)"
        );
        println!("skipping gssapi_clock_skew_is_named: no libfaketime");
        return;
    };
    let faketime = faketime.to_str().unwrap();
    let skewed = [
        ("LD_PRELOAD", faketime),
        ("FAKETIME", "+15m"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let (_, cache) = r.cache("alice");
    r.kinit("alice", &cache, &[]);
    let (_, no_cache) = r.cache("none");
    let keytab = r.file("alice.keytab");
    let alice = r.principal("alice");
    for (settings, cache) in [
        (vec![("sasl.kerberos.service.name", "kafka")], &cache),
        (
            vec![
                ("sasl.kerberos.service.name", "kafka"),
                ("sasl.kerberos.keytab", keytab.as_str()),
                ("sasl.kerberos.principal", alice.as_str()),
            ],
            &no_cache,
        ),
    ] {
        let line = one_error_line(&r.kdirect(&["metadata"], &settings, cache, &skewed));
        for want in [
            "SASL GSSAPI authentication with bootstrap broker",
            "differ by more than the allowed skew",
            "Clock skew too great",
            "minor -1765328347",
        ] {
            assert!(line.contains(want), "{want}: {line}");
        }
    }

    // The service ticket in the cache first (the right time), then the skewed clock.
    let service = [("sasl.kerberos.service.name", "kafka")];
    let out = r.kdirect(&["metadata"], &service, &cache, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = one_error_line(&r.kdirect(&["metadata"], &service, &cache, &skewed));
    for want in [
        "SASL GSSAPI authentication with bootstrap broker",
        "invalid credentials",
        "the broker refused the Kerberos ticket: this host's clock may differ from the broker's",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
}

/// A KDC that accepts the connection and never answers: the connection fails within
/// request.timeout.ms (2 s here; MIT's own limit is about 25 s), naming the KDC as the likely
/// cause, and the process exits at once (the library call left behind does not hold it up).
#[test]
fn gssapi_silent_kdc_fails_within_the_request_timeout() {
    let Some(r) = Realm::get("gssapi_silent_kdc_fails_within_the_request_timeout") else {
        return;
    };
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let conf = std::fs::read_to_string(r.file("krb5.conf")).unwrap();
    let kdc = conf
        .lines()
        .find(|l| l.trim_start().starts_with("kdc = "))
        .expect("a kdc line in the realm's krb5.conf")
        .trim()
        .to_owned();
    let silent_conf = r.scratch.join("krb5-silent.conf");
    std::fs::write(
        &silent_conf,
        conf.replace(&kdc, &format!("kdc = 127.0.0.1:{port}")),
    )
    .unwrap();
    let (_, no_cache) = r.cache("none");
    let keytab = r.file("alice.keytab");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["metadata", "--request-timeout-ms", "2000", "-b", &r.gssapi])
        .args([
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanism=GSSAPI",
        ])
        .args(["-X", "sasl.kerberos.service.name=kafka"])
        .args(["-X", &format!("sasl.kerberos.keytab={keytab}")])
        .args([
            "-X",
            &format!("sasl.kerberos.principal={}", r.principal("alice")),
        ])
        .env("KRB5_CONFIG", &silent_conf)
        .env("KRB5CCNAME", &no_cache)
        .output()
        .unwrap();
    let took = started.elapsed();
    drop(silent);
    let line = one_error_line(&out);
    for want in [
        "SASL GSSAPI authentication with bootstrap broker",
        "no KDC could be reached",
        "did not finish within request.timeout.ms (2000 ms)",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
    assert!(took < Duration::from_secs(10), "took {took:?}: {line}");
}

/// `kdirect consume` paced to `per_batch` offsets a second (at most one batch a second), so
/// the run outlasts several GSSAPI sessions (3 s on the kerberos node) no matter how fast the
/// machine is, printing `partition offset` per record and the engine's connection log.
fn consume_paced(
    r: &Realm,
    t: &str,
    per_batch: u64,
    more: &[&str],
    settings: &[(&str, &str)],
    cache: &str,
) -> Output {
    let per_batch = per_batch.to_string();
    let mut args = vec![
        "consume",
        "-t",
        t,
        "--starting",
        "earliest",
        "--until-latest",
        "--trigger",
        "processing-time=1000",
        "--max-offsets-per-batch",
        &per_batch,
        "-f",
        "%p %o\n",
    ];
    args.extend_from_slice(more);
    r.kdirect(
        &args,
        settings,
        cache,
        &[("KDIRECT_LOG", "warn,kdirect_engine::conn=debug")],
    )
}

/// Checks that `out` printed every offset of `t` (3 partitions, `count` records) once.
fn every_offset_once(out: &Output, count: usize) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut seen = std::collections::BTreeMap::<i32, Vec<i64>>::new();
    for line in stdout.lines() {
        let (p, o) = line.split_once(' ').expect("partition offset");
        seen.entry(p.parse().unwrap())
            .or_default()
            .push(o.parse().unwrap());
    }
    let mut total = 0;
    for (p, offsets) in &seen {
        let want: Vec<i64> = (0..offsets.len() as i64).collect();
        let mut sorted = offsets.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, want, "partition {p}: every offset from 0, once");
        total += offsets.len();
    }
    assert_eq!(total, count, "{stderr}");
}

/// What the engine's connection log (`KDIRECT_LOG=kdirect_engine::conn=debug`) says about
/// SASL sessions: how many connections authenticated, and the re-authentications in place of
/// each, by the connection's local address.
struct Sessions {
    opened: Vec<String>,
    reauthenticated: std::collections::BTreeMap<String, usize>,
}

fn sessions(out: &Output) -> Sessions {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let from = |line: &str| {
        let rest = line.split("connection from ").nth(1)?;
        let end = rest.find([',', ')'])?;
        Some(rest[..end].to_owned())
    };
    let mut s = Sessions {
        opened: Vec::new(),
        reauthenticated: Default::default(),
    };
    for line in stderr.lines() {
        if line.contains("SASL GSSAPI: re-authenticated with") {
            *s.reauthenticated
                .entry(from(line).expect(line))
                .or_default() += 1;
        } else if line.contains("SASL GSSAPI: authenticated with") {
            s.opened.push(from(line).expect(line));
        }
    }
    for conn in s.reauthenticated.keys() {
        assert!(s.opened.contains(conn), "{conn} re-authenticated: {stderr}");
    }
    s
}

/// KIP-368 over GSSAPI: the kerberos node's GSSAPI sessions last 3 s
/// (`listener.name.sasl_plaintext.gssapi.connections.max.reauth.ms`), after which the broker
/// closes a connection at its next request. A consumer paced over about five sessions (with a
/// group whose offsets the coordinator commits, over GSSAPI too) re-authenticates its
/// connections in place — SaslHandshake and a new GSS context on the same connection — reads
/// every offset once, and opens fewer connections than it re-authenticates (renewing by
/// reconnecting would open one per session).
#[test]
fn gssapi_sessions_are_reauthenticated_in_place_while_consuming() {
    let Some(r) = Realm::get("gssapi_sessions_are_reauthenticated_in_place_while_consuming") else {
        return;
    };
    let t = r.topic_with("gssapi-reauth", 450);
    let (_, no_cache) = r.cache("none");
    let keytab = r.file("alice.keytab");
    let alice = r.principal("alice");
    let group = format!("{t}-g");
    let out = consume_paced(
        &r,
        &t,
        30,
        &["--store", "kafka", "-g", &group],
        &[
            ("sasl.kerberos.service.name", "kafka"),
            ("sasl.kerberos.keytab", keytab.as_str()),
            ("sasl.kerberos.principal", alice.as_str()),
        ],
        &no_cache,
    );
    every_offset_once(&out, 450);
    let s = sessions(&out);
    let most = s.reauthenticated.values().copied().max().unwrap_or(0);
    let total: usize = s.reauthenticated.values().sum();
    assert!(
        most >= 3,
        "one connection re-authenticated at least 3 times: {:?} (opened {:?})",
        s.reauthenticated,
        s.opened
    );
    assert!(
        s.opened.len() < total,
        "sessions were renewed in place, not by new connections: opened {:?}, \
         re-authenticated {:?}",
        s.opened,
        s.reauthenticated
    );

    // With the ticket cache kinit filled (each re-authentication takes a new service ticket
    // or the cached one, and a new context).
    let (_, cache) = r.cache("alice");
    r.kinit("alice", &cache, &[]);
    let out = consume_paced(
        &r,
        &t,
        90,
        &[],
        &[("sasl.kerberos.service.name", "kafka")],
        &cache,
    );
    every_offset_once(&out, 450);
    assert!(!sessions(&out).reauthenticated.is_empty());
}

/// How many TGTs the KDC issued to `principal` (its log's AS_REQ lines).
fn tgts_issued(r: &Realm, principal: &str) -> usize {
    let log = std::fs::read_to_string(r.file("kdc.log")).unwrap_or_default();
    let tgt = format!("{principal} for krbtgt/");
    log.lines()
        .filter(|l| l.contains("AS_REQ") && l.contains("ISSUE") && l.contains(&tgt))
        .count()
}

/// A keytab login outlives its tickets: `brief`'s tickets last 20 s (its max life in the
/// KDC), and a consumer paced over more than two of those lifetimes re-authenticates every
/// 3 s with tickets the library gets anew from the keytab (as the Java client's
/// Krb5LoginModule re-login, or `kinit -kt`): every offset once, no Kerberos error, and the
/// KDC issued more than one TGT to `brief` during the run. (MIT asks for a new TGT when the
/// cached one ends within 30 s, so with 20-second tickets it does at every authentication;
/// with longer ones, after half their lifetime.)
#[test]
fn gssapi_keytab_login_outlives_its_tickets() {
    let Some(r) = Realm::get("gssapi_keytab_login_outlives_its_tickets") else {
        return;
    };
    let t = r.topic_with("gssapi-relogin", 1350);
    let (_, no_cache) = r.cache("none");
    let keytab = r.file("brief.keytab");
    let brief = r.principal("brief");
    let before = tgts_issued(&r, &brief);
    // 45 batches of 30 offsets, at most one a second: more than two 20-second lifetimes.
    let out = consume_paced(
        &r,
        &t,
        30,
        &[],
        &[
            ("sasl.kerberos.service.name", "kafka"),
            ("sasl.kerberos.keytab", keytab.as_str()),
            ("sasl.kerberos.principal", brief.as_str()),
        ],
        &no_cache,
    );
    every_offset_once(&out, 1350);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("expired"), "{stderr}");
    let s = sessions(&out);
    assert!(
        s.reauthenticated.values().copied().max().unwrap_or(0) >= 10,
        "{:?}",
        s.reauthenticated
    );
    let issued = tgts_issued(&r, &brief) - before;
    assert!(
        issued >= 2,
        "the KDC issued {issued} TGTs to {brief} over more than two ticket lifetimes"
    );
}

/// A ticket cache without a keytab cannot outlive its ticket: kinit for 8 s, then a consumer
/// paced over 15 s. Its connections re-authenticate every 3 s until the ticket has expired;
/// the next re-authentication fails with the typed error, one line saying to run kinit again,
/// after the records read so far (no retry loop on an error only the user can fix).
#[test]
fn gssapi_ticket_cache_expiring_mid_run_is_named() {
    let Some(r) = Realm::get("gssapi_ticket_cache_expiring_mid_run_is_named") else {
        return;
    };
    let t = r.topic_with("gssapi-expiring", 450);
    let (_, cache) = r.cache("brief");
    r.kinit("alice", &cache, &["-l", "8s"]);
    let out = consume_paced(
        &r,
        &t,
        30,
        &[],
        &[("sasl.kerberos.service.name", "kafka")],
        &cache,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let read = String::from_utf8_lossy(&out.stdout).lines().count();
    assert!(read < 450, "read {read} records: {stderr}");
    let last = stderr
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or_default();
    for want in [
        "SASL GSSAPI authentication with",
        "the Kerberos ticket has expired: run kinit again",
        &format!("[ticket cache {cache}]"),
    ] {
        assert!(last.contains(want), "{want}: {last}\n{stderr}");
    }
}
