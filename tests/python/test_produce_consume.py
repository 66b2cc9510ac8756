"""Round trips through the broker with real clients, every codec, and both
clients on either side: what a producer wrote is exactly what a consumer reads.
"""

from __future__ import annotations

import pytest

from harness import (
    CREATE_TIME,
    OutRecord,
    assert_same_sequence,
    confluent_producer,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    end_offsets_of,
    group_by_partition,
    kafka_python_producer,
    now_ms,
    produce_confluent,
    produce_kafka_python,
    watermarks_confluent,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 4
KEYS = 1000
# kafka-python is pure Python and an order of magnitude slower than librdkafka.
RECORDS_PER_CLIENT = {"confluent": 100_000, "kafka-python": 20_000}
FILLER = b"the quick brown fox jumps over the lazy dog " * 2


def make_records(count: int) -> list[OutRecord]:
    """Keyed records with two headers (one binary, with NUL and 0xFF) and distinct increasing timestamps.

    Timestamps sit in the recent past so no timestamp-skew limit rejects them.
    """
    base_ms = now_ms() - 600_000 - count
    return [
        OutRecord(
            key=b"key-%04d" % (i % KEYS),
            value=b"value-%08d-" % i + FILLER[: i % len(FILLER)],
            headers=(("seq", b"%d" % i), ("bin", bytes([i & 0xFF, 0x00, 0xFF, (i >> 8) & 0xFF]))),
            timestamp_ms=base_ms + i,
        )
        for i in range(count)
    ]


def produce_with_confluent(bootstrap, topic, records, codec):
    producer = confluent_producer(bootstrap, **{"linger.ms": 5, "acks": "all", "compression.type": codec})
    return produce_confluent(producer, topic, records)


def produce_with_kafka_python(bootstrap, topic, records, codec):
    producer = kafka_python_producer(
        bootstrap, acks=1, linger_ms=5, compression_type=None if codec == "none" else codec
    )
    try:
        return produce_kafka_python(producer, topic, records)
    finally:
        producer.close(timeout=10)


PRODUCE = {"confluent": produce_with_confluent, "kafka-python": produce_with_kafka_python}
CONSUME = {"confluent": consume_confluent, "kafka-python": consume_kafka_python}


def assert_round_trip(records, deliveries, consumed):
    """Each partition holds exactly its records, in produce order, at offsets 0..n-1, unchanged."""
    produced = group_by_partition(range(len(records)), lambda i: deliveries[i].partition)
    key_partition = {}
    for index, delivery in enumerate(deliveries):
        key = records[index].key
        assert key_partition.setdefault(key, delivery.partition) == delivery.partition, (
            f"key {key!r} went to partitions {key_partition[key]} and {delivery.partition}"
        )
    assert set(consumed) == set(produced)
    for partition, indexes in produced.items():
        assert_same_sequence(
            list(range(len(indexes))),
            [deliveries[i].offset for i in indexes],
            f"acknowledged offsets of partition {partition} in produce order",
        )
        expected = [
            (offset, records[i].key, records[i].value, records[i].headers, CREATE_TIME, records[i].timestamp_ms)
            for offset, i in enumerate(indexes)
        ]
        actual = [
            (r.offset, r.key, r.value, r.headers, r.timestamp_type, r.timestamp_ms) for r in consumed[partition]
        ]
        assert_same_sequence(expected, actual, f"records of partition {partition}")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "producer_client, consumer_client",
    [
        ("confluent", "confluent"),
        ("kafka-python", "kafka-python"),
        ("confluent", "kafka-python"),
        ("kafka-python", "confluent"),
    ],
)
def test_every_record_comes_back_unchanged(broker, producer_client, consumer_client, codec):
    count = min(RECORDS_PER_CLIENT[producer_client], RECORDS_PER_CLIENT[consumer_client])
    topic = f"round-trip-{codec}"
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    records = make_records(count)

    deliveries = PRODUCE[producer_client](broker.bootstrap, topic, records, codec)
    end_offsets = end_offsets_of(deliveries)
    assert sum(end_offsets.values()) == count, "acknowledged offsets are not one per record"
    assert watermarks_confluent(broker.bootstrap, topic, range(PARTITIONS)) == {
        p: (0, end_offsets.get(p, 0)) for p in range(PARTITIONS)
    }

    consumed = CONSUME[consumer_client](broker.bootstrap, topic, end_offsets)
    assert_round_trip(records, deliveries, consumed)
