package strom.conformance.harness;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** The Java client, configured for a test: string or byte records, bounded timeouts. */
public final class Clients {
    public static final Duration TIMEOUT = Duration.ofSeconds(30);

    private Clients() {}

    /** A name no other test uses. */
    public static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    public static Admin admin(Target target) {
        return Admin.create(Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, target.bootstrap(),
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis()));
    }

    public static KafkaProducer<String, String> producer(Target target, Map<String, Object> overrides) {
        Map<String, Object> config = new HashMap<>();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, target.bootstrap());
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        config.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis());
        config.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis() / 2);
        config.putAll(overrides);
        return new KafkaProducer<>(config);
    }

    public static KafkaProducer<byte[], byte[]> bytesProducer(Target target, Map<String, Object> overrides) {
        Map<String, Object> config = new HashMap<>(overrides);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.putIfAbsent(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, target.bootstrap());
        config.putIfAbsent(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis());
        config.putIfAbsent(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis() / 2);
        return new KafkaProducer<>(config);
    }

    public static KafkaConsumer<String, String> consumer(Target target, Map<String, Object> overrides) {
        Map<String, Object> config = new HashMap<>();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, target.bootstrap());
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.putAll(overrides);
        return new KafkaConsumer<>(config);
    }

    public static KafkaConsumer<byte[], byte[]> bytesConsumer(Target target, Map<String, Object> overrides) {
        Map<String, Object> config = new HashMap<>(overrides);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.putIfAbsent(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, target.bootstrap());
        config.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        return new KafkaConsumer<>(config);
    }

    /** Creates the topic with the broker's default replication factor; see below. */
    public static void createTopic(Target target, String topic, int partitions, Map<String, String> configs) {
        createTopic(target, topic, partitions, (short) -1, configs);
    }

    /** Creates the topic and waits until its metadata lists every partition. */
    public static void createTopic(Target target, String topic, int partitions, short replicationFactor,
            Map<String, String> configs) {
        try (Admin admin = admin(target)) {
            get(admin.createTopics(List.of(new NewTopic(topic, partitions, replicationFactor).configs(configs))).all());
            Wait.until("topic " + topic + " in metadata", TIMEOUT, () ->
                    get(admin.describeTopics(Set.of(topic)).allTopicNames()).get(topic).partitions().size()
                            == partitions);
        }
    }

    /** Polls until {@code count} records arrived, within the timeout; a poll's exception fails at once. */
    public static <K, V> List<ConsumerRecord<K, V>> poll(KafkaConsumer<K, V> consumer, int count) {
        List<ConsumerRecord<K, V>> records = new ArrayList<>();
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        while (records.size() < count) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + TIMEOUT + " waiting for " + count
                        + " records, have " + records.size() + ": " + records);
            }
            consumer.poll(Duration.ofMillis(100)).forEach(records::add);
        }
        return records;
    }

    /** A future's value within the timeout; its failure as an unchecked exception. */
    public static <T> T get(Future<T> future) {
        try {
            return future.get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw new KafkaCallFailed(e.getCause());
        } catch (TimeoutException e) {
            throw new AssertionError("no answer within " + TIMEOUT, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** The cause of a failed client call, unchecked. */
    public static final class KafkaCallFailed extends RuntimeException {
        KafkaCallFailed(Throwable cause) {
            super(cause.toString(), cause);
        }
    }
}
