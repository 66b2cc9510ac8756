"""What the brokers of a cluster show about replicated topics, and checks
of a partition against a history of acknowledgements.

`TopicWatch` waits on the brokers' Metadata for the moves a fault test
makes: a leader for a partition, leadership moved off a broker that is
down or cut off (and that broker fenced), every broker back in every ISR.
`check_partition` reads a partition back and checks that every
acknowledged record is there exactly once at its offset and that every
replica's log holds the same bytes.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from cluster import CLUSTER_WAIT_S, Cluster
from harness import ADMIN_TIMEOUT_S, admin_client, confluent_consumer, wait_future, wait_until
import wire

FAULT_WAIT_S = 30.0


def replicated_topic(cluster: Cluster, partitions: int) -> str:
    """A new topic on three replicas per partition with `min.insync.replicas=2`."""
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    admin = admin_client(cluster.bootstrap)
    new = NewTopic(topic, num_partitions=partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_future(admin.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)[topic])
    return topic


def view(node, topic: str) -> tuple[set[int], dict[int, wire.MetadataPartition]]:
    """The live brokers and the topic's partitions as one node's Metadata has them; empty when unanswered."""
    try:
        request = wire.metadata_request(1, [topic])
        response = wire.parse_metadata(wire.call(node.port, request, timeout_s=2.0, host=node.host))
    except (OSError, AssertionError, ValueError):
        return set(), {}
    described = response.topic(topic)
    states = {p.index: p for p in described.partition_states} if described else {}
    return {b[0] for b in response.brokers}, states


class TopicWatch:
    """Waits on what the brokers' Metadata shows about `topics`, each with `partitions` partitions."""

    def __init__(self, cluster: Cluster, topics: list[str], partitions: int):
        self.cluster = cluster
        self.topics = topics
        self.partitions = partitions
        self.brokers = {n.node_id for n in cluster.brokers()}

    def states(self, node) -> tuple[set[int], list[wire.MetadataPartition]] | None:
        """The live brokers and every watched partition as `node` shows them; None if it shows less."""
        live, states = set(), []
        for topic in self.topics:
            live, described = view(node, topic)
            if len(described) != self.partitions:
                return None
            states.extend(described.values())
        return live, states

    def leader_of(self, partition: int, topic: str | None = None) -> int:
        def found():
            for node in self.cluster.running():
                _, states = view(node, topic or self.topics[0])
                p = states.get(partition)
                if p is not None and p.leader in self.brokers:
                    return p.leader
            return None

        return wait_until(found, FAULT_WAIT_S, f"a leader of partition {partition}")

    def wait_led_elsewhere(self, victim: int) -> None:
        """Every partition led by a broker other than `victim`, as the others see it, and `victim` fenced."""

        def moved():
            for node_id in sorted(self.brokers - {victim}):
                seen = self.states(self.cluster.nodes[node_id])
                if seen is None or victim in seen[0]:
                    return False
                if any(p.leader == victim or p.leader not in self.brokers for p in seen[1]):
                    return False
            return True

        wait_until(moved, FAULT_WAIT_S, f"leadership moved off broker {victim} and it fenced")

    def wait_whole(self) -> None:
        """Every broker unfenced and in every partition's ISR, as every broker sees it."""

        def whole():
            for node_id in self.brokers:
                seen = self.states(self.cluster.nodes[node_id])
                if seen is None or seen[0] != self.brokers:
                    return False
                if any(set(p.isr) != self.brokers or p.leader not in self.brokers for p in seen[1]):
                    return False
            return True

        wait_until(whole, FAULT_WAIT_S, "every broker back and in every ISR")


def read_partition(bootstrap: str, topic: str, partition: int, end: int, isolation: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition below `end`."""
    consumer = confluent_consumer(bootstrap, **{"isolation.level": isolation})
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while (got[-1][0] + 1 if got else 0) < end:
            assert time.monotonic() < deadline, f"reading partition {partition} stalled at {len(got)} of {end}"
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                assert not msg.error(), f"consumer error on partition {partition}: {msg.error()}"
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def replica_log(cluster: Cluster, node_id: int, topic: str, partition: int) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-{partition}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def check_partition(cluster: Cluster, topic: str, partition: int, leader: int,
                    acked: dict[bytes, tuple[int, int]], context: str) -> None:
    """Every `acked` record of the partition (value -> (partition, offset)) is
    read back exactly once at its offset, offsets are contiguous, and every
    replica's log is the same bytes."""
    bootstrap = cluster.nodes[leader].bootstrap
    probe = confluent_consumer(bootstrap)
    try:
        low, high = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=ADMIN_TIMEOUT_S, cached=False)
    finally:
        probe.close()
    where = f"partition {partition} (leader {leader}, high watermark {high}; {context})"
    committed = read_partition(bootstrap, topic, partition, high, "read_committed")
    uncommitted = read_partition(bootstrap, topic, partition, high, "read_uncommitted")
    assert committed == uncommitted, f"isolation levels disagree without transactions on {where}"
    offsets = [offset for offset, _ in committed]
    assert low == 0 and offsets == list(range(high)), f"offsets not contiguous from 0 on {where}"
    values = [value for _, value in committed]
    duplicates = sorted({v for v in values if values.count(v) > 1}) if len(set(values)) != len(values) else []
    assert not duplicates, f"duplicated records {duplicates[:10]} on {where}"
    at = {value: offset for offset, value in committed}
    acked = {v: offset for v, (p, offset) in acked.items() if p == partition}
    lost = [v for v in acked if v not in at]
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:10]}, on {where}"
    moved = {v: (offset, at[v]) for v, offset in acked.items() if at[v] != offset}
    assert not moved, f"records not at their acknowledged offsets {list(moved.items())[:10]} on {where}"
    logs = wait_until(
        lambda: len({replica_log(cluster, n.node_id, topic, partition) for n in cluster.brokers()}) == 1
        and replica_log(cluster, leader, topic, partition),
        CLUSTER_WAIT_S,
        f"identical replica logs of {where}",
    )
    assert logs.count(committed[-1][1]) == 1
