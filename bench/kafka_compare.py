#!/usr/bin/env python3
"""Strom beside Apache Kafka 4.4 on this machine, driven by Kafka's own perf tools.

A benchmark, not a test: it asserts nothing and prints one table, with the
ratio Strom/Kafka for every figure. Each broker runs alone, as one node on
loopback with its defaults (Kafka as KRaft broker+controller, its heap at
1 GiB), and is measured the same way, in the same run:

* start-up: spawn of the server (formatted, empty dir) to the first record
  a producer has acknowledged;
* produce: `kafka-producer-perf-test` sends N records of R bytes to a topic
  of 6 partitions (acks=1 and acks=all, linger 5 ms, 1 MiB batches): MB/s,
  records/s, and the broker's CPU seconds per GB in (utime+stime of the
  server process from /proc);
* latency at half load: the same producer held to half the records/s the
  broker reached, p50/p99/p99.9 from the tool's histogram;
* consume: `kafka-consumer-perf-test` reads every record back: MB/s and the
  broker's CPU seconds per GB out;
* RSS of the server after the run.

With `--cluster`, each runs as three combined KRaft nodes on loopback
instead (`strom storage format` and `kafka-storage format`, one static
quorum), and the table holds: a 1 KiB produce at acks=all to a topic of
RF=3 (MB/s, records/s, CPU seconds of all three nodes per GB in), its
consume, and the controller failover: the active controller is killed with
SIGKILL and the time until a surviving node's DescribeQuorum names a new
leader is taken, over three rounds (the killed node restarted between them;
median and worst).

The clients share the two cores with the broker, so the client's own
ceiling bounds throughput: compare the ratios, which run on the same box
within minutes of each other.

Run from the repo root, with the `suite` build (`scripts/test` makes it) or
STROM_BIN, after Maven has resolved tests/java's jars:

    python3 bench/kafka_compare.py --records 2000000 --record-size 100 1024
    .venv/bin/python bench/kafka_compare.py --cluster --records 300000   # wire.py needs crc32c
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POM = REPO / "tests" / "java" / "pom.xml"
PARTITIONS = 6
TICKS = os.sysconf("SC_CLK_TCK")


def classpath() -> str:
    out = Path(tempfile.mkdtemp()) / "cp.txt"
    subprocess.run(["mvn", "-q", "-o", "-f", str(POM), "dependency:build-classpath",
                    f"-Dmdep.outputFile={out}"], check=True, stdout=subprocess.DEVNULL)
    return out.read_text().strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java(cp: str, main: str, *args: str, heap: str = "256m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-cp", cp, main, *args]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """One broker process: Strom or Kafka, on fresh ports and a fresh dir."""

    def __init__(self, kind: str, cp: str, root: Path):
        self.kind, self.cp = kind, cp
        self.dir = root / kind
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        data = self.dir / "data"
        if self.kind == "strom":
            binary = os.environ.get("STROM_BIN", str(REPO / "target" / "suite" / "strom"))
            return [binary, "server", "--override", f"listeners=PLAINTEXT://{self.bootstrap}",
                    "--override", f"log.dirs={data}", "--override", "group.initial.rebalance.delay.ms=0"]
        controller = free_port()
        properties = self.dir / "server.properties"
        properties.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller}",
            f"listeners=PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{controller}",
            "controller.listener.names=CONTROLLER", f"log.dirs={data}",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1", "group.initial.rebalance.delay.ms=0", ""]))
        subprocess.run(java(self.cp, "kafka.tools.StorageTool", "format", "--cluster-id",
                            uuid.uuid4().hex[:22], "--config", str(properties)),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return java(self.cp, "kafka.Kafka", str(properties), heap="1g")

    def start(self) -> float:
        """Starts the server; seconds from spawn to a first acknowledged record."""
        command = self.command()
        started = time.monotonic()
        log = open(self.dir / "server.log", "wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = started + 120
        while time.monotonic() < deadline:
            if self.produce_one():
                first = time.monotonic() - started
                # The producer's own JVM start is in that figure: take off
                # what one more run costs against the running server.
                again = time.monotonic()
                self.produce_one()
                return max(0.0, first - (time.monotonic() - again))
        raise RuntimeError(f"{self.kind} did not take a record within 120 s")

    def produce_one(self) -> bool:
        done = subprocess.run(java(self.cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", "warm-up",
                                   "--num-records", "1", "--record-size", "10", "--throughput", "-1",
                                   "--producer-props", f"bootstrap.servers={self.bootstrap}",
                                   "max.block.ms=2000", "delivery.timeout.ms=3000", "request.timeout.ms=2000",
                                   heap="128m"),
                              capture_output=True, text=True)
        return done.returncode == 0 and "1 records sent" in done.stdout

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                # A cluster's last node may wait for a quorum that is gone.
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)


class ClusterNode(Server):
    """One combined KRaft node of a three-node cluster."""

    def __init__(self, kind: str, cp: str, root: Path, node_id: int, voters: str, controller: int, cluster_id: str):
        super().__init__(kind, cp, root / f"{kind}-{node_id}")
        self.node_id, self.voters, self.controller, self.cluster_id = node_id, voters, controller, cluster_id
        self.kind = kind

    def properties(self) -> Path:
        path = self.dir / "server.properties"
        path.write_text("\n".join([
            "process.roles=broker,controller", f"node.id={self.node_id}",
            f"controller.quorum.voters={self.voters}",
            f"listeners=PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{self.controller}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names=CONTROLLER", f"log.dirs={self.dir / 'data'}",
            "group.initial.rebalance.delay.ms=0", ""]))
        return path

    def command(self) -> list[str]:
        properties = self.properties()
        if self.kind == "strom":
            binary = os.environ.get("STROM_BIN", str(REPO / "target" / "suite" / "strom"))
            return [binary, "server", str(properties)]
        return java(self.cp, "kafka.Kafka", str(properties), heap="1g")

    def format(self) -> None:
        properties = self.properties()
        if self.kind == "strom":
            binary = os.environ.get("STROM_BIN", str(REPO / "target" / "suite" / "strom"))
            command = [binary, "storage", "format", "--config", str(properties), "--cluster-id", self.cluster_id]
        else:
            command = java(self.cp, "kafka.tools.StorageTool", "format", "--cluster-id", self.cluster_id,
                           "--config", str(properties))
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def spawn(self) -> None:
        log = open(self.dir / "server.log", "ab")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill9(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


class Cluster:
    """Three combined KRaft nodes of one kind, formatted into one cluster."""

    def __init__(self, kind: str, cp: str, root: Path):
        self.kind, self.cp = kind, cp
        controllers = [free_port() for _ in range(3)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(controllers))
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        self.nodes = [ClusterNode(kind, cp, root, i + 1, voters, controllers[i], cluster_id) for i in range(3)]
        for node in self.nodes:
            node.format()
            node.spawn()
        self.process = self.nodes[0].process

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes if node.process.poll() is None)

    def cpu_s(self) -> float:
        return sum(cpu_s(node.process.pid) for node in self.nodes)

    def wait_serving(self) -> None:
        deadline = time.monotonic() + 120
        while not self.nodes[0].produce_one() and time.monotonic() < deadline:
            pass

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def active_controller(cluster: Cluster) -> int:
    done = subprocess.run(java(cluster.cp, "org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                               cluster.bootstrap, "describe", "--status", heap="128m"),
                          capture_output=True, text=True, timeout=120)
    return int(re.search(r"LeaderId:\s+(\d+)", done.stdout)[1])


def quorum_leader(node: ClusterNode) -> int | None:
    """The metadata quorum's leader as `node` answers DescribeQuorum, if it does."""
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import wire

    try:
        response = wire.describe_quorum(node.port, 2)
    except (OSError, ValueError, AssertionError):
        return None
    [(_, [partition])] = response.topics
    ok = response.error_code == wire.NONE and partition.error_code == wire.NONE
    return partition.leader_id if ok and partition.leader_id >= 0 else None


