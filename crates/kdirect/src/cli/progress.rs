//! `kdirect consume`'s progress display: on a terminal one line redrawn in place (as cargo,
//! `pv` and kcat's `-v` statistics do), else a plain line every few seconds or per batch.
//!
//! The pure part — smoothed rates, the line's text, human units, the ETA, truncation to the
//! terminal's width — takes the time as an argument and is unit-tested here. The impure part
//! is [`StderrLine`]: the one place that draws on stderr, and [`note_line`] / [`StderrWriter`],
//! through which every other stderr line of the run (warnings, rebalances, the library's log
//! lines) goes, so the progress line is erased before them instead of being overwritten
//! halfway.
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How far back the rates look: long enough to smooth batch-sized steps, short enough to
/// follow a change of pace within a few seconds.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(5);

/// The fewest a terminal line is redrawn apart (five times a second at most).
pub(crate) const REDRAW_EVERY: Duration = Duration::from_millis(200);

/// What the run has done by one moment (counts since the run started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    at: Duration,
    records: u64,
    bytes: u64,
    offsets: u64,
}

/// Records, bytes and offsets per second over the last [`RATE_WINDOW`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rates {
    pub records: f64,
    pub bytes: f64,
    pub offsets: f64,
}

/// Rates smoothed over a sliding window of samples, with the clock passed in.
#[derive(Debug)]
pub(crate) struct Meter {
    window: Duration,
    samples: VecDeque<Sample>,
}

impl Meter {
    /// A meter whose counts were all zero at `start`.
    pub(crate) fn new(start: Duration, window: Duration) -> Meter {
        let mut samples = VecDeque::new();
        samples.push_back(Sample {
            at: start,
            records: 0,
            bytes: 0,
            offsets: 0,
        });
        Meter { window, samples }
    }

    /// The run's totals at `at` (each at least the last one given).
    pub(crate) fn record(&mut self, at: Duration, records: u64, bytes: u64, offsets: u64) {
        self.samples.push_back(Sample {
            at,
            records,
            bytes,
            offsets,
        });
        self.forget_before(at);
    }

    /// Drops the samples the window no longer needs: the oldest kept is the last one at or
    /// before `now − window`, so the rates always span the whole window once it has passed.
    fn forget_before(&mut self, now: Duration) {
        let edge = now.saturating_sub(self.window);
        while self.samples.len() > 1 && self.samples[1].at <= edge {
            self.samples.pop_front();
        }
        // Bounded whatever the caller does: one sample per redraw is far below this.
        while self.samples.len() > 4096 {
            self.samples.pop_front();
        }
    }

    /// The rates from the oldest sample to `now`: they fall while nothing arrives.
    pub(crate) fn rates(&mut self, now: Duration) -> Rates {
        self.forget_before(now);
        let (Some(first), Some(last)) = (self.samples.front(), self.samples.back()) else {
            return Rates::default();
        };
        let secs = now.saturating_sub(first.at).as_secs_f64();
        if secs <= 0.0 {
            return Rates::default();
        }
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        Rates {
            records: per_s(first.records, last.records),
            bytes: per_s(first.bytes, last.bytes),
            offsets: per_s(first.offsets, last.offsets),
        }
    }
}

/// What one progress line reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Status {
    /// Records delivered since the run started.
    pub records: u64,
    /// Their key and value bytes.
    pub bytes: u64,
    /// Offsets left to read (sum over the partitions read of log end − position), once a
    /// batch has been planned.
    pub lag: Option<u64>,
    /// Under available-now (or another ending): offsets read this run and offsets left to
    /// the ends, for the percentage and the ETA.
    pub until: Option<(u64, u64)>,
    /// Group mode: the partitions this member owns.
    pub owned: Option<usize>,
}

impl Status {
    /// The share of the run's work done, in percent (100 when there was nothing to read).
    fn percent(&self) -> Option<u64> {
        let (done, left) = self.until?;
        let total = done.saturating_add(left);
        Some(if total == 0 {
            100
        } else {
            // Floored, so 100 % means nothing is left.
            ((done as u128 * 100) / total as u128) as u64
        })
    }

