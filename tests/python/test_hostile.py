"""Hostile and broken peers on raw sockets. Whatever arrives, the broker answers
with a Kafka error or closes the connection as Kafka would, never crashes, does
not leak memory or connections, and keeps serving well-behaved clients.
"""

from __future__ import annotations

import random
import select
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaError, TopicPartition

import wire
from harness import (
    admin_client,
    confluent_consumer,
    confluent_producer,
    create_topic,
    future_error,
    high_watermarks,
    new_topic,
    now_ms,
    produce_one_confluent,
    topic_names,
    wait_until,
)
from wire import (
    API_VERSIONS,
    FETCH_SESSION_ID_NOT_FOUND,
    INITIAL_EPOCH,
    KAFKA_STORAGE_ERROR,
    METADATA,
    NO_SESSION,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_VERSION,
    BatchRecord,
    Connection,
    FetchPartition,
    api_versions,
    api_versions_request,
    connect,
    drain,
    encode_record_batch,
    exchange,
    fetch,
    fetch_request,
    find_coordinator,
    frame,
    init_producer_id,
    init_producer_id_request,
    int32,
    list_transactions,
    offset_for_leader_epoch,
    parse_api_versions,
    parse_fetch_response,
    parse_init_producer_id,
    parse_produce_response,
    produce,
    produce_request,
    request,
    request_header,
    send,
    split_frames,
    transactional_batch,
    transactional_produce,
    uvarint,
)

SEED = 20240601
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104857600
RSS_GROWTH_MAX_KB = 50 * 1024
REACTION_TIMEOUT_S = 5.0


def assert_healthy(broker) -> None:
    """Alive, and a fresh connection still gets a well-formed ApiVersions answer."""
    assert broker.alive(), f"broker died\n{broker.log_tail()}"
    assert api_versions(broker.port).error_code == 0


def assert_answered_or_closed(reaction, correlation_id: int) -> None:
    """A complete but malformed request must get an error response or a closed connection, promptly."""
    frames, _ = split_frames(reaction.received)
    assert frames or reaction.closed, "broker neither answered nor closed the connection"
    for payload in frames:
        assert struct.unpack_from(">i", payload)[0] == correlation_id, "response to a request we never sent"


# ---------------------------------------------------------------- the hostile cases


def random_blobs(port: int, rng: random.Random) -> None:
    """Raw random bytes; after we half-close, the broker must hang up."""
    for length in [1, 2, 3, 4, 5, 8, 13, 64, 512, 4096, 65536]:
        reaction = exchange(port, rng.randbytes(length), half_close=True)
        assert reaction.closed, f"{length} random bytes: connection left open after our EOF"


def random_frames(port: int, rng: random.Random) -> None:
    """Correctly sized frames full of random bytes reach the header decoder."""
    for length in [0, 1, 2, 5, 8, 9, 10, 11, 12, 13, 40, 300, 5000]:
        reaction = exchange(port, frame(rng.randbytes(length)), half_close=True)
        assert reaction.closed, f"random frame of {length} bytes: connection left open after our EOF"


def fuzzed_bodies(port: int, rng: random.Random, versions: dict[int, tuple[int, int]]) -> None:
    """Valid headers for every advertised API and version range, random bodies behind them."""
    for correlation_id, (api_key, (low, high)) in enumerate(sorted(versions.items()) * 4, start=1000):
        version = rng.randint(low, high)
        body = rng.randbytes(rng.choice([0, 1, 3, 7, 16, 64, 300]))
        reaction = exchange(port, request(api_key, version, correlation_id, body), half_close=True)
        assert reaction.closed, f"api {api_key} v{version}: connection left open after our EOF"
        assert_answered_or_closed(reaction, correlation_id)


def truncated_frames(port: int, rng: random.Random) -> None:
    """A frame announcing more bytes than ever arrive, then a close (full, or half with the hang-up checked)."""
    whole = api_versions_request(3, 7)
    for cut in [5, 9, len(whole) - 1]:
        with connect(port) as sock:
            send(sock, whole[:cut])
        reaction = exchange(port, whole[:cut], half_close=True)
        assert reaction.closed, f"frame cut at {cut} bytes: connection left open after our EOF"


