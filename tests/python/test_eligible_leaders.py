"""Eligible leader replicas (KIP-966) and followers left behind their
leader's log start, on one controller and three brokers (100, 101, 102).

With `min.insync.replicas=2` the leader holds the high watermark once its
ISR falls below two, so the replicas that leave from then on hold every
committed record: the controller keeps them as eligible leader replicas
(`Elr:` in `strom topics --describe`). When the last ISR member is lost
too, a returning eligible replica is elected and nothing acknowledged with
acks=all is lost.

A follower whose log ends below its leader's log start (DeleteRecords ran
while it was down) restarts its log at the leader's log start and rejoins
the ISR, as Kafka's fetcher does on OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import re
import uuid

import pytest
from confluent_kafka.admin import NewTopic

from cluster import CLUSTER_WAIT_S, Cluster
from harness import (
    admin_client,
    admin_ok,
    confluent_producer,
    consume_confluent,
    produce_one_confluent,
    strom,
    wait_future,
    wait_until,
    watermarks_confluent,
)

pytestmark = pytest.mark.timeout(180)

BROKERS = [100, 101, 102]
SESSIONS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
OVERRIDES = {**SESSIONS, "offsets.topic.replication.factor": "1", "replica.lag.time.max.ms": "3000"}
RECORDS = 30


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, controllers=1, brokers=3, overrides=OVERRIDES) as cluster:
        cluster.start()
        wait_until(lambda: len(admin_client(cluster.bootstrap).list_topics(timeout=5).brokers) == 3,
                   CLUSTER_WAIT_S, "three live brokers")
        yield cluster


def describe(cluster: Cluster, topic: str) -> dict[str, str]:
    """Partition 0 of `topic` as `strom topics --describe` prints it, through any live broker."""
    for node in cluster.running():
        if not node.is_broker:
            continue
        done = strom("topics", "--bootstrap-server", node.bootstrap, "--describe", "--topic", topic)
        line = next((l for l in done.stdout.splitlines() if "Partition: 0" in l), None)
        if done.returncode == 0 and line:
            return dict(re.findall(r"(\w+): ?([^\t]*)", line.strip()))
    return {}


def ids(field: str) -> list[int]:
    return sorted(int(i) for i in field.split(",") if i)


def wait_for(cluster: Cluster, topic: str, what: str, **expected) -> dict[str, str]:
    """Waits until the described partition shows every `expected` field (lists as sorted ids)."""
    seen = {}

    def matches():
        nonlocal seen
        seen = describe(cluster, topic)
        return seen and all(
            (ids(seen.get(k, "")) if isinstance(v, list) else seen.get(k)) == v for k, v in expected.items()
        )

    wait_until(matches, CLUSTER_WAIT_S, f"{what} (last seen {seen})")
    return seen


def create(cluster: Cluster, topic: str, config: dict[str, str]) -> None:
    admin = admin_client(cluster.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[BROKERS], config=config)])[topic])
    wait_for(cluster, topic, "the whole ISR", Leader="100", Isr=BROKERS)


def produce_all(bootstrap: str, topic: str, values: list[bytes]) -> dict[bytes, int]:
    """Each value acknowledged with acks=all; value -> offset."""
    producer = confluent_producer(bootstrap, acks="all", **{"enable.idempotence": True})
    acked = {}
    for value in values:
        outcome = produce_one_confluent(producer, topic, value, partition=0)
        assert outcome.error is None, f"{value!r}: {outcome.error}"
        acked[value] = outcome.offset
    return acked


def high_watermark(bootstrap: str, topic: str) -> int:
    return watermarks_confluent(bootstrap, topic, [0])[0][1]


def test_a_returning_eligible_replica_leads_and_no_acknowledged_record_is_lost(cluster):
    topic = f"elr-{uuid.uuid4().hex[:8]}"
    create(cluster, topic, {"min.insync.replicas": "2"})
    acked = produce_all(cluster.bootstrap, topic, [f"v{i}".encode() for i in range(RECORDS)])

    # 102 leaves while the ISR is at min ISR: not eligible. 101 leaves below it: eligible.
    cluster.stop(102)
    wait_for(cluster, topic, "102 out of the ISR", Leader="100", Isr=[100, 101], Elr=[])
    cluster.stop(101)
    seen = wait_for(cluster, topic, "101 eligible", Leader="100", Isr=[100], Elr=[101])
    assert seen["LastKnownElr"] == "", seen

    # Below min ISR the leader still appends acks=1 writes but holds the high watermark.
    held = high_watermark(cluster.bootstrap, topic)
    assert held == RECORDS
    unsafe = confluent_producer(cluster.nodes[100].bootstrap, acks=1)
    assert produce_one_confluent(unsafe, topic, b"unsafe", partition=0).error is None
    assert high_watermark(cluster.bootstrap, topic) == held, "the high watermark moved below min ISR"

    # The last ISR member dies: the ISR empties, every replica that left below min ISR stays
    # eligible. 102 is back (a live broker to describe through) but not eligible: it does not lead.
    cluster.kill9(100)
    cluster.restart(102)
    wait_for(cluster, topic, "no leader, 100 and 101 eligible", Leader="none", Isr=[], Elr=[100, 101],
             LastKnownElr=[100])

    # 101 shut down cleanly: back, it is elected from the ELR; 102 then catches up from it and the
    # ISR at min ISR again empties the ELR and lets the high watermark move.
    cluster.restart(101)
    seen = wait_for(cluster, topic, "101 elected from the ELR", Leader="101")
    assert set(ids(seen["Isr"])) <= {101, 102} and 100 not in ids(seen["Isr"]), seen
    wait_for(cluster, topic, "the ISR at min ISR again", Leader="101", Isr=[101, 102], Elr=[], LastKnownElr=[])

    got = consume_confluent(cluster.bootstrap, topic, {0: RECORDS}, timeout_s=60)
    read = {r.value: r.offset for r in got[0]}
    lost = {v: o for v, o in acked.items() if read.get(v) != o}
    assert not lost, f"acknowledged records lost or moved: {sorted(lost.items())[:5]}"


def test_a_follower_behind_its_leaders_log_start_restarts_its_log_there_and_rejoins(cluster, tmp_path):
    topic = f"behind-{uuid.uuid4().hex[:8]}"
    create(cluster, topic, {"segment.bytes": "1024"})
    produce_all(cluster.bootstrap, topic, [f"early-{i}".encode() for i in range(10)])
    cluster.stop(102)
    wait_for(cluster, topic, "102 out of the ISR", Isr=[100, 101])
    produce_all(cluster.bootstrap, topic, [f"late-{i:03}".encode() for i in range(90)])
    admin_ok(cluster.nodes[100].process, "delete-records", "--topic", topic, "--partition", "0", "--offset", "60")
    assert watermarks_confluent(cluster.bootstrap, topic, [0])[0] == (60, 100)

    cluster.restart(102)
    wait_for(cluster, topic, "102 back in the ISR", Isr=BROKERS)
    # Its log restarted at the leader's log start: the log start checkpoint a clean stop writes says so.
    cluster.stop(102)
    checkpoint = (cluster.nodes[102].data_dir / "log-start-offset-checkpoint").read_text().split("\n")
    assert f"{topic} 0 60" in checkpoint, checkpoint
    segments = sorted(p.name for p in (cluster.nodes[102].data_dir / f"{topic}-0").glob("*.log"))
    assert segments and int(segments[0].split(".")[0]) >= 10, f"the old log is gone: {segments}"
