"""ListOffsets as real clients use it: earliest/latest watermarks and lookup
by timestamp, which must return the first offset whose timestamp is at least
the target, also from the middle of a batch.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_client,
    confluent_consumer,
    confluent_producer,
    create_topic,
    kafka_python_consumer,
    now_ms,
    produce_confluent,
    wait_future,
)

TOPIC = "timed"
BATCHES = 10
PER_BATCH = 10
STEP_MS = 10
COUNT = BATCHES * PER_BATCH


@pytest.fixture
def timed_topic(broker):
    """Partition 0 holds COUNT records at T0, T0+10, ... in batches of ten; partition 1 stays empty."""
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    t0 = now_ms() - 3_600_000
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 100, "acks": "all"})
    for batch in range(BATCHES):
        records = [
            OutRecord(None, b"%d" % i, (), t0 + i * STEP_MS) for i in range(batch * PER_BATCH, (batch + 1) * PER_BATCH)
        ]
        deliveries = produce_confluent(producer, TOPIC, records, partition=0)
        assert [d.offset for d in deliveries] == list(range(batch * PER_BATCH, (batch + 1) * PER_BATCH))
    return broker, t0


def expected_offset(t0: int, target: int) -> int | None:
    """First offset whose timestamp T0 + 10*offset is >= target, or None past the end."""
    for offset in range(COUNT):
        if t0 + offset * STEP_MS >= target:
            return offset
    return None


def targets(t0: int) -> list[int]:
    """Before everything, exact hits, mid-batch gaps, batch boundaries, the last record and past the end."""
    return [
        t0 - 86_400_000,
        t0,
        t0 + 1,
        t0 + 55,
        t0 + 100,
        t0 + 99,
        t0 + 101,
        t0 + 505,
        t0 + (COUNT - 1) * STEP_MS,
        t0 + (COUNT - 1) * STEP_MS + 1,
        t0 + 86_400_000,
    ]


def test_confluent_offsets_for_times(timed_topic):
    broker, t0 = timed_topic
    consumer = confluent_consumer(broker.bootstrap)
    try:
        for target in targets(t0):
            [result] = consumer.offsets_for_times([TopicPartition(TOPIC, 0, target)], timeout=ADMIN_TIMEOUT_S)
            assert result.error is None, result.error
            want = expected_offset(t0, target)
            assert result.offset == (-1 if want is None else want), f"target T0{target - t0:+d}"
        [empty] = consumer.offsets_for_times([TopicPartition(TOPIC, 1, t0)], timeout=ADMIN_TIMEOUT_S)
        assert empty.offset == -1
    finally:
        consumer.close()


def test_confluent_watermarks(timed_topic):
    broker, _ = timed_topic
    consumer = confluent_consumer(broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=ADMIN_TIMEOUT_S, cached=False) == (
            0,
            COUNT,
        )
        assert consumer.get_watermark_offsets(TopicPartition(TOPIC, 1), timeout=ADMIN_TIMEOUT_S, cached=False) == (
            0,
            0,
        )
    finally:
        consumer.close()


def test_admin_list_offsets(timed_topic):
    """AdminClient.list_offsets also covers max_timestamp (ListOffsets v7)."""
    broker, t0 = timed_topic
    tp = TopicPartition(TOPIC, 0)
    admin = admin_client(broker.bootstrap)

    def lookup(spec):
        return wait_future(admin.list_offsets({tp: spec}, request_timeout=ADMIN_TIMEOUT_S)[tp])

    assert lookup(OffsetSpec.earliest()).offset == 0
    assert lookup(OffsetSpec.latest()).offset == COUNT
    newest = lookup(OffsetSpec.max_timestamp())
    assert (newest.offset, newest.timestamp) == (COUNT - 1, t0 + (COUNT - 1) * STEP_MS)
    hit = lookup(OffsetSpec.for_timestamp(t0 + 55))
    assert (hit.offset, hit.timestamp) == (6, t0 + 60)


def test_kafka_python_agrees(timed_topic):
    from kafka import TopicPartition as KTopicPartition

    broker, t0 = timed_topic
    tp, empty = KTopicPartition(TOPIC, 0), KTopicPartition(TOPIC, 1)
    consumer = kafka_python_consumer(broker.bootstrap)
    try:
        assert consumer.beginning_offsets([tp, empty], timeout_ms=15_000) == {tp: 0, empty: 0}
        assert consumer.end_offsets([tp, empty], timeout_ms=15_000) == {tp: COUNT, empty: 0}
        for target in targets(t0):
            found = consumer.offsets_for_times({tp: target}, timeout_ms=15_000)[tp]
            want = expected_offset(t0, target)
            if want is None:
                assert found is None, f"target T0{target - t0:+d}"
            else:
                assert (found.offset, found.timestamp) == (want, t0 + want * STEP_MS), f"target T0{target - t0:+d}"
        assert consumer.offsets_for_times({empty: t0}, timeout_ms=15_000)[empty] is None
    finally:
        consumer.close()


def test_lookup_returns_first_offset_in_log_order(broker):
    """With out-of-order timestamps Kafka answers with the first record at or after the target
    in log order, not the record whose timestamp is closest."""
    create_topic(broker.bootstrap, "unordered")
    t0 = now_ms() - 3_600_000
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 100})
    records = [OutRecord(None, b"%d" % i, (), t0 + delta) for i, delta in enumerate([100, 50, 200, 10, 150])]
    produce_confluent(producer, "unordered", records, partition=0)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        for delta, want in [(60, 0), (100, 0), (101, 2), (160, 2), (201, -1)]:
            [result] = consumer.offsets_for_times([TopicPartition("unordered", 0, t0 + delta)], timeout=ADMIN_TIMEOUT_S)
            assert result.offset == want, f"target T0+{delta}"
    finally:
        consumer.close()
