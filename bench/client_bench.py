#!/usr/bin/env python3
"""Benchmark of Strom's own client tools against confluent-kafka (librdkafka),
both driving the same load into one Strom broker.

This is a benchmark, not a test: it asserts nothing and reports numbers. Per
matrix cell (record size x acks x compression; one partition, linger.ms=5,
batch.size=1048576 for both clients) a fresh `strom server` is started
(release binary, loopback, temp data dir, `group.initial.rebalance.delay.ms=0`;
start-up, readiness and /proc CPU readings come from broker_bench.py) and:

* strom produce: `strom perf produce --num-records N --record-size S
  --throughput -1 --producer-props acks=A linger.ms=5 batch.size=B
  compression.type=C --format json` into topic `strom-perf`. From its JSON
  summary: records/s, MiB/s, latency percentiles (send to acknowledgement),
  client CPU (getrusage of the tool) per GB.
* strom consume: `strom perf consume --messages N --format json` reads it back
  (a fresh consumer group; the page cache is warm), then once more with
  `--fetch-size 4194304`. Throughput is the tool's fetch figures, which leave
  out the group join (shown separately as "join ms"); the tool's end-to-end
  figures are in the JSON output.
* ck produce: a confluent-kafka Producer in its own Python process with the same
  acks / linger.ms / batch.size / compression.type writes the same N records
  (the same kind of payload: one value of random capital letters, reused, like
  strom perf's) into topic `ck-perf`: produce() in a tight loop, poll(0) every
  1000 records and on BufferError, then flush(). Wall time is from the first
  produce() to flush()'s return; before it, one record into a side topic
  connects and (if idempotent) acquires the producer id, as strom perf does
  before its clock starts (librdkafka's first PID request otherwise waits for
  a 500 ms retry timer). Latency is msg.latency() (produce() to
  delivery) of every --sample-every'th record, through a per-message delivery
  callback (a callback on every record would charge Python, not librdkafka).
* ck consume: a confluent-kafka Consumer in its own process assign()s partition
  0 at OFFSET_BEGINNING and calls consume(num_messages=10000) until N records
  arrived; librdkafka's defaults (max.partition.fetch.bytes 1 MiB) except
  fetch.queue.backoff.ms=10: with its default of 1000 ms, a full local queue
  (which a Python loop keeps hitting) idles the fetcher for a second, and
  1 KiB runs read ~90 MiB/s instead of ~360.

Client CPU is getrusage(RUSAGE_SELF) of the client process, so it includes
librdkafka's threads and Python; for strom perf it is the tool's own figure.
Broker CPU (utime+stime from /proc/PID/stat) is read around each run: per GB
in for produce, per GB out for consume (GB = 1e9 payload bytes). For strom
perf runs that reading (and "busy") spans the whole tool process (connect and
group join included); for confluent-kafka runs, the timed window only. MiB/s
is 2^20 bytes/s of record values, like Kafka's perf tools. "busy" is machine-wide busy cores during the
run: on a small box the client and the broker share the CPUs. After each
produce the topic's log end offset is checked against N (reported, not
asserted).

Idempotence follows Kafka's default unless --idempotence says otherwise: strom
perf is given no `enable.idempotence` (so it is on for acks=-1, off for
acks=1, as in Kafka's Java producer), and confluent-kafka is set to match.

Per record size there is one extra row: `strom perf produce` with Kafka's
default batch.size=16384 (acks=1, no compression), on its own fresh broker.

Sizes: 1,000,000 records of 1 KiB (~1 GB) and 3,000,000 records of 100 B per
run; --scale multiplies both. Every run is a subprocess with a timeout
(--time-limit), so the bench always stops.

Run from the repo root, with the release binary built:

    .venv/bin/python bench/client_bench.py
    .venv/bin/python bench/client_bench.py --scale 0.1 --save /tmp/client-bench.json
    .venv/bin/python bench/client_bench.py --record-size 100 --acks 1 --compression lz4 --json

(Run with `--worker produce|consume CONFIG_JSON`, this file is the body of one
confluent-kafka client process; the benchmark starts those itself.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import broker_bench as bb  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
LINGER_MS = 5
BIG_BATCH = 1_048_576
KAFKA_DEFAULT_BATCH = 16_384
BIG_FETCH = 4_194_304
CONSUME_BATCH = 10_000
BASE_RECORDS = {1024: 1_000_000, 100: 3_000_000}
STROM_TOPIC, CK_TOPIC, WARMUP_TOPIC = "strom-perf", "ck-perf", "ck-warm-up"


@dataclass(frozen=True)
class Cell:
    record_size: int
    acks: str
    compression: str
    batch_size: int
    records: int
    strom_produce_only: bool = False

    @property
    def label(self) -> str:
        return f"{self.record_size} B, acks={self.acks}, {self.compression}, batch.size={self.batch_size}"


def idempotent(acks: str, mode: str) -> bool:
    return acks in ("-1", "all") if mode == "auto" else mode == "true"


# ---------------------------------------------------------------- confluent-kafka worker processes


def _rusage_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def payload(size: int) -> bytes:
    """Random capital letters, like strom perf's value (so lz4 sees the same kind of data)."""
    return bytes(random.choices(range(ord("A"), ord("Z") + 1), k=size))


