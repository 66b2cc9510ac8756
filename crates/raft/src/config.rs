//! The quorum's configuration, under Kafka's `controller.quorum.*` names.

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::voters::{Endpoint, VoterSet};
use crate::NodeId;

/// What one node knows about the quorum and its timeouts. Defaults are
/// Kafka's (`QuorumConfig`, `KafkaRaftClient`).
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This node's `node.id`.
    pub node_id: NodeId,
    /// The ids in `controller.quorum.voters`: the static voters of
    /// `kraft.version` 0. Ignored when `bootstrap_voters` is set.
    pub voters: BTreeSet<NodeId>,
    /// `kraft.version` 1 (KIP-853): the voter set in force until the log
    /// or a snapshot says otherwise (Kafka's bootstrap `0-0.checkpoint`,
    /// written by `kafka-storage format --standalone` or
    /// `--initial-controllers`). The first leader writes it to the log.
    pub bootstrap_voters: Option<VoterSet>,
    /// This node's metadata log `directory.id` (KIP-853's replica key);
    /// None for a node that never had one (static quorums).
    pub directory_id: Option<Uuid>,
    /// The listener voters must advertise (the first of
    /// `controller.listener.names`).
    pub listener_name: String,
    /// This node's advertised controller endpoints, written into the
    /// voter set when it leads.
    pub endpoints: Vec<Endpoint>,
    /// `controller.quorum.bootstrap.servers`, as the ids the driver sends
    /// them by: where a node that knows no leader looks for one, instead of
    /// the voters it knows (empty: the voters).
    pub bootstrap_servers: BTreeSet<NodeId>,
    /// `controller.quorum.election.timeout.ms`: the base of the randomised
    /// election timeout, drawn in `[t, 2t)` per node and per epoch.
    pub election_timeout_ms: u64,
    /// `controller.quorum.fetch.timeout.ms`: a follower without a successful
    /// fetch for this long starts an election; the leader resigns if a
    /// majority has not fetched within 1.5 times this.
    pub fetch_timeout_ms: u64,
    /// `controller.quorum.election.backoff.max.ms`: the cap of the backoff
    /// between lost elections.
    pub election_backoff_max_ms: u64,
    /// `controller.quorum.request.timeout.ms`: an unanswered request is
    /// given up after this long.
    pub request_timeout_ms: u64,
    /// `controller.quorum.retry.backoff.ms`: the pause after a failed request.
    pub retry_backoff_ms: u64,
    /// How long the leader parks a Fetch that finds no new data
    /// (`KafkaRaftClient`'s fetch max wait).
    pub fetch_max_wait_ms: u64,
    /// Bytes of records one Fetch response carries at most (at least one
    /// batch is always sent so a follower can make progress).
    pub fetch_max_bytes: usize,
    /// Bytes of snapshot one FetchSnapshot asks for and one response
    /// carries at most (Kafka's `KafkaRaftClient.MAX_FETCH_SIZE_BYTES`).
    pub fetch_snapshot_max_bytes: usize,
    /// Bytes one appended batch may hold (Kafka's `MAX_BATCH_SIZE_BYTES`).
    pub batch_max_bytes: usize,
    /// Fetches the leader parks at once; past this a fetch is answered
    /// at once, so no client can grow the leader's memory.
    pub parked_fetches_max: usize,
}

impl QuorumConfig {
    /// Kafka's defaults for a node among `voters`.
    pub fn new(node_id: NodeId, voters: impl IntoIterator<Item = NodeId>) -> Self {
        Self {
            node_id,
            voters: voters.into_iter().collect(),
            bootstrap_voters: None,
            directory_id: None,
            listener_name: "CONTROLLER".to_owned(),
            endpoints: Vec::new(),
            bootstrap_servers: BTreeSet::new(),
            election_timeout_ms: 1_000,
            fetch_timeout_ms: 2_000,
            election_backoff_max_ms: 1_000,
            request_timeout_ms: 2_000,
            retry_backoff_ms: 20,
            fetch_max_wait_ms: 500,
            fetch_max_bytes: 8 * 1024 * 1024,
            fetch_snapshot_max_bytes: 8 * 1024 * 1024,
            batch_max_bytes: 8 * 1024 * 1024,
            parked_fetches_max: 1024,
        }
    }

    /// Kafka's defaults for a node of a `kraft.version` 1 quorum that
    /// starts from `bootstrap_voters`, with its directory id.
    pub fn dynamic(node_id: NodeId, directory_id: Uuid, bootstrap_voters: VoterSet) -> Self {
        let mut config = Self::new(node_id, bootstrap_voters.ids());
        config.directory_id = Some(directory_id);
        config.bootstrap_voters = Some(bootstrap_voters);
        config
    }

    /// Whether this node is a static voter (otherwise it is an observer);
    /// the voter set in force is [`crate::RaftNode::voter_set`].
    pub fn is_voter(&self) -> bool {
        self.voters.contains(&self.node_id)
    }

    /// Votes (or fetched voters) needed for a decision among the static voters.
    pub fn majority(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// Rejects settings the quorum cannot run with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let voter_ids: Vec<NodeId> = match &self.bootstrap_voters {
            Some(voters) => voters.ids().collect(),
            None => self.voters.iter().copied().collect(),
        };
        // A node joining a dynamic quorum (`--no-initial-controllers`)
        // learns the voters from the leader it finds through its bootstrap servers.
        let joins = self.bootstrap_voters.is_some() && !self.bootstrap_servers.is_empty();
        if voter_ids.is_empty() && !joins {
            return Err(ConfigError("controller.quorum.voters must name at least one voter"));
        }
        if self.bootstrap_voters.is_some() && self.directory_id.is_none_or(|id| id.is_nil()) {
            return Err(ConfigError("a kraft.version 1 node needs a directory id"));
        }
        if self.node_id < 0 || voter_ids.iter().any(|id| *id < 0) {
            return Err(ConfigError("node ids must not be negative"));
        }
        let timeouts = [self.election_timeout_ms, self.fetch_timeout_ms, self.request_timeout_ms];
        if timeouts.contains(&0) {
            return Err(ConfigError("quorum timeouts must be positive"));
        }
        if self.fetch_max_wait_ms >= self.fetch_timeout_ms {
            return Err(ConfigError("the fetch max wait must be below controller.quorum.fetch.timeout.ms"));
        }
        if self.fetch_snapshot_max_bytes == 0 {
            return Err(ConfigError("the snapshot fetch size must be positive"));
        }
        Ok(())
    }
}

/// A configuration the quorum cannot run with, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_node_may_start_knowing_no_voter_only_with_bootstrap_servers() {
        let mut joiner = QuorumConfig::dynamic(4, Uuid::from_u128(4), VoterSet::default());
        assert!(joiner.validate().is_err());
        joiner.bootstrap_servers = [-2].into();
        assert_eq!(joiner.validate(), Ok(()));
        let mut static_node = QuorumConfig::new(4, []);
        static_node.bootstrap_servers = [-2].into();
        assert!(static_node.validate().is_err(), "a static quorum names its voters");
    }
}
