//! Consumer groups against Apache Kafka (issue 15, item 5): kdirect's group member
//! (`kdirect consume -G`) against Kafka's Java `KafkaConsumer` (`KTool group-consume`), the
//! same timeouts and the same assignor for both, every member in its own process.
//!
//! ```text
//! cargo bench --bench group -- [--reps N] [--heartbeats 500,1000] [--records N]
//!     [--clients kdirect,java] [--only availability|throughput] [--tick-ms MS]
//!     [--kdirect PATH]   (the kdirect binary; default: the one cargo built with the bench)
//! ```
//!
//! Needs `KDIRECT_TEST_KAFKA` (a broker's bootstrap) and `KDIRECT_TEST_KAFKA_CP` (a classpath
//! holding Kafka's client jars and a `KTool` compiled from this checkout: it needs the `tick`
//! and `produce-gated` commands); skips with a printed reason when they are unset.
//!
//! **Availability.** A Java producer (`KTool tick`) writes one record to each of 12 partitions
//! every `--tick-ms` (5) ms. Members print "partition offset" per record on stdout and their
//! assignments on stderr; the bench reads both pipes and stamps every line when it arrives. Two
//! members start; once the group is settled a third is spawned (the *join* event: the moment
//! the process is spawned, so its start-up counts), and once settled again that third member
//! is sent SIGKILL (the *death* event). After an event, **every partition is read again** at
//! the first moment when every live member has printed an assignment after the event, these
//! assignments cover the 12 partitions exactly once, and each partition has been delivered
//! (a line on stdout) by its new owner after the owner printed that assignment; the figure is
//! that moment minus the event, i.e. the maximum over partitions of the time to its first
//! record delivered under the new assignment. "Assigned" is the same with the last assignment
//! printed instead of the last partition read. The group must then stay quiet (no assignment
//! or revocation) for 2 s, otherwise the later assignment is the one measured.
//!
//! **Throughput.** Per run a fresh 12-partition topic, `--records` (3M) × 100 B records written
//! by `KTool produce-gated` in one open transaction, and N = 1, 2, 3 members reading it
//! `read_committed` into files. Once the group has settled (every member assigned, quiet for
//! 1.5 s) and the records are written, the transaction is committed: everything becomes
//! readable at once. Records/s = records / (time from the commit request until the members'
//! files hold every record's line), so no join or rebalance is inside the timing.
//!
//! Figures: median over `--reps` (3) runs, with min–max.
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 12;
const SESSION_MS: u64 = 6000;

#[derive(Debug, Clone)]
struct Opts {
    reps: usize,
    heartbeats: Vec<u64>,
    records: u64,
    clients: Vec<String>,
    only: Option<String>,
    tick_ms: u64,
    kdirect: PathBuf,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        reps: 3,
        heartbeats: vec![500, 1000],
        records: 3_000_000,
        clients: vec!["kdirect".into(), "java".into()],
        only: None,
        tick_ms: 5,
        kdirect: PathBuf::from(env!("CARGO_BIN_EXE_kdirect")),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--reps" => o.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--heartbeats" => {
                o.heartbeats = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--heartbeats: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--records" => o.records = val()?.parse().map_err(|e| format!("--records: {e}"))?,
            "--clients" => o.clients = val()?.split(',').map(String::from).collect(),
            "--only" => o.only = Some(val()?),
            "--tick-ms" => o.tick_ms = val()?.parse().map_err(|e| format!("--tick-ms: {e}"))?,
            "--kdirect" => o.kdirect = PathBuf::from(val()?),
            "--bench" => {}
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            _ => {}
        }
    }
    if !o.records.is_multiple_of(PARTITIONS as u64) {
        return Err(format!("--records must be a multiple of {PARTITIONS}"));
    }
    Ok(o)
}

