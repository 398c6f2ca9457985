//! Record views: one magic v2 record, borrowed from the fetch buffer or the scratch buffer.
//!
//! ```text
//! length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//! keyLength varint | key | valueLength varint | value |
//! headerCount varint | (headerKeyLength varint | headerKey | headerValueLength varint | value)*
//! ```
//! A key or value length of -1 is null; a header key is never null. The fields must fill the
//! record's length exactly, and the records the section exactly (as the Java client checks).
use super::batch::{Batch, TimestampType};
use super::error::{DecodeError, DecodeErrorKind, Field};
use super::varint::{read_varint, read_varlong};

/// One record: offset, timestamp, key, value and headers, borrowed (`'a`) from the buffer.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    offset: i64,
    timestamp: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Headers<'a>,
}

impl<'a> Record<'a> {
    /// The record's offset (`baseOffset + offsetDelta`).
    #[inline]
    pub fn offset(&self) -> i64 {
        self.offset
    }
    /// The record's timestamp (`baseTimestamp + timestampDelta`; the batch's max timestamp for
    /// log-append-time batches, as the Java client reports it).
    #[inline]
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }
    /// The key, `None` when null.
    #[inline]
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }
    /// The value, `None` when null (a tombstone).
    #[inline]
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }
    /// The headers, in wire order, duplicate keys kept.
    #[inline]
    pub fn headers(&self) -> Headers<'a> {
        self.headers
    }
}

/// A record's headers: an ordered list, iterated lazily; duplicate keys are kept.
#[derive(Debug, Clone, Copy)]
pub struct Headers<'a> {
    /// The header section (already validated when the record was decoded).
    data: &'a [u8],
    pos: usize,
    left: u32,
}

impl<'a> Headers<'a> {
    /// Headers still to come.
    pub fn len(&self) -> usize {
        self.left as usize
    }
    /// No headers (left).
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = Header<'a>;
    #[inline]
    fn next(&mut self) -> Option<Header<'a>> {
        if self.left == 0 {
            return None;
        }
        // Validated when the record was decoded; on any surprise, end the list.
        let parsed = walk_header(self.data, &mut self.pos).ok();
        match parsed {
            Some(h) => {
                self.left -= 1;
                Some(h)
            }
            None => {
                self.left = 0;
                None
            }
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

/// One record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    key: &'a [u8],
    value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    /// The key's bytes (a string on the wire; see [`key_str`](Self::key_str)).
    pub fn key(&self) -> &'a [u8] {
        self.key
    }
    /// The key as UTF-8, `None` if it is not valid UTF-8.
    pub fn key_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.key).ok()
    }
    /// The value, `None` when null.
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }
}

/// A fault inside a records section: kind and position within the section.
struct Fault(DecodeErrorKind, usize);

#[inline(always)]
fn varint(buf: &[u8], pos: &mut usize, field: Field) -> Result<i32, Fault> {
    let at = *pos;
    read_varint(buf, pos).ok_or(Fault(DecodeErrorKind::BadVarint { field }, at))
}

/// A length-prefixed byte field whose length was just read at `len_at`; -1 is null.
#[inline(always)]
fn bytes_field<'a>(
    buf: &'a [u8],
    pos: &mut usize,
    len: i32,
    field: Field,
    len_at: usize,
) -> Result<Option<&'a [u8]>, Fault> {
    if len < 0 {
        if len == -1 {
            return Ok(None);
        }
        return Err(Fault(
            DecodeErrorKind::BadLength {
                field,
                length: i64::from(len),
            },
            len_at,
        ));
    }
    let start = *pos;
    let end = start.wrapping_add(len as usize);
    match buf.get(start..end) {
        Some(s) => {
            *pos = end;
            Ok(Some(s))
        }
        None => Err(Fault(
            DecodeErrorKind::Truncated {
                field,
                needed: len as u64,
                remaining: buf.len().saturating_sub(start) as u64,
            },
            len_at,
        )),
    }
}

/// Reads one header at `*pos` of `buf` (which ends where the record ends).
#[inline(always)]
fn walk_header<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Header<'a>, Fault> {
    let at = *pos;
    let klen = varint(buf, pos, Field::HeaderKey)?;
    if klen < 0 {
        return Err(Fault(
            DecodeErrorKind::BadLength {
                field: Field::HeaderKey,
                length: i64::from(klen),
            },
            at,
        ));
    }
    let key = bytes_field(buf, pos, klen, Field::HeaderKey, at)?.unwrap_or(&[]);
    let vat = *pos;
    let vlen = varint(buf, pos, Field::HeaderValue)?;
    let value = bytes_field(buf, pos, vlen, Field::HeaderValue, vat)?;
    Ok(Header { key, value })
}

/// The records of one batch. Yields `Result<Record, DecodeError>`; after an error it yields
/// nothing more. Records outside the batch's visible range (the reader's fetch offset and
/// `until`) are skipped.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    data: &'a [u8],
    pos: usize,
    /// Records not yet read.
    left: u32,
    declared: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    skip_below: i64,
    until: i64,
    /// Byte position of the records section in the input buffer.
    section_pos: usize,
    inflated: bool,
}

