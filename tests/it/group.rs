//! Consumer groups against Apache Kafka: kdirect processes (and a Java `KafkaConsumer`) sharing
//! a topic through the group coordinator — members killed with SIGKILL, stopped cleanly and
//! added at random moments while Kafka's Java producer keeps writing, with every offset once in
//! a PostgreSQL sink table; a mixed kdirect + Java group; static membership; the
//! `max.poll.interval.ms` rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kdirect::{DirectStream, ErrorKind, StartPolicy};

use crate::real_kafka::{topic, Kafka};
use crate::support::{rt, service, tempdir, wait_until};

pub(crate) fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status();
}

/// A `kdirect consume` group member writing "partition offset" lines to `out` (unless `extra`
/// names a sink table) and its stderr to `log`.
fn member(
    kafka: &Kafka,
    topic: &str,
    group: &str,
    out: &Path,
    log: &Path,
    extra: &[&str],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let output: Vec<&str> = if extra.contains(&"--sink-table") {
        Vec::new()
    } else {
        vec!["-f", "%p %o\n", "--output", out.to_str().unwrap()]
    };
    let session: &[&str] = if extra.contains(&"--session-timeout-ms") {
        &[]
    } else {
        &["--session-timeout-ms", "6000"]
    };
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["consume", "-b", &kafka.bootstrap, "-t", topic, "-G", group])
        .args(["--starting", "earliest", "--max-offsets-per-batch", "200"])
        .args(session)
        .args(["-X", "heartbeat.interval.ms=500"])
        .args(output)
        .args(extra)
        .env("KDIRECT_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// "partition offset" lines, counted.
fn pairs(paths: &[PathBuf]) -> BTreeMap<(i32, i64), u32> {
    let mut seen = BTreeMap::new();
    for p in paths {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        for line in text.lines() {
            let mut it = line.split(' ');
            let (Some(p), Some(o)) = (it.next(), it.next()) else {
                continue;
            };
            if let (Ok(p), Ok(o)) = (p.parse(), o.parse()) {
                *seen.entry((p, o)).or_insert(0) += 1;
            }
        }
    }
    seen
}

/// Kafka's own view of the group: (client id, number of partitions) per member, from
/// `kafka-consumer-groups --describe --members`.
fn described_members(kafka: &Kafka, group: &str) -> Vec<(String, usize)> {
    let out = Command::new("java")
        .args(["-Xmx256m", "-XX:+UseSerialGC", "-cp"])
        .arg(std::env::var("KDIRECT_TEST_KAFKA_CP").unwrap())
        .arg("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
        .args([
            "--bootstrap-server",
            &kafka.bootstrap,
            "--describe",
            "--members",
        ])
        .args(["--group", group])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS …: the instance id
    // column is there only when a member is static.
    let Some(header) = text.lines().find(|l| l.contains("CONSUMER-ID")) else {
        return Vec::new();
    };
    let names: Vec<&str> = header.split_whitespace().collect();
    let col = |name: &str| names.iter().position(|n| *n == name);
    let (Some(client), Some(parts)) = (col("CLIENT-ID"), col("#PARTITIONS")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() <= parts || cols[0] != group {
                return None;
            }
            Some((cols[client].to_owned(), cols[parts].parse().ok()?))
        })
        .collect()
}

/// A kdirect member and a Java `KafkaConsumer` (range assignor) in one group split the
/// partitions, Kafka's tool lists both, and together they read every record exactly once
/// (both commit after each batch, and the handovers are clean).
#[test]
fn a_kdirect_member_and_a_java_consumer_share_a_group() {
    mixed_group(
        "a_kdirect_member_and_a_java_consumer_share_a_group",
        "classic",
    );
}

/// The same with KIP-848's consumer protocol on both sides (the coordinator's uniform
/// assignor): a kdirect member and a Java `KafkaConsumer` with `group.protocol=consumer` share
/// one group, each holding 3 of 6 partitions, and together read every record exactly once.
#[test]
fn a_kdirect_and_a_java_consumer_protocol_member_share_a_group() {
    mixed_group(
        "a_kdirect_and_a_java_consumer_protocol_member_share_a_group",
        "consumer",
    );
}

fn mixed_group(test: &str, protocol: &str) {
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("mixed");
    let group = format!("{t}-g");
    kafka.create(&t, 6, &[]);
    kafka.produce(&t, 6, 600, &[]);
    let dir = tempdir("mixed");
    let (j_out, j_log, stop) = (dir.join("java.out"), dir.join("java.log"), dir.join("stop"));
    let (k_out, k_log) = (dir.join("kdirect.out"), dir.join("kdirect.log"));
    let mut java = kafka
        .tool_command("group-consume")
        .args([
            "--topic",
            &t,
            "--group",
            &group,
            "--group-protocol",
            protocol,
        ])
        .args([
            "--out",
            j_out.to_str().unwrap(),
            "--stop",
            stop.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&j_log).unwrap())
        .spawn()
        .unwrap();
    let mut kd = member(
        &kafka,
        &t,
        &group,
        &k_out,
        &k_log,
        &["--group-protocol", protocol],
    );
    wait_until(
        Duration::from_secs(90),
        "both members hold 3 partitions",
        || {
            let m = described_members(&kafka, &group);
            m.len() == 2 && m.iter().all(|(_, n)| *n == 3)
        },
    );
    let m = described_members(&kafka, &group);
    assert!(m.iter().any(|(c, _)| c == "kdirect"), "{m:?}");
    assert!(m.iter().any(|(c, _)| c.starts_with("consumer-")), "{m:?}");
    // Records written while both are members go to both.
    kafka.produce(&t, 6, 6000, &["--from", "600"]);
    let ends = kafka.end_offsets(&t);
    let total: i64 = ends.iter().sum();
    let files = [j_out.clone(), k_out.clone()];
    wait_until(Duration::from_secs(120), "every record was read", || {
        pairs(&files).len() as i64 == total
    });
    std::fs::write(&stop, b"").unwrap();
    signal(&kd, "-TERM");
    assert!(kd.wait().unwrap().success());
    assert!(java.wait().unwrap().success());
    let seen = pairs(&files);
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            assert_eq!(
                seen.get(&(p as i32, o)),
                Some(&1),
                "partition {p} offset {o}"
            );
        }
    }
    let k = pairs(&[k_out]).len();
    let j = pairs(&[j_out]).len();
    assert!(k > 0 && j > 0, "kdirect read {k}, Java read {j}");
    println!("{test}: kdirect read {k} records, Java {j}");
}

