package strom.conformance.harness;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.Uuid;

/**
 * A KRaft cluster of real `strom` processes on loopback: {@code size}
 * combined nodes (broker and controller) with ids 1.., static voters, each
 * formatted with `strom storage format` before its first start.
 */
public final class StromCluster implements Target, AutoCloseable {
    private static final Duration SERVING_TIMEOUT = Duration.ofSeconds(60);

    private final List<StromNode> nodes = new ArrayList<>();
    private final String clusterId = Uuid.randomUuid().toString();

    public StromCluster(int size, Map<String, String> overrides) {
        Path dir = Workspace.newDir("strom-cluster");
        List<int[]> ports = new ArrayList<>();
        for (int id = 1; id <= size; id++) {
            ports.add(new int[] {Ports.free(), Ports.free()});
        }
        String voters = java.util.stream.IntStream.rangeClosed(1, size)
                .mapToObj(id -> id + "@127.0.0.1:" + ports.get(id - 1)[1]).collect(Collectors.joining(","));
        for (int id = 1; id <= size; id++) {
            int[] own = ports.get(id - 1);
            Path nodeDir = dir.resolve("node-" + id);
            Map<String, String> config = new LinkedHashMap<>();
            config.put("node.id", Integer.toString(id));
            config.put("process.roles", "broker,controller");
            config.put("listeners", "PLAINTEXT://127.0.0.1:" + own[0] + ",CONTROLLER://127.0.0.1:" + own[1]);
            config.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
            config.put("controller.listener.names", "CONTROLLER");
            config.put("controller.quorum.voters", voters);
            config.put("log.dirs", nodeDir.resolve("data").toString());
            config.put("group.initial.rebalance.delay.ms", "0");
            // Short quorum timeouts: elections take a fraction of a second.
            config.put("controller.quorum.election.timeout.ms", "300");
            config.put("controller.quorum.fetch.timeout.ms", "600");
            config.put("controller.quorum.request.timeout.ms", "500");
            config.put("controller.quorum.election.backoff.max.ms", "300");
            config.putAll(overrides);
            nodes.add(StromNode.kraft(nodeDir, own[0], config));
        }
    }

    /**
     * Formats the nodes whose log dir is not formatted yet (a dir another
     * broker wrote keeps its cluster), starts every node and waits until
     * each broker lists all of them as live.
     */
    public StromCluster start() {
        for (StromNode node : nodes) {
            if (!Path.of(node.config().get("log.dirs")).resolve("meta.properties").toFile().exists()) {
                node.format(clusterId);
            }
        }
        nodes.forEach(StromNode::start);
        for (StromNode node : nodes) {
            try (Admin admin = Clients.admin(node)) {
                Wait.until("every broker live through node " + node.nodeId(), SERVING_TIMEOUT, () ->
                        Clients.get(admin.describeCluster().nodes()).size() == nodes.size());
            }
        }
        return this;
    }

    public List<StromNode> nodes() {
        return nodes;
    }

    public StromNode node(int id) {
        return nodes.get(id - 1);
    }

    @Override
    public String bootstrap() {
        return nodes.stream().map(StromNode::bootstrap).collect(Collectors.joining(","));
    }

    @Override
    public String kind() {
        return "strom-cluster";
    }

    /** The leader of a partition as a running broker sees it, once one is elected. */
    public int leaderOf(String topic, int partition) {
        return Wait.forValue("a leader of " + topic + "-" + partition, SERVING_TIMEOUT, () -> {
            for (StromNode node : nodes) {
                if (!node.alive()) {
                    continue;
                }
                try (Admin admin = Clients.admin(node)) {
                    var leader = Clients.get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic)
                            .partitions().get(partition).leader();
                    if (leader != null && nodes.get(leader.id() - 1).alive()) {
                        return Optional.of(leader.id());
                    }
                }
            }
            return Optional.empty();
        });
    }

    @Override
    public void close() {
        nodes.forEach(StromNode::close);
    }
}
