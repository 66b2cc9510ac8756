//! Kafka's offset checkpoint files (`recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`).
//!
//! The format is text: a version line (`0`), an entry count, then one
//! `topic partition offset` line per partition. Files are replaced atomically
//! (write a temp file, fsync, rename, fsync the directory) so a crash leaves
//! either the old or the new checkpoint, never a torn one.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::TopicPartition;

const VERSION: u32 = 0;

/// A checkpoint file in one log dir.
#[derive(Debug, Clone)]
pub struct OffsetCheckpoint {
    path: PathBuf,
}

impl OffsetCheckpoint {
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Writes all entries, replacing the previous file atomically.
    pub fn write(&self, entries: &BTreeMap<TopicPartition, i64>) -> io::Result<()> {
        let mut text = format!("{VERSION}\n{}\n", entries.len());
        for (tp, offset) in entries {
            text.push_str(&format!("{} {} {offset}\n", tp.topic, tp.partition));
        }
        write_atomically(&self.path, text.as_bytes())
    }

    /// Reads the entries; a missing file is empty. A malformed file is an
    /// error (the caller falls back to full recovery).
    pub fn read(&self) -> io::Result<BTreeMap<TopicPartition, i64>> {
        self.read_into()
    }

    /// [`Self::read`] into any map: a `HashMap` for lookups of many partitions.
    pub fn read_into<M>(&self) -> io::Result<M>
    where
        M: FromIterator<(TopicPartition, i64)> + Default,
    {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(M::default()),
            Err(e) => return Err(e),
        };
        let entries = parse(&text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("malformed checkpoint {}", self.path.display()),
            )
        })?;
        Ok(entries.into_iter().collect())
    }
}

fn parse(text: &str) -> Option<Vec<(TopicPartition, i64)>> {
    parse_entries(text, |line| {
        let mut fields = line.split(' ');
        let (topic, partition, offset) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() {
            return None;
        }
        Some((TopicPartition::new(topic, partition.parse().ok()?), offset.parse().ok()?))
    })
}

/// The entries of a checkpoint in Kafka's text format (version 0, a count,
/// then one entry per line, read by `parse_line`); `None` if malformed. An
/// empty file holds none: Kafka creates its checkpoint files empty.
pub fn parse_entries<T>(text: &str, parse_line: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    let mut lines = text.lines();
    let Some(version) = lines.next() else {
        return Some(Vec::new());
    };
    if version.trim().parse::<u32>().ok()? != VERSION {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let mut entries = Vec::with_capacity(count.min(1 << 20));
    for line in lines.by_ref().take(count) {
        entries.push(parse_line(line)?);
    }
    (entries.len() == count).then_some(entries)
}

/// Kafka's checkpoint text for `lines`, one entry each.
pub fn format_entries(lines: &[String]) -> String {
    let mut text = format!("{VERSION}\n{}\n", lines.len());
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Replaces `path` with `contents` crash-safely: the new contents are on
/// disk before they take the name.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let file = create_with(&tmp, contents)?;
    crate::fsync::sync_all(&file)?;
    fs::rename(&tmp, path)?;
    sync_parent(path)
}

/// Replaces `path` with `contents` through a temporary file, so readers see
/// the old contents or the new, but forces nothing to disk: until the caller
/// has synced the returned file and its directory ([`sync_parent`]), a crash
/// may leave the file torn or missing.
pub fn replace_unsynced(path: &Path, contents: &[u8]) -> io::Result<File> {
    let tmp = path.with_extension("tmp");
    let file = create_with(&tmp, contents)?;
    fs::rename(&tmp, path)?;
    Ok(file)
}

fn create_with(path: &Path, contents: &[u8]) -> io::Result<File> {
    let mut file = File::create(path)?;
    file.write_all(contents)?;
    Ok(file)
}

/// Makes a file's creation or renaming in its directory durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => crate::fsync::sync_dir(dir),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_holds_no_entries_as_kafka_reads_it() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("0\n"), None, "a version without a count is torn");
    }

    #[test]
    fn round_trips_entries() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = OffsetCheckpoint::new(dir.path().join("recovery-point-offset-checkpoint"));
        let mut entries = BTreeMap::new();
        entries.insert(TopicPartition::new("orders", 0), 42);
        entries.insert(TopicPartition::new("orders", 11), 7);
        checkpoint.write(&entries).unwrap();
        let text = fs::read_to_string(dir.path().join("recovery-point-offset-checkpoint")).unwrap();
        assert_eq!(text, "0\n2\norders 0 42\norders 11 7\n");
        assert_eq!(checkpoint.read().unwrap(), entries);
    }

    #[test]
    fn rejects_a_truncated_file() {
        assert!(parse("0\n2\norders 0 42\n").is_none());
        assert!(parse("1\n0\n").is_none());
        assert!(parse("0\n1\norders x 42\n").is_none());
    }
}
