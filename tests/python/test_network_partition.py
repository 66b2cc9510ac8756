"""A partition leader cut off from the rest of the cluster by a network
partition: three combined nodes, each in a network namespace of its own,
hold an RF=3 topic with `min.insync.replicas=2`. The leader of partition 0
has its links to the other nodes blackholed in both directions. A producer
inside its namespace, which reaches only it, gets no acks=all write
acknowledged although the leader appends them; the controller fences the
leader after `broker.session.timeout.ms` and elects another. Idempotent
producers inside a majority node's namespace write before the cut and
from the cut on, through the election and the healing. Once healed, the
old leader truncates the tail it
appended while cut off and rejoins the ISR: every acknowledged record is
read back exactly once, the cut-off writes nowhere, and the replicas' logs
are identical."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cluster import CLUSTER_WAIT_S, Cluster
from harness import wait_until
from replicas import TopicWatch, check_partition, replica_log, replicated_topic, view
from test_failover import BROKERS, PARTITIONS, SESSIONS

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("history_producer.py")
PARTITION = 0
MAX_RECORDS = 50_000
# Short enough that the cut-off producer gives up while the cut lasts.
CUT_OFF_TIMEOUTS = {"message.timeout.ms": "5000", "request.timeout.ms": "4000", "retries": "0"}
MAJORITY_SETTINGS = {"enable.idempotence": "true", "linger.ms": "5"}
CUT_OFF_RECORDS = 200
PROGRESS = 100
EXIT_WAIT_S = 70.0


class HistoryProducer:
    """history_producer.py running in a node's namespace, its delivery reports in a file."""

    def __init__(self, workdir: Path, netns: str, bootstrap: str, topic: str, prefix: str, count: int,
                 settings: dict[str, str]):
        self.prefix = prefix
        self.out = workdir / f"{prefix}.out"
        self.stop_file = workdir / f"{prefix}.stop"
        command = [sys.executable, str(SCRIPT), bootstrap, topic, str(PARTITION), prefix, str(count),
                   str(self.stop_file), *(f"{k}={v}" for k, v in settings.items())]
        with open(self.out, "wb") as out:
            self.process = subprocess.Popen(["ip", "netns", "exec", netns, *command], stdout=out,
                                            stderr=subprocess.STDOUT)

    def reports(self) -> list[list[str]]:
        """Every complete report line so far: the last may still be being
        written, and librdkafka's own log lines (stderr, which shares the
        file) are no reports."""
        lines = self.out.read_text().splitlines(keepends=True)
        fields = [line.split() for line in lines if line.endswith("\n")]
        return [f for f in fields if len(f) >= 2 and f[0] in ("ok", "fail")]

    def acked(self) -> dict[bytes, tuple[int, int]]:
        """Acknowledged value -> (partition, offset)."""
        return {r[1].encode(): (PARTITION, int(r[2])) for r in self.reports() if r[0] == "ok"}

    def failed(self) -> list[str]:
        return [" ".join(r) for r in self.reports() if r[0] == "fail"]

    def wait_exit(self) -> None:
        assert self.process.wait(EXIT_WAIT_S) == 0, self.out.read_text()[-2000:]

    def finish(self) -> None:
        self.stop_file.touch()
        self.wait_exit()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def test_a_cut_off_leader_acknowledges_nothing_is_replaced_and_truncates_its_tail_once_healed(tmp_path):
    with Cluster(tmp_path, controllers=3, combined=True, overrides=SESSIONS, netns=True) as cluster:
        cluster.start_serving()
        topic = replicated_topic(cluster, PARTITIONS)
        watch = TopicWatch(cluster, [topic], PARTITIONS)
        watch.wait_whole()
        old_leader = watch.leader_of(PARTITION)
        majority_node = cluster.nodes[min(BROKERS - {old_leader})]
        producers = []
        try:
            before = HistoryProducer(tmp_path, majority_node.process.netns, cluster.bootstrap, topic, "before",
                                     PROGRESS, MAJORITY_SETTINGS)
            producers.append(before)
            before.wait_exit()

            cluster.cut(old_leader)
            node = cluster.nodes[old_leader]
            cut_off = HistoryProducer(tmp_path, node.process.netns, node.bootstrap, topic, "cut-off", CUT_OFF_RECORDS,
                                      CUT_OFF_TIMEOUTS)
            producers.append(cut_off)
            # Started after the cut: librdkafka's idempotent producer was
            # seen to wait on a request in flight on a blackholed connection
            # well past request.timeout.ms, spinning, without looking for
            # the new leader.
            majority = HistoryProducer(tmp_path, majority_node.process.netns, cluster.bootstrap, topic, "majority",
                                       MAX_RECORDS, MAJORITY_SETTINGS)
            producers.append(majority)
            watch.wait_led_elsewhere(old_leader)
            wait_until(lambda: len(majority.acked()) >= PROGRESS, CLUSTER_WAIT_S,
                       "writes acknowledged by the new leader")
            cut_off.wait_exit()
            assert cut_off.acked() == {}, "a leader cut off from every follower acknowledged acks=all writes"
            assert len(cut_off.failed()) == CUT_OFF_RECORDS, cut_off.out.read_text()[-2000:]
            assert b"cut-off-" in replica_log(cluster, old_leader, topic, PARTITION), (
                "the cut-off leader never appended the writes it could not acknowledge"
            )

            cluster.heal()
            watch.wait_whole()
            progress = len(majority.acked()) + PROGRESS
            wait_until(lambda: len(majority.acked()) >= progress, CLUSTER_WAIT_S, "writes acknowledged after healing")
            majority.finish()
        finally:
            for producer in producers:
                producer.kill()
        assert before.failed() == [] and majority.failed() == [], (before.failed() + majority.failed())[:10]
        acked = {**before.acked(), **majority.acked()}
        _, states = view(cluster.nodes[old_leader], topic)
        context = f"old leader {old_leader}, {len(acked)} acknowledged"
        check_partition(cluster, topic, PARTITION, states[PARTITION].leader, acked, context)
        for node_id in BROKERS:
            assert b"cut-off-" not in replica_log(cluster, node_id, topic, PARTITION), (
                f"broker {node_id} kept writes never acknowledged ({context})"
            )
