//! SQL stores — SQLite (the embedded default), PostgreSQL, MySQL/MariaDB — through one driver,
//! sqlx (its `Any` driver, so one code path serves the three; the statements differ only in
//! placeholders, upsert syntax and column types, chosen by [`Dialect`]).
//!
//! The offsets table (default `kdirect_offsets`), created if missing:
//!
//! | column | |
//! | --- | --- |
//! | `group_id`, `topic`, `partition_id` | the primary key |
//! | `next_offset` | the next offset to read |
//! | `batch_id` | the batch that stored it |
//! | `updated_at` | the database's time of the write |
//! | `leader_epoch` | KIP-320: the epoch of the last record batch read before `next_offset` (NULL or -1: not known) |
//! | `topic_id` | KIP-516: the id of the topic the position was read from, 32 hex digits (NULL: not known) |
//!
//! A table made before the last two columns existed gets them on connect (`ALTER TABLE … ADD
//! COLUMN`, nullable: its rows resume unchecked until their next commit). With them, a stream
//! resumed from the table checks its positions as one resumed from a checkpoint does: a log
//! truncated while it was down (OffsetForLeaderEpoch) and a topic deleted and re-created while
//! it was down (the stored id against the cluster's) are data loss with their exact range.
//!
//! A commit runs in one transaction: for each range, `UPDATE … SET next_offset = until WHERE
//! key AND next_offset = from` — compare-and-set on `from`, atomic in every database, and the
//! row stays locked until the transaction ends. A row holding `until` with the same batch id is
//! an earlier commit of the same batch (idempotent: [`CommitOutcome::AlreadyCommitted`]); a
//! missing row is inserted (a concurrent insert fails on the primary key, which is a conflict);
//! any other position is a [`StoreErrorKind::Conflict`].
//!
//! **Exactly-once** ([`SqlStore::begin`]): the offsets are written first, then the user's own
//! statements run in the same transaction ([`SqlTxn::conn`], or [`SqlTxn::insert_records`]
//! for the sink table), then [`SqlTxn::commit`] makes both durable at once. If the batch was
//! already committed, `begin` says so and the user's writes are skipped; on a conflict nothing
//! is written.
//!
//! ```no_run
//! # async fn demo(store: &kdirect_commit::sql::SqlStore, batch: &kdirect_commit::PlannedBatch) -> Result<(), Box<dyn std::error::Error>> {
//! use kdirect_commit::sql::Begun;
//! match store.begin(batch).await? {
//!     Begun::Open(mut tx) => {
//!         let sql = format!("INSERT INTO totals (n) VALUES ({})", tx.dialect().placeholder(1));
//!         kdirect_commit::sql::sqlx::query(&sql).bind(42_i64).execute(tx.conn()).await?;
//!         tx.commit().await?;
//!     }
//!     Begun::AlreadyCommitted => {} // a re-run of a committed batch: its output is in already
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Once;

pub use sqlx;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::AnyConnection;
use sqlx::{Any, AnyPool, Executor, Row, Transaction};

use crate::{
    batch_id_i64, conflict, decide, decided, redact, Capabilities, CommitContext, CommitOutcome,
    Committed, OffsetStore, PlannedBatch, Positions, StoreError, StoreErrorKind, StoredPosition,
    TopicPartition,
};

/// One row of the offsets table, as loaded.
struct OffsetRow {
    tp: TopicPartition,
    next_offset: i64,
    batch_id: i64,
    updated_at: String,
    leader_epoch: Option<i32>,
    topic_id: Option<String>,
}

/// The SQL dialect of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
}

impl Dialect {
    /// The `n`-th (1-based) bind placeholder: `$n` for PostgreSQL, `?` otherwise.
    pub fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}"),
            _ => "?".to_owned(),
        }
    }

    fn now(self) -> &'static str {
        match self {
            Dialect::Sqlite => "strftime('%Y-%m-%dT%H:%M:%fZ','now')",
            Dialect::Postgres => "now()",
            Dialect::MySql => "CURRENT_TIMESTAMP(3)",
        }
    }

    fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            _ => " FOR UPDATE",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A SQL offsets table as an [`OffsetStore`]. Its `Debug` shows the redacted URL only (the
/// pool's connect options hold the password).
#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
    group: String,
    table: String,
    /// The URL without its password, for messages.
    database: String,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("database", &self.database)
            .field("table", &self.table)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

/// Checks that `name` can be spliced into SQL as an identifier.
fn identifier(what: &'static str, name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(StoreErrorKind::Invalid {
            what,
            value: name.to_owned(),
            reason: "use letters, digits and '_' (not first), at most 63".to_owned(),
        }
        .into())
    }
}