def percentiles(latencies_s: list[float]) -> dict:
    if not latencies_s:
        return {}
    ms = sorted(x * 1e3 for x in latencies_s)
    pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return {"latency_avg_ms": sum(ms) / len(ms), "latency_p50_ms": pick(0.5), "latency_p95_ms": pick(0.95),
            "latency_p99_ms": pick(0.99), "latency_p999_ms": pick(0.999), "latency_max_ms": ms[-1],
            "latency_samples": len(ms)}


def ck_produce(cfg: dict) -> dict:
    from confluent_kafka import Producer

    samples: list[float] = []
    errors: list[str] = []

    def on_sample(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            samples.append(msg.latency())

    p = Producer(cfg["conf"])
    # Connected, the leader known and (if idempotent) the producer id acquired before the clock starts,
    # as strom perf's Producer::connect does: one record into a side topic.
    p.list_topics(cfg["topic"], timeout=10)
    p.produce(WARMUP_TOPIC, b"warm-up", partition=0)
    p.flush(10)
    value, topic, n, every = payload(cfg["record_size"]), cfg["topic"], cfg["records"], cfg["sample_every"]
    produce, poll = p.produce, p.poll
    cpu0, brk0, busy0, t0 = _rusage_s(), bb.proc_cpu_s(cfg["broker_pid"]), bb.system_cpu()[0], time.monotonic()
    deadline = t0 + cfg["time_limit"]
    sent = 0
    while sent < n:
        try:
            if sent % every:
                produce(topic, value, partition=0)
            else:
                produce(topic, value, partition=0, on_delivery=on_sample)
        except BufferError:
            poll(0.0005)
            if time.monotonic() > deadline:
                break
            continue
        sent += 1
        if not sent % 1000:
            poll(0)
    unacked = p.flush(max(0.1, deadline - time.monotonic()))
    t1, cpu1, brk1, busy1 = time.monotonic(), _rusage_s(), bb.proc_cpu_s(cfg["broker_pid"]), bb.system_cpu()[0]
    if unacked:
        p.purge()
        p.flush(1)
    return {"records": sent - unacked, "sent": sent, "unacked": unacked, "errors": len(errors),
            "first_error": errors[0] if errors else None, "elapsed_s": t1 - t0, "cpu_s": cpu1 - cpu0,
            "broker_cpu_s": brk1 - brk0, "busy_cores": (busy1 - busy0) / (t1 - t0),
            "timed_out": sent < n or unacked > 0, **percentiles(samples)}


def ck_consume(cfg: dict) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

    c = Consumer(cfg["conf"])
    c.list_topics(cfg["topic"], timeout=10)
    n = cfg["records"]
    cpu0, brk0, busy0, t0 = _rusage_s(), bb.proc_cpu_s(cfg["broker_pid"]), bb.system_cpu()[0], time.monotonic()
    deadline = t0 + cfg["time_limit"]
    c.assign([TopicPartition(cfg["topic"], 0, OFFSET_BEGINNING)])
    got, errors = 0, []
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(num_messages=CONSUME_BATCH, timeout=1.0)
        bad = list(filter(None, map(Message.error, msgs)))  # a C-level scan; errors are rare
        got += len(msgs) - len(bad)
        errors += [str(e) for e in bad[:5]]
    t1, cpu1, brk1, busy1 = time.monotonic(), _rusage_s(), bb.proc_cpu_s(cfg["broker_pid"]), bb.system_cpu()[0]
    c.close()
    return {"records": got, "errors": len(errors), "first_error": errors[0] if errors else None,
            "elapsed_s": t1 - t0, "cpu_s": cpu1 - cpu0, "broker_cpu_s": brk1 - brk0,
            "busy_cores": (busy1 - busy0) / (t1 - t0), "timed_out": got < n}


def worker_main(kind: str, cfg_json: str) -> None:
    cfg = json.loads(cfg_json)
    out = ck_produce(cfg) if kind == "produce" else ck_consume(cfg)
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------- running one client process


def last_json_line(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run_client(cmd: list[str], broker: bb.Broker, time_limit: float) -> dict:
    """Run one client process to completion (or its timeout); its JSON plus broker and machine CPU around it."""
    busy0, _ = bb.system_cpu()
    brk0 = bb.proc_cpu_s(broker.pid)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit + 30)
        out = last_json_line(p.stdout) or {}
        if p.returncode != 0 or not out:
            out["failure"] = f"exit {p.returncode}: {p.stderr.strip()[-500:]}"
    except subprocess.TimeoutExpired:
        out = {"failure": f"killed after {time_limit + 30:.0f} s", "timed_out": True}
    wall = time.monotonic() - t0
    out["process_wall_s"] = wall
    out.setdefault("busy_cores", (bb.system_cpu()[0] - busy0) / wall)
    out.setdefault("broker_cpu_s", bb.proc_cpu_s(broker.pid) - brk0)
    return out


def log_end_offset(bootstrap: str, topic: str) -> int | None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "client-bench-offsets", "log_level": 3})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    except Exception:  # noqa: BLE001 - reported as unknown, the bench goes on
        return None
    finally:
        c.close()


