//! `kdirect consume` never loses output (issue 16 item 1): every batch is flushed (a pipe on a
//! quiet topic sees records at once), SIGINT/SIGTERM finish the batch in progress and exit 0,
//! a second signal exits at once without committing, and a closed pipe ends the run quietly.
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::stream::fake_topic;
use crate::support::{rt, tempdir, wait_until};

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

fn consume(boot: &str, topic: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["consume", "-b", boot, "-t", topic])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Records reach a pipe while the stream idles at the end of a quiet topic (they used to sit
/// in a 1 MiB buffer until it filled or the run ended); SIGTERM then ends it with exit 0.
#[test]
fn records_reach_a_pipe_while_the_stream_idles_and_sigterm_exits_0() {
    let rt = rt();
    let fake = fake_topic(&rt, "quiet", 1, 300);
    let mut child = consume(&fake.bootstrap(), "quiet", &[]);
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(AtomicUsize::new(0));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                l.unwrap();
                lines.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    wait_until(
        Duration::from_secs(60),
        "300 records came through the pipe",
        || lines.load(Ordering::SeqCst) == 300,
    );
    signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    assert_eq!(lines.load(Ordering::SeqCst), 300);
}

/// SIGTERM after catching up on 25,000 records and idling: every record is in the output
/// file (4,387 lines were lost before: the buffer was never flushed and the signal killed).
#[test]
fn sigterm_after_catching_up_loses_no_line_of_the_output_file() {
    let rt = rt();
    let fake = fake_topic(&rt, "caught", 2, 12_500);
    let dir = tempdir("sigterm");
    let file = dir.join("out.jsonl");
    let child = consume(
        &fake.bootstrap(),
        "caught",
        &["--output", file.to_str().unwrap()],
    );
    let count = || {
        std::fs::read_to_string(&file)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    wait_until(Duration::from_secs(60), "25,000 lines in the file", || {
        count() == 25_000
    });
    signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(count(), 25_000);
}

/// A second signal ends the run at once, without committing the batch in progress: here the
/// output is a FIFO nobody reads, so the batch can never finish.
#[test]
fn a_second_signal_exits_at_once_without_committing() {
    let rt = rt();
    let fake = fake_topic(&rt, "stuck", 1, 20_000);
    let dir = tempdir("second");
    let fifo = dir.join("out");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let store = format!("checkpoint:{}", dir.join("ck").display());
    let mut child = consume(
        &fake.bootstrap(),
        "stuck",
        &["--store", &store, "--output", fifo.to_str().unwrap()],
    );
    // Open the reading end (so the writer's open returns) and never read.
    let mut held = std::fs::File::open(&fifo).unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // Once the first batch is handed out (its plan logged), its output fills the pipe: its
    // commit cannot come.
    let plan = dir.join("ck").join("offsets").join("0");
    wait_until(Duration::from_secs(60), "batch 0 was planned", || {
        plan.exists()
    });
    signal(&child, "-TERM");
    // Time for a (wrongly) finished batch to exit: the fault under test, not a sync.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the batch cannot have finished"
    );
    signal(&child, "-TERM");
    let status = child.wait().unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(err.contains("SIGTERM again: exiting now"), "{err}");
    let mut sink = Vec::new();
    let _ = held.read_to_end(&mut sink);
    // Nothing committed: the batch is logged, not committed, and is read again next time.
    let show = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["offsets", "show", "--store", &store, "-g", "g"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("no batch committed"), "{shown}");
    assert!(shown.contains("logged but not committed"), "{shown}");
}

/// `consume | head -3`: the reader goes away; the run ends quietly with exit 0.
#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    let rt = rt();
    let fake = fake_topic(&rt, "headed", 1, 20_000);
    let mut child = consume(&fake.bootstrap(), "headed", &["--until-latest"]);
    let stdout = child.stdout.take().unwrap();
    let first: Vec<String> = BufReader::new(stdout)
        .lines()
        .take(3)
        .map(Result::unwrap)
        .collect();
    assert_eq!(first.len(), 3);
    // The reader is dropped here, as `head` exits.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("error"), "{stderr}");
}

/// `--metrics-addr`: a Prometheus scrape returns per-partition lag and position, batches and
/// records, while the stream runs.
#[test]
fn a_prometheus_scrape_returns_per_partition_lag() {
    use std::io::Write;
    let rt = rt();
    let fake = fake_topic(&rt, "metered", 2, 5_000);
    let addr = crate::support::dead_addr();
    // Rate-limited so that lag remains while it is scraped.
    let mut child = consume(
        &fake.bootstrap(),
        "metered",
        &[
            "--metrics-addr",
            &addr,
            "--max-rate-per-partition",
            "1000",
            "--output",
            "null",
        ],
    );
    let scrape = || {
        let mut s = std::net::TcpStream::connect(&addr).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    };
    let mut body = String::new();
    wait_until(
        Duration::from_secs(60),
        "a scrape with partition lag",
        || {
            body = scrape().unwrap_or_default();
            body.contains("kdirect_partition_lag{") && body.contains("kdirect_records_total")
        },
    );
    let lag_line = body
        .lines()
        .find(|l| l.starts_with("kdirect_partition_lag{") && l.contains("partition=\"1\""))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(lag_line.contains("topic=\"metered\""), "{lag_line}");
    let lag: f64 = lag_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(lag > 0.0 && lag < 5_000.0, "{lag_line}");
    assert!(body.contains("kdirect_partition_position{"), "{body}");
    assert!(body.contains("kdirect_batches_total"), "{body}");

    // Issue 36 (low): a scraper cannot hold the process's resources. Sixteen connections
    // that send nothing are all it serves at once: the next is told 503 at once (each idle
    // one is dropped after 5 s), and once they go, scrapes are answered again.
    let idle: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let busy = scrape().unwrap_or_default();
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    drop(idle);
    wait_until(Duration::from_secs(30), "a scrape answered again", || {
        scrape()
            .is_some_and(|b| b.starts_with("HTTP/1.1 200") && b.contains("kdirect_records_total"))
    });
    let ask = |req: &[u8]| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let _ = s.write_all(req);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    };
    assert!(ask(b"GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(ask(b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    // A head that never ends is cut at 8 KiB.
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "a".repeat(20_000));
    assert!(ask(huge.as_bytes()).starts_with("HTTP/1.1 431"));
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
    let _ = child.stdout.take();

    // --metrics-allow: a peer outside the list is closed unanswered.
    let addr = crate::support::dead_addr();
    let mut child = consume(
        &fake.bootstrap(),
        "metered",
        &[
            "--metrics-addr",
            &addr,
            "--metrics-allow",
            "192.0.2.0/24,::2",
            "--max-rate-per-partition",
            "1000",
            "--output",
            "null",
        ],
    );
    let mut conn = None;
    wait_until(Duration::from_secs(60), "the metrics listener", || {
        conn = std::net::TcpStream::connect(&addr).ok();
        conn.is_some()
    });
    let mut conn = conn.unwrap();
    let _ = conn.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    assert_eq!(body, "", "answered a peer not on the list");
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
    let _ = child.stdout.take();
}
