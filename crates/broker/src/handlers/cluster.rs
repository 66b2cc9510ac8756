//! DescribeCluster: the cluster id, the controller and the brokers.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{live_endpoints, str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;
use strom_metadata::acl::{resource, CLUSTER_NAME};

/// `endpoint_type` 1 asks for brokers; 2 (controllers) is for KRaft
/// controllers, which a broker listener does not serve.
const ENDPOINT_BROKERS: i8 = 1;

pub fn describe(ctx: &RequestContext<'_>, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let broker = ctx.broker;
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(if ctx.api_version >= 1 { request.endpoint_type } else { ENDPOINT_BROKERS })
        .with_cluster_id(str_bytes(broker.controller.cluster_id()))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_cluster_authorized_operations(match request.include_cluster_authorized_operations {
            true => ctx.authorized_operations(resource::CLUSTER, CLUSTER_NAME),
            false => AUTHORIZED_OPERATIONS_OMITTED,
        });
    if ctx.api_version >= 1 && request.endpoint_type != ENDPOINT_BROKERS {
        return response
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints are served on this listener")));
    }
    let brokers = live_endpoints(ctx).map(|(id, endpoint, rack)| {
        DescribeClusterBroker::default()
            .with_broker_id(BrokerId(id))
            .with_host(str_bytes(&endpoint.host))
            .with_port(i32::from(endpoint.port))
            .with_rack(rack.as_deref().map(str_bytes))
    });
    response.brokers = brokers.collect();
    response
}
