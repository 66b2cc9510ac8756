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
    /// Held while a new block is reserved, so concurrent requests for an
    /// id wait for one block instead of each reserving its own.
    allocating: tokio::sync::Mutex<()>,
}

impl ProducerIdManager {
    /// The next unused producer id, reserving a new block from the
    /// controller (`allocate`) when this one is spent.
    pub async fn next_id_async<F>(&self, allocate: impl FnOnce() -> F) -> Result<i64, MetadataError>
    where
        F: std::future::Future<Output = Result<ProducerIdBlock, MetadataError>>,
    {
        if let Some(id) = self.take_if_any() {
            return Ok(id);
        }
        let _allocating = self.allocating.lock().await;
        // Another request may have reserved a block while this one waited.
        if let Some(id) = self.take_if_any() {
            return Ok(id);
        }
        let reserved = allocate().await?;
        let mut block = self.block();
        if block.is_empty() {
            *block = reserved;
        }
        Ok(take(&mut block))
    }

    fn take_if_any(&self) -> Option<i64> {
        let mut block = self.block();
        (!block.is_empty()).then(|| take(&mut block))
    }

    fn block(&self) -> std::sync::MutexGuard<'_, ProducerIdBlock> {
        // The block is replaced only by a whole new one: a panic cannot tear it.
        self.block.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The first id of a non-empty `block`, taken out of it.
fn take(block: &mut ProducerIdBlock) -> i64 {
    let id = block.start;
    block.start += 1;
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::server::Broker;
    use strom_metadata::PRODUCER_ID_BLOCK_SIZE;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ids_are_unique_across_blocks_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let overrides = [("log.dirs".to_owned(), dir.path().display().to_string())];
        let open = || Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap();
        let broker = open();
        let manager = ProducerIdManager::default();
        let mut first = Vec::new();
        for _ in 0..PRODUCER_ID_BLOCK_SIZE + 2 {
            first.push(
                manager
                    .next_id_async(|| broker.controller().allocate_producer_ids_at_active())
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(first, (0..PRODUCER_ID_BLOCK_SIZE + 2).collect::<Vec<_>>());
        let allocate_stale = || broker.controller().allocate_producer_ids(1, broker.broker_epoch() + 1);
        let stale = ProducerIdManager::default().next_id_async(allocate_stale).await;
        assert!(matches!(stale, Err(MetadataError::StaleBrokerEpoch(_))), "{stale:?}");
        drop(broker);
        let broker = open();
        let after_restart = ProducerIdManager::default()
            .next_id_async(|| broker.controller().allocate_producer_ids_at_active())
            .await;
        assert_eq!(
            after_restart.unwrap(),
            2 * PRODUCER_ID_BLOCK_SIZE,
            "the partly used block is never reused"
        );
    }
}
