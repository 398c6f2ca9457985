//! `kdirect check`: the pre-deploy health check. Brokers reachable and their API versions
//! usable; the topics exist; every partition has a leader and its whole replica set in sync;
//! the store reachable (and a checkpoint directory writable); stored positions inside the log
//! (else the exact range that would be lost); one record of every non-empty partition fetched
//! and decoded. A ✓/✗ list with a one-line fix for each ✗, `--json`, exit 1 on any ✗.
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use kdirect_commit::{open_store, OffsetStore, OpenOptions, StoreErrorKind, TopicPartition};
use kdirect_engine::cluster::Cluster;
use kdirect_engine::fetch::{fetch_ranges, FetchConfig, OffsetRange};
use kdirect_proto::api::fetch::Fetch;
use kdirect_proto::api::list_offsets::{ListOffsets, OffsetSpec};
use kdirect_proto::api::metadata::Metadata;
use kdirect_proto::IsolationLevel;
use serde_json::json;

use super::common::ConnectArgs;
use super::CliError;

/// Arguments of `kdirect check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnectArgs,
    /// Topic(s), comma-separated.
    #[arg(short, long, value_delimiter = ',', required = true)]
    topic: Vec<String>,
    /// The offset store the job will use (checked for reach, writability and positions).
    #[arg(
        long,
        value_name = "SPEC",
        env = "KDIRECT_STORE",
        hide_env_values = true
    )]
    store: Option<String>,
    /// The consumer group (for stores that keep several).
    #[arg(short, long, value_name = "G", default_value = "kdirect")]
    group: String,
    /// Print JSON instead of the checklist.
    #[arg(long)]
    json: bool,
}

/// One line of the checklist.
struct Check {
    name: String,
    ok: bool,
    detail: String,
    /// What to do about a ✗.
    fix: Option<String>,
}

