//! Record batch framing: the 61-byte magic v2 header, CRC32C, and the walk over a `records` buffer.
//!
//! ```text
//! baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
//! attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
//! producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records...
//! ```
//! `batchLength` counts from `partitionLeaderEpoch` to the end; the CRC32C covers everything
//! after the crc field (from `attributes` to the end).
use bytes::Bytes;

use super::compression::{Compression, Scratch};
use super::error::{DecodeError, DecodeErrorKind};
use super::records::Records;

/// Bytes of a magic v2 batch header, from `baseOffset` to `recordCount` inclusive.
pub const BATCH_HEADER_LEN: usize = 61;
/// `baseOffset` + `batchLength`: what precedes the length-counted part.
const LOG_OVERHEAD: usize = 12;
/// Offset of the magic byte (the same in v0/v1 message sets and v2 batches).
const MAGIC_OFFSET: usize = 16;
/// Offset of the first byte the CRC covers.
const CRC_START: usize = 21;
/// The smallest legacy message (v0): crc, magic, attributes, key length, value length.
const LEGACY_MIN_LENGTH: i32 = 14;

/// How a batch's timestamps were assigned (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker on append: every record's timestamp is the batch's max timestamp.
    LogAppendTime,
}

/// A batch's attributes word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attributes(pub i16);

impl Attributes {
    /// The 3-bit codec id (bits 0–2).
    pub fn codec_id(self) -> u8 {
        (self.0 & 0x7) as u8
    }
    /// Bit 3.
    pub fn timestamp_type(self) -> TimestampType {
        if self.0 & 0x08 != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// Bit 4: part of a transaction.
    pub fn is_transactional(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// Bit 5: holds a control record (a transaction marker), never data.
    pub fn is_control(self) -> bool {
        self.0 & 0x20 != 0
    }
    /// Bit 6: the batch carries a delete horizon (KIP-534).
    pub fn has_delete_horizon(self) -> bool {
        self.0 & 0x40 != 0
    }
}

/// The decoded header of a magic v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchHeader {
    /// Offset of the first record (compaction may have removed it: records carry their own).
    pub base_offset: i64,
    /// Bytes after the length field.
    pub batch_length: i32,
    /// Leader epoch when the batch was appended.
    pub partition_leader_epoch: i32,
    /// 2.
    pub magic: i8,
    /// The stored CRC32C.
    pub crc: u32,
    /// Attributes word.
    pub attributes: Attributes,
    /// The batch's codec (from the attributes).
    pub compression: Compression,
    /// Offset of the last record written, relative to `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record (the base for record deltas).
    pub base_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// Producer id, -1 without one.
    pub producer_id: i64,
    /// Producer epoch, -1 without one.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 without one.
    pub base_sequence: i32,
    /// Records in the batch.
    pub record_count: i32,
}

impl BatchHeader {
    /// `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }
    /// Where the next fetch starts after this batch: `base_offset + last_offset_delta + 1`
    /// (not the last record's offset + 1: compaction can remove a batch's tail records).
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }
    /// Whether the batch has a producer id (`producer_id >= 0`).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// A transactional batch (attributes bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes.is_transactional()
    }
    /// A control batch (attributes bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes.is_control()
    }
    /// Attributes bit 3.
    pub fn timestamp_type(&self) -> TimestampType {
        self.attributes.timestamp_type()
    }

    /// Parses the 61-byte header at the start of `b` (no CRC check).
    fn parse(b: &[u8; BATCH_HEADER_LEN]) -> Result<BatchHeader, DecodeErrorKind> {
        let [o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3, e0, e1, e2, e3, magic, c0, c1, c2, c3, a0, a1, d0, d1, d2, d3, t0, t1, t2, t3, t4, t5, t6, t7, m0, m1, m2, m3, m4, m5, m6, m7, p0, p1, p2, p3, p4, p5, p6, p7, pe0, pe1, s0, s1, s2, s3, n0, n1, n2, n3] =
            *b;
        let attributes = Attributes(i16::from_be_bytes([a0, a1]));
        let compression = Compression::from_id(attributes.codec_id()).ok_or(
            DecodeErrorKind::UnknownCompression {
                id: attributes.codec_id(),
            },
        )?;
        Ok(BatchHeader {
            base_offset: i64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
            batch_length: i32::from_be_bytes([l0, l1, l2, l3]),
            partition_leader_epoch: i32::from_be_bytes([e0, e1, e2, e3]),
            magic: magic as i8,
            crc: u32::from_be_bytes([c0, c1, c2, c3]),
            attributes,
            compression,
            last_offset_delta: i32::from_be_bytes([d0, d1, d2, d3]),
            base_timestamp: i64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            max_timestamp: i64::from_be_bytes([m0, m1, m2, m3, m4, m5, m6, m7]),
            producer_id: i64::from_be_bytes([p0, p1, p2, p3, p4, p5, p6, p7]),
            producer_epoch: i16::from_be_bytes([pe0, pe1]),
            base_sequence: i32::from_be_bytes([s0, s1, s2, s3]),
            record_count: i32::from_be_bytes([n0, n1, n2, n3]),
        })
    }
}

