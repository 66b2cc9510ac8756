use std::sync::Mutex as StdMutex;
use std::time::Duration;

use strom_storage::StorageError;

use super::*;
use crate::image::{Endpoint, FeatureRange};

const CLUSTER: &str = "MkU3OEVBNTcwNTJENDM2Qg";

fn new_topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic { name: name.into(), partitions, replication_factor: 1, ..Default::default() }
}

/// A single node's controller over `dir`, with its local log at hand.
struct Node {
    controller: Controller,
    log: Arc<LocalRecordLog>,
}

/// Opens the node in `dir` and registers and unfences broker 1, as the broker does at start.
async fn open(dir: &Path) -> Node {
    let loader = Arc::new(MetadataLoader::new());
    let log = Arc::new(LocalRecordLog::open(dir, loader.clone()).unwrap());
    let controller = Controller::new(CLUSTER, log.clone(), loader);
    controller.bootstrap().await.unwrap();
    register(&controller, 1).await;
    Node { controller, log }
}

async fn register(controller: &Controller, id: i32) -> i64 {
    let request = BrokerRegistration {
        broker_id: id,
        cluster_id: CLUSTER.into(),
        incarnation_id: Uuid::new_v4(),
        endpoints: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "localhost".into(),
            port: 9092,
            security_protocol: 0,
        }],
        features: SUPPORTED_FEATURES
            .iter()
            .map(|(name, min, max)| FeatureRange { name: (*name).into(), min: *min, max: *max })
            .collect(),
        rack: None,
        log_dirs: vec![Uuid::from_u128(1)],
        // A restart here follows a clean shutdown.
        previous_broker_epoch: controller.image().brokers.get(&id).map_or(-1, |b| b.epoch),
    };
    let epoch = controller.register_broker(request, 0).await.unwrap();
    let heartbeat = BrokerHeartbeat {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: controller.image().last_offset,
        want_fence: false,
        want_shut_down: false,
    };
    assert!(!controller.broker_heartbeat(heartbeat, 0).await.unwrap().is_fenced);
    epoch
}

#[tokio::test]
async fn topics_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    let mut topic = new_topic("orders", 3);
    topic.configs.insert("retention.ms".into(), "1000".into());
    let created = node.controller.create_topic(topic, false).await.unwrap();
    node.controller.create_topic(new_topic("doomed", 1), false).await.unwrap();
    let doomed = node.controller.image().topic("doomed").unwrap().id;
    node.controller.delete_topic(doomed).await.unwrap();
    drop(node);

    let node = open(dir.path()).await;
    let image = node.controller.image();
    assert_eq!(image.topic("orders"), Some(&created), "a clean restart changes no partition");
    assert_eq!(image.topic("orders").unwrap().configs["retention.ms"], "1000");
    assert!(image.topic("doomed").is_none());
    assert_eq!(image.metadata_version(), METADATA_VERSION_LEVEL);
    assert_eq!(image.brokers.len(), 1);
}

#[tokio::test]
async fn metadata_version_is_written_once_at_first_start() {
    let dir = tempfile::tempdir().unwrap();
    let controller = Controller::open_local(dir.path(), CLUSTER, |c| c).unwrap();
    assert_eq!(controller.image().metadata_version(), METADATA_VERSION_LEVEL);
    assert!(controller.image().elr_enabled(), "a new cluster keeps eligible leader replicas");
    // One record per feature level, then the cluster-wide min.insync.replicas.
    let bootstrap_end = BOOTSTRAP_FEATURES.len() as i64;
    assert_eq!(controller.image().last_offset, bootstrap_end);
    drop(controller);
    let controller = Controller::open_local(dir.path(), CLUSTER, |c| c).unwrap();
    assert_eq!(controller.image().last_offset, bootstrap_end, "nothing written at the second start");
}

