"""Admin writes forwarded in an Envelope (KIP-590): a broker that is not the
active controller wraps the client's request with its principal, so the
controller authorizes the client, not the forwarding broker; an Envelope
itself needs CLUSTER_ACTION and is listed on controller listeners only."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from cluster import CLUSTER_WAIT_S, Cluster, Node
from harness import free_port, strom, topic_names, wait_until

pytestmark = pytest.mark.timeout(180)

USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ENVELOPE = 58
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42


class SecuredCluster:
    """Three combined nodes with the StandardAuthorizer, each with a
    SASL_PLAINTEXT listener for PLAIN users besides its PLAINTEXT (super
    user) and CONTROLLER listeners."""

    def __init__(self, workdir):
        users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
        self.cluster = Cluster(workdir, controllers=3, combined=True, overrides={
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:ANONYMOUS;User:admin",
        })
        self.sasl_ports = {}
        for node in self.cluster.nodes.values():
            self.sasl_ports[node.node_id] = free_port()
            node.process.overrides["listeners"] = (
                f"{node.listeners()},SASL_PLAINTEXT://127.0.0.1:{self.sasl_ports[node.node_id]}")

    def follower(self) -> Node:
        """A node that is not the active controller."""
        leader, _ = self.cluster.wait_for_leader()
        return next(n for n in self.cluster.nodes.values() if n.node_id != leader)

    def conf(self, node: Node, user: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_ports[node.node_id]}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    secured = SecuredCluster(tmp_path_factory.mktemp("envelope"))
    with secured.cluster:
        secured.cluster.start()
        secured.cluster.wait_for_leader()
        yield secured


def create_error(conf: dict, topic: str) -> KafkaError | None:
    """CreateTopics of `topic` through `conf`'s broker only; its error, if any."""
    admin = AdminClient(conf)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=20)[topic].result(timeout=30)
    except KafkaException as e:
        return e.args[0]
    return None


def test_a_forwarded_create_topics_is_authorized_as_its_client(secured):
    follower = secured.follower()
    # Only the follower's own listener is bootstrapped: the request reaches
    # the active controller through it.
    assert create_error(secured.conf(follower, "bob"), "bobs-topic").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "bobs-topic" not in topic_names(follower.bootstrap)

    # CreateAcls is forwarded too, as the super user who sends it.
    done = strom("acls", "--bootstrap-server", follower.bootstrap, "--add", "--allow-principal", "User:alice",
                 "--operation", "Create", "--cluster")
    assert done.returncode == 0, done.stderr
    assert create_error(secured.conf(follower, "alice"), "alices-topic") is None
    for node in secured.cluster.nodes.values():
        wait_until(lambda node=node: "alices-topic" in topic_names(node.bootstrap), CLUSTER_WAIT_S,
                   f"alices-topic in node {node.node_id}'s metadata")


def sasl_plain(conn: wire.Connection, user: str) -> None:
    """SaslHandshake v1 and SaslAuthenticate v1 with PLAIN on a raw connection."""
    handshake = conn.call(wire.request(17, 1, 1, wire.int16(5) + b"PLAIN"))
    assert wire.Reader(handshake).take(">ih")[1] == 0, "SaslHandshake refused"
    token = f"\0{user}\0{USERS[user]}".encode()
    answer = conn.call(wire.request(36, 1, 2, wire.int32(len(token)) + token))
    assert wire.Reader(answer).take(">ih")[1] == 0, "SaslAuthenticate refused"


def compact_bytes(data: bytes) -> bytes:
    return wire.uvarint(len(data) + 1) + data


def envelope_error(port: int, user: str) -> int:
    """The error of an Envelope `user` sends straight to `port`."""
    inner = wire.request_header(19, 7, 9, flexible=True)  # a CreateTopics header, bodiless
    principal = wire.int16(0) + wire.compact_string("User") + wire.compact_string("admin") + b"\0" + wire.uvarint(0)
    body = compact_bytes(inner) + compact_bytes(principal) + compact_bytes(bytes([127, 0, 0, 1])) + wire.uvarint(0)
    with wire.Connection(port) as conn:
        sasl_plain(conn, user)
        payload = conn.call(wire.frame(wire.request_header(ENVELOPE, 0, 3, flexible=True) + body))
    reader = wire.Reader(payload, flexible=True)
    assert reader.int32() == 3
    reader.tagged_fields()
    assert reader.nullable_bytes() is None, "a refused envelope carries no response"
    return reader.int16()


def test_an_envelope_needs_cluster_action_and_a_controller_listener(secured):
    node = secured.follower()
    port = secured.sasl_ports[node.node_id]
    # alice may create topics but is no broker: she cannot pose as admin.
    assert envelope_error(port, "alice") == CLUSTER_AUTHORIZATION_FAILED
    # Even a super user's envelope is served on controller listeners only.
    assert envelope_error(port, "admin") == INVALID_REQUEST
    assert ENVELOPE not in wire.api_versions(node.broker_port).versions
    assert wire.api_versions(node.controller_port).versions[ENVELOPE] == (0, 0)


def test_scram_credentials_altered_through_a_follower_need_alter_on_the_cluster(secured):
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    follower = secured.follower()
    upsertion = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                             b"carol-secret")

    def alter_error(user: str) -> KafkaError | None:
        admin = AdminClient(secured.conf(follower, user))
        futures = admin.alter_user_scram_credentials([upsertion])
        try:
            futures["carol"].result(timeout=30)
        except KafkaException as e:
            return e.args[0]
        return None

    assert alter_error("bob").code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert alter_error("admin") is None
