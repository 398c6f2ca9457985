//! Fuzzes one record-batch codec on its own: `Scratch::inflate` with `Compression::Snappy`
//! (`crates/engine/src/record/compression.rs`), as a batch's records section is inflated. snappy: a
//! raw block, or the xerial framing the Java producer writes (`\\x82SNAPPY\\0`, two versions, then
//! length-prefixed raw blocks). The raw length header can claim 4 GiB in five bytes: it must be
//! refused against the cap before anything is allocated.
//!
//! Properties (`kdirect_fuzz::check_codec`): never more output than the cap, never a panic; a
//! reused scratch buffer answers as a fresh one; an output of n bytes is accepted at cap n and
//! refused as too large (`DecompressedTooLarge`) at cap n - 1.
//!
//! Input: two bytes of cap (little-endian, times 16: 0 to just under 1 MiB), then the compressed
//! bytes.
#![no_main]

use kdirect_engine::record::Compression;
use kdirect_fuzz::check_codec;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_codec(Compression::Snappy, data, None);
});
