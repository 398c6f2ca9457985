//! The checkpoint directory: Structured Streaming's write-ahead layout, plain text.
//!
//! ```text
//! DIR/metadata        {"id":"<stream id>"}
//! DIR/offsets/<N>     written before batch N runs (the plan)
//! DIR/commits/<N>     written after batch N's output succeeded
//! ```
//!
//! Each batch file has three lines (Spark's `OffsetSeqLog` / `CommitLog` shape):
//!
//! ```text
//! v1
//! {"batchId":7,"timestampMs":1700000000000,"from":{"events":{"0":1100,"1":900}}}
//! {"events":{"0":1200,"1":950}}
//! ```
//!
//! Line 1 is the format version, line 2 the batch's metadata, line 3 the offsets — the next
//! offset to read per partition. In `offsets/N` they are the plan's `until`s and the metadata
//! carries the plan's `from`s, so the plan can be re-run exactly. In `commits/N` they are every
//! partition's position after batch N (the whole state, not only the batch's partitions), so the
//! latest commit file alone says where the stream stands, and `kdirect offsets set` can write one.
//! A commit's metadata may also carry `"leaderEpochs":{"events":{"0":4}}`: per partition, the
//! epoch of the last record batch read before its position (KIP-320), which a resumed stream
//! checks with the partition's leader before reading on. A partition without one (a position
//! set by hand, or written before kdirect kept them) is resumed unchecked; readers that do not
//! know the key ignore it. A plan's metadata may carry `"movedBackFrom":{"events":{"0":1500}}`:
//! the stored positions of partitions whose range starts below them (the stream moved back
//! after data loss under `failOnDataLoss=false`; [`PlannedBatch::moved_back`]), which the
//! commit of the batch, or of its re-run, expects instead of the range's `from`. A commit's
//! metadata may carry `"topicIds":{"events":"<32 hex digits>"}`: the id of each topic the
//! positions were read from (KIP-516), which a resumed stream compares with the cluster's, so
//! a topic deleted and re-created while it was down is reported and read from its new start
//! (without it, the stored positions and epochs would be taken for positions in the new log).
//!
//! Writes are atomic creates: a temp file (`.<N>.tmp-…`, ignored by readers), fsync, a hard
//! link to the final name (which fails if the name exists: a batch file is never overwritten,
//! and two writers on one checkpoint fail loudly), then fsync of the directory. On load, the
//! latest `offsets/N` without `commits/N` is the pending batch, to be re-run with exactly its
//! ranges. A truncated or garbage file, a gap in batch ids, or logs that do not fit together
//! are errors naming the file; nothing is rewritten. After each commit the files of batches
//! older than the last `retention` are deleted, oldest first.
//!
//! The format is this module's own explicit type ([`CheckpointFile`]), written and read by hand —
//! never a derived serialization of internal types — so it survives any code change.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::error::io;
use crate::file_sink::create_temp_beside;
use crate::{
    check_from, Capabilities, CommitContext, CommitOutcome, Committed, Epochs, OffsetRange,
    OffsetStore, PlannedBatch, Positions, StoreError, StoreErrorKind, TopicIds, TopicPartition,
};

/// Batches whose files are kept by default.
pub const DEFAULT_RETENTION: usize = 100;

/// The format version this module writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Offsets by topic, then partition, as the files hold them.
pub type TopicOffsets = BTreeMap<String, BTreeMap<i32, i64>>;

/// Leader epochs by topic, then partition, as a commit file's `leaderEpochs` holds them.
pub type TopicEpochs = BTreeMap<String, BTreeMap<i32, i32>>;

/// One batch file (`offsets/N` or `commits/N`), format `v1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFile {
    /// The batch id (must match the file name).
    pub batch_id: u64,
    /// When it was written, ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// `offsets/N` only: each range's first offset.
    pub from: Option<TopicOffsets>,
    /// The next offset to read per partition.
    pub offsets: TopicOffsets,
    /// `commits/N` only: the epoch of the last record batch read before each position, where
    /// known (KIP-320; see the module docs). Written only when not empty.
    pub epochs: TopicEpochs,
    /// `offsets/N` only: the stored positions the plan's ranges move back from
    /// ([`PlannedBatch::moved_back`]). Written only when not empty.
    pub moved_back: TopicOffsets,
    /// `commits/N` only: the id of each topic the positions were read from, where known
    /// (KIP-516; see the module docs). Written only when not empty.
    pub topic_ids: TopicIds,
}

impl CheckpointFile {
    /// The file's text.
    pub fn encode(&self) -> String {
        let mut meta = Map::new();
        meta.insert("batchId".to_owned(), Value::from(self.batch_id));
        meta.insert("timestampMs".to_owned(), Value::from(self.timestamp_ms));
        if let Some(from) = &self.from {
            meta.insert("from".to_owned(), topics_json(from));
        }
        if !self.epochs.is_empty() {
            meta.insert("leaderEpochs".to_owned(), topics_json(&self.epochs));
        }
        if !self.moved_back.is_empty() {
            meta.insert("movedBackFrom".to_owned(), topics_json(&self.moved_back));
        }
        if !self.topic_ids.is_empty() {
            let ids = self
                .topic_ids
                .iter()
                .map(|(t, id)| (t.clone(), Value::from(crate::hex(id))))
                .collect();
            meta.insert("topicIds".to_owned(), Value::Object(ids));
        }
        format!(
            "v{FORMAT_VERSION}\n{}\n{}\n",
            Value::Object(meta),
            topics_json(&self.offsets)
        )
    }

    /// Parses a file's text; `path` is only for errors.
    pub fn decode(text: &str, path: &Path) -> Result<CheckpointFile, StoreError> {
        let corrupt = |reason: String| -> StoreError {
            StoreErrorKind::Corrupt {
                path: path.to_owned(),
                reason,
            }
            .into()
        };
        if text.is_empty() {
            return Err(corrupt("the file is empty".to_owned()));
        }
        let mut lines = text.split('\n');
        let version = lines.next().unwrap_or("");
        if version != format!("v{FORMAT_VERSION}") {
            let shown: String = version.chars().take(40).collect();
            return Err(corrupt(format!(
                "line 1 is '{shown}', expected the version line 'v{FORMAT_VERSION}'"
            )));
        }
        let meta_line = lines
            .next()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| corrupt("line 2 (metadata) is missing: truncated?".to_owned()))?;
        let offsets_line = lines
            .next()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| corrupt("line 3 (offsets) is missing: truncated?".to_owned()))?;
        if let Some(extra) = lines.find(|l| !l.trim().is_empty()) {
            let shown: String = extra.chars().take(40).collect();
            return Err(corrupt(format!("unexpected text after line 3: '{shown}'")));
        }
        let meta: Value = serde_json::from_str(meta_line)
            .map_err(|e| corrupt(format!("line 2 is not JSON ({e}): truncated or garbage?")))?;
        let meta = meta
            .as_object()
            .ok_or_else(|| corrupt("line 2 is not a JSON object".to_owned()))?;
        let batch_id = meta
            .get("batchId")
            .and_then(Value::as_u64)
            .ok_or_else(|| corrupt("line 2 has no batchId (a non-negative integer)".to_owned()))?;
        let timestamp_ms = meta.get("timestampMs").and_then(Value::as_i64).unwrap_or(0);
        let from = match meta.get("from") {
            None => None,
            Some(v) => Some(parse_offsets(v).map_err(|r| corrupt(format!("line 2 'from': {r}")))?),
        };
        let epochs = match meta.get("leaderEpochs") {
            None => TopicEpochs::new(),
            Some(v) => {
                parse_epochs(v).map_err(|r| corrupt(format!("line 2 'leaderEpochs': {r}")))?
            }
        };
        let moved_back = match meta.get("movedBackFrom") {
            None => TopicOffsets::new(),
            Some(v) => {
                parse_offsets(v).map_err(|r| corrupt(format!("line 2 'movedBackFrom': {r}")))?
            }
        };
        let topic_ids = match meta.get("topicIds") {
            None => TopicIds::new(),
            Some(v) => {
                parse_topic_ids(v).map_err(|r| corrupt(format!("line 2 'topicIds': {r}")))?
            }
        };
        let offsets: Value = serde_json::from_str(offsets_line)
            .map_err(|e| corrupt(format!("line 3 is not JSON ({e}): truncated or garbage?")))?;
        let offsets = parse_offsets(&offsets).map_err(|r| corrupt(format!("line 3: {r}")))?;
        if let Some(from) = &from {
            for (topic, parts) in from {
                for (p, &first) in parts {
                    let Some(&until) = offsets.get(topic).and_then(|ps| ps.get(p)) else {
                        return Err(corrupt(format!(
                            "{topic}-{p} has a 'from' on line 2 but no offset on line 3"
                        )));
                    };
                    // A 'from' past its offset was written by older `offsets set` moving a
                    // position back: no range of records, read as an empty one (`ranges`).
                    let _ = (first, until);
                }
            }
        }
        for (topic, parts) in &epochs {
            for p in parts.keys() {
                if offsets.get(topic).and_then(|ps| ps.get(p)).is_none() {
                    return Err(corrupt(format!(
                        "{topic}-{p} has a leader epoch on line 2 but no offset on line 3"
                    )));
                }
            }
        }
        for (topic, parts) in &moved_back {
            for p in parts.keys() {
                if offsets.get(topic).and_then(|ps| ps.get(p)).is_none() {
                    return Err(corrupt(format!(
                        "{topic}-{p} has a 'movedBackFrom' on line 2 but no offset on line 3"
                    )));
                }
            }
        }
        for topic in topic_ids.keys() {
            if !offsets.contains_key(topic) {
                return Err(corrupt(format!(
                    "topic '{topic}' has an id on line 2 but no offsets on line 3"
                )));
            }
        }
        Ok(CheckpointFile {
            batch_id,
            timestamp_ms,
            from,
            offsets,
            epochs,
            moved_back,
            topic_ids,
        })
    }

    /// The ranges of an `offsets/N` file (`from` → offset); partitions without a `from` start
    /// where they end (empty).
    pub fn ranges(&self) -> Vec<OffsetRange> {
        let mut out = Vec::new();
        for (topic, parts) in &self.offsets {
            for (&p, &until) in parts {
                let from = self
                    .from
                    .as_ref()
                    .and_then(|f| f.get(topic))
                    .and_then(|ps| ps.get(&p))
                    .copied()
                    .unwrap_or(until)
                    .min(until);
                out.push(OffsetRange::new(topic.clone(), p, from, until));
            }
        }
        out
    }

    /// The offsets as positions.
    pub fn positions(&self) -> Positions {
        by_partition(&self.offsets)
    }

    /// The leader epochs, by partition.
    pub fn leader_epochs(&self) -> Epochs {
        by_partition(&self.epochs)
    }

    /// An `offsets/N` file's plan: its ranges and the positions they move back from.
    pub fn planned(&self) -> PlannedBatch {
        PlannedBatch::new(self.batch_id, self.ranges())
            .with_moved_back(by_partition(&self.moved_back))
    }
}

