"""Consumer groups under the classic protocol, driven by real clients.

Groups of confluent-kafka and kafka-python consumers share partitions, hand
them over when a member leaves or dies, and commit what they processed; the
committed offsets survive a clean restart and a kill -9; static members come
back without a rebalance; the admin APIs list, describe and delete groups and
their offsets; cooperative-sticky members hand over only the partitions
that move; and the wire-level error paths of JoinGroup, SyncGroup, Heartbeat
and OffsetCommit answer with Kafka's codes, while OffsetFetch (batched) reads
back exactly what was accepted. Hand-built frames also check what clients
only notice as stalls: a member that dies mid-rebalance expires with its
session, a static leader's restart skips the assignment, an old static
incarnation is fenced, and a parked JoinGroup does not hold up shutdown.

Consumers commit after processing (at-least-once), so a record may be seen
twice across a hand-over but never lost. Sessions are short (6 s, the
broker's minimum) and brokers start with group.initial.rebalance.delay.ms=0,
so rebalances take a heartbeat or two.

Run as a script (`python test_groups.py CONFIG TOPIC`), this file is the body
of a consumer the tests start in a subprocess, to SIGKILL it: it prints what
it is assigned and consumes as JSON lines.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from harness import (
    ADMIN_TIMEOUT_S,
    OutRecord,
    admin_client,
    confluent_producer,
    create_topic,
    future_error,
    now_ms,
    produce_confluent,
    wait_future,
    wait_until,
    watermarks_confluent,
)
from wire import (
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    CommitPartition,
    Connection,
    FetchedOffset,
    call,
    consumer_assignment,
    consumer_subscription,
    find_coordinator,
    find_coordinator_v4_request,
    heartbeat_v4_request,
    join_group_request,
    join_group_v9_request,
    metadata_request,
    offset_commit_v8_request,
    offset_fetch_v8_request,
    parse_find_coordinator_v4,
    parse_heartbeat_v4,
    parse_join_group,
    parse_join_group_v9,
    parse_metadata,
    parse_offset_commit_v8,
    parse_offset_fetch_v8,
    parse_sync_group_v5,
    sync_group_v5_request,
)

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
# The rebalance timeout of librdkafka and kafka-python; far above the session
# timeout, so a wait that ends after it points at the wrong timer.
MAX_POLL_INTERVAL_MS = 45_000
# librdkafka's debug=cgrp line for each heartbeat it sends, stamped with the wall clock.
HEARTBEAT_LOG = re.compile(r"^%7\|(\d+\.\d+)\|HEARTBEAT\|.*Heartbeat for group")
# A rebalance needs a heartbeat to notice it and a join/sync round trip.
REBALANCE_S = 15.0
# Long enough for several heartbeats: a rebalance would have shown by then.
QUIET_WINDOW_S = 3.0
# Errors a commit may meet while the group rebalances; the records stay
# uncommitted and are committed again (or re-consumed by the next owner).
REBALANCE_COMMIT_ERRORS = {
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
}


def group_config(bootstrap: str, group: str, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "check.crcs": True,
        **extra,
    }


def keyed_records(start: int, count: int) -> list[OutRecord]:
    base_ms = now_ms() - 60_000
    return [OutRecord(b"key-%06d" % i, b"value-%06d" % i, (), base_ms + i) for i in range(start, start + count)]


def produce_keyed(bootstrap: str, topic: str, start: int, count: int) -> dict[tuple[int, int], bytes]:
    """Produce records start..start+count; returns key by (partition, offset)."""
    records = keyed_records(start, count)
    producer = confluent_producer(bootstrap, **{"linger.ms": 5, "acks": "all"})
    deliveries = produce_confluent(producer, topic, records)
    return {(d.partition, d.offset): r.key for d, r in zip(deliveries, records)}


def end_offsets_of_keys(expected: dict[tuple[int, int], bytes]) -> dict[int, int]:
    """Per partition, one past the highest produced offset."""
    ends: dict[int, int] = {}
    for p, o in expected:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


# ---------------------------------------------------------------- group members


class GroupMember:
    """A confluent-kafka consumer in a group (subscribe), committing what it processed.

    `pump()` polls once: it serves rebalance callbacks, records what arrives
    and (with `auto_commit_processed`) commits each partition's next offset
    synchronously. A commit refused because of a rebalance is retried on the
    next pump while the partition is still owned, and pending offsets are
    committed when partitions are revoked, as a careful application would.
    `report(kind, data)` sees every event (the subprocess prints them).
    """

    def __init__(
        self,
        config: dict,
        topic: str,
        auto_commit_processed: bool = True,
        report: Callable[[str, object], None] | None = None,
    ):
        self.topic = topic
        self.auto_commit_processed = auto_commit_processed
        self.report = report or (lambda kind, data: None)
        self.events: list[tuple[str, frozenset[int]]] = []
        self.records: list[tuple[int, int, bytes]] = []
        self.processed: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.closed = False

    def _on_assign(self, consumer, partitions):
        assigned = frozenset(tp.partition for tp in partitions)
        self.events.append(("assign", assigned))
        self.report("assign", sorted(assigned))

    def _on_revoke(self, consumer, partitions):
        revoked = frozenset(tp.partition for tp in partitions)
        if self.auto_commit_processed:
            self._commit_pending(revoked)
        for p in revoked:
            self.processed.pop(p, None)
            self.committed.pop(p, None)
        self.events.append(("revoke", revoked))
        self.report("revoke", sorted(revoked))

    def owned(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def member_id(self) -> str:
        return self.consumer.memberid() or ""

    def consumed(self) -> list[tuple[int, int, bytes]]:
        return self.records

    def pump(self, timeout_s: float = 0.1) -> None:
        batch = []
        for msg in self.consumer.consume(num_messages=500, timeout=timeout_s):
            if msg.error():
                raise AssertionError(f"consumer error on {msg.topic()}[{msg.partition()}]: {msg.error()}")
            batch.append((msg.partition(), msg.offset(), msg.key()))
            self.processed[msg.partition()] = msg.offset() + 1
        if batch:
            self.records.extend(batch)
            self.report("records", [[p, o, k.decode()] for p, o, k in batch])
        if self.auto_commit_processed:
            self._commit_pending(self.owned())

    def _commit_pending(self, partitions: Iterable[int]) -> None:
        wanted = set(partitions)
        pending = {p: o for p, o in self.processed.items() if p in wanted and self.committed.get(p) != o}
        if not pending:
            return
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(pending.items())]
        try:
            results = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() in REBALANCE_COMMIT_ERRORS:
                self.report("commit-refused", exc.args[0].name())
                return
            raise AssertionError(f"commit of {pending} failed: {exc}") from exc
        for tp in results or ():
            if tp.error is not None:
                if tp.error.code() in REBALANCE_COMMIT_ERRORS:
                    continue
                raise AssertionError(f"commit of {tp.topic}[{tp.partition}] failed: {tp.error}")
            self.committed[tp.partition] = tp.offset
        self.report("committed", {str(p): o for p, o in sorted(pending.items())})

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


class ChildMember:
    """A GroupMember in a subprocess (this file run as a script), so it can be SIGKILLed.

    Its JSON lines are read on a thread; `owned()` and `records` mirror them.
    """

    def __init__(self, config: dict, topic: str):
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), json.dumps(config), topic],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            # Apart from the events: librdkafka's log lines could split a long event line.
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent,
        )
        self.lock = threading.Lock()
        self.lines: list[str] = []
        self.events: list[tuple[str, object]] = []
        self.records: list[tuple[int, int, bytes]] = []
        self.member_ids: list[str] = []
        self._owned: frozenset[int] = frozenset()
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.log_reader = threading.Thread(target=self._read_log, daemon=True)
        self.log_reader.start()

    def _read_log(self) -> None:
        for line in self.process.stderr:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))
                try:
                    kind, data = json.loads(line)
                except ValueError:
                    continue  # not an event: kept in `lines` for output()
                self.events.append((kind, data))
                if kind == "assign":
                    self._owned = frozenset(data["partitions"])
                    self.member_ids.append(data["member_id"])
                elif kind == "revoke":
                    self._owned = frozenset()
                elif kind == "records":
                    self.records.extend((p, o, k.encode()) for p, o, k in data)

    def owned(self) -> frozenset[int]:
        self.check_alive()
        with self.lock:
            return self._owned

    def pump(self) -> None:
        """The child polls on its own; this only notices that it died."""
        self.check_alive()

    def member_id(self) -> str:
        with self.lock:
            return self.member_ids[-1] if self.member_ids else ""

    def consumed(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return list(self.records)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"child consumer exited with {self.process.returncode}:\n{self.output()}")

    def output(self) -> str:
        with self.lock:
            return "\n".join(self.lines[-40:])

    def last_heartbeat_sent(self) -> float:
        """Wall-clock time of the last heartbeat the child logged (with `debug=cgrp`)."""
        with self.lock:
            times = [float(m.group(1)) for line in self.lines if (m := HEARTBEAT_LOG.match(line))]
        assert times, f"the child logged no heartbeat:\n{self.output()}"
        return times[-1]

    def kill9(self) -> None:
        self.closed = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.reader.join(10)
        self.log_reader.join(10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill9()


class KafkaPythonMember:
    """A kafka-python KafkaConsumer in a group, committing what it processed after each poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf):
        from kafka import KafkaConsumer

        self.topic = topic
        self.records: list[tuple[int, int, bytes]] = []
        self.processed: dict[int, int] = {}
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **conf,
        )
        self.consumer.subscribe([topic])

    def owned(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def consumed(self) -> list[tuple[int, int, bytes]]:
        return self.records

    def pump(self) -> None:
        from kafka import TopicPartition as KTopicPartition
        from kafka.errors import CommitFailedError, RebalanceInProgressError
        from kafka.structs import OffsetAndMetadata

        for tp, batch in self.consumer.poll(timeout_ms=100, max_records=500).items():
            self.records.extend((r.partition, r.offset, r.key) for r in batch)
            self.processed[tp.partition] = batch[-1].offset + 1
        owned = self.owned()
        commit = {
            KTopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
            for p, o in self.processed.items()
            if p in owned
        }
        if commit:
            try:
                self.consumer.commit(commit)
                self.processed.clear()
            except (CommitFailedError, RebalanceInProgressError):
                pass  # retried on the next pump, or re-consumed by the next owner

    def close(self) -> None:
        self.consumer.close(timeout_ms=5_000)


def run_child(config_json: str, topic: str) -> None:
    """The subprocess: a GroupMember that prints its events until it is killed."""

    def say(kind, data):
        print(json.dumps([kind, data]), flush=True)

    member: GroupMember | None = None

    def report(kind, data):
        if kind == "assign":
            data = {"partitions": data, "member_id": member.member_id() if member else ""}
        say(kind, data)

    try:
        member = GroupMember(json.loads(config_json), topic, report=report)
        deadline = time.monotonic() + 240  # never outlive a test that forgot it
        while time.monotonic() < deadline:
            member.pump(0.1)
    except BaseException as exc:  # noqa: BLE001 - the parent shows it when the child exits
        say("error", repr(exc))
        raise


def described(bootstrap: str, group: str):
    admin = admin_client(bootstrap)  # must outlive the future
    return wait_future(admin.describe_consumer_groups([group])[group])


def described_assignment(bootstrap: str, group: str, topic: str) -> dict[str, frozenset[int]]:
    """Per member id, the partitions DescribeGroups says it owns (empty unless Stable)."""
    description = described(bootstrap, group)
    return {
        m.member_id: frozenset(tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic)
        for m in description.members
    }


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The group's committed offsets, asked of the broker with AdminClient.list_consumer_group_offsets."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])
    admin = admin_client(bootstrap)  # must outlive the future
    result = wait_future(admin.list_consumer_group_offsets([request])[group])
    for tp in result.topic_partitions:
        assert tp.error is None, f"offset of {tp.topic}[{tp.partition}]: {tp.error}"
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def all_consumed(members, expected: dict[tuple[int, int], bytes]) -> bool:
    seen = {(p, o) for member in members for p, o, _ in member.consumed()}
    return expected.keys() <= seen


def assert_records_match(members, expected: dict[tuple[int, int], bytes]) -> None:
    """Everything consumed was produced, at the offset it was produced at."""
    for member in members:
        for p, o, key in member.consumed():
            assert expected.get((p, o)) == key, f"consumed {key!r} at {p}/{o}, produced {expected.get((p, o))!r}"


def partitioned_exactly_once(owned_sets: list[frozenset[int]], partitions: int) -> bool:
    """Every partition owned by exactly one member and every member owns some."""
    flat = [p for owned in owned_sets for p in owned]
    return all(owned_sets) and sorted(flat) == list(range(partitions))


# ---------------------------------------------------------------- a group at work


def test_three_members_share_partitions_and_survive_leave_and_kill(broker_factory):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "work", "workers", 6
    create_topic(broker.bootstrap, topic, partitions)
    expected = produce_keyed(broker.bootstrap, topic, 0, 1000)

    config = group_config(broker.bootstrap, group)
    a = GroupMember({**config, "client.id": "member-a"}, topic)
    b = GroupMember({**config, "client.id": "member-b"}, topic)
    # c logs its heartbeats (librdkafka stamps each log line) to bound its session after the kill.
    c = ChildMember({**config, "client.id": "member-c", "debug": "cgrp"}, topic)
    everyone = [a, b, c]

    def pump_live():
        for m in everyone:
            if not m.closed:
                m.pump()

    try:

        def stable_over(members) -> bool:
            pump_live()
            owned = [m.owned() for m in members]
            if not partitioned_exactly_once(owned, partitions):
                return False
            by_member = {m.member_id(): o for m, o in zip(members, owned)}
            return described_assignment(broker.bootstrap, group, topic) == by_member

        wait_until(lambda: stable_over([a, b, c]), 30, "three members owning two partitions each")
        assert [len(m.owned()) for m in (a, b, c)] == [2, 2, 2]
        description = described(broker.bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        assert sorted(m.client_id for m in description.members) == ["member-a", "member-b", "member-c"]

        def drained() -> bool:
            pump_live()
            return all_consumed(everyone, expected)

        wait_until(drained, 60, "the first 1000 records consumed by the group")

        # A clean close sends LeaveGroup: the other two rebalance at once.
        a_owned = a.owned()
        a.close()
        wait_until(lambda: stable_over([b, c]), REBALANCE_S, "b and c to share all partitions after a left")
        assert a_owned <= b.owned() | c.owned()
        expected.update(produce_keyed(broker.bootstrap, topic, 1000, 1000))
        wait_until(drained, 60, "the second 1000 records consumed by b and c")

        # c dies without leaving: only its session timeout frees its partitions.
        c_owned = c.owned()
        c.kill9()
        expected.update(produce_keyed(broker.bootstrap, topic, 2000, 1000))
        wait_until(
            lambda: stable_over([b]),
            SESSION_TIMEOUT_MS / 1000 + REBALANCE_S,
            f"b to take over c's partitions {sorted(c_owned)} after c's session expired",
        )
        # The session runs from c's last heartbeat, not from the kill: a
        # starved heartbeat thread may have sent it well before.
        since_heartbeat = time.time() - c.last_heartbeat_sent()
        assert since_heartbeat >= SESSION_TIMEOUT_MS / 1000 - 0.5, (
            f"c was dropped {since_heartbeat:.1f}s after its last heartbeat, before its session ended"
        )
        wait_until(drained, 60, "all 3000 records consumed")
        assert_records_match(everyone, expected)

        ends = {p: high for p, (_, high) in watermarks_confluent(broker.bootstrap, topic, range(partitions)).items()}
        assert ends == end_offsets_of_keys(expected)

        def committed_to_end():
            pump_live()
            return committed_offsets(broker.bootstrap, group, topic, range(partitions)) == ends

        wait_until(committed_to_end, 30, f"committed offsets to reach the log end offsets {ends}")
    finally:
        for m in everyone:
            m.close()


def test_kafka_python_and_confluent_share_a_group(broker_factory):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "mixed", "mixed-clients", 4
    create_topic(broker.bootstrap, topic, partitions)

    confluent = GroupMember({**group_config(broker.bootstrap, group), "client.id": "librdkafka-member"}, topic)
    kp = KafkaPythonMember(broker.bootstrap, group, topic, client_id="kafka-python-member")
    members = [confluent, kp]
    try:

        def pump_all():
            for m in members:
                m.pump()

        def shared() -> bool:
            pump_all()
            return partitioned_exactly_once([m.owned() for m in members], partitions)

        wait_until(shared, 30, "both clients owning some of the partitions")
        owned = {"librdkafka-member": confluent.owned(), "kafka-python-member": kp.owned()}
        description = described(broker.bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        assert {
            m.client_id: frozenset(tp.partition for tp in m.assignment.topic_partitions) for m in description.members
        } == owned

        expected = produce_keyed(broker.bootstrap, topic, 0, 1000)
        wait_until(lambda: pump_all() or all_consumed(members, expected), 60, "all records consumed")
        assert_records_match(members, expected)
        assert {"librdkafka-member": confluent.owned(), "kafka-python-member": kp.owned()} == owned, "rebalanced"
        for name, member in (("librdkafka-member", confluent), ("kafka-python-member", kp)):
            got = sorted((p, o) for p, o, _ in member.consumed())
            want = sorted(key for key in expected if key[0] in owned[name])
            assert got == want, f"{name} did not consume exactly the records of its partitions {sorted(owned[name])}"

        ends = end_offsets_of_keys(expected)
        wait_until(
            lambda: pump_all() or committed_offsets(broker.bootstrap, group, topic, range(partitions)) == ends,
            30,
            f"committed offsets to reach {ends}",
        )
    finally:
        for m in members:
            m.close()


def test_cooperative_sticky_moves_only_the_partitions_that_change_owner(broker_factory):
    """KIP-429 incremental rebalancing over the classic protocol: when a second
    cooperative-sticky member joins, the first gives up only the partitions that move
    (in a first rebalance) and the newcomer gets them in a follow-up one; the partitions
    the first member keeps are never revoked. With commit-after-process and no records in
    flight across the hand-over, every record is consumed exactly once."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "coop", "cooperative", 6
    everything = frozenset(range(partitions))
    create_topic(broker.bootstrap, topic, partitions)
    expected = produce_keyed(broker.bootstrap, topic, 0, 600)
    ends = end_offsets_of_keys(expected)
    assert set(ends) == everything, "every partition needs records"

    config = group_config(broker.bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    a = GroupMember({**config, "client.id": "coop-a"}, topic)
    members = [a]
    try:
        wait_until(
            lambda: a.pump() or (a.owned() == everything and a.committed == ends),
            REBALANCE_S + 30,
            f"the first member to own every partition and commit the first records ({ends})",
        )
        assert [e for e in a.events if e[1]] == [("assign", everything)], a.events

        b = GroupMember({**config, "client.id": "coop-b"}, topic)
        members.append(b)

        def split() -> bool:
            a.pump()
            b.pump()
            owned = [a.owned(), b.owned()]
            if not partitioned_exactly_once(owned, partitions) or [len(o) for o in owned] != [3, 3]:
                return False
            return described_assignment(broker.bootstrap, group, topic) == {
                a.member_id(): owned[0],
                b.member_id(): owned[1],
            }

        wait_until(split, 2 * REBALANCE_S, "the two cooperative members to own three partitions each")
        kept, moved = a.owned(), everything - a.owned()
        revoked = [set(given_up) for kind, given_up in a.events if kind == "revoke" and given_up]
        assert revoked, f"the first member never revoked anything, yet it gave up {sorted(moved)}: {a.events}"
        for partitions_revoked in revoked:
            assert not partitions_revoked & kept, (
                f"an eager revocation: the first member revoked {sorted(partitions_revoked)} "
                f"although it kept {sorted(kept)} (events {a.events})"
            )
        assert set().union(*revoked) == moved, (revoked, moved)
        assert [e for e in a.events if e[0] == "assign" and e[1]] == [("assign", everything)], (
            f"the first member was given partitions again after its first assignment: {a.events}"
        )
        assert [e for e in b.events if e[0] == "revoke" and e[1]] == [], b.events
        assert frozenset().union(*(got for kind, got in b.events if kind == "assign")) == moved, b.events
        description = described(broker.bootstrap, group)
        assert (description.state, description.partition_assignor) == (
            ConsumerGroupState.STABLE,
            "cooperative-sticky",
        )

        def moves() -> tuple[list, list]:
            # An empty incremental assignment (the end of a cooperative round) moves nothing.
            return [e for e in a.events if e[1]], [e for e in b.events if e[1]]

        moves_after_split = moves()

        first_ends = ends
        expected.update(produce_keyed(broker.bootstrap, topic, 600, 600))
        ends = end_offsets_of_keys(expected)
        assert all(ends[p] > first_ends[p] for p in everything), "every partition needs new records"

        def drained_and_committed() -> bool:
            a.pump()
            b.pump()
            return all_consumed(members, expected) and {**a.committed, **b.committed} == ends

        wait_until(drained_and_committed, 60, f"all 1200 records consumed and committed ({ends})")
        assert_records_match(members, expected)
        seen = Counter((p, o) for m in members for p, o, _ in m.consumed())
        duplicates = sorted(key for key, count in seen.items() if count > 1)
        assert not duplicates, f"{len(duplicates)} records consumed twice, first {duplicates[:5]}"
        assert set(seen) == set(expected)
        assert {p for p, _, _ in b.consumed()} == moved, "the newcomer read partitions it never owned"
        resumed_at = {p: min(o for q, o, _ in b.consumed() if q == p) for p in moved}
        assert resumed_at == {p: first_ends[p] for p in moved}, (
            f"the newcomer must resume where the first member committed ({first_ends}), resumed at {resumed_at}"
        )
        assert moves() == moves_after_split, "partitions moved again after the split"
        assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == ends
    finally:
        for m in members:
            m.close()


# ---------------------------------------------------------------- durability of offsets


def test_committed_offsets_survive_restart_and_kill9(broker_factory):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "durable", "durable-group", 3
    create_topic(broker.bootstrap, topic, partitions)
    expected = produce_keyed(broker.bootstrap, topic, 0, 300)
    ends = end_offsets_of_keys(expected)
    assert set(ends) == set(range(partitions)), "every partition needs records"

    def consume_then_commit(start: dict[int, int] | None, commit_at: dict[int, int]) -> float:
        """Join the group, read to the end, commit `commit_at`, close; returns seconds to the assignment.

        With `start`, offsets must come from the group (no reset allowed) and
        each partition must be read from exactly `start[p]`.
        """
        reset = "error" if start is not None else "earliest"
        config = group_config(broker.bootstrap, group, **{"auto.offset.reset": reset})
        joined_at = time.monotonic()
        member = GroupMember(config, topic, auto_commit_processed=False)
        try:
            wait_until(lambda: member.pump() or len(member.owned()) == partitions, REBALANCE_S, "the assignment")
            assigned_after = time.monotonic() - joined_at

            def read_to_end():
                member.pump()
                got = {}
                for p, o, _ in member.records:
                    got[p] = max(got.get(p, 0), o + 1)
                return got == ends

            wait_until(read_to_end, 30, f"the consumer to reach the end offsets {ends}")
            assert_records_match([member], expected)
            if start is not None:
                for p in range(partitions):
                    offsets = [o for q, o, _ in member.records if q == p]
                    assert offsets == list(range(start[p], ends[p])), (
                        f"partition {p}: resumed at {offsets[:1]}, committed offset was {start[p]}"
                    )
            commit = [TopicPartition(topic, p, o) for p, o in commit_at.items()]
            for tp in member.consumer.commit(offsets=commit, asynchronous=False):
                assert tp.error is None, f"commit {tp}: {tp.error}"
        finally:
            member.close()
        return assigned_after

    first_commit = {p: end // 3 for p, end in ends.items()}
    consume_then_commit(None, first_commit)
    assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == first_commit

    broker.restart()
    assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == first_commit
    description = described(broker.bootstrap, group)
    assert (description.state, description.members) == (ConsumerGroupState.EMPTY, []), (
        "after a clean restart the group whose only member left must be Empty, "
        f"not {description.state} with members {[m.member_id for m in description.members]}"
    )
    second_commit = {p: 2 * end // 3 for p, end in ends.items()}
    assigned_after = consume_then_commit(first_commit, second_commit)
    assert assigned_after < SESSION_TIMEOUT_MS / 1000, f"rejoining an empty group took {assigned_after:.1f}s"
    assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == second_commit

    broker.kill9()
    broker.start()
    assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == second_commit
    description = described(broker.bootstrap, group)
    assert (description.state, description.members) == (ConsumerGroupState.EMPTY, []), (
        "after kill -9 the group whose only member left must be Empty, "
        f"not {description.state} with members {[m.member_id for m in description.members]}"
    )
    assigned_after = consume_then_commit(second_commit, ends)
    assert assigned_after < SESSION_TIMEOUT_MS / 1000, f"rejoining an empty group took {assigned_after:.1f}s"
    assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == ends


@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_live_member_carries_on_across_a_broker_restart(broker_factory, how):
    """A member that stays up while the broker restarts keeps consuming and committing:
    the restored group still knows it, and no record is lost or read again."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "live", "live-group", 3
    create_topic(broker.bootstrap, topic, partitions)
    member = GroupMember({**group_config(broker.bootstrap, group), "client.id": "survivor"}, topic)
    try:
        expected = produce_keyed(broker.bootstrap, topic, 0, 300)
        ends = end_offsets_of_keys(expected)
        wait_until(
            lambda: member.pump() or member.committed == ends, 30, f"the first records consumed and committed ({ends})"
        )
        if how == "clean":
            broker.stop()
        else:
            broker.kill9()
        broker.start()
        assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == ends
        expected.update(produce_keyed(broker.bootstrap, topic, 300, 300))
        ends = end_offsets_of_keys(expected)
        wait_until(
            lambda: member.pump() or member.committed == ends, 30, f"the later records consumed and committed ({ends})"
        )
        assert_records_match([member], expected)
        offsets = sorted((p, o) for p, o, _ in member.consumed())
        assert offsets == sorted(expected), "records were lost or read twice across the restart"
        assert committed_offsets(broker.bootstrap, group, topic, range(partitions)) == ends
        assert described_assignment(broker.bootstrap, group, topic) == {member.member_id(): member.owned()}
    finally:
        member.close()


# ---------------------------------------------------------------- static membership


@pytest.mark.parametrize("restarted", ["leader", "follower"])
def test_static_member_rejoins_without_rebalance(broker_factory, restarted):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, group, partitions = "static", f"static-{restarted}", 4
    create_topic(broker.bootstrap, topic, partitions)
    session_ms = 20_000

    def static_member(instance: str) -> GroupMember:
        config = group_config(
            broker.bootstrap,
            group,
            **{"group.instance.id": instance, "session.timeout.ms": session_ms, "client.id": instance},
        )
        return GroupMember(config, topic)

    members: list[GroupMember] = []
    try:
        # The first member to join leads the group; it stays leader when the second joins.
        leader = static_member("static-leader")
        members.append(leader)
        wait_until(lambda: leader.pump() or len(leader.owned()) == partitions, REBALANCE_S, "the leader alone")
        follower = static_member("static-follower")
        members.append(follower)

        def stable(pair) -> bool:
            for m in pair:
                m.pump()
            owned = [m.owned() for m in pair]
            if not partitioned_exactly_once(owned, partitions):
                return False
            return described_assignment(broker.bootstrap, group, topic) == {
                m.member_id(): o for m, o in zip(pair, owned)
            }

        wait_until(lambda: stable([leader, follower]), REBALANCE_S, "two static members sharing the partitions")

        bouncing, other = (leader, follower) if restarted == "leader" else (follower, leader)
        instance = "static-leader" if bouncing is leader else "static-follower"
        other_events, other_owned, other_id = list(other.events), other.owned(), other.member_id()
        bouncing_owned, bouncing_id = bouncing.owned(), bouncing.member_id()

        # A static member's close sends no LeaveGroup: the group keeps its place.
        bouncing.close()
        closed_at = time.monotonic()
        description = described(broker.bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        assert {m.group_instance_id for m in description.members} == {"static-leader", "static-follower"}

        back = static_member(instance)
        members.append(back)
        wait_until(
            lambda: other.pump() or back.pump() or back.owned() == bouncing_owned,
            REBALANCE_S,
            f"the restarted {restarted} to get {sorted(bouncing_owned)} back",
        )
        assert time.monotonic() - closed_at < session_ms / 1000, "the rejoin took longer than the session timeout"
        assert back.member_id() and back.member_id() != bouncing_id, "a rejoining static member gets a new member id"

        quiet_until = time.monotonic() + QUIET_WINDOW_S
        while time.monotonic() < quiet_until:
            other.pump()
            back.pump()
        assert other.events == other_events, f"the other member was rebalanced: {other.events[len(other_events):]}"
        assert other.owned() == other_owned
        assert back.owned() == bouncing_owned
        assert [e for e in back.events if e[0] == "revoke"] == [], "the restarted member lost its partitions"
        description = described(broker.bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        assert {m.group_instance_id: m.member_id for m in description.members} == {
            instance: back.member_id(),
            ("static-follower" if instance == "static-leader" else "static-leader"): other_id,
        }
        assert described_assignment(broker.bootstrap, group, topic) == {
            back.member_id(): bouncing_owned,
            other_id: other_owned,
        }
    finally:
        for m in members:
            m.close()


# ---------------------------------------------------------------- admin


def test_admin_lists_describes_and_deletes_groups_and_offsets(broker_factory):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import GroupSubscribedToTopicError, NoError

    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    topic, partitions = "admin-topic", 3
    create_topic(broker.bootstrap, topic, partitions)
    produce_keyed(broker.bootstrap, topic, 0, 30)
    admin = admin_client(broker.bootstrap)

    # An empty group: offsets committed from outside any membership.
    empty_group = "admin-empty"
    request = ConsumerGroupTopicPartitions(empty_group, [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 6)])
    result = wait_future(admin.alter_consumer_group_offsets([request])[empty_group])
    assert [(tp.partition, tp.offset, tp.error) for tp in result.topic_partitions] == [(0, 4, None), (1, 6, None)]
    assert committed_offsets(broker.bootstrap, empty_group, topic, [0, 1, 2]) == {0: 4, 1: 6, 2: OFFSET_INVALID}

    active_group = "admin-active"
    active = GroupMember({**group_config(broker.bootstrap, active_group), "client.id": "admin-member"}, topic)
    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        wait_until(lambda: active.pump() or len(active.owned()) == partitions, REBALANCE_S, "the active member")
        wait_until(lambda: active.pump() or len(active.committed) == partitions, 30, "the member's commits")

        def delete_group(group: str) -> KafkaError | None:
            return future_error(admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group])

        def listed(**filters) -> set[str]:
            result = wait_future(admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S, **filters))
            assert not result.errors, result.errors
            return {g.group_id for g in result.valid}

        assert {empty_group, active_group} <= listed()
        assert {empty_group, active_group} <= listed(types={ConsumerGroupType.CLASSIC})
        assert not {empty_group, active_group} & listed(types={ConsumerGroupType.CONSUMER}), "these are classic groups"
        stable, empty = listed(states={ConsumerGroupState.STABLE}), listed(states={ConsumerGroupState.EMPTY})
        assert active_group in stable and empty_group not in stable, stable
        assert empty_group in empty and active_group not in empty, empty
        listings = {
            g.group_id: (g.state, g.type, g.is_simple_consumer_group)
            for g in wait_future(admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S)).valid
        }
        assert listings[active_group] == (ConsumerGroupState.STABLE, ConsumerGroupType.CLASSIC, False)
        assert listings[empty_group][:2] == (ConsumerGroupState.EMPTY, ConsumerGroupType.CLASSIC)

        description = described(broker.bootstrap, active_group)
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        assert not description.is_simple_consumer_group
        assert description.coordinator.id == 1
        [member] = description.members
        assert (member.member_id, member.client_id) == (active.member_id(), "admin-member")
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [
            (topic, p) for p in range(partitions)
        ]
        description = described(broker.bootstrap, empty_group)
        assert (description.state, description.members) == (ConsumerGroupState.EMPTY, [])

        # Offsets of a group with a member cannot be altered from outside it.
        request = ConsumerGroupTopicPartitions(active_group, [TopicPartition(topic, 0, 1)])
        try:
            result = wait_future(admin.alter_consumer_group_offsets([request])[active_group])
            errors = [tp.error for tp in result.topic_partitions]
        except KafkaException as exc:
            errors = [exc.args[0]]
        assert [e and e.code() for e in errors] == [KafkaError.UNKNOWN_MEMBER_ID], errors

        # Nor deleted while the member subscribes to the topic.
        outcome = kafka_admin.delete_group_offsets(active_group, [KTopicPartition(topic, 0)])
        assert outcome == {KTopicPartition(topic, 0): GroupSubscribedToTopicError}, outcome
        assert committed_offsets(broker.bootstrap, active_group, topic, [0])[0] >= 0

        # An empty group's offsets can be deleted, one partition at a time.
        outcome = kafka_admin.delete_group_offsets(empty_group, [KTopicPartition(topic, 0)])
        assert outcome == {KTopicPartition(topic, 0): NoError}, outcome
        assert committed_offsets(broker.bootstrap, empty_group, topic, [0, 1]) == {0: OFFSET_INVALID, 1: 6}

        # DeleteGroups: refused while a member is in, fine for an empty group.
        error = delete_group(active_group)
        assert error is not None and error.code() == KafkaError.NON_EMPTY_GROUP, error
        assert delete_group(empty_group) is None
        assert empty_group not in listed()
        assert committed_offsets(broker.bootstrap, empty_group, topic, [0, 1]) == {0: OFFSET_INVALID, 1: OFFSET_INVALID}
        error = delete_group(empty_group)
        assert error is not None and error.code() == KafkaError.GROUP_ID_NOT_FOUND, error

        # Once the member has left, the group is empty and can go, offsets and all.
        active.close()
        wait_until(lambda: active_group in listed(states={ConsumerGroupState.EMPTY}), REBALANCE_S, "an Empty group")
        assert delete_group(active_group) is None
        assert active_group not in listed()
        assert committed_offsets(broker.bootstrap, active_group, topic, range(partitions)) == {
            p: OFFSET_INVALID for p in range(partitions)
        }
    finally:
        kafka_admin.close()
        active.close()


# ---------------------------------------------------------------- commits without membership


def test_commits_from_outside_a_group(broker_factory):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    broker = broker_factory()
    topic, group = "manual", "manual-commits"
    create_topic(broker.bootstrap, topic, 2)
    produce_keyed(broker.bootstrap, topic, 0, 40)

    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    writer = Consumer(config)
    try:
        writer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        results = writer.commit(
            offsets=[TopicPartition(topic, 0, 3, metadata="first"), TopicPartition(topic, 1, 7)], asynchronous=False
        )
        assert [(tp.partition, tp.offset, tp.error) for tp in results] == [(0, 3, None), (1, 7, None)]
    finally:
        writer.close()

    reader = Consumer(config)
    try:
        got = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=ADMIN_TIMEOUT_S)
        assert [(tp.partition, tp.offset, tp.error) for tp in got] == [(0, 3, None), (1, 7, None)]
        assert got[0].metadata == "first"
    finally:
        reader.close()

    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp0 = KTopicPartition(topic, 0)
        kp.assign([tp0])
        assert kp.committed(tp0) == 3
        kp.commit({tp0: OffsetAndMetadata(9, "from kafka-python", -1)})
        assert kp.committed(tp0) == 9
    finally:
        kp.close(timeout_ms=5_000)
    assert committed_offsets(broker.bootstrap, group, topic, [0, 1]) == {0: 9, 1: 7}
    description = described(broker.bootstrap, group)
    assert (description.state, description.members) == (ConsumerGroupState.EMPTY, [])


