"""Transactions across brokers: a confluent-kafka transactional producer
whose coordinator is on one broker writes to partitions led by the two
others, whose leaders verify each partition with that coordinator
(AddPartitionsToTxn verify_only); the coordinator's markers reach them
through WriteTxnMarkers, so read_committed consumers see a committed
transaction whole and an aborted one not at all; transactional offsets
land with a group coordinator on another broker; a coordinator killed
between PrepareCommit and its markers finishes the transaction when it
returns; a marker owed to a killed leader keeps the transaction prepared
until it is written, and a marker counts only once its partition's ISR
holds it; a commit is answered only once the state's followers hold it,
and survives the kill of its coordinator; all of it over a SASL_SSL
inter-broker listener; a new producer of a transactional id takes over
from one whose group coordinator's broker died mid-transaction; and a
consume-transform-produce loop that outlives kill -9 of its transaction
coordinator's broker twice, with every input exactly once in its output."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import CLUSTER_WAIT_S, Cluster
from harness import OutRecord, confluent_consumer, confluent_producer, produce_confluent, wait_future, wait_until
from replicas import TopicWatch, replicated_topic, view
from test_cluster_clients import BROKERS, coordinator_of, leaders, spread_topic
from test_configs import describe_topic, set_topic_configs
from test_secure_links import SecureCluster, create, wait_formed
from test_transactions import SENTINEL, TIMEOUT_S, committed_offset, describe_transaction, txn_producer
import wire

TRANSACTION_KEY = 1
TRANSACTION_STATE_TOPIC = "__transaction_state"
PREPARED_FAILPOINT = "txn-prepared"
# How long a commit is given while the state's followers are stopped: well
# under the broker session timeout (9 s), so no broker is fenced meanwhile.
PAUSED_COMMIT_S = 4
# How long a marker is watched not counting while the partition's follower
# is stopped: well under the broker session timeout, as above.
HELD_MARKER_S = 3


def start_cluster(tmp_path, env: dict[str, str] | None = None, **settings: str) -> Cluster:
    overrides = {
        "offsets.topic.num.partitions": "12",
        "transaction.state.log.num.partitions": "6",
        **{key.replace("_", "."): value for key, value in settings.items()},
    }
    cluster = Cluster(tmp_path, controllers=3, combined=True, overrides=overrides)
    for node in cluster.brokers():
        node.process.env.update(env or {})
    cluster.start_serving()
    return cluster


@pytest.fixture
def cluster(tmp_path):
    with start_cluster(tmp_path) as cluster:
        yield cluster


def txn_coordinator_of(node, transactional_id: str) -> int:
    request = wire.find_coordinator_v4_request(1, [transactional_id], key_type=TRANSACTION_KEY)
    [found] = wire.parse_find_coordinator_v4(wire.call(node.broker_port, request))
    return found.node_id if found.error_code == wire.NONE else -1


class Layout:
    """A transactional id coordinated by one broker and, for each of the
    two other brokers, a partition of `topic` it leads."""

    def __init__(self, cluster: Cluster):
        self.topic = spread_topic(cluster)
        node = cluster.nodes[1]
        self.transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
        self.coordinator = wait_until(
            lambda: (c := txn_coordinator_of(node, self.transactional_id)) in BROKERS and c,
            CLUSTER_WAIT_S,
            "a transaction coordinator",
        )
        led = leaders(node.bootstrap, self.topic)
        self.others = sorted(BROKERS - {self.coordinator})
        self.partitions = [min(p for p, leader in led.items() if leader == other) for other in self.others]


def read_until_sentinels(bootstrap: str, topic: str, partitions: list[int], isolation: str) -> dict[int, list[bytes]]:
    """Each partition's values from the beginning up to its SENTINEL (excluded)."""
    reader = confluent_consumer(bootstrap, **{"isolation.level": isolation})
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    try:
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + TIMEOUT_S
        while not all(values and values[-1] == SENTINEL for values in got.values()):
            assert time.monotonic() < deadline, f"no sentinel within {TIMEOUT_S}s: {got}"
            for msg in reader.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, f"consumer error: {msg.error()}"
                got[msg.partition()].append(msg.value())
    finally:
        reader.close()
    return {p: values[:-1] for p, values in got.items()}


def values(tag: str, count: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(count)]


