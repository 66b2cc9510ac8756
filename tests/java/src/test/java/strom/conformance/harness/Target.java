package strom.conformance.harness;

/** A running cluster a test talks to: Strom, or the Kafka peer it is compared with. */
public interface Target {
    /** bootstrap.servers for a client. */
    String bootstrap();

    /** "strom" or "kafka", for test names and messages. */
    String kind();
}
