"""The web console's pages and actions against a real broker: what each page
shows agrees with the Kafka clients and `strom` tools, every action goes
through (and is checked like) the Kafka admin APIs, and the console keeps the
web's usual attacks out (CSRF, markup in user data, unbounded requests,
missing credentials).

One broker serves the whole module; each test uses its own topics and groups.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from console_client import ConsoleClient, error_of, facts, start_console_broker, table
from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_cli,
    admin_client,
    admin_ok,
    confluent_producer,
    consume_confluent,
    create_topic,
    free_port,
    produce_confluent,
    strom_binary,
    topic_partitions,
    wait_future,
    wait_until,
    watermarks_confluent,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker, port = start_console_broker(tmp_path_factory.mktemp("console"))
    yield broker, port
    broker.close()


@pytest.fixture
def broker(served):
    return served[0]


@pytest.fixture
def console(served):
    return ConsoleClient(served[1])


def records(count: int, prefix: str = "r") -> list[OutRecord]:
    now = int(time.time() * 1000)
    return [OutRecord(f"{prefix}-key-{i}".encode(), f"{prefix}-value-{i}".encode(), (), now + i) for i in range(count)]


def produce(broker, topic: str, batch: list[OutRecord], partition: int | None = None):
    producer = confluent_producer(broker.bootstrap)
    return produce_confluent(producer, topic, batch, partition=partition)


def committed_group(broker, group: str, topic: str, count: int) -> None:
    """A group that consumed and committed `count` records of partition 0, then left (Empty)."""
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        assert seen == count
        consumer.commit(offsets=[TopicPartition(topic, 0, count)], asynchronous=False)
    finally:
        consumer.close()


# ---------------------------------------------------------------- pages


def test_overview_shows_the_cluster_its_broker_and_partition_health(broker, console):
    create_topic(broker.bootstrap, "overview-topic", partitions=3)
    page = console.page("/")
    summary = facts(page)
    metadata = admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S)
    assert summary["Cluster id"] == metadata.cluster_id
    assert summary["Active controller"] == str(metadata.controller_id) == "1"
    assert int(summary["Topics"]) == len(metadata.topics)
    assert int(summary["Partitions"]) == sum(len(t.partitions) for t in metadata.topics.values())
    assert summary["Under-replicated partitions"] == "0" and summary["Offline partitions"] == "0"
    assert table(page, "brokers") == [["1", broker.bootstrap, "-", "running", "broker, active controller"]]
    [voter] = table(page, "quorum")
    assert voter[:2] == ["1", "voter, leader"]
    assert 'figcaption>Throughput<' in page and 'figcaption>Connections<' in page


def test_overview_counts_throughput_and_connections_from_the_metrics_history(broker, console):
    create_topic(broker.bootstrap, "throughput")
    producer = confluent_producer(broker.bootstrap)
    deadline = time.monotonic() + 30
    # Keep producing until a sample has seen bytes flow; bounded in time.
    while True:
        produce_confluent(producer, "throughput", records(50))
        summary = facts(console.page("/"))
        if summary["Bytes in /s"] not in ("0", "-"):
            break
        assert time.monotonic() < deadline, summary
        time.sleep(0.2)
    assert int(summary["Live connections"]) >= 1, "the producer is connected"
    assert summary["Messages in /s"] not in ("0", "-")


def test_a_kraft_nodes_overview_names_its_broker_endpoint_and_its_quorum(broker_factory):
    from test_storage_format import KraftNode, random_uuid

    console_port = free_port()
    node = KraftNode(broker_factory(start=False), **{"console.listener": f"http://127.0.0.1:{console_port}"})
    # The controller listener first: the console must still describe the broker listener.
    plaintext, controller = node.broker.overrides["listeners"].split(",")
    node.broker.overrides["listeners"] = f"{controller},{plaintext}"
    assert node.format(random_uuid(), "--standalone").returncode == 0
    node.broker.start()
    page = ConsoleClient(console_port).page("/")
    assert table(page, "brokers") == [["1", node.broker.bootstrap, "-", "running", "broker, active controller"]]
    assert table(page, "quorum")[0][:2] == ["1", "voter, leader"]


def test_topics_list_shows_partitions_replication_size_and_configs(broker, console):
    create_topic(broker.bootstrap, "listed", partitions=2, config={"retention.ms": "3600000", "cleanup.policy": "compact"})
    produce(broker, "listed", records(20))
    rows = {row[0]: row for row in table(console.page("/topics"), "topics")}
    name, partitions, replication, size, retention, cleanup, _ = rows["listed"]
    assert (partitions, replication, retention, cleanup) == ("2", "1", "3600000", "compact")
    assert size != "0 B"


def test_topic_page_shows_each_partition_as_the_clients_see_it(broker, console):
    create_topic(broker.bootstrap, "detailed", partitions=2)
    produce(broker, "detailed", records(7), partition=1)
    page = console.page("/topic", name="detailed")
    marks = watermarks_confluent(broker.bootstrap, "detailed", [0, 1])
    rows = table(page, "partitions")
    assert [(r[0], r[1], r[2], r[3], int(r[4]), int(r[5])) for r in rows] == [
        (str(p), "1", "1", "1", marks[p][0], marks[p][1]) for p in (0, 1)
    ]
    assert rows[0][6] == "0 B" and rows[1][6] != "0 B"
    configs = {r[0]: r for r in table(page, "configs")}
    assert configs["retention.ms"][2] == "DEFAULT_CONFIG"
    assert "figcaption>Messages in<" in page


def test_an_unknown_topic_or_page_is_a_404(console):
    assert console.get("/topic", name="missing").status == 404
    assert console.get("/messages", topic="missing").status == 404
    assert console.get("/group", id="missing").status == 404
    assert console.get("/no-such-page").status == 404


# ---------------------------------------------------------------- topic actions


def test_a_topic_created_in_the_console_exists_with_its_partitions_and_configs(broker, console):
    notice = console.act("/topics/create", name="made-here", partitions=3, replication="", configs="retention.ms=60000\ncleanup.policy=compact,delete")
    assert notice == "created topic made-here"
    admin = admin_client(broker.bootstrap)
    assert len(topic_partitions(admin, "made-here")) == 3
    resource = ConfigResource(ResourceType.TOPIC, "made-here")
    configs = wait_future(admin.describe_configs([resource])[resource])
    assert configs["retention.ms"].value == "60000"
    assert configs["cleanup.policy"].value == "compact,delete"


def test_topic_creation_errors_are_the_brokers(broker, console):
    create_topic(broker.bootstrap, "exists-already")
    taken = console.post("/topics/create", name="exists-already", partitions=1)
    assert taken.status == 422 and "TOPIC_ALREADY_EXISTS" in error_of(taken.body)
    bad = console.post("/topics/create", name="bad name!", partitions=1)
    assert bad.status == 422 and "INVALID_TOPIC_EXCEPTION" in error_of(bad.body)
    config = console.post("/topics/create", name="bad-config", partitions=1, configs="retention.ms=soon")
    assert config.status == 422 and "INVALID_CONFIG" in error_of(config.body)
    assert "bad-config" not in admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics


def test_partitions_are_added_and_never_removed(broker, console):
    create_topic(broker.bootstrap, "growing", partitions=1)
    assert console.act("/topic/partitions", name="growing", count=4) == "growing now has 4 partitions"
    assert len(topic_partitions(admin_client(broker.bootstrap), "growing")) == 4
    fewer = console.post("/topic/partitions", name="growing", count=2)
    assert fewer.status == 422 and "INVALID_PARTITIONS" in error_of(fewer.body)


def test_configs_are_set_and_deleted_through_incremental_alter_configs(broker, console):
    create_topic(broker.bootstrap, "tuned")
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, "tuned")
    console.act("/topic/config", name="tuned", key="retention.ms", value="123456", op="set")
    assert wait_future(admin.describe_configs([resource])[resource])["retention.ms"].value == "123456"
    row = {r[0]: r for r in table(console.page("/topic", name="tuned"), "configs")}["retention.ms"]
    assert row[1:] == ["123456", "DYNAMIC_TOPIC_CONFIG"]
    console.act("/topic/config", name="tuned", key="retention.ms", value="", op="delete")
    assert wait_future(admin.describe_configs([resource])[resource])["retention.ms"].value == "604800000"
    bad = console.post("/topic/config", name="tuned", key="no.such.config", value="1", op="set")
    assert bad.status == 422 and "INVALID_CONFIG" in error_of(bad.body)


def test_a_topic_is_deleted_only_when_confirmed_and_never_an_internal_one(broker, console):
    create_topic(broker.bootstrap, "doomed")
    unconfirmed = console.post("/topic/delete", name="doomed", confirm="other")
    assert unconfirmed.status == 422
    assert "doomed" in admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    assert console.act("/topic/delete", name="doomed", confirm="doomed") == "deleted topic doomed"
    wait_until(lambda: "doomed" not in admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics, 15, "doomed gone")
    committed_group(broker, "makes-offsets-topic", _topic_with(broker, "for-offsets", 1), 1)
    internal = console.post("/topic/delete", name="__consumer_offsets", confirm="__consumer_offsets")
    assert internal.status == 422 and "internal topic" in error_of(internal.body)
    assert "__consumer_offsets" in admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics


def _topic_with(broker, name: str, count: int) -> str:
    create_topic(broker.bootstrap, name)
    produce(broker, name, records(count))
    return name


# ---------------------------------------------------------------- message browser


def test_the_browser_reads_newest_or_oldest_first_from_an_offset_or_a_time(broker, console):
    create_topic(broker.bootstrap, "browsed")
    base = 1_700_000_000_000
    batch = [OutRecord(f"k{i}".encode(), f"v{i}".encode(), (), base + i * 1000) for i in range(30)]
    produce(broker, "browsed", batch)
    offsets = lambda page: [int(r[0]) for r in table(page, "records")]
    assert offsets(console.page("/messages", topic="browsed", limit=5)) == [29, 28, 27, 26, 25]
    assert offsets(console.page("/messages", topic="browsed", order="oldest", limit=3)) == [0, 1, 2]
    assert offsets(console.page("/messages", topic="browsed", order="oldest", offset=10, limit=3)) == [10, 11, 12]
    assert offsets(console.page("/messages", topic="browsed", offset=10, limit=3)) == [10, 9, 8]
    by_time = console.page("/messages", topic="browsed", order="oldest", time="2023-11-14T22:13:40.000Z", limit=2)
    assert offsets(by_time) == [20, 21], "the first record at or after the time"
    assert table(by_time, "records")[0][1:4] == ["2023-11-14T22:13:40.000Z", "k20", "v20"]
    assert offsets(console.page("/messages", topic="browsed", search="V1", order="oldest")) == [1] + list(range(10, 20))
    assert len(table(console.page("/messages", topic="browsed", limit=100_000), "records")) == 30
    assert console.get("/messages", topic="browsed", offset="soon").status == 400


def test_a_search_stops_at_the_scan_bound_and_says_so(broker, console):
    create_topic(broker.bootstrap, "haystack")
    now = int(time.time() * 1000)
    produce(broker, "haystack", [OutRecord(None, b"hay", (), now) for _ in range(10_050)] + [OutRecord(None, b"needle", (), now)])
    newest = console.page("/messages", topic="haystack", search="needle")
    assert [r[0] for r in table(newest, "records")] == ["10050"]
    oldest = console.page("/messages", topic="haystack", search="needle", order="oldest")
    assert table(oldest, "records") == [] and "stopped at the scan bound of 10000 records" in oldest
    # Newest first steps back in windows smaller than a batch: each batch is still read once.
    absent = console.page("/messages", topic="haystack", search="absent")
    assert "10000 examined — stopped at the scan bound" in absent


def test_values_show_as_json_text_or_hex_and_markup_is_escaped(broker, console):
    create_topic(broker.bootstrap, "shown")
    script = b"<script>alert(1)</script>"
    batch = [
        OutRecord(script, b'{"user": "<b>1</b>", "n": 2}', (("h<i>", script),), int(time.time() * 1000)),
        OutRecord(None, bytes([0, 1, 255]), (), int(time.time() * 1000)),
    ]
    produce(broker, "shown", batch)
    page = console.page("/messages", topic="shown", order="oldest")
    assert "<script>alert" not in page and "<b>1" not in page and "<i>" not in page
    first, second = table(page, "records")
    assert first[2] == script.decode()
    assert json.loads(first[3]) == {"user": "<b>1</b>", "n": 2}
    assert first[4] == f"h<i>: {script.decode()}"
    assert second[2] == "null" and second[3] == "00 01 ff"
    assert table(console.page("/messages", topic="shown", order="oldest", format="hex"), "records")[0][2] == script.hex(" ")
    assert table(console.page("/messages", topic="shown", order="oldest", format="text"), "records")[0][3] == '{"user": "<b>1</b>", "n": 2}'


def test_a_record_produced_in_the_console_is_read_by_a_kafka_client(broker, console):
    create_topic(broker.bootstrap, "typed", partitions=2)
    notice = console.act("/messages/produce", topic="typed", partition=1, key="user-7", value="hello <world>", headers="source=console\ntrace=abc")
    assert notice == "produced at offset 0"
    got = consume_confluent(broker.bootstrap, "typed", {1: 1})[1]
    assert [(r.key, r.value, r.headers) for r in got] == [(b"user-7", b"hello <world>", (("source", b"console"), ("trace", b"abc")))]
    missing = console.post("/messages/produce", topic="typed", partition=9, key="", value="x", headers="")
    assert missing.status == 422 and "UNKNOWN_TOPIC_OR_PARTITION" in error_of(missing.body)


# ---------------------------------------------------------------- groups


def test_group_pages_show_state_offsets_and_the_lag_strom_groups_prints(broker, console):
    _topic_with(broker, "lagging", 10)
    committed_group(broker, "laggards", "lagging", 4)
    rows = {r[0]: r for r in table(console.page("/groups"), "groups")}
    assert rows["laggards"][1:] == ["classic", "Empty", "", "6"], "offsets only: no protocol type"
    page = console.page("/group", id="laggards")
    [described] = json.loads(admin_ok(broker, "groups", "--describe", "--group", "laggards", "--format", "json"))
    expected = [[p["topic"], str(p["partition"]), str(p["current_offset"]), str(p["log_end_offset"]), str(p["lag"]), "-"] for p in described["partitions"]]
    assert table(page, "offsets") == expected == [["lagging", "0", "4", "10", "6", "-"]]
    assert facts(page)["State"] == "Empty" and facts(page)["Total lag"] == "6"
    assert "figcaption>Total lag<" in page
    # The sampler (every 500 ms here) puts the lag into the hour-long history the plot draws.
    wait_until(lambda: '<span class="key s0">lag: 6 records</span>' in console.page("/group", id="laggards"), 15, "the lag plotted")


def test_an_active_groups_members_and_assignment_are_shown(broker, console):
    _topic_with(broker, "consumed", 3)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live-group", "auto.offset.reset": "earliest", "client.id": "console-test"})
    try:
        consumer.subscribe(["consumed"])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        page = console.page("/group", id="live-group")
        assert facts(page)["State"] == "Stable"
        [member] = table(page, "members")
        assert member[1] == "console-test" and member[3] == "consumed-0"
        refused = console.post("/group/reset", id="live-group", topics="", scenario="earliest", value="", execute="true")
        assert refused.status == 422
        assert "can only be reset if the group 'live-group' is inactive, but the current state is Stable" in error_of(refused.body)
    finally:
        consumer.close()


def test_a_consumer_protocol_groups_members_and_assignment_are_shown(broker, console):
    create_topic(broker.bootstrap, "heartbeats", partitions=2)
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "kip848-group",
        "group.protocol": "consumer",
        "client.id": "new-protocol",
        "auto.offset.reset": "earliest",
    })
    try:
        consumer.subscribe(["heartbeats"])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        rows = {r[0]: r for r in table(console.page("/groups"), "groups")}
        assert rows["kip848-group"][1:3] == ["consumer", "Stable"]
        page = console.page("/group", id="kip848-group")
        assert facts(page)["Protocol type"] == "consumer" and facts(page)["Protocol"] == "uniform"
        [member] = table(page, "members")
        assert member[1] == "new-protocol" and sorted(member[3].split(", ")) == ["heartbeats-0", "heartbeats-1"]
    finally:
        consumer.close()


def test_offsets_reset_by_the_rules_of_strom_groups(broker, console):
    _topic_with(broker, "rewound", 10)
    committed_group(broker, "rewinders", "rewound", 8)
    plan = console.post("/group/reset", id="rewinders", topics="rewound", scenario="shift-by", value="-3")
    assert plan.status == 200 and table(plan.body, "plan") == [["rewinders", "rewound", "0", "5"]]
    committed = lambda: {r[0]: r[2] for r in table(console.page("/group", id="rewinders"), "offsets")}["rewound"]
    assert committed() == "8", "a dry run commits nothing"
    scenarios = [
        ("shift-by", "-3", "5"), ("offset", "999", "10"), ("earliest", "", "0"), ("current", "", "0"),
        ("datetime", "9999-12-31T00:00", "10"), ("datetime", "1970-01-01T00:00:00", "0"), ("latest", "", "10"),
        ("offset", "2", "2"),
    ]
    for scenario, value, expected in scenarios:
        console.act("/group/reset", id="rewinders", topics="rewound:0", scenario=scenario, value=value, execute="true")
        assert committed() == expected, scenario
    [described] = json.loads(admin_ok(broker, "groups", "--describe", "--group", "rewinders", "--format", "json"))
    assert described["partitions"][0]["current_offset"] == 2
    bad = console.post("/group/reset", id="rewinders", topics="nope", scenario="earliest", value="", execute="true")
    assert bad.status == 422 and "UNKNOWN_TOPIC_OR_PARTITION" in error_of(bad.body)
    missing = console.post("/group/reset", id="rewinders", topics="rewound:0,9", scenario="earliest", value="", execute="true")
    assert missing.status == 422 and error_of(missing.body) == 'The partitions "rewound-9" do not exist'
    negative = console.post("/group/reset", id="rewinders", topics="rewound:-1", scenario="earliest", value="")
    assert negative.status == 422 and "Invalid partition specified in topic arg 'rewound:-1'" in error_of(negative.body)
    cli = admin_cli(broker, "groups", "--reset-offsets", "--group", "rewinders", "--topic", "rewound:0,9", "--to-earliest", "--execute")
    assert cli.returncode != 0 and 'The partitions "rewound-9" do not exist' in cli.stderr
    assert committed() == "2"


def test_a_group_is_deleted_only_when_confirmed(broker, console):
    _topic_with(broker, "abandoned", 1)
    committed_group(broker, "leavers", "abandoned", 1)
    assert console.post("/group/delete", id="leavers", confirm="x").status == 422
    assert console.act("/group/delete", id="leavers", confirm="leavers") == "deleted group leavers"
    listed = admin_ok(broker, "groups", "--list")
    assert "leavers" not in listed.split()
    assert console.get("/group", id="leavers").status == 404


# ---------------------------------------------------------------- broker page


def test_broker_page_shows_configs_log_dirs_transactions_and_producers(broker, console):
    _topic_with(broker, "txn-target", 0)
    producer = confluent_producer(broker.bootstrap, **{"transactional.id": "console-txn", "enable.idempotence": True})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-target", b"open", partition=0)
    producer.flush(30)
    try:
        page = console.page("/broker")
        configs = {r[0]: r for r in table(page, "configs")}
        assert configs["log.dirs"][1] == str(broker.data_dir) and configs["log.dirs"][2] == "STATIC_BROKER_CONFIG"
        assert configs["num.partitions"][1:3] == ["1", "DEFAULT_CONFIG"]
        [log_dir] = table(page, "log-dirs")
        assert log_dir[0] == str(broker.data_dir) and log_dir[1] == "NONE"
        transactions = {r[0]: r for r in table(page, "transactions")}
        assert transactions["console-txn"][3] == "Ongoing"
        assert "txn-target-0" in transactions["console-txn"][6]
        producers = [r for r in table(page, "producers") if r[0] == "txn-target"]
        assert len(producers) == 1 and producers[0][6] == "0", "the open transaction starts at offset 0"
    finally:
        producer.abort_transaction(30)


# ---------------------------------------------------------------- safety


def test_actions_need_the_csrf_token_of_the_browsers_cookie(broker, console):
    other = ConsoleClient(console.port)
    assert other.post("/topics/create", csrf="", name="forged").status == 403
    assert other.post("/topics/create", csrf="0" * 32, name="forged").status == 403, "no cookie"
    token = console.csrf()
    forged_origin = console.request(
        "POST", "/topics/create", f"csrf={token}&name=forged".encode(), {"Origin": "http://evil.example"}
    )
    assert forged_origin.status == 403
    cross_site = console.request(
        "POST", "/topics/create", f"csrf={token}&name=forged".encode(), {"Sec-Fetch-Site": "cross-site"}
    )
    assert cross_site.status == 403
    assert "forged" not in admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    assert console.get("/topics/create").status == 404, "actions are POST only"
    assert console.request("PUT", "/topics").status == 405
    page = console.page("/topics")
    assert f'name="csrf" value="{token}"' in page
    cookie = ConsoleClient(console.port).get("/").headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_without_auth_a_page_asked_for_by_another_host_name_is_refused(console):
    """DNS rebinding: a site whose name now resolves to 127.0.0.1 must not read the console or post its forms."""
    rebound = console.request("GET", "/topics", headers={"Host": f"rebound.example:{console.port}"})
    assert rebound.status == 403 and "csrf" not in rebound.body
    token = console.csrf()
    forged = console.request(
        "POST",
        "/topics/create",
        f"csrf={token}&name=rebound".encode(),
        {"Host": f"rebound.example:{console.port}", "Origin": f"http://rebound.example:{console.port}"},
    )
    assert forged.status == 403
    assert console.request("GET", "/", headers={"Host": f"localhost:{console.port}"}).status == 200


def test_pages_forbid_framing_and_foreign_scripts(console):
    reply = console.get("/")
    policy = reply.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert reply.headers["x-frame-options"] == "DENY" and reply.headers["x-content-type-options"] == "nosniff"
    for asset, kind in [("/assets/console.css", "text/css"), ("/assets/console.js", "text/javascript")]:
        reply = console.get(asset)
        assert reply.status == 200 and reply.headers["content-type"].startswith(kind)


def test_numbers_at_the_edges_of_an_i64_are_answered_without_a_crash(broker, console):
    create_topic(broker.bootstrap, "edges", partitions=2)
    produce(broker, "edges", records(3), partition=0)
    # Any client may commit offsets past the log end: the lags add up beyond an i64.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "overcommitted", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("edges", p, 2**63 - 1) for p in (0, 1)], asynchronous=False)
    finally:
        consumer.close()
    assert {r[0]: r for r in table(console.page("/groups"), "groups")}["overcommitted"][4] == str(-(2**63))
    assert facts(console.page("/group", id="overcommitted"))["Total lag"] == str(-(2**63))
    newest = console.page("/messages", topic="edges", offset=2**63 - 1)
    assert [r[0] for r in table(newest, "records")] == ["2", "1", "0"]
    for time_param in ["99999999999999-01-01T00:00", "-1", "2024-05-01T-1:00"]:
        assert console.get("/messages", topic="edges", time=time_param).status == 400, time_param
    far = console.post("/group/reset", id="overcommitted", topics="edges", scenario="datetime", value="99999999999999-01-01T00:00")
    assert far.status == 422 and "is not" in error_of(far.body)


def raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_requests_are_bounded_in_size_and_form(console):
    status = lambda data: raw_exchange(console.port, data).split(b"\r\n", 1)[0]
    assert status(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n") == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert status(b"POST /topics/create HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n") == b"HTTP/1.1 413 Content Too Large"
    assert status(b"POST /topics/create HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") == b"HTTP/1.1 501 Not Implemented"
    assert status(b"POST /topics/create HTTP/1.1\r\n\r\n") == b"HTTP/1.1 411 Length Required"
    assert status(b"NONSENSE\r\n\r\n") == b"HTTP/1.1 400 Bad Request"
    assert console.get("/").status == 200, "the console still serves"


def test_one_address_trickling_requests_in_cannot_take_every_connection(console):
    """Slowloris from 127.0.0.2: more idle connections than the console serves at once."""
    idle = []
    try:
        for _ in range(70):
            sock = socket.create_connection(("127.0.0.1", console.port), timeout=5, source_address=("127.0.0.2", 0))
            idle.append(sock)
            try:
                sock.sendall(b"GET / HTTP/1.1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused beyond the address's share
        # The idle ones would hold every slot until their 10 s read timeout.
        with socket.create_connection(("127.0.0.1", console.port), timeout=5) as sock:
            sock.sendall(f"GET /assets/console.css HTTP/1.1\r\nHost: 127.0.0.1:{console.port}\r\n\r\n".encode())
            assert sock.recv(64).startswith(b"HTTP/1.1 200 OK")
    finally:
        for sock in idle:
            sock.close()


def test_a_head_trickling_in_is_read_with_its_blank_line_split_across_reads(console):
    pieces = [f"GET /assets/console.css HTTP/1.1\r\nHost: 127.0.0.1:{console.port}\r".encode(), b"\n\r", b"\n"]
    with socket.create_connection(("127.0.0.1", console.port), timeout=15) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(0.05)  # not a wait for anything: apart, the pieces arrive in separate reads
        assert sock.recv(64).startswith(b"HTTP/1.1 200 OK")


def test_basic_auth_guards_every_page_and_asset(tmp_path):
    broker, port = start_console_broker(tmp_path, **{"console.auth": "basic", "console.auth.basic.users": "alice:s3cret,bob:pw"})
    try:
        assert ConsoleClient(port).get("/").status == 401
        assert ConsoleClient(port).get("/assets/console.js").status == 401
        challenge = ConsoleClient(port).get("/topics").headers["www-authenticate"]
        assert challenge.startswith("Basic realm=")
        assert ConsoleClient(port, ("alice", "wrong")).get("/").status == 401
        alice = ConsoleClient(port, ("alice", "s3cret"))
        page = alice.page("/")
        assert '<span class="user">alice</span>' in page
        alice.act("/topics/create", name="by-alice", partitions=1)
        assert "by-alice" in admin_client(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
        described = admin_ok(broker, "configs", "--describe", "--broker", "1", "--all")
        assert "s3cret" not in described and "console.auth=basic" in described
    finally:
        broker.close()


def test_no_auth_is_refused_off_loopback_and_the_console_is_off_unless_configured(tmp_path, broker_factory):
    done = subprocess.run(
        [str(strom_binary()), "server", "--override", f"log.dirs={tmp_path / 'data'}",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
         "--override", "console.listener=http://0.0.0.0:8080"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0
    assert "console.auth=none is allowed only on a loopback address" in done.stderr + done.stdout
    plain = broker_factory()
    described = admin_ok(plain, "configs", "--describe", "--broker", "1", "--all")
    assert "console.listener=" in described and "console.auth=none" in described
