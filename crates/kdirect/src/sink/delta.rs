//! The Delta Lake sink that is also the stream's offset store (feature `delta`,
//! `kdirect consume --sink delta:PATH`): each batch's records become one Parquet data file,
//! and the batch's Delta commit adds that file **and** sets each partition's position, so the
//! data and the positions are one Delta transaction.
//!
//! ```text
//! PATH/part-0000000007-<uuid>.zstd.parquet   batch 7's records (Spark's Kafka schema)
//! PATH/_delta_log/00000000000000000008.json  protocol/metaData (version 0), then per batch:
//!                                            add (its file), txn (one per partition),
//!                                            commitInfo (STREAMING UPDATE, kdirect.batchId)
//! ```
//!
//! The positions are kept as kafka-delta-ingest keeps them, so either program reads the
//! other's positions (see below for the data's schema): one `txn` action per partition,
//! `appId` = `<app id>-<partition>` (the app id is the topic's name unless
//! [`DeltaOptions::app_id`] names one), `version` = the
//! offset of the **last record written** (kafka-delta-ingest's `ValueBuffer::last_offset`; it
//! seeks there on resume and skips offsets `<= version`), so kdirect's position (the next
//! offset to read) is `version + 1`.
//!
//! The order for batch N, and what a crash at each step leaves:
//!
//! 1. [`Sink::begin`] + [`BatchWriter::write`]: the records go into `part-<N>-<uuid>.parquet`
//!    in the table's directory. A file the Delta log does not list is not part of the table:
//!    no Delta reader (delta-rs, Spark, Trino, DuckDB's delta extension) sees it. A crash
//!    leaves an orphan file (Delta's `VACUUM` removes such files).
//! 2. [`BatchWriter::commit`]: the file is finished and fsynced, and its `add` action is
//!    staged with the sink (still invisible).
//! 3. `DirectStream::commit` → [`DeltaLog::commit`]: the table is brought to its latest
//!    version, its partitions' `txn`s read, and the batch decided by the one commit rule
//!    ([`kdirect_commit::decide`]); if it writes, one commit file
//!    `_delta_log/<version+1>.json` holds the `add` and the `txn`s, created only if absent
//!    (delta-rs's log store: object_store's create without overwrite, a conditional put on
//!    object stores). That is the one step that makes batch N visible and moves its
//!    positions, together.
//!
//! A crash before step 3's commit file exists leaves nothing visible and the positions where
//! they were: the restart reads the same positions from the `txn`s and reads the records
//! again. A crash after it leaves the batch visible with its positions past it: the restart
//! plans from there, so no record is written twice. Another writer that committed in
//! between (two kdirect processes, or kafka-delta-ingest, on the same table and partitions)
//! moved the `txn`s: the batch finds its partitions elsewhere and is refused with
//! [`StoreErrorKind::Conflict`], and its file stays invisible. A commit that lost the race
//! for the same table version (put-if-absent refused) reads the table again and decides
//! again: it goes in after the winner only if the winner did not move its partitions.
//!
//! The store does not log plans (a restart re-plans from the `txn`s, as kafka-delta-ingest
//! does), so it can be shared by the members of a consumer group, each committing its own
//! partitions' `txn`s. Delta log checkpoints are written at the table's interval
//! (`delta.checkpointInterval`, 100 by default) after a commit.
//!
//! A table that exists must have the schema the sink writes (Spark's Kafka source schema): a
//! kafka-delta-ingest table, whose columns are its messages' JSON fields, is refused at
//! [`DeltaSink::open`] (decoding values into columns is not done yet), so continuing one
//! another program wrote means its positions, in a table of this schema. A table Spark's Delta
//! sink began from Spark's Kafka source (`includeHeaders`) has that schema with every column
//! and nested field nullable; the sink takes it (a table may be more permissive than the rows,
//! never stricter), so kdirect continues a Spark job's table from its checkpoint's positions
//! (`spark::the_delta_sink_continues_a_table_begun_by_sparks_delta_sink`).
//!
//! # On object storage
//!
//! [`DeltaSink::open_object`] (`--sink delta:s3://BUCKET/PREFIX`, `delta:az://…`) opens the
//! table with the checkpoint's own client (`kdirect_commit::object::Bucket`: the same
//! environment, settings and errors), handed to delta-rs as the table's storage
//! (`DeltaTableBuilder::with_storage_backend`) with delta-rs's default log store registered
//! for `s3://` and `az://`: delta-rs is built without its AWS-SDK and Azure features, so the
//! dependency tree gains no AWS SDK and no second HTTP/TLS stack. That log store creates each
//! commit file with object_store's `PutMode::Create`, the store's conditional put (S3's and
//! Azure Blob's `If-None-Match: *`), so of two writers committing one table version exactly
//! one succeeds, as on a disk. The data file is written to a hidden temp file in `TMPDIR` and
//! uploaded under its name in the table by [`DeltaLog::commit`], just before the Delta commit
//! that adds it (one put, or a multipart upload completed at the end): a crash between the
//! two leaves an object no Delta reader lists (Delta's `VACUUM` removes it), and the restart
//! reads the positions from the `txn`s and writes the batch again under a new name. The log
//! (`_last_checkpoint`, commit files, checkpoint parts) is read through the table's object
//! store on a disk and on object storage alike.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use arrow_array::types::{TimestampMicrosecondType, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel as _;
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake_core::kernel::{Action, Add, DataType as DeltaType, StructType, Transaction};
use deltalake_core::logstore::object_store::path::Path as Key;
use deltalake_core::logstore::object_store::ObjectStore;
use deltalake_core::logstore::{LogStoreRef, StorageConfig};
use deltalake_core::protocol::{DeltaOperation, OutputMode, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use kdirect_commit::object::Bucket;
use kdirect_commit::{
    decide, Capabilities, CommitContext, CommitDecision, CommitOutcome, Committed, OffsetStore,
    PlannedBatch, Positions, StoreError, StoreErrorKind, Stored, StoredPosition, TopicPartition,
};
use parquet::arrow::ArrowWriter;
use url::Url;

use super::arrow::{kafka_schema, ArrowConverter};
use super::parquet::ParquetOptions;
use super::{BatchWriter, Sink, SinkCommit, SinkError, SinkErrorKind};
use crate::Batch;

/// The commit-info key that names the kdirect batch a Delta commit holds.
pub const BATCH_ID_KEY: &str = "kdirect.batchId";

/// How many times a commit that lost the race for a table version reads the table again and
/// retries (each time deciding again: a winner that moved its partitions refuses it).
const RACE_RETRIES: usize = 20;

/// How the table is written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DeltaOptions {
    /// The data files' Parquet settings (compression, row groups).
    pub parquet: ParquetOptions,
    /// The txn app id per topic (`<app id>-<partition>`); a topic not named uses its own name.
    /// Give the kafka-delta-ingest job's `--app_id` to continue its table.
    pub app_ids: BTreeMap<String, String>,
    /// A table created by the sink: its `delta.checkpointInterval` (commits between Delta log
    /// checkpoints; delta-rs's and Spark's default, 100, when not set). An existing table
    /// keeps its own.
    pub checkpoint_interval: Option<u32>,
}