    /// The time left at the current offset rate (`None` without an ending, or while the
    /// rate is zero and something is left).
    fn eta(&self, rates: &Rates) -> Option<Duration> {
        let (_, left) = self.until?;
        if left == 0 {
            return Some(Duration::ZERO);
        }
        if rates.offsets <= 0.0 {
            return None;
        }
        // Rounded up: "0s" only once nothing is left. Anything past a few months reads the
        // same: far off.
        let secs = (left as f64 / rates.offsets).ceil();
        Some(Duration::from_secs_f64(secs.min(1e7)))
    }
}

/// The terminal line: `records 1.23M │ 45.6k rec/s │ 12.3 MB/s │ lag 1.20k │ 42% ETA 1m05s │
/// 3 partitions`, cut to `width` columns.
pub(crate) fn tty_line(status: &Status, rates: &Rates, width: usize) -> String {
    let mut parts = vec![
        format!("records {}", human_count(status.records)),
        format!("{} rec/s", human_count_rate(rates.records)),
        human_bytes_rate(rates.bytes),
    ];
    if let Some(lag) = status.lag {
        parts.push(format!("lag {}", human_count(lag)));
    }
    if let Some(p) = status.percent() {
        let eta = status
            .eta(rates)
            .map_or_else(|| "--".to_owned(), human_duration);
        parts.push(format!("{p}% ETA {eta}"));
    }
    if let Some(n) = status.owned {
        parts.push(format!("{n} partition{}", if n == 1 { "" } else { "s" }));
    }
    truncate(&parts.join(" | "), width)
}

/// The plain line for logs, every `--progress-interval` seconds: `key=value` fields, exact
/// numbers.
pub(crate) fn plain_line(status: &Status, rates: &Rates) -> String {
    let mut s = format!(
        "kdirect: progress: records={} bytes={} records_per_s={:.0} bytes_per_s={:.0}",
        status.records, status.bytes, rates.records, rates.bytes
    );
    if let Some(lag) = status.lag {
        let _ = write!(s, " lag={lag}");
    }
    if let Some(p) = status.percent() {
        let _ = write!(s, " done={p}%");
        match status.eta(rates) {
            Some(eta) => {
                let _ = write!(s, " eta_s={}", eta.as_secs());
            }
            None => s.push_str(" eta_s=unknown"),
        }
    }
    if let Some(n) = status.owned {
        let _ = write!(s, " partitions={n}");
    }
    s
}

/// The line printed at exit: `kdirect: 1.23M records, 45.6 MB in 12.3s (100k rec/s,
/// 3.70 MB/s), lag 0`.
pub(crate) fn summary_line(status: &Status, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let per_s = |n: u64| {
        if secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    };
    let mut s = format!(
        "kdirect: {} records, {} in {} ({} rec/s, {})",
        human_count(status.records),
        human_bytes(status.bytes as f64),
        human_duration_precise(elapsed),
        human_count_rate(per_s(status.records)),
        human_bytes_rate(per_s(status.bytes)),
    );
    if let Some(lag) = status.lag {
        let _ = write!(s, ", lag {}", human_count(lag));
    }
    s
}

/// 999, 1.23k, 45.6k, 123k, 1.23M, … (three significant digits past a thousand).
pub(crate) fn human_count(n: u64) -> String {
    if n < 1000 {
        return n.to_string();
    }
    scaled(n as f64, 1000.0, &["", "k", "M", "G", "T", "P", "E"], "")
}

fn human_count_rate(r: f64) -> String {
    if r < 1000.0 {
        return format!("{:.0}", r.max(0.0));
    }
    scaled(r, 1000.0, &["", "k", "M", "G", "T", "P", "E"], "")
}

/// 512 B, 1.23 kB, 45.6 MB (decimal units, as `--stats`' MB_per_s).
pub(crate) fn human_bytes(b: f64) -> String {
    if b < 1000.0 {
        return format!("{:.0} B", b.max(0.0));
    }
    scaled(b, 1000.0, &["", "kB", "MB", "GB", "TB", "PB", "EB"], " ")
}

fn human_bytes_rate(b: f64) -> String {
    format!("{}/s", human_bytes(b))
}

/// `v` in the largest unit it reaches, with three significant digits.
fn scaled(v: f64, base: f64, units: &[&str], sep: &str) -> String {
    let mut v = v;
    let mut i = 0;
    while v >= base && i + 1 < units.len() {
        v /= base;
        i += 1;
    }
    // 999.95k would print as "1000k": carry it to the next unit.
    if v >= 999.5 && i + 1 < units.len() {
        v /= base;
        i += 1;
    }
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{sep}{}", units[i])
}

