//! The decoder's typed error: what failed, where (byte position), in which batch.
use std::fmt;

use super::compression::Compression;

/// A field of a record batch or record, named in errors ("what failed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    /// The batch header (61 bytes for magic v2).
    BatchHeader,
    /// A record's length prefix.
    RecordLength,
    /// A record's attributes byte.
    RecordAttributes,
    /// A record's timestamp delta (varlong).
    TimestampDelta,
    /// A record's offset delta (varint).
    OffsetDelta,
    /// A record's key.
    Key,
    /// A record's value.
    Value,
    /// A record's header count.
    HeaderCount,
    /// A header's key.
    HeaderKey,
    /// A header's value.
    HeaderValue,
    /// The key of a control record (version and type).
    ControlKey,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::BatchHeader => "batch header",
            Field::RecordLength => "record length",
            Field::RecordAttributes => "record attributes",
            Field::TimestampDelta => "timestamp delta",
            Field::OffsetDelta => "offset delta",
            Field::Key => "record key",
            Field::Value => "record value",
            Field::HeaderCount => "header count",
            Field::HeaderKey => "header key",
            Field::HeaderValue => "header value",
            Field::ControlKey => "control record key",
        })
    }
}

/// What went wrong while decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The batch length field is smaller than any batch of this magic can be.
    #[error("batch length {length} is too small for a magic v{magic} batch")]
    BatchLengthTooSmall {
        /// The batch length read from the wire.
        length: i32,
        /// The magic byte (or 2 when it could not be read).
        magic: i8,
    },
    /// A legacy message set (magic v0 or v1): kdirect decodes magic v2 record batches only.
    #[error(
        "legacy message set (magic v{magic}) is not supported: kdirect decodes magic v2 record \
         batches only (Kafka >= 0.11 message format)"
    )]
    LegacyMessageSet {
        /// 0 or 1.
        magic: i8,
    },
    /// A magic byte that no Kafka version writes.
    #[error("unknown magic byte {magic}")]
    UnknownMagic {
        /// The byte read.
        magic: i8,
    },
    /// The CRC32C stored in the batch header does not match the batch's bytes.
    #[error("CRC32C mismatch: the batch says {stored:#010x}, its bytes give {computed:#010x}")]
    CrcMismatch {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes after the crc field.
        computed: u32,
    },
    /// Compression codec bits 5, 6 or 7.
    #[error("unknown compression codec id {id}")]
    UnknownCompression {
        /// The 3-bit codec id.
        id: u8,
    },
    /// The batch's record count is negative.
    #[error("negative record count {count}")]
    NegativeRecordCount {
        /// The count read.
        count: i32,
    },
    /// The codec rejected the compressed records section.
    #[error("{codec} decompression failed: {detail}")]
    Decompress {
        /// The batch's codec.
        codec: Compression,
        /// The codec's message.
        detail: String,
    },
    /// Decompressed records would exceed the configured cap (a decompression bomb, or a cap
    /// set too low).
    #[error(
        "decompressed {codec} records exceed the cap of {cap} bytes (a stream's cap is half its \
         memory.budget.bytes)"
    )]
    DecompressedTooLarge {
        /// The batch's codec.
        codec: Compression,
        /// [`DecodeOptions::max_decompressed`](super::DecodeOptions::max_decompressed).
        cap: usize,
    },
    /// A varint that runs past its bytes or past its maximum width.
    #[error("malformed varint in the {field}")]
    BadVarint {
        /// Which field.
        field: Field,
    },
    /// A length or count that no valid record has (e.g. negative, or -1 where null is not allowed).
    #[error("invalid {field} length {length}")]
    BadLength {
        /// Which field.
        field: Field,
        /// The length read.
        length: i64,
    },
    /// A field runs past the end of its record or batch.
    #[error("the {field} needs {needed} bytes but only {remaining} remain")]
    Truncated {
        /// Which field.
        field: Field,
        /// Bytes the field declares.
        needed: u64,
        /// Bytes left in the enclosing record or batch.
        remaining: u64,
    },
    /// A record's fields do not fill exactly the length its prefix declares.
    #[error("the record declares {declared} bytes but its fields take {used}")]
    RecordSizeMismatch {
        /// The record length prefix.
        declared: u64,
        /// Bytes its fields used.
        used: u64,
    },
    /// The records section ended before the declared number of records.
    #[error("the batch declares {declared} records but its records section ends after {found}")]
    TooFewRecords {
        /// The batch's record count.
        declared: i32,
        /// Records decoded before the section ended.
        found: i32,
    },
    /// A record's offset delta is not above the previous record's, or is past the batch's
    /// lastOffsetDelta: the records contradict the offsets their batch covers (repeated or
    /// out-of-order offsets). Compaction leaves gaps, never a step back.
    #[error(
        "record {index} of the batch has offset delta {delta}, {}",
        offset_delta_rule(*previous, *last_offset_delta)
    )]
    BadOffsetDelta {
        /// The record's index in the batch (0: the first).
        index: i32,
        /// Its offset delta.
        delta: i64,
        /// The previous record's offset delta (none for the first record).
        previous: Option<i64>,
        /// The batch's lastOffsetDelta.
        last_offset_delta: i64,
    },
    /// Bytes remain in the records section after the declared number of records.
    #[error("{extra} bytes remain after the batch's {declared} records")]
    TrailingBytes {
        /// The batch's record count.
        declared: i32,
        /// Bytes left over.
        extra: u64,
    },
}

