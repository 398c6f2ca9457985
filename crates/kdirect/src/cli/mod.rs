//! Command-line interface: one file per subcommand.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod common;
mod consume;
mod decode;
mod demo;
mod fake_broker;
mod lag;
mod metadata;
mod metrics;
mod offsets;
mod progress;
mod store;

/// kdirect: read Kafka fast, never lose or double-count a record.
#[derive(Debug, Parser)]
#[command(name = "kdirect", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log lines on stderr: -v info, -vv debug, -vvv trace (KDIRECT_LOG, in RUST_LOG
    /// syntax, overrides).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Log lines as text or as JSON objects (one per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line each.
    Text,
    /// One JSON object each (timestamp, level, fields, message).
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show brokers, topics, partitions, leaders and leader epochs (like `kcat -L`).
    Metadata(metadata::Args),
    /// Partition offsets: list earliest/latest/by-timestamp offsets.
    #[command(subcommand)]
    Offsets(offsets::Command),
    /// Per partition: the committed position in an offset store, the log end, and the lag.
    Lag(lag::Args),
    /// The pre-deploy health check: brokers, topics, leaders and replicas, the store, stored
    /// positions inside the log, one record per partition decoded. ✓/✗ with a fix per ✗.
    Check(check::Args),
    /// Read topics batch by batch (exact offset ranges) and print the records as JSON lines.
    Consume(Box<consume::Args>),
    /// Decode a file of record batches (a Fetch response partition's `records` bytes).
    Decode(decode::Args),
    /// Serve generated data from kdirect's in-memory fake broker (a test double) until stopped.
    FakeBroker(fake_broker::Args),
    /// Run the whole job on a built-in fake broker: consume, crash, restart, and prove from
    /// the output that every record arrived exactly once.
    Demo(demo::Args),
}

/// An error the CLI prints as one line and exits non-zero on.
#[derive(Debug)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// Text that came from outside (a broker's error message or SCRAM `e=`, a topic name, another
/// client's `client.id` or host, a store's answer, an argument echoed back) made safe to print
/// on a terminal: control characters other than newline and tab (ESC starting an escape
/// sequence that recolours, moves the cursor or sets the window title; a carriage return
/// that overwrites the line) and the bidirectional overrides that reorder what is shown are
/// written as JSON's `\uXXXX` escapes, so a JSON report stays valid JSON. kdirect's own
/// messages contain none, so they are unchanged.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    fn unsafe_char(c: char) -> bool {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    }
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            // JSON's form (every such character is in the BMP): a report printed as JSON
            // stays valid JSON, and the string decodes to what the broker sent.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Standard output for reports (tables of topics, hosts, group members, stored positions),
/// through [`printable`]: names in them come from brokers and other clients.
pub(crate) fn report_out() -> Printable<std::io::StdoutLock<'static>> {
    Printable(std::io::stdout().lock())
}

/// A writer that passes what is written through [`printable`].
#[derive(Debug)]
pub(crate) struct Printable<W>(pub(crate) W);

impl<W: std::io::Write> std::io::Write for Printable<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Formatting writes whole `str` pieces, so each `buf` is whole UTF-8.
        match std::str::from_utf8(buf) {
            Ok(s) => self.0.write_all(printable(s).as_bytes())?,
            Err(_) => self
                .0
                .write_all(printable(&String::from_utf8_lossy(buf)).as_bytes())?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    init_logging(cli.verbose, cli.log_format);
    match cli.command {
        Command::Metadata(a) => block_on(metadata::run(a)),
        Command::Offsets(c) => block_on(offsets::run(c)),
        Command::Lag(a) => block_on(lag::run(a)),
        Command::Check(a) => block_on(check::run(a)),
        Command::Decode(a) => decode::run(a),
        Command::Consume(a) => block_on(consume::run(*a)),
        Command::FakeBroker(a) => block_on(fake_broker::run(a)),
        Command::Demo(a) => block_on(demo::run(a)),
    }
}

fn block_on<F: std::future::Future<Output = Result<ExitCode, CliError>>>(
    f: F,
) -> Result<ExitCode, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError(format!("cannot start the async runtime: {e}")))?
        .block_on(f)
}

/// The library's log lines (reconnects, retries) on stderr, one line each, filtered by
/// `KDIRECT_LOG` in `RUST_LOG` syntax (`KDIRECT_LOG=debug`, `KDIRECT_LOG=kdirect_engine=trace`),
/// else by `-v`; warnings and errors by default.
fn init_logging(verbose: u8, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("KDIRECT_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Through the progress line's lock: a log line erases `consume`'s live line first.
        .with_writer(|| progress::StderrWriter)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn text_from_outside_cannot_drive_the_terminal() {
        assert_eq!(
            printable("broker 1: no progress\n\tat offset 3"),
            "broker 1: no progress\n\tat offset 3"
        );
        assert!(matches!(printable("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(
            printable("SASL failed: \u{1b}]0;owned\u{7}\u{1b}[2Jbad password\r"),
            "SASL failed: \\u001b]0;owned\\u0007\\u001b[2Jbad password\\u000d"
        );
        assert_eq!(printable("topic\u{202e}gnp.exe"), "topic\\u202egnp.exe");
        assert_eq!(printable("caf\u{e9} \u{9b}31m"), "caf\u{e9} \\u009b31m");
        // Inside a JSON string the escapes are JSON's: it parses to what was sent.
        let json = serde_json::json!({ "topic": "t\u{7f}\u{9b}\u{202e}" }).to_string();
        let shown = printable(&json);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["topic"], "t\u{7f}\u{9b}\u{202e}");
    }
}
