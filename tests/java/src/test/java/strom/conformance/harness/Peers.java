package strom.conformance.harness;

import java.util.Map;
import java.util.stream.Stream;

/**
 * The servers every test class shares: one Strom node, one Kafka peer and
 * one three-node Strom cluster for the whole run, started on first use and
 * stopped when the JVM exits. Tests
 * keep out of each other's way with topic and group names of their own.
 */
public final class Peers {
    private static StromNode strom;
    private static KafkaPeer kafka;
    private static StromCluster cluster;

    private Peers() {}

    public static synchronized StromNode strom() {
        if (strom == null) {
            strom = StromNode.single(Map.of()).start();
            Runtime.getRuntime().addShutdownHook(new Thread(strom::close));
        }
        return strom;
    }

    public static synchronized KafkaPeer kafka() {
        if (kafka == null) {
            kafka = new KafkaPeer(Map.of()).start();
            Runtime.getRuntime().addShutdownHook(new Thread(kafka::close));
        }
        return kafka;
    }

    /** A three-node KRaft cluster, for the classes that test replication and failover. */
    public static synchronized StromCluster cluster() {
        if (cluster == null) {
            cluster = new StromCluster(3, Map.of()).start();
            Runtime.getRuntime().addShutdownHook(new Thread(cluster::close));
        }
        return cluster;
    }

    /** Both, for a test that asks each the same question. */
    public static Stream<Target> both() {
        return Stream.of(new Shared(strom()), new Shared(kafka()));
    }

    /**
     * A shared server as a test argument: not AutoCloseable, so a
     * parameterized test does not close it after one invocation.
     */
    private record Shared(Target server) implements Target {
        @Override
        public String bootstrap() {
            return server.bootstrap();
        }

        @Override
        public String kind() {
            return server.kind();
        }

        @Override
        public String toString() {
            return server.kind();
        }
    }
}
