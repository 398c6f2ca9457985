//! DescribeGroups (key 15), versions 0–6: a classic group's state, protocol and members, each
//! with its client id, host and assignment — what `kafka-consumer-groups --describe` shows
//! (protocol guide, "Group Membership API").
//!
//! v1 adds the throttle time; v3 asks for the authorized operations (KIP-430; kdirect never
//! asks); v4 adds the members' group instance ids (KIP-345); v5 is the first flexible version;
//! v6 adds a per-group error message and answers a group that does not exist with
//! GROUP_ID_NOT_FOUND instead of the state "Dead" (KIP-1043). For protocol type `consumer`
//! the member assignment is a [`consumer_protocol::Assignment`], decoded into the view; an
//! undecodable one is reported beside the member, never a panic.

use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::api;
use super::consumer_protocol::{self, Assignment};
use crate::code::ErrorCode;
use crate::error::ProtoError;
use crate::read::{Reader, Res};

api!(
    /// DescribeGroups: the state and members of groups.
    DescribeGroups, DescribeGroups, DescribeGroupsRequest, DescribeGroupsResponse, 0, 6
);

/// The protocol type of consumer groups, whose assignments the view decodes.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// The request for `groups` at `version` (without authorized operations, a v3+ field).
pub fn request(groups: &[&str], _version: i16) -> DescribeGroupsRequest {
    DescribeGroupsRequest::default().with_groups(
        groups
            .iter()
            .map(|g| GroupId(StrBytes::from_string((*g).to_owned())))
            .collect(),
    )
}

/// One group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    /// Error code for this group (GROUP_ID_NOT_FOUND from v6 for a group that does not exist).
    pub error: ErrorCode,
    /// The coordinator's error message (v6+).
    pub message: Option<String>,
    /// The group id.
    pub group_id: String,
    /// The state: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable` or `Dead`
    /// (empty with an error).
    pub state: String,
    /// The protocol type (`consumer` for consumers; empty if the group has none).
    pub protocol_type: String,
    /// The protocol (assignor) chosen, once the group is stable; empty otherwise.
    pub protocol: String,
    /// The members.
    pub members: Vec<MemberDescription>,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    /// Its member id (the CONSUMER-ID of `kafka-consumer-groups`).
    pub member_id: String,
    /// Its group instance id, if static (v4+).
    pub group_instance_id: Option<String>,
    /// Its `client.id`.
    pub client_id: String,
    /// Its host as the coordinator saw it (`/127.0.0.1`).
    pub client_host: String,
    /// Its assignment, for protocol type `consumer` (an empty one, as members have while the
    /// group rebalances, is no partitions); `None` for another protocol type or when it could
    /// not be decoded ([`Self::assignment_error`]).
    pub assignment: Option<Assignment>,
    /// Why a `consumer` assignment could not be decoded.
    pub assignment_error: Option<ProtoError>,
}

impl MemberDescription {
    /// Its assigned partitions, by topic (none when unknown).
    pub fn partitions(&self) -> &[(String, Vec<i32>)] {
        self.assignment
            .as_ref()
            .map_or(&[][..], |a| a.partitions.as_slice())
    }
}

impl GroupDescription {
    /// Whether the group has members (so owners to show); an empty or dead group has none.
    pub fn is_active(&self) -> bool {
        self.error.err().is_none() && !self.members.is_empty()
    }
}