impl SqlStore {
    /// A conditional `UPDATE` in a transaction (atomic), and that transaction is the user's too
    /// ([`SqlStore::begin`]).
    pub const CAPABILITIES: Capabilities =
        Capabilities::ATOMIC_COMMIT.union(Capabilities::TRANSACTIONAL);

    /// Connects to `url` (`sqlite:PATH`, `postgres://…`, `mysql://…`) for `group`, with the
    /// default table `kdirect_offsets`, creating it if missing.
    pub async fn connect(url: &str, group: &str) -> Result<SqlStore, StoreError> {
        Self::connect_with_table(url, group, "kdirect_offsets").await
    }

    /// Like [`SqlStore::connect`] with another offsets table.
    pub async fn connect_with_table(
        url: &str,
        group: &str,
        table: &str,
    ) -> Result<SqlStore, StoreError> {
        identifier("table name", table)?;
        let (pool, dialect, database) = open_pool(url, table).await?;
        let store = SqlStore {
            pool,
            dialect,
            group: group.to_owned(),
            table: table.to_owned(),
            database,
        };
        store.create_table().await?;
        Ok(store)
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The offsets table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The connection pool (for the user's own reads).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Whether the store's connections are encrypted, as the server reports it for one of
    /// them (PostgreSQL's `pg_stat_ssl`, MySQL's `Ssl_cipher`; always false for SQLite). With
    /// `sslmode=prefer` (PostgreSQL's default) or `ssl-mode=PREFERRED` (MySQL's), this is how
    /// to know whether the server offered TLS.
    pub async fn uses_tls(&self) -> Result<bool, StoreError> {
        let t = &self.table;
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(self.err(t, "ask whether the connection uses TLS"))?;
        connection_uses_tls(&mut conn, self.dialect)
            .await
            .map_err(self.err(t, "ask whether the connection uses TLS"))
    }

    fn err(
        &self,
        table: &str,
        context: impl Into<String>,
    ) -> impl FnOnce(sqlx::Error) -> StoreError {
        let database = self.database.clone();
        let table = table.to_owned();
        let context = context.into();
        move |source| {
            StoreErrorKind::Sql {
                database,
                table,
                context,
                source,
            }
            .into()
        }
    }

    /// Runs a `CREATE TABLE IF NOT EXISTS`, retrying once: concurrent creators can collide in
    /// PostgreSQL's catalog even with `IF NOT EXISTS`.
    async fn create(&self, table: &str, ddl: &str) -> Result<(), StoreError> {
        let mut last = None;
        for _ in 0..3 {
            match self.pool.execute(ddl).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
        Err(self.err(table, "create table")(
            last.expect("at least one attempt"),
        ))
    }

    async fn create_table(&self) -> Result<(), StoreError> {
        let t = &self.table;
        let ddl = match self.dialect {
            Dialect::Postgres => format!(
                "CREATE TABLE IF NOT EXISTS {t} (group_id TEXT NOT NULL, topic TEXT NOT NULL, \
                 partition_id INTEGER NOT NULL, next_offset BIGINT NOT NULL, batch_id BIGINT NOT NULL, \
                 updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), leader_epoch INTEGER, topic_id TEXT, \
                 PRIMARY KEY (group_id, topic, partition_id))"
            ),
            Dialect::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {t} (group_id VARCHAR(255) NOT NULL, topic VARCHAR(249) NOT NULL, \
                 partition_id INT NOT NULL, next_offset BIGINT NOT NULL, batch_id BIGINT NOT NULL, \
                 updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), \
                 leader_epoch INT NULL, topic_id CHAR(32) NULL, \
                 PRIMARY KEY (group_id, topic, partition_id)) ENGINE=InnoDB"
            ),
            Dialect::Sqlite => format!(
                "CREATE TABLE IF NOT EXISTS {t} (group_id TEXT NOT NULL, topic TEXT NOT NULL, \
                 partition_id INTEGER NOT NULL, next_offset INTEGER NOT NULL, batch_id INTEGER NOT NULL, \
                 updated_at TEXT NOT NULL, leader_epoch INTEGER, topic_id TEXT, \
                 PRIMARY KEY (group_id, topic, partition_id))"
            ),
        };
        self.create(t, &ddl).await?;
        self.add_columns().await
    }

    /// A table made before `leader_epoch` and `topic_id` existed gets them (nullable). Each
    /// `ADD COLUMN` may fail because a concurrent connect added it first; the final check
    /// says whether both are there.
    async fn add_columns(&self) -> Result<(), StoreError> {
        let t = &self.table;
        let check = format!("SELECT leader_epoch, topic_id FROM {t} WHERE 1 = 0");
        if self.pool.execute(check.as_str()).await.is_ok() {
            return Ok(());
        }
        let id_type = match self.dialect {
            Dialect::MySql => "CHAR(32) NULL",
            _ => "TEXT",
        };
        for (column, ty) in [("leader_epoch", "INTEGER"), ("topic_id", id_type)] {
            let _ = self
                .pool
                .execute(format!("ALTER TABLE {t} ADD COLUMN {column} {ty}").as_str())
                .await;
        }
        self.pool
            .execute(check.as_str())
            .await
            .map(|_| ())
            .map_err(self.err(t, "add the columns leader_epoch and topic_id"))
    }

    /// Creates the sink table `name` if missing and returns a handle for
    /// [`SqlTxn::insert_records`]. Columns: `topic`, `partition_id`, `record_offset`,
    /// `timestamp_ms`, `record_key`, `record_value`, with `(topic, partition_id,
    /// record_offset)` as the primary key — so a record stored twice would be an error, not a
    /// silent duplicate.
    pub async fn sink_table(&self, name: &str) -> Result<SinkTable, StoreError> {
        identifier("sink table name", name)?;
        let (text, int, big, blob) = match self.dialect {
            Dialect::Postgres => ("TEXT", "INTEGER", "BIGINT", "BYTEA"),
            Dialect::MySql => ("VARCHAR(249)", "INT", "BIGINT", "LONGBLOB"),
            Dialect::Sqlite => ("TEXT", "INTEGER", "INTEGER", "BLOB"),
        };
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {name} (topic {text} NOT NULL, partition_id {int} NOT NULL, \
             record_offset {big} NOT NULL, timestamp_ms {big} NOT NULL, record_key {blob}, record_value {blob}, \
             PRIMARY KEY (topic, partition_id, record_offset))"
        );
        self.create(name, &ddl).await?;
        Ok(SinkTable {
            name: name.to_owned(),
        })
    }

