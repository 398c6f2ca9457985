//! Errors of the fake broker's control API.
//!
//! These are errors a *test* makes (an unknown topic, a malformed batch handed to
//! `append_batch`, a port that cannot be bound). Errors a *client* makes on the wire never
//! surface here: the broker answers them with a Kafka error code, or closes that one connection
//! with a log line.

use std::io;

/// An error from the fake broker's control API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeError {
    /// No such topic.
    #[error("unknown topic {topic:?}")]
    UnknownTopic {
        /// The topic asked for.
        topic: String,
    },
    /// The topic exists but has no such partition.
    #[error("topic {topic:?} has no partition {partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
    },
    /// No such broker id.
    #[error("unknown broker id {broker}")]
    UnknownBroker {
        /// The broker id asked for.
        broker: i32,
    },
    /// A topic was declared twice.
    #[error("topic {topic:?} already exists")]
    TopicExists {
        /// The topic.
        topic: String,
    },
    /// Bytes handed to `append_batch` are not a well-formed v2 record batch.
    #[error("malformed record batch at byte {position}: {reason}")]
    MalformedBatch {
        /// Byte position of the batch within the bytes handed in.
        position: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Encoding records into a batch failed (kafka-protocol's encoder).
    #[error("cannot encode a record batch: {0}")]
    Encode(String),
    /// A transaction was used after it was committed or aborted, or on another cluster.
    #[error("transaction of producer {producer_id} is not open")]
    TransactionClosed {
        /// The transaction's producer id.
        producer_id: i64,
    },
    /// Binding or accepting on a broker's listener failed.
    #[error("broker {broker}: {source}")]
    Io {
        /// The broker id.
        broker: i32,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The broker is already running / already stopped.
    #[error("broker {broker} is {state}")]
    BrokerState {
        /// The broker id.
        broker: i32,
        /// "running" or "stopped".
        state: &'static str,
    },
    /// The TLS certificates or configuration could not be made.
    #[error("TLS: {0}")]
    Tls(String),
    /// The cluster's runtime is gone (the cluster was shut down).
    #[error("the fake cluster has shut down")]
    ShutDown,
}
