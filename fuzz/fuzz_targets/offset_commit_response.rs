//! Fuzzes an OffsetCommit response frame the way the Kafka-group store reads it
//! (`crates/commit/src/kafka.rs`): `decode_response` (kdirect's bounded walk, then
//! kafka-protocol), a re-encoding round trip, then `offset_commit::view`, one entry per
//! partition listed.
//!
//! Input: one byte choosing the version (2–9, wrapping), then the frame body (without its size
//! prefix), as in `crates/proto/tests/data/offset_commit-v*-response.bin`.
#![no_main]

use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::offset_commit::{self, OffsetCommit};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<OffsetCommit>(sel);
    let Some((_, resp)) = decode_and_round_trip::<OffsetCommit>(frame, v) else {
        return;
    };
    let listed: usize = resp.topics.iter().map(|t| t.partitions.len()).sum();
    let entries = offset_commit::view(&resp);
    assert_eq!(entries.len(), listed, "view lost or invented partitions");
    for (_, _, code) in entries {
        std::hint::black_box((code.name(), code.is_retriable()));
    }
});
