//! The simulated cluster: nodes, disks, network, clock and fault schedule.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::checker::{digest_after, snapshot_content, snapshot_digest, snapshot_record, Checker, Violation};
use crate::config::QuorumConfig;
use crate::log::{MemoryLog, OffsetAndEpoch, RaftLog, Records};
use crate::message::{Body, ErrorCode, Message};
use crate::node::{Action, Bugs, Event, RaftNode};
use crate::rng::SplitMix64;
use crate::state::{ElectionState, RoleName};
use crate::voters::{Endpoint, ReplicaKey, VoterNode, VoterSet, SUPPORTED_KRAFT_VERSIONS};
use crate::NodeId;

/// The id the administrator's voter changes come from (no node has it).
const ADMIN: NodeId = 0;

/// The latest VotersRecord in a log.
fn latest_voters_in(log: &MemoryLog) -> Option<VoterSet> {
    log.batches().iter().rev().find_map(|batch| match &batch.records {
        Records::Voters(voters) => Some(voters.clone()),
        _ => None,
    })
}

/// The shape of one simulated run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SimConfig {
    pub voters: usize,
    pub observers: usize,
    /// Simulated milliseconds of faults.
    pub fault_phase_ms: u64,
    /// After healing, a new append must commit everywhere within this long.
    pub liveness_bound_ms: u64,
    /// Deliberate bugs planted in every node.
    pub bugs: Bugs,
    /// `kraft.version` 1: the first `voters` nodes are the bootstrap voter
    /// set and an administrator adds and removes voters during the faults.
    pub dynamic_voters: bool,
    /// With dynamic voters, the mean pause between two voter changes.
    pub voter_change_interval_ms: u64,
}

impl SimConfig {
    /// 3 or 5 voters (by seed) and one observer.
    pub fn for_seed(seed: u64) -> Self {
        Self {
            voters: if seed & 1 == 0 { 3 } else { 5 },
            observers: 1,
            fault_phase_ms: 10_000,
            liveness_bound_ms: 10_000,
            bugs: Bugs::default(),
            dynamic_voters: false,
            voter_change_interval_ms: 0,
        }
    }

    /// `kraft.version` 1: one bootstrap voter (Kafka's `--standalone`) or
    /// three, and two more nodes that start as observers; the
    /// administrator changes the voter set about every 400 ms.
    pub fn dynamic_for_seed(seed: u64) -> Self {
        Self {
            voters: if seed.is_multiple_of(3) { 1 } else { 3 },
            observers: 2,
            dynamic_voters: true,
            voter_change_interval_ms: 400,
            ..Self::for_seed(seed)
        }
    }
}

/// What a run did, for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunStats {
    pub events: u64,
    pub committed_batches: usize,
    pub max_epoch: i32,
    pub crashes: u64,
    /// Snapshots the state machines took (and the core accepted).
    pub snapshots: u64,
    /// Snapshots followers fetched and installed.
    pub installs: u64,
    /// Crashes of a node halfway through fetching a snapshot.
    pub crashes_mid_snapshot: u64,
    /// Simulated time from healing until a new append committed everywhere.
    pub recovery_ms: u64,
    /// AddRaftVoter and RemoveRaftVoter requests the administrator sent.
    pub voter_changes_asked: u64,
    /// Those answered NONE: the change committed.
    pub voter_changes_done: u64,
    /// Disks replaced (a new directory id, an empty log).
    pub disks_replaced: u64,
    /// UpdateRaftVoter requests voters sent for their own stale entry.
    pub self_updates: u64,
}

/// A voter change the administrator is waiting on.
#[derive(Debug, Clone, Copy)]
struct AdminChange {
    voter: ReplicaKey,
    is_add: bool,
}

/// What is on one node's disk.
#[derive(Debug, Default, Clone)]
struct Disk {
    /// Every write so far (the page cache).
    written: MemoryLog,
    /// What the last completed flush made durable.
    durable: MemoryLog,
    /// The newest flush whose writes are durable (completions may arrive
    /// out of order; an older one makes nothing more durable).
    durable_flush_id: u64,
    /// `quorum-state`, written durably (write, fsync, rename).
    quorum_state: Option<ElectionState>,
}

struct SimNode {
    config: QuorumConfig,
    raft: Option<RaftNode<MemoryLog>>,
    disk: Disk,
    /// The node's clock runs ahead of simulated time by this much.
    clock_offset_ms: u64,
    /// Bumped by each crash, so completions of a dead incarnation are dropped.
    incarnation: u64,
}

