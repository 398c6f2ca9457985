//! The Redis store: a hash per group and topic, field = partition, value = next offset.
//!
//! ```text
//! kdirect:<group>:offsets:<topic>   hash   "<partition>" → "<next offset>"
//! kdirect:<group>:epochs:<topic>    hash   "<partition>" → "<leader epoch>" (KIP-320)
//! kdirect:<group>:topic_ids         hash   "<topic>" → "<topic id, 32 hex digits>" (KIP-516)
//! kdirect:<group>:meta              hash   batch_id, updated_ms
//! kdirect:<group>:topics            set    the topics with offsets
//! ```
//!
//! The epoch of the last record batch read before each position and the id of each topic let
//! a stream resumed from the store find a log truncated or a topic re-created while it was
//! down, as from a checkpoint. A partition a commit moves takes the batch's epoch (none when
//! the batch does not know it); a topic id the batch does not know keeps the stored one; a
//! position set by hand has neither.
//!
//! A commit is one Lua script, which Redis runs atomically: every range's stored position must
//! be its `from` (or absent), else nothing is written and the commit is a
//! [`StoreErrorKind::Conflict`]; positions already at `until` with the same batch id are an
//! earlier commit of the same batch ([`CommitOutcome::AlreadyCommitted`]).
//!
//! Durability is Redis's: with `appendonly no` (the default) a Redis crash loses recent
//! commits; run with `appendonly yes` and `appendfsync always` for offsets that survive one.
//! The guarantee is at-least-once: results written elsewhere are not in the offsets' atomic
//! step. This store logs no plans.

use std::collections::HashMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};

use crate::{
    redact, Capabilities, CommitContext, CommitOutcome, Committed, OffsetStore, PlannedBatch,
    Positions, StoreError, StoreErrorKind, TopicPartition,
};

const COMMIT_SCRIPT: &str = r#"
-- KEYS[1] meta hash, KEYS[2] topics set, KEYS[3] topic ids hash, then per range i the topic's
-- offsets hash KEYS[2 + 2i] and epochs hash KEYS[3 + 2i].
-- ARGV[1] batch id, ARGV[2] now (ms), then per range: topic, partition, the position the
-- store must hold (its from, or the position it moves back from), until, the epoch to store
-- ('' keeps the stored one, '-1' removes it), the topic's id ('' keeps the stored one).
local batch = ARGV[1]
local per = 6
local n = (#ARGV - 2) / per
-- The one commit rule, as kdirect_commit::decide says it (a test runs both on the same cases):
-- a range finds its position at `from` or nothing (it writes), or, moving its partition, at
-- its end with this batch's id (committed already); anything else is a conflict, and so is a
-- batch some of whose ranges are committed already and others not (half committed).
local already = 0
local moving = 0
local first_write = nil
local first_cur = ''
local stored_batch = redis.call('HGET', KEYS[1], 'batch_id')
for i = 1, n do
  local a = 2 + (i - 1) * per
  local from = ARGV[a + 3]
  local untl = ARGV[a + 4]
  local moves = from ~= untl
  if moves then moving = moving + 1 end
  local cur = redis.call('HGET', KEYS[2 + 2 * i], ARGV[a + 2])
  if cur == false or cur == from then
    if moves and first_write == nil then
      first_write = i
      if cur ~= false then first_cur = cur end
    end
  elseif moves and cur == untl and stored_batch == batch then
    already = already + 1
  else
    return {'conflict', tostring(i), cur}
  end
end
if moving > 0 and already == moving then return {'already'} end
if already > 0 and first_write ~= nil then
  return {'conflict', tostring(first_write), first_cur}
end
for i = 1, n do
  local a = 2 + (i - 1) * per
  redis.call('HSET', KEYS[2 + 2 * i], ARGV[a + 2], ARGV[a + 4])
  redis.call('SADD', KEYS[2], ARGV[a + 1])
  local epoch = ARGV[a + 5]
  if epoch == '-1' then
    redis.call('HDEL', KEYS[3 + 2 * i], ARGV[a + 2])
  elseif epoch ~= '' then
    redis.call('HSET', KEYS[3 + 2 * i], ARGV[a + 2], epoch)
  end
  if ARGV[a + 6] ~= '' then
    redis.call('HSET', KEYS[3], ARGV[a + 1], ARGV[a + 6])
  end
end
redis.call('HSET', KEYS[1], 'batch_id', batch, 'updated_ms', ARGV[2])
return {'ok'}
"#;

/// Redis as an [`OffsetStore`].
#[derive(Clone)]
pub struct RedisStore {
    conn: MultiplexedConnection,
    group: String,
    server: String,
    script: Script,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.server)
            .field("group", &self.group)
            .finish()
    }
}

