//! DescribeClientQuotas and AlterClientQuotas (KIP-546): client and IP
//! quotas in the metadata log.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_client_quotas_response::{self, EntityData as AlteredEntity};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use strom_metadata::image::{QuotaEntity, ENTITY_IP};
use strom_metadata::operations::QuotaAlteration;
use strom_metadata::MetadataError;

use super::str_bytes;
use crate::dispatch::RequestContext;
use crate::error::metadata_error;

/// Kafka's `ClientQuotaFilterComponent` match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

pub fn describe(
    ctx: &RequestContext<'_>,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    if let Err(message) = validate_filter(&request.components) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&message)));
    }
    let image = ctx.controller().image();
    let entries = image
        .all_client_quotas()
        .filter(|(entity, _)| matches_filter(entity, &request.components, request.strict))
        .map(|(entity, values)| {
            let entity = entity.iter().map(|(entity_type, name)| {
                EntityData::default()
                    .with_entity_type(str_bytes(entity_type))
                    .with_entity_name(name.as_deref().map(str_bytes))
            });
            let values = values
                .iter()
                .map(|(key, value)| ValueData::default().with_key(str_bytes(key)).with_value(*value));
            EntryData::default().with_entity(entity.collect()).with_values(values.collect())
        });
    DescribeClientQuotasResponse::default().with_entries(Some(entries.collect()))
}

/// Kafka's filter rules: each entity type once, an exact match names an
/// entity, and ip is never combined with user or client-id.
fn validate_filter(components: &[ComponentData]) -> Result<(), String> {
    let mut types = BTreeSet::new();
    for c in components {
        let entity_type = c.entity_type.as_str();
        if !types.insert(entity_type) {
            return Err(format!("Entity type {entity_type} cannot appear more than once in the filter."));
        }
        match c.match_type {
            MATCH_EXACT if c._match.is_none() => {
                return Err(format!(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null for {entity_type}"
                ))
            }
            MATCH_EXACT | MATCH_DEFAULT | MATCH_SPECIFIED => {}
            other => return Err(format!("Unknown match type: {other}")),
        }
    }
    if types.contains(ENTITY_IP) && types.len() > 1 {
        return Err(
            "Invalid entity filter component combination, IP filter component should not be used with \
                    user or clientId filter component."
                .into(),
        );
    }
    Ok(())
}

fn matches_filter(entity: &QuotaEntity, components: &[ComponentData], strict: bool) -> bool {
    let each = components.iter().all(|c| {
        let Some(name) = entity.get(c.entity_type.as_str()) else { return false };
        match c.match_type {
            MATCH_EXACT => name.as_deref() == c._match.as_deref(),
            MATCH_DEFAULT => name.is_none(),
            _ => true,
        }
    });
    each && (!strict || entity.len() == components.len())
}

pub async fn alter(ctx: &RequestContext<'_>, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    if !ctx.authorize_cluster(strom_metadata::acl::operation::ALTER_CONFIGS) {
        return failed(&request, ResponseError::ClusterAuthorizationFailed);
    }
    let entities = entities_of(&request);
    let parsed: Vec<Result<QuotaAlteration, MetadataError>> =
        request.entries.iter().map(alteration).collect();
    let valid: Vec<QuotaAlteration> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let mut outcomes = match ctx.controller().alter_client_quotas(&valid, request.validate_only).await {
        Ok(outcomes) => outcomes.into_iter(),
        Err(e) => {
            let (code, message) = (metadata_error(&e).code(), e.to_string());
            tracing::warn!("client quota change not written: {message}");
            let results = entities.into_iter().map(|entity| entry(entity, code, Some(&message)));
            return AlterClientQuotasResponse::default().with_entries(results.collect());
        }
    };
    let results = parsed.into_iter().zip(entities).map(|(parsed, entity)| {
        let outcome = parsed.and_then(|_| outcomes.next().unwrap_or(Ok(())));
        match outcome {
            Ok(()) => entry(entity, 0, None),
            Err(e) => {
                tracing::info!("client quota change refused: {e}");
                entry(entity, metadata_error(&e).code(), Some(&e.to_string()))
            }
        }
    });
    AlterClientQuotasResponse::default().with_entries(results.collect())
}

/// Every entry of the request failing with `error`.
pub fn failed(request: &AlterClientQuotasRequest, error: ResponseError) -> AlterClientQuotasResponse {
    let entries = entities_of(request).into_iter().map(|entity| entry(entity, error.code(), None));
    AlterClientQuotasResponse::default().with_entries(entries.collect())
}

/// Each entry's entity, as the response names it.
fn entities_of(request: &AlterClientQuotasRequest) -> Vec<Vec<AlteredEntity>> {
    request
        .entries
        .iter()
        .map(|e| {
            e.entity
                .iter()
                .map(|d| {
                    AlteredEntity::default()
                        .with_entity_type(d.entity_type.clone())
                        .with_entity_name(d.entity_name.clone())
                })
                .collect()
        })
        .collect()
}

fn entry(
    entity: Vec<AlteredEntity>,
    code: i16,
    message: Option<&str>,
) -> alter_client_quotas_response::EntryData {
    alter_client_quotas_response::EntryData::default()
        .with_entity(entity)
        .with_error_code(code)
        .with_error_message(message.map(str_bytes))
}

/// An entry of the request as the controller takes it; an entity type
/// named twice is refused here, before it would collapse into one.
fn alteration(
    entry: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
) -> Result<QuotaAlteration, MetadataError> {
    let mut entity = QuotaEntity::new();
    for d in &entry.entity {
        let name = d.entity_name.as_ref().map(StrBytes::to_string);
        if entity.insert(d.entity_type.to_string(), name).is_some() {
            return Err(MetadataError::InvalidRequest(format!(
                "Duplicate {} entity type",
                d.entity_type.as_str()
            )));
        }
    }
    let ops = entry.ops.iter().map(|op| (op.key.to_string(), (!op.remove).then_some(op.value))).collect();
    Ok(QuotaAlteration { entity, ops })
}
