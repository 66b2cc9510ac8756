"""The admin tools of the `strom` binary: `strom groups`, `strom configs`,
`strom offsets`, `strom delete-records` and `strom cluster`, run against the
real broker, their effects checked with confluent-kafka (librdkafka) as the
independent witness, and their computed values read from `--format json`.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import ConfigResource

from harness import (
    OutRecord,
    admin_cli,
    admin_client,
    admin_ok,
    assert_one_line_error,
    confluent_producer,
    create_topic,
    produce_confluent,
    wait_future,
    wait_until,
    watermarks_confluent,
)
import wire

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 3
RECORDS_PER_PARTITION = 10
BASE_TIMESTAMP_MS = 1_700_000_000_000


def admin_json(broker, command: str, *args: str):
    return json.loads(admin_ok(broker, command, *args, "--format", "json"))


def fill_topic(broker, topic: str = TOPIC) -> None:
    """`RECORDS_PER_PARTITION` records in each partition, record i of each
    partition stamped BASE_TIMESTAMP_MS + i seconds."""
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = confluent_producer(broker.bootstrap)
    for partition in range(PARTITIONS):
        records = [
            OutRecord(key=None, value=f"{partition}-{i}".encode(), headers=(), timestamp_ms=BASE_TIMESTAMP_MS + i * 1000)
            for i in range(RECORDS_PER_PARTITION)
        ]
        produce_confluent(producer, topic, records, partition=partition)


def committed(broker, group: str, topic: str = TOPIC) -> dict[int, int]:
    """Committed offsets per partition as librdkafka's admin reads them (-1001: none)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    admin = admin_client(broker.bootstrap)  # kept alive until its future resolves
    result = wait_future(admin.list_consumer_group_offsets([request])[group])
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def group_member(broker, first_offsets: dict[int, int] | None = None) -> Consumer:
    """A confluent consumer subscribed to `orders` in `billing`, returned once
    it owns every partition; records it reads meanwhile go to `first_offsets`."""
    seen = {} if first_offsets is None else first_offsets
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": GROUP,
            "client.id": "billing-worker",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
        }
    )
    consumer.subscribe([TOPIC])

    def owns_all():
        record_first_offset(consumer.poll(0.1), seen)
        return len(consumer.assignment()) == PARTITIONS

    wait_until(owns_all, 30, "the member's assignment")
    return consumer


def record_first_offset(msg, first_offsets: dict[int, int]) -> None:
    if msg is not None and not msg.error():
        first_offsets.setdefault(msg.partition(), msg.offset())


def commit(consumer: Consumer, offsets: dict[int, int], topic: str = TOPIC) -> None:
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)


def group_state(broker, group: str) -> str:
    return admin_json(broker, "groups", "--describe", "--group", group, "--state")[0]["state"]


def reset_plan(broker, *args: str) -> dict[int, int]:
    plan = admin_json(broker, "groups", "--reset-offsets", "--group", GROUP, *args)
    assert all(row["group"] == GROUP and row["topic"] == TOPIC for row in plan), plan
    return {row["partition"]: row["offset"] for row in plan}