/// `{"topic":{"partition":value}}`: the shape of the offsets and of the leader epochs.
fn topics_json<V: Copy + Into<Value>>(o: &BTreeMap<String, BTreeMap<i32, V>>) -> Value {
    let mut topics = Map::new();
    for (t, parts) in o {
        let mut ps = Map::new();
        for (p, v) in parts {
            ps.insert(p.to_string(), (*v).into());
        }
        topics.insert(t.clone(), Value::Object(ps));
    }
    Value::Object(topics)
}

/// Parses `{"topic":{"partition":value}}`; `what` names the value in the expected shape
/// (`offset`, `epoch`), `name` in the message about a bad one (`offset`, `leader epoch`), and
/// `value` reads one, or says what it must be.
fn parse_topics<V>(
    v: &Value,
    (what, name): (&str, &str),
    value: impl Fn(&Value) -> Result<V, &'static str>,
) -> Result<BTreeMap<String, BTreeMap<i32, V>>, String> {
    let topics = v
        .as_object()
        .ok_or_else(|| format!("expected a JSON object {{\"topic\":{{\"partition\":{what}}}}}"))?;
    let mut out = BTreeMap::new();
    for (t, parts) in topics {
        let parts = parts
            .as_object()
            .ok_or_else(|| format!("topic '{t}': expected an object {{\"partition\":{what}}}"))?;
        let mut ps = BTreeMap::new();
        for (p, x) in parts {
            let pn: i32 =
                p.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    format!("topic '{t}': partition '{p}' is not a partition number")
                })?;
            let x = value(x).map_err(|must| format!("{t}-{p}: {name} {x} {must}"))?;
            ps.insert(pn, x);
        }
        out.insert(t.clone(), ps);
    }
    Ok(out)
}

/// Parses `{"topic":{"partition":offset}}` (Spark's Kafka offsets JSON; also read by
/// [`crate::spark`]).
pub(crate) fn parse_offsets(v: &Value) -> Result<TopicOffsets, String> {
    parse_topics(v, ("offset", "offset"), |x| {
        x.as_i64()
            .filter(|o| *o >= 0)
            .ok_or("is not a non-negative integer")
    })
}

/// Parses a commit file's `leaderEpochs`, `{"topic":{"partition":epoch}}`.
fn parse_epochs(v: &Value) -> Result<TopicEpochs, String> {
    parse_topics(v, ("epoch", "leader epoch"), |x| {
        x.as_i64()
            .and_then(|e| i32::try_from(e).ok())
            .filter(|e| *e >= 0)
            .ok_or("is not a non-negative 32-bit integer")
    })
}

/// Parses a commit file's `topicIds`, `{"topic":"<32 hex digits>"}`.
fn parse_topic_ids(v: &Value) -> Result<TopicIds, String> {
    let o = v.as_object().ok_or("is not a JSON object")?;
    let mut out = TopicIds::new();
    for (topic, id) in o {
        let parsed = id
            .as_str()
            .and_then(crate::unhex)
            .ok_or_else(|| format!("the id of topic '{topic}' is not 32 hex digits"))?;
        out.insert(topic.clone(), parsed);
    }
    Ok(out)
}

/// Topic → partition → value as partition → value.
fn by_partition<V: Copy>(o: &BTreeMap<String, BTreeMap<i32, V>>) -> BTreeMap<TopicPartition, V> {
    o.iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .map(move |(p, v)| (TopicPartition::new(t.clone(), *p), *v))
        })
        .collect()
}

/// Partition → value as topic → partition → value (what the files hold).
fn by_topic<V: Copy>(o: &BTreeMap<TopicPartition, V>) -> BTreeMap<String, BTreeMap<i32, V>> {
    let mut out: BTreeMap<String, BTreeMap<i32, V>> = BTreeMap::new();
    for (tp, v) in o {
        out.entry(tp.topic.to_string())
            .or_default()
            .insert(tp.partition, *v);
    }
    out
}

fn to_topic_offsets(it: impl IntoIterator<Item = (String, i32, i64)>) -> TopicOffsets {
    let mut out = TopicOffsets::new();
    for (topic, partition, off) in it {
        out.entry(topic).or_default().insert(partition, off);
    }
    out
}

fn froms(ranges: &[OffsetRange]) -> TopicOffsets {
    to_topic_offsets(
        ranges
            .iter()
            .map(|r| (r.topic.to_string(), r.partition, r.from)),
    )
}

