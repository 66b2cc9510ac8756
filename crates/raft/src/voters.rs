//! KIP-853 dynamic voters: who votes, how they are reached, and which voter
//! set is in force at each offset of the log.
//!
//! With `kraft.version` 0 the voters are `controller.quorum.voters` and never
//! change. With `kraft.version` 1 the voter set is read from the log: the
//! latest `VotersRecord` in it, committed or not, is in force (Kafka's
//! `KRaftControlRecordStateMachine`); a truncation reverts to the one
//! before, and a snapshot carries the set in force at its end offset.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::log::{Batch, Records};
use crate::NodeId;

/// `kraft.version` 0: static voters from `controller.quorum.voters`.
pub const KRAFT_VERSION_STATIC: i16 = 0;
/// `kraft.version` 1: the voter set lives in the log (KIP-853).
pub const KRAFT_VERSION_DYNAMIC: i16 = 1;
/// The `kraft.version` range every Strom node supports.
pub const SUPPORTED_KRAFT_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

/// A replica: its `node.id` and the directory id of its metadata log
/// (Kafka's `ReplicaKey`). Static voters have no directory id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaKey {
    /// `node.id`.
    pub id: NodeId,
    /// The metadata log directory's `directory.id`; None when unknown.
    pub directory_id: Option<Uuid>,
}

impl ReplicaKey {
    /// A key.
    pub fn new(id: NodeId, directory_id: Option<Uuid>) -> Self {
        Self { id, directory_id }
    }

    /// A key read off the wire, where Kafka's zero uuid means "none".
    pub fn from_wire(id: NodeId, directory_id: Uuid) -> Self {
        Self { id, directory_id: (!directory_id.is_nil()).then_some(directory_id) }
    }

    /// The directory id as the wire carries it.
    pub fn directory_id_to_wire(&self) -> Uuid {
        self.directory_id.unwrap_or(Uuid::nil())
    }
}

/// One listener a voter accepts quorum traffic on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// The listener name (e.g. `CONTROLLER`).
    pub listener: String,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// A closed range of feature versions (Kafka's `SupportedVersionRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VersionRange {
    /// Lowest supported version.
    pub min: i16,
    /// Highest supported version.
    pub max: i16,
}

impl VersionRange {
    /// Whether `version` lies in the range.
    pub fn contains(&self, version: i16) -> bool {
        self.min <= version && version <= self.max
    }

    /// Whether the range is well formed (Kafka's `handleUpdateVoterRequest` checks).
    pub fn is_valid(&self) -> bool {
        0 <= self.min && self.min <= self.max
    }
}

/// A voter: its key, its endpoints and the `kraft.version`s it supports
/// (Kafka's `VoterSet.VoterNode`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VoterNode {
    /// Id and directory id.
    pub key: ReplicaKey,
    /// Where to reach it, one entry per listener.
    pub endpoints: Vec<Endpoint>,
    /// The `kraft.version` range it supports.
    pub kraft_versions: VersionRange,
}

impl VoterNode {
    /// A static voter (`controller.quorum.voters`): no directory id, and
    /// endpoints the driver knows from its configuration.
    pub fn static_voter(id: NodeId) -> Self {
        Self {
            key: ReplicaKey::new(id, None),
            endpoints: Vec::new(),
            kraft_versions: VersionRange { min: 0, max: 0 },
        }
    }

    /// Whether `key` is this voter (Kafka's `VoterNode.isVoter`): a voter
    /// without a directory id matches on the id alone.
    pub fn is(&self, key: ReplicaKey) -> bool {
        self.key.id == key.id
            && (self.key.directory_id.is_none() || self.key.directory_id == key.directory_id)
    }

    /// Its endpoint on `listener`.
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|endpoint| endpoint.listener == listener)
    }
}

/// The voters of the quorum (Kafka's `VoterSet`), by id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct VoterSet {
    voters: BTreeMap<NodeId, VoterNode>,
}

impl VoterSet {
    /// A set of these voters (a later one with the same id replaces an earlier).
    pub fn new(voters: impl IntoIterator<Item = VoterNode>) -> Self {
        Self { voters: voters.into_iter().map(|voter| (voter.key.id, voter)).collect() }
    }

    /// Static voters by id (`kraft.version` 0).
    pub fn from_ids(ids: impl IntoIterator<Item = NodeId>) -> Self {
        Self::new(ids.into_iter().map(VoterNode::static_voter))
    }

