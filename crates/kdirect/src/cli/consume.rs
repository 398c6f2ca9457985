//! `kdirect consume`: read topics batch by batch in the Direct model and print the records.
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kdirect::engine::plan::StartPolicy;
use kdirect::proto::IsolationLevel;
use kdirect::sink::cover::{Cover, Resumed};
#[cfg(feature = "delta")]
use kdirect::sink::delta::{DeltaOptions, DeltaSink};
use kdirect::sink::parquet::{ParquetCompression, ParquetOptions, ParquetSink};
use kdirect::sink::{BatchWriter, JsonLinesSink, LineFormat, Sink};
use kdirect::stream::DirectStream;
use kdirect::Batch;
use kdirect::{parse_trigger, starting_offsets_json, Ending, Trigger};

use super::common::ConnectArgs;
use super::decode::{push_record_json, BytesFormat};
use super::offsets::parse_isolation;
use super::progress::{self, note, Mode, Reporter};
use super::CliError;

/// Arguments of `kdirect consume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnectArgs,
    /// Topic(s), comma-separated; a single `^regex` subscribes by pattern, as kcat's `-t ^…`.
    #[arg(
        short,
        long,
        value_delimiter = ',',
        required_unless_present = "pattern"
    )]
    topic: Vec<String>,
    /// Every topic whose name matches this regular expression (Spark's subscribePattern),
    /// internal topics excepted; topics created while it runs are read from their start.
    #[arg(long, value_name = "REGEX", conflicts_with = "topic")]
    pattern: Option<String>,
    /// Only these partitions (of every topic), comma-separated.
    #[arg(short, long, value_delimiter = ',')]
    partitions: Option<Vec<i32>>,
    /// Where partitions start: `earliest`, `latest`, a time in ms since the Unix epoch, `none`
    /// (an error naming partitions that have no position), or Spark's offsets JSON
    /// `{"t":{"0":23,"1":-2}}` (-2 earliest, -1 latest; every partition read listed).
    #[arg(long, default_value = "earliest", value_parser = parse_start)]
    starting: StartPolicy,
    /// kcat's start forms: `beginning`, `end`, `stored` (the store's positions; a partition
    /// without one is an error), an offset `N`, `-N` (N before the end), `s@MS` (the first
    /// record at or after a time) or `e@MS` (stop at the first record at or after a time).
    #[arg(short = 'o', long = "offset", value_name = "START", value_parser = parse_kcat_offset, conflicts_with = "starting", allow_hyphen_values = true)]
    offset: Option<KcatOffset>,
    /// Exit at the end of the topic (as kcat's `-e`; the same as `--until-latest`).
    #[arg(short = 'e')]
    exit_at_end: bool,
    /// Stop after this many records (as kcat's `-c`). Not with `--store`: a batch is
    /// committed whole, so a count that ends inside one would commit records never printed.
    #[arg(short = 'c', long = "count", value_name = "N", conflicts_with_all = ["store", "output_dir"])]
    count: Option<u64>,
    /// Stop once the end offsets seen at start are reached, and exit 0 (the same as
    /// `--trigger available-now`).
    #[arg(long)]
    until_latest: bool,
    /// When batches start: `as-fast-as-possible` (default), `processing-time=<ms>` (at most one
    /// batch per interval; also the batch interval of the rates) or `available-now`
    /// (everything up to the ends seen at start, then exit 0). Rate limits hold in
    /// wall-clock time with any trigger.
    #[arg(long, value_name = "TRIGGER", value_parser = parse_trigger_arg)]
    trigger: Option<Trigger>,
    /// Stop at these offsets (exclusive), then exit 0: `latest` (the ends seen at start) or
    /// Spark's offsets JSON `{"t":{"0":100,"1":-1}}` (every partition read; -1 latest).
    #[arg(long, value_name = "OFFSETS", conflicts_with = "ending_timestamp")]
    ending_offsets: Option<String>,
    /// Stop, per partition, at the first record at or after this time (ms since the Unix
    /// epoch), then exit 0 (Spark's endingTimestamp).
    #[arg(long, value_name = "MS")]
    ending_timestamp: Option<i64>,
    /// The batch interval the per-second rates are multiplied by (Spark's batch duration).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    batch_interval_ms: u64,
    /// At most this many offsets per batch, split across partitions by lag
    /// (Structured Streaming's maxOffsetsPerTrigger).
    #[arg(long, value_name = "N")]
    max_offsets_per_batch: Option<u64>,
    /// At most this many records per partition per second of batch interval
    /// (Spark's maxRatePerPartition).
    #[arg(long, value_name = "R")]
    max_rate_per_partition: Option<u64>,
    /// The least a partition takes per batch under a rate (Spark's minRatePerPartition).
    #[arg(long, value_name = "N")]
    min_rate_per_partition: Option<u64>,
    /// PID backpressure: the rate follows how fast the output takes the records
    /// (spark.streaming.backpressure.enabled).
    #[arg(long)]
    backpressure: bool,
    /// Hold a batch back until this many offsets are available (minOffsetsPerTrigger)…
    #[arg(long, value_name = "N")]
    min_offsets_per_batch: Option<u64>,
    /// …but no longer than this (maxTriggerDelay).
    #[arg(long, value_name = "MS", requires = "min_offsets_per_batch")]
    max_trigger_delay_ms: Option<u64>,
    /// `false`: when records are gone before they were read (retention, a re-created topic),
    /// report the lost range and go on from the log start; when records already read were
    /// truncated by a leader change (KIP-320), report them and go on where the new leader's
    /// log diverges (failOnDataLoss).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    fail_on_data_loss: bool,
    /// Show progress on stderr. On a terminal a line redrawn in place (records, records/s,
    /// bytes/s, the lag left; under an ending such as --until-latest the percentage done and
    /// an ETA; with --join the partitions owned) is shown by default; elsewhere (a pipe, a
    /// file, a journal) nothing unless --progress, which prints a plain `key=value` line
    /// every --progress-interval seconds. A summary line follows at exit.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
    /// Plain progress lines this many seconds apart, on a terminal too (implies --progress;
    /// default 10 without a terminal); 0: one line per batch (id, records, offsets, the
    /// batch's records/s).
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval, conflicts_with = "quiet")]
    progress_interval: Option<Duration>,
    /// No progress line and no summary, not even on a terminal (warnings and log lines still
    /// go to stderr).
    #[arg(short = 'q', long)]
    quiet: bool,
    /// read_uncommitted or read_committed.
    #[arg(long, default_value = "read_uncommitted", value_parser = parse_isolation)]
    isolation: IsolationLevel,
    /// `-` for stdout, a file path, or `null` to read every byte and print nothing.
    #[arg(long, default_value = "-")]
    output: String,
    /// kcat's -J: one JSON object per record with kcat's field names (`topic`, `partition`,
    /// `offset`, `tstype`, `ts`, `headers` as [key, value, …], `key`, `payload`; text as
    /// UTF-8, invalid bytes replaced).
    #[arg(short = 'J', conflicts_with_all = ["format", "output_dir"])]
    kcat_json: bool,
    /// kcat's -f: a format per record: %t topic, %p partition, %o offset, %k key, %s value,
    /// %K key size, %S value size (-1 when null), %T timestamp, %h headers (k=v,…), %% a %,
    /// \n \t \\ escapes. Keys and values are written as they are (raw bytes).
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FMT",
        conflicts_with = "output_dir"
    )]
    format: Option<String>,
    /// kcat's -K: print `KEY<DELIM>VALUE` per line (raw bytes) instead of JSON.
    #[arg(short = 'K', value_name = "DELIM", conflicts_with_all = ["format", "output_dir"])]
    key_delimiter: Option<String>,
    /// kcat's -u: write each record at once (output is otherwise written once per batch).
    #[arg(short = 'u')]
    unbuffered: bool,
    /// Serve Prometheus metrics on this address (`GET /metrics`): records and bytes, batches,
    /// per-partition position, end, log start and lag, fetch and commit durations, reconnect
    /// attempts, memory budget in use. On threads of its own, at most 16 connections at once,
    /// a request head within 5 s and 8 KiB.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Who may scrape --metrics-addr: addresses or networks, `ADDR[/PREFIX],…`
    /// (`127.0.0.1,10.0.0.0/8`); others are closed unanswered. Default: anyone who can reach
    /// the address.
    #[arg(long, value_name = "ADDR[/PREFIX],…", requires = "metrics_addr")]
    metrics_allow: Option<String>,
    /// Encoding of keys, values and header values.
    #[arg(long = "bytes", value_enum, default_value_t = BytesFormat::Base64)]
    bytes: BytesFormat,
    /// Print one final line of statistics to stderr.
    #[arg(long)]
    stats: bool,
    /// max.partition.fetch.bytes
    #[arg(long, default_value_t = 1_048_576)]
    max_partition_fetch_bytes: i32,
    /// fetch.max.bytes
    #[arg(long, default_value_t = 52_428_800)]
    fetch_max_bytes: i32,
    /// The memory budget for fetched-but-unreleased data, in MiB.
    #[arg(long, default_value_t = 64)]
    memory_mib: usize,
    /// check.crcs
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    check_crcs: bool,
    /// Where committed offsets live: `checkpoint:DIR` (also `checkpoint:s3://BUCKET/PREFIX`,
    /// `checkpoint:az://CONTAINER/PREFIX` and `checkpoint:hdfs://NAMENODE:PORT/PATH`),
    /// `kafka`, `sqlite:PATH`, `postgres://…`, `mysql://…`, `redis://…` or
    /// `zk://HOST:PORT[/chroot]`. Without it, positions live in memory only.
    #[arg(
        long,
        value_name = "SPEC",
        env = "KDIRECT_STORE",
        hide_env_values = true
    )]
    store: Option<String>,
    /// The consumer group the offsets are stored under (not used by `checkpoint:`).
    #[arg(short, long, value_name = "G", default_value = "kdirect")]
    group: String,
    /// Join the group (--group) as a balanced consumer, as kcat's -G does: the processes
    /// that join the same group share the topics' partitions, and Kafka's tools list them as
    /// members. The store defaults to the group's offsets in Kafka (at-least-once); a SQL
    /// store with --sink-table is exactly-once. Not with a checkpoint store (one writer).
    #[arg(long, conflicts_with_all = ["partitions", "until_latest", "exit_at_end", "count"])]
    join: bool,
    /// kcat's balanced consumer: `-G GROUP` is `--group GROUP --join`.
    #[arg(short = 'G', value_name = "GROUP", conflicts_with_all = ["group", "partitions", "until_latest", "exit_at_end", "count"])]
    join_group: Option<String>,
    /// Static membership (`group.instance.id`, KIP-345): a member restarted within
    /// --session-timeout-ms gets its partitions back without a rebalance.
    #[arg(long, value_name = "ID")]
    group_instance_id: Option<String>,
    /// `session.timeout.ms` for --join (the broker's bounds: 6000 to 1800000 by default).
    #[arg(long, value_name = "MS")]
    session_timeout_ms: Option<u64>,
    /// `max.poll.interval.ms` for --join: a batch held longer leaves the group and its
    /// commit is refused.
    #[arg(long, value_name = "MS")]
    max_poll_interval_ms: Option<u64>,
    /// `partition.assignment.strategy` for --join: range, roundrobin, cooperative-sticky
    /// (comma-separated, in order of preference; default range,roundrobin). With
    /// cooperative-sticky alone a member keeps its partitions through a rebalance (KIP-429).
    /// With --group-protocol consumer: the coordinator's assignor, uniform or range
    /// (`group.remote.assignor`).
    #[arg(long, value_name = "LIST")]
    assignor: Option<String>,
    /// `group.protocol` for --join: classic (every broker), or consumer (KIP-848, Kafka 4.0+:
    /// the coordinator assigns, members keep their partitions through a rebalance).
    #[arg(long, value_name = "PROTOCOL", value_parser = ["classic", "consumer"])]
    group_protocol: Option<String>,
    /// The idempotent file sink: one file per batch, `DIR/<batchId>.jsonl`, written atomically
    /// (a re-run batch replaces its file). Replaces `--output`.
    #[arg(long, value_name = "DIR", conflicts_with = "output")]
    output_dir: Option<PathBuf>,
    /// SQL stores: insert the records into this table (created if missing) in the same
    /// transaction as the offsets — exactly-once. Replaces `--output`.
    #[arg(long, value_name = "NAME", requires = "store", conflicts_with_all = ["output", "output_dir"])]
    sink_table: Option<String>,
    /// Where the records go, exactly-once with no --store: `parquet:DIR`, one Parquet file per
    /// batch in Spark's Kafka schema (`DIR/part-<batchId>-000.parquet`, hidden until
    /// committed), its positions and file lists in `DIR/_kdirect_metadata` (a checkpoint
    /// directory: a restart resumes from it); DIR may be `s3://BUCKET/PREFIX` or
    /// `az://CONTAINER/PREFIX` (the same layout, credentials and endpoint from the AWS_* or
    /// AZURE_STORAGE_* environment as for checkpoint:s3://); or `delta:PATH` (a build with the `delta`
    /// feature), a Delta Lake table (created if missing) whose commits add each batch's
    /// Parquet file and move its partitions' `txn` actions (kafka-delta-ingest's layout,
    /// `<topic>-<partition>`, or `delta:PATH?app_id=ID` for `<ID>-<partition>`) in one Delta
    /// transaction: the table is the store; PATH may be `s3://BUCKET/PREFIX` or
    /// `az://CONTAINER/PREFIX` too. With --join (-G) each member commits its own partitions'
    /// `txn`s to the one table (parquet: refuses a group: its log orders one writer's
    /// batches). Replaces `--output`.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["output", "output_dir", "sink_table", "store", "count"])]
    sink: Option<String>,
    /// `--sink parquet:`'s page compression: zstd (level 3), snappy or none.
    #[arg(long, value_name = "CODEC", default_value = "zstd", requires = "sink")]
    parquet_compression: ParquetCompression,
    /// `--sink parquet:`'s rows per row group at most.
    #[arg(long, value_name = "ROWS", default_value_t = 1024 * 1024, requires = "sink")]
    parquet_row_group_rows: usize,
    /// `--sink parquet:`/`delta:`: decode each value as one JSON object of this schema,
    /// written as Spark SQL's DDL (`'id BIGINT NOT NULL, name STRING, tags ARRAY<STRING>'`, as
    /// Spark's `from_json` takes it; `@FILE` reads it from a file): its fields become the
    /// first columns, then the Kafka columns but `value`. Fields the schema does not name
    /// are ignored, a missing field is null; a value that is not one JSON object of the
    /// schema fails the batch, naming its topic, partition and offset (nothing is skipped).
    #[arg(long, value_name = "DDL", requires = "sink")]
    value_schema: Option<String>,
}

