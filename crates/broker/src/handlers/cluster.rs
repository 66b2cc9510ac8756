//! DescribeCluster: the cluster id, the controller and the brokers.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{advertised_endpoint, str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;

/// `endpoint_type` 1 asks for brokers; 2 (controllers) is for KRaft
/// controllers, which a broker listener does not serve.
const ENDPOINT_BROKERS: i8 = 1;

pub fn describe(ctx: &RequestContext<'_>, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let broker = ctx.broker;
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(if ctx.api_version >= 1 { request.endpoint_type } else { ENDPOINT_BROKERS })
        .with_cluster_id(str_bytes(&broker.controller.image().cluster_id))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    if ctx.api_version >= 1 && request.endpoint_type != ENDPOINT_BROKERS {
        return response
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints are served on this listener")));
    }
    let brokers = advertised_endpoint(ctx).map(|(host, port)| {
        DescribeClusterBroker::default()
            .with_broker_id(BrokerId(broker.config.node_id))
            .with_host(str_bytes(&host))
            .with_port(port)
    });
    response.brokers = brokers.into_iter().collect();
    response
}
