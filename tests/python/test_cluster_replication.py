"""Replicated partitions as the controller keeps them, on three combined
nodes: a topic with replication factor 3 shows its replicas, ISR and
leader to clients; when a leader's broker is killed, its session expires
and the controller elects the next in-sync replica with a higher leader
epoch; the killed broker rejoins as a replica. ElectLeaders answers
Kafka's errors through any broker, and AlterPartition is served only by
the active controller. Only leadership metadata is checked here, not the
copying of records between replicas."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic

from cluster import CLUSTER_WAIT_S, Cluster, live_brokers
from harness import ADMIN_TIMEOUT_S, admin_client, confluent_consumer, strom, wait_future, wait_until
import wire

BROKERS = {1, 2, 3}
# Short sessions so fencing is seen within the test, long enough that a
# busy machine does not fence a live broker.
SESSIONS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
OVERRIDES = {**SESSIONS, "default.replication.factor": "3", "offsets.topic.num.partitions": "6"}
FENCED_WAIT_S = 30.0
ALTER_PARTITION = 56
NOT_CONTROLLER = 41
STALE_BROKER_EPOCH = 77
ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, controllers=3, combined=True, overrides=OVERRIDES) as cluster:
        cluster.start_serving()
        yield cluster


def partitions(port: int, topic: str) -> dict[int, wire.MetadataPartition]:
    """Partition -> its Metadata v12 state (leader, epoch, replicas, ISR); {} when unanswered."""
    try:
        described = wire.parse_metadata(wire.call(port, wire.metadata_request(1, [topic]))).topic(topic)
    except OSError:
        return {}
    return {p.index: p for p in described.partition_states} if described else {}


def test_a_replicated_topic_shows_replicas_isr_and_leader_to_clients(cluster):
    bootstrap = cluster.nodes[1].bootstrap
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    admin = admin_client(bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)])[topic])
    wait_until(lambda: all(len(partitions(n.port, topic)) == 6 for n in cluster.brokers()), CLUSTER_WAIT_S,
               "the topic in every broker's metadata")
    described = wait_future(admin.describe_topics(TopicCollection([topic]))[topic])
    leaders = set()
    for p in described.partitions:
        assert sorted(r.id for r in p.replicas) == [1, 2, 3], p
        assert sorted(r.id for r in p.isr) == [1, 2, 3], p
        assert p.leader.id == p.replicas[0].id, "the first replica leads a new partition"
        leaders.add(p.leader.id)
    assert leaders == BROKERS, "striped placement spreads the leaders"
    for p in partitions(cluster.nodes[3].port, topic).values():
        assert (p.leader_epoch, len(p.replicas), len(p.isr)) == (0, 3, 3), p
    too_many = admin.create_topics([NewTopic(f"{topic}-x", num_partitions=1, replication_factor=4)])
    with pytest.raises(KafkaException) as refused:
        wait_future(too_many[f"{topic}-x"])
    assert refused.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_the_offsets_topic_and_topics_without_a_replication_factor_get_three_replicas(cluster):
    node = cluster.nodes[2]

    def coordinator_found():
        [found] = wire.parse_find_coordinator_v4(wire.call(node.port, wire.find_coordinator_v4_request(3, ["g"])))
        return found.error_code == 0

    wait_until(coordinator_found, CLUSTER_WAIT_S, "a coordinator for group g")
    offsets = partitions(node.port, "__consumer_offsets")
    assert len(offsets) == 6 and all(sorted(p.replicas) == [1, 2, 3] for p in offsets.values()), offsets
    topic = f"default-rf-{uuid.uuid4().hex[:8]}"
    admin = admin_client(node.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=-1)])[topic])
    wait_until(lambda: len(partitions(node.port, topic)) == 2, CLUSTER_WAIT_S, "the topic")
    assert all(len(p.replicas) == 3 for p in partitions(node.port, topic).values())


def test_a_killed_leader_is_replaced_by_an_in_sync_replica_with_a_higher_epoch_and_rejoins(cluster):
    quorum_leader, _ = cluster.wait_for_leader()
    victim = next(b for b in sorted(BROKERS) if b != quorum_leader)
    others = sorted(BROKERS - {victim})
    survivor = cluster.nodes[others[0]]
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    # Partition 0 led by the victim, partition 1 only followed by it.
    assignment = [[victim, *others], [*others, victim]]
    admin = admin_client(survivor.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)])[topic])
    wait_until(lambda: len(partitions(survivor.port, topic)) == 2, CLUSTER_WAIT_S, "the topic on the survivor")
    before = partitions(survivor.port, topic)
    assert before[0].leader == victim and before[0].isr == assignment[0]

    cluster.kill9(victim)

    def failed_over():
        now = partitions(survivor.port, topic)
        return now if now and now[0].leader in others and victim not in now[1].isr else None

    after = wait_until(failed_over, FENCED_WAIT_S, f"a new leader for the partition broker {victim} led")
    assert after[0].leader == others[0], "the next in-sync replica in replica order leads"
    assert after[0].leader_epoch == before[0].leader_epoch + 1
    assert after[0].isr == others and after[0].replicas == assignment[0]
    # A follower leaving shrinks the ISR without a new leader or epoch.
    assert (after[1].leader, after[1].leader_epoch, after[1].isr) == (others[0], before[1].leader_epoch, others)
    wait_until(lambda: all(partitions(cluster.nodes[n].port, topic) == after for n in others),
               CLUSTER_WAIT_S, "every survivor's metadata agreeing")

    cluster.restart(victim)
    wait_until(lambda: live_brokers(survivor.bootstrap) == BROKERS, FENCED_WAIT_S, f"broker {victim} unfenced")
    wait_until(lambda: partitions(cluster.nodes[victim].port, topic) == partitions(survivor.port, topic),
               CLUSTER_WAIT_S, f"broker {victim} caught up with the metadata")
    back = partitions(survivor.port, topic)
    assert back[0].replicas == assignment[0] and back[0].leader == others[0]
    # It catches up and its leader adds it back to the ISR (AlterPartition);
    # then the preferred election makes it lead again, one epoch later.
    rejoined = wait_until(
        lambda: (now := partitions(survivor.port, topic)) and victim in now[0].isr and now,
        CLUSTER_WAIT_S,
        f"broker {victim} back in the ISR",
    )
    elected = wait_future(admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]))
    assert list(elected.values()) == [None], elected
    wait_until(
        lambda: (now := partitions(survivor.port, topic))[0].leader == victim
        and now[0].leader_epoch == rejoined[0].leader_epoch + 1,
        CLUSTER_WAIT_S,
        f"broker {victim} leading again",
    )


def coordinator_of(node, group: str) -> int:
    """The group's coordinator as `node` answers FindCoordinator; -1 while it has none."""
    try:
        [found] = wire.parse_find_coordinator_v4(wire.call(node.port, wire.find_coordinator_v4_request(1, [group])))
    except OSError:
        return -1
    return found.node_id if found.error_code == wire.NONE else -1


