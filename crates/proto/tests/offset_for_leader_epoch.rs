//! OffsetForLeaderEpoch (key 23, KIP-320): the request kdirect encodes and the bounded
//! response decoder, against bytes written out by hand from the protocol guide's schema and
//! against kafka-protocol's encoder and decoder at every version kdirect speaks (2–4).

use bytes::Bytes;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset as KpEpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use kdirect_proto::api::offset_for_leader_epoch::{
    self as ofle, EpochEndOffset, EpochQuery, OffsetForLeaderEpoch, OffsetForLeaderEpochResponse,
};
use kdirect_proto::kafka_protocol;
use kdirect_proto::message::{decode_response, encode_request, encode_response, Api};
use kdirect_proto::{ErrorCode, ProtoError};
use proptest::prelude::*;

fn decode_position(e: &ProtoError) -> usize {
    match e {
        ProtoError::Decode { position, .. } => *position,
        other => panic!("expected a Decode error, got {other:?}"),
    }
}

/// The request at v4 (flexible, header v2) for partition 3 of "t", current epoch 7, asking
/// about epoch 5: every byte from the schema.
#[test]
fn request_v4_bytes_are_the_schema_s() {
    let req = ofle::request(
        &[(
            "t",
            vec![EpochQuery {
                partition: 3,
                current_leader_epoch: 7,
                leader_epoch: 5,
            }],
        )],
        4,
    );
    let frame = encode_request::<OffsetForLeaderEpoch>(&req, 4, 9, Some("k")).unwrap();
    #[rustfmt::skip]
    let want: &[u8] = &[
        0, 0, 0, 35,            // size
        0, 23, 0, 4,            // api key 23, version 4
        0, 0, 0, 9,             // correlation id
        0, 1, b'k',             // client id (a plain nullable string in header v2)
        0,                      // header tagged fields
        0xff, 0xff, 0xff, 0xff, // replica_id -1: a consumer (v3+)
        2,                      // topics: compact array of 1
        2, b't',                // topic: compact string "t"
        2,                      // partitions: 1
        0, 0, 0, 3,             // partition
        0, 0, 0, 7,             // current_leader_epoch
        0, 0, 0, 5,             // leader_epoch
        0,                      // partition tagged fields
        0,                      // topic tagged fields
        0,                      // request tagged fields
    ];
    assert_eq!(&frame[..], want);
}

/// v2 has no replica id and is not flexible.
#[test]
fn request_v2_has_no_replica_id() {
    let req = ofle::request(
        &[(
            "t",
            vec![EpochQuery {
                partition: 0,
                current_leader_epoch: -1,
                leader_epoch: 2,
            }],
        )],
        2,
    );
    let frame = encode_request::<OffsetForLeaderEpoch>(&req, 2, 1, None).unwrap();
    #[rustfmt::skip]
    let want: &[u8] = &[
        0, 0, 0, 33,            // size
        0, 23, 0, 2,
        0, 0, 0, 1,
        0xff, 0xff,             // null client id
        0, 0, 0, 1,             // topics: 1
        0, 1, b't',             // topic
        0, 0, 0, 1,             // partitions: 1
        0, 0, 0, 0,             // partition
        0xff, 0xff, 0xff, 0xff, // current_leader_epoch -1
        0, 0, 0, 2,             // leader_epoch
    ];
    assert_eq!(&frame[..], want);
}

/// A v4 answer written from the schema: partition 3 of "t" ends epoch 5 at offset 1200, and
/// partition 4 is fenced. The bounded decoder and kafka-protocol read the same.
#[test]
fn response_v4_bytes_decode_as_the_schema_says() {
    #[rustfmt::skip]
    let frame: &[u8] = &[
        0, 0, 0, 9,             // correlation id
        0,                      // header tagged fields
        0, 0, 0, 0,             // throttle_time_ms
        2,                      // topics: 1
        2, b't',                // topic "t"
        3,                      // partitions: 2
        0, 0,                   // error_code
        0, 0, 0, 3,             // partition
        0, 0, 0, 5,             // leader_epoch
        0, 0, 0, 0, 0, 0, 4, 0xb0, // end_offset 1200
        0,
        0, 74,                  // FENCED_LEADER_EPOCH
        0, 0, 0, 4,
        0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0,
        0,                      // topic tagged fields
        0,                      // response tagged fields
    ];
    let frame = Bytes::from_static(frame);
    let (cid, got) = ofle::decode(frame.clone(), 4).unwrap();
    assert_eq!(cid, 9);
    assert_eq!(
        got,
        vec![
            EpochEndOffset {
                topic: "t".into(),
                partition: 3,
                error: ErrorCode::NONE,
                leader_epoch: 5,
                end_offset: 1200,
            },
            EpochEndOffset {
                topic: "t".into(),
                partition: 4,
                error: ErrorCode::FENCED_LEADER_EPOCH,
                leader_epoch: -1,
                end_offset: -1,
            },
        ]
    );
    let (_, kp) = decode_response::<OffsetForLeaderEpoch>(frame.clone(), 4).unwrap();
    assert_eq!(ofle::view(&kp), got);
    // kafka-protocol writes the same bytes for it.
    let again = encode_response::<OffsetForLeaderEpoch>(&kp, 4, 9).unwrap();
    assert_eq!(&again[4..], &frame[..]);
    for cut in 0..frame.len() {
        let e = ofle::decode(frame.slice(..cut), 4).unwrap_err();
        assert!(decode_position(&e) <= cut, "cut {cut}: {e}");
    }
}

