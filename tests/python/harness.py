"""Shared machinery for the integration suite: run the real `strom` binary and
drive it with real Kafka clients (confluent-kafka and kafka-python).

Every wait here is bounded: a broker that never comes up, a future that never
resolves or a consumer that stalls fails the test instead of hanging it.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict, deque
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import confluent_kafka
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 10.0
# First starts that may lose their port to another process before moving on.
PORT_ATTEMPTS = 5
STOP_TIMEOUT_S = 15.0
ADMIN_TIMEOUT_S = 15.0
LOG_TAIL_LINES = 80

# Kafka's own numbering of timestamp types, as stored in the batch attributes.
CREATE_TIME = 0
LOG_APPEND_TIME = 1

_CONFLUENT_TIMESTAMP_TYPES = {
    confluent_kafka.TIMESTAMP_NOT_AVAILABLE: -1,
    confluent_kafka.TIMESTAMP_CREATE_TIME: CREATE_TIME,
    confluent_kafka.TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME,
}


def strom_binary() -> Path:
    """The binary under test: `$STROM_BIN`, else the release build in this repo."""
    configured = os.environ.get("STROM_BIN")
    return Path(configured) if configured else REPO_ROOT / "target" / "release" / "strom"


# Ports free_port handed out lately: a port is free until its broker binds
# it, so two calls before that (a node's two listeners) could get the same.
_handed_out: deque[int] = deque(maxlen=4096)


def worker_ports() -> range:
    """This test process's share of the loopback ports below the kernel's
    ephemeral range: all of it, or one slice per pytest-xdist worker, so
    parallel workers never hand out the same port."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = range(max(1024, ephemeral_low // 2), ephemeral_low)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    share = len(ports) // workers
    return ports[worker * share : (worker + 1) * share]


def free_port() -> int:
    """A free loopback port of this worker's share, not handed out lately.

    A port the kernel hands out for bind(0) can later become some client's
    outgoing source port, and then a restarted broker could not bind it again.
    """
    candidates = random.sample(worker_ports(), 50)
    for port in [p for p in candidates if p not in _handed_out] + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.append(sock.getsockname()[1])
            return sock.getsockname()[1]
    raise BrokerError("no free loopback port")


def distinct_free_ports(count: int) -> list[int]:
    """`count` free ports, no two alike."""
    return [free_port() for _ in range(count)]