    /// The voters' ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.voters.keys().copied()
    }

    /// The voters, by ascending id.
    pub fn nodes(&self) -> impl Iterator<Item = &VoterNode> {
        self.voters.values()
    }

    /// The voter with this id.
    pub fn get(&self, id: NodeId) -> Option<&VoterNode> {
        self.voters.get(&id)
    }

    /// How many voters.
    pub fn len(&self) -> usize {
        self.voters.len()
    }

    /// Whether there are none (never in force).
    pub fn is_empty(&self) -> bool {
        self.voters.is_empty()
    }

    /// Whether a voter has this id, whatever its directory.
    pub fn contains_id(&self, id: NodeId) -> bool {
        self.voters.contains_key(&id)
    }

    /// Whether `key` is a voter (Kafka's `VoterSet.isVoter`).
    pub fn is_voter(&self, key: ReplicaKey) -> bool {
        self.voters.get(&key.id).is_some_and(|voter| voter.is(key))
    }

    /// Votes (or voters' offsets) needed for a decision: a strict majority.
    pub fn majority(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// The set with `voter` added; None if its id already votes.
    pub fn add_voter(&self, voter: VoterNode) -> Option<VoterSet> {
        if self.contains_id(voter.key.id) {
            return None;
        }
        let mut voters = self.voters.clone();
        voters.insert(voter.key.id, voter);
        Some(Self { voters })
    }

    /// The set without the voter `key` names exactly; None if no voter has
    /// that key, or it is the last one (a voter set is never empty).
    pub fn remove_voter(&self, key: ReplicaKey) -> Option<VoterSet> {
        if self.voters.get(&key.id).is_none_or(|voter| voter.key != key) || self.voters.len() == 1 {
            return None;
        }
        let mut voters = self.voters.clone();
        voters.remove(&key.id);
        Some(Self { voters })
    }

    /// The set with the endpoints and versions of the voter `voter.key`
    /// names replaced; None if it is not a voter.
    pub fn update_voter(&self, voter: VoterNode) -> Option<VoterSet> {
        if !self.is_voter(voter.key) {
            return None;
        }
        let mut voters = self.voters.clone();
        voters.insert(voter.key.id, voter);
        Some(Self { voters })
    }
}

/// Where the voter set in force before the log's first entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaseSource {
    /// `controller.quorum.voters`, or a bootstrap voter set (Kafka's
    /// `0-0.checkpoint`) no leader has written to the log yet.
    Config,
    /// The snapshot the log starts from.
    Snapshot,
}

/// The voter sets and `kraft.version`s the log has held, by offset
/// (Kafka's `VoterSetHistory` and the version history of
/// `KRaftControlRecordStateMachine`).
#[derive(Debug, Clone)]
pub(crate) struct ControlHistory {
    base_kraft_version: i16,
    base_voters: VoterSet,
    pub base_source: BaseSource,
    kraft_versions: BTreeMap<u64, i16>,
    voters: BTreeMap<u64, VoterSet>,
}

impl ControlHistory {
    pub fn new(kraft_version: i16, voters: VoterSet, base_source: BaseSource) -> Self {
        Self {
            base_kraft_version: kraft_version,
            base_voters: voters,
            base_source,
            kraft_versions: BTreeMap::new(),
            voters: BTreeMap::new(),
        }
    }

    /// The voter set in force: the latest in the log, committed or not.
    pub fn latest_voters(&self) -> &VoterSet {
        self.voters.values().next_back().unwrap_or(&self.base_voters)
    }

    /// The offset of the latest VotersRecord in the log, if any.
    pub fn latest_voters_offset(&self) -> Option<u64> {
        self.voters.keys().next_back().copied()
    }

    /// The `kraft.version` in force.
    pub fn kraft_version(&self) -> i16 {
        self.kraft_versions.values().next_back().copied().unwrap_or(self.base_kraft_version)
    }

    /// The voter set and `kraft.version` in force below `offset` (a
    /// snapshot at `offset` carries these).
    pub fn before(&self, offset: u64) -> (i16, &VoterSet) {
        let kraft_version =
            self.kraft_versions.range(..offset).next_back().map_or(self.base_kraft_version, |(_, v)| *v);
        let voters = self.voters.range(..offset).next_back().map_or(&self.base_voters, |(_, v)| v);
        (kraft_version, voters)
    }

    /// Takes in the control records of a batch appended to the log.
    pub fn on_append(&mut self, batch: &Batch) {
        match &batch.records {
            Records::KRaftVersion { kraft_version } => {
                self.kraft_versions.insert(batch.base_offset, *kraft_version);
            }
            Records::Voters(voters) => {
                self.voters.insert(batch.base_offset, voters.clone());
            }
            Records::Data(_) | Records::LeaderChange { .. } => {}
        }
    }

