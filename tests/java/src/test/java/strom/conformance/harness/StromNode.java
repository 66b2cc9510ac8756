package strom.conformance.harness;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** One `strom server` process with its own ports and data dir, which survive restarts. */
public final class StromNode implements Target, AutoCloseable {
    static final Duration START_TIMEOUT = Duration.ofSeconds(20);

    private final Path dir;
    private final int port;
    private final Map<String, String> config = new LinkedHashMap<>();
    private ServerProcess process;

    /** A single node: a cluster of one, with Kafka's defaults but for a loopback listener. */
    public static StromNode single(Map<String, String> overrides) {
        int port = Ports.free();
        Path dir = Workspace.newDir("strom");
        Map<String, String> config = new LinkedHashMap<>();
        config.put("node.id", "1");
        config.put("listeners", "PLAINTEXT://127.0.0.1:" + port);
        config.put("log.dirs", dir.resolve("data").toString());
        config.put("group.initial.rebalance.delay.ms", "0");
        config.putAll(overrides);
        return new StromNode(dir, port, config);
    }

    /** A node of a KRaft cluster, with its config given whole. */
    static StromNode kraft(Path dir, int port, Map<String, String> config) {
        return new StromNode(dir, port, config);
    }

    StromNode(Path dir, int port, Map<String, String> config) {
        this.dir = dir;
        this.port = port;
        this.config.putAll(config);
    }

    public static Path binary() {
        String configured = System.getenv("STROM_BIN");
        return configured != null ? Path.of(configured) : Workspace.repoRoot().resolve("target/suite/strom");
    }

    @Override
    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    @Override
    public String kind() {
        return "strom";
    }

    public int port() {
        return port;
    }

    public Path dir() {
        return dir;
    }

    public Map<String, String> config() {
        return config;
    }

    public StromNode start() {
        createDir();
        List<String> command = new ArrayList<>(List.of(binary().toString(), "server"));
        config.forEach((key, value) -> {
            command.add("--override");
            command.add(key + "=" + value);
        });
        process = new ServerProcess("strom node " + config.get("node.id"), command, dir.resolve("strom.log"), port);
        process.start(START_TIMEOUT);
        return this;
    }

    /** `strom storage format` of this node's dirs, as kafka-storage format does, with {@code extra} flags. */
    public void format(String clusterId, String... extra) {
        Path properties = dir.resolve("server.properties");
        createDir();
        Workspace.writeProperties(properties, config);
        List<String> command = new ArrayList<>(List.of(binary().toString(), "storage", "format", "--config",
                properties.toString(), "--cluster-id", clusterId));
        command.addAll(List.of(extra));
        run(dir.resolve("format.log"), command.toArray(String[]::new));
    }

    public int nodeId() {
        return Integer.parseInt(config.get("node.id"));
    }

    public boolean alive() {
        return process != null && process.alive();
    }

    public void stop() {
        process.stop();
    }

    public void kill9() {
        process.kill9();
    }

    public String logTail() {
        return process == null ? "(not started)" : process.logTail();
    }

    private void createDir() {
        try {
            java.nio.file.Files.createDirectories(dir);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    static void run(Path log, String... command) {
        try {
            Process process = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
            if (!process.waitFor(1, java.util.concurrent.TimeUnit.MINUTES) || process.exitValue() != 0) {
                process.destroyForcibly();
                throw new AssertionError(String.join(" ", command) + " failed: " + java.nio.file.Files.readString(log));
            }
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void close() {
        if (process != null) {
            process.close();
        }
    }
}