/// What a record's offset delta must be, for [`DecodeErrorKind::BadOffsetDelta`].
fn offset_delta_rule(previous: Option<i64>, last: i64) -> String {
    match previous {
        Some(p) => format!("but must be above the previous record's {p} and at most the batch's last offset delta {last}"),
        None => format!("but must be from 0 to the batch's last offset delta {last}"),
    }
}

/// A decode failure with the context to act on it: what failed ([`kind`](Self::kind)), the byte
/// position in the input buffer, the position inside the decompressed records when the fault is
/// there, and the base offset of the batch.
///
/// Boxed so that `Result<Record, DecodeError>` stays small on the hot path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(Box<Inner>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inner {
    kind: DecodeErrorKind,
    position: usize,
    inflated_position: Option<usize>,
    base_offset: Option<i64>,
}

impl DecodeError {
    #[cold]
    #[inline(never)]
    pub(crate) fn new(kind: DecodeErrorKind, position: usize, base_offset: Option<i64>) -> Self {
        DecodeError(Box::new(Inner {
            kind,
            position,
            inflated_position: None,
            base_offset,
        }))
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn inflated(
        kind: DecodeErrorKind,
        section_position: usize,
        inflated_position: usize,
        base_offset: i64,
    ) -> Self {
        DecodeError(Box::new(Inner {
            kind,
            position: section_position,
            inflated_position: Some(inflated_position),
            base_offset: Some(base_offset),
        }))
    }

    /// What failed.
    pub fn kind(&self) -> &DecodeErrorKind {
        &self.0.kind
    }

    /// Byte position in the input buffer (the `records` bytes given to the decoder). For a fault
    /// inside decompressed records, the position of the batch's compressed records section.
    pub fn position(&self) -> usize {
        self.0.position
    }

    /// For a fault inside a compressed batch: the byte position in its decompressed records.
    pub fn inflated_position(&self) -> Option<usize> {
        self.0.inflated_position
    }

    /// The base offset of the batch at fault, when its header could be read.
    pub fn base_offset(&self) -> Option<i64> {
        self.0.base_offset
    }
}

impl DecodeError {
    /// The same error with its byte position moved `by` bytes on: for a buffer that is one
    /// part of a larger stream (a file decoded batch by batch).
    pub fn shifted(mut self, by: usize) -> Self {
        self.0.position = self.0.position.saturating_add(by);
        self
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.0.kind, self.0.position)?;
        if let Some(p) = self.0.inflated_position {
            write!(f, " (byte {p} of the decompressed records)")?;
        }
        if let Some(o) = self.0.base_offset {
            write!(f, " in the batch at offset {o}")?;
        }
        Ok(())
    }
}

// No `source()`: the kind is already part of the message; a chain would print it twice.
impl std::error::Error for DecodeError {}
