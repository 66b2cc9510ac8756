#!/usr/bin/env python3
"""Measures the KRaft controller on real processes (report numbers, no
assertions): leader election time after kill -9 of the active controller,
as the time until a CreateTopics through a broker succeeds again (median and
worst over --kills kills); CreateTopics latency p50/p99 on 3 combined nodes;
an idle controller's CPU and RSS.

    STROM_BIN=target/debug/strom python scripts/measure_controller.py --kills 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cluster import Cluster  # noqa: E402
from harness import wait_until  # noqa: E402


def create(admin: AdminClient, name: str, timeout_s: float = 10.0) -> bool:
    try:
        admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=timeout_s)[name].result(timeout=timeout_s)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not yet"
        return False


def election_times(kills: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as workdir:
        with Cluster(Path(workdir), controllers=3, brokers=1) as cluster:
            cluster.start()
            admin = AdminClient({"bootstrap.servers": cluster.nodes[100].bootstrap})
            wait_until(lambda: create(admin, "warm-up"), 60, "a first topic")
            for kill in range(kills):
                leader, epoch = cluster.wait_for_leader()
                cluster.kill9(leader)
                killed = time.monotonic()
                deadline = killed + 60
                attempt = 0
                while not create(admin, f"after-kill-{kill}-{attempt}", timeout_s=5):
                    attempt += 1
                    if time.monotonic() > deadline:
                        raise SystemExit(f"no CreateTopics succeeded within 60 s of kill {kill}")
                times.append(time.monotonic() - killed)
                cluster.restart(leader)
                cluster.wait_for_leader()
                print(f"kill {kill + 1}: {times[-1] * 1000:.0f} ms", flush=True)
    return times


def create_latencies(count: int) -> list[float]:
    latencies = []
    with tempfile.TemporaryDirectory() as workdir:
        with Cluster(Path(workdir), controllers=3, combined=True) as cluster:
            cluster.start()
            cluster.wait_for_leader()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            wait_until(lambda: create(admin, "warm-up"), 60, "a first topic")
            for i in range(count):
                started = time.monotonic()
                if not create(admin, f"latency-{i}"):
                    raise SystemExit(f"CreateTopics {i} failed")
                latencies.append(time.monotonic() - started)
    return latencies


def idle_usage(seconds: float) -> tuple[float, int]:
    """CPU share and RSS (KiB) of the active controller of an idle 3-controller cluster."""
    with tempfile.TemporaryDirectory() as workdir:
        with Cluster(Path(workdir), controllers=3, brokers=1) as cluster:
            cluster.start()
            leader, _ = cluster.wait_for_leader()
            time.sleep(2)
            pid = cluster.nodes[leader].process._process.pid
            ticks = lambda: sum(int(v) for v in Path(f"/proc/{pid}/stat").read_text().split()[13:15])  # noqa: E731
            before, started = ticks(), time.monotonic()
            time.sleep(seconds)
            cpu = (ticks() - before) / 100 / (time.monotonic() - started)
            rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                       if line.startswith("VmRSS:"))
            return cpu, rss


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--creates", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=20)
    args = parser.parse_args()
    cpu, rss = idle_usage(args.idle_seconds)
    print(f"idle active controller: CPU {cpu * 100:.1f}% of a core, RSS {rss / 1024:.1f} MiB")
    latencies = create_latencies(args.creates)
    print(f"CreateTopics latency over {len(latencies)}: p50 {percentile(latencies, 50) * 1000:.1f} ms, "
          f"p99 {percentile(latencies, 99) * 1000:.1f} ms")
    times = election_times(args.kills)
    print(f"election (kill -9 to next successful CreateTopics) over {len(times)} kills: "
          f"median {statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
