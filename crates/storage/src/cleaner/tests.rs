//! The cleaner against a model of compaction, swap recovery after crashes
//! at every step, and the batches Kafka insists on keeping.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kafka_protocol::records::Compression;
use proptest::prelude::*;

use super::*;
use crate::batch::{encode_records, BatchHeader, Batches};
use crate::log::{CleanupPolicy, LogConfig};
use crate::manager::LogDir;
use crate::producer_state::AppendOrigin;
use crate::segment::file_name;
use crate::{Log, TopicPartition};

const T0: i64 = 1_000_000;

/// The one log dir at `root`.
fn log_dirs(root: &Path) -> Vec<Arc<LogDir>> {
    vec![Arc::new(LogDir::new(root.to_owned()))]
}
const DELETE_RETENTION_MS: i64 = 1_000;

fn compact_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 128,
        cleanup_policy: CleanupPolicy { delete: false, compact: true },
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: DELETE_RETENTION_MS,
        ..LogConfig::default()
    }
}

/// One partition log under a root dir, with the manager of that root.
struct Fixture {
    root: tempfile::TempDir,
    tp: TopicPartition,
    log: SharedLog,
    dirs: Vec<Arc<LogDir>>,
    manager: CleanerManager,
}

impl Fixture {
    fn new(config: LogConfig) -> Self {
        let root = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("compacted", 0);
        let log = Log::open(&root.path().join(tp.dir_name()), config, 0, 0, true, 0).unwrap().0;
        let dirs = log_dirs(root.path());
        let manager = CleanerManager::new(&dirs);
        Self { root, tp, log: Arc::new(Mutex::new(log)), dirs, manager }
    }

    fn dir(&self) -> PathBuf {
        self.root.path().join(self.tp.dir_name())
    }

    fn entries(&self) -> Vec<LogEntry> {
        vec![(self.tp.clone(), 0, self.log.clone())]
    }

    /// Appends as the broker, which may also write control batches.
    fn append(&self, batch: &[u8]) -> i64 {
        self.log.lock().unwrap().append_as(batch, 0, 0, AppendOrigin::Coordinator).unwrap().first_offset
    }

    fn roll(&self) {
        self.log.lock().unwrap().roll(0).unwrap();
    }

    /// One round with the given checks; returns whether a log was due.
    fn clean_once(
        &self,
        cleaner: &mut Cleaner,
        now_ms: i64,
        registered: &dyn Fn(&TopicPartition, &SharedLog) -> bool,
        stop: &dyn Fn() -> bool,
    ) -> bool {
        self.manager.clean_dirtiest(&self.entries(), cleaner, registered, stop, now_ms).unwrap()
    }

    /// Cleans until nothing is due; returns the rounds it took.
    fn clean_all(&self, settings: CleanerSettings, now_ms: i64) -> usize {
        let mut cleaner = Cleaner::new(settings);
        for round in 0..10_000 {
            if !self.clean_once(&mut cleaner, now_ms, &|_, _| true, &|| false) {
                assert!(self.manager.uncleanable_partitions().is_empty(), "a cleaning failed");
                return round;
            }
        }
        panic!("cleaning never settled");
    }

    fn records(&self) -> Vec<Seen> {
        let log = self.log.lock().unwrap();
        log.read_records(log.log_end_offset())
            .unwrap()
            .into_iter()
            .map(|r| Seen { offset: r.offset, key: r.key, value: r.value, timestamp: r.timestamp })
            .collect()
    }

    fn batches(&self) -> Vec<BatchHeader> {
        headers(&self.log.lock().unwrap())
    }

    fn files_ending_with(&self, suffix: &str) -> Vec<String> {
        files_ending_with(&self.dir(), suffix)
    }
}

fn files_ending_with(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(suffix))
        .collect()
}

/// Every batch header of the log, in order.
fn headers(log: &Log) -> Vec<BatchHeader> {
    let mut found = Vec::new();
    let mut next = log.log_start_offset();
    while let Some(slice) = log.read(next, 1 << 20, log.log_end_offset(), true).unwrap() {
        let bytes = slice.read().unwrap();
        for raw in Batches::new(&bytes) {
            let header = batch::verify_stored(raw.unwrap()).unwrap();
            next = header.next_offset();
            found.push(header);
        }
    }
    found
}

