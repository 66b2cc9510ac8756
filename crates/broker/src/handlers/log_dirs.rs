//! DescribeLogDirs: each log dir's path and health, the size of each
//! partition it holds and, from v4, the total and usable bytes of its volume.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use strom_storage::LogDir;

use super::{str_bytes, topic_name};
use crate::dispatch::RequestContext;
use crate::replica::ReplicaManager;

/// Kafka's `DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES`.
const UNKNOWN_VOLUME_BYTES: i64 = -1;

/// Partitions asked for, by topic; `None` asks for all.
type Wanted = Option<HashMap<String, HashSet<i32>>>;

pub fn describe(ctx: &RequestContext<'_>, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    if !ctx.authorize_cluster(strom_metadata::acl::operation::DESCRIBE) {
        return DescribeLogDirsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let wanted: Wanted = request.topics.map(|topics| {
        let mut wanted: HashMap<String, HashSet<i32>> = HashMap::new();
        for topic in topics {
            wanted.entry(topic.topic.0.to_string()).or_default().extend(topic.partitions);
        }
        wanted
    });
    let replicas = ctx.replicas();
    let results = replicas
        .log_dirs()
        .iter()
        .enumerate()
        .map(|(index, dir)| describe_dir(replicas, index, dir, &wanted))
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

/// An offline dir reports KAFKA_STORAGE_ERROR and nothing else, as in Kafka.
fn describe_dir(
    replicas: &ReplicaManager,
    index: usize,
    dir: &LogDir,
    wanted: &Wanted,
) -> DescribeLogDirsResult {
    let path = std::path::absolute(dir.path()).unwrap_or_else(|_| dir.path().to_owned());
    let result = DescribeLogDirsResult::default().with_log_dir(str_bytes(&path.display().to_string()));
    if !dir.is_online() {
        return result
            .with_error_code(ResponseError::KafkaStorageError.code())
            .with_total_bytes(UNKNOWN_VOLUME_BYTES)
            .with_usable_bytes(UNKNOWN_VOLUME_BYTES);
    }
    let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for partition in replicas.partitions_in_dir(index) {
        let tp = &partition.tp;
        let asked =
            wanted.as_ref().is_none_or(|w| w.get(&tp.topic).is_some_and(|p| p.contains(&tp.partition)));
        if asked {
            topics.entry(tp.topic.clone()).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_partition_size(partition.size_bytes() as i64)
                    // The leader is its own only replica: never behind.
                    .with_offset_lag(0)
                    .with_is_future_key(false),
            );
        }
    }
    let topics = topics
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition_index);
            DescribeLogDirsTopic::default().with_name(topic_name(&name)).with_partitions(partitions)
        })
        .collect();
    let (total, usable) = volume_bytes(dir.path()).unwrap_or((UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES));
    result.with_topics(topics).with_total_bytes(total).with_usable_bytes(usable)
}

/// Total and usable bytes of the file system holding `path`, as Java's
/// `FileStore` reports them to Kafka: `statvfs` blocks and blocks available
/// to unprivileged users, in fragment-size units.
fn volume_bytes(path: &Path) -> Option<(i64, i64)> {
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and outlives the call; `stat` points to
    // writable memory of the type statvfs fills, read only once it succeeded.
    #[allow(unsafe_code)]
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    let fragment = stat.f_frsize as i64;
    Some((stat.f_blocks as i64 * fragment, stat.f_bavail as i64 * fragment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_bytes_are_those_of_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let (total, usable) = volume_bytes(dir.path()).unwrap();
        assert!(total > 0 && usable >= 0 && usable <= total, "{total} {usable}");
        assert!(volume_bytes(&dir.path().join("missing")).is_none());
    }
}