def produce_in_txn(producer, topic: str, partitions: list[int], tag: str, count: int = 10) -> None:
    for p in partitions:
        for value in values(f"{tag}-p{p}", count):
            producer.produce(topic, value=value, partition=p)
    assert producer.flush(TIMEOUT_S) == 0


def wait_for_state(cluster: Cluster, layout: Layout, state: str, timeout_s: float = CLUSTER_WAIT_S) -> None:
    port = cluster.nodes[layout.coordinator].broker_port

    def reached() -> bool:
        try:
            return describe_transaction(port, layout.transactional_id).state == state
        except (AssertionError, OSError):  # a restarted node answers once it is serving
            return False

    wait_until(reached, timeout_s, f"{layout.transactional_id} in {state}")


def test_a_transaction_over_partitions_of_other_brokers_commits_and_aborts_everywhere(cluster):
    layout = Layout(cluster)
    topic, partitions = layout.topic, layout.partitions
    producer = txn_producer(cluster.bootstrap, layout.transactional_id)

    producer.begin_transaction()
    produce_in_txn(producer, topic, partitions, "committed")
    producer.commit_transaction(TIMEOUT_S)
    wait_for_state(cluster, layout, "CompleteCommit")

    producer.begin_transaction()
    produce_in_txn(producer, topic, partitions, "aborted")
    producer.abort_transaction(TIMEOUT_S)
    wait_for_state(cluster, layout, "CompleteAbort")

    producer.begin_transaction()
    for p in partitions:
        producer.produce(topic, value=SENTINEL, partition=p)
    producer.commit_transaction(TIMEOUT_S)

    committed = read_until_sentinels(cluster.bootstrap, topic, partitions, "read_committed")
    assert committed == {p: values(f"committed-p{p}", 10) for p in partitions}
    everything = read_until_sentinels(cluster.bootstrap, topic, partitions, "read_uncommitted")
    assert everything == {p: values(f"committed-p{p}", 10) + values(f"aborted-p{p}", 10) for p in partitions}


def test_offsets_sent_to_a_transaction_land_at_a_group_coordinator_on_another_broker(cluster):
    layout = Layout(cluster)
    topic, [source_partition, output_partition] = layout.topic, layout.partitions
    node = cluster.nodes[1]
    group = wait_until(
        lambda: next(
            (g for g in (f"app-{i}" for i in range(40)) if coordinator_of(node, g) not in {-1, layout.coordinator}),
            None,
        ),
        CLUSTER_WAIT_S,
        "a group coordinated away from the transaction coordinator",
    )
    inputs = [OutRecord(None, f"in-{i}".encode(), (), int(time.time() * 1000)) for i in range(20)]
    produce_confluent(confluent_producer(cluster.bootstrap, acks="all"), topic, inputs, partition=source_partition)
    source = confluent_consumer(cluster.bootstrap, **{"group.id": group, "isolation.level": "read_committed"})
    source.assign([TopicPartition(topic, source_partition, OFFSET_BEGINNING)])
    producer = txn_producer(cluster.bootstrap, layout.transactional_id)

    def process(commit: bool) -> int:
        records = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < 10:
            assert time.monotonic() < deadline, "input not consumed"
            records += [m for m in source.consume(num_messages=10 - len(records), timeout=0.5) if not m.error()]
        producer.begin_transaction()
        for m in records:
            producer.produce(topic, value=m.value().upper(), partition=output_partition)
        next_offset = records[-1].offset() + 1
        offsets = [TopicPartition(topic, source_partition, next_offset)]
        producer.send_offsets_to_transaction(offsets, source.consumer_group_metadata(), TIMEOUT_S)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
        return next_offset

    try:
        assert process(commit=True) == 10
        assert committed_offset(cluster.bootstrap, group, topic, source_partition) == 10
        assert process(commit=False) == 20
        wait_for_state(cluster, layout, "CompleteAbort")
        assert committed_offset(cluster.bootstrap, group, topic, source_partition) == 10, "aborted offsets never apply"
    finally:
        source.close()


