//! Producer ids for idempotent producers, handed out from blocks the
//! controller reserves in the metadata log.
//!
//! A block is recorded (and fsync'd) before its first id leaves the broker,
//! so a restart, even after a crash, starts from a fresh block and never
//! reuses an id; the ids left in the old block are simply skipped.

use std::sync::{Mutex, PoisonError};

use strom_metadata::{Controller, MetadataError, ProducerIdBlock};

/// The broker's current block of producer ids.
#[derive(Debug, Default)]
pub struct ProducerIdManager {
    block: Mutex<ProducerIdBlock>,
}

impl ProducerIdManager {
    /// The next unused producer id, reserving a new block when this one is spent.
    pub fn next_id(&self, controller: &Controller, broker_id: i32) -> Result<i64, MetadataError> {
        // The block is replaced only by a whole new one: a panic cannot tear it.
        let mut block = self.block.lock().unwrap_or_else(PoisonError::into_inner);
        if block.is_empty() {
            *block = controller.allocate_producer_ids(broker_id)?;
        }
        let id = block.start;
        block.start += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_metadata::PRODUCER_ID_BLOCK_SIZE;

    #[test]
    fn ids_are_unique_across_blocks_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let controller = Controller::open(dir.path(), 1).unwrap();
        let manager = ProducerIdManager::default();
        let first: Vec<i64> =
            (0..PRODUCER_ID_BLOCK_SIZE + 2).map(|_| manager.next_id(&controller, 1).unwrap()).collect();
        assert_eq!(first, (0..PRODUCER_ID_BLOCK_SIZE + 2).collect::<Vec<_>>());
        drop(controller);
        let controller = Controller::open(dir.path(), 1).unwrap();
        let after_restart = ProducerIdManager::default().next_id(&controller, 1).unwrap();
        assert_eq!(after_restart, 2 * PRODUCER_ID_BLOCK_SIZE, "the partly used block is never reused");
    }
}
