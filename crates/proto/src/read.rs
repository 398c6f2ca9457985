//! A bounded cursor over a response frame body: the one place kdirect-proto reads Kafka's
//! primitive types (protocol guide, "Protocol Primitive Types"; compact forms and tagged
//! fields from KIP-482).
//!
//! Every length and count is checked against the bytes that remain before it is used: a
//! string or byte field must fit, and an array of `n` elements whose smallest encoding is
//! `min` bytes needs `n × min` bytes. So nothing read off the wire can size an allocation
//! beyond a constant factor of the frame's own length. Failures are
//! [`ProtoError::Decode`] with the API, version, frame length and the byte position (from the
//! start of the frame body, header included) where the offending field starts.
//!
//! Strictness, compared with kafka-protocol's generated decoders: unsigned varints longer than
//! five bytes or above `u32::MAX` are refused (kafka-protocol silently truncates them), and a
//! known tagged field must fill exactly the size its header announces (kafka-protocol ignores
//! the size of known tags). So wherever this reader accepts a frame, kafka-protocol reads the
//! same fields at the same positions with the same values, or fails before allocating (it
//! refuses Fetch's top-level tag 0 below v16, which the schema walk skips as unknown).
//!
//! Bytes after the last field are ignored, as kafka-protocol, the Java client and librdkafka
//! ignore them: the Metadata answers of librdkafka 2.12's mock cluster carry one
//! (`tests/data/metadata-v*-response.bin`).

use std::ops::Range;

use kafka_protocol::messages::ApiKey;

use crate::api::consumer_protocol::ConsumerMessage;
use crate::error::ProtoError;

/// Kafka refuses topic names longer than this (`Topic.MAX_NAME_LENGTH` in the Java broker),
/// and they are ASCII, so it is also a byte limit. Views that repeat the topic name per
/// partition rely on it to keep their size proportional to the frame.
pub(crate) const MAX_TOPIC_NAME_LEN: usize = 249;

/// What a [`Reader`] reads, for its errors: a response frame body of an API, or the consumer
/// protocol's bytes embedded in JoinGroup metadata and SyncGroup assignments.
#[derive(Debug, Clone, Copy)]
enum Origin {
    Response(ApiKey),
    Embedded(ConsumerMessage),
}

/// A cursor over `buf[pos..end]`, reporting positions relative to the start of `buf` (the
/// frame body, or the embedded message).
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    origin: Origin,
    /// The version being read; for an embedded message, -1 until its prefix is read.
    version: i16,
    /// Compact strings/arrays/bytes, unsigned varints and tagged fields (KIP-482).
    pub(crate) flexible: bool,
}

pub(crate) type Res<T> = Result<T, ProtoError>;

impl<'a> Reader<'a> {
    /// A reader over a whole frame body, for `api` at `version`.
    pub(crate) fn new(buf: &'a [u8], api: ApiKey, version: i16, flexible: bool) -> Self {
        Self {
            buf,
            pos: 0,
            end: buf.len(),
            origin: Origin::Response(api),
            version,
            flexible,
        }
    }

    /// A reader over an embedded consumer-protocol message (never flexible); its version is
    /// unknown until [`Reader::version_prefix`] reads it.
    pub(crate) fn embedded(buf: &'a [u8], message: ConsumerMessage) -> Self {
        Self {
            buf,
            pos: 0,
            end: buf.len(),
            origin: Origin::Embedded(message),
            version: -1,
            flexible: false,
        }
    }

    /// The big-endian `i16` version that prefixes an embedded message (Java's
    /// `MessageUtil.toVersionPrefixedByteBuffer`); negative versions are refused. Later errors
    /// name it.
    pub(crate) fn version_prefix(&mut self) -> Res<i16> {
        let v = self.i16("version")?;
        if v < 0 {
            return Err(self.error_at(0, format!("version: unsupported version {v}")));
        }
        self.version = v;
        Ok(v)
    }

    /// Bytes consumed from the start of the frame body.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left before the end of this reader's window.
    pub(crate) fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// A decode error at byte `at`.
    pub(crate) fn error_at(&self, at: usize, reason: impl Into<String>) -> ProtoError {
        match self.origin {
            Origin::Response(api) => ProtoError::Decode {
                api,
                version: self.version,
                len: self.buf.len(),
                position: at,
                reason: reason.into(),
            },
            Origin::Embedded(message) => ProtoError::ConsumerProtocolDecode {
                message,
                version: (self.version >= 0).then_some(self.version),
                len: self.buf.len(),
                position: at,
                reason: reason.into(),
            },
        }
    }

