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
    Engine(kdirect_engine::Error),
    /// From the offset store: load, plan log, commit (a compare-and-set conflict included).
    #[error(transparent)]
    Store(#[from] kdirect_commit::StoreError),
    /// Record data that does not decode: the engine's [`ErrorKind::Decode`], which names the
    /// broker, the topic and partition, the batch's offset and the byte position.
    #[error(transparent)]
    Decode(kdirect_engine::Error),
    /// From a sink ([`crate::sink`]): writing or committing a batch's output.
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    /// The stream was used in an order that would break its guarantees (for example, asking
    /// for the next batch while one handed out is not committed yet).
    #[error("{0}")]
    Misuse(String),
}

impl From<kdirect_engine::Error> for Error {
    fn from(e: kdirect_engine::Error) -> Self {
        match e.kind() {
            ErrorKind::Decode { .. } => Error::Decode(e),
            _ => Error::Engine(e),
        }
    }
}

impl Error {
    /// The engine's error kind, when the error came from the engine (decode errors
    /// included).
    pub fn engine_kind(&self) -> Option<&ErrorKind> {
        match self {
            Error::Engine(e) | Error::Decode(e) => Some(e.kind()),
            _ => None,
        }
    }
}
