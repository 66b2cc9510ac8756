package strom.conformance.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One server process (a Strom node or a Kafka peer) with its own log file.
 * It is ready once it accepts connections on its client port; every wait is bounded.
 */
public final class ServerProcess implements AutoCloseable {
    private static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);

    private final String name;
    private final List<String> command;
    private final Path log;
    private final int port;
    private Process process;

    public ServerProcess(String name, List<String> command, Path log, int port) {
        this.name = name;
        this.command = List.copyOf(command);
        this.log = log;
        this.port = port;
    }

    public void start(Duration timeout) {
        if (alive()) {
            throw new IllegalStateException(name + " is already running");
        }
        try {
            Files.writeString(log, "\n=== start: " + String.join(" ", command) + "\n", StandardCharsets.UTF_8,
                    java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
            process = new ProcessBuilder(command)
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
                    .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")))
                    .start();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot start " + name, e);
        }
        Wait.until(name + " listening on " + port, timeout, () -> {
            if (!process.isAlive()) {
                throw new AssertionError(name + " exited with " + process.exitValue() + " during start-up\n" + logTail());
            }
            return accepts(port);
        });
    }

    public boolean alive() {
        return process != null && process.isAlive();
    }

    public long pid() {
        return process.pid();
    }

    /** SIGTERM, and a clean exit within the stop timeout. */
    public void stop() {
        if (!alive()) {
            return;
        }
        process.destroy();
        if (!waitFor(STOP_TIMEOUT)) {
            process.destroyForcibly();
            waitFor(STOP_TIMEOUT);
            throw new AssertionError(name + " ignored SIGTERM for " + STOP_TIMEOUT + "\n" + logTail());
        }
    }

    /** SIGKILL: no chance to flush or clean up. */
    public void kill9() {
        process.destroyForcibly();
        waitFor(STOP_TIMEOUT);
    }

    public String logTail() {
        try {
            List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 60), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    @Override
    public void close() {
        if (alive()) {
            process.destroy();
            if (!waitFor(STOP_TIMEOUT)) {
                process.destroyForcibly();
                waitFor(STOP_TIMEOUT);
            }
        }
    }

    private boolean waitFor(Duration timeout) {
        try {
            return process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    static boolean accepts(int port) {
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress("127.0.0.1", port), 200);
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