fn settings(map_slots: usize) -> CleanerSettings {
    CleanerSettings { offset_map_bytes: map_slots * offset_map::SLOT_BYTES, io_buffer_bytes: 4096 }
}

#[derive(Debug, Clone, PartialEq)]
struct Seen {
    offset: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    timestamp: i64,
}

fn key(k: u8) -> Bytes {
    Bytes::from(format!("key-{k}"))
}

/// One produced record: key number, value (None for a tombstone).
type Write = (u8, Option<u16>);

fn value(v: u16) -> Bytes {
    Bytes::from(format!("value-{v}-{}", "x".repeat(usize::from(v % 40))))
}

const CODECS: [Compression; 5] =
    [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

/// Appends `writes` in batches of the given sizes and codecs; returns the
/// model (every record as written) and each batch's (base offset, codec).
fn write_all(fixture: &Fixture, writes: &[Write], layout: &[(usize, usize)]) -> (Vec<Seen>, Vec<(i64, i16)>) {
    let mut written = Vec::new();
    let mut batches = Vec::new();
    let mut rest = writes;
    let mut sizes = layout.iter().cycle();
    while !rest.is_empty() {
        let (size, codec) = *sizes.next().unwrap();
        let (now, later) = rest.split_at(size.clamp(1, rest.len()));
        rest = later;
        let timestamp = T0 - 10_000 + written.len() as i64;
        let entries: Vec<_> = now
            .iter()
            .enumerate()
            .map(|(i, (k, v))| (Some(key(*k)), v.map(value), timestamp + i as i64))
            .collect();
        let base = fixture.append(&encode_records(entries.clone(), CODECS[codec]));
        batches.push((base, CODECS[codec] as i16));
        for (i, (key, value, timestamp)) in entries.into_iter().enumerate() {
            written.push(Seen { offset: base + i as i64, key, value, timestamp });
        }
    }
    (written, batches)
}

/// The latest record of each key, in offset order; tombstones kept or not.
fn compacted(written: &[Seen], keep_tombstones: bool) -> Vec<Seen> {
    let mut latest: BTreeMap<Option<Bytes>, Seen> = BTreeMap::new();
    for record in written {
        latest.insert(record.key.clone(), record.clone());
    }
    let mut expected: Vec<Seen> =
        latest.into_values().filter(|r| keep_tombstones || r.value.is_some()).collect();
    expected.sort_by_key(|r| r.offset);
    expected
}

fn check_batches_keep_their_offsets_and_codec(fixture: &Fixture, written: &[(i64, i16)]) {
    let originals: BTreeMap<i64, i16> = written.iter().copied().collect();
    for header in fixture.batches() {
        let codec = originals.get(&header.base_offset);
        assert!(codec.is_some(), "batch at {} was not a batch before", header.base_offset);
        if header.records_count > 0 {
            assert_eq!(header.compression(), *codec.unwrap(), "codec of batch {}", header.base_offset);
        }
    }
}

fn model_check(writes: Vec<Write>, layout: Vec<(usize, usize)>, segment_bytes: u64, map_slots: usize) {
    let fixture = Fixture::new(compact_config(segment_bytes));
    let (mut written, mut batches) = write_all(&fixture, &writes, &layout);
    fixture.roll();
    let end = fixture.log.lock().unwrap().log_end_offset();
    let segments_before = fixture.log.lock().unwrap().segments().count();

    fixture.clean_all(settings(map_slots), T0);
    assert_eq!(fixture.records(), compacted(&written, true), "after the first cleaning");
    assert_eq!(fixture.log.lock().unwrap().log_end_offset(), end, "log end unchanged");
    assert!(fixture.log.lock().unwrap().segments().count() <= segments_before);
    check_batches_keep_their_offsets_and_codec(&fixture, &batches);
    assert!(
        fixture.files_ending_with(".cleaned").is_empty() && fixture.files_ending_with(".swap").is_empty()
    );

    // Past the delete horizon, a cleaning (new dirty data makes one due)
    // drops the tombstones.
    let (fresh, fresh_batches) = write_all(&fixture, &[(200, Some(7))], &[(1, 0)]);
    written.extend(fresh);
    batches.extend(fresh_batches);
    fixture.roll();
    fixture.clean_all(settings(map_slots), T0 + DELETE_RETENTION_MS + 1);
    let expected = compacted(&written, false);
    assert_eq!(fixture.records(), expected, "after the delete horizon");
    check_batches_keep_their_offsets_and_codec(&fixture, &batches);

    // What is on disk reads back the same.
    let (dir, end) = {
        let mut log = fixture.log.lock().unwrap();
        log.close(0).unwrap();
        (log.dir().to_owned(), log.log_end_offset())
    };
    let (reopened, report) = Log::open(&dir, compact_config(segment_bytes), end, 0, true, 0).unwrap();
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(reopened.log_end_offset(), end);
    let records: Vec<Seen> = reopened
        .read_records(end)
        .unwrap()
        .into_iter()
        .map(|r| Seen { offset: r.offset, key: r.key, value: r.value, timestamp: r.timestamp })
        .collect();
    assert_eq!(records, expected, "after reopening");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn cleaning_keeps_exactly_the_latest_record_of_each_live_key(
        writes in proptest::collection::vec(
            (0u8..24, prop_oneof![4 => any::<u16>().prop_map(Some), 1 => Just(None)]),
            1..300,
        ),
        layout in proptest::collection::vec((1usize..9, 0usize..5), 1..20),
        segment_bytes in 300u64..4000,
        map_slots in 4usize..300,
    ) {
        model_check(writes, layout, segment_bytes, map_slots);
    }
}

#[test]
fn a_full_offset_map_cleans_in_several_rounds() {
    let writes: Vec<Write> = (0..400).map(|i| ((i % 40) as u8, Some(i as u16))).collect();
    let fixture = Fixture::new(compact_config(1500));
    let (written, _) = write_all(&fixture, &writes, &[(5, 0)]);
    fixture.roll();
    let rounds = fixture.clean_all(settings(20), T0);
    assert!(rounds > 2, "a map of 18 keys needs several rounds for 40 keys, took {rounds}");
    assert_eq!(fixture.records(), compacted(&written, true));
}

#[test]
fn small_segments_are_merged_into_one() {
    let fixture = Fixture::new(compact_config(1 << 20));
    for round in 0..10u16 {
        let writes: Vec<Write> = (0..5).map(|k| (k, Some(round))).collect();
        write_all(&fixture, &writes, &[(5, 0)]);
        fixture.roll();
    }
    assert_eq!(fixture.log.lock().unwrap().segments().count(), 11);
    fixture.clean_all(settings(1000), T0);
    assert_eq!(fixture.log.lock().unwrap().segments().count(), 2, "one cleaned segment and the active one");
    let values: Vec<Option<Bytes>> = fixture.records().into_iter().map(|r| r.value).collect();
    assert_eq!(values, vec![Some(value(9)); 5]);
}

#[test]
fn a_disk_failure_takes_the_dir_offline_rather_than_the_log() {
    let fixture = Fixture::new(compact_config(1 << 20));
    write_all(&fixture, &[(1, Some(1)), (1, Some(2))], &[(1, 0)]);
    fixture.roll();
    let before = fixture.batches();
    // The partition dir turns into a file: reads fail with ENOTDIR.
    let dir = fixture.dir();
    std::fs::rename(&dir, dir.with_extension("broken")).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    let mut cleaner = Cleaner::new(settings(100));
    let cleaned =
        fixture.manager.clean_dirtiest(&fixture.entries(), &mut cleaner, &|_, _| true, &|| false, T0);
    assert!(cleaned.unwrap_err().is_disk_failure());
    assert!(!fixture.dirs[0].is_online(), "the dir went offline");
    assert!(fixture.manager.uncleanable_partitions().is_empty(), "the log itself is not to blame");
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(dir.with_extension("broken"), &dir).unwrap();
    assert_eq!(fixture.batches(), before, "nothing was swapped");
    assert!(fixture.files_ending_with(swap::CLEANED_SUFFIX).is_empty());
}

#[test]
fn cleaned_segments_keep_their_indexes_beside_them() {
    let fixture = Fixture::new(LogConfig { index_interval_bytes: 1, ..compact_config(1 << 20) });
    for round in 0..4u16 {
        write_all(&fixture, &[(1, Some(round)), (2, Some(round))], &[(1, 0), (1, 0)]);
    }
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    let log = fixture.log.lock().unwrap();
    let cleaned = log.segments().next().unwrap();
    assert!(!cleaned.is_active() && !cleaned.indexes_loaded(), "swapped in like any inactive segment");
    assert!(cleaned.index().unwrap().entries() > 0, "its index was written beside it");
    let name = |kind| fixture.dir().join(file_name(0, kind));
    assert!(name(".index").exists() && name(".timeindex").exists());
    drop(log);
    assert!(fixture.files_ending_with(swap::CLEANED_SUFFIX).is_empty());
    assert!(fixture.files_ending_with(swap::SWAP_SUFFIX).is_empty());
    let values: Vec<Option<Bytes>> = fixture.records().into_iter().map(|r| r.value).collect();
    assert_eq!(values, vec![Some(value(3)), Some(value(3))]);
}

#[test]
fn tombstones_get_a_delete_horizon_and_keep_their_timestamps() {
    let fixture = Fixture::new(compact_config(1 << 20));
    let (written, _) = write_all(&fixture, &[(1, Some(1)), (1, None), (2, Some(2))], &[(3, 3)]);
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    let header = fixture.batches()[0];
    assert_ne!(header.attributes & filter::DELETE_HORIZON_BIT, 0, "delete horizon flag");
    assert_eq!(header.base_timestamp, T0 + DELETE_RETENTION_MS);
    assert_eq!(header.compression(), Compression::Lz4 as i16);
    assert_eq!(fixture.records(), written[1..].to_vec(), "timestamps survive the new base timestamp");
}

#[test]
fn checkpoint_records_the_first_dirty_offset() {
    let fixture = Fixture::new(compact_config(1 << 20));
    write_all(&fixture, &[(1, Some(1)), (1, Some(2))], &[(1, 0)]);
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    let text = std::fs::read_to_string(fixture.root.path().join(CHECKPOINT_FILE)).unwrap();
    assert_eq!(text, "0\n1\ncompacted 0 2\n");
    let reread = CleanerManager::new(&log_dirs(fixture.root.path()));
    assert_eq!(reread.first_dirty_offset(&fixture.tp), Some(2));
    reread.forget(&fixture.tp, 0).unwrap();
    assert_eq!(CleanerManager::new(&log_dirs(fixture.root.path())).first_dirty_offset(&fixture.tp), None);
}

#[test]
fn nothing_is_due_below_the_dirty_ratio_or_in_the_active_segment() {
    let fixture = Fixture::new(LogConfig { min_cleanable_dirty_ratio: 0.5, ..compact_config(1 << 20) });
    let mut cleaner = Cleaner::new(settings(100));
    write_all(&fixture, &[(1, Some(1)), (2, Some(1)), (3, Some(1)), (1, Some(2))], &[(1, 0)]);
    assert!(!fixture.clean_once(&mut cleaner, T0, &|_, _| true, &|| false), "all in the active segment");
    fixture.roll();
    assert!(fixture.clean_once(&mut cleaner, T0, &|_, _| true, &|| false), "all dirty");
    write_all(&fixture, &[(1, Some(3))], &[(1, 0)]);
    fixture.roll();
    assert!(!fixture.clean_once(&mut cleaner, T0, &|_, _| true, &|| false), "a quarter dirty is below 0.5");
}

#[test]
fn min_compaction_lag_keeps_young_records_dirty() {
    let config = LogConfig { min_compaction_lag_ms: 60_000, ..compact_config(1 << 20) };
    let fixture = Fixture::new(config);
    let mut cleaner = Cleaner::new(settings(100));
    write_all(&fixture, &[(1, Some(1)), (1, Some(2))], &[(1, 0)]);
    fixture.roll();
    // Record timestamps are about T0 - 10s: too young at T0, old enough later.
    assert!(!fixture.clean_once(&mut cleaner, T0, &|_, _| true, &|| false));
    assert!(fixture.clean_once(&mut cleaner, T0 + 60_000, &|_, _| true, &|| false));
    assert_eq!(fixture.records().len(), 1);
}

#[test]
fn max_compaction_lag_forces_a_cleaning_below_the_ratio() {
    let config = LogConfig {
        min_cleanable_dirty_ratio: 0.99,
        max_compaction_lag_ms: 60_000,
        ..compact_config(1 << 20)
    };
    let fixture = Fixture::new(config);
    let mut cleaner = Cleaner::new(settings(100));
    write_all(&fixture, &[(1, Some(1)), (2, Some(2))], &[(1, 0)]);
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    write_all(&fixture, &[(1, Some(3))], &[(1, 0)]);
    fixture.roll();
    assert!(!fixture.clean_once(&mut cleaner, T0, &|_, _| true, &|| false), "below the ratio, not overdue");
    assert!(fixture.clean_once(&mut cleaner, T0 + 60_000, &|_, _| true, &|| false), "overdue");
    assert_eq!(fixture.records().len(), 2);
}

/// Sets a batch's producer fields (and attributes), fixing its CRC.
fn with_producer(mut batch: Vec<u8>, producer_id: i64, base_sequence: i32, extra_attributes: i16) -> Vec<u8> {
    batch[batch::PRODUCER_ID..batch::PRODUCER_ID + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[batch::PRODUCER_EPOCH..batch::PRODUCER_EPOCH + 2].copy_from_slice(&3i16.to_be_bytes());
    batch[batch::BASE_SEQUENCE..batch::BASE_SEQUENCE + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let attributes =
        i16::from_be_bytes([batch[batch::ATTRIBUTES], batch[batch::ATTRIBUTES + 1]]) | extra_attributes;
    batch[batch::ATTRIBUTES..batch::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = batch::compute_crc(&batch);
    batch[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn pair(v: u16) -> Vec<u8> {
    encode_records(
        [(Some(key(1)), Some(value(v)), T0), (Some(key(2)), Some(value(v)), T0)],
        Compression::None,
    )
    .to_vec()
}

#[test]
fn the_last_batch_of_a_producer_stays_as_an_empty_batch() {
    let fixture = Fixture::new(compact_config(1 << 20));
    fixture.append(&with_producer(pair(1), 7, 0, 0));
    let last_of_producer = fixture.append(&with_producer(pair(2), 7, 2, 0));
    fixture.append(&pair(3));
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    let batches = fixture.batches();
    assert_eq!(batches.len(), 2, "the producer's first batch is gone: {batches:?}");
    let kept = batches[0];
    assert_eq!((kept.base_offset, kept.last_offset()), (last_of_producer, last_of_producer + 1));
    assert_eq!((kept.records_count, kept.producer_id, kept.producer_epoch, kept.base_sequence), (0, 7, 3, 2));
    assert_eq!(fixture.records().iter().map(|r| r.offset).collect::<Vec<_>>(), [4, 5]);
}

#[test]
fn control_batches_stay() {
    let fixture = Fixture::new(compact_config(1 << 20));
    fixture.append(&pair(1));
    // An abort marker: control record key (version 0, type 0).
    let marker = encode_records(
        [(Some(Bytes::from_static(&[0, 0, 0, 0])), Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])), T0)],
        Compression::None,
    );
    let marker = with_producer(marker.to_vec(), 9, -1, 0x10 | 0x20);
    let marker_offset = fixture.append(&marker);
    fixture.append(&pair(2));
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    let batches = fixture.batches();
    assert!(batches.iter().any(|h| h.base_offset == marker_offset && h.is_control() && h.records_count == 1));
}

#[test]
fn aborted_transactions_stay_indexed_through_a_cleaning() {
    let fixture = Fixture::new(compact_config(1 << 20));
    let first = fixture.append(&with_producer(pair(1), 9, 0, 0x10));
    fixture.append(&pair(2));
    let abort = batch::encode_marker(batch::ControlType::Abort, 9, 3, 0, T0);
    let marker_offset = fixture.append(&abort);
    fixture.append(&pair(3));
    fixture.roll();
    let end = fixture.log.lock().unwrap().log_end_offset();
    let before = fixture.log.lock().unwrap().collect_aborted_transactions(0, end).unwrap();
    assert_eq!(before.len(), 1);
    assert!(fixture.clean_all(settings(100), T0) > 0, "the log was cleaned");
    let log = fixture.log.lock().unwrap();
    let after = log.collect_aborted_transactions(0, end).unwrap();
    assert_eq!(after, before, "the swap carries the index entries");
    assert_eq!((after[0].first_offset, after[0].last_offset), (first, marker_offset));
    drop(log);
    assert_eq!(fixture.files_ending_with(".txnindex").len(), 1);
}

#[test]
fn produce_to_a_compacted_log_needs_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), compact_config(1 << 20), 0, 0, true, 0).unwrap().0;
    for codec in CODECS {
        let keyless = encode_records([(Some(key(1)), Some(value(1)), T0), (None, Some(value(2)), T0)], codec);
        let refused = log.append(&keyless, 0, 0);
        assert!(
            matches!(refused, Err(StorageError::RejectedRecords { invalid_timestamp: false, .. })),
            "{codec:?}"
        );
        let keyed = encode_records([(Some(key(1)), None, T0)], codec);
        assert!(log.append(&keyed, 0, 0).is_ok(), "{codec:?}: tombstones have keys");
    }
    let mut plain = Log::open(&dir.path().join("plain"), LogConfig::default(), 0, 0, true, 0).unwrap().0;
    assert!(plain.append(&encode_records([(None, Some(value(1)), T0)], Compression::Gzip), 0, 0).is_ok());
}

