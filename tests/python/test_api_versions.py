"""The ApiVersions table, pinned to Kafka 4.1's.

KAFKA_41 holds what a Kafka 4.1.0 broker advertises for each API Strom
serves, looked up in Kafka 4.1.0's message schemas (`validVersions`, less
the versions marked `latestVersionUnstable`, which a broker advertises only
with `unstable.api.versions.enable`) and in `ApiKeys`, which lowers
Produce's advertised minimum to 0 (KAFKA-18659). OMITTED lists the APIs of
Kafka 4.1's broker listener that Strom deliberately does not serve, and why.
A change to either side of the table must change this file.
"""

from __future__ import annotations

import wire

KAFKA_41 = {
    0: ("Produce", 0, 13),
    1: ("Fetch", 4, 18),
    2: ("ListOffsets", 1, 10),
    3: ("Metadata", 0, 13),
    8: ("OffsetCommit", 2, 9),  # v10 is unstable in 4.1.0
    9: ("OffsetFetch", 1, 9),  # v10 is unstable in 4.1.0
    10: ("FindCoordinator", 0, 6),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 6),
    16: ("ListGroups", 0, 5),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 5),  # v6 (KIP-939) is unstable in 4.1.0
    23: ("OffsetForLeaderEpoch", 2, 4),  # v0-v1 removed in 4.0 (KIP-896)
    24: ("AddPartitionsToTxn", 0, 5),
    25: ("AddOffsetsToTxn", 0, 4),
    26: ("EndTxn", 0, 5),
    27: ("WriteTxnMarkers", 1, 1),
    28: ("TxnOffsetCommit", 0, 5),
    29: ("DescribeAcls", 1, 3),  # v0 removed in 4.0 (KIP-896)
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    45: ("AlterPartitionReassignments", 0, 1),  # v1: KIP-860
    46: ("ListPartitionReassignments", 0, 0),
    47: ("OffsetDelete", 0, 0),
    48: ("DescribeClientQuotas", 0, 1),
    49: ("AlterClientQuotas", 0, 1),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    55: ("DescribeQuorum", 0, 2),
    57: ("UpdateFeatures", 0, 2),
    60: ("DescribeCluster", 0, 2),
    61: ("DescribeProducers", 0, 0),
    64: ("UnregisterBroker", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 2),
    68: ("ConsumerGroupHeartbeat", 0, 1),
    69: ("ConsumerGroupDescribe", 0, 1),
    75: ("DescribeTopicPartitions", 0, 0),
    80: ("AddRaftVoter", 0, 1),
    81: ("RemoveRaftVoter", 0, 0),
}

# APIs served below Kafka 4.1's top version, with the version served and why.
BELOW_KAFKA_41 = {
    80: ((0, 0), "v1 (AckWhenCommitted) is not in kafka-protocol 0.18"),
}

OMITTED = {
    "no delegation tokens yet": {
        38: "CreateDelegationToken",
        39: "RenewDelegationToken", 40: "ExpireDelegationToken", 41: "DescribeDelegationToken",
    },
    "no log dir moves yet": {34: "AlterReplicaLogDirs"},
    "no client telemetry (KIP-714)": {71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 74: "ListConfigResources"},
    "no share groups (KIP-932)": {
        76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge",
        83: "InitializeShareGroupState", 84: "ReadShareGroupState", 85: "WriteShareGroupState",
        86: "DeleteShareGroupState", 87: "ReadShareGroupStateSummary", 90: "DescribeShareGroupOffsets",
        91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
    },
}

PRODUCE = 0
REACTION_TIMEOUT_S = 5.0


def test_served_table_is_kafka_41s(broker):
    served = wire.api_versions(broker.port).versions
    expected = {key: (low, high) for key, (_, low, high) in KAFKA_41.items()}
    expected.update({key: versions for key, (versions, _) in BELOW_KAFKA_41.items()})
    differing = {
        f"{KAFKA_41[key][0] if key in KAFKA_41 else key}({key})": (served.get(key), expected.get(key))
        for key in served.keys() | expected.keys()
        if served.get(key) != expected.get(key)
    }
    assert not differing, f"(served, Kafka 4.1) differ: {differing}"


def test_omitted_apis_are_absent_and_named_once(broker):
    served = wire.api_versions(broker.port).versions
    omitted = [key for group in OMITTED.values() for key in group]
    assert len(omitted) == len(set(omitted)), "an API listed twice"
    assert not set(omitted) & KAFKA_41.keys(), "an API both served and omitted"
    assert not set(omitted) & served.keys(), f"served though listed as omitted: {set(omitted) & served.keys()}"


def test_produce_below_v3_is_advertised_but_refused_as_kafka_4_does(broker):
    # Produce v2: acks, timeout_ms, no topics. Kafka 4 closes the connection
    # on a version it no longer serves instead of answering.
    body = wire.int16(1) + wire.int32(1000) + wire.int32(0)
    reaction = wire.exchange(broker.port, wire.request(PRODUCE, 2, 7, body), timeout_s=REACTION_TIMEOUT_S)
    assert reaction.closed and reaction.received == b"", reaction
    assert wire.api_versions(broker.port).versions[PRODUCE] == (0, 13), "the broker stays up"
