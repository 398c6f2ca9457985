//! The ZooKeeper store: the layout of the old Kafka high-level consumer (and of the Spark
//! articles that keep a DStream's offsets in ZooKeeper), plus kdirect's batch id and plan log
//! beside it.
//!
//! ```text
//! /consumers/<group>/offsets/<topic>/<partition>   "<next offset>"   (text, as the old consumer)
//! /consumers/<group>/kdirect/batch                 "<batch id>"      the last committed batch
//! /consumers/<group>/kdirect/plans/<batch id>      JSON ranges       a logged, uncommitted batch
//! /consumers/<group>/kdirect/resume                JSON              leader epochs, topic ids
//! ```
//!
//! `resume` holds `{"leaderEpochs":{"<topic>":{"<partition>":<epoch>}},"topicIds":{"<topic>":
//! "<32 hex digits>"}}`: the epoch of the last record batch read before each position (KIP-320)
//! and the id of each topic (KIP-516), written in the commit's transaction, so a stream resumed
//! from the store finds a log truncated or a topic re-created while it was down, as from a
//! checkpoint.
//!
//! Everything lives under the spec's chroot (`zk://h1:2181,h2:2181/chroot`).
//!
//! - **Commit** is one multi-op transaction: each partition's znode is set with the version it
//!   was read at (or created, when it had none), the batch znode likewise, and the batch's plan
//!   deleted. The positions are read first, with one multi-read, and compared with each range's
//!   `from`; the version checks make the write fail if anything moved in between, and the
//!   commit then reads again — a second writer's position is then a
//!   [`StoreErrorKind::Conflict`]. Two round trips per commit (three the first time a topic is
//!   seen: its parent znodes are created).
//! - **Plan log**: [`OffsetStore::log_plan`] creates `plans/<id>` before the batch runs (a
//!   plan that is there already must be the same ranges); a restart finds the plan of a batch
//!   that never committed and re-runs exactly it ([`Committed::pending`]), which with the
//!   idempotent file sink gives exactly-once, as the checkpoint directory does. So, like the
//!   checkpoint, the store has one writer at a time and refuses group mode (a plan orders one
//!   stream's batches).
//!
//! Durability is ZooKeeper's: a write is acknowledged once a quorum has logged it to disk.
//! Requests are bounded by `request_timeout` (30 s); a session that expired is replaced by a new
//! one on the next call.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use zookeeper_client as zk;

use crate::{
    redact, Capabilities, CommitContext, CommitOutcome, Committed, Epochs, OffsetRange,
    OffsetStore, PlannedBatch, Positions, StoreError, StoreErrorKind, TopicIds, TopicPartition,
};

/// How long one ZooKeeper request may take before the store gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a commit re-reads after its transaction lost a race on a znode version, before
/// it reports the store as busy (a race that keeps being lost is a second writer).
const MAX_RACES: usize = 8;

/// ZooKeeper as an [`OffsetStore`].
pub struct ZooKeeperStore {
    /// The connect string as given (`h1:2181,h2:2181/chroot`, perhaps with a `user:password@`):
    /// every message and `Debug` shows it through [`shown`].
    connect: String,
    group: String,
    client: tokio::sync::Mutex<zk::Client>,
    /// Plans known to be in `plans/` (logged here or found by `load`): a commit deletes those
    /// up to its batch in its transaction.
    plans: Mutex<BTreeSet<u64>>,
    /// Topics whose parent znodes exist.
    topics_made: Mutex<BTreeSet<String>>,
    /// The ACL of the znodes this store creates: with `user:password@` in the spec the session
    /// authenticates (`digest`) and its znodes are the creator's only (`creator_all`: no one
    /// without the same credentials can read or change a position); without, open to anyone
    /// (`anyone_all`), as the old Kafka consumer made them.
    acls: zk::Acls<'static>,
}

impl fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("connect", &shown(&self.connect))
            .field("group", &self.group)
            .finish()
    }
}

