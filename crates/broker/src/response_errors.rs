//! The outcome each response reports: every error code it carries (NONE
//! included) and what each applies to, as Kafka's `errorCounts()` reads
//! its responses. Dispatch counts them for the per-API error metric and,
//! at debug level, logs them with the request.
//!
//! Every response type a handler returns implements [`ResponseErrors`]:
//! dispatch requires it, so a new API cannot go uncounted.

use std::fmt::{self, Display};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

/// A response's error codes, each with what it applies to.
pub trait ResponseErrors {
    /// Calls `visit` once per error code, with the topic-partition, topic,
    /// group or resource it applies to (empty for the whole response).
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16));
}

/// Kafka's name of an error code, as the metrics label it (`None` for 0).
pub fn error_name(code: i16) -> String {
    if code == 0 {
        return "None".to_owned();
    }
    ResponseError::try_from_code(code).map_or_else(|| code.to_string(), |e| format!("{e:?}"))
}

/// A topic by name, or by id where the version names topics by id only.
struct Topic<'a>(&'a StrBytes, &'a Uuid);

impl Display for Topic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            write!(f, "{}", self.1)
        } else {
            f.write_str(self.0)
        }
    }
}

/// Responses with one error code for the whole request.
macro_rules! whole_response {
    ($($response:ty),* $(,)?) => {$(
        impl ResponseErrors for $response {
            fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
                visit(&"", self.error_code);
            }
        }
    )*};
}

whole_response!(
    ApiVersionsResponse,
    UpdateFeaturesResponse,
    EnvelopeResponse,
    JoinGroupResponse,
    SyncGroupResponse,
    HeartbeatResponse,
    ListGroupsResponse,
    InitProducerIdResponse,
    AddOffsetsToTxnResponse,
    EndTxnResponse,
    DescribeClusterResponse,
    ConsumerGroupHeartbeatResponse,
    ListTransactionsResponse,
    VoteResponse,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchSnapshotResponse,
    SaslHandshakeResponse,
    SaslAuthenticateResponse,
    AddRaftVoterResponse,
    RemoveRaftVoterResponse,
    UpdateRaftVoterResponse,
    BrokerRegistrationResponse,
    BrokerHeartbeatResponse,
    UnregisterBrokerResponse,
    ControllerRegistrationResponse,
    AllocateProducerIdsResponse,
    DescribeAclsResponse,
);

impl ResponseErrors for CreateAclsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for (i, result) in self.results.iter().enumerate() {
            visit(&format_args!("creation {i}"), result.error_code);
        }
    }
}

impl ResponseErrors for DescribeClientQuotasResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
    }
}

impl ResponseErrors for AlterClientQuotasResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for entry in &self.entries {
            let names: Vec<String> = entry
                .entity
                .iter()
                .map(|e| format!("{}={}", e.entity_type, e.entity_name.as_deref().unwrap_or("<default>")))
                .collect();
            visit(&names.join(","), entry.error_code);
        }
    }
}

impl ResponseErrors for DeleteAclsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for (i, result) in self.filter_results.iter().enumerate() {
            visit(&format_args!("filter {i}"), result.error_code);
        }
    }
}

impl ResponseErrors for DescribeUserScramCredentialsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for result in &self.results {
            visit(&format_args!("user {}", result.user), result.error_code);
        }
    }
}

impl ResponseErrors for AlterUserScramCredentialsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for result in &self.results {
            visit(&format_args!("user {}", result.user), result.error_code);
        }
    }
}