/// The TLS files named in `url`'s query (`cacert`, `cert`, `key`), read: `None` for
/// `redis://`, which takes none of them.
fn tls_files(url: &str) -> Result<Option<redis::TlsCertificates>, StoreError> {
    let spec_error = |reason: String| -> StoreError {
        StoreErrorKind::Spec {
            spec: redact(url),
            reason,
        }
        .into()
    };
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split('#').next().unwrap_or("");
    let (mut cacert, mut cert, mut key) = (None, None, None);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let slot = match k {
            "cacert" => &mut cacert,
            "cert" => &mut cert,
            "key" => &mut key,
            _ => continue,
        };
        if v.is_empty() {
            return Err(spec_error(format!("{k}= needs a file path")));
        }
        *slot = Some((k, v));
    }
    if !url.starts_with("rediss://") {
        if let Some((k, _)) = cacert.or(cert).or(key) {
            return Err(spec_error(format!(
                "{k}= is a TLS setting: use rediss:// for a TLS connection"
            )));
        }
        return Ok(None);
    }
    let read = |(k, path): (&str, &str)| -> Result<Vec<u8>, StoreError> {
        let bytes = std::fs::read(path)
            .map_err(|e| spec_error(format!("cannot read {k} file '{path}': {e}")))?;
        let label = if k == "key" {
            "PRIVATE KEY-----"
        } else {
            "-----BEGIN CERTIFICATE-----"
        };
        if !bytes.windows(label.len()).any(|w| w == label.as_bytes()) {
            return Err(spec_error(format!(
                "{k} file '{path}' holds no PEM {}",
                if k == "key" {
                    "private key"
                } else {
                    "certificate (-----BEGIN CERTIFICATE-----)"
                }
            )));
        }
        Ok(bytes)
    };
    let client_tls = match (cert, key) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read(c)?,
            client_key: read(k)?,
        }),
        (None, None) => None,
        _ => return Err(spec_error("cert= and key= go together".to_owned())),
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert: cacert.map(read).transpose()?,
    }))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl RedisStore {
    /// One Lua script (atomic); no plan log.
    pub const CAPABILITIES: Capabilities = Capabilities::ATOMIC_COMMIT;

    /// Connects to `url` for `group`: `redis://host:port/db` in clear text, or
    /// `rediss://host:port/db` over TLS (rustls), checked against the system's CA store or,
    /// with `?cacert=PATH`, against the CA certificates in that PEM file only; `cert=PATH` and
    /// `key=PATH` (PEM) add a client certificate for a server that asks for one
    /// (`tls-auth-clients`). The parameters are redis-cli's `--cacert`, `--cert` and `--key`.
    pub async fn connect(url: &str, group: &str) -> Result<RedisStore, StoreError> {
        let server = redact(url);
        let err = |source| -> StoreError {
            StoreErrorKind::Redis {
                server: server.clone(),
                key: format!("kdirect:{group}:*"),
                source,
            }
            .into()
        };
        let tls = tls_files(url)?;
        let client = match tls {
            None => {
                crate::transport::warn_clear_text(
                    "redis",
                    url,
                    "use rediss://HOST:PORT/DB (with ?cacert=PATH for a private CA) on a server \
                     with tls-port",
                );
                redis::Client::open(url).map_err(err)?
            }
            Some(certs) => redis::Client::build_with_tls(url, certs).map_err(err)?,
        };
        // redis-rs defaults to a 1 s connect and a 500 ms response timeout: a commit on a busy
        // server (appendfsync always under load) outlasts that, and a timed-out commit is
        // ambiguous. The Kafka client's defaults instead: 10 s to connect, 30 s an answer.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_secs(10)))
            .set_response_timeout(Some(std::time::Duration::from_secs(30)));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(err)?;
        Ok(RedisStore {
            conn,
            group: group.to_owned(),
            server,
            script: Script::new(COMMIT_SCRIPT),
        })
    }

    /// The hash of `topic`'s offsets.
    pub fn topic_key(&self, topic: &str) -> String {
        format!("kdirect:{}:offsets:{topic}", self.group)
    }

    fn epochs_key(&self, topic: &str) -> String {
        format!("kdirect:{}:epochs:{topic}", self.group)
    }

    fn topic_ids_key(&self) -> String {
        format!("kdirect:{}:topic_ids", self.group)
    }

    fn meta_key(&self) -> String {
        format!("kdirect:{}:meta", self.group)
    }

    fn topics_key(&self) -> String {
        format!("kdirect:{}:topics", self.group)
    }

    fn err(&self, key: &str) -> impl FnOnce(redis::RedisError) -> StoreError {
        let server = self.server.clone();
        let key = key.to_owned();
        move |source| {
            StoreErrorKind::Redis {
                server,
                key,
                source,
            }
            .into()
        }
    }

    fn corrupt(&self, key: &str, what: String) -> StoreError {
        StoreErrorKind::Redis {
            server: self.server.clone(),
            key: key.to_owned(),
            source: redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected value",
                what,
            )),
        }
        .into()
    }
}

