//! The metadata loader: applies committed batches and snapshots of the
//! metadata log to the image and publishes each new image.
//!
//! Whatever writes the log (the local log on a single node, the KRaft
//! quorum in a cluster) hands the loader what has been committed, in offset
//! order. Readers take the latest published image, an `Arc` that never
//! changes under them, and may wait for the applied offset to reach a given
//! one, which is how the controller answers only after its records have
//! been committed and applied. Publishers registered with
//! [`MetadataLoader::add_publisher`] (Kafka's `MetadataPublisher`) see each
//! image before anyone waiting for its offset is released: a broker applies
//! it to its partitions there, so a client answered after a metadata write
//! finds the partitions that write created.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use crate::controller::MetadataError;
use crate::image::{snapshot_records, MetadataImage};
use crate::kraft_records::{DecodeError, MetadataRecord};

/// Encodes one record as a metadata log value: frame version 1, Kafka's
/// type id, and the record version Kafka 4.1 writes (the partition records
/// at version 2, which carries eligible leader replicas).
pub fn encode_record(record: &MetadataRecord) -> Bytes {
    let version = match record {
        MetadataRecord::Partition(_) | MetadataRecord::PartitionChange(_) => 2,
        other => other.versions().1,
    };
    let mut out = BytesMut::new();
    record.encode_frame(version, &mut out).expect("records built by Strom fit their version");
    out.freeze()
}

/// Decodes one metadata log value.
pub fn decode_record(value: &[u8]) -> Result<MetadataRecord, DecodeError> {
    MetadataRecord::decode_frame(value).map(|(record, _)| record)
}

/// Called with each published image, in offset order.
pub type Publisher = Box<dyn Fn(&Arc<MetadataImage>) + Send + Sync>;

/// Builds and publishes metadata images from committed records.
pub struct MetadataLoader {
    publishers: Mutex<Vec<Publisher>>,
    image: watch::Sender<Arc<MetadataImage>>,
    /// The offset of the last record applied, -1 before any.
    applied: watch::Sender<i64>,
    /// Applies one batch at a time, so no two writers race on the next
    /// image; holds the first and last offsets and the epoch of the latest batches, so the
    /// controller can tell its own appended batch from another leader's.
    applying: Mutex<VecDeque<(i64, i64, i32)>>,
}

/// How many recent batches' epochs the loader remembers.
const RECENT_BATCHES: usize = 4096;

impl Default for MetadataLoader {
    fn default() -> Self {
        Self::new()
    }
}

impl MetadataLoader {
    pub fn new() -> Self {
        Self {
            publishers: Mutex::new(Vec::new()),
            image: watch::channel(Arc::new(MetadataImage::empty())).0,
            applied: watch::channel(-1).0,
            applying: Mutex::new(VecDeque::new()),
        }
    }

    /// The latest published image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// Has `publisher` called with every image published from now on, then
    /// once with the current one. It runs while the loader applies, so it
    /// must not write metadata itself.
    pub fn add_publisher(&self, publisher: Publisher) {
        let _applying = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        publisher(&self.image());
        self.publishers.lock().unwrap_or_else(PoisonError::into_inner).push(publisher);
    }

    /// A receiver that sees every newly published image.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image.subscribe()
    }

    /// A receiver of the offset of the last applied record (-1 before any).
    pub fn applied_offset(&self) -> watch::Receiver<i64> {
        self.applied.subscribe()
    }

    /// Waits until the record at `offset` has been applied and published.
    pub async fn wait_for_offset(&self, offset: u64) {
        let mut applied = self.applied.subscribe();
        // The sender lives in `self`, so the channel cannot close under us.
        let _ = applied.wait_for(|last| *last >= offset as i64).await;
    }

    /// The leader epoch of the applied batch holding `offset`, if it is
    /// one of the latest batches applied.
    pub fn batch_epoch(&self, offset: u64) -> Option<i32> {
        let recent = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        let index = recent.partition_point(|(_, last, _)| *last < offset as i64);
        let (first, _, epoch) = recent.get(index)?;
        (*first <= offset as i64).then_some(*epoch)
    }

    /// Applies one committed batch whose first record is at `base_offset`.
    /// Records already applied (a batch handed over twice) are skipped. A
    /// batch with a record this version cannot decode is refused whole and
    /// the image stays as it was: an image that skipped it would silently
    /// differ from every other node's.
    pub fn apply_batch(&self, base_offset: u64, epoch: i32, records: &[Bytes]) -> Result<(), MetadataError> {
        let mut recent = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.image();
        let offsets = (base_offset as i64..).zip(records);
        let fresh: Vec<(i64, &Bytes)> = offsets.filter(|(offset, _)| *offset > current.last_offset).collect();
        let Some((last_offset, _)) = fresh.last().copied() else { return Ok(()) };
        let first_offset = fresh[0].0;
        let mut decoded = Vec::with_capacity(fresh.len());
        for (offset, value) in fresh {
            let record =
                decode_record(value).map_err(|reason| MetadataError::UnreadableRecord { offset, reason })?;
            decoded.push(record);
        }
        let mut next = (*current).clone();
        decoded.into_iter().for_each(|record| next.apply(record));
        next.last_offset = last_offset;
        self.publish(next);
        if recent.len() == RECENT_BATCHES {
            recent.pop_front();
        }
        recent.push_back((first_offset, last_offset, epoch));
        Ok(())
    }

    /// Replaces the image with a snapshot's: the records of `content` rebuild
    /// it from nothing, up to (not including) `end_offset`.
    pub fn load_snapshot(&self, end_offset: u64, content: &[Bytes]) -> Result<(), MetadataError> {
        let mut recent = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        recent.clear();
        let last_offset = end_offset as i64 - 1;
        let mut next = MetadataImage::empty();
        for value in content {
            let record = decode_record(value)
                .map_err(|reason| MetadataError::UnreadableRecord { offset: last_offset, reason })?;
            next.apply(record);
        }
        next.last_offset = last_offset;
        self.publish(next);
        Ok(())
    }

    fn publish(&self, next: MetadataImage) {
        let last_offset = next.last_offset;
        let image = Arc::new(next);
        self.image.send_replace(image.clone());
        for publisher in self.publishers.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            publisher(&image);
        }
        // After the image: whoever sees the offset finds the image with it.
        self.applied.send_replace(last_offset);
    }
}

/// The snapshot content of `image`: its records, encoded as log values.
pub fn snapshot_content(image: &MetadataImage) -> Vec<Bytes> {
    snapshot_records(image).iter().map(encode_record).collect()
}