#[test]
fn shutdown_aborts_a_cleaning_and_leaves_no_files() {
    let fixture = Fixture::new(compact_config(600));
    let writes: Vec<Write> = (0..100).map(|i| ((i % 10) as u8, Some(i as u16))).collect();
    let (written, _) = write_all(&fixture, &writes, &[(2, 1)]);
    fixture.roll();
    let mut cleaner = Cleaner::new(settings(100));
    let calls = std::cell::Cell::new(0);
    let stop_midway = || {
        calls.set(calls.get() + 1);
        calls.get() > 14
    };
    assert!(fixture.clean_once(&mut cleaner, T0, &|_, _| true, &stop_midway));
    assert!(fixture.files_ending_with(".cleaned").is_empty());
    assert_eq!(
        fixture.manager.first_dirty_offset(&fixture.tp),
        None,
        "no checkpoint for an aborted cleaning"
    );
    assert!(fixture.manager.uncleanable_partitions().is_empty());
    // What was swapped before the stop is cleaned; the rest is as written.
    let records = fixture.records();
    let mut expected: Vec<Seen> = written.iter().filter(|w| records.contains(w)).cloned().collect();
    expected.sort_by_key(|r| r.offset);
    assert_eq!(records, expected);
    assert!(compacted(&written, true).iter().all(|r| records.contains(r)));
}

