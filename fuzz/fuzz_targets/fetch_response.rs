//! Fuzzes a Fetch response frame end to end: kdirect_proto's response decoding (header and
//! body, via kafka-protocol) at a fuzzer-chosen version, the flattened view, then the record
//! decoder over every partition's `records`.
//!
//! Input: one byte choosing the version (4 + byte % 14, i.e. 4–17), then the frame body
//! (without its size prefix), as in `crates/proto/tests/data/fetch-v*-response.bin`.
#![no_main]

use std::collections::HashMap;

use bytes::Bytes;
use kdirect_engine::record::{DecodeOptions, RecordBatchReader};
use kdirect_proto::api::fetch::{view, Fetch};
use kdirect_proto::message::decode_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&v, frame)) = data.split_first() else {
        return;
    };
    let version = 4 + i16::from(v % 14);
    let Ok((_correlation_id, resp)) =
        decode_response::<Fetch>(Bytes::copy_from_slice(frame), version)
    else {
        return;
    };
    let Ok(fetched) = view(resp, version, &HashMap::new()) else {
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
