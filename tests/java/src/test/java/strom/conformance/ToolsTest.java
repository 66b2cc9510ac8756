package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import strom.conformance.harness.Clients;
import strom.conformance.harness.KafkaTools;
import strom.conformance.harness.Peers;
import strom.conformance.harness.StromCluster;
import strom.conformance.harness.StromNode;
import strom.conformance.harness.Target;
import strom.conformance.harness.Workspace;

/**
 * Kafka's own command-line tools against Strom: each command runs against
 * Strom and against the Kafka peer, and prints the same, but for the values
 * that differ between any two clusters (ids, sizes, times).
 */
class ToolsTest {
    private static final String TOPICS = "org.apache.kafka.tools.TopicCommand";
    private static final String CONFIGS = "org.apache.kafka.tools.ConfigCommand";
    private static final String GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    private static final String CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer";
    private static final String CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer";
    private static final String GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell";
    private static final String DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand";
    private static final String FEATURES = "org.apache.kafka.tools.FeatureCommand";
    private static final String QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand";
    private static final String LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand";
    private static final String TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand";
    private static final String LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand";
    private static final String ACLS = "org.apache.kafka.tools.AclCommand";
    private static final String REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
    private static final String DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments";
    private static final String PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance";
    private static final String CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance";

    @Test
    void topicsCreateDescribeAlterDelete() {
        String topic = Clients.unique("tool-topic");
        sameOutput(TOPICS, "--create", "--topic", topic, "--partitions", "3", "--config", "retention.ms=3600000").ok();
        sameOutput(TOPICS, "--describe", "--topic", topic).ok();
        sameOutput(TOPICS, "--alter", "--topic", topic, "--partitions", "5").ok();
        sameOutput(TOPICS, "--describe", "--topic", topic).ok();
        sameOutput(TOPICS, "--list", "--topic", topic).ok();
        sameOutput(TOPICS, "--create", "--topic", topic, "--partitions", "1");
        sameOutput(TOPICS, "--describe", "--topic", Clients.unique("missing"));
        sameOutput(TOPICS, "--delete", "--topic", topic).ok();
    }

    @Test
    void consoleProducerAndConsumer() {
        String topic = Clients.unique("tool-console");
        String group = Clients.unique("tool-console-group");
        String input = IntStream.range(0, 20).mapToObj(i -> "key-" + i + ":value-" + i).collect(Collectors.joining("\n"));
        for (Target target : targets()) {
            Clients.createTopic(target, topic, 1, Map.of());
            KafkaTools.runWithInput(input, CONSOLE_PRODUCER, "--bootstrap-server", target.bootstrap(),
                    "--topic", topic, "--reader-property", "parse.key=true", "--reader-property", "key.separator=:").ok();
        }
        sameOutput(CONSOLE_CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "20",
                "--formatter-property", "print.key=true", "--formatter-property", "print.offset=true",
                "--formatter-property", "print.partition=true", "--group", group).ok();
        sameOutput(GROUPS, "--describe", "--group", group).ok();
        sameOutput(GROUPS, "--describe", "--group", group, "--state").ok();
        sameOutput(GROUPS, "--reset-offsets", "--group", group, "--topic", topic,
                "--to-offset", "5", "--execute").ok();
        sameOutput(GROUPS, "--delete", "--group", group).ok();
    }

    @Test
    void configsDescribeAndAlter() {
        String topic = Clients.unique("tool-configs");
        create(topic, 1);
        sameOutput(CONFIGS, "--describe", "--entity-type", "topics", "--entity-name", topic).ok();
        sameOutput(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic,
                "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]").ok();
        sameOutput(CONFIGS, "--describe", "--entity-type", "topics", "--entity-name", topic).ok();
        sameOutput(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic,
                "--delete-config", "retention.ms").ok();
        sameOutput(CONFIGS, "--describe", "--entity-type", "brokers", "--entity-default").ok();
        sameOutput(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic,
                "--add-config", "retention.ms=never");
    }

    /** kafka-configs on a group's configs (KIP-848): set, described, refused out of bounds, deleted. */
    @Test
    void configsOfAGroup() {
        String group = Clients.unique("tool-group");
        sameOutput(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", group,
                "--add-config", "consumer.heartbeat.interval.ms=6000,share.isolation.level=read_committed").ok();
        sameOutput(CONFIGS, "--describe", "--entity-type", "groups", "--entity-name", group).ok();
        sameOutput(CONFIGS, "--describe", "--entity-type", "groups", "--entity-name", group, "--all").ok();
        sameOutput(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", group,
                "--add-config", "consumer.session.timeout.ms=1000");
        sameOutput(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", group,
                "--delete-config", "consumer.heartbeat.interval.ms").ok();
        sameOutput(CONFIGS, "--describe", "--entity-type", "groups", "--entity-name", group).ok();
    }