fn untils(ranges: &[OffsetRange]) -> TopicOffsets {
    to_topic_offsets(
        ranges
            .iter()
            .map(|r| (r.topic.to_string(), r.partition, r.until)),
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A checkpoint directory as an [`OffsetStore`].
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    /// Where the files live: a local directory, or a bucket's prefix.
    backend: Backend,
    retention: usize,
    /// A local directory on a filesystem where a file's fsync may not make its new directory
    /// entry durable (NFS, overlay, FAT, an unknown one): the directory is fsynced after each
    /// batch file as well ([`needs_directory_fsync`]).
    sync_dir: bool,
    /// What the directory holds, as of this process's last read or write (`None`: read it
    /// again). The mutex serializes this process's writers; other processes are caught by the
    /// atomic creates, after which the state is read again.
    state: Mutex<Option<DiskState>>,
}

/// Where a checkpoint's files live.
#[derive(Debug)]
enum Backend {
    /// A local directory (`dir`).
    Disk,
    /// Object storage (`dir` is its `s3://bucket/prefix` or `az://container/prefix`).
    #[cfg(feature = "object-store")]
    Object(crate::object::Bucket),
    /// HDFS (`dir` is its `hdfs://namenode:port/path`).
    #[cfg(feature = "hdfs")]
    Hdfs(crate::hdfs::Hdfs),
}

/// What the directory holds.
#[derive(Debug, Clone)]
struct DiskState {
    /// The oldest retained batch id.
    oldest: Option<u64>,
    /// Latest commit: its id and the whole state.
    committed: Option<(u64, Positions)>,
    /// The latest commit's leader epochs (KIP-320).
    epochs: Epochs,
    /// The latest commit's topic ids (KIP-516).
    topic_ids: TopicIds,
    /// Latest offsets file id.
    latest_offsets: Option<u64>,
    /// A logged, uncommitted batch.
    pending: Option<PlannedBatch>,
}

impl CheckpointStore {
    /// The plan log (`offsets/N` before batch N), one writer only; the commit's `commits/N`
    /// is created only if absent (of two writers, one creates it).
    pub const CAPABILITIES: Capabilities =
        Capabilities::LOGS_PLANS.union(Capabilities::ATOMIC_COMMIT);

    /// Opens (creating if needed) the checkpoint at `dir`, keeping the files of the last
    /// `retention` batches (at least 1).
    pub fn open(dir: impl Into<PathBuf>, retention: usize) -> Result<CheckpointStore, StoreError> {
        let dir = dir.into();
        for d in [dir.clone(), dir.join("offsets"), dir.join("commits")] {
            fs::create_dir_all(&d).map_err(io(&d, "create directory"))?;
        }
        let fstype = filesystem_of(&dir);
        let sync_dir = needs_directory_fsync(fstype.as_deref());
        if sync_dir {
            tracing::info!(
                dir = %dir.display(),
                filesystem = fstype.as_deref().unwrap_or("unknown"),
                "the checkpoint's filesystem does not promise that a file's fsync makes its \
                 directory entry durable: the directory is fsynced after each batch file too"
            );
        }
        let inner = Inner {
            dir,
            backend: Backend::Disk,
            retention: retention.max(1),
            sync_dir,
            state: Mutex::new(None),
        };
        inner.open_metadata()?;
        Ok(CheckpointStore {
            inner: Arc::new(inner),
        })
    }

    /// Opens (creating if needed) the checkpoint at `url` on object storage
    /// (`s3://bucket/prefix` or `az://container/prefix`, credentials and endpoint from the
    /// AWS or Azure environment variables), with the same layout and guarantees as a
    /// directory: "create only if absent" is the store's conditional put
    /// (`If-None-Match: *`), and an object is never torn.
    #[cfg(feature = "object-store")]
    pub async fn open_object(url: &str, retention: usize) -> Result<CheckpointStore, StoreError> {
        Self::open_object_with(url, retention, &[]).await
    }

    /// [`open_object`](Self::open_object) with settings beyond the environment's, by
    /// object_store's names (`aws_endpoint`, `aws_allow_http`, `aws_region`, …;
    /// `azure_storage_account_name`, `azure_storage_endpoint`, …).
    #[cfg(feature = "object-store")]
    pub async fn open_object_with(
        url: &str,
        retention: usize,
        config: &[(&str, &str)],
    ) -> Result<CheckpointStore, StoreError> {
        let bucket = crate::object::Bucket::open(Path::new(url), config)?;
        let inner = Inner {
            dir: bucket.url().to_owned(),
            backend: Backend::Object(bucket),
            retention: retention.max(1),
            sync_dir: false,
            state: Mutex::new(None),
        };
        let inner = Arc::new(inner);
        let opening = inner.clone();
        match tokio::task::spawn_blocking(move || opening.open_metadata()).await {
            Ok(r) => r?,
            Err(e) => {
                return Err(io(&inner.dir, "checkpoint task")(std::io::Error::other(
                    e.to_string(),
                )))
            }
        }
        Ok(CheckpointStore { inner })
    }

    /// Whether `dir` names object storage (`s3://…`, `az://…`) rather than a local directory.
    pub fn is_object_url(dir: &Path) -> bool {
        dir.to_str()
            .is_some_and(|s| s.starts_with("s3://") || s.starts_with("az://"))
    }

    /// Opens (creating if needed) the checkpoint at `url` on HDFS
    /// (`hdfs://namenode:port/path`), with the same layout and guarantees as a directory:
    /// "create only if absent" is a rename without overwrite, which the NameNode refuses when
    /// the name exists, and a batch file is visible only once whole.
    #[cfg(feature = "hdfs")]
    pub async fn open_hdfs(url: &str, retention: usize) -> Result<CheckpointStore, StoreError> {
        Self::open_hdfs_with(url, retention, &[]).await
    }

    /// [`open_hdfs`](Self::open_hdfs) with Hadoop client settings by their names
    /// (`dfs.client.socket-timeout`, `dfs.client.failover.max.attempts`, …).
    #[cfg(feature = "hdfs")]
    pub async fn open_hdfs_with(
        url: &str,
        retention: usize,
        config: &[(&str, &str)],
    ) -> Result<CheckpointStore, StoreError> {
        let name = PathBuf::from(url);
        let url = url.to_owned();
        let config: Vec<(String, String)> = config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let rt = tokio::runtime::Handle::try_current().map_err(|e| {
            io(&name, "open (no tokio runtime)")(std::io::Error::other(e.to_string()))
        })?;
        // Opening talks to the NameNode (it creates the directories): on a blocking thread,
        // as every later call.
        let opened = tokio::task::spawn_blocking(move || {
            let _entered = rt.enter();
            let config: Vec<(&str, &str)> = config
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let hdfs = crate::hdfs::Hdfs::open(Path::new(&url), &config)?;
            let inner = Inner {
                dir: hdfs.url().to_owned(),
                backend: Backend::Hdfs(hdfs),
                retention: retention.max(1),
                sync_dir: false,
                state: Mutex::new(None),
            };
            inner.open_metadata()?;
            Ok(inner)
        })
        .await;
        match opened {
            Ok(r) => r.map(|inner| CheckpointStore {
                inner: Arc::new(inner),
            }),
            Err(e) => Err(io(name, "checkpoint task")(std::io::Error::other(
                e.to_string(),
            ))),
        }
    }

    /// Whether `dir` names HDFS (`hdfs://…`) rather than a local directory.
    pub fn is_hdfs_url(dir: &Path) -> bool {
        dir.to_str().is_some_and(|s| s.starts_with("hdfs://"))
    }
}

impl Inner {
    /// Checks the `metadata` file, or creates it for a new checkpoint.
    fn open_metadata(&self) -> Result<(), StoreError> {
        let dir = &self.dir;
        let meta = dir.join("metadata");
        match self.read(&meta).and_then(|b| {
            String::from_utf8(b).map_err(|e| {
                StoreErrorKind::Corrupt {
                    path: meta.clone(),
                    reason: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
                }
                .into()
            })
        }) {
            Ok(text) => {
                let v: Value = serde_json::from_str(text.trim_end()).map_err(|e| {
                    StoreError::from(StoreErrorKind::Corrupt {
                        path: meta.clone(),
                        reason: format!("not JSON ({e}); expected {{\"id\":\"…\"}}"),
                    })
                })?;
                if v.get("id").and_then(Value::as_str).is_none() {
                    return Err(StoreErrorKind::Corrupt {
                        path: meta,
                        reason: "no \"id\" string".to_owned(),
                    }
                    .into());
                }
            }
            Err(e)
                if matches!(e.kind(), StoreErrorKind::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound) =>
            {
                let id = stream_id(dir);
                let text = format!("{}\n", serde_json::json!({ "id": id }));
                match self.create(dir, &meta, text.as_bytes()) {
                    Ok(()) => {}
                    // Another process created it first: fine, it is the same stream.
                    Err(e) if matches!(e.kind(), StoreErrorKind::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Reads a checkpoint file ([`read_bounded`] on a disk; a bounded GET on object storage,
    /// where a missing object is the same `NotFound` as a missing file).
    fn read(&self, path: &Path) -> Result<Vec<u8>, StoreError> {
        match &self.backend {
            Backend::Disk => read_bounded(path),
            #[cfg(feature = "object-store")]
            Backend::Object(b) => b.read(path, MAX_CHECKPOINT_FILE)?.ok_or_else(|| {
                io(path, "read")(std::io::Error::from(std::io::ErrorKind::NotFound))
            }),
            #[cfg(feature = "hdfs")]
            Backend::Hdfs(h) => h.read(path, MAX_CHECKPOINT_FILE)?.ok_or_else(|| {
                io(path, "read")(std::io::Error::from(std::io::ErrorKind::NotFound))
            }),
        }
    }

    /// Creates `path` (in directory `dir`) only if absent ([`create_new`] on a disk; the
    /// store's conditional write on object storage).
    fn create(&self, dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Disk => create_new(dir, path, bytes),
            #[cfg(feature = "object-store")]
            Backend::Object(b) => b.create(path, bytes),
            #[cfg(feature = "hdfs")]
            Backend::Hdfs(h) => h.create(path, bytes),
        }
    }

    /// The names in directory `d`.
    fn list(&self, d: &Path) -> Result<Vec<String>, StoreError> {
        match &self.backend {
            Backend::Disk => {
                let mut names = Vec::new();
                for entry in fs::read_dir(d).map_err(io(d, "list"))? {
                    let entry = entry.map_err(io(d, "list"))?;
                    // A name that is not UTF-8 is no batch file: skipped, as temp files are.
                    if let Ok(n) = entry.file_name().into_string() {
                        names.push(n);
                    }
                }
                Ok(names)
            }
            #[cfg(feature = "object-store")]
            Backend::Object(b) => b.list(d),
            #[cfg(feature = "hdfs")]
            Backend::Hdfs(h) => h.list(d),
        }
    }

    /// Whether a file exists.
    fn exists(&self, path: &Path) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Disk => Ok(path.exists()),
            #[cfg(feature = "object-store")]
            Backend::Object(b) => b.exists(path),
            #[cfg(feature = "hdfs")]
            Backend::Hdfs(h) => h.exists(path),
        }
    }

    /// Removes a file (absent is fine).
    fn remove(&self, path: &Path) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Disk => match fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io(path, "remove old batch file")(e)),
            },
            #[cfg(feature = "object-store")]
            Backend::Object(b) => b.remove(path),
            #[cfg(feature = "hdfs")]
            Backend::Hdfs(h) => h.remove(path),
        }
    }
}

impl CheckpointStore {
    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The path of `offsets/<id>`.
    pub fn offsets_path(&self, id: u64) -> PathBuf {
        self.inner.dir.join("offsets").join(id.to_string())
    }

    /// The path of `commits/<id>`.
    pub fn commits_path(&self, id: u64) -> PathBuf {
        self.inner.dir.join("commits").join(id.to_string())
    }

    /// Runs blocking file work off the async runtime's worker threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        match tokio::task::spawn_blocking(move || f(&inner)).await {
            Ok(r) => r,
            Err(e) => Err(io(&self.inner.dir, "checkpoint task")(
                std::io::Error::other(e.to_string()),
            )),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Option<DiskState>> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The committed state, read synchronously. Every retained file is read and checked.
    pub fn load_sync(&self) -> Result<Committed, StoreError> {
        let mut slot = self.state();
        *slot = None;
        let s = self.inner.read_state()?;
        *slot = Some(s.clone());
        Ok(Committed {
            batch_id: s.committed.as_ref().map(|(id, _)| *id),
            positions: s.committed.map(|(_, p)| p).unwrap_or_default(),
            pending: s.pending,
            epochs: s.epochs,
            topic_ids: s.topic_ids,
        })
    }

    /// Logs a plan, synchronously.
    pub fn log_plan_sync(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        let mut slot = self.state();
        // The cached state may be stale if another process wrote: on an error, read the
        // directory again and decide on what it holds.
        let fresh = slot.is_none();
        let mut result = self.inner.log_plan_on(batch, &mut slot);
        if result.is_err() && !fresh {
            result = self.inner.log_plan_on(batch, &mut slot);
        }
        result
    }

    /// Commits, synchronously.
    pub fn commit_sync(&self, batch: &PlannedBatch) -> Result<CommitOutcome, StoreError> {
        let mut slot = self.state();
        let fresh = slot.is_none();
        let mut result = self.inner.commit_on(batch, &mut slot);
        if result.is_err() && !fresh {
            result = self.inner.commit_on(batch, &mut slot);
        }
        result
    }
}

