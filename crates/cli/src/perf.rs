//! `strom perf produce`: the counterpart of `kafka-producer-perf-test.sh`.
//!
//! Sends `--num-records` records of `--record-size` bytes (one random
//! payload of A–Z, as Kafka's tool does) at `--throughput` records/s (-1:
//! as fast as possible), prints a progress line every few seconds and a
//! final summary with throughput, latency percentiles (send to
//! acknowledgement) and this process's CPU time per GB sent.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use strom_client::config::Properties;
use strom_client::producer::DeliveryFuture;
use strom_client::{Producer, ProducerConfig, ProducerRecord};

use crate::client_args::{load_properties, set_bootstrap_servers, warn_idempotence_fallback};

#[derive(clap::Subcommand, Debug)]
pub enum PerfCommand {
    /// Measure producer throughput and latency.
    Produce(PerfProduceArgs),
    /// Measure consumer throughput.
    Consume(crate::perf_consume::PerfConsumeArgs),
}

#[derive(clap::Args, Debug)]
pub struct PerfProduceArgs {
    /// The broker(s) to connect to [default: `bootstrap.servers` of
    /// --producer-props or --producer.config, else $STROM_BOOTSTRAP_SERVER, else
    /// localhost:9092].
    #[arg(long = "bootstrap-server", value_name = "HOST:PORT")]
    bootstrap_server: Option<String>,
    /// The topic to write to.
    #[arg(long)]
    topic: String,
    /// Records to send.
    #[arg(long = "num-records")]
    num_records: u64,
    /// Bytes per record value.
    #[arg(long = "record-size")]
    record_size: usize,
    /// Records per second to aim for; -1 for no limit.
    #[arg(long, allow_hyphen_values = true)]
    throughput: f64,
    /// Producer configs, `key=value ...`.
    #[arg(long = "producer-props", value_name = "KEY=VALUE", num_args = 1..)]
    producer_props: Vec<String>,
    /// A producer properties file.
    #[arg(long = "producer.config", value_name = "FILE")]
    producer_config: Option<PathBuf>,
    /// `acks`: all, -1, 0 or 1.
    #[arg(long)]
    acks: Option<String>,
    /// `compression.type`: none, gzip, snappy, lz4 or zstd.
    #[arg(long = "compression-codec")]
    compression_codec: Option<String>,
    /// `batch.size` in bytes.
    #[arg(long = "batch-size")]
    batch_size: Option<usize>,
    /// `linger.ms`: milliseconds a batch waits for more records.
    #[arg(long = "linger-ms")]
    linger_ms: Option<u64>,
    /// Milliseconds between progress lines.
    #[arg(long = "reporting-interval-ms", default_value_t = 5000)]
    reporting_interval_ms: u64,
    /// Summary format: `text` (Kafka's line) or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

pub fn run(command: PerfCommand) -> anyhow::Result<()> {
    let args = match command {
        PerfCommand::Produce(args) => args,
        PerfCommand::Consume(args) => return crate::perf_consume::run(args),
    };
    let config = ProducerConfig::from_properties(&producer_properties(&args)?)?;
    // Two workers: the loop that sends and the producer's sender task.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let summary = runtime.block_on(produce(config, &args))?;
    if args.format == "json" {
        println!("{}", summary.json());
    } else {
        println!("{}", summary.text());
    }
    if summary.failed > 0 {
        bail!("{} records failed", summary.failed);
    }
    Ok(())
}

fn producer_properties(args: &PerfProduceArgs) -> anyhow::Result<Properties> {
    let mut properties = load_properties(args.producer_config.as_deref(), &args.producer_props)?;
    let mut set = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            properties.insert(key.to_owned(), value);
        }
    };
    set("acks", args.acks.clone());
    set("compression.type", args.compression_codec.clone());
    set("batch.size", args.batch_size.map(|b| b.to_string()));
    set("linger.ms", args.linger_ms.map(|l| l.to_string()));
    set_bootstrap_servers(&mut properties, args.bootstrap_server.as_deref());
    Ok(properties)
}

/// The payload every record carries: random capital letters.
fn payload(size: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64 ^ std::process::id() as u64;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b'A' + (state % 26) as u8
        })
        .collect()
}

