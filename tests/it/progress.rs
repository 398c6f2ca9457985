//! `kdirect consume`'s progress display as an operator sees it: stderr on a real
//! pseudo-terminal (posix_openpt through rustix) gets one line redrawn in place, erased before
//! any other line and before the summary; stderr on a pipe gets plain lines, never a `\r` or
//! an escape code; stdout carries the records only, in both cases.
//!
//! The runs are made long enough by a rate limit (a lower bound on their duration, set by the
//! limit, so a slow machine only makes them longer); nothing here measures speed.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::stream::fake_topic;
use crate::support::rt;

/// What the progress line is erased with before each redraw and before any other line.
const CLEAR: &str = "\r\x1b[2K";

/// A pseudo-terminal `cols` columns wide: the master (read by the test) and the slave (the
/// child's stderr). Output post-processing is off, so the bytes read are the bytes written
/// (no `\n` → `\r\n`).
fn pty(cols: u16) -> (OwnedFd, OwnedFd) {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    use rustix::termios::{tcgetattr, tcsetattr, tcsetwinsize, OptionalActions, OutputModes};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("posix_openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
    )
    .expect("open the pty's slave");
    let mut modes = tcgetattr(&slave).expect("tcgetattr");
    modes.output_modes.remove(OutputModes::OPOST);
    tcsetattr(&slave, OptionalActions::Now, &modes).expect("tcsetattr");
    tcsetwinsize(
        &slave,
        rustix::termios::Winsize {
            ws_row: 24,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .expect("tcsetwinsize");
    (master, slave)
}

/// Everything written to the pty's slave, in chunks as they come, until every copy of the
/// slave is closed (the read then fails with EIO on Linux, or ends).
fn read_master(master: OwnedFd) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut buf = vec![0u8; 8192];
        while let Ok(n @ 1..) = f.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// `kdirect consume ARGS` with stderr on a fresh pty of `cols` columns, stdout piped.
fn consume_on_pty(cols: u16, args: &[&str]) -> (Child, mpsc::Receiver<Vec<u8>>) {
    let (master, slave) = pty(cols);
    let child = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .arg("consume")
        .args(args)
        .env("TERM", "xterm-256color")
        .env_remove("COLUMNS")
        .env_remove("KDIRECT_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("run kdirect");
    // The Command (holding this process's copy of the slave) is gone: the reader sees the end
    // once the child exits.
    (child, read_master(master))
}

/// The rest of the child's stderr, once it has exited.
fn drain(rx: &mpsc::Receiver<Vec<u8>>, got: &mut Vec<u8>) {
    // The reader ends when the slave closes; a generous bound only so that a broken test
    // fails instead of hanging.
    while let Ok(chunk) = rx.recv_timeout(Duration::from_secs(60)) {
        got.extend_from_slice(&chunk);
    }
}

/// Stdout as JSON records: every line one object with a topic, nothing else.
fn records_only(stdout: &[u8], topic: &str) -> usize {
    let text = std::str::from_utf8(stdout).expect("stdout is UTF-8");
    assert!(
        !text.contains('\r') && !text.contains('\x1b'),
        "progress leaked into stdout"
    );
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout line is not a record ({e}): {line:?}"));
        assert_eq!(v["topic"], topic, "{line}");
        n += 1;
    }
    n
}

/// Splits pty output at each erase: the redrawn frames, and the lines written after an
/// erase (which end in `\n`).
fn segments(raw: &str) -> Vec<&str> {
    raw.split(CLEAR).collect()
}

#[test]
fn a_terminal_gets_a_line_redrawn_in_place_with_an_eta_then_a_summary() {
    let rt = rt();
    // 2 × 3,000 records at 1,000 records/s per partition: batches at 0, 1 and 2 s at the
    // earliest, so several redraws fall between them.
    let fake = fake_topic(&rt, "progress-live", 2, 3000);
    let boot = fake.bootstrap();
    let (child, rx) = consume_on_pty(
        200,
        &[
            "-b",
            &boot,
            "-t",
            "progress-live",
            "--trigger",
            "available-now",
            "--max-rate-per-partition",
            "1000",
        ],
    );
    let out = child.wait_with_output().unwrap();
    let mut raw = Vec::new();
    drain(&rx, &mut raw);
    let raw = String::from_utf8(raw).expect("stderr is UTF-8");
    assert!(out.status.success(), "{raw:?}");
    assert_eq!(records_only(&out.stdout, "progress-live"), 6000);

    let segs = segments(&raw);
    // Nothing before the first erase: the first thing on the terminal is the line.
    assert_eq!(segs[0], "", "{raw:?}");
    let (summary, frames) = segs[1..].split_last().expect("a frame and the summary");
    assert!(frames.len() >= 2, "redrawn at least twice: {raw:?}");
    for f in frames {
        assert!(f.starts_with("records "), "frame {f:?} in {raw:?}");
        assert!(!f.contains('\n'), "a frame is one line, redrawn: {f:?}");
        assert!(f.chars().count() < 200, "wider than the terminal: {f:?}");
    }
    // Once a batch is planned the line has the lag left, the share done and an ETA.
    assert!(
        frames
            .iter()
            .any(|f| f.contains(" rec/s | ") && f.contains("/s | lag ") && f.contains("% ETA ")),
        "{raw:?}"
    );
    // The line is erased, then the summary is the last thing written, on a line of its own
    // (fake_topic's values are 98 bytes: 6,000 × 98 B).
    assert!(
        summary.starts_with("kdirect: 6.00k records, 588 kB in ") && summary.ends_with(", lag 0\n"),
        "{summary:?}"
    );
    assert_eq!(summary.matches('\n').count(), 1, "{summary:?}");
}

#[test]
fn a_narrow_terminal_gets_the_line_cut_and_quiet_gets_nothing() {
    let rt = rt();
    let fake = fake_topic(&rt, "progress-narrow", 1, 2000);
    let boot = fake.bootstrap();
    let args = [
        "-b",
        &boot,
        "-t",
        "progress-narrow",
        "--until-latest",
        "--max-rate-per-partition",
        "1000",
        "--output",
        "null",
    ];
    let (child, rx) = consume_on_pty(24, &args);
    let out = child.wait_with_output().unwrap();
    let mut raw = Vec::new();
    drain(&rx, &mut raw);
    let raw = String::from_utf8(raw).unwrap();
    assert!(out.status.success(), "{raw:?}");
    assert!(out.stdout.is_empty());
    let segs = segments(&raw);
    let (summary, frames) = segs[1..].split_last().expect("a frame and the summary");
    assert!(!frames.is_empty(), "{raw:?}");
    for f in frames {
        // 23 columns: the last one is left free so that the line never wraps.
        assert!(f.chars().count() <= 23, "{f:?} is wider than 24 columns");
        assert!(f.starts_with("records "), "{f:?}");
    }
    // The summary is a normal line: the terminal wraps it, nothing is cut.
    assert!(
        summary.starts_with("kdirect: 2.00k records, 196 kB in "),
        "{summary:?}"
    );

    // -q: no line, no summary, even on a terminal.
    let mut quiet = args.to_vec();
    quiet.push("-q");
    let (child, rx) = consume_on_pty(80, &quiet);
    let out = child.wait_with_output().unwrap();
    let mut raw = Vec::new();
    drain(&rx, &mut raw);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&raw));
    assert!(raw.is_empty(), "{:?}", String::from_utf8_lossy(&raw));
}

