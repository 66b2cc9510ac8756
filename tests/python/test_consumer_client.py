"""Strom's own consumer through `strom consume` and `strom perf consume`,
run as binaries against the real broker, with confluent-kafka and
kafka-python on the other side: records they write are read by our
consumer, our consumer shares a group with theirs, and read_committed
hides what their transactions aborted.
"""

from __future__ import annotations

import fcntl
import json
import re
import signal
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import Producer as ConfluentProducer

from harness import (
    OutRecord,
    admin_client,
    confluent_producer,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    kafka_python_producer,
    now_ms,
    produce_confluent,
    produce_kafka_python,
    strom,
    strom_binary,
    strom_ok,
    wait_future,
    wait_until,
    watermarks_confluent,
)

def consume_json(broker, topic: str, *args: str) -> list[dict]:
    out = strom_ok("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--format", "json", *args)
    return [json.loads(line) for line in out.splitlines()]


def records_with_headers(prefix: str, count: int) -> list[OutRecord]:
    return [
        OutRecord(f"k{i}".encode(), f"{prefix}-{i}".encode(), (("source", prefix.encode()), ("i", str(i).encode())), now_ms())
        for i in range(count)
    ]


# ---------------------------------------------------------------- round trips


def test_strom_produce_then_strom_consume_round_trip(broker):
    create_topic(broker.bootstrap, "roundtrip", partitions=3)
    lines = "".join(f"key{i}\tvalue {i}\n" for i in range(30))
    strom_ok("produce", "--bootstrap-server", broker.bootstrap, "--topic", "roundtrip", "--property", "parse.key=true", stdin=lines)
    done = strom(
        "consume", "--bootstrap-server", broker.bootstrap, "--topic", "roundtrip", "--from-beginning",
        "--max-messages", "30", "--property", "print.key=true", "--property", "print.partition=true",
        "--property", "print.offset=true", "--property", "print.timestamp=true",
    )
    assert done.returncode == 0, done.stderr
    assert "Processed a total of 30 messages" in done.stderr
    seen = {}
    for line in done.stdout.splitlines():
        timestamp, partition, offset, key, value = line.split("\t")
        assert timestamp.startswith("CreateTime:") and int(timestamp.split(":")[1]) > 0
        assert partition.startswith("Partition:") and offset.startswith("Offset:")
        seen[key] = value
    assert seen == {f"key{i}": f"value {i}" for i in range(30)}


def test_our_consumer_reads_what_confluent_and_kafka_python_wrote(broker):
    create_topic(broker.bootstrap, "theirs", partitions=2)
    from_confluent = records_with_headers("confluent", 300)
    for codec, chunk in zip(["lz4", "zstd", "gzip"], [from_confluent[:100], from_confluent[100:200], from_confluent[200:]]):
        produce_confluent(confluent_producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 5}), "theirs", chunk)
    from_kafka_python = records_with_headers("kafka-python", 200)
    producer = kafka_python_producer(broker.bootstrap, compression_type="snappy")
    try:
        produce_kafka_python(producer, "theirs", from_kafka_python)
    finally:
        producer.close()

    got = consume_json(broker, "theirs", "--from-beginning", "--max-messages", "500", "--timeout-ms", "20000")
    assert len(got) == 500
    by_key_and_source = {(r["key"], r["headers"][0]["value"]): r for r in got}
    for source, sent in [("confluent", from_confluent), ("kafka-python", from_kafka_python)]:
        for record in sent:
            read = by_key_and_source[(record.key.decode(), source)]
            assert read["value"] == record.value.decode()
            assert [(h["key"], h["value"]) for h in read["headers"]] == [(k, v.decode()) for k, v in record.headers]
            assert read["timestamp"] == record.timestamp_ms
    for partition in (0, 1):
        offsets = [r["offset"] for r in got if r["partition"] == partition]
        assert offsets == list(range(len(offsets))), "each partition in offset order, no gaps"


