//! Fuzzes the frame reader (`kdirect_proto::frame::FrameDecoder`) as the connection's read
//! loop drives it: a byte stream arriving in chunks of fuzzer-chosen sizes, whole frames split
//! off the front after every read. Checked against a plain reading of the whole stream: the
//! same frames in the same order, the same error at the same place, "need more bytes" only
//! when a frame is incomplete, and nothing reserved beyond the maximum frame size however large
//! the size prefix. Each frame's correlation id (`message::peek_correlation_id`) is its first
//! four bytes.
//!
//! Input: two bytes of maximum frame size (little-endian, 0–65535), one byte seeding the chunk
//! sizes (1–64 bytes), then the stream (size-prefixed frames).
#![no_main]

use bytes::{Bytes, BytesMut};
use kdirect_proto::frame::{FrameDecoder, FrameError, SIZE_PREFIX_LEN};
use kdirect_proto::message::peek_correlation_id;
use libfuzzer_sys::fuzz_target;

/// What a plain reading of the whole stream gives: the frames, then how it ends.
fn reference(stream: &[u8], max: usize) -> (Vec<&[u8]>, Result<(), FrameError>) {
    let mut frames = Vec::new();
    let mut rest = stream;
    loop {
        let Some((prefix, body)) = rest.split_first_chunk::<4>() else {
            return (frames, Ok(()));
        };
        let size = i32::from_be_bytes(*prefix);
        if size < 0 {
            return (frames, Err(FrameError::NegativeSize { size }));
        }
        let size = size as usize;
        if size > max {
            return (frames, Err(FrameError::TooLarge { size, max }));
        }
        if body.len() < size {
            return (frames, Ok(()));
        }
        let (frame, after) = body.split_at(size);
        frames.push(frame);
        rest = after;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(([m0, m1, seed], stream)) = data.split_first_chunk::<3>().map(|(h, s)| (*h, s)) else {
        return;
    };
    let max = usize::from(u16::from_le_bytes([m0, m1]));
    let (want, want_end) = reference(stream, max);
    let decoder = FrameDecoder::new(max);
    assert_eq!(decoder.max_frame_size(), max);
    let mut buf = BytesMut::new();
    let mut got: Vec<Bytes> = Vec::new();
    let mut end = Ok(());
    let mut fed = 0;
    let mut state = u32::from(seed) | 0x100;
    'read: while fed < stream.len() {
        // A chunk of 1–64 bytes: xorshift over the seed.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (1 + (state % 64) as usize).min(stream.len() - fed);
        buf.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        loop {
            let peeked = decoder.peek_size(&buf);
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    assert_eq!(
                        peeked,
                        Ok(Some(frame.len())),
                        "peek_size and decode disagree"
                    );
                    assert_eq!(
                        peek_correlation_id(&frame),
                        frame.first_chunk::<4>().map(|b| i32::from_be_bytes(*b))
                    );
                    got.push(frame);
                }
                Ok(None) => {
                    match peeked {
                        Ok(None) => assert!(buf.len() < SIZE_PREFIX_LEN),
                        Ok(Some(size)) => assert!(buf.len() < SIZE_PREFIX_LEN + size),
                        Err(e) => panic!("peek_size refused ({e}) what decode waits for"),
                    }
                    // Room for at most one frame beyond what was read: never sized by a
                    // prefix above the maximum (BytesMut may double what it holds).
                    let bound = 2 * (SIZE_PREFIX_LEN + max + stream.len()) + 64;
                    assert!(
                        buf.capacity() <= bound,
                        "capacity {} > {bound}",
                        buf.capacity()
                    );
                    break;
                }
                Err(e) => {
                    assert_eq!(peeked, Err(e.clone()), "peek_size and decode disagree");
                    assert!(!e.to_string().is_empty());
                    end = Err(e);
                    break 'read;
                }
            }
        }
    }
    let got: Vec<&[u8]> = got.iter().map(|f| &f[..]).collect();
    assert_eq!(
        got, want,
        "frames differ from a plain reading of the stream"
    );
    assert_eq!(end, want_end, "the stream ends differently");
});
