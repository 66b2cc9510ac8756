package strom.conformance.harness;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.Uuid;

/**
 * Apache Kafka itself, as a reference peer: one KRaft node (broker and
 * controller) formatted with Kafka's storage tool and started with its
 * `kafka.Kafka` main class, from the jars on this JVM's class path.
 */
public final class KafkaPeer implements Target, AutoCloseable {
    private static final Duration START_TIMEOUT = Duration.ofSeconds(60);

    private final Path dir;
    private final int port;
    private final int controllerPort;
    private final Map<String, String> config = new LinkedHashMap<>();
    private ServerProcess process;

    public KafkaPeer(Map<String, String> overrides) {
        dir = Workspace.newDir("kafka");
        port = Ports.free();
        controllerPort = Ports.free();
        config.put("process.roles", "broker,controller");
        config.put("node.id", "1");
        config.put("controller.quorum.voters", "1@127.0.0.1:" + controllerPort);
        config.put("listeners", "PLAINTEXT://127.0.0.1:" + port + ",CONTROLLER://127.0.0.1:" + controllerPort);
        config.put("advertised.listeners", "PLAINTEXT://127.0.0.1:" + port);
        config.put("controller.listener.names", "CONTROLLER");
        config.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
        config.put("log.dirs", dir.resolve("data").toString());
        // One node: the internal topics cannot have more replicas than that.
        config.put("offsets.topic.replication.factor", "1");
        config.put("transaction.state.log.replication.factor", "1");
        config.put("transaction.state.log.min.isr", "1");
        config.put("share.coordinator.state.topic.replication.factor", "1");
        config.put("share.coordinator.state.topic.min.isr", "1");
        config.put("group.initial.rebalance.delay.ms", "0");
        config.putAll(overrides);
    }

    @Override
    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    @Override
    public String kind() {
        return "kafka";
    }

    public Path dir() {
        return dir;
    }

    public Map<String, String> config() {
        return config;
    }

    public KafkaPeer start() {
        Path properties = dir.resolve("server.properties");
        Workspace.writeProperties(properties, config);
        if (!Path.of(config.get("log.dirs")).resolve("meta.properties").toFile().exists()) {
            format(Uuid.randomUuid().toString());
        }
        process = new ServerProcess("kafka peer", java("kafka.Kafka", properties.toString()),
                dir.resolve("kafka.log"), port);
        process.start(START_TIMEOUT);
        return this;
    }

    /** kafka-storage format of the log dir, with extra arguments such as {@code --release-version}. */
    public void format(String clusterId, String... extra) {
        Path properties = dir.resolve("server.properties");
        Workspace.writeProperties(properties, config);
        List<String> args = new ArrayList<>(List.of("format", "--cluster-id", clusterId, "--config",
                properties.toString()));
        args.addAll(List.of(extra));
        runTool(dir.resolve("format.log"), "kafka.tools.StorageTool", args.toArray(String[]::new));
    }

    public void stop() {
        process.stop();
    }

    public String logTail() {
        return process == null ? "(not started)" : process.logTail();
    }

    @Override
    public void close() {
        if (process != null) {
            process.close();
        }
    }

    /** A command line that runs {@code mainClass} in a new JVM with this JVM's class path. */
    public static List<String> java(String mainClass, String... args) {
        List<String> command = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC",
                "-Dlog4j2.configurationFile=" + resource("kafka-peer-log4j2.xml"),
                "-cp", classPath(), mainClass));
        command.addAll(List.of(args));
        return command;
    }

    /** Runs a Kafka tool to completion; fails the test on a non-zero exit. */
    public static void runTool(Path log, String mainClass, String... args) {
        try {
            Process tool = new ProcessBuilder(java(mainClass, args))
                    .redirectErrorStream(true)
                    .redirectOutput(log.toFile())
                    .start();
            if (!tool.waitFor(2, TimeUnit.MINUTES)) {
                tool.destroyForcibly();
                throw new AssertionError(mainClass + " did not finish within 2 minutes");
            }
            if (tool.exitValue() != 0) {
                throw new AssertionError(mainClass + " exited with " + tool.exitValue() + ": "
                        + java.nio.file.Files.readString(log));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    static String classPath() {
        String surefire = System.getProperty("surefire.test.class.path");
        return surefire != null && !surefire.isEmpty() ? surefire : System.getProperty("java.class.path");
    }

    private static String resource(String name) {
        try {
            return new File(KafkaPeer.class.getClassLoader().getResource(name).toURI()).getPath();
        } catch (java.net.URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }
}
