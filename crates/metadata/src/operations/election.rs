//! Leadership and ISR changes of partitions, decided as Kafka's
//! `PartitionChangeBuilder` and `ReplicationControlManager` decide them:
//! fencing, controlled shutdown and unregistration move leadership away
//! from a broker, unfencing gives leaderless partitions a leader,
//! AlterPartition (KIP-497, KIP-903) takes a leader's new ISR, and
//! ElectLeaders runs preferred and unclean elections.
//!
//! Without eligible leader replicas (KIP-966) an ISR is never emptied: the
//! last in-sync replica stays in it while it is away, so the partition can
//! only be led again by it, unless an unclean election picks another
//! replica and resets the ISR to that replica.
//!
//! With them (`eligible.leader.replicas.version` 1, on for new clusters as
//! in Kafka 4.1), replicas that leave an ISR already below min ISR become
//! eligible leaders: the leader's high watermark stops below min ISR, so
//! their logs hold every committed record. The ISR may then empty; an
//! eligible replica that can lead is elected and leads alone, and with
//! both sets empty the last known leader may lead again.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::{is_active, LEADER_UNCHANGED, NO_LEADER};
use crate::controller::MetadataError;
use crate::image::{MetadataImage, PartitionImage, TopicImage};
use crate::kraft_records::{MetadataRecord, PartitionChangeRecord};

/// The topic (and broker default) config that allows unclean elections.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// The topic (and broker default) config below which the ISR keeps eligible leader replicas.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Kafka's `LeaderRecoveryState`.
const RECOVERED: i8 = 0;
const RECOVERING: i8 = 1;

/// How a new leader may be chosen (Kafka's `PartitionChangeBuilder.Election`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// The first replica if it is in the ISR and can lead, else as `Online`.
    Preferred,
    /// The current leader while it can lead, else the first replica (in
    /// replica order) that is in the ISR and can lead.
    Online,
    /// As `Online`, then any replica that can lead, the ISR reset to it:
    /// records it never received are lost.
    Unclean,
}

/// What the controller's own configuration adds to the image when it
/// picks an election: its node id (for its dynamic broker configs), its
/// static `unclean.leader.election.enable` and `min.insync.replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionDefaults {
    pub node_id: i32,
    pub unclean_leader_election_enable: bool,
    pub min_insync_replicas: i32,
}

impl Default for ElectionDefaults {
    fn default() -> Self {
        Self { node_id: 0, unclean_leader_election_enable: false, min_insync_replicas: 1 }
    }
}

/// A topic config as Kafka resolves it: the topic's, else the controller
/// node's dynamic config, else the cluster-wide dynamic default.
fn resolved_config<'a>(
    image: &'a MetadataImage,
    topic: &'a TopicImage,
    node_id: i32,
    name: &str,
) -> Option<&'a String> {
    let node = node_id.to_string();
    [&topic.configs, image.broker_configs(&node), image.broker_configs("")]
        .into_iter()
        .find_map(|configs| configs.get(name))
}

/// The election a topic's partitions get on failures, from
/// `unclean.leader.election.enable` as Kafka resolves it, else the
/// controller's static config.
pub fn failover_election(image: &MetadataImage, topic: &TopicImage, defaults: ElectionDefaults) -> Election {
    let enabled = resolved_config(image, topic, defaults.node_id, UNCLEAN_LEADER_ELECTION_ENABLE)
        .map_or(defaults.unclean_leader_election_enable, |v| v.eq_ignore_ascii_case("true"));
    if enabled {
        Election::Unclean
    } else {
        Election::Online
    }
}

/// Kafka's `getTopicEffectiveMinIsr`: the topic's `min.insync.replicas`
/// as resolved, capped at its replication factor.
fn effective_min_isr(
    image: &MetadataImage,
    topic: &TopicImage,
    partition: &PartitionImage,
    defaults: ElectionDefaults,
) -> usize {
    let configured = resolved_config(image, topic, defaults.node_id, MIN_INSYNC_REPLICAS)
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(defaults.min_insync_replicas);
    usize::try_from(configured).unwrap_or(1).min(partition.replicas.len())
}

