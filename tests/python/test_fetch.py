"""Fetch as clients drive it, and the wire-level corners of Produce and
DeleteTopics that only a hand-built frame can reach.

Incremental fetch sessions (KIP-227) are checked byte by byte and through
kafka-python, which opens one by default; long polls must wake on an append
and time out empty; the size limits follow Kafka's whole-first-batch rule;
topic ids work wherever Kafka 4.1 accepts them (Fetch v13+, Produce v13,
DeleteTopics v6); a Produce with acks=0 gets no response at all.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import uuid

import pytest

from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_client,
    confluent_producer,
    consume_confluent,
    create_topic,
    kafka_python_consumer,
    now_ms,
    poll_kafka_python,
    produce_confluent,
    topic_names,
    wait_future,
    wait_until,
    watermarks_confluent,
)
from wire import (
    CORRUPT_MESSAGE,
    FETCH_SESSION_ID_NOT_FOUND,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    NO_SESSION,
    NONE,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    BatchRecord,
    Connection,
    FetchPartition,
    Reaction,
    api_versions_request,
    call,
    delete_topics_v6_request,
    encode_record_batch,
    exchange,
    fetch,
    fetch_request,
    metadata_request,
    parse_api_versions,
    parse_delete_topics_v6,
    parse_fetch_response,
    parse_metadata,
    produce,
    produce_request,
    topic_id_of,
)

NODE_ID = 1
# Fetch v12: the first flexible version, and the highest kafka-python sends.
SESSION_VERSION = 12
# Long enough that a fetch which only returns at max_wait_ms is told apart from one woken by an append.
LONG_POLL_MAX_WAIT_MS = 20_000
LONG_POLL_WAKE_MAX_S = 10.0


def produce_values(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> list[int]:
    """Produce `values` to one partition with confluent-kafka in a single flush; their offsets."""
    producer = confluent_producer(bootstrap, **{"linger.ms": 100, "acks": "all"})
    try:
        records = [OutRecord(None, value, (), now_ms()) for value in values]
        return [d.offset for d in produce_confluent(producer, topic, records, partition=partition)]
    finally:
        producer.close()


def values_of(partition) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a fetched partition."""
    return [(r.offset, r.value) for batch in partition.batches for r in batch.records]


# ---------------------------------------------------------------- incremental fetch sessions


def test_incremental_fetch_session_over_the_wire(broker):
    topic = "sessions"
    create_topic(broker.bootstrap, topic, partitions=2)
    for p in (0, 1):
        assert produce_values(broker.bootstrap, topic, p, [b"old-%d-0" % p, b"old-%d-1" % p]) == [0, 1]

    # Epoch 0 opens a session; the full response names every partition, here both at their end.
    full = fetch(
        broker.port,
        SESSION_VERSION,
        [(topic, [FetchPartition(0, 2), FetchPartition(1, 2)])],
        session_id=NO_SESSION,
        session_epoch=INITIAL_EPOCH,
    )
    assert full.error_code == NONE
    session = full.session_id
    assert session != NO_SESSION, "epoch 0 did not open a fetch session"
    parts = full.partitions()
    assert sorted(parts) == [(topic, 0), (topic, 1)]
    for p in parts.values():
        assert (p.error_code, p.high_watermark, p.log_start_offset, p.records) == (NONE, 2, 0, b""), p

    # Epoch 1 names nothing: the session still reads both, but only the one with news comes back.
    assert produce_values(broker.bootstrap, topic, 0, [b"new-0-2", b"new-0-3", b"new-0-4"]) == [2, 3, 4]
    incremental = fetch(
        broker.port, SESSION_VERSION, [], session_id=session, session_epoch=1, max_wait_ms=5_000, min_bytes=1
    )
    assert (incremental.error_code, incremental.session_id) == (NONE, session)
    parts = incremental.partitions()
    assert list(parts) == [(topic, 0)], f"expected only partition 0 (the one with news), got {sorted(parts)}"
    news = parts[(topic, 0)]
    assert (news.error_code, news.high_watermark) == (NONE, 5)
    assert values_of(news) == [(2, b"new-0-2"), (3, b"new-0-3"), (4, b"new-0-4")]

    # Epoch 1 again is stale; an unknown session id is not found. Neither carries partitions.
    stale = fetch(broker.port, SESSION_VERSION, [], session_id=session, session_epoch=1)
    assert stale.error_code == INVALID_FETCH_SESSION_EPOCH, stale
    assert stale.topics == []
    unknown_session = session % 0x7FFFFFFF + 1
    unknown = fetch(broker.port, SESSION_VERSION, [], session_id=unknown_session, session_epoch=1)
    assert unknown.error_code == FETCH_SESSION_ID_NOT_FOUND, unknown
    assert unknown.topics == []

    # The session survived the stale request. Epoch 2 moves partition 0 to its end and
    # forgets partition 1: nothing has news.
    forget = fetch(
        broker.port,
        SESSION_VERSION,
        [(topic, [FetchPartition(0, 5)])],
        session_id=session,
        session_epoch=2,
        forgotten=[(topic, [1])],
    )
    assert (forget.error_code, forget.session_id) == (NONE, session), forget
    assert forget.partitions() == {}

    # Both partitions get a record, but only partition 0 is still in the session.
    assert produce_values(broker.bootstrap, topic, 0, [b"new-0-5"]) == [5]
    assert produce_values(broker.bootstrap, topic, 1, [b"new-1-2"]) == [2]
    after = fetch(
        broker.port, SESSION_VERSION, [], session_id=session, session_epoch=3, max_wait_ms=5_000, min_bytes=1
    )
    assert after.error_code == NONE, after
    parts = after.partitions()
    assert list(parts) == [(topic, 0)], f"forgotten partition 1 still fetched: {sorted(parts)}"
    assert values_of(parts[(topic, 0)]) == [(5, b"new-0-5")]

    # Named again, partition 1 rejoins the session.
    rejoin = fetch(broker.port, SESSION_VERSION, [(topic, [FetchPartition(1, 2)])], session_id=session, session_epoch=4)
    assert rejoin.error_code == NONE, rejoin
    assert values_of(rejoin.partitions()[(topic, 1)]) == [(2, b"new-1-2")]