struct Env {
    kdirect: PathBuf,
    bootstrap: String,
    classpath: String,
    dir: PathBuf,
    run: String,
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("group: {e}");
            return ExitCode::from(2);
        }
    };
    let (Ok(bootstrap), Ok(classpath)) = (
        std::env::var("KDIRECT_TEST_KAFKA"),
        std::env::var("KDIRECT_TEST_KAFKA_CP"),
    ) else {
        println!(
            "group bench skipped: KDIRECT_TEST_KAFKA (a Kafka bootstrap) and KDIRECT_TEST_KAFKA_CP \
             (Kafka's jars and this checkout's KTool) must both be set"
        );
        return ExitCode::SUCCESS;
    };
    let run = format!(
        "gb{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() % 100_000)
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("group-bench-{run}"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("group: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let env = Env {
        kdirect: o.kdirect.clone(),
        bootstrap,
        classpath,
        dir,
        run,
    };
    println!("{}", machine());
    println!("logs: {}\n", env.dir.display());
    let mut failed = false;
    if o.only.as_deref() != Some("throughput") {
        failed |= availability(&o, &env).is_err();
    }
    if o.only.as_deref() != Some("availability") {
        failed |= throughput(&o, &env).is_err();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

// ---------------------------------------------------------------------------------------------
// Members

#[derive(Debug, Clone)]
enum Ev {
    Assigned(Instant, BTreeSet<i32>),
    Revoked(Instant),
    Record(Instant, i32),
}

struct Member {
    child: Child,
    client: String,
    stop: PathBuf,
    events: Arc<Mutex<Vec<Ev>>>,
    alive: bool,
}

/// The partitions of an assignment line, kdirect's (`…: assigned t-0, t-1` or `nothing`) or
/// KTool's (`ASSIGNED [0, 1]`).
fn parse_rebalance(line: &str, at: Instant) -> Option<Ev> {
    if let Some(rest) = line.split_once(": assigned ").map(|(_, r)| r) {
        let ps = rest
            .split(", ")
            .filter_map(|tp| tp.rsplit_once('-').and_then(|(_, p)| p.trim().parse().ok()))
            .collect();
        return Some(Ev::Assigned(at, ps));
    }
    if line.contains(": revoked ") || line.starts_with("REVOKED") {
        return Some(Ev::Revoked(at));
    }
    let rest = line.strip_prefix("ASSIGNED ")?;
    let ps = rest
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    Some(Ev::Assigned(at, ps))
}

/// Starts a member. `out`: `None` pipes the records to the bench (stamped as they arrive),
/// `Some(file)` writes them to a file.
#[allow(clippy::too_many_arguments)]
fn spawn_member(
    env: &Env,
    client: &str,
    topic: &str,
    group: &str,
    heartbeat_ms: u64,
    out: Option<&Path>,
    read_committed: bool,
    name: &str,
) -> Result<Member, String> {
    let stop = env.dir.join(format!("{name}.stop"));
    let mut cmd = match client {
        "kdirect" => {
            let mut c = Command::new(&env.kdirect);
            c.args(["consume", "-b", &env.bootstrap, "-t", topic, "-G", group])
                .args(["--session-timeout-ms", &SESSION_MS.to_string()])
                .args(["-X", &format!("heartbeat.interval.ms={heartbeat_ms}")])
                .args(["--assignor", "range", "-f", "%p %o\n"]);
            if let Some(f) = out {
                c.arg("--output").arg(f);
            }
            if read_committed {
                c.args(["--isolation", "read_committed"]);
            }
            c
        }
        "java" => {
            let mut c = Command::new("java");
            c.args(["-Xmx512m", "-cp", &env.classpath, "KTool", "group-consume"])
                .args([
                    "--bootstrap",
                    &env.bootstrap,
                    "--topic",
                    topic,
                    "--group",
                    group,
                ])
                .args(["--session-timeout-ms", &SESSION_MS.to_string()])
                .args(["--heartbeat-interval-ms", &heartbeat_ms.to_string()])
                .args(["--assignor", "range", "--max-poll-records", "10000"])
                .arg("--stop")
                .arg(&stop)
                .arg("--out")
                .arg(out.unwrap_or(Path::new("/dev/stdout")));
            if read_committed {
                c.args(["--isolation", "read_committed"]);
            }
            c
        }
        other => return Err(format!("unknown client {other}")),
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(if out.is_some() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{client}: {e}"))?;
    let events = Arc::new(Mutex::new(Vec::new()));
    if let Some(stdout) = child.stdout.take() {
        let events = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let at = Instant::now();
                if let Some(p) = line.split(' ').next().and_then(|p| p.parse().ok()) {
                    events.lock().unwrap().push(Ev::Record(at, p));
                }
            }
        });
    }
    let stderr = child.stderr.take().expect("piped");
    let log = env.dir.join(format!("{name}.stderr"));
    let ev = events.clone();
    std::thread::spawn(move || {
        let mut log = std::fs::File::create(log).ok();
        let t0 = Instant::now();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let at = Instant::now();
            if let Some(f) = log.as_mut() {
                let _ = writeln!(f, "{:10.3} {line}", (at - t0).as_secs_f64());
            }
            if let Some(e) = parse_rebalance(&line, at) {
                ev.lock().unwrap().push(e);
            }
        }
    });
    Ok(Member {
        child,
        client: client.to_owned(),
        stop,
        events,
        alive: true,
    })
}

impl Member {
    fn stop(&mut self) {
        if self.alive {
            if self.client == "java" {
                let _ = std::fs::write(&self.stop, "");
            } else {
                let _ = Command::new("kill")
                    .args(["-TERM", &self.child.id().to_string()])
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.alive = false;
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.alive = false;
    }

    fn sigkill(&mut self) -> Instant {
        let at = Instant::now();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.alive = false;
        at
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.alive {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// When the group has settled after `after`: (the last assignment printed, the moment every
/// partition has been delivered by its new owner), per the definition at the top. `need_reads`
/// false: assignments only. Waits for 2 s (`quiet`) without a rebalance line after that.
fn settled(
    members: &[Member],
    after: Instant,
    need_reads: bool,
    quiet: Duration,
    timeout: Duration,
) -> Result<(Instant, Instant, usize), String> {
    let deadline = after + timeout;
    loop {
        let mut ready = true;
        let mut last_assign = after;
        let mut last_read = after;
        let mut last_rebalance = after;
        let mut covered = BTreeSet::new();
        let mut rebalances = 0;
        for m in members.iter().filter(|m| m.alive) {
            let evs = m.events.lock().unwrap();
            let mut assigned: Option<(Instant, &BTreeSet<i32>)> = None;
            let mut n = 0;
            for e in evs.iter() {
                match e {
                    Ev::Assigned(t, ps) if *t >= after => {
                        assigned = Some((*t, ps));
                        last_rebalance = last_rebalance.max(*t);
                        n += 1;
                    }
                    Ev::Revoked(t) if *t >= after => last_rebalance = last_rebalance.max(*t),
                    _ => {}
                }
            }
            rebalances = rebalances.max(n);
            let Some((at, ps)) = assigned else {
                ready = false;
                continue;
            };
            last_assign = last_assign.max(at);
            for &p in ps {
                if !covered.insert(p) {
                    ready = false; // two owners: the group is not settled
                }
                if need_reads {
                    let first = evs.iter().find_map(|e| match e {
                        Ev::Record(t, q) if *q == p && *t >= at => Some(*t),
                        _ => None,
                    });
                    match first {
                        Some(t) => last_read = last_read.max(t),
                        None => ready = false,
                    }
                }
            }
        }
        if covered.len() != PARTITIONS as usize {
            ready = false;
        }
        let now = Instant::now();
        if ready && now.duration_since(last_rebalance.max(last_read)) >= quiet {
            return Ok((last_assign, last_read, rebalances));
        }
        if now > deadline {
            return Err(format!(
                "not settled {:.0} s after the event ({} of {PARTITIONS} partitions assigned)",
                timeout.as_secs_f64(),
                covered.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Kafka through KTool

fn ktool(env: &Env, args: &[&str]) -> Result<String, String> {
    let out = Command::new("java")
        .args(["-Xmx256m", "-cp", &env.classpath, "KTool"])
        .args(args)
        .args(["--bootstrap", &env.bootstrap])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("java KTool: {e}"))?;
    if !out.status.success() {
        return Err(format!("KTool {args:?} failed: {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn create_topic(env: &Env, topic: &str) -> Result<(), String> {
    ktool(
        env,
        &[
            "create",
            "--topic",
            topic,
            "--partitions",
            &PARTITIONS.to_string(),
        ],
    )
    .map(|_| ())
}

fn delete_topic(env: &Env, topic: &str) {
    if let Err(e) = ktool(env, &["delete-topic", "--topic", topic]) {
        eprintln!("group: {e}");
    }
}

/// A Java process of KTool's, killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ktool_spawn(env: &Env, args: &[&str], stdout: Stdio) -> Result<Proc, String> {
    Command::new("java")
        .args(["-Xmx512m", "-cp", &env.classpath, "KTool"])
        .args(args)
        .args(["--bootstrap", &env.bootstrap])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .spawn()
        .map(Proc)
        .map_err(|e| format!("java KTool: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Availability

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median, min and max.
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (med, v[0], v[n - 1])
}

#[derive(Default, Clone)]
struct Avail {
    join_assigned: Vec<f64>,
    join_read: Vec<f64>,
    death_assigned: Vec<f64>,
    death_read: Vec<f64>,
    rebalances: Vec<usize>,
}

fn one_availability(
    env: &Env,
    o: &Opts,
    client: &str,
    hb: u64,
    rep: usize,
    acc: &mut Avail,
) -> Result<(), String> {
    let name = format!("{}-av-{client}-{hb}-{rep}", env.run);
    let topic = name.clone();
    create_topic(env, &topic)?;
    let result = (|| {
        let _ticker = ktool_spawn(
            env,
            &[
                "tick",
                "--topic",
                &topic,
                "--partitions",
                &PARTITIONS.to_string(),
                "--every-ms",
                &o.tick_ms.to_string(),
            ],
            Stdio::null(),
        )?;
        let t0 = Instant::now();
        let mut members = Vec::new();
        for i in 0..2 {
            members.push(spawn_member(
                env,
                client,
                &topic,
                &name,
                hb,
                None,
                false,
                &format!("{name}-m{i}"),
            )?);
        }
        let long = Duration::from_secs(60);
        let quiet = Duration::from_secs(2);
        settled(&members, t0, true, quiet, long).map_err(|e| format!("2 members: {e}"))?;
        // The join.
        let join = Instant::now();
        members.push(spawn_member(
            env,
            client,
            &topic,
            &name,
            hb,
            None,
            false,
            &format!("{name}-m2"),
        )?);
        let (a, r, n1) =
            settled(&members, join, true, quiet, long).map_err(|e| format!("join: {e}"))?;
        let (ja, jr) = (ms(a - join), ms(r - join));
        // The death.
        let death = members[2].sigkill();
        let (a, r, n2) =
            settled(&members, death, true, quiet, long).map_err(|e| format!("death: {e}"))?;
        let (da, dr) = (ms(a - death), ms(r - death));
        println!(
            "  {client} heartbeat {hb} ms, run {rep}: join assigned {ja:.0} ms, read {jr:.0} ms \
             ({n1} assignment(s)); death assigned {da:.0} ms, read {dr:.0} ms ({n2})"
        );
        acc.join_assigned.push(ja);
        acc.join_read.push(jr);
        acc.death_assigned.push(da);
        acc.death_read.push(dr);
        acc.rebalances.push(n1.max(n2));
        for m in &mut members {
            m.stop();
        }
        Ok(())
    })();
    delete_topic(env, &topic);
    result
}

fn availability(o: &Opts, env: &Env) -> Result<(), ()> {
    println!(
        "## Availability: 2 members, a 3rd joins, then is killed (SIGKILL); 12 partitions, \
         range, session.timeout.ms {SESSION_MS}, a record per partition every {} ms\n",
        o.tick_ms
    );
    let mut all: BTreeMap<(u64, String), Avail> = BTreeMap::new();
    let mut failed = false;
    for &hb in &o.heartbeats {
        for rep in 0..o.reps {
            for client in &o.clients {
                let acc = all.entry((hb, client.clone())).or_default();
                if let Err(e) = one_availability(env, o, client, hb, rep, acc) {
                    println!("  {client} heartbeat {hb} ms, run {rep}: error: {e}");
                    failed = true;
                }
            }
        }
    }
    println!(
        "\n| heartbeat ms | event | client | all assigned ms | every partition read again ms | runs | read again vs Java |"
    );
    println!("| ---: | --- | --- | ---: | ---: | ---: | ---: |");
    let fmt = |v: &[f64]| {
        let (m, lo, hi) = stats(v);
        format!("{m:.0} ({lo:.0}–{hi:.0})")
    };
    for &hb in &o.heartbeats {
        for (event, pick) in [
            (
                "join",
                (|a: &Avail| (a.join_assigned.clone(), a.join_read.clone()))
                    as fn(&Avail) -> (Vec<f64>, Vec<f64>),
            ),
            ("death", |a: &Avail| {
                (a.death_assigned.clone(), a.death_read.clone())
            }),
        ] {
            let java = all.get(&(hb, "java".into())).map(|a| stats(&pick(a).1).0);
            for client in &o.clients {
                let Some(a) = all.get(&(hb, client.clone())) else {
                    continue;
                };
                let (assigned, read) = pick(a);
                let vs = match java {
                    Some(j) if client != "java" => format!("{:.2}×", stats(&read).0 / j),
                    _ => String::new(),
                };
                println!(
                    "| {hb} | {event} | {client} | {} | {} | {} | {vs} |",
                    fmt(&assigned),
                    fmt(&read),
                    read.len()
                );
            }
        }
    }
    println!();
    let _ = std::io::stdout().flush();
    if failed {
        Err(())
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Throughput

fn file_sizes(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

/// The bytes of "p o\n" for every record of the topic, each once.
fn expected_bytes(records: u64) -> u64 {
    let per = records / PARTITIONS as u64;
    let digits = |mut n: u64| {
        let mut d = 1;
        while n >= 10 {
            n /= 10;
            d += 1;
        }
        d
    };
    (0..PARTITIONS)
        .map(|p| {
            (0..per)
                .map(|o| digits(p as u64) + 1 + digits(o) + 1)
                .sum::<u64>()
        })
        .sum()
}

fn one_throughput(
    env: &Env,
    o: &Opts,
    client: &str,
    n: usize,
    rep: usize,
    want: u64,
) -> Result<f64, String> {
    let name = format!("{}-tp-{client}-{n}-{rep}", env.run);
    let topic = name.clone();
    create_topic(env, &topic)?;
    let result = (|| {
        let gate = env.dir.join(format!("{name}.gate"));
        let mut producer = ktool_spawn(
            env,
            &[
                "produce-gated",
                "--topic",
                &topic,
                "--partitions",
                &PARTITIONS.to_string(),
                "--count",
                &o.records.to_string(),
                "--value-size",
                "100",
                "--transactional-id",
                &name,
                "--gate",
                gate.to_str().unwrap_or_default(),
            ],
            Stdio::piped(),
        )?;
        let mut lines = BufReader::new(producer.0.stdout.take().expect("piped")).lines();
        let t0 = Instant::now();
        let outs: Vec<PathBuf> = (0..n)
            .map(|i| env.dir.join(format!("{name}-m{i}.out")))
            .collect();
        let mut members = Vec::new();
        for (i, out) in outs.iter().enumerate() {
            members.push(spawn_member(
                env,
                client,
                &topic,
                &name,
                500,
                Some(out),
                true,
                &format!("{name}-m{i}"),
            )?);
        }
        match lines.next() {
            Some(Ok(l)) if l == "READY" => {}
            other => return Err(format!("produce-gated: {other:?}")),
        }
        settled(
            &members,
            t0,
            false,
            Duration::from_millis(1500),
            Duration::from_secs(120),
        )?;
        if file_sizes(&outs) != 0 {
            return Err("records were read before the commit".into());
        }
        let open = Instant::now();
        std::fs::write(&gate, "").map_err(|e| format!("{}: {e}", gate.display()))?;
        let deadline = open + Duration::from_secs(300);
        let done = loop {
            let have = file_sizes(&outs);
            if have >= want {
                if have > want {
                    return Err(format!("{have} bytes written, {want} expected: duplicates"));
                }
                break Instant::now();
            }
            if Instant::now() > deadline {
                return Err(format!("{have} of {want} bytes after 300 s"));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let secs = (done - open).as_secs_f64();
        let rate = o.records as f64 / secs;
        println!("  {client} × {n}, run {rep}: {secs:.3} s, {rate:.0} records/s");
        for m in &mut members {
            m.stop();
        }
        Ok(rate)
    })();
    delete_topic(env, &topic);
    result
}

fn throughput(o: &Opts, env: &Env) -> Result<(), ()> {
    println!(
        "## Throughput: {}M × 100 B records, 12 partitions, read_committed after one commit, \
         1–3 members\n",
        o.records as f64 / 1e6
    );
    let want = expected_bytes(o.records);
    let mut all: BTreeMap<(usize, String), Vec<f64>> = BTreeMap::new();
    let mut failed = false;
    for n in 1..=3 {
        for rep in 0..o.reps {
            for client in &o.clients {
                match one_throughput(env, o, client, n, rep, want) {
                    Ok(r) => all.entry((n, client.clone())).or_default().push(r),
                    Err(e) => {
                        println!("  {client} × {n}, run {rep}: error: {e}");
                        failed = true;
                    }
                }
            }
        }
    }
    println!("\n| members | client | records/s | runs | vs Java | vs 1 member |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    let med = |k: &(usize, String)| all.get(k).map(|v| stats(v).0);
    for n in 1..=3 {
        for client in &o.clients {
            let Some(v) = all.get(&(n, client.clone())) else {
                continue;
            };
            let (m, lo, hi) = stats(v);
            let vs_java = match med(&(n, "java".into())) {
                Some(j) if client != "java" => format!("{:.2}×", m / j),
                _ => String::new(),
            };
            let vs_one = match med(&(1, client.clone())) {
                Some(one) if n > 1 => format!("{:.2}×", m / one),
                _ => String::new(),
            };
            println!(
                "| {n} | {client} | {m:.0} ({lo:.0}–{hi:.0}) | {} | {vs_java} | {vs_one} |",
                v.len()
            );
        }
    }
    println!();
    let _ = std::io::stdout().flush();
    if failed {
        Err(())
    } else {
        Ok(())
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("machine: {cpus} CPUs ({model})")
}
