"""The links between nodes secured as Kafka secures them: the quorum's peer
links, the brokers' controller link (registration, heartbeats, forwarded
admin requests) all go through the first listener of
`controller.listener.names` with its security protocol, TLS checked against
the listener's trust store and SASL with `sasl.mechanism.controller.protocol`
and the login module's username and password. The authorizer's only super
user is the nodes' own principal: no User:ANONYMOUS anywhere."""

from __future__ import annotations

import re
import ssl

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from cluster import CLUSTER_WAIT_S, Cluster, Node
import wire
from harness import wait_until
from security_material import STORE_PASSWORD, Authority

pytestmark = pytest.mark.timeout(240)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
NODE_USER, NODE_PASSWORD = "broker", "broker-secret"
USERS = {NODE_USER: NODE_PASSWORD, "alice": "alice-secret"}


def plain_jaas(password: str = NODE_PASSWORD) -> str:
    """The nodes' login (username/password) and the users they accept."""
    users = " ".join(f'user_{name}="{secret}"' for name, secret in USERS.items())
    return f'{PLAIN_MODULE} required username="{NODE_USER}" password="{password}" {users};'


class SecureCluster:
    """Three combined nodes (or, not `combined`, a controller and two
    brokers) whose BROKER and CONTROLLER listeners are both SASL_SSL with
    PLAIN, or both SSL with required client certificates (`mtls`, the
    controller listener with PKCS12 stores of its own), under the
    StandardAuthorizer."""

    def __init__(self, workdir, mtls: bool = False, dns_only: bool = False, combined: bool = True):
        self.ca = Authority(workdir / "pki", "links-ca")
        server = self.ca.issue("node", NODE_USER, server=True, client=True, dns_only=dns_only)
        # Server and client both: the nodes' certificate serves and is shown.
        keystore = self.ca.pem_keystore(server, workdir / "pki" / "node.keystore.pem")
        protocol = "SSL" if mtls else "SASL_SSL"
        overrides = {
            "listener.security.protocol.map": f"BROKER:{protocol},CONTROLLER:{protocol}",
            "inter.broker.listener.name": "BROKER",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.ca_path),
            "authorizer.class.name": AUTHORIZER,
            "logging.level": "info",
        }
        if mtls:
            overrides.update({"ssl.client.auth": "required", "super.users": f"User:{NODE_USER}",
                              "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT"})
            # The controller listener's own stores, in PKCS12: the links use them too.
            controller = "listener.name.controller.ssl"
            overrides.update({
                f"{controller}.keystore.type": "PKCS12",
                f"{controller}.keystore.location": str(self.ca.pkcs12_keystore(server, workdir / "pki" / "node.p12")),
                f"{controller}.keystore.password": STORE_PASSWORD,
                f"{controller}.truststore.type": "PKCS12",
                f"{controller}.truststore.location": str(self.ca.pkcs12_truststore(workdir / "pki" / "trust.p12")),
                f"{controller}.truststore.password": STORE_PASSWORD,
            })
        else:
            overrides.update({
                # SCRAM users live in the metadata log: a node can switch to
                # SCRAM once its user's credential is stored.
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "listener.name.controller.scram-sha-256.sasl.jaas.config":
                    f'{SCRAM_MODULE} required username="{NODE_USER}" password="{NODE_PASSWORD}";',
                "sasl.mechanism.controller.protocol": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": plain_jaas(),
                "listener.name.broker.plain.sasl.jaas.config": plain_jaas(),
                "super.users": f"User:{NODE_USER}",
            })
        self.mtls = mtls
        self.dns_only = dns_only
        layout = {"controllers": 3, "combined": True} if combined else {"controllers": 1, "brokers": 2}
        self.cluster = Cluster(workdir, overrides=overrides, **layout)
        for node in self.cluster.nodes.values():
            ports = {"BROKER": node.broker_port, "CONTROLLER": node.controller_port}
            node.process.overrides["listeners"] = ",".join(
                f"{name}://127.0.0.1:{port}" for name, port in ports.items() if port is not None)
        self.client_cert = None if not mtls else self.ca.issue("client", NODE_USER)

    def conf(self, node: Node, user: str = NODE_USER) -> dict:
        conf = {"bootstrap.servers": node.bootstrap, "ssl.ca.location": str(self.ca.ca_path)}
        if self.dns_only:
            conf["ssl.endpoint.identification.algorithm"] = "none"
        if self.mtls:
            return {**conf, "security.protocol": "SSL", "ssl.certificate.location": str(self.client_cert.cert_path),
                    "ssl.key.location": str(self.client_cert.key_path)}
        return {**conf, "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": user,
                "sasl.password": USERS[user]}

    def brokers_seen(self, node: Node) -> set[int]:
        """The unfenced brokers `node` lists in Metadata (empty on no answer)."""
        try:
            return set(AdminClient(self.conf(node)).list_topics(timeout=5).brokers)
        except KafkaException:
            return set()

    def follower(self) -> Node:
        """A broker that is not the active controller: it forwards admin writes."""
        leader, _ = self.cluster.wait_for_leader()
        return next(n for n in self.cluster.brokers() if n.node_id != leader)