# ---------------------------------------------------------------- wire level


def wire_join(port: int, group: str, member_id: str = "", **kwargs):
    return parse_join_group_v9(call(port, join_group_v9_request(11, group, member_id, **kwargs), timeout_s=30))


def wire_member(port: int, group: str, topics=("t",), **kwargs):
    """A member that joined (member id dance included) and synced: (member id, generation)."""
    protocols = [("range", consumer_subscription(list(topics)))]
    required = wire_join(port, group, protocols=protocols, **kwargs)
    assert required.error_code == MEMBER_ID_REQUIRED, required
    joined = wire_join(port, group, required.member_id, protocols=protocols, **kwargs)
    assert joined.error_code == NONE, joined
    synced = parse_sync_group_v5(
        call(
            port,
            sync_group_v5_request(
                12,
                group,
                joined.generation_id,
                joined.member_id,
                protocol_name="range",
                assignments={m.member_id: consumer_assignment({"t": [0]}) for m in joined.members},
            ),
        )
    )
    assert synced.error_code == NONE, synced
    return joined.member_id, joined.generation_id


def test_wire_join_sync_heartbeat_errors(broker_factory):
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    port, group = broker.port, "wire-group"
    find_coordinator(port, group)
    protocols = [("range", consumer_subscription(["t"])), ("roundrobin", consumer_subscription(["t"]))]

    # v4+: a new member first learns its id.
    required = wire_join(port, group, protocols=protocols)
    assert (required.error_code, required.generation_id) == (MEMBER_ID_REQUIRED, -1), required
    assert required.member_id, "MEMBER_ID_REQUIRED must carry the member id to use"

    for timeout_ms in (1_000, 5_999, 1_800_001):
        refused = wire_join(port, group, required.member_id, session_timeout_ms=timeout_ms, protocols=protocols)
        assert refused.error_code == INVALID_SESSION_TIMEOUT, (timeout_ms, refused)

    joined = wire_join(port, group, required.member_id, protocols=protocols)
    assert joined.error_code == NONE, joined
    assert (joined.member_id, joined.leader) == (required.member_id, required.member_id)
    assert (joined.protocol_type, joined.protocol_name, joined.generation_id) == ("consumer", "range", 1)
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, protocols[0][1])]

    member, generation = joined.member_id, joined.generation_id
    assignment = consumer_assignment({"t": [0]})
    wrong = parse_sync_group_v5(
        call(port, sync_group_v5_request(2, group, generation + 1, member, assignments={member: assignment}))
    )
    assert wrong.error_code == ILLEGAL_GENERATION, wrong
    synced = parse_sync_group_v5(
        call(
            port,
            sync_group_v5_request(
                3, group, generation, member, protocol_name="range", assignments={member: assignment}
            ),
        )
    )
    assert (synced.error_code, synced.assignment) == (NONE, assignment), synced
    assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")

    def heartbeat(generation_id: int, member_id: str) -> int:
        return parse_heartbeat_v4(call(port, heartbeat_v4_request(4, group, generation_id, member_id)))

    assert heartbeat(generation, member) == NONE
    assert heartbeat(generation, "no-such-member") == UNKNOWN_MEMBER_ID
    assert heartbeat(generation + 5, member) == ILLEGAL_GENERATION
    assert parse_heartbeat_v4(call(port, heartbeat_v4_request(5, "no-such-group", 1, member))) == UNKNOWN_MEMBER_ID

    # Another protocol type, or no protocol in common, cannot join.
    other_type = wire_join(port, group, protocol_type="connect", protocols=protocols)
    assert other_type.error_code == INCONSISTENT_GROUP_PROTOCOL, other_type
    no_common = wire_join(port, group, protocols=[("sticky-only", consumer_subscription(["t"]))])
    assert no_common.error_code == INCONSISTENT_GROUP_PROTOCOL, no_common
    assert heartbeat(generation, member) == NONE, "refused joins must leave the group as it was"


