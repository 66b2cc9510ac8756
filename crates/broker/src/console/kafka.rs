//! The console's way into the broker: Kafka requests handed to the very
//! handlers that serve Kafka clients, so a page shows what `kafka-*.sh` and
//! `strom` would see, and an action obeys the same rules (and, once the
//! broker authorizes requests, the same ACLs) as the admin APIs.
//!
//! Each call builds the request a Kafka admin client would send at a served
//! version, with the console's client id and the browser's address, and
//! returns the handler's response. When the request context carries an
//! authenticated principal, [`Kafka::ctx`] is where the console's user goes
//! in, so that ACLs judge console actions like any client's.

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::dispatch::RequestContext;
use crate::handlers::{self, str_bytes, topic_name};
use crate::server::Broker;

/// The client id the broker's logs show for console requests.
pub const CLIENT_ID: &str = "strom-console";
/// DescribeConfigs and IncrementalAlterConfigs resource types.
pub const TOPIC_RESOURCE: i8 = 2;
pub const BROKER_RESOURCE: i8 = 4;
const EARLIEST: i64 = -2;
const LATEST: i64 = -1;
const ADMIN_TIMEOUT_MS: i32 = 30_000;

/// A partition by topic name and index.
pub type Tp = (String, i32);

/// Calls into the handlers on behalf of one console user.
pub struct Kafka<'a> {
    pub broker: &'a Broker,
    /// The browser's address, as Kafka reports a client's: `/127.0.0.1`.
    pub client_host: String,
    /// Whom the console's requests are made for: `User:<console user>`.
    pub principal: std::sync::Arc<str>,
}