#[tokio::test]
async fn eligible_leader_replicas_keep_a_cluster_wide_min_isr() {
    let dir = tempfile::tempdir().unwrap();
    let defaults = operations::ElectionDefaults { min_insync_replicas: 2, ..Default::default() };
    let c = Controller::open_local(dir.path(), CLUSTER, |c| c.with_election_defaults(defaults)).unwrap();
    assert_eq!(c.image().broker_configs("")[MIN_INSYNC_REPLICAS], "2", "the static value");
    let cluster = ConfigResource::Broker(String::new());
    c.alter_configs(&cluster, false, set(&[(MIN_INSYNC_REPLICAS, "3")])).await.unwrap();
    let err = c.alter_configs(&cluster, false, set(&[("log.retention.hours", "2")])).await.unwrap_err();
    assert!(matches!(&err, MetadataError::InvalidConfig(m) if m.contains(MIN_INSYNC_REPLICAS)), "{err}");
    assert_eq!(c.image().broker_configs("")[MIN_INSYNC_REPLICAS], "3");
}

#[tokio::test]
async fn refuses_bad_topics() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    for name in ["", ".", "..", "a/b", &"x".repeat(250)] {
        assert!(matches!(
            c.create_topic(new_topic(name, 1), false).await,
            Err(MetadataError::InvalidTopic(_))
        ));
    }
    assert!(c.create_topic(new_topic(&"x".repeat(249), 1), false).await.is_ok());
    c.create_topic(new_topic("a.b", 1), false).await.unwrap();
    assert!(matches!(c.create_topic(new_topic("a_b", 1), false).await, Err(MetadataError::InvalidTopic(_))));
    assert!(matches!(
        c.create_topic(new_topic("a.b", 1), false).await,
        Err(MetadataError::TopicAlreadyExists(_))
    ));
    assert!(matches!(
        c.create_topic(new_topic("p", 0), false).await,
        Err(MetadataError::InvalidPartitions(_))
    ));
    let mut two = new_topic("rf", 1);
    two.replication_factor = 2;
    assert!(matches!(c.create_topic(two, false).await, Err(MetadataError::InvalidReplicationFactor(_))));
    assert!(matches!(
        c.create_topic(new_topic("huge", i32::MAX), true).await,
        Err(MetadataError::PolicyViolation(_))
    ));
    let validate_only = c.create_topic(new_topic("v", 2), true).await.unwrap();
    assert_eq!(validate_only.partitions.len(), 2);
    assert!(c.image().topic("v").is_none());
}

/// A change that sets exactly `pairs`.
fn set(
    pairs: &[(&str, &str)],
) -> impl FnOnce(&MetadataImage, &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, MetadataError>
{
    let next: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |_, _| Ok(next)
}

#[tokio::test]
async fn config_changes_replay_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    let mut topic = new_topic("orders", 1);
    topic.configs.insert("retention.ms".into(), "1000".into());
    c.create_topic(topic, false).await.unwrap();
    let orders = ConfigResource::Topic("orders".into());
    c.alter_configs(&orders, false, set(&[("segment.bytes", "4096")])).await.unwrap();
    let cluster = ConfigResource::Broker(String::new());
    c.alter_configs(&cluster, false, set(&[("log.retention.hours", "2"), (MIN_INSYNC_REPLICAS, "1")]))
        .await
        .unwrap();
    let node = ConfigResource::Broker("1".into());
    c.alter_configs(&node, false, set(&[("message.max.bytes", "2048")])).await.unwrap();
    c.alter_configs(&node, false, set(&[])).await.unwrap();
    drop(c);

    let image = open(dir.path()).await.controller.image();
    let expected = BTreeMap::from([("segment.bytes".to_owned(), "4096".to_owned())]);
    assert_eq!(image.topic("orders").unwrap().configs, expected, "retention.ms was replaced");
    assert_eq!(image.broker_configs("")["log.retention.hours"], "2");
    assert!(image.broker_configs("1").is_empty());
}

