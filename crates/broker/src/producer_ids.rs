//! Producer ids for idempotent producers, handed out from blocks the
//! controller reserves in the metadata log.
//!
//! A block is recorded (and fsync'd) before its first id leaves the broker,
//! so a restart, even after a crash, starts from a fresh block and never
//! reuses an id; the ids left in the old block are simply skipped.

use std::sync::{Mutex, PoisonError};

use strom_metadata::{MetadataError, ProducerIdBlock};

/// The broker's current block of producer ids.
#[derive(Debug, Default)]
pub struct ProducerIdManager {
    block: Mutex<ProducerIdBlock>,
}

impl ProducerIdManager {
    /// The next unused producer id, reserving a new block from the
    /// controller (`allocate`) when this one is spent.
    pub fn next_id(
        &self,
        allocate: impl FnOnce() -> Result<ProducerIdBlock, MetadataError>,
    ) -> Result<i64, MetadataError> {
        // The block is replaced only by a whole new one: a panic cannot tear it.
        let mut block = self.block.lock().unwrap_or_else(PoisonError::into_inner);
        if block.is_empty() {
            *block = allocate()?;
        }
        let id = block.start;
        block.start += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::server::Broker;
    use strom_metadata::{block_on, PRODUCER_ID_BLOCK_SIZE};

    #[test]
    fn ids_are_unique_across_blocks_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let overrides = [("log.dirs".to_owned(), dir.path().display().to_string())];
        let open = || Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap();
        let broker = open();
        let manager = ProducerIdManager::default();
        let next = |broker: &Broker, manager: &ProducerIdManager| {
            manager.next_id(|| broker.allocate_producer_ids()).unwrap()
        };
        let first: Vec<i64> = (0..PRODUCER_ID_BLOCK_SIZE + 2).map(|_| next(&broker, &manager)).collect();
        assert_eq!(first, (0..PRODUCER_ID_BLOCK_SIZE + 2).collect::<Vec<_>>());
        let allocate_stale =
            || block_on(broker.controller.allocate_producer_ids(1, broker.broker_epoch() + 1));
        let stale = ProducerIdManager::default().next_id(allocate_stale);
        assert!(matches!(stale, Err(MetadataError::StaleBrokerEpoch(_))), "{stale:?}");
        drop(broker);
        let broker = open();
        let after_restart = next(&broker, &ProducerIdManager::default());
        assert_eq!(after_restart, 2 * PRODUCER_ID_BLOCK_SIZE, "the partly used block is never reused");
    }
}
