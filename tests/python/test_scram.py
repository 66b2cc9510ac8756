"""SCRAM credentials in the metadata log (KIP-554), as Kafka operators manage
them: AlterUserScramCredentials / DescribeUserScramCredentials through
confluent-kafka's AdminClient and `strom configs --entity-type users`, then
SCRAM-SHA-256/512 logins with confluent-kafka and kcat."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from harness import admin_cli, admin_ok, distinct_free_ports, future_error, set_scram_credentials, wait_future

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def scram_broker(broker_factory):
    plain, sasl = distinct_free_ports(2)
    broker = broker_factory({
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    }, port=plain)
    broker.sasl_port = sasl
    return broker


def sasl_conf(broker, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{broker.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "reconnect.backoff.max.ms": 1000}


def login(conf: dict, timeout_s: float = 20) -> KafkaError | None:
    """None when the client authenticates and reads metadata; else the
    first error it reports."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return None
        except KafkaException:
            pass
        admin.poll(0.1)
    assert errors, "neither a login nor an error before the deadline"
    return errors[0]


def described(broker, *users: str) -> dict[str, dict[str, int]]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.describe_user_scram_credentials(list(users) or None)
    if isinstance(futures, dict):
        results = {user: wait_future(f) for user, f in futures.items()}
    else:
        results = wait_future(futures)
    return {user: {info.mechanism.name: info.iterations for info in d.scram_credential_infos}
            for user, d in results.items()}


def test_credentials_set_with_the_admin_client_authenticate_both_mechanisms(scram_broker):
    set_scram_credentials(scram_broker.bootstrap, {"alice": "alice-secret"}, iterations=8192)
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"]:
        assert login(sasl_conf(scram_broker, mechanism, "alice", "alice-secret")) is None, mechanism
        wrong = login(sasl_conf(scram_broker, mechanism, "alice", "not-it"))
        assert wrong is not None and wrong.code() == KafkaError._AUTHENTICATION, wrong
    unknown = login(sasl_conf(scram_broker, "SCRAM-SHA-256", "mallory", "x"))
    assert unknown is not None and unknown.code() == KafkaError._AUTHENTICATION
    assert described(scram_broker, "alice") == {"alice": {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 8192}}

    kcat = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{scram_broker.sasl_port}", "-L", "-m", "10", "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"],
        capture_output=True, text=True, timeout=30)
    assert kcat.returncode == 0 and "broker" in kcat.stdout, kcat.stderr


def test_a_deleted_credential_no_longer_authenticates_and_others_stay(scram_broker):
    set_scram_credentials(scram_broker.bootstrap, {"alice": "a-secret", "bob": "b-secret"})
    admin = AdminClient({"bootstrap.servers": scram_broker.bootstrap})
    futures = admin.alter_user_scram_credentials([UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)])
    wait_future(futures["alice"])
    refused = login(sasl_conf(scram_broker, "SCRAM-SHA-256", "alice", "a-secret"))
    assert refused is not None and refused.code() == KafkaError._AUTHENTICATION
    assert login(sasl_conf(scram_broker, "SCRAM-SHA-512", "alice", "a-secret")) is None
    assert login(sasl_conf(scram_broker, "SCRAM-SHA-256", "bob", "b-secret")) is None
    assert described(scram_broker, "alice")["alice"] == {"SCRAM_SHA_512": 4096}


def test_kafkas_validation_errors(scram_broker):
    admin = AdminClient({"bootstrap.servers": scram_broker.bootstrap})

    def upsert(user: str, iterations: int, mechanism=ScramMechanism.SCRAM_SHA_256):
        return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), b"pw")

    futures = admin.alter_user_scram_credentials([
        upsert("few", 4095), upsert("many", 16385), upsert("ok", 4096),
        UserScramCredentialDeletion("ghost", ScramMechanism.SCRAM_SHA_512),
        upsert("twice", 4096), UserScramCredentialDeletion("twice", ScramMechanism.SCRAM_SHA_256),
    ])
    errors = {user: future_error(f) for user, f in futures.items()}
    assert errors["ok"] is None
    assert errors["few"].code() == KafkaError.UNACCEPTABLE_CREDENTIAL and "Too few iterations" in errors["few"].str()
    assert errors["many"].code() == KafkaError.UNACCEPTABLE_CREDENTIAL and "Too many" in errors["many"].str()
    assert errors["ghost"].code() == KafkaError.RESOURCE_NOT_FOUND
    assert errors["twice"].code() == KafkaError.DUPLICATE_RESOURCE
    assert set(described(scram_broker)) == {"ok"}, "refused users were not written"
    missing = admin.describe_user_scram_credentials(["nobody"])
    error = future_error(missing["nobody"] if isinstance(missing, dict) else missing)
    assert error is not None and error.code() == KafkaError.RESOURCE_NOT_FOUND


