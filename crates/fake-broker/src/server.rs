//! Broker tasks: one loopback listener per broker, one task per connection.
//!
//! A connection handles one request at a time, in order, as a Kafka broker does. A request
//! that cannot be parsed (bad frame, unknown API, unsupported version, undecodable body) closes
//! that connection with a log line on stderr; nothing a client sends can stop the process.
//!
//! With TLS, the handshake comes first on each connection (a failed one closes it); with SASL,
//! each connection keeps its [`Session`] and requests are gated by it (`api/sasl.rs`).
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]

use std::io;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
use kdirect_proto::frame::FrameDecoder;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::api;
use crate::api::sasl::{Gate, Session};
use crate::state::Shared;
use crate::wire::{encode_response, write_chunks, Chunks, WireError};

/// Largest request a fake broker accepts (Produce included).
const MAX_REQUEST_SIZE: usize = 64 * 1024 * 1024;

/// A running broker's listener task.
#[derive(Debug)]
pub(crate) struct BrokerTask {
    shutdown: watch::Sender<bool>,
    done: mpsc::Receiver<()>,
}

impl BrokerTask {
    /// Stops accepting, closes every connection, and waits until the port is released.
    pub fn stop(self) {
        let _ = self.shutdown.send(true);
        let _ = self.done.recv_timeout(std::time::Duration::from_secs(10));
    }
}

/// Starts serving `listener` as broker `id` on `handle`'s runtime.
pub(crate) fn spawn_broker(
    handle: &Handle,
    shared: Arc<Shared>,
    id: i32,
    listener: std::net::TcpListener,
) -> io::Result<BrokerTask> {
    listener.set_nonblocking(true)?;
    let listener = {
        let _guard = handle.enter();
        TcpListener::from_std(listener)?
    };
    let (shutdown, rx) = watch::channel(false);
    let (done_tx, done) = mpsc::channel();
    handle.spawn(accept_loop(shared, id, listener, rx, done_tx));
    Ok(BrokerTask { shutdown, done })
}

async fn accept_loop(
    shared: Arc<Shared>,
    id: i32,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    if let Ok(b) = shared.lock().broker_mut(id) {
                        b.connections_accepted += 1;
                    }
                    conns.spawn(accept_conn(shared.clone(), id, stream, peer, shutdown.clone()));
                }
                Err(e) => {
                    eprintln!("kdirect-fake-broker: broker {id}: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
    let _ = done.send(());
}

/// What to do after a request.
pub(crate) enum Outcome {
    Reply(Chunks),
    /// Produce with acks=0.
    NoReply,
    /// Answer, then close (a SASL refusal, as Kafka does).
    ReplyThenClose(Chunks),
    /// Fault injection: close without answering.
    Close,
}

/// The TLS handshake, if the listener speaks TLS, then the connection's requests.
async fn accept_conn(
    shared: Arc<Shared>,
    id: i32,
    stream: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(config) = shared.tls.clone() else {
        return serve(shared, id, stream, peer, shutdown).await;
    };
    let accepted = tokio::select! {
        r = tokio_rustls::TlsAcceptor::from(config).accept(stream) => r,
        _ = shutdown.changed() => return,
    };
    match accepted {
        Ok(tls) => serve(shared, id, tls, peer, shutdown).await,
        Err(e) => {
            // rustls has already sent its alert (a plaintext client reads it as bytes that
            // are not a Kafka response).
            eprintln!(
                "kdirect-fake-broker: broker {id}: closing {peer}: TLS handshake failed: {e}"
            );
            if let Ok(b) = shared.lock().broker_mut(id) {
                b.tls_handshakes_failed += 1;
            }
        }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    id: i32,
    mut stream: S,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let decoder = FrameDecoder::new(MAX_REQUEST_SIZE);
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let mut session = Session::default();
    loop {
        let frame = match decoder.decode(&mut rbuf) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                tokio::select! {
                    r = stream.read_buf(&mut rbuf) => match r {
                        Ok(0) | Err(_) => return,
                        Ok(_) => continue,
                    },
                    _ = shutdown.changed() => return,
                }
            }
            Err(e) => {
                eprintln!("kdirect-fake-broker: broker {id}: closing {peer}: {e}");
                return;
            }
        };
        let outcome = match handle_request(&shared, id, frame, &mut session, &mut shutdown).await {
            Ok(o) => o,
            Err(e) => {
                eprintln!("kdirect-fake-broker: broker {id}: closing {peer}: {e}");
                return;
            }
        };
        match outcome {
            Outcome::ReplyThenClose(chunks) => {
                let _ = write_chunks(&mut stream, &chunks).await;
                return;
            }
            Outcome::Reply(chunks) => {
                let delay = shared
                    .lock()
                    .broker(id)
                    .map(|b| b.delay)
                    .unwrap_or_default();
                if !delay.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => return,
                    }
                }
                if write_chunks(&mut stream, &chunks).await.is_err() {
                    return;
                }
            }
            Outcome::NoReply => {}
            Outcome::Close => return,
        }
    }
}

fn peek_header(frame: &[u8]) -> Result<(i16, i16, i32), WireError> {
    let [k0, k1, v0, v1, c0, c1, c2, c3, ..] = *frame else {
        return Err(WireError::new(format!(
            "request of {} bytes is shorter than a header",
            frame.len()
        )));
    };
    Ok((
        i16::from_be_bytes([k0, k1]),
        i16::from_be_bytes([v0, v1]),
        i32::from_be_bytes([c0, c1, c2, c3]),
    ))
}

