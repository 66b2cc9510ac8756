package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.stream.IntStream;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import strom.conformance.harness.Clients;
import strom.conformance.harness.Peers;
import strom.conformance.harness.StromNode;

/** The Java producer against one Strom node: every record it acknowledges reads back as sent. */
class ProducerTest {
    private final StromNode strom = Peers.strom();

    @ParameterizedTest(name = "acks={0}")
    @ValueSource(strings = {"0", "1", "all"})
    void everyAckLevelDeliversInOrder(String acks) {
        String topic = Clients.unique("acks");
        Clients.createTopic(strom, topic, 1, Map.of());
        List<String> values = IntStream.range(0, 500).mapToObj(i -> "value-" + i).toList();
        List<RecordMetadata> acknowledged = produce(topic, values, Map.of(
                ProducerConfig.ACKS_CONFIG, acks, ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false));

        if (!acks.equals("0")) {
            // Offsets are assigned in send order, from zero.
            assertEquals(IntStream.range(0, 500).boxed().toList(),
                    acknowledged.stream().map(m -> (int) m.offset()).toList());
        }
        assertEquals(values, readValues(topic, values.size()));
    }

    @Test
    void idempotentProducerWritesEachRecordOnce() {
        String topic = Clients.unique("idempotent");
        Clients.createTopic(strom, topic, 3, Map.of());
        List<String> values = IntStream.range(0, 3000).mapToObj(i -> "record-" + i).toList();
        produce(topic, values, Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
                ProducerConfig.LINGER_MS_CONFIG, 0,
                ProducerConfig.BATCH_SIZE_CONFIG, 512));

        List<String> read = readValues(topic, values.size());
        assertEquals(values.size(), read.size());
        assertEquals(values.stream().sorted().toList(), read.stream().sorted().toList());
    }

    @ParameterizedTest(name = "compression.type={0}")
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void everyCodecRoundTrips(String codec) {
        String topic = Clients.unique("codec-" + codec);
        Clients.createTopic(strom, topic, 1, Map.of());
        // Repetitive values, so each codec really shrinks the batch.
        List<String> values = IntStream.range(0, 2000)
                .mapToObj(i -> "record " + i + " " + "abcdefgh".repeat(i % 32)).toList();
        produce(topic, values, Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                ProducerConfig.LINGER_MS_CONFIG, 20));
        assertEquals(values, readValues(topic, values.size()));
    }

    @Test
    void headersKeysAndTimestampsRoundTrip() {
        String topic = Clients.unique("headers");
        Clients.createTopic(strom, topic, 1, Map.of());
        try (KafkaProducer<String, String> producer = Clients.producer(strom, Map.of())) {
            for (int i = 0; i < 10; i++) {
                List<Header> headers = List.of(
                        new RecordHeader("index", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("empty", new byte[0]),
                        new RecordHeader("null", null));
                producer.send(new ProducerRecord<>(topic, 0, 1_700_000_000_000L + i, i % 2 == 0 ? "key-" + i : null,
                        i == 9 ? null : "value-" + i, headers));
            }
            producer.flush();
        }
        try (KafkaConsumer<String, String> consumer = Clients.consumer(strom, Map.of())) {
            consumer.assign(List.of(new TopicPartition(topic, 0)));
            List<ConsumerRecord<String, String>> records = Clients.poll(consumer, 10);
            for (int i = 0; i < 10; i++) {
                ConsumerRecord<String, String> record = records.get(i);
                assertEquals(i % 2 == 0 ? "key-" + i : null, record.key());
                assertEquals(i == 9 ? null : "value-" + i, record.value());
                assertEquals(1_700_000_000_000L + i, record.timestamp());
                Header[] headers = record.headers().toArray();
                assertEquals(3, headers.length);
                assertEquals("index", headers[0].key());
                assertArrayEquals(Integer.toString(i).getBytes(StandardCharsets.UTF_8), headers[0].value());
                assertArrayEquals(new byte[0], headers[1].value());
                assertEquals(null, headers[2].value());
            }
        }
    }

    @Test
    void largeBatchesAndLargeRecords() {
        String topic = Clients.unique("large");
        Clients.createTopic(strom, topic, 1, Map.of());
        // Records from 1 byte to ~900 KB, in batches of up to 1 MiB.
        List<byte[]> values = new ArrayList<>();
        for (int size : new int[] {1, 1_000, 100_000, 500_000, 900_000, 10, 64_000}) {
            byte[] value = new byte[size];
            Arrays.fill(value, (byte) (size % 251));
            values.add(value);
        }
        try (KafkaProducer<byte[], byte[]> producer = Clients.bytesProducer(strom, Map.of(
                ProducerConfig.BATCH_SIZE_CONFIG, 1 << 20, ProducerConfig.LINGER_MS_CONFIG, 50,
                ProducerConfig.MAX_REQUEST_SIZE_CONFIG, 1 << 20))) {
            List<Future<RecordMetadata>> sent = values.stream()
                    .map(v -> producer.send(new ProducerRecord<byte[], byte[]>(topic, v))).toList();
            sent.forEach(Clients::get);
        }
        try (KafkaConsumer<byte[], byte[]> consumer = Clients.bytesConsumer(strom, Map.of())) {
            consumer.assign(List.of(new TopicPartition(topic, 0)));
            List<ConsumerRecord<byte[], byte[]>> records = Clients.poll(consumer, values.size());
            for (int i = 0; i < values.size(); i++) {
                assertArrayEquals(values.get(i), records.get(i).value(), "record " + i);
            }
        }
    }

    @Test
    void recordLargerThanTheTopicAllowsIsRefused() {
        String topic = Clients.unique("too-large");
        Clients.createTopic(strom, topic, 1, Map.of("max.message.bytes", "10000"));
        try (KafkaProducer<byte[], byte[]> producer = Clients.bytesProducer(strom, Map.of())) {
            Throwable failure = org.junit.jupiter.api.Assertions.assertThrows(Clients.KafkaCallFailed.class,
                    () -> Clients.get(producer.send(new ProducerRecord<>(topic, new byte[20_000])))).getCause();
            assertTrue(failure instanceof org.apache.kafka.common.errors.RecordTooLargeException, failure.toString());
        }
    }

    private List<RecordMetadata> produce(String topic, List<String> values, Map<String, Object> config) {
        try (KafkaProducer<String, String> producer = Clients.producer(strom, config)) {
            List<Future<RecordMetadata>> sent = values.stream()
                    .map(v -> producer.send(new ProducerRecord<>(topic, v))).toList();
            producer.flush();
            return sent.stream().map(Clients::get).toList();
        }
    }

    private List<String> readValues(String topic, int count) {
        try (KafkaConsumer<String, String> consumer = Clients.consumer(strom, Map.of())) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                    .map(p -> new TopicPartition(topic, p.partition())).toList();
            consumer.assign(partitions);
            return Clients.poll(consumer, count).stream().map(ConsumerRecord::value).toList();
        }
    }
}
