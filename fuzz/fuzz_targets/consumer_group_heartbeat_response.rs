//! Fuzzes KIP-848's ConsumerGroupHeartbeat response frames the way a consumer-protocol member
//! reads them: `decode_response` (kdirect's bounded walk, then kafka-protocol), a re-encoding
//! round trip, then the view, whose target assignment must hold exactly the response's topics
//! and partitions.
//!
//! Input: one byte whose low bit chooses the version (0 or 1), then the frame body (without its
//! size prefix).
#![no_main]

use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::consumer_group_heartbeat::{self, ConsumerGroupHeartbeat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<ConsumerGroupHeartbeat>(sel);
    let Some((_, resp)) = decode_and_round_trip::<ConsumerGroupHeartbeat>(frame, v) else {
        return;
    };
    let view = consumer_group_heartbeat::view(&resp);
    assert_eq!(view.error.0, resp.error_code);
    assert_eq!(view.member_epoch, resp.member_epoch);
    match (&view.assignment, &resp.assignment) {
        (None, None) => {}
        (Some(a), Some(r)) => {
            assert_eq!(a.len(), r.topic_partitions.len(), "view lost or invented topics");
            for ((id, ps), t) in a.iter().zip(&r.topic_partitions) {
                assert_eq!(id, t.topic_id.as_bytes());
                assert_eq!(ps, &t.partitions);
            }
        }
        _ => panic!("the view's assignment presence differs from the response's"),
    }
    std::hint::black_box((view.error.name(), view.message, view.member_id));
});