/// The cooperative protocol (KIP-429): a kdirect member and a Java consumer, both with
/// cooperative-sticky only. When the Java consumer joins, the kdirect member gives up only the
/// partitions that move (3 of 6), not all of them, and together they read every record once.
#[test]
fn a_cooperative_group_moves_only_what_it_must() {
    let test = "a_cooperative_group_moves_only_what_it_must";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("coop");
    let group = format!("{t}-g");
    kafka.create(&t, 6, &[]);
    kafka.produce(&t, 6, 600, &[]);
    let dir = tempdir("coop");
    let (j_out, j_log, stop) = (dir.join("java.out"), dir.join("java.log"), dir.join("stop"));
    let (k_out, k_log) = (dir.join("kdirect.out"), dir.join("kdirect.log"));
    let mut kd = member(
        &kafka,
        &t,
        &group,
        &k_out,
        &k_log,
        &["--assignor", "cooperative-sticky"],
    );
    wait_until(
        Duration::from_secs(60),
        "kdirect holds all 6 partitions",
        || described_members(&kafka, &group) == [("kdirect".to_owned(), 6)],
    );
    let mut java = kafka
        .tool_command("group-consume")
        .args([
            "--topic",
            &t,
            "--group",
            &group,
            "--assignor",
            "cooperative-sticky",
        ])
        .args([
            "--out",
            j_out.to_str().unwrap(),
            "--stop",
            stop.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&j_log).unwrap())
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(90),
        "both members hold 3 partitions",
        || {
            let m = described_members(&kafka, &group);
            m.len() == 2 && m.iter().all(|(_, n)| *n == 3)
        },
    );
    kafka.produce(&t, 6, 6000, &["--from", "600"]);
    let ends = kafka.end_offsets(&t);
    let total: i64 = ends.iter().sum();
    let files = [j_out.clone(), k_out.clone()];
    wait_until(Duration::from_secs(120), "every record was read", || {
        pairs(&files).len() as i64 == total
    });
    std::fs::write(&stop, b"").unwrap();
    signal(&kd, "-TERM");
    assert!(kd.wait().unwrap().success());
    assert!(java.wait().unwrap().success());
    let seen = pairs(&files);
    assert!(seen.values().all(|n| *n == 1), "a record read twice");
    assert_eq!(seen.len() as i64, total);
    let log = std::fs::read_to_string(&k_log).unwrap();
    let revoked: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("kdirect: group") && l.contains(": revoked "))
        .collect();
    let first = revoked.first().expect("the kdirect member revoked nothing");
    let list = first.split(": revoked ").nth(1).unwrap();
    assert_eq!(list.split(", ").count(), 3, "{first}");
}

/// Where the chaos members put what they read.
enum Sink {
    /// A PostgreSQL sink table, in the offsets' transaction: exactly-once.
    Postgres(String),
    /// "partition offset" files, one per member slot, offsets in Kafka: at-least-once.
    KafkaFiles,
}