def test_an_acknowledged_offset_commit_survives_the_kill_of_its_coordinator(cluster):
    quorum_leader, _ = cluster.wait_for_leader()
    asker = cluster.nodes[quorum_leader]
    # A group coordinated by a broker that is not the active controller, so
    # the kill costs no controller election.
    candidates = [f"commit-{uuid.uuid4().hex[:8]}-{i}" for i in range(30)]
    group = wait_until(lambda: next((g for g in candidates if coordinator_of(asker, g) not in (-1, quorum_leader)), None),
                       CLUSTER_WAIT_S, "a group coordinated away from the active controller")
    victim = coordinator_of(asker, group)
    wait_until(lambda: (offsets := partitions(asker.port, "__consumer_offsets"))
               and all(sorted(p.isr) == sorted(BROKERS) for p in offsets.values()),
               CLUSTER_WAIT_S, "every __consumer_offsets replica in sync")
    topic = f"committed-{uuid.uuid4().hex[:8]}"
    admin = admin_client(asker.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic])
    wait_until(lambda: len(partitions(asker.port, topic)) == 3, CLUSTER_WAIT_S, "the topic")
    wanted = [TopicPartition(topic, p, 100 + p) for p in range(3)]

    committer = confluent_consumer(cluster.nodes[victim].bootstrap, **{"group.id": group})
    try:
        acknowledged = committer.commit(offsets=wanted, asynchronous=False)
        cluster.kill9(victim)
    finally:
        committer.close()
    assert [(tp.partition, tp.offset, tp.error) for tp in acknowledged] == [(p, 100 + p, None) for p in range(3)]

    wait_until(lambda: coordinator_of(asker, group) not in (-1, victim), FENCED_WAIT_S, "a new coordinator")
    reader = confluent_consumer(asker.bootstrap, **{"group.id": group})
    try:
        def read_back():
            try:
                return reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=5)
            except KafkaException:
                return None

        committed = wait_until(read_back, CLUSTER_WAIT_S, "the committed offsets from the new coordinator")
    finally:
        reader.close()
    assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(p, 100 + p, None) for p in range(3)]