/// Kafka's name of an error code as its `Errors` enum spells it:
/// `TOPIC_ALREADY_EXISTS`, `NONE` for 0.
pub fn error_name(code: i16) -> String {
    let camel = crate::response_errors::error_name(code);
    let mut name = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// A Kafka error code with its message, as an admin tool prints it.
pub fn error_text(code: i16, message: Option<&StrBytes>) -> Option<String> {
    if code == 0 {
        return None;
    }
    let name = error_name(code);
    Some(match message.filter(|m| !m.is_empty()) {
        Some(message) => format!("{name}: {message}"),
        None => {
            let description = ResponseError::try_from_code(code).map(|e| e.to_string()).unwrap_or_default();
            format!("{name} {description}").trim().to_owned()
        }
    })
}

impl<'a> Kafka<'a> {
    fn ctx(&self, api_key: ApiKey, api_version: i16) -> RequestContext<'a> {
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(api_version)
            .with_client_id(Some(str_bytes(CLIENT_ID)));
        // Answers name the broker's endpoints as its first advertised
        // listener does (a controller listener advertises none).
        let config = &self.broker.config();
        let advertised = config.listeners.iter().find(|l| config.advertised_endpoint(&l.name).is_some());
        let listener = advertised.or(config.listeners.first()).map_or("PLAINTEXT", |l| l.name.as_str());
        RequestContext::new(
            self.broker,
            api_key,
            header,
            self.client_host.clone(),
            listener.into(),
            self.principal.clone(),
        )
    }

    /// The message browser reads partitions directly, not through Fetch:
    /// it asks the authorizer what a Fetch would (READ on the topic).
    pub fn may_read_topic(&self, topic: &str) -> bool {
        use strom_metadata::acl::{operation, resource};
        self.ctx(ApiKey::Fetch, 17).authorize(operation::READ, resource::TOPIC, topic)
    }

    pub fn metadata(&self) -> MetadataResponse {
        let request = MetadataRequest::default().with_topics(None).with_allow_auto_topic_creation(false);
        wait(handlers::metadata::handle(&self.ctx(ApiKey::Metadata, 12), request))
    }

    pub fn describe_cluster(&self) -> DescribeClusterResponse {
        let request =
            DescribeClusterRequest::default().with_endpoint_type(1).with_include_fenced_brokers(true);
        handlers::cluster::describe(&self.ctx(ApiKey::DescribeCluster, 2), request)
    }

    pub fn describe_quorum(&self) -> DescribeQuorumResponse {
        let partition = describe_quorum_request::PartitionData::default().with_partition_index(0);
        let topic = describe_quorum_request::TopicData::default()
            .with_topic_name(topic_name("__cluster_metadata"))
            .with_partitions(vec![partition]);
        let request = DescribeQuorumRequest::default().with_topics(vec![topic]);
        let ctx = self.ctx(ApiKey::DescribeQuorum, 2);
        wait(handlers::quorum::describe(&ctx, request))
    }

    pub fn describe_log_dirs(&self) -> DescribeLogDirsResponse {
        handlers::log_dirs::describe(
            &self.ctx(ApiKey::DescribeLogDirs, 4),
            DescribeLogDirsRequest::default().with_topics(None),
        )
    }

    /// Every config of each resource, with synonyms (they name the sources).
    pub fn describe_configs(&self, resource_type: i8, names: &[String]) -> DescribeConfigsResponse {
        let resources = names
            .iter()
            .map(|name| {
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(str_bytes(name))
                    .with_configuration_keys(None)
            })
            .collect();
        let request = DescribeConfigsRequest::default().with_resources(resources).with_include_synonyms(true);
        handlers::configs::describe(&self.ctx(ApiKey::DescribeConfigs, 4), request)
    }

    /// The offset of each (topic, partition) at `timestamp` (-2 earliest,
    /// -1 latest, else the first record at or after it); `None` where the
    /// broker answered with an error.
    pub fn list_offsets(&self, partitions: &[Tp], timestamp: i64) -> Vec<(Tp, Option<i64>)> {
        let topics = by_topic(partitions)
            .iter()
            .map(|(topic, indexes)| {
                let partitions = indexes
                    .iter()
                    .map(|index| {
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(*index)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    })
                    .collect();
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(partitions)
            })
            .collect();
        let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(topics);
        let response = handlers::list_offsets::handle(&self.ctx(ApiKey::ListOffsets, 9), request);
        response
            .topics
            .into_iter()
            .flat_map(|topic| {
                let name = topic.name.0.to_string();
                topic.partitions.into_iter().map(move |p| {
                    let offset = (p.error_code == 0 && p.offset >= 0).then_some(p.offset);
                    ((name.clone(), p.partition_index), offset)
                })
            })
            .collect()
    }

    pub fn earliest_offsets(&self, partitions: &[Tp]) -> Vec<(Tp, Option<i64>)> {
        self.list_offsets(partitions, EARLIEST)
    }

    pub fn latest_offsets(&self, partitions: &[Tp]) -> Vec<(Tp, Option<i64>)> {
        self.list_offsets(partitions, LATEST)
    }

    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication: i16,
        configs: &[(String, String)],
    ) -> Option<String> {
        let configs = configs
            .iter()
            .map(|(k, v)| {
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(str_bytes(k))
                    .with_value(Some(str_bytes(v)))
            })
            .collect();
        let topic = create_topics_request::CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(replication)
            .with_configs(configs);
        let request =
            CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = admin(&self.ctx(ApiKey::CreateTopics, 7), request, handlers::topics::create);
        response.topics.first().and_then(|t| error_text(t.error_code, t.error_message.as_ref()))
    }

    pub fn delete_topic(&self, name: &str) -> Option<String> {
        let topic = delete_topics_request::DeleteTopicState::default().with_name(Some(topic_name(name)));
        let request =
            DeleteTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = admin(&self.ctx(ApiKey::DeleteTopics, 6), request, handlers::topics::delete);
        response.responses.first().and_then(|t| error_text(t.error_code, t.error_message.as_ref()))
    }

    pub fn create_partitions(&self, name: &str, count: i32) -> Option<String> {
        let topic = create_partitions_request::CreatePartitionsTopic::default()
            .with_name(topic_name(name))
            .with_count(count)
            .with_assignments(None);
        let request =
            CreatePartitionsRequest::default().with_topics(vec![topic]).with_timeout_ms(ADMIN_TIMEOUT_MS);
        let ctx = self.ctx(ApiKey::CreatePartitions, 3);
        let response = admin(&ctx, request, handlers::topics::create_partitions);
        response.results.first().and_then(|t| error_text(t.error_code, t.error_message.as_ref()))
    }

    /// Sets (`Some`) or deletes (`None`) one config of a resource.
    pub fn alter_config(
        &self,
        resource_type: i8,
        resource: &str,
        key: &str,
        value: Option<&str>,
    ) -> Option<String> {
        const SET: i8 = 0;
        const DELETE: i8 = 1;
        let config = incremental_alter_configs_request::AlterableConfig::default()
            .with_name(str_bytes(key))
            .with_config_operation(if value.is_some() { SET } else { DELETE })
            .with_value(value.map(str_bytes));
        let resource = incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(str_bytes(resource))
            .with_configs(vec![config]);
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
        let ctx = self.ctx(ApiKey::IncrementalAlterConfigs, 1);
        let response = admin(&ctx, request, handlers::configs::incremental_alter);
        response.responses.first().and_then(|r| error_text(r.error_code, r.error_message.as_ref()))
    }

    pub fn list_groups(&self) -> ListGroupsResponse {
        handlers::groups::list(&self.ctx(ApiKey::ListGroups, 5), ListGroupsRequest::default())
    }

    pub fn describe_group(&self, id: &str) -> Option<describe_groups_response::DescribedGroup> {
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes(id))]);
        handlers::groups::describe(&self.ctx(ApiKey::DescribeGroups, 5), request).groups.into_iter().next()
    }

    pub fn describe_consumer_group(
        &self,
        id: &str,
    ) -> Option<consumer_group_describe_response::DescribedGroup> {
        let request = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(id))]);
        handlers::consumer_groups::describe(&self.ctx(ApiKey::ConsumerGroupDescribe, 0), request)
            .groups
            .into_iter()
            .next()
    }

    /// Every committed offset of a group: (topic, partition) and offset.
    pub fn committed_offsets(&self, group: &str) -> Result<Vec<(Tp, i64)>, String> {
        let request =
            OffsetFetchRequest::default().with_group_id(GroupId(str_bytes(group))).with_topics(None);
        let response = handlers::offsets::fetch(&self.ctx(ApiKey::OffsetFetch, 7), request);
        if let Some(error) = error_text(response.error_code, None) {
            return Err(error);
        }
        Ok(response
            .topics
            .into_iter()
            .flat_map(|topic| {
                let name = topic.name.0.to_string();
                topic
                    .partitions
                    .into_iter()
                    .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
                    .map(move |p| ((name.clone(), p.partition_index), p.committed_offset))
            })
            .collect())
    }

    /// Commits offsets as an admin does for an inactive group (generation -1,
    /// no member); the errors per partition.
    pub fn commit_offsets(&self, group: &str, offsets: &[(Tp, i64)]) -> Vec<String> {
        let mut by_topic: IndexMap<&str, Vec<offset_commit_request::OffsetCommitRequestPartition>> =
            IndexMap::new();
        for ((topic, partition), offset) in offsets {
            by_topic.entry(topic).or_default().push(
                offset_commit_request::OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1),
            );
        }
        let topics = by_topic
            .into_iter()
            .map(|(topic, partitions)| {
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(partitions)
            })
            .collect();
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(topics);
        let response = wait(handlers::offsets::commit(&self.ctx(ApiKey::OffsetCommit, 9), request));
        response
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
            .filter_map(|(t, p)| {
                Some(format!("{}-{}: {}", t.name.0, p.partition_index, error_text(p.error_code, None)?))
            })
            .collect()
    }

    pub fn delete_group(&self, id: &str) -> Option<String> {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(str_bytes(id))]);
        let response = wait(handlers::groups::delete(&self.ctx(ApiKey::DeleteGroups, 2), request));
        response.results.first().and_then(|r| error_text(r.error_code, None))
    }

    pub fn list_transactions(&self) -> ListTransactionsResponse {
        handlers::transactions::list(
            &self.ctx(ApiKey::ListTransactions, 1),
            ListTransactionsRequest::default().with_duration_filter(-1),
        )
    }

    pub fn describe_transactions(&self, ids: &[String]) -> DescribeTransactionsResponse {
        let ids = ids.iter().map(|id| TransactionalId(str_bytes(id))).collect();
        let request = DescribeTransactionsRequest::default().with_transactional_ids(ids);
        handlers::transactions::describe(&self.ctx(ApiKey::DescribeTransactions, 0), request)
    }

    pub fn describe_producers(&self, partitions: &[Tp]) -> DescribeProducersResponse {
        let topics = by_topic(partitions)
            .into_iter()
            .map(|(topic, indexes)| {
                describe_producers_request::TopicRequest::default()
                    .with_name(topic_name(topic))
                    .with_partition_indexes(indexes)
            })
            .collect();
        let request = DescribeProducersRequest::default().with_topics(topics);
        handlers::transactions::describe_producers(&self.ctx(ApiKey::DescribeProducers, 0), request)
    }

    /// Produces one record with acks=all; its offset, or the error.
    pub fn produce(&self, topic: &str, partition: i32, record: TestRecord) -> Result<i64, String> {
        let batch = encode_record(record);
        let data =
            produce_request::PartitionProduceData::default().with_index(partition).with_records(Some(batch));
        let topic_data = produce_request::TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![data]);
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_topic_data(vec![topic_data]);
        let reply = wait(handlers::produce::handle(&self.ctx(ApiKey::Produce, 12), request));
        let answer = reply.response.responses.first().and_then(|t| t.partition_responses.first());
        match answer {
            Some(p) => match error_text(p.error_code, p.error_message.as_ref()) {
                None => Ok(p.base_offset),
                Some(error) => Err(error),
            },
            None => Err("the broker did not answer for the partition".into()),
        }
    }
}

