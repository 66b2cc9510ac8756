"""`strom storage format` and `random-uuid`, and what start-up makes of the
log dirs' meta.properties: a KRaft node (process.roles set) starts only on
dirs formatted for its cluster and node id, a single node without
process.roles formats its dirs itself, as Kafka's storage tool and KRaft
start-up behave."""

from __future__ import annotations

import base64
import struct
import subprocess
from pathlib import Path

import pytest

from harness import Broker, admin_client, create_topic, free_port, strom, topic_names

TOOL_TIMEOUT_S = 30


def random_uuid() -> str:
    done = strom("storage", "random-uuid")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def read_meta(directory: Path) -> dict[str, str]:
    lines = (directory / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


class KraftNode:
    """A combined broker and controller whose quorum is itself, written as a
    server.properties for the storage tool and run through the harness."""

    def __init__(self, broker: Broker, **extra: str):
        controller_port = free_port()
        workdir = broker.workdir
        self.dirs = [workdir / "data-a", workdir / "data-b"]
        self.broker = broker
        self.broker.overrides.update(
            {
                "process.roles": "broker,controller",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.broker.port},CONTROLLER://127.0.0.1:{controller_port}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
                "log.dirs": ",".join(str(d) for d in self.dirs),
                **extra,
            }
        )
        self.properties = workdir / "server.properties"
        self.write_properties()

    def write_properties(self) -> None:
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in self.broker.overrides.items()))

    def format(self, cluster_id: str, *flags: str) -> subprocess.CompletedProcess:
        self.write_properties()
        return strom("storage", "format", "--config", str(self.properties), "--cluster-id", cluster_id, *flags)

    def start_refused(self) -> str:
        """Starts the server expecting it to refuse; returns its one-line reason."""
        done = subprocess.run(self.broker.command(), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        assert done.returncode == 1, f"started or crashed instead of refusing: {done.returncode}\n{done.stderr}"
        return done.stderr.strip().splitlines()[-1]


@pytest.fixture
def node(broker_factory):
    def make(**extra: str) -> KraftNode:
        return KraftNode(broker_factory(start=False), **extra)

    return make


def test_random_uuid_prints_a_kafka_cluster_id():
    ids = {random_uuid() for _ in range(3)}
    assert len(ids) == 3
    for printed in ids:
        assert len(printed) == 22 and not printed.startswith("-"), printed
        assert len(base64.urlsafe_b64decode(printed + "==")) == 16


def test_format_standalone_then_start_serves_clients_in_the_formatted_cluster(node):
    kraft = node()
    cluster_id = random_uuid()
    done = kraft.format(cluster_id, "--standalone")
    assert done.returncode == 0, done.stderr
    assert f"Formatting dynamic metadata voter directory {kraft.dirs[0]}." in done.stdout
    assert f"Formatting data directory {kraft.dirs[1]}." in done.stdout
    metas = [read_meta(d) for d in kraft.dirs]
    for meta in metas:
        assert (meta["version"], meta["cluster.id"], meta["node.id"]) == ("1", cluster_id, "1")
        assert len(meta["directory.id"]) == 22
    assert metas[0]["directory.id"] != metas[1]["directory.id"]
    assert_bootstrap_checkpoint(kraft.dirs[0], [1])
    assert not (kraft.dirs[1] / "__cluster_metadata-0").exists()

    kraft.broker.start()
    assert admin_client(kraft.broker.bootstrap).list_topics(timeout=15).cluster_id == cluster_id
    create_topic(kraft.broker.bootstrap, "formatted")
    assert "formatted" in topic_names(kraft.broker.bootstrap)
    kraft.broker.stop()
    assert [read_meta(d) for d in kraft.dirs] == metas, "start-up rewrote a formatted dir"


def assert_bootstrap_checkpoint(metadata_dir: Path, voter_ids: list[int]) -> None:
    """Kafka's KIP-853 bootstrap snapshot: a control batch of the snapshot
    header (type 3), kraft.version (5) and the voters (6), a batch of the
    bootstrap feature levels, then the footer (4)."""
    data = (metadata_dir / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint").read_bytes()
    types, features, position = [], b"", 0
    while position < len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        magic, attributes, count = data[position + 16], struct.unpack_from(">h", data, position + 21)[0], struct.unpack_from(">i", data, position + 57)[0]
        assert magic == 2, "a v2 batch"
        if not attributes & 0x20:
            features += data[position + 61 : position + 12 + length]
            position += 12 + length
            continue
        # Each record: length, attributes, timestamp delta, offset delta, key length, key (version, type).
        record = position + 61
        for _ in range(count):
            record_length, used = varint(data, record)
            offset = record + used + 1
            for _ in range(3):
                _, used = varint(data, offset)
                offset += used
            types.append(struct.unpack_from(">h", data, offset + 2)[0])
            record += used_varint(data, record) + record_length
        position += 12 + length
    assert types == [3, 5, 6, 4], types
    assert b"metadata.version" in features and b"group.version" in features, features
    for voter_id in voter_ids:
        assert struct.pack(">i", voter_id) in data


def varint(data: bytes, at: int) -> tuple[int, int]:
    """A zigzag varint at `at`: (value, bytes used)."""
    value, shift, used = 0, 0, 0
    while True:
        byte = data[at + used]
        value |= (byte & 0x7F) << shift
        used += 1
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), used
        shift += 7


def used_varint(data: bytes, at: int) -> int:
    return varint(data, at)[1]


def test_format_with_static_voters_of_itself_needs_no_quorum_flag(node):
    kraft = node()
    controller_port = kraft.broker.overrides["controller.quorum.bootstrap.servers"].rsplit(":", 1)[1]
    del kraft.broker.overrides["controller.quorum.bootstrap.servers"]
    kraft.broker.overrides["controller.quorum.voters"] = f"1@127.0.0.1:{controller_port}"
    done = kraft.format(random_uuid())
    assert done.returncode == 0, done.stderr
    assert f"Formatting metadata directory {kraft.dirs[0]}." in done.stdout
    kraft.broker.start()


def test_a_kraft_node_refuses_to_start_on_unformatted_dirs(node):
    kraft = node()
    reason = kraft.start_refused()
    assert f"No meta.properties found in {kraft.dirs[0]}" in reason, reason
    assert "strom storage format" in reason
    assert not (kraft.dirs[0] / "meta.properties").exists(), "a KRaft node formatted itself"


def test_dirs_of_two_clusters_are_refused(node):
    kraft = node()
    first, second = random_uuid(), random_uuid()
    kraft.broker.overrides["log.dirs"] = str(kraft.dirs[0])
    assert kraft.format(first, "--standalone").returncode == 0
    kraft.broker.overrides["log.dirs"] = str(kraft.dirs[1])
    assert kraft.format(second, "--standalone").returncode == 0
    kraft.broker.overrides["log.dirs"] = ",".join(str(d) for d in kraft.dirs)
    reason = kraft.start_refused()
    expected = f"Invalid cluster.id in: {kraft.dirs[1] / 'meta.properties'}. Expected {first}, but read {second}"
    assert expected in reason, reason
    done = kraft.format(second, "--standalone", "--ignore-formatted")
    assert done.returncode == 1 and "Invalid cluster.id" in done.stderr, done.stderr


def test_a_node_id_other_than_the_formatted_one_is_refused(node):
    kraft = node()
    assert kraft.format(random_uuid(), "--standalone").returncode == 0
    kraft.broker.overrides["node.id"] = "2"
    reason = kraft.start_refused()
    assert "Stored node id 1 doesn't match previous node id 2" in reason, reason


def test_format_refuses_what_kafkas_storage_tool_refuses(node):
    kraft = node()
    cluster_id = random_uuid()
    for bad in ["not-a-uuid", "AAAAAAAAAAAAAAAAAAAAAA"]:
        done = kraft.format(bad, "--standalone")
        assert done.returncode == 1 and f"Cluster ID string {bad}" in done.stderr, done.stderr
    done = kraft.format(cluster_id)
    assert done.returncode == 1
    assert "you must specify one of the following: --standalone, --initial-controllers" in done.stderr
    assert kraft.format(cluster_id, "--standalone").returncode == 0
    again = kraft.format(cluster_id, "--standalone")
    assert again.returncode == 1 and "is already formatted. Use --ignore-formatted" in again.stderr
    ignored = kraft.format(cluster_id, "--standalone", "--ignore-formatted")
    assert ignored.returncode == 0 and "All of the log directories are already formatted." in ignored.stdout

    broker_only = node(**{"process.roles": "broker", "node.id": "2"})
    broker_only.broker.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{broker_only.broker.port}"
    done = broker_only.format(cluster_id, "--standalone")
    assert done.returncode == 1 and "You can only use --standalone on a controller." in done.stderr, done.stderr

    legacy = node()
    for key in ["process.roles", "controller.quorum.bootstrap.servers"]:
        del legacy.broker.overrides[key]
    done = legacy.format(cluster_id)
    assert done.returncode == 1 and "no process.roles" in done.stderr, done.stderr


def test_initial_controllers_give_the_voter_its_directory_id(node):
    kraft = node()
    directory_id = random_uuid()
    done = kraft.format(random_uuid(), "--initial-controllers", f"1@127.0.0.1:9093:{directory_id}")
    assert done.returncode == 0, done.stderr
    assert read_meta(kraft.dirs[0])["directory.id"] == directory_id
    assert read_meta(kraft.dirs[1])["directory.id"] != directory_id
    both = kraft.format(random_uuid(), "--standalone", "--initial-controllers", f"1@h:1:{directory_id}")
    assert both.returncode != 0 and "cannot be used with" in both.stderr, both.stderr


def test_a_standalone_voter_takes_its_voters_from_the_checkpoint_whatever_the_bootstrap_servers(node):
    kraft = node()
    # A bootstrap server that is not the node does not make it wait for others.
    kraft.broker.overrides["controller.quorum.bootstrap.servers"] += ",127.0.0.2:9093"
    cluster_id = random_uuid()
    assert kraft.format(cluster_id, "--standalone").returncode == 0
    kraft.broker.start()
    assert admin_client(kraft.broker.bootstrap).list_topics(timeout=15).cluster_id == cluster_id


def test_the_single_node_default_formats_itself_and_keeps_its_cluster_id(broker):
    meta = read_meta(broker.data_dir)
    assert (meta["version"], meta["node.id"]) == ("1", "1")
    cluster_id = admin_client(broker.bootstrap).list_topics(timeout=15).cluster_id
    assert meta["cluster.id"] == cluster_id

    # As in Kafka, the cluster id lives in meta.properties only: a data dir
    # whose metadata log survives without it is refused, naming the problem.
    broker.stop()
    path = broker.data_dir / "meta.properties"
    saved = path.read_text()
    path.unlink()
    refused = subprocess.run(broker.command(), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert refused.returncode == 1
    assert "exists but no meta.properties names its cluster" in refused.stderr

    # Restored, it starts again in the same cluster.
    path.write_text(saved)
    broker.start()
    assert admin_client(broker.bootstrap).list_topics(timeout=15).cluster_id == cluster_id


def test_process_roles_without_a_quorum_stop_the_start_naming_the_key(node):
    kraft = node()
    del kraft.broker.overrides["controller.quorum.bootstrap.servers"]
    reason = kraft.start_refused()
    assert "controller.quorum.voters" in reason and "either controller.quorum.bootstrap.servers" in reason, reason