def test_a_controlled_shutdown_moves_leadership_before_the_broker_exits(cluster):
    quorum_leader, _ = cluster.wait_for_leader()
    victim = next(b for b in sorted(BROKERS) if b != quorum_leader)
    others = sorted(BROKERS - {victim})
    survivor = cluster.nodes[others[0]]
    topic = f"shutdown-{uuid.uuid4().hex[:8]}"
    assignment = [[victim, *others]]
    admin = admin_client(survivor.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=assignment)])[topic])
    wait_until(lambda: partitions(survivor.port, topic).get(0, None) is not None, CLUSTER_WAIT_S, "the topic")
    before = partitions(survivor.port, topic)[0]

    cluster.stop(victim)  # SIGTERM: the controller grants the shutdown once the others have seen the move

    after = partitions(survivor.port, topic)[0]
    assert (after.leader, after.leader_epoch, after.isr) == (others[0], before.leader_epoch + 1, others), after
    assert live_brokers(survivor.bootstrap) == set(others), "the stopped broker is fenced as it goes"


def test_elect_leaders_through_a_broker_answers_kafkas_errors(cluster, tmp_path):
    quorum_leader, _ = cluster.wait_for_leader()
    follower = next(cluster.nodes[b] for b in sorted(BROKERS) if b != quorum_leader)
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    admin = admin_client(follower.bootstrap)
    wait_future(admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic])
    asked = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 7)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = wait_future(admin.elect_leaders(election, asked), ADMIN_TIMEOUT_S)
        codes = {tp.partition: (e.code() if e else 0) for tp, e in results.items()}
        assert codes == {0: ELECTION_NOT_NEEDED, 1: ELECTION_NOT_NEEDED, 7: UNKNOWN_TOPIC_OR_PARTITION}, election
    assert wait_future(admin.elect_leaders(ElectionType.PREFERRED, None), ADMIN_TIMEOUT_S) == {}, \
        "partitions that need no election are left out of an election of all"

    def cli(*args: str):
        return strom("leader-election", "--bootstrap-server", follower.bootstrap, *args)

    done = cli("--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert done.returncode == 0 and done.stdout == f"Valid replica already elected for partitions {topic}-0\n", done
    done = cli("--election-type", "UNCLEAN", "--topic", topic, "--partition", "7")
    assert done.returncode != 0 and "UNKNOWN_TOPIC_OR_PARTITION" in done.stdout, done
    assert "1 replica(s) could not be elected" in done.stderr, done
    listed = tmp_path / "election.json"
    listed.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 1}]}))
    done = cli("--election-type", "PREFERRED", "--path-to-json-file", str(listed))
    assert done.returncode == 0 and done.stdout == f"Valid replica already elected for partitions {topic}-1\n", done
    listed.write_text(json.dumps({"partitions": [{"topic": topic}]}))
    done = cli("--election-type", "PREFERRED", "--path-to-json-file", str(listed))
    assert done.returncode != 0 and 'needs a "topic" and a "partition"' in done.stderr, done
    done = cli("--election-type", "sideways", "--all-topic-partitions")
    assert done.returncode != 0 and "not an election type" in done.stderr, done