# Kafka's default offset.metadata.max.bytes.
OFFSET_METADATA_MAX_BYTES = 4096
NOTHING_COMMITTED = FetchedOffset(-1, -1, "", NONE)


def wire_commit(port: int, group: str, generation: int, member_id: str, topics) -> dict[tuple[str, int], int]:
    """One OffsetCommit v8: the error code of every (topic, partition), which must all be answered."""
    response = parse_offset_commit_v8(call(port, offset_commit_v8_request(41, group, generation, member_id, topics)))
    assert response.correlation_id == 41
    errors = response.errors()
    asked = {(name, p.partition) for name, partitions in topics for p in partitions}
    assert set(errors) == asked, f"asked to commit {sorted(asked)}, answered {sorted(errors)}"
    return errors


def wire_fetch_offsets(port: int, groups) -> dict[str, dict[tuple[str, int], FetchedOffset]]:
    """One OffsetFetch v8 over `groups` [(group, [(topic, [partitions])] or None)]: offsets by group,
    each group answered once, in request order and without a group-level error."""
    response = parse_offset_fetch_v8(call(port, offset_fetch_v8_request(42, groups)))
    assert response.correlation_id == 42
    assert [g.group_id for g in response.groups] == [g for g, _ in groups], response
    for g in response.groups:
        assert g.error_code == NONE, g
    return {g.group_id: g.offsets() for g in response.groups}


