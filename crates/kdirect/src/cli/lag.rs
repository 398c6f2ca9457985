//! `kdirect lag`: per partition, the committed position in a store, the log end, and the lag;
//! for a group with members, each partition's owner and the group's state (DescribeGroups at
//! the group's coordinator), as `kafka-consumer-groups --describe` shows them, and with
//! `--members` one line per member, as `--describe --members` does.
use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use kdirect::admin::Admin;
use kdirect_commit::OffsetStore;
use kdirect_proto::api::describe_groups::{GroupDescription, MemberDescription};
use kdirect_proto::IsolationLevel;
use serde_json::{json, Value};

use super::offsets::parse_isolation;
use super::store::StoreArgs;
use super::CliError;

/// Arguments of `kdirect lag`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: StoreArgs,
    /// Topic(s), comma-separated.
    #[arg(
        short,
        long,
        value_delimiter = ',',
        required_unless_present = "members"
    )]
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
    /// Print the group's members instead, one line each: consumer id, group instance id,
    /// host, client id, how many partitions and which (as `kafka-consumer-groups --describe
    /// --members --verbose` writes them: `topic:0,1;other:2`); needs no store or topic.
    #[arg(long)]
    members: bool,
}

pub async fn run(args: Args) -> Result<ExitCode, CliError> {
    let cluster = args.store.require_cluster("lag").await?;
    let admin = Admin::from_cluster(cluster.clone());
    if args.members {
        loop {
            members_report(&args, &admin).await?;
            let Some(secs) = args.watch else {
                return Ok(ExitCode::SUCCESS);
            };
            tokio::time::sleep(std::time::Duration::from_secs_f64(secs.max(0.1))).await;
        }
    }
    let store = args
        .store
        .open_existing(&args.store.store, Some(cluster.clone()))
        .await?;
    loop {
        report(&args, &admin, &store).await?;
        let Some(secs) = args.watch else {
            return Ok(ExitCode::SUCCESS);
        };
        tokio::time::sleep(std::time::Duration::from_secs_f64(secs.max(0.1))).await;
    }
}

