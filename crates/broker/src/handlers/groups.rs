//! FindCoordinator and the classic group APIs: JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups.

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, SyncGroupRequest, SyncGroupResponse,
};

use super::{advertised_endpoint, live_endpoints, str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;
use crate::group::{JoinRequest, SyncRequest, OFFSETS_TOPIC};
use crate::internal_topic;
use crate::txn::TRANSACTION_STATE_TOPIC;
use strom_metadata::acl::{operation, resource};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn group_id(s: &str) -> GroupId {
    GroupId(str_bytes(s))
}

const GROUP_DENIED: ResponseError = ResponseError::GroupAuthorizationFailed;

/// Joining, syncing, heartbeating and leaving need READ on the group.
pub fn may_read_group(ctx: &RequestContext<'_>, group_id: &str) -> bool {
    ctx.authorize(operation::READ, resource::GROUP, group_id)
}

pub async fn find_coordinator(
    ctx: &RequestContext<'_>,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    if ctx.api_version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in &request.coordinator_keys {
            coordinators.push(lookup_coordinator(ctx, request.key_type, key.as_str()).await);
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let found = lookup_coordinator(ctx, request.key_type, request.key.as_str()).await;
    let response = FindCoordinatorResponse::default()
        .with_error_code(found.error_code)
        .with_node_id(found.node_id)
        .with_host(found.host)
        .with_port(found.port);
    if ctx.api_version >= 1 && found.error_code != 0 {
        return response.with_error_message(Some(str_bytes("the coordinator is not available")));
    }
    response
}

/// One key's coordinator, or why the principal may not know it.
async fn lookup_coordinator(ctx: &RequestContext<'_>, key_type: i8, key: &str) -> Coordinator {
    let base = Coordinator::default().with_key(str_bytes(key));
    let denied = match key_type {
        KEY_TYPE_GROUP if !ctx.authorize(operation::DESCRIBE, resource::GROUP, key) => {
            Some(ResponseError::GroupAuthorizationFailed)
        }
        KEY_TYPE_TRANSACTION if !ctx.authorize(operation::DESCRIBE, resource::TRANSACTIONAL_ID, key) => {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        }
        _ => None,
    };
    if let Some(error) = denied {
        return base.with_node_id(BrokerId(-1)).with_port(-1).with_error_code(error.code());
    }
    match coordinator_endpoint(ctx, key_type, key).await {
        Ok((id, host, port)) => base.with_node_id(BrokerId(id)).with_host(str_bytes(&host)).with_port(port),
        Err(error) => base.with_node_id(BrokerId(-1)).with_port(-1).with_error_code(error.code()),
    }
}

/// The coordinator of `key`: the broker leading the internal partition
/// that owns it, with its endpoint on the client's listener (created on
/// first use, as in Kafka).
async fn coordinator_endpoint(
    ctx: &RequestContext<'_>,
    key_type: i8,
    key: &str,
) -> Result<(i32, String, i32), ResponseError> {
    let (topic, partition) = match key_type {
        KEY_TYPE_GROUP if key.is_empty() => return Err(ResponseError::InvalidGroupId),
        KEY_TYPE_GROUP => {
            internal_topic::create(ctx, &ctx.groups().offsets_topic()).await?;
            (OFFSETS_TOPIC, ctx.groups().partition_for(key))
        }
        KEY_TYPE_TRANSACTION if key.is_empty() => return Err(ResponseError::InvalidRequest),
        KEY_TYPE_TRANSACTION => {
            internal_topic::create(ctx, &ctx.transactions().state_topic()).await?;
            (TRANSACTION_STATE_TOPIC, ctx.transactions().partition_for(key))
        }
        _ => return Err(ResponseError::CoordinatorNotAvailable),
    };
    let leader = internal_topic::coordinator_of(ctx, topic, partition)?;
    // This broker answers with the endpoint it advertises; others with the
    // one they registered. A listener without one sends the client nowhere.
    let endpoint = if leader == ctx.config().node_id {
        advertised_endpoint(ctx)
    } else {
        live_endpoints(ctx).find(|(id, ..)| *id == leader).map(|(_, e, _)| (e.host, i32::from(e.port)))
    };
    let (host, port) = endpoint.ok_or(ResponseError::CoordinatorNotAvailable)?;
    Ok((leader, host, port))
}

pub async fn join(ctx: &RequestContext<'_>, request: JoinGroupRequest) -> JoinGroupResponse {
    if !may_read_group(ctx, &request.group_id) {
        return JoinGroupResponse::default().with_error_code(GROUP_DENIED.code());
    }
    let join = JoinRequest {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default(),
        client_host: ctx.client_host.clone(),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: if ctx.api_version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member_id: ctx.api_version >= 4,
        supports_skip_assignment: ctx.api_version >= 9,
    };
    if let Err(error) = ctx.groups().check_coordinator(ctx.coordinator_host(), &join.group_id) {
        return JoinGroupResponse::default()
            .with_error_code(error.code())
            .with_generation_id(-1)
            .with_member_id(request.member_id);
    }
    let result = ctx.throttle.parked(ctx.groups().join(join, ctx.stopping())).await;
    let members = result
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            let member =
                JoinGroupResponseMember::default().with_member_id(str_bytes(&id)).with_metadata(metadata);
            if ctx.api_version >= 5 {
                member.with_group_instance_id(instance.as_deref().map(str_bytes))
            } else {
                member
            }
        })
        .collect();
    let response = JoinGroupResponse::default()
        .with_error_code(code(result.error))
        .with_generation_id(result.generation)
        .with_protocol_name(result.protocol.as_deref().map(str_bytes))
        .with_leader(str_bytes(&result.leader))
        .with_member_id(str_bytes(&result.member_id))
        .with_members(members);
    let response =
        if ctx.api_version >= 9 { response.with_skip_assignment(result.skip_assignment) } else { response };
    if ctx.api_version >= 7 {
        response.with_protocol_type(result.protocol_type.as_deref().map(str_bytes))
    } else {
        response
    }
}

