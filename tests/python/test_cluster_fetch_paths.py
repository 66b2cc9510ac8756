"""Where replicated records are read from, on three combined nodes.

KIP-392: with `replica.selector.class` set to Kafka's rack-aware selector
and the brokers in racks a, b and c, a confluent-kafka consumer with
`client.rack=b` is sent by every leader to the rack-b replica, and the
records it reads all leave from that broker (each broker's
`bytesout` counter, which counts bytes sent to consumers and not to
followers).

KIP-73: a follower restarted behind its leader catches up no faster than
`leader.replication.throttled.rate` / `follower.replication.throttled.rate`
allow for the replicas the topic throttles, and once the throttle is
removed it catches up and rejoins the ISR.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic

from cluster import CLUSTER_WAIT_S, Cluster
from harness import (
    OutRecord,
    admin_client,
    admin_ok,
    confluent_consumer,
    confluent_producer,
    free_port,
    produce_confluent,
    wait_future,
    wait_until,
)
from test_cluster_replication import BROKERS, live_brokers
from test_metrics import scrape, value

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACKS = {1: "a", 2: "b", 3: "c"}
SESSIONS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}


def start_cluster(tmp_path, overrides: dict[str, str], per_node=lambda node_id: {}) -> Cluster:
    cluster = Cluster(tmp_path, controllers=3, combined=True, overrides={**SESSIONS, **overrides})
    for node_id, node in cluster.nodes.items():
        node.process.overrides.update(per_node(node_id))
    cluster.start()
    cluster.wait_for_leader()
    for node in cluster.brokers():
        wait_until(lambda node=node: live_brokers(node.bootstrap) == BROKERS, CLUSTER_WAIT_S,
                   f"all brokers through broker {node.node_id}")
    return cluster


def isr(bootstrap: str, topic: str) -> dict[int, set[int]]:
    """Partition -> its ISR; {} while the topic is not known yet."""
    admin = admin_client(bootstrap)
    try:
        described = wait_future(admin.describe_topics(TopicCollection([topic]))[topic])
    except KafkaException:
        return {}
    return {p.id: {r.id for r in p.isr} for p in described.partitions}


def records(count: int, size: int) -> list[OutRecord]:
    return [OutRecord(None, f"{i:08d}".encode().ljust(size, b"x"), (), int(time.time() * 1000)) for i in range(count)]


def test_a_consumer_in_rack_b_reads_every_partition_from_the_rack_b_broker(tmp_path):
    metrics_ports = {node_id: free_port() for node_id in RACKS}

    def per_node(node_id):
        return {"broker.rack": RACKS[node_id], "metrics.listener": f"http://127.0.0.1:{metrics_ports[node_id]}"}

    with start_cluster(tmp_path, {"replica.selector.class": RACK_AWARE}, per_node) as cluster:
        bootstrap = cluster.bootstrap
        topic = f"racks-{uuid.uuid4().hex[:8]}"
        admin = admin_client(bootstrap)
        wait_future(admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic])
        wait_until(lambda: all(len(m) == 3 for m in isr(bootstrap, topic).values()) and len(isr(bootstrap, topic)) == 3,
                   CLUSTER_WAIT_S, "every replica in sync")
        sent = records(3000, 100)
        producer = confluent_producer(bootstrap, acks="all")
        for partition in range(3):
            produce_confluent(producer, topic, sent[partition::3], partition=partition)
        described = wait_future(admin.describe_topics(TopicCollection([topic]))[topic])
        leaders = {p.id: p.leader.id for p in described.partitions}
        assert set(leaders.values()) == BROKERS, f"striped leaders expected, got {leaders}"

        consumer = confluent_consumer(bootstrap, **{"client.rack": "b", "fetch.wait.max.ms": 100})
        got = []
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in leaders])
            deadline = time.monotonic() + 60
            while len(got) < len(sent):
                assert time.monotonic() < deadline, f"read {len(got)} of {len(sent)} records"
                for msg in consumer.consume(num_messages=1000, timeout=0.5):
                    assert not msg.error(), msg.error()
                    got.append(msg.value())
        finally:
            consumer.close()

        assert sorted(got) == sorted(r.value for r in sent)
        out = {node_id: value(scrape(port), "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
               for node_id, port in metrics_ports.items()}
        payload = sum(len(r.value) for r in sent)
        assert out[2] >= payload, f"the rack-b broker sent {out[2]} bytes of {payload}: {out}"
        assert out[1] == 0 and out[3] == 0, f"brokers outside rack b sent records to the consumer: {out}"
        replicated = {node_id: value(scrape(port), "kafka_server_brokertopicmetrics_replicationbytesout_total",
                                     topic=topic)
                      for node_id, port in metrics_ports.items()}
        assert all(v > 0 for v in replicated.values()), f"every leader replicated to its followers: {replicated}"


THROTTLE_BYTES_PER_S = 256 * 1024
FETCH_MAX_BYTES = 64 * 1024


def follower_log_bytes(cluster: Cluster, node_id: int, topic: str) -> int:
    return sum(f.stat().st_size for f in cluster.nodes[node_id].data_dir.glob(f"{topic}-0/*.log"))


def configs(cluster: Cluster, *args: str) -> None:
    admin_ok(cluster.nodes[1].process, "configs", "--alter", *args)


@pytest.mark.parametrize("sides", [["leader"], ["follower"]])
def test_a_restarted_follower_catches_up_at_the_throttled_rate_until_the_throttle_goes(tmp_path, sides):
    overrides = {"replica.fetch.max.bytes": str(FETCH_MAX_BYTES), "replica.fetch.backoff.ms": "100"}
    with start_cluster(tmp_path, overrides) as cluster:
        bootstrap = cluster.nodes[1].bootstrap
        topic = f"throttled-{uuid.uuid4().hex[:8]}"
        admin = admin_client(bootstrap)
        wait_future(admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])])[topic])
        wait_until(lambda: isr(bootstrap, topic).get(0) == BROKERS, CLUSTER_WAIT_S, "every replica in sync")
        cluster.stop(3)
        wait_until(lambda: isr(bootstrap, topic).get(0) == {1, 2}, CLUSTER_WAIT_S, "3 out of the ISR")
        # Batches well below a fetch, so the rate is not measured in whole megabytes.
        producer = confluent_producer(bootstrap, acks="all", **{"batch.size": FETCH_MAX_BYTES // 4})
        produce_confluent(producer, topic, records(4096, 1024))
        leader_bytes = follower_log_bytes(cluster, 1, topic)

        rates = ",".join(f"{side}.replication.throttled.rate={THROTTLE_BYTES_PER_S}" for side in sides)
        configs(cluster, "--entity-type", "brokers", "--entity-default", "--add-config", rates)
        replicas = ",".join(f"{side}.replication.throttled.replicas=*" for side in sides)
        configs(cluster, "--topic", topic, "--add-config", replicas)
        started = time.monotonic()
        cluster.restart(3)
        target = leader_bytes // 2
        wait_until(lambda: follower_log_bytes(cluster, 3, topic) >= target, 120, "the follower half caught up")
        took = time.monotonic() - started
        print(f"{'+'.join(sides)} throttle: {target} bytes in {took:.2f}s = {target / took / 1024:.0f} KiB/s "
              f"(throttle {THROTTLE_BYTES_PER_S // 1024} KiB/s)")
        # The rate lets a window's worth and a fetch or two through at once;
        # beyond that the follower cannot go faster than the throttle.
        allowance = THROTTLE_BYTES_PER_S + 2 * FETCH_MAX_BYTES
        assert took >= 0.5 * (target - allowance) / THROTTLE_BYTES_PER_S, f"{target} bytes in {took:.2f}s"
        assert 3 not in isr(bootstrap, topic)[0], "the follower joined the ISR while half behind"

        rates = ",".join(f"{side}.replication.throttled.rate" for side in sides)
        configs(cluster, "--entity-type", "brokers", "--entity-default", "--delete-config", rates)
        unthrottled = time.monotonic()
        wait_until(lambda: isr(bootstrap, topic).get(0) == BROKERS, CLUSTER_WAIT_S, "3 back in the ISR")
        print(f"unthrottled: the rest ({leader_bytes - target} bytes) in {time.monotonic() - unthrottled:.2f}s")
        assert follower_log_bytes(cluster, 3, topic) == leader_bytes