def test_session_errors_carry_no_session_id(broker):
    """Kafka answers a fetch-session error with session id 0 (INVALID_SESSION_ID,
    SessionErrorContext in FetchSession), not with the id the client sent."""
    create_topic(broker.bootstrap, "session-errors")
    opened = fetch(
        broker.port,
        SESSION_VERSION,
        [("session-errors", [FetchPartition(0, 0)])],
        session_id=NO_SESSION,
        session_epoch=INITIAL_EPOCH,
    )
    assert opened.error_code == NONE and opened.session_id != NO_SESSION
    session = opened.session_id
    assert fetch(broker.port, SESSION_VERSION, [], session_id=session, session_epoch=1).error_code == NONE

    stale = fetch(broker.port, SESSION_VERSION, [], session_id=session, session_epoch=1)
    unknown = fetch(broker.port, SESSION_VERSION, [], session_id=session % 0x7FFFFFFF + 1, session_epoch=1)
    assert (stale.error_code, stale.session_id) == (INVALID_FETCH_SESSION_EPOCH, NO_SESSION)
    assert (unknown.error_code, unknown.session_id) == (FETCH_SESSION_ID_NOT_FOUND, NO_SESSION)


@pytest.mark.parametrize("version", [13, 15, 18])
def test_fetch_by_topic_id(broker, version):
    """v13 names topics by id; v15 drops the replica id from the request body."""
    create_topic(broker.bootstrap, "by-id")
    values = [b"by-id-%d" % i for i in range(5)]
    assert produce_values(broker.bootstrap, "by-id", 0, values) == list(range(5))
    topic_id, unknown_id = topic_id_of(broker.port, "by-id"), uuid.uuid4()

    response = fetch(
        broker.port, version, [(topic_id, [FetchPartition(0, 0)]), (unknown_id, [FetchPartition(0, 0)])]
    )
    assert (response.error_code, response.session_id) == (NONE, NO_SESSION)
    parts = response.partitions()
    assert set(parts) == {(topic_id, 0), (unknown_id, 0)}
    known = parts[(topic_id, 0)]
    assert (known.error_code, known.high_watermark, known.log_start_offset) == (NONE, 5, 0)
    assert values_of(known) == list(enumerate(values))
    missing = parts[(unknown_id, 0)]
    assert missing.error_code == UNKNOWN_TOPIC_ID, missing
    assert (missing.high_watermark, missing.records or b"") == (-1, b"")


def test_every_fetch_version_by_name(broker):
    """Versions 4-12 name topics; v5 adds the log start offset, v7 sessions, v11 the
    preferred read replica, v12 the flexible encoding. A partition the topic lacks and
    a topic that does not exist are UNKNOWN_TOPIC_OR_PARTITION."""
    create_topic(broker.bootstrap, "versions")
    values = [b"v-%d" % i for i in range(3)]
    assert produce_values(broker.bootstrap, "versions", 0, values) == [0, 1, 2]
    for version in range(4, 13):
        response = fetch(
            broker.port,
            version,
            [("versions", [FetchPartition(0, 1), FetchPartition(7, 0)]), ("no-such-topic", [FetchPartition(0, 0)])],
        )
        assert response.error_code == NONE, f"v{version}: {response}"
        parts = response.partitions()
        part = parts[("versions", 0)]
        assert (part.error_code, part.high_watermark) == (NONE, 3), f"v{version}: {part}"
        assert part.log_start_offset == (0 if version >= 5 else -1), f"v{version}: {part}"
        assert values_of(part) == [(0, b"v-0"), (1, b"v-1"), (2, b"v-2")], f"v{version}"
        for missing in (("versions", 7), ("no-such-topic", 0)):
            assert parts[missing].error_code == UNKNOWN_TOPIC_OR_PARTITION, f"v{version} {missing}: {parts[missing]}"
            assert parts[missing].high_watermark == -1, f"v{version} {missing}: {parts[missing]}"
    assert "no-such-topic" not in topic_names(broker.bootstrap), "a fetch must not auto-create topics"


