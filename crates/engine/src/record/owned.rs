//! Records that own their bytes: `Bytes` views of the fetch buffer (uncompressed batches, no
//! copy) or of the batch's decompressed records (one buffer per batch, shared by its records),
//! for handing records to other tasks or keeping them past the batch.
use std::collections::VecDeque;

use bytes::Bytes;

use super::batch::{RecordBatch, BATCH_HEADER_LEN};
use super::compression::{Compression, Scratch};
use super::error::DecodeError;
use super::records::{Record, Records};

/// One record with owned `Bytes` fields. Cloning it clones reference counts, not bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    offset: i64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<OwnedHeader>,
}

/// One header of an [`OwnedRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedHeader {
    /// The key (never null).
    pub key: Bytes,
    /// The value, `None` when null.
    pub value: Option<Bytes>,
}

impl OwnedRecord {
    /// The record's offset.
    pub fn offset(&self) -> i64 {
        self.offset
    }
    /// The record's timestamp (as [`Record::timestamp`]).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }
    /// The key, `None` when null.
    pub fn key(&self) -> Option<&Bytes> {
        self.key.as_ref()
    }
    /// The value, `None` when null (a tombstone).
    pub fn value(&self) -> Option<&Bytes> {
        self.value.as_ref()
    }
    /// The headers, in wire order, duplicate keys kept.
    pub fn headers(&self) -> &[OwnedHeader] {
        &self.headers
    }
    /// The value, taken out of the record.
    pub fn into_value(self) -> Option<Bytes> {
        self.value
    }
    /// Key and value, taken out of the record.
    pub fn into_key_value(self) -> (Option<Bytes>, Option<Bytes>) {
        (self.key, self.value)
    }

    fn from_view(buf: &Bytes, r: &Record<'_>) -> OwnedRecord {
        OwnedRecord {
            offset: r.offset(),
            timestamp: r.timestamp(),
            key: r.key().map(|k| sub(buf, k)),
            value: r.value().map(|v| sub(buf, v)),
            headers: r
                .headers()
                .map(|h| OwnedHeader {
                    key: sub(buf, h.key()),
                    value: h.value().map(|v| sub(buf, v)),
                })
                .collect(),
        }
    }
}

/// `part` (a slice of `buf`) as a `Bytes` view of `buf`. Every decoded field is a slice of the
/// buffer it was decoded from; should one not be, it is copied rather than mis-sliced.
fn sub(buf: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if part.is_empty() || (start <= buf.len() && end <= buf.len()) => {
            if part.is_empty() {
                Bytes::new()
            } else {
                buf.slice(start..end)
            }
        }
        _ => Bytes::copy_from_slice(part),
    }
}

impl RecordBatch {
    /// Appends the batch's visible records to `out` as [`OwnedRecord`]s. Uncompressed: views
    /// of the input buffer. Compressed: decompressed through `scratch`, then copied once into a
    /// buffer the batch's records share.
    pub fn owned_records(
        &self,
        scratch: &mut Scratch,
        max_decompressed: usize,
        out: &mut VecDeque<OwnedRecord>,
    ) -> Result<(), DecodeError> {
        let section_pos = self.position() + BATCH_HEADER_LEN;
        let compressed = self.header().compression != Compression::None;
        let buf = if compressed {
            // Decompress (and learn its errors) through the reusable scratch buffer.
            self.records(scratch, max_decompressed)?;
            Bytes::copy_from_slice(scratch.inflated())
        } else {
            self.bytes()
                .slice(BATCH_HEADER_LEN.min(self.bytes().len())..)
        };
        for r in Records::new(self, &buf, section_pos, compressed) {
            out.push_back(OwnedRecord::from_view(&buf, &r?));
        }
        Ok(())
    }
}
