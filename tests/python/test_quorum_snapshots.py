"""KIP-630 metadata snapshots on disk: a KRaft node writes
`<offset>-<epoch>.checkpoint` files in Kafka's layout (what
RecordsSnapshotWriter writes and kafka-dump-log.sh reads), rebuilds its
metadata from one at restart, and refuses to start on a damaged one rather
than load garbage as state."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from harness import create_topic, strom_ok, topic_names, wait_until
from test_storage_format import KraftNode, random_uuid, read_meta, varint

SNAPSHOT_WAIT_S = 30
# Kafka's metadata record types (KIP-631 frame: frame version, type, version).
TOPIC_RECORD = 2


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the record batch v2 checksum."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def read_batches(data: bytes) -> list[dict]:
    """Record batches v2, each CRC checked: base offset, epoch, control
    flag and records as (offset, key, value)."""
    batches, position = [], 0
    while position < len(data):
        base_offset, length, epoch, magic, crc = struct.unpack_from(">qiibI", data, position)
        end = position + 12 + length
        assert magic == 2 and end <= len(data), "a whole v2 batch"
        assert crc32c(data[position + 21 : end]) == crc, f"CRC of the batch at byte {position}"
        attributes = struct.unpack_from(">h", data, position + 21)[0]
        producer_id, _, base_sequence, count = struct.unpack_from(">qhii", data, position + 43)
        assert (attributes & 0x07, producer_id, base_sequence) == (0, -1, -1), "uncompressed, no producer"
        records, at = [], position + 61
        for _ in range(count):
            length_, used = varint(data, at)
            at += used
            field = at + 1  # past the record's attributes
            _, used = varint(data, field)  # timestamp delta
            field += used
            offset_delta, used = varint(data, field)
            field += used
            key_length, used = varint(data, field)
            field += used
            key = data[field : field + key_length] if key_length >= 0 else None
            field += max(key_length, 0)
            value_length, used = varint(data, field)
            field += used
            records.append((base_offset + offset_delta, key, data[field : field + value_length]))
            at += length_
        batches.append({"epoch": epoch, "control": bool(attributes & 0x20), "records": records})
        position = end
    return batches


def snapshots(metadata_dir: Path) -> list[Path]:
    """The snapshot files past the bootstrap checkpoint."""
    partition = metadata_dir / "__cluster_metadata-0"
    return sorted(p for p in partition.glob("*.checkpoint") if not p.name.startswith("0" * 20))


def snapshot_holding(metadata_dir: Path, needle: bytes) -> tuple[Path, bytes] | None:
    """The latest snapshot file, if it holds `needle` (snapshots replace
    each other as metadata commits: one may go while it is read)."""
    for path in reversed(snapshots(metadata_dir)):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        return (path, data) if needle in data else None
    return None


@pytest.fixture
def kraft(broker_factory):
    node = KraftNode(broker_factory(start=False), **{"metadata.log.max.record.bytes.between.snapshots": "1"})
    assert node.format(random_uuid(), "--standalone").returncode == 0
    node.broker.start()
    return node


def test_a_snapshot_file_is_kafkas_checkpoint_layout_and_rebuilds_the_metadata(kraft, tmp_path):
    create_topic(kraft.broker.bootstrap, "kept-by-snapshot")
    holding = lambda: snapshot_holding(kraft.dirs[0], b"kept-by-snapshot")
    path, content = wait_until(holding, SNAPSHOT_WAIT_S, "a metadata snapshot holding the topic")
    end_offset, epoch = (int(part) for part in path.stem.split("-"))
    batches = read_batches(content)

    # Offsets run from 0 without a gap, every batch in the snapshot's epoch.
    offsets = [offset for batch in batches for offset, _, _ in batch["records"]]
    assert offsets == list(range(len(offsets)))
    assert {batch["epoch"] for batch in batches} == {epoch}
    # Header, kraft.version 1 and the voters in the first control batch,
    # the footer alone in the last.
    control_types = lambda batch: [struct.unpack(">hh", key)[1] for _, key, _ in batch["records"]]
    assert batches[0]["control"] and control_types(batches[0]) == [3, 5, 6]
    assert batches[-1]["control"] and control_types(batches[-1]) == [4]
    header = batches[0]["records"][0][2]
    assert struct.unpack_from(">h", header)[0] == 0 and len(header) == 11, "SnapshotHeaderRecord v0"
    assert batches[0]["records"][1][2] == b"\x00\x00\x00\x01\x00", "KRaftVersionRecord v0, kraft.version 1"
    # The metadata records: KIP-631 frames, the topic among them.
    data = [value for batch in batches[1:-1] for _, key, value in batch["records"]]
    assert all(batch["control"] is False for batch in batches[1:-1])
    assert data and all(value[0] == 1 for value in data), "frame version 1"
    topics = [value for value in data if value[1] == TOPIC_RECORD]
    assert any(b"kept-by-snapshot" in value for value in topics)
    assert end_offset > 0

    # `strom dump-log` reads it as kafka-dump-log.sh does.
    copy = tmp_path / path.name
    copy.write_bytes(content)
    dumped = strom_ok("dump-log", "--files", str(copy), "--cluster-metadata-decoder")
    assert f"Snapshot end offset: {end_offset}, epoch: {epoch}" in dumped, dumped
    assert ' SnapshotHeader {"version":0,"lastContainedLogTimestamp":' in dumped, dumped
    assert ' KRaftVersion {"version":0,"kRaftVersion":1}' in dumped, dumped
    assert ' KRaftVoters {"version":0,"voters":[{"voterId":1,' in dumped, dumped
    assert ' SnapshotFooter {"version":0}' in dumped, dumped
    assert "TopicRecord" in dumped and "kept-by-snapshot" in dumped, dumped

    # Restarted, the node rebuilds its metadata from the snapshot.
    kraft.broker.stop()
    kraft.broker.start()
    wait_until(lambda: "kept-by-snapshot" in topic_names(kraft.broker.bootstrap), 30, "the topic back")


def test_a_damaged_snapshot_stops_the_start_naming_the_file(kraft):
    create_topic(kraft.broker.bootstrap, "doomed")
    wait_until(lambda: snapshot_holding(kraft.dirs[0], b"doomed"), SNAPSHOT_WAIT_S, "a snapshot holding the topic")
    kraft.broker.stop()
    path = snapshots(kraft.dirs[0])[-1]
    whole = path.read_bytes()
    middle = len(whole) // 2
    flipped = whole[:middle] + bytes([whole[middle] ^ 0x08]) + whole[middle + 1 :]
    for damaged in [flipped, whole[:-5]]:
        path.write_bytes(damaged)
        reason = kraft.start_refused()
        assert path.name in reason and "invalid snapshot" in reason, reason


def test_the_bootstrap_checkpoint_is_what_kafkas_formatter_writes(broker_factory):
    node = KraftNode(broker_factory(start=False))
    assert node.format(random_uuid(), "--standalone").returncode == 0
    path = node.dirs[0] / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    batches = read_batches(path.read_bytes())
    # Epoch 0: header, kraft.version 1 and the voter set in one control
    # batch, the bootstrap feature levels in a batch of records (as Kafka
    # 4.4's formatter writes them), the footer in a last control batch.
    assert [batch["epoch"] for batch in batches] == [0, 0, 0]
    assert [batch["control"] for batch in batches] == [True, False, True]
    offsets = [offset for batch in batches for offset, _, _ in batch["records"]]
    assert offsets == list(range(len(offsets))) and len(batches[1]["records"]) == 3
    dumped = strom_ok("dump-log", "--files", str(path), "--deep-iteration", "--cluster-metadata-decoder")
    for feature in ("metadata.version", "eligible.leader.replicas.version", "group.version"):
        assert f'"{feature}"' in dumped, dumped
    assert "Snapshot end offset: 0, epoch: 0" in dumped, dumped
    directory_id = read_meta(node.dirs[0])["directory.id"]
    port = node.broker.overrides["controller.quorum.bootstrap.servers"].rsplit(":", 1)[1]
    voter = (
        f'{{"voterId":1,"voterDirectoryId":"{directory_id}","endpoints":[{{"name":"CONTROLLER",'
        f'"host":"127.0.0.1","port":{port}}}]'
    )
    assert f' KRaftVoters {{"version":0,"voters":[{voter}' in dumped, dumped