/// One record batch: its header and its bytes, a `Bytes` slice of the input (no copy).
#[derive(Debug, Clone)]
pub struct RecordBatch {
    header: BatchHeader,
    /// The whole batch, header included.
    bytes: Bytes,
    /// Byte position of the batch in the input buffer.
    position: usize,
    /// Records below this offset are skipped (the fetch offset).
    pub(crate) skip_below: i64,
    /// Records at or above this offset are skipped (`until`).
    pub(crate) until: i64,
}

impl RecordBatch {
    /// The batch header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }
    /// The whole batch as it was on the wire, header included.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
    /// The records section as on the wire (compressed when the batch is).
    pub fn records_section(&self) -> Bytes {
        self.bytes.slice(BATCH_HEADER_LEN.min(self.bytes.len())..)
    }
    /// Byte position of the batch in the input buffer.
    pub fn position(&self) -> usize {
        self.position
    }
    /// This batch in a buffer of its own (its bytes copied): one stored batch kept past the
    /// response frame it came in, which can then be reused or freed. [`bounded`](Self::bounded)
    /// sets the records it shows.
    pub(crate) fn detached(&self) -> RecordBatch {
        RecordBatch {
            header: self.header,
            bytes: Bytes::copy_from_slice(&self.bytes),
            position: self.position,
            skip_below: self.skip_below,
            until: self.until,
        }
    }

    /// The same batch (the same bytes, no copy) showing the records of `[from, until)`.
    pub(crate) fn bounded(&self, from: i64, until: i64) -> RecordBatch {
        RecordBatch {
            skip_below: from,
            until,
            ..self.clone()
        }
    }

    /// Verifies the stored CRC32C against the batch's bytes.
    pub fn verify_crc(&self) -> Result<(), DecodeError> {
        let covered = self.bytes.get(CRC_START..).unwrap_or(&[]);
        let computed = super::crc::crc32c(covered);
        if computed != self.header.crc {
            return Err(DecodeError::new(
                DecodeErrorKind::CrcMismatch {
                    stored: self.header.crc,
                    computed,
                },
                self.position,
                Some(self.header.base_offset),
            ));
        }
        Ok(())
    }

    /// The batch's records. Uncompressed: views into the input buffer, `scratch` untouched.
    /// Compressed: decompressed into `scratch` (at most `max_decompressed` bytes), views into it.
    pub fn records<'a>(
        &'a self,
        scratch: &'a mut Scratch,
        max_decompressed: usize,
    ) -> Result<Records<'a>, DecodeError> {
        let section = self.bytes.get(BATCH_HEADER_LEN..).unwrap_or(&[]);
        let section_pos = self.position + BATCH_HEADER_LEN;
        if self.header.compression == Compression::None {
            return Ok(Records::new(self, section, section_pos, false));
        }
        match scratch.inflate(self.header.compression, section, max_decompressed) {
            Ok(inflated) => Ok(Records::new(self, inflated, section_pos, true)),
            Err(kind) => Err(DecodeError::new(
                kind,
                section_pos,
                Some(self.header.base_offset),
            )),
        }
    }
}

/// How a walk over a `records` buffer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tail {
    /// Every byte belonged to a whole batch.
    Complete,
    /// The buffer ends inside a batch (the broker cut the response at its byte limit). Not an
    /// error: fetch again from the next offset. If no whole batch came before it, the batch is
    /// larger than the fetch size allowed.
    Truncated {
        /// Byte position where the partial batch starts.
        position: usize,
        /// Bytes that batch needs in all (when its length could be read).
        needed: Option<usize>,
        /// Bytes present.
        available: usize,
    },
}

