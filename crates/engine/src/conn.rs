//! One connection to one broker: TCP, or TLS over TCP.
//!
//! [`BrokerConnection::connect`] opens the socket, does the TLS handshake when
//! `security.protocol` is `SSL` or `SASL_SSL` (`tls.rs`), then the ApiVersions handshake
//! (retrying at the version the broker names when it answers `UNSUPPORTED_VERSION`, and at v0
//! when an old broker just closes the socket), then SASL authentication when it is
//! `SASL_PLAINTEXT` or `SASL_SSL` (SaslHandshake v1 and SaslAuthenticate, KIP-43/KIP-152; the
//! mechanisms are in [`crate::sasl`]). Every connection the engine opens comes here:
//! bootstrap, leaders, and the group coordinator of the Kafka offset store. The reader task is
//! generic over the read half, so a plaintext connection runs exactly the code it ran before
//! TLS existed (no dynamic dispatch, no lock around the socket).
//!
//! A SASL session with a lifetime (KIP-368: the broker's `connections.max.reauth.ms`, announced
//! in SaslAuthenticate v1+) is re-authenticated on the same connection before it ends, as the
//! Java client does: at a point between 85% and 95% of the lifetime, the next request first
//! runs SaslHandshake and SaslAuthenticate again with a fresh mechanism exchange (a new GSSAPI
//! context, a new SCRAM nonce, a fresh OAUTHBEARER token), holding the write half so that no
//! other request reaches the broker in the middle of it; responses to requests already in
//! flight still arrive and are matched as before.
//!
//! [`BrokerConnection::request`] then sends any API at the negotiated version. Several
//! requests may be in flight at once: each gets a correlation id and a waiting slot; a reader
//! task matches responses to slots. A request without an answer
//! after `request.timeout.ms` fails with [`ErrorKind::Timeout`] and, as in the Java client,
//! closes the connection (a late answer would otherwise arrive on a stream nobody trusts).
//! When the socket drops, every request in flight fails with [`ErrorKind::Disconnected`]
//! naming the broker. Large response frames (Fetch) are read straight into reused buffers
//! (`FramePool`), so steady-state fetching touches no fresh pages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kdirect_proto::api::api_versions::{self, ApiVersions, ApiVersionsOutcome};
use kdirect_proto::api::sasl_authenticate::{self, SaslAuthenticate};
use kdirect_proto::api::sasl_handshake::{self, SaslHandshake};
use kdirect_proto::frame::{FrameDecoder, SIZE_PREFIX_LEN};
use kdirect_proto::message::{decode_response, encode_request, Api};
use kdirect_proto::{BrokerVersions, ErrorCode};
use memmap2::MmapMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::client::TlsStream;

use crate::error::{BrokerName, Error, ErrorKind, SaslProblem, TlsProblem};
use crate::sasl::{Authenticator, Step};
use crate::security::Security;

