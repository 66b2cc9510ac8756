"""Durability: kill -9 in the middle of a write load, and a log whose last
batch was torn. Nothing acknowledged may be lost, nothing may be duplicated,
and recovery must leave offsets contiguous.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest

from harness import (
    OutRecord,
    assert_same_sequence,
    confluent_producer,
    consume_confluent,
    create_topic,
    now_ms,
    produce_confluent,
    produce_one_confluent,
    wait_until,
    watermarks_confluent,
)

SEGMENT_BYTES = 1024 * 1024
ACKED_BEFORE_CRASH = 20_000
PRODUCE_LIMIT = 1_000_000
PRODUCE_TIME_LIMIT_S = 60
PADDING = b"." * 300
# A batch starts with its base offset (int64) and length (int32).
BATCH_LENGTH_END = 12


class LoadProducer(threading.Thread):
    """Produces numbered records until told to stop (bounded in count and time).

    Records every acknowledged (partition, offset, sequence number). Delivery
    callbacks run on this thread, inside poll().
    """

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = confluent_producer(bootstrap, **{"acks": 1, "linger.ms": 5, "message.timeout.ms": 30_000})
        self.acked: list[tuple[int, int, int]] = []
        self.sent = 0
        self.stop_requested = threading.Event()
        self.error: BaseException | None = None

    @staticmethod
    def record(sequence: int) -> tuple[bytes, bytes]:
        """Key and value of record number `sequence`; the value starts with the number."""
        return b"k%d" % sequence, b"%d|" % sequence + PADDING

    def on_delivery(self, err, msg):
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), int(msg.value().split(b"|")[0])))

    def run(self):
        try:
            deadline = time.monotonic() + PRODUCE_TIME_LIMIT_S
            while not self.stop_requested.is_set() and self.sent < PRODUCE_LIMIT and time.monotonic() < deadline:
                try:
                    key, value = self.record(self.sent)
                    self.producer.produce(self.topic, key=key, value=value, on_delivery=self.on_delivery)
                    self.sent += 1
                except BufferError:
                    self.producer.poll(0.01)
                self.producer.poll(0)
        except BaseException as exc:
            self.error = exc

    def finish(self):
        """Stop producing and drop whatever was not acknowledged, so nothing is retried after restart."""
        self.stop_requested.set()
        self.join(PRODUCE_TIME_LIMIT_S + 10)
        assert not self.is_alive(), "load producer did not stop"
        self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.producer.flush(10)
        if self.error:
            raise self.error


def read_everything(bootstrap: str, topic: str, partitions: int):
    """All records of every partition up to the high watermark."""
    watermarks = watermarks_confluent(bootstrap, topic, range(partitions))
    for partition, (low, _) in watermarks.items():
        assert low == 0, f"partition {partition} lost its head: log start offset {low}"
    return watermarks, consume_confluent(bootstrap, topic, {p: high for p, (_, high) in watermarks.items()})


def test_kill9_under_load_loses_no_acknowledged_record(broker_factory):
    broker = broker_factory(log_segment_bytes=SEGMENT_BYTES)
    create_topic(broker.bootstrap, "load", partitions=3)

    load = LoadProducer(broker.bootstrap, "load")
    load.start()
    try:
        wait_until(lambda: len(load.acked) >= ACKED_BEFORE_CRASH or not load.is_alive(), 60, "acknowledgements")
        assert len(load.acked) >= ACKED_BEFORE_CRASH, f"only {len(load.acked)} acknowledged"
        broker.kill9()
    finally:
        load.finish()
    acked = list(load.acked)

    broker.start()
    watermarks, consumed = read_everything(broker.bootstrap, "load", 3)

    seen_values = set()
    for partition, records in consumed.items():
        assert_same_sequence(
            list(range(watermarks[partition][1])),
            [r.offset for r in records],
            f"offsets of partition {partition}",
        )
        for record in records:
            value = int(record.value.split(b"|")[0])
            assert value not in seen_values, f"record {value} appears twice"
            seen_values.add(value)
            assert (record.key, record.value) == load.record(value)[:2], f"{partition}/{record.offset} is damaged"
    for partition, offset, value in acked:
        assert offset < len(consumed[partition]), f"acknowledged {partition}/{offset} (record {value}) is gone"
        assert consumed[partition][offset].value == load.record(value)[1], f"{partition}/{offset} is not record {value}"

    segment_counts = [len(list((broker.data_dir / f"load-{p}").glob("*.log"))) for p in range(3)]
    assert max(segment_counts) > 1, "the load never rolled a segment, so recovery across segments went untested"


def batch_spans(segment: Path) -> list[tuple[int, int, int]]:
    """(base offset, start, end) of each record batch, walking Kafka's framing:
    base offset (int64) then batch length (int32) counting the bytes after it."""
    data = segment.read_bytes()
    spans, position = [], 0
    while position + BATCH_LENGTH_END <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        end = position + BATCH_LENGTH_END + length
        spans.append((base_offset, position, end))
        position = end
    return spans


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_torn_last_batch_is_truncated_on_restart(broker, how):
    create_topic(broker.bootstrap, "torn")
    producer = confluent_producer(broker.bootstrap, acks="all")
    batches = 10
    for i in range(batches):
        # One record per flush, so each batch holds exactly one record.
        record = OutRecord(b"k%d" % i, b"record %d" % i, (), now_ms())
        [delivery] = produce_confluent(producer, "torn", [record], partition=0)
        assert delivery.offset == i
    producer.close()

    getattr(broker, how)()
    segment = broker.data_dir / "torn-0" / "00000000000000000000.log"
    size = segment.stat().st_size
    spans = batch_spans(segment)
    assert [base for base, _, _ in spans] == list(range(batches)), "expected one batch per record"
    assert spans[-1][2] == size, "the segment should end exactly at its last batch"
    cut_bytes = 7
    assert spans[-1][2] - spans[-1][1] > cut_bytes
    with open(segment, "r+b") as f:
        f.truncate(size - cut_bytes)

    broker.start()
    watermarks, consumed = read_everything(broker.bootstrap, "torn", 1)
    assert watermarks[0] == (0, batches - 1)
    assert [(r.offset, r.value) for r in consumed[0]] == [(i, b"record %d" % i) for i in range(batches - 1)]

    fresh = confluent_producer(broker.bootstrap, acks="all")
    delivered = produce_one_confluent(fresh, "torn", b"after recovery", partition=0)
    assert delivered.error is None and delivered.offset == batches - 1, delivered
    [record] = consume_confluent(broker.bootstrap, "torn", {0: batches}, start_offsets={0: batches - 1})[0]
    assert record.value == b"after recovery"
