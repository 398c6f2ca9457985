//! A consumer group's coordinator, reached one way by everything that talks to it (both
//! protocols' members, [`describe_group`](super::describe_group) and the `kafka` offset
//! store): found with FindCoordinator through any live broker, reached over a connection of
//! the caller's own, and retried by time with jitter.
//!
//! The connection is the caller's own, never the cluster's shared one: a broker answers a
//! connection's requests in order, the coordinator holds JoinGroup for up to the rebalance
//! timeout, and the stream's connection to the same broker may be holding a long-poll Fetch
//! (`fetch.max.wait.ms`) that a commit or a heartbeat must not wait behind.
//!
//! Retries follow one policy: an attempt that fails retriably (a lost connection, a
//! coordinator that moved or is loading, a transient code) forgets the connection, waits
//! [`crate::retry::backoff`] (100 ms doubled per attempt up to 2 s, ±20 % jitter, so members
//! that failed together do not retry together), looks the coordinator up again and tries
//! again, until `default.api.timeout.ms` ([`ConnConfig::retry_timeout`](crate::conn::ConnConfig))
//! has passed since the first failure. The clock is tokio's, so tests run it in paused time.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::Error;

/// How one attempt against the coordinator ended, when it did not succeed.
#[derive(Debug)]
pub enum Attempt<E> {
    /// Forget the coordinator, wait, look it up again and retry (within the retry budget).
    Retry(E),
    /// Give up now with this error.
    Fatal(E),
}

impl Attempt<Error> {
    /// An engine error, retried when it is retriable ([`Error::is_retriable`]).
    pub fn of(e: Error) -> Attempt<Error> {
        if e.is_retriable() {
            Attempt::Retry(e)
        } else {
            Attempt::Fatal(e)
        }
    }
}

/// An error that can say it was the last of several attempts.
pub trait GiveUp: Sized {
    /// This error, as the last of `attempts` failed attempts over `elapsed`.
    fn gave_up(self, attempts: u32, elapsed: Duration) -> Self;
}

impl GiveUp for Error {
    fn gave_up(self, attempts: u32, elapsed: Duration) -> Error {
        Error::gave_up(self, attempts, elapsed)
    }
}

/// The coordinator of one group: see the module docs.
#[derive(Debug)]
pub struct Coordinator {
    cluster: Arc<Cluster>,
    group: String,
    conn: tokio::sync::Mutex<Option<BrokerConnection>>,
    /// The first backoff (doubled per retry up to [`BACKOFF_CAP`]).
    backoff: Duration,
}

/// The longest wait between two attempts.
const BACKOFF_CAP: Duration = Duration::from_secs(2);

impl Coordinator {
    /// The coordinator of `group` on `cluster` (nothing is looked up until it is needed).
    pub fn new(cluster: Arc<Cluster>, group: &str) -> Coordinator {
        Coordinator {
            cluster,
            group: group.to_owned(),
            conn: tokio::sync::Mutex::new(None),
            backoff: Duration::from_millis(100),
        }
    }

    /// The first wait between retries (default 100 ms; doubled per retry up to 2 s).
    pub fn with_backoff(mut self, backoff: Duration) -> Coordinator {
        self.backoff = backoff;
        self
    }

    /// The cluster.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// A connection to the coordinator: the one kept from before while it is usable, else the
    /// coordinator is looked up (FindCoordinator) and a new connection opened to it.
    pub async fn connection(&self) -> Result<BrokerConnection, Error> {
        let mut kept = self.conn.lock().await;
        if let Some(c) = kept.as_ref().filter(|c| c.is_usable()) {
            return Ok(c.clone());
        }
        let (node, addr) = self.cluster.find_coordinator(&self.group).await?;
        let conn = BrokerConnection::connect(&addr, Some(node), self.cluster.config()).await?;
        *kept = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection: the next [`connection`](Self::connection) looks the
    /// coordinator up again (it moved, or the connection failed).
    pub async fn forget(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs `op` against the coordinator until it succeeds, fails fatally, or the retry budget
    /// is spent (see the module docs); `what` names the operation in the log. A lookup or
    /// connection failure is an attempt too, turned into the caller's error by `lookup`. The
    /// error that ends the retries is the last one, marked with [`GiveUp::gave_up`].
    pub async fn retry<T, E, F, Fut>(
        &self,
        what: &str,
        lookup: impl Fn(Error) -> E,
        mut op: F,
    ) -> Result<T, E>
    where
        E: GiveUp + Display,
        F: FnMut(BrokerConnection) -> Fut,
        Fut: Future<Output = Result<T, Attempt<E>>>,
    {
        let limit = self.cluster.config().retry_timeout;
        let mut first_failure: Option<Instant> = None;
        let mut attempts = 0u32;
        loop {
            let outcome = match self.connection().await {
                Ok(conn) => op(conn).await,
                Err(e) if e.is_retriable() => Err(Attempt::Retry(lookup(e))),
                Err(e) => Err(Attempt::Fatal(lookup(e))),
            };
            let e = match outcome {
                Ok(v) => return Ok(v),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e)) => e,
            };
            self.forget().await;
            attempts += 1;
            let since = *first_failure.get_or_insert_with(Instant::now);
            let elapsed = since.elapsed();
            if elapsed >= limit {
                return Err(e.gave_up(attempts, elapsed));
            }
            let wait = crate::retry::backoff(self.backoff, attempts, BACKOFF_CAP);
            tracing::warn!(
                group = self.group.as_str(),
                attempt = attempts,
                "{what}: {e}; retrying in {} ms",
                wait.as_millis()
            );
            tokio::time::sleep(wait).await;
        }
    }
}