#[test]
fn a_deleted_log_or_changed_segments_abort_the_swap() {
    let fixture = Fixture::new(compact_config(1 << 20));
    let writes: Vec<Write> = (0..20).map(|i| ((i % 4) as u8, Some(i as u16))).collect();
    let (written, _) = write_all(&fixture, &writes, &[(3, 0)]);
    fixture.roll();
    let mut cleaner = Cleaner::new(settings(100));
    assert!(fixture.clean_once(&mut cleaner, T0, &|_, _| false, &|| false));
    assert_eq!(fixture.records(), written, "not swapped into a deleted log");
    assert!(fixture.files_ending_with(".cleaned").is_empty());

    // Retention removing the head segment while the copy is made.
    let removed = std::cell::Cell::new(false);
    let retention = || {
        if !removed.replace(true) {
            let mut log = fixture.log.lock().unwrap();
            let first = *log.segment_map().keys().next().unwrap();
            log.segment_map_mut().remove(&first);
        }
        false
    };
    assert!(fixture.clean_once(&mut cleaner, T0, &|_, _| true, &retention));
    assert!(
        fixture.files_ending_with(".cleaned").is_empty() && fixture.files_ending_with(".swap").is_empty()
    );
    assert!(fixture.manager.uncleanable_partitions().is_empty(), "an abort is not a failure");
    assert_eq!(fixture.manager.first_dirty_offset(&fixture.tp), None);
}

