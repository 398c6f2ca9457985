//! The JSON-lines sink: one file per batch, `DIR/<batchId>.jsonl`, written atomically by
//! [`FileSink`] (a hidden temp file, fsync, rename over the batch's name, fsync of the
//! directory). The caller says how a record becomes a line ([`LineFormat`]); the CLI's
//! `--output-dir` uses its `--bytes` JSON shape.

use std::fs;
use std::sync::Arc;

use kdirect_commit::file_sink::{BatchFile, FileSink};

use super::{BatchWriter, Sink, SinkCommit, SinkError, SinkErrorKind};
use crate::{Batch, OffsetRange, Record};

/// How one record becomes one line: push its text (without the newline) onto the string.
pub type LineFormat = Arc<dyn Fn(&mut String, &OffsetRange, &Record<'_>) + Send + Sync>;

/// One JSON-lines file per batch, `DIR/<batchId>.jsonl`, written atomically by [`FileSink`]
/// (hidden temp file, fsync, rename over the batch's name); each record a line in the
/// caller's [`LineFormat`].
#[derive(Clone)]
pub struct JsonLinesSink {
    files: FileSink,
    format: LineFormat,
}

impl std::fmt::Debug for JsonLinesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLinesSink")
            .field("dir", &self.files.dir())
            .finish_non_exhaustive()
    }
}

impl JsonLinesSink {
    /// Opens (creating if needed) the directory, removing temp files a crash left.
    pub fn open(
        dir: impl Into<std::path::PathBuf>,
        format: LineFormat,
    ) -> Result<JsonLinesSink, SinkError> {
        Ok(JsonLinesSink {
            files: FileSink::open(dir)?,
            format,
        })
    }

    /// The file sink underneath.
    pub fn files(&self) -> &FileSink {
        &self.files
    }
}

impl Sink for JsonLinesSink {
    type Writer = JsonLinesWriter;

    fn describe(&self) -> String {
        format!("jsonl sink {}", self.files.dir().display())
    }

    fn begin(&self, batch_id: u64) -> Result<JsonLinesWriter, SinkError> {
        Ok(JsonLinesWriter {
            batch_id,
            file: self.files.begin(batch_id)?,
            format: self.format.clone(),
            line: String::with_capacity(512),
        })
    }

    fn is_committed(&self, batch_id: u64) -> Result<bool, SinkError> {
        let path = self.files.path_for(batch_id);
        match fs::symlink_metadata(&path) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(SinkError::io(path, "look at", Some(batch_id))(e)),
        }
    }

    fn last_committed(&self) -> Result<Option<u64>, SinkError> {
        let dir = self.files.dir();
        let mut last = None;
        for entry in fs::read_dir(dir).map_err(SinkError::io(dir, "list", None))? {
            let entry = entry.map_err(SinkError::io(dir, "list", None))?;
            let name = entry.file_name();
            let id = name
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(|n| n.parse::<u64>().ok());
            last = last.max(id);
        }
        Ok(last)
    }
}

/// One batch's JSON-lines file being written.
pub struct JsonLinesWriter {
    batch_id: u64,
    file: BatchFile,
    format: LineFormat,
    line: String,
}

impl std::fmt::Debug for JsonLinesWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLinesWriter")
            .field("batch_id", &self.batch_id)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl JsonLinesWriter {
    /// Adds one record of `range` (for callers that walk the records themselves).
    pub fn write_record(
        &mut self,
        range: &OffsetRange,
        record: &Record<'_>,
    ) -> Result<(), SinkError> {
        self.line.clear();
        (self.format)(&mut self.line, range, record);
        // The file adds the newline.
        let line = self.line.strip_suffix('\n').unwrap_or(&self.line);
        Ok(self.file.write_line(line.as_bytes())?)
    }
}

impl BatchWriter for JsonLinesWriter {
    fn write(&mut self, batch: &Batch) -> Result<(), SinkError> {
        let batch_id = self.batch_id;
        SinkError::check_batch(batch_id, batch.id())?;
        batch
            .try_for_each_record(|range, r| -> Result<(), Walk> {
                self.write_record(range, r).map_err(Walk::Sink)
            })
            .map(|_| ())
            .map_err(|e| match e {
                Walk::Sink(e) => e,
                Walk::Records(e) => SinkErrorKind::Records {
                    batch_id,
                    source: Box::new(e),
                }
                .into(),
            })
    }

    fn records(&self) -> u64 {
        self.file.lines()
    }

    fn commit(self) -> Result<SinkCommit, SinkError> {
        let records = self.file.lines();
        let path = self.file.finish()?;
        Ok(SinkCommit {
            batch_id: self.batch_id,
            records,
            files: vec![path],
        })
    }
}

/// Why a walk over a batch's records stopped: the sink, or the records themselves.
pub(crate) enum Walk {
    Sink(SinkError),
    Records(crate::Error),
}

impl From<crate::Error> for Walk {
    fn from(e: crate::Error) -> Self {
        Walk::Records(e)
    }
}