impl DeltaOptions {
    /// With these Parquet settings for the data files.
    pub fn parquet(mut self, parquet: ParquetOptions) -> Self {
        self.parquet = parquet;
        self
    }

    /// A table created by the sink checkpoints its log every `commits` commits (at least 1).
    pub fn checkpoint_interval(mut self, commits: u32) -> Self {
        self.checkpoint_interval = Some(commits.max(1));
        self
    }

    /// Topic `topic`'s positions under txn app id `app_id` (`<app_id>-<partition>`).
    pub fn app_id(mut self, topic: impl Into<String>, app_id: impl Into<String>) -> Self {
        self.app_ids.insert(topic.into(), app_id.into());
        self
    }

    /// The txn app id prefix of `topic`.
    fn prefix<'a>(&'a self, topic: &'a str) -> &'a str {
        self.app_ids.get(topic).map_or(topic, String::as_str)
    }

    /// The txn app id of a partition: kafka-delta-ingest's `<app_id>-<partition>`.
    pub fn txn_app_id(&self, tp: &TopicPartition) -> String {
        format!("{}-{}", self.prefix(&tp.topic), tp.partition)
    }

    /// The partition a txn app id is for, among `topics` (every topic the app id can name
    /// when `topics` is empty: a topic of its own name, or one [`app_id`](Self::app_id) maps).
    fn partition_of(&self, app_id: &str, topics: &[String]) -> Option<TopicPartition> {
        let (prefix, partition) = app_id.rsplit_once('-')?;
        let partition: i32 = partition.parse().ok().filter(|p| *p >= 0)?;
        let topic = if topics.is_empty() {
            self.app_ids
                .iter()
                .find(|(_, a)| a.as_str() == prefix)
                .map_or(prefix, |(t, _)| t.as_str())
        } else {
            topics.iter().find(|t| self.prefix(t) == prefix)?.as_str()
        };
        Some(TopicPartition::new(topic, partition))
    }
}

/// The schema of the data files and the table: Spark's Kafka source schema
/// ([`kafka_schema`]) with the timestamp in microseconds, Delta's `timestamp` type.
pub fn delta_schema() -> SchemaRef {
    static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
    SCHEMA
        .get_or_init(|| delta_schema_of(&kafka_schema()))
        .clone()
}

/// Whether the sink decodes the values as JSON (the table holds their fields).
fn is_json(options: &DeltaOptions) -> bool {
    #[cfg(feature = "json-values")]
    return options.parquet.value_schema.is_some();
    #[cfg(not(feature = "json-values"))]
    {
        let _ = options;
        false
    }
}

/// `rows` (the rows the sink's converter makes: [`kafka_schema`], or the values' fields and
/// the Kafka columns) as the table holds them: each timestamp column in microseconds,
/// Delta's `timestamp` type (Arrow's Kafka `timestamp` is in milliseconds).
fn delta_schema_of(rows: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = rows
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(TimeUnit::Millisecond, tz) => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Timestamp(TimeUnit::Microsecond, tz.clone())),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// Why the sink cannot append its rows (of schema `ours`) to a table of schema `theirs`, if
/// it cannot: the same columns in the same order with the same types, where a column or a
/// nested field the sink never leaves null may be nullable in the table (Spark's Delta sink
/// declares every column and nested field nullable, kdirect some of them not null; a table
/// either wrote is one the other can continue), but not the other way round.
fn unwritable(theirs: &StructType, ours: &StructType) -> Option<String> {
    let names = |s: &StructType| s.fields().map(|f| f.name().clone()).collect::<Vec<_>>();
    if names(theirs) != names(ours) {
        return Some(format!(
            "its columns are {:?}, the sink's {:?}",
            names(theirs),
            names(ours)
        ));
    }
    theirs.fields().zip(ours.fields()).find_map(|(t, o)| {
        field_unwritable(
            t.name(),
            t.is_nullable(),
            t.data_type(),
            o.is_nullable(),
            o.data_type(),
        )
    })
}

/// [`unwritable`] for one column or nested field at `path`.
fn field_unwritable(
    path: &str,
    theirs_null: bool,
    theirs: &DeltaType,
    ours_null: bool,
    ours: &DeltaType,
) -> Option<String> {
    if ours_null && !theirs_null {
        return Some(format!(
            "{path} is not nullable in the table, and the sink writes nulls there"
        ));
    }
    let differ = || {
        Some(format!(
            "{path} is {theirs} in the table, {ours} in the sink's rows"
        ))
    };
    match (theirs, ours) {
        (DeltaType::Array(t), DeltaType::Array(o)) => field_unwritable(
            &format!("{path}[]"),
            t.contains_null(),
            t.element_type(),
            o.contains_null(),
            o.element_type(),
        ),
        (DeltaType::Map(t), DeltaType::Map(o)) => field_unwritable(
            &format!("{path}{{key}}"),
            false,
            t.key_type(),
            false,
            o.key_type(),
        )
        .or_else(|| {
            field_unwritable(
                &format!("{path}{{value}}"),
                t.value_contains_null(),
                t.value_type(),
                o.value_contains_null(),
                o.value_type(),
            )
        }),
        (DeltaType::Struct(t), DeltaType::Struct(o)) => {
            let names = |s: &StructType| s.fields().map(|f| f.name().clone()).collect::<Vec<_>>();
            if names(t) != names(o) {
                return differ();
            }
            t.fields().zip(o.fields()).find_map(|(tf, of)| {
                field_unwritable(
                    &format!("{path}.{}", tf.name()),
                    tf.is_nullable(),
                    tf.data_type(),
                    of.is_nullable(),
                    of.data_type(),
                )
            })
        }
        (t, o) if t == o => None,
        _ => differ(),
    }
}

/// `rb` (of the converter's schema) in `schema` (the table's, [`delta_schema_of`] it):
/// each millisecond timestamp column in microseconds.
fn to_delta(rb: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let mut columns: Vec<ArrayRef> = rb.columns().to_vec();
    for (i, f) in rb.schema().fields().iter().enumerate() {
        if let DataType::Timestamp(TimeUnit::Millisecond, tz) = f.data_type() {
            let ms = columns[i]
                .as_any()
                .downcast_ref::<PrimitiveArray<TimestampMillisecondType>>()
                .ok_or_else(|| {
                    arrow_schema::ArrowError::CastError("timestamp column".to_owned())
                })?;
            let us: PrimitiveArray<TimestampMicrosecondType> = ms.unary(|v| v.saturating_mul(1000));
            let us = match tz {
                Some(tz) => us.with_timezone(tz.clone()),
                None => us,
            };
            columns[i] = Arc::new(us);
        }
    }
    RecordBatch::try_new(schema.clone(), columns)
}