/// A `--sink` that is its own offset store.
#[derive(Debug)]
enum TableSink {
    Parquet(ParquetSink),
    #[cfg(feature = "delta")]
    Delta(DeltaSink),
}

/// `--sink parquet:DIR` or `--sink delta:PATH`: the sink (its log becomes the stream's store).
async fn open_sink(args: &Args) -> Result<Option<TableSink>, CliError> {
    let Some(spec) = &args.sink else {
        return Ok(None);
    };
    if let Some(path) = spec.strip_prefix("delta:") {
        return open_delta(args, spec, path).await.map(Some);
    }
    let Some(dir) = spec.strip_prefix("parquet:") else {
        return Err(CliError(format!(
            "--sink '{spec}': the sinks are parquet:DIR and delta:PATH (and --output-dir DIR for \
             JSON lines)"
        )));
    };
    if dir.is_empty() {
        return Err(CliError(
            "--sink parquet: needs a directory, e.g. parquet:/data/events".into(),
        ));
    }
    let options = parquet_options(args)?;
    if dir.starts_with("s3://") || dir.starts_with("az://") {
        // The checkpoint's clients and environment (AWS_*, AZURE_STORAGE_*).
        let sink = ParquetSink::open_object(dir, options, &[]).await?;
        return Ok(Some(TableSink::Parquet(sink)));
    }
    if dir.contains("://") {
        return Err(CliError(format!(
            "--sink '{spec}': the Parquet sink writes to a local directory, s3://BUCKET/PREFIX \
             or az://CONTAINER/PREFIX (HDFS is not done yet)"
        )));
    }
    Ok(Some(TableSink::Parquet(ParquetSink::open(dir, options)?)))
}

