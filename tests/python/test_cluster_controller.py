"""The controller across real processes: metadata written through the
KRaft quorum and replayed by every node, brokers registering and
heartbeating to the active controller, admin writes forwarded to it, and
what survives killing, pausing and fencing."""

from __future__ import annotations

import subprocess
import time

from cluster import CLUSTER_WAIT_S, Cluster
from harness import strom, strom_binary, topic_names, wait_until

# A few election timeouts (300 ms, randomised up to 2x, plus the fetch timeout).
FAILOVER_S = 15.0
# Short broker sessions, so fencing is seen within a test.
FAST_SESSIONS = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300"}


def create_topic(bootstrap: str, name: str, timeout_s: float = 20) -> bool:
    """`strom topics --create` of a 1-partition topic; True when acknowledged."""
    done = strom("topics", "--create", "--topic", name, "--bootstrap-server", bootstrap, timeout_s=timeout_s)
    return done.returncode == 0


def brokers_shown(bootstrap: str) -> dict[int, bool]:
    """`strom cluster`'s brokers, each with whether it is fenced ({} when
    it does not answer in time: a client may try a paused broker)."""
    try:
        done = strom("cluster", "--bootstrap-server", bootstrap, timeout_s=5)
    except subprocess.TimeoutExpired:
        return {}
    if done.returncode != 0:
        return {}
    shown = {}
    for line in done.stdout.splitlines():
        if line.startswith("Broker: "):
            fields = dict(field.split(": ", 1) for field in line.split("\t"))
            shown[int(fields["Broker"])] = fields["Fenced"] == "true"
    return shown


def test_a_topic_created_through_any_of_three_combined_nodes_appears_in_every_nodes_metadata(tmp_path):
    with Cluster(tmp_path, controllers=3, combined=True) as cluster:
        cluster.start()
        leader, _ = cluster.wait_for_leader()
        nodes = list(cluster.nodes.values())
        wait_until(lambda: brokers_shown(nodes[0].bootstrap) == {1: False, 2: False, 3: False}, CLUSTER_WAIT_S,
                   "three unfenced brokers")
        followers = [n for n in nodes if n.node_id != leader]
        names = {f"through-{node.node_id}" for node in [*followers, cluster.nodes[leader]]}
        for node in [*followers, cluster.nodes[leader]]:
            assert create_topic(node.bootstrap, f"through-{node.node_id}"), f"create through node {node.node_id}"
        for node in nodes:
            wait_until(lambda node=node: names <= topic_names(node.bootstrap), CLUSTER_WAIT_S,
                       f"every topic in node {node.node_id}'s metadata")


def test_brokers_of_a_cluster_with_separate_controllers_register_unfenced(tmp_path):
    with Cluster(tmp_path, controllers=3, brokers=3) as cluster:
        cluster.start()
        leader, _ = cluster.wait_for_leader()
        broker = cluster.nodes[100]
        wait_until(lambda: brokers_shown(broker.bootstrap) == {100: False, 101: False, 102: False},
                   CLUSTER_WAIT_S, "three unfenced brokers")
        shown = strom("cluster", "--bootstrap-server", broker.bootstrap).stdout
        assert f"Quorum leader: {leader} " in shown, shown
        assert shown.count("Quorum voter: ") == 3, shown


def test_kill9_of_the_active_controller_loses_no_acknowledged_topic(tmp_path):
    with Cluster(tmp_path, controllers=3, brokers=1) as cluster:
        cluster.start()
        leader, epoch = cluster.wait_for_leader()
        bootstrap = cluster.nodes[100].bootstrap
        wait_until(lambda: brokers_shown(bootstrap) == {100: False}, CLUSTER_WAIT_S, "an unfenced broker")
        acknowledged, after_kill = [], []
        deadline = time.monotonic() + 60
        for i in range(30):
            assert time.monotonic() < deadline, "creating topics took too long"
            if i == 5:
                cluster.kill9(leader)
            if create_topic(bootstrap, f"loop-{i}"):
                (after_kill if i >= 5 else acknowledged).append(f"loop-{i}")
        assert len(acknowledged) == 5, acknowledged
        assert after_kill, "creation never resumed at a new controller"
        new_leader, new_epoch = cluster.wait_for_leader(newer_than=epoch)
        assert new_leader != leader and new_epoch > epoch
        # The broker replays the controller's commits shortly after they are acknowledged.
        wait_until(lambda: set(acknowledged + after_kill) <= topic_names(bootstrap), CLUSTER_WAIT_S,
                   "every acknowledged topic in the metadata")


