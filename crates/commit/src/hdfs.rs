//! A checkpoint directory on HDFS (`checkpoint:hdfs://namenode:port/path`): the same
//! `metadata`, `offsets/N` and `commits/N` files as on a disk, through the pure-Rust
//! `hdfs-native` client (the NameNode's RPC and the DataNode transfer protocol; no JVM, no
//! libhdfs), so a checkpoint survives losing the machine.
//!
//! A batch file is written in two NameNode steps, each of which HDFS makes atomic:
//!
//! 1. the bytes go to a temp file of a name no other writer uses (`.<N>.tmp-…`, ignored by
//!    readers), created without overwrite, synced to the DataNodes (`hsync`) and closed (the
//!    NameNode's `complete`: the file's length is final);
//! 2. the temp file is renamed to its final name without overwrite (`rename2` without the
//!    `OVERWRITE` option), which the NameNode refuses when the name exists.
//!
//! So of two writers committing one batch, exactly one rename succeeds — the guarantee the disk
//! gets from `O_EXCL` and hard links, and S3 from `If-None-Match` — and a reader never sees a
//! batch file half-written: a file created in place would be visible (and under another
//! client's lease) from its `create` until its `close`, and a writer killed in between would
//! leave it so until the NameNode's lease recovery. A writer killed before the rename leaves
//! only a temp file, which no reader looks at (safe to delete when no writer runs).
//!
//! Every NameNode and DataNode call runs under a deadline ([`DEADLINE`]), and the client's
//! own connection retries are bounded (`dfs.client.failover.max.attempts`), so an unreachable
//! NameNode is an error naming the URL, never a hang. The user is `HADOOP_USER_NAME` or the
//! login name, as Hadoop's own client takes it; other client settings (`dfs.*`) can be passed
//! to [`Hdfs::open`].
//!
//! The checkpoint's logic is synchronous (it runs on a blocking thread); [`Hdfs`] bridges to
//! the async client with the runtime handle it was opened on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdfs_native::{Client, ClientBuilder, HdfsError, WriteOptions};

use crate::{StoreError, StoreErrorKind};

/// How long one operation (a read, a create-write-rename, a listing) may take before it is
/// an error: far past a healthy NameNode's milliseconds, short enough to notice a dead one.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// Connection attempts to the NameNode before an operation fails (Hadoop's default is 15,
/// with back-off up to 15 s: minutes before an unreachable NameNode is reported).
const CONNECT_ATTEMPTS: &str = "3";

/// A checkpoint's directory on HDFS.
#[derive(Debug, Clone)]
pub(crate) struct Hdfs {
    client: Client,
    /// The checkpoint's directory on the NameNode (`/path`).
    base: String,
    /// `hdfs://namenode:port/path`, the checkpoint's name in messages (its `dir`).
    url: PathBuf,
    rt: tokio::runtime::Handle,
}

/// Whether `e` says the path does not exist (the client's own `FileNotFound`, or the
/// NameNode's `FileNotFoundException` passed through as an RPC error).
fn is_not_found(e: &HdfsError) -> bool {
    match e {
        HdfsError::FileNotFound(_) => true,
        HdfsError::RPCError(class, _) => class == "java.io.FileNotFoundException",
        _ => false,
    }
}

fn hdfs_err(path: &Path, op: &'static str, e: HdfsError) -> StoreError {
    let kind = if is_not_found(&e) {
        std::io::ErrorKind::NotFound
    } else {
        std::io::ErrorKind::Other
    };
    let source = match e {
        HdfsError::IOError(io) => std::io::Error::new(io.kind(), io.to_string()),
        // The NameNode's exception and its first line, without the Java stack trace.
        HdfsError::RPCError(class, msg) | HdfsError::FatalRPCError(class, msg) => {
            let first: String = msg.lines().next().unwrap_or("").chars().take(500).collect();
            std::io::Error::new(kind, format!("the NameNode refused: {class}: {first}"))
        }
        other => std::io::Error::new(kind, other.to_string()),
    };
    StoreErrorKind::Io {
        path: path.to_owned(),
        op,
        source,
    }
    .into()
}

