#!/usr/bin/env python3
"""Benchmark: what idempotence costs a producer, against a plain one, in one run.

This is a benchmark, not a test: it asserts nothing and reports numbers. One
broker is started (the binary from $STROM_BIN, else target/release/strom);
then, alternating plain and idempotent rounds so drift hits both alike, one
confluent-kafka producer writes N bytes of R-byte records (one pre-generated
random value) to a fresh topic. Both kinds use acks=all (idempotence
requires it), linger.ms=20, batch.size=1 MB and no compression; the
idempotent one sets enable.idempotence=true (at most 5 requests in flight).
Reported per round: MB/s and records/s from the first produce() to the last
acknowledgement, and broker CPU seconds per GB (utime+stime from /proc).

Run (from the repo root, with the release binary built):

    .venv/bin/python bench/idempotence_bench.py --bytes 2e8 --record-size 1024 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))

from confluent_kafka import Producer  # noqa: E402

from harness import Broker, create_topic  # noqa: E402

PARTITIONS = 6
TIME_LIMIT_S = 600


def produce_round(bootstrap: str, topic: str, total_bytes: int, record_size: int, idempotent: bool) -> dict:
    """Produce `total_bytes` of payload; returns elapsed seconds and the record count."""
    value = os.urandom(record_size)
    records = max(1, total_bytes // record_size)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 512 * 1024,
            "compression.type": "none",
        }
    )
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    started = time.monotonic()
    deadline = started + TIME_LIMIT_S
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise SystemExit("produce did not finish within the time limit")
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.monotonic() - started
    if left or failures:
        raise SystemExit(f"{left} undelivered, {len(failures)} failed: {failures[:3]}")
    return {"seconds": elapsed, "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=float, default=2e8, help="payload bytes per round")
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each kind, alternating")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("STROM_BIN", str(REPO_ROOT / "target" / "release" / "strom"))

    results = []
    with tempfile.TemporaryDirectory(prefix="strom-idempotence-bench-") as workdir:
        broker = Broker(Path(workdir))
        broker.start()
        try:
            for round_index in range(args.rounds):
                for idempotent in (False, True):
                    kind = "idempotent" if idempotent else "plain"
                    topic = f"{kind}-{round_index}"
                    create_topic(broker.bootstrap, topic, PARTITIONS)
                    cpu_before = broker.cpu_seconds()
                    outcome = produce_round(broker.bootstrap, topic, int(args.bytes), args.record_size, idempotent)
                    cpu = broker.cpu_seconds() - cpu_before
                    payload_mb = outcome["records"] * args.record_size / 1e6
                    results.append(
                        {
                            "kind": kind,
                            "round": round_index,
                            "mb_per_s": payload_mb / outcome["seconds"],
                            "records_per_s": outcome["records"] / outcome["seconds"],
                            "broker_cpu_s_per_gb": cpu / (payload_mb / 1e3),
                        }
                    )
        finally:
            broker.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.bytes / 1e6:.0f} MB of {args.record_size}-byte records per round, {PARTITIONS} partitions")
    for r in results:
        print(
            f"{r['kind']:>10} round {r['round']}: {r['mb_per_s']:7.1f} MB/s  {r['records_per_s']:9.0f} rec/s  "
            f"broker {r['broker_cpu_s_per_gb']:5.2f} CPU s/GB"
        )


if __name__ == "__main__":
    main()