impl Inner {
    fn describe(&self) -> String {
        format!("checkpoint {}", self.dir.display())
    }

    fn offsets_path(&self, id: u64) -> PathBuf {
        self.dir.join("offsets").join(id.to_string())
    }

    fn commits_path(&self, id: u64) -> PathBuf {
        self.dir.join("commits").join(id.to_string())
    }

    fn read_file(&self, path: &Path, id: u64) -> Result<CheckpointFile, StoreError> {
        let bytes = self.read(path)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            StoreError::from(StoreErrorKind::Corrupt {
                path: path.to_owned(),
                reason: format!(
                    "not UTF-8 text (byte {}): garbage?",
                    e.utf8_error().valid_up_to()
                ),
            })
        })?;
        let file = CheckpointFile::decode(&text, path)?;
        if file.batch_id != id {
            return Err(StoreErrorKind::Corrupt {
                path: path.to_owned(),
                reason: format!("batchId {} does not match the file name", file.batch_id),
            }
            .into());
        }
        Ok(file)
    }

    /// [`write_new`], replacing a torn file left by a crash (the newest of its directory,
    /// counted as absent by `read_state`) instead of failing on it.
    fn write_batch_file(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        #[cfg(feature = "object-store")]
        if let Backend::Object(b) = &self.backend {
            // An object is written whole or not at all: nothing is ever torn.
            return b.create(path, bytes);
        }
        #[cfg(feature = "hdfs")]
        if let Backend::Hdfs(h) = &self.backend {
            // A batch file is renamed into place only once whole: nothing is ever torn.
            return h.create(path, bytes);
        }
        let dir = path.parent().unwrap_or(&self.dir);
        match write_new(path, bytes) {
            Ok(()) if self.sync_dir => File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(dir, "fsync directory")),
            Err(e)
                if matches!(e.kind(), StoreErrorKind::AlreadyExists { .. })
                    && self.is_torn(path) =>
            {
                replace_torn(dir, path, bytes, |p| self.is_torn(p))
            }
            other => other,
        }
    }

    /// Whether `path` is a batch file a crash cut short, as page-granular writeback leaves
    /// them: empty, with NUL bytes (pages the size covers that never reached the disk), or cut
    /// at a page boundary — and not parsing. Text cut anywhere else, or garbage, is not a
    /// tear: it is corruption, refused by name (a person must look).
    fn is_torn(&self, path: &Path) -> bool {
        let Ok(bytes) = self.read(path) else {
            return false;
        };
        let parses = std::str::from_utf8(&bytes)
            .ok()
            .is_some_and(|t| CheckpointFile::decode(t, path).is_ok());
        !parses && (bytes.is_empty() || bytes.contains(&0) || bytes.len() % 4096 == 0)
    }

    /// Batch ids present in `sub`, checked to be contiguous.
    fn ids(&self, sub: &str) -> Result<Vec<u64>, StoreError> {
        let d = self.dir.join(sub);
        let mut ids = Vec::new();
        for name in self.list(&d)? {
            let name = name.as_str();
            // Temp files (".N.tmp-…") and editor leftovers are not batch files.
            if name.starts_with('.') {
                continue;
            }
            match name.parse::<u64>() {
                Ok(id) if id.to_string() == name => ids.push(id),
                _ => {
                    return Err(StoreErrorKind::Corrupt {
                        path: d.join(name),
                        reason:
                            "not a batch file (names are batch ids); move it out of the checkpoint"
                                .to_owned(),
                    }
                    .into())
                }
            }
        }
        ids.sort_unstable();
        for w in ids.windows(2) {
            if w[1] != w[0] + 1 {
                return Err(StoreErrorKind::Gap {
                    missing: d.join((w[0] + 1).to_string()),
                    before: d.join(w[0].to_string()),
                    after: d.join(w[1].to_string()),
                }
                .into());
            }
        }
        Ok(ids)
    }

    fn log_plan_on(
        &self,
        batch: &PlannedBatch,
        slot: &mut Option<DiskState>,
    ) -> Result<(), StoreError> {
        let mut s = self.cached(slot)?;
        match self.log_plan(batch, &s) {
            Ok(true) => {
                s.latest_offsets = Some(batch.id);
                s.oldest = s.oldest.or(Some(batch.id));
                s.pending = Some(batch.clone());
                // Old batches' files go here, before the batch runs, not in the commit: the
                // commit is one fsync and nothing else.
                if let Some((c, _)) = &s.committed {
                    let oldest = s.oldest.unwrap_or(*c);
                    match self.retain(oldest, batch.id, *c) {
                        Ok(o) => s.oldest = Some(o),
                        Err(e) => {
                            *slot = None;
                            return Err(e);
                        }
                    }
                }
                *slot = Some(s);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => {
                *slot = None;
                Err(e)
            }
        }
    }

    fn commit_on(
        &self,
        batch: &PlannedBatch,
        slot: &mut Option<DiskState>,
    ) -> Result<CommitOutcome, StoreError> {
        let s = self.cached(slot)?;
        match self.commit(batch, s) {
            Ok((outcome, next)) => {
                *slot = next;
                Ok(outcome)
            }
            Err(e) => {
                *slot = None;
                Err(e)
            }
        }
    }

    /// The cached state, read from disk if there is none.
    fn cached(&self, slot: &mut Option<DiskState>) -> Result<DiskState, StoreError> {
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let s = self.read_state()?;
        *slot = Some(s.clone());
        Ok(s)
    }

    fn read_state(&self) -> Result<DiskState, StoreError> {
        let mut offsets = self.ids("offsets")?;
        let mut commits = self.ids("commits")?;
        // A batch file is written with one fsync (`write_new`): a crash before it ends can
        // leave the newest file of a directory torn (empty, cut short, NUL-filled). That file
        // was never acknowledged, so it counts as not written. Only the newest can be torn;
        // anything else that does not parse is corruption, reported below.
        if commits
            .last()
            .is_some_and(|&c| self.is_torn(&self.commits_path(c)))
        {
            commits.pop();
        }
        if offsets.last().is_some_and(|&o| {
            commits.last().is_none_or(|&c| c < o) && self.is_torn(&self.offsets_path(o))
        }) {
            offsets.pop();
        }
        let last_o = offsets.last().copied();
        let last_c = commits.last().copied();
        // Every retained batch file must parse: corruption anywhere is reported, not skipped.
        for &id in &offsets {
            self.read_file(&self.offsets_path(id), id)?;
        }
        let mut epochs = Epochs::new();
        let mut topic_ids = TopicIds::new();
        let committed = match last_c {
            Some(c) => {
                for &id in &commits[..commits.len() - 1] {
                    self.read_file(&self.commits_path(id), id)?;
                }
                let f = self.read_file(&self.commits_path(c), c)?;
                if last_o.is_none_or(|o| o < c) {
                    return Err(StoreErrorKind::Inconsistent {
                        path: self.commits_path(c),
                        reason: format!("there is no {}", self.offsets_path(c).display()),
                    }
                    .into());
                }
                epochs = f.leader_epochs();
                topic_ids = f.topic_ids.clone();
                Some((c, f.positions()))
            }
            None => None,
        };
        let pending = match (last_o, last_c) {
            (Some(o), Some(c)) if o == c => None,
            (Some(o), Some(c)) if o == c + 1 => Some(o),
            (Some(o), None) => {
                if offsets.len() > 1 {
                    return Err(StoreErrorKind::Inconsistent {
                        path: self.offsets_path(offsets[0]),
                        reason: format!(
                            "batches up to {o} are logged but none is committed (no commits/ files)"
                        ),
                    }
                    .into());
                }
                Some(o)
            }
            (Some(o), Some(c)) if o > c + 1 => {
                return Err(StoreErrorKind::Inconsistent {
                    path: self.offsets_path(o),
                    reason: format!(
                        "batch {o} is logged but {} does not exist",
                        self.commits_path(o - 1).display()
                    ),
                }
                .into())
            }
            _ => None,
        };
        let pending = match pending {
            Some(id) => Some(self.read_file(&self.offsets_path(id), id)?.planned()),
            None => None,
        };
        let oldest = match (offsets.first(), commits.first()) {
            (Some(&a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b).copied(),
        };
        Ok(DiskState {
            oldest,
            committed,
            epochs,
            topic_ids,
            latest_offsets: last_o,
            pending,
        })
    }

    fn expected_next(&self, s: &DiskState) -> Option<u64> {
        match (&s.committed, s.latest_offsets) {
            (Some((c, _)), _) => Some(c + 1),
            (None, Some(o)) => Some(o),
            (None, None) => None,
        }
    }

    /// Logs `batch` on top of state `s`. `Ok(false)`: the batch is already committed with the
    /// same positions (nothing written).
    fn log_plan(&self, batch: &PlannedBatch, s: &DiskState) -> Result<bool, StoreError> {
        if let Some((c, _)) = &s.committed {
            if batch.id <= *c {
                self.recommit(batch)?;
                return Ok(false);
            }
        }
        if let Some(next) = self.expected_next(s) {
            if batch.id != next {
                return Err(StoreErrorKind::BatchOrder {
                    store: self.describe(),
                    expected: next,
                    got: batch.id,
                }
                .into());
            }
        }
        let empty = Positions::new();
        let stored = s.committed.as_ref().map_or(&empty, |(_, p)| p);
        check_from(&self.describe(), stored, batch)?;
        let path = self.offsets_path(batch.id);
        let file = CheckpointFile {
            batch_id: batch.id,
            timestamp_ms: now_ms(),
            from: Some(froms(&batch.ranges)),
            offsets: untils(&batch.ranges),
            epochs: Default::default(),
            moved_back: by_topic(&batch.moved_back),
            topic_ids: TopicIds::new(),
        };
        match self.write_batch_file(&path, file.encode().as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.kind(), StoreErrorKind::AlreadyExists { .. }) => {
                // A re-run of the logged batch logs the same plan again: fine. Another plan
                // means another writer planned this batch.
                let existing = self.read_file(&path, batch.id)?;
                if same_plan(&existing.planned(), batch) {
                    Ok(true)
                } else {
                    Err(StoreErrorKind::AlreadyExists {
                        path,
                        reason: format!(
                            "batch {} was logged with other ranges (another writer on this checkpoint?)",
                            batch.id
                        ),
                    }
                    .into())
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Commits `batch` on top of state `s`; gives the state after (`None` if unknown).
    fn commit(
        &self,
        batch: &PlannedBatch,
        s: DiskState,
    ) -> Result<(CommitOutcome, Option<DiskState>), StoreError> {
        if let Some((c, _)) = &s.committed {
            if batch.id <= *c {
                return Ok((self.recommit(batch)?, Some(s)));
            }
        }
        // Write-ahead first if the stream did not (or the plan was already logged: no-op).
        let logged = s
            .pending
            .as_ref()
            .is_some_and(|p| p.id == batch.id && same_plan(p, batch));
        if !logged {
            let path = self.offsets_path(batch.id);
            if self.exists(&path)? {
                let existing = self.read_file(&path, batch.id)?;
                if !same_plan(&existing.planned(), batch) {
                    return Err(StoreErrorKind::AlreadyExists {
                        path,
                        reason: format!(
                            "batch {} was logged with other ranges than it commits",
                            batch.id
                        ),
                    }
                    .into());
                }
            } else {
                self.log_plan(batch, &s)?;
            }
        }
        let DiskState {
            oldest,
            committed,
            mut epochs,
            mut topic_ids,
            ..
        } = s;
        let mut state = committed.map(|(_, p)| p).unwrap_or_default();
        check_from(&self.describe(), &state, batch)?;
        crate::merge_resume_state(&mut epochs, &mut topic_ids, batch);
        state.extend(batch.ranges.iter().map(|r| (r.topic_partition(), r.until)));
        topic_ids.retain(|t, _| state.keys().any(|tp| tp.topic == *t));
        let file = CheckpointFile {
            batch_id: batch.id,
            timestamp_ms: now_ms(),
            from: None,
            offsets: by_topic(&state),
            epochs: by_topic(&epochs),
            moved_back: TopicOffsets::new(),
            topic_ids: topic_ids.clone(),
        };
        let path = self.commits_path(batch.id);
        match self.write_batch_file(&path, file.encode().as_bytes()) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), StoreErrorKind::AlreadyExists { .. }) => {
                return Ok((self.recommit(batch)?, None))
            }
            Err(e) => return Err(e),
        }
        Ok((
            CommitOutcome::Committed,
            Some(DiskState {
                oldest: Some(oldest.unwrap_or(batch.id)),
                committed: Some((batch.id, state)),
                epochs,
                topic_ids,
                latest_offsets: Some(batch.id),
                pending: None,
            }),
        ))
    }

    /// `batch` has an id that is already committed: the same positions are a no-op; others are
    /// a conflict (another writer committed this batch id).
    fn recommit(&self, batch: &PlannedBatch) -> Result<CommitOutcome, StoreError> {
        let path = self.commits_path(batch.id);
        if !self.exists(&path)? {
            return Err(StoreErrorKind::BatchOrder {
                store: self.describe(),
                expected: self.expected_next(&self.read_state()?).unwrap_or(0),
                got: batch.id,
            }
            .into());
        }
        let existing = self.read_file(&path, batch.id)?.positions();
        for r in &batch.ranges {
            let stored = existing.get(&r.topic_partition()).copied();
            if stored != Some(r.until) {
                return Err(crate::conflict(
                    &format!("{} ({})", self.describe(), path.display()),
                    r,
                    r.until,
                    stored,
                ));
            }
        }
        Ok(CommitOutcome::AlreadyCommitted)
    }

    /// Deletes the files of batches `oldest..` older than the last `retention` batches, oldest
    /// first (so that a crash half-way leaves no gap). Returns the new oldest id.
    /// Removes the files of batches before the last `retention` up to `planned` (the batch
    /// just logged), never the last committed one's (`committed`): it holds the positions.
    fn retain(&self, oldest: u64, planned: u64, committed: u64) -> Result<u64, StoreError> {
        let keep_from = (planned + 1)
            .saturating_sub(self.retention as u64)
            .min(committed);
        for id in oldest..keep_from {
            for sub in ["offsets", "commits"] {
                self.remove(&self.dir.join(sub).join(id.to_string()))?;
            }
        }
        Ok(oldest.max(keep_from))
    }

    fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        let s = self.read_state()?;
        if let Some(p) = &s.pending {
            return Err(StoreErrorKind::Pending {
                store: self.describe(),
                batch_id: p.id,
                path: self.offsets_path(p.id),
            }
            .into());
        }
        if let Some(next) = self.expected_next(&s) {
            if batch_id != next {
                return Err(StoreErrorKind::BatchOrder {
                    store: self.describe(),
                    expected: next,
                    got: batch_id,
                }
                .into());
            }
        }
        let mut state = s.committed.map(|(_, p)| p).unwrap_or_default();
        let ranges: Vec<OffsetRange> = positions
            .iter()
            .map(|(tp, &to)| {
                // A move back (a reset to an earlier offset) is no range of records: it is
                // logged as an empty one at the new position (a range never ends before it
                // starts).
                let from = state.get(tp).copied().unwrap_or(to).min(to);
                OffsetRange::new(tp.topic.clone(), tp.partition, from, to)
            })
            .collect();
        let batch = PlannedBatch::new(batch_id, ranges);
        let file = CheckpointFile {
            batch_id,
            timestamp_ms: now_ms(),
            from: Some(froms(&batch.ranges)),
            offsets: untils(&batch.ranges),
            epochs: Default::default(),
            moved_back: TopicOffsets::new(),
            topic_ids: TopicIds::new(),
        };
        self.create(
            &self.dir.join("offsets"),
            &self.offsets_path(batch_id),
            file.encode().as_bytes(),
        )?;
        // A position set by hand has no known epoch, and its topic no known id (it is set for
        // the topic as it is now); the others keep theirs.
        let mut epochs = s.epochs;
        let mut topic_ids = s.topic_ids;
        crate::forget_set_positions(&mut epochs, &mut topic_ids, &state, positions);
        state.extend(positions.iter().map(|(tp, o)| (tp.clone(), *o)));
        let commit = CheckpointFile {
            batch_id,
            timestamp_ms: now_ms(),
            from: None,
            offsets: by_topic(&state),
            epochs: by_topic(&epochs),
            moved_back: TopicOffsets::new(),
            topic_ids,
        };
        self.create(
            &self.dir.join("commits"),
            &self.commits_path(batch_id),
            commit.encode().as_bytes(),
        )?;
        self.retain(s.oldest.unwrap_or(batch_id), batch_id, batch_id)?;
        Ok(())
    }
}

