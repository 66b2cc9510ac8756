//! The metadata image: the state the metadata log's KIP-631 records replay to.
//!
//! An image is immutable once published: readers hold an `Arc` of it and
//! never block the loader, which builds the next image by applying records
//! to a copy. [`snapshot_records`] writes an image back as the records that
//! rebuild it, which is what a metadata snapshot holds.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::acl::{Acl, AclIndex};
use crate::kraft_records::{
    AccessControlEntryRecord, BrokerEndpoint, BrokerRegistrationChangeRecord, ConfigRecord,
    ControllerEndpoint, FeatureLevelRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord,
    ProducerIdsRecord, RegisterBrokerRecord, RegisterControllerRecord, TopicRecord,
};

mod security;

pub use security::{
    client_quota_record, scram_credential_record, QuotaEntity, ScramCredentialImage, ENTITY_CLIENT_ID,
    ENTITY_IP, ENTITY_USER,
};

/// Kafka's `ConfigResource.Type` ids of the resources Strom keeps configs for.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// Kafka's `ConfigResource.Type.GROUP`.
pub const RESOURCE_GROUP: i8 = 32;

/// `PartitionChangeRecord.leader` when the leader did not change.
const LEADER_UNCHANGED: i32 = -2;

static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

/// One partition's assignment and leadership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionImage {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The leading broker, or -1 when the partition has none.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Rises with every change to the partition.
    pub partition_epoch: i32,
    /// The log directory (its `directory.id`) of each replica, in replica order.
    pub directories: Vec<Uuid>,
    /// Kafka's `LeaderRecoveryState`: 0 recovered, 1 while a leader chosen
    /// by an unclean election recovers.
    pub leader_recovery_state: i8,
    /// Eligible leader replicas (KIP-966): replicas out of the ISR since it
    /// fell below min ISR, whose logs still hold every committed record.
    pub elr: Vec<i32>,
    /// Replicas that were eligible or in the ISR when the partition lost
    /// them all; with the ISR and ELR empty, the last known leader.
    pub last_known_elr: Vec<i32>,
    /// During a reassignment (KIP-455), the replicas being added (already
    /// in `replicas`) and those to leave once the added ones are in sync.
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

impl From<PartitionRecord> for PartitionImage {
    fn from(r: PartitionRecord) -> Self {
        Self {
            replicas: r.replicas,
            isr: r.isr,
            leader: r.leader,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            directories: r.directories,
            leader_recovery_state: r.leader_recovery_state,
            elr: r.eligible_leader_replicas.unwrap_or_default(),
            last_known_elr: r.last_known_elr.unwrap_or_default(),
            adding_replicas: r.adding_replicas,
            removing_replicas: r.removing_replicas,
        }
    }
}

impl PartitionImage {
    /// Whether a reassignment (KIP-455) is under way.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// As Kafka's `PartitionRegistration.merge`: a new leader bumps the
    /// leader epoch, and every change bumps the partition epoch.
    pub fn merge(&mut self, r: PartitionChangeRecord) {
        if let Some(isr) = r.isr {
            self.isr = isr;
        }
        if let Some(replicas) = r.replicas {
            self.replicas = replicas;
        }
        if let Some(directories) = r.directories {
            self.directories = directories;
        }
        if let Some(adding) = r.adding_replicas {
            self.adding_replicas = adding;
        }
        if let Some(removing) = r.removing_replicas {
            self.removing_replicas = removing;
        }
        if r.leader_recovery_state >= 0 {
            self.leader_recovery_state = r.leader_recovery_state;
        }
        if let Some(elr) = r.eligible_leader_replicas {
            self.elr = elr;
        }
        if let Some(last_known_elr) = r.last_known_elr {
            self.last_known_elr = last_known_elr;
        }
        if r.leader != LEADER_UNCHANGED {
            self.leader = r.leader;
            self.leader_epoch += 1;
        }
        self.partition_epoch += 1;
    }
}

/// A topic, its partitions and its config overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionImage>,
    pub configs: BTreeMap<String, String>,
}

impl TopicImage {
    /// Kafka marks its own bookkeeping topics internal.
    pub fn is_internal(&self) -> bool {
        matches!(self.name.as_str(), "__consumer_offsets" | "__transaction_state")
    }
}

/// A listener a broker or controller registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Kafka's `SecurityProtocol` id (0 PLAINTEXT).
    pub security_protocol: i16,
}

/// A supported feature range a node registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureRange {
    pub name: String,
    pub min: i16,
    pub max: i16,
}

