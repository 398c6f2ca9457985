//! The Arrow view of a batch (`kdirect::sink::arrow`): the cost per record of turning a
//! decoded batch into `RecordBatch`es of Spark's Kafka schema. Named
//! `arrow/<records>x<size>/<codec>`.
//!
//! Input: one partition of 1000 records of 100-byte values (no key, no headers, one stored
//! batch, as `benches/decode.rs`'s `1000x100B`), fetched from the fake broker by a real
//! `DirectStream`, so the batch is what a user holds. Measured in the same run:
//! - `walk` (the floor): the records walked and discarded (`Batch::for_each_record`);
//! - `to_arrow`: the walk plus every column built (`ArrowConverter::to_record_batches`).
//!
//! With feature `json-values`, `arrow/<records>xJSON<size>B/none`: values that are JSON
//! objects of about 100 bytes (an id, a name, a time, a score, a flag: the lakehouse suite's
//! shape), `to_arrow` with the values as binary against `to_arrow_json`, the values decoded
//! to five columns (`ArrowConverter::with_json_values`).
//!
//! `cargo bench --bench arrow`; the figures are in docs/bench.md.
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kdirect::sink::arrow::ArrowConverter;
use kdirect::{DirectStream, StartPolicy};
use kdirect_fake_broker::{encode_batch, BatchOptions, Codec, FakeCluster, FakeRecord};

const RECORDS: usize = 1000;
const SIZE: usize = 100;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for codec in [Codec::None, Codec::Lz4] {
        let recs: Vec<FakeRecord> = (0..RECORDS)
            .map(|i| {
                let mut v = format!("{i:08}").into_bytes();
                v.resize(SIZE, b'x');
                FakeRecord::value(Bytes::from(v)).with_timestamp(1_700_000_000_000 + i as i64)
            })
            .collect();
        let (fake, batch) = first_batch(&rt, &recs, codec);
        let mut g = c.benchmark_group(format!("arrow/{RECORDS}x{SIZE}B/{}", codec.name()));
        g.throughput(Throughput::Elements(RECORDS as u64));
        g.bench_function("walk", |b| {
            b.iter(|| {
                batch.for_each_record(|_, r| {
                    std::hint::black_box(r.value());
                })
            })
        });
        let mut conv = ArrowConverter::new();
        g.bench_function("to_arrow", |b| {
            b.iter(|| {
                let rbs = conv.to_record_batches(&batch).unwrap();
                assert_eq!(rbs.iter().map(|r| r.num_rows()).sum::<usize>(), RECORDS);
                rbs
            })
        });
        g.finish();
        drop(batch);
        drop(fake);
    }
    #[cfg(feature = "json-values")]
    json(c, &rt);
}

/// One batch of `RECORDS` JSON values of about `SIZE` bytes, binary against decoded.
#[cfg(feature = "json-values")]
fn json(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    let recs: Vec<FakeRecord> = (0..RECORDS)
        .map(|i| {
            let v = format!(
                r#"{{"id":{i},"name":"user-{:08}","ts":"2026-12-07T10:{:02}:{:02}Z","score":{}.25,"ok":{}}}"#,
                i * 7919,
                i / 60 % 60,
                i % 60,
                i % 1000,
                i % 2 == 0
            );
            FakeRecord::value(Bytes::from(v)).with_timestamp(1_700_000_000_000 + i as i64)
        })
        .collect();
    let (fake, batch) = first_batch(rt, &recs, Codec::None);
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("score", DataType::Float64, true),
        Field::new("ok", DataType::Boolean, true),
    ]));
    let mut g = c.benchmark_group(format!("arrow/{RECORDS}xJSON{SIZE}B/none"));
    g.throughput(Throughput::Elements(RECORDS as u64));
    let mut conv = ArrowConverter::new();
    g.bench_function("to_arrow", |b| {
        b.iter(|| conv.to_record_batches(&batch).unwrap())
    });
    let mut conv = ArrowConverter::new().with_json_values(schema).unwrap();
    g.bench_function("to_arrow_json", |b| {
        b.iter(|| {
            let rbs = conv.to_record_batches(&batch).unwrap();
            assert_eq!(rbs.iter().map(|r| r.num_rows()).sum::<usize>(), RECORDS);
            rbs
        })
    });
    g.finish();
    drop(batch);
    drop(fake);
}

/// Topic `b` on a fake broker holding `recs` in one stored batch, and the batch a real
/// `DirectStream` reads of it (the stream is dropped; the batch keeps its buffers).
fn first_batch(
    rt: &tokio::runtime::Runtime,
    recs: &[FakeRecord],
    codec: Codec,
) -> (FakeCluster, kdirect::Batch) {
    rt.block_on(async {
        let fake = FakeCluster::builder().topic("b", 1).build().await.unwrap();
        fake.append_batch(
            "b",
            0,
            encode_batch(recs, &BatchOptions::codec(codec)).unwrap(),
        )
        .unwrap();
        let mut stream = DirectStream::builder()
            .bootstrap(&fake.bootstrap())
            .topics(&["b"])
            .start(StartPolicy::Earliest)
            .until_latest(true)
            .build()
            .await
            .unwrap();
        let batch = stream.next_batch().await.unwrap().unwrap();
        assert_eq!(batch.for_each_record(|_, _| {}).unwrap(), recs.len() as u64);
        (fake, batch)
    })
}

criterion_group!(benches, bench);
criterion_main!(benches);