def create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in names], operation_timeout=15).values():
        fut.result(timeout=20)
    deadline = time.monotonic() + 15
    while True:
        topics = admin.list_topics(timeout=10).topics
        if all(t in topics and topics[t].error is None and len(topics[t].partitions) == 1 for t in names):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics {names} never showed up in metadata")
        time.sleep(0.05)


# ---------------------------------------------------------------- the runs of one cell


def row(tool: str, phase: str, out: dict, cell: Cell, note: str = "") -> dict:
    """One table row from a client's output, in common units."""
    records = out.get("records", 0)
    secs = out.get("elapsed_s") or float("nan")
    payload_gb = records * cell.record_size / 1e9
    per_gb = lambda s: s / payload_gb if payload_gb else float("nan")  # noqa: E731
    r = {"tool": tool, "phase": phase, "note": note, "records": records, "elapsed_s": secs,
         "records_per_sec": records / secs, "mib_per_sec": records * cell.record_size / MIB / secs,
         "latency_p99_ms": out.get("latency_p99_ms"), "client_cpu_s": out.get("cpu_s"),
         "client_cpu_s_per_gb": per_gb(out["cpu_s"]) if out.get("cpu_s") is not None else None,
         "broker_cpu_s": out["broker_cpu_s"], "broker_cpu_s_per_gb": per_gb(out["broker_cpu_s"]),
         "busy_cores": out["busy_cores"], "raw": out}
    return r


def strom_produce(args, broker: bb.Broker, cell: Cell) -> dict:
    props = [f"acks={cell.acks}", f"linger.ms={LINGER_MS}", f"batch.size={cell.batch_size}",
             f"compression.type={cell.compression}"]
    if args.idempotence != "auto":
        props.append(f"enable.idempotence={args.idempotence}")
    cmd = [str(args.binary), "perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", STROM_TOPIC,
           "--num-records", str(cell.records), "--record-size", str(cell.record_size), "--throughput", "-1",
           "--producer-props", *props, "--format", "json"]
    out = run_client(cmd, broker, args.time_limit)
    if "failed" in out:
        out["errors"] = out["failed"]
    return out


def strom_consume(args, broker: bb.Broker, cell: Cell, fetch_size: int | None) -> dict:
    cmd = [str(args.binary), "perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", STROM_TOPIC,
           "--messages", str(cell.records), "--format", "json"]
    if fetch_size:
        cmd += ["--fetch-size", str(fetch_size)]
    out = run_client(cmd, broker, args.time_limit)
    if out.get("fetch_records_per_sec"):  # throughput without the group join, to compare with assign()
        out["end_to_end_elapsed_s"] = out["elapsed_s"]
        out["elapsed_s"] = out["records"] / out["fetch_records_per_sec"]
    return out


