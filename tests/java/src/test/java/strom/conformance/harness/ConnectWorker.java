package strom.conformance.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.runtime.Connect;

/**
 * A Kafka Connect distributed worker in this JVM, keeping its configs,
 * offsets and status in topics of the cluster it names, and driven through
 * its REST API as an operator drives it.
 */
public final class ConnectWorker implements AutoCloseable {
    private final HttpClient http = HttpClient.newHttpClient();
    private final int port;
    private final Connect<?> connect;

    /** Starts a worker of {@code group} on {@code target}, its internal topics named after the group. */
    public ConnectWorker(Target target, String group, int port) {
        this.port = port;
        Map<String, String> config = new HashMap<>();
        config.put("bootstrap.servers", target.bootstrap());
        config.put("group.id", group);
        config.put("listeners", "http://127.0.0.1:" + port);
        config.put("config.storage.topic", group + "-configs");
        config.put("offset.storage.topic", group + "-offsets");
        config.put("status.storage.topic", group + "-status");
        config.put("config.storage.replication.factor", "1");
        config.put("offset.storage.replication.factor", "1");
        config.put("status.storage.replication.factor", "1");
        config.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        config.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        config.put("offset.flush.interval.ms", "200");
        config.put("plugin.discovery", "only_scan");
        connect = new ConnectDistributed().startConnect(config);
    }

    /** Creates or updates a connector, once the worker has joined its group and can take it. */
    public void put(String name, Map<String, String> config) {
        StringBuilder json = new StringBuilder("{");
        config.forEach((k, v) -> json.append(json.length() > 1 ? "," : "").append('"').append(k).append("\":\"")
                .append(v.replace("\\", "\\\\").replace("\"", "\\\"")).append('"'));
        json.append('}');
        HttpRequest request = HttpRequest.newBuilder(uri("/connectors/" + name + "/config"))
                .header("Content-Type", "application/json")
                .PUT(HttpRequest.BodyPublishers.ofString(json.toString())).build();
        Wait.until("connector " + name + " created", Clients.TIMEOUT, () -> {
            int status = send(request).statusCode();
            return status == 200 || status == 201;
        });
    }

    /** The connector's state (RUNNING, FAILED, …) as the REST API reports it. */
    public String connectorState(String name) {
        HttpRequest request = HttpRequest.newBuilder(uri("/connectors/" + name + "/status")).GET().build();
        return Wait.forValue("the status of " + name, Clients.TIMEOUT, () -> {
            Matcher state = Pattern.compile("\"connector\":\\{\"state\":\"(\\w+)\"").matcher(send(request).body());
            return state.find() ? Optional.of(state.group(1)) : Optional.empty();
        });
    }

    /** The connector's status as the REST API reports it, raw. */
    public String status(String name) {
        return send(HttpRequest.newBuilder(uri("/connectors/" + name + "/status")).GET().build()).body();
    }

    private URI uri(String path) {
        return URI.create("http://127.0.0.1:" + port + path);
    }

    private HttpResponse<String> send(HttpRequest request) {
        try {
            return http.send(request, HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void close() {
        connect.stop();
    }
}
