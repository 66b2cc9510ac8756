"""Partition reassignments (KIP-455) on four brokers (three combined nodes
and a broker-only node 100): `strom reassign --execute` moves an RF=2
partition produced with acks=all to two other brokers, `--verify` reports
it complete once the new replicas are in sync, the new replicas hold every
record and lead, and the brokers that left delete their logs. A
reassignment whose new replica cannot catch up stays listed (kafka-python's
admin client sees it too) until `--cancel` reverts it. AlterPartitionReassignments
answers Kafka's errors to kafka-python, and bad plans are one-line errors."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError

from cluster import CLUSTER_WAIT_S, Cluster
from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_client,
    assert_one_line_error,
    confluent_producer,
    consume_confluent,
    create_topic,
    produce_confluent,
    strom,
    wait_future,
    wait_until,
)

BROKERS = {1, 2, 3, 100}
RECORDS = 2000
MOVE_WAIT_S = 60.0


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, controllers=3, brokers=1, combined=True) as cluster:
        cluster.start()
        cluster.wait_for_leader()
        for node in cluster.brokers():
            wait_until(lambda node=node: live_brokers(node.bootstrap) == BROKERS, CLUSTER_WAIT_S,
                       f"all brokers through broker {node.node_id}")
        yield cluster


def live_brokers(bootstrap: str) -> set[int]:
    try:
        return set(admin_client(bootstrap).list_topics(timeout=5).brokers)
    except Exception:  # noqa: BLE001 - a node still starting answers nothing
        return set()


def create_on(cluster: Cluster, replicas: list[int]) -> str:
    topic = f"move-{uuid.uuid4().hex[:8]}"
    admin = admin_client(cluster.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])])[topic])
    # Every broker knows the topic, so no tool meets one that does not yet.
    for node in cluster.brokers():
        wait_until(lambda node=node: (s := state(node.bootstrap, topic)) and s[0] >= 0, CLUSTER_WAIT_S,
                   f"a leader of {topic} on broker {node.node_id}")
    return topic


def state(bootstrap: str, topic: str) -> tuple[int, list[int], list[int]] | None:
    """Partition 0's leader, replicas and ISR, as Metadata reports them."""
    try:
        meta = admin_client(bootstrap).list_topics(topic, timeout=5).topics[topic].partitions.get(0)
    except Exception:  # noqa: BLE001 - polled again until the deadline
        return None
    return (meta.leader, list(meta.replicas), sorted(meta.isrs)) if meta else None


def plan(tmp_path, topic: str, replicas: list[int]):
    path = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.json"
    entry = {"topic": topic, "partition": 0, "replicas": replicas, "log_dirs": ["any"] * len(replicas)}
    path.write_text(json.dumps({"version": 1, "partitions": [entry]}))
    return path


def reassign(cluster: Cluster, *args: str):
    return strom("reassign", "--bootstrap-server", cluster.bootstrap, *args)