/// A znode read: its data and version, or absent.
type Read = Option<(Vec<u8>, i32)>;

/// The group's kdirect znodes as read before a write: the committed batch id, the leader epochs
/// and topic ids, and the versions of their znodes (`None`: absent).
#[derive(Default)]
struct Meta {
    batch: Option<u64>,
    batch_version: Option<i32>,
    epochs: Epochs,
    topic_ids: TopicIds,
    resume_version: Option<i32>,
}

impl ZooKeeperStore {
    /// The plan log (`kdirect/plans/N`), one writer only; one multi-op transaction with each
    /// znode's version.
    pub const CAPABILITIES: Capabilities =
        Capabilities::LOGS_PLANS.union(Capabilities::ATOMIC_COMMIT);

    /// Connects to `spec` (`zk://host:port[,host:port…][/chroot]`, or `zookeeper://…`) for
    /// `group`. The chroot znode is created when missing.
    pub async fn connect(spec: &str, group: &str) -> Result<ZooKeeperStore, StoreError> {
        let connect = connect_string(spec)?;
        if group.is_empty() || group.contains('/') {
            return Err(StoreErrorKind::Invalid {
                what: "group",
                value: group.to_owned(),
                reason: "a ZooKeeper store needs a group name without '/'".to_owned(),
            }
            .into());
        }
        crate::transport::warn_clear_text(
            "zookeeper",
            spec,
            "kdirect's ZooKeeper client has no TLS: keep ZooKeeper on a network you trust, or use \
             a store that has it (postgres://…?sslmode=verify-full, rediss://, hbases://)",
        );
        let client = open(&connect).await?;
        let acls = acls_for(split_auth(&connect).0);
        let store = ZooKeeperStore {
            connect,
            group: group.to_owned(),
            client: tokio::sync::Mutex::new(client),
            plans: Mutex::new(BTreeSet::new()),
            topics_made: Mutex::new(BTreeSet::new()),
            acls,
        };
        store.mkdir(&store.kdirect_dir()).await?;
        Ok(store)
    }

    fn group_dir(&self) -> String {
        format!("/consumers/{}", self.group)
    }

    /// `/consumers/<group>/offsets/<topic>`.
    pub fn topic_dir(&self, topic: &str) -> String {
        format!("{}/offsets/{topic}", self.group_dir())
    }

    fn partition_path(&self, tp: &TopicPartition) -> String {
        format!("{}/{}", self.topic_dir(&tp.topic), tp.partition)
    }

    fn kdirect_dir(&self) -> String {
        format!("{}/kdirect", self.group_dir())
    }

    fn batch_path(&self) -> String {
        format!("{}/batch", self.kdirect_dir())
    }

    fn resume_path(&self) -> String {
        format!("{}/resume", self.kdirect_dir())
    }

    fn plans_dir(&self) -> String {
        format!("{}/plans", self.kdirect_dir())
    }

    fn plan_path(&self, id: u64) -> String {
        format!("{}/{id}", self.plans_dir())
    }

    fn err(&self, path: &str, reason: impl fmt::Display) -> StoreError {
        zk_error(&self.connect, path, reason)
    }

    /// The client, reconnected first if its session is over.
    async fn client(&self) -> Result<zk::Client, StoreError> {
        let mut c = self.client.lock().await;
        if c.state().is_terminated() {
            *c = open(&self.connect).await?;
        }
        Ok(c.clone())
    }