#[test]
fn read_records_steps_over_empty_batches() {
    let fixture = Fixture::new(compact_config(1 << 20));
    fixture.append(&with_producer(pair(1), 7, 0, 0));
    fixture.append(&pair(2));
    fixture.roll();
    fixture.clean_all(settings(100), T0);
    assert_eq!(fixture.batches()[0].records_count, 0);
    assert_eq!(fixture.records().iter().map(|r| r.offset).collect::<Vec<_>>(), [2, 3]);
}

// ------------------------------------------------------------ swap recovery

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn read_dir_log(dir: &Path, clean_shutdown: bool) -> Vec<Seen> {
    let (log, _) = Log::open(dir, compact_config(1 << 20), 0, 0, clean_shutdown, 0).unwrap();
    log.read_records(log.log_end_offset())
        .unwrap()
        .into_iter()
        .map(|r| Seen { offset: r.offset, key: r.key, value: r.value, timestamp: r.timestamp })
        .collect()
}

/// A closed log of several rolled segments (`original`), and a copy of it
/// cleaned into one segment at base 0 (`cleaned`).
struct SwapScenario {
    original: tempfile::TempDir,
    cleaned: tempfile::TempDir,
    original_records: Vec<Seen>,
    cleaned_records: Vec<Seen>,
    replaced_bases: Vec<i64>,
}