def port_is_free(port: int) -> bool:
    """Whether a listener could bind `port` on loopback now (as the broker binds: SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listening_socket_inodes(port: int, pid: int | None = None) -> set[str]:
    """Inodes of the TCP sockets listening on `port`, IPv4 and IPv6, from
    /proc/net (of process `pid`'s network namespace, if given)."""
    inodes = set()
    net = f"/proc/{pid}/net" if pid is not None else "/proc/net"
    for table in (f"{net}/tcp", f"{net}/tcp6"):
        try:
            with open(table) as rows:
                next(rows)
                for row in rows:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                        inodes.add(fields[9])
        except FileNotFoundError:  # the process exited: it listens nowhere
            return set()
    return inodes


_PR_SET_PDEATHSIG = 1
# Loaded here, not in a forked child where another thread may hold the loader's lock.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with(parent_pid: int) -> Callable[[], None]:
    """Runs in a broker child before exec: SIGKILL when the test process dies,
    so a killed run leaves no broker behind. (Its own session keeps a Ctrl-C
    meant for pytest from reaching it before teardown does.)"""

    def arm() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before the prctl
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def skip_unless_ci(reason: str) -> None:
    """Skip a test whose prerequisite this machine lacks; in CI (`CI` set),
    fail it instead, so a broken runner cannot pass by skipping."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run every test", pytrace=False)
    pytest.skip(reason)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_until(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll `condition` until it returns something truthy and return that.

    Fails with `what` in the message once `timeout_s` has passed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def dotted(overrides: dict[str, object]) -> dict[str, str]:
    """Turn Python keyword names into Kafka config keys (`num_partitions` -> `num.partitions`).

    Kafka's own key names use dots only; a key with a real underscore (in a
    listener name, say) must be passed in a dict instead.
    """
    return {key.replace("_", "."): config_value(value) for key, value in overrides.items()}


def config_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# Sets the open files limit, soft and hard, then becomes the broker.
_WITH_NOFILE = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)


class BrokerError(AssertionError):
    """The broker misbehaved as a process: failed to start, crashed or shut down badly."""


class Broker:
    """One `strom server` process on a loopback port with its own data dir.

    Port and data dir survive restarts, so clients keep one bootstrap address
    and a restarted process must recover whatever the previous one wrote.
    """

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None, port: int | None = None):
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.port = port or free_port()
        # The address it listens on, and the network namespace it runs in
        # (None: this one), for clusters whose links a test cuts.
        self.host = "127.0.0.1"
        self.netns: str | None = None
        self.overrides = {
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            # As in Kafka's shipped server.properties: the first member of a
            # group is not kept waiting 3 s for others that are not coming.
            "group.initial.rebalance.delay.ms": "0",
            **(overrides or {}),
        }
        # Extra environment for the process, e.g. STROM_FAILPOINTS.
        self.env: dict[str, str] = {}
        # The process's open files limit, soft and hard (None: inherited).
        self.nofile: int | None = None
        self._process: subprocess.Popen | None = None
        self._exit_expected = False
        self._starts = 0
        self._served = False
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self._running().pid

    def command(self) -> list[str]:
        args = [str(strom_binary()), "server"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        if self.nofile is not None:
            args = [sys.executable, "-c", _WITH_NOFILE, str(self.nofile), *args]
        if self.netns is not None:
            # `ip netns exec` execs the command: the pid stays the server's.
            args = ["ip", "netns", "exec", self.netns, *args]
        return args

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the process and wait until it listens on its port.

        Another test may bind the port between `free_port()` and the broker's
        own bind: a broker that never served yet then moves to a fresh port (a
        restart keeps its port, which its clients know).
        """
        if self.alive():
            raise BrokerError("broker is already running")
        if self._process is not None and not self._exit_expected:
            raise BrokerError(f"broker died unexpectedly with {self._process.returncode}\n{self.log_tail()}")
        binary = strom_binary()
        if not binary.is_file():
            raise BrokerError(f"strom binary not found at {binary}: build it or set STROM_BIN")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._spawn()
            if self._wait_listening(timeout_s):
                self._served = True
                return
            if attempt == PORT_ATTEMPTS or not self._lost_port_race():
                raise BrokerError(f"broker exited with {self._process.returncode} during startup\n{self.log_tail()}")
            self.port = free_port()
            self.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"

    def _spawn(self) -> None:
        self._starts += 1
        command = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start #{self._starts}: {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "RUST_BACKTRACE": "1", **self.env},
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()) if threading.current_thread() is threading.main_thread() else None,
            )
        self._exit_expected = False

    def _wait_listening(self, timeout_s: float) -> bool:
        """True once the process listens on its port, False if it exited first."""
        deadline = time.monotonic() + timeout_s
        while not self._listening():
            if self._process.poll() is not None:
                self._exit_expected = True
                return False
            if time.monotonic() >= deadline:
                self.kill9()
                raise BrokerError(f"broker did not listen on {self.port} within {timeout_s}s\n{self.log_tail()}")
            time.sleep(0.02)
        return True

    def _lost_port_race(self) -> bool:
        """Whether a broker that never served failed because someone else holds its default listener's port."""
        default_listener = self.overrides.get("listeners") == f"PLAINTEXT://127.0.0.1:{self.port}"
        return not self._served and default_listener and not port_is_free(self.port)

    def _listening(self) -> bool:
        """Whether this process (not another that took the port) has a listening socket on the port."""
        try:
            fds = os.listdir(f"/proc/{self._process.pid}/fd")
        except OSError:
            return False
        inodes = set()
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{self._process.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        return any(inode in inodes for inode in listening_socket_inodes(self.port, self._process.pid))

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM and wait: a clean shutdown must exit 0 within `timeout_s`."""
        process = self._running()
        self._exit_expected = True
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)
            raise BrokerError(f"broker ignored SIGTERM for {timeout_s}s and was killed\n{self.log_tail()}")
        if code != 0:
            raise BrokerError(f"clean shutdown exited with {code}\n{self.log_tail()}")

    def kill9(self) -> None:
        """Crash the broker: SIGKILL, no chance to flush or clean up."""
        process = self._running()
        self._exit_expected = True
        process.kill()
        process.wait(STOP_TIMEOUT_S)

    def restart(self, overrides: dict[str, object] | None = None, **extra: object) -> None:
        """Stop cleanly if running, apply extra overrides, start on the same port and dir."""
        if self.alive():
            self.stop()
        self.overrides.update({key: config_value(value) for key, value in (overrides or {}).items()})
        self.overrides.update(dotted(extra))
        self.start()

    def rss_kb(self) -> int:
        """Resident set size (VmRSS) in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise BrokerError("VmRSS missing from /proc status")

    def cpu_seconds(self) -> float:
        """User plus system CPU time consumed so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])
        return (utime + stime) / os.sysconf("SC_CLK_TCK")

    def open_fds(self) -> int:
        """Open file descriptors, to notice leaked connections."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if not self.log_path.exists():
            return "(no broker log)"
        with open(self.log_path, "rb") as log:
            log.seek(max(0, self.log_path.stat().st_size - 256 * 1024))
            text = log.read().decode(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def log_since_start(self) -> str:
        """What the current (or last) process wrote to its log."""
        text = self.log_path.read_bytes().decode(errors="replace")
        return text[text.rfind(f"\n=== start #{self._starts}: ") :]

    def close(self) -> None:
        """Leave no process behind; complain if the broker died on its own or shut down badly."""
        if self._process is None:
            return
        if self.alive():
            try:
                self.stop()
            finally:
                if self.alive():
                    self._process.kill()
                    self._process.wait(STOP_TIMEOUT_S)
        elif not self._exit_expected:
            self._exit_expected = True
            raise BrokerError(f"broker died unexpectedly with {self._process.returncode}\n{self.log_tail()}")

    def _running(self) -> subprocess.Popen:
        if not self.alive():
            raise BrokerError(f"broker is not running\n{self.log_tail()}")
        return self._process


# ---------------------------------------------------------------- admin


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_future(future, timeout_s: float = ADMIN_TIMEOUT_S):
    """The future's result; a client-side timeout fails the test rather than hanging it."""
    return future.result(timeout=timeout_s)


def future_error(future, timeout_s: float = ADMIN_TIMEOUT_S) -> KafkaError | None:
    """The KafkaError a future failed with, or None if it succeeded."""
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        return exc.args[0]
    return None


def set_scram_credentials(bootstrap: str, users: dict[str, str], mechanisms: Iterable[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
                          iterations: int = 4096) -> None:
    """Stores each user's SCRAM credential for every mechanism through
    AlterUserScramCredentials (KIP-554), as Kafka operators do."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    upsertions = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), iterations),
                                     password.encode())
        for user, password in users.items() for m in mechanisms
    ]
    admin = admin_client(bootstrap)  # kept alive until the futures resolve
    futures = admin.alter_user_scram_credentials(upsertions)
    for future in futures.values():
        wait_future(future)


def new_topic(name: str, partitions: int = 1, config: dict[str, str] | None = None) -> NewTopic:
    return NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic and wait until metadata shows all its partitions."""
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [new_topic(name, partitions, config)],
        operation_timeout=ADMIN_TIMEOUT_S,
        request_timeout=ADMIN_TIMEOUT_S,
    )
    wait_future(futures[name])
    wait_until(
        lambda: len(topic_partitions(admin, name)) == partitions,
        ADMIN_TIMEOUT_S,
        f"{partitions} partitions of {name} in metadata",
    )


def topic_partitions(admin: AdminClient, name: str) -> dict:
    """Partition metadata of `name` from a full metadata request (which never auto-creates)."""
    topic = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics.get(name)
    return {} if topic is None or topic.error is not None else topic.partitions


def topic_names(bootstrap: str) -> set[str]:
    return set(admin_client(bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics)


# ---------------------------------------------------------------- records


class OutRecord(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


class Delivery(NamedTuple):
    partition: int
    offset: int
    timestamp_type: int
    timestamp_ms: int


class InRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_type: int
    timestamp_ms: int

    @classmethod
    def from_confluent(cls, msg) -> "InRecord":
        ts_type, ts = msg.timestamp()
        return cls(
            msg.partition(),
            msg.offset(),
            msg.key(),
            msg.value(),
            tuple(msg.headers() or ()),
            _CONFLUENT_TIMESTAMP_TYPES[ts_type],
            ts,
        )

    @classmethod
    def from_kafka_python(cls, rec) -> "InRecord":
        return cls(
            rec.partition,
            rec.offset,
            rec.key,
            rec.value,
            tuple(tuple(h) for h in rec.headers or ()),
            rec.timestamp_type,
            rec.timestamp,
        )


def end_offsets_of(deliveries: Iterable[Delivery]) -> dict[int, int]:
    """Per partition, one past the highest acknowledged offset."""
    ends: dict[int, int] = {}
    for d in deliveries:
        ends[d.partition] = max(ends.get(d.partition, 0), d.offset + 1)
    return ends


def assert_same_sequence(expected: list, actual: list, what: str) -> None:
    """Compare long sequences, reporting the first difference instead of a huge diff."""
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            raise AssertionError(f"{what}: first difference at index {index}:\n  expected {want!r}\n  got      {got!r}")
    if len(expected) != len(actual):
        raise AssertionError(f"{what}: expected {len(expected)} items, got {len(actual)}")


# ---------------------------------------------------------------- confluent-kafka


def confluent_producer(bootstrap: str, **conf) -> Producer:
    """A plain producer unless the test passes `enable.idempotence=True` (librdkafka's default is off too)."""
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, **conf})


def confluent_consumer(bootstrap: str, **conf) -> Consumer:
    """A consumer for assign()-only use.

    confluent-kafka insists on a group.id, so each consumer gets a throwaway one;
    nothing is ever committed. CRCs are checked so a corrupt batch cannot slip by,
    and an out-of-range offset is an error rather than a silent jump.
    """
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"strom-tests-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "check.crcs": True,
            **conf,
        }
    )


