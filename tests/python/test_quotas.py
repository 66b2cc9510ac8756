"""Client quotas as Kafka enforces them, with real clients: producer and
consumer byte rates hold a client near its quota while an unlimited one on
the same broker runs free, throttle_time_ms reaches the client (KIP-219),
defaults and precedence, controller_mutation_rate (KIP-599), per-IP
connection limits and rates, and `strom configs` for users, clients and ips.

Brokers here sample quotas over quota.window.num=2 windows of one second, so
a run of a few seconds sees the steady rate rather than the first burst
Kafka's eleven windows would allow."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import wire
from harness import admin_cli, admin_ok, assert_one_line_error, create_topic, wait_until

pytestmark = pytest.mark.timeout(240)

MB = 1 << 20
RUN_S = 8.0
VALUE = b"x" * 10_000


@pytest.fixture
def quota_broker(broker_factory):
    return broker_factory({"quota.window.num": 2, "quota.window.size.seconds": 1})


def configs(broker, *args: str) -> str:
    return admin_ok(broker, "configs", *args)


def set_quota(broker, entity: list[str], quota: str) -> None:
    configs(broker, "--alter", *entity, "--add-config", quota)


class Measured:
    def __init__(self):
        self.bytes = 0
        self.throttle_events: list[int] = []

    def on_throttle(self, event) -> None:
        self.throttle_events.append(int(event.throttle_time * 1000))


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float, measured: Measured) -> None:
    """Produces as fast as the client may for `seconds`; counts the bytes
    acknowledged within that time."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 1024, "throttle_cb": measured.on_throttle,
                         "enable.idempotence": False})
    deadline = time.monotonic() + seconds

    def delivered(err, msg):
        if err is None and time.monotonic() < deadline:
            measured.bytes += len(msg.value())

    while time.monotonic() < deadline:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.02)
        producer.poll(0)
    producer.flush(15)


def consume_for(bootstrap: str, topic: str, client_id: str, seconds: float, measured: Measured) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "throttle_cb": measured.on_throttle})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.2):
                if message.error() is None:
                    measured.bytes += len(message.value())
    finally:
        consumer.close()


def rate(measured: Measured, seconds: float) -> float:
    return measured.bytes / seconds


