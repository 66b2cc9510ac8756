//! Strom's KRaft metadata quorum, running: the tokio driver around
//! `strom-raft`'s sans-IO core, its disk state and its network links.
//!
//! Layering: storage -> raft -> **quorum** -> metadata -> broker. The
//! controller writes through [`Quorum::append`] and applies what
//! [`Quorum::subscribe`] hands it; the broker routes the KRaft requests it
//! receives to [`Quorum::handle_request`].
//!
//! # Layout
//!
//! - this file: [`Quorum`], the public handle (cheap to clone), its
//!   [`Config`], events and errors.
//! - `driver` (private): one task owns the `RaftNode`. Inbound requests,
//!   responses from peers, flush completions and the handle's commands
//!   arrive on one queue; ticks fire at the core's `next_deadline`. Each
//!   step's actions are executed in order: log writes go to disk at once,
//!   fsyncs run on a blocking thread and come back as `Event::Persisted`,
//!   `quorum-state` and snapshots are written durably before anything
//!   later, requests go out on the peer links, responses complete the
//!   inbound request they answer. Then committed batches go to the
//!   subscriber and the leader/high watermark are published.
//! - [`disk`]: `<metadata.log.dir>/__cluster_metadata-0`: the log
//!   (strom-storage segments, Kafka's batch format), `quorum-state`,
//!   `<offset>-<epoch>.checkpoint` snapshots in Kafka's layout
//!   ([`strom_raft::checkpoint`]), checked whole before they are used.
//! - [`codec`]: raft batches as Kafka record batches (LeaderChange as a
//!   control batch), for Fetch and for the segments.
//! - [`listener`]: a bare listener serving only the KRaft APIs, for tests
//!   and tools that run a quorum without a broker.
//! - [`bootstrap`]: the KIP-853 bootstrap checkpoint `strom storage format`
//!   writes for `--standalone` and `--initial-controllers`, read back at
//!   start as the dynamic quorum's first voter set.
//!
//! A dynamic quorum's peers are reached at their endpoints on
//! `raft.listener_name` in the voter set in force, else at the leader
//! endpoint a Fetch response named (`NodeEndpoints`), else (bootstrap
//! servers) at routing ids -2, -3, ...; voter changes enter the core from
//! routing id `i32::MIN` and are answered once committed.
//! - [`channel`]: an outbound Kafka connection sending any `kafka-protocol`
//!   request at a chosen version, reusable by the broker's controller link.

pub mod bootstrap;
pub mod channel;
pub mod codec;
pub mod disk;
mod driver;
pub mod listener;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use strom_raft::NodeId;
use tokio::sync::{mpsc, oneshot, watch};

pub use strom_raft::wire::{WireError, WireRequest, WireResponse, METADATA_TOPIC, METADATA_TOPIC_ID};
pub use strom_raft::{Endpoint, QuorumConfig, ReplicaKey, VoterSet};

/// How to start a quorum member.
#[derive(Debug, Clone)]
pub struct Config {
    /// The core's settings: node id, voter ids, `controller.quorum.*` timeouts.
    pub raft: QuorumConfig,
    /// The cluster id every request carries (`meta.properties`).
    pub cluster_id: String,
    /// `metadata.log.dir`: `__cluster_metadata-0` lives under it.
    pub metadata_log_dir: PathBuf,
    /// Each static voter's `host:port` (`controller.quorum.voters`). A
    /// dynamic quorum's voters are reached at their endpoints on
    /// `raft.listener_name` in the voter set in force.
    pub voter_endpoints: BTreeMap<NodeId, String>,
    /// `controller.quorum.bootstrap.servers` as `host:port`: where a node
    /// of a dynamic quorum looks for the leader.
    pub bootstrap_servers: Vec<String>,
    /// Opens the links to peers, secured as the controller listener is.
    pub connector: channel::Connector,
}

impl Config {
    /// The routing id of the `index`th bootstrap server (Kafka numbers
    /// them -2, -3, ...: they are no node's id).
    pub fn bootstrap_server_id(index: usize) -> NodeId {
        -2 - index as NodeId
    }
}

/// The leader this node knows and the epoch it knows it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderAndEpoch {
    /// The leader, when known.
    pub leader_id: Option<i32>,
    /// The epoch.
    pub epoch: i32,
}