    /// Runs one request under [`REQUEST_TIMEOUT`].
    async fn call<T, E>(
        &self,
        path: &str,
        f: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<Result<T, E>, StoreError> {
        tokio::time::timeout(REQUEST_TIMEOUT, f).await.map_err(|_| {
            self.err(
                path,
                format_args!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
            )
        })
    }

    /// Creates `path` and its parents (persistent, with the store's ACL).
    async fn mkdir(&self, path: &str) -> Result<(), StoreError> {
        let c = self.client().await?;
        let opts = zk::CreateMode::Persistent.with_acls(self.acls);
        match self.call(path, c.mkdir(path, &opts)).await? {
            Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(self.err(path, e)),
        }
    }

    /// The children of `path` (none when it does not exist).
    async fn children(&self, path: &str) -> Result<Vec<String>, StoreError> {
        let c = self.client().await?;
        match self.call(path, c.list_children(path)).await? {
            Ok(v) => Ok(v),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(self.err(path, e)),
        }
    }

    /// Reads `paths` in one request.
    async fn read_all(&self, paths: &[String]) -> Result<Vec<Read>, StoreError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.client().await?;
        let mut reader = c.new_multi_reader();
        for p in paths {
            reader.add_get_data(p).map_err(|e| self.err(p, e))?;
        }
        let first = &paths[0];
        let results = self.call(first, reader.commit()).await?;
        let results = results.map_err(|e| self.err(first, e))?;
        if results.len() != paths.len() {
            return Err(self.err(
                first,
                format_args!(
                    "a multi-read of {} znodes answered {} results",
                    paths.len(),
                    results.len()
                ),
            ));
        }
        paths
            .iter()
            .zip(results)
            .map(|(p, r)| match r {
                zk::MultiReadResult::Data { data, stat } => Ok(Some((data, stat.version))),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(None),
                zk::MultiReadResult::Error { err } => Err(self.err(p, err)),
                other => Err(self.err(p, format_args!("unexpected answer {other:?}"))),
            })
            .collect()
    }

