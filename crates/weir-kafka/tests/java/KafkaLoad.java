// Loads test data with Kafka's own Java client, so weir's consumer is tested against batches
// written by the reference implementation (each codec, transactions), not only by weir.
//
// Run with the jars of scripts/kafka.sh on the classpath (the source launcher compiles it):
//   java -cp "$(scripts/kafka.sh classpath)" KafkaLoad.java codecs BOOTSTRAP PREFIX PARTITIONS COUNT
//     topics PREFIX-none, -gzip, -snappy, -lz4, -zstd, each with COUNT records
//   java -cp ... KafkaLoad.java tx BOOTSTRAP TOPIC PARTITIONS TXNS PER_TXN
//     TXNS transactions of PER_TXN records; transaction t is aborted when t % 3 == 1
//
// Record i: key "k<i>", value "v<i>|" padded with '.' to 100 bytes, header "i" = "<i>",
// partition i % PARTITIONS. Transactional values are "t<t>-<j>" (key "k<t>-<j>").
import java.util.*;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KafkaLoad {
    static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            // createTopics returns once the controller has the topic; the broker takes leadership
            // a little later. Wait for a leader on every partition (at most 60 s), so a slow start
            // shows up here, by name, instead of as an expired batch two minutes later.
            long deadline = System.currentTimeMillis() + 60_000;
            while (true) {
                int led = 0;
                try {
                    TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                    for (org.apache.kafka.common.TopicPartitionInfo i : d.partitions())
                        if (i.leader() != null && !i.leader().isEmpty()) led++;
                } catch (java.util.concurrent.ExecutionException e) {
                    // Not yet known to the broker's metadata: keep waiting.
                }
                if (led == partitions) break;
                if (System.currentTimeMillis() > deadline)
                    throw new IllegalStateException("topic " + topic + ": " + led + " of " + partitions
                        + " partitions have a leader 60 s after creation");
                Thread.sleep(50);
            }
        }
    }

    static Properties producerProps(String bootstrap, String compression) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("compression.type", compression);
        p.put("linger.ms", "5");
        p.put("batch.size", "65536");
        p.put("acks", "all");
        // A request the broker never answers is abandoned after 20 s and sent again (the default,
        // 30 s, leaves room for few retries inside the 120 s delivery timeout on a loaded machine).
        p.put("request.timeout.ms", "20000");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    // Every send's outcome, checked before "ok" is printed: a record the broker never took must
    // fail the load, not show up later as a missing record in the consumer's count.
    static final List<java.util.concurrent.Future<RecordMetadata>> SENT = new ArrayList<>();

    static void checkSent() throws Exception {
        for (java.util.concurrent.Future<RecordMetadata> f : SENT) f.get();
        SENT.clear();
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String value(int i) {
        StringBuilder v = new StringBuilder("v" + i + "|");
        while (v.length() < 100) v.append('.');
        return v.toString();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        if (mode.equals("codecs")) {
            int count = Integer.parseInt(args[4]);
            for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
                String t = topic + "-" + codec;
                createTopic(bootstrap, t, partitions);
                try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(producerProps(bootstrap, codec))) {
                    for (int i = 0; i < count; i++) {
                        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(t, i % partitions, b("k" + i), b(value(i)));
                        r.headers().add("i", b(Integer.toString(i)));
                        SENT.add(prod.send(r));
                    }
                    prod.flush();
                    checkSent();
                }
            }
        } else if (mode.equals("tx")) {
            int txns = Integer.parseInt(args[4]), perTxn = Integer.parseInt(args[5]);
            createTopic(bootstrap, topic, partitions);
            Properties p = producerProps(bootstrap, "none");
            p.put("transactional.id", "weir-test-" + topic);
            p.put("enable.idempotence", "true");
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
                prod.initTransactions();
                for (int t = 0; t < txns; t++) {
                    prod.beginTransaction();
                    for (int j = 0; j < perTxn; j++) {
                        prod.send(new ProducerRecord<>(topic, (t + j) % partitions, b("k" + t + "-" + j), b("t" + t + "-" + j)));
                    }
                    prod.flush();
                    if (t % 3 == 1) prod.abortTransaction(); else prod.commitTransaction();
                }
            }
        } else {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.out.println("ok");
    }
}