def test_incremental_session_by_topic_id(broker):
    """A v13 session keys its partitions by topic id, also when forgetting one."""
    create_topic(broker.bootstrap, "session-by-id", partitions=2)
    topic_id = topic_id_of(broker.port, "session-by-id")
    opened = fetch(
        broker.port,
        13,
        [(topic_id, [FetchPartition(0, 0), FetchPartition(1, 0)])],
        session_id=NO_SESSION,
        session_epoch=INITIAL_EPOCH,
    )
    assert opened.error_code == NONE and opened.session_id != NO_SESSION, opened
    assert set(opened.partitions()) == {(topic_id, 0), (topic_id, 1)}
    session = opened.session_id

    forget = fetch(broker.port, 13, [], session_id=session, session_epoch=1, forgotten=[(topic_id, [1])])
    assert (forget.error_code, forget.partitions()) == (NONE, {}), forget
    for p in (0, 1):
        assert produce_values(broker.bootstrap, "session-by-id", p, [b"id-%d" % p]) == [0]
    news = fetch(broker.port, 13, [], session_id=session, session_epoch=2, max_wait_ms=5_000, min_bytes=1)
    assert news.error_code == NONE, news
    parts = news.partitions()
    assert list(parts) == [(topic_id, 0)], f"expected only partition 0, got {sorted(parts, key=str)}"
    assert values_of(parts[(topic_id, 0)]) == [(0, b"id-0")]


def test_a_capped_incremental_fetch_reads_the_partitions_left_out_first(broker_factory):
    """Kafka moves the partitions that returned records to the end of the session's order
    (FetchSession's PartitionIterator), so when fetch.max.bytes cuts every response to one
    batch, busy partitions take turns instead of the first one starving the rest."""
    broker = broker_factory({"fetch.max.bytes": 1024})
    topic, partitions, batches = "rotation", 4, 3
    create_topic(broker.bootstrap, topic, partitions=partitions)
    for p in range(partitions):
        for b in range(batches):
            # Larger than fetch.max.bytes: a response carries this one batch and nothing else.
            batch = encode_record_batch([BatchRecord(None, b"p%d-b%d-" % (p, b) + b"z" * 1500, (), now_ms())])
            [(_, [part])] = produce(broker.port, 9, [(topic, [(p, batch)])]).topics
            assert (part.error_code, part.base_offset) == (NONE, b), part

    offsets = {p: 0 for p in range(partitions)}
    served = []

    def take(response) -> list[FetchPartition]:
        """Advances past what `response` returned; the partitions whose offsets moved."""
        assert response.error_code == NONE, response
        moved = []
        for (_, p), data in response.partitions().items():
            if data.records:
                offsets[p] = values_of(data)[-1][0] + 1
                moved.append(FetchPartition(p, offsets[p]))
        assert len(moved) == 1, f"expected one batch per capped response, got partitions {moved}"
        served.append(moved[0].partition)
        return moved

    opening = [FetchPartition(p, 0) for p in range(partitions)]
    full = fetch(broker.port, SESSION_VERSION, [(topic, opening)], session_epoch=INITIAL_EPOCH)
    session, changed = full.session_id, take(full)
    assert session != NO_SESSION
    # The full fetch serves the client's first partition; each incremental one must then
    # reach a partition that has not been served yet, until all have been.
    for epoch in range(1, partitions + 1):
        response = fetch(broker.port, SESSION_VERSION, [(topic, changed)], session_id=session, session_epoch=epoch)
        changed = take(response)
    assert set(served) == set(range(partitions)), f"partitions served in turn: {served}"