/// Walks the batches of a `records` buffer: frames each one, checks its magic and (optionally)
/// its CRC32C, and yields [`RecordBatch`] views. Stops at a truncated final batch
/// ([`tail`](Batches::tail)); stops for good after an error.
#[derive(Debug, Clone)]
pub struct Batches {
    buf: Bytes,
    pos: usize,
    check_crc: bool,
    tail: Option<Tail>,
}

impl Batches {
    /// A walk over `records` (the bytes of a Fetch response partition's `records` field).
    pub fn new(records: Bytes, check_crc: bool) -> Batches {
        Batches {
            buf: records,
            pos: 0,
            check_crc,
            tail: None,
        }
    }

    /// Byte position of the next batch.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// How the walk ended; `None` while batches remain (or after an error).
    pub fn tail(&self) -> Option<Tail> {
        self.tail
    }

    /// The next batch, `Ok(None)` at the end (whole or truncated).
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, DecodeError> {
        let start = self.pos;
        let rest = self.buf.get(start..).unwrap_or(&[]);
        if rest.is_empty() {
            self.tail.get_or_insert(Tail::Complete);
            return Ok(None);
        }
        let truncated = |needed| Tail::Truncated {
            position: start,
            needed,
            available: rest.len(),
        };
        let Some(&[o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3]) = rest.get(..LOG_OVERHEAD)
        else {
            self.tail = Some(truncated(None));
            self.pos = self.buf.len();
            return Ok(None);
        };
        let base_offset = i64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]);
        let length = i32::from_be_bytes([l0, l1, l2, l3]);
        let err = |kind| DecodeError::new(kind, start, Some(base_offset));
        if length < LEGACY_MIN_LENGTH {
            self.pos = self.buf.len();
            return Err(err(DecodeErrorKind::BatchLengthTooSmall {
                length,
                magic: rest.get(MAGIC_OFFSET).map_or(2, |&m| m as i8),
            }));
        }
        let total = LOG_OVERHEAD + length as usize;
        // The magic byte, when present, decides between "legacy" and "truncated".
        if let Some(&magic) = rest.get(MAGIC_OFFSET) {
            let magic = magic as i8;
            if magic != 2 {
                self.pos = self.buf.len();
                return Err(err(match magic {
                    0 | 1 => DecodeErrorKind::LegacyMessageSet { magic },
                    _ => DecodeErrorKind::UnknownMagic { magic },
                }));
            }
        }
        if total < BATCH_HEADER_LEN {
            self.pos = self.buf.len();
            return Err(err(DecodeErrorKind::BatchLengthTooSmall {
                length,
                magic: 2,
            }));
        }
        if rest.len() < total {
            self.tail = Some(truncated(Some(total)));
            self.pos = self.buf.len();
            return Ok(None);
        }
        let head: &[u8; BATCH_HEADER_LEN] =
            match rest.get(..BATCH_HEADER_LEN).and_then(|h| h.try_into().ok()) {
                Some(h) => h,
                None => {
                    // Unreachable: total >= BATCH_HEADER_LEN and rest.len() >= total.
                    self.tail = Some(truncated(Some(total)));
                    self.pos = self.buf.len();
                    return Ok(None);
                }
            };
        let header = match BatchHeader::parse(head) {
            Ok(h) => h,
            Err(kind) => {
                // Report a corrupt batch as a CRC mismatch when the CRC says so: it is the
                // more useful message.
                let batch = self.buf.slice(start..start + total);
                let covered = batch.get(CRC_START..).unwrap_or(&[]);
                let stored = u32::from_be_bytes([head[17], head[18], head[19], head[20]]);
                self.pos = self.buf.len();
                if self.check_crc {
                    let computed = super::crc::crc32c(covered);
                    if computed != stored {
                        return Err(err(DecodeErrorKind::CrcMismatch { stored, computed }));
                    }
                }
                return Err(err(kind));
            }
        };
        let batch = RecordBatch {
            header,
            bytes: self.buf.slice(start..start + total),
            position: start,
            skip_below: i64::MIN,
            until: i64::MAX,
        };
        if self.check_crc {
            if let Err(e) = batch.verify_crc() {
                self.pos = self.buf.len();
                return Err(e);
            }
        }
        if header.record_count < 0 {
            self.pos = self.buf.len();
            return Err(err(DecodeErrorKind::NegativeRecordCount {
                count: header.record_count,
            }));
        }
        self.pos = start + total;
        Ok(Some(batch))
    }
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}
