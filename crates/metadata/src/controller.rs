//! The controller: the only writer of the metadata log.
//!
//! Every change is validated against the current image, written to the
//! metadata log (`<dir>/__cluster_metadata-0`, RecordBatch v2, fsync'd before
//! the change is visible) and then applied to a new image. On a single node
//! the log has one voter; a Raft quorum will replicate the same records.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use bytes::Bytes;
use strom_storage::{Context, Log, LogConfig};
use uuid::Uuid;

use crate::image::{MetadataImage, TopicImage, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::records::MetadataRecord;
use crate::topic_config::{validate_dynamic_broker_config, validate_topic_config};

/// The metadata log's partition directory, as Kafka names it.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";
/// The leader epoch the metadata log's batches carry. A single node is
/// its own quorum and holds no elections, so the epoch never rises.
pub const METADATA_LEADER_EPOCH: i32 = 0;
const MAX_TOPIC_NAME_LEN: usize = 249;
/// The most partitions one request may create unless configured otherwise
/// (`controller.max.partitions.per.request`): Kafka's bound on the records of
/// one user operation, so a hostile count (2^31 - 1) is refused instead of
/// exhausting memory and descriptors.
pub const DEFAULT_MAX_PARTITIONS_PER_REQUEST: i32 = 10_000;

/// Why a metadata change was refused; each maps to one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("topic '{0}' already exists")]
    TopicAlreadyExists(String),
    #[error("unknown topic or partition")]
    UnknownTopic,
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("{0}")]
    PolicyViolation(String),
    #[error("all producer ids have been handed out")]
    ProducerIdsExhausted,
    /// A record of the metadata log that this version cannot apply: replay
    /// stops there, since an image that skipped it would silently differ
    /// from every other node's.
    #[error("metadata log record at offset {offset} cannot be replayed: {reason}")]
    UnreadableRecord { offset: i64, reason: crate::records::DecodeError },
    /// Storage failed: the metadata log's or a new partition's; the message
    /// names the operation and the path.
    #[error(transparent)]
    Storage(#[from] strom_storage::StorageError),
}

/// Producer ids a broker may hand out: `[start, end)`.
pub type ProducerIdBlock = std::ops::Range<i64>;

/// Ids per block, as in Kafka.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// A topic to create, as asked by CreateTopics or auto-creation.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// A resource whose configs live in the metadata log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// A topic's overrides, by topic name.
    Topic(String),
    /// Dynamic broker configs: a node id, or "" for the cluster-wide default.
    Broker(String),
}

impl ConfigResource {
    fn record(&self, name: &str, value: Option<&str>) -> MetadataRecord {
        let (resource_type, resource_name) = match self {
            Self::Topic(topic) => (RESOURCE_TOPIC, topic),
            Self::Broker(broker) => (RESOURCE_BROKER, broker),
        };
        MetadataRecord::Config {
            resource_type,
            resource_name: resource_name.clone(),
            name: name.to_owned(),
            value: value.map(str::to_owned),
        }
    }

    fn validate(&self, name: &str, value: &str) -> Result<(), MetadataError> {
        match self {
            Self::Topic(_) => validate_topic_config(name, value),
            Self::Broker(_) => validate_dynamic_broker_config(name, value),
        }
        .map_err(MetadataError::InvalidConfig)
    }
}

pub struct Controller {
    node_id: i32,
    max_partitions_per_request: i32,
    log: Mutex<Log>,
    image: RwLock<Arc<MetadataImage>>,
}

/// The partition logs of this node. The controller has them created before
/// its records name the partitions and discards them if the records are not
/// written, so the metadata never names a partition without a log and a
/// crash in between leaves only logs no topic owns (removed at start).
pub trait PartitionLogs {
    /// Refuses `count` new logs if this node has no room for them.
    fn check_room(&self, count: usize) -> Result<(), MetadataError>;
    /// Creates the logs of `partitions` of `topic`: all of them, or none.
    fn create(&self, topic: &TopicImage, partitions: Range<i32>) -> Result<(), MetadataError>;
    /// Removes the logs `create` made for records that were then not written.
    fn discard(&self, topic: &TopicImage, partitions: Range<i32>);
}

/// For callers that keep no logs (tests, validation).
pub struct NoLogs;

impl PartitionLogs for NoLogs {
    fn check_room(&self, _: usize) -> Result<(), MetadataError> {
        Ok(())
    }