fn sorted(mut v: Vec<OffsetRange>) -> Vec<OffsetRange> {
    v.sort();
    v
}

/// Whether two plans of one batch id are the same: their ranges (in any order) and the
/// positions they move back from.
fn same_plan(a: &PlannedBatch, b: &PlannedBatch) -> bool {
    a.moved_back == b.moved_back && sorted(a.ranges.clone()) == sorted(b.ranges.clone())
}

/// A stream id for `metadata`: not cryptographic, only distinct per directory and moment.
fn stream_id(dir: &Path) -> String {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    dir.hash(&mut h);
    std::process::id().hash(&mut h);
    SystemTime::now().hash(&mut h);
    let a = h.finish();
    a.hash(&mut h);
    format!("{a:016x}{:016x}", h.finish())
}

/// The largest checkpoint file read (`metadata`, `offsets/N`, `commits/N`): a plan for
/// 100,000 partitions is about 5 MB, so 64 MiB is far past any real one.
pub const MAX_CHECKPOINT_FILE: u64 = 64 << 20;

/// Reads a checkpoint file that must be a regular file (not a FIFO, device or directory: a
/// FIFO would block, /dev/zero never end) no larger than [`MAX_CHECKPOINT_FILE`]. The read
/// itself is bounded too, in case the file grows while read.
pub(crate) fn read_bounded(path: &Path) -> Result<Vec<u8>, StoreError> {
    use std::io::Read;
    let meta = fs::metadata(path).map_err(io(path, "read"))?;
    if !meta.is_file() {
        return Err(StoreErrorKind::Corrupt {
            path: path.to_owned(),
            reason: "not a regular file (a directory, FIFO, socket or device)".to_owned(),
        }
        .into());
    }
    if meta.len() > MAX_CHECKPOINT_FILE {
        return Err(StoreErrorKind::Corrupt {
            path: path.to_owned(),
            reason: format!(
                "{} bytes, more than any checkpoint file ({MAX_CHECKPOINT_FILE} bytes at most)",
                meta.len()
            ),
        }
        .into());
    }
    let file = fs::File::open(path).map_err(io(path, "read"))?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_CHECKPOINT_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path, "read"))?;
    if bytes.len() as u64 > MAX_CHECKPOINT_FILE {
        return Err(StoreErrorKind::Corrupt {
            path: path.to_owned(),
            reason: format!("grew past {MAX_CHECKPOINT_FILE} bytes while read"),
        }
        .into());
    }
    Ok(bytes)
}

