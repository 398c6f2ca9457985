//! Building and inspecting v2 record batches (protocol guide, "Record Batch").
//!
//! Batches are built with kafka-protocol's `RecordBatchEncoder`, so the fake broker serves bytes
//! written by an encoder kdirect did not write. The broker itself only reads batch *headers*: it
//! never decompresses a batch on the fetch path.

use std::str::FromStr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::error::FakeError;

/// Size of the v2 batch header, records excluded.
pub const BATCH_HEADER_LEN: usize = 61;
/// `baseOffset` (8) + `batchLength` (4): the part of the header outside `batchLength`.
pub(crate) const LOG_OVERHEAD: usize = 12;

/// Compression codec of a batch (attributes bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Codec {
    /// No compression.
    #[default]
    None,
    /// gzip.
    Gzip,
    /// snappy (xerial framing, as the Java producer writes it).
    Snappy,
    /// lz4 frame format.
    Lz4,
    /// zstd.
    Zstd,
}

impl Codec {
    /// All codecs, for tests that loop over them.
    pub const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    fn compression(self) -> Compression {
        match self {
            Codec::None => Compression::None,
            Codec::Gzip => Compression::Gzip,
            Codec::Snappy => Compression::Snappy,
            Codec::Lz4 => Compression::Lz4,
            Codec::Zstd => Compression::Zstd,
        }
    }

    /// The codec's name as Kafka's `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// A codec name that is not one of none, gzip, snappy, lz4, zstd.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown codec {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
pub struct UnknownCodec(pub String);

impl FromStr for Codec {
    type Err = UnknownCodec;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "none" => Codec::None,
            "gzip" => Codec::Gzip,
            "snappy" => Codec::Snappy,
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            other => return Err(UnknownCodec(other.to_string())),
        })
    }
}

/// One record to put in a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeRecord {
    /// Key; `None` is a null key.
    pub key: Option<Bytes>,
    /// Value; `None` is a null value (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order (kafka-protocol's encoder keeps one value per key).
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Timestamp in milliseconds (create time).
    pub timestamp: i64,
    /// Offset delta within the batch. `None` = one past the previous record's (0 for the first);
    /// set larger deltas to make compaction-style gaps.
    pub offset_delta: Option<i32>,
}

impl FakeRecord {
    /// A record with this value, no key, no headers, timestamp 0.
    pub fn value(value: impl Into<Bytes>) -> Self {
        Self {
            value: Some(value.into()),
            ..Self::default()
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((key.into(), value));
        self
    }

    /// Sets the timestamp (ms).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Sets the offset delta within the batch (for gaps).
    pub fn with_offset_delta(mut self, delta: i32) -> Self {
        self.offset_delta = Some(delta);
        self
    }
}

/// Batch-level fields for [`encode_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Compression codec.
    pub codec: Codec,
    /// Producer id, -1 for none.
    pub producer_id: i64,
    /// Producer epoch, -1 for none.
    pub producer_epoch: i16,
    /// Base sequence, -1 for none.
    pub base_sequence: i32,
    /// Transactional bit.
    pub transactional: bool,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            codec: Codec::None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
        }
    }
}

impl BatchOptions {
    /// Plain batch with this codec.
    pub fn codec(codec: Codec) -> Self {
        Self {
            codec,
            ..Self::default()
        }
    }
}

/// Encodes `records` as **one** v2 batch at base offset 0 with kafka-protocol's encoder.
///
/// The broker rewrites the base offset when the batch is appended.
pub fn encode_batch(records: &[FakeRecord], opts: &BatchOptions) -> Result<Bytes, FakeError> {
    if records.is_empty() {
        return Err(FakeError::Encode(
            "a batch needs at least one record".into(),
        ));
    }
    let mut next_delta: i64 = 0;
    let mut encoded = Vec::with_capacity(records.len());
    for r in records {
        let delta = match r.offset_delta {
            Some(d) if i64::from(d) < next_delta => {
                return Err(FakeError::Encode(format!(
                    "offset delta {d} is not above the previous record's"
                )))
            }
            Some(d) => i64::from(d),
            None => next_delta,
        };
        next_delta = delta + 1;
        let mut headers = IndexMap::with_capacity(r.headers.len());
        for (k, v) in &r.headers {
            headers.insert(StrBytes::from_string(k.clone()), v.clone());
        }
        encoded.push(Record {
            transactional: opts.transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: opts.producer_id,
            producer_epoch: opts.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: delta,
            // The encoder groups records into one batch only while offset − sequence is
            // constant, and derives the base sequence from the first record.
            sequence: opts.base_sequence.wrapping_add(delta as i32),
            timestamp: r.timestamp,
            key: r.key.clone(),
            value: r.value.clone(),
            headers,
        });
    }
    encode_records(&encoded, opts.codec)
}

fn encode_records(records: &[Record], codec: Codec) -> Result<Bytes, FakeError> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: codec.compression(),
        },
    )
    .map_err(|e| FakeError::Encode(e.to_string()))?;
    Ok(buf.freeze())
}

