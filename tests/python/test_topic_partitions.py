"""DescribeTopicPartitions (KIP-966) through kafka-python, `strom topics
--describe` with kafka-topics.sh's lines and report filters, and `strom
leader-election` with kafka-leader-election.sh's flags: on one node, behind
an authorizer, and on a three-node cluster with a broker killed."""

from __future__ import annotations

import json
import uuid

import pytest
from kafka.admin import KafkaAdminClient

from cluster import CLUSTER_WAIT_S, Cluster
from harness import (
    ADMIN_TIMEOUT_S,
    admin_cli,
    admin_ok,
    create_topic,
    strom,
    wait_until,
)
from test_acls import USERS, Authorized

UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REQUEST = 42
# KIP-430: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
ALL_TOPIC_OPERATIONS = sum(1 << bit for bit in (3, 4, 5, 6, 7, 8, 10, 11))
READ_AND_DESCRIBE = (1 << 3) | (1 << 8)
# Fencing needs the session timeout (9 s) plus a heartbeat round or two.
FENCED_WAIT_S = 30.0


def kafka_python_admin(bootstrap: str, **extra) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000), **extra)


def describe(admin: KafkaAdminClient, topics: list[str], limit: int = 2000, cursor: dict | None = None) -> dict:
    return admin.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)


def by_name(response: dict) -> dict[str, dict]:
    return {t["name"]: t for t in response["topics"]}


# ------------------------------------------------------- DescribeTopicPartitions


