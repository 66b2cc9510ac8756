//! Kafka's windowed `Rate` (a `SampledStat` over `quota.window.num`
//! samples of `quota.window.size.seconds` each) and the throttle time its
//! quota checks give (`QuotaUtils.throttleTime`).

/// The sampling windows of every quota (Kafka's `quota.window.num`,
/// `quota.window.size.seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindow {
    pub samples: usize,
    pub window_ms: u64,
}

impl Default for QuotaWindow {
    fn default() -> Self {
        Self { samples: 11, window_ms: 1000 }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    start_ms: u64,
    value: f64,
}

/// A rate of some unit per second, measured over the recent samples.
#[derive(Debug, Clone)]
pub struct Rate {
    window: QuotaWindow,
    samples: Vec<Sample>,
    current: usize,
    /// When the last value was recorded: idle sensors are dropped.
    pub last_record_ms: u64,
    /// The least span a rate is measured over, in windows.
    min_windows: u64,
}

impl Rate {
    pub fn new(window: QuotaWindow, now_ms: u64) -> Self {
        let samples = vec![Sample { start_ms: now_ms, value: 0.0 }];
        let min_windows = window.samples.max(1) as u64 - 1;
        Self { window, samples, current: 0, last_record_ms: now_ms, min_windows }
    }

    /// Kafka's `SimpleRate`, which replication quotas use: measured over
    /// at least one window (not all but one), so a throttle takes hold
    /// within a window of the first bytes.
    pub fn simple(window: QuotaWindow, now_ms: u64) -> Self {
        Self { min_windows: 1, ..Self::new(window, now_ms) }
    }

    /// Adds `value` at `now_ms`, starting a new sample when the current one
    /// has lasted a whole window.
    pub fn record(&mut self, value: f64, now_ms: u64) {
        let current = self.samples[self.current];
        if now_ms.saturating_sub(current.start_ms) >= self.window.window_ms {
            self.current = (self.current + 1) % self.window.samples.max(1);
            let fresh = Sample { start_ms: now_ms, value: 0.0 };
            match self.samples.get_mut(self.current) {
                Some(sample) => *sample = fresh,
                None => self.samples.push(fresh),
            }
        }
        self.samples[self.current].value += value;
        self.last_record_ms = now_ms;
    }

    /// The rate per second at `now_ms`: the samples still inside the
    /// sampling period, over the time they span (at least all but one
    /// window, so a first burst is not measured over a few milliseconds).
    pub fn measure(&self, now_ms: u64) -> f64 {
        let total = self.total_window_ms();
        let live = self.samples.iter().filter(|s| now_ms.saturating_sub(s.start_ms) < total);
        let sum: f64 = live.clone().map(|s| s.value).sum();
        sum / (self.window_size_ms(now_ms) as f64 / 1000.0)
    }

    /// Kafka's `Rate.windowSize`: from the oldest live sample to now, but
    /// never less than `samples - 1` whole windows (one for a simple rate).
    pub fn window_size_ms(&self, now_ms: u64) -> u64 {
        let total = self.total_window_ms();
        let oldest = self
            .samples
            .iter()
            .filter(|s| now_ms.saturating_sub(s.start_ms) < total)
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let elapsed = now_ms.saturating_sub(oldest);
        let min_full = self.min_windows * self.window.window_ms;
        elapsed.max(min_full).max(1)
    }

    /// How long the client must wait for the rate to fall back to `bound`:
    /// the excess over the bound, as a share of the bound, of the window.
    pub fn throttle_ms(&self, bound: f64, now_ms: u64) -> u64 {
        let rate = self.measure(now_ms);
        if bound <= 0.0 {
            return if rate > 0.0 { self.total_window_ms() } else { 0 };
        }
        if rate <= bound {
            return 0;
        }
        let throttle = (rate - bound) / bound * self.window_size_ms(now_ms) as f64;
        (throttle.round() as u64).min(self.total_window_ms())
    }

    fn total_window_ms(&self) -> u64 {
        self.window.samples.max(1) as u64 * self.window.window_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: QuotaWindow = QuotaWindow { samples: 11, window_ms: 1000 };

    #[test]
    fn a_steady_rate_is_measured_as_itself() {
        let mut rate = Rate::new(WINDOW, 0);
        for second in 0..20 {
            rate.record(1000.0, second * 1000);
        }
        let measured = rate.measure(19_999);
        assert!((measured - 1000.0).abs() < 100.0, "{measured}");
    }

    #[test]
    fn a_first_burst_is_spread_over_all_but_one_window() {
        let mut rate = Rate::new(WINDOW, 0);
        rate.record(10_000.0, 0);
        assert_eq!(rate.window_size_ms(10), 10_000);
        assert_eq!(rate.measure(10), 1000.0);
    }

    #[test]
    fn the_throttle_is_the_excess_share_of_the_window() {
        let mut rate = Rate::new(WINDOW, 0);
        // 20000 over 10 s is 2000/s: twice the bound of 1000/s, so the
        // client waits as long as the window again.
        rate.record(20_000.0, 0);
        assert_eq!(rate.throttle_ms(1000.0, 0), 10_000);
        assert_eq!(rate.throttle_ms(2000.0, 0), 0);
        assert_eq!(rate.throttle_ms(4000.0, 0), 0);
    }

    #[test]
    fn a_simple_rate_spreads_a_first_burst_over_one_window() {
        let mut rate = Rate::simple(WINDOW, 0);
        rate.record(5_000.0, 0);
        assert_eq!(rate.measure(10), 5_000.0);
        assert_eq!(rate.measure(2_000), 2_500.0);
    }

    #[test]
    fn old_samples_stop_counting() {
        let mut rate = Rate::new(WINDOW, 0);
        rate.record(50_000.0, 0);
        assert!(rate.throttle_ms(1000.0, 0) > 0);
        rate.record(0.0, 30_000);
        assert_eq!(rate.measure(30_000), 0.0);
        assert_eq!(rate.throttle_ms(1000.0, 30_000), 0);
    }

    #[test]
    fn the_throttle_is_bounded_by_the_sampling_period() {
        let mut rate = Rate::new(WINDOW, 0);
        rate.record(1e12, 0);
        assert_eq!(rate.throttle_ms(1.0, 0), 11_000);
        let zero = Rate::new(WINDOW, 0);
        assert_eq!(zero.throttle_ms(0.0, 0), 0);
    }
}
