//! LeaveGroup (key 13), versions 0–5: a member leaves its consumer group, so that the group
//! rebalances at once instead of after the session timeout (the classic group protocol;
//! protocol guide, "Group Membership API").
//!
//! v1 adds the throttle time; v3 batches members (`members`, each with its group instance id,
//! KIP-345) in place of the single `member_id` and answers per member; v4 is the first flexible
//! version; v5 adds each member's leave reason (KIP-800). kdirect leaves with one member.

use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::api;
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// LeaveGroup: leave a consumer group.
    LeaveGroup, LeaveGroup, LeaveGroupRequest, LeaveGroupResponse, 0, 5
);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// `member_id` leaving `group` at `version`: v0–2 carry the member id alone (the instance id
/// and reason are dropped), v3+ one entry of `members` (with the reason from v5).
pub fn request(
    group: &str,
    member_id: &str,
    group_instance_id: Option<&str>,
    reason: Option<&str>,
    version: i16,
) -> LeaveGroupRequest {
    let req = LeaveGroupRequest::default().with_group_id(GroupId(s(group)));
    if version >= 3 {
        req.with_members(vec![MemberIdentity::default()
            .with_member_id(s(member_id))
            .with_group_instance_id(group_instance_id.map(s))
            .with_reason(reason.filter(|_| version >= 5).map(s))])
    } else {
        req.with_member_id(s(member_id))
    }
}

/// A LeaveGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveView {
    /// The top-level error code.
    pub error: ErrorCode,
    /// Per member (v3+): member id, group instance id, error code. Empty below v3.
    pub members: Vec<(String, Option<String>, ErrorCode)>,
}

/// Reads the answer.
pub fn view(resp: &LeaveGroupResponse) -> LeaveView {
    LeaveView {
        error: ErrorCode(resp.error_code),
        members: resp
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                    ErrorCode(m.error_code),
                )
            })
            .collect(),
    }
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 4;

/// Checks a LeaveGroup response body against its schema with every count and length bounded by
/// the bytes that remain, so that kafka-protocol's decoder, run after it, allocates in
/// proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 1 {
        r.i32("throttle_time_ms")?;
    }
    r.i16("error_code")?;
    if version >= 3 {
        let member_min = 2 * r.len_size(false) + 2 + r.tags_size();
        let n = r.count(member_min, "members count")?;
        for _ in 0..n {
            r.str("member member_id")?;
            r.nullable_str("member group_instance_id")?;
            r.i16("member error_code")?;
            r.skip_tags("member tagged fields")?;
        }
    }
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
    use kafka_protocol::messages::leave_group_response::MemberResponse;
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};

    fn back(req: &LeaveGroupRequest, v: i16) -> LeaveGroupRequest {
        let frame = encode_request::<LeaveGroup>(req, v, 1, Some("kdirect")).unwrap();
        let mut b = frame.slice(4..);
        decode_request_header_from_buffer(&mut b).unwrap();
        let r = LeaveGroupRequest::decode(&mut b, v).unwrap();
        assert_eq!(b.remaining(), 0);
        r
    }

    #[test]
    fn requests_round_trip_at_the_lowest_and_highest_versions() {
        let lo = back(&request("g", "m-1", Some("i-1"), Some("bye"), 0), 0);
        assert_eq!((lo.group_id.as_str(), lo.member_id.as_str()), ("g", "m-1"));
        assert!(lo.members.is_empty());
        let hi = back(&request("g", "m-1", Some("i-1"), Some("bye"), 5), 5);
        assert_eq!(hi.member_id.as_str(), "");
        assert_eq!(hi.members.len(), 1);
        assert_eq!(hi.members[0].member_id.as_str(), "m-1");
        assert_eq!(hi.members[0].group_instance_id.as_deref(), Some("i-1"));
        assert_eq!(hi.members[0].reason.as_deref(), Some("bye"));
        let v3 = back(&request("g", "m-1", None, Some("bye"), 3), 3);
        assert_eq!(v3.members[0].group_instance_id, None);
    }

    #[test]
    fn the_view_reads_every_member() {
        for v in 0..=5 {
            let mut resp = LeaveGroupResponse::default().with_error_code(0);
            if v >= 3 {
                resp = resp.with_members(vec![
                    MemberResponse::default()
                        .with_member_id(s("m-1"))
                        .with_group_instance_id(None)
                        .with_error_code(0),
                    MemberResponse::default()
                        .with_member_id(s(""))
                        .with_group_instance_id(Some(s("i-9")))
                        .with_error_code(25),
                ]);
            }
            let frame = encode_response::<LeaveGroup>(&resp, v, 4)
                .unwrap()
                .slice(4..);
            let (_, got) = decode_response::<LeaveGroup>(frame, v).unwrap();
            let members = if v >= 3 {
                vec![
                    ("m-1".into(), None, ErrorCode::NONE),
                    (String::new(), Some("i-9".into()), ErrorCode(25)),
                ]
            } else {
                Vec::new()
            };
            assert_eq!(
                view(&got),
                LeaveView {
                    error: ErrorCode::NONE,
                    members
                }
            );
        }
    }

    #[test]
    fn a_huge_member_count_in_a_tiny_frame_is_refused() {
        // v3: correlation id, throttle, error, then 2^31 - 1 members.
        let frame: &[u8] = &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0];
        let e = decode_response::<LeaveGroup>(Bytes::from_static(frame), 3).unwrap_err();
        assert!(e.to_string().contains("members count"), "{e}");
    }
}
