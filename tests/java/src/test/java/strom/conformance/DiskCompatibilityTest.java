package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.junit.jupiter.api.Test;
import strom.conformance.harness.Clients;
import strom.conformance.harness.KafkaPeer;
import strom.conformance.harness.StromCluster;
import strom.conformance.harness.Target;
import strom.conformance.harness.Wait;

/**
 * One broker's log dir served by the other: a KRaft node's whole dir
 * (meta.properties, the metadata log, segments, indexes, checkpoints, the
 * group and transaction topics) written by Apache Kafka and served by
 * Strom, and the other way round. Every committed record reads back with
 * its key, value, headers and offset; the aborted ones stay hidden; the
 * group's committed offsets are there.
 */
class DiskCompatibilityTest {
    private static final String TOPIC = "written-elsewhere";
    private static final String GROUP = "written-elsewhere-group";
    private static final int RECORDS = 200;
    /** Recent, so retention keeps the records whichever broker looks. */
    private static final long TIMESTAMP = System.currentTimeMillis();

    @Test
    void kafkasLogDirServedByStrom() {
        String dataDir;
        try (KafkaPeer kafka = new KafkaPeer(Map.of())) {
            // Kafka 4.1's metadata version, the one Strom serves, without
            // transaction protocol v2, which Strom does not serve yet: a
            // broker registers only where it supports every finalized level.
            kafka.format(org.apache.kafka.common.Uuid.randomUuid().toString(), "--release-version", "4.1-IV1",
                    "--feature", "transaction.version=0");
            kafka.start();
            write(kafka);
            kafka.stop();
            dataDir = kafka.config().get("log.dirs");
        }
        try (StromCluster strom = new StromCluster(1, Map.of("log.dirs", dataDir)).start()) {
            verify(strom);
        }
    }

    @Test
    void stromsLogDirServedByKafka() {
        String dataDir;
        try (StromCluster strom = new StromCluster(1, Map.of()).start()) {
            write(strom);
            strom.node(1).stop();
            dataDir = strom.node(1).config().get("log.dirs");
        }
        try (KafkaPeer kafka = new KafkaPeer(Map.of("log.dirs", dataDir)).start()) {
            verify(kafka);
        }
    }

    /** Committed records in plain and gzip batches, an aborted transaction, a committed one, a group's offsets. */
    private static void write(Target target) {
        Clients.createTopic(target, TOPIC, 2, Map.of());
        for (String codec : List.of("none", "gzip")) {
            try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                    ProducerConfig.COMPRESSION_TYPE_CONFIG, codec))) {
                for (int i = 0; i < RECORDS / 2; i++) {
                    producer.send(record(codec + "-" + i, i % 2));
                }
                producer.flush();
            }
        }
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, "written-elsewhere-txn"))) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(record("aborted", 0));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(record("committed-in-txn", 1));
            producer.commitTransaction();
        }
        try (Admin admin = Clients.admin(target)) {
            Clients.get(admin.alterConsumerGroupOffsets(GROUP, Map.of(
                    new TopicPartition(TOPIC, 0), new OffsetAndMetadata(42, "from elsewhere"))).all());
        }
    }

    private static ProducerRecord<String, String> record(String value, int partition) {
        return new ProducerRecord<>(TOPIC, partition, TIMESTAMP, "key-" + value, value,
                List.of(new RecordHeader("written-by", value.getBytes(StandardCharsets.UTF_8))));
    }

    private static void verify(Target target) {
        List<String> expected = new ArrayList<>();
        for (String codec : List.of("none", "gzip")) {
            IntStream.range(0, RECORDS / 2).forEach(i -> expected.add(codec + "-" + i));
        }
        expected.add("committed-in-txn");
        List<ConsumerRecord<String, String>> read;
        try (KafkaConsumer<String, String> consumer = Clients.consumer(target, Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            consumer.assign(List.of(new TopicPartition(TOPIC, 0), new TopicPartition(TOPIC, 1)));
            read = Clients.poll(consumer, expected.size());
            consumer.poll(Duration.ofMillis(500)).forEach(read::add);
        }
        assertEquals(expected.stream().sorted().toList(), read.stream().map(ConsumerRecord::value).sorted().toList());
        for (ConsumerRecord<String, String> record : read) {
            assertEquals("key-" + record.value(), record.key());
            assertEquals(record.value(), new String(record.headers().lastHeader("written-by").value(), StandardCharsets.UTF_8));
            assertEquals(TIMESTAMP, record.timestamp());
        }
        Map<Integer, List<Long>> offsets = read.stream().collect(Collectors.groupingBy(ConsumerRecord::partition,
                Collectors.mapping(ConsumerRecord::offset, Collectors.toList())));
        assertEquals(IntStream.range(0, RECORDS / 2).mapToObj(i -> (long) i).toList(), offsets.get(0).subList(0, RECORDS / 2),
                "partition 0's offsets, before the transactions");
        try (Admin admin = Clients.admin(target)) {
            Wait.until("the group's offsets loaded", Clients.TIMEOUT, () -> {
                OffsetAndMetadata committed = Clients.get(admin.listConsumerGroupOffsets(GROUP)
                        .partitionsToOffsetAndMetadata()).get(new TopicPartition(TOPIC, 0));
                return committed != null && committed.offset() == 42 && committed.metadata().equals("from elsewhere");
            });
        }
    }
}
