//! The controller's decisions as pure functions: the latest image, a
//! request and the time go in; the records that carry out the request, or
//! the Kafka error that refuses it, come out. Nothing here writes.
//!
//! The rules are those of Kafka's `ReplicationControlManager` (topics,
//! partitions, leadership on fencing), `ClusterControlManager` (broker and
//! controller registration), `BrokerHeartbeatManager` (fencing, unfencing,
//! controlled shutdown, session expiry) and `ProducerIdControlManager`.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::acl::{Acl, AclFilter};
use crate::controller::{ConfigResource, MetadataError, NewTopic, ProducerIdBlock, PRODUCER_ID_BLOCK_SIZE};
use crate::image::{
    config_record, BrokerImage, ControllerImage, Endpoint, FeatureRange, MetadataImage, PartitionImage,
    TopicImage, RESOURCE_TOPIC,
};
use crate::kraft_records::{
    BrokerRegistrationChangeRecord, MetadataRecord, PartitionRecord, ProducerIdsRecord,
    RemoveAccessControlEntryRecord, RemoveTopicRecord, TopicRecord, UnregisterBrokerRecord,
};
use crate::placement::{
    validate_new_partition_assignments, validate_topic_assignments, BrokerState, RegisteredBroker,
    StripedReplicaPlacer,
};
use crate::topic_config::validate_topic_config;

mod election;
mod features;
mod reassignment;
mod security;

pub use election::{
    after_unclean_shutdown, alter_partition, balance_partition_leaders, elect_leaders, failover_election,
    lead_leaderless, move_leadership_away, Election, ElectionDefaults, IsrChange, IsrOutcome,
    PartitionChange, TopicElections, ELECTION_PREFERRED, ELECTION_UNCLEAN, MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
};
pub use features::{update_features, FeatureUpdate, UpgradeType};
pub use reassignment::{
    alter_partition_reassignments, list_partition_reassignments, OngoingReassignment, ReassignmentTarget,
    TopicReassignments,
};
pub use security::{
    alter_client_quotas, alter_scram_credentials, QuotaAlteration, ScramAlteration, UserOutcome,
};

const MAX_TOPIC_NAME_LEN: usize = 249;
/// `PartitionRecord.leader` of a partition without a leader.
pub const NO_LEADER: i32 = -1;
/// `PartitionChangeRecord.leader` when the leader does not change.
const LEADER_UNCHANGED: i32 = -2;
/// Kafka's `DirectoryId.UNASSIGNED`, `LOST` and `MIGRATING`: a replica
/// whose broker has several log dirs, none, or predates directory ids.
pub const DIRECTORY_UNASSIGNED: Uuid = Uuid::nil();
pub const DIRECTORY_LOST: Uuid = Uuid::from_u128(1);
pub const DIRECTORY_MIGRATING: Uuid = Uuid::from_u128(2);

