#!/usr/bin/env python3
"""Benchmark of the Strom broker process itself: start-up, memory, and the
throughput and CPU cost of produce and consume, driven by real Kafka clients.

This is a benchmark, not a test: it asserts nothing and reports numbers, next
to the targets below. What it measures, per run:

* start-up: spawn of `strom server` (fresh data dir) to the first accepted TCP
  connection (tight connect loop with a deadline) and to the first ApiVersions
  response; repeated, min/median reported. Also clean shutdown (SIGTERM to
  exit) and a restart on the run's full data dir (log recovery).
* broker RSS (VmRSS, plus anon/file split and peak VmHWM) idle after start,
  after the produce phase and after the consume phase.
* produce: a topic (6 partitions by default) is created with the AdminClient,
  then N bytes of R-byte records (payload bytes; one pre-generated random
  value) are produced with acks=1 by several confluent-kafka producer
  processes tuned for throughput. Reported: MB/s and records/s (from the start
  signal until every record is acknowledged), broker CPU s per GB in
  (utime+stime from /proc/PID/stat), RSS after.
* consume: everything is read back from offset 0 (page cache warm) by
  confluent-kafka consumers using assign() with OFFSET_BEGINNING (no group
  protocol is used; the group.id is a dummy), several processes each taking a
  subset of partitions. Same figures, per GB out.
* the driver: CPU seconds of all client processes (getrusage, so librdkafka's
  threads count) and machine-wide busy CPU from /proc/stat, to tell whether the
  broker or the driver sharing the box was the bottleneck.

Client defaults were tuned on a 2-core box where the clients share the CPUs
with the broker: 2 producer processes using Producer.produce_batch (about half
the driver CPU per record of produce()), linger.ms=20, batch.size=1 MB, no
compression; 2 consumer processes. Broker CPU comes from /proc in clock ticks
(10 ms), so give a phase enough bytes for the figure to mean something. A
build running alongside skews everything: the machine's busy cores are
sampled before each phase and a warning printed (--wait-quiet S waits for
quiet first).

Every phase is bounded by record count and by --time-limit, so the bench
always stops. With --perf DIR the broker is profiled (`perf record -g`) during
produce and consume, and the top symbols are printed; perf steals CPU, so use
the throughput numbers of a run without --perf.

Run (from the repo root, with the release binary built):

    .venv/bin/python bench/broker_bench.py --bytes 1e9 --record-size 1024
    .venv/bin/python bench/broker_bench.py --bytes 1e9 2e8 --record-size 1024 100
    .venv/bin/python bench/broker_bench.py --bytes 2e8 --record-size 100 --producers 3 --json
    .venv/bin/python bench/broker_bench.py --bytes 5e8 --perf /tmp/strom-perf --startup-runs 0

`--compare-copy` reads the data a second time from a broker restarted with
`fetch.zero.copy.enable=false`, for zero-copy against copying in one run.

`--bytes` and `--record-size` take one value or several (paired up; a single
value is reused); each pair is one run on a fresh broker. `--override KEY=VALUE`
is passed through to every broker start.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
START_DEADLINE_S = 10.0
WAIT_QUIET_S = 0.0  # set from --wait-quiet
STOP_DEADLINE_S = 30.0
TOPIC = "bench"

# Targets: (metric key, limit, unit, description). All are upper bounds.
TARGETS = {
    "startup_ms": (50.0, "ms", "start-up (spawn -> first accepted connection)"),
    "rss_idle_mb": (20.0, "MB", "RSS idle after start"),
    "rss_after_produce_mb": (100.0, "MB", "RSS after 1 GB produced"),
    "produce_cpu_s_per_gb": (0.5, "s/GB", "broker CPU per GB produced (acks=1, 1 KiB)"),
    "consume_cpu_s_per_gb": (0.2, "s/GB", "broker CPU per GB consumed (page cache)"),
}


# ---------------------------------------------------------------- /proc


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_mem_mb(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile in MB (10^6 bytes)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(rest.split()[0]) * 1024 / 1e6
    return out


def proc_threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def system_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds over all CPUs since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    idle = fields[3] + fields[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


def background_busy(window_s: float = 0.5) -> float:
    """CPU cores busy over a short window, while the bench itself is idle."""
    b0, _ = system_cpu()
    time.sleep(window_s)
    return (system_cpu()[0] - b0) / window_s


def wait_quiet(max_wait_s: float, threshold: float = 0.15) -> float:
    """Wait up to max_wait_s for the machine to go quiet; returns the last busy reading (cores)."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy = background_busy()
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        time.sleep(0.5)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def log_segment_bytes(path: Path) -> int:
    """Bytes in the partitions' .log segment files (indexes are preallocated, so not counted)."""
    return sum(f.stat().st_size for f in path.rglob("*.log") if f.is_file() and "__cluster_metadata" not in str(f))


