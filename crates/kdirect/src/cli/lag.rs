//! `kdirect lag`: per partition, the committed position in a store, the log end, and the lag.
use std::io::Write;
use std::process::ExitCode;

use kdirect_commit::{OffsetStore, TopicPartition};
use kdirect_proto::IsolationLevel;
use serde_json::json;

use super::common::{log_bounds, LogBounds};
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
    /// Print again every SECONDS until stopped.
    #[arg(long, value_name = "SECONDS")]
    watch: Option<f64>,
}

/// One partition's line.
struct Row {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    log_start: i64,
    end: i64,
    lag: Option<i64>,
    /// Offsets between the log start and the committed position: how many records retention
    /// may still remove before it eats unread data (negative: it already did).
    margin: Option<i64>,
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    let cluster = args.store.require_cluster("lag").await?;
    let store = args
        .store
        .open_existing(&args.store.store, Some(cluster.clone()))
        .await?;
    loop {
        report(&args, &cluster, &store).await?;
        let Some(secs) = args.watch else {
            return Ok(ExitCode::SUCCESS);
        };
        tokio::time::sleep(std::time::Duration::from_secs_f64(secs.max(0.1))).await;
    }
}

async fn report(
    args: &Args,
    cluster: &kdirect_engine::cluster::Cluster,
    store: &kdirect_commit::AnyStore,
) -> Result<(), CliError> {
    let committed = store.load(&args.topic).await?;
    let LogBounds { starts, ends, .. } = log_bounds(cluster, &args.topic, args.isolation).await?;
    let rows: Vec<Row> = starts
        .iter()
        .zip(&ends)
        .map(|(s, e)| {
            let committed = committed
                .positions
                .get(&TopicPartition::new(e.topic.clone(), e.partition))
                .copied();
            Row {
                topic: e.topic.clone(),
                partition: e.partition,
                committed,
                log_start: s.offset,
                end: e.offset,
                lag: committed.map(|c| (e.offset - c).max(0)),
                margin: committed.map(|c| c - s.offset),
            }
        })
        .collect();
    // Unknown when no partition has a committed position (not 0: nothing is known); the sum
    // over the known ones otherwise, with how many are unknown said beside it.
    let unknown = rows.iter().filter(|r| r.lag.is_none()).count();
    let total: Option<i64> =
        (unknown < rows.len()).then(|| rows.iter().filter_map(|r| r.lag).sum());
    let min_margin = rows.iter().filter_map(|r| r.margin).min();
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "store": store.describe(),
            "group": args.store.group,
            "batch_id": committed.batch_id,
            "total_lag": total,
            "partitions_without_position": unknown,
            "min_retention_margin": min_margin,
            "partitions": rows.iter().map(|r| json!({
                "topic": r.topic, "partition": r.partition, "committed": r.committed,
                "log_start": r.log_start, "end": r.end, "lag": r.lag,
                "retention_margin": r.margin,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(
            out,
            "topic\tpartition\tcommitted\tlog_start\tend\tlag\tmargin"
        )?;
        let dash = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        for r in &rows {
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                r.topic,
                r.partition,
                dash(r.committed),
                r.log_start,
                r.end,
                dash(r.lag),
                dash(r.margin)
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
        if let Some(m) = min_margin.filter(|m| *m < 0) {
            writeln!(
                out,
                "data lost\t{} offsets below the committed position were removed by retention",
                -m
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