/// The type of the filesystem holding `dir` (as `/proc/self/mountinfo` names it), if it can
/// be told.
fn filesystem_of(dir: &Path) -> Option<String> {
    let path = fs::canonicalize(dir).ok()?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    filesystem_in(&mountinfo, &path).map(str::to_owned)
}

/// In a `/proc/self/mountinfo` text, the type of the filesystem mounted on the longest mount
/// point that holds `path` (the last one mounted there, when several were).
fn filesystem_in<'a>(mountinfo: &'a str, path: &Path) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for line in mountinfo.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS
        let (Some(mount), Some((_, after))) = (line.split(' ').nth(4), line.split_once(" - "))
        else {
            continue;
        };
        let Some(fstype) = after.split(' ').next() else {
            continue;
        };
        // Spaces, tabs, newlines and backslashes in a mount point are octal escapes.
        let mount = mount
            .replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\012", "\n")
            .replace("\\134", "\\");
        if path.starts_with(&mount) && best.is_none_or(|(len, _)| mount.len() >= len) {
            best = Some((mount.len(), fstype));
        }
    }
    best.map(|(_, t)| t)
}

/// Whether a batch file's directory entry needs a directory fsync of its own to be durable.
/// Not on the journaling filesystems whose fsync of a file commits the journal transaction
/// holding its link (ext3/ext4, XFS, btrfs, ZFS), nor on tmpfs (nothing there outlives a
/// crash anyway); on any other (NFS, overlay, FAT, FUSE, one that cannot be told) it does.
fn needs_directory_fsync(fstype: Option<&str>) -> bool {
    !matches!(
        fstype,
        Some("ext3" | "ext4" | "xfs" | "btrfs" | "zfs" | "tmpfs")
    )
}

/// Writes a batch file with one durable write, never over an existing file, and never showing
/// a partial file under the final name: the bytes go to a temp file of unique name
/// ([`create_temp_beside`]), which is hard-linked to `path` (the link fails if `path` exists:
/// of two writers exactly one wins, and the loser gets `AlreadyExists`, having seen a whole
/// file), then made durable with one fsync and the temp name removed. On the journaling
/// filesystems kdirect usually runs on (ext4, XFS, btrfs), the fsync of a file after its link
/// also makes the new directory entry durable (the link is in the journal transaction the
/// fsync commits), so the directory needs no fsync of its own; on any other the caller
/// fsyncs the directory too ([`needs_directory_fsync`]). A crash before the fsync returns can
/// still leave a torn file at `path`: it was never acknowledged, and `read_state` counts the
/// newest file of a directory as absent when it is torn; a torn file in the way of a new write
/// is replaced (`replace_torn`). A crash can also leave the temp name (a `.` file, skipped by
/// every listing).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let (mut f, tmp) = create_temp_beside(path).map_err(io(path, "create a temp file for"))?;
    pause_point(path);
    let linked = f
        .write_all(bytes)
        .map_err(io(&tmp, "write"))
        .and_then(|()| match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(StoreErrorKind::AlreadyExists {
                    path: path.to_owned(),
                    reason: "a batch file is never overwritten".to_owned(),
                }
                .into())
            }
            Err(e) => Err(io(path, "link")(e)),
        });
    let written = linked.and_then(|()| {
        f.sync_all().map_err(io(path, "fsync")).inspect_err(|_| {
            // Not acknowledged: leave no file that was never made durable behind (a full
            // disk, an I/O error).
            let _ = fs::remove_file(path);
        })
    });
    drop(f);
    let _ = fs::remove_file(&tmp);
    written
}

// A test's hook into a batch file's write, on the writer's thread, once: where a second
// writer is run in the middle of the first (a deterministic interleaving, no sleeps).
#[cfg(test)]
type PauseHook = Box<dyn FnOnce(&Path)>;

#[cfg(test)]
thread_local! {
    static PAUSE: std::cell::RefCell<Option<PauseHook>> = const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
fn pause_point(path: &Path) {
    if let Some(hook) = PAUSE.with(|p| p.borrow_mut().take()) {
        hook(path);
    }
}

#[cfg(not(test))]
#[inline(always)]
fn pause_point(_: &Path) {}

/// Replaces the torn file at `path` with `bytes`: temp file, fsync, rename over it, fsync the
/// directory (the slow path, once after a crash). Writers replace under an exclusive lock on
/// `dir/.replace.lock` (flock: released if the process dies) and look again under it: of two
/// writers that both found the file torn, the first replaces it and the second finds a whole
/// file, `AlreadyExists`, as if it had lost the link in [`write_new`].
fn replace_torn(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    is_torn: impl Fn(&Path) -> bool,
) -> Result<(), StoreError> {
    let lock_path = dir.join(".replace.lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path, "open"))?;
    lock.lock().map_err(io(&lock_path, "lock"))?;
    if !is_torn(path) {
        return Err(StoreErrorKind::AlreadyExists {
            path: path.to_owned(),
            reason: "another writer replaced the torn file first".to_owned(),
        }
        .into());
    }
    let (mut f, tmp) = create_temp_beside(path).map_err(io(path, "create a temp file for"))?;
    let result = (|| {
        f.write_all(bytes).map_err(io(&tmp, "write"))?;
        f.sync_all().map_err(io(&tmp, "fsync"))?;
        fs::rename(&tmp, path).map_err(io(path, "rename"))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "fsync directory"))
}

/// Creates `path` (in directory `dir`) with `bytes`, atomically and never over an existing
/// file: temp file, fsync, hard link to the final name (fails if it exists), remove the temp,
/// fsync the directory. For the `metadata` file and `set_positions` (rare writes).
fn create_new(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let (mut f, tmp) = create_temp_beside(path).map_err(io(path, "create a temp file for"))?;
    let result = (|| {
        f.write_all(bytes).map_err(io(&tmp, "write"))?;
        f.sync_all().map_err(io(&tmp, "fsync"))?;
        drop(f);
        match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(StoreError::from(StoreErrorKind::AlreadyExists {
                    path: path.to_owned(),
                    reason: "a batch file is never overwritten".to_owned(),
                }))
            }
            Err(e) => Err(io(path, "link")(e)),
        }
    })();
    let _ = fs::remove_file(&tmp);
    result?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "fsync directory"))
}

