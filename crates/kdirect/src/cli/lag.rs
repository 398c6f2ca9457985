//! `kdirect lag`: per partition, the committed position in a store, the log end, and the lag.
use std::io::Write;
use std::process::ExitCode;

use kdirect_commit::{OffsetStore, TopicPartition};
use kdirect_proto::api::list_offsets::OffsetSpec;
use kdirect_proto::IsolationLevel;
use serde_json::json;

use super::offsets::parse_isolation;
use super::store::StoreArgs;
use super::CliError;

/// Arguments of `kdirect lag`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: StoreArgs,
    /// Topic(s), comma-separated.
    #[arg(short, long, value_delimiter = ',', required = true)]
    topic: Vec<String>,
    /// `read_uncommitted` (end = high watermark) or `read_committed` (end = last stable offset).
    #[arg(long, default_value = "read_uncommitted", value_parser = parse_isolation)]
    isolation: IsolationLevel,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One partition's line.
struct Row {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    end: i64,
    lag: Option<i64>,
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    let cluster = args.store.require_cluster("lag").await?;
    let store = args
        .store
        .open_existing(&args.store.store, Some(cluster.clone()))
        .await?;
    let committed = store.load(&args.topic).await?;
    let names: Vec<&str> = args.topic.iter().map(String::as_str).collect();
    let view = cluster.refresh(Some(&names)).await?;
    let mut partitions = Vec::new();
    for t in &args.topic {
        for p in &view.topic(t)?.partitions {
            partitions.push((t.clone(), p.partition));
        }
    }
    let ends = cluster
        .list_offsets(&partitions, OffsetSpec::Latest, args.isolation)
        .await?;
    let rows: Vec<Row> = ends
        .iter()
        .map(|e| {
            let committed = committed
                .positions
                .get(&TopicPartition::new(e.topic.clone(), e.partition))
                .copied();
            Row {
                topic: e.topic.clone(),
                partition: e.partition,
                committed,
                end: e.offset,
                lag: committed.map(|c| (e.offset - c).max(0)),
            }
        })
        .collect();
    // Unknown when no partition has a committed position (not 0: nothing is known); the sum
    // over the known ones otherwise, with how many are unknown said beside it.
    let unknown = rows.iter().filter(|r| r.lag.is_none()).count();
    let total: Option<i64> =
        (unknown < rows.len()).then(|| rows.iter().filter_map(|r| r.lag).sum());
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "store": store.describe(),
            "group": args.store.group,
            "batch_id": committed.batch_id,
            "total_lag": total,
            "partitions_without_position": unknown,
            "partitions": rows.iter().map(|r| json!({
                "topic": r.topic, "partition": r.partition, "committed": r.committed,
                "end": r.end, "lag": r.lag,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(out, "topic\tpartition\tcommitted\tend\tlag")?;
        let dash = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        for r in &rows {
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}",
                r.topic,
                r.partition,
                dash(r.committed),
                r.end,
                dash(r.lag)
            )?;
        }
        match (total, unknown) {
            (None, _) => writeln!(out, "total lag\t- (no committed position in this store)")?,
            (Some(t), 0) => writeln!(out, "total lag\t{t}")?,
            (Some(t), n) => writeln!(
                out,
                "total lag\t{t} (plus {n} partitions without a committed position)"
            )?,
        }
    }
    Ok(ExitCode::SUCCESS)
}