/// Reads every group of the answer, in its order.
pub fn view(resp: &DescribeGroupsResponse) -> Vec<GroupDescription> {
    resp.groups
        .iter()
        .map(|g| {
            let consumer = g.protocol_type.as_str() == CONSUMER_PROTOCOL_TYPE;
            GroupDescription {
                error: ErrorCode(g.error_code),
                message: g.error_message.as_ref().map(|m| m.to_string()),
                group_id: g.group_id.to_string(),
                state: g.group_state.to_string(),
                protocol_type: g.protocol_type.to_string(),
                protocol: g.protocol_data.to_string(),
                members: g
                    .members
                    .iter()
                    .map(|m| {
                        let (assignment, assignment_error) = if consumer {
                            match consumer_protocol::Assignment::decode(&m.member_assignment) {
                                Ok(a) => (Some(a), None),
                                Err(e) => (None, Some(e)),
                            }
                        } else {
                            (None, None)
                        };
                        MemberDescription {
                            member_id: m.member_id.to_string(),
                            group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                            client_id: m.client_id.to_string(),
                            client_host: m.client_host.to_string(),
                            assignment,
                            assignment_error,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 5;

/// Checks a DescribeGroups response body against its schema with every count and length
/// bounded by the bytes that remain, so that kafka-protocol's decoder, run after it, allocates
/// in proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 1 {
        r.i32("throttle_time_ms")?;
    }
    let s = r.len_size(false);
    let member_min =
        s + if version >= 4 { s } else { 0 } + 2 * s + 2 * r.len_size(true) + r.tags_size();
    let group_min = 2
        + if version >= 6 { s } else { 0 }
        + 4 * s
        + r.len_size(true)
        + if version >= 3 { 4 } else { 0 }
        + r.tags_size();
    let n = r.count(group_min, "groups count")?;
    for _ in 0..n {
        r.i16("group error_code")?;
        if version >= 6 {
            r.nullable_str("group error_message")?;
        }
        r.str("group group_id")?;
        r.str("group group_state")?;
        r.str("group protocol_type")?;
        r.str("group protocol_data")?;
        let m = r.count(member_min, "members count")?;
        for _ in 0..m {
            r.str("member member_id")?;
            if version >= 4 {
                r.nullable_str("member group_instance_id")?;
            }
            r.str("member client_id")?;
            r.str("member client_host")?;
            r.bytes("member member_metadata")?;
            r.bytes("member member_assignment")?;
            r.skip_tags("member tagged fields")?;
        }
        if version >= 3 {
            r.i32("group authorized_operations")?;
        }
        r.skip_tags("group tagged fields")?;
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
    use crate::api::consumer_protocol::ConsumerMessage;
    use crate::message::{decode_response, encode_request, encode_response, Api};
    use bytes::{Buf, Bytes};
    use kafka_protocol::messages::describe_groups_response::{
        DescribedGroup, DescribedGroupMember,
    };
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.to_owned())
    }

    fn response(v: i16, protocol_type: &str, assignment: Bytes) -> DescribeGroupsResponse {
        let member = DescribedGroupMember::default()
            .with_member_id(s("kdirect-1"))
            .with_group_instance_id((v >= 4).then(|| s("i-1")))
            .with_client_id(s("kdirect"))
            .with_client_host(s("/127.0.0.1"))
            .with_member_metadata(Bytes::from_static(b"sub"))
            .with_member_assignment(assignment);
        let idle = DescribedGroupMember::default()
            .with_member_id(s("java-2"))
            .with_client_id(s("consumer-g-1"))
            .with_client_host(s("/10.0.0.2"));
        DescribeGroupsResponse::default().with_groups(vec![
            DescribedGroup::default()
                .with_group_id(GroupId(s("g")))
                .with_group_state(s("Stable"))
                .with_protocol_type(s(protocol_type))
                .with_protocol_data(s("range"))
                .with_members(vec![member, idle]),
            DescribedGroup::default()
                .with_error_code(if v >= 6 { 69 } else { 0 })
                .with_error_message((v >= 6).then(|| s("group gone")))
                .with_group_id(GroupId(s("gone")))
                .with_group_state(s("Dead")),
        ])
    }

    fn decoded(resp: &DescribeGroupsResponse, v: i16) -> Vec<GroupDescription> {
        let frame = encode_response::<DescribeGroups>(resp, v, 9)
            .unwrap()
            .slice(4..);
        let (cid, got) = decode_response::<DescribeGroups>(frame, v).unwrap();
        assert_eq!(cid, 9);
        view(&got)
    }

    #[test]
    fn requests_round_trip_at_every_version() {
        for v in DescribeGroups::VERSIONS.min..=DescribeGroups::VERSIONS.max {
            let frame =
                encode_request::<DescribeGroups>(&request(&["g", "h"], v), v, 1, Some("kd"))
                    .unwrap();
            let mut b = frame.slice(4..);
            decode_request_header_from_buffer(&mut b).unwrap();
            let r = DescribeGroupsRequest::decode(&mut b, v).unwrap();
            assert_eq!(b.remaining(), 0);
            let names: Vec<&str> = r.groups.iter().map(|g| g.as_str()).collect();
            assert_eq!(names, ["g", "h"]);
            assert!(!r.include_authorized_operations);
        }
        assert_eq!(DescribeGroups::KEY as i16, 15);
    }

    #[test]
    fn the_view_decodes_consumer_assignments_at_every_version() {
        let assignment = Assignment {
            partitions: vec![("events".into(), vec![0, 2]), ("logs".into(), vec![1])],
            user_data: None,
        };
        for v in DescribeGroups::VERSIONS.min..=DescribeGroups::VERSIONS.max {
            let got = decoded(&response(v, "consumer", assignment.encode(3).unwrap()), v);
            assert_eq!(got.len(), 2);
            let g = &got[0];
            assert_eq!(
                (g.group_id.as_str(), g.state.as_str(), g.protocol.as_str()),
                ("g", "Stable", "range")
            );
            assert!(g.is_active());
            assert_eq!(
                g.members[0],
                MemberDescription {
                    member_id: "kdirect-1".into(),
                    group_instance_id: (v >= 4).then(|| "i-1".into()),
                    client_id: "kdirect".into(),
                    client_host: "/127.0.0.1".into(),
                    assignment: Some(assignment.clone()),
                    assignment_error: None,
                }
            );
            // A member without an assignment yet (an empty byte string): no partitions.
            assert_eq!(g.members[1].assignment, Some(Assignment::default()));
            assert!(g.members[1].partitions().is_empty());
            let gone = &got[1];
            assert!(!gone.is_active());
            assert_eq!(gone.state, "Dead");
            if v >= 6 {
                assert_eq!(gone.error.0, 69);
                assert_eq!(gone.message.as_deref(), Some("group gone"));
            } else {
                assert_eq!(gone.error, ErrorCode::NONE);
                assert_eq!(gone.message, None);
            }
        }
    }

    #[test]
    fn an_undecodable_assignment_is_reported_and_other_protocol_types_left_alone() {
        // A topic count of 1000 in a 6-byte assignment.
        let bad = Bytes::from_static(&[0, 3, 0, 0, 0x03, 0xe8]);
        let got = decoded(&response(5, "consumer", bad.clone()), 5);
        let m = &got[0].members[0];
        assert_eq!(m.assignment, None);
        let e = m.assignment_error.as_ref().unwrap();
        assert!(
            matches!(
                e,
                ProtoError::ConsumerProtocolDecode {
                    message: ConsumerMessage::Assignment,
                    position: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(m.partitions().is_empty());
        // Kafka Connect's protocol type: the bytes are not the consumer protocol's.
        let got = decoded(&response(5, "connect", bad), 5);
        assert_eq!(got[0].members[0].assignment, None);
        assert_eq!(got[0].members[0].assignment_error, None);
    }

    #[test]
    fn a_huge_member_count_in_a_tiny_frame_is_refused() {
        // v0: correlation id, one group: error, "g", "", "", "", then 2^31 - 1 members.
        let frame: &[u8] = &[
            0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, b'g', 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff,
        ];
        let e = decode_response::<DescribeGroups>(Bytes::from_static(frame), 0).unwrap_err();
        assert!(
            matches!(e, ProtoError::Decode { position: 19, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("members count"), "{e}");
        // v5 (flexible): header tags, throttle, a compact count of u32::MAX - 1 groups.
        let frame: &[u8] = &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
        let e = decode_response::<DescribeGroups>(Bytes::from_static(frame), 5).unwrap_err();
        assert!(matches!(e, ProtoError::Decode { position: 9, .. }), "{e:?}");
        assert!(e.to_string().contains("groups count"), "{e}");
    }
}
