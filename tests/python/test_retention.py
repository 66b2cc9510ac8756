"""Retention and DeleteRecords through real clients: old segments go by size
and by age, the log start offset moves (and survives a crash), consumers from
the beginning start at the new log start, and the active segment stays.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

import wire
from harness import (
    OutRecord,
    admin_client,
    confluent_producer,
    consume_confluent,
    create_topic,
    future_error,
    now_ms,
    produce_confluent,
    wait_future,
    wait_until,
    watermarks_confluent,
)

DELETE_RECORDS = 21
RECORD = 1024
SEGMENT_BYTES = 16 * 1024
FAST_RETENTION = {"log.retention.check.interval.ms": 100, "log.segment.delete.delay.ms": 300}


def partition_dir(broker, topic: str, partition: int = 0) -> Path:
    return broker.data_dir / f"{topic}-{partition}"


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def log_file_bytes(path: Path) -> int:
    """The file's size; 0 once retention has renamed it away (it may between listing and stat)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def deleted_files(directory: Path) -> list[Path]:
    return list(directory.glob("*.deleted"))


def fill(broker, topic: str, count: int, timestamp_ms: int = 0, start: int = 0) -> list:
    """Produce `count` 1 KiB records to partition 0, stamped `timestamp_ms` (0: now)."""
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 5, "batch.size": 4 * RECORD})
    records = [OutRecord(None, b"%08d" % i + b"x" * (RECORD - 8), (), timestamp_ms) for i in range(start, start + count)]
    return produce_confluent(producer, topic, records, partition=0)


def low_watermark(broker, topic: str) -> int:
    return watermarks_confluent(broker.bootstrap, topic, [0])[0][0]


def assert_reads_from_log_start(broker, topic: str) -> None:
    """A consumer from the beginning starts at the log start and sees every record after it, in order."""
    low, high = watermarks_confluent(broker.bootstrap, topic, [0])[0]
    got = consume_confluent(broker.bootstrap, topic, {0: high})[0]
    offsets = [r.offset for r in got if r.offset >= low]
    assert offsets == list(range(low, high))
    assert all(r.value[:8] == b"%08d" % r.offset for r in got)


def test_size_retention_drops_the_oldest_segments(broker_factory):
    broker = broker_factory(FAST_RETENTION)
    create_topic(broker.bootstrap, "sized", config={"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": "65536"})
    deliveries = fill(broker, "sized", 600)
    directory = partition_dir(broker, "sized")

    def trimmed():
        bases = segment_bases(directory)
        size = sum(log_file_bytes(p) for p in directory.glob("*.log"))
        return bases and bases[0] > 0 and size < 65536 + SEGMENT_BYTES and not deleted_files(directory)

    wait_until(trimmed, 30, "segments deleted down to retention.bytes and their files removed")
    bases = segment_bases(directory)
    assert low_watermark(broker, "sized") == bases[0], "the log start is the first kept segment"
    assert bases[-1] <= deliveries[-1].offset, "the active segment stays"
    assert watermarks_confluent(broker.bootstrap, "sized", [0])[0][1] == len(deliveries)
    assert_reads_from_log_start(broker, "sized")


