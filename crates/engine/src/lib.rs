//! `kdirect-engine`: everything between the sans-IO protocol layer and the user's batches.
//!
//! What it does:
//! - [`conn`]: one connection to one broker (TCP, or TLS with rustls; SASL PLAIN, SCRAM,
//!   OAUTHBEARER and, with the `gssapi` feature, GSSAPI per [`security::Security`]) — the ApiVersions handshake and version
//!   negotiation, several requests in flight matched by correlation id, `request.timeout.ms`,
//!   and failing every request in flight with the broker's name when the socket drops.
//! - [`cluster`]: the cluster view built from Metadata (brokers, topics, partitions, leaders and
//!   leader epochs), refreshed on demand, and `list_offsets` for many partitions at once, one
//!   request per leader.
//! - [`plan`]: the Direct planner, a pure state machine (rate limits, backpressure, start and
//!   data-loss policies, partition rotation): positions and end offsets in, exact ranges out.
//! - [`fetch`]: reads planned ranges exactly, within a memory budget — a sans-IO
//!   [`fetch::FetchSession`] (positions, request sizing, retry classification) and its driver
//!   [`fetch::fetch_ranges_within`] (sockets, tasks, permits, backoff).
//!   Incremental fetch sessions (KIP-227) are per-broker state the cluster keeps
//!   (`incremental.rs`, beside `conn`, so `cluster` and `fetch` do not import each other).
//! - [`group`]: consumer-group membership, the classic protocol (JoinGroup, SyncGroup,
//!   Heartbeat, LeaveGroup; the `range`, `roundrobin` and `cooperative-sticky` assignors) and
//!   KIP-848's consumer protocol: pure state machines and their drivers.
//! - [`retry`]: the one backoff (exponential, jittered) every retrying part uses.
//! - [`io`]: where the network tasks run (the caller's multi-thread runtime, or kdirect's own
//!   thread under a current-thread runtime, so that fetching goes on while a batch is processed).
//! - [`record`]: the zero-copy record-batch decoder, the hot path (sans-IO: no tokio in it).
//!
//! What it does not do: it never knows where offsets are stored (that is `kdirect-commit`, which
//! depends on this crate, never the other way round), it never parses protocol bytes itself
//! outside the record decoder (that is `kdirect-proto`), and it does not drive batches: the
//! `DirectStream` of the `kdirect` crate ties cluster, planner, fetcher and store together.
// Two audited exceptions: the decoder's 8-byte window read (`record/records.rs`, `window`), a
// bounds-checked unaligned load that the safe spellings compile to twice the instructions on
// the hot path (ARCHITECTURE.md, "Unsafe code"); and with the `gssapi` feature, the calls into
// the system's GSSAPI library (`sasl/gssapi/system.rs`). Everything else here is safe code.
#![deny(unsafe_code)]

pub mod cluster;
pub mod conn;
pub mod error;
pub mod fetch;
pub mod group;
pub(crate) mod incremental;
pub mod io;
pub mod plan;
pub mod record;
pub mod retry;
pub mod sasl;
pub mod security;
mod tls;

pub use error::{
    Error, ErrorKind, KerberosFailure, KerberosProblem, LostOffsets, SaslProblem, TlsProblem,
};