/// A change to one partition: a target ISR and recovery state, and an
/// election run over them; with eligible leader replicas on, the ELR and
/// last known ELR follow the ISR as Kafka's `PartitionChangeBuilder` keeps
/// them.
pub struct PartitionChange<'a> {
    topic_id: Uuid,
    partition_id: i32,
    partition: &'a PartitionImage,
    target_isr: Vec<i32>,
    target_elr: Vec<i32>,
    target_recovery_state: i8,
    election: Election,
    /// The effective min ISR when eligible leader replicas are on.
    elr_min_isr: Option<usize>,
    /// A broker that restarted without a clean shutdown: its log may miss
    /// acknowledged records, so it leaves the ISR and ELR.
    unclean_shutdown: Option<i32>,
    target_replicas: Vec<i32>,
    target_adding: Vec<i32>,
    target_removing: Vec<i32>,
    /// The log dir of each replica the partition does not yet have.
    default_directory: &'a dyn Fn(i32) -> Uuid,
}

impl<'a> PartitionChange<'a> {
    pub fn new(topic_id: Uuid, partition_id: i32, partition: &'a PartitionImage) -> Self {
        Self {
            topic_id,
            partition_id,
            partition,
            target_isr: partition.isr.clone(),
            target_elr: partition.elr.clone(),
            target_recovery_state: partition.leader_recovery_state,
            election: Election::Online,
            elr_min_isr: None,
            unclean_shutdown: None,
            target_replicas: partition.replicas.clone(),
            target_adding: partition.adding_replicas.clone(),
            target_removing: partition.removing_replicas.clone(),
            default_directory: &|_| super::DIRECTORY_UNASSIGNED,
        }
    }

    /// The change as the controller makes it for a partition of `topic`:
    /// its failover election, and eligible leader replicas when the
    /// feature is on.
    pub fn for_topic(
        image: &MetadataImage,
        topic: &TopicImage,
        partition_id: i32,
        partition: &'a PartitionImage,
        defaults: ElectionDefaults,
    ) -> Self {
        let change = Self::new(topic.id, partition_id, partition)
            .with_election(failover_election(image, topic, defaults));
        if image.elr_enabled() {
            change.with_eligible_leader_replicas(effective_min_isr(image, topic, partition, defaults))
        } else {
            change
        }
    }

    /// A new assignment (KIP-455): all replicas, and which of them are
    /// being added and removed; `directory` gives new replicas' log dirs.
    pub fn with_assignment(
        mut self,
        replicas: Vec<i32>,
        adding: Vec<i32>,
        removing: Vec<i32>,
        directory: &'a dyn Fn(i32) -> Uuid,
    ) -> Self {
        self.target_replicas = replicas;
        self.target_adding = adding;
        self.target_removing = removing;
        self.default_directory = directory;
        self
    }

    pub fn with_election(mut self, election: Election) -> Self {
        self.election = election;
        self
    }

    pub fn with_target_isr(mut self, isr: Vec<i32>) -> Self {
        self.target_isr = isr;
        self
    }

    pub fn with_recovery_state(mut self, state: i8) -> Self {
        self.target_recovery_state = state;
        self
    }

    /// Turns on eligible leader replicas for a topic whose effective min
    /// ISR is `min_isr`.
    pub fn with_eligible_leader_replicas(mut self, min_isr: usize) -> Self {
        self.elr_min_isr = Some(min_isr);
        self
    }

    /// Marks `broker` as restarted after an unclean shutdown.
    pub fn with_unclean_shutdown(mut self, broker: i32) -> Self {
        self.unclean_shutdown = Some(broker);
        self
    }

