//! Fuzzes an OffsetFetch response frame the way the Kafka-group store reads it
//! (`crates/commit/src/kafka.rs`): `decode_response` (kdirect's bounded walk, then
//! kafka-protocol), a re-encoding round trip, then `offset_fetch::view`, whose partitions
//! must all come from the response.
//!
//! Input: one byte choosing the version (1–9, wrapping), then the frame body (without its size
//! prefix), as in `crates/proto/tests/data/offset_fetch-v*-response.bin`.
#![no_main]

use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::offset_fetch::{self, OffsetFetch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<OffsetFetch>(sel);
    let Some((_, resp)) = decode_and_round_trip::<OffsetFetch>(frame, v) else {
        return;
    };
    let (code, parts) = offset_fetch::view(&resp, v);
    let listed: usize = if v >= 8 {
        resp.groups
            .iter()
            .flat_map(|g| &g.topics)
            .map(|t| t.partitions.len())
            .sum()
    } else {
        resp.topics.iter().map(|t| t.partitions.len()).sum()
    };
    assert!(
        parts.len() <= listed,
        "view invented partitions ({} of {listed})",
        parts.len()
    );
    std::hint::black_box((code.name(), code.is_retriable()));
});
