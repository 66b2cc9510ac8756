"""`strom server` as a process among others: closed output streams, signals,
log levels and formats, the start-up line, the recovery summary and the
per-request debug log."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from harness import (
    OutRecord,
    admin_client,
    confluent_producer,
    consume_confluent,
    create_topic,
    free_port,
    future_error,
    produce_confluent,
    strom_binary,
    wait_until,
)

START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 15
RECOVERY_SUMMARY = "recovered logs after an unclean shutdown"
# A stop that lands as start-up ends raced the tasks being started in about
# one start of ten; twenty starts make such a race hard to miss.
QUICK_STOPS = 20


class Server:
    """One `strom server` whose output goes where the test says."""

    def __init__(self, tmp_path: Path, overrides: dict[str, str] | None = None):
        self.port = free_port()
        self.data_dir = tmp_path / "data"
        self.log_path = tmp_path / "broker.log"
        self.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            **(overrides or {}),
        }
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        args = [str(strom_binary()), "server"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, output=None, env: dict[str, str] | None = None, wait: bool = True) -> None:
        """Starts with stdout and stderr on `output` (default: the log file),
        waiting until it accepts connections unless told not to."""
        log = open(self.log_path, "ab")
        target = log if output is None else output
        self.process = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=target, stderr=target, env={**os.environ, **(env or {})}
        )
        log.close()
        if not wait:
            return

        def accepting():
            assert self.process.poll() is None, f"broker exited with {self.process.returncode}: {self.log()}"
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        wait_until(accepting, START_TIMEOUT_S, "the broker to accept connections")

    def signal(self, signum: int) -> int:
        """Sends `signum` and returns the exit code."""
        self.process.send_signal(signum)
        return self.process.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def server(tmp_path):
    servers: list[Server] = []

    def make(overrides: dict[str, str] | None = None) -> Server:
        made = Server(tmp_path / f"s{len(servers)}", overrides)
        made.log_path.parent.mkdir(parents=True, exist_ok=True)
        servers.append(made)
        return made

    yield make
    for made in servers:
        made.kill()


def round_trip(bootstrap: str, topic: str, count: int = 50) -> None:
    """Produces `count` records and reads them back."""
    create_topic(bootstrap, topic)
    records = [OutRecord(b"k%d" % i, b"v%d" % i, (), 0) for i in range(count)]
    produce_confluent(confluent_producer(bootstrap), topic, records)
    got = consume_confluent(bootstrap, topic, {0: count})
    assert [r.value for r in got[0]] == [r.value for r in records]


def run_server(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`strom server` expected to exit on its own at start."""
    args = [str(strom_binary()), "server", "--override", f"log.dirs={tmp_path}/data"]
    args += ["--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"]
    for override in overrides:
        args += ["--override", override]
    environment = {key: value for key, value in os.environ.items() if key != "RUST_LOG"}
    return subprocess.run(
        args, cwd=tmp_path, capture_output=True, text=True, timeout=10, env={**environment, **(env or {})}
    )


def test_closed_output_does_not_kill_the_broker(server):
    # A pipe whose reader is gone: every log line fails with EPIPE.
    read_end, write_end = os.pipe()
    os.close(read_end)
    broker = server({"logging.level": "DEBUG"})
    try:
        broker.start(output=write_end)
    finally:
        os.close(write_end)
    round_trip(broker.bootstrap, "after-the-reader-left")
    assert broker.process.poll() is None, f"the broker died with {broker.process.returncode}"
    assert broker.signal(signal.SIGTERM) == 0


def test_sighup_shuts_down_cleanly(server):
    broker = server()
    broker.start()
    round_trip(broker.bootstrap, "hung-up")
    assert broker.signal(signal.SIGHUP) == 0
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    assert "SIGHUP" in broker.log()
    broker.start()
    assert RECOVERY_SUMMARY not in broker.log()
    assert broker.signal(signal.SIGTERM) == 0


def test_a_stop_as_start_up_ends_is_not_missed(server):
    """SIGTERM the moment the broker accepts connections, while its tasks
    are still being scheduled: every task must see the stop, every time."""
    broker = server()
    for start in range(1, QUICK_STOPS + 1):
        broker.start(wait=False)
        started = f"start #{start}"
        wait_until(lambda: broker.log().count("Strom started") == start, START_TIMEOUT_S, started, interval_s=0.001)
        assert broker.signal(signal.SIGTERM) == 0, broker.log()


