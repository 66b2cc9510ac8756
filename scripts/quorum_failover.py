#!/usr/bin/env python3
"""Measures the metadata quorum (not run by CI):

- failover: kill -9 the leader of a 3-controller quorum N times and time
  until both survivors name one new leader in a higher epoch (read from
  their `quorum-state`, which a node writes before acting on an election);
  the killed node is restarted and caught up before the next round;
- idle cost: CPU and RSS of each process of an idle 3-controller quorum.

Timeouts are Kafka's defaults unless --fast (the test suite's short ones).

    STROM_BIN=target/debug/strom .venv/bin/python scripts/quorum_failover.py --kills 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from cluster import FAST_QUORUM, Cluster  # noqa: E402

KAFKA_DEFAULTS = {
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.request.timeout.ms": "2000",
    "controller.quorum.election.backoff.max.ms": "1000",
}
ROUND_TIMEOUT_S = 60.0
POLL_S = 0.005


def new_leader_after(cluster: Cluster, killed: int, old_epoch: int) -> tuple[int, int]:
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        views = {id: v for id, v in cluster.views().items() if id != killed}
        agreed = set(views.values())
        if len(agreed) == 1:
            [(epoch, leader)] = agreed
            if epoch > old_epoch and leader not in (-1, killed):
                return leader, epoch
        time.sleep(POLL_S)
    raise SystemExit(f"no new leader within {ROUND_TIMEOUT_S}s: {cluster.views()}")


def failover(cluster: Cluster, kills: int) -> list[float]:
    times = []
    for round in range(kills):
        leader, epoch = cluster.wait_for_leader(ROUND_TIMEOUT_S)
        # Let the followers fetch from this leader before it dies.
        cluster.wait_for_description(lambda p: p.leader_epoch == epoch and p.high_watermark > 0, ROUND_TIMEOUT_S)
        started = time.monotonic()
        cluster.kill9(leader)
        new_leader, new_epoch = new_leader_after(cluster, leader, epoch)
        elapsed = time.monotonic() - started
        times.append(elapsed)
        print(f"round {round + 1}: leader {leader} (epoch {epoch}) killed, {new_leader} leads epoch {new_epoch} after {elapsed * 1000:.0f} ms")
        cluster.restart(leader)
    return times


def idle_cost(cluster: Cluster, seconds: float) -> None:
    cluster.wait_for_leader(ROUND_TIMEOUT_S)
    time.sleep(2)
    before = {id: n.process.cpu_seconds() for id, n in cluster.nodes.items()}
    time.sleep(seconds)
    for id, node in cluster.nodes.items():
        cpu = (node.process.cpu_seconds() - before[id]) / seconds * 100
        print(f"node {id}: {cpu:.2f}% CPU over {seconds:.0f}s idle, RSS {node.process.rss_kb() / 1024:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--fast", action="store_true", help="the test suite's short quorum timeouts")
    args = parser.parse_args()
    timeouts = FAST_QUORUM if args.fast else KAFKA_DEFAULTS
    print(f"quorum timeouts: {timeouts}")
    with tempfile.TemporaryDirectory() as workdir, Cluster(Path(workdir), controllers=3, overrides=timeouts) as cluster:
        cluster.start()
        idle_cost(cluster, args.idle_seconds)
        times = failover(cluster, args.kills)
        print(
            f"election after kill -9 of the leader, {len(times)} kills: "
            f"median {statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
