//! Record views: one magic v2 record, borrowed from the fetch buffer or the scratch buffer.
//!
//! ```text
//! length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//! keyLength varint | key | valueLength varint | value |
//! headerCount varint | (headerKeyLength varint | headerKey | headerValueLength varint | value)*
//! ```
//! A key or value length of -1 is null; a header key is never null. The fields must fill the
//! record's length exactly, and the records the section exactly (as the Java client checks).
use super::batch::{RecordBatch, TimestampType};
use super::error::{DecodeError, DecodeErrorKind, Field};
use super::varint::{read_varint, read_varlong, unzigzag32, unzigzag64};

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
    /// The record (already validated when it was decoded), ending where the record ends.
    data: &'a [u8],
    /// Where the next header starts.
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

/// The 8 bytes at `p` as a little-endian word, zero-padded past the end of `data` (a varint
/// that runs into the padding ends beyond the record and is refused by the caller's checks).
///
/// The engine's only `unsafe`: one compare guards an unaligned load. The safe spellings
/// (`get(p..p + 8)`, `first_chunk`) check the start and the length separately and cost the
/// 100-byte-record decode ~12% (9.5 vs 10.8 µs per 1000 records in `benches/decode.rs`); there
/// are six windows per record. Covered by the fast/slow path property tests below and by the
/// fuzz targets under AddressSanitizer, whose inputs are exact-size heap buffers.
#[inline(always)]
fn window(data: &[u8], p: usize) -> u64 {
    if p < data.len().saturating_sub(7) {
        // SAFETY: `p < len - 7` means `p + 8 <= len`, so the 8 bytes at `p` lie inside `data`;
        // `read_unaligned` has no alignment requirement.
        #[allow(unsafe_code)]
        let w = unsafe { data.as_ptr().add(p).cast::<u64>().read_unaligned() };
        return u64::from_le(w);
    }
    window_tail(data, p)
}

#[inline(never)]
fn window_tail(data: &[u8], p: usize) -> u64 {
    let mut w = [0u8; 8];
    let rest = data.get(p..).unwrap_or(&[]);
    for (d, s) in w.iter_mut().zip(rest) {
        *d = *s;
    }
    u64::from_le_bytes(w)
}

/// An unsigned LEB128 varint at the start of the window `w`: `(value, length)`, or `None` when
/// it is longer than the window (a 9- or 10-byte varlong: the slow path reads those).
/// One- and two-byte varints (most lengths and deltas) take two tests; longer ones are
/// compacted without a loop.
///
/// `MAX` is the longest the field may be (5 for an i32 varint, 8 for what the window holds of a
/// varlong): longer is `None`, checked only on the path for varints of three bytes or more.
#[inline(always)]
fn uvarint<const MAX: usize>(w: u64) -> Option<(u64, usize)> {
    if w & 0x80 == 0 {
        return Some((w & 0x7f, 1));
    }
    if w & 0x8000 == 0 {
        return Some(((w & 0x7f) | ((w >> 1) & 0x3f80), 2));
    }
    let stop = !w & 0x8080_8080_8080_8080;
    if stop == 0 {
        return None;
    }
    // The lowest clear high bit ends the varint: bit 8k+7 for a (k+1)-byte varint.
    let tz = stop.trailing_zeros();
    let len = (tz as usize + 1) / 8;
    if len > MAX {
        return None;
    }
    let mut v = w & (u64::MAX >> (63 - tz)) & 0x7f7f_7f7f_7f7f_7f7f;
    v = (v & 0x007f_007f_007f_007f) | ((v & 0x7f00_7f00_7f00_7f00) >> 1);
    v = (v & 0x0000_3fff_0000_3fff) | ((v & 0x3fff_0000_3fff_0000) >> 2);
    v = (v & 0x0000_0000_0fff_ffff) | ((v & 0x0fff_ffff_0000_0000) >> 4);
    Some((v, len))
}

