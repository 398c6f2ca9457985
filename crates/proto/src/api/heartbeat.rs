//! Heartbeat (key 12), versions 0–4: a member tells the coordinator it is alive, and learns
//! whether the group is rebalancing (REBALANCE_IN_PROGRESS) (the classic group protocol;
//! protocol guide, "Group Membership API").
//!
//! v1 adds the throttle time; v3 the group instance id of static members (KIP-345); v4 is the
//! first flexible version.

use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::api;
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// Heartbeat: keep a group membership alive.
    Heartbeat, Heartbeat, HeartbeatRequest, HeartbeatResponse, 0, 4
);

/// The heartbeat of `member_id` in generation `generation_id` of `group` at `version` (the
/// group instance id is sent from v3; dropped below).
pub fn request(
    group: &str,
    generation_id: i32,
    member_id: &str,
    group_instance_id: Option<&str>,
    version: i16,
) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id(generation_id)
        .with_member_id(StrBytes::from_string(member_id.to_owned()))
        .with_group_instance_id(
            group_instance_id
                .filter(|_| version >= 3)
                .map(|s| StrBytes::from_string(s.to_owned())),
        )
}

/// The answer's error code.
pub fn view(resp: &HeartbeatResponse) -> ErrorCode {
    ErrorCode(resp.error_code)
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 4;

/// Checks a Heartbeat response body against its schema (bounded by the bytes that remain).
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 1 {
        r.i32("throttle_time_ms")?;
    }
    r.i16("error_code")?;
    r.skip_tags("response tagged fields")
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use super::*;
    use crate::message::{decode_response, encode_request, encode_response};
    use bytes::{Buf, Bytes};
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};

    #[test]
    fn requests_round_trip_at_the_lowest_and_highest_versions() {
        for (v, instance) in [(0, None), (4, Some("i-1"))] {
            let frame =
                encode_request::<Heartbeat>(&request("g", 8, "m-1", Some("i-1"), v), v, 1, None)
                    .unwrap();
            let mut b = frame.slice(4..);
            decode_request_header_from_buffer(&mut b).unwrap();
            let r = HeartbeatRequest::decode(&mut b, v).unwrap();
            assert_eq!(b.remaining(), 0);
            assert_eq!(
                (r.group_id.as_str(), r.generation_id, r.member_id.as_str()),
                ("g", 8, "m-1")
            );
            assert_eq!(r.group_instance_id.as_deref(), instance);
        }
    }

    #[test]
    fn the_view_is_the_error_code() {
        for v in 0..=4 {
            let resp = HeartbeatResponse::default().with_error_code(27);
            let frame = encode_response::<Heartbeat>(&resp, v, 2)
                .unwrap()
                .slice(4..);
            let (_, got) = decode_response::<Heartbeat>(frame.clone(), v).unwrap();
            assert_eq!(view(&got), ErrorCode(27));
            // Every truncation is an error.
            for cut in 0..frame.len() {
                assert!(decode_response::<Heartbeat>(frame.slice(..cut), v).is_err());
            }
        }
        // A huge tagged-field count in a tiny v4 frame.
        let frame: &[u8] = &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x03];
        let e = decode_response::<Heartbeat>(Bytes::from_static(frame), 4).unwrap_err();
        assert!(e.to_string().contains("cannot fit"), "{e}");
    }
}