    /// Opens the transaction of `batch`: the offsets are compared-and-set first (rows stay
    /// locked until the transaction ends), then the user's writes go into the same
    /// transaction, then [`SqlTxn::commit`]. If the batch is already committed, nothing is
    /// left open and [`Begun::AlreadyCommitted`] says so: skip the user's writes.
    pub async fn begin(&self, batch: &PlannedBatch) -> Result<Begun, StoreError> {
        let t = &self.table;
        let d = self.dialect;
        let batch_id = batch_id_i64(batch.id)?;
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(self.err(t, "begin transaction"))?;
        // The epoch and the topic id: NULL keeps the stored one (a range that does not move its
        // partition, a topic whose id the stream did not know); -1 is an epoch not known.
        let update = format!(
            "UPDATE {t} SET next_offset = {}, batch_id = {}, updated_at = {}, \
             leader_epoch = COALESCE({}, leader_epoch), topic_id = COALESCE({}, topic_id) \
             WHERE group_id = {} AND topic = {} AND partition_id = {} AND next_offset = {}",
            d.placeholder(1),
            d.placeholder(2),
            d.now(),
            d.placeholder(3),
            d.placeholder(4),
            d.placeholder(5),
            d.placeholder(6),
            d.placeholder(7),
            d.placeholder(8)
        );
        let select = format!(
            "SELECT next_offset, batch_id FROM {t} WHERE group_id = {} AND topic = {} AND partition_id = {}{}",
            d.placeholder(1),
            d.placeholder(2),
            d.placeholder(3),
            d.for_update()
        );
        let insert = format!(
            "INSERT INTO {t} (group_id, topic, partition_id, next_offset, batch_id, updated_at, \
             leader_epoch, topic_id) VALUES ({}, {}, {}, {}, {}, {}, {}, {})",
            d.placeholder(1),
            d.placeholder(2),
            d.placeholder(3),
            d.placeholder(4),
            d.placeholder(5),
            d.now(),
            d.placeholder(6),
            d.placeholder(7)
        );
        // What each range found, for the one commit rule (`decide`) once all are written.
        let mut found: Vec<Option<StoredPosition>> = Vec::with_capacity(batch.ranges.len());
        for r in &batch.ranges {
            let ctx = || {
                format!(
                    "commit batch {} for group '{}' {}-{}",
                    batch.id, self.group, r.topic, r.partition
                )
            };
            let epoch = batch.epoch_to_store(r);
            let topic_id = batch.topic_id_hex(&r.topic);
            let updated = sqlx::query(&update)
                .bind(r.until)
                .bind(batch_id)
                .bind(epoch)
                .bind(topic_id.clone())
                .bind(&self.group)
                .bind(r.topic.as_str())
                .bind(r.partition)
                .bind(batch.expected_from(r))
                .execute(&mut *tx)
                .await
                .map_err(self.err(t, ctx()))?;
            if updated.rows_affected() > 0 {
                found.push(Some(StoredPosition {
                    position: batch.expected_from(r),
                    batch_id: None,
                }));
                continue;
            }
            let row: Option<AnyRow> = sqlx::query(&select)
                .bind(&self.group)
                .bind(r.topic.as_str())
                .bind(r.partition)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.err(t, ctx()))?;
            match row {
                None => {
                    let inserted = sqlx::query(&insert)
                        .bind(&self.group)
                        .bind(r.topic.as_str())
                        .bind(r.partition)
                        .bind(r.until)
                        .bind(batch_id)
                        .bind(epoch)
                        .bind(topic_id)
                        .execute(&mut *tx)
                        .await;
                    match inserted {
                        Ok(_) => found.push(None),
                        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                            // Another writer inserted the row first.
                            let _ = tx.rollback().await;
                            return Err(conflict(
                                &self.describe(),
                                r,
                                batch.expected_from(r),
                                None,
                            ));
                        }
                        Err(e) => return Err(self.err(t, ctx())(e)),
                    }
                }
                Some(row) => {
                    let stored: i64 = row.try_get(0).map_err(self.err(t, ctx()))?;
                    let stored_batch: i64 = row.try_get(1).map_err(self.err(t, ctx()))?;
                    if stored == r.until && stored_batch == batch_id {
                        found.push(Some(StoredPosition {
                            position: stored,
                            batch_id: Some(batch.id),
                        }));
                    } else {
                        let _ = tx.rollback().await;
                        return Err(conflict(
                            &self.describe(),
                            r,
                            batch.expected_from(r),
                            Some(stored),
                        ));
                    }
                }
            }
        }
        // Half committed (some ranges at their ends by this batch, others at their starts) is
        // a conflict: opening the transaction would run the batch's output again for the
        // partitions that had it.
        match decided(&self.describe(), batch, decide(batch, &found)) {
            Ok(true) => {}
            Ok(false) => {
                let _ = tx.rollback().await;
                return Ok(Begun::AlreadyCommitted);
            }
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        }
        Ok(Begun::Open(SqlTxn {
            tx,
            dialect: d,
            batch_id: batch.id,
            database: self.database.clone(),
            table: self.table.clone(),
        }))
    }

    /// Commits `batch` with the user's writes done by `write` inside the offsets' transaction:
    /// `write` gets the open transaction and hands it back to be committed (an error, or
    /// dropping it, rolls everything back). `write` is not called if the batch is already
    /// committed.
    pub async fn commit_with<F, Fut>(
        &self,
        batch: &PlannedBatch,
        write: F,
    ) -> Result<CommitOutcome, StoreError>
    where
        F: FnOnce(SqlTxn) -> Fut,
        Fut: std::future::Future<Output = Result<SqlTxn, StoreError>>,
    {
        match self.begin(batch).await? {
            Begun::AlreadyCommitted => Ok(CommitOutcome::AlreadyCommitted),
            Begun::Open(tx) => {
                write(tx).await?.commit().await?;
                Ok(CommitOutcome::Committed)
            }
        }
    }

    async fn load_rows(&self) -> Result<Vec<OffsetRow>, StoreError> {
        let t = &self.table;
        let updated = match self.dialect {
            Dialect::Postgres => "CAST(updated_at AS TEXT)",
            Dialect::MySql => "CAST(updated_at AS CHAR)",
            Dialect::Sqlite => "updated_at",
        };
        let sql = format!(
            "SELECT topic, partition_id, next_offset, batch_id, {updated}, leader_epoch, topic_id \
             FROM {t} WHERE group_id = {} ORDER BY topic, partition_id",
            self.dialect.placeholder(1)
        );
        let rows = sqlx::query(&sql)
            .bind(&self.group)
            .fetch_all(&self.pool)
            .await
            .map_err(self.err(t, format!("load group '{}'", self.group)))?;
        rows.iter()
            .map(|r| {
                Ok(OffsetRow {
                    tp: TopicPartition::new(r.try_get::<String, _>(0)?, r.try_get::<i32, _>(1)?),
                    next_offset: r.try_get(2)?,
                    batch_id: r.try_get(3)?,
                    updated_at: r.try_get(4)?,
                    leader_epoch: r.try_get(5)?,
                    topic_id: r.try_get(6)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(self.err(t, format!("load group '{}'", self.group)))
    }

    /// Every row of the group with its update time: (topic-partition, next offset, batch id,
    /// updated at), for `kdirect offsets show`.
    pub async fn rows(&self) -> Result<Vec<(TopicPartition, i64, i64, String)>, StoreError> {
        Ok(self
            .load_rows()
            .await?
            .into_iter()
            .map(|r| (r.tp, r.next_offset, r.batch_id, r.updated_at))
            .collect())
    }
}

/// The result of [`SqlStore::begin`].
#[derive(Debug)]
pub enum Begun {
    /// The offsets are written (not yet committed): add the user's writes, then commit.
    Open(SqlTxn),
    /// The batch is already committed with the same positions: nothing to do.
    AlreadyCommitted,
}

/// A sink table created by [`SqlStore::sink_table`].
#[derive(Debug, Clone)]
pub struct SinkTable {
    name: String,
}

impl SinkTable {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One record for the sink table.
#[derive(Debug, Clone, Copy)]
pub struct SinkRow<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp, ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// Key (`None`: null).
    pub key: Option<&'a [u8]>,
    /// Value (`None`: null).
    pub value: Option<&'a [u8]>,
}

/// A batch's open transaction: offsets written, waiting for the user's writes and
/// [`SqlTxn::commit`]. Dropping it rolls back.
#[derive(Debug)]
pub struct SqlTxn {
    tx: Transaction<'static, Any>,
    dialect: Dialect,
    batch_id: u64,
    database: String,
    table: String,
}

/// Rows per multi-row INSERT (6 binds each; below every database's bind limit).
const SINK_CHUNK: usize = 200;

impl SqlTxn {
    /// The connection inside the transaction, for the user's statements
    /// (`sqlx::query(…).execute(tx.conn())`).
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }

    /// The dialect (placeholders differ: [`Dialect::placeholder`]).
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The batch id.
    pub fn batch_id(&self) -> u64 {
        self.batch_id
    }

    /// Inserts records into `sink` inside this transaction. Returns the number inserted.
    pub async fn insert_records<'a>(
        &mut self,
        sink: &SinkTable,
        rows: impl IntoIterator<Item = SinkRow<'a>>,
    ) -> Result<u64, StoreError> {
        let mut rows = rows.into_iter().peekable();
        let mut n = 0u64;
        while rows.peek().is_some() {
            let chunk: Vec<SinkRow<'a>> = rows.by_ref().take(SINK_CHUNK).collect();
            let mut sql = format!(
                "INSERT INTO {} (topic, partition_id, record_offset, timestamp_ms, record_key, record_value) VALUES ",
                sink.name
            );
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push_str(", ");
                }
                let b = i * 6;
                sql.push('(');
                for j in 1..=6 {
                    if j > 1 {
                        sql.push_str(", ");
                    }
                    sql.push_str(&self.dialect.placeholder(b + j));
                }
                sql.push(')');
            }
            let mut q = sqlx::query(&sql);
            for r in &chunk {
                q = q
                    .bind(r.topic)
                    .bind(r.partition)
                    .bind(r.offset)
                    .bind(r.timestamp_ms)
                    .bind(r.key)
                    .bind(r.value);
            }
            let first = chunk[0];
            q.execute(&mut *self.tx).await.map_err(|source| {
                StoreError::from(StoreErrorKind::Sql {
                    database: self.database.clone(),
                    table: sink.name.clone(),
                    context: format!(
                        "insert batch {} records from {}-{} at offset {}",
                        self.batch_id, first.topic, first.partition, first.offset
                    ),
                    source,
                })
            })?;
            n += chunk.len() as u64;
        }
        Ok(n)
    }

    /// Commits the offsets and the user's writes together.
    pub async fn commit(self) -> Result<(), StoreError> {
        let SqlTxn {
            tx,
            batch_id,
            database,
            table,
            ..
        } = self;
        tx.commit().await.map_err(|source| {
            StoreErrorKind::Sql {
                database,
                table,
                context: format!("commit batch {batch_id}"),
                source,
            }
            .into()
        })
    }

    /// Rolls everything back.
    pub async fn rollback(self) {
        let _ = self.tx.rollback().await;
    }
}