#[test]
fn huge_counts_and_foreign_versions_are_refused() {
    // v2: throttle, then a topics count of 2^31-1 in 4 bytes.
    let frame = Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]);
    let e = ofle::decode(frame.clone(), 2).unwrap_err();
    assert_eq!(decode_position(&e), 8, "{e}");
    assert!(decode_response::<OffsetForLeaderEpoch>(frame.clone(), 2).is_err());
    for v in [1, 5] {
        let e = ofle::decode(frame.clone(), v).unwrap_err();
        assert!(matches!(e, ProtoError::VersionNotSpoken { .. }), "{e:?}");
    }
}

proptest! {
    /// Random answers encoded by kafka-protocol at v2–v4: the bounded decoder equals
    /// kafka-protocol's decoding, and any cut is a Decode error at or before the cut.
    #[test]
    fn decode_matches_kafka_protocol(
        version in OffsetForLeaderEpoch::VERSIONS.min..=OffsetForLeaderEpoch::VERSIONS.max,
        throttle in any::<i32>(),
        topics in proptest::collection::vec(("[a-zA-Z0-9._-]{1,40}", proptest::collection::vec((-1i16..100, 0i32..1000, any::<i32>(), any::<i64>()), 0..5)), 0..4),
        cid in any::<i32>(),
    ) {
        let resp = OffsetForLeaderEpochResponse::default()
            .with_throttle_time_ms(throttle)
            .with_topics(topics.iter().map(|(n, ps)| OffsetForLeaderTopicResult::default()
                .with_topic(TopicName(StrBytes::from_string(n.clone())))
                .with_partitions(ps.iter().map(|(e, p, ep, o)| KpEpochEndOffset::default()
                    .with_error_code(*e).with_partition(*p).with_leader_epoch(*ep).with_end_offset(*o)).collect()))
                .collect());
        let frame = encode_response::<OffsetForLeaderEpoch>(&resp, version, cid).unwrap().slice(4..);
        let (_, back) = decode_response::<OffsetForLeaderEpoch>(frame.clone(), version).unwrap();
        let (got_cid, got) = ofle::decode(frame.clone(), version).unwrap();
        prop_assert_eq!(got_cid, cid);
        prop_assert_eq!(&got, &ofle::view(&back));
        prop_assert_eq!(got.len(), topics.iter().map(|(_, p)| p.len()).sum::<usize>());
        let cut = frame.len() * (cid.unsigned_abs() as usize % 1000) / 1000;
        let e = ofle::decode(frame.slice(..cut), version).unwrap_err();
        prop_assert!(decode_position(&e) <= cut);
    }

    /// Every request encodes at every version and decodes back with the same queries.
    #[test]
    fn request_roundtrips(
        version in OffsetForLeaderEpoch::VERSIONS.min..=OffsetForLeaderEpoch::VERSIONS.max,
        qs in proptest::collection::vec((0i32..100, -1i32..50, -1i32..50), 1..6),
    ) {
        use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};
        let queries: Vec<EpochQuery> = qs.iter().map(|(p, c, l)| EpochQuery { partition: *p, current_leader_epoch: *c, leader_epoch: *l }).collect();
        let req = ofle::request(&[("events", queries.clone())], version);
        let frame = encode_request::<OffsetForLeaderEpoch>(&req, version, 5, Some("kdirect")).unwrap();
        let mut b = frame.slice(4..);
        let h = decode_request_header_from_buffer(&mut b).unwrap();
        prop_assert_eq!(h.request_api_key, OffsetForLeaderEpoch::KEY as i16);
        let back = <OffsetForLeaderEpoch as Api>::Request::decode(&mut b, version).unwrap();
        prop_assert_eq!(back.replica_id.0, if version >= 3 { -1 } else { -2 });
        let parts = &back.topics[0].partitions;
        for (got, want) in parts.iter().zip(&queries) {
            prop_assert_eq!((got.partition, got.current_leader_epoch, got.leader_epoch),
                (want.partition, want.current_leader_epoch, want.leader_epoch));
        }
    }

    #[test]
    fn arbitrary_bytes_give_errors_not_panics(
        frame in proptest::collection::vec(any::<u8>(), 0..200),
        v in 0i16..8,
    ) {
        let frame = Bytes::from(frame);
        let _ = ofle::decode(frame.clone(), v);
        let _ = decode_response::<OffsetForLeaderEpoch>(frame, v);
    }
}
