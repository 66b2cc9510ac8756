"""Real clients against a cluster of three combined nodes: every broker in
the metadata, a topic's partitions spread over the brokers and served
through any bootstrap broker, a group whose coordinator is on another
broker, a broker killed and restarted, and a producer sent to the wrong
broker finding the leader from the KIP-951 hint."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka import TopicPartition

from cluster import CLUSTER_WAIT_S, Cluster, live_brokers
from console_client import ConsoleClient
from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_client,
    confluent_consumer,
    confluent_producer,
    consume_confluent,
    create_topic,
    free_port,
    kafka_python_consumer,
    produce_confluent,
    wait_until,
)
import wire

BROKERS = {1, 2, 3}
PARTITIONS = 12
NOT_LEADER_OR_FOLLOWER = 6
# Fencing needs the session timeout (9 s) plus a heartbeat round or two.
FENCED_WAIT_S = 30.0


@pytest.fixture
def cluster(tmp_path):
    # Kafka's default session timeout (9 s): a shorter one has the last node
    # standing at teardown try to fence the others with no quorum to commit.
    overrides = {
        "offsets.topic.num.partitions": "12",
        "transaction.state.log.num.partitions": "6",
    }
    with Cluster(tmp_path, controllers=3, combined=True, overrides=overrides) as cluster:
        cluster.start_serving()
        yield cluster


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader id (-1: none), from confluent-kafka's metadata."""
    described = admin_client(bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics[topic]
    return {p: meta.leader for p, meta in described.partitions.items()}


def records(tag: str, count: int) -> list[OutRecord]:
    return [OutRecord(f"k{i}".encode(), f"{tag}-{i}".encode(), (), 1_700_000_000_000 + i) for i in range(count)]


def spread_topic(cluster: Cluster) -> str:
    """A 12-partition topic, once every partition has a leader."""
    topic = f"spread-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.nodes[1].bootstrap, topic, PARTITIONS)
    wait_until(
        lambda: [leader in BROKERS for leader in leaders(cluster.nodes[1].bootstrap, topic).values()]
        == [True] * PARTITIONS,
        CLUSTER_WAIT_S,
        "a leader for every partition",
    )
    return topic


def produce_all_partitions(bootstrap: str, topic: str, tag: str, per_partition: int, partitions=range(PARTITIONS)):
    """acks=all records into each partition; returns partition -> (values, deliveries)."""
    producer = confluent_producer(bootstrap, acks="all")
    sent = {}
    for p in partitions:
        out = records(f"{tag}-p{p}", per_partition)
        sent[p] = ([r.value for r in out], produce_confluent(producer, topic, out, partition=p, timeout_s=60))
    return sent


def kafka_python_brokers(bootstrap: str) -> dict[int, int]:
    """Broker id -> port, from kafka-python's Metadata."""
    consumer = kafka_python_consumer(bootstrap)
    try:
        consumer.topics()  # a Metadata round trip
        return {b.node_id: b.port for b in consumer._client.cluster.brokers()}
    finally:
        consumer.close()


def test_every_broker_is_in_the_metadata_of_confluent_kafka_and_kafka_python(cluster):
    ports = {n.node_id: n.broker_port for n in cluster.brokers()}
    for node in cluster.brokers():
        metadata = admin_client(node.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S)
        assert {id: b.port for id, b in metadata.brokers.items()} == ports, f"through broker {node.node_id}"
        assert kafka_python_brokers(node.bootstrap) == ports, f"through broker {node.node_id}"


def test_a_12_partition_topic_is_spread_and_served_through_every_bootstrap_broker(cluster):
    topic = spread_topic(cluster)
    assert Counter(leaders(cluster.nodes[1].bootstrap, topic).values()) == {1: 4, 2: 4, 3: 4}

    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for node in cluster.brokers():
        sent = produce_all_partitions(node.bootstrap, topic, f"via{node.node_id}", 20)
        for p, (values, _) in sent.items():
            expected[p].extend(values)
    ends = {p: len(values) for p, values in expected.items()}
    for node in cluster.brokers():
        got = consume_confluent(node.bootstrap, topic, ends)
        assert {p: [r.value for r in rs] for p, rs in got.items()} == expected, f"through broker {node.node_id}"


def coordinator_of(node, group: str) -> int:
    request = wire.find_coordinator_v4_request(1, [group])
    [found] = wire.parse_find_coordinator_v4(wire.call(node.broker_port, request))
    return found.node_id if found.error_code == wire.NONE else -1


def test_a_group_whose_coordinator_is_on_another_broker_commits_and_resumes(cluster):
    topic = spread_topic(cluster)
    bootstrap_node = cluster.nodes[1]
    produce_all_partitions(bootstrap_node.bootstrap, topic, "g", 10)
    candidates = [f"group-{i}" for i in range(20)]
    group = wait_until(
        lambda: next((g for g in candidates if coordinator_of(bootstrap_node, g) in BROKERS - {1}), None),
        CLUSTER_WAIT_S,
        "a group coordinated by another broker",
    )

    def consume(count: int) -> list[bytes]:
        # A member that leaves without LeaveGroup (librdkafka skips it after
        # a refused commit) holds the next join until its session expires:
        # a short session keeps that within the wait.
        settings = {
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": True,
            "session.timeout.ms": 6000,
            "debug": "cgrp",  # printed only when the test fails
        }
        consumer = confluent_consumer(bootstrap_node.bootstrap, **settings)
        got: list[bytes] = []
        try:
            consumer.subscribe([topic])
            wait_until(
                lambda: got.extend(m.value() for m in consumer.consume(count - len(got), 0.5) if not m.error())
                or len(got) >= count,
                CLUSTER_WAIT_S,
                f"{count} records for group {group}",
            )
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return got

    first = consume(60)
    rest = consume(PARTITIONS * 10 - 60)
    assert len(set(first) | set(rest)) == PARTITIONS * 10, "the second consumer resumed where the first committed"
    assert not set(first) & set(rest)


def test_a_killed_broker_leaves_its_partitions_leaderless_while_the_rest_serve_then_returns(cluster):
    topic = spread_topic(cluster)
    survivor = cluster.nodes[1].bootstrap
    before = produce_all_partitions(survivor, topic, "before", 10)
    victim = next(n.node_id for n in cluster.brokers() if n.node_id != cluster.wait_for_leader()[0])
    owned = sorted(p for p, leader in leaders(survivor, topic).items() if leader == victim)
    assert owned, f"broker {victim} leads no partition of {topic}"
    survivor = next(n.bootstrap for n in cluster.brokers() if n.node_id != victim)
    cluster.kill9(victim)

    wait_until(
        lambda: all(leaders(survivor, topic)[p] == -1 for p in owned),
        FENCED_WAIT_S,
        f"partitions of broker {victim} without a leader",
    )
    others = [p for p in range(PARTITIONS) if p not in owned]
    during = produce_all_partitions(survivor, topic, "during", 10, others)
    got = consume_confluent(survivor, topic, {p: 20 for p in others})
    for p in others:
        assert [r.value for r in got[p]] == before[p][0] + during[p][0]

    cluster.restart(victim)
    wait_until(
        lambda: all(leaders(survivor, topic)[p] == victim for p in owned),
        CLUSTER_WAIT_S,
        f"broker {victim} leading its partitions again",
    )
    ends = {p: 20 if p in others else 10 for p in range(PARTITIONS)}
    got = consume_confluent(survivor, topic, ends)
    for p in range(PARTITIONS):
        assert [r.value for r in got[p]] == before[p][0] + (during[p][0] if p in others else [])


def test_a_produce_to_the_wrong_broker_gets_not_leader_with_the_leaders_hint(cluster):
    topic = spread_topic(cluster)
    led = leaders(cluster.nodes[1].bootstrap, topic)
    partition, leader = next((p, l) for p, l in led.items() if l != 1)
    batch = wire.encode_record_batch([wire.BatchRecord(None, b"hinted")])

    refused = wire.produce(cluster.nodes[1].broker_port, 10, [(topic, [(partition, batch)])])
    [(_, [answer])] = refused.topics
    assert answer.error_code == NOT_LEADER_OR_FOLLOWER
    hinted_leader, hinted_epoch = answer.current_leader
    assert hinted_leader == leader and hinted_epoch >= 0
    [(node_id, host, port, _rack)] = refused.node_endpoints
    assert (node_id, host, port) == (leader, "127.0.0.1", cluster.nodes[leader].broker_port)

    # The leader may learn of the new topic a moment after the broker that
    # named it: like a client, retry what is retriable.
    def produced():
        [(_, [answer])] = wire.produce(port, 10, [(topic, [(partition, batch)])]).topics
        assert answer.error_code in (wire.NONE, wire.UNKNOWN_TOPIC_OR_PARTITION), answer
        return answer.error_code == wire.NONE and answer

    answer = wait_until(produced, CLUSTER_WAIT_S, "the hinted leader accepting the record")
    assert answer.base_offset == 0
    consumer = confluent_consumer(cluster.nodes[1].bootstrap)
    try:
        watermarks = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=ADMIN_TIMEOUT_S, cached=False
        )
    finally:
        consumer.close()
    assert tuple(watermarks) == (0, 1)


