//! Helpers shared by the fuzz targets in `fuzz_targets/`: picking a version from a selector
//! byte, re-encoding a decoded response to check it decodes to itself, and the properties every
//! decompression codec must keep.

use std::io::Read;

use kdirect_engine::record::{Compression, DecodeErrorKind, Scratch};
use kdirect_proto::message::{decode_response, encode_response, Api};

/// A version kdirect speaks for `A`, chosen by `sel` (wrapping around the range).
pub fn version<A: Api>(sel: u8) -> i16 {
    let r = A::VERSIONS;
    r.min + i16::from(sel) % (r.max - r.min + 1)
}

/// Decodes `frame` (size prefix removed) the way `BrokerConnection::request_at` does:
/// kdirect's bounded walk, then kafka-protocol. Where it is accepted, the response is
/// re-encoded with kafka-protocol's encoder (what the fake broker does) and decoded again: no
/// panic, and the same correlation id. The bodies are not compared: kafka-protocol 0.18 keeps
/// unknown tagged fields by `i32` tag, so a tag at or above 2^31 (a valid unsigned varint)
/// comes back negative and re-encodes as another tag; the fuzzers hit that within seconds on
/// every flexible response. That is the encoder's side, not kdirect's decoder.
pub fn decode_and_round_trip<A: Api>(frame: &[u8], version: i16) -> Option<(i32, A::Response)> {
    let (cid, resp) = decode_response::<A>(bytes::Bytes::copy_from_slice(frame), version).ok()?;
    let Ok(again) = encode_response::<A>(&resp, version, cid) else {
        return Some((cid, resp));
    };
    let body = again.slice(kdirect_proto::frame::SIZE_PREFIX_LEN..);
    if let Ok((cid2, _)) = decode_response::<A>(body, version) {
        assert_eq!(cid, cid2, "correlation id changed in a round trip");
    }
    Some((cid, resp))
}

/// The decompression cap a codec target uses: the first two input bytes, times 16 (0 to just
/// under 1 MiB), so that small caps, and the boundary at exactly the output size, are reached.
pub fn split_cap(data: &[u8]) -> Option<(usize, &[u8])> {
    let (cap, deflated) = data.split_first_chunk::<2>()?;
    Some((usize::from(u16::from_le_bytes(*cap)) * 16, deflated))
}

/// What one `Scratch::inflate` call gave: the inflated bytes, or the error's text and whether it
/// is "larger than the cap".
#[derive(Debug, PartialEq, Eq)]
pub enum Inflated {
    /// Decompressed bytes.
    Ok(Vec<u8>),
    /// Output would exceed the cap.
    TooLarge(String),
    /// Any other refusal.
    Failed(String),
}

/// An independent decoder: the inflated bytes (at most `cap + 1` of them), or `None` if it
/// refuses the input.
pub type Reference = fn(&[u8], usize) -> Option<Vec<u8>>;

/// Inflates with `scratch` and records the outcome.
pub fn inflate(scratch: &mut Scratch, codec: Compression, deflated: &[u8], cap: usize) -> Inflated {
    match scratch.inflate(codec, deflated, cap) {
        Ok(out) => Inflated::Ok(out.to_vec()),
        Err(e @ DecodeErrorKind::DecompressedTooLarge { .. }) => Inflated::TooLarge(e.to_string()),
        Err(e) => Inflated::Failed(e.to_string()),
    }
}

/// The properties of one codec on arbitrary input: never more than `cap` bytes out; the same
/// answer from a reused scratch buffer (and zstd context) as from a fresh one; an output of
/// `n` bytes is accepted at cap `n` and refused at cap `n - 1`, as too large unless the
/// `reference` decoder refuses the input as corrupt; and, where the reference accepts the
/// input, the bytes both produced agree.
pub fn check_codec(codec: Compression, data: &[u8], reference: Option<Reference>) {
    let Some((cap, deflated)) = split_cap(data) else {
        return;
    };
    let mut scratch = Scratch::new();
    let first = inflate(&mut scratch, codec, deflated, cap);
    if let Inflated::Ok(out) = &first {
        assert!(
            out.len() <= cap,
            "{codec}: {} bytes out, cap {cap}",
            out.len()
        );
    }
    // Reuse: the scratch now holds the first output (and a used zstd context). The outcome
    // must be the same; a refusal's wording may differ, since the reused buffer starts larger
    // and the C zstd library names the same corrupt input by where its output window ended
    // ("Data corruption detected" or "Destination buffer is too small").
    let second = inflate(&mut scratch, codec, deflated, cap);
    let same = match (&first, &second) {
        (Inflated::Failed(_), Inflated::Failed(_)) => true,
        (a, b) => a == b,
    };
    assert!(
        same,
        "{codec}: a reused Scratch answers differently: {first:?} then {second:?}"
    );
    let Inflated::Ok(out) = first else {
        return;
    };
    let n = out.len();
    let theirs = reference.and_then(|reference| reference(deflated, cap));
    // Input the reference does not vouch for may be refused for what it is once the output
    // buffer is tighter: the C LZ4 decoder accepts a match offset of 0 with room to spare,
    // which the format (and lz4_flex, asked why C stopped) calls invalid. The reference vouches
    // for the input only if it decodes at least all of our output: lz4_flex's frame reader
    // stops (as at the end of input) after a block that decodes to nothing, so a corrupt block
    // after such a block is never read by it (seed `empty-block-then-match-offset-0`, found by
    // the CI fuzz run). Input it vouches for must fit at cap n and be "too large" below it.
    let corrupt =
        reference.is_some() && theirs.as_ref().is_none_or(|theirs| theirs.len() < out.len());
    let exact = inflate(&mut Scratch::new(), codec, deflated, n);
    assert!(
        exact == Inflated::Ok(out.clone()) || corrupt && matches!(exact, Inflated::Failed(_)),
        "{codec}: refused at cap = its own output size: {exact:?}"
    );
    // Where both decode, the bytes they have in common agree. lz4_flex's frame reader returns
    // 0 (end of input) after a block that decodes to nothing, so its output may stop early;
    // it reads frames concatenated after the first, which the batch codec ignores, so its
    // output may go on.
    if let Some(theirs) = &theirs {
        let common = theirs.len().min(out.len());
        assert_eq!(
            theirs.get(..common),
            out.get(..common),
            "{codec}: the reference decoder disagrees ({} vs {} bytes)",
            theirs.len(),
            out.len()
        );
    }
    if let Some(below) = n.checked_sub(1) {
        let less = inflate(&mut scratch, codec, deflated, below);
        assert!(
            matches!(less, Inflated::TooLarge(_)) || corrupt && matches!(less, Inflated::Failed(_)),
            "{codec}: {n} bytes out, but at cap {below}: {less:?}"
        );
    }
}

/// Reads at most `cap + 1` bytes from `r`: a reference decoder's output, bounded like ours.
pub fn read_bounded(r: impl Read, cap: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    r.take(cap as u64 + 1).read_to_end(&mut out).ok()?;
    Some(out)
}