enum Pending {
    Deliver {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    /// A flush completes: what was written when it was issued, and no
    /// more, is durable (a later write may still be torn).
    Flushed {
        node: NodeId,
        incarnation: u64,
        flush_id: u64,
        written: MemoryLog,
    },
}

struct World {
    rng: SplitMix64,
    seed: u64,
    config: SimConfig,
    now: u64,
    nodes: BTreeMap<NodeId, SimNode>,
    /// Messages and flush completions by (due time, sequence).
    pending: BTreeMap<(u64, u64), Pending>,
    sequence: u64,
    /// Directed links that drop everything.
    cut_links: BTreeSet<(NodeId, NodeId)>,
    faulty_network: bool,
    checker: Checker,
    stats: RunStats,
    appends: u64,
    /// Payloads appended after the faults healed.
    post_heal_payloads: BTreeSet<Bytes>,
    /// `STROM_SIM_TRACE=<node id>` prints that node's events and actions.
    traced: Option<NodeId>,
    /// Voter changes sent, by correlation id.
    admin_requests: BTreeMap<u64, AdminChange>,
    /// Answers to the administrator, checked once the event that sent them is.
    admin_inbox: Vec<Message>,
    /// Each leader's epoch and high watermark when `MajorityCommits` last
    /// checked it.
    checked_commits: BTreeMap<NodeId, (i32, u64)>,
    /// Directory ids handed out by disk replacements so far.
    replaced_disks: u32,
    /// When the administrator last sent a voter change.
    last_voter_change_ms: Option<u64>,
}

const APPEND_INTERVAL_MS: u64 = 50;
/// The longest a message travels while the network is faulty.
const MESSAGE_DELAY_MAX_MS: u64 = 40;
/// A run that needs more events than this is stuck (a timer that never advances).
const EVENTS_MAX: u64 = 2_000_000;
const FAULT_INTERVAL_MS: u64 = 250;

/// Runs one seed; the error names the invariant that broke.
pub(crate) fn run(seed: u64, config: SimConfig) -> Result<RunStats, Violation> {
    let mut world = World::new(seed, config);
    let heal_at = config.fault_phase_ms;
    let mut next_fault = FAULT_INTERVAL_MS;
    let mut next_append = APPEND_INTERVAL_MS;
    let mut next_voter_change =
        if config.dynamic_voters { config.voter_change_interval_ms } else { u64::MAX };
    while world.now < heal_at {
        let due = next_fault.min(next_append).min(next_voter_change).min(heal_at);
        if world.step_until(due)? {
            continue;
        }
        if world.now == next_voter_change {
            world.change_voters()?;
            next_voter_change += 1 + world.rng.below(2 * config.voter_change_interval_ms);
        }
        if world.now == next_fault {
            world.inject_fault()?;
            world.maybe_take_snapshot()?;
            next_fault += 1 + world.rng.below(2 * FAULT_INTERVAL_MS);
        }
        if world.now == next_append {
            world.client_append(false)?;
            next_append += APPEND_INTERVAL_MS;
        }
    }
    world.heal()?;
    let give_up_at = heal_at + config.liveness_bound_ms;
    while !world.new_append_committed_everywhere() {
        if world.now >= give_up_at {
            return Err(format!(
                "Liveness: no append made after healing committed on every node within {} ms ({})",
                config.liveness_bound_ms,
                world.describe()
            ));
        }
        let due = next_append.min(give_up_at);
        if !world.step_until(due)? {
            world.client_append(true)?;
            next_append += APPEND_INTERVAL_MS;
        }
    }
    world.stats.recovery_ms = world.now - heal_at;
    if config.dynamic_voters {
        world.await_voter_entries_current(config.liveness_bound_ms)?;
    }
    world.stats.committed_batches = world.checker.committed().len();
    Ok(world.stats)
}

impl World {
    fn new(seed: u64, config: SimConfig) -> Self {
        let mut world = Self {
            rng: SplitMix64::new(seed),
            seed,
            config,
            now: 0,
            nodes: BTreeMap::new(),
            pending: BTreeMap::new(),
            sequence: 0,
            cut_links: BTreeSet::new(),
            faulty_network: true,
            checker: Checker::new(Self::bootstrap_voters(seed, &config)),
            stats: RunStats::default(),
            appends: 0,
            post_heal_payloads: BTreeSet::new(),
            traced: std::env::var("STROM_SIM_TRACE").ok().and_then(|id| id.parse().ok()),
            admin_requests: BTreeMap::new(),
            admin_inbox: Vec::new(),
            checked_commits: BTreeMap::new(),
            replaced_disks: 0,
            last_voter_change_ms: None,
        };
        let bootstrap = Self::bootstrap_voters(seed, &config);
        let all = 1..=(config.voters + config.observers) as NodeId;
        for id in all.clone() {
            let mut quorum = if config.dynamic_voters {
                let mut quorum = QuorumConfig::dynamic(id, Self::directory_id(seed, id), bootstrap.clone());
                quorum.endpoints = Self::endpoints(id);
                quorum.bootstrap_servers = all.clone().collect();
                quorum
            } else {
                QuorumConfig::new(id, bootstrap.ids())
            };
            quorum.parked_fetches_max = 16;
            // Snapshots of 64 bytes travel in four chunks.
            quorum.fetch_snapshot_max_bytes = 16;
            let node = SimNode {
                config: quorum,
                raft: None,
                disk: Disk::default(),
                clock_offset_ms: 0,
                incarnation: 0,
            };
            world.nodes.insert(id, node);
            world.start(id).expect("a fresh node starts");
        }
        world
    }

