//! Fuzzes the record-batch decoder (kdirect_engine::record) over arbitrary `records` bytes.
//!
//! Input: one flags byte, then the records bytes. Flags: bit 0 checks CRCs (off by default so
//! the fuzzer gets past the checksum into the records and codecs), bit 1 read_committed with an
//! aborted transaction for producer ids 0..4, bit 2 a fetch offset of 1, bit 3 `until` = 5.
//! Every batch and record is walked and touched; the decompressed-size cap is 1 MiB.
#![no_main]

use bytes::Bytes;
use kdirect_engine::record::{
    AbortedTransaction, DecodeOptions, IsolationLevel, RecordBatchReader,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, records)) = data.split_first() else {
        return;
    };
    let mut opts = DecodeOptions::new()
        .check_crc(flags & 1 != 0)
        .max_decompressed(1 << 20);
    if flags & 2 != 0 {
        opts = opts.isolation(IsolationLevel::ReadCommitted);
    }
    if flags & 4 != 0 {
        opts = opts.fetch_offset(1);
    }
    if flags & 8 != 0 {
        opts = opts.until(5);
    }
    let aborted = (0..4).map(|pid| AbortedTransaction {
        producer_id: pid,
        first_offset: pid,
    });
    let mut reader = RecordBatchReader::new(Bytes::copy_from_slice(records), opts)
        .with_aborted_transactions(aborted);
    let mut sum = 0usize;
    while let Ok(Some(batch)) = reader.next_batch() {
        sum = sum.wrapping_add(batch.header().record_count as usize);
        let Ok(records) = reader.records(&batch) else {
            continue;
        };
        for r in records {
            let Ok(r) = r else { break };
            sum = sum
                .wrapping_add(r.key().map_or(0, <[u8]>::len))
                .wrapping_add(r.value().map_or(0, <[u8]>::len))
                .wrapping_add(r.offset() as usize);
            for h in r.headers() {
                sum = sum.wrapping_add(h.key().len() + h.value().map_or(0, <[u8]>::len));
            }
        }
    }
    let _ = (reader.next_offset(), reader.tail());
    std::hint::black_box(sum);
});
