//! Golden frames from a real client (librdkafka 2.12.1) and broker (its mock cluster): see
//! `tests/data/README.md`. kdirect-proto must re-encode each request byte for byte and decode
//! each response.

use std::path::PathBuf;

use bytes::{Buf, Bytes};
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable};
use kdirect_proto::api::api_versions::{self, ApiVersions, ApiVersionsOutcome};
use kdirect_proto::api::fetch::{self, Fetch};
use kdirect_proto::api::find_coordinator::{self, FindCoordinator};
use kdirect_proto::api::list_offsets::{self, ListOffsets};
use kdirect_proto::api::metadata::{self, Metadata};
use kdirect_proto::api::offset_commit::{self, OffsetCommit};
use kdirect_proto::api::offset_fetch::{self, OffsetFetch};
use kdirect_proto::kafka_protocol;
use kdirect_proto::message::{decode_response, encode_request, peek_correlation_id, Api};
use kdirect_proto::ErrorCode;

fn data(name: &str) -> Bytes {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

/// Decodes a captured request, re-encodes it, and compares; returns the request, its version
/// and correlation id.
fn roundtrip_request<A: Api>(file: &str) -> (A::Request, i16, i32) {
    let frame = data(file);
    let mut b = frame.clone();
    let h = decode_request_header_from_buffer(&mut b).unwrap();
    assert_eq!(h.request_api_key, A::KEY as i16, "{file}");
    let body = A::Request::decode(&mut b, h.request_api_version).unwrap();
    assert_eq!(b.remaining(), 0, "{file}: trailing bytes");
    let client_id = h.client_id.as_ref().map(|c| c.to_string());
    let ours = encode_request::<A>(
        &body,
        h.request_api_version,
        h.correlation_id,
        client_id.as_deref(),
    )
    .unwrap();
    assert_eq!(&ours[4..], &frame[..], "{file}: re-encoding differs");
    (body, h.request_api_version, h.correlation_id)
}

fn response<A: Api>(file: &str, version: i16, cid: i32) -> A::Response {
    let frame = data(file);
    assert_eq!(peek_correlation_id(&frame), Some(cid), "{file}");
    let (got_cid, body) = decode_response::<A>(frame, version).unwrap();
    assert_eq!(got_cid, cid);
    body
}

#[test]
fn api_versions_v0_and_v3() {
    let (_, v, cid) = roundtrip_request::<ApiVersions>("api_versions-v0-request.bin");
    assert_eq!(v, 0);
    let (_, out) = api_versions::decode(data("api_versions-v0-response.bin"), 0).unwrap();
    assert_eq!(
        peek_correlation_id(&data("api_versions-v0-response.bin")),
        Some(cid)
    );
    let ApiVersionsOutcome::Supported(resp) = out else {
        panic!("v0 answer refused")
    };
    let versions = kdirect_proto::BrokerVersions::from_response(&resp);
    // librdkafka 2.12.1's mock: Fetch up to 16, ListOffsets up to 7 (KAFKA-NOTES.md).
    assert_eq!(versions.negotiate::<Fetch>().unwrap(), 16);
    assert_eq!(versions.negotiate::<ListOffsets>().unwrap(), 7);
    let (_, v3, _) = roundtrip_request::<ApiVersions>("api_versions-v3-request.bin");
    assert_eq!(v3, 3);
    let (_, out) = api_versions::decode(data("api_versions-v3-response.bin"), 3).unwrap();
    assert!(
        matches!(out, ApiVersionsOutcome::RetryAt(v) if v < 3),
        "{out:?}"
    );
}

#[test]
fn metadata_v9_and_v12() {
    for v in [9, 12] {
        let (req, version, cid) =
            roundtrip_request::<Metadata>(&format!("metadata-v{v}-request.bin"));
        assert_eq!(version, v);
        let resp = response::<Metadata>(&format!("metadata-v{v}-response.bin"), v, cid);
        let view = metadata::view(&resp);
        assert_eq!(view.brokers.len(), 1);
        if let Some(topics) = req.topics.filter(|t| !t.is_empty()) {
            assert_eq!(view.topics.len(), topics.len());
        }
    }
}

#[test]
fn list_offsets_v5_and_v7() {
    for v in [5, 7] {
        let (req, version, cid) =
            roundtrip_request::<ListOffsets>(&format!("list_offsets-v{v}-request.bin"));
        assert_eq!(version, v);
        let resp = response::<ListOffsets>(&format!("list_offsets-v{v}-response.bin"), v, cid);
        let offsets = list_offsets::view(&resp);
        assert_eq!(
            offsets.len(),
            req.topics.iter().map(|t| t.partitions.len()).sum::<usize>()
        );
        for o in &offsets {
            assert_eq!(o.error, ErrorCode::NONE);
            // The capture produced 5 records: earliest 0, latest 5.
            assert!(o.offset == 0 || o.offset == 5, "{o:?}");
        }
    }
}

#[test]
fn fetch_v11_and_v16() {
    for v in [11, 16] {
        let (req, version, cid) = roundtrip_request::<Fetch>(&format!("fetch-v{v}-request.bin"));
        assert_eq!(version, v);
        let resp = response::<Fetch>(&format!("fetch-v{v}-response.bin"), v, cid);
        // From v13 the request names topics by id: resolve them with the Metadata answer of
        // the same capture round (v12 with v16, v9 with v11).
        let (_, _, mcid) = roundtrip_request::<Metadata>(&format!(
            "metadata-v{}-request.bin",
            if v == 16 { 12 } else { 9 }
        ));
        let m = response::<Metadata>(
            &format!("metadata-v{}-response.bin", if v == 16 { 12 } else { 9 }),
            if v == 16 { 12 } else { 9 },
            mcid,
        );
        let names = metadata::view(&m)
            .topics
            .into_iter()
            .map(|t| (t.id, std::sync::Arc::from(t.name)))
            .collect();
        assert_eq!(req.topics.len(), 1);
        let view = fetch::view(resp, v, &names).unwrap();
        assert!(!view.partitions.is_empty());
        for p in &view.partitions {
            assert_eq!(p.error, ErrorCode::NONE);
            assert_eq!(p.high_watermark, 5);
            assert!(p.topic.starts_with("golden"), "{}", p.topic);
        }
    }
}

#[test]
fn find_coordinator_v1_and_v2() {
    for v in [1, 2] {
        let (req, version, cid) =
            roundtrip_request::<FindCoordinator>(&format!("find_coordinator-v{v}-request.bin"));
        assert_eq!(version, v);
        let resp =
            response::<FindCoordinator>(&format!("find_coordinator-v{v}-response.bin"), v, cid);
        let c = find_coordinator::view(&resp, req.key.as_str(), v).unwrap();
        assert_eq!(c.error, ErrorCode::NONE);
        assert!(c.port > 0);
        // The request builder writes the same bytes for the same group at this version.
        assert_eq!(find_coordinator::request(req.key.as_str(), v).key, req.key);
    }
}

#[test]
fn offset_commit_v7_and_v9() {
    for v in [7, 9] {
        let (req, version, cid) =
            roundtrip_request::<OffsetCommit>(&format!("offset_commit-v{v}-request.bin"));
        assert_eq!(version, v);
        let resp = response::<OffsetCommit>(&format!("offset_commit-v{v}-response.bin"), v, cid);
        let results = offset_commit::view(&resp);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].2, ErrorCode::NONE);
        assert_eq!(req.topics[0].partitions[0].committed_offset, 5);
    }
}

#[test]
fn offset_fetch_v5_and_v6() {
    for v in [5, 6] {
        let (_, version, cid) =
            roundtrip_request::<OffsetFetch>(&format!("offset_fetch-v{v}-request.bin"));
        assert_eq!(version, v);
        let resp = response::<OffsetFetch>(&format!("offset_fetch-v{v}-response.bin"), v, cid);
        let (err, parts) = offset_fetch::view(&resp, v);
        assert_eq!(err, ErrorCode::NONE);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].offset, 5);
    }
}