def test_a_paused_controller_steps_down_and_never_writes_in_its_old_epoch(tmp_path):
    with Cluster(tmp_path, controllers=3, combined=True, overrides=FAST_SESSIONS) as cluster:
        cluster.start()
        old_leader, old_epoch = cluster.wait_for_leader()
        others = [n for n in cluster.nodes.values() if n.node_id != old_leader]
        wait_until(lambda: len(brokers_shown(others[0].bootstrap)) == 3, CLUSTER_WAIT_S, "three brokers")
        cluster.nodes[old_leader].pause()
        new_leader, new_epoch = wait_until(
            lambda: (view := majority_view(cluster, old_leader)) and view[1] > old_epoch and view,
            FAILOVER_S, "a new leader among the others")
        # Clients pick any listed broker: once the new controller fenced the
        # paused one, none is sent there.
        wait_until(lambda: brokers_shown(others[0].bootstrap).get(old_leader) is True, CLUSTER_WAIT_S,
                   "the paused node fenced by the new controller")
        assert create_topic(others[0].bootstrap, "while-paused")
        cluster.nodes[old_leader].resume()
        # Sent to the old leader directly: forwarded to the new controller or
        # refused, never written in the old epoch.
        done = strom("topics", "--create", "--topic", "to-old-leader", "--bootstrap-server",
                     cluster.nodes[old_leader].bootstrap, timeout_s=30)
        assert done.returncode == 0 or "NOT_CONTROLLER" in done.stderr, done.stderr
        leader, epoch = cluster.wait_for_leader(newer_than=old_epoch)
        assert leader != old_leader or epoch > old_epoch
        expected = {"while-paused"} | ({"to-old-leader"} if done.returncode == 0 else set())
        for node in cluster.nodes.values():
            wait_until(lambda node=node: expected <= topic_names(node.bootstrap), CLUSTER_WAIT_S,
                       f"the topics on node {node.node_id}")
        listed = strom("topics", "--list", "--bootstrap-server", others[0].bootstrap).stdout.split()
        assert len(listed) == len(set(listed)), listed


def majority_view(cluster: Cluster, excluded: int) -> tuple[int, int] | None:
    """(leader, epoch) agreed by every controller but `excluded`."""
    views = {id: view for id, view in cluster.views().items() if id != excluded}
    agreed = set(views.values())
    if len(agreed) != 1:
        return None
    [(epoch, leader)] = agreed
    return (leader, epoch) if leader not in (-1, excluded) else None


def test_a_killed_broker_is_fenced_after_its_session_and_unfenced_after_restart(tmp_path):
    with Cluster(tmp_path, controllers=1, brokers=2, overrides=FAST_SESSIONS) as cluster:
        cluster.start()
        cluster.wait_for_leader()
        bootstrap = cluster.nodes[100].bootstrap
        wait_until(lambda: brokers_shown(bootstrap) == {100: False, 101: False}, CLUSTER_WAIT_S,
                   "two unfenced brokers")
        cluster.kill9(101)
        killed_at = time.monotonic()
        wait_until(lambda: brokers_shown(bootstrap).get(101) is True, CLUSTER_WAIT_S, "broker 101 fenced")
        assert time.monotonic() - killed_at >= 1.0, "fenced before its session could expire"
        assert brokers_shown(bootstrap).get(100) is False
        cluster.restart(101)
        wait_until(lambda: brokers_shown(bootstrap).get(101) is False, CLUSTER_WAIT_S, "broker 101 unfenced")


