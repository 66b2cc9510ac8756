"""A consume-transform-produce client with exactly-once semantics, run as its
own process so a test can kill -9 it: it reads `input` from the group's
committed offsets, writes each record's value (upper-cased) to the same
partition of `output`, and commits the input offsets inside each
transaction. It exits 0 once every input partition is consumed up to the
end given on the command line.

A transaction that fails with an abortable error (a coordinator or leader
lost mid-transaction) is aborted and its input read again from the offsets
the last commit stored, as Kafka's exactly-once processors do; it prints
"committed <records>" after every commit.

librdkafka (2.10 to at least 2.16, confluentinc/librdkafka#5511 and #5456)
can block in send_offsets_to_transaction forever, past its timeout, when
the group coordinator's broker dropped out of a Metadata response (as a
fenced broker does, in Kafka as here) while the client still had it
cached: the TxnOffsetCommit then waits for a broker connection that never
comes. A watchdog ends the process then with STUCK_EXIT (5), saying so,
so a caller can start a new instance, which fences this one's transaction.

With STALL_AT it stops once that many input records are committed: it opens
one more transaction, writes a batch into it, says "stalled" and waits to be
killed, so the kill always leaves an open transaction behind.

    python eos_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID END0,END1,... [STALL_AT]
"""

from __future__ import annotations

import os
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

BATCH = 500
DEADLINE_S = 240.0
SEND_OFFSETS_TIMEOUT_S = 30.0
# How long past its own timeout a librdkafka call may take before the
# client counts as stuck.
STUCK_GRACE_S = 15.0
STUCK_EXIT = 5
STEP_ATTEMPTS = 10
RETRY_BACKOFF_S = 0.2
COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str, ends: list[int], stall_at: int | None) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(60)
    partitions = [TopicPartition(source, p) for p in range(len(ends))]
    # A group coordinator just elected may not serve yet: ask again.
    committed = retrying(lambda: consumer.committed(partitions, timeout=60))
    consumer.assign([TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING) for tp in committed])
    positions = {tp.partition: max(tp.offset, 0) for tp in committed}
    committed_positions = dict(positions)
    print(f"starting from {positions}", flush=True)
    deadline = time.monotonic() + DEADLINE_S
    while any(positions[p] < end for p, end in enumerate(ends)):
        if time.monotonic() >= deadline:
            print(f"gave up at {positions}", flush=True)
            return 2
        messages = consumer.consume(num_messages=BATCH, timeout=0.5)
        records = [m for m in messages if m.error() is None]
        for m in messages:
            if m.error() is not None:
                print(f"consumer error: {m.error()}", flush=True)
        if not records:
            continue
        stalling = stall_at is not None and sum(positions.values()) >= stall_at
        producer.begin_transaction()
        for m in records:
            producer.produce(sink, key=m.key(), value=m.value().upper(), partition=m.partition())
            positions[m.partition()] = m.offset() + 1
        if stalling:
            producer.flush(60)
            print("stalled with an open transaction", flush=True)
            time.sleep(max(deadline - time.monotonic(), 0))
            return 4
        try:
            commit(producer, consumer, source, positions)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                print(f"commit failed: {exc}", flush=True)
                return 3
            print(f"aborting: {exc}", flush=True)
            producer.abort_transaction(60)
            positions = dict(committed_positions)
            consumer.assign([TopicPartition(source, p, offset) for p, offset in positions.items()])
            continue
        committed_positions = dict(positions)
        print(f"committed {sum(positions.values())}", flush=True)
    print(f"done at {positions}", flush=True)
    consumer.close()
    return 0


def commit(producer: Producer, consumer: Consumer, source: str, positions: dict[int, int]) -> None:
    """Adds the input offsets to the transaction and commits it, each step
    again while its error is retriable; raises an error that is not."""
    offsets = [TopicPartition(source, p, offset) for p, offset in positions.items()]
    metadata = consumer.consumer_group_metadata()

    def send() -> None:
        producer.send_offsets_to_transaction(offsets, metadata, SEND_OFFSETS_TIMEOUT_S)

    retrying(lambda: watched(send, SEND_OFFSETS_TIMEOUT_S, "send_offsets_to_transaction"))
    retrying(lambda: producer.commit_transaction(60))


def watched(step, timeout_s: float, name: str):
    """`step()`, or the process ends with STUCK_EXIT once it outlives its
    timeout by STUCK_GRACE_S (the librdkafka hang in the module doc)."""

    def stuck() -> None:
        print(f"stuck: {name} still blocked {timeout_s + STUCK_GRACE_S:.0f} s after it began", flush=True)
        os._exit(STUCK_EXIT)

    watchdog = threading.Timer(timeout_s + STUCK_GRACE_S, stuck)
    watchdog.daemon = True
    watchdog.start()
    try:
        return step()
    finally:
        watchdog.cancel()


def retrying(step):
    """`step()`, again (a bounded number of times, after a short backoff)
    while it fails with a retriable error or a coordinator on the move."""
    for attempt in range(1, STEP_ATTEMPTS + 1):
        try:
            return step()
        except KafkaException as exc:
            error = exc.args[0]
            if attempt == STEP_ATTEMPTS or not (error.retriable() or error.code() in COORDINATOR_MOVING):
                raise
            print(f"retrying: {exc}", flush=True)
            time.sleep(RETRY_BACKOFF_S)


if __name__ == "__main__":
    bootstrap, source, sink, group, transactional_id, ends = sys.argv[1:7]
    stall_at = int(sys.argv[7]) if len(sys.argv) > 7 else None
    sys.exit(main(bootstrap, source, sink, group, transactional_id, [int(e) for e in ends.split(",")], stall_at))
