"""Strom's own client through its tools: `strom topics`, `strom produce` and
`strom perf produce`, run as binaries against the real broker and checked
with confluent-kafka (librdkafka) as the independent witness.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource

from harness import (
    ADMIN_TIMEOUT_S,
    CLI_TIMEOUT_S,
    OutRecord,
    admin_cli,
    admin_client,
    confluent_producer,
    consume_confluent,
    create_topic,
    produce_confluent,
    strom,
    strom_binary,
    strom_ok,
    topic_names,
    topic_partitions,
    wait_future,
    wait_until,
    watermarks_confluent,
)

def topics(broker, *args: str) -> subprocess.CompletedProcess:
    return admin_cli(broker, "topics", *args)


# ---------------------------------------------------------------- strom topics


def test_create_makes_a_topic_librdkafka_sees_with_its_partitions_and_configs(broker):
    out = strom_ok(
        "topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "orders",
        "--partitions", "4", "--replication-factor", "1",
        "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact",
    )
    assert out.strip() == "Created topic orders."
    partitions = wait_until(
        lambda: topic_partitions(admin_client(broker.bootstrap), "orders"), ADMIN_TIMEOUT_S, "orders in metadata"
    )
    assert sorted(partitions) == [0, 1, 2, 3]
    assert all(p.leader == 1 and list(p.replicas) == [1] for p in partitions.values())

    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = wait_future(admin.describe_configs([resource])[resource])
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact"


def test_create_sends_configs_the_broker_validates(broker):
    done = topics(broker, "--create", "--topic", "bad", "--partitions", "1", "--config", "retention.ms=soon")
    assert done.returncode != 0
    assert "INVALID_CONFIG" in done.stderr and "retention.ms" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "bad" not in topic_names(broker.bootstrap)


def test_create_twice_fails_unless_if_not_exists(broker):
    assert topics(broker, "--create", "--topic", "twice", "--partitions", "2").returncode == 0
    again = topics(broker, "--create", "--topic", "twice", "--partitions", "2")
    assert again.returncode != 0 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert topics(broker, "--create", "--topic", "twice", "--if-not-exists").returncode == 0


def test_list_shows_the_topics_librdkafka_created(broker):
    create_topic(broker.bootstrap, "alpha", partitions=1)
    create_topic(broker.bootstrap, "beta", partitions=2)
    listed = strom_ok("topics", "--bootstrap-server", broker.bootstrap, "--list").split()
    assert {"alpha", "beta"} <= set(listed)
    assert listed == sorted(listed)


def test_describe_shows_leader_replicas_and_isr(broker):
    create_topic(broker.bootstrap, "described", partitions=3)
    out = strom_ok("topics", "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "described")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: described\tTopicId: ")
    assert "PartitionCount: 3\tReplicationFactor: 1" in lines[0]
    assert lines[1:] == [
        f"\tTopic: described\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: " for p in range(3)
    ]
    # A healthy single node has no under-replicated partitions.
    under = strom_ok(
        "topics", "--bootstrap-server", broker.bootstrap, "--describe", "--under-replicated-partitions"
    )
    assert under.strip() == ""


def test_describe_and_delete_of_a_missing_topic(broker):
    missing = topics(broker, "--describe", "--topic", "ghost")
    assert missing.returncode != 0 and "ghost" in missing.stderr
    assert topics(broker, "--describe", "--topic", "ghost", "--if-exists").returncode == 0
    gone = topics(broker, "--delete", "--topic", "ghost")
    assert gone.returncode != 0 and "does not exist" in gone.stderr
    assert topics(broker, "--delete", "--topic", "ghost", "--if-exists").returncode == 0


def test_delete_removes_the_topic_from_librdkafkas_metadata(broker):
    create_topic(broker.bootstrap, "doomed", partitions=2)
    strom_ok("topics", "--bootstrap-server", broker.bootstrap, "--delete", "--topic", "doomed")
    wait_until(lambda: "doomed" not in topic_names(broker.bootstrap), ADMIN_TIMEOUT_S, "doomed to disappear")


def test_alter_partitions_grows_the_topic(broker):
    create_topic(broker.bootstrap, "growing", partitions=1)
    done = topics(broker, "--alter", "--topic", "growing", "--partitions", "3")
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: len(topic_partitions(admin_client(broker.bootstrap), "growing")) == 3,
        ADMIN_TIMEOUT_S,
        "3 partitions",
    )


def test_unreachable_bootstrap_server_is_a_one_line_error(broker):
    port = broker.port
    broker.stop()
    done = strom("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list", timeout_s=30)
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], done.stderr
    broker.start()


def test_missing_action_is_a_usage_error():
    done = strom("topics", "--bootstrap-server", "127.0.0.1:1")
    assert done.returncode != 0 and "--create" in done.stderr


# ---------------------------------------------------------------- strom produce


def librdkafka_partitions(broker, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """Where librdkafka's murmur2_random partitioner puts each key (the Java client's rule)."""
    producer = confluent_producer(broker.bootstrap, partitioner="murmur2_random", **{"linger.ms": 0})
    records = [OutRecord(key, b"probe", (), 0) for key in keys]
    deliveries = produce_confluent(producer, topic, records)
    return {key: d.partition for key, d in zip(keys, deliveries)}


def test_keyed_lines_land_where_librdkafkas_murmur2_puts_them(broker):
    create_topic(broker.bootstrap, "keyed", partitions=6)
    create_topic(broker.bootstrap, "probe", partitions=6)
    keys = [f"user-{i}".encode() for i in range(60)] + [b"21", b"foobar", b""]
    lines = "".join(f"{k.decode()}:value-{i}\n" for i, k in enumerate(keys))
    strom_ok(
        "produce", "--bootstrap-server", broker.bootstrap, "--topic", "keyed",
        "--property", "parse.key=true", "--property", "key.separator=:",
        "--producer-property", "enable.idempotence=false", "--acks", "1",
        stdin=lines,
    )
    ends = {p: hi for p, (_, hi) in watermarks_confluent(broker.bootstrap, "keyed", range(6)).items() if hi > 0}
    assert sum(ends.values()) == len(keys)
    got = [rec for records in consume_confluent(broker.bootstrap, "keyed", ends).values() for rec in records]
    assert sorted((r.key, r.value) for r in got) == sorted((k, f"value-{i}".encode()) for i, k in enumerate(keys))

    expected = librdkafka_partitions(broker, "probe", keys)
    actual = {r.key: r.partition for r in got}
    assert actual == expected
    assert len(set(actual.values())) > 1, "keys spread over several partitions"


def test_lines_from_a_file_with_headers_and_every_codec(broker, tmp_path):
    create_topic(broker.bootstrap, "headed", partitions=1)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    for codec in codecs:
        source = tmp_path / f"{codec}.txt"
        source.write_text(f"trace:{codec},empty:\tk-{codec}=v-{codec}\n")
        strom_ok(
            "produce", "--bootstrap-server", broker.bootstrap, "--topic", "headed", "--file", str(source),
            "--property", "parse.headers=true", "--property", "parse.key=true", "--property", "key.separator==",
            "--compression-codec", codec, "--producer-property", "enable.idempotence=false",
        )
    records = consume_confluent(broker.bootstrap, "headed", {0: len(codecs)})[0]
    assert [(r.key, r.value, r.headers) for r in records] == [
        (f"k-{c}".encode(), f"v-{c}".encode(), (("trace", c.encode()), ("empty", b""))) for c in codecs
    ]


def test_acks_zero_and_plain_values(broker):
    create_topic(broker.bootstrap, "fire", partitions=1)
    strom_ok(
        "produce", "--bootstrap-server", broker.bootstrap, "--topic", "fire", "--acks", "0",
        stdin="one\ntwo\nthree\n",
    )
    records = consume_confluent(broker.bootstrap, "fire", {0: 3})[0]
    assert [(r.key, r.value) for r in records] == [(None, b"one"), (None, b"two"), (None, b"three")]


def test_explicit_idempotence_produces(broker):
    create_topic(broker.bootstrap, "idem", partitions=1)
    done = strom(
        "produce", "--bootstrap-server", broker.bootstrap, "--topic", "idem",
        "--producer-property", "enable.idempotence=true", stdin="x\n",
    )
    assert done.returncode == 0, done.stderr
    records = consume_confluent(broker.bootstrap, "idem", {0: 1})[0]
    assert records[0].value == b"x"
    assert watermarks_confluent(broker.bootstrap, "idem", [0])[0] == (0, 1)


def test_bad_line_format_fails_with_the_line_number(broker):
    create_topic(broker.bootstrap, "strict", partitions=1)
    done = strom(
        "produce", "--bootstrap-server", broker.bootstrap, "--topic", "strict",
        "--property", "parse.key=true", "--producer-property", "enable.idempotence=false",
        stdin="k\tv\nno-separator\n",
    )
    assert done.returncode != 0 and "line 2" in done.stderr


# ---------------------------------------------------------------- strom perf produce


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_perf_produce_runs_a_bounded_load_and_reports(broker, codec):
    create_topic(broker.bootstrap, "perf", partitions=2)
    out = strom_ok(
        "perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", "perf",
        "--num-records", "20000", "--record-size", "100", "--throughput", "-1",
        "--producer-props", "acks=1", "linger.ms=5", "batch.size=32768",
        "--compression-codec", codec, "--format", "json",
    )
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["records"] == 20000 and summary["failed"] == 0
    assert summary["records_per_sec"] > 0 and summary["mb_per_sec"] > 0
    assert 0 <= summary["latency_p50_ms"] <= summary["latency_p99_ms"] <= summary["latency_max_ms"]
    assert summary["cpu_s"] > 0
    ends = watermarks_confluent(broker.bootstrap, "perf", [0, 1])
    assert sum(hi for _, hi in ends.values()) == 20000


def test_perf_produce_text_summary_reads_like_kafkas(broker):
    create_topic(broker.bootstrap, "perftext", partitions=1)
    out = strom_ok(
        "perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", "perftext",
        "--num-records", "3000", "--record-size", "1024", "--throughput", "3000",
        "--producer-props", "acks=1", "enable.idempotence=false",
    )
    final = out.strip().splitlines()[-1]
    assert final.startswith("3000 records sent, ")
    for part in ("records/sec", "MB/sec", "ms avg latency", "ms 50th", "ms 95th", "ms 99th", "ms 99.9th", "s/GB"):
        assert part in final, final


# ---------------------------------------------------------------- version, help, where the broker is

SUBCOMMANDS = [
    ["server"], ["dump-log"], ["topics"], ["produce"], ["consume"], ["groups"], ["configs"], ["offsets"],
    ["delete-records"], ["leader-election"], ["reassign"], ["cluster"], ["perf", "produce"], ["perf", "consume"],
]


def test_version_is_the_crates_version():
    cargo = Path(__file__).resolve().parents[2] / "Cargo.toml"
    version = next(line.split('"')[1] for line in cargo.read_text().splitlines() if line.startswith("version = "))
    assert strom_ok("--version").strip() == f"strom {version}"


OPTION_LINE = re.compile(r" +(-\w, )?(--[\w.-]+|[<\[][\w-]+[>\]])( <[^>]+>)?(\.\.\.)?( {2,}(?P<help>\S.*))?$")


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=" ".join)
def test_every_flag_has_help(command):
    lines = strom_ok(*command, "--help").splitlines()
    checked = 0
    for i, line in enumerate(lines):
        option = OPTION_LINE.match(line)
        if not option:
            continue
        # Help text follows on the same line, or indented on the next (long form).
        next_line = lines[i + 1] if i + 1 < len(lines) else ""
        described = option["help"] or (next_line.startswith("          ") and next_line.strip())
        assert described, f"strom {' '.join(command)}: {line.strip()} has no help"
        checked += 1
    assert checked >= 2, lines


def test_tools_find_the_broker_from_the_environment_or_the_config_file(broker, tmp_path):
    create_topic(broker.bootstrap, "found", partitions=1)
    env = {**os.environ, "STROM_BOOTSTRAP_SERVER": broker.bootstrap}
    done = subprocess.run([str(strom_binary()), "topics", "--list"], env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0 and "found" in done.stdout.split(), done

    # A config file's bootstrap.servers wins over the ambient variable.
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers {broker.bootstrap}\n")
    env["STROM_BOOTSTRAP_SERVER"] = "127.0.0.1:1"
    for command in (["topics", "--list", "--command-config", str(config)],
                    ["perf", "consume", "--topic", "found", "--messages", "0", "--consumer.config", str(config)]):
        done = subprocess.run([str(strom_binary()), *command], env=env, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT_S)
        assert done.returncode == 0, done
