//! CreateAcls, DescribeAcls and DeleteAcls: the ACLs of the metadata log,
//! changed through the controller. Changing them needs ALTER on the
//! cluster, listing them DESCRIBE, as in Kafka's `AclApis`; without an
//! authorizer they answer SECURITY_DISABLED.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strom_metadata::acl::{operation, Acl, AclFilter};

use super::str_bytes;
use crate::dispatch::RequestContext;
use crate::error::metadata_error;

const CLUSTER_DENIED: ResponseError = ResponseError::ClusterAuthorizationFailed;
/// Kafka's answer to the ACL APIs on a broker without an authorizer.
const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// SECURITY_DISABLED when no authorizer is configured, as in Kafka; then
/// CLUSTER_AUTHORIZATION_FAILED without `op` on the cluster.
fn refusal(ctx: &RequestContext<'_>, op: i8) -> Option<(i16, Option<String>)> {
    if !ctx.config().authorizer.enabled {
        return Some((ResponseError::SecurityDisabled.code(), Some(NO_AUTHORIZER.to_owned())));
    }
    (!ctx.authorize_cluster(op)).then_some((CLUSTER_DENIED.code(), None))
}

pub async fn create(ctx: &RequestContext<'_>, request: CreateAclsRequest) -> CreateAclsResponse {
    let failed = |code: i16, message: Option<String>| {
        let result = AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(message.map(StrBytes::from));
        vec![result; request.creations.len()]
    };
    let results = if let Some((code, message)) = refusal(ctx, operation::ALTER) {
        failed(code, message)
    } else {
        let acls: Vec<Acl> = request
            .creations
            .iter()
            .map(|c| Acl {
                resource_type: c.resource_type,
                resource_name: c.resource_name.to_string(),
                pattern_type: c.resource_pattern_type,
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: c.operation,
                permission: c.permission_type,
            })
            .collect();
        match ctx.controller().create_acls(&acls).await {
            Ok(results) => results
                .into_iter()
                .map(|result| match result {
                    Ok(()) => AclCreationResult::default(),
                    Err(why) => AclCreationResult::default()
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(StrBytes::from(why))),
                })
                .collect(),
            Err(e) => failed(metadata_error(&e).code(), Some(e.to_string())),
        }
    };
    CreateAclsResponse::default().with_results(results)
}

pub fn describe(ctx: &RequestContext<'_>, request: DescribeAclsRequest) -> DescribeAclsResponse {
    let response = DescribeAclsResponse::default();
    if let Some((code, message)) = refusal(ctx, operation::DESCRIBE) {
        return response.with_error_code(code).with_error_message(message.map(StrBytes::from));
    }
    let filter = AclFilter {
        resource_type: request.resource_type_filter,
        resource_name: request.resource_name_filter.map(|n| n.to_string()),
        pattern_type: request.pattern_type_filter,
        principal: request.principal_filter.map(|p| p.to_string()),
        host: request.host_filter.map(|h| h.to_string()),
        operation: request.operation,
        permission: request.permission_type,
    };
    if let Err(why) = filter.validate() {
        return response
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from(why)));
    }
    let image = ctx.controller().image();
    let mut matched: Vec<&Acl> = image.acls().values().filter(|acl| filter.matches(acl)).collect();
    matched.sort();
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for acl in matched {
        let same = resources.last().is_some_and(|r| {
            r.resource_type == acl.resource_type
                && r.resource_name.as_str() == acl.resource_name
                && r.pattern_type == acl.pattern_type
        });
        if !same {
            resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(acl.resource_type)
                    .with_resource_name(str_bytes(&acl.resource_name))
                    .with_pattern_type(acl.pattern_type),
            );
        }
        let description = AclDescription::default()
            .with_principal(str_bytes(&acl.principal))
            .with_host(str_bytes(&acl.host))
            .with_operation(acl.operation)
            .with_permission_type(acl.permission);
        if let Some(resource) = resources.last_mut() {
            resource.acls.push(description);
        }
    }
    response.with_resources(resources)
}

pub async fn delete(ctx: &RequestContext<'_>, request: DeleteAclsRequest) -> DeleteAclsResponse {
    let failed = |code: i16, message: Option<String>| {
        let result = DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(message.map(StrBytes::from));
        vec![result; request.filters.len()]
    };
    let results = if let Some((code, message)) = refusal(ctx, operation::ALTER) {
        failed(code, message)
    } else {
        let filters: Vec<AclFilter> = request
            .filters
            .iter()
            .map(|f| AclFilter {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref().map(|p| p.to_string()),
                host: f.host_filter.as_ref().map(|h| h.to_string()),
                operation: f.operation,
                permission: f.permission_type,
            })
            .collect();
        match ctx.controller().delete_acls(&filters).await {
            Ok(results) => results.into_iter().map(filter_result).collect(),
            Err(e) => failed(metadata_error(&e).code(), Some(e.to_string())),
        }
    };
    DeleteAclsResponse::default().with_filter_results(results)
}

fn filter_result(result: Result<Vec<Acl>, String>) -> DeleteAclsFilterResult {
    match result {
        Ok(removed) => DeleteAclsFilterResult::default().with_matching_acls(
            removed
                .iter()
                .map(|acl| {
                    DeleteAclsMatchingAcl::default()
                        .with_resource_type(acl.resource_type)
                        .with_resource_name(str_bytes(&acl.resource_name))
                        .with_pattern_type(acl.pattern_type)
                        .with_principal(str_bytes(&acl.principal))
                        .with_host(str_bytes(&acl.host))
                        .with_operation(acl.operation)
                        .with_permission_type(acl.permission)
                })
                .collect(),
        ),
        Err(why) => DeleteAclsFilterResult::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from(why))),
    }
}
