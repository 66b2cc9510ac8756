"""`strom dump-log` on segments a real producer wrote: batches, records, index
entries and damage reported the way Kafka's kafka-dump-log.sh reports them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import OutRecord, confluent_producer, create_topic, now_ms, produce_confluent, strom_binary

RECORDS = 400
SEGMENT = "00000000000000000000"
# Small index intervals so a few hundred records give many index entries.
BROKER_CONFIG = {"log.index.interval.bytes": 512}

BATCH_LINE = re.compile(
    r"^baseOffset: (?P<base>\d+) lastOffset: (?P<last>\d+) count: (?P<count>\d+) .*"
    r" position: (?P<position>\d+) CreateTime: \d+ size: (?P<size>\d+) magic: 2"
    r" compresscodec: (?P<codec>\w+) crc: \d+ isvalid: (?P<valid>true|false)$"
)
RECORD_LINE = re.compile(
    r"^\| offset: (?P<offset>\d+) CreateTime: (?P<ts>\d+) keySize: (?P<key_size>-?\d+) valueSize: -?\d+"
    r" sequence: -?\d+ headerKeys: \[(?P<header_keys>[^\]]*)\]"
    r"(?: headers: \[(?P<headers>[^\]]*)\])?(?: key: (?P<key>\S+))?(?: payload: (?P<payload>.*))?$"
)


def dump_log(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(strom_binary()), "dump-log", *args], capture_output=True, text=True, timeout=timeout_s
    )


def make_records(count: int) -> list[OutRecord]:
    base_ms = now_ms() - 60_000
    return [
        OutRecord(
            key=b"key-%04d" % i,
            value=b"value-%06d-" % i + b"x" * (i % 50),
            headers=(("seq", b"%d" % i), ("source", b"dump-log-test")),
            timestamp_ms=base_ms + i,
        )
        for i in range(count)
    ]


def produce(broker, topic: str, codec: str) -> list[OutRecord]:
    create_topic(broker.bootstrap, topic)
    records = make_records(RECORDS)
    producer = confluent_producer(
        broker.bootstrap, **{"linger.ms": 5, "batch.num.messages": 25, "compression.type": codec}
    )
    deliveries = produce_confluent(producer, topic, records)
    assert [d.offset for d in deliveries] == list(range(RECORDS))
    return records


def segment_files(broker, topic: str) -> dict[str, Path]:
    directory = broker.data_dir / f"{topic}-0"
    return {suffix: directory / f"{SEGMENT}.{suffix}" for suffix in ("log", "index", "timeindex")}


def batch_lines(stdout: str) -> list[re.Match]:
    lines = [line for line in stdout.splitlines() if line.startswith("baseOffset:")]
    matches = [BATCH_LINE.match(line) for line in lines]
    assert all(matches), f"unexpected batch line in:\n{stdout}"
    return matches


def assert_batches_cover(batches: list[re.Match], records: int, codec: str) -> None:
    """Contiguous batches whose counts add up, positions follow sizes, every CRC valid."""
    assert len(batches) > 1, "the producer's small batches are stored as they came"
    expected_base, expected_position = 0, 0
    for batch in batches:
        base, last, count = int(batch["base"]), int(batch["last"]), int(batch["count"])
        assert base == expected_base and last - base + 1 == count
        assert int(batch["position"]) == expected_position
        assert batch["codec"] == codec and batch["valid"] == "true"
        expected_base, expected_position = last + 1, expected_position + int(batch["size"])
    assert expected_base == records


def index_entries(stdout: str) -> list[tuple[int, int]]:
    return [
        (int(m[1]), int(m[2])) for m in re.finditer(r"^offset: (\d+) position: (\d+)$", stdout, re.MULTILINE)
    ]


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_segments_of_a_stopped_broker_show_every_batch_record_and_index_entry(broker_factory, codec):
    broker = broker_factory(BROKER_CONFIG)
    topic = f"dump-{codec}"
    records = produce(broker, topic, codec)
    broker.stop()
    files = segment_files(broker, topic)

    shallow = dump_log("--files", str(files["log"]))
    assert shallow.returncode == 0, shallow.stderr
    assert shallow.stdout.splitlines()[:2] == [f"Dumping {files['log']}", "Log starting offset: 0"]
    batches = batch_lines(shallow.stdout)
    assert_batches_cover(batches, RECORDS, codec)

    data = dump_log("--files", str(files["log"]), "--print-data-log")
    assert data.returncode == 0, data.stderr
    shown = [RECORD_LINE.match(line) for line in data.stdout.splitlines() if line.startswith("|")]
    assert all(shown) and len(shown) == RECORDS
    for i, (line, record) in enumerate(zip(shown, records)):
        assert int(line["offset"]) == i and int(line["ts"]) == record.timestamp_ms
        assert line["key"] == record.key.decode() and int(line["key_size"]) == len(record.key)
        assert line["payload"] == record.value.decode()
        assert line["header_keys"] == "seq,source"
        assert line["headers"] == f"seq={i},source=dump-log-test"

    indexes = dump_log("--files", f"{files['index']},{files['timeindex']}")
    assert indexes.returncode == 0, indexes.stderr
    assert "Mismatches" not in indexes.stderr and "not found" not in indexes.stderr
    entries = index_entries(indexes.stdout)
    assert len(entries) >= 3, "the small index interval gives several entries"
    batch_at = {int(b["position"]): int(b["last"]) for b in batches}
    for offset, position in entries:
        assert batch_at.get(position) == offset, f"entry ({offset}, {position}) is not a batch's last offset"
    times = re.findall(r"^timestamp: (\d+) offset: (\d+)$", indexes.stdout, re.MULTILINE)
    assert times and all(int(offset) < RECORDS for _, offset in times)

    sane = dump_log("--index-sanity-check", "--files", str(files["index"]), "--files", str(files["timeindex"]))
    assert sane.returncode == 0, sane.stderr
    assert sane.stdout.count("passed sanity check.") == 2


def test_segments_of_a_running_broker_can_be_dumped(broker_factory):
    broker = broker_factory(BROKER_CONFIG)
    topic = "dump-live"
    produce(broker, topic, "gzip")
    files = segment_files(broker, topic)

    live = dump_log("--files", ",".join(str(files[s]) for s in ("log", "index", "timeindex")))
    assert live.returncode == 0, live.stderr
    assert_batches_cover(batch_lines(live.stdout), RECORDS, "gzip")
    live_entries = index_entries(live.stdout)
    assert live_entries, live.stdout
    assert files["index"].stat().st_size > 8 * len(live_entries), "the active index is still preallocated"

    broker.stop()
    stopped = dump_log("--files", str(files["index"]))
    assert index_entries(stopped.stdout) == live_entries, "the trimmed index holds the same entries"


def test_a_flipped_byte_shows_isvalid_false_and_fails(broker_factory, tmp_path):
    broker = broker_factory()
    produce(broker, "dump-damaged", "none")
    broker.stop()
    damaged = tmp_path / f"{SEGMENT}.log"
    shutil.copy(segment_files(broker, "dump-damaged")["log"], damaged)
    batches = batch_lines(dump_log("--files", str(damaged)).stdout)
    second = batches[1]
    flip_at = int(second["position"]) + int(second["size"]) - 3  # inside the last record's value
    data = bytearray(damaged.read_bytes())
    data[flip_at] ^= 0x01
    damaged.write_bytes(bytes(data))

    result = dump_log("--files", str(damaged))

    assert result.returncode == 1
    valid = [b["valid"] for b in batch_lines(result.stdout)]
    assert valid[1] == "false" and valid.count("false") == 1, valid


def test_a_truncated_log_reports_its_invalid_tail(broker_factory, tmp_path):
    broker = broker_factory()
    produce(broker, "dump-torn", "none")
    broker.stop()
    torn = tmp_path / f"{SEGMENT}.log"
    original = segment_files(broker, "dump-torn")["log"].read_bytes()
    torn.write_bytes(original[:-7])

    result = dump_log("--files", str(torn))

    assert result.returncode == 1
    last = batch_lines(dump_log("--files", str(segment_files(broker, "dump-torn")["log"])).stdout)[-1]
    assert f"Found {int(last['size']) - 7} invalid bytes at the end of {torn.name}" in result.stdout


def test_a_missing_file_is_a_one_line_error(tmp_path):
    missing = tmp_path / f"{SEGMENT}.log"
    result = dump_log("--files", str(missing))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(missing) in result.stderr


def test_the_metadata_log_holds_kip631_records_the_decoder_shows(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "dump-metadata", partitions=2)
    broker.stop()
    segment = broker.data_dir / "__cluster_metadata-0" / f"{SEGMENT}.log"
    done = dump_log("--cluster-metadata-decoder", "--files", str(segment))
    assert done.returncode == 0, done.stderr
    payloads = [line.split(" payload: ", 1)[1] for line in done.stdout.splitlines() if " payload: " in line]
    kinds = [p.split("(", 1)[0] for p in payloads]
    # The bootstrap batch: the feature levels and the cluster-wide
    # min.insync.replicas (KIP-966), then the broker's registration.
    assert kinds[:6] == ["FeatureLevel"] * 3 + ["Config", "RegisterBroker", "BrokerRegistrationChange"], kinds
    assert 'name: "metadata.version", feature_level: 27' in payloads[0]
    assert 'name: "eligible.leader.replicas.version", feature_level: 1' in payloads[1]
    assert 'name: "group.version", feature_level: 1' in payloads[2]
    assert 'name: "min.insync.replicas", value: Some("1")' in payloads[3], payloads[3]
    assert f"port: {broker.port}" in payloads[4] and "fenced: true" in payloads[4]
    assert "fenced: -1" in payloads[5], "the broker is unfenced once caught up"
    topic = [p for p in payloads if p.startswith("Topic(")]
    assert len(topic) == 1 and 'name: "dump-metadata"' in topic[0], payloads
    assert kinds.count("Partition") == 2, kinds
