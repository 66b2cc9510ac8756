//! Replication throttles (KIP-73), as Kafka's `ReplicationQuotaManager`.
//!
//! A broker keeps two byte rates: what it sends as a leader to followers
//! (`leader.replication.throttled.rate`) and what its fetchers take as a
//! follower (`follower.replication.throttled.rate`). Only the partitions a
//! topic's `leader.replication.throttled.replicas` (or `follower.…`) names
//! for this broker are throttled, but every throttled partition's bytes
//! count, in sync or not. Once a rate is over its bound, throttled
//! partitions of replicas outside the ISR are left out of fetches (Kafka's
//! `shouldLeaderThrottle` and `shouldFollowerThrottle`): in-sync replicas
//! are never held back, so a throttle cannot shrink the ISR.

use std::sync::Mutex;
use std::time::Instant;

use strom_metadata::topic_config::throttled_replicas;
use strom_metadata::MetadataImage;

use super::{QuotaWindow, Rate};

/// One side's replication byte rate.
#[derive(Debug)]
pub struct ReplicationQuota {
    started: Instant,
    /// Made at the first recording, with the configured window.
    rate: Mutex<Option<Rate>>,
}

impl Default for ReplicationQuota {
    fn default() -> Self {
        Self { started: Instant::now(), rate: Mutex::new(None) }
    }
}

impl ReplicationQuota {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Counts `bytes` of throttled partitions replicated.
    pub fn record(&self, bytes: usize, window: QuotaWindow) {
        if bytes == 0 {
            return;
        }
        let now = self.now_ms();
        let mut rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        rate.get_or_insert_with(|| Rate::simple(window, now)).record(bytes as f64, now);
    }

    /// Whether the rate is over `bound` bytes/s (never for Kafka's default
    /// of `Long.MAX_VALUE`, no throttle).
    pub fn is_exceeded(&self, bound: i64) -> bool {
        if bound == i64::MAX {
            return false;
        }
        let rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        rate.as_ref().is_some_and(|rate| rate.measure(self.now_ms()) > bound as f64)
    }

    /// The rate measured now, in bytes/s.
    pub fn measured(&self) -> f64 {
        let rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        rate.as_ref().map_or(0.0, |rate| rate.measure(self.now_ms()))
    }
}

/// Whether `topic`'s `list_config` (`leader.replication.throttled.replicas`
/// or `follower.…`) throttles `partition` on broker `node_id`.
pub fn is_throttled(
    image: &MetadataImage,
    list_config: &str,
    topic: &str,
    partition: i32,
    node_id: i32,
) -> bool {
    let Some(value) = image.topic(topic).and_then(|t| t.configs.get(list_config)) else { return false };
    throttled_replicas(value).is_some_and(|list| list.contains(partition, node_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_bound_is_never_exceeded_and_a_bound_is_once_passed() {
        let quota = ReplicationQuota::default();
        let window = QuotaWindow { samples: 11, window_ms: 1000 };
        assert!(!quota.is_exceeded(1000), "nothing recorded yet");
        quota.record(5_000, window);
        assert!(!quota.is_exceeded(i64::MAX));
        assert!(quota.is_exceeded(1000), "5000 bytes in under a window is over 1000/s");
        assert!(!quota.is_exceeded(10_000));
    }
}
