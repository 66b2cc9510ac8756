//! Partition replication between brokers, as Kafka's: followers fetch from
//! their leaders ([`fetcher`]), the leader tracks them and moves the high
//! watermark and the ISR ([`isr`]), and ISR changes go to the active
//! controller as AlterPartition ([`alter_partition`]).
//!
//! [`run`] is the replica manager's background side: after each image it
//! hands every followed partition to the fetcher of its leader, and it
//! sends the ISR changes leaders propose (expansions when a follower's
//! fetch catches up, shrinks found every half `replica.lag.time.max.ms`).

pub mod alter_partition;
pub mod fetcher;
pub mod isr;
pub mod purgatory;
#[cfg(test)]
mod sim;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use strom_quorum::channel::Connector;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::controller_channel::ControllerChannel;
use crate::controller_link::ControllerLink;
use crate::quota::QuotaManager;
use crate::replica::ReplicaManager;
use fetcher::Followed;

/// The wake-ups of the replication task.
#[derive(Debug, Default)]
pub struct Replication {
    image_applied: Notify,
    isr_proposed: Notify,
}

impl Replication {
    /// An image was applied: the followed partitions may have changed.
    pub fn image_applied(&self) {
        self.image_applied.notify_one();
    }

    /// A leader proposed an ISR change to send.
    pub fn isr_change_proposed(&self) {
        self.isr_proposed.notify_one();
    }
}

/// What the replication task and its fetchers use of the broker, built
/// once at start.
#[derive(Clone)]
pub struct ReplicationServices {
    pub replicas: Arc<ReplicaManager>,
    /// The newest image and this broker's epoch.
    pub controller: Arc<ControllerChannel>,
    /// The follower side of the replication throttles.
    pub quotas: Arc<QuotaManager>,
    pub wakes: Arc<Replication>,
    /// Opens links to the leaders' inter-broker listeners.
    pub connector: Connector,
}

/// A running fetcher and its assignment.
struct Fetcher {
    assigned: watch::Sender<Vec<Followed>>,
    task: JoinHandle<()>,
}

/// Runs the fetchers and ISR changes of a KRaft broker until it stops.
pub async fn run(services: ReplicationServices, link: Arc<ControllerLink>, mut stop: watch::Receiver<bool>) {
    let lag_ms = services.replicas.config().replica_lag_time_max_ms.max(2) as u64;
    let mut isr_check = tokio::time::interval(Duration::from_millis(lag_ms / 2));
    let mut fetchers: HashMap<(i32, i32), Fetcher> = HashMap::new();
    assign(&services, &mut fetchers, &stop);
    loop {
        tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => break,
            _ = services.wakes.image_applied.notified() => assign(&services, &mut fetchers, &stop),
            _ = services.wakes.isr_proposed.notified() => send_isr_changes(&services, &link),
            _ = isr_check.tick() => {
                for partition in services.replicas.partitions().iter().filter(|p| p.is_leader()) {
                    partition.shrink_isr_proposal();
                }
                send_isr_changes(&services, &link);
            }
        }
    }
    for fetcher in fetchers.into_values() {
        drop(fetcher.assigned);
        let _ = fetcher.task.await;
    }
}

/// Hands each partition this broker follows to the fetcher of its leader
/// (one of `num.replica.fetchers`, by hash), starting and ending fetchers
/// as leaders come and go.
fn assign(
    services: &ReplicationServices,
    fetchers: &mut HashMap<(i32, i32), Fetcher>,
    stop: &watch::Receiver<bool>,
) {
    let me = services.replicas.node_id();
    let count = services.replicas.config().replica_fetch.fetchers.max(1);
    let mut wanted: HashMap<(i32, i32), Vec<Followed>> = HashMap::new();
    for topic in services.replicas.topics() {
        for partition in topic.partitions.values() {
            let set = partition.replica_set();
            if partition.is_leader() || set.leader < 0 || set.leader == me || partition.is_deleted() {
                continue;
            }
            let mut hasher = DefaultHasher::new();
            (&topic.name, partition.tp.partition).hash(&mut hasher);
            let fetcher_id = (hasher.finish() % count as u64) as i32;
            let followed =
                Followed { topic_id: topic.id, partition: partition.clone(), leader_epoch: set.leader_epoch };
            wanted.entry((set.leader, fetcher_id)).or_default().push(followed);
        }
    }
    fetchers.retain(|key, fetcher| {
        let keep = wanted.contains_key(key);
        if !keep {
            fetcher.task.abort();
        }
        keep
    });
    for (key, followed) in wanted {
        match fetchers.get(&key) {
            // Only a changed assignment reaches the fetcher: every image
            // applied passes through here.
            Some(fetcher) => {
                fetcher.assigned.send_if_modified(|current| {
                    let changed = !same_assignment(current, &followed);
                    if changed {
                        *current = followed;
                    }
                    changed
                });
            }
            None => {
                let (assigned, receiver) = watch::channel(followed);
                let task = tokio::spawn(fetcher::run(services.clone(), key.0, receiver, stop.clone()));
                tracing::info!(leader = key.0, fetcher = key.1, "started a replica fetcher");
                fetchers.insert(key, Fetcher { assigned, task });
            }
        }
    }
}

/// Whether two assignments name the same partitions at the same leader epochs.
fn same_assignment(a: &[Followed], b: &[Followed]) -> bool {
    let same = |(x, y): (&Followed, &Followed)| {
        Arc::ptr_eq(&x.partition, &y.partition)
            && x.topic_id == y.topic_id
            && x.leader_epoch == y.leader_epoch
    };
    a.len() == b.len() && a.iter().zip(b).all(same)
}

/// Sends every ISR change a led partition proposed and has not sent.
fn send_isr_changes(services: &ReplicationServices, link: &Arc<ControllerLink>) {
    let broker_epoch = services.controller.broker_epoch();
    for topic in services.replicas.topics() {
        for partition in topic.partitions.values().filter(|p| p.is_leader()) {
            let Some(proposal) = partition.take_isr_proposal(broker_epoch) else { continue };
            tokio::spawn(alter_partition::send(
                link.clone(),
                services.replicas.node_id(),
                broker_epoch,
                topic.id,
                partition.clone(),
                proposal,
            ));
        }
    }
}