impl ResponseErrors for ProduceResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.responses {
            let name = Topic(&topic.name.0, &topic.topic_id);
            for p in &topic.partition_responses {
                visit(&format_args!("{name}-{}", p.index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for FetchResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for topic in &self.responses {
            let name = Topic(&topic.topic.0, &topic.topic_id);
            for p in &topic.partitions {
                visit(&format_args!("{name}-{}", p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for MetadataResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            let empty = StrBytes::default();
            let name = Topic(topic.name.as_ref().map_or(&empty, |n| &n.0), &topic.topic_id);
            visit(&name, topic.error_code);
            for p in &topic.partitions {
                visit(&format_args!("{name}-{}", p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for DescribeTopicPartitionsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            let empty = StrBytes::default();
            let name = Topic(topic.name.as_ref().map_or(&empty, |n| &n.0), &topic.topic_id);
            visit(&name, topic.error_code);
            for p in &topic.partitions {
                visit(&format_args!("{name}-{}", p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for DescribeQuorumResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.topic_name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for ListOffsetsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for OffsetCommitResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            let name = Topic(&topic.name.0, &topic.topic_id);
            for p in &topic.partitions {
                visit(&format_args!("{name}-{}", p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for OffsetFetchResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        // Up to v7 one group at the top level; from v8 a list of groups.
        if self.groups.is_empty() {
            visit(&"", self.error_code);
        }
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
        for group in &self.groups {
            visit(&format_args!("group {}", group.group_id.0), group.error_code);
            for topic in &group.topics {
                let name = Topic(&topic.name.0, &topic.topic_id);
                for p in &topic.partitions {
                    visit(&format_args!("{name}-{}", p.partition_index), p.error_code);
                }
            }
        }
    }
}

impl ResponseErrors for OffsetDeleteResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for FindCoordinatorResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        // Up to v3 one key at the top level; from v4 a list of keys.
        if self.coordinators.is_empty() {
            visit(&"", self.error_code);
        }
        for coordinator in &self.coordinators {
            visit(&coordinator.key, coordinator.error_code);
        }
    }
}

impl ResponseErrors for LeaveGroupResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for member in &self.members {
            visit(&format_args!("member {}", member.member_id), member.error_code);
        }
    }
}

impl ResponseErrors for DescribeGroupsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for group in &self.groups {
            visit(&format_args!("group {}", group.group_id.0), group.error_code);
        }
    }
}

impl ResponseErrors for DeleteGroupsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for group in &self.results {
            visit(&format_args!("group {}", group.group_id.0), group.error_code);
        }
    }
}

impl ResponseErrors for ConsumerGroupDescribeResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for group in &self.groups {
            visit(&format_args!("group {}", group.group_id.0), group.error_code);
        }
    }
}

impl ResponseErrors for AlterPartitionResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.topic_id, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for AlterPartitionReassignmentsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for topic in &self.responses {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for ListPartitionReassignmentsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
    }
}

impl ResponseErrors for ElectLeadersResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for topic in &self.replica_election_results {
            for p in &topic.partition_result {
                visit(&format_args!("{}-{}", topic.topic.0, p.partition_id), p.error_code);
            }
        }
    }
}

impl ResponseErrors for CreateTopicsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            visit(&topic.name.0, topic.error_code);
        }
    }
}

impl ResponseErrors for DeleteTopicsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.responses {
            let empty = StrBytes::default();
            visit(&Topic(topic.name.as_ref().map_or(&empty, |n| &n.0), &topic.topic_id), topic.error_code);
        }
    }
}

impl ResponseErrors for CreatePartitionsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.results {
            visit(&topic.name.0, topic.error_code);
        }
    }
}

impl ResponseErrors for DeleteRecordsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for DescribeConfigsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for result in &self.results {
            visit(&result.resource_name, result.error_code);
        }
    }
}

impl ResponseErrors for AlterConfigsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for result in &self.responses {
            visit(&result.resource_name, result.error_code);
        }
    }
}

impl ResponseErrors for IncrementalAlterConfigsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for result in &self.responses {
            visit(&result.resource_name, result.error_code);
        }
    }
}

impl ResponseErrors for DescribeLogDirsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        visit(&"", self.error_code);
        for dir in &self.results {
            visit(&dir.log_dir, dir.error_code);
        }
    }
}

impl ResponseErrors for AddPartitionsToTxnResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        // From v4 results per transaction with a top-level code; up to v3 per topic.
        let by_transaction = self.results_by_transaction.iter().flat_map(|t| &t.topic_results);
        if !self.results_by_transaction.is_empty() {
            visit(&"", self.error_code);
        }
        for topic in by_transaction.chain(&self.results_by_topic_v3_and_below) {
            for p in &topic.results_by_partition {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.partition_error_code);
            }
        }
    }
}

