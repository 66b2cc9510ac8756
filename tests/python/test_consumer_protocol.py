"""Consumer groups under the KIP-848 protocol (`group.protocol=consumer`),
driven by confluent-kafka: the broker assigns, members only heartbeat."""

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from harness import admin_client, confluent_producer, create_topic, wait_future, wait_until

PARTITIONS = 6
RECORDS = 1200


@pytest.fixture
def broker(broker_factory):
    """Heartbeats every 500 ms instead of Kafka's 5 s, so new assignments reach members sooner."""
    return broker_factory(group_consumer_heartbeat_interval_ms=500)


def consumer(bootstrap, group, **conf):
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **conf,
        }
    )


def produce(bootstrap, topic):
    producer = confluent_producer(bootstrap)
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(30) == 0


def poll(c):
    """One poll; an error event fails the test instead of passing for "no record"."""
    msg = c.poll(0.05)
    if msg is not None and msg.error():
        raise AssertionError(f"consumer error on {msg.topic()}[{msg.partition()}]: {msg.error()}")
    return msg


def poll_all(consumers, seen, deadline_s):
    """Polls every consumer until every record is seen, committing each one."""
    deadline = time.monotonic() + deadline_s
    while len(seen) < RECORDS and time.monotonic() < deadline:
        for c in consumers:
            msg = poll(c)
            if msg is not None:
                seen.add(int(msg.value()))
                c.commit(msg, asynchronous=False)


def polled_until_balanced(consumers, total, seen=None) -> bool:
    """Serves every member's callbacks once, then checks the balance. A
    record is added to `seen`; without it, no record may arrive."""
    for c in consumers:
        msg = poll(c)
        if msg is not None:
            assert seen is not None, f"unexpected record at offset {msg.offset()}"
            seen.add(int(msg.value()))
    return balanced(consumers, total)


def assignments(consumers):
    return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]


def balanced(consumers, total):
    """Every partition owned by exactly one member, shares differ by at most one."""
    owned = assignments(consumers)
    union = set().union(*owned)
    disjoint = sum(len(o) for o in owned) == len(union)
    sizes = [len(o) for o in owned]
    return len(union) == total and disjoint and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_broker_assigns_every_partition_once_and_all_records_arrive(broker, assignor):
    create_topic(broker.bootstrap, "kip848", partitions=PARTITIONS)
    produce(broker.bootstrap, "kip848")
    consumers = [consumer(broker.bootstrap, f"g-{assignor}", **{"group.remote.assignor": assignor}) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe(["kip848"])
        seen = set()
        poll_all(consumers, seen, 60)
        assert seen == set(range(RECORDS))
        wait_until(lambda: polled_until_balanced(consumers, PARTITIONS, seen), 30, "a balanced assignment")
        assert seen == set(range(RECORDS))
        committed = consumers[0].committed([TopicPartition("kip848", p) for p in range(PARTITIONS)], timeout=10)
        ends = {p: consumers[0].get_watermark_offsets(TopicPartition("kip848", p), timeout=10)[1] for p in range(PARTITIONS)}
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        for c in consumers:
            c.close()


def test_partitions_of_a_departed_member_move_to_the_others(broker):
    create_topic(broker.bootstrap, "handover", partitions=PARTITIONS)
    consumers = [consumer(broker.bootstrap, "handover-group") for _ in range(3)]
    for c in consumers:
        c.subscribe(["handover"])
    try:
        wait_until(lambda: polled_until_balanced(consumers, PARTITIONS), 60, "three members sharing")
        consumers.pop().close()
        wait_until(lambda: polled_until_balanced(consumers, PARTITIONS), 60, "two members sharing")
        assert all(len(a) == 3 for a in assignments(consumers))
    finally:
        for c in consumers:
            c.close()


def test_consumer_group_is_described_and_listed(broker):
    create_topic(broker.bootstrap, "described", partitions=2)
    c = consumer(broker.bootstrap, "described-group", **{"client.id": "describer"})
    c.subscribe(["described"])
    try:
        wait_until(lambda: polled_until_balanced([c], 2), 60, "the member owning both partitions")
        admin = admin_client(broker.bootstrap)
        listed = wait_future(admin.list_consumer_groups())
        assert "described-group" in {g.group_id for g in listed.valid}
        described = wait_future(admin.describe_consumer_groups(["described-group"])["described-group"])
        assert len(described.members) == 1
        member = described.members[0]
        assert member.client_id == "describer"
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    finally:
        c.close()
