#!/usr/bin/env python3
"""Benchmark of a broker hosting many partitions: start-up time, memory and
open file descriptors.

This is a benchmark, not a test: it asserts nothing and reports numbers.
Per run it:

* starts `strom server` on a fresh data dir (spread over --log-dirs dirs) and
  creates --topics topics of --partitions partitions each with the
  confluent-kafka AdminClient (timed);
* produces --records small records to each of --sample partitions; the
  broker's small log.segment.bytes makes those roll several segments each
  (inactive segments must not hold descriptors);
* optionally (--kill9) kills it with SIGKILL right after the writes and
  measures the restart after that unclean shutdown, which recovers every
  segment past the last checkpointed recovery point;
* stops the broker cleanly and restarts it --restarts times, measuring spawn
  to first accepted TCP connection, then RSS (VmRSS, VmHWM), open fds and
  memory maps of the restarted process.

Run from the repo root:

    STROM_BIN=target/debug/strom .venv/bin/python bench/partitions_bench.py
    .venv/bin/python bench/partitions_bench.py --topics 100 --partitions 100 --log-dirs 2 --kill9
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from harness import (  # noqa: E402
    Broker,
    admin_client,
    confluent_producer,
    new_topic,
    wait_future,
)


def process_figures(broker: Broker) -> dict[str, int]:
    status = Path(f"/proc/{broker.pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split()[1] for line in status if line.startswith(("VmRSS", "VmHWM"))}
    maps = len(Path(f"/proc/{broker.pid}/maps").read_text().splitlines())
    return {"rss_kb": int(fields["VmRSS"]), "hwm_kb": int(fields["VmHWM"]), "fds": broker.open_fds(), "maps": maps}


def timed_start(broker: Broker, timeout_s: float) -> float:
    started = time.monotonic()
    broker.start(timeout_s=timeout_s)
    return time.monotonic() - started


def create_topics(broker: Broker, topics: int, partitions: int) -> float:
    admin = admin_client(broker.bootstrap)
    names = [f"bench-{t:03d}" for t in range(topics)]
    started = time.monotonic()
    for chunk in range(0, topics, 10):
        batch = [new_topic(name, partitions) for name in names[chunk : chunk + 10]]
        futures = admin.create_topics(batch, operation_timeout=60, request_timeout=60)
        for future in futures.values():
            wait_future(future, 120)
    return time.monotonic() - started


def produce_sample(broker: Broker, topics: int, partitions: int, sample: int, records: int, rounds: int) -> int:
    """`rounds` flushed rounds of `records` records to each sampled partition: each round is a
    batch of its own, so a small log.segment.bytes rolls a segment per round."""
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 5})
    produced = 0
    for _ in range(rounds):
        for index in range(sample):
            topic, partition = f"bench-{index % topics:03d}", (index // topics) % partitions
            for i in range(records):
                producer.produce(topic, value=b"x" * 200, key=str(i).encode(), partition=partition)
                produced += 1
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining:
            raise SystemExit(f"{remaining} records undelivered")
    return produced


def segment_count(dirs: list[Path]) -> int:
    return sum(1 for d in dirs for _ in d.glob("*/*.log"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--log-dirs", type=int, default=1)
    parser.add_argument("--sample", type=int, default=300, help="partitions produced to")
    parser.add_argument("--records", type=int, default=10, help="records per sampled partition and round")
    parser.add_argument("--rounds", type=int, default=5, help="produce rounds (one batch, one segment each)")
    parser.add_argument("--segment-bytes", type=int, default=2048, help="log.segment.bytes of the broker")
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--kill9", action="store_true")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="strom-partitions-bench-") as tmp:
        workdir = Path(tmp)
        dirs = [workdir / f"logs{i}" for i in range(args.log_dirs)]
        overrides = {
            "log.dirs": ",".join(map(str, dirs)),
            "log.segment.bytes": str(args.segment_bytes),
            "num.partitions": "1",
        }
        overrides.update(dict(item.split("=", 1) for item in args.override))
        broker = Broker(workdir, overrides)
        broker.start(timeout_s=args.start_timeout)
        try:
            total = args.topics * args.partitions
            create_s = create_topics(broker, args.topics, args.partitions)
            print(f"created {total} partitions in {create_s:.1f}s; {process_figures(broker)}")
            produced = produce_sample(broker, args.topics, args.partitions, args.sample, args.records, args.rounds)
            print(f"produced {produced} records to {args.sample} partitions; segments on disk: {segment_count(dirs)}")
            print(f"before restart: {process_figures(broker)}")
            if args.kill9:
                # Right after the writes: nothing checkpointed since, the worst case.
                broker.kill9()
                start_s = timed_start(broker, args.start_timeout)
                print(f"restart after kill -9: {start_s:.3f}s; {process_figures(broker)}")
            starts = []
            for run in range(args.restarts):
                stop_started = time.monotonic()
                broker.stop(timeout_s=args.start_timeout)
                stop_s = time.monotonic() - stop_started
                start_s = timed_start(broker, args.start_timeout)
                starts.append(start_s)
                print(f"clean restart {run + 1}: stop {stop_s:.2f}s, start to first connection {start_s:.3f}s; "
                      f"{process_figures(broker)}")
            if starts:
                print(f"clean start-up: min {min(starts):.3f}s median {statistics.median(starts):.3f}s")
        finally:
            broker.close()


if __name__ == "__main__":
    main()
