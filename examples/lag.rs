//! A checkpoint's lag, through the library alone: what `kdirect lag --store checkpoint:DIR -t
//! TOPIC` prints — per partition the committed position, the log's start and end, the lag, and
//! the retention margin (offsets retention may still remove before it eats unread data).
//!
//! ```sh
//! cargo run --example lag -- 127.0.0.1:9092 events /tmp/ckpt
//! ```
use kdirect::admin::Admin;
use kdirect::{CheckpointStore, IsolationLevel};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, checkpoint] = args.as_slice() else {
        eprintln!("usage: lag BOOTSTRAP TOPIC CHECKPOINT_DIR");
        std::process::exit(2);
    };
    let admin = Admin::connect(bootstrap, &[]).await?;
    let store = CheckpointStore::open(checkpoint, 100)?;
    let lag = admin
        .lag(
            &store,
            std::slice::from_ref(topic),
            IsolationLevel::ReadUncommitted,
        )
        .await?;
    let dash = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    println!("partition\tcommitted\tlog_start\tend\tlag\tmargin");
    for (tp, p) in &lag.partitions {
        println!(
            "{tp}\t{}\t{}\t{}\t{}\t{}",
            dash(p.committed),
            p.log.start,
            p.log.end,
            dash(p.lag()),
            dash(p.margin())
        );
    }
    println!("total lag\t{}", dash(lag.total()));
    if lag.lost() > 0 {
        println!(
            "data lost\t{} offsets retention removed before they were read",
            lag.lost()
        );
    }
    Ok(())
}