/// Connection settings (Java client names).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnConfig {
    /// `client.id`, sent in every request header.
    pub client_id: String,
    /// `request.timeout.ms` (default 30 s).
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms` (default 10 s).
    pub connect_timeout: Duration,
    /// Largest response frame accepted (default 100 MiB).
    pub max_frame_size: usize,
    /// `default.api.timeout.ms` (default 60 s, as the Java client): how long an operation keeps
    /// retrying retriable errors (a broker down, a leader moving, a partition without leader)
    /// before it fails with the last one. A killed broker stays leader in the metadata until
    /// its session times out (`broker.session.timeout.ms`, 9 s), so this must outlast that.
    pub retry_timeout: Duration,
    /// `reconnect.timeout.ms`: how long a running stream keeps trying when the brokers it
    /// needs are unreachable (the whole cluster down, a network cut), with backoff, before it
    /// fails. `None` (the default) tries for as long as it runs, as a long-running consumer
    /// does; a bounded stream (an ending, `--until-latest`) uses `retry_timeout` unless this
    /// is set.
    pub reconnect_timeout: Option<Duration>,
    /// `security.protocol`, `sasl.*`, `ssl.*` (plaintext by default).
    pub security: Security,
    /// The buffers large response frames are read into, shared by the connections made with
    /// this configuration (a [`Cluster`](crate::cluster::Cluster)'s).
    pub(crate) frame_pool: Arc<FramePool>,
}

impl Default for ConnConfig {
    fn default() -> Self {
        Self {
            client_id: "kdirect".to_owned(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_frame_size: kdirect_proto::frame::DEFAULT_MAX_FRAME_SIZE,
            retry_timeout: Duration::from_secs(60),
            reconnect_timeout: None,
            security: Security::default(),
            frame_pool: Arc::default(),
        }
    }
}

type Slot = oneshot::Sender<Result<Bytes, Error>>;

struct Shared {
    broker: BrokerName,
    pending: Mutex<HashMap<i32, Slot>>,
    closed: AtomicBool,
    /// Why the connection closed, for requests that arrive after.
    close_reason: Mutex<Option<String>>,
    /// Set when the connection closed over a TLS problem (a TLS alert, a refused client
    /// certificate, a plaintext client on a TLS port): requests fail with it, typed.
    close_tls: Mutex<Option<TlsProblem>>,
    /// The SASL session (KIP-368), shared by the connection's clones.
    session: Mutex<SaslSession>,
    /// This end's address, in log lines (tells one connection from another).
    local: Option<std::net::SocketAddr>,
}

/// Where a connection's SASL session is (KIP-368).
#[derive(Debug, Default, Clone, Copy)]
struct SaslSession {
    /// The lifetime the broker announced at the last (re-)authentication.
    lifetime: Option<Duration>,
    /// When the next request re-authenticates first.
    reauth_at: Option<tokio::time::Instant>,
    /// Re-authentications done on this connection.
    reauthentications: u64,
}

/// How far into a SASL session kdirect re-authenticates: a point drawn between 85% and 95% of
/// its lifetime, as the Java client (`SaslClientAuthenticator`: 85% for latency and clock
/// drift, plus up to 10% of jitter so that many connections do not re-authenticate at once).
fn reauth_fraction() -> f64 {
    use rand::RngCore;
    0.85 + 0.10 * f64::from(rand::rngs::OsRng.next_u32()) / f64::from(u32::MAX)
}

impl Shared {
    fn session(&self) -> std::sync::MutexGuard<'_, SaslSession> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Slot>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection closed over a TLS problem and fails every request in flight with
    /// [`ErrorKind::Tls`].
    fn fail_all_tls(&self, problem: TlsProblem) {
        {
            let mut p = self
                .close_tls
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if p.is_none() {
                *p = Some(problem.clone());
            }
        }
        self.fail_all(&problem.to_string());
    }

    /// Marks the connection closed and fails every request in flight.
    fn fail_all(&self, reason: &str) {
        self.closed.store(true, Ordering::SeqCst);
        {
            let mut r = self
                .close_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if r.is_none() {
                *r = Some(reason.to_owned());
            }
        }
        let slots: Vec<Slot> = self.pending().drain().map(|(_, s)| s).collect();
        let tls = self
            .close_tls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        for slot in slots {
            let _ = slot.send(Err(if tls {
                self.disconnected()
            } else {
                ErrorKind::Disconnected {
                    broker: self.broker.clone(),
                    reason: reason.to_owned(),
                }
                .into()
            }));
        }
    }

    fn disconnected(&self) -> Error {
        if let Some(problem) = self
            .close_tls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return ErrorKind::Tls {
                broker: self.broker.clone(),
                problem,
            }
            .into();
        }
        let reason = self
            .close_reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "connection closed".to_owned());
        ErrorKind::Disconnected {
            broker: self.broker.clone(),
            reason,
        }
        .into()
    }
}

/// A connection to one broker, cheap to clone (clones share the socket).
#[derive(Clone)]
pub struct BrokerConnection {
    shared: Arc<Shared>,
    writer: Arc<tokio::sync::Mutex<Writer>>,
    next_correlation_id: Arc<AtomicI32>,
    versions: Arc<BrokerVersions>,
    config: Arc<ConnConfig>,
    reader: Arc<ReaderGuard>,
}

/// The write half of a connection: the socket's own for plaintext, a TLS stream's for TLS.
enum Writer {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

impl Writer {
    async fn write_all(&mut self, frame: &[u8]) -> std::io::Result<()> {
        match self {
            Writer::Plain(w) => w.write_all(frame).await,
            Writer::Tls(w) => {
                w.write_all(frame).await?;
                // rustls holds the encrypted records until flushed.
                w.flush().await
            }
        }
    }
}

/// Stops the reader task when the last clone of a connection is dropped.
struct ReaderGuard(tokio::task::AbortHandle);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerConnection")
            .field("broker", &self.shared.broker)
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Logs each of `warnings` once per process (every connection of a run has the same settings).
fn warn_once(warnings: Vec<String>) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if warnings.is_empty() {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    for w in warnings {
        if !warned.contains(&w) {
            tracing::warn!("{w}");
            warned.push(w);
        }
    }
}

impl BrokerConnection {
    /// Connects to `addr` and does the ApiVersions handshake.
    pub async fn connect(
        addr: &str,
        node_id: Option<i32>,
        config: &ConnConfig,
    ) -> Result<BrokerConnection, Error> {
        let broker = BrokerName {
            node_id,
            addr: addr.to_owned(),
        };
        config.security.check()?;
        warn_once(config.security.warnings(crate::tls::host_of(addr)));
        let tls = if config.security.protocol.tls() {
            Some(
                crate::tls::client_config(&config.security).map_err(|problem| ErrorKind::Tls {
                    broker: broker.clone(),
                    problem,
                })?,
            )
        } else {
            None
        };
        let conn = Self::handshake(&broker, config, tls).await?;
        if config.security.protocol.sasl() {
            return conn.authenticate().await;
        }
        Ok(conn)
    }

    /// Opens the connection and does the ApiVersions handshake.
    async fn handshake(
        broker: &BrokerName,
        config: &ConnConfig,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<BrokerConnection, Error> {
        let broker = broker.clone();
        let mut version = ApiVersions::VERSIONS.max;
        // At most: the first try, one retry at the version the broker names, one at v0.
        for _ in 0..3 {
            let conn = Self::open(&broker, config, tls.clone(), BrokerVersions::default()).await?;
            match conn.api_versions(version).await {
                Ok(ApiVersionsOutcome::Supported(resp)) => {
                    if let Some(code) = ErrorCode(resp.error_code).err() {
                        conn.close("handshake failed");
                        return Err(ErrorKind::Broker {
                            broker,
                            api: ApiVersions::KEY,
                            code,
                        }
                        .into());
                    }
                    let versions = BrokerVersions::from_response(&resp);
                    // Same socket, now with the broker's versions known.
                    return Ok(BrokerConnection {
                        versions: Arc::new(versions),
                        ..conn
                    });
                }
                Ok(ApiVersionsOutcome::RetryAt(v)) => {
                    conn.close("retrying ApiVersions at a lower version");
                    version = v;
                }
                // Brokers older than KIP-35's flexible versions close the socket on a version
                // they do not know: try once more at v0.
                Err(e) if version > 0 && matches!(e.kind(), ErrorKind::Disconnected { .. }) => {
                    version = 0;
                }
                Err(e) => return Err(e),
            }
        }
        Err(ErrorKind::Disconnected {
            broker,
            reason: "ApiVersions handshake did not settle on a version".to_owned(),
        }
        .into())
    }

    /// SASL after the ApiVersions handshake (see [`BrokerConnection::sasl_exchange`]).
    async fn authenticate(self) -> Result<BrokerConnection, Error> {
        {
            let mut w = self.writer.lock().await;
            self.sasl_exchange(&mut w, false).await?;
        }
        Ok(self)
    }

    /// Re-authenticates in place (KIP-368) with the write half held; a failure closes the
    /// connection, and the request that was about to go fails with the SASL error.
    async fn reauthenticate(&self, w: &mut Writer) -> Result<(), Error> {
        match self.sasl_exchange(w, true).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.close(&format!("SASL re-authentication failed: {e}"));
                Err(e)
            }
        }
    }

    /// The SASL exchange on this connection, with its write half `w` held: SaslHandshake v1
    /// names the mechanism, then SaslAuthenticate carries the tokens until the mechanism is
    /// done. `again`: a re-authentication of a session that the broker gave a lifetime
    /// (KIP-368), which Kafka starts with a SaslHandshake on the authenticated connection.
    async fn sasl_exchange(&self, w: &mut Writer, again: bool) -> Result<(), Error> {
        let config = self.config.clone();
        let security = &config.security;
        let mechanism = security.sasl_mechanism.map_or("?", |m| m.name());
        let broker = self.shared.broker.clone();
        let fail = |problem: SaslProblem| -> Error {
            ErrorKind::Sasl {
                broker: broker.clone(),
                mechanism,
                problem,
            }
            .into()
        };
        // A token callback gives this connection a fresh token.
        let fresh;
        let security = match (
            &security.sasl_oauthbearer_token_provider,
            security.sasl_mechanism,
        ) {
            (Some(provider), Some(crate::security::SaslMechanism::OAuthBearer)) => {
                let token = provider
                    .token()
                    .await
                    .map_err(|e| fail(SaslProblem::TokenCallback(e)))?;
                let mut s = security.clone();
                s.sasl_oauthbearer_token = Some(token);
                fresh = s;
                &fresh
            }
            _ => security,
        };
        let host = crate::tls::host_of(&broker.addr);
        let mut auth =
            Authenticator::new(security, crate::sasl::random_nonce(), host).map_err(&fail)?;
        let started = tokio::time::Instant::now();
        // v0 sends the tokens unframed; kdirect speaks only the framed v1 (Kafka 1.0+).
        let handshake_version = self.version::<SaslHandshake>().ok().filter(|v| *v >= 1);
        let auth_version = self.version::<SaslAuthenticate>().ok();
        let (Some(hv), Some(av)) = (handshake_version, auth_version) else {
            self.close("SASL not possible");
            return Err(fail(SaslProblem::Protocol(
                "the broker offers no SaslHandshake v1 and SaslAuthenticate (Kafka 1.0+): \
                 kdirect speaks only the framed SASL exchange"
                    .to_owned(),
            )));
        };
        let resp = self
            .request_on::<SaslHandshake>(w, &sasl_handshake::request(mechanism), hv)
            .await?;
        match ErrorCode(resp.error_code) {
            ErrorCode::NONE => {}
            ErrorCode::UNSUPPORTED_SASL_MECHANISM => {
                self.close("SASL mechanism not enabled");
                return Err(fail(SaslProblem::MechanismNotEnabled {
                    offered: resp.mechanisms.iter().map(|m| m.to_string()).collect(),
                }));
            }
            ErrorCode::ILLEGAL_SASL_STATE => {
                self.close("not a SASL listener");
                return Err(fail(SaslProblem::NotSaslListener(
                    ErrorCode::ILLEGAL_SASL_STATE.to_string(),
                )));
            }
            code => {
                self.close("SaslHandshake failed");
                return Err(ErrorKind::Broker {
                    broker,
                    api: SaslHandshake::KEY,
                    code,
                }
                .into());
            }
        }
        let limit = config.request_timeout;
        let mut token = match sasl_step(&mut auth, limit, |a| a.start()).await {
            Ok(token) => token,
            Err(problem) => {
                self.close("SASL exchange failed");
                return Err(fail(problem));
            }
        };
        // PLAIN and OAUTHBEARER take one round, SCRAM two, GSSAPI three; anything longer is
        // a broker bug.
        for _ in 0..5 {
            let resp = self
                .request_on::<SaslAuthenticate>(w, &sasl_authenticate::request(token), av)
                .await?;
            if let Some(code) = ErrorCode(resp.error_code).err() {
                self.close("SASL authentication failed");
                let message = resp
                    .error_message
                    .map(|m| m.to_string())
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| code.to_string());
                if security.sasl_mechanism == Some(crate::security::SaslMechanism::Gssapi) {
                    return Err(fail(SaslProblem::Refused(format!(
                        "{message} ({})",
                        crate::sasl::gssapi::REFUSED_HINT
                    ))));
                }
                return Err(fail(SaslProblem::Refused(message)));
            }
            // The lifetime counts from the broker's end of the exchange; counting from before
            // the handshake errs on the early side.
            let lifetime = (av >= 1 && resp.session_lifetime_ms > 0).then(|| {
                Duration::from_millis(u64::try_from(resp.session_lifetime_ms).unwrap_or(0))
            });
            let answer = resp.auth_bytes.to_vec();
            match sasl_step(&mut auth, limit, move |a| a.next(&answer)).await {
                Ok(Step::Send(next)) => token = next,
                Ok(Step::Done) => {
                    self.session_started(mechanism, started, lifetime, again);
                    return Ok(());
                }
                Err(problem) => {
                    self.close("SASL exchange failed");
                    return Err(fail(problem));
                }
            }
        }
        self.close("SASL exchange did not end");
        Err(fail(SaslProblem::Protocol(
            "the SASL exchange did not end after 5 rounds".to_owned(),
        )))
    }

    /// Records a finished (re-)authentication: the session's lifetime and when to
    /// re-authenticate, and says so in the log (with this end's address, which tells the
    /// connections apart).
    fn session_started(
        &self,
        mechanism: &str,
        started: tokio::time::Instant,
        lifetime: Option<Duration>,
        again: bool,
    ) {
        let n = {
            let mut session = self.shared.session();
            session.lifetime = lifetime;
            session.reauth_at = lifetime.map(|l| started + l.mul_f64(reauth_fraction()));
            if again {
                session.reauthentications += 1;
            }
            session.reauthentications
        };
        let local = self
            .shared
            .local
            .map_or_else(|| "?".to_owned(), |a| a.to_string());
        let session = lifetime.map_or_else(
            || "a session without a lifetime".to_owned(),
            |l| format!("a session of {} ms", l.as_millis()),
        );
        if again {
            tracing::debug!(
                "SASL {mechanism}: re-authenticated with {} in place (KIP-368; connection from \
                 {local}, re-authentication {n}), {session}",
                self.shared.broker
            );
        } else {
            tracing::debug!(
                "SASL {mechanism}: authenticated with {} (connection from {local}), {session}",
                self.shared.broker
            );
        }
    }

    /// The SASL session lifetime the broker announced at the last (re-)authentication
    /// (KIP-368), if any.
    pub fn sasl_session_lifetime(&self) -> Option<Duration> {
        self.shared.session().lifetime
    }

    /// How many times this connection re-authenticated in place (KIP-368).
    pub fn sasl_reauthentications(&self) -> u64 {
        self.shared.session().reauthentications
    }

    /// True once the SASL session is far enough into its lifetime that the next request
    /// re-authenticates first.
    pub fn reauthentication_due(&self) -> bool {
        self.shared
            .session()
            .reauth_at
            .is_some_and(|at| tokio::time::Instant::now() >= at)
    }

    /// Whether to send new requests on this connection: it is open. (A SASL session near its
    /// end is re-authenticated in place by the next request.)
    pub fn is_usable(&self) -> bool {
        !self.is_closed()
    }

    /// Opens the socket (and TLS) on the runtime that runs kdirect's network tasks
    /// ([`crate::io`]), where its read loop runs: a socket is driven by the runtime that
    /// opened it.
    async fn open(
        broker: &BrokerName,
        config: &ConnConfig,
        tls: Option<Arc<rustls::ClientConfig>>,
        versions: BrokerVersions,
    ) -> Result<BrokerConnection, Error> {
        let (broker, config) = (broker.clone(), config.clone());
        crate::io::run(async move { Self::open_here(&broker, &config, tls, versions).await }).await
    }

    async fn open_here(
        broker: &BrokerName,
        config: &ConnConfig,
        tls: Option<Arc<rustls::ClientConfig>>,
        versions: BrokerVersions,
    ) -> Result<BrokerConnection, Error> {
        let connect = TcpStream::connect(broker.addr.as_str());
        let stream = match tokio::time::timeout(config.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return Err(ErrorKind::Connect {
                    broker: broker.clone(),
                    source,
                }
                .into())
            }
            Err(_) => return Err(timed_out(broker, "connection", config.connect_timeout)),
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        let shared = Arc::new(Shared {
            broker: broker.clone(),
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            close_reason: Mutex::new(None),
            close_tls: Mutex::new(None),
            session: Mutex::new(SaslSession::default()),
            local,
        });
        let frames = FrameDecoder::new(config.max_frame_size);
        let pool = config.frame_pool.clone();
        let sasl = config.security.protocol.sasl();
        let (task, writer) = match tls {
            None => {
                let (read, write) = stream.into_split();
                let task = tokio::spawn(read_loop(
                    read,
                    shared.clone(),
                    frames,
                    pool.clone(),
                    false,
                    sasl,
                ));
                (task, Writer::Plain(write))
            }
            Some(tls) => {
                let handshake = crate::tls::handshake(stream, &broker.addr, tls);
                let stream = match tokio::time::timeout(config.connect_timeout, handshake).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(problem)) => {
                        return Err(ErrorKind::Tls {
                            broker: broker.clone(),
                            problem,
                        }
                        .into())
                    }
                    // Like a TCP connect timeout: retriable.
                    Err(_) => {
                        return Err(timed_out(broker, "TLS handshake", config.connect_timeout))
                    }
                };
                let (read, write) = tokio::io::split(stream);
                let task = tokio::spawn(read_loop(
                    read,
                    shared.clone(),
                    frames,
                    pool.clone(),
                    true,
                    sasl,
                ));
                (task, Writer::Tls(write))
            }
        };
        Ok(BrokerConnection {
            shared,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            next_correlation_id: Arc::new(AtomicI32::new(0)),
            versions: Arc::new(versions),
            config: Arc::new(config.clone()),
            reader: Arc::new(ReaderGuard(task.abort_handle())),
        })
    }

    async fn api_versions(&self, version: i16) -> Result<ApiVersionsOutcome, Error> {
        let frame = self
            .round_trip::<ApiVersions>(&api_versions::request(), version)
            .await?;
        api_versions::decode(frame, version)
            .map(|(_, outcome)| outcome)
            .map_err(|source| self.protocol_error(source))
    }

    /// The broker this connection talks to.
    pub fn broker(&self) -> &BrokerName {
        &self.shared.broker
    }

    /// The versions the broker advertised.
    pub fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    /// The highest version of `A` both sides speak.
    pub fn version<A: Api>(&self) -> Result<i16, Error> {
        self.versions
            .negotiate::<A>()
            .map_err(|source| self.protocol_error(source))
    }

    /// True once the socket dropped or the connection was closed.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Closes the connection; requests in flight fail with `reason`.
    pub fn close(&self, reason: &str) {
        self.reader.0.abort();
        self.shared.fail_all(reason);
    }

    /// Sends `request` at the negotiated version of `A` and decodes the answer.
    /// Returns the version used along with the response.
    pub async fn request<A: Api>(&self, request: &A::Request) -> Result<(i16, A::Response), Error> {
        let version = self.version::<A>()?;
        let resp = self.request_at::<A>(request, version).await?;
        Ok((version, resp))
    }

    /// Sends `request` at an explicit `version` and decodes the answer.
    pub async fn request_at<A: Api>(
        &self,
        request: &A::Request,
        version: i16,
    ) -> Result<A::Response, Error> {
        let frame = self.round_trip::<A>(request, version).await?;
        decode_response::<A>(frame, version)
            .map(|(_, body)| body)
            .map_err(|source| self.protocol_error(source))
    }

    /// Sends `request` at `version` and decodes the answer, waiting up to `timeout` instead of
    /// `request.timeout.ms` (JoinGroup, which the coordinator holds until the rebalance ends:
    /// up to the rebalance timeout).
    pub async fn request_within<A: Api>(
        &self,
        request: &A::Request,
        version: i16,
        timeout: Duration,
    ) -> Result<A::Response, Error> {
        let frame = self
            .round_trip_within::<A>(request, version, timeout)
            .await?;
        decode_response::<A>(frame, version)
            .map(|(_, body)| body)
            .map_err(|source| self.protocol_error(source))
    }

    /// Sends `request` and returns the raw response frame body (header included), for callers
    /// that decode it themselves.
    pub async fn round_trip<A: Api>(
        &self,
        request: &A::Request,
        version: i16,
    ) -> Result<Bytes, Error> {
        self.round_trip_within::<A>(request, version, self.config.request_timeout)
            .await
    }

    async fn round_trip_within<A: Api>(
        &self,
        request: &A::Request,
        version: i16,
        timeout: Duration,
    ) -> Result<Bytes, Error> {
        if self.is_closed() {
            return Err(self.shared.disconnected());
        }
        let (correlation_id, rx) = {
            let mut w = self.writer.lock().await;
            // Closed while this request waited for the write half (a failed
            // re-authentication, a dropped socket).
            if self.is_closed() {
                return Err(self.shared.disconnected());
            }
            if self.reauthentication_due() {
                self.reauthenticate(&mut w).await?;
            }
            self.write_on::<A>(&mut w, request, version).await?
        };
        self.answer::<A>(correlation_id, rx, timeout).await
    }

    /// Sends `request` on the write half `w` (held by the caller) and decodes the answer, within
    /// `request.timeout.ms`: the SASL exchange's requests, which nothing may come between.
    async fn request_on<A: Api>(
        &self,
        w: &mut Writer,
        request: &A::Request,
        version: i16,
    ) -> Result<A::Response, Error> {
        let (correlation_id, rx) = self.write_on::<A>(w, request, version).await?;
        let frame = self
            .answer::<A>(correlation_id, rx, self.config.request_timeout)
            .await?;
        decode_response::<A>(frame, version)
            .map(|(_, body)| body)
            .map_err(|source| self.protocol_error(source))
    }

    /// Encodes `request`, gives it a correlation id and a slot for its answer, and writes it.
    async fn write_on<A: Api>(
        &self,
        w: &mut Writer,
        request: &A::Request,
        version: i16,
    ) -> Result<(i32, oneshot::Receiver<Result<Bytes, Error>>), Error> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = encode_request::<A>(
            request,
            version,
            correlation_id,
            Some(&self.config.client_id),
        )
        .map_err(|source| self.protocol_error(source))?;
        let (tx, rx) = oneshot::channel();
        self.shared.pending().insert(correlation_id, tx);
        if let Err(e) = w.write_all(&frame).await {
            self.shared.pending().remove(&correlation_id);
            self.reader.0.abort();
            match crate::tls::io_problem(&e, crate::tls::host_of(&self.shared.broker.addr)) {
                Some(problem) => self.shared.fail_all_tls(problem),
                None => self.shared.fail_all(&format!("write failed: {e}")),
            }
            return Err(self.shared.disconnected());
        }
        Ok((correlation_id, rx))
    }

    /// Waits for the answer to the request `correlation_id` up to `timeout`, then closes the
    /// connection.
    async fn answer<A: Api>(
        &self,
        correlation_id: i32,
        rx: oneshot::Receiver<Result<Bytes, Error>>,
        timeout: Duration,
    ) -> Result<Bytes, Error> {
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.shared.disconnected()),
            Err(_) => {
                self.shared.pending().remove(&correlation_id);
                self.close(&format!(
                    "{:?} request timed out after {} ms",
                    A::KEY,
                    timeout.as_millis()
                ));
                Err(ErrorKind::Timeout {
                    broker: self.shared.broker.clone(),
                    api: A::KEY,
                    after: timeout,
                }
                .into())
            }
        }
    }

    pub fn protocol_error(&self, source: kdirect_proto::ProtoError) -> Error {
        ErrorKind::Protocol {
            broker: self.shared.broker.clone(),
            source,
        }
        .into()
    }
}

/// Frames at least this large are read straight into a reusable buffer (see [`FramePool`]).
const POOLED_FRAME_MIN: usize = 64 * 1024;
/// A transparent huge page (x86-64 and most arm64 kernels): maps at least this large ask for
/// them.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;
/// Idle pooled buffers kept, in bytes, at most (less while the memory budget the frames are
/// charged to has less room).
const POOL_MAX_IDLE_BYTES: usize = 32 << 20;

/// Reusable buffers for large response frames (Fetch responses), shared by a cluster's
/// connections.
///
/// A fetch response lives as long as the user holds the batch made of it, so a fresh buffer
/// per response means fresh pages every time: the kernel zeroes and maps each page on first
/// touch, which cost a quarter of the consumer's CPU in the end-to-end benchmark (page faults
/// under the socket read's copy). A frame read into a pooled buffer hands the buffer back when
/// its last `Bytes` view drops ([`Bytes::from_owner`]), and the next large response reuses
/// the already-mapped pages.
///
/// The buffers are anonymous memory maps, not heap allocations, and what the pool holds counts
/// against the memory budget the fetches charge their frames to ([`FramePool::make_room`]), so
/// that the resident memory of frames is what the budget allows:
/// - idle buffers are kept only while the budget has room for them (and at most
///   [`POOL_MAX_IDLE_BYTES`]), and are freed, largest first, when a fetch needs the room;
/// - a buffer freed is unmapped, its pages back to the system at once (a heap allocator keeps
///   freed multi-MiB blocks on its free lists, resident);
/// - a buffer is handed out only for a frame of at least two thirds of its size, so a live
///   frame's resident size stays close to what it is charged.
///
/// (With heap buffers and an idle pool bounded only by size, peak RSS on Kafka at 64
/// partitions reached budget + 70 MiB once the prefetch kept its whole share of the budget
/// while the caller processed a batch; docs/bench.md.)
#[derive(Default)]
pub(crate) struct FramePool {
    idle: Mutex<Vec<MmapMut>>,
    /// The budget the frames are charged to: idle buffers fit in its free room.
    budget: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("idle_bytes", &self.idle_bytes())
            .finish()
    }
}

impl FramePool {
    /// A zeroed-or-reused buffer of at least `size` bytes: the smallest idle one that fits
    /// without more than half of `size` to spare, else a new map (freeing the largest idle
    /// buffer that is too small, so the pool does not grow). The error is the system's refusal
    /// to map `size` bytes.
    fn take(&self, size: usize) -> std::io::Result<MmapMut> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let fit = idle
            .iter()
            .enumerate()
            .filter(|(_, b)| fits_frame(b.len(), size))
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = fit {
            return Ok(idle.swap_remove(i));
        }

        if let Some(i) = idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() < size)
            .max_by_key(|(_, b)| b.len())
            .map(|(i, _)| i)
        {
            drop(idle.swap_remove(i));
        }
        drop(idle);
        let map = MmapMut::map_anon(size_class(size))?;
        // Transparent huge pages where the system leaves them to the program (`madvise`
        // mode): a multi-MiB frame then costs a few page faults instead of hundreds (halved
        // the faults of the 64-partition run from Kafka). A refusal only costs those faults.
        #[cfg(target_os = "linux")]
        if size >= HUGE_PAGE {
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Ok(map)
    }

    /// Keeps `buf` for reuse if it fits the idle bound and the budget's free room; else
    /// unmaps it.
    fn give(&self, buf: MmapMut) {
        // The buffer's own bytes count as room: the budget permit charged for its frame is
        // released with it (the chunk or carried batch holding the frame drops its views
        // first, then the permit), so keeping it adds nothing to what is resident. Counting
        // the room without it unmapped almost every frame when the budget was busy (the
        // prefetch holding its half), and the next response faulted in fresh pages.
        let limit = POOL_MAX_IDLE_BYTES.min(self.free_room().saturating_add(buf.len()));
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if bytes_of(&idle).saturating_add(buf.len()) <= limit {
            idle.push(buf);
        }
    }

    /// Before a fetch charges `n` bytes to `budget`: from now on idle buffers fit in that
    /// budget's free room, and those beyond the room left after `n` are freed, largest first.
    pub(crate) fn make_room(&self, budget: &Arc<tokio::sync::Semaphore>, n: usize) {
        {
            let mut b = self.budget.lock().unwrap_or_else(PoisonError::into_inner);
            if !b.as_ref().is_some_and(|b| Arc::ptr_eq(b, budget)) {
                *b = Some(budget.clone());
            }
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // The buffer the frame of this reservation will be read into (the one `take` picks
        // for a frame of `n` bytes) is part of the `n` charged, not beside it: freeing it to
        // make room, then mapping a fresh one for the frame, faulted in fresh pages for most
        // frames once batches filled the budget (three quarters of the consumer's page
        // faults at 64 partitions of 1 MB stored batches).
        let reused = idle
            .iter()
            .filter(|b| fits_frame(b.len(), n))
            .map(|b| b.len())
            .min()
            .unwrap_or(0);
        let keep = budget
            .available_permits()
            .saturating_sub(n)
            .saturating_add(reused);
        let mut held = bytes_of(&idle);
        if held <= keep {
            return;
        }
        // Free the largest first, but never the one the frame will use.
        idle.sort_unstable_by_key(|b| b.len());
        let mut spared = None;
        while held > keep {
            let Some(largest) = idle.pop() else { break };
            if spared.is_none() && largest.len() == reused && reused > 0 {
                spared = Some(largest);
                continue;
            }
            held -= largest.len();
        }
        idle.extend(spared);
    }

    /// The free room of the budget the frames are charged to (unbounded before any fetch).
    fn free_room(&self) -> usize {
        self.budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(usize::MAX, |b| b.available_permits())
    }

    fn idle_bytes(&self) -> usize {
        bytes_of(&self.idle.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The size a new buffer for a frame of `size` bytes is mapped at: the smallest of 2^k and
/// 1.5 × 2^k (k ≥ 16) that holds it, so that frames of about the same size (a response per
/// round, whose size varies with the stored batches in it) find each other's buffers: mapped
/// at their exact sizes, a frame a few bytes larger than every idle buffer mapped fresh pages
/// (most frames, at 64 partitions of 1 MB stored batches). A class is at most 1.5 × the frame,
/// as [`fits_frame`] allows.
fn size_class(size: usize) -> usize {
    let pow = size.max(1 << 16).next_power_of_two();
    let three_quarters = pow / 4 * 3;
    if size <= three_quarters {
        three_quarters
    } else {
        pow
    }
}

/// Whether a pooled buffer of `len` bytes is handed out for a frame of `size` bytes: it holds
/// the frame with at most half the frame's size to spare.
fn fits_frame(len: usize, size: usize) -> bool {
    len >= size && len - size <= size / 2
}

/// The bytes `buffers` hold.
fn bytes_of(buffers: &[MmapMut]) -> usize {
    buffers.iter().map(|b| b.len()).sum()
}

/// A frame body in a pooled buffer (its first `len` bytes); goes back to the pool when the
/// last view drops.
struct PooledFrame {
    body: Option<MmapMut>,
    len: usize,
    pool: Arc<FramePool>,
}

impl AsRef<[u8]> for PooledFrame {
    fn as_ref(&self) -> &[u8] {
        self.body
            .as_ref()
            .and_then(|b| b.get(..self.len))
            .unwrap_or(&[])
    }
}

impl Drop for PooledFrame {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            self.pool.give(body);
        }
    }
}

/// Hands a response frame to the request waiting for it; false when the connection must close.
fn deliver(shared: &Shared, frame: Bytes) -> bool {
    let Some(cid) = kdirect_proto::message::peek_correlation_id(&frame) else {
        shared.fail_all("response shorter than its header");
        return false;
    };
    let slot = shared.pending().remove(&cid);
    match slot {
        Some(slot) => {
            let _ = slot.send(Ok(frame));
            true
        }
        // A response to a request that timed out is dropped by closing the connection before
        // it can arrive; anything else is a broker bug.
        None => {
            shared.fail_all(&format!("response with unknown correlation id {cid}"));
            false
        }
    }
}

/// A TLS record header's first bytes: an alert (21) of TLS 1.x (3, x). A plaintext client
/// reads them as the start of a frame size.
fn looks_like_tls_alert(buf: &[u8]) -> bool {
    buf.len() >= 2 && buf[0] == 0x15 && buf[1] == 0x03
}

/// Reads frames off the socket (or TLS stream) until it closes. Generic over the read half, so
/// the plaintext connection's loop is compiled for `OwnedReadHalf` as before TLS existed.
async fn read_loop<R: AsyncRead + Unpin>(
    mut read: R,
    shared: Arc<Shared>,
    frames: FrameDecoder,
    pool: Arc<FramePool>,
    tls: bool,
    sasl: bool,
) {
    let host = crate::tls::host_of(&shared.broker.addr).to_owned();
    let tls_problem = |e: &std::io::Error| {
        if tls {
            crate::tls::io_problem(e, &host)
        } else {
            None
        }
    };

    let mut buf = BytesMut::with_capacity(64 * 1024);
    // Responses handed over: a broker that closes right after the first one (ApiVersions) is
    // most likely a SASL listener refusing an unauthenticated request.
    let mut delivered: u64 = 0;
    let reason = loop {
        // Hand out every whole frame already buffered; stop at a large incomplete one.
        let mut large: Option<usize> = None;
        loop {
            if let Ok(Some(size)) = frames.peek_size(&buf) {
                if size >= POOLED_FRAME_MIN && buf.len() < SIZE_PREFIX_LEN + size {
                    large = Some(size);
                    break;
                }
            }
            match frames.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if !deliver(&shared, frame) {
                        return;
                    }
                    delivered += 1;
                }
                Ok(None) => break,
                Err(_) if !tls && looks_like_tls_alert(&buf) => {
                    shared.fail_all_tls(TlsProblem::PortSpeaksTls);
                    return;
                }
                Err(e) => {
                    let err = ErrorKind::Frame {
                        broker: shared.broker.clone(),
                        source: e,
                    };
                    shared.fail_all(&err.to_string());
                    return;
                }
            }
        }
        if let Some(size) = large {
            // The rest of a large frame goes straight into a pooled buffer: one copy from the
            // socket, into pages that are already mapped.
            let mut body = match pool.take(size) {
                Ok(b) => b,
                Err(e) => break format!("cannot map {size} bytes for a response: {e}"),
            };
            let mut len = buf.len() - SIZE_PREFIX_LEN;
            if let (Some(to), Some(from)) = (body.get_mut(..len), buf.get(SIZE_PREFIX_LEN..)) {
                to.copy_from_slice(from);
            }
            buf.clear();
            let mut failed = None;
            while len < size {
                let Some(room) = body.get_mut(len..size) else {
                    break;
                };
                match read.read(room).await {
                    Ok(0) => {
                        failed = Some(format!(
                            "closed by the broker in the middle of a response ({len} of {size} \
                             bytes read)"
                        ));
                        break;
                    }
                    Ok(n) => len += n,
                    Err(e) => {
                        if let Some(problem) = tls_problem(&e) {
                            shared.fail_all_tls(problem);
                            return;
                        }
                        failed = Some(format!("read failed: {e}"));
                        break;
                    }
                }
            }
            if let Some(reason) = failed {
                break reason;
            }
            let frame = Bytes::from_owner(PooledFrame {
                body: Some(body),
                len: size,
                pool: pool.clone(),
            });
            if !deliver(&shared, frame) {
                return;
            }
            delivered += 1;
            continue;
        }
        if buf.capacity() - buf.len() < 8 * 1024 {
            buf.reserve(64 * 1024);
        }
        let got = match read.read_buf(&mut buf).await {
            // A TLS peer that closes without close_notify (rustls reports an unexpected EOF)
            // has closed all the same: say why as for a clean close.
            Err(e) if tls && e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
            other => other,
        };
        match got {
            Ok(0) => {
                if !tls && looks_like_tls_alert(&buf) {
                    shared.fail_all_tls(TlsProblem::PortSpeaksTls);
                    return;
                }
                break if buf.is_empty() && delivered == 1 && !sasl {
                    "closed by the broker after the ApiVersions handshake, as a SASL listener \
                     does to a client that does not authenticate: if this port is SASL, set \
                     security.protocol=SASL_PLAINTEXT or SASL_SSL and sasl.mechanism"
                        .to_owned()
                } else if buf.is_empty() {
                    "closed by the broker".to_owned()
                } else {
                    format!(
                        "closed by the broker in the middle of a response ({} bytes buffered)",
                        buf.len()
                    )
                };
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(problem) = tls_problem(&e) {
                    shared.fail_all_tls(problem);
                    return;
                }
                break format!("read failed: {e}");
            }
        }
    };
    shared.fail_all(&reason);
}

/// One step of a SASL exchange: in place, or on a thread of its own for a mechanism that may
/// block (GSSAPI's library reads files and asks the KDC), within `limit`
/// (`request.timeout.ms`: a KDC that does not answer fails the connection, as a broker
/// would). Not tokio's blocking pool: a runtime waits for its blocking tasks when it is
/// dropped, so a library call stuck on a silent KDC (MIT gives up after about 25 s) would
/// hold up the exit of a program that already failed; a detached thread is left to finish.
async fn sasl_step<T: Send + 'static>(
    auth: &mut Authenticator,
    limit: Duration,
    step: impl FnOnce(&mut Authenticator) -> Result<T, SaslProblem> + Send + 'static,
) -> Result<T, SaslProblem> {
    if !auth.may_block() {
        return step(auth);
    }
    // The exchange moves to the thread and back; a step that does not come back in time
    // leaves it there (the library call cannot be interrupted), and the connection fails.
    let placeholder = Authenticator::done();
    let mut moved = std::mem::replace(auth, placeholder);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("kdirect-gssapi".to_owned())
        .spawn(move || {
            let result = step(&mut moved);
            let _ = tx.send((moved, result));
        })
        .map_err(|e| SaslProblem::Protocol(format!("cannot start a thread for SASL: {e}")))?;
    match tokio::time::timeout(limit, rx).await {
        Ok(Ok((back, result))) => {
            *auth = back;
            result
        }
        Ok(Err(_)) => Err(SaslProblem::Protocol(
            "the SASL step's thread ended without an answer (a panic in the mechanism)".to_owned(),
        )),
        Err(_) => Err(SaslProblem::Kerberos(crate::error::KerberosProblem {
            failure: crate::error::KerberosFailure::KdcUnreachable,
            step: "gss_init_sec_context",
            principal: None,
            major: 0,
            minor: 0,
            status: format!(
                "the GSSAPI library did not finish within request.timeout.ms ({} ms): a \
                 KDC that does not answer?",
                limit.as_millis()
            ),
        })),
    }
}

/// `connect.timeout` ran out before `what` was done: a (retriable) connect error naming the
/// broker and the timeout.
fn timed_out(broker: &BrokerName, what: &str, after: Duration) -> Error {
    ErrorKind::Connect {
        broker: broker.clone(),
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no {what} after {} ms", after.as_millis()),
        ),
    }
    .into()
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    fn map(n: usize) -> MmapMut {
        MmapMut::map_anon(n).unwrap()
    }

    #[test]
    fn a_frame_buffer_goes_back_to_the_pool_and_is_reused() {
        let pool = Arc::new(FramePool::default());
        let mut body = pool.take(100_000).unwrap();
        let ptr = body.as_ptr();
        body.fill(7);
        let frame = Bytes::from_owner(PooledFrame {
            body: Some(body),
            len: 99_000,
            pool: pool.clone(),
        });
        assert_eq!(
            frame.len(),
            99_000,
            "the frame is the buffer's first len bytes"
        );
        let view = frame.slice(10..20);
        drop(frame);
        // A view still holds the buffer.
        assert_eq!(pool.idle_bytes(), 0);
        assert_eq!(&view[..], &[7u8; 10]);
        drop(view);
        let again = pool.take(90_000).unwrap();
        assert_eq!(again.as_ptr(), ptr, "the idle buffer is reused");
        assert_eq!(again.len(), size_class(100_000));
    }

    #[test]
    fn the_pool_frees_a_buffer_too_small_and_bounds_idle_bytes() {
        let pool = FramePool::default();
        pool.give(map(1000));
        let big = pool.take(5000).unwrap();
        assert_eq!(big.len(), size_class(5000));
        assert_eq!(pool.idle_bytes(), 0, "the small one was freed");
        for _ in 0..3 {
            pool.give(map(POOL_MAX_IDLE_BYTES / 2));
        }
        assert_eq!(pool.idle.lock().unwrap().len(), 2);
    }

    /// A pooled buffer far larger than the frame would be resident beyond what the frame is
    /// charged: it stays idle and the frame gets a buffer of its own size.
    #[test]
    fn a_buffer_much_larger_than_the_frame_is_not_handed_out() {
        let pool = FramePool::default();
        pool.give(map(100_000));
        let small = pool.take(60_000).unwrap();
        assert_eq!(small.len(), size_class(60_000));
        assert_eq!(pool.idle_bytes(), 100_000);
        let close = pool.take(70_000).unwrap();
        assert_eq!(close.len(), 100_000, "within half of the frame: reused");
        assert_eq!(pool.idle_bytes(), 0);
    }

    /// Idle buffers live within the free room of the budget the frames are charged to: a
    /// buffer given back as its frame's permit is released counts its own bytes as room, one
    /// given back while others hold the budget is freed, and a fetch about to charge the budget
    /// frees idle buffers (largest first) down to the room it leaves, except the one its frame
    /// will be read into (part of what it charges).
    #[test]
    fn idle_buffers_fit_in_the_budgets_free_room() {
        let pool = FramePool::default();
        let budget = Arc::new(tokio::sync::Semaphore::new(1_000_000));
        pool.make_room(&budget, 0);
        for n in [600_000, 300_000] {
            let permit = budget.clone().try_acquire_many_owned(n as u32).unwrap();
            pool.give(map(n));
            drop(permit);
        }
        assert_eq!(pool.idle_bytes(), 900_000);
        let held = budget.clone().try_acquire_many_owned(900_000).unwrap();
        pool.give(map(200_000));
        assert_eq!(
            pool.idle_bytes(),
            900_000,
            "no room while others hold the budget"
        );
        drop(held);
        // A frame of 550k will be read into the 600k buffer: nothing is freed for it.
        pool.make_room(&budget, 550_000);
        assert_eq!(
            pool.idle_bytes(),
            900_000,
            "the buffer the frame will use is kept"
        );
        // No idle buffer fits a 900k frame: freed, largest first, down to the 100k left.
        pool.make_room(&budget, 900_000);
        assert_eq!(pool.idle_bytes(), 0);
    }

    #[test]
    fn size_classes_are_at_most_half_again_the_frame() {
        for size in [
            1, 1000, 65_536, 65_537, 98_304, 98_305, 1_048_451, 3_145_880, 14_680_682,
        ] {
            let class = size_class(size);
            assert!(class >= size, "{size}");
            assert!(
                size < 1 << 16 || fits_frame(class, size),
                "{size} -> {class}"
            );
        }
        assert_eq!(size_class(1_048_451), 1_048_576);
        assert_eq!(size_class(1_048_577), 1_572_864);
        assert_eq!(size_class(3_145_880), 4_194_304);
    }
}

#[cfg(test)]
mod reauth_tests {
    /// KIP-368 as the Java client: 85% of the session for latency and clock drift, plus up to
    /// 10% of jitter.
    #[test]
    fn reauthentication_comes_between_85_and_95_percent_of_the_session() {
        let fractions: Vec<f64> = (0..1000).map(|_| super::reauth_fraction()).collect();
        assert!(fractions.iter().all(|f| (0.85..=0.95).contains(f)));
        assert!(fractions.iter().any(|f| *f < 0.87) && fractions.iter().any(|f| *f > 0.93));
    }
}
