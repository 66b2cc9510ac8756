"""Listener security as Kafka users configure it, with real clients: TLS
(PEM and PKCS12 stores, mTLS with the principal mapped from the client
certificate, reload of changed stores) and SASL (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512, OAUTHBEARER unsecured and signed) over SASL_PLAINTEXT and
SASL_SSL. Failed authentications reach the client as Kafka's errors and
leave the broker serving everyone else."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import wire
from harness import (
    OutRecord,
    admin_cli,
    assert_one_line_error,
    create_topic,
    distinct_free_ports,
    free_port,
    kafka_python_consumer,
    kafka_python_producer,
    produce_confluent,
    produce_kafka_python,
    set_scram_credentials,
    strom_binary,
    wait_until,
)
from security_material import STORE_PASSWORD, Authority, JwtIssuer, claims, joined, unsecured_token

pytestmark = pytest.mark.timeout(180)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


def jaas(module: str, **options: str) -> str:
    rendered = " ".join(f'{key}="{value}"' for key, value in options.items())
    return f"{module} required {rendered};"


def user_options() -> dict[str, str]:
    return {f"user_{name}": password for name, password in USERS.items()}


class Secured:
    """A broker with one listener per security setup, and the material its
    clients need."""

    def __init__(self, broker_factory, tmp_path, **extra):
        pki = tmp_path / "pki"
        self.ca = Authority(pki, "strom-test-ca")
        self.rogue = Authority(tmp_path / "rogue", "rogue-ca")
        server = self.ca.issue("server", "localhost", server=True)
        self.alice = self.ca.issue("alice", "Alice", ou="clients")
        self.untrusted = self.rogue.issue("mallory", "mallory", ou="clients")
        self.server_pem = self.ca.pem_keystore(server, pki / "server.keystore.pem")
        self.jwt = JwtIssuer(tmp_path)
        protocols = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL", "OPTIONAL": "SSL", "SASL_SSL": "SASL_SSL",
                     "SASL_PLAINTEXT": "SASL_PLAINTEXT", "JWT": "SASL_SSL"}
        self.ports = dict(zip(protocols, distinct_free_ports(len(protocols))))
        config = {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items()),
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
            "logging.level": "info,strom_broker::network=debug",
            # Every TLS listener: a PEM key store file.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.server_pem),
            # mTLS: PKCS12 stores, a client certificate required and mapped.
            "listener.name.mtls.ssl.keystore.type": "PKCS12",
            "listener.name.mtls.ssl.keystore.location": str(self.ca.pkcs12_keystore(server, pki / "server.p12")),
            "listener.name.mtls.ssl.keystore.password": STORE_PASSWORD,
            "listener.name.mtls.ssl.key.password": STORE_PASSWORD,
            "listener.name.mtls.ssl.truststore.type": "PKCS12",
            "listener.name.mtls.ssl.truststore.location": str(self.ca.pkcs12_truststore(pki / "trust.p12")),
            "listener.name.mtls.ssl.truststore.password": STORE_PASSWORD,
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=clients,.*$/$1/L,DEFAULT",
            # A client certificate requested, not required; inline PEM trust.
            "listener.name.optional.ssl.client.auth": "requested",
            "listener.name.optional.ssl.truststore.type": "PEM",
            "listener.name.optional.ssl.truststore.certificates": joined(self.ca.cert.public_bytes(Encoding.PEM)),
            # SASL_SSL: an inline PEM key store with an encrypted key.
            "listener.name.sasl_ssl.ssl.keystore.certificate.chain": joined(server.cert_pem),
            "listener.name.sasl_ssl.ssl.keystore.key": joined(server.encrypted_key_pem("key-secret")),
            "listener.name.sasl_ssl.ssl.key.password": "key-secret",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.jwt.oauthbearer.sasl.jaas.config": jaas(
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
            ),
            "listener.name.jwt.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "listener.name.jwt.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": f"file://{self.jwt.jwks_path}",
            "listener.name.jwt.oauthbearer.sasl.oauthbearer.expected.audience": "strom",
        }
        for listener in ["sasl_ssl", "sasl_plaintext"]:
            config[f"listener.name.{listener}.plain.sasl.jaas.config"] = jaas(
                "org.apache.kafka.common.security.plain.PlainLoginModule", username="alice", password="alice-secret",
                **user_options())
            # SCRAM users live in the metadata log (set below); the login
            # module names only the broker's own client login, as in Kafka.
            for scram in ["scram-sha-256", "scram-sha-512"]:
                config[f"listener.name.{listener}.{scram}.sasl.jaas.config"] = jaas(
                    "org.apache.kafka.common.security.scram.ScramLoginModule", username="admin",
                    password="admin-secret")
            config[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = jaas(
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
                unsecuredLoginStringClaim_sub="alice")
        config.update(extra)
        self.broker = broker_factory(config, port=self.ports["PLAINTEXT"])
        set_scram_credentials(self.broker.bootstrap, USERS)

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def tls(self, **client_cert) -> dict:
        return {"ssl.ca.location": str(self.ca.ca_path), **client_cert}

    def sasl(self, listener: str, mechanism: str, user: str = "alice", password: str | None = None) -> dict:
        conf = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": listener,
                "sasl.mechanisms": mechanism}
        if listener == "SASL_SSL":
            conf.update(self.tls())
        if mechanism == "OAUTHBEARER":
            conf.update({"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": f"principal={user}"})
        else:
            conf.update({"sasl.username": user, "sasl.password": USERS.get(user, "") if password is None else password})
        return conf

    def log(self) -> str:
        """The broker's log, field quotes dropped (`principal=User:alice`)."""
        return self.broker.log_since_start().replace('"', "")