def test_wire_offset_commit_checks_the_committer_and_fetch_sees_valid_commits(broker_factory):
    """OffsetCommit v8 from a classic group's member: Kafka's error for a stale generation,
    an unknown member, an anonymous commit into a group with members, a commit during
    CompletingRebalance, an unknown topic or partition and oversized metadata; refused
    commits store nothing, and a valid one is what OffsetFetch v8 returns."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    port, group, topic = broker.port, "wire-offsets", "t"  # `t` is what wire_member subscribes to
    create_topic(broker.bootstrap, topic, 2)
    find_coordinator(port, group)
    # Long sessions: the member never heartbeats, and must outlive a slow run.
    timeouts = {"session_timeout_ms": 60_000, "rebalance_timeout_ms": 60_000}
    member, first_generation = wire_member(port, group, **timeouts)

    # The (only, leading) member rejoins: a new generation, the old one is stale from now on.
    protocols = [("range", consumer_subscription([topic]))]
    rejoined = wire_join(port, group, member, protocols=protocols, **timeouts)
    assert (rejoined.error_code, rejoined.member_id) == (NONE, member), rejoined
    generation = rejoined.generation_id
    assert generation == first_generation + 1, rejoined
    one = [(topic, [CommitPartition(0, 5)])]
    assert wire_commit(port, group, generation, member, one) == {(topic, 0): REBALANCE_IN_PROGRESS}, (
        "a member with the current generation committing before its SyncGroup (CompletingRebalance)"
    )
    synced = parse_sync_group_v5(
        call(
            port,
            sync_group_v5_request(
                12,
                group,
                generation,
                member,
                protocol_name="range",
                assignments={member: consumer_assignment({topic: [0, 1]})},
            ),
        )
    )
    assert synced.error_code == NONE, synced

    refusals = {
        "stale generation": (first_generation, member, ILLEGAL_GENERATION),
        "future generation": (generation + 1, member, ILLEGAL_GENERATION),
        "unknown member id": (generation, "no-such-member", UNKNOWN_MEMBER_ID),
        "anonymous commit while the group has a member": (-1, "", UNKNOWN_MEMBER_ID),
    }
    both = [(topic, [CommitPartition(0, 5), CommitPartition(1, 6)])]
    outcomes = {what: wire_commit(port, group, gen, member_id, both) for what, (gen, member_id, _) in refusals.items()}
    assert outcomes == {
        what: {(topic, 0): error, (topic, 1): error} for what, (_, _, error) in refusals.items()
    }, outcomes

    # Per-partition refusals: the rest of the request still commits.
    at_limit, over_limit = "m" * OFFSET_METADATA_MAX_BYTES, "m" * (OFFSET_METADATA_MAX_BYTES + 1)
    mixed = [
        (topic, [CommitPartition(0, 11, 3, at_limit), CommitPartition(1, 12, 3, over_limit), CommitPartition(2, 13)]),
        ("no-such-topic", [CommitPartition(0, 14)]),
    ]
    assert wire_commit(port, group, generation, member, mixed) == {
        (topic, 0): NONE,
        (topic, 1): OFFSET_METADATA_TOO_LARGE,
        (topic, 2): UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    wanted = [(group, [(topic, [0, 1, 2]), ("no-such-topic", [0])])]
    assert wire_fetch_offsets(port, wanted)[group] == {
        (topic, 0): FetchedOffset(11, 3, at_limit, NONE),
        (topic, 1): NOTHING_COMMITTED,
        (topic, 2): NOTHING_COMMITTED,
        ("no-such-topic", 0): NOTHING_COMMITTED,
    }, "only the one accepted partition may have been stored"

    # A valid commit replaces the offsets; null metadata reads back as "", as in Kafka.
    valid = [(topic, [CommitPartition(0, 42, 7, "first"), CommitPartition(1, 17, -1, None)])]
    assert wire_commit(port, group, generation, member, valid) == {(topic, 0): NONE, (topic, 1): NONE}
    committed = {(topic, 0): FetchedOffset(42, 7, "first", NONE), (topic, 1): FetchedOffset(17, -1, "", NONE)}
    assert wire_fetch_offsets(port, [(group, [(topic, [0, 1])])])[group] == committed
    assert wire_fetch_offsets(port, [(group, None)])[group] == committed, "all of the group's offsets"
    assert committed_offsets(broker.bootstrap, group, topic, [0, 1]) == {0: 42, 1: 17}, "AdminClient disagrees"
    assert parse_heartbeat_v4(call(port, heartbeat_v4_request(5, group, generation, member))) == NONE

    # Batched OffsetFetch (KIP-709): several groups in one request, each answered on its own.
    other, unused = "wire-offsets-other", "wire-offsets-never-used"
    anonymous = [(topic, [CommitPartition(1, 99, -1, "other")])]
    assert wire_commit(port, other, -1, "", anonymous) == {(topic, 1): NONE}, "a commit into a memberless group"
    answers = wire_fetch_offsets(port, [(group, [(topic, [0, 1])]), (other, None), (unused, [(topic, [0])])])
    assert answers == {
        group: committed,
        other: {(topic, 1): FetchedOffset(99, -1, "other", NONE)},
        unused: {(topic, 0): NOTHING_COMMITTED},
    }, answers


class StaticWireMember:
    """One static member (group instance id) of a group, spoken to frame by frame."""

    protocols = [("range", consumer_subscription(["t"]))]
    assignment = consumer_assignment({"t": [0]})

    def __init__(self, port: int, group: str, instance: str, version: int = 9):
        self.port, self.group, self.instance, self.version = port, group, instance, version

    def join(self, member_id: str = ""):
        frame = join_group_request(
            self.version, 1, self.group, member_id, group_instance_id=self.instance, protocols=self.protocols
        )
        return parse_join_group(call(self.port, frame, timeout_s=30), self.version)

    def sync(self, generation: int, member_id: str, assignments: dict[str, bytes] | None = None):
        frame = sync_group_v5_request(
            2,
            self.group,
            generation,
            member_id,
            group_instance_id=self.instance,
            protocol_name="range",
            assignments=assignments or {},
        )
        return parse_sync_group_v5(call(self.port, frame))

    def heartbeat(self, generation: int, member_id: str) -> int:
        frame = heartbeat_v4_request(3, self.group, generation, member_id, self.instance)
        return parse_heartbeat_v4(call(self.port, frame))

    def start_and_restart(self):
        """Join alone (leading the group), sync, then rejoin without a member id as a restart does.

        Returns the first and the second JoinGroup response."""
        first = self.join()  # static members need no MEMBER_ID_REQUIRED round
        assert first.error_code == NONE, first
        assert (first.leader, first.generation_id) == (first.member_id, 1), first
        synced = self.sync(1, first.member_id, {first.member_id: self.assignment})
        assert (synced.error_code, synced.assignment) == (NONE, self.assignment), synced
        again = self.join()
        assert again.error_code == NONE, again
        assert again.member_id and again.member_id != first.member_id, again
        assert again.generation_id == 1, f"a static rejoin of a Stable group must not start a new generation: {again}"
        return first, again


@pytest.mark.parametrize("version", [5, 9])
def test_wire_static_leader_restart_skips_the_assignment(broker_factory, version):
    """A static leader rejoining a Stable group with no member id (it restarted) takes over
    its old identity without a rebalance (KIP-345). JoinGroup v9+ tells it that it leads but
    sets skip_assignment and lists every member (KIP-814); older versions name the previous
    leader id, so the member does not run an assignment (over nobody)."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    member = StaticWireMember(broker.port, f"static-wire-v{version}", "instance-1", version)
    find_coordinator(broker.port, member.group)
    first, again = member.start_and_restart()
    if version >= 9:
        assert (again.leader, again.skip_assignment) == (again.member_id, True), again
        assert [(m.member_id, m.group_instance_id, m.metadata) for m in again.members] == [
            (again.member_id, member.instance, member.protocols[0][1])
        ], again
    else:
        assert (again.leader, again.members) == (first.member_id, []), (
            f"JoinGroup v{version} cannot say skip_assignment: the old leader id must be named, got {again}"
        )
    assert member.sync(1, again.member_id).assignment == member.assignment, "the restarted member keeps its assignment"
    assert member.heartbeat(1, again.member_id) == NONE


