"""Log compaction with real clients: a compacted topic ends up holding exactly
the latest value of each key at its original offset, tombstones vanish after
delete.retention.ms, a kill -9 in the middle of a cleaning leaves a readable
log that lost no latest value, and keyless records are refused.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from harness import (
    OutRecord,
    confluent_consumer,
    confluent_producer,
    create_topic,
    now_ms,
    produce_confluent,
    produce_one_confluent,
    wait_until,
)

SENTINEL = b"sentinel"
DELETE_RETENTION_MS = 1_000
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": str(64 * 1024),
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}
FAST_CLEANER = {"log_cleaner_backoff_ms": 50}


def read_log(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record of partition 0, from the beginning to the end."""
    consumer = confluent_consumer(bootstrap, **{"enable.partition.eof": True})
    records = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                error = msg.error()
                if error is None:
                    records.append((msg.offset(), msg.key(), msg.value()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    return records
                else:
                    raise AssertionError(f"consumer error: {error}")
        raise AssertionError(f"no end of partition within {timeout_s}s")
    finally:
        consumer.close()


class Model:
    """What was produced, by offset, and the latest value of each key."""

    def __init__(self):
        self.by_offset: dict[int, tuple[bytes, bytes | None]] = {}
        self.latest: dict[bytes, tuple[int, bytes | None]] = {}

    def add(self, offset: int, key: bytes, value: bytes | None):
        self.by_offset[offset] = (key, value)
        if key not in self.latest or self.latest[key][0] < offset:
            self.latest[key] = (offset, value)

    def live(self) -> dict[bytes, bytes]:
        return {k: v for k, (_, v) in self.latest.items() if v is not None and k != SENTINEL}

    def deleted(self) -> set[bytes]:
        return {k for k, (_, v) in self.latest.items() if v is None}

    def check_consistent(self, records):
        """Offsets increase, every record is the one produced at its offset, no latest value is lost."""
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
        for offset, key, value in records:
            assert self.by_offset.get(offset) == (key, value), f"offset {offset} holds {key!r}={value!r}"
        present = {(offset, key) for offset, key, _ in records}
        for key, (offset, value) in self.latest.items():
            if value is not None and key != SENTINEL:
                assert (offset, key) in present, f"latest value of {key!r} at {offset} is gone"


def produce_versions(
    bootstrap: str, topic: str, keys: int, versions: int, padding: bytes, model: Model, codec: str = "lz4"
):
    """`versions` rounds over `keys` keys; after the last round every tenth key is deleted."""
    base_ms = now_ms() - 60_000
    records = [
        OutRecord(b"key-%05d" % k, b"v%d-%05d-" % (v, k) + padding, (), base_ms)
        for v in range(versions)
        for k in range(keys)
    ]
    records += [OutRecord(b"key-%05d" % k, None, (), base_ms) for k in range(0, keys, 10)]
    # Batches well below segment.bytes, so the records fill several segments.
    producer = confluent_producer(
        bootstrap, **{"linger.ms": 5, "batch.size": 16 * 1024, "acks": "all", "compression.type": codec}
    )
    for record, delivery in zip(records, produce_confluent(producer, topic, records)):
        model.add(delivery.offset, record.key, record.value)


class Sentinel:
    """Appends one record per call: past segment.ms each append rolls the
    active segment, so what was written before becomes cleanable."""

    def __init__(self, bootstrap: str, topic: str, model: Model):
        self.producer = confluent_producer(bootstrap, **{"acks": "all"})
        self.topic = topic
        self.model = model
        self.count = 0

    def append(self):
        self.count += 1
        value = b"%d" % self.count
        outcome = produce_one_confluent(self.producer, self.topic, value, key=SENTINEL)
        assert outcome.error is None, outcome.error
        self.model.add(outcome.offset, SENTINEL, value)


def data_records(records):
    return [r for r in records if r[1] != SENTINEL]


def is_compacted(records) -> bool:
    keys = [key for _, key, _ in data_records(records)]
    return len(keys) == len(set(keys))


def compacted_view(bootstrap: str, topic: str, model: Model, sentinel: Sentinel, without_tombstones: bool = False):
    """The topic's records once every key appears once (and, if asked, no tombstone is left), else None."""
    sentinel.append()
    records = read_log(bootstrap, topic)
    model.check_consistent(records)
    if not is_compacted(records) or (without_tombstones and any(v is None for _, _, v in records)):
        return None
    return records


def test_compacted_topic_keeps_the_latest_value_of_each_key(broker_factory):
    broker = broker_factory(**FAST_CLEANER)
    # The first cleaning that keeps a tombstone stamps it with its delete
    # horizon: "kept" keeps its tombstones for a day, "compacted" briefly.
    topics = {"kept": {**COMPACTED, "delete.retention.ms": str(24 * 3600 * 1000)}, "compacted": COMPACTED}
    models = {topic: Model() for topic in topics}
    for topic, config in topics.items():
        create_topic(broker.bootstrap, topic, config=config)
        produce_versions(broker.bootstrap, topic, keys=3000, versions=5, padding=b"x" * 40, model=models[topic])
    sentinels = {topic: Sentinel(broker.bootstrap, topic, models[topic]) for topic in topics}

    kept, model = "kept", models["kept"]
    records = wait_until(
        lambda: compacted_view(broker.bootstrap, kept, model, sentinels[kept]), 90, f"{kept} to be compacted", 0.2
    )
    data = data_records(records)
    assert {k: v for _, k, v in data if v is not None} == model.live()
    assert {k for _, k, v in data if v is None} == model.deleted(), "tombstones dropped before delete.retention.ms"

    compacted, model = "compacted", models["compacted"]
    records = wait_until(
        lambda: compacted_view(broker.bootstrap, compacted, model, sentinels[compacted], without_tombstones=True),
        90,
        f"{compacted} to be compacted and its tombstones removed",
        0.2,
    )
    assert {k: v for _, k, v in data_records(records)} == model.live()
    assert len(data_records(records)) == len(model.live())


# The steps of a cleaning where the broker is crashed (failpoints in
# crates/storage/src/failpoint.rs), each with the files that prove the crash
# landed there: what the partition dir holds once it is reached.
CRASH_STEPS = {
    "cleaner-copy-written": {".log.cleaned"},
    "cleaner-swap-renamed": {".log.swap"},
    "cleaner-old-deleted": {".log.swap", ".log.deleted"},
    "cleaner-swapped-in": {".log.deleted"},
}
INTERRUPTED_SWAP = "completed an interrupted segment swap"


def leftovers(data_dir: Path) -> set[str]:
    """The kinds of segment files a cleaning leaves (`.log.swap`, ...) in the partition dir."""
    kinds = {path.name[20:] for path in data_dir.glob("compacted-0/*.log.*")}
    return {kind for kind in kinds if kind.endswith((".cleaned", ".swap", ".deleted"))}


def test_kill9_at_each_step_of_a_cleaning_leaves_a_valid_log(broker_factory):
    broker = broker_factory(log_cleaner_enable=False, **FAST_CLEANER)
    # After the first cleaning the dirty rest is far below the dirty
    # ratio: max.compaction.lag.ms gets it cleaned anyway.
    config = {**COMPACTED, "segment.bytes": str(64 * 1024), "max.compaction.lag.ms": "1000"}
    create_topic(broker.bootstrap, "compacted", config=config)
    model = Model()
    produce_versions(broker.bootstrap, "compacted", 1000, 4, os.urandom(200), model, codec="none")
    broker.stop()
    assert leftovers(broker.data_dir) == set(), "nothing was cleaned before the cleaner was enabled"

    # Each start cleans from the last checkpoint and is crashed at the next
    # step; the start after it must finish or undo what the crash left.
    broker.overrides["log.cleaner.enable"] = "true"
    swaps_left = False
    for step, expected_files in CRASH_STEPS.items():
        broker.env["STROM_FAILPOINTS"] = step
        broker.start()
        if swaps_left:
            assert INTERRUPTED_SWAP in broker.log_since_start(), "the interrupted swap was completed at start"
        wait_until(lambda: f"failpoint {step} reached" in broker.log_since_start(), 60, f"the cleaner at {step}")
        broker.kill9()
        assert leftovers(broker.data_dir) == expected_files, f"the files of a crash at {step}"
        swaps_left = ".log.swap" in expected_files

    del broker.env["STROM_FAILPOINTS"]
    broker.start()
    records = read_log(broker.bootstrap, "compacted")
    model.check_consistent(records)
    sentinel = Sentinel(broker.bootstrap, "compacted", model)
    records = wait_until(
        lambda: compacted_view(broker.bootstrap, "compacted", model, sentinel),
        120,
        "the topic to be compacted after the crashes",
        interval_s=0.5,
    )
    live = {k: v for _, k, v in data_records(records) if v is not None}
    assert live == model.live()


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_keyless_records_are_refused_by_a_compacted_topic(broker, codec):
    create_topic(broker.bootstrap, "compacted", config=COMPACTED)
    create_topic(broker.bootstrap, "plain")
    producer = confluent_producer(broker.bootstrap, **{"compression.type": codec, "retries": 0})
    refused = produce_one_confluent(producer, "compacted", b"no key")
    assert refused.error is not None and refused.error.code() == KafkaError.INVALID_RECORD, refused
    assert produce_one_confluent(producer, "compacted", b"keyed", key=b"k").error is None
    assert produce_one_confluent(producer, "compacted", None, key=b"k").error is None, "a tombstone has a key"
    assert produce_one_confluent(producer, "plain", b"no key").error is None