/// A nullable byte field (varint length, -1 = null, then the bytes) at `p`, within `body`:
/// the field and where the next one starts.
#[inline(always)]
fn nullable<'a>(body: &'a [u8], data: &[u8], p: usize) -> Option<(Option<&'a [u8]>, usize)> {
    let (u, n) = uvarint::<5>(window(data, p))?;
    let p = p + n;
    if u & 1 == 0 {
        let end = p + ((u as u32) >> 1) as usize;
        Some((Some(body.get(p..end)?), end))
    } else if u as u32 == 1 {
        // zigzag 1 = -1: null (a position past the record is caught by the caller).
        Some((None, p))
    } else {
        None
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
    /// A record's timestamp is `ts_base + (timestampDelta & ts_mask)`: the batch's base
    /// timestamp and all ones for create time; its max timestamp and zero for log-append time
    /// (as the Java client reports it). No branch per record.
    ts_base: i64,
    ts_mask: i64,
    /// Records are visible when `skip_below <= offset < skip_below + visible_span`: one
    /// unsigned compare per record (see [`visible_span`]).
    skip_below: i64,
    visible_span: u64,
    /// The least offset the next record may carry (the previous record's offset + 1; the base
    /// offset before the first), and the end of the batch's offsets (`base_offset +
    /// lastOffsetDelta + 1`): a record outside `[next_offset, end_offset)` contradicts the
    /// offsets its batch covers. One unsigned compare per record, as for the visible range.
    next_offset: i64,
    end_offset: i64,
    /// Byte position of the records section in the input buffer.
    section_pos: usize,
    inflated: bool,
}

impl<'a> Records<'a> {
    pub(crate) fn new(
        batch: &RecordBatch,
        data: &'a [u8],
        section_pos: usize,
        inflated: bool,
    ) -> Records<'a> {
        let h = batch.header();
        let log_append = h.timestamp_type() == TimestampType::LogAppendTime;
        Records {
            data,
            pos: 0,
            left: u32::try_from(h.record_count).unwrap_or(0),
            declared: h.record_count,
            base_offset: h.base_offset,
            ts_base: if log_append {
                h.max_timestamp
            } else {
                h.base_timestamp
            },
            ts_mask: if log_append { 0 } else { -1 },
            skip_below: batch.skip_below,
            visible_span: visible_span(batch.skip_below, batch.until),
            next_offset: h.base_offset,
            // A negative lastOffsetDelta covers no offset: every record is refused.
            end_offset: h
                .base_offset
                .wrapping_add(i64::from(h.last_offset_delta.max(-1)) + 1),
            section_pos,
            inflated,
        }
    }

    /// Records not yet read (including any that will be skipped).
    pub fn remaining(&self) -> usize {
        self.left as usize
    }

    /// Ends the iteration with `fault` as its error.
    ///
    /// The cold paths take the fields they need by value: the hot loop never lends `self` out,
    /// so the compiler keeps the position in a register instead of in memory.
    #[inline(always)]
    fn fail(&mut self, fault: Fault) -> DecodeError {
        self.left = 0;
        self.pos = self.data.len();
        decode_error(fault, self.section_pos, self.inflated, self.base_offset)
    }

    /// Decodes the record at `start` field by field, naming the field and position of any
    /// fault. The slow path: taken only when [`parse_fast`](Self::parse_fast) declines.
    #[inline(never)]
    fn parse_slow(
        data: &'a [u8],
        start: usize,
        base_offset: i64,
        ts_base: i64,
        ts_mask: i64,
    ) -> Result<(Record<'a>, usize), Fault> {
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
        let record = Record {
            offset: base_offset.wrapping_add(i64::from(off_delta)),
            timestamp: ts_base.wrapping_add(ts_delta & ts_mask),
            key,
            value,
            headers: Headers {
                data: body,
                pos: headers_start,
                left: hcount as u32,
            },
        };
        Ok((record, end))
    }

    /// Decodes the record at `self.pos` on the fast path, returning it and the position where
    /// the next record starts; `None` when anything is unusual (a malformed field, a varint
    /// longer than 8 bytes), and then [`parse_slow`](Self::parse_slow) decodes the record again
    /// and names the fault. It never accepts what `parse_slow` refuses and yields the same
    /// record when both accept (the property tests in `fast_path_tests` below).
    ///
    /// Varints are read from 8-byte little-endian windows (one load each, no per-byte bounds
    /// check). Windows may read past the record's end; the fields they describe may not: every
    /// slice is taken from `body`, which ends where the record ends, positions only grow, and
    /// the record must end exactly at its declared length.
    #[inline(always)]
    fn parse_fast(&self) -> Option<(Record<'a>, usize)> {
        let data = self.data;
        let start = self.pos;
        // The record length: the one dependency from a record to the next, so it is decoded
        // with the shortest chain. Non-negative means an even zigzag, bit 0 of the first byte;
        // halving is folded into the shifts of the 1- and 2-byte forms.
        let w = window(data, start);
        if w & 1 != 0 {
            return None;
        }
        let (len, n) = if w & 0x80 == 0 {
            ((w & 0x7e) >> 1, 1)
        } else if w & 0x8000 == 0 {
            (((w & 0x7e) >> 1) | ((w >> 2) & 0x1fc0), 2)
        } else {
            let (u, n) = uvarint::<5>(w)?;
            (u64::from((u as u32) >> 1), n)
        };
        let end = start + n + len as usize;
        let body = data.get(..end)?;
        // Skip the attributes byte (unused in v2 records; it must exist: checked at the end).
        let mut p = start + n + 1;
        let (ts, n) = uvarint::<8>(window(data, p))?;
        p += n;
        let (od, n) = uvarint::<5>(window(data, p))?;
        p += n;
        let (key, q) = nullable(body, data, p)?;
        let (value, q) = nullable(body, data, q)?;
        p = q;
        let (hc, n) = uvarint::<5>(window(data, p))?;
        p += n;
        let headers_start = p;
        let hcount = unzigzag32(hc as u32);
        if hcount != 0 {
            if hcount < 0 || hcount as usize > end.saturating_sub(p) / 2 {
                return None;
            }
            for _ in 0..hcount {
                let (k, n) = uvarint::<5>(window(data, p))?;
                if k & 1 != 0 {
                    return None;
                }
                p += n;
                p = p.checked_add(((k as u32) >> 1) as usize)?;
                let (_, q) = nullable(body, data, p)?;
                p = q;
            }
            // A key past the record's end is caught here: positions only grow.
            body.get(..p)?;
        }
        if p != end {
            return None;
        }
        Some((
            Record {
                offset: self
                    .base_offset
                    .wrapping_add(i64::from(unzigzag32(od as u32))),
                timestamp: self.ts_base.wrapping_add(unzigzag64(ts) & self.ts_mask),
                key,
                value,
                headers: Headers {
                    data: body,
                    pos: headers_start,
                    left: hcount as u32,
                },
            },
            end,
        ))
    }

    /// What the iterator yields when the declared records are used up or the bytes are: the
    /// end, or the error that says which.
    #[inline(always)]
    fn finish(&mut self) -> Option<Result<Record<'a>, DecodeError>> {
        let fault = end_fault(self.left, self.pos, self.data.len(), self.declared)?;
        Some(Err(self.fail(fault)))
    }
}