impl OffsetStore for SqlStore {
    fn describe(&self) -> String {
        format!(
            "{} table {} (group '{}')",
            self.database, self.table, self.group
        )
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn as_sql(&self) -> Option<&SqlStore> {
        Some(self)
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        let mut c = Committed::default();
        // Each topic's id from its newest row that has one (a partition another member has not
        // committed since the topic was re-created may still hold the old one).
        let mut ids: std::collections::BTreeMap<String, (i64, [u8; 16])> = Default::default();
        for row in self.load_rows().await? {
            let b = row.batch_id;
            c.batch_id = Some(c.batch_id.map_or(b as u64, |x: u64| x.max(b as u64)));
            if let Some(e) = row.leader_epoch.filter(|e| *e >= 0) {
                c.epochs.insert(row.tp.clone(), e);
            }
            if let Some(hex) = &row.topic_id {
                let id = crate::unhex(hex).ok_or_else(|| -> StoreError {
                    StoreErrorKind::Invalid {
                        what: "stored topic id",
                        value: hex.clone(),
                        reason: format!(
                            "in {}, row {} (expected 32 hex digits)",
                            self.describe(),
                            row.tp
                        ),
                    }
                    .into()
                })?;
                let newest = ids.get(row.tp.topic.as_str()).is_none_or(|(at, _)| *at < b);
                if newest && id != [0; 16] {
                    ids.insert(row.tp.topic.to_string(), (b, id));
                }
            }
            c.positions.insert(row.tp, row.next_offset);
        }
        c.topic_ids = ids.into_iter().map(|(t, (_, id))| (t, id)).collect();
        c.retain_topics(topics);
        Ok(c)
    }

    async fn log_plan(&self, _batch: &PlannedBatch) -> Result<(), StoreError> {
        Ok(())
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        _ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        match self.begin(batch).await? {
            Begun::AlreadyCommitted => Ok(CommitOutcome::AlreadyCommitted),
            Begun::Open(tx) => {
                tx.commit().await?;
                Ok(CommitOutcome::Committed)
            }
        }
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        let t = &self.table;
        let d = self.dialect;
        let b = batch_id_i64(batch_id)?;
        // A position set by hand has no known epoch, and its topic no known id (it is set for
        // the topic as it is now); a partition set to where it already is keeps both.
        let values = format!(
            "({}, {}, {}, {}, {}, {}, NULL, NULL)",
            d.placeholder(1),
            d.placeholder(2),
            d.placeholder(3),
            d.placeholder(4),
            d.placeholder(5),
            d.now()
        );
        let columns = "(group_id, topic, partition_id, next_offset, batch_id, updated_at, leader_epoch, topic_id)";
        let upsert = match d {
            Dialect::MySql => format!(
                "INSERT INTO {t} {columns} VALUES {values} \
                 ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), batch_id = VALUES(batch_id), \
                 updated_at = VALUES(updated_at), leader_epoch = NULL, topic_id = NULL"
            ),
            _ => format!(
                "INSERT INTO {t} {columns} VALUES {values} \
                 ON CONFLICT (group_id, topic, partition_id) DO UPDATE SET next_offset = excluded.next_offset, \
                 batch_id = excluded.batch_id, updated_at = excluded.updated_at, leader_epoch = NULL, topic_id = NULL"
            ),
        };
        let same = format!(
            "UPDATE {t} SET batch_id = {}, updated_at = {} \
             WHERE group_id = {} AND topic = {} AND partition_id = {} AND next_offset = {}",
            d.placeholder(1),
            d.now(),
            d.placeholder(2),
            d.placeholder(3),
            d.placeholder(4),
            d.placeholder(5)
        );
        let forget_id = format!(
            "UPDATE {t} SET topic_id = NULL WHERE group_id = {} AND topic = {}",
            d.placeholder(1),
            d.placeholder(2)
        );
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(self.err(t, "begin transaction"))?;
        let mut moved = std::collections::BTreeSet::new();
        for (tp, &o) in positions {
            let ctx = || format!("set group '{}' {tp} to {o}", self.group);
            let kept = sqlx::query(&same)
                .bind(b)
                .bind(&self.group)
                .bind(tp.topic.as_str())
                .bind(tp.partition)
                .bind(o)
                .execute(&mut *tx)
                .await
                .map_err(self.err(t, ctx()))?;
            if kept.rows_affected() > 0 {
                continue;
            }
            sqlx::query(&upsert)
                .bind(&self.group)
                .bind(tp.topic.as_str())
                .bind(tp.partition)
                .bind(o)
                .bind(b)
                .execute(&mut *tx)
                .await
                .map_err(self.err(t, ctx()))?;
            moved.insert(tp.topic.as_str());
        }
        for topic in moved {
            sqlx::query(&forget_id)
                .bind(&self.group)
                .bind(topic)
                .execute(&mut *tx)
                .await
                .map_err(self.err(t, format!("set group '{}' topic {topic}", self.group)))?;
        }
        tx.commit().await.map_err(self.err(t, "commit transaction"))
    }
}

/// Connects a pool to `url` (`table` only names the errors): the dialect, the pool, and the URL
/// without its password.
async fn open_pool(url: &str, table: &str) -> Result<(AnyPool, Dialect, String), StoreError> {
    static DRIVERS: Once = Once::new();
    DRIVERS.call_once(sqlx::any::install_default_drivers);
    let database = redact(url);
    let (dialect, url) = if let Some(rest) = url.strip_prefix("sqlite:") {
        // Create the file if missing.
        let rest = rest.trim_start_matches("//");
        let sep = if rest.contains('?') { '&' } else { '?' };
        let url = if rest.contains("mode=") || rest == ":memory:" {
            format!("sqlite:{rest}")
        } else {
            format!("sqlite:{rest}{sep}mode=rwc")
        };
        (Dialect::Sqlite, url)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        (Dialect::Postgres, url.to_owned())
    } else if url.starts_with("mysql://") {
        (Dialect::MySql, url.to_owned())
    } else if let Some(rest) = url.strip_prefix("mariadb://") {
        (Dialect::MySql, format!("mysql://{rest}"))
    } else {
        return Err(StoreErrorKind::Spec {
            spec: database,
            reason: "expected sqlite:PATH, postgres://… or mysql://…".to_owned(),
        }
        .into());
    };
    let mut options =
        AnyPoolOptions::new().max_connections(if dialect == Dialect::Sqlite { 4 } else { 8 });
    if dialect == Dialect::Sqlite {
        options = options.after_connect(|conn, _| {
            Box::pin(async move {
                // WAL with synchronous=FULL: durable commits, readers never block the writer.
                conn.execute("PRAGMA journal_mode=WAL").await?;
                conn.execute("PRAGMA synchronous=FULL").await?;
                conn.execute("PRAGMA busy_timeout=10000").await?;
                Ok(())
            })
        });
    }
    if dialect != Dialect::Sqlite {
        // One direct connection first: a pool retries a refused or failed connection until
        // its acquire timeout (30 s) and then says only "pool timed out"; this reports the
        // cause at once (connection refused, unknown host, authentication failed).
        let first = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            <sqlx::AnyConnection as sqlx::Connection>::connect(&url),
        )
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)
        .and_then(|r| r)
        .map_err(|source| StoreErrorKind::Sql {
            database: database.clone(),
            table: table.to_owned(),
            context: "connect".to_owned(),
            source,
        })?;
        let mut first = first;
        if crate::transport::clear_text_warning(dialect.name(), &url, "").is_some()
            && !connection_uses_tls(&mut first, dialect)
                .await
                .unwrap_or_else(|_| requires_tls(&url))
        {
            crate::transport::warn_clear_text(
                dialect.name(),
                &url,
                match dialect {
                    Dialect::Postgres => {
                        "add ?sslmode=verify-full&sslrootcert=CA.pem (or sslmode=require) to the \
                         URL on a server with ssl=on"
                    }
                    _ => {
                        "add ?ssl-mode=VERIFY_IDENTITY&ssl-ca=CA.pem (or ssl-mode=REQUIRED) to \
                         the URL on a server with ssl_cert and ssl_key set"
                    }
                },
            );
        }
        let _ = sqlx::Connection::close(first).await;
    }
    let pool = options
        .connect(&url)
        .await
        .map_err(|source| StoreErrorKind::Sql {
            database: database.clone(),
            table: table.to_owned(),
            context: "connect".to_owned(),
            source,
        })?;
    Ok((pool, dialect, database))
}