    /// The record that carries out the change, or `None` when nothing
    /// changes. `can_lead` says which brokers may lead now.
    pub fn build(mut self, can_lead: impl Fn(i32) -> bool) -> Option<PartitionChangeRecord> {
        let mut record = PartitionChangeRecord {
            topic_id: self.topic_id,
            partition_id: self.partition_id,
            ..Default::default()
        };
        self.complete_reassignment_if_in_sync();
        self.populate_target_elr();
        let (leader, unclean) = self.elect(&can_lead);
        if leader != self.partition.leader {
            if self.target_elr.contains(&leader) {
                // An eligible replica leads alone: it holds every committed record.
                self.target_isr = vec![leader];
                self.target_elr.retain(|r| *r != leader);
            }
            record.leader = leader;
            if unclean {
                // Only the new leader's log is known to be whole now.
                record.isr = Some(vec![leader]);
                if self.partition.leader_recovery_state != RECOVERING {
                    record.leader_recovery_state = RECOVERING;
                }
            }
        }
        // A replica leaving the assignment must see a new leader epoch.
        let keeps_every_replica = self.partition.replicas.iter().all(|r| self.target_replicas.contains(r));
        if record.leader == LEADER_UNCHANGED && !keeps_every_replica {
            record.leader = self.partition.leader;
        }
        self.set_record_elr(&mut record);
        // Without ELR an ISR is never emptied: its last member stays while it is away.
        let may_empty = self.elr_min_isr.is_some();
        if record.isr.is_none()
            && (may_empty || !self.target_isr.is_empty())
            && self.target_isr != self.partition.isr
        {
            record.isr = Some(self.target_isr.clone());
        }
        self.set_last_known_leader(&mut record);
        self.set_assignment_changes(&mut record);
        if record.leader_recovery_state < 0
            && self.target_recovery_state != self.partition.leader_recovery_state
        {
            record.leader_recovery_state = self.target_recovery_state;
        }
        let unchanged = record.leader == LEADER_UNCHANGED
            && record.isr.is_none()
            && record.leader_recovery_state < 0
            && record.eligible_leader_replicas.is_none()
            && record.last_known_elr.is_none()
            && record.replicas.is_none()
            && record.adding_replicas.is_none()
            && record.removing_replicas.is_none();
        (!unchanged).then_some(record)
    }

    /// Kafka's `maybePopulateTargetElr`: while the target ISR is below min
    /// ISR, the members it loses (and those already eligible) are eligible
    /// leaders, except a broker back from an unclean shutdown.
    fn populate_target_elr(&mut self) {
        let Some(min_isr) = self.elr_min_isr else { return };
        if self.target_isr.len() >= min_isr {
            self.target_elr.clear();
            return;
        }
        let candidates: BTreeSet<i32> = self.target_elr.iter().chain(&self.partition.isr).copied().collect();
        self.target_elr = candidates
            .into_iter()
            .filter(|r| !self.target_isr.contains(r) && self.unclean_shutdown != Some(*r))
            .filter(|r| self.target_replicas.contains(r))
            .collect();
    }

    /// Kafka's `maybeUpdateRecordElr`: an unclean election, or ELR turned
    /// off, empties the ELR.
    fn set_record_elr(&mut self, record: &mut PartitionChangeRecord) {
        if record.isr.is_some() || self.elr_min_isr.is_none() {
            self.target_elr.clear();
        }
        if self.target_elr != self.partition.elr {
            record.eligible_leader_replicas = Some(self.target_elr.clone());
        }
    }

    /// Kafka's `maybeUpdateLastKnownLeader`: the leader is remembered when
    /// the ISR first becomes empty, and forgotten once there is a leader.
    fn set_last_known_leader(&self, record: &mut PartitionChangeRecord) {
        if self.elr_min_isr.is_none() {
            return;
        }
        let old_leader = self.partition.leader;
        let emptied = record.isr.as_ref().is_some_and(Vec::is_empty);
        if emptied && old_leader != NO_LEADER && self.partition.last_known_elr != [old_leader] {
            record.last_known_elr = Some(vec![old_leader]);
        } else if (record.leader >= 0 || (old_leader != NO_LEADER && record.leader != NO_LEADER))
            && !self.partition.last_known_elr.is_empty()
        {
            record.last_known_elr = Some(Vec::new());
        }
    }

