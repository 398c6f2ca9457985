//! Resetting a store's positions with `kafka-consumer-groups`' vocabulary, through the
//! library alone: what `kdirect offsets reset --store checkpoint:DIR -t TOPIC --to-earliest
//! [--execute]` does. Without `--execute` it is a dry run that prints the new positions.
//!
//! ```sh
//! cargo run --example offsets_reset -- 127.0.0.1:9092 events /tmp/ckpt earliest --execute
//! ```
//! The target is `earliest`, `latest`, an offset, `shift=N`, or `datetime=MS` (ms since the
//! Unix epoch).
use kdirect::admin::{Admin, ResetTo};
use kdirect::CheckpointStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (execute, args) = match args.split_last() {
        Some((last, rest)) if last == "--execute" => (true, rest.to_vec()),
        _ => (false, args),
    };
    let [bootstrap, topic, checkpoint, target] = args.as_slice() else {
        eprintln!("usage: offsets_reset BOOTSTRAP TOPIC CHECKPOINT_DIR TARGET [--execute]");
        std::process::exit(2);
    };
    let to = match target.as_str() {
        "earliest" => ResetTo::Earliest,
        "latest" => ResetTo::Latest,
        t => match (t.strip_prefix("shift="), t.strip_prefix("datetime=")) {
            (Some(n), _) => ResetTo::ShiftBy(n.parse()?),
            (_, Some(ms)) => ResetTo::Datetime(ms.parse()?),
            _ => ResetTo::Offset(t.parse()?),
        },
    };
    let admin = Admin::connect(bootstrap, &[]).await?;
    let store = CheckpointStore::open(checkpoint, 100)?;
    let reset = admin
        .plan_reset(&store, std::slice::from_ref(topic), &to)
        .await?;
    for (tp, new) in &reset.positions {
        let was = reset.before.positions.get(tp);
        let was = was.map_or_else(|| "-".to_owned(), i64::to_string);
        println!("{tp}\t{was}\t{new}");
    }
    if execute {
        reset.execute(&store).await?;
    } else {
        println!("# dry run: nothing written; add --execute to write these positions");
    }
    Ok(())
}
