//! The open-file budget: how many more partitions this process can host.
//!
//! Every hosted partition holds a descriptor for its active segment, as in
//! Kafka, so partitions beyond `RLIMIT_NOFILE` cannot be opened: a broker
//! that accepted them would fail half-way through creating their logs and
//! again at every start. New partitions are therefore admitted only while
//! the descriptors they need leave room for what else the broker opens:
//! the inactive segments' cache (`log.segment.open.files.max`) and a tenth
//! of the limit for connections, checkpoints and the cleaner.

/// Descriptors a new partition holds while hosted: its active segment's `.log`.
pub const FILES_PER_PARTITION: u64 = 1;

/// The share of the limit kept for connections and short-lived files.
const RESERVED_FRACTION: u64 = 10;

/// How many new partitions fit, with `cache_capacity` descriptors kept for
/// the segment cache and `hosted_partitions` as the count to fall back on
/// where open descriptors cannot be counted.
pub fn partitions_that_fit(cache_capacity: u64, hosted_partitions: u64) -> u64 {
    let Some(limit) = soft_limit() else { return u64::MAX };
    let in_use = open_descriptors().unwrap_or(hosted_partitions * FILES_PER_PARTITION + cache_capacity);
    let reserved = cache_capacity + limit / RESERVED_FRACTION;
    limit.saturating_sub(in_use).saturating_sub(reserved) / FILES_PER_PARTITION
}

/// The soft `RLIMIT_NOFILE`; `None` when unlimited or unknown.
fn soft_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
    #[allow(unsafe_code)]
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (read && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Descriptors open in this process, where the system lists them.
fn open_descriptors() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_shrinks_as_descriptors_open() {
        let before = partitions_that_fit(0, 0);
        // Other tests open and close files meanwhile: leave them a margin.
        let files: Vec<_> = (0..200).map(|_| tempfile::tempfile().unwrap()).collect();
        let after = partitions_that_fit(0, 0);
        assert!(after + 100 <= before, "{before} then {after} with 200 more files open");
        drop(files);
        assert!(partitions_that_fit(u64::MAX / 2, 0) == 0, "a cache as large as the limit leaves no room");
    }
}
