//! Fuzzes a Fetch response frame end to end: kdirect_proto's bounded decoder
//! (`fetch::decode`) at a fuzzer-chosen version, checked against kafka-protocol's decoder plus
//! `fetch::view` (`decode_response`, whose bounded walk runs first) wherever both accept the
//! frame, then the record decoder over every partition's `records`.
//!
//! Input: one byte choosing the version (4 + byte % 14, i.e. 4–17), then the frame body
//! (without its size prefix), as in `crates/proto/tests/data/fetch-v*-response.bin`. From v13
//! topic ids resolve through a fixed map: the golden frames' topic id and the id of all zeros.
//!
//! Run with `-malloc_limit_mb` well below the default: an allocation sized from the wire
//! rather than the input's length is the bug this target is for.
#![no_main]

use std::collections::HashMap;

use bytes::Bytes;
use kdirect_engine::record::{DecodeOptions, RecordBatchReader};
use kdirect_proto::api::fetch::{self, Fetch};
use kdirect_proto::message::decode_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&v, frame)) = data.split_first() else {
        return;
    };
    let version = 4 + i16::from(v % 14);
    let frame = Bytes::copy_from_slice(frame);
    let names: HashMap<[u8; 16], std::sync::Arc<str>> = [
        ([0; 16], "zero".into()),
        (
            [
                0x66, 0x55, 0x45, 0x3f, 0x52, 0x5f, 0x43, 0x11, 0xaf, 0x20, 0x4f, 0x6e, 0xdc, 0x76,
                0x1b, 0x7a,
            ],
            "golden1".into(),
        ),
    ]
    .into_iter()
    .collect();
    let ours = fetch::decode(frame.clone(), version, &names);
    let theirs = decode_response::<Fetch>(frame, version)
        .and_then(|(cid, resp)| Ok((cid, fetch::view(resp, version, &names)?)));
    if let (Ok(ours), Ok(theirs)) = (&ours, &theirs) {
        assert_eq!(ours, theirs, "fetch::decode and kafka-protocol disagree");
    }
    let Ok((_, fetched)) = ours else {
        return;
    };
    for p in fetched.partitions {
        let mut reader = RecordBatchReader::new(
            p.records,
            DecodeOptions::new()
                .check_crc(false)
                .max_decompressed(1 << 20),
        );
        while let Ok(Some(batch)) = reader.next_batch() {
            if let Ok(records) = reader.records(&batch) {
                for r in records.flatten() {
                    std::hint::black_box((r.key(), r.value(), r.headers().count()));
                }
            }
        }
    }
});