fn swap_scenario() -> SwapScenario {
    let fixture = Fixture::new(compact_config(1 << 20));
    for round in 0..4u16 {
        let writes: Vec<Write> = (0..6).map(|k| (k, if k == 5 { None } else { Some(round) })).collect();
        write_all(&fixture, &writes, &[(2, usize::from(round) % 5)]);
        fixture.roll();
    }
    let replaced_bases: Vec<i64> = {
        let mut log = fixture.log.lock().unwrap();
        log.close(0).unwrap();
        let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
        bases[..bases.len() - 1].to_vec()
    };
    let original = tempfile::tempdir().unwrap();
    copy_dir(&fixture.dir(), original.path());
    let original_records = fixture.records();
    fixture.clean_all(settings(100), T0);
    fixture.log.lock().unwrap().close(0).unwrap();
    let cleaned = tempfile::tempdir().unwrap();
    copy_dir(&fixture.dir(), cleaned.path());
    let cleaned_records = fixture.records();
    assert_eq!(fixture.log.lock().unwrap().segments().count(), 2);
    assert_ne!(original_records, cleaned_records);
    SwapScenario { original, cleaned, original_records, cleaned_records, replaced_bases }
}

impl SwapScenario {
    /// Puts the cleaned segment's `kind` file into the original dir with `suffix`.
    fn place(&self, kind: &str, suffix: &str) {
        let from = self.cleaned.path().join(file_name(0, kind));
        std::fs::copy(from, self.original.path().join(file_name(0, &format!("{kind}{suffix}")))).unwrap();
    }

