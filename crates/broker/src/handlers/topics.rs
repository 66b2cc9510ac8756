//! CreateTopics, DeleteTopics and CreatePartitions.

use std::collections::{BTreeMap, HashSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use strom_metadata::{MetadataError, NewTopic};
use uuid::Uuid;

use super::configs::topic_entries;
use super::{str_bytes, topic_name};
use crate::config::BrokerConfig;
use crate::controller_channel::ControllerChannel;
use crate::dispatch::RequestContext;
use crate::error::metadata_error;
use crate::failpoint;
use crate::quota::{MutationQuota, THROTTLED_MESSAGE};
use strom_metadata::acl::{operation, resource};

pub async fn create(ctx: &RequestContext<'_>, request: CreateTopicsRequest) -> CreateTopicsResponse {
    let duplicates = repeated(request.topics.iter().map(|t| t.name.0.as_str()));
    let requested = request
        .topics
        .iter()
        .filter(|t| !duplicates.contains(t.name.0.as_str()))
        .map(|t| requested_partitions(ctx.config(), t))
        .sum();
    // Like Kafka's bound on the records of one operation: the whole request
    // is refused, so no topic of it is half way to the limit.
    if let Err(e) = ctx.controller().check_partitions_per_request(requested) {
        tracing::info!("create topics refused: {e}");
        let refused = request.topics.iter().map(|t| {
            for_version(failure(t.name.0.as_str(), metadata_error(&e), &e.to_string()), ctx.api_version)
        });
        return CreateTopicsResponse::default().with_topics(refused.collect());
    }
    let mutations = MutationQuota::new(ctx, 6);
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let result = create_checked(ctx, &mutations, &duplicates, topic, request.validate_only).await;
        topics.push(for_version(result, ctx.api_version));
    }
    CreateTopicsResponse::default().with_topics(topics).with_throttle_time_ms(mutations.throttle_time_ms())
}

/// One topic of a CreateTopics request, once it passed the request's
/// checks: its own, then the controller's.
async fn create_checked(
    ctx: &RequestContext<'_>,
    mutations: &MutationQuota<'_, '_>,
    duplicates: &HashSet<String>,
    topic: CreatableTopic,
    validate_only: bool,
) -> CreatableTopicResult {
    let name = topic.name.0.to_string();
    if duplicates.contains(&name) {
        return failure(&name, ResponseError::InvalidRequest, "topic appears more than once in the request");
    }
    if !may_create(ctx, &name) {
        return failure(&name, ResponseError::TopicAuthorizationFailed, "Authorization failed.");
    }
    if mutations.exceeded() {
        return failure(&name, ResponseError::ThrottlingQuotaExceeded, THROTTLED_MESSAGE);
    }
    let mut result = create_one(ctx, topic, validate_only).await;
    if result.error_code == 0 && !validate_only {
        mutations.record(result.num_partitions.max(0) as usize);
    }
    // The new topic's configs are shown only to who may describe them.
    if !ctx.authorize(operation::DESCRIBE_CONFIGS, resource::TOPIC, &name) {
        result.configs = None;
        result.topic_config_error_code = ResponseError::TopicAuthorizationFailed.code();
    }
    result
}

async fn create_one(
    ctx: &RequestContext<'_>,
    topic: CreatableTopic,
    validate_only: bool,
) -> CreatableTopicResult {
    let name = topic.name.0.to_string();
    let new_topic = match new_topic(ctx.config(), &topic) {
        Ok(new_topic) => new_topic,
        Err((error, message)) => return failure(&name, error, &message),
    };
    match ctx.controller().create_topic_with_logs(new_topic, validate_only, ctx.replicas()).await {
        Ok(created) => {
            if !validate_only {
                failpoint::reach(failpoint::TOPIC_COMMITTED);
            }
            // Every topic config, as Kafka reports them: overrides over
            // dynamic broker defaults over static ones.
            let image = ctx.controller().image();
            let configs = topic_entries(ctx.config(), &image, &created.configs, |_| true)
                .into_iter()
                .map(|entry| {
                    CreatableTopicConfigs::default()
                        .with_name(str_bytes(&entry.name))
                        .with_value(entry.value.as_deref().map(str_bytes))
                        .with_read_only(entry.read_only)
                        .with_config_source(entry.source)
                })
                .collect();
            let replication = created.partitions.values().next().map_or(0, |p| p.replicas.len() as i16);
            CreatableTopicResult::default()
                .with_name(topic_name(&name))
                .with_topic_id(created.id)
                .with_num_partitions(created.partitions.len() as i32)
                .with_replication_factor(replication)
                .with_configs(Some(configs))
        }
        Err(e) => {
            if !matches!(e, MetadataError::TopicAlreadyExists(_)) {
                tracing::info!(topic = %name, "create topic refused: {e}");
            }
            failure(&name, metadata_error(&e), &e.to_string())
        }
    }
}