    /// Kafka's `completeReassignmentIfNeeded`: once every replica that
    /// stays is in the target ISR, the removed replicas leave the
    /// assignment and the ISR.
    fn complete_reassignment_if_in_sync(&mut self) {
        if self.target_adding.is_empty() && self.target_removing.is_empty() {
            return;
        }
        let staying = |r: &i32| !self.target_removing.contains(r);
        let isr: Vec<i32> = self.target_isr.iter().copied().filter(staying).collect();
        let replicas: Vec<i32> = self.target_replicas.iter().copied().filter(staying).collect();
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return;
        }
        self.target_isr = isr;
        self.target_replicas = replicas;
        self.target_adding.clear();
        self.target_removing.clear();
    }

    /// Kafka's `setAssignmentChanges`: replicas, their log dirs and the
    /// reassignment's adding and removing replicas, where they changed.
    fn set_assignment_changes(&self, record: &mut PartitionChangeRecord) {
        let p = self.partition;
        if self.target_replicas != p.replicas {
            let directory = |r: &i32| match p.replicas.iter().position(|x| x == r) {
                Some(i) => p.directories.get(i).copied().unwrap_or((self.default_directory)(*r)),
                None => (self.default_directory)(*r),
            };
            record.directories = Some(self.target_replicas.iter().map(directory).collect());
            record.replicas = Some(self.target_replicas.clone());
        }
        if self.target_adding != p.adding_replicas {
            record.adding_replicas = Some(self.target_adding.clone());
        }
        if self.target_removing != p.removing_replicas {
            record.removing_replicas = Some(self.target_removing.clone());
        }
    }

    /// The leader the election picks, and whether it was picked from
    /// outside the ISR and ELR.
    fn elect(&self, can_lead: &impl Fn(i32) -> bool) -> (i32, bool) {
        let valid = |r: i32| self.may_lead_cleanly(r) && can_lead(r);
        let replicas = &self.target_replicas;
        if self.election == Election::Preferred {
            if let Some(&preferred) = replicas.first().filter(|r| valid(**r)) {
                return (preferred, false);
            }
        }
        if valid(self.partition.leader) {
            return (self.partition.leader, false);
        }
        if let Some(&leader) = replicas.iter().find(|r| valid(**r)) {
            return (leader, false);
        }
        if let Some(leader) = self.last_known_leader(can_lead) {
            return (leader, true);
        }
        if self.election == Election::Unclean {
            if let Some(&leader) = replicas.iter().find(|r| can_lead(**r)) {
                return (leader, true);
            }
        }
        (NO_LEADER, false)
    }

    /// An ISR member, or an eligible leader replica once the ISR is empty.
    fn may_lead_cleanly(&self, replica: i32) -> bool {
        self.target_isr.contains(&replica)
            || (self.target_isr.is_empty() && self.target_elr.contains(&replica))
    }

    /// Kafka's balanced recovery: with the ISR and ELR both empty, the last
    /// known leader may lead again once it can.
    fn last_known_leader(&self, can_lead: &impl Fn(i32) -> bool) -> Option<i32> {
        let no_clean_choice =
            self.elr_min_isr.is_some() && self.target_isr.is_empty() && self.target_elr.is_empty();
        match self.partition.last_known_elr.as_slice() {
            [leader] if no_clean_choice && can_lead(*leader) => Some(*leader),
            _ => None,
        }
    }
}

