"""The Prometheus endpoint (`metrics.listener`), scraped while real clients
produce and consume: counters move by exactly what went through the broker.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from harness import (
    OutRecord,
    admin_client,
    confluent_consumer,
    confluent_producer,
    consume_confluent,
    create_topic,
    free_port,
    future_error,
    new_topic,
    produce_confluent,
    wait_until,
)
from confluent_kafka import TopicPartition

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics, keyed by (name, labels); malformed lines fail the test."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            assert line.startswith(("# HELP ", "# TYPE ")) or not line, line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        name, labels, value = match.groups()
        samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)


@pytest.fixture
def metered(broker_factory):
    port = free_port()
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{port}"})
    return broker, port


def records(start: int, count: int) -> list[OutRecord]:
    return [OutRecord(b"k%d" % i, b"v" * 200, (), 0) for i in range(start, start + count)]


def test_counters_move_by_what_was_produced_and_consumed(metered):
    broker, port = metered
    create_topic(broker.bootstrap, "metered", partitions=2)
    producer = confluent_producer(broker.bootstrap, **{"linger.ms": 5})
    produce_confluent(producer, "metered", records(0, 500), partition=0)
    middle = scrape(port)

    produce_confluent(producer, "metered", records(500, 700), partition=0)
    after = scrape(port)
    topic = {"topic": "metered"}
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", **topic) == 1200
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", **topic) - value(
        middle, "kafka_server_brokertopicmetrics_messagesin_total", **topic
    ) == 700
    # Batches are stored as received: bytes in grow exactly as the log does.
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", **topic) - value(
        middle, "kafka_server_brokertopicmetrics_bytesin_total", **topic
    )
    log_size = value(after, "kafka_log_log_size", partition=0, **topic) - value(
        middle, "kafka_log_log_size", partition=0, **topic
    )
    assert bytes_in == log_size and bytes_in > 700 * 200
    on_disk = sum(p.stat().st_size for p in (broker.data_dir / "metered-0").glob("*.log"))
    assert value(after, "kafka_log_log_size", partition=0, **topic) == on_disk
    assert value(after, "kafka_log_log_logendoffset", partition=0, **topic) == 1200
    assert value(after, "kafka_log_log_logendoffset", partition=1, **topic) == 0

    produce_count = value(after, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produce_count >= 2
    histogram = "kafka_network_requestmetrics_totaltimems"
    assert value(after, f"{histogram}_bucket", request="Produce", le="+Inf") == value(
        after, f"{histogram}_count", request="Produce"
    )
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in after.items()
        if name == f"{histogram}_bucket" and dict(labels)["request"] == "Produce" and dict(labels)["le"] != "+Inf"
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets), "cumulative buckets never decrease"

    consume_confluent(broker.bootstrap, "metered", {0: 1200})
    read = scrape(port)
    bytes_out = value(read, "kafka_server_brokertopicmetrics_bytesout_total", **topic)
    assert bytes_out >= value(read, "kafka_log_log_size", partition=0, **topic)
    assert value(read, "process_resident_memory_bytes") > 1_000_000
    assert value(read, "kafka_server_socketservermetrics_connection_count") >= 1
    assert value(read, "kafka_server_replicamanager_partitioncount") >= 2


def test_consumer_lag_follows_commits(metered):
    broker, port = metered
    create_topic(broker.bootstrap, "lagging")
    produce_confluent(confluent_producer(broker.bootstrap), "lagging", records(0, 100), partition=0)
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "watchers", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("lagging", 0, 40)], asynchronous=False)
    finally:
        consumer.close()
    labels = {"group": "watchers", "topic": "lagging", "partition": 0}
    wait_until(lambda: value(scrape(port), "kafka_consumergroup_lag", **labels) == 60, 10, "lag of 60")
    assert value(scrape(port), "kafka_consumergroup_current_offset", **labels) == 40


def test_errors_are_counted_and_other_paths_are_not_found(metered):
    broker, port = metered
    create_topic(broker.bootstrap, "strict", config={"max.message.bytes": "1000"})
    producer = confluent_producer(broker.bootstrap, **{"message.max.bytes": 100_000})
    producer.produce("strict", value=b"x" * 5000, partition=0)
    producer.flush(10)
    samples = scrape(port)
    assert value(samples, "kafka_network_requestmetrics_errors_total", request="Produce", error="MessageTooLarge") >= 1
    assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="strict") >= 1
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert missing.value.code == 404


def test_every_apis_error_codes_are_counted(metered):
    broker, port = metered
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, "counted")
    assert future_error(admin.delete_topics(["never-created"])["never-created"]).code() == 3
    assert future_error(admin.create_topics([new_topic("counted")])["counted"]) is not None
    samples = scrape(port)
    errors = "kafka_network_requestmetrics_errors_total"
    assert value(samples, errors, request="DeleteTopics", error="UnknownTopicOrPartition") == 1
    assert value(samples, errors, request="CreateTopics", error="TopicAlreadyExists") == 1
    # Successes count as error NONE, as in Kafka's ErrorsPerSec.
    assert value(samples, errors, request="CreateTopics", error="None") == 1
    assert value(samples, errors, request="ApiVersions", error="None") >= 1


# ---------------------------------------------------------------- replica manager gauges


def test_replica_manager_gauges_agree_with_metadata(metered):
    broker, port = metered
    create_topic(broker.bootstrap, "gauged", partitions=3)
    create_topic(broker.bootstrap, "gauged-too", partitions=2)
    produce_confluent(confluent_producer(broker.bootstrap), "gauged", records(0, 10), partition=1)
    metadata = admin_client(broker.bootstrap).list_topics(timeout=10)
    partitions = [p for topic in metadata.topics.values() for p in topic.partitions.values()]
    assert len(partitions) >= 5
    samples = scrape(port)
    assert value(samples, "kafka_server_replicamanager_partitioncount") == len(partitions)
    assert value(samples, "kafka_server_replicamanager_leadercount") == sum(p.leader == 1 for p in partitions)
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == sum(
        p.leader == 1 and len(p.isrs) < len(p.replicas) for p in partitions
    )
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert value(samples, "kafka_log_log_logendoffset", topic="gauged", partition=1) == 10
