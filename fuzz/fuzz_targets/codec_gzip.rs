//! Fuzzes one record-batch codec on its own: `Scratch::inflate` with `Compression::Gzip`
//! (`crates/engine/src/record/compression.rs`), as a batch's records section is inflated. gzip
//! (`flate2` on zlib-rs), one member; bytes after it are ignored.
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
    check_codec(Compression::Gzip, data, None);
});