async fn handle_request(
    shared: &Arc<Shared>,
    id: i32,
    frame: Bytes,
    session: &mut Session,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Outcome, WireError> {
    let (key, version, correlation_id) = peek_header(&frame)?;
    {
        let mut st = shared.lock();
        let b = st.broker_mut(id).map_err(WireError::new)?;
        b.requests += 1;
        *b.requests_by_api.entry(key).or_insert(0) += 1;
        if let Some(n) = b.drop_after.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                b.drop_after = None;
                return Ok(Outcome::Close);
            }
        }
    }
    let api_key =
        ApiKey::try_from(key).map_err(|_| WireError::new(format!("unknown API key {key}")))?;
    if api_key == ApiKey::ApiVersions {
        return api::api_versions::handle(correlation_id, version).map(Outcome::Reply);
    }
    let range = api::supported(api_key).ok_or_else(|| {
        WireError::new(format!("{api_key:?} is not implemented by the fake broker"))
    })?;
    if version < range.0 || version > range.1 {
        return Err(WireError::new(format!(
            "{api_key:?} v{version} is not supported (v{}–v{})",
            range.0, range.1
        )));
    }
    let mut body = frame;
    RequestHeader::decode(&mut body, api_key.request_header_version(version))
        .map_err(|e| WireError::new(format!("{api_key:?} v{version} header: {e}")))?;
    match api_key {
        ApiKey::SaslHandshake => {
            let req = decode(&mut body, version, api_key)?;
            let a = api::sasl::handshake(shared.sasl.as_ref(), session, &req);
            return sasl_reply(shared, id, correlation_id, version, a, false);
        }
        ApiKey::SaslAuthenticate => {
            let req = decode(&mut body, version, api_key)?;
            let now = tokio::time::Instant::now();
            let a = api::sasl::authenticate(shared.sasl.as_ref(), session, &req, version, now);
            return sasl_reply(shared, id, correlation_id, version, a, true);
        }
        _ => {}
    }
    if let Some(sasl) = &shared.sasl {
        let gate = session.gate(sasl, tokio::time::Instant::now());
        let why = match gate {
            Gate::Serve => None,
            // Kafka: "Unexpected Kafka request of type X during SASL handshake".
            Gate::Unauthenticated => Some("before SASL authentication"),
            Gate::Expired => Some("after its SASL session ended (KIP-368)"),
        };
        if let Some(why) = why {
            eprintln!("kdirect-fake-broker: broker {id}: closing a connection: {api_key:?} {why}");
            let mut st = shared.lock();
            let b = st.broker_mut(id).map_err(WireError::new)?;
            match gate {
                Gate::Expired => b.sessions_expired += 1,
                _ => b.unauthenticated_requests += 1,
            }
            return Ok(Outcome::Close);
        }
    }
    let ctx = api::Ctx {
        shared,
        broker: id,
        version,
    };
    match api_key {
        ApiKey::Fetch => {
            let req = decode(&mut body, version, api_key)?;
            api::fetch::handle(&ctx, correlation_id, req, shutdown)
                .await
                .map(Outcome::Reply)
        }
        ApiKey::Metadata => reply(
            correlation_id,
            version,
            &api::metadata::handle(&ctx, decode(&mut body, version, api_key)?),
        ),
        ApiKey::ListOffsets => reply(
            correlation_id,
            version,
            &api::list_offsets::handle(&ctx, decode(&mut body, version, api_key)?),
        ),
        ApiKey::FindCoordinator => reply(
            correlation_id,
            version,
            &api::group::find_coordinator(&ctx, decode(&mut body, version, api_key)?),
        ),
        ApiKey::OffsetCommit => reply(
            correlation_id,
            version,
            &api::group::offset_commit(&ctx, decode(&mut body, version, api_key)?),
        ),
        ApiKey::OffsetFetch => reply(
            correlation_id,
            version,
            &api::group::offset_fetch(&ctx, decode(&mut body, version, api_key)?),
        ),
        ApiKey::OffsetForLeaderEpoch => reply(
            correlation_id,
            version,
            &api::list_offsets::offset_for_leader_epoch(&ctx, decode(&mut body, version, api_key)?),
        ),
        ApiKey::Produce => {
            let req: kafka_protocol::messages::ProduceRequest =
                decode(&mut body, version, api_key)?;
            let acks = req.acks;
            let resp = api::produce::handle(&ctx, req);
            if acks == 0 {
                Ok(Outcome::NoReply)
            } else {
                reply(correlation_id, version, &resp)
            }
        }
        other => Err(WireError::new(format!("{other:?} has no handler"))),
    }
}

/// A SASL answer: counted, encoded, and the connection closed after it if refused.
fn sasl_reply<R: Encodable + HeaderVersion>(
    shared: &Arc<Shared>,
    id: i32,
    correlation_id: i32,
    version: i16,
    answer: api::sasl::Answer<R>,
    authenticate: bool,
) -> Result<Outcome, WireError> {
    {
        let mut st = shared.lock();
        let b = st.broker_mut(id).map_err(WireError::new)?;
        if answer.close {
            b.sasl_failures += 1;
        } else if authenticate {
            b.sasl_authentications += 1;
        }
    }
    let chunks = encode_response(correlation_id, version, &answer.response)?;
    Ok(if answer.close {
        Outcome::ReplyThenClose(chunks)
    } else {
        Outcome::Reply(chunks)
    })
}

fn decode<T: Decodable>(body: &mut Bytes, version: i16, key: ApiKey) -> Result<T, WireError> {
    T::decode(body, version).map_err(|e| WireError::new(format!("{key:?} v{version} body: {e}")))
}

fn reply<R: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    body: &R,
) -> Result<Outcome, WireError> {
    encode_response(correlation_id, version, body).map(Outcome::Reply)
}