fn timed_out(path: &Path, op: &'static str) -> StoreError {
    StoreErrorKind::Io {
        path: path.to_owned(),
        op,
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer from HDFS within {} s (is the NameNode up?)",
                DEADLINE.as_secs()
            ),
        ),
    }
    .into()
}

fn bad_url(url: &str, reason: &str) -> StoreError {
    StoreErrorKind::Spec {
        spec: crate::redact(&format!("checkpoint:{url}")),
        reason: format!("{reason}; expected checkpoint:hdfs://NAMENODE:PORT/PATH"),
    }
    .into()
}

impl Hdfs {
    /// Opens `hdfs://namenode:port/path`, creating its `offsets` and `commits` directories,
    /// with Hadoop client settings `config` (`dfs.*` names) over kdirect's defaults. Must be
    /// called on a tokio runtime (its handle runs the requests).
    pub(crate) fn open(url: &Path, config: &[(&str, &str)]) -> Result<Hdfs, StoreError> {
        let s = url.to_str().unwrap_or_default();
        let rest = s
            .strip_prefix("hdfs://")
            .ok_or_else(|| bad_url(s, "not an hdfs:// URL"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(bad_url(s, "no NameNode"));
        }
        if authority.contains(['@', '?', '#']) || path.contains(['?', '#']) {
            return Err(bad_url(
                s,
                "user names, queries and fragments are not supported",
            ));
        }
        let base = path.trim_matches('/');
        if base.is_empty() {
            return Err(bad_url(s, "no directory (a checkpoint is never the root)"));
        }
        let base = format!("/{base}");
        let name = PathBuf::from(format!("hdfs://{authority}{base}"));
        crate::transport::warn_clear_text(
            "hdfs",
            &format!("hdfs://{authority}"),
            "kdirect's HDFS client has no TLS (nor SASL privacy): keep the NameNode and \
             DataNodes on a network you trust",
        );
        let rt = tokio::runtime::Handle::try_current().map_err(|e| {
            hdfs_err(
                &name,
                "open (no tokio runtime)",
                HdfsError::InternalError(e.to_string()),
            )
        })?;
        let mut settings = vec![("dfs.client.failover.max.attempts", CONNECT_ATTEMPTS)];
        settings.extend_from_slice(config);
        let client = ClientBuilder::new()
            .with_url(format!("hdfs://{authority}"))
            .with_config(settings)
            .with_io_runtime(rt.clone())
            .build()
            .map_err(|e| hdfs_err(&name, "open", e))?;
        let hdfs = Hdfs {
            client,
            base,
            url: name,
            rt,
        };
        for sub in ["offsets", "commits"] {
            let dir = hdfs.url.join(sub);
            let p = hdfs.hdfs_path(&dir);
            hdfs.run(&dir, "create directory", async {
                hdfs.client.mkdirs(&p, 0o755, true).await
            })?;
        }
        Ok(hdfs)
    }

    /// The checkpoint's name (`hdfs://namenode:port/path`).
    pub(crate) fn url(&self) -> &Path {
        &self.url
    }

    /// The HDFS path of `path` (a path under [`url`](Self::url)).
    fn hdfs_path(&self, path: &Path) -> String {
        let rel = path.strip_prefix(&self.url).unwrap_or(path);
        let mut p = self.base.clone();
        for part in rel.iter() {
            p.push('/');
            p.push_str(&part.to_string_lossy());
        }
        p
    }

    /// Runs one operation on the runtime under [`DEADLINE`]; errors name `path` and `op`.
    fn run<T>(
        &self,
        path: &Path,
        op: &'static str,
        f: impl std::future::Future<Output = Result<T, HdfsError>>,
    ) -> Result<T, StoreError> {
        self.rt.block_on(async {
            match tokio::time::timeout(DEADLINE, f).await {
                Ok(r) => r.map_err(|e| hdfs_err(path, op, e)),
                Err(_) => Err(timed_out(path, op)),
            }
        })
    }

    /// The file at `path`, refused when larger than `max` bytes; `Ok(None)` if absent.
    pub(crate) fn read(&self, path: &Path, max: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let p = self.hdfs_path(path);
        let got = self.run(path, "read", async {
            let reader = match self.client.read(&p).await {
                Ok(r) => r,
                Err(e) if is_not_found(&e) => return Ok(Err(None)),
                Err(e) => return Err(e),
            };
            let len = reader.file_length();
            if len as u64 > max {
                return Ok(Err(Some(len)));
            }
            reader.read_range(0, len).await.map(Ok)
        })?;
        match got {
            Ok(bytes) => Ok(Some(bytes.to_vec())),
            Err(None) => Ok(None),
            Err(Some(len)) => Err(StoreErrorKind::Corrupt {
                path: path.to_owned(),
                reason: format!("{len} bytes, more than any checkpoint file ({max} bytes at most)"),
            }
            .into()),
        }
    }

    /// Creates the file at `path` only if there is none: a temp file written, synced and
    /// closed, then renamed without overwrite (the NameNode refuses an existing name).
    pub(crate) fn create(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = path.with_file_name(format!(
            ".{name}.tmp-{}-{}-{nanos:09}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let (tmp_p, final_p) = (self.hdfs_path(&tmp), self.hdfs_path(path));
        let data = bytes::Bytes::copy_from_slice(bytes);
        let written = self.run(&tmp, "write temp file", async {
            let opts = WriteOptions::default().overwrite(false);
            let mut w = self.client.create(&tmp_p, opts).await?;
            w.write_bytes(data).await?;
            w.hsync().await?;
            w.close().await
        });
        let renamed = written.and_then(|()| {
            match self.rt.block_on(async {
                tokio::time::timeout(DEADLINE, self.client.rename(&tmp_p, &final_p, false)).await
            }) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(HdfsError::AlreadyExists(_))) => Err(StoreErrorKind::AlreadyExists {
                    path: path.to_owned(),
                    reason: "a batch file is never overwritten".to_owned(),
                }
                .into()),
                Ok(Err(e)) => Err(hdfs_err(path, "rename into place", e)),
                Err(_) => Err(timed_out(path, "rename into place")),
            }
        });
        if renamed.is_err() {
            // Lost the race, or failed: the temp file is nobody's (readers skip it anyway).
            let _ = self.rt.block_on(async {
                tokio::time::timeout(DEADLINE, self.client.delete(&tmp_p, false)).await
            });
        }
        renamed
    }

    /// The names directly under `dir`.
    pub(crate) fn list(&self, dir: &Path) -> Result<Vec<String>, StoreError> {
        let p = self.hdfs_path(dir);
        let listed = self.run(dir, "list", self.client.list_status(&p, false))?;
        Ok(listed
            .into_iter()
            .filter(|s| !s.isdir)
            .filter_map(|s| s.path.rsplit('/').next().map(str::to_owned))
            .collect())
    }

    /// Whether the file at `path` exists.
    pub(crate) fn exists(&self, path: &Path) -> Result<bool, StoreError> {
        let p = self.hdfs_path(path);
        self.run(path, "read", async {
            match self.client.get_file_info(&p).await {
                Ok(_) => Ok(true),
                Err(e) if is_not_found(&e) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Deletes the file at `path` (absent is fine).
    pub(crate) fn remove(&self, path: &Path) -> Result<(), StoreError> {
        let p = self.hdfs_path(path);
        self.run(path, "remove old batch file", async {
            self.client.delete(&p, false).await.map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_err(url: &str) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _g = rt.enter();
        Hdfs::open(Path::new(url), &[]).unwrap_err().to_string()
    }

    #[test]
    fn urls_without_namenode_or_directory_are_refused_by_name() {
        for (url, why) in [
            ("hdfs://", "no NameNode"),
            ("hdfs:///ckpt", "no NameNode"),
            ("hdfs://nn:8020", "no directory"),
            ("hdfs://nn:8020/", "no directory"),
            ("hdfs://u@nn:8020/x", "user names"),
            ("hdfs://nn:8020/x?a=b", "queries"),
            ("s3://b/x", "not an hdfs:// URL"),
        ] {
            let e = open_err(url);
            assert!(e.contains(why) && e.contains(url), "{url}: {e}");
        }
    }
}
