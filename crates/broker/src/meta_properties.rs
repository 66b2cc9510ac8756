//! Kafka's `meta.properties`: the file in every log dir that says which
//! cluster and node the dir belongs to, and the dir's own id (KIP-858).
//!
//! `strom storage format` writes it (as `kafka-storage.sh format` does);
//! a single-node Strom (no `process.roles`) writes it itself on first
//! start. It is the one source of truth for the cluster id: at every start
//! all dirs must agree on the cluster id, and with the configured
//! `node.id`, with Kafka's messages when they do not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::config::BrokerConfig;

pub const META_PROPERTIES: &str = "meta.properties";

/// A refusal to format or to start, in one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError(message.into()))
}

/// One dir's `meta.properties` (version 1, the KRaft version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    /// The dir's id, a Kafka UUID string.
    pub directory_id: String,
}

impl MetaProperties {
    /// The file's text: Java properties, as Kafka writes them.
    pub fn to_text(&self) -> String {
        format!(
            "#\n#Kafka meta.properties, written by Strom\nversion=1\ncluster.id={}\nnode.id={}\ndirectory.id={}\n",
            self.cluster_id, self.node_id, self.directory_id
        )
    }

    /// Parses the file at `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, FormatError> {
        let pairs = crate::properties::parse(text)
            .map_err(|e| FormatError(format!("{}: malformed line {}", path.display(), e.line)))?;
        let get = |key: &str| pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.trim());
        match get("version") {
            Some("1") => {}
            Some(version) => {
                return fail(format!("Unsupported meta.properties version {version} in {}", path.display()))
            }
            None => return fail(format!("version was not specified in {}", path.display())),
        }
        let Some(cluster_id) = get("cluster.id") else {
            return fail(format!("cluster.id was not specified in the v1 file: {}", path.display()));
        };
        let Some(node_id) = get("node.id") else {
            return fail(format!("node.id was not specified in {}", path.display()));
        };
        let node_id = node_id
            .parse()
            .map_err(|_| FormatError(format!("Failed to parse node.id {node_id:?} in {}", path.display())))?;
        let directory_id = get("directory.id").unwrap_or_default().to_owned();
        if !directory_id.is_empty() && parse_uuid(&directory_id).is_none() {
            return fail(format!(
                "Unable to read directory.id as a Uuid: {directory_id} in {}",
                path.display()
            ));
        }
        Ok(Self { cluster_id: cluster_id.to_owned(), node_id, directory_id })
    }
}

/// The dirs a node formats: every log dir and the metadata log dir, each once.
/// The `directory.id` of the formatted log dir `dir`, if any.
pub fn directory_id(dir: &Path) -> Option<[u8; 16]> {
    let path = dir.join(META_PROPERTIES);
    let text = std::fs::read_to_string(&path).ok()?;
    parse_uuid(&MetaProperties::parse(&text, &path).ok()?.directory_id)
}

pub fn node_dirs(config: &BrokerConfig) -> Vec<PathBuf> {
    let mut dirs: BTreeSet<PathBuf> = config.log_dirs.iter().cloned().collect();
    dirs.insert(config.metadata_log_dir.clone());
    dirs.into_iter().collect()
}

/// What the dirs hold: their `meta.properties`, or nothing yet.
#[derive(Debug, Default)]
pub struct LogDirs {
    pub formatted: Vec<(PathBuf, MetaProperties)>,
    pub unformatted: Vec<PathBuf>,
}

