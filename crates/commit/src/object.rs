//! A checkpoint directory on object storage (`checkpoint:s3://bucket/prefix`,
//! `checkpoint:az://container/prefix`): the same `metadata`, `offsets/N` and `commits/N`
//! objects as on a disk, through the `object_store` crate, so a checkpoint survives losing the
//! machine.
//!
//! "Create only if absent" is the store's conditional write (`PutMode::Create`: S3's and Azure
//! Blob's `If-None-Match: *`), so of two writers committing one batch, exactly one succeeds —
//! the guarantee the disk gets from `O_EXCL` and hard links. An object is written whole or not
//! at all: no torn files to repair. Credentials and endpoint come from the usual environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`,
//! `AWS_ALLOW_HTTP` for a local S3-compatible server; `AZURE_STORAGE_ACCOUNT_NAME`,
//! `AZURE_STORAGE_ACCESS_KEY`, `AZURE_STORAGE_ENDPOINT`, …), as every S3 or Azure tool reads
//! them.
//!
//! The checkpoint's logic is synchronous (it runs on a blocking thread); [`Bucket`] bridges
//! to the async client with the runtime handle it was opened on. Its methods block on that
//! runtime: call them from a blocking thread (`spawn_blocking`) or from outside the runtime,
//! never from one of its async tasks.
//!
//! [`Bucket`] is public so that what else kdirect keeps on object storage (the Parquet sink's
//! data files and log) is opened with the same clients, environment and settings as the
//! checkpoint, and its errors name the object the same way (`s3://bucket/prefix/key`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use object_store;
use object_store::path::Path as Key;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, WriteMultipart};

use crate::{StoreError, StoreErrorKind};

/// Objects larger than this are uploaded in parts of this size ([`Bucket::upload_file`]).
const PART_SIZE: usize = 8 << 20;

/// A prefix in an S3 bucket or an Azure Blob container: a checkpoint's, or a sink's. Paths
/// are named by [`url`](Self::url) joined with the names under it
/// (`s3://bucket/prefix/offsets/7`), and every error names the path.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    /// The checkpoint's prefix inside the bucket.
    prefix: Key,
    /// `s3://bucket/prefix` (or `az://…`), the checkpoint's name in messages (its `dir`).
    url: PathBuf,
    rt: tokio::runtime::Handle,
}

fn object_err(path: &Path, op: &'static str, e: impl std::fmt::Display) -> StoreError {
    StoreErrorKind::Io {
        path: path.to_owned(),
        op,
        source: std::io::Error::other(e.to_string()),
    }
    .into()
}

