#!/usr/bin/env python3
"""Benchmark of incremental fetch sessions (KIP-227) under load.

This is a benchmark, not a test: it asserts nothing and reports numbers.
It starts `strom server` ($STROM_BIN) on loopback with a fresh data dir,
creates one topic of --partitions partitions and then:

* for each session size (default 50, 1,000 and 5,000 partitions) opens a
  session with a full fetch and sends incremental fetches (epoch 1, 2, …,
  naming nothing, max_wait_ms 0) on one connection, reporting the broker's
  CPU seconds per request (utime + stime from /proc/<pid>/stat);
* measures another client's produce latency (one record per request,
  acks=1, on its own connection): first alone, then while --attackers
  connections loop on incremental fetches of the largest session.

Every loop is bounded by a request count and by --seconds per phase.

    STROM_BIN=target/debug/strom .venv/bin/python bench/fetch_sessions.py
    STROM_BIN=target/release/strom .venv/bin/python bench/fetch_sessions.py --sizes 50,1000,5000,40000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from harness import Broker, create_topic, now_ms  # noqa: E402
from wire import (  # noqa: E402
    INITIAL_EPOCH,
    NO_SESSION,
    NONE,
    BatchRecord,
    Connection,
    FetchPartition,
    encode_record_batch,
    fetch_request,
    parse_fetch_response,
    parse_produce_response,
    produce_request,
)

TOPIC = "sessions-bench"
LATENCY_TOPIC = "latency-bench"
FETCH_VERSION = 12
PRODUCE_VERSION = 9
REQUEST_TIMEOUT_S = 60.0


class Session:
    """One fetch session on its own connection."""

    def __init__(self, port: int, partitions: int):
        self.conn = Connection(port, REQUEST_TIMEOUT_S)
        self.correlation_id = 0
        every = [(TOPIC, [FetchPartition(p, 0) for p in range(partitions)])]
        opened = self.call(every, NO_SESSION, INITIAL_EPOCH)
        if opened.error_code != NONE or opened.session_id == NO_SESSION:
            raise SystemExit(f"no session opened for {partitions} partitions: error {opened.error_code}")
        self.id, self.epoch = opened.session_id, 1

    def call(self, topics, session_id: int, epoch: int):
        self.correlation_id += 1
        data = fetch_request(FETCH_VERSION, self.correlation_id, topics, session_id=session_id, session_epoch=epoch)
        return parse_fetch_response(self.conn.call(data, REQUEST_TIMEOUT_S), FETCH_VERSION)

    def incremental(self) -> None:
        response = self.call([], self.id, self.epoch)
        if response.error_code != NONE:
            raise SystemExit(f"incremental fetch failed: error {response.error_code}")
        self.epoch += 1

    def close(self) -> None:
        self.conn.close()


def cpu_per_incremental_fetch(broker: Broker, partitions: int, requests: int, seconds: float) -> tuple[float, int]:
    session = Session(broker.port, partitions)
    try:
        cpu_before, deadline, sent = broker.cpu_seconds(), time.monotonic() + seconds, 0
        while sent < requests and time.monotonic() < deadline:
            session.incremental()
            sent += 1
        return (broker.cpu_seconds() - cpu_before) / sent, sent
    finally:
        session.close()


def produce_latencies_ms(port: int, requests: int, seconds: float) -> list[float]:
    batch = encode_record_batch([BatchRecord(None, b"latency probe", (), now_ms())])
    latencies = []
    with Connection(port, REQUEST_TIMEOUT_S) as conn:
        deadline = time.monotonic() + seconds
        while len(latencies) < requests and time.monotonic() < deadline:
            data = produce_request(PRODUCE_VERSION, len(latencies), [(LATENCY_TOPIC, [(0, batch)])], acks=1)
            started = time.perf_counter()
            response = parse_produce_response(conn.call(data, REQUEST_TIMEOUT_S), PRODUCE_VERSION)
            latencies.append((time.perf_counter() - started) * 1000)
            [(_, [part])] = response.topics
            if part.error_code != NONE:
                raise SystemExit(f"produce failed: error {part.error_code}")
    return latencies


def summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms ({len(ordered)} produces)"


def latency_under_attack(broker: Broker, partitions: int, attackers: int, requests: int, seconds: float) -> str:
    stop = threading.Event()
    errors: list[str] = []
    sessions = [Session(broker.port, partitions) for _ in range(attackers)]

    def attack(session: Session) -> None:
        try:
            while not stop.is_set():
                session.incremental()
        except BaseException as exc:  # reported below, the attack only stops
            errors.append(repr(exc))

    threads = [threading.Thread(target=attack, args=(s,), daemon=True) for s in sessions]
    for thread in threads:
        thread.start()
    try:
        return summary(produce_latencies_ms(broker.port, requests, seconds))
    finally:
        stop.set()
        for thread in threads:
            thread.join(REQUEST_TIMEOUT_S)
        for session in sessions:
            session.close()
        if errors:
            print(f"attack errors: {errors[:3]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,1000,5000", help="session sizes in partitions, comma-separated")
    parser.add_argument("--requests", type=int, default=200, help="incremental fetches per session size")
    parser.add_argument("--attackers", type=int, default=2, help="connections fetching the largest session")
    parser.add_argument("--produces", type=int, default=500, help="produces per latency measurement")
    parser.add_argument("--seconds", type=float, default=20.0, help="time bound of each phase")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="strom-fetch-sessions-bench-") as tmp:
        broker = Broker(Path(tmp), {"num.partitions": "1"})
        broker.start(timeout_s=120)
        try:
            create_topic(broker.bootstrap, TOPIC, partitions=max(sizes))
            create_topic(broker.bootstrap, LATENCY_TOPIC)
            for size in sizes:
                cpu, sent = cpu_per_incremental_fetch(broker, size, args.requests, args.seconds)
                print(f"incremental fetch of {size} partitions: {cpu * 1000:.2f} ms broker CPU per request ({sent} requests)")
            print(f"produce latency alone: {summary(produce_latencies_ms(broker.port, args.produces, args.seconds))}")
            attacked = latency_under_attack(broker, max(sizes), args.attackers, args.produces, args.seconds)
            print(f"produce latency while {args.attackers} connections fetch {max(sizes)}-partition sessions: {attacked}")
        finally:
            broker.close()


if __name__ == "__main__":
    main()