/// The width of `[skip_below, until)` as an unsigned number (0 when empty). For any offset,
/// `offset - skip_below` taken modulo 2^64 is below it exactly when the offset is in the range:
/// below `skip_below` the difference wraps to at least 2^64 - (skip_below - offset), which is
/// never less than `until - skip_below` because both bounds are i64s.
fn visible_span(skip_below: i64, until: i64) -> u64 {
    if until > skip_below {
        (until as u64).wrapping_sub(skip_below as u64)
    } else {
        0
    }
}

/// The error for a fault at `at` in a records section that starts at `section_pos` in the
/// input (or, for an inflated section, in the batch that carried it).
#[cold]
#[inline(never)]
fn decode_error(
    Fault(kind, at): Fault,
    section_pos: usize,
    inflated: bool,
    base_offset: i64,
) -> DecodeError {
    if inflated {
        DecodeError::inflated(kind, section_pos, at, base_offset)
    } else {
        DecodeError::new(kind, section_pos + at, Some(base_offset))
    }
}

/// The fault of a record whose offset is below `next_offset` (not above the previous
/// record's) or at or past `end_offset` (past the batch's lastOffsetDelta), as deltas.
#[cold]
#[inline(never)]
fn bad_offset_delta(
    base_offset: i64,
    next_offset: i64,
    end_offset: i64,
    offset: i64,
    index: i32,
    at: usize,
) -> Fault {
    let delta = |o: i64| o.wrapping_sub(base_offset);
    Fault(
        DecodeErrorKind::BadOffsetDelta {
            index,
            delta: delta(offset),
            previous: (index > 0).then(|| delta(next_offset) - 1),
            last_offset_delta: delta(end_offset) - 1,
        },
        at,
    )
}

