//! Test-only crash points, shared by every crate of the broker.
//!
//! `STROM_FAILPOINTS=name[,name…]` in the environment (read once) makes the
//! process stop for good when a thread reaches one of the named points,
//! after a log line `failpoint <name> reached`: a test waits for that line,
//! then kills the process with SIGKILL, so a crash lands exactly between two
//! steps whose order matters on disk. Unset, a point costs one load of a
//! cached empty list.
//!
//! The storage points are the steps of a cleaner swap ([`crate::cleaner::swap`]),
//! in order; the broker adds its own (topic creation and deletion).

use std::sync::OnceLock;
use std::time::Duration;

/// The cleaned copy of a group of segments is written and flushed; the swap has not begun.
pub const CLEANER_COPY_WRITTEN: &str = "cleaner-copy-written";
/// Swap step 1 is done: the cleaned files are `.swap` files.
pub const CLEANER_SWAP_RENAMED: &str = "cleaner-swap-renamed";
/// Swap step 2 is done: the replaced segments' files are `.deleted` files.
pub const CLEANER_OLD_DELETED: &str = "cleaner-old-deleted";
/// Swap step 3 is done: the cleaned segment has its live name; the `.deleted` files remain.
pub const CLEANER_SWAPPED_IN: &str = "cleaner-swapped-in";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unarmed_points_pass() {
        reach(CLEANER_COPY_WRITTEN);
    }
}