def test_kafka_python_and_confluent_read_what_our_producer_wrote(broker):
    create_topic(broker.bootstrap, "ours", partitions=3)
    lines = "".join(f"src:strom,n:{i}\tkey{i}\tvalue {i}\n" for i in range(90))
    strom_ok(
        "produce", "--bootstrap-server", broker.bootstrap, "--topic", "ours", "--compression-codec", "lz4",
        "--property", "parse.key=true", "--property", "parse.headers=true", stdin=lines,
    )
    ends = {p: high for p, (_, high) in watermarks_confluent(broker.bootstrap, "ours", range(3)).items()}
    assert sum(ends.values()) == 90
    for read in (consume_kafka_python, consume_confluent):
        records = [r for batch in read(broker.bootstrap, "ours", ends).values() for r in batch]
        got = {r.key: (r.value, r.headers) for r in records}
        assert got == {
            f"key{i}".encode(): (f"value {i}".encode(), (("src", b"strom"), ("n", str(i).encode())))
            for i in range(90)
        }, read.__name__


def test_partition_and_offset_flags_and_bad_input(broker):
    create_topic(broker.bootstrap, "pick", partitions=2)
    produce_confluent(confluent_producer(broker.bootstrap), "pick", records_with_headers("p", 20), partition=1)
    got = consume_json(broker, "pick", "--partition", "1", "--offset", "15", "--max-messages", "5")
    assert [r["offset"] for r in got] == [15, 16, 17, 18, 19]
    assert consume_json(broker, "pick", "--partition", "0", "--offset", "earliest", "--timeout-ms", "1000") == []

    for args, fragment in [
        (["--topic", "pick", "--offset", "3"], "--partition"),
        (["--topic", "pick", "--partition", "7"], "no partition 7"),
        (["--topic", "pick", "--partition", "0", "--offset", "soon"], "soon"),
        (["--topic", "missing-topic", "--timeout-ms", "500", "--consumer-property", "default.api.timeout.ms=2000"], "UNKNOWN_TOPIC_OR_PARTITION"),
    ]:
        done = strom("consume", "--bootstrap-server", broker.bootstrap, *args)
        assert done.returncode != 0, args
        assert fragment in done.stderr, (args, done.stderr)
        assert "panicked" not in done.stderr


