//! Decoder tests: kafka-protocol's encoder (the incumbent) → kdirect's decoder, a small
//! hand encoder for what kafka-protocol cannot write (duplicate header keys, malformed records),
//! read_committed cases checked against the Java client's algorithm, and hostile input.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as KpCompression, Record as KpRecord, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType as KpTs,
};
use proptest::prelude::*;

use super::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// What a decoded record is compared against.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plain {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn plain(r: &Record<'_>) -> Plain {
    Plain {
        offset: r.offset(),
        timestamp: r.timestamp(),
        key: r.key().map(<[u8]>::to_vec),
        value: r.value().map(<[u8]>::to_vec),
        headers: r
            .headers()
            .map(|h| (h.key().to_vec(), h.value().map(<[u8]>::to_vec)))
            .collect(),
    }
}

fn kp_record(offset: i64, ts: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> KpRecord {
    KpRecord {
        transactional: false,
        control: false,
        partition_leader_epoch: 3,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: KpTs::Creation,
        offset,
        sequence: offset as i32,
        timestamp: ts,
        key: key.map(Bytes::copy_from_slice),
        value: value.map(Bytes::copy_from_slice),
        headers: IndexMap::new(),
        delete_horizon: false,
    }
}

fn kp_plain(r: &KpRecord) -> Plain {
    Plain {
        offset: r.offset,
        timestamp: r.timestamp,
        key: r.key.as_ref().map(|b| b.to_vec()),
        value: r.value.as_ref().map(|b| b.to_vec()),
        headers: r
            .headers
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_ref().map(|b| b.to_vec())))
            .collect(),
    }
}

fn kp_codec(c: Compression) -> KpCompression {
    match c {
        Compression::None => KpCompression::None,
        Compression::Gzip => KpCompression::Gzip,
        Compression::Snappy => KpCompression::Snappy,
        Compression::Lz4 => KpCompression::Lz4,
        Compression::Zstd => KpCompression::Zstd,
    }
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn encode(records: &[KpRecord], c: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: kp_codec(c),
        },
    )
    .unwrap();
    buf.freeze()
}

/// Every data record the reader returns, in order.
fn read_all(
    buf: Bytes,
    opts: DecodeOptions,
) -> Result<(Vec<Plain>, RecordBatchReader), DecodeError> {
    read_all_with(buf, opts, &[])
}

fn read_all_with(
    buf: Bytes,
    opts: DecodeOptions,
    aborted: &[AbortedTransaction],
) -> Result<(Vec<Plain>, RecordBatchReader), DecodeError> {
    let mut reader =
        RecordBatchReader::new(buf, opts).with_aborted_transactions(aborted.iter().copied());
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch()? {
        for r in reader.records(&batch)? {
            out.push(plain(&r?));
        }
    }
    Ok((out, reader))
}

/// A hand-written batch: records given as already-encoded bodies (what follows the length).
struct RawBatch {
    base_offset: i64,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    producer_id: i64,
    record_count: i32,
    records: Vec<u8>,
}

fn zz(v: i64, out: &mut Vec<u8>) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn field(b: Option<&[u8]>, out: &mut Vec<u8>) {
    match b {
        None => zz(-1, out),
        Some(b) => {
            zz(b.len() as i64, out);
            out.extend_from_slice(b);
        }
    }
}

/// Encodes one record (length prefix included).
fn raw_record(
    ts_delta: i64,
    off_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) -> Vec<u8> {
    let mut body = vec![0u8];
    zz(ts_delta, &mut body);
    zz(i64::from(off_delta), &mut body);
    field(key, &mut body);
    field(value, &mut body);
    zz(headers.len() as i64, &mut body);
    for (k, v) in headers {
        field(Some(k), &mut body);
        field(*v, &mut body);
    }
    let mut out = Vec::new();
    zz(body.len() as i64, &mut out);
    out.extend_from_slice(&body);
    out
}

impl RawBatch {
    fn new(base_offset: i64, records: Vec<Vec<u8>>) -> RawBatch {
        RawBatch {
            base_offset,
            attributes: 0,
            last_offset_delta: records.len() as i32 - 1,
            base_timestamp: 1_700_000_000_000,
            producer_id: -1,
            record_count: records.len() as i32,
            records: records.concat(),
        }
    }

    fn compressed(mut self, c: Compression) -> RawBatch {
        self.records = compress(c, &self.records);
        self.attributes = (self.attributes & !7) | c.id_for_test();
        self
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.base_offset.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes()); // length, filled below
        b.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes()); // crc, filled below
        b.extend_from_slice(&self.attributes.to_be_bytes());
        b.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        b.extend_from_slice(&self.base_timestamp.to_be_bytes());
        b.extend_from_slice(&self.base_timestamp.to_be_bytes());
        b.extend_from_slice(&self.producer_id.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&self.record_count.to_be_bytes());
        b.extend_from_slice(&self.records);
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }
}