/// The Delta sink; see the [module docs](self). Its [`log`](Self::log) is the stream's offset
/// store.
#[derive(Debug, Clone)]
pub struct DeltaSink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The table's directory, or its URL (`s3://bucket/prefix`).
    dir: PathBuf,
    table: tokio::sync::Mutex<DeltaTable>,
    /// The table's log store (its object store is rooted at the table: the log is read
    /// through it, on a disk as on object storage).
    log_store: LogStoreRef,
    /// On object storage: the table's prefix, through the checkpoint's client (the data files
    /// are uploaded with it).
    bucket: Option<Bucket>,
    options: DeltaOptions,
    /// The data files' schema ([`delta_schema_of`] the options' rows).
    schema: SchemaRef,
    /// Files finished by a writer and not yet committed, by batch id.
    staged: Mutex<BTreeMap<u64, Staged>>,
    /// What this process committed: each partition's position and the batch that wrote it
    /// (what the commit rule needs to tell a retried commit from a conflict).
    written: Mutex<BTreeMap<TopicPartition, (i64, u64)>>,
    /// The highest batch id committed to the table, as far as this process knows.
    last_batch: Mutex<Option<u64>>,
    /// Every txn's version as of a table version, brought forward from the commit files
    /// after it: delta-rs answers one app id at a time by replaying the log, which cost each
    /// commit a replay per partition (a commit's p50 grew from 175 ms to 580 ms over 150
    /// versions with 16 partitions, a debug build).
    txns: Mutex<Txns>,
}

/// A batch's data files, finished by its writer, waiting for the store's commit.
#[derive(Debug, Clone, Default)]
struct Staged {
    adds: Vec<Add>,
    /// On object storage: (local file, name in the table) still to be uploaded; the upload
    /// comes before the Delta commit that lists them.
    uploads: Vec<(PathBuf, String)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Local files of batches whose commit never came.
        let staged = std::mem::take(
            self.staged
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for s in staged.into_values() {
            for (local, _) in s.uploads {
                let _ = fs::remove_file(local);
            }
        }
    }
}

/// The Delta log store for `s3://` and `az://` (`azure://` to delta-rs) tables: delta-rs's
/// default one (commit files
/// created with object_store's `PutMode::Create`, a conditional put), registered for those
/// schemes because kdirect builds delta-rs without its AWS and Azure features (the client is
/// the checkpoint's, handed over with `with_storage_backend`).
#[derive(Debug, Default)]
struct ConditionalPutLogStores;

