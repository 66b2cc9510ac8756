//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics,
//! brokers and groups.
//!
//! A topic resource holds the topic's overrides. A broker resource holds
//! dynamic broker configs: named by this node's id for this broker alone,
//! or "" for the cluster-wide defaults. Changes go through the controller
//! (validated, written to the metadata log) and then reach every hosted
//! log at once; [`crate::config_sources`] says where each described value
//! comes from. A group resource holds a group's overrides
//! ([`super::group_configs`]).

use std::collections::{BTreeMap, HashSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest, AlterConfigsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strom_metadata::controller::validate_topic_name;
use strom_metadata::topic_config::{
    broker_synonyms, dynamic_broker_config_kind, topic_config_def, Kind, TOPIC_CONFIGS,
};
use strom_metadata::{
    ConfigResource, MetadataError, MetadataImage, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC,
};

use super::str_bytes;
use crate::config::is_known_key;
use crate::config::BrokerConfig;
use crate::config_sources::{
    config_type, BrokerLevels, ConfigEntry, BROKER_KEYS, DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG,
};
use crate::dispatch::RequestContext;
use crate::error::metadata_error;
use crate::forwarding;
use crate::security::ListenerSecurity;
use strom_metadata::acl::{operation, resource};

/// A refusal: the error code and the message sent with it.
type Refusal = (ResponseError, Option<String>);

fn invalid_request(message: String) -> Refusal {
    (ResponseError::InvalidRequest, Some(message))
}

/// The broker config levels of this broker in `image`.
fn levels<'a>(config: &'a BrokerConfig, image: &'a MetadataImage, node_id: &str) -> BrokerLevels<'a> {
    BrokerLevels {
        per_broker: image.broker_configs(node_id),
        cluster_default: image.broker_configs(""),
        static_configs: &config.provided,
    }
}

/// The resource a request names; a broker must be this one, or "", unless
/// `any_broker` (the active controller takes a change to any broker's).
fn config_resource(
    config: &BrokerConfig,
    resource_type: i8,
    name: &str,
    any_broker: bool,
) -> Result<ConfigResource, Refusal> {
    match resource_type {
        RESOURCE_TOPIC => Ok(ConfigResource::Topic(name.to_owned())),
        RESOURCE_BROKER if name.is_empty() => Ok(ConfigResource::Broker(String::new())),
        RESOURCE_BROKER => {
            let node_id: i32 = name
                .parse()
                .map_err(|_| invalid_request(format!("Broker id must be an integer, but it is: {name}")))?;
            if node_id != config.node_id && !any_broker {
                let expected = config.node_id;
                return Err(invalid_request(format!(
                    "Unexpected broker id, expected {expected} or empty string, but received {name}"
                )));
            }
            Ok(ConfigResource::Broker(node_id.to_string()))
        }
        RESOURCE_GROUP => Ok(ConfigResource::Group(name.to_owned())),
        other => Err(invalid_request(format!("Unsupported resource type {other}"))),
    }
}

// ---------------------------------------------------------------- describe

/// Kafka's check of DESCRIBE_CONFIGS or ALTER_CONFIGS: on the topic, on the
/// cluster for broker and logger resources, on the group for groups.
fn config_denial(ctx: &RequestContext<'_>, op: i8, resource_type: i8, name: &str) -> Option<Refusal> {
    let (allowed, error) = match resource_type {
        RESOURCE_TOPIC => (ctx.authorize(op, resource::TOPIC, name), ResponseError::TopicAuthorizationFailed),
        RESOURCE_GROUP => (ctx.authorize(op, resource::GROUP, name), ResponseError::GroupAuthorizationFailed),
        _ => (ctx.authorize_cluster(op), ResponseError::ClusterAuthorizationFailed),
    };
    (!allowed).then_some((error, None))
}

pub fn describe(ctx: &RequestContext<'_>, request: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let config = ctx.config();
    let image = ctx.controller().image();
    let node_id = config.node_id.to_string();
    let levels = levels(config, &image, &node_id);
    let results = request
        .resources
        .iter()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let denied = config_denial(
                ctx,
                operation::DESCRIBE_CONFIGS,
                resource.resource_type,
                &resource.resource_name,
            );
            match denied.map_or_else(|| describe_resource(config, &image, &levels, resource), Err) {
                Ok(entries) => result.with_configs(
                    entries.into_iter().map(|e| wire_entry(e, request.include_synonyms)).collect(),
                ),
                Err((error, message)) => {
                    result.with_error_code(error.code()).with_error_message(message.as_deref().map(str_bytes))
                }
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn describe_resource(
    config: &BrokerConfig,
    image: &MetadataImage,
    levels: &BrokerLevels<'_>,
    resource: &DescribeConfigsResource,
) -> Result<Vec<ConfigEntry>, Refusal> {
    let keys = resource.configuration_keys.as_deref().unwrap_or_default();
    let wanted = |name: &str| keys.is_empty() || keys.iter().any(|k| k.as_str() == name);
    let name = resource.resource_name.as_str();
    match config_resource(config, resource.resource_type, name, false)? {
        ConfigResource::Topic(topic) => {
            validate_topic_name(&topic)
                .map_err(|e| (ResponseError::InvalidTopicException, Some(e.to_string())))?;
            let topic = image.topic(&topic).ok_or((ResponseError::UnknownTopicOrPartition, None))?;
            Ok(topic_entries(config, image, &topic.configs, wanted))
        }
        ConfigResource::Broker(node) if node.is_empty() => {
            Ok(levels.cluster_default_entries().into_iter().filter(|e| wanted(&e.name)).collect())
        }
        ConfigResource::Broker(_) => {
            let mut names: Vec<&str> = BROKER_KEYS.iter().map(|k| k.name).filter(|n| wanted(n)).collect();
            names.sort_unstable();
            let mut entries: Vec<ConfigEntry> =
                names.into_iter().map(|name| levels.broker_entry(name)).collect();
            entries.extend(levels.listener_store_entries().into_iter().filter(|e| wanted(&e.name)));
            Ok(entries)
        }
        ConfigResource::Group(group) => {
            Ok(super::group_configs::entries(config, image.group_configs(&group), wanted))
        }
    }
}

/// The topic configs `wanted` of a topic with these `overrides`, as this
/// broker applies them under `image`.
pub fn topic_entries(
    config: &BrokerConfig,
    image: &MetadataImage,
    overrides: &BTreeMap<String, String>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<ConfigEntry> {
    let node_id = config.node_id.to_string();
    let levels = levels(config, image, &node_id);
    let log = config.with_dynamic_from(image).log_config_for(overrides);
    let described = TOPIC_CONFIGS.iter().filter(|def| wanted(def.name));
    described.map(|def| levels.topic_entry(def, overrides, &log)).collect()
}

fn wire_entry(entry: ConfigEntry, include_synonyms: bool) -> DescribeConfigsResourceResult {
    let sensitive = entry.config_type == config_type::PASSWORD;
    let synonyms = if include_synonyms { entry.synonyms } else { Vec::new() };
    let synonyms = synonyms
        .into_iter()
        .map(|s| {
            DescribeConfigsSynonym::default()
                .with_name(str_bytes(&s.name))
                .with_value((!sensitive).then(|| str_bytes(&s.value)))
                .with_source(s.source)
        })
        .collect();
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(&entry.name))
        .with_value(entry.value.as_deref().map(str_bytes))
        .with_read_only(entry.read_only)
        .with_config_source(entry.source)
        .with_is_sensitive(sensitive)
        .with_synonyms(synonyms)
        .with_config_type(entry.config_type)
        .with_documentation(None)
}

// ---------------------------------------------------------------- alter

/// Kafka's `AlterConfigOp.OpType`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Set(String),
    Delete,
    Append(String),
    Subtract(String),
}

impl Op {
    fn from_wire(operation: i8, value: Option<&StrBytes>) -> Result<Self, String> {
        let value = || value.map(|v| v.to_string());
        Ok(match (operation, value()) {
            (1, _) => Op::Delete,
            (0, Some(v)) => Op::Set(v),
            (2, Some(v)) => Op::Append(v),
            (3, Some(v)) => Op::Subtract(v),
            (0..=3, None) => return Err("null value".into()),
            (other, _) => return Err(format!("Unknown operation type {other}")),
        })
    }

    /// Whether the op leaves a value set (all but DELETE).
    fn sets_value(&self) -> bool {
        !matches!(self, Op::Delete)
    }
}

/// A requested change to one resource, from either API.
struct Alteration {
    resource_type: i8,
    resource_name: String,
    /// AlterConfigs replaces the resource's whole set with its `Set`s;
    /// IncrementalAlterConfigs changes only what its ops name.
    replace: bool,
    ops: Vec<(String, Op)>,
    /// A problem found while decoding the request, reported as is.
    refused: Option<Refusal>,
}

pub async fn alter(ctx: &RequestContext<'_>, request: AlterConfigsRequest) -> AlterConfigsResponse {
    if forwarding::forwards(ctx) {
        return forward_rest(ctx, request).await;
    }
    alter_here(ctx, request).await
}

async fn alter_here(ctx: &RequestContext<'_>, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let alterations = request
        .resources
        .into_iter()
        .map(|r| {
            let (mut ops, mut nulls) = (Vec::with_capacity(r.configs.len()), Vec::new());
            for config in r.configs {
                match config.value {
                    Some(value) => ops.push((config.name.to_string(), Op::Set(value.to_string()))),
                    None => nulls.push(config.name.to_string()),
                }
            }
            let denied = config_denial(ctx, operation::ALTER_CONFIGS, r.resource_type, &r.resource_name);
            Alteration {
                resource_type: r.resource_type,
                resource_name: r.resource_name.to_string(),
                replace: true,
                ops,
                refused: denied.or_else(|| null_values(&nulls)),
            }
        })
        .collect();
    AlterConfigsRequest::response(alter_all(ctx, alterations, request.validate_only).await)
}

pub async fn incremental_alter(
    ctx: &RequestContext<'_>,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    if forwarding::forwards(ctx) {
        return forward_rest(ctx, request).await;
    }
    incremental_alter_here(ctx, request).await
}

async fn incremental_alter_here(
    ctx: &RequestContext<'_>,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let alterations = request
        .resources
        .into_iter()
        .map(|r| {
            let mut ops = Vec::with_capacity(r.configs.len());
            let mut nulls = Vec::new();
            let mut refused = None;
            for config in &r.configs {
                match Op::from_wire(config.config_operation, config.value.as_ref()) {
                    Ok(op) => ops.push((config.name.to_string(), op)),
                    Err(_) if config.value.is_none() => nulls.push(config.name.to_string()),
                    Err(message) => refused = Some(invalid_request(message)),
                }
            }
            let denied = config_denial(ctx, operation::ALTER_CONFIGS, r.resource_type, &r.resource_name);
            Alteration {
                resource_type: r.resource_type,
                resource_name: r.resource_name.to_string(),
                replace: false,
                ops,
                refused: denied.or(refused).or_else(|| null_values(&nulls)),
            }
        })
        .collect();
    IncrementalAlterConfigsRequest::response(alter_all(ctx, alterations, request.validate_only).await)
}

// ---------------------------------------------------------------- forwarding

/// A broker's part of a config change it forwards, as Kafka's brokers
/// preprocess one: a broker resource must name this broker or be "" (the
/// cluster); the active controller then takes the rest, for any broker.
fn refused_by_this_broker(ctx: &RequestContext<'_>, resource_type: i8, name: &str) -> Option<Refusal> {
    (resource_type == RESOURCE_BROKER)
        .then(|| config_resource(ctx.config(), resource_type, name, false).err())?
}

/// One resource's outcome: its type and name, the error code (0 for none)
/// and the message.
type ResourceResult = (i8, String, i16, Option<StrBytes>);

/// AlterConfigs and IncrementalAlterConfigs, as the forwarding code sees them.
trait ConfigChange: forwarding::FailedForward + Clone {
    /// Each resource's (type, name).
    fn resources(&self) -> Vec<(i8, String)>;
    /// Keeps the resources `keep` says to.
    fn retain(&mut self, keep: &[bool]);
    /// The answer's per-resource results as (type, name, code, message).
    fn results(response: Self::Response) -> Vec<ResourceResult>;
    /// An answer of per-resource results.
    fn response(results: Vec<ResourceResult>) -> Self::Response;
    /// Serves the request on this node.
    async fn here(ctx: &RequestContext<'_>, request: Self) -> Self::Response;
}

/// Refuses here what this broker decides and forwards the rest to the
/// active controller (served here if it cannot be forwarded); the answer
/// lists the resources in request order.
async fn forward_rest<R>(ctx: &RequestContext<'_>, request: R) -> R::Response
where
    R: ConfigChange,
    R::Response: crate::response_errors::ResponseErrors,
{
    let resources = request.resources();
    let refusals: Vec<Option<Refusal>> =
        resources.iter().map(|(kind, name)| refused_by_this_broker(ctx, *kind, name)).collect();
    let mut rest = request.clone();
    rest.retain(&refusals.iter().map(Option::is_none).collect::<Vec<_>>());
    let answered = if rest.resources().is_empty() {
        Vec::new()
    } else {
        match forwarding::forward(ctx, &rest).await {
            Some(answer) => R::results(answer),
            None => R::results(R::here(ctx, rest).await),
        }
    };
    let mut answered = answered.into_iter();
    let results = resources
        .into_iter()
        .zip(refusals)
        .map(|((kind, name), refusal)| match refusal {
            Some(refusal) => {
                let (code, message) = wire_refusal(Some(refusal));
                (kind, name, code, message)
            }
            None => answered.next().unwrap_or((kind, name, ResponseError::UnknownServerError.code(), None)),
        })
        .collect();
    R::response(results)
}

/// The two APIs' impls differ only in their generated types.
macro_rules! config_change {
    ($request:ty, $response:ident, $result:ty, $here:ident) => {
        impl ConfigChange for $request {
            fn resources(&self) -> Vec<(i8, String)> {
                self.resources.iter().map(|r| (r.resource_type, r.resource_name.to_string())).collect()
            }

            fn retain(&mut self, keep: &[bool]) {
                let mut keep = keep.iter();
                self.resources.retain(|_| *keep.next().unwrap_or(&true));
            }

            fn results(response: $response) -> Vec<ResourceResult> {
                let result = |r: $result| {
                    (r.resource_type, r.resource_name.to_string(), r.error_code, r.error_message)
                };
                response.responses.into_iter().map(result).collect()
            }

            fn response(results: Vec<ResourceResult>) -> $response {
                let responses = results.into_iter().map(|(kind, name, code, message)| {
                    <$result>::default()
                        .with_resource_type(kind)
                        .with_resource_name(str_bytes(&name))
                        .with_error_code(code)
                        .with_error_message(message)
                });
                $response::default().with_responses(responses.collect())
            }

            async fn here(ctx: &RequestContext<'_>, request: Self) -> $response {
                $here(ctx, request).await
            }
        }
    };
}

config_change!(
    AlterConfigsRequest,
    AlterConfigsResponse,
    alter_configs_response::AlterConfigsResourceResponse,
    alter_here
);
config_change!(
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    incremental_alter_configs_response::AlterConfigsResourceResponse,
    incremental_alter_here
);

/// The error code (0 for none) and message of a resource's result.
fn wire_refusal(refusal: Option<Refusal>) -> (i16, Option<StrBytes>) {
    match refusal {
        None => (0, None),
        Some((error, message)) => (error.code(), message.as_deref().map(str_bytes)),
    }
}

fn null_values(names: &[String]) -> Option<Refusal> {
    (!names.is_empty())
        .then(|| invalid_request(format!("Null value not supported for : {}", names.join(", "))))
}

/// Applies each alteration, then brings the hosted logs in line at once.
async fn alter_all(
    ctx: &RequestContext<'_>,
    alterations: Vec<Alteration>,
    validate_only: bool,
) -> Vec<ResourceResult> {
    let mut seen = HashSet::new();
    let repeated: HashSet<(i8, String)> = alterations
        .iter()
        .map(|a| (a.resource_type, a.resource_name.clone()))
        .filter(|key| !seen.insert(key.clone()))
        .collect();
    let mut results = Vec::with_capacity(alterations.len());
    for alteration in alterations {
        let refusal = if repeated.contains(&(alteration.resource_type, alteration.resource_name.clone())) {
            Some(invalid_request("Each resource must appear at most once.".into()))
        } else {
            alter_one(ctx, &alteration, validate_only).await.err()
        };
        let (code, message) = wire_refusal(refusal);
        results.push((alteration.resource_type, alteration.resource_name, code, message));
    }
    results
}

async fn alter_one(
    ctx: &RequestContext<'_>,
    alteration: &Alteration,
    validate_only: bool,
) -> Result<(), Refusal> {
    if let Some(refusal) = &alteration.refused {
        return Err(refusal.clone());
    }
    let mut names = HashSet::new();
    if !alteration.ops.iter().all(|(name, _)| names.insert(name)) {
        return Err(invalid_request("Error due to duplicate config keys".into()));
    }
    let config = ctx.config();
    // A request on a controller listener was forwarded by the broker it
    // names, which checked the id (see `forward_rest`).
    let any_broker = ctx.on_controller_listener();
    let resource = config_resource(config, alteration.resource_type, &alteration.resource_name, any_broker)?;
    if let ConfigResource::Broker(name) = &resource {
        refuse_read_only(&alteration.ops)?;
        refuse_cluster_wide_stores(name, &alteration.ops)?;
    }
    let node_id = config.node_id.to_string();
    let result = ctx
        .controller()
        .alter_configs(&resource, validate_only, |image, current| {
            let levels = levels(config, image, &node_id);
            // AlterConfigs replaces the whole set: its SETs apply to nothing.
            let start = if alteration.replace { &BTreeMap::new() } else { current };
            let next = apply_ops(&resource, &levels, start, &alteration.ops)?;
            if let ConfigResource::Broker(name) = &resource {
                check_broker_overlay(config, &levels, name, &next)?;
                if *name == node_id {
                    check_listener_stores(ctx.listener_security(), &next)?;
                }
            }
            if let ConfigResource::Group(_) = &resource {
                super::group_configs::check_bounds(config, &next)?;
            }
            Ok(next)
        })
        .await;
    match result {
        Ok(()) => {
            if !validate_only {
                tracing::info!(?resource, "configs altered");
            }
            Ok(())
        }
        Err(e) => Err((metadata_error(&e), Some(e.to_string()))),
    }
}

/// A listener's key and trust stores are set per broker, as Kafka
/// requires: each broker has its own certificate.
fn refuse_cluster_wide_stores(resource_name: &str, ops: &[(String, Op)]) -> Result<(), Refusal> {
    let stores: Vec<&str> = ops
        .iter()
        .filter(|(name, op)| op.sets_value() && crate::security::tls::is_dynamic_store_key(name))
        .map(|(name, _)| name.as_str())
        .collect();
    if !resource_name.is_empty() || stores.is_empty() {
        return Ok(());
    }
    Err(invalid_request(format!(
        "Cannot update these configs at default cluster level, broker id must be specified: {}",
        stores.join(", ")
    )))
}

/// New store keys must give every TLS listener of this broker stores that
/// load, or the change is refused (as Kafka validates a reconfigured
/// SslFactory before it takes the change).
fn check_listener_stores(
    listener_security: &[std::sync::Arc<ListenerSecurity>],
    next: &BTreeMap<String, String>,
) -> Result<(), MetadataError> {
    for security in listener_security {
        if let Some(tls) = &security.tls {
            tls.validate(next).map_err(|e| {
                MetadataError::InvalidConfig(format!(
                    "Validation of dynamic config update of SSLFactory failed for listener {}: {e}",
                    security.name
                ))
            })?;
        }
    }
    Ok(())
}

/// Kafka refuses to change broker configs that are read at start only.
fn refuse_read_only(ops: &[(String, Op)]) -> Result<(), Refusal> {
    let read_only: Vec<&str> = ops
        .iter()
        .filter(|(name, op)| {
            op.sets_value()
                && dynamic_broker_config_kind(name).is_none()
                && !crate::security::tls::is_dynamic_store_key(name)
                && is_known_key(name)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if read_only.is_empty() {
        return Ok(());
    }
    Err(invalid_request(format!("Cannot update these configs dynamically: {}", read_only.join(", "))))
}

/// The resource's configs after the incremental `ops`. APPEND and SUBTRACT
/// work on list configs, starting from the value the resource has now,
/// inherited if it sets none.
fn apply_ops(
    resource: &ConfigResource,
    levels: &BrokerLevels<'_>,
    current: &BTreeMap<String, String>,
    ops: &[(String, Op)],
) -> Result<BTreeMap<String, String>, MetadataError> {
    let mut next = current.clone();
    for (name, op) in ops {
        match op {
            Op::Set(value) => {
                next.insert(name.clone(), value.trim().to_owned());
            }
            Op::Delete => {
                next.remove(name);
            }
            Op::Append(values) | Op::Subtract(values) => {
                let (kind, synonyms, level) = list_key(resource, name)?;
                if !matches!(kind, Kind::List(_) | Kind::ReplicaList) {
                    let verb = if matches!(op, Op::Append(_)) { "APPEND to" } else { "SUBTRACT from" };
                    return Err(MetadataError::InvalidConfig(format!(
                        "Can't {verb} key {name} because its type is not LIST."
                    )));
                }
                let start = next.get(name).cloned().or_else(|| levels.inherited_value(&synonyms, level));
                let items = edit_list(start.as_deref().unwrap_or(""), values, matches!(op, Op::Append(_)));
                next.insert(name.clone(), items);
            }
        }
    }
    Ok(next)
}

/// The kind of `name` on `resource`, the broker configs it inherits from
/// and the level the resource itself sits at.
fn list_key(resource: &ConfigResource, name: &str) -> Result<(Kind, Vec<&'static str>, i8), MetadataError> {
    let unknown = || MetadataError::InvalidConfig(format!("unknown config {name:?}"));
    match resource {
        ConfigResource::Topic(_) => {
            let def = topic_config_def(name).ok_or_else(unknown)?;
            Ok((def.kind, broker_synonyms(def.broker_synonym), DYNAMIC_TOPIC_CONFIG))
        }
        ConfigResource::Broker(node) => {
            let kind = dynamic_broker_config_kind(name).ok_or_else(unknown)?;
            let key = BROKER_KEYS.iter().find(|k| k.name == name).ok_or_else(unknown)?;
            let level = if node.is_empty() { DYNAMIC_DEFAULT_BROKER_CONFIG } else { DYNAMIC_BROKER_CONFIG };
            Ok((kind, vec![key.name], level))
        }
        ConfigResource::Group(_) => {
            let def = strom_metadata::group_config::group_config_def(name).ok_or_else(unknown)?;
            let kind = if def.kind == strom_metadata::group_config::GroupKind::List {
                Kind::List(&[])
            } else {
                Kind::Text
            };
            Ok((kind, Vec::new(), super::group_configs::DYNAMIC_GROUP_CONFIG))
        }
    }
}

/// Appends the comma-separated `values` missing from `list`, or removes them.
fn edit_list(list: &str, values: &str, append: bool) -> String {
    let mut items: Vec<&str> = list.split(',').map(str::trim).filter(|i| !i.is_empty()).collect();
    for value in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        if append && !items.contains(&value) {
            items.push(value);
        } else if !append {
            items.retain(|item| *item != value);
        }
    }
    items.join(",")
}

/// The broker config the change would give this broker must parse as a
/// whole (e.g. every synonym of a retention time).
fn check_broker_overlay(
    config: &BrokerConfig,
    levels: &BrokerLevels<'_>,
    resource_name: &str,
    next: &BTreeMap<String, String>,
) -> Result<(), MetadataError> {
    let (cluster_default, per_broker) =
        if resource_name.is_empty() { (next, levels.per_broker) } else { (levels.cluster_default, next) };
    config
        .with_dynamic(cluster_default, per_broker)
        .map(drop)
        .map_err(|e| MetadataError::InvalidConfig(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn set(name: &str, value: &str) -> (String, Op) {
        (name.into(), Op::Set(value.into()))
    }

    #[test]
    fn lists_gain_and_lose_items_once() {
        assert_eq!(edit_list("delete", "compact", true), "delete,compact");
        assert_eq!(edit_list("delete,compact", "compact", true), "delete,compact");
        assert_eq!(edit_list("delete,compact", "delete", false), "compact");
        assert_eq!(edit_list("", "compact, delete", true), "compact,delete");
        assert_eq!(edit_list("compact", "delete", false), "compact");
    }

    #[test]
    fn incremental_ops_start_from_the_inherited_value() {
        let empty = map(&[]);
        let static_configs = map(&[("log.cleanup.policy", "compact")]);
        let levels =
            BrokerLevels { per_broker: &empty, cluster_default: &empty, static_configs: &static_configs };
        let topic = ConfigResource::Topic("t".into());
        let ops = [("cleanup.policy".to_owned(), Op::Append("delete".into())), set("retention.ms", "5")];
        let next = apply_ops(&topic, &levels, &map(&[("segment.ms", "9")]), &ops).unwrap();
        assert_eq!(
            next,
            map(&[("cleanup.policy", "compact,delete"), ("retention.ms", "5"), ("segment.ms", "9")])
        );

        let cluster = ConfigResource::Broker(String::new());
        let ops = [("log.cleanup.policy".to_owned(), Op::Subtract("compact".into()))];
        let next =
            apply_ops(&cluster, &levels, &map(&[("log.cleanup.policy", "compact,delete")]), &ops).unwrap();
        assert_eq!(next["log.cleanup.policy"], "delete");

        let ops = [("retention.ms".to_owned(), Op::Delete), ("segment.ms".to_owned(), Op::Delete)];
        assert!(apply_ops(&topic, &levels, &map(&[("segment.ms", "9")]), &ops).unwrap().is_empty());
    }

    #[test]
    fn only_list_configs_take_append_and_subtract() {
        let empty = map(&[]);
        let levels = BrokerLevels { per_broker: &empty, cluster_default: &empty, static_configs: &empty };
        let topic = ConfigResource::Topic("t".into());
        for op in [Op::Append("1".into()), Op::Subtract("1".into())] {
            let err = apply_ops(&topic, &levels, &empty, &[("retention.ms".into(), op)]).unwrap_err();
            assert!(matches!(&err, MetadataError::InvalidConfig(m) if m.contains("retention.ms")), "{err}");
        }
        let err =
            apply_ops(&topic, &levels, &empty, &[("bogus".into(), Op::Append("x".into()))]).unwrap_err();
        assert!(matches!(err, MetadataError::InvalidConfig(_)));
    }

    #[test]
    fn read_only_broker_configs_are_refused() {
        assert!(refuse_read_only(&[set("log.retention.ms", "1")]).is_ok());
        let (error, message) =
            refuse_read_only(&[set("log.dirs", "/x"), set("num.partitions", "3")]).unwrap_err();
        assert_eq!(error, ResponseError::InvalidRequest);
        assert!(message.unwrap().contains("log.dirs, num.partitions"));
        assert!(refuse_read_only(&[("log.dirs".into(), Op::Delete)]).is_ok());
        // Unknown keys are left to the controller, which names them INVALID_CONFIG.
        assert!(refuse_read_only(&[set("no.such.key", "1")]).is_ok());
    }

    #[test]
    fn operations_decode_as_kafka_numbers_them() {
        let value = str_bytes("v");
        assert_eq!(Op::from_wire(0, Some(&value)), Ok(Op::Set("v".into())));
        assert_eq!(Op::from_wire(1, None), Ok(Op::Delete));
        assert_eq!(Op::from_wire(2, Some(&value)), Ok(Op::Append("v".into())));
        assert_eq!(Op::from_wire(3, Some(&value)), Ok(Op::Subtract("v".into())));
        assert!(Op::from_wire(0, None).is_err());
        assert!(Op::from_wire(4, Some(&value)).is_err());
    }
}
