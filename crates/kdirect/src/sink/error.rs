//! The sinks' error: `SinkError(Box<SinkErrorKind>)` with [`SinkError::kind`], as the stores'
//! and the engine's. Every kind names the batch and the file.

use std::fmt;
use std::path::PathBuf;

/// A sink error. See [`SinkErrorKind`].
#[derive(Debug)]
pub struct SinkError(Box<SinkErrorKind>);

impl SinkError {
    /// What went wrong.
    pub fn kind(&self) -> &SinkErrorKind {
        &self.0
    }

    /// Consumes the error, giving its kind.
    pub fn into_kind(self) -> SinkErrorKind {
        *self.0
    }

    /// The writer of `writer` handed `batch`: refused unless they are the same batch.
    pub(crate) fn check_batch(writer: u64, batch: u64) -> Result<(), SinkError> {
        if writer == batch {
            return Ok(());
        }
        Err(SinkErrorKind::WrongBatch { writer, batch }.into())
    }

    pub(crate) fn io(
        path: impl Into<PathBuf>,
        op: &'static str,
        batch_id: Option<u64>,
    ) -> impl FnOnce(std::io::Error) -> SinkError {
        let path = path.into();
        move |source| {
            SinkErrorKind::Io {
                path,
                op,
                batch_id,
                source,
            }
            .into()
        }
    }
}

impl From<SinkErrorKind> for SinkError {
    fn from(k: SinkErrorKind) -> Self {
        SinkError(Box::new(k))
    }
}

impl From<kdirect_commit::StoreError> for SinkError {
    fn from(e: kdirect_commit::StoreError) -> Self {
        SinkErrorKind::Store(e).into()
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

fn batch(id: &Option<u64>) -> String {
    id.map(|b| format!("batch {b}: ")).unwrap_or_default()
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkErrorKind {
    /// A file operation failed.
    #[error("{}{op} {}: {source}", batch(batch_id), path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`create`, `write`, `fsync`, `rename into place`, …).
        op: &'static str,
        /// The batch whose output it was, when there is one.
        batch_id: Option<u64>,
        /// The OS error.
        source: std::io::Error,
    },
    /// From the file sink or the store a sink keeps its log in (they name their files).
    #[error(transparent)]
    Store(kdirect_commit::StoreError),
    /// The batch's records could not be read (a record that does not decode names its
    /// broker, partition, batch offset and byte).
    #[error("batch {batch_id}: {source}")]
    Records {
        /// The batch.
        batch_id: u64,
        /// The stream's error.
        source: Box<crate::Error>,
    },
    /// A writer was handed another batch than the one it was begun for.
    #[error("the writer of batch {writer} was handed batch {batch}: begin a writer per batch id")]
    WrongBatch {
        /// The writer's batch id.
        writer: u64,
        /// The batch handed to it.
        batch: u64,
    },
    /// Building the Arrow arrays failed.
    #[cfg(feature = "arrow")]
    #[error("batch {batch_id}: building Arrow arrays: {source}")]
    Arrow {
        /// The batch.
        batch_id: u64,
        /// Arrow's error.
        source: arrow_schema::ArrowError,
    },
    /// The Parquet writer failed.
    #[cfg(feature = "parquet")]
    #[error("batch {batch_id}: writing Parquet file {}: {source}", path.display())]
    Parquet {
        /// The batch.
        batch_id: u64,
        /// The file being written (its hidden temp name).
        path: PathBuf,
        /// The parquet crate's error.
        source: ::parquet::errors::ParquetError,
    },
    /// The Delta Lake library failed on the table.
    #[cfg(feature = "delta")]
    #[error("delta table {}: {what}: {source}", table.display())]
    Delta {
        /// The table's directory.
        table: PathBuf,
        /// What was being done (`open`, `create`, `load`, …).
        what: &'static str,
        /// delta-rs's error.
        source: Box<deltalake_core::DeltaTableError>,
    },
    /// A record's value is not one JSON object of the schema its values are decoded with
    /// ([`ArrowConverter::with_json_values`](crate::sink::arrow::ArrowConverter::with_json_values)).
    #[cfg(feature = "json-values")]
    #[error("batch {batch_id}: {topic}-{partition} offset {offset}: the value is not one JSON object of the given schema: {reason}")]
    JsonValue {
        /// The batch.
        batch_id: u64,
        /// The record's topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// What is wrong (arrow-json's words, or the row count).
        reason: String,
    },
    /// A sink log file does not parse.
    #[error("corrupt sink log file {}: {reason}; nothing was overwritten — fix or remove the file", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A sink spec (`parquet:DIR?compression=zstd`) or option that cannot be used.
    #[error("sink '{spec}': {reason}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// Why.
        reason: String,
    },
}
