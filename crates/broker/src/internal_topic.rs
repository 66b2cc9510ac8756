//! The internal topics the coordinators keep their state in
//! (`__consumer_offsets` for groups, `__transaction_state` for
//! transactions): which partition owns a group or transactional id,
//! creating the topic on first use with Kafka's settings, and the
//! partitions whose coordinator state is still being loaded.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use kafka_protocol::error::ResponseError;
use strom_metadata::{MetadataError, MetadataImage, NewTopic};

use crate::controller_channel::ControllerChannel;
use crate::coordinator_host::CoordinatorHost;
use crate::locks::lock_recovering;
use crate::replica::ReplicaManager;

/// What the internal-topic helpers use of the broker: the controller
/// channel and the hosted partitions. The broker converts into it, so the
/// coordinators pass theirs.
#[derive(Clone, Copy)]
pub struct Services<'a> {
    pub controller: &'a ControllerChannel,
    pub replicas: &'a ReplicaManager,
}

/// Java's `String.hashCode`, over UTF-16 code units.
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The partition that owns `id` in an internal topic of `partitions`
/// partitions: Kafka's `Utils.abs(id.hashCode()) % partitions`, so a
/// client finds the same coordinator partition as on a Kafka broker.
pub fn partition_for(id: &str, partitions: i32) -> i32 {
    // Kafka's Utils.abs maps MIN_VALUE to 0 instead of overflowing.
    let non_negative = java_hash(id).checked_abs().unwrap_or(0);
    non_negative % partitions
}

/// The broker leading partition `partition` of internal topic `topic` in
/// the image this broker last applied: where clients find the coordinator
/// of the ids that partition owns. COORDINATOR_NOT_AVAILABLE while the
/// topic does not exist or the partition has no leader.
pub fn coordinator_of<'a>(
    services: impl Into<Services<'a>>,
    topic: &str,
    partition: i32,
) -> Result<i32, ResponseError> {
    let node = services.into();
    let image = node.replicas.image();
    let state = image.topic(topic).and_then(|t| t.partitions.get(&partition));
    match state {
        Some(state) if state.leader >= 0 => Ok(state.leader),
        _ => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// Kafka's `isGroupLocal` / `isCoordinatorFor`: NOT_COORDINATOR unless
/// this broker leads partition `partition` of internal topic `topic`. A
/// topic not created yet is led by no one: the client asks FindCoordinator,
/// which creates it.
pub fn check_local<'a>(
    services: impl Into<Services<'a>>,
    topic: &str,
    partition: i32,
) -> Result<(), ResponseError> {
    let node = services.into();
    match node.replicas.partition(topic, partition) {
        Some(p) if p.is_leader() => Ok(()),
        _ => Err(ResponseError::NotCoordinator),
    }
}

/// The partitions of an internal topic whose leadership this broker is
/// taking: led already, their coordinator state not yet replayed. Kafka's
/// coordinators answer COORDINATOR_LOAD_IN_PROGRESS for them meanwhile, a
/// retriable error, where a request served from the half-loaded state
/// would get a wrong, possibly fatal, answer.
#[derive(Debug)]
pub struct Loading {
    topic: &'static str,
    partitions: Mutex<HashSet<i32>>,
}

impl Loading {
    pub fn new(topic: &'static str) -> Self {
        Self { topic, partitions: Mutex::default() }
    }

    /// Marks the partitions `image` gives this broker to lead as loading,
    /// before the leadership is applied; returns them.
    pub fn start(&self, replicas: &ReplicaManager, image: &MetadataImage) -> Vec<i32> {
        let Some(topic) = image.topic(self.topic) else { return Vec::new() };
        let me = replicas.node_id();
        let gained: Vec<i32> = topic
            .partitions
            .iter()
            .filter(|(number, state)| {
                state.leader == me && replicas.partition(self.topic, **number).is_some_and(|p| !p.is_leader())
            })
            .map(|(number, _)| *number)
            .collect();
        self.lock().extend(&gained);
        gained
    }

    /// The partitions [`Self::start`] marked are replayed.
    pub fn finish(&self, loaded: &[i32]) {
        if loaded.is_empty() {
            return;
        }
        let mut loading = self.lock();
        for partition in loaded {
            loading.remove(partition);
        }
    }

    /// [`check_local`], then COORDINATOR_LOAD_IN_PROGRESS while `partition` loads.
    pub fn check(&self, host: &dyn CoordinatorHost, partition: i32) -> Result<(), ResponseError> {
        host.check_leads(self.topic, partition)?;
        if self.lock().contains(&partition) {
            return Err(ResponseError::CoordinatorLoadInProgress);
        }
        Ok(())
    }

    /// Marks `partition` as loading, as [`Self::start`] does for a gained one.
    #[cfg(test)]
    pub(crate) fn mark(&self, partition: i32) {
        self.lock().insert(partition);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        lock_recovering(&self.partitions, "loading coordinator partitions")
    }
}

/// Kafka's default `offsets.topic.replication.factor` and
/// `transaction.state.log.replication.factor`.
pub const DEFAULT_REPLICATION_FACTOR: i16 = 3;

/// A coordinator's internal topic, as Kafka creates it on first use.
#[derive(Debug, Clone, Copy)]
pub struct InternalTopic {
    pub name: &'static str,
    pub partitions: i32,
    /// A configured replication factor is kept to, as Kafka keeps to it:
    /// until that many brokers are registered the topic is not created and
    /// its coordinators are unavailable. Unset, it is Kafka's default of 3
    /// capped at the brokers registered, so a single node (which Kafka's
    /// sample `server.properties` configures with 1) works without settings.
    pub replication_factor: Option<i16>,
    pub min_insync_replicas: MinInsyncReplicas,
    pub segment_bytes: i64,
}

/// The `min.insync.replicas` an internal topic is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinInsyncReplicas {
    /// None of its own: the broker's applies (`__consumer_offsets`).
    Broker,
    /// Set at creation (`transaction.state.log.min.isr`). Unset, Kafka's
    /// default of 2 capped at the replication factor, as the factor itself
    /// is capped.
    Topic(Option<i32>),
}