impl ResponseErrors for TxnOffsetCommitResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for WriteTxnMarkersResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in self.markers.iter().flat_map(|m| &m.topics) {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for DescribeTransactionsResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for state in &self.transaction_states {
            visit(&state.transactional_id.0, state.error_code);
        }
    }
}

impl ResponseErrors for DescribeProducersResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.name.0, p.partition_index), p.error_code);
            }
        }
    }
}

impl ResponseErrors for OffsetForLeaderEpochResponse {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn Display, i16)) {
        for topic in &self.topics {
            for p in &topic.partitions {
                visit(&format_args!("{}-{}", topic.topic.0, p.partition), p.error_code);
            }
        }
    }
}

/// Most outcome entries one debug line lists; a fetch of thousands of
/// partitions is summed up past that.
const OUTCOME_DETAIL_MAX: usize = 16;

/// A response's error codes, counted, and (at debug level) listed with
/// what each applies to.
pub struct Outcome {
    /// Each error code with how often it occurs.
    pub counts: Vec<(i16, u64)>,
    /// The codes with what each applies to, when asked for.
    pub detail: Option<String>,
}

impl Outcome {
    /// Reads `response`; `with_detail` also lists the codes (for the debug log).
    pub fn of<R: ResponseErrors + ?Sized>(response: &R, with_detail: bool) -> Self {
        use std::fmt::Write as _;
        let mut counts: Vec<(i16, u64)> = Vec::new();
        let mut detail = with_detail.then(String::new);
        let mut listed = 0;
        response.visit_errors(&mut |at, code| {
            match counts.iter_mut().find(|(c, _)| *c == code) {
                Some((_, count)) => *count += 1,
                None => counts.push((code, 1)),
            }
            let Some(text) = detail.as_mut() else { return };
            listed += 1;
            if listed <= OUTCOME_DETAIL_MAX {
                let separator = if text.is_empty() { "" } else { ", " };
                let at = at.to_string();
                let space = if at.is_empty() { "" } else { " " };
                let _ = write!(text, "{separator}{at}{space}{}", error_name(code));
            }
        });
        if let Some(text) = detail.as_mut() {
            if listed == 0 {
                text.push_str("no error codes");
            }
            if listed > OUTCOME_DETAIL_MAX {
                let totals: Vec<String> =
                    counts.iter().map(|(c, n)| format!("{} x{n}", error_name(*c))).collect();
                let _ = write!(text, ", ... {listed} in all: {}", totals.join(", "));
            }
        }
        Self { counts, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visited(response: &dyn ResponseErrors) -> Vec<(String, i16)> {
        let mut seen = Vec::new();
        response.visit_errors(&mut |at, code| seen.push((at.to_string(), code)));
        seen
    }

    #[test]
    fn partition_errors_name_their_partition() {
        use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
        let response = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_responses(vec![
                PartitionProduceResponse::default().with_index(0),
                PartitionProduceResponse::default().with_index(1).with_error_code(3),
            ])]);
        assert_eq!(visited(&response), [("t-0".to_owned(), 0), ("t-1".to_owned(), 3)]);
        assert_eq!(error_name(3), "UnknownTopicOrPartition");
        assert_eq!(error_name(0), "None");
    }

    #[test]
    fn outcome_counts_every_code_and_lists_a_bounded_few() {
        use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
        let partitions =
            (0..40).map(|i| PartitionProduceResponse::default().with_index(i).with_error_code(i as i16 % 2));
        let response = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_responses(partitions.collect())]);
        assert!(Outcome::of(&response, false).detail.is_none(), "no text unless asked");
        let outcome = Outcome::of(&response, true);
        assert_eq!(outcome.counts, [(0, 20), (1, 20)]);
        let detail = outcome.detail.unwrap();
        assert!(detail.starts_with("t-0 None, t-1 OffsetOutOfRange, "), "{detail}");
        assert!(detail.ends_with("40 in all: None x20, OffsetOutOfRange x20"), "{detail}");
        assert!(!detail.contains("t-16 "), "{detail}");
    }

    #[test]
    fn whole_response_errors_apply_to_the_request() {
        let response = HeartbeatResponse::default().with_error_code(27);
        assert_eq!(visited(&response), [(String::new(), 27)]);
    }
}
