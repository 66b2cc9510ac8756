package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.junit.jupiter.api.Test;
import strom.conformance.harness.Clients;
import strom.conformance.harness.Peers;
import strom.conformance.harness.StromCluster;
import strom.conformance.harness.StromNode;
import strom.conformance.harness.Wait;

/** The Java client against the three-node KRaft Strom cluster the run shares. */
class ClusterTest {
    private final StromCluster cluster = Peers.cluster();

    /**
     * An idempotent acks=all producer with five requests in flight keeps
     * sending while the leader of its partition is killed: every record is
     * acknowledged, and each partition holds each record once, in send order.
     */
    @Test
    void idempotentProducerRetriesThroughALeaderKill() throws Exception {
        String topic = Clients.unique("failover");
        Clients.createTopic(cluster, topic, 3, (short) 3, Map.of("min.insync.replicas", "2"));
        int victim = cluster.leaderOf(topic, 0);
        int count = 6_000;
        List<ProducerRecord<String, String>> sent = new ArrayList<>();
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        try (KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of(
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
                ProducerConfig.LINGER_MS_CONFIG, 2,
                ProducerConfig.BATCH_SIZE_CONFIG, 4096,
                ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120_000,
                ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000))) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> record = new ProducerRecord<>(topic, i % 3, null, "r" + i);
                sent.add(record);
                acks.add(producer.send(record));
                if (i == count / 3) {
                    Wait.until("a third of the records acknowledged", Clients.TIMEOUT, () -> acks.get(count / 4).isDone());
                    cluster.node(victim).kill9();
                }
            }
            producer.flush();
            for (Future<RecordMetadata> ack : acks) {
                ack.get(); // every record acknowledged: none may fail
            }
        }
        cluster.node(victim).start();

        Map<Integer, List<String>> expected = new HashMap<>();
        sent.forEach(r -> expected.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r.value()));
        Map<Integer, List<String>> read = readAll(topic, 3, count);
        for (int partition = 0; partition < 3; partition++) {
            assertEquals(expected.get(partition), read.get(partition), "partition " + partition);
        }
    }

    /**
     * A topic's and a broker's configs in one request: the Java client sends
     * the broker's part to that broker, which takes it, on every broker.
     */
    @Test
    void topicAndBrokerConfigsInOneRequestOnEveryBroker() {
        String topic = Clients.unique("mixed-configs");
        Clients.createTopic(cluster, topic, 1, (short) 3, Map.of());
        try (Admin admin = Clients.admin(cluster)) {
            for (StromNode node : cluster.nodes()) {
                ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node.nodeId()));
                Clients.get(admin.incrementalAlterConfigs(Map.of(
                        new ConfigResource(ConfigResource.Type.TOPIC, topic),
                        List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "100000"), AlterConfigOp.OpType.SET)),
                        broker,
                        List.of(new AlterConfigOp(new ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000"),
                                AlterConfigOp.OpType.SET)))).all());
                Wait.until("broker " + node.nodeId() + " describes its new config", Clients.TIMEOUT, () -> "58000".equals(
                        Clients.get(admin.describeConfigs(List.of(broker)).all()).get(broker)
                                .get("sasl.kerberos.min.time.before.relogin").value()));
            }
        }
    }

    /**
     * A partition on brokers 2 and 1 reassigned to 3 and 2 (KIP-455): the
     * move completes, the leader stays on 2 until a preferred election
     * moves it to 3, a second election is not needed, nor an unclean one
     * while the leader lives; every record is read back from the new replicas.
     */
    @Test
    void reassignmentThenPreferredAndUncleanElections() {
        String topic = Clients.unique("moved");
        TopicPartition partition = new TopicPartition(topic, 0);
        try (Admin admin = Clients.admin(cluster)) {
            Clients.get(admin.createTopics(List.of(new NewTopic(topic, Map.of(0, List.of(2, 1))))).all());
            try (KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of(ProducerConfig.ACKS_CONFIG, "all"))) {
                for (int i = 0; i < 20; i++) {
                    Clients.get(producer.send(new ProducerRecord<>(topic, 0, null, "m" + i)));
                }
            }
            Clients.get(admin.alterPartitionReassignments(Map.of(partition,
                    Optional.of(new NewPartitionReassignment(List.of(3, 2))))).all());
            Wait.until("the reassignment done", Clients.TIMEOUT, () -> {
                TopicPartitionInfo info = describe(admin, topic);
                return Clients.get(admin.listPartitionReassignments().reassignments()).isEmpty()
                        && replicaIds(info.replicas()).equals(List.of(3, 2))
                        && replicaIds(info.isr()).containsAll(List.of(3, 2));
            });
            assertEquals(2, describe(admin, topic).leader().id(), "the leader stays on a replica it keeps");

            Clients.get(admin.electLeaders(ElectionType.PREFERRED, Set.of(partition)).all());
            Wait.until("the preferred replica leads", Clients.TIMEOUT, () -> describe(admin, topic).leader().id() == 3);
            assertCause(ElectionNotNeededException.class, admin.electLeaders(ElectionType.PREFERRED, Set.of(partition)).all());
            assertCause(ElectionNotNeededException.class, admin.electLeaders(ElectionType.UNCLEAN, Set.of(partition)).all());
        }
        List<String> expected = java.util.stream.IntStream.range(0, 20).mapToObj(i -> "m" + i).toList();
        assertEquals(expected, readAll(topic, 1, 20).get(0));
    }

    private static TopicPartitionInfo describe(Admin admin, String topic) {
        return Clients.get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().get(0);
    }

    private static List<Integer> replicaIds(List<Node> nodes) {
        return nodes.stream().map(Node::id).toList();
    }

    private static void assertCause(Class<? extends Throwable> expected, Future<?> future) {
        Clients.KafkaCallFailed failure = org.junit.jupiter.api.Assertions.assertThrows(
                Clients.KafkaCallFailed.class, () -> Clients.get(future));
        org.junit.jupiter.api.Assertions.assertInstanceOf(expected, failure.getCause(), failure.getCause().toString());
    }

    @Test
    void consumerGroupOnTheClusterCommitsAndResumes() {
        String topic = Clients.unique("cluster-group");
        String group = Clients.unique("cluster-group");
        Clients.createTopic(cluster, topic, 3, (short) 3, Map.of());
        try (KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of(ProducerConfig.ACKS_CONFIG, "all"))) {
            for (int i = 0; i < 90; i++) {
                producer.send(new ProducerRecord<>(topic, i % 3, null, "v" + i));
            }
            producer.flush();
        }
        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false, ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
        List<String> first = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = Clients.consumer(cluster, config)) {
            consumer.subscribe(List.of(topic));
            while (first.size() < 30) {
                consumer.poll(Duration.ofMillis(100)).forEach(r -> first.add(r.value()));
            }
            consumer.commitSync();
        }
        List<String> rest = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = Clients.consumer(cluster, config)) {
            consumer.subscribe(List.of(topic));
            rest.addAll(Clients.poll(consumer, 90 - first.size()).stream().map(ConsumerRecord::value).toList());
        }
        List<String> all = new ArrayList<>(first);
        all.addAll(rest);
        Collections.sort(all);
        List<String> expected = new ArrayList<>(java.util.stream.IntStream.range(0, 90).mapToObj(i -> "v" + i).toList());
        Collections.sort(expected);
        assertEquals(expected, all, "each record once across the two consumers");
        assertTrue(first.size() >= 30);
    }

    private Map<Integer, List<String>> readAll(String topic, int partitions, int count) {
        Map<Integer, List<String>> read = new HashMap<>();
        try (KafkaConsumer<String, String> consumer = Clients.consumer(cluster, Map.of())) {
            consumer.assign(java.util.stream.IntStream.range(0, partitions)
                    .mapToObj(p -> new TopicPartition(topic, p)).toList());
            for (ConsumerRecord<String, String> record : Clients.poll(consumer, count)) {
                read.computeIfAbsent(record.partition(), p -> new ArrayList<>()).add(record.value());
            }
            consumer.poll(Duration.ofMillis(300)).forEach(r ->
                    read.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r.value()));
        }
        return read;
    }
}