def controller_failover_s(cluster: Cluster) -> float:
    """SIGKILL of the active controller to a surviving node's DescribeQuorum
    naming a new leader."""
    victim = cluster.nodes[active_controller(cluster) - 1]
    survivor = next(node for node in cluster.nodes if node is not victim)
    killed = time.monotonic()
    victim.kill9()
    while time.monotonic() - killed < 120:
        leader = quorum_leader(survivor)
        if leader is not None and leader != victim.node_id:
            took = time.monotonic() - killed
            break
        time.sleep(0.005)
    else:
        raise RuntimeError(f"{cluster.kind}: no new quorum leader within 120 s of the kill")
    victim.spawn()
    cluster.wait_serving()
    return took


def measure_cluster(kind: str, cp: str, root: Path, records: int) -> dict:
    cluster = Cluster(kind, cp, root)
    try:
        cluster.wait_serving()
        topic = "bench-rf3"
        subprocess.run(java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap,
                            "--create", "--topic", topic, "--partitions", str(PARTITIONS),
                            "--replication-factor", "3", "--config", "min.insync.replicas=2"),
                       check=True, capture_output=True)
        result = {"produce 1024 B acks=all RF=3": produce(cluster, topic, records, 1024, "all"),
                  "consume 1024 B RF=3": consume(cluster, topic, records, 1024)}
        print(kind, result, flush=True)
        failovers = [controller_failover_s(cluster) for _ in range(3)]
        result["controller failover, s"] = {"median": statistics.median(failovers), "worst": max(failovers)}
    finally:
        cluster.stop()
    return result


