//! Incremental fetch sessions (KIP-227).
//!
//! A client that opens a session (epoch 0) sends its full partition list once;
//! later fetches (epoch 1, 2, …) carry only the partitions whose fetch state
//! changed plus the ones to forget, and the response carries only partitions
//! with news: records, an error, or a moved high watermark or log start.
//! Epoch -1 fetches without a session. The cache holds at most
//! `max.incremental.fetch.session.cache.slots` sessions, dropping the least
//! recently used when full.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use crate::locks::lock_recovering;

/// Sessions idle this long are dropped (Kafka's eviction interval).
const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

/// One partition a fetch reads, as the client last described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTarget {
    /// Resolved topic name; empty when the request named an unknown topic id.
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
}

impl FetchTarget {
    fn key(&self) -> (Uuid, String, i32) {
        (self.topic_id, self.topic.clone(), self.partition)
    }
}

/// The partitions a fetch reads and how its response is shaped.
#[derive(Debug)]
pub struct FetchPlan {
    /// The session id the response carries (0 for none).
    pub session_id: i32,
    pub targets: Vec<FetchTarget>,
    /// Whether only partitions with news go in the response.
    pub incremental: bool,
}

/// What the response reported for a partition last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionNews {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// A consumer waiting on read_committed learns of a transaction's end
    /// through it.
    pub last_stable_offset: i64,
}

#[derive(Debug)]
struct CachedPartition {
    target: FetchTarget,
    last_sent: Option<PartitionNews>,
}

#[derive(Debug)]
struct Session {
    next_epoch: i32,
    partitions: Vec<CachedPartition>,
    last_used: Instant,
}

pub struct FetchSessionCache {
    slots: usize,
    sessions: Mutex<HashMap<i32, Session>>,
}

impl FetchSessionCache {
    pub fn new(slots: usize) -> Self {
        Self { slots, sessions: Mutex::new(HashMap::new()) }
    }

    /// Resolves which partitions a fetch reads, opening, advancing or closing
    /// its session. Errors are the top-level fetch error codes.
    pub fn begin(
        &self,
        session_id: i32,
        epoch: i32,
        requested: Vec<FetchTarget>,
        forgotten: &[(Uuid, String, i32)],
    ) -> Result<FetchPlan, ResponseError> {
        let mut sessions = lock_recovering(&self.sessions, "fetch sessions");
        match epoch {
            FINAL_EPOCH => {
                sessions.remove(&session_id);
                Ok(FetchPlan { session_id: 0, targets: requested, incremental: false })
            }
            INITIAL_EPOCH => {
                sessions.remove(&session_id);
                let session_id = self.open(&mut sessions, &requested);
                Ok(FetchPlan { session_id, targets: requested, incremental: false })
            }
            _ => {
                let session = sessions.get_mut(&session_id).ok_or(ResponseError::FetchSessionIdNotFound)?;
                if session.next_epoch != epoch {
                    return Err(ResponseError::InvalidFetchSessionEpoch);
                }
                session.next_epoch = next_epoch(epoch);
                session.last_used = Instant::now();
                session.partitions.retain(|p| !forgotten.contains(&p.target.key()));
                for target in requested {
                    match session.partitions.iter_mut().find(|p| p.target.key() == target.key()) {
                        Some(cached) => cached.target = target,
                        None => session.partitions.push(CachedPartition { target, last_sent: None }),
                    }
                }
                let targets = session.partitions.iter().map(|p| p.target.clone()).collect();
                Ok(FetchPlan { session_id, targets, incremental: true })
            }
        }
    }

    fn open(&self, sessions: &mut HashMap<i32, Session>, targets: &[FetchTarget]) -> i32 {
        if self.slots == 0 {
            return 0;
        }
        if sessions.len() >= self.slots {
            let oldest = sessions.iter().min_by_key(|(_, s)| s.last_used).map(|(id, _)| *id);
            if let Some(id) = oldest {
                sessions.remove(&id);
            }
        }
        let id = loop {
            let candidate = (Uuid::new_v4().as_u128() as i32) & i32::MAX;
            if candidate != 0 && !sessions.contains_key(&candidate) {
                break candidate;
            }
        };
        let partitions =
            targets.iter().map(|t| CachedPartition { target: t.clone(), last_sent: None }).collect();
        sessions.insert(id, Session { next_epoch: 1, partitions, last_used: Instant::now() });
        id
    }

