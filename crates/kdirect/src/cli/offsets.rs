//! `kdirect offsets …`: partition offsets.
use std::io::Write;
use std::process::ExitCode;

use kdirect_proto::api::list_offsets::OffsetSpec;
use kdirect_proto::IsolationLevel;
use serde_json::json;

use super::common::ConnectArgs;
use super::CliError;

/// `kdirect offsets` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List each partition's offset at earliest, latest, or a timestamp (ListOffsets).
    List(ListArgs),
}

/// Arguments of `kdirect offsets list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    conn: ConnectArgs,
    /// Topic.
    #[arg(short, long)]
    topic: String,
    /// `earliest`, `latest`, `max-timestamp`, or a time in ms since the Unix epoch.
    #[arg(long, default_value = "latest", value_parser = parse_spec)]
    at: OffsetSpec,
    /// `read_uncommitted` (latest = high watermark) or `read_committed` (latest = last stable
    /// offset).
    #[arg(long, default_value = "read_uncommitted", value_parser = parse_isolation)]
    isolation: IsolationLevel,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Parses `earliest|latest|max-timestamp|<unix-ms>`.
pub fn parse_spec(s: &str) -> Result<OffsetSpec, String> {
    match s {
        "earliest" | "beginning" => Ok(OffsetSpec::Earliest),
        "latest" | "end" => Ok(OffsetSpec::Latest),
        "max-timestamp" => Ok(OffsetSpec::MaxTimestamp),
        _ => s
            .parse::<i64>()
            .ok()
            .filter(|t| *t >= 0)
            .map(OffsetSpec::Timestamp)
            .ok_or_else(|| {
                format!("'{s}' is not earliest, latest, max-timestamp or a unix time in ms")
            }),
    }
}

/// Parses an isolation level, Kafka's spelling.
pub fn parse_isolation(s: &str) -> Result<IsolationLevel, String> {
    match s {
        "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
        "read_committed" => Ok(IsolationLevel::ReadCommitted),
        _ => Err(format!("'{s}' is not read_uncommitted or read_committed")),
    }
}

pub async fn run(cmd: Command) -> Result<ExitCode, CliError> {
    match cmd {
        Command::List(a) => list(a).await,
    }
}

async fn list(args: ListArgs) -> Result<ExitCode, CliError> {
    let cluster = args.conn.connect().await?;
    let view = cluster.refresh(Some(&[args.topic.as_str()])).await?;
    let partitions: Vec<(String, i32)> = view
        .topic(&args.topic)?
        .partitions
        .iter()
        .map(|p| (args.topic.clone(), p.partition))
        .collect();
    let offsets = cluster
        .list_offsets(&partitions, args.at, args.isolation)
        .await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "topic": args.topic,
            "partitions": offsets.iter().map(|o| json!({
                "partition": o.partition, "offset": o.offset, "timestamp": o.timestamp,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        for o in &offsets {
            writeln!(
                out,
                "{}\t{}\t{}\t{}",
                o.topic, o.partition, o.offset, o.timestamp
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
