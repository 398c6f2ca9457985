//! SQL stores against SQLite (a temp file), PostgreSQL (`KDIRECT_TEST_POSTGRES`) and
//! MariaDB/MySQL (`KDIRECT_TEST_MYSQL`): the common behaviour, the transactional exactly-once
//! API with the sink table, and two writers racing on the same batch.
use kdirect_commit::sql::sqlx::{self, Row};
use kdirect_commit::sql::{Begun, SinkRow, SqlStore};
use kdirect_commit::{CommitContext, CommitOutcome, OffsetStore, StoreErrorKind};

use crate::common::{batch, exercise, keeps_epochs_and_ids, pos, two_writers};
use crate::support::{rt, service, tmpdir, unique};

async fn common(url: &str) {
    let group = unique("g");
    let (a, b) = two_writers(url, &group).await;
    assert!(a.as_sql().is_some());
    assert_eq!(a.capabilities(), SqlStore::CAPABILITIES);
    exercise(&a, &b, &unique("topic")).await;
    let group = unique("g");
    let a = SqlStore::connect(url, &group).await.unwrap();
    let b = SqlStore::connect(url, &group).await.unwrap();
    let topic = unique("topic");
    keeps_epochs_and_ids(&a, &b, &topic).await;
    // A position set by hand is set for the topic as it is now: its topic keeps no id (a
    // stream resumed from it must not take the topic for re-created).
    let c = b.load(std::slice::from_ref(&topic)).await.unwrap();
    assert!(c.topic_ids.is_empty(), "{c:?}");
    // The next batch that knows the id stores it again.
    let id = [0x42; 16];
    let next = batch(4, &topic, &[(0, 100, 101), (1, 4, 4), (2, 4, 4)])
        .with_topic_ids([(topic.clone(), id)].into());
    a.commit(&next, &CommitContext::STANDALONE).await.unwrap();
    let c = b.load(std::slice::from_ref(&topic)).await.unwrap();
    assert_eq!(c.topic_ids, [(topic.clone(), id)].into());
}

/// A table made by an earlier kdirect (no `leader_epoch`, no `topic_id`) gets both columns on
/// connect; its rows load with no epochs and no ids and the next commit stores them. A stored
/// id that is not 32 hex digits is refused by name.
async fn migrates_an_old_table(url: &str) {
    let table = unique("old_offsets");
    let group = unique("g");
    let topic = unique("topic");
    let now = if url.starts_with("sqlite:") {
        "'2026-01-01T00:00:00Z'"
    } else {
        "CURRENT_TIMESTAMP"
    };
    {
        let store = SqlStore::connect(url, "setup").await.unwrap();
        let ddl = format!(
            "CREATE TABLE {table} (group_id VARCHAR(255) NOT NULL, topic VARCHAR(249) NOT NULL, \
             partition_id INTEGER NOT NULL, next_offset BIGINT NOT NULL, batch_id BIGINT NOT NULL, \
             updated_at {} NOT NULL, PRIMARY KEY (group_id, topic, partition_id))",
            if url.starts_with("postgres") {
                "TIMESTAMPTZ"
            } else if url.starts_with("sqlite:") {
                "TEXT"
            } else {
                "TIMESTAMP(3)"
            }
        );
        sqlx::query(&ddl).execute(store.pool()).await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {table} (group_id, topic, partition_id, next_offset, batch_id, updated_at) \
             VALUES ('{group}', '{topic}', 0, 10, 3, {now})"
        ))
        .execute(store.pool())
        .await
        .unwrap();
    }
    let s = SqlStore::connect_with_table(url, &group, &table)
        .await
        .unwrap();
    let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
    assert_eq!(c.positions, pos(&topic, &[(0, 10)]));
    assert!(c.epochs.is_empty() && c.topic_ids.is_empty(), "{c:?}");
    let tp = kdirect_commit::TopicPartition::new(&topic, 0);
    let b4 = batch(4, &topic, &[(0, 10, 12)])
        .with_epochs([(tp.clone(), 2)].into())
        .with_topic_ids([(topic.clone(), [1; 16])].into());
    assert_eq!(
        s.commit(&b4, &CommitContext::STANDALONE).await.unwrap(),
        CommitOutcome::Committed
    );
    let c = SqlStore::connect_with_table(url, &group, &table)
        .await
        .unwrap()
        .load(std::slice::from_ref(&topic))
        .await
        .unwrap();
    assert_eq!(c.epochs, [(tp, 2)].into());
    assert_eq!(c.topic_ids, [(topic.clone(), [1; 16])].into());
    // Edited by hand into something that is not an id: named, not ignored.
    sqlx::query(&format!(
        "UPDATE {table} SET topic_id = 'not-an-id' WHERE group_id = '{group}'"
    ))
    .execute(s.pool())
    .await
    .unwrap();
    let e = s.load(std::slice::from_ref(&topic)).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("not-an-id") && text.contains(&table) && text.contains(&format!("{topic}-0")),
        "{text}"
    );
}