/// Resolves defaults (-1) and manual assignments into a topic to create.
fn new_topic(config: &BrokerConfig, topic: &CreatableTopic) -> Result<NewTopic, (ResponseError, String)> {
    let mut configs = BTreeMap::new();
    for config in &topic.configs {
        let Some(value) = &config.value else {
            return Err((
                ResponseError::InvalidConfig,
                format!("null value for config {}", config.name.as_str()),
            ));
        };
        configs.insert(config.name.to_string(), value.to_string());
    }
    let name = topic.name.0.to_string();
    if topic.assignments.is_empty() {
        let partitions =
            if topic.num_partitions == -1 { config.num_partitions } else { topic.num_partitions };
        let replication_factor = if topic.replication_factor == -1 {
            config.default_replication_factor
        } else {
            topic.replication_factor
        };
        return Ok(NewTopic { name, partitions, replication_factor, configs, ..Default::default() });
    }
    if topic.num_partitions != -1 || topic.replication_factor != -1 {
        let message = "both replica assignments and partition count or replication factor were given";
        return Err((ResponseError::InvalidRequest, message.into()));
    }
    // The controller checks them with placement's validator, as Kafka's does.
    let assignments = topic
        .assignments
        .iter()
        .map(|a| (a.partition_index, a.broker_ids.iter().map(|id| id.0).collect()))
        .collect();
    Ok(NewTopic { name, configs, assignments, ..Default::default() })
}

/// The partitions a topic of a CreateTopics request asks for.
fn requested_partitions(config: &BrokerConfig, topic: &CreatableTopic) -> i64 {
    match (topic.assignments.len(), topic.num_partitions) {
        (0, -1) => config.num_partitions.into(),
        (0, count) => i64::from(count).max(0),
        (assigned, _) => assigned as i64,
    }
}

/// Topic ids are reported from v7, partition counts and configs from v5.
fn for_version(mut result: CreatableTopicResult, version: i16) -> CreatableTopicResult {
    if version < 7 {
        result.topic_id = Uuid::nil();
    }
    if version < 5 {
        result.num_partitions = -1;
        result.replication_factor = -1;
        result.configs = Some(Vec::new());
        result.topic_config_error_code = 0;
    }
    result
}

/// Topic names that appear more than once: Kafka refuses all their entries.
fn repeated<'a>(names: impl Iterator<Item = &'a str>) -> HashSet<String> {
    let mut seen = HashSet::new();
    names.filter(|name| !seen.insert(*name)).map(str::to_owned).collect()
}

fn failure(name: &str, error: ResponseError, message: &str) -> CreatableTopicResult {
    CreatableTopicResult::default()
        .with_name(topic_name(name))
        .with_error_code(error.code())
        .with_error_message(Some(str_bytes(message)))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
}

pub async fn delete(ctx: &RequestContext<'_>, request: DeleteTopicsRequest) -> DeleteTopicsResponse {
    // v6 names topics by name or id; earlier versions by name only.
    let wanted: Vec<(Option<String>, Uuid)> = if ctx.api_version >= 6 {
        request.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)).collect()
    } else {
        request.topic_names.iter().map(|n| (Some(n.0.to_string()), Uuid::nil())).collect()
    };
    let mutations = MutationQuota::new(ctx, 5);
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let mut result = delete_checked(ctx, &mutations, name, id).await;
        // Topic ids are reported from v6, error messages from v5.
        if ctx.api_version < 6 {
            result.topic_id = Uuid::nil();
        }
        if ctx.api_version < 5 {
            result.error_message = None;
        }
        responses.push(result);
    }
    DeleteTopicsResponse::default()
        .with_responses(responses)
        .with_throttle_time_ms(mutations.throttle_time_ms())
}

/// One topic of a DeleteTopics request: refused over the mutation quota
/// or without DELETE on it, else deleted by the controller.
async fn delete_checked(
    ctx: &RequestContext<'_>,
    mutations: &MutationQuota<'_, '_>,
    name: Option<String>,
    id: Uuid,
) -> DeletableTopicResult {
    if mutations.exceeded() {
        return DeletableTopicResult::default()
            .with_name(name.as_deref().map(topic_name))
            .with_topic_id(id)
            .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
            .with_error_message((ctx.api_version >= 5).then(|| str_bytes(THROTTLED_MESSAGE)));
    }
    let partitions = partition_count(ctx.controller(), name.as_deref(), id);
    let result = match delete_denied(ctx, name.as_deref(), id) {
        Some(denied) => denied,
        None => delete_one(ctx, name, id).await,
    };
    if result.error_code == 0 {
        mutations.record(partitions);
    }
    result
}

/// The partitions of a topic named by name or id (0 if unknown).
fn partition_count(controller: &ControllerChannel, name: Option<&str>, id: Uuid) -> usize {
    let image = controller.image();
    let topic = match name {
        Some(name) => image.topic(name),
        None => image.topic_by_id(&id),
    };
    topic.map_or(0, |t| t.partitions.len())
}