    fn retire_old(&self, bases: &[i64]) {
        for base in bases {
            for kind in [".log", ".index", ".timeindex"] {
                let live = self.original.path().join(file_name(*base, kind));
                std::fs::rename(
                    &live,
                    self.original.path().join(file_name(*base, &format!("{kind}.deleted"))),
                )
                .unwrap();
            }
        }
    }

    fn assert_no_leftovers(&self) {
        for suffix in [".cleaned", ".swap", ".deleted"] {
            assert!(files_ending_with(self.original.path(), suffix).is_empty(), "{suffix} files left");
        }
    }
}

#[test]
fn crash_before_the_swap_keeps_the_old_segments() {
    let scenario = swap_scenario();
    for kind in [".log", ".index", ".timeindex"] {
        scenario.place(kind, ".cleaned");
    }
    scenario.place(".index", ".swap");
    assert_eq!(read_dir_log(scenario.original.path(), true), scenario.original_records);
    scenario.assert_no_leftovers();
}

#[test]
fn crash_after_the_swap_files_exist_completes_the_swap() {
    for clean_shutdown in [true, false] {
        let scenario = swap_scenario();
        for kind in [".log", ".index", ".timeindex"] {
            scenario.place(kind, ".swap");
        }
        assert_eq!(read_dir_log(scenario.original.path(), clean_shutdown), scenario.cleaned_records);
        scenario.assert_no_leftovers();
    }
}

