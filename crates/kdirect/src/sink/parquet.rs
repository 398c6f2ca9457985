//! The exactly-once Parquet sink (feature `parquet`): one Parquet file per batch, invisible
//! until committed, and a commit log inside the directory that is also the stream's offset
//! store, so the directory alone is exactly-once (`kdirect consume --sink parquet:DIR`).
//!
//! ```text
//! DIR/part-0000000007-000.parquet      batch 7's records (Spark's Kafka schema, sink::arrow)
//! DIR/.part-0000000008-000.parquet.tmp-<pid>-<random>   batch 8 being written (hidden)
//! DIR/_kdirect_metadata/metadata       the log's stream id            ┐ a checkpoint
//! DIR/_kdirect_metadata/offsets/<N>    batch N's plan, before it runs │ directory
//! DIR/_kdirect_metadata/commits/<N>    the positions after batch N    ┘ (CheckpointStore)
//! DIR/_kdirect_metadata/<N>            the files of batch N (Spark's _spark_metadata/<N>)
//! ```
//!
//! Names starting with `_` or `.` are skipped by every reader of Parquet directories that
//! knows nothing of kdirect (pyarrow.dataset, Spark, Hive, DuckDB's globs with `part-*`), so
//! such a reader sees the `part-*` files only: a batch's file is written under a hidden temp
//! name, fsynced, and renamed to its batch's name (`part-<batchId>-000.parquet`), replacing an
//! earlier attempt at the same batch. The order for batch N, and what a crash at each step
//! leaves:
//!
//! 1. the plan is logged (`offsets/N`) when the stream hands the batch out;
//! 2. the file is written hidden — a crash leaves a temp file, removed at the next open;
//! 3. [`BatchWriter::commit`]: the rename makes it visible (other files of batch N an earlier
//!    attempt left are removed), the directory is fsynced;
//! 4. `DirectStream::commit` → [`ParquetLog`]: `_kdirect_metadata/<N>` lists the files, then
//!    `commits/N` moves the positions.
//!
//! A crash after 3 or 4's first write leaves batch N visible but uncommitted: the restarted
//! stream finds the plan logged and not committed and re-runs it with exactly its ranges, so
//! the same records are written under the same name, replacing the file. Each offset is in
//! the visible files once, before and after the re-run. A reader that knows the log reads
//! the files listed for the committed batches ([`ParquetSink::committed_files`]).
//!
//! The log is one writer's, as a checkpoint is: not for consumer groups.
//!
//! # On object storage
//!
//! [`ParquetSink::open_object`] (`--sink parquet:s3://BUCKET/PREFIX`, `parquet:az://…`) keeps
//! the same layout under the prefix, through the checkpoint's own clients
//! (`kdirect_commit::object::Bucket`: the same environment, settings and errors).
//! An object store has no rename, and does not need one: an object appears whole when its put
//! (or its multipart upload's completion) returns, and a put under an existing key replaces it
//! whole. So:
//!
//! 2. the file is written to a hidden temp file in the local temp directory (`TMPDIR`), never
//!    under the prefix — a crash leaves nothing in the bucket (a multipart upload cut short is
//!    never listed: a bucket lifecycle rule aborting incomplete uploads reclaims its parts);
//! 3. [`BatchWriter::commit`] finishes the file and stages it (still invisible);
//! 4. [`ParquetLog`]'s commit uploads it under its batch's name `part-<batchId>-000.parquet`
//!    (one put up to 8 MiB, a multipart upload beyond), removes other objects of batch N an
//!    earlier attempt left, puts `_kdirect_metadata/<N>`, then creates `commits/N` only if
//!    absent (the checkpoint's conditional create).
//!
//! What `pyarrow.dataset` on the prefix sees after a crash is what it sees in a directory:
//! the committed batches' objects, and possibly the object of the one batch whose upload
//! completed before `commits/N` — with exactly that batch's records, which the re-run (the same
//! ranges, from the plan log) writes again under the same key, replacing it. Each offset is
//! in the visible objects once, before and after the re-run. HDFS is not done yet.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use kdirect_commit::checkpoint::{CheckpointStore, DEFAULT_RETENTION};
use kdirect_commit::file_sink::create_temp_beside;
#[cfg(feature = "object-store")]
use kdirect_commit::object::Bucket;
use kdirect_commit::{
    Capabilities, CommitContext, CommitOutcome, Committed, OffsetStore, PlannedBatch, Positions,
    StoreError, StoreErrorKind,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::arrow::ArrowConverter;
use super::{BatchWriter, Sink, SinkCommit, SinkError, SinkErrorKind};
use crate::Batch;

/// The log's directory inside the sink's.
pub const LOG_DIR: &str = "_kdirect_metadata";

/// The sink log files' format version.
const LOG_VERSION: &str = "v1";

/// The compression of the Parquet files' pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ParquetCompression {
    /// zstd at level 3 (Spark's default level): the default.
    #[default]
    Zstd,
    /// Snappy (Spark's default codec for Parquet).
    Snappy,
    /// None.
    None,
}