def test_kafka_python_describes_partitions_with_leaders_isr_and_elr(broker):
    create_topic(broker.bootstrap, "dtp", partitions=3)
    admin = kafka_python_admin(broker.bootstrap)
    try:
        response = describe(admin, ["dtp", "ghost"])
    finally:
        admin.close()
    topics = by_name(response)
    assert response["next_cursor"] is None
    dtp = topics["dtp"]
    assert dtp["error_code"] == 0 and not dtp["is_internal"]
    assert dtp["topic_authorized_operations"] == ALL_TOPIC_OPERATIONS
    assert [p["partition_index"] for p in dtp["partitions"]] == [0, 1, 2]
    for p in dtp["partitions"]:
        assert (p["error_code"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (0, 1, [1], [1])
        assert p["leader_epoch"] >= 0 and p["offline_replicas"] == []
        assert not p["eligible_leader_replicas"] and not p["last_known_elr"]
    assert topics["ghost"]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert topics["ghost"]["partitions"] == []


def test_pages_follow_the_cursor_across_topics_in_name_order(broker):
    create_topic(broker.bootstrap, "page-b", partitions=3)
    create_topic(broker.bootstrap, "page-a", partitions=2)
    admin = kafka_python_admin(broker.bootstrap)
    try:
        wanted = ["page-b", "page-a"]
        seen: list[tuple[str, int]] = []
        cursors = []
        cursor = None
        for _ in range(10):
            response = describe(admin, wanted, limit=2, cursor=cursor)
            for topic in response["topics"]:
                assert topic["error_code"] == 0, topic
                seen += [(topic["name"], p["partition_index"]) for p in topic["partitions"]]
            cursor = response["next_cursor"]
            if cursor is None:
                break
            cursors.append((cursor["topic_name"], cursor["partition_index"]))
        assert cursor is None, "the pages end"
        assert seen == [("page-a", 0), ("page-a", 1), ("page-b", 0), ("page-b", 1), ("page-b", 2)]
        # A page ending with a topic's last partition points at the next topic's first.
        assert cursors == [("page-b", 0), ("page-b", 2)]

        # Every topic, in name order, when none is named; a cursor skips the earlier ones.
        everything = describe(admin, [])
        names = [t["name"] for t in everything["topics"]]
        assert names == sorted(names) and {"page-a", "page-b"} <= set(names)
        rest = describe(admin, [], cursor={"topic_name": "page-b", "partition_index": 1})
        assert [t["name"] for t in rest["topics"]][:1] == ["page-b"]
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [1, 2]

        # A cursor on a topic the request does not name is an invalid request.
        refused = describe(admin, ["page-a"], cursor={"topic_name": "page-b", "partition_index": 0})
        assert [(t["name"], t["error_code"]) for t in refused["topics"]] == [("page-a", INVALID_REQUEST)]
    finally:
        admin.close()


@pytest.fixture
def authorized(broker_factory) -> Authorized:
    return Authorized(broker_factory)


def test_topics_the_principal_may_not_describe_are_hidden_or_refused(authorized):
    create_topic(authorized.broker.bootstrap, "visible")
    create_topic(authorized.broker.bootstrap, "secret")
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "visible")
    admin = kafka_python_admin(
        f"127.0.0.1:{authorized.sasl_port}", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
        sasl_plain_username="alice", sasl_plain_password=USERS["alice"],
    )
    try:
        listed = describe(admin, [])
        assert [t["name"] for t in listed["topics"]] == ["visible"]
        assert listed["topics"][0]["topic_authorized_operations"] == READ_AND_DESCRIBE
        named = by_name(describe(admin, ["visible", "secret", "absent"]))
        assert named["visible"]["error_code"] == 0
        # An unauthorized name is refused whether or not the topic exists.
        assert named["secret"]["error_code"] == TOPIC_AUTHORIZATION_FAILED
        assert named["absent"]["error_code"] == TOPIC_AUTHORIZATION_FAILED
        assert named["secret"]["partitions"] == []
    finally:
        admin.close()


# ------------------------------------------------------- strom topics --describe


def partition_lines(topic: str, leader: str, partitions: range) -> list[str]:
    return [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: {leader}\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "
        for p in partitions
    ]


def test_describe_prints_kafka_topics_lines_and_report_filters(broker):
    create_topic(broker.bootstrap, "shown", partitions=2, config={"min.insync.replicas": "2"})
    create_topic(broker.bootstrap, "plain", partitions=1)
    lines = admin_ok(broker, "topics", "--describe", "--topic", "shown").splitlines()
    assert lines[0].startswith("Topic: shown\tTopicId: ")
    assert lines[0].endswith("\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: min.insync.replicas=2")
    assert lines[1:] == partition_lines("shown", "1", range(2))

    def report(flag: str) -> list[str]:
        return admin_ok(broker, "topics", "--describe", flag).splitlines()

    # One live replica each: nothing under-replicated or unavailable; "shown"
    # wants two in sync (under its minimum), "plain" one (at it).
    assert report("--under-replicated-partitions") == []
    assert report("--unavailable-partitions") == []
    assert report("--under-min-isr-partitions") == partition_lines("shown", "1", range(2))
    at_min = report("--at-min-isr-partitions")
    assert partition_lines("plain", "1", range(1))[0] in at_min
    assert not [line for line in at_min if "Topic: shown" in line or line.startswith("Topic:")]

    described = json.loads(admin_ok(broker, "topics", "--describe", "--topic", "shown", "--format", "json"))
    [topic] = described
    assert topic["configs"] == {"min.insync.replicas": "2"}
    assert [(p["leader"], p["isr"], p["elr"]) for p in topic["partitions"]] == [(1, [1], [])] * 2


def test_describe_reports_need_describe(broker):
    done = admin_cli(broker, "topics", "--list", "--unavailable-partitions")
    assert done.returncode != 0 and "--unavailable-partitions" in done.stderr


# ------------------------------------------------------- strom leader-election


def test_leader_election_of_a_partition_its_preferred_replica_leads_is_not_needed(broker):
    create_topic(broker.bootstrap, "elect", partitions=1)
    done = admin_cli(broker, "leader-election", "--election-type", "PREFERRED", "--topic", "elect", "--partition", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Valid replica already elected for partitions elect-0"]


def test_leader_election_flags_are_checked_as_kafkas(broker, tmp_path):
    def refused(*args: str) -> str:
        done = admin_cli(broker, "leader-election", *args)
        assert done.returncode != 0 and done.stdout == "", done
        return done.stderr

    assert "--partition" in refused("--election-type", "preferred", "--topic", "t")
    assert "--election-type" in refused("--all-topic-partitions")
    assert "cannot be used with" in refused("--election-type", "unclean", "--all-topic-partitions", "--topic", "t",
                                            "--partition", "0")
    assert "invalid value" in refused("--election-type", "random", "--all-topic-partitions")
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}))
    assert "duplicate partitions: t-0" in refused("--election-type", "preferred", "--path-to-json-file", str(twice))


