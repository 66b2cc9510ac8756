"""`strom server` as an operator meets it: properties files, overrides, bad
values, unknown keys and signals."""

import signal
import subprocess
from pathlib import Path

import pytest

from harness import free_port, strom_binary, wait_until
import socket


def run_server(tmp_path, *args, timeout_s=10):
    """Runs `strom server` expecting it to exit on its own; returns (code, stderr)."""
    done = subprocess.run(
        [str(strom_binary()), "server", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return done.returncode, done.stderr


def test_invalid_value_stops_the_start_naming_the_key(tmp_path):
    code, stderr = run_server(tmp_path, "--override", "num.partitions=many", "--override", f"log.dirs={tmp_path}/d")
    assert code != 0
    assert "num.partitions" in stderr
    assert not (tmp_path / "d").exists(), "nothing is created before the config is valid"


@pytest.mark.parametrize(
    "key, value",
    [
        ("log.segment.bytes", "5000000000"),  # an int: past 2 GiB its index positions would wrap
        ("log.segment.bytes", "13"),  # below Kafka's 14-byte record overhead
        ("message.max.bytes", "2147483648"),
        ("socket.request.max.bytes", "-1"),
        ("log.message.timestamp.after.max.ms", "-5"),
        ("offsets.topic.segment.bytes", "3000000000"),
    ],
)
def test_numbers_outside_kafkas_type_and_range_stop_the_start(tmp_path, key, value):
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path}/d\n{key}={value}\n")
    code, stderr = run_server(tmp_path, str(props))
    assert code != 0
    assert key in stderr and value in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "d").exists(), "nothing is created before the config is valid"


def test_invalid_value_in_properties_file_names_the_key(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path}/d\nlog.message.timestamp.type=Sometimes\n")
    code, stderr = run_server(tmp_path, str(props))
    assert code != 0
    assert "log.message.timestamp.type" in stderr


def test_missing_properties_file_is_a_one_line_error(tmp_path):
    code, stderr = run_server(tmp_path, str(tmp_path / "absent.properties"))
    assert code != 0
    assert "absent.properties" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_properties_file_with_unknown_key_starts_and_stops_on_sigint(tmp_path):
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        "# Kafka's standard file, trimmed\n"
        "num.io.threads=8\n"
        f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
        f"log.dirs={tmp_path}/data\n"
        "num.network.threads=3\n"
        "no.such.setting=1\n"
    )
    log = open(tmp_path / "broker.log", "w")
    proc = subprocess.Popen([str(strom_binary()), "server", str(props)], cwd=tmp_path, stderr=log, stdout=log)
    try:

        def accepting():
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_until(accepting, 10, "broker accepting connections")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = (tmp_path / "broker.log").read_text()
    assert "no.such.setting" in text, "unknown keys are warned about"
    assert "num.network.threads" not in text, "Kafka's standard keys are accepted quietly"
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


# ---------------------------------------------------------------- Java properties syntax

def serve_until_accepting_then_interrupt(args: list[str], cwd: Path, port: int) -> None:
    """Runs `strom ARGS` in `cwd` (log in cwd/broker.log) until it accepts on
    `port`, then stops it with SIGINT, which must end it cleanly."""
    log = open(cwd / "broker.log", "w")
    proc = subprocess.Popen([str(strom_binary()), *args], cwd=cwd, stderr=log, stdout=log)
    try:

        def accepting():
            assert proc.poll() is None, (cwd / "broker.log").read_text()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_until(accepting, 10, "broker accepting connections")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_properties_file_in_java_syntax_space_separators_and_continuations(tmp_path):
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        "! Java comment style\n"
        f"listeners PLAINTEXT://127.0.0.1:{port}\n"
        f"log.dirs {tmp_path}/a,\\\n"
        f"    {tmp_path}/b\n"
        "num.partitions : 2\n"
    )
    serve_until_accepting_then_interrupt(["server", str(props)], tmp_path, port)
    assert (tmp_path / "a" / ".kafka_cleanshutdown").exists() and (tmp_path / "b").is_dir()
    assert "ignoring unknown configuration key" not in (tmp_path / "broker.log").read_text()


def test_example_config_file_starts_a_broker(tmp_path):
    """config/server.properties as shipped (only the ports moved, as the README shows)."""
    port, console_port = free_port(), free_port()
    example = Path(__file__).resolve().parents[2] / "config" / "server.properties"
    args = ["server", str(example), "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"console.listener=http://127.0.0.1:{console_port}"]
    serve_until_accepting_then_interrupt(args, tmp_path, port)
    text = (tmp_path / "broker.log").read_text()
    assert "ignoring unknown configuration key" not in text, text
    assert (tmp_path / "strom-data" / ".kafka_cleanshutdown").exists(), "log.dirs is relative to the working directory"


# ---- Start-up failures: one line naming the operation and the path -----------


def final_line(stderr: str) -> str:
    """The error `strom` ends with; log lines may come before it."""
    return stderr.strip().splitlines()[-1]


def test_a_log_dir_held_by_another_broker_is_one_line_naming_it(broker, tmp_path):
    code, stderr = run_server(
        tmp_path,
        "--override",
        f"log.dirs={broker.data_dir}",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
    )
    assert code == 1
    expected = f"strom: cannot lock log dir {broker.data_dir}: another process (another broker?) holds its .lock"
    assert final_line(stderr) == expected
    assert stderr.count("holds its .lock") == 1


def test_a_port_in_use_is_one_line_naming_it(broker, tmp_path):
    code, stderr = run_server(
        tmp_path,
        "--override",
        f"log.dirs={tmp_path}/data",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{broker.port}",
    )
    assert code == 1
    assert final_line(stderr) == f"strom: cannot listen on 127.0.0.1:{broker.port}: Address already in use (os error 98)"
    assert stderr.count("os error 98") == 1


def test_a_log_dir_that_cannot_be_made_is_one_line_naming_it(tmp_path):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    code, stderr = run_server(tmp_path, "--override", f"log.dirs={in_the_way}/data")
    assert code == 1
    assert final_line(stderr) == f"strom: cannot create log dir {in_the_way}/data: Not a directory (os error 20)"
    assert stderr.count("os error 20") == 1