    /// The voters the run starts with: static, or with directory ids and
    /// endpoints for `kraft.version` 1.
    fn bootstrap_voters(seed: u64, config: &SimConfig) -> VoterSet {
        let ids = 1..=config.voters as NodeId;
        if !config.dynamic_voters {
            return VoterSet::from_ids(ids);
        }
        VoterSet::new(ids.map(|id| Self::voter_node(seed, id)))
    }

    fn voter_node(seed: u64, id: NodeId) -> VoterNode {
        VoterNode {
            key: ReplicaKey::new(id, Some(Self::directory_id(seed, id))),
            endpoints: Self::endpoints(id),
            kraft_versions: SUPPORTED_KRAFT_VERSIONS,
        }
    }

    fn directory_id(seed: u64, id: NodeId) -> uuid::Uuid {
        uuid::Uuid::from_u128((u128::from(seed) << 64) | (id as u128 + 1))
    }

    fn endpoints(id: NodeId) -> Vec<Endpoint> {
        let port = 9_000 + id as u16;
        vec![Endpoint { listener: "CONTROLLER".into(), host: format!("node-{id}"), port }]
    }

    /// Processes events due before `due`, one at a time; returns true if it
    /// stopped early at an event (so the caller loops), false at `due`.
    fn step_until(&mut self, due: u64) -> Result<bool, Violation> {
        let next_pending = self.pending.keys().next().map(|(at, _)| *at).unwrap_or(u64::MAX);
        let (next_timer, timer_node) = self.next_timer();
        let next = next_pending.min(next_timer);
        if next >= due {
            self.now = due;
            return Ok(false);
        }
        self.now = next.max(self.now);
        self.stats.events += 1;
        if self.stats.events > EVENTS_MAX {
            return Err(format!("Progress: more than {EVENTS_MAX} events ({})", self.describe()));
        }
        if next_pending <= next_timer {
            let (_, pending) = self.pending.pop_first().expect("a pending event");
            self.dispatch(pending)?;
        } else {
            self.drive(timer_node, Event::Tick)?;
        }
        Ok(true)
    }

    /// The earliest node timer in simulated time, and whose it is.
    fn next_timer(&self) -> (u64, NodeId) {
        let mut best = (u64::MAX, 0);
        for (id, node) in &self.nodes {
            let Some(raft) = &node.raft else { continue };
            let at = raft.next_deadline().saturating_sub(node.clock_offset_ms).max(self.now);
            if at < best.0 {
                best = (at, *id);
            }
        }
        best
    }

    fn dispatch(&mut self, pending: Pending) -> Result<(), Violation> {
        match pending {
            Pending::Deliver { from, to, message } => self.drive(to, Event::Receive { from, message }),
            Pending::Flushed { node, incarnation, flush_id, written } => {
                let sim = self.nodes.get_mut(&node).expect("known node");
                if sim.incarnation != incarnation || sim.raft.is_none() {
                    return Ok(());
                }
                if flush_id > sim.disk.durable_flush_id {
                    sim.disk.durable = written;
                    sim.disk.durable_flush_id = flush_id;
                }
                self.drive(node, Event::Persisted { flush_id })
            }
        }
    }

    /// Feeds one event to a live node, performs its actions, checks invariants.
    fn drive(&mut self, id: NodeId, event: Event) -> Result<(), Violation> {
        let sim = self.nodes.get_mut(&id).expect("known node");
        let local_now = self.now + sim.clock_offset_ms;
        let Some(raft) = sim.raft.as_mut() else { return Ok(()) };
        if self.traced == Some(id) {
            eprintln!("t={} node {id} {:?} e{}: {event:?}", self.now, raft.role(), raft.epoch());
        }
        raft.handle(local_now, event);
        let actions = raft.take_actions();
        self.perform(id, actions)
    }

