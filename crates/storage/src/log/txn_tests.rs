//! Transactions in the log: the last stable offset, markers and the
//! aborted-transaction index, across rolls and restarts.

use super::*;
use crate::batch::{encode_marker, ControlType};
use crate::producer_state::test_support::{idempotent_batch, transactional_batch};
use crate::producer_state::AppendOrigin;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        max_index_bytes: 1024,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, clean: bool) -> Log {
    Log::open(dir, config(), 0, 0, clean, 0).unwrap().0
}

fn marker(log: &mut Log, control: ControlType, producer_id: i64, epoch: i16) -> Result<AppendInfo> {
    let bytes = encode_marker(control, producer_id, epoch, 3, 0);
    log.append_as(&bytes, 0, 0, AppendOrigin::Coordinator)
}

fn produce(log: &mut Log, bytes: Vec<u8>) -> AppendInfo {
    log.append(&bytes, 0, 0).unwrap()
}

#[test]
fn the_last_stable_offset_waits_for_the_earliest_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    produce(&mut log, transactional_batch(1, 0, 0, 3)); // 0..=2
    produce(&mut log, transactional_batch(2, 0, 0, 2)); // 3..=4
    produce(&mut log, crate::batch::test_support::batch(1, 0, kafka_protocol::records::Compression::None)); // 5
    let end = log.log_end_offset();
    assert_eq!(log.last_stable_offset(end), 0);
    let commit = marker(&mut log, ControlType::Commit, 1, 0).unwrap();
    assert_eq!(commit.first_offset, 6);
    assert_eq!(log.last_stable_offset(log.log_end_offset()), 3, "producer 2 is still open");
    let abort = marker(&mut log, ControlType::Abort, 2, 0).unwrap();
    let end = log.log_end_offset();
    assert_eq!(log.last_stable_offset(end), end);
    assert_eq!(log.last_stable_offset(5), 5, "never past the high watermark");
    assert_eq!(
        log.collect_aborted_transactions(0, end).unwrap(),
        vec![AbortedTxn {
            producer_id: 2,
            first_offset: 3,
            last_offset: abort.first_offset,
            last_stable_offset: 8
        }]
    );
    assert!(log.collect_aborted_transactions(abort.first_offset + 1, end).unwrap().is_empty());
    assert!(
        log.collect_aborted_transactions(0, 3).unwrap().is_empty(),
        "the range ends before the abort begins"
    );
    let state = log.producer_state().get(2).unwrap();
    assert_eq!((state.current_txn_first_offset, state.coordinator_epoch), (None, 3));
}

#[test]
fn transactional_rules_are_kafkas() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    produce(&mut log, transactional_batch(1, 0, 0, 1));
    let plain = log.append(&idempotent_batch(1, 0, 1, 1), 0, 0);
    assert!(matches!(plain, Err(StorageError::InvalidTxnState(_))), "{plain:?}");
    // A client may not write markers, even without a producer id; a
    // coordinator marker of an old epoch is refused.
    let forged = encode_marker(ControlType::Commit, 1, 0, 0, 0);
    assert!(matches!(log.append(&forged, 0, 0), Err(StorageError::InvalidRecord(_))));
    let anonymous = encode_marker(ControlType::Commit, -1, -1, 0, 0);
    assert!(matches!(log.append(&anonymous, 0, 0), Err(StorageError::InvalidRecord(_))));
    let coordinator = log.append_as(&anonymous, 0, 0, AppendOrigin::Coordinator);
    assert!(matches!(coordinator, Err(StorageError::InvalidRecord(_))));
    // The coordinator fences the producer: its abort carries epoch 1.
    marker(&mut log, ControlType::Abort, 1, 1).unwrap();
    assert!(matches!(marker(&mut log, ControlType::Abort, 1, 0), Err(StorageError::InvalidProducerEpoch(_))));
    let fenced = log.append(&transactional_batch(1, 0, 1, 1), 0, 0);
    assert!(matches!(fenced, Err(StorageError::InvalidProducerEpoch(_))), "{fenced:?}");
    produce(&mut log, transactional_batch(1, 1, 0, 1));
    assert_eq!(log.last_stable_offset(log.log_end_offset()), 2, "the new transaction is open");
}