    fn create(&self, _: &TopicImage, _: Range<i32>) -> Result<(), MetadataError> {
        Ok(())
    }

    fn discard(&self, _: &TopicImage, _: Range<i32>) {}
}

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

impl Controller {
    /// Opens (or creates) the metadata log in `dir` and replays it.
    pub fn open(dir: &Path, node_id: i32) -> Result<Self, MetadataError> {
        Self::open_in_cluster(dir, node_id, None)
    }

    /// [`Self::open`], a new log recording `cluster_id` (the one the log
    /// dirs' `meta.properties` name) rather than a random one. A log that
    /// records an id already keeps it: the caller compares.
    pub fn open_in_cluster(
        dir: &Path,
        node_id: i32,
        cluster_id: Option<&str>,
    ) -> Result<Self, MetadataError> {
        let now = strom_storage::now_ms();
        let path = dir.join(METADATA_LOG_DIR);
        let (log, _) =
            Log::open(&path, LogConfig::default(), 0, 0, false, now).at("open metadata log", &path)?;
        let mut image = MetadataImage::default();
        replay(&log, &mut image)?;
        let controller = Self {
            node_id,
            max_partitions_per_request: DEFAULT_MAX_PARTITIONS_PER_REQUEST,
            log: Mutex::new(log),
            image: RwLock::new(Arc::new(image)),
        };
        if controller.image().cluster_id.is_empty() {
            let cluster_id = cluster_id.map_or_else(new_cluster_id, str::to_owned);
            controller.commit(vec![MetadataRecord::Cluster { cluster_id }])?;
        }
        Ok(controller)
    }