#[tokio::test]
async fn config_changes_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    c.create_topic(new_topic("orders", 1), false).await.unwrap();
    let orders = ConfigResource::Topic("orders".into());
    let cluster = ConfigResource::Broker(String::new());
    for (resource, key, value) in [
        (&orders, "retention.ms", "soon"),
        (&orders, "no.such.config", "1"),
        (&orders, "log.retention.ms", "1"),
        (&cluster, "log.retention.ms", "-5"),
        (&cluster, "retention.ms", "1"),
    ] {
        let err = c.alter_configs(resource, false, set(&[(key, value)])).await.unwrap_err();
        assert!(matches!(&err, MetadataError::InvalidConfig(m) if m.contains(key)), "{key}: {err}");
    }
    let ghost = ConfigResource::Topic("ghost".into());
    assert!(matches!(
        c.alter_configs(&ghost, false, set(&[("retention.ms", "1")])).await,
        Err(MetadataError::UnknownTopic)
    ));
    let offset = c.image().last_offset;
    c.alter_configs(&orders, true, set(&[("retention.ms", "5")])).await.unwrap();
    assert!(c.image().topic("orders").unwrap().configs.is_empty());
    assert_eq!(c.image().last_offset, offset, "validate_only writes nothing");
}

#[tokio::test]
async fn partitions_only_grow_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    c.create_topic(new_topic("orders", 2), false).await.unwrap();
    let grow = |count, assignments: Option<&'static [Vec<i32>]>, validate_only| {
        c.create_partitions("orders", count, assignments, validate_only)
    };
    assert!(matches!(grow(1, None, false).await, Err(MetadataError::InvalidPartitions(_))));
    assert!(matches!(grow(2, None, false).await, Err(MetadataError::InvalidPartitions(_))));
    let unknown_broker: &'static [Vec<i32>] = Box::leak(Box::new([vec![2]]));
    assert!(matches!(
        grow(3, Some(unknown_broker), false).await,
        Err(MetadataError::InvalidReplicaAssignment(_))
    ));
    let too_few: &'static [Vec<i32>] = Box::leak(Box::new([vec![1]]));
    assert!(matches!(grow(4, Some(too_few), false).await, Err(MetadataError::InvalidReplicaAssignment(_))));
    assert!(matches!(c.create_partitions("nope", 3, None, false).await, Err(MetadataError::UnknownTopic)));
    assert!(matches!(grow(i32::MAX, None, false).await, Err(MetadataError::PolicyViolation(_))));
    grow(5, None, true).await.unwrap();
    assert_eq!(c.image().topic("orders").unwrap().partitions.len(), 2, "validate only");
    let two: &'static [Vec<i32>] = Box::leak(Box::new([vec![1], vec![1]]));
    grow(4, Some(two), false).await.unwrap();
    drop(c);
    let reopened = open(dir.path()).await.controller;
    let partitions: Vec<i32> = reopened.image().topic("orders").unwrap().partitions.keys().copied().collect();
    assert_eq!(partitions, vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn internal_topics_are_never_deleted_or_grown() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    for name in ["__consumer_offsets", "__transaction_state"] {
        c.create_topic(new_topic(name, 2), false).await.unwrap();
        let id = c.image().topic(name).unwrap().id;
        let deleted = c.delete_topic(id).await.unwrap_err();
        assert!(matches!(&deleted, MetadataError::InvalidTopic(m) if m.contains(name)), "{deleted}");
        let grown = c.create_partitions(name, 3, None, false).await.unwrap_err();
        assert!(matches!(&grown, MetadataError::InvalidTopic(m) if m.contains(name)), "{grown}");
        assert_eq!(c.image().topic(name).unwrap().partitions.len(), 2);
    }
}