    fn number<T: std::str::FromStr>(
        &self,
        path: &str,
        data: &[u8],
        what: &str,
    ) -> Result<T, StoreError> {
        std::str::from_utf8(data)
            .ok()
            .map(str::trim)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                self.err(
                    path,
                    format_args!(
                        "holds {:?}, which is not {what}",
                        String::from_utf8_lossy(&data[..data.len().min(64)])
                    ),
                )
            })
    }

    /// The committed batch id, the leader epochs and topic ids, and their znodes' versions, in
    /// one multi-read.
    async fn read_meta(&self) -> Result<Meta, StoreError> {
        let (batch_path, resume_path) = (self.batch_path(), self.resume_path());
        let mut read = self
            .read_all(&[batch_path.clone(), resume_path.clone()])
            .await?
            .into_iter();
        let mut meta = Meta::default();
        if let Some((data, version)) = read.next().flatten() {
            meta.batch = Some(self.number(&batch_path, &data, "a batch id")?);
            meta.batch_version = Some(version);
        }
        if let Some((data, version)) = read.next().flatten() {
            let (epochs, topic_ids) = crate::resume::decode_json(&data).map_err(|why| {
                self.err(
                    &resume_path,
                    format_args!("not kdirect's leader epochs and topic ids: {why}"),
                )
            })?;
            meta.epochs = epochs;
            meta.topic_ids = topic_ids;
            meta.resume_version = Some(version);
        }
        Ok(meta)
    }

    fn parse_plan(&self, path: &str, id: u64, data: &[u8]) -> Result<PlannedBatch, StoreError> {
        let bad = |why: &str| self.err(path, format_args!("not a kdirect plan: {why}"));
        let v: serde_json::Value = serde_json::from_slice(data).map_err(|e| bad(&e.to_string()))?;
        if v.get("batch").and_then(serde_json::Value::as_u64) != Some(id) {
            return Err(bad("its batch id is not its znode's name"));
        }
        let ranges = v
            .get("ranges")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("no ranges"))?;
        let mut out = Vec::with_capacity(ranges.len());
        let mut moved_back = Positions::new();
        for r in ranges {
            let topic = r.get("topic").and_then(serde_json::Value::as_str);
            let partition = r
                .get("partition")
                .and_then(serde_json::Value::as_i64)
                .and_then(|p| i32::try_from(p).ok());
            let from = r.get("from").and_then(serde_json::Value::as_i64);
            let until = r.get("until").and_then(serde_json::Value::as_i64);
            match (topic, partition, from, until) {
                (Some(t), Some(p), Some(f), Some(u)) if p >= 0 && 0 <= f && f <= u => {
                    out.push(OffsetRange::new(t, p, f, u));
                    // The stored position the range moves back from (PlannedBatch::moved_back).
                    if let Some(m) = r.get("movedBackFrom") {
                        match m.as_i64() {
                            Some(m) if m >= 0 => {
                                moved_back.insert(TopicPartition::new(t, p), m);
                            }
                            _ => {
                                return Err(bad(&format!(
                                    "range {r} has a 'movedBackFrom' that is not an offset"
                                )))
                            }
                        }
                    }
                }
                _ => {
                    return Err(bad(&format!(
                        "range {r} is not topic, partition, from ≤ until"
                    )))
                }
            }
        }
        Ok(PlannedBatch::new(id, out).with_moved_back(moved_back))
    }

    /// The positions stored for `ranges`' partitions, with each znode's version.
    async fn read_positions(
        &self,
        tps: &[TopicPartition],
    ) -> Result<Vec<Option<(i64, i32)>>, StoreError> {
        let paths: Vec<String> = tps.iter().map(|tp| self.partition_path(tp)).collect();
        let read = self.read_all(&paths).await?;
        paths
            .iter()
            .zip(read)
            .map(|(p, r)| match r {
                None => Ok(None),
                Some((data, version)) => Ok(Some((self.number(p, &data, "an offset")?, version))),
            })
            .collect()
    }

    /// Creates the parent znodes of `topics` not yet known to exist.
    async fn make_topics<'a>(
        &self,
        topics: impl Iterator<Item = &'a str>,
    ) -> Result<(), StoreError> {
        let missing: BTreeSet<String> = {
            let made = lock(&self.topics_made);
            topics
                .filter(|t| !made.contains(*t))
                .map(str::to_owned)
                .collect()
        };
        for t in missing {
            self.mkdir(&self.topic_dir(&t)).await?;
            lock(&self.topics_made).insert(t);
        }
        Ok(())
    }

    /// Writes `entries` (partition → new position, with the version read, `None` = create) and
    /// the batch id in one transaction, deleting the known plans up to `batch_id`. `Ok(false)`:
    /// a version check lost a race (read again).
    async fn write(
        &self,
        batch_id: u64,
        meta: &Meta,
        entries: &[(TopicPartition, i64, Option<i32>)],
        epochs: &Epochs,
        topic_ids: &TopicIds,
    ) -> Result<bool, StoreError> {
        self.make_topics(entries.iter().map(|(tp, _, _)| tp.topic.as_str()))
            .await?;
        let plans: Vec<u64> = lock(&self.plans).range(..=batch_id).copied().collect();
        let opts = zk::CreateMode::Persistent.with_acls(self.acls);
        let c = self.client().await?;
        let mut w = c.new_multi_writer();
        let mut paths = Vec::with_capacity(entries.len() + plans.len() + 1);
        for (tp, to, version) in entries {
            let path = self.partition_path(tp);
            let data = to.to_string();
            match version {
                Some(v) => w.add_set_data(&path, data.as_bytes(), Some(*v)),
                None => w.add_create(&path, data.as_bytes(), &opts),
            }
            .map_err(|e| self.err(&path, e))?;
            paths.push(path);
        }
        let batch_path = self.batch_path();
        let data = batch_id.to_string();
        match meta.batch_version {
            Some(v) => w.add_set_data(&batch_path, data.as_bytes(), Some(v)),
            None => w.add_create(&batch_path, data.as_bytes(), &opts),
        }
        .map_err(|e| self.err(&batch_path, e))?;
        paths.push(batch_path);
        let resume_path = self.resume_path();
        let data = crate::resume::encode_json(epochs, topic_ids);
        match meta.resume_version {
            Some(v) => w.add_set_data(&resume_path, &data, Some(v)),
            None => w.add_create(&resume_path, &data, &opts),
        }
        .map_err(|e| self.err(&resume_path, e))?;
        paths.push(resume_path);
        for id in &plans {
            let path = self.plan_path(*id);
            w.add_delete(&path, None).map_err(|e| self.err(&path, e))?;
            paths.push(path);
        }
        let first = paths[0].clone();
        match self.call(&first, w.commit()).await? {
            Ok(_) => {
                let mut known = lock(&self.plans);
                for id in &plans {
                    known.remove(id);
                }
                Ok(true)
            }
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                let path = paths.get(index).cloned().unwrap_or(first);
                match source {
                    zk::Error::BadVersion | zk::Error::NodeExists => Ok(false),
                    // A plan someone else removed: forget it and try again.
                    zk::Error::NoNode if index > entries.len() + 1 => {
                        if let Some(id) = plans.get(index - entries.len() - 2) {
                            lock(&self.plans).remove(id);
                        }
                        Ok(false)
                    }
                    // A partition or batch znode deleted under us: read again.
                    zk::Error::NoNode => Ok(false),
                    e => Err(self.err(&path, e)),
                }
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => Err(self.err(&first, source)),
        }
    }

    /// The plan of a batch that was logged but not committed, if any (the oldest one after the
    /// committed batch).
    async fn pending(&self, committed: Option<u64>) -> Result<Option<PlannedBatch>, StoreError> {
        let dir = self.plans_dir();
        let mut ids = BTreeSet::new();
        for name in self.children(&dir).await? {
            let id: u64 = self.number(&format!("{dir}/{name}"), name.as_bytes(), "a batch id")?;
            ids.insert(id);
        }
        lock(&self.plans).extend(ids.iter().copied());
        let Some(&id) = ids.iter().find(|&&id| committed.is_none_or(|b| id > b)) else {
            return Ok(None);
        };
        let path = self.plan_path(id);
        match self
            .read_all(std::slice::from_ref(&path))
            .await?
            .pop()
            .flatten()
        {
            Some((data, _)) => Ok(Some(self.parse_plan(&path, id, &data)?)),
            None => Ok(None),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A ZooKeeper error: `server` (a connect string) is shown without its password.
fn zk_error(server: &str, path: &str, reason: impl fmt::Display) -> StoreError {
    StoreErrorKind::ZooKeeper {
        server: shown(server),
        path: path.to_owned(),
        reason: reason.to_string(),
    }
    .into()
}

/// A connect string for messages: `bob:secret@h:2181/c` → `bob:***@h:2181/c` ([`redact`] sees
/// it with its scheme, so the user name stays).
fn shown(connect: &str) -> String {
    let r = redact(&format!("zk://{connect}"));
    r.strip_prefix("zk://").map(str::to_owned).unwrap_or(r)
}

/// `zk://h1:2181,h2:2181/chroot` → `h1:2181,h2:2181/chroot`.
pub fn connect_string(spec: &str) -> Result<String, StoreError> {
    let rest = spec
        .strip_prefix("zk://")
        .or_else(|| spec.strip_prefix("zookeeper://"))
        .ok_or_else(|| -> StoreError {
            StoreErrorKind::Spec {
                spec: redact(spec),
                reason: "expected zk://host:port[,host:port…][/chroot]".to_owned(),
            }
            .into()
        })?;
    let (auth, after) = split_auth(rest);
    let hosts = after.split('/').next().unwrap_or_default();
    if auth.is_some_and(|a| !a.contains(':') || a.starts_with(':')) {
        return Err(StoreErrorKind::Spec {
            spec: redact(spec),
            reason: "ZooKeeper credentials are user:password@ (the digest scheme)".to_owned(),
        }
        .into());
    }
    if hosts.is_empty() || hosts.split(',').any(|h| h.rsplit_once(':').is_none()) {
        return Err(StoreErrorKind::Spec {
            spec: redact(spec),
            reason: "every ZooKeeper server needs host:port, e.g. zk://127.0.0.1:2181/kdirect"
                .to_owned(),
        }
        .into());
    }
    Ok(rest.trim_end_matches('/').to_owned())
}

/// `user:password@hosts/chroot` → (`Some("user:password")`, `hosts/chroot`): the digest
/// credentials of a connect string, if it has any (the last `@` ends them, so a password may
/// hold one).
fn split_auth(connect: &str) -> (Option<&str>, &str) {
    match connect.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, connect),
    }
}

