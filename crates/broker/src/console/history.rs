//! The last hour of the broker's own metrics, for the console's plots.
//!
//! A sampler reads the counters the Kafka handlers already keep (bytes and
//! records in and out per topic, connections) and each consumer group's lag
//! every `console.metrics.sample.ms`, and keeps the values in fixed-size
//! rings: no Prometheus is needed to see the last hour. The number of series
//! is bounded too, so that all rings together hold at most [`MAX_POINTS`]:
//! a topic or group beyond the bound is not plotted.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::server::Broker;

/// How far back the plots reach.
pub const WINDOW_MS: u64 = 3_600_000;
/// The most series kept (topics times three, groups, the broker's own).
pub const MAX_SERIES: usize = 4096;
/// The most points kept over all series (16 bytes each): a fast sample
/// rate keeps fewer series.
pub const MAX_POINTS: usize = 1 << 21;

/// One plotted point: time (ms since the epoch) and value.
pub type Point = (i64, f64);

/// A series of the broker as a whole.
pub const BYTES_IN: &str = "bytes_in";
pub const BYTES_OUT: &str = "bytes_out";
pub const MESSAGES_IN: &str = "messages_in";
pub const CONNECTIONS: &str = "connections";

pub fn topic_series(topic: &str, what: &str) -> String {
    format!("topic\u{0}{topic}\u{0}{what}")
}

pub fn group_lag_series(group: &str) -> String {
    format!("group\u{0}{group}\u{0}lag")
}

/// Counter totals at the previous sample, to turn counters into rates.
#[derive(Default)]
struct Totals {
    at_ms: i64,
    counters: HashMap<String, u64>,
}

pub struct History {
    /// Points per series: an hour of samples.
    capacity: usize,
    max_series: usize,
    series: Mutex<HashMap<String, VecDeque<Point>>>,
    last: Mutex<Totals>,
}

impl History {
    pub fn new(sample_ms: u64) -> Self {
        let capacity = (WINDOW_MS / sample_ms.max(1)).clamp(2, 36_000) as usize;
        let max_series = (MAX_POINTS / capacity).min(MAX_SERIES);
        Self { capacity, max_series, series: Mutex::default(), last: Mutex::default() }
    }

    /// The points of one series, oldest first.
    pub fn points(&self, name: &str) -> Vec<Point> {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series.get(name).map(|ring| ring.iter().copied().collect()).unwrap_or_default()
    }

    /// The newest value of a series.
    pub fn latest(&self, name: &str) -> Option<f64> {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series.get(name).and_then(|ring| ring.back()).map(|(_, value)| *value)
    }

    pub fn record(&self, name: &str, at_ms: i64, value: f64) {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        if !series.contains_key(name) && series.len() >= self.max_series {
            return;
        }
        let ring = series.entry(name.to_owned()).or_default();
        if ring.len() == self.capacity {
            ring.pop_front();
        }
        ring.push_back((at_ms, value));
    }

    /// Forgets series nobody updated for a whole window (deleted topics and groups).
    fn forget_stale(&self, now_ms: i64) {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series.retain(|_, ring| ring.back().is_some_and(|(at, _)| now_ms - at < WINDOW_MS as i64));
    }

    /// Records the per-second rate of each counter since the previous sample.
    fn record_rates(&self, now_ms: i64, counters: HashMap<String, u64>) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed_s = (now_ms - last.at_ms) as f64 / 1e3;
        if last.at_ms > 0 && elapsed_s > 0.0 {
            for (name, total) in &counters {
                let before = last.counters.get(name).copied().unwrap_or(0);
                self.record(name, now_ms, total.saturating_sub(before) as f64 / elapsed_s);
            }
        }
        *last = Totals { at_ms: now_ms, counters };
    }

    /// Takes one sample of the broker.
    pub fn sample(&self, broker: &Broker, now_ms: i64) {
        let mut counters = HashMap::new();
        let (mut bytes_in, mut bytes_out, mut messages_in) = (0, 0, 0);
        for (topic, metrics) in broker.metrics().topics_snapshot() {
            let values = [
                ("bytes_in", metrics.bytes_in.load(Ordering::Relaxed)),
                ("bytes_out", metrics.bytes_out.load(Ordering::Relaxed)),
                ("messages_in", metrics.messages_in.load(Ordering::Relaxed)),
            ];
            bytes_in += values[0].1;
            bytes_out += values[1].1;
            messages_in += values[2].1;
            for (what, value) in values {
                counters.insert(topic_series(&topic, what), value);
            }
        }
        counters.insert(BYTES_IN.into(), bytes_in);
        counters.insert(BYTES_OUT.into(), bytes_out);
        counters.insert(MESSAGES_IN.into(), messages_in);
        self.record_rates(now_ms, counters);
        self.record(CONNECTIONS, now_ms, broker.metrics().connections.load(Ordering::Relaxed) as f64);
        for (group, lag) in super::pages::groups::total_lags(broker) {
            self.record(&group_lag_series(&group), now_ms, lag as f64);
        }
        self.forget_stale(now_ms);
    }
}

/// Samples until the broker stops.
pub async fn run_sampler(
    broker: Arc<Broker>,
    history: Arc<History>,
    sample_ms: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(sample_ms));
    loop {
        tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            _ = tick.tick() => {
                let (broker, history) = (broker.clone(), history.clone());
                let sampled = tokio::task::spawn_blocking(move || history.sample(&broker, strom_storage::now_ms()));
                if let Err(e) = sampled.await {
                    tracing::warn!("console metrics sample failed: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_keeps_only_its_capacity() {
        let history = History::new(WINDOW_MS / 3);
        for i in 0..5 {
            history.record("s", i, i as f64);
        }
        assert_eq!(history.points("s"), vec![(2, 2.0), (3, 3.0), (4, 4.0)]);
        assert_eq!(history.latest("s"), Some(4.0));
        assert!(history.points("other").is_empty());
    }

    #[test]
    fn counters_become_per_second_rates() {
        let history = History::new(1000);
        history.record_rates(10_000, HashMap::from([("c".to_owned(), 100)]));
        assert!(history.points("c").is_empty(), "no rate from one sample");
        history.record_rates(12_000, HashMap::from([("c".to_owned(), 300)]));
        assert_eq!(history.points("c"), vec![(12_000, 100.0)]);
    }

    #[test]
    fn a_fast_sample_rate_keeps_fewer_series_within_the_points_bound() {
        let history = History::new(100);
        for i in 0..MAX_SERIES {
            for at in 0..2 {
                history.record(&format!("s{i}"), at, 0.0);
            }
        }
        let kept = history.series.lock().unwrap().len();
        assert!(kept > 0 && kept * history.capacity <= MAX_POINTS, "{kept} series of {}", history.capacity);
        assert_eq!(History::new(10_000).max_series, MAX_SERIES, "the default rate keeps them all");
    }

    #[test]
    fn series_are_bounded_and_stale_ones_forgotten() {
        let history = History::new(1000);
        for i in 0..MAX_SERIES + 10 {
            history.record(&format!("s{i}"), 1, 0.0);
        }
        assert!(history.points(&format!("s{}", MAX_SERIES + 1)).is_empty());
        history.record("s0", WINDOW_MS as i64, 1.0);
        history.forget_stale(WINDOW_MS as i64 + 5);
        assert!(history.points("s1").is_empty(), "not updated for a window");
        assert_eq!(history.latest("s0"), Some(1.0));
        history.record("fresh", WINDOW_MS as i64 + 5, 1.0);
        assert_eq!(history.latest("fresh"), Some(1.0), "room again");
    }
}