def test_kafka_python_takes_turns_on_busy_partitions_under_a_small_fetch_max_bytes(broker_factory):
    """Through kafka-python's incremental session: with every response cut to one batch, each
    of four busy partitions delivers within the first few batches, not after the first
    partition is drained."""
    from kafka import TopicPartition as KTopicPartition

    broker = broker_factory({"fetch.max.bytes": 1024})
    topic, partitions, batches = "kp-rotation", 4, 20
    create_topic(broker.bootstrap, topic, partitions=partitions)
    for p in range(partitions):
        for b in range(batches):
            batch = encode_record_batch([BatchRecord(None, b"p%d-b%02d-" % (p, b) + b"r" * 1500, (), now_ms())])
            [(_, [part])] = produce(broker.port, 9, [(topic, [(p, batch)])]).topics
            assert (part.error_code, part.base_offset) == (NONE, b), part

    consumer = kafka_python_consumer(broker.bootstrap, fetch_max_bytes=1024, fetch_max_wait_ms=100)
    try:
        assigned = [KTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        order: list[int] = []  # the partition of each record, in delivery order
        deadline = time.monotonic() + 60
        while len(set(order)) < partitions and len(order) < partitions * batches:
            assert time.monotonic() < deadline, f"records delivered per partition so far: {order}"
            for tp, records in consumer.poll(timeout_ms=500).items():
                order.extend(tp.partition for _ in records)
    finally:
        consumer.close(timeout_ms=5_000)
    assert set(order) == set(range(partitions)), f"partitions in delivery order: {order}"
    # One batch per response, rotated: every partition within the first two rounds.
    first_seen = max(order.index(p) for p in range(partitions))
    assert first_seen < 2 * partitions, f"the last partition first delivered as record {first_seen}: {order}"


def delete_topic(bootstrap: str, name: str) -> None:
    admin = admin_client(bootstrap)
    wait_future(admin.delete_topics([name], operation_timeout=ADMIN_TIMEOUT_S)[name])
    wait_until(lambda: name not in topic_names(bootstrap), ADMIN_TIMEOUT_S, f"{name} to leave metadata")


def test_a_session_by_topic_id_forgets_a_deleted_topics_partition(broker):
    """A v13 session holds a deleted topic's partition, answered UNKNOWN_TOPIC_ID, until the
    client forgets it; forgetting must work although the broker no longer hosts the topic."""
    for name in ("stays", "goes"):
        create_topic(broker.bootstrap, name)
    stays, goes = topic_id_of(broker.port, "stays"), topic_id_of(broker.port, "goes")
    opened = fetch(
        broker.port,
        13,
        [(stays, [FetchPartition(0, 0)]), (goes, [FetchPartition(0, 0)])],
        session_epoch=INITIAL_EPOCH,
    )
    session = opened.session_id
    assert opened.error_code == NONE and session != NO_SESSION, opened

    delete_topic(broker.bootstrap, "goes")
    gone = fetch(broker.port, 13, [], session_id=session, session_epoch=1)
    assert gone.error_code == NONE, gone
    assert {key: p.error_code for key, p in gone.partitions().items()} == {(goes, 0): UNKNOWN_TOPIC_ID}

    forget = fetch(broker.port, 13, [], session_id=session, session_epoch=2, forgotten=[(goes, [0])])
    assert (forget.error_code, forget.session_id, forget.partitions()) == (NONE, session, {}), forget
    # The session reads "stays" alone now.
    assert produce_values(broker.bootstrap, "stays", 0, [b"still here"]) == [0]
    after = fetch(broker.port, 13, [], session_id=session, session_epoch=3, max_wait_ms=5_000, min_bytes=1)
    assert after.error_code == NONE, after
    assert list(after.partitions()) == [(stays, 0)], after
    assert values_of(after.partitions()[(stays, 0)]) == [(0, b"still here")]


def test_a_partition_is_answered_once_however_it_is_named(broker):
    """A request naming an unknown partition twice, or naming again a deleted topic's
    partition its session still holds, gets one answer per partition, as Kafka reads a
    request's partitions into a map."""
    create_topic(broker.bootstrap, "short-lived")
    twice = fetch(broker.port, SESSION_VERSION, [("nowhere", [FetchPartition(0, 0), FetchPartition(0, 5)])])
    assert {key: p.error_code for key, p in twice.partitions().items()} == {("nowhere", 0): UNKNOWN_TOPIC_OR_PARTITION}

    opened = fetch(
        broker.port, SESSION_VERSION, [("short-lived", [FetchPartition(0, 0)])], session_epoch=INITIAL_EPOCH
    )
    session = opened.session_id
    assert opened.error_code == NONE and session != NO_SESSION, opened
    delete_topic(broker.bootstrap, "short-lived")
    again = fetch(
        broker.port, SESSION_VERSION, [("short-lived", [FetchPartition(0, 3)])], session_id=session, session_epoch=1
    )
    assert again.error_code == NONE, again
    assert {key: p.error_code for key, p in again.partitions().items()} == {
        ("short-lived", 0): UNKNOWN_TOPIC_OR_PARTITION
    }


def test_a_session_by_name_follows_a_topic_created_again(broker):
    """Before v13 Kafka keys a session's partitions by name, so once a deleted topic exists
    again under its name the session reads the new one, and naming the partition again
    updates it rather than adding a second entry."""
    for name in ("steady", "reborn"):
        create_topic(broker.bootstrap, name)
    assert produce_values(broker.bootstrap, "reborn", 0, [b"old-0", b"old-1"]) == [0, 1]
    opened = fetch(
        broker.port,
        SESSION_VERSION,
        [("steady", [FetchPartition(0, 0)]), ("reborn", [FetchPartition(0, 2)])],
        session_epoch=INITIAL_EPOCH,
    )
    session = opened.session_id
    assert opened.error_code == NONE and session != NO_SESSION, opened

    delete_topic(broker.bootstrap, "reborn")
    gone = fetch(broker.port, SESSION_VERSION, [], session_id=session, session_epoch=1)
    assert {key: p.error_code for key, p in gone.partitions().items()} == {("reborn", 0): UNKNOWN_TOPIC_OR_PARTITION}

    create_topic(broker.bootstrap, "reborn")
    assert produce_values(broker.bootstrap, "reborn", 0, [b"new-0"]) == [0]
    # The client starts the partition over from its beginning.
    again = fetch(
        broker.port, SESSION_VERSION, [("reborn", [FetchPartition(0, 0)])], session_id=session, session_epoch=2
    )
    assert again.error_code == NONE, again
    parts = again.partitions()
    assert list(parts) == [("reborn", 0)], again
    assert (parts[("reborn", 0)].error_code, values_of(parts[("reborn", 0)])) == (NONE, [(0, b"new-0")])


class FetcherLog(logging.Handler):
    """Collects kafka-python's fetcher log lines."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def count(self, fragment: str) -> int:
        return sum(fragment in line for line in self.lines)


def test_kafka_python_consumes_through_an_incremental_session(broker):
    """kafka-python opens a fetch session by default. Small fetch sizes force many
    fetches; one partition runs dry early, so most incremental responses omit it,
    and records appended to it later must still arrive through the same session."""
    from kafka import TopicPartition as KTopicPartition

    topic = "kp-session"
    create_topic(broker.bootstrap, topic, partitions=2)
    counts = {0: 300, 1: 2_500}
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 5, "batch.num.messages": 50, "acks": "all"})
    produced = {}
    for p, count in counts.items():
        values = [b"p%d-%06d-" % (p, i) + b"x" * 48 for i in range(count)]
        records = [OutRecord(None, v, (), now_ms()) for v in values]
        assert [d.offset for d in produce_confluent(producer, topic, records, partition=p)] == list(range(count))
        produced[p] = list(enumerate(values))

    log = FetcherLog()
    fetcher_logger = logging.getLogger("kafka.consumer.fetcher")
    old_level = fetcher_logger.level
    fetcher_logger.setLevel(logging.DEBUG)
    fetcher_logger.addHandler(log)
    consumer = kafka_python_consumer(
        broker.bootstrap, max_partition_fetch_bytes=4_096, fetch_max_bytes=8_192, fetch_max_wait_ms=200
    )
    try:
        partitions = [KTopicPartition(topic, p) for p in counts]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got: dict[int, list] = {p: [] for p in counts}
        poll_kafka_python(consumer, got, counts, timeout_s=120)
        for p in counts:
            received = [(r.offset, r.value) for r in got[p]]
            assert received == produced[p], f"partition {p}: records differ from what was produced"

        # Partition 0 has been idle for most of the run; new records must reach the open session.
        extra = [b"late-%d" % i for i in range(20)]
        assert produce_values(broker.bootstrap, topic, 0, extra) == list(range(counts[0], counts[0] + 20))
        poll_kafka_python(consumer, got, {0: counts[0] + 20, 1: counts[1]}, timeout_s=60)
        assert [(r.offset, r.value) for r in got[0][counts[0] :]] == list(enumerate(extra, start=counts[0]))
        assert len(got[1]) == counts[1]
    finally:
        consumer.close(timeout_ms=5_000)
        fetcher_logger.removeHandler(log)
        fetcher_logger.setLevel(old_level)
        producer.close()

    problems = [
        line
        for line in log.lines
        if "unable to process the fetch request" in line
        or "invalid full fetch response" in line
        or "invalid incremental fetch response" in line
        or "closing session" in line
    ]
    assert problems == [], f"kafka-python reported fetch session trouble: {problems[:5]}"
    assert log.count("created a new incremental fetch session") == 1, "kafka-python should open exactly one session"
    incremental = log.count("sent an incremental fetch response for session")
    # At most one batch (<= 50 records) per partition per fetch: well over 50 fetches.
    assert incremental >= 40, f"only {incremental} incremental fetch responses"
    # Once partition 0 ran dry, responses carried partition 1 alone, partition 0 implied.
    omitted = log.count("with 1 response partitions (1 implied)")
    assert omitted >= 20, f"only {omitted} incremental responses left the idle partition out"


# ---------------------------------------------------------------- long poll


class ParkedFetch:
    """A Fetch sent on its own connection and awaited in a thread, so the test can act while
    the broker holds it. Construction returns once the broker has read the request (nothing
    left in either socket queue) and the fetch is still unanswered."""

    def __init__(self, port: int, request: bytes, timeout_s: float):
        self.conn = Connection(port, timeout_s)
        self.outcome: dict = {}
        self.sent_at = time.monotonic()
        self.conn.send(request)
        self.thread = threading.Thread(target=self._await_response, args=(timeout_s,), daemon=True)
        self.thread.start()
        wait_until(lambda: self.conn.unread_by_peer() == 0, 10, "the broker to read the fetch request")
        assert not self.outcome, f"the fetch returned before any data arrived: {self.outcome}"

    def _await_response(self, timeout_s: float) -> None:
        try:
            self.outcome["payload"] = self.conn.receive(timeout_s)
            self.outcome["at"] = time.monotonic()
        except BaseException as exc:  # reported by result()
            self.outcome["error"] = exc

    def result(self, timeout_s: float) -> tuple[bytes, float]:
        """The response frame and how long after sending it arrived."""
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"the fetch did not return within {timeout_s}s"
        assert "error" not in self.outcome, f"the fetch failed: {self.outcome['error']!r}"
        return self.outcome["payload"], self.outcome["at"] - self.sent_at

    def close(self) -> None:
        self.conn.close()
        self.thread.join(5)


def test_long_poll_returns_as_soon_as_a_record_arrives(broker):
    """Parked on two partitions at their ends, woken by an append to the second."""
    create_topic(broker.bootstrap, "poll", partitions=2)
    assert produce_values(broker.bootstrap, "poll", 0, [b"a", b"b", b"c"]) == [0, 1, 2]
    request = fetch_request(
        SESSION_VERSION,
        31,
        [("poll", [FetchPartition(0, 3), FetchPartition(1, 0)])],
        max_wait_ms=LONG_POLL_MAX_WAIT_MS,
        min_bytes=1,
    )
    parked = ParkedFetch(broker.port, request, timeout_s=LONG_POLL_MAX_WAIT_MS / 1000 + 15)
    try:
        assert produce_values(broker.bootstrap, "poll", 1, [b"wake up"]) == [0]
        payload, elapsed = parked.result(LONG_POLL_MAX_WAIT_MS / 1000 + 20)
    finally:
        parked.close()

    assert elapsed < LONG_POLL_WAKE_MAX_S, f"the fetch took {elapsed:.1f}s: the append did not wake it"
    response = parse_fetch_response(payload, SESSION_VERSION)
    assert (response.correlation_id, response.error_code) == (31, NONE)
    parts = response.partitions()
    assert (parts[("poll", 0)].error_code, parts[("poll", 0)].records) == (NONE, b"")
    woken = parts[("poll", 1)]
    assert (woken.error_code, woken.high_watermark) == (NONE, 1)
    assert values_of(woken) == [(0, b"wake up")]


def test_deleting_the_topic_answers_a_parked_long_poll_at_once(broker):
    """Kafka completes the delayed fetches of a partition it stops hosting; a fetch parked on
    a topic being deleted answers UNKNOWN_TOPIC_OR_PARTITION then, not at its max wait."""
    create_topic(broker.bootstrap, "vanishing")
    request = fetch_request(
        SESSION_VERSION, 61, [("vanishing", [FetchPartition(0, 0)])], max_wait_ms=LONG_POLL_MAX_WAIT_MS, min_bytes=1
    )
    parked = ParkedFetch(broker.port, request, timeout_s=LONG_POLL_MAX_WAIT_MS / 1000 + 15)
    try:
        delete_topic(broker.bootstrap, "vanishing")
        payload, elapsed = parked.result(LONG_POLL_MAX_WAIT_MS / 1000 + 20)
    finally:
        parked.close()
    assert elapsed < LONG_POLL_WAKE_MAX_S, f"the fetch took {elapsed:.1f}s: the deletion did not wake it"
    response = parse_fetch_response(payload, SESSION_VERSION)
    assert response.error_code == NONE, response
    assert response.partitions()[("vanishing", 0)].error_code == UNKNOWN_TOPIC_OR_PARTITION, response


def test_a_parked_long_poll_does_not_hold_up_shutdown(broker):
    """Kafka does not wait out delayed fetches when it shuts down; a consumer with a long
    fetch.max.wait.ms must not stretch a clean stop (or a rolling restart) to that wait."""
    create_topic(broker.bootstrap, "parked")
    max_wait_ms = 25_000
    request = fetch_request(
        SESSION_VERSION, 51, [("parked", [FetchPartition(0, 0)])], max_wait_ms=max_wait_ms, min_bytes=1
    )
    parked = ParkedFetch(broker.port, request, timeout_s=max_wait_ms / 1000 + 15)
    try:
        started = time.monotonic()
        # Longer than the fetch's wait, so a slow stop is measured rather than killed.
        broker.stop(timeout_s=max_wait_ms / 1000 + 10)
        elapsed = time.monotonic() - started
    finally:
        parked.close()
    assert elapsed < 5, f"clean shutdown took {elapsed:.1f}s with a fetch parked for {max_wait_ms / 1000:.0f}s"


def test_min_bytes_not_reached_returns_what_there_is_after_max_wait(broker):
    create_topic(broker.bootstrap, "min-bytes")
    assert produce_values(broker.bootstrap, "min-bytes", 0, [b"small"]) == [0]
    max_wait_ms = 300
    started = time.monotonic()
    response = fetch(
        broker.port,
        SESSION_VERSION,
        [("min-bytes", [FetchPartition(0, 0)])],
        max_wait_ms=max_wait_ms,
        min_bytes=1_000_000,
    )
    elapsed = time.monotonic() - started
    assert max_wait_ms / 1000 - 0.005 <= elapsed < 5, f"answered after {elapsed:.3f}s, max_wait_ms={max_wait_ms}"
    assert response.error_code == NONE
    assert values_of(response.partitions()[("min-bytes", 0)]) == [(0, b"small")]


def test_long_poll_on_an_idle_partition_returns_empty_after_max_wait(broker):
    create_topic(broker.bootstrap, "idle")
    max_wait_ms = 300
    started = time.monotonic()
    response = fetch(
        broker.port, SESSION_VERSION, [("idle", [FetchPartition(0, 0)])], max_wait_ms=max_wait_ms, min_bytes=1
    )
    elapsed = time.monotonic() - started
    assert max_wait_ms / 1000 - 0.005 <= elapsed < 5, f"answered after {elapsed:.3f}s, max_wait_ms={max_wait_ms}"
    assert (response.error_code, response.session_id) == (NONE, NO_SESSION)
    partition = response.partitions()[("idle", 0)]
    assert (partition.error_code, partition.high_watermark, partition.log_start_offset) == (NONE, 0, 0)
    assert partition.records == b"", f"expected empty (not null) records, got {partition.records!r}"


# ---------------------------------------------------------------- fetch limits


BATCHES = {0: 5, 1: 2}
PER_BATCH = 10


@pytest.fixture
def batched(broker):
    """Partition 0 holds 5 batches of 10 records, partition 1 holds 2; returns the broker and
    each partition's batches (from a fetch with generous limits) plus its raw record bytes.

    The batches are hand-built: a client's producer may split a flush in two, and these
    tests need to know exactly where each batch starts and ends.
    """
    create_topic(broker.bootstrap, "batched", partitions=2)
    for p, batches in BATCHES.items():
        for b in range(batches):
            offsets = range(b * PER_BATCH, (b + 1) * PER_BATCH)
            records = [BatchRecord(None, b"p%d-%03d-" % (p, i) + b"y" * 100, (), now_ms()) for i in offsets]
            batch = encode_record_batch(records)
            [(_, [part])] = produce(broker.port, 9, [("batched", [(p, batch)])]).topics
            assert (part.error_code, part.base_offset) == (NONE, offsets[0]), part
    everything = fetch(
        broker.port, SESSION_VERSION, [("batched", [FetchPartition(p, 0, 1 << 20) for p in BATCHES])]
    ).partitions()
    layout = {}
    for p, batches in BATCHES.items():
        fetched = everything[("batched", p)]
        assert [b.base_offset for b in fetched.batches] == [i * PER_BATCH for i in range(batches)], p
        layout[p] = (fetched.batches, fetched.records)
    return broker, layout


def fetch_batched(broker, partitions: list[FetchPartition], **kwargs) -> dict:
    response = fetch(broker.port, SESSION_VERSION, [("batched", partitions)], **kwargs)
    assert response.error_code == NONE, response
    return {p: data for (_, p), data in response.partitions().items()}


def test_partition_max_bytes_below_one_batch_returns_that_whole_batch(batched):
    broker, layout = batched
    batches, raw = layout[0]
    first, second = batches[0], batches[1]

    for limit in (0, 1):
        [tiny] = fetch_batched(broker, [FetchPartition(0, 0, partition_max_bytes=limit)]).values()
        assert tiny.error_code == NONE
        assert tiny.records == raw[: first.size], f"partition_max_bytes={limit}: expected the first batch, whole"

    # Just short of two batches: the second must not be returned whole (Kafka may send a cut-off tail).
    limit = first.size + second.size - 1
    [short] = fetch_batched(broker, [FetchPartition(0, 0, partition_max_bytes=limit)]).values()
    assert [b.base_offset for b in short.batches] == [0]
    assert short.records.startswith(raw[: first.size]) and len(short.records) <= limit

    [exact] = fetch_batched(broker, [FetchPartition(0, 0, partition_max_bytes=first.size + second.size)]).values()
    assert exact.records == raw[: first.size + second.size]


def test_max_bytes_caps_the_response_across_partitions(batched):
    broker, layout = batched
    (batches0, raw0), (batches1, raw1) = layout[0], layout[1]
    both = [FetchPartition(0, 0, 1 << 20), FetchPartition(1, 0, 1 << 20)]

    # Below one batch: the first partition still gets one whole batch, the second nothing.
    for max_bytes in (0, 1):
        parts = fetch_batched(broker, both, max_bytes=max_bytes)
        assert parts[0].records == raw0[: batches0[0].size], f"max_bytes={max_bytes}"
        assert (parts[1].error_code, parts[1].high_watermark, parts[1].records) == (
            NONE,
            BATCHES[1] * PER_BATCH,
            b"",
        ), f"max_bytes={max_bytes}"

    # Room for all of partition 0 and a bit: partition 1's first batch does not fit.
    parts = fetch_batched(broker, both, max_bytes=len(raw0) + batches1[0].size - 1)
    assert parts[0].records == raw0
    assert parts[1].error_code == NONE and parts[1].batches == []

    # Exactly enough for partition 1's first batch as well.
    parts = fetch_batched(broker, both, max_bytes=len(raw0) + batches1[0].size)
    assert parts[0].records == raw0
    assert parts[1].records == raw1[: batches1[0].size]

    # Two batches' worth for both partitions: all of it goes to the first.
    budget = batches0[0].size + batches0[1].size + 5
    parts = fetch_batched(broker, both, max_bytes=budget)
    assert [b.base_offset for b in parts[0].batches] == [0, PER_BATCH]
    assert len(parts[0].records) <= budget
    assert parts[1].batches == []


@pytest.mark.parametrize("offset", [51, 1_000_000, -1], ids=["end+1", "far-beyond", "negative"])
def test_fetch_offset_out_of_range(batched, offset):
    """Reported at once (no long poll), with the partition's high watermark and log start offset.

    Kafka 4.1 itself sends -1 for both alongside this error (`new LogReadResult(error)`),
    and clients reset through ListOffsets either way; Strom's real values are pinned here.
    """
    broker, _ = batched
    high_watermark = BATCHES[0] * PER_BATCH
    assert offset != high_watermark
    started = time.monotonic()
    [part] = fetch_batched(broker, [FetchPartition(0, offset)], max_wait_ms=10_000, min_bytes=1).values()
    assert time.monotonic() - started < 5, "an error must not wait for max_wait_ms"
    assert part.error_code == OFFSET_OUT_OF_RANGE, part
    assert (part.high_watermark, part.log_start_offset) == (high_watermark, 0), part
    assert not part.records


def test_fetch_at_the_high_watermark_is_not_out_of_range(batched):
    broker, _ = batched
    [part] = fetch_batched(broker, [FetchPartition(0, BATCHES[0] * PER_BATCH)]).values()
    assert (part.error_code, part.records) == (NONE, b"")


def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(batched):
    broker, layout = batched
    batches, raw = layout[0]
    containing = batches[2]
    assert containing.base_offset < 25 <= containing.last_offset

    [one] = fetch_batched(broker, [FetchPartition(0, 25, partition_max_bytes=1)]).values()
    assert [b.base_offset for b in one.batches] == [containing.base_offset]
    assert one.offsets == list(range(20, 30)), "the batch starts before the requested offset, as in Kafka"

    [rest] = fetch_batched(broker, [FetchPartition(0, 25)]).values()
    start = sum(b.size for b in batches[:2])
    assert rest.records == raw[start:]


# ---------------------------------------------------------------- DescribeCluster


def test_describe_cluster_is_stable_across_restart(broker):
    def describe():
        admin = admin_client(broker.bootstrap)
        return wait_future(admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_S))

    before = describe()
    assert before.cluster_id, "empty cluster id"
    assert before.controller is not None and before.controller.id == NODE_ID
    assert [(n.id, n.host, n.port) for n in before.nodes] == [(NODE_ID, "127.0.0.1", broker.port)]

    broker.restart()
    after = describe()
    assert after.cluster_id == before.cluster_id, "the cluster id changed across a restart"
    assert after.controller is not None and after.controller.id == NODE_ID
    assert [(n.id, n.host, n.port) for n in after.nodes] == [(NODE_ID, "127.0.0.1", broker.port)]


# ---------------------------------------------------------------- DeleteTopics v6


def test_delete_topics_v6_by_topic_id(broker):
    create_topic(broker.bootstrap, "doomed-by-id", partitions=2)
    topic_id = topic_id_of(broker.port, "doomed-by-id")

    [deleted] = parse_delete_topics_v6(call(broker.port, delete_topics_v6_request(5, [topic_id])))
    assert (deleted.error_code, deleted.name, deleted.topic_id) == (NONE, "doomed-by-id", topic_id), deleted

    def gone():
        listed = parse_metadata(call(broker.port, metadata_request(6)))
        return all(t.name != "doomed-by-id" and t.topic_id != topic_id for t in listed.topics)

    wait_until(gone, ADMIN_TIMEOUT_S, "the deleted topic to leave metadata")
    assert "doomed-by-id" not in topic_names(broker.bootstrap)

    unknown_id = uuid.uuid4()
    request = delete_topics_v6_request(7, [topic_id, unknown_id, "no-such-topic"])
    results = parse_delete_topics_v6(call(broker.port, request))
    assert [(r.topic_id, r.error_code) for r in results[:2]] == [
        (topic_id, UNKNOWN_TOPIC_ID),
        (unknown_id, UNKNOWN_TOPIC_ID),
    ], results
    assert (results[2].name, results[2].error_code) == ("no-such-topic", UNKNOWN_TOPIC_OR_PARTITION), results


# ---------------------------------------------------------------- Produce v13 and acks=0


def test_produce_v13_by_topic_id(broker):
    create_topic(broker.bootstrap, "produce-by-id")
    assert produce_values(broker.bootstrap, "produce-by-id", 0, [b"c0", b"c1", b"c2"]) == [0, 1, 2]
    topic_id = topic_id_of(broker.port, "produce-by-id")
    ts = now_ms() - 1_000
    records = [
        BatchRecord(b"key-a", b"value-a", (("h1", b"\x00\xff"), ("h2", b"")), ts),
        BatchRecord(None, b"value-b", (), ts + 7),
    ]

    response = produce(broker.port, 13, [(topic_id, [(0, encode_record_batch(records))])])
    [(echoed_id, [part])] = response.topics
    assert echoed_id == topic_id
    assert (part.index, part.error_code, part.base_offset, part.log_append_time_ms, part.log_start_offset) == (
        0,
        NONE,
        3,
        -1,
        0,
    ), part

    consumed = consume_confluent(broker.bootstrap, "produce-by-id", {0: 5})[0]
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in consumed] == [
        (0, None, b"c0", (), consumed[0].timestamp_ms),
        (1, None, b"c1", (), consumed[1].timestamp_ms),
        (2, None, b"c2", (), consumed[2].timestamp_ms),
        (3, b"key-a", b"value-a", (("h1", b"\x00\xff"), ("h2", b"")), ts),
        (4, None, b"value-b", (), ts + 7),
    ]

    unknown_id = uuid.uuid4()
    response = produce(broker.port, 13, [(unknown_id, [(0, encode_record_batch(records))])])
    [(echoed_id, [part])] = response.topics
    assert echoed_id == unknown_id
    assert (part.error_code, part.base_offset) == (UNKNOWN_TOPIC_ID, -1), part
    assert watermarks_confluent(broker.bootstrap, "produce-by-id", [0]) == {0: (0, 5)}


def test_produce_with_a_bad_crc_is_rejected(broker):
    """The control for the hand-built batches: the broker does check their CRC-32C."""
    create_topic(broker.bootstrap, "crc")
    batch = encode_record_batch([BatchRecord(b"k", b"v", (), now_ms())], crc_delta=1)
    [(_, [part])] = produce(broker.port, 9, [("crc", [(0, batch)])]).topics
    assert part.error_code == CORRUPT_MESSAGE, part
    assert watermarks_confluent(broker.bootstrap, "crc", [0]) == {0: (0, 0)}


def test_a_failed_produce_with_acks_0_closes_the_connection(broker):
    """As Kafka: the producer hears of the failure by losing its connection, so it
    refreshes its metadata (a partition's leader may have moved)."""
    create_topic(broker.bootstrap, "fire-and-miss")
    batch = encode_record_batch([BatchRecord(b"k", b"lost", (), now_ms())])
    missing_partition = produce_request(9, 41, [("fire-and-miss", [(7, batch)])], acks=0)

    reaction = exchange(broker.port, missing_partition + api_versions_request(3, 42), timeout_s=10)

    assert reaction == Reaction(b"", True), "closed without answering the request that followed"


@pytest.mark.parametrize("version", [3, 9, 13])
def test_produce_with_acks_0_gets_no_response(broker, version):
    create_topic(broker.bootstrap, "fire-and-forget")
    topic = topic_id_of(broker.port, "fire-and-forget") if version >= 13 else "fire-and-forget"
    ts = now_ms()
    batch = encode_record_batch([BatchRecord(b"k", b"unacknowledged", (), ts)])

    with Connection(broker.port) as conn:
        conn.send(produce_request(version, 41, [(topic, [(0, batch)])], acks=0))
        for correlation_id in (42, 43):
            # Responses come in request order: a Produce response would arrive first.
            payload = conn.call(api_versions_request(3, correlation_id))
            answered = struct.unpack_from(">i", payload)[0]
            assert answered == correlation_id, f"expected the answer to request {correlation_id}, got one to {answered}"
            assert parse_api_versions(payload, 3).error_code == NONE

    [record] = consume_confluent(broker.bootstrap, "fire-and-forget", {0: 1})[0]
    assert (record.offset, record.key, record.value, record.timestamp_ms) == (0, b"k", b"unacknowledged", ts)
