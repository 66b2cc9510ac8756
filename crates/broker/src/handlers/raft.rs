//! The KRaft APIs: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot
//! and Fetch of `__cluster_metadata`, handed to this node's metadata quorum
//! ([`strom_quorum::Quorum::handle_request`]), which checks the cluster id
//! and partition and may hold a Fetch until data arrives.
//!
//! Kafka serves these on controller listeners (and Fetch of the metadata
//! partition on the controller listener only); Strom serves them on every
//! listener of a node that runs the quorum. A node without one (no
//! `process.roles`) answers UNSUPPORTED_VERSION, as a Kafka listener that
//! does not list the API would, and serves a Fetch of `__cluster_metadata`
//! as any other fetch.
//!
//! KIP-853's AddRaftVoter and RemoveRaftVoter (served on every listener, as
//! Kafka's brokers forward them to the active controller) and
//! UpdateRaftVoter (controller listeners) go to the quorum leader: a node
//! that does not lead forwards them to the leader it knows, else answers
//! the quorum's NOT_LEADER_OR_FOLLOWER.

use kafka_protocol::error::ResponseError;
use std::time::Duration;

use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, BeginQuorumEpochRequest, BeginQuorumEpochResponse,
    EndQuorumEpochRequest, EndQuorumEpochResponse, FetchRequest, FetchResponse, FetchSnapshotRequest,
    FetchSnapshotResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse, UpdateRaftVoterRequest,
    UpdateRaftVoterResponse, VoteRequest, VoteResponse,
};
use kafka_protocol::protocol::Request;
use strom_quorum::{QuorumError, WireError, WireRequest, WireResponse};

use crate::dispatch::RequestContext;

/// The top-level error Kafka answers a KRaft request with when it cannot
/// be served at all.
fn error_code(error: &QuorumError) -> i16 {
    let error = match error {
        QuorumError::Wire(WireError::InconsistentClusterId) => ResponseError::InconsistentClusterId,
        QuorumError::Wire(WireError::UnsupportedVersion { .. }) => ResponseError::UnsupportedVersion,
        QuorumError::Wire(_) => ResponseError::InvalidRequest,
        QuorumError::Timeout => ResponseError::RequestTimedOut,
        _ => ResponseError::UnknownServerError,
    };
    error.code()
}

/// The quorum's answer, or the error code to answer with instead.
async fn ask(ctx: &RequestContext<'_>, request: WireRequest) -> Result<WireResponse, i16> {
    // Quorum traffic is between nodes: Kafka's controller needs CLUSTER_ACTION.
    if !ctx.authorize_cluster(strom_metadata::acl::operation::CLUSTER_ACTION) {
        return Err(ResponseError::ClusterAuthorizationFailed.code());
    }
    let Some(quorum) = ctx.quorum() else {
        return Err(ResponseError::UnsupportedVersion.code());
    };
    quorum.handle_request(request, ctx.api_version).await.map_err(|e| {
        tracing::debug!(api = ?ctx.api_key, error = %e, "KRaft request refused");
        error_code(&e)
    })
}

pub async fn vote(ctx: &RequestContext<'_>, request: VoteRequest) -> VoteResponse {
    match ask(ctx, WireRequest::Vote(request)).await {
        Ok(WireResponse::Vote(response)) => response,
        Ok(_) => VoteResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => VoteResponse::default().with_error_code(code),
    }
}

pub async fn begin_quorum_epoch(
    ctx: &RequestContext<'_>,
    request: BeginQuorumEpochRequest,
) -> BeginQuorumEpochResponse {
    match ask(ctx, WireRequest::BeginQuorumEpoch(request)).await {
        Ok(WireResponse::BeginQuorumEpoch(response)) => response,
        Ok(_) => {
            BeginQuorumEpochResponse::default().with_error_code(ResponseError::UnknownServerError.code())
        }
        Err(code) => BeginQuorumEpochResponse::default().with_error_code(code),
    }
}

pub async fn end_quorum_epoch(
    ctx: &RequestContext<'_>,
    request: EndQuorumEpochRequest,
) -> EndQuorumEpochResponse {
    match ask(ctx, WireRequest::EndQuorumEpoch(request)).await {
        Ok(WireResponse::EndQuorumEpoch(response)) => response,
        Ok(_) => EndQuorumEpochResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => EndQuorumEpochResponse::default().with_error_code(code),
    }
}