/// 42s, 3m04s, 2h05m, >99h.
pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=356_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => ">99h".to_owned(),
    }
}

/// 0.42s, 12.3s, then as [`human_duration`].
fn human_duration_precise(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2}s")
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else {
        human_duration(d)
    }
}

/// At most `width − 1` characters (the last column is left free: a line that fills it makes
/// some terminals wrap, and the next `\r` would redraw on the wrong row).
pub(crate) fn truncate(line: &str, width: usize) -> String {
    let room = width.saturating_sub(1).max(1);
    match line.char_indices().nth(room) {
        Some((cut, _)) => line[..cut].to_owned(),
        None => line.to_owned(),
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Nothing (stderr is not a terminal and no `--progress`, or `-q`).
    Off,
    /// The line redrawn in place (stderr is a terminal).
    Live,
    /// A plain line this often.
    Every(Duration),
    /// A plain line per batch (`--progress-interval 0`).
    PerBatch,
}

/// The progress display of one run: the meter, the last status, when it last showed.
#[derive(Debug)]
pub(crate) struct Reporter {
    mode: Mode,
    started: std::time::Instant,
    meter: Meter,
    status: Status,
    /// When the line was last drawn or printed (since `started`).
    shown_at: Option<Duration>,
    line: StderrLine,
}

impl Reporter {
    pub(crate) fn new(mode: Mode) -> Reporter {
        Reporter {
            mode,
            started: std::time::Instant::now(),
            meter: Meter::new(Duration::ZERO, RATE_WINDOW),
            status: Status::default(),
            shown_at: None,
            line: StderrLine,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether it shows something on its own between batches (so the loop should tick it).
    pub(crate) fn ticks(&self) -> bool {
        matches!(self.mode, Mode::Live | Mode::Every(_))
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// After a batch: the run's totals (`offsets` read this run) and what is left.
    pub(crate) fn update(&mut self, status: Status, offsets: u64) {
        if self.mode == Mode::Off {
            return;
        }
        let now = self.now();
        self.meter
            .record(now, status.records, status.bytes, offsets);
        self.status = status;
        self.tick();
    }

    /// Redraws the line or prints the plain one if it is due.
    pub(crate) fn tick(&mut self) {
        let now = self.now();
        let due = |every: Duration| {
            self.shown_at
                .is_none_or(|at| now.saturating_sub(at) >= every)
        };
        match self.mode {
            Mode::Live if due(REDRAW_EVERY) => {
                let rates = self.meter.rates(now);
                self.line
                    .draw(&tty_line(&self.status, &rates, terminal_width()));
            }
            // The first plain line comes one interval in, not at once.
            Mode::Every(every) if now >= every && due(every) => {
                let rates = self.meter.rates(now);
                note_line(format_args!("{}", plain_line(&self.status, &rates)));
            }
            _ => return,
        }
        self.shown_at = Some(now);
    }

    /// At the end of the run: the live line erased, then the summary line.
    pub(crate) fn finish(&mut self) {
        if self.mode == Mode::Off {
            return;
        }
        self.line.clear();
        note_line(format_args!("{}", summary_line(&self.status, self.now())));
    }
}

/// Carriage return, then erase the whole line (ECMA-48 EL 2).
pub(crate) const CLEAR: &str = "\r\x1b[2K";

/// Whether the progress line is on the screen now; held while anything writes to stderr.
static SHOWN: Mutex<bool> = Mutex::new(false);

fn shown() -> std::sync::MutexGuard<'static, bool> {
    SHOWN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The progress line's place on stderr. Dropping it erases the line.
#[derive(Debug)]
pub(crate) struct StderrLine;

impl StderrLine {
    /// Draws `line` over the one shown, without a newline.
    pub(crate) fn draw(&self, line: &str) {
        let mut shown = shown();
        let mut err = std::io::stderr().lock();
        // A closed or full stderr is not worth failing the run over.
        let _ = write!(err, "{CLEAR}{line}").and_then(|()| err.flush());
        *shown = true;
    }

    /// Erases the line if it is shown.
    pub(crate) fn clear(&self) {
        let mut shown = shown();
        if *shown {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(CLEAR.as_bytes()).and_then(|()| err.flush());
            *shown = false;
        }
    }
}

impl Drop for StderrLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Writes one line to stderr, erasing the progress line first if it is shown (it is drawn
/// again at the next redraw).
pub(crate) fn note_line(args: std::fmt::Arguments<'_>) {
    let mut shown = shown();
    let mut err = std::io::stderr().lock();
    if *shown {
        let _ = err.write_all(CLEAR.as_bytes());
        *shown = false;
    }
    // Notes interpolate text from brokers and stores (errors, names): escaped, through the
    // reports' writer (no line built first).
    let _ = writeln!(super::Printable(&mut err), "{args}");
}

/// `eprintln!` that erases the progress line first.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::cli::progress::note_line(format_args!($($arg)*))
    };
}
pub(crate) use note;

/// Stderr for the log lines (`tracing_subscriber`'s writer): erases the progress line before
/// the first bytes of each log line.
#[derive(Debug)]
pub(crate) struct StderrWriter;

impl std::io::Write for StderrWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut shown = shown();
        let mut err = std::io::stderr().lock();
        if *shown {
            err.write_all(CLEAR.as_bytes())?;
            *shown = false;
        }
        err.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The terminal's width in columns (80 when it does not say, as for a serial line).
pub(crate) fn terminal_width() -> usize {
    #[cfg(unix)]
    if let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stderr()) {
        if ws.ws_col > 0 {
            return usize::from(ws.ws_col);
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
        .unwrap_or(80)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn rates_cover_the_window_and_fall_while_idle() {
        let mut m = Meter::new(Duration::ZERO, RATE_WINDOW);
        // 1,000 records and 100 kB a second for ten seconds.
        for t in 1..=10u64 {
            m.record(secs(t as f64), t * 1000, t * 100_000, t * 1000);
        }
        let r = m.rates(secs(10.0));
        assert_eq!(r.records, 1000.0);
        assert_eq!(r.bytes, 100_000.0);
        // Only the window is kept (the sample at its edge and those after).
        assert_eq!(m.samples.len(), 6);
        // Nothing for 2.5 s: the window's oldest sample is at 7.5 s − 5 s → the one at 7 s.
        let r = m.rates(secs(12.5));
        assert_eq!(r.records, 3000.0 / 5.5);
        // Nothing for a whole window: zero.
        assert_eq!(m.rates(secs(16.0)).records, 0.0);
    }

    #[test]
    fn rates_follow_a_change_of_pace() {
        let mut m = Meter::new(Duration::ZERO, RATE_WINDOW);
        let mut n = 0;
        for t in 1..=20u64 {
            n += if t <= 10 { 100 } else { 10_000 };
            m.record(secs(t as f64), n, 0, n);
        }
        // The slow first ten seconds are out of the window.
        assert_eq!(m.rates(secs(20.0)).records, 10_000.0);
    }

    #[test]
    fn rates_at_the_start_are_zero_not_infinite() {
        let mut m = Meter::new(secs(3.0), RATE_WINDOW);
        assert_eq!(m.rates(secs(3.0)), Rates::default());
        // A clock that goes backwards (it should not) gives zero, not a panic.
        assert_eq!(m.rates(secs(1.0)), Rates::default());
        m.record(secs(3.5), 500, 0, 500);
        assert_eq!(m.rates(secs(3.5)).records, 1000.0);
    }

    #[test]
    fn the_meter_stays_bounded() {
        let mut m = Meter::new(Duration::ZERO, Duration::from_secs(3600));
        for i in 0..10_000u64 {
            m.record(Duration::from_millis(i), i, i, i);
        }
        assert!(m.samples.len() <= 4096);
    }

    #[test]
    fn human_units() {
        assert_eq!(human_count(0), "0");
        assert_eq!(human_count(999), "999");
        assert_eq!(human_count(1000), "1.00k");
        assert_eq!(human_count(1234), "1.23k");
        assert_eq!(human_count(45_678), "45.7k");
        assert_eq!(human_count(123_456), "123k");
        assert_eq!(human_count(999_999), "1.00M");
        assert_eq!(human_count(1_234_567_890), "1.23G");
        assert_eq!(human_count(u64::MAX), "18.4E");
        assert_eq!(human_bytes(0.0), "0 B");
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(12_345_678.0), "12.3 MB");
        assert_eq!(human_bytes_rate(1_500.0), "1.50 kB/s");
        assert_eq!(human_count_rate(12.4), "12");
        assert_eq!(human_count_rate(-1.0), "0");
        assert_eq!(human_duration(secs(0.4)), "0s");
        assert_eq!(human_duration(secs(42.0)), "42s");
        assert_eq!(human_duration(secs(184.0)), "3m04s");
        assert_eq!(human_duration(secs(7500.0)), "2h05m");
        assert_eq!(human_duration(secs(1e9)), ">99h");
        assert_eq!(human_duration_precise(secs(0.4242)), "0.42s");
        assert_eq!(human_duration_precise(secs(12.34)), "12.3s");
    }

    #[test]
    fn percentage_and_eta_under_an_ending() {
        let rates = Rates {
            records: 900.0,
            bytes: 90_000.0,
            offsets: 1000.0,
        };
        let mut s = Status {
            records: 4200,
            bytes: 420_000,
            lag: Some(5800),
            until: Some((4200, 5800)),
            owned: None,
        };
        assert_eq!(
            tty_line(&s, &rates, 200),
            "records 4.20k | 900 rec/s | 90.0 kB/s | lag 5.80k | 42% ETA 6s"
        );
        assert_eq!(
            plain_line(&s, &rates),
            "kdirect: progress: records=4200 bytes=420000 records_per_s=900 bytes_per_s=90000 \
             lag=5800 done=42% eta_s=6"
        );
        // No rate yet: the ETA is unknown, not infinite.
        assert_eq!(
            tty_line(&s, &Rates::default(), 200),
            "records 4.20k | 0 rec/s | 0 B/s | lag 5.80k | 42% ETA --"
        );
        assert!(plain_line(&s, &Rates::default()).ends_with(" done=42% eta_s=unknown"));
        // Done; and nothing to do at all is done too.
        s.until = Some((10_000, 0));
        assert!(tty_line(&s, &rates, 200).ends_with("100% ETA 0s"));
        s.until = Some((0, 0));
        assert!(tty_line(&s, &Rates::default(), 200).ends_with("100% ETA 0s"));
        // 99.99 % is not rounded up to 100, nor a millisecond left down to nothing.
        s.until = Some((9999, 1));
        assert!(tty_line(&s, &rates, 200).ends_with("99% ETA 1s"));
    }

    #[test]
    fn group_mode_and_no_lag_yet() {
        let s = Status {
            records: 12,
            bytes: 34,
            lag: None,
            until: None,
            owned: Some(1),
        };
        assert_eq!(
            tty_line(&s, &Rates::default(), 200),
            "records 12 | 0 rec/s | 0 B/s | 1 partition"
        );
        let s = Status {
            owned: Some(3),
            ..s
        };
        assert!(tty_line(&s, &Rates::default(), 200).ends_with("| 3 partitions"));
        assert!(plain_line(&s, &Rates::default()).ends_with(" bytes_per_s=0 partitions=3"));
    }

    #[test]
    fn the_line_fits_the_terminal() {
        let s = Status {
            records: 1_234_567,
            bytes: 1,
            lag: Some(7),
            until: Some((1, 1)),
            owned: Some(12),
        };
        let rates = Rates::default();
        let full = tty_line(&s, &rates, 1000);
        for width in [0, 1, 2, 10, 40, full.len(), full.len() + 1] {
            let line = tty_line(&s, &rates, width);
            assert!(line.chars().count() < width.max(2), "{width}: {line:?}");
            assert!(full.starts_with(&line));
        }
        assert_eq!(tty_line(&s, &rates, full.len() + 1), full);
        // Cut at a character, never inside one.
        assert_eq!(truncate("ab→cd", 4), "ab→");
        assert_eq!(truncate("ab→cd", 3), "ab");
    }

    #[test]
    fn the_summary_line() {
        let s = Status {
            records: 1_234_567,
            bytes: 45_600_000,
            lag: Some(0),
            until: Some((1_234_567, 0)),
            owned: None,
        };
        assert_eq!(
            summary_line(&s, secs(12.3)),
            "kdirect: 1.23M records, 45.6 MB in 12.3s (100k rec/s, 3.71 MB/s), lag 0"
        );
        let s = Status { lag: None, ..s };
        assert_eq!(
            summary_line(&s, Duration::ZERO),
            "kdirect: 1.23M records, 45.6 MB in 0.00s (0 rec/s, 0 B/s)"
        );
    }
}