    /// The error for a field of `n` bytes that does not fit in what remains.
    fn short(&self, n: usize, what: &str) -> ProtoError {
        self.error_at(
            self.pos,
            format!("{what}: needs {n} bytes, {} remain", self.remaining()),
        )
    }

    fn take(&mut self, n: usize, what: &str) -> Res<&'a [u8]> {
        let Some(s) = self
            .buf
            .get(self.pos..self.end)
            .and_then(|rest| rest.get(..n))
        else {
            return Err(self.short(n, what));
        };
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Res<[u8; N]> {
        let Some(a) = self
            .buf
            .get(self.pos..self.end)
            .and_then(<[u8]>::first_chunk::<N>)
        else {
            return Err(self.short(N, what));
        };
        self.pos += N;
        Ok(*a)
    }

    pub(crate) fn i8(&mut self, what: &str) -> Res<i8> {
        self.array::<1>(what).map(i8::from_be_bytes)
    }

    pub(crate) fn bool(&mut self, what: &str) -> Res<bool> {
        self.i8(what).map(|b| b != 0)
    }

    pub(crate) fn i16(&mut self, what: &str) -> Res<i16> {
        self.array::<2>(what).map(i16::from_be_bytes)
    }

    pub(crate) fn i32(&mut self, what: &str) -> Res<i32> {
        self.array::<4>(what).map(i32::from_be_bytes)
    }

    pub(crate) fn i64(&mut self, what: &str) -> Res<i64> {
        self.array::<8>(what).map(i64::from_be_bytes)
    }

    pub(crate) fn uuid(&mut self, what: &str) -> Res<[u8; 16]> {
        self.array::<16>(what)
    }

    /// An unsigned varint of at most five bytes that fits a `u32`.
    pub(crate) fn uvarint(&mut self, what: &str) -> Res<u32> {
        let start = self.pos;
        let mut value: u32 = 0;
        for i in 0..4 {
            let [b] = self.array::<1>(what)?;
            value |= u32::from(b & 0x7f) << (i * 7);
            if b < 0x80 {
                return Ok(value);
            }
        }
        // The fifth byte carries the top four bits and cannot continue.
        let [b] = self.array::<1>(what)?;
        if b > 0x0f {
            return Err(self.error_at(start, format!("{what}: varint overflows 32 bits")));
        }
        Ok(value | (u32::from(b) << 28))
    }

