//! One module per API family. Handlers take decoded requests and return
//! response structs; they never touch bytes on the wire.

pub mod acls;
pub mod api_versions;
pub mod cluster;
pub mod configs;
pub mod consumer_groups;
pub mod controller;
pub mod delete_records;
pub mod elect_leaders;
pub mod envelope;
pub mod features;
pub mod fetch;
pub mod group_configs;
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
pub mod reassignments;
pub mod sasl;
pub mod scram;
pub mod topic_partitions;
pub mod topics;
pub mod transactions;

#[cfg(test)]
mod leadership_tests;
#[cfg(test)]
mod replication_tests;

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
    let image = ctx.controller().image();
    let listener = ctx.listener.to_string();
    let live: Vec<_> = image
        .live_brokers()
        .filter_map(|b| Some((b.id, b.endpoint(&listener)?.clone(), b.rack.clone())))
        .collect();
    live.into_iter()
}

/// KIP-951's hint for a partition this broker does not lead: its leader
/// and leader epoch in the image the replica manager last applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderHint {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

/// Leader hints for the partitions a request was refused with
/// NOT_LEADER_OR_FOLLOWER, and the endpoints of the leaders they name on
/// the client's listener, each broker once (Produce v10+, Fetch v16+).
pub struct LeaderHints {
    image: std::sync::Arc<strom_metadata::MetadataImage>,
    listener: String,
    /// Leader ids named so far, in order.
    leaders: Vec<i32>,
}

impl LeaderHints {
    pub fn new(ctx: &RequestContext<'_>) -> Self {
        Self { image: ctx.replicas().image(), listener: ctx.listener.to_string(), leaders: Vec::new() }
    }

    /// The hint for `topic`'s partition `partition`: as Kafka's
    /// `getCurrentLeader`, the image's leader (-1 when it has none) and
    /// leader epoch, or -1/-1 for a partition the image does not know.
    pub fn hint(&mut self, topic: &str, partition: i32) -> LeaderHint {
        let Some(state) = self.image.topic(topic).and_then(|t| t.partitions.get(&partition)) else {
            return LeaderHint { leader_id: -1, leader_epoch: -1 };
        };
        if state.leader >= 0 && !self.leaders.contains(&state.leader) {
            self.leaders.push(state.leader);
        }
        LeaderHint { leader_id: state.leader, leader_epoch: state.leader_epoch }
    }

    /// The name of topic `id` in the image.
    pub fn topic_name(&self, id: &uuid::Uuid) -> Option<String> {
        self.image.topic_by_id(id).map(|t| t.name.clone())
    }

    /// The live leaders named by the hints, as (id, endpoint, rack) on the
    /// client's listener.
    pub fn endpoints(&self) -> Vec<(i32, strom_metadata::Endpoint, Option<String>)> {
        let live = |id: &i32| self.image.live_brokers().find(|b| b.id == *id);
        self.leaders
            .iter()
            .filter_map(live)
            .filter_map(|b| Some((b.id, b.endpoint(&self.listener)?.clone(), b.rack.clone())))
            .collect()
    }
}

pub fn advertised_endpoint(ctx: &RequestContext<'_>) -> Option<(String, i32)> {
    let (host, port) = ctx.config().advertised_endpoint(&ctx.listener)?;
    Some((host, i32::from(port)))
}