async fn produce(config: ProducerConfig, args: &PerfProduceArgs) -> anyhow::Result<Summary> {
    let producer = Producer::connect(config).await?;
    warn_idempotence_fallback(&producer);
    let value = payload(args.record_size);
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    let mut stats = Stats::new(args.num_records, args.record_size);
    let mut window = Window::new(start);
    let interval = Duration::from_millis(args.reporting_interval_ms.max(100));
    let mut pending: VecDeque<(Instant, DeliveryFuture)> = VecDeque::new();
    for sent in 0..args.num_records {
        if args.throughput > 0.0 {
            throttle(start, sent, args.throughput).await;
        }
        let record = ProducerRecord::new(&args.topic, &value);
        let sent_at = Instant::now();
        pending.push_back((sent_at, producer.send(record).await?));
        while pending.front().is_some_and(|(_, f)| f.completed_at().is_some()) {
            let (sent_at, future) = pending.pop_front().expect("front exists");
            stats.record(sent_at, &future, &mut window);
        }
        if sent.is_multiple_of(1024) && window.started.elapsed() >= interval {
            // Progress goes to stdout like Kafka's tool, except when stdout
            // carries the JSON summary alone.
            match args.format.as_str() {
                "json" => eprintln!("{}", window.line(args.record_size)),
                _ => println!("{}", window.line(args.record_size)),
            }
            window = Window::new(Instant::now());
        }
    }
    producer.flush().await;
    for (sent_at, future) in pending {
        future.wait().await.ok();
        stats.record(sent_at, &future, &mut window);
    }
    let elapsed = start.elapsed();
    producer.close().await;
    Ok(stats.summary(elapsed, cpu_seconds() - cpu_start))
}

/// Sleeps while the loop is ahead of `throughput` records/s.
async fn throttle(start: Instant, sent: u64, throughput: f64) {
    let due = start + Duration::from_secs_f64(sent as f64 / throughput);
    let now = Instant::now();
    if due > now + Duration::from_millis(1) {
        tokio::time::sleep(due - now).await;
    }
}

/// A reporting window's counts, for the progress lines.
struct Window {
    started: Instant,
    records: u64,
    latency_sum_ms: f64,
    latency_max_ms: f64,
}

impl Window {
    fn new(started: Instant) -> Self {
        Self { started, records: 0, latency_sum_ms: 0.0, latency_max_ms: 0.0 }
    }

    fn line(&self, record_size: usize) -> String {
        let seconds = self.started.elapsed().as_secs_f64().max(1e-9);
        let rate = self.records as f64 / seconds;
        format!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.1} ms avg latency, {:.1} ms max latency.",
            self.records,
            rate,
            rate * record_size as f64 / (1024.0 * 1024.0),
            self.latency_sum_ms / self.records.max(1) as f64,
            self.latency_max_ms
        )
    }
}

/// Totals and a latency sample (every `sampling`-th record, as Kafka's
/// tool keeps at most ~500k of them).
struct Stats {
    record_size: usize,
    records: u64,
    failed: u64,
    first_error: Option<String>,
    latency_sum_ms: f64,
    latency_max_ms: f64,
    sampling: u64,
    samples_us: Vec<u32>,
}

impl Stats {
    fn new(num_records: u64, record_size: usize) -> Self {
        let sampling = (num_records / num_records.clamp(1, 500_000)).max(1);
        Self {
            record_size,
            records: 0,
            failed: 0,
            first_error: None,
            latency_sum_ms: 0.0,
            latency_max_ms: 0.0,
            sampling,
            samples_us: Vec::with_capacity((num_records / sampling).min(500_001) as usize),
        }
    }

    fn record(&mut self, sent_at: Instant, future: &DeliveryFuture, window: &mut Window) {
        if let Some(Err(e)) = future.try_result() {
            self.failed += 1;
            if self.first_error.is_none() {
                eprintln!("strom: record failed: {e}");
                self.first_error = Some(e.to_string());
            }
            return;
        }
        let done = future.completed_at().unwrap_or_else(Instant::now);
        let latency = done.saturating_duration_since(sent_at);
        let latency_ms = latency.as_secs_f64() * 1000.0;
        self.latency_sum_ms += latency_ms;
        self.latency_max_ms = self.latency_max_ms.max(latency_ms);
        if self.records.is_multiple_of(self.sampling) {
            self.samples_us.push(latency.as_micros().min(u32::MAX as u128) as u32);
        }
        self.records += 1;
        window.records += 1;
        window.latency_sum_ms += latency_ms;
        window.latency_max_ms = window.latency_max_ms.max(latency_ms);
    }

