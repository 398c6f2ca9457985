//! `kdirect offsets …`: partition offsets.
use std::io::Write;
use std::process::ExitCode;

use kdirect_proto::api::list_offsets::OffsetSpec;
use kdirect_proto::IsolationLevel;
use serde_json::json;

use super::common::ConnectArgs;
use super::store::StoreArgs;
use super::CliError;

/// `kdirect offsets` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List each partition's offset at earliest, latest, or a timestamp (ListOffsets).
    List(ListArgs),
    /// Show what an offset store holds for a group: batch id, pending batch, positions.
    Show(ShowArgs),
    /// Set positions in a store: `kdirect offsets set --store S -g G -t T 0=1200 1=900`.
    Set(SetArgs),
    /// Set every partition of a topic to earliest, latest or a timestamp (needs -b).
    Reset(ResetArgs),
    /// Copy a group's positions from one store to another (`--store FROM --to TO`).
    Migrate(MigrateArgs),
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
        Command::Show(a) => store_cmd::show(a).await,
        Command::Set(a) => store_cmd::set(a).await,
        Command::Reset(a) => store_cmd::reset(a).await,
        Command::Migrate(a) => store_cmd::migrate(a).await,
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

/// Arguments of `kdirect offsets show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Only this topic (default: every topic the store holds for the group).
    #[arg(short, long)]
    topic: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `kdirect offsets set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// `PARTITION=OFFSET` pairs (the next offset to read).
    #[arg(required = true, value_parser = parse_assignment)]
    positions: Vec<(i32, i64)>,
}

/// Arguments of `kdirect offsets reset`.
#[derive(Debug, clap::Args)]
pub struct ResetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// `earliest`, `latest`, or a time in ms since the Unix epoch.
    #[arg(long, value_parser = parse_spec)]
    to: OffsetSpec,
}

/// Arguments of `kdirect offsets migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The store to copy to (same spec syntax as --store).
    #[arg(long, value_name = "SPEC")]
    to: String,
    /// Only this topic (default: every topic).
    #[arg(short, long)]
    topic: Option<String>,
}

/// Parses `PARTITION=OFFSET`.
fn parse_assignment(s: &str) -> Result<(i32, i64), String> {
    let (p, o) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not PARTITION=OFFSET"))?;
    let p: i32 = p
        .trim()
        .parse()
        .ok()
        .filter(|p| *p >= 0)
        .ok_or_else(|| format!("'{p}' is not a partition number"))?;
    let o: i64 = o
        .trim()
        .parse()
        .ok()
        .filter(|o| *o >= 0)
        .ok_or_else(|| format!("'{o}' is not an offset"))?;
    Ok((p, o))
}

/// The store subcommands (the store side of issue 6).
mod store_cmd {
    use std::io::Write;
    use std::process::ExitCode;

    use kdirect_commit::{Committed, OffsetStore, Positions, TopicPartition};
    use kdirect_proto::IsolationLevel;
    use serde_json::json;

    use super::{MigrateArgs, ResetArgs, SetArgs, ShowArgs};
    use crate::cli::CliError;

    fn topics(t: &Option<String>) -> Vec<String> {
        t.iter().cloned().collect()
    }

