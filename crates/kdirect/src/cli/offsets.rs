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
    /// Reset a group's positions with kafka-consumer-groups' vocabulary (--to-earliest,
    /// --to-latest, --to-offset, --to-datetime, --shift-by, --by-duration, --from-file): a dry
    /// run that prints the new positions unless --execute (needs -b).
    Reset(ResetArgs),
    /// Copy a group's positions from one store to another (`--store FROM --to TO`).
    Migrate(MigrateArgs),
    /// Start where a Spark Structured Streaming query stopped: read its checkpoint's offsets/
    /// and commits/ logs and write the Kafka source's positions to a store (a dry run unless
    /// --execute; needs -b to check them against the log).
    ImportSpark(ImportSparkArgs),
    /// Start where a Spark Streaming (DStream) job's own offsets say: read them in the
    /// layouts the articles use — a Redis hash `offset:<topic>:<group>`, a SQL table
    /// `(topic, group_id, partition, offset, timestamp)`, ZooKeeper's
    /// `/consumers/<group>/offsets/<topic>/<partition>`, or the group's offsets in Kafka — and
    /// write them to a store (a dry run unless --execute; needs -b to check them against the
    /// log).
    Import(ImportArgs),
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
        Command::ImportSpark(a) => store_cmd::import_spark(a).await,
        Command::Import(a) => store_cmd::import(a).await,
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
    let mut out = crate::cli::report_out();
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
#[command(group(clap::ArgGroup::new("target").required(true).args([
    "to", "to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by", "by_duration",
    "from_file", "to_current",
])))]
pub struct ResetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic (repeatable, comma-separated).
    #[arg(short, long, value_delimiter = ',', required_unless_present_any = ["all_topics", "from_file"])]
    topic: Vec<String>,
    /// Every topic the store holds positions for.
    #[arg(long, conflicts_with = "topic")]
    all_topics: bool,
    /// `earliest`, `latest`, or a time in ms since the Unix epoch (kdirect's older form).
    #[arg(long, value_parser = parse_spec)]
    to: Option<OffsetSpec>,
    /// Each partition's log start.
    #[arg(long)]
    to_earliest: bool,
    /// Each partition's end.
    #[arg(long)]
    to_latest: bool,
    /// The stored positions as they are (to --export them).
    #[arg(long)]
    to_current: bool,
    /// This offset in every partition (kept within the log).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// The first record at or after this time: `YYYY-MM-DDTHH:mm:SS[.sss][Z|±HH:MM]` (UTC
    /// without a zone, as Kafka's tool reads it in its own zone).
    #[arg(long, value_name = "DATETIME", value_parser = parse_datetime)]
    to_datetime: Option<i64>,
    /// The stored position moved by N (negative: back), kept within the log.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// The first record at or after now minus this ISO-8601 duration (`PT1H`, `P1DT2H30M`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    by_duration: Option<i64>,
    /// Positions from a CSV file as --export writes it (`topic,partition,offset` lines).
    #[arg(long, value_name = "FILE")]
    from_file: Option<std::path::PathBuf>,
    /// Print the new positions as CSV (`topic,partition,offset`), as Kafka's tool does.
    #[arg(long)]
    export: bool,
    /// Write the new positions (without it: a dry run that only prints them).
    #[arg(long, conflicts_with = "dry_run")]
    execute: bool,
    /// Only print the new positions (the default; for scripts that say it).
    #[arg(long)]
    dry_run: bool,
}

