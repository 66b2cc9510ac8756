"""One broker, 10,000 partitions: created through the admin client, a sample
written and read back across a clean restart, while inactive segments hold
no file descriptor (only active segments and a small bounded cache do) and
indexes are mapped only when used.

Timings and memory are printed for the record, never asserted.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from harness import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_consumer,
    confluent_producer,
    new_topic,
    wait_future,
    wait_until,
)

TOPICS = 100
PARTITIONS_PER_TOPIC = 100
PARTITIONS = TOPICS * PARTITIONS_PER_TOPIC
# Topics whose partitions roll a segment with every produce round (segment.ms=1).
ROLLING_TOPICS = 2
ROUNDS = 6
RECORDS_PER_ROUND = 3
# Partitions 0-2 of every other topic get one round.
SAMPLED_PARTITIONS = (0, 1, 2)
FILE_CACHE = 32
# Descriptors beyond the active segments: sockets, the metadata log, lock files, stdio.
FD_SLACK = 200


def topic_name(index: int) -> str:
    return f"many-{index:03d}"


def rolling(topic: str) -> bool:
    return topic < topic_name(ROLLING_TOPICS)


def sample() -> list[tuple[str, int]]:
    rolling_partitions = [(topic_name(t), p) for t in range(ROLLING_TOPICS) for p in range(PARTITIONS_PER_TOPIC)]
    others = [(topic_name(t), p) for t in range(ROLLING_TOPICS, TOPICS) for p in SAMPLED_PARTITIONS]
    return rolling_partitions + others


def value(topic: str, partition: int, round_: int, index: int) -> bytes:
    return f"{topic}/{partition}/{round_}/{index}/".encode().ljust(120, b"#")


def create_all(bootstrap: str) -> None:
    admin = admin_client(bootstrap)
    for first in range(0, TOPICS, 10):
        topics = [
            new_topic(topic_name(t), PARTITIONS_PER_TOPIC, {"segment.ms": "1"} if rolling(topic_name(t)) else None)
            for t in range(first, first + 10)
        ]
        futures = admin.create_topics(topics, operation_timeout=60, request_timeout=60)
        for future in futures.values():
            wait_future(future, 60)

    def all_listed():
        listed = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
        return sum(len(listed[topic_name(t)].partitions) for t in range(TOPICS) if topic_name(t) in listed)

    wait_until(lambda: all_listed() == PARTITIONS, 60, f"{PARTITIONS} partitions in metadata")


def produce_sample(bootstrap: str) -> dict[tuple[str, int], list[bytes]]:
    """Each round is flushed on its own, so each becomes a batch of its own and,
    on the rolling topics, a segment of its own."""
    producer = confluent_producer(bootstrap, **{"linger.ms": 2})
    written: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in sample()}
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for round_ in range(ROUNDS):
        for topic, partition in sample():
            if round_ > 0 and not rolling(topic):
                continue
            for i in range(RECORDS_PER_ROUND):
                data = value(topic, partition, round_, i)
                producer.produce(topic, value=data, partition=partition, on_delivery=on_delivery)
                written[(topic, partition)].append(data)
            producer.poll(0)
        # A round takes longer than segment.ms (1 ms): the next one rolls.
        assert producer.flush(60) == 0, "undelivered records"
    assert not errors, errors[:5]
    return written


def consume(bootstrap: str, expected: dict[tuple[str, int], list[bytes]], timeout_s: float = 60.0) -> None:
    consumer = confluent_consumer(bootstrap)
    got: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in expected}
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in expected])
        deadline = time.monotonic() + timeout_s
        while any(len(got[tp]) < len(expected[tp]) for tp in expected):
            if time.monotonic() >= deadline:
                behind = [(tp, len(got[tp]), len(expected[tp])) for tp in expected if len(got[tp]) < len(expected[tp])]
                raise AssertionError(f"consumer stalled on {len(behind)} partitions, e.g. {behind[:5]}")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise AssertionError(f"consumer error on {msg.topic()}[{msg.partition()}]: {msg.error()}")
                got[(msg.topic(), msg.partition())].append(msg.value())
    finally:
        consumer.close()
    for tp, values in expected.items():
        assert got[tp] == values, f"{tp}: read back differs"


def segment_files(data_dir: Path) -> int:
    return sum(1 for _ in data_dir.glob("*/*.log"))


def mapped_regions(pid: int) -> int:
    return len(Path(f"/proc/{pid}/maps").read_text().splitlines())


def test_ten_thousand_partitions_across_a_restart(broker_factory):
    broker = broker_factory({"log.segment.open.files.max": FILE_CACHE})
    started = time.monotonic()
    create_all(broker.bootstrap)
    print(f"\ncreated {PARTITIONS} partitions in {time.monotonic() - started:.1f}s, RSS {broker.rss_kb()} KiB")

    started = time.monotonic()
    written = produce_sample(broker.bootstrap)
    print(f"produced to {len(written)} partitions in {time.monotonic() - started:.1f}s")
    started = time.monotonic()
    consume(broker.bootstrap, written)
    print(f"consumed them in {time.monotonic() - started:.1f}s")
    segments = segment_files(broker.data_dir)
    inactive = segments - PARTITIONS
    assert inactive >= ROLLING_TOPICS * PARTITIONS_PER_TOPIC * (ROUNDS - 2), f"rolling topics rolled: {segments}"

    # Every segment was read: only active ones and the cache hold
    # descriptors, once the responses still in flight to the closed
    # consumer (which hold their segments' files) are dropped.
    fd_bound = PARTITIONS + FILE_CACHE + FD_SLACK
    assert fd_bound < PARTITIONS + inactive
    after_close = broker.open_fds()
    fds = wait_until(lambda: (n := broker.open_fds()) <= fd_bound and n, 10, f"at most {fd_bound} open fds")
    print(f"{segments} segments ({inactive} inactive), {after_close} then {fds} open fds after reading them all")

    started = time.monotonic()
    broker.stop()
    print(f"clean shutdown in {time.monotonic() - started:.1f}s")
    started = time.monotonic()
    broker.start(timeout_s=60)
    startup_s = time.monotonic() - started
    regions = mapped_regions(broker.pid)
    print(
        f"clean restart to first connection {startup_s:.2f}s, RSS {broker.rss_kb()} KiB, "
        f"{broker.open_fds()} fds, {regions} mapped regions"
    )
    # Only the written partitions' active indexes are mapped at start (their
    # ends are read from them); an eager start would map two per segment.
    assert regions < 2 * len(written) + 400 < 2 * segments
    assert broker.open_fds() <= fd_bound

    started = time.monotonic()
    consume(broker.bootstrap, written)
    print(f"consumed them again in {time.monotonic() - started:.1f}s")
    assert broker.open_fds() <= fd_bound