def test_a_limited_producer_is_held_near_its_quota_and_an_unlimited_one_is_not(quota_broker):
    create_topic(quota_broker.bootstrap, "produced")
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "limited"], f"producer_byte_rate={MB}")
    limited, free = Measured(), Measured()
    threads = [
        threading.Thread(target=produce_for, args=(quota_broker.bootstrap, "produced", "limited", RUN_S, limited)),
        threading.Thread(target=produce_for, args=(quota_broker.bootstrap, "produced", "free", RUN_S, free)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    limited_rate, free_rate = rate(limited, RUN_S), rate(free, RUN_S)
    print(f"producers: limited {limited_rate / MB:.2f} MB/s, unlimited {free_rate / MB:.2f} MB/s")
    # One window of burst beyond the steady quota, as Kafka's rate allows.
    assert 0.5 * MB <= limited_rate <= 1.5 * MB, f"limited producer at {limited_rate / MB:.2f} MB/s"
    assert free_rate >= 3 * MB, f"unlimited producer at {free_rate / MB:.2f} MB/s"
    assert limited.throttle_events and max(limited.throttle_events) > 0, "throttle_time_ms reached the client"
    assert not free.throttle_events


def test_a_limited_consumer_is_held_near_its_quota_and_an_unlimited_one_is_not(quota_broker):
    create_topic(quota_broker.bootstrap, "consumed")
    filler = Measured()
    produce_for(quota_broker.bootstrap, "consumed", "filler", 4.0, filler)
    assert filler.bytes >= 12 * MB, f"only {filler.bytes} bytes to read"
    set_quota(quota_broker, ["--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients",
                             "--entity-name", "slow"], f"consumer_byte_rate={MB}")
    slow, fast = Measured(), Measured()
    seconds = 6.0
    threads = [
        threading.Thread(target=consume_for, args=(quota_broker.bootstrap, "consumed", "slow", seconds, slow)),
        threading.Thread(target=consume_for, args=(quota_broker.bootstrap, "consumed", "fast", seconds, fast)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    slow_rate = rate(slow, seconds)
    print(f"consumers: limited {slow_rate / MB:.2f} MB/s, unlimited {rate(fast, seconds) / MB:.2f} MB/s")
    assert 0.4 * MB <= slow_rate <= 1.6 * MB, f"limited consumer at {slow_rate / MB:.2f} MB/s"
    assert fast.bytes >= 3 * slow.bytes, f"unlimited consumer read {fast.bytes}, limited {slow.bytes}"
    assert slow.throttle_events and not fast.throttle_events


def throttled(bootstrap: str, client_id: str) -> bool:
    """Whether a short burst from `client_id` is throttled."""
    measured = Measured()
    produce_for(bootstrap, "burst", client_id, 2.0, measured)
    return bool(measured.throttle_events)


def test_defaults_and_precedence(quota_broker):
    create_topic(quota_broker.bootstrap, "burst")
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-default"], "producer_byte_rate=100000")
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "vip"], "producer_byte_rate=1000000000")
    # A user quota outranks every client-only quota.
    set_quota(quota_broker, ["--entity-type", "users", "--entity-default"], "producer_byte_rate=1000000000")
    assert not throttled(quota_broker.bootstrap, "anyone")
    configs(quota_broker, "--alter", "--entity-type", "users", "--entity-default", "--delete-config", "producer_byte_rate")
    assert throttled(quota_broker.bootstrap, "anyone"), "the default client quota applies"
    assert not throttled(quota_broker.bootstrap, "vip"), "a named client outranks the default"
    shown = configs(quota_broker, "--describe", "--entity-type", "clients")
    assert "Quota configs for the default client-id are producer_byte_rate=100000.0" in shown, shown
    assert "Quota configs for client-id 'vip' are producer_byte_rate=1000000000.0" in shown, shown


def test_quotas_survive_a_restart_and_strom_configs_round_trips(quota_broker):
    set_quota(quota_broker, ["--entity-type", "users", "--entity-name", "alice"],
              "producer_byte_rate=1048576,consumer_byte_rate=2048,request_percentage=50")
    set_quota(quota_broker, ["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                             "--entity-name", "app"], "controller_mutation_rate=10")
    set_quota(quota_broker, ["--entity-type", "ips", "--entity-default"], "connection_creation_rate=100")
    # Names and defaults pair with the entity types in command-line order.
    set_quota(quota_broker, ["--entity-type", "users", "--entity-default", "--entity-type", "clients",
                             "--entity-name", "app"], "consumer_byte_rate=4096")
    quota_broker.restart()
    users = configs(quota_broker, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert ("Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1048576.0, "
            "request_percentage=50.0") in users, users
    both = configs(quota_broker, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-name", "app")
    assert "Quota configs for user-principal 'alice', client-id 'app' are controller_mutation_rate=10.0" in both
    defaults = configs(quota_broker, "--describe", "--entity-type", "users", "--entity-default", "--entity-type",
                       "clients", "--entity-name", "app")
    assert "Quota configs for the default user-principal, client-id 'app' are consumer_byte_rate=4096.0" in defaults
    ips = configs(quota_broker, "--describe", "--entity-type", "ips")
    assert "Quota configs for the default ip are connection_creation_rate=100.0" in ips, ips

    configs(quota_broker, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--delete-config", "request_percentage,consumer_byte_rate")
    users = configs(quota_broker, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "are producer_byte_rate=1048576.0" in users and "request_percentage" not in users, users

    unknown = admin_cli(quota_broker, "configs", "--alter", "--entity-type", "clients", "--entity-name", "c",
                        "--add-config", "not_a_quota=1")
    assert_one_line_error(unknown, "Invalid configuration key not_a_quota")
    fractional = admin_cli(quota_broker, "configs", "--alter", "--entity-type", "clients", "--entity-name", "c",
                           "--add-config", "producer_byte_rate=1.5")
    assert_one_line_error(fractional, "producer_byte_rate")
    ip_key = admin_cli(quota_broker, "configs", "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
                       "--add-config", "producer_byte_rate=5")
    assert_one_line_error(ip_key, "Invalid configuration key producer_byte_rate")
    bad_ip = admin_cli(quota_broker, "configs", "--alter", "--entity-type", "ips", "--entity-name", "not-an-ip",
                       "--add-config", "connection_creation_rate=5")
    assert_one_line_error(bad_ip, "not a valid IP")


def create_topics_v7(port: int, client_id: str, name: str, partitions: int) -> tuple[int, int]:
    """CreateTopics v7 for one topic: (throttle_time_ms, error code)."""
    body = (wire.Writer(flexible=True).length(1).string(name).int32(partitions).int16(1).length(0).length(0)
            .tagged_fields().int32(10_000).boolean(False).tagged_fields().build())
    payload = wire.call(port, wire.request(19, 7, 1, body, client_id=client_id), timeout_s=10)
    _, reader = wire.response_reader(payload, 19, 7)
    throttle_ms = reader.int32()
    assert reader.length() == 1
    reader.string()
    reader.uuid()
    return throttle_ms, reader.int16()


def test_controller_mutation_rate_refuses_with_throttling_quota_exceeded(quota_broker):
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "mutator"], "controller_mutation_rate=1")
    # The first request may exceed the quota (KIP-599 lets it through) ...
    throttle_ms, error = create_topics_v7(quota_broker.port, "mutator", "mutated-1", 5)
    assert error == 0 and throttle_ms > 0
    # ... and the next is refused until the rate falls back.
    throttle_ms, error = create_topics_v7(quota_broker.port, "mutator", "mutated-2", 1)
    assert error == 89 and throttle_ms > 0, (error, throttle_ms)  # THROTTLING_QUOTA_EXCEEDED
    assert create_topics_v7(quota_broker.port, "someone-else", "mutated-3", 1) == (0, 0)
    wait_until(lambda: create_topics_v7(quota_broker.port, "mutator", "mutated-2", 1)[1] == 0, 15,
               "the mutation quota to admit the topic again")


def api_versions_answered(port: int) -> bool:
    reaction = wire.exchange(port, wire.api_versions_request(0, 1), timeout_s=5, until_frames=1)
    return bool(reaction.received)


def test_max_connections_per_ip_refuses_extra_connections(broker_factory):
    broker = broker_factory({"max.connections.per.ip": 2})
    held = [wire.connect(broker.port) for _ in range(2)]
    try:
        for sock in held:
            wire.send(sock, wire.api_versions_request(0, 1))
            assert wire.drain(sock, timeout_s=5, until_frames=1).received
        assert not api_versions_answered(broker.port), "a third connection from one address is closed"
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: api_versions_answered(broker.port), 10, "a slot freed by a closed connection")


def test_max_connections_per_ip_overrides(broker_factory):
    broker = broker_factory({"max.connections.per.ip": 0, "max.connections.per.ip.overrides": "127.0.0.1:1"})
    with wire.connect(broker.port) as held:
        wire.send(held, wire.api_versions_request(0, 1))
        assert wire.drain(held, timeout_s=5, until_frames=1).received
        assert not api_versions_answered(broker.port)


def test_connection_creation_rate_closes_connections_beyond_it(quota_broker):
    set_quota(quota_broker, ["--entity-type", "ips", "--entity-name", "127.0.0.1"], "connection_creation_rate=2")
    answered = 0
    for _ in range(10):
        if not api_versions_answered(quota_broker.port):
            break
        answered += 1
    assert 1 <= answered < 10, f"{answered} connections answered"
    assert "connection_creation_rate exceeded" in quota_broker.log_since_start()


MUTED_S = 0.5


def busy_round_trips(port: int, client_id: str, requests: int = 40) -> tuple[float, int]:
    """Metadata v4 requests sent one after another on one connection, up to
    the first whose round trip waited a mute out: the slowest round trip
    and the largest throttle_time_ms reported."""
    slowest, reported = 0.0, 0
    with wire.Connection(port, timeout_s=15) as conn:
        for correlation_id in range(requests):
            started = time.monotonic()
            body = wire.int32(-1) + b"\x00"  # all topics, no auto-creation
            payload = conn.call(wire.request(3, 4, correlation_id, body, client_id=client_id), timeout_s=15)
            slowest = max(slowest, time.monotonic() - started)
            reported = max(reported, wire.response_reader(payload, 3, 4)[1].int32())
            if slowest >= MUTED_S:
                break
    return slowest, reported


def test_request_percentage_throttles_a_busy_client_and_not_others(quota_broker):
    # 0.001% of a thread is about 10 microseconds of handler time a second.
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "busy"], "request_percentage=0.001")
    slowest, reported = busy_round_trips(quota_broker.port, "busy")
    assert slowest >= MUTED_S, "the busy client's channel was muted"
    assert reported > 0, "throttle_time_ms reached the client"
    slowest, reported = busy_round_trips(quota_broker.port, "idle", requests=10)
    assert slowest < MUTED_S and reported == 0


def fetch_v4(conn: wire.Connection, correlation_id: int, client_id: str, topic: str, offset: int,
             max_wait_ms: int = 0) -> tuple[int, bytes]:
    """Fetch v4 of partition 0 from `offset` (up to 8 MB, waiting up to
    `max_wait_ms` for a byte): the response's throttle_time_ms and the
    partition's records."""
    body = (wire.int32(-1) + wire.int32(max_wait_ms) + wire.int32(1) + wire.int32(8 * MB) + wire.int8(0)
            + wire.int32(1) + wire.nullable_string(topic)
            + wire.int32(1) + wire.int32(0) + wire.int64(offset) + wire.int32(8 * MB))
    payload = conn.call(wire.request(1, 4, correlation_id, body, client_id=client_id), timeout_s=15)
    _, reader = wire.response_reader(payload, 1, 4)
    throttle_ms = reader.int32()
    records = b""
    for _ in range(reader.length()):
        reader.string()
        for _ in range(reader.length()):
            reader.int32()
            assert reader.int16() == 0
            reader.int64()
            reader.int64()
            reader.array(lambda r: (r.int64(), r.int64()))
            records += reader.nullable_bytes() or b""
    return throttle_ms, records


def test_a_throttled_fetch_is_answered_empty_and_fetches_are_capped_to_the_quota_window(quota_broker):
    create_topic(quota_broker.bootstrap, "small-batches")
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "batch.size": 30_000, "linger.ms": 5})
    for _ in range(100):
        producer.produce("small-batches", VALUE, partition=0)
    assert producer.flush(15) == 0
    quota = 100_000
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "raw"], f"consumer_byte_rate={quota}")
    offset, throttled_responses, answered = 0, 0, 0
    deadline = time.monotonic() + 30
    with wire.Connection(quota_broker.port, timeout_s=15) as conn:
        for correlation_id in range(60):
            if offset >= 100 or time.monotonic() > deadline:
                break
            throttle_ms, records = fetch_v4(conn, correlation_id, "raw", "small-batches", offset)
            if throttle_ms > 0:
                assert records == b"", "a throttled fetch carries no records (KIP-219)"
                throttled_responses += 1
                continue
            answered += 1
            # Each fetch is capped at the quota's window (one 1 s window
            # here), so it is never throttled for its own size alone.
            assert len(records) <= quota + 30_000, len(records)
            batches = wire.decode_record_batches(records)
            assert batches and batches[0].base_offset == offset
            offset = batches[-1].last_offset + 1
    assert offset == 100, f"read up to {offset} in {answered} fetches"
    assert throttled_responses > 0, "the consumer went over its quota"


