"""Leader epochs (KIP-101, KIP-320): the per-partition epoch cache kept in
Kafka's `leader-epoch-checkpoint`, OffsetForLeaderEpoch answered from it,
and `current_leader_epoch` fencing in OffsetForLeaderEpoch, ListOffsets and
Fetch. A single node leads every partition at epoch 0, so every batch it
writes carries epoch 0."""

from __future__ import annotations

import re
import urllib.request

import pytest
import wire
from confluent_kafka import KafkaError, TopicPartition
from harness import confluent_consumer, confluent_producer, create_topic, free_port, produce_one_confluent, wait_until
from wire import OFFSET_FOR_LEADER_EPOCH, offset_for_leader_epoch

FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
RECORDS = 10
FOLLOWER_REPLICA_ID = 1
CHECKPOINT_FILE = "leader-epoch-checkpoint"


@pytest.fixture
def filled(broker):
    create_topic(broker.bootstrap, "epochs", partitions=2)
    producer = confluent_producer(broker.bootstrap)
    for i in range(RECORDS):
        assert produce_one_confluent(producer, "epochs", b"v%d" % i, partition=0).error is None
    return broker


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offsets_come_from_the_epoch_cache(filled, version):
    # Answers are keyed by partition: one case per request.
    cases = {
        (0, -1, 0): (wire.NONE, 0, RECORDS),  # the current epoch ends at the log end
        (0, 0, 0): (wire.NONE, 0, RECORDS),  # the right current epoch passes
        (1, -1, 0): (wire.NONE, 0, 0),  # a leader records its epoch's start before any append, as Kafka's makeLeader
        (0, -1, 1): (wire.NONE, -1, -1),  # an epoch newer than any known
        (0, -1, -1): (wire.NONE, -1, -1),  # the undefined epoch
        (7, -1, 0): (wire.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    }
    for case, expected in cases.items():
        [answer] = offset_for_leader_epoch(filled.port, version, "epochs", [case]).values()
        assert answer == expected, (case, answer)
    if version >= 3:
        [answer] = offset_for_leader_epoch(filled.port, version, "epochs", [(0, 0, 0)], FOLLOWER_REPLICA_ID).values()
        assert answer == (wire.NONE, 0, RECORDS), "a follower gets the same answer"


def test_versions_kafka_4_removed_are_refused(filled):
    """Kafka 4 serves OffsetForLeaderEpoch from v2 (KIP-896): an older
    version closes the connection, as any unsupported version does."""
    assert wire.api_versions(filled.port).versions[OFFSET_FOR_LEADER_EPOCH] == (2, 4)
    reaction = wire.exchange(filled.port, wire.request(OFFSET_FOR_LEADER_EPOCH, 1, 5, b""))
    assert reaction.closed and not reaction.received, reaction


@pytest.mark.parametrize(
    "current_leader_epoch, expected", [(1, UNKNOWN_LEADER_EPOCH), (-2, FENCED_LEADER_EPOCH), (0, wire.NONE)]
)
def test_current_leader_epoch_is_checked_by_every_api_that_takes_it(filled, current_leader_epoch, expected):
    """Kafka's rule: -1 names no epoch; an older one is fenced, a newer one unknown."""
    [(error, *_)] = offset_for_leader_epoch(filled.port, 4, "epochs", [(0, current_leader_epoch, 0)]).values()
    assert error == expected
    listed = wire.list_offsets_v5(filled.port, "epochs", [0], current_leader_epoch=current_leader_epoch)
    assert listed[0] == (expected, RECORDS if expected == wire.NONE else -1)
    partition = wire.FetchPartition(0, 0, current_leader_epoch=current_leader_epoch)
    fetched = wire.fetch(filled.port, 12, [("epochs", [partition])])
    answer = fetched.partitions()[("epochs", 0)]
    assert answer.error_code == expected
    assert (answer.records is not None and len(answer.records) > 0) == (expected == wire.NONE)


def checkpoint_text(broker, topic: str, partition: int) -> str:
    return (broker.data_dir / f"{topic}-{partition}" / CHECKPOINT_FILE).read_text()


def test_the_checkpoint_sits_beside_the_segments_in_kafkas_format_across_restarts(filled):
    segments = list((filled.data_dir / "epochs-0").glob("*.log"))
    assert segments, "the partition dir holds the segments"
    assert checkpoint_text(filled, "epochs", 0) == "0\n1\n0 0\n", "version, count, then `epoch start-offset`"
    filled.restart()
    assert checkpoint_text(filled, "epochs", 0) == "0\n1\n0 0\n"
    filled.stop()
    (filled.data_dir / "epochs-0" / CHECKPOINT_FILE).write_text("0\n2\n0 0\n")  # damaged: one line short
    filled.start()
    assert checkpoint_text(filled, "epochs", 0) == "0\n1\n0 0\n", "rebuilt from the batches"
    [answer] = offset_for_leader_epoch(filled.port, 4, "epochs", [(0, 0, 0)]).values()
    assert answer == (wire.NONE, 0, RECORDS)


def requests_served(metrics_port: int, api: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = rf'^kafka_network_requestmetrics_requests_total\{{request="{api}"\}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


@pytest.fixture
def metered(broker_factory):
    port = free_port()
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{port}"})
    create_topic(broker.bootstrap, "epochs")
    producer = confluent_producer(broker.bootstrap)
    for i in range(RECORDS):
        assert produce_one_confluent(producer, "epochs", b"v%d" % i).error is None
    return broker, port


def test_librdkafka_validates_a_position_with_an_epoch_before_fetching(metered):
    """A position carrying a leader epoch (KIP-320) is checked with
    OffsetForLeaderEpoch before the consumer fetches from it."""
    broker, metrics_port = metered
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "validating", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("epochs", 0, 4, leader_epoch=0)])
        values = []

        def consumed():
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append((message.offset(), message.leader_epoch()))
            return len(values) >= RECORDS - 4

        wait_until(consumed, 30, "the records from offset 4")
        assert values == [(offset, 0) for offset in range(4, RECORDS)]
        assert requests_served(metrics_port, "OffsetForLeaderEpoch") >= 1, "the position was validated"
    finally:
        consumer.close()


def test_librdkafka_detects_a_position_past_the_end_of_its_epoch_as_truncation(metered):
    """A position beyond where its epoch ends on the broker is a truncated
    log to the consumer (KIP-320), not an offset out of range: with
    `auto.offset.reset=error` it reports the truncation."""
    broker, _ = metered
    conf = {"group.id": "truncated", "enable.auto.commit": False, "auto.offset.reset": "error"}
    consumer = confluent_consumer(broker.bootstrap, **conf)
    errors = []
    try:
        consumer.assign([TopicPartition("epochs", 0, RECORDS + 5, leader_epoch=0)])

        def failed():
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                errors.append(message.error())
            return errors

        wait_until(failed, 30, "the consumer to report the truncation")
        # librdkafka reports it as a failed reset, naming the truncation and
        # the broker's end offset for the epoch (not an out-of-range fetch).
        assert errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors[0]
        assert "log truncation detected" in errors[0].str(), errors[0]
        assert f"broker end offset is {RECORDS} (offset leader epoch 0)" in errors[0].str(), errors[0]
    finally:
        consumer.close()