/// Kafka's `transaction.state.log.min.isr` default.
const DEFAULT_MIN_INSYNC_REPLICAS: i32 = 2;

/// Creates the compacted internal topic on first use, as FindCoordinator
/// does in Kafka. Creating it concurrently is not an error; failing to is
/// the coordinator being unavailable, as in Kafka.
pub async fn create<'a>(
    services: impl Into<Services<'a>>,
    topic: &InternalTopic,
) -> Result<(), ResponseError> {
    let node = services.into();
    match missing(node, topic) {
        Some(new) => created(topic.name, node.controller.create_topic_at_active(new, node.replicas).await),
        None => Ok(()),
    }
}

/// The topic to create, unless the image already names it.
fn missing(node: Services<'_>, topic: &InternalTopic) -> Option<NewTopic> {
    let image = node.controller.image();
    if image.topic(topic.name).is_some() {
        return None;
    }
    let replication_factor = topic.replication_factor.unwrap_or_else(|| {
        let usable = image.brokers.values().filter(|b| !b.in_controlled_shutdown).count();
        DEFAULT_REPLICATION_FACTOR.min(usable.max(1) as i16)
    });
    let mut configs = BTreeMap::from([
        ("cleanup.policy".to_owned(), "compact".to_owned()),
        ("segment.bytes".to_owned(), topic.segment_bytes.to_string()),
    ]);
    if let MinInsyncReplicas::Topic(configured) = topic.min_insync_replicas {
        let min_isr =
            configured.unwrap_or_else(|| DEFAULT_MIN_INSYNC_REPLICAS.min(i32::from(replication_factor)));
        configs.insert("min.insync.replicas".to_owned(), min_isr.to_string());
    }
    Some(NewTopic {
        name: topic.name.to_owned(),
        partitions: topic.partitions,
        replication_factor,
        configs,
        ..Default::default()
    })
}

/// The coordinator's view of creating `name`: through the active
/// controller, so this node's image names the topic (and its coordinators
/// answer) a moment after it is created.
fn created(name: &str, result: Result<(), MetadataError>) -> Result<(), ResponseError> {
    match result {
        Ok(()) | Err(MetadataError::TopicAlreadyExists(_)) => Ok(()),
        Err(e) => {
            tracing::error!("cannot create {name}: {e}");
            Err(ResponseError::CoordinatorNotAvailable)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::server::Broker;

    #[test]
    fn java_string_hash_matches_the_jvm() {
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("hello"), 99_162_322);
        // "polygenelubricants" hashes to Integer.MIN_VALUE in Java.
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn ids_map_to_kafkas_partitions() {
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        // A negative hash takes its absolute value, as in Java.
        assert_eq!(java_hash("aaaaaaa"), -1_236_860_927);
        assert_eq!(partition_for("aaaaaaa", 50), 27);
    }

    fn internal(replication_factor: Option<i16>, min_insync_replicas: MinInsyncReplicas) -> InternalTopic {
        let name = "__internal";
        InternalTopic { name, partitions: 3, replication_factor, min_insync_replicas, segment_bytes: 1 << 20 }
    }

    fn open_broker(dir: &std::path::Path) -> std::sync::Arc<Broker> {
        let overrides = [("log.dirs".to_owned(), dir.display().to_string())];
        Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn an_internal_topic_is_created_once_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let topic = internal(None, MinInsyncReplicas::Broker);
        create(&*broker, &topic).await.unwrap();
        create(&*broker, &topic).await.unwrap();
        let image = broker.controller().image();
        let created = image.topic("__internal").expect("created");
        assert_eq!(created.configs.get("cleanup.policy").map(String::as_str), Some("compact"));
        assert_eq!(created.configs.get("segment.bytes").map(String::as_str), Some("1048576"));
        assert_eq!(created.configs.get("min.insync.replicas"), None, "the broker's applies");
        assert!((0..3).all(|p| broker.replicas().partition("__internal", p).is_some()));
        // Unset, the replication factor is capped at the one broker there is.
        assert!(created.partitions.values().all(|p| p.replicas.len() == 1));
    }

    #[tokio::test]
    async fn a_state_log_min_isr_is_kept_when_set_and_capped_at_the_replicas_when_not() {
        for (configured, expected) in [(None, "1"), (Some(3), "3")] {
            let dir = tempfile::tempdir().unwrap();
            let broker = open_broker(dir.path());
            create(&*broker, &internal(None, MinInsyncReplicas::Topic(configured))).await.unwrap();
            let image = broker.controller().image();
            let created = image.topic("__internal").expect("created");
            assert_eq!(created.configs.get("min.insync.replicas").map(String::as_str), Some(expected));
        }
    }

    #[tokio::test]
    async fn a_configured_replication_factor_above_the_brokers_leaves_the_coordinator_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let refused = create(&*broker, &internal(Some(3), MinInsyncReplicas::Broker)).await.unwrap_err();
        assert_eq!(refused, ResponseError::CoordinatorNotAvailable);
        assert!(broker.controller().image().topic("__internal").is_none());
    }
}
