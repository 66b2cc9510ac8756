#!/usr/bin/env python3
"""Benchmark: the KRaft metadata quorum on three controllers and one broker.

This is a benchmark, not a test: it asserts nothing and reports numbers.
Three dedicated controllers and one broker are started on loopback from
the binary in $STROM_BIN (else target/release/strom), with Kafka's quorum
timeouts unless told otherwise. Then:

1. Idle controllers: CPU (percent of one core) and RSS of each controller
   over `--idle-seconds` with nothing to do.
2. CreateTopics latency: `--creates` one-partition topics created one at a
   time through the broker (forwarded to the active controller), each
   timed from request to answer; p50, p99 and max.
3. Controller failover: the active controller is killed with SIGKILL.
   Reported per kill: the time until the remaining controllers agree on a
   new leader (from their `quorum-state`) and until a CreateTopics through
   the broker succeeds again. The killed node is restarted and rejoins
   before the next round.

Run (from the repo root, with an optimised binary built):

    STROM_BIN=target/release/strom .venv/bin/python bench/quorum_bench.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))

from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from cluster import Cluster  # noqa: E402
from harness import admin_client  # noqa: E402

CONTROLLERS = 3
FAILOVER_WAIT_S = 60.0


def create_one(admin, timeout_s: float = 10.0) -> bool:
    """Creates a fresh one-partition topic; whether the controller took it."""
    name = f"bench-{uuid.uuid4().hex[:10]}"
    future = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=timeout_s, operation_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s + 5)
        return True
    except KafkaException:
        return False


def idle_usage(cluster: Cluster, seconds: float) -> dict[int, tuple[float, float]]:
    """Each controller's (CPU percent of one core, RSS MiB) over `seconds`."""
    controllers = cluster.controllers()
    before = {n.node_id: n.process.cpu_seconds() for n in controllers}
    time.sleep(seconds)
    return {
        n.node_id: (100 * (n.process.cpu_seconds() - before[n.node_id]) / seconds, n.process.rss_kb() / 1024)
        for n in controllers
    }


def create_latencies(admin, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        if not create_one(admin):
            raise RuntimeError("a CreateTopics failed on a healthy cluster")
        latencies.append((time.monotonic() - started) * 1000)
    return latencies


def failover_round(cluster: Cluster, admin) -> tuple[float, float]:
    """Kills the active controller: (seconds to an agreed new leader, to the next created topic)."""
    leader, epoch = cluster.wait_for_leader(FAILOVER_WAIT_S)
    killed_at = time.monotonic()
    cluster.kill9(leader)
    cluster.wait_for_leader(FAILOVER_WAIT_S, newer_than=epoch)
    elected = time.monotonic() - killed_at
    deadline = killed_at + FAILOVER_WAIT_S
    while not create_one(admin, timeout_s=5.0):
        if time.monotonic() > deadline:
            raise RuntimeError("no topic could be created after the controller failover")
    writable = time.monotonic() - killed_at
    cluster.nodes[leader].process.start()
    cluster.wait_for_leader(FAILOVER_WAIT_S)
    return elected, writable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=500)
    parser.add_argument("--failovers", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--election-timeout-ms", type=int, default=1000, help="Kafka's default")
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000, help="Kafka's default")
    args = parser.parse_args()

    quorum = {
        "controller.quorum.election.timeout.ms": str(args.election_timeout_ms),
        "controller.quorum.fetch.timeout.ms": str(args.fetch_timeout_ms),
        "controller.quorum.request.timeout.ms": "2000",
        "controller.quorum.election.backoff.max.ms": "1000",
    }
    with tempfile.TemporaryDirectory(prefix="quorum-bench-") as root:
        with Cluster(Path(root), controllers=CONTROLLERS, brokers=1, overrides=quorum) as cluster:
            cluster.start_serving(FAILOVER_WAIT_S)
            admin = admin_client(cluster.bootstrap)
            idle = idle_usage(cluster, args.idle_seconds)
            latencies = create_latencies(admin, args.creates)
            failovers = []
            for round_ in range(args.failovers):
                failovers.append(failover_round(cluster, admin))
                print(f"failover {round_}: elected {failovers[-1][0]:.2f} s, writable {failovers[-1][1]:.2f} s", flush=True)

    print("\n== quorum ==")
    print(f"quorum timeouts: election {args.election_timeout_ms} ms, fetch {args.fetch_timeout_ms} ms")
    for node_id, (cpu, rss) in sorted(idle.items()):
        print(f"idle controller {node_id}: CPU {cpu:.2f}% of a core, RSS {rss:.1f} MiB")
    print(
        f"CreateTopics ({args.creates}, one partition each): p50 {statistics.median(latencies):.2f} ms, "
        f"p99 {statistics.quantiles(latencies, n=100)[98]:.2f} ms, max {max(latencies):.2f} ms"
    )
    elected = [e for e, _ in failovers]
    writable = [w for _, w in failovers]
    print(
        f"kill -9 of the active controller, over {len(failovers)}: new leader agreed median "
        f"{statistics.median(elected):.2f} s, worst {max(elected):.2f} s; next CreateTopics median "
        f"{statistics.median(writable):.2f} s, worst {max(writable):.2f} s"
    )


if __name__ == "__main__":
    main()
