//! Decompression of a batch's records section into a reused buffer, bounded by a cap.
//!
//! Codecs (numbers in docs/decoder.md):
//! - gzip: `flate2` on the pure-Rust `zlib-rs` backend.
//! - snappy: `snap` (pure Rust), raw blocks and the xerial framing the Java producer writes
//!   (`\x82SNAPPY\0`, version, compatible version, then big-endian length-prefixed raw blocks).
//! - lz4: the standard LZ4 frame format (KIP-57), parsed here, blocks decoded straight into the
//!   buffer: independent blocks (what the Java producer and kafka-protocol write) by the
//!   reference C library through the `lz4` crate, linked blocks by `lz4_flex` (pure Rust) with
//!   the previous 64 KiB as dictionary; lz4_flex also names the fault when C refuses a block.
//!   Header and content checksums are not verified: the batch CRC32C covers the bytes.
//! - zstd: the `zstd` crate (the reference C library), one decompression context kept per
//!   [`Scratch`] and reused.
//!
//! Every codec writes into [`Scratch`]'s buffer, which keeps its initialized high-water mark,
//! so a batch costs neither an allocation nor a memset once the buffer has grown. Output beyond
//! the cap is an error, never an allocation.
use std::fmt;
use std::io::Read;

use super::error::DecodeErrorKind;

/// A batch's compression codec (attributes bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// No compression (0).
    None,
    /// gzip (1).
    Gzip,
    /// snappy (2), raw or xerial-framed.
    Snappy,
    /// lz4 frame format (3).
    Lz4,
    /// zstd (4).
    Zstd,
}

impl Compression {
    /// The codec for a 3-bit id, or `None` for 5–7.
    pub fn from_id(id: u8) -> Option<Compression> {
        Some(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return None,
        })
    }

    /// The lowercase name Kafka's `compression.type` uses.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reusable decompression buffer (and zstd context). Keep one per fetching task and hand it
/// to every batch: after the first few batches, decompression allocates nothing.
pub struct Scratch {
    /// Initialized bytes; `buf.len()` is the high-water mark, `used` the current output.
    buf: Vec<u8>,
    used: usize,
    zstd: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl fmt::Debug for Scratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scratch")
            .field("capacity", &self.buf.len())
            .field("used", &self.used)
            .field("zstd_context", &self.zstd.is_some())
            .finish()
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

/// The 4 bytes at `pos`, if there are 4.
fn word(src: &[u8], pos: usize) -> Option<[u8; 4]> {
    src.get(pos..pos.checked_add(4)?)?.try_into().ok()
}

/// The first allocation for a batch whose size is unknown.
const INITIAL: usize = 64 * 1024;

/// Errors from a codec, before the caller adds positions.
type CodecResult<T> = Result<T, DecodeErrorKind>;

impl Scratch {
    /// An empty scratch buffer; it grows on first use.
    pub fn new() -> Scratch {
        Scratch {
            buf: Vec::new(),
            used: 0,
            zstd: None,
        }
    }

    /// Bytes the buffer holds (its high-water mark: what the largest batch it inflated
    /// took).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The decompressed bytes of the last batch.
    pub fn inflated(&self) -> &[u8] {
        self.buf.get(..self.used).unwrap_or(&[])
    }

    /// Decompresses `deflated` (a batch's records section) with `codec`, replacing the previous
    /// contents; at most `cap` bytes of output. [`RecordBatch::records`](super::RecordBatch::records) calls
    /// this; it is public for tools that want the inflated bytes themselves.
    pub fn inflate(
        &mut self,
        codec: Compression,
        deflated: &[u8],
        cap: usize,
    ) -> CodecResult<&[u8]> {
        self.used = 0;
        let res = match codec {
            Compression::None => self.copy(deflated, cap),
            Compression::Gzip => self.gzip(deflated, cap),
            Compression::Snappy => self.snappy(deflated, cap),
            Compression::Lz4 => self.lz4(deflated, cap),
            Compression::Zstd => self.zstd(deflated, cap),
        };
        if let Err(e) = res {
            self.used = 0;
            return Err(e);
        }
        Ok(self.inflated())
    }