/// Three kdirect members on a 12-partition topic while Kafka's Java producer keeps writing;
/// members are SIGKILLed, stopped with SIGTERM and added at random moments; then every member
/// slot is filled again until everything written was read. Returns what was read, counted,
/// and each partition's end.
fn chaos(
    test: &str,
    kafka: &Kafka,
    sink: &Sink,
    protocol: &str,
) -> (BTreeMap<(i32, i64), u32>, Vec<i64>) {
    const PARTITIONS: i32 = 12;
    let t = topic("grpkill");
    let table = t.replace('-', "_");
    kafka.create(&t, PARTITIONS, &[]);
    kafka.produce(&t, PARTITIONS, 12_000, &["--value-size", "80"]);
    let dir = tempdir("grpkill");
    let mut extra: Vec<&str> = match sink {
        Sink::Postgres(url) => vec!["--store", url.as_str(), "--sink-table", table.as_str()],
        Sink::KafkaFiles => Vec::new(),
    };
    extra.extend(["--group-protocol", protocol]);
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("m{i}.out"))).collect();
    let spawn = |i: usize| {
        member(
            kafka,
            &t,
            &table,
            &outs[i],
            &dir.join(format!("m{i}.log")),
            &extra,
        )
    };
    let mut producer = kafka
        .tool_command("produce")
        .args(["--topic", &t, "--partitions", &PARTITIONS.to_string()])
        .args(["--from", "12000", "--value-size", "80", "--keep-going"])
        .args(["--linger-ms", "50", "--rate", "3000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut slots: Vec<Option<Child>> = (0..3).map(|i| Some(spawn(i))).collect();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("{test}: seed {seed}; logs in {}", dir.display());
    let mut rng = seed | 1;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let (mut kills, mut stops, mut joins) = (0, 0, 0);
    let chaos_until = Instant::now() + Duration::from_secs(45);
    while Instant::now() < chaos_until || kills < 4 || stops < 2 || joins < 4 {
        assert!(
            Instant::now() < chaos_until + Duration::from_secs(60),
            "chaos did not reach its counts: {kills} kills, {stops} stops, {joins} joins"
        );
        // The random moment of the next change: the thing under test, not a wait.
        std::thread::sleep(Duration::from_millis(800 + next(3000)));
        let i = next(3) as usize;
        let running = slots.iter().filter(|s| s.is_some()).count();
        // A coin decides between a SIGKILL and a clean stop; once the chaos time is over, the
        // one still short of its count (a run of the coin once gave 3 kills in 17).
        let overtime = Instant::now() >= chaos_until;
        let kill = if overtime && kills < 4 {
            true
        } else if overtime && stops < 2 {
            false
        } else {
            next(2) == 0
        };
        match slots[i].take() {
            Some(mut c) if running > 1 => {
                if kill {
                    c.kill().unwrap(); // SIGKILL
                    c.wait().unwrap();
                    kills += 1;
                } else {
                    signal(&c, "-TERM");
                    let st = c.wait().unwrap();
                    assert!(
                        st.success() || st.code().is_none(),
                        "member {i} exited {st}"
                    );
                    stops += 1;
                }
            }
            Some(c) => slots[i] = Some(c),
            None => {
                slots[i] = Some(spawn(i));
                joins += 1;
            }
        }
    }
    println!("{test}: {kills} SIGKILLs, {stops} clean stops, {joins} joins");
    producer.kill().unwrap();
    producer.wait().unwrap();
    for (i, s) in slots.iter_mut().enumerate() {
        if s.is_none() {
            *s = Some(spawn(i));
        }
    }
    let ends = kafka.end_offsets(&t);
    let total: i64 = ends.iter().sum();
    let rt = rt();
    let pool = match sink {
        Sink::Postgres(url) => {
            sqlx::any::install_default_drivers();
            Some(rt.block_on(sqlx::AnyPool::connect(url)).unwrap())
        }
        Sink::KafkaFiles => None,
    };
    let read = || match &pool {
        Some(pool) => {
            let q = format!("SELECT partition_id, record_offset FROM {table}");
            let rows = rt.block_on(async {
                sqlx::query_as::<_, (i32, i64)>(&q)
                    .fetch_all(pool)
                    .await
                    .unwrap_or_default()
            });
            let mut seen: BTreeMap<(i32, i64), u32> = BTreeMap::new();
            for r in rows {
                *seen.entry(r).or_default() += 1;
            }
            seen
        }
        None => pairs(&outs),
    };
    wait_until(Duration::from_secs(240), "every offset was read", || {
        read().len() as i64 >= total
    });
    for s in slots.iter_mut().flatten() {
        signal(s, "-TERM");
    }
    for s in slots.iter_mut().flatten() {
        assert!(s.wait().unwrap().success(), "a member failed to stop");
    }
    let seen = read();
    if let Some(pool) = &pool {
        rt.block_on(async {
            sqlx::query(&format!("DROP TABLE {table}"))
                .execute(pool)
                .await
                .unwrap();
        });
    }
    (seen, ends)
}

/// The chaos run with a PostgreSQL sink table: every offset exactly once. A member's records
/// and positions commit in one transaction, and the compare-and-set on each range's start
/// refuses a member that lost the partition.
#[test]
fn members_killed_stopped_and_added_exactly_once_in_postgres() {
    let test = "members_killed_stopped_and_added_exactly_once_in_postgres";
    let Some(url) = service("KDIRECT_TEST_POSTGRES", test) else {
        return;
    };
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let (seen, ends) = chaos(test, &kafka, &Sink::Postgres(url), "classic");
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            assert_eq!(
                seen.get(&(p as i32, o)),
                Some(&1),
                "partition {p} offset {o}"
            );
        }
    }
    assert_eq!(
        seen.len() as i64,
        ends.iter().sum::<i64>(),
        "offsets past the ends"
    );
}

/// The chaos run with the group's offsets in Kafka and files: every offset at least once
/// (a batch written and not committed before a SIGKILL is read again by the next owner).
#[test]
fn members_killed_stopped_and_added_lose_nothing_with_kafka_offsets() {
    let test = "members_killed_stopped_and_added_lose_nothing_with_kafka_offsets";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let (seen, ends) = chaos(test, &kafka, &Sink::KafkaFiles, "classic");
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            assert!(
                seen.contains_key(&(p as i32, o)),
                "partition {p} offset {o} lost"
            );
        }
    }
    let again = seen.values().filter(|n| **n > 1).count();
    println!(
        "{test}: {} offsets, {again} read more than once",
        seen.len()
    );
}

