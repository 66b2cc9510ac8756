package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import strom.conformance.harness.Clients;
import strom.conformance.harness.Peers;
import strom.conformance.harness.Target;
import strom.conformance.harness.Wait;

/** The Java client's transactions against one Strom node. */
class TransactionsTest {

    /** The exactly-once loop: consume, transform, produce and commit the input offsets in one transaction. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void consumeTransformProduceLoopIsExactlyOnce(Target target) {
        String input = Clients.unique("eos-in");
        String output = Clients.unique("eos-out");
        String group = Clients.unique("eos-group");
        Clients.createTopic(target, input, 3, Map.of());
        Clients.createTopic(target, output, 3, Map.of());
        int count = 300;
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of())) {
            IntStream.range(0, count).forEach(i -> producer.send(new ProducerRecord<>(input, "k" + i, "" + i)));
            producer.flush();
        }
        // Two runs of the processor: the first aborts its last transaction, the
        // second resumes from the committed offsets and redoes that work.
        process(target, input, output, group, count / 2, true);
        process(target, input, output, group, count, false);

        try (KafkaConsumer<String, String> reader = Clients.consumer(target, Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            reader.assign(IntStream.range(0, 3).mapToObj(p -> new TopicPartition(output, p)).toList());
            List<ConsumerRecord<String, String>> out = Clients.poll(reader, count);
            reader.poll(Duration.ofMillis(500)).forEach(out::add);
            List<Integer> numbers = out.stream().map(r -> Integer.parseInt(r.value()) / 2).sorted().toList();
            assertEquals(IntStream.range(0, count).boxed().toList(), numbers, "each input once in the output");
        }
        try (Admin admin = Clients.admin(target)) {
            long committed = Clients.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())
                    .values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            assertEquals(count, committed);
        }
    }

    /**
     * Copies doubled values from input to output until {@code inputs} inputs
     * are consumed; with {@code abortLast} the final transaction is aborted.
     */
    private static void process(Target target, String input, String output, String group, int inputs,
            boolean abortLast) {
        Map<String, Object> consumerConfig = new HashMap<>();
        consumerConfig.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerConfig.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        consumerConfig.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        consumerConfig.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 25);
        int consumed = committedCount(target, group);
        try (KafkaConsumer<String, String> consumer = Clients.consumer(target, consumerConfig);
             KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                     ProducerConfig.TRANSACTIONAL_ID_CONFIG, "eos-processor-" + group))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long deadline = System.nanoTime() + Clients.TIMEOUT.toNanos();
            while (consumed < inputs) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("processor stalled at " + consumed + " of " + inputs);
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> record : records) {
                    producer.send(new ProducerRecord<>(output, record.key(), "" + Integer.parseInt(record.value()) * 2));
                    offsets.put(new TopicPartition(record.topic(), record.partition()),
                            new OffsetAndMetadata(record.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                consumed += records.count();
                if (abortLast && consumed >= inputs) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
            }
        }
    }

    private static int committedCount(Target target, String group) {
        try (Admin admin = Clients.admin(target)) {
            return (int) Clients.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())
                    .values().stream().mapToLong(OffsetAndMetadata::offset).sum();
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void secondProducerWithTheSameIdFencesTheFirst(Target target) {
        String topic = Clients.unique("fencing");
        Clients.createTopic(target, topic, 1, Map.of());
        String transactionalId = Clients.unique("fenced");
        Map<String, Object> config = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        try (KafkaProducer<String, String> first = Clients.producer(target, config);
             KafkaProducer<String, String> second = Clients.producer(target, config)) {
            first.initTransactions();
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, "from-first"));
            first.flush();
            // The second's InitProducerId aborts the first's open transaction and bumps the epoch.
            second.initTransactions();
            second.beginTransaction();
            second.send(new ProducerRecord<>(topic, "from-second"));
            second.commitTransaction();
            // The fenced producer's next write is refused with the epoch error, as Kafka refuses it.
            assertThrows(InvalidProducerEpochException.class, () -> {
                first.send(new ProducerRecord<>(topic, "late"));
                first.commitTransaction();
            });
        }
        try (KafkaConsumer<String, String> reader = Clients.consumer(target, Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            reader.assign(List.of(new TopicPartition(topic, 0)));
            List<String> values = new ArrayList<>();
            Clients.poll(reader, 1).forEach(r -> values.add(r.value()));
            reader.poll(Duration.ofMillis(300)).forEach(r -> values.add(r.value()));
            assertEquals(List.of("from-second"), values);
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("strom.conformance.harness.Peers#both")
    void abortedTransactionLeavesNoCommittedOffsets(Target target) {
        String topic = Clients.unique("txn-offsets");
        String group = Clients.unique("txn-offsets-group");
        Clients.createTopic(target, topic, 1, Map.of());
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, Clients.unique("offsets")));
             Admin admin = Clients.admin(target)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.sendOffsetsToTransaction(Map.of(partition, new OffsetAndMetadata(7)),
                    new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
            producer.abortTransaction();
            assertEquals(Map.of(), Clients.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()));

            producer.beginTransaction();
            producer.sendOffsetsToTransaction(Map.of(partition, new OffsetAndMetadata(9)),
                    new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
            producer.commitTransaction();
            Wait.until("the committed offset", Clients.TIMEOUT, () -> {
                OffsetAndMetadata offset = Clients.get(admin.listConsumerGroupOffsets(group)
                        .partitionsToOffsetAndMetadata()).get(partition);
                return offset != null && offset.offset() == 9;
            });
        }
    }
}
