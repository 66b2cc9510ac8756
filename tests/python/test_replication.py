"""Replicated partitions on a cluster of three combined nodes: followers
fetch from the leader and keep byte-identical logs, acks=all waits for the
ISR (and completes once a paused follower resumes), and acks=all with
fewer in-sync replicas than `min.insync.replicas` is NOT_ENOUGH_REPLICAS.
On three broker-only nodes beside one controller: a killed follower leaves
the ISR and acks=all goes on with `min.insync.replicas=2`, and an old leader
truncates the tail it never replicated when it returns as a follower."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from cluster import CLUSTER_WAIT_S, Cluster
from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_client,
    confluent_producer,
    consume_confluent,
    produce_confluent,
    wait_future,
    wait_until,
)

BROKERS = {1, 2, 3}
SEGMENT = "00000000000000000000.log"


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, controllers=3, combined=True) as cluster:
        cluster.start_serving()
        yield cluster


def replicated_topic(cluster: Cluster, config: dict[str, str] | None = None) -> tuple[str, int]:
    """A one-partition topic on all three brokers; its name and leader."""
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    admin = admin_client(cluster.bootstrap)
    new = NewTopic(topic, num_partitions=1, replication_factor=3, config=config or {})
    wait_future(admin.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)[topic])

    def leader():
        meta = admin.list_topics(topic, timeout=5).topics[topic].partitions.get(0)
        return meta is not None and meta.leader >= 0 and len(meta.replicas) == 3 and meta.leader

    return topic, wait_until(leader, CLUSTER_WAIT_S, f"a leader of {topic}")


def records(tag: str, count: int) -> list[OutRecord]:
    return [OutRecord(f"k{i}".encode(), f"{tag}-{i}".encode(), (), 1_700_000_000_000 + i) for i in range(count)]


def segment(cluster: Cluster, node_id: int, topic: str) -> bytes:
    path = cluster.nodes[node_id].data_dir / f"{topic}-0" / SEGMENT
    return path.read_bytes() if path.exists() else b""


def logs_identical(cluster: Cluster, topic: str, node_ids=BROKERS) -> bytes | None:
    logs = {node_id: segment(cluster, node_id, topic) for node_id in node_ids}
    first = logs[min(node_ids)]
    return first if first and all(log == first for log in logs.values()) else None


def test_an_rf3_topic_produced_with_acks_all_has_identical_logs_on_every_broker(cluster):
    topic, leader = replicated_topic(cluster, {"min.insync.replicas": "2"})
    producer = confluent_producer(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    sent = records("a", 300)
    deliveries = produce_confluent(producer, topic, sent, partition=0)
    assert [d.offset for d in deliveries] == list(range(300))
    # Acknowledged with acks=all: the high watermark covers them all at once.
    read = consume_confluent(cluster.nodes[leader].bootstrap, topic, {0: 300})
    assert [r.value for r in read[0]] == [r.value for r in sent]
    log = wait_until(lambda: logs_identical(cluster, topic), CLUSTER_WAIT_S, "identical replica logs")
    assert log.count(b"a-299") == 1, "every replica holds the last record once"


def test_acks_all_waits_for_a_paused_follower_in_the_isr_and_completes_when_it_resumes(cluster):
    topic, leader = replicated_topic(cluster)
    follower = min(BROKERS - {leader})
    producer = confluent_producer(cluster.bootstrap, acks="all", **{"message.timeout.ms": 60_000})
    produce_confluent(producer, topic, records("before", 10), partition=0)
    # Paused (SIGSTOP) within its session: still in the ISR, fetching nothing.
    # (A stopped broker's controlled shutdown would take it out of the ISR.)
    cluster.nodes[follower].pause()
    delivered = []
    producer.produce(topic, b"while-down", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    # Bounded: the follower is still in the ISR, so the write may not be acknowledged.
    producer.poll(3.0)
    assert delivered == [], "acks=all answered while an ISR member was down"
    cluster.nodes[follower].resume()
    wait_until(lambda: producer.poll(0.2) or delivered, CLUSTER_WAIT_S, "the held acks=all write")
    assert delivered == [None]
    log = wait_until(lambda: logs_identical(cluster, topic), CLUSTER_WAIT_S, "identical replica logs")
    assert log.count(b"while-down") == 1


def test_acks_all_with_fewer_in_sync_replicas_than_min_insync_is_not_enough_replicas(cluster):
    topic, _ = replicated_topic(cluster, {"min.insync.replicas": "4"})
    # NOT_ENOUGH_REPLICAS is retriable: without retries the client reports it.
    producer = confluent_producer(cluster.bootstrap, acks="all", retries=0)
    errors = []
    producer.produce(topic, b"refused", partition=0, on_delivery=lambda err, msg: errors.append(err))
    wait_until(lambda: producer.poll(0.2) or errors, 30, "the refused write's report")
    assert errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
    # acks=1 does not ask the ISR.
    delivered = produce_confluent(confluent_producer(cluster.bootstrap, acks=1), topic, records("one", 3), partition=0)
    assert [d.offset for d in delivered] == [0, 1, 2]


# Broker-only nodes beside one controller, so brokers can die while the
# metadata quorum lives on.
BROKER_IDS = {100, 101, 102}
# Fencing waits out the broker session (9 s) and a heartbeat round or two.
FENCED_WAIT_S = 40.0


@pytest.fixture
def brokers(tmp_path):
    with Cluster(tmp_path, controllers=1, brokers=3) as cluster:
        cluster.start_serving()
        yield cluster


def partition_state(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    """The partition's leader and ISR as a live broker's metadata has them."""
    try:
        meta = admin_client(bootstrap).list_topics(topic, timeout=5).topics[topic].partitions[0]
        return meta.leader, sorted(meta.isrs)
    except Exception:  # noqa: BLE001 - a broker still catching up answers nothing useful
        return -1, []


def test_acks_all_goes_on_with_min_insync_2_after_a_killed_follower_leaves_the_isr(brokers):
    topic, leader = replicated_topic(brokers, {"min.insync.replicas": "2"})
    first, second = sorted(BROKER_IDS - {leader})
    bootstrap = brokers.nodes[leader].bootstrap
    producer = confluent_producer(bootstrap, acks="all", **{"message.timeout.ms": 60_000})
    produce_confluent(producer, topic, records("three", 20), partition=0)
    brokers.kill9(first)
    wait_until(lambda: partition_state(bootstrap, topic)[1] == sorted([leader, second]), FENCED_WAIT_S, "the ISR without the killed follower")
    delivered = produce_confluent(producer, topic, records("two", 20), partition=0)
    assert [d.offset for d in delivered] == list(range(20, 40))
    assert logs_identical(brokers, topic, {leader, second}) or wait_until(
        lambda: logs_identical(brokers, topic, {leader, second}), CLUSTER_WAIT_S, "the surviving replicas agree"
    )
    brokers.kill9(second)
    wait_until(lambda: partition_state(bootstrap, topic)[1] == [leader], FENCED_WAIT_S, "the leader alone in the ISR")
    refusing = confluent_producer(bootstrap, acks="all", retries=0)
    errors = []
    refusing.produce(topic, b"one-too-few", partition=0, on_delivery=lambda err, msg: errors.append(err))
    wait_until(lambda: refusing.poll(0.2) or errors, 30, "the refused write's report")
    assert errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS


def test_an_old_leader_truncates_its_unreplicated_tail_and_rejoins_identical(brokers):
    topic, old_leader = replicated_topic(brokers, {"min.insync.replicas": "2"})
    followers = sorted(BROKER_IDS - {old_leader})
    producer = confluent_producer(brokers.nodes[old_leader].bootstrap, acks="all")
    produce_confluent(producer, topic, records("kept", 20), partition=0)
    # Followers stopped: acks=1 writes reach the old leader alone. A fetch
    # each follower had parked still carries the first write away.
    for node_id in followers:
        brokers.nodes[node_id].pause()
    lossy = confluent_producer(brokers.nodes[old_leader].bootstrap, acks=1)
    assert [d.offset for d in produce_confluent(lossy, topic, records("in-flight", 1), partition=0)] == [20]
    assert [d.offset for d in produce_confluent(lossy, topic, records("unreplicated", 4), partition=0)] == [21, 22, 23, 24]
    brokers.kill9(old_leader)
    for node_id in followers:
        brokers.nodes[node_id].resume()
    survivor = brokers.nodes[followers[0]].bootstrap
    new_leader = wait_until(
        lambda: partition_state(survivor, topic)[0] in followers and partition_state(survivor, topic)[0],
        FENCED_WAIT_S,
        "a follower elected leader",
    )
    after = confluent_producer(brokers.nodes[new_leader].bootstrap, acks="all", **{"message.timeout.ms": 60_000})
    offsets = [d.offset for d in produce_confluent(after, topic, records("new", 10), partition=0)]
    assert offsets[0] in (20, 21) and offsets == list(range(offsets[0], offsets[0] + 10)), offsets
    brokers.restart(old_leader)
    log = wait_until(lambda: logs_identical(brokers, topic, BROKER_IDS), CLUSTER_WAIT_S, "the old leader's log agreeing")
    assert b"unreplicated" not in log, "the old leader's unreplicated tail was truncated"
    assert log.count(b"new-9") == 1 and log.count(b"kept-19") == 1
