"""No acknowledged write is lost through leader failures.

Three combined nodes hold an RF=3 topic with `min.insync.replicas=2` and
three partitions. An idempotent acks=all producer writes uniquely numbered
records while a fault schedule runs: SIGKILL a partition leader and restart
it, SIGSTOP a leader past its session (it is fenced, another replica leads)
and resume it, SIGTERM a node (controlled shutdown) and restart it. Every
step waits on what the cluster shows (a new leader, the node unfenced, the
ISR whole again). At the end every acknowledged record is read back exactly
once at the offset it was acknowledged with, every partition's offsets are
contiguous, and the three replicas' logs are byte-identical.

The schedule is drawn from a seed printed on failure; STROM_FAILOVER_SEED
replays one."""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from cluster import CLUSTER_WAIT_S, Cluster
from harness import ADMIN_TIMEOUT_S, admin_client, confluent_consumer, confluent_producer, wait_future, wait_until
import wire

pytestmark = pytest.mark.timeout(150)

BROKERS = {1, 2, 3}
PARTITIONS = 3
SESSIONS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
FAULT_WAIT_S = 30.0
ROUNDS = 3
MAX_RECORDS = 100_000
MAX_PRODUCE_S = 75.0


def view(node, topic: str) -> tuple[set[int], dict[int, wire.MetadataPartition]]:
    """The live brokers and the topic's partitions as one node's Metadata has them; empty when unanswered."""
    try:
        response = wire.parse_metadata(wire.call(node.port, wire.metadata_request(1, [topic]), timeout_s=2.0))
    except (OSError, AssertionError, ValueError):
        return set(), {}
    described = response.topic(topic)
    states = {p.index: p for p in described.partition_states} if described else {}
    return {b[0] for b in response.brokers}, states


class Recorder:
    """An idempotent acks=all producer in a thread, writing `v<n>` to partition n % 3
    until stopped or bounded, keeping the acknowledged (partition, offset) of each."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = confluent_producer(
            bootstrap,
            acks="all",
            **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 30_000},
        )
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed.append(f"{msg.value()!r}: {err}")

    def _run(self) -> None:
        deadline = time.monotonic() + MAX_PRODUCE_S
        while self.sent < MAX_RECORDS and not self.stop.is_set() and time.monotonic() < deadline:
            for _ in range(10):
                try:
                    self.producer.produce(self.topic, f"v{self.sent}".encode(), partition=self.sent % PARTITIONS,
                                          on_delivery=self._delivered)
                    self.sent += 1
                except BufferError:
                    break
            self.producer.poll(0.02)
        self.producer.flush(40)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the producer did not finish"


class Faults:
    """The fault schedule, waiting on what the surviving nodes' metadata shows."""

    def __init__(self, cluster: Cluster, topic: str, rng: random.Random):
        self.cluster = cluster
        self.topic = topic
        self.rng = rng
        self.log: list[str] = []

    def others(self, node_id: int):
        return [self.cluster.nodes[n] for n in sorted(BROKERS - {node_id})]

    def leader_of(self, partition: int) -> int:
        def found():
            for node in self.cluster.running():
                _, states = view(node, self.topic)
                p = states.get(partition)
                if p is not None and p.leader in BROKERS:
                    return p.leader
            return None

        return wait_until(found, FAULT_WAIT_S, f"a leader of partition {partition}")

    def wait_led_elsewhere(self, victim: int) -> None:
        """Every partition led by a node other than `victim`, as the others see it, and `victim` fenced."""

        def moved():
            for node in self.others(victim):
                live, states = view(node, self.topic)
                if victim in live or len(states) != PARTITIONS:
                    return False
                if any(p.leader == victim or p.leader not in BROKERS for p in states.values()):
                    return False
            return True

        wait_until(moved, FAULT_WAIT_S, f"leadership moved off broker {victim} and it fenced")

    def wait_whole(self) -> None:
        """Every node unfenced and every partition's ISR all three, as every node sees it."""

        def whole():
            for node in self.cluster.nodes.values():
                live, states = view(node, self.topic)
                if live != BROKERS or len(states) != PARTITIONS:
                    return False
                if any(set(p.isr) != BROKERS or p.leader not in BROKERS for p in states.values()):
                    return False
            return True

        wait_until(whole, FAULT_WAIT_S, "every broker back and in every ISR")

    def kill_and_restart(self) -> None:
        victim = self.leader_of(self.rng.randrange(PARTITIONS))
        self.log.append(f"kill -9 {victim}")
        self.cluster.kill9(victim)
        self.wait_led_elsewhere(victim)
        self.cluster.restart(victim)
        self.wait_whole()

    def pause_past_session(self) -> None:
        victim = self.leader_of(self.rng.randrange(PARTITIONS))
        self.log.append(f"SIGSTOP {victim}")
        self.cluster.nodes[victim].pause()
        self.wait_led_elsewhere(victim)
        self.cluster.nodes[victim].resume()
        self.wait_whole()

    def stop_and_restart(self) -> None:
        victim = self.rng.choice(sorted(BROKERS))
        self.log.append(f"SIGTERM {victim}")
        self.cluster.stop(victim)
        self.wait_led_elsewhere(victim)
        self.cluster.restart(victim)
        self.wait_whole()

    def run(self, rounds: int) -> None:
        steps = [self.kill_and_restart, self.pause_past_session, self.stop_and_restart]
        for _ in range(rounds):
            self.rng.shuffle(steps)
            for step in steps:
                step()


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