impl Check {
    fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    let checks = checks(&args).await;
    let failed = checks.iter().any(|c| !c.ok);
    let mut out = crate::cli::report_out();
    if args.json {
        let doc = json!({
            "ok": !failed,
            "checks": checks.iter().map(|c| json!({
                "check": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        for c in &checks {
            writeln!(
                out,
                "{} {}: {}",
                if c.ok { "✓" } else { "✗" },
                c.name,
                c.detail
            )?;
            if let Some(fix) = &c.fix {
                writeln!(out, "    fix: {fix}")?;
            }
        }
    }
    out.flush()?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn checks(args: &Args) -> Vec<Check> {
    let mut checks = Vec::new();
    // Brokers and API versions.
    let cluster = match args.conn.connect().await {
        Ok(c) => Arc::new(c),
        Err(e) => {
            checks.push(Check::fail(
                "brokers",
                e.to_string(),
                "check -b HOST:PORT (the port of a Kafka listener) and security.protocol",
            ));
            return checks;
        }
    };
    let view = match cluster.refresh(None).await {
        Ok(v) => v,
        Err(e) => {
            checks.push(Check::fail(
                "brokers",
                e.to_string(),
                "check that the brokers answer Metadata",
            ));
            return checks;
        }
    };
    let mut unusable = Vec::new();
    let mut versions = String::new();
    for &id in view.brokers.keys() {
        match cluster.connection(id).await {
            Ok(conn) => {
                let v = |name: &str, r: Result<i16, kdirect_engine::Error>| match r {
                    Ok(v) => Ok(format!("{name} v{v}")),
                    Err(e) => Err(e.to_string()),
                };
                let got = [
                    v("Fetch", conn.version::<Fetch>()),
                    v("ListOffsets", conn.version::<ListOffsets>()),
                    v("Metadata", conn.version::<Metadata>()),
                ];
                for g in &got {
                    match g {
                        Ok(s) if versions.len() < 60 && !versions.contains(s.as_str()) => {
                            if !versions.is_empty() {
                                versions.push_str(", ");
                            }
                            versions.push_str(s);
                        }
                        Ok(_) => {}
                        Err(e) => unusable.push(e.clone()),
                    }
                }
            }
            Err(e) => unusable.push(e.to_string()),
        }
    }
    if unusable.is_empty() {
        checks.push(Check::pass(
            "brokers",
            format!(
                "{} reachable, API versions usable ({versions})",
                view.brokers.len()
            ),
        ));
    } else {
        checks.push(Check::fail(
            "brokers",
            unusable.join("; "),
            "every broker must be reachable from here with these settings",
        ));
    }
    // Topics, leaders, replicas.
    let mut partitions: Vec<(String, i32)> = Vec::new();
    for t in &args.topic {
        match view.topic(t) {
            Ok(info) => {
                let no_leader: Vec<String> = info
                    .partitions
                    .iter()
                    .filter(|p| p.leader < 0 || !view.brokers.contains_key(&p.leader))
                    .map(|p| format!("{t}-{}", p.partition))
                    .collect();
                let under: Vec<String> = info
                    .partitions
                    .iter()
                    .filter(|p| p.isr.len() < p.replicas.len())
                    .map(|p| {
                        format!(
                            "{t}-{} ({} of {} in sync)",
                            p.partition,
                            p.isr.len(),
                            p.replicas.len()
                        )
                    })
                    .collect();
                checks.push(Check::pass(
                    format!("topic {t}"),
                    format!("{} partitions", info.partitions.len()),
                ));
                if !no_leader.is_empty() {
                    checks.push(Check::fail(
                        format!("leaders of {t}"),
                        format!("no leader for {}", no_leader.join(", ")),
                        "wait for the controller to elect leaders, or bring their brokers back",
                    ));
                } else if !under.is_empty() {
                    checks.push(Check::fail(
                        format!("replicas of {t}"),
                        format!("under-replicated: {}", under.join(", ")),
                        "bring the missing replicas' brokers back before relying on acks=all data",
                    ));
                } else {
                    checks.push(Check::pass(
                        format!("leaders of {t}"),
                        "every partition has a leader and all its replicas in sync",
                    ));
                }
                partitions.extend(info.partitions.iter().map(|p| (t.clone(), p.partition)));
            }
            Err(e) => {
                let similar = similar_topic(t, view.topics.keys().map(String::as_str));
                checks.push(Check::fail(
                    format!("topic {t}"),
                    e.to_string(),
                    match similar {
                        Some(s) => format!("did you mean '{s}'? (fix -t)"),
                        None => "create the topic, or fix -t".to_owned(),
                    },
                ));
            }
        }
    }
    partitions.sort();
    let iso = IsolationLevel::ReadUncommitted;
    let ends = match tokio::try_join!(
        cluster.list_offsets(&partitions, OffsetSpec::Earliest, iso),
        cluster.list_offsets(&partitions, OffsetSpec::Latest, iso),
    ) {
        Ok((s, e)) => Some((s, e)),
        Err(e) => {
            checks.push(Check::fail(
                "offsets",
                e.to_string(),
                "the partitions' leaders must answer ListOffsets",
            ));
            None
        }
    };
    // The store and its positions.
    if let Some(spec) = &args.store {
        store_checks(
            &mut checks,
            spec,
            &args.group,
            &args.topic,
            &cluster,
            ends.as_ref(),
        )
        .await;
    }
    // One record of every non-empty partition, fetched and decoded.
    if let Some((starts, ends)) = &ends {
        let ranges: Vec<OffsetRange> = starts
            .iter()
            .zip(ends)
            .filter(|(s, e)| e.offset > s.offset)
            .map(|(_, e)| OffsetRange {
                topic: e.topic.clone().into(),
                partition: e.partition,
                from: e.offset - 1,
                until: e.offset,
            })
            .collect();
        let fetched = fetch_ranges(&cluster, &ranges, &FetchConfig::default()).await;
        match fetched {
            Ok(data) => {
                let mut decoded = 0u64;
                let mut bad = Vec::new();
                for d in &data {
                    match d.for_each_record(|_| {}) {
                        Ok(n) => decoded += n,
                        Err(e) => bad.push(e.to_string()),
                    }
                }
                if bad.is_empty() {
                    checks.push(Check::pass(
                        "records",
                        format!(
                            "the last record of {} non-empty partitions fetched and decoded \
                             ({decoded} records)",
                            ranges.len()
                        ),
                    ));
                } else {
                    checks.push(Check::fail(
                        "records",
                        bad.join("; "),
                        "the data does not decode: report it with `kdirect decode` on the batch",
                    ));
                }
            }
            Err(e) => checks.push(Check::fail(
                "records",
                e.to_string(),
                "the partitions' leaders must answer Fetch with these settings",
            )),
        }
    }
    checks
}

async fn store_checks(
    checks: &mut Vec<Check>,
    spec: &str,
    group: &str,
    topics: &[String],
    cluster: &Arc<Cluster>,
    ends: Option<&(
        Vec<kdirect_proto::api::list_offsets::PartitionOffset>,
        Vec<kdirect_proto::api::list_offsets::PartitionOffset>,
    )>,
) {
    let shown = kdirect_commit::redact(spec);
    let mut options = OpenOptions::default();
    options.cluster = Some(cluster.clone());
    options.must_exist = true;
    let store = match open_store(spec, group, &options).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), StoreErrorKind::Missing { .. }) => {
            checks.push(Check::pass(
                "store",
                format!("{shown} does not exist yet: the first run creates it and starts by the start policy"),
            ));
            return;
        }
        Err(e) => {
            checks.push(Check::fail(
                "store",
                e.to_string(),
                "the store must be reachable from here: check its address, credentials and that it runs",
            ));
            return;
        }
    };
    // A checkpoint directory must take new files.
    if let kdirect_commit::StoreSpec::Checkpoint(dir) = match kdirect_commit::StoreSpec::parse(spec)
    {
        Ok(s) => s,
        Err(_) => return,
    } {
        let probe = dir.join(format!(".kdirect-check-{}", std::process::id()));
        match std::fs::write(&probe, b"check").and_then(|()| std::fs::remove_file(&probe)) {
            Ok(()) => {}
            Err(e) => {
                checks.push(Check::fail(
                    "store",
                    format!("{}: not writable: {e}", dir.display()),
                    "give the job's user write access to the checkpoint directory",
                ));
                return;
            }
        }
    }
    let committed = match store.load(topics).await {
        Ok(c) => c,
        Err(e) => {
            checks.push(Check::fail(
                "store",
                e.to_string(),
                "the store answers but its contents do not load: see the error",
            ));
            return;
        }
    };
    checks.push(Check::pass(
        "store",
        format!(
            "{} reachable; {} stored positions{}",
            store.describe(),
            committed.positions.len(),
            committed
                .pending
                .as_ref()
                .map(|p| format!("; batch {} logged, re-run on start", p.id))
                .unwrap_or_default()
        ),
    ));
    let Some((starts, ends)) = ends else { return };
    let mut lost = Vec::new();
    for (s, e) in starts.iter().zip(ends) {
        let tp = TopicPartition::new(e.topic.clone(), e.partition);
        match committed.positions.get(&tp) {
            Some(&p) if p < s.offset => lost.push(format!(
                "{}-{}: offsets [{p}, {}) were removed by retention before they were read",
                e.topic, e.partition, s.offset
            )),
            Some(&p) if p > e.offset => lost.push(format!(
                "{}-{}: stored position {p} is past the end {} (topic re-created or log truncated)",
                e.topic, e.partition, e.offset
            )),
            _ => {}
        }
    }
    if lost.is_empty() {
        checks.push(Check::pass(
            "positions",
            "every stored position is inside its partition's log",
        ));
    } else {
        checks.push(Check::fail(
            "positions",
            lost.join("; "),
            "accept the loss: `kdirect offsets reset --to-earliest --execute` (or run with \
             failOnDataLoss=false)",
        ));
    }
}

/// A topic whose name is close to `t` (a typo), if any.
fn similar_topic<'a>(t: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    kdirect::stream::closest(t, names.filter(|n| !n.starts_with("__")))
}
