//! Mutexes whose holder may have panicked.
//!
//! A panic while a std `Mutex` is held poisons it, and `lock().expect(..)`
//! would then panic every later request that takes it. Each lock on a
//! request path decides instead: a partition log goes offline
//! ([`strom_storage::manager::lock_log`]); the coordinators' maps, whose
//! entries are soft state mirrored in their internal topics, the fetch
//! session cache's map (a session whose own lock a panic poisoned is
//! dropped, and its client opens a new one) and the produce verifications'
//! guards, each set or removed whole, carry on with what the panic left, as Kafka's coordinators do when a request
//! throws inside a group's lock. [`lock_recovering`] is that second choice,
//! with one log line per panic.

use std::sync::{Mutex, MutexGuard};

/// Locks `lock`, using it as left if a panic poisoned it; the poisoning is
/// reported once and then cleared.
pub fn lock_recovering<'a, T>(lock: &'a Mutex<T>, what: &str) -> MutexGuard<'a, T> {
    lock.lock().unwrap_or_else(|poisoned| {
        tracing::error!("a panic interrupted a change to the {what}; carrying on with them as left");
        lock.clear_poison();
        poisoned.into_inner()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_used_as_left_and_cleared() {
        let lock = Mutex::new(vec![1]);
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let mut held = lock.lock().unwrap();
                held.push(2);
                panic!("injected");
            })
            .join()
        });
        assert!(lock.is_poisoned());
        assert_eq!(*lock_recovering(&lock, "numbers"), vec![1, 2]);
        assert!(!lock.is_poisoned());
    }
}