def produce_confluent(
    producer: Producer,
    topic: str,
    records: list[OutRecord],
    partition: int | None = None,
    timeout_s: float = 120.0,
) -> list[Delivery]:
    """Produce through the client's normal batching and return every delivery report, in record order.

    Any failed delivery fails the test.
    """
    reports: list = [None] * len(records)

    def on_delivery(index, err, msg):
        reports[index] = err or msg

    deadline = time.monotonic() + timeout_s
    extra = {} if partition is None else {"partition": partition}
    for index, rec in enumerate(records):
        send = partial(
            producer.produce,
            topic,
            value=rec.value,
            key=rec.key,
            headers=list(rec.headers),
            timestamp=rec.timestamp_ms,
            on_delivery=partial(on_delivery, index),
            **extra,
        )
        while True:
            try:
                send()
                break
            except BufferError:
                if time.monotonic() >= deadline:
                    raise AssertionError("producer queue stayed full until the deadline")
                producer.poll(0.05)
        if index % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} records still undelivered after {timeout_s}s"
    return [_confluent_delivery(index, report) for index, report in enumerate(reports)]


def _confluent_delivery(index: int, report) -> Delivery:
    if report is None:
        raise AssertionError(f"record {index}: no delivery report")
    if isinstance(report, KafkaError):
        raise AssertionError(f"record {index}: delivery failed: {report}")
    ts_type, ts = report.timestamp()
    return Delivery(report.partition(), report.offset(), _CONFLUENT_TIMESTAMP_TYPES[ts_type], ts)