    /// The log lost everything from `offset` on: so do the entries.
    pub fn truncate_from(&mut self, offset: u64) {
        self.kraft_versions.split_off(&offset);
        self.voters.split_off(&offset);
    }

    /// The log now starts at `offset`: entries below it fold into the base,
    /// which the snapshot there carries.
    pub fn forget_before(&mut self, offset: u64) {
        let (kraft_version, voters) = self.before(offset);
        let (kraft_version, voters) = (kraft_version, voters.clone());
        if self.voters.range(..offset).next().is_some()
            || self.kraft_versions.range(..offset).next().is_some()
        {
            self.base_source = BaseSource::Snapshot;
        }
        self.base_kraft_version = kraft_version;
        self.base_voters = voters;
        self.kraft_versions = self.kraft_versions.split_off(&offset);
        self.voters = self.voters.split_off(&offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voters(ids: &[NodeId]) -> VoterSet {
        VoterSet::new(ids.iter().map(|id| VoterNode {
            key: ReplicaKey::new(*id, Some(Uuid::from_u128(*id as u128))),
            endpoints: Vec::new(),
            kraft_versions: SUPPORTED_KRAFT_VERSIONS,
        }))
    }

    fn voters_batch(base_offset: u64, ids: &[NodeId]) -> Batch {
        Batch { base_offset, epoch: 1, records: Records::Voters(voters(ids)) }
    }

    #[test]
    fn the_latest_voters_record_is_in_force_and_truncation_reverts_it() {
        let mut history = ControlHistory::new(KRAFT_VERSION_DYNAMIC, voters(&[1]), BaseSource::Config);
        history.on_append(&Batch {
            base_offset: 1,
            epoch: 1,
            records: Records::KRaftVersion { kraft_version: 1 },
        });
        history.on_append(&voters_batch(2, &[1, 2]));
        history.on_append(&voters_batch(5, &[1, 2, 3]));
        assert_eq!((history.latest_voters(), history.latest_voters_offset()), (&voters(&[1, 2, 3]), Some(5)));
        assert_eq!(history.before(5).1, &voters(&[1, 2]));
        assert_eq!(history.before(2).1, &voters(&[1]));
        history.truncate_from(5);
        assert_eq!((history.latest_voters(), history.latest_voters_offset()), (&voters(&[1, 2]), Some(2)));
        history.truncate_from(0);
        assert_eq!(
            (history.latest_voters(), history.kraft_version()),
            (&voters(&[1]), KRAFT_VERSION_DYNAMIC)
        );
    }

    #[test]
    fn forgetting_the_log_below_a_snapshot_keeps_what_was_in_force_there() {
        let mut history = ControlHistory::new(KRAFT_VERSION_DYNAMIC, voters(&[1]), BaseSource::Config);
        history.on_append(&voters_batch(2, &[1, 2]));
        history.on_append(&voters_batch(7, &[2]));
        history.forget_before(4);
        assert_eq!(history.base_source, BaseSource::Snapshot);
        assert_eq!(history.before(4).1, &voters(&[1, 2]));
        assert_eq!(history.latest_voters(), &voters(&[2]));
        history.truncate_from(4);
        assert_eq!((history.latest_voters(), history.latest_voters_offset()), (&voters(&[1, 2]), None));
    }

    #[test]
    fn voter_set_changes_follow_kafkas_rules() {
        let set = voters(&[1, 2]);
        let anonymous = ReplicaKey::new(2, None);
        assert!(set.is_voter(ReplicaKey::new(2, Some(Uuid::from_u128(2)))));
        assert!(!set.is_voter(anonymous), "a voter with a directory id matches only that directory");
        assert!(VoterSet::from_ids([2]).is_voter(anonymous), "a static voter matches on its id");
        assert_eq!(set.add_voter(voters(&[2]).get(2).unwrap().clone()), None, "a duplicate id");
        assert_eq!(set.remove_voter(anonymous), None, "removal names the exact key");
        assert_eq!(set.remove_voter(ReplicaKey::new(2, Some(Uuid::from_u128(2)))), Some(voters(&[1])));
        assert_eq!(
            voters(&[1]).remove_voter(ReplicaKey::new(1, Some(Uuid::from_u128(1)))),
            None,
            "the last voter"
        );
        assert_eq!((set.majority(), voters(&[1, 2, 3, 4]).majority()), (2, 3));
    }
}
