//! JoinGroup (key 11), versions 0–9: become a member of a consumer group (the classic group
//! protocol; protocol guide, "Group Membership API").
//!
//! v1 adds the rebalance timeout (KIP-62); v2 the throttle time; v4 answers a first join
//! without a member id with MEMBER_ID_REQUIRED and the id to rejoin with (KIP-394); v5 adds the
//! group instance id of static members (KIP-345); v6 is the first flexible version; v7 echoes
//! the protocol type in the answer; v8 adds the join reason (KIP-800); v9 tells the leader to
//! skip the assignment (KIP-814). The protocol metadata is opaque here; for the "consumer"
//! protocol type it is a [`super::consumer_protocol::Subscription`].

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};

use super::api;
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// JoinGroup: join a consumer group.
    JoinGroup, JoinGroup, JoinGroupRequest, JoinGroupResponse, 0, 9
);

/// What a member joins with.
#[derive(Debug, Clone, Copy)]
pub struct JoinParams<'a> {
    /// The group id.
    pub group: &'a str,
    /// `session.timeout.ms`: the coordinator drops a member it has not heard from for this long.
    pub session_timeout_ms: i32,
    /// `max.poll.interval.ms`: how long the coordinator waits for members to rejoin during a
    /// rebalance (sent from v1; v0 coordinators use the session timeout).
    pub rebalance_timeout_ms: i32,
    /// The member id the coordinator gave, or `""` for a first join.
    pub member_id: &'a str,
    /// `group.instance.id` of a static member (sent from v5; dropped below, where the member
    /// joins as a dynamic one).
    pub group_instance_id: Option<&'a str>,
    /// The protocol type, `"consumer"` for consumers.
    pub protocol_type: &'a str,
    /// The protocols (assignors) the member supports, in order of preference, each with its
    /// metadata.
    pub protocols: &'a [(&'a str, Bytes)],
    /// Why the member joins (sent from v8, KIP-800).
    pub reason: Option<&'a str>,
}

/// The request for `p` at `version`, without the fields `version` cannot carry.
pub fn request(p: &JoinParams<'_>, version: i16) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(p.group.to_owned())))
        .with_session_timeout_ms(p.session_timeout_ms)
        .with_rebalance_timeout_ms(if version >= 1 {
            p.rebalance_timeout_ms
        } else {
            -1
        })
        .with_member_id(StrBytes::from_string(p.member_id.to_owned()))
        .with_group_instance_id(
            p.group_instance_id
                .filter(|_| version >= 5)
                .map(|s| StrBytes::from_string(s.to_owned())),
        )
        .with_protocol_type(StrBytes::from_string(p.protocol_type.to_owned()))
        .with_protocols(
            p.protocols
                .iter()
                .map(|(name, metadata)| {
                    JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_string((*name).to_owned()))
                        .with_metadata(metadata.clone())
                })
                .collect(),
        )
        .with_reason(
            p.reason
                .filter(|_| version >= 8)
                .map(|s| StrBytes::from_string(s.to_owned())),
        )
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinView {
    /// Error code (MEMBER_ID_REQUIRED from v4 with `member_id` to rejoin with).
    pub error: ErrorCode,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The protocol (assignor) the coordinator chose.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member_id: String,
    /// The leader must not run the assignment (v9, KIP-814); `false` before.
    pub skip_assignment: bool,
    /// The members and their metadata (only in the leader's answer).
    pub members: Vec<JoinMember>,
}

/// One member of the group, as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    /// Its member id.
    pub member_id: String,
    /// Its group instance id, if static (v5+).
    pub group_instance_id: Option<String>,
    /// Its metadata for the chosen protocol (a slice of the response frame).
    pub metadata: Bytes,
}

/// Reads the answer.
pub fn view(resp: &JoinGroupResponse) -> JoinView {
    JoinView {
        error: ErrorCode(resp.error_code),
        generation_id: resp.generation_id,
        protocol_name: resp.protocol_name.as_ref().map(|s| s.to_string()),
        leader: resp.leader.to_string(),
        member_id: resp.member_id.to_string(),
        skip_assignment: resp.skip_assignment,
        members: resp
            .members
            .iter()
            .map(|m| JoinMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                metadata: m.metadata.clone(),
            })
            .collect(),
    }
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 6;