    /// Makes at least `want` bytes (capped at `cap`) initialized; returns the usable length.
    fn grow_to(&mut self, want: usize, cap: usize) -> usize {
        let want = want.min(cap);
        if self.buf.len() < want {
            // Double to amortize, but never past the cap.
            let target = want.max(self.buf.len().saturating_mul(2)).min(cap);
            self.buf.resize(target, 0);
        }
        self.buf.len().min(cap)
    }

    fn too_large(codec: Compression, cap: usize) -> DecodeErrorKind {
        DecodeErrorKind::DecompressedTooLarge { codec, cap }
    }

    fn fail(codec: Compression, detail: impl fmt::Display) -> DecodeErrorKind {
        DecodeErrorKind::Decompress {
            codec,
            detail: detail.to_string(),
        }
    }

    fn copy(&mut self, src: &[u8], cap: usize) -> CodecResult<()> {
        if src.len() > cap {
            return Err(Self::too_large(Compression::None, cap));
        }
        self.buf.clear();
        self.buf.extend_from_slice(src);
        self.used = src.len();
        Ok(())
    }

    /// Drains a `Read` into the buffer, growing it up to the cap.
    fn read_all<R: Read>(&mut self, codec: Compression, mut r: R, cap: usize) -> CodecResult<()> {
        loop {
            if self.used >= self.buf.len().min(cap) {
                if self.used >= cap {
                    // Full at the cap: one more byte means too large.
                    let mut probe = [0u8; 1];
                    return match r.read(&mut probe) {
                        Ok(0) => Ok(()),
                        Ok(_) => Err(Self::too_large(codec, cap)),
                        Err(e) => Err(Self::fail(codec, e)),
                    };
                }
                let want = self
                    .used
                    .saturating_add(INITIAL)
                    .max(self.used.saturating_mul(2));
                self.grow_to(want, cap);
            }
            let avail = self.buf.len().min(cap);
            let out = self.buf.get_mut(self.used..avail).unwrap_or(&mut []);
            match r.read(out) {
                Ok(0) => return Ok(()),
                Ok(n) => self.used += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Self::fail(codec, e)),
            }
        }
    }

    fn gzip(&mut self, src: &[u8], cap: usize) -> CodecResult<()> {
        let dec = flate2::bufread::GzDecoder::new(src);
        self.read_all(Compression::Gzip, dec, cap)
    }

    fn snappy(&mut self, src: &[u8], cap: usize) -> CodecResult<()> {
        const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
        if src.starts_with(XERIAL_MAGIC) {
            // magic (8), version (4), compatible version (4), then [len: i32 BE][raw block]*.
            let mut pos = 16usize;
            if src.len() < pos {
                return Err(Self::fail(Compression::Snappy, "truncated xerial header"));
            }
            while pos < src.len() {
                let len = u32::from_be_bytes(word(src, pos).ok_or_else(|| {
                    Self::fail(Compression::Snappy, "truncated xerial block length")
                })?);
                pos += 4;
                let end = pos
                    .checked_add(len as usize)
                    .filter(|&e| e <= src.len())
                    .ok_or_else(|| {
                        Self::fail(
                            Compression::Snappy,
                            "xerial block runs past the records section",
                        )
                    })?;
                let block = src.get(pos..end).unwrap_or(&[]);
                self.snappy_raw(block, cap)?;
                pos = end;
            }
            Ok(())
        } else {
            self.snappy_raw(src, cap)
        }
    }

    /// Appends one raw snappy block.
    fn snappy_raw(&mut self, block: &[u8], cap: usize) -> CodecResult<()> {
        let n = snap::raw::decompress_len(block).map_err(|e| Self::fail(Compression::Snappy, e))?;
        let end = self
            .used
            .checked_add(n)
            .filter(|&e| e <= cap)
            .ok_or_else(|| Self::too_large(Compression::Snappy, cap))?;
        self.grow_to(end, cap);
        let out = self.buf.get_mut(self.used..end).unwrap_or(&mut []);
        let written = snap::raw::Decoder::new()
            .decompress(block, out)
            .map_err(|e| Self::fail(Compression::Snappy, e))?;
        self.used += written;
        Ok(())
    }