async fn count(store: &SqlStore, table: &str) -> i64 {
    let row = sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(store.pool())
        .await
        .unwrap();
    row.try_get::<i64, _>(0).unwrap()
}

/// Records and offsets in one transaction: a conflict writes neither; an already committed
/// batch skips the user's writes; a re-run after a rollback stores each record once.
async fn transactional(url: &str) {
    let group = unique("g");
    let topic = unique("t");
    let table = unique("sink");
    let store = SqlStore::connect(url, &group).await.unwrap();
    let sink = store.sink_table(&table).await.unwrap();
    let keys: Vec<Vec<u8>> = (0..500).map(|i| format!("k{i}").into_bytes()).collect();
    let rows = |from: i64, until: i64| -> Vec<SinkRow<'_>> {
        (from..until)
            .map(|o| SinkRow {
                topic: &topic,
                partition: 0,
                offset: o,
                timestamp_ms: 1_700_000_000_000 + o,
                key: if o % 7 == 0 {
                    None
                } else {
                    Some(&keys[o as usize])
                },
                value: Some(b"value"),
            })
            .collect()
    };

    // PlannedBatch 0: a crash before commit (the transaction is dropped): nothing stored.
    let b0 = batch(0, &topic, &[(0, 0, 300)]);
    match store.begin(&b0).await.unwrap() {
        Begun::Open(mut tx) => {
            tx.insert_records(&sink, rows(0, 300)).await.unwrap();
            drop(tx);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(count(&store, &table).await, 0);
    assert!(store.load(&[]).await.unwrap().positions.is_empty());

    // The re-run commits records and offsets together.
    match store.begin(&b0).await.unwrap() {
        Begun::Open(mut tx) => {
            assert_eq!(tx.insert_records(&sink, rows(0, 300)).await.unwrap(), 300);
            // The user's own statement in the same transaction.
            let sql = format!(
                "UPDATE {table} SET record_value = {} WHERE record_offset = {}",
                tx.dialect().placeholder(1),
                tx.dialect().placeholder(2)
            );
            sqlx::query(&sql)
                .bind(b"first".to_vec())
                .bind(0_i64)
                .execute(tx.conn())
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(count(&store, &table).await, 300);
    // Committed already: the user's writes are skipped.
    assert!(matches!(
        store.begin(&b0).await.unwrap(),
        Begun::AlreadyCommitted
    ));
    let out = store
        .commit_with(&b0, |_tx| async { panic!("must not run") })
        .await
        .unwrap();
    assert_eq!(out, CommitOutcome::AlreadyCommitted);

    // A zombie's batch 1 from a stale position: conflict, and its records are not stored.
    let stale = batch(1, &topic, &[(0, 100, 400)]);
    let e = store.begin(&stale).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let e = store
        .commit_with(&stale, |_tx| async { panic!("must not run") })
        .await
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");

    let b1 = batch(1, &topic, &[(0, 300, 500)]);
    let out = store
        .commit_with(&b1, |mut tx| async {
            tx.insert_records(&sink, rows(300, 500)).await?;
            Ok(tx)
        })
        .await
        .unwrap();
    assert_eq!(out, CommitOutcome::Committed);
    assert_eq!(count(&store, &table).await, 500);
    let c = store.load(std::slice::from_ref(&topic)).await.unwrap();
    assert_eq!(c.positions, pos(&topic, &[(0, 500)]));
    assert_eq!(c.batch_id, Some(1));
    // Every offset exactly once, nulls kept.
    let row = sqlx::query(&format!(
        "SELECT COUNT(DISTINCT record_offset), MIN(record_offset), MAX(record_offset), \
         COUNT(record_key) FROM {table}"
    ))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(row.try_get::<i64, _>(0).unwrap(), 500);
    assert_eq!(row.try_get::<i64, _>(1).unwrap(), 0);
    assert_eq!(row.try_get::<i64, _>(2).unwrap(), 499);
    assert_eq!(
        row.try_get::<i64, _>(3).unwrap(),
        500 - 72,
        "null keys stay null"
    );
    let _ = sqlx::query(&format!("DROP TABLE {table}"))
        .execute(store.pool())
        .await;
}

/// Two writers begin the same batch at once: exactly one commits, the other gets a conflict
/// (its rows lock waits for the first's transaction).
async fn race(url: &str) {
    let group = unique("g");
    let topic = unique("t");
    let a = SqlStore::connect(url, &group).await.unwrap();
    let b = SqlStore::connect(url, &group).await.unwrap();
    a.commit(&batch(0, &topic, &[(0, 0, 10)]), &CommitContext::STANDALONE)
        .await
        .unwrap();
    let b1 = batch(1, &topic, &[(0, 10, 20)]);
    let b1_other = batch(1, &topic, &[(0, 10, 15)]);
    let (ra, rb) = tokio::join!(
        a.commit(&b1, &CommitContext::STANDALONE),
        b.commit(&b1_other, &CommitContext::STANDALONE)
    );
    let oks = [ra.is_ok(), rb.is_ok()].iter().filter(|x| **x).count();
    assert_eq!(oks, 1, "exactly one writer wins: {ra:?} {rb:?}");
    for r in [ra, rb] {
        if let Err(e) = r {
            assert!(matches!(e.kind(), StoreErrorKind::Conflict { .. }), "{e}");
        }
    }
}

/// A batch found half committed — one partition at its end by this very batch, the other
/// still at its start — is a conflict, not a transaction opened for the rest: that would run
/// the batch's output (the user's writes in the transaction) again for the partition that had
/// it (issue 33: the SQL store opened one).
async fn half_committed(url: &str) {
    let group = unique("g");
    let topic = unique("t");
    let store = SqlStore::connect(url, &group).await.unwrap();
    // Batch 4 moved t-0 to 10; t-1 is where batch 3 left it.
    store
        .set_positions(4, &pos(&topic, &[(0, 10)]))
        .await
        .unwrap();
    store
        .set_positions(3, &pos(&topic, &[(1, 0)]))
        .await
        .unwrap();
    let b4 = batch(4, &topic, &[(0, 0, 10), (1, 0, 10)]);
    match store.begin(&b4).await {
        Err(e) if matches!(e.kind(), StoreErrorKind::Conflict { .. }) => {}
        other => panic!("a half-committed batch must be a conflict, got {other:?}"),
    }
    // Nothing moved.
    let loaded = store.load(&[]).await.unwrap().positions;
    assert_eq!(loaded, pos(&topic, &[(0, 10), (1, 0)]));
}

#[test]
fn sqlite_store() {
    let dir = tmpdir("sqlite");
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite:{}", dir.join("offsets.db").display());
    rt().block_on(async {
        common(&url).await;
        migrates_an_old_table(&url).await;
        transactional(&url).await;
        race(&url).await;
        half_committed(&url).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_store() {
    let Some(url) = service("KDIRECT_TEST_POSTGRES", "postgres_store") else {
        return;
    };
    rt().block_on(async {
        common(&url).await;
        migrates_an_old_table(&url).await;
        transactional(&url).await;
        race(&url).await;
        half_committed(&url).await;
    });
}

#[test]
fn mysql_store() {
    let Some(url) = service("KDIRECT_TEST_MYSQL", "mysql_store") else {
        return;
    };
    rt().block_on(async {
        common(&url).await;
        migrates_an_old_table(&url).await;
        transactional(&url).await;
        race(&url).await;
        half_committed(&url).await;
    });
}

/// SQLite commits are durable: WAL with synchronous=FULL on every pooled connection.
#[test]
fn sqlite_is_durable() {
    let dir = tmpdir("sqlite-durable");
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite:{}", dir.join("offsets.db").display());
    rt().block_on(async {
        let store = SqlStore::connect(&url, "g").await.unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        let sync: i64 = sqlx::query("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        let journal: String = sqlx::query("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        assert_eq!(
            (sync, journal.as_str()),
            (2, "wal"),
            "synchronous=FULL, WAL"
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// `url` with `params` added to its query.
fn with_params(url: &str, params: &str) -> String {
    format!("{url}{}{params}", if url.contains('?') { '&' } else { '?' })
}

/// The password in `url`'s user-info, as it must never be shown (`:password@`).
fn shown_password(url: &str) -> String {
    let userinfo = url.split_once("://").unwrap().1.rsplit_once('@').unwrap().0;
    format!(":{}@", userinfo.split_once(':').unwrap().1)
}

/// A SQL store over TLS, against the real server with the test certificate (tests/services.sh):
/// each mode in `tls_modes` connects encrypted (as the server reports it) and passes the
/// conformance suite and the exactly-once API; `clear` connects in clear text; each of
/// `refused` (a mode that checks the certificate without the test CA, which the system's
/// store does not hold) fails with its cause and without the password. Before sqlx had TLS,
/// every TLS mode failed with "TLS upgrade required by connect options but SQLx was built
/// without TLS support".
async fn over_tls(url: &str, tls_modes: &[String], clear: &str, refused: &str) {
    for mode in tls_modes {
        let u = with_params(url, mode);
        let store = SqlStore::connect(&u, &unique("g"))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(store.uses_tls().await.unwrap(), "{mode}: not encrypted");
    }
    let tls = with_params(url, tls_modes.last().unwrap());
    common(&tls).await;
    transactional(&tls).await;
    // The certificate's DNS name as well as its IP address.
    let by_name = tls.replacen("@127.0.0.1:", "@localhost:", 1);
    let store = SqlStore::connect(&by_name, &unique("g")).await.unwrap();
    assert!(store.uses_tls().await.unwrap());

    let store = SqlStore::connect(&with_params(url, clear), &unique("g"))
        .await
        .unwrap();
    assert!(!store.uses_tls().await.unwrap(), "{clear}: encrypted");

    let e = SqlStore::connect(&with_params(url, refused), &unique("g"))
        .await
        .unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains(&shown_password(url)), "{shown}");
    assert!(
        shown.contains("UnknownIssuer") || shown.contains("certificate"),
        "{refused}: {shown}"
    );
}

#[test]
fn postgres_store_over_tls() {
    let (Some(url), Some(ca)) = (
        service("KDIRECT_TEST_POSTGRES", "postgres_store_over_tls"),
        service("KDIRECT_TEST_TLS_CA", "postgres_store_over_tls"),
    ) else {
        return;
    };
    rt().block_on(over_tls(
        &url,
        &[
            "sslmode=require".to_owned(),
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            format!("sslmode=verify-full&sslrootcert={ca}"),
        ],
        "sslmode=disable",
        "sslmode=verify-full",
    ));
}

#[test]
fn mysql_store_over_tls() {
    let (Some(url), Some(ca)) = (
        service("KDIRECT_TEST_MYSQL", "mysql_store_over_tls"),
        service("KDIRECT_TEST_TLS_CA", "mysql_store_over_tls"),
    ) else {
        return;
    };
    rt().block_on(over_tls(
        &url,
        &[
            "ssl-mode=REQUIRED".to_owned(),
            format!("ssl-mode=VERIFY_CA&ssl-ca={ca}"),
            format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        ],
        "ssl-mode=DISABLED",
        "ssl-mode=VERIFY_IDENTITY",
    ));
}
