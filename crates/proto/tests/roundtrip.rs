//! Property round trips where kafka-protocol has both directions: kdirect's request builders
//! and encoder → kafka-protocol's (broker-side) decoder, at every version kdirect speaks; and
//! responses encoded by kafka-protocol's broker side → kdirect's decoder and views.

use bytes::Buf;
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};
use kdirect_proto::api::fetch::{self, Fetch, FetchParams, PartitionFetch, TopicFetch};
use kdirect_proto::api::list_offsets::{self, ListOffsets, OffsetQuery, OffsetSpec};
use kdirect_proto::api::metadata::{self, Metadata};
use kdirect_proto::kafka_protocol;
use kdirect_proto::message::{decode_response, encode_request, encode_response, Api};
use kdirect_proto::IsolationLevel;
use proptest::prelude::*;

fn decode_req<A: Api>(frame: bytes::Bytes, version: i16, cid: i32) -> A::Request {
    let mut b = frame.slice(4..);
    let h = decode_request_header_from_buffer(&mut b).unwrap();
    assert_eq!(
        (h.request_api_key, h.request_api_version, h.correlation_id),
        (A::KEY as i16, version, cid)
    );
    assert_eq!(
        h.client_id.as_ref().map(|c| c.as_str()),
        Some("kdirect-test")
    );
    let r = A::Request::decode(&mut b, version).unwrap();
    assert_eq!(b.remaining(), 0);
    r
}

fn spec() -> impl Strategy<Value = OffsetSpec> {
    prop_oneof![
        Just(OffsetSpec::Earliest),
        Just(OffsetSpec::Latest),
        (0i64..4_000_000_000_000).prop_map(OffsetSpec::Timestamp),
    ]
}

proptest! {
    #[test]
    fn list_offsets_request_roundtrips(
        version in ListOffsets::VERSIONS.min..=ListOffsets::VERSIONS.max,
        topics in proptest::collection::vec(("[a-z]{1,12}", proptest::collection::vec((0i32..1000, spec(), -1i32..50), 1..5)), 1..4),
        cid in 0i32..i32::MAX,
        committed in any::<bool>(),
    ) {
        // Isolation levels exist from v2 on.
        let iso = if committed && version >= 2 { IsolationLevel::ReadCommitted } else { IsolationLevel::ReadUncommitted };
        let input: Vec<(&str, Vec<OffsetQuery>)> = topics.iter().map(|(t, ps)| (t.as_str(), ps.iter().map(|(p, s, e)| OffsetQuery {
            partition: *p, spec: *s, current_leader_epoch: if version >= 4 { *e } else { -1 },
        }).collect())).collect();
        let req = list_offsets::request(iso, &input, version).unwrap();
        let frame = encode_request::<ListOffsets>(&req, version, cid, Some("kdirect-test")).unwrap();
        let back = decode_req::<ListOffsets>(frame, version, cid);
        prop_assert_eq!(back, req);
    }

    #[test]
    fn fetch_request_roundtrips(
        version in Fetch::VERSIONS.min..=Fetch::VERSIONS.max,
        parts in proptest::collection::vec((0i32..64, 0i64..i64::MAX / 2, 1i32..10_000_000), 1..6),
        max_wait in 0i32..10_000,
        committed in any::<bool>(),
    ) {
        let mut params = FetchParams::default();
        params.max_wait_ms = max_wait;
        params.isolation = if committed { IsolationLevel::ReadCommitted } else { IsolationLevel::ReadUncommitted };
        let topics = vec![TopicFetch {
            name: "events".into(),
            id: [7; 16],
            partitions: parts.iter().map(|(p, o, m)| PartitionFetch { partition: *p, fetch_offset: *o, partition_max_bytes: *m, current_leader_epoch: 3, last_fetched_epoch: 2 }).collect(),
        }];
        let req = fetch::request(&params, &topics, version).unwrap();
        let frame = encode_request::<Fetch>(&req, version, 42, Some("kdirect-test")).unwrap();
        let back = decode_req::<Fetch>(frame, version, 42);
        prop_assert_eq!(back, req);
    }

    #[test]
    fn metadata_response_roundtrips(
        version in Metadata::VERSIONS.min..=Metadata::VERSIONS.max,
        leaders in proptest::collection::vec(0i32..5, 1..8),
    ) {
        use kafka_protocol::messages::metadata_response::*;
        use kafka_protocol::messages::{BrokerId, TopicName};
        use kafka_protocol::protocol::StrBytes;
        let resp = MetadataResponse::default()
            .with_brokers((0..5).map(|i| MetadataResponseBroker::default().with_node_id(BrokerId(i)).with_host(StrBytes::from_static_str("h")).with_port(9092 + i)).collect())
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                .with_partitions(leaders.iter().enumerate().map(|(i, l)| MetadataResponsePartition::default()
                    .with_partition_index(i as i32).with_leader_id(BrokerId(*l))
                    .with_leader_epoch(if version >= 7 { 9 } else { -1 })).collect())]);
        let frame = encode_response::<Metadata>(&resp, version, 5).unwrap();
        let (cid, back) = decode_response::<Metadata>(frame.slice(4..), version).unwrap();
        prop_assert_eq!(cid, 5);
        let view = metadata::view(&back);
        prop_assert_eq!(view.brokers.len(), 5);
        let got: Vec<i32> = view.topics[0].partitions.iter().map(|p| p.leader).collect();
        prop_assert_eq!(got, leaders);
    }
}