impl deltalake_core::logstore::LogStoreFactory for ConditionalPutLogStores {
    fn with_options(
        &self,
        prefixed_store: deltalake_core::logstore::ObjectStoreRef,
        root_store: deltalake_core::logstore::ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> deltalake_core::DeltaResult<Arc<dyn deltalake_core::logstore::LogStore>> {
        Ok(deltalake_core::logstore::default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// See [`Inner::txns`].
#[derive(Debug, Default)]
struct Txns {
    /// The table version the versions are as of.
    at: Option<i64>,
    /// The version of each txn app id.
    versions: HashMap<String, i64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DeltaSink {
    /// Opens the table at `dir` (a local directory), creating the directory and the table
    /// (version 0: Spark's Kafka source schema) if needed.
    pub async fn open(
        dir: impl Into<PathBuf>,
        options: DeltaOptions,
    ) -> Result<DeltaSink, SinkError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(SinkError::io(&dir, "create directory", None))?;
        let abs = fs::canonicalize(&dir).map_err(SinkError::io(&dir, "resolve", None))?;
        let url = Url::from_directory_path(&abs).map_err(|()| {
            SinkError::from(SinkErrorKind::Spec {
                spec: dir.display().to_string(),
                reason: "not a path a URL can name".to_owned(),
            })
        })?;
        let table = DeltaTableBuilder::from_url(url)
            .and_then(|b| b.build())
            .map_err(delta_err(&dir, "open"))?;
        Self::open_table(dir, table, None, options).await
    }

    /// Opens the table at `url` on object storage (`s3://bucket/prefix` or
    /// `az://container/prefix`), creating it (version 0) if there is none. The client is the
    /// checkpoint's ([`Bucket`]: credentials and endpoint from the AWS or Azure environment
    /// variables, then `config` by object_store's names: `aws_endpoint`, `aws_allow_http`, …;
    /// `azure_storage_endpoint`, …), handed to delta-rs as the table's storage, so the commit
    /// files are created only if absent by the store's conditional put (S3's and Azure's
    /// `If-None-Match: *`) and the data files are uploaded through it. See the
    /// [module docs](self#on-object-storage).
    pub async fn open_object(
        url: &str,
        options: DeltaOptions,
        config: &[(&str, &str)],
    ) -> Result<DeltaSink, SinkError> {
        let bucket = Bucket::open(Path::new(url), config)?;
        let dir = bucket.url().to_owned();
        // object_store reads `az://` URLs as `az://ACCOUNT/CONTAINER/PATH`, the checkpoint as
        // `az://CONTAINER/PATH`: delta-rs is given the table as `azure://CONTAINER/PATH`, which
        // object_store reads the checkpoint's way (the URL is delta-rs's alone; the log holds
        // paths relative to the table).
        let named = dir.display().to_string();
        let named = match named.strip_prefix("az://") {
            Some(rest) => format!("azure://{rest}"),
            None => named,
        };
        let table_url = Url::parse(&format!("{named}/")).map_err(|e| -> SinkError {
            SinkErrorKind::Spec {
                spec: dir.display().to_string(),
                reason: format!("not a URL: {e}"),
            }
            .into()
        })?;
        for scheme in ["s3://", "azure://"] {
            if let Ok(u) = Url::parse(scheme) {
                let factories = deltalake_core::logstore::logstore_factories();
                if !factories.contains_key(&u) {
                    factories.insert(u, Arc::new(ConditionalPutLogStores));
                }
            }
        }
        // delta-rs gets a client of its own (a second pool), its requests run on this runtime:
        // delta-rs's kernel reads on a runtime of its own, and a pooled connection made there
        // failed later requests from this one ("error sending request", Azurite, about one CLI
        // run in three); the sink's own reads and uploads use `bucket`'s client.
        let theirs = Bucket::open(Path::new(url), config)?;
        let theirs: Arc<dyn ObjectStore> =
            Arc::new(deltalake_core::logstore::DeltaIOStorageBackend::new(
                theirs.store().clone(),
                deltalake_core::logstore::IORuntime::RT(tokio::runtime::Handle::current()),
            ));
        let table = DeltaTableBuilder::from_url(table_url.clone())
            .map(|b| b.with_storage_backend(theirs, table_url))
            .and_then(|b| b.build())
            .map_err(delta_err(&dir, "open"))?;
        Self::open_table(dir, table, Some(bucket), options).await
    }

    async fn open_table(
        dir: PathBuf,
        mut table: DeltaTable,
        bucket: Option<Bucket>,
        options: DeltaOptions,
    ) -> Result<DeltaSink, SinkError> {
        let delta = |what: &'static str| {
            let dir = dir.clone();
            move |source: DeltaTableError| -> SinkError {
                SinkErrorKind::Delta {
                    table: dir,
                    what,
                    source: Box::new(source),
                }
                .into()
            }
        };
        let exists = table
            .log_store()
            .is_delta_table_location()
            .await
            .map_err(delta("look for the log of"))?;
        let rows = options.parquet.row_schema()?;
        let arrow_schema = delta_schema_of(&rows);
        let schema: StructType = arrow_schema
            .as_ref()
            .try_into_kernel()
            .map_err(|e| delta("convert the schema of")(e.into()))?;
        if exists {
            table.load().await.map_err(delta("load"))?;
            // The data files are Spark's Kafka source schema, or the values' fields and the
            // Kafka columns: a table of another schema (kafka-delta-ingest's tables hold the
            // values' JSON fields alone) is refused here, not at a reader's first scan.
            let theirs = table
                .snapshot()
                .map_err(delta("read the schema of"))?
                .schema();
            if let Some(why) = unwritable(&theirs, &schema) {
                return Err(SinkErrorKind::Spec {
                    spec: dir.display().to_string(),
                    reason: if is_json(&options) {
                        format!(
                            "the table's schema is not the one the Delta sink writes (the \
                             values' fields, then Spark's Kafka columns but value): {why}"
                        )
                    } else {
                        format!(
                            "the table's schema is not Spark's Kafka source schema that the \
                             Delta sink writes: {why}"
                        )
                    },
                }
                .into());
            }
        } else {
            // Another writer creating it at the same time: Ignore loads theirs.
            let mut create = deltalake_core::operations::create::CreateBuilder::new();
            if let Some(n) = options.checkpoint_interval {
                create = create.with_configuration_property(
                    deltalake_core::TableProperty::CheckpointInterval,
                    Some(n.to_string()),
                );
            }
            table = create
                .with_log_store(table.log_store())
                .with_columns(schema.fields().cloned())
                .with_save_mode(SaveMode::Ignore)
                .with_table_name("kafka")
                .with_comment(if is_json(&options) {
                    "Kafka records, their JSON values as columns, written by kdirect"
                } else {
                    "Kafka records in Spark's Kafka source schema, written by kdirect"
                })
                .await
                .map_err(delta("create"))?;
        }
        let sink = DeltaSink {
            inner: Arc::new(Inner {
                dir,
                log_store: table.log_store(),
                table: tokio::sync::Mutex::new(table),
                bucket,
                options,
                schema: arrow_schema,
                staged: Mutex::new(BTreeMap::new()),
                written: Mutex::new(BTreeMap::new()),
                last_batch: Mutex::new(None),
                txns: Mutex::new(Txns::default()),
            }),
        };
        let last = sink
            .inner
            .scan_log()
            .await
            .map_err(SinkError::from)?
            .last_batch;
        *lock(&sink.inner.last_batch) = last;
        Ok(sink)
    }

    /// The table's directory (or its URL, `s3://bucket/prefix`).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The table's log as the stream's offset store (`DirectStreamBuilder::store`): a
    /// batch's commit is the Delta commit that adds its files and moves its partitions'
    /// `txn`s. Its commit refuses a batch whose output was not written through this sink
    /// first.
    pub fn log(&self) -> DeltaLog {
        DeltaLog {
            inner: self.inner.clone(),
        }
    }

    /// The table's current version (after the last commit this process made or saw).
    pub async fn version(&self) -> Option<i64> {
        self.inner.table.lock().await.version()
    }
}

/// What [`Inner::scan_log`] finds in `_delta_log`.
#[derive(Debug, Default)]
struct LogScan {
    /// Every txn app id the log (its last checkpoint and the commits after it) holds.
    app_ids: BTreeSet<String>,
    /// The kdirect batch id of the newest commit that names one.
    last_batch: Option<u64>,
}

impl Inner {
    fn describe(&self) -> String {
        format!("delta table {}", self.dir.display())
    }

    fn store_error(&self, what: &str, source: DeltaTableError) -> StoreError {
        StoreErrorKind::Backend {
            store: self.describe(),
            what: what.to_owned(),
            source: Box::new(source),
        }
        .into()
    }

    /// The txn app ids and the last kdirect batch id, from the log's files: delta-rs answers
    /// for one app id at a time, and the store must find every partition's. Reads the last
    /// checkpoint's `txn` column (if there is one) and every commit file after it; the batch
    /// id from the newest commit file that has one.
    async fn scan_log(&self) -> Result<LogScan, StoreError> {
        let mut scan = LogScan::default();
        let checkpoint: Option<i64> = self
            .get("_delta_log/_last_checkpoint")
            .await?
            .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
            .and_then(|v| v.get("version").and_then(|v| v.as_i64()));
        let names = self.list_log().await?;
        let mut commits: Vec<(i64, &str)> = names
            .iter()
            .filter_map(|name| {
                let v = name
                    .strip_suffix(".json")
                    .filter(|v| v.len() == 20)
                    .and_then(|v| v.parse::<i64>().ok())?;
                Some((v, name.as_str()))
            })
            .collect();
        commits.sort_unstable();
        if let Some(cp) = checkpoint {
            self.checkpoint_app_ids(&names, cp, &mut scan.app_ids)
                .await?;
        }
        for (v, name) in commits.iter().rev() {
            let needed_for_ids = checkpoint.is_none_or(|cp| *v > cp);
            if !needed_for_ids && scan.last_batch.is_some() {
                break;
            }
            let rel = format!("_delta_log/{name}");
            let Some(bytes) = self.get(&rel).await? else {
                // Cleaned up since the listing: older than what is still needed.
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(action) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if let Some(id) = action
                    .get("txn")
                    .and_then(|t| t.get("appId"))
                    .and_then(|a| a.as_str())
                {
                    if needed_for_ids {
                        scan.app_ids.insert(id.to_owned());
                    }
                }
                if scan.last_batch.is_none() {
                    scan.last_batch = action
                        .get("commitInfo")
                        .and_then(|c| c.get(BATCH_ID_KEY))
                        .and_then(|b| b.as_u64());
                }
            }
        }
        Ok(scan)
    }

    /// The object store rooted at the table (its directory or prefix): on object storage the
    /// sink's own client, on a disk delta-rs's.
    fn store(&self) -> Arc<dyn ObjectStore> {
        match &self.bucket {
            Some(b) => Arc::new(
                deltalake_core::logstore::object_store::prefix::PrefixStore::new(
                    b.store().clone(),
                    b.key(b.url()),
                ),
            ),
            None => self.log_store.object_store(None),
        }
    }

    /// The object at `rel` (a path in the table), `None` if absent.
    async fn get(&self, rel: &str) -> Result<Option<bytes::Bytes>, StoreError> {
        let path = self.dir.join(rel);
        let got = match self.store().get(&Key::from(rel)).await {
            Ok(got) => got,
            Err(deltalake_core::logstore::object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(object_err(&path, "read", e)),
        };
        got.bytes()
            .await
            .map(Some)
            .map_err(|e| object_err(&path, "read", e))
    }

    /// The names in `_delta_log`.
    async fn list_log(&self) -> Result<Vec<String>, StoreError> {
        let listed = self
            .store()
            .list_with_delimiter(Some(&Key::from("_delta_log")))
            .await
            .map_err(|e| object_err(&self.dir.join("_delta_log"), "list", e))?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|o| o.location.filename().map(str::to_owned))
            .collect())
    }

    /// The txn app ids of checkpoint `version` (single-file or multi-part, classic names),
    /// among `names` (the log's).
    async fn checkpoint_app_ids(
        &self,
        names: &[String],
        version: i64,
        out: &mut BTreeSet<String>,
    ) -> Result<(), StoreError> {
        use arrow_array::cast::AsArray;
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::arrow::ProjectionMask;

        let prefix = format!("{version:020}.checkpoint");
        let corrupt = |p: &Path, reason: String| -> StoreError {
            StoreErrorKind::Corrupt {
                path: p.to_owned(),
                reason,
            }
            .into()
        };
        for name in names {
            if !name.starts_with(&prefix) || !name.ends_with(".parquet") {
                continue;
            }
            let rel = format!("_delta_log/{name}");
            let path = self.dir.join(&rel);
            let Some(bytes) = self.get(&rel).await? else {
                continue;
            };
            let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .map_err(|e| corrupt(&path, e.to_string()))?;
            let Some(txn) = builder
                .parquet_schema()
                .root_schema()
                .get_fields()
                .iter()
                .position(|f| f.name() == "txn")
            else {
                continue;
            };
            let mask = ProjectionMask::roots(builder.parquet_schema(), [txn]);
            let reader = builder
                .with_projection(mask)
                .build()
                .map_err(|e| corrupt(&path, e.to_string()))?;
            for rb in reader {
                let rb = rb.map_err(|e| corrupt(&path, e.to_string()))?;
                let Some(txn) = rb.column(0).as_struct_opt() else {
                    continue;
                };
                let Some(ids) = txn
                    .column_by_name("appId")
                    .and_then(|c| c.as_string_opt::<i32>())
                else {
                    continue;
                };
                for i in 0..ids.len() {
                    if txn.is_valid(i) && ids.is_valid(i) {
                        out.insert(ids.value(i).to_owned());
                    }
                }
            }
        }
        Ok(())
    }

    /// Brings `table`'s snapshot to the latest version incrementally (the commit files after
    /// it; `update_state` rebuilds it from the last checkpoint, a cost that grew with every
    /// commit until the next checkpoint).
    async fn refresh(&self, table: &mut DeltaTable) -> Result<(), StoreError> {
        let log_store = table.log_store();
        match table.state.as_mut() {
            Some(state) => state.update(log_store.as_ref(), None).await,
            None => table.update_state().await,
        }
        .map_err(|e| self.store_error("load", e))
    }

    /// The positions the table holds for `tps` (as of the table's loaded snapshot):
    /// `version + 1` of each partition's txn.
    async fn positions(
        &self,
        table: &DeltaTable,
        tps: Vec<TopicPartition>,
    ) -> Result<Positions, StoreError> {
        let at = table.version();
        let known = lock(&self.txns).at;
        let fresh = match (known, at) {
            (Some(k), Some(a)) if k == a => true,
            (Some(k), Some(a)) if k < a => self.read_commits(k + 1, a).await?,
            _ => false,
        };
        if !fresh {
            let app_ids = self.scan_log().await?.app_ids;
            self.replay(table, app_ids).await?;
        }
        let txns = lock(&self.txns);
        Ok(tps
            .into_iter()
            .filter_map(|tp| {
                let v = txns.versions.get(&self.options.txn_app_id(&tp)).copied()?;
                Some((tp, v.saturating_add(1)))
            })
            .collect())
    }

    /// Brings [`Inner::txns`] from version `from - 1` to `to` with the txn actions of the
    /// commit files `from..=to`. `Ok(false)` when one is gone (the log was cleaned up past
    /// it): the caller replays instead.
    async fn read_commits(&self, from: i64, to: i64) -> Result<bool, StoreError> {
        let mut updates = Vec::new();
        for v in from..=to {
            let rel = format!("_delta_log/{v:020}.json");
            let path = self.dir.join(&rel);
            let Some(bytes) = self.get(&rel).await? else {
                return Ok(false);
            };
            let text = String::from_utf8_lossy(&bytes);
            for line in text.lines().filter(|l| l.contains("\"txn\"")) {
                let action: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| -> StoreError {
                        StoreErrorKind::Corrupt {
                            path: path.clone(),
                            reason: format!("a line is not JSON: {e}"),
                        }
                        .into()
                    })?;
                let txn = action.get("txn");
                let id = txn.and_then(|t| t.get("appId")).and_then(|a| a.as_str());
                let version = txn.and_then(|t| t.get("version")).and_then(|v| v.as_i64());
                if let (Some(id), Some(version)) = (id, version) {
                    updates.push((id.to_owned(), version));
                }
            }
        }
        let mut txns = lock(&self.txns);
        txns.versions.extend(updates);
        txns.at = Some(to);
        Ok(true)
    }

    /// Builds [`Inner::txns`] from the table's snapshot: each of `app_ids` (every app id
    /// the log holds, [`scan_log`](Self::scan_log)) at its version as delta-rs replays it.
    async fn replay(
        &self,
        table: &DeltaTable,
        app_ids: BTreeSet<String>,
    ) -> Result<(), StoreError> {
        let snapshot = table
            .snapshot()
            .map_err(|e| self.store_error("read the snapshot", e))?;
        let log_store = table.log_store();
        let mut versions = HashMap::new();
        for app_id in app_ids {
            let version = snapshot
                .transaction_version(log_store.as_ref(), &app_id)
                .await
                .map_err(|e| self.store_error(&format!("read txn {app_id}"), e))?;
            if let Some(v) = version {
                versions.insert(app_id, v);
            }
        }
        *lock(&self.txns) = Txns {
            at: table.version(),
            versions,
        };
        Ok(())
    }
}

fn object_err(path: &Path, op: &'static str, e: impl std::fmt::Display) -> StoreError {
    StoreErrorKind::Io {
        path: path.to_owned(),
        op,
        source: std::io::Error::other(e.to_string()),
    }
    .into()
}

fn delta_err(dir: &Path, what: &'static str) -> impl FnOnce(DeltaTableError) -> SinkError {
    let table = dir.to_owned();
    move |source| {
        SinkErrorKind::Delta {
            table,
            what,
            source: Box::new(source),
        }
        .into()
    }
}

impl Sink for DeltaSink {
    type Writer = DeltaWriter;

