package strom.conformance.harness;

import java.time.Duration;
import java.util.Optional;
import java.util.function.Supplier;

/** Bounded waits on a condition: a condition that never holds fails the test. */
public final class Wait {
    private static final Duration POLL = Duration.ofMillis(50);

    private Wait() {}

    /** Polls until {@code condition} holds, or fails naming {@code what}. */
    public static void until(String what, Duration timeout, Supplier<Boolean> condition) {
        forValue(what, timeout, () -> condition.get() ? Optional.of(true) : Optional.empty());
    }

    /** Polls until {@code probe} yields a value; exceptions count as "not yet". */
    public static <T> T forValue(String what, Duration timeout, Supplier<Optional<T>> probe) {
        long deadline = System.nanoTime() + timeout.toNanos();
        RuntimeException last = null;
        while (true) {
            try {
                Optional<T> value = probe.get();
                if (value.isPresent()) {
                    return value.get();
                }
            } catch (RuntimeException e) {
                last = e;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout + " waiting for " + what, last);
            }
            sleep(POLL);
        }
    }

    static void sleep(Duration duration) {
        try {
            Thread.sleep(duration.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }
}