impl OffsetStore for RedisStore {
    fn describe(&self) -> String {
        format!("redis {} group '{}'", self.server, self.group)
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        let mut conn = self.conn.clone();
        let known: Vec<String> = conn
            .smembers(self.topics_key())
            .await
            .map_err(self.err(&self.topics_key()))?;
        let mut c = Committed::default();
        for topic in known {
            if !topics.is_empty() && !topics.contains(&topic) {
                continue;
            }
            let key = self.topic_key(&topic);
            let fields: HashMap<String, String> =
                conn.hgetall(&key).await.map_err(self.err(&key))?;
            for (p, o) in fields {
                let p: i32 = p
                    .parse()
                    .map_err(|_| self.corrupt(&key, format!("field '{p}' is not a partition")))?;
                let o: i64 = o.parse().map_err(|_| {
                    self.corrupt(&key, format!("partition {p}: '{o}' is not an offset"))
                })?;
                c.positions.insert(TopicPartition::new(topic.clone(), p), o);
            }
            let key = self.epochs_key(&topic);
            let fields: HashMap<String, String> =
                conn.hgetall(&key).await.map_err(self.err(&key))?;
            for (p, e) in fields {
                let p: i32 = p
                    .parse()
                    .map_err(|_| self.corrupt(&key, format!("field '{p}' is not a partition")))?;
                let e: i32 = e.parse().map_err(|_| {
                    self.corrupt(&key, format!("partition {p}: '{e}' is not a leader epoch"))
                })?;
                let tp = TopicPartition::new(topic.clone(), p);
                if e >= 0 && c.positions.contains_key(&tp) {
                    c.epochs.insert(tp, e);
                }
            }
        }
        let key = self.topic_ids_key();
        let ids: HashMap<String, String> = conn.hgetall(&key).await.map_err(self.err(&key))?;
        for (topic, hex) in ids {
            let id = crate::unhex(&hex).ok_or_else(|| {
                self.corrupt(
                    &key,
                    format!("topic {topic}: '{hex}' is not a topic id (32 hex digits)"),
                )
            })?;
            if id != [0; 16] && c.positions.keys().any(|tp| tp.topic == topic) {
                c.topic_ids.insert(topic, id);
            }
        }
        let meta = self.meta_key();
        let batch: Option<String> = conn
            .hget(&meta, "batch_id")
            .await
            .map_err(self.err(&meta))?;
        c.batch_id = match batch {
            Some(b) => Some(
                b.parse()
                    .map_err(|_| self.corrupt(&meta, format!("batch_id '{b}' is not a number")))?,
            ),
            None => None,
        };
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
        let mut inv = self.script.prepare_invoke();
        inv.key(self.meta_key())
            .key(self.topics_key())
            .key(self.topic_ids_key());
        for r in &batch.ranges {
            inv.key(self.topic_key(&r.topic))
                .key(self.epochs_key(&r.topic));
        }
        inv.arg(batch.id).arg(now_ms());
        for r in &batch.ranges {
            // '' keeps the stored epoch (a partition the batch does not move), '-1' drops it.
            let epoch = batch
                .epoch_to_store(r)
                .map(|e| e.to_string())
                .unwrap_or_default();
            let topic_id = batch.topic_id_hex(&r.topic).unwrap_or_default();
            inv.arg(r.topic.as_str())
                .arg(r.partition)
                .arg(batch.expected_from(r))
                .arg(r.until)
                .arg(epoch)
                .arg(topic_id);
        }
        let mut conn = self.conn.clone();
        let out: Vec<String> = inv
            .invoke_async(&mut conn)
            .await
            .map_err(self.err(&format!("kdirect:{}:*", self.group)))?;
        match read_answer(&out, batch) {
            Answer::Committed => Ok(CommitOutcome::Committed),
            Answer::Already => Ok(CommitOutcome::AlreadyCommitted),
            Answer::Conflict(r, stored) => Err(crate::conflict(
                &format!("{} key {}", self.describe(), self.topic_key(&r.topic)),
                r,
                batch.expected_from(r),
                stored,
            )),
            Answer::Unknown => Err(self.corrupt(
                &self.meta_key(),
                format!("the commit script answered {out:?}"),
            )),
        }
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        // A position set by hand has no known epoch, and its topic no known id (it is set for
        // the topic as it is now).
        for (tp, o) in positions {
            pipe.hset(self.topic_key(&tp.topic), tp.partition, *o)
                .ignore();
            pipe.hdel(self.epochs_key(&tp.topic), tp.partition).ignore();
            pipe.hdel(self.topic_ids_key(), tp.topic.as_str()).ignore();
            pipe.sadd(self.topics_key(), tp.topic.as_str()).ignore();
        }
        pipe.hset(self.meta_key(), "batch_id", batch_id).ignore();
        pipe.hset(self.meta_key(), "updated_ms", now_ms()).ignore();
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(self.err(&format!("kdirect:{}:*", self.group)))
    }
}

