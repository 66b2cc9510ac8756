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

import pytest

from cluster import CLUSTER_WAIT_S, Cluster
from harness import confluent_producer, wait_until
from replicas import TopicWatch, check_partition, replicated_topic, view

pytestmark = pytest.mark.timeout(150)

BROKERS = {1, 2, 3}
PARTITIONS = 3
SESSIONS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
ROUNDS = 3
MAX_RECORDS = 100_000
MAX_PRODUCE_S = 75.0


class Recorder:
    """An idempotent acks=all producer in a thread, writing `v<n>` to partition n % 3
    until stopped or bounded, keeping the acknowledged (partition, offset) of each."""

    def __init__(self, bootstrap: str, topic: str, **conf):
        self.topic = topic
        self.producer = confluent_producer(
            bootstrap,
            acks="all",
            **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 30_000, **conf},
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
        self.watch = TopicWatch(cluster, [topic], PARTITIONS)
        self.rng = rng
        self.log: list[str] = []

    def kill_and_restart(self) -> None:
        victim = self.watch.leader_of(self.rng.randrange(PARTITIONS))
        self.log.append(f"kill -9 {victim}")
        self.cluster.kill9(victim)
        self.watch.wait_led_elsewhere(victim)
        self.cluster.restart(victim)
        self.watch.wait_whole()

    def pause_past_session(self) -> None:
        victim = self.watch.leader_of(self.rng.randrange(PARTITIONS))
        self.log.append(f"SIGSTOP {victim}")
        self.cluster.nodes[victim].pause()
        self.watch.wait_led_elsewhere(victim)
        self.cluster.nodes[victim].resume()
        self.watch.wait_whole()

    def stop_and_restart(self) -> None:
        victim = self.rng.choice(sorted(BROKERS))
        self.log.append(f"SIGTERM {victim}")
        self.cluster.stop(victim)
        self.watch.wait_led_elsewhere(victim)
        self.cluster.restart(victim)
        self.watch.wait_whole()

    def run(self, rounds: int) -> None:
        steps = [self.kill_and_restart, self.pause_past_session, self.stop_and_restart]
        for _ in range(rounds):
            self.rng.shuffle(steps)
            for step in steps:
                step()


def test_no_acknowledged_write_is_lost_through_kills_pauses_and_controlled_shutdowns(tmp_path):
    seed = int(os.environ.get("STROM_FAILOVER_SEED", random.randrange(1 << 32)))
    print(f"failover seed {seed}")
    with Cluster(tmp_path, controllers=3, combined=True, overrides=SESSIONS) as cluster:
        cluster.start_serving()
        topic = replicated_topic(cluster, PARTITIONS)
        faults = Faults(cluster, topic, random.Random(seed))
        faults.watch.wait_whole()

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
        faults.watch.wait_whole()

        _, states = view(cluster.nodes[1], topic)
        for partition in range(PARTITIONS):
            check_partition(cluster, topic, partition, states[partition].leader, recorder.acked, context)


def test_a_rolling_restart_by_sigterm_under_acks_all_load_fails_no_delivery_and_loses_nothing(tmp_path):
    """Each broker in turn stops by SIGTERM (a controlled shutdown, which must
    exit cleanly) and restarts, while an idempotent acks=all producer with
    librdkafka's default retries and delivery timeout writes."""
    with Cluster(tmp_path, controllers=3, combined=True, overrides=SESSIONS) as cluster:
        cluster.start_serving()
        topic = replicated_topic(cluster, PARTITIONS)
        watch = TopicWatch(cluster, [topic], PARTITIONS)
        watch.wait_whole()
        recorder = Recorder(cluster.bootstrap, topic, **{"message.timeout.ms": 300_000})
        recorder.thread.start()
        try:
            for victim in sorted(BROKERS):
                progress = len(recorder.acked) + 100
                wait_until(lambda: len(recorder.acked) >= progress, CLUSTER_WAIT_S, f"writes before stopping {victim}")
                cluster.stop(victim)
                watch.wait_led_elsewhere(victim)
                cluster.restart(victim)
                watch.wait_whole()
            progress = len(recorder.acked) + 100
            wait_until(lambda: len(recorder.acked) >= progress, CLUSTER_WAIT_S, "writes after the last restart")
        finally:
            recorder.finish()
        context = f"rolling restart, sent {recorder.sent}, acked {len(recorder.acked)}"
        failed = recorder.failed
        assert failed == [], f"{len(failed)} failed deliveries, first {failed[:5]} ({context})"
        assert len(recorder.acked) == recorder.sent, context
        _, states = view(cluster.nodes[1], topic)
        for partition in range(PARTITIONS):
            check_partition(cluster, topic, partition, states[partition].leader, recorder.acked, context)