def test_no_acknowledged_write_is_lost_through_kills_pauses_and_controlled_shutdowns(tmp_path):
    seed = int(os.environ.get("STROM_FAILOVER_SEED", random.randrange(1 << 32)))
    print(f"failover seed {seed}")
    with Cluster(tmp_path, controllers=3, combined=True, overrides=SESSIONS) as cluster:
        cluster.start()
        cluster.wait_for_leader()
        topic = f"failover-{uuid.uuid4().hex[:8]}"
        admin = admin_client(cluster.bootstrap)
        wait_until(lambda: set(admin.list_topics(timeout=5).brokers) == BROKERS, CLUSTER_WAIT_S, "all brokers")
        new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        wait_future(admin.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)[topic])
        faults = Faults(cluster, topic, random.Random(seed))
        faults.wait_whole()

        recorder = Recorder(cluster.bootstrap, topic)
        recorder.thread.start()
        wait_until(lambda: len(recorder.acked) >= 100, CLUSTER_WAIT_S, "the first acknowledged writes")
        try:
            faults.run(ROUNDS)
            throughout = recorder.thread.is_alive()
        finally:
            recorder.finish()
        context = (f"seed {seed}, schedule {faults.log}, sent {recorder.sent}, acked {len(recorder.acked)}, "
                   f"producing through every fault: {throughout}")
        print(context, "failed deliveries:", len(recorder.failed), recorder.failed[:5])
        assert len(recorder.acked) > 1000, f"too few acknowledged writes to prove anything: {context}"
        faults.wait_whole()

        _, states = view(cluster.nodes[1], topic)
        for partition in range(PARTITIONS):
            check_partition(cluster, topic, partition, states[partition].leader, recorder, context)


def check_partition(cluster: Cluster, topic: str, partition: int, leader: int, recorder: Recorder, context: str):
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
    acked = {v: offset for v, (p, offset) in recorder.acked.items() if p == partition}
    lost = sorted((v for v in acked if v not in at), key=lambda v: int(v[1:]))
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:10]}, on {where}"
    moved = {v: (offset, at[v]) for v, offset in acked.items() if at[v] != offset}
    assert not moved, f"records not at their acknowledged offsets {list(moved.items())[:10]} on {where}"
    logs = wait_until(
        lambda: len({replica_log(cluster, n, topic, partition) for n in BROKERS}) == 1
        and replica_log(cluster, leader, topic, partition),
        CLUSTER_WAIT_S,
        f"identical replica logs of {where}",
    )
    assert logs.count(committed[-1][1]) == 1