/// `2026-12-01T07:00:00`, `…:00.250`, `…Z`, `…+01:00` → ms since the Unix epoch. Anything
/// else, non-ASCII text or a field out of its range included, is the one error.
fn parse_datetime(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}' is not YYYY-MM-DDTHH:mm:SS[.sss][Z|+HH:MM|-HH:MM]");
    // Every slice below is then on a char boundary.
    if !s.is_ascii() {
        return Err(bad());
    }
    let (date, rest) = s.split_once('T').ok_or_else(bad)?;
    // At most 4 characters a field: no sum or product below can overflow.
    let num = |t: &str| {
        (t.len() <= 4)
            .then(|| t.parse::<i64>().ok())
            .flatten()
            .ok_or_else(bad)
    };
    let mut d = date.split('-');
    let (y, mo, da) = (
        num(d.next().ok_or_else(bad)?)?,
        num(d.next().ok_or_else(bad)?)?,
        num(d.next().ok_or_else(bad)?)?,
    );
    // The zone: Z, +HH:MM or -HH:MM at the end, else UTC.
    let (time, offset_min) = if let Some(t) = rest.strip_suffix('Z') {
        (t, 0)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (t, z) = rest.split_at(at);
        let sign = if z.starts_with('-') { -1 } else { 1 };
        let (zh, zm) = z[1..].split_once(':').unwrap_or((&z[1..], "0"));
        (t, sign * (num(zh)? * 60 + num(zm)?))
    } else {
        (rest, 0)
    };
    let mut t = time.split(':');
    let (h, mi) = (
        num(t.next().ok_or_else(bad)?)?,
        num(t.next().ok_or_else(bad)?)?,
    );
    let sec = t.next().unwrap_or("0");
    let (sec, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let ms_part = if frac.is_empty() {
        0
    } else {
        num(&format!("{:0<3}", &frac[..frac.len().min(3)]))?
    };
    // Bounded fields: the arithmetic below cannot overflow.
    if !(0..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&da)
        || !(0..=23).contains(&h)
        || !(0..=59).contains(&mi)
        || !(-24 * 60..=24 * 60).contains(&offset_min)
    {
        return Err(bad());
    }
    let sec = num(sec)?;
    if !(0..=60).contains(&sec) {
        return Err(bad());
    }
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + ms_part)
}

/// `PT1H`, `P1DT2H30M15.5S` → ms.
fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}' is not an ISO-8601 duration (PnDTnHnMnS, e.g. PT1H30M)");
    let body = s.strip_prefix('P').ok_or_else(bad)?;
    let (days, time) = body.split_once('T').unwrap_or((body, ""));
    let mut ms = 0f64;
    let mut take = |part: &str, units: &[(char, f64)]| -> Result<(), String> {
        let mut num = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
                continue;
            }
            let (_, unit) = units.iter().find(|(u, _)| *u == c).ok_or_else(bad)?;
            ms += num.parse::<f64>().map_err(|_| bad())? * unit;
            num.clear();
        }
        if num.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    take(days, &[('D', 86_400_000.0), ('W', 7.0 * 86_400_000.0)])?;
    take(time, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1000.0)])?;
    if body.is_empty() || ms <= 0.0 {
        return Err(bad());
    }
    Ok(ms as i64)
}

/// Arguments of `kdirect offsets migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The store to copy to (same spec syntax as --store). From the environment as
    /// KDIRECT_MIGRATE_TO, so that a password in it need not be typed on a command line (where
    /// `ps` shows it).
    #[arg(
        long,
        value_name = "SPEC",
        env = "KDIRECT_MIGRATE_TO",
        hide_env_values = true
    )]
    to: String,
    /// Only this topic (default: every topic).
    #[arg(short, long)]
    topic: Option<String>,
}

/// Arguments of `kdirect offsets import-spark`.
#[derive(Debug, clap::Args)]
pub struct ImportSparkArgs {
    /// The query's checkpointLocation, a local directory (copy it from HDFS or S3 first): its
    /// `offsets/`, `commits/`, `metadata` and `sources/` are read, nothing in it is written.
    #[arg(value_name = "CHECKPOINT_DIR")]
    checkpoint: std::path::PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// When Spark's last batch was planned but never committed: `committed` takes the last
    /// committed batch's positions (where Spark stopped: the batch's records are read again),
    /// `planned` the uncommitted batch's end (its records are skipped). Without it, such a
    /// checkpoint is refused.
    #[arg(long, value_name = "SIDE", value_parser = parse_take)]
    take: Option<kdirect::admin::Take>,
    /// Which Kafka source to import when the query has several (its index, as in
    /// `sources/<i>/`; comma-separated for several on distinct partitions).
    #[arg(long, value_name = "N", value_delimiter = ',')]
    source: Vec<usize>,
    /// Write the positions (without it: a dry run that only prints them).
    #[arg(long, conflicts_with = "dry_run")]
    execute: bool,
    /// Only print the positions (the default; for scripts that say it).
    #[arg(long)]
    dry_run: bool,
}

