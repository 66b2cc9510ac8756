"""Debian's kcat, the everyday command-line client, against Strom."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from harness import create_topic, skip_unless_ci

KCAT = "/usr/bin/kcat" if shutil.which("/usr/bin/kcat") else shutil.which("kcat")
KCAT_TIMEOUT_S = 60


@pytest.fixture(autouse=True)
def kcat_installed():
    if KCAT is None:
        skip_unless_ci("kcat is not installed (scripts/test installs it)")


LINES = [f"key-{i}:value {i} with spaces" for i in range(200)] + ["ключ:значение", "k-last:last"]


def kcat(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [KCAT, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=KCAT_TIMEOUT_S,
    )
    assert result.returncode == 0, f"kcat {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def test_metadata_listing(broker):
    create_topic(broker.bootstrap, "listed", partitions=3)
    listing = kcat("-b", broker.bootstrap, "-L")
    assert f"broker 1 at 127.0.0.1:{broker.port}" in listing
    assert 'topic "listed" with 3 partitions:' in listing
    for partition in range(3):
        assert re.search(rf"partition {partition}, leader 1, replicas: 1, isrs: 1\b", listing), listing


def test_metadata_listing_as_json(broker):
    create_topic(broker.bootstrap, "listed", partitions=3)
    metadata = json.loads(kcat("-b", broker.bootstrap, "-L", "-J"))
    assert [(b["id"], b["name"]) for b in metadata["brokers"]] == [(1, f"127.0.0.1:{broker.port}")]
    [topic] = [t for t in metadata["topics"] if t["topic"] == "listed"]
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 1 for p in topic["partitions"])


def test_keyed_lines_round_trip(broker):
    create_topic(broker.bootstrap, "lines")
    kcat("-P", "-b", broker.bootstrap, "-t", "lines", "-K:", "-H", "origin=kcat", stdin="\n".join(LINES) + "\n")

    consume = ["-C", "-b", broker.bootstrap, "-t", "lines", "-o", "beginning", "-e"]
    assert kcat(*consume, "-f", "%k:%s\n").splitlines() == LINES
    assert kcat(*consume, "-f", "%o|%h\n").splitlines() == [f"{i}|origin=kcat" for i in range(len(LINES))]

    messages = [json.loads(line) for line in kcat(*consume, "-J").splitlines()]
    assert [(m["offset"], m["key"], m["payload"]) for m in messages] == [
        (i, *line.split(":", 1)) for i, line in enumerate(LINES)
    ]
    assert all(m["partition"] == 0 and m["tstype"] == "create" for m in messages)