def test_a_coordinator_killed_after_prepare_commit_completes_the_transaction_when_it_returns(tmp_path):
    # Every node stops a transaction right after PrepareCommit; the
    # coordinator is then killed and restarted without the failpoint. Its
    # state partition has one replica, so the coordinator stays on it.
    failpoint = {"STROM_FAILPOINTS": PREPARED_FAILPOINT}
    with start_cluster(tmp_path, env=failpoint, transaction_state_log_replication_factor="1") as cluster:
        layout = Layout(cluster)
        topic, partitions = layout.topic, layout.partitions
        coordinator = cluster.nodes[layout.coordinator]
        producer = txn_producer(cluster.bootstrap, layout.transactional_id)
        producer.begin_transaction()
        produce_in_txn(producer, topic, partitions, "prepared")
        with pytest.raises(KafkaException):
            producer.commit_transaction(2)  # answered only after the restart, if at all
        wait_until(
            lambda: f"failpoint {PREPARED_FAILPOINT} reached" in coordinator.process.log_since_start(),
            CLUSTER_WAIT_S,
            "the coordinator stopped after PrepareCommit",
        )
        cluster.kill9(layout.coordinator)
        coordinator.process.env.pop("STROM_FAILPOINTS")
        cluster.restart(layout.coordinator)

        # A node back from kill -9 registers again once its old broker
        # session (9 s) has expired.
        wait_for_state(cluster, layout, "CompleteCommit", timeout_s=2 * CLUSTER_WAIT_S)
        reader = confluent_consumer(cluster.bootstrap, **{"isolation.level": "read_committed"})
        got: dict[int, list[bytes]] = {p: [] for p in partitions}
        try:
            reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            wait_until(
                lambda: [got[m.partition()].append(m.value()) for m in reader.consume(100, 0.5) if not m.error()]
                is not None
                and all(len(v) >= 10 for v in got.values()),
                CLUSTER_WAIT_S,
                "the committed records through read_committed",
            )
        finally:
            reader.close()
        assert got == {p: values(f"prepared-p{p}", 10) for p in partitions}


def two_state_replicas_in_sync(cluster: Cluster, layout: Layout) -> None:
    """min.insync.replicas=2 on __transaction_state (three replicas: the
    two other brokers follow the coordinator's partition), as Kafka's
    default transaction.state.log.min.isr; the data topics keep one."""
    set_topic_configs(cluster.bootstrap, TRANSACTION_STATE_TOPIC, min_insync_replicas="2")
    coordinator = cluster.nodes[layout.coordinator].bootstrap

    def applied() -> bool:
        try:
            return describe_topic(coordinator, TRANSACTION_STATE_TOPIC)["min.insync.replicas"].value == "2"
        except KafkaException:
            return False  # the coordinator's image does not name the topic yet

    wait_until(applied, CLUSTER_WAIT_S, "min.insync.replicas=2 at the coordinator")


def test_a_commit_is_answered_only_once_the_state_followers_hold_it(tmp_path):
    with start_cluster(tmp_path) as cluster:
        layout = Layout(cluster)
        two_state_replicas_in_sync(cluster, layout)
        topic, partitions = layout.topic, layout.partitions
        port = cluster.nodes[layout.coordinator].broker_port
        producer = txn_producer(cluster.bootstrap, layout.transactional_id)
        producer.begin_transaction()
        produce_in_txn(producer, topic, partitions, "replicated")
        for other in layout.others:
            cluster.nodes[other].pause()
        try:
            with pytest.raises(KafkaException) as stalled:
                producer.commit_transaction(PAUSED_COMMIT_S)
            assert stalled.value.args[0].retriable(), stalled.value
            state = describe_transaction(port, layout.transactional_id).state
            assert state == "Ongoing", "PrepareCommit took effect before its followers held it"
        finally:
            for other in layout.others:
                cluster.nodes[other].resume()

        producer.commit_transaction(TIMEOUT_S)
        wait_for_state(cluster, layout, "CompleteCommit")
        producer.begin_transaction()
        for p in partitions:
            producer.produce(topic, value=SENTINEL, partition=p)
        producer.commit_transaction(TIMEOUT_S)
        committed = read_until_sentinels(cluster.bootstrap, topic, partitions, "read_committed")
        assert committed == {p: values(f"replicated-p{p}", 10) for p in partitions}


