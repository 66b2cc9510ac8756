//! The task that owns the `RaftNode`: feeds it events, executes its
//! actions in order, and publishes what the handle reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{fetch_response, BrokerId};
use kafka_protocol::protocol::StrBytes;
use strom_raft::checkpoint::Checkpoint;
use strom_raft::wire::{self, WireRequest, WireResponse};
use strom_raft::{
    Action, AppendError, Body, Endpoint, Event, MemoryLog, Message, NodeId, OffsetAndEpoch, RaftLog,
    RaftNode, Records, SnapshotState,
};
use tokio::sync::{mpsc, oneshot};

use crate::channel::{Connector, Reconnecting};
use crate::codec::KafkaRecords;
use crate::disk::MetadataDir;
use crate::{
    Config, LeaderAndEpoch, QuorumDescription, QuorumError, QuorumEvent, ReplicaDescription, Shared,
};

/// Inbound requests waiting for the core's answer, at most; past this the
/// oldest abandoned ones are dropped.
const INBOUND_MAX: usize = 4096;
/// Observers that have not fetched for this long leave DescribeQuorum
/// (Kafka's `LeaderState.OBSERVER_SESSION_TIMEOUT_MS`).
const OBSERVER_SESSION_TIMEOUT_MS: i64 = 5 * 60 * 1000;
/// The `from` of voter-change requests: administrators are not quorum
/// nodes, and the core answers to whatever id it was given.
const ADMIN_ROUTE: NodeId = NodeId::MIN;
/// How long a resigning leader waits for its EndQuorumEpoch requests.
const RESIGN_WAIT: Duration = Duration::from_millis(500);

/// What the driver's queue carries.
pub(crate) enum Input {
    Request {
        request: WireRequest,
        version: i16,
        reply: oneshot::Sender<Result<WireResponse, QuorumError>>,
    },
    Response {
        from: NodeId,
        message: Message,
    },
    Persisted {
        flush_id: u64,
    },
    Failed(QuorumError),
    Append {
        /// The epoch the caller decided in: refused in any other.
        epoch: Option<i32>,
        records: Vec<Bytes>,
        reply: oneshot::Sender<Result<u64, QuorumError>>,
    },
    CreateSnapshot {
        end_offset: u64,
        epoch: i32,
        records: Vec<Bytes>,
        reply: oneshot::Sender<Result<(), QuorumError>>,
    },
    Subscribe(mpsc::UnboundedSender<QuorumEvent>),
    /// Node endpoints a peer's Fetch response named.
    Endpoints(Vec<(NodeId, String)>),
    LogEndOffset(oneshot::Sender<u64>),
    Shutdown(oneshot::Sender<()>),
}

/// Links to quorum peers, opened on first use.
struct Peers {
    links: HashMap<NodeId, (String, Arc<Reconnecting>)>,
    client_id: String,
    connector: Connector,
    backoff: Duration,
    timeout: Duration,
}

impl Peers {
    /// The link to `address` for `id`, replaced when the address changed.
    fn link(&mut self, id: NodeId, address: String) -> Arc<Reconnecting> {
        if let Some((known, link)) = self.links.get(&id) {
            if *known == address {
                return link.clone();
            }
        }
        let link = Arc::new(Reconnecting::new(
            &address,
            &self.client_id,
            self.connector.clone(),
            self.backoff,
            self.timeout,
        ));
        self.links.insert(id, (address, link.clone()));
        link
    }
}

/// A replica's fetch progress, seen by this node while it leads.
#[derive(Debug, Clone, Copy)]
struct Progress {
    directory_id: Option<uuid::Uuid>,
    fetch_offset: u64,
    last_fetch_ms: i64,
    last_caught_up_ms: i64,
}

struct Driver {
    node: RaftNode<MemoryLog>,
    disk: MetadataDir,
    config: Config,
    clock: Instant,
    inputs: mpsc::UnboundedReceiver<Input>,
    input_tx: mpsc::UnboundedSender<Input>,
    peers: Peers,
    /// Endpoints learnt from Fetch responses (the leader's).
    learned: HashMap<NodeId, String>,
    outbound_in_flight: Arc<AtomicUsize>,
    inbound: HashMap<u64, (oneshot::Sender<Result<WireResponse, QuorumError>>, i16)>,
    next_inbound_id: u64,
    subscriber: Option<mpsc::UnboundedSender<QuorumEvent>>,
    /// The next offset the subscriber is owed.
    delivered: u64,
    published_leader: Option<LeaderAndEpoch>,
    progress: BTreeMap<NodeId, Progress>,
    shared: Arc<Shared>,
}