#[tokio::test]
async fn replay_stops_at_a_record_it_cannot_decode() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.controller.create_topic(new_topic("before", 1), false).await.unwrap();
    let unknown_type = Bytes::from_static(&[1, 99, 0]);
    let batch = strom_storage::batch::encode_batch(&[(None, Some(unknown_type))], 0);
    let offset = {
        let mut log = node.log.raw().lock().unwrap();
        let info = log.append(&batch, 0, 0).unwrap();
        log.flush(0).unwrap();
        info.last_offset
    };
    drop(node);

    let loader = Arc::new(MetadataLoader::new());
    let err = LocalRecordLog::open(dir.path(), loader).err().expect("replay must stop");
    assert!(matches!(err, MetadataError::UnreadableRecord { offset: o, .. } if o == offset), "{err}");
    assert!(err.to_string().contains(&format!("offset {offset}")), "{err}");
}

/// Records what it was asked to create; refuses everything when `fail`.
#[derive(Default)]
struct RecordingLogs {
    fail: bool,
    created: StdMutex<Vec<(String, Range<i32>)>>,
    discarded: StdMutex<Vec<(String, Range<i32>)>>,
}

impl PartitionLogs for RecordingLogs {
    fn check_room(&self, _: usize) -> Result<(), MetadataError> {
        match self.fail {
            true => Err(MetadataError::PolicyViolation("no room".into())),
            false => Ok(()),
        }
    }

    fn create(&self, topic: &TopicImage, partitions: Range<i32>) -> Result<(), MetadataError> {
        self.check_room(partitions.len())?;
        self.created.lock().unwrap().push((topic.name.clone(), partitions));
        Ok(())
    }

    fn discard(&self, topic: &TopicImage, partitions: Range<i32>) {
        self.discarded.lock().unwrap().push((topic.name.clone(), partitions));
    }
}

#[tokio::test]
async fn partitions_are_written_only_once_their_logs_exist() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    let logs = RecordingLogs::default();
    c.create_topic_with_logs(new_topic("t", 3), false, &logs).await.unwrap();
    c.create_partitions_with_logs("t", 5, None, false, &logs).await.unwrap();
    c.create_topic_with_logs(new_topic("dry", 2), true, &logs).await.unwrap();
    assert_eq!(*logs.created.lock().unwrap(), vec![("t".to_owned(), 0..3), ("t".to_owned(), 3..5)]);

    let refusing = RecordingLogs { fail: true, ..Default::default() };
    let offset = c.image().last_offset;
    let refused = c.create_topic_with_logs(new_topic("u", 1), false, &refusing).await;
    assert!(matches!(refused, Err(MetadataError::PolicyViolation(_))));
    let refused = c.create_partitions_with_logs("t", 6, None, false, &refusing).await;
    assert!(matches!(refused, Err(MetadataError::PolicyViolation(_))));
    for validate_only in [true, false] {
        let refused = c.create_topic_with_logs(new_topic("v", 1), validate_only, &refusing).await;
        assert!(matches!(refused, Err(MetadataError::PolicyViolation(_))), "validate_only {validate_only}");
    }
    assert_eq!(c.image().last_offset, offset, "nothing written without logs");
    assert!(c.image().topic("u").is_none());
    assert_eq!(c.image().topic("t").unwrap().partitions.len(), 5);
}

#[tokio::test]
async fn one_request_creates_at_most_the_configured_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller.with_max_partitions_per_request(5);
    let refused = c.create_topic(new_topic("big", 6), false).await.unwrap_err();
    assert!(
        matches!(&refused, MetadataError::PolicyViolation(m) if m.contains("controller.max.partitions.per.request"))
    );
    c.create_topic(new_topic("fits", 5), false).await.unwrap();
    assert!(matches!(
        c.create_partitions("fits", 11, None, false).await,
        Err(MetadataError::PolicyViolation(_))
    ));
    c.create_partitions("fits", 10, None, false).await.unwrap();
    assert!(c.check_partitions_per_request(6).is_err());
}