@pytest.fixture
def secured(broker_factory, tmp_path) -> Secured:
    return Secured(broker_factory, tmp_path)


def records(count: int, tag: str) -> list[OutRecord]:
    return [OutRecord(f"k{i}".encode(), f"{tag}-{i}".encode(), (), int(time.time() * 1000)) for i in range(count)]


def consume_values(conf: dict, topic: str, count: int, timeout_s: float = 60, **extra) -> list[bytes]:
    """The first `count` values of partition 0, read with a confluent consumer."""
    consumer = Consumer({**conf, "group.id": f"reader-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **extra})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while len(values) < count:
            assert time.monotonic() < deadline, f"read {len(values)} of {count} records"
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values[:count]


def kafka_python_values(bootstrap: str, topic: str, count: int, **conf) -> list[bytes]:
    from kafka import TopicPartition as KTopicPartition

    consumer = kafka_python_consumer(bootstrap, auto_offset_reset="earliest", **conf)
    values: list[bytes] = []
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        deadline = time.monotonic() + 60
        while len(values) < count:
            assert time.monotonic() < deadline, f"read {len(values)} of {count} records"
            for batch in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in batch)
    finally:
        consumer.close(timeout_ms=5_000)
    return values[:count]


def produce_and_consume(conf: dict, topic: str, count: int = 20) -> None:
    """Produce with one confluent client, read back with another: every record, in order."""
    producer = Producer({**conf, "enable.idempotence": False})
    sent = records(count, topic)
    deliveries = produce_confluent(producer, topic, sent)
    assert len(deliveries) == count
    assert consume_values(conf, topic, count) == [r.value for r in sent]


def authentication_error(conf: dict, timeout_s: float = 30) -> KafkaError:
    """The first error a client reports while trying to reach the broker."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append, "reconnect.backoff.max.ms": 1000})
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
        except KafkaException:
            pass
        admin.poll(0.1)
    assert errors, "the client reported no error"
    return errors[0]


# --- TLS ---------------------------------------------------------------------


def test_confluent_kafka_python_and_kcat_over_ssl(secured):
    create_topic(secured.broker.bootstrap, "over-ssl")
    conf = {"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL", **secured.tls()}
    produce_and_consume(conf, "over-ssl")

    tls = {"security_protocol": "SSL", "ssl_cafile": str(secured.ca.ca_path), "ssl_check_hostname": True}
    producer = kafka_python_producer(secured.bootstrap("SSL"), **tls)
    deliveries = produce_kafka_python(producer, "over-ssl", records(10, "kafka-python"))
    producer.close()
    assert len(deliveries) == 10
    values = kafka_python_values(secured.bootstrap("SSL"), "over-ssl", 30, **tls)
    assert values[20:] == [f"kafka-python-{i}".encode() for i in range(10)]

    kcat = ["kcat", "-b", secured.bootstrap("SSL"), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={secured.ca.ca_path}"]
    subprocess.run([*kcat, "-P", "-t", "over-ssl"], input=b"from-kcat\n", check=True, timeout=60)
    done = subprocess.run([*kcat, "-C", "-t", "over-ssl", "-o", "30", "-c", "1", "-e"],
                          capture_output=True, check=True, timeout=60)
    assert done.stdout.strip() == b"from-kcat"


def test_mtls_names_the_client_by_its_mapped_certificate(secured):
    create_topic(secured.broker.bootstrap, "over-mtls")
    conf = {"bootstrap.servers": secured.bootstrap("MTLS"), "security.protocol": "SSL",
            **secured.tls(**{"ssl.certificate.location": str(secured.alice.cert_path),
                             "ssl.key.location": str(secured.alice.key_path)})}
    produce_and_consume(conf, "over-mtls")
    # CN=Alice,OU=clients,O=Strom,C=US through the rule, lower-cased.
    wait_until(lambda: "principal=User:alice" in secured.log(), 10, "the mapped principal in the log")
    assert "principal=User:CN=" not in secured.log()


def test_mtls_refuses_clients_without_a_trusted_certificate(secured):
    base = {"bootstrap.servers": secured.bootstrap("MTLS"), "security.protocol": "SSL", **secured.tls()}
    untrusted = {**base, "ssl.certificate.location": str(secured.untrusted.cert_path),
                 "ssl.key.location": str(secured.untrusted.key_path)}
    # TLS 1.3 checks the client's certificate after the client's Finished,
    # so librdkafka reads the broker's alert as a transport error. (OpenSSL
    # holds back a certificate whose issuer the broker does not list.)
    for conf in [base, untrusted]:
        error = authentication_error(conf)
        assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT), error
        assert "alert certificate required" in error.str(), error
    # A client that does show the untrusted certificate is refused for it.
    context = ssl.create_default_context(cafile=str(secured.ca.ca_path))
    context.load_cert_chain(str(secured.untrusted.cert_path), str(secured.untrusted.key_path))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with socket.create_connection(("127.0.0.1", secured.ports["MTLS"]), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(wire.api_versions_request(3, 1))
                assert tls.recv(4), "the broker answered a client with an untrusted certificate"
    wait_until(lambda: "UnknownIssuer" in secured.log(), 10, "the broker's reason in its log")
    # The broker still serves a client that shows a trusted certificate.
    good = {**base, "ssl.certificate.location": str(secured.alice.cert_path),
            "ssl.key.location": str(secured.alice.key_path)}
    assert AdminClient(good).list_topics(timeout=20).brokers
    assert secured.broker.alive()


def test_a_requested_client_certificate_is_optional(secured):
    create_topic(secured.broker.bootstrap, "optional-cert")
    base = {"bootstrap.servers": secured.bootstrap("OPTIONAL"), "security.protocol": "SSL", **secured.tls()}
    produce_and_consume(base, "optional-cert", count=3)
    wait_until(lambda: "listener=OPTIONAL principal=User:ANONYMOUS" in secured.log(), 10, "an anonymous TLS client")
    with_cert = {**base, "ssl.certificate.location": str(secured.alice.cert_path),
                 "ssl.key.location": str(secured.alice.key_path)}
    assert AdminClient(with_cert).list_topics(timeout=20).brokers
    # No rule configured: the principal is the whole distinguished name.
    wait_until(lambda: "listener=OPTIONAL principal=User:CN=Alice,OU=clients,O=Strom,C=US" in secured.log(), 10,
               "the certificate's distinguished name")


def test_the_broker_wide_client_auth_leaves_sasl_ssl_listeners_alone(broker_factory, tmp_path):
    # KIP-684: only listener.name.<l>.ssl.client.auth asks SASL_SSL clients for certificates.
    ca_path = tmp_path / "pki" / "strom-test-ca.pem"
    wide = {"ssl.client.auth": "required", "ssl.truststore.location": str(ca_path)}
    secured = Secured(broker_factory, tmp_path, **wide)
    error = authentication_error({"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL",
                                  **secured.tls()})
    assert "alert certificate required" in error.str(), error
    create_topic(secured.broker.bootstrap, "kip-684")
    produce_and_consume(secured.sasl("SASL_SSL", "SCRAM-SHA-256"), "kip-684", count=3)


def test_a_legacy_pkcs12_key_store_is_read(broker_factory, tmp_path):
    ca = Authority(tmp_path / "legacy", "legacy-ca")
    store = ca.pkcs12_keystore(ca.issue("server", "localhost", server=True), tmp_path / "legacy.p12", legacy=True)
    secured = Secured(broker_factory, tmp_path, **{
        "listener.name.ssl.ssl.keystore.type": "PKCS12",
        "listener.name.ssl.ssl.keystore.location": str(store),
        "listener.name.ssl.ssl.keystore.password": STORE_PASSWORD,
    })
    served = x509.load_der_x509_certificate(served_certificate(secured.ports["SSL"], ca.ca_path))
    assert served.issuer == ca.cert.subject


def served_certificate(port: int, ca_path) -> bytes:
    context = ssl.create_default_context(cafile=str(ca_path))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.getpeercert(binary_form=True)


def test_a_replaced_key_store_is_served_to_new_connections_without_a_restart(broker_factory, tmp_path):
    secured = Secured(broker_factory, tmp_path, **{"ssl.reload.check.interval.ms": "100"})
    before = served_certificate(secured.ports["SSL"], secured.ca.ca_path)
    pid = secured.broker.pid
    renewed = secured.ca.issue("server-renewed", "localhost", server=True)
    staging = tmp_path / "renewed.pem"
    secured.ca.pem_keystore(renewed, staging)
    staging.replace(secured.server_pem)
    wait_until(lambda: served_certificate(secured.ports["SSL"], secured.ca.ca_path) != before, 20,
               "the renewed certificate on a new connection")
    served = x509.load_der_x509_certificate(served_certificate(secured.ports["SSL"], secured.ca.ca_path))
    assert served.serial_number == renewed.cert.serial_number
    assert secured.broker.pid == pid
    produce_and_consume({"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL", **secured.tls()},
                        "after-reload", count=5)


def alter_broker_configs(bootstrap: str, broker_id: str, **configs: str) -> None:
    """IncrementalAlterConfigs SETs on a broker resource, as Kafka's admin
    client sends them; raises the KafkaException of a refusal."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in configs.items()]
    resource = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=20)