/// The data files' options: `--parquet-*`, `--value-schema`.
fn parquet_options(args: &Args) -> Result<ParquetOptions, CliError> {
    let options = ParquetOptions::default()
        .compression(args.parquet_compression)
        .row_group_rows(args.parquet_row_group_rows);
    let Some(ddl) = &args.value_schema else {
        return Ok(options);
    };
    let ddl = match ddl.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| CliError(format!("--value-schema @{file}: {e}")))?,
        None => ddl.clone(),
    };
    value_schema(options, &ddl)
}

#[cfg(feature = "json-values")]
fn value_schema(options: ParquetOptions, ddl: &str) -> Result<ParquetOptions, CliError> {
    let schema = kdirect::sink::ddl::parse(ddl.trim())
        .map_err(|e| CliError(format!("--value-schema: {e}")))?;
    options
        .json_values(schema)
        .map_err(|e| CliError(format!("--value-schema: {e}")))
}

#[cfg(not(feature = "json-values"))]
fn value_schema(_: ParquetOptions, _: &str) -> Result<ParquetOptions, CliError> {
    Err(CliError(
        "--value-schema: this kdirect was built without JSON values (cargo feature \
         `json-values`)"
            .into(),
    ))
}

/// `--sink delta:PATH[?app_id=ID]`.
#[cfg(feature = "delta")]
async fn open_delta(args: &Args, spec: &str, path: &str) -> Result<TableSink, CliError> {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    if path.is_empty() {
        return Err(CliError(
            "--sink delta: needs a table directory, e.g. delta:/data/events".into(),
        ));
    }
    let object = path.starts_with("s3://") || path.starts_with("az://");
    if path.contains("://") && !object {
        return Err(CliError(format!(
            "--sink '{spec}': the Delta sink writes to a local directory, s3://BUCKET/PREFIX or \
             az://CONTAINER/PREFIX"
        )));
    }
    let mut options = DeltaOptions::default().parquet(parquet_options(args)?);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("app_id", id)) if !id.is_empty() => {
                // One topic's positions under the given app id (kafka-delta-ingest's job is
                // one topic per app id).
                let [topic] = args.topic.as_slice() else {
                    return Err(CliError(format!(
                        "--sink '{spec}': app_id names one topic's positions; read one topic \
                         (-t), or leave app_id out (each topic's own name is its app id)"
                    )));
                };
                options = options.app_id(topic, id);
            }
            _ => {
                return Err(CliError(format!(
                    "--sink '{spec}': '{pair}' is not an option of the Delta sink (app_id=ID)"
                )))
            }
        }
    }
    if object {
        // The checkpoint's clients and environment (AWS_*, AZURE_STORAGE_*).
        return Ok(TableSink::Delta(
            DeltaSink::open_object(path, options, &[]).await?,
        ));
    }
    Ok(TableSink::Delta(DeltaSink::open(path, options).await?))
}

