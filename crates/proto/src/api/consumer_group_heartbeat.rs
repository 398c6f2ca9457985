//! ConsumerGroupHeartbeat (key 68), versions 0–1: the one request of KIP-848's consumer group
//! protocol (`group.protocol=consumer`). A member joins with epoch 0, heartbeats with its
//! member epoch, is handed its target assignment by topic id (the coordinator runs the
//! assignor), acknowledges what it owns in `topic_partitions`, and leaves with epoch -1
//! (-2: a static member that will come back).
//!
//! Both versions are flexible and share one schema; v1 (KIP-1082) has the client generate its
//! member id (a UUID) and send it with epoch 0, where at v0 the coordinator hands one out.
//! Fields that are null are "unchanged since the last heartbeat" (the full set is sent on a
//! join, and after an error).

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};

use super::{api, topic_name};
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// ConsumerGroupHeartbeat: join, stay in and leave a KIP-848 consumer group.
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    0,
    1
);

/// The epoch a member joins with.
pub const JOIN_EPOCH: i32 = 0;
/// The epoch a member leaves with.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with, meaning to come back (its partitions wait for it).
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// One heartbeat. `None` fields are sent as null ("unchanged"); see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatParams<'a> {
    /// `group.id`.
    pub group: &'a str,
    /// The member id (at v0 empty on the first join).
    pub member_id: &'a str,
    /// The member epoch: [`JOIN_EPOCH`], the last one the coordinator gave, or a leave epoch.
    pub member_epoch: i32,
    /// `group.instance.id` (static membership).
    pub instance_id: Option<&'a str>,
    /// `client.rack`.
    pub rack_id: Option<&'a str>,
    /// The rebalance timeout (`max.poll.interval.ms`); -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// The subscribed topics.
    pub topics: Option<&'a [String]>,
    /// `group.remote.assignor`: the coordinator's assignor to use (`uniform`, `range`).
    pub server_assignor: Option<&'a str>,
    /// The partitions the member owns, by topic id.
    pub owned: Option<&'a [([u8; 16], Vec<i32>)]>,
}

/// The request for `p` at `version` (both versions share the schema).
pub fn request(p: &HeartbeatParams<'_>, _version: i16) -> ConsumerGroupHeartbeatRequest {
    let s = |v: &str| StrBytes::from_string(v.to_owned());
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(p.group)))
        .with_member_id(s(p.member_id))
        .with_member_epoch(p.member_epoch)
        .with_instance_id(p.instance_id.map(s))
        .with_rack_id(p.rack_id.map(s))
        .with_rebalance_timeout_ms(p.rebalance_timeout_ms)
        .with_subscribed_topic_names(
            p.topics
                .map(|ts| ts.iter().map(|t| topic_name(t)).collect()),
        )
        .with_server_assignor(p.server_assignor.map(s))
        .with_topic_partitions(p.owned.map(|o| {
            o.iter()
                .map(|(id, ps)| {
                    TopicPartitions::default()
                        .with_topic_id(uuid::Uuid::from_bytes(*id))
                        .with_partitions(ps.clone())
                })
                .collect()
        }))
}

/// A heartbeat answer, as kdirect reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatView {
    /// The error code.
    pub error: ErrorCode,
    /// The coordinator's message, if any.
    pub message: Option<String>,
    /// The member id (the coordinator's at v0; ours echoed at v1).
    pub member_id: Option<String>,
    /// The member epoch.
    pub member_epoch: i32,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: i32,
    /// The member's target assignment by topic id, when it changed (`None`: unchanged).
    pub assignment: Option<Vec<([u8; 16], Vec<i32>)>>,
}

/// Turns a decoded response into a [`HeartbeatView`].
pub fn view(resp: &ConsumerGroupHeartbeatResponse) -> HeartbeatView {
    HeartbeatView {
        error: ErrorCode(resp.error_code),
        message: resp.error_message.as_ref().map(|m| m.to_string()),
        member_id: resp.member_id.as_ref().map(|m| m.to_string()),
        member_epoch: resp.member_epoch,
        heartbeat_interval_ms: resp.heartbeat_interval_ms,
        assignment: resp.assignment.as_ref().map(|a| {
            a.topic_partitions
                .iter()
                .map(|t| (*t.topic_id.as_bytes(), t.partitions.clone()))
                .collect()
        }),
    }
}

/// The first flexible version (KIP-482): every version.
pub const FIRST_FLEXIBLE_VERSION: i16 = 0;