# ---------------------------------------------------------------- broker process


def free_port() -> int:
    """A free loopback port below the ephemeral range (so no client can be using it as a source port)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    import random

    for port in random.sample(range(max(1024, low // 2), low), 50) + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free loopback port")


def api_versions_roundtrip(sock: socket.socket, deadline: float) -> None:
    """Send ApiVersions v0 and read the whole response: the broker is serving requests."""
    client_id = b"strom-bench"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(body)) + body)
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("broker closed the connection during ApiVersions")
        buf += chunk


class Broker:
    """One `strom server` on a loopback port with its own data dir."""

    def __init__(self, binary: Path, data_dir: Path, overrides: list[str], log_path: Path):
        self.binary = binary
        self.data_dir = data_dir
        self.port = free_port()
        self.overrides = overrides
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [str(self.binary), "server"]
        for kv in [f"listeners=PLAINTEXT://127.0.0.1:{self.port}", f"log.dirs={self.data_dir}", *self.overrides]:
            cmd += ["--override", kv]
        return cmd

    def start(self) -> dict[str, float]:
        """Spawn and poll-connect in a tight loop; returns ms to first connect and to first ApiVersions reply."""
        addr = ("127.0.0.1", self.port)
        cmd = self.command()
        log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.connect(addr)
                break
            except OSError:
                sock.close()
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.kill()
                    raise RuntimeError(f"broker did not come up; see {self.log_path}")
        t_connect = time.perf_counter()
        try:
            api_versions_roundtrip(sock, deadline)
        finally:
            sock.close()
        t_served = time.perf_counter()
        return {"connect_ms": (t_connect - t0) * 1e3, "api_versions_ms": (t_served - t0) * 1e3}

    def stop(self) -> float:
        """SIGTERM and wait; returns ms to exit (killed after STOP_DEADLINE_S)."""
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            print(f"warning: broker ignored SIGTERM for {STOP_DEADLINE_S}s and was killed", file=sys.stderr)
            return float("nan")
        if code != 0:
            print(f"warning: broker exited with {code} on SIGTERM; see {self.log_path}", file=sys.stderr)
        return (time.perf_counter() - t0) * 1e3

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# ---------------------------------------------------------------- client workers (own processes)


def _rusage_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def produce_worker(cfg: dict, ready, start, results) -> None:
    """Produce cfg['plan'] = [(partition, count), ...] records of one pre-built payload."""
    from confluent_kafka import Producer

    errors = {"count": 0, "first": None}

    def on_delivery(err, msg):  # only called for failures (delivery.report.only.error)
        if err is not None:
            errors["count"] += 1
            errors["first"] = errors["first"] or str(err)

    p = Producer({**cfg["conf"], "on_delivery": on_delivery, "delivery.report.only.error": True})
    p.list_topics(cfg["topic"], timeout=10)  # connect and learn leaders before the clock starts
    payload = os.urandom(cfg["record_size"])
    topic, produce, produce_batch, poll = cfg["topic"], p.produce, p.produce_batch, p.poll
    chunk = cfg["chunk"]
    # The message dicts for produce_batch are built once and reused for every call.
    batch_msgs = [{"value": payload} for _ in range(chunk)] if cfg["api"] == "batch" else None
    plan = [list(x) for x in cfg["plan"]]  # [partition, remaining]
    ready.put(os.getpid())
    start.wait()
    deadline = time.monotonic() + cfg["time_limit"]
    cpu0, t0 = _rusage_s(), time.monotonic()
    sent = 0
    timed_out = False

    def send_batch(partition: int, n: int) -> int:
        """produce_batch n records; a full queue fails the tail with '_error', which is retried."""
        msgs = batch_msgs if n == chunk else batch_msgs[:n]
        queued = produce_batch(topic, msgs, partition=partition)
        while queued < n:
            failed = [m for m in msgs if m.pop("_error", None) is not None]
            poll(0.001)
            if time.monotonic() > deadline:
                return n - len(failed)
            queued += produce_batch(topic, failed, partition=partition)
            msgs = failed
        return n

    def send_single(partition: int, n: int) -> int:
        i = 0
        while i < n:
            try:
                produce(topic, payload, partition=partition)
                i += 1
            except BufferError:
                poll(0.001)
                if time.monotonic() > deadline:
                    break
        return i

    send = send_batch if batch_msgs is not None else send_single
    # Round-robin over this worker's partitions, a batch-sized chunk at a time.
    while plan and not timed_out:
        for item in list(plan):
            n = min(chunk, item[1])
            i = send(item[0], n)
            sent += i
            item[1] -= i
            if item[1] == 0:
                plan.remove(item)
            poll(0)
            if i < n or time.monotonic() > deadline:
                timed_out = True
                break
    remaining = p.flush(max(0.1, deadline - time.monotonic()))
    t1, cpu1 = time.monotonic(), _rusage_s()
    if remaining:
        p.purge()
        p.flush(1)
    results.put(
        {
            "kind": "produce",
            "t0": t0,
            "t1": t1,
            "cpu_s": cpu1 - cpu0,
            "sent": sent,
            "unacked": remaining,
            "errors": errors["count"],
            "first_error": errors["first"],
            "timed_out": timed_out or remaining > 0,
        }
    )


def consume_worker(cfg: dict, ready, start, results) -> None:
    """Read cfg['ends'] = {partition: end_offset} from offset 0 with assign()."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

    c = Consumer(cfg["conf"])
    c.list_topics(cfg["topic"], timeout=10)
    expected = sum(cfg["ends"].values())
    ready.put(os.getpid())
    start.wait()
    deadline = time.monotonic() + cfg["time_limit"]
    cpu0, t0 = _rusage_s(), time.monotonic()
    c.assign([TopicPartition(cfg["topic"], p, OFFSET_BEGINNING) for p in cfg["ends"]])
    got = 0
    errors: dict[str, int] = {}
    get_error = Message.error
    consume, batch = c.consume, cfg["batch"]
    while got < expected and time.monotonic() < deadline:
        msgs = consume(batch, 0.2)
        bad = list(filter(None, map(get_error, msgs)))  # C-level scan; errors are rare
        got += len(msgs) - len(bad)
        for err in bad:
            errors[str(err)] = errors.get(str(err), 0) + 1
    t1, cpu1 = time.monotonic(), _rusage_s()
    c.close()
    results.put(
        {
            "kind": "consume",
            "t0": t0,
            "t1": t1,
            "cpu_s": cpu1 - cpu0,
            "got": got,
            "expected": expected,
            "errors": errors,
            "timed_out": got < expected,
        }
    )


