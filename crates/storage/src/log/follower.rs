//! Appends from replication: a follower writes its leader's batches as
//! they are (offsets, leader epochs, producer fields and timestamps kept),
//! as Kafka's `appendAsFollower`. The batches are checked for integrity
//! (framing, CRC, offsets that only go forward), never against client
//! rules: the leader already applied them. The producer state, the
//! transaction index and the leader epoch cache follow what was written,
//! so a follower that becomes leader deduplicates retries as its leader did.

use super::Log;
use crate::batch::{self, BatchHeader, Batches, HEADER_LEN};
use crate::error::{Result, StorageError};
use crate::segment::PreparedBatch;
use crate::AppendInfo;

impl Log {
    /// Appends `records`, whole v2 batches read from the leader's log.
    /// Nothing is written unless every batch is intact and the first starts
    /// at or past the log end offset.
    pub fn append_as_follower(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo> {
        let headers = self.check_replicated(records)?;
        let (Some(first), Some(last)) = (headers.first(), headers.last()) else {
            return Err(StorageError::CorruptRecord("empty record set".into()));
        };
        let log_end = self.log_end_offset();
        if self.log_start_offset == log_end && first.base_offset < log_end && first.last_offset() >= log_end {
            // An empty log starting inside the leader's first batch (its log
            // start moved into the batch): as Kafka does, the log restarts
            // at the batch, its log start kept.
            self.truncate_fully_and_start_at(first.base_offset, log_end, now_ms)?;
        }
        let log_end = self.log_end_offset();
        if first.base_offset < log_end {
            return Err(StorageError::InvalidRecord(format!(
                "replicated batches start at offset {} below the log end offset {log_end}",
                first.base_offset
            )));
        }
        let (first_offset, last_offset) = (first.base_offset, last.last_offset());
        let mut prepared = Vec::with_capacity(headers.len());
        let mut rest = records;
        for header in &headers {
            let (raw, tail) = rest.split_at(header.size);
            rest = tail;
            prepared.push(PreparedBatch {
                header: raw[..HEADER_LEN].try_into().expect("checked"),
                body: &raw[HEADER_LEN..],
                last_offset: header.last_offset(),
                max_timestamp: header.max_timestamp,
            });
        }
        self.maybe_roll(records.len(), last_offset, first.max_timestamp, now_ms)?;
        for header in &headers {
            self.leader_epochs.observe(header.partition_leader_epoch, header.base_offset)?;
        }
        self.active_mut().append(&prepared)?;
        let mut rest = records;
        let mut completed = Vec::new();
        for header in &headers {
            let (raw, tail) = rest.split_at(header.size);
            rest = tail;
            let marker = header.is_control().then(|| batch::end_txn_marker(raw)).flatten();
            completed.extend(self.producers.state.replay(header, marker));
        }
        self.index_aborted(&completed)?;
        let appended = headers.iter().map(|h| h.records_count as u64).sum();
        self.unflushed_messages += appended;
        if self.unflushed_messages >= self.config.flush_interval_messages {
            self.flush(now_ms)?;
        }
        Ok(AppendInfo {
            first_offset,
            last_offset,
            log_append_time: -1,
            records: appended,
            bytes: records.len(),
        })
    }

    /// The headers of `records`: whole v2 batches with good CRCs whose
    /// offsets only go forward.
    fn check_replicated(&self, records: &[u8]) -> Result<Vec<BatchHeader>> {
        let mut batches = Batches::new(records);
        let mut headers: Vec<BatchHeader> = Vec::new();
        for raw in batches.by_ref() {
            let raw = raw?;
            let header = BatchHeader::parse(raw)?;
            if header.magic != batch::MAGIC_V2 || batch::compute_crc(raw) != header.crc {
                return Err(StorageError::CorruptRecord("a replicated batch is damaged".into()));
            }
            if header.last_offset_delta < 0
                || headers.last().is_some_and(|p| header.base_offset <= p.last_offset())
            {
                return Err(StorageError::InvalidRecord("replicated offsets must increase".into()));
            }
            headers.push(header);
        }
        if !batches.remaining().is_empty() {
            return Err(StorageError::CorruptRecord("record set ends with a partial batch".into()));
        }
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogConfig;
    use crate::producer_state::test_support::idempotent_batch;

    fn open(dir: &std::path::Path) -> Log {
        Log::open(dir, LogConfig::small(4096), 0, 0, true, 0).unwrap().0
    }

    #[test]
    fn a_follower_copies_its_leaders_batches_with_their_offsets_epochs_and_producers() {
        let (leader_dir, follower_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut leader = open(leader_dir.path());
        let mut follower = open(follower_dir.path());
        for (i, epoch) in [(0, 1), (1, 1), (2, 4), (3, 4)] {
            leader.append(&idempotent_batch(9, 0, i * 3, 3), epoch, 0).unwrap();
        }
        let slice = leader.read(0, 1 << 20, leader.log_end_offset(), true).unwrap().unwrap();
        let bytes = slice.read().unwrap();
        let info = follower.append_as_follower(&bytes, 0).unwrap();
        assert_eq!((info.first_offset, info.last_offset, info.records), (0, 11, 12));
        assert_eq!(follower.log_end_offset(), 12);
        let copied = follower.read(0, 1 << 20, 12, true).unwrap().unwrap().read().unwrap();
        assert_eq!(copied, bytes, "byte for byte");
        assert_eq!(follower.leader_epochs().entries(), leader.leader_epochs().entries());
        assert_eq!(follower.end_offset_for_epoch(1), (1, 6));
        // The follower knows the producer: a retry of the last batch is a duplicate.
        let retry = follower.append(&idempotent_batch(9, 0, 9, 3), 5, 0).unwrap();
        assert_eq!((retry.first_offset, retry.records), (9, 0));
        // Going back is refused and writes nothing.
        assert!(follower.append_as_follower(&bytes, 0).is_err());
        assert_eq!(follower.log_end_offset(), 12);
    }

    #[test]
    fn an_empty_follower_starting_inside_the_leaders_first_batch_restarts_at_the_batch() {
        let (leader_dir, follower_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut leader = open(leader_dir.path());
        leader.append(&idempotent_batch(9, 0, 0, 3), 1, 0).unwrap();
        leader.append(&idempotent_batch(9, 0, 3, 3), 1, 0).unwrap();
        // DeleteRecords to offset 4, inside the second batch (3..=5).
        leader.advance_log_start_offset(4).unwrap();
        let mut follower = open(follower_dir.path());
        follower.truncate_fully_and_start_at(4, 4, 0).unwrap();
        let slice = leader.read(4, 1 << 20, leader.log_end_offset(), true).unwrap().unwrap();
        let info = follower.append_as_follower(&slice.read().unwrap(), 0).unwrap();
        assert_eq!((info.first_offset, info.last_offset), (3, 5));
        assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (4, 6));
        assert_eq!(follower.segments().next().unwrap().base_offset(), 3);
    }
}