/// Arguments of `kdirect offsets import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Where the job kept its offsets: `redis://…`, `postgres://…`, `mysql://…`,
    /// `sqlite:PATH`, `zk://HOST:PORT[/chroot]`, or `kafka` (the group's offsets, through -b).
    #[arg(
        long,
        value_name = "SOURCE",
        env = "KDIRECT_IMPORT_FROM",
        hide_env_values = true
    )]
    from: String,
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// The group the source keeps the offsets under, when it is not -g's.
    #[arg(long, value_name = "G")]
    from_group: Option<String>,
    /// Redis: the hash's key, `{topic}` and `{group}` replaced.
    #[arg(long, value_name = "KEY", default_value = kdirect::admin::REDIS_KEY)]
    from_key: String,
    /// SQL: the table.
    #[arg(long, value_name = "TABLE", default_value = "offsets")]
    from_table: String,
    /// SQL: the columns for topic, group, partition, offset and (optional) the timestamp that
    /// orders a partition's rows, newest first.
    #[arg(
        long,
        value_name = "T,G,P,O[,TS]",
        default_value = "topic,group_id,partition,offset,timestamp"
    )]
    from_columns: String,
    /// A position outside its partition's log is refused (with the range) unless this moves
    /// it inside: below the log start to the start (the records in between are gone), past
    /// the end to the end.
    #[arg(long)]
    clamp: bool,
    #[command(flatten)]
    store: StoreArgs,
    /// Write the positions (without it: a dry run that only prints them).
    #[arg(long, conflicts_with = "dry_run")]
    execute: bool,
    /// Only print the positions (the default; for scripts that say it).
    #[arg(long)]
    dry_run: bool,
}

impl ImportArgs {
    fn layout(&self) -> Result<kdirect::admin::SqlLayout, CliError> {
        let cols: Vec<&str> = self.from_columns.split(',').map(str::trim).collect();
        let (t, g, p, o, ts) = match cols.as_slice() {
            [t, g, p, o] => (t, g, p, o, None),
            [t, g, p, o, ts] => (t, g, p, o, Some((*ts).to_owned())),
            _ => {
                return Err(CliError(format!(
                    "--from-columns '{}': give topic,group,partition,offset[,timestamp] \
                     column names",
                    self.from_columns
                )))
            }
        };
        Ok(kdirect::admin::SqlLayout {
            table: self.from_table.clone(),
            topic: (*t).to_owned(),
            group: (*g).to_owned(),
            partition: (*p).to_owned(),
            offset: (*o).to_owned(),
            timestamp: ts,
        })
    }
}