#[test]
fn a_marker_from_an_older_coordinator_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    produce(&mut log, transactional_batch(1, 0, 0, 1));
    marker(&mut log, ControlType::Commit, 1, 0).unwrap(); // coordinator epoch 3
    produce(&mut log, transactional_batch(1, 0, 1, 1));
    let stale = encode_marker(ControlType::Commit, 1, 0, 2, 0);
    let refused = log.append_as(&stale, 0, 0, AppendOrigin::Coordinator);
    assert!(matches!(refused, Err(StorageError::CoordinatorFenced(_))), "{refused:?}");
    assert_eq!(log.last_stable_offset(log.log_end_offset()), 2, "the transaction is still open");
    let newer = encode_marker(ControlType::Commit, 1, 0, 4, 0);
    log.append_as(&newer, 0, 0, AppendOrigin::Coordinator).unwrap();
    assert_eq!(log.producer_state().get(1).unwrap().coordinator_epoch, 4);
}

#[test]
fn aborts_are_found_from_the_segment_of_their_data_to_that_of_their_marker() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    let first = produce(&mut log, transactional_batch(9, 0, 0, 2));
    let mut sequence = 0;
    while log.segments().count() < 3 {
        produce(&mut log, idempotent_batch(4, 0, sequence, 5));
        sequence += 5;
    }
    let abort = marker(&mut log, ControlType::Abort, 9, 0).unwrap();
    let end = log.log_end_offset();
    let marker_segment = log.segment_for(abort.first_offset).unwrap();
    assert_eq!(marker_segment.txn_index().unwrap().entries().len(), 1, "indexed where the marker is");
    let found = log.collect_aborted_transactions(first.first_offset, end).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].first_offset, found[0].last_offset), (first.first_offset, abort.first_offset));
}

#[test]
fn restarts_keep_open_transactions_and_rebuild_lost_index_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    produce(&mut log, transactional_batch(1, 0, 0, 2));
    produce(&mut log, transactional_batch(2, 0, 0, 2));
    let abort = marker(&mut log, ControlType::Abort, 2, 0).unwrap();
    let end = log.log_end_offset();
    log.close(0).unwrap();
    drop(log);
    let log = open(dir.path(), true);
    assert_eq!(log.last_stable_offset(end), 0, "the open transaction survives a clean restart");
    assert_eq!(log.collect_aborted_transactions(0, end).unwrap().len(), 1);
    drop(log);
    // A crash that lost the index entry: replay from the log start rebuilds it.
    let index = dir.path().join(crate::segment::file_name(0, crate::txn_index::TXN_INDEX_SUFFIX));
    std::fs::remove_file(index).unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let log = open(dir.path(), false);
    assert_eq!(log.last_stable_offset(end), 0);
    let found = log.collect_aborted_transactions(0, end).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].producer_id, found[0].last_offset), (2, abort.first_offset));
}

#[test]
fn the_broker_writes_inside_a_producers_transaction_without_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    let offsets = || [(Some(bytes::Bytes::from_static(b"k")), Some(bytes::Bytes::from_static(b"v")), 0)];
    let write = |log: &mut Log| {
        let batch = crate::batch::encode_transactional(offsets(), 5, 2);
        log.append_as(&batch, 0, 0, AppendOrigin::Coordinator)
    };
    assert_eq!(write(&mut log).unwrap().records, 1);
    assert_eq!(write(&mut log).unwrap().records, 1, "no sequence: never a duplicate");
    assert_eq!(log.last_stable_offset(log.log_end_offset()), 0);
    marker(&mut log, ControlType::Commit, 5, 2).unwrap();
    assert_eq!(log.last_stable_offset(log.log_end_offset()), log.log_end_offset());
    let stale = crate::batch::encode_transactional(offsets(), 5, 1);
    assert!(matches!(
        log.append_as(&stale, 0, 0, AppendOrigin::Coordinator),
        Err(StorageError::InvalidProducerEpoch(_))
    ));
}
