//! Fuzzes an ApiVersions response frame through the handshake decoder the connection uses
//! (`api_versions::decode`, which also reads the UNSUPPORTED_VERSION answer in either shape),
//! then negotiates every API kdirect speaks against what it lists (`BrokerVersions`), and
//! checks that a response `decode_response` accepts re-encodes to itself.
//!
//! Input: one byte choosing the version (0–4, wrapping), then the frame body (without its size
//! prefix), as in `crates/proto/tests/data/api_versions-v*-response.bin`.
#![no_main]

use bytes::Bytes;
use kdirect_fuzz::{decode_and_round_trip, version};
use kdirect_proto::api::api_versions::{self, ApiVersions, ApiVersionsOutcome};
use kdirect_proto::api::fetch::Fetch;
use kdirect_proto::api::find_coordinator::FindCoordinator;
use kdirect_proto::api::list_offsets::ListOffsets;
use kdirect_proto::api::metadata::Metadata;
use kdirect_proto::api::offset_commit::OffsetCommit;
use kdirect_proto::api::offset_fetch::OffsetFetch;
use kdirect_proto::message::{check_version, Api};
use kdirect_proto::versions::BrokerVersions;
use libfuzzer_sys::fuzz_target;

fn negotiated<A: Api>(b: &BrokerVersions) {
    if let Ok(v) = b.negotiate::<A>() {
        assert!(
            check_version::<A>(v).is_ok(),
            "{:?}: negotiated v{v}, which kdirect does not speak",
            A::KEY
        );
        let r = b.range(A::KEY).expect("negotiated without a range");
        assert!(
            r.min <= v && v <= r.max,
            "{:?}: negotiated v{v} outside the broker's range",
            A::KEY
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v = version::<ApiVersions>(sel);
    match api_versions::decode(Bytes::copy_from_slice(frame), v) {
        Ok((_, ApiVersionsOutcome::Supported(resp))) => {
            let b = BrokerVersions::from_response(&resp);
            negotiated::<ApiVersions>(&b);
            negotiated::<Metadata>(&b);
            negotiated::<ListOffsets>(&b);
            negotiated::<Fetch>(&b);
            negotiated::<FindCoordinator>(&b);
            negotiated::<OffsetFetch>(&b);
            negotiated::<OffsetCommit>(&b);
        }
        Ok((_, ApiVersionsOutcome::RetryAt(retry))) => {
            assert!(retry < v, "RetryAt(v{retry}) does not go down from v{v}");
            assert!(retry >= 0, "RetryAt(v{retry}) below v0");
        }
        Err(e) => {
            std::hint::black_box(e.to_string());
        }
    }
    let _ = decode_and_round_trip::<ApiVersions>(frame, v);
});
