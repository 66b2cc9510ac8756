package strom.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import strom.conformance.harness.Clients;
import strom.conformance.harness.ConnectWorker;
import strom.conformance.harness.Peers;
import strom.conformance.harness.Ports;
import strom.conformance.harness.StromNode;
import strom.conformance.harness.Wait;
import strom.conformance.harness.Workspace;

/**
 * A Kafka Connect distributed worker keeps its configs, offsets and status
 * in compacted topics on Strom, and runs a FileStream source and sink
 * through a Strom topic, across a restart of the worker.
 */
class ConnectTest {
    private final StromNode strom = Peers.strom();

    @Test
    void fileStreamPipelineSurvivesAWorkerRestart() throws IOException {
        Path dir = Workspace.newDir("connect");
        Path input = dir.resolve("input.txt");
        Path output = dir.resolve("output.txt");
        String topic = Clients.unique("connect-lines");
        String group = Clients.unique("connect-cluster");
        List<String> lines = IntStream.range(0, 300).mapToObj(i -> "line " + i).toList();
        append(input, lines.subList(0, 150));

        int port = Ports.free();
        try (ConnectWorker worker = new ConnectWorker(strom, group, port)) {
            worker.put("file-source", Map.of("connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "file", input.toString(), "topic", topic, "tasks.max", "1"));
            worker.put("file-sink", Map.of("connector.class", "org.apache.kafka.connect.file.FileStreamSinkConnector",
                    "file", output.toString(), "topics", topic, "tasks.max", "1"));
            awaitLines(output, lines.subList(0, 150));
        }

        // A new worker of the same group finds both connectors and their offsets in Strom's topics.
        append(input, lines.subList(150, 300));
        try (ConnectWorker worker = new ConnectWorker(strom, group, port)) {
            awaitLines(output, lines);
            assertEquals("RUNNING", worker.connectorState("file-source"));
        }
    }

    /** Waits until the sink's file holds every line; a line written twice is allowed (at-least-once), none lost. */
    private static void awaitLines(Path output, List<String> expected) {
        Wait.until("the sink wrote " + expected.size() + " lines", Duration.ofSeconds(60), () ->
                new ArrayList<>(new LinkedHashSet<>(read(output))).equals(expected));
    }

    private static List<String> read(Path file) {
        try {
            return Files.exists(file) ? Files.readAllLines(file) : List.of();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void append(Path file, List<String> lines) throws IOException {
        Files.write(file, lines, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }
}