@pytest.fixture
def group_broker(broker_factory):
    """A broker holding `orders` (3 x 10 records) with no group yet."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    fill_topic(broker)
    return broker


# ---------------------------------------------------------------- strom groups


def test_describe_joins_committed_offsets_log_ends_and_the_owning_member(group_broker):
    broker = group_broker
    member = group_member(broker)
    try:
        commit(member, {0: 4, 1: 10})
        rows = admin_json(broker, "groups", "--describe", "--group", GROUP)[0]["partitions"]
        by_partition = {row["partition"]: row for row in rows}
        assert sorted(by_partition) == [0, 1, 2]
        assert by_partition[0]["current_offset"] == 4 and by_partition[0]["lag"] == 6
        assert by_partition[1]["current_offset"] == 10 and by_partition[1]["lag"] == 0
        assert by_partition[2]["current_offset"] is None and by_partition[2]["lag"] is None
        assert all(row["log_end_offset"] == RECORDS_PER_PARTITION for row in rows)
        assert all(row["client_id"] == "billing-worker" for row in rows)
        assert len({row["consumer_id"] for row in rows}) == 1 and rows[0]["consumer_id"]

        text = admin_ok(broker, "groups", "--describe", "--group", GROUP).splitlines()
        assert text[0] == ""
        assert text[1].split() == [
            "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"
        ]
        cells = [line.split() for line in text[2:]]
        assert [c[:6] for c in cells] == [
            [GROUP, TOPIC, "0", "4", "10", "6"],
            [GROUP, TOPIC, "1", "10", "10", "0"],
            [GROUP, TOPIC, "2", "-", "10", "-"],
        ]
        assert all(c[8] == "billing-worker" for c in cells)

        members = admin_json(broker, "groups", "--describe", "--group", GROUP, "--members")[0]["members"]
        assert len(members) == 1 and members[0]["partitions"] == PARTITIONS
        verbose = admin_ok(broker, "groups", "--describe", "--group", GROUP, "--members", "--verbose")
        assert f"{TOPIC}:0,1,2" in verbose
        state = admin_json(broker, "groups", "--describe", "--group", GROUP, "--state")[0]
        assert state["state"] == "Stable" and state["members"] == 1 and state["coordinator"]["id"] == 1
    finally:
        member.close()


def test_a_closed_member_leaves_rows_without_a_consumer(group_broker):
    broker = group_broker
    member = group_member(broker)
    commit(member, {0: 3, 1: 7, 2: 10})
    member.close()
    wait_until(lambda: group_state(broker, GROUP) == "Empty", 30, "the group to empty")
    done = admin_cli(broker, "groups", "--describe", "--group", GROUP)
    assert done.returncode == 0, done.stderr
    assert f"Consumer group '{GROUP}' has no active members." in done.stderr
    cells = [line.split() for line in done.stdout.strip().splitlines()[1:]]
    assert [c[2:] for c in cells] == [
        ["0", "3", "10", "7", "-", "-", "-"],
        ["1", "7", "10", "3", "-", "-", "-"],
        ["2", "10", "10", "0", "-", "-", "-"],
    ]
    listed = admin_ok(broker, "groups", "--list", "--state").splitlines()
    assert listed[0].split() == ["GROUP", "STATE"]
    assert [GROUP, "Empty"] in [line.split() for line in listed[1:]]
    assert admin_ok(broker, "groups", "--list", "--state", "Stable").splitlines()[1:] == []


def test_each_reset_mode_computes_kafkas_offsets_and_dry_run_changes_nothing(group_broker):
    broker = group_broker
    member = group_member(broker)
    commit(member, {0: 4, 1: 8})
    member.close()
    wait_until(lambda: group_state(broker, GROUP) == "Empty", 30, "the group to empty")
    # Partition 0 starts at 2 from now on, so clamping to the log start shows.
    admin_ok(broker, "delete-records", "--topic", TOPIC, "--partition", "0", "--offset", "2")
    before = committed(broker, GROUP)
    topic = ["--topic", TOPIC]

    assert reset_plan(broker, *topic, "--to-earliest", "--dry-run") == {0: 2, 1: 0, 2: 0}
    assert reset_plan(broker, *topic, "--to-latest", "--dry-run") == {0: 10, 1: 10, 2: 10}
    assert reset_plan(broker, *topic, "--to-current", "--dry-run") == {0: 4, 1: 8, 2: 10}
    assert reset_plan(broker, *topic, "--to-offset", "7", "--dry-run") == {0: 7, 1: 7, 2: 7}
    assert reset_plan(broker, *topic, "--to-offset", "0", "--dry-run") == {0: 2, 1: 0, 2: 0}
    assert reset_plan(broker, *topic, "--to-offset", "99", "--dry-run") == {0: 10, 1: 10, 2: 10}
    assert reset_plan(broker, "--topic", f"{TOPIC}:0,1", "--shift-by", "-3", "--dry-run") == {0: 2, 1: 5}
    assert reset_plan(broker, "--topic", f"{TOPIC}:1", "--shift-by", "5", "--dry-run") == {1: 10}
    assert reset_plan(broker, "--all-topics", "--to-earliest", "--dry-run") == {0: 2, 1: 0}

    at_5s = datetime.fromtimestamp((BASE_TIMESTAMP_MS + 5000) / 1000, tz=timezone.utc)
    utc = at_5s.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert reset_plan(broker, *topic, "--to-datetime", utc, "--dry-run") == {0: 5, 1: 5, 2: 5}
    plus_one = at_5s.replace(tzinfo=None).replace(hour=(at_5s.hour + 1) % 24).strftime("%Y-%m-%dT%H:%M:%S.000+01:00")
    assert reset_plan(broker, *topic, "--to-datetime", plus_one, "--dry-run") == {0: 5, 1: 5, 2: 5}
    # Records are stamped in 2023: a day ago is after them all, so the log end.
    assert reset_plan(broker, *topic, "--by-duration", "P1D", "--dry-run") == {0: 10, 1: 10, 2: 10}
    long_ago = f"P{(time.time() * 1000 - BASE_TIMESTAMP_MS) // 86_400_000 + 30:.0f}D"
    assert reset_plan(broker, *topic, "--by-duration", long_ago, "--dry-run") == {0: 2, 1: 0, 2: 0}

    no_commit = admin_cli(broker, "groups", "--reset-offsets", "--group", GROUP, *topic, "--shift-by", "1", "--dry-run")
    assert_one_line_error(no_commit, f"Cannot shift offset for partition {TOPIC}-2")

    without_flag = admin_cli(broker, "groups", "--reset-offsets", "--group", GROUP, *topic, "--to-earliest")
    assert without_flag.returncode == 0
    assert "WARN: No action will be performed as the --execute option is missing." in without_flag.stderr
    table = without_flag.stdout.splitlines()
    assert table[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [line.split() for line in table[2:]] == [[GROUP, TOPIC, str(p), str(o)] for p, o in [(0, 2), (1, 0), (2, 0)]]
    assert committed(broker, GROUP) == before, "a dry run must not commit"


def test_execute_commits_and_a_consumer_resumes_from_the_new_offsets(group_broker):
    broker = group_broker
    member = group_member(broker)
    commit(member, {0: 9, 1: 9, 2: 9})
    member.close()
    wait_until(lambda: group_state(broker, GROUP) == "Empty", 30, "the group to empty")
    plan = reset_plan(broker, "--topic", f"{TOPIC}:0,1", "--to-offset", "6", "--execute")
    assert plan == {0: 6, 1: 6}
    assert committed(broker, GROUP) == {0: 6, 1: 6, 2: 9}

    plan = reset_plan(broker, "--all-topics", "--to-earliest", "--execute")
    assert plan == {0: 0, 1: 0, 2: 0}
    assert committed(broker, GROUP) == {0: 0, 1: 0, 2: 0}

    first: dict[int, int] = {}
    resumed = group_member(broker, first)
    try:

        def saw_every_partition():
            record_first_offset(resumed.poll(0.2), first)
            return len(first) == PARTITIONS

        wait_until(saw_every_partition, 30, "records from every partition")
        assert first == {0: 0, 1: 0, 2: 0}
    finally:
        resumed.close()


def test_resetting_a_group_with_an_active_member_fails(group_broker):
    broker = group_broker
    member = group_member(broker)
    try:
        commit(member, {0: 5})
        done = admin_cli(
            broker, "groups", "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest", "--execute"
        )
        assert done.returncode == 1
        assert f"Assignments can only be reset if the group '{GROUP}' is inactive, but the current state is Stable." in done.stderr
        assert committed(broker, GROUP)[0] == 5
    finally:
        member.close()


def test_delete_offsets_then_delete_the_group(group_broker):
    broker = group_broker
    member = group_member(broker)
    commit(member, {0: 3, 1: 4, 2: 5})
    member.close()
    wait_until(lambda: group_state(broker, GROUP) == "Empty", 30, "the group to empty")

    out = admin_ok(broker, "groups", "--delete-offsets", "--group", GROUP, "--topic", f"{TOPIC}:0")
    assert out.splitlines()[0] == f"Request succeeded for deleting offsets from group {GROUP}."
    assert [line.split() for line in out.splitlines()[2:]] == [["TOPIC", "PARTITION", "STATUS"], [TOPIC, "0", "Successful"]]
    assert committed(broker, GROUP) == {0: -1001, 1: 4, 2: 5}

    out = admin_ok(broker, "groups", "--delete", "--group", GROUP)
    assert out.strip() == f"Deletion of requested consumer groups ('{GROUP}') was successful."
    assert GROUP not in admin_json(broker, "groups", "--list")
    gone = admin_cli(broker, "groups", "--describe", "--group", GROUP)
    assert_one_line_error(gone, f"Consumer group '{GROUP}' does not exist.")
    again = admin_cli(broker, "groups", "--delete", "--group", GROUP)
    assert_one_line_error(again, "GROUP_ID_NOT_FOUND")


def test_bad_group_flags_are_one_line_errors(broker):
    for args, fragment in [
        (["--describe"], "--group or --all-groups"),
        (["--reset-offsets", "--group", GROUP, "--to-earliest"], "--all-topics, --topic"),
        (["--reset-offsets", "--group", GROUP, "--topic", TOPIC], "--to-earliest"),
        (["--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-datetime", "noon"], "Error parsing timestamp"),
        (["--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--by-duration", "1h"], "Error parsing duration"),
        (["--reset-offsets", "--group", GROUP, "--topic", f"{TOPIC}:x", "--to-latest"], "Invalid partition"),
        (["--list", "--state", "Sleepy"], "Invalid state list"),
    ]:
        assert_one_line_error(admin_cli(broker, "groups", *args), fragment)
    usage = admin_cli(broker, "groups", "--describe", "--group", GROUP, "--no-such-flag")
    assert usage.returncode != 0 and usage.stderr.startswith("error:")


# ---------------------------------------------------------------- strom configs


def test_configs_set_and_deleted_with_strom_are_what_librdkafka_describes(broker):
    create_topic(broker.bootstrap, TOPIC)
    out = admin_ok(
        broker, "configs", "--alter", "--topic", TOPIC, "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]"
    )
    assert out.strip() == f"Completed updating config for topic {TOPIC}."
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    configs = wait_future(admin.describe_configs([resource])[resource])
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact,delete"

    lines = admin_ok(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", TOPIC).splitlines()
    assert lines[0] == f"Dynamic configs for topic {TOPIC} are:"
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete")
    assert lines[2].startswith("  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000")
    assert len(lines) == 3

    admin_ok(broker, "configs", "--alter", "--topic", TOPIC, "--delete-config", "retention.ms")
    configs = wait_future(admin.describe_configs([resource])[resource])
    assert configs["retention.ms"].value != "3600000"
    described = admin_json(broker, "configs", "--describe", "--topic", TOPIC)
    assert [c["name"] for c in described[0]["configs"]] == ["cleanup.policy"]
    everything = admin_json(broker, "configs", "--describe", "--topic", TOPIC, "--all")[0]["configs"]
    assert {c["name"] for c in everything} >= {"retention.ms", "segment.bytes", "cleanup.policy"}
    assert admin_ok(broker, "configs", "--describe", "--topic", TOPIC, "--all").startswith(f"All configs for topic {TOPIC} are:")

    unset = admin_cli(broker, "configs", "--alter", "--topic", TOPIC, "--delete-config", "retention.ms")
    assert_one_line_error(unset, "Invalid config(s): retention.ms")
    bad = admin_cli(broker, "configs", "--alter", "--topic", TOPIC, "--add-config", "retention.ms=soon")
    assert_one_line_error(bad, "INVALID_CONFIG")
    ghost = admin_ok(broker, "configs", "--describe", "--topic", "ghost")
    assert ghost.strip() == "The topic 'ghost' doesn't exist and doesn't have dynamic config."


def test_broker_and_default_configs(broker):
    out = admin_ok(broker, "configs", "--alter", "--broker-defaults", "--add-config", "log.retention.ms=600000")
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    described = admin_json(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-default")
    # With the min.insync.replicas a new cluster holds there (KIP-966), as Kafka's does.
    assert [(c["name"], c["value"], c["source"]) for c in described[0]["configs"]] == [
        ("log.retention.ms", "600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("min.insync.replicas", "1", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
    ]
    assert admin_ok(broker, "configs", "--describe", "--broker-defaults").splitlines()[0] == (
        "Default configs for brokers in the cluster are:"
    )
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = wait_future(admin.describe_configs([resource])[resource])
    assert configs["log.retention.ms"].value == "600000"
    assert admin_ok(broker, "configs", "--describe", "--broker", "1").splitlines()[0] == "Dynamic configs for broker 1 are:"
    assert_one_line_error(admin_cli(broker, "configs", "--describe", "--broker", "one"), "valid integer broker id")


# ---------------------------------------------------------------- strom offsets and delete-records


def test_offsets_prints_get_offset_shell_lines(broker):
    fill_topic(broker)
    assert admin_ok(broker, "offsets", "--topic", TOPIC).splitlines() == [f"{TOPIC}:{p}:10" for p in range(PARTITIONS)]
    assert admin_ok(broker, "offsets", "--topic", TOPIC, "--partitions", "1", "--time", "-2").splitlines() == [f"{TOPIC}:1:0"]
    assert admin_ok(broker, "offsets", "--topic-partitions", f"{TOPIC}:0-2", "--time", "earliest").splitlines() == [
        f"{TOPIC}:0:0",
        f"{TOPIC}:1:0",
    ]
    at_3s = str(BASE_TIMESTAMP_MS + 3000)
    found = admin_json(broker, "offsets", "--topic", TOPIC, "--time", at_3s)
    assert found == [{"topic": TOPIC, "partition": p, "offset": 3} for p in range(PARTITIONS)]
    newest = admin_json(broker, "offsets", "--topic", TOPIC, "--time", "max-timestamp")
    assert [row["offset"] for row in newest] == [9] * PARTITIONS
    # Past the last record there is no offset, and GetOffsetShell prints nothing.
    assert admin_ok(broker, "offsets", "--topic", TOPIC, "--time", str(BASE_TIMESTAMP_MS + 60_000)) == ""
    assert_one_line_error(admin_cli(broker, "offsets", "--topic", "ghost"), "Could not match any topic-partitions")
    assert_one_line_error(admin_cli(broker, "offsets", "--time", "soon"), "Malformed time argument soon")


def test_delete_records_moves_the_low_watermark_librdkafka_sees(broker, tmp_path):
    fill_topic(broker)
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({
        "partitions": [{"topic": TOPIC, "partition": 0, "offset": 5}, {"topic": TOPIC, "partition": 1, "offset": -1}],
        "version": 1,
    }))
    out = admin_ok(broker, "delete-records", "--offset-json-file", str(plan)).splitlines()
    assert out == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {TOPIC}-0\tlow_watermark: 5",
        f"partition: {TOPIC}-1\tlow_watermark: 10",
    ]
    assert watermarks_confluent(broker.bootstrap, TOPIC, range(PARTITIONS)) == {0: (5, 10), 1: (10, 10), 2: (0, 10)}

    one = admin_json(broker, "delete-records", "--topic", TOPIC, "--partition", "2", "--offset", "3")
    assert one == [{"topic": TOPIC, "partition": 2, "low_watermark": 3}]
    assert watermarks_confluent(broker.bootstrap, TOPIC, [2]) == {2: (3, 10)}

    plan.write_text(json.dumps({"partitions": [
        {"topic": TOPIC, "partition": 2, "offset": 4}, {"topic": TOPIC, "partition": 7, "offset": 1},
    ]}))
    done = admin_cli(broker, "delete-records", "--offset-json-file", str(plan))
    assert done.returncode == 1
    assert f"partition: {TOPIC}-2\tlow_watermark: 4" in done.stdout
    assert re.search(rf"partition: {TOPIC}-7\terror: UNKNOWN_TOPIC_OR_PARTITION", done.stdout)
    plan.write_text('{"partitions": [{"topic": "t", "partition": 0}], "version": 1}')
    assert_one_line_error(admin_cli(broker, "delete-records", "--offset-json-file", str(plan)), "offset")


# ---------------------------------------------------------------- strom cluster


def test_cluster_names_the_broker_controller_and_api_versions(broker):
    described = admin_json(broker, "cluster")
    assert described["controller_id"] == 1 and described["cluster_id"]
    assert described["brokers"] == [{"id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None, "fenced": False}]
    text = admin_ok(broker, "cluster").splitlines()
    assert text[0] == f"Cluster ID: {described['cluster_id']}"
    assert f"Broker: 1\tAddress: 127.0.0.1:{broker.port}\tRack: null\tFenced: false" in text

    lines = admin_ok(broker, "cluster", "--api-versions").splitlines()
    assert lines[0] == f"127.0.0.1:{broker.port} (id: 1 rack: null) -> ("
    assert lines[-1] == ")"
    advertised = wire.api_versions(broker.port).versions
    listed = {}
    for line in lines[1:-1]:
        match = re.fullmatch(r"\t(\w+)\((\d+)\): (?:(\d+)(?: to (\d+))? \[usable: (\d+)\]|UNSUPPORTED),?", line)
        assert match, line
        if match[3] is not None:
            listed[int(match[2])] = (int(match[3]), int(match[4] or match[3]))
    assert listed.keys() == advertised.keys()
    assert "\tApiVersions(18): " in "\n".join(lines)


# ---------------------------------------------------------------- strom features


def test_features_describe_and_change_levels_as_kafka_features_does(broker):
    """`strom features` against a single node: kafka-features.sh's lines,
    a dry run that changes nothing, a downgrade and an upgrade that do, and
    a level no node supports refused in one line."""
    described = admin_ok(broker, "features", "describe").splitlines()
    assert re.fullmatch(
        r"Feature: metadata\.version\tSupportedMinVersion: 4\.1-IV1\tSupportedMaxVersion: 4\.1-IV1\t"
        r"FinalizedVersionLevel: 4\.1-IV1\tEpoch: \d+",
        next(line for line in described if line.startswith("Feature: metadata.version\t")),
    ), described
    group = "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: {}\tEpoch:"

    def group_line() -> str:
        lines = admin_ok(broker, "features", "describe").splitlines()
        return next(line for line in lines if line.startswith("Feature: group.version\t"))

    assert group_line().startswith(group.format(1))
    dry = admin_ok(broker, "features", "downgrade", "--feature", "group.version=0", "--dry-run")
    assert dry == "group.version can be downgraded to 0.\n"
    assert group_line().startswith(group.format(1))
    assert admin_ok(broker, "features", "disable", "--feature", "group.version") == "group.version was disabled.\n"
    wait_until(lambda: group_line().startswith(group.format(0)), 10, "group.version disabled")
    upgraded = admin_ok(broker, "features", "upgrade", "--feature", "group.version=1")
    assert upgraded == "group.version was upgraded to 1.\n"
    wait_until(lambda: group_line().startswith(group.format(1)), 10, "group.version enabled")
    refused = admin_cli(broker, "features", "upgrade", "--feature", "group.version=7")
    assert "Could not upgrade group.version to 7. " in refused.stdout and "only supports versions 0-1" in refused.stdout
    assert_one_line_error(refused, "1 out of 1 operation(s) failed.")