#[cfg(not(feature = "delta"))]
async fn open_delta(_: &Args, spec: &str, _: &str) -> Result<TableSink, CliError> {
    Err(CliError(format!(
        "--sink '{spec}': this kdirect was built without the Delta sink (cargo feature `delta`)"
    )))
}

/// Writes `batch` (each of its chunks) through `sink` into one writer and commits the writer:
/// the Parquet sink places its file here, the Delta sink stages it for the store's commit.
async fn write_to_sink<S: Sink>(
    sink: &S,
    stream: &mut DirectStream,
    batch: &mut Batch,
    stats: &mut Stats,
) -> Result<(), CliError> {
    let id = batch.id();
    let fail = |e: kdirect::Error| CliError(format!("batch {id}: {e}"));
    let mut file = sink.begin(id)?;
    loop {
        batch
            .for_each_record(|_, r| stats.add(r.key(), r.value()))
            .map_err(fail)?;
        file.write(batch)?;
        if !stream.next_chunk(batch).await.map_err(fail)? {
            break;
        }
    }
    file.commit()?;
    Ok(())
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("'{s}' is not a number of seconds from 0 to 86400"))
}

/// How progress is shown: the live line on a terminal unless `-q` (as cargo does), plain
/// lines with `--progress` or `--progress-interval` elsewhere (kcat and `pv` print nothing
/// unless asked when not on a terminal).
fn progress_mode(args: &Args, stderr_is_terminal: bool) -> Mode {
    const DEFAULT_EVERY: Duration = Duration::from_secs(10);
    match args.progress_interval {
        _ if args.quiet => Mode::Off,
        Some(d) if d.is_zero() => Mode::PerBatch,
        Some(d) => Mode::Every(d),
        None if stderr_is_terminal => Mode::Live,
        None if args.progress => Mode::Every(DEFAULT_EVERY),
        None => Mode::Off,
    }
}

/// Stderr is a terminal that can redraw a line (`TERM=dumb` cannot).
fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

fn parse_trigger_arg(s: &str) -> Result<Trigger, String> {
    parse_trigger(s).ok_or_else(|| {
        format!("'{s}' is not as-fast-as-possible, available-now or processing-time=<ms>")
    })
}

/// A kcat `-o` value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KcatOffset {
    /// Where to start.
    Start(StartPolicy),
    /// The store's positions only.
    Stored,
    /// Stop at the first record at or after this time.
    EndAt(i64),
}

fn parse_kcat_offset(s: &str) -> Result<KcatOffset, String> {
    let bad = || {
        format!(
            "'{s}' is not a start: beginning, end, stored, an offset N, -N (N before the end), \
             s@MS or e@MS"
        )
    };
    let ms = |t: &str| t.parse::<i64>().ok().filter(|t| *t >= 0).ok_or_else(bad);
    Ok(match s {
        "beginning" => KcatOffset::Start(StartPolicy::Earliest),
        "end" => KcatOffset::Start(StartPolicy::Latest),
        "stored" => KcatOffset::Stored,
        _ if s.starts_with("s@") => KcatOffset::Start(StartPolicy::Timestamp(ms(&s[2..])?)),
        _ if s.starts_with("e@") => KcatOffset::EndAt(ms(&s[2..])?),
        _ if s.starts_with('-') => KcatOffset::Start(StartPolicy::FromEnd(
            s[1..].parse::<u64>().map_err(|_| bad())?,
        )),
        _ => KcatOffset::Start(StartPolicy::Offset(ms(s)?)),
    })
}

fn parse_start(s: &str) -> Result<StartPolicy, String> {
    if s.trim_start().starts_with('{') {
        return starting_offsets_json(s);
    }
    match s {
        "earliest" => Ok(StartPolicy::Earliest),
        "latest" => Ok(StartPolicy::Latest),
        "none" => Ok(StartPolicy::None),
        _ => s
            .parse::<i64>()
            .ok()
            .filter(|t| *t >= 0)
            .map(StartPolicy::Timestamp)
            .ok_or_else(|| format!("'{s}' is not earliest, latest, none or a unix time in ms")),
    }
}

/// Counts what was delivered; the checksum covers every key and value byte, and does not
/// depend on the order partitions were read in (a wrapping sum of per-record CRC32Cs), so
/// it can be compared with another consumer's.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub records: u64,
    pub bytes: u64,
    pub checksum: u64,
    pub batches: u64,
}

impl Stats {
    pub(crate) fn add(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let k = key.unwrap_or_default();
        let v = value.unwrap_or_default();
        self.records += 1;
        self.bytes += (k.len() + v.len()) as u64;
        let c = crc32c::crc32c_append(crc32c::crc32c(k), v);
        self.checksum = self.checksum.wrapping_add(u64::from(c));
    }

