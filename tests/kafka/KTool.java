// The Java side of kdirect's real-broker tests: Kafka's own Java producer, consumer and admin
// client, so the data kdirect reads is written (and checked) by an implementation that is not
// kdirect's. Compiled by tests/kafka/kafka.sh against the fetched jars; run as
//   java -cp "target/kafka/tool:tests/kafka/lib-4.1.1/*" KTool COMMAND --bootstrap B [options]
//
// Commands:
//   create      --topic T --partitions P [--rf R] [--config k=v,...]
//   produce     --topic T --partitions P --count N [--codec none|gzip|snappy|lz4|zstd]
//               [--headers] [--value-size S] [--from I] [--timestamp-base MS]
//               [--transactional-id X --abort-every K] [--batch-size B] [--linger-ms L]
//               [--keep-going]  (produce round-robin until killed)
//               [--key-space K] (keys k{p}-{n mod K}: each key rewritten, for compaction)
//               [--tombstone-every T] (every T-th record of a partition has a null value)
//               [--max-request-size B] (records larger than 1 MiB)
//               [--hold-open]   (transactional: then open one more transaction, send one
//                                record per partition, print "OPEN" and wait to be killed)
//   consume     --topic T [--isolation read_committed|read_uncommitted]
//               prints every record up to the end offsets seen at start, sorted by partition
//               and offset, one line each: "p offset key value h1=v1,h2=v2" (hex, "-" for null)
//   add-partitions --topic T --total N
//   delete-topic   --topic T
//   delete-records --topic T --partition P --before OFFSET
//   end-offsets    --topic T [--isolation read_committed]   "p offset" per partition
//   topic-id       --topic T
//   wait-isr       --topic T --replicas R  (until every partition has R in-sync replicas)
//   elect-unclean  --topic T [--partition P] [--not N]   an unclean leader election (retried
//               until the partition has a leader other than node N — a killed leader stays
//               leader until the controller fences it — up to 60 s); prints its node id
//   describe       --topic T   "p leader replicas isr" per partition (comma-separated ids)
//   perf           --topic T --records N [--check-crcs true|false] [--consumer.KEY VALUE]...
//               the Java consumer in
//               benches/e2e.rs: reads N records from the start of every partition, tuned for
//               throughput, and prints "RESULT records= bytes= secs= cpu= rss_kib= checksum="
//               (the checksum: wrapping sum of CRC32C(key ++ value) per record, as the others)
//   group-consume --topic T --group G --out FILE --stop STOPFILE [--assignor range|roundrobin]
//               [--session-timeout-ms MS] [--heartbeat-interval-ms MS] [--max-poll-records N]
//               [--instance-id ID] [--isolation read_committed]   a group member (see below)
//               [--group-protocol consumer]   KIP-848 (--assignor then names the coordinator's:
//               uniform, range; the session and heartbeat options are the broker's)
//   tick        --topic T --partitions P --every-ms MS   benches/group.rs: one record per
//               partition every MS ms until killed (key "p", value the send time in ms)
//   produce-gated --topic T --partitions P --count N --value-size S --transactional-id X
//               --gate FILE   benches/group.rs: all N records in one open transaction, then
//               "READY" on stdout; once FILE exists, commit, print "COMMITTED" and exit
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class KTool {
  static Map<String, String> opts = new HashMap<>();

  static String opt(String k) {
    String v = opts.get(k);
    if (v == null) throw new IllegalArgumentException("missing --" + k);
    return v;
  }

  static String opt(String k, String dflt) { return opts.getOrDefault(k, dflt); }

  public static void main(String[] args) throws Exception {
    String cmd = args[0];
    for (int i = 1; i < args.length; i++) {
      String a = args[i];
      if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected " + a);
      String k = a.substring(2);
      if (i + 1 < args.length && !args[i + 1].startsWith("--")) opts.put(k, args[++i]);
      else opts.put(k, "true");
    }
    switch (cmd) {
      case "create": create(); break;
      case "produce": produce(); break;
      case "consume": consume(); break;
      case "add-partitions": addPartitions(); break;
      case "delete-topic": deleteTopic(); break;
      case "delete-records": deleteRecords(); break;
      case "end-offsets": endOffsets(); break;
      case "topic-id": topicId(); break;
      case "elect-unclean": electUnclean(); break;
      case "describe": describe(); break;
      case "wait-isr": waitIsr(); break;
      case "perf": perf(); break;
      case "group-consume": groupConsume(); break;
      case "tick": tick(); break;
      case "produce-gated": produceGated(); break;
      default: throw new IllegalArgumentException("unknown command " + cmd);
    }
  }

  static Admin admin() {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opt("bootstrap"));
    return Admin.create(p);
  }

  static void create() throws Exception {
    try (Admin a = admin()) {
      NewTopic t = new NewTopic(opt("topic"), Integer.parseInt(opt("partitions")),
          Short.parseShort(opt("rf", "1")));
      Map<String, String> cfg = new HashMap<>();
      for (String kv : opt("config", "").split(",")) {
        if (kv.isEmpty()) continue;
        String[] parts = kv.split("=", 2);
        cfg.put(parts[0], parts[1]);
      }
      t.configs(cfg);
      a.createTopics(List.of(t)).all().get(60, TimeUnit.SECONDS);
      // Metadata reaches every broker shortly after the controller commits it.
      for (int i = 0; i < 200; i++) {
        try {
          TopicDescription d = a.describeTopics(List.of(opt("topic"))).allTopicNames().get()
              .get(opt("topic"));
          if (d.partitions().stream().allMatch(x -> x.leader() != null)) return;
        } catch (ExecutionException e) {
          // not yet known
        }
        Thread.sleep(50);
      }
      throw new IllegalStateException("topic " + opt("topic") + " has no leaders after 10 s");
    }
  }

  static void waitIsr() throws Exception {
    int want = Integer.parseInt(opt("replicas"));
    try (Admin a = admin()) {
      for (int i = 0; i < 1200; i++) {
        TopicDescription d = a.describeTopics(List.of(opt("topic"))).allTopicNames().get()
            .get(opt("topic"));
        if (d.partitions().stream().allMatch(x -> x.isr().size() >= want && x.leader() != null)) {
          return;
        }
        Thread.sleep(100);
      }
      throw new IllegalStateException("ISR of " + opt("topic") + " never reached " + want);
    }
  }

  static void addPartitions() throws Exception {
    try (Admin a = admin()) {
      a.createPartitions(Map.of(opt("topic"), NewPartitions.increaseTo(Integer.parseInt(opt("total")))))
          .all().get(60, TimeUnit.SECONDS);
    }
  }

  static void deleteTopic() throws Exception {
    try (Admin a = admin()) {
      a.deleteTopics(List.of(opt("topic"))).all().get(60, TimeUnit.SECONDS);
      for (int i = 0; i < 400; i++) {
        if (!a.listTopics().names().get().contains(opt("topic"))) return;
        Thread.sleep(50);
      }
    }
  }

  static void deleteRecords() throws Exception {
    try (Admin a = admin()) {
      TopicPartition tp = new TopicPartition(opt("topic"), Integer.parseInt(opt("partition")));
      a.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(Long.parseLong(opt("before")))))
          .all().get(60, TimeUnit.SECONDS);
    }
  }

  static void topicId() throws Exception {
    try (Admin a = admin()) {
      System.out.println(a.describeTopics(List.of(opt("topic"))).allTopicNames().get()
          .get(opt("topic")).topicId());
    }
  }

  // An unclean leader election for one partition (Admin.electLeaders, ElectionType.UNCLEAN),
  // retried until the partition has a leader (up to 60 s): a replica out of the ISR becomes the
  // leader with whatever its log holds. Prints the leader's node id.
  static void electUnclean() throws Exception {
    TopicPartition tp = new TopicPartition(opt("topic"), Integer.parseInt(opt("partition", "0")));
    int not = Integer.parseInt(opt("not", "-1"));
    try (Admin a = admin()) {
      Exception last = null;
      for (int i = 0; i < 600; i++) {
        try {
          a.electLeaders(ElectionType.UNCLEAN, Set.of(tp)).partitions().get(10, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
          last = e; // ELECTION_NOT_NEEDED once a leader is there; not available before
        }
        TopicDescription d = a.describeTopics(List.of(tp.topic())).allTopicNames().get()
            .get(tp.topic());
        Node leader = d.partitions().get(tp.partition()).leader();
        if (leader != null && !leader.isEmpty() && leader.id() != not) {
          System.out.println(leader.id());
          return;
        }
        Thread.sleep(100);
      }
      throw new IllegalStateException("no leader for " + tp + " after 60 s", last);
    }
  }

  // One line per partition: "P LEADER REPLICAS ISR" (replicas and ISR comma-separated; leader
  // -1 when none).
  static void describe() throws Exception {
    try (Admin a = admin()) {
      TopicDescription d = a.describeTopics(List.of(opt("topic"))).allTopicNames().get()
          .get(opt("topic"));
      for (TopicPartitionInfo p : d.partitions()) {
        StringJoiner r = new StringJoiner(","), isr = new StringJoiner(",");
        for (Node n : p.replicas()) r.add(Integer.toString(n.id()));
        for (Node n : p.isr()) isr.add(Integer.toString(n.id()));
        int leader = p.leader() == null || p.leader().isEmpty() ? -1 : p.leader().id();
        System.out.println(p.partition() + " " + leader + " " + r + " " + isr);
      }
    }
  }

  static String hex(byte[] b) {
    if (b == null) return "-";
    StringBuilder s = new StringBuilder(b.length * 2 + 1);
    s.append('x');
    for (byte x : b) s.append(String.format("%02x", x));
    return s.toString();
  }

  static void produce() throws Exception {
    String topic = opt("topic");
    int partitions = Integer.parseInt(opt("partitions"));
    long count = Long.parseLong(opt("count", "0"));
    long from = Long.parseLong(opt("from", "0"));
    int valueSize = Integer.parseInt(opt("value-size", "0"));
    boolean headers = opts.containsKey("headers");
    long ts0 = Long.parseLong(opt("timestamp-base", "-1"));
    String txId = opts.get("transactional-id");
    int abortEvery = Integer.parseInt(opt("abort-every", "0"));
    boolean keepGoing = opts.containsKey("keep-going");
    long keySpace = Long.parseLong(opt("key-space", "0"));
    long tombstoneEvery = Long.parseLong(opt("tombstone-every", "0"));
    // --rate N: at most N records per second (checked per chunk), for runs that must not
    // flood their consumers.
    long rate = Long.parseLong(opt("rate", "0"));
    long rateStart = System.nanoTime();

    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("bootstrap"));
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, opt("codec", "none"));
    p.put(ProducerConfig.BATCH_SIZE_CONFIG, opt("batch-size", "65536"));
    p.put(ProducerConfig.LINGER_MS_CONFIG, opt("linger-ms", "5"));
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    // --max-request-size B: records larger than the default 1 MiB request.
    p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, opt("max-request-size", "1048576"));
    if (txId != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId);
    try (KafkaProducer<byte[], byte[]> prod =
        new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
      if (txId != null) prod.initTransactions();
      long i = from;
      long txn = 0;
      while (keepGoing || i < from + count) {
        long end = keepGoing ? i + partitions * 10L : from + count;
        if (txId != null) {
          // one transaction per chunk of `partitions * 10` records; every abort-every'th aborted
          end = Math.min(end, i + partitions * 10L);
          prod.beginTransaction();
        }
        // The first send that failed, if any (futures are not kept: 10M of them do not fit).
        java.util.concurrent.atomic.AtomicReference<Exception> failed = new java.util.concurrent.atomic.AtomicReference<>();
        for (; i < end; i++) {
          int part = (int) (i % partitions);
          long n = i / partitions;
          // --key-space K: keys k{p}-{n mod K}, each rewritten many times (compacted topics).
          byte[] key = ("k" + part + "-" + (keySpace > 0 ? n % keySpace : n)).getBytes();
          byte[] value;
          if (valueSize > 0) {
            value = new byte[valueSize];
            for (int j = 0; j < valueSize; j++) value[j] = (byte) ('a' + (n + j) % 26);
          } else {
            value = ("value " + part + "-" + n + (txId != null ? " txn " + txn : "")).getBytes();
          }
          // --tombstone-every T: every T-th record of a partition is a tombstone (null value).
          if (tombstoneEvery > 0 && n % tombstoneEvery == tombstoneEvery - 1) value = null;
          ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, part,
              ts0 < 0 ? null : ts0 + n * 1000, key, value);
          if (headers) {
            r.headers().add("h1", ("v" + n).getBytes());
            r.headers().add("empty", new byte[0]);
            r.headers().add("nullh", null);
          }
          prod.send(r, (md, e) -> { if (e != null) failed.compareAndSet(null, e); });
        }
        if (txId != null) {
          txn++;
          // Aborted records reach the log first (a bare abort drops what is still buffered).
          if (abortEvery > 0 && txn % abortEvery == 0) {
            prod.flush();
            prod.abortTransaction();
          }
          else prod.commitTransaction();
        } else {
          prod.flush();
        }
        if (failed.get() != null) throw failed.get();
        if (rate > 0) {
          long due = rateStart + (i - from) * 1_000_000_000L / rate;
          long wait = due - System.nanoTime();
          if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        }
      }
      if (txId != null && opts.containsKey("hold-open")) {
        prod.beginTransaction();
        for (int part = 0; part < partitions; part++) {
          prod.send(new ProducerRecord<>(topic, part, ("open" + part).getBytes(), "open".getBytes()));
        }
        prod.flush();
        System.out.println("OPEN");
        System.out.flush();
        Thread.sleep(600_000);
      }
    }
  }

  static KafkaConsumer<byte[], byte[]> consumer() {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("bootstrap"));
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, opt("isolation", "read_uncommitted"));
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
    return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  static List<TopicPartition> partitionsOf(KafkaConsumer<?, ?> c, String topic) {
    List<TopicPartition> tps = new ArrayList<>();
    List<PartitionInfo> infos = c.partitionsFor(topic);
    if (infos == null || infos.isEmpty()) throw new IllegalStateException("unknown topic " + topic);
    for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
    tps.sort(Comparator.comparingInt(TopicPartition::partition));
    return tps;
  }

  static void perf() throws Exception {
    long want = Long.parseLong(opt("records"));
    long started = System.nanoTime();
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("bootstrap"));
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.CHECK_CRCS_CONFIG, opt("check-crcs", "true"));
    p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
    p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "52428800");
    p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "4194304");
    p.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, "1048576");
    // --consumer.KEY VALUE: any consumer setting (benches/e2e.rs's SASL_SSL row).
    for (Map.Entry<String, String> e : opts.entrySet()) {
      if (e.getKey().startsWith("consumer.")) p.put(e.getKey().substring("consumer.".length()), e.getValue());
    }
    long records = 0, bytes = 0, checksum = 0;
    java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
    try (KafkaConsumer<byte[], byte[]> c =
        new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      List<TopicPartition> tps = partitionsOf(c, opt("topic"));
      c.assign(tps);
      c.seekToBeginning(tps);
      long deadline = System.currentTimeMillis() + 900_000;
      while (records < want) {
        if (System.currentTimeMillis() > deadline) throw new IllegalStateException("timed out at " + records);
        for (ConsumerRecord<byte[], byte[]> r : c.poll(java.time.Duration.ofMillis(100))) {
          byte[] k = r.key(), v = r.value();
          crc.reset();
          if (k != null) { crc.update(k); bytes += k.length; }
          if (v != null) { crc.update(v); bytes += v.length; }
          checksum += crc.getValue();
          records++;
        }
      }
    }
    double secs = (System.nanoTime() - started) / 1e9;
    double cpu = ((com.sun.management.OperatingSystemMXBean)
        java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime() / 1e9;
    long rss = 0;
    for (String l : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/status"))) {
      if (l.startsWith("VmHWM:")) rss = Long.parseLong(l.replaceAll("[^0-9]", ""));
    }
    System.out.printf("RESULT records=%d bytes=%d secs=%.4f cpu=%.2f rss_kib=%d checksum=%016x%n",
        records, bytes, secs, cpu, rss, checksum);
  }

  // A member of a consumer group (subscribe, the classic protocol): each record read is a line
  // "partition offset" on --out, offsets committed (commitSync) after each poll, so that a
  // clean handover loses and repeats nothing. Assignments and revocations go to stderr as
  // "ASSIGNED p,p,..." / "REVOKED p,p,...". Runs until the file --stop exists, then closes
  // (LeaveGroup).
  static void groupConsume() throws Exception {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("bootstrap"));
    p.put(ConsumerConfig.GROUP_ID_CONFIG, opt("group"));
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, opt("max-poll-records", "200"));
    if (opt("group-protocol", "classic").equals("consumer")) {
      // KIP-848: the coordinator assigns and sets the session and heartbeat timings; the
      // client refuses the classic settings.
      p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
      if (opts.containsKey("assignor")) p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, opt("assignor"));
    } else {
      p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, opt("session-timeout-ms", "10000"));
      p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, opt("heartbeat-interval-ms", "1000"));
      String assignor = opt("assignor", "range");
      p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
          assignor.equals("roundrobin") ? RoundRobinAssignor.class.getName()
              : assignor.equals("cooperative-sticky") ? CooperativeStickyAssignor.class.getName()
              : assignor.equals("default") ? RangeAssignor.class.getName() + "," + CooperativeStickyAssignor.class.getName()
              : RangeAssignor.class.getName());
    }
    if (opts.containsKey("instance-id")) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, opt("instance-id"));
    if (opts.containsKey("isolation")) p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, opt("isolation"));
    java.nio.file.Path stop = java.nio.file.Path.of(opt("stop"));
    try (java.io.PrintWriter out = new java.io.PrintWriter(new java.io.FileWriter(opt("out"), true));
         KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      c.subscribe(List.of(opt("topic")), new ConsumerRebalanceListener() {
        public void onPartitionsRevoked(Collection<TopicPartition> ps) { report("REVOKED", ps); }
        public void onPartitionsAssigned(Collection<TopicPartition> ps) { report("ASSIGNED", ps); }
        void report(String what, Collection<TopicPartition> ps) {
          List<Integer> l = new ArrayList<>();
          for (TopicPartition tp : ps) l.add(tp.partition());
          Collections.sort(l);
          System.err.println(what + " " + l);
          System.err.flush();
        }
      });
      while (!java.nio.file.Files.exists(stop)) {
        ConsumerRecords<byte[], byte[]> rs = c.poll(java.time.Duration.ofMillis(100));
        for (ConsumerRecord<byte[], byte[]> r : rs) out.println(r.partition() + " " + r.offset());
        out.flush();
        if (!rs.isEmpty()) c.commitSync();
      }
    }
  }

  static KafkaProducer<byte[], byte[]> producer(String txId) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opt("bootstrap"));
    p.put(ProducerConfig.BATCH_SIZE_CONFIG, opt("batch-size", "65536"));
    p.put(ProducerConfig.LINGER_MS_CONFIG, opt("linger-ms", "5"));
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    if (txId != null) {
      p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId);
      p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "600000");
    }
    return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
  }

  // A record per partition every --every-ms ms until killed, each sent at once (linger 0):
  // the availability runs of benches/group.rs measure when each partition is read again.
  static void tick() throws Exception {
    String topic = opt("topic");
    int partitions = Integer.parseInt(opt("partitions"));
    long every = Long.parseLong(opt("every-ms", "5"));
    opts.put("linger-ms", "0");
    try (KafkaProducer<byte[], byte[]> prod = producer(null)) {
      long next = System.currentTimeMillis();
      while (true) {
        long now = System.currentTimeMillis();
        for (int part = 0; part < partitions; part++) {
          prod.send(new ProducerRecord<>(topic, part, ("" + part).getBytes(), ("" + now).getBytes()));
        }
        next += every;
        long wait = next - System.currentTimeMillis();
        if (wait > 0) Thread.sleep(wait);
        else next = System.currentTimeMillis();
      }
    }
  }

  // The throughput runs of benches/group.rs: the records become readable (read_committed) all
  // at once, after the group has settled, so that no join or rebalance is inside the timing.
  static void produceGated() throws Exception {
    String topic = opt("topic");
    int partitions = Integer.parseInt(opt("partitions"));
    long count = Long.parseLong(opt("count"));
    int valueSize = Integer.parseInt(opt("value-size", "100"));
    java.nio.file.Path gate = java.nio.file.Path.of(opt("gate"));
    try (KafkaProducer<byte[], byte[]> prod = producer(opt("transactional-id"))) {
      prod.initTransactions();
      prod.beginTransaction();
      java.util.concurrent.atomic.AtomicReference<Exception> failed = new java.util.concurrent.atomic.AtomicReference<>();
      for (long i = 0; i < count; i++) {
        int part = (int) (i % partitions);
        long n = i / partitions;
        byte[] value = new byte[valueSize];
        for (int j = 0; j < valueSize; j++) value[j] = (byte) ('a' + (n + j) % 26);
        prod.send(new ProducerRecord<>(topic, part, ("k" + part + "-" + n).getBytes(), value),
            (md, e) -> { if (e != null) failed.compareAndSet(null, e); });
      }
      prod.flush();
      if (failed.get() != null) throw failed.get();
      System.out.println("READY");
      System.out.flush();
      while (!java.nio.file.Files.exists(gate)) Thread.sleep(1);
      prod.commitTransaction();
      System.out.println("COMMITTED");
      System.out.flush();
    }
  }

  static void endOffsets() throws Exception {
    try (KafkaConsumer<byte[], byte[]> c = consumer()) {
      List<TopicPartition> tps = partitionsOf(c, opt("topic"));
      Map<TopicPartition, Long> ends = c.endOffsets(tps);
      for (TopicPartition tp : tps) System.out.println(tp.partition() + " " + ends.get(tp));
    }
  }

  static void consume() throws Exception {
    try (KafkaConsumer<byte[], byte[]> c = consumer()) {
      List<TopicPartition> tps = partitionsOf(c, opt("topic"));
      c.assign(tps);
      c.seekToBeginning(tps);
      Map<TopicPartition, Long> ends = c.endOffsets(tps);
      Map<Integer, List<String>> out = new TreeMap<>();
      Set<TopicPartition> open = new HashSet<>();
      for (TopicPartition tp : tps) {
        out.put(tp.partition(), new ArrayList<>());
        if (c.position(tp) < ends.get(tp)) open.add(tp);
      }
      long deadline = System.currentTimeMillis() + 120_000;
      while (!open.isEmpty()) {
        if (System.currentTimeMillis() > deadline) throw new IllegalStateException("consume timed out");
        for (ConsumerRecord<byte[], byte[]> r : c.poll(java.time.Duration.ofMillis(200))) {
          TopicPartition tp = new TopicPartition(r.topic(), r.partition());
          if (r.offset() >= ends.get(tp)) continue;
          StringBuilder h = new StringBuilder();
          for (Header x : r.headers()) {
            if (h.length() > 0) h.append(',');
            h.append(x.key()).append('=').append(hex(x.value()));
          }
          out.get(r.partition()).add(r.partition() + " " + r.offset() + " " + hex(r.key()) + " "
              + hex(r.value()) + " " + (h.length() == 0 ? "-" : h.toString()));
        }
        open.removeIf(tp -> c.position(tp) >= ends.get(tp));
      }
      StringBuilder all = new StringBuilder();
      for (List<String> lines : out.values()) for (String l : lines) all.append(l).append('\n');
      System.out.print(all);
    }
  }
}