/// Parses `committed|planned`.
fn parse_take(s: &str) -> Result<kdirect::admin::Take, String> {
    match s {
        "committed" => Ok(kdirect::admin::Take::Committed),
        "planned" => Ok(kdirect::admin::Take::Planned),
        _ => Err(format!("'{s}' is not committed or planned")),
    }
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

    use kdirect::admin::{Admin, AdminError, Import, ResetTo, Source, SparkCheckpoint, Take};
    use kdirect::ErrorKind;
    use kdirect_commit::{Committed, OffsetStore, Positions, TopicPartition};
    use kdirect_proto::api::list_offsets::OffsetSpec;
    use serde_json::json;

    use super::{ImportArgs, ImportSparkArgs, MigrateArgs, ResetArgs, SetArgs, ShowArgs};
    use crate::cli::CliError;

    fn topics(t: &Option<String>) -> Vec<String> {
        t.iter().cloned().collect()
    }

    pub async fn show(args: ShowArgs) -> Result<ExitCode, CliError> {
        let store = args.store.open_existing(&args.store.store, None).await?;
        let c = store.load(&topics(&args.topic)).await?;
        let mut out = crate::cli::report_out();
        if args.json {
            let doc = json!({
                "store": store.describe(),
                "group": args.store.group,
                "batch_id": c.batch_id,
                "pending": c.pending.as_ref().map(|p| json!({
                    "batch_id": p.id,
                    "ranges": p.ranges.iter().map(|r| json!({
                        "topic": r.topic.as_str(), "partition": r.partition, "from": r.from, "until": r.until,
                    })).collect::<Vec<_>>(),
                })),
                "partitions": c.positions.iter().map(|(tp, o)| json!({
                    "topic": tp.topic.as_str(), "partition": tp.partition, "offset": o,
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

    /// Says what a write of `positions` changed.
    fn report_written(before: &Committed, positions: &Positions) -> Result<(), CliError> {
        let mut out = crate::cli::report_out();
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
        let positions: Positions = args
            .positions
            .iter()
            .map(|&(p, o)| (TopicPartition::new(args.topic.clone(), p), o))
            .collect();
        let before = kdirect::admin::set_positions(&store, &positions).await?;
        report_written(&before, &positions)?;
        Ok(ExitCode::SUCCESS)
    }

    pub async fn reset(args: ResetArgs) -> Result<ExitCode, CliError> {
        let cluster = args.store.require_cluster("offsets reset").await?;
        let store = if args.execute {
            args.store
                .open(&args.store.store, Some(cluster.clone()))
                .await?
        } else {
            // A dry run creates nothing.
            args.store
                .open_existing(&args.store.store, Some(cluster.clone()))
                .await?
        };
        let from_file = match &args.from_file {
            Some(path) => Some(read_reset_csv(path)?),
            None => None,
        };
        let mut topics: Vec<String> = if args.all_topics {
            store
                .load(&[])
                .await?
                .positions
                .keys()
                .map(|tp| tp.topic.to_string())
                .collect()
        } else if let Some(f) = &from_file {
            f.keys().map(|tp| tp.topic.to_string()).collect()
        } else {
            args.topic.clone()
        };
        topics.sort();
        topics.dedup();
        if topics.is_empty() {
            return Err(CliError(
                "no topic to reset (the store holds no positions)".into(),
            ));
        }
        let to = if args.to_earliest || args.to == Some(OffsetSpec::Earliest) {
            ResetTo::Earliest
        } else if args.to_latest || args.to == Some(OffsetSpec::Latest) {
            ResetTo::Latest
        } else if let Some(o) = args.to_offset {
            ResetTo::Offset(o)
        } else if let Some(n) = args.shift_by {
            ResetTo::ShiftBy(n)
        } else if args.to_current {
            ResetTo::Current
        } else if let Some(f) = from_file {
            ResetTo::Positions(f)
        } else if let (Some(OffsetSpec::Timestamp(t)), _) | (_, Some(t)) =
            (args.to, args.to_datetime)
        {
            ResetTo::Datetime(t)
        } else if let Some(ms) = args.by_duration {
            ResetTo::ByDuration(std::time::Duration::from_millis(ms.max(0).unsigned_abs()))
        } else {
            return Err(CliError("no reset target given".into()));
        };
        let admin = Admin::from_cluster(cluster.clone());
        let reset = match admin.plan_reset(&store, &topics, &to).await {
            Err(e) if matches!(e.engine_kind(), Some(ErrorKind::UnknownPartition { .. })) => {
                let file = args.from_file.as_ref().map(|p| p.display().to_string());
                let (t, p) = e.partition().unwrap_or_default();
                return Err(CliError(format!(
                    "{}: {t}-{p} is not a partition of the cluster",
                    file.unwrap_or_default()
                )));
            }
            r => r?,
        };
        let (before, positions) = (&reset.before, &reset.positions);
        let mut out = crate::cli::report_out();
        if args.export {
            write!(out, "{}", kdirect::admin::positions_to_csv(positions))?;
        }
        if args.execute {
            drop(out);
            reset.execute(&store).await?;
            report_written(before, positions)?;
        } else if !args.export {
            writeln!(out, "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tNEW-OFFSET")?;
            for (tp, o) in positions {
                let was = before
                    .positions
                    .get(tp)
                    .map_or_else(|| "-".to_owned(), |w| w.to_string());
                writeln!(
                    out,
                    "{}\t{}\t{}\t{was}\t{o}",
                    args.store.group, tp.topic, tp.partition
                )?;
            }
            writeln!(
                out,
                "# dry run: nothing written; add --execute to write these positions"
            )?;
        }
        Ok(ExitCode::SUCCESS)
    }

    /// `topic,partition,offset` lines (as --export and Kafka's tool write them).
    fn read_reset_csv(path: &std::path::Path) -> Result<Positions, CliError> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| CliError(format!("{shown}: {e}")))?;
        kdirect::admin::positions_from_csv(&text).map_err(|e| match e {
            AdminError::Csv { line } => {
                CliError(format!("{shown}:{line}: expected topic,partition,offset"))
            }
            e => CliError(format!("{shown}: {e}")),
        })
    }

    pub async fn migrate(args: MigrateArgs) -> Result<ExitCode, CliError> {
        let cluster = args.store.cluster().await?;
        let from = args
            .store
            .open_existing(&args.store.store, cluster.clone())
            .await?;
        let to = args.store.open(&args.to, cluster).await?;
        let m = kdirect::admin::migrate(&from, &to, &topics(&args.topic)).await?;
        if m.positions.is_empty() {
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
        if let Some(id) = m.source_pending {
            eprintln!(
                "note: batch {id} is logged but not committed in {}; the committed positions \
                 were copied, and the stream re-plans from them",
                from.describe()
            );
        }
        report_written(&m.before, &m.positions)?;
        eprintln!(
            "copied {} positions from {} to {} (batch {})",
            m.positions.len(),
            from.describe(),
            to.describe(),
            m.batch_id
        );
        Ok(ExitCode::SUCCESS)
    }
    /// The notes for the positions an import moved into the log (`--clamp`).
    fn clamp_notes(import: &Import, whose: &str) -> Vec<String> {
        import
            .clamped
            .iter()
            .map(|o| {
                let to = o.log.map_or(o.position, |l| l.clamp(o.position));
                format!("{}; --clamp moves it to {to}", o.describe(whose))
            })
            .collect()
    }

    /// An import's refusal, with the flag that would take a position outside the log.
    fn refused(e: kdirect::Error, clamp: bool) -> CliError {
        match e.admin() {
            Some(AdminError::OutsideLog { .. }) if !clamp => {
                CliError(format!("{e} (--clamp moves positions into the log)"))
            }
            _ => e.into(),
        }
    }

    /// The store an import writes to: opened (created if needed) for `--execute`; for a dry
    /// run only if it exists, so nothing is created. With what it holds for `topics`.
    async fn import_target(
        store: &crate::cli::store::StoreArgs,
        execute: bool,
        cluster: std::sync::Arc<kdirect_engine::cluster::Cluster>,
        topics: &[String],
    ) -> Result<(Option<kdirect_commit::AnyStore>, Committed), CliError> {
        let opened = if execute {
            Some(store.open(&store.store, Some(cluster)).await?)
        } else {
            store.open_if_exists(&store.store, Some(cluster)).await?
        };
        let before = match &opened {
            Some(s) => s.load(topics).await?,
            None => Committed::default(),
        };
        Ok((opened, before))
    }

    /// The last line of an import's dry run: nothing written, and where `--execute` would.
    fn dry_run_trailer(
        out: &mut impl Write,
        store: Option<&kdirect_commit::AnyStore>,
        spec: &str,
        batch_id: u64,
    ) -> Result<(), CliError> {
        writeln!(
            out,
            "# dry run: nothing written; add --execute to write these positions to {} as \
             batch {batch_id}",
            store.map_or_else(
                || format!("{} (not created yet)", kdirect_commit::redact(spec)),
                |s| s.describe()
            )
        )?;
        Ok(())
    }

    pub async fn import(args: ImportArgs) -> Result<ExitCode, CliError> {
        let source = Source::parse(&args.from, args.layout()?, &args.from_key)?;
        let from_group = args
            .from_group
            .clone()
            .unwrap_or_else(|| args.store.group.clone());
        let what = source.describe(&args.topic, &from_group);
        let cluster = args.store.require_cluster("offsets import").await?;
        let import = Admin::from_cluster(cluster.clone())
            .plan_import(&source, &args.topic, &from_group, args.clamp)
            .await
            .map_err(|e| refused(e, args.clamp))?;
        let notes = clamp_notes(&import, "the source's");
        let (store, before) =
            import_target(&args.store, args.execute, cluster, &import.topics()).await?;
        let batch_id = import.batch_id(&before);
        let mut out = crate::cli::report_out();
        writeln!(out, "# from {what}")?;
        for n in &notes {
            writeln!(out, "# {n}")?;
        }
        if !import.unread.is_empty() {
            writeln!(
                out,
                "# not in the source (kdirect consume starts them per --starting): {}",
                list(&import.unread)
            )?;
        }
        if args.execute {
            drop(out);
            let store = store.expect("opened for --execute");
            let done = import.execute(&store).await?;
            report_written(&done.before, &import.positions)?;
            eprintln!(
                "imported {} positions from {what} into {} as batch {}; `kdirect \
                 consume --store …` resumes there",
                import.positions.len(),
                store.describe(),
                done.batch_id
            );
        } else {
            writeln!(out, "TOPIC\tPARTITION\tCURRENT-OFFSET\tNEW-OFFSET")?;
            for (tp, o) in &import.positions {
                let was = before
                    .positions
                    .get(tp)
                    .map_or_else(|| "-".to_owned(), |w| w.to_string());
                writeln!(out, "{}\t{}\t{was}\t{o}", tp.topic, tp.partition)?;
            }
            dry_run_trailer(&mut out, store.as_ref(), &args.store.store, batch_id)?;
        }
        Ok(ExitCode::SUCCESS)
    }

    /// `topic-partition, …`.
    fn list(partitions: &[TopicPartition]) -> String {
        partitions
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub async fn import_spark(args: ImportSparkArgs) -> Result<ExitCode, CliError> {
        use kdirect_commit::StoreErrorKind;
        let ckpt = SparkCheckpoint::read(&args.checkpoint)?;
        let sources = (!args.source.is_empty()).then_some(args.source.as_slice());
        let spark = ckpt
            .resolve(args.take, sources)
            .map_err(|e| match e.kind() {
                StoreErrorKind::SparkUncommitted { .. } => {
                    CliError(format!("{e}: give --take committed or --take planned"))
                }
                StoreErrorKind::SparkSource { .. } if sources.is_none() => {
                    CliError(format!("{e} (--source N picks one)"))
                }
                _ => CliError(e.to_string()),
            })?;
        if args.take.is_some() && spark.uncommitted.is_none() {
            eprintln!(
                "note: Spark's last batch {} is committed; --take changes nothing",
                ckpt.last.id
            );
        }
        // Every position inside its partition's log, every partition known to the cluster.
        let cluster = args.store.require_cluster("offsets import-spark").await?;
        let import = Admin::from_cluster(cluster.clone())
            .plan_import_spark(&spark)
            .await?;
        let (store, before) =
            import_target(&args.store, args.execute, cluster, &import.topics()).await?;
        // An empty store continues Spark's batch ids (the next batch is Spark's next); one
        // that holds batches keeps its own.
        let batch_id = import.batch_id(&before);
        let spark_batch = spark
            .batch_id
            .map_or_else(|| "-".to_owned(), |b| b.to_string());
        let mut out = crate::cli::report_out();
        writeln!(
            out,
            "# Spark checkpoint {}{}",
            ckpt.dir.display(),
            ckpt.query_id
                .as_ref()
                .map(|q| format!(" (query {q})"))
                .unwrap_or_default()
        )?;
        let side = match (spark.batch_id, spark.uncommitted) {
            (Some(b), None) => format!("batch {b} is the last, committed"),
            (Some(b), Some((u, Take::Committed))) => format!(
                "batch {u} was planned but not committed: taking batch {b}'s end (batch {u}'s \
                 records are read again)"
            ),
            (None, _) => "batch 0 was planned but not committed: taking the initial offsets \
                          (batch 0's records are read again)"
                .to_owned(),
            (Some(b), Some(_)) => format!(
                "batch {b} was planned but not committed: taking its end (its records are \
                 skipped)"
            ),
        };
        writeln!(
            out,
            "# {side}; positions from {}, source {}",
            spark.from_file.display(),
            spark
                .sources
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )?;
        if !import.unread.is_empty() {
            writeln!(
                out,
                "# not in Spark's offsets (kdirect consume starts them per --starting): {}",
                list(&import.unread)
            )?;
        }
        if args.execute {
            drop(out);
            let store = store.expect("opened for --execute");
            let done = import.execute(&store).await?;
            report_written(&done.before, &import.positions)?;
            eprintln!(
                "imported {} positions of Spark batch {spark_batch} into {} as batch {}; \
                 `kdirect consume --store …` resumes there",
                import.positions.len(),
                store.describe(),
                done.batch_id
            );
        } else {
            writeln!(out, "TOPIC\tPARTITION\tNEW-OFFSET\tSPARK-BATCH")?;
            for (tp, o) in &import.positions {
                writeln!(out, "{}\t{}\t{o}\t{spark_batch}", tp.topic, tp.partition)?;
            }
            dry_run_trailer(&mut out, store.as_ref(), &args.store.store, batch_id)?;
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_and_durations_as_kafka_tools_write_them() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00").unwrap(), 0);
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20Z").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.250").unwrap(),
            1_700_000_000_250
        );
        assert_eq!(
            parse_datetime("2023-11-14T23:13:20+01:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T17:13:20-05:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2000-02-29T00:00:00Z").unwrap(),
            951_782_400_000
        );
        for bad in [
            "2023-13-01T00:00:00",
            "2023-11-14",
            "yesterday",
            "2023-11-14T25:00:00",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        // Issue 36: non-ASCII fractions panicked on a char boundary, huge fields overflowed;
        // each is the same error as any other malformed date.
        for bad in [
            "2023-11-14T22:13:20.é5",
            "2023-11-14T22:13:20.2€",
            "2023-11-14T22:13:20.€",
            "2023-11-14T22:13:20+€",
            "2023-11-14T22:13:20+01:€",
            "９９９９-01-01T00:00:00",
            "9223372036854775807-01-01T00:00:00",
            "2023-11-14T22:13:9223372036854775807",
            "2023-11-14T22:13:20+9223372036854775807:00",
            "2023-11-14T-1:13:20",
        ] {
            let e = parse_datetime(bad).unwrap_err();
            assert!(e.contains("is not YYYY-MM-DDTHH:mm:SS"), "{bad}: {e}");
        }
        assert_eq!(parse_duration_ms("PT1H").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("P1DT2H30M15.5S").unwrap(), 95_415_500);
        assert_eq!(parse_duration_ms("P2W").unwrap(), 14 * 86_400_000);
        for bad in ["P", "1H", "PT", "PT1X", "PT1"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }
}