    fn lz4(&mut self, src: &[u8], cap: usize) -> CodecResult<()> {
        let codec = Compression::Lz4;
        let bad = |what: &str| Self::fail(codec, what);
        let magic = src.get(0..4).ok_or_else(|| bad("truncated frame header"))?;
        if magic != [0x04, 0x22, 0x4d, 0x18] {
            return Err(bad("not an LZ4 frame (bad magic number)"));
        }
        let flg = *src.get(4).ok_or_else(|| bad("truncated frame header"))?;
        let bd = *src.get(5).ok_or_else(|| bad("truncated frame header"))?;
        if flg >> 6 != 0b01 {
            return Err(bad("unsupported LZ4 frame version"));
        }
        let independent = flg & 0x20 != 0;
        let block_checksum = flg & 0x10 != 0;
        let content_size = flg & 0x08 != 0;
        let content_checksum = flg & 0x04 != 0;
        let dict_id = flg & 0x01 != 0;
        let block_max = match (bd >> 4) & 0x7 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            _ => return Err(bad("invalid LZ4 block maximum size")),
        };
        // FLG, BD, [content size 8], [dict id 4], header checksum 1.
        let mut pos = 6 + if content_size { 8 } else { 0 } + if dict_id { 4 } else { 0 } + 1;
        if src.len() < pos {
            return Err(bad("truncated frame header"));
        }
        loop {
            let word =
                u32::from_le_bytes(word(src, pos).ok_or_else(|| bad("truncated block size"))?);
            pos += 4;
            if word == 0 {
                // End mark, then the optional content checksum; anything after is ignored.
                if content_checksum && src.len() < pos + 4 {
                    return Err(bad("truncated content checksum"));
                }
                return Ok(());
            }
            let stored = word & 0x8000_0000 != 0;
            let len = (word & 0x7fff_ffff) as usize;
            if len > block_max {
                return Err(bad("block larger than the frame's maximum block size"));
            }
            let end = pos
                .checked_add(len)
                .filter(|&e| e <= src.len())
                .ok_or_else(|| bad("block runs past the records section"))?;
            let block = src.get(pos..end).unwrap_or(&[]);
            pos = end + if block_checksum { 4 } else { 0 };
            if stored {
                let new_used = self
                    .used
                    .checked_add(len)
                    .filter(|&e| e <= cap)
                    .ok_or_else(|| Self::too_large(codec, cap))?;
                self.grow_to(new_used, cap);
                if let Some(out) = self.buf.get_mut(self.used..new_used) {
                    out.copy_from_slice(block);
                }
                self.used = new_used;
                continue;
            }
            let limit = self.used.saturating_add(block_max).min(cap);
            let avail = self.grow_to(limit, cap);
            let (before, after) = self.buf.split_at_mut(self.used.min(avail));
            let out = after
                .get_mut(..avail.saturating_sub(before.len()))
                .unwrap_or(&mut []);
            let res = if independent || before.is_empty() {
                // The reference C decoder (LZ4_decompress_safe, built for untrusted input)
                // through the `lz4` crate's safe wrapper: ~20% faster than lz4_flex on blocks
                // written at the HC levels Java producers default to (docs/decoder.md). When
                // it refuses a block, lz4_flex decodes it again to say why (or that the output
                // hit the cap).
                let capacity = i32::try_from(out.len()).unwrap_or(i32::MAX);
                match lz4::block::decompress_to_buffer(block, Some(capacity), out) {
                    Ok(n) => Ok(n),
                    Err(_) => lz4_flex::block::decompress_into(block, out),
                }
            } else {
                let dict = before
                    .get(before.len().saturating_sub(64 << 10)..)
                    .unwrap_or(&[]);
                lz4_flex::block::decompress_into_with_dict(block, out, dict)
            };
            match res {
                Ok(n) => self.used += n,
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if avail >= cap => {
                    return Err(Self::too_large(codec, cap))
                }
                Err(e) => return Err(Self::fail(codec, e)),
            }
        }
    }

    fn zstd(&mut self, src: &[u8], cap: usize) -> CodecResult<()> {
        use zstd::zstd_safe::{get_error_name, DCtx, InBuffer, OutBuffer, ResetDirective};
        let codec = Compression::Zstd;
        let mut dctx = match self.zstd.take() {
            Some(d) => d,
            None => DCtx::try_create()
                .ok_or_else(|| Self::fail(codec, "cannot create a zstd context"))?,
        };
        let res = (|| {
            dctx.reset(ResetDirective::SessionOnly)
                .map_err(|c| Self::fail(codec, get_error_name(c)))?;
            let mut input = InBuffer::around(src);
            let mut frame_done = false;
            let mut frame = FrameSize::at(src, 0, 0);
            loop {
                if self.used >= self.buf.len().min(cap) {
                    if self.used >= cap {
                        // At the cap: fine only if the input is used up and the frame finished.
                        if frame_done && input.pos() >= src.len() {
                            return Ok(());
                        }
                        // Ask for one more byte to tell "exactly at cap" from "over". Frames
                        // that add nothing (empty or skippable ones) may follow: keep asking
                        // while the input moves and no byte comes out.
                        loop {
                            let mut probe = [0u8; 1];
                            let mut out = OutBuffer::around(&mut probe[..]);
                            let before_in = input.pos();
                            let hint = dctx
                                .decompress_stream(&mut out, &mut input)
                                .map_err(|c| Self::fail(codec, get_error_name(c)))?;
                            if out.pos() > 0 {
                                return Err(Self::too_large(codec, cap));
                            }
                            if hint == 0 {
                                frame = frame.end(src, input.pos(), self.used)?;
                                if input.pos() >= src.len() {
                                    return Ok(());
                                }
                            }
                            if input.pos() == before_in {
                                // Room for a byte, none produced, no input taken: the input
                                // ran out mid-frame.
                                return Err(Self::fail(codec, "truncated zstd frame"));
                            }
                        }
                    }
                    let want = self
                        .used
                        .saturating_add(INITIAL)
                        .max(self.used.saturating_mul(2));
                    self.grow_to(want, cap);
                }
                let avail = self.buf.len().min(cap);
                let window = self.buf.get_mut(..avail).unwrap_or(&mut []);
                let mut out = OutBuffer::around_pos(window, self.used);
                let before_in = input.pos();
                let hint = dctx
                    .decompress_stream(&mut out, &mut input)
                    .map_err(|c| Self::fail(codec, get_error_name(c)))?;
                let progressed = out.pos() > self.used || input.pos() > before_in;
                self.used = out.pos();
                frame_done = hint == 0;
                if frame_done {
                    frame = frame.end(src, input.pos(), self.used)?;
                }
                if frame_done && input.pos() >= src.len() {
                    return Ok(());
                }
                if !progressed && self.used < avail {
                    // Output room and no progress: the input ran out mid-frame.
                    return Err(Self::fail(codec, "truncated zstd frame"));
                }
            }
        })();
        self.zstd = Some(dctx);
        res
    }
}

