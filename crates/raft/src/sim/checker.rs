//! Kafka's simulation invariants (`RaftEventSimulationTest`), checked after
//! every event: `SingleLeader`, `MonotonicEpoch`, `MonotonicHighWatermark`,
//! `ConsistentCommittedData` (a committed batch never changes and every log
//! agrees with it below its high watermark) and `CommittedDataDurable` (a
//! majority of voters' disks hold every committed batch). Two more of our
//! own: `ElectionStateDurable` (a node's `quorum-state` never names a second
//! vote or a second leader in one epoch, nor goes back an epoch, and names
//! as its vote only a node that ran as candidate in that epoch) and
//! `TimerProgress` (after every event each node's next deadline lies ahead,
//! so a driver that sleeps until it never spins).
//!
//! Dynamic voters (KIP-853): `SingleLeader` holds across voter-set
//! changes, and `ElectedByVoters` (a node leads only an epoch it was a
//! voter in when elected, or whose removal had not committed); `CommittedDataDurable` counts the committed
//! voter set (the latest VotersRecord below the committed end), and no
//! majority of it may lack committed data; `VoterSetFromLog` (every node's
//! voter set in force is the latest VotersRecord in its log, else its
//! snapshot's, else the bootstrap set: truncation reverts, snapshots
//! carry it), which with `ConsistentCommittedData` keeps committed
//! VotersRecords from being lost; `VoterChangeCommitted` (an
//! AddRaftVoter or RemoveRaftVoter is answered NONE only once its
//! VotersRecord committed); and, checked by the world which holds the
//! disks, `MajorityCommits` (when a leader's high watermark rises, a
//! majority of the voter set it acts on holds the log up to there on disk).
//!
//! Snapshots (KIP-630): `SnapshotAtCommittedOffset` (every snapshot a node
//! writes or installs ends where a committed batch of its epoch ends) and,
//! within `ConsistentCommittedData`, a snapshot's content is the digest of
//! exactly the committed batches below it, so a node's snapshot plus its
//! log equals the committed history up to its high watermark. The
//! simulated state machine is that digest: [`digest_after`] folds batches
//! into it and [`snapshot_content`] encodes it.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use bytes::Bytes;

use crate::log::{Batch, MemoryLog, OffsetAndEpoch, RaftLog, Records};
use crate::node::RaftNode;
use crate::state::{ElectionState, Role, RoleName};
use crate::voters::{ReplicaKey, VoterSet};
use crate::NodeId;

/// What the checker remembers about one node.
#[derive(Debug, Default, Clone)]
pub(crate) struct NodeWatch {
    /// Largest epoch seen, across restarts (epochs are persisted).
    epoch: i32,
    /// High watermark in this incarnation (it is not persisted).
    high_watermark: u64,
    /// Its log below this offset has been compared with the committed log.
    checked_offset: u64,
    /// The vote and leader its `quorum-state` named in `epoch`, across
    /// restarts (an observer may forget its leader, never change it).
    persisted: ElectionState,
    /// How far its log was scanned for VotersRecords, and the latest seen;
    /// None after a truncation or restart (scan again).
    voters_scan: Option<(u64, Option<VoterSet>)>,
}

/// The cluster-wide history the invariants are checked against.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    leaders_by_epoch: BTreeMap<i32, NodeId>,
    /// (epoch, node) for every node seen as candidate.
    candidates: BTreeSet<(i32, NodeId)>,
    /// The largest high watermark each epoch's leader exposed.
    leader_high_watermarks: BTreeMap<i32, u64>,
    /// Every committed batch, contiguous from offset 0.
    committed: Vec<Batch>,
    /// The state machine's digest after each committed batch.
    committed_digests: Vec<u64>,
    watches: BTreeMap<NodeId, NodeWatch>,
    /// The voters before any VotersRecord (static or bootstrap).
    bootstrap_voters: VoterSet,
}

pub(crate) type Violation = String;