def described_broker_configs(bootstrap: str, broker_id: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, broker_id)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_configs([resource]).values()
    return future.result(timeout=20)


def issuer_served(port: int, ca: Authority) -> x509.Name | None:
    """The issuer of the certificate a new connection is served, if `ca` trusts it."""
    try:
        return x509.load_der_x509_certificate(served_certificate(port, ca.ca_path)).issuer
    except (ssl.SSLError, OSError):
        return None


def test_a_key_store_set_by_alter_configs_is_served_without_a_restart(broker_factory, tmp_path):
    secured = Secured(broker_factory, tmp_path, **{"ssl.reload.check.interval.ms": "100"})
    pid, port = secured.broker.pid, secured.ports["SSL"]
    new_ca = Authority(tmp_path / "new-ca", "new-ca")
    new_store = new_ca.pem_keystore(new_ca.issue("server-new", "localhost", server=True), tmp_path / "new.pem")
    key = "listener.name.ssl.ssl.keystore.location"

    # A store that does not load, or one set for every broker at once, is refused.
    with pytest.raises(KafkaException) as refused:
        alter_broker_configs(secured.broker.bootstrap, "1", **{key: str(tmp_path / "missing.pem")})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value
    cluster_wide = admin_cli(secured.broker, "configs", "--alter", "--entity-type", "brokers", "--entity-default",
                             "--add-config", f"{key}={new_store}")
    assert_one_line_error(cluster_wide, "broker id must be specified")
    assert issuer_served(port, secured.ca) == secured.ca.cert.subject

    trust = "listener.name.ssl.ssl.truststore.certificates"
    alter_broker_configs(secured.broker.bootstrap, "1",
                         **{key: str(new_store), trust: joined(new_ca.cert.public_bytes(Encoding.PEM))})
    wait_until(lambda: issuer_served(port, new_ca) == new_ca.cert.subject, 20, "the new store on a new connection")
    described = described_broker_configs(secured.broker.bootstrap, "1")
    assert described[key].value == str(new_store) and not described[key].is_sensitive, described[key]
    assert described[trust].value is None and described[trust].is_sensitive, "key material is not described"
    assert issuer_served(port, secured.ca) is None, "the old certificate is no longer served"
    assert secured.broker.pid == pid
    produce_and_consume({"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL",
                         "ssl.ca.location": str(new_ca.ca_path)}, "after-alter-configs", count=5)
    secured.broker.restart()
    assert issuer_served(port, new_ca) == new_ca.cert.subject, "the altered store serves from the first connection"


