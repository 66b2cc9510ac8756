//! The stop signal every long-running task watches.

use tokio::sync::watch;

/// Resolves once shutdown has begun, even if it began before the caller
/// first looked. `changed()` alone misses a stop sent before a task
/// subscribed or was first polled (a SIGTERM during start-up), and the
/// task then waits forever.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the sender is gone: shutdown has long begun.
    let _ = stop.wait_for(|stopping| *stopping).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_stop_sent_before_the_task_subscribed_is_seen() {
        let (stop, _) = watch::channel(false);
        stop.send_replace(true);
        let mut late = stop.subscribe();
        let seen = tokio::time::timeout(Duration::from_secs(5), stopped(&mut late)).await;
        assert!(seen.is_ok(), "a task subscribing after the stop must still see it");
    }

    #[tokio::test]
    async fn a_running_task_sees_a_later_stop_and_not_before() {
        let (stop, mut watching) = watch::channel(false);
        let early = tokio::time::timeout(Duration::from_millis(50), stopped(&mut watching)).await;
        assert!(early.is_err(), "no stop was sent yet");
        stop.send_replace(true);
        let seen = tokio::time::timeout(Duration::from_secs(5), stopped(&mut watching)).await;
        assert!(seen.is_ok());
    }
}