ABSURD_SIZES = {
    "int32-max": 0x7FFFFFFF,
    "int32-min": 0x80000000,
    "minus-one": 0xFFFFFFFF,
    "zero": 0,
    "over-socket-request-max": DEFAULT_SOCKET_REQUEST_MAX_BYTES + 1,
}


def absurd_sizes(port: int, rng: random.Random) -> None:
    """Size prefixes no frame can have (negative, zero, over the limit): Kafka closes at once."""
    for name, size in ABSURD_SIZES.items():
        reaction = exchange(port, struct.pack(">I", size), timeout_s=REACTION_TIMEOUT_S)
        assert reaction.closed and not reaction.received, f"size prefix {name}: connection not closed"


def unknown_apis(port: int, rng: random.Random) -> None:
    """Kafka closes the connection on an unknown API key or an unsupported version (other than ApiVersions)."""
    for api_key, version in [(999, 0), (-1, 0), (METADATA, 99), (METADATA, -1)]:
        reaction = exchange(port, request(api_key, version, 5, b"", flexible=False))
        assert reaction.closed and not reaction.received, f"api {api_key} v{version}: connection not closed"


def malformed_metadata(port: int, rng: random.Random) -> None:
    """Complete frames whose contents lie: garbage, or counts and lengths far beyond the frame."""
    for correlation_id, data in enumerate(MALFORMED_METADATA + [request(METADATA, 1, 0, rng.randbytes(37))], start=50):
        patched = data[:8] + int32(correlation_id) + data[12:]
        assert_answered_or_closed(exchange(port, patched, until_frames=1), correlation_id)


MALFORMED_METADATA = [
    # v1 (non-flexible): topics array of 2^31-1 entries with none following.
    request(METADATA, 1, 0, int32(0x7FFFFFFF)),
    # v1: one topic whose name claims 32767 bytes.
    request(METADATA, 1, 0, int32(1) + struct.pack(">h", 0x7FFF)),
    # v1: a negative array length other than -1 (null).
    request(METADATA, 1, 0, int32(-2)),
    # v12 (flexible): compact array count 2^31-1 (encoded as n+1 = 2^31).
    request(METADATA, 12, 0, uvarint(2**31)),
    # v12: the largest 32-bit unsigned varint.
    request(METADATA, 12, 0, uvarint(2**32 - 1)),
    # v12: an over-long varint that never ends within the frame.
    request(METADATA, 12, 0, b"\xff" * 10),
    # v12: header tagged fields claiming 2^31 fields.
    frame(request_header(METADATA, 12, 0, flexible=False) + uvarint(2**31)),
    # Header client_id claiming 32767 bytes.
    frame(struct.pack(">hhih", METADATA, 1, 0, 0x7FFF)),
]

HOSTILE_CASES = [random_blobs, random_frames, truncated_frames, absurd_sizes, unknown_apis, malformed_metadata]


# ---------------------------------------------------------------- one case at a time


@pytest.mark.parametrize("case", HOSTILE_CASES, ids=lambda case: case.__name__)
def test_hostile_case_leaves_broker_healthy(broker, case):
    case(broker.port, random.Random(SEED))
    assert_healthy(broker)


def test_fuzzed_request_bodies_leave_broker_healthy(broker):
    versions = api_versions(broker.port).versions
    fuzzed_bodies(broker.port, random.Random(SEED), versions)
    assert_healthy(broker)


def test_api_versions_reports_the_served_apis(broker):
    versions = api_versions(broker.port).versions
    for api_key in [0, 1, 2, 3, 18, 19, 20, 60]:
        assert api_key in versions, f"api {api_key} missing from ApiVersions"
        low, high = versions[api_key]
        assert 0 <= low <= high
    assert versions[API_VERSIONS][1] >= 3


