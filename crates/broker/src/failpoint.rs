//! Test-only crash points.
//!
//! `STROM_FAILPOINTS=name[,name…]` in the environment (read once) makes the
//! broker stop for good when it reaches one of the named points, after a
//! log line `failpoint <name> reached`: a test waits for that line, then
//! kills the process with SIGKILL, so a crash lands exactly between two
//! steps whose order matters on disk. Unset, a point costs one load of a
//! cached empty list.

use std::sync::OnceLock;
use std::time::Duration;

/// After a new topic's logs exist, before the metadata names the topic.
pub const TOPIC_LOGS_CREATED: &str = "topic-logs-created";
/// After a new topic is in the metadata log, before the broker hosts it.
pub const TOPIC_COMMITTED: &str = "topic-committed";
/// After the logs of partitions added to a topic exist, before the metadata names them.
pub const PARTITION_LOGS_ADDED: &str = "partition-logs-added";
/// After partitions added to a topic are in the metadata log, before the broker hosts them.
pub const PARTITIONS_ADDED: &str = "partitions-added";
/// After a topic's removal is in the metadata log, before its logs go.
pub const TOPIC_REMOVAL_COMMITTED: &str = "topic-removal-committed";
/// After the first log of a deleted topic is removed, before the others.
pub const TOPIC_LOG_REMOVED: &str = "topic-log-removed";

fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let names = std::env::var("STROM_FAILPOINTS").unwrap_or_default();
        names.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect()
    })
}

/// Stops the calling thread for good if `name` is armed.
pub fn reach(name: &str) {
    if !armed().iter().any(|armed| armed == name) {
        return;
    }
    tracing::warn!("failpoint {name} reached; waiting to be killed");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
