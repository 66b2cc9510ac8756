//! Transactional produce verification (KIP-890 part 1), as Kafka 4 does it.
//!
//! A transactional batch may start a transaction in a partition's log only
//! once the transaction coordinator has said that the partition belongs to
//! the producer's ongoing transaction; otherwise nothing would ever write
//! the marker that ends it, and the partition's last stable offset would
//! stay behind it for good. Later batches of the same transaction need no
//! second word: the log shows the transaction open until its marker.
//!
//! The coordinator is asked without the log lock held (in a cluster it is
//! another broker), so its answer could be stale by the time of the append:
//! the transaction may have ended in between, its marker written. A guard
//! closes that gap: taken before asking, spent by any transactional batch
//! or marker of the producer, and required at the append. A marker landing
//! between the answer and the append spends it, and the append is refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use strom_storage::batch::{BatchHeader, Batches};
use strom_storage::{Log, StorageError};

use crate::locks::lock_recovering;

/// One verification's token: the append must present the one still current.
pub type Guard = u64;

/// The verifications in flight on one partition, by producer id. One per
/// producer, so the entries are bounded by the requests in flight; the lock
/// is a leaf, taken alone or under the log lock.
#[derive(Debug, Default)]
pub struct Verifications {
    guards: Mutex<HashMap<i64, Guard>>,
    next_guard: AtomicU64,
}

impl Verifications {
    /// Each change is one map operation, so a panic leaves nothing half done.
    fn guards(&self) -> MutexGuard<'_, HashMap<i64, Guard>> {
        lock_recovering(&self.guards, "transactional produce verifications")
    }

    /// The guard for a verification of `producer_id`: the one a concurrent
    /// request of the same producer already holds, else a new one.
    pub fn begin(&self, producer_id: i64) -> Guard {
        let mut guards = self.guards();
        *guards.entry(producer_id).or_insert_with(|| self.next_guard.fetch_add(1, Ordering::Relaxed))
    }

    /// Drops `guard` after a failed verification or append.
    pub fn abandon(&self, producer_id: i64, guard: Guard) {
        let mut guards = self.guards();
        if guards.get(&producer_id) == Some(&guard) {
            guards.remove(&producer_id);
        }
    }

    /// A batch or marker of the producer's transaction reached the log.
    fn spend(&self, producer_id: i64) {
        self.guards().remove(&producer_id);
    }

    fn holds(&self, producer_id: i64, guard: Option<Guard>) -> bool {
        guard.is_some() && self.guards().get(&producer_id) == guard.as_ref()
    }

    /// Kafka's check at the append, for every batch of a client's record
    /// set: a transactional batch needs its producer's transaction open in
    /// `log` already, or `guard` still current. Call under the log lock.
    pub fn check(&self, log: &Log, records: &[u8], guard: Option<Guard>) -> Result<(), StorageError> {
        for header in transactional_headers(records) {
            let ongoing = log
                .producer_state()
                .get(header.producer_id)
                .is_some_and(|entry| entry.current_txn_first_offset.is_some());
            if !header.is_control() && !ongoing && !self.holds(header.producer_id, guard) {
                return Err(StorageError::InvalidTxnState(format!(
                    "producer {} wrote a transactional batch to a partition not verified in its transaction",
                    header.producer_id
                )));
            }
        }
        Ok(())
    }

    /// Spends the guards of the producers whose transactional batches or
    /// markers `records` appended. Call under the log lock, after the append.
    pub fn appended(&self, records: &[u8]) {
        for header in transactional_headers(records) {
            self.spend(header.producer_id);
        }
    }
}

/// The headers of the transactional batches (data or markers) in `records`;
/// a damaged tail is the log's to refuse.
fn transactional_headers(records: &[u8]) -> impl Iterator<Item = BatchHeader> + '_ {
    Batches::new(records)
        .map_while(Result::ok)
        .filter_map(|raw| BatchHeader::parse(raw).ok())
        .filter(|header| header.is_transactional())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_requests_of_a_producer_share_a_guard_until_it_is_spent() {
        let verifications = Verifications::default();
        let first = verifications.begin(7);
        assert_eq!(verifications.begin(7), first, "a second in-flight request shares it");
        assert_ne!(verifications.begin(8), first);
        assert!(verifications.holds(7, Some(first)));
        verifications.spend(7);
        assert!(!verifications.holds(7, Some(first)), "a marker or batch spent it");
        let second = verifications.begin(7);
        assert_ne!(second, first, "a spent guard never comes back (no ABA)");
        verifications.abandon(7, first);
        assert!(verifications.holds(7, Some(second)), "abandoning a stale guard leaves the current one");
        verifications.abandon(7, second);
        assert!(!verifications.holds(7, Some(second)));
        assert!(!verifications.holds(7, None));
    }
}
