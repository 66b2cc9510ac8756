"""Topic lifecycle through confluent-kafka's AdminClient and producer: the
error codes Kafka returns, auto-creation either way, and topics surviving a
restart with their partitions and topic id.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, TopicCollection

from harness import (
    ADMIN_TIMEOUT_S,
    admin_cli,
    admin_client,
    confluent_consumer,
    confluent_producer,
    consume_confluent,
    create_topic,
    future_error,
    new_topic,
    produce_one_confluent,
    topic_names,
    topic_partitions,
    wait_future,
    wait_until,
)

NODE_ID = 1


def assert_error(error: KafkaError | None, code: int) -> None:
    assert error is not None and error.code() == code, f"expected error {KafkaError(code).name()}, got {error}"


# The helpers below keep their AdminClient referenced until the future
# resolves: a collected client cancels its pending requests.


def describe_topic(bootstrap: str, name: str):
    admin = admin_client(bootstrap)
    return wait_future(admin.describe_topics(TopicCollection([name]), request_timeout=ADMIN_TIMEOUT_S)[name])


def create_error(bootstrap: str, topic, validate_only: bool = False) -> KafkaError | None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [topic], operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S, validate_only=validate_only
    )
    return future_error(futures[topic.topic])


def test_create_topic_with_partitions_and_config(broker):
    error = create_error(
        broker.bootstrap,
        new_topic("orders", partitions=6, config={"retention.ms": "3600000", "cleanup.policy": "delete"}),
    )
    assert error is None

    partitions = wait_until(
        lambda: topic_partitions(admin_client(broker.bootstrap), "orders"), ADMIN_TIMEOUT_S, "orders in metadata"
    )
    assert sorted(partitions) == list(range(6))
    for meta in partitions.values():
        assert meta.error is None
        assert (meta.leader, list(meta.replicas), list(meta.isrs)) == (NODE_ID, [NODE_ID], [NODE_ID])

    description = describe_topic(broker.bootstrap, "orders")
    topic_id = description.topic_id
    assert topic_id is not None
    assert (topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits()) != (0, 0)
    assert [p.id for p in description.partitions] == list(range(6))


def test_describe_cluster_shows_this_node(broker):
    admin = admin_client(broker.bootstrap)
    cluster = wait_future(admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_S))
    assert cluster.cluster_id
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(NODE_ID, "127.0.0.1", broker.port)]
    assert cluster.controller is not None


@pytest.mark.parametrize(
    "name",
    [".", "..", "x" * 250, "bad/name", "with space"],
    ids=["dot", "dotdot", "250-chars", "slash", "space"],
)
def test_invalid_topic_name_is_rejected(broker, name):
    error = create_error(broker.bootstrap, new_topic(name))
    assert_error(error, KafkaError.TOPIC_EXCEPTION)
    assert name not in topic_names(broker.bootstrap)


def test_longest_legal_topic_name_is_accepted(broker):
    """Kafka allows 249 characters, one fewer than the rejected 250."""
    name = "y" * 249
    assert create_error(broker.bootstrap, new_topic(name)) is None
    assert name in topic_names(broker.bootstrap)


def test_bad_config_value_is_rejected(broker):
    error = create_error(broker.bootstrap, new_topic("bad-config", config={"retention.ms": "not-a-number"}))
    assert_error(error, KafkaError.INVALID_CONFIG)
    assert "bad-config" not in topic_names(broker.bootstrap)


def test_a_hostile_partition_count_is_refused(broker):
    """librdkafka allows up to 100,000; the broker refuses more than 10,000 at once (2^31 - 1 in the
    unit tests) with POLICY_VIOLATION, as Kafka refuses an operation of more than 10,000 records."""
    from confluent_kafka.admin import NewPartitions

    error = create_error(broker.bootstrap, new_topic("huge", partitions=100_000))
    assert_error(error, KafkaError.POLICY_VIOLATION)
    create_topic(broker.bootstrap, "small")
    admin = admin_client(broker.bootstrap)
    assert_error(future_error(admin.create_partitions([NewPartitions("small", 100_000)])["small"]), KafkaError.POLICY_VIOLATION)
    assert len(topic_partitions(admin, "small")) == 1


def test_duplicate_create_fails_with_topic_already_exists(broker):
    create_topic(broker.bootstrap, "twice", partitions=2)
    error = create_error(broker.bootstrap, new_topic("twice", partitions=5))
    assert_error(error, KafkaError.TOPIC_ALREADY_EXISTS)
    assert len(topic_partitions(admin_client(broker.bootstrap), "twice")) == 2


def test_validate_only_creates_nothing(broker):
    assert create_error(broker.bootstrap, new_topic("dry-run", partitions=3), validate_only=True) is None
    invalid = create_error(broker.bootstrap, new_topic("bad/dry-run"), validate_only=True)
    assert_error(invalid, KafkaError.TOPIC_EXCEPTION)
    assert "dry-run" not in topic_names(broker.bootstrap)
    # The name is still free for a real create.
    assert create_error(broker.bootstrap, new_topic("dry-run", partitions=3)) is None


def test_unknown_topic_is_auto_created_with_num_partitions(broker_factory):
    broker = broker_factory(num_partitions=3)
    producer = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(producer, "appears-on-produce", b"hello")
    assert outcome.error is None, outcome
    assert len(topic_partitions(admin_client(broker.bootstrap), "appears-on-produce")) == 3


def test_unknown_topic_without_auto_creation(broker_factory):
    broker = broker_factory(auto_create_topics_enable=False)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        meta = consumer.list_topics("missing", timeout=ADMIN_TIMEOUT_S).topics["missing"]
    finally:
        consumer.close()
    assert_error(meta.error, KafkaError.UNKNOWN_TOPIC_OR_PART)

    producer = confluent_producer(
        broker.bootstrap, **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10_000}
    )
    outcome = produce_one_confluent(producer, "missing", b"nowhere to go")
    assert outcome.error is not None, outcome
    assert outcome.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), outcome
    assert "missing" not in topic_names(broker.bootstrap)


@pytest.mark.parametrize("auto_create", [True, False], ids=["auto-create", "no-auto-create"])
def test_deleted_topic_is_gone(broker_factory, auto_create):
    broker = broker_factory(auto_create_topics_enable=auto_create)
    create_topic(broker.bootstrap, "doomed", partitions=2)
    old_id = describe_topic(broker.bootstrap, "doomed").topic_id
    producer = confluent_producer(broker.bootstrap)
    assert produce_one_confluent(producer, "doomed", b"before", partition=1).error is None
    # A live producer refreshing its metadata could re-create the topic behind our back.
    producer.close()

    admin = admin_client(broker.bootstrap)
    futures = admin.delete_topics(["doomed"], operation_timeout=ADMIN_TIMEOUT_S)
    assert future_error(futures["doomed"]) is None
    wait_until(lambda: "doomed" not in topic_names(broker.bootstrap), ADMIN_TIMEOUT_S, "doomed to leave metadata")

    fresh = confluent_producer(
        broker.bootstrap, **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10_000}
    )
    outcome = produce_one_confluent(fresh, "doomed", b"after")
    if not auto_create:
        assert outcome.error is not None, outcome
        assert outcome.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), outcome
        assert "doomed" not in topic_names(broker.bootstrap)
        return
    # Re-created from scratch: default partition count, new id, none of the old records.
    assert outcome.error is None, outcome
    assert (outcome.partition, outcome.offset) == (0, 0)
    assert len(topic_partitions(admin_client(broker.bootstrap), "doomed")) == 1
    assert describe_topic(broker.bootstrap, "doomed").topic_id != old_id
    [record] = consume_confluent(broker.bootstrap, "doomed", {0: 1})[0]
    assert record.value == b"after"


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_topic_survives_restart(broker, how):
    create_topic(broker.bootstrap, "durable", partitions=5, config={"retention.ms": "86400000"})
    before = describe_topic(broker.bootstrap, "durable")
    producer = confluent_producer(broker.bootstrap, acks="all")
    assert produce_one_confluent(producer, "durable", b"kept", partition=4).error is None

    getattr(broker, how)()
    broker.start()

    after = describe_topic(broker.bootstrap, "durable")
    assert str(after.topic_id) == str(before.topic_id)
    assert [p.id for p in after.partitions] == list(range(5))
    [record] = consume_confluent(broker.bootstrap, "durable", {4: 1})[4]
    assert record.value == b"kept"


def test_partitions_grow_and_new_ones_take_records(broker):
    from confluent_kafka.admin import NewPartitions

    create_topic(broker.bootstrap, "growing", partitions=2)
    admin = admin_client(broker.bootstrap)

    dry = admin.create_partitions([NewPartitions("growing", 6)], validate_only=True)
    wait_future(dry["growing"])
    assert len(topic_partitions(admin, "growing")) == 2, "validate_only changes nothing"

    wait_future(admin.create_partitions([NewPartitions("growing", 4)])["growing"])
    wait_until(lambda: len(topic_partitions(admin, "growing")) == 4, ADMIN_TIMEOUT_S, "4 partitions in metadata")
    producer = confluent_producer(broker.bootstrap)
    outcome = produce_one_confluent(producer, "growing", b"in a new partition", partition=3)
    assert outcome.error is None and (outcome.partition, outcome.offset) == (3, 0)

    assert_error(future_error(admin.create_partitions([NewPartitions("growing", 3)])["growing"]), KafkaError.INVALID_PARTITIONS)
    assert_error(future_error(admin.create_partitions([NewPartitions("growing", 4)])["growing"]), KafkaError.INVALID_PARTITIONS)
    assert_error(
        future_error(admin.create_partitions([NewPartitions("growing", 5, replica_assignment=[[7]])])["growing"]),
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
    )
    assert_error(future_error(admin.create_partitions([NewPartitions("absent", 3)])["absent"]), KafkaError.UNKNOWN_TOPIC_OR_PART)

    broker.restart()
    assert len(topic_partitions(admin_client(broker.bootstrap), "growing")) == 4


# ---------------------------------------------------------------- internal topics and request bounds


def test_internal_topics_are_neither_deleted_nor_grown(broker):
    """Deleting __consumer_offsets would drop every group's offsets, and more
    partitions would move every group to another one: both are refused, by
    AdminClient and by `strom topics`, and the offsets stay."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewPartitions

    create_topic(broker.bootstrap, "orders")
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "billing"})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 7)], asynchronous=False)
    finally:
        consumer.close()
    producer = confluent_producer(broker.bootstrap, **{"transactional.id": "payments", "enable.idempotence": True})
    producer.init_transactions(ADMIN_TIMEOUT_S)
    assert {"__consumer_offsets", "__transaction_state"} <= topic_names(broker.bootstrap)

    admin = admin_client(broker.bootstrap)
    for internal in ("__consumer_offsets", "__transaction_state"):
        deleted = admin.delete_topics([internal], operation_timeout=ADMIN_TIMEOUT_S)[internal]
        assert_error(future_error(deleted), KafkaError.TOPIC_EXCEPTION)
        grown = admin.create_partitions([NewPartitions(internal, 60)])[internal]
        assert_error(future_error(grown), KafkaError.TOPIC_EXCEPTION)
        assert len(topic_partitions(admin, internal)) == 50

    done = admin_cli(broker, "topics", "--delete", "--topic", "__consumer_offsets")
    assert done.returncode != 0, done.stdout
    [line] = done.stderr.strip().splitlines()
    assert "internal topic '__consumer_offsets' cannot be deleted" in line, line

    reader = confluent_consumer(broker.bootstrap, **{"group.id": "billing"})
    try:
        [committed] = reader.committed([TopicPartition("orders", 0)], timeout=ADMIN_TIMEOUT_S)
    finally:
        reader.close()
    assert committed.offset == 7


