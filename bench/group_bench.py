#!/usr/bin/env python3
"""Benchmark of Strom's group coordinator, driven by real confluent-kafka clients.

This is a benchmark, not a test: it asserts nothing and reports numbers. It
starts the real broker (`target/release/strom server`, fresh data dir, with
`group.initial.rebalance.delay.ms=0`) and measures:

* rebalance after a clean leave: a group of N members (10 by default), each a
  confluent-kafka consumer in its own process, subscribed to one topic of P
  partitions (20) and polling. Once the group is Stable with every partition
  assigned, one member closes (LeaveGroup, or the KIP-848 leave heartbeat); the
  time from the start of its close() to the group being Stable again with N-1
  members whose assignments cover every partition exactly once is measured by
  polling AdminClient.describe_consumer_groups in a tight loop (each poll is one
  round trip, so the resolution is a describe round trip). Repeated --repeats
  times on a fresh group each; min / median / max reported. A group turns
  Stable right after a round of heartbeats, so a leave at once (the default)
  is heard a full heartbeat interval later, the worst case; with
  --leave-delay-max-s S the leave comes at a random moment up to S seconds
  after, which samples the heartbeat cycle instead. Done for a classic
  group (session.timeout.ms=6000, heartbeat.interval.ms=500) and a KIP-848
  group (group.protocol=consumer; session and heartbeat are broker settings:
  group.consumer.heartbeat.interval.ms, 5000 ms by default, which bounds how
  soon the survivors hear of their new partitions; pass e.g.
  --override group.consumer.heartbeat.interval.ms=500 to compare like with like).
* offset commits per second from one client: a consumer that assign()s one
  partition (no membership, so generation -1) commits an increasing offset
  (a) synchronously in a loop for --commit-seconds, reporting commits/s and
  per-commit latency, and (b) asynchronously (at most --async-window
  unacknowledged) for --commit-seconds, then one commit(asynchronous=False) as
  the flush; commits/s counts from the first commit to the flush's return. The
  committed offset is read back afterwards (reported, not asserted).

Broker CPU (utime+stime from /proc) and machine-wide busy cores (/proc/stat) are
reported per phase: on a small machine the clients share the CPUs with the
broker, and a build running alongside skews everything. Every loop is bounded
in iterations and by a deadline, and every member process has a lifetime cap.

Run from the repo root, with the release binary built:

    .venv/bin/python bench/group_bench.py
    .venv/bin/python bench/group_bench.py --repeats 5 --members 10 --partitions 20 --json
    .venv/bin/python bench/group_bench.py --only commits --commit-seconds 10
    .venv/bin/python bench/group_bench.py --only consumer --override group.consumer.heartbeat.interval.ms=500
    .venv/bin/python bench/group_bench.py --only classic --only consumer --repeats 9 --leave-delay-max-s 5

`--binary` picks another broker binary (default: $STROM_BIN, else
target/release/strom); `--override KEY=VALUE` is passed to the broker.
(Run with `--member CONFIG_JSON TOPIC`, this file is the body of one member
process; the benchmark starts those itself.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOPIC = "group-bench"
START_DEADLINE_S = 10.0
STOP_DEADLINE_S = 30.0
ADMIN_TIMEOUT_S = 15.0
FORM_DEADLINE_S = 120.0  # N members up and Stable with everything assigned
REBALANCE_DEADLINE_S = 60.0  # from one leave to Stable again
MEMBER_LIFETIME_S = 900.0  # a member process never outlives this, whatever the parent does
MAX_DESCRIBES = 100_000  # per wait; a describe takes a millisecond or more


# ---------------------------------------------------------------- /proc


def proc_cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def system_busy_s() -> tuple[float, float]:
    """(busy, wall) CPU seconds over all CPUs since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])
    idle = fields[3] + fields[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


class Usage:
    """Broker CPU seconds and machine busy cores over a phase."""

    def __init__(self, broker_pid: int):
        self.pid = broker_pid
        self.cpu0 = proc_cpu_s(broker_pid)
        self.busy0, _ = system_busy_s()
        self.t0 = time.monotonic()

    def done(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        busy, _ = system_busy_s()
        return {
            "wall_s": wall,
            "broker_cpu_s": proc_cpu_s(self.pid) - self.cpu0,
            "machine_busy_cores": (busy - self.busy0) / wall if wall > 0 else float("nan"),
        }


def background_busy(window_s: float = 1.0) -> float:
    b0, _ = system_busy_s()
    time.sleep(window_s)
    return (system_busy_s()[0] - b0) / window_s


# ---------------------------------------------------------------- broker process


def free_port() -> int:
    """A free loopback port below the ephemeral range (no client can hold it as a source port)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(max(1024, low // 2), low), 50) + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free loopback port")


class Broker:
    def __init__(self, binary: Path, workdir: Path, overrides: list[str]):
        self.binary = binary
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.port = free_port()
        self.overrides = [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={self.data_dir}",
            "group.initial.rebalance.delay.ms=0",
            *overrides,
        ]
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [str(self.binary), "server"]
        for kv in self.overrides:
            cmd += ["--override", kv]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"broker did not come up; see {self.log_path}")
                time.sleep(0.01)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            print(f"warning: broker ignored SIGTERM for {STOP_DEADLINE_S}s and was killed", file=sys.stderr)
            return
        if code != 0:
            print(f"warning: broker exited with {code} on SIGTERM; see {self.log_path}", file=sys.stderr)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(STOP_DEADLINE_S)


def create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])
    futures[TOPIC].result(timeout=ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        topic = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics.get(TOPIC)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TOPIC} did not show {partitions} partitions in metadata")
        time.sleep(0.05)


# ---------------------------------------------------------------- member processes


def run_member(config_json: str, topic: str) -> None:
    """A member process: subscribe, poll, and on a `close` line on stdin (or EOF, or its
    lifetime cap) close the consumer cleanly, which leaves the group. Prints JSON lines."""
    from confluent_kafka import Consumer

    def say(event: str, **data) -> None:
        print(json.dumps({"event": event, "t": time.monotonic(), **data}), flush=True)

    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    consumer = Consumer(json.loads(config_json))
    consumer.subscribe(
        [topic],
        on_assign=lambda c, parts: say("assign", partitions=[p.partition for p in parts]),
        on_revoke=lambda c, parts: say("revoke", partitions=[p.partition for p in parts]),
    )
    say("subscribed")
    deadline = time.monotonic() + MEMBER_LIFETIME_S
    while not stop.is_set() and time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error():
            say("error", error=str(msg.error()))
    say("closing", member_id=consumer.memberid())
    consumer.close()
    say("closed")


class Member:
    """One member process; its JSON lines are read on a thread."""

    def __init__(self, config: dict):
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--member", json.dumps(config), TOPIC],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lock = threading.Lock()
        self.events: dict[str, dict] = {}
        self.errors: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # librdkafka's own log lines
            with self.lock:
                self.events.setdefault(event["event"], event)
                if event["event"] == "error":
                    self.errors.append(event["error"])

    def event(self, name: str) -> dict | None:
        with self.lock:
            return self.events.get(name)

    def request_close(self) -> None:
        try:
            self.process.stdin.write("close\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def wait_event(self, name: str, timeout_s: float) -> dict | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            event = self.event(name)
            if event is not None or self.process.poll() is not None:
                return self.event(name)
            time.sleep(0.005)
        return None

    def finish(self, timeout_s: float = 30.0) -> None:
        self.request_close()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.reader.join(5)


def member_config(bootstrap: str, group: str, protocol: str, index: int) -> dict:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"bench-member-{index}",
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
    }
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    else:
        config["group.protocol"] = "consumer"  # session and heartbeat are the broker's business
    return config


def group_view(admin, group: str, topic: str) -> tuple[str, int, bool]:
    """(state name, member count, every partition assigned exactly once) from one describe."""
    description = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group].result(
        timeout=ADMIN_TIMEOUT_S
    )
    owned = [
        tp.partition
        for m in description.members
        for tp in (m.assignment.topic_partitions if m.assignment else [])
        if tp.topic == topic
    ]
    return description.state.name, len(description.members), owned


def wait_group(admin, group: str, members: int, partitions: int, timeout_s: float) -> tuple[float, int, str]:
    """Describe in a tight loop until the group is STABLE with `members` members owning every
    partition exactly once. Returns (monotonic time of the satisfying answer, describes, last view)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    for attempt in range(1, MAX_DESCRIBES + 1):
        try:
            state, count, owned = group_view(admin, group, TOPIC)
        except Exception as exc:  # noqa: BLE001 - a failed describe is retried until the deadline
            state, count, owned = f"describe failed: {exc}", -1, []
        answered = time.monotonic()
        if state == "STABLE" and count == members and sorted(owned) == list(range(partitions)):
            return answered, attempt, f"{state} {count} members, {len(owned)} partitions"
        last = f"{state} {count} members, {len(owned)} assigned ({len(set(owned))} distinct)"
        if answered > deadline:
            break
    raise TimeoutError(f"group {group} not Stable with {members} members and all partitions; last: {last}")


def rebalance_run(
    broker: Broker, admin, protocol: str, members: int, partitions: int, run: int, leave_delay_max_s: float
) -> dict:
    group = f"bench-{protocol}-{run}-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    procs = [Member(member_config(broker.bootstrap, group, protocol, i)) for i in range(members)]
    try:
        formed_at, _, _ = wait_group(admin, group, members, partitions, FORM_DEADLINE_S)
        # The group turns Stable right after a round of heartbeats, so a leave straight away
        # lands just after one: the survivors hear of it a whole heartbeat interval later.
        # A random delay spreads the leave over the heartbeat cycle instead.
        leave_delay = random.uniform(0, leave_delay_max_s)
        time.sleep(leave_delay)
        leaver = procs[run % members]
        usage = Usage(broker.proc.pid)
        leaver.request_close()
        closing = leaver.wait_event("closing", 10)
        if closing is None:
            raise RuntimeError(f"member {run % members} did not start closing")
        stable_at, describes, view = wait_group(admin, group, members - 1, partitions, REBALANCE_DEADLINE_S)
        closed = leaver.wait_event("closed", 30)
        errors = [e for p in procs for e in p.errors]
        return {
            "protocol": protocol,
            "run": run,
            "form_s": formed_at - started,
            "leave_delay_s": leave_delay,
            "rebalance_ms": (stable_at - closing["t"]) * 1e3,
            "close_call_ms": (closed["t"] - closing["t"]) * 1e3 if closed else float("nan"),
            "describes": describes,
            "final": view,
            "client_errors": errors[:3],
            **usage.done(),
        }
    finally:
        for p in procs:
            p.request_close()
        for p in procs:
            p.finish()


# ---------------------------------------------------------------- commits


def commit_bench(broker: Broker, seconds: float, max_commits: int, window: int) -> dict:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    results: dict[str, dict] = {}

    # (a) synchronous: one commit in flight at a time.
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"bench-sync-{uuid.uuid4().hex[:8]}",
         "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)  # coordinator found, warm
        latencies, errors = [], 0
        usage = Usage(broker.proc.pid)
        t0 = time.monotonic()
        deadline = t0 + seconds
        offset = 0
        while offset < max_commits and time.monotonic() < deadline:
            offset += 1
            c0 = time.perf_counter()
            try:
                consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
            except KafkaException:
                errors += 1
            latencies.append(time.perf_counter() - c0)
        elapsed = time.monotonic() - t0
        phase = usage.done()
        committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=ADMIN_TIMEOUT_S)[0].offset
        latencies.sort()
        results["sync"] = {
            "commits": offset,
            "errors": errors,
            "seconds": elapsed,
            "commits_per_s": offset / elapsed,
            "latency_p50_us": latencies[len(latencies) // 2] * 1e6,
            "latency_p99_us": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6,
            "committed_readback": committed,
            "last_offset": offset,
            "broker_cpu_us_per_commit": phase["broker_cpu_s"] / max(1, offset) * 1e6,
            **phase,
        }
    finally:
        consumer.close()

    # (b) asynchronous, then a synchronous commit as the flush.
    acked = {"ok": 0, "err": 0, "first_err": None}

    def on_commit(err, partitions):
        if err is None and all(p.error is None for p in partitions):
            acked["ok"] += 1
        else:
            acked["err"] += 1
            acked["first_err"] = acked["first_err"] or str(err or [p.error for p in partitions if p.error])

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"bench-async-{uuid.uuid4().hex[:8]}",
         "enable.auto.commit": False, "on_commit": on_commit}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
        deadline = time.monotonic() + 5
        while acked["ok"] + acked["err"] < 1 and time.monotonic() < deadline:
            consumer.poll(0.01)  # the warm-up commit's callback
        acked.update(ok=0, err=0, first_err=None)
        usage = Usage(broker.proc.pid)
        t0 = time.monotonic()
        deadline = t0 + seconds
        hard_deadline = deadline + 30
        issued = 0
        while issued < max_commits and time.monotonic() < deadline:
            issued += 1
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, issued)], asynchronous=True)
            if issued % 64 == 0:
                consumer.poll(0)
            # Bound what is in flight: wait (bounded) for acknowledgements.
            while issued - acked["ok"] - acked["err"] > window and time.monotonic() < hard_deadline:
                consumer.poll(0.001)
        issue_s = time.monotonic() - t0
        flush_error = None
        try:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, issued)], asynchronous=False)
        except KafkaException as exc:
            flush_error = str(exc)
        flushed_s = time.monotonic() - t0
        phase = usage.done()
        while acked["ok"] + acked["err"] < issued and time.monotonic() < hard_deadline:
            consumer.poll(0.01)
        committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=ADMIN_TIMEOUT_S)[0].offset
        results["async"] = {
            "commits": issued,
            "acked_ok": acked["ok"],
            "acked_err": acked["err"],
            "first_err": acked["first_err"],
            "flush_error": flush_error,
            "issue_seconds": issue_s,
            "seconds_to_flush": flushed_s,
            "commits_per_s": issued / flushed_s,
            "window": window,
            "committed_readback": committed,
            "last_offset": issued,
            "broker_cpu_us_per_commit": phase["broker_cpu_s"] / max(1, issued) * 1e6,
            **phase,
        }
    finally:
        consumer.close()
    return results