    fn describe(&self) -> String {
        format!("delta sink {}", self.inner.dir.display())
    }

    fn begin(&self, batch_id: u64) -> Result<DeltaWriter, SinkError> {
        Ok(DeltaWriter {
            inner: self.inner.clone(),
            batch_id,
            file: None,
            converter: self.inner.options.parquet.converter()?,
            rows: 0,
        })
    }

    /// Whether batch `batch_id` is in the table: at or below the newest batch id a commit
    /// of the table names (batches commit in order per writer).
    fn is_committed(&self, batch_id: u64) -> Result<bool, SinkError> {
        Ok(self.last_committed()?.is_some_and(|last| batch_id <= last))
    }

    fn last_committed(&self) -> Result<Option<u64>, SinkError> {
        Ok(*lock(&self.inner.last_batch))
    }
}

/// One batch's data file being written; invisible until the batch's Delta commit. Dropping
/// it before its [`commit`](BatchWriter::commit) removes the file.
#[derive(Debug)]
pub struct DeltaWriter {
    inner: Arc<Inner>,
    batch_id: u64,
    /// Created at the first record: a batch without records writes no file.
    file: Option<Open>,
    converter: ArrowConverter,
    rows: u64,
}

struct Open {
    writer: ArrowWriter<File>,
    /// The file's name in the table.
    name: String,
    /// Where it is written: in the table's directory, or (a table on object storage) a
    /// hidden temp file in `TMPDIR`, uploaded at the store's commit.
    local: PathBuf,
}

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Open")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl DeltaWriter {
    fn parquet_error(&self, name: &str) -> impl Fn(parquet::errors::ParquetError) -> SinkError {
        let (batch_id, path) = (self.batch_id, self.inner.dir.join(name));
        move |source| {
            SinkErrorKind::Parquet {
                batch_id,
                path: path.clone(),
                source,
            }
            .into()
        }
    }

