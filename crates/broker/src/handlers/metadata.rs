//! Metadata: brokers, topics (by name or id) and their partitions, with
//! auto-creation of unknown topics when the broker and request allow it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use strom_metadata::acl::{operation, resource, CLUSTER_NAME};
use strom_metadata::operations::{DIRECTORY_LOST, DIRECTORY_MIGRATING, DIRECTORY_UNASSIGNED};
use strom_metadata::{MetadataError, MetadataImage, NewTopic, PartitionImage, TopicImage};
use uuid::Uuid;

use super::{live_endpoints, str_bytes, topic_name, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;
use crate::error::metadata_error;
use crate::replica::TopicPartitions;

/// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS and
/// ALTER_CONFIGS: everything, as no authorizer is configured.
const ALL_TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);

pub async fn handle(ctx: &RequestContext<'_>, request: MetadataRequest) -> MetadataResponse {
    // Versions before 4 have no flag: they always ask for auto-creation.
    let allow_auto_create = ctx.api_version < 4 || request.allow_auto_topic_creation;
    let operations = if request.include_topic_authorized_operations {
        ALL_TOPIC_OPERATIONS
    } else {
        AUTHORIZED_OPERATIONS_OMITTED
    };
    let topics: Vec<MetadataResponseTopic> = match &request.topics {
        // Topics the principal may not describe are left out, as in Kafka.
        None => (ctx.controller().image().topics())
            .filter(|t| ctx.authorize(operation::DESCRIBE, resource::TOPIC, &t.name))
            .map(|t| describe_topic(ctx, t, operations))
            .collect(),
        Some(wanted) => {
            let mut topics = Vec::with_capacity(wanted.len());
            for t in wanted {
                topics.push(match (&t.name, t.topic_id) {
                    (Some(name), _) if !ctx.authorize(operation::DESCRIBE, resource::TOPIC, name) => {
                        topic_error(name, ResponseError::TopicAuthorizationFailed)
                    }
                    (Some(name), _) => lookup_by_name(ctx, name, allow_auto_create, operations).await,
                    (None, id) => lookup_by_id(ctx, id, operations),
                });
            }
            topics
        }
    };
    let topics = with_authorization(ctx, topics, request.include_topic_authorized_operations);
    // Topic ids exist from v10 and the cluster id from v2 on.
    let topics = if ctx.api_version >= 10 {
        topics
    } else {
        topics.into_iter().map(|t| t.with_topic_id(Uuid::nil())).collect()
    };
    let cluster_operations = match request.include_cluster_authorized_operations {
        true => ctx.authorized_operations(resource::CLUSTER, CLUSTER_NAME),
        false => AUTHORIZED_OPERATIONS_OMITTED,
    };
    let cluster_id = (ctx.api_version >= 2).then(|| str_bytes(ctx.controller().cluster_id()));
    let brokers = live_endpoints(ctx).map(|(id, endpoint, rack)| {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(id))
            .with_host(str_bytes(&endpoint.host))
            .with_port(i32::from(endpoint.port))
            .with_rack(rack.as_deref().map(str_bytes))
    });
    MetadataResponse::default()
        .with_brokers(brokers.collect())
        .with_cluster_id(cluster_id)
        .with_controller_id(BrokerId(ctx.config().node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(cluster_operations)
}

/// Auto-creation needs CREATE on the cluster or on the topic.
fn may_create(ctx: &RequestContext<'_>, name: &str) -> bool {
    ctx.authorize_cluster(operation::CREATE) || ctx.authorize(operation::CREATE, resource::TOPIC, name)
}

/// Topics by id the principal may not describe are refused, and each
/// described topic reports the principal's operations (KIP-430) when asked.
fn with_authorization(
    ctx: &RequestContext<'_>,
    mut topics: Vec<MetadataResponseTopic>,
    include_operations: bool,
) -> Vec<MetadataResponseTopic> {
    for topic in topics.iter_mut().filter(|t| t.error_code == 0) {
        let Some(name) = topic.name.as_ref().map(|n| n.0.to_string()) else { continue };
        if !ctx.authorize(operation::DESCRIBE, resource::TOPIC, &name) {
            *topic = MetadataResponseTopic::default()
                .with_topic_id(topic.topic_id)
                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
        } else if include_operations {
            topic.topic_authorized_operations = ctx.authorized_operations(resource::TOPIC, &name);
        }
    }
    topics
}

async fn lookup_by_name(
    ctx: &RequestContext<'_>,
    name: &str,
    allow_auto_create: bool,
    operations: i32,
) -> MetadataResponseTopic {
    if let Some(topic) = ctx.controller().image().topic(name) {
        return describe_topic(ctx, topic, operations);
    }
    if !(allow_auto_create && ctx.config().auto_create_topics_enable) {
        return topic_error(name, ResponseError::UnknownTopicOrPartition);
    }
    if !may_create(ctx, name) {
        return topic_error(name, ResponseError::TopicAuthorizationFailed);
    }
    match auto_create(ctx, name).await {
        Ok(Some(topic)) => describe_topic(ctx, &topic, operations),
        // Created, not yet in this node's image: the client retries.
        Ok(None) => topic_error(name, ResponseError::LeaderNotAvailable),
        // Another request created it first: describe the winner's topic.
        Err(MetadataError::TopicAlreadyExists(_)) => match ctx.controller().image().topic(name) {
            Some(topic) => describe_topic(ctx, topic, operations),
            None => topic_error(name, ResponseError::LeaderNotAvailable),
        },
        Err(e) => {
            tracing::info!(topic = name, "auto-creation refused: {e}");
            topic_error(name, metadata_error(&e))
        }
    }
}

fn lookup_by_id(ctx: &RequestContext<'_>, id: Uuid, operations: i32) -> MetadataResponseTopic {
    match ctx.controller().image().topic_by_id(&id) {
        Some(topic) => describe_topic(ctx, topic, operations),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(ResponseError::UnknownTopicId.code())
            .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
    }
}

/// Creates `name` with the broker's defaults through the active
/// controller: the topic once this node's image names it, `None` while it
/// does not yet (the client retries).
async fn auto_create(ctx: &RequestContext<'_>, name: &str) -> Result<Option<TopicImage>, MetadataError> {
    let new_topic = NewTopic {
        name: name.to_owned(),
        partitions: ctx.config().num_partitions,
        replication_factor: ctx.config().default_replication_factor,
        ..Default::default()
    };
    ctx.controller().create_topic_at_active(new_topic, ctx.replicas()).await?;
    let topic = ctx.controller().image().topic(name).cloned();
    if let Some(topic) = &topic {
        tracing::info!(topic = name, partitions = topic.partitions.len(), "auto-created topic");
    }
    Ok(topic)
}

fn topic_error(name: &str, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_error_code(error.code())
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn describe_topic(ctx: &RequestContext<'_>, topic: &TopicImage, operations: i32) -> MetadataResponseTopic {
    let hosted = ctx.replicas().topic(&topic.name);
    let (image, node_id) = (ctx.controller().image(), ctx.config().node_id);
    let partitions = topic
        .partitions
        .iter()
        .map(|(index, p)| {
            let state = PartitionState::new(&image, node_id, hosted.as_deref(), &ctx.listener, *index, p);
            MetadataResponsePartition::default()
                .with_error_code(state.error_code())
                .with_partition_index(*index)
                .with_leader_id(BrokerId(state.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(broker_ids(&p.replicas))
                .with_isr_nodes(broker_ids(&p.isr))
                .with_offline_replicas(broker_ids(&state.offline))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_is_internal(topic.is_internal())
        .with_partitions(partitions)
        .with_topic_authorized_operations(operations)
}

pub(super) fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

/// What Metadata and DescribeTopicPartitions say of a partition beyond its
/// image: the leader clients may use and the replicas that are offline.
pub(super) struct PartitionState {
    /// The image's leader, or -1 when it is this broker and its log is offline.
    pub leader: i32,
    /// Replicas that cannot serve, as Kafka's metadata cache finds them (see
    /// [`replica_offline`]), and this broker's replica when its log could
    /// not be opened or went offline.
    pub offline: Vec<i32>,
}

impl PartitionState {
    /// `node_id` is this broker, `hosted` its replicas of the partition's
    /// topic; `listener` the one the client came in through.
    pub fn new(
        image: &MetadataImage,
        node_id: i32,
        hosted: Option<&TopicPartitions>,
        listener: &str,
        index: i32,
        p: &PartitionImage,
    ) -> Self {
        let mut offline: Vec<i32> = (p.replicas.iter().enumerate())
            .filter(|(i, id)| replica_offline(image, **id, p.directories.get(*i), listener))
            .map(|(_, id)| *id)
            .collect();
        // The replica manager knows of a local log gone offline (see
        // ReplicaManager::sync) before the image does.
        let local_offline = p.replicas.contains(&node_id)
            && hosted.and_then(|t| t.get(index)).is_none_or(|partition| !partition.is_online());
        if local_offline && !offline.contains(&node_id) {
            offline.push(node_id);
        }
        let leader = if p.leader == node_id && local_offline { -1 } else { p.leader };
        Self { leader, offline }
    }

    pub fn error_code(&self) -> i16 {
        if self.leader < 0 {
            ResponseError::LeaderNotAvailable.code()
        } else {
            0
        }
    }
}

/// As Kafka's metadata cache judges a replica: offline when its broker is
/// not registered, is fenced, lacks the client's listener, or does not list
/// the replica's log dir among its online ones (`DirectoryId.isOnline`).
fn replica_offline(image: &MetadataImage, id: i32, dir: Option<&Uuid>, listener: &str) -> bool {
    let Some(broker) = image.brokers.get(&id) else { return true };
    let dir_online = match dir {
        None => true,
        Some(d) if *d == DIRECTORY_UNASSIGNED || *d == DIRECTORY_MIGRATING => true,
        Some(d) if *d == DIRECTORY_LOST => false,
        // A registration without directories says nothing about them.
        Some(d) => broker.log_dirs.is_empty() || broker.log_dirs.contains(d),
    };
    broker.fenced || broker.endpoint(listener).is_none() || !dir_online
}

#[cfg(test)]
mod tests {
    use strom_metadata::{BrokerImage, Endpoint};

    use super::*;

    const ONLINE_DIR: Uuid = Uuid::from_u128(0xa);
    const FAILED_DIR: Uuid = Uuid::from_u128(0xb);

    fn image(fenced: bool, log_dirs: Vec<Uuid>) -> MetadataImage {
        let endpoint =
            Endpoint { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port: 9092, security_protocol: 0 };
        let broker = BrokerImage {
            id: 1,
            epoch: 10,
            incarnation_id: Uuid::from_u128(1),
            endpoints: vec![endpoint],
            features: Vec::new(),
            rack: None,
            fenced,
            in_controlled_shutdown: false,
            log_dirs,
        };
        let mut image = MetadataImage::default();
        image.brokers.insert(1, broker);
        image
    }

    #[test]
    fn replicas_on_missing_fenced_or_unlistening_brokers_are_offline() {
        let live = image(false, vec![ONLINE_DIR]);
        assert!(!replica_offline(&live, 1, Some(&ONLINE_DIR), "PLAINTEXT"));
        assert!(!replica_offline(&live, 1, None, "plaintext"), "listener names ignore case");
        assert!(replica_offline(&live, 2, Some(&ONLINE_DIR), "PLAINTEXT"), "not registered");
        assert!(replica_offline(&live, 1, Some(&ONLINE_DIR), "EXTERNAL"), "no endpoint on the listener");
        assert!(replica_offline(&image(true, vec![ONLINE_DIR]), 1, Some(&ONLINE_DIR), "PLAINTEXT"));
    }

    #[test]
    fn a_replica_in_a_dir_its_broker_no_longer_lists_is_offline() {
        let live = image(false, vec![ONLINE_DIR]);
        assert!(replica_offline(&live, 1, Some(&FAILED_DIR), "PLAINTEXT"));
        assert!(replica_offline(&live, 1, Some(&DIRECTORY_LOST), "PLAINTEXT"));
        assert!(!replica_offline(&live, 1, Some(&DIRECTORY_UNASSIGNED), "PLAINTEXT"));
        assert!(!replica_offline(&live, 1, Some(&DIRECTORY_MIGRATING), "PLAINTEXT"));
        // A registration that names no dirs says nothing about them.
        assert!(!replica_offline(&image(false, Vec::new()), 1, Some(&FAILED_DIR), "PLAINTEXT"));
    }
}