def test_the_console_of_a_broker_that_is_not_the_controller_creates_topics(tmp_path):
    """The console's admin actions take the Kafka APIs' path: from a broker
    that is not the active controller they are forwarded to it."""
    with Cluster(tmp_path, controllers=3, combined=True) as cluster:
        consoles = {node_id: free_port() for node_id in cluster.nodes}
        for node_id, node in cluster.nodes.items():
            node.process.overrides["console.listener"] = f"http://127.0.0.1:{consoles[node_id]}"
        cluster.start()
        leader, _ = cluster.wait_for_leader()
        other = next(node_id for node_id in cluster.nodes if node_id != leader)
        bootstrap = cluster.nodes[other].bootstrap
        wait_until(lambda: live_brokers(bootstrap) == BROKERS, CLUSTER_WAIT_S, "every broker live")
        notice = ConsoleClient(consoles[other]).act("/topics/create", name="from-console", partitions=6)
        assert notice == "created topic from-console"
        # Every broker's image follows the controller's commit a moment later.
        admin = admin_client(cluster.nodes[leader].bootstrap)
        wait_until(
            lambda: len(admin.list_topics("from-console", timeout=ADMIN_TIMEOUT_S).topics["from-console"].partitions) == 6,
            CLUSTER_WAIT_S,
            "the console's topic with its 6 partitions in the controller's metadata",
        )
