//! At-least-once with the offsets in Kafka (the consumer group's committed offsets, visible to
//! `kafka-consumer-groups --describe`): a crash after the output and before the commit
//! delivers the batch again, so the output must tolerate duplicates.
//!
//! ```sh
//! cargo run --example kafka_group_at_least_once -- 127.0.0.1:9092 events my-group
//! ```
use kdirect::{DirectStream, StartPolicy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), kdirect::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, group] = args.as_slice() else {
        eprintln!("usage: kafka_group_at_least_once BOOTSTRAP TOPIC GROUP");
        std::process::exit(2);
    };
    let mut stream = DirectStream::builder()
        .bootstrap(bootstrap)
        .topics(&[topic])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .group(group)
        .store_spec("kafka")
        .build()
        .await?;
    while let Some(batch) = stream.next_batch().await? {
        let records = batch.for_each_record(|range, record| {
            let value = record.value().map(String::from_utf8_lossy);
            println!(
                "{}-{}@{} {:?}",
                range.topic,
                range.partition,
                record.offset(),
                value
            );
        })?;
        eprintln!("batch {}: {records} records", batch.id());
        stream.commit(batch).await?;
    }
    Ok(())
}