    pub(crate) fn line(&self, seconds: f64) -> String {
        let s = seconds.max(1e-9);
        format!(
            "records={} bytes={} seconds={:.3} records_per_s={:.0} MB_per_s={:.1} batches={} checksum={:016x}",
            self.records,
            self.bytes,
            seconds,
            self.records as f64 / s,
            self.bytes as f64 / s / 1e6,
            self.batches,
            self.checksum
        )
    }
}

pub async fn run(mut args: Args) -> Result<ExitCode, CliError> {
    if let Some(g) = args.join_group.take() {
        args.group = g;
        args.join = true;
    }
    let has_store = args.store.is_some() || args.join;
    // SIGINT/SIGTERM: what is in progress is finished (connecting and joining the group, or
    // the batch's output and commit), then the stream is closed (a group member leaves with
    // LeaveGroup) and the run exits 0; a second signal exits at once without committing.
    // Installed first: a signal while connecting or joining took the default action before,
    // and a member killed that way kept its partitions until the session timeout.
    let shutdown = Shutdown::install()?;
    if let Some(addr) = args.metrics_addr {
        let allow = super::metrics::AllowList::parse(args.metrics_allow.as_deref().unwrap_or(""))?;
        super::metrics::serve(addr, allow)?;
    }
    let start = match &args.offset {
        Some(KcatOffset::Start(p)) => p.clone(),
        Some(KcatOffset::Stored) if args.store.is_none() => {
            return Err(CliError(
                "-o stored reads the store's positions: give --store SPEC (and --group)".into(),
            ))
        }
        // Partitions without a stored position are an error naming them.
        Some(KcatOffset::Stored) => StartPolicy::None,
        Some(KcatOffset::EndAt(_)) | None => args.starting.clone(),
    };
    let mut builder = DirectStream::builder()
        .bootstrap(&args.conn.bootstrap)
        .topics(&args.topic)
        .start(start)
        .isolation(args.isolation)
        .until_latest(args.until_latest || args.exit_at_end)
        .memory_budget(args.memory_mib << 20)
        // A batch is exactly its plan (--max-offsets-per-batch, a replayed batch) whatever
        // memory it takes; the records are written chunk by chunk (-X batch.chunked=false:
        // a batch ends where memory does).
        .chunked(true);
    if let Some(KcatOffset::EndAt(ts)) = args.offset {
        builder = builder.ending(Ending::Timestamp(ts));
    }
    let pattern = match (&args.pattern, args.topic.as_slice()) {
        (Some(p), _) => Some(p.clone()),
        (None, [one]) if one.starts_with('^') => Some(one.clone()),
        _ => None,
    };
    if let Some(p) = pattern {
        builder = builder.subscribe_pattern(&p)?;
    }
    if let Some(ps) = args.partitions.clone() {
        builder = builder.partitions(ps);
    }
    builder = builder
        .set(
            "request.timeout.ms",
            &args.conn.request_timeout_ms.to_string(),
        )?
        .set(
            "max.partition.fetch.bytes",
            &args.max_partition_fetch_bytes.to_string(),
        )?
        .set("fetch.max.bytes", &args.fetch_max_bytes.to_string())?
        .set("check.crcs", &args.check_crcs.to_string())?;
    if let Some(n) = args.max_offsets_per_batch {
        builder = builder.set("maxOffsetsPerTrigger", &n.to_string())?;
    }
    if let Some(r) = args.max_rate_per_partition {
        builder = builder.max_rate_per_partition(r);
    }
    if let Some(r) = args.min_rate_per_partition {
        builder = builder.min_rate_per_partition(r);
    }
    builder = builder
        .batch_interval(Duration::from_millis(args.batch_interval_ms))
        .fail_on_data_loss(args.fail_on_data_loss);
    if args.backpressure {
        builder = builder.backpressure(true);
    }
    if let Some(n) = args.min_offsets_per_batch {
        let delay = args
            .max_trigger_delay_ms
            .map_or(Duration::from_secs(15 * 60), Duration::from_millis);
        builder = builder.min_offsets_per_trigger(n, delay);
    }
    if let Some(t) = args.trigger {
        builder = builder.trigger(t);
    }
    if let Some(e) = &args.ending_offsets {
        builder = builder.set("endingOffsets", e)?;
    }
    if let Some(ts) = args.ending_timestamp {
        builder = builder.ending(Ending::Timestamp(ts));
    }
    // The security settings from the environment (KDIRECT_SASL_PASSWORD, …), then each -X.
    for (k, v) in args.conn.settings()? {
        builder = builder.set(&k, &v)?;
    }
    // With a store, the stream owns the commit protocol: it resumes from the committed
    // positions, re-runs a logged-but-uncommitted batch with exactly its ranges, and logs each
    // plan before handing the batch out.
    if let Some(spec) = &args.store {
        builder = builder.group(&args.group).store_spec(spec);
    }
    // --sink parquet:DIR and delta:PATH keep their own positions: the log is the store.
    let table_sink = open_sink(&args).await?;
    match &table_sink {
        Some(TableSink::Parquet(sink)) => builder = builder.store(sink.log()),
        #[cfg(feature = "delta")]
        Some(TableSink::Delta(sink)) => builder = builder.store(sink.log()),
        None => {}
    }
    if args.join {
        let group = args.group.clone();
        builder = builder
            .group(&args.group)
            .join_group(true)
            .on_rebalance(move |r| report_rebalance(&group, r));
        if let Some(id) = &args.group_instance_id {
            builder = builder.set("group.instance.id", id)?;
        }
        if let Some(ms) = args.session_timeout_ms {
            builder = builder.set("session.timeout.ms", &ms.to_string())?;
        }
        if let Some(ms) = args.max_poll_interval_ms {
            builder = builder.set("max.poll.interval.ms", &ms.to_string())?;
        }
        let consumer_protocol = args.group_protocol.as_deref() == Some("consumer");
        if let Some(p) = &args.group_protocol {
            builder = builder.set("group.protocol", p)?;
        }
        if let Some(list) = &args.assignor {
            let key = if consumer_protocol {
                "group.remote.assignor"
            } else {
                "partition.assignment.strategy"
            };
            builder = builder.set(key, list)?;
        }
    } else if args.group_instance_id.is_some()
        || args.session_timeout_ms.is_some()
        || args.max_poll_interval_ms.is_some()
        || args.assignor.is_some()
        || args.group_protocol.is_some()
    {
        return Err(CliError(
            "--group-instance-id, --session-timeout-ms, --max-poll-interval-ms, --assignor and \
             --group-protocol are group settings: add --join (or -G GROUP)"
                .into(),
        ));
    }
    let mut stream = builder.build().await?;
    let sink_table = match (&args.sink_table, stream.sql_store()) {
        (Some(name), Some(sql)) => Some(sql.sink_table(name).await?),
        (Some(_), None) => {
            return Err(CliError(
                "--sink-table needs a SQL store (sqlite:, postgres://, mysql://)".into(),
            ))
        }
        (None, _) => None,
    };
    let file_sink = match &args.output_dir {
        Some(dir) => {
            let bytes = args.bytes;
            let format: LineFormat = std::sync::Arc::new(move |line, range, r| {
                push_record_json(line, Some((&range.topic, range.partition)), r, bytes);
            });
            Some(JsonLinesSink::open(dir, format)?)
        }
        None => None,
    };
    // The output file, to fsync before a commit covers what was written, and its log of
    // lengths (with a store): the file is cut back to what the store covers.
    let mut durable: Option<File> = None;
    let mut cover: Option<Cover> = None;
    let mut out: Option<Box<dyn Write>> = match args.output.as_str() {
        _ if file_sink.is_some() || sink_table.is_some() || table_sink.is_some() => None,
        "null" => None,
        "-" => Some(Box::new(BufWriter::with_capacity(
            1 << 20,
            std::io::stdout().lock(),
        ))),
        path => {
            // With a store the run resumes where the last one committed, so its records
            // belong after the ones already in the file: append, never truncate. Without a
            // store every run starts over, like `> FILE`.
            let file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(has_store)
                .truncate(!has_store)
                .open(PathBuf::from(path))
                .map_err(|e| CliError(format!("{path}: {e}")))?;
            // Only a regular file can be made durable (a FIFO or a device refuses fsync).
            if file.metadata().is_ok_and(|m| m.is_file()) {
                durable = Some(
                    file.try_clone()
                        .map_err(|e| CliError(format!("{path}: {e}")))?,
                );
                // A group member's positions change with each assignment; the cover log
                // follows one stream's positions, so a member's file is at-least-once.
                if args.store.is_some() && !args.join {
                    let (c, resumed) =
                        Cover::open(PathBuf::from(path), &file, stream.stored_positions())?;
                    report_resumed(path, &resumed);
                    cover = Some(c);
                }
            }
            Some(Box::new(BufWriter::with_capacity(1 << 20, file)))
        }
    };
    let started = Instant::now();
    let mut stats = Stats::default();
    let mut line = String::with_capacity(512);
    let mut raw: Vec<u8> = Vec::with_capacity(512);
    let mut io_err: Option<std::io::Error> = None;
    let mut last_report = Instant::now();
    let mut reporter = Reporter::new(progress_mode(&args, stderr_is_terminal()));
    // The offsets the batches of this run covered (the progress line's share done).
    let mut offsets_read = 0u64;
    // Redraws the progress line while a batch is awaited (a quiet topic, a rate limit).
    let mut ticker = tokio::time::interval(progress::REDRAW_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let next = {
            let next = stream.next_batch();
            tokio::pin!(next);
            loop {
                tokio::select! {
                    biased;
                    // Waiting for a batch, nothing in flight: stop now.
                    () = shutdown.requested() => break None,
                    next = &mut next => break Some(next),
                    _ = ticker.tick(), if reporter.ticks() => reporter.tick(),
                }
            }
        };
        let Some(next) = next else { break };
        let Some(mut batch) = next? else { break };
        let (id, offsets, before) = (batch.id(), batch.offset_count(), stats.records);
        offsets_read = offsets_read.saturating_add(offsets);
        let mut progress = |stats: &Stats, stream: &DirectStream| {
            if reporter.mode() == Mode::PerBatch {
                let secs = last_report.elapsed().as_secs_f64().max(1e-9);
                let n = stats.records - before;
                note!(
                    "kdirect: batch {id}: {n} records, {offsets} offsets, {:.0} records/s",
                    n as f64 / secs
                );
                last_report = Instant::now();
            }
            reporter.update(progress_status(stats, stream, offsets_read), offsets_read);
        };
        for lost in batch.lost() {
            note!(
                "kdirect: data loss: {}-{} offsets [{}, {}) are gone ({:?}); continuing from the log start",
                lost.topic, lost.partition, lost.from, lost.until, lost.reason
            );
        }
        let fail = |e: kdirect::Error| CliError(format!("batch {id}: {e}"));
        if let Some(sink) = &sink_table {
            // Exactly-once: records and offsets in one transaction.
            let mut tx = match stream.begin(batch).await {
                Err(e) if args.join && e.is_fenced() => {
                    note!("kdirect: {e}");
                    continue;
                }
                r => r?,
            };
            // Each chunk's rows go into the one transaction.
            loop {
                if tx.is_open() {
                    tx.batch()
                        .for_each_record(|_, r| stats.add(r.key(), r.value()))
                        .map_err(fail)?;
                }
                tx.insert_batch(sink).await?;
                if !stream.next_chunk(tx.batch_mut()).await.map_err(fail)? {
                    break;
                }
            }
            stats.batches += 1;
            match stream.commit_transaction(tx).await {
                Err(e) if args.join && e.is_fenced() => note!("kdirect: {e}"),
                r => {
                    r?;
                }
            }
            progress(&stats, &stream);
            if shutdown.is_requested() {
                break;
            }
            continue;
        } else if let Some(sink) = &file_sink {
            // Exactly-once output with a store that logs plans: a re-run batch rewrites the
            // same file.
            let mut file = sink.begin(batch.id())?;
            stream
                .try_for_each_record(&mut batch, |range, r| -> Result<(), kdirect::Error> {
                    stats.add(r.key(), r.value());
                    Ok(file.write_record(range, r)?)
                })
                .await
                .map_err(fail)?;
            file.commit()?;
        } else if let Some(sink) = &table_sink {
            // Exactly-once by itself. Parquet: the file is placed (visible) here, and the
            // commit below lists it in the sink's log with the positions. Delta: the file is
            // staged here, and the commit below is the one Delta commit of the file and the
            // positions.
            match sink {
                TableSink::Parquet(s) => {
                    write_to_sink(s, &mut stream, &mut batch, &mut stats).await?;
                }
                #[cfg(feature = "delta")]
                TableSink::Delta(s) => {
                    write_to_sink(s, &mut stream, &mut batch, &mut stats).await?;
                }
            }
        } else {
            let limit = args.count.unwrap_or(u64::MAX);
            let walked = stream
                .try_for_each_record(&mut batch, |range, r| {
                    // Output that failed stops the walk (no more chunks are fetched for it).
                    if io_err.is_some() {
                        return Err(WalkStop::Output);
                    }
                    // -c N: the records past the count are not printed (no store: nothing is
                    // committed for them).
                    if stats.records >= limit {
                        return Ok(());
                    }
                    stats.add(r.key(), r.value());
                    if let Some(w) = out.as_mut() {
                        let written = if let Some(fmt) = &args.format {
                            raw.clear();
                            push_record_format(&mut raw, fmt, &range.topic, range.partition, r);
                            w.write_all(&raw)
                        } else if let Some(delim) = &args.key_delimiter {
                            raw.clear();
                            raw.extend_from_slice(r.key().unwrap_or_default());
                            raw.extend_from_slice(delim.as_bytes());
                            raw.extend_from_slice(r.value().unwrap_or_default());
                            raw.push(b'\n');
                            w.write_all(&raw)
                        } else if args.kcat_json {
                            line.clear();
                            push_record_kcat_json(&mut line, &range.topic, range.partition, r);
                            w.write_all(line.as_bytes())
                        } else {
                            line.clear();
                            push_record_json(
                                &mut line,
                                Some((&range.topic, range.partition)),
                                r,
                                args.bytes,
                            );
                            w.write_all(line.as_bytes())
                        };
                        let written =
                            written.and_then(|()| if args.unbuffered { w.flush() } else { Ok(()) });
                        if let Err(e) = written {
                            io_err.get_or_insert(e);
                        }
                    }
                    Ok::<(), WalkStop>(())
                })
                .await;
            if let Some(e) = io_err.take() {
                // A closed pipe (`| head`) ends the run quietly, like other Unix tools.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(ExitCode::SUCCESS);
                }
                return Err(CliError(format!("writing output: {e}")));
            }
            if let Err(WalkStop::Stream(e)) = walked {
                return Err(fail(e));
            }
            if let Some(w) = out.as_mut() {
                // Every batch reaches the file or the pipe before the next is fetched: a
                // quiet topic's records are never held back in the buffer.
                if let Err(e) = w.flush() {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return Ok(ExitCode::SUCCESS);
                    }
                    return Err(CliError(format!("writing output: {e}")));
                }
                // The output must be durable before the offsets move past it.
                if has_store {
                    match (&durable, cover.as_mut()) {
                        // Fsyncs the file, then records what the commit will cover.
                        (Some(f), Some(c)) => c.before_commit(f, batch.ranges())?,
                        (Some(f), None) => f
                            .sync_data()
                            .map_err(|e| CliError(format!("syncing output: {e}")))?,
                        _ => {}
                    }
                }
            }
        }
        stats.batches += 1;
        match stream.commit(batch).await {
            // A member that lost its partitions: the batch is abandoned (its records go to
            // the partitions' new owner again), the next batch rejoins.
            Err(e) if args.join && e.is_fenced() => note!("kdirect: {e}"),
            r => {
                r?;
            }
        }
        metrics::counter!("kdirect_records_total").absolute(stats.records);
        metrics::counter!("kdirect_record_bytes_total").absolute(stats.bytes);
        progress(&stats, &stream);
        if shutdown.is_requested() || args.count.is_some_and(|c| stats.records >= c) {
            break;
        }
    }
    if let Some(w) = out.as_mut() {
        w.flush()
            .map_err(|e| CliError(format!("writing output: {e}")))?;
    }
    // A group member leaves its group, so the others take its partitions at once.
    stream.close().await?;
    reporter.finish();
    if args.stats {
        note!("{}", stats.line(started.elapsed().as_secs_f64()));
    }
    Ok(ExitCode::SUCCESS)
}