def test_unsupported_api_versions_version_gets_v0_error_response(broker):
    """A client newer than the broker sends ApiVersions v99; Kafka answers in v0 with
    UNSUPPORTED_VERSION and its own range, and keeps the connection for the retry."""
    with connect(broker.port) as sock:
        assert send(sock, api_versions_request(99, 4242))
        reaction = drain(sock, REACTION_TIMEOUT_S, until_frames=1)
        [payload], _ = split_frames(reaction.received)
        try:
            response = parse_api_versions(payload, 0)
        except (struct.error, AssertionError) as exc:
            raise AssertionError(f"not an ApiVersions v0 response ({exc}): {payload.hex()}") from None
        assert (response.correlation_id, response.error_code) == (4242, UNSUPPORTED_VERSION)
        assert response.versions[API_VERSIONS][1] >= 3

        assert send(sock, api_versions_request(0, 4243, client_id=None))
        reaction = drain(sock, REACTION_TIMEOUT_S, until_frames=1)
        [payload], _ = split_frames(reaction.received)
        retry = parse_api_versions(payload, 0)
        assert (retry.correlation_id, retry.error_code) == (4243, 0)
        assert {0, 1, 2, 3, 18, 19, 20, 60} <= set(retry.versions)


def test_pipelined_requests_are_answered_in_order(broker):
    """Requests written back to back on one connection come back in the order sent."""
    versions = [i % 4 for i in range(200)]
    burst = b"".join(api_versions_request(version, 9000 + i) for i, version in enumerate(versions))
    with connect(broker.port) as sock:
        assert send(sock, burst)
        reaction = drain(sock, 30, until_frames=len(versions))
    frames, _ = split_frames(reaction.received)
    assert len(frames) == len(versions)
    for i, (payload, version) in enumerate(zip(frames, versions)):
        response = parse_api_versions(payload, version)
        assert (response.correlation_id, response.error_code) == (9000 + i, 0)


# ---------------------------------------------------------------- everything at once


class SteadyClient(threading.Thread):
    """A well-behaved confluent-kafka client producing and reading back rounds of records.

    Bounded in rounds and time; any delivery error, consumer error or
    stalled round is recorded and ends the thread.
    """

    ROUND_RECORDS = 100
    ROUND_TIMEOUT_S = 15
    MAX_ROUNDS = 10_000
    TIME_LIMIT_S = 180

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.rounds = 0
        self.errors: list[str] = []
        self.stop_requested = threading.Event()

    def run(self):
        try:
            self.produce_and_read()
        except Exception as exc:
            self.errors.append(f"steady client crashed: {exc!r}")

    def produce_and_read(self):
        producer = confluent_producer(self.bootstrap, **{"linger.ms": 5, "acks": "all"})
        consumer = confluent_consumer(self.bootstrap)
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        expected = 0
        deadline = time.monotonic() + self.TIME_LIMIT_S
        try:
            while not self.stop_requested.is_set() and self.rounds < self.MAX_ROUNDS and time.monotonic() < deadline:
                failures = []

                def on_delivery(err, msg):
                    if err:
                        failures.append(err)

                for i in range(self.ROUND_RECORDS):
                    value = b"round %d record %d" % (self.rounds, i)
                    producer.produce(self.topic, value=value, partition=0, on_delivery=on_delivery)
                if producer.flush(self.ROUND_TIMEOUT_S) or failures:
                    self.errors.append(f"round {self.rounds}: undelivered or failed: {failures[:3]}")
                    return
                expected += self.ROUND_RECORDS
                if not self.read_up_to(consumer, expected):
                    return
                self.rounds += 1
        finally:
            consumer.close()

    def read_up_to(self, consumer, expected: int) -> bool:
        position = expected - self.ROUND_RECORDS
        round_deadline = time.monotonic() + self.ROUND_TIMEOUT_S
        while position < expected:
            if time.monotonic() >= round_deadline:
                self.errors.append(f"round {self.rounds}: read stalled at offset {position} of {expected}")
                return False
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    self.errors.append(f"round {self.rounds}: consumer error {msg.error()}")
                    return False
                if msg.offset() != position:
                    self.errors.append(f"round {self.rounds}: expected offset {position}, got {msg.offset()}")
                    return False
                position += 1
        return True

    def finish(self):
        self.stop_requested.set()
        self.join(self.ROUND_TIMEOUT_S * 3)
        assert not self.is_alive(), "steady client did not stop"


