//! Record-batch decode throughput: kdirect vs the incumbents on the same bytes, in the same run.
//!
//! Groups are named `decode/<records>x<size>/<codec>`; in each, on identical input:
//! - `kdirect`: `RecordBatchReader` with the CRC checked (the default), touching every key,
//!   value and header;
//! - `kdirect-nocrc`: the same with `check_crc(false)`;
//! - `kafka-protocol`: `RecordBatchDecoder::decode_all` (CRC always checked), touching the same;
//! - `rskafka`: rskafka's `RecordBatch::read` (CRC checked);
//! - `floor-crc32c`: one CRC32C pass over the same bytes with the CRC kdirect uses (`crc-fast`,
//!   carry-less multiply folding): the floor for uncompressed batches;
//! - `crc32c-crate`: the same pass with the `crc32c` crate (SSE 4.2, the CRC kafka-protocol uses),
//!   for reference;
//! - `floor-inflate`: bare decompression of each batch's records section into a reused buffer,
//!   with the codec kdirect uses (the floor for compressed batches);
//! - `floor-length-chain`: the record-length chain alone, over the (inflated) records sections
//!   prepared outside the timed loop: from each record's start, load 8 bytes, decode the length
//!   varint, step to the next record. Each record's start depends on the previous record's
//!   length, so no decoder that walks records one after the other can beat it; nothing else of
//!   the record is read and no bound is checked beyond the load's own.
//!
//! `floor/zstd-impl/*` compares the zstd C library (the `zstd` crate) with pure-Rust `ruzstd`.
//!
//! Run: `cargo bench --bench decode -- --warm-up-time 1 --measurement-time 3`.
use std::hint::black_box;
use std::io::Cursor;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as KpCompression, Record as KpRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use kdirect_engine::record::{Batches, Compression, DecodeOptions, RecordBatchReader, Scratch};

/// A deterministic value of `len` bytes that compresses like JSON events (about 3-4x).
fn value(i: usize, len: usize) -> Vec<u8> {
    const EVENTS: [&str; 6] = ["click", "view", "purchase", "scroll", "login", "logout"];
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 64);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(
            format!(
                "{{\"user\":\"u{}\",\"event\":\"{}\",\"ms\":{},\"ok\":{}}}",
                x % 100_000,
                EVENTS[(x >> 20) as usize % EVENTS.len()],
                x >> 44,
                x & 1 == 0
            )
            .as_bytes(),
        );
    }
    v.truncate(len);
    v
}

fn batch(count: usize, size: usize, headers: bool, codec: KpCompression) -> Bytes {
    batch_sized(count, |_| size, headers, codec)
}

/// Like [`batch`], with record `i`'s value `size(i)` bytes long.
fn batch_sized(
    count: usize,
    size: impl Fn(usize) -> usize,
    headers: bool,
    codec: KpCompression,
) -> Bytes {
    let records: Vec<KpRecord> = (0..count)
        .map(|i| {
            let size = size(i);
            let mut h = IndexMap::new();
            if headers {
                h.insert(
                    StrBytes::from_static_str("trace-id"),
                    Some(Bytes::from(format!("{:016x}", i * 7919))),
                );
                h.insert(
                    StrBytes::from_static_str("source"),
                    Some(Bytes::from_static(b"svc-a")),
                );
            }
            KpRecord {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: 1,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: 1_000_000 + i as i64,
                sequence: i as i32,
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("key-{:06}", i % 5000))),
                value: Some(Bytes::from(value(i, size))),
                headers: h,
                delete_horizon: false,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: codec,
        },
    )
    .unwrap();
    buf.freeze()
}

fn kdirect(buf: &Bytes, opts: &DecodeOptions, scratch: &mut Scratch) -> usize {
    let mut reader =
        RecordBatchReader::new(buf.clone(), opts.clone()).with_scratch(std::mem::take(scratch));
    let mut sum = 0usize;
    while let Some(batch) = reader.next_batch().unwrap() {
        for r in reader.records(&batch).unwrap() {
            let r = r.unwrap();
            sum += r.key().map_or(0, <[u8]>::len) + r.value().map_or(0, <[u8]>::len);
            sum += r.offset() as usize;
            for h in r.headers() {
                sum += h.key().len() + h.value().map_or(0, <[u8]>::len);
            }
        }
    }
    *scratch = reader.into_scratch();
    sum
}