    /// Records what the response reports and decides, for an incremental
    /// fetch, which partitions it includes. `news[i]` belongs to
    /// `plan.targets[i]`; returns whether each is included.
    pub fn finish(&self, plan: &FetchPlan, news: &[(PartitionNews, bool)]) -> Vec<bool> {
        let mut sessions = lock_recovering(&self.sessions, "fetch sessions");
        let Some(session) = sessions.get_mut(&plan.session_id) else {
            return vec![true; news.len()];
        };
        plan.targets
            .iter()
            .zip(news)
            .map(|(target, (state, has_data_or_error))| {
                let cached = session.partitions.iter_mut().find(|p| p.target.key() == target.key());
                let Some(cached) = cached else { return !plan.incremental };
                let changed = cached.last_sent != Some(*state);
                cached.last_sent = Some(*state);
                !plan.incremental || *has_data_or_error || changed
            })
            .collect()
    }

    /// Drops sessions idle for longer than the eviction timeout.
    pub fn evict_expired(&self) {
        let now = Instant::now();
        lock_recovering(&self.sessions, "fetch sessions")
            .retain(|_, s| now - s.last_used < SESSION_IDLE_TIMEOUT);
    }

    pub fn len(&self) -> usize {
        lock_recovering(&self.sessions, "fetch sessions").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Epochs wrap from i32::MAX to 1, never to the reserved 0 and -1.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(partition: i32, offset: i64) -> FetchTarget {
        FetchTarget {
            topic: "t".into(),
            topic_id: Uuid::nil(),
            partition,
            fetch_offset: offset,
            partition_max_bytes: 1024,
        }
    }

    fn news(hw: i64) -> (PartitionNews, bool) {
        (PartitionNews { high_watermark: hw, log_start_offset: 0, last_stable_offset: hw }, false)
    }

    #[test]
    fn given_session_when_incremental_fetch_should_send_only_changes() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(0, 0, vec![target(0, 0), target(1, 0)], &[]).unwrap();
        assert!(!plan.incremental);
        assert_ne!(plan.session_id, 0);
        assert_eq!(cache.finish(&plan, &[news(5), news(7)]), vec![true, true]);

        // Epoch 1 names nothing: both partitions are still fetched, only the
        // one whose high watermark moved is reported.
        let next = cache.begin(plan.session_id, 1, vec![], &[]).unwrap();
        assert!(next.incremental);
        assert_eq!(next.targets.len(), 2);
        assert_eq!(cache.finish(&next, &[news(5), news(9)]), vec![false, true]);

        // Forgetting a partition removes it; a stale epoch is refused.
        let forget = cache.begin(plan.session_id, 2, vec![], &[(Uuid::nil(), "t".into(), 0)]).unwrap();
        assert_eq!(forget.targets, vec![target(1, 0)]);
        assert_eq!(
            cache.begin(plan.session_id, 2, vec![], &[]).unwrap_err(),
            ResponseError::InvalidFetchSessionEpoch
        );
        assert_eq!(cache.begin(12345, 1, vec![], &[]).unwrap_err(), ResponseError::FetchSessionIdNotFound);
    }

    #[test]
    fn updated_partitions_replace_their_cached_state() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(0, 0, vec![target(0, 0)], &[]).unwrap();
        let next = cache.begin(plan.session_id, 1, vec![target(0, 42)], &[]).unwrap();
        assert_eq!(next.targets, vec![target(0, 42)]);
    }

    #[test]
    fn a_full_cache_drops_the_least_recently_used_session() {
        let cache = FetchSessionCache::new(2);
        let first = cache.begin(0, 0, vec![target(0, 0)], &[]).unwrap().session_id;
        cache.begin(0, 0, vec![target(0, 0)], &[]).unwrap();
        cache.begin(0, 0, vec![target(0, 0)], &[]).unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.begin(first, 1, vec![], &[]).unwrap_err(), ResponseError::FetchSessionIdNotFound);
        let sessionless = cache.begin(0, -1, vec![target(0, 0)], &[]).unwrap();
        assert_eq!(sessionless.session_id, 0);
    }
}