/// KIP-227: a session's id, epoch and forgotten partitions reach the wire as kafka-protocol
/// reads them back, by topic name below v13 and by id from v13; below v7 a session is refused.
#[test]
fn fetch_session_fields_and_forgotten_topics_reach_the_wire() {
    use kdirect_proto::api::fetch::{SessionFields, TopicForget};
    let topics = vec![TopicFetch {
        name: "events".into(),
        id: [7; 16],
        partitions: vec![PartitionFetch {
            partition: 2,
            fetch_offset: 10,
            partition_max_bytes: 1000,
            current_leader_epoch: 1,
            last_fetched_epoch: -1,
        }],
    }];
    let forgotten = vec![TopicForget {
        name: "gone".into(),
        id: [9; 16],
        partitions: vec![0, 3],
    }];
    let session = SessionFields { id: 77, epoch: 4 };
    for version in 7..=Fetch::VERSIONS.max {
        let req = fetch::request_in_session(
            &FetchParams::default(),
            &topics,
            &forgotten,
            "",
            session,
            version,
        )
        .unwrap();
        let frame = encode_request::<Fetch>(&req, version, 1, Some("kdirect-test")).unwrap();
        let back = decode_req::<Fetch>(frame, version, 1);
        assert_eq!((back.session_id, back.session_epoch), (77, 4), "v{version}");
        assert_eq!(back.forgotten_topics_data.len(), 1, "v{version}");
        let f = &back.forgotten_topics_data[0];
        assert_eq!(f.partitions, vec![0, 3]);
        if version >= 13 {
            assert_eq!(f.topic_id.as_bytes(), &[9; 16], "v{version}");
        } else {
            assert_eq!(f.topic.0.as_str(), "gone", "v{version}");
        }
    }
    let err = fetch::request_in_session(&FetchParams::default(), &topics, &[], "", session, 6)
        .unwrap_err();
    assert!(err.to_string().contains("v7"), "{err}");
    let plain = fetch::request(&FetchParams::default(), &topics, 6).unwrap();
    assert_eq!((plain.session_id, plain.session_epoch), (0, -1));
}

#[test]
fn fetch_v13_needs_topic_ids() {
    let topics = vec![TopicFetch {
        name: "noid".into(),
        id: [0; 16],
        partitions: vec![],
    }];
    let err = fetch::request(&FetchParams::default(), &topics, 13).unwrap_err();
    assert!(err.to_string().contains("noid"), "{err}");
    assert!(fetch::request(&FetchParams::default(), &topics, 12).is_ok());
}

#[test]
fn version_outside_range_is_refused() {
    let req = list_offsets::request(IsolationLevel::ReadUncommitted, &[], 1).unwrap();
    let err = encode_request::<ListOffsets>(&req, 0, 1, None).unwrap_err();
    assert!(err.to_string().contains("ListOffsets v0"), "{err}");
}
