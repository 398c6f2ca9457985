//! Pieces shared by the subcommands that talk to brokers.
use std::time::Duration;

use kdirect_engine::cluster::Cluster;
use kdirect_engine::conn::ConnConfig;

use super::CliError;

/// Broker connection options common to every networked subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Bootstrap broker(s), `HOST:PORT[,HOST:PORT…]` (like kcat's -b).
    #[arg(short = 'b', long, value_name = "HOST:PORT", env = "KDIRECT_BOOTSTRAP")]
    pub bootstrap: String,
    /// request.timeout.ms
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub request_timeout_ms: u64,
}

impl ConnectArgs {
    /// Connects to the cluster.
    pub async fn connect(&self) -> Result<Cluster, CliError> {
        connect(&self.bootstrap, self.request_timeout_ms).await
    }
}

/// Connects to `bootstrap` (`HOST:PORT[,HOST:PORT…]`) with `request.timeout.ms` (the connect
/// timeout is the same, at most 10 s).
pub async fn connect(bootstrap: &str, request_timeout_ms: u64) -> Result<Cluster, CliError> {
    let mut config = ConnConfig::default();
    config.request_timeout = Duration::from_millis(request_timeout_ms);
    config.connect_timeout = Duration::from_millis(request_timeout_ms.min(10_000));
    // Cluster::connect splits comma-separated entries itself.
    Ok(Cluster::connect(&[bootstrap.to_owned()], config).await?)
}