#[tokio::test]
async fn producer_id_blocks_never_repeat_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path()).await.controller;
    let epoch = c.image().brokers[&1].epoch;
    assert_eq!(c.allocate_producer_ids(1, epoch).await.unwrap(), 0..PRODUCER_ID_BLOCK_SIZE);
    let second = c.allocate_producer_ids(1, epoch).await.unwrap();
    assert_eq!(second.start, PRODUCER_ID_BLOCK_SIZE);
    assert!(matches!(c.allocate_producer_ids(1, epoch + 1).await, Err(MetadataError::StaleBrokerEpoch(_))));
    drop(c);
    let c = open(dir.path()).await.controller;
    let epoch = c.image().brokers[&1].epoch;
    assert_eq!(c.allocate_producer_ids(1, epoch).await.unwrap().start, second.end);
}

#[test]
fn cluster_ids_look_like_kafkas() {
    let id = new_cluster_id();
    assert_eq!(id.len(), 22);
    assert!(!id.starts_with('-'));
}

#[tokio::test]
async fn a_panic_holding_the_metadata_log_refuses_later_changes_with_a_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.controller.create_topic(new_topic("before", 1), false).await.unwrap();
    let panicked = std::thread::scope(|s| {
        s.spawn(|| {
            let _held = node.log.raw().lock().unwrap();
            panic!("injected panic while the metadata log is locked");
        })
        .join()
    });
    assert!(panicked.is_err());

    let refused = node.controller.create_topic(new_topic("after", 1), false).await;
    assert!(matches!(refused, Err(MetadataError::Storage(StorageError::LogOffline(_)))), "{refused:?}");
    let epoch = node.controller.image().brokers[&1].epoch;
    assert!(matches!(node.controller.allocate_producer_ids(1, epoch).await, Err(MetadataError::Storage(_))));
    assert!(node.controller.image().topic("before").is_some(), "the image stays readable");
    drop(node);
    let restarted = open(dir.path()).await.controller;
    restarted.create_topic(new_topic("after", 1), false).await.unwrap();
}

/// A quorum stand-in: appends are assigned offsets at once but committed
/// (handed to the loader) only when the test releases them, or refused as
/// by a node that lost the leadership it claimed.
struct SlowQuorum {
    loader: Arc<MetadataLoader>,
    pending: StdMutex<Vec<(u64, Vec<Bytes>)>>,
    next_offset: StdMutex<u64>,
    leader: Option<i32>,
}

impl SlowQuorum {
    fn commit_all(&self) {
        for (base, records) in self.pending.lock().unwrap().drain(..) {
            self.loader.apply_batch(base, 1, &records).unwrap();
        }
    }
}

impl RecordLog for SlowQuorum {
    fn claim(&self) -> crate::record_log::ClaimFuture<'_> {
        let next_offset = *self.next_offset.lock().unwrap();
        Box::pin(std::future::ready(Ok(crate::record_log::Claim { epoch: 1, next_offset })))
    }

    fn append(&self, _epoch: i32, records: Vec<Bytes>) -> crate::record_log::AppendFuture<'_> {
        if let Some(leader) = self.leader {
            return Box::pin(std::future::ready(Err(AppendError::NotController { leader_id: Some(leader) })));
        }
        let mut next = self.next_offset.lock().unwrap();
        let base = *next;
        *next += records.len() as u64;
        let last = *next - 1;
        self.pending.lock().unwrap().push((base, records));
        Box::pin(async move {
            self.loader.wait_for_offset(last).await;
            Ok(last)
        })
    }
}