    fn append(&mut self, rb: &RecordBatch) -> Result<(), SinkError> {
        let batch_id = self.batch_id;
        let rb = to_delta(rb, &self.inner.schema)
            .map_err(|source| SinkErrorKind::Arrow { batch_id, source })?;
        let open = match &mut self.file {
            Some(open) => open,
            None => {
                let name = format!(
                    "part-{batch_id:010}-{}.{}parquet",
                    uuid::Uuid::new_v4(),
                    self.inner.options.parquet.file_suffix()
                );
                let (file, local) = if self.inner.bucket.is_some() {
                    let beside = std::env::temp_dir().join(&name);
                    kdirect_commit::file_sink::create_temp_beside(&beside).map_err(
                        SinkError::io(&beside, "create a temp file for", Some(batch_id)),
                    )?
                } else {
                    let path = self.inner.dir.join(&name);
                    let file = File::options()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(SinkError::io(&path, "create", Some(batch_id)))?;
                    (file, path)
                };
                let props = self.inner.options.parquet.properties(batch_id);
                match ArrowWriter::try_new(file, self.inner.schema.clone(), Some(props)) {
                    Ok(writer) => self.file.insert(Open {
                        writer,
                        name,
                        local,
                    }),
                    Err(e) => {
                        let _ = fs::remove_file(&local);
                        return Err(self.parquet_error(&name)(e));
                    }
                }
            }
        };
        let row_group_bytes = self.inner.options.parquet.row_group_bytes;
        let written = open.writer.write(&rb).and_then(|()| {
            if open.writer.in_progress_size() >= row_group_bytes {
                open.writer.flush()
            } else {
                Ok(())
            }
        });
        if let Err(source) = written {
            return Err(SinkErrorKind::Parquet {
                batch_id,
                path: self.inner.dir.join(&open.name),
                source,
            }
            .into());
        }
        self.rows += rb.num_rows() as u64;
        Ok(())
    }
}

impl BatchWriter for DeltaWriter {
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

    /// Finishes and fsyncs the file and stages its `add` action: the batch becomes visible
    /// with its positions at the store's commit ([`DeltaLog::commit`]), not here.
    fn commit(mut self) -> Result<SinkCommit, SinkError> {
        let id = Some(self.batch_id);
        let mut staged = Staged::default();
        let mut files = Vec::new();
        if let Some(Open {
            writer,
            name,
            local,
        }) = self.file.take()
        {
            let path = local;
            let closed = writer
                .into_inner()
                .map_err(self.parquet_error(&name))
                .and_then(|f| {
                    f.sync_all()
                        .map_err(SinkError::io(&path, "fsync", id))
                        .map(|()| f)
                })
                .and_then(|f| f.metadata().map_err(SinkError::io(&path, "look at", id)));
            let meta = match closed {
                Ok(m) => m,
                Err(e) => {
                    let _ = fs::remove_file(&path);
                    return Err(e);
                }
            };
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            if self.inner.bucket.is_some() {
                staged.uploads.push((path, name.clone()));
            }
            files.push(self.inner.dir.join(&name));
            staged.adds.push(Add {
                path: name,
                partition_values: HashMap::new(),
                size: meta.len() as i64,
                modification_time: modified,
                data_change: true,
                stats: Some(format!("{{\"numRecords\":{}}}", self.rows)),
                tags: None,
                deletion_vector: None,
                base_row_id: None,
                default_row_commit_version: None,
                clustering_provider: None,
            });
        }
        if self.inner.bucket.is_none() {
            let dir = &self.inner.dir;
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(SinkError::io(dir, "fsync directory", id))?;
        }
        if let Some(old) = lock(&self.inner.staged).insert(self.batch_id, staged) {
            for (local, _) in old.uploads {
                let _ = fs::remove_file(local);
            }
        }
        Ok(SinkCommit {
            batch_id: self.batch_id,
            records: self.rows,
            files,
        })
    }
}