def test_request_percentage_counts_fetch_work_but_not_long_poll_waits(quota_broker):
    create_topic(quota_broker.bootstrap, "quiet")
    # 10% of a thread: 100 ms of work a second, far less than a parked
    # fetch's 700 ms wait but far more than its work, even on a busy machine
    # where a few milliseconds of work take ten times as long.
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "poller"], "request_percentage=10")
    with wire.Connection(quota_broker.port, timeout_s=15) as conn:
        for correlation_id in range(3):
            started = time.monotonic()
            throttle_ms, records = fetch_v4(conn, correlation_id, "poller", "quiet", 0, max_wait_ms=700)
            assert records == b"" and time.monotonic() - started >= 0.6, "the fetch waited for records"
            assert throttle_ms == 0, "waiting for records is not request time"
    # Fetch is not exempt: a client fetching busily over a tiny quota is throttled.
    set_quota(quota_broker, ["--entity-type", "clients", "--entity-name", "busy-fetcher"],
              "request_percentage=0.001")
    reported = 0
    with wire.Connection(quota_broker.port, timeout_s=15) as conn:
        for correlation_id in range(40):
            throttle_ms, _ = fetch_v4(conn, correlation_id, "busy-fetcher", "quiet", 0)
            reported = max(reported, throttle_ms)
            if reported:
                break
    assert reported > 0, "the busy fetcher's request time throttled it"