class Outcome(NamedTuple):
    """How the delivery of one record ended; `error` is None on success."""

    error: KafkaError | None
    partition: int
    offset: int
    timestamp_type: int
    timestamp_ms: int


def produce_one_confluent(producer: Producer, topic: str, value: bytes, timeout_s: float = 30.0, **kwargs) -> Outcome:
    """Produce a single record and wait for its delivery report."""
    outcomes: list[Outcome] = []

    def on_delivery(err, msg):
        ts_type, ts = msg.timestamp()
        outcomes.append(Outcome(err, msg.partition(), msg.offset(), _CONFLUENT_TIMESTAMP_TYPES[ts_type], ts))

    producer.produce(topic, value=value, on_delivery=on_delivery, **kwargs)
    remaining = producer.flush(timeout_s)
    assert remaining == 0 and outcomes, f"no delivery report within {timeout_s}s"
    return outcomes[0]


def consume_confluent(
    bootstrap: str,
    topic: str,
    end_offsets: dict[int, int],
    timeout_s: float = 60.0,
    start_offsets: dict[int, int] | None = None,
) -> dict[int, list[InRecord]]:
    """Read every partition from its start (default: the beginning) up to `end_offsets[p]`.

    Any consumer error tied to a partition (a corrupt batch, an out-of-range
    offset) fails the test.
    """
    consumer = confluent_consumer(bootstrap)
    got: dict[int, list[InRecord]] = {p: [] for p in end_offsets}
    starts = start_offsets or {}
    try:
        consumer.assign([TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in end_offsets])

        def position(p):
            return got[p][-1].offset + 1 if got[p] else starts.get(p, 0)

        deadline = time.monotonic() + timeout_s
        while any(position(p) < end for p, end in end_offsets.items()):
            if time.monotonic() >= deadline:
                progress = {p: (position(p), end) for p, end in end_offsets.items()}
                raise AssertionError(f"consumer stalled; (position, end) per partition: {progress}")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise AssertionError(f"consumer error on {msg.topic()}[{msg.partition()}]: {msg.error()}")
                got[msg.partition()].append(InRecord.from_confluent(msg))
    finally:
        consumer.close()
    return got


