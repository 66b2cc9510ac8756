"""Topic and broker configs at run time: DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs through confluent-kafka's and kafka-python's admin
clients, Kafka's config sources, errors and validate_only, changes that
survive a restart and changes that reach the partition logs without one.

Neither client can name the cluster-wide broker default (resource name ""),
so those requests are built by hand, as Kafka's Java AdminClient sends them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from harness import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_producer,
    create_topic,
    future_error,
    produce_one_confluent,
    wait_future,
)
from wire import Reader, Writer, call, request

NODE_ID = 1
CREATE_TOPICS = 19
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3

DYNAMIC_TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
DYNAMIC_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DYNAMIC_DEFAULT_BROKER = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
STATIC_BROKER = ConfigSource.STATIC_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value

HOUR_MS = 3_600_000


# ---------------------------------------------------------------- confluent-kafka helpers
# Each keeps its AdminClient referenced until the future resolves.


def describe(bootstrap: str, restype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    admin = admin_client(bootstrap)
    resource = ConfigResource(restype, name)
    return wait_future(admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)[resource])


def describe_topic(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    return describe(bootstrap, ResourceType.TOPIC, topic)


def incremental_alter(
    bootstrap: str, restype: ResourceType, name: str, ops: list[tuple[str, str | None, AlterConfigOpType]], **kwargs
) -> KafkaError | None:
    admin = admin_client(bootstrap)
    entries = [ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops]
    resource = ConfigResource(restype, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=ADMIN_TIMEOUT_S, **kwargs)
    return future_error(futures[resource])


def set_topic_configs(bootstrap: str, topic: str, **configs: str) -> None:
    ops = [(key.replace("_", "."), value, AlterConfigOpType.SET) for key, value in configs.items()]
    error = incremental_alter(bootstrap, ResourceType.TOPIC, topic, ops)
    assert error is None, f"setting {configs} on {topic}: {error}"


def assert_error(error: KafkaError | None, code: int, mentions: str | None = None) -> None:
    assert error is not None and error.code() == code, f"expected error {KafkaError(code).name()}, got {error}"
    if mentions is not None:
        assert mentions in error.str(), f"error message {error.str()!r} does not name {mentions!r}"


def source_and_value(entries: dict[str, ConfigEntry], name: str) -> tuple[int, str | None]:
    entry = entries[name]
    return entry.source, entry.value


# ---------------------------------------------------------------- hand-built requests


def describe_configs_v4(
    port: int, resources: list[tuple[int, str, list[str] | None]], include_synonyms: bool = True
) -> list[dict]:
    """DescribeConfigs v4; each result as a dict with its configs by name."""
    w = Writer(flexible=True).length(len(resources))
    for resource_type, name, keys in resources:
        w.int8(resource_type).string(name).length(None if keys is None else len(keys))
        for key in keys or []:
            w.string(key)
        w.tagged_fields()
    w.boolean(include_synonyms).boolean(False).tagged_fields()
    payload = call(port, request(DESCRIBE_CONFIGS, 4, 7, w.build(), flexible=True))
    r = Reader(payload, flexible=True)
    assert r.int32() == 7
    r.tagged_fields()
    r.int32()  # throttle

    def synonym(r: Reader) -> tuple[str, str | None, int]:
        entry = (r.string(), r.nullable_string(), r.int8())
        r.tagged_fields()
        return entry

    def config(r: Reader) -> dict:
        entry = {
            "name": r.string(),
            "value": r.nullable_string(),
            "read_only": r.boolean(),
            "source": r.int8(),
            "sensitive": r.boolean(),
            "synonyms": r.array(synonym),
            "type": r.int8(),
            "documentation": r.nullable_string(),
        }
        r.tagged_fields()
        return entry

    def result(r: Reader) -> dict:
        entry = {"error_code": r.int16(), "error_message": r.nullable_string(), "type": r.int8(), "name": r.string()}
        entry["configs"] = {c["name"]: c for c in r.array(config)}
        r.tagged_fields()
        return entry

    results = r.array(result)
    r.tagged_fields()
    r.assert_at_end("DescribeConfigs v4")
    return results


def incremental_alter_v1(
    port: int, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]], validate_only: bool = False
) -> list[tuple[int, str | None]]:
    """IncrementalAlterConfigs v1; (error code, message) per resource."""
    w = Writer(flexible=True).length(len(resources))
    for resource_type, name, configs in resources:
        w.int8(resource_type).string(name).length(len(configs))
        for key, operation, value in configs:
            w.string(key).int8(operation).nullable_string(value).tagged_fields()
        w.tagged_fields()
    w.boolean(validate_only).tagged_fields()
    payload = call(port, request(INCREMENTAL_ALTER_CONFIGS, 1, 8, w.build(), flexible=True))
    r = Reader(payload, flexible=True)
    assert r.int32() == 8
    r.tagged_fields()
    r.int32()  # throttle

    def response(r: Reader) -> tuple[int, str | None]:
        error_code, message = r.int16(), r.nullable_string()
        r.int8(), r.string()
        r.tagged_fields()
        return error_code, message

    responses = r.array(response)
    r.tagged_fields()
    r.assert_at_end("IncrementalAlterConfigs v1")
    return responses


def create_topic_v7(port: int, name: str, configs: dict[str, str]) -> tuple[int, dict[str, tuple[str | None, int]]]:
    """CreateTopics v7 for one topic; its error code and the configs reported, as (value, source) by name."""
    w = Writer(flexible=True).length(1).string(name).int32(1).int16(1).length(0).length(len(configs))
    for key, value in configs.items():
        w.string(key).nullable_string(value).tagged_fields()
    w.tagged_fields().int32(15_000).boolean(False).tagged_fields()
    payload = call(port, request(CREATE_TOPICS, 7, 9, w.build(), flexible=True))
    r = Reader(payload, flexible=True)
    assert r.int32() == 9
    r.tagged_fields()
    r.int32()  # throttle

    def config(r: Reader) -> tuple[str, str | None, int]:
        key, value, _read_only, source, _sensitive = r.string(), r.nullable_string(), r.boolean(), r.int8(), r.boolean()
        r.tagged_fields()
        return key, value, source

    def topic(r: Reader) -> tuple[int, dict]:
        r.string(), r.uuid()
        error_code = r.int16()
        r.nullable_string(), r.int32(), r.int16()
        reported = {key: (value, source) for key, value, source in r.array(config) or []}
        r.tagged_fields()
        return error_code, reported

    [result] = r.array(topic)
    r.tagged_fields()
    r.assert_at_end("CreateTopics v7")
    return result


def set_cluster_default(port: int, key: str, value: str | None) -> None:
    operation = SET if value is not None else DELETE
    [(error_code, message)] = incremental_alter_v1(port, [(BROKER, "", [(key, operation, value)])])
    assert error_code == 0, f"setting the cluster default {key}={value}: {error_code} {message}"


def segment_files(data_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in (data_dir / f"{topic}-0").glob("*.log"))


# ---------------------------------------------------------------- describe


def test_describe_reports_values_and_sources(broker_factory):
    broker = broker_factory(log_retention_hours=5)
    create_topic(broker.bootstrap, "orders", config={"segment.bytes": "1048576"})

    configs = describe_topic(broker.bootstrap, "orders")

    expected = {"cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                "max.message.bytes", "min.insync.replicas", "message.timestamp.type", "delete.retention.ms",
                "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms", "compression.type"}
    assert expected <= set(configs), f"missing {expected - set(configs)}"
    assert source_and_value(configs, "segment.bytes") == (DYNAMIC_TOPIC, "1048576")
    # Kafka's answer: the value in ms, but no synonym and so the default as
    # its source, since only the coarser log.retention.hours is set.
    assert source_and_value(configs, "retention.ms") == (DEFAULT, str(5 * HOUR_MS))
    assert source_and_value(configs, "max.message.bytes") == (DEFAULT, "1048588")
    assert source_and_value(configs, "cleanup.policy") == (DEFAULT, "delete")
    assert "log.segment.bytes" in configs["segment.bytes"].synonyms
    assert all(not entry.is_read_only and not entry.is_sensitive for entry in configs.values())


def test_describe_filters_keys_and_reports_types(broker):
    create_topic(broker.bootstrap, "filtered", config={"cleanup.policy": "compact"})

    [result] = describe_configs_v4(broker.port, [(TOPIC, "filtered", ["cleanup.policy", "retention.ms", "no.such"])])

    assert result["error_code"] == 0
    assert set(result["configs"]) == {"cleanup.policy", "retention.ms"}
    policy = result["configs"]["cleanup.policy"]
    assert (policy["value"], policy["source"], policy["type"]) == ("compact", DYNAMIC_TOPIC, 7)  # LIST
    assert policy["synonyms"][0] == ("cleanup.policy", "compact", DYNAMIC_TOPIC)
    assert policy["synonyms"][-1] == ("log.cleanup.policy", "delete", DEFAULT)
    assert result["configs"]["retention.ms"]["type"] == 5  # LONG


def test_describe_unknown_topic(broker):
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, "ghost")
    error = future_error(admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)[resource])
    assert_error(error, KafkaError.UNKNOWN_TOPIC_OR_PART)


def test_describe_this_broker(broker_factory):
    broker = broker_factory(num_partitions=3)

    configs = describe(broker.bootstrap, ResourceType.BROKER, str(NODE_ID))

    assert source_and_value(configs, "num.partitions") == (STATIC_BROKER, "3")
    assert configs["num.partitions"].is_read_only
    assert source_and_value(configs, "log.segment.bytes") == (DEFAULT, str(1 << 30))
    assert not configs["log.segment.bytes"].is_read_only
    assert configs["log.retention.ms"].value is None, "unset, with no default of its own"


def test_broker_resources_must_name_this_broker(broker):
    results = describe_configs_v4(broker.port, [(BROKER, "2", None), (BROKER, "one", None), (BROKER, "1", ["node.id"])])

    assert [r["error_code"] for r in results] == [INVALID_REQUEST, INVALID_REQUEST, 0]
    assert "received 2" in results[0]["error_message"]
    assert results[2]["configs"]["node.id"]["value"] == str(NODE_ID)
    responses = incremental_alter_v1(broker.port, [(BROKER, "2", [("log.retention.ms", SET, "1000")])])
    assert responses[0][0] == INVALID_REQUEST


# ---------------------------------------------------------------- alter


def test_incremental_alter_set_append_subtract_delete(broker):
    create_topic(broker.bootstrap, "evolving")
    bootstrap = broker.bootstrap

    ops = [("retention.ms", "60000", AlterConfigOpType.SET), ("cleanup.policy", "compact", AlterConfigOpType.APPEND)]
    assert incremental_alter(bootstrap, ResourceType.TOPIC, "evolving", ops) is None
    configs = describe_topic(bootstrap, "evolving")
    assert source_and_value(configs, "retention.ms") == (DYNAMIC_TOPIC, "60000")
    assert source_and_value(configs, "cleanup.policy") == (DYNAMIC_TOPIC, "delete,compact")

    ops = [("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT), ("retention.ms", None, AlterConfigOpType.DELETE)]
    assert incremental_alter(bootstrap, ResourceType.TOPIC, "evolving", ops) is None
    configs = describe_topic(bootstrap, "evolving")
    assert source_and_value(configs, "cleanup.policy") == (DYNAMIC_TOPIC, "compact")
    assert source_and_value(configs, "retention.ms") == (DEFAULT, str(168 * HOUR_MS))


def test_invalid_changes_are_refused(broker):
    create_topic(broker.bootstrap, "strict")
    bootstrap = broker.bootstrap

    def alter(key, value, op=AlterConfigOpType.SET):
        return incremental_alter(bootstrap, ResourceType.TOPIC, "strict", [(key, value, op)])

    assert_error(alter("retention.ms", "soon"), KafkaError.INVALID_CONFIG, mentions="retention.ms")
    assert_error(alter("cleanup.policy", "shred"), KafkaError.INVALID_CONFIG, mentions="cleanup.policy")
    assert_error(alter("no.such.config", "1"), KafkaError.INVALID_CONFIG, mentions="no.such.config")
    assert_error(alter("retention.ms", "5", AlterConfigOpType.APPEND), KafkaError.INVALID_CONFIG, mentions="LIST")
    error = incremental_alter(bootstrap, ResourceType.TOPIC, "ghost", [("retention.ms", "5", AlterConfigOpType.SET)])
    assert_error(error, KafkaError.UNKNOWN_TOPIC_OR_PART)
    # A refused change leaves nothing behind.
    assert describe_topic(bootstrap, "strict")["retention.ms"].source == DEFAULT


def test_broker_config_errors(broker):
    bootstrap = broker.bootstrap

    def alter(key, value):
        return incremental_alter(bootstrap, ResourceType.BROKER, str(NODE_ID), [(key, value, AlterConfigOpType.SET)])

    assert_error(alter("log.dirs", "/elsewhere"), KafkaError.INVALID_REQUEST, mentions="log.dirs")
    assert_error(alter("log.segment.bytes", "huge"), KafkaError.INVALID_CONFIG, mentions="log.segment.bytes")
    assert_error(alter("log.retention.whenever", "1"), KafkaError.INVALID_CONFIG, mentions="log.retention.whenever")
    assert describe(bootstrap, ResourceType.BROKER, str(NODE_ID))["log.segment.bytes"].source == DEFAULT


def test_replication_throttles_are_validated_and_described_as_kafka_does(broker):
    """KIP-73's configs: the rates are dynamic broker longs of at least 0
    (default Long.MAX_VALUE), the replica lists topic lists of `*` or
    `partition:broker` pairs (default empty); anything else is INVALID_CONFIG."""
    create_topic(broker.bootstrap, "throttled")
    bootstrap = broker.bootstrap

    def alter_topic(key, value, op=AlterConfigOpType.SET):
        return incremental_alter(bootstrap, ResourceType.TOPIC, "throttled", [(key, value, op)])

    def alter_broker(name, key, value):
        return incremental_alter(bootstrap, ResourceType.BROKER, name, [(key, value, AlterConfigOpType.SET)])

    for bad in ["0", "0:a", "*,0:1", "all", "-1:1"]:
        assert_error(alter_topic("leader.replication.throttled.replicas", bad), KafkaError.INVALID_CONFIG,
                     mentions="leader.replication.throttled.replicas")
    topic = describe_topic(bootstrap, "throttled")
    assert source_and_value(topic, "follower.replication.throttled.replicas") == (DEFAULT, "")
    assert alter_topic("follower.replication.throttled.replicas", "0:1,1:2") is None
    assert alter_topic("follower.replication.throttled.replicas", "2:3", AlterConfigOpType.APPEND) is None
    topic = describe_topic(bootstrap, "throttled")
    assert source_and_value(topic, "follower.replication.throttled.replicas") == (DYNAMIC_TOPIC, "0:1,1:2,2:3")
    assert alter_topic("leader.replication.throttled.replicas", "*") is None

    [(error_code, _)] = incremental_alter_v1(broker.port, [(BROKER, "", [("leader.replication.throttled.rate", SET, "-1")])])
    assert error_code == INVALID_CONFIG
    assert_error(alter_broker(str(NODE_ID), "follower.replication.throttled.rate", "fast"), KafkaError.INVALID_CONFIG,
                 mentions="follower.replication.throttled.rate")
    rate = describe(bootstrap, ResourceType.BROKER, str(NODE_ID))["leader.replication.throttled.rate"]
    assert (rate.source, rate.value, rate.is_read_only) == (DEFAULT, str(2**63 - 1), False)
    set_cluster_default(broker.port, "leader.replication.throttled.rate", "1048576")
    assert alter_broker(str(NODE_ID), "follower.replication.throttled.rate", "2048") is None
    described = describe(bootstrap, ResourceType.BROKER, str(NODE_ID))
    assert source_and_value(described, "leader.replication.throttled.rate") == (DYNAMIC_DEFAULT_BROKER, "1048576")
    assert source_and_value(described, "follower.replication.throttled.rate") == (DYNAMIC_BROKER, "2048")


def test_validate_only_changes_nothing(broker):
    create_topic(broker.bootstrap, "dry-run")
    bootstrap = broker.bootstrap
    ops = [("retention.ms", "1000", AlterConfigOpType.SET)]

    assert incremental_alter(bootstrap, ResourceType.TOPIC, "dry-run", ops, validate_only=True) is None
    assert describe_topic(bootstrap, "dry-run")["retention.ms"].source == DEFAULT

    bad = [("retention.ms", "-7", AlterConfigOpType.SET)]
    error = incremental_alter(bootstrap, ResourceType.TOPIC, "dry-run", bad, validate_only=True)
    assert_error(error, KafkaError.INVALID_CONFIG, mentions="retention.ms")

    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, "dry-run", set_config={"segment.ms": "1000"})
    futures = admin.alter_configs([resource], request_timeout=ADMIN_TIMEOUT_S, validate_only=True)
    assert future_error(futures[resource]) is None
    assert describe_topic(bootstrap, "dry-run")["segment.ms"].source == DEFAULT


def test_alter_configs_replaces_the_whole_set(broker):
    create_topic(broker.bootstrap, "replaced", config={"retention.ms": "1000", "segment.ms": "2000"})
    admin = admin_client(broker.bootstrap)

    resource = ConfigResource(ResourceType.TOPIC, "replaced", set_config={"cleanup.policy": "compact"})
    assert future_error(admin.alter_configs([resource], request_timeout=ADMIN_TIMEOUT_S)[resource]) is None

    configs = describe_topic(broker.bootstrap, "replaced")
    assert source_and_value(configs, "cleanup.policy") == (DYNAMIC_TOPIC, "compact")
    assert configs["retention.ms"].source == DEFAULT
    assert configs["segment.ms"].source == DEFAULT


def test_kafka_python_admin_describes_and_alters(broker):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create_topic(broker.bootstrap, "kp-configs")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
    try:
        topic = KConfigResource(ConfigResourceType.TOPIC, "kp-configs", configs={"retention.ms": "120000"})
        result = admin.alter_configs([topic])
        assert result["topic"]["kp-configs"] == "OK", result
        legacy = KConfigResource(ConfigResourceType.TOPIC, "kp-configs", configs={"segment.ms": "360000"})
        result = admin.alter_configs([legacy], incremental=False)
        assert result["topic"]["kp-configs"] == "OK", result

        described = admin.describe_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "kp-configs")], include_synonyms=True, config_filter="all"
        )["topic"]["kp-configs"]
        assert described["segment.ms"]["value"] == "360000"
        assert described["segment.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        # AlterConfigs without incremental kept what was set before: the client re-sent it.
        assert described["retention.ms"]["value"] == "120000"

        broker_configs = admin.describe_configs(
            [KConfigResource(ConfigResourceType.BROKER, str(NODE_ID))], config_filter="all"
        )["broker"][str(NODE_ID)]
        assert broker_configs["node.id"]["value"] == str(NODE_ID)
        assert broker_configs["node.id"]["read_only"]

        bad = KConfigResource(ConfigResourceType.TOPIC, "kp-configs", configs={"retention.ms": "never"})
        result = admin.alter_configs([bad], raise_on_unknown=False)
        assert "InvalidConfig" in result["topic"]["kp-configs"], result
    finally:
        admin.close()


# ---------------------------------------------------------------- dynamic broker configs


def test_cluster_default_shows_on_topics_without_override(broker):
    create_topic(broker.bootstrap, "inherits")
    create_topic(broker.bootstrap, "overrides", config={"retention.ms": "5000"})

    set_cluster_default(broker.port, "log.retention.ms", "123456")

    assert source_and_value(describe_topic(broker.bootstrap, "inherits"), "retention.ms") == (
        DYNAMIC_DEFAULT_BROKER,
        "123456",
    )
    assert source_and_value(describe_topic(broker.bootstrap, "overrides"), "retention.ms") == (DYNAMIC_TOPIC, "5000")
    [default] = describe_configs_v4(broker.port, [(BROKER, "", None)])
    # What was set, and the min.insync.replicas every new cluster holds
    # there while eligible leader replicas are on (KIP-966), as in Kafka.
    assert sorted(default["configs"]) == ["log.retention.ms", "min.insync.replicas"], default["configs"]
    assert default["configs"]["log.retention.ms"]["source"] == DYNAMIC_DEFAULT_BROKER
    this_broker = describe(broker.bootstrap, ResourceType.BROKER, str(NODE_ID))
    assert source_and_value(this_broker, "log.retention.ms") == (DYNAMIC_DEFAULT_BROKER, "123456")

    # A per-broker value ranks above the cluster default.
    ops = [("log.retention.ms", "654321", AlterConfigOpType.SET)]
    assert incremental_alter(broker.bootstrap, ResourceType.BROKER, str(NODE_ID), ops) is None
    assert source_and_value(describe_topic(broker.bootstrap, "inherits"), "retention.ms") == (DYNAMIC_BROKER, "654321")


def test_dynamic_min_insync_replicas_applies_to_produce(broker):
    create_topic(broker.bootstrap, "guarded")
    producer = confluent_producer(broker.bootstrap, acks="all", retries=0)
    assert produce_one_confluent(producer, "guarded", b"before").error is None

    set_cluster_default(broker.port, "min.insync.replicas", "2")
    outcome = produce_one_confluent(producer, "guarded", b"refused")
    assert outcome.error is not None and outcome.error.code() == KafkaError.NOT_ENOUGH_REPLICAS, outcome

    # Kafka keeps the cluster-wide value while eligible leader replicas are
    # on: it cannot be deleted, only set back.
    set_cluster_default(broker.port, "min.insync.replicas", "1")
    assert produce_one_confluent(producer, "guarded", b"after").error is None


def test_changes_survive_a_restart(broker):
    create_topic(broker.bootstrap, "durable")
    set_topic_configs(broker.bootstrap, "durable", cleanup_policy="compact", retention_ms="777")
    set_cluster_default(broker.port, "log.segment.bytes", "2097152")

    broker.restart()

    configs = describe_topic(broker.bootstrap, "durable")
    assert source_and_value(configs, "cleanup.policy") == (DYNAMIC_TOPIC, "compact")
    assert source_and_value(configs, "retention.ms") == (DYNAMIC_TOPIC, "777")
    assert source_and_value(configs, "segment.bytes") == (DYNAMIC_DEFAULT_BROKER, "2097152")


def test_segment_bytes_change_rolls_without_restart(broker):
    create_topic(broker.bootstrap, "rolling")
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 0})
    pid = broker.pid
    value = b"x" * 600
    for _ in range(4):
        assert produce_one_confluent(producer, "rolling", value).error is None
    assert len(segment_files(broker.data_dir, "rolling")) == 1

    set_topic_configs(broker.bootstrap, "rolling", segment_bytes="1024")
    for _ in range(4):
        assert produce_one_confluent(producer, "rolling", value).error is None

    # Each ~700-byte batch no longer fits beside another in a 1 KiB segment.
    assert len(segment_files(broker.data_dir, "rolling")) >= 4, segment_files(broker.data_dir, "rolling")
    assert broker.pid == pid, "the change applied without a restart"


def test_new_topics_take_the_dynamic_defaults(broker):
    set_cluster_default(broker.port, "log.segment.bytes", "1024")
    create_topic(broker.bootstrap, "born-small")
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 0})
    for _ in range(3):
        assert produce_one_confluent(producer, "born-small", b"y" * 600).error is None

    assert len(segment_files(broker.data_dir, "born-small")) >= 3, segment_files(broker.data_dir, "born-small")
    assert describe_topic(broker.bootstrap, "born-small")["segment.bytes"].source == DYNAMIC_DEFAULT_BROKER


def test_create_topics_reports_effective_configs(broker):
    set_cluster_default(broker.port, "log.retention.ms", "4242")

    error_code, reported = create_topic_v7(broker.port, "reported", {"segment.ms": "60000"})

    assert error_code == 0
    assert reported["segment.ms"] == ("60000", DYNAMIC_TOPIC)
    assert reported["retention.ms"] == ("4242", DYNAMIC_DEFAULT_BROKER)
    assert reported["max.message.bytes"] == ("1048588", DEFAULT)


@pytest.mark.parametrize("value", ["0", "-1", "lots", "1.5"])
def test_invalid_cluster_defaults_are_refused(broker, value):
    [(error_code, message)] = incremental_alter_v1(broker.port, [(BROKER, "", [("log.roll.ms", SET, value)])])
    assert error_code == INVALID_CONFIG and "log.roll.ms" in message, (error_code, message)
    [default] = describe_configs_v4(broker.port, [(BROKER, "", None)])
    assert "log.roll.ms" not in default["configs"], default["configs"]