# ---------------------------------------------------------------- phases


class Perf:
    """`perf record -g -p PID` for one phase; report written next to the data."""

    def __init__(self, out_dir: Path | None, pid: int, phase: str, freq: int):
        self.proc = None
        if out_dir is None:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self.data = out_dir / f"{phase}.perf.data"
        self.report = out_dir / f"{phase}.report.txt"
        self.proc = subprocess.Popen(
            ["perf", "record", "-F", str(freq), "-g", "-p", str(pid), "-o", str(self.data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)  # let perf attach before the phase starts

    def finish(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

        def report(*extra: str) -> str:
            cmd = ["perf", "report", "-i", str(self.data), "--stdio", *extra]
            return subprocess.run(cmd, capture_output=True, text=True).stdout

        flat = report("--no-children", "-g", "none", "--percent-limit", "0.5", "--sort", "dso,symbol")
        dsos = report("--no-children", "-g", "none", "--sort", "dso")
        graph = report("--children", "--percent-limit", "2")
        self.report.write_text(flat + "\n\n==== by dso ====\n" + dsos + "\n\n==== with children, call graphs ====\n" + graph)

        def rows(text: str) -> list[str]:
            # Drop comments and perf's trailing empty IPC columns ("-  -").
            return [re.sub(r"(\s+-)+\s*$", "", ln).rstrip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]

        samples = re.search(r"# Samples: (\S+)", flat)
        return {
            "samples": samples.group(1) if samples else "?",
            "dsos": rows(dsos),
            "symbols": rows(flat),
            "report_file": str(self.report),
        }


def run_workers(target, cfgs: list[dict], time_limit: float, broker: Broker, perf: Perf | None) -> dict:
    """Start worker processes, wait until all are connected, then time the phase.

    Returns wall time (start signal to last worker done), broker CPU, driver CPU, machine CPU.
    """
    ctx = mp.get_context("spawn")  # no fork of a process holding librdkafka threads
    ready, results, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(cfg, ready, start, results), daemon=True) for cfg in cfgs]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=60)
        time.sleep(0.2)  # let clients' connection set-up settle
        background = wait_quiet(WAIT_QUIET_S)
        perf_run = perf() if perf else None
        cpu_b0 = proc_cpu_s(broker.pid)
        sys_b0, sys_t0 = system_cpu()
        t0 = time.monotonic()
        start.set()
        outs = []
        deadline = t0 + time_limit + 60
        while len(outs) < len(procs):
            outs.append(results.get(timeout=max(1.0, deadline - time.monotonic())))
        t1 = max(o["t1"] for o in outs)
        cpu_b1 = proc_cpu_s(broker.pid)
        sys_b1, sys_t1 = system_cpu()
        profile = perf_run.finish() if perf_run else None
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
                p.join(5)
    wall = t1 - t0
    return {
        "wall_s": wall,
        "broker_cpu_s": cpu_b1 - cpu_b0,
        "driver_cpu_s": sum(o["cpu_s"] for o in outs),
        "machine_busy_s": sys_b1 - sys_b0,
        "machine_total_s": sys_t1 - sys_t0,
        "workers": outs,
        "profile": profile,
        "background_busy_cores": background,
    }