/// The content size a zstd frame's header declares, and where its output began: checked when
/// the frame ends, so that a frame is refused for what it is whatever the output buffer's size.
/// The C library checks the declared size when it decodes a frame in one pass (the output
/// buffer holds all of it) but not when it streams one whose last block is empty, so without
/// this a frame declaring more than its blocks hold was accepted into a small buffer and
/// refused by a larger one (found by the `codec_zstd` fuzz target).
#[derive(Clone, Copy)]
struct FrameSize {
    declared: Option<u64>,
    out_start: usize,
}

impl FrameSize {
    /// The frame starting at `src[at..]`, its output starting at `out_start`. A header that
    /// cannot be read declares nothing: the decoder refuses it itself.
    fn at(src: &[u8], at: usize, out_start: usize) -> FrameSize {
        let declared = src
            .get(at..)
            .and_then(|rest| zstd::zstd_safe::get_frame_content_size(rest).ok().flatten());
        FrameSize {
            declared,
            out_start,
        }
    }

    /// The frame ended with the input at `in_pos` and the output at `used`: an error if it
    /// produced other than it declared; else the next frame's.
    fn end(self, src: &[u8], in_pos: usize, used: usize) -> CodecResult<FrameSize> {
        let produced = used.saturating_sub(self.out_start) as u64;
        if let Some(declared) = self.declared {
            if produced != declared {
                return Err(Scratch::fail(
                    Compression::Zstd,
                    format_args!(
                        "frame declares {declared} bytes of content but its blocks hold {produced}"
                    ),
                ));
            }
        }
        Ok(FrameSize::at(src, in_pos, used))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8 ^ (i / 1000) as u8).collect()
    }

    #[test]
    fn gzip_round_trip_and_cap() {
        use std::io::Write;
        let data = sample(300_000);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&data).unwrap();
        let z = e.finish().unwrap();
        let mut s = Scratch::new();
        assert_eq!(
            s.inflate(Compression::Gzip, &z, usize::MAX).unwrap(),
            &data[..]
        );
        assert_eq!(
            s.inflate(Compression::Gzip, &z, data.len()).unwrap(),
            &data[..]
        );
        assert!(matches!(
            s.inflate(Compression::Gzip, &z, data.len() - 1),
            Err(DecodeErrorKind::DecompressedTooLarge { .. })
        ));
        assert!(s
            .inflate(Compression::Gzip, &z[..z.len() / 2], usize::MAX)
            .is_err());
    }

    #[test]
    fn snappy_raw_and_xerial() {
        let data = sample(100_000);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        let mut s = Scratch::new();
        assert_eq!(
            s.inflate(Compression::Snappy, &raw, usize::MAX).unwrap(),
            &data[..]
        );
        let mut x = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for chunk in data.chunks(32 * 1024) {
            let c = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            x.extend_from_slice(&(c.len() as u32).to_be_bytes());
            x.extend_from_slice(&c);
        }
        assert_eq!(
            s.inflate(Compression::Snappy, &x, usize::MAX).unwrap(),
            &data[..]
        );
        assert!(matches!(
            s.inflate(Compression::Snappy, &x, 50_000),
            Err(DecodeErrorKind::DecompressedTooLarge { .. })
        ));
        assert!(s
            .inflate(Compression::Snappy, &x[..x.len() - 3], usize::MAX)
            .is_err());
    }

    #[test]
    fn lz4_frames_linked_and_independent() {
        let data = sample(700_000);
        for independent in [true, false] {
            let mut info = lz4_flex::frame::FrameInfo::new();
            info.block_mode = if independent {
                lz4_flex::frame::BlockMode::Independent
            } else {
                lz4_flex::frame::BlockMode::Linked
            };
            info.block_checksums = true;
            info.content_checksum = true;
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            std::io::Write::write_all(&mut enc, &data).unwrap();
            let z = enc.finish().unwrap();
            let mut s = Scratch::new();
            assert_eq!(
                s.inflate(Compression::Lz4, &z, usize::MAX).unwrap(),
                &data[..]
            );
            assert!(matches!(
                s.inflate(Compression::Lz4, &z, 100_000),
                Err(DecodeErrorKind::DecompressedTooLarge { .. })
            ));
            assert!(s
                .inflate(Compression::Lz4, &z[..z.len() - 9], usize::MAX)
                .is_err());
        }
    }

    #[test]
    fn zstd_round_trip_cap_and_bomb() {
        let data = sample(500_000);
        let z = zstd::bulk::compress(&data, 3).unwrap();
        let mut s = Scratch::new();
        assert_eq!(
            s.inflate(Compression::Zstd, &z, usize::MAX).unwrap(),
            &data[..]
        );
        assert_eq!(
            s.inflate(Compression::Zstd, &z, data.len()).unwrap(),
            &data[..]
        );
        assert!(matches!(
            s.inflate(Compression::Zstd, &z, data.len() - 1),
            Err(DecodeErrorKind::DecompressedTooLarge { .. })
        ));
        assert!(s
            .inflate(Compression::Zstd, &z[..z.len() / 2], usize::MAX)
            .is_err());
        // The context is reusable after an error.
        assert_eq!(
            s.inflate(Compression::Zstd, &z, usize::MAX).unwrap(),
            &data[..]
        );
        // 64 MiB of zeros compress to a few KiB: the cap stops it.
        let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 3).unwrap();
        assert!(matches!(
            s.inflate(Compression::Zstd, &bomb, 1 << 20),
            Err(DecodeErrorKind::DecompressedTooLarge { .. })
        ));
        assert!(s.buf.len() <= 1 << 20);
    }

    /// Found by the `codec_zstd` fuzz target: at the cap, one probe decoded the next frame's
    /// header without output and, with more input left, called that "too large". Frames that
    /// add no bytes (empty ones, after the data) fit any cap that holds the data.
    #[test]
    fn zstd_empty_frames_at_the_cap() {
        let empty = zstd::bulk::compress(b"", 3).unwrap();
        let two_empty = [&empty[..], &empty[..]].concat();
        let mut s = Scratch::new();
        assert_eq!(s.inflate(Compression::Zstd, &two_empty, 0).unwrap(), b"");
        let abc = zstd::bulk::compress(b"abc", 3).unwrap();
        let then_empty = [&abc[..], &empty[..], &empty[..]].concat();
        assert_eq!(
            s.inflate(Compression::Zstd, &then_empty, 3).unwrap(),
            b"abc"
        );
        assert!(matches!(
            s.inflate(Compression::Zstd, &then_empty, 2),
            Err(DecodeErrorKind::DecompressedTooLarge { .. })
        ));
        // A frame cut short at the cap is still an error, not "fits".
        let cut = [&abc[..], &abc[..abc.len() - 2]].concat();
        assert!(s.inflate(Compression::Zstd, &cut, 3).is_err());
        // The fuzzer's input: two empty frames (no checksum, no content size).
        let found = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x3a, 0x01, 0x00, 0x00];
        let twice = [&found[..], &found[..]].concat();
        assert_eq!(s.inflate(Compression::Zstd, &twice, 0).unwrap(), b"");
    }

    /// Found by the `codec_zstd` fuzz target: a frame declaring 68,143 bytes of content whose
    /// blocks hold 65,601 (one RLE block, then an empty last block) was accepted by a fresh
    /// Scratch, whose buffer is too small for the C library's one-pass decode, and refused by
    /// a reused one, whose buffer was not. Refused either way, and the same with a second frame
    /// after a good one.
    #[test]
    fn zstd_frame_holding_other_than_its_declared_size_is_refused_whatever_the_buffer() {
        let found: &[u8] = &[
            0x28, 0xb5, 0x2f, 0xfd, 0x80, 0x3a, 0x2f, 0x0a, 0x01, 0x00, 0x0a, 0x02, 0x08, 0x0a,
            0x01, 0x00, 0x00,
        ];
        let cap = 627_264;
        let declares = |e: DecodeErrorKind| {
            let text = e.to_string();
            assert!(
                text.contains("declares 68143 bytes") && text.contains("hold 65601"),
                "{text}"
            );
        };
        declares(
            Scratch::new()
                .inflate(Compression::Zstd, found, cap)
                .unwrap_err(),
        );
        let mut reused = Scratch::new();
        reused.inflate(Compression::Zstd, found, cap).unwrap_err();
        assert!(reused.inflate(Compression::Zstd, found, cap).is_err());
        assert!(reused
            .inflate(Compression::Zstd, found, usize::MAX)
            .is_err());
        let abc = zstd::bulk::compress(b"abc", 3).unwrap();
        let second = [&abc[..], found].concat();
        declares(
            Scratch::new()
                .inflate(Compression::Zstd, &second, cap)
                .unwrap_err(),
        );
        // Frames that declare their size and hold it still decode, one after another.
        let two = [&abc[..], &abc[..]].concat();
        assert_eq!(
            Scratch::new().inflate(Compression::Zstd, &two, 6).unwrap(),
            b"abcabc"
        );
    }
}