/// What the state machine above the quorum is told, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumEvent {
    /// A committed batch, in log order, exactly once per subscription (LeaderChange control batches are not passed up).
    Commit {
        /// The offset of the batch's first record.
        base_offset: u64,
        /// The epoch of the leader that appended it.
        epoch: i32,
        /// The records, as appended.
        records: Vec<Bytes>,
    },
    /// Replace all state with this snapshot (at start, or when a follower installs one).
    LoadSnapshot {
        /// The offset after the last record the snapshot covers.
        end_offset: u64,
        /// The epoch of that last record.
        epoch: i32,
        /// The records the state machine handed to [`Quorum::create_snapshot`].
        records: Vec<Bytes>,
    },
    /// The leader or epoch changed.
    LeaderChange(LeaderAndEpoch),
}

/// Why a quorum operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QuorumError {
    /// Only the leader appends; this is who leads as far as this node knows.
    #[error("this node is not the leader (leader {:?}, epoch {})", leader.leader_id, leader.epoch)]
    NotLeader {
        /// The leader this node knows.
        leader: LeaderAndEpoch,
    },
    /// The batch is empty or larger than a batch may be.
    #[error("invalid batch: {0}")]
    InvalidRecords(&'static str),
    /// The snapshot id is not a committed batch end past the latest snapshot.
    #[error("invalid snapshot: {0}")]
    InvalidSnapshot(String),
    /// A KRaft request that cannot be read (another cluster, another partition, a bad field).
    #[error("invalid request: {0}")]
    Wire(WireError),
    /// The disk failed; the quorum stopped.
    #[error("metadata log storage failed: {0}")]
    Storage(String),
    /// The configuration cannot run.
    #[error("invalid quorum configuration: {0}")]
    Config(String),
    /// No answer in time.
    #[error("the quorum did not answer in time")]
    Timeout,
    /// The quorum is shut down.
    #[error("the quorum is shut down")]
    Shutdown,
}

/// One replica's progress as the leader sees it (DescribeQuorum's `ReplicaState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaDescription {
    /// The node id.
    pub replica_id: NodeId,
    /// Its metadata directory id, when known (KIP-853).
    pub directory_id: Option<uuid::Uuid>,
    /// Its log end offset (its last fetch offset), -1 when unknown.
    pub log_end_offset: i64,
    /// Wall-clock ms of its last fetch, -1 when unknown.
    pub last_fetch_timestamp_ms: i64,
    /// Wall-clock ms when it last fetched up to the leader's log end, -1 when unknown.
    pub last_caught_up_timestamp_ms: i64,
}

/// DescribeQuorum's content.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuorumDescription {
    /// The leader, -1 when unknown.
    pub leader_id: i32,
    /// The epoch.
    pub leader_epoch: i32,
    /// The high watermark, -1 when unknown.
    pub high_watermark: i64,
    /// Whether this node leads (only a leader knows the replicas' progress).
    pub is_leader: bool,
    /// The voters.
    pub voters: Vec<ReplicaDescription>,
    /// The observers that fetched from this leader.
    pub observers: Vec<ReplicaDescription>,
    /// Each voter's endpoints (DescribeQuorum v2's `Nodes`), from the voter
    /// set in force or `controller.quorum.voters`.
    pub voter_endpoints: Vec<(NodeId, Vec<Endpoint>)>,
}

/// What the driver publishes for the handle to read without asking it.
#[derive(Debug)]
struct Shared {
    leader: watch::Sender<LeaderAndEpoch>,
    high_watermark: Mutex<Option<u64>>,
    description: Mutex<QuorumDescription>,
}

/// A running quorum member. Clones share it.
#[derive(Clone)]
pub struct Quorum {
    commands: mpsc::UnboundedSender<driver::Input>,
    shared: Arc<Shared>,
    request_timeout: Duration,
    node_id: NodeId,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum").field("node_id", &self.node_id).finish_non_exhaustive()
    }
}

