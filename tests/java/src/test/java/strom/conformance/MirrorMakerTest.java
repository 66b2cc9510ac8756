package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.Test;
import strom.conformance.harness.Clients;
import strom.conformance.harness.ConnectWorker;
import strom.conformance.harness.Ports;
import strom.conformance.harness.StromNode;
import strom.conformance.harness.Wait;

/**
 * MirrorMaker 2, as connectors in a Connect worker on the target, from one
 * Strom cluster to another: the topic with its records and configs, and a
 * consumer group's offsets, translated, so the group's consumer fails over
 * to the target and misses nothing.
 */
class MirrorMakerTest {
    private static final Duration MIRROR_TIMEOUT = Duration.ofSeconds(90);

    @Test
    void topicsConfigsAndGroupOffsetsReachTheTarget() {
        try (StromNode source = StromNode.single(Map.of()).start();
             StromNode target = StromNode.single(Map.of()).start()) {
            String topic = Clients.unique("orders");
            String group = Clients.unique("billing");
            Clients.createTopic(source, topic, 2, Map.of("retention.ms", "12345678"));
            try (KafkaProducer<String, String> producer = Clients.producer(source, Map.of())) {
                IntStream.range(0, 100).forEach(i -> producer.send(new ProducerRecord<>(topic, i % 2, null, "order-" + i)));
                producer.flush();
            }
            // The group reads 60 records on the source and commits.
            List<String> readOnSource = consume(source, group, topic, 60);

            try (ConnectWorker worker = new ConnectWorker(target, Clients.unique("mm2"), Ports.free())) {
                worker.put("mirror-source", mirror(source, target, Map.of(
                        "connector.class", "org.apache.kafka.connect.mirror.MirrorSourceConnector",
                        "topics", topic,
                        // A sync per record: offsets translate exactly.
                        "offset.lag.max", "0",
                        "sync.topic.configs.interval.seconds", "1")));
                worker.put("mirror-checkpoint", mirror(source, target, Map.of(
                        "connector.class", "org.apache.kafka.connect.mirror.MirrorCheckpointConnector",
                        "groups", group,
                        "emit.checkpoints.interval.seconds", "1",
                        "sync.group.offsets.enabled", "true",
                        "sync.group.offsets.interval.seconds", "1")));

                String mirrored = "source." + topic;
                Wait.until("the records mirrored", MIRROR_TIMEOUT, () -> endOffsets(target, mirrored, 2) == 100);
                Wait.until("the topic config mirrored", MIRROR_TIMEOUT, () ->
                        "12345678".equals(topicConfig(target, mirrored).get("retention.ms").value()));
                // MirrorMaker translates conservatively, to the last offset it
                // synced at or before the group's: never past where it stopped.
                Wait.until("the group's offsets translated", MIRROR_TIMEOUT, () ->
                        committed(target, group, mirrored) > 0);
                assertTrue(committed(target, group, mirrored) <= 60, "translated past the source's commit");
                assertEquals("RUNNING", worker.connectorState("mirror-source"));
            }

            // The consumer fails over: on the target it reads on from the translated offsets, losing nothing.
            long translated = committed(target, group, "source." + topic);
            List<String> readOnTarget = consume(target, group, "source." + topic, (int) (100 - translated));
            assertEquals(100, committed(target, group, "source." + topic), "the group at the end of the mirror");
            java.util.Set<String> all = new java.util.TreeSet<>(readOnSource);
            all.addAll(readOnTarget);
            assertEquals(new java.util.TreeSet<>(IntStream.range(0, 100).mapToObj(i -> "order-" + i).toList()), all,
                    "every order read across the failover");
        }
    }

    private static Map<String, String> mirror(StromNode source, StromNode target, Map<String, String> own) {
        Map<String, String> config = new HashMap<>(own);
        config.put("source.cluster.alias", "source");
        config.put("target.cluster.alias", "target");
        config.put("source.cluster.bootstrap.servers", source.bootstrap());
        config.put("target.cluster.bootstrap.servers", target.bootstrap());
        config.put("replication.factor", "1");
        config.put("offset-syncs.topic.replication.factor", "1");
        config.put("checkpoints.topic.replication.factor", "1");
        config.put("refresh.topics.interval.seconds", "1");
        config.put("refresh.groups.interval.seconds", "1");
        config.put("key.converter", "org.apache.kafka.connect.converters.ByteArrayConverter");
        config.put("value.converter", "org.apache.kafka.connect.converters.ByteArrayConverter");
        config.put("tasks.max", "1");
        return config;
    }

    /** Reads {@code count} records as a member of the group, commits, and leaves. */
    private static List<String> consume(StromNode node, String group, String topic, int count) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = Clients.consumer(node, Map.of(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false,
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10))) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Clients.TIMEOUT.toNanos();
            while (values.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(100))) {
                    if (values.size() < count) {
                        values.add(record.value());
                        consumer.commitSync(Map.of(new TopicPartition(topic, record.partition()),
                                new OffsetAndMetadata(record.offset() + 1)));
                    }
                }
            }
        }
        assertEquals(count, values.size(), "records read from " + topic + ": " + values);
        return values;
    }

    private static long endOffsets(StromNode node, String topic, int partitions) {
        try (KafkaConsumer<String, String> consumer = Clients.consumer(node, Map.of())) {
            return consumer.endOffsets(IntStream.range(0, partitions).mapToObj(p -> new TopicPartition(topic, p)).toList())
                    .values().stream().mapToLong(Long::longValue).sum();
        }
    }

    private static Config topicConfig(StromNode node, String topic) {
        try (Admin admin = Clients.admin(node)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            return Clients.get(admin.describeConfigs(List.of(resource)).all()).get(resource);
        }
    }

    private static long committed(StromNode node, String group, String topic) {
        try (Admin admin = Clients.admin(node)) {
            return Clients.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()).entrySet().stream()
                    .filter(e -> e.getKey().topic().equals(topic)).mapToLong(e -> e.getValue().offset()).sum();
        }
    }
}