/// The ACL of every znode a store creates: the creator's only when the session authenticates
/// with `auth`, else open to anyone (as the old Kafka consumer made them).
fn acls_for(auth: Option<&str>) -> zk::Acls<'static> {
    if auth.is_some() {
        zk::Acls::creator_all()
    } else {
        zk::Acls::anyone_all()
    }
}

async fn open(connect: &str) -> Result<zk::Client, StoreError> {
    let (auth, rest) = split_auth(connect);
    let (hosts, chroot) = match rest.split_once('/') {
        Some((h, c)) => (h, Some(format!("/{c}"))),
        None => (rest, None),
    };
    // With credentials, the session authenticates with ZooKeeper's `digest` scheme (its
    // `user:password`, as zkCli's `addauth digest` takes it) before anything else: a wrong
    // password fails the session (AuthFailed), and the znodes are created for it alone.
    let connector = || {
        let c = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .with_connection_timeout(Duration::from_secs(10));
        match auth {
            Some(a) => c.with_auth("digest", a.as_bytes()),
            None => c,
        }
    };
    let fail = |path: &str, e: &dyn fmt::Display| zk_error(connect, path, e);
    let root = tokio::time::timeout(Duration::from_secs(10), connector().connect(hosts))
        .await
        .map_err(|_| fail("/", &"no session within 10 s (is ZooKeeper running there?)"))?
        .map_err(|e| fail("/", &e))?;
    let Some(chroot) = chroot else {
        return Ok(root);
    };
    // The chroot must exist before a client rooted there can create anything under it.
    let opts = zk::CreateMode::Persistent.with_acls(acls_for(auth));
    match root.mkdir(&chroot, &opts).await {
        Ok(()) | Err(zk::Error::NodeExists) => {}
        Err(e) => return Err(fail(&chroot, &e)),
    }
    root.chroot(chroot.as_str())
        .map_err(|_| fail(&chroot, &"not a valid chroot"))
}

