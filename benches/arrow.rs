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
        let (fake, batch) = rt.block_on(async {
            let fake = FakeCluster::builder().topic("b", 1).build().await.unwrap();
            let recs: Vec<FakeRecord> = (0..RECORDS)
                .map(|i| {
                    let mut v = format!("{i:08}").into_bytes();
                    v.resize(SIZE, b'x');
                    FakeRecord::value(Bytes::from(v)).with_timestamp(1_700_000_000_000 + i as i64)
                })
                .collect();
            fake.append_batch(
                "b",
                0,
                encode_batch(&recs, &BatchOptions::codec(codec)).unwrap(),
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
            assert_eq!(batch.for_each_record(|_, _| {}).unwrap(), RECORDS as u64);
            // The stream is dropped; the batch keeps its buffers.
            (fake, batch)
        });
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