/// A registered broker (Kafka's `BrokerRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerImage {
    pub id: i32,
    /// The offset its registration was written at.
    pub epoch: i64,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<FeatureRange>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// The `directory.id` of each of its available log dirs.
    pub log_dirs: Vec<Uuid>,
}

impl BrokerImage {
    /// The endpoint of listener `name` (listener names ignore case), if the
    /// broker registered one.
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name.eq_ignore_ascii_case(name))
    }
}

/// A registered controller (Kafka's `ControllerRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerImage {
    pub id: i32,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<FeatureRange>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataImage {
    /// Finalized feature levels, `metadata.version` among them.
    pub features: BTreeMap<String, i16>,
    pub brokers: BTreeMap<i32, BrokerImage>,
    pub controllers: BTreeMap<i32, ControllerImage>,
    topics: BTreeMap<String, TopicImage>,
    names_by_id: HashMap<Uuid, String>,
    /// Dynamic broker configs by resource name: a node id, or "" for the
    /// cluster-wide defaults.
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Group configs (KIP-848) by group id.
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Offset of the last record applied; -1 before any.
    pub last_offset: i64,
    /// The first producer id no broker has been given yet.
    pub next_producer_id: i64,
    /// Access control entries by their ids.
    acls: BTreeMap<Uuid, Acl>,
    /// The same entries, indexed by the resources they cover.
    acl_index: AclIndex,
    /// SCRAM credentials by user and mechanism id (KIP-554).
    scram: BTreeMap<String, BTreeMap<i8, ScramCredentialImage>>,
    /// Client and IP quotas by entity, as `f64` bits so the image stays `Eq`.
    client_quotas: BTreeMap<QuotaEntity, BTreeMap<String, u64>>,
}

impl MetadataImage {
    /// The image of an empty log.
    pub fn empty() -> Self {
        Self { last_offset: -1, ..Self::default() }
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicImage> {
        self.names_by_id.get(id).and_then(|name| self.topics.get(name))
    }

    /// The dynamic configs of a broker resource: `"1"` for node 1, `""` for
    /// the cluster-wide defaults.
    pub fn broker_configs(&self, resource_name: &str) -> &BTreeMap<String, String> {
        self.broker_configs.get(resource_name).unwrap_or(&NO_CONFIGS)
    }

    /// The config overrides of group `group_id`.
    pub fn group_configs(&self, group_id: &str) -> &BTreeMap<String, String> {
        self.group_configs.get(group_id).unwrap_or(&NO_CONFIGS)
    }

    /// The access control entries, with their ids.
    pub fn acls(&self) -> &BTreeMap<Uuid, Acl> {
        &self.acls
    }

    /// The access control entries, indexed for authorization checks.
    pub fn acl_index(&self) -> &AclIndex {
        &self.acl_index
    }

    /// Whether the controller keeps eligible leader replicas (KIP-966): the
    /// `eligible.leader.replicas.version` feature is finalized at 1 or above.
    pub fn elr_enabled(&self) -> bool {
        self.features.get(crate::controller::ELIGIBLE_LEADER_REPLICAS_FEATURE).is_some_and(|l| *l >= 1)
    }

    /// The finalized `metadata.version` feature level, 0 before it is written.
    pub fn metadata_version(&self) -> i16 {
        self.features.get(crate::controller::METADATA_VERSION_FEATURE).copied().unwrap_or(0)
    }

    /// Brokers that clients may use: registered, unfenced and not shutting down.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerImage> {
        self.brokers.values().filter(|b| !b.fenced && !b.in_controlled_shutdown)
    }