# ------------------------------------------------------- three nodes, one killed


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, controllers=3, combined=True) as cluster:
        cluster.start_serving()
        yield cluster


def report(bootstrap: str, topic: str, flag: str) -> list[str] | None:
    """`strom topics --describe` lines for `flag`; None while the broker
    answering does not know the topic yet."""
    done = strom("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic, flag)
    return done.stdout.splitlines() if done.returncode == 0 else None


def described_partitions(bootstrap: str, topic: str) -> dict[int, dict]:
    """Partition -> its DescribeTopicPartitions description; empty while
    the topic is unknown or the client reached a broker that is down."""
    try:
        admin = kafka_python_admin(bootstrap)
    except Exception:  # noqa: BLE001 - kafka-python may bootstrap from the killed broker
        return {}
    try:
        [described] = describe(admin, [topic])["topics"]
    except Exception:  # noqa: BLE001 - as above, for the request itself
        return {}
    finally:
        admin.close()
    if described["error_code"] != 0:
        return {}
    return {p["partition_index"]: p for p in described["partitions"]}


def leaders_of(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader (-1: none)."""
    return {index: p["leader_id"] for index, p in described_partitions(bootstrap, topic).items()}


def test_a_killed_brokers_partitions_are_unavailable(cluster):
    topic = f"spread-{uuid.uuid4().hex[:8]}"
    bootstrap = cluster.nodes[1].bootstrap
    wait_until(lambda: create_topic(bootstrap, topic, 6) or True, CLUSTER_WAIT_S, "the topic created")

    def all_led() -> dict[int, int] | None:
        led = leaders_of(bootstrap, topic)
        return led if len(led) == 6 and min(led.values()) >= 0 else None

    led = wait_until(all_led, CLUSTER_WAIT_S, "every partition led")
    wait_until(
        lambda: report(bootstrap, topic, "--unavailable-partitions") == [], CLUSTER_WAIT_S, "no partition unavailable"
    )
    victim = next(n.node_id for n in cluster.brokers() if n.node_id != cluster.wait_for_leader()[0]
                  and n.node_id in led.values())
    owned = sorted(p for p, leader in led.items() if leader == victim)
    survivor = next(n.bootstrap for n in cluster.brokers() if n.node_id != victim)
    cluster.kill9(victim)

    wait_until(
        lambda: (led := leaders_of(survivor, topic)) and all(led[p] == -1 for p in owned),
        FENCED_WAIT_S,
        f"partitions of broker {victim} without a leader",
    )
    # Each broker applies the fencing when its metadata catches up: poll.
    # With eligible leader replicas the lone replica leaves the ISR for the
    # ELR, and is remembered as the last known leader.
    unavailable = [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: none\tReplicas: {victim}\tIsr: \tElr: {victim}"
        f"\tLastKnownElr: {victim}"
        for p in owned
    ]
    wait_until(
        lambda: report(survivor, topic, "--unavailable-partitions") == unavailable,
        CLUSTER_WAIT_S,
        "the unavailable partitions listed",
    )
    # RF=1: a leaderless partition is also under its minimum ISR.
    wait_until(
        lambda: report(survivor, topic, "--under-min-isr-partitions") == unavailable,
        CLUSTER_WAIT_S,
        "the partitions under min ISR listed",
    )
    offline = {p: ([victim] if p in owned else []) for p in range(6)}
    wait_until(
        lambda: {i: p["offline_replicas"] for i, p in described_partitions(survivor, topic).items()} == offline,
        CLUSTER_WAIT_S,
        f"replicas on broker {victim} offline",
    )
