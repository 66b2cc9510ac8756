//! Topics a broker creates on its own account: auto-created topics and the
//! coordinators' internal topics. The active controller (or a single
//! node's) creates them at once; a KRaft broker that is not the active
//! controller sends a CreateTopics to it in the background, as Kafka's
//! `AutoTopicCreationManager` does, and answers as for a topic still being
//! created (LEADER_NOT_AVAILABLE, COORDINATOR_NOT_AVAILABLE) so the
//! client retries until the metadata names it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::CreateTopicsRequest;
use strom_metadata::{block_on, MetadataError, NewTopic, TopicImage};

use crate::controller_link::ControllerLink;
use crate::forwarding::is_not_controller;
use crate::handlers::{str_bytes, topic_name};
use crate::server::Broker;

/// The CreateTopics version a broker sends for the topics it creates.
const CREATE_TOPICS_VERSION: i16 = 7;
/// How long one background creation may look for the active controller.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// The topics this broker has asked the active controller for and not yet
/// heard back about: one request in flight per topic, however often
/// clients ask.
#[derive(Debug, Default, Clone)]
pub struct PendingCreations(Arc<Mutex<HashSet<String>>>);

impl PendingCreations {
    /// Claims `name`; false when a creation of it is already in flight.
    fn claim(&self, name: &str) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_owned())
    }

    fn release(&self, name: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
    }
}

/// Creates `topic`: `Some` with the created topic when this node's
/// controller created it, `None` when the active controller was asked to
/// and the metadata will name the topic once it has.
pub fn create(broker: &Broker, topic: NewTopic) -> Result<Option<TopicImage>, MetadataError> {
    match broker.controller_link() {
        Some(link) if !link.is_active() => {
            create_in_background(broker, link.clone(), topic);
            Ok(None)
        }
        _ => block_on(broker.controller.create_topic_with_logs(topic, false, &broker.replicas)).map(Some),
    }
}

fn create_in_background(broker: &Broker, link: Arc<ControllerLink>, topic: NewTopic) {
    let pending = broker.pending_creations().clone();
    if !pending.claim(&topic.name) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        pending.release(&topic.name);
        tracing::warn!(topic = topic.name, "no runtime to ask the active controller for a topic");
        return;
    };
    runtime.spawn(async move {
        let request = create_topics_request(&topic);
        let outcome = link.send(&request, CREATE_TOPICS_VERSION, CREATE_TIMEOUT, is_not_controller).await;
        pending.release(&topic.name);
        let error = match outcome {
            Ok(response) => response.topics.first().map_or(0, |t| t.error_code),
            Err(e) => {
                tracing::warn!(topic = topic.name, "the active controller did not create the topic: {e}");
                return;
            }
        };
        if error != 0 && error != ResponseError::TopicAlreadyExists.code() {
            tracing::warn!(topic = topic.name, error, "the active controller refused to create the topic");
        }
    });
}

fn create_topics_request(topic: &NewTopic) -> CreateTopicsRequest {
    let configs = topic
        .configs
        .iter()
        .map(|(name, value)| {
            CreatableTopicConfig::default().with_name(str_bytes(name)).with_value(Some(str_bytes(value)))
        })
        .collect();
    let creatable = CreatableTopic::default()
        .with_name(topic_name(&topic.name))
        .with_num_partitions(topic.partitions)
        .with_replication_factor(topic.replication_factor)
        .with_configs(configs);
    CreateTopicsRequest::default()
        .with_topics(vec![creatable])
        .with_timeout_ms(CREATE_TIMEOUT.as_millis() as i32)
}