def summarize(kind: str, raw: dict, records: int, record_size: int, broker: Broker) -> dict:
    wall = raw["wall_s"]
    payload = records * record_size
    broker_cores = raw["broker_cpu_s"] / wall
    driver_cores = raw["driver_cpu_s"] / wall
    busy_cores = raw["machine_busy_s"] / wall
    other_cores = max(0.0, busy_cores - broker_cores - driver_cores)
    # A heuristic: on a saturated machine the side using more CPU is what limits throughput.
    if busy_cores >= 0.85 * NCPU:
        bound = "driver-bound" if driver_cores > broker_cores else "broker-bound"
        verdict = (f"{bound}: CPU saturated ({busy_cores:.2f}/{NCPU} cores busy; "
                   f"driver {driver_cores:.2f}, broker {broker_cores:.2f} cores)")
    else:
        verdict = (f"CPU not saturated ({busy_cores:.2f}/{NCPU} cores busy; driver {driver_cores:.2f}, "
                   f"broker {broker_cores:.2f}): limited by latency or pipelining, not CPU")
    out = {
        "records": records,
        "payload_bytes": payload,
        "wall_s": wall,
        "mb_per_s": payload / 1e6 / wall,
        "records_per_s": records / wall,
        "broker_cpu_s": raw["broker_cpu_s"],
        "broker_cpu_s_per_gb": raw["broker_cpu_s"] / (payload / 1e9) if payload else float("nan"),
        "broker_cores": broker_cores,
        # What one core of broker CPU could carry at this cost per byte (ignores everything but CPU).
        "broker_mb_per_s_per_core": payload / 1e6 / raw["broker_cpu_s"] if raw["broker_cpu_s"] else float("inf"),
        "driver_cpu_s": raw["driver_cpu_s"],
        "driver_cores": driver_cores,
        "machine_busy_cores": busy_cores,
        "other_cores": other_cores,
        "verdict": verdict,
        "memory_mb": proc_mem_mb(broker.pid),
        "broker_threads": proc_threads(broker.pid),
        "timed_out": any(w["timed_out"] for w in raw["workers"]),
        "background_busy_cores": raw["background_busy_cores"],
        "profile": raw["profile"],
    }
    if kind == "produce":
        out["errors"] = sum(w["errors"] for w in raw["workers"])
        out["first_error"] = next((w["first_error"] for w in raw["workers"] if w["first_error"]), None)
    else:
        errs: dict[str, int] = {}
        for w in raw["workers"]:
            for k, v in w["errors"].items():
                errs[k] = errs.get(k, 0) + v
        out["errors"] = errs
    return out


