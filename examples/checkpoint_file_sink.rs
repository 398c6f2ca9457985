//! Exactly-once with a checkpoint directory and the idempotent file sink.
//!
//! The stream logs each batch's plan in the checkpoint before handing the batch out; the sink
//! writes one file per batch id, atomically; the commit comes after the file. A crash between
//! the file and the commit re-runs the batch with exactly its logged ranges, and the re-run
//! replaces the file instead of adding to it.
//!
//! ```sh
//! cargo run --example checkpoint_file_sink -- 127.0.0.1:9092 events /tmp/ckpt /tmp/out
//! ```
use kdirect::{CheckpointStore, DirectStream, FileSink, StartPolicy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), kdirect::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, checkpoint, out] = args.as_slice() else {
        eprintln!("usage: checkpoint_file_sink BOOTSTRAP TOPIC CHECKPOINT_DIR OUTPUT_DIR");
        std::process::exit(2);
    };
    let sink = FileSink::open(out)?;
    let mut stream = DirectStream::builder()
        .bootstrap(bootstrap)
        .topics(&[topic])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .max_offsets_per_trigger(100_000)
        .store(CheckpointStore::open(checkpoint, 100)?)
        .build()
        .await?;
    while let Some(batch) = stream.next_batch().await? {
        let mut file = sink.begin(batch.id())?;
        batch.try_for_each_record(|range, record| -> Result<(), kdirect::Error> {
            let line = format!("{}-{} {}", range.topic, range.partition, record.offset());
            Ok(file.write_line(line.as_bytes())?)
        })?;
        file.finish()?;
        stream.commit(batch).await?;
    }
    Ok(())
}
