//! Fuzzes a Metadata response frame: kdirect_proto's hand-written bounded decoder
//! (`metadata::decode`) against the path `BrokerConnection::request_at` takes
//! (`decode_response`: the bounded walk, then kafka-protocol) plus `metadata::view`, wherever
//! both accept the frame; a response that decodes also re-encodes to itself.
//!
//! Input: one byte choosing the version (1–12, wrapping), then the frame body (without its size
//! prefix), as in `crates/proto/tests/data/metadata-v*-response.bin`.
#![no_main]

use bytes::Bytes;
use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::metadata::{self, Metadata};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<Metadata>(sel);
    let ours = metadata::decode(Bytes::copy_from_slice(frame), v);
    let theirs = decode_and_round_trip::<Metadata>(frame, v);
    if let (Ok(ours), Some(theirs)) = (ours, theirs) {
        assert_eq!(ours.0, theirs.0, "correlation ids differ");
        assert_eq!(
            ours.1,
            metadata::view(&theirs.1),
            "metadata::decode and kafka-protocol disagree"
        );
    }
});
