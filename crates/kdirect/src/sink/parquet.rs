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
//! The log is one writer's, as a checkpoint is: not for consumer groups. Local disks only for
//! now (the checkpoint's S3, Azure and HDFS backends are not wired to the sink's files yet).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use kdirect_commit::checkpoint::{CheckpointStore, DEFAULT_RETENTION};
use kdirect_commit::file_sink::create_temp_beside;
use kdirect_commit::{
    Capabilities, CommitContext, CommitOutcome, Committed, OffsetStore, PlannedBatch, Positions,
    StoreError, StoreErrorKind,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::arrow::{kafka_schema, ArrowConverter};
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
}

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            compression: ParquetCompression::default(),
            row_group_rows: 1024 * 1024,
            row_group_bytes: 64 << 20,
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
    dir: PathBuf,
    log_dir: PathBuf,
    checkpoint: CheckpointStore,
    options: ParquetOptions,
    /// Files committed by a writer and not yet listed in the log, by batch id.
    placed: Mutex<BTreeMap<u64, Vec<SinkFile>>>,
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
                checkpoint,
                options,
                placed: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// The directory.
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
        for entry in fs::read_dir(d).map_err(SinkError::io(d, "list", None))? {
            let entry = entry.map_err(SinkError::io(d, "list", None))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            if id <= last {
                out.insert(id, read_list(&entry.path())?);
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
            converter: ArrowConverter::new()
                .with_max_rows(self.inner.options.row_group_rows.min(64 * 1024)),
            rows: 0,
        })
    }

    fn is_committed(&self, batch_id: u64) -> Result<bool, SinkError> {
        Ok(self.last_committed()?.is_some_and(|last| batch_id <= last)
            && self.inner.list_path(batch_id).exists())
    }

    fn last_committed(&self) -> Result<Option<u64>, SinkError> {
        Ok(self.inner.checkpoint.load_sync()?.batch_id)
    }
}

impl Inner {
    fn list_path(&self, batch_id: u64) -> PathBuf {
        self.log_dir.join(batch_id.to_string())
    }

    fn placed(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Vec<SinkFile>>> {
        self.placed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `_kdirect_metadata/<N>`: temp file, fsync, rename over it, fsync the directory.
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

/// Reads a sink log file (`_kdirect_metadata/<N>`).
fn read_list(path: &Path) -> Result<Vec<SinkFile>, SinkError> {
    let corrupt = |reason: String| -> SinkError {
        SinkErrorKind::Corrupt {
            path: path.to_owned(),
            reason,
        }
        .into()
    };
    // A list is a few lines per file: anything large is not one.
    let meta = fs::symlink_metadata(path).map_err(SinkError::io(path, "look at", None))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(corrupt("not a regular file of at most 1 MiB".to_owned()));
    }
    let text = fs::read_to_string(path).map_err(SinkError::io(path, "read", None))?;
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

    /// Appends `rb` (of [`kafka_schema`]) to the file, creating it first if needed.
    fn append(&mut self, rb: &arrow_array::RecordBatch) -> Result<(), SinkError> {
        let batch_id = self.batch_id;
        let open = match &mut self.file {
            Some(open) => open,
            None => {
                let path = self.final_path();
                let (file, tmp) = create_temp_beside(&path).map_err(SinkError::io(
                    &path,
                    "create a temp file for",
                    Some(batch_id),
                ))?;
                let props = self.inner.options.properties(batch_id);
                match ArrowWriter::try_new(file, kafka_schema(), Some(props)) {
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
        let placed = self.place(tmp.as_deref())?;
        let files: Vec<SinkFile> = placed.into_iter().collect();
        let paths = files.iter().map(|f| self.inner.dir.join(&f.name)).collect();
        self.inner.placed().insert(self.batch_id, files);
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
        let placed = self.inner.placed().remove(&batch.id);
        match placed {
            Some(files) => {
                if let Err(e) = self.inner.write_list(batch.id, &files) {
                    // Still placed: a retried commit lists them.
                    self.inner.placed().insert(batch.id, files);
                    return Err(e);
                }
            }
            // A retried commit whose list was written already.
            None if self.inner.list_path(batch.id).exists() => {}
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
