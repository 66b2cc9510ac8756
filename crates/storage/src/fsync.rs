//! Forcing files to disk: the one step of a durable write whose time the
//! disk decides.
//!
//! Every fsync of the storage engine goes through here. Called on a worker
//! of the broker's (multi-threaded tokio) runtime, the wait happens in
//! `block_in_place`: the worker's other tasks, every connection it serves,
//! move to a fresh worker first, so a slow disk stalls only the request
//! that asked for the sync. Elsewhere (blocking threads, tools, tests) it
//! simply blocks.
//!
//! In debug builds the environment variable `STROM_TEST_FSYNC_DELAY_MS`
//! makes each sync take that much longer, so tests can play a slow disk.

use std::fs::File;
use std::io;
use std::path::Path;

/// `fdatasync`: the file's data, and its size if it grew.
pub fn sync_data(file: &File) -> io::Result<()> {
    off_the_runtime(|| {
        injected_delay();
        file.sync_data()
    })
}

/// `fsync`: the file's data and all its metadata.
pub fn sync_all(file: &File) -> io::Result<()> {
    off_the_runtime(|| {
        injected_delay();
        file.sync_all()
    })
}

/// Runs `wait`, handing the current runtime worker's tasks to another
/// worker first if this thread is one.
pub fn off_the_runtime<T>(wait: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        // On a current-thread runtime there is no other worker to hand to.
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

/// `msync`: a mapped file's written pages (the indexes).
pub fn sync_mmap(mmap: &memmap2::MmapMut) -> io::Result<()> {
    off_the_runtime(|| {
        injected_delay();
        mmap.flush()
    })
}

/// Makes the entries of `dir` (a file created, renamed or removed) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    sync_all(&File::open(dir)?)
}

#[cfg(test)]
thread_local! {
    static SYNCS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many syncs this thread has asked for: tests check which paths wait
/// for the disk.
#[cfg(test)]
pub(crate) fn syncs_on_this_thread() -> usize {
    SYNCS.get()
}

#[cfg(debug_assertions)]
fn injected_delay() {
    #[cfg(test)]
    SYNCS.set(SYNCS.get() + 1);
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        let ms = std::env::var("STROM_TEST_FSYNC_DELAY_MS").ok()?.parse().ok()?;
        Some(std::time::Duration::from_millis(ms))
    });
    if let Some(delay) = delay {
        std::thread::sleep(*delay);
    }
}

#[cfg(not(debug_assertions))]
fn injected_delay() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// With a single worker, a task blocked in a sync could only be freed by
    /// another task if the sync first handed the worker over.
    #[test]
    fn a_wait_on_the_only_worker_lets_its_other_tasks_run() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let (ran_tx, ran_rx) = mpsc::channel();
        let answered = runtime.block_on(async move {
            let waiter = tokio::spawn(async move {
                off_the_runtime(|| ran_rx.recv_timeout(Duration::from_secs(10)).is_ok())
            });
            // Spawned after the waiter, so it can run only on the worker the
            // waiter holds, or on the one it handed over to.
            tokio::spawn(async move { ran_tx.send(()).ok() });
            waiter.await.unwrap()
        });
        assert!(answered, "the other task never ran while the wait held the worker");
    }
}