def stalled_large_frames(port: int, connections: int = 4) -> None:
    """Connections that announce a maximum-size request, send a little, and go quiet."""
    socks = [connect(port) for _ in range(connections)]
    try:
        for sock in socks:
            send(sock, int32(DEFAULT_SOCKET_REQUEST_MAX_BYTES) + b"\x00" * 1024)
    finally:
        for sock in socks:
            sock.close()


def test_storm_with_well_behaved_client(broker):
    create_topic(broker.bootstrap, "steady")
    steady = SteadyClient(broker.bootstrap, "steady")
    steady.start()
    try:
        wait_until(lambda: steady.rounds >= 2 or not steady.is_alive(), 60, "steady client warm-up")
        assert not steady.errors and steady.rounds >= 2, steady.errors
        rss_before_kb, fds_before = broker.rss_kb(), broker.open_fds()
        rounds_before = steady.rounds
        versions = api_versions(broker.port).versions

        def attack(worker: int) -> None:
            rng = random.Random(SEED + worker)
            for case in HOSTILE_CASES:
                case(broker.port, rng)
            fuzzed_bodies(broker.port, rng, versions)
            stalled_large_frames(broker.port)

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(attack, range(8)))

        wait_until(lambda: steady.rounds > rounds_before + 2 or not steady.is_alive(), 60, "steady client progress")
    finally:
        steady.finish()
    assert not steady.errors, steady.errors
    assert_healthy(broker)

    growth_kb = broker.rss_kb() - rss_before_kb
    assert growth_kb <= RSS_GROWTH_MAX_KB, f"RSS grew by {growth_kb} KiB during the storm"
    wait_until(
        lambda: broker.open_fds() <= fds_before + 2,
        30,
        f"the broker's open fds to drop back near {fds_before} (hostile connections released)",
    )


# ---------------------------------------------------------------- fetch sessions and fetch response size
# Sessions (KIP-227) cache only partitions that exist and give way to new
# ones only by Kafka's eviction rule; fetch.max.bytes caps every response, and
# copied responses go out in small steps to clients that never read.

SESSION_FETCH_VERSION = 12
ALL_BYTES = 0x7FFFFFFF


def open_session(conn: Connection, correlation_id: int, topics) -> object:
    """A full fetch at epoch 0 on `conn`: the response, whose session id is the new session's."""
    data = fetch_request(
        SESSION_FETCH_VERSION, correlation_id, topics, session_id=NO_SESSION, session_epoch=INITIAL_EPOCH
    )
    response = parse_fetch_response(conn.call(data), SESSION_FETCH_VERSION)
    assert response.error_code == NONE, response
    return response


def produce_batches(port: int, topic: str, partition: int, batches: int, records: int, value_bytes: int) -> None:
    """Hand-built batches, so their sizes and boundaries are known."""
    for b in range(batches):
        values = [BatchRecord(None, b"%06d" % (b * records + i) + b"v" * value_bytes, (), now_ms()) for i in range(records)]
        [(_, [part])] = produce(port, 9, [(topic, [(partition, encode_record_batch(values))])]).topics
        assert part.error_code == NONE, part


def test_fetch_sessions_answer_unknown_topics_without_storing_them(broker):
    """Each session names one real partition and 100 of a topic that does not exist,
    under a 10 KB name: the unknown ones are answered, never cached, so memory stays flat
    and an incremental fetch does not report them again."""
    create_topic(broker.bootstrap, "real")
    unknown = "u" * 10_000
    topics = [("real", [FetchPartition(0, 0)]), (unknown, [FetchPartition(p, 0) for p in range(100)])]
    rss_before_kb = broker.rss_kb()
    with Connection(broker.port) as conn:
        for correlation_id in range(150):
            response = open_session(conn, correlation_id, topics)
            assert response.session_id != NO_SESSION, "a session with a hosted partition was not opened"
            parts = response.partitions()
            assert parts[("real", 0)].error_code == NONE
            errors = {parts[(unknown, p)].error_code for p in range(100)}
            assert errors == {UNKNOWN_TOPIC_OR_PARTITION}, errors
    growth_kb = broker.rss_kb() - rss_before_kb
    assert growth_kb <= 30 * 1024, f"RSS grew by {growth_kb} KiB for 150 sessions naming an unknown topic"

    incremental = fetch(broker.port, SESSION_FETCH_VERSION, [], session_id=response.session_id, session_epoch=1)
    assert (incremental.error_code, incremental.partitions()) == (NONE, {}), incremental
    assert_healthy(broker)


