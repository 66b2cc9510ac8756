"""Size limits and broker-assigned timestamps, as clients observe them."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError

from harness import (
    LOG_APPEND_TIME,
    OutRecord,
    confluent_producer,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    end_offsets_of,
    kafka_python_producer,
    now_ms,
    produce_confluent,
    produce_one_confluent,
)

LIMIT = 100_000
# A record batch of one small-keyed record costs well under this much framing.
BATCH_OVERHEAD_MAX = 200


def test_record_over_broker_limit_fails_with_message_too_large(broker_factory):
    broker = broker_factory(message_max_bytes=LIMIT)
    create_topic(broker.bootstrap, "sized")
    producer = confluent_producer(
        broker.bootstrap, **{"message.max.bytes": 10 * LIMIT, "compression.type": "none", "acks": "all"}
    )

    too_big = produce_one_confluent(producer, "sized", os.urandom(LIMIT + 50_000), partition=0)
    assert too_big.error is not None and too_big.error.code() == KafkaError.MSG_SIZE_TOO_LARGE, too_big

    fits = os.urandom(LIMIT - BATCH_OVERHEAD_MAX)
    delivered = produce_one_confluent(producer, "sized", fits, partition=0)
    assert delivered.error is None, delivered
    assert delivered.offset == 0, "the rejected record must not have taken an offset"
    [record] = consume_confluent(broker.bootstrap, "sized", {0: 1})[0]
    assert record.value == fits


def test_topic_max_message_bytes_overrides_broker_default(broker):
    create_topic(broker.bootstrap, "small-records", config={"max.message.bytes": "50000"})
    producer = confluent_producer(broker.bootstrap, **{"compression.type": "none", "acks": "all"})
    too_big = produce_one_confluent(producer, "small-records", os.urandom(60_000), partition=0)
    assert too_big.error is not None and too_big.error.code() == KafkaError.MSG_SIZE_TOO_LARGE, too_big
    assert produce_one_confluent(producer, "small-records", os.urandom(40_000), partition=0).error is None


def test_kafka_python_sees_message_size_too_large(broker_factory):
    from kafka.errors import MessageSizeTooLargeError

    broker = broker_factory(message_max_bytes=LIMIT)
    create_topic(broker.bootstrap, "sized")
    producer = kafka_python_producer(broker.bootstrap, acks=1, max_request_size=10 * LIMIT, retries=0)
    try:
        future = producer.send("sized", value=os.urandom(LIMIT + 50_000), partition=0)
        producer.flush(timeout=30)
        with pytest.raises(MessageSizeTooLargeError):
            future.get(timeout=1)
        ok = producer.send("sized", value=os.urandom(LIMIT - BATCH_OVERHEAD_MAX), partition=0)
        producer.flush(timeout=30)
        assert ok.get(timeout=1).offset == 0
    finally:
        producer.close(timeout=10)


def test_log_append_time_replaces_producer_timestamps(broker_factory):
    """With LogAppendTime the broker stamps each batch on arrival.

    The producer's own timestamps are an hour old, so seeing them would be
    obvious; the slack allows only for clock granularity between two
    processes reading the same clock.
    """
    broker = broker_factory(log_message_timestamp_type="LogAppendTime")
    create_topic(broker.bootstrap, "stamped", partitions=2)
    old = now_ms() - 3_600_000
    records = [OutRecord(b"k%d" % i, b"v%d" % i, (), old + i) for i in range(200)]
    slack_ms = 1_000

    window_start = now_ms() - slack_ms
    deliveries = produce_confluent(confluent_producer(broker.bootstrap, **{"linger.ms": 5}), "stamped", records)
    window_end = now_ms() + slack_ms

    for delivery in deliveries:
        assert delivery.timestamp_type == LOG_APPEND_TIME, delivery
        assert window_start <= delivery.timestamp_ms <= window_end, delivery
    ends = end_offsets_of(deliveries)
    for consume in (consume_confluent, consume_kafka_python):
        consumed = [r for rs in consume(broker.bootstrap, "stamped", ends).values() for r in rs]
        assert len(consumed) == len(records)
        for record in consumed:
            assert record.timestamp_type == LOG_APPEND_TIME, (consume.__name__, record)
            assert window_start <= record.timestamp_ms <= window_end, (consume.__name__, record)
