//! Crash-safe replacement of segments by their cleaned copy, Kafka's way.
//!
//! The cleaner writes the copy of a group of segments as
//! `<base>.log.cleaned` with its `.index.cleaned` and `.timeindex.cleaned`,
//! flushed, without holding the log lock. Then, under the lock, the swap:
//!
//! 1. renames the cleaned files to `.swap`, the `.log` last, and syncs the
//!    dir: from here on a crash keeps the cleaned copy;
//! 2. renames every file of the replaced segments to `.deleted`;
//! 3. renames the `.swap` files to their live names and syncs the dir;
//! 4. puts the new segment in the segment map in place of the old ones and
//!    removes the `.deleted` files (readers still holding an old file keep
//!    reading it until they drop it).
//!
//! [`complete_interrupted_swaps`] runs before a log loads and finishes what a
//! crash interrupted: `.cleaned` and `.deleted` files go, a `.log.swap`
//! replaces every live segment whose base offset lies in the offsets it
//! covers and takes its live name, and `.index.swap`/`.timeindex.swap` files
//! go (a segment without indexes gets them rebuilt by recovery).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::batch::{self, BatchHeader, HEADER_LEN};
use crate::error::Result;
use crate::failpoint;
use crate::log::Log;
use crate::segment::{file_name, LogSegment};

/// The cleaner's output before the swap begins.
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Cleaned output that replaces its segments, even after a crash.
pub const SWAP_SUFFIX: &str = ".swap";
/// Files of replaced or removed segments, about to be deleted.
pub const DELETED_SUFFIX: &str = ".deleted";

/// A segment's files in swap order: the `.log` last, so its rename
/// commits the whole segment.
const SWAPPED_KINDS: [&str; 3] = [".index", ".timeindex", ".log"];
/// Every file a live segment may have.
const LIVE_KINDS: [&str; 4] = [".log", ".index", ".timeindex", ".txnindex"];

fn path(dir: &Path, base: i64, kind: &str, suffix: &str) -> PathBuf {
    dir.join(file_name(base, &format!("{kind}{suffix}")))
}