/// Transaction marker type (control record key `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    /// ABORT marker (type 0).
    Abort,
    /// COMMIT marker (type 1).
    Commit,
}

/// Encodes a control batch holding one COMMIT or ABORT marker (KIP-98).
pub fn encode_control_batch(
    producer_id: i64,
    producer_epoch: i16,
    kind: ControlType,
    timestamp: i64,
) -> Result<Bytes, FakeError> {
    let kind_code: i16 = match kind {
        ControlType::Abort => 0,
        ControlType::Commit => 1,
    };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind_code.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&0i32.to_be_bytes()); // coordinator epoch
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: IndexMap::new(),
    };
    encode_records(std::slice::from_ref(&record), Codec::None)
}

/// The header fields the broker needs, read from a batch without decompressing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub base_offset: i64,
    pub last_offset_delta: i32,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub attributes: i16,
    pub record_count: i32,
}

impl BatchHeader {
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

/// Splits `bytes` into whole batches and reads each header. Every byte must belong to a batch.
pub(crate) fn split_batches(bytes: &Bytes) -> Result<Vec<(BatchHeader, Bytes)>, FakeError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let bad = |reason: String| FakeError::MalformedBatch {
            position: pos,
            reason,
        };
        if rest.len() < BATCH_HEADER_LEN {
            return Err(bad(format!(
                "{} bytes left, a batch header needs {BATCH_HEADER_LEN}",
                rest.len()
            )));
        }
        let batch_length = be_i32(rest, 8);
        let total = usize::try_from(batch_length)
            .ok()
            .and_then(|l| l.checked_add(LOG_OVERHEAD))
            .filter(|t| *t >= BATCH_HEADER_LEN && *t <= rest.len())
            .ok_or_else(|| bad(format!("batchLength {batch_length} does not fit")))?;
        let magic = rest[16] as i8;
        if magic != 2 {
            return Err(bad(format!("magic {magic}, only v2 batches are served")));
        }
        let header = BatchHeader {
            base_offset: be_i64(rest, 0),
            attributes: be_i16(rest, 21),
            last_offset_delta: be_i32(rest, 23),
            max_timestamp: be_i64(rest, 35),
            producer_id: be_i64(rest, 43),
            record_count: be_i32(rest, 57),
        };
        if header.last_offset_delta < 0 {
            return Err(bad(format!(
                "negative lastOffsetDelta {}",
                header.last_offset_delta
            )));
        }
        out.push((header, bytes.slice(pos..pos + total)));
        pos += total;
    }
    Ok(out)
}

/// Reads the marker type of an (uncompressed) control batch's first record.
pub(crate) fn control_type(batch: &[u8]) -> Option<ControlType> {
    let mut rest = batch.get(BATCH_HEADER_LEN..)?;
    let _len = read_varint(&mut rest)?;
    let (_attrs, r) = rest.split_first()?;
    rest = r;
    let _ts = read_varint(&mut rest)?;
    let _od = read_varint(&mut rest)?;
    let key_len = read_varint(&mut rest)?;
    if key_len < 4 {
        return None;
    }
    match be_i16(rest.get(..4)?, 2) {
        0 => Some(ControlType::Abort),
        1 => Some(ControlType::Commit),
        _ => None,
    }
}

/// Zig-zag varlong (also reads varints).
fn read_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..70).step_by(7) {
        let (b, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn encodes_one_batch_with_gaps_and_reads_header() {
        let records: Vec<_> = [0, 1, 5, 9]
            .iter()
            .map(|d| {
                FakeRecord::value(format!("v{d}"))
                    .with_offset_delta(*d)
                    .with_timestamp(1000 + i64::from(*d))
            })
            .collect();
        for codec in Codec::ALL {
            let b = encode_batch(&records, &BatchOptions::codec(codec)).unwrap();
            let batches = split_batches(&b).unwrap();
            assert_eq!(batches.len(), 1, "{codec:?}");
            let h = batches[0].0;
            assert_eq!(h.last_offset_delta, 9);
            assert_eq!(h.record_count, 4);
            assert_eq!(h.max_timestamp, 1009);
            let set = RecordBatchDecoder::decode(&mut b.clone()).unwrap();
            let offsets: Vec<_> = set.records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, vec![0, 1, 5, 9]);
        }
    }

    #[test]
    fn control_batch_marker_is_readable() {
        let b = encode_control_batch(7, 0, ControlType::Abort, 5).unwrap();
        let (h, bytes) = split_batches(&b).unwrap().remove(0);
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(h.producer_id, 7);
        assert_eq!(control_type(&bytes), Some(ControlType::Abort));
        let b = encode_control_batch(7, 0, ControlType::Commit, 5).unwrap();
        assert_eq!(control_type(&b), Some(ControlType::Commit));
    }

    #[test]
    fn truncated_or_garbage_batches_are_refused() {
        let b = encode_batch(&[FakeRecord::value("x")], &BatchOptions::default()).unwrap();
        assert!(split_batches(&b.slice(..b.len() - 1)).is_err());
        assert!(split_batches(&Bytes::from_static(&[0xff; 70])).is_err());
    }
}