/// PartitionChangeRecords that take `broker` out of every ISR and
/// leadership (fencing, controlled shutdown, unregistration): each
/// partition it led gets the next ISR member that can lead, or none.
pub fn move_leadership_away(
    image: &MetadataImage,
    broker: i32,
    defaults: ElectionDefaults,
) -> Vec<MetadataRecord> {
    let can_lead = |r: i32| r != broker && is_active(image, r);
    let mut records = Vec::new();
    for topic in image.topics() {
        for (id, p) in &topic.partitions {
            if !p.isr.contains(&broker) && p.leader != broker {
                continue;
            }
            let isr = p.isr.iter().copied().filter(|r| *r != broker).collect();
            let change = PartitionChange::for_topic(image, topic, *id, p, defaults).with_target_isr(isr);
            records.extend(change.build(can_lead).map(MetadataRecord::from));
        }
    }
    records
}

/// PartitionChangeRecords for a broker registering again after an unclean
/// shutdown (KIP-966): its log may have lost acknowledged records, so it
/// leaves every ISR and ELR and leads nothing. Without ELR, it only leaves
/// the ISRs and leaderships, as after a fencing.
pub fn after_unclean_shutdown(
    image: &MetadataImage,
    broker: i32,
    defaults: ElectionDefaults,
) -> Vec<MetadataRecord> {
    if !image.elr_enabled() {
        return move_leadership_away(image, broker, defaults);
    }
    let can_lead = |r: i32| r != broker && is_active(image, r);
    let mut records = Vec::new();
    for topic in image.topics() {
        for (id, p) in &topic.partitions {
            if !p.isr.contains(&broker) && !p.elr.contains(&broker) {
                continue;
            }
            let isr = p.isr.iter().copied().filter(|r| *r != broker).collect();
            let change = PartitionChange::for_topic(image, topic, *id, p, defaults)
                .with_target_isr(isr)
                .with_unclean_shutdown(broker);
            records.extend(change.build(can_lead).map(MetadataRecord::from));
        }
    }
    records
}

/// PartitionChangeRecords that give leaderless partitions a leader now
/// that `broker` is unfenced (it is not yet in the image as unfenced).
pub fn lead_leaderless(
    image: &MetadataImage,
    broker: i32,
    defaults: ElectionDefaults,
) -> Vec<MetadataRecord> {
    let can_lead = |r: i32| r == broker || is_active(image, r);
    let mut records = Vec::new();
    for topic in image.topics() {
        for (id, p) in topic.partitions.iter().filter(|(_, p)| p.leader == NO_LEADER) {
            let change = PartitionChange::for_topic(image, topic, *id, p, defaults);
            records.extend(change.build(can_lead).map(MetadataRecord::from));
        }
    }
    records
}

/// The most preferred-leader elections one balancing run makes, as
/// Kafka's controller bounds them.
const MAX_ELECTIONS_PER_BALANCE: usize = 1_000;

/// `auto.leader.rebalance.enable`'s periodic run: each partition not led
/// by its first replica goes back to it when that replica is in the ISR
/// and can lead.
pub fn balance_partition_leaders(image: &MetadataImage, defaults: ElectionDefaults) -> Vec<MetadataRecord> {
    let can_lead = |r: i32| is_active(image, r);
    let mut records = Vec::new();
    for topic in image.topics() {
        for (id, p) in &topic.partitions {
            let Some(&preferred) = p.replicas.first() else { continue };
            if p.leader == preferred || !p.isr.contains(&preferred) || !can_lead(preferred) {
                continue;
            }
            let change =
                PartitionChange::for_topic(image, topic, *id, p, defaults).with_election(Election::Preferred);
            records.extend(change.build(can_lead).map(MetadataRecord::from));
            if records.len() == MAX_ELECTIONS_PER_BALANCE {
                return records;
            }
        }
    }
    records
}

/// One partition's entry of an AlterPartition request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// The new ISR as (broker id, broker epoch); epoch -1 skips its check.
    pub new_isr: Vec<(i32, i64)>,
    pub leader_recovery_state: i8,
}

