//! Every version kdirect claims for an API must encode what production builds, whatever the
//! inputs: the request builders, not their callers, drop or refuse what a version cannot carry.
//! (Found by use: against a broker offering Metadata v1–v3 every command failed with "a field
//! is set that is not available on the selected protocol version", because the builder set
//! `allow_auto_topic_creation`, a v4+ field, and the round-trip test only ever fed it
//! version-appropriate values.) Each request is decoded back by kafka-protocol's broker side
//! at the same version.

use bytes::Buf;
use bytes::Bytes;
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};
use kdirect_proto::api::api_versions::{self, ApiVersions};
use kdirect_proto::api::describe_groups::{self, DescribeGroups};
use kdirect_proto::api::fetch::{self, Fetch, FetchParams, PartitionFetch, TopicFetch};
use kdirect_proto::api::find_coordinator::{self, FindCoordinator};
use kdirect_proto::api::heartbeat::{self, Heartbeat};
use kdirect_proto::api::join_group::{self, JoinGroup, JoinParams};
use kdirect_proto::api::leave_group::{self, LeaveGroup};
use kdirect_proto::api::list_offsets::{self, ListOffsets, OffsetQuery, OffsetSpec};
use kdirect_proto::api::metadata::{self, Metadata};
use kdirect_proto::api::offset_commit::{self, CommitEntry, OffsetCommit};
use kdirect_proto::api::offset_fetch::{self, OffsetFetch};
use kdirect_proto::api::sasl_authenticate::{self, SaslAuthenticate};
use kdirect_proto::api::sasl_handshake::{self, SaslHandshake};
use kdirect_proto::api::sync_group::{self, SyncGroup};
use kdirect_proto::kafka_protocol;
use kdirect_proto::message::{encode_request, Api};
use kdirect_proto::IsolationLevel;
use proptest::prelude::*;

fn roundtrip<A: Api>(req: &A::Request, version: i16) -> A::Request {
    let frame = encode_request::<A>(req, version, 7, Some("kdirect"))
        .unwrap_or_else(|e| panic!("{:?} v{version} does not encode: {e}", A::KEY));
    let mut b = frame.slice(4..);
    let h = decode_request_header_from_buffer(&mut b).unwrap();
    assert_eq!(h.request_api_version, version);
    let back = A::Request::decode(&mut b, version).unwrap();
    assert_eq!(b.remaining(), 0);
    back
}

fn spec() -> impl Strategy<Value = OffsetSpec> {
    prop_oneof![
        Just(OffsetSpec::Earliest),
        Just(OffsetSpec::Latest),
        Just(OffsetSpec::MaxTimestamp),
        (0i64..4_000_000_000_000).prop_map(OffsetSpec::Timestamp),
    ]
}

fn isolation() -> impl Strategy<Value = IsolationLevel> {
    prop_oneof![
        Just(IsolationLevel::ReadUncommitted),
        Just(IsolationLevel::ReadCommitted)
    ]
}

#[test]
fn metadata_encodes_at_every_claimed_version() {
    for version in Metadata::VERSIONS.min..=Metadata::VERSIONS.max {
        for topics in [None, Some(&["a", "events"][..])] {
            let back = roundtrip::<Metadata>(&metadata::request(topics, version), version);
            assert_eq!(back.topics.map(|t| t.len()), topics.map(<[&str]>::len));
            if version >= metadata::FIRST_AUTO_CREATE_VERSION {
                assert!(
                    !back.allow_auto_topic_creation,
                    "v{version} asks not to create"
                );
            }
        }
    }
}

#[test]
fn api_versions_and_find_coordinator_encode_at_every_claimed_version() {
    for version in ApiVersions::VERSIONS.min..=ApiVersions::VERSIONS.max {
        roundtrip::<ApiVersions>(&api_versions::request(), version);
    }
    for version in FindCoordinator::VERSIONS.min..=FindCoordinator::VERSIONS.max {
        let back = roundtrip::<FindCoordinator>(&find_coordinator::request("g", version), version);
        if version >= 4 {
            assert_eq!(back.coordinator_keys.len(), 1);
        } else {
            assert_eq!(back.key.as_str(), "g");
        }
    }
}

