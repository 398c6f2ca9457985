//! Fuzzes DescribeGroups response frames the way `kdirect lag` reads them:
//! `decode_response` (kdirect's bounded walk, then kafka-protocol), a re-encoding round trip,
//! then `describe_groups::view`, which decodes each member's assignment as the consumer
//! protocol's `Assignment` when the group's protocol type is `consumer`.
//!
//! Input: one byte choosing the version (wrapping around 0–6), then the frame body (without
//! its size prefix).
#![no_main]

use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::consumer_protocol::Assignment;
use kdirect_proto::api::describe_groups::{self, DescribeGroups, CONSUMER_PROTOCOL_TYPE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<DescribeGroups>(sel);
    let Some((_, resp)) = decode_and_round_trip::<DescribeGroups>(frame, v) else {
        return;
    };
    let view = describe_groups::view(&resp);
    assert_eq!(view.len(), resp.groups.len(), "view lost or invented groups");
    for (g, raw) in view.iter().zip(&resp.groups) {
        assert_eq!(g.members.len(), raw.members.len(), "view lost or invented members");
        assert!(v >= 6 || g.message.is_none());
        let consumer = g.protocol_type == CONSUMER_PROTOCOL_TYPE;
        for (m, r) in g.members.iter().zip(&raw.members) {
            assert!(v >= 4 || m.group_instance_id.is_none());
            // Decoded exactly when the protocol type is "consumer", and then as
            // `Assignment::decode` reads the same bytes.
            assert!(consumer || (m.assignment.is_none() && m.assignment_error.is_none()));
            if consumer {
                assert_eq!(m.assignment.is_some(), m.assignment_error.is_none());
                assert_eq!(
                    m.assignment.as_ref().ok_or(()),
                    Assignment::decode(&r.member_assignment).as_ref().map_err(|_| ())
                );
            }
        }
    }
});