fn subscriber_send(subscriber: &Option<mpsc::UnboundedSender<QuorumEvent>>, event: QuorumEvent) {
    if let Some(subscriber) = subscriber {
        let _ = subscriber.send(event);
    }
}

pub(crate) fn wall_clock_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Recovers the disk state, builds the core and spawns the driver task.
pub(crate) async fn spawn(
    config: Config,
    shared: Arc<Shared>,
) -> Result<mpsc::UnboundedSender<Input>, QuorumError> {
    let dir = config.metadata_log_dir.clone();
    let (disk, recovered) = tokio::task::spawn_blocking(move || MetadataDir::open(&dir))
        .await
        .map_err(|e| QuorumError::Storage(e.to_string()))??;
    let clock = Instant::now();
    let seed = wall_clock_ms() as u64 ^ (config.raft.node_id as u64).rotate_left(32);
    let node = RaftNode::new(config.raft.clone(), recovered.log, recovered.election, seed, 0)
        .map_err(|e| QuorumError::Config(e.to_string()))?;
    let backoff = Duration::from_millis(config.raft.retry_backoff_ms.max(10));
    let timeout = Duration::from_millis(config.raft.request_timeout_ms);
    let client_id = format!("raft-client-{}", config.raft.node_id);
    let connector = config.connector.clone();
    let peers = Peers { links: HashMap::new(), client_id, connector, backoff, timeout };
    let (input_tx, inputs) = mpsc::unbounded_channel();
    let mut driver = Driver {
        node,
        disk,
        config,
        clock,
        inputs,
        input_tx: input_tx.clone(),
        peers,
        learned: HashMap::new(),
        outbound_in_flight: Arc::default(),
        inbound: HashMap::new(),
        next_inbound_id: 0,
        subscriber: None,
        delivered: 0,
        published_leader: None,
        progress: BTreeMap::new(),
        shared,
    };
    driver.after_step()?;
    tokio::spawn(async move {
        if let Err(e) = driver.run().await {
            tracing::error!(error = %e, "the metadata quorum stopped");
            // Readers must not go on trusting a leader this node no longer follows.
            let epoch = driver.node.epoch();
            driver.shared.leader.send_replace(LeaderAndEpoch { leader_id: None, epoch });
            let stopped = QuorumDescription {
                leader_id: -1,
                leader_epoch: epoch,
                high_watermark: -1,
                ..Default::default()
            };
            *driver.shared.description.lock().unwrap_or_else(PoisonError::into_inner) = stopped;
        }
    });
    Ok(input_tx)
}