    fn summary(mut self, elapsed: Duration, cpu_seconds: f64) -> Summary {
        self.samples_us.sort_unstable();
        let percentile = |p: f64| -> f64 {
            if self.samples_us.is_empty() {
                return 0.0;
            }
            let index = ((p * self.samples_us.len() as f64) as usize).min(self.samples_us.len() - 1);
            f64::from(self.samples_us[index]) / 1000.0
        };
        let seconds = elapsed.as_secs_f64().max(1e-9);
        let bytes = self.records as f64 * self.record_size as f64;
        Summary {
            records: self.records,
            failed: self.failed,
            records_per_sec: self.records as f64 / seconds,
            mb_per_sec: bytes / seconds / (1024.0 * 1024.0),
            latency_avg_ms: self.latency_sum_ms / self.records.max(1) as f64,
            latency_max_ms: self.latency_max_ms,
            p50_ms: percentile(0.5),
            p95_ms: percentile(0.95),
            p99_ms: percentile(0.99),
            p999_ms: percentile(0.999),
            elapsed_s: seconds,
            cpu_s: cpu_seconds,
            cpu_s_per_gb: if bytes > 0.0 { cpu_seconds / (bytes / 1e9) } else { 0.0 },
        }
    }
}

struct Summary {
    records: u64,
    failed: u64,
    records_per_sec: f64,
    mb_per_sec: f64,
    latency_avg_ms: f64,
    latency_max_ms: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    elapsed_s: f64,
    cpu_s: f64,
    cpu_s_per_gb: f64,
}

impl Summary {
    /// Kafka's final line, plus the client's CPU time.
    fn text(&self) -> String {
        format!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, \
             {:.2} ms 50th, {:.2} ms 95th, {:.2} ms 99th, {:.2} ms 99.9th. client CPU {:.2} s ({:.2} s/GB)",
            self.records,
            self.records_per_sec,
            self.mb_per_sec,
            self.latency_avg_ms,
            self.latency_max_ms,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.p999_ms,
            self.cpu_s,
            self.cpu_s_per_gb
        )
    }

    fn json(&self) -> String {
        format!(
            "{{\"records\": {}, \"failed\": {}, \"elapsed_s\": {:.3}, \"records_per_sec\": {:.1}, \"mb_per_sec\": {:.3}, \
             \"latency_avg_ms\": {:.3}, \"latency_p50_ms\": {:.3}, \"latency_p95_ms\": {:.3}, \"latency_p99_ms\": {:.3}, \
             \"latency_p999_ms\": {:.3}, \"latency_max_ms\": {:.3}, \"cpu_s\": {:.3}, \"cpu_s_per_gb\": {:.3}}}",
            self.records,
            self.failed,
            self.elapsed_s,
            self.records_per_sec,
            self.mb_per_sec,
            self.latency_avg_ms,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.p999_ms,
            self.latency_max_ms,
            self.cpu_s,
            self.cpu_s_per_gb
        )
    }
}

/// User plus system CPU time of this process so far.
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete `rusage` into the pointer we
    // pass, which points to writable memory of exactly that type.
    #[allow(unsafe_code)]
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return 0.0;
        }
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_capital_letters_of_the_asked_size() {
        let value = payload(1000);
        assert_eq!(value.len(), 1000);
        assert!(value.iter().all(u8::is_ascii_uppercase));
        assert!(
            value.iter().collect::<std::collections::BTreeSet<_>>().len() > 20,
            "spread over the alphabet"
        );
    }

    #[test]
    fn summary_json_has_every_field() {
        let stats = Stats::new(10, 100);
        let json = stats.summary(Duration::from_secs(1), 0.5).json();
        for key in
            ["records", "records_per_sec", "mb_per_sec", "latency_p99_ms", "latency_p999_ms", "cpu_s_per_gb"]
        {
            assert!(json.contains(&format!("\"{key}\"")), "{key} missing from {json}");
        }
    }
}