#[test]
fn crash_while_old_segments_are_retired_completes_the_swap() {
    let scenario = swap_scenario();
    scenario.place(".log", ".swap");
    scenario.retire_old(&scenario.replaced_bases[..2]);
    assert_eq!(read_dir_log(scenario.original.path(), true), scenario.cleaned_records);
    scenario.assert_no_leftovers();
}

#[test]
fn crash_while_swap_files_go_live_completes_the_swap() {
    let scenario = swap_scenario();
    scenario.retire_old(&scenario.replaced_bases);
    scenario.place(".index", "");
    scenario.place(".timeindex", ".swap");
    scenario.place(".log", ".swap");
    assert_eq!(read_dir_log(scenario.original.path(), true), scenario.cleaned_records);
    scenario.assert_no_leftovers();
}

#[test]
fn crash_before_retired_files_are_removed_keeps_the_swap() {
    let scenario = swap_scenario();
    scenario.retire_old(&scenario.replaced_bases);
    for kind in [".log", ".index", ".timeindex"] {
        scenario.place(kind, "");
    }
    assert_eq!(read_dir_log(scenario.original.path(), false), scenario.cleaned_records);
    scenario.assert_no_leftovers();
}

// ------------------------------------------------------------ measurement

/// Cleaner throughput and offset-map memory per key on a large log (1 GiB,
/// 1M keys by default; `STROM_CLEANER_BENCH_MB` and `STROM_CLEANER_BENCH_KEYS`
/// change that). Prints numbers; asserts only correctness. Run with
/// `cargo test -p strom-storage cleaner_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "measurement: writes about 1 GiB"]
fn cleaner_throughput() {
    let env =
        |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (target_mb, keys) = (env("STROM_CLEANER_BENCH_MB", 1024), env("STROM_CLEANER_BENCH_KEYS", 1_000_000));
    let fixture = Fixture::new(LogConfig { index_interval_bytes: 4096, ..compact_config(128 << 20) });
    let value = Bytes::from(vec![b'v'; 100]);
    let written_started = Instant::now();
    let mut next_key = 0usize;
    while fixture.log.lock().unwrap().size_bytes() < (target_mb as u64) << 20 {
        let entries: Vec<_> = (0..100)
            .map(|i| {
                next_key = (next_key + 1) % keys;
                (Some(Bytes::from(format!("key-{next_key:07}"))), Some(value.clone()), T0 + i)
            })
            .collect();
        fixture.append(&encode_records(entries, Compression::None));
    }
    fixture.roll();
    let (size, records) = {
        let log = fixture.log.lock().unwrap();
        (log.size_bytes(), log.log_end_offset())
    };
    let write_secs = written_started.elapsed().as_secs_f64();
    let mut cleaner =
        Cleaner::new(CleanerSettings { offset_map_bytes: 128 << 20, io_buffer_bytes: 256 << 10 });
    assert!(fixture.clean_once(&mut cleaner, T0, &|_, _| true, &|| false));
    assert!(fixture.manager.uncleanable_partitions().is_empty());
    let stats = &cleaner.last_stats;
    let mb = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let secs = stats.elapsed.as_secs_f64();
    let map_secs = stats.map_elapsed.as_secs_f64();
    println!("log: {:.0} MiB, {records} records, {keys} keys (written in {write_secs:.1} s)", mb(size));
    println!(
        "cleaning: {:.1} s, {:.1} MiB/s overall; offset map {:.1} s ({:.1} MiB/s), copy {:.1} s ({:.1} MiB/s)",
        secs,
        mb(stats.bytes_read) / secs,
        map_secs,
        mb(stats.map_bytes_read) / map_secs,
        secs - map_secs,
        mb(stats.bytes_read) / (secs - map_secs),
    );
    println!(
        "offset map: {} keys in {:.1} MiB = {:.1} bytes per key; output {:.0} MiB, {} records",
        stats.map_keys,
        mb(stats.map_bytes as u64),
        stats.map_bytes as f64 / stats.map_keys as f64,
        mb(stats.bytes_written),
        stats.records_written,
    );
    assert_eq!(stats.map_keys, keys.min(records as usize));
    assert_eq!(stats.records_written, keys.min(records as usize) as u64);
}