def test_time_retention_drops_only_expired_segments_and_never_the_active_one(broker_factory):
    broker = broker_factory(FAST_RETENTION)
    create_topic(broker.bootstrap, "aged", config={"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "3600000"})
    old = fill(broker, "aged", 100, timestamp_ms=now_ms() - 7_200_000)
    directory = partition_dir(broker, "aged")
    wait_until(lambda: low_watermark(broker, "aged") > 0, 30, "expired segments deleted")
    # Everything has expired, yet the active segment holds on to the tail.
    active = segment_bases(directory)
    assert len(active) == 1 and 0 < active[0] <= old[-1].offset
    wait_until(lambda: low_watermark(broker, "aged") == active[0], 10, "log start at the active segment")

    fresh = fill(broker, "aged", 100, start=len(old))
    broker.restart()
    wait_until(lambda: low_watermark(broker, "aged") >= active[0], 30, "broker back")
    kept_from = low_watermark(broker, "aged")
    assert kept_from <= fresh[0].offset, "fresh records are never deleted"
    assert_reads_from_log_start(broker, "aged")


def test_unlimited_retention_keeps_everything(broker_factory):
    broker = broker_factory(FAST_RETENTION)
    for topic, retention_ms in [("kept", "-1"), ("expiring", "3600000")]:
        create_topic(broker.bootstrap, topic, config={"segment.bytes": str(SEGMENT_BYTES), "retention.ms": retention_ms})
        fill(broker, topic, 100, timestamp_ms=now_ms() - 30 * 86_400_000)
    # Retention has run once the expiring topic lost its old segments.
    wait_until(lambda: low_watermark(broker, "expiring") > 0, 30, "retention pass on the expiring topic")
    assert segment_bases(partition_dir(broker, "kept"))[0] == 0
    assert low_watermark(broker, "kept") == 0


def test_delete_records_moves_the_log_start_durably(broker_factory):
    broker = broker_factory(FAST_RETENTION)
    create_topic(broker.bootstrap, "trimmed", config={"segment.bytes": str(SEGMENT_BYTES)})
    deliveries = fill(broker, "trimmed", 300)
    admin = admin_client(broker.bootstrap)

    result = wait_future(admin.delete_records([TopicPartition("trimmed", 0, 150)])[TopicPartition("trimmed", 0, 150)])
    assert result.low_watermark == 150
    assert low_watermark(broker, "trimmed") == 150
    assert_reads_from_log_start(broker, "trimmed")
    directory = partition_dir(broker, "trimmed")
    wait_until(lambda: 0 < segment_bases(directory)[0] <= 150, 30, "segments below the log start deleted")

    beyond = TopicPartition("trimmed", 0, len(deliveries) + 1)
    error = future_error(admin.delete_records([beyond])[beyond])
    assert error is not None and error.code() == KafkaError.OFFSET_OUT_OF_RANGE

    # Acknowledged deletions survive a crash.
    broker.kill9()
    broker.start()
    assert low_watermark(broker, "trimmed") == 150

    to_end = TopicPartition("trimmed", 0, -1)
    admin = admin_client(broker.bootstrap)  # must outlive its futures
    result = wait_future(admin.delete_records([to_end])[to_end])
    assert result.low_watermark == len(deliveries), "-1 deletes up to the high watermark"


def test_delete_records_refuses_compacted_topics_and_unknown_partitions(broker):
    create_topic(broker.bootstrap, "table", config={"cleanup.policy": "compact"})
    producer = confluent_producer(broker.bootstrap)
    produce_confluent(producer, "table", [OutRecord(b"k", b"v", (), 0)], partition=0)
    admin = admin_client(broker.bootstrap)
    compacted = TopicPartition("table", 0, 1)
    error = future_error(admin.delete_records([compacted])[compacted])
    assert error is not None and error.code() == KafkaError.POLICY_VIOLATION
    # Clients refuse unknown partitions themselves, so ask on the wire.
    assert delete_records_v0(broker.port, "table", 7, 0) == (-1, KafkaError.UNKNOWN_TOPIC_OR_PART)
    assert delete_records_v0(broker.port, "nowhere", 0, 0) == (-1, KafkaError.UNKNOWN_TOPIC_OR_PART)


def delete_records_v0(port: int, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(low watermark, error code) of a raw DeleteRecords v0 for one partition."""
    body = wire.int32(1) + wire.nullable_string(topic) + wire.int32(1) + wire.int32(partition) + wire.int64(offset)
    reaction = wire.exchange(port, wire.request(DELETE_RECORDS, 0, 7, body + wire.int32(5000)), until_frames=1)
    reader = wire.Reader(wire.split_frames(reaction.received)[0][0])
    assert reader.int32() == 7, "correlation id"
    reader.int32()  # throttle time
    assert reader.int32() == 1 and reader.string() == topic
    assert reader.int32() == 1 and reader.int32() == partition
    return reader.int64(), reader.int16()


def test_a_shorter_retention_set_live_deletes_at_the_next_check(broker_factory):
    broker = broker_factory(FAST_RETENTION)
    create_topic(broker.bootstrap, "relaxed", config={"segment.bytes": str(SEGMENT_BYTES)})
    fill(broker, "relaxed", 100, timestamp_ms=now_ms() - 2 * 86_400_000)
    # Two days old is well within the default week.
    assert low_watermark(broker, "relaxed") == 0
    admin = admin_client(broker.bootstrap)
    entry = ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "relaxed", incremental_configs=[entry])
    wait_future(admin.incremental_alter_configs([resource])[resource])
    wait_until(lambda: low_watermark(broker, "relaxed") > 0, 30, "segments deleted under the new retention.ms")
    assert segment_bases(partition_dir(broker, "relaxed"))[0] == low_watermark(broker, "relaxed")