    pub async fn show(args: ShowArgs) -> Result<ExitCode, CliError> {
        let store = args.store.open_existing(&args.store.store, None).await?;
        let c = store.load(&topics(&args.topic)).await?;
        let mut out = std::io::stdout().lock();
        if args.json {
            let doc = json!({
                "store": store.describe(),
                "group": args.store.group,
                "batch_id": c.batch_id,
                "pending": c.pending.as_ref().map(|p| json!({
                    "batch_id": p.id,
                    "ranges": p.ranges.iter().map(|r| json!({
                        "topic": r.topic, "partition": r.partition, "from": r.from, "until": r.until,
                    })).collect::<Vec<_>>(),
                })),
                "partitions": c.positions.iter().map(|(tp, o)| json!({
                    "topic": tp.topic, "partition": tp.partition, "offset": o,
                })).collect::<Vec<_>>(),
            });
            writeln!(out, "{doc}")?;
        } else {
            writeln!(out, "# {}", store.describe())?;
            match c.batch_id {
                Some(b) => writeln!(out, "# last committed batch {b}")?,
                None => writeln!(out, "# no batch committed")?,
            }
            if let Some(p) = &c.pending {
                writeln!(
                    out,
                    "# batch {} is logged but not committed; it is re-run on start:",
                    p.id
                )?;
                for r in &p.ranges {
                    writeln!(out, "#   {r}")?;
                }
            }
            for (tp, o) in &c.positions {
                writeln!(out, "{}\t{}\t{o}", tp.topic, tp.partition)?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    /// Writes `positions` as the batch after the store's last, and says what changed.
    async fn write(
        store: &kdirect_commit::AnyStore,
        before: &Committed,
        batch_id: u64,
        positions: &Positions,
    ) -> Result<(), CliError> {
        store.set_positions(batch_id, positions).await?;
        let mut out = std::io::stdout().lock();
        for (tp, o) in positions {
            let was = before
                .positions
                .get(tp)
                .map_or_else(|| "-".to_owned(), |w| w.to_string());
            writeln!(out, "{}\t{}\t{was} -> {o}", tp.topic, tp.partition)?;
        }
        Ok(())
    }

    pub async fn set(args: SetArgs) -> Result<ExitCode, CliError> {
        // Partitions the topic does not have are refused (checked against the cluster when
        // one is given; said plainly when not).
        match args.store.cluster().await? {
            Some(cluster) => {
                let view = cluster.refresh(Some(&[args.topic.as_str()])).await?;
                let known: Vec<i32> = view
                    .topic(&args.topic)?
                    .partitions
                    .iter()
                    .map(|p| p.partition)
                    .collect();
                if let Some((p, _)) = args.positions.iter().find(|(p, _)| !known.contains(p)) {
                    return Err(CliError(format!(
                        "topic '{}' has no partition {p} (it has {}); nothing was written",
                        args.topic,
                        known.len()
                    )));
                }
            }
            None => eprintln!(
                "note: partitions not checked against the cluster (give -b HOST:PORT to check)"
            ),
        }
        let store = args.store.open(&args.store.store, None).await?;
        let before = store.load(std::slice::from_ref(&args.topic)).await?;
        let positions: Positions = args
            .positions
            .iter()
            .map(|&(p, o)| (TopicPartition::new(args.topic.clone(), p), o))
            .collect();
        write(&store, &before, before.next_batch_id(), &positions).await?;
        Ok(ExitCode::SUCCESS)
    }

    pub async fn reset(args: ResetArgs) -> Result<ExitCode, CliError> {
        let cluster = args.store.require_cluster("offsets reset").await?;
        let store = args
            .store
            .open(&args.store.store, Some(cluster.clone()))
            .await?;
        let before = store.load(std::slice::from_ref(&args.topic)).await?;
        let view = cluster.refresh(Some(&[args.topic.as_str()])).await?;
        let partitions: Vec<(String, i32)> = view
            .topic(&args.topic)?
            .partitions
            .iter()
            .map(|p| (args.topic.clone(), p.partition))
            .collect();
        let offsets = cluster
            .list_offsets(&partitions, args.to, IsolationLevel::ReadUncommitted)
            .await?;
        let mut positions = Positions::new();
        for o in offsets {
            // No record at or after the timestamp: the end.
            let at = if o.offset < 0 {
                cluster
                    .list_offsets(
                        &[(o.topic.clone(), o.partition)],
                        kdirect_proto::api::list_offsets::OffsetSpec::Latest,
                        IsolationLevel::ReadUncommitted,
                    )
                    .await?[0]
                    .offset
            } else {
                o.offset
            };
            positions.insert(TopicPartition::new(o.topic, o.partition), at);
        }
        write(&store, &before, before.next_batch_id(), &positions).await?;
        Ok(ExitCode::SUCCESS)
    }

    pub async fn migrate(args: MigrateArgs) -> Result<ExitCode, CliError> {
        let cluster = args.store.cluster().await?;
        let from = args
            .store
            .open_existing(&args.store.store, cluster.clone())
            .await?;
        let to = args.store.open(&args.to, cluster).await?;
        let src = from.load(&topics(&args.topic)).await?;
        if src.positions.is_empty() {
            return Err(CliError(format!(
                "{} holds no positions for group '{}'{}",
                from.describe(),
                args.store.group,
                args.topic
                    .as_ref()
                    .map(|t| format!(" and topic {t}"))
                    .unwrap_or_default()
            )));
        }
        if let Some(p) = &src.pending {
            eprintln!(
                "note: batch {} is logged but not committed in {}; the committed positions are \
                 copied, and the stream re-plans from them",
                p.id,
                from.describe()
            );
        }
        let dest = to.load(&topics(&args.topic)).await?;
        // An empty destination continues the source's batch ids; otherwise its own.
        let batch_id = if dest.batch_id.is_none() && dest.pending.is_none() {
            src.batch_id.unwrap_or(0)
        } else {
            dest.next_batch_id()
        };
        write(&to, &dest, batch_id, &src.positions).await?;
        eprintln!(
            "copied {} positions from {} to {} (batch {batch_id})",
            src.positions.len(),
            from.describe(),
            to.describe()
        );
        Ok(ExitCode::SUCCESS)
    }
}