impl Compression {
    fn id_for_test(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// Compresses with the codec crates directly (snappy in the xerial framing).
fn compress(c: Compression, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match c {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Compression::Snappy => {
            let mut x = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
            for chunk in data.chunks(32 * 1024) {
                let z = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
                x.extend_from_slice(&(z.len() as u32).to_be_bytes());
                x.extend_from_slice(&z);
            }
            x
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Compression::Zstd => zstd::bulk::compress(data, 3).unwrap(),
    }
}

// ---------------------------------------------------------------------------------------------
// Basic decoding

#[test]
fn decodes_kafka_protocol_batches_in_every_codec() {
    let mut records: Vec<KpRecord> = (0..50)
        .map(|i| {
            let key = (i % 3 != 0).then(|| format!("key-{i}").into_bytes());
            let value = (i % 7 != 0).then(|| vec![i as u8; i * 10]);
            kp_record(
                100 + i as i64,
                1_700_000_000_000 + i as i64 * 3,
                key.as_deref(),
                value.as_deref(),
            )
        })
        .collect();
    records[5].headers.insert(
        StrBytes::from_static_str("h1"),
        Some(Bytes::from_static(b"v1")),
    );
    records[5]
        .headers
        .insert(StrBytes::from_static_str("h2"), None);
    for c in CODECS {
        let buf = encode(&records, c);
        let (got, reader) = read_all(buf.clone(), DecodeOptions::new()).unwrap();
        let want: Vec<Plain> = records.iter().map(kp_plain).collect();
        assert_eq!(got, want, "{c}");
        assert_eq!(reader.next_offset(), 150);
        assert_eq!(reader.tail(), Some(Tail::Complete));
        let batch = Batches::new(buf, true).next().unwrap().unwrap();
        assert_eq!(batch.header().compression, c);
        assert_eq!(batch.header().record_count, 50);
        assert_eq!(batch.header().base_offset, 100);
        assert_eq!(batch.header().last_offset(), 149);
        assert_eq!(batch.header().partition_leader_epoch, 3);
    }
}

#[test]
fn duplicate_header_keys_survive_in_order_in_every_codec() {
    let rec = raw_record(
        5,
        0,
        Some(b"k"),
        None,
        &[
            (b"a", Some(b"1")),
            (b"b", None),
            (b"a", Some(b"2")),
            (b"a", Some(b"")),
        ],
    );
    for c in CODECS {
        let buf = Bytes::from(RawBatch::new(7, vec![rec.clone()]).compressed(c).encode());
        let (got, _) = read_all(buf, DecodeOptions::new()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].offset, 7);
        assert_eq!(got[0].timestamp, 1_700_000_000_005);
        assert_eq!(got[0].value, None);
        assert_eq!(
            got[0].headers,
            vec![
                (b"a".to_vec(), Some(b"1".to_vec())),
                (b"b".to_vec(), None),
                (b"a".to_vec(), Some(b"2".to_vec())),
                (b"a".to_vec(), Some(vec![])),
            ]
        );
    }
}

#[test]
fn uncompressed_records_borrow_from_the_input() {
    let buf = encode(
        &[kp_record(0, 1, Some(b"key"), Some(b"value"))],
        Compression::None,
    );
    let batch = Batches::new(buf.clone(), true).next().unwrap().unwrap();
    let mut scratch = Scratch::new();
    let r = batch
        .records(&mut scratch, usize::MAX)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let range = buf.as_ptr_range();
    assert!(range.contains(&r.key().unwrap().as_ptr()));
    assert!(range.contains(&r.value().unwrap().as_ptr()));
    assert!(scratch.inflated().is_empty());
}

#[test]
fn log_append_time_uses_the_max_timestamp() {
    let mut b = RawBatch::new(
        0,
        vec![
            raw_record(1, 0, None, None, &[]),
            raw_record(2, 1, None, None, &[]),
        ],
    );
    b.attributes |= 0x08;
    let mut bytes = b.encode();
    // max timestamp at 35..43
    bytes[35..43].copy_from_slice(&42i64.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let (got, _) = read_all(Bytes::from(bytes), DecodeOptions::new()).unwrap();
    assert_eq!(
        got.iter().map(|p| p.timestamp).collect::<Vec<_>>(),
        vec![42, 42]
    );
}

#[test]
fn empty_batch_decodes_to_no_records_and_advances() {
    let mut b = RawBatch::new(10, vec![]);
    b.last_offset_delta = 4; // compaction removed every record
    let (got, reader) = read_all(Bytes::from(b.encode()), DecodeOptions::new()).unwrap();
    assert!(got.is_empty());
    assert_eq!(reader.next_offset(), 15);
}

// ---------------------------------------------------------------------------------------------
// CRC

#[test]
fn crc_mismatch_is_a_typed_error_with_offset_and_position_and_skippable() {
    let first = encode(&[kp_record(0, 0, None, Some(b"aaaa"))], Compression::None);
    let second = encode(&[kp_record(1, 0, None, Some(b"bbbb"))], Compression::None);
    let mut buf = [first.as_ref(), second.as_ref()].concat();
    let last = buf.len() - 2; // inside the second batch's value
    buf[last] ^= 0x01;
    let buf = Bytes::from(buf);
    let err = read_all(buf.clone(), DecodeOptions::new()).unwrap_err();
    assert!(
        matches!(err.kind(), DecodeErrorKind::CrcMismatch { .. }),
        "{err}"
    );
    assert_eq!(err.base_offset(), Some(1));
    assert_eq!(err.position(), first.len());
    assert!(err.to_string().contains("CRC32C mismatch"), "{err}");
    let (got, _) = read_all(buf, DecodeOptions::new().check_crc(false)).unwrap();
    assert_eq!(got[1].value.as_deref(), Some(&b"bbbc"[..]));
}

// ---------------------------------------------------------------------------------------------
// Fetch semantics

fn three_batches() -> Bytes {
    // Offsets 0-4, 5-9, 10-14, three producers so the encoder starts new batches.
    let mut out = BytesMut::new();
    for b in 0..3i64 {
        let recs: Vec<KpRecord> = (0..5)
            .map(|i| {
                let mut r = kp_record(b * 5 + i, 1000, None, Some(b"v"));
                r.producer_id = b;
                r.sequence = i as i32;
                r
            })
            .collect();
        out.extend_from_slice(&encode(&recs, Compression::None));
    }
    out.freeze()
}

fn offsets(v: &[Plain]) -> Vec<i64> {
    v.iter().map(|p| p.offset).collect()
}

#[test]
fn skips_below_fetch_offset_and_stops_before_until() {
    let buf = three_batches();
    let (got, r) = read_all(buf.clone(), DecodeOptions::new().fetch_offset(7)).unwrap();
    assert_eq!(offsets(&got), (7..15).collect::<Vec<_>>());
    assert_eq!(r.next_offset(), 15);
    let (got, r) = read_all(buf.clone(), DecodeOptions::new().fetch_offset(3).until(12)).unwrap();
    assert_eq!(offsets(&got), (3..12).collect::<Vec<_>>());
    assert_eq!(r.next_offset(), 12);
    let (got, r) = read_all(buf.clone(), DecodeOptions::new().until(10)).unwrap();
    assert_eq!(offsets(&got), (0..10).collect::<Vec<_>>());
    assert_eq!(r.next_offset(), 10);
    assert!(r.reached_until());
    let (got, r) = read_all(buf, DecodeOptions::new().fetch_offset(20)).unwrap();
    assert!(got.is_empty());
    assert_eq!(r.next_offset(), 20);
}

/// A gap (a compacted log): the first batch at or past `until` completes the range with the
/// records it has, moves the position to `until`, and is kept for the next range.
#[test]
fn a_batch_past_until_ends_the_range_across_a_gap_and_is_kept() {
    let buf = three_batches();
    // Fetch at 5, range [5, 8): batch 5-9 straddles; nothing is past until.
    let (got, mut r) =
        read_all(buf.clone(), DecodeOptions::new().fetch_offset(5).until(8)).unwrap();
    assert_eq!(offsets(&got), vec![5, 6, 7]);
    assert_eq!(r.next_offset(), 8);
    assert_eq!(
        r.take_past_until().map(|b| b.header().base_offset),
        Some(10)
    );
    // Only the batch at 10 is in the buffer (0-9 compacted away): [0, 10) is empty and ends.
    let tail = buf.slice(2 * buf.len() / 3..);
    let (got, mut r) = read_all(tail.clone(), DecodeOptions::new().until(10)).unwrap();
    assert!(got.is_empty());
    assert_eq!(r.next_offset(), 10);
    assert!(r.reached_until());
    assert_eq!(
        r.take_past_until().map(|b| b.header().base_offset),
        Some(10)
    );
    // A range below a gap that ends before it: [3, 7) from a buffer starting at 10.
    let (got, r) = read_all(tail, DecodeOptions::new().fetch_offset(3).until(7)).unwrap();
    assert!(got.is_empty());
    assert_eq!(r.next_offset(), 7);
}

#[test]
fn truncated_final_batch_is_not_an_error_at_any_cut() {
    let buf = three_batches();
    let batch_len = buf.len() / 3;
    for cut in 0..=buf.len() {
        let (got, r) = read_all(buf.slice(..cut), DecodeOptions::new()).unwrap();
        let whole = cut / batch_len;
        assert_eq!(got.len(), whole * 5, "cut {cut}");
        assert_eq!(r.next_offset(), whole as i64 * 5, "cut {cut}");
        match r.tail().unwrap() {
            Tail::Complete => assert_eq!(cut % batch_len, 0),
            Tail::Truncated {
                position,
                available,
                ..
            } => {
                assert_eq!(position, whole * batch_len);
                assert_eq!(available, cut - position);
            }
        }
    }
}

#[test]
fn next_offset_uses_last_offset_delta_not_last_record() {
    // Compaction removed the tail: records 0 and 1 remain, lastOffsetDelta says 9.
    let mut b = RawBatch::new(
        0,
        vec![
            raw_record(0, 0, None, None, &[]),
            raw_record(0, 1, None, None, &[]),
        ],
    );
    b.last_offset_delta = 9;
    let (got, r) = read_all(Bytes::from(b.encode()), DecodeOptions::new()).unwrap();
    assert_eq!(offsets(&got), vec![0, 1]);
    assert_eq!(r.next_offset(), 10);
}

/// A batch (valid CRC) of records with these offset deltas and lastOffsetDelta.
fn with_deltas(base: i64, deltas: &[i32], last_offset_delta: i32) -> RawBatch {
    let records = deltas
        .iter()
        .map(|&d| raw_record(0, d, None, Some(format!("v{d}").as_bytes()), &[]))
        .collect();
    let mut b = RawBatch::new(base, records);
    b.last_offset_delta = last_offset_delta;
    b
}

/// Records whose offsets contradict their batch are refused (issue 36): 100 records all at
/// delta 0 were delivered under 2 distinct offsets, deltas 0, 5, 2, 1 as offsets 96, 98, 97.
/// Each record's delta must be above the previous record's and at most lastOffsetDelta;
/// compaction's gaps are legal. Both decoders (views and owned records), every codec, and
/// records below the fetch offset (skipped, still checked).
#[test]
fn records_that_contradict_their_offsets_are_refused() {
    let bad = |deltas: &[i32], last: i32, index: i32, delta: i64, previous: Option<i64>| {
        for c in [Compression::None, Compression::Lz4] {
            let b = with_deltas(96, deltas, last).compressed(c).encode();
            // The reader skips a batch that ends at or below the fetch offset undecoded.
            let fetch_offsets = if last >= 0 {
                vec![96, 96 + i64::from(last)]
            } else {
                vec![]
            };
            for fetch_offset in fetch_offsets {
                let opts = DecodeOptions::new().fetch_offset(fetch_offset);
                let err = read_all(Bytes::from(b.clone()), opts).unwrap_err();
                assert_eq!(
                    err.kind(),
                    &DecodeErrorKind::BadOffsetDelta {
                        index,
                        delta,
                        previous,
                        last_offset_delta: i64::from(last),
                    },
                    "{deltas:?} {c:?}: {err}"
                );
                assert_eq!(err.base_offset(), Some(96), "{err}");
            }
            let batch = Batches::new(Bytes::from(b), true)
                .next_batch()
                .unwrap()
                .unwrap();
            let mut out = std::collections::VecDeque::new();
            let err = batch
                .owned_records(&mut Scratch::default(), usize::MAX, &mut out)
                .unwrap_err();
            assert!(
                matches!(err.kind(), DecodeErrorKind::BadOffsetDelta { .. }),
                "{err}"
            );
            assert_eq!(out.len(), index as usize, "the records before the fault");
        }
    };
    let zeros = [0; 100];
    bad(&zeros, 99, 1, 0, Some(0));
    bad(&[0, 5, 2, 1], 3, 1, 5, Some(0));
    bad(&[0, 2, 2, 3], 3, 2, 2, Some(2));
    bad(&[0, 1, 0], 2, 2, 0, Some(1));
    // Past lastOffsetDelta, below the base, a negative lastOffsetDelta.
    bad(&[0, 1, 4], 3, 2, 4, Some(1));
    bad(&[-1, 0], 1, 0, -1, None);
    bad(&[0], -1, 0, 0, None);
    let err = read_all(
        Bytes::from(with_deltas(96, &zeros, 99).encode()),
        DecodeOptions::new(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "record 1 of the batch has offset delta 0, but must be above the previous record's 0 \
             and at most the batch's last offset delta 99 at byte {} in the batch at offset 96",
            err.position()
        )
    );
    // Compaction's gaps: strictly increasing, not consecutive, is read as it is.
    let (got, r) = read_all(
        Bytes::from(with_deltas(96, &[1, 3, 7], 9).encode()),
        DecodeOptions::new(),
    )
    .unwrap();
    assert_eq!(offsets(&got), vec![97, 99, 103]);
    assert_eq!(r.next_offset(), 106);
}

// ---------------------------------------------------------------------------------------------
// Control batches and read_committed, case by case against the Java client's algorithm
// (CompletedFetch.nextFetchedRecord: consumeAbortedTransactionsUpTo(batch.lastOffset), an ABORT
// marker removes its producer, a transactional batch of an aborted producer is skipped whole,
// control records never returned).

enum Item {
    /// Transactional data batch: producer, first offset, record count.
    Txn(i64, i64, i64),
    /// Non-transactional (idempotent) data batch.
    Plain(i64, i64, i64),
    /// Control batch: producer, offset, abort?
    Marker(i64, i64, bool),
}

fn log(items: &[Item], c: Compression) -> Bytes {
    let mut out = BytesMut::new();
    for item in items {
        let recs: Vec<KpRecord> = match *item {
            Item::Txn(pid, first, n) | Item::Plain(pid, first, n) => (first..first + n)
                .map(|o| {
                    let mut r = kp_record(o, 5, Some(b"k"), Some(b"v"));
                    r.producer_id = pid;
                    r.producer_epoch = 0;
                    r.sequence = (o - first) as i32;
                    r.transactional = matches!(item, Item::Txn(..));
                    r
                })
                .collect(),
            Item::Marker(pid, offset, abort) => {
                let mut r = kp_record(
                    offset,
                    5,
                    Some(&[0, 0, 0, if abort { 0 } else { 1 }]),
                    Some(&[0, 0, 0, 0, 0, 7]),
                );
                r.producer_id = pid;
                r.producer_epoch = 0;
                r.transactional = true;
                r.control = true;
                vec![r]
            }
        };
        out.extend_from_slice(&encode(&recs, c));
    }
    out.freeze()
}

fn committed(items: &[Item], aborted: &[(i64, i64)]) -> (Vec<i64>, i64) {
    let aborted: Vec<AbortedTransaction> = aborted
        .iter()
        .map(|&(producer_id, first_offset)| AbortedTransaction {
            producer_id,
            first_offset,
        })
        .collect();
    let mut result = None;
    for c in CODECS {
        let (got, r) = read_all_with(
            log(items, c),
            DecodeOptions::new().isolation(IsolationLevel::ReadCommitted),
            &aborted,
        )
        .unwrap();
        let this = (offsets(&got), r.next_offset());
        if let Some(prev) = &result {
            assert_eq!(prev, &this, "{c}");
        }
        result = Some(this);
    }
    result.unwrap()
}

#[test]
fn read_committed_skips_an_aborted_transaction() {
    let items = [
        Item::Txn(1, 0, 3),
        Item::Marker(1, 3, true),
        Item::Plain(2, 4, 1),
    ];
    assert_eq!(committed(&items, &[(1, 0)]), (vec![4], 5));
}

#[test]
fn read_committed_returns_a_committed_transaction_without_its_marker() {
    let items = [Item::Txn(1, 0, 3), Item::Marker(1, 3, false)];
    assert_eq!(committed(&items, &[]), (vec![0, 1, 2], 4));
}

#[test]
fn read_committed_abort_marker_clears_the_producer_for_its_next_transaction() {
    let items = [
        Item::Txn(1, 0, 2),
        Item::Marker(1, 2, true),
        Item::Txn(1, 3, 2),
        Item::Marker(1, 5, false),
    ];
    assert_eq!(committed(&items, &[(1, 0)]), (vec![3, 4], 6));
}

#[test]
fn read_committed_interleaved_producers() {
    let items = [
        Item::Txn(1, 0, 1),
        Item::Txn(2, 1, 1),
        Item::Txn(1, 2, 1),
        Item::Marker(2, 3, false),
        Item::Marker(1, 4, true),
    ];
    assert_eq!(committed(&items, &[(1, 0)]), (vec![1], 5));
}

#[test]
fn read_committed_does_not_trust_the_order_of_the_aborted_list() {
    let items = [
        Item::Txn(2, 0, 2),
        Item::Marker(2, 2, false),
        Item::Txn(1, 3, 1),
        Item::Marker(1, 4, true),
        Item::Txn(2, 5, 2),
        Item::Marker(2, 7, true),
        Item::Plain(3, 8, 1),
    ];
    assert_eq!(committed(&items, &[(2, 5), (1, 3)]), (vec![0, 1, 8], 9));
}

#[test]
fn read_committed_keeps_non_transactional_batches_of_an_aborted_producer() {
    // Java's isBatchAborted needs batch.isTransactional().
    let items = [
        Item::Txn(1, 0, 1),
        Item::Plain(1, 1, 1),
        Item::Marker(1, 2, true),
    ];
    assert_eq!(committed(&items, &[(1, 0)]), (vec![1], 3));
}

#[test]
fn read_committed_aborted_entry_applies_only_from_its_first_offset() {
    // The aborted transaction starts at 2: the earlier batch of the same producer is kept.
    let items = [
        Item::Txn(1, 0, 2),
        Item::Marker(1, 2, false),
        Item::Txn(1, 3, 1),
        Item::Marker(1, 4, true),
    ];
    assert_eq!(committed(&items, &[(1, 3)]), (vec![0, 1], 5));
}

#[test]
fn read_uncommitted_ignores_the_aborted_list_but_still_drops_markers() {
    let items = [
        Item::Txn(1, 0, 3),
        Item::Marker(1, 3, true),
        Item::Plain(2, 4, 1),
    ];
    let aborted = [AbortedTransaction {
        producer_id: 1,
        first_offset: 0,
    }];
    let (got, r) = read_all_with(
        log(&items, Compression::None),
        DecodeOptions::new(),
        &aborted,
    )
    .unwrap();
    assert_eq!(offsets(&got), vec![0, 1, 2, 4]);
    assert_eq!(r.next_offset(), 5);
}

#[test]
fn control_batches_at_the_end_advance_the_position() {
    let items = [Item::Txn(1, 0, 2), Item::Marker(1, 2, false)];
    let (got, r) = read_all(log(&items, Compression::None), DecodeOptions::new()).unwrap();
    assert_eq!(offsets(&got), vec![0, 1]);
    assert_eq!(r.next_offset(), 3);
}

// ---------------------------------------------------------------------------------------------
// Hostile input

#[test]
fn legacy_message_sets_are_a_typed_error() {
    for magic in [0u8, 1] {
        let mut b = vec![0u8; 40];
        b[8..12].copy_from_slice(&28i32.to_be_bytes());
        b[16] = magic;
        let err = read_all(Bytes::from(b), DecodeOptions::new()).unwrap_err();
        assert_eq!(
            err.kind(),
            &DecodeErrorKind::LegacyMessageSet { magic: magic as i8 }
        );
        assert_eq!(err.position(), 0);
        assert!(err.to_string().contains("legacy message set"));
    }
}

#[test]
fn malformed_records_give_typed_errors_with_positions() {
    // Record length says 3 more bytes than the fields use.
    let mut rec = raw_record(0, 0, Some(b"k"), Some(b"v"), &[]);
    rec[0] += 6; // zigzag: +3
    rec.extend_from_slice(&[0, 0, 0]);
    let b = RawBatch::new(50, vec![rec]).encode();
    let err = read_all(Bytes::from(b), DecodeOptions::new()).unwrap_err();
    assert!(
        matches!(err.kind(), DecodeErrorKind::RecordSizeMismatch { .. }),
        "{err}"
    );
    assert_eq!(err.position(), BATCH_HEADER_LEN);
    assert_eq!(err.base_offset(), Some(50));

    // Key length -2.
    let mut body = vec![0u8, 0, 0];
    zz(-2, &mut body);
    let mut rec = Vec::new();
    zz(body.len() as i64, &mut rec);
    rec.extend_from_slice(&body);
    let err = read_all(
        Bytes::from(RawBatch::new(0, vec![rec]).encode()),
        DecodeOptions::new(),
    )
    .unwrap_err();
    assert_eq!(
        err.kind(),
        &DecodeErrorKind::BadLength {
            field: Field::Key,
            length: -2
        }
    );
    assert_eq!(err.position(), BATCH_HEADER_LEN + 4);

    // A header count far beyond the bytes.
    let mut body = vec![0u8, 0, 0, 1, 1];
    zz(1_000_000, &mut body);
    let mut rec = Vec::new();
    zz(body.len() as i64, &mut rec);
    rec.extend_from_slice(&body);
    let err = read_all(
        Bytes::from(RawBatch::new(0, vec![rec]).encode()),
        DecodeOptions::new(),
    )
    .unwrap_err();
    assert!(matches!(
        err.kind(),
        DecodeErrorKind::BadLength {
            field: Field::HeaderCount,
            ..
        }
    ));

    // The batch declares more records than it holds, and fewer.
    let mut b = RawBatch::new(0, vec![raw_record(0, 0, None, None, &[])]);
    b.record_count = 2;
    let err = read_all(Bytes::from(b.encode()), DecodeOptions::new()).unwrap_err();
    assert_eq!(
        err.kind(),
        &DecodeErrorKind::TooFewRecords {
            declared: 2,
            found: 1
        }
    );
    let mut b = RawBatch::new(
        0,
        vec![
            raw_record(0, 0, None, None, &[]),
            raw_record(0, 1, None, None, &[]),
        ],
    );
    b.record_count = 1;
    let err = read_all(Bytes::from(b.encode()), DecodeOptions::new()).unwrap_err();
    assert!(matches!(
        err.kind(),
        DecodeErrorKind::TrailingBytes { declared: 1, .. }
    ));

    // A negative record count and an unknown codec.
    let mut b = RawBatch::new(0, vec![]);
    b.record_count = -1;
    let err = read_all(Bytes::from(b.encode()), DecodeOptions::new()).unwrap_err();
    assert_eq!(
        err.kind(),
        &DecodeErrorKind::NegativeRecordCount { count: -1 }
    );
    let mut b = RawBatch::new(0, vec![]);
    b.attributes = 6;
    let err = read_all(Bytes::from(b.encode()), DecodeOptions::new()).unwrap_err();
    assert_eq!(err.kind(), &DecodeErrorKind::UnknownCompression { id: 6 });

    // A batch length below the header size.
    let mut b = RawBatch::new(0, vec![]).encode();
    b[8..12].copy_from_slice(&20i32.to_be_bytes());
    let err = read_all(Bytes::from(b), DecodeOptions::new()).unwrap_err();
    assert!(matches!(
        err.kind(),
        DecodeErrorKind::BatchLengthTooSmall { length: 20, .. }
    ));
}

#[test]
fn errors_inside_compressed_records_report_both_positions() {
    let mut rec = raw_record(0, 0, Some(b"k"), Some(b"v"), &[]);
    rec[0] += 2;
    rec.push(0);
    let good = raw_record(0, 0, None, None, &[]);
    let b = RawBatch::new(9, vec![good.clone(), rec])
        .compressed(Compression::Zstd)
        .encode();
    let err = read_all(Bytes::from(b), DecodeOptions::new()).unwrap_err();
    assert_eq!(err.position(), BATCH_HEADER_LEN);
    assert_eq!(err.inflated_position(), Some(good.len()));
    assert_eq!(err.base_offset(), Some(9));
}

#[test]
fn decompression_bombs_hit_the_cap() {
    let recs: Vec<Vec<u8>> = (0..64)
        .map(|i| raw_record(0, i, None, Some(&[0u8; 16 << 10]), &[]))
        .collect();
    for c in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let b = Bytes::from(RawBatch::new(0, recs.clone()).compressed(c).encode());
        assert!(b.len() < 200 << 10, "{c}: {}", b.len());
        let err =
            read_all(b.clone(), DecodeOptions::new().max_decompressed(256 << 10)).unwrap_err();
        assert_eq!(
            err.kind(),
            &DecodeErrorKind::DecompressedTooLarge {
                codec: c,
                cap: 256 << 10
            },
            "{c}"
        );
        assert_eq!(read_all(b, DecodeOptions::new()).unwrap().0.len(), 64);
    }
}

#[test]
fn the_reader_stops_after_an_error() {
    let good = encode(&[kp_record(0, 0, None, None)], Compression::None);
    let mut bad = encode(&[kp_record(1, 0, None, None)], Compression::None).to_vec();
    bad[16] = 9;
    let buf = Bytes::from([good.as_ref(), &bad, good.as_ref()].concat());
    let mut r = RecordBatchReader::new(buf, DecodeOptions::new());
    assert!(r.next_batch().unwrap().is_some());
    let err = r.next_batch().unwrap_err();
    assert_eq!(err.kind(), &DecodeErrorKind::UnknownMagic { magic: 9 });
    assert!(r.next_batch().unwrap().is_none());
    assert_eq!(r.next_offset(), 1);
}

/// Decodes anything without panicking; returns how many records it saw.
fn decode_anything(buf: Bytes, check_crc: bool) -> usize {
    let mut reader = RecordBatchReader::new(
        buf,
        DecodeOptions::new()
            .check_crc(check_crc)
            .max_decompressed(1 << 20),
    );
    let mut n = 0;
    while let Ok(Some(batch)) = reader.next_batch() {
        if let Ok(records) = reader.records(&batch) {
            for r in records.flatten() {
                n += r.headers().count() + 1;
            }
        }
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// kafka-protocol's encoder → kdirect's decoder, every codec, random keys, values, headers.
    #[test]
    fn kafka_protocol_encoder_round_trips(
        recs in prop::collection::vec(
            (
                prop::option::of(prop::collection::vec(any::<u8>(), 0..40)),
                prop::option::of(prop::collection::vec(any::<u8>(), 0..300)),
                prop::collection::vec(("[a-z]{0,6}", prop::option::of(prop::collection::vec(any::<u8>(), 0..20))), 0..5),
                0i64..100_000,
            ),
            1..40,
        ),
        base in 0i64..1_000_000_000,
        codec in 0usize..5,
    ) {
        let c = CODECS[codec];
        let records: Vec<KpRecord> = recs.iter().enumerate().map(|(i, (k, v, hs, ts))| {
            let mut r = kp_record(base + i as i64, 1_600_000_000_000 + ts, k.as_deref(), v.as_deref());
            for (hk, hv) in hs {
                r.headers.insert(StrBytes::from_string(hk.clone()), hv.clone().map(Bytes::from));
            }
            r
        }).collect();
        let (got, reader) = read_all(encode(&records, c), DecodeOptions::new()).unwrap();
        prop_assert_eq!(got, records.iter().map(kp_plain).collect::<Vec<_>>());
        prop_assert_eq!(reader.next_offset(), base + records.len() as i64);
    }

    /// The hand encoder (duplicate header keys allowed) → decoder, every codec.
    #[test]
    fn duplicate_headers_round_trip(
        recs in prop::collection::vec(
            (
                prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
                prop::option::of(prop::collection::vec(any::<u8>(), 0..200)),
                prop::collection::vec((prop::sample::select(vec!["a", "b", "dup"]), prop::option::of(prop::collection::vec(any::<u8>(), 0..10))), 0..6),
            ),
            1..30,
        ),
        codec in 0usize..5,
    ) {
        let c = CODECS[codec];
        let raw: Vec<Vec<u8>> = recs.iter().enumerate().map(|(i, (k, v, hs))| {
            let hs: Vec<(&[u8], Option<&[u8]>)> = hs.iter().map(|(hk, hv)| (hk.as_bytes(), hv.as_deref())).collect();
            raw_record(i as i64, i as i32, k.as_deref(), v.as_deref(), &hs)
        }).collect();
        let (got, _) = read_all(Bytes::from(RawBatch::new(0, raw).compressed(c).encode()), DecodeOptions::new()).unwrap();
        prop_assert_eq!(got.len(), recs.len());
        for (g, (k, v, hs)) in got.iter().zip(&recs) {
            prop_assert_eq!(&g.key, k);
            prop_assert_eq!(&g.value, v);
            let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = hs.iter().map(|(hk, hv)| (hk.as_bytes().to_vec(), hv.clone())).collect();
            prop_assert_eq!(&g.headers, &want);
        }
    }

    /// Random corruption of valid batches never panics (CRC off so it reaches the records).
    #[test]
    fn corrupted_batches_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        codec in 0usize..5,
    ) {
        let c = CODECS[codec];
        let rec = raw_record(3, 0, Some(b"key"), Some(b"value"), &[(b"h", Some(b"v")), (b"h", None)]);
        let mut b = [RawBatch::new(0, vec![rec.clone(), rec.clone()]).compressed(c).encode(), RawBatch::new(2, vec![rec]).encode()].concat();
        for (i, x) in flips {
            let i = i.index(b.len());
            b[i] ^= x;
        }
        let cut = cut.index(b.len() + 1);
        decode_anything(Bytes::from(b[..cut].to_vec()), false);
        decode_anything(Bytes::from(b), true);
    }

    /// Arbitrary bytes never panic.
    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..400)) {
        decode_anything(Bytes::from(b), false);
    }
}

