//! `kdirect metadata`: brokers, topics, partitions, leaders (like `kcat -L`).
use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use super::common::ConnectArgs;
use super::CliError;

/// Arguments of `kdirect metadata`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnectArgs,
    /// Only this topic (default: every topic).
    #[arg(short, long)]
    topic: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    let cluster = args.conn.connect().await?;
    let view = match &args.topic {
        Some(t) => {
            let v = cluster.refresh(Some(&[t.as_str()])).await?;
            // Surface an unknown topic as the one-line error it is.
            v.topic(t)?;
            v
        }
        None => cluster.refresh(None).await?,
    };
    let mut out = crate::cli::report_out();
    if args.json {
        let doc = json!({
            "cluster_id": view.cluster_id,
            "controller_id": view.controller_id,
            "brokers": view.brokers.values().map(|b| json!({
                "id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
            })).collect::<Vec<_>>(),
            "topics": view.topics.values().map(|t| json!({
                "topic": t.name,
                "error": t.error.err().map(|e| e.name()),
                "internal": t.internal,
                "partitions": t.partitions.iter().map(|p| json!({
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": p.replicas,
                    "isr": p.isr,
                    "error": p.error.err().map(|e| e.name()),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "Metadata for {} (cluster {}):",
        args.topic.as_deref().unwrap_or("all topics"),
        view.cluster_id.as_deref().unwrap_or("unknown")
    )?;
    writeln!(out, " {} brokers:", view.brokers.len())?;
    for b in view.brokers.values() {
        let ctl = if b.node_id == view.controller_id {
            " (controller)"
        } else {
            ""
        };
        writeln!(out, "  broker {} at {}:{}{ctl}", b.node_id, b.host, b.port)?;
    }
    writeln!(out, " {} topics:", view.topics.len())?;
    for t in view.topics.values() {
        let err = t.error.err().map(|e| format!(": {e}")).unwrap_or_default();
        writeln!(
            out,
            "  topic \"{}\" with {} partitions{err}",
            t.name,
            t.partitions.len()
        )?;
        for p in &t.partitions {
            let err = p
                .error
                .err()
                .map(|e| format!(", error {e}"))
                .unwrap_or_default();
            writeln!(
                out,
                "    partition {}, leader {}, epoch {}, replicas: {}, isrs: {}{err}",
                p.partition,
                p.leader,
                p.leader_epoch,
                join(&p.replicas),
                join(&p.isr)
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}