pub async fn fetch_snapshot(
    ctx: &RequestContext<'_>,
    request: FetchSnapshotRequest,
) -> FetchSnapshotResponse {
    match ask(ctx, WireRequest::FetchSnapshot(request)).await {
        Ok(WireResponse::FetchSnapshot(response)) => response,
        Ok(_) => FetchSnapshotResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => FetchSnapshotResponse::default().with_error_code(code),
    }
}

/// The client id of a forwarded voter change, which is never forwarded again.
const FORWARD_CLIENT_ID: &str = "strom-raft-voter-forward";
/// How long a forwarded voter change may take (it is answered once committed).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// The leader's answer to a voter change this node does not lead, if it
/// knows and can reach the leader.
async fn forward_to_leader<R: Request>(ctx: &RequestContext<'_>, request: &R) -> Option<R::Response> {
    if ctx.header.client_id.as_deref() == Some(FORWARD_CLIENT_ID) {
        return None;
    }
    let description = ctx.quorum()?.describe();
    if description.is_leader || description.leader_id < 0 {
        return None;
    }
    let address = super::quorum::leader_address(ctx, &description)?;
    let connector = ctx.controller().link()?.connector();
    let channel = connector.connect(&address, FORWARD_CLIENT_ID, FORWARD_TIMEOUT).await.ok()?;
    match channel.send(request, ctx.api_version, FORWARD_TIMEOUT).await {
        Ok(response) => Some(response),
        Err(e) => {
            tracing::debug!(api = ?ctx.api_key, error = %e, "cannot forward a voter change to the leader");
            None
        }
    }
}

pub async fn add_raft_voter(ctx: &RequestContext<'_>, request: AddRaftVoterRequest) -> AddRaftVoterResponse {
    if let Some(response) = forward_to_leader(ctx, &request).await {
        return response;
    }
    match ask(ctx, WireRequest::AddRaftVoter(request)).await {
        Ok(WireResponse::AddRaftVoter(response)) => response,
        Ok(_) => AddRaftVoterResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => AddRaftVoterResponse::default().with_error_code(code),
    }
}

pub async fn remove_raft_voter(
    ctx: &RequestContext<'_>,
    request: RemoveRaftVoterRequest,
) -> RemoveRaftVoterResponse {
    if let Some(response) = forward_to_leader(ctx, &request).await {
        return response;
    }
    match ask(ctx, WireRequest::RemoveRaftVoter(request)).await {
        Ok(WireResponse::RemoveRaftVoter(response)) => response,
        Ok(_) => RemoveRaftVoterResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => RemoveRaftVoterResponse::default().with_error_code(code),
    }
}

pub async fn update_raft_voter(
    ctx: &RequestContext<'_>,
    request: UpdateRaftVoterRequest,
) -> UpdateRaftVoterResponse {
    match ask(ctx, WireRequest::UpdateRaftVoter(request)).await {
        Ok(WireResponse::UpdateRaftVoter(response)) => response,
        Ok(_) => UpdateRaftVoterResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => UpdateRaftVoterResponse::default().with_error_code(code),
    }
}

/// Whether a Fetch is a replica's fetch of the metadata log: it names
/// `__cluster_metadata` (by name, or from v13 by Kafka's fixed topic id).
pub fn is_metadata_fetch(request: &FetchRequest, version: i16) -> bool {
    request.topics.iter().any(|topic| {
        if version >= 13 {
            topic.topic_id == strom_quorum::METADATA_TOPIC_ID
        } else {
            topic.topic.0.as_str() == strom_quorum::METADATA_TOPIC
        }
    })
}

/// A Fetch of the metadata log, served by the quorum. Kafka's raft client
/// fetches by topic id (v13+); an older version is refused.
pub async fn fetch(ctx: &RequestContext<'_>, request: FetchRequest) -> FetchResponse {
    match ask(ctx, WireRequest::Fetch(request)).await {
        Ok(WireResponse::Fetch(response)) => response,
        Ok(_) => FetchResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        Err(code) => FetchResponse::default().with_error_code(code),
    }
}
