//! Exactly-once into PostgreSQL (or MySQL/MariaDB, or SQLite): each batch's records and its
//! offsets are written in one database transaction, so a crash leaves either both or neither.
//!
//! ```sh
//! cargo run --example postgres_exactly_once -- 127.0.0.1:9092 events \
//!     postgres://user:password@127.0.0.1/db
//! ```
use kdirect::{DirectStream, SqlStore, StartPolicy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), kdirect::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, database] = args.as_slice() else {
        eprintln!("usage: postgres_exactly_once BOOTSTRAP TOPIC DATABASE_URL");
        std::process::exit(2);
    };
    let store = SqlStore::connect(database, "example-group").await?;
    let sink = store.sink_table("events_copy").await?;
    let mut stream = DirectStream::builder()
        .bootstrap(bootstrap)
        .topics(&[topic])
        .start(StartPolicy::Earliest)
        .until_latest(true)
        .set("isolation.level", "read_committed")?
        .store(store)
        .build()
        .await?;
    while let Some(batch) = stream.next_batch().await? {
        // The batch's offsets are written first (compare-and-set), then the records, then both
        // commit together.
        let mut tx = stream.begin(batch).await?;
        let rows = tx.insert_batch(&sink).await?;
        stream.commit_transaction(tx).await?;
        println!("{rows} rows");
    }
    Ok(())
}
