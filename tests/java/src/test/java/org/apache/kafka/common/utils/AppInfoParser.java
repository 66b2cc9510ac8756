package org.apache.kafka.common.utils;

/**
 * A bridge for the Connect plugins of Kafka 4.2 (connect-file and
 * connect-mirror, the newest Maven Central serves here), which read their
 * version from this class; Kafka 4.3 moved it to `utils.internals`, where
 * the 4.4 runtime the tests run keeps it.
 */
public final class AppInfoParser {
    private AppInfoParser() {}

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }
}