#[tokio::test]
async fn an_answer_waits_for_the_commit_of_its_records() {
    let loader = Arc::new(MetadataLoader::new());
    let quorum = Arc::new(SlowQuorum {
        loader: loader.clone(),
        pending: StdMutex::default(),
        next_offset: StdMutex::new(0),
        leader: None,
    });
    let controller = Arc::new(Controller::new(CLUSTER, quorum.clone(), loader.clone()));
    let bootstrap = tokio::spawn({
        let controller = controller.clone();
        async move { controller.bootstrap().await }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while quorum.pending.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the bootstrap record was never appended");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(!bootstrap.is_finished(), "answered before its commit");
    assert_eq!(loader.image().metadata_version(), 0);
    quorum.commit_all();
    tokio::time::timeout(Duration::from_secs(10), bootstrap).await.unwrap().unwrap().unwrap();
    assert_eq!(controller.image().metadata_version(), METADATA_VERSION_LEVEL);
}

#[tokio::test]
async fn a_follower_refuses_writes_with_not_controller_and_discards_new_logs() {
    let loader = Arc::new(MetadataLoader::new());
    let quorum = Arc::new(SlowQuorum {
        loader: loader.clone(),
        pending: StdMutex::default(),
        next_offset: StdMutex::new(0),
        leader: Some(3),
    });
    // The image a follower replayed: one live broker.
    let controller = Controller::new(CLUSTER, quorum, loader.clone());
    let registration = crate::image::register_broker_record(&crate::image::BrokerImage {
        id: 1,
        epoch: 0,
        incarnation_id: Uuid::from_u128(1),
        endpoints: Vec::new(),
        features: Vec::new(),
        rack: None,
        fenced: false,
        in_controlled_shutdown: false,
        log_dirs: Vec::new(),
    });
    let version = crate::kraft_records::FeatureLevelRecord {
        name: METADATA_VERSION_FEATURE.into(),
        feature_level: METADATA_VERSION_LEVEL,
        ..Default::default()
    };
    loader.apply_batch(0, 1, &[encode_record(&version.into()), encode_record(&registration.into())]).unwrap();
    let logs = RecordingLogs::default();
    let refused = controller.create_topic_with_logs(new_topic("t", 2), false, &logs).await.unwrap_err();
    assert!(matches!(refused, MetadataError::NotController { leader_id: Some(3) }), "{refused}");
    assert_eq!(*logs.discarded.lock().unwrap(), vec![("t".to_owned(), 0..2)]);
    assert!(controller.image().topic("t").is_none());
}

fn topic_acl(name: &str, principal: &str, op: i8) -> Acl {
    use crate::acl::{pattern, permission, resource};
    Acl {
        resource_type: resource::TOPIC,
        resource_name: name.into(),
        pattern_type: pattern::LITERAL,
        principal: principal.into(),
        host: "*".into(),
        operation: op,
        permission: permission::ALLOW,
    }
}

#[tokio::test]
async fn acls_are_created_once_deleted_by_filter_and_survive_a_reopen() {
    use crate::acl::{operation, pattern, permission, resource};
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    let read = topic_acl("orders", "User:alice", operation::READ);
    let write = topic_acl("orders", "User:bob", operation::WRITE);
    let mut invalid = read.clone();
    invalid.principal = "alice".into();
    let results =
        node.controller.create_acls(&[read.clone(), write.clone(), invalid, read.clone()]).await.unwrap();
    assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
    assert!(results[2].is_err(), "a principal without a type is refused");
    assert_eq!(node.controller.image().acls().len(), 2, "a binding is stored once");
    drop(node);

    let node = open(dir.path()).await;
    assert_eq!(node.controller.image().acls().len(), 2);
    let bobs = AclFilter {
        resource_type: resource::ANY,
        resource_name: None,
        pattern_type: pattern::ANY,
        principal: Some("User:bob".into()),
        host: None,
        operation: operation::ANY,
        permission: permission::ANY,
    };
    let removed = node.controller.delete_acls(&[bobs.clone(), bobs]).await.unwrap();
    assert_eq!(removed[0].as_ref().unwrap(), &vec![write]);
    assert!(removed[1].as_ref().unwrap().is_empty(), "each binding is removed once");
    let image = node.controller.image();
    let left: Vec<&Acl> = image.acls().values().collect();
    assert_eq!(left, vec![&read]);
}