def test_wire_static_member_old_incarnation_is_fenced(broker_factory):
    """Once a static member rejoined under a new member id, requests that carry its
    instance id with the old member id are a zombie's: FENCED_INSTANCE_ID (82), which
    clients treat as fatal, not UNKNOWN_MEMBER_ID, which makes them rejoin and fence the
    new incarnation in turn."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    member = StaticWireMember(broker.port, "static-fencing", "instance-1")
    find_coordinator(broker.port, member.group)
    first, again = member.start_and_restart()
    assert member.heartbeat(1, again.member_id) == NONE
    outcomes = {
        "JoinGroup": member.join(first.member_id).error_code,
        "SyncGroup": member.sync(1, first.member_id).error_code,
        "Heartbeat": member.heartbeat(1, first.member_id),
    }
    assert outcomes == dict.fromkeys(("JoinGroup", "SyncGroup", "Heartbeat"), FENCED_INSTANCE_ID), outcomes
    assert member.heartbeat(1, again.member_id) == NONE, "the new incarnation must be unaffected"


def test_wire_find_coordinator_batched(broker):
    keys = ["group-a", "group-b", "a group with spaces", "ümlaut-group"]
    coordinators = parse_find_coordinator_v4(call(broker.port, find_coordinator_v4_request(1, keys)))
    assert [c.key for c in coordinators] == keys
    for c in coordinators:
        assert (c.node_id, c.host, c.port, c.error_code) == (1, "127.0.0.1", broker.port, NONE), c


def test_member_that_dies_during_a_rebalance_is_dropped_at_its_session_timeout(broker_factory):
    """Kafka expires a member that neither heartbeats nor rejoins after its session timeout,
    also while the group is preparing a rebalance; the rebalance timeout only bounds members
    that keep heartbeating. Otherwise one crashed consumer stalls a joining one for
    max.poll.interval.ms (5 minutes by default)."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    port, group = broker.port, "dies-mid-rebalance"
    find_coordinator(port, group)
    # Short enough that a broker waiting for it still answers within the test.
    rebalance_ms = 20_000
    silent, _ = wire_member(port, group, session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=rebalance_ms)
    # `silent` never heartbeats again. A newcomer starts a rebalance it cannot finish alone.
    protocols = [("range", consumer_subscription(["t"]))]
    required = wire_join(port, group, protocols=protocols, rebalance_timeout_ms=rebalance_ms)
    assert required.error_code == MEMBER_ID_REQUIRED, required
    started = time.monotonic()
    with Connection(port, timeout_s=5) as conn:
        conn.send(
            join_group_v9_request(
                21, group, required.member_id, protocols=protocols, rebalance_timeout_ms=rebalance_ms
            )
        )
        joined = parse_join_group_v9(conn.receive(timeout_s=rebalance_ms / 1000 + 5))
    took = time.monotonic() - started
    assert joined.error_code == NONE, joined
    assert [m.member_id for m in joined.members] == [required.member_id], f"{silent} should be gone: {joined}"
    assert took < SESSION_TIMEOUT_MS / 1000 + 4, (
        f"the join completed after {took:.1f}s: the silent member was dropped at the rebalance timeout "
        f"({rebalance_ms} ms), not at the end of its {SESSION_TIMEOUT_MS} ms session"
    )