def watermarks_confluent(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(low, high) watermark per partition, asked of the broker (not the client cache)."""
    consumer = confluent_consumer(bootstrap)
    try:
        return {
            p: tuple(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=ADMIN_TIMEOUT_S, cached=False))
            for p in partitions
        }
    finally:
        consumer.close()


def high_watermarks(
    bootstrap: str, partitions: list[tuple[str, int]], isolation: str, timeout_s: float = 60.0
) -> dict[tuple[str, int], int]:
    """The end offset ListOffsets gives the isolation level: the LSO for read_committed."""
    consumer = confluent_consumer(bootstrap, **{"isolation.level": isolation})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s, cached=False)[1]
            for t, p in partitions
        }
    finally:
        consumer.close()


# ---------------------------------------------------------------- kafka-python


def kafka_python_producer(bootstrap: str, **conf):
    """kafka-python with its own defaults: idempotent (InitProducerId) unless `acks` other than all
    makes it fall back to a plain producer, or the test passes `enable_idempotence=False`."""
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=bootstrap, **conf)


def kafka_python_consumer(bootstrap: str, **conf):
    """A group-less consumer for assign()-only use."""
    from kafka import KafkaConsumer

    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        check_crcs=True,
        **conf,
    )


def produce_kafka_python(producer, topic: str, records: list[OutRecord], timeout_s: float = 120.0) -> list[Delivery]:
    """Send all records, flush, and return each record's metadata in record order."""
    futures = [
        producer.send(
            topic,
            key=rec.key,
            value=rec.value,
            headers=list(rec.headers),
            timestamp_ms=rec.timestamp_ms,
        )
        for rec in records
    ]
    producer.flush(timeout=timeout_s)
    deliveries = []
    for index, future in enumerate(futures):
        assert future.is_done, f"record {index}: not delivered within {timeout_s}s"
        meta = future.get(timeout=1)
        deliveries.append(Delivery(meta.partition, meta.offset, -1, meta.timestamp))
    return deliveries


def consume_kafka_python(
    bootstrap: str,
    topic: str,
    end_offsets: dict[int, int],
    timeout_s: float = 120.0,
) -> dict[int, list[InRecord]]:
    """Read every partition from the beginning up to `end_offsets[p]` with kafka-python."""
    from kafka import TopicPartition as KTopicPartition

    consumer = kafka_python_consumer(bootstrap, auto_offset_reset="earliest")
    got: dict[int, list[InRecord]] = {p: [] for p in end_offsets}
    try:
        partitions = [KTopicPartition(topic, p) for p in end_offsets]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        poll_kafka_python(consumer, got, end_offsets, timeout_s)
    finally:
        consumer.close(timeout_ms=5_000)
    return got


def poll_kafka_python(consumer, got: dict[int, list[InRecord]], end_offsets: dict[int, int], timeout_s: float) -> None:
    """Poll an assigned kafka-python consumer until every partition's records in
    `got[p]` reach `end_offsets[p]`, appending what arrives."""

    def position(p):
        return got[p][-1].offset + 1 if got[p] else 0

    deadline = time.monotonic() + timeout_s
    while any(position(p) < end for p, end in end_offsets.items()):
        if time.monotonic() >= deadline:
            progress = {p: (position(p), end) for p, end in end_offsets.items()}
            raise AssertionError(f"kafka-python stalled; (position, end) per partition: {progress}")
        for tp, batch in consumer.poll(timeout_ms=500, max_records=10_000).items():
            got[tp.partition].extend(InRecord.from_kafka_python(rec) for rec in batch)


def group_by_partition(items: Iterable, partition_of: Callable = lambda item: item.partition) -> dict[int, list]:
    grouped: dict[int, list] = defaultdict(list)
    for item in items:
        grouped[partition_of(item)].append(item)
    return dict(grouped)


# ---------------------------------------------------------------- the strom tools

CLI_TIMEOUT_S = 90.0


def strom(*args: str, stdin: str | None = None, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(strom_binary()), *args], input=stdin, capture_output=True, text=True, timeout=timeout_s
    )


def strom_ok(*args: str, stdin: str | None = None) -> str:
    done = strom(*args, stdin=stdin)
    assert done.returncode == 0, f"strom {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def admin_cli(broker: Broker, command: str, *args: str) -> subprocess.CompletedProcess:
    """A tool such as `strom topics` run against `broker`."""
    return strom(command, "--bootstrap-server", broker.bootstrap, *args)


def admin_ok(broker: Broker, command: str, *args: str) -> str:
    return strom_ok(command, "--bootstrap-server", broker.bootstrap, *args)


def assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    """A tool failed with one line on stderr holding every fragment."""
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