impl OffsetStore for ZooKeeperStore {
    fn describe(&self) -> String {
        format!("zookeeper {} group '{}'", shown(&self.connect), self.group)
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        let mut c = Committed::default();
        let offsets = format!("{}/offsets", self.group_dir());
        let mut tps = Vec::new();
        for topic in self.children(&offsets).await? {
            if !topics.is_empty() && !topics.contains(&topic) {
                continue;
            }
            let dir = self.topic_dir(&topic);
            for p in self.children(&dir).await? {
                let partition: i32 =
                    self.number(&format!("{dir}/{p}"), p.as_bytes(), "a partition")?;
                if partition < 0 {
                    return Err(self.err(&format!("{dir}/{p}"), "is not a partition"));
                }
                tps.push(TopicPartition::new(topic.clone(), partition));
            }
        }
        for (tp, read) in tps.iter().zip(self.read_positions(&tps).await?) {
            if let Some((o, _)) = read {
                c.positions.insert(tp.clone(), o);
            }
        }
        let meta = self.read_meta().await?;
        c.batch_id = meta.batch;
        c.epochs = meta.epochs;
        c.epochs.retain(|tp, _| c.positions.contains_key(tp));
        c.topic_ids = meta.topic_ids;
        c.topic_ids
            .retain(|t, _| c.positions.keys().any(|tp| tp.topic == *t));
        c.pending = self.pending(c.batch_id).await?;
        if let Some(p) = &mut c.pending {
            if !topics.is_empty() {
                p.ranges.retain(|r| topics.iter().any(|t| *t == r.topic));
                p.moved_back
                    .retain(|tp, _| topics.iter().any(|t| *t == tp.topic));
            }
        }
        Ok(c)
    }