def test_a_committed_transaction_survives_the_kill_of_its_coordinator(tmp_path):
    with start_cluster(tmp_path) as cluster:
        layout = Layout(cluster)
        two_state_replicas_in_sync(cluster, layout)
        topic, partitions = layout.topic, layout.partitions
        producer = txn_producer(cluster.bootstrap, layout.transactional_id)
        producer.begin_transaction()
        produce_in_txn(producer, topic, partitions, "survived")
        for p in partitions:
            producer.produce(topic, value=SENTINEL, partition=p)
        producer.commit_transaction(TIMEOUT_S)
        cluster.kill9(layout.coordinator)

        survivor = cluster.nodes[layout.others[0]]
        successor = wait_until(
            lambda: (c := txn_coordinator_of(survivor, layout.transactional_id)) in layout.others and c,
            2 * CLUSTER_WAIT_S,
            "a coordinator on a surviving broker",
        )
        layout.coordinator = successor
        # Answered once the state followers held PrepareCommit: the new
        # coordinator finishes the commit, never aborts it.
        wait_for_state(cluster, layout, "CompleteCommit")
        bootstrap = ",".join(cluster.nodes[other].bootstrap for other in layout.others)
        committed = read_until_sentinels(bootstrap, topic, partitions, "read_committed")
        assert committed == {p: values(f"survived-p{p}", 10) for p in partitions}


def test_markers_for_a_killed_leader_wait_for_it_and_the_transaction_completes_only_then(cluster):
    layout = Layout(cluster)
    topic, partitions = layout.topic, layout.partitions
    victim = layout.others[0]
    producer = txn_producer(cluster.bootstrap, layout.transactional_id)
    producer.begin_transaction()
    produce_in_txn(producer, topic, partitions, "waited")
    cluster.kill9(victim)
    producer.commit_transaction(TIMEOUT_S)  # decided once PrepareCommit is written

    # The marker for the surviving leader lands; the other is retried.
    survivor = cluster.nodes[layout.others[1]].bootstrap
    reader = confluent_consumer(survivor, **{"isolation.level": "read_committed"})
    got: list[bytes] = []
    try:
        reader.assign([TopicPartition(topic, partitions[1], OFFSET_BEGINNING)])
        wait_until(
            lambda: got.extend(m.value() for m in reader.consume(100, 0.5) if not m.error()) or len(got) >= 10,
            CLUSTER_WAIT_S,
            "the surviving partition's committed records",
        )
    finally:
        reader.close()
    assert got == values(f"waited-p{partitions[1]}", 10)
    port = cluster.nodes[layout.coordinator].broker_port
    assert describe_transaction(port, layout.transactional_id).state == "PrepareCommit", "a marker is still owed"

    cluster.restart(victim)
    wait_for_state(cluster, layout, "CompleteCommit", timeout_s=2 * CLUSTER_WAIT_S)
    producer.begin_transaction()
    for p in partitions:
        producer.produce(topic, value=SENTINEL, partition=p)
    producer.commit_transaction(TIMEOUT_S)
    committed = read_until_sentinels(cluster.bootstrap, topic, partitions, "read_committed")
    assert committed == {p: values(f"waited-p{p}", 10) for p in partitions}


def test_a_marker_counts_only_once_the_partitions_isr_holds_it(tmp_path):
    # The state has one replica, so PrepareCommit needs no other broker;
    # the data partition's follower is stopped, so the marker its leader
    # appends cannot reach the ISR until the follower runs again.
    with start_cluster(tmp_path, transaction_state_log_replication_factor="1") as cluster:
        layout = Layout(cluster)
        quorum_leader, _ = cluster.wait_for_leader()
        # The follower stopped is not the active controller: no election meanwhile.
        leader, follower = sorted(layout.others, key=lambda b: b != quorum_leader)
        topic = f"held-{uuid.uuid4().hex[:8]}"
        assignment = [[leader, follower]]
        new = NewTopic(topic, num_partitions=1, replica_assignment=assignment, config={"min.insync.replicas": "2"})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_future(admin.create_topics([new])[topic])

        def in_sync() -> bool:
            p = view(cluster.nodes[leader], topic)[1].get(0)
            return p is not None and p.leader == leader and sorted(p.isr) == sorted([leader, follower])

        wait_until(in_sync, CLUSTER_WAIT_S, "the partition led with its follower in sync")
        producer = txn_producer(cluster.bootstrap, layout.transactional_id)
        producer.begin_transaction()
        produce_in_txn(producer, topic, [0], "held")
        port = cluster.nodes[layout.coordinator].broker_port
        cluster.nodes[follower].pause()
        try:
            producer.commit_transaction(TIMEOUT_S)  # decided once PrepareCommit is written
            held_until = time.monotonic() + HELD_MARKER_S
            while time.monotonic() < held_until:
                state = describe_transaction(port, layout.transactional_id).state
                assert state == "PrepareCommit", "completed before the partition's ISR held its marker"
                time.sleep(0.2)
        finally:
            cluster.nodes[follower].resume()

        wait_for_state(cluster, layout, "CompleteCommit")
        producer.begin_transaction()
        producer.produce(topic, value=SENTINEL, partition=0)
        producer.commit_transaction(TIMEOUT_S)
        assert read_until_sentinels(cluster.bootstrap, topic, [0], "read_committed") == {0: values("held-p0", 10)}