def quorum_high_watermark(cluster: Cluster, node_id: int) -> int | None:
    """The high watermark `node_id` reports while it thinks it leads."""
    partition = cluster.describe_quorum(node_id)
    return partition.high_watermark if partition is not None and partition.leader_id == node_id else None


def test_a_leader_cut_off_from_the_majority_commits_nothing_and_rejoins_as_follower(tmp_path):
    # Every node in its own network namespace; the leader's links to the
    # others are blackholed both ways. A long fetch timeout keeps it
    # leading (check-quorum) while it is watched.
    overrides = {**FAST_SESSIONS, "controller.quorum.fetch.timeout.ms": "6000"}
    with Cluster(tmp_path, controllers=3, combined=True, overrides=overrides, netns=True) as cluster:
        cluster.start()
        wait_until(lambda: len(brokers_shown(cluster.nodes[1].bootstrap)) == 3, CLUSTER_WAIT_S, "three brokers")
        old_leader, old_epoch = cluster.wait_for_leader()
        node = cluster.nodes[old_leader]
        others = [n for n in cluster.nodes.values() if n.node_id != old_leader]
        cluster.cut(old_leader)
        before = quorum_high_watermark(cluster, old_leader)
        # From inside its namespace a client reaches only the cut-off leader.
        try:
            acknowledged = create_topic_in(node, "lonely", timeout_s=3)
        except subprocess.TimeoutExpired:
            acknowledged = False
        assert not acknowledged, "a leader without a majority acknowledged a CreateTopics"
        after = quorum_high_watermark(cluster, old_leader)
        assert before is not None and after == before, (before, after)
        # The majority elects a leader among itself and keeps serving.
        wait_until(lambda: majority_leader(cluster, others, old_epoch), FAILOVER_S + CLUSTER_WAIT_S,
                   "a leader among the majority")
        wait_until(lambda: create_or_give_up(others[0].bootstrap, "during-cut"), 2 * CLUSTER_WAIT_S,
                   "a CreateTopics served by the majority")
        assert quorum_high_watermark(cluster, old_leader) in (before, None)
        cluster.heal()
        # The old leader follows the majority's leader and its log matches.
        leader, _ = cluster.wait_for_leader(newer_than=old_epoch)
        assert leader != old_leader
        cluster.wait_for_description(
            lambda p: len({v.log_end_offset for v in p.voters} | {p.high_watermark}) == 1,
            what="every voter's log end at the high watermark",
        )
        # The rejoined node replays the majority's topics, and only those.
        names = wait_until(lambda: "during-cut" in (names := topics_or_none(node.bootstrap)) and names,
                           CLUSTER_WAIT_S, "the majority's topic on the rejoined node")
        assert "lonely" not in names, names


def topics_or_none(bootstrap: str) -> set[str]:
    """The topics a broker lists; none while it cannot answer."""
    try:
        return topic_names(bootstrap)
    except Exception:  # noqa: BLE001 - a broker still recovering: ask again
        return set()


def majority_leader(cluster: Cluster, others: list, old_epoch: int):
    """The quorum description of a leader among `others` in an epoch after `old_epoch`, if there is one."""
    for other in others:
        partition = cluster.describe_quorum(other.node_id)
        if partition is not None and partition.leader_id == other.node_id and partition.leader_epoch > old_epoch:
            return partition
    return None


def create_topic_in(node, name: str, timeout_s: float) -> bool:
    """`strom topics --create` run in `node`'s network namespace against it; True when acknowledged."""
    command = [str(strom_binary()), "topics", "--create", "--topic", name, "--bootstrap-server", node.bootstrap]
    done = subprocess.run(["ip", "netns", "exec", node.process.netns, *command], capture_output=True,
                          text=True, timeout=timeout_s)
    return done.returncode == 0


def create_or_give_up(bootstrap: str, name: str) -> bool:
    """True once `name` exists, created now or by an earlier attempt that timed out here."""
    try:
        if create_topic(bootstrap, name, timeout_s=10):
            return True
    except subprocess.TimeoutExpired:
        return False
    try:
        return name in topic_names(bootstrap)
    except Exception:  # noqa: BLE001 - a broker still recovering: ask again
        return False
