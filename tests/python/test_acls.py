"""Authorization as Kafka's StandardAuthorizer does it, with real clients
over SASL_PLAINTEXT (PLAIN users): ACLs made with `strom acls`, kept in the
metadata log, judged on every request with Kafka's *_AUTHORIZATION_FAILED
errors; super users bypass; DENY wins; changes apply to open connections."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import admin_cli, admin_ok, create_topic, free_port, wait_until

pytestmark = pytest.mark.timeout(180)

USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Authorized:
    """A broker with a PLAINTEXT listener for the (super user) test harness
    and a SASL_PLAINTEXT listener for PLAIN users."""

    def __init__(self, broker_factory, **extra):
        self.sasl_port = free_port()
        plain_port = free_port()
        users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
        config = {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f'org.apache.kafka.common.security.plain.PlainLoginModule required {users};',
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:ANONYMOUS;User:admin",
            **extra,
        }
        self.broker = broker_factory(config, port=plain_port)

    def conf(self, user: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}

    def acls(self, *args: str) -> str:
        return admin_ok(self.broker, "acls", *args)


@pytest.fixture
def authorized(broker_factory) -> Authorized:
    return Authorized(broker_factory)


def produce_error(conf: dict, topic: str, timeout_s: float = 30, **extra) -> KafkaError | None:
    """The delivery error of one record, None if it was written."""
    producer = Producer({**conf, "enable.idempotence": False, "message.timeout.ms": int(timeout_s * 1000),
                         "retries": 0, **extra})
    return deliver(producer, topic)


def deliver(producer: Producer, topic: str) -> KafkaError | None:
    outcome: list = []
    try:
        producer.produce(topic, b"value", on_delivery=lambda err, msg: outcome.append(err))
    except KafkaException as refused:
        # The client already knows the topic refuses it.
        return refused.args[0]
    deadline = time.monotonic() + 60
    while not outcome:
        assert time.monotonic() < deadline, "no delivery report"
        producer.poll(0.1)
    return outcome[0]


def consume_error(conf: dict, topic: str, group: str, timeout_s: float = 30) -> KafkaError | None:
    """The first error a subscribed consumer of `group` meets; None once it reads a record."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None and message.error().code() != KafkaError._PARTITION_EOF:
                return message.error()
            if message.error() is None:
                consumer.commit(message, asynchronous=False)
                return None
        raise AssertionError(f"consumer of {topic} in {group} neither read nor failed")
    finally:
        consumer.close()


def topics_seen(conf: dict) -> set[str]:
    return set(AdminClient(conf).list_topics(timeout=30).topics)


