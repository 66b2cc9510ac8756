package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.SAFE_DOWNGRADE;
import static org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UPGRADE;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.InvalidUpdateVersionException;
import org.apache.kafka.common.errors.SecurityDisabledException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import strom.conformance.harness.Clients;
import strom.conformance.harness.Peers;
import strom.conformance.harness.Target;
import strom.conformance.harness.Wait;

/**
 * The Java Admin client against Strom and the Kafka peer, one node each: every
 * test asks both the same question and expects Kafka's answer from both.
 */
class AdminTest {
    static java.util.stream.Stream<Target> targets() {
        return Peers.both();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void createTopicsRefusesWhatKafkaRefuses(Target target) {
        try (Admin admin = Clients.admin(target)) {
            String topic = Clients.unique("created");
            Clients.get(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
            assertFailsWith(TopicExistsException.class,
                    admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
            assertFailsWith(InvalidReplicationFactorException.class,
                    admin.createTopics(List.of(new NewTopic(Clients.unique("rf"), 1, (short) 3))).all());
            assertFailsWith(InvalidPartitionsException.class,
                    admin.createTopics(List.of(new NewTopic(Clients.unique("zero"), 0, (short) 1))).all());
            assertFailsWith(InvalidTopicException.class,
                    admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all());
            assertFailsWith(InvalidConfigurationException.class,
                    admin.createTopics(List.of(new NewTopic(Clients.unique("cfg"), 1, (short) 1)
                            .configs(Map.of("retention.ms", "soon")))).all());
            assertFailsWith(InvalidConfigurationException.class,
                    admin.createTopics(List.of(new NewTopic(Clients.unique("cfg"), 1, (short) 1)
                            .configs(Map.of("no.such.config", "1")))).all());

            // validateOnly answers as a real creation would, and creates nothing.
            String dryRun = Clients.unique("dry-run");
            var result = admin.createTopics(List.of(new NewTopic(dryRun, 3, (short) 1)),
                    new CreateTopicsOptions().validateOnly(true));
            assertEquals(3, Clients.get(result.numPartitions(dryRun)));
            assertFalse(Clients.get(admin.listTopics().names()).contains(dryRun));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void describeTopicsAndPartitions(Target target) {
        try (Admin admin = Clients.admin(target)) {
            String topic = Clients.unique("described");
            Clients.createTopic(target, topic, 2, Map.of());
            TopicDescription description = Clients.get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
            assertEquals(2, description.partitions().size());
            assertFalse(description.isInternal());
            assertNotNull(description.topicId());
            description.partitions().forEach(p -> {
                assertEquals(1, p.replicas().size());
                assertEquals(p.replicas(), p.isr());
                assertEquals(p.replicas().get(0), p.leader());
            });
            assertFailsWith(UnknownTopicOrPartitionException.class,
                    admin.describeTopics(List.of(Clients.unique("missing"))).allTopicNames());

            Clients.get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
            Wait.until("four partitions", Clients.TIMEOUT, () ->
                    Clients.get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().size() == 4);
            assertFailsWith(InvalidPartitionsException.class,
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all());
            assertFailsWith(InvalidPartitionsException.class,
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
            assertFailsWith(UnknownTopicOrPartitionException.class,
                    admin.createPartitions(Map.of(Clients.unique("missing"), NewPartitions.increaseTo(4))).all());

            Clients.get(admin.deleteTopics(List.of(topic)).all());
            Wait.until("the topic gone", Clients.TIMEOUT, () -> !Clients.get(admin.listTopics().names()).contains(topic));
        }
    }

    /** Every config Kafka describes for a new topic, Strom describes too, with the same default. */
    @Test
    void topicConfigsMatchKafkas() {
        Map<String, ConfigEntry> strom = topicConfigs(Peers.strom());
        Map<String, ConfigEntry> kafka = topicConfigs(Peers.kafka());
        assertEquals(kafka.keySet(), strom.keySet(), "topic config names");
        List<String> differences = kafka.values().stream()
                .filter(k -> !java.util.Objects.equals(k.value(), strom.get(k.name()).value())
                        || k.source() != strom.get(k.name()).source()
                        || k.isReadOnly() != strom.get(k.name()).isReadOnly()
                        || k.isSensitive() != strom.get(k.name()).isSensitive()
                        || k.type() != strom.get(k.name()).type())
                .map(k -> k.name() + ": kafka " + describe(k) + ", strom " + describe(strom.get(k.name())))
                .sorted().toList();
        assertEquals(List.of(), differences);
    }

    private static String describe(ConfigEntry entry) {
        return entry.value() + " (" + entry.source() + ", " + entry.type()
                + (entry.isReadOnly() ? ", read-only" : "") + (entry.isSensitive() ? ", sensitive" : "") + ")";
    }

    private static Map<String, ConfigEntry> topicConfigs(Target target) {
        String topic = Clients.unique("configs");
        Clients.createTopic(target, topic, 1, Map.of());
        try (Admin admin = Clients.admin(target)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = Clients.get(admin.describeConfigs(List.of(resource)).all()).get(resource);
            return config.entries().stream().collect(Collectors.toMap(ConfigEntry::name, Function.identity()));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void incrementalAlterConfigsOfATopic(Target target) {
        String topic = Clients.unique("altered");
        Clients.createTopic(target, topic, 1, Map.of());
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Clients.admin(target)) {
            alter(admin, resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)));
            Config config = Clients.get(admin.describeConfigs(List.of(resource)).all()).get(resource);
            assertEquals("3600000", config.get("retention.ms").value());
            assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.ms").source());
            assertEquals("delete,compact", config.get("cleanup.policy").value());

            alter(admin, resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT)));
            config = Clients.get(admin.describeConfigs(List.of(resource)).all()).get(resource);
            assertEquals("604800000", config.get("retention.ms").value());
            assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, config.get("retention.ms").source());
            assertEquals("compact", config.get("cleanup.policy").value());

            assertFailsWith(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "forever"), AlterConfigOp.OpType.SET)))).all());
            assertFailsWith(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
            ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, Clients.unique("missing"));
            assertFailsWith(UnknownTopicOrPartitionException.class, admin.incrementalAlterConfigs(Map.of(missing, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "1000"), AlterConfigOp.OpType.SET)))).all());
        }
    }

    /**
     * A topic and a broker in one request, as librdkafka's admin test sends
     * it, with a SASL login setting Kafka takes at run time: both are taken.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void topicAndBrokerConfigsInOneRequest(Target target) {
        String topic = Clients.unique("mixed");
        Clients.createTopic(target, topic, 1, Map.of());
        ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "1");
        try (Admin admin = Clients.admin(target)) {
            Clients.get(admin.incrementalAlterConfigs(Map.of(
                    topicResource, List.of(new AlterConfigOp(new ConfigEntry("compression.type", "gzip"),
                            AlterConfigOp.OpType.SET)),
                    broker, List.of(new AlterConfigOp(new ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000"),
                            AlterConfigOp.OpType.SET)))).all());
            Config config = Clients.get(admin.describeConfigs(List.of(broker)).all()).get(broker);
            assertEquals("58000", config.get("sasl.kerberos.min.time.before.relogin").value());
            assertEquals(ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG,
                    config.get("sasl.kerberos.min.time.before.relogin").source());
            Clients.get(admin.incrementalAlterConfigs(Map.of(broker, List.of(new AlterConfigOp(
                    new ConfigEntry("sasl.kerberos.min.time.before.relogin", ""), AlterConfigOp.OpType.DELETE)))).all());
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void listOffsetsAndDeleteRecords(Target target) {
        String topic = Clients.unique("offsets");
        Clients.createTopic(target, topic, 1, Map.of());
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, 1_000_000L * (i == 5 ? 100 : i + 1), null, "v" + i));
            }
            producer.flush();
        }
        try (Admin admin = Clients.admin(target)) {
            assertEquals(0, listOffset(admin, partition, OffsetSpec.earliest()).offset());
            assertEquals(10, listOffset(admin, partition, OffsetSpec.latest()).offset());
            ListOffsetsResultInfo max = listOffset(admin, partition, OffsetSpec.maxTimestamp());
            assertEquals(5, max.offset());
            assertEquals(100_000_000L, max.timestamp());
            assertEquals(3, listOffset(admin, partition, OffsetSpec.forTimestamp(3_500_000L)).offset());
            assertEquals(-1, listOffset(admin, partition, OffsetSpec.forTimestamp(200_000_000L)).offset());

            var lowWatermarks = admin.deleteRecords(Map.of(partition, RecordsToDelete.beforeOffset(4))).lowWatermarks();
            assertEquals(4, Clients.get(lowWatermarks.get(partition)).lowWatermark());
            assertEquals(4, listOffset(admin, partition, OffsetSpec.earliest()).offset());
            assertFailsWith(org.apache.kafka.common.errors.OffsetOutOfRangeException.class,
                    admin.deleteRecords(Map.of(partition, RecordsToDelete.beforeOffset(11))).all());
        }
    }

    private static ListOffsetsResultInfo listOffset(Admin admin, TopicPartition partition, OffsetSpec spec) {
        return Clients.get(admin.listOffsets(Map.of(partition, spec)).partitionResult(partition));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void consumerGroupOffsetsWithoutMembers(Target target) {
        String topic = Clients.unique("group-offsets");
        String group = Clients.unique("admin-group");
        Clients.createTopic(target, topic, 2, Map.of());
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (Admin admin = Clients.admin(target)) {
            assertFailsWith(GroupIdNotFoundException.class, admin.describeConsumerGroups(List.of(group)).all());
            Clients.get(admin.alterConsumerGroupOffsets(group, Map.of(
                    p0, new OffsetAndMetadata(0, "zero"), p1, new OffsetAndMetadata(0))).all());
            Map<TopicPartition, OffsetAndMetadata> offsets = Clients.get(
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            assertEquals(Map.of(p0, 0L, p1, 0L), offsets.entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())));
            assertEquals("zero", offsets.get(p0).metadata());
            assertTrue(Clients.get(admin.listGroups().all()).stream().anyMatch(g -> g.groupId().equals(group)));
            var description = Clients.get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
            assertEquals(org.apache.kafka.common.GroupState.EMPTY, description.groupState());

            Clients.get(admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all());
            assertEquals(Set.of(p0), Clients.get(admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata()).keySet());
            Clients.get(admin.deleteConsumerGroups(List.of(group)).all());
            assertFailsWith(GroupIdNotFoundException.class, admin.deleteConsumerGroups(List.of(group)).all());
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void clusterQuorumAndFeatures(Target target) {
        try (Admin admin = Clients.admin(target)) {
            DescribeClusterResult cluster = admin.describeCluster();
            assertEquals(1, Clients.get(cluster.nodes()).size());
            assertEquals(1, Clients.get(cluster.controller()).id());
            assertNotNull(Clients.get(cluster.clusterId()));

            QuorumInfo quorum = Clients.get(admin.describeMetadataQuorum().quorumInfo());
            assertEquals(1, quorum.leaderId());
            assertEquals(List.of(1), quorum.voters().stream().map(QuorumInfo.ReplicaState::replicaId).toList());

            FeatureMetadata features = Clients.get(admin.describeFeatures().featureMetadata());
            assertTrue(features.finalizedFeatures().containsKey("metadata.version"), features.toString());
            assertTrue(features.supportedFeatures().containsKey("metadata.version"), features.toString());
        }
    }

    /**
     * Features Strom does not serve yet: transaction protocol v2 (KIP-890's
     * epoch bumps), share groups and streams groups. Kafka lists a feature
     * only where its highest supported level is above 0.
     */
    static final Set<String> NOT_SERVED_YET = Set.of("transaction.version", "share.version", "streams.version");

    /** The features a Kafka 4.4 broker supports and finalizes on a new cluster, Strom lists too. */
    @Test
    void featuresMatchKafkas() {
        FeatureMetadata kafka = features(Peers.kafka());
        FeatureMetadata strom = features(Peers.strom());
        assertEquals(withoutUnserved(kafka.supportedFeatures().keySet()), strom.supportedFeatures().keySet());
        assertEquals(withoutUnserved(kafka.finalizedFeatures().keySet()), strom.finalizedFeatures().keySet());
        strom.finalizedFeatures().forEach((name, level) -> {
            short supportedMax = strom.supportedFeatures().get(name).maxVersion();
            assertEquals(supportedMax, level.maxVersionLevel(), name + " is finalized at its highest level");
        });
        assertTrue(strom.finalizedFeaturesEpoch().isPresent());
    }

    /**
     * UpdateFeatures by Kafka's rules: a downgrade must say so, a level or a
     * feature no node supports is refused, a dry run changes nothing, and a
     * feature turned off and on again is finalized at each level in turn.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void updateFeaturesByKafkasRules(Target target) {
        String elr = "eligible.leader.replicas.version";
        try (Admin admin = Clients.admin(target)) {
            assertFailsWith(InvalidUpdateVersionException.class, updateFeature(admin, "metadata.version", 26, UPGRADE, false));
            assertFailsWith(InvalidUpdateVersionException.class, updateFeature(admin, "group.version", 99, UPGRADE, false));
            assertFailsWith(InvalidUpdateVersionException.class, updateFeature(admin, "no.such.feature", 1, UPGRADE, false));
            Clients.get(updateFeature(admin, "group.version", 0, SAFE_DOWNGRADE, true));
            assertEquals(1, finalizedLevel(admin, "group.version"));

            Clients.get(updateFeature(admin, elr, 0, SAFE_DOWNGRADE, false));
            Wait.until(elr + " off", java.time.Duration.ofSeconds(10), () -> finalizedLevel(admin, elr) == 0);
            Clients.get(updateFeature(admin, elr, 1, UPGRADE, false));
            Wait.until(elr + " on", java.time.Duration.ofSeconds(10), () -> finalizedLevel(admin, elr) == 1);
        }
    }

    private static java.util.concurrent.Future<Void> updateFeature(Admin admin, String feature, int level,
            FeatureUpdate.UpgradeType type, boolean dryRun) {
        Map<String, FeatureUpdate> update = Map.of(feature, new FeatureUpdate((short) level, type));
        return admin.updateFeatures(update, new UpdateFeaturesOptions().validateOnly(dryRun)).all();
    }

    /** The level `feature` is finalized at, 0 where it is not. */
    private static int finalizedLevel(Admin admin, String feature) {
        FinalizedVersionRange range = Clients.get(admin.describeFeatures().featureMetadata())
                .finalizedFeatures().get(feature);
        return range == null ? 0 : range.maxVersionLevel();
    }

    private static Set<String> withoutUnserved(Set<String> names) {
        return names.stream().filter(n -> !NOT_SERVED_YET.contains(n)).collect(Collectors.toSet());
    }

    private static FeatureMetadata features(Target target) {
        try (Admin admin = Clients.admin(target)) {
            return Clients.get(admin.describeFeatures().featureMetadata());
        }
    }

    /**
     * A group's configs (KIP-848): described with the same names, values,
     * sources and types by both; an override set and deleted; values out
     * of the broker's bounds, of the wrong type or unknown refused with
     * Kafka's error and message.
     */
    @Test
    void groupConfigsMatchKafkas() {
        List<String> reports = new java.util.ArrayList<>();
        for (Target target : List.of(Peers.strom(), Peers.kafka())) {
            ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, Clients.unique("configured"));
            StringBuilder report = new StringBuilder();
            try (Admin admin = Clients.admin(target)) {
                report.append(describeGroup(admin, group));
                alter(admin, group, List.of(new AlterConfigOp(new ConfigEntry("consumer.session.timeout.ms", "50000"),
                        AlterConfigOp.OpType.SET)));
                Wait.until("the override described", Clients.TIMEOUT,
                        () -> describeGroup(admin, group).contains("consumer.session.timeout.ms=50000 DYNAMIC_GROUP_CONFIG"));
                for (String bad : List.of("consumer.session.timeout.ms=1", "consumer.heartbeat.interval.ms=70000",
                        "share.delivery.count.limit=1", "share.isolation.level=dirty", "consumer.session.timeout.ms=x",
                        "no.such.config=1")) {
                    String[] kv = bad.split("=");
                    var op = new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET);
                    Clients.KafkaCallFailed failure = assertThrows(Clients.KafkaCallFailed.class,
                            () -> alter(admin, group, List.of(op)));
                    report.append(bad).append(" -> ").append(failure.getCause()).append('\n');
                }
                alter(admin, group, List.of(new AlterConfigOp(new ConfigEntry("consumer.session.timeout.ms", ""),
                        AlterConfigOp.OpType.DELETE)));
                Wait.until("the override deleted", Clients.TIMEOUT,
                        () -> describeGroup(admin, group).contains("consumer.session.timeout.ms=45000 DEFAULT_CONFIG"));
            }
            reports.add(report.toString());
        }
        assertEquals(reports.get(1), reports.get(0));
    }

    /** One line per config of `group`, sorted by name. */
    private static String describeGroup(Admin admin, ConfigResource group) {
        Config config = Clients.get(admin.describeConfigs(List.of(group)).all()).get(group);
        return config.entries().stream()
                .map(e -> e.name() + "=" + e.value() + " " + e.source() + " " + e.type() + "\n")
                .sorted().collect(Collectors.joining());
    }

    /** addRaftVoter and removeRaftVoter on a static quorum: refused by Strom as by Kafka. */
    @Test
    void raftVoterChangesOnAStaticQuorum() {
        List<String> answers = new java.util.ArrayList<>();
        for (Target target : List.of(Peers.strom(), Peers.kafka())) {
            try (Admin admin = Clients.admin(target)) {
                var endpoint = new org.apache.kafka.clients.admin.RaftVoterEndpoint("CONTROLLER", "127.0.0.1", 9999);
                answers.add(failure(admin.addRaftVoter(5, Uuid.randomUuid(), Set.of(endpoint)).all()) + " / "
                        + failure(admin.removeRaftVoter(1, Uuid.randomUuid()).all()));
            }
        }
        System.out.println("addRaftVoter / removeRaftVoter on a static quorum: " + answers);
        assertEquals(answers.get(1), answers.get(0));
    }

    /** The class of the exception `future` fails with. */
    private static String failure(java.util.concurrent.Future<?> future) {
        Clients.KafkaCallFailed failure = assertThrows(Clients.KafkaCallFailed.class, () -> Clients.get(future));
        return failure.getCause().getClass().getSimpleName();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void aclsNeedAnAuthorizer(Target target) {
        try (Admin admin = Clients.admin(target)) {
            assertFailsWith(SecurityDisabledException.class, admin.describeAcls(AclBindingFilter.ANY).values());
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void scramCredentialsAndQuotas(Target target) {
        String user = Clients.unique("user");
        try (Admin admin = Clients.admin(target)) {
            Clients.get(admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "secret"))).all());
            Map<String, UserScramCredentialsDescription> described = Clients.get(
                    admin.describeUserScramCredentials(List.of(user)).all());
            assertEquals(List.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)),
                    described.get(user).credentialInfos());

            ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, Clients.unique("app")));
            Clients.get(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                    List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0))))).all());
            Wait.until("the quota described", Clients.TIMEOUT, () -> Map.of("producer_byte_rate", 1048576.0).equals(
                    Clients.get(admin.describeClientQuotas(ClientQuotaFilter.all()).entities()).get(entity)));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void logDirsReassignmentsAndElections(Target target) {
        String topic = Clients.unique("placement");
        Clients.createTopic(target, topic, 1, Map.of());
        TopicPartition partition = new TopicPartition(topic, 0);
        try (Admin admin = Clients.admin(target)) {
            var logDirs = Clients.get(admin.describeLogDirs(List.of(1)).allDescriptions()).get(1);
            assertEquals(1, logDirs.size());
            var dir = logDirs.values().iterator().next();
            assertTrue(dir.replicaInfos().containsKey(partition));
            assertTrue(dir.totalBytes().isPresent() && dir.usableBytes().isPresent());

            assertEquals(Map.of(), Clients.get(admin.listPartitionReassignments(Set.of(partition)).reassignments()));
            assertFailsWith(ElectionNotNeededException.class,
                    admin.electLeaders(ElectionType.PREFERRED, Set.of(partition)).all());
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("targets")
    void transactionsAndProducers(Target target) {
        String topic = Clients.unique("txn-admin");
        Clients.createTopic(target, topic, 1, Map.of());
        TopicPartition partition = new TopicPartition(topic, 0);
        String transactionalId = Clients.unique("admin-txn");
        try (KafkaProducer<String, String> producer = Clients.producer(target, Map.of(
                "transactional.id", transactionalId));
             Admin admin = Clients.admin(target)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "open"));
            producer.flush();

            var listing = Clients.get(admin.listTransactions().all()).stream()
                    .filter(t -> t.transactionalId().equals(transactionalId)).toList();
            assertEquals(1, listing.size());
            assertEquals(TransactionState.ONGOING, listing.get(0).state());
            var description = Clients.get(admin.describeTransactions(List.of(transactionalId)).all()).get(transactionalId);
            assertEquals(Set.of(partition), description.topicPartitions());
            var producers = Clients.get(admin.describeProducers(List.of(partition)).all()).get(partition);
            assertEquals(1, producers.activeProducers().size());
            assertEquals(java.util.OptionalLong.of(0L), producers.activeProducers().get(0).currentTransactionStartOffset());

            Clients.get(admin.fenceProducers(List.of(transactionalId)).all());
            assertThrows(org.apache.kafka.common.KafkaException.class, producer::commitTransaction);
            // Fencing aborts the open transaction, then leaves the id idle at the bumped epoch.
            var state = Wait.forValue("the fenced transaction aborted", Clients.TIMEOUT, () -> {
                var now = Clients.get(admin.describeTransactions(List.of(transactionalId)).all())
                        .get(transactionalId).state();
                return now == TransactionState.ONGOING || now == TransactionState.PREPARE_ABORT
                        ? Optional.empty() : Optional.of(now);
            });
            assertEquals(TransactionState.EMPTY, state);
        }
    }

    private static void assertFailsWith(Class<? extends Throwable> expected, java.util.concurrent.Future<?> future) {
        Clients.KafkaCallFailed failure = assertThrows(Clients.KafkaCallFailed.class, () -> Clients.get(future));
        assertInstanceOf(expected, failure.getCause(), failure.getCause().toString());
    }

    private static void alter(Admin admin, ConfigResource resource, Collection<AlterConfigOp> ops) {
        Clients.get(admin.incrementalAlterConfigs(Map.of(resource, ops)).all());
    }
}