/// The base offset and kind (`.log`, `.index`, ...) of a live segment file name.
fn parse_live_name(name: &str) -> Option<(i64, &str)> {
    let (digits, kind) = name.split_at_checked(20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !LIVE_KINDS.contains(&kind) {
        return None;
    }
    Some((digits.parse().ok()?, kind))
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn rename_if_exists(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Renames a segment's files; a cleaned copy that kept no record has no
/// indexes (they are created with the first append), its `.log` it has.
fn rename_kinds(dir: &Path, base: i64, from: &str, to: &str) -> io::Result<()> {
    for kind in SWAPPED_KINDS {
        let (source, target) = (path(dir, base, kind, from), path(dir, base, kind, to));
        if kind == ".log" {
            fs::rename(source, target)?;
        } else {
            rename_if_exists(&source, &target)?;
        }
    }
    Ok(())
}

/// Removes the cleaned files of an abandoned cleaning.
pub(crate) fn remove_cleaned(dir: &Path, base: i64) {
    for kind in SWAPPED_KINDS {
        if let Err(e) = remove_if_exists(&path(dir, base, kind, CLEANED_SUFFIX)) {
            tracing::warn!(dir = %dir.display(), base, "cannot remove cleaned file: {e}");
        }
    }
}

/// Replaces the segments at `replaced` (base offsets, ascending) with the
/// flushed `.cleaned` segment at `base`. The caller holds the log lock and
/// has checked that the replaced segments are the ones it cleaned.
pub(crate) fn replace_segments(log: &mut Log, base: i64, replaced: &[i64], now_ms: i64) -> Result<()> {
    let dir = log.dir().to_owned();
    // The cleaner keeps aborted data and markers: their index entries move
    // to the new segment.
    let mut aborted = Vec::new();
    for segment in replaced.iter().filter_map(|old| log.segment_map().get(old)) {
        aborted.extend_from_slice(segment.txn_index()?.entries());
    }
    rename_kinds(&dir, base, CLEANED_SUFFIX, SWAP_SUFFIX)?;
    crate::fsync::sync_dir(&dir)?;
    failpoint::reach(failpoint::CLEANER_SWAP_RENAMED);
    for old in replaced {
        for kind in LIVE_KINDS {
            rename_if_exists(&path(&dir, *old, kind, ""), &path(&dir, *old, kind, DELETED_SUFFIX))?;
        }
    }
    failpoint::reach(failpoint::CLEANER_OLD_DELETED);
    rename_kinds(&dir, base, SWAP_SUFFIX, "")?;
    crate::fsync::sync_dir(&dir)?;
    failpoint::reach(failpoint::CLEANER_SWAPPED_IN);
    let last_replaced = replaced.last().copied().unwrap_or(base);
    let next_base = log.segment_map().range(last_replaced + 1..).next().map(|(b, _)| *b);
    let next_base = next_base.expect("the active segment is never cleaned");
    let mut segment = open_swapped(&dir, base, next_base, log, now_ms)?;
    for entry in aborted {
        segment.txn_index_mut()?.ensure(entry)?;
    }
    let segments = log.segment_map_mut();
    for old in replaced {
        segments.remove(old);
    }
    segments.insert(base, segment);
    for old in replaced {
        for kind in LIVE_KINDS {
            remove_if_exists(&path(&dir, *old, kind, DELETED_SUFFIX))?;
        }
    }
    Ok(())
}

/// The freshly swapped-in segment, inactive and ending where `next_base`
/// begins, like any segment but the last. Its sealed indexes are mapped
/// (and rebuilt if they fail their check) on first use.
fn open_swapped(dir: &Path, base: i64, next_base: i64, log: &Log, now_ms: i64) -> Result<LogSegment> {
    let size = fs::metadata(path(dir, base, ".log", ""))?.len();
    let mut segment = LogSegment::inactive(dir, base, log.config().segment_config(), size, now_ms);
    segment.set_next_offset(next_base);
    Ok(segment)
}

/// Whether `name` is a file [`complete_interrupted_swaps`] deals with.
pub(crate) fn is_leftover(name: &str) -> bool {
    [CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX].iter().any(|suffix| name.ends_with(suffix))
}

/// Finishes swaps a crash interrupted and removes leftovers, before the log
/// in `dir` loads. Returns how many swaps it completed.
pub(crate) fn complete_interrupted_swaps(dir: &Path) -> Result<usize> {
    let mut swaps = Vec::new();
    let mut changed = false;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if name.ends_with(CLEANED_SUFFIX) || name.ends_with(DELETED_SUFFIX) {
            fs::remove_file(&path)?;
            changed = true;
        } else if let Some(stem) = name.strip_suffix(SWAP_SUFFIX) {
            match parse_live_name(stem) {
                Some((base, ".log")) => swaps.push(base),
                _ => {
                    fs::remove_file(&path)?;
                    changed = true;
                }
            }
        }
    }
    swaps.sort_unstable();
    for base in &swaps {
        complete_swap(dir, *base)?;
        changed = true;
    }
    if changed {
        crate::fsync::sync_dir(dir)?;
    }
    Ok(swaps.len())
}

/// Replaces the live segments covered by `<base>.log.swap` with it.
fn complete_swap(dir: &Path, base: i64) -> Result<()> {
    let swap = path(dir, base, ".log", SWAP_SUFFIX);
    // The old segment at `base` goes even when the cleaned copy is empty.
    let end = next_offset(&swap, base)?.max(base + 1);
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if parse_live_name(name).is_some_and(|(b, _)| (base..end).contains(&b)) {
            fs::remove_file(&path)?;
        }
    }
    fs::rename(&swap, path(dir, base, ".log", ""))?;
    tracing::info!(dir = %dir.display(), base, "completed an interrupted segment swap");
    Ok(())
}

/// The offset after the last whole batch of the segment file at `path`.
fn next_offset(path: &Path, base: i64) -> Result<i64> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut position = 0u64;
    let mut next = base;
    let mut header = [0u8; HEADER_LEN];
    while position + HEADER_LEN as u64 <= len {
        file.read_exact_at(&mut header, position)?;
        let Ok(parsed) = BatchHeader::parse(&header) else { break };
        if parsed.magic != batch::MAGIC_V2 || position + parsed.size as u64 > len {
            break;
        }
        next = parsed.next_offset();
        position += parsed.size as u64;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_names_parse() {
        assert_eq!(parse_live_name("00000000000000000042.log"), Some((42, ".log")));
        assert_eq!(parse_live_name("00000000000000000042.timeindex"), Some((42, ".timeindex")));
        assert_eq!(parse_live_name("00000000000000000042.log.swap"), None);
        assert_eq!(parse_live_name("0000000000000000042.log"), None);
        assert_eq!(parse_live_name("leader-epoch-checkpoint"), None);
    }
}