pub async fn sync(ctx: &RequestContext<'_>, request: SyncGroupRequest) -> SyncGroupResponse {
    if !may_read_group(ctx, &request.group_id) {
        return SyncGroupResponse::default().with_error_code(GROUP_DENIED.code());
    }
    let assignments: HashMap<String, bytes::Bytes> =
        request.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
    let sync = SyncRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        protocol_type: request.protocol_type.as_ref().map(|s| s.to_string()),
        protocol_name: request.protocol_name.as_ref().map(|s| s.to_string()),
        assignments,
    };
    if let Err(error) = ctx.groups().check_coordinator(ctx.coordinator_host(), &sync.group_id) {
        return SyncGroupResponse::default().with_error_code(error.code());
    }
    let result = ctx.throttle.parked(ctx.groups().sync(ctx.coordinator_host(), sync)).await;
    let response =
        SyncGroupResponse::default().with_error_code(code(result.error)).with_assignment(result.assignment);
    if ctx.api_version >= 5 && result.error.is_none() {
        return response.with_protocol_type(request.protocol_type).with_protocol_name(request.protocol_name);
    }
    response
}

pub fn heartbeat(ctx: &RequestContext<'_>, request: HeartbeatRequest) -> HeartbeatResponse {
    if !may_read_group(ctx, &request.group_id) {
        return HeartbeatResponse::default().with_error_code(GROUP_DENIED.code());
    }
    if let Err(error) = ctx.groups().check_coordinator(ctx.coordinator_host(), &request.group_id) {
        return HeartbeatResponse::default().with_error_code(error.code());
    }
    let error = ctx.groups().heartbeat(
        request.group_id.as_str(),
        request.member_id.as_str(),
        request.group_instance_id.as_deref(),
        request.generation_id,
    );
    HeartbeatResponse::default().with_error_code(code(error))
}

