//! Length-prefixed framing: every Kafka request and response is an `i32` size followed by that
//! many bytes (protocol guide, "Common Request and Response Structure").
//!
//! [`FrameDecoder::decode`] returns `Ok(None)` when the buffer does not yet hold a whole frame:
//! needing more bytes is a normal outcome, not an error (mini-redis' `Frame::check`). The size is
//! checked against a configured maximum *before* anything is allocated or reserved for it, so a
//! hostile or corrupt size costs nothing.

use bytes::{Buf, Bytes, BytesMut};

/// Default maximum frame size: 100 MiB, which is the broker's own default for
/// `socket.request.max.bytes` and comfortably above `fetch.max.bytes` (50 MiB).
pub const DEFAULT_MAX_FRAME_SIZE: usize = 100 * 1024 * 1024;

/// Size of the length prefix.
pub const SIZE_PREFIX_LEN: usize = 4;

/// A framing error: the stream cannot be trusted any more and the connection should be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The size prefix is negative.
    #[error("frame size prefix is negative ({size})")]
    NegativeSize {
        /// The size as read.
        size: i32,
    },
    /// The size prefix exceeds the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The size as read.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
}

/// Splits whole frames off the front of a read buffer.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_size: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameDecoder {
    /// A decoder that refuses frames larger than `max_frame_size` bytes (prefix excluded).
    pub fn new(max_frame_size: usize) -> Self {
        Self { max_frame_size }
    }

    /// The configured maximum frame size.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Reads the size prefix at the front of `buf` without consuming anything.
    ///
    /// `Ok(None)` if fewer than four bytes are buffered; otherwise the frame's body size, already
    /// checked against the maximum.
    pub fn peek_size(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        let Some(prefix) = buf.first_chunk::<SIZE_PREFIX_LEN>() else {
            return Ok(None);
        };
        let size = i32::from_be_bytes(*prefix);
        if size < 0 {
            return Err(FrameError::NegativeSize { size });
        }
        let size = size as usize;
        if size > self.max_frame_size {
            return Err(FrameError::TooLarge {
                size,
                max: self.max_frame_size,
            });
        }
        Ok(Some(size))
    }

    /// Takes one whole frame off the front of `buf`, without its size prefix.
    ///
    /// `Ok(None)` means "incomplete": keep the bytes and read more. When it returns `Ok(None)`
    /// after the prefix was seen, `buf` has been given room for the rest of the frame (bounded by
    /// the maximum), so the next read does not reallocate piecemeal.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(size) = self.peek_size(buf)? else {
            return Ok(None);
        };
        let total = SIZE_PREFIX_LEN + size;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        buf.advance(SIZE_PREFIX_LEN);
        Ok(Some(buf.split_to(size).freeze()))
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

    #[test]
    fn incomplete_prefix_then_body() {
        let d = FrameDecoder::new(16);
        let mut buf = BytesMut::from(&[0u8, 0, 0][..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&[3, b'a', b'b']);
        assert_eq!(d.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"cXY");
        assert_eq!(d.decode(&mut buf), Ok(Some(Bytes::from_static(b"abc"))));
        assert_eq!(&buf[..], b"XY");
    }

    #[test]
    fn two_frames_in_one_read() {
        let d = FrameDecoder::default();
        let mut buf = BytesMut::from(&[0u8, 0, 0, 1, 7, 0, 0, 0, 0][..]);
        assert_eq!(d.decode(&mut buf), Ok(Some(Bytes::from_static(&[7]))));
        assert_eq!(d.decode(&mut buf), Ok(Some(Bytes::new())));
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_frame_is_refused_before_allocation() {
        let d = FrameDecoder::new(1024);
        let mut buf = BytesMut::from(&0x7fff_ffffi32.to_be_bytes()[..]);
        let cap = buf.capacity();
        assert_eq!(
            d.decode(&mut buf),
            Err(FrameError::TooLarge {
                size: 0x7fff_ffff,
                max: 1024
            })
        );
        assert_eq!(buf.capacity(), cap, "nothing reserved for a refused frame");
        let mut neg = BytesMut::from(&(-5i32).to_be_bytes()[..]);
        assert_eq!(
            d.decode(&mut neg),
            Err(FrameError::NegativeSize { size: -5 })
        );
    }
}