impl std::str::FromStr for ParquetCompression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zstd" => Ok(ParquetCompression::Zstd),
            "snappy" => Ok(ParquetCompression::Snappy),
            "none" | "uncompressed" => Ok(ParquetCompression::None),
            _ => Err(format!(
                "'{s}' is not a Parquet compression: zstd, snappy or none"
            )),
        }
    }
}

/// How the files are written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParquetOptions {
    /// Page compression (zstd by default).
    pub compression: ParquetCompression,
    /// Rows per row group at most (parquet's default, 1,048,576).
    pub row_group_rows: usize,
    /// Encoded bytes a row group may hold in memory before it is written out (64 MiB by
    /// default). The writer keeps the row group being built in memory, and a chunked batch
    /// can be far larger than the memory budget: without this bound, a batch of large
    /// records held gigabytes before its first row group of 1,048,576 rows was flushed (and
    /// a re-run after the crash did the same). Memory is the budget plus this.
    pub row_group_bytes: usize,
    /// Each record's value decoded as one JSON object of this schema, its fields as columns
    /// (feature `json-values`; [`ArrowConverter::with_json_values`]); `None`: the value as
    /// one binary column, Spark's Kafka source schema. Set it with
    /// [`json_values`](Self::json_values), which checks it.
    #[cfg(feature = "json-values")]
    pub value_schema: Option<arrow_schema::SchemaRef>,
}

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            compression: ParquetCompression::default(),
            row_group_rows: 1024 * 1024,
            row_group_bytes: 64 << 20,
            #[cfg(feature = "json-values")]
            value_schema: None,
        }
    }
}

impl ParquetOptions {
    /// With this compression.
    pub fn compression(mut self, c: ParquetCompression) -> Self {
        self.compression = c;
        self
    }

    /// With at most `rows` rows per row group (at least 1).
    pub fn row_group_rows(mut self, rows: usize) -> Self {
        self.row_group_rows = rows.max(1);
        self
    }

    /// With row groups written out once they hold `bytes` encoded bytes in memory (at least
    /// 64 KiB).
    pub fn row_group_bytes(mut self, bytes: usize) -> Self {
        self.row_group_bytes = bytes.max(64 << 10);
        self
    }

    /// With each record's value decoded as one JSON object of `schema`, its fields as the
    /// first columns (feature `json-values`; see [`ArrowConverter::with_json_values`]):
    /// refused when a field has the name of a Kafka column (`key`, `topic`, `partition`,
    /// `offset`, `timestamp`, `timestampType`, `headers`).
    #[cfg(feature = "json-values")]
    pub fn json_values(mut self, schema: arrow_schema::SchemaRef) -> Result<Self, SinkError> {
        ArrowConverter::new().with_json_values(schema.clone())?;
        self.value_schema = Some(schema);
        Ok(self)
    }

