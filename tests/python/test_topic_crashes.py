"""Topic creation and deletion against crashes and the open files limit.

A kill -9 between any two steps of creating or deleting a topic (stopped
there by a failpoint, `STROM_FAILPOINTS`) must leave the metadata and the
partition directories agreeing after the restart. A metadata log naming
partitions whose directories are gone must never stop the start: the logs
are made again, and those the open files limit has no room for stay offline.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewPartitions

from harness import (
    ADMIN_TIMEOUT_S,
    Broker,
    admin_client,
    confluent_producer,
    consume_confluent,
    create_topic,
    future_error,
    new_topic,
    produce_one_confluent,
    topic_names,
    topic_partitions,
    wait_until,
)

FAILPOINT_WAIT_S = 15.0


def partition_dirs(broker: Broker, topic: str) -> list[int]:
    """The partition numbers of `topic` with a directory, and fails on a `-delete` leftover."""
    leftovers = [p.name for p in broker.data_dir.iterdir() if p.name.endswith("-delete")]
    assert not leftovers, f"deletions left behind: {leftovers}"
    prefix = f"{topic}-"
    names = [p.name[len(prefix) :] for p in broker.data_dir.iterdir() if p.name.startswith(prefix)]
    return sorted(int(n) for n in names if n.isdigit())


def crash_at(broker: Broker, point: str, action) -> None:
    """Runs `action` (which makes the broker reach `point`), kills the broker
    there with SIGKILL and restarts it without failpoints."""
    reached = f"failpoint {point} reached"
    pending = action()
    wait_until(lambda: reached in broker.log_tail(), FAILPOINT_WAIT_S, reached)
    broker.kill9()
    del pending
    broker.start()


def arm(monkeypatch, point: str) -> None:
    monkeypatch.setenv("STROM_FAILPOINTS", point)


# ---------------------------------------------------------------- kill -9 mid-way


@pytest.mark.parametrize("point", ["topic-logs-created", "topic-committed"])
def test_kill9_while_creating_a_topic(broker_factory, monkeypatch, point):
    arm(monkeypatch, point)
    broker = broker_factory()
    monkeypatch.delenv("STROM_FAILPOINTS")
    admin = admin_client(broker.bootstrap)

    crash_at(broker, point, lambda: admin.create_topics([new_topic("fresh", partitions=3)]))

    if point == "topic-logs-created":
        # The metadata never named it: its logs went with the other orphans.
        assert "fresh" not in topic_names(broker.bootstrap)
        assert partition_dirs(broker, "fresh") == []
        create_topic(broker.bootstrap, "fresh", partitions=3)
    else:
        assert sorted(topic_partitions(admin_client(broker.bootstrap), "fresh")) == [0, 1, 2]
        assert partition_dirs(broker, "fresh") == [0, 1, 2]
    producer = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(producer, "fresh", b"after the crash", partition=2)
    assert outcome.error is None and outcome.offset == 0, outcome


@pytest.mark.parametrize("point", ["partition-logs-added", "partitions-added"])
def test_kill9_while_adding_partitions(broker_factory, monkeypatch, point):
    arm(monkeypatch, point)
    broker = broker_factory()
    monkeypatch.delenv("STROM_FAILPOINTS")
    create_topic(broker.bootstrap, "growing", partitions=2)
    admin = admin_client(broker.bootstrap)

    crash_at(broker, point, lambda: admin.create_partitions([NewPartitions("growing", 4)]))

    expected = [0, 1] if point == "partition-logs-added" else [0, 1, 2, 3]
    assert sorted(topic_partitions(admin_client(broker.bootstrap), "growing")) == expected
    assert partition_dirs(broker, "growing") == expected
    producer = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(producer, "growing", b"after the crash", partition=expected[-1])
    assert outcome.error is None and outcome.offset == 0, outcome


@pytest.mark.parametrize("point", ["topic-removal-committed", "topic-log-removed"])
def test_kill9_while_deleting_a_topic(broker_factory, monkeypatch, point):
    arm(monkeypatch, point)
    broker = broker_factory()
    monkeypatch.delenv("STROM_FAILPOINTS")
    create_topic(broker.bootstrap, "doomed", partitions=3)
    producer = confluent_producer(broker.bootstrap)
    for partition in range(3):
        assert produce_one_confluent(producer, "doomed", b"old", partition=partition).error is None
    producer.close()
    admin = admin_client(broker.bootstrap)

    crash_at(broker, point, lambda: admin.delete_topics(["doomed"], operation_timeout=ADMIN_TIMEOUT_S))

    assert "doomed" not in topic_names(broker.bootstrap)
    assert partition_dirs(broker, "doomed") == []
    # The name is free again, for a topic with none of the old records.
    create_topic(broker.bootstrap, "doomed", partitions=3)
    fresh = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(fresh, "doomed", b"new", partition=1)
    assert outcome.error is None and outcome.offset == 0, outcome


# ---------------------------------------------------------------- directories gone at start


def test_partition_dirs_removed_while_down_are_made_again(broker):
    create_topic(broker.bootstrap, "orders", partitions=4)
    producer = confluent_producer(broker.bootstrap)
    assert produce_one_confluent(producer, "orders", b"kept", partition=0).error is None
    producer.close()
    broker.stop()
    for partition in (1, 3):
        for file in (broker.data_dir / f"orders-{partition}").iterdir():
            file.unlink()
        (broker.data_dir / f"orders-{partition}").rmdir()

    broker.start()

    assert partition_dirs(broker, "orders") == [0, 1, 2, 3]
    [record] = consume_confluent(broker.bootstrap, "orders", {0: 1})[0]
    assert record.value == b"kept"
    fresh = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(fresh, "orders", b"again", partition=3)
    assert outcome.error is None and outcome.offset == 0, outcome


def test_start_with_more_partitions_than_open_files_leaves_the_rest_offline(broker_factory):
    """The metadata names 900 partitions with no directory (a crash of an
    older version half way through creating them); 600 descriptors cannot
    open them all. The broker starts anyway, hosts what fits, reports the
    rest offline in one line, and hosts everything once the limit is raised."""
    broker = broker_factory({"log.segment.open.files.max": 16})
    for topic in ("part-a", "part-b", "part-c"):
        create_topic(broker.bootstrap, topic, partitions=300)
    broker.stop()
    for partition_dir in broker.data_dir.glob("part-*"):
        for file in partition_dir.iterdir():
            file.unlink()
        partition_dir.rmdir()

    broker.nofile = 600
    broker.start()

    admin = admin_client(broker.bootstrap)
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
    partitions = [p for t in ("part-a", "part-b", "part-c") for p in metadata[t].partitions.values()]
    assert len(partitions) == 900
    offline = [p for p in partitions if p.leader == -1]
    assert 0 < len(offline) < 900, f"{len(offline)} of 900 offline"
    assert all(p.error is not None and p.error.code() == KafkaError.LEADER_NOT_AVAILABLE for p in offline)
    assert broker.open_fds() < 600
    summary = [line for line in broker.log_tail(400).splitlines() if "partitions left offline" in line]
    assert len(summary) == 1, summary
    producer = confluent_producer(broker.bootstrap)
    assert produce_one_confluent(producer, "part-a", b"served", partition=0).error is None
    producer.close()

    broker.stop()
    broker.nofile = None
    broker.start()
    metadata = admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    assert all(p.leader == 1 for t in ("part-a", "part-b", "part-c") for p in metadata[t].partitions.values())
    assert sum(len(partition_dirs(broker, t)) for t in ("part-a", "part-b", "part-c")) == 900


def test_start_with_more_partition_logs_than_open_files_opens_the_rest_later(broker_factory):
    """900 partition logs on disk, 600 descriptors: the broker starts and
    serves the logs it could open; the others open, records and all, once
    the limit is raised, and a topic deleted meanwhile takes its unopened
    logs along."""
    broker = broker_factory({"log.segment.open.files.max": 16})
    topics = ("part-a", "part-b", "part-c")
    producer = confluent_producer(broker.bootstrap)
    for topic in topics:
        create_topic(broker.bootstrap, topic, partitions=300)
        assert produce_one_confluent(producer, topic, f"{topic} kept".encode(), partition=299).error is None
    producer.close()
    broker.stop()

    broker.nofile = 600
    broker.start()
    metadata = admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    offline = {(t, p.id) for t in topics for p in metadata[t].partitions.values() if p.leader == -1}
    assert ("part-a", 0) not in offline and ("part-c", 299) in offline, sorted(offline)[:5]
    assert broker.open_fds() < 600
    [record] = consume_confluent(broker.bootstrap, "part-a", {299: 1})[299]
    assert record.value == b"part-a kept"
    admin = admin_client(broker.bootstrap)
    assert future_error(admin.delete_topics(["part-c"], operation_timeout=ADMIN_TIMEOUT_S)["part-c"]) is None
    wait_until(lambda: partition_dirs(broker, "part-c") == [], ADMIN_TIMEOUT_S, "part-c's unopened logs removed")

    broker.stop()
    broker.nofile = None
    broker.start()
    metadata = admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    assert "part-c" not in metadata
    assert all(p.leader == 1 for t in topics[:2] for p in metadata[t].partitions.values())
    for topic in topics[:2]:
        [record] = consume_confluent(broker.bootstrap, topic, {299: 1})[299]
        assert record.value == f"{topic} kept".encode()
    create_topic(broker.bootstrap, "part-c", partitions=1)
    fresh = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(fresh, "part-c", b"new", partition=0)
    assert outcome.error is None and outcome.offset == 0, outcome

