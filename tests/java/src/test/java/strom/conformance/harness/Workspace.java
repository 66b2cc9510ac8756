package strom.conformance.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** Where servers keep their data dirs and logs: under target/work, kept after the run for reading. */
public final class Workspace {
    private static final Path ROOT = Path.of("target", "work").toAbsolutePath();

    private Workspace() {}

    /** A new, empty directory named after {@code prefix}. */
    public static Path newDir(String prefix) {
        try {
            Files.createDirectories(ROOT);
            return Files.createTempDirectory(ROOT, prefix + "-");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The repository's root: tests/java is two levels below it. */
    public static Path repoRoot() {
        return Path.of("").toAbsolutePath().getParent().getParent();
    }

    public static void writeProperties(Path file, java.util.Map<String, String> properties) {
        StringBuilder text = new StringBuilder();
        properties.forEach((key, value) -> text.append(key).append('=').append(value).append('\n'));
        try {
            Files.writeString(file, text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
