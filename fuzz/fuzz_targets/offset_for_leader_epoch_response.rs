//! Fuzzes an OffsetForLeaderEpoch response frame: kdirect_proto's hand-written bounded decoder
//! (`offset_for_leader_epoch::decode`, what the fetcher's truncation check reads, KIP-320)
//! against `decode_response` (the bounded walk, then kafka-protocol) plus
//! `offset_for_leader_epoch::view`, wherever both accept the frame; a response that decodes
//! also re-encodes to itself.
//!
//! Input: one byte choosing the version (2–4, wrapping), then the frame body (without its size
//! prefix).
#![no_main]

use bytes::Bytes;
use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::offset_for_leader_epoch::{self, OffsetForLeaderEpoch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<OffsetForLeaderEpoch>(sel);
    let ours = offset_for_leader_epoch::decode(Bytes::copy_from_slice(frame), v);
    let theirs = decode_and_round_trip::<OffsetForLeaderEpoch>(frame, v);
    match (ours, theirs) {
        (Ok(ours), Some(theirs)) => {
            assert_eq!(ours.0, theirs.0, "correlation ids differ");
            assert_eq!(
                ours.1,
                offset_for_leader_epoch::view(&theirs.1),
                "offset_for_leader_epoch::decode and kafka-protocol disagree"
            );
        }
        (Ok(ours), None) => {
            // Only kafka-protocol's stricter reading (UTF-8 names) may refuse what ours takes.
            std::hint::black_box(ours);
        }
        _ => {}
    }
});
