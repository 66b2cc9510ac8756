//! One module per API family. Handlers take decoded requests and return
//! response structs; they never touch bytes on the wire.

pub mod api_versions;
pub mod cluster;
pub mod configs;
pub mod consumer_groups;
pub mod delete_records;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod leader_epochs;
pub mod list_offsets;
pub mod log_dirs;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod quorum;
pub mod quotas;
pub mod raft;
pub mod sasl;
pub mod scram;
pub mod topics;
pub mod transactions;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

use crate::dispatch::RequestContext;

/// Kafka's value for "authorized operations not requested".
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// The address the client should use for this broker: the one advertised
/// for the listener it connected on. `None` when that listener is not
/// advertised; as in Kafka, the broker then does not appear in answers.
/// The live brokers of the published image, each with its endpoint on the
/// listener the client came in through (brokers without one are left out,
/// as Kafka leaves them out) and its rack.
pub fn live_endpoints(
    ctx: &RequestContext<'_>,
) -> impl Iterator<Item = (i32, strom_metadata::Endpoint, Option<String>)> + 'static {
    let image = ctx.broker.controller.image();
    let listener = ctx.listener.to_string();
    let live: Vec<_> = image
        .live_brokers()
        .filter_map(|b| Some((b.id, b.endpoint(&listener)?.clone(), b.rack.clone())))
        .collect();
    live.into_iter()
}

pub fn advertised_endpoint(ctx: &RequestContext<'_>) -> Option<(String, i32)> {
    let (host, port) = ctx.broker.config.advertised_endpoint(&ctx.listener)?;
    Some((host, i32::from(port)))
}
