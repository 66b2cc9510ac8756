package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Produced;
import org.junit.jupiter.api.Test;
import strom.conformance.harness.Clients;
import strom.conformance.harness.Peers;
import strom.conformance.harness.StromCluster;
import strom.conformance.harness.Wait;
import strom.conformance.harness.Workspace;

/** Kafka Streams applications, unchanged, on a three-node Strom cluster. */
class StreamsTest {
    private final Duration STREAMS_TIMEOUT = Duration.ofSeconds(90);
    private final StromCluster cluster = Peers.cluster();

    /**
     * Word count with exactly_once_v2: its repartition topic, its changelog
     * and its output are written in transactions. One instance counts the
     * first half and stops; a second, with an empty state dir, restores the
     * counts from the changelog and counts the rest: every count is exact.
     */
    @Test
    void exactlyOnceWordCountRestoresItsStateOnAnotherInstance() {
        String input = Clients.unique("sentences");
        String output = Clients.unique("word-counts");
        String application = Clients.unique("word-count");
        Clients.createTopic(cluster, input, 3, (short) 3, Map.of());
        Clients.createTopic(cluster, output, 3, (short) 3, Map.of());
        List<String> sentences = IntStream.range(0, 400)
                .mapToObj(i -> "alpha beta" + (i % 2 == 0 ? " gamma" : "") + (i % 5 == 0 ? " delta delta" : ""))
                .toList();

        produce(input, sentences.subList(0, 200));
        try (KafkaStreams first = start(wordCount(input, output), application)) {
            awaitCounts(output, expectedCounts(sentences.subList(0, 200)));
        }
        produce(input, sentences.subList(200, 400));
        try (KafkaStreams second = start(wordCount(input, output), application)) {
            awaitCounts(output, expectedCounts(sentences));
        }
    }

    /** A stream-table join: clicks enriched with the region of each user. */
    @Test
    void streamTableJoin() {
        String users = Clients.unique("users");
        String clicks = Clients.unique("clicks");
        String output = Clients.unique("clicks-by-region");
        Clients.createTopic(cluster, users, 2, (short) 3, Map.of());
        Clients.createTopic(cluster, clicks, 2, (short) 3, Map.of());
        Clients.createTopic(cluster, output, 2, (short) 3, Map.of());
        try (KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of())) {
            for (int user = 0; user < 10; user++) {
                producer.send(new ProducerRecord<>(users, "user-" + user, user % 2 == 0 ? "europe" : "asia"));
            }
            producer.flush();
        }
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> regions = builder.table(users);
        builder.<String, String>stream(clicks)
                .join(regions, (page, region) -> region + ":" + page)
                .to(output);
        try (KafkaStreams streams = start(builder.build(), Clients.unique("enrich"))) {
            // The table is loaded before the clicks arrive: each click finds its user.
            Wait.until("the users table loaded", STREAMS_TIMEOUT, () -> streams.state() == KafkaStreams.State.RUNNING);
            try (KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of())) {
                IntStream.range(0, 30).forEach(i ->
                        producer.send(new ProducerRecord<>(clicks, "user-" + (i % 10), "page-" + i)));
                producer.flush();
            }
            List<String> expected = IntStream.range(0, 30)
                    .mapToObj(i -> ((i % 10) % 2 == 0 ? "europe" : "asia") + ":page-" + i).sorted().toList();
            assertEquals(expected, values(output, 30).stream().sorted().toList());
        }
    }

    private Topology wordCount(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
                .flatMapValues(sentence -> Arrays.asList(sentence.split(" ")))
                .groupBy((key, word) -> word)
                .count()
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    private KafkaStreams start(Topology topology, String application) {
        Properties config = new Properties();
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, application);
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrap());
        config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        config.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        config.put(StreamsConfig.STATE_DIR_CONFIG, Workspace.newDir("streams-state").toString());
        config.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        config.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        config.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        KafkaStreams streams = new KafkaStreams(topology, config);
        streams.start();
        return streams;
    }

    private void produce(String topic, List<String> values) {
        try (KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of())) {
            for (int i = 0; i < values.size(); i++) {
                producer.send(new ProducerRecord<>(topic, "line-" + i, values.get(i)));
            }
            producer.flush();
        }
    }

    private Map<String, Long> expectedCounts(List<String> sentences) {
        return sentences.stream().flatMap(s -> Arrays.stream(s.split(" ")))
                .collect(Collectors.groupingBy(w -> w, Collectors.counting()));
    }

    /** Waits until the committed output's latest count of every word is the expected one. */
    private void awaitCounts(String output, Map<String, Long> expected) {
        Map<String, Long> latest = new HashMap<>();
        try (KafkaConsumer<String, Long> consumer = new KafkaConsumer<>(Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrap(),
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"),
                Serdes.String().deserializer(), Serdes.Long().deserializer())) {
            consumer.assign(IntStream.range(0, 3).mapToObj(p -> new TopicPartition(output, p)).toList());
            Wait.until("counts " + expected + " (have " + latest + ")", STREAMS_TIMEOUT, () -> {
                for (ConsumerRecord<String, Long> record : consumer.poll(Duration.ofMillis(200))) {
                    latest.put(record.key(), record.value());
                }
                return latest.equals(expected);
            });
        }
    }

    /** The values of the topic's first {@code count} records (more is a failure the caller sees). */
    private List<String> values(String topic, int count) {
        try (KafkaConsumer<String, String> consumer = Clients.consumer(cluster, Map.of())) {
            consumer.assign(IntStream.range(0, 2).mapToObj(p -> new TopicPartition(topic, p)).toList());
            List<String> values = new java.util.ArrayList<>();
            Wait.until(count + " joined records (have " + values + ")", STREAMS_TIMEOUT, () -> {
                consumer.poll(Duration.ofMillis(200)).forEach(r -> values.add(r.value()));
                return values.size() >= count;
            });
            consumer.poll(Duration.ofMillis(300)).forEach(r -> values.add(r.value()));
            return values;
        }
    }
}
