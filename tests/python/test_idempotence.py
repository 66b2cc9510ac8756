"""The idempotent producer: InitProducerId hands out producer ids, and each
partition appends a producer's batch exactly once, in sequence, whatever the
network or the broker does in between.

Real clients produce through a proxy that cuts their connections in the middle
of responses, so batches the broker appended are retried; a consumer then
finds every record exactly once, in order. At the wire level the same batch is
sent twice (also across a kill -9 and a clean restart) and must come back with
its first offset, while gaps and stale epochs get Kafka's error codes.
"""

from __future__ import annotations

import random
import selectors
import socket
import threading
import time

import pytest

from harness import (
    OutRecord,
    assert_same_sequence,
    confluent_producer,
    consume_confluent,
    create_topic,
    end_offsets_of,
    kafka_python_producer,
    now_ms,
    produce_confluent,
    produce_kafka_python,
    watermarks_confluent,
)
from wire import (
    INVALID_PRODUCER_EPOCH,
    INVALID_REQUEST,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    BatchRecord,
    encode_record_batch,
    find_coordinator,
    init_producer_id,
    produce,
)

PARTITIONS = 3
PROXIED_RECORDS = 15_000
MAX_CUTS = 12
MIN_CUTS = 6
# Bytes of broker responses a proxied connection forwards before it is cut.
CUT_AFTER_BYTES = (200, 2_000)
PROXY_IDLE_S = 0.2


class CuttingProxy:
    """A loopback TCP proxy in front of the broker that cuts connections mid-response.

    Each connection forwards a random budget of response bytes, then passes on
    part of the next chunk and closes both sides: whatever requests were in
    flight may have been appended without the client hearing of it. After
    `max_cuts` cuts connections are left alone, and so are connections opened
    before `arm()` (the test's own setup). Runs until `close()`.
    """

    def __init__(self, seed: int, max_cuts: int = MAX_CUTS):
        self.rng = random.Random(seed)
        self.max_cuts = max_cuts
        self.cuts = 0
        self.upstream_port: int | None = None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.armed = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener.settimeout(PROXY_IDLE_S)
        self._spawn(self._accept_loop)

    def arm(self) -> None:
        self.armed.set()

    def close(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(5)
        self.listener.close()

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            self._spawn(self._serve, client)

    def _budget(self) -> int | None:
        """Response bytes this connection may carry before its cut; None once the cuts are spent."""
        with self.lock:
            if not self.armed.is_set() or self.cuts >= self.max_cuts:
                return None
            return self.rng.randint(*CUT_AFTER_BYTES)

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        budget = self._budget()
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ)
        selector.register(upstream, selectors.EVENT_READ)
        try:
            while not self.stopping.is_set():
                for key, _ in selector.select(PROXY_IDLE_S):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    if key.fileobj is client:
                        upstream.sendall(data)
                        continue
                    if budget is not None and len(data) > budget:
                        client.sendall(data[: budget + 1])
                        with self.lock:
                            self.cuts += 1
                        return
                    if budget is not None:
                        budget -= len(data)
                    client.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            client.close()
            upstream.close()


def numbered(count: int) -> list[OutRecord]:
    timestamp = now_ms()
    return [OutRecord(b"%d" % i, b"%08d" % i, (), timestamp) for i in range(count)]


def assert_exactly_once_in_order(bootstrap: str, topic: str, records: list[OutRecord], partition_of) -> None:
    """Every record was consumed once, in produce order within its partition."""
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for index, record in enumerate(records):
        expected[partition_of(index)].append(record.value)
    ends = {p: len(values) for p, values in expected.items()}
    assert {p: high for p, (_, high) in watermarks_confluent(bootstrap, topic, range(PARTITIONS)).items()} == ends
    consumed = consume_confluent(bootstrap, topic, ends)
    for p in range(PARTITIONS):
        assert_same_sequence(expected[p], [r.value for r in consumed[p]], f"partition {p}")
        assert [r.offset for r in consumed[p]] == list(range(ends[p]))