impl Drop for DeltaWriter {
    fn drop(&mut self) {
        if let Some(open) = self.file.take() {
            drop(open.writer);
            let _ = fs::remove_file(&open.local);
        }
    }
}

/// The Delta table's log as an offset store; see [`DeltaSink::log`]. Positions are the
/// table's `txn` actions in kafka-delta-ingest's layout.
#[derive(Debug, Clone)]
pub struct DeltaLog {
    inner: Arc<Inner>,
}

impl DeltaLog {
    /// The app id the positions of `tp` are kept under (`<app id>-<partition>`).
    pub fn txn_app_id(&self, tp: &TopicPartition) -> String {
        self.inner.options.txn_app_id(tp)
    }
}

impl OffsetStore for DeltaLog {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    /// An atomic compare-and-set (the commit rule over the snapshot, then a put-if-absent
    /// commit file); no plan log, so a group's members can share the table. Not
    /// `TRANSACTIONAL`: that flag promises the SQL transaction API; here the sink's staged
    /// files ride in the store's commit instead.
    fn capabilities(&self) -> Capabilities {
        Capabilities::ATOMIC_COMMIT
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        let mut table = self.inner.table.lock().await;
        table
            .update_state()
            .await
            .map_err(|e| self.inner.store_error("load", e))?;
        // Read afresh at start: every app id, each version replayed by delta-rs.
        let scan = self.inner.scan_log().await?;
        self.inner.replay(&table, scan.app_ids.clone()).await?;
        let tps: Vec<TopicPartition> = scan
            .app_ids
            .iter()
            .filter_map(|a| self.inner.options.partition_of(a, topics))
            .collect();
        let positions = self.inner.positions(&table, tps).await?;
        {
            let mut last = lock(&self.inner.last_batch);
            *last = (*last).max(scan.last_batch);
        }
        Ok(Committed {
            batch_id: scan.last_batch,
            positions,
            ..Committed::default()
        })
    }

    /// Nothing: the table keeps no plans (a restart re-plans from the `txn`s).
    async fn log_plan(&self, _batch: &PlannedBatch) -> Result<(), StoreError> {
        Ok(())
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        _ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        let inner = &self.inner;
        let Some(mut staged) = lock(&inner.staged).remove(&batch.id) else {
            // A retried commit of a batch this process committed: decided below as
            // already committed; anything else was never written through the sink.
            let mut table = inner.table.lock().await;
            inner.refresh(&mut table).await?;
            return match self.decide(&table, batch).await? {
                CommitDecision::AlreadyCommitted => Ok(CommitOutcome::AlreadyCommitted),
                _ => Err(StoreErrorKind::Inconsistent {
                    path: inner.dir.clone(),
                    reason: format!(
                        "batch {} is committed before its output: write it through the Delta \
                         sink (begin, write, commit the writer) first",
                        batch.id
                    ),
                }
                .into()),
            };
        };
        let uploaded = self.upload(batch.id, &mut staged).await;
        let outcome = match uploaded {
            Ok(()) => self.commit_adds(batch, &staged.adds).await,
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            // Still staged (what was uploaded, as uploaded): a retried commit takes them.
            lock(&inner.staged).insert(batch.id, staged);
        }
        outcome
    }

    /// Sets positions in a Delta commit of `txn` actions alone (no data), as batch
    /// `batch_id`, over whatever the table holds (no compare-and-set; a commit that loses the
    /// race for its table version is an error, to be run again).
    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        let inner = &self.inner;
        let mut table = inner.table.lock().await;
        inner.refresh(&mut table).await?;
        let actions = positions.iter().map(|(tp, &p)| self.txn(tp, p)).collect();
        match self.try_commit(&mut table, batch_id, actions).await {
            Ok(_) => Ok(()),
            Err(RaceOr::Error(e)) => Err(e),
            Err(RaceOr::Raced) => Err(StoreErrorKind::Backend {
                store: inner.describe(),
                what: format!("set positions as batch {batch_id}"),
                source: "another writer committed the same table version first".into(),
            }
            .into()),
        }
    }
}

impl DeltaLog {
    /// A table on object storage: uploads the batch's data files under their names in the
    /// table (each appears whole; no Delta reader sees it before the commit that adds it).
    async fn upload(&self, batch_id: u64, staged: &mut Staged) -> Result<(), StoreError> {
        let Some(bucket) = self.inner.bucket.clone() else {
            return Ok(());
        };
        while let Some((local, name)) = staged.uploads.first().cloned() {
            let b = bucket.clone();
            let target = b.url().join(&name);
            let up = local.clone();
            let done = tokio::task::spawn_blocking(move || b.upload_file(&target, &up))
                .await
                .map_err(|e| {
                    object_err(
                        &self.inner.dir.join(&name),
                        "upload (batch task)",
                        format!("batch {batch_id}: {e}"),
                    )
                })?;
            done?;
            let _ = fs::remove_file(&local);
            staged.uploads.remove(0);
        }
        Ok(())
    }

    fn txn(&self, tp: &TopicPartition, position: i64) -> Action {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        // kafka-delta-ingest's version: the last offset written, one below the position.
        Action::Txn(Transaction::new_with_last_update(
            self.txn_app_id(tp),
            position - 1,
            Some(now),
        ))
    }

    /// The commit rule over the table's loaded snapshot.
    async fn decide(
        &self,
        table: &DeltaTable,
        batch: &PlannedBatch,
    ) -> Result<CommitDecision, StoreError> {
        let tps = batch.ranges.iter().map(|r| r.topic_partition()).collect();
        let stored = self.inner.positions(table, tps).await?;
        let written = lock(&self.inner.written);
        let found: Vec<Option<StoredPosition>> = batch
            .ranges
            .iter()
            .map(|r| {
                let tp = r.topic_partition();
                stored.get(&tp).map(|&position| StoredPosition {
                    position,
                    batch_id: written
                        .get(&tp)
                        .filter(|(p, _)| *p == position)
                        .map(|(_, b)| *b),
                })
            })
            .collect();
        Ok(decide(batch, &found))
    }