    /// The metadata log, locked for a change. A panic during an earlier
    /// change may have left a batch half written, so the log then refuses
    /// every change (KAFKA_STORAGE_ERROR) until a restart recovers it, as a
    /// partition log does; the image, one pointer swapped whole, stays readable.
    fn writer(&self) -> Result<MutexGuard<'_, Log>, MetadataError> {
        Ok(strom_storage::manager::lock_log(&self.log)?)
    }

    /// Sets `controller.max.partitions.per.request`.
    pub fn with_max_partitions_per_request(mut self, max: i32) -> Self {
        self.max_partitions_per_request = max.max(1);
        self
    }

    /// Refuses a request that would create more than
    /// `controller.max.partitions.per.request` partitions, as Kafka refuses
    /// an operation of too many records: POLICY_VIOLATION.
    pub fn check_partitions_per_request(&self, new_partitions: i64) -> Result<(), MetadataError> {
        let max = self.max_partitions_per_request;
        if new_partitions > i64::from(max) {
            return Err(MetadataError::PolicyViolation(format!(
                "the request would create {new_partitions} partitions; one request may create at most {max} \
                 (controller.max.partitions.per.request)"
            )));
        }
        Ok(())
    }

    /// The current image; cheap to take and consistent for as long as it is held.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The metadata log's end offset: one past its last record. Every
    /// record is fsync'd before it is applied, so on a single node this is
    /// also the high watermark.
    pub fn log_end_offset(&self) -> i64 {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).log_end_offset()
    }

    /// Creates a topic on this node, or only checks that it could be created.
    pub fn create_topic(&self, topic: NewTopic, validate_only: bool) -> Result<TopicImage, MetadataError> {
        self.create_topic_with_logs(topic, validate_only, &NoLogs)
    }

    /// [`Self::create_topic`], with the partitions' logs created by `logs`
    /// before the topic is written.
    pub fn create_topic_with_logs(
        &self,
        topic: NewTopic,
        validate_only: bool,
        logs: &dyn PartitionLogs,
    ) -> Result<TopicImage, MetadataError> {
        let mut writer = self.writer()?;
        let image = self.image();
        validate_topic_name(&topic.name)?;
        if image.topic(&topic.name).is_some() {
            return Err(MetadataError::TopicAlreadyExists(topic.name));
        }
        let key = collision_key(&topic.name);
        if let Some(other) = image.topics().find(|t| collision_key(&t.name) == key) {
            return Err(MetadataError::InvalidTopic(format!(
                "topic '{}' collides with existing topic '{}'",
                topic.name, other.name
            )));
        }
        if topic.partitions < 1 {
            return Err(MetadataError::InvalidPartitions(
                "number of partitions must be larger than 0".into(),
            ));
        }
        self.check_partitions_per_request(topic.partitions.into())?;
        if topic.replication_factor < 1 {
            return Err(MetadataError::InvalidReplicationFactor(
                "replication factor must be larger than 0".into(),
            ));
        }
        if topic.replication_factor > 1 {
            return Err(MetadataError::InvalidReplicationFactor(format!(
                "replication factor {} is larger than the 1 available broker",
                topic.replication_factor
            )));
        }
        for (name, value) in &topic.configs {
            validate_topic_config(name, value).map_err(MetadataError::InvalidConfig)?;
        }
        let topic_id = new_topic_id();
        let mut records = vec![MetadataRecord::Topic { name: topic.name.clone(), topic_id }];
        records.extend(topic.configs.iter().map(|(name, value)| MetadataRecord::TopicConfig {
            topic_id,
            name: name.clone(),
            value: Some(value.clone()),
        }));
        records.extend((0..topic.partitions).map(|partition| MetadataRecord::Partition {
            topic_id,
            partition,
            replicas: vec![self.node_id],
            leader: self.node_id,
            leader_epoch: 0,
        }));
        let mut preview = (*image).clone();
        records.iter().cloned().for_each(|r| preview.apply(r));
        let created = preview.topic(&topic.name).cloned().expect("just applied");
        if validate_only {
            logs.check_room(created.partitions.len())?;
            return Ok(created);
        }
        self.append_with_logs(&mut writer, records, logs, &created, 0..topic.partitions)?;
        Ok(created)
    }

    /// Has `logs` create the logs of `partitions`, then writes `records`;
    /// the logs are discarded if the write fails.
    fn append_with_logs(
        &self,
        writer: &mut Log,
        records: Vec<MetadataRecord>,
        logs: &dyn PartitionLogs,
        topic: &TopicImage,
        partitions: Range<i32>,
    ) -> Result<(), MetadataError> {
        logs.create(topic, partitions.clone())?;
        if let Err(e) = self.append_and_apply(writer, records) {
            logs.discard(topic, partitions);
            return Err(e);
        }
        Ok(())
    }

    /// Grows `name` to `count` partitions (CreatePartitions); partitions are
    /// never removed. `assignments`, when given, names each new partition's
    /// replicas.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<&[Vec<i32>]>,
        validate_only: bool,
    ) -> Result<(), MetadataError> {
        self.create_partitions_with_logs(name, count, assignments, validate_only, &NoLogs)
    }

    /// [`Self::create_partitions`], with the new partitions' logs created
    /// by `logs` before they are written.
    pub fn create_partitions_with_logs(
        &self,
        name: &str,
        count: i32,
        assignments: Option<&[Vec<i32>]>,
        validate_only: bool,
        logs: &dyn PartitionLogs,
    ) -> Result<(), MetadataError> {
        let mut writer = self.writer()?;
        let image = self.image();
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
        self.check_partitions_per_request(i64::from(count) - i64::from(current))?;
        if let Some(assignments) = assignments {
            self.check_assignments(assignments, count - current)?;
        }
        if validate_only {
            return logs.check_room((count - current) as usize);
        }
        let topic_id = topic.id;
        let records = (current..count)
            .map(|partition| MetadataRecord::Partition {
                topic_id,
                partition,
                replicas: vec![self.node_id],
                leader: self.node_id,
                leader_epoch: 0,
            })
            .collect();
        self.append_with_logs(&mut writer, records, logs, topic, current..count)
    }

    /// Explicit replica assignments must cover each new partition with
    /// brokers that exist: here, this one broker.
    fn check_assignments(&self, assignments: &[Vec<i32>], new_partitions: i32) -> Result<(), MetadataError> {
        let invalid = |why: String| Err(MetadataError::InvalidReplicaAssignment(why));
        if assignments.len() != new_partitions as usize {
            return invalid(format!(
                "{} replica assignments given for {new_partitions} new partitions",
                assignments.len()
            ));
        }
        for replicas in assignments {
            if replicas.is_empty() || replicas.iter().any(|r| *r != self.node_id) {
                return invalid(format!("replica assignment {replicas:?} names brokers that do not exist"));
            }
        }
        Ok(())
    }

    /// Deletes a topic by id, returning its name. Internal topics hold every
    /// group's offsets and every transaction's state: they are never deleted.
    pub fn delete_topic(&self, topic_id: Uuid) -> Result<String, MetadataError> {
        let mut writer = self.writer()?;
        let image = self.image();
        let topic = image.topic_by_id(&topic_id).ok_or(MetadataError::UnknownTopic)?;
        if topic.is_internal() {
            return Err(MetadataError::InvalidTopic(format!(
                "internal topic '{}' cannot be deleted",
                topic.name
            )));
        }
        let name = topic.name.clone();
        self.append_and_apply(&mut writer, vec![MetadataRecord::RemoveTopic { topic_id }])?;
        Ok(name)
    }

    /// Replaces the configs of `resource` with what `change` makes of the
    /// current image and the resource's current configs, or only checks that
    /// it could. `change` runs under the log lock, so concurrent changes to
    /// one resource never lose updates.
    /// Every value set is validated; only the differences are written.
    pub fn alter_configs<F>(
        &self,
        resource: &ConfigResource,
        validate_only: bool,
        change: F,
    ) -> Result<(), MetadataError>
    where
        F: FnOnce(
            &MetadataImage,
            &BTreeMap<String, String>,
        ) -> Result<BTreeMap<String, String>, MetadataError>,
    {
        let mut writer = self.writer()?;
        let image = self.image();
        let current = match resource {
            ConfigResource::Topic(name) => &image.topic(name).ok_or(MetadataError::UnknownTopic)?.configs,
            ConfigResource::Broker(name) => image.broker_configs(name),
        };
        let next = change(&image, current)?;
        let mut records = Vec::new();
        for (name, value) in &next {
            if current.get(name) != Some(value) {
                resource.validate(name, value)?;
                records.push(resource.record(name, Some(value)));
            }
        }
        let removed = current.keys().filter(|name| !next.contains_key(*name));
        records.extend(removed.map(|name| resource.record(name, None)));
        if validate_only || records.is_empty() {
            return Ok(());
        }
        self.append_and_apply(&mut writer, records)?;
        Ok(())
    }

    /// Reserves the next block of producer ids for `broker_id`. The record is
    /// fsync'd before the block is returned, so no id is handed out twice,
    /// even across a crash.
    pub fn allocate_producer_ids(&self, broker_id: i32) -> Result<ProducerIdBlock, MetadataError> {
        let mut writer = self.writer()?;
        let start = self.image().next_producer_id;
        let end = start.checked_add(PRODUCER_ID_BLOCK_SIZE).ok_or(MetadataError::ProducerIdsExhausted)?;
        let record = MetadataRecord::ProducerIds { broker_id, broker_epoch: -1, next_producer_id: end };
        self.append_and_apply(&mut writer, vec![record])?;
        Ok(start..end)
    }

    fn commit(&self, records: Vec<MetadataRecord>) -> Result<Arc<MetadataImage>, MetadataError> {
        let mut writer = self.writer()?;
        self.append_and_apply(&mut writer, records)
    }

    /// Writes `records` as one batch, fsyncs, then publishes the new image.
    /// The caller holds the log lock for the whole validate-write-apply step.
    fn append_and_apply(
        &self,
        log: &mut Log,
        records: Vec<MetadataRecord>,
    ) -> Result<Arc<MetadataImage>, MetadataError> {
        let batch = encode_batch(&records);
        let now = strom_storage::now_ms();
        let info = log.append(&batch, METADATA_LEADER_EPOCH, now)?;
        log.flush(now)?;
        let mut next = (*self.image()).clone();
        records.into_iter().for_each(|r| next.apply(r));
        next.last_offset = info.last_offset;
        let next = Arc::new(next);
        *self.image.write().unwrap_or_else(PoisonError::into_inner) = next.clone();
        Ok(next)
    }
}