/// Per AlterPartition entry, the partition after the change or why the
/// entry was refused.
pub type IsrOutcome = Result<PartitionImage, MetadataError>;

/// AlterPartition from `broker_id` at `broker_epoch` (STALE_BROKER_EPOCH
/// for the whole request otherwise): the records of the accepted changes
/// and, per entry, the partition as it stands after them or why the entry
/// was refused.
pub fn alter_partition(
    image: &MetadataImage,
    broker_id: i32,
    broker_epoch: i64,
    changes: &[IsrChange],
    defaults: ElectionDefaults,
) -> Result<(Vec<MetadataRecord>, Vec<IsrOutcome>), MetadataError> {
    super::check_broker_epoch(image, broker_id, broker_epoch)?;
    let mut records = Vec::new();
    let results = changes
        .iter()
        .map(|change| {
            let topic = image.topic_by_id(&change.topic_id).ok_or(MetadataError::UnknownTopicId)?;
            let partition = topic.partitions.get(&change.partition).ok_or(MetadataError::UnknownTopic)?;
            validate_isr_change(image, broker_id, partition, change)?;
            let isr = change.new_isr.iter().map(|(id, _)| *id).collect();
            let built = PartitionChange::for_topic(image, topic, change.partition, partition, defaults)
                .with_target_isr(isr)
                .with_recovery_state(change.leader_recovery_state)
                .build(|r| is_active(image, r));
            let mut after = partition.clone();
            if let Some(record) = built {
                let leader = record.leader;
                after.merge(record.clone());
                records.push(record.into());
                if leader != LEADER_UNCHANGED && leader != broker_id {
                    return Err(MetadataError::NewLeaderElected);
                }
            }
            Ok(after)
        })
        .collect();
    Ok((records, results))
}

/// Kafka's `validateAlterPartitionData`, in its order.
fn validate_isr_change(
    image: &MetadataImage,
    broker_id: i32,
    partition: &PartitionImage,
    change: &IsrChange,
) -> Result<(), MetadataError> {
    let invalid = |why: String| Err(MetadataError::InvalidRequest(why));
    // Epochs ahead of ours: this controller has fallen behind another.
    if change.leader_epoch > partition.leader_epoch || change.partition_epoch > partition.partition_epoch {
        return Err(MetadataError::NotController { leader_id: None });
    }
    if change.leader_epoch < partition.leader_epoch {
        return Err(MetadataError::FencedLeaderEpoch(format!(
            "the leader epoch is {}, not {}",
            partition.leader_epoch, change.leader_epoch
        )));
    }
    if broker_id != partition.leader {
        return invalid(format!("the leader is {}, not {broker_id}", partition.leader));
    }
    if change.partition_epoch < partition.partition_epoch {
        return Err(MetadataError::InvalidUpdateVersion(format!(
            "the partition epoch is {}, not {}",
            partition.partition_epoch, change.partition_epoch
        )));
    }
    let isr: Vec<i32> = change.new_isr.iter().map(|(id, _)| *id).collect();
    let duplicated = isr.iter().enumerate().any(|(i, r)| isr[..i].contains(r));
    if isr.is_empty() || duplicated || !isr.iter().all(|r| partition.replicas.contains(r)) {
        return invalid(format!("{isr:?} is not a valid ISR of replicas {:?}", partition.replicas));
    }
    if !isr.contains(&partition.leader) {
        return invalid(format!("the ISR {isr:?} does not hold the leader {}", partition.leader));
    }
    if change.leader_recovery_state == RECOVERING && isr.len() > 1 {
        return invalid("a recovering leader's ISR must hold only itself".into());
    }
    if partition.leader_recovery_state == RECOVERED && change.leader_recovery_state == RECOVERING {
        return invalid("the leader recovery state cannot go from RECOVERED to RECOVERING".into());
    }
    let ineligible: Vec<String> =
        change.new_isr.iter().filter_map(|(id, epoch)| ineligible(image, *id, *epoch)).collect();
    if !ineligible.is_empty() {
        return Err(MetadataError::IneligibleReplica(format!(
            "ineligible replicas in the new ISR: {}",
            ineligible.join(", ")
        )));
    }
    Ok(())
}