/// The chaos run with KIP-848's consumer protocol and a PostgreSQL sink table: every offset
/// exactly once. A SIGKILLed member's partitions wait for the coordinator's session timeout
/// (group.consumer.session.timeout.ms, 45 s by default), then move; a stopped member leaves
/// with epoch -1 and its partitions move at once.
#[test]
fn consumer_protocol_members_killed_stopped_and_added_exactly_once_in_postgres() {
    let test = "consumer_protocol_members_killed_stopped_and_added_exactly_once_in_postgres";
    let Some(url) = service("KDIRECT_TEST_POSTGRES", test) else {
        return;
    };
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let (seen, ends) = chaos(test, &kafka, &Sink::Postgres(url), "consumer");
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            assert_eq!(
                seen.get(&(p as i32, o)),
                Some(&1),
                "partition {p} offset {o}"
            );
        }
    }
    assert_eq!(
        seen.len() as i64,
        ends.iter().sum::<i64>(),
        "offsets past the ends"
    );
}

/// Two kdirect members with `group.protocol=consumer` on a 6-partition topic: the coordinator
/// splits it 3 and 3 (Kafka's own tool says so), they read every record exactly once into a
/// PostgreSQL sink table; when one stops (a leave heartbeat, epoch -1) the other reconciles to
/// all 6 and reads what is written next, still once each.
#[test]
fn consumer_protocol_members_split_a_topic_exactly_once_in_postgres() {
    let test = "consumer_protocol_members_split_a_topic_exactly_once_in_postgres";
    let Some(url) = service("KDIRECT_TEST_POSTGRES", test) else {
        return;
    };
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("kip848");
    let table = t.replace('-', "_");
    let group = format!("{t}-g");
    kafka.create(&t, 6, &[]);
    kafka.produce(&t, 6, 600, &[]);
    let dir = tempdir("kip848");
    let extra = [
        "--group-protocol",
        "consumer",
        "--store",
        url.as_str(),
        "--sink-table",
        table.as_str(),
    ];
    let spawn = |n: &str| {
        member(
            &kafka,
            &t,
            &group,
            &dir.join(format!("{n}.out")),
            &dir.join(format!("{n}.log")),
            &extra,
        )
    };
    let mut a = spawn("a");
    let mut b = spawn("b");
    wait_until(
        Duration::from_secs(90),
        "both members hold 3 partitions",
        || {
            let m = described_members(&kafka, &group);
            m.len() == 2 && m.iter().all(|(c, n)| c == "kdirect" && *n == 3)
        },
    );
    kafka.produce(&t, 6, 3000, &["--from", "600"]);
    let rt = rt();
    sqlx::any::install_default_drivers();
    let pool = rt.block_on(sqlx::AnyPool::connect(&url)).unwrap();
    let read = || {
        let q = format!("SELECT partition_id, record_offset FROM {table}");
        let rows = rt.block_on(async {
            sqlx::query_as::<_, (i32, i64)>(&q)
                .fetch_all(&pool)
                .await
                .unwrap_or_default()
        });
        let mut seen: BTreeMap<(i32, i64), u32> = BTreeMap::new();
        for r in rows {
            *seen.entry(r).or_default() += 1;
        }
        seen
    };
    wait_until(Duration::from_secs(120), "every record was read", || {
        read().len() == 3600
    });
    signal(&b, "-TERM");
    assert!(b.wait().unwrap().success());
    wait_until(Duration::from_secs(60), "a holds all 6 partitions", || {
        described_members(&kafka, &group) == [("kdirect".to_owned(), 6)]
    });
    kafka.produce(&t, 6, 1200, &["--from", "3600"]);
    wait_until(Duration::from_secs(120), "every record was read", || {
        read().len() == 4800
    });
    signal(&a, "-TERM");
    assert!(a.wait().unwrap().success());
    let seen = read();
    let ends = kafka.end_offsets(&t);
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            assert_eq!(
                seen.get(&(p as i32, o)),
                Some(&1),
                "partition {p} offset {o}"
            );
        }
    }
    assert_eq!(seen.len() as i64, ends.iter().sum::<i64>());
    let a_log = std::fs::read_to_string(dir.join("a.log")).unwrap();
    assert!(
        a_log.lines().any(|l| l.contains(": assigned ")),
        "a logged no assignment: {a_log}"
    );
    rt.block_on(async {
        sqlx::query(&format!("DROP TABLE {table}"))
            .execute(&pool)
            .await
            .unwrap();
    });
}

/// A broker that does not speak the consumer protocol (Kafka 3.9.1 with its default
/// group.coordinator.rebalance.protocols: it lists ConsumerGroupHeartbeat v0 and answers it
/// UNSUPPORTED_VERSION) fails the stream with one line that names the API, the code and the
/// way out (group.protocol=classic).
#[test]
fn the_consumer_protocol_on_a_broker_without_it_fails_in_one_clear_line() {
    let test = "the_consumer_protocol_on_a_broker_without_it_fails_in_one_clear_line";
    let Some(kafka) = Kafka::old(test) else {
        return;
    };
    let t = topic("kip848old");
    kafka.create(&t, 2, &[]);
    rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .group(&format!("{t}-g"))
            .subscribe(&[&t])
            .set("group.protocol", "consumer")
            .unwrap()
            .build()
            .await
            .unwrap();
        let e = s.next_batch().await.unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        for words in [
            "ConsumerGroupHeartbeat",
            "UNSUPPORTED_VERSION",
            "group.protocol=classic",
        ] {
            assert!(e.contains(words), "{words}: {e}");
        }
    });
}

/// The generation in a member's last "assigned" line, and what it was assigned.
fn last_assignment(log: &Path) -> Option<(i32, String)> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().rev().find(|l| l.contains(": assigned "))?;
    let generation = line
        .split("generation ")
        .nth(1)?
        .split(',')
        .next()?
        .parse()
        .ok()?;
    Some((generation, line.split(": assigned ").nth(1)?.to_owned()))
}