/// Why the records of a section ended where they did, when that is a fault: bytes left after
/// the declared count, or fewer records than declared.
#[cold]
#[inline(never)]
fn end_fault(left: u32, pos: usize, len: usize, declared: i32) -> Option<Fault> {
    if left == 0 {
        if pos < len {
            let extra = (len - pos) as u64;
            return Some(Fault(
                DecodeErrorKind::TrailingBytes { declared, extra },
                pos,
            ));
        }
        return None;
    }
    let found = declared.saturating_sub(left as i32);
    Some(Fault(
        DecodeErrorKind::TooFewRecords { declared, found },
        pos,
    ))
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.left == 0 || self.pos >= self.data.len() {
                return self.finish();
            }
            self.left -= 1;
            let start = self.pos;
            let record = match self.parse_fast() {
                Some((r, end)) => {
                    self.pos = end;
                    r
                }
                None => match Self::parse_slow(
                    self.data,
                    self.pos,
                    self.base_offset,
                    self.ts_base,
                    self.ts_mask,
                ) {
                    Ok((r, end)) => {
                        self.pos = end;
                        r
                    }
                    Err(f) => return Some(Err(self.fail(f))),
                },
            };
            // Offsets strictly increase (compaction leaves gaps) and stay within the batch's:
            // a batch whose records say otherwise would be delivered with offsets repeated,
            // out of order or past the position the next fetch starts from.
            let next = self.next_offset as u64;
            if (record.offset as u64).wrapping_sub(next)
                >= (self.end_offset as u64).wrapping_sub(next)
            {
                let fault = bad_offset_delta(
                    self.base_offset,
                    self.next_offset,
                    self.end_offset,
                    record.offset,
                    self.declared.wrapping_sub(self.left as i32 + 1),
                    start,
                );
                return Some(Err(self.fail(fault)));
            }
            self.next_offset = record.offset.wrapping_add(1);
            if (record.offset as u64).wrapping_sub(self.skip_below as u64) < self.visible_span {
                return Some(Ok(record));
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

/// The fast path against the slow one, on well-formed and mangled record sections.
#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
mod fast_path_tests {
    use super::*;
    use proptest::prelude::*;

    fn records_over(data: &[u8], log_append_time: Option<i64>) -> Records<'_> {
        Records {
            data,
            pos: 0,
            left: u32::MAX,
            declared: i32::MAX,
            base_offset: 1_000,
            ts_base: log_append_time.unwrap_or(1_700_000_000_000),
            ts_mask: if log_append_time.is_some() { 0 } else { -1 },
            skip_below: i64::MIN,
            visible_span: u64::MAX,
            next_offset: i64::MIN,
            end_offset: i64::MAX,
            section_pos: 0,
            inflated: false,
        }
    }

    type Owned = (
        i64,
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(Vec<u8>, Option<Vec<u8>>)>,
    );

    fn owned(r: &Record<'_>) -> Owned {
        (
            r.offset(),
            r.timestamp(),
            r.key().map(<[u8]>::to_vec),
            r.value().map(<[u8]>::to_vec),
            r.headers()
                .map(|h| (h.key().to_vec(), h.value().map(<[u8]>::to_vec)))
                .collect(),
        )
    }

    /// Walks `data` with both paths at every record start; returns how many records the fast
    /// path declined that the slow path accepted.
    fn agree(data: &[u8], log_append_time: Option<i64>) -> usize {
        let mut r = records_over(data, log_append_time);
        let mut declined = 0;
        while r.pos < data.len() {
            let fast = r.parse_fast();
            let slow = Records::parse_slow(data, r.pos, r.base_offset, r.ts_base, r.ts_mask);
            match (fast, slow) {
                (Some((f, end)), Ok((sr, send))) => {
                    assert_eq!(owned(&f), owned(&sr), "at {}", r.pos);
                    assert_eq!(end, send, "at {}", r.pos);
                    r.pos = end;
                }
                (Some((f, _)), Err(Fault(kind, at))) => {
                    panic!(
                        "fast accepted {:?} where slow failed: {kind:?} at {at}",
                        owned(&f)
                    )
                }
                (None, Ok((_, send))) => {
                    declined += 1;
                    r.pos = send;
                }
                (None, Err(_)) => break,
            }
        }
        declined
    }

    fn put_varlong(out: &mut Vec<u8>, v: i64, pad: bool) {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        if pad && out.len() < usize::MAX {
            // A non-minimal (but legal) encoding: one more byte of zeros.
            out.push((n as u8) | 0x80);
            out.push(0);
        } else {
            out.push(n as u8);
        }
    }

    fn put_bytes(out: &mut Vec<u8>, b: &Option<Vec<u8>>, pad: bool) {
        match b {
            None => put_varlong(out, -1, pad),
            Some(b) => {
                put_varlong(out, b.len() as i64, pad);
                out.extend_from_slice(b);
            }
        }
    }

    type Gen = (
        i64,
        i32,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(Vec<u8>, Option<Vec<u8>>)>,
        bool,
    );

    fn encode(records: &[Gen]) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut long_ts = 0;
        for (ts, od, key, value, headers, pad) in records {
            let mut body = vec![0u8];
            put_varlong(&mut body, *ts, *pad);
            if body.len() > 9 {
                long_ts += 1;
            }
            put_varlong(&mut body, i64::from(*od), *pad);
            put_bytes(&mut body, key, *pad);
            put_bytes(&mut body, value, *pad);
            put_varlong(&mut body, headers.len() as i64, *pad);
            for (k, v) in headers {
                put_bytes(&mut body, &Some(k.clone()), *pad);
                put_bytes(&mut body, v, *pad);
            }
            put_varlong(&mut out, body.len() as i64, *pad);
            out.extend_from_slice(&body);
        }
        (out, long_ts)
    }

    fn gen_record() -> impl Strategy<Value = Gen> {
        let bytes =
            |max| proptest::option::weighted(0.9, proptest::collection::vec(any::<u8>(), 0..max));
        (
            prop_oneof![
                0i64..70_000,
                any::<i64>(),
                Just(i64::MIN),
                Just(i64::MAX),
                -(1i64 << 40)..(1i64 << 40)
            ],
            prop_oneof![0i32..20_000, any::<i32>()],
            bytes(40),
            bytes(400),
            proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12), bytes(20)),
                0..4,
            ),
            proptest::bool::weighted(0.1),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn fast_path_matches_slow_path_on_valid_records(records in proptest::collection::vec(gen_record(), 1..20)) {
            let (data, long_ts) = encode(&records);
            // The fast path declines only varlongs longer than its 8-byte window.
            prop_assert!(agree(&data, None) <= long_ts);
            prop_assert!(agree(&data, Some(42)) <= long_ts);
        }

        #[test]
        fn fast_path_never_accepts_what_slow_path_refuses(
            records in proptest::collection::vec(gen_record(), 1..8),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let (mut data, _) = encode(&records);
            for (at, byte) in edits {
                let i = at.index(data.len());
                data[i] = byte;
            }
            if truncate {
                data.truncate(cut.index(data.len()));
            }
            agree(&data, None);
        }
    }

    #[test]
    fn visible_span_is_the_range() {
        let cases = [
            (i64::MIN, i64::MAX),
            (0, 10),
            (-5, 5),
            (10, 10),
            (10, 3),
            (i64::MIN, i64::MIN + 1),
            (i64::MAX - 1, i64::MAX),
        ];
        let probes = [
            i64::MIN,
            i64::MIN + 1,
            -6,
            -5,
            -1,
            0,
            1,
            3,
            9,
            10,
            11,
            i64::MAX - 1,
            i64::MAX,
        ];
        for (lo, hi) in cases {
            let span = visible_span(lo, hi);
            for o in probes {
                let fast = (o as u64).wrapping_sub(lo as u64) < span;
                assert_eq!(fast, o >= lo && o < hi, "{o} in [{lo}, {hi})");
            }
        }
    }

    #[test]
    fn uvarint_windows() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            1 << 21,
            (1 << 28) - 1,
            1 << 35,
            (1 << 56) - 1,
        ] {
            let mut buf = Vec::new();
            let mut n = v;
            while n >= 0x80 {
                buf.push((n as u8) | 0x80);
                n >>= 7;
            }
            buf.push(n as u8);
            let len = buf.len();
            buf.resize(8, 0xff);
            let w = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert_eq!(uvarint::<8>(w), Some((v, len)), "{v}");
            assert_eq!(uvarint::<5>(w).is_some(), len <= 5, "{v}");
        }
        assert_eq!(uvarint::<8>(u64::MAX), None);
        assert_eq!(window(&[1, 2, 3], 1), 0x0302);
        assert_eq!(window(&[1, 2, 3], 5), 0);
    }
}
