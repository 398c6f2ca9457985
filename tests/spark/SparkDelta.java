// Delta Lake through Apache Spark (delta-spark, local mode), for the tests that read kdirect's
// Delta tables with a reader kdirect did not write (tests/it/spark.rs) and for the lakehouse
// benchmark (benches/e2e.rs --suite lakehouse), which lands a topic as Delta with Spark's own
// Structured Streaming job.
//
//   java ... SparkDelta read TABLE
//       the table as Spark reads it: `SCHEMA <simpleString>`, one `TXN <appId> <version>` per
//       SetTransaction in the table's snapshot (what Spark's own streaming Delta sink and
//       kafka-delta-ingest read back), and one `ROW <topic> <partition> <offset> <value hex>`
//       per row (`-` for a null value).
//   java ... SparkDelta json TABLE COLUMNS
//       `SCHEMA <simpleString>`, then each row's COLUMNS (comma-separated) as Spark's toJSON
//       writes them, one `JSON <object>` line per row (a null field is left out, as Spark
//       does).
//   java ... SparkDelta check TABLE
//       per Kafka partition: `PART <partition> <rows> <distinct offsets> <min> <max>` (SQL over
//       the table; every offset once when rows = distinct = max - min + 1).
//   java ... SparkDelta stream BOOTSTRAP TOPIC MAX_OFFSETS CHECKPOINT TABLE
//       Spark's Kafka source (startingOffsets earliest, includeHeaders true: the columns
//       kdirect's Delta sink writes) into Spark's Delta sink, Trigger.AvailableNow, at most
//       MAX_OFFSETS records per micro-batch (0: no limit, one batch). Prints
//       `RESULT records=N batches=B secs=S` (S: the query alone, not the JVM's start).
//
// The master is $KDIRECT_SPARK_MASTER (default local[1]).
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.streaming.DataStreamReader;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.Trigger;

public class SparkDelta {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: SparkDelta read TABLE | check TABLE | "
                + "stream BOOTSTRAP TOPIC MAX_OFFSETS CHECKPOINT TABLE");
            System.exit(2);
        }
        String master = System.getenv().getOrDefault("KDIRECT_SPARK_MASTER", "local[1]");
        SparkSession spark = SparkSession.builder()
            .master(master)
            .appName("kdirect-delta")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog",
                "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            .getOrCreate();
        spark.sparkContext().setLogLevel("WARN");
        switch (args[0]) {
            case "read": read(spark, args[1]); break;
            case "check": check(spark, args[1]); break;
            case "json": json(spark, args[1], args[2].split(",")); break;
            case "stream":
                if (args.length != 6) {
                    System.err.println("stream BOOTSTRAP TOPIC MAX_OFFSETS CHECKPOINT TABLE");
                    System.exit(2);
                }
                stream(spark, args[1], args[2], Long.parseLong(args[3]), args[4], args[5]);
                break;
            default:
                System.err.println("unknown command " + args[0]);
                System.exit(2);
        }
        spark.stop();
    }

    static void json(SparkSession spark, String table, String[] columns) {
        Dataset<Row> df = spark.read().format("delta").load(table);
        StringBuilder out = new StringBuilder();
        out.append("SCHEMA ").append(df.schema().simpleString()).append('\n');
        org.apache.spark.sql.Column[] cols = new org.apache.spark.sql.Column[columns.length];
        for (int i = 0; i < columns.length; i++) {
            cols[i] = df.col(columns[i]);
        }
        for (String line : df.select(cols).toJSON().collectAsList()) {
            out.append("JSON ").append(line).append('\n');
        }
        System.out.print(out);
    }

    static void read(SparkSession spark, String table) {
        Dataset<Row> df = spark.read().format("delta").load(table);
        StringBuilder out = new StringBuilder();
        out.append("SCHEMA ").append(df.schema().simpleString()).append('\n');
        Snapshot snapshot = DeltaLog.forTableWithSnapshot(spark, table)._2();
        List<SetTransaction> txns =
            scala.jdk.javaapi.CollectionConverters.asJava(snapshot.setTransactions());
        for (SetTransaction t : txns) {
            out.append("TXN ").append(t.appId()).append(' ').append(t.version()).append('\n');
        }
        for (Row r : df.select("topic", "partition", "offset", "value").collectAsList()) {
            out.append("ROW ").append(r.getString(0)).append(' ').append(r.getInt(1))
                .append(' ').append(r.getLong(2)).append(' ');
            if (r.isNullAt(3)) {
                out.append('-');
            } else {
                for (byte b : (byte[]) r.get(3)) {
                    out.append(String.format("%02x", b & 0xff));
                }
            }
            out.append('\n');
        }
        System.out.print(out);
    }

    static void check(SparkSession spark, String table) {
        spark.read().format("delta").load(table).createOrReplaceTempView("t");
        List<Row> rows = spark.sql("SELECT partition, count(*), count(DISTINCT offset), "
            + "min(offset), max(offset) FROM t GROUP BY partition ORDER BY partition")
            .collectAsList();
        for (Row r : rows) {
            System.out.println("PART " + r.getInt(0) + " " + r.getLong(1) + " " + r.getLong(2)
                + " " + r.getLong(3) + " " + r.getLong(4));
        }
    }

    static void stream(SparkSession spark, String bootstrap, String topic, long maxOffsets,
                       String checkpoint, String table) throws Exception {
        AtomicLong records = new AtomicLong();
        spark.streams().addListener(new StreamingQueryListener() {
            @Override public void onQueryStarted(QueryStartedEvent e) {}
            @Override public void onQueryProgress(QueryProgressEvent e) {
                records.addAndGet(e.progress().numInputRows());
            }
            @Override public void onQueryTerminated(QueryTerminatedEvent e) {}
        });
        DataStreamReader reader = spark.readStream()
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true");
        if (maxOffsets > 0) {
            reader = reader.option("maxOffsetsPerTrigger", Long.toString(maxOffsets));
        }
        long started = System.nanoTime();
        StreamingQuery query = reader.load().writeStream()
            .format("delta")
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(Trigger.AvailableNow())
            .start(table);
        query.awaitTermination();
        double secs = (System.nanoTime() - started) / 1e9;
        // The listener's events arrive on the listener bus, after the batch: wait for the last.
        spark.sparkContext().listenerBus().waitUntilEmpty();
        long batches = query.lastProgress() == null ? 0 : query.lastProgress().batchId() + 1;
        System.out.println("RESULT records=" + records.get() + " batches=" + batches
            + " secs=" + String.format("%.3f", secs));
    }
}