impl Driver {
    fn now(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    async fn run(&mut self) -> Result<(), QuorumError> {
        loop {
            let deadline = self.node.next_deadline();
            let sleep_ms = deadline.saturating_sub(self.now()).min(3_600_000);
            // None: the deadline passed; Some(None) cannot happen while the
            // driver holds a sender of its own queue.
            let woke = tokio::select! {
                input = self.inputs.recv() => Some(input),
                _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => None,
            };
            match woke {
                Some(Some(Input::Shutdown(reply))) => {
                    self.resign().await;
                    let _ = reply.send(());
                    return Ok(());
                }
                Some(Some(Input::Failed(error))) => return Err(error),
                Some(Some(input)) => self.handle(input),
                Some(None) => return Ok(()),
                None => self.node.handle(self.now(), Event::Tick),
            }
            self.after_step()?;
        }
    }

    fn handle(&mut self, input: Input) {
        let now = self.now();
        match input {
            Input::Request { request, version, reply } => self.receive_request(now, request, version, reply),
            Input::Response { from, message } => self.node.handle(now, Event::Receive { from, message }),
            Input::Persisted { flush_id } => self.node.handle(now, Event::Persisted { flush_id }),
            Input::Append { epoch, records, reply } => {
                if epoch.is_some_and(|epoch| epoch != self.node.epoch()) {
                    let _ = reply.send(Err(QuorumError::NotLeader { leader: self.leader_and_epoch() }));
                    return;
                }
                let result = self.node.append(now, records).map_err(|e| match e {
                    AppendError::NotLeader => QuorumError::NotLeader { leader: self.leader_and_epoch() },
                    AppendError::Empty => QuorumError::InvalidRecords("a batch needs at least one record"),
                    AppendError::TooLarge => QuorumError::InvalidRecords("the batch is too large"),
                });
                let _ = reply.send(result);
            }
            Input::CreateSnapshot { end_offset, epoch, records, reply } => {
                let id = OffsetAndEpoch::new(end_offset, epoch);
                // The header names when the last record it covers was
                // appended, as Kafka's controller passes it.
                let timestamp_ms = wall_clock_ms();
                let last_contained_log_timestamp_ms = end_offset
                    .checked_sub(1)
                    .and_then(|last| self.disk.append_time_ms(last))
                    .unwrap_or(timestamp_ms);
                let state = SnapshotState { records, last_contained_log_timestamp_ms, timestamp_ms };
                let result = self.node.create_snapshot(now, id, state);
                if result.is_ok() {
                    // The metadata log is small: keep only what follows the snapshot.
                    self.node.delete_before_snapshot(now);
                }
                let _ = reply.send(result.map_err(|e| QuorumError::InvalidSnapshot(format!("{e:?}"))));
            }
            Input::Subscribe(subscriber) => {
                self.subscriber = Some(subscriber);
                self.delivered = 0;
                // The new subscriber learns the current leader first.
                let leader = self.leader_and_epoch();
                subscriber_send(&self.subscriber, QuorumEvent::LeaderChange(leader));
            }
            Input::Endpoints(endpoints) => self.learned.extend(endpoints),
            Input::LogEndOffset(reply) => {
                let _ = reply.send(self.node.log().end_offset());
            }
            Input::Shutdown(_) | Input::Failed(_) => unreachable!("handled by run"),
        }
    }

    fn receive_request(
        &mut self,
        now: u64,
        request: WireRequest,
        version: i16,
        reply: oneshot::Sender<Result<WireResponse, QuorumError>>,
    ) {
        let body = match wire::request_from_wire(&request, &self.config.cluster_id, version) {
            Ok(body) => body,
            Err(e) => {
                let _ = reply.send(Err(QuorumError::Wire(e)));
                return;
            }
        };
        let from = match &body {
            Body::VoteRequest { candidate_id, .. } => *candidate_id,
            Body::BeginQuorumEpochRequest { leader_id, .. }
            | Body::EndQuorumEpochRequest { leader_id, .. } => *leader_id,
            Body::FetchRequest { replica_id, fetch_offset, replica_directory_id, .. } => {
                self.note_fetch(*replica_id, *replica_directory_id, *fetch_offset);
                *replica_id
            }
            Body::FetchSnapshotRequest { replica_id, .. } => *replica_id,
            Body::AddRaftVoterRequest { .. }
            | Body::RemoveRaftVoterRequest { .. }
            | Body::UpdateRaftVoterRequest { .. } => ADMIN_ROUTE,
            _ => return,
        };
        if self.inbound.len() >= INBOUND_MAX {
            self.inbound.retain(|_, (reply, _)| !reply.is_closed());
        }
        if self.inbound.len() >= INBOUND_MAX {
            let _ = reply.send(Err(QuorumError::Timeout));
            return;
        }
        self.next_inbound_id += 1;
        let correlation_id = self.next_inbound_id;
        self.inbound.insert(correlation_id, (reply, version));
        self.node.handle(now, Event::Receive { from, message: Message { correlation_id, body } });
    }

    /// Records a replica's fetch for DescribeQuorum.
    fn note_fetch(&mut self, replica_id: NodeId, directory_id: Option<uuid::Uuid>, fetch_offset: u64) {
        let now = wall_clock_ms();
        let end = self.node.log().end_offset();
        let entry = self.progress.entry(replica_id).or_insert(Progress {
            directory_id,
            fetch_offset,
            last_fetch_ms: now,
            last_caught_up_ms: -1,
        });
        entry.directory_id = directory_id;
        entry.fetch_offset = fetch_offset;
        entry.last_fetch_ms = now;
        if fetch_offset >= end {
            entry.last_caught_up_ms = now;
        }
    }

    /// Executes the core's actions, then delivers and publishes.
    fn after_step(&mut self) -> Result<(), QuorumError> {
        for action in self.node.take_actions() {
            self.execute(action)?;
        }
        self.deliver();
        self.publish();
        Ok(())
    }

    fn execute(&mut self, action: Action) -> Result<(), QuorumError> {
        match action {
            Action::Send { to, message } => self.send(to, message),
            Action::AppendLog { batches } => self.disk.append(&batches)?,
            Action::TruncateLog { offset } => self.disk.truncate(offset)?,
            Action::FlushLog { flush_id } => {
                let disk = self.disk.clone();
                let inputs = self.input_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let input = match disk.flush() {
                        Ok(()) => Input::Persisted { flush_id },
                        Err(e) => Input::Failed(e),
                    };
                    let _ = inputs.send(input);
                });
            }
            Action::PersistQuorumState(state) => {
                let voters: Vec<NodeId> = self.node.voter_set().ids().collect();
                self.disk.write_quorum_state(state, &self.config.cluster_id, &voters, 0)?;
            }
            Action::WriteSnapshot { snapshot_id, content } => {
                self.disk.write_snapshot(snapshot_id, &content)?
            }
            Action::DeleteLogBefore { offset } => {
                self.disk.delete_before(offset, self.node.high_watermark().unwrap_or(offset))?
            }
            Action::InstallSnapshot { snapshot_id, content } => {
                self.disk.install_snapshot(snapshot_id, &content)?
            }
        }
        Ok(())
    }

    fn send(&mut self, to: NodeId, message: Message) {
        if message.body.is_request() {
            return self.send_request(to, message);
        }
        let Some((reply, version)) = self.inbound.remove(&message.correlation_id) else { return };
        let mut answer =
            wire::response_to_wire(&message.body, version, &KafkaRecords).map_err(QuorumError::Wire);
        if let Ok(response) = &mut answer {
            self.add_leader_endpoint(response, version);
        }
        let _ = reply.send(answer);
    }

    /// Sends a request on the peer's link; the response (or nothing, if
    /// the link fails: the core retries) comes back as an input.
    fn send_request(&mut self, to: NodeId, message: Message) {
        let Some(address) = self.address_of(to) else {
            tracing::debug!(to, "no endpoint for a quorum peer");
            return;
        };
        let peer = self.peers.link(to, address);
        let version = *wire::supported_versions(&message.body).end();
        let request = match wire::request_to_wire(&message.body, &self.config.cluster_id, to, version) {
            Ok(request) => request,
            Err(e) => return tracing::warn!(to, error = %e, "cannot encode a quorum request"),
        };
        let inputs = self.input_tx.clone();
        let in_flight = self.outbound_in_flight.clone();
        in_flight.fetch_add(1, Ordering::AcqRel);
        let correlation_id = message.correlation_id;
        tokio::spawn(async move {
            match exchange(&peer, request, version).await {
                Ok((body, endpoints)) => {
                    if !endpoints.is_empty() {
                        let _ = inputs.send(Input::Endpoints(endpoints));
                    }
                    let _ =
                        inputs.send(Input::Response { from: to, message: Message { correlation_id, body } });
                }
                Err(e) => tracing::debug!(to, error = %e, "quorum request failed"),
            }
            in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Where `id` takes quorum traffic: its endpoint in the voter set in
    /// force, its `controller.quorum.voters` entry, or a bootstrap server.
    fn address_of(&self, id: NodeId) -> Option<String> {
        let listener = &self.config.raft.listener_name;
        if let Some(endpoint) = self.node.voter_set().get(id).and_then(|voter| voter.endpoint(listener)) {
            return Some(format!("{}:{}", endpoint.host, endpoint.port));
        }
        if let Some(address) = self.config.voter_endpoints.get(&id).or_else(|| self.learned.get(&id)) {
            return Some(address.clone());
        }
        (0..self.config.bootstrap_servers.len())
            .find(|index| Config::bootstrap_server_id(*index) == id)
            .map(|index| self.config.bootstrap_servers[index].clone())
    }

    /// A voter's endpoints: as the voter set has them, else its
    /// `controller.quorum.voters` address on the quorum's listener.
    fn endpoints_of(&self, id: NodeId) -> Vec<Endpoint> {
        match self.node.voter_set().get(id) {
            Some(voter) if !voter.endpoints.is_empty() => voter.endpoints.clone(),
            _ => self
                .config
                .voter_endpoints
                .get(&id)
                .and_then(|address| split_address(address))
                .map(|(host, port)| Endpoint { listener: self.config.raft.listener_name.clone(), host, port })
                .into_iter()
                .collect(),
        }
    }

    /// Names the leader's endpoint in a Fetch response (v16+ `NodeEndpoints`,
    /// as Kafka does), so an observer that found the quorum through a
    /// bootstrap server can reach the leader before it knows the voters.
    fn add_leader_endpoint(&self, response: &mut WireResponse, version: i16) {
        let WireResponse::Fetch(fetch) = response else { return };
        let Some(leader) = self.node.leader_id().filter(|_| version >= 16) else { return };
        let Some((host, port)) = self.address_of(leader).and_then(|a| split_address(&a)) else { return };
        let endpoint = fetch_response::NodeEndpoint::default()
            .with_node_id(BrokerId(leader))
            .with_host(StrBytes::from_string(host))
            .with_port(i32::from(port));
        fetch.node_endpoints = vec![endpoint];
    }

    /// Passes committed batches (and a snapshot when the log starts past
    /// what was delivered) to the subscriber.
    fn deliver(&mut self) {
        let Some(subscriber) = &self.subscriber else { return };
        let log = self.node.log();
        if self.delivered < log.start_offset() {
            if let Some(snapshot) = log.snapshot() {
                // Checked when read from disk or fetched: only the records
                // are the state machine's.
                match Checkpoint::decode(&snapshot.content) {
                    Ok(checkpoint) => {
                        let event = QuorumEvent::LoadSnapshot {
                            end_offset: snapshot.id.offset,
                            epoch: snapshot.id.epoch,
                            records: checkpoint.records,
                        };
                        let _ = subscriber.send(event);
                    }
                    Err(e) => tracing::error!("snapshot {:?} not delivered: {e}", snapshot.id),
                }
            }
            self.delivered = log.start_offset();
        }
        let high_watermark = self.node.high_watermark().unwrap_or(0);
        while let Some(batch) = log.batch_at(self.delivered).filter(|b| b.next_offset() <= high_watermark) {
            if let Records::Data(records) = &batch.records {
                let event = QuorumEvent::Commit {
                    base_offset: batch.base_offset,
                    epoch: batch.epoch,
                    records: records.clone(),
                };
                let _ = subscriber.send(event);
            }
            self.delivered = batch.next_offset();
        }
    }

    fn leader_and_epoch(&self) -> LeaderAndEpoch {
        LeaderAndEpoch { leader_id: self.node.leader_id(), epoch: self.node.epoch() }
    }

    fn publish(&mut self) {
        let leader = self.leader_and_epoch();
        if self.published_leader != Some(leader) {
            tracing::info!(leader = ?leader.leader_id, epoch = leader.epoch, "metadata quorum leader or epoch changed");
            if self.published_leader.is_some_and(|old| old.leader_id != leader.leader_id) {
                // Only the leader of this epoch knows the replicas' progress.
                self.progress.clear();
            }
            self.published_leader = Some(leader);
            self.shared.leader.send_replace(leader);
            subscriber_send(&self.subscriber, QuorumEvent::LeaderChange(leader));
        }
        *self.shared.high_watermark.lock().unwrap_or_else(PoisonError::into_inner) =
            self.node.high_watermark();
        let description = self.describe();
        *self.shared.description.lock().unwrap_or_else(PoisonError::into_inner) = description;
    }

    fn describe(&self) -> QuorumDescription {
        let me = self.config.raft.node_id;
        let is_leader = self.node.role() == strom_raft::RoleName::Leader;
        let now = wall_clock_ms();
        let voter_set = self.node.voter_set();
        let directory = |id: NodeId| match voter_set.get(id) {
            Some(voter) => voter.key.directory_id,
            None => self.progress.get(&id).and_then(|p| p.directory_id),
        };
        let replica = |id: NodeId| {
            let directory_id = directory(id);
            if is_leader && id == me {
                let end = self.node.log().end_offset() as i64;
                // As a voter it goes by its key in the voter set: a static
                // voter has no directory id, as in Kafka.
                return ReplicaDescription {
                    replica_id: id,
                    directory_id,
                    log_end_offset: end,
                    last_fetch_timestamp_ms: now,
                    last_caught_up_timestamp_ms: now,
                };
            }
            match self.progress.get(&id).filter(|_| is_leader) {
                Some(p) => ReplicaDescription {
                    replica_id: id,
                    directory_id,
                    log_end_offset: p.fetch_offset as i64,
                    last_fetch_timestamp_ms: p.last_fetch_ms,
                    last_caught_up_timestamp_ms: p.last_caught_up_ms,
                },
                None => ReplicaDescription {
                    replica_id: id,
                    directory_id,
                    log_end_offset: -1,
                    last_fetch_timestamp_ms: -1,
                    last_caught_up_timestamp_ms: -1,
                },
            }
        };
        let voters: Vec<NodeId> = voter_set.ids().collect();
        let voter_endpoints = voters.iter().map(|id| (*id, self.endpoints_of(*id))).collect();
        QuorumDescription {
            voter_endpoints,
            leader_id: self.node.leader_id().unwrap_or(-1),
            leader_epoch: self.node.epoch(),
            high_watermark: self.node.high_watermark().map_or(-1, |hw| hw as i64),
            is_leader,
            voters: voters.iter().map(|id| replica(*id)).collect(),
            observers: self
                .progress
                .iter()
                .filter(|(id, p)| !voters.contains(id) && now - p.last_fetch_ms < OBSERVER_SESSION_TIMEOUT_MS)
                .map(|(id, _)| replica(*id))
                .collect(),
        }
    }

    /// Resigns (a leader sends EndQuorumEpoch), waits briefly for those
    /// requests, then makes the log durable.
    async fn resign(&mut self) {
        self.node.resign(self.now());
        if self.after_step().is_err() {
            return;
        }
        let deadline = tokio::time::Instant::now() + RESIGN_WAIT;
        while self.outbound_in_flight.load(Ordering::Acquire) > 0 {
            match tokio::time::timeout_at(deadline, self.inputs.recv()).await {
                Ok(Some(input @ Input::Response { .. })) => {
                    self.handle(input);
                    if self.after_step().is_err() {
                        return;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let disk = self.disk.clone();
        let _ = tokio::task::spawn_blocking(move || disk.flush()).await;
    }
}

/// One request/response over a peer link, as the core's messages.
async fn exchange(
    peer: &Reconnecting,
    request: WireRequest,
    version: i16,
) -> Result<(Body, Vec<(NodeId, String)>), String> {
    let response = match request {
        WireRequest::AddRaftVoter(r) => {
            WireResponse::AddRaftVoter(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
        WireRequest::RemoveRaftVoter(r) => {
            WireResponse::RemoveRaftVoter(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
        WireRequest::UpdateRaftVoter(r) => {
            WireResponse::UpdateRaftVoter(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
        WireRequest::Vote(r) => WireResponse::Vote(peer.send(&r, version).await.map_err(|e| e.to_string())?),
        WireRequest::BeginQuorumEpoch(r) => {
            WireResponse::BeginQuorumEpoch(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
        WireRequest::EndQuorumEpoch(r) => {
            WireResponse::EndQuorumEpoch(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
        WireRequest::Fetch(r) => {
            WireResponse::Fetch(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
        WireRequest::FetchSnapshot(r) => {
            WireResponse::FetchSnapshot(peer.send(&r, version).await.map_err(|e| e.to_string())?)
        }
    };
    let endpoints = match &response {
        WireResponse::Fetch(fetch) => fetch
            .node_endpoints
            .iter()
            .map(|endpoint| (endpoint.node_id.0, format!("{}:{}", endpoint.host, endpoint.port)))
            .collect(),
        _ => Vec::new(),
    };
    let body = wire::response_from_wire(&response, version, &KafkaRecords).map_err(|e| e.to_string())?;
    Ok((body, endpoints))
}

/// `host:port` as its parts.
fn split_address(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}