def ck_run(args, broker: bb.Broker, cell: Cell, kind: str) -> dict:
    common = {"bootstrap.servers": broker.bootstrap, "log_level": 3}
    if kind == "produce":
        conf = {**common, "acks": cell.acks, "linger.ms": LINGER_MS, "batch.size": cell.batch_size,
                "compression.type": cell.compression, "enable.idempotence": idempotent(cell.acks, args.idempotence)}
    else:
        # librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (1000 ms by default) whenever
        # its local queue is full, which a Python consume() loop hits constantly: 1 KiB runs read ~90 MiB/s
        # instead of ~360.
        conf = {**common, "group.id": "client-bench-ck", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "fetch.queue.backoff.ms": 10}
    cfg = {"conf": conf, "topic": CK_TOPIC, "records": cell.records, "record_size": cell.record_size,
           "sample_every": args.sample_every, "broker_pid": broker.pid, "time_limit": args.time_limit}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, json.dumps(cfg)]
    return run_client(cmd, broker, args.time_limit)


def check_produced(broker: bb.Broker, topic: str, cell: Cell, out: dict) -> None:
    end = log_end_offset(broker.bootstrap, topic)
    out["log_end_offset"] = end
    if end != cell.records:
        out.setdefault("anomaly", f"log end offset {end}, expected {cell.records}")


def cell_runs(args, broker: bb.Broker, cell: Cell, rows: list[dict]) -> None:
    create_topics(broker.bootstrap, [STROM_TOPIC] if cell.strom_produce_only else [STROM_TOPIC, CK_TOPIC, WARMUP_TOPIC])
    out = strom_produce(args, broker, cell)
    check_produced(broker, STROM_TOPIC, cell, out)
    rows.append(row("strom", "produce", out, cell))
    if cell.strom_produce_only:
        return
    for fetch in (None, BIG_FETCH):
        out = strom_consume(args, broker, cell, fetch)
        join = f"join {out['rebalance_ms']} ms" if "rebalance_ms" in out else ""
        rows.append(row("strom", "consume", out, cell, f"{join}{', fetch 4 MiB' if fetch else ''}"))
    out = ck_run(args, broker, cell, "produce")
    check_produced(broker, CK_TOPIC, cell, out)
    rows.append(row("ck", "produce", out, cell))
    rows.append(row("ck", "consume", ck_run(args, broker, cell, "consume"), cell))


def run_cell(args, root: Path, cell: Cell) -> dict:
    """The runs of one cell on a fresh broker; a failure is recorded and the bench goes on."""
    d = Path(tempfile.mkdtemp(prefix="cell-", dir=root))
    broker = bb.Broker(args.binary, d / "data", ["group.initial.rebalance.delay.ms=0", *args.override],
                       d / "broker.log")
    result = {"cell": cell.__dict__, "rows": [], "background_busy_cores": bb.wait_quiet(args.wait_quiet)}
    try:
        broker.start()
        cell_runs(args, broker, cell, result["rows"])
    except Exception as e:  # noqa: BLE001 - reported with the cell
        result["error"] = repr(e)
    finally:
        result["broker_memory_mb"] = bb.proc_mem_mb(broker.pid) if broker.alive() else None
        if broker.alive():
            broker.stop()
        broker.kill()
        if args.keep:
            result["data_dir"] = str(d)
        else:
            shutil.rmtree(d, ignore_errors=True)
    return result


def cells(args) -> list[Cell]:
    out = []
    for size in args.record_size:
        n = max(1, round(BASE_RECORDS.get(size, 1e9 / size) * args.scale))
        out += [Cell(size, acks, comp, BIG_BATCH, n) for acks in args.acks for comp in args.compression]
        if args.default_batch_row:
            out.append(Cell(size, "1", "none", KAFKA_DEFAULT_BATCH, n, strom_produce_only=True))
    return out


# ---------------------------------------------------------------- output


def fmt(x, spec: str, width: int) -> str:
    return f"{x:{width}{spec}}" if isinstance(x, (int, float)) and x == x else f"{'-':>{width}}"


