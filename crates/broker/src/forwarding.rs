//! Admin writes a KRaft broker receives go to the active controller, as
//! Kafka 4's brokers forward them: CreateTopics, DeleteTopics,
//! CreatePartitions, AlterConfigs, IncrementalAlterConfigs, CreateAcls and
//! DeleteAcls. Strom sends
//! the client's request itself at the client's version (not wrapped in an
//! Envelope) over the node's [`ControllerLink`](crate::controller_link),
//! which retries at the new controller on NOT_CONTROLLER or a lost
//! connection; the controller's answer goes back to the client unchanged.

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::Request;

use crate::dispatch::RequestContext;
use crate::response_errors::ResponseErrors;

/// How long a forwarded request may look for an active controller.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `response` refuses a request as not sent to the active controller.
pub fn is_not_controller(response: &impl ResponseErrors) -> bool {
    let mut refused = false;
    response.visit_errors(&mut |_, code| refused |= code == ResponseError::NotController.code());
    refused
}

/// The active controller's answer to `request`, when this node is a KRaft
/// node that is not the active controller; None to answer it here (a
/// single node, the active controller, or no controller found in time,
/// where the local controller refuses with NOT_CONTROLLER).
pub async fn forward<R>(ctx: &RequestContext<'_>, request: &R) -> Option<R::Response>
where
    R: Request,
    R::Response: ResponseErrors,
{
    let link = ctx.broker.controller_link()?;
    if link.is_active() {
        return None;
    }
    match link.send(request, ctx.api_version, FORWARD_TIMEOUT, is_not_controller).await {
        Ok(response) => Some(response),
        Err(e) => {
            tracing::warn!(api = ?R::KEY, "cannot forward to the active controller: {e}");
            None
        }
    }
}
