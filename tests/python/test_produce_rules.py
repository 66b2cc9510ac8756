"""Kafka's produce rules, seen by real clients and on the wire where no client
would break them: refused records are named (KIP-467 record errors) and every
refusal says why; a batch's stored max timestamp is its records' largest,
whatever the producer wrote there; timestamps outside the broker's window are
refused (KIP-937); zstd needs Produce v7.
"""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import OffsetSpec

import wire
from harness import (
    admin_client,
    confluent_consumer,
    confluent_producer,
    create_topic,
    kafka_python_producer,
    now_ms,
    produce_one_confluent,
    wait_future,
)
from wire import BatchRecord, FetchPartition

COMPACTED = {"cleanup.policy": "compact"}
INVALID_REQUIRED_ACKS = 21
PRODUCE_VERSION = 9
MAX_TIMESTAMP_AT = 35  # offset of max_timestamp in a batch header


def produce_one_batch(port: int, topic: str, batch: bytes, version: int = PRODUCE_VERSION, acks: int = -1):
    """Produce `batch` to partition 0 of `topic`; the partition's response."""
    response = wire.produce(port, version, [(topic, [(0, batch)])], acks=acks)
    [(_, [partition])] = response.topics
    return partition


def stored_batches(port: int, topic: str) -> list[bytes]:
    """Every batch of partition 0 of `topic` as stored, each with its CRC-32C checked."""
    fetched = wire.fetch(port, 12, [(topic, [FetchPartition(0, 0)])]).partitions()[(topic, 0)]
    assert fetched.error_code == wire.NONE, fetched
    data, batches = fetched.records or b"", []
    while data:
        size = 12 + struct.unpack_from(">i", data, 8)[0]
        batch, data = data[:size], data[size:]
        assert wire.crc32c.crc32c(batch[wire.BATCH_CRC_START :]) == struct.unpack_from(">I", batch, 17)[0]
        batches.append(batch)
    return batches


# ---------------------------------------------------------------- KIP-467: refused records are named


def test_keyless_records_on_a_compacted_topic_are_named_on_the_wire(broker):
    create_topic(broker.bootstrap, "compacted", config=COMPACTED)
    ts = now_ms()
    records = [BatchRecord(b"a", b"1", (), ts), BatchRecord(None, b"2", (), ts), BatchRecord(b"c", b"3", (), ts),
               BatchRecord(None, b"4", (), ts)]
    for codec in (wire.CODEC_NONE, wire.CODEC_GZIP):
        refused = produce_one_batch(broker.port, "compacted", wire.encode_record_batch(records, codec=codec))
        assert refused.error_code == wire.INVALID_RECORD, refused
        assert [index for index, _ in refused.record_errors] == [1, 3], refused
        assert all("without a key" in message for _, message in refused.record_errors), refused
        assert refused.error_message and "2 record(s) rejected" in refused.error_message, refused
    old = produce_one_batch(broker.port, "compacted", wire.encode_record_batch(records), version=7)
    assert (old.error_code, old.record_errors, old.error_message) == (wire.INVALID_RECORD, (), None), old
    keyed = produce_one_batch(broker.port, "compacted", wire.encode_record_batch(records[:1]))
    assert (keyed.error_code, keyed.base_offset) == (wire.NONE, 0), keyed


def test_a_client_fails_the_keyless_records_for_themselves_and_the_rest_for_them(broker):
    """librdkafka tells the records the broker named from the ones refused with them."""
    create_topic(broker.bootstrap, "compacted", config=COMPACTED)
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 200, "retries": 0})
    reports: dict[bytes, KafkaError | None] = {}
    keys = [b"a", None, b"c", None]
    for i, key in enumerate(keys):
        producer.produce("compacted", key=key, value=b"%d" % i, on_delivery=lambda e, m: reports.update({m.value(): e}))
    assert producer.flush(30) == 0
    assert sorted(reports) == [b"0", b"1", b"2", b"3"]
    codes = {value: err.code() if err else None for value, err in reports.items()}
    assert codes == {
        b"0": KafkaError._INVALID_DIFFERENT_RECORD,
        b"1": KafkaError.INVALID_RECORD,
        b"2": KafkaError._INVALID_DIFFERENT_RECORD,
        b"3": KafkaError.INVALID_RECORD,
    }, reports


def test_every_refusal_says_why(broker):
    create_topic(broker.bootstrap, "orders")
    batch = wire.encode_record_batch([BatchRecord(b"k", b"v", (), now_ms())])
    response = wire.produce(broker.port, PRODUCE_VERSION, [("orders", [(7, batch)]), ("nowhere", [(0, batch)])])
    messages = {name: (p.error_code, p.error_message) for name, [p] in response.topics}
    assert messages["orders"][0] == wire.UNKNOWN_TOPIC_OR_PARTITION and "no partition 7" in messages["orders"][1]
    assert messages["nowhere"][0] == wire.UNKNOWN_TOPIC_OR_PARTITION and "nowhere" in messages["nowhere"][1]
    acks = produce_one_batch(broker.port, "orders", batch, acks=5)
    assert acks.error_code == INVALID_REQUIRED_ACKS and "acks" in acks.error_message, acks


# ---------------------------------------------------------------- the stored max timestamp