impl LogDirs {
    /// Reads every dir's `meta.properties`; a missing dir or file is unformatted.
    pub fn load(dirs: &[PathBuf]) -> Result<Self, FormatError> {
        let mut loaded = Self::default();
        for dir in dirs {
            if dir.exists() && !dir.is_dir() {
                return fail(format!("{} is not a directory", dir.display()));
            }
            let path = dir.join(META_PROPERTIES);
            match std::fs::read_to_string(&path) {
                Ok(text) => loaded.formatted.push((dir.clone(), MetaProperties::parse(&text, &path)?)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => loaded.unformatted.push(dir.clone()),
                Err(e) => return fail(format!("I/O error trying to read {}: {e}", path.display())),
            }
        }
        Ok(loaded)
    }

    /// The cluster id all formatted dirs agree on (`None` when none is
    /// formatted), checking Kafka's rules: one cluster id, the configured
    /// node id, distinct directory ids.
    pub fn verify(&self, node_id: i32) -> Result<Option<&str>, FormatError> {
        let mut cluster_id: Option<&str> = None;
        let mut directory_ids: Vec<(&str, &Path)> = Vec::new();
        for (dir, meta) in &self.formatted {
            let path = dir.join(META_PROPERTIES);
            match cluster_id {
                Some(expected) if expected != meta.cluster_id => {
                    let (path, read) = (path.display(), &meta.cluster_id);
                    return fail(format!(
                        "Invalid cluster.id in: {path}. Expected {expected}, but read {read}"
                    ));
                }
                _ => cluster_id = Some(&meta.cluster_id),
            }
            if meta.node_id != node_id {
                return fail(format!(
                    "Stored node id {} doesn't match previous node id {node_id} in {}. If you moved your data, make sure your configured node id matches. If you intend to create a new node, you should remove all data in your data directories.",
                    meta.node_id,
                    path.display()
                ));
            }
            if meta.directory_id.is_empty() {
                continue;
            }
            if parse_uuid(&meta.directory_id).is_some_and(|bytes| is_reserved_directory_id(&bytes)) {
                let (id, dir) = (&meta.directory_id, dir.display());
                return fail(format!("Invalid reserved directory ID {id} found in {dir}"));
            }
            if let Some((_, other)) = directory_ids.iter().find(|(id, _)| *id == meta.directory_id) {
                let (id, other, dir) = (&meta.directory_id, other.display(), dir.display());
                return fail(format!(
                    "Duplicate directory ID {id} found. It was the ID of {other}, but also of {dir}"
                ));
            }
            directory_ids.push((&meta.directory_id, dir));
        }
        Ok(cluster_id)
    }

    /// A KRaft node starts only on formatted dirs.
    pub fn require_formatted(&self) -> Result<(), FormatError> {
        match self.unformatted.first() {
            None => Ok(()),
            Some(dir) => fail(format!(
                "No meta.properties found in {} (have you run `strom storage format` to format the directory?)",
                dir.display()
            )),
        }
    }

    /// Writes `meta.properties` into each unformatted dir, creating it if
    /// needed, each with a fresh directory id except where `ids` names one
    /// (a dynamic voter's metadata dir). `on_format` hears of each dir first.
    pub fn format(
        &self,
        cluster_id: &str,
        node_id: i32,
        ids: &[(PathBuf, String)],
        mut on_format: impl FnMut(&Path),
    ) -> Result<(), FormatError> {
        let mut taken: Vec<String> = self.formatted.iter().map(|(_, m)| m.directory_id.clone()).collect();
        taken.extend(ids.iter().map(|(_, id)| id.clone()));
        for dir in &self.unformatted {
            let directory_id = match ids.iter().find(|(d, _)| d == dir) {
                Some((_, id)) => id.clone(),
                None => fresh_directory_id(&taken),
            };
            taken.push(directory_id.clone());
            on_format(dir);
            let meta = MetaProperties { cluster_id: cluster_id.to_owned(), node_id, directory_id };
            let path = dir.join(META_PROPERTIES);
            std::fs::create_dir_all(dir)
                .and_then(|()| strom_storage::checkpoint::write_atomically(&path, meta.to_text().as_bytes()))
                .map_err(|e| {
                    FormatError(format!("Error while writing meta.properties file {}: {e}", dir.display()))
                })?;
        }
        Ok(())
    }
}

/// Kafka's reserved directory ids (`DirectoryId.reserved`): the first 100
/// UUIDs (unassigned, lost, migrating, …).
fn is_reserved_directory_id(bytes: &[u8; 16]) -> bool {
    bytes[..15].iter().all(|b| *b == 0) && bytes[15] < 100
}

fn fresh_directory_id(taken: &[String]) -> String {
    loop {
        let id = random_uuid();
        if !taken.contains(&id) {
            return id;
        }
    }
}

/// A random Kafka UUID (`Uuid.randomUuid`): 16 bytes as unpadded URL-safe
/// base64, never a reserved id nor one whose text starts with '-' (it would
/// read as a command-line flag).
pub fn random_uuid() -> String {
    loop {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let text = base64_url(&bytes);
        if !is_reserved_directory_id(&bytes) && !text.starts_with('-') {
            return text;
        }
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A Kafka UUID's text: its 16 bytes as unpadded URL-safe base64.
pub fn base64_url(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The 16 bytes of a Kafka UUID string (`Uuid.fromString`): exactly 22
/// URL-safe base64 characters, the last carrying no stray bits.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    if text.len() != 22 {
        return None;
    }
    let mut values = text.bytes().map(|c| ALPHABET.iter().position(|a| *a == c).map(|v| v as u128));
    // 22 characters carry 132 bits: 21 whole ones, then the last one's top
    // 2 bits; its low 4 bits are padding, ignored as Java's decoder (so
    // Kafka's tools) ignores them.
    let mut bits: u128 = 0;
    for value in values.by_ref().take(21) {
        bits = bits << 6 | value?;
    }
    let last = values.next()??;
    Some((bits << 2 | last >> 4).to_be_bytes())
}

/// A cluster id `strom storage format` accepts: a Kafka UUID, not a reserved one.
pub fn check_cluster_id(cluster_id: &str) -> Result<(), FormatError> {
    match parse_uuid(cluster_id) {
        Some(bytes) if !is_reserved_directory_id(&bytes) => Ok(()),
        Some(_) => fail(format!("Cluster ID string {cluster_id} is a reserved UUID")),
        None => fail(format!(
            "Cluster ID string {cluster_id} does not appear to be a valid UUID: expected 22 URL-safe base64 characters (see `strom storage random-uuid`)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(cluster_id: &str, node_id: i32, directory_id: &str) -> MetaProperties {
        MetaProperties { cluster_id: cluster_id.into(), node_id, directory_id: directory_id.into() }
    }

    #[test]
    fn uuids_round_trip_as_kafka_writes_them() {
        for _ in 0..200 {
            let id = random_uuid();
            assert_eq!(id.len(), 22);
            assert!(!id.starts_with('-'));
            let bytes = parse_uuid(&id).unwrap();
            assert_eq!(base64_url(&bytes), id);
        }
        // Kafka's Uuid(1, 2) prints as AAAAAAAAAAEAAAAAAAAAAg.
        let bytes = parse_uuid("AAAAAAAAAAEAAAAAAAAAAg").unwrap();
        assert_eq!(u128::from_be_bytes(bytes), 1 << 64 | 2);
        for bad in ["", "short", "AAAAAAAAAAEAAAAAAAAAAg=", "AAAAAAAAAAEAAAAAAAA*Ag"] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
        // Padding bits are ignored, as Kafka's format takes a hex string.
        assert_eq!(parse_uuid("AAAAAAAAAAEAAAAAAAAAAh"), Some(bytes));
        assert!(check_cluster_id("4d1b0eef3c384f9387f727").is_ok());
        assert!(check_cluster_id("AAAAAAAAAAAAAAAAAAAAAA").is_err(), "the zero uuid is reserved");
    }

    #[test]
    fn meta_properties_round_trip_and_refuse_what_kafka_refuses() {
        let path = Path::new("/d/meta.properties");
        let written = meta(&random_uuid(), 3, &random_uuid());
        assert_eq!(MetaProperties::parse(&written.to_text(), path).unwrap(), written);
        let kafkas = "#\n#Tue Dec 01 15:00:00 UTC 2026\nnode.id=1\ndirectory.id=AAAAAAAAAAEAAAAAAAAAAg\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n";
        assert_eq!(MetaProperties::parse(kafkas, path).unwrap().cluster_id, "MkU3OEVBNTcwNTJENDM2Qk");
        for (bad, says) in [
            ("cluster.id=x\nnode.id=1\n", "version was not specified"),
            ("version=0\nbroker.id=1\ncluster.id=x\n", "Unsupported meta.properties version 0"),
            ("version=1\nnode.id=1\n", "cluster.id was not specified"),
            ("version=1\ncluster.id=x\n", "node.id was not specified"),
            ("version=1\ncluster.id=x\nnode.id=one\n", "Failed to parse node.id"),
            ("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=nope\n", "Unable to read directory.id"),
        ] {
            let error = MetaProperties::parse(bad, path).unwrap_err();
            assert!(error.0.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn verify_refuses_mixed_clusters_other_nodes_and_shared_directory_ids() {
        let dirs = |metas: Vec<MetaProperties>| LogDirs {
            formatted: metas
                .into_iter()
                .enumerate()
                .map(|(i, m)| (PathBuf::from(format!("/d{i}")), m))
                .collect(),
            unformatted: vec![],
        };
        let (a, b) = (random_uuid(), random_uuid());
        let agreeing = dirs(vec![meta("c1", 1, &a), meta("c1", 1, &b)]);
        assert_eq!(agreeing.verify(1).unwrap(), Some("c1"));
        let node = agreeing.verify(2).unwrap_err().0;
        assert!(node.starts_with("Stored node id 1 doesn't match previous node id 2 in /d0"), "{node}");
        let mixed = dirs(vec![meta("c1", 1, &a), meta("c2", 1, &b)]).verify(1).unwrap_err().0;
        assert_eq!(mixed, "Invalid cluster.id in: /d1/meta.properties. Expected c1, but read c2");
        let reserved = dirs(vec![meta("c1", 1, "AAAAAAAAAAAAAAAAAAAAAQ")]).verify(1).unwrap_err().0;
        assert_eq!(reserved, "Invalid reserved directory ID AAAAAAAAAAAAAAAAAAAAAQ found in /d0");
        let shared = dirs(vec![meta("c1", 1, &a), meta("c1", 1, &a)]).verify(1).unwrap_err().0;
        assert!(shared.starts_with(&format!("Duplicate directory ID {a} found")), "{shared}");
        assert_eq!(LogDirs::default().verify(1).unwrap(), None);
    }

    #[test]
    fn format_writes_every_unformatted_dir_and_load_reads_them_back() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = ["a", "b/nested"].iter().map(|d| root.path().join(d)).collect();
        let loaded = LogDirs::load(&dirs).unwrap();
        assert_eq!(loaded.unformatted, dirs);
        assert!(loaded.require_formatted().unwrap_err().0.contains("have you run `strom storage format`"));
        let voter_id = random_uuid();
        let mut seen = Vec::new();
        loaded.format("c1", 7, &[(dirs[1].clone(), voter_id.clone())], |d| seen.push(d.to_owned())).unwrap();
        assert_eq!(seen, dirs);
        let reloaded = LogDirs::load(&dirs).unwrap();
        assert!(reloaded.unformatted.is_empty());
        assert_eq!(reloaded.verify(7).unwrap(), Some("c1"));
        assert_eq!(reloaded.formatted[1].1.directory_id, voter_id);
        assert_ne!(reloaded.formatted[0].1.directory_id, voter_id);
        let file = root.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(LogDirs::load(&[file]).unwrap_err().0.ends_with("is not a directory"));
    }
}