/// Whether `conn` runs over TLS, as the server sees it: PostgreSQL's `pg_stat_ssl` for this
/// backend, MySQL's and MariaDB's session `Ssl_cipher` (empty in clear text). SQLite: false.
async fn connection_uses_tls(
    conn: &mut AnyConnection,
    dialect: Dialect,
) -> Result<bool, sqlx::Error> {
    match dialect {
        Dialect::Sqlite => Ok(false),
        Dialect::Postgres => {
            let row = sqlx::query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_optional(&mut *conn)
                .await?;
            row.map(|r| r.try_get::<bool, _>(0))
                .transpose()
                .map(|b| b.unwrap_or(false))
        }
        Dialect::MySql => {
            let row = sqlx::query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                .fetch_optional(&mut *conn)
                .await?;
            row.map(|r| r.try_get::<String, _>(1))
                .transpose()
                .map(|c| c.is_some_and(|c| !c.is_empty()))
        }
    }
}

/// Whether `url` refuses a connection without TLS (`sslmode=require|verify-ca|verify-full`,
/// `ssl-mode=REQUIRED|VERIFY_CA|VERIFY_IDENTITY`): what is known when the server cannot be
/// asked.
fn requires_tls(url: &str) -> bool {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    query.split('&').any(|kv| {
        kv.split_once('=').is_some_and(|(k, v)| {
            matches!(k, "sslmode" | "ssl-mode")
                && matches!(
                    v.to_ascii_lowercase().as_str(),
                    "require"
                        | "required"
                        | "verify-ca"
                        | "verify_ca"
                        | "verify-full"
                        | "verify_identity"
                )
        })
    })
}