def test_confluent_idempotent_producer_survives_cut_connections(broker_factory, request):
    proxy = CuttingProxy(seed=hash(request.node.name) & 0xFFFF)
    request.addfinalizer(proxy.close)
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.start(broker.port)
    proxied = f"127.0.0.1:{proxy.port}"
    create_topic(broker.bootstrap, "exactly-once", PARTITIONS)
    proxy.arm()
    producer = confluent_producer(
        proxied,
        **{
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 40,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        },
    )
    records = numbered(PROXIED_RECORDS)
    deliveries = produce_confluent(producer, "exactly-once", records, partition=None)
    assert proxy.cuts >= MIN_CUTS, f"only {proxy.cuts} connections were cut: the test proved nothing"
    by_partition = {i: d.partition for i, d in enumerate(deliveries)}
    assert_exactly_once_in_order(broker.bootstrap, "exactly-once", records, by_partition.__getitem__)
    for p in range(PARTITIONS):
        offsets = sorted(d.offset for d in deliveries if d.partition == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: acknowledged offsets are not 0..n-1"


def test_kafka_python_producer_is_idempotent_by_default(broker):
    create_topic(broker.bootstrap, "kafka-python-default", PARTITIONS)
    producer = kafka_python_producer(broker.bootstrap)
    try:
        assert producer.config["enable_idempotence"], "kafka-python's default producer should be idempotent"
        records = numbered(3_000)
        deliveries = produce_kafka_python(producer, "kafka-python-default", records)
        assert producer._transaction_manager.producer_id_and_epoch.producer_id >= 0
    finally:
        producer.close(timeout=10)
    by_partition = {i: d.partition for i, d in enumerate(deliveries)}
    assert end_offsets_of(deliveries) == {
        p: sum(1 for d in deliveries if d.partition == p) for p in by_partition.values()
    }
    assert_exactly_once_in_order(broker.bootstrap, "kafka-python-default", records, by_partition.__getitem__)


# ---------------------------------------------------------------- wire level


def test_init_producer_id_hands_out_fresh_ids_at_epoch_zero(broker):
    ids = set()
    for version in range(6):
        response = init_producer_id(broker.port, version)
        assert (response.error_code, response.producer_epoch) == (NONE, 0), f"v{version}: {response}"
        ids.add(response.producer_id)
    assert len(ids) == 6 and min(ids) >= 0
    # KIP-360: an idempotent producer naming its id and epoch gets a new id, as from Kafka.
    again = init_producer_id(broker.port, 4, producer_id=max(ids), producer_epoch=0)
    assert again.error_code == NONE and again.producer_id not in ids and again.producer_epoch == 0
    assert init_producer_id(broker.port, 3, producer_id=max(ids)).error_code == INVALID_REQUEST
    assert init_producer_id(broker.port, 3, producer_epoch=2).error_code == INVALID_REQUEST
    assert init_producer_id(broker.port, 4, transactional_id="").error_code == INVALID_REQUEST
    # A transactional id keeps its producer id; each init bumps the epoch.
    find_coordinator(broker.port, "orders-tx", key_type=1)
    transactional = init_producer_id(broker.port, 4, transactional_id="orders-tx")
    assert (transactional.error_code, transactional.producer_epoch) == (NONE, 0)
    assert transactional.producer_id not in ids
    bumped = init_producer_id(broker.port, 4, transactional_id="orders-tx")
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (NONE, transactional.producer_id, 1)


def test_producer_ids_are_never_reused_after_a_crash(broker):
    before = {init_producer_id(broker.port).producer_id for _ in range(3)}
    broker.kill9()
    broker.start()
    after = init_producer_id(broker.port).producer_id
    assert after > max(before)


def idempotent_batch(producer_id: int, epoch: int, sequence: int, count: int, tag: str = "r") -> bytes:
    records = [BatchRecord(b"k%d" % i, f"{tag}-{sequence + i}".encode(), timestamp_ms=now_ms()) for i in range(count)]
    return encode_record_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def produce_batch(port: int, topic: str, batch: bytes, version: int = 9) -> tuple[int, int]:
    """(error code, base offset) of one batch produced to partition 0."""
    response = produce(port, version, [(topic, [(0, batch)])])
    (_, partitions), = response.topics
    (partition,) = partitions
    return partition.error_code, partition.base_offset


def high_watermark(broker, topic: str) -> int:
    return watermarks_confluent(broker.bootstrap, topic, [0])[0][1]


@pytest.mark.parametrize("version", [3, 9, 11])
def test_a_retried_batch_is_acknowledged_with_its_first_offset(broker, version):
    create_topic(broker.bootstrap, "retries", 1)
    producer_id = init_producer_id(broker.port).producer_id
    first = idempotent_batch(producer_id, 0, 0, 3)
    assert produce_batch(broker.port, "retries", first, version) == (NONE, 0)
    assert produce_batch(broker.port, "retries", idempotent_batch(producer_id, 0, 3, 2), version) == (NONE, 3)
    assert produce_batch(broker.port, "retries", first, version) == (NONE, 0), "the retry is not appended again"
    gapped = idempotent_batch(producer_id, 0, 7, 1)
    assert produce_batch(broker.port, "retries", gapped, version)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    new_epoch_late_start = idempotent_batch(producer_id, 1, 5, 1)
    assert produce_batch(broker.port, "retries", new_epoch_late_start, version)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_batch(broker.port, "retries", idempotent_batch(producer_id, 1, 0, 1), version) == (NONE, 5)
    stale = idempotent_batch(producer_id, 0, 5, 1)
    assert produce_batch(broker.port, "retries", stale, version)[0] == INVALID_PRODUCER_EPOCH
    assert high_watermark(broker, "retries") == 6, "refused and retried batches left the log untouched"


@pytest.mark.parametrize("stop", ["kill9", "clean"])
def test_a_retry_after_a_broker_restart_is_still_deduplicated(broker, stop):
    create_topic(broker.bootstrap, "restarts", 1)
    producer_id = init_producer_id(broker.port).producer_id
    first, second = idempotent_batch(producer_id, 0, 0, 3), idempotent_batch(producer_id, 0, 3, 2)
    assert produce_batch(broker.port, "restarts", first) == (NONE, 0)
    assert produce_batch(broker.port, "restarts", second) == (NONE, 3)
    if stop == "kill9":
        broker.kill9()
        broker.start()
    else:
        broker.restart()
    assert produce_batch(broker.port, "restarts", second) == (NONE, 3)
    if stop == "kill9":
        # Rebuilt from the log: every remembered batch is known again.
        assert produce_batch(broker.port, "restarts", first) == (NONE, 0)
    else:
        # The snapshot keeps each producer's last batch only, as Kafka's does.
        assert produce_batch(broker.port, "restarts", first)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_batch(broker.port, "restarts", idempotent_batch(producer_id, 0, 5, 1)) == (NONE, 5)
    assert high_watermark(broker, "restarts") == 6


def test_idle_producers_expire(broker_factory):
    broker = broker_factory(producer_id_expiration_ms=500, producer_id_expiration_check_interval_ms=100)
    create_topic(broker.bootstrap, "expiry", 1)
    producer_id = init_producer_id(broker.port).producer_id
    batch = idempotent_batch(producer_id, 0, 0, 1)
    assert produce_batch(broker.port, "expiry", batch) == (NONE, 0)
    deadline = time.monotonic() + 15
    # Once the producer is forgotten its retry is a new batch from an unknown producer.
    while True:
        error, offset = produce_batch(broker.port, "expiry", idempotent_batch(producer_id, 0, 0, 1, tag="again"))
        if offset != 0:
            break
        assert time.monotonic() < deadline, "the idle producer was never expired"
        time.sleep(0.1)
    assert (error, offset) == (NONE, 1)
