//! Fuzzes one record-batch codec on its own: `Scratch::inflate` with `Compression::Lz4`
//! (`crates/engine/src/record/compression.rs`), as a batch's records section is inflated. lz4: the
//! LZ4 frame format (KIP-57) parsed by the engine, independent blocks through the C library, linked
//! ones through lz4_flex. Checked against lz4_flex's own frame decoder wherever that accepts the
//! input: the bytes both produce agree (lz4_flex verifies checksums the engine skips, since the
//! batch CRC covers them; it reads frames concatenated after the first, which the engine
//! ignores; and its reader stops at a block that decodes to nothing).
//!
//! Properties (`kdirect_fuzz::check_codec`): never more output than the cap, never a panic; a
//! reused scratch buffer answers as a fresh one; an output of n bytes is accepted at cap n and
//! refused as too large (`DecompressedTooLarge`) at cap n - 1 — or, for a block lz4_flex calls
//! corrupt but the C decoder accepts (a match offset of 0, `regression-match-offset-0`),
//! refused as corrupt. lz4_flex vouches for an input only if it decodes all of the engine's
//! output: its reader stops after a block that decodes to nothing and never reads what follows
//! (`empty-block-then-match-offset-0`).
//!
//! Input: two bytes of cap (little-endian, times 16: 0 to just under 1 MiB), then the compressed
//! bytes.
#![no_main]

use kdirect_engine::record::Compression;
use kdirect_fuzz::check_codec;
use kdirect_fuzz::read_bounded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_codec(
        Compression::Lz4,
        data,
        Some(|src, cap| read_bounded(lz4_flex::frame::FrameDecoder::new(src), cap)),
    );
});