    /// Decides and commits, reading the table again after a lost race.
    async fn commit_adds(
        &self,
        batch: &PlannedBatch,
        adds: &[Add],
    ) -> Result<CommitOutcome, StoreError> {
        let inner = &self.inner;
        let mut table = inner.table.lock().await;
        for _ in 0..RACE_RETRIES {
            inner.refresh(&mut table).await?;
            match self.decide(&table, batch).await? {
                CommitDecision::Write => {}
                CommitDecision::AlreadyCommitted => return Ok(CommitOutcome::AlreadyCommitted),
                CommitDecision::Conflict { index, stored } => {
                    let r = &batch.ranges[index.min(batch.ranges.len().saturating_sub(1))];
                    return Err(StoreErrorKind::Conflict {
                        store: inner.describe(),
                        topic: r.topic.to_string(),
                        partition: r.partition,
                        expected_from: batch.expected_from(r),
                        stored: Stored(stored),
                    }
                    .into());
                }
            }
            let mut actions: Vec<Action> = adds.iter().cloned().map(Action::Add).collect();
            actions.extend(
                batch
                    .ranges
                    .iter()
                    .filter(|r| batch.moves(r))
                    .map(|r| self.txn(&r.topic_partition(), r.until)),
            );
            if actions.is_empty() {
                // Nothing read and no partition moved: no Delta commit (a caught-up stream
                // would otherwise add an empty commit to the log per batch).
                return Ok(CommitOutcome::Committed);
            }
            match self.try_commit(&mut table, batch.id, actions).await {
                Ok(_) => {
                    let mut written = lock(&inner.written);
                    for r in batch.ranges.iter().filter(|r| batch.moves(r)) {
                        written.insert(r.topic_partition(), (r.until, batch.id));
                    }
                    drop(written);
                    let mut last = lock(&inner.last_batch);
                    *last = Some(last.map_or(batch.id, |l| l.max(batch.id)));
                    return Ok(CommitOutcome::Committed);
                }
                Err(RaceOr::Raced) => continue,
                Err(RaceOr::Error(e)) => return Err(e),
            }
        }
        Err(StoreErrorKind::Backend {
            store: inner.describe(),
            what: format!(
                "commit batch {}: lost the race for the next table version {RACE_RETRIES} times",
                batch.id
            ),
            source: "too many concurrent writers".into(),
        }
        .into())
    }

    /// One Delta commit of `actions` on top of the loaded snapshot, with no retry of
    /// delta-rs's own (its conflict checker would let an append through after another
    /// writer's; the caller decides again instead). `Err(Raced)` when another commit took
    /// the version.
    async fn try_commit(
        &self,
        table: &mut DeltaTable,
        batch_id: u64,
        actions: Vec<Action>,
    ) -> Result<i64, RaceOr> {
        let inner = &self.inner;
        let snapshot = table
            .snapshot()
            .map_err(|e| RaceOr::Error(inner.store_error("read the snapshot", e)))?;
        let op = DeltaOperation::StreamingUpdate {
            output_mode: OutputMode::Append,
            query_id: "kdirect".to_owned(),
            epoch_id: i64::try_from(batch_id).unwrap_or(i64::MAX),
        };
        let mut meta = HashMap::new();
        meta.insert(BATCH_ID_KEY.to_owned(), serde_json::Value::from(batch_id));
        let prepared =
            CommitBuilder::from(CommitProperties::default().with_create_checkpoint(true))
                .with_actions(actions)
                .with_app_metadata(meta)
                .with_max_retries(0)
                .build(Some(snapshot), table.log_store(), op)
                .into_prepared_commit_future()
                .await
                .map_err(|e| RaceOr::Error(inner.store_error("prepare the commit", e)))?;
        let post = match prepared.await {
            Ok(post) => post,
            Err(DeltaTableError::Transaction {
                source: TransactionError::MaxCommitAttempts(_),
            })
            | Err(DeltaTableError::VersionAlreadyExists(_)) => return Err(RaceOr::Raced),
            Err(e) => return Err(RaceOr::Error(inner.store_error("commit", e))),
        };
        let version = post.version;
        // The commit file is in: the batch is committed whatever the checkpoint does. The
        // snapshot after it is the table's (no re-read before the next commit unless another
        // writer committed).
        match post.await {
            Ok(finalized) => table.state = Some(finalized.snapshot()),
            Err(e) => tracing::warn!(
                "{}: version {version} committed; writing its checkpoint failed: {e}",
                inner.describe()
            ),
        }
        Ok(version)
    }
}

/// A commit that lost the race for its table version, or failed.
#[derive(Debug)]
enum RaceOr {
    Raced,
    Error(StoreError),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod schema_tests {
    use deltalake_core::kernel::{ArrayType, MapType, StructField};

    use super::*;

    fn ours() -> StructType {
        delta_schema().as_ref().try_into_kernel().unwrap()
    }

    /// What Spark's Delta sink declares: every column and nested field nullable.
    fn all_nullable(t: &DeltaType) -> DeltaType {
        match t {
            DeltaType::Array(a) => DeltaType::Array(Box::new(ArrayType::new(
                all_nullable(a.element_type()),
                true,
            ))),
            DeltaType::Map(m) => DeltaType::Map(Box::new(MapType::new(
                all_nullable(m.key_type()),
                all_nullable(m.value_type()),
                true,
            ))),
            DeltaType::Struct(s) => DeltaType::Struct(Box::new(spark_like(s))),
            other => other.clone(),
        }
    }

    fn spark_like(s: &StructType) -> StructType {
        StructType::try_new(
            s.fields()
                .map(|f| StructField::new(f.name(), all_nullable(f.data_type()), true)),
        )
        .unwrap()
    }

    #[test]
    fn a_table_as_nullable_as_sparks_takes_the_sinks_rows() {
        assert_eq!(unwritable(&ours(), &ours()), None);
        let spark = spark_like(&ours());
        assert_ne!(spark, ours(), "the test must loosen something");
        assert_eq!(unwritable(&spark, &ours()), None);
    }

    #[test]
    fn a_table_stricter_than_the_sinks_rows_or_of_other_columns_is_refused() {
        // The sink's rows into a table that says the key is never null: refused.
        let strict = StructType::try_new(
            ours()
                .fields()
                .map(|f| StructField::new(f.name(), f.data_type().clone(), false)),
        )
        .unwrap();
        let why = unwritable(&strict, &ours()).unwrap();
        assert!(why.contains("key is not nullable"), "{why}");
        // kafka-delta-ingest's tables hold the values' fields as columns.
        let other = StructType::try_new([
            StructField::new("id", DeltaType::LONG, true),
            StructField::new("name", DeltaType::STRING, true),
        ])
        .unwrap();
        let why = unwritable(&other, &ours()).unwrap();
        assert!(why.contains("its columns are [\"id\", \"name\"]"), "{why}");
        // Same names, another type.
        let retyped = StructType::try_new(ours().fields().map(|f| {
            let t = if f.name() == "partition" {
                DeltaType::LONG
            } else {
                f.data_type().clone()
            };
            StructField::new(f.name(), t, true)
        }))
        .unwrap();
        let why = unwritable(&retyped, &ours()).unwrap();
        assert!(
            why.contains("partition is long in the table, integer"),
            "{why}"
        );
    }
}