    /// The converter the files' rows are made with: the binary value, or the values'
    /// schema.
    pub(crate) fn converter(&self) -> Result<ArrowConverter, SinkError> {
        let converter = ArrowConverter::new().with_max_rows(self.row_group_rows.min(64 * 1024));
        #[cfg(feature = "json-values")]
        if let Some(schema) = &self.value_schema {
            return converter.with_json_values(schema.clone());
        }
        Ok(converter)
    }

    /// The schema of the files' rows: [`kafka_schema`](super::arrow::kafka_schema), or the values' fields and the
    /// Kafka columns but `value`.
    pub fn row_schema(&self) -> Result<arrow_schema::SchemaRef, SinkError> {
        Ok(self.converter()?.schema())
    }

    /// The part of a data file's name that says its codec (`zstd.`, `snappy.`, none), as
    /// Spark names its files (`part-….zstd.parquet`).
    #[cfg(feature = "delta")]
    pub(crate) fn file_suffix(&self) -> &'static str {
        match self.compression {
            ParquetCompression::Zstd => "zstd.",
            ParquetCompression::Snappy => "snappy.",
            ParquetCompression::None => "",
        }
    }

    pub(crate) fn properties(&self, batch_id: u64) -> WriterProperties {
        let compression = match self.compression {
            ParquetCompression::Zstd => {
                Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default())
            }
            ParquetCompression::Snappy => Compression::SNAPPY,
            ParquetCompression::None => Compression::UNCOMPRESSED,
        };
        WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_size(self.row_group_rows)
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "kdirect.batchId".to_owned(),
                batch_id.to_string(),
            )]))
            .build()
    }
}

/// One file of a committed batch, as its log file lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkFile {
    /// The file's name in the sink's directory.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Rows in it.
    pub rows: u64,
}

/// The Parquet sink; see the [module docs](self). Its [`log`](Self::log) is the stream's
/// offset store.
#[derive(Debug, Clone)]
pub struct ParquetSink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The directory, or the prefix's URL (`s3://bucket/prefix`).
    dir: PathBuf,
    log_dir: PathBuf,
    place: Place,
    checkpoint: CheckpointStore,
    options: ParquetOptions,
    /// Files committed by a writer and not yet listed in the log, by batch id.
    placed: Mutex<BTreeMap<u64, Placed>>,
}

/// Where the files are.
#[derive(Debug)]
enum Place {
    /// A local directory (`Inner::dir`).
    Disk,
    /// A prefix in an S3 bucket or Azure container (`Inner::dir` is its URL).
    #[cfg(feature = "object-store")]
    Object(Bucket),
}

/// A batch's output, committed by its writer, not yet in the log.
#[derive(Debug, Clone)]
struct Placed {
    files: Vec<SinkFile>,
    /// On object storage: the finished local file that becomes the batch's object at the
    /// log's commit (uploaded under its final name, so it appears whole).
    upload: Option<PathBuf>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Finished files never uploaded (a batch whose store commit did not happen).
        let placed = std::mem::take(
            self.placed
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for p in placed.into_values() {
            if let Some(tmp) = p.upload {
                let _ = fs::remove_file(tmp);
            }
        }
    }
}