def create_topic(bootstrap: str, partitions: int, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(TOPIC, partitions, 1, config=configs)], operation_timeout=15, request_timeout=15)
    fut[TOPIC].result(timeout=20)
    deadline = time.monotonic() + 15
    while True:
        t = admin.list_topics(timeout=10).topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("topic partitions never showed up in metadata")
        time.sleep(0.05)


def end_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"strom-bench-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1] for p in range(partitions)}
    finally:
        c.close()


def split(items: list, n: int) -> list[list]:
    return [items[i::n] for i in range(n) if items[i::n]]


def produce_phase(args, broker: Broker, record_size: int, total_bytes: float, perf_dir: Path | None) -> dict:
    records = max(1, int(total_bytes // record_size))
    parts = list(range(args.partitions))
    # Per-partition record counts, as even as possible.
    per_part = {p: records // len(parts) + (1 if p < records % len(parts) else 0) for p in parts}
    if args.producers <= len(parts):
        plans = [[(p, per_part[p]) for p in group] for group in split(parts, args.producers)]
    else:  # more producers than partitions: every producer writes every partition
        plans = [[(p, per_part[p] // args.producers + (1 if i < per_part[p] % args.producers else 0)) for p in parts]
                 for i in range(args.producers)]
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "acks": args.acks,
        "enable.idempotence": False,  # Strom has no InitProducerId yet
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "batch.num.messages": 1_000_000,
        "compression.type": "none",
        "queue.buffering.max.kbytes": args.queue_kbytes,
        "queue.buffering.max.messages": 10_000_000,
        "message.timeout.ms": int(args.time_limit * 1000) + 30_000,
        **dict(kv.split("=", 1) for kv in args.producer_conf),
    }
    chunk = max(1, args.batch_size // (record_size + 20))
    cfgs = [
        {"conf": conf, "topic": TOPIC, "record_size": record_size, "plan": plan, "chunk": chunk,
         "time_limit": args.time_limit, "api": args.produce_api}
        for plan in plans
    ]
    perf = (lambda: Perf(perf_dir, broker.pid, f"produce-{record_size}B", args.perf_freq)) if perf_dir else None
    raw = run_workers(produce_worker, cfgs, args.time_limit, broker, perf)
    acked = sum(w["sent"] - w["unacked"] - w["errors"] for w in raw["workers"])
    out = summarize("produce", raw, acked, record_size, broker)
    out["producers"] = len(cfgs)
    out["requested_records"] = records
    return out


def consume_phase(args, broker: Broker, record_size: int, perf_dir: Path | None) -> dict:
    ends = end_offsets(broker.bootstrap, args.partitions)
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": f"strom-bench-{uuid.uuid4().hex}",  # dummy: assign() only, nothing committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": args.fetch_max_bytes,
        "max.partition.fetch.bytes": args.partition_fetch_bytes,
        "receive.message.max.bytes": args.fetch_max_bytes + 1_000_000,
        "fetch.wait.max.ms": args.fetch_wait_ms,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": args.queued_kbytes,
        "queued.min.messages": 1_000_000,
        "check.crcs": False,
        "log_level": 3,  # the broker has no group coordinator; keep librdkafka's complaints quiet
        **dict(kv.split("=", 1) for kv in args.consumer_conf),
    }
    groups = split(sorted(ends), min(args.consumers, len(ends)))
    cfgs = [
        {"conf": conf, "topic": TOPIC, "ends": {p: ends[p] for p in g}, "batch": args.consume_batch,
         "time_limit": args.time_limit}
        for g in groups
    ]
    perf = (lambda: Perf(perf_dir, broker.pid, f"consume-{record_size}B", args.perf_freq)) if perf_dir else None
    raw = run_workers(consume_worker, cfgs, args.time_limit, broker, perf)
    got = sum(w["got"] for w in raw["workers"])
    out = summarize("consume", raw, got, record_size, broker)
    out["consumers"] = len(cfgs)
    out["expected_records"] = sum(ends.values())
    return out


def measure_startup(args, root: Path) -> dict:
    runs = []
    background = wait_quiet(WAIT_QUIET_S) if args.startup_runs else 0.0
    for i in range(args.startup_runs):
        d = root / f"startup-{i}"
        d.mkdir()
        b = Broker(args.binary, d / "data", args.override, d / "broker.log")
        t = b.start()
        t["rss_mb"] = proc_mem_mb(b.pid)["VmRSS"]
        t["stop_ms"] = b.stop()
        runs.append(t)
        shutil.rmtree(d, ignore_errors=True)
    if not runs:
        return {}
    col = lambda k: [r[k] for r in runs]  # noqa: E731
    return {
        "runs": len(runs),
        "connect_ms_min": min(col("connect_ms")),
        "connect_ms_median": statistics.median(col("connect_ms")),
        "api_versions_ms_min": min(col("api_versions_ms")),
        "api_versions_ms_median": statistics.median(col("api_versions_ms")),
        "stop_ms_median": statistics.median(col("stop_ms")),
        "rss_mb_median": statistics.median(col("rss_mb")),
        "background_busy_cores": background,
    }


def bench_run(args, root: Path, record_size: int, total_bytes: float) -> dict:
    d = root / f"run-{record_size}B"
    d.mkdir()
    b = Broker(args.binary, d / "data", args.override, d / "broker.log")
    run: dict = {"record_size": record_size, "target_bytes": total_bytes, "broker_log": str(d / "broker.log")}
    try:
        run["start"] = b.start()
        time.sleep(args.idle_settle)
        run["idle"] = {"memory_mb": proc_mem_mb(b.pid), "threads": proc_threads(b.pid)}
        create_topic(b.bootstrap, args.partitions, dict(kv.split("=", 1) for kv in args.topic_config))
        run["produce"] = produce_phase(args, b, record_size, total_bytes, args.perf)
        run["log_bytes_on_disk"] = log_segment_bytes(b.data_dir)
        if not args.skip_consume:
            run["consume"] = consume_phase(args, b, record_size, args.perf)
        run["stop_ms"] = b.stop()
        if args.compare_copy and not args.skip_consume:
            # The same read on the same data, through a userspace copy instead of sendfile.
            b.overrides = [*args.override, "fetch.zero.copy.enable=false"]
            b.start()
            run["consume_copying"] = consume_phase(args, b, record_size, None)
            b.stop()
            b.overrides = args.override
        if args.restart:
            r = b.start()
            r["rss_mb"] = proc_mem_mb(b.pid)["VmRSS"]
            r["stop_ms"] = b.stop()
            run["restart_with_data"] = r
    finally:
        b.kill()
        if not args.keep:
            shutil.rmtree(d / "data", ignore_errors=True)
    return run


# ---------------------------------------------------------------- output


def verdict(value: float, key: str) -> str:
    limit, unit, _ = TARGETS[key]
    return f"target <= {limit:g} {unit}: {'ok' if value <= limit else 'MISS'}"


def print_report(result: dict) -> None:
    env = result["env"]
    print(f"\nStrom broker bench  {env['binary']} (built {env['binary_mtime']})  ({env['ncpu']} CPUs, load before: {env['loadavg_before']}, busy before: {env['background_busy_cores']:.2f} cores)")
    s = result["startup"]
    if s:
        print(f"\nstart-up ({s['runs']} runs, fresh data dir)")
        print(f"  spawn -> first accepted connection  min {s['connect_ms_min']:7.2f} ms  median {s['connect_ms_median']:7.2f} ms   "
              + verdict(s["connect_ms_median"], "startup_ms"))
        print(f"  spawn -> first ApiVersions reply    min {s['api_versions_ms_min']:7.2f} ms  median {s['api_versions_ms_median']:7.2f} ms")
        print(f"  clean shutdown (SIGTERM -> exit)    median {s['stop_ms_median']:7.2f} ms;  RSS at first reply median {s['rss_mb_median']:.1f} MB")
        if s["background_busy_cores"] > 0.2:
            print(f"  WARNING {s['background_busy_cores']:.2f} cores were busy with other work before these runs")
    for run in result["runs"]:
        R = run["record_size"]
        idle = run["idle"]["memory_mb"]
        print(f"\nrun: {R} B records, {run['target_bytes'] / 1e6:.0f} MB target, {result['config']['partitions']} partitions, acks={result['config']['acks']}")
        print(f"  RSS idle after start   {idle['VmRSS']:7.1f} MB (anon {idle['RssAnon']:.1f}, file {idle['RssFile']:.1f}), "
              f"{run['idle']['threads']} threads   " + verdict(idle["VmRSS"], "rss_idle_mb"))
        hdr = f"  {'phase':8} {'MB/s':>8} {'rec/s':>10} {'wall s':>7} {'brk CPU s':>9} {'brk s/GB':>8} {'brk cores':>9} {'drv cores':>9} {'other':>6} {'RSS MB':>7} {'HWM MB':>7}"
        print(hdr)
        for kind in ("produce", "consume", "consume_copying"):
            ph = run.get(kind)
            if not ph:
                continue
            m = ph["memory_mb"]
            print(f"  {kind:8} {ph['mb_per_s']:8.1f} {ph['records_per_s']:10.0f} {ph['wall_s']:7.2f} {ph['broker_cpu_s']:9.2f} "
                  f"{ph['broker_cpu_s_per_gb']:8.3f} {ph['broker_cores']:9.2f} {ph['driver_cores']:9.2f} {ph['other_cores']:6.2f} "
                  f"{m['VmRSS']:7.1f} {m['VmHWM']:7.1f}")
        for kind in ("produce", "consume"):
            ph = run.get(kind)
            if not ph:
                continue
            clients = ph.get("producers") or ph.get("consumers")
            print(f"  {kind}: {ph['records']} records by {clients} client processes; driver CPU {ph['driver_cpu_s']:.2f} s; "
                  f"{ph['verdict']}; the broker's cost is {ph['broker_mb_per_s_per_core']:.0f} MB/s per core")
            if ph["background_busy_cores"] > 0.2:
                print(f"  {kind}: WARNING {ph['background_busy_cores']:.2f} cores were busy with other work just before this phase")
            if ph["timed_out"]:
                print(f"  {kind}: WARNING hit the time limit; numbers cover what completed")
            if ph["errors"]:
                print(f"  {kind}: errors: {ph['errors']} {ph.get('first_error') or ''}")
        p = run.get("produce")
        if p:
            key = "produce_cpu_s_per_gb"
            print(f"  produce broker CPU {p['broker_cpu_s_per_gb']:.3f} s/GB   {verdict(p['broker_cpu_s_per_gb'], key)}"
                  + ("" if R == 1024 else "  (target is for 1 KiB records)"))
            print(f"  RSS after produce {p['memory_mb']['VmRSS']:.1f} MB (anon {p['memory_mb']['RssAnon']:.1f}, file {p['memory_mb']['RssFile']:.1f})   "
                  + verdict(p["memory_mb"]["VmRSS"], "rss_after_produce_mb"))
            print(f"  log segments on disk {run['log_bytes_on_disk'] / 1e6:.1f} MB for {p['payload_bytes'] / 1e6:.1f} MB payload")
        c = run.get("consume")
        if c:
            print(f"  consume broker CPU {c['broker_cpu_s_per_gb']:.3f} s/GB   {verdict(c['broker_cpu_s_per_gb'], 'consume_cpu_s_per_gb')}")
        cc = run.get("consume_copying")
        if c and cc:
            print(f"  zero-copy vs copying consume: {c['mb_per_s']:.0f} vs {cc['mb_per_s']:.0f} MB/s, "
                  f"broker {c['broker_cpu_s_per_gb']:.3f} vs {cc['broker_cpu_s_per_gb']:.3f} s/GB "
                  f"({cc['broker_cpu_s_per_gb'] / max(c['broker_cpu_s_per_gb'], 1e-9):.2f}x the CPU when copying)")
        if "restart_with_data" in run:
            r = run["restart_with_data"]
            print(f"  restart on this data: first connection {r['connect_ms']:.2f} ms, first ApiVersions {r['api_versions_ms']:.2f} ms, "
                  f"RSS {r['rss_mb']:.1f} MB; shutdowns {run['stop_ms']:.1f} / {r['stop_ms']:.1f} ms")
        for kind in ("produce", "consume"):
            ph = run.get(kind)
            prof = ph and ph.get("profile")
            if prof:
                print(f"\n  perf profile of the broker, {kind} ({R} B): {prof['samples']} samples; full report {prof['report_file']}")
                print("   by dso: " + ";  ".join(" ".join(d.split()) for d in prof["dsos"][:6]))
                for ln in prof["symbols"][: result["config"]["perf_top"]]:
                    print("   " + ln)


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", type=Path, default=Path(os.environ.get("STROM_BIN", REPO_ROOT / "target/release/strom")))
    ap.add_argument("--bytes", type=float, nargs="+", default=[1e9], help="payload bytes per run (default 1e9)")
    ap.add_argument("--record-size", type=int, nargs="+", default=[1024], help="record value size (default 1024)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--producers", type=int, default=2, help="producer processes")
    ap.add_argument("--consumers", type=int, default=2, help="consumer processes (each takes a subset of partitions)")
    ap.add_argument("--produce-api", choices=["batch", "single"], default="batch",
                    help="Producer.produce_batch (less driver CPU) or one produce() per record")
    ap.add_argument("--linger-ms", type=float, default=20)
    ap.add_argument("--batch-size", type=int, default=1_000_000)
    ap.add_argument("--queue-kbytes", type=int, default=256 * 1024, help="producer queue.buffering.max.kbytes")
    ap.add_argument("--fetch-max-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--partition-fetch-bytes", type=int, default=8 * 1024 * 1024)
    ap.add_argument("--fetch-wait-ms", type=int, default=100)
    ap.add_argument("--queued-kbytes", type=int, default=256 * 1024, help="consumer queued.max.messages.kbytes")
    ap.add_argument("--consume-batch", type=int, default=50_000, help="num_messages per consume() call")
    ap.add_argument("--producer-conf", action="append", default=[], metavar="KEY=VALUE", help="extra librdkafka producer config")
    ap.add_argument("--consumer-conf", action="append", default=[], metavar="KEY=VALUE", help="extra librdkafka consumer config")
    ap.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE", help="topic config at creation")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker --override, for every start")
    ap.add_argument("--time-limit", type=float, default=300, help="seconds per produce/consume phase (default 300)")
    ap.add_argument("--startup-runs", type=int, default=10)
    ap.add_argument("--idle-settle", type=float, default=0.2, help="seconds after start before the idle RSS reading")
    ap.add_argument("--skip-consume", action="store_true")
    ap.add_argument("--compare-copy", action="store_true",
                    help="consume a second time with fetch.zero.copy.enable=false (userspace copy instead of sendfile)")
    ap.add_argument("--no-restart", dest="restart", action="store_false", help="skip the restart-on-data measurement")
    ap.add_argument("--perf", type=Path, metavar="DIR", help="perf record the broker during each phase into DIR")
    ap.add_argument("--perf-freq", type=int, default=999)
    ap.add_argument("--perf-top", type=int, default=30, help="symbols printed per profile")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                    help="before each phase wait up to S seconds for other CPU load to go away (shared machines)")
    ap.add_argument("--data-root", type=Path, default=None, help="where temp data dirs go (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args()

    if not args.binary.is_file():
        sys.exit(f"strom binary not found at {args.binary}: build it or set STROM_BIN / --binary")
    n = max(len(args.bytes), len(args.record_size))
    pairs = [(args.record_size[min(i, len(args.record_size) - 1)], args.bytes[min(i, len(args.bytes) - 1)]) for i in range(n)]
    if args.perf:
        args.perf = args.perf.resolve()

    import confluent_kafka

    b0, _ = system_cpu()
    time.sleep(1.0)
    background = system_cpu()[0] - b0
    if background > 0.2 and not args.json:
        print(f"warning: {background:.2f} CPUs already busy before the bench started; numbers will be perturbed",
              file=sys.stderr)
    global WAIT_QUIET_S
    WAIT_QUIET_S = args.wait_quiet
    root = Path(tempfile.mkdtemp(prefix="strom-bench-", dir=args.data_root))
    # Run a private copy, so a rebuild of target/release during the bench cannot mix two binaries.
    source_binary = args.binary
    args.binary = root / "strom"
    shutil.copy2(source_binary, args.binary)
    result = {
        "env": {
            "binary": str(source_binary),
            "binary_mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(source_binary.stat().st_mtime)),
            "ncpu": NCPU,
            "loadavg_before": loadavg(),
            "background_busy_cores": round(background, 3),
            "confluent_kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0],
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "binary"},
        "targets": {k: {"max": v[0], "unit": v[1], "what": v[2]} for k, v in TARGETS.items()},
    }
    try:
        result["startup"] = measure_startup(args, root)
        result["runs"] = []
        for record_size, total in pairs:
            if not args.json:
                print(f"... run {record_size} B x {total / 1e6:.0f} MB", file=sys.stderr)
            result["runs"].append(bench_run(args, root, record_size, total))
    finally:
        result["env"]["loadavg_after"] = loadavg()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            result["env"]["data_root"] = str(root)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)


if __name__ == "__main__":
    main()
