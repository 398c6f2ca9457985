//! Fuzzes the classic group protocol's response frames (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) the way a group member reads them: `decode_response` (kdirect's bounded walk,
//! then kafka-protocol), a re-encoding round trip, then the API's view; JoinGroup members'
//! metadata and the SyncGroup assignment are decoded further as the consumer protocol's
//! `Subscription` and `Assignment`, as the member does for the "consumer" protocol type.
//!
//! Input: one byte whose low two bits choose the API (0 JoinGroup, 1 SyncGroup, 2 Heartbeat,
//! 3 LeaveGroup) and whose upper six the version (wrapping around the API's range), then the
//! frame body (without its size prefix).
#![no_main]

use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::consumer_protocol::{Assignment, Subscription};
use kdirect_proto::api::heartbeat::{self, Heartbeat};
use kdirect_proto::api::join_group::{self, JoinGroup};
use kdirect_proto::api::leave_group::{self, LeaveGroup};
use kdirect_proto::api::sync_group::{self, SyncGroup};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    match sel & 3 {
        0 => {
            let v = version::<JoinGroup>(sel >> 2);
            let Some((_, resp)) = decode_and_round_trip::<JoinGroup>(frame, v) else {
                return;
            };
            let view = join_group::view(&resp);
            assert_eq!(
                view.members.len(),
                resp.members.len(),
                "view lost or invented members"
            );
            assert!(v >= 9 || !view.skip_assignment);
            for m in &view.members {
                assert!(v >= 5 || m.group_instance_id.is_none());
                let _ = std::hint::black_box(Subscription::decode(&m.metadata));
            }
        }
        1 => {
            let v = version::<SyncGroup>(sel >> 2);
            let Some((_, resp)) = decode_and_round_trip::<SyncGroup>(frame, v) else {
                return;
            };
            let view = sync_group::view(&resp);
            assert_eq!(view.assignment, resp.assignment);
            assert!(v >= 5 || view.protocol_name.is_none());
            let _ = std::hint::black_box(Assignment::decode(&view.assignment));
        }
        2 => {
            let v = version::<Heartbeat>(sel >> 2);
            let Some((_, resp)) = decode_and_round_trip::<Heartbeat>(frame, v) else {
                return;
            };
            let code = heartbeat::view(&resp);
            std::hint::black_box((code.name(), code.is_retriable()));
        }
        _ => {
            let v = version::<LeaveGroup>(sel >> 2);
            let Some((_, resp)) = decode_and_round_trip::<LeaveGroup>(frame, v) else {
                return;
            };
            let view = leave_group::view(&resp);
            assert_eq!(
                view.members.len(),
                resp.members.len(),
                "view lost or invented members"
            );
            assert!(v >= 3 || view.members.is_empty());
        }
    }
});
