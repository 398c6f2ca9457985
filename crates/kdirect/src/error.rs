//! The facade's one error type: what a [`DirectStream`](crate::DirectStream) loop meets, so
//! that the loop is `?` only.
use kdirect_engine::ErrorKind;

/// An error from a [`DirectStream`](crate::DirectStream): the engine's (a broker, a fetch, a
/// plan, a decode), the offset store's, or a call out of order.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the engine: connections, metadata, ListOffsets, Fetch, planning.
    #[error(transparent)]
    Engine(#[from] kdirect_engine::Error),
    /// From the offset store: load, plan log, commit (a compare-and-set conflict included).
    #[error(transparent)]
    Store(#[from] kdirect_commit::StoreError),
    /// A record batch that does not decode (the fetcher checked its CRC; this is a malformed
    /// record inside it).
    #[error(transparent)]
    Decode(#[from] kdirect_engine::record::DecodeError),
    /// The stream was used in an order that would break its guarantees (for example, asking
    /// for the next batch while one handed out is not committed yet).
    #[error("{0}")]
    Misuse(String),
}

impl Error {
    /// The engine's error kind, when the error came from the engine.
    pub fn engine_kind(&self) -> Option<&ErrorKind> {
        match self {
            Error::Engine(e) => Some(e.kind()),
            _ => None,
        }
    }
}
