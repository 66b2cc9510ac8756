"""KIP-853 dynamic voters across real processes: a controller formatted
`--standalone`, two more formatted `--no-initial-controllers` that join as
observers through `controller.quorum.bootstrap.servers`, added and removed
with `strom cluster --add-controller` / `--remove-controller`, as Kafka's
docs run `kafka-metadata-quorum.sh add-controller`."""

from __future__ import annotations

import pytest

from cluster import CLUSTER_WAIT_S, Cluster
import wire
from harness import free_port, strom, strom_ok, wait_until
from test_storage_format import read_meta

# A few election timeouts (300 ms, randomised up to 2x, plus the fetch timeout).
FAILOVER_S = 15.0


def dynamic_cluster(tmp_path, combined: bool) -> Cluster:
    """Three controllers that know the quorum only through node 1's controller listener."""
    cluster = Cluster(tmp_path, controllers=3, combined=combined)
    first = cluster.nodes[1]
    for node in cluster.nodes.values():
        node.process.overrides.pop("controller.quorum.voters")
        node.process.overrides["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{first.controller_port}"
    return cluster


def format_and_start(cluster: Cluster, node_id: int, flag: str) -> None:
    node = cluster.nodes[node_id]
    properties = node.process.workdir / "server.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in node.process.overrides.items()))
    done = strom("storage", "format", "--config", str(properties), "--cluster-id", cluster.cluster_id, flag)
    assert done.returncode == 0, done.stderr
    node.process.start()


def directory_id(cluster: Cluster, node_id: int) -> str:
    return read_meta(cluster.nodes[node_id].data_dir)["directory.id"]


def quorum_cli(cluster: Cluster, node_id: int, *args: str) -> str:
    return strom_ok("cluster", "--bootstrap-server", f"127.0.0.1:{cluster.nodes[node_id].port}", *args)


def voter_listeners(cluster: Cluster, node_id: int) -> dict:
    """DescribeQuorum v2's nodes as `node_id` answers: id -> [(listener, host, port)]."""
    node = cluster.nodes[node_id]
    try:
        return dict(wire.describe_quorum(node.port, 2, host=node.host).nodes)
    except (OSError, ValueError, AssertionError):
        return {}


def ids(replicas) -> list[int]:
    return sorted(r.replica_id for r in replicas)


def three_voters(cluster: Cluster):
    """Node 1 formatted `--standalone`, 2 and 3 joined as observers and
    added as voters; returns the quorum's description then."""
    format_and_start(cluster, 1, "--standalone")
    partition = cluster.wait_for_description(lambda p: p.leader_id == 1 and p.high_watermark > 0)
    assert ids(partition.voters) == [1]

    for node_id in (2, 3):
        format_and_start(cluster, node_id, "--no-initial-controllers")
    cluster.wait_for_description(lambda p: ids(p.observers) == [2, 3], what="two observers")

    # Kafka's tool is run with the new controller's own config.
    for node_id in (2, 3):
        properties = cluster.nodes[node_id].process.workdir / "server.properties"
        out = quorum_cli(cluster, 1, "--add-controller", "--controller-config", str(properties))
        assert f"Added controller {node_id}" in out, out
    return cluster.wait_for_description(
        lambda p: ids(p.voters) == [1, 2, 3] and p.observers == [], what="three voters"
    )


@pytest.mark.parametrize("combined", [False, True], ids=["controller-only", "combined"])
def test_controllers_join_as_observers_become_voters_survive_a_kill9_and_leave(tmp_path, combined):
    with dynamic_cluster(tmp_path, combined) as cluster:
        partition = three_voters(cluster)
        # Each change is a VotersRecord in the log, as Kafka writes it.
        segment = cluster.nodes[1].data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
        wait_until(
            lambda: strom_ok("dump-log", "--files", str(segment), "--deep-iteration").count(
                " KRaftVoters {"
            )
            >= 3,
            CLUSTER_WAIT_S,
            "three VotersRecords in node 1's log",
        )
        shown = {v.replica_id: v.directory_id for v in partition.voters}
        replication = quorum_cli(cluster, 1, "--quorum", "--replication")
        for node_id in (1, 2, 3):
            assert shown[node_id] is not None
            assert directory_id(cluster, node_id) in replication, replication

        # The three elect a new leader among themselves without node 1.
        leader, epoch = partition.leader_id, partition.leader_epoch
        cluster.kill9(leader)
        partition = cluster.wait_for_description(
            lambda p: p.leader_id not in (-1, leader) and p.leader_epoch > epoch,
            timeout_s=FAILOVER_S,
            what="a new leader",
        )
        assert ids(partition.voters) == [1, 2, 3]
        cluster.restart(leader)

        # A removed voter carries on as an observer; asked of a node that
        # does not lead, the removal is forwarded to the leader.
        removed = next(node_id for node_id in (1, 2, 3) if node_id != partition.leader_id)
        args = ("--remove-controller", "--controller-id", str(removed))
        out = quorum_cli(cluster, removed, *args, "--controller-directory-id", directory_id(cluster, removed))
        assert f"Removed controller {removed}" in out, out
        remaining = sorted({1, 2, 3} - {removed})
        partition = cluster.wait_for_description(
            lambda p: ids(p.voters) == remaining and removed in ids(p.observers),
            timeout_s=CLUSTER_WAIT_S,
            what=f"{removed} an observer",
        )
        refused = strom(
            "cluster",
            "--bootstrap-server",
            f"127.0.0.1:{cluster.nodes[partition.leader_id].port}",
            *args,
            "--controller-directory-id",
            "not-a-uuid",
        )
        assert refused.returncode != 0 and "not a Kafka uuid" in refused.stderr, refused.stderr
        assert wait_until(lambda: cluster.nodes[removed].alive(), 5, "the removed controller still running")


def test_a_voter_back_on_another_controller_port_tells_the_leader_with_update_raft_voter(tmp_path):
    with dynamic_cluster(tmp_path, combined=True) as cluster:
        partition = three_voters(cluster)
        moved = next(node_id for node_id in (2, 3) if node_id != partition.leader_id)
        node = cluster.nodes[moved]
        node.process.stop()
        node.controller_port = free_port()
        node.process.overrides["listeners"] = node.listeners()
        node.process.start()

        # Back as a follower, it sends UpdateRaftVoter after a few fetch
        # timeouts; the VotersRecord, and so DescribeQuorum, names the new port.
        endpoint = [("CONTROLLER", node.host, node.controller_port)]
        wait_until(
            lambda: voter_listeners(cluster, partition.leader_id).get(moved) == endpoint,
            CLUSTER_WAIT_S,
            f"node {moved}'s new controller endpoint in the voter set",
        )
        # The others reach it there: with the leader gone, it can vote.
        leader, epoch = partition.leader_id, partition.leader_epoch
        cluster.kill9(leader)
        cluster.wait_for_description(
            lambda p: p.leader_id not in (-1, leader) and p.leader_epoch > epoch,
            timeout_s=FAILOVER_S,
            what="a new leader",
        )