/// Why `broker` at `epoch` may not join an ISR, if it may not.
fn ineligible(image: &MetadataImage, broker: i32, epoch: i64) -> Option<String> {
    let why = match image.brokers.get(&broker) {
        None => "not registered".to_owned(),
        Some(b) if b.in_controlled_shutdown => "shutting down".to_owned(),
        Some(b) if b.fenced => "fenced".to_owned(),
        Some(b) if epoch != -1 && b.epoch != epoch => {
            format!("broker epoch {epoch}, registered at {}", b.epoch)
        }
        Some(_) => return None,
    };
    Some(format!("{broker} ({why})"))
}

/// ElectLeaders' election types.
pub const ELECTION_PREFERRED: i8 = 0;
pub const ELECTION_UNCLEAN: i8 = 1;

/// One topic's outcome of ElectLeaders: per partition, `Ok` when a leader
/// was elected or why not.
pub type TopicElections = (String, Vec<(i32, Result<(), MetadataError>)>);

/// ElectLeaders (KIP-460): a preferred or unclean election of each named
/// partition, or of every partition when `partitions` is `None` (then the
/// partitions that need none are left out of the answer).
pub fn elect_leaders(
    image: &MetadataImage,
    election_type: i8,
    partitions: Option<&[(String, Vec<i32>)]>,
    defaults: ElectionDefaults,
) -> Result<(Vec<MetadataRecord>, Vec<TopicElections>), MetadataError> {
    let election = match election_type {
        ELECTION_PREFERRED => Election::Preferred,
        ELECTION_UNCLEAN => Election::Unclean,
        other => return Err(MetadataError::InvalidRequest(format!("unknown election type {other}"))),
    };
    let mut records = Vec::new();
    let mut elect = |topic: &str, partition: i32| {
        let record = elect_leader(image, topic, partition, election, defaults)?;
        records.push(record.into());
        Ok(())
    };
    let outcomes = match partitions {
        Some(named) => named
            .iter()
            .map(|(topic, ids)| (topic.clone(), ids.iter().map(|p| (*p, elect(topic, *p))).collect()))
            .collect(),
        None => image
            .topics()
            .map(|t| {
                let outcomes = t.partitions.keys().map(|p| (*p, elect(&t.name, *p)));
                let needed = outcomes.filter(|(_, r)| !matches!(r, Err(MetadataError::ElectionNotNeeded)));
                (t.name.clone(), needed.collect())
            })
            .collect(),
    };
    Ok((records, outcomes))
}

/// Kafka's `electLeader`: the record of one election, or why there is none.
fn elect_leader(
    image: &MetadataImage,
    topic: &str,
    id: i32,
    election: Election,
    defaults: ElectionDefaults,
) -> Result<PartitionChangeRecord, MetadataError> {
    let topic = image.topic(topic).ok_or(MetadataError::UnknownTopic)?;
    let partition = topic.partitions.get(&id).ok_or(MetadataError::UnknownTopic)?;
    let not_needed = match election {
        Election::Preferred => partition.replicas.first() == Some(&partition.leader),
        _ => partition.leader != NO_LEADER,
    };
    if not_needed {
        return Err(MetadataError::ElectionNotNeeded);
    }
    PartitionChange::for_topic(image, topic, id, partition, defaults)
        .with_election(election)
        .build(|r| is_active(image, r))
        .ok_or_else(|| match election {
            Election::Preferred => MetadataError::PreferredLeaderNotAvailable(format!(
                "the preferred leader of {}-{id} is not in the ISR or not alive",
                topic.name
            )),
            _ => MetadataError::EligibleLeadersNotAvailable(format!(
                "no replica of {}-{id} is alive to lead",
                topic.name
            )),
        })
}