impl<'a> Records<'a> {
    pub(crate) fn new(
        batch: &Batch,
        data: &'a [u8],
        section_pos: usize,
        inflated: bool,
    ) -> Records<'a> {
        let h = batch.header();
        Records {
            data,
            pos: 0,
            left: u32::try_from(h.record_count).unwrap_or(0),
            declared: h.record_count,
            base_offset: h.base_offset,
            base_timestamp: h.base_timestamp,
            log_append_time: (h.timestamp_type() == TimestampType::LogAppendTime)
                .then_some(h.max_timestamp),
            skip_below: batch.skip_below,
            until: batch.until,
            section_pos,
            inflated,
        }
    }

    /// Records not yet read (including any that will be skipped).
    pub fn remaining(&self) -> usize {
        self.left as usize
    }

    #[cold]
    fn error(&mut self, Fault(kind, at): Fault) -> DecodeError {
        self.left = 0;
        self.pos = self.data.len();
        if self.inflated {
            DecodeError::inflated(kind, self.section_pos, at, self.base_offset)
        } else {
            DecodeError::new(kind, self.section_pos + at, Some(self.base_offset))
        }
    }

    /// Decodes the record at `self.pos`.
    #[inline(always)]
    fn parse(&mut self) -> Result<Record<'a>, Fault> {
        let data = self.data;
        let start = self.pos;
        let mut pos = start;
        let len = varint(data, &mut pos, Field::RecordLength)?;
        if len < 0 {
            return Err(Fault(
                DecodeErrorKind::BadLength {
                    field: Field::RecordLength,
                    length: i64::from(len),
                },
                start,
            ));
        }
        let end = pos.wrapping_add(len as usize);
        // Every read below is bounded by the record's end.
        let Some(body) = data.get(..end) else {
            return Err(Fault(
                DecodeErrorKind::Truncated {
                    field: Field::RecordLength,
                    needed: len as u64,
                    remaining: data.len().saturating_sub(pos) as u64,
                },
                start,
            ));
        };
        let Some(_attributes) = body.get(pos) else {
            return Err(Fault(
                DecodeErrorKind::BadVarint {
                    field: Field::RecordAttributes,
                },
                pos,
            ));
        };
        pos += 1;
        let ts_at = pos;
        let ts_delta = read_varlong(body, &mut pos).ok_or(Fault(
            DecodeErrorKind::BadVarint {
                field: Field::TimestampDelta,
            },
            ts_at,
        ))?;
        let off_delta = varint(body, &mut pos, Field::OffsetDelta)?;
        let kat = pos;
        let klen = varint(body, &mut pos, Field::Key)?;
        let key = bytes_field(body, &mut pos, klen, Field::Key, kat)?;
        let vat = pos;
        let vlen = varint(body, &mut pos, Field::Value)?;
        let value = bytes_field(body, &mut pos, vlen, Field::Value, vat)?;
        let hat = pos;
        let hcount = varint(body, &mut pos, Field::HeaderCount)?;
        let headers_start = pos;
        if hcount != 0 {
            // Each header takes at least 2 bytes: bound the count before walking.
            if hcount < 0 || (hcount as usize) > (end - pos) / 2 {
                return Err(Fault(
                    DecodeErrorKind::BadLength {
                        field: Field::HeaderCount,
                        length: i64::from(hcount),
                    },
                    hat,
                ));
            }
            for _ in 0..hcount {
                walk_header(body, &mut pos)?;
            }
        }
        if pos != end {
            return Err(Fault(
                DecodeErrorKind::RecordSizeMismatch {
                    declared: len as u64,
                    used: (pos - (end - len as usize)) as u64,
                },
                start,
            ));
        }
        self.pos = end;
        Ok(Record {
            offset: self.base_offset.wrapping_add(i64::from(off_delta)),
            timestamp: match self.log_append_time {
                None => self.base_timestamp.wrapping_add(ts_delta),
                Some(t) => t,
            },
            key,
            value,
            headers: Headers {
                data: body.get(headers_start..end).unwrap_or(&[]),
                pos: 0,
                left: hcount as u32,
            },
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.left == 0 {
                if self.pos < self.data.len() {
                    let extra = (self.data.len() - self.pos) as u64;
                    let at = self.pos;
                    return Some(Err(self.error(Fault(
                        DecodeErrorKind::TrailingBytes {
                            declared: self.declared,
                            extra,
                        },
                        at,
                    ))));
                }
                return None;
            }
            if self.pos >= self.data.len() {
                let found = self.declared.saturating_sub(self.left as i32);
                let at = self.pos;
                return Some(Err(self.error(Fault(
                    DecodeErrorKind::TooFewRecords {
                        declared: self.declared,
                        found,
                    },
                    at,
                ))));
            }
            self.left -= 1;
            match self.parse() {
                Ok(r) => {
                    if r.offset >= self.skip_below && r.offset < self.until {
                        return Some(Ok(r));
                    }
                }
                Err(f) => return Some(Err(self.error(f))),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}