proptest! {
    #[test]
    fn list_offsets_encodes_or_refuses_by_name(
        version in ListOffsets::VERSIONS.min..=ListOffsets::VERSIONS.max,
        iso in isolation(),
        queries in proptest::collection::vec((0i32..100, spec(), -1i32..50), 1..6),
    ) {
        let qs: Vec<OffsetQuery> = queries.iter().map(|(p, s, e)| OffsetQuery {
            partition: *p, spec: *s, current_leader_epoch: *e,
        }).collect();
        let max_ts = qs.iter().any(|q| q.spec == OffsetSpec::MaxTimestamp);
        match list_offsets::request(iso, &[("events", qs.clone())], version) {
            Ok(req) => {
                prop_assert!(version >= 2 || iso == IsolationLevel::ReadUncommitted);
                prop_assert!(version >= 7 || !max_ts);
                let back = roundtrip::<ListOffsets>(&req, version);
                if version >= 2 {
                    prop_assert_eq!(back.isolation_level, iso.as_i8());
                }
                let epochs: Vec<i32> = back.topics[0].partitions.iter().map(|p| p.current_leader_epoch).collect();
                let want: Vec<i32> = qs.iter().map(|q| if version >= 4 { q.current_leader_epoch } else { -1 }).collect();
                prop_assert_eq!(epochs, want);
            }
            Err(e) => {
                prop_assert!(
                    (version < 2 && iso == IsolationLevel::ReadCommitted) || (version < 7 && max_ts),
                    "v{} refused without cause: {}", version, e
                );
                prop_assert!(e.to_string().contains("ListOffsets"), "{}", e);
            }
        }
    }

    #[test]
    fn offset_commit_encodes_at_every_claimed_version(
        version in OffsetCommit::VERSIONS.min..=OffsetCommit::VERSIONS.max,
        entries in proptest::collection::vec((0i32..100, 0i64..i64::MAX / 2, -1i32..50), 1..6),
    ) {
        let es: Vec<CommitEntry> = entries.iter().map(|(p, o, e)| CommitEntry {
            partition: *p, offset: *o, leader_epoch: *e, metadata: Some("kdirect:batch=3".into()),
        }).collect();
        let back = roundtrip::<OffsetCommit>(&offset_commit::request("g", &[("events", es.clone())], version), version);
        let got: Vec<(i64, i32)> = back.topics[0].partitions.iter().map(|p| (p.committed_offset, p.committed_leader_epoch)).collect();
        let want: Vec<(i64, i32)> = es.iter().map(|e| (e.offset, if version >= 6 { e.leader_epoch } else { -1 })).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn offset_fetch_encodes_at_every_claimed_version(
        version in OffsetFetch::VERSIONS.min..=OffsetFetch::VERSIONS.max,
        parts in proptest::collection::vec(0i32..100, 1..6),
    ) {
        roundtrip::<OffsetFetch>(&offset_fetch::request("g", &[("events", parts)], version), version);
    }

    #[test]
    fn fetch_encodes_at_every_claimed_version(
        version in Fetch::VERSIONS.min..=Fetch::VERSIONS.max,
        iso in isolation(),
        parts in proptest::collection::vec((0i32..64, 0i64..i64::MAX / 2, 1i32..10_000_000, -1i32..50), 1..6),
    ) {
        let mut params = FetchParams::default();
        params.isolation = iso;
        let topics = vec![TopicFetch {
            name: "events".into(),
            id: [7; 16],
            partitions: parts.iter().map(|(p, o, m, e)| PartitionFetch {
                partition: *p, fetch_offset: *o, partition_max_bytes: *m, current_leader_epoch: *e,
                last_fetched_epoch: e - 1,
            }).collect(),
        }];
        let back = roundtrip::<Fetch>(&fetch::request(&params, &topics, version).unwrap(), version);
        prop_assert_eq!(back.isolation_level, iso.as_i8());
        // The last fetched epoch (KIP-320) is carried from v12 on, and -1 below it.
        for (sent, (_, _, _, e)) in back.topics[0].partitions.iter().zip(&parts) {
            let want = if version >= fetch::FIRST_FLEXIBLE_VERSION { e - 1 } else { -1 };
            prop_assert_eq!(sent.last_fetched_epoch, want);
        }
    }
}

#[test]
fn sasl_requests_encode_at_every_claimed_version() {
    for version in SaslHandshake::VERSIONS.min..=SaslHandshake::VERSIONS.max {
        let back = roundtrip::<SaslHandshake>(&sasl_handshake::request("SCRAM-SHA-512"), version);
        assert_eq!(back.mechanism.as_str(), "SCRAM-SHA-512");
    }
    for version in SaslAuthenticate::VERSIONS.min..=SaslAuthenticate::VERSIONS.max {
        let token = b"n,,n=alice,r=nonce".to_vec();
        let back =
            roundtrip::<SaslAuthenticate>(&sasl_authenticate::request(token.clone()), version);
        assert_eq!(&back.auth_bytes[..], &token[..]);
    }
}

proptest! {
    /// The group protocol's requests encode at every version whatever the optional inputs:
    /// the builders drop what a version cannot carry (rebalance timeout below v1, instance id
    /// below v5, reason below v8 for JoinGroup; instance id below v3 and protocol type and name
    /// below v5 for SyncGroup; instance id below v3 for Heartbeat; LeaveGroup's single member id
    /// below v3, its members array from v3 and reason from v5).
    #[test]
    fn group_requests_encode_at_every_claimed_version(
        jv in JoinGroup::VERSIONS.min..=JoinGroup::VERSIONS.max,
        sv in SyncGroup::VERSIONS.min..=SyncGroup::VERSIONS.max,
        hv in Heartbeat::VERSIONS.min..=Heartbeat::VERSIONS.max,
        lv in LeaveGroup::VERSIONS.min..=LeaveGroup::VERSIONS.max,
        instance in proptest::option::of("[a-z0-9-]{1,10}"),
        reason in proptest::option::of("[a-z ]{0,20}"),
        protocol in proptest::option::of("[a-z]{1,10}"),
        member in "[a-z0-9-]{0,10}",
        generation in any::<i32>(),
        metadata in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let protocols = [("range", Bytes::from(metadata.clone())), ("cooperative-sticky", Bytes::new())];
        let p = JoinParams {
            group: "g",
            session_timeout_ms: 45_000,
            rebalance_timeout_ms: 300_000,
            member_id: &member,
            group_instance_id: instance.as_deref(),
            protocol_type: "consumer",
            protocols: &protocols,
            reason: reason.as_deref(),
        };
        let back = roundtrip::<JoinGroup>(&join_group::request(&p, jv), jv);
        prop_assert_eq!(back.rebalance_timeout_ms, if jv >= 1 { 300_000 } else { -1 });
        prop_assert_eq!(back.group_instance_id.as_deref(), instance.as_deref().filter(|_| jv >= 5));
        prop_assert_eq!(back.reason.as_deref(), reason.as_deref().filter(|_| jv >= 8));
        prop_assert_eq!(back.protocols.len(), 2);
        prop_assert_eq!(&back.protocols[0].metadata[..], &metadata[..]);

        let assignments = [(member.as_str(), Bytes::from(metadata.clone()))];
        let back = roundtrip::<SyncGroup>(&sync_group::request(
            "g", generation, &member, instance.as_deref(), Some("consumer"), protocol.as_deref(), &assignments, sv), sv);
        prop_assert_eq!(back.generation_id, generation);
        prop_assert_eq!(back.group_instance_id.as_deref(), instance.as_deref().filter(|_| sv >= 3));
        prop_assert_eq!(back.protocol_name.as_deref(), protocol.as_deref().filter(|_| sv >= 5));
        prop_assert_eq!(&back.assignments[0].assignment[..], &metadata[..]);

        let back = roundtrip::<Heartbeat>(&heartbeat::request("g", generation, &member, instance.as_deref(), hv), hv);
        prop_assert_eq!(back.group_instance_id.as_deref(), instance.as_deref().filter(|_| hv >= 3));

        let back = roundtrip::<LeaveGroup>(&leave_group::request("g", &member, instance.as_deref(), reason.as_deref(), lv), lv);
        if lv >= 3 {
            prop_assert_eq!(back.members.len(), 1);
            prop_assert_eq!(back.members[0].member_id.as_str(), member.as_str());
            prop_assert_eq!(back.members[0].group_instance_id.as_deref(), instance.as_deref());
            prop_assert_eq!(back.members[0].reason.as_deref(), reason.as_deref().filter(|_| lv >= 5));
        } else {
            prop_assert_eq!(back.member_id.as_str(), member.as_str());
        }
    }
}

#[test]
fn describe_groups_encodes_at_every_claimed_version() {
    for version in DescribeGroups::VERSIONS.min..=DescribeGroups::VERSIONS.max {
        for groups in [&[][..], &["g"][..], &["g", "other-group"][..]] {
            let back =
                roundtrip::<DescribeGroups>(&describe_groups::request(groups, version), version);
            let names: Vec<&str> = back.groups.iter().map(|g| g.as_str()).collect();
            assert_eq!(names, groups);
            assert!(!back.include_authorized_operations);
        }
    }
}