/// Checks a JoinGroup response body against its schema with every count and length bounded by
/// the bytes that remain, so that kafka-protocol's decoder, run after it, allocates in
/// proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 2 {
        r.i32("throttle_time_ms")?;
    }
    r.i16("error_code")?;
    r.i32("generation_id")?;
    if version >= 7 {
        r.nullable_str("protocol_type")?;
    }
    r.nullable_str("protocol_name")?;
    r.str("leader")?;
    if version >= 9 {
        r.bool("skip_assignment")?;
    }
    r.str("member_id")?;
    let member_min = r.len_size(false)
        + if version >= 5 { r.len_size(false) } else { 0 }
        + r.len_size(true)
        + r.tags_size();
    let n = r.count(member_min, "members count")?;
    for _ in 0..n {
        r.str("member member_id")?;
        if version >= 5 {
            r.nullable_str("member group_instance_id")?;
        }
        r.bytes("member metadata")?;
        r.skip_tags("member tagged fields")?;
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
    use crate::message::{decode_response, encode_request, encode_response, Api};
    use crate::ProtoError;
    use bytes::Buf;
    use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};

    fn params<'a>(protocols: &'a [(&'a str, Bytes)]) -> JoinParams<'a> {
        JoinParams {
            group: "g",
            session_timeout_ms: 45_000,
            rebalance_timeout_ms: 300_000,
            member_id: "m-1",
            group_instance_id: Some("i-1"),
            protocol_type: "consumer",
            protocols,
            reason: Some("rebalance needed"),
        }
    }

    fn back(req: &JoinGroupRequest, v: i16) -> JoinGroupRequest {
        let frame = encode_request::<JoinGroup>(req, v, 1, Some("kdirect")).unwrap();
        let mut b = frame.slice(4..);
        decode_request_header_from_buffer(&mut b).unwrap();
        let r = JoinGroupRequest::decode(&mut b, v).unwrap();
        assert_eq!(b.remaining(), 0);
        r
    }

    #[test]
    fn requests_round_trip_at_the_lowest_and_highest_versions() {
        let protocols = [("range", Bytes::from_static(b"\0\x03meta"))];
        let p = params(&protocols);
        let lo = back(&request(&p, 0), 0);
        assert_eq!(lo.group_id.as_str(), "g");
        assert_eq!(lo.session_timeout_ms, 45_000);
        assert_eq!(lo.rebalance_timeout_ms, -1);
        assert_eq!(lo.group_instance_id, None);
        assert_eq!(lo.reason, None);
        assert_eq!(lo.protocols[0].name.as_str(), "range");
        assert_eq!(&lo.protocols[0].metadata[..], b"\0\x03meta");
        let hi = back(&request(&p, 9), 9);
        assert_eq!(hi.rebalance_timeout_ms, 300_000);
        assert_eq!(hi.member_id.as_str(), "m-1");
        assert_eq!(hi.group_instance_id.as_deref(), Some("i-1"));
        assert_eq!(hi.protocol_type.as_str(), "consumer");
        assert_eq!(hi.reason.as_deref(), Some("rebalance needed"));
    }

    #[test]
    fn the_view_reads_the_leaders_answer() {
        for v in [0, 5, 9] {
            let mut resp = JoinGroupResponse::default()
                .with_error_code(0)
                .with_generation_id(4)
                .with_protocol_name(Some(StrBytes::from_static_str("range")))
                .with_leader(StrBytes::from_static_str("m-1"))
                .with_member_id(StrBytes::from_static_str("m-1"))
                .with_members(vec![JoinGroupResponseMember::default()
                    .with_member_id(StrBytes::from_static_str("m-2"))
                    .with_group_instance_id((v >= 5).then(|| StrBytes::from_static_str("i-2")))
                    .with_metadata(Bytes::from_static(b"sub"))]);
            if v >= 9 {
                resp = resp.with_skip_assignment(true);
            }
            let frame = encode_response::<JoinGroup>(&resp, v, 5)
                .unwrap()
                .slice(4..);
            let (cid, got) = decode_response::<JoinGroup>(frame, v).unwrap();
            assert_eq!(cid, 5);
            assert_eq!(
                view(&got),
                JoinView {
                    error: ErrorCode::NONE,
                    generation_id: 4,
                    protocol_name: Some("range".into()),
                    leader: "m-1".into(),
                    member_id: "m-1".into(),
                    skip_assignment: v >= 9,
                    members: vec![JoinMember {
                        member_id: "m-2".into(),
                        group_instance_id: (v >= 5).then(|| "i-2".into()),
                        metadata: Bytes::from_static(b"sub"),
                    }],
                }
            );
        }
    }

    #[test]
    fn a_huge_member_count_in_a_tiny_frame_is_refused() {
        // v0: correlation id, error, generation, null protocol name, leader "", member "",
        // then 2^31 - 1 members.
        let frame: &[u8] = &[
            0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff,
        ];
        let e = decode_response::<JoinGroup>(Bytes::from_static(frame), 0).unwrap_err();
        assert!(
            matches!(e, ProtoError::Decode { position: 16, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("members count"), "{e}");
        // v6 (flexible): header tags, throttle, error, generation, null name, "", "", then a
        // compact count of u32::MAX - 1.
        let frame: &[u8] = &[
            0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f,
        ];
        let e = decode_response::<JoinGroup>(Bytes::from_static(frame), 6).unwrap_err();
        assert!(e.to_string().contains("members count"), "{e}");
        assert_eq!(JoinGroup::KEY as i16, 11);
    }
}
