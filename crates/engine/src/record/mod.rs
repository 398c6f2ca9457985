//! The zero-copy record-batch decoder: kdirect's hot path.
//!
//! Turns the `records` bytes of a Fetch response partition (concatenated record batches) into
//! batch views and record views that borrow from the buffer. Sans-IO: no tokio, no sockets, no
//! clocks; bytes in, views out.
//!
//! Implements the magic v2 record batch of KIP-98 (Kafka protocol guide, "Record Batch"),
//! with headers (KIP-82), the codecs of KIP-110 (zstd) and earlier (gzip, snappy, lz4; lz4 in the
//! standard frame format per KIP-57), and the read_committed filtering of KIP-98 as the Java
//! client's `CompletedFetch` does it.
//!
//! # Layers
//! - [`varint`](self) (private): zigzag varint / varlong readers over `&[u8]`.
//! - [`Batches`]: walks the batch frames of a buffer, checks CRC32C (once per batch, optional),
//!   yields [`RecordBatch`] views (the header plus the batch's bytes as a `Bytes` slice, no copy). A
//!   truncated final batch ends the walk; it is not an error ([`Tail::Truncated`]).
//! - [`RecordBatch::records`] / [`Records`]: the records of one batch, as [`Record`] views borrowing
//!   from the fetch buffer (uncompressed) or from a reused [`Scratch`] buffer (compressed). No
//!   heap allocation per record. Headers are an ordered list, duplicate keys kept ([`Headers`]).
//! - [`RecordBatchReader`]: fetch semantics on top: skip records below the fetch offset, stop
//!   before `until`, drop control batches (advancing the position), read_committed filtering
//!   with the broker's aborted transactions, and the offset where the next fetch starts
//!   ([`RecordBatchReader::next_offset`]).
//!
//! # What it decodes, and what it refuses
//! - Magic v2 record batches only. Legacy message sets (magic v0/v1, Kafka < 0.11) give the
//!   typed error [`DecodeErrorKind::LegacyMessageSet`] with the byte position and the offset:
//!   kdirect speaks Fetch v4+ against brokers that store v2 batches; Kafka 3.0 deprecated the
//!   old formats and 4.0 removed them (KIP-724). A partition still holding v0/v1 data must be
//!   read with another client.
//! - Every length and count read from the wire is checked against the bytes that remain before
//!   it is used; decompressed output is bounded by [`DecodeOptions::max_decompressed`]. Malformed
//!   input yields a [`DecodeError`] carrying the byte position, the batch's base offset and what
//!   failed. A record whose offset is not above the previous record's or lies past the batch's
//!   lastOffsetDelta is [`DecodeErrorKind::BadOffsetDelta`] (gaps from compaction are fine). No
//!   panics on wire data (indexing and unwraps are denied in this module by lint), and
//!   every loop consumes input or ends.
//!
//! # Example
//! ```
//! use bytes::Bytes;
//! use kdirect_engine::record::{DecodeOptions, RecordBatchReader};
//!
//! # fn demo(records: Bytes) -> Result<(), kdirect_engine::record::DecodeError> {
//! let mut reader = RecordBatchReader::new(records, DecodeOptions::new().fetch_offset(42));
//! while let Some(batch) = reader.next_batch()? {
//!     for record in reader.records(&batch)? {
//!         let record = record?;
//!         let _ = (record.offset(), record.key(), record.value());
//!         for header in record.headers() {
//!             let _ = (header.key(), header.value());
//!         }
//!     }
//! }
//! let _resume_at = reader.next_offset();
//! # Ok(()) }
//! # demo(Bytes::new()).unwrap();
//! ```
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]

mod batch;
mod compression;
mod crc;
mod error;
mod owned;
mod reader;
mod records;
mod txn;
mod varint;

#[cfg(test)]
mod tests;

pub use batch::{
    Attributes, BatchHeader, Batches, RecordBatch, Tail, TimestampType, BATCH_HEADER_LEN,
};
pub use compression::{Compression, Scratch};
pub use crc::crc32c;
pub use error::{DecodeError, DecodeErrorKind, Field};
pub use kdirect_proto::IsolationLevel;
pub use owned::{OwnedHeader, OwnedRecord};
pub use reader::{DecodeOptions, RecordBatchReader};
pub use records::{Header, Headers, Record, Records};
pub use txn::{AbortedTransaction, ControlRecordType};