# ---------------------------------------------------------------- main


def summarize(runs: list[dict]) -> dict:
    values = [r["rebalance_ms"] for r in runs]
    return {
        "runs": len(values),
        "min_ms": min(values),
        "median_ms": statistics.median(values),
        "max_ms": max(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, default=None)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    parser.add_argument("--max-commits", type=int, default=2_000_000)
    parser.add_argument("--async-window", type=int, default=1000)
    parser.add_argument(
        "--leave-delay-max-s",
        type=float,
        default=0.0,
        help="leave at a uniformly random time up to this long after the group is Stable (default: at once)",
    )
    parser.add_argument("--only", choices=["classic", "consumer", "commits"], action="append")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", action="store_true", help="keep the broker's data dir and log")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    binary = args.binary or Path(os.environ.get("STROM_BIN") or REPO_ROOT / "target" / "release" / "strom")
    if not binary.is_file():
        sys.exit(f"no broker binary at {binary}: build it (cargo build --release) or pass --binary")
    phases = args.only or ["classic", "consumer", "commits"]
    workdir = Path(tempfile.mkdtemp(prefix="strom-group-bench-"))
    report: dict = {
        "binary": str(binary),
        "overrides": args.override,
        "members": args.members,
        "partitions": args.partitions,
        "cpus": os.cpu_count(),
        "background_busy_cores": background_busy(),
    }
    broker = Broker(binary, workdir, args.override)
    broker.start()
    admin = None
    try:
        from confluent_kafka import libversion
        from confluent_kafka.admin import AdminClient

        report["librdkafka"] = libversion()[0]
        create_topic(broker.bootstrap, args.partitions)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for protocol in ("classic", "consumer"):
            if protocol not in phases:
                continue
            runs = []
            for run in range(args.repeats):
                try:
                    result = rebalance_run(
                        broker, admin, protocol, args.members, args.partitions, run, args.leave_delay_max_s
                    )
                except (TimeoutError, RuntimeError) as exc:
                    result = {"protocol": protocol, "run": run, "failed": str(exc)}
                runs.append(result)
                if not args.json:
                    print(json.dumps(result), flush=True)
            ok = [r for r in runs if "failed" not in r]
            report[f"rebalance_{protocol}"] = {"runs": runs, "summary": summarize(ok) if ok else None}
        if "commits" in phases:
            report["commits"] = commit_bench(broker, args.commit_seconds, args.max_commits, args.async_window)
        report["broker_alive_at_end"] = broker.alive()
    finally:
        del admin  # its connection must not outlive the broker (librdkafka would log the disconnect)
        broker.stop()
        if args.keep:
            report["workdir"] = str(workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    if args.json:
        print(json.dumps(report, indent=2))
        return
    print()
    print(f"broker {report['binary']} (librdkafka {report.get('librdkafka')}), {report['cpus']} CPUs, "
          f"background busy {report['background_busy_cores']:.2f} cores before start")
    print(f"overrides: {args.override or '(none beyond group.initial.rebalance.delay.ms=0)'}")
    print(f"leave at a random time up to {args.leave_delay_max_s} s after the group is Stable")
    for protocol in ("classic", "consumer"):
        section = report.get(f"rebalance_{protocol}")
        if not section:
            continue
        summary = section["summary"]
        failed = [r for r in section["runs"] if "failed" in r]
        if summary:
            per_run = ", ".join(f"{r['rebalance_ms']:.0f}" for r in section["runs"] if "failed" not in r)
            print(
                f"{protocol:8s} leave -> Stable with {args.members - 1} members, all {args.partitions} partitions: "
                f"median {summary['median_ms']:.0f} ms (min {summary['min_ms']:.0f}, max {summary['max_ms']:.0f}; "
                f"runs {per_run} ms)"
            )
        for r in failed:
            print(f"{protocol:8s} run {r['run']} FAILED: {r['failed']}")
    commits = report.get("commits")
    if commits:
        s, a = commits["sync"], commits["async"]
        print(
            f"sync commits:  {s['commits_per_s']:.0f}/s ({s['commits']} in {s['seconds']:.1f} s, "
            f"p50 {s['latency_p50_us']:.0f} us, p99 {s['latency_p99_us']:.0f} us, errors {s['errors']}, "
            f"broker {s['broker_cpu_us_per_commit']:.0f} us CPU/commit, readback {s['committed_readback']} "
            f"of {s['last_offset']})"
        )
        print(
            f"async commits: {a['commits_per_s']:.0f}/s ({a['commits']} issued in {a['issue_seconds']:.1f} s, "
            f"flushed at {a['seconds_to_flush']:.1f} s, acked ok {a['acked_ok']} err {a['acked_err']}, "
            f"broker {a['broker_cpu_us_per_commit']:.0f} us CPU/commit, readback {a['committed_readback']} "
            f"of {a['last_offset']})"
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--member":
        run_member(sys.argv[2], sys.argv[3])
    else:
        main()
