//! Starting where a Spark Structured Streaming query stopped, through the library alone: what
//! `kdirect offsets import-spark SPARK_CHECKPOINT --store checkpoint:DIR -b … [--execute]`
//! does. The query's checkpoint (a local copy) is read, its Kafka source's positions are
//! checked against each partition's log, and written to a kdirect checkpoint, whose next
//! batch is Spark's next. Without `--execute` it is a dry run that prints the positions.
//!
//! Needs a Kafka cluster: its bootstrap address is read from `KDIRECT_BOOTSTRAP`.
//!
//! ```sh
//! KDIRECT_BOOTSTRAP=127.0.0.1:9092 cargo run --example import_spark -- \
//!     /data/spark-checkpoint /data/kdirect-checkpoint --execute
//! ```
use kdirect::admin::{Admin, SparkCheckpoint, Take};
use kdirect::{CheckpointStore, OffsetStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (execute, args) = match args.split_last() {
        Some((last, rest)) if last == "--execute" => (true, rest.to_vec()),
        _ => (false, args),
    };
    let ([spark_dir, checkpoint], Ok(bootstrap)) =
        (args.as_slice(), std::env::var("KDIRECT_BOOTSTRAP"))
    else {
        eprintln!(
            "usage: KDIRECT_BOOTSTRAP=HOST:PORT import_spark SPARK_CHECKPOINT CHECKPOINT_DIR \
             [--execute]"
        );
        std::process::exit(2);
    };
    // Spark's last batch may be planned and not committed: start where it stopped (its
    // records are read again) rather than refuse.
    let spark = SparkCheckpoint::read(spark_dir)?.resolve(Some(Take::Committed), None)?;
    let admin = Admin::connect(&bootstrap, &[]).await?;
    let import = admin.plan_import_spark(&spark).await?;
    for tp in &import.unread {
        println!("# {tp}: not in Spark's offsets, a stream starts it by its start policy");
    }
    if execute {
        let store = CheckpointStore::open(checkpoint, 100)?;
        let done = import.execute(&store).await?;
        println!(
            "wrote {} positions as batch {}",
            import.positions.len(),
            done.batch_id
        );
    } else {
        // A dry run creates nothing: a checkpoint not there yet holds nothing.
        let before = if std::path::Path::new(checkpoint).exists() {
            let store = CheckpointStore::open(checkpoint, 100)?;
            store.load(&import.topics()).await?
        } else {
            kdirect::Committed::default()
        };
        for (tp, o) in &import.positions {
            println!("{tp}\t{o}");
        }
        println!(
            "# dry run: nothing written; add --execute to write these positions as batch {}",
            import.batch_id(&before)
        );
    }
    Ok(())
}
