//! Prometheus metrics, named after Kafka's JMX metrics so existing dashboards
//! translate: `kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T`
//! becomes `kafka_server_brokertopicmetrics_bytesin_total{topic="T"}`.
//!
//! Counters are atomics bumped on the request path; gauges (log sizes,
//! offsets, consumer lag, process figures) are read when scraped. The text
//! is served over plain HTTP at `/metrics` on `metrics.listener`, apart
//! from the Kafka port.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use strom_metadata::PartitionImage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::controller_channel::ControllerChannel;
use crate::group::GroupCoordinator;
use crate::replica::ReplicaManager;

/// Upper bounds of the request latency histogram, in milliseconds.
const LATENCY_BUCKETS_MS: [f64; 14] =
    [0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0];
/// API keys are small; one slot each.
const API_SLOTS: usize = 128;
/// The longest HTTP request head a scraper may send.
const MAX_HTTP_HEAD: usize = 8192;
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct ApiMetrics {
    requests: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_MS.len()],
    latency_sum_us: AtomicU64,
    errors: Mutex<BTreeMap<i16, u64>>,
}

/// Kafka's `BrokerTopicMetrics` of one topic.
#[derive(Debug, Default)]
pub struct TopicMetrics {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Record bytes sent to followers (Kafka's `ReplicationBytesOutPerSec`).
    pub replication_bytes_out: AtomicU64,
    pub messages_in: AtomicU64,
    pub failed_produce_requests: AtomicU64,
    pub failed_fetch_requests: AtomicU64,
}

pub struct Metrics {
    apis: Vec<ApiMetrics>,
    topics: RwLock<HashMap<String, Arc<TopicMetrics>>>,
    /// Open client connections.
    pub connections: AtomicI64,
    /// Requests decoded and not yet answered.
    pub requests_in_flight: AtomicI64,
    /// Fetches parked until data arrives or their wait ends.
    pub delayed_fetches: AtomicI64,
    start_time_ms: i64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            apis: (0..API_SLOTS).map(|_| ApiMetrics::default()).collect(),
            topics: RwLock::default(),
            connections: AtomicI64::new(0),
            requests_in_flight: AtomicI64::new(0),
            delayed_fetches: AtomicI64::new(0),
            start_time_ms: strom_storage::now_ms(),
        }
    }
}

/// Adds one to a gauge for as long as the guard lives.
pub struct GaugeGuard<'a>(&'a AtomicI64);

impl<'a> GaugeGuard<'a> {
    pub fn new(gauge: &'a AtomicI64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    fn api(&self, api_key: i16) -> Option<&ApiMetrics> {
        usize::try_from(api_key).ok().and_then(|i| self.apis.get(i))
    }

