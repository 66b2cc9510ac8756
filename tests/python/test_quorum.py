"""DescribeQuorum and `strom cluster --quorum`: the metadata quorum of a
single node, which leads `__cluster_metadata`-0 as its only voter, answered
in the shape Kafka's quorum leader gives (KafkaRaftClient.
handleDescribeQuorumRequest) on broker and controller listeners. A KRaft
node runs the real quorum (its first epoch is 1, the high watermark covers
its LeaderChange record); a node without process.roles answers for its
local metadata log. Multi-node quorums: test_quorum_cluster.py."""

from __future__ import annotations

import base64
import uuid

import pytest

import wire
from harness import admin_ok, create_topic, now_ms
from test_storage_format import KraftNode, random_uuid, read_meta

METADATA = "__cluster_metadata"


@pytest.fixture
def kraft(broker_factory) -> KraftNode:
    """A started combined node formatted with `--standalone`."""
    node = KraftNode(broker_factory(start=False))
    done = node.format(random_uuid(), "--standalone")
    assert done.returncode == 0, done.stderr
    node.broker.start()
    return node


def controller_port(node: KraftNode) -> int:
    return int(node.broker.overrides["controller.quorum.bootstrap.servers"].rsplit(":", 1)[1])


def metadata_directory_id(node: KraftNode) -> uuid.UUID:
    encoded = read_meta(node.dirs[0])["directory.id"]
    return uuid.UUID(bytes=base64.urlsafe_b64decode(encoded + "=="))


def only_partition(response: wire.DescribeQuorumResponse) -> wire.QuorumPartition:
    assert response.error_code == wire.NONE, response
    [(topic, [partition])] = response.topics
    assert topic == METADATA
    return partition


def test_the_node_is_leader_and_only_voter_at_every_version_on_both_listeners(kraft):
    create_topic(kraft.broker.bootstrap, "quorum")
    for port in (kraft.broker.port, controller_port(kraft)):
        for version in (0, 1, 2):
            before = now_ms()
            partition = only_partition(wire.describe_quorum(port, version))
            after = now_ms()
            assert (partition.partition_index, partition.error_code) == (0, wire.NONE)
            assert (partition.leader_id, partition.leader_epoch) == (1, 1)
            assert partition.high_watermark > 0, "the metadata log holds the leader's LeaderChange"
            [voter] = partition.voters
            assert (voter.replica_id, voter.log_end_offset) == (1, partition.high_watermark)
            assert partition.observers == []
            if version >= 1:
                assert before <= voter.last_fetch_timestamp <= after
                assert before <= voter.last_caught_up_timestamp <= after
            if version >= 2:
                assert voter.directory_id == metadata_directory_id(kraft)
                response = wire.describe_quorum(port, version)
                assert response.nodes == [(1, [("CONTROLLER", "127.0.0.1", controller_port(kraft))])]


def test_the_high_watermark_of_a_single_node_follows_its_metadata_log(broker):
    before = only_partition(wire.describe_quorum(broker.port)).high_watermark
    create_topic(broker.bootstrap, "moves-the-watermark")
    after = only_partition(wire.describe_quorum(broker.port)).high_watermark
    assert after > before


def test_a_single_node_without_process_roles_answers_too(broker):
    partition = only_partition(wire.describe_quorum(broker.port))
    [voter] = partition.voters
    assert (partition.leader_id, voter.replica_id, voter.log_end_offset) == (1, 1, partition.high_watermark)


@pytest.mark.parametrize(
    "topics",
    [
        {METADATA: [1]},
        {"other": [0]},
        {METADATA: [0, 1]},
        {METADATA: [0], "other": [0]},
    ],
    ids=["other-partition", "other-topic", "two-partitions", "two-topics"],
)
def test_anything_but_the_metadata_partition_is_unknown(broker, topics):
    response = wire.describe_quorum(broker.port, 2, topics)
    assert response.error_code == wire.NONE
    answered = {name: [(p.partition_index, p.error_code) for p in partitions] for name, partitions in response.topics}
    expected = {name: [(p, wire.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions] for name, partitions in topics.items()}
    assert answered == expected


# ---------------------------------------------------------------- strom cluster --quorum


def test_cluster_quorum_prints_kafka_metadata_quorum_status(kraft):
    create_topic(kraft.broker.bootstrap, "status")
    high_watermark = only_partition(wire.describe_quorum(kraft.broker.port)).high_watermark
    cluster_id = read_meta(kraft.dirs[0])["cluster.id"]
    directory_id = read_meta(kraft.dirs[0])["directory.id"]
    endpoint = f"CONTROLLER://127.0.0.1:{controller_port(kraft)}"
    assert admin_ok(kraft.broker, "cluster", "--quorum").splitlines() == [
        f"ClusterId:              {cluster_id}",
        "LeaderId:               1",
        "LeaderEpoch:            1",
        f"HighWatermark:          {high_watermark}",
        "MaxFollowerLag:         0",
        "MaxFollowerLagTimeMs:   0",
        f'CurrentVoters:          [{{"id": 1, "directoryId": "{directory_id}", "endpoints": ["{endpoint}"]}}]',
        "CurrentObservers:       []",
    ]


def test_cluster_quorum_replication_prints_kafka_metadata_quorum_table(kraft):
    directory_id = read_meta(kraft.dirs[0])["directory.id"]
    before = now_ms()
    header, *rows = admin_ok(kraft.broker, "cluster", "--quorum", "--replication").splitlines()
    after = now_ms()
    columns = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    assert header.split() == columns
    assert header.endswith("\t"), "every cell is followed by a tab, as Kafka's table prints"
    [row] = rows
    node_id, directory, log_end_offset, lag, fetched, caught_up, status = row.split()
    assert (node_id, directory, lag, status) == ("1", directory_id, "0", "Leader")
    assert int(log_end_offset) > 0
    assert before <= int(fetched) <= after and before <= int(caught_up) <= after
    # Columns line up: each cell is padded to its column's width.
    assert [len(cell) for cell in row.split("\t")[:-1]] == [len(cell) for cell in header.split("\t")[:-1]]
