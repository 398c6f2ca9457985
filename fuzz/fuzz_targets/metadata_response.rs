//! Fuzzes kdirect_proto's other response decoders: the hand-written Metadata and ListOffsets
//! decoders (checked against kafka-protocol's decoder plus the views wherever both accept the
//! frame), and `decode_response` for ApiVersions, FindCoordinator, OffsetCommit and
//! OffsetFetch (kafka-protocol's decoders behind kdirect's bounded walk), plus the
//! ApiVersions handshake decoder.
//!
//! Input: one byte choosing the API (low 3 bits) and the version (the rest, modulo the API's
//! range), then the frame body (without its size prefix), as in
//! `crates/proto/tests/data/*-response.bin`.
#![no_main]

use bytes::Bytes;
use kdirect_proto::api::api_versions::{self, ApiVersions};
use kdirect_proto::api::find_coordinator::FindCoordinator;
use kdirect_proto::api::list_offsets::{self, ListOffsets};
use kdirect_proto::api::metadata::{self, Metadata};
use kdirect_proto::api::offset_commit::OffsetCommit;
use kdirect_proto::api::offset_fetch::OffsetFetch;
use kdirect_proto::message::{decode_response, Api};
use libfuzzer_sys::fuzz_target;

fn version<A: Api>(sel: u8) -> i16 {
    let r = A::VERSIONS;
    r.min + i16::from(sel) % (r.max - r.min + 1)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let frame = Bytes::copy_from_slice(frame);
    let v = sel >> 3;
    match sel & 7 {
        0 => {
            let v = version::<Metadata>(v);
            let ours = metadata::decode(frame.clone(), v);
            let theirs = decode_response::<Metadata>(frame, v);
            if let (Ok(ours), Ok(theirs)) = (ours, theirs) {
                assert_eq!(ours.1, metadata::view(&theirs.1));
            }
        }
        1 => {
            let v = version::<ListOffsets>(v);
            let ours = list_offsets::decode(frame.clone(), v);
            let theirs = decode_response::<ListOffsets>(frame, v);
            if let (Ok(ours), Ok(theirs)) = (ours, theirs) {
                assert_eq!(ours.1, list_offsets::view(&theirs.1));
            }
        }
        2 => {
            let v = version::<ApiVersions>(v);
            let _ = api_versions::decode(frame.clone(), v);
            let _ = decode_response::<ApiVersions>(frame, v);
        }
        3 => {
            let _ = decode_response::<FindCoordinator>(frame, version::<FindCoordinator>(v));
        }
        4 => {
            let _ = decode_response::<OffsetCommit>(frame, version::<OffsetCommit>(v));
        }
        _ => {
            let _ = decode_response::<OffsetFetch>(frame, version::<OffsetFetch>(v));
        }
    }
});