def test_new_small_fetch_sessions_cannot_evict_a_busy_one(broker_factory):
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": 10})
    create_topic(broker.bootstrap, "busy", partitions=2)
    with Connection(broker.port) as conn:
        busy = open_session(conn, 1, [("busy", [FetchPartition(0, 0), FetchPartition(1, 0)])]).session_id
        assert busy != NO_SESSION
        small = [open_session(conn, 2 + i, [("busy", [FetchPartition(0, 0)])]).session_id for i in range(30)]
    opened = [s for s in small if s != NO_SESSION]
    assert len(opened) == 9, f"{len(opened)} of 30 small sessions opened in the 9 free slots"

    after = fetch(broker.port, SESSION_FETCH_VERSION, [], session_id=busy, session_epoch=1)
    assert (after.error_code, after.session_id) == (NONE, busy), after
    # A full fetch may name (and so close) its own old session, freeing the slot.
    gone = fetch(broker.port, SESSION_FETCH_VERSION, [], session_id=opened[0], session_epoch=-1)
    assert gone.error_code == NONE
    again = fetch(broker.port, SESSION_FETCH_VERSION, [], session_id=opened[0], session_epoch=1)
    assert again.error_code == FETCH_SESSION_ID_NOT_FOUND, again


def test_fetch_max_bytes_caps_every_response(broker_factory):
    """fetch.max.bytes below one batch: a fetch asking for 2 GiB gets exactly the first
    batch (Kafka's rule that keeps consumers moving), and a real consumer still reads all."""
    broker = broker_factory({"fetch.max.bytes": 1024})
    create_topic(broker.bootstrap, "capped", partitions=2)
    batches, records = 4, 5
    for p in (0, 1):
        produce_batches(broker.port, "capped", p, batches, records, 2_000)

    both = [FetchPartition(p, 0, ALL_BYTES) for p in (0, 1)]
    parts = fetch(broker.port, SESSION_FETCH_VERSION, [("capped", both)], max_bytes=ALL_BYTES).partitions()
    first, second = parts[("capped", 0)], parts[("capped", 1)]
    assert [b.base_offset for b in first.batches] == [0], "expected the first batch alone"
    assert (second.error_code, second.high_watermark, second.records or b"") == (NONE, batches * records, b"")

    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition("capped", p, 0) for p in (0, 1)])
        got = {0: 0, 1: 0}
        deadline = time.monotonic() + 30
        while sum(got.values()) < 2 * batches * records and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert not msg.error(), msg.error()
                got[msg.partition()] += 1
        assert got == {0: batches * records, 1: batches * records}
    finally:
        consumer.close()


def test_copied_responses_to_clients_that_never_read_hold_no_memory(broker_factory):
    """Without sendfile, four clients ask for 2 GiB of a 32 MB partition and never read:
    the broker copies a step at a time, so it does not hold the partition per client."""
    broker = broker_factory({"fetch.zero.copy.enable": "false"})
    create_topic(broker.bootstrap, "unread")
    produce_batches(broker.port, "unread", 0, 32, 1, 1_000_000)
    rss_before_kb = broker.rss_kb()
    request_all = fetch_request(
        SESSION_FETCH_VERSION, 9, [("unread", [FetchPartition(0, 0, ALL_BYTES)])], max_bytes=ALL_BYTES
    )
    socks = [connect(broker.port) for _ in range(4)]
    try:
        for sock in socks:
            send(sock, request_all)
        # Bytes arriving means each response is being written.
        wait_until(lambda: all(select.select([s], [], [], 0)[0] for s in socks), 30, "responses to start")
        growth_kb = broker.rss_kb() - rss_before_kb
        assert growth_kb <= 16 * 1024, f"RSS grew by {growth_kb} KiB for four unread responses"
        assert_healthy(broker)
    finally:
        for sock in socks:
            sock.close()


