package strom.conformance.harness;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Free loopback ports below the kernel's ephemeral range, where no outgoing
 * connection can take a port between this check and the server's bind.
 */
public final class Ports {
    private static final Set<Integer> HANDED_OUT = new HashSet<>();

    private Ports() {}

    public static synchronized int free() {
        int ephemeralLow = ephemeralLow();
        int low = Math.max(1024, ephemeralLow / 2);
        for (int attempt = 0; attempt < 1000; attempt++) {
            int port = ThreadLocalRandom.current().nextInt(low, ephemeralLow);
            if (!HANDED_OUT.contains(port) && isFree(port)) {
                HANDED_OUT.add(port);
                return port;
            }
        }
        throw new IllegalStateException("no free loopback port in " + low + ".." + ephemeralLow);
    }

    static boolean isFree(int port) {
        try (ServerSocket socket = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static int ephemeralLow() {
        try {
            // Read as a stream: /proc files report a size that readString trusts.
            String range = Files.readAllLines(Path.of("/proc/sys/net/ipv4/ip_local_port_range")).get(0).trim();
            return Integer.parseInt(range.split("\\s+")[0]);
        } catch (IOException | RuntimeException e) {
            return 32768;
        }
    }
}
