//! What the group and transaction coordinators need from the broker around
//! them: their internal partitions, the metadata image, replication waits,
//! producer ids and links to the other brokers. [`group`](crate::group)
//! and [`txn`](crate::txn) see the broker only through [`CoordinatorHost`],
//! so they do not depend on the whole [`Broker`](crate::server::Broker)
//! (and a test can stand in for one part of it, such as the wait for the
//! ISR).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use strom_metadata::MetadataImage;
use strom_quorum::channel::Connector;
use tokio::sync::watch;

use crate::group::GroupCoordinator;
use crate::replica::ReplicaManager;
use crate::replication::purgatory::AwaitedAppend;
use crate::txn::TransactionCoordinator;

/// The wait for an append to reach the ISR.
pub type Replication<'a> = Pin<Box<dyn Future<Output = Result<(), ResponseError>> + Send + 'a>>;
/// A producer id, once reserved.
pub type ProducerIdReservation<'a> = Pin<Box<dyn Future<Output = Result<i64, ResponseError>> + Send + 'a>>;

/// The broker as the coordinators use it.
pub trait CoordinatorHost: Send + Sync {
    fn node_id(&self) -> i32;
    /// The partitions this broker hosts.
    fn replicas(&self) -> &ReplicaManager;
    /// The newest metadata image.
    fn metadata_image(&self) -> Arc<MetadataImage>;
    fn groups(&self) -> &GroupCoordinator;
    fn transactions(&self) -> &TransactionCoordinator;
    /// NOT_COORDINATOR unless this broker leads `topic`-`partition`.
    fn check_leads(&self, topic: &str, partition: i32) -> Result<(), ResponseError>;
    /// The topic's `min.insync.replicas`, at least 1.
    fn min_insync_replicas(&self, topic: &str) -> usize;
    /// Waits until the ISR holds `wait`'s append (the produce purgatory).
    fn await_append(&self, wait: AwaitedAppend, timeout: Duration) -> Replication<'_>;
    /// Flips to true when the broker begins to stop.
    fn stopping(&self) -> watch::Receiver<bool>;
    /// A producer id from this broker's reserved block, which is refilled
    /// from the active controller.
    fn next_producer_id(&self) -> ProducerIdReservation<'_>;
    /// Opens links to the other brokers' inter-broker listeners.
    fn inter_broker_connector(&self) -> &Connector;
    /// `host:port` of broker `id`'s inter-broker listener.
    fn inter_broker_address(&self, image: &MetadataImage, id: i32) -> Option<String>;
}

/// Waits for a coordinator's write to reach the ISR, answering failures as
/// Kafka's coordinators do: a lost leadership is NOT_COORDINATOR, a
/// timeout or too small an ISR COORDINATOR_NOT_AVAILABLE (both retriable).
pub async fn replicated(
    host: &dyn CoordinatorHost,
    wait: AwaitedAppend,
    timeout: Duration,
) -> Result<(), ResponseError> {
    host.await_append(wait, timeout).await.map_err(|error| match error {
        ResponseError::NotLeaderOrFollower => ResponseError::NotCoordinator,
        ResponseError::RequestTimedOut
        | ResponseError::NotEnoughReplicas
        | ResponseError::NotEnoughReplicasAfterAppend => ResponseError::CoordinatorNotAvailable,
        other => other,
    })
}

/// Test stand-ins for the broker.
#[cfg(test)]
pub mod testing {
    use super::*;
    use crate::server::Broker;

    /// The broker, except that its writes reach the ISR only once the test
    /// says how (and from then on all the same way).
    pub struct HeldReplication {
        broker: Arc<Broker>,
        outcome: tokio::sync::watch::Sender<Option<Result<(), ResponseError>>>,
    }

    impl HeldReplication {
        pub fn new(broker: &Arc<Broker>) -> Self {
            Self { broker: broker.clone(), outcome: tokio::sync::watch::Sender::new(None) }
        }

        pub fn replicate(&self, outcome: Result<(), ResponseError>) {
            self.outcome.send_replace(Some(outcome));
        }
    }

    impl CoordinatorHost for HeldReplication {
        fn node_id(&self) -> i32 {
            self.broker.node_id()
        }
        fn replicas(&self) -> &crate::replica::ReplicaManager {
            self.broker.replicas()
        }
        fn metadata_image(&self) -> Arc<strom_metadata::MetadataImage> {
            self.broker.metadata_image()
        }
        fn groups(&self) -> &crate::group::GroupCoordinator {
            self.broker.groups()
        }
        fn transactions(&self) -> &crate::txn::TransactionCoordinator {
            self.broker.transactions()
        }
        fn check_leads(&self, topic: &str, partition: i32) -> Result<(), ResponseError> {
            self.broker.check_leads(topic, partition)
        }
        fn min_insync_replicas(&self, topic: &str) -> usize {
            CoordinatorHost::min_insync_replicas(&*self.broker, topic)
        }
        fn await_append(
            &self,
            _wait: AwaitedAppend,
            _timeout: Duration,
        ) -> crate::coordinator_host::Replication<'_> {
            let mut outcome = self.outcome.subscribe();
            Box::pin(async move {
                let decided = outcome.wait_for(Option::is_some).await.map(|o| *o);
                decided.ok().flatten().unwrap_or(Err(ResponseError::RequestTimedOut))
            })
        }
        fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
            self.broker.stopping()
        }
        fn next_producer_id(&self) -> crate::coordinator_host::ProducerIdReservation<'_> {
            CoordinatorHost::next_producer_id(&*self.broker)
        }
        fn inter_broker_connector(&self) -> &strom_quorum::channel::Connector {
            self.broker.inter_broker_connector()
        }
        fn inter_broker_address(&self, image: &strom_metadata::MetadataImage, id: i32) -> Option<String> {
            self.broker.inter_broker_address(image, id)
        }
    }
}