@pytest.mark.timeout(240)
def test_markers_and_verification_travel_the_sasl_ssl_inter_broker_listener(tmp_path):
    secure = SecureCluster(tmp_path)
    with secure.cluster:
        secure.cluster.start()
        wait_formed(secure, BROKERS)
        conf = secure.conf(secure.cluster.nodes[1])
        topic = "secure-txn"
        create(conf, topic, partitions=6)

        def led() -> dict[int, int]:
            partitions = AdminClient(conf).list_topics(topic, timeout=10).topics[topic].partitions
            return {p: meta.leader for p, meta in partitions.items()}

        # One partition led by each broker: whichever coordinates the
        # transaction, two of its partitions are led elsewhere.
        def led_by_every_broker() -> dict[int, int] | None:
            found = led()
            return found if set(found.values()) == BROKERS else None

        leaders_now = wait_until(led_by_every_broker, CLUSTER_WAIT_S, "a partition led by every broker")
        partitions = sorted(min(p for p, leader in leaders_now.items() if leader == b) for b in BROKERS)
        producer = Producer({**conf, "transactional.id": "secure-tx"})
        producer.init_transactions(TIMEOUT_S)
        for tag, commit in (("committed", True), ("aborted", False), ("end", True)):
            producer.begin_transaction()
            for p in partitions:
                for value in [SENTINEL] if tag == "end" else values(f"{tag}-p{p}", 5):
                    producer.produce(topic, value=value, partition=p)
            (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)

        reader = Consumer({**conf, "group.id": "secure-reader", "isolation.level": "read_committed",
                           "enable.auto.commit": False})
        got: dict[int, list[bytes]] = {p: [] for p in partitions}
        try:
            reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            wait_until(
                lambda: [got[m.partition()].append(m.value()) for m in reader.consume(100, 0.5) if not m.error()]
                is not None
                and all(v and v[-1] == SENTINEL for v in got.values()),
                CLUSTER_WAIT_S,
                "every partition's sentinel through read_committed",
            )
        finally:
            reader.close()
        assert got == {p: values(f"committed-p{p}", 5) + [SENTINEL] for p in partitions}
        for node in secure.cluster.nodes.values():
            assert "authentication to" not in node.process.log_since_start(), f"node {node.node_id} failed to log in"


def test_a_new_instance_of_a_transactional_id_takes_over_from_one_whose_group_coordinator_died(tmp_path):
    """What a stuck exactly-once processor's replacement relies on: the
    broker of the group coordinator is killed -9 while a transaction with
    offsets is open; once it is fenced, a new producer with the same
    transactional id fences the old one (whose transaction is aborted:
    neither its record nor its offsets count), and the new one's offsets
    commit at the group's new coordinator."""
    sessions = {"broker_session_timeout_ms": "3000", "broker_heartbeat_interval_ms": "300"}
    with start_cluster(tmp_path, min_insync_replicas="2", **sessions) as cluster:
        topic = replicated_topic(cluster, 1)
        watch = TopicWatch(cluster, [topic], 1)
        watch.wait_whole()
        group = f"takeover-{uuid.uuid4().hex[:8]}"
        victim = wait_until(
            lambda: (c := coordinator_of(cluster.nodes[1], group)) in BROKERS and c,
            CLUSTER_WAIT_S,
            "the group coordinator",
        )
        inputs = values("in", 10)
        produce_confluent(confluent_producer(cluster.bootstrap, acks="all"), topic,
                          [OutRecord(None, v, (), 0) for v in inputs], partition=0)
        source = confluent_consumer(cluster.bootstrap, **{"group.id": group})
        transactional_id = f"takeover-{uuid.uuid4().hex[:8]}"
        try:
            old = txn_producer(cluster.bootstrap, transactional_id)
            old.begin_transaction()
            old.produce(topic, value=b"zombie", partition=0)
            old.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], source.consumer_group_metadata(), TIMEOUT_S)
            assert old.flush(TIMEOUT_S) == 0
            cluster.kill9(victim)
            watch.wait_led_elsewhere(victim)
            new = txn_producer(cluster.bootstrap, transactional_id)
            new.begin_transaction()
            new.produce(topic, value=b"fresh", partition=0)
            new.send_offsets_to_transaction([TopicPartition(topic, 0, 10)], source.consumer_group_metadata(), TIMEOUT_S)
            new.commit_transaction(TIMEOUT_S)
        finally:
            source.close()
        assert committed_offset(cluster.bootstrap, group, topic, 0) == 10
        cluster.restart(victim)
        watch.wait_whole()
        commit_sentinels(cluster.bootstrap, topic, [0])
        assert read_until_sentinels(cluster.bootstrap, topic, [0], "read_committed")[0] == inputs + [b"fresh"]


