//! kdirect-proto's bounded decoders: the hand-written ones (`fetch::decode`,
//! `metadata::decode`, `list_offsets::decode`) must agree with kafka-protocol's decoder plus
//! the views at every version kdirect speaks, and malformed frames (huge counts, negative
//! lengths, truncation anywhere) must give typed errors with a byte position — never a panic
//! or an allocation sized by the wire. `decode_response` walks every frame with the same
//! bounded reader before kafka-protocol sees it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData, SnapshotId,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kdirect_proto::api::api_versions::{self, ApiVersions};
use kdirect_proto::api::describe_groups::{self, DescribeGroups};
use kdirect_proto::api::fetch::{self, Fetch, FetchResponse};
use kdirect_proto::api::find_coordinator::FindCoordinator;
use kdirect_proto::api::heartbeat::Heartbeat;
use kdirect_proto::api::join_group::JoinGroup;
use kdirect_proto::api::leave_group::LeaveGroup;
use kdirect_proto::api::list_offsets::{self, ListOffsets, ListOffsetsResponse};
use kdirect_proto::api::metadata::{self, Metadata, MetadataResponse};
use kdirect_proto::api::offset_commit::OffsetCommit;
use kdirect_proto::api::offset_fetch::OffsetFetch;
use kdirect_proto::api::sasl_authenticate::{SaslAuthenticate, SaslAuthenticateResponse};
use kdirect_proto::api::sasl_handshake::{SaslHandshake, SaslHandshakeResponse};
use kdirect_proto::api::sync_group::SyncGroup;
use kdirect_proto::kafka_protocol;
use kdirect_proto::message::{decode_response, encode_response, Api};
use kdirect_proto::ProtoError;
use proptest::prelude::*;
use uuid::Uuid;