#[test]
fn a_pipe_gets_plain_lines_every_interval_and_nothing_unasked() {
    let rt = rt();
    // 2 × 2,000 records at 1,000 records/s per partition: at least a second, two intervals.
    let fake = fake_topic(&rt, "progress-plain", 2, 2000);
    let boot = fake.bootstrap();
    let consume = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kdirect"))
            .args(["consume", "-b", &boot, "-t", "progress-plain", "-e"])
            .args(["--max-rate-per-partition", "1000"])
            .args(extra)
            .env_remove("KDIRECT_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = consume(&["--progress", "--progress-interval", "0.5"]);
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert!(o.status.success(), "{stderr}");
    assert_eq!(records_only(&o.stdout, "progress-plain"), 4000);
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "terminal codes on a pipe: {stderr:?}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    let periodic: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("kdirect: progress: records="))
        .collect();
    assert!(!periodic.is_empty(), "{stderr}");
    // The fields a log search looks for, exact numbers; once a batch is planned, the lag
    // and (under -e) the share done and an ETA.
    for l in &periodic {
        for field in [" bytes=", " records_per_s=", " bytes_per_s="] {
            assert!(l.contains(field), "{field} missing from {l}");
        }
    }
    assert!(
        periodic
            .iter()
            .any(|l| l.contains(" lag=") && l.contains(" done=") && l.contains(" eta_s=")),
        "{stderr}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("kdirect: 4.00k records, 392 kB in ")),
        "{stderr}"
    );
    assert_eq!(lines.len(), periodic.len() + 1, "{stderr}");

    // Not asked for and not on a terminal: stderr stays empty (cargo and kcat do the same).
    let o = consume(&[]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    assert_eq!(records_only(&o.stdout, "progress-plain"), 4000);
}

/// Group mode against Apache Kafka: the line counts the partitions this member owns, and the
/// group's own lines (the assignment, the SIGTERM notice) each start on a clean line.
#[test]
fn a_group_member_on_a_terminal_shows_its_partitions_against_kafka() {
    let Some(kafka) = crate::real_kafka::Kafka::single("progress group line") else {
        return;
    };
    let topic = crate::real_kafka::topic("progress-group");
    let group = format!("{topic}-g");
    kafka.create(&topic, 3, &[]);
    kafka.produce(&topic, 3, 300, &[]);
    let (child, rx) = consume_on_pty(
        200,
        &[
            "-b",
            &kafka.bootstrap,
            "-t",
            &topic,
            "-G",
            &group,
            "--starting",
            "earliest",
            "--session-timeout-ms",
            "6000",
            "-f",
            "%p %o\n",
        ],
    );
    let mut raw = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let want = "records 300 | ";
    while !String::from_utf8_lossy(&raw)
        .split(CLEAR)
        .any(|f| f.starts_with(want) && f.ends_with("| lag 0 | 3 partitions"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => raw.extend_from_slice(&chunk),
            Err(_) => panic!(
                "no frame with 300 records and 3 partitions: {:?}",
                String::from_utf8_lossy(&raw)
            ),
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    drain(&rx, &mut raw);
    let raw = String::from_utf8(raw).unwrap();
    assert!(out.status.success(), "{raw:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 300);
    let segs = segments(&raw);
    // Every line that is not the progress line starts at column 0, after an erase.
    for s in &segs[1..] {
        if s.contains('\n') {
            assert!(
                s.starts_with("kdirect: "),
                "a line glued to the frame: {s:?}"
            );
            assert!(s.ends_with('\n') && !s.starts_with("records"), "{s:?}");
        }
    }
    assert!(
        segs.iter().any(
            |s| s.starts_with(&format!("kdirect: group {group}: generation "))
                && s.contains("assigned")
        ),
        "{raw:?}"
    );
    assert!(
        segs.iter().any(|s| s.starts_with("kdirect: SIGTERM: ")),
        "{raw:?}"
    );
    // The summary is the last line, after the SIGTERM notice (which had erased the line).
    let after_last_erase = segs.last().unwrap();
    assert!(!after_last_erase.contains("records |"), "{raw:?}");
    assert!(
        raw.lines()
            .last()
            .is_some_and(|l| l.starts_with("kdirect: 300 records, ")),
        "{raw:?}"
    );
}