/// The simulated state machine: a digest of every batch applied, in order.
pub(crate) fn digest_after(digest: u64, batch: &Batch) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (digest, batch).hash(&mut hasher);
    hasher.finish()
}

/// A snapshot of the digest, padded so FetchSnapshot takes several chunks.
pub(crate) fn snapshot_content(digest: u64) -> Bytes {
    Bytes::from(format!("{digest:016x}").repeat(4))
}

/// The state machine's record in a snapshot file (None: a damaged file).
pub(crate) fn snapshot_record(file: &Bytes) -> Option<Bytes> {
    crate::checkpoint::Checkpoint::decode(file).ok()?.records.into_iter().next()
}

/// The digest a snapshot holds.
pub(crate) fn snapshot_digest(content: &[u8]) -> Option<u64> {
    let hex = std::str::from_utf8(content.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

impl Checker {
    /// A checker for a run that starts with `bootstrap_voters`.
    pub fn new(bootstrap_voters: VoterSet) -> Self {
        Self { bootstrap_voters, ..Self::default() }
    }

    /// The voter set of the committed log: its latest VotersRecord, or
    /// the bootstrap set.
    pub fn committed_voters(&self) -> VoterSet {
        self.committed
            .iter()
            .rev()
            .find_map(|batch| match &batch.records {
                Records::Voters(voters) => Some(voters.clone()),
                _ => None,
            })
            .unwrap_or_else(|| self.bootstrap_voters.clone())
    }

    /// Node `from` answered that adding or removing `voter` succeeded: the
    /// committed voter set must say so.
    pub fn on_voter_change_done(
        &self,
        from: NodeId,
        voter: ReplicaKey,
        is_add: bool,
    ) -> Result<(), Violation> {
        let voters = self.committed_voters();
        if voters.is_voter(voter) != is_add {
            let change = if is_add { "adding" } else { "removing" };
            return Err(format!(
                "VoterChangeCommitted: node {from} answered {change} {voter:?} before it committed (committed \
                 voters {:?})",
                voters.ids().collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// The offset after the last committed batch.
    pub fn committed_end(&self) -> u64 {
        self.committed.last().map_or(0, Batch::next_offset)
    }

    /// The committed batches.
    pub fn committed(&self) -> &[Batch] {
        &self.committed
    }

    /// A node's disk was replaced: everything known about it goes (its
    /// epoch and votes were on the old disk).
    pub fn on_disk_replaced(&mut self, id: NodeId) {
        self.watches.remove(&id);
    }

    /// A node restarted: its high watermark starts over.
    pub fn on_restart(&mut self, id: NodeId) {
        let watch = self.watches.entry(id).or_default();
        watch.high_watermark = 0;
        watch.checked_offset = 0;
        watch.voters_scan = None;
    }

    /// A node wrote `quorum-state`: one vote and one leader per epoch, and
    /// epochs only grow.
    pub fn on_quorum_state(&mut self, id: NodeId, state: ElectionState) -> Result<(), Violation> {
        if let Some(voted) = state.voted_id.filter(|voted| *voted != id) {
            if !self.candidates.contains(&(state.epoch, voted)) {
                return Err(format!(
                    "ElectionStateDurable: node {id} voted for {voted} in epoch {}, which it never ran in",
                    state.epoch
                ));
            }
        }
        let known = &mut self.watches.entry(id).or_default().persisted;
        if state.epoch < known.epoch {
            return Err(format!(
                "ElectionStateDurable: node {id} wrote epoch {} after {}",
                state.epoch, known.epoch
            ));
        }
        if state.epoch > known.epoch {
            *known = ElectionState { epoch: state.epoch, ..ElectionState::default() };
        }
        for (what, new, old) in
            [("vote", state.voted_id, &mut known.voted_id), ("leader", state.leader_id, &mut known.leader_id)]
        {
            match (new, *old) {
                (Some(new), Some(old)) if new != old => {
                    return Err(format!(
                        "ElectionStateDurable: node {id} wrote {what} {new} in epoch {} after {what} {old}",
                        state.epoch
                    ));
                }
                (Some(new), _) => *old = Some(new),
                (None, _) => {}
            }
        }
        Ok(())
    }

    /// After an event at `now` (the node's clock), the node's next deadline
    /// lies ahead: a timer already due would make a driver tick in a loop.
    pub fn check_timer_progress(&self, node: &RaftNode<MemoryLog>, now: u64) -> Result<(), Violation> {
        let deadline = node.next_deadline();
        if deadline <= now {
            return Err(format!(
                "TimerProgress: node {} ({:?}) is owed a tick at {deadline}, not after {now}",
                node.node_id(),
                node.role()
            ));
        }
        Ok(())
    }

    /// A node wrote or installed a snapshot: it ends where a committed
    /// batch of its epoch ends and holds the digest of the batches below.
    pub fn on_snapshot(
        &self,
        id: NodeId,
        snapshot_id: OffsetAndEpoch,
        content: &[u8],
    ) -> Result<(), Violation> {
        let index = self.committed.partition_point(|batch| batch.next_offset() < snapshot_id.offset);
        let Some(batch) = self.committed.get(index).filter(|batch| batch.next_offset() == snapshot_id.offset)
        else {
            return Err(format!(
                "SnapshotAtCommittedOffset: node {id} snapshotted at {snapshot_id:?}, not the end of a \
                 committed batch (committed up to {})",
                self.committed_end()
            ));
        };
        if batch.epoch != snapshot_id.epoch {
            return Err(format!(
                "SnapshotAtCommittedOffset: node {id}'s snapshot {snapshot_id:?} names another epoch \
                 than the committed batch {batch:?}"
            ));
        }
        if snapshot_record(&Bytes::copy_from_slice(content))
            != Some(snapshot_content(self.committed_digests[index]))
        {
            return Err(format!(
                "ConsistentCommittedData: node {id}'s snapshot {snapshot_id:?} does not hold the committed state"
            ));
        }
        Ok(())
    }

    /// A node installed a fetched snapshot, replacing its log.
    pub fn on_install(
        &mut self,
        id: NodeId,
        snapshot_id: OffsetAndEpoch,
        content: &[u8],
    ) -> Result<(), Violation> {
        self.on_snapshot(id, snapshot_id, content)?;
        self.on_truncate(id, snapshot_id.offset)
    }

    /// A node truncated its log to `offset`.
    pub fn on_truncate(&mut self, id: NodeId, offset: u64) -> Result<(), Violation> {
        let watch = self.watches.entry(id).or_default();
        if offset < watch.high_watermark {
            return Err(format!(
                "ConsistentCommittedData: node {id} truncated to {offset}, below its high watermark {}",
                watch.high_watermark
            ));
        }
        watch.checked_offset = watch.checked_offset.min(offset);
        watch.voters_scan = None;
        Ok(())
    }

    /// Checks one live node after an event that touched it.
    pub fn check_node(&mut self, node: &RaftNode<MemoryLog>) -> Result<(), Violation> {
        if node.refused_truncations() > 0 {
            return Err(format!(
                "ConsistentCommittedData: a leader asked node {} to truncate below its high watermark",
                node.node_id()
            ));
        }
        self.check_single_leader(node)?;
        self.check_voter_set_from_log(node)?;
        self.check_monotonic_epoch(node)?;
        self.check_monotonic_high_watermark(node)?;
        self.check_consistent_committed_data(node)
    }

    fn check_single_leader(&mut self, node: &RaftNode<MemoryLog>) -> Result<(), Violation> {
        if node.role() == RoleName::Candidate {
            self.candidates.insert((node.epoch(), node.node_id()));
        }
        if node.role() != RoleName::Leader {
            return Ok(());
        }
        let (id, epoch) = (node.node_id(), node.epoch());
        let leader = *self.leaders_by_epoch.entry(epoch).or_insert_with(|| {
            // First seen leading: it was elected by its voter set, so in it,
            // or in the one before if its removal has not committed yet.
            if !node.can_campaign() {
                return NodeId::MIN;
            }
            id
        });
        if leader == NodeId::MIN {
            return Err(format!("ElectedByVoters: node {id} leads epoch {epoch} without being a voter"));
        }
        if leader != id {
            return Err(format!("SingleLeader: nodes {leader} and {id} both led epoch {epoch}"));
        }
        Ok(())
    }

    /// The voter set a node acts on is the one its log (or snapshot, or
    /// the bootstrap) says is in force.
    fn check_voter_set_from_log(&mut self, node: &RaftNode<MemoryLog>) -> Result<(), Violation> {
        let log = node.log();
        let Self { watches, bootstrap_voters, .. } = self;
        // Only the batches appended since the last check are scanned.
        let watch = watches.entry(node.node_id()).or_default();
        let (from, mut in_log) = match watch.voters_scan.take() {
            Some((scanned, latest)) if scanned <= log.end_offset() => (scanned, latest),
            _ => (log.start_offset(), None),
        };
        let first = log.batches().partition_point(|batch| batch.base_offset < from);
        for batch in &log.batches()[first..] {
            if let Records::Voters(voters) = &batch.records {
                in_log = Some(voters.clone());
            }
        }
        let (_, in_log) = watch.voters_scan.insert((log.end_offset(), in_log));
        let in_snapshot = match in_log {
            Some(_) => None,
            None => log
                .snapshot()
                .and_then(|snapshot| crate::checkpoint::Checkpoint::decode(&snapshot.content).ok()?.voters),
        };
        let expected = in_log.as_ref().or(in_snapshot.as_ref()).unwrap_or(bootstrap_voters);
        if node.voter_set() != expected {
            return Err(format!(
                "VoterSetFromLog: node {} acts on voters {:?}, its log says {:?}",
                node.node_id(),
                node.voter_set().ids().collect::<Vec<_>>(),
                expected.ids().collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    fn check_monotonic_epoch(&mut self, node: &RaftNode<MemoryLog>) -> Result<(), Violation> {
        let watch = self.watches.entry(node.node_id()).or_default();
        if node.epoch() < watch.epoch {
            return Err(format!(
                "MonotonicEpoch: node {} went from epoch {} to {}",
                node.node_id(),
                watch.epoch,
                node.epoch()
            ));
        }
        watch.epoch = node.epoch();
        Ok(())
    }

    /// A node's high watermark never goes back, and a leader's, once known,
    /// covers every high watermark an earlier epoch's leader exposed.
    fn check_monotonic_high_watermark(&mut self, node: &RaftNode<MemoryLog>) -> Result<(), Violation> {
        let id = node.node_id();
        let high_watermark = node.high_watermark().unwrap_or(0);
        let watch = self.watches.entry(id).or_default();
        if high_watermark < watch.high_watermark {
            return Err(format!(
                "MonotonicHighWatermark: node {id} went from {} to {high_watermark}",
                watch.high_watermark
            ));
        }
        watch.high_watermark = high_watermark;
        let Role::Leader(leader) = &node.role else { return Ok(()) };
        let Some(leader_high_watermark) = leader.high_watermark else { return Ok(()) };
        let epoch = node.epoch();
        let earlier = self.leader_high_watermarks.range(..epoch).map(|(_, hw)| *hw).max().unwrap_or(0);
        if leader_high_watermark < earlier {
            return Err(format!(
                "MonotonicHighWatermark: leader {id} of epoch {epoch} exposes {leader_high_watermark}, \
                 below {earlier} of an earlier epoch"
            ));
        }
        let recorded = self.leader_high_watermarks.entry(epoch).or_default();
        *recorded = (*recorded).max(leader_high_watermark);
        Ok(())
    }

    /// Every batch below a node's high watermark equals the committed one
    /// at that offset; batches past the committed end extend it.
    fn check_consistent_committed_data(&mut self, node: &RaftNode<MemoryLog>) -> Result<(), Violation> {
        let id = node.node_id();
        let watch = self.watches.entry(id).or_default();
        let (from, high_watermark) = (watch.checked_offset, watch.high_watermark);
        let batches = node.log().batches();
        let first = batches.partition_point(|batch| batch.base_offset < from);
        for batch in batches[first..].iter().take_while(|batch| batch.base_offset < high_watermark) {
            let index = self.committed.partition_point(|committed| committed.base_offset < batch.base_offset);
            match self.committed.get(index) {
                Some(committed) if committed != batch => {
                    return Err(format!(
                        "ConsistentCommittedData: node {id} holds {batch:?} where {committed:?} was committed"
                    ));
                }
                Some(_) => {}
                None if batch.base_offset == self.committed_end() => {
                    let digest = self.committed_digests.last().copied().unwrap_or(0);
                    self.committed_digests.push(digest_after(digest, batch));
                    self.committed.push(batch.clone());
                }
                None => {
                    return Err(format!(
                        "ConsistentCommittedData: node {id} commits offset {} past a gap at {}",
                        batch.base_offset,
                        self.committed_end()
                    ));
                }
            }
        }
        if node.log().end_offset() < high_watermark {
            return Err(format!("ConsistentCommittedData: node {id} has a high watermark past its log end"));
        }
        self.watches.entry(id).or_default().checked_offset = high_watermark;
        Ok(())
    }

    /// A majority of voters' durable logs hold every committed batch, those
    /// below the log start in their (checked) snapshot.
    pub fn check_committed_data_durable<'a>(
        &self,
        durable_voter_logs: impl Iterator<Item = &'a MemoryLog>,
        majority: usize,
    ) -> Result<(), Violation> {
        let holds_committed = |log: &MemoryLog| {
            let start = log.start_offset();
            let first = self.committed.partition_point(|batch| batch.base_offset < start);
            let at_boundary = start == 0 || self.committed.get(first).is_none_or(|b| b.base_offset == start);
            start <= self.committed_end()
                && at_boundary
                && log.batches().starts_with(&self.committed[first..])
        };
        let holders = durable_voter_logs.filter(|log| holds_committed(log)).count();
        if holders < majority {
            return Err(format!(
                "CommittedDataDurable: only {holders} voters' disks hold the committed log up to {}",
                self.committed_end()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(epoch: i32, leader_id: Option<NodeId>, voted_id: Option<NodeId>) -> ElectionState {
        ElectionState { epoch, leader_id, voted_id }
    }

    #[test]
    fn a_second_vote_or_leader_in_one_epoch_is_caught() {
        let mut checker = Checker::default();
        assert!(checker.on_quorum_state(1, state(2, None, Some(3))).unwrap_err().contains("never ran in"));
        checker.candidates.extend([(2, 3), (2, 2)]);
        checker.on_quorum_state(1, state(2, None, Some(3))).unwrap();
        checker.on_quorum_state(1, state(2, Some(3), Some(3))).unwrap();
        let error = checker.on_quorum_state(1, state(2, Some(3), Some(2))).unwrap_err();
        assert!(error.contains("vote 2 in epoch 2 after vote 3"), "{error}");
        // An observer may forget its leader, but not name another.
        checker.on_quorum_state(4, state(2, Some(3), None)).unwrap();
        checker.on_quorum_state(4, state(2, None, None)).unwrap();
        assert!(checker.on_quorum_state(4, state(2, Some(1), None)).is_err());
        assert!(checker.on_quorum_state(4, state(1, None, None)).unwrap_err().contains("epoch 1 after 2"));
        checker.on_quorum_state(4, state(3, Some(1), None)).unwrap();
    }
}