# ---------------------------------------------------------------- partitions beyond the open files limit


def test_partitions_beyond_the_open_files_limit_are_refused_before_any_is_made(broker_factory):
    """Each partition holds a descriptor: a request for more than the limit
    leaves room for is refused whole (POLICY_VIOLATION), makes no directory,
    and leaves the broker serving and restartable."""
    broker = broker_factory({"log.segment.open.files.max": 16}, nofile=600)
    admin = admin_client(broker.bootstrap)
    assert future_error(admin.create_topics([new_topic("first", partitions=300)])["first"]) is None
    for validate_only in (True, False):
        created = admin.create_topics([new_topic("second", partitions=300)], validate_only=validate_only)
        error = future_error(created["second"])
        assert error is not None and error.code() == KafkaError.POLICY_VIOLATION, (validate_only, error)
        assert "open files limit" in error.str(), error
    assert "second" not in topic_names(broker.bootstrap)
    assert not list(broker.data_dir.glob("second-*"))

    assert future_error(admin.create_topics([new_topic("small", partitions=10)])["small"]) is None
    broker.restart()
    producer = confluent_producer(broker.bootstrap)
    for topic, partition in (("first", 299), ("small", 9)):
        outcome = produce_one_confluent(producer, topic, b"served", partition=partition)
        assert outcome.error is None, outcome


# ---------------------------------------------------------------- refused records stay a bounded answer
# A small zstd batch can hold hundreds of thousands of keyless records; on a
# compacted topic each is refused, but the response names only the first
# thousand (KIP-467 record errors) and counts the rest.

NAMED_RECORD_ERRORS_MAX = 1000


def test_a_batch_of_countless_refused_records_gets_a_bounded_answer(broker):
    create_topic(broker.bootstrap, "compacted", config={"cleanup.policy": "compact"})
    count = 200_000
    batch = wire.encode_record_batch([wire.BatchRecord(None, b"", (), 0)] * count, codec=wire.CODEC_ZSTD)
    assert len(batch) < 1 << 20, "fits the default max.message.bytes"
    rss_before_kb = broker.rss_kb()
    response = wire.produce(broker.port, 9, [("compacted", [(0, batch)])])
    [(_, [refused])] = response.topics
    assert refused.error_code == wire.INVALID_RECORD, refused.error_message
    assert len(refused.record_errors) == NAMED_RECORD_ERRORS_MAX
    assert [index for index, _ in refused.record_errors] == list(range(NAMED_RECORD_ERRORS_MAX))
    assert refused.error_message.startswith(f"{count} record(s) rejected"), refused.error_message
    assert broker.rss_kb() - rss_before_kb <= RSS_GROWTH_MAX_KB
    assert_healthy(broker)


# ---------------------------------------------------------------- ListTransactions id patterns (KIP-1152)

INVALID_REGULAR_EXPRESSION = 128
PATTERN_IDS = 200


def test_transactional_id_patterns_cannot_crash_or_stall_the_broker(broker):
    """A 40 KB pattern of `.?` or `a*` atoms once overflowed a worker's stack
    (SIGABRT); patterns are now compiled by a linear-time engine within bounds."""
    ids = [f"hostile-{i:03d}" for i in range(PATTERN_IDS)]
    find_coordinator(broker.port, ids[0], key_type=1)
    for transactional_id in ids:
        assert init_producer_id(broker.port, 4, transactional_id=transactional_id).error_code == 0
    for atom in (".?", "a*"):
        error, _, listed = list_transactions(broker.port, pattern=atom * 20_000)
        assert (error, listed) == (INVALID_REGULAR_EXPRESSION, []), atom
        assert_healthy(broker)
    for bad in ("(", "hostile-[9-0]", "a)|(b"):
        assert list_transactions(broker.port, pattern=bad)[0] == INVALID_REGULAR_EXPRESSION, bad

    # Atoms the engine takes in one pass, however many there are.
    error, _, listed = list_transactions(broker.port, pattern="hostile-" + "0*" * 400 + "b")
    assert (error, listed) == (0, [])
    error, _, listed = list_transactions(broker.port, pattern="hostile-" + "0?" * 400 + "1[0-9]")
    assert error == 0
    assert sorted(t[0] for t in listed) == [f"hostile-0{i}" for i in range(10, 20)]
    error, _, listed = list_transactions(broker.port, pattern="hostile-.*")
    assert (error, len(listed)) == (0, PATTERN_IDS)
    assert_healthy(broker)


