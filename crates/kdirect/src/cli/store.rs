//! Options shared by the subcommands that open an offset store (`offsets show|set|reset|
//! migrate|import-spark`, `lag`).
use std::sync::Arc;

use kdirect_commit::{open_store, AnyStore, OpenOptions, StoreErrorKind, StoreSpec};
use kdirect_engine::cluster::Cluster;

use super::CliError;

/// Which store, which group, and (for the `kafka` store) which cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Where offsets live: `checkpoint:DIR` (also `checkpoint:s3://BUCKET/PREFIX`,
    /// `checkpoint:az://CONTAINER/PREFIX` and `checkpoint:hdfs://NAMENODE:PORT/PATH`),
    /// `kafka`, `sqlite:PATH`, `postgres://…`, `mysql://…`, `redis://…` or
    /// `zk://HOST:PORT[/chroot]`.
    #[arg(
        long,
        value_name = "SPEC",
        env = "KDIRECT_STORE",
        hide_env_values = true
    )]
    pub store: String,
    /// The consumer group (ignored by `checkpoint:`, which belongs to one stream).
    #[arg(short, long, value_name = "G")]
    pub group: String,
    /// Bootstrap broker(s), `HOST:PORT[,HOST:PORT…]`: needed by the `kafka` store, `lag` and
    /// `offsets reset`.
    #[arg(short = 'b', long, value_name = "HOST:PORT", env = "KDIRECT_BOOTSTRAP")]
    pub bootstrap: Option<String>,
    /// request.timeout.ms
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub request_timeout_ms: u64,
    /// A connection setting by its Kafka name (repeatable): `security.protocol`, `sasl.*`,
    /// `ssl.*`, `client.id`. The security settings are also read from the environment as
    /// KDIRECT_ + the key upper-cased with dots as underscores (KDIRECT_SASL_PASSWORD).
    #[arg(short = 'X', long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl StoreArgs {
    /// Connects to the cluster, if `-b` was given.
    pub async fn cluster(&self) -> Result<Option<Arc<Cluster>>, CliError> {
        let Some(b) = &self.bootstrap else {
            return Ok(None);
        };
        Ok(Some(Arc::new(
            super::common::connect(b, self.request_timeout_ms, &self.set).await?,
        )))
    }

    /// The cluster, or an error saying `-b` is needed for `what`.
    pub async fn require_cluster(&self, what: &str) -> Result<Arc<Cluster>, CliError> {
        self.cluster()
            .await?
            .ok_or_else(|| CliError(format!("{what} needs -b HOST:PORT (or KDIRECT_BOOTSTRAP)")))
    }

    /// Opens the store `spec` (this `--store`, or another for `migrate --to`), creating it if
    /// needed.
    pub async fn open(
        &self,
        spec: &str,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<AnyStore, CliError> {
        self.open_with(spec, cluster, false).await
    }

    /// Opens the store `spec` only if it exists: for the commands that only read (`offsets
    /// show`, `lag`, `migrate`'s source), so a mistyped path creates nothing.
    pub async fn open_existing(
        &self,
        spec: &str,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<AnyStore, CliError> {
        self.open_with(spec, cluster, true).await
    }

    /// Opens the store `spec` if it exists, else `None` (a dry run that creates nothing and
    /// shows what a new store would get).
    pub async fn open_if_exists(
        &self,
        spec: &str,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Option<AnyStore>, CliError> {
        let cluster = match (cluster, StoreSpec::parse(spec)?) {
            (Some(c), _) => Some(c),
            (None, StoreSpec::Kafka) => Some(self.require_cluster("the kafka store").await?),
            (None, _) => None,
        };
        let mut options = OpenOptions::default();
        options.cluster = cluster;
        options.must_exist = true;
        match open_store(spec, &self.group, &options).await {
            Ok(s) => Ok(Some(s)),
            Err(e) if matches!(e.kind(), StoreErrorKind::Missing { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn open_with(
        &self,
        spec: &str,
        cluster: Option<Arc<Cluster>>,
        must_exist: bool,
    ) -> Result<AnyStore, CliError> {
        let cluster = match (cluster, StoreSpec::parse(spec)?) {
            (Some(c), _) => Some(c),
            (None, StoreSpec::Kafka) => Some(self.require_cluster("the kafka store").await?),
            (None, _) => None,
        };
        let mut options = OpenOptions::default();
        options.cluster = cluster;
        options.must_exist = must_exist;
        Ok(open_store(spec, &self.group, &options).await?)
    }
}