/// What the progress line shows after a batch: the run's counts, the lag the stream's last
/// plan saw, the offsets left to the ending (under available-now and the other endings) and
/// a member's partition count.
fn progress_status(stats: &Stats, stream: &DirectStream, offsets_read: u64) -> progress::Status {
    let until = stream.until_offsets().map(|until| {
        let positions = stream.positions();
        let left = until
            .iter()
            .map(|(tp, end)| {
                let at = positions.get(tp).copied().unwrap_or(*end);
                end.saturating_sub(at).max(0) as u64
            })
            .fold(0u64, u64::saturating_add);
        (offsets_read, left)
    });
    progress::Status {
        records: stats.records,
        bytes: stats.bytes,
        lag: stream.lag(),
        until,
        owned: stream.assignment().map(|a| a.len()),
    }
}

/// Why a walk over a batch's records stopped: the stream's error, or the output's (which
/// the walk keeps aside, to tell a closed pipe from a failed write).
enum WalkStop {
    Stream(kdirect::Error),
    Output,
}

impl From<kdirect::Error> for WalkStop {
    fn from(e: kdirect::Error) -> Self {
        WalkStop::Stream(e)
    }
}

/// One line per assignment or revocation on stderr, as kcat's balanced consumer prints them.
fn report_rebalance(group: &str, r: &kdirect::Rebalance) {
    let list = |ps: &std::collections::BTreeSet<kdirect::TopicPartition>| {
        if ps.is_empty() {
            return "nothing".to_owned();
        }
        ps.iter()
            .map(|tp| format!("{}-{}", tp.topic, tp.partition))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match r {
        kdirect::Rebalance::Revoked { partitions } => {
            super::metrics::revoked(partitions);
            note!("kdirect: group {group}: revoked {}", list(partitions));
        }
        kdirect::Rebalance::Assigned {
            generation,
            member_id,
            leader,
            partitions,
        } => {
            super::metrics::assigned(partitions);
            note!(
                "kdirect: group {group}: generation {generation}, member {member_id}{}: \
                 assigned {}",
                if *leader { " (leader)" } else { "" },
                list(partitions)
            )
        }
        _ => {}
    }
}

/// What opening the `--output` file's cover found, on stderr.
fn report_resumed(shown: &str, resumed: &Resumed) {
    match resumed {
        Resumed::CutBack { bytes } => note!(
            "kdirect: {shown}: cut back {bytes} bytes written after the store's last commit \
             (they are read again)"
        ),
        Resumed::Shorter { len, covered } => note!(
            "kdirect: warning: {shown} is shorter ({len} bytes) than what the store covers \
             ({covered} bytes): records the store counts as written are missing from it"
        ),
        Resumed::Unmatched => note!(
            "kdirect: warning: {} does not match the store's positions (another store, or \
             offsets changed by hand): appending to {shown} without cutting it back",
            Cover::path_for(std::path::Path::new(shown)).display()
        ),
        _ => {}
    }
}

/// SIGINT and SIGTERM, watched on a thread of their own (so that a second signal ends the
/// process even while the runtime's thread is blocked writing output).
#[derive(Debug)]
struct Shutdown {
    requested: std::sync::Arc<std::sync::atomic::AtomicBool>,
    notify: std::sync::Arc<tokio::sync::Notify>,
}

impl Shutdown {
    fn install() -> Result<Shutdown, CliError> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        use std::sync::atomic::Ordering;
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .map_err(|e| CliError(format!("cannot watch signals: {e}")))?;
        let requested = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let notify = std::sync::Arc::new(tokio::sync::Notify::new());
        let (r, n) = (requested.clone(), notify.clone());
        std::thread::Builder::new()
            .name("kdirect-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                    if r.swap(true, Ordering::SeqCst) {
                        note!(
                            "kdirect: {name} again: exiting now, without committing the batch \
                             in progress (it is read again on the next run)"
                        );
                        std::process::exit(128 + sig);
                    }
                    note!(
                        "kdirect: {name}: finishing what is in progress (connecting, joining \
                         the group, or the batch's output and commit), then exiting; send it \
                         again to exit at once"
                    );
                    n.notify_one();
                }
            })
            .map_err(|e| CliError(format!("cannot watch signals: {e}")))?;
        Ok(Shutdown { requested, notify })
    }

    fn is_requested(&self) -> bool {
        self.requested.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once a signal asked the run to end.
    async fn requested(&self) {
        while !self.is_requested() {
            self.notify.notified().await;
        }
    }
}