# ---------------------------------------------------------------- transactional batches nobody verified (KIP-890)

INVALID_RECORD = 87
INVALID_TXN_STATE = 48


def test_a_transaction_nobody_added_cannot_stall_read_committed_consumers(broker):
    """A transactional batch behind a plain one in the same record set, from a
    producer that never called AddPartitionsToTxn, once opened a transaction
    no marker would ever end: the last stable offset stuck, across restarts."""
    create_topic(broker.bootstrap, "mixed")
    find_coordinator(broker.port, "mixed-tx", key_type=1)
    init = init_producer_id(broker.port, 4, transactional_id="mixed-tx")
    plain = encode_record_batch([BatchRecord(None, b"plain")])
    hidden = transactional_batch(init.producer_id, init.producer_epoch, b"hidden")
    assert transactional_produce(broker.port, "mixed-tx", "mixed", 0, plain + hidden) == INVALID_RECORD
    assert transactional_produce(broker.port, "mixed-tx", "mixed", 0, hidden + plain) == INVALID_RECORD
    assert transactional_produce(broker.port, "mixed-tx", "mixed", 0, hidden) == INVALID_TXN_STATE
    assert transactional_produce(broker.port, "mixed-tx", "mixed", 0, plain) == NONE

    partition = [("mixed", 0)]
    for _ in ("before", "after a restart"):
        assert high_watermarks(broker.bootstrap, partition, "read_uncommitted") == {("mixed", 0): 1}
        assert high_watermarks(broker.bootstrap, partition, "read_committed") == {("mixed", 0): 1}
        broker.restart()


# ---------------------------------------------------------------- OffsetForLeaderEpoch with extreme values
# Epochs and partitions at the ends of their range, and one request naming
# many partitions, are answered per partition; nothing panics.

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def test_offset_for_leader_epoch_with_extreme_values_is_answered_per_partition(broker):
    create_topic(broker.bootstrap, "edges")
    # The leader's epoch cache holds epoch 0 from offset 0. As Kafka's
    # LeaderEpochFileCache.endOffsetFor: an epoch above every known one is
    # undefined, one below them all ends where the first known one starts.
    for partition, current, epoch, expected in [
        (0, -1, INT32_MAX, (wire.NONE, -1, -1)),
        (0, -1, INT32_MIN, (wire.NONE, INT32_MIN, 0)),
        (0, INT32_MIN, 0, (74, -1, -1)),  # FENCED_LEADER_EPOCH
        (0, INT32_MAX, 0, (75, -1, -1)),  # UNKNOWN_LEADER_EPOCH
        (-1, -1, 0, (wire.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)),
        (INT32_MAX, -1, 0, (wire.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)),
    ]:
        answers = offset_for_leader_epoch(broker.port, 4, "edges", [(partition, current, epoch)])
        assert answers == {partition: expected}, (partition, current, epoch)
    many = [(p, -1, 0) for p in range(20_000)]
    answers = offset_for_leader_epoch(broker.port, 4, "edges", many)
    # Epoch 0 is the leader's current one: it ends at the log end.
    assert len(answers) == 20_000 and answers[0] == (wire.NONE, 0, 0)
    assert_healthy(broker)


# ---------------------------------------------------------------- a slow disk stalls no connection
# Every fsync waits off the runtime's workers and the periodic duties run on
# the blocking pool. The broker runs here with one runtime worker and every
# fsync made slow (a debug-build hook): a sync that held the worker would
# keep every other connection unanswered until the disk was done.

SLOW_FSYNC_MS = 2000
SLOW_DISK_START_TIMEOUT_S = 30.0