fn data(name: &str) -> Bytes {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// The Decode error's position, or a panic naming what came instead.
fn decode_position(e: &ProtoError) -> usize {
    match e {
        ProtoError::Decode { position, .. } => *position,
        other => panic!("expected a Decode error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Fetch: random responses, every version

#[derive(Debug, Clone)]
struct GenPartition {
    index: i32,
    error: i16,
    hw: i64,
    lso: i64,
    log_start: i64,
    aborted: Option<Vec<(i64, i64)>>,
    replica: i32,
    records: Option<Vec<u8>>,
    leader: (i32, i32),
    diverging: Option<(i32, i64)>,
    snapshot: Option<(i64, i32)>,
    unknown: Vec<(u8, Vec<u8>)>,
}

fn gen_partition() -> impl Strategy<Value = GenPartition> {
    (
        (
            0i32..1000,
            -1i16..120,
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
        ),
        proptest::option::of(proptest::collection::vec(
            (any::<i64>(), any::<i64>()),
            0..4,
        )),
        -1i32..10,
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        (-1i32..10, -1i32..100),
        proptest::option::of((any::<i32>(), any::<i64>())),
        proptest::option::of((any::<i64>(), any::<i32>())),
        proptest::collection::vec(
            (3u8..200, proptest::collection::vec(any::<u8>(), 0..20)),
            0..3,
        ),
    )
        .prop_map(
            |(
                (index, error, hw, lso, log_start),
                aborted,
                replica,
                records,
                leader,
                diverging,
                snapshot,
                unknown,
            )| {
                GenPartition {
                    index,
                    error,
                    hw,
                    lso,
                    log_start,
                    aborted,
                    replica,
                    records,
                    leader,
                    diverging,
                    snapshot,
                    unknown,
                }
            },
        )
}

type GenTopic = (String, Vec<GenPartition>);

/// Builds a response valid at `version` (fields a version lacks stay at their defaults, as
/// kafka-protocol's encoder demands) and the id → name map a v13+ request would have used.
fn build_fetch(
    version: i16,
    throttle: i32,
    error: i16,
    session: i32,
    topics: &[GenTopic],
    endpoints: &[(i32, String, i32, Option<String>)],
    top_unknown: &[(u8, Vec<u8>)],
) -> (FetchResponse, HashMap<[u8; 16], std::sync::Arc<str>>) {
    let flexible = version >= 12;
    let mut names = HashMap::new();
    let responses = topics
        .iter()
        .enumerate()
        .map(|(i, (name, parts))| {
            let id = [i as u8 + 1; 16];
            names.insert(id, std::sync::Arc::from(name.as_str()));
            FetchableTopicResponse::default()
                .with_topic(if version < 13 {
                    TopicName(s(name))
                } else {
                    Default::default()
                })
                .with_topic_id(if version >= 13 {
                    Uuid::from_bytes(id)
                } else {
                    Uuid::nil()
                })
                .with_partitions(
                    parts
                        .iter()
                        .map(|p| {
                            let mut pd = PartitionData::default()
                                .with_partition_index(p.index)
                                .with_error_code(p.error)
                                .with_high_watermark(p.hw)
                                .with_last_stable_offset(p.lso)
                                .with_log_start_offset(if version >= 5 { p.log_start } else { -1 })
                                .with_aborted_transactions(p.aborted.as_ref().map(|a| {
                                    a.iter()
                                        .map(|(pid, first)| {
                                            AbortedTransaction::default()
                                                .with_producer_id(ProducerId(*pid))
                                                .with_first_offset(*first)
                                        })
                                        .collect()
                                }))
                                .with_preferred_read_replica(BrokerId(if version >= 11 {
                                    p.replica
                                } else {
                                    -1
                                }))
                                .with_records(p.records.clone().map(Bytes::from));
                            if flexible {
                                pd = pd.with_current_leader(
                                    LeaderIdAndEpoch::default()
                                        .with_leader_id(BrokerId(p.leader.0))
                                        .with_leader_epoch(p.leader.1),
                                );
                                if let Some((epoch, end)) = p.diverging {
                                    pd = pd.with_diverging_epoch(
                                        EpochEndOffset::default()
                                            .with_epoch(epoch)
                                            .with_end_offset(end),
                                    );
                                }
                                if let Some((end, epoch)) = p.snapshot {
                                    pd = pd.with_snapshot_id(
                                        SnapshotId::default()
                                            .with_end_offset(end)
                                            .with_epoch(epoch),
                                    );
                                }
                                pd = pd.with_unknown_tagged_fields(
                                    p.unknown
                                        .iter()
                                        .map(|(t, v)| (i32::from(*t), Bytes::from(v.clone())))
                                        .collect::<BTreeMap<_, _>>(),
                                );
                            }
                            pd
                        })
                        .collect(),
                )
        })
        .collect();
    let mut resp = FetchResponse::default()
        .with_throttle_time_ms(throttle)
        .with_error_code(if version >= 7 { error } else { 0 })
        .with_session_id(if version >= 7 { session } else { 0 })
        .with_responses(responses);
    if version >= 16 {
        resp = resp.with_node_endpoints(
            endpoints
                .iter()
                .map(|(id, host, port, rack)| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(*id))
                        .with_host(s(host))
                        .with_port(*port)
                        .with_rack(rack.as_deref().map(s))
                })
                .collect(),
        );
    }
    if flexible {
        resp = resp.with_unknown_tagged_fields(
            top_unknown
                .iter()
                .map(|(t, v)| (i32::from(*t), Bytes::from(v.clone())))
                .collect(),
        );
    }
    (resp, names)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random responses encoded by kafka-protocol at every version 4–17: `fetch::decode` gives
    /// the same view as kafka-protocol's decoder followed by `fetch::view`, and its `records`
    /// point into the frame.
    #[test]
    fn fetch_decode_matches_kafka_protocol(
        version in Fetch::VERSIONS.min..=Fetch::VERSIONS.max,
        throttle in any::<i32>(),
        error in -1i16..120,
        session in any::<i32>(),
        topics in proptest::collection::vec(("[a-zA-Z0-9._-]{1,40}", proptest::collection::vec(gen_partition(), 0..4)), 0..4),
        endpoints in proptest::collection::vec((any::<i32>(), "[a-z.]{0,20}", any::<i32>(), proptest::option::of("[a-z]{0,8}")), 0..3),
        top_unknown in proptest::collection::vec((1u8..100, proptest::collection::vec(any::<u8>(), 0..10)), 0..2),
        cid in any::<i32>(),
    ) {
        let (resp, names) = build_fetch(version, throttle, error, session, &topics, &endpoints, &top_unknown);
        let frame = encode_response::<Fetch>(&resp, version, cid).unwrap().slice(4..);
        let (want_cid, want) = decode_response::<Fetch>(frame.clone(), version).unwrap();
        let want = fetch::view(want, version, &names).unwrap();
        let (got_cid, got) = fetch::decode(frame.clone(), version, &names).unwrap();
        prop_assert_eq!(got_cid, cid);
        prop_assert_eq!(want_cid, cid);
        prop_assert_eq!(&got, &want);
        let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        for p in &got.partitions {
            if !p.records.is_empty() {
                prop_assert!(range.contains(&(p.records.as_ptr() as usize)), "records copied");
            }
        }
        // Cut short anywhere: a typed error at or before the cut, from both paths.
        let cut = frame.len() * (cid.unsigned_abs() as usize % 1000) / 1000;
        let e = fetch::decode(frame.slice(..cut), version, &names).unwrap_err();
        prop_assert!(decode_position(&e) <= cut);
        prop_assert!(decode_response::<Fetch>(frame.slice(..cut), version).is_err());
    }

    /// Random Metadata responses at every version 1–12: `metadata::decode` equals
    /// `metadata::view` of kafka-protocol's decode.
    #[test]
    fn metadata_decode_matches_kafka_protocol(
        version in Metadata::VERSIONS.min..=Metadata::VERSIONS.max,
        brokers in proptest::collection::vec((any::<i32>(), "[a-z.]{0,20}", any::<i32>(), proptest::option::of("[a-z]{0,8}")), 0..4),
        cluster in proptest::option::of("[a-zA-Z0-9]{0,22}"),
        controller in any::<i32>(),
        topics in proptest::collection::vec((-1i16..100, proptest::option::of("[a-zA-Z0-9._-]{1,40}"), any::<[u8; 16]>(), any::<bool>(),
            proptest::collection::vec((-1i16..100, 0i32..100, -1i32..10, -1i32..100, proptest::collection::vec(0i32..10, 0..4), proptest::collection::vec(0i32..10, 0..4), proptest::collection::vec(0i32..10, 0..2)), 0..5)), 0..4),
        cid in any::<i32>(),
    ) {
        let resp = MetadataResponse::default()
            .with_brokers(brokers.iter().map(|(id, h, p, r)| MetadataResponseBroker::default().with_node_id(BrokerId(*id)).with_host(s(h)).with_port(*p).with_rack(r.as_deref().map(s))).collect())
            .with_cluster_id(if version >= 2 { cluster.as_deref().map(s) } else { None })
            .with_controller_id(BrokerId(controller))
            .with_topics(topics.iter().map(|(e, n, id, internal, parts)| MetadataResponseTopic::default()
                .with_error_code(*e)
                // Null names exist from v12 only (kafka-protocol refuses to encode them below).
                .with_name(if version >= 12 { n.as_deref() } else { Some(n.as_deref().unwrap_or("x")) }.map(|n| TopicName(s(n))))
                .with_topic_id(Uuid::from_bytes(if version >= 10 { *id } else { [0; 16] }))
                .with_is_internal(*internal)
                .with_partitions(parts.iter().map(|(e, i, l, ep, rs, isr, off)| MetadataResponsePartition::default()
                    .with_error_code(*e).with_partition_index(*i).with_leader_id(BrokerId(*l))
                    .with_leader_epoch(if version >= 7 { *ep } else { -1 })
                    .with_replica_nodes(rs.iter().map(|r| BrokerId(*r)).collect())
                    .with_isr_nodes(isr.iter().map(|r| BrokerId(*r)).collect())
                    .with_offline_replicas(if version >= 5 { off.iter().map(|r| BrokerId(*r)).collect() } else { vec![] })).collect()))
                .collect());
        let frame = encode_response::<Metadata>(&resp, version, cid).unwrap().slice(4..);
        let (_, back) = decode_response::<Metadata>(frame.clone(), version).unwrap();
        let (got_cid, got) = metadata::decode(frame.clone(), version).unwrap();
        prop_assert_eq!(got_cid, cid);
        prop_assert_eq!(got, metadata::view(&back));
        let cut = frame.len() * (cid.unsigned_abs() as usize % 1000) / 1000;
        let e = metadata::decode(frame.slice(..cut), version).unwrap_err();
        prop_assert!(decode_position(&e) <= cut);
    }

    /// Random ListOffsets responses at every version 1–10: `list_offsets::decode` equals
    /// `list_offsets::view` of kafka-protocol's decode.
    #[test]
    fn list_offsets_decode_matches_kafka_protocol(
        version in ListOffsets::VERSIONS.min..=ListOffsets::VERSIONS.max,
        throttle in any::<i32>(),
        topics in proptest::collection::vec(("[a-zA-Z0-9._-]{1,40}", proptest::collection::vec((0i32..1000, -1i16..100, any::<i64>(), any::<i64>(), -1i32..100), 0..5)), 0..4),
        cid in any::<i32>(),
    ) {
        let resp = ListOffsetsResponse::default()
            .with_throttle_time_ms(if version >= 2 { throttle } else { 0 })
            .with_topics(topics.iter().map(|(n, ps)| ListOffsetsTopicResponse::default().with_name(TopicName(s(n)))
                .with_partitions(ps.iter().map(|(i, e, ts, o, ep)| ListOffsetsPartitionResponse::default()
                    .with_partition_index(*i).with_error_code(*e).with_timestamp(*ts).with_offset(*o)
                    .with_leader_epoch(if version >= 4 { *ep } else { -1 })).collect())).collect());
        let frame = encode_response::<ListOffsets>(&resp, version, cid).unwrap().slice(4..);
        let (_, back) = decode_response::<ListOffsets>(frame.clone(), version).unwrap();
        let (got_cid, got) = list_offsets::decode(frame.clone(), version).unwrap();
        prop_assert_eq!(got_cid, cid);
        prop_assert_eq!(got, list_offsets::view(&back));
        let cut = frame.len() * (cid.unsigned_abs() as usize % 1000) / 1000;
        let e = list_offsets::decode(frame.slice(..cut), version).unwrap_err();
        prop_assert!(decode_position(&e) <= cut);
    }

    /// Arbitrary bytes never panic any decoder, whatever the version.
    #[test]
    fn arbitrary_bytes_give_errors_not_panics(
        frame in proptest::collection::vec(any::<u8>(), 0..200),
        v in 0i16..20,
    ) {
        let frame = Bytes::from(frame);
        let _ = fetch::decode(frame.clone(), v, &HashMap::new());
        let _ = metadata::decode(frame.clone(), v);
        let _ = list_offsets::decode(frame.clone(), v);
        let _ = api_versions::decode(frame.clone(), v);
        let _ = decode_response::<Fetch>(frame.clone(), v);
        let _ = decode_response::<Metadata>(frame.clone(), v);
        let _ = decode_response::<ListOffsets>(frame.clone(), v);
        let _ = decode_response::<FindCoordinator>(frame.clone(), v);
        let _ = decode_response::<OffsetCommit>(frame.clone(), v);
        let _ = decode_response::<OffsetFetch>(frame.clone(), v);
        let _ = decode_response::<SaslHandshake>(frame.clone(), v);
        let _ = decode_response::<JoinGroup>(frame.clone(), v);
        let _ = decode_response::<SyncGroup>(frame.clone(), v);
        let _ = decode_response::<Heartbeat>(frame.clone(), v);
        let _ = decode_response::<LeaveGroup>(frame.clone(), v);
        if let Ok((_, r)) = decode_response::<DescribeGroups>(frame.clone(), v) {
            let _ = describe_groups::view(&r);
        }
        let _ = decode_response::<SaslAuthenticate>(frame, v);
    }
}

// ---------------------------------------------------------------------------------------------
// SASL: SaslHandshake 0-1 and SaslAuthenticate 0-2

/// Every version round-trips through the bounded walk and kafka-protocol; every truncation is
/// a Decode error; a mechanisms count that cannot fit is refused before any allocation.
#[test]
fn sasl_responses_decode_at_every_version_and_truncations_are_errors() {
    for v in SaslHandshake::VERSIONS.min..=SaslHandshake::VERSIONS.max {
        let resp = SaslHandshakeResponse::default()
            .with_error_code(33)
            .with_mechanisms(vec![s("SCRAM-SHA-256"), s("SCRAM-SHA-512")]);
        let frame = encode_response::<SaslHandshake>(&resp, v, 9)
            .unwrap()
            .slice(4..);
        let (cid, back) = decode_response::<SaslHandshake>(frame.clone(), v).unwrap();
        assert_eq!((cid, &back), (9, &resp), "v{v}");
        for cut in 0..frame.len() {
            let e = decode_response::<SaslHandshake>(frame.slice(..cut), v).unwrap_err();
            assert!(decode_position(&e) <= cut, "v{v} cut at {cut}");
        }
        // The mechanisms count (after the correlation id and error code) says 2^31 - 1.
        let mut hostile = BytesMut::from(&frame[..6]);
        hostile.put_i32(i32::MAX);
        let e = decode_response::<SaslHandshake>(hostile.freeze(), v).unwrap_err();
        assert_eq!(decode_position(&e), 6, "v{v}: {e}");
    }
    for v in SaslAuthenticate::VERSIONS.min..=SaslAuthenticate::VERSIONS.max {
        let mut resp = SaslAuthenticateResponse::default()
            .with_error_code(58)
            .with_error_message(Some(s("Authentication failed: invalid credentials")))
            .with_auth_bytes(Bytes::from_static(b"v=6rriTRBi23WpRR"));
        if v >= 1 {
            resp.session_lifetime_ms = 3_600_000;
        }
        let frame = encode_response::<SaslAuthenticate>(&resp, v, 3)
            .unwrap()
            .slice(4..);
        let (cid, back) = decode_response::<SaslAuthenticate>(frame.clone(), v).unwrap();
        assert_eq!((cid, &back), (3, &resp), "v{v}");
        for cut in 0..frame.len() {
            let e = decode_response::<SaslAuthenticate>(frame.slice(..cut), v).unwrap_err();
            assert!(decode_position(&e) <= cut, "v{v} cut at {cut}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Golden frames from librdkafka's mock (see tests/data/README.md and tests/golden.rs)

/// The names map of a capture round, from its Metadata answer (v12 with Fetch v16, v9 with
/// Fetch v11).
fn golden_names(fetch_version: i16) -> HashMap<[u8; 16], std::sync::Arc<str>> {
    let mv = if fetch_version == 16 { 12 } else { 9 };
    let (_, m) = metadata::decode(data(&format!("metadata-v{mv}-response.bin")), mv).unwrap();
    m.topics
        .into_iter()
        .map(|t| (t.id, std::sync::Arc::from(t.name)))
        .collect()
}

#[test]
fn golden_fetch_frames_decode_as_kafka_protocol_does() {
    for v in [11, 16] {
        let frame = data(&format!("fetch-v{v}-response.bin"));
        let names = golden_names(v);
        let (cid, want) = decode_response::<Fetch>(frame.clone(), v).unwrap();
        let want = fetch::view(want, v, &names).unwrap();
        let (got_cid, got) = fetch::decode(frame.clone(), v, &names).unwrap();
        assert_eq!((got_cid, &got), (cid, &want), "v{v}");
        assert!(!got.partitions.is_empty());
        for p in &got.partitions {
            assert!(p.topic.starts_with("golden"), "{}", p.topic);
            assert_eq!(p.high_watermark, 5);
            assert!(!p.records.is_empty());
        }
    }
}

#[test]
fn golden_metadata_and_list_offsets_decode_as_kafka_protocol_does() {
    for v in [9, 12] {
        let frame = data(&format!("metadata-v{v}-response.bin"));
        let (_, want) = decode_response::<Metadata>(frame.clone(), v).unwrap();
        assert_eq!(metadata::decode(frame, v).unwrap().1, metadata::view(&want));
    }
    for v in [5, 7] {
        let frame = data(&format!("list_offsets-v{v}-response.bin"));
        let (_, want) = decode_response::<ListOffsets>(frame.clone(), v).unwrap();
        assert_eq!(
            list_offsets::decode(frame, v).unwrap().1,
            list_offsets::view(&want)
        );
    }
}

/// Every golden response cut at every byte: a Decode error at or before the cut, from the
/// hand-written decoders and from `decode_response` (whose bounded walk runs first).
#[test]
fn golden_frames_truncated_at_every_byte_are_decode_errors() {
    fn each_cut(file: &str, mut check: impl FnMut(Bytes, usize)) {
        let frame = data(file);
        // The mock's Metadata answers end in one byte past the last field.
        let trailing = usize::from(file.starts_with("metadata"));
        for cut in 0..frame.len() - trailing {
            check(frame.slice(..cut), cut);
        }
    }
    for v in [11, 16] {
        let names = golden_names(v);
        each_cut(&format!("fetch-v{v}-response.bin"), |f, cut| {
            let e = fetch::decode(f.clone(), v, &names).unwrap_err();
            assert!(decode_position(&e) <= cut, "{e}");
            let e = decode_response::<Fetch>(f, v).unwrap_err();
            assert!(decode_position(&e) <= cut, "{e}");
        });
    }
    for v in [9, 12] {
        each_cut(&format!("metadata-v{v}-response.bin"), |f, cut| {
            assert!(decode_position(&metadata::decode(f.clone(), v).unwrap_err()) <= cut);
            assert!(decode_position(&decode_response::<Metadata>(f, v).unwrap_err()) <= cut);
        });
    }
    for v in [5, 7] {
        each_cut(&format!("list_offsets-v{v}-response.bin"), |f, cut| {
            assert!(decode_position(&list_offsets::decode(f.clone(), v).unwrap_err()) <= cut);
            assert!(decode_position(&decode_response::<ListOffsets>(f, v).unwrap_err()) <= cut);
        });
    }
    fn generic<A: Api>(file: &str, v: i16) {
        each_cut(file, |f, cut| {
            let Err(e) = decode_response::<A>(f, v) else {
                panic!("{file} cut at {cut} decoded")
            };
            assert!(decode_position(&e) <= cut, "{file} cut at {cut}: {e}");
        });
    }
    generic::<ApiVersions>("api_versions-v0-response.bin", 0);
    for v in [1, 2] {
        generic::<FindCoordinator>(&format!("find_coordinator-v{v}-response.bin"), v);
    }
    for v in [7, 9] {
        generic::<OffsetCommit>(&format!("offset_commit-v{v}-response.bin"), v);
    }
    for v in [5, 6] {
        generic::<OffsetFetch>(&format!("offset_fetch-v{v}-response.bin"), v);
    }
}

/// Bytes after the last field are ignored, as kafka-protocol ignores them (the mock's golden
/// Metadata answers carry one).
#[test]
fn trailing_bytes_are_ignored() {
    let mut f = BytesMut::from(&data("fetch-v11-response.bin")[..]);
    let (_, want) = fetch::decode(f.clone().freeze(), 11, &HashMap::new()).unwrap();
    f.put_u8(0);
    let (_, got) = fetch::decode(f.freeze(), 11, &HashMap::new()).unwrap();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------------
// Hostile frames

/// The fuzzer's reproducer: a Fetch v11 frame (first byte picks the version, as in the fuzz
/// target) whose nested count made kafka-protocol reserve gigabytes.
#[test]
fn fuzzer_oom_reproducer_is_a_decode_error() {
    let input = data("fetch-oom-regression.bin");
    let version = 4 + i16::from(input[0] % 14);
    let frame = input.slice(1..);
    let e = decode_response::<Fetch>(frame.clone(), version).unwrap_err();
    assert!(e.to_string().contains("count"), "{e}");
    let e2 = fetch::decode(frame, version, &HashMap::new()).unwrap_err();
    assert_eq!(e, e2);
}

/// A Fetch v4 frame: correlation id, throttle, then `n` topics and whatever follows.
fn fetch_v4(topics: i32, rest: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i32(9); // correlation id
    b.put_i32(0); // throttle
    b.put_i32(topics);
    b.put_slice(rest);
    b.freeze()
}

#[test]
fn huge_counts_are_refused_where_they_stand() {
    // i32::MAX topics in 10 bytes.
    let f = fetch_v4(i32::MAX, &[0; 10]);
    for e in [
        fetch::decode(f.clone(), 4, &HashMap::new()).unwrap_err(),
        decode_response::<Fetch>(f, 4).unwrap_err(),
    ] {
        assert_eq!(decode_position(&e), 8, "{e}");
        assert!(
            e.to_string()
                .contains("responses count: 2147483647 elements"),
            "{e}"
        );
    }
    // One topic "t" with i32::MAX partitions.
    let f = fetch_v4(1, &[0, 1, b't', 0x7f, 0xff, 0xff, 0xff, 0, 0]);
    let e = fetch::decode(f, 4, &HashMap::new()).unwrap_err();
    assert_eq!(decode_position(&e), 15, "{e}");
    assert!(e.to_string().contains("partitions count"), "{e}");
    // Flexible: a compact count of u32::MAX - 1 topics.
    let mut b = BytesMut::new();
    b.put_i32(9);
    b.put_u8(0); // header tags
    b.put_i32(0); // throttle
    b.put_i16(0); // error
    b.put_i32(0); // session
    b.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let e = fetch::decode(b.freeze(), 12, &HashMap::new()).unwrap_err();
    assert_eq!(decode_position(&e), 15, "{e}");
    // ApiVersions v0 answering with 2^31-1 api keys (kafka-protocol would reserve 24 GiB...).
    let f = Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0]);
    let e = decode_response::<ApiVersions>(f, 0).unwrap_err();
    assert_eq!(decode_position(&e), 6, "{e}");
    // ... and librdkafka's mock UNSUPPORTED_VERSION answer, read v0-shaped, has a count of
    // 16 Mi: refused by the bounded walk, and the handshake still falls back.
    let mock: &[u8] = &[
        0, 0, 0, 0, 0, 0x23, 0x01, 0x00, 0x12, 0x00, 0x00, 0x00, 0x02, 0, 0, 0, 0,
    ];
    assert!(decode_response::<ApiVersions>(Bytes::from_static(mock), 0).is_err());
    assert_eq!(
        api_versions::decode(Bytes::from_static(mock), 4).unwrap().1,
        api_versions::ApiVersionsOutcome::RetryAt(0)
    );
    // OffsetFetch v5 with a huge partition count.
    let mut b = BytesMut::new();
    b.put_i32(1);
    b.put_i32(0); // throttle
    b.put_i32(1); // topics
    b.put_i16(1);
    b.put_u8(b't');
    b.put_i32(0x0fff_ffff);
    let e = decode_response::<OffsetFetch>(b.freeze(), 5).unwrap_err();
    assert!(e.to_string().contains("partitions count"), "{e}");
    // DescribeGroups v4 with one group "g" claiming 2^31 - 1 members in 4 bytes.
    let mut b = BytesMut::new();
    b.put_i32(1);
    b.put_i32(0); // throttle
    b.put_i32(1); // groups
    b.put_i16(0); // error
    for f in [&b"g"[..], b"Stable", b"consumer", b"range"] {
        b.put_i16(f.len() as i16);
        b.put_slice(f);
    }
    let at = b.len();
    b.put_i32(i32::MAX);
    b.put_i32(0);
    let e = decode_response::<DescribeGroups>(b.freeze(), 4).unwrap_err();
    assert_eq!(decode_position(&e), at, "{e}");
    assert!(
        e.to_string().contains("members count: 2147483647 elements"),
        "{e}"
    );
    // ... and v5 (flexible) with a compact member count of u32::MAX - 1.
    let mut b = BytesMut::new();
    b.put_i32(1);
    b.put_u8(0); // header tags
    b.put_i32(0); // throttle
    b.put_u8(2); // one group
    b.put_i16(0);
    b.put_slice(&[2, b'g', 1, 1, 1]); // "g", "", "", ""
    b.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let e = decode_response::<DescribeGroups>(b.freeze(), 5).unwrap_err();
    assert!(e.to_string().contains("members count"), "{e}");
}

#[test]
fn negative_lengths_are_refused() {
    // Topic name of length -2.
    let f = fetch_v4(1, &[0xff, 0xfe, 0, 0, 0, 0]);
    let e = fetch::decode(f, 4, &HashMap::new()).unwrap_err();
    assert_eq!(decode_position(&e), 12);
    assert!(e.to_string().contains("negative length -2"), "{e}");
    // A null topic name.
    let f = fetch_v4(1, &[0xff, 0xff, 0, 0, 0, 0]);
    let e = fetch::decode(f, 4, &HashMap::new()).unwrap_err();
    assert!(e.to_string().contains("null topic name"), "{e}");
    // Records of length -5 in partition 0 of topic "t".
    let mut p = vec![0, 1, b't', 0, 0, 0, 1];
    p.extend([0; 4 + 2 + 8 + 8]); // index, error, hw, lso
    p.extend([0, 0, 0, 0]); // no aborted transactions
    p.extend((-5i32).to_be_bytes());
    let f = fetch_v4(1, &p);
    let e = fetch::decode(f.clone(), 4, &HashMap::new()).unwrap_err();
    assert_eq!(decode_position(&e), 12 + 7 + 22 + 4);
    assert!(e.to_string().contains("records: negative length -5"), "{e}");
    assert_eq!(decode_response::<Fetch>(f, 4).unwrap_err(), e);
    // Negative topic count.
    let e = fetch::decode(fetch_v4(-3, &[]), 4, &HashMap::new()).unwrap_err();
    assert!(e.to_string().contains("negative length -3"), "{e}");
}

#[test]
fn topic_names_longer_than_kafka_allows_are_refused() {
    // Repeating a 32 KiB name per partition would make the view far larger than the frame.
    let mut p = vec![0x7f, 0xff];
    p.extend(std::iter::repeat_n(b'a', 0x7fff));
    p.extend([0, 0, 0, 0]);
    let e = fetch::decode(fetch_v4(1, &p), 4, &HashMap::new()).unwrap_err();
    assert!(e.to_string().contains("249-character limit"), "{e}");
}

#[test]
fn unknown_topic_ids_are_inconsistent() {
    let frame = data("fetch-v16-response.bin");
    let e = fetch::decode(frame, 16, &HashMap::new()).unwrap_err();
    assert!(matches!(e, ProtoError::Inconsistent { .. }), "{e:?}");
}

/// An API implemented outside kdirect-proto, for which it has no bounded walk, is refused
/// rather than handed to kafka-protocol unchecked (or read with another API's schema).
#[test]
fn apis_without_a_bounded_walk_are_refused() {
    use kafka_protocol::messages::{ApiKey, ListGroupsRequest, ListGroupsResponse};
    use kafka_protocol::protocol::VersionRange;
    struct ListGroups;
    impl Api for ListGroups {
        const KEY: ApiKey = ApiKey::ListGroups;
        const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };
        type Request = ListGroupsRequest;
        type Response = ListGroupsResponse;
    }
    let frame = encode_response::<ListGroups>(&ListGroupsResponse::default(), 1, 3)
        .unwrap()
        .slice(4..);
    let e = decode_response::<ListGroups>(frame, 1).unwrap_err();
    assert!(
        e.to_string().contains("no bounded reader for ListGroups"),
        "{e}"
    );
}

#[test]
fn versions_kdirect_does_not_speak_are_refused() {
    let frame = data("fetch-v16-response.bin");
    for v in [3, 18] {
        let e = fetch::decode(frame.clone(), v, &HashMap::new()).unwrap_err();
        assert!(matches!(e, ProtoError::VersionNotSpoken { .. }), "{e:?}");
        let e = decode_response::<Fetch>(frame.clone(), v).unwrap_err();
        assert!(matches!(e, ProtoError::VersionNotSpoken { .. }), "{e:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// The APIs decoded through kafka-protocol behind the bounded walk: the walk must accept every
// valid response at every version kdirect speaks.

mod walked {
    use super::*;
    use kafka_protocol::messages::api_versions_response::{
        ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
    };
    use kafka_protocol::messages::describe_groups_response::{
        DescribedGroup, DescribedGroupMember,
    };
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
    use kafka_protocol::messages::leave_group_response::MemberResponse;
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
        OffsetFetchResponseTopic, OffsetFetchResponseTopics,
    };
    use kafka_protocol::messages::{
        ApiVersionsResponse, DescribeGroupsResponse, FindCoordinatorResponse, GroupId,
        HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, OffsetCommitResponse,
        OffsetFetchResponse, SyncGroupResponse,
    };

    fn roundtrip<A: Api>(resp: &A::Response, version: i16, cid: i32) -> Result<(), TestCaseError>
    where
        A::Response: PartialEq + std::fmt::Debug,
    {
        let frame = encode_response::<A>(resp, version, cid).unwrap().slice(4..);
        let (got_cid, back) = decode_response::<A>(frame.clone(), version)
            .map_err(|e| TestCaseError::fail(format!("v{version}: {e}")))?;
        prop_assert_eq!(got_cid, cid);
        prop_assert_eq!(&back, resp);
        let cut = frame.len() * (cid.unsigned_abs() as usize % 1000) / 1000;
        let Err(e) = decode_response::<A>(frame.slice(..cut), version) else {
            return Err(TestCaseError::fail(format!(
                "v{version}: cut at {cut} decoded"
            )));
        };
        prop_assert!(decode_position(&e) <= cut);
        Ok(())
    }

    fn names() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec("[a-z]{1,12}", 0..3)
    }

    proptest! {
        #[test]
        fn api_versions(
            version in ApiVersions::VERSIONS.min..=ApiVersions::VERSIONS.max,
            keys in proptest::collection::vec((any::<i16>(), any::<i16>(), any::<i16>()), 0..6),
            throttle in any::<i32>(),
            features in names(),
            epoch in any::<i64>(),
            zk in any::<bool>(),
            cid in any::<i32>(),
        ) {
            let mut r = ApiVersionsResponse::default()
                .with_error_code(3)
                .with_api_keys(keys.iter().map(|(k, lo, hi)| ApiVersion::default().with_api_key(*k).with_min_version(*lo).with_max_version(*hi)).collect());
            if version >= 1 {
                r = r.with_throttle_time_ms(throttle);
            }
            if version >= 3 {
                r = r
                    .with_supported_features(features.iter().map(|f| SupportedFeatureKey::default().with_name(s(f)).with_min_version(1).with_max_version(2)).collect())
                    .with_finalized_features_epoch(epoch)
                    .with_finalized_features(features.iter().map(|f| FinalizedFeatureKey::default().with_name(s(f)).with_min_version_level(1).with_max_version_level(3)).collect())
                    .with_zk_migration_ready(zk);
            }
            roundtrip::<ApiVersions>(&r, version, cid)?;
        }

        #[test]
        fn find_coordinator(
            version in FindCoordinator::VERSIONS.min..=FindCoordinator::VERSIONS.max,
            coordinators in proptest::collection::vec(("[a-z]{0,10}", any::<i32>(), "[a-z.]{0,10}", any::<i32>(), any::<i16>(), proptest::option::of("[a-z ]{0,10}")), 0..3),
            throttle in any::<i32>(),
            cid in any::<i32>(),
        ) {
            let mut r = FindCoordinatorResponse::default();
            if version >= 1 {
                r = r.with_throttle_time_ms(throttle);
            }
            if version >= 4 {
                r = r.with_coordinators(coordinators.iter().map(|(k, id, h, p, e, m)| Coordinator::default()
                    .with_key(s(k)).with_node_id(BrokerId(*id)).with_host(s(h)).with_port(*p)
                    .with_error_code(*e).with_error_message(m.as_deref().map(s))).collect());
            } else if let Some((_, id, h, p, e, m)) = coordinators.first() {
                r = r.with_node_id(BrokerId(*id)).with_host(s(h)).with_port(*p).with_error_code(*e);
                if version >= 1 {
                    r = r.with_error_message(m.as_deref().map(s));
                }
            }
            roundtrip::<FindCoordinator>(&r, version, cid)?;
        }

        #[test]
        fn offset_commit(
            version in OffsetCommit::VERSIONS.min..=OffsetCommit::VERSIONS.max,
            topics in proptest::collection::vec(("[a-z]{1,12}", proptest::collection::vec((any::<i32>(), any::<i16>()), 0..4)), 0..3),
            throttle in any::<i32>(),
            cid in any::<i32>(),
        ) {
            let r = OffsetCommitResponse::default()
                .with_throttle_time_ms(if version >= 3 { throttle } else { 0 })
                .with_topics(topics.iter().map(|(n, ps)| OffsetCommitResponseTopic::default().with_name(TopicName(s(n)))
                    .with_partitions(ps.iter().map(|(i, e)| OffsetCommitResponsePartition::default().with_partition_index(*i).with_error_code(*e)).collect())).collect());
            roundtrip::<OffsetCommit>(&r, version, cid)?;
        }

        #[test]
        fn offset_fetch(
            version in OffsetFetch::VERSIONS.min..=OffsetFetch::VERSIONS.max,
            topics in proptest::collection::vec(("[a-z]{1,12}", proptest::collection::vec((any::<i32>(), any::<i64>(), any::<i32>(), proptest::option::of("[a-z]{0,10}"), any::<i16>()), 0..4)), 0..3),
            groups in 1usize..3,
            throttle in any::<i32>(),
            error in any::<i16>(),
            cid in any::<i32>(),
        ) {
            let mut r = OffsetFetchResponse::default().with_throttle_time_ms(if version >= 3 { throttle } else { 0 });
            if version >= 8 {
                r = r.with_groups((0..groups).map(|g| OffsetFetchResponseGroup::default()
                    .with_group_id(GroupId(s(&format!("g{g}"))))
                    .with_error_code(error)
                    .with_topics(topics.iter().map(|(n, ps)| OffsetFetchResponseTopics::default().with_name(TopicName(s(n)))
                        .with_partitions(ps.iter().map(|(i, o, e, m, err)| OffsetFetchResponsePartitions::default()
                            .with_partition_index(*i).with_committed_offset(*o).with_committed_leader_epoch(*e)
                            .with_metadata(m.as_deref().map(s)).with_error_code(*err)).collect())).collect())).collect());
            } else {
                r = r
                    .with_error_code(if version >= 2 { error } else { 0 })
                    .with_topics(topics.iter().map(|(n, ps)| OffsetFetchResponseTopic::default().with_name(TopicName(s(n)))
                        .with_partitions(ps.iter().map(|(i, o, e, m, err)| OffsetFetchResponsePartition::default()
                            .with_partition_index(*i).with_committed_offset(*o)
                            .with_committed_leader_epoch(if version >= 5 { *e } else { -1 })
                            .with_metadata(m.as_deref().map(s)).with_error_code(*err)).collect())).collect());
            }
            roundtrip::<OffsetFetch>(&r, version, cid)?;
        }

        #[test]
        fn join_group(
            version in JoinGroup::VERSIONS.min..=JoinGroup::VERSIONS.max,
            members in proptest::collection::vec(("[a-z0-9-]{0,12}", proptest::option::of("[a-z]{0,6}"), proptest::collection::vec(any::<u8>(), 0..12)), 0..4),
            protocol_type in proptest::option::of("[a-z]{0,8}"),
            protocol_name in proptest::option::of("[a-z]{0,8}"),
            skip in any::<bool>(),
            (throttle, error, generation) in (any::<i32>(), any::<i16>(), any::<i32>()),
            cid in any::<i32>(),
        ) {
            let r = JoinGroupResponse::default()
                .with_throttle_time_ms(if version >= 2 { throttle } else { 0 })
                .with_error_code(error)
                .with_generation_id(generation)
                .with_protocol_type(protocol_type.filter(|_| version >= 7).as_deref().map(s))
                .with_protocol_name(protocol_name.as_deref().map(s))
                .with_leader(s("leader"))
                .with_skip_assignment(skip && version >= 9)
                .with_member_id(s("me"))
                .with_members(members.iter().map(|(m, i, md)| JoinGroupResponseMember::default()
                    .with_member_id(s(m))
                    .with_group_instance_id(i.as_deref().filter(|_| version >= 5).map(s))
                    .with_metadata(Bytes::from(md.clone()))).collect());
            roundtrip::<JoinGroup>(&r, version, cid)?;
        }

        #[test]
        fn sync_group(
            version in SyncGroup::VERSIONS.min..=SyncGroup::VERSIONS.max,
            protocol_type in proptest::option::of("[a-z]{0,8}"),
            protocol_name in proptest::option::of("[a-z]{0,8}"),
            assignment in proptest::collection::vec(any::<u8>(), 0..20),
            (throttle, error) in (any::<i32>(), any::<i16>()),
            cid in any::<i32>(),
        ) {
            let r = SyncGroupResponse::default()
                .with_throttle_time_ms(if version >= 1 { throttle } else { 0 })
                .with_error_code(error)
                .with_protocol_type(protocol_type.filter(|_| version >= 5).as_deref().map(s))
                .with_protocol_name(protocol_name.filter(|_| version >= 5).as_deref().map(s))
                .with_assignment(Bytes::from(assignment));
            roundtrip::<SyncGroup>(&r, version, cid)?;
        }

        #[test]
        fn heartbeat(
            version in Heartbeat::VERSIONS.min..=Heartbeat::VERSIONS.max,
            (throttle, error) in (any::<i32>(), any::<i16>()),
            cid in any::<i32>(),
        ) {
            let r = HeartbeatResponse::default()
                .with_throttle_time_ms(if version >= 1 { throttle } else { 0 })
                .with_error_code(error);
            roundtrip::<Heartbeat>(&r, version, cid)?;
        }

        #[test]
        fn leave_group(
            version in LeaveGroup::VERSIONS.min..=LeaveGroup::VERSIONS.max,
            members in proptest::collection::vec(("[a-z0-9-]{0,12}", proptest::option::of("[a-z]{0,6}"), any::<i16>()), 0..4),
            (throttle, error) in (any::<i32>(), any::<i16>()),
            cid in any::<i32>(),
        ) {
            let mut r = LeaveGroupResponse::default()
                .with_throttle_time_ms(if version >= 1 { throttle } else { 0 })
                .with_error_code(error);
            if version >= 3 {
                r = r.with_members(members.iter().map(|(m, i, e)| MemberResponse::default()
                    .with_member_id(s(m))
                    .with_group_instance_id(i.as_deref().map(s))
                    .with_error_code(*e)).collect());
            }
            roundtrip::<LeaveGroup>(&r, version, cid)?;
        }

        #[test]
        fn describe_groups(
            version in DescribeGroups::VERSIONS.min..=DescribeGroups::VERSIONS.max,
            groups in proptest::collection::vec((
                "[a-z]{0,8}", any::<i16>(), proptest::option::of("[a-z ]{0,10}"), "[A-Za-z]{0,12}", "[a-z]{0,8}", any::<i32>(),
                proptest::collection::vec(("[a-z0-9-]{0,12}", proptest::option::of("[a-z]{0,6}"), "[a-z-]{0,8}", "[0-9./]{0,10}",
                    proptest::collection::vec(any::<u8>(), 0..12), proptest::collection::vec(any::<u8>(), 0..12)), 0..3)), 0..3),
            throttle in any::<i32>(),
            cid in any::<i32>(),
        ) {
            let r = DescribeGroupsResponse::default()
                .with_throttle_time_ms(if version >= 1 { throttle } else { 0 })
                .with_groups(groups.iter().map(|(g, e, msg, st, pt, ops, ms)| DescribedGroup::default()
                    .with_error_code(*e)
                    .with_error_message(msg.as_deref().filter(|_| version >= 6).map(s))
                    .with_group_id(GroupId(s(g)))
                    .with_group_state(s(st))
                    .with_protocol_type(s(pt))
                    .with_protocol_data(s("range"))
                    .with_authorized_operations(if version >= 3 { *ops } else { -2147483648 })
                    .with_members(ms.iter().map(|(m, i, c, h, md, a)| DescribedGroupMember::default()
                        .with_member_id(s(m))
                        .with_group_instance_id(i.as_deref().filter(|_| version >= 4).map(s))
                        .with_client_id(s(c))
                        .with_client_host(s(h))
                        .with_member_metadata(Bytes::from(md.clone()))
                        .with_member_assignment(Bytes::from(a.clone()))).collect())).collect());
            roundtrip::<DescribeGroups>(&r, version, cid)?;
            let frame = encode_response::<DescribeGroups>(&r, version, cid).unwrap().slice(4..);
            let view = describe_groups::view(&decode_response::<DescribeGroups>(frame, version).unwrap().1);
            prop_assert_eq!(view.len(), groups.len());
            for (g, (_, _, _, _, _, _, ms)) in view.iter().zip(&groups) {
                prop_assert_eq!(g.members.len(), ms.len());
            }
        }
    }
}