# librdkafka's own bound for init_transactions in its fencing test (0103).
FENCING_INIT_S = 30
# The transaction state as Kafka's defaults spread it, on all three brokers.
STATE_ON_THREE = {"transaction_state_log_num_partitions": "50", "transaction_state_log_min_isr": "2"}


def test_a_second_producer_of_a_transactional_id_fences_the_first_mid_transaction(tmp_path):
    """librdkafka's fencing case on a fresh cluster with `__transaction_state`
    at RF=3 and min ISR 2: a second producer of the id initializes within
    librdkafka's 30 s while the first has a transaction open, the first one's
    commit then fails fatally as fenced, and none of its records is read
    committed."""
    with start_cluster(tmp_path, **STATE_ON_THREE) as cluster:
        topic = replicated_topic(cluster, 1)
        transactional_id = f"fenced-{uuid.uuid4().hex[:8]}"
        first = txn_producer(cluster.bootstrap, transactional_id)
        first.begin_transaction()
        for value in values("fenced", 10):
            first.produce(topic, value=value, partition=0)
        assert first.flush(TIMEOUT_S) == 0
        second = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id})
        second.init_transactions(FENCING_INIT_S)
        with pytest.raises(KafkaException) as refused:
            first.commit_transaction(TIMEOUT_S)
        error = refused.value.args[0]
        assert error.fatal() and error.code() == KafkaError._FENCED, error
        commit_sentinels(cluster.bootstrap, topic, [0])
        assert read_until_sentinels(cluster.bootstrap, topic, [0], "read_committed")[0] == []


CHURN_TOPICS = 120
CHURN_KILLS = 3


def test_the_first_transactional_producer_after_topic_churn_through_controller_kills_is_served(tmp_path):
    """Topics created in bursts while the active controller is killed -9
    three times leave the metadata busy for a while: the followers of the
    `__transaction_state` partitions the first transactional producer then
    creates must keep replicating them (a follower gave up its fetch at every
    metadata change, so the state's ISR shrank to its leader and the
    producer's InitProducerId waited 50 s and more), so its
    init_transactions completes within librdkafka's 30 s."""
    with start_cluster(tmp_path, **STATE_ON_THREE) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for kill in range(CHURN_KILLS):
            for i in range(CHURN_TOPICS):
                name = f"churn-{kill}-{i}-{uuid.uuid4().hex[:6]}"
                created = admin.create_topics([NewTopic(name, 1 + i % 5, 3)], request_timeout=15)
                wait_future(created[name], timeout_s=30)
            leader, epoch = cluster.wait_for_leader()
            cluster.kill9(leader)
            cluster.wait_for_leader(newer_than=epoch)
            cluster.restart(leader)
            cluster.wait_brokers_live()
        started = time.monotonic()
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"after-churn-{uuid.uuid4().hex[:8]}"})
        producer.init_transactions(FENCING_INIT_S)
        print(f"init_transactions after the churn took {time.monotonic() - started:.1f} s")


EOS_PROCESSOR = Path(__file__).with_name("eos_processor.py")
EOS_PARTITIONS = 3
EOS_PER_PARTITION = 10_000