impl Dialect {
    /// `name` quoted as an identifier (the articles' columns are `partition` and `offset`,
    /// reserved words in MySQL and PostgreSQL).
    fn quote(self, name: &str) -> String {
        match self {
            Dialect::MySql => format!("`{name}`"),
            _ => format!("\"{name}\""),
        }
    }

    /// `CAST(expr AS <64-bit integer>)`: offsets kept as INT, BIGINT or text all read as i64.
    fn as_bigint(self, expr: &str) -> String {
        match self {
            Dialect::MySql => format!("CAST({expr} AS SIGNED)"),
            Dialect::Postgres => format!("CAST({expr} AS BIGINT)"),
            Dialect::Sqlite => format!("CAST({expr} AS INTEGER)"),
        }
    }
}

/// Reads `topic`'s positions for `group` from a table another program keeps offsets in
/// (`kdirect offsets import`): the newest row per partition by the layout's timestamp column,
/// or the only one. Creates nothing.
pub async fn read_offsets_table(
    url: &str,
    layout: &crate::import::SqlLayout,
    topic: &str,
    group: &str,
) -> Result<Positions, StoreError> {
    identifier("table name", &layout.table)?;
    for c in [
        &layout.topic,
        &layout.group,
        &layout.partition,
        &layout.offset,
    ]
    .into_iter()
    .chain(layout.timestamp.as_ref())
    {
        identifier("column name", c)?;
    }
    let (pool, d, database) = open_pool(url, &layout.table).await?;
    let order = match &layout.timestamp {
        Some(ts) => format!(" ORDER BY {} DESC", d.quote(ts)),
        None => String::new(),
    };
    let sql = format!(
        "SELECT {}, {} FROM {} WHERE {} = {} AND {} = {}{order}",
        d.as_bigint(&d.quote(&layout.partition)),
        d.as_bigint(&d.quote(&layout.offset)),
        d.quote(&layout.table),
        d.quote(&layout.topic),
        d.placeholder(1),
        d.quote(&layout.group),
        d.placeholder(2),
    );
    let err = |source| -> StoreError {
        StoreErrorKind::Sql {
            database: database.clone(),
            table: layout.table.clone(),
            context: format!("reading topic {topic}'s offsets of group '{group}'"),
            source,
        }
        .into()
    };
    let rows: Vec<AnyRow> = sqlx::query(&sql)
        .bind(topic)
        .bind(group)
        .fetch_all(&pool)
        .await
        .map_err(err)?;
    let mut out = Positions::new();
    for row in rows {
        let p: i64 = row.try_get(0).map_err(err)?;
        let o: i64 = row.try_get(1).map_err(err)?;
        let bad = |what: String| -> StoreError {
            StoreErrorKind::Invalid {
                what: "imported offset",
                value: what,
                reason: format!("in {} table {}", database, layout.table),
            }
            .into()
        };
        let p = i32::try_from(p)
            .ok()
            .filter(|p| *p >= 0)
            .ok_or_else(|| bad(format!("{topic} partition {p}")))?;
        if o < 0 {
            return Err(bad(format!("{topic}-{p} offset {o}")));
        }
        let tp = TopicPartition::new(topic, p);
        if out.contains_key(&tp) {
            if layout.timestamp.is_none() {
                return Err(bad(format!(
                    "{topic}-{p} has several rows and no timestamp column orders them"
                )));
            }
            continue; // an older row: the newest came first
        }
        out.insert(tp, o);
    }
    pool.close().await;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a URL promises when the server cannot be asked whether the connection is
    /// encrypted: only the modes that refuse clear text count as TLS.
    #[test]
    fn only_modes_that_refuse_clear_text_count_as_tls() {
        for url in [
            "postgres://h/db?sslmode=require",
            "postgres://h/db?a=1&sslmode=verify-full&sslrootcert=/ca.pem",
            "mysql://h/db?ssl-mode=REQUIRED",
            "mysql://h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem",
            "mysql://h/db?sslmode=verify_ca",
        ] {
            assert!(requires_tls(url), "{url}");
        }
        for url in [
            "postgres://h/db",
            "postgres://h/db?sslmode=prefer",
            "postgres://h/db?sslmode=allow",
            "postgres://h/db?sslmode=disable",
            "mysql://h/db?ssl-mode=PREFERRED",
            "mysql://h/db?application_name=sslmode=require",
        ] {
            assert!(!requires_tls(url), "{url}");
        }
    }

    #[test]
    fn redacts_and_checks_names() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("mysql://root@h/db"), "mysql://root@h/db");
        assert!(identifier("t", "kdirect_offsets").is_ok());
        assert!(identifier("t", "x; DROP TABLE y").is_err());
        assert!(identifier("t", "1abc").is_err());
    }
}