fn kafka_protocol(buf: &Bytes) -> usize {
    let mut b = buf.clone();
    let sets = RecordBatchDecoder::decode_all(&mut b).unwrap();
    let mut sum = 0usize;
    for set in sets {
        for r in set.records {
            sum += r.key.as_ref().map_or(0, Bytes::len) + r.value.as_ref().map_or(0, Bytes::len);
            sum += r.offset as usize;
            for (k, v) in &r.headers {
                sum += k.len() + v.as_ref().map_or(0, Bytes::len);
            }
        }
    }
    sum
}

fn rskafka(buf: &Bytes) -> usize {
    use rskafka::protocol::record::{ControlBatchOrRecords, RecordBatch};
    use rskafka::protocol::traits::ReadType;
    let mut cur = Cursor::new(&buf[..]);
    let mut sum = 0usize;
    while (cur.position() as usize) < buf.len() {
        let batch = RecordBatch::read(&mut cur).unwrap();
        if let ControlBatchOrRecords::Records(records) = batch.records {
            for r in records {
                sum += r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len);
                sum += r.offset_delta as usize;
                for h in &r.headers {
                    sum += h.key.len() + h.value.len();
                }
            }
        }
    }
    sum
}

fn inflate_floor(buf: &Bytes, scratch: &mut Scratch) -> usize {
    let mut sum = 0;
    for batch in Batches::new(buf.clone(), false) {
        let batch = batch.unwrap();
        let section = batch.records_section();
        sum += scratch
            .inflate(batch.header().compression, &section, usize::MAX)
            .unwrap()
            .len();
    }
    sum
}

/// The record-length chain over one records section: the records found (see the module doc).
#[inline(never)]
fn length_chain(section: &[u8]) -> usize {
    let mut pos = 0usize;
    let mut n = 0usize;
    while let Some(w) = section.get(pos..pos + 8) {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        // A zigzag varint, halved in the shifts; 1 and 2 bytes (the 100 B records) first.
        let (len, width) = if w & 0x80 == 0 {
            ((w & 0x7e) >> 1, 1)
        } else if w & 0x8000 == 0 {
            (((w & 0x7e) >> 1) | ((w >> 2) & 0x1fc0), 2)
        } else {
            let width = (!w & 0x8080_8080_8080_8080).trailing_zeros() as usize / 8 + 1;
            let u = (0..width).fold(0, |u, i| u | ((w >> (8 * i)) & 0x7f) << (7 * i));
            (u >> 1, width)
        };
        pos += width + len as usize;
        n += 1;
    }
    n
}