@pytest.mark.parametrize("codec", [wire.CODEC_NONE, wire.CODEC_GZIP])
def test_a_max_timestamp_of_minus_one_is_replaced_by_the_records(broker, codec):
    """Old Sarama writes -1 as the max timestamp; Kafka stores the records' largest."""
    create_topic(broker.bootstrap, "events")
    t0 = now_ms() - 60_000
    records = [BatchRecord(b"k%d" % i, b"v", (), t0 + ts) for i, ts in enumerate([0, 30, 10])]
    batch = wire.encode_record_batch(records, codec=codec, max_timestamp=-1)
    assert produce_one_batch(broker.port, "events", batch).error_code == wire.NONE
    [stored] = stored_batches(broker.port, "events")
    assert struct.unpack_from(">q", stored, MAX_TIMESTAMP_AT)[0] == t0 + 30

    consumer = confluent_consumer(broker.bootstrap)
    try:
        [found] = consumer.offsets_for_times([TopicPartition("events", 0, t0 + 20)], timeout=10)
        assert found.offset == 1, found
    finally:
        consumer.close()
    admin = admin_client(broker.bootstrap)
    futures = admin.list_offsets({TopicPartition("events", 0): OffsetSpec.max_timestamp()})
    latest = wait_future(futures[TopicPartition("events", 0)])
    assert (latest.offset, latest.timestamp) == (1, t0 + 30)


def test_a_plausible_compressed_header_is_kept_without_decompressing(broker):
    """A compressed batch whose header lies plausibly is stored as sent: the hot path never opens it."""
    create_topic(broker.bootstrap, "events")
    t0 = now_ms() - 60_000
    records = [BatchRecord(b"k", b"v", (), t0), BatchRecord(b"k", b"v", (), t0 + 30)]
    batch = wire.encode_record_batch(records, codec=wire.CODEC_GZIP, max_timestamp=t0 + 5)
    assert produce_one_batch(broker.port, "events", batch).error_code == wire.NONE
    [stored] = stored_batches(broker.port, "events")
    assert struct.unpack_from(">q", stored, MAX_TIMESTAMP_AT)[0] == t0 + 5


# ---------------------------------------------------------------- KIP-937: the timestamp window


def test_timestamps_too_far_ahead_are_refused_by_default(broker):
    """Kafka 4's message.timestamp.after.max.ms is one hour."""
    create_topic(broker.bootstrap, "events")
    create_topic(broker.bootstrap, "stamped", config={"message.timestamp.type": "LogAppendTime"})
    producer = confluent_producer(broker.bootstrap, retries=0)
    ahead = produce_one_confluent(producer, "events", b"tomorrow", timestamp=now_ms() + 2 * 3_600_000)
    assert ahead.error is not None and ahead.error.code() == KafkaError.INVALID_TIMESTAMP, ahead
    assert produce_one_confluent(producer, "events", b"soon", timestamp=now_ms() + 60_000).error is None
    assert produce_one_confluent(producer, "events", b"old", timestamp=now_ms() - 365 * 86_400_000).error is None
    stamped = produce_one_confluent(producer, "stamped", b"tomorrow", timestamp=now_ms() + 2 * 3_600_000)
    assert stamped.error is None, "LogAppendTime replaces the producer's timestamps"


def test_topic_and_broker_windows_name_the_records_out_of_range(broker_factory):
    broker = broker_factory({"log.message.timestamp.before.max.ms": 600_000})
    create_topic(broker.bootstrap, "strict", config={"message.timestamp.after.max.ms": "1000"})
    create_topic(broker.bootstrap, "relaxed", config={"message.timestamp.before.max.ms": str(7 * 86_400_000)})
    now = now_ms()
    records = [BatchRecord(b"k", b"v", (), ts) for ts in (now, now - 3_600_000, now + 60_000)]
    for codec in (wire.CODEC_NONE, wire.CODEC_ZSTD):
        refused = produce_one_batch(broker.port, "strict", wire.encode_record_batch(records, codec=codec))
        assert refused.error_code == wire.INVALID_TIMESTAMP, refused
        assert [index for index, _ in refused.record_errors] == [1, 2], refused
        assert str(now + 60_000) in refused.record_errors[1][1], refused
    relaxed = produce_one_batch(broker.port, "relaxed", wire.encode_record_batch(records[:2]))
    assert relaxed.error_code == wire.NONE, relaxed

    producer = kafka_python_producer(broker.bootstrap, retries=0)
    try:
        future = producer.send("strict", key=b"k", value=b"v", timestamp_ms=now_ms() - 3_600_000)
        with pytest.raises(Exception) as refused:
            future.get(timeout=30)
        assert "InvalidTimestamp" in type(refused.value).__name__, refused.value
        assert producer.send("strict", key=b"k", value=b"v").get(timeout=30).offset == 0
    finally:
        producer.close()


# ---------------------------------------------------------------- codecs by version


def test_zstd_needs_produce_v7(broker):
    create_topic(broker.bootstrap, "events")
    records = [BatchRecord(b"k", b"v", (), now_ms())]
    zstd = wire.encode_record_batch(records, codec=wire.CODEC_ZSTD)
    for version in (3, 6):
        refused = produce_one_batch(broker.port, "events", zstd, version=version)
        assert refused.error_code == wire.UNSUPPORTED_COMPRESSION_TYPE, (version, refused)
    gzip = produce_one_batch(broker.port, "events", wire.encode_record_batch(records, codec=wire.CODEC_GZIP), version=6)
    assert (gzip.error_code, gzip.base_offset) == (wire.NONE, 0), gzip
    accepted = produce_one_batch(broker.port, "events", zstd, version=7)
    assert (accepted.error_code, accepted.base_offset) == (wire.NONE, 1), accepted
    assert len(stored_batches(broker.port, "events")) == 2, "nothing of the refused batches was stored"