/// What the commit script answered.
#[derive(Debug, PartialEq)]
enum Answer<'a> {
    Committed,
    Already,
    /// The batch's range the script found moved (1-based in the reply), and what it found.
    Conflict(&'a crate::OffsetRange, Option<i64>),
    /// Anything else, including a conflict naming no range of the batch: a reply the script
    /// does not give (another script under its name, or a proxy in the way).
    Unknown,
}

fn read_answer<'a>(out: &[String], batch: &'a PlannedBatch) -> Answer<'a> {
    match out.first().map(String::as_str) {
        Some("ok") => Answer::Committed,
        Some("already") => Answer::Already,
        Some("conflict") => {
            let range = out
                .get(1)
                .and_then(|s| s.parse::<usize>().ok())
                .and_then(|i| batch.ranges.get(i.checked_sub(1)?));
            match range {
                Some(r) => Answer::Conflict(r, out.get(2).and_then(|s| s.parse().ok())),
                None => Answer::Unknown,
            }
        }
        _ => Answer::Unknown,
    }
}

/// Reads a hash of `partition → next offset` (the layout the Spark articles keep a DStream's
/// offsets in, `offset:<topic>:<group>`), for `kdirect offsets import`.
pub async fn read_hash(url: &str, key: &str, topic: &str) -> Result<Positions, StoreError> {
    let store = RedisStore::connect(url, "import").await?;
    let mut conn = store.conn.clone();
    let fields: HashMap<String, String> = conn.hgetall(key).await.map_err(store.err(key))?;
    let mut out = Positions::new();
    for (p, o) in fields {
        let p: i32 = p
            .trim()
            .parse()
            .ok()
            .filter(|p| *p >= 0)
            .ok_or_else(|| store.corrupt(key, format!("field '{p}' is not a partition")))?;
        let o: i64 =
            o.trim().parse().ok().filter(|o| *o >= 0).ok_or_else(|| {
                store.corrupt(key, format!("partition {p}: '{o}' is not an offset"))
            })?;
        out.insert(TopicPartition::new(topic, p), o);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OffsetRange;

    /// `rediss://`'s TLS files: each read and checked before any connection, every mistake a
    /// typed spec error that names the parameter and the file and never the password.
    #[tokio::test]
    async fn tls_settings_are_checked_before_connecting() {
        let dir = std::env::temp_dir().join(format!("kdirect-redis-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let missing = dir.join("missing.pem");
        let cases = [
            (
                format!(
                    "redis://:S3CRETPW@127.0.0.1:1/?cacert={}",
                    not_pem.display()
                ),
                "use rediss://",
            ),
            (
                format!(
                    "rediss://:S3CRETPW@127.0.0.1:1/?cacert={}",
                    missing.display()
                ),
                "cannot read cacert file",
            ),
            (
                format!(
                    "rediss://:S3CRETPW@127.0.0.1:1/?cacert={}",
                    not_pem.display()
                ),
                "holds no PEM certificate",
            ),
            (
                format!("rediss://:S3CRETPW@127.0.0.1:1/?cert={}", not_pem.display()),
                "cert= and key= go together",
            ),
            (
                "rediss://:S3CRETPW@127.0.0.1:1/?cacert=".to_owned(),
                "cacert= needs a file path",
            ),
        ];
        for (url, expected) in cases {
            let e = RedisStore::connect(&url, "g").await.unwrap_err();
            let shown = format!("{e} {e:?}");
            assert!(
                matches!(e.kind(), StoreErrorKind::Spec { .. }),
                "{url}: {shown}"
            );
            assert!(shown.contains(expected), "{url}: {shown}");
            assert!(!shown.contains("S3CRETPW"), "{shown}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A crafted reply cannot panic the commit (issue 36): `conflict` for a batch with no
    /// ranges indexed `ranges.len() - 1` (an underflow); an index naming no range is an
    /// unknown answer, not the nearest range.
    #[test]
    fn crafted_commit_replies_do_not_panic() {
        let reply = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let empty = PlannedBatch::new(3, vec![]);
        for out in [
            reply(&["conflict"]),
            reply(&["conflict", "1", "5"]),
            reply(&["conflict", "0"]),
            reply(&[]),
        ] {
            assert_eq!(read_answer(&out, &empty), Answer::Unknown, "{out:?}");
        }
        let r = OffsetRange::new("t", 0, 10, 20);
        let batch = PlannedBatch::new(3, vec![r.clone()]);
        assert_eq!(
            read_answer(&reply(&["conflict", "1", "12"]), &batch),
            Answer::Conflict(&r, Some(12))
        );
        for bad in ["0", "2", "-1", "18446744073709551616", "x"] {
            let out = reply(&["conflict", bad, "12"]);
            assert_eq!(read_answer(&out, &batch), Answer::Unknown, "{out:?}");
        }
        assert_eq!(read_answer(&reply(&["ok"]), &empty), Answer::Committed);
        assert_eq!(read_answer(&reply(&["already"]), &batch), Answer::Already);
    }
}
