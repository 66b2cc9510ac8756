"""A cluster of real `strom` processes on loopback, for multi-node tests.

Each node is a `harness.Broker` (own ports, own data dir, own log file) with
KRaft settings: `process.roles`, a CONTROLLER listener for controllers, a
PLAINTEXT listener for brokers, and the static quorum in
`controller.quorum.voters`. Every node is formatted with `strom storage
format` before its first start. Nodes can be started, stopped, killed with
SIGKILL, paused with SIGSTOP, resumed with SIGCONT and restarted on the
same ports and dirs. With `netns=True` every node runs in a network
namespace of its own (see netns.py) and `cut(node_id)` / `heal()` sever
and restore its links to the other nodes; the test still reaches it.

The layouts cover Kafka's: combined nodes (`broker,controller`),
controller-only nodes, and broker-only nodes, which follow the quorum as
observers. Every wait is a poll with a deadline.

    with Cluster(tmp_path, controllers=3, brokers=1, combined=False) as cluster:
        cluster.start()
        leader, epoch = cluster.wait_for_leader()
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from harness import Broker, BrokerError, admin_client, free_port, skip_unless_ci, strom, wait_until
from netns import Network, NetnsUnavailable
from test_storage_format import random_uuid
import wire

METADATA = "__cluster_metadata"
# Short quorum timeouts, so elections in tests take a fraction of a second.
FAST_QUORUM = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "controller.quorum.election.backoff.max.ms": "300",
}
CLUSTER_WAIT_S = 30.0


def live_brokers(bootstrap: str) -> set[int]:
    """The unfenced brokers a broker's Metadata lists; none while it cannot answer."""
    try:
        return set(admin_client(bootstrap).list_topics(timeout=5).brokers)
    except Exception:  # noqa: BLE001 - a node still starting answers nothing
        return set()


