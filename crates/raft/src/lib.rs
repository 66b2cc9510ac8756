//! Kafka's KRaft metadata quorum as a sans-IO state machine.
//!
//! TODO module doc
pub mod config;
mod election;
pub mod log;
pub mod message;
pub mod node;
mod replication;
mod requests;
pub mod rng;
#[cfg(test)]
mod sim;
pub mod state;
#[cfg(test)]
mod tests;

/// A node's `node.id`.
pub type NodeId = i32;

pub use config::QuorumConfig;
pub use log::{Batch, MemoryLog, OffsetAndEpoch, RaftLog, Records};
pub use message::{Body, ErrorCode, Message};
pub use node::{Action, AppendError, Event, RaftNode};
pub use state::{ElectionState, RoleName};