/// One record in kcat's `-J` shape.
fn push_record_kcat_json(line: &mut String, topic: &str, partition: i32, r: &kdirect::Record<'_>) {
    let text = |b: Option<&[u8]>| match b {
        Some(b) => serde_json::Value::from(String::from_utf8_lossy(b).into_owned()),
        None => serde_json::Value::Null,
    };
    let mut headers = Vec::new();
    for h in r.headers() {
        headers.push(text(Some(h.key())));
        headers.push(text(h.value()));
    }
    let v = serde_json::json!({
        "topic": topic,
        "partition": partition,
        "offset": r.offset(),
        "tstype": "create",
        "ts": r.timestamp(),
        "headers": if headers.is_empty() { serde_json::Value::Null } else { headers.into() },
        "key": text(r.key()),
        "payload": text(r.value()),
    });
    line.push_str(&v.to_string());
    line.push('\n');
}

/// One record by a kcat `-f` format.
fn push_record_format(
    out: &mut Vec<u8>,
    fmt: &str,
    topic: &str,
    partition: i32,
    r: &kdirect::Record<'_>,
) {
    let size = |b: Option<&[u8]>| b.map_or(-1, |b| b.len() as i64);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('t') => out.extend_from_slice(topic.as_bytes()),
                Some('p') => out.extend_from_slice(partition.to_string().as_bytes()),
                Some('o') => out.extend_from_slice(r.offset().to_string().as_bytes()),
                Some('k') => out.extend_from_slice(r.key().unwrap_or_default()),
                Some('s') => out.extend_from_slice(r.value().unwrap_or_default()),
                Some('K') => out.extend_from_slice(size(r.key()).to_string().as_bytes()),
                Some('S') => out.extend_from_slice(size(r.value()).to_string().as_bytes()),
                Some('T') => out.extend_from_slice(r.timestamp().to_string().as_bytes()),
                Some('h') => {
                    for (i, h) in r.headers().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(h.key());
                        out.push(b'=');
                        out.extend_from_slice(h.value().unwrap_or_default());
                    }
                }
                Some('%') => out.push(b'%'),
                Some(other) => {
                    out.push(b'%');
                    let mut b = [0u8; 4];
                    out.extend_from_slice(other.encode_utf8(&mut b).as_bytes());
                }
                None => out.push(b'%'),
            },
            '\\' => match chars.next() {
                Some('n') => out.push(b'\n'),
                Some('t') => out.push(b'\t'),
                Some('r') => out.push(b'\r'),
                Some('0') => out.push(0),
                Some('\\') => out.push(b'\\'),
                Some(other) => {
                    out.push(b'\\');
                    let mut b = [0u8; 4];
                    out.extend_from_slice(other.encode_utf8(&mut b).as_bytes());
                }
                None => out.push(b'\\'),
            },
            other => {
                let mut b = [0u8; 4];
                out.extend_from_slice(other.encode_utf8(&mut b).as_bytes());
            }
        }
    }
}