    /// Applies one record. Records that refer to unknown topics or brokers
    /// are ignored with a warning: they can only follow a removal in the
    /// same log.
    pub fn apply(&mut self, record: MetadataRecord) {
        match record {
            MetadataRecord::RegisterBroker(r) => self.apply_register_broker(r),
            MetadataRecord::UnregisterBroker(r) => {
                if self.brokers.get(&r.broker_id).is_some_and(|b| b.epoch == r.broker_epoch) {
                    self.brokers.remove(&r.broker_id);
                }
            }
            MetadataRecord::FenceBroker(r) => self.change_broker(r.id, r.epoch, 1, 0),
            MetadataRecord::UnfenceBroker(r) => self.change_broker(r.id, r.epoch, -1, 0),
            MetadataRecord::BrokerRegistrationChange(r) => self.apply_broker_change(r),
            MetadataRecord::RegisterController(r) => self.apply_register_controller(r),
            MetadataRecord::Topic(r) => self.apply_topic(r),
            MetadataRecord::Partition(r) => self.apply_partition(r),
            MetadataRecord::PartitionChange(r) => self.apply_partition_change(r),
            MetadataRecord::ClearElr(r) => self.apply_clear_elr(&r.topic_name),
            MetadataRecord::Config(r) => self.apply_config(r),
            MetadataRecord::RemoveTopic(r) => {
                if let Some(name) = self.names_by_id.remove(&r.topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::ProducerIds(r) => {
                // Ids only ever move forward, whatever the log holds.
                self.next_producer_id = self.next_producer_id.max(r.next_producer_id);
            }
            MetadataRecord::FeatureLevel(r) => {
                match r.feature_level {
                    0 => self.features.remove(&r.name),
                    level => self.features.insert(r.name, level),
                };
            }
            MetadataRecord::AccessControlEntry(r) => {
                let id = r.id;
                let acl = Acl::from(r);
                self.acl_index.insert(acl.clone());
                if let Some(replaced) = self.acls.insert(id, acl) {
                    self.acl_index.remove(&replaced);
                }
            }
            MetadataRecord::RemoveAccessControlEntry(r) => {
                if let Some(removed) = self.acls.remove(&r.id) {
                    self.acl_index.remove(&removed);
                }
            }
            MetadataRecord::UserScramCredential(r) => self.apply_scram_credential(r),
            MetadataRecord::RemoveUserScramCredential(r) => self.apply_remove_scram_credential(r),
            MetadataRecord::ClientQuota(r) => self.apply_client_quota(r),
            // Records of features Strom does not have yet (delegation
            // tokens) and markers change nothing here.
            other => tracing::debug!(record = other.name(), "metadata record without effect on the image"),
        }
    }

    fn apply_register_broker(&mut self, r: RegisterBrokerRecord) {
        let endpoints = r.end_points.into_iter().map(Endpoint::from).collect();
        let features = r
            .features
            .into_iter()
            .map(|f| FeatureRange {
                name: f.name,
                min: f.min_supported_version,
                max: f.max_supported_version,
            })
            .collect();
        let broker = BrokerImage {
            id: r.broker_id,
            epoch: r.broker_epoch,
            incarnation_id: r.incarnation_id,
            endpoints,
            features,
            rack: r.rack,
            fenced: r.fenced,
            in_controlled_shutdown: r.in_controlled_shutdown,
            log_dirs: r.log_dirs,
        };
        self.brokers.insert(broker.id, broker);
    }

    fn apply_broker_change(&mut self, r: BrokerRegistrationChangeRecord) {
        self.change_broker(r.broker_id, r.broker_epoch, r.fenced, r.in_controlled_shutdown);
        if !r.log_dirs.is_empty() {
            if let Some(broker) = self.broker_mut(r.broker_id, r.broker_epoch) {
                broker.log_dirs = r.log_dirs;
            }
        }
    }

    /// `fenced`: -1 unfenced, 1 fenced, 0 unchanged; `shutdown`: 1 entered
    /// controlled shutdown, 0 unchanged (as BrokerRegistrationChangeRecord).
    fn change_broker(&mut self, id: i32, epoch: i64, fenced: i8, shutdown: i8) {
        let Some(broker) = self.broker_mut(id, epoch) else { return };
        match fenced {
            -1 => broker.fenced = false,
            1 => broker.fenced = true,
            _ => {}
        }
        if shutdown == 1 {
            broker.in_controlled_shutdown = true;
        }
    }

    fn broker_mut(&mut self, id: i32, epoch: i64) -> Option<&mut BrokerImage> {
        let broker = self.brokers.get_mut(&id).filter(|b| b.epoch == epoch);
        if broker.is_none() {
            tracing::warn!(broker = id, epoch, "metadata record for an unknown broker registration ignored");
        }
        broker
    }

    fn apply_register_controller(&mut self, r: RegisterControllerRecord) {
        let endpoints = r.end_points.into_iter().map(Endpoint::from).collect();
        let features = r
            .features
            .into_iter()
            .map(|f| FeatureRange {
                name: f.name,
                min: f.min_supported_version,
                max: f.max_supported_version,
            })
            .collect();
        let controller =
            ControllerImage { id: r.controller_id, incarnation_id: r.incarnation_id, endpoints, features };
        self.controllers.insert(controller.id, controller);
    }

    fn apply_topic(&mut self, r: TopicRecord) {
        self.names_by_id.insert(r.topic_id, r.name.clone());
        let topic = TopicImage {
            name: r.name.clone(),
            id: r.topic_id,
            partitions: BTreeMap::new(),
            configs: BTreeMap::new(),
        };
        self.topics.insert(r.name, topic);
    }

    fn apply_partition(&mut self, r: PartitionRecord) {
        let Some(topic) = self.topic_mut(&r.topic_id) else { return };
        topic.partitions.insert(r.partition_id, PartitionImage::from(r));
    }

    fn apply_partition_change(&mut self, r: PartitionChangeRecord) {
        let Some(topic) = self.topic_mut(&r.topic_id) else { return };
        let Some(partition) = topic.partitions.get_mut(&r.partition_id) else {
            tracing::warn!(topic_id = %r.topic_id, partition = r.partition_id, "change of an unknown partition ignored");
            return;
        };
        partition.merge(r);
    }

    /// Empties the ELR and last known ELR of one topic's partitions, or of
    /// every topic's when `topic` is empty, each as a partition change.
    fn apply_clear_elr(&mut self, topic: &str) {
        for t in self.topics.values_mut().filter(|t| topic.is_empty() || t.name == topic) {
            for (id, p) in
                t.partitions.iter_mut().filter(|(_, p)| !p.elr.is_empty() || !p.last_known_elr.is_empty())
            {
                p.merge(PartitionChangeRecord {
                    topic_id: t.id,
                    partition_id: *id,
                    eligible_leader_replicas: Some(Vec::new()),
                    last_known_elr: Some(Vec::new()),
                    ..Default::default()
                });
            }
        }
    }

    fn apply_config(&mut self, r: ConfigRecord) {
        let configs = match r.resource_type {
            RESOURCE_TOPIC => match self.topics.get_mut(&r.resource_name) {
                Some(topic) => &mut topic.configs,
                None => {
                    tracing::warn!(topic = %r.resource_name, "config record for an unknown topic ignored");
                    return;
                }
            },
            RESOURCE_BROKER => self.broker_configs.entry(r.resource_name.clone()).or_default(),
            RESOURCE_GROUP => self.group_configs.entry(r.resource_name.clone()).or_default(),
            other => {
                tracing::warn!(resource_type = other, "config record for an unknown resource type ignored");
                return;
            }
        };
        match r.value {
            Some(value) => configs.insert(r.name, value),
            None => configs.remove(&r.name),
        };
        if configs.is_empty() {
            match r.resource_type {
                RESOURCE_BROKER => drop(self.broker_configs.remove(&r.resource_name)),
                RESOURCE_GROUP => drop(self.group_configs.remove(&r.resource_name)),
                _ => {}
            }
        }
    }

    fn topic_mut(&mut self, id: &Uuid) -> Option<&mut TopicImage> {
        let name = self.names_by_id.get(id);
        if name.is_none() {
            tracing::warn!(topic_id = %id, "metadata record for an unknown topic ignored");
        }
        self.topics.get_mut(name?)
    }
}

impl From<BrokerEndpoint> for Endpoint {
    fn from(e: BrokerEndpoint) -> Self {
        Self { name: e.name, host: e.host, port: e.port, security_protocol: e.security_protocol }
    }
}

impl From<ControllerEndpoint> for Endpoint {
    fn from(e: ControllerEndpoint) -> Self {
        Self { name: e.name, host: e.host, port: e.port, security_protocol: e.security_protocol }
    }
}

impl Endpoint {
    pub fn to_broker_endpoint(&self) -> BrokerEndpoint {
        BrokerEndpoint {
            name: self.name.clone(),
            host: self.host.clone(),
            port: self.port,
            security_protocol: self.security_protocol,
            ..Default::default()
        }
    }

    pub fn to_controller_endpoint(&self) -> ControllerEndpoint {
        ControllerEndpoint {
            name: self.name.clone(),
            host: self.host.clone(),
            port: self.port,
            security_protocol: self.security_protocol,
            ..Default::default()
        }
    }
}

/// The records that rebuild `image` from nothing: a snapshot's content, in
/// the order Kafka's image writers use (features first, so a reader knows
/// the metadata version before anything else).
pub fn snapshot_records(image: &MetadataImage) -> Vec<MetadataRecord> {
    let mut records: Vec<MetadataRecord> = Vec::new();
    records.extend(image.features.iter().map(|(name, level)| {
        FeatureLevelRecord { name: name.clone(), feature_level: *level, ..Default::default() }.into()
    }));
    records.extend(image.brokers.values().map(|b| register_broker_record(b).into()));
    records.extend(image.controllers.values().map(|c| register_controller_record(c).into()));
    for topic in image.topics.values() {
        records
            .push(TopicRecord { name: topic.name.clone(), topic_id: topic.id, ..Default::default() }.into());
        records.extend(topic.partitions.iter().map(|(id, p)| partition_record(topic.id, *id, p).into()));
        records.extend(
            topic
                .configs
                .iter()
                .map(|(name, value)| config_record(RESOURCE_TOPIC, &topic.name, name, Some(value)).into()),
        );
    }
    for (kind, by_name) in [(RESOURCE_BROKER, &image.broker_configs), (RESOURCE_GROUP, &image.group_configs)]
    {
        for (resource, configs) in by_name {
            records.extend(
                configs.iter().map(|(name, value)| config_record(kind, resource, name, Some(value)).into()),
            );
        }
    }
    records.extend(image.acls.iter().map(|(id, acl)| acl_record(*id, acl).into()));
    records.extend(security::snapshot_records(image));
    if image.next_producer_id > 0 {
        let record = ProducerIdsRecord {
            broker_id: -1,
            broker_epoch: -1,
            next_producer_id: image.next_producer_id,
            ..Default::default()
        };
        records.push(record.into());
    }
    records
}

/// The RegisterBrokerRecord that registers `broker` as it stands.
pub fn register_broker_record(broker: &BrokerImage) -> RegisterBrokerRecord {
    RegisterBrokerRecord {
        broker_id: broker.id,
        incarnation_id: broker.incarnation_id,
        broker_epoch: broker.epoch,
        end_points: broker.endpoints.iter().map(Endpoint::to_broker_endpoint).collect(),
        features: broker
            .features
            .iter()
            .map(|f| crate::kraft_records::BrokerFeature {
                name: f.name.clone(),
                min_supported_version: f.min,
                max_supported_version: f.max,
                ..Default::default()
            })
            .collect(),
        rack: broker.rack.clone(),
        fenced: broker.fenced,
        in_controlled_shutdown: broker.in_controlled_shutdown,
        log_dirs: broker.log_dirs.clone(),
        ..Default::default()
    }
}

pub(crate) fn register_controller_record(controller: &ControllerImage) -> RegisterControllerRecord {
    RegisterControllerRecord {
        controller_id: controller.id,
        incarnation_id: controller.incarnation_id,
        end_points: controller.endpoints.iter().map(Endpoint::to_controller_endpoint).collect(),
        features: controller
            .features
            .iter()
            .map(|f| crate::kraft_records::ControllerFeature {
                name: f.name.clone(),
                min_supported_version: f.min,
                max_supported_version: f.max,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The PartitionRecord of partition `id` as it stands.
pub fn partition_record(topic_id: Uuid, id: i32, p: &PartitionImage) -> PartitionRecord {
    PartitionRecord {
        partition_id: id,
        topic_id,
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
        leader: p.leader,
        leader_recovery_state: p.leader_recovery_state,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        directories: p.directories.clone(),
        eligible_leader_replicas: (!p.elr.is_empty()).then(|| p.elr.clone()),
        last_known_elr: (!p.last_known_elr.is_empty()).then(|| p.last_known_elr.clone()),
        adding_replicas: p.adding_replicas.clone(),
        removing_replicas: p.removing_replicas.clone(),
        ..Default::default()
    }
}

impl From<AccessControlEntryRecord> for Acl {
    fn from(r: AccessControlEntryRecord) -> Self {
        Self {
            resource_type: r.resource_type,
            resource_name: r.resource_name,
            pattern_type: r.pattern_type,
            principal: r.principal,
            host: r.host,
            operation: r.operation,
            permission: r.permission_type,
        }
    }
}

/// The record that stores `acl` under `id`.
pub fn acl_record(id: Uuid, acl: &Acl) -> AccessControlEntryRecord {
    AccessControlEntryRecord {
        id,
        resource_type: acl.resource_type,
        resource_name: acl.resource_name.clone(),
        pattern_type: acl.pattern_type,
        principal: acl.principal.clone(),
        host: acl.host.clone(),
        operation: acl.operation,
        permission_type: acl.permission,
        ..Default::default()
    }
}

/// A ConfigRecord that sets (`Some`) or removes (`None`) one config.
pub fn config_record(
    resource_type: i8,
    resource_name: &str,
    name: &str,
    value: Option<&str>,
) -> ConfigRecord {
    ConfigRecord {
        resource_type,
        resource_name: resource_name.to_owned(),
        name: name.to_owned(),
        value: value.map(str::to_owned),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