def create_topic(server: Server, topic: str) -> None:
    subprocess.run(java(server.cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", server.bootstrap,
                        "--create", "--topic", topic, "--partitions", str(PARTITIONS)),
                   check=True, capture_output=True)


def server_cpu_s(server) -> float:
    return server.cpu_s() if isinstance(server, Cluster) else cpu_s(server.process.pid)


def produce(server, topic: str, records: int, size: int, acks: str, throughput: int = -1) -> dict:
    before = server_cpu_s(server)
    done = subprocess.run(java(server.cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                               "--num-records", str(records), "--record-size", str(size),
                               "--throughput", str(throughput), "--producer-props",
                               f"bootstrap.servers={server.bootstrap}", f"acks={acks}", "linger.ms=5",
                               "batch.size=1048576", "max.request.size=2097152", heap="1g"),
                          capture_output=True, text=True, timeout=900)
    cpu = server_cpu_s(server) - before
    last = [line for line in done.stdout.splitlines() if "records sent" in line][-1]
    rate = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\)", last)
    latency = re.search(r"(\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th", last)
    return {"records_s": float(rate[1]), "mb_s": float(rate[2]), "p50_ms": float(latency[1]),
            "p99_ms": float(latency[2]), "p999_ms": float(latency[3]), "cpu_s_per_gb": cpu / (records * size / 1e9)}


def consume(server, topic: str, records: int, size: int) -> dict:
    before = server_cpu_s(server)
    done = subprocess.run(java(server.cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                               server.bootstrap, "--topic", topic, "--messages", str(records),
                               "--timeout", "60000", heap="1g"),
                          capture_output=True, text=True, timeout=900)
    cpu = server_cpu_s(server) - before
    row = [line for line in done.stdout.splitlines() if line and line[0].isdigit()][-1].split(",")
    return {"mb_s": float(row[3]), "records_s": float(row[5]), "cpu_s_per_gb": cpu / (records * size / 1e9)}


def measure(kind: str, cp: str, root: Path, records: int, sizes: list[int]) -> dict:
    server = Server(kind, cp, root)
    result = {"startup_s": server.start()}
    try:
        for size in sizes:
            for acks in ("1", "all"):
                topic = f"bench-{size}-{acks}"
                create_topic(server, topic)
                produced = produce(server, topic, records, size, acks)
                result[f"produce {size} B acks={acks}"] = produced
                if acks == "1":
                    result[f"consume {size} B"] = consume(server, topic, records, size)
                    half = max(1, int(produced["records_s"] / 2))
                    latency_topic = f"{topic}-half"
                    create_topic(server, latency_topic)
                    result[f"half load {size} B acks=1"] = produce(
                        server, latency_topic, min(records, half * 20), size, acks, half)
        result["rss_mb"] = rss_mb(server.process.pid)
    finally:
        server.stop()
    return result


def print_table(strom: dict, kafka: dict) -> None:
    print(f"{'figure':46} {'strom':>12} {'kafka':>12} {'strom/kafka':>12}")
    rows = [(name, strom[key], kafka[key]) for name, key in (
        ("start-up to first acked record, s", "startup_s"), ("RSS after the run, MB", "rss_mb")) if key in strom]
    for name, figures in strom.items():
        if isinstance(figures, dict):
            for key, value in figures.items():
                rows.append((f"{name}: {key}", value, kafka[name][key]))
    for name, s, k in rows:
        ratio = s / k if k else float("nan")
        print(f"{name:46} {s:12.2f} {k:12.2f} {ratio:12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--cluster", action="store_true", help="three nodes each, RF=3, and controller failover")
    args = parser.parse_args()
    if shutil.which("java") is None or shutil.which("mvn") is None:
        sys.exit("kafka_compare: needs java and mvn (scripts/test installs them)")
    cp = classpath()
    root = Path(tempfile.mkdtemp(prefix="kafka-compare-"))
    try:
        if args.cluster:
            strom = measure_cluster("strom", cp, root, args.records)
            kafka = measure_cluster("kafka", cp, root, args.records)
        else:
            strom = measure("strom", cp, root, args.records, args.record_size)
            kafka = measure("kafka", cp, root, args.records, args.record_size)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(strom, kafka)


if __name__ == "__main__":
    main()