    /// A request answered after `elapsed`.
    pub fn record_request(&self, api_key: i16, elapsed: Duration) {
        let Some(api) = self.api(api_key) else { return };
        api.requests.fetch_add(1, Ordering::Relaxed);
        let ms = elapsed.as_secs_f64() * 1e3;
        if let Some(bucket) = LATENCY_BUCKETS_MS.iter().position(|bound| ms <= *bound) {
            api.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        api.latency_sum_us.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// The error codes a response of `api_key` carried (NONE included, as
    /// Kafka's `ErrorsPerSec` counts), each with its count.
    pub fn record_errors(&self, api_key: i16, counts: &[(i16, u64)]) {
        let Some(api) = self.api(api_key) else { return };
        if counts.is_empty() {
            return;
        }
        let mut errors = api.errors.lock().unwrap_or_else(PoisonError::into_inner);
        for (code, count) in counts {
            *errors.entry(*code).or_default() += count;
        }
    }

    pub fn topic(&self, name: &str) -> Arc<TopicMetrics> {
        if let Some(found) = self.topics.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return found.clone();
        }
        self.topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Every topic's counters, for sampling.
    pub fn topics_snapshot(&self) -> Vec<(String, Arc<TopicMetrics>)> {
        let topics = self.topics.read().unwrap_or_else(PoisonError::into_inner);
        topics.iter().map(|(name, metrics)| (name.clone(), metrics.clone())).collect()
    }

    /// Forgets a deleted topic's counters.
    pub fn remove_topic(&self, name: &str) {
        self.topics.write().unwrap_or_else(PoisonError::into_inner).remove(name);
    }

    /// The Prometheus text exposition of every metric, with the gauges
    /// read from the hosted partitions, the image and the groups.
    pub fn render(
        &self,
        replicas: &ReplicaManager,
        controller: &ControllerChannel,
        groups: &GroupCoordinator,
    ) -> String {
        let mut out = String::with_capacity(16 * 1024);
        self.render_requests(&mut out);
        self.render_topics(&mut out);
        self.render_network(&mut out);
        render_partitions(&mut out, replicas, controller);
        render_consumer_lag(&mut out, replicas, groups);
        self.render_process(&mut out);
        out
    }

    fn render_requests(&self, out: &mut String) {
        header(out, "kafka_network_requestmetrics_requests_total", "counter", "Requests answered, per API.");
        for (key, api) in self.served_apis() {
            let _ = writeln!(
                out,
                "kafka_network_requestmetrics_requests_total{{request=\"{key:?}\"}} {}",
                api.requests.load(Ordering::Relaxed)
            );
        }
        header(
            out,
            "kafka_network_requestmetrics_errors_total",
            "counter",
            "Error codes in responses, per API.",
        );
        for (key, api) in self.served_apis() {
            for (code, count) in api.errors.lock().unwrap_or_else(PoisonError::into_inner).iter() {
                let name = crate::response_errors::error_name(*code);
                let _ = writeln!(
                    out,
                    "kafka_network_requestmetrics_errors_total{{request=\"{key:?}\",error=\"{name}\"}} {count}"
                );
            }
        }
        let name = "kafka_network_requestmetrics_totaltimems";
        header(out, name, "histogram", "Time from decoding a request to its response being ready, in ms.");
        for (key, api) in self.served_apis() {
            let mut cumulative = 0;
            for (bound, count) in LATENCY_BUCKETS_MS.iter().zip(&api.latency_buckets) {
                cumulative += count.load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}_bucket{{request=\"{key:?}\",le=\"{bound}\"}} {cumulative}");
            }
            let total = api.requests.load(Ordering::Relaxed);
            let sum_ms = api.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e3;
            let _ = writeln!(out, "{name}_bucket{{request=\"{key:?}\",le=\"+Inf\"}} {total}");
            let _ = writeln!(out, "{name}_sum{{request=\"{key:?}\"}} {sum_ms}");
            let _ = writeln!(out, "{name}_count{{request=\"{key:?}\"}} {total}");
        }
    }

    /// APIs that have been called at least once, with their keys.
    fn served_apis(&self) -> impl Iterator<Item = (ApiKey, &ApiMetrics)> {
        self.apis
            .iter()
            .enumerate()
            .filter(|(_, api)| api.requests.load(Ordering::Relaxed) > 0)
            .filter_map(|(i, api)| ApiKey::try_from(i as i16).ok().map(|key| (key, api)))
    }

    fn render_topics(&self, out: &mut String) {
        let topics = self.topics.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<&String> = topics.keys().collect();
        names.sort();
        let series: [Series<TopicMetrics, u64>; 6] = [
            ("bytesin", "Bytes appended by producers.", |t| t.bytes_in.load(Ordering::Relaxed)),
            ("bytesout", "Record bytes sent to consumers.", |t| t.bytes_out.load(Ordering::Relaxed)),
            ("replicationbytesout", "Record bytes sent to followers.", |t| {
                t.replication_bytes_out.load(Ordering::Relaxed)
            }),
            ("messagesin", "Records appended.", |t| t.messages_in.load(Ordering::Relaxed)),
            ("failedproducerequests", "Partition appends refused.", |t| {
                t.failed_produce_requests.load(Ordering::Relaxed)
            }),
            ("failedfetchrequests", "Partition reads refused.", |t| {
                t.failed_fetch_requests.load(Ordering::Relaxed)
            }),
        ];
        for (suffix, help, field) in series {
            let name = format!("kafka_server_brokertopicmetrics_{suffix}_total");
            header(out, &name, "counter", help);
            for topic in &names {
                let value = field(&topics[*topic]);
                let _ = writeln!(out, "{name}{{topic=\"{}\"}} {value}", escape(topic));
            }
        }
    }

    fn render_network(&self, out: &mut String) {
        let gauges = [
            (
                "kafka_server_socketservermetrics_connection_count",
                "Open client connections.",
                &self.connections,
            ),
            (
                "kafka_network_requestchannel_requestqueuesize",
                "Requests being served and not yet answered.",
                &self.requests_in_flight,
            ),
            (
                "kafka_server_delayedoperationpurgatory_purgatorysize",
                "Fetches waiting for data (delayedOperation=Fetch).",
                &self.delayed_fetches,
            ),
        ];
        for (name, help, value) in gauges {
            header(out, name, "gauge", help);
            let labels = if name.contains("purgatory") { "{delayedOperation=\"Fetch\"}" } else { "" };
            let _ = writeln!(out, "{name}{labels} {}", value.load(Ordering::Relaxed));
        }
    }

    fn render_process(&self, out: &mut String) {
        let stats = ProcessStats::read();
        let gauges = [
            ("process_cpu_seconds_total", "counter", "User and system CPU time.", stats.cpu_seconds),
            ("process_resident_memory_bytes", "gauge", "Resident set size.", stats.resident_bytes),
            ("process_virtual_memory_bytes", "gauge", "Virtual memory size.", stats.virtual_bytes),
            ("process_open_fds", "gauge", "Open file descriptors.", stats.open_fds),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time since the Unix epoch.",
                self.start_time_ms as f64 / 1e3,
            ),
        ];
        for (name, kind, help, value) in gauges {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

/// A metric family: name, help text and how to read the value from `T`.
type Series<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// The per-partition log gauges.
struct LogFigures {
    size: i64,
    start: i64,
    end: i64,
    segments: i64,
}

fn render_partitions(out: &mut String, replicas: &ReplicaManager, controller: &ControllerChannel) {
    let partitions = replicas.partitions();
    let mut rows: Vec<_> = partitions
        .iter()
        .map(|p| {
            let log = strom_storage::manager::peek_log(p.log());
            let figures = LogFigures {
                size: log.size_bytes() as i64,
                start: log.log_start_offset(),
                end: log.log_end_offset(),
                segments: log.segments().count() as i64,
            };
            (p.tp.clone(), figures)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let series: [Series<LogFigures, i64>; 4] = [
        ("kafka_log_log_size", "Bytes of the partition's segments.", |r| r.size),
        ("kafka_log_log_logstartoffset", "First offset still readable.", |r| r.start),
        ("kafka_log_log_logendoffset", "Offset of the next record appended.", |r| r.end),
        ("kafka_log_log_numlogsegments", "Segments of the partition.", |r| r.segments),
    ];
    for (name, help, field) in series {
        header(out, name, "gauge", help);
        for (tp, row) in &rows {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{}\"}} {}",
                escape(&tp.topic),
                tp.partition,
                field(row)
            );
        }
    }
    // A partition on a failed log dir has no leader until the broker restarts.
    let led = partitions.iter().filter(|p| p.is_online() && p.is_leader()).count();
    let image = controller.image();
    let node_id = replicas.node_id();
    let offline = image
        .topics()
        .flat_map(|topic| topic.partitions.iter().map(move |(index, p)| (topic, *index, p.leader)))
        .filter(|(topic, index, leader)| {
            let local_offline = || replicas.partition(&topic.name, *index).is_none_or(|p| !p.is_online());
            *leader < 0 || (*leader == node_id && local_offline())
        })
        .count();
    let led_here = image.topics().flat_map(|topic| {
        let online = |index: i32| replicas.partition(&topic.name, index).is_some_and(|p| p.is_online());
        topic.partitions.iter().filter(move |(index, _)| online(**index)).map(|(_, partition)| partition)
    });
    let under_replicated = under_replicated_count(led_here, node_id);
    let offline_dirs = replicas.log_dirs().iter().filter(|d| !d.is_online()).count();
    let counts = [
        ("kafka_server_replicamanager_partitioncount", "Partitions hosted here.", rows.len()),
        ("kafka_server_replicamanager_leadercount", "Partitions led here.", led),
        (
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here with fewer in-sync replicas than replicas.",
            under_replicated,
        ),
        ("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader.", offline),
        ("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs that failed.", offline_dirs),
    ];
    for (name, help, value) in counts {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// Kafka's `UnderReplicatedPartitions`: of the online `partitions`, those
/// `node_id` leads whose in-sync replicas are fewer than their replicas.
fn under_replicated_count<'a>(
    partitions: impl IntoIterator<Item = &'a PartitionImage>,
    node_id: i32,
) -> usize {
    partitions.into_iter().filter(|p| p.leader == node_id && p.isr.len() < p.replicas.len()).count()
}

/// Committed offset and lag (high watermark minus committed offset) of each
/// partition a group has committed for.
fn render_consumer_lag(out: &mut String, replicas: &ReplicaManager, groups: &GroupCoordinator) {
    let mut rows = Vec::new();
    for (group, ..) in groups.list() {
        for (topic, partition, committed) in groups.fetch_offsets(&group, None) {
            let (Some(committed), Some(hosted)) = (committed, replicas.partition(&topic, partition)) else {
                continue;
            };
            let lag = (hosted.high_watermark() - committed.offset).max(0);
            rows.push((group.clone(), topic, partition, committed.offset, lag));
        }
    }
    header(out, "kafka_consumergroup_current_offset", "gauge", "Offset a group committed, per partition.");
    for (group, topic, partition, offset, _) in &rows {
        let labels =
            format!("group=\"{}\",topic=\"{}\",partition=\"{partition}\"", escape(group), escape(topic));
        let _ = writeln!(out, "kafka_consumergroup_current_offset{{{labels}}} {offset}");
    }
    header(out, "kafka_consumergroup_lag", "gauge", "High watermark minus the committed offset.");
    for (group, topic, partition, _, lag) in &rows {
        let labels =
            format!("group=\"{}\",topic=\"{}\",partition=\"{partition}\"", escape(group), escape(topic));
        let _ = writeln!(out, "kafka_consumergroup_lag{{{labels}}} {lag}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Label values escape backslash, quote and newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The process figures Prometheus' client libraries report, from `/proc/self`.
#[derive(Debug, Default)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_bytes: f64,
    virtual_bytes: f64,
    open_fds: f64,
}

impl ProcessStats {
    fn read() -> Self {
        let mut stats = Self::default();
        // Fields after the parenthesised command name, which may hold spaces.
        if let Some(fields) = std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| {
            s.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        }) {
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
            let ticks = clock_ticks_per_second();
            // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
            stats.cpu_seconds = (field(11) + field(12)) / ticks;
            stats.virtual_bytes = field(20);
            stats.resident_bytes = field(21) * page_size();
        }
        stats.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as f64;
        stats
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    #[allow(unsafe_code)]
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

fn page_size() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    #[allow(unsafe_code)]
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as f64
    } else {
        4096.0
    }
}

/// Serves `GET /metrics`, the text `render` makes, until the broker stops;
/// anything else gets a 404.
pub async fn serve_http(
    render: Arc<dyn Fn() -> String + Send + Sync>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let render = render.clone();
                tokio::spawn(async move {
                    if let Err(e) = tokio::time::timeout(HTTP_TIMEOUT, answer(&*render, stream)).await {
                        tracing::debug!("metrics request timed out: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("metrics accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn answer(render: &(dyn Fn() -> String + Send + Sync), mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HTTP_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let request_line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|b| *b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = path.split(|b| *b == b'?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render()),
        (b"GET", _) => ("404 Not Found", "text/plain", "try /metrics\n".to_owned()),
        _ => ("405 Method Not Allowed", "text/plain", "only GET\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_lands_in_the_first_bucket_that_holds_it() {
        let metrics = Metrics::default();
        metrics.record_request(0, Duration::from_micros(300));
        metrics.record_request(0, Duration::from_millis(7));
        metrics.record_request(0, Duration::from_secs(60));
        let api = metrics.api(0).unwrap();
        let counts: Vec<u64> = api.latency_buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        assert_eq!(counts[0], 1, "0.3 ms <= 0.5 ms");
        assert_eq!(counts[4], 1, "7 ms <= 10 ms");
        assert_eq!(counts.iter().sum::<u64>(), 2, "a minute is only in +Inf");
        assert_eq!(api.requests.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn out_of_range_api_keys_are_ignored() {
        let metrics = Metrics::default();
        metrics.record_request(-1, Duration::ZERO);
        metrics.record_request(i16::MAX, Duration::ZERO);
        metrics.record_errors(500, &[(3, 1)]);
        assert!(metrics.served_apis().next().is_none());
    }

    #[test]
    fn under_replicated_partitions_are_the_led_ones_short_of_in_sync_replicas() {
        let partition = |leader: i32, replicas: &[i32], isr: &[i32]| PartitionImage {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: Vec::new(),
            leader_recovery_state: 0,
            ..Default::default()
        };
        let partitions = [
            partition(1, &[1], &[1]),
            partition(1, &[1, 2, 3], &[1, 2, 3]),
            partition(1, &[1, 2, 3], &[1]),
            partition(1, &[1, 2], &[1]),
            partition(2, &[2, 1], &[2]),
        ];
        assert_eq!(under_replicated_count(&partitions, 1), 2, "led here and short");
        assert_eq!(under_replicated_count(&partitions, 2), 1, "the other leader's");
        assert_eq!(under_replicated_count(&partitions[..2], 1), 0);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }

    #[test]
    fn process_stats_are_read() {
        let stats = ProcessStats::read();
        assert!(stats.resident_bytes > 0.0 && stats.virtual_bytes >= stats.resident_bytes);
        assert!(stats.open_fds > 0.0);
    }
}
