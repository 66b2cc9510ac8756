//! Kafka's `partition.metadata`: the id of the topic whose partition the
//! dir holds, beside its segments. A log that outlived its topic (deleted,
//! then created again under the same name) is told apart by it, and Kafka
//! serves a dir only where the file names the topic of its metadata.
//!
//! The format is two text lines, `version: 0` and `topic_id: <id>` with the
//! id in Kafka's unpadded URL-safe base64.

use std::io;
use std::path::Path;

pub const FILE_NAME: &str = "partition.metadata";

/// The topic id the file in `dir` names; `None` without a file (a log
/// written before Strom kept one) or with one Kafka would not read.
pub fn read(dir: &Path) -> io::Result<Option<String>> {
    let text = match std::fs::read_to_string(dir.join(FILE_NAME)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("version: 0") {
        return Ok(None);
    }
    Ok(lines.next().and_then(|line| line.trim().strip_prefix("topic_id: ")).map(str::to_owned))
}

/// Writes the file naming `topic_id` into `dir` unless one is there, crash
/// safely (a torn file would name no topic).
pub fn write_if_absent(dir: &Path, topic_id: &str) -> io::Result<()> {
    let path = dir.join(FILE_NAME);
    if path.exists() {
        return Ok(());
    }
    crate::checkpoint::write_atomically(&path, format!("version: 0\ntopic_id: {topic_id}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_once_and_reads_back_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write_if_absent(dir.path(), "UF2mt0mfQiSDcpg4XCVY0g").unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(text, "version: 0\ntopic_id: UF2mt0mfQiSDcpg4XCVY0g\n");
        write_if_absent(dir.path(), "AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        assert_eq!(
            read(dir.path()).unwrap().as_deref(),
            Some("UF2mt0mfQiSDcpg4XCVY0g"),
            "the first id stays"
        );
    }

    #[test]
    fn a_file_of_another_version_names_no_topic() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "version: 7\ntopic_id: x\n").unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
    }
}