    fn perform(&mut self, id: NodeId, actions: Vec<Action>) -> Result<(), Violation> {
        if self.traced == Some(id) {
            actions.iter().for_each(|action| eprintln!("    -> {action:?}"));
        }
        for action in actions {
            match action {
                Action::Send { to: ADMIN, message } => self.admin_inbox.push(message),
                Action::Send { to, message } => self.send(id, to, message),
                Action::AppendLog { batches } => {
                    let disk = &mut self.nodes.get_mut(&id).expect("known node").disk;
                    batches.into_iter().for_each(|batch| disk.written.append(batch));
                }
                Action::TruncateLog { offset } => {
                    self.checker.on_truncate(id, offset)?;
                    self.nodes.get_mut(&id).expect("known node").disk.written.truncate_to(offset);
                }
                Action::WriteSnapshot { snapshot_id, content } => {
                    self.checker.on_snapshot(id, snapshot_id, &content)?;
                    self.on_disk(id, |log| log.create_snapshot(snapshot_id, content.clone()));
                }
                Action::DeleteLogBefore { offset } => {
                    self.on_disk(id, |log| {
                        assert_eq!(log.latest_snapshot().map(|id| id.offset), Some(offset));
                        log.delete_before_snapshot();
                    });
                }
                Action::InstallSnapshot { snapshot_id, content } => {
                    self.checker.on_install(id, snapshot_id, &content)?;
                    self.stats.installs += 1;
                    self.on_disk(id, |log| log.install_snapshot(snapshot_id, content.clone()));
                }
                Action::FlushLog { flush_id } => {
                    let sim = &self.nodes[&id];
                    let (incarnation, written) = (sim.incarnation, sim.disk.written.clone());
                    // Slow disks widen the window in which a crash loses a tail.
                    let at = self.now + self.rng.below(20);
                    self.schedule(at, Pending::Flushed { node: id, incarnation, flush_id, written });
                }
                Action::PersistQuorumState(state) => {
                    self.checker.on_quorum_state(id, state)?;
                    self.nodes.get_mut(&id).expect("known node").disk.quorum_state = Some(state);
                }
            }
        }
        let sim = &self.nodes[&id];
        let raft = sim.raft.as_ref().expect("a live node");
        if raft.log() != &sim.disk.written {
            return Err(format!("Actions: node {id}'s disk writes do not reproduce its log"));
        }
        self.stats.max_epoch = self.stats.max_epoch.max(raft.epoch());
        self.checker.check_timer_progress(raft, self.now + sim.clock_offset_ms)?;
        self.checker.check_node(raft)?;
        self.check_majority_commits(id)?;
        self.read_admin_answers(id)
    }