impl Bucket {
    /// Opens `s3://bucket/prefix` with the AWS settings of the environment, or
    /// `az://container/prefix` with the Azure ones, then `config` (object_store's keys:
    /// `aws_endpoint`, `aws_allow_http`, `aws_access_key_id`, …; `azure_storage_account_name`,
    /// `azure_storage_endpoint`, …). Must be called on a tokio runtime (its handle runs the
    /// requests).
    pub fn open(url: &Path, config: &[(&str, &str)]) -> Result<Bucket, StoreError> {
        let s = url.to_str().unwrap_or_default();
        let (scheme, rest) = s.split_once("://").unwrap_or(("", s));
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() || !matches!(scheme, "s3" | "az") {
            return Err(StoreErrorKind::Spec {
                spec: crate::redact(&format!("checkpoint:{s}")),
                reason:
                    "expected checkpoint:s3://BUCKET/PREFIX or checkpoint:az://CONTAINER/PREFIX"
                        .to_owned(),
            }
            .into());
        }
        let store: Arc<dyn ObjectStore> = if scheme == "az" {
            let mut builder =
                object_store::azure::MicrosoftAzureBuilder::from_env().with_container_name(bucket);
            for (k, v) in config {
                let key: object_store::azure::AzureConfigKey =
                    k.parse().map_err(|e| object_err(url, "open", e))?;
                builder = builder.with_config(key, *v);
            }
            Arc::new(builder.build().map_err(|e| object_err(url, "open", e))?)
        } else {
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            for (k, v) in config {
                let key: object_store::aws::AmazonS3ConfigKey =
                    k.parse().map_err(|e| object_err(url, "open", e))?;
                builder = builder.with_config(key, *v);
            }
            Arc::new(builder.build().map_err(|e| object_err(url, "open", e))?)
        };
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| object_err(url, "open (no tokio runtime)", e))?;
        Ok(Bucket {
            store,
            prefix: Key::from(prefix.trim_matches('/')),
            url: PathBuf::from(format!("{scheme}://{bucket}/{}", prefix.trim_matches('/'))),
            rt,
        })
    }

    /// The prefix's name (`s3://bucket/prefix`, `az://container/prefix`).
    pub fn url(&self) -> &Path {
        &self.url
    }

    /// The client (what the settings and the environment configured), for a caller that
    /// speaks `object_store` itself.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The same bucket at `url/name` (a sub-prefix: a sink's log inside the sink's prefix).
    pub fn child(&self, name: &str) -> Bucket {
        Bucket {
            store: self.store.clone(),
            prefix: self.prefix.child(name),
            url: self.url.join(name),
            rt: self.rt.clone(),
        }
    }

    /// The key of `path` (a path under [`url`](Self::url)).
    pub fn key(&self, path: &Path) -> Key {
        let rel = path.strip_prefix(&self.url).unwrap_or(path);
        let mut key = self.prefix.clone();
        for part in rel.iter() {
            key = key.child(part.to_string_lossy().as_ref());
        }
        key
    }

    /// The object at `path`, refused when larger than `max` bytes; `Ok(None)` if absent.
    pub fn read(&self, path: &Path, max: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.key(path);
        self.rt.block_on(async {
            let got = match self.store.get(&key).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(object_err(path, "read", e)),
            };
            if got.meta.size > max {
                return Err(StoreErrorKind::Corrupt {
                    path: path.to_owned(),
                    reason: format!(
                        "{} bytes, more than any checkpoint file ({max} bytes at most)",
                        got.meta.size
                    ),
                }
                .into());
            }
            let bytes = got.bytes().await.map_err(|e| object_err(path, "read", e))?;
            Ok(Some(bytes.to_vec()))
        })
    }

    /// Creates the object at `path` only if there is none (the store's conditional write).
    pub fn create(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        let key = self.key(path);
        let payload = PutPayload::from(bytes.to_vec());
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        self.rt.block_on(async {
            match self.store.put_opts(&key, payload, opts).await {
                Ok(_) => Ok(()),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => {
                    Err(StoreErrorKind::AlreadyExists {
                        path: path.to_owned(),
                        reason: "a batch file is never overwritten".to_owned(),
                    }
                    .into())
                }
                Err(e) => Err(object_err(path, "create", e)),
            }
        })
    }

    /// Writes the object at `path` whole, replacing any object of that name (a reader sees
    /// the old object or the new one, never part of either).
    pub fn put(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        let key = self.key(path);
        let payload = PutPayload::from(bytes.to_vec());
        self.rt.block_on(async {
            self.store
                .put(&key, payload)
                .await
                .map(|_| ())
                .map_err(|e| object_err(path, "write", e))
        })
    }

    /// Uploads the local file `local` as the object at `path`, replacing any object of that
    /// name; the object appears whole when the upload completes (one put for a small file; a
    /// multipart upload, completed at the end, for a large one, so memory stays at a few
    /// parts). A failed multipart upload is aborted: nothing of it is visible.
    pub fn upload_file(&self, path: &Path, local: &Path) -> Result<u64, StoreError> {
        use std::io::Read;
        let key = self.key(path);
        let local_err = |op: &'static str| {
            let local = local.to_owned();
            move |source| -> StoreError {
                StoreErrorKind::Io {
                    path: local,
                    op,
                    source,
                }
                .into()
            }
        };
        let mut file = std::fs::File::open(local).map_err(local_err("open for upload"))?;
        let size = file.metadata().map_err(local_err("look at"))?.len();
        if size <= PART_SIZE as u64 {
            let mut bytes = Vec::with_capacity(size as usize);
            file.read_to_end(&mut bytes)
                .map_err(local_err("read for upload"))?;
            self.put(path, &bytes)?;
            return Ok(size);
        }
        self.rt.block_on(async {
            let upload = self
                .store
                .put_multipart(&key)
                .await
                .map_err(|e| object_err(path, "start the upload of", e))?;
            let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut buf = vec![0u8; 1 << 20];
            let sent: Result<(), StoreError> = async {
                loop {
                    let n = file.read(&mut buf).map_err(local_err("read for upload"))?;
                    if n == 0 {
                        return Ok(());
                    }
                    parts
                        .wait_for_capacity(4)
                        .await
                        .map_err(|e| object_err(path, "upload", e))?;
                    parts.write(&buf[..n]);
                }
            }
            .await;
            match sent {
                Ok(()) => parts
                    .finish()
                    .await
                    .map(|_| size)
                    .map_err(|e| object_err(path, "complete the upload of", e)),
                Err(e) => {
                    let _ = parts.abort().await;
                    Err(e)
                }
            }
        })
    }

    /// The names directly under `dir`.
    pub fn list(&self, dir: &Path) -> Result<Vec<String>, StoreError> {
        let key = self.key(dir);
        self.rt.block_on(async {
            let listed = self
                .store
                .list_with_delimiter(Some(&key))
                .await
                .map_err(|e| object_err(dir, "list", e))?;
            Ok(listed
                .objects
                .into_iter()
                .filter_map(|o| o.location.filename().map(str::to_owned))
                .collect())
        })
    }

    /// Whether the object at `path` exists.
    pub fn exists(&self, path: &Path) -> Result<bool, StoreError> {
        let key = self.key(path);
        self.rt.block_on(async {
            match self.store.head(&key).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(object_err(path, "read", e)),
            }
        })
    }

    /// Deletes the object at `path` (absent is fine).
    pub fn remove(&self, path: &Path) -> Result<(), StoreError> {
        let key = self.key(path);
        self.rt.block_on(async {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(object_err(path, "remove old batch file", e)),
            }
        })
    }
}