impl OffsetStore for CheckpointStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        let this = self.clone();
        let mut c = self.blocking(move |_| this.load_sync()).await?;
        c.retain_topics(topics);
        Ok(c)
    }

    async fn log_plan(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        let this = self.clone();
        let batch = batch.clone();
        self.blocking(move |_| this.log_plan_sync(&batch)).await
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        _ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        let this = self.clone();
        let batch = batch.clone();
        self.blocking(move |_| this.commit_sync(&batch)).await
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        let positions = positions.clone();
        self.blocking(move |inner| {
            let mut slot = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
            *slot = None;
            inner.set_positions(batch_id, &positions)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        kdirect_test_support::tmpdir(&format!("ckpt-{name}"))
    }

    /// Issue 36 (low): a checkpoint on a filesystem where a file's fsync may not make its
    /// directory entry durable (NFS, overlay, one that cannot be told) fsyncs the directory
    /// after each batch file; on ext4, XFS, btrfs, ZFS and tmpfs the file's fsync is enough.
    #[test]
    fn the_directory_is_fsynced_where_the_filesystem_does_not_promise_the_entry() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:27 / /data rw,relatime shared:5 - xfs /dev/sdb1 rw
31 30 0:40 / /data/nfs rw,relatime shared:6 - nfs4 server:/export rw,vers=4.2
32 22 0:41 / /var/lib/docker/overlay rw - overlay overlay rw
33 22 0:42 / /tmp rw - tmpfs tmpfs rw
34 22 0:43 / /mnt/my\\040disk rw - vfat /dev/sdc1 rw
35 22 0:44 / /data rw - btrfs /dev/sdd1 rw
";
        let fs_of = |p: &str| filesystem_in(mountinfo, Path::new(p));
        assert_eq!(fs_of("/home/me/ckpt"), Some("ext4"));
        // The last mount on a mount point hides the earlier ones.
        assert_eq!(fs_of("/data/ckpt"), Some("btrfs"));
        assert_eq!(fs_of("/data/nfs/ckpt"), Some("nfs4"));
        // A component that only starts like a mount point is not under it.
        assert_eq!(fs_of("/data/nfsx"), Some("btrfs"));
        assert_eq!(fs_of("/mnt/my disk/ckpt"), Some("vfat"));
        assert_eq!(fs_of("/tmp/x"), Some("tmpfs"));
        for (fstype, sync) in [
            (Some("ext4"), false),
            (Some("xfs"), false),
            (Some("btrfs"), false),
            (Some("zfs"), false),
            (Some("tmpfs"), false),
            (Some("nfs4"), true),
            (Some("nfs"), true),
            (Some("overlay"), true),
            (Some("vfat"), true),
            (Some("fuse.sshfs"), true),
            (None, true),
        ] {
            assert_eq!(needs_directory_fsync(fstype), sync, "{fstype:?}");
        }
        // This machine's own answer for a real directory is one of those.
        let d = tmpdir("fstype");
        fs::create_dir_all(&d).unwrap();
        assert!(filesystem_of(&d).is_some(), "{}", d.display());
        let _ = fs::remove_dir_all(&d);
    }

    fn batch(id: u64, from: i64, until: i64) -> PlannedBatch {
        PlannedBatch::new(
            id,
            vec![
                OffsetRange::new("events", 0, from, until),
                OffsetRange::new("events", 1, from + 100, until + 100),
            ],
        )
    }

    /// Found by the `checkpoint_file` fuzz target: a plan whose `from` is past its offset
    /// (`"0000001"` names partition 1 too) decoded into a range that ends before it starts.
    #[test]
    fn a_from_past_its_offset_is_an_empty_range_never_an_inverted_one() {
        // Older `offsets set` wrote a move back as from > offset: it reads as an empty range at
        // the offset, never as a range that ends before it starts.
        let text = "v1\n{\"batchId\":7,\"from\":{\"events\":{\"0000001\":1100,\"0\":900}}}\n\
                    {\"events\":{\"0\":1200,\"1\":950}}\n";
        let f = CheckpointFile::decode(text, Path::new("/ck/offsets/7")).unwrap();
        assert_eq!(
            f.ranges(),
            vec![
                OffsetRange::new("events", 0, 900, 1200),
                OffsetRange::new("events", 1, 950, 950)
            ]
        );
        let empty = "v1\n{\"batchId\":7,\"from\":{\"e\":{\"0\":5}}}\n{\"e\":{\"0\":5}}\n";
        let f = CheckpointFile::decode(empty, Path::new("/ck/offsets/7")).unwrap();
        assert_eq!(f.ranges(), vec![OffsetRange::new("e", 0, 5, 5)]);
    }

    #[test]
    fn file_round_trip_and_layout() {
        let f = CheckpointFile {
            batch_id: 7,
            timestamp_ms: 1,
            from: Some([("events".to_owned(), [(0, 1100)].into())].into()),
            offsets: [("events".to_owned(), [(0, 1200)].into())].into(),
            epochs: TopicEpochs::new(),
            moved_back: TopicOffsets::new(),
            topic_ids: TopicIds::new(),
        };
        let text = f.encode();
        assert_eq!(
            text,
            "v1\n{\"batchId\":7,\"from\":{\"events\":{\"0\":1100}},\"timestampMs\":1}\n{\"events\":{\"0\":1200}}\n"
        );
        assert_eq!(CheckpointFile::decode(&text, Path::new("x")).unwrap(), f);
        // Without the final newline (an editor) it still reads.
        assert_eq!(
            CheckpointFile::decode(text.trim_end(), Path::new("x")).unwrap(),
            f
        );
    }

    /// A plan that moves a partition back keeps the stored position it moves back from
    /// (line 2's `movedBackFrom`), and reads back as the same plan; one naming a partition
    /// without an offset, or a negative position, is refused by name.
    #[test]
    fn plans_keep_the_positions_they_move_back_from() {
        let f = CheckpointFile {
            batch_id: 7,
            timestamp_ms: 1,
            from: Some([("e".to_owned(), [(0, 0), (1, 40)].into())].into()),
            offsets: [("e".to_owned(), [(0, 12), (1, 50)].into())].into(),
            epochs: TopicEpochs::new(),
            moved_back: [("e".to_owned(), [(0, 15)].into())].into(),
            topic_ids: TopicIds::new(),
        };
        let text = f.encode();
        assert!(
            text.contains("\"movedBackFrom\":{\"e\":{\"0\":15}}"),
            "{text}"
        );
        let back = CheckpointFile::decode(&text, Path::new("x")).unwrap();
        assert_eq!(back, f);
        let plan = back.planned();
        assert_eq!(
            plan.ranges,
            vec![
                OffsetRange::new("e", 0, 0, 12),
                OffsetRange::new("e", 1, 40, 50)
            ]
        );
        assert_eq!(plan.expected_from(&plan.ranges[0]), 15);
        assert_eq!(plan.expected_from(&plan.ranges[1]), 40);
        for (bad, why) in [
            (
                "v1\n{\"batchId\":7,\"movedBackFrom\":{\"e\":{\"1\":2}}}\n{\"e\":{\"0\":5}}\n",
                "e-1 has a 'movedBackFrom' on line 2 but no offset on line 3",
            ),
            (
                "v1\n{\"batchId\":7,\"movedBackFrom\":{\"e\":{\"0\":-2}}}\n{\"e\":{\"0\":5}}\n",
                "line 2 'movedBackFrom'",
            ),
        ] {
            let e = CheckpointFile::decode(bad, Path::new("/ck/offsets/7")).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(why) && msg.contains("/ck/offsets/7"), "{msg}");
        }
    }

    /// Runs `second` in the middle of `first`'s batch file write (once the file exists, before
    /// it holds its bytes).
    fn interleave<T>(first: impl FnOnce() -> T, second: impl FnOnce() + 'static) -> T {
        PAUSE.with(|p| *p.borrow_mut() = Some(Box::new(move |_: &Path| second())));
        let r = first();
        assert!(
            PAUSE.with(|p| p.borrow_mut().take()).is_none(),
            "never paused"
        );
        r
    }

    /// Two writers log different plans for batch 0, the second in the middle of the first's
    /// write: exactly one succeeds, the other is refused, and the file holds the winner's plan.
    /// (Issue 36: the second found the first's file still empty, took it for torn and renamed
    /// its own over it; the first wrote into the unlinked file; both succeeded.)
    #[test]
    fn two_writers_logging_one_batch_one_wins() {
        let d = tmpdir("race-plan");
        let a = CheckpointStore::open(&d, 10).unwrap();
        let b = CheckpointStore::open(&d, 10).unwrap();
        let (plan_a, plan_b) = (batch(0, 0, 10), batch(0, 0, 20));
        let second = std::rc::Rc::new(std::cell::RefCell::new(None));
        let got = second.clone();
        let pb = plan_b.clone();
        let first = interleave(
            || a.log_plan_sync(&plan_a),
            move || *got.borrow_mut() = Some(b.log_plan_sync(&pb)),
        );
        let second = second.borrow_mut().take().unwrap();
        assert!(
            first.is_ok() != second.is_ok(),
            "exactly one may log batch 0: {first:?} / {second:?}"
        );
        let winner = if first.is_ok() { &plan_a } else { &plan_b };
        let loser = first.err().or(second.err()).unwrap();
        assert!(
            matches!(loser.kind(), StoreErrorKind::AlreadyExists { .. }),
            "{loser}"
        );
        let stored = CheckpointStore::open(&d, 10).unwrap().load_sync().unwrap();
        assert_eq!(
            stored.pending.as_ref().map(|p| &p.ranges),
            Some(&winner.ranges)
        );
    }

    /// The same for the commit file: two writers commit batch 0 (its plan logged), the second
    /// in the middle of the first's write: one commits, the other finds it committed.
    #[test]
    fn two_writers_committing_one_batch_one_wins() {
        let d = tmpdir("race-commit");
        let a = CheckpointStore::open(&d, 10).unwrap();
        let b = CheckpointStore::open(&d, 10).unwrap();
        let tp = TopicPartition::new("events", 0);
        let (ba, bb) = (
            batch(0, 0, 10).with_epochs([(tp.clone(), 1)].into()),
            batch(0, 0, 10).with_epochs([(tp.clone(), 2)].into()),
        );
        a.log_plan_sync(&ba).unwrap();
        b.log_plan_sync(&bb).unwrap();
        let second = std::rc::Rc::new(std::cell::RefCell::new(None));
        let got = second.clone();
        let bb2 = bb.clone();
        let first = interleave(
            || a.commit_sync(&ba),
            move || *got.borrow_mut() = Some(b.commit_sync(&bb2)),
        );
        let second = second.borrow_mut().take().unwrap();
        let outcomes = [first.unwrap(), second.unwrap()];
        let winner = match outcomes {
            [CommitOutcome::Committed, CommitOutcome::AlreadyCommitted] => 1,
            [CommitOutcome::AlreadyCommitted, CommitOutcome::Committed] => 2,
            o => panic!("exactly one may commit batch 0: {o:?}"),
        };
        let stored = CheckpointStore::open(&d, 10).unwrap().load_sync().unwrap();
        assert_eq!(stored.epochs, [(tp, winner)].into());
    }

    /// KIP-516: a commit file keeps the id of each topic its positions were read from (line
    /// 2's `topicIds`, hex), for the whole state: a batch's ids replace the stored ones (an
    /// all-zero id, from a broker without ids, says nothing), a topic left with no position
    /// keeps none, a position set by hand drops its topic's id, and plans carry none. A
    /// hand-edited id that is not 32 hex digits, or names a topic without offsets, is refused.
    #[test]
    fn commit_files_keep_each_topics_id() {
        let d = tmpdir("topic-ids");
        let s = CheckpointStore::open(&d, 10).unwrap();
        let id = |b: u8| [b; 16];
        let ids = |v: &[(&str, [u8; 16])]| -> TopicIds {
            v.iter().map(|(t, i)| (t.to_string(), *i)).collect()
        };
        s.commit_sync(&batch(0, 0, 10).with_topic_ids(ids(&[("events", id(0xab))])))
            .unwrap();
        let text = fs::read_to_string(s.commits_path(0)).unwrap();
        assert!(
            text.contains(&format!(
                "\"topicIds\":{{\"events\":\"{}\"}}",
                "ab".repeat(16)
            )),
            "{text}"
        );
        assert!(!fs::read_to_string(s.offsets_path(0))
            .unwrap()
            .contains("topicIds"));
        // Reopened: read from the file.
        let s = CheckpointStore::open(&d, 10).unwrap();
        assert_eq!(
            s.load_sync().unwrap().topic_ids,
            ids(&[("events", id(0xab))])
        );
        // A batch without ids (or with an all-zero one) keeps the stored id; one with another
        // id replaces it.
        s.commit_sync(&batch(1, 10, 20).with_topic_ids(ids(&[("events", [0; 16])])))
            .unwrap();
        assert_eq!(
            s.load_sync().unwrap().topic_ids,
            ids(&[("events", id(0xab))])
        );
        s.commit_sync(&batch(2, 20, 30).with_topic_ids(ids(&[("events", id(1))])))
            .unwrap();
        assert_eq!(s.load_sync().unwrap().topic_ids, ids(&[("events", id(1))]));
        // An id for a topic the batch has no range of is not kept.
        s.commit_sync(&batch(3, 30, 40).with_topic_ids(ids(&[("other", id(2))])))
            .unwrap();
        assert_eq!(s.load_sync().unwrap().topic_ids, ids(&[("events", id(1))]));
        // `offsets set` moving a partition of the topic drops its id.
        let tp = TopicPartition::new("events", 0);
        s.inner.set_positions(4, &[(tp, 7)].into()).unwrap();
        assert!(s.load_sync().unwrap().topic_ids.is_empty());
        for (bad, why) in [
            (
                "v1\n{\"batchId\":7,\"topicIds\":{\"e\":\"abc\"}}\n{\"e\":{\"0\":5}}\n",
                "line 2 'topicIds': the id of topic 'e' is not 32 hex digits",
            ),
            (
                "v1\n{\"batchId\":7,\"topicIds\":{\"e\":7}}\n{\"e\":{\"0\":5}}\n",
                "the id of topic 'e' is not 32 hex digits",
            ),
            (
                "v1\n{\"batchId\":7,\"topicIds\":[]}\n{\"e\":{\"0\":5}}\n",
                "line 2 'topicIds': is not a JSON object",
            ),
            (
                &format!(
                    "v1\n{{\"batchId\":7,\"topicIds\":{{\"f\":\"{}\"}}}}\n{{\"e\":{{\"0\":5}}}}\n",
                    "0".repeat(32)
                ),
                "topic 'f' has an id on line 2 but no offsets on line 3",
            ),
        ] {
            let e = CheckpointFile::decode(bad, Path::new("/ck/commits/7"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why) && e.contains("/ck/commits/7"), "{e}");
        }
    }

    /// KIP-320: a commit file keeps the epoch of the last record batch read before each
    /// position (line 2's `leaderEpochs`), for the whole state: a partition the batch did not
    /// move keeps its epoch, one it moved without a known epoch loses it (it was for an older
    /// position), and a position set by hand has none. Plans carry none.
    #[test]
    fn commit_files_keep_each_positions_leader_epoch() {
        let d = tmpdir("epochs");
        let s = CheckpointStore::open(&d, 10).unwrap();
        let tp = |p| TopicPartition::new("events", p);
        let with = |b: PlannedBatch, e: &[(i32, i32)]| {
            b.with_epochs(e.iter().map(|&(p, e)| (tp(p), e)).collect())
        };
        s.commit_sync(&with(batch(0, 0, 10), &[(0, 3), (1, 4)]))
            .unwrap();
        let text = fs::read_to_string(s.commits_path(0)).unwrap();
        assert!(
            text.contains("\"leaderEpochs\":{\"events\":{\"0\":3,\"1\":4}}"),
            "{text}"
        );
        let plan = fs::read_to_string(s.offsets_path(0)).unwrap();
        assert!(!plan.contains("leaderEpochs"), "{plan}");
        assert_eq!(
            s.load_sync().unwrap().epochs,
            [(tp(0), 3), (tp(1), 4)].into()
        );
        // Partition 0 moves with epoch 5; partition 1 stays (an empty range): it keeps 4.
        let b = PlannedBatch::new(
            1,
            vec![
                OffsetRange::new("events", 0, 10, 20),
                OffsetRange::new("events", 1, 110, 110),
            ],
        );
        s.commit_sync(&with(b, &[(0, 5)])).unwrap();
        // Reopened: read from the file, not from this process's cache.
        let s = CheckpointStore::open(&d, 10).unwrap();
        assert_eq!(
            s.load_sync().unwrap().epochs,
            [(tp(0), 5), (tp(1), 4)].into()
        );
        // Partition 1 moves with no known epoch: its old one is dropped.
        let b = PlannedBatch::new(
            2,
            vec![
                OffsetRange::new("events", 0, 20, 30),
                OffsetRange::new("events", 1, 110, 130),
            ],
        );
        s.commit_sync(&with(b, &[(0, 5)])).unwrap();
        assert_eq!(s.load_sync().unwrap().epochs, [(tp(0), 5)].into());
        // `offsets set` moving partition 0: no epoch for it any more.
        s.inner.set_positions(3, &[(tp(0), 7)].into()).unwrap();
        let c = s.load_sync().unwrap();
        assert_eq!(c.positions, [(tp(0), 7), (tp(1), 130)].into());
        assert!(c.epochs.is_empty(), "{c:?}");
        // A hand-edited file with an epoch for a partition it has no offset for is refused.
        let bad = "v1\n{\"batchId\":7,\"leaderEpochs\":{\"e\":{\"1\":2}}}\n{\"e\":{\"0\":5}}\n";
        let e = CheckpointFile::decode(bad, Path::new("/ck/commits/7"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("e-1 has a leader epoch") && e.contains("commits/7"),
            "{e}"
        );
        let bad = "v1\n{\"batchId\":7,\"leaderEpochs\":{\"e\":{\"0\":-2}}}\n{\"e\":{\"0\":5}}\n";
        let e = CheckpointFile::decode(bad, Path::new("x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("e-0: leader epoch -2 is not a non-negative 32-bit integer"),
            "{e}"
        );
        // Offsets and epochs are read by one parser: the offsets' messages are as they were.
        let bad = "v1\n{\"batchId\":7}\n{\"e\":{\"0\":-5}}\n";
        let e = CheckpointFile::decode(bad, Path::new("x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("e-0: offset -5 is not a non-negative integer"),
            "{e}"
        );
        let bad = "v1\n{\"batchId\":7}\n[1]\n";
        let e = CheckpointFile::decode(bad, Path::new("x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected a JSON object {\"topic\":{\"partition\":offset}}"),
            "{e}"
        );
        let _ = fs::remove_dir_all(&d);
    }

    /// Checkpoint files must be regular files under a size cap: a FIFO used to block the
    /// read forever, a link to /dev/zero to read until memory ran out, a huge file whole.
    #[test]
    fn checkpoint_files_that_are_not_small_regular_files_are_refused_not_read() {
        let d = tmpdir("bounded");
        let s = CheckpointStore::open(&d, 3).unwrap();
        s.log_plan_sync(&batch(0, 0, 10)).unwrap();
        s.commit_sync(&batch(0, 0, 10)).unwrap();
        let plan = s.offsets_path(1);
        let fifo = std::process::Command::new("mkfifo").arg(&plan).status();
        assert!(fifo.is_ok_and(|st| st.success()), "mkfifo");
        let e = s.load_sync().unwrap_err().to_string();
        assert!(
            e.contains("not a regular file") && e.contains("offsets/1"),
            "{e}"
        );
        fs::remove_file(&plan).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &plan).unwrap();
        let e = s.load_sync().unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        fs::remove_file(&plan).unwrap();
        // A sparse file past the cap: refused from its size, never read.
        let f = fs::File::create(&plan).unwrap();
        f.set_len(MAX_CHECKPOINT_FILE + 1).unwrap();
        let e = s.load_sync().unwrap_err().to_string();
        assert!(e.contains("more than any checkpoint file"), "{e}");
        fs::remove_file(&plan).unwrap();
        // The metadata file too.
        fs::remove_file(d.join("metadata")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("metadata")).unwrap();
        let e = CheckpointStore::open(&d, 3).err().unwrap().to_string();
        assert!(
            e.contains("not a regular file") && e.contains("metadata"),
            "{e}"
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn commit_log_restart() {
        let d = tmpdir("cycle");
        let s = CheckpointStore::open(&d, 3).unwrap();
        assert_eq!(s.load_sync().unwrap(), Committed::default());
        s.log_plan_sync(&batch(0, 0, 10)).unwrap();
        // Crash before commit: the plan is pending.
        let s2 = CheckpointStore::open(&d, 3).unwrap();
        let c = s2.load_sync().unwrap();
        assert_eq!(c.pending, Some(batch(0, 0, 10)));
        assert_eq!(c.next_batch_id(), 0);
        // Re-logging the same plan is fine; another plan for the same id is not.
        s2.log_plan_sync(&batch(0, 0, 10)).unwrap();
        assert!(s2.log_plan_sync(&batch(0, 0, 9)).is_err());
        assert_eq!(
            s2.commit_sync(&batch(0, 0, 10)).unwrap(),
            CommitOutcome::Committed
        );
        assert_eq!(
            s2.commit_sync(&batch(0, 0, 10)).unwrap(),
            CommitOutcome::AlreadyCommitted
        );
        for id in 1..6 {
            let from = id as i64 * 10;
            s2.log_plan_sync(&batch(id, from, from + 10)).unwrap();
            s2.commit_sync(&batch(id, from, from + 10)).unwrap();
        }
        let c = s2.load_sync().unwrap();
        assert_eq!(c.batch_id, Some(5));
        assert_eq!(c.positions[&TopicPartition::new("events", 0)], 60);
        assert_eq!(c.positions[&TopicPartition::new("events", 1)], 160);
        // Retention 3: batches 3, 4, 5 remain.
        assert_eq!(s2.inner.ids("offsets").unwrap(), vec![3, 4, 5]);
        assert_eq!(s2.inner.ids("commits").unwrap(), vec![3, 4, 5]);
        // CAS: a batch that does not start at the stored position.
        let e = s2.commit_sync(&batch(6, 55, 70)).unwrap_err();
        assert!(e.is_conflict(), "{e}");
        let _ = fs::remove_dir_all(&d);
    }
}