def test_one_request_creates_at_most_the_configured_partitions(broker_factory):
    """The bound is on the request, not on each topic: three topics that each
    fit but together do not are all refused, and none is created."""
    from confluent_kafka.admin import NewPartitions

    broker = broker_factory({"controller.max.partitions.per.request": 100})
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics(
        [new_topic(f"part-{i}", partitions=40) for i in range(3)], operation_timeout=ADMIN_TIMEOUT_S
    )
    for future in futures.values():
        error = future_error(future)
        assert_error(error, KafkaError.POLICY_VIOLATION)
        assert "controller.max.partitions.per.request" in error.str(), error
    assert not {f"part-{i}" for i in range(3)} & topic_names(broker.bootstrap)
    assert not list(broker.data_dir.glob("part-*")), "no log of a refused topic"

    futures = admin.create_topics([new_topic(f"part-{i}", partitions=50) for i in range(2)])
    assert [future_error(f) for f in futures.values()] == [None, None], "exactly the bound fits"
    grown = admin.create_partitions([NewPartitions("part-0", 120), NewPartitions("part-1", 90)])
    for future in grown.values():
        assert_error(future_error(future), KafkaError.POLICY_VIOLATION)
    assert [len(topic_partitions(admin, f"part-{i}")) for i in range(2)] == [50, 50]


def test_three_topics_of_ten_thousand_partitions_are_refused_at_once(broker):
    """The request that used to exhaust the open files limit half way."""
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics([new_topic(f"huge-{i}", partitions=10_000) for i in range(3)])
    for future in futures.values():
        assert_error(future_error(future), KafkaError.POLICY_VIOLATION)
    assert not list(broker.data_dir.glob("huge-*"))
    broker.restart()
    assert not {f"huge-{i}" for i in range(3)} & topic_names(broker.bootstrap)
