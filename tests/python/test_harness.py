"""The test machinery itself, which a 3-node tier will lean on: brokers die
with the test process that started them, a broker whose port was taken
before it could bind moves to another, a test past its time-out fails, and a
missing prerequisite fails in CI instead of skipping.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from harness import Broker, wait_until

HERE = Path(__file__).resolve().parent
PYTEST_RUN_TIMEOUT_S = 120


def process_gone(pid: int) -> bool:
    """Gone, or a zombie no one has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_a_killed_test_process_leaves_no_broker_behind(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(HERE)!r})
        from pathlib import Path
        from harness import Broker
        broker = Broker(Path({str(tmp_path)!r}))
        broker.start()
        print(broker.pid, flush=True)
        time.sleep(120)
        """
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        broker_pid = int(runner.stdout.readline())
        assert os.getpgid(broker_pid) == broker_pid, "the broker leads its own process group"
        runner.kill()
        runner.wait(10)
        wait_until(lambda: process_gone(broker_pid), 10, f"broker {broker_pid} to die with its test process")
    finally:
        if runner.poll() is None:
            runner.kill()
        if "broker_pid" in locals() and not process_gone(broker_pid):
            os.kill(broker_pid, signal.SIGKILL)


def test_a_broker_whose_port_was_taken_moves_to_a_fresh_one(tmp_path):
    broker = Broker(tmp_path)
    # Another process binds the chosen port before the broker does.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", broker.port))
        squatter.listen()
        taken = broker.port
        try:
            broker.start()
            assert broker.alive()
            assert broker.port != taken
            assert broker.bootstrap == f"127.0.0.1:{broker.port}"
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
                pass
        finally:
            broker.close()


def run_pytest(tmp_path: Path, test_source: str, ci: bool = False) -> subprocess.CompletedProcess:
    """Runs one generated test file with this suite's conftest and settings, in CI or not."""
    for name in ("conftest.py", "harness.py", "pytest.ini"):
        (tmp_path / name).write_text((HERE / name).read_text())
    (tmp_path / "test_generated.py").write_text(textwrap.dedent(test_source))
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "test_generated.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PYTEST_RUN_TIMEOUT_S,
        env={**env, "CI": "true"} if ci else env,
    )


def test_a_test_past_its_time_out_fails(tmp_path):
    done = run_pytest(
        tmp_path,
        """
        import time
        import pytest

        @pytest.mark.timeout(1)
        def test_hangs():
            while True:
                time.sleep(0.1)
        """,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test timed out after 1 s" in done.stdout
    assert "1 failed" in done.stdout


def test_a_missing_prerequisite_skips_locally_and_fails_in_ci(tmp_path):
    source = """
        from harness import skip_unless_ci

        def test_needs_a_tool():
            skip_unless_ci("the tool is not installed")
        """
    local = run_pytest(tmp_path, source)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout
    in_ci = run_pytest(tmp_path, source, ci=True)
    assert in_ci.returncode == 1 and "1 failed" in in_ci.stdout, in_ci.stdout
    assert "the tool is not installed; CI must run every test" in in_ci.stdout


def test_every_broker_that_died_is_reported(tmp_path):
    done = run_pytest(
        tmp_path,
        """
        def test_two_brokers_die(broker_factory):
            for broker in (broker_factory(), broker_factory()):
                broker._process.kill()
                broker._process.wait(10)
        """,
    )
    assert done.returncode == 1, done.stdout
    assert "broker0: broker died unexpectedly" in done.stdout and "broker1: broker died unexpectedly" in done.stdout