async fn report(
    args: &Args,
    admin: &Admin,
    store: &kdirect_commit::AnyStore,
) -> Result<(), CliError> {
    let lag = admin.lag(store, &args.topic, args.isolation).await?;
    // The group's members, if it has any: a lag report without them is still worth printing,
    // so a failure to describe the group is said on stderr (and in the JSON), not fatal.
    let described = admin.describe_group(&args.store.group).await;
    let members_error = described.as_ref().err().map(|e| {
        let e = e.to_string();
        if e.contains(&format!("group '{}'", args.store.group)) {
            e
        } else {
            format!("group '{}': {e}", args.store.group)
        }
    });
    // A broker without DescribeGroups (kdirect's fake broker) has no members to show: said
    // in the JSON only, not on every run.
    if let Some(e) = members_error
        .as_ref()
        .filter(|e| !e.contains("no common version"))
    {
        eprintln!(
            "kdirect lag: members not shown: {}",
            super::printable(&e.to_string())
        );
    }
    let group = described.ok();
    let active = group.as_ref().filter(|g| g.is_active());
    let owners = active.map(owners).unwrap_or_default();
    // Unknown when no partition has a committed position (not 0: nothing is known); the sum
    // over the known ones otherwise, with how many are unknown said beside it.
    let unknown = lag.without_position();
    let total = lag.total();
    let min_margin = lag.min_margin();
    let mut out = crate::cli::report_out();
    if args.json {
        let doc = json!({
            "store": store.describe(),
            "group": args.store.group,
            "batch_id": lag.batch_id,
            "total_lag": total,
            "partitions_without_position": unknown,
            "min_retention_margin": min_margin,
            "state": group.as_ref().map(|g| g.state.as_str()),
            "protocol": active.map(|g| g.protocol.as_str()),
            "members": active.map_or_else(Vec::new, |g| sorted(g).into_iter().map(member_json).collect()),
            "members_error": members_error,
            "partitions": lag.partitions.iter().map(|(tp, r)| {
                let owner = owners.get(&(&*tp.topic, tp.partition));
                json!({
                    "topic": &*tp.topic, "partition": tp.partition, "committed": r.committed,
                    "log_start": r.log.start, "end": r.log.end, "lag": r.lag(),
                    "retention_margin": r.margin(),
                    "consumer_id": owner.map(|m| m.member_id.as_str()),
                    "host": owner.map(|m| m.client_host.as_str()),
                    "client_id": owner.map(|m| m.client_id.as_str()),
                })
            }).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        write!(
            out,
            "topic\tpartition\tcommitted\tlog_start\tend\tlag\tmargin"
        )?;
        if active.is_some() {
            write!(out, "\tconsumer_id\thost\tclient_id")?;
        }
        writeln!(out)?;
        let dash = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        for (tp, r) in &lag.partitions {
            write!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                tp.topic,
                tp.partition,
                dash(r.committed),
                r.log.start,
                r.log.end,
                dash(r.lag()),
                dash(r.margin())
            )?;
            if active.is_some() {
                match owners.get(&(&*tp.topic, tp.partition)) {
                    Some(m) => {
                        write!(out, "\t{}\t{}\t{}", m.member_id, m.client_host, m.client_id)?
                    }
                    None => write!(out, "\t-\t-\t-")?,
                }
            }
            writeln!(out)?;
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
        if let Some(g) = active {
            writeln!(out, "group state\t{}", state_line(g))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `--members`: one line per member of the group (none for an empty or dead group).
async fn members_report(args: &Args, admin: &Admin) -> Result<(), CliError> {
    let g = admin.describe_group(&args.store.group).await?;
    let members = if g.is_active() {
        sorted(&g)
    } else {
        Vec::new()
    };
    let mut out = crate::cli::report_out();
    if args.json {
        let doc = json!({
            "group": args.store.group,
            "state": g.state,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol,
            "members": members.iter().copied().map(member_json).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(
            out,
            "consumer_id\tgroup_instance_id\thost\tclient_id\t#partitions\tassignment"
        )?;
        for m in &members {
            let (count, assignment) = match &m.assignment_error {
                Some(e) => ("-".to_owned(), format!("undecodable: {e}")),
                None => (
                    m.partitions()
                        .iter()
                        .map(|(_, ps)| ps.len())
                        .sum::<usize>()
                        .to_string(),
                    assignment_text(m),
                ),
            };
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}",
                m.member_id,
                m.group_instance_id.as_deref().unwrap_or("-"),
                m.client_host,
                m.client_id,
                count,
                assignment
            )?;
        }
        writeln!(out, "group state\t{}", state_line(&g))?;
    }
    out.flush()?;
    Ok(())
}

/// Each assigned partition's member.
fn owners(g: &GroupDescription) -> HashMap<(&str, i32), &MemberDescription> {
    let mut owners = HashMap::new();
    for m in &g.members {
        for (topic, ps) in m.partitions() {
            for p in ps {
                owners.insert((topic.as_str(), *p), m);
            }
        }
    }
    owners
}

/// The members by consumer id.
fn sorted(g: &GroupDescription) -> Vec<&MemberDescription> {
    let mut ms: Vec<&MemberDescription> = g.members.iter().collect();
    ms.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    ms
}

/// `Stable (2 members, assignor range)`, or `Empty (no active members)`.
fn state_line(g: &GroupDescription) -> String {
    let state = if g.state.is_empty() { "-" } else { &g.state };
    if g.members.is_empty() {
        return format!("{state} (no active members)");
    }
    let n = g.members.len();
    let s = if n == 1 { "" } else { "s" };
    if g.protocol.is_empty() {
        format!("{state} ({n} member{s})")
    } else {
        format!("{state} ({n} member{s}, assignor {})", g.protocol)
    }
}

/// `events:0,2;logs:1`, as Kafka 4's `kafka-consumer-groups --describe --members --verbose`
/// writes an assignment (topics in order, partitions in numeric order); `-` for none.
fn assignment_text(m: &MemberDescription) -> String {
    let mut topics: Vec<(&str, Vec<i32>)> = m
        .partitions()
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| {
            let mut ps = ps.clone();
            ps.sort_unstable();
            (t.as_str(), ps)
        })
        .collect();
    if topics.is_empty() {
        return "-".to_owned();
    }
    topics.sort();
    topics
        .iter()
        .map(|(t, ps)| {
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{t}:{}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn member_json(m: &MemberDescription) -> Value {
    let mut partitions: Vec<(&str, i32)> = m
        .partitions()
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), *p)))
        .collect();
    partitions.sort_unstable();
    json!({
        "consumer_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "host": m.client_host,
        "client_id": m.client_id,
        "partitions": partitions.iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>(),
        "assignment_error": m.assignment_error.as_ref().map(ToString::to_string),
    })
}