class Node:
    """One node of a cluster: its roles, ports and process."""

    def __init__(self, workdir: Path, node_id: int, roles: list[str], network: Network | None = None):
        self.node_id = node_id
        self.roles = roles
        self.controller_port = free_port() if "controller" in roles else None
        self.broker_port = free_port() if "broker" in roles else None
        # The harness waits for the process to listen on `port`: the client
        # listener where there is one, else the controller listener.
        self.process = Broker(workdir / f"node-{node_id}", port=self.broker_port or self.controller_port)
        if network is not None:
            self.process.host = network.address(node_id)
            self.process.netns = network.namespace(node_id)
        self.paused = False

    @property
    def is_controller(self) -> bool:
        return self.controller_port is not None

    @property
    def is_broker(self) -> bool:
        return self.broker_port is not None

    @property
    def port(self) -> int:
        """A port this node answers Kafka requests on."""
        return self.process.port

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    def listeners(self) -> str:
        listeners = []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://{self.host}:{self.broker_port}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://{self.host}:{self.controller_port}")
        return ",".join(listeners)

    def quorum_state(self) -> dict | None:
        """This node's `quorum-state` file, as Kafka writes it; None before the first write."""
        path = self.data_dir / f"{METADATA}-0" / "quorum-state"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.process.alive()

    def kill9(self) -> None:
        self.paused = False
        self.process.kill9()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but stops answering."""
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False


class Cluster:
    """`controllers` controller nodes (combined with the broker role when
    `combined`) with ids 1.., then `brokers` broker-only nodes with ids from 100."""

    def __init__(
        self,
        workdir: Path,
        controllers: int = 3,
        brokers: int = 0,
        combined: bool = False,
        overrides: dict[str, str] | None = None,
        cluster_id: str | None = None,
        netns: bool = False,
    ):
        self.cluster_id = cluster_id or random_uuid()
        controller_roles = ["broker", "controller"] if combined else ["controller"]
        node_ids = [*range(1, controllers + 1), *range(100, 100 + brokers)]
        self.network = Network(node_ids) if netns else None
        if self.network is not None:
            try:
                self.network.create()
            except NetnsUnavailable as e:
                skip_unless_ci(f"network namespaces unavailable: {e}")
        self.nodes: dict[int, Node] = {}
        for node_id in node_ids:
            roles = controller_roles if node_id < 100 else ["broker"]
            self.nodes[node_id] = Node(workdir, node_id, roles, self.network)
        voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.controllers())
        for node in self.nodes.values():
            node.process.overrides.update(
                {
                    "node.id": str(node.node_id),
                    "process.roles": ",".join(node.roles),
                    "listeners": node.listeners(),
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "controller.listener.names": "CONTROLLER",
                    "controller.quorum.voters": voters,
                    **FAST_QUORUM,
                    **(overrides or {}),
                }
            )
            if not node.is_broker:
                node.process.overrides.pop("group.initial.rebalance.delay.ms", None)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def controllers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_controller]

    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def bootstrap(self) -> str:
        """Every broker's client listener, for a client's bootstrap.servers."""
        return ",".join(n.bootstrap for n in self.brokers())

    def running(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive() and not n.paused]

    # ------------------------------------------------------------ lifecycle

    def format(self, node: Node) -> None:
        """`strom storage format` with a server.properties of the node's settings."""
        properties = node.process.workdir / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in node.process.overrides.items()))
        done = strom("storage", "format", "--config", str(properties), "--cluster-id", self.cluster_id)
        assert done.returncode == 0, f"format of node {node.node_id} failed: {done.stderr}"

    def start(self, *node_ids: int) -> None:
        """Formats (first time only) and starts the nodes, all by default."""
        for node_id in node_ids or list(self.nodes):
            node = self.nodes[node_id]
            if not (node.data_dir / "meta.properties").exists():
                self.format(node)
            node.process.start()

    def start_serving(self, timeout_s: float = CLUSTER_WAIT_S) -> None:
        """Starts every node, then waits for a quorum leader and for every
        broker to list every broker as live."""
        self.start()
        self.wait_for_leader(timeout_s)
        self.wait_brokers_live(timeout_s)

    def wait_brokers_live(self, timeout_s: float = CLUSTER_WAIT_S) -> None:
        """Every broker's Metadata lists every broker, none fenced."""
        expected = {n.node_id for n in self.brokers()}
        for node in self.brokers():
            wait_until(lambda node=node: live_brokers(node.bootstrap) == expected, timeout_s,
                       f"every broker live through broker {node.node_id}")

    def stop(self, node_id: int) -> None:
        self.nodes[node_id].process.stop()

    def kill9(self, node_id: int) -> None:
        self.nodes[node_id].kill9()

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive():
            if node.paused:
                node.resume()
            node.process.stop()
        node.process.start()

    def cut(self, node_id: int) -> None:
        """Severs every link between `node_id` and the other nodes (needs `netns=True`)."""
        self.network.cut(node_id)

    def heal(self) -> None:
        self.network.heal()

    def close(self) -> None:
        errors = []
        try:
            for node in self.nodes.values():
                if node.paused and node.alive():
                    node.resume()
                try:
                    node.process.close()
                except BrokerError as e:
                    errors.append(e)
        finally:
            if self.network is not None:
                self.network.close()
        if errors:
            raise errors[0]

    # ------------------------------------------------------------ the quorum

    def describe_quorum(self, node_id: int | None = None, version: int = 2) -> wire.QuorumPartition | None:
        """DescribeQuorum's partition as one running node (any, by default) answers it; None on an error."""
        candidates = [self.nodes[node_id]] if node_id is not None else self.running()
        for node in candidates:
            try:
                response = wire.describe_quorum(node.port, version, host=node.host)
            except (OSError, ValueError, AssertionError):
                continue
            [(_, [partition])] = response.topics
            if response.error_code == wire.NONE and partition.error_code == wire.NONE:
                return partition
        return None

    def views(self) -> dict[int, tuple[int, int]]:
        """Each controller's (epoch, leader id) from its `quorum-state` (-1: no leader)."""
        views = {}
        for node in self.controllers():
            state = node.quorum_state()
            if state is not None:
                views[node.node_id] = (state["leaderEpoch"], state["leaderId"])
        return views

    def wait_for_leader(self, timeout_s: float = CLUSTER_WAIT_S, newer_than: int = -1) -> tuple[int, int]:
        """(leader id, epoch) once every running controller names the same
        running leader in the same epoch, above `newer_than`."""

        def agreed():
            running = {n.node_id for n in self.running() if n.is_controller}
            views = {id: view for id, view in self.views().items() if id in running}
            if len(views) != len(running) or len(set(views.values())) != 1:
                return None
            [(epoch, leader)] = set(views.values())
            if leader in running and epoch > newer_than:
                return leader, epoch
            return None

        return wait_until(agreed, timeout_s, "one leader agreed by every running controller")

    def wait_for_description(self, condition, timeout_s: float = CLUSTER_WAIT_S, what: str = "the quorum's description"):
        """The leader's DescribeQuorum partition, once `condition` holds for it."""
        return wait_until(
            lambda: (p := self.describe_quorum()) is not None and condition(p) and p,
            timeout_s,
            what,
        )

