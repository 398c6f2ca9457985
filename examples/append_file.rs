//! Exactly-once into one appended file, through the library alone: what `kdirect consume
//! --store checkpoint:DIR --output FILE` does.
//!
//! Every batch's records are appended to FILE; before each commit the file is fsynced and
//! its length recorded beside it (`FILE.kdirect-cover`) with the positions the commit will
//! store. A run that died after writing a batch and before committing it is resumed with the
//! file cut back to what the store covers, and the batch's re-run writes those records once.
//!
//! ```sh
//! cargo run --example append_file -- 127.0.0.1:9092 events /tmp/ckpt /tmp/events.txt
//! ```
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use kdirect::sink::cover::{Cover, Resumed};
use kdirect::{CheckpointStore, DirectStream, StartPolicy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, checkpoint, out] = args.as_slice() else {
        eprintln!("usage: append_file BOOTSTRAP TOPIC CHECKPOINT_DIR OUTPUT_FILE");
        std::process::exit(2);
    };
    let mut stream = DirectStream::builder()
        .bootstrap(bootstrap)
        .topics(&[topic])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .store(CheckpointStore::open(checkpoint, 100)?)
        .build()
        .await?;
    let path = PathBuf::from(out);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let (mut cover, resumed) = Cover::open(path, &file, stream.stored_positions())?;
    if let Resumed::CutBack { bytes } = resumed {
        eprintln!("cut back {bytes} bytes of a batch that was not committed");
    }
    let mut w = BufWriter::new(&file);
    while let Some(batch) = stream.next_batch().await? {
        batch.try_for_each_record(|range, r| -> Result<(), Box<dyn std::error::Error>> {
            Ok(writeln!(
                w,
                "{}-{}@{}",
                range.topic,
                range.partition,
                r.offset()
            )?)
        })?;
        w.flush()?;
        // The file is durable and covered before the positions move past it.
        cover.before_commit(&file, batch.ranges())?;
        stream.commit(batch).await?;
    }
    Ok(())
}