    async fn log_plan(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        let ranges: Vec<serde_json::Value> = batch
            .ranges
            .iter()
            .map(|r| {
                let mut j = serde_json::json!({
                    "topic": r.topic.as_str(), "partition": r.partition, "from": r.from, "until": r.until,
                });
                if let Some(m) = batch.moved_back.get(&r.topic_partition()) {
                    j["movedBackFrom"] = serde_json::Value::from(*m);
                }
                j
            })
            .collect();
        let data = serde_json::json!({ "batch": batch.id, "ranges": ranges }).to_string();
        let path = self.plan_path(batch.id);
        // A plan that does not start where the store stands is a zombie's (or a second
        // writer's): refused before it is logged, as the checkpoint refuses it, so it never
        // becomes a pending batch that a restart would re-run.
        let tps: Vec<TopicPartition> = batch.ranges.iter().map(|r| r.topic_partition()).collect();
        let stored: Positions = tps
            .iter()
            .zip(self.read_positions(&tps).await?)
            .filter_map(|(tp, s)| s.map(|(o, _)| (tp.clone(), o)))
            .collect();
        crate::check_from(
            &format!("{} (plan of batch {})", self.describe(), batch.id),
            &stored,
            batch,
        )?;
        self.mkdir(&self.plans_dir()).await?;
        let c = self.client().await?;
        let opts = zk::CreateMode::Persistent.with_acls(self.acls);
        match self
            .call(&path, c.create(&path, data.as_bytes(), &opts))
            .await?
        {
            Ok(_) => {}
            Err(zk::Error::NodeExists) => {
                // A re-run of a pending batch logs the same plan again; anything else is a
                // second writer.
                let stored = self
                    .read_all(std::slice::from_ref(&path))
                    .await?
                    .pop()
                    .flatten();
                let same = stored
                    .map(|(d, _)| self.parse_plan(&path, batch.id, &d))
                    .transpose()?
                    .is_some_and(|p| p.ranges == batch.ranges && p.moved_back == batch.moved_back);
                if !same {
                    return Err(self.err(
                        &path,
                        "already holds another plan for this batch id (a second writer on \
                         the same group?); nothing was overwritten",
                    ));
                }
            }
            Err(e) => return Err(self.err(&path, e)),
        }
        lock(&self.plans).insert(batch.id);
        Ok(())
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        _ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        let tps: Vec<TopicPartition> = batch.ranges.iter().map(|r| r.topic_partition()).collect();
        for _ in 0..MAX_RACES {
            let meta = self.read_meta().await?;
            let stored_batch = meta.batch;
            let stored = self.read_positions(&tps).await?;
            // The one commit rule over what the znodes hold (the group's batch id for each).
            let found: Vec<Option<crate::StoredPosition>> = stored
                .iter()
                .map(|s| {
                    s.map(|(position, _)| crate::StoredPosition {
                        position,
                        batch_id: stored_batch,
                    })
                })
                .collect();
            let decision = crate::decide(batch, &found);
            let conflict_at = match decision {
                crate::CommitDecision::Conflict { index, .. } => batch
                    .ranges
                    .get(index)
                    .map(|r| self.partition_path(&r.topic_partition())),
                _ => None,
            };
            let store = format!(
                "{} znode {}",
                self.describe(),
                conflict_at.unwrap_or_default()
            );
            if !crate::decided(&store, batch, decision)? {
                return Ok(CommitOutcome::AlreadyCommitted);
            }
            // Every range writes, each checked against the znode version it was read at.
            let entries: Vec<_> = batch
                .ranges
                .iter()
                .zip(&stored)
                .map(|(r, s)| (r.topic_partition(), r.until, s.map(|(_, v)| v)))
                .collect();
            let (mut epochs, mut topic_ids) = (meta.epochs.clone(), meta.topic_ids.clone());
            crate::merge_resume_state(&mut epochs, &mut topic_ids, batch);
            if self
                .write(batch.id, &meta, &entries, &epochs, &topic_ids)
                .await?
            {
                return Ok(CommitOutcome::Committed);
            }
        }
        Err(self.err(
            &self.group_dir(),
            format_args!(
                "batch {}'s transaction lost {MAX_RACES} races on znode versions in a row: \
                 another writer keeps changing this group's offsets",
                batch.id
            ),
        ))
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        let committed = self.read_meta().await?.batch;
        if let Some(p) = self.pending(committed).await? {
            return Err(self.err(
                &self.plan_path(p.id),
                format_args!(
                    "batch {} is logged but not committed: let the stream finish it, or \
                     delete this znode first",
                    p.id
                ),
            ));
        }
        let tps: Vec<TopicPartition> = positions.keys().cloned().collect();
        for _ in 0..MAX_RACES {
            let meta = self.read_meta().await?;
            let stored = self.read_positions(&tps).await?;
            let entries: Vec<_> = positions
                .iter()
                .zip(&stored)
                .map(|((tp, &o), s)| (tp.clone(), o, s.map(|(_, v)| v)))
                .collect();
            let was: Positions = tps
                .iter()
                .zip(&stored)
                .filter_map(|(tp, s)| Some((tp.clone(), s.as_ref()?.0)))
                .collect();
            let (mut epochs, mut topic_ids) = (meta.epochs.clone(), meta.topic_ids.clone());
            crate::forget_set_positions(&mut epochs, &mut topic_ids, &was, positions);
            if self
                .write(batch_id, &meta, &entries, &epochs, &topic_ids)
                .await?
            {
                return Ok(());
            }
        }
        Err(self.err(
            &self.group_dir(),
            "another writer keeps changing this group's offsets",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the SQL and Redis stores: the password in the spec is in no message (`describe` and
    /// `Debug` show the connect string through the same `shown`). Errors printed
    /// `zookeeper bob:S3CRETPW@127.0.0.1:1 znode /: …`.
    #[test]
    fn redacts_the_password() {
        assert_eq!(shown("bob:S3CRETPW@h:2181/c"), "bob:***@h:2181/c");
        assert_eq!(shown("a:1,b:2/kdirect"), "a:1,b:2/kdirect");
        let e = zk_error("bob:S3CRETPW@127.0.0.1:1", "/", "no session");
        assert!(!format!("{e} {e:?}").contains("S3CRETPW"), "{e}");
        assert!(e.to_string().contains("bob:***@127.0.0.1:1"), "{e}");
        for spec in ["zk://bob:S3CRETPW@h:1,nowhere", "zq://bob:S3CRETPW@h:1"] {
            let e = connect_string(spec).unwrap_err();
            assert!(!format!("{e} {e:?}").contains("S3CRETPW"), "{e}");
        }
    }

    #[test]
    fn connect_strings() {
        assert_eq!(
            connect_string("zk://127.0.0.1:2181").unwrap(),
            "127.0.0.1:2181"
        );
        assert_eq!(
            connect_string("zk://a:1,b:2/kdirect/prod/").unwrap(),
            "a:1,b:2/kdirect/prod"
        );
        assert_eq!(connect_string("zookeeper://a:1/x").unwrap(), "a:1/x");
        for bad in ["zk://", "zk:///x", "zk://a/x", "zk://a:1,b/x", "kafka"] {
            let e = connect_string(bad).unwrap_err();
            assert!(e.to_string().contains("host:port"), "{bad}: {e}");
        }
    }
}