def test_a_user_allowed_one_prefix_and_one_group_can_do_exactly_that(authorized):
    bootstrap = authorized.broker.bootstrap
    for topic in ["orders-eu", "payments"]:
        create_topic(bootstrap, topic)
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
                    "--topic", "orders-", "--resource-pattern-type", "PREFIXED")
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "billing")
    alice = authorized.conf("alice")

    assert produce_error(alice, "orders-eu") is None
    # Idempotence needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
    assert produce_error(alice, "orders-eu", **{"enable.idempotence": True, "retries": 5}) is None
    assert produce_error(alice, "payments").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Auto-creation needs CREATE, which alice does not have.
    assert produce_error(alice, "orders-auto").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "orders-auto" not in topics_seen({"bootstrap.servers": bootstrap})
    assert consume_error(alice, "orders-eu", "billing") is None
    assert consume_error(alice, "orders-eu", "other-group").code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # Committing offsets of a topic alice may not read is refused, partition by partition.
    committer = Consumer({**alice, "group.id": "billing", "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as refused:
            committed = committer.commit(offsets=[TopicPartition("payments", 0, 1)], asynchronous=False)
            assert all(tp.error is not None for tp in committed)
            raise KafkaException(committed[0].error)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        committer.close()

    # Groups alice may not describe are not listed.
    assert consume_error({"bootstrap.servers": bootstrap}, "orders-eu", "admins-only") is None
    admin = AdminClient(alice)
    listed = admin.list_consumer_groups().result(timeout=30).valid
    assert {g.group_id for g in listed} == {"billing"}

    # Metadata: topics alice may not describe are absent (READ/WRITE imply DESCRIBE).
    assert topics_seen(alice) == {"orders-eu"}
    created = admin.create_topics([NewTopic("orders-new", 1, 1)])["orders-new"]
    with pytest.raises(KafkaException) as refused:
        created.result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    deleted = admin.delete_topics(["orders-eu"])["orders-eu"]
    with pytest.raises(KafkaException) as refused:
        deleted.result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Listing ACLs needs DESCRIBE on the cluster (kafka-python reports the
    # response's error; librdkafka's DescribeAcls drops it).
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter, ResourceType)
    from kafka.errors import ClusterAuthorizationFailedError
    kafka_python_admin = KafkaAdminClient(
        bootstrap_servers=alice["bootstrap.servers"], security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
        sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
    any_acl = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kafka_python_admin.describe_acls(any_acl)
    finally:
        kafka_python_admin.close()
    # Bob has no ACL at all: everything is refused, and nothing is visible.
    bob = authorized.conf("bob")
    assert produce_error(bob, "orders-eu").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert topics_seen(bob) == set()


def test_super_users_bypass_and_deny_overrides_allow_on_open_connections(authorized):
    create_topic(authorized.broker.bootstrap, "shared")
    authorized.acls("--add", "--allow-principal", "User:*", "--topic", "*")
    alice = Producer({**authorized.conf("alice"), "enable.idempotence": False, "retries": 0,
                      "message.timeout.ms": 20_000})
    assert deliver(alice, "shared") is None
    authorized.acls("--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", "shared")
    # The same producer, on its open connection, is refused from now on.
    error = wait_until(lambda: deliver(alice, "shared"), 30, "the DENY to reach alice's connection")
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(authorized.conf("bob"), "shared") is None
    authorized.acls("--remove", "--deny-principal", "User:alice", "--operation", "Write", "--topic", "shared")
    assert wait_until(lambda: deliver(alice, "shared") is None, 30, "alice writing again")
    # A super user is never refused, whatever the ACLs say.
    authorized.acls("--add", "--deny-principal", "User:admin", "--topic", "*")
    admin = authorized.conf("admin")
    assert produce_error(admin, "shared") is None
    admin_client = AdminClient(admin)
    admin_client.create_topics([NewTopic("by-admin", 1, 1)])["by-admin"].result(timeout=30)


def test_host_filters_admit_only_the_named_hosts(authorized):
    create_topic(authorized.broker.bootstrap, "hosts")
    authorized.acls("--add", "--allow-principal", "User:alice", "--allow-host", "127.0.0.2", "--operation",
                    "Write", "--topic", "hosts")
    alice = authorized.conf("alice")
    assert produce_error(alice, "hosts").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    authorized.acls("--add", "--allow-principal", "User:alice", "--allow-host", "127.0.0.1", "--operation",
                    "Write", "--topic", "hosts")
    assert produce_error(alice, "hosts") is None


def test_transactions_need_write_on_the_transactional_id(authorized):
    create_topic(authorized.broker.bootstrap, "txn-topic")
    authorized.acls("--add", "--allow-principal", "User:alice", "--producer", "--topic", "txn-topic",
                    "--transactional-id", "tx-ok")
    alice = authorized.conf("alice")
    producer = Producer({**alice, "transactional.id": "tx-ok"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-topic", b"in-txn")
    producer.commit_transaction(30)
    refused = Producer({**alice, "transactional.id": "tx-other"})
    with pytest.raises(KafkaException) as error:
        refused.init_transactions(30)
    assert error.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_kafka_python_sees_the_same_errors(authorized):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    create_topic(authorized.broker.bootstrap, "kp-secret")
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{authorized.sasl_port}",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="bob", sasl_plain_password=USERS["bob"],
                             enable_idempotence=False, max_block_ms=30_000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("kp-secret", b"refused").get(timeout=30)
    finally:
        producer.close(timeout=5)


def test_acls_survive_a_restart_and_strom_acls_lists_and_removes_them(authorized):
    authorized.acls("--add", "--allow-principal", "User:alice", "--consumer", "--topic", "logs-",
                    "--resource-pattern-type", "PREFIXED", "--group", "readers")
    listed = authorized.acls("--list", "--topic", "logs-", "--resource-pattern-type", "PREFIXED")
    assert "ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)" in listed
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert "operation=DESCRIBE" in listed
    authorized.broker.restart()
    everything = authorized.acls("--list")
    # As kafka-acls.sh, the pattern type applies to every resource named.
    assert "ResourcePattern(resourceType=GROUP, name=readers, patternType=PREFIXED)" in everything
    # MATCH finds every ACL that applies to a topic name.
    assert "name=logs-" in authorized.acls("--list", "--topic", "logs-app", "--resource-pattern-type", "MATCH")
    removed = authorized.acls("--remove", "--force", "--topic", "logs-", "--resource-pattern-type", "PREFIXED")
    assert removed.count("Removed ACL") == 2
    assert "logs-" not in authorized.acls("--list")
    refused = admin_cli(authorized.broker, "acls", "--add", "--allow-principal", "alice", "--topic", "t")
    assert refused.returncode != 0 and "Type:name" in refused.stderr


def test_without_an_authorizer_everyone_may_do_everything(broker):
    create_topic(broker.bootstrap, "open")
    assert produce_error({"bootstrap.servers": broker.bootstrap}, "open") is None
    # As in Kafka, the ACL APIs answer SECURITY_DISABLED without an authorizer.
    refused = admin_cli(broker, "acls", "--list")
    assert refused.returncode != 0 and "No Authorizer is configured" in refused.stderr, refused.stderr
    group = f"g-{uuid.uuid4().hex}"
    assert consume_error({"bootstrap.servers": broker.bootstrap}, "open", group) is None
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition("open", 0)], timeout=30)
        assert committed[0].offset == 1
    finally:
        consumer.close()


def test_describe_answers_report_the_principals_authorized_operations(authorized):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    create_topic(authorized.broker.bootstrap, "ops-topic")
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "ops-topic")
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "ops-group")
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Describe", "--cluster")
    admin = AdminClient(authorized.conf("alice"))
    topic = admin.describe_topics(TopicCollection(["ops-topic"]), include_authorized_operations=True)["ops-topic"]
    assert set(topic.result(timeout=30).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
    group = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)["ops-group"]
    assert set(group.result(timeout=30).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    # The topic alice may not describe is refused by name.
    create_topic(authorized.broker.bootstrap, "hidden")
    hidden = admin.describe_topics(TopicCollection(["hidden"]))["hidden"]
    with pytest.raises(KafkaException) as refused:
        hidden.result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found_opens_resources_without_acls(broker_factory):
    authorized = Authorized(broker_factory, **{"allow.everyone.if.no.acl.found": "true"})
    for topic in ["free", "guarded"]:
        create_topic(authorized.broker.bootstrap, topic)
    authorized.acls("--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", "guarded")
    alice = authorized.conf("alice")
    assert produce_error(alice, "free") is None
    assert produce_error(alice, "guarded").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kcat_is_refused_a_topic_it_may_not_read(authorized):
    import subprocess

    create_topic(authorized.broker.bootstrap, "kcat-secret")
    assert produce_error(authorized.conf("admin"), "kcat-secret") is None
    conf = authorized.conf("alice")
    args = ["kcat", "-C", "-t", "kcat-secret", "-o", "beginning", "-e", "-c", "1"]
    args += [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "authorization failed" in done.stderr.lower() or "TOPIC_AUTHORIZATION_FAILED" in done.stderr


def test_the_console_message_browser_needs_read_on_the_topic(tmp_path):
    from console_client import ConsoleClient, start_console_broker

    broker, port = start_console_broker(tmp_path, **{
        "console.auth": "basic", "console.auth.basic.users": "alice:s3cret",
        "authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"})
    try:
        create_topic(broker.bootstrap, "browsed")
        alice = ConsoleClient(port, ("alice", "s3cret"))
        assert alice.get("/messages", topic="browsed").status == 403
        admin_ok(broker, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "browsed")
        assert alice.get("/messages", topic="browsed").status == 200
    finally:
        broker.close()


def test_kip_848_consumers_need_read_on_the_group_and_describe_on_their_topics(authorized):
    bootstrap = authorized.broker.bootstrap
    for topic in ["kip848-open", "kip848-secret"]:
        create_topic(bootstrap, topic)
    assert produce_error(authorized.conf("admin"), "kip848-open") is None
    authorized.acls("--add", "--allow-principal", "User:alice", "--consumer", "--topic", "kip848-open",
                    "--group", "kip848")
    alice = {**authorized.conf("alice"), "group.protocol": "consumer"}
    assert consume_error(alice, "kip848-open", "kip848") is None
    assert consume_error(alice, "kip848-secret", "kip848").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume_error(alice, "kip848-open", "kip848-other").code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_create_on_the_cluster_lets_a_user_create_any_topic(authorized):
    authorized.acls("--add", "--allow-principal", "User:alice", "--operation", "Create", "--cluster")
    admin = AdminClient(authorized.conf("alice"))
    admin.create_topics([NewTopic("made-by-alice", 1, 1)])["made-by-alice"].result(timeout=30)
    assert "made-by-alice" in topics_seen({"bootstrap.servers": authorized.broker.bootstrap})
    # CREATE does not imply DESCRIBE: the topic stays hidden from her.
    assert "made-by-alice" not in topics_seen(authorized.conf("alice"))