/// Linked lz4 blocks (each block may refer to the previous 64 KiB) take the lz4_flex path with
/// a dictionary; independent blocks the C decoder. Both give the producer's bytes back.
#[test]
fn lz4_linked_and_independent_blocks_decode() {
    use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
    use std::io::Write;
    let recs: Vec<Vec<u8>> = (0..600)
        .map(|i| {
            let v = format!("{{\"user\":\"u{}\",\"n\":{i}}}", i % 37).repeat(12);
            raw_record(0, i, Some(b"k"), Some(v.as_bytes()), &[])
        })
        .collect();
    let section: Vec<u8> = recs.concat();
    assert!(section.len() > 128 << 10, "needs several 64 KiB blocks");
    for mode in [BlockMode::Linked, BlockMode::Independent] {
        let info = FrameInfo::new()
            .block_mode(mode)
            .block_size(BlockSize::Max64KB);
        let mut e = FrameEncoder::with_frame_info(info, Vec::new());
        e.write_all(&section).unwrap();
        let deflated = e.finish().unwrap();
        let mut scratch = Scratch::new();
        let inflated = scratch
            .inflate(Compression::Lz4, &deflated, usize::MAX)
            .unwrap();
        assert_eq!(inflated, &section[..], "{mode:?}");
        // A damaged block is a typed error (the C decoder refuses it, lz4_flex names why).
        let mut bad = deflated.clone();
        let mid = bad.len() / 2;
        for b in bad.get_mut(mid..mid + 16).unwrap() {
            *b = 0xff;
        }
        match scratch.inflate(Compression::Lz4, &bad, usize::MAX) {
            Err(DecodeErrorKind::Decompress { codec, .. }) => assert_eq!(codec, Compression::Lz4),
            Ok(out) => assert_ne!(out, &section[..], "{mode:?}: damage went unnoticed"),
            Err(other) => panic!("{mode:?}: {other:?}"),
        }
    }
}