def test_exactly_once_processing_survives_kill9_of_its_transaction_coordinators_broker(tmp_path):
    """A consume-transform-produce loop (eos_processor.py) on RF=3 topics with
    `min.insync.replicas=2` keeps going while the broker of its transaction
    coordinator, which also leads partitions of both topics, is killed with
    -9 and restarted, twice; every input record is in the output exactly
    once, in order, under read_committed. A processor whose librdkafka hangs
    (see eos_processor.py) is replaced by a new instance, as a deployment
    would replace it; the new one fences the old one's transaction."""
    sessions = {"broker_session_timeout_ms": "3000", "broker_heartbeat_interval_ms": "300"}
    with start_cluster(tmp_path, min_insync_replicas="2", **sessions) as cluster:
        source, sink = (replicated_topic(cluster, EOS_PARTITIONS) for _ in range(2))
        watch = TopicWatch(cluster, [source, sink], EOS_PARTITIONS)
        watch.wait_whole()
        inputs = {p: values(f"in-p{p}", EOS_PER_PARTITION) for p in range(EOS_PARTITIONS)}
        loader = confluent_producer(cluster.bootstrap, acks="all", **{"linger.ms": 20})
        for p, batch in inputs.items():
            produce_confluent(loader, source, [OutRecord(None, v, (), 0) for v in batch], partition=p)
        transactional_id = f"eos-{uuid.uuid4().hex[:8]}"
        ends = ",".join(str(EOS_PER_PARTITION) for _ in range(EOS_PARTITIONS))
        command = [sys.executable, str(EOS_PROCESSOR), cluster.bootstrap, source, sink, "eos-group", transactional_id,
                   ends]
        processor = Processor(command, tmp_path / "processor.log")
        total = EOS_PARTITIONS * EOS_PER_PARTITION
        try:
            kills = 0
            for fraction in (0.2, 0.35):
                wait_until(lambda: processor.committed() >= fraction * total, 2 * CLUSTER_WAIT_S,
                           f"{fraction:.0%} of the input processed")
                # While the first broker rejoined, the processor may have
                # finished everything: then there is nothing left to kill under.
                if kills and processor.finished():
                    break
                assert processor.running(), processor.tail()
                victim = wait_until(
                    lambda: (c := txn_coordinator_of(cluster.nodes[1], transactional_id)) in BROKERS and c,
                    CLUSTER_WAIT_S,
                    "the transaction coordinator",
                )
                cluster.kill9(victim)
                kills += 1
                watch.wait_led_elsewhere(victim)
                cluster.restart(victim)
                watch.wait_whole()
            print(f"the processor ran through {kills} kill(s) of its transaction coordinator's broker")
            processor.wait_done()
        finally:
            processor.kill()
        out_partitions = list(range(EOS_PARTITIONS))
        commit_sentinels(cluster.bootstrap, sink, out_partitions)
        output = read_until_sentinels(cluster.bootstrap, sink, out_partitions, "read_committed")
        for p in out_partitions:
            want = [v.upper() for v in inputs[p]]
            got = output[p]
            assert got == want, f"partition {p}: {len(got)} records, {len(set(got))} distinct, want {len(want)}"


class Processor:
    """eos_processor.py as a process, its output in `log`; started again
    (at most RESTARTS times) when it exits because its client hung."""

    DONE_S = 240.0
    STUCK_EXIT = 5
    RESTARTS = 2

    def __init__(self, command: list[str], log: Path):
        self.command = command
        self.log = log
        self.restarts = 0
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        with open(self.log, "ab") as out:
            return subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)

    def _revive(self) -> None:
        if self.process.poll() == self.STUCK_EXIT and self.restarts < self.RESTARTS:
            self.restarts += 1
            self.process = self._start()

    def running(self) -> bool:
        self._revive()
        return self.process.poll() is None

    def finished(self) -> bool:
        """Exited 0: every input record processed."""
        return self.process.poll() == 0

    def committed(self) -> int:
        """The input records committed so far, from the last "committed <n>" line."""
        self._revive()
        lines = [line for line in self.log.read_text().splitlines() if line.startswith("committed ")]
        return int(lines[-1].split()[1]) if lines else 0

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def wait_done(self) -> None:
        """It must exit 0, having processed every input."""
        deadline = time.monotonic() + self.DONE_S
        while True:
            try:
                code = self.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the processor did not finish: {self.tail()}") from None
            if not self.running():
                break
        assert code == 0, self.tail()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(15)


def commit_sentinels(bootstrap: str, topic: str, partitions: list[int]) -> None:
    producer = txn_producer(bootstrap, f"sentinel-{uuid.uuid4().hex[:8]}")
    producer.begin_transaction()
    for p in partitions:
        producer.produce(topic, value=SENTINEL, partition=p)
    producer.commit_transaction(TIMEOUT_S)
