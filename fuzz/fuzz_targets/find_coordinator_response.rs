//! Fuzzes a FindCoordinator response frame the way the Kafka-group store reads it
//! (`crates/commit/src/kafka.rs`): `decode_response` (kdirect's bounded walk, then
//! kafka-protocol), a re-encoding round trip, then `find_coordinator::view` for a group the
//! input names.
//!
//! Input: one byte choosing the version (0–6, wrapping), then the frame body (without its size
//! prefix), as in `crates/proto/tests/data/find_coordinator-v*-response.bin`.
#![no_main]

use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::find_coordinator::{self, FindCoordinator};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<FindCoordinator>(sel);
    let Some((_, resp)) = decode_and_round_trip::<FindCoordinator>(frame, v) else {
        return;
    };
    // The group the store would ask about: the first key listed, or one that is absent.
    let group = resp
        .coordinators
        .first()
        .map_or("absent", |c| c.key.as_str())
        .to_owned();
    match find_coordinator::view(&resp, &group, v) {
        Some(found) => {
            if v < 4 {
                assert_eq!(found.node_id, resp.node_id.0);
            } else {
                assert!(resp.coordinators.iter().any(|c| c.key.as_str() == group));
            }
        }
        None => assert!(v >= 4 && resp.coordinators.iter().all(|c| c.key.as_str() != group)),
    }
});