def test_a_closed_output_pipe_ends_the_tool_quietly(broker):
    create_topic(broker.bootstrap, "piped", partitions=1000)
    tool = subprocess.Popen(
        [str(strom_binary()), "offsets", "--bootstrap-server", broker.bootstrap, "--topic", "piped"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    fcntl.fcntl(tool.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)  # smaller than the ~14 KB of output
    assert tool.stdout.readline().startswith(b"piped:")
    tool.stdout.close()  # as `| head -1` does
    _, err = tool.communicate(timeout=30)
    assert b"panicked" not in err, err
    assert tool.returncode == -signal.SIGPIPE, (tool.returncode, err)


# ---------------------------------------------------------------- groups


def test_group_consumer_commits_and_resumes(broker_factory):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    create_topic(broker.bootstrap, "resume", partitions=2)
    produce_confluent(confluent_producer(broker.bootstrap), "resume", records_with_headers("a", 40))
    first = consume_json(broker, "resume", "--group", "resumers", "--from-beginning", "--max-messages", "40", "--timeout-ms", "20000")
    assert len(first) == 40
    produce_confluent(confluent_producer(broker.bootstrap), "resume", records_with_headers("b", 10))
    second = consume_json(broker, "resume", "--group", "resumers", "--from-beginning", "--max-messages", "10")
    assert sorted(r["value"] for r in second) == sorted(f"b-{i}" for i in range(10)), "only what came after the commit"

    admin = admin_client(broker.bootstrap)
    committed = wait_future(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("resumers")])["resumers"])
    assert sum(tp.offset for tp in committed.topic_partitions) == 50, committed.topic_partitions


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_our_consumer_shares_a_group_with_confluent_consumers(broker_factory, strategy):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "mixed-group", f"mixed-{uuid.uuid4().hex[:6]}", 6
    create_topic(broker.bootstrap, topic, partitions=partitions)
    theirs = [
        ConfluentConsumer({
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": 10000,
        })
        for _ in range(2)
    ]
    for consumer in theirs:
        consumer.subscribe([topic])
    ours = subprocess.Popen(
        [str(strom_binary()), "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
         "--from-beginning", "--format", "json", "--max-messages", "200", "--timeout-ms", "60000",
         "--consumer-property", f"partition.assignment.strategy={strategy}", "--consumer-property", "heartbeat.interval.ms=200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        admin = admin_client(broker.bootstrap)

        def stable_with_three():
            for consumer in theirs:
                consumer.poll(0.1)
            description = wait_future(admin.describe_consumer_groups([group])[group])
            assigned = sum(len(m.assignment.topic_partitions) for m in description.members)
            return str(description.state).endswith("STABLE") and len(description.members) == 3 and assigned == partitions

        wait_until(stable_with_three, 60, "a stable group of three sharing every partition")
        description = wait_future(admin.describe_consumer_groups([group])[group])
        owners = {}
        for member in description.members:
            for tp in member.assignment.topic_partitions:
                assert tp.partition not in owners, f"partition {tp.partition} has two owners"
                owners[tp.partition] = member.client_id
        ours_partitions = {p for p, client in owners.items() if client == "strom-console-consumer"}
        assert len(ours_partitions) == 2, owners

        sent = [OutRecord(None, f"v{i}".encode(), (), now_ms()) for i in range(600)]
        for p in range(partitions):
            produce_confluent(confluent_producer(broker.bootstrap), topic, sent[p * 100:(p + 1) * 100], partition=p)
        read_by_them: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while len(read_by_them) < 400 and time.monotonic() < deadline:
            for consumer in theirs:
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    if not msg.error():
                        read_by_them.append((msg.partition(), msg.value().decode()))
        for consumer in theirs:
            consumer.close()
        out, err = ours.communicate(timeout=60)
    finally:
        if ours.poll() is None:
            ours.kill()
    read_by_us = [(r["partition"], r["value"]) for r in map(json.loads, out.splitlines())]
    assert {p for p, _ in read_by_us} == ours_partitions, err
    assert len(read_by_us) == 200 and len(read_by_them) == 400
    assert sorted(v for _, v in read_by_us + read_by_them) == sorted(f"v{i}" for i in range(600)), "each record once"


def test_group_consumer_rides_out_a_broker_crash(broker_factory):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    create_topic(broker.bootstrap, "survive", partitions=2)
    consumer = subprocess.Popen(
        [str(strom_binary()), "consume", "--bootstrap-server", broker.bootstrap, "--topic", "survive",
         "--group", "survivors", "--from-beginning",
         "--consumer-property", "heartbeat.interval.ms=200", "--consumer-property", "session.timeout.ms=6000",
         "--consumer-property", "request.timeout.ms=5000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(consumer.stdout), daemon=True)
    reader.start()
    expected = {f"{phase}-{i}\n" for phase in ("before", "after") for i in range(100)}
    try:
        produce_confluent(confluent_producer(broker.bootstrap), "survive", records_with_headers("before", 100))
        wait_until(lambda: len(lines) >= 100, 60, "the first hundred records")
        broker.kill9()
        broker.start()
        produce_confluent(confluent_producer(broker.bootstrap), "survive", records_with_headers("after", 100))
        wait_until(lambda: set(lines) >= expected, 90, "every record read")
        consumer.send_signal(signal.SIGINT)  # as Ctrl-C ends it: cleanly, exit 0
        consumer.wait(timeout=30)
        reader.join(timeout=10)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    err = consumer.stderr.read()
    assert consumer.returncode == 0, err
    # At least once: a crash may replay what was read since the last commit.
    assert set(lines) == expected, err


# ---------------------------------------------------------------- transactions


def test_read_committed_hides_aborted_transactions(broker):
    create_topic(broker.bootstrap, "txn-read", partitions=1)
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-reader-test"})
    producer.init_transactions(30)
    for outcome, values in [("commit", ["c1", "c2"]), ("abort", ["a1", "a2"]), ("commit", ["c3"])]:
        producer.begin_transaction()
        for value in values:
            producer.produce("txn-read", value.encode())
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = consume_json(broker, "txn-read", "--from-beginning", "--isolation-level", "read_committed", "--max-messages", "3")
    assert [r["value"] for r in committed] == ["c1", "c2", "c3"]
    everything = consume_json(broker, "txn-read", "--from-beginning", "--max-messages", "5")
    assert [r["value"] for r in everything] == ["c1", "c2", "a1", "a2", "c3"]
    assert [r["offset"] for r in committed] == [0, 1, 6], "markers take offsets 2 and 5"


# ---------------------------------------------------------------- perf consume


def test_perf_consume_reads_what_perf_produce_wrote(broker):
    create_topic(broker.bootstrap, "perf-read", partitions=2)
    strom_ok(
        "perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", "perf-read", "--num-records", "20000",
        "--record-size", "100", "--throughput", "-1", "--producer-props", "acks=1", "--format", "json",
    )
    summary = json.loads(strom_ok(
        "perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", "perf-read", "--messages", "20000",
        "--timeout", "20000", "--format", "json",
    ))
    assert summary["records"] == 20000
    assert summary["bytes"] == 20000 * 100
    assert summary["mb_per_sec"] > 0 and summary["cpu_s_per_gb"] > 0

    text = strom_ok(
        "perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", "perf-read", "--messages", "100",
        "--timeout", "20000",
    ).splitlines()
    assert text[0].startswith("start.time, end.time, data.consumed.in.MB, MB.sec")
    assert len(text[1].split(", ")) == len(text[0].split(", "))
    start, end = text[1].split(", ")[:2]
    for stamp in (start, end):  # Kafka's default --date-format, yyyy-MM-dd HH:mm:ss:SSS
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", stamp), text[1]
    assert start <= end
    custom = strom_ok(
        "perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", "perf-read", "--messages", "10",
        "--timeout", "20000", "--hide-header", "--date-format", "'day' d 'of' yyyy",
    ).splitlines()
    assert re.fullmatch(r"day \d{1,2} of \d{4}", custom[0].split(", ")[0]), custom
    refused = strom("perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", "perf-read",
                    "--messages", "1", "--date-format", "EEE HH:mm")
    assert refused.returncode == 1 and "--date-format" in refused.stderr, refused

    short = strom("perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", "perf-read",
                  "--messages", "30000", "--timeout", "2000", "--format", "json")
    assert short.returncode == 1 and "read 20000 of 30000" in short.stderr


# ---------------------------------------------------------------- missing topics, command config


@pytest.mark.parametrize("group_args", [[], ["--group", "looking-for-nothing"]], ids=["direct", "group"])
def test_consume_of_a_missing_topic_ends_at_once_with_unknown_topic(broker, group_args):
    # No shortened time-outs: the tool must not wait for the topic at all
    # (it used to wait for ever with --group, and 60 s without).
    done = subprocess.run(
        [str(strom_binary()), "consume", "--bootstrap-server", broker.bootstrap, "--topic", "never-created",
         *group_args],
        capture_output=True, text=True, timeout=15,
    )
    assert done.returncode == 1, done
    assert done.stderr.strip() == "strom: topic never-created does not exist (UNKNOWN_TOPIC_OR_PARTITION)"
    assert "never-created" not in admin_client(broker.bootstrap).list_topics(timeout=10).topics, "nothing auto-created"


def test_command_config_file_names_the_cluster_and_client_id(broker, tmp_path):
    topic, group = "configured", "configured-group"
    create_topic(broker.bootstrap, topic, partitions=1)
    config = tmp_path / "client.properties"
    # Java properties syntax: a space separator, a comment, a continued line.
    config.write_text(f"# the tool's own settings\nclient.id configured-\\\n    client\nbootstrap.servers={broker.bootstrap}\n")
    tool = subprocess.Popen(
        [str(strom_binary()), "consume", "--command-config", str(config), "--topic", topic, "--group", group,
         "--timeout-ms", "60000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        admin = admin_client(broker.bootstrap)

        def member_client_ids():
            description = wait_future(admin.describe_consumer_groups([group])[group])
            return {member.client_id for member in description.members}

        wait_until(lambda: member_client_ids() == {"configured-client"}, 30, "the tool joined with the file's client.id")
    finally:
        tool.send_signal(signal.SIGINT)
        _, err = tool.communicate(timeout=30)
    assert tool.returncode == 0, err

    config.write_text("client.id=\\u00zz\n")
    done = strom("consume", "--command-config", str(config), "--topic", topic)
    assert done.returncode == 1
    assert str(config) in done.stderr and "line 1" in done.stderr and "\\uXXXX" in done.stderr, done.stderr