/// Partition indexes grouped by topic, in the order the topics come.
fn by_topic(partitions: &[Tp]) -> IndexMap<&str, Vec<i32>> {
    let mut grouped: IndexMap<&str, Vec<i32>> = IndexMap::new();
    for (topic, partition) in partitions {
        grouped.entry(topic).or_default().push(*partition);
    }
    grouped
}

/// A record typed into the console.
pub struct TestRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    pub timestamp_ms: i64,
}

fn encode_record(record: TestRecord) -> Bytes {
    let headers: IndexMap<StrBytes, Option<Bytes>> =
        record.headers.into_iter().map(|(k, v)| (StrBytes::from_string(k), Some(v))).collect();
    let record = Record {
        transactional: false,
        control: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: record.timestamp_ms,
        key: record.key,
        value: record.value,
        headers,
        delete_horizon: false,
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &[record], &options).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// An admin write as the API table serves it: forwarded to the active
/// controller from a KRaft node that is not it, else answered here.
fn admin<'c, 'a, R, F, Fut>(ctx: &'c RequestContext<'a>, request: R, handler: F) -> R::Response
where
    R: kafka_protocol::protocol::Request + crate::forwarding::FailedForward,
    R::Response: crate::response_errors::ResponseErrors,
    F: FnOnce(&'c RequestContext<'a>, R) -> Fut,
    Fut: std::future::Future<Output = R::Response>,
{
    wait(async {
        match crate::forwarding::forward(ctx, &request).await {
            Some(answer) => answer,
            None => handler(ctx, request).await,
        }
    })
}

/// Runs an async handler to its answer. Pages render on the blocking pool
/// (see `console::serve`), where waiting on the runtime is allowed.
fn wait<T>(handler: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(handler)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_kafkas_enum_names() {
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(ResponseError::TopicAlreadyExists.code()), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(ResponseError::InvalidTopicException.code()), "INVALID_TOPIC_EXCEPTION");
        let message = str_bytes("it exists");
        assert_eq!(error_text(36, Some(&message)).unwrap(), "TOPIC_ALREADY_EXISTS: it exists");
        assert_eq!(error_text(0, Some(&message)), None);
    }
}