pub fn leave(ctx: &RequestContext<'_>, request: LeaveGroupRequest) -> LeaveGroupResponse {
    if !may_read_group(ctx, &request.group_id) {
        return LeaveGroupResponse::default().with_error_code(GROUP_DENIED.code());
    }
    let leaving: Vec<(String, Option<String>)> = if ctx.api_version >= 3 {
        request
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|s| s.to_string())))
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let left = ctx
        .groups()
        .check_coordinator(ctx.coordinator_host(), &request.group_id)
        .and_then(|()| ctx.groups().leave(ctx.coordinator_host(), request.group_id.as_str(), &leaving));
    match left {
        Err(error) => LeaveGroupResponse::default().with_error_code(error.code()),
        Ok(outcomes) if ctx.api_version < 3 => {
            LeaveGroupResponse::default().with_error_code(code(outcomes[0]))
        }
        Ok(outcomes) => {
            let members = leaving
                .iter()
                .zip(outcomes)
                .map(|((member, instance), error)| {
                    MemberResponse::default()
                        .with_member_id(str_bytes(member))
                        .with_group_instance_id(instance.as_deref().map(str_bytes))
                        .with_error_code(code(error))
                })
                .collect();
            LeaveGroupResponse::default().with_members(members)
        }
    }
}

pub fn list(ctx: &RequestContext<'_>, request: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_ascii_lowercase()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_ascii_lowercase()).collect();
    // Without DESCRIBE on the cluster, only groups the principal may describe are listed.
    let all_groups = ctx.authorize_cluster(operation::DESCRIBE);
    let groups = ctx
        .groups()
        .list()
        .into_iter()
        .filter(|(_, _, state, _)| states.is_empty() || states.contains(&state.to_ascii_lowercase()))
        .filter(|(_, _, _, kind)| types.is_empty() || types.iter().any(|t| t == kind))
        .filter(|(id, ..)| all_groups || ctx.authorize(operation::DESCRIBE, resource::GROUP, id))
        .map(|(id, protocol_type, state, kind)| {
            let listed = ListedGroup::default()
                .with_group_id(group_id(&id))
                .with_protocol_type(str_bytes(&protocol_type));
            match ctx.api_version {
                v if v >= 5 => listed.with_group_state(str_bytes(state)).with_group_type(str_bytes(kind)),
                4 => listed.with_group_state(str_bytes(state)),
                _ => listed,
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub fn describe(ctx: &RequestContext<'_>, request: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let groups = request
        .groups
        .iter()
        .map(|id| {
            let base = DescribedGroup::default().with_group_id(id.clone());
            if !ctx.authorize(operation::DESCRIBE, resource::GROUP, id) {
                return base.with_error_code(GROUP_DENIED.code());
            }
            let operations = match request.include_authorized_operations {
                true => ctx.authorized_operations(resource::GROUP, id),
                false => AUTHORIZED_OPERATIONS_OMITTED,
            };
            let base = if ctx.api_version >= 3 { base.with_authorized_operations(operations) } else { base };
            if let Err(error) = ctx.groups().check_coordinator(ctx.coordinator_host(), id) {
                return base.with_error_code(error.code());
            }
            let Some(described) = ctx.groups().describe(id.as_str()) else {
                let dead = base.with_group_state(str_bytes("Dead"));
                if ctx.api_version < 6 {
                    return dead;
                }
                return dead
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(&format!("group {} not found", id.as_str()))));
            };
            let members = described
                .members
                .into_iter()
                .map(|(member, instance, client_id, host, metadata, assignment)| {
                    let m = DescribedGroupMember::default()
                        .with_member_id(str_bytes(&member))
                        .with_client_id(str_bytes(&client_id))
                        .with_client_host(str_bytes(&host))
                        .with_member_metadata(metadata)
                        .with_member_assignment(assignment);
                    if ctx.api_version >= 4 {
                        m.with_group_instance_id(instance.as_deref().map(str_bytes))
                    } else {
                        m
                    }
                })
                .collect();
            base.with_group_state(str_bytes(described.state))
                .with_protocol_type(str_bytes(&described.protocol_type))
                .with_protocol_data(str_bytes(&described.protocol))
                .with_members(members)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub async fn delete(ctx: &RequestContext<'_>, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for id in &request.groups_names {
        let error = if !ctx.authorize(operation::DELETE, resource::GROUP, id) {
            Some(GROUP_DENIED)
        } else {
            match ctx.groups().check_coordinator(ctx.coordinator_host(), id) {
                Ok(()) => ctx.groups().delete_group(ctx.coordinator_host(), id.as_str()).await,
                Err(error) => Some(error),
            }
        };
        results.push(DeletableGroupResult::default().with_group_id(id.clone()).with_error_code(code(error)));
    }
    DeleteGroupsResponse::default().with_results(results)
}