def test_credentials_survive_a_restart(scram_broker):
    set_scram_credentials(scram_broker.bootstrap, {"carol": "c-secret"}, mechanisms=["SCRAM-SHA-512"])
    scram_broker.restart()
    assert login(sasl_conf(scram_broker, "SCRAM-SHA-512", "carol", "c-secret")) is None
    assert described(scram_broker, "carol") == {"carol": {"SCRAM_SHA_512": 4096}}


def test_strom_configs_users_round_trip(scram_broker):
    out = admin_ok(scram_broker, "configs", "--alter", "--entity-type", "users", "--entity-name", "dave",
                   "--add-config", "SCRAM-SHA-256=[iterations=8192,password=dave-secret],SCRAM-SHA-512=[password=d2]")
    assert "Completed updating config for user dave." in out
    shown = admin_ok(scram_broker, "configs", "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-256=iterations=8192, " \
           "SCRAM-SHA-512=iterations=4096" in shown, shown
    assert login(sasl_conf(scram_broker, "SCRAM-SHA-256", "dave", "dave-secret")) is None
    assert login(sasl_conf(scram_broker, "SCRAM-SHA-512", "dave", "d2")) is None

    admin_ok(scram_broker, "configs", "--alter", "--entity-type", "users", "--entity-name", "dave",
             "--delete-config", "SCRAM-SHA-256")
    assert "SCRAM-SHA-256" not in admin_ok(scram_broker, "configs", "--describe", "--entity-type", "users")
    refused = login(sasl_conf(scram_broker, "SCRAM-SHA-256", "dave", "dave-secret"))
    assert refused is not None and refused.code() == KafkaError._AUTHENTICATION

    too_few = admin_cli(scram_broker, "configs", "--alter", "--entity-type", "users", "--entity-name", "dave",
                        "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]")
    assert too_few.returncode != 0 and "Too few iterations" in too_few.stderr, too_few.stderr


def test_the_console_logs_in_the_brokers_own_sasl_users(broker_factory):
    from console_client import ConsoleClient

    plain, sasl, console = distinct_free_ports(3)
    plain_jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                  'user_erin="erin-secret";')
    broker = broker_factory({
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas,
        "console.listener": f"http://127.0.0.1:{console}",
        "console.auth": "sasl",
    }, port=plain)
    set_scram_credentials(broker.bootstrap, {"frank": "frank-secret"}, mechanisms=["SCRAM-SHA-512"])
    assert ConsoleClient(console).get("/").status == 401
    assert ConsoleClient(console, ("frank", "wrong")).get("/").status == 401
    assert ConsoleClient(console, ("nobody", "frank-secret")).get("/").status == 401
    assert '<span class="user">frank</span>' in ConsoleClient(console, ("frank", "frank-secret")).page("/")
    assert '<span class="user">erin</span>' in ConsoleClient(console, ("erin", "erin-secret")).page("/")
    # A credential removed from the metadata log no longer opens the console.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.alter_user_scram_credentials([UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_512)])
    wait_future(futures["frank"])
    assert ConsoleClient(console, ("frank", "frank-secret")).get("/").status == 401


def test_console_sasl_auth_needs_a_sasl_listener(broker_factory):
    from harness import free_port

    broker = broker_factory({"console.listener": f"http://127.0.0.1:{free_port()}", "console.auth": "sasl"},
                            start=False)
    with pytest.raises(AssertionError, match="console.auth=sasl needs a SASL_PLAINTEXT or SASL_SSL listener"):
        broker.start(timeout_s=20)