/// Checks a ConsumerGroupHeartbeat response body against its schema (bounded by the bytes that
/// remain).
pub(crate) fn check(r: &mut Reader<'_>, _version: i16) -> Res<()> {
    r.i32("throttle_time_ms")?;
    r.i16("error_code")?;
    r.nullable_str("error_message")?;
    r.nullable_str("member_id")?;
    r.i32("member_epoch")?;
    r.i32("heartbeat_interval_ms")?;
    // A nullable struct: -1 for null, 1 before the struct.
    match r.i8("assignment presence")? {
        -1 => {}
        1 => {
            // topic id, partitions count, tags.
            let topic_min = 16 + r.len_size(false) + r.tags_size();
            let n = r.count(topic_min, "assignment topics count")?;
            for _ in 0..n {
                r.uuid("assignment topic_id")?;
                let k = r.count(4, "assignment partitions count")?;
                for _ in 0..k {
                    r.i32("assignment partition")?;
                }
                r.skip_tags("assignment topic tagged fields")?;
            }
            r.skip_tags("assignment tagged fields")?;
        }
        other => {
            return Err(r.error_at(
                r.position().saturating_sub(1),
                format!("assignment presence: {other} is neither -1 (null) nor 1"),
            ))
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
    use kafka_protocol::messages::consumer_group_heartbeat_response::{
        Assignment, TopicPartitions as RespTopic,
    };
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, Encodable};
    use uuid::Uuid;

    const ID: [u8; 16] = [7; 16];

    fn full<'a>(topics: &'a [String], owned: &'a [([u8; 16], Vec<i32>)]) -> HeartbeatParams<'a> {
        HeartbeatParams {
            group: "g",
            member_id: "m-1",
            member_epoch: 0,
            instance_id: Some("i-1"),
            rack_id: Some("r1"),
            rebalance_timeout_ms: 300_000,
            topics: Some(topics),
            server_assignor: Some("uniform"),
            owned: Some(owned),
        }
    }

    #[test]
    fn the_request_is_the_bytes_kafka_protocol_writes_for_the_same_fields() {
        let topics = vec!["t".to_owned()];
        let owned = vec![(ID, vec![0, 2])];
        for v in 0..=1 {
            let frame = encode_request::<ConsumerGroupHeartbeat>(
                &request(&full(&topics, &owned), v),
                v,
                9,
                Some("c"),
            )
            .unwrap();
            // The same message built field by field with kafka-protocol's encoder.
            let expected = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_member_id(StrBytes::from_static_str("m-1"))
                .with_member_epoch(0)
                .with_instance_id(Some(StrBytes::from_static_str("i-1")))
                .with_rack_id(Some(StrBytes::from_static_str("r1")))
                .with_rebalance_timeout_ms(300_000)
                .with_subscribed_topic_names(Some(vec![topic_name("t")]))
                .with_server_assignor(Some(StrBytes::from_static_str("uniform")))
                .with_topic_partitions(Some(vec![TopicPartitions::default()
                    .with_topic_id(Uuid::from_bytes(ID))
                    .with_partitions(vec![0, 2])]));
            let mut body = bytes::BytesMut::new();
            RequestHeader::default()
                .with_request_api_key(68)
                .with_request_api_version(v)
                .with_correlation_id(9)
                .with_client_id(Some(StrBytes::from_static_str("c")))
                .encode(&mut body, 2)
                .unwrap();
            expected.encode(&mut body, v).unwrap();
            assert_eq!(&frame[4..], &body[..], "v{v}");
            // Golden bytes of the body after the header, written out by hand from the schema
            // (compact strings: length + 1; null: 0; arrays: count + 1; tagged fields: 0).
            let mut b = frame.slice(4..);
            decode_request_header_from_buffer(&mut b).unwrap();
            let mut golden: Vec<u8> = vec![
                2, b'g', // group_id
                4, b'm', b'-', b'1', // member_id
                0, 0, 0, 0, // member_epoch
                4, b'i', b'-', b'1', // instance_id
                3, b'r', b'1', // rack_id
                0, 4, 0x93, 0xe0, // rebalance_timeout_ms 300000
                2, 2, b't', // subscribed_topic_names ["t"]
                8, b'u', b'n', b'i', b'f', b'o', b'r', b'm', // server_assignor
                2,    // topic_partitions: one topic
                7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // topic id
                3, 0, 0, 0, 0, 0, 0, 0, 2, // partitions [0, 2]
                0, // topic tagged fields
                0, // request tagged fields
            ];
            if v >= 1 {
                // subscribed_topic_regex (v1+): null.
                golden.insert(24, 0);
            }
            assert_eq!(&b[..], &golden[..], "v{v}");
            let r = ConsumerGroupHeartbeatRequest::decode(&mut b, v).unwrap();
            assert_eq!(b.remaining(), 0);
            assert_eq!(r, expected);
        }
    }

    #[test]
    fn unchanged_fields_are_null() {
        let p = HeartbeatParams {
            group: "g",
            member_id: "m",
            member_epoch: 5,
            rebalance_timeout_ms: -1,
            ..HeartbeatParams::default()
        };
        let r = request(&p, 1);
        assert!(r.subscribed_topic_names.is_none());
        assert!(r.topic_partitions.is_none());
        assert!(r.server_assignor.is_none());
        assert_eq!((r.member_epoch, r.rebalance_timeout_ms), (5, -1));
    }

    fn response(assignment: Option<Vec<([u8; 16], Vec<i32>)>>) -> ConsumerGroupHeartbeatResponse {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(0)
            .with_member_id(Some(StrBytes::from_static_str("m-1")))
            .with_member_epoch(4)
            .with_heartbeat_interval_ms(5000)
            .with_assignment(assignment.map(|a| {
                Assignment::default().with_topic_partitions(
                    a.into_iter()
                        .map(|(id, ps)| {
                            RespTopic::default()
                                .with_topic_id(Uuid::from_bytes(id))
                                .with_partitions(ps)
                        })
                        .collect(),
                )
            }))
    }

    #[test]
    fn the_view_reads_every_field_and_every_truncation_is_an_error() {
        for v in 0..=1 {
            for a in [
                None,
                Some(vec![]),
                Some(vec![(ID, vec![1, 3]), ([9; 16], vec![])]),
            ] {
                let frame = encode_response::<ConsumerGroupHeartbeat>(&response(a.clone()), v, 2)
                    .unwrap()
                    .slice(4..);
                let (_, got) = decode_response::<ConsumerGroupHeartbeat>(frame.clone(), v).unwrap();
                let view = view(&got);
                assert_eq!(view.assignment, a);
                assert_eq!(
                    (
                        view.member_id.as_deref(),
                        view.member_epoch,
                        view.heartbeat_interval_ms
                    ),
                    (Some("m-1"), 4, 5000)
                );
                for cut in 0..frame.len() {
                    assert!(
                        decode_response::<ConsumerGroupHeartbeat>(frame.slice(..cut), v).is_err()
                    );
                }
            }
        }
    }

    #[test]
    fn the_fuzz_seeds_are_the_answers_they_are_named_after() {
        let seed = |b: &'static [u8]| {
            let (v, frame) = b.split_first().unwrap();
            let (_, r) =
                decode_response::<ConsumerGroupHeartbeat>(Bytes::from_static(frame), i16::from(*v))
                    .unwrap();
            view(&r)
        };
        let a = seed(include_bytes!(
            "../../../../fuzz/corpus/consumer_group_heartbeat_response/ok-v1-assignment"
        ));
        assert_eq!(
            (a.error, a.member_epoch, a.heartbeat_interval_ms),
            (ErrorCode::NONE, 3, 5000)
        );
        assert_eq!(
            a.assignment,
            Some(vec![([1; 16], vec![0, 1, 2]), ([2; 16], vec![5])])
        );
        let n = seed(include_bytes!(
            "../../../../fuzz/corpus/consumer_group_heartbeat_response/ok-v0-no-change"
        ));
        assert_eq!(
            (n.member_id.as_deref(), n.assignment),
            (Some("member-1"), None)
        );
        let f = seed(include_bytes!(
            "../../../../fuzz/corpus/consumer_group_heartbeat_response/fenced-v1"
        ));
        assert_eq!(f.error, ErrorCode(110));
        let u = seed(include_bytes!(
            "../../../../fuzz/corpus/consumer_group_heartbeat_response/unsupported-v0"
        ));
        assert_eq!(u.error, ErrorCode::UNSUPPORTED_VERSION);
        let e = seed(include_bytes!(
            "../../../../fuzz/corpus/consumer_group_heartbeat_response/ok-v1-empty-assignment"
        ));
        assert_eq!(e.assignment, Some(vec![]));
    }

    #[test]
    fn hostile_counts_and_presence_bytes_are_errors() {
        // Header (correlation id, no tags), throttle, error, null message, null member id,
        // epoch, interval, then the assignment.
        let head: &[u8] = &[
            0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let mut huge = head.to_vec();
        huge.extend_from_slice(&[1, 0xff, 0xff, 0xff, 0x0f]);
        let e = decode_response::<ConsumerGroupHeartbeat>(Bytes::from(huge), 1).unwrap_err();
        assert!(e.to_string().contains("assignment topics count"), "{e}");
        let mut bad = head.to_vec();
        bad.extend_from_slice(&[5, 0]);
        let e = decode_response::<ConsumerGroupHeartbeat>(Bytes::from(bad), 1).unwrap_err();
        assert!(e.to_string().contains("neither -1"), "{e}");
        let mut null = head.to_vec();
        null.extend_from_slice(&[0xff, 0]);
        let (_, r) = decode_response::<ConsumerGroupHeartbeat>(Bytes::from(null), 1).unwrap();
        assert!(view(&r).assignment.is_none());
    }
}
