#!/usr/bin/env python3
"""Benchmark: transactions per second from one transactional producer.

This is a benchmark, not a test: it asserts nothing and reports numbers. One
broker is started (the binary from $STROM_BIN, else target/release/strom);
one confluent-kafka transactional producer then runs T transactions of R
records of S bytes each, spread over P partitions of one topic: begin,
produce, commit (AddPartitionsToTxn, Produce, EndTxn with its markers), one
after the other. Reported: transactions/s and records/s from the first
begin to the last commit, and broker CPU seconds per 1,000 transactions.
A second, optional round (--offsets) also sends consumer offsets in each
transaction (AddOffsetsToTxn and TxnOffsetCommit).

Run (from the repo root):

    .venv/bin/python bench/transactions_bench.py --transactions 500 --records 100
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

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from harness import Broker, create_topic  # noqa: E402

TIME_LIMIT_S = 600


def run_round(broker: Broker, topic: str, args, with_offsets: bool) -> dict:
    value = os.urandom(args.record_size)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 1}
    )
    producer.init_transactions(30)
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}"})
    cpu_before = broker.cpu_seconds()
    started = time.monotonic()
    done = 0
    for txn in range(args.transactions):
        if time.monotonic() - started > TIME_LIMIT_S:
            break
        producer.begin_transaction()
        for i in range(args.records):
            producer.produce(topic, value=value, partition=(txn + i) % args.partitions)
        if with_offsets:
            offsets = [TopicPartition(topic, 0, txn + 1)]
            producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        done += 1
    elapsed = time.monotonic() - started
    cpu = broker.cpu_seconds() - cpu_before
    group.close()
    return {
        "offsets": with_offsets,
        "transactions": done,
        "records_per_transaction": args.records,
        "seconds": round(elapsed, 3),
        "transactions_per_s": round(done / elapsed, 1),
        "records_per_s": round(done * args.records / elapsed),
        "broker_cpu_s_per_1000_txn": round(1000 * cpu / max(done, 1), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=500)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--offsets", action="store_true", help="also run a round with send_offsets_to_transaction")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        broker = Broker(Path(workdir))
        broker.start()
        try:
            topic = "bench-txn"
            create_topic(broker.bootstrap, topic, args.partitions)
            results = [run_round(broker, topic, args, with_offsets=False)]
            if args.offsets:
                create_topic(broker.bootstrap, topic + "-offsets", args.partitions)
                results.append(run_round(broker, topic + "-offsets", args, with_offsets=True))
        finally:
            broker.close()
    binary = os.environ.get("STROM_BIN", "target/release/strom")
    for result in results:
        print(json.dumps({"binary": binary, **result}))


if __name__ == "__main__":
    main()