def alter_partition_v2(broker_id: int, broker_epoch: int) -> bytes:
    """AlterPartition v2 with one topic of no partitions: only the broker's epoch is checked."""
    w = wire.Writer(flexible=True)
    w.int32(broker_id).int64(broker_epoch)
    w.length(0)
    w.tagged_fields()
    return wire.request(ALTER_PARTITION, 2, 9, w.build())


def test_alter_partition_is_the_active_controllers_and_checks_the_broker_epoch(cluster):
    quorum_leader, _ = cluster.wait_for_leader()
    follower = next(b for b in sorted(BROKERS) if b != quorum_leader)
    assert wire.api_versions(cluster.nodes[quorum_leader].controller_port).versions[ALTER_PARTITION] == (2, 3)
    assert ALTER_PARTITION not in wire.api_versions(cluster.nodes[quorum_leader].port).versions

    def error_code(node: int) -> int:
        payload = wire.call(cluster.nodes[node].controller_port, alter_partition_v2(follower, -5))
        _, reader = wire.response_reader(payload, ALTER_PARTITION, 2)
        reader.int32()  # throttle
        return reader.int16()

    assert error_code(quorum_leader) == STALE_BROKER_EPOCH
    assert error_code(follower) == NOT_CONTROLLER


def test_with_every_in_sync_replica_down_only_an_unclean_election_lets_a_stale_replica_lead(tmp_path):
    with Cluster(tmp_path, controllers=1, brokers=2, overrides=SESSIONS) as cluster:
        cluster.start()
        cluster.wait_for_leader()
        first, second = cluster.nodes[100], cluster.nodes[101]
        wait_until(lambda: live_brokers(first.bootstrap) == {100, 101}, CLUSTER_WAIT_S, "both brokers")
        admin = admin_client(first.bootstrap)
        unclean = {"unclean.leader.election.enable": "true"}
        topics = [NewTopic("unclean", num_partitions=1, replica_assignment=[[100, 101]], config=unclean),
                  NewTopic("clean", num_partitions=1, replica_assignment=[[100, 101]])]
        for future in admin.create_topics(topics).values():
            wait_future(future)
        wait_until(lambda: len(partitions(first.port, "clean")) == 1, CLUSTER_WAIT_S, "the topics")

        def state(topic: str) -> tuple[int, list[int]]:
            p = partitions(second.port, topic)[0]
            return p.leader, p.isr

        cluster.kill9(101)  # the follower: the ISR shrinks to the leader
        wait_until(lambda: partitions(first.port, "clean")[0].isr == [100], FENCED_WAIT_S, "broker 101 out of the ISR")
        cluster.kill9(100)  # the last in-sync replica: no leader; it leaves the ISR for the ELR
        cluster.restart(101)
        wait_until(lambda: partitions(second.port, "unclean").get(0) and state("unclean") == (101, [101]),
                   FENCED_WAIT_S, "the stale replica leading the topic that allows it")
        assert state("clean") == (-1, []), "a clean topic waits for its last in-sync (now eligible) replica"

        done = strom("leader-election", "--bootstrap-server", second.bootstrap, "--election-type", "unclean",
                     "--all-topic-partitions")
        assert (done.returncode, done.stdout) == (0, "Successfully completed leader election (UNCLEAN) for partitions clean-0\n"), done
        wait_until(lambda: state("clean") == (101, [101]), CLUSTER_WAIT_S, "an unclean election by request")