/// Kafka's topic name rules.
pub fn validate_topic_name(name: &str) -> Result<(), MetadataError> {
    let invalid = |why: String| Err(MetadataError::InvalidTopic(why));
    if name.is_empty() {
        return invalid("topic name is empty".into());
    }
    if name == "__cluster_metadata" {
        return invalid("'__cluster_metadata' is reserved for the metadata log".into());
    }
    if name == "." || name == ".." {
        return invalid(format!("topic name cannot be '{name}'"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid(format!("topic name is longer than {MAX_TOPIC_NAME_LEN} characters"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return invalid(format!(
            "topic name '{name}' contains '{c}'; legal characters are ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// `.` and `_` collide in metric names, so Kafka refuses topics that differ only there.
fn collision_key(name: &str) -> String {
    name.replace('.', "_")
}

/// Refuses a request that would create more than `max` partitions, as
/// Kafka refuses an operation of too many records: POLICY_VIOLATION.
pub fn check_partitions_per_request(new_partitions: i64, max: i32) -> Result<(), MetadataError> {
    if new_partitions > i64::from(max) {
        return Err(MetadataError::PolicyViolation(format!(
            "the request would create {new_partitions} partitions; one request may create at most {max} \
             (controller.max.partitions.per.request)"
        )));
    }
    Ok(())
}

/// The registered brokers as placement sees them.
pub fn placement_brokers(image: &MetadataImage) -> Vec<RegisteredBroker> {
    let state = |b: &BrokerImage| match (b.in_controlled_shutdown, b.fenced) {
        (true, _) => BrokerState::ControlledShutdown,
        (false, true) => BrokerState::Fenced,
        (false, false) => BrokerState::Unfenced,
    };
    image
        .brokers
        .values()
        .map(|b| RegisteredBroker { id: b.id, rack: b.rack.clone(), state: state(b) })
        .collect()
}

/// CreateTopics for one topic: the records and the topic they make.
pub fn create_topic(
    image: &MetadataImage,
    topic: &NewTopic,
    placer: &mut StripedReplicaPlacer,
    max_partitions_per_request: i32,
) -> Result<(Vec<MetadataRecord>, TopicImage), MetadataError> {
    validate_topic_name(&topic.name)?;
    if image.topic(&topic.name).is_some() {
        return Err(MetadataError::TopicAlreadyExists(topic.name.clone()));
    }
    let key = collision_key(&topic.name);
    if let Some(other) = image.topics().find(|t| collision_key(&t.name) == key) {
        return Err(MetadataError::InvalidTopic(format!(
            "topic '{}' collides with existing topic '{}'",
            topic.name, other.name
        )));
    }
    let brokers = placement_brokers(image);
    let replicas = if topic.assignments.is_empty() {
        if topic.partitions < 1 {
            return Err(MetadataError::InvalidPartitions(
                "number of partitions must be larger than 0".into(),
            ));
        }
        check_partitions_per_request(topic.partitions.into(), max_partitions_per_request)?;
        placer.place_topic(&brokers, topic.partitions as usize, topic.replication_factor)?
    } else {
        check_partitions_per_request(topic.assignments.len() as i64, max_partitions_per_request)?;
        validate_topic_assignments(&brokers, &topic.assignments)?
    };
    for (name, value) in &topic.configs {
        validate_topic_config(name, value).map_err(MetadataError::InvalidConfig)?;
    }
    let topic_id = new_topic_id();
    let mut records: Vec<MetadataRecord> =
        vec![TopicRecord { name: topic.name.clone(), topic_id, ..Default::default() }.into()];
    records.extend(
        topic
            .configs
            .iter()
            .map(|(name, value)| config_record(RESOURCE_TOPIC, &topic.name, name, Some(value)).into()),
    );
    for (partition, replicas) in (0..).zip(replicas) {
        records.push(new_partition(image, topic_id, partition, replicas).into());
    }
    let mut preview = image.clone();
    records.iter().cloned().for_each(|r| preview.apply(r));
    let created = preview.topic(&topic.name).cloned().expect("just applied");
    Ok((records, created))
}

/// A new partition on `replicas`: its ISR is the replicas that are active,
/// led by the first of them, as Kafka builds it.
fn new_partition(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    replicas: Vec<i32>,
) -> PartitionRecord {
    let isr: Vec<i32> = replicas.iter().copied().filter(|id| is_active(image, *id)).collect();
    let directories = replicas.iter().map(|id| default_directory(image, *id)).collect();
    PartitionRecord {
        partition_id: partition,
        topic_id,
        leader: isr.first().copied().unwrap_or(NO_LEADER),
        isr,
        replicas,
        leader_epoch: 0,
        partition_epoch: 0,
        directories,
        ..Default::default()
    }
}

fn is_active(image: &MetadataImage, id: i32) -> bool {
    image.brokers.get(&id).is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
}

/// Kafka's `ClusterControlManager.defaultDir`: a broker's only log dir, or
/// "unassigned" when it has several (it then reports where each replica
/// went), or "migrating" when it registered none.
fn default_directory(image: &MetadataImage, broker: i32) -> Uuid {
    match image.brokers.get(&broker).map(|b| b.log_dirs.as_slice()) {
        Some([only]) => *only,
        Some([]) | None => DIRECTORY_MIGRATING,
        Some(_) => DIRECTORY_UNASSIGNED,
    }
}

/// CreatePartitions: grows `name` to `count` partitions; `assignments`,
/// when given, names each new partition's replicas.
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    count: i32,
    assignments: Option<&[Vec<i32>]>,
    placer: &mut StripedReplicaPlacer,
    max_partitions_per_request: i32,
) -> Result<(Vec<MetadataRecord>, TopicImage), MetadataError> {
    let topic = image.topic(name).ok_or(MetadataError::UnknownTopic)?;
    if topic.is_internal() {
        // The coordinators place each group and transactional id by a
        // hash modulo the partition count: more partitions would lose them.
        return Err(MetadataError::InvalidTopic(format!(
            "the number of partitions of internal topic '{name}' cannot be changed"
        )));
    }
    let current = topic.partitions.len() as i32;
    if count < current {
        return Err(MetadataError::InvalidPartitions(format!(
            "topic currently has {current} partitions, which is higher than the requested {count}"
        )));
    }
    if count == current {
        return Err(MetadataError::InvalidPartitions(format!("topic already has {current} partitions")));
    }
    check_partitions_per_request(i64::from(count) - i64::from(current), max_partitions_per_request)?;
    let replication_factor = topic.partitions.values().next().map_or(1, |p| p.replicas.len());
    let brokers = placement_brokers(image);
    let replicas = match assignments {
        Some(assignments) => {
            validate_new_partition_assignments(
                &brokers,
                current,
                count - current,
                replication_factor,
                assignments,
            )?;
            assignments.to_vec()
        }
        None => placer.place(&brokers, (count - current) as usize, replication_factor as i16)?,
    };
    let new: Vec<PartitionRecord> =
        (current..).zip(replicas).map(|(p, replicas)| new_partition(image, topic.id, p, replicas)).collect();
    let mut grown = topic.clone();
    grown.partitions.extend(new.iter().map(|p| (p.partition_id, PartitionImage::from(p.clone()))));
    let records = new.into_iter().map(MetadataRecord::from).collect();
    Ok((records, grown))
}

/// DeleteTopics for one topic id: the record and the topic's name.
/// Internal topics hold every group's offsets and every transaction's
/// state: they are never deleted.
pub fn delete_topic(
    image: &MetadataImage,
    topic_id: Uuid,
) -> Result<(Vec<MetadataRecord>, String), MetadataError> {
    let topic = image.topic_by_id(&topic_id).ok_or(MetadataError::UnknownTopic)?;
    if topic.is_internal() {
        return Err(MetadataError::InvalidTopic(format!(
            "internal topic '{}' cannot be deleted",
            topic.name
        )));
    }
    Ok((vec![RemoveTopicRecord { topic_id, ..Default::default() }.into()], topic.name.clone()))
}

/// The records that turn the configs of `resource` from `current` into
/// `next`: every value set is validated; only the differences are written.
pub fn alter_configs(
    resource: &ConfigResource,
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
) -> Result<Vec<MetadataRecord>, MetadataError> {
    let mut records = Vec::new();
    for (name, value) in next {
        if current.get(name) != Some(value) {
            resource.validate(name, value)?;
            records.push(resource.record(name, Some(value)).into());
        }
    }
    let removed = current.keys().filter(|name| !next.contains_key(*name));
    records.extend(removed.map(|name| resource.record(name, None).into()));
    Ok(records)
}

/// CreateAcls (Kafka's `AclControlManager.createAcls`): a record for each
/// valid binding not stored yet, and per binding `Ok` or why it is invalid.
/// A binding already stored succeeds without a new record.
pub fn create_acls(image: &MetadataImage, acls: &[Acl]) -> (Vec<MetadataRecord>, Vec<Result<(), String>>) {
    let mut stored: std::collections::HashSet<&Acl> = image.acls().values().collect();
    let mut records = Vec::new();
    let results = acls
        .iter()
        .map(|acl| {
            acl.validate()?;
            if stored.insert(acl) {
                records.push(crate::image::acl_record(Uuid::new_v4(), acl).into());
            }
            Ok(())
        })
        .collect();
    (records, results)
}

/// DeleteAcls: per filter, the bindings it removes (each binding once, by
/// the first filter that matches it) or why the filter is invalid.
pub fn delete_acls(
    image: &MetadataImage,
    filters: &[AclFilter],
) -> (Vec<MetadataRecord>, Vec<Result<Vec<Acl>, String>>) {
    let mut removed = std::collections::HashSet::new();
    let mut records = Vec::new();
    let results = filters
        .iter()
        .map(|filter| {
            filter.validate()?;
            let mut matched = Vec::new();
            for (id, acl) in image.acls() {
                if filter.matches(acl) && removed.insert(*id) {
                    records.push(RemoveAccessControlEntryRecord { id: *id, ..Default::default() }.into());
                    matched.push(acl.clone());
                }
            }
            Ok(matched)
        })
        .collect();
    (records, results)
}

/// AllocateProducerIds: the next block, for a registered broker at its
/// current epoch (Kafka's `checkBrokerEpoch`).
pub fn allocate_producer_ids(
    image: &MetadataImage,
    broker_id: i32,
    broker_epoch: i64,
) -> Result<(Vec<MetadataRecord>, ProducerIdBlock), MetadataError> {
    check_broker_epoch(image, broker_id, broker_epoch)?;
    let start = image.next_producer_id;
    let end = start.checked_add(PRODUCER_ID_BLOCK_SIZE).ok_or(MetadataError::ProducerIdsExhausted)?;
    let record = ProducerIdsRecord { broker_id, broker_epoch, next_producer_id: end, ..Default::default() };
    Ok((vec![record.into()], start..end))
}

fn check_broker_epoch(image: &MetadataImage, broker_id: i32, broker_epoch: i64) -> Result<(), MetadataError> {
    match image.brokers.get(&broker_id) {
        None => Err(MetadataError::StaleBrokerEpoch(format!(
            "no broker registration found for broker {broker_id}"
        ))),
        Some(b) if b.epoch != broker_epoch => Err(MetadataError::StaleBrokerEpoch(format!(
            "expected broker epoch {}, but got broker epoch {broker_epoch}",
            b.epoch
        ))),
        Some(_) => Ok(()),
    }
}

/// A BrokerRegistration request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub broker_id: i32,
    pub cluster_id: String,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<FeatureRange>,
    pub rack: Option<String>,
    /// The `directory.id` of each available log dir.
    pub log_dirs: Vec<Uuid>,
    /// The broker epoch its previous incarnation shut down cleanly at,
    /// -1 when it did not.
    pub previous_broker_epoch: i64,
}

/// Kafka's `ClusterControlManager.registerBroker` for a new incarnation:
/// the partition changes that must precede its registration. A broker
/// whose previous incarnation did not shut down cleanly at its registered
/// epoch may have lost acknowledged records ([`after_unclean_shutdown`]).
/// After a clean one nothing changes here: in a cluster its controlled
/// shutdown already moved its leaderships, and a single node keeps its
/// leader epochs across restarts (Kafka would move them away and back).
pub fn previous_incarnation_shutdown(
    image: &MetadataImage,
    request: &BrokerRegistration,
    defaults: ElectionDefaults,
) -> Vec<MetadataRecord> {
    let existing = image.brokers.get(&request.broker_id);
    if existing.is_some_and(|b| b.incarnation_id == request.incarnation_id) {
        return Vec::new();
    }
    let clean = existing.is_some_and(|b| b.epoch == request.previous_broker_epoch);
    if clean {
        return Vec::new();
    }
    after_unclean_shutdown(image, request.broker_id, defaults)
}

/// BrokerRegistration: a fenced registration whose epoch is `epoch`, the
/// offset its record will be written at (Kafka's broker epoch). Another
/// incarnation of a broker id whose session is still alive is refused.
pub fn register_broker(
    image: &MetadataImage,
    cluster_id: &str,
    request: &BrokerRegistration,
    heartbeats: &BrokerHeartbeats,
    now_ms: i64,
    epoch: i64,
) -> Result<Vec<MetadataRecord>, MetadataError> {
    if request.cluster_id != cluster_id {
        return Err(MetadataError::InconsistentClusterId(format!(
            "expected cluster ID {cluster_id}, but got cluster ID {}",
            request.cluster_id
        )));
    }
    check_finalized_features(image, &request.features)?;
    if let Some(existing) = image.brokers.get(&request.broker_id) {
        if existing.incarnation_id != request.incarnation_id
            && heartbeats.has_valid_session(existing.id, now_ms)
        {
            return Err(MetadataError::DuplicateBrokerRegistration(format!(
                "another broker is registered with broker id {}",
                request.broker_id
            )));
        }
    }
    let broker = BrokerImage {
        id: request.broker_id,
        epoch,
        incarnation_id: request.incarnation_id,
        endpoints: request.endpoints.clone(),
        features: request.features.clone(),
        rack: request.rack.clone(),
        fenced: true,
        in_controlled_shutdown: false,
        log_dirs: request.log_dirs.clone(),
    };
    Ok(vec![crate::image::register_broker_record(&broker).into()])
}

/// A node must support every finalized feature level: a feature it does not
/// list counts as supported at level 0 only, as in Kafka's registration.
fn check_finalized_features(image: &MetadataImage, supported: &[FeatureRange]) -> Result<(), MetadataError> {
    for (name, level) in &image.features {
        let (min, max) = supported.iter().find(|f| f.name == *name).map_or((0, 0), |f| (f.min, f.max));
        if !(min..=max).contains(level) {
            return Err(MetadataError::UnsupportedVersion(format!(
                "Unable to register because the broker does not support finalized version {level} of {name}. \
                 The broker wants a version between {min} and {max}, inclusive."
            )));
        }
    }
    Ok(())
}

/// A BrokerHeartbeat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerHeartbeat {
    pub broker_id: i32,
    pub broker_epoch: i64,
    /// The highest metadata offset the broker has applied.
    pub current_metadata_offset: i64,
    pub want_fence: bool,
    pub want_shut_down: bool,
}

/// What a heartbeat answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// BrokerHeartbeat: records the contact and moves the broker between
/// fenced, unfenced and controlled shutdown as Kafka's
/// `BrokerHeartbeatManager.calculateNextBrokerState` does. A fenced broker
/// is unfenced once it has applied its own registration record.
pub fn broker_heartbeat(
    image: &MetadataImage,
    request: &BrokerHeartbeat,
    heartbeats: &mut BrokerHeartbeats,
    now_ms: i64,
    defaults: ElectionDefaults,
) -> Result<(Vec<MetadataRecord>, HeartbeatReply), MetadataError> {
    let broker = registered(image, request.broker_id)?;
    if broker.epoch != request.broker_epoch {
        return Err(MetadataError::StaleBrokerEpoch(format!(
            "expected broker epoch {}, but got broker epoch {}",
            broker.epoch, request.broker_epoch
        )));
    }
    heartbeats.touch(broker.id, now_ms);
    heartbeats.report_offset(broker.id, request.current_metadata_offset);
    let is_caught_up = request.current_metadata_offset >= broker.epoch;
    let reply = |is_fenced, should_shut_down| HeartbeatReply { is_caught_up, is_fenced, should_shut_down };
    if broker.fenced {
        return Ok(match (request.want_shut_down, request.want_fence, is_caught_up) {
            (true, _, _) => (Vec::new(), reply(true, true)),
            (false, false, true) => (unfence(image, broker, defaults), reply(false, false)),
            _ => (Vec::new(), reply(true, false)),
        });
    }
    if request.want_fence {
        return Ok((fence(image, broker, defaults), reply(true, false)));
    }
    if !(request.want_shut_down || broker.in_controlled_shutdown) {
        return Ok((Vec::new(), reply(false, false)));
    }
    if !broker.in_controlled_shutdown {
        let change = BrokerRegistrationChangeRecord {
            broker_id: broker.id,
            broker_epoch: broker.epoch,
            in_controlled_shutdown: 1,
            ..Default::default()
        };
        let mut records: Vec<MetadataRecord> = vec![change.into()];
        records.extend(move_leadership_away(image, broker.id, defaults));
        return Ok((records, reply(false, false)));
    }
    // As Kafka's: it may stop once it leads nothing and every active
    // broker has seen the records that moved its leaderships; it is
    // fenced as it goes.
    let seen =
        heartbeats.shutdown_offset(broker.id).is_some_and(|o| heartbeats.lowest_active_offset(image) >= o);
    if !seen || leads_any(image, broker.id) {
        return Ok((Vec::new(), reply(false, false)));
    }
    Ok((fence(image, broker, defaults), reply(true, true)))
}

fn leads_any(image: &MetadataImage, broker: i32) -> bool {
    image.topics().any(|t| t.partitions.values().any(|p| p.leader == broker))
}

fn registered(image: &MetadataImage, broker_id: i32) -> Result<&BrokerImage, MetadataError> {
    image.brokers.get(&broker_id).ok_or(MetadataError::BrokerIdNotRegistered(broker_id))
}

/// The records that fence `broker`: its leaderships move to another ISR
/// member (or to none) and it leaves every ISR, then its registration is
/// marked fenced.
pub fn fence(image: &MetadataImage, broker: &BrokerImage, defaults: ElectionDefaults) -> Vec<MetadataRecord> {
    let mut records = move_leadership_away(image, broker.id, defaults);
    let change = BrokerRegistrationChangeRecord {
        broker_id: broker.id,
        broker_epoch: broker.epoch,
        fenced: 1,
        ..Default::default()
    };
    records.push(change.into());
    records
}

/// The records that unfence `broker`: its registration, then leaders for
/// the leaderless partitions it (or anyone) can now lead.
fn unfence(image: &MetadataImage, broker: &BrokerImage, defaults: ElectionDefaults) -> Vec<MetadataRecord> {
    let change = BrokerRegistrationChangeRecord {
        broker_id: broker.id,
        broker_epoch: broker.epoch,
        fenced: -1,
        ..Default::default()
    };
    let mut records: Vec<MetadataRecord> = vec![change.into()];
    records.extend(lead_leaderless(image, broker.id, defaults));
    records
}

/// Fences every unfenced broker whose session has expired, as Kafka's
/// controller does from its periodic maintenance.
pub fn fence_expired_brokers(
    image: &MetadataImage,
    heartbeats: &mut BrokerHeartbeats,
    now_ms: i64,
    defaults: ElectionDefaults,
) -> Vec<MetadataRecord> {
    let expired: Vec<i32> = image
        .brokers
        .values()
        .filter(|b| !b.fenced && heartbeats.session_expired(b.id, now_ms))
        .map(|b| b.id)
        .collect();
    if expired.is_empty() {
        return Vec::new();
    }
    // Each fencing is decided on the image the previous ones left, so a
    // leadership never moves to a broker fenced in the same batch.
    let mut working = image.clone();
    let mut records = Vec::new();
    for id in expired {
        tracing::info!(broker = id, "fencing a broker whose session expired");
        let broker = working.brokers[&id].clone();
        let fenced = fence(&working, &broker, defaults);
        fenced.iter().cloned().for_each(|r| working.apply(r));
        records.extend(fenced);
    }
    records
}

/// UnregisterBroker: its leaderships move away, then its registration goes.
pub fn unregister_broker(
    image: &MetadataImage,
    broker_id: i32,
    defaults: ElectionDefaults,
) -> Result<Vec<MetadataRecord>, MetadataError> {
    let broker = registered(image, broker_id)?;
    let mut records = move_leadership_away(image, broker_id, defaults);
    let record = UnregisterBrokerRecord { broker_id, broker_epoch: broker.epoch, ..Default::default() };
    records.push(record.into());
    Ok(records)
}

/// ControllerRegistration: the controller's endpoints and features.
pub fn register_controller(controller: &ControllerImage) -> Vec<MetadataRecord> {
    vec![crate::image::register_controller_record(controller).into()]
}

/// When each broker was last heard from, kept in the controller's memory
/// and never in the log, as Kafka's `BrokerHeartbeatManager` keeps it: a
/// new active controller starts every session afresh.
#[derive(Debug, Clone)]
pub struct BrokerHeartbeats {
    session_timeout_ms: i64,
    last_contact_ms: HashMap<i32, i64>,
    /// The metadata offset each broker last said it had applied.
    metadata_offsets: HashMap<i32, i64>,
    /// Per broker in controlled shutdown, the offset every active broker
    /// must have applied before it may stop.
    shutdown_offsets: HashMap<i32, i64>,
}

impl BrokerHeartbeats {
    /// `broker.session.timeout.ms`
    pub fn new(session_timeout_ms: i64) -> Self {
        Self {
            session_timeout_ms,
            last_contact_ms: HashMap::new(),
            metadata_offsets: HashMap::new(),
            shutdown_offsets: HashMap::new(),
        }
    }

    fn report_offset(&mut self, broker: i32, offset: i64) {
        self.metadata_offsets.insert(broker, offset);
    }

    /// Notes the offset of the records that put `broker` in controlled
    /// shutdown, unless one is noted already.
    pub fn note_shutdown_offset(&mut self, broker: i32, offset: i64) {
        self.shutdown_offsets.entry(broker).or_insert(offset);
    }

    fn shutdown_offset(&self, broker: i32) -> Option<i64> {
        self.shutdown_offsets.get(&broker).copied()
    }

    /// The least metadata offset the unfenced brokers have applied; one not
    /// heard from yet holds it at -1.
    fn lowest_active_offset(&self, image: &MetadataImage) -> i64 {
        let active = image.brokers.values().filter(|b| !b.fenced);
        active.map(|b| self.metadata_offsets.get(&b.id).copied().unwrap_or(-1)).min().unwrap_or(i64::MAX)
    }

    /// Forgets what a previous registration of `broker` left behind.
    pub fn registered(&mut self, broker: i32) {
        self.shutdown_offsets.remove(&broker);
        self.metadata_offsets.remove(&broker);
    }

    pub fn touch(&mut self, broker: i32, now_ms: i64) {
        self.last_contact_ms.insert(broker, now_ms);
    }

    pub fn remove(&mut self, broker: i32) {
        self.registered(broker);
        self.last_contact_ms.remove(&broker);
    }

    /// Whether `broker` was heard from within its session timeout.
    pub fn has_valid_session(&self, broker: i32, now_ms: i64) -> bool {
        self.last_contact_ms.get(&broker).is_some_and(|last| now_ms - last <= self.session_timeout_ms)
    }

    /// Whether `broker`'s session has run out. A broker this controller
    /// has not heard from yet gets a whole session from now.
    fn session_expired(&mut self, broker: i32, now_ms: i64) -> bool {
        let last = *self.last_contact_ms.entry(broker).or_insert(now_ms);
        now_ms - last > self.session_timeout_ms
    }
}

/// A topic id as Kafka makes them: random, never the zero id, and never one
/// whose base64 form starts with '-'.
pub fn new_topic_id() -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if !id.is_nil() && id.as_bytes()[0] & 0xfc != 0xf8 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests;
