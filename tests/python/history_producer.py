"""An acks=all producer run as its own process, so a test can run it inside
a network namespace (`ip netns exec`) and see the cluster from that side
of a cut. It writes `PREFIX-<n>` to one partition until STOP_FILE exists,
COUNT records are sent or DEADLINE_S passes, then flushes and exits 0.

Every delivery report is one line on stdout, flushed as it arrives, so the
test reads the history while the producer runs:

    ok <value> <offset>
    fail <value> <error name>

Extra arguments are producer settings as key=value.

    python history_producer.py BOOTSTRAP TOPIC PARTITION PREFIX COUNT STOP_FILE [key=value ...]
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Producer

DEADLINE_S = 60.0
FLUSH_S = 60.0
# Records sent between polls: a steady rate, not a burst into one batch.
PER_POLL = 5


def main(bootstrap: str, topic: str, partition: int, prefix: str, count: int, stop_file: str, settings: dict) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "none", **settings})

    def report(err, msg) -> None:
        value = msg.value().decode()
        print(f"fail {value} {err.name()}" if err else f"ok {value} {msg.offset()}", flush=True)

    sent = 0
    deadline = time.monotonic() + DEADLINE_S
    while sent < count and not os.path.exists(stop_file) and time.monotonic() < deadline:
        for _ in range(PER_POLL):
            producer.produce(topic, f"{prefix}-{sent}".encode(), partition=partition, on_delivery=report)
            sent += 1
        producer.poll(0.01)
    left = producer.flush(FLUSH_S)
    print(f"sent {sent} undelivered {left}", flush=True)
    return 0


if __name__ == "__main__":
    bootstrap, topic, partition, prefix, count, stop_file, *rest = sys.argv[1:]
    settings = dict(setting.split("=", 1) for setting in rest)
    sys.exit(main(bootstrap, topic, int(partition), prefix, int(count), stop_file, settings))