    /// A length or count: a compact (varint, plus one, 0 = null) one if flexible, else an
    /// `i16`/`i32` (-1 = null). `None` is null; other negatives are errors.
    fn length(&mut self, wide: bool, what: &str) -> Res<Option<usize>> {
        let start = self.pos;
        let n: i64 = if self.flexible {
            i64::from(self.uvarint(what)?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(self.error_at(start, format!("{what}: negative length {n}"))),
            n => Ok(Some(n as usize)),
        }
    }

    fn non_null<T>(&self, start: usize, v: Option<T>, what: &str) -> Res<T> {
        v.ok_or_else(|| self.error_at(start, format!("{what}: null where a value is required")))
    }

    /// A nullable string (UTF-8 checked).
    pub(crate) fn nullable_str(&mut self, what: &str) -> Res<Option<&'a str>> {
        let start = self.pos;
        let Some(n) = self.length(false, what)? else {
            return Ok(None);
        };
        let bytes = self.take(n, what)?;
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|e| self.error_at(start, format!("{what}: not UTF-8 ({e})")))
    }

    /// A string that must not be null.
    pub(crate) fn str(&mut self, what: &str) -> Res<&'a str> {
        let start = self.pos;
        let v = self.nullable_str(what)?;
        self.non_null(start, v, what)
    }

    /// A topic name: a string within Kafka's length limit.
    pub(crate) fn topic_name(&mut self, nullable: bool, what: &str) -> Res<Option<&'a str>> {
        let start = self.pos;
        let v = self.nullable_str(what)?;
        if !nullable && v.is_none() {
            return Err(self.error_at(start, format!("{what}: null topic name")));
        }
        if let Some(s) = v.filter(|s| s.len() > MAX_TOPIC_NAME_LEN) {
            return Err(self.error_at(
                start,
                format!(
                    "{what}: {} bytes, longer than Kafka's {MAX_TOPIC_NAME_LEN}-character limit",
                    s.len()
                ),
            ));
        }
        Ok(v)
    }

    /// Nullable bytes: their range in the frame body, so that callers can slice the frame's
    /// `Bytes` without copying.
    pub(crate) fn nullable_bytes(&mut self, what: &str) -> Res<Option<Range<usize>>> {
        let Some(n) = self.length(true, what)? else {
            return Ok(None);
        };
        let start = self.pos;
        self.take(n, what)?;
        Ok(Some(start..start + n))
    }

    /// Nullable bytes, as a slice of the buffer.
    pub(crate) fn nullable_slice(&mut self, what: &str) -> Res<Option<&'a [u8]>> {
        let Some(n) = self.length(true, what)? else {
            return Ok(None);
        };
        self.take(n, what).map(Some)
    }

    /// Bytes that must not be null (their range in the frame body).
    pub(crate) fn bytes(&mut self, what: &str) -> Res<Range<usize>> {
        let start = self.pos;
        let v = self.nullable_bytes(what)?;
        self.non_null(start, v, what)
    }

    /// The element count of a nullable array whose elements each take at least `min_size`
    /// bytes; refused when the elements cannot fit in what remains.
    pub(crate) fn nullable_count(&mut self, min_size: usize, what: &str) -> Res<Option<usize>> {
        let start = self.pos;
        let Some(n) = self.length(true, what)? else {
            return Ok(None);
        };
        let need = n.saturating_mul(min_size.max(1));
        if need > self.remaining() {
            return Err(self.error_at(
                start,
                format!(
                    "{what}: {n} elements of at least {min_size} bytes need {need} bytes, {} remain",
                    self.remaining()
                ),
            ));
        }
        Ok(Some(n))
    }

    /// The element count of an array that must not be null.
    pub(crate) fn count(&mut self, min_size: usize, what: &str) -> Res<usize> {
        let start = self.pos;
        let v = self.nullable_count(min_size, what)?;
        self.non_null(start, v, what)
    }

    /// The encoded size of a length or count field at this reader's flexibility: the smallest
    /// it can be (for minimum element sizes).
    pub(crate) fn len_size(&self, wide: bool) -> usize {
        match (self.flexible, wide) {
            (true, _) => 1,
            (false, true) => 4,
            (false, false) => 2,
        }
    }

    /// The smallest tagged-field section: one byte when flexible, nothing otherwise.
    pub(crate) fn tags_size(&self) -> usize {
        usize::from(self.flexible)
    }

    /// Reads a tagged-field section (nothing when not flexible). `known(tag, r)` reads a tag it
    /// knows from `r`, a reader limited to the field's announced size, and returns `true`; it
    /// returns `false` for tags it does not know, which are skipped by their size. A known
    /// field must use exactly its announced size.
    pub(crate) fn tags(
        &mut self,
        what: &str,
        mut known: impl FnMut(u32, &mut Reader<'a>) -> Res<bool>,
    ) -> Res<()> {
        if !self.flexible {
            return Ok(());
        }
        let start = self.pos;
        let n = self.uvarint(what)? as usize;
        // Each field takes at least two bytes: its tag and its size.
        if n.saturating_mul(2) > self.remaining() {
            return Err(self.error_at(
                start,
                format!(
                    "{what}: {n} tagged fields cannot fit in {} bytes",
                    self.remaining()
                ),
            ));
        }
        for _ in 0..n {
            let tag = self.uvarint(what)?;
            let size = self.uvarint(what)? as usize;
            let body = self.pos;
            if size > self.remaining() {
                return Err(self.error_at(
                    body,
                    format!(
                        "{what}: tag {tag} of {size} bytes, {} remain",
                        self.remaining()
                    ),
                ));
            }
            let mut sub = Reader {
                end: body + size,
                ..self.clone()
            };
            if known(tag, &mut sub)? && sub.remaining() != 0 {
                return Err(self.error_at(
                    body,
                    format!(
                        "{what}: tag {tag} announces {size} bytes but its value takes {}",
                        size - sub.remaining()
                    ),
                ));
            }
            self.pos = body + size;
        }
        Ok(())
    }

    /// A tagged-field section with no known tags.
    pub(crate) fn skip_tags(&mut self, what: &str) -> Res<()> {
        self.tags(what, |_, _| Ok(false))
    }

    /// The response header: v0 is the correlation id, v1 adds tagged fields.
    pub(crate) fn header(&mut self, header_version: i16) -> Res<i32> {
        let cid = self.i32("correlation id")?;
        if header_version >= 1 {
            let flexible = std::mem::replace(&mut self.flexible, true);
            self.skip_tags("response header tagged fields")?;
            self.flexible = flexible;
        }
        Ok(cid)
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use super::*;

    fn r(b: &[u8], flexible: bool) -> Reader<'_> {
        Reader::new(b, ApiKey::Fetch, 12, flexible)
    }

    #[test]
    fn varints() {
        assert_eq!(r(&[0x7f], true).uvarint("x").unwrap(), 127);
        assert_eq!(r(&[0x80, 0x01], true).uvarint("x").unwrap(), 128);
        assert_eq!(
            r(&[0xff, 0xff, 0xff, 0xff, 0x0f], true)
                .uvarint("x")
                .unwrap(),
            u32::MAX
        );
        let e = r(&[0xff, 0xff, 0xff, 0xff, 0x1f], true)
            .uvarint("x")
            .unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        let e = r(&[0x80, 0x80], true).uvarint("x").unwrap_err();
        assert!(e.to_string().contains("byte 2"), "{e}");
    }

    #[test]
    fn counts_are_bounded_by_what_remains() {
        // 1000 elements of 8 bytes in 16 bytes.
        let mut b = vec![0, 0, 0x03, 0xe8];
        b.extend([0; 16]);
        let e = r(&b, false).count(8, "things").unwrap_err();
        assert!(
            matches!(
                e,
                ProtoError::Decode {
                    position: 0,
                    len: 20,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("things: 1000 elements"), "{e}");
        // Two of them fit.
        let b = [
            0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        ];
        assert_eq!(r(&b, false).count(8, "things").unwrap(), 2);
        // Negative and null.
        let e = r(&[0xff, 0xff, 0xff, 0xfe], false)
            .count(1, "x")
            .unwrap_err();
        assert!(e.to_string().contains("negative length -2"), "{e}");
        assert_eq!(
            r(&[0xff, 0xff, 0xff, 0xff], false)
                .nullable_count(1, "x")
                .unwrap(),
            None
        );
        assert!(r(&[0xff, 0xff, 0xff, 0xff], false).count(1, "x").is_err());
        // Compact: 0 is null, n + 1 otherwise; u32::MAX elements never fit.
        assert_eq!(r(&[0], true).nullable_count(4, "x").unwrap(), None);
        assert_eq!(r(&[1], true).count(4, "x").unwrap(), 0);
        assert!(r(&[0xff, 0xff, 0xff, 0xff, 0x0f], true)
            .count(1, "x")
            .is_err());
    }

    #[test]
    fn tags_skip_unknown_and_size_known() {
        // Two fields: tag 5 (2 bytes, unknown), tag 1 (4 bytes, known i32).
        let b = [2, 5, 2, 0xaa, 0xbb, 1, 4, 0, 0, 0, 7];
        let mut got = None;
        let mut rd = r(&b, true);
        rd.tags("t", |tag, r| {
            if tag == 1 {
                got = Some(r.i32("v")?);
                return Ok(true);
            }
            Ok(false)
        })
        .unwrap();
        assert_eq!(got, Some(7));
        assert_eq!(rd.remaining(), 0);
        // A known field that is shorter than announced.
        let b = [1, 1, 5, 0, 0, 0, 7, 0];
        let e = r(&b, true)
            .tags("t", |_, r| r.i32("v").map(|_| true))
            .unwrap_err();
        assert!(e.to_string().contains("announces 5 bytes"), "{e}");
        // A known field that is longer than announced reads past its window: an error.
        let b = [1, 1, 2, 0, 0, 0, 7];
        assert!(r(&b, true)
            .tags("t", |_, r| r.i32("v").map(|_| true))
            .is_err());
        // A huge tag count.
        let e = r(&[0xff, 0x7f], true).skip_tags("t").unwrap_err();
        assert!(e.to_string().contains("cannot fit"), "{e}");
    }

    #[test]
    fn strings() {
        assert_eq!(r(&[0, 2, b'h', b'i'], false).str("s").unwrap(), "hi");
        assert_eq!(r(&[3, b'h', b'i'], true).str("s").unwrap(), "hi");
        assert_eq!(r(&[0xff, 0xff], false).nullable_str("s").unwrap(), None);
        assert!(r(&[0, 3, b'h', b'i'], false).str("s").is_err());
        assert!(r(&[0, 1, 0xff], false).str("s").is_err());
        let long = [&[0u8, 250][..], &[b'a'; 250]].concat();
        assert!(r(&long, false).topic_name(false, "t").is_err());
    }
}