@pytest.fixture
def slow_disk_broker(broker_factory, monkeypatch):
    monkeypatch.setenv("STROM_TEST_FSYNC_DELAY_MS", str(SLOW_FSYNC_MS))
    monkeypatch.setenv("TOKIO_WORKER_THREADS", "1")
    brokers = []

    def start(overrides: dict[str, str] | None = None):
        broker = broker_factory(overrides, start_timeout_s=SLOW_DISK_START_TIMEOUT_S)
        brokers.append(broker)
        return broker

    yield start
    # A clean shutdown fsyncs every checkpoint: slow here, and not under test. This
    # runs before broker_factory's teardown, which still fails a broker that died on its own.
    for broker in brokers:
        if broker.alive():
            broker.kill9()


def answered_api_versions(port: int) -> bool:
    reaction = exchange(port, api_versions_request(3, 77), until_frames=1, timeout_s=30)
    return len(split_frames(reaction.received)[0]) == 1


def test_a_slow_metadata_fsync_leaves_other_connections_answered(slow_disk_broker):
    broker = slow_disk_broker()
    metadata_log = broker.data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    size_before = metadata_log.stat().st_size
    with connect(broker.port, timeout_s=30) as writer:
        # The first producer id reserves a block in the metadata log, fsync'd.
        assert send(writer, init_producer_id_request(4, 7))
        wait_until(lambda: metadata_log.stat().st_size > size_before, 10, "the producer id block written")
        assert answered_api_versions(broker.port), "ApiVersions unanswered"
        in_flight = not select.select([writer], [], [], 0)[0]
        assert in_flight, "ApiVersions was answered only after the metadata fsync finished"
        reaction = drain(writer, timeout_s=30, until_frames=1)
        frames = split_frames(reaction.received)[0]
        assert len(frames) == 1 and parse_init_producer_id(frames[0], 4).error_code == 0
    assert broker.alive()


def test_a_slow_checkpoint_leaves_other_connections_answered(slow_disk_broker):
    broker = slow_disk_broker({"log.flush.offset.checkpoint.interval.ms": "200"})
    checkpoint_tmp = broker.data_dir / "recovery-point-offset-checkpoint.tmp"
    wait_until(checkpoint_tmp.exists, 10, "a checkpoint being forced to disk")
    assert answered_api_versions(broker.port), "ApiVersions unanswered"
    assert checkpoint_tmp.exists(), "ApiVersions was answered only after the checkpoint's fsync finished"
    assert broker.alive()


# ---------------------------------------------------------------- a panic while a partition's log is locked
# A bug that panics mid-append (played by a debug-build hook) takes that one
# partition offline with KAFKA_STORAGE_ERROR, as a failed disk does: later
# requests are answered, not dropped, other partitions serve on, and a
# restart recovers it.


def produce_reaction(port: int, topic: str, correlation_id: int):
    batch = encode_record_batch([BatchRecord(None, b"value", timestamp_ms=int(time.time() * 1000))])
    return exchange(port, produce_request(9, correlation_id, [(topic, [(0, batch)])]), until_frames=1)


def produce_error(port: int, topic: str, correlation_id: int) -> int:
    frames = split_frames(produce_reaction(port, topic, correlation_id).received)[0]
    assert len(frames) == 1, f"Produce to {topic} unanswered"
    [(_, [partition])] = parse_produce_response(frames[0], 9).topics
    return partition.error_code


def test_a_panic_holding_a_log_takes_only_its_partition_offline(broker_factory, monkeypatch):
    monkeypatch.setenv("STROM_TEST_PANIC_APPEND_TOPIC", "doomed")
    broker = broker_factory()
    create_topic(broker.bootstrap, "doomed")
    create_topic(broker.bootstrap, "steady")

    panicked = produce_reaction(broker.port, "doomed", 1)
    assert panicked.closed and not panicked.received, "the panicking request's connection is dropped"
    assert produce_error(broker.port, "doomed", 2) == KAFKA_STORAGE_ERROR
    assert produce_error(broker.port, "steady", 3) == 0
    assert broker.alive()
    assert "offline until a restart" in broker.log_tail()

    monkeypatch.delenv("STROM_TEST_PANIC_APPEND_TOPIC")
    broker.restart()
    assert produce_error(broker.port, "doomed", 4) == 0