def test_enabled_protocols_and_cipher_suites_bound_the_handshake(broker_factory, tmp_path):
    secured = Secured(broker_factory, tmp_path, **{
        "listener.name.ssl.ssl.enabled.protocols": "TLSv1.2",
        "listener.name.ssl.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_NOT_A_SUITE",
    })
    context = ssl.create_default_context(cafile=str(secured.ca.ca_path))
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.2"
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    only_13 = ssl.create_default_context(cafile=str(secured.ca.ca_path))
    only_13.minimum_version = ssl.TLSVersion.TLSv1_3
    with pytest.raises(ssl.SSLError):
        with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=5) as raw:
            only_13.wrap_socket(raw, server_hostname="127.0.0.1")
    # Another listener keeps the defaults: TLS 1.3.
    with socket.create_connection(("127.0.0.1", secured.ports["OPTIONAL"]), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.3"
    produce_and_consume({"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL", **secured.tls()},
                        "tls12", count=3)


# --- SASL --------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_clients_produce_consume_in_groups_and_transactions(secured, listener, mechanism):
    topic = f"sasl-{listener}-{mechanism}".lower()
    create_topic(secured.broker.bootstrap, topic)
    conf = secured.sasl(listener, mechanism)
    produce_and_consume(conf, topic)
    wait_until(lambda: f"listener={listener} principal=User:alice" in secured.log().replace('"', ""), 10,
               "the SASL principal in the log")

    # A consumer group commits and its offsets are read back.
    group = f"group-{uuid.uuid4().hex}"
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=20)
    consumer.close()
    assert len(seen) == 20 and committed[0].offset == 20

    # A transaction commits and a read_committed consumer sees it.
    producer = Producer({**conf, "transactional.id": f"txn-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"txn-{i}".encode())
    producer.commit_transaction(30)
    values = consume_values(conf, topic, 25, **{"isolation.level": "read_committed"})
    assert values[20:] == [f"txn-{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_authenticates_with_sasl(secured, mechanism):
    create_topic(secured.broker.bootstrap, "kafka-python-sasl")
    sasl = {"security_protocol": "SASL_SSL", "ssl_cafile": str(secured.ca.ca_path), "sasl_mechanism": mechanism,
            "sasl_plain_username": "bob", "sasl_plain_password": USERS["bob"]}
    producer = kafka_python_producer(secured.bootstrap("SASL_SSL"), **sasl)
    deliveries = produce_kafka_python(producer, "kafka-python-sasl", records(10, mechanism))
    producer.close()
    assert len(deliveries) == 10
    values = kafka_python_values(secured.bootstrap("SASL_SSL"), "kafka-python-sasl", 10, **sasl)
    assert values == [f"{mechanism}-{i}".encode() for i in range(10)]


def test_kafka_python_authenticates_with_a_signed_jwt_and_kcat_with_scram(secured):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    token = secured.jwt.token(claims("dave", aud="strom"))

    class Provider(AbstractTokenProvider):
        def token(self):
            return token

    create_topic(secured.broker.bootstrap, "jwt-and-kcat")
    oauth = {"security_protocol": "SASL_SSL", "ssl_cafile": str(secured.ca.ca_path), "sasl_mechanism": "OAUTHBEARER",
             "sasl_oauth_token_provider": Provider()}
    producer = kafka_python_producer(secured.bootstrap("JWT"), **oauth)
    assert len(produce_kafka_python(producer, "jwt-and-kcat", records(5, "jwt"))) == 5
    producer.close()
    assert kafka_python_values(secured.bootstrap("JWT"), "jwt-and-kcat", 5, **oauth) == [
        f"jwt-{i}".encode() for i in range(5)]
    wait_until(lambda: "principal=User:dave" in secured.log(), 10, "the token's subject as principal")

    kcat = ["kcat", "-b", secured.bootstrap("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
            "-X", f"ssl.ca.location={secured.ca.ca_path}", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}"]
    subprocess.run([*kcat, "-P", "-t", "jwt-and-kcat"], input=b"from-kcat\n", check=True, timeout=60)
    done = subprocess.run([*kcat, "-C", "-t", "jwt-and-kcat", "-o", "5", "-c", "1", "-e"],
                          capture_output=True, check=True, timeout=60)
    assert done.stdout.strip() == b"from-kcat"
    wrong = [arg.replace(USERS["bob"], "wrong") for arg in kcat]
    refused = subprocess.run([*wrong, "-L"], capture_output=True, timeout=60)
    assert refused.returncode != 0 and b"Authentication failed" in refused.stderr, refused.stderr[-500:]


def oauth_conf(secured: Secured, token: str, claimed_expiry_s: float | None = None) -> dict:
    """A SASL_SSL client on the JWT listener that presents `token`."""

    def refresh(_config):
        return token, claimed_expiry_s or time.time() + 3600

    return {"bootstrap.servers": secured.bootstrap("JWT"), "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": refresh, **secured.tls()}


def test_signed_jwts_are_checked_against_the_jwks(secured, tmp_path):
    create_topic(secured.broker.bootstrap, "signed-jwt")
    token = secured.jwt.token(claims("carol", aud="strom"))
    produce_and_consume(oauth_conf(secured, token), "signed-jwt")
    wait_until(lambda: "principal=User:carol" in secured.log(), 10, "the token's subject as principal")

    # The issuer rotates its key: the JWKS file changes, the broker follows.
    rotated = JwtIssuer(tmp_path / "rotated", kid="rotated-key")
    staging = tmp_path / "jwks.staging"
    staging.write_bytes(rotated.jwks_path.read_bytes())
    staging.replace(secured.jwt.jwks_path)
    fresh = rotated.token(claims("erin", aud="strom"))
    assert AdminClient(oauth_conf(secured, fresh)).list_topics(timeout=20).brokers
    wait_until(lambda: "principal=User:erin" in secured.log(), 10, "a token of the rotated key accepted")
    assert "invalid_token" in authentication_error(oauth_conf(secured, token)).str(), "the retired key still works"


def test_failed_authentications_get_kafkas_errors_and_the_broker_stays_healthy(secured):
    mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    wrong_password = [secured.sasl("SASL_SSL", m, password="wrong") for m in mechanisms]
    for conf in wrong_password:
        error = authentication_error(conf)
        assert error.code() == KafkaError._AUTHENTICATION, error
        if conf["sasl.mechanisms"] == "PLAIN":
            assert "Invalid username or password" in error.str(), error
        else:
            assert "invalid credentials" in error.str(), error

    unknown_user = secured.sasl("SASL_PLAINTEXT", "SCRAM-SHA-256", user="nobody", password="x")
    assert authentication_error(unknown_user).code() == KafkaError._AUTHENTICATION

    rogue = JwtIssuer(secured.broker.workdir)
    refused_tokens = {
        "expired": secured.jwt.token(claims("carol", lifetime_s=-120, aud="strom")),
        "wrong audience": secured.jwt.token(claims("carol", aud="elsewhere")),
        "unknown key": rogue.token(claims("carol", aud="strom")),
        "unsigned": unsecured_token(claims("carol", aud="strom")),
    }
    for what, token in refused_tokens.items():
        error = authentication_error(oauth_conf(secured, token))
        assert error.code() == KafkaError._AUTHENTICATION, (what, error)
        assert "invalid_token" in error.str(), (what, error)

    # An unsecured token that expired is refused on the unsecured listeners too.
    expired = secured.sasl("SASL_PLAINTEXT", "OAUTHBEARER")
    expired.pop("enable.sasl.oauthbearer.unsecure.jwt")
    expired.pop("sasl.oauthbearer.config")
    stale = unsecured_token(claims("alice", lifetime_s=-60))
    expired["oauth_cb"] = lambda _config: (stale, time.time() + 3600)
    assert authentication_error(expired).code() == KafkaError._AUTHENTICATION

    # Requests before authentication are refused: the connection is closed.
    metadata = wire.request(3, 1, 5, wire.int32(-1))
    assert wire.exchange(secured.ports["SASL_PLAINTEXT"], metadata, timeout_s=10).closed

    assert secured.broker.alive()
    create_topic(secured.broker.bootstrap, "still-healthy")
    produce_and_consume(secured.sasl("SASL_SSL", "SCRAM-SHA-512"), "still-healthy", count=5)


def test_a_static_jaas_file_in_kafka_opts_serves_listeners_without_their_own(broker_factory, tmp_path):
    jaas_file = tmp_path / "kafka_server_jaas.conf"
    jaas_file.write_text(
        "KafkaServer {\n"
        '    org.apache.kafka.common.security.plain.PlainLoginModule required user_frank="frank-secret";\n'
        "    org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
        "};\n"
    )
    plain, sasl = distinct_free_ports(2)
    broker = broker_factory({
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
    }, port=plain, start=False)
    broker.env["KAFKA_OPTS"] = f"-Xmx1G -Djava.security.auth.login.config={jaas_file}"
    broker.start()
    conf = {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": "frank", "sasl.password": "frank-secret"}
    assert AdminClient(conf).list_topics(timeout=20).brokers
    wrong = authentication_error({**conf, "sasl.password": "nope"})
    assert "Invalid username or password" in wrong.str(), wrong


# --- KIP-368 re-authentication -----------------------------------------------


def sasl_plain_v2(sock, user: str, password: str) -> int:
    """SaslHandshake v1 + SaslAuthenticate v2 with PLAIN; the session lifetime."""
    handshake = wire.request(17, 1, 1, wire.Writer(flexible=False).nullable_string("PLAIN").build())
    token = f"\0{user}\0{password}".encode()
    authenticate = wire.request(36, 2, 2, wire.uvarint(len(token) + 1) + token + b"\0", flexible=True)
    wire.send(sock, handshake + authenticate)
    reaction = wire.drain(sock, timeout_s=10, until_frames=2)
    frames, _ = wire.split_frames(reaction.received)
    assert len(frames) == 2, reaction
    reader = wire.Reader(frames[1], flexible=True)
    assert reader.int32() == 2
    reader.skip_tagged_fields()
    assert reader.int16() == 0, "SaslAuthenticate error code"
    reader.uvarint()  # error_message: null
    size = reader.uvarint() - 1
    reader.raw(size)
    return reader.int64()


def test_sessions_expire_unless_the_client_re_authenticates(broker_factory, tmp_path):
    secured = Secured(broker_factory, tmp_path, **{"listener.name.sasl_plaintext.connections.max.reauth.ms": "1500"})
    with wire.connect(secured.ports["SASL_PLAINTEXT"]) as sock:
        assert sasl_plain_v2(sock, "alice", USERS["alice"]) == 1500
        authenticated = time.monotonic()
        # Requests are served until the session lapses; the next one closes the connection.
        answered = 0
        for correlation_id in range(10, 1_000):
            assert time.monotonic() - authenticated < 15, "the expired session was never closed"
            wire.send(sock, wire.request(3, 1, correlation_id, wire.int32(-1)))
            reaction = wire.drain(sock, timeout_s=10, until_frames=1)
            if reaction.closed:
                break
            assert wire.split_frames(reaction.received)[0], "a request went unanswered"
            answered += 1
            time.sleep(0.05)  # pacing between requests, not a wait for the outcome
        assert answered > 0 and time.monotonic() - authenticated >= 1.5

    # librdkafka re-authenticates on its own (KIP-368): a producer outliving
    # several sessions keeps delivering on the same connections.
    log_before = len(secured.log())
    create_topic(secured.broker.bootstrap, "reauth")
    producer = Producer({**secured.sasl("SASL_PLAINTEXT", "SCRAM-SHA-256"), "enable.idempotence": False,
                         "linger.ms": 0})
    delivered = []
    deadline = time.monotonic() + 30
    for i in range(100_000):
        if "SASL re-authenticated" in secured.log()[log_before:]:
            break
        assert time.monotonic() < deadline, "the producer did not re-authenticate within 30 s"
        producer.produce("reauth", value=str(i).encode(), on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert delivered and all(err is None for err in delivered)
    during = secured.log()[log_before:]
    assert "SASL re-authenticated" in during
    assert "session expired" not in during


# --- hostile input -----------------------------------------------------------


def sasl_authenticate_v2(sock, mechanism: str, token: bytes) -> tuple[int, str | None]:
    """SaslHandshake v1 then one SaslAuthenticate v2: (error code, error message)."""
    handshake = wire.request(17, 1, 1, wire.Writer(flexible=False).nullable_string(mechanism).build())
    authenticate = wire.request(36, 2, 2, wire.uvarint(len(token) + 1) + token + b"\0", flexible=True)
    wire.send(sock, handshake + authenticate)
    reaction = wire.drain(sock, timeout_s=10, until_frames=2)
    frames, _ = wire.split_frames(reaction.received)
    assert len(frames) == 2, reaction
    reader = wire.Reader(frames[1], flexible=True)
    assert reader.int32() == 2
    reader.skip_tagged_fields()
    error = reader.int16()
    size = reader.uvarint() - 1
    message = reader.raw(size).decode() if size >= 0 else None
    return error, message


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_garbage_sasl_messages_fail_authentication_and_close(secured, mechanism):
    for garbage in [b"", b"\xff\xfe\x00", b"n,,n=alice", b"\x00" * 1000, b"n,,\x01auth=Bearer \x01\x01"]:
        with wire.connect(secured.ports["SASL_PLAINTEXT"]) as sock:
            error, message = sasl_authenticate_v2(sock, mechanism, garbage)
            if error == 0:
                # A first SCRAM message may pass as far as the server's challenge;
                # an empty OAUTHBEARER challenge reply too. The next junk fails.
                wire.send(sock, wire.request(36, 2, 3, wire.uvarint(4) + b"bad" + b"\0", flexible=True))
                reaction = wire.drain(sock, timeout_s=10, until_frames=1)
                frames, _ = wire.split_frames(reaction.received)
                reader = wire.Reader(frames[0], flexible=True)
                reader.int32()
                reader.skip_tagged_fields()
                error = reader.int16()
            assert error == 58, (garbage, error, message)  # SASL_AUTHENTICATION_FAILED
            assert wire.drain(sock, timeout_s=10).closed
    assert secured.broker.alive()


def test_oversized_and_out_of_order_sasl_frames_close_the_connection(secured):
    # A size prefix past sasl.server.max.receive.size (512 KiB) before authentication.
    with wire.connect(secured.ports["SASL_PLAINTEXT"]) as sock:
        wire.send(sock, wire.int32(600 * 1024) + b"x" * 1024)
        assert wire.drain(sock, timeout_s=10).closed
    # SaslAuthenticate without a handshake, and an unknown mechanism.
    assert wire.exchange(secured.ports["SASL_PLAINTEXT"], wire.request(36, 2, 1, b"\x01\x00", flexible=True),
                         timeout_s=10).closed
    with wire.connect(secured.ports["SASL_PLAINTEXT"]) as sock:
        wire.send(sock, wire.request(17, 1, 1, wire.Writer(flexible=False).nullable_string("GSSAPI").build()))
        reaction = wire.drain(sock, timeout_s=10)
        frames, _ = wire.split_frames(reaction.received)
        reader = wire.Reader(frames[0])
        assert reader.int32() == 1 and reader.int16() == 33, "UNSUPPORTED_SASL_MECHANISM"
        assert reaction.closed
    produce_and_consume(secured.sasl("SASL_PLAINTEXT", "PLAIN"), "after-garbage", count=3)


def test_garbage_and_stalled_tls_handshakes_are_dropped(secured):
    port = secured.ports["SSL"]
    # Not TLS at all: a Kafka request, random bytes.
    for garbage in [wire.api_versions_request(3, 1), bytes(range(256)) * 4]:
        assert wire.exchange(port, garbage, timeout_s=10).closed
    # Handshakes that never finish hold no resources past the handshake time-out.
    stalled = [wire.connect(port) for _ in range(20)]
    try:
        stalled[0].sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then silence
        # Meanwhile a real client is served.
        assert AdminClient({"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL",
                            **secured.tls()}).list_topics(timeout=20).brokers
        for sock in stalled:
            assert wire.drain(sock, timeout_s=30).closed, "a stalled handshake stayed open"
    finally:
        for sock in stalled:
            sock.close()
    assert secured.broker.alive()


# --- configuration -----------------------------------------------------------


def run_server(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    args = [str(strom_binary()), "server", "--override", f"log.dirs={tmp_path}/data"]
    for override in overrides:
        args += ["--override", override]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=10)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["listeners=SSL://127.0.0.1:{port}"], "needs a key store"),
        (["listeners=SSL://127.0.0.1:{port}", "ssl.keystore.type=JKS", "ssl.keystore.location=/x.jks"], "JKS"),
        (["listeners=SASL_PLAINTEXT://127.0.0.1:{port}"], "sasl.enabled.mechanisms"),
        (["listeners=SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms=GSSAPI"], "GSSAPI"),
    ],
)
def test_a_listener_that_cannot_be_secured_stops_the_start(tmp_path, overrides, fragment):
    port = free_port()
    done = run_server(tmp_path, *(o.format(port=port) for o in overrides))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("strom: listener ") and fragment in last, done.stderr
    assert "formatting log dir" not in done.stderr, "refused before touching the disk"