def create(conf: dict, topic: str, partitions: int, replicas: int = 1) -> None:
    """A topic of `replicas` replicas, every one of them needed in sync: an
    acks=all write then needs the followers' fetches over the secured
    inter-broker listener."""
    admin = AdminClient(conf)
    topic_config = {"min.insync.replicas": str(replicas)}
    new = NewTopic(topic, partitions, replicas, config=topic_config)
    admin.create_topics([new], operation_timeout=20)[topic].result(timeout=30)


def produce_and_consume(conf: dict, topic: str, count: int) -> list[bytes]:
    producer = Producer(conf)
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(30) == 0, "records left unacknowledged"
    consumer = Consumer({**conf, "group.id": f"{topic}-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    try:
        wait_until(lambda: (m := consumer.poll(0.5)) is not None and not m.error() and values.append(m.value())
                   or len(values) >= count, 60, f"{count} records consumed")
    finally:
        consumer.close()
    return values


def wait_formed(secure: SecureCluster, node_ids: set[int]) -> None:
    for node_id in node_ids:
        node = secure.cluster.nodes[node_id]
        wait_until(lambda node=node: secure.brokers_seen(node) == node_ids, CLUSTER_WAIT_S,
                   f"brokers {sorted(node_ids)} unfenced in node {node.node_id}'s metadata")


@pytest.mark.parametrize("combined", [True, False], ids=["combined", "separate"])
def test_a_sasl_ssl_cluster_forms_forwards_and_serves_without_anonymous(tmp_path, combined):
    secure = SecureCluster(tmp_path, combined=combined)
    with secure.cluster:
        secure.cluster.start()
        wait_formed(secure, {n.node_id for n in secure.cluster.brokers()})
        follower = secure.follower()
        # CreateAcls as the nodes' super user, through a node that forwards it.
        admin = AdminClient(secure.conf(follower))
        bindings = [AclBinding(kind, "links-", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.ALL,
                               AclPermissionType.ALLOW) for kind in (ResourceType.TOPIC, ResourceType.GROUP)]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        # alice's CreateTopics, forwarded in an Envelope and authorized as her.
        alice = secure.conf(follower, "alice")
        create(alice, "links-topic", partitions=3, replicas=len(secure.cluster.brokers()))
        with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
            create(alice, "elsewhere", partitions=1)
        values = produce_and_consume(alice, "links-topic", 30)
        assert sorted(values) == sorted(f"record-{i}".encode() for i in range(30))
        for node in secure.cluster.nodes.values():
            assert "authentication to" not in node.process.log_since_start(), f"node {node.node_id} failed to log in"


def test_an_mtls_cluster_forms_and_serves_its_clients(tmp_path):
    secure = SecureCluster(tmp_path, mtls=True)
    with secure.cluster:
        secure.cluster.start()
        wait_formed(secure, {1, 2, 3})
        conf = secure.conf(secure.follower())
        create(conf, "mtls-topic", partitions=3, replicas=3)
        assert len(produce_and_consume(conf, "mtls-topic", 10)) == 10


def test_a_node_with_a_wrong_password_never_joins_and_says_why(tmp_path):
    secure = SecureCluster(tmp_path)
    wrong = secure.cluster.nodes[3]
    # It still accepts the others (its user list is right); its own login is wrong.
    wrong.process.overrides["listener.name.controller.plain.sasl.jaas.config"] = plain_jaas("not-the-password")
    with secure.cluster:
        secure.cluster.start()
        wait_formed(secure, {1, 2})
        failure = re.compile(r"controller link: SASL PLAIN as broker: SaslAuthenticationFailed")

        def failures() -> int:
            return len(failure.findall(wrong.process.log_since_start()))

        # Retried with a backoff: a second failure shows it keeps trying.
        wait_until(lambda: failures() >= 2, CLUSTER_WAIT_S, "node 3 logging its failed authentications twice")
        assert wrong.alive(), "a wrong password must not stop the node"
        assert secure.brokers_seen(secure.cluster.nodes[1]) == {1, 2}
        assert "caught up" not in wrong.process.log_since_start()


def has_scram_credential(conf: dict) -> bool:
    admin = AdminClient(conf)  # kept alive until the future resolves
    try:
        return bool(admin.describe_user_scram_credentials([NODE_USER])[NODE_USER].result(timeout=10))
    except KafkaException:
        return False


def test_a_node_moves_its_links_from_plain_to_scram_and_rejoins(tmp_path):
    secure = SecureCluster(tmp_path)
    with secure.cluster:
        secure.cluster.start()
        wait_formed(secure, {1, 2, 3})
        first, moved = secure.cluster.nodes[1], secure.cluster.nodes[3]
        admin = AdminClient(secure.conf(first))
        upsertion = UserScramCredentialUpsertion(NODE_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                 NODE_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(timeout=30)
        for node in (first, secure.cluster.nodes[2]):
            wait_until(lambda node=node: has_scram_credential(secure.conf(node)), CLUSTER_WAIT_S,
                       f"the SCRAM credential in node {node.node_id}'s image")
        moved.process.stop()
        wait_until(lambda: secure.brokers_seen(first) == {1, 2}, CLUSTER_WAIT_S, "node 3 fenced")
        # Its PLAIN login is now wrong: only SCRAM can bring it back.
        moved.process.overrides.update({
            "sasl.mechanism.controller.protocol": "SCRAM-SHA-256",
            "listener.name.controller.plain.sasl.jaas.config": plain_jaas("not-the-password"),
        })
        moved.process.start()
        wait_formed(secure, {1, 2, 3})
        assert "authentication to" not in moved.process.log_since_start()


def quorum_request_answered(port: int, ca_path, cluster_id: str, user: str) -> bool:
    """Whether a BeginQuorumEpoch sent over SASL_SSL as `user` gets an
    answer rather than a closed connection."""
    with wire.Connection(port) as conn:
        conn.sock = ssl.create_default_context(cafile=str(ca_path)).wrap_socket(conn.sock, server_hostname="127.0.0.1")
        handshake = conn.call(wire.request(17, 1, 1, wire.int16(5) + b"PLAIN"))
        assert wire.Reader(handshake).take(">ih")[1] == 0, "SaslHandshake refused"
        token = f"\0{user}\0{USERS[user]}".encode()
        answer = conn.call(wire.request(36, 1, 2, wire.int32(len(token)) + token))
        assert wire.Reader(answer).take(">ih")[1] == 0, "SaslAuthenticate refused"
        partition = wire.int32(0) + wire.int32(2) + wire.int32(0)  # index, leader id, epoch
        topic = wire.int16(len(b"__cluster_metadata")) + b"__cluster_metadata" + wire.int32(1) + partition
        body = wire.nullable_string(cluster_id) + wire.int32(1) + topic
        try:
            conn.call(wire.request(53, 0, 3, body))
        except (AssertionError, OSError):
            return False
        return True


def test_a_catching_up_node_answers_quorum_requests_of_super_users_only(tmp_path):
    secure = SecureCluster(tmp_path)
    with secure.cluster:
        # Alone of three voters, node 1 never catches up: its controller
        # listener serves only the quorum, and ACLs are not known yet.
        secure.cluster.start(1)
        node = secure.cluster.nodes[1]
        ask = lambda user: quorum_request_answered(node.controller_port, secure.ca.ca_path,
                                                   secure.cluster.cluster_id, user)
        assert not ask("alice")
        assert ask(NODE_USER)
        log = node.process.log_since_start()
        assert "User:alice is not a super user" in log
        assert "metadata caught up" not in log


def test_server_names_are_checked_unless_the_identification_algorithm_is_empty(tmp_path):
    # The nodes' certificate names localhost, not the 127.0.0.1 they reach each other at.
    secure = SecureCluster(tmp_path, dns_only=True)
    for node_id in (1, 2):
        secure.cluster.nodes[node_id].process.overrides["ssl.endpoint.identification.algorithm"] = ""
    checking = secure.cluster.nodes[3]  # Kafka's default: https
    with secure.cluster:
        secure.cluster.start()
        wait_formed(secure, {1, 2})
        wait_until(lambda: "controller link: TLS handshake failed" in checking.process.log_since_start(),
                   CLUSTER_WAIT_S, "node 3 refusing the others' certificate for its name")
        assert 'certificate not valid for name "127.0.0.1"' in checking.process.log_since_start()
        assert secure.brokers_seen(secure.cluster.nodes[1]) == {1, 2}
