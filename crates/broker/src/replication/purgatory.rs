//! Kafka's delayed produce: appends waiting until the high watermark
//! passes them. acks=all Produce and the group coordinator's writes to
//! `__consumer_offsets` wait here.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::replica::Partition;

/// An append waiting for the ISR: the high watermark must pass
/// `required_offset`.
pub struct AwaitedAppend {
    partition: Arc<Partition>,
    required_offset: i64,
    min_insync: usize,
    /// The partition's wake count at registration: only a partition woken
    /// since (which dropped the registration) is watched again.
    watched: Option<u64>,
}

impl AwaitedAppend {
    pub fn new(partition: Arc<Partition>, required_offset: i64, min_insync: usize) -> Self {
        Self { partition, required_offset, min_insync, watched: None }
    }

    /// Whether the ISR already holds the append.
    pub fn is_replicated(&self) -> bool {
        self.outcome() == Some(Ok(()))
    }

    /// None while the append waits; then whether it was replicated.
    fn outcome(&self) -> Option<Result<(), ResponseError>> {
        match () {
            _ if !self.partition.is_leader() => Some(Err(ResponseError::NotLeaderOrFollower)),
            _ if self.partition.high_watermark() < self.required_offset => None,
            _ if self.partition.isr_size() < self.min_insync => {
                Some(Err(ResponseError::NotEnoughReplicasAfterAppend))
            }
            _ => Some(Ok(())),
        }
    }
}

/// Waits until every awaited append is replicated to the ISR, its
/// partition's leadership moves (NOT_LEADER_OR_FOLLOWER), or `timeout`
/// passes (REQUEST_TIMED_OUT, also when the broker stops). An append
/// replicated while the ISR is below `min.insync.replicas` is
/// NOT_ENOUGH_REPLICAS_AFTER_APPEND. Returns the failed appends' keys.
pub async fn await_appends<K>(
    mut stopping: watch::Receiver<bool>,
    mut waits: Vec<(K, AwaitedAppend)>,
    timeout: Duration,
) -> Vec<(K, ResponseError)> {
    let deadline = Instant::now() + timeout;
    let waiter = Arc::new(Notify::new());
    let mut failed = Vec::new();
    loop {
        for (_, wait) in &mut waits {
            if wait.watched != Some(wait.partition.wakes()) {
                wait.watched = Some(wait.partition.watch(&waiter));
            }
        }
        let mut waiting = Vec::with_capacity(waits.len());
        for (key, wait) in waits {
            match wait.outcome() {
                None => waiting.push((key, wait)),
                Some(Ok(())) => {}
                Some(Err(error)) => failed.push((key, error)),
            }
        }
        waits = waiting;
        if waits.is_empty() {
            return failed;
        }
        let timed_out = tokio::select! {
            _ = waiter.notified() => false,
            _ = tokio::time::sleep_until(deadline) => true,
            _ = crate::shutdown::stopped(&mut stopping) => true,
        };
        if timed_out {
            failed.extend(waits.into_iter().map(|(key, _)| (key, ResponseError::RequestTimedOut)));
            return failed;
        }
    }
}

/// [`await_appends`] of one append.
pub async fn await_append(
    stopping: watch::Receiver<bool>,
    wait: AwaitedAppend,
    timeout: Duration,
) -> Result<(), ResponseError> {
    if wait.is_replicated() {
        return Ok(());
    }
    match await_appends(stopping, vec![((), wait)], timeout).await.pop() {
        Some(((), error)) => Err(error),
        None => Ok(()),
    }
}
