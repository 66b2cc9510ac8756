"""Several log dirs: where new partitions go, what DescribeLogDirs reports
(kafka-python's admin client and the raw protocol, v1-v4), and a dir that
fails while the broker runs.

A failing dir is a small tmpfs filled up until writes fail with ENOSPC; that
needs root (CI runs as root) and is skipped with the reason otherwise (and
fails in CI, where it must run).
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from kafka.admin import KafkaAdminClient

import wire
from harness import (
    admin_client,
    admin_ok,
    confluent_consumer,
    create_topic,
    free_port,
    skip_unless_ci,
    wait_until,
)

# Topic names the broker keeps for itself, never counted as user partitions.
INTERNAL_DIRS = ("__cluster_metadata-", "__consumer_offsets-")


def log_dirs_override(dirs: list[Path]) -> str:
    return ",".join(str(d) for d in dirs)


def partitions_in(log_dir: Path, topic: str) -> set[int]:
    """Partitions of `topic` whose directory is in `log_dir`."""
    found = set()
    for entry in log_dir.iterdir():
        name, _, partition = entry.name.rpartition("-")
        if entry.is_dir() and name == topic and partition.isdigit():
            found.add(int(partition))
    return found


def user_partition_count(log_dir: Path) -> int:
    return sum(1 for e in log_dir.iterdir() if e.is_dir() and "-" in e.name and not e.name.startswith(INTERNAL_DIRS))


def log_bytes(partition_dir: Path) -> int:
    """What Kafka reports as a partition's size: the bytes of its segments' .log files."""
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))


def batch(*values: bytes) -> bytes:
    return wire.encode_record_batch([wire.BatchRecord(b"k", v) for v in values])


def produce_codes(port: int, topic: str, partitions, records: bytes, version: int = 9) -> dict[int, int]:
    """Error code per partition of one raw Produce (acks=all)."""
    response = wire.produce(port, version, [(topic, [(p, records) for p in partitions])])
    return {p.index: p.error_code for _, parts in response.topics for p in parts}


def produce_ok(port: int, topic: str, partition: int, *values: bytes) -> int:
    response = wire.produce(port, 9, [(topic, [(partition, batch(*values))])])
    (_, [result]), = response.topics
    assert result.error_code == wire.NONE, result
    return result.base_offset


# ---------------------------------------------------------------- placement


def test_new_partitions_go_to_the_log_dir_holding_the_fewest(broker_factory, tmp_path):
    dirs = [tmp_path / f"logs{i}" for i in range(3)]
    broker = broker_factory({"log.dirs": log_dirs_override(dirs[:2])})
    create_topic(broker.bootstrap, "first", 6)
    assert [len(partitions_in(d, "first")) for d in dirs[:2]] == [3, 3]

    # A third, empty dir joins: it takes new partitions until it catches up,
    # then ties go round in log.dirs order.
    broker.restart({"log.dirs": log_dirs_override(dirs)})
    create_topic(broker.bootstrap, "second", 6)
    assert [len(partitions_in(d, "second")) for d in dirs] == [1, 1, 4]
    assert [user_partition_count(d) for d in dirs] == [4, 4, 4]
    for topic, count in (("first", 6), ("second", 6)):
        placed = [p for d in dirs for p in partitions_in(d, topic)]
        assert sorted(placed) == list(range(count)), f"each partition of {topic} lives in exactly one dir"


# ---------------------------------------------------------------- DescribeLogDirs


def fill_partitions(broker, topic: str, partitions: int) -> None:
    """Partition p gets p + 1 batches of different sizes, so no two sizes match."""
    for p in range(partitions):
        for i in range(p + 1):
            produce_ok(broker.port, topic, p, b"v" * (100 * (i + 1)), b"w" * (7 * p))


def expected_sizes(dirs: list[Path], topic: str) -> dict[str, dict[int, int]]:
    return {str(d): {p: log_bytes(d / f"{topic}-{p}") for p in partitions_in(d, topic)} for d in dirs}


def test_describe_log_dirs_reports_each_dir_and_partition_size(broker_factory, tmp_path):
    dirs = [tmp_path / f"logs{i}" for i in range(2)]
    broker = broker_factory({"log.dirs": log_dirs_override(dirs)})
    create_topic(broker.bootstrap, "sized", 4)
    create_topic(broker.bootstrap, "other", 1)
    fill_partitions(broker, "sized", 4)
    expected = expected_sizes(dirs, "sized")
    assert all(len(sizes) == 2 for sizes in expected.values()), expected
    assert len({size for sizes in expected.values() for size in sizes.values()}) == 4, "sizes differ"

    # A real client: kafka-python's admin client, at the version it negotiates.
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (reply,) = admin.describe_log_dirs()
    finally:
        admin.close()
    assert reply["broker"] == 1
    described = {d["log_dir"]: d for d in reply["log_dirs"]}
    assert set(described) == {str(d) for d in dirs}
    for path, log_dir in described.items():
        assert log_dir["error_code"] == 0
        topics = {t["name"]: t["partitions"] for t in log_dir["topics"]}
        sizes = {p["partition_index"]: p["partition_size"] for p in topics["sized"]}
        assert sizes == expected[path]
        assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topics["sized"])

    # Every version on the wire; v4 adds the volume's total and usable bytes.
    for version in (1, 2, 3, 4):
        response = wire.describe_log_dirs(broker.port, version)
        assert response.error_code == wire.NONE
        for d in dirs:
            result = response.dir(str(d))
            assert result.error_code == wire.NONE
            assert {p.index: p.size for p in result.topics["sized"]} == expected[str(d)], f"v{version}"
            if version >= 4:
                volume = os.statvfs(d)
                assert result.total_bytes == volume.f_blocks * volume.f_frsize
                assert 0 < result.usable_bytes <= result.total_bytes
            else:
                assert (result.total_bytes, result.usable_bytes) == (-1, -1)

    # Only what is asked for; an unknown topic or partition is simply absent.
    asked = wire.describe_log_dirs(broker.port, 4, [("sized", [0, 3, 99]), ("missing", [0])])
    reported = {(t, p.index) for r in asked.results for t, ps in r.topics.items() for p in ps}
    assert reported == {("sized", 0), ("sized", 3)}

    # Sizes survive a restart: the log is what it was on disk.
    broker.restart()
    response = wire.describe_log_dirs(broker.port, 4)
    for d in dirs:
        assert {p.index: p.size for p in response.dir(str(d)).topics["sized"]} == expected[str(d)]


# ---------------------------------------------------------------- a failing log dir


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs: filled up, every write to it fails with ENOSPC."""
    path = tmp_path / "small"
    path.mkdir()
    if os.geteuid() != 0:
        skip_unless_ci("filling a log dir needs a tmpfs mount, which needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "strom-test", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        skip_unless_ci(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        # Lazily: a broker left running by a failed test still holds files there.
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Writes a filler file until the file system refuses another byte."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 16, 4096, 512, 1):
            for _ in range(100_000):
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def placement(dirs: list[Path], topic: str, partitions: int) -> list[list[int]]:
    placed = [sorted(partitions_in(d, topic)) for d in dirs]
    assert sorted(p for ps in placed for p in ps) == list(range(partitions))
    assert all(placed), f"every dir holds a partition of {topic}: {placed}"
    return placed


def gauge(metrics_port: int, name: str) -> float:
    """One unlabelled gauge of the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.findall(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert len(found) == 1, f"{name} in {text!r}"
    return float(found[0])


def metadata_states(port: int, topic: str) -> dict[int, wire.MetadataPartition]:
    found = wire.parse_metadata(wire.call(port, wire.metadata_request(1, [topic]))).topic(topic)
    assert found is not None and found.error_code == wire.NONE
    return {p.index: p for p in found.partition_states}


def test_a_full_log_dir_takes_only_its_partitions_offline(small_tmpfs, broker_factory, tmp_path):
    healthy = tmp_path / "healthy"
    dirs = [healthy, small_tmpfs]
    metrics_port = free_port()
    broker = broker_factory(
        {
            "log.dirs": log_dirs_override(dirs),
            "metrics.listener": f"http://127.0.0.1:{metrics_port}",
            # Only the appends below may find the disk full.
            "replica.high.watermark.checkpoint.interval.ms": 3_600_000,
            "log.flush.offset.checkpoint.interval.ms": 3_600_000,
        }
    )
    create_topic(broker.bootstrap, "disk", 4)
    on_healthy, on_full = placement(dirs, "disk", 4)
    acked = {p: produce_ok(broker.port, "disk", p, f"before-{p}".encode()) for p in range(4)}

    fill(small_tmpfs)
    # A record larger than a page needs blocks the volume no longer has.
    codes = produce_codes(broker.port, "disk", on_full, batch(b"x" * 20_000))
    assert codes == {p: wire.KAFKA_STORAGE_ERROR for p in on_full}

    # The dir is offline now: even a write that would fit is refused, by
    # every version, while the healthy dir takes appends.
    assert produce_codes(broker.port, "disk", on_full, batch(b"y")) == {p: wire.KAFKA_STORAGE_ERROR for p in on_full}
    assert produce_codes(broker.port, "disk", on_full, batch(b"y"), version=3) == {
        p: wire.NOT_LEADER_OR_FOLLOWER for p in on_full
    }
    assert produce_codes(broker.port, "disk", on_healthy, batch(b"after")) == {p: wire.NONE for p in on_healthy}

    fetched = wire.fetch(broker.port, 12, [("disk", [wire.FetchPartition(p, 0) for p in range(4)])]).partitions()
    for p in on_full:
        assert fetched[("disk", p)].error_code == wire.KAFKA_STORAGE_ERROR
    for p in on_healthy:
        assert fetched[("disk", p)].error_code == wire.NONE
        assert fetched[("disk", p)].offsets == [acked[p], acked[p] + 1]
    old_fetch = wire.fetch(broker.port, 4, [("disk", [wire.FetchPartition(p, 0) for p in on_full])]).partitions()
    assert {e.error_code for e in old_fetch.values()} == {wire.NOT_LEADER_OR_FOLLOWER}

    # ListOffsets: a real client cannot ask a partition without a leader
    # (librdkafka answers itself), so the offline ones go raw.
    listed = wire.list_offsets_v5(broker.port, "disk", range(4))
    assert {p: listed[p][0] for p in on_full} == {p: wire.KAFKA_STORAGE_ERROR for p in on_full}
    assert {p: listed[p] for p in on_healthy} == {p: (wire.NONE, 2) for p in on_healthy}
    consumer = confluent_consumer(broker.bootstrap)
    try:
        for p in on_healthy:
            assert consumer.get_watermark_offsets(TopicPartition("disk", p), timeout=10, cached=False) == (0, 2)
    finally:
        consumer.close()

    # Metadata, as Kafka shows a partition whose only replica's dir failed.
    states = metadata_states(broker.port, "disk")
    for p in on_full:
        assert (states[p].error_code, states[p].leader, states[p].offline_replicas) == (wire.LEADER_NOT_AVAILABLE, -1, [1])
    for p in on_healthy:
        assert (states[p].error_code, states[p].leader, states[p].offline_replicas) == (wire.NONE, 1, [])
    listed = admin_client(broker.bootstrap).list_topics("disk", timeout=10).topics["disk"].partitions
    assert {p for p, meta in listed.items() if meta.leader == -1} == set(on_full)
    # DescribeTopicPartitions too, through kafka-topics.sh's report of unavailable partitions.
    [unavailable] = json.loads(
        admin_ok(broker, "topics", "--describe", "--topic", "disk", "--unavailable-partitions", "--format", "json")
    )
    reported = {p["partition"]: (p["leader"], p["offline_replicas"]) for p in unavailable["partitions"]}
    assert reported == {p: (None, [1]) for p in on_full}
    assert gauge(metrics_port, "kafka_controller_kafkacontroller_offlinepartitionscount") == len(on_full)
    assert gauge(metrics_port, "kafka_log_logmanager_offlinelogdirectorycount") == 1

    described = wire.describe_log_dirs(broker.port, 4)
    full = described.dir(str(small_tmpfs))
    assert (full.error_code, full.topics, full.total_bytes, full.usable_bytes) == (wire.KAFKA_STORAGE_ERROR, {}, -1, -1)
    assert described.dir(str(healthy)).error_code == wire.NONE
    assert sorted(p.index for p in described.dir(str(healthy)).topics["disk"]) == on_healthy

    # New partitions avoid the failed dir; the broker serves on.
    create_topic(broker.bootstrap, "later", 2)
    assert partitions_in(healthy, "later") == {0, 1}
    produce_ok(broker.port, "later", 1, b"fine")
    assert broker.alive()
    assert "log dir failed" in broker.log_tail(400)

    # Room again and a restart: the failed dir is recovered and serves what
    # was acknowledged before the failure, nothing of the refused appends.
    broker.stop()
    (small_tmpfs / "filler").unlink()
    broker.start()
    fetched = wire.fetch(broker.port, 12, [("disk", [wire.FetchPartition(p, 0) for p in on_full])]).partitions()
    for p in on_full:
        assert fetched[("disk", p)].error_code == wire.NONE
        assert fetched[("disk", p)].offsets == [acked[p]]
        assert fetched[("disk", p)].batches[0].records[0].value == f"before-{p}".encode()
    assert produce_codes(broker.port, "disk", on_full, batch(b"again")) == {p: wire.NONE for p in on_full}
    assert wire.describe_log_dirs(broker.port, 4).dir(str(small_tmpfs)).error_code == wire.NONE
    assert gauge(metrics_port, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert gauge(metrics_port, "kafka_log_logmanager_offlinelogdirectorycount") == 0


def replication_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    path = log_dir / "replication-offset-checkpoint"
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()[2:]
    return {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines)}


def test_a_failing_checkpoint_takes_its_dir_offline_and_spares_the_others(small_tmpfs, broker_factory, tmp_path):
    healthy = tmp_path / "healthy"
    dirs = [healthy, small_tmpfs]
    broker = broker_factory(
        {
            "log.dirs": log_dirs_override(dirs),
            "replica.high.watermark.checkpoint.interval.ms": 100,
            "log.flush.offset.checkpoint.interval.ms": 100,
        }
    )
    create_topic(broker.bootstrap, "ckpt", 2)
    (on_healthy,), (on_full,) = placement(dirs, "ckpt", 2)
    produce_ok(broker.port, "ckpt", on_full, b"one")
    wait_until(
        lambda: replication_checkpoint(small_tmpfs).get(("ckpt", on_full)) == 1,
        10,
        "the tmpfs dir's checkpoint before it fills",
    )

    fill(small_tmpfs)
    wait_until(
        lambda: wire.describe_log_dirs(broker.port, 4).dir(str(small_tmpfs)).error_code == wire.KAFKA_STORAGE_ERROR,
        10,
        "the checkpoint failure to take the full dir offline",
    )
    assert produce_codes(broker.port, "ckpt", [on_full], batch(b"two")) == {on_full: wire.KAFKA_STORAGE_ERROR}

    # The healthy dir's checkpoints carry on.
    for value in (b"a", b"b", b"c"):
        produce_ok(broker.port, "ckpt", on_healthy, value)
    wait_until(
        lambda: replication_checkpoint(healthy).get(("ckpt", on_healthy)) == 3,
        10,
        "the healthy dir's checkpoint to record the new high watermark",
    )
    assert broker.alive()
