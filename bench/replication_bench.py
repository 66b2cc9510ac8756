#!/usr/bin/env python3
"""Benchmark: what replication costs, on a three-node cluster, in one run.

This is a benchmark, not a test: it asserts nothing and reports numbers. A
cluster of three combined (broker + controller) nodes is started on loopback
from the binary in $STROM_BIN (else target/release/strom). Then:

1. Throughput: `strom perf produce` writes N records of R bytes to a fresh
   topic, alternating rounds of RF=1 with acks=1 and RF=3 with acks=all
   (min.insync.replicas=2), so drift hits both alike. Reported per kind:
   MB/s, the RF=3 / RF=1 ratio, and the CPU seconds all three nodes spent
   per GB produced and per GB written to replicas (produced x RF).
2. Latency at half load: acks=all to the RF=3 topic at half the records/s
   the throughput rounds reached; the producer's p50/p99/max.
3. Failover: a one-partition RF=3 topic; the leader is killed with SIGKILL
   and an idempotent acks=all producer retries one record until it is
   acknowledged. Reported: kill -> acknowledgement time (median, worst),
   over `--failovers` rounds, each restarting the killed node and waiting
   for the ISR to be whole again.

Run (from the repo root, with an optimised binary built):

    STROM_BIN=target/release/strom .venv/bin/python bench/replication_bench.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from cluster import Cluster  # noqa: E402
from harness import admin_client, strom_binary, wait_future, wait_until  # noqa: E402

NODES = (1, 2, 3)
PERF_TIMEOUT_S = 600
FAILOVER_WAIT_S = 60.0


def cluster_cpu_s(cluster: Cluster) -> float:
    return sum(node.process.cpu_seconds() for node in cluster.nodes.values() if node.alive())


def wait_for_brokers(cluster: Cluster) -> None:
    """Until every node is a registered, unfenced broker (RF=3 needs them all)."""
    admin = admin_client(cluster.bootstrap)
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == len(NODES), 60.0, "every broker registered")


def create_topic(cluster: Cluster, name: str, partitions: int, rf: int) -> None:
    admin = admin_client(cluster.bootstrap)
    topic = NewTopic(name, partitions, rf, config={"min.insync.replicas": str(min(rf, 2))})
    wait_future(admin.create_topics([topic])[name])
    wait_until(lambda: all_led(cluster, name, partitions, rf), 30.0, f"{name} led with its whole ISR")


def all_led(cluster: Cluster, name: str, partitions: int, rf: int) -> bool:
    described = admin_client(cluster.bootstrap).list_topics(name, timeout=5).topics.get(name)
    if described is None or described.error is not None or len(described.partitions) != partitions:
        return False
    return all(p.leader >= 0 and len(p.isrs) == rf for p in described.partitions.values())


def perf_produce(cluster: Cluster, topic: str, acks: str, args, throughput: float = -1) -> dict:
    command = [
        str(strom_binary()), "perf", "produce",
        "--bootstrap-server", cluster.bootstrap,
        "--topic", topic,
        "--num-records", str(args.records),
        "--record-size", str(args.record_size),
        "--throughput", str(int(throughput)),
        "--acks", acks,
        "--batch-size", str(args.batch_size),
        "--linger-ms", str(args.linger_ms),
        "--format", "json",
    ]  # fmt: skip
    cpu_before = cluster_cpu_s(cluster)
    done = subprocess.run(command, capture_output=True, text=True, timeout=PERF_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"strom perf produce failed: {done.stderr.strip()}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    summary["cluster_cpu_s"] = cluster_cpu_s(cluster) - cpu_before
    return summary


def throughput_rounds(cluster: Cluster, args) -> dict:
    results: dict[str, list[dict]] = {"rf1_acks1": [], "rf3_acksall": []}
    for round_ in range(args.rounds):
        for kind, rf, acks in (("rf1_acks1", 1, "1"), ("rf3_acksall", 3, "all")):
            topic = f"bench-{kind}-{round_}-{uuid.uuid4().hex[:6]}"
            create_topic(cluster, topic, args.partitions, rf)
            summary = perf_produce(cluster, topic, acks, args)
            gb = summary["records"] * args.record_size / 1e9
            summary["cpu_s_per_gb_produced"] = summary["cluster_cpu_s"] / gb
            summary["cpu_s_per_gb_written"] = summary["cluster_cpu_s"] / (gb * rf)
            results[kind].append(summary)
            print(
                f"round {round_} {kind}: {summary['mb_per_sec']:.1f} MB/s, "
                f"{summary['records_per_sec']:.0f} records/s, p99 {summary['latency_p99_ms']:.1f} ms, "
                f"cluster CPU {summary['cpu_s_per_gb_produced']:.1f} s/GB produced",
                flush=True,
            )
    return results


def median_of(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def leader_of(cluster: Cluster, topic: str) -> tuple[int, int]:
    """(leader, ISR size) of partition 0, as any running node answers; (-1, 0) while unknown."""
    for node in cluster.running():
        try:
            described = admin_client(node.bootstrap).list_topics(topic, timeout=2).topics.get(topic)
        except Exception:  # noqa: BLE001 - a node that cannot answer is skipped
            continue
        if described is not None and 0 in described.partitions:
            partition = described.partitions[0]
            return partition.leader, len(partition.isrs)
    return -1, 0


def failover_rounds(cluster: Cluster, rounds: int) -> list[float]:
    topic = f"bench-failover-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 1, 3)
    producer = Producer(
        {
            "bootstrap.servers": ",".join(n.bootstrap for n in cluster.nodes.values()),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 0,
        }
    )
    times = []
    for round_ in range(rounds):
        leader, _ = wait_until(lambda: (v := leader_of(cluster, topic))[1] == 3 and v, FAILOVER_WAIT_S, "a whole ISR")
        killed_at = time.monotonic()
        cluster.kill9(leader)
        acknowledged = []
        producer.produce(topic, f"after-kill-{round_}".encode(), partition=0, on_delivery=lambda e, _m: acknowledged.append(e))
        deadline = killed_at + FAILOVER_WAIT_S
        while not acknowledged and time.monotonic() < deadline:
            producer.poll(0.005)
        if not acknowledged or acknowledged[0] is not None:
            raise RuntimeError(f"round {round_}: no acknowledgement after the kill: {acknowledged}")
        times.append(time.monotonic() - killed_at)
        print(f"failover {round_}: node {leader} killed, next acks=all write acknowledged after {times[-1]:.3f} s", flush=True)
        cluster.nodes[leader].process.start()
    producer.flush(10)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=262_144)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--failovers", type=int, default=20)
    parser.add_argument("--session-timeout-ms", type=int, default=9000, help="broker.session.timeout.ms (Kafka's default)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="replication-bench-") as root:
        sessions = {
            "broker.session.timeout.ms": str(args.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(max(100, args.session_timeout_ms // 10)),
        }
        with Cluster(Path(root), controllers=len(NODES), combined=True, overrides=sessions) as cluster:
            cluster.start()
            cluster.wait_for_leader()
            wait_for_brokers(cluster)
            throughput = throughput_rounds(cluster, args)
            rf1 = median_of(throughput["rf1_acks1"], "records_per_sec")
            rf3 = median_of(throughput["rf3_acksall"], "records_per_sec")
            half_load = perf_produce(cluster, throughput_topic(cluster, args), "all", args, throughput=rf3 / 2)
            failovers = failover_rounds(cluster, args.failovers)

    print("\n== replication ==")
    print(f"records: {args.records} x {args.record_size} B, {args.partitions} partitions, batch.size {args.batch_size}, linger.ms {args.linger_ms}")
    for kind, rounds in throughput.items():
        print(
            f"{kind}: median {median_of(rounds, 'mb_per_sec'):.1f} MB/s, "
            f"cluster CPU {median_of(rounds, 'cpu_s_per_gb_produced'):.1f} s/GB produced, "
            f"{median_of(rounds, 'cpu_s_per_gb_written'):.1f} s/GB written"
        )
    print(f"RF=3 acks=all / RF=1 acks=1 throughput: {rf3 / rf1:.2f}")
    print(
        f"half load ({rf3 / 2:.0f} records/s, RF=3 acks=all): p50 {half_load['latency_p50_ms']:.2f} ms, "
        f"p99 {half_load['latency_p99_ms']:.2f} ms, max {half_load['latency_max_ms']:.2f} ms"
    )
    print(
        f"failover (kill -9 of the leader -> next acks=all ack, session timeout {args.session_timeout_ms} ms): "
        f"median {statistics.median(failovers):.2f} s, worst {max(failovers):.2f} s over {len(failovers)}"
    )


def throughput_topic(cluster: Cluster, args) -> str:
    topic = f"bench-half-load-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, args.partitions, 3)
    return topic


if __name__ == "__main__":
    main()