/// CreateTopics needs CREATE on the cluster or on the topic.
fn may_create(ctx: &RequestContext<'_>, name: &str) -> bool {
    ctx.authorize_cluster(operation::CREATE) || ctx.authorize(operation::CREATE, resource::TOPIC, name)
}

/// The answer for a topic the principal may not delete (DELETE on it);
/// an id no topic has is left to the unknown-id answer.
fn delete_denied(ctx: &RequestContext<'_>, name: Option<&str>, id: Uuid) -> Option<DeletableTopicResult> {
    let image = ctx.controller().image();
    let name = match name {
        Some(name) => name.to_owned(),
        None => image.topic_by_id(&id)?.name.clone(),
    };
    (!ctx.authorize(operation::DELETE, resource::TOPIC, &name)).then(|| {
        DeletableTopicResult::default()
            .with_name(Some(topic_name(&name)))
            .with_topic_id(id)
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
    })
}

async fn delete_one(ctx: &RequestContext<'_>, name: Option<String>, id: Uuid) -> DeletableTopicResult {
    let image = ctx.controller().image();
    let found = match &name {
        Some(name) => image.topic(name),
        None => image.topic_by_id(&id),
    };
    let result = DeletableTopicResult::default().with_name(name.as_deref().map(topic_name)).with_topic_id(id);
    let Some(topic) = found else {
        let error = if name.is_some() {
            ResponseError::UnknownTopicOrPartition
        } else {
            ResponseError::UnknownTopicId
        };
        return result.with_error_code(error.code());
    };
    let topic_id = topic.id;
    let result = result.with_name(Some(topic_name(&topic.name))).with_topic_id(topic_id);
    match ctx.controller().delete_topic(topic_id).await {
        Ok(deleted) => {
            failpoint::reach(failpoint::TOPIC_REMOVAL_COMMITTED);
            tracing::info!(topic = %deleted, "deleted topic");
            ctx.metrics().remove_topic(&deleted);
            result
        }
        Err(e) => result
            .with_error_code(metadata_error(&e).code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    }
}

/// CreatePartitions: grows topics; partitions are never removed.
pub async fn create_partitions(
    ctx: &RequestContext<'_>,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let duplicates = repeated(request.topics.iter().map(|t| t.name.0.as_str()));
    let image = ctx.controller().image();
    let requested = request
        .topics
        .iter()
        .filter(|t| !duplicates.contains(t.name.0.as_str()))
        .filter_map(|t| Some(i64::from(t.count) - image.topic(t.name.0.as_str())?.partitions.len() as i64))
        .map(|new| new.max(0))
        .sum();
    if let Err(e) = ctx.controller().check_partitions_per_request(requested) {
        tracing::info!("create partitions refused: {e}");
        let refused = request.topics.iter().map(|t| {
            CreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(metadata_error(&e).code())
                .with_error_message(Some(str_bytes(&e.to_string())))
        });
        return CreatePartitionsResponse::default().with_results(refused.collect());
    }
    let mutations = MutationQuota::new(ctx, 3);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        let current = image.topic(name).map_or(0, |t| t.partitions.len());
        let outcome = if duplicates.contains(name) {
            Err((ResponseError::InvalidRequest, "topic appears more than once in the request".to_owned()))
        } else if !ctx.authorize(operation::ALTER, resource::TOPIC, name) {
            Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_owned()))
        } else if mutations.exceeded() {
            Err((ResponseError::ThrottlingQuotaExceeded, THROTTLED_MESSAGE.to_owned()))
        } else {
            add_partitions(ctx, topic, request.validate_only).await
        };
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        results.push(match outcome {
            Ok(()) => {
                if !request.validate_only {
                    mutations.record((topic.count.max(0) as usize).saturating_sub(current));
                }
                result
            }
            Err((error, message)) => {
                result.with_error_code(error.code()).with_error_message(Some(str_bytes(&message)))
            }
        });
    }
    CreatePartitionsResponse::default()
        .with_results(results)
        .with_throttle_time_ms(mutations.throttle_time_ms())
}

/// Grows one topic through the controller, opening the logs it places here.
async fn add_partitions(
    ctx: &RequestContext<'_>,
    topic: &CreatePartitionsTopic,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    // An empty list asks for no particular placement, like null.
    let assignments: Option<Vec<Vec<i32>>> = topic
        .assignments
        .as_ref()
        .filter(|a| !a.is_empty())
        .map(|a| a.iter().map(|a| a.broker_ids.iter().map(|id| id.0).collect()).collect());
    ctx.controller()
        .create_partitions_with_logs(
            &topic.name.0,
            topic.count,
            assignments.as_deref(),
            validate_only,
            ctx.replicas(),
        )
        .await
        .map_err(|e| (metadata_error(&e), e.to_string()))?;
    if !validate_only {
        failpoint::reach(failpoint::PARTITIONS_ADDED);
    }
    Ok(())
}
