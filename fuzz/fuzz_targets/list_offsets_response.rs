//! Fuzzes a ListOffsets response frame: kdirect_proto's hand-written bounded decoder
//! (`list_offsets::decode`) against the path the cluster view takes (`request_at`, i.e.
//! `decode_response`: the bounded walk, then kafka-protocol) plus `list_offsets::view`,
//! wherever both accept the frame; a response that decodes also re-encodes to itself.
//!
//! Input: one byte choosing the version (1–10, wrapping), then the frame body (without its size
//! prefix), as in `crates/proto/tests/data/list_offsets-v*-response.bin`.
#![no_main]

use bytes::Bytes;
use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::list_offsets::{self, ListOffsets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<ListOffsets>(sel);
    let ours = list_offsets::decode(Bytes::copy_from_slice(frame), v);
    let theirs = decode_and_round_trip::<ListOffsets>(frame, v);
    match (ours, theirs) {
        (Ok(ours), Some(theirs)) => {
            assert_eq!(ours.0, theirs.0, "correlation ids differ");
            assert_eq!(
                ours.1,
                list_offsets::view(&theirs.1),
                "list_offsets::decode and kafka-protocol disagree"
            );
        }
        (Ok(ours), None) => {
            // Only kafka-protocol's stricter reading (UTF-8 names) may refuse what ours takes.
            std::hint::black_box(ours);
        }
        _ => {}
    }
});
