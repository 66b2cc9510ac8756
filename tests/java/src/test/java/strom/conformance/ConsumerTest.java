package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import strom.conformance.harness.Clients;
import strom.conformance.harness.Peers;
import strom.conformance.harness.StromNode;
import strom.conformance.harness.Target;
import strom.conformance.harness.Wait;

/** The Java consumer against one Strom node: both group protocols, seeks, offsets by time, isolation. */
class ConsumerTest {
    private static final int PARTITIONS = 4;

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void classicRangeAssignorSplitsPartitionsBetweenMembers(Target target) {
        String topic = topicWithRecords(target, 40);
        String group = Clients.unique("range");
        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName());
        try (KafkaConsumer<String, String> first = Clients.consumer(target, config);
             KafkaConsumer<String, String> second = Clients.consumer(target, config)) {
            first.subscribe(List.of(topic));
            second.subscribe(List.of(topic));
            awaitTwoPartitionsEach(first, second);
            Set<TopicPartition> all = new HashSet<>(first.assignment());
            all.addAll(second.assignment());
            assertEquals(PARTITIONS, all.size());
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void cooperativeStickyRebalanceRevokesOnlyWhatMoves(Target target) {
        String topic = topicWithRecords(target, 40);
        String group = Clients.unique("cooperative");
        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName());
        List<TopicPartition> firstRevoked = new CopyOnWriteArrayList<>();
        try (KafkaConsumer<String, String> first = Clients.consumer(target, config);
             KafkaConsumer<String, String> second = Clients.consumer(target, config)) {
            first.subscribe(List.of(topic), recordRevocations(firstRevoked));
            Wait.until("the first member holds every partition", Clients.TIMEOUT, () -> {
                first.poll(Duration.ofMillis(50));
                return first.assignment().size() == PARTITIONS;
            });
            Set<TopicPartition> before = Set.copyOf(first.assignment());
            second.subscribe(List.of(topic));
            awaitTwoPartitionsEach(first, second);
            // Cooperative: the first member gave up exactly what moved, and kept the rest throughout.
            assertEquals(Set.copyOf(second.assignment()), Set.copyOf(firstRevoked));
            assertTrue(before.containsAll(first.assignment()));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void staticMemberRejoiningWithinTheSessionKeepsItsPartitions(Target target) {
        String topic = topicWithRecords(target, 40);
        String group = Clients.unique("static");
        Map<String, Object> base = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 30_000);
        Map<String, Object> firstConfig = new HashMap<>(base);
        firstConfig.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "instance-a");
        Map<String, Object> secondConfig = new HashMap<>(base);
        secondConfig.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "instance-b");
        List<TopicPartition> secondRevoked = new CopyOnWriteArrayList<>();
        try (KafkaConsumer<String, String> second = Clients.consumer(target, secondConfig)) {
            second.subscribe(List.of(topic), recordRevocations(secondRevoked));
            Set<TopicPartition> firstHeld;
            try (KafkaConsumer<String, String> first = Clients.consumer(target, firstConfig)) {
                first.subscribe(List.of(topic));
                awaitTwoPartitionsEach(first, second);
                firstHeld = Set.copyOf(first.assignment());
            }
            secondRevoked.clear();
            // A static member's close sends no LeaveGroup: its restart takes its place back.
            try (KafkaConsumer<String, String> restarted = Clients.consumer(target, firstConfig)) {
                restarted.subscribe(List.of(topic));
                Wait.until("the restarted member holds its partitions", Clients.TIMEOUT, () -> {
                    restarted.poll(Duration.ofMillis(50));
                    second.poll(Duration.ofMillis(50));
                    return restarted.assignment().equals(firstHeld);
                });
                second.poll(Duration.ofMillis(200));
                assertEquals(List.of(), secondRevoked, "the other member saw a rebalance");
                assertEquals(2, second.assignment().size());
            }
        }
    }

    /**
     * A KIP-848 group whose consumer.session.timeout.ms is set to 2 s (the
     * broker's bounds lowered to allow it): a static member that leaves for
     * a restart keeps its partitions only that long, then the other member
     * takes them, not after the broker's 45 s.
     */
    @Test
    void aGroupsOwnSessionTimeoutEndsASilentMember() throws Exception {
        try (StromNode node = StromNode.single(Map.of("group.consumer.min.session.timeout.ms", "1000",
                "group.consumer.min.heartbeat.interval.ms", "500", "group.consumer.heartbeat.interval.ms", "500")).start()) {
            String topic = topicWithRecords(node, 4);
            String group = Clients.unique("short-session");
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            try (Admin admin = Clients.admin(node)) {
                Clients.get(admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                        new ConfigEntry("consumer.session.timeout.ms", "2000"), AlterConfigOp.OpType.SET)))).all());
            }
            Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                    ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            Map<String, Object> staticConfig = new HashMap<>(config);
            staticConfig.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "restarting");
            KafkaConsumer<String, String> silent = Clients.consumer(node, staticConfig);
            silent.subscribe(List.of(topic));
            Wait.until("the first member owns every partition", Clients.TIMEOUT, () -> {
                silent.poll(Duration.ofMillis(50));
                return silent.assignment().size() == PARTITIONS;
            });
            // A static member's temporary leave: only the session timeout ends it.
            silent.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.REMAIN_IN_GROUP));
            try (KafkaConsumer<String, String> other = Clients.consumer(node, config)) {
                other.subscribe(List.of(topic));
                long started = System.nanoTime();
                Wait.until("the other member owns every partition", Duration.ofSeconds(20), () -> {
                    other.poll(Duration.ofMillis(50));
                    return other.assignment().size() == PARTITIONS;
                });
                double seconds = (System.nanoTime() - started) / 1e9;
                System.out.printf("partitions moved %.1f s after the silent member's last heartbeat%n", seconds);
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void consumerGroupProtocolAssignsOnTheServer(Target target) {
        String topic = topicWithRecords(target, 40);
        String group = Clients.unique("kip848");
        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        try (KafkaConsumer<String, String> first = Clients.consumer(target, config);
             KafkaConsumer<String, String> second = Clients.consumer(target, config)) {
            first.subscribe(List.of(topic));
            second.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> read = new ArrayList<>();
            Wait.until("two partitions each and every record read", Clients.TIMEOUT, () -> {
                first.poll(Duration.ofMillis(50)).forEach(read::add);
                second.poll(Duration.ofMillis(50)).forEach(read::add);
                return first.assignment().size() == 2 && second.assignment().size() == 2 && read.size() >= 40;
            });
            assertEquals(40, read.size());
            first.commitSync();
            second.commitSync();
            try (Admin admin = Clients.admin(target)) {
                ConsumerGroupDescription description = Clients.get(
                        admin.describeConsumerGroups(List.of(group)).all()).get(group);
                assertEquals(GroupType.CONSUMER, description.type());
                assertEquals(2, description.members().size());
                long committed = Clients.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())
                        .values().stream().mapToLong(o -> o.offset()).sum();
                assertEquals(40, committed);
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void seekAndOffsetsForTimes(Target target) {
        String topic = Clients.unique("seek");
        Clients.createTopic(target, topic, 1, Map.of());
        long base = 1_700_000_000_000L;
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of())) {
            for (int i = 0; i < 100; i++) {
                producer.send(new ProducerRecord<>(topic, 0, base + i * 1000L, null, "v" + i));
            }
            producer.flush();
        }
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = Clients.consumer(target, Map.of())) {
            consumer.assign(List.of(partition));
            consumer.seek(partition, 42);
            assertEquals("v42", Clients.poll(consumer, 1).get(0).value());

            Map<TopicPartition, OffsetAndTimestamp> byTime = consumer.offsetsForTimes(
                    Map.of(partition, base + 10_500L), Clients.TIMEOUT);
            assertEquals(11, byTime.get(partition).offset());
            assertEquals(base + 11_000L, byTime.get(partition).timestamp());
            Map<TopicPartition, OffsetAndTimestamp> pastTheEnd = consumer.offsetsForTimes(
                    Map.of(partition, base + 1_000_000L), Clients.TIMEOUT);
            assertEquals(null, pastTheEnd.get(partition));

            assertEquals(0L, consumer.beginningOffsets(List.of(partition)).get(partition));
            assertEquals(100L, consumer.endOffsets(List.of(partition)).get(partition));
            consumer.seekToEnd(List.of(partition));
            assertEquals(100L, consumer.position(partition));
            consumer.seekToBeginning(List.of(partition));
            assertEquals(0L, consumer.position(partition));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void readCommittedSkipsAbortedAndWaitsForOpenTransactions(Target target) {
        String topic = Clients.unique("isolation");
        Clients.createTopic(target, topic, 1, Map.of());
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, Clients.unique("txn")))) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "committed-1"));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "aborted"));
            producer.flush(); // else the abort drops the record before it reaches the broker
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "committed-2"));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "open"));
            producer.flush();

            try (KafkaConsumer<String, String> committed = Clients.consumer(target, Map.of(
                    ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
                 KafkaConsumer<String, String> uncommitted = Clients.consumer(target, Map.of())) {
                committed.assign(List.of(partition));
                uncommitted.assign(List.of(partition));
                assertEquals(List.of("committed-1", "aborted", "committed-2", "open"),
                        values(Clients.poll(uncommitted, 4)));
                assertEquals(List.of("committed-1", "committed-2"), values(Clients.poll(committed, 2)));
                // The open transaction holds the last stable offset below its first record.
                assertEquals(Map.of(partition, 6L), committed.endOffsets(List.of(partition)));
                producer.commitTransaction();
                assertEquals(List.of("open"), values(Clients.poll(committed, 1)));
            }
        }
    }

    private static String topicWithRecords(Target target, int count) {
        String topic = Clients.unique("group-topic");
        Clients.createTopic(target, topic, PARTITIONS, Map.of());
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of())) {
            IntStream.range(0, count).forEach(i ->
                    producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, "r" + i)));
            producer.flush();
        }
        return topic;
    }

    /** Polls both members until the group has given each two partitions. */
    private static void awaitTwoPartitionsEach(KafkaConsumer<String, String> first, KafkaConsumer<String, String> second) {
        Wait.until("two partitions each", Clients.TIMEOUT, () -> {
            first.poll(Duration.ofMillis(50));
            second.poll(Duration.ofMillis(50));
            return first.assignment().size() == 2 && second.assignment().size() == 2;
        });
    }

    private static ConsumerRebalanceListener recordRevocations(List<TopicPartition> revoked) {
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                revoked.addAll(partitions);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
        };
    }

    private static List<String> values(List<ConsumerRecord<String, String>> records) {
        assertNotNull(records);
        return records.stream().map(ConsumerRecord::value).toList();
    }
}
