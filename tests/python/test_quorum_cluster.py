"""The KRaft metadata quorum across real processes: elections, failover
after kill -9 and SIGSTOP, observers, as DescribeQuorum, `strom cluster
--quorum` and each node's `quorum-state` report them."""

from __future__ import annotations

import time

import pytest

from cluster import CLUSTER_WAIT_S, Cluster
from harness import strom_ok

# A few election timeouts (300 ms, randomised up to 2x, plus the fetch timeout).
FAILOVER_S = 15.0


def status(cluster: Cluster, node_id: int) -> dict[str, str]:
    """`strom cluster --quorum` through one node, as key: value lines."""
    out = strom_ok("cluster", "--quorum", "--bootstrap-server", f"127.0.0.1:{cluster.nodes[node_id].port}")
    return dict(line.split(":", 1) for line in out.strip().splitlines() if ":" in line)


def assert_one_leader_per_epoch(history: dict[int, set[int]]) -> None:
    for epoch, leaders in history.items():
        assert len(leaders - {-1}) <= 1, f"epoch {epoch} had leaders {leaders}"


def record_views(cluster: Cluster, history: dict[int, set[int]]) -> None:
    for epoch, leader in cluster.views().values():
        history.setdefault(epoch, set()).add(leader)


@pytest.mark.parametrize("combined", [False, True], ids=["controller-only", "combined"])
def test_three_controllers_elect_one_leader_that_describe_quorum_reports(tmp_path, combined):
    with Cluster(tmp_path, controllers=3, combined=combined) as cluster:
        cluster.start()
        leader, epoch = cluster.wait_for_leader()
        assert epoch >= 1
        partition = cluster.wait_for_description(
            lambda p: p.high_watermark > 0 and all(v.log_end_offset >= p.high_watermark for v in p.voters),
            what="every voter caught up",
        )
        assert (partition.leader_id, partition.leader_epoch) == (leader, epoch)
        assert sorted(v.replica_id for v in partition.voters) == [1, 2, 3]
        assert partition.observers == []
        segment = cluster.nodes[leader].data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
        dumped = strom_ok("dump-log", "--files", str(segment), "--deep-iteration")
        assert f"partitionLeaderEpoch: {epoch} isTransactional: false isControl: true" in dumped, dumped
        assert "controlType: LEADER_CHANGE(2)" in dumped, dumped
        for node_id in cluster.nodes:
            shown = status(cluster, node_id)
            assert shown["LeaderId"].strip() == str(leader), shown
            assert shown["LeaderEpoch"].strip() == str(epoch), shown
            assert shown["CurrentVoters"].count("id") == 3, shown


def test_kill9_of_the_leader_elects_another_in_a_higher_epoch(tmp_path):
    with Cluster(tmp_path, controllers=3) as cluster:
        cluster.start()
        old_leader, old_epoch = cluster.wait_for_leader()
        cluster.kill9(old_leader)
        new_leader, new_epoch = cluster.wait_for_leader(FAILOVER_S, newer_than=old_epoch)
        assert new_leader != old_leader
        cluster.restart(old_leader)
        leader, epoch = cluster.wait_for_leader()
        assert epoch >= new_epoch
        partition = cluster.wait_for_description(
            lambda p: p.leader_epoch == epoch and all(v.log_end_offset >= p.high_watermark > 0 for v in p.voters),
            what="the restarted node catching up",
        )
        assert sorted(v.replica_id for v in partition.voters) == [1, 2, 3]


def test_a_paused_leader_is_replaced_and_follows_once_resumed(tmp_path):
    history: dict[int, set[int]] = {}
    with Cluster(tmp_path, controllers=3) as cluster:
        cluster.start()
        old_leader, old_epoch = cluster.wait_for_leader()
        cluster.nodes[old_leader].pause()
        deadline = time.monotonic() + FAILOVER_S
        new = None
        while new is None and time.monotonic() < deadline:
            record_views(cluster, history)
            views = {id: v for id, v in cluster.views().items() if id != old_leader}
            agreed = set(views.values())
            if len(agreed) == 1:
                [(epoch, leader)] = agreed
                new = (leader, epoch) if epoch > old_epoch and leader not in (-1, old_leader) else None
            time.sleep(0.02)
        assert new is not None, f"no new leader within {FAILOVER_S}s: {cluster.views()}"
        cluster.nodes[old_leader].resume()
        leader, epoch = cluster.wait_for_leader(CLUSTER_WAIT_S, newer_than=old_epoch)
        assert old_leader in {n.node_id for n in cluster.running()}
        # The resumed node learns the new epoch and follows it.
        assert cluster.views()[old_leader] == (epoch, leader)
        record_views(cluster, history)
        assert_one_leader_per_epoch(history)


def test_a_broker_only_node_follows_as_an_observer(tmp_path):
    with Cluster(tmp_path, controllers=3, brokers=1) as cluster:
        cluster.start()
        leader, _ = cluster.wait_for_leader()
        partition = cluster.wait_for_description(
            lambda p: [o.replica_id for o in p.observers] == [100] and p.observers[0].log_end_offset >= p.high_watermark,
            what="the broker as a caught-up observer",
        )
        assert partition.leader_id == leader
        assert 100 not in [v.replica_id for v in partition.voters]
        shown = status(cluster, 100)
        assert shown["LeaderId"].strip() == str(leader), shown
        assert '"id": 100' in shown["CurrentObservers"], shown
        out = strom_ok("cluster", "--quorum", "--replication", "--bootstrap-server", cluster.nodes[100].bootstrap)
        roles = {row.split()[0]: row.split()[-1] for row in out.strip().splitlines()[1:]}
        expected = {"1": "Follower", "2": "Follower", "3": "Follower", "100": "Observer", str(leader): "Leader"}
        assert roles == expected, out