def test_execute_moves_every_acknowledged_record_to_the_new_replicas_and_the_old_ones_delete_their_logs(
        cluster, tmp_path):
    topic = create_on(cluster, [1, 2])
    producer = confluent_producer(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    sent = [OutRecord(f"k{i}".encode(), f"v{i}".encode() * 20, (), 1_700_000_000_000 + i) for i in range(RECORDS)]
    assert [d.offset for d in produce_confluent(producer, topic, sent, partition=0)] == list(range(RECORDS))

    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = reassign(cluster, "--generate", "--topics-to-move-json-file", str(to_move), "--broker-list", "3,100")
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[3] == "Proposed partition reassignment configuration"
    assert json.loads(lines[1]) == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}
    [proposed] = json.loads(lines[4])["partitions"]
    assert sorted(proposed["replicas"]) == [3, 100], proposed

    target = plan(tmp_path, topic, [3, 100])
    started = reassign(cluster, "--execute", "--reassignment-json-file", str(target))
    assert started.returncode == 0, started.stderr
    assert f"Successfully started partition reassignment for {topic}-0" in started.stdout
    assert '"replicas":[1,2]' in started.stdout, "the current assignment is printed for a rollback"

    def completed():
        done = reassign(cluster, "--verify", "--reassignment-json-file", str(target))
        assert done.returncode == 0, done.stderr
        return f"Reassignment of partition {topic}-0 is completed." in done.stdout

    wait_until(completed, MOVE_WAIT_S, "the reassignment to complete")
    leader, replicas, isr = wait_until(lambda: (s := state(cluster.bootstrap, topic)) and s[1] == [3, 100] and s, CLUSTER_WAIT_S,
                                       "the new replicas in the metadata")
    assert leader == 3 and isr == [3, 100], (leader, isr)
    # Read from the new leader, which took over from the removed one.
    read = consume_confluent(cluster.nodes[3].bootstrap, topic, {0: RECORDS})
    assert [r.value for r in read[0]] == [r.value for r in sent]
    for removed in (1, 2):
        log_dir = cluster.nodes[removed].data_dir / f"{topic}-0"
        wait_until(lambda log_dir=log_dir: not log_dir.exists(), CLUSTER_WAIT_S, f"{log_dir} deleted")
    logs = [(cluster.nodes[n].data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes() for n in (3, 100)]
    assert logs[0] == logs[1] and logs[0].count(f"v{RECORDS - 1}".encode()) == 20, "identical new replicas"
    listed = reassign(cluster, "--list")
    assert listed.returncode == 0 and listed.stdout == "No partition reassignments found.\n", listed
    # The moved partition takes acks=all writes on its new replicas.
    more = produce_confluent(producer, topic, sent[:10], partition=0)
    assert [d.offset for d in more] == list(range(RECORDS, RECORDS + 10))


def test_a_reassignment_that_cannot_catch_up_stays_listed_until_cancelled(cluster, tmp_path):
    topic = create_on(cluster, [1, 2])
    # Broker 100 is down and fenced: it stays registered but can never
    # join the ISR. The admin client bootstraps from broker 1 alone, which
    # names itself as the broker for admin requests.
    cluster.kill9(100)
    bootstrap = cluster.nodes[1].bootstrap
    wait_until(lambda: live_brokers(bootstrap) == BROKERS - {100}, CLUSTER_WAIT_S, "broker 100 fenced")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap,
                             request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
    tp = TopicPartition(topic, 0)
    try:
        assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
        assert admin.alter_partition_reassignments({tp: [3, 3]}) == {tp: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: [3, 77]}) == {tp: InvalidReplicationAssignmentError}
        missing = TopicPartition(topic, 5)
        assert admin.alter_partition_reassignments({missing: [3]}) == {missing: UnknownTopicOrPartitionError}

        assert admin.alter_partition_reassignments({tp: [1, 100]}) == {tp: None}
        ongoing = admin.list_partition_reassignments([tp])
        assert ongoing == {tp: {"replicas": [1, 100, 2], "adding_replicas": [100], "removing_replicas": [2]}}
    finally:
        admin.close()
    listed = reassign(cluster, "--list")
    assert listed.stdout == f"Current partition reassignments:\n{topic}-0: replicas: 1,100,2. adding: 100. removing: 2.\n"
    target = plan(tmp_path, topic, [1, 100])
    verified = reassign(cluster, "--verify", "--reassignment-json-file", str(target))
    assert f"Reassignment of partition {topic}-0 is still in progress." in verified.stdout, verified
    refused = reassign(cluster, "--execute", "--reassignment-json-file", str(plan(tmp_path, topic, [1, 3])))
    assert_one_line_error(refused, "Cannot execute because there is an existing partition assignment")

    cancelled = reassign(cluster, "--cancel", "--reassignment-json-file", str(target))
    assert cancelled.returncode == 0 and cancelled.stdout == f"Successfully cancelled partition reassignment for: {topic}-0\n", cancelled
    leader, replicas, isr = wait_until(lambda: (s := state(cluster.bootstrap, topic)) and s[1] == [1, 2] and s, CLUSTER_WAIT_S,
                                       "the original replicas back")
    assert (leader, isr) == (1, [1, 2])
    again = reassign(cluster, "--cancel", "--reassignment-json-file", str(target))
    assert again.stdout == "None of the specified partition reassignments are active.\n", again
    # Brokers learn of the revert a moment after the controller.
    reverted = f"There is no active reassignment of partition {topic}-0, but replica set is 1,2 rather than 1,100."
    wait_until(lambda: reverted in reassign(cluster, "--verify", "--reassignment-json-file", str(target)).stdout,
               CLUSTER_WAIT_S, "--verify to report the original replicas")


def test_bad_plans_are_one_line_errors(cluster, tmp_path):
    topic = create_on(cluster, [1, 2])
    bad = tmp_path / "bad.json"
    cases = {
        "not json": "is not valid JSON",
        json.dumps({"version": 1, "partitions": []}): "Partition reassignment list cannot be empty",
        json.dumps({"version": 2, "partitions": []}): "Not supported version field value 2",
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 3]}]}):
            "may not contain duplicate entries",
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0}]}): "needs a",
    }
    for text, fragment in cases.items():
        bad.write_text(text)
        assert_one_line_error(reassign(cluster, "--execute", "--reassignment-json-file", str(bad)), fragment)
    assert_one_line_error(reassign(cluster, "--execute", "--reassignment-json-file", str(tmp_path / "none.json")),
                          "cannot read")
    assert_one_line_error(reassign(cluster, "--execute", "--reassignment-json-file",
                                   str(plan(tmp_path, topic, [3, 77]))), "Unknown broker id 77")
    assert_one_line_error(reassign(cluster, "--execute", "--reassignment-json-file",
                                   str(plan(tmp_path, "no-such-topic", [3]))), "Topic no-such-topic not found.")
    assert_one_line_error(reassign(cluster, "--execute", "--disallow-replication-factor-change",
                                   "--reassignment-json-file", str(plan(tmp_path, topic, [3]))),
                          f"{topic}-0: ", "The replication factor is changed from 2 to 1")
    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    assert_one_line_error(reassign(cluster, "--generate", "--topics-to-move-json-file", str(to_move),
                                   "--broker-list", "3"), "Replication factor: 2 larger than available brokers: 1.")
    assert_one_line_error(reassign(cluster, "--generate", "--topics-to-move-json-file", str(to_move),
                                   "--broker-list", "3,3"), "Broker list contains duplicate entries: 3")
    assert reassign(cluster, "--verify").returncode != 0, "--verify needs a plan"


def test_reassignments_need_alter_and_listing_needs_describe_on_the_cluster(broker_factory):
    from kafka.errors import ClusterAuthorizationFailedError
    from test_acls import USERS, Authorized

    authorized = Authorized(broker_factory)
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    create_topic(authorized.broker.bootstrap, topic)
    admin = KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{authorized.sasl_port}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
    tp = TopicPartition(topic, 0)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.alter_partition_reassignments({tp: [1]})
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.list_partition_reassignments()
        authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Describe", "--cluster")
        assert admin.list_partition_reassignments() == {}
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.alter_partition_reassignments({tp: [1]})
        authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Alter", "--cluster")
        assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    finally:
        admin.close()