    /// `MajorityCommits`: when a leader's high watermark rises, a majority
    /// of the voter set it acts on holds the log up to there on disk (the
    /// same batch before it, or a snapshot past it), replaced disks aside.
    fn check_majority_commits(&mut self, id: NodeId) -> Result<(), Violation> {
        let raft = self.nodes[&id].raft.as_ref().expect("a live node");
        let crate::state::Role::Leader(leader) = &raft.role else { return Ok(()) };
        let Some(high_watermark) = leader.high_watermark else { return Ok(()) };
        let checked = (raft.epoch(), high_watermark);
        if self.checked_commits.get(&id).is_some_and(|last| *last >= checked) {
            return Ok(());
        }
        self.checked_commits.insert(id, checked);
        let last = high_watermark.checked_sub(1).and_then(|offset| raft.log().batch_at(offset));
        let holds = |log: &MemoryLog| {
            log.start_offset() >= high_watermark
                || match last {
                    Some(batch) => log.batch_at(high_watermark - 1) == Some(batch),
                    None => log.end_offset() >= high_watermark,
                }
        };
        let voters = raft.voter_set();
        let holders = voters
            .nodes()
            .filter(|voter| self.is_current(voter.key) && holds(&self.nodes[&voter.key.id].disk.durable))
            .count();
        // A voter whose disk was replaced may have acknowledged what its
        // old disk held: the leader still counts it, and the data is gone.
        let replaced = voters.nodes().filter(|voter| !self.is_current(voter.key)).count();
        if holders + replaced < voters.majority() {
            return Err(format!(
                "MajorityCommits: leader {id} of epoch {} committed up to {high_watermark}, which only {holders} of \
                 voters {:?} hold on disk",
                raft.epoch(),
                voters.ids().collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// Checks the administrator's answers against the committed log, now
    /// that the checker has seen the event that sent them.
    fn read_admin_answers(&mut self, from: NodeId) -> Result<(), Violation> {
        for message in std::mem::take(&mut self.admin_inbox) {
            let error = match message.body {
                Body::AddRaftVoterResponse { error, .. } | Body::RemoveRaftVoterResponse { error, .. } => {
                    error
                }
                Body::UpdateRaftVoterResponse { .. } => continue,
                other => return Err(format!("Actions: node {from} sent the administrator {other:?}")),
            };
            // The network duplicates requests, so one may be answered twice.
            let Some(change) = self.admin_requests.get(&message.correlation_id).copied() else {
                return Err(format!("Actions: node {from} answered a voter change never asked"));
            };
            if error == ErrorCode::None {
                self.stats.voter_changes_done += 1;
                self.checker.on_voter_change_done(from, change.voter, change.is_add)?;
            }
        }
        Ok(())
    }

    /// Applies a snapshot write, log start move or install to everything
    /// on the node's disk: these are durable at once (write, fsync,
    /// rename), so they hold in the page cache, on disk, and in what a
    /// flush in flight will make durable.
    fn on_disk(&mut self, id: NodeId, mut apply: impl FnMut(&mut MemoryLog)) {
        let disk = &mut self.nodes.get_mut(&id).expect("known node").disk;
        apply(&mut disk.written);
        apply(&mut disk.durable);
        for pending in self.pending.values_mut() {
            if let Pending::Flushed { node, written, .. } = pending {
                if *node == id {
                    apply(written);
                }
            }
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, message: Message) {
        if from != ADMIN && matches!(message.body, Body::UpdateRaftVoterRequest { .. }) {
            self.stats.self_updates += 1;
        }
        if self.cut_links.contains(&(from, to)) {
            return;
        }
        let copies = if !self.faulty_network {
            1
        } else if self.rng.chance(5, 100) {
            0
        } else if self.rng.chance(3, 100) {
            2
        } else {
            1
        };
        let max_delay = if self.faulty_network { MESSAGE_DELAY_MAX_MS } else { 10 };
        for _ in 0..copies {
            let at = self.now + 1 + self.rng.below(max_delay);
            self.schedule(at, Pending::Deliver { from, to, message: message.clone() });
        }
    }

    fn schedule(&mut self, at: u64, pending: Pending) {
        self.sequence += 1;
        self.pending.insert((at, self.sequence), pending);
    }

    // ---- the client and faults ------------------------------------------

    /// Appends a unique record on the node that believes it leads the
    /// highest epoch (a stale leader may be asked too: its append must not commit).
    fn client_append(&mut self, after_heal: bool) -> Result<(), Violation> {
        let leader = self
            .nodes
            .iter()
            .filter_map(|(id, node)| node.raft.as_ref().map(|raft| (raft, *id)))
            .filter(|(raft, _)| raft.role() == RoleName::Leader)
            .max_by_key(|(raft, _)| raft.epoch())
            .map(|(_, id)| id);
        let Some(id) = leader else { return Ok(()) };
        self.appends += 1;
        let payload = Bytes::from(format!("seed {} append {}", self.seed, self.appends));
        if after_heal {
            self.post_heal_payloads.insert(payload.clone());
        }
        let sim = self.nodes.get_mut(&id).expect("known node");
        let local_now = self.now + sim.clock_offset_ms;
        let raft = sim.raft.as_mut().expect("a live leader");
        raft.append(local_now, vec![payload]).expect("a leader accepts a small append");
        let actions = raft.take_actions();
        self.perform(id, actions)
    }

    /// The administrator asks the node that believes it leads the highest
    /// epoch (now and then a random node) to add an observer, remove a
    /// voter (the leader too) or move a voter's endpoint.
    fn change_voters(&mut self) -> Result<(), Violation> {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let leader = self
            .nodes
            .iter()
            .filter_map(|(id, node)| node.raft.as_ref().map(|raft| (raft, *id)))
            .filter(|(raft, _)| raft.role() == RoleName::Leader)
            .max_by_key(|(raft, _)| raft.epoch())
            .map(|(_, id)| id);
        let to = match leader {
            Some(_) if self.rng.chance(1, 10) => ids[self.rng.below(ids.len() as u64) as usize],
            Some(id) => id,
            None => return Ok(()),
        };
        let Some(raft) = self.nodes[&to].raft.as_ref() else { return Ok(()) };
        let voters = raft.voter_set().clone();
        let epoch = raft.epoch();
        let observers: Vec<NodeId> = ids.iter().copied().filter(|id| !voters.contains_id(*id)).collect();
        let pick = |rng: &mut SplitMix64, from: &[NodeId]| from[rng.below(from.len() as u64) as usize];
        let body = match self.rng.below(10) {
            0 => {
                let id = pick(&mut self.rng, &voters.ids().collect::<Vec<_>>());
                let mut node = self.as_voter(id);
                node.endpoints[0].port += 100 * (1 + self.rng.below(5) as u16);
                Body::UpdateRaftVoterRequest {
                    current_leader_epoch: epoch,
                    voter_id: id,
                    voter_directory_id: node.key.directory_id,
                    listeners: node.endpoints,
                    kraft_versions: node.kraft_versions,
                }
            }
            choice if !observers.is_empty() && (choice < 5 || voters.len() == 1) => {
                let id = pick(&mut self.rng, &observers);
                let node = self.as_voter(id);
                Body::AddRaftVoterRequest {
                    timeout_ms: 30_000,
                    voter_id: node.key.id,
                    voter_directory_id: node.key.directory_id,
                    listeners: node.endpoints,
                }
            }
            _ => {
                // A voter whose disk was replaced goes first: an operator
                // does not remove a working voter while a dead one counts.
                let stale: Vec<NodeId> =
                    voters.nodes().filter(|v| !self.is_current(v.key)).map(|v| v.key.id).collect();
                let candidates = if stale.is_empty() { voters.ids().collect() } else { stale };
                let id = pick(&mut self.rng, &candidates);
                let voter_directory_id = voters.get(id).and_then(|voter| voter.key.directory_id);
                Body::RemoveRaftVoterRequest { voter_id: id, voter_directory_id }
            }
        };
        let change = match &body {
            Body::AddRaftVoterRequest { voter_id, voter_directory_id, .. } => {
                Some(AdminChange { voter: ReplicaKey::new(*voter_id, *voter_directory_id), is_add: true })
            }
            Body::RemoveRaftVoterRequest { voter_id, voter_directory_id } => {
                Some(AdminChange { voter: ReplicaKey::new(*voter_id, *voter_directory_id), is_add: false })
            }
            _ => None,
        };
        self.sequence += 1;
        let correlation_id = self.sequence;
        self.last_voter_change_ms = Some(self.now);
        if let Some(change) = change {
            self.stats.voter_changes_asked += 1;
            self.admin_requests.insert(correlation_id, change);
        }
        self.send(ADMIN, to, Message { correlation_id, body });
        Ok(())
    }

    /// The node `id` as the administrator names it: its current directory.
    fn as_voter(&self, id: NodeId) -> VoterNode {
        let directory_id = self.nodes[&id].config.directory_id;
        VoterNode { key: ReplicaKey::new(id, directory_id), ..Self::voter_node(self.seed, id) }
    }

    /// Whether `key` names a node's current disk (not one replaced since).
    fn is_current(&self, key: ReplicaKey) -> bool {
        self.nodes.get(&key.id).is_some_and(|node| node.config.directory_id == key.directory_id)
    }

    /// A node's disk is replaced (Kafka formats a new log directory, with a
    /// new directory id): it restarts empty, under the same node id, as an
    /// observer until the voter set names its new directory. Once a run,
    /// and only if every voter set in force still has a majority of intact
    /// voters without it, so the quorum stays live.
    fn replace_disk(&mut self, id: NodeId) -> Result<(), Violation> {
        let sets_in_force: Vec<VoterSet> =
            self.nodes
                .values()
                .map(|node| match &node.raft {
                    Some(raft) => raft.voter_set().clone(),
                    None => latest_voters_in(&node.disk.written)
                        .unwrap_or_else(|| self.checker.committed_voters()),
                })
                .chain([self.checker.committed_voters()])
                .collect();
        let safe = sets_in_force.iter().all(|voters| !voters.contains_id(id) || voters.len() >= 3);
        // A change still on the wire could land a smaller set.
        let change_in_flight =
            self.last_voter_change_ms.is_some_and(|at| self.now < at + 2 * MESSAGE_DELAY_MAX_MS);
        if self.replaced_disks > 0 || !safe || change_in_flight {
            return Ok(());
        }
        self.crash(id)?;
        self.replaced_disks += 1;
        self.stats.disks_replaced += 1;
        let directory_id = uuid::Uuid::from_u128(
            (u128::from(self.seed) << 64) | (u128::from(self.replaced_disks) << 32) | (id as u128 + 1),
        );
        let sim = self.nodes.get_mut(&id).expect("known node");
        sim.disk = Disk::default();
        sim.config.directory_id = Some(directory_id);
        self.checker.on_disk_replaced(id);
        self.check_committed_data_durable()?;
        self.start(id)
    }

    fn inject_fault(&mut self) -> Result<(), Violation> {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let id = ids[self.rng.below(ids.len() as u64) as usize];
        if self.config.dynamic_voters && self.rng.chance(1, 20) {
            return self.replace_disk(id);
        }
        match self.rng.below(8) {
            0 => self.crash(id)?,
            1 | 2 => self.restart_if_down(id)?,
            3 => self.isolate(id),
            4 => {
                let other = ids[self.rng.below(ids.len() as u64) as usize];
                self.cut_links.insert((id, other));
            }
            5 => self.cut_links.clear(),
            6 => {
                let jump = self.rng.below(3 * 1_000);
                self.nodes.get_mut(&id).expect("known node").clock_offset_ms += jump;
                self.drive(id, Event::Tick)?;
            }
            _ => self.resign(id)?,
        }
        Ok(())
    }

    /// A random node's state machine snapshots at the end of a random
    /// batch, mostly below its high watermark (the core refuses the rest),
    /// and half the time lets its log start move up to the snapshot.
    fn maybe_take_snapshot(&mut self) -> Result<(), Violation> {
        if self.rng.chance(1, 2) {
            return Ok(());
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let id = ids[self.rng.below(ids.len() as u64) as usize];
        let below_high_watermark = self.rng.chance(3, 4);
        let delete = self.rng.chance(1, 2);
        let pick = self.rng.next_u64();
        let sim = self.nodes.get_mut(&id).expect("known node");
        let local_now = self.now + sim.clock_offset_ms;
        let Some(raft) = sim.raft.as_mut() else { return Ok(()) };
        let log = raft.log();
        let limit = if below_high_watermark { raft.high_watermark().unwrap_or(0) } else { log.end_offset() };
        let candidates = log.batches().partition_point(|batch| batch.next_offset() <= limit);
        if candidates == 0 {
            return Ok(()); // nothing to snapshot; the node saw no event
        }
        let batch = &log.batches()[(pick % candidates as u64) as usize];
        let snapshot_id = OffsetAndEpoch::new(batch.next_offset(), batch.epoch);
        let content = Self::state_machine_snapshot(log, snapshot_id.offset);
        if raft.create_snapshot(local_now, snapshot_id, content).is_ok() {
            self.stats.snapshots += 1;
        }
        if delete {
            raft.delete_before_snapshot(local_now);
        }
        let actions = raft.take_actions();
        self.perform(id, actions)
    }

    /// The state machine's snapshot at `offset`: the digest of its latest
    /// snapshot, or of nothing, with the batches up to `offset` applied.
    fn state_machine_snapshot(log: &MemoryLog, offset: u64) -> crate::SnapshotState {
        let (from, mut digest) = match log.snapshot().filter(|snapshot| snapshot.id.offset <= offset) {
            Some(snapshot) => {
                let state = snapshot_record(&snapshot.content).expect("an intact snapshot");
                (snapshot.id.offset, snapshot_digest(&state).expect("a digest"))
            }
            None => (0, 0),
        };
        for batch in
            log.batches().iter().filter(|batch| batch.base_offset >= from && batch.next_offset() <= offset)
        {
            digest = digest_after(digest, batch);
        }
        crate::SnapshotState {
            records: vec![snapshot_content(digest)],
            last_contained_log_timestamp_ms: offset as i64,
            timestamp_ms: 0,
        }
    }

    fn isolate(&mut self, id: NodeId) {
        for other in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.cut_links.insert((id, other));
            self.cut_links.insert((other, id));
        }
    }

    fn resign(&mut self, id: NodeId) -> Result<(), Violation> {
        let sim = self.nodes.get_mut(&id).expect("known node");
        let local_now = self.now + sim.clock_offset_ms;
        let Some(raft) = sim.raft.as_mut() else { return Ok(()) };
        raft.resign(local_now);
        let actions = raft.take_actions();
        self.perform(id, actions)
    }

    fn crash(&mut self, id: NodeId) -> Result<(), Violation> {
        let sim = self.nodes.get_mut(&id).expect("known node");
        let Some(raft) = sim.raft.take() else { return Ok(()) };
        sim.incarnation += 1;
        self.stats.crashes += 1;
        if raft.is_fetching_snapshot() {
            self.stats.crashes_mid_snapshot += 1;
        }
        if self.traced == Some(id) {
            eprintln!("t={} node {id} crashed", self.now);
        }
        self.check_committed_data_durable()
    }

    /// `CommittedDataDurable`. With static voters a majority holds the
    /// committed log on disk. With dynamic ones, no majority of the
    /// committed voter set may lack it among the voters that can still
    /// vote (a replaced disk's old key never votes again): the same for
    /// odd sets, and what a pending removal leaves in even ones.
    fn check_committed_data_durable(&self) -> Result<(), Violation> {
        let voters = self.checker.committed_voters();
        let intact: Vec<NodeId> =
            voters.nodes().filter(|v| self.is_current(v.key)).map(|v| v.key.id).collect();
        let needed = if self.config.dynamic_voters {
            (intact.len() + 1).saturating_sub(voters.majority())
        } else {
            voters.majority()
        };
        let durable = intact.iter().map(|id| &self.nodes[id].disk.durable);
        self.checker.check_committed_data_durable(durable, needed)
    }

    fn restart_if_down(&mut self, id: NodeId) -> Result<(), Violation> {
        if self.nodes[&id].raft.is_some() {
            return Ok(());
        }
        self.start(id)
    }

    /// Boots a node from its disk: the durable log plus a torn tail, any
    /// prefix of what was written but not flushed.
    fn start(&mut self, id: NodeId) -> Result<(), Violation> {
        let recovered = self.recover_log(id);
        let node_seed = self.rng.next_u64();
        let sim = self.nodes.get_mut(&id).expect("known node");
        sim.disk.written = recovered.clone();
        sim.disk.durable = recovered.clone();
        sim.disk.durable_flush_id = 0; // flush ids start over with the node
        let local_now = self.now + sim.clock_offset_ms;
        let mut raft =
            RaftNode::new(sim.config.clone(), recovered, sim.disk.quorum_state, node_seed, local_now)
                .expect("simulated configuration is valid");
        raft.bugs = self.config.bugs;
        let actions = raft.take_actions();
        sim.raft = Some(raft);
        self.checker.on_restart(id);
        if self.traced == Some(id) {
            eprintln!("t={} node {id} started", self.now);
        }
        self.perform(id, actions)
    }

    fn recover_log(&mut self, id: NodeId) -> MemoryLog {
        let disk = &self.nodes[&id].disk;
        let (durable, written) = (disk.durable.batches(), disk.written.batches());
        let shared = durable.iter().zip(written).take_while(|(a, b)| a == b).count();
        let keep = if self.rng.chance(1, 2) || written.len() == shared {
            None
        } else {
            Some(shared + self.rng.below((written.len() - shared) as u64 + 1) as usize)
        };
        let source = match keep {
            None => durable,
            Some(count) => &written[..count],
        };
        // The snapshot and log start are durable at once; batches above follow.
        let mut log = disk.durable.clone();
        log.truncate_to(log.start_offset());
        source.iter().cloned().for_each(|batch| log.append(batch));
        log
    }

    /// Ends the fault phase: every node up, every link whole, no more loss.
    fn heal(&mut self) -> Result<(), Violation> {
        self.cut_links.clear();
        self.faulty_network = false;
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.restart_if_down(id)?;
        }
        Ok(())
    }

    /// `VoterEntriesCurrent` (liveness, after healing): every follower voter
    /// whose entry an administrator moved corrects it with UpdateRaftVoter
    /// within its update period (three fetch timeouts) and the bound.
    fn await_voter_entries_current(&mut self, bound_ms: u64) -> Result<(), Violation> {
        let give_up_at = self.now + 3 * QuorumConfig::new(1, [1]).fetch_timeout_ms + bound_ms;
        while let Some(stale) = self.stale_voter_entry() {
            if self.now >= give_up_at {
                return Err(format!(
                    "VoterEntriesCurrent: voter {stale}'s entry still names other endpoints than its own \
                     ({})",
                    self.describe()
                ));
            }
            self.step_until(give_up_at)?;
        }
        Ok(())
    }

    /// A follower voter (of the leader of the highest epoch) whose entry in
    /// that leader's voter set is not what the voter itself would write.
    fn stale_voter_entry(&self) -> Option<NodeId> {
        let leader = self
            .nodes
            .values()
            .filter_map(|node| node.raft.as_ref())
            .filter(|raft| raft.role() == RoleName::Leader)
            .max_by_key(|raft| raft.epoch())?;
        leader.voter_set().nodes().map(|entry| entry.key.id).find(|id| {
            let own = self.as_voter(*id);
            let follows = self.nodes[id]
                .raft
                .as_ref()
                .is_some_and(|raft| raft.role() == RoleName::Follower && raft.epoch() == leader.epoch());
            let entry = leader.voter_set().get(*id);
            follows && entry.is_some_and(|entry| entry.key == own.key && *entry != own)
        })
    }

    /// Whether a record appended after healing is below every node's high watermark.
    fn new_append_committed_everywhere(&self) -> bool {
        let committed = self.checker.committed();
        let Some(batch) = committed.iter().find(|batch| match &batch.records {
            Records::Data(records) => records.iter().any(|record| self.post_heal_payloads.contains(record)),
            _ => false,
        }) else {
            return false;
        };
        self.nodes.values().all(|node| {
            node.raft
                .as_ref()
                .is_some_and(|raft| raft.high_watermark().is_some_and(|hw| hw > batch.base_offset))
        })
    }

    fn describe(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(id, node)| match &node.raft {
                Some(raft) => format!(
                    "{id}: {:?} epoch {} voters {:?} leader {:?} hw {:?} end {} next tick {}",
                    raft.role(),
                    raft.epoch(),
                    raft.voter_set().ids().collect::<Vec<_>>(),
                    raft.leader_id(),
                    raft.high_watermark(),
                    raft.log().end_offset(),
                    raft.next_deadline().saturating_sub(node.clock_offset_ms)
                ),
                None => format!("{id}: down"),
            })
            .collect();
        format!("t={} ms; {}", self.now, nodes.join("; "))
    }
}