fn encode_batch(records: &[MetadataRecord]) -> Bytes {
    let entries: Vec<_> = records.iter().map(|r| (None, Some(r.encode()))).collect();
    strom_storage::batch::encode_batch(&entries, strom_storage::now_ms())
}

fn replay(log: &Log, image: &mut MetadataImage) -> Result<(), MetadataError> {
    for record in log.read_records(log.log_end_offset())? {
        let value = record.value.unwrap_or_default();
        let decoded = MetadataRecord::decode(&value)
            .map_err(|reason| MetadataError::UnreadableRecord { offset: record.offset, reason })?;
        image.apply(decoded);
        image.last_offset = record.offset;
    }
    Ok(())
}

fn new_topic_id() -> Uuid {
    loop {
        let id = Uuid::new_v4();
        // Kafka reserves the zero id and avoids ids whose base64 form starts with '-'.
        if !id.is_nil() && id.as_bytes()[0] & 0xfc != 0xf8 {
            return id;
        }
    }
}

/// A cluster id in Kafka's style: 16 random bytes, URL-safe base64, unpadded.
fn new_cluster_id() -> String {
    base64_url(new_topic_id().as_bytes())
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_storage::StorageError;

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic { name: name.into(), partitions, replication_factor: 1, configs: BTreeMap::new() }
    }

    #[test]
    fn topics_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        let mut topic = new_topic("orders", 3);
        topic.configs.insert("retention.ms".into(), "1000".into());
        let created = controller.create_topic(topic, false).unwrap();
        controller.create_topic(new_topic("doomed", 1), false).unwrap();
        let doomed = controller.image().topic("doomed").unwrap().id;
        controller.delete_topic(doomed).unwrap();
        let cluster_id = controller.image().cluster_id.clone();
        drop(controller);

        let controller = Controller::open(dir.path(), 1).unwrap();
        let image = controller.image();
        assert_eq!(image.cluster_id, cluster_id);
        assert_eq!(image.topic("orders"), Some(&created));
        assert_eq!(image.topic("orders").unwrap().configs["retention.ms"], "1000");
        assert!(image.topic("doomed").is_none());
    }

    #[test]
    fn refuses_bad_topics() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        for name in ["", ".", "..", "a/b", &"x".repeat(250)] {
            assert!(matches!(
                controller.create_topic(new_topic(name, 1), false),
                Err(MetadataError::InvalidTopic(_))
            ));
        }
        assert!(controller.create_topic(new_topic(&"x".repeat(249), 1), false).is_ok());
        controller.create_topic(new_topic("a.b", 1), false).unwrap();
        assert!(matches!(
            controller.create_topic(new_topic("a_b", 1), false),
            Err(MetadataError::InvalidTopic(_))
        ));
        assert!(matches!(
            controller.create_topic(new_topic("a.b", 1), false),
            Err(MetadataError::TopicAlreadyExists(_))
        ));
        assert!(matches!(
            controller.create_topic(new_topic("p", 0), false),
            Err(MetadataError::InvalidPartitions(_))
        ));
        assert!(matches!(
            controller.create_topic(new_topic("huge", i32::MAX), true),
            Err(MetadataError::PolicyViolation(_))
        ));
        let validate_only = controller.create_topic(new_topic("v", 2), true).unwrap();
        assert_eq!(validate_only.partitions.len(), 2);
        assert!(controller.image().topic("v").is_none());
    }

    /// A change that sets exactly `pairs`.
    fn set(
        pairs: &[(&str, &str)],
    ) -> impl FnOnce(&MetadataImage, &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, MetadataError>
    {
        let next: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |_, _| Ok(next)
    }

    #[test]
    fn config_changes_replay_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        let mut topic = new_topic("orders", 1);
        topic.configs.insert("retention.ms".into(), "1000".into());
        controller.create_topic(topic, false).unwrap();
        let orders = ConfigResource::Topic("orders".into());
        controller.alter_configs(&orders, false, set(&[("segment.bytes", "4096")])).unwrap();
        let cluster = ConfigResource::Broker(String::new());
        controller.alter_configs(&cluster, false, set(&[("log.retention.hours", "2")])).unwrap();
        let node = ConfigResource::Broker("1".into());
        controller.alter_configs(&node, false, set(&[("message.max.bytes", "2048")])).unwrap();
        controller.alter_configs(&node, false, set(&[])).unwrap();
        drop(controller);

        let controller = Controller::open(dir.path(), 1).unwrap();
        let image = controller.image();
        let expected = BTreeMap::from([("segment.bytes".to_owned(), "4096".to_owned())]);
        assert_eq!(image.topic("orders").unwrap().configs, expected, "retention.ms was replaced");
        assert_eq!(image.broker_configs("")["log.retention.hours"], "2");
        assert!(image.broker_configs("1").is_empty());
    }

    #[test]
    fn config_changes_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        controller.create_topic(new_topic("orders", 1), false).unwrap();
        let orders = ConfigResource::Topic("orders".into());
        let cluster = ConfigResource::Broker(String::new());
        for (resource, key, value) in [
            (&orders, "retention.ms", "soon"),
            (&orders, "no.such.config", "1"),
            (&orders, "log.retention.ms", "1"),
            (&cluster, "log.retention.ms", "-5"),
            (&cluster, "retention.ms", "1"),
        ] {
            let err = controller.alter_configs(resource, false, set(&[(key, value)])).unwrap_err();
            assert!(matches!(&err, MetadataError::InvalidConfig(m) if m.contains(key)), "{key}: {err}");
        }
        let ghost = ConfigResource::Topic("ghost".into());
        assert!(matches!(
            controller.alter_configs(&ghost, false, set(&[("retention.ms", "1")])),
            Err(MetadataError::UnknownTopic)
        ));
        let offset = controller.image().last_offset;
        controller.alter_configs(&orders, true, set(&[("retention.ms", "5")])).unwrap();
        assert!(controller.image().topic("orders").unwrap().configs.is_empty());
        assert_eq!(controller.image().last_offset, offset, "validate_only writes nothing");
    }

    #[test]
    fn partitions_only_grow_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        controller.create_topic(new_topic("orders", 2), false).unwrap();
        let grow = |count, assignments: Option<&[Vec<i32>]>, validate_only| {
            controller.create_partitions("orders", count, assignments, validate_only)
        };
        assert!(matches!(grow(1, None, false), Err(MetadataError::InvalidPartitions(_))));
        assert!(matches!(grow(2, None, false), Err(MetadataError::InvalidPartitions(_))));
        assert!(matches!(grow(3, Some(&[vec![2]]), false), Err(MetadataError::InvalidReplicaAssignment(_))));
        assert!(matches!(grow(4, Some(&[vec![1]]), false), Err(MetadataError::InvalidReplicaAssignment(_))));
        assert!(matches!(
            controller.create_partitions("nope", 3, None, false),
            Err(MetadataError::UnknownTopic)
        ));
        assert!(matches!(grow(i32::MAX, None, false), Err(MetadataError::PolicyViolation(_))));
        grow(5, None, true).unwrap();
        assert_eq!(controller.image().topic("orders").unwrap().partitions.len(), 2, "validate only");
        grow(4, Some(&[vec![1], vec![1]]), false).unwrap();
        drop(controller);
        let reopened = Controller::open(dir.path(), 1).unwrap();
        let partitions: Vec<i32> =
            reopened.image().topic("orders").unwrap().partitions.keys().copied().collect();
        assert_eq!(partitions, vec![0, 1, 2, 3]);
    }

    #[test]
    fn internal_topics_are_never_deleted_or_grown() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        for name in ["__consumer_offsets", "__transaction_state"] {
            controller.create_topic(new_topic(name, 2), false).unwrap();
            let id = controller.image().topic(name).unwrap().id;
            let deleted = controller.delete_topic(id).unwrap_err();
            assert!(matches!(&deleted, MetadataError::InvalidTopic(m) if m.contains(name)), "{deleted}");
            let grown = controller.create_partitions(name, 3, None, false).unwrap_err();
            assert!(matches!(&grown, MetadataError::InvalidTopic(m) if m.contains(name)), "{grown}");
            assert_eq!(controller.image().topic(name).unwrap().partitions.len(), 2);
        }
    }

    #[test]
    fn replay_stops_at_a_record_it_cannot_decode() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        controller.create_topic(new_topic("before", 1), false).unwrap();
        let unknown_type = Bytes::from_static(&[0, 99, 0]);
        let batch = strom_storage::batch::encode_batch(&[(None, Some(unknown_type))], 0);
        let offset = {
            let mut log = controller.log.lock().unwrap();
            let info = log.append(&batch, 0, 0).unwrap();
            log.flush(0).unwrap();
            info.last_offset
        };
        drop(controller);

        let err = Controller::open(dir.path(), 1).err().expect("replay must stop");
        assert!(matches!(err, MetadataError::UnreadableRecord { offset: o, .. } if o == offset), "{err}");
        assert!(err.to_string().contains(&format!("offset {offset}")), "{err}");
    }

    /// Records what it was asked to create; refuses everything when `fail`.
    #[derive(Default)]
    struct RecordingLogs {
        fail: bool,
        created: Mutex<Vec<(String, Range<i32>)>>,
    }

    impl PartitionLogs for RecordingLogs {
        fn check_room(&self, _: usize) -> Result<(), MetadataError> {
            match self.fail {
                true => Err(MetadataError::PolicyViolation("no room".into())),
                false => Ok(()),
            }
        }

        fn create(&self, topic: &TopicImage, partitions: Range<i32>) -> Result<(), MetadataError> {
            if self.fail {
                return Err(MetadataError::PolicyViolation("no room".into()));
            }
            self.created.lock().unwrap().push((topic.name.clone(), partitions));
            Ok(())
        }

        fn discard(&self, _: &TopicImage, _: Range<i32>) {}
    }

    #[test]
    fn partitions_are_written_only_once_their_logs_exist() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        let logs = RecordingLogs::default();
        controller.create_topic_with_logs(new_topic("t", 3), false, &logs).unwrap();
        controller.create_partitions_with_logs("t", 5, None, false, &logs).unwrap();
        controller.create_topic_with_logs(new_topic("dry", 2), true, &logs).unwrap();
        assert_eq!(*logs.created.lock().unwrap(), vec![("t".to_owned(), 0..3), ("t".to_owned(), 3..5)]);

        let refusing = RecordingLogs { fail: true, ..Default::default() };
        let offset = controller.image().last_offset;
        let refused = controller.create_topic_with_logs(new_topic("u", 1), false, &refusing);
        assert!(matches!(refused, Err(MetadataError::PolicyViolation(_))));
        let refused = controller.create_partitions_with_logs("t", 6, None, false, &refusing);
        assert!(matches!(refused, Err(MetadataError::PolicyViolation(_))));
        for validate_only in [true, false] {
            let refused = controller.create_topic_with_logs(new_topic("v", 1), validate_only, &refusing);
            assert!(
                matches!(refused, Err(MetadataError::PolicyViolation(_))),
                "validate_only {validate_only}"
            );
        }
        assert_eq!(controller.image().last_offset, offset, "nothing written without logs");
        assert!(controller.image().topic("u").is_none());
        assert_eq!(controller.image().topic("t").unwrap().partitions.len(), 5);
    }

    #[test]
    fn one_request_creates_at_most_the_configured_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap().with_max_partitions_per_request(5);
        let refused = controller.create_topic(new_topic("big", 6), false).unwrap_err();
        assert!(
            matches!(&refused, MetadataError::PolicyViolation(m) if m.contains("controller.max.partitions.per.request"))
        );
        controller.create_topic(new_topic("fits", 5), false).unwrap();
        let refused = controller.create_partitions("fits", 11, None, false);
        assert!(matches!(refused, Err(MetadataError::PolicyViolation(_))));
        controller.create_partitions("fits", 10, None, false).unwrap();
        assert!(controller.check_partitions_per_request(6).is_err());
    }

    #[test]
    fn producer_id_blocks_never_repeat_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        assert_eq!(controller.allocate_producer_ids(1).unwrap(), 0..PRODUCER_ID_BLOCK_SIZE);
        let second = controller.allocate_producer_ids(1).unwrap();
        assert_eq!(second.start, PRODUCER_ID_BLOCK_SIZE);
        drop(controller);
        let controller = Controller::open(dir.path(), 1).unwrap();
        assert_eq!(controller.allocate_producer_ids(1).unwrap().start, second.end);
    }

    #[test]
    fn cluster_ids_look_like_kafkas() {
        let id = new_cluster_id();
        assert_eq!(id.len(), 22);
        assert!(!id.starts_with('-'));
    }

    #[test]
    fn a_panic_holding_the_metadata_log_refuses_later_changes_with_a_storage_error() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        controller.create_topic(new_topic("before", 1), false).unwrap();
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = controller.log.lock().unwrap();
                panic!("injected panic while the metadata log is locked");
            })
            .join()
        });
        assert!(panicked.is_err());

        let refused = controller.create_topic(new_topic("after", 1), false);
        assert!(matches!(refused, Err(MetadataError::Storage(StorageError::LogOffline(_)))), "{refused:?}");
        assert!(matches!(controller.allocate_producer_ids(1), Err(MetadataError::Storage(_))));
        assert!(controller.image().topic("before").is_some(), "the image stays readable");
        drop(controller);
        let restarted = Controller::open(dir.path(), 1).unwrap();
        restarted.create_topic(new_topic("after", 1), false).unwrap();
    }
}
