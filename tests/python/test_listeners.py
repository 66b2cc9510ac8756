"""Listeners as Kafka defines them: each named listener has a security
protocol, and clients learn the endpoint advertised for the listener they
connected on (the INTERNAL/EXTERNAL setup of Docker and Kubernetes)."""

from __future__ import annotations

import subprocess

import pytest

import wire
from harness import admin_client, create_topic, free_port, strom_binary, wait_future

FIND_COORDINATOR = 10


def run_server(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    """`strom server` expected to exit on its own at start."""
    args = [str(strom_binary()), "server", "--override", f"log.dirs={tmp_path}/data"]
    for override in overrides:
        args += ["--override", override]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=10)


def test_advertising_the_meta_address_is_refused(tmp_path):
    port = free_port()
    done = run_server(
        tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}", f"advertised.listeners=PLAINTEXT://0.0.0.0:{port}"
    )
    assert done.returncode == 1
    assert "advertised.listeners" in done.stderr and "0.0.0.0" in done.stderr


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "sasl_plaintext"])
def test_tools_refuse_a_security_protocol_they_cannot_honour(broker, tmp_path, protocol):
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol={protocol}\n")
    done = subprocess.run(
        [str(strom_binary()), "topics", "--bootstrap-server", broker.bootstrap, "--command-config", str(config), "--list"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"security.protocol={protocol}" in lines[0]


def find_coordinator(port: int, group: str) -> tuple[int, str, int]:
    """FindCoordinator v1 for a group: (error code, host, port)."""
    body = wire.Writer(flexible=False).nullable_string(group).int8(0).build()
    reaction = wire.exchange(port, wire.request(FIND_COORDINATOR, 1, 7, body), until_frames=1, timeout_s=15)
    frames, _ = wire.split_frames(reaction.received)
    assert frames, f"no FindCoordinator response (closed={reaction.closed})"
    reader = wire.Reader(frames[0])
    assert reader.int32() == 7, "correlation id"
    reader.int32()  # throttle_time_ms
    error = reader.int16()
    reader.nullable_string()  # error_message
    reader.int32()  # node_id
    return error, reader.string(), reader.int32()


def test_each_listener_is_answered_with_its_own_advertised_endpoint(broker_factory):
    internal, external = free_port(), free_port()
    # Different advertised hosts tell the answers apart; both resolve here.
    broker_factory(
        {
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        },
        port=internal,
    )
    create_topic(f"127.0.0.1:{internal}", "both-sides")
    for port, host in [(internal, "127.0.0.1"), (external, "localhost")]:
        admin = admin_client(f"127.0.0.1:{port}")
        brokers = admin.list_topics(timeout=15).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [(host, port)], "Metadata"
        nodes = wait_future(admin.describe_cluster()).nodes
        assert [(n.host, n.port) for n in nodes] == [(host, port)], "DescribeCluster"
        assert find_coordinator(port, "a-group") == (0, host, port), "FindCoordinator"


def test_a_listener_that_is_not_advertised_sends_clients_nowhere(broker_factory):
    public, hidden = free_port(), free_port()
    broker_factory(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{public},HIDDEN://127.0.0.1:{hidden}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{public}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,HIDDEN:PLAINTEXT",
        },
        port=public,
    )
    error, _, port = find_coordinator(hidden, "a-group")
    assert (error, port) == (15, -1), "COORDINATOR_NOT_AVAILABLE"
    assert find_coordinator(public, "a-group") == (0, "127.0.0.1", public)


def test_connections_idle_longer_than_connections_max_idle_ms_are_closed(broker_factory):
    # The listener's own key wins over the broker-wide one (Kafka's
    # listener.name.<l>.connections.max.idle.ms).
    broker = broker_factory({"connections.max.idle.ms": 600_000,
                             "listener.name.plaintext.connections.max.idle.ms": 1_000})
    with wire.connect(broker.port) as idle, wire.connect(broker.port) as busy:
        for sock in (idle, busy):
            assert wire.send(sock, wire.api_versions_request(0, 1))
            assert wire.drain(sock, timeout_s=5, until_frames=1).received
        # The busy connection sends a request every 300 ms for 2.4 s, past
        # the idle limit, and each is answered.
        for correlation_id in range(2, 10):
            reaction = wire.drain(busy, timeout_s=0.3)
            assert not reaction.closed, "a connection in use was closed"
            assert wire.send(busy, wire.api_versions_request(0, correlation_id))
            assert wire.drain(busy, timeout_s=5, until_frames=1).received
        # By now the idle one has been closed by the broker.
        assert wire.drain(idle, timeout_s=5).closed, "the idle connection was closed"
