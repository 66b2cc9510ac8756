"""Transactions with confluent-kafka's transactional producer: commits seen by
read_committed consumers and aborts never; offsets committed atomically with
the output; fencing by a second producer of the same transactional.id;
transactions that outlive a kill -9 of the broker; and an exactly-once
consume-transform-produce loop whose client is killed halfway. Wire-level
checks cover the admin views and the error codes real clients rarely see.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

import wire
from harness import (
    OutRecord,
    admin_client,
    confluent_producer,
    create_topic,
    high_watermarks,
    produce_confluent,
    topic_partitions,
    wait_until,
)
from wire import NONE, Reader, Writer, call, list_transactions, request, response_reader, transactional_produce

SENTINEL = b"END"
TIMEOUT_S = 60

ADD_PARTITIONS_TO_TXN = 24
END_TXN = 26
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65

INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_ABORTABLE = 120


def txn_producer(bootstrap: str, transactional_id: str, **conf) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **conf})
    producer.init_transactions(TIMEOUT_S)
    return producer


def consumer(bootstrap: str, isolation: str, **conf) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "check.crcs": True,
            **conf,
        }
    )


def read_until_sentinels(bootstrap: str, partitions: list[tuple[str, int]], isolation: str) -> dict:
    """Every value of each (topic, partition) from the beginning up to its SENTINEL record.

    A committed sentinel written last proves every earlier record was either
    delivered or (read_committed) skipped as aborted.
    """
    reader = consumer(bootstrap, isolation)
    got: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in partitions}
    try:
        reader.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions])
        deadline = time.monotonic() + TIMEOUT_S
        while not all(values and values[-1] == SENTINEL for values in got.values()):
            assert time.monotonic() < deadline, f"no sentinel within {TIMEOUT_S}s: {got}"
            for msg in reader.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, f"consumer error: {msg.error()}"
                got[(msg.topic(), msg.partition())].append(msg.value())
    finally:
        reader.close()
    return {tp: values[:-1] for tp, values in got.items()}


def commit_sentinels(bootstrap: str, partitions: list[tuple[str, int]]) -> None:
    producer = txn_producer(bootstrap, f"sentinel-{time.monotonic_ns()}")
    producer.begin_transaction()
    for topic, partition in partitions:
        producer.produce(topic, value=SENTINEL, partition=partition)
    producer.commit_transaction(TIMEOUT_S)


PARTITIONS = [("orders", 0), ("orders", 1), ("audit", 0)]


def create_two_topics(bootstrap: str) -> None:
    create_topic(bootstrap, "orders", 2)
    create_topic(bootstrap, "audit", 1)


def test_read_committed_sees_commits_only_and_read_uncommitted_sees_all(broker):
    create_two_topics(broker.bootstrap)
    producer = txn_producer(broker.bootstrap, "orders-app")
    committed, everything = Counter(), Counter()
    expected = {tp: [] for tp in PARTITIONS}
    for txn in range(8):
        producer.begin_transaction()
        values = {tp: [f"t{txn}-{tp[0]}-{tp[1]}-{i}".encode() for i in range(5)] for tp in PARTITIONS}
        for (topic, partition), batch in values.items():
            for value in batch:
                producer.produce(topic, value=value, partition=partition)
        # Flushed first, so aborted records really are in the log.
        assert producer.flush(TIMEOUT_S) == 0
        if txn % 3 == 1:
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
            for tp, batch in values.items():
                expected[tp] += batch
                committed.update(batch)
        for batch in values.values():
            everything.update(batch)

    # An open transaction holds the last stable offset back for read_committed.
    producer.begin_transaction()
    for topic, partition in PARTITIONS:
        producer.produce(topic, value=b"pending", partition=partition)
    assert producer.flush(TIMEOUT_S) == 0
    stable = high_watermarks(broker.bootstrap, PARTITIONS, "read_committed")
    high = high_watermarks(broker.bootstrap, PARTITIONS, "read_uncommitted")
    for tp in PARTITIONS:
        assert stable[tp] < high[tp], f"{tp}: LSO {stable[tp]} should trail the high watermark {high[tp]}"
    producer.commit_transaction(TIMEOUT_S)
    for tp in PARTITIONS:
        expected[tp].append(b"pending")
    wait_until(
        lambda: high_watermarks(broker.bootstrap, PARTITIONS, "read_committed")
        == high_watermarks(broker.bootstrap, PARTITIONS, "read_uncommitted"),
        TIMEOUT_S,
        "the LSO to reach the high watermark after the commit",
    )

    commit_sentinels(broker.bootstrap, PARTITIONS)
    read_committed = read_until_sentinels(broker.bootstrap, PARTITIONS, "read_committed")
    assert read_committed == expected
    read_uncommitted = read_until_sentinels(broker.bootstrap, PARTITIONS, "read_uncommitted")
    seen = Counter(v for values in read_uncommitted.values() for v in values if v != b"pending")
    assert seen == everything, "read_uncommitted sees aborted records too, each once"
    assert set(seen) - set(committed), "some records were aborted, and read_uncommitted saw them"


def committed_offset(
    bootstrap: str, group: str, topic: str, partition: int, isolation: str = "read_committed"
) -> int:
    """The group's committed offset. read_committed asks for stable offsets
    (OffsetFetch require_stable): the broker answers UNSTABLE_OFFSET_COMMIT,
    and librdkafka retries, while a transaction holds an offset back."""
    checker = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "isolation.level": isolation}
    )
    try:
        return checker.committed([TopicPartition(topic, partition)], timeout=TIMEOUT_S)[0].offset
    finally:
        checker.close()


def stable_offset_error(port: int, group: str, topic: str, partition: int) -> int:
    """The error code of one partition in an OffsetFetch with require_stable, as read_committed consumers send it."""
    fetch = wire.offset_fetch_v8_request(7, [(group, [(topic, [partition])])], require_stable=True)
    response = wire.parse_offset_fetch_v8(call(port, fetch))
    return response.group(group).offsets()[(topic, partition)].error_code


def test_send_offsets_to_transaction_commits_offsets_with_the_output(broker):
    create_topic(broker.bootstrap, "in", 1)
    create_topic(broker.bootstrap, "out", 1)
    inputs = [OutRecord(None, f"in-{i}".encode(), (), int(time.time() * 1000)) for i in range(30)]
    produce_confluent(confluent_producer(broker.bootstrap), "in", inputs, partition=0)
    source = consumer(broker.bootstrap, "read_committed", **{"group.id": "app"})
    source.assign([TopicPartition("in", 0, OFFSET_BEGINNING)])
    producer = txn_producer(broker.bootstrap, "app-tx")

    def process(count: int, commit: bool) -> int:
        records = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count:
            assert time.monotonic() < deadline, "input not consumed"
            records += [m for m in source.consume(num_messages=count - len(records), timeout=0.5) if not m.error()]
        producer.begin_transaction()
        for m in records:
            producer.produce("out", value=m.value().upper(), partition=0)
        next_offset = records[-1].offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, next_offset)], source.consumer_group_metadata(), TIMEOUT_S
        )
        assert producer.flush(TIMEOUT_S) == 0
        before = committed_offset(broker.bootstrap, "app", "in", 0, "read_uncommitted")
        assert before != next_offset, "offsets of an open transaction must not be visible"
        assert stable_offset_error(broker.port, "app", "in", 0) == UNSTABLE_OFFSET_COMMIT
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
        return next_offset

    assert process(10, commit=True) == 10
    assert stable_offset_error(broker.port, "app", "in", 0) == NONE
    assert committed_offset(broker.bootstrap, "app", "in", 0) == 10
    assert process(10, commit=False) == 20
    assert committed_offset(broker.bootstrap, "app", "in", 0) == 10, "aborted offsets never apply"
    # The aborted input is processed again from the committed offset.
    source.seek(TopicPartition("in", 0, 10))
    assert process(20, commit=True) == 30
    assert committed_offset(broker.bootstrap, "app", "in", 0) == 30
    source.close()
    # Offsets survive a restart: replayed with their markers from __consumer_offsets.
    broker.restart()
    assert committed_offset(broker.bootstrap, "app", "in", 0) == 30
    commit_sentinels(broker.bootstrap, [("out", 0)])
    out = read_until_sentinels(broker.bootstrap, [("out", 0)], "read_committed")[("out", 0)]
    assert out == [f"IN-{i}".encode() for i in range(30)]


def test_offsets_of_a_subscribed_member_carry_its_generation(broker_factory):
    broker = broker_factory(**{"group.initial.rebalance.delay.ms": 0})
    create_topic(broker.bootstrap, "sub-in", 1)
    inputs = [OutRecord(None, b"x%d" % i, (), int(time.time() * 1000)) for i in range(5)]
    produce_confluent(confluent_producer(broker.bootstrap), "sub-in", inputs, partition=0)
    member = consumer(broker.bootstrap, "read_committed", **{"group.id": "subscribed"})
    member.subscribe(["sub-in"])
    records = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < 5:
        assert time.monotonic() < deadline, "the member got no records"
        records += [m for m in member.consume(num_messages=5, timeout=0.5) if not m.error()]
    producer = txn_producer(broker.bootstrap, "subscribed-tx")
    producer.begin_transaction()
    producer.produce("sub-in", value=b"derived", partition=0)
    metadata = member.consumer_group_metadata()
    producer.send_offsets_to_transaction([TopicPartition("sub-in", 0, 5)], metadata, TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)
    member.close()
    assert committed_offset(broker.bootstrap, "subscribed", "sub-in", 0) == 5


def test_a_second_producer_fences_the_first(broker):
    create_two_topics(broker.bootstrap)
    first = txn_producer(broker.bootstrap, "fenced-tx")
    first.begin_transaction()
    first.produce("orders", value=b"first-1", partition=0)
    assert first.flush(TIMEOUT_S) == 0
    # The second init aborts the first producer's open transaction.
    second = txn_producer(broker.bootstrap, "fenced-tx")
    first.produce("orders", value=b"first-2", partition=1)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
    second.begin_transaction()
    second.produce("orders", value=b"second", partition=0)
    second.produce("audit", value=b"second", partition=0)
    second.commit_transaction(TIMEOUT_S)
    commit_sentinels(broker.bootstrap, PARTITIONS)
    seen = read_until_sentinels(broker.bootstrap, PARTITIONS, "read_committed")
    assert seen == {("orders", 0): [b"second"], ("orders", 1): [], ("audit", 0): [b"second"]}
    uncommitted = read_until_sentinels(broker.bootstrap, PARTITIONS, "read_uncommitted")
    assert b"first-1" in uncommitted[("orders", 0)], "the fenced write was in the log, then aborted"


def test_a_transaction_outlives_a_broker_crash_and_commits_on_retry(broker):
    create_two_topics(broker.bootstrap)
    producer = txn_producer(broker.bootstrap, "crash-commit", **{"transaction.timeout.ms": 60_000})
    producer.begin_transaction()
    values = {tp: [f"{tp[0]}-{tp[1]}-{i}".encode() for i in range(10)] for tp in PARTITIONS}
    for (topic, partition), batch in values.items():
        for value in batch:
            producer.produce(topic, value=value, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0
    broker.kill9()
    broker.start()
    producer.commit_transaction(TIMEOUT_S)
    commit_sentinels(broker.bootstrap, PARTITIONS)
    assert read_until_sentinels(broker.bootstrap, PARTITIONS, "read_committed") == values


def test_an_abandoned_transaction_is_aborted_on_timeout_after_a_crash(broker_factory):
    broker = broker_factory(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    create_two_topics(broker.bootstrap)
    producer = txn_producer(broker.bootstrap, "crash-abandon", **{"transaction.timeout.ms": 3_000})
    producer.begin_transaction()
    for topic, partition in PARTITIONS:
        for i in range(10):
            producer.produce(topic, value=b"abandoned-%d" % i, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0
    broker.kill9()
    broker.start()
    assert all(
        stable < high
        for stable, high in zip(
            high_watermarks(broker.bootstrap, PARTITIONS, "read_committed").values(),
            high_watermarks(broker.bootstrap, PARTITIONS, "read_uncommitted").values(),
        )
    ), "the open transaction survives the restart"
    wait_until(
        lambda: high_watermarks(broker.bootstrap, PARTITIONS, "read_committed")
        == high_watermarks(broker.bootstrap, PARTITIONS, "read_uncommitted"),
        TIMEOUT_S,
        "the timed out transaction to be aborted",
    )
    # The coordinator bumped the epoch: the abandoned producer is fenced.
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT_S)
    commit_sentinels(broker.bootstrap, PARTITIONS)
    assert read_until_sentinels(broker.bootstrap, PARTITIONS, "read_committed") == {tp: [] for tp in PARTITIONS}
    state = describe_transaction(broker.port, "crash-abandon")
    assert (state.error_code, state.state) == (NONE, "CompleteAbort")


def test_exactly_once_consume_transform_produce_survives_a_killed_client(broker):
    partitions, per_partition = 3, 100_000 // 3 + 1
    create_topic(broker.bootstrap, "eos-in", partitions)
    create_topic(broker.bootstrap, "eos-out", partitions)
    records = [OutRecord(None, f"v{i:06d}".encode(), (), int(time.time() * 1000)) for i in range(per_partition * partitions)]
    fast = confluent_producer(broker.bootstrap, **{"linger.ms": 20, "batch.num.messages": 5000})
    for p in range(partitions):
        produce_confluent(fast, "eos-in", records[p::partitions], partition=p)
    ends = ",".join(str(per_partition) for _ in range(partitions))
    script = Path(__file__).with_name("eos_processor.py")
    command = [sys.executable, str(script), broker.bootstrap, "eos-in", "eos-out", "eos-group", "eos-tx", ends]
    log = broker.workdir / "processor.log"

    def run(*extra: str) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen([*command, *extra], stdout=out, stderr=subprocess.STDOUT)

    total = per_partition * partitions
    first = run(str(total // 2))
    try:
        wait_until(
            lambda: "stalled" in log.read_text() or first.poll() is not None,
            180,
            "half the input processed",
            interval_s=0.2,
        )
        assert first.poll() is None, log.read_text()[-3000:]
    finally:
        first.kill()
        first.wait(15)
    second = run()
    try:
        assert second.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(15)
    out_partitions = [("eos-out", p) for p in range(partitions)]
    commit_sentinels(broker.bootstrap, out_partitions)
    output = read_until_sentinels(broker.bootstrap, out_partitions, "read_committed")
    for p in range(partitions):
        want = [r.value.upper() for r in records[p::partitions]]
        got = output[("eos-out", p)]
        assert len(got) == len(want) and got == want, (
            f"partition {p}: {len(got)} records, {len(set(got))} distinct, want {len(want)}"
        )


def test_kafka_python_transactions_and_read_committed(broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    create_two_topics(broker.bootstrap)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kafka-python-tx")
    producer.init_transactions()
    for txn, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for topic, partition in PARTITIONS:
            producer.send(topic, value=f"kp-{txn}".encode(), partition=partition)
        producer.flush()
        (producer.commit_transaction if commit else producer.abort_transaction)()
    producer.close()
    commit_sentinels(broker.bootstrap, PARTITIONS)
    reader = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    partitions = [KTopicPartition(t, p) for t, p in PARTITIONS]
    reader.assign(partitions)
    reader.seek_to_beginning(*partitions)
    got = {tp: [] for tp in PARTITIONS}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not all(values and values[-1] == SENTINEL for values in got.values()):
            assert time.monotonic() < deadline, f"no sentinel within {TIMEOUT_S}s: {got}"
            for tp, records in reader.poll(timeout_ms=500).items():
                got[(tp.topic, tp.partition)] += [r.value for r in records]
    finally:
        reader.close()
    assert got == {tp: [b"kp-0", b"kp-2", SENTINEL] for tp in PARTITIONS}


# ---------------------------------------------------------------- wire level


class DescribedTxn:
    def __init__(self, error_code, transactional_id, state, timeout_ms, start_ms, producer_id, epoch, topics):
        self.error_code, self.transactional_id, self.state = error_code, transactional_id, state
        self.timeout_ms, self.start_ms, self.producer_id, self.epoch = timeout_ms, start_ms, producer_id, epoch
        self.topics = topics


def describe_transaction(port: int, transactional_id: str) -> DescribedTxn:
    w = Writer(True)
    w.length(1).string(transactional_id).tagged_fields()
    payload = call(port, request(DESCRIBE_TRANSACTIONS, 0, 5, w.build()))
    _, r = response_reader(payload, DESCRIBE_TRANSACTIONS, 0)
    r.int32()

    def topic(r: Reader):
        name = r.string()
        partitions = [r.int32() for _ in range(r.length())]
        r.tagged_fields()
        return name, partitions

    def state(r: Reader):
        described = DescribedTxn(
            r.int16(), r.string(), r.string(), r.int32(), r.int64(), r.int64(), r.int16(), r.array(topic)
        )
        r.tagged_fields()
        return described

    states = r.array(state)
    r.tagged_fields()
    r.assert_at_end("DescribeTransactions v0")
    return states[0]


def describe_producers(port: int, topic: str, partition: int):
    w = Writer(True)
    w.length(1).string(topic).length(1).int32(partition).tagged_fields().tagged_fields()
    payload = call(port, request(DESCRIBE_PRODUCERS, 0, 7, w.build()))
    _, r = response_reader(payload, DESCRIBE_PRODUCERS, 0)
    r.int32()

    def producer(r: Reader):
        state = (r.int64(), r.int32(), r.int32(), r.int64(), r.int32(), r.int64())
        r.tagged_fields()
        return state

    def partition_entry(r: Reader):
        entry = (r.int32(), r.int16(), r.nullable_string(), r.array(producer))
        r.tagged_fields()
        return entry

    def topic_entry(r: Reader):
        entry = (r.string(), r.array(partition_entry))
        r.tagged_fields()
        return entry

    topics = r.array(topic_entry)
    r.tagged_fields()
    r.assert_at_end("DescribeProducers")
    return topics[0][1][0]


def add_partitions_v4(port: int, transactions) -> list:
    """AddPartitionsToTxn v4: [(transactional id, producer id, epoch, verify only, topic, [partitions])]."""
    w = Writer(True)
    w.length(len(transactions))
    for tid, pid, epoch, verify, topic, partitions in transactions:
        w.string(tid).int64(pid).int16(epoch).boolean(verify)
        w.length(1).string(topic).length(len(partitions))
        for p in partitions:
            w.int32(p)
        w.tagged_fields().tagged_fields()
    w.tagged_fields()
    payload = call(port, request(ADD_PARTITIONS_TO_TXN, 4, 8, w.build()))
    _, r = response_reader(payload, ADD_PARTITIONS_TO_TXN, 4)
    r.int32()
    assert r.int16() == NONE

    def partition_result(r: Reader):
        result = (r.int32(), r.int16())
        r.tagged_fields()
        return result

    def topic_result(r: Reader):
        result = (r.string(), r.array(partition_result))
        r.tagged_fields()
        return result

    def txn_result(r: Reader):
        result = (r.string(), r.array(topic_result))
        r.tagged_fields()
        return result

    results = r.array(txn_result)
    r.tagged_fields()
    r.assert_at_end("AddPartitionsToTxn v4")
    return results


def end_txn(port: int, version: int, tid: str, pid: int, epoch: int, commit: bool) -> int:
    w = Writer(wire.is_flexible(END_TXN, version))
    w.string(tid).int64(pid).int16(epoch).boolean(commit).tagged_fields()
    payload = call(port, request(END_TXN, version, 9, w.build()))
    _, r = response_reader(payload, END_TXN, version)
    r.int32()
    return r.int16()


def test_admin_views_and_coordinator_errors(broker):
    create_two_topics(broker.bootstrap)
    assert wire.init_producer_id(broker.port, 4, transactional_id="tx", transaction_timeout_ms=900_001).error_code == (
        INVALID_TRANSACTION_TIMEOUT
    )
    # Finding the first transactional id's coordinator created Kafka's internal topic.
    wire.find_coordinator(broker.port, "wire-tx", key_type=1)
    init = wire.init_producer_id(broker.port, 4, transactional_id="wire-tx")
    pid, epoch = init.producer_id, init.producer_epoch
    assert len(topic_partitions(admin_client(broker.bootstrap), "__transaction_state")) == 50
    assert describe_transaction(broker.port, "wire-tx").state == "Empty"
    assert describe_transaction(broker.port, "nobody").error_code == TRANSACTIONAL_ID_NOT_FOUND
    assert end_txn(broker.port, 3, "wire-tx", pid, epoch, True) == INVALID_TXN_STATE, "nothing to commit"
    assert end_txn(broker.port, 3, "nobody", pid, epoch, True) == INVALID_PRODUCER_ID_MAPPING

    # v4, batched: one transaction added, another verified.
    results = add_partitions_v4(
        broker.port,
        [("wire-tx", pid, epoch, False, "orders", [1]), ("wire-tx", pid, epoch + 1, True, "orders", [0])],
    )
    assert results[0] == ("wire-tx", [("orders", [(1, NONE)])])
    assert results[1] == ("wire-tx", [("orders", [(0, PRODUCER_FENCED)])])
    verified = add_partitions_v4(broker.port, [("wire-tx", pid, epoch, True, "orders", [0, 1])])
    assert verified[0][1] == [("orders", [(0, TRANSACTION_ABORTABLE), (1, NONE)])]

    # A transactional batch for a partition outside the transaction is refused.
    batch = bytearray(wire.encode_record_batch([wire.BatchRecord(b"k", b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=0))
    batch[22] |= 0x10  # transactional attribute (low byte of the int16 at 21)
    import crc32c

    batch[17:21] = (crc32c.crc32c(bytes(batch[21:]))).to_bytes(4, "big")
    produced = transactional_produce(broker.port, "wire-tx", "orders", 0, bytes(batch))
    assert produced == INVALID_TXN_STATE
    assert transactional_produce(broker.port, "wire-tx", "orders", 1, bytes(batch)) == NONE

    state = describe_transaction(broker.port, "wire-tx")
    assert (state.state, state.producer_id, state.epoch, state.topics) == ("Ongoing", pid, epoch, [("orders", [1])])
    assert state.start_ms > 0 and state.timeout_ms == 60_000
    error, unknown, listed = list_transactions(broker.port, states=["Ongoing", "Bogus"], pattern="wire-.*")
    assert (error, unknown, listed) == (NONE, ["Bogus"], [("wire-tx", pid, "Ongoing")])
    assert list_transactions(broker.port, producer_ids=[pid + 1000])[2] == []
    index, error, _, producers = describe_producers(broker.port, "orders", 1)
    assert (index, error) == (1, NONE)
    assert [(p[0], p[1], p[5]) for p in producers] == [(pid, epoch, 0)], "one open transaction from offset 0"

    assert end_txn(broker.port, 1, "wire-tx", pid, epoch - 1 if epoch else 5, True) == wire.INVALID_PRODUCER_EPOCH
    assert end_txn(broker.port, 3, "wire-tx", pid, epoch + 1, True) == PRODUCER_FENCED
    assert end_txn(broker.port, 3, "wire-tx", pid, epoch, True) == NONE
    # Answered once PrepareCommit is written; the markers follow.
    assert end_txn(broker.port, 3, "wire-tx", pid, epoch, True) in (NONE, CONCURRENT_TRANSACTIONS)
    wait_until(
        lambda: describe_transaction(broker.port, "wire-tx").state == "CompleteCommit", 10, "the markers written"
    )
    assert end_txn(broker.port, 3, "wire-tx", pid, epoch, True) == NONE, "a retried commit succeeds"
    assert end_txn(broker.port, 3, "wire-tx", pid, epoch, False) == INVALID_TXN_STATE
    index, error, _, producers = describe_producers(broker.port, "orders", 1)
    assert [(p[0], p[5]) for p in producers] == [(pid, -1)], "the marker closed the transaction"
