// Writes real Structured Streaming checkpoints for the `kdirect offsets import-spark` test
// (tests/it/spark.rs): Spark's own Kafka source (spark-sql-kafka-0-10) in local mode reads the
// given topics from the earliest offsets, at most MAX_OFFSETS records per micro-batch, into
// the `noop` sink with Trigger.AvailableNow, so the query ends once it has read what was there.
//
//   java ... SparkCheckpoint BOOTSTRAP MAX_OFFSETS DIR=TOPIC[+TOPIC...] [DIR=TOPIC...]
//
// Each DIR=... is one query, run in turn in one SparkSession; TOPIC+TOPIC makes one Kafka
// source per topic, unioned (a checkpoint whose offsets files have one line per source).
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

public class SparkCheckpoint {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: SparkCheckpoint BOOTSTRAP MAX_OFFSETS DIR=TOPIC[+TOPIC...]...");
            System.exit(2);
        }
        String bootstrap = args[0];
        String maxOffsets = args[1];
        SparkSession spark = SparkSession.builder()
            .master("local[1]")
            .appName("kdirect-import-spark-test")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate();
        spark.sparkContext().setLogLevel("WARN");
        for (int i = 2; i < args.length; i++) {
            String[] q = args[i].split("=", 2);
            Dataset<Row> all = null;
            for (String topic : q[1].split("\\+")) {
                Dataset<Row> one = spark.readStream()
                    .format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", maxOffsets)
                    .load()
                    .selectExpr("topic", "partition", "offset");
                all = all == null ? one : all.union(one);
            }
            StreamingQuery query = all.writeStream()
                .format("noop")
                .option("checkpointLocation", q[0])
                .trigger(Trigger.AvailableNow())
                .start();
            query.awaitTermination();
            System.out.println(q[0] + " batches=" + query.lastProgress().batchId());
        }
        spark.stop();
    }
}