impl ParquetSink {
    /// Opens (creating if needed) the directory and its log, removing the temp files a crash
    /// left.
    pub fn open(
        dir: impl Into<PathBuf>,
        options: ParquetOptions,
    ) -> Result<ParquetSink, SinkError> {
        let dir = dir.into();
        let log_dir = dir.join(LOG_DIR);
        fs::create_dir_all(&log_dir).map_err(SinkError::io(&log_dir, "create directory", None))?;
        for d in [&dir, &log_dir] {
            for entry in fs::read_dir(d).map_err(SinkError::io(d, "list", None))? {
                let entry = entry.map_err(SinkError::io(d, "list", None))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.contains(".tmp-") {
                    let p = entry.path();
                    fs::remove_file(&p).map_err(SinkError::io(
                        &p,
                        "remove stale temp file",
                        None,
                    ))?;
                }
            }
        }
        let checkpoint = CheckpointStore::open(&log_dir, DEFAULT_RETENTION)?;
        Ok(ParquetSink {
            inner: Arc::new(Inner {
                dir,
                log_dir,
                place: Place::Disk,
                checkpoint,
                options,
                placed: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// Opens the sink at `url` on object storage (`s3://bucket/prefix` or
    /// `az://container/prefix`), with the layout and guarantees of a directory (see the
    /// [module docs](self#on-object-storage)). The clients are the checkpoint's: credentials
    /// and endpoint from the AWS or Azure environment variables, then `config` by
    /// object_store's names (`aws_endpoint`, `aws_allow_http`, …; `azure_storage_endpoint`,
    /// …). The log is a checkpoint at `url/_kdirect_metadata`.
    ///
    /// On object storage the sink's synchronous calls that read the bucket
    /// ([`Sink::is_committed`], [`Sink::last_committed`], [`committed_files`](Self::committed_files))
    /// block on the runtime the sink was opened on: call them from a blocking thread or
    /// outside the runtime. The stream's calls (the log's `OffsetStore` methods) are async.
    #[cfg(feature = "object-store")]
    pub async fn open_object(
        url: &str,
        options: ParquetOptions,
        config: &[(&str, &str)],
    ) -> Result<ParquetSink, SinkError> {
        let bucket = Bucket::open(Path::new(url), config)?;
        let dir = bucket.url().to_owned();
        let log_dir = dir.join(LOG_DIR);
        let log_url = log_dir.to_string_lossy().into_owned();
        let checkpoint =
            CheckpointStore::open_object_with(&log_url, DEFAULT_RETENTION, config).await?;
        Ok(ParquetSink {
            inner: Arc::new(Inner {
                dir,
                log_dir,
                place: Place::Object(bucket),
                checkpoint,
                options,
                placed: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// The directory (or the prefix's URL, `s3://bucket/prefix`).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The sink's log as the stream's offset store (`DirectStreamBuilder::store`): it logs
    /// each plan, and a batch's commit lists its files and moves the positions. Its commit
    /// refuses a batch whose output was not committed through this sink first.
    pub fn log(&self) -> ParquetLog {
        ParquetLog {
            inner: self.inner.clone(),
        }
    }

    /// The name batch `batch_id`'s (first) file gets.
    pub fn file_name(batch_id: u64) -> String {
        format!("{}000.parquet", batch_prefix(batch_id))
    }

    /// The files of every committed batch, by batch id, as the log lists them (what a reader
    /// that knows the log reads).
    pub fn committed_files(&self) -> Result<BTreeMap<u64, Vec<SinkFile>>, SinkError> {
        let Some(last) = self.last_committed()? else {
            return Ok(BTreeMap::new());
        };
        let mut out = BTreeMap::new();
        let d = &self.inner.log_dir;
        for name in self.inner.list_names(d)? {
            let Some(id) = name.parse::<u64>().ok() else {
                continue;
            };
            if id <= last {
                out.insert(id, self.inner.read_list(&d.join(&name))?);
            }
        }
        Ok(out)
    }
}

fn batch_prefix(batch_id: u64) -> String {
    format!("part-{batch_id:010}-")
}

impl Sink for ParquetSink {
    type Writer = ParquetWriter;

    fn describe(&self) -> String {
        format!("parquet sink {}", self.inner.dir.display())
    }

    fn begin(&self, batch_id: u64) -> Result<ParquetWriter, SinkError> {
        Ok(ParquetWriter {
            inner: self.inner.clone(),
            batch_id,
            file: None,
            converter: self.inner.options.converter()?,
            rows: 0,
        })
    }

    fn is_committed(&self, batch_id: u64) -> Result<bool, SinkError> {
        Ok(self.last_committed()?.is_some_and(|last| batch_id <= last)
            && self.inner.list_exists(batch_id)?)
    }

    fn last_committed(&self) -> Result<Option<u64>, SinkError> {
        Ok(self.inner.checkpoint.load_sync()?.batch_id)
    }
}

impl Inner {
    fn list_path(&self, batch_id: u64) -> PathBuf {
        self.log_dir.join(batch_id.to_string())
    }

    fn placed(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Placed>> {
        self.placed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The names directly in `dir` (the sink's directory or its log's).
    fn list_names(&self, dir: &Path) -> Result<Vec<String>, SinkError> {
        match &self.place {
            Place::Disk => {
                let mut names = Vec::new();
                for entry in fs::read_dir(dir).map_err(SinkError::io(dir, "list", None))? {
                    let entry = entry.map_err(SinkError::io(dir, "list", None))?;
                    names.push(entry.file_name().to_string_lossy().into_owned());
                }
                Ok(names)
            }
            #[cfg(feature = "object-store")]
            Place::Object(bucket) => Ok(bucket.list(dir)?),
        }
    }

    /// Whether batch `batch_id`'s log file exists.
    fn list_exists(&self, batch_id: u64) -> Result<bool, StoreError> {
        let path = self.list_path(batch_id);
        match &self.place {
            Place::Disk => Ok(path.exists()),
            #[cfg(feature = "object-store")]
            Place::Object(bucket) => bucket.exists(&path),
        }
    }

    /// Reads a sink log file (`_kdirect_metadata/<N>`).
    fn read_list(&self, path: &Path) -> Result<Vec<SinkFile>, SinkError> {
        match &self.place {
            Place::Disk => read_list(path),
            #[cfg(feature = "object-store")]
            Place::Object(bucket) => match bucket.read(path, MAX_LIST)? {
                Some(bytes) => parse_list(path, &String::from_utf8_lossy(&bytes)),
                None => Err(SinkErrorKind::Corrupt {
                    path: path.to_owned(),
                    reason: "gone (removed while it was read?)".to_owned(),
                }
                .into()),
            },
        }
    }

    /// Makes batch `batch_id`'s output part of the log: on object storage, uploads its file
    /// under its final name (it appears whole) and removes other objects of the batch an
    /// earlier attempt left; then writes the log file. Blocking (object storage's calls
    /// block on the runtime): run on a blocking thread there.
    fn publish(&self, batch_id: u64, placed: &mut Placed) -> Result<(), StoreError> {
        #[cfg(feature = "object-store")]
        if let Place::Object(bucket) = &self.place {
            if let Some(tmp) = &placed.upload {
                let ours = placed.files.first().map(|f| f.name.clone());
                if let Some(name) = &ours {
                    bucket.upload_file(&self.dir.join(name), tmp)?;
                }
                let _ = fs::remove_file(tmp);
                placed.upload = None;
                let prefix = batch_prefix(batch_id);
                for name in bucket.list(&self.dir)? {
                    if Some(&name) != ours.as_ref()
                        && name.starts_with(&prefix)
                        && name.ends_with(".parquet")
                    {
                        bucket.remove(&self.dir.join(&name))?;
                    }
                }
            }
        }
        self.write_list(batch_id, &placed.files)
    }

    /// Writes `_kdirect_metadata/<N>`: temp file, fsync, rename over it, fsync the directory
    /// (on object storage: one put, which is whole or absent).
    fn write_list(&self, batch_id: u64, files: &[SinkFile]) -> Result<(), StoreError> {
        let path = self.list_path(batch_id);
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| StoreError::from(StoreErrorKind::Io { path, op, source })
        };
        let mut text = format!("{LOG_VERSION}\n");
        for f in files {
            text.push_str(
                &serde_json::json!({
                    "path": f.name,
                    "size": f.size,
                    "rows": f.rows,
                    "action": "add",
                })
                .to_string(),
            );
            text.push('\n');
        }
        #[cfg(feature = "object-store")]
        if let Place::Object(bucket) = &self.place {
            return bucket.put(&path, text.as_bytes());
        }
        let (mut tmp_file, tmp) =
            create_temp_beside(&path).map_err(io("create a temp file for"))?;
        let placed = tmp_file
            .write_all(text.as_bytes())
            .and_then(|()| tmp_file.sync_all())
            .and_then(|()| fs::rename(&tmp, &path));
        if placed.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        placed.map_err(io("write"))?;
        File::open(&self.log_dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync directory"))
    }
}

/// A sink log file's size at most: a list is a few lines per file, anything large is not one.
const MAX_LIST: u64 = 1 << 20;

/// Reads a sink log file (`_kdirect_metadata/<N>`) on disk.
fn read_list(path: &Path) -> Result<Vec<SinkFile>, SinkError> {
    let meta = fs::symlink_metadata(path).map_err(SinkError::io(path, "look at", None))?;
    if !meta.is_file() || meta.len() > MAX_LIST {
        return Err(SinkErrorKind::Corrupt {
            path: path.to_owned(),
            reason: "not a regular file of at most 1 MiB".to_owned(),
        }
        .into());
    }
    let text = fs::read_to_string(path).map_err(SinkError::io(path, "read", None))?;
    parse_list(path, &text)
}

/// Parses the text of the sink log file at `path`.
fn parse_list(path: &Path, text: &str) -> Result<Vec<SinkFile>, SinkError> {
    let corrupt = |reason: String| -> SinkError {
        SinkErrorKind::Corrupt {
            path: path.to_owned(),
            reason,
        }
        .into()
    };
    let mut lines = text.lines();
    if lines.next() != Some(LOG_VERSION) {
        return Err(corrupt(format!("line 1 is not '{LOG_VERSION}'")));
    }
    let mut files = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| corrupt(format!("line {}: not JSON ({e})", i + 2)))?;
        let field = |k: &str| {
            v.get(k)
                .ok_or_else(|| corrupt(format!("line {}: no '{k}'", i + 2)))
        };
        let name = field("path")?
            .as_str()
            .ok_or_else(|| corrupt(format!("line {}: 'path' is not a string", i + 2)))?;
        files.push(SinkFile {
            name: name.to_owned(),
            size: field("size")?.as_u64().unwrap_or(0),
            rows: field("rows")?.as_u64().unwrap_or(0),
        });
    }
    Ok(files)
}

/// One batch's Parquet file being written: hidden until [`commit`](BatchWriter::commit).
/// Dropping it removes the temp file.
#[derive(Debug)]
pub struct ParquetWriter {
    inner: Arc<Inner>,
    batch_id: u64,
    /// Created at the first record: a batch without records writes no file.
    file: Option<Open>,
    converter: ArrowConverter,
    rows: u64,
}

struct Open {
    writer: ArrowWriter<File>,
    tmp: PathBuf,
}

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Open")
            .field("tmp", &self.tmp)
            .finish_non_exhaustive()
    }
}

impl ParquetWriter {
    fn final_path(&self) -> PathBuf {
        self.inner.dir.join(ParquetSink::file_name(self.batch_id))
    }

    /// The path the hidden temp file is made beside: the final path on disk (the rename
    /// is then within one directory); on object storage, a name in the local temp directory
    /// (`TMPDIR`), from where the file is uploaded at the log's commit.
    fn temp_beside(&self) -> PathBuf {
        match &self.inner.place {
            Place::Disk => self.final_path(),
            #[cfg(feature = "object-store")]
            Place::Object(_) => std::env::temp_dir().join(ParquetSink::file_name(self.batch_id)),
        }
    }

    fn parquet_error(&self, path: &Path) -> impl Fn(parquet::errors::ParquetError) -> SinkError {
        let (batch_id, path) = (self.batch_id, path.to_owned());
        move |source| {
            SinkErrorKind::Parquet {
                batch_id,
                path: path.clone(),
                source,
            }
            .into()
        }
    }

    /// Appends `rb` (of the options' [`row_schema`](ParquetOptions::row_schema)) to the
    /// file, creating it first if needed.
    fn append(&mut self, rb: &arrow_array::RecordBatch) -> Result<(), SinkError> {
        let batch_id = self.batch_id;
        let open = match &mut self.file {
            Some(open) => open,
            None => {
                let path = self.temp_beside();
                let (file, tmp) = create_temp_beside(&path).map_err(SinkError::io(
                    &path,
                    "create a temp file for",
                    Some(batch_id),
                ))?;
                let props = self.inner.options.properties(batch_id);
                match ArrowWriter::try_new(file, rb.schema(), Some(props)) {
                    Ok(writer) => self.file.insert(Open { writer, tmp }),
                    Err(e) => {
                        let _ = fs::remove_file(&tmp);
                        return Err(self.parquet_error(&tmp)(e));
                    }
                }
            }
        };
        let row_group_bytes = self.inner.options.row_group_bytes;
        let written = open.writer.write(rb).and_then(|()| {
            // The row group in memory is bounded by bytes as well as rows.
            if open.writer.in_progress_size() >= row_group_bytes {
                open.writer.flush()
            } else {
                Ok(())
            }
        });
        if let Err(source) = written {
            return Err(SinkErrorKind::Parquet {
                batch_id,
                path: open.tmp.clone(),
                source,
            }
            .into());
        }
        self.rows += rb.num_rows() as u64;
        Ok(())
    }

    /// Places the finished file under its batch's name; removes other files of the batch an
    /// earlier attempt left; fsyncs the directory.
    fn place(&self, tmp: Option<&Path>) -> Result<Option<SinkFile>, SinkError> {
        let id = Some(self.batch_id);
        let dir = &self.inner.dir;
        let placed = match tmp {
            None => None,
            Some(tmp) => {
                let path = self.final_path();
                let size = fs::metadata(tmp)
                    .map_err(SinkError::io(tmp, "look at", id))?
                    .len();
                if let Err(e) = fs::rename(tmp, &path) {
                    let _ = fs::remove_file(tmp);
                    return Err(SinkError::io(&path, "rename into place", id)(e));
                }
                Some(SinkFile {
                    name: ParquetSink::file_name(self.batch_id),
                    size,
                    rows: self.rows,
                })
            }
        };
        let prefix = batch_prefix(self.batch_id);
        for entry in fs::read_dir(dir).map_err(SinkError::io(dir, "list", id))? {
            let entry = entry.map_err(SinkError::io(dir, "list", id))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let ours = placed.as_ref().is_some_and(|f| f.name == name);
            if !ours && name.starts_with(&prefix) && name.ends_with(".parquet") {
                let p = entry.path();
                fs::remove_file(&p).map_err(SinkError::io(
                    &p,
                    "remove an earlier attempt's file",
                    id,
                ))?;
            }
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(SinkError::io(dir, "fsync directory", id))?;
        Ok(placed)
    }
}

impl BatchWriter for ParquetWriter {
    fn write(&mut self, batch: &Batch) -> Result<(), SinkError> {
        SinkError::check_batch(self.batch_id, batch.id())?;
        let mut converter = std::mem::take(&mut self.converter);
        let written = converter.convert(batch, |rb| self.append(&rb));
        self.converter = converter;
        written.map(|_| ())
    }

    fn records(&self) -> u64 {
        self.rows
    }

    fn commit(mut self) -> Result<SinkCommit, SinkError> {
        let tmp = match self.file.take() {
            None => None,
            Some(Open { writer, tmp }) => {
                let closed = writer
                    .into_inner()
                    .map_err(self.parquet_error(&tmp))
                    .and_then(|f| {
                        f.sync_all()
                            .map_err(SinkError::io(&tmp, "fsync", Some(self.batch_id)))
                    });
                if let Err(e) = closed {
                    let _ = fs::remove_file(&tmp);
                    return Err(e);
                }
                Some(tmp)
            }
        };
        let staged = match &self.inner.place {
            Place::Disk => Placed {
                files: self.place(tmp.as_deref())?.into_iter().collect(),
                upload: None,
            },
            // Uploaded at the log's commit (an async step: this one is called on the
            // runtime), under its final name.
            #[cfg(feature = "object-store")]
            Place::Object(_) => {
                let mut files = Vec::new();
                if let Some(tmp) = &tmp {
                    let size = fs::metadata(tmp)
                        .map_err(SinkError::io(tmp, "look at", Some(self.batch_id)))?
                        .len();
                    files.push(SinkFile {
                        name: ParquetSink::file_name(self.batch_id),
                        size,
                        rows: self.rows,
                    });
                }
                Placed { files, upload: tmp }
            }
        };
        let paths = staged
            .files
            .iter()
            .map(|f| self.inner.dir.join(&f.name))
            .collect();
        if let Some(old) = self.inner.placed().insert(self.batch_id, staged) {
            // A second writer of the same batch committed before the log's commit: its file
            // replaces the first's, which is never uploaded.
            if let Some(tmp) = old.upload {
                let _ = fs::remove_file(tmp);
            }
        }
        Ok(SinkCommit {
            batch_id: self.batch_id,
            records: self.rows,
            files: paths,
        })
    }
}

impl Drop for ParquetWriter {
    fn drop(&mut self) {
        if let Some(open) = self.file.take() {
            drop(open.writer);
            let _ = fs::remove_file(&open.tmp);
        }
    }
}

/// The Parquet sink's log as an offset store; see [`ParquetSink::log`]. A checkpoint
/// directory (`DIR/_kdirect_metadata`, readable by `kdirect offsets show
/// --store checkpoint:DIR/_kdirect_metadata`) plus the list of each batch's files.
#[derive(Debug, Clone)]
pub struct ParquetLog {
    inner: Arc<Inner>,
}

impl ParquetLog {
    /// Runs `f` on the sink: at once on disk; on object storage on a blocking thread (the
    /// bucket's calls block on the runtime).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        match &self.inner.place {
            Place::Disk => Ok(f(&self.inner)),
            #[cfg(feature = "object-store")]
            Place::Object(_) => {
                let inner = self.inner.clone();
                tokio::task::spawn_blocking(move || f(&inner))
                    .await
                    .map_err(|e| {
                        StoreErrorKind::Io {
                            path: self.inner.dir.clone(),
                            op: "run the sink's task on",
                            source: std::io::Error::other(e.to_string()),
                        }
                        .into()
                    })
            }
        }
    }
}

impl OffsetStore for ParquetLog {
    fn describe(&self) -> String {
        format!("parquet sink log {}", self.inner.log_dir.display())
    }

    /// The checkpoint's: a plan log, one writer only.
    fn capabilities(&self) -> Capabilities {
        self.inner.checkpoint.capabilities()
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        self.inner.checkpoint.load(topics).await
    }

    async fn log_plan(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        self.inner.checkpoint.log_plan(batch).await
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        let id = batch.id;
        let placed = self.inner.placed().remove(&id);
        match placed {
            Some(placed) => {
                let (published, placed) = self
                    .blocking(move |inner| {
                        let mut placed = placed;
                        (inner.publish(id, &mut placed), placed)
                    })
                    .await?;
                if let Err(e) = published {
                    // Still placed (uploaded, if it was): a retried commit lists them.
                    self.inner.placed().insert(batch.id, placed);
                    return Err(e);
                }
            }
            // A retried commit whose list was written already.
            None if self.blocking(move |inner| inner.list_exists(id)).await?? => {}
            None => {
                return Err(StoreErrorKind::Inconsistent {
                    path: self.inner.list_path(batch.id),
                    reason: format!(
                        "batch {} is committed before its output: write it through the \
                         Parquet sink (begin, write, commit the writer) first",
                        batch.id
                    ),
                }
                .into())
            }
        }
        self.inner.checkpoint.commit(batch, ctx).await
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        self.inner
            .checkpoint
            .set_positions(batch_id, positions)
            .await
    }
}