def test_clean_shutdown_answers_a_parked_join(broker_factory):
    """A JoinGroup parked until the rebalance completes must not hold up a clean
    shutdown (as a delayed fetch does not): the broker answers it or drops the connection."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    port, group = broker.port, "parked-at-shutdown"
    find_coordinator(port, group)
    # A member that will not rejoin, but whose session outlasts the test.
    wire_member(port, group, session_timeout_ms=60_000, rebalance_timeout_ms=60_000)
    protocols = [("range", consumer_subscription(["t"]))]
    required = wire_join(port, group, protocols=protocols)
    with Connection(port, timeout_s=5) as conn:
        conn.send(
            join_group_v9_request(31, group, required.member_id, protocols=protocols, rebalance_timeout_ms=60_000)
        )
        wait_until(
            lambda: described(broker.bootstrap, group).state == ConsumerGroupState.PREPARING_REBALANCING,
            ADMIN_TIMEOUT_S,
            "the newcomer's join to start a rebalance",
        )
        started = time.monotonic()
        broker.stop()
        took = time.monotonic() - started
        assert took < 10, f"a clean shutdown with a parked JoinGroup took {took:.1f}s"
        try:
            frame = conn.receive(timeout_s=1)
        except AssertionError as exc:
            assert "closed the connection" in str(exc), f"the parked JoinGroup was neither answered nor dropped: {exc}"
        except OSError:
            pass  # reset: dropped too
        else:
            answer = parse_join_group_v9(frame)
            assert answer.error_code != NONE, f"a join answered at shutdown cannot have succeeded: {answer}"


# ---------------------------------------------------------------- __consumer_offsets


def test_offsets_topic_appears_internal_on_first_group_use(broker):
    from confluent_kafka import TopicCollection

    before = parse_metadata(call(broker.port, metadata_request(1)))
    assert before.topic("__consumer_offsets") is None, "created before any group was used"

    coordinators = parse_find_coordinator_v4(call(broker.port, find_coordinator_v4_request(2, ["first-group"])))
    assert [c.error_code for c in coordinators] == [NONE]

    after = parse_metadata(call(broker.port, metadata_request(3)))
    offsets_topic = after.topic("__consumer_offsets")
    assert offsets_topic is not None and offsets_topic.error_code == NONE, after.topics
    assert offsets_topic.internal, "__consumer_offsets must be marked internal"
    assert sorted(offsets_topic.partitions) == list(range(50))

    admin = admin_client(broker.bootstrap)
    futures = admin.describe_topics(TopicCollection(["__consumer_offsets"]), request_timeout=ADMIN_TIMEOUT_S)
    description = wait_future(futures["__consumer_offsets"])
    assert description.is_internal
    assert len(description.partitions) == 50


if __name__ == "__main__":
    run_child(sys.argv[1], sys.argv[2])