/// Static membership (KIP-345): a member SIGKILLed and restarted with the same
/// group.instance.id within session.timeout.ms gets its partitions back in the same
/// generation; the other member sees no rebalance.
#[test]
fn a_static_member_restarted_within_the_session_moves_nothing() {
    let test = "a_static_member_restarted_within_the_session_moves_nothing";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("static");
    let group = format!("{t}-g");
    kafka.create(&t, 4, &[]);
    kafka.produce(&t, 4, 400, &[]);
    let dir = tempdir("static");
    let log = |n: &str| dir.join(format!("{n}.log"));
    let out = |n: &str| dir.join(format!("{n}.out"));
    let start = |n: &str| {
        member(
            &kafka,
            &t,
            &group,
            &out(n),
            &log(n),
            &["--group-instance-id", n, "--session-timeout-ms", "30000"],
        )
    };
    let mut a = start("a");
    wait_until(Duration::from_secs(60), "a is assigned", || {
        last_assignment(&log("a")).is_some()
    });
    let mut b = start("b");
    wait_until(
        Duration::from_secs(60),
        "a and b split the partitions",
        || {
            let m = described_members(&kafka, &group);
            m.len() == 2 && m.iter().all(|(_, n)| *n == 2)
        },
    );
    wait_until(
        Duration::from_secs(30),
        "both logged the generation",
        || {
            matches!(
                (last_assignment(&log("a")), last_assignment(&log("b"))),
                (Some((ga, _)), Some((gb, _))) if ga == gb
            )
        },
    );
    let (generation, a_parts) = last_assignment(&log("a")).unwrap();
    let b_lines = std::fs::read_to_string(log("b")).unwrap().lines().count();
    a.kill().unwrap(); // SIGKILL: no LeaveGroup
    a.wait().unwrap();
    std::fs::write(log("a"), b"").unwrap();
    let mut a = start("a");
    wait_until(Duration::from_secs(30), "a is back", || {
        last_assignment(&log("a")).is_some()
    });
    let (generation2, a_parts2) = last_assignment(&log("a")).unwrap();
    assert_eq!(generation2, generation, "a's restart started a rebalance");
    assert_eq!(a_parts2, a_parts);
    // Records written now reach both; b never gave anything up.
    kafka.produce(&t, 4, 400, &["--from", "400"]);
    let files = [out("a"), out("b")];
    wait_until(Duration::from_secs(60), "every record was read", || {
        pairs(&files).len() == 800
    });
    let b_log = std::fs::read_to_string(log("b")).unwrap();
    let after: Vec<&str> = b_log.lines().skip(b_lines).collect();
    assert!(
        !after
            .iter()
            .any(|l| l.contains("revoked") || l.contains(": assigned ")),
        "b saw a rebalance: {after:?}"
    );
    for c in [&mut a, &mut b] {
        signal(c, "-TERM");
        assert!(c.wait().unwrap().success());
    }
}

/// A batch held longer than max.poll.interval.ms: the member leaves the group, the commit is
/// refused (NotAMember, naming the setting), and the next batch rejoins and re-reads the same
/// offsets from the store.
#[test]
fn a_batch_held_past_max_poll_interval_is_not_committed() {
    held_past_max_poll(
        "a_batch_held_past_max_poll_interval_is_not_committed",
        "classic",
    );
}

/// The same with KIP-848's consumer protocol: the member leaves with epoch -1 (its partitions
/// are lost), the commit that comes after is refused, and the next batch rejoins with epoch 0
/// and re-reads the same offsets.
#[test]
fn a_consumer_protocol_batch_held_past_max_poll_interval_is_not_committed() {
    held_past_max_poll(
        "a_consumer_protocol_batch_held_past_max_poll_interval_is_not_committed",
        "consumer",
    );
}

fn held_past_max_poll(test: &str, protocol: &str) {
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("maxpoll");
    kafka.create(&t, 2, &[]);
    kafka.produce(&t, 2, 1000, &[]);
    rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .group(&format!("{t}-g"))
            .subscribe(&[&t])
            .start(StartPolicy::Earliest)
            .max_offsets_per_trigger(100)
            .set("max.poll.interval.ms", "2000")
            .unwrap()
            .set("heartbeat.interval.ms", "200")
            .unwrap()
            .set("session.timeout.ms", "6000")
            .unwrap()
            .set("group.protocol", protocol)
            .unwrap()
            .build()
            .await
            .unwrap();
        let b1 = s.next_batch().await.unwrap().unwrap();
        let after_b1: BTreeMap<_, _> = b1
            .ranges()
            .iter()
            .map(|r| (r.topic_partition(), r.until))
            .collect();
        s.commit(b1).await.unwrap();
        let b2 = s.next_batch().await.unwrap().unwrap();
        let b2_ranges = b2.ranges().to_vec();
        // Holding the batch past max.poll.interval.ms is what is under test.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let e = s.commit(b2).await.unwrap_err();
        assert!(
            matches!(e.engine_kind(), Some(ErrorKind::NotAMember { .. })),
            "{e}"
        );
        assert!(e.is_fenced() && !e.is_retriable(), "{e}");
        assert!(e.to_string().contains("max.poll.interval.ms"), "{e}");
        let b3 = s.next_batch().await.unwrap().unwrap();
        for r in b3.ranges().iter().filter(|r| !r.is_empty()) {
            let tp = r.topic_partition();
            assert_eq!(Some(&r.from), after_b1.get(&tp).or(Some(&0)), "{r:?}");
        }
        assert!(
            b3.ranges().iter().any(|r| b2_ranges
                .iter()
                .any(|r2| r2.topic_partition() == r.topic_partition()
                    && r2.from == r.from
                    && !r.is_empty())),
            "b2's offsets are read again: {b2_ranges:?} then {:?}",
            b3.ranges()
        );
        s.commit(b3).await.unwrap();
        s.close().await.unwrap();
    });
}

