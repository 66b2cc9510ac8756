//! DescribeCluster: the cluster id, the controller and the brokers, or
//! (KIP-919, endpoint type 2, on a controller listener) the controllers.
//!
//! As in Kafka, the `controller_id` a broker listener reports is a live
//! broker (this one when it is live): clients send it their admin writes,
//! which brokers forward to the active controller. A controller listener
//! reports the active controller, the quorum leader.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use strom_metadata::MetadataImage;

use super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;
use strom_metadata::acl::{resource, CLUSTER_NAME};

const ENDPOINT_BROKERS: i8 = 1;
const ENDPOINT_CONTROLLERS: i8 = 2;

pub fn describe(ctx: &RequestContext<'_>, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let endpoint_type = if ctx.api_version >= 1 { request.endpoint_type } else { ENDPOINT_BROKERS };
    let image = ctx.controller().image();
    let response = DescribeClusterResponse::default()
        .with_endpoint_type(endpoint_type)
        .with_cluster_id(str_bytes(ctx.controller().cluster_id()))
        .with_cluster_authorized_operations(match request.include_cluster_authorized_operations {
            true => ctx.authorized_operations(resource::CLUSTER, CLUSTER_NAME),
            false => AUTHORIZED_OPERATIONS_OMITTED,
        });
    match endpoint_type {
        ENDPOINT_BROKERS => {
            let include_fenced = ctx.api_version >= 2 && request.include_fenced_brokers;
            response.with_controller_id(BrokerId(live_broker_for_admin(ctx, &image))).with_brokers(brokers(
                ctx,
                &image,
                include_fenced,
            ))
        }
        ENDPOINT_CONTROLLERS if ctx.on_controller_listener() => {
            let active = ctx.quorum().and_then(|q| q.leader().borrow().leader_id).unwrap_or(-1);
            response.with_controller_id(BrokerId(active)).with_brokers(controllers(ctx, &image))
        }
        _ => response
            .with_controller_id(BrokerId(-1))
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("the endpoint type is not served on this listener"))),
    }
}

/// This node when it is a live broker, else the first live broker; a
/// single node is always its own.
fn live_broker_for_admin(ctx: &RequestContext<'_>, image: &MetadataImage) -> i32 {
    let me = ctx.config().node_id;
    if ctx.quorum().is_none() {
        return me;
    }
    let mut live = image.live_brokers().map(|b| b.id);
    let first = live.next();
    match image.live_brokers().any(|b| b.id == me) {
        true => me,
        false => first.unwrap_or(-1),
    }
}

/// The brokers with an endpoint on the client's listener: the live ones,
/// or every registered one (with its fencing) when asked to include fenced ones.
fn brokers(
    ctx: &RequestContext<'_>,
    image: &MetadataImage,
    include_fenced: bool,
) -> Vec<DescribeClusterBroker> {
    let listener = ctx.listener.to_string();
    image
        .brokers
        .values()
        .filter(|b| include_fenced || (!b.fenced && !b.in_controlled_shutdown))
        .filter_map(|b| {
            let endpoint = b.endpoint(&listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(str_bytes(&endpoint.host))
                    .with_port(i32::from(endpoint.port))
                    .with_rack(b.rack.as_deref().map(str_bytes))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect()
}

/// The registered controllers' endpoints on the client's listener.
fn controllers(ctx: &RequestContext<'_>, image: &MetadataImage) -> Vec<DescribeClusterBroker> {
    image
        .controllers
        .values()
        .filter_map(|c| {
            let endpoint = c.endpoints.iter().find(|e| e.name.eq_ignore_ascii_case(&ctx.listener))?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(c.id))
                    .with_host(str_bytes(&endpoint.host))
                    .with_port(i32::from(endpoint.port)),
            )
        })
        .collect()
}