fn group(c: &mut Criterion, name: &str, buf: Bytes, records: u64, by_elements: bool) {
    let mut g = c.benchmark_group(format!("decode/{name}"));
    g.throughput(if by_elements {
        Throughput::Elements(records)
    } else {
        Throughput::Bytes(buf.len() as u64)
    });
    let compressed = Batches::new(buf.clone(), true)
        .next()
        .unwrap()
        .unwrap()
        .header()
        .compression
        != Compression::None;
    let with_crc = DecodeOptions::new();
    let no_crc = DecodeOptions::new().check_crc(false);
    let mut scratch = Scratch::new();
    g.bench_function("kdirect", |b| {
        b.iter(|| black_box(kdirect(&buf, &with_crc, &mut scratch)))
    });
    g.bench_function("kdirect-nocrc", |b| {
        b.iter(|| black_box(kdirect(&buf, &no_crc, &mut scratch)))
    });
    g.bench_function("kafka-protocol", |b| {
        b.iter(|| black_box(kafka_protocol(&buf)))
    });
    g.bench_function("rskafka", |b| b.iter(|| black_box(rskafka(&buf))));
    g.bench_function("floor-crc32c", |b| {
        b.iter(|| black_box(kdirect_engine::record::crc32c(black_box(&buf[..]))))
    });
    g.bench_function("crc32c-crate", |b| {
        b.iter(|| black_box(crc32c::crc32c(black_box(&buf[..]))))
    });
    let sections: Vec<Vec<u8>> = Batches::new(buf.clone(), false)
        .map(|b| {
            let b = b.unwrap();
            let section = b.records_section();
            scratch
                .inflate(b.header().compression, &section, usize::MAX)
                .unwrap()
                .to_vec()
        })
        .collect();
    g.bench_function("floor-length-chain", |b| {
        b.iter(|| {
            sections
                .iter()
                .map(|s| length_chain(black_box(s)))
                .sum::<usize>()
        })
    });
    if compressed {
        g.bench_function("floor-inflate", |b| {
            b.iter(|| black_box(inflate_floor(&buf, &mut scratch)))
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let none = KpCompression::None;
    group(
        c,
        "1000x100B/none",
        batch(1000, 100, false, none),
        1000,
        true,
    );
    // Values of 50 to 150 bytes (mean 100), in an order no predictor learns: every record's
    // length differs from the one before it.
    group(
        c,
        "1000x50-150B/none",
        batch_sized(
            1000,
            |i| 50 + (i.wrapping_mul(0x9e37_79b9) >> 7) % 101,
            false,
            none,
        ),
        1000,
        true,
    );
    group(
        c,
        "1000x100B-2hdr/none",
        batch(1000, 100, true, none),
        1000,
        true,
    );
    group(c, "100x1KB/none", batch(100, 1024, false, none), 100, false);
    group(
        c,
        "10x10KB/none",
        batch(10, 10 * 1024, false, none),
        10,
        false,
    );
    for (codec, name) in [(KpCompression::Lz4, "lz4"), (KpCompression::Zstd, "zstd")] {
        group(
            c,
            &format!("1000x100B/{name}"),
            batch(1000, 100, false, codec),
            1000,
            true,
        );
        group(
            c,
            &format!("100x1KB/{name}"),
            batch(100, 1024, false, codec),
            100,
            false,
        );
    }
}

/// The zstd C library vs pure-Rust ruzstd on one batch's records section.
fn zstd_impl(c: &mut Criterion) {
    let buf = batch(1000, 100, false, KpCompression::Zstd);
    let b = Batches::new(buf, true).next().unwrap().unwrap();
    let section = b.records_section();
    let inflated_len = zstd::bulk::decompress(&section, 1 << 24).unwrap().len();
    let mut g = c.benchmark_group("floor/zstd-impl");
    g.throughput(Throughput::Bytes(inflated_len as u64));
    let mut scratch = Scratch::new();
    g.bench_function(BenchmarkId::new("zstd-c", "kdirect-scratch"), |bn| {
        bn.iter(|| {
            black_box(
                scratch
                    .inflate(Compression::Zstd, &section, usize::MAX)
                    .unwrap()
                    .len(),
            )
        })
    });
    let mut dec = zstd::bulk::Decompressor::new().unwrap();
    let mut out = Vec::with_capacity(inflated_len);
    g.bench_function(BenchmarkId::new("zstd-c", "bulk"), |bn| {
        bn.iter(|| {
            out.clear();
            black_box(dec.decompress_to_buffer(&section[..], &mut out).unwrap())
        })
    });
    let mut rz = ruzstd::decoding::FrameDecoder::new();
    let mut out2 = vec![0u8; inflated_len];
    g.bench_function(BenchmarkId::new("ruzstd", "decode_all"), |bn| {
        bn.iter(|| black_box(rz.decode_all(&section[..], &mut out2[..]).unwrap()))
    });
    g.finish();
}

/// Where the CRC's cost goes at 1000 x 100 B: the walk alone, and the walk right after a CRC
/// pass computed outside the reader (crc-fast over the batch, crc-fast over 512 bytes only,
/// the `crc32c` crate over the batch).
fn crc_experiment(c: &mut Criterion) {
    let buf = batch(1000, 100, false, KpCompression::None);
    let no_crc = DecodeOptions::new().check_crc(false);
    let with_crc = DecodeOptions::new();
    let mut scratch = Scratch::new();
    let mut g = c.benchmark_group("crc-experiment/1000x100B");
    g.bench_function("walk", |b| {
        b.iter(|| black_box(kdirect(&buf, &no_crc, &mut scratch)))
    });
    g.bench_function("kdirect", |b| {
        b.iter(|| black_box(kdirect(&buf, &with_crc, &mut scratch)))
    });
    g.bench_function("crcfast+walk", |b| {
        b.iter(|| {
            black_box(kdirect_engine::record::crc32c(black_box(&buf[..])));
            black_box(kdirect(&buf, &no_crc, &mut scratch))
        })
    });
    g.bench_function("crcfast512+walk", |b| {
        b.iter(|| {
            black_box(kdirect_engine::record::crc32c(black_box(&buf[..512])));
            black_box(kdirect(&buf, &no_crc, &mut scratch))
        })
    });
    g.bench_function("crc32c+walk", |b| {
        b.iter(|| {
            black_box(crc32c::crc32c(black_box(&buf[..])));
            black_box(kdirect(&buf, &no_crc, &mut scratch))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = crc_experiment, decode, zstd_impl
}
criterion_main!(benches);
