//! SyncGroup (key 14), versions 0–5: the leader hands out the assignment and every member
//! receives its own (the classic group protocol; protocol guide, "Group Membership API").
//!
//! v1 adds the throttle time; v3 the group instance id of static members (KIP-345); v4 is the
//! first flexible version; v5 carries the protocol type and name both ways, which the
//! coordinator checks (KIP-559). The assignment bytes are opaque here; for the "consumer"
//! protocol type they are a [`super::consumer_protocol::Assignment`] (empty when the member got
//! nothing or the coordinator answered with an error).

use bytes::Bytes;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::api;
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// SyncGroup: distribute and receive the assignment.
    SyncGroup, SyncGroup, SyncGroupRequest, SyncGroupResponse, 0, 5
);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// The request of member `member_id` in generation `generation_id` of `group` at `version`:
/// the leader sends every member's assignment (member id, bytes), the others none. The group
/// instance id is sent from v3, the protocol type and name from v5; below, they are dropped.
#[allow(clippy::too_many_arguments)]
pub fn request(
    group: &str,
    generation_id: i32,
    member_id: &str,
    group_instance_id: Option<&str>,
    protocol_type: Option<&str>,
    protocol_name: Option<&str>,
    assignments: &[(&str, Bytes)],
    version: i16,
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation_id)
        .with_member_id(s(member_id))
        .with_group_instance_id(group_instance_id.filter(|_| version >= 3).map(s))
        .with_protocol_type(protocol_type.filter(|_| version >= 5).map(s))
        .with_protocol_name(protocol_name.filter(|_| version >= 5).map(s))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(a.clone())
                })
                .collect(),
        )
}

/// A SyncGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncView {
    /// Error code.
    pub error: ErrorCode,
    /// The protocol (assignor) of the generation (v5+).
    pub protocol_name: Option<String>,
    /// This member's assignment (a slice of the response frame; may be empty).
    pub assignment: Bytes,
}

/// Reads the answer.
pub fn view(resp: &SyncGroupResponse) -> SyncView {
    SyncView {
        error: ErrorCode(resp.error_code),
        protocol_name: resp.protocol_name.as_ref().map(|s| s.to_string()),
        assignment: resp.assignment.clone(),
    }
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 4;

/// Checks a SyncGroup response body against its schema with every length bounded by the bytes
/// that remain, so that kafka-protocol's decoder, run after it, allocates in proportion to the
/// frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 1 {
        r.i32("throttle_time_ms")?;
    }
    r.i16("error_code")?;
    if version >= 5 {
        r.nullable_str("protocol_type")?;
        r.nullable_str("protocol_name")?;
    }
    r.bytes("assignment")?;
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
    use bytes::Buf;
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};

    fn back(req: &SyncGroupRequest, v: i16) -> SyncGroupRequest {
        let frame = encode_request::<SyncGroup>(req, v, 1, Some("kdirect")).unwrap();
        let mut b = frame.slice(4..);
        decode_request_header_from_buffer(&mut b).unwrap();
        let r = SyncGroupRequest::decode(&mut b, v).unwrap();
        assert_eq!(b.remaining(), 0);
        r
    }

    #[test]
    fn requests_round_trip_at_the_lowest_and_highest_versions() {
        let a = [
            ("m-1", Bytes::from_static(b"a1")),
            ("m-2", Bytes::from_static(b"")),
        ];
        let req = |v| {
            request(
                "g",
                3,
                "m-1",
                Some("i-1"),
                Some("consumer"),
                Some("range"),
                &a,
                v,
            )
        };
        let lo = back(&req(0), 0);
        assert_eq!(
            (
                lo.group_id.as_str(),
                lo.generation_id,
                lo.member_id.as_str()
            ),
            ("g", 3, "m-1")
        );
        assert_eq!(lo.group_instance_id, None);
        assert_eq!(lo.protocol_type, None);
        assert_eq!(lo.assignments.len(), 2);
        assert_eq!(&lo.assignments[0].assignment[..], b"a1");
        let hi = back(&req(5), 5);
        assert_eq!(hi.group_instance_id.as_deref(), Some("i-1"));
        assert_eq!(hi.protocol_type.as_deref(), Some("consumer"));
        assert_eq!(hi.protocol_name.as_deref(), Some("range"));
        assert_eq!(hi.assignments[1].member_id.as_str(), "m-2");
    }

    #[test]
    fn the_view_reads_the_assignment() {
        for v in 0..=5 {
            let resp = SyncGroupResponse::default()
                .with_error_code(27)
                .with_protocol_name((v >= 5).then(|| StrBytes::from_static_str("range")))
                .with_assignment(Bytes::from_static(b"\0\x03xyz"));
            let frame = encode_response::<SyncGroup>(&resp, v, 9)
                .unwrap()
                .slice(4..);
            let (_, got) = decode_response::<SyncGroup>(frame, v).unwrap();
            assert_eq!(
                view(&got),
                SyncView {
                    error: ErrorCode(27),
                    protocol_name: (v >= 5).then(|| "range".into()),
                    assignment: Bytes::from_static(b"\0\x03xyz"),
                }
            );
        }
    }

    #[test]
    fn a_huge_assignment_length_in_a_tiny_frame_is_refused() {
        // v0: correlation id, error, then an assignment of 2^31 - 1 bytes.
        let frame: &[u8] = &[0, 0, 0, 1, 0, 0, 0x7f, 0xff, 0xff, 0xff, 1, 2];
        let e = decode_response::<SyncGroup>(Bytes::from_static(frame), 0).unwrap_err();
        assert!(e.to_string().contains("assignment"), "{e}");
        // A null assignment is refused (the field is not nullable).
        let frame: &[u8] = &[0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff];
        let e = decode_response::<SyncGroup>(Bytes::from_static(frame), 0).unwrap_err();
        assert!(e.to_string().contains("null"), "{e}");
    }
}