impl Quorum {
    /// Recovers the disk state and starts the driver task (on the current runtime).
    /// A node whose metadata dir holds the bootstrap checkpoint, or that
    /// has no static voters, runs a dynamic (KIP-853) quorum.
    pub async fn start(mut config: Config) -> Result<Quorum, QuorumError> {
        if config.raft.bootstrap_voters.is_none() {
            let dir = config.metadata_log_dir.clone();
            let checkpoint = tokio::task::spawn_blocking(move || bootstrap::read_voters(&dir))
                .await
                .map_err(|e| QuorumError::Storage(e.to_string()))??;
            if checkpoint.is_some() || config.raft.voters.is_empty() {
                let voters = checkpoint.unwrap_or_default();
                config.raft.voters = voters.ids().collect();
                config.raft.bootstrap_voters = Some(voters);
            }
        }
        config.raft.bootstrap_servers =
            (0..config.bootstrap_servers.len()).map(Config::bootstrap_server_id).collect();
        config.raft.validate().map_err(|e| QuorumError::Config(e.to_string()))?;
        for voter in config.raft.voters.iter().filter(|_| config.raft.bootstrap_voters.is_none()) {
            if !config.voter_endpoints.contains_key(voter) {
                return Err(QuorumError::Config(format!("voter {voter} has no endpoint")));
            }
        }
        let shared = Arc::new(Shared {
            leader: watch::channel(LeaderAndEpoch { leader_id: None, epoch: 0 }).0,
            high_watermark: Mutex::new(None),
            description: Mutex::new(QuorumDescription::default()),
        });
        let request_timeout = Duration::from_millis(config.raft.request_timeout_ms);
        let node_id = config.raft.node_id;
        let commands = driver::spawn(config, shared.clone()).await?;
        Ok(Quorum { commands, shared, request_timeout, node_id })
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> driver::Input) -> Result<T, QuorumError> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).map_err(|_| QuorumError::Shutdown)?;
        rx.await.map_err(|_| QuorumError::Shutdown)
    }

    /// This node must lead: appends one batch, returns the offset of its last record once in the leader's log (not yet committed); Err(NotLeader { leader: LeaderAndEpoch }) otherwise.
    pub async fn append(&self, records: Vec<Bytes>) -> Result<u64, QuorumError> {
        self.ask(|reply| driver::Input::Append { epoch: None, records, reply }).await?
    }

    /// [`Self::append`], only if this node still leads `epoch` (Kafka's
    /// `scheduleAtomicAppend`): a decision taken in one epoch must not be
    /// written in a later one, whose log may hold another leader's records
    /// the decision never saw. Err(NotLeader) otherwise.
    pub async fn append_in_epoch(&self, epoch: i32, records: Vec<Bytes>) -> Result<u64, QuorumError> {
        self.ask(|reply| driver::Input::Append { epoch: Some(epoch), records, reply }).await?
    }

    /// The log end offset: where the next append lands, unless a new
    /// leader's LeaderChange comes first.
    pub async fn log_end_offset(&self) -> Result<u64, QuorumError> {
        self.ask(driver::Input::LogEndOffset).await
    }

    /// The committed stream for the state machine (Kafka's RaftClient.Listener); one subscriber.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<QuorumEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        // A stopped driver drops the sender: the receiver then ends.
        let _ = self.commands.send(driver::Input::Subscribe(tx));
        rx
    }

    /// The leader and epoch, as they change.
    pub fn leader(&self) -> watch::Receiver<LeaderAndEpoch> {
        self.shared.leader.subscribe()
    }

    /// The high watermark: records below it are committed.
    pub fn high_watermark(&self) -> Option<u64> {
        *self.shared.high_watermark.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state machine hands over a snapshot of its state at a committed
    /// batch end, as records; the quorum writes them as a Kafka checkpoint.
    pub async fn create_snapshot(
        &self,
        end_offset: u64,
        epoch: i32,
        records: Vec<Bytes>,
    ) -> Result<(), QuorumError> {
        self.ask(|reply| driver::Input::CreateSnapshot { end_offset, epoch, records, reply }).await?
    }

    /// DescribeQuorum's content: leader, epoch, HW, voters and observers with log end offsets, last fetch and last caught-up times.
    pub fn describe(&self) -> QuorumDescription {
        let mut description = self.shared.description.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if description.is_leader {
            // Kafka's leader reports itself as fetching and caught up right now.
            let now = driver::wall_clock_ms();
            for me in description.voters.iter_mut().filter(|voter| voter.replica_id == self.node_id) {
                me.last_fetch_timestamp_ms = now;
                me.last_caught_up_timestamp_ms = now;
            }
        }
        description
    }

    /// Answers a KRaft request (Vote, BeginQuorumEpoch, EndQuorumEpoch,
    /// Fetch of `__cluster_metadata`, FetchSnapshot, AddRaftVoter,
    /// RemoveRaftVoter, UpdateRaftVoter) received at `version`. A Fetch may
    /// be held until data arrives or its wait ends; a voter change is
    /// answered once it commits.
    pub async fn handle_request(
        &self,
        request: WireRequest,
        version: i16,
    ) -> Result<WireResponse, QuorumError> {
        let answer = self.ask(|reply| driver::Input::Request { request, version, reply });
        match tokio::time::timeout(self.request_timeout, answer).await {
            Ok(answer) => answer?,
            Err(_) => Err(QuorumError::Timeout),
        }
    }

    /// Clean shutdown: a leader resigns with EndQuorumEpoch first.
    pub async fn shutdown(&self) {
        let _ = self.ask(driver::Input::Shutdown).await;
    }
}
