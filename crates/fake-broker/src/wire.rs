//! Response framing and the zero-copy write path.
//!
//! A response is a list of chunks: small encoded pieces (headers, partition fields) and stored
//! batch bodies, which are `Bytes` handles into the log and are never copied. The frame length
//! is known before the first byte is written; chunks go out with vectored writes.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]

use std::io::{self, IoSlice};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A response ready to write: the first chunk starts with the 4-byte size prefix.
#[derive(Debug, Default)]
pub(crate) struct Chunks {
    pub parts: Vec<Bytes>,
}

/// Encodes a kafka-protocol response body with its header and size prefix.
pub(crate) fn encode_response<R: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    body: &R,
) -> Result<Chunks, WireError> {
    let header_version = R::header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    // Sized first, as kdirect-proto's request encoder does, so the prefix is written in order.
    let size = header
        .compute_size(header_version)
        .map_err(WireError::new)?
        + body.compute_size(version).map_err(WireError::new)?;
    let size_i32 = i32::try_from(size).map_err(|_| WireError::new("response too large"))?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size_i32);
    header
        .encode(&mut buf, header_version)
        .map_err(WireError::new)?;
    body.encode(&mut buf, version).map_err(WireError::new)?;
    if buf.len() != 4 + size {
        return Err(WireError::new(format!(
            "response encoded to {} bytes after its prefix, sized as {size}",
            buf.len() - 4
        )));
    }
    Ok(Chunks {
        parts: vec![buf.freeze()],
    })
}

/// An encode or decode failure on the wire. kafka-protocol reports errors as `anyhow::Error`;
/// this keeps that type out of the crate by carrying the text.
#[derive(Debug)]
pub(crate) struct WireError(pub String);

impl WireError {
    pub fn new(e: impl std::fmt::Display) -> Self {
        WireError(e.to_string())
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Writes every chunk with vectored writes, without copying any of them, then flushes (a TLS
/// stream holds its records until then).
pub(crate) async fn write_chunks<W: AsyncWrite + Unpin>(
    stream: &mut W,
    chunks: &Chunks,
) -> io::Result<()> {
    // `first` is what is left of the part being written; `rest` are the parts after it.
    let mut first: &[u8] = &[];
    let mut rest: &[Bytes] = &chunks.parts;
    loop {
        while first.is_empty() {
            let Some((next, later)) = rest.split_first() else {
                return stream.flush().await;
            };
            first = next;
            rest = later;
        }
        let n = {
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(1 + rest.len().min(63));
            slices.push(IoSlice::new(first));
            for p in rest.iter().take(63) {
                slices.push(IoSlice::new(p));
            }
            stream.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "peer closed"));
        }
        // Drop the `n` bytes written from the front of `first`, then of `rest`.
        let mut left = n;
        loop {
            if let Some((_, tail)) = first.split_at_checked(left) {
                first = tail;
                break;
            }
            left -= first.len();
            let Some((next, later)) = rest.split_first() else {
                // More than was offered: nothing is left to write.
                first = &[];
                break;
            };
            first = next;
            rest = later;
        }
    }
}

/// Small big-endian / compact writers for the hand-encoded Fetch response.
pub(crate) trait PutKafka: BufMut {
    fn put_uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.put_u8(v as u8);
    }
    /// Array length: compact (N+1 varint) when flexible, else i32.
    fn put_array_len(&mut self, flexible: bool, n: usize) {
        if flexible {
            self.put_uvarint(n as u64 + 1);
        } else {
            self.put_i32(n as i32);
        }
    }
    /// Nullable array length (`None` = null).
    fn put_nullable_array_len(&mut self, flexible: bool, n: Option<usize>) {
        match (flexible, n) {
            (true, None) => self.put_u8(0),
            (false, None) => self.put_i32(-1),
            (f, Some(n)) => self.put_array_len(f, n),
        }
    }
    fn put_string(&mut self, flexible: bool, s: &str) {
        if flexible {
            self.put_uvarint(s.len() as u64 + 1);
        } else {
            self.put_i16(s.len() as i16);
        }
        self.put_slice(s.as_bytes());
    }
    /// Length of a (nullable) bytes field holding `n` bytes.
    fn put_bytes_len(&mut self, flexible: bool, n: usize) {
        if flexible {
            self.put_uvarint(n as u64 + 1);
        } else {
            self.put_i32(n as i32);
        }
    }
    /// An empty tagged-field section.
    fn put_no_tags(&mut self) {
        self.put_u8(0);
    }
}

impl<B: BufMut> PutKafka for B {}
