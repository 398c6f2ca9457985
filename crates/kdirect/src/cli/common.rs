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
    /// A setting by its Kafka name (repeatable): the security settings `security.protocol`,
    /// `sasl.mechanism`, `sasl.username`, `sasl.password`, `sasl.oauthbearer.token`,
    /// `sasl.kerberos.service.name`, `sasl.kerberos.keytab`, `sasl.kerberos.principal`,
    /// `ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`,
    /// `ssl.endpoint.identification.algorithm`, and `client.id`; `consume` takes every library
    /// setting (`-X fetch.max.wait.ms=100 -X maxOffsetsPerTrigger=5000`). Each security
    /// setting is also read from the environment as KDIRECT_ + the key upper-cased with dots
    /// as underscores (KDIRECT_SASL_PASSWORD), so that a password need not be typed on a
    /// command line; -X wins over the environment.
    #[arg(short = 'X', long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Settings from a Java properties file (`key=value` lines, `#` comments), as kcat's -F:
    /// applied before -X, so -X wins.
    #[arg(short = 'F', long = "config-file", value_name = "FILE")]
    pub config_file: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    /// Connects to the cluster.
    pub async fn connect(&self) -> Result<Cluster, CliError> {
        connect(&self.bootstrap, self.request_timeout_ms, &self.pairs()?).await
    }

    /// The settings to apply, in order: the security settings from the environment, then
    /// the `-F` file's, then each `-X KEY=VALUE`.
    pub fn settings(&self) -> Result<Vec<(String, String)>, CliError> {
        settings(&self.pairs()?)
    }

    /// The `-F` file's lines and the `-X` arguments, as `KEY=VALUE`.
    fn pairs(&self) -> Result<Vec<String>, CliError> {
        let mut out = match &self.config_file {
            Some(path) => read_properties(path)?,
            None => Vec::new(),
        };
        warn_secrets_on_command_line(&self.set);
        out.extend(self.set.iter().cloned());
        Ok(out)
    }
}

/// A secret given as `-X sasl.password=…` is readable by every user of the machine while the
/// command runs (`ps`, `/proc/PID/cmdline`) and stays in the shell's history: warned once,
/// naming the key and its environment variable, never the value.
fn warn_secrets_on_command_line(set: &[String]) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let secrets: Vec<&str> = set
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim()))
        .filter(|k| kdirect_engine::security::SECRET_KEYS.contains(k))
        .collect();
    let Some(first) = secrets.first() else {
        return;
    };
    WARNED.call_once(|| {
        tracing::warn!(
            "-X {first}=… on the command line is visible to every user of this machine (ps) \
             and kept in the shell's history: set {} in the environment, or put it in a file \
             read with -F FILE",
            env_name(first)
        );
    });
}

/// A Java properties file's `key=value` (or `key: value`) lines, comments (`#`, `!`) and
/// blank lines skipped. A line without a separator is an error naming the file and line
/// (never its text: it may hold a secret).
pub fn read_properties(path: &std::path::Path) -> Result<Vec<String>, CliError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| CliError(format!("{shown}: {e}")))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(CliError(format!(
            "{shown}: not a properties file (a regular file of at most 1 MiB)"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| CliError(format!("{shown}: {e}")))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some(at) = line.find(['=', ':']) else {
            return Err(CliError(format!("{shown}:{}: expected key=value", n + 1)));
        };
        let (k, v) = (line[..at].trim(), line[at + 1..].trim());
        out.push(format!("{k}={v}"));
    }
    Ok(out)
}

/// `KDIRECT_SASL_PASSWORD` for `sasl.password`.
pub fn env_name(key: &str) -> String {
    format!("KDIRECT_{}", key.to_ascii_uppercase().replace('.', "_"))
}

/// The security settings from the environment, then `-X KEY=VALUE` pairs.
pub fn settings(set: &[String]) -> Result<Vec<(String, String)>, CliError> {
    let mut out: Vec<(String, String)> = kdirect_engine::security::KEYS
        .iter()
        .filter_map(|k| {
            std::env::var(env_name(k))
                .ok()
                .map(|v| ((*k).to_owned(), v))
        })
        .collect();
    for kv in set {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            // Never echo the argument: it may be a secret typed without its key.
            CliError("-X takes KEY=VALUE (an argument without '=' was given)".to_owned())
        })?;
        out.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    Ok(out)
}

/// Connects to `bootstrap` (`HOST:PORT[,HOST:PORT…]`) with `request.timeout.ms` (the connect
/// timeout is the same, at most 10 s) and the connection settings of `set` (`-X`) and the
/// environment.
pub async fn connect(
    bootstrap: &str,
    request_timeout_ms: u64,
    set: &[String],
) -> Result<Cluster, CliError> {
    let mut config = ConnConfig::default();
    config.request_timeout = Duration::from_millis(request_timeout_ms);
    config.connect_timeout = Duration::from_millis(request_timeout_ms.min(10_000));
    for (k, v) in settings(set)? {
        if k == "client.id" {
            config.client_id = v;
        } else if !config.security.set(&k, &v)? {
            return Err(CliError(format!(
                "-X {k}: not a connection setting (this command takes security.protocol, \
                 sasl.*, ssl.* and client.id; consume takes every library setting)"
            )));
        }
    }
    // Cluster::connect splits comma-separated entries itself.
    Ok(Cluster::connect(&[bootstrap.to_owned()], config).await?)
}