def print_table(result: dict) -> None:
    env = result["env"]
    print(f"\nStrom client bench  {env['binary']} (built {env['binary_mtime']}), confluent-kafka {env['confluent_kafka']} "
          f"/ librdkafka {env['librdkafka']}; {env['ncpu']} CPUs; load before {env['loadavg_before']}, after {env['loadavg_after']}")
    print("one partition, linger.ms=5; MiB/s of record values; CPU s per GB (1e9 B) of payload; "
          "broker s/GB is per GB in for produce, out for consume; busy = machine-wide busy cores")
    hdr = (f"{'size':>5} {'acks':>4} {'codec':5} {'batch':>7} {'tool':5} {'phase':7} {'records':>8} {'rec/s':>10} "
           f"{'MiB/s':>7} {'p99 ms':>7} {'cli s/GB':>8} {'brk s/GB':>8} {'busy':>5}  note")
    print(hdr)
    print("-" * len(hdr))
    for c in result["cells"]:
        cell = c["cell"]
        for r in c["rows"]:
            raw = r["raw"]
            note = "; ".join(x for x in (r["note"], raw.get("failure"), raw.get("anomaly"),
                                         "TIMED OUT" if raw.get("timed_out") else "",
                                         f"{raw['errors']} errors" if raw.get("errors") else "") if x)
            print(f"{cell['record_size']:>5} {cell['acks']:>4} {cell['compression']:5} {cell['batch_size']:>7} "
                  f"{r['tool']:5} {r['phase']:7} {r['records']:>8} {fmt(r['records_per_sec'], '.0f', 10)} "
                  f"{fmt(r['mib_per_sec'], '.1f', 7)} {fmt(r['latency_p99_ms'], '.1f', 7)} "
                  f"{fmt(r['client_cpu_s_per_gb'], '.2f', 8)} {fmt(r['broker_cpu_s_per_gb'], '.3f', 8)} "
                  f"{fmt(r['busy_cores'], '.2f', 5)}  {note}")
        if c.get("error"):
            print(f"      ERROR: {c['error']}")
        if c["background_busy_cores"] > 0.2:
            print(f"      WARNING: {c['background_busy_cores']:.2f} cores busy with other work before this cell")
        print()


# ---------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", type=Path, default=Path(os.environ.get("STROM_BIN", REPO_ROOT / "target/release/strom")))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the record counts (1e6 x 1 KiB, 3e6 x 100 B)")
    ap.add_argument("--record-size", type=int, nargs="+", default=[1024, 100])
    ap.add_argument("--acks", nargs="+", default=["1", "-1"])
    ap.add_argument("--compression", nargs="+", default=["none", "lz4"])
    ap.add_argument("--no-default-batch-row", dest="default_batch_row", action="store_false",
                    help="skip the strom perf produce row with batch.size=16384")
    ap.add_argument("--idempotence", choices=["auto", "true", "false"], default="auto",
                    help="auto: Kafka's default (on for acks=-1); true/false: set on both clients")
    ap.add_argument("--sample-every", type=int, default=10, help="confluent-kafka: latency of every Nth record")
    ap.add_argument("--time-limit", type=float, default=300, help="seconds per client run (it is killed 30 s later)")
    ap.add_argument("--wait-quiet", type=float, default=10.0, metavar="S",
                    help="before each cell wait up to S seconds for other CPU load to go away")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker --override")
    ap.add_argument("--data-root", type=Path, default=None, help="where temp data dirs go (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--save", type=Path, metavar="FILE", help="also write the JSON result to FILE")
    args = ap.parse_args()
    if not args.binary.is_file():
        sys.exit(f"strom binary not found at {args.binary}: build it or set STROM_BIN / --binary")

    import confluent_kafka

    root = Path(tempfile.mkdtemp(prefix="strom-client-bench-", dir=args.data_root))
    # A private copy, so a rebuild of target/release during the bench cannot mix two binaries.
    source = args.binary
    args.binary = root / "strom"
    shutil.copy2(source, args.binary)
    result = {
        "env": {"binary": str(source),
                "binary_mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(source.stat().st_mtime)),
                "ncpu": bb.NCPU, "loadavg_before": bb.loadavg(), "confluent_kafka": confluent_kafka.version()[0],
                "librdkafka": confluent_kafka.libversion()[0]},
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "binary"},
        "cells": [],
    }
    try:
        for cell in cells(args):
            if not args.json:
                print(f"... {cell.label}, {cell.records} records", file=sys.stderr, flush=True)
            result["cells"].append(run_cell(args, root, cell))
    finally:
        result["env"]["loadavg_after"] = bb.loadavg()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.save:
        args.save.write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
