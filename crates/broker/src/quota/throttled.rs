//! Every response's `throttle_time_ms`, so the throttle a request earned
//! (its byte rate, its handler time, its mutations) reaches the client in
//! whatever response it gets, as Kafka sets it on every response that has
//! the field (KIP-219).

use kafka_protocol::messages::*;

/// A response that may tell the client how long it is throttled.
pub trait Throttled {
    /// Raises the response's `throttle_time_ms` to at least `ms`; responses
    /// without the field ignore it.
    fn raise_throttle_time_ms(&mut self, ms: i32);
}

macro_rules! throttled {
    ($($response:ty),* $(,)?) => {$(
        impl Throttled for $response {
            fn raise_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = self.throttle_time_ms.max(ms);
            }
        }
    )*};
}

macro_rules! unthrottled {
    ($($response:ty),* $(,)?) => {$(
        impl Throttled for $response {
            fn raise_throttle_time_ms(&mut self, _ms: i32) {}
        }
    )*};
}

throttled!(
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    AlterUserScramCredentialsResponse,
    ApiVersionsResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClientQuotasResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    UpdateFeaturesResponse,
    EndTxnResponse,
    FetchResponse,
    FetchSnapshotResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
    ListPartitionReassignmentsResponse,
    ListTransactionsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
);

// The KRaft, SASL and marker responses carry no throttle time.
unthrottled!(
    AddRaftVoterResponse,
    AllocateProducerIdsResponse,
    BeginQuorumEpochResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ControllerRegistrationResponse,
    DescribeQuorumResponse,
    EndQuorumEpochResponse,
    EnvelopeResponse,
    RemoveRaftVoterResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    UnregisterBrokerResponse,
    UpdateRaftVoterResponse,
    VoteResponse,
    WriteTxnMarkersResponse,
);
