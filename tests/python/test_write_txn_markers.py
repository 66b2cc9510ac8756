"""WriteTxnMarkers on the wire: the request a transaction coordinator (or
`kafka-transactions.sh abort`) sends to end a transaction on a partition.

A librdkafka transactional producer leaves a transaction open, as a crashed
client would; its producer id and epoch are read back with `strom dump-log`;
a hand-built WriteTxnMarkers v1 then commits or aborts it, and a
read_committed librdkafka consumer sees the outcome: the last stable offset
moves past the transaction and only committed records are delivered. A
marker is an acks=all write: refused while the ISR is below
`min.insync.replicas`.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from harness import confluent_producer, create_topic, strom_binary, wait_until
from test_configs import describe_topic, set_topic_configs
import wire

WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 1  # the only version Kafka 4 serves; flexible
NOT_ENOUGH_REPLICAS = 19
TOOL_TIMEOUT_S = 30
READ_TIMEOUT_S = 30


def open_transaction(bootstrap: str, topic: str, values: list[str]) -> None:
    """Sends `values` in a transaction that is never ended (the producer is abandoned)."""
    producer = confluent_producer(
        bootstrap,
        **{"enable.idempotence": True, "transactional.id": f"hanging-{uuid.uuid4().hex}", "transaction.timeout.ms": 600_000},
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    assert producer.flush(30) == 0


def producer_of_first_batch(broker, topic: str) -> tuple[int, int]:
    """(producer id, epoch) of the partition's first batch, as `strom dump-log` prints it."""
    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    done = subprocess.run([str(strom_binary()), "dump-log", "--files", str(segment)], capture_output=True,
                          text=True, timeout=TOOL_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    match = re.search(r"producerId: (\d+) producerEpoch: (\d+) .*isTransactional: true", done.stdout)
    assert match, done.stdout
    return int(match[1]), int(match[2])


def write_txn_markers(port: int, producer_id: int, epoch: int, commit: bool, partitions: dict[str, list[int]]):
    """One marker for `partitions`; returns {(topic, partition): error_code}."""
    body = wire.Writer(flexible=True).length(1).int64(producer_id).int16(epoch).boolean(commit)
    body.length(len(partitions))
    for topic, indexes in partitions.items():
        body.string(topic).length(len(indexes))
        for index in indexes:
            body.int32(index)
        body.tagged_fields()
    body.int32(0).tagged_fields().tagged_fields()  # coordinator epoch; marker's and request's tags
    request = wire.request(WRITE_TXN_MARKERS, MARKERS_VERSION, 11, body.build(), flexible=True)
    payload = wire.call(port, request)

    reader = wire.Reader(payload, flexible=True)
    assert reader.int32() == 11
    reader.tagged_fields()
    errors = {}
    [answered_producer] = reader.array(lambda r: read_marker_result(r, errors))
    reader.tagged_fields()
    reader.assert_at_end("WriteTxnMarkers v1 response")
    assert answered_producer == producer_id
    return errors


def read_marker_result(reader: wire.Reader, errors: dict) -> int:
    producer_id = reader.int64()

    def topic(r: wire.Reader) -> None:
        name = r.string()

        def partition(p: wire.Reader) -> None:
            index, error = p.int32(), p.int16()
            p.tagged_fields()
            errors[(name, index)] = error

        r.array(partition)
        r.tagged_fields()

    reader.array(topic)
    reader.tagged_fields()
    return producer_id


def read_committed_values(bootstrap: str, topic: str, last_value: str) -> list[str]:
    """Values a read_committed consumer delivers from the start up to `last_value`."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"markers-{uuid.uuid4().hex}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    })
    values: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while last_value not in values:
            assert time.monotonic() < deadline, f"read_committed consumer stalled after {values}"
            for msg in consumer.consume(num_messages=100, timeout=0.2):
                assert not msg.error(), msg.error()
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def stable_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_markers_end_a_hanging_transaction(broker, commit):
    topic = "hanging"
    create_topic(broker.bootstrap, topic, partitions=1)
    open_transaction(broker.bootstrap, topic, ["txn-0", "txn-1", "txn-2"])
    producer = confluent_producer(broker.bootstrap)
    producer.produce(topic, b"after", partition=0)
    assert producer.flush(30) == 0
    assert stable_offset(broker.bootstrap, topic) == 0, "the open transaction holds the last stable offset"

    producer_id, epoch = producer_of_first_batch(broker, topic)
    errors = write_txn_markers(broker.port, producer_id, epoch, commit, {topic: [0, 7], "no-such-topic": [0]})
    assert errors == {
        (topic, 0): wire.NONE,
        (topic, 7): wire.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): wire.UNKNOWN_TOPIC_OR_PARTITION,
    }

    # Three records, "after", then the marker: the stable offset is the end.
    assert stable_offset(broker.bootstrap, topic) == 5
    expected = ["txn-0", "txn-1", "txn-2", "after"] if commit else ["after"]
    assert read_committed_values(broker.bootstrap, topic, "after") == expected


def test_a_marker_is_refused_while_the_isr_is_below_min_insync_replicas(broker):
    # A marker is an acks=all write: an ISR of one below min.insync.replicas=2
    # refuses it before anything is appended, and the coordinator retries.
    topic = "short-isr"
    create_topic(broker.bootstrap, topic, partitions=1)
    open_transaction(broker.bootstrap, topic, ["txn-0", "txn-1"])
    producer_id, epoch = producer_of_first_batch(broker, topic)

    set_topic_configs(broker.bootstrap, topic, min_insync_replicas="2")
    wait_until(lambda: describe_topic(broker.bootstrap, topic)["min.insync.replicas"].value == "2", 10, "min ISR 2")
    assert write_txn_markers(broker.port, producer_id, epoch, True, {topic: [0]}) == {(topic, 0): NOT_ENOUGH_REPLICAS}
    assert stable_offset(broker.bootstrap, topic) == 0, "no marker written"

    set_topic_configs(broker.bootstrap, topic, min_insync_replicas="1")
    wait_until(lambda: describe_topic(broker.bootstrap, topic)["min.insync.replicas"].value == "1", 10, "min ISR 1")
    assert write_txn_markers(broker.port, producer_id, epoch, True, {topic: [0]}) == {(topic, 0): wire.NONE}
    assert stable_offset(broker.bootstrap, topic) == 3, "two records and the marker"
    assert read_committed_values(broker.bootstrap, topic, "txn-1") == ["txn-0", "txn-1"]
