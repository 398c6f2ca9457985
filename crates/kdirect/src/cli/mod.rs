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
