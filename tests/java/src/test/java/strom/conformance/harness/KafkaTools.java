package strom.conformance.harness;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * Kafka's command-line tools (kafka-topics.sh and the rest) run from their
 * jars inside this JVM: the tool's main class with the script's arguments,
 * its output captured and its exit code caught where it would end the process.
 */
public final class KafkaTools {
    private KafkaTools() {}

    /** What a tool printed and the code it exited with. */
    public record Result(int exitCode, String out, String err) {
        /** The result, or a failure quoting the tool's output if it did not exit 0. */
        public Result ok() {
            if (exitCode != 0) {
                throw new AssertionError("tool exited with " + exitCode + "\nstdout:\n" + out + "\nstderr:\n" + err);
            }
            return this;
        }
    }

    public static Result run(String mainClass, String... args) {
        return runWithInput("", mainClass, args);
    }

    /** Runs the tool with {@code input} as its standard input. */
    public static synchronized Result runWithInput(String input, String mainClass, String... args) {
        PrintStream out = System.out;
        PrintStream err = System.err;
        InputStream in = System.in;
        ByteArrayOutputStream capturedOut = new ByteArrayOutputStream();
        ByteArrayOutputStream capturedErr = new ByteArrayOutputStream();
        // A tool may exit inside a try whose catch exits again with 1
        // (kafka-topics exits in a finally): the first exit is the tool's.
        int[] firstExit = {-1};
        Exit.setExitProcedure((code, message) -> {
            if (firstExit[0] < 0) {
                firstExit[0] = code;
            }
            throw new ToolExit(code);
        });
        try {
            System.setOut(new PrintStream(capturedOut, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(capturedErr, true, StandardCharsets.UTF_8));
            System.setIn(new ByteArrayInputStream(input.getBytes(StandardCharsets.UTF_8)));
            Class.forName(mainClass).getMethod("main", String[].class).invoke(null, (Object) args);
        } catch (InvocationTargetException e) {
            if (!(e.getCause() instanceof ToolExit)) {
                throw new AssertionError(mainClass + " failed", e.getCause());
            }
        } catch (ReflectiveOperationException e) {
            throw new AssertionError("cannot run " + mainClass, e);
        } finally {
            System.setOut(out);
            System.setErr(err);
            System.setIn(in);
            Exit.resetExitProcedure();
        }
        return new Result(Math.max(firstExit[0], 0), capturedOut.toString(StandardCharsets.UTF_8),
                capturedErr.toString(StandardCharsets.UTF_8));
    }

    private static final class ToolExit extends RuntimeException {
        ToolExit(int code) {
            super("exit " + code, null, false, false);
        }
    }
}