    @Test
    void offsetsAndDeleteRecords() {
        String topic = Clients.unique("tool-offsets");
        for (Target target : targets()) {
            Clients.createTopic(target, topic, 2, Map.of());
            try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of())) {
                // Fixed timestamps, so max-timestamp names the same record on both.
                IntStream.range(0, 10).forEach(i -> producer.send(
                        new ProducerRecord<>(topic, i % 2, 1_700_000_000_000L + i % 4, null, "v" + i)));
                producer.flush();
            }
        }
        sameOutput(GET_OFFSETS, "--topic", topic).ok();
        sameOutput(GET_OFFSETS, "--topic", topic, "--time", "earliest").ok();
        sameOutput(GET_OFFSETS, "--topic-partitions", topic + ":1", "--time", "max-timestamp").ok();
        sameOutput(DELETE_RECORDS, "--offset-json-file",
                jsonFile("{\"partitions\":[{\"topic\":\"" + topic + "\",\"partition\":0,\"offset\":3}],\"version\":1}")).ok();
        sameOutput(GET_OFFSETS, "--topic", topic, "--time", "earliest").ok();
    }

    @Test
    void clusterTools() {
        sameOutput(ACLS, "--list");
        sameOutput(REASSIGN, "--list").ok();
        String topic = Clients.unique("tool-election");
        create(topic, 1);
        sameOutput(LEADER_ELECTION, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0").ok();
        sameOutput(LOG_DIRS, "--describe", "--topic-list", topic).ok();
    }

    /** kafka-transactions list and describe of one committed transaction, but for its producer id. */
    @Test
    void transactionsListAndDescribe() {
        String transactionalId = Clients.unique("tool-txn");
        String topic = Clients.unique("tool-txn-topic");
        List<String> reports = new ArrayList<>();
        for (Target target : targets()) {
            Clients.createTopic(target, topic, 1, Map.of());
            try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId))) {
                producer.initTransactions();
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, "in a transaction"));
                producer.commitTransaction();
            }
            String listed = KafkaTools.run(TRANSACTIONS, "--bootstrap-server", target.bootstrap(), "list",
                    "--transactional-id-pattern", transactionalId).ok().out();
            reports.add(listed.replaceAll("[ \\t]+", " ").replaceAll("(?m)^(\\S+ \\d+ )\\d+", "$1<producer-id>"));
        }
        assertEquals(reports.get(1), reports.get(0));
        assertTrue(reports.get(0).contains(transactionalId + " 1 <producer-id> CompleteCommit"), reports.get(0));
    }

    /**
     * kafka-features describe: the same lines for every feature Strom serves,
     * but for metadata.version (Strom is at 4.1's level) and the epoch.
     */
    @Test
    void featuresDescribe() {
        List<String> described = new ArrayList<>();
        for (Target target : targets()) {
            String out = KafkaTools.run(FEATURES, "--bootstrap-server", target.bootstrap(), "describe").ok().out();
            described.add(out.lines()
                    .filter(l -> AdminTest.NOT_SERVED_YET.stream().noneMatch(f -> l.startsWith("Feature: " + f + " ")))
                    .filter(l -> !l.startsWith("Feature: metadata.version "))
                    .map(l -> l.replaceAll("Epoch: \\d+", "Epoch: <epoch>"))
                    .collect(Collectors.joining("\n")));
        }
        assertEquals(described.get(1), described.get(0));
        assertTrue(described.get(0).contains("Feature: group.version"), described.get(0));
    }

    /**
     * kafka-features upgrade, downgrade and disable, as dry runs and as
     * refusals (a feature no node knows, a level no node supports):
     * the same lines and exit codes from both.
     */
    @Test
    void featuresUpgradeDowngradeAndDisable() {
        sameOutput(FEATURES, "upgrade", "--feature", "group.version=1", "--dry-run").ok();
        sameOutput(FEATURES, "downgrade", "--feature", "group.version=0", "--dry-run").ok();
        sameOutput(FEATURES, "disable", "--feature", "eligible.leader.replicas.version", "--dry-run").ok();
        sameOutput(FEATURES, "upgrade", "--feature", "no.such.feature=1");
        sameOutput(FEATURES, "downgrade", "--feature", "group.version=5", "--dry-run");
        sameOutput(FEATURES, "upgrade", "--feature", "group.version=1").ok();
    }

    /**
     * A Strom node formatted by kafka-storage format and by strom storage
     * format with the same release and feature flags starts at the levels
     * they chose; a level Strom does not serve is refused by both formats.
     */
    @Test
    void storageFormatChoosesTheFeatureLevels() throws java.io.IOException {
        String[] flags = {"--release-version", "4.1-IV1", "--feature", "group.version=0",
                "--feature", "transaction.version=0"};
        for (boolean kafkasTool : List.of(true, false)) {
            try (StromCluster strom = new StromCluster(1, Map.of())) {
                StromNode node = strom.node(1);
                String clusterId = org.apache.kafka.common.Uuid.randomUuid().toString();
                if (kafkasTool) {
                    java.nio.file.Path properties = node.dir().resolve("server.properties");
                    java.nio.file.Files.createDirectories(node.dir());
                    Workspace.writeProperties(properties, node.config());
                    List<String> args = new ArrayList<>(List.of("format", "--config", properties.toString(),
                            "--cluster-id", clusterId));
                    args.addAll(List.of(flags));
                    KafkaTools.run("kafka.tools.StorageTool", args.toArray(String[]::new)).ok();
                } else {
                    node.format(clusterId, flags);
                }
                strom.start();
                try (org.apache.kafka.clients.admin.Admin admin = Clients.admin(strom)) {
                    var finalized = Clients.get(admin.describeFeatures().featureMetadata()).finalizedFeatures();
                    String using = kafkasTool ? "kafka-storage" : "strom storage";
                    assertEquals(27, finalized.get("metadata.version").maxVersionLevel(), using);
                    assertEquals(1, finalized.get("eligible.leader.replicas.version").maxVersionLevel(), using);
                    assertTrue(!finalized.containsKey("group.version"), using + ": " + finalized);
                }
            }
        }
    }

    /**
     * kafka-metadata-quorum against one KRaft node of each, in the same
     * layout (a combined node, a static voter, a CONTROLLER listener): the
     * same report but for the offsets and times.
     */
    @Test
    void metadataQuorumOnOneKraftNode() {
        try (StromCluster strom = new StromCluster(1, Map.of()).start()) {
            for (String[] command : List.of(new String[] {"describe", "--status"},
                    new String[] {"describe", "--replication"})) {
                List<String> reports = new ArrayList<>();
                for (Target target : List.of(strom, Peers.kafka())) {
                    List<String> args = new ArrayList<>(List.of("--bootstrap-server", target.bootstrap()));
                    args.addAll(List.of(command));
                    String out = KafkaTools.run(QUORUM, args.toArray(String[]::new)).ok().out();
                    reports.add(normalize(out, List.of(strom, Peers.kafka()))
                            .replaceAll("<host>:\\d+", "<host>:<port>")
                            .replaceAll("HighWatermark:( +)\\d+", "HighWatermark:$1<offset>")
                            .replaceAll("(?m)^(\\d+\\s+\\S+\\s+)\\d+(\\s+\\d+\\s+)\\d+\\s+\\d+", "$1<leo>$2<times>")
                            // The table pads its columns to the widest value.
                            .replaceAll("[ \\t]+", " "));
                }
                assertEquals(reports.get(1), reports.get(0), String.join(" ", command));
            }
        }
    }

    /** kafka-dump-log reads Strom's segments, their indexes and its metadata log, record by record. */
    @Test
    void dumpLogReadsStromsSegmentsAndMetadataLog() throws Exception {
        StromNode strom = Peers.strom();
        String topic = Clients.unique("tool-dump");
        Clients.createTopic(strom, topic, 1, Map.of());
        try (KafkaProducer<String, String> producer = Clients.producer(strom, Map.of(
                ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4"))) {
            IntStream.range(0, 50).forEach(i -> producer.send(new ProducerRecord<>(topic, "key-" + i, "payload-" + i)));
            producer.flush();
        }
        Path partition = Path.of(strom.config().get("log.dirs")).resolve(topic + "-0");
        String segment = partition.resolve("00000000000000000000.log").toString();
        String records = KafkaTools.run(DUMP_LOG, "--files", segment, "--deep-iteration", "--print-data-log").ok().out();
        for (int i = 0; i < 50; i++) {
            assertTrue(records.contains("key: key-" + i + " payload: payload-" + i), "record " + i + " in\n" + records);
        }
        assertTrue(records.contains("compresscodec: lz4"), records);
        String index = partition.resolve("00000000000000000000.index").toString();
        String indexDump = KafkaTools.run(DUMP_LOG, "--files", index, "--index-sanity-check").ok().out();
        assertTrue(indexDump.contains("passed sanity check"), indexDump);

        Path metadata = Path.of(strom.config().get("log.dirs")).resolve("__cluster_metadata-0");
        String metadataLog;
        try (var files = java.nio.file.Files.list(metadata)) {
            metadataLog = files.filter(f -> f.toString().endsWith(".log")).sorted().findFirst().orElseThrow().toString();
        }
        String decoded = KafkaTools.run(DUMP_LOG, "--files", metadataLog, "--cluster-metadata-decoder").ok().out();
        assertTrue(decoded.contains("\"type\":\"FEATURE_LEVEL_RECORD\""), decoded);
        assertTrue(decoded.contains("\"name\":\"" + topic + "\""), "the TopicRecord of " + topic + " in\n" + decoded);
        assertTrue(!decoded.contains("Error") && !decoded.contains("Exception"), decoded);
    }

    /** kafka-producer-perf-test and kafka-consumer-perf-test run their course against Strom. */
    @Test
    void perfTestTools() {
        StromNode strom = Peers.strom();
        String topic = Clients.unique("tool-perf");
        Clients.createTopic(strom, topic, 2, Map.of());
        String produced = KafkaTools.run(PRODUCER_PERF, "--topic", topic, "--num-records", "20000", "--record-size", "100",
                "--throughput", "-1", "--producer-props", "bootstrap.servers=" + strom.bootstrap(), "acks=all").ok().out();
        assertTrue(produced.contains("20000 records sent"), produced);
        String consumed = KafkaTools.run(CONSUMER_PERF, "--bootstrap-server", strom.bootstrap(), "--topic", topic,
                "--messages", "20000", "--timeout", "30000").ok().out();
        List<String> lines = consumed.lines().toList();
        // The header, then one line whose fifth column is the message count.
        assertEquals("20000", lines.get(lines.size() - 1).split(",\\s*")[4].trim(), consumed);
    }

    // ------------------------------------------------------------------ helpers

    private static List<Target> targets() {
        return Peers.both().toList();
    }

    private static void create(String topic, int partitions) {
        targets().forEach(t -> Clients.createTopic(t, topic, partitions, Map.of()));
    }

    private static String jsonFile(String json) {
        try {
            java.nio.file.Path file = java.nio.file.Files.createTempFile("tool", ".json");
            java.nio.file.Files.writeString(file, json);
            return file.toString();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /**
     * Runs the tool against both with --bootstrap-server, compares exit code
     * and output, and returns Strom's result.
     */
    private static KafkaTools.Result sameOutput(String tool, String... args) {
        List<KafkaTools.Result> results = new ArrayList<>();
        for (Target target : targets()) {
            // First: tools with subcommands take it only before them.
            List<String> withServer = new ArrayList<>(List.of("--bootstrap-server", target.bootstrap()));
            withServer.addAll(Arrays.asList(args));
            results.add(KafkaTools.run(tool, withServer.toArray(String[]::new)));
        }
        KafkaTools.Result strom = results.get(0);
        KafkaTools.Result kafka = results.get(1);
        String command = tool.substring(tool.lastIndexOf('.') + 1) + " " + String.join(" ", args);
        System.out.println("$ " + command + "  (strom: exit " + strom.exitCode() + ")\n" + strom.out() + strom.err());
        assertEquals(normalize(kafka.out(), targets()), normalize(strom.out(), targets()), command + ": stdout");
        assertEquals(kafka.exitCode(), strom.exitCode(), command + ": exit code\nkafka: " + kafka.err()
                + "\nstrom: " + strom.err());
        assertEquals(normalize(firstLine(kafka.err()), targets()), normalize(firstLine(strom.err()), targets()),
                command + ": first line of stderr");
        return strom;
    }

    private static String firstLine(String text) {
        return text.lines().filter(l -> !l.isBlank()).findFirst().orElse("");
    }

    /** Masks what differs between any two clusters: addresses, ids, ports, times and sizes. */
    static String normalize(String output, List<Target> targets) {
        String text = output;
        for (Target target : targets) {
            text = text.replace(target.bootstrap(), "<bootstrap>");
        }
        List<Function<String, String>> masks = List.of(
                s -> Pattern.compile("TopicId: \\S+").matcher(s).replaceAll("TopicId: <id>"),
                s -> Pattern.compile("ClusterId:\\s+\\S+").matcher(s).replaceAll("ClusterId: <id>"),
                s -> Pattern.compile("consumer-[\\w-]+-\\d+-[0-9a-f-]{36}").matcher(s).replaceAll("<member>"),
                s -> Pattern.compile("/127\\.0\\.0\\.1").matcher(s).replaceAll("<host>"),
                s -> Pattern.compile("target/work/(kafka|strom)-\\d+").matcher(s).replaceAll("<dir>"));
        for (Function<String, String> mask : masks) {
            text = mask.apply(text);
        }
        return text;
    }
}