/// Chunked: `max.poll.interval.ms` counts from each chunk asked for, as from each poll of the
/// Java consumer, not from the batch's first chunk. A batch read chunk by chunk for longer
/// than the interval, each chunk within it, commits; counted from the first chunk, the member
/// left the group halfway and the commit was refused (issue 32, the chunked batches' review).
#[test]
fn a_chunked_batch_read_past_max_poll_interval_chunk_by_chunk_commits() {
    let Some(kafka) =
        Kafka::single("a_chunked_batch_read_past_max_poll_interval_chunk_by_chunk_commits")
    else {
        return;
    };
    let t = topic("maxpollchunk");
    kafka.create(&t, 2, &[]);
    kafka.produce(
        &t,
        2,
        1000,
        &["--value-size", "1000", "--batch-size", "16384"],
    );
    rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .group(&format!("{t}-g"))
            .subscribe(&[&t])
            .start(StartPolicy::Earliest)
            .chunked(true)
            .memory_budget(256 << 10)
            .max_offsets_per_trigger(2000)
            .set("max.poll.interval.ms", "2000")
            .unwrap()
            .set("heartbeat.interval.ms", "200")
            .unwrap()
            .set("session.timeout.ms", "6000")
            .unwrap()
            .build()
            .await
            .unwrap();
        let mut b = s.next_batch().await.unwrap().unwrap();
        let (mut records, mut chunks) = (0u64, 1u32);
        loop {
            b.for_each_record(|_, _| records += 1).unwrap();
            // Work on each chunk for 0.7 s: the batch takes longer than the interval.
            tokio::time::sleep(Duration::from_millis(700)).await;
            if !s.next_chunk(&mut b).await.unwrap() {
                break;
            }
            chunks += 1;
        }
        assert_eq!(records, 1000, "the 1,000 records written");
        assert!(
            chunks >= 4,
            "the premise: {chunks} chunks of 0.7 s each outlast the 2 s interval"
        );
        s.commit(b).await.unwrap();
        s.close().await.unwrap();
    });
}

/// A member on a current-thread runtime whose thread is busy with a batch for longer than
/// `session.timeout.ms` (processing that does not yield, within `max.poll.interval.ms`) stays in
/// the group: its heartbeats go on from kdirect's network thread, as the Java consumer's go on
/// from its heartbeat thread. The batch then commits, and the next batch follows it.
#[test]
fn a_member_busy_with_a_batch_past_the_session_timeout_stays_in_the_group() {
    let Some(kafka) =
        Kafka::single("a_member_busy_with_a_batch_past_the_session_timeout_stays_in_the_group")
    else {
        return;
    };
    let t = topic("busy");
    kafka.create(&t, 2, &[]);
    kafka.produce(&t, 2, 1000, &[]);
    crate::support::current_thread_rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .group(&format!("{t}-g"))
            .subscribe(&[&t])
            .start(StartPolicy::Earliest)
            .max_offsets_per_trigger(100)
            .set("max.poll.interval.ms", "60000")
            .unwrap()
            .set("heartbeat.interval.ms", "500")
            .unwrap()
            .set("session.timeout.ms", "6000")
            .unwrap()
            .build()
            .await
            .unwrap();
        let b1 = s.next_batch().await.unwrap().unwrap();
        let b1_ranges = b1.ranges().to_vec();
        // Busy for 9 s without yielding to the runtime: 1.5 session timeouts.
        std::thread::sleep(Duration::from_secs(9));
        s.commit(b1)
            .await
            .expect("the member kept its partitions while busy");
        let b2 = s.next_batch().await.unwrap().unwrap();
        for r in b2.ranges().iter().filter(|r| !r.is_empty()) {
            if let Some(r1) = b1_ranges
                .iter()
                .find(|r1| r1.topic_partition() == r.topic_partition())
            {
                assert_eq!(r.from, r1.until, "b2 follows b1: {r:?} after {r1:?}");
            }
        }
        s.commit(b2).await.unwrap();
        s.close().await.unwrap();
    });
}