@pytest.mark.parametrize(
    "overrides, env, named",
    [
        (["logging.level=WARNINGS"], {}, "configuration logging.level"),
        (["logging.level=info,strom_broker=loud"], {}, "configuration logging.level"),
        ([], {"RUST_LOG": "verbose"}, "environment variable RUST_LOG"),
        (["log.format=xml"], {}, "log.format"),
    ],
)
def test_a_bad_log_setting_stops_the_start_naming_it(tmp_path, overrides, env, named):
    done = run_server(tmp_path, *overrides, env=env)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert named in lines[0]
    assert not (tmp_path / "data").exists(), "nothing is created before the logging is set up"


@pytest.mark.parametrize("level, shown, hidden", [("WARNING", "WARN", "INFO"), ("FATAL", None, "WARN")])
def test_log4j_level_names_mean_what_they_mean_in_kafka(server, level, shown, hidden):
    broker = server({"logging.level": level, "no.such.key": "1"})
    broker.start()
    assert broker.signal(signal.SIGTERM) == 0
    log = broker.log()
    assert f" {hidden} " not in log, log
    if shown:
        assert "no.such.key" in log and f" {shown} " in log, "unknown keys are warned about"


def test_start_up_line_says_which_broker_this_is_without_colour_codes(server):
    broker = server({"node.id": "7"})
    broker.start()
    assert broker.signal(signal.SIGTERM) == 0
    log = broker.log()
    assert "\x1b[" not in log, "no ANSI colour codes when output is not a terminal"
    started = [line for line in log.splitlines() if "Strom started" in line]
    assert len(started) == 1, log
    line = started[0]
    for field in ["node_id=7", f"log_dirs={broker.data_dir}", f"listeners=PLAINTEXT://{broker.bootstrap}"]:
        assert field in line, f"{field} missing from {line}"
    assert re.search(r'version="?\d+\.\d+\.\d+', line), line
    assert re.search(r"cluster_id=[\w-]{22}", line), line


def test_json_log_format_writes_one_object_per_line(server):
    broker = server({"log.format": "json", "node.id": "3"})
    broker.start()
    round_trip(broker.bootstrap, "as-json", count=5)
    assert broker.signal(signal.SIGTERM) == 0
    lines = [line for line in broker.log().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]
    started = [e for e in events if e.get("message") == "Strom started"]
    assert len(started) == 1, lines
    assert started[0]["level"] == "INFO"
    assert started[0]["node_id"] == 3
    assert started[0]["listeners"] == f"PLAINTEXT://{broker.bootstrap}"
    assert started[0]["cluster_id"] and started[0]["version"]


def test_recovery_after_an_unclean_shutdown_is_one_line(server):
    broker = server()
    broker.start()
    create_topic(broker.bootstrap, "crashed", partitions=6)
    records = [OutRecord(b"k%d" % i, b"v" * 100, (), 0) for i in range(60)]
    producer = confluent_producer(broker.bootstrap)
    for partition in range(6):
        produce_confluent(producer, "crashed", records[partition * 10 : partition * 10 + 10], partition=partition)
    broker.kill()
    broker.start()
    assert broker.signal(signal.SIGTERM) == 0
    recovered = [line for line in broker.log().splitlines() if "recovered log" in line]
    assert len(recovered) == 1, "\n".join(recovered)
    assert RECOVERY_SUMMARY in recovered[0] and "partitions=6" in recovered[0], recovered[0]


def test_debug_log_shows_each_request_with_client_partition_and_outcome(server):
    broker = server({"logging.level": "info,strom_broker=DEBUG"})
    broker.start()
    create_topic(broker.bootstrap, "traced")
    producer = confluent_producer(broker.bootstrap, **{"client.id": "traced-producer"})
    produce_confluent(producer, "traced", [OutRecord(b"k", b"v", (), 0)])
    admin = admin_client(broker.bootstrap)
    assert future_error(admin.delete_topics(["never-created"])["never-created"])
    assert broker.signal(signal.SIGTERM) == 0
    requests = [line for line in broker.log().splitlines() if " request " in line or line.endswith(" request")]
    produced = [line for line in requests if "api=Produce" in line and "traced-producer" in line]
    assert produced, "\n".join(requests[-20:])
    assert "traced-0 None" in produced[0], produced[0]
    deleted = [line for line in requests if "api=DeleteTopics" in line]
    assert deleted and "never-created UnknownTopicOrPartition" in deleted[0], "\n".join(requests[-20:])