/// A checkpoint directory has one writer: group mode refuses it by name, before joining.
#[test]
fn a_checkpoint_store_refuses_group_mode() {
    let fake = kdirect_fake_broker::FakeCluster::builder()
        .brokers(1)
        .topic("t", 2)
        .start()
        .unwrap();
    let dir = tempdir("grp-ckpt");
    let e = rt()
        .block_on(
            DirectStream::builder()
                .bootstrap(&fake.bootstrap())
                .group("g")
                .subscribe(&["t"])
                .store_spec(&format!("checkpoint:{}", dir.display()))
                .build(),
        )
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("one writer") && msg.contains("--store kafka"),
        "{msg}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["consume", "-b", &fake.bootstrap(), "-t", "t", "-G", "g"])
        .args(["--store", &format!("checkpoint:{}", dir.display())])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("one writer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pattern subscription in a group: the member reads every matching topic, and a matching
/// topic created later makes it rejoin (the subscription changed) and read that topic too.
#[test]
fn a_pattern_member_rejoins_for_a_new_matching_topic() {
    let test = "a_pattern_member_rejoins_for_a_new_matching_topic";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let prefix = topic("pat");
    let (t1, t2, t3) = (
        format!("{prefix}-a"),
        format!("{prefix}-b"),
        format!("{prefix}-c"),
    );
    for t in [&t1, &t2] {
        kafka.create(t, 2, &[]);
        kafka.produce(t, 2, 100, &[]);
    }
    let assigned = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_assignments = assigned.clone();
    rt().block_on(async {
        let mut s = DirectStream::builder()
            .bootstrap(&kafka.bootstrap)
            .group(&format!("{prefix}-g"))
            .subscribe_pattern(&format!("{}-.*", regex_escape(&prefix)))
            .unwrap()
            .join_group(true)
            .start(StartPolicy::Earliest)
            .metadata_max_age(Duration::from_millis(300))
            .on_rebalance(move |r| {
                if let kdirect::Rebalance::Assigned { partitions, .. } = r {
                    seen_assignments.lock().unwrap().push(partitions.len());
                }
            })
            .build()
            .await
            .unwrap();
        let mut read: BTreeMap<String, u64> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut created = false;
        while read.get(&t3).copied().unwrap_or(0) < 100 {
            assert!(Instant::now() < deadline, "read so far: {read:?}");
            let batch = tokio::time::timeout(Duration::from_secs(2), s.next_batch()).await;
            let Ok(batch) = batch else {
                // Caught up with the first two topics: make the third.
                if !created && read.values().sum::<u64>() >= 200 {
                    kafka.create(&t3, 2, &[]);
                    kafka.produce(&t3, 2, 100, &[]);
                    created = true;
                }
                continue;
            };
            let batch = batch.unwrap().unwrap();
            for r in batch.ranges() {
                *read.entry(r.topic.to_string()).or_default() += r.len();
            }
            s.commit(batch).await.unwrap();
        }
        assert_eq!(read.get(&t1), Some(&100));
        assert_eq!(read.get(&t2), Some(&100));
        s.close().await.unwrap();
    });
    let a = assigned.lock().unwrap().clone();
    assert_eq!(a.first(), Some(&4), "{a:?}");
    assert_eq!(a.last(), Some(&6), "{a:?}");
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = !c.is_ascii_alphanumeric() && c != '_';
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

/// Kafka's `kafka-consumer-groups --describe` (with `extra`, e.g. `--members --verbose`): its
/// rows for `group`, each a map from column name to value.
fn consumer_groups_rows(
    kafka: &Kafka,
    group: &str,
    extra: &[&str],
) -> Vec<BTreeMap<String, String>> {
    let mut args = vec![
        "--bootstrap-server",
        &kafka.bootstrap,
        "--describe",
        "--group",
        group,
    ];
    args.extend(extra);
    let text = kafka.java(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &args,
    );
    let Some(header) = text.lines().find(|l| l.contains("CONSUMER-ID")) else {
        return Vec::new();
    };
    let names: Vec<&str> = header.split_whitespace().collect();
    text.lines()
        .filter(|l| l.split_whitespace().next() == Some(group))
        .map(|l| {
            let cols: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            names.iter().map(|n| (*n).to_owned()).zip(cols).collect()
        })
        .collect()
}

/// `kdirect lag`'s text rows (tab-separated, by the header's column names).
fn lag_rows(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let names: Vec<&str> = header.split('\t').collect();
    lines
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|cols| cols.len() == names.len())
        .map(|cols| {
            names
                .iter()
                .map(|n| (*n).to_owned())
                .zip(cols.into_iter().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// A kdirect member and a Java `KafkaConsumer` in one group: `kdirect lag` shows each
/// partition's owner (consumer id, host, client id) and the group's state, `--json` the
/// members and their partitions, and `--members` one line per member, all as Kafka's own
/// `kafka-consumer-groups --describe` (and `--describe --members --verbose`) report them; once
/// both left, the group is empty and `lag` prints as it did before groups had members.
#[test]
fn lag_shows_each_member_and_its_partitions_as_kafka_consumer_groups_does() {
    let test = "lag_shows_each_member_and_its_partitions_as_kafka_consumer_groups_does";
    let Some(kafka) = Kafka::single(test) else {
        return;
    };
    let t = topic("lagmembers");
    let group = format!("{t}-g");
    kafka.create(&t, 6, &[]);
    kafka.produce(&t, 6, 600, &[]);
    let dir = tempdir("lagmembers");
    let (j_out, j_log, stop) = (dir.join("java.out"), dir.join("java.log"), dir.join("stop"));
    let (k_out, k_log) = (dir.join("kdirect.out"), dir.join("kdirect.log"));
    let mut java = kafka
        .tool_command("group-consume")
        .args(["--topic", &t, "--group", &group])
        .args([
            "--out",
            j_out.to_str().unwrap(),
            "--stop",
            stop.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&j_log).unwrap())
        .spawn()
        .unwrap();
    let mut kd = member(&kafka, &t, &group, &k_out, &k_log, &[]);
    wait_until(
        Duration::from_secs(90),
        "both members hold 3 partitions",
        || {
            let m = described_members(&kafka, &group);
            m.len() == 2 && m.iter().all(|(_, n)| *n == 3)
        },
    );
    let lag = |extra: &[&str]| {
        let mut args = vec![
            "lag",
            "-b",
            &kafka.bootstrap,
            "--store",
            "kafka",
            "-g",
            &group,
            "-t",
            &t,
        ];
        args.extend(extra);
        crate::real_kafka::kdirect_cli(&args)
    };
    let columns = ["CONSUMER-ID", "HOST", "CLIENT-ID", "CURRENT-OFFSET"];
    let ours = ["consumer_id", "host", "client_id", "committed"];
    // Per partition: the owner and the committed offset, from both tools (retried until the
    // two snapshots agree: the members commit as they read).
    let by_kafka = || -> BTreeMap<String, Vec<String>> {
        consumer_groups_rows(&kafka, &group, &[])
            .into_iter()
            .filter(|r| r.get("TOPIC") == Some(&t))
            .map(|r| {
                (
                    r["PARTITION"].clone(),
                    columns.iter().map(|c| r[*c].clone()).collect(),
                )
            })
            .collect()
    };
    let by_kdirect = |text: &str| -> BTreeMap<String, Vec<String>> {
        lag_rows(text)
            .into_iter()
            .filter(|r| r.get("topic") == Some(&t))
            .map(|r| {
                (
                    r["partition"].clone(),
                    ours.iter()
                        .map(|c| r.get(*c).cloned().unwrap_or_default())
                        .collect(),
                )
            })
            .collect()
    };
    let mut text = String::new();
    wait_until(
        Duration::from_secs(60),
        "kdirect lag and kafka-consumer-groups --describe agree",
        || {
            let k = by_kafka();
            text = lag(&[]);
            k.len() == 6 && k == by_kdirect(&text)
        },
    );
    let owners = by_kdirect(&text);
    let clients: BTreeMap<&str, usize> = owners.values().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o[2].as_str()).or_insert(0) += 1;
        m
    });
    assert_eq!(clients.len(), 2, "{text}");
    assert_eq!(clients.get("kdirect"), Some(&3), "{text}");
    assert!(
        clients.keys().any(|c| c.starts_with("consumer-")),
        "the Java member's client id: {text}"
    );
    assert!(
        owners.values().all(|o| o[1].contains("127.0.0.1")),
        "{text}"
    );
    assert!(
        text.contains("group state\tStable (2 members, assignor range)"),
        "{text}"
    );
    // --json: the state, both members with their partitions, each partition's owner.
    let v: serde_json::Value = serde_json::from_str(lag(&["--json"]).trim()).unwrap();
    assert_eq!(v["state"], "Stable", "{v}");
    assert_eq!(v["protocol"], "range", "{v}");
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{v}");
    for m in members {
        let parts = m["partitions"].as_array().unwrap();
        assert_eq!(parts.len(), 3, "{v}");
        for p in parts {
            let row = v["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["partition"] == p["partition"])
                .unwrap();
            assert_eq!(row["consumer_id"], m["consumer_id"], "{v}");
            assert_eq!(row["client_id"], m["client_id"], "{v}");
        }
    }
    // --members: one line per member, as `--describe --members --verbose` reports them.
    let text = crate::real_kafka::kdirect_cli(&[
        "lag",
        "-b",
        &kafka.bootstrap,
        "--store",
        "kafka",
        "-g",
        &group,
        "--members",
    ]);
    let ours: BTreeMap<String, Vec<String>> = lag_rows(&text)
        .into_iter()
        .map(|r| {
            let v = ["host", "client_id", "#partitions", "assignment"].map(|c| r[c].clone());
            (r["consumer_id"].clone(), v.to_vec())
        })
        .collect();
    let theirs: BTreeMap<String, Vec<String>> =
        consumer_groups_rows(&kafka, &group, &["--members", "--verbose"])
            .into_iter()
            .map(|r| {
                // Kafka 4 calls it CURRENT-ASSIGNMENT (beside KIP-848's target), 3.x ASSIGNMENT.
                let assignment = r.get("CURRENT-ASSIGNMENT").or(r.get("ASSIGNMENT")).cloned();
                let v = ["HOST", "CLIENT-ID", "#PARTITIONS"].map(|c| r[c].clone());
                let v = v.into_iter().chain(assignment).collect::<Vec<_>>();
                (r["CONSUMER-ID"].clone(), v)
            })
            .collect();
    assert_eq!(ours, theirs, "kdirect lag --members:\n{text}");
    println!("{test}: kdirect lag --members agrees with kafka-consumer-groups:\n{text}");
    assert_eq!(ours.len(), 2, "{text}");
    assert!(
        ours.values()
            .all(|v| v[2] == "3" && v[3].starts_with(&format!("{t}:"))),
        "{text}"
    );
    // Both leave: an empty group prints as before.
    std::fs::write(&stop, b"").unwrap();
    signal(&kd, "-TERM");
    assert!(kd.wait().unwrap().success());
    assert!(java.wait().unwrap().success());
    let text = lag(&[]);
    assert!(
        text.starts_with("topic\tpartition\tcommitted\tlog_start\tend\tlag\tmargin\n"),
        "{text}"
    );
    assert!(!text.contains("group state"), "{text}");
    let text = crate::real_kafka::kdirect_cli(&[
        "lag",
        "-b",
        &kafka.bootstrap,
        "--store",
        "kafka",
        "-g",
        &group,
        "--members",
    ]);
    assert!(
        text.contains("group state\tEmpty (no active members)"),
        "{text}"
    );
    println!("{test}: kdirect lag --members agrees with kafka-consumer-groups:\n{text}");
}
