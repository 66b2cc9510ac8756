//! `strom perf consume`: the counterpart of `kafka-consumer-perf-test.sh`.
//!
//! Joins a group (a fresh `perf-consumer-N` unless `--group` names one),
//! reads `--messages` records from the earliest offset (or the latest with
//! `--from-latest`) and prints Kafka's summary columns (times in local
//! time, in Kafka's `--date-format` patterns), plus this
//! process's CPU time per GB read. It gives up when no record arrives for
//! `--timeout` ms.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use strom_client::config::Properties;
use strom_client::consumer::NoListener;
use strom_client::{Consumer, ConsumerConfig};

use crate::client_args::{load_properties, set_bootstrap_servers};
use crate::perf::cpu_seconds;
use crate::specs::{local_offset_s, DateFormat, PERF_DATE_FORMAT};

#[derive(clap::Args, Debug)]
pub struct PerfConsumeArgs {
    /// The broker(s) to connect to [default: `bootstrap.servers` of
    /// --consumer-props or --consumer.config, else $STROM_BOOTSTRAP_SERVER, else
    /// localhost:9092].
    #[arg(long = "bootstrap-server", value_name = "HOST:PORT")]
    bootstrap_server: Option<String>,
    /// The topic to read.
    #[arg(long)]
    topic: String,
    /// Records to read.
    #[arg(long)]
    messages: u64,
    /// The consumer group (default: a fresh `perf-consumer-N`).
    #[arg(long)]
    group: Option<String>,
    /// Start at the end of the log instead of the beginning.
    #[arg(long = "from-latest")]
    from_latest: bool,
    /// `max.partition.fetch.bytes`: bytes fetched per partition per request.
    #[arg(long = "fetch-size")]
    fetch_size: Option<u64>,
    /// Give up when no record arrives for this many ms.
    #[arg(long, default_value_t = 10_000)]
    timeout: u64,
    /// Milliseconds between progress lines.
    #[arg(long = "reporting-interval", default_value_t = 5_000)]
    reporting_interval: u64,
    /// A consumer properties file.
    #[arg(long = "consumer.config", value_name = "FILE")]
    consumer_config: Option<PathBuf>,
    /// Consumer configs, `key=value ...`.
    #[arg(long = "consumer-props", value_name = "KEY=VALUE", num_args = 1..)]
    consumer_props: Vec<String>,
    /// How the text summary prints start and end times, in local time: the
    /// numeric fields of Java's `SimpleDateFormat` (y M d H m s S) and 'text'.
    #[arg(long = "date-format", value_name = "PATTERN", default_value = PERF_DATE_FORMAT)]
    date_format: String,
    /// Leave out the header line of the text summary.
    #[arg(long = "hide-header")]
    hide_header: bool,
    /// Summary format: `text` (Kafka's columns) or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

fn consumer_properties(args: &PerfConsumeArgs) -> anyhow::Result<Properties> {
    let mut properties = load_properties(args.consumer_config.as_deref(), &args.consumer_props)?;
    set_bootstrap_servers(&mut properties, args.bootstrap_server.as_deref());
    let group = args.group.clone().unwrap_or_else(|| format!("perf-consumer-{}", std::process::id()));
    properties.insert("group.id".into(), group);
    let reset = if args.from_latest { "latest" } else { "earliest" };
    properties.insert("auto.offset.reset".into(), reset.into());
    if let Some(size) = args.fetch_size {
        properties.insert("max.partition.fetch.bytes".into(), size.to_string());
    }
    Ok(properties)
}

pub fn run(args: PerfConsumeArgs) -> anyhow::Result<()> {
    let date_format = DateFormat::parse(&args.date_format)?;
    let config = ConsumerConfig::from_properties(&consumer_properties(&args)?)?;
    // One thread: on two cores the broker needs the other one, and a
    // second worker only adds wake-ups (measured slower).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let summary = runtime.block_on(consume(config, &args))?;
    match args.format.as_str() {
        "json" => println!("{}", summary.json()),
        _ => {
            if !args.hide_header {
                println!(
                    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
                     rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec, client.cpu.s, client.cpu.s.per.GB"
                );
            }
            println!("{}", summary.text(&date_format));
        }
    }
    if summary.records < args.messages {
        bail!(
            "read {} of {} records before {} ms passed without one",
            summary.records,
            args.messages,
            args.timeout
        );
    }
    Ok(())
}

async fn consume(config: ConsumerConfig, args: &PerfConsumeArgs) -> anyhow::Result<Summary> {
    let start_wall = SystemTime::now();
    let start = Instant::now();
    let cpu_start = cpu_seconds();
    let mut consumer = Consumer::connect(config).await?;
    consumer.subscribe(std::slice::from_ref(&args.topic), Box::new(NoListener))?;
    let idle_limit = Duration::from_millis(args.timeout);
    let interval = Duration::from_millis(args.reporting_interval.max(100));
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut first_record_at: Option<Instant> = None;
    let mut last_record_at = Instant::now();
    let mut window = (Instant::now(), 0u64, 0u64);
    while records < args.messages && last_record_at.elapsed() < idle_limit {
        let batch = consumer.poll(Duration::from_millis(100)).await?;
        if batch.is_empty() {
            continue;
        }
        let now = Instant::now();
        first_record_at.get_or_insert(now);
        last_record_at = now;
        for record in &batch {
            let size =
                record.key.as_ref().map_or(0, |k| k.len()) + record.value.as_ref().map_or(0, |v| v.len());
            bytes += size as u64;
        }
        records += batch.len() as u64;
        if window.0.elapsed() >= interval {
            let seconds = window.0.elapsed().as_secs_f64();
            eprintln!(
                "{} records read, {:.1} records/sec ({:.2} MB/sec).",
                records - window.1,
                (records - window.1) as f64 / seconds,
                (bytes - window.2) as f64 / seconds / MB
            );
            window = (Instant::now(), records, bytes);
        }
    }
    let end = Instant::now();
    consumer.close().await?;
    let elapsed = end - start;
    let rebalance = first_record_at.map_or(elapsed, |first| first - start);
    Ok(Summary {
        start_ms: millis_since_epoch(start_wall),
        end_ms: millis_since_epoch(start_wall) + elapsed.as_millis() as u64,
        records,
        bytes,
        elapsed,
        fetch: elapsed.saturating_sub(rebalance),
        rebalance,
        cpu_s: cpu_seconds() - cpu_start,
    })
}

const MB: f64 = 1024.0 * 1024.0;

fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

struct Summary {
    start_ms: u64,
    end_ms: u64,
    records: u64,
    bytes: u64,
    elapsed: Duration,
    /// From start to the first record: connecting and joining the group.
    rebalance: Duration,
    fetch: Duration,
    cpu_s: f64,
}

impl Summary {
    fn rates(&self, over: Duration) -> (f64, f64) {
        let seconds = over.as_secs_f64().max(1e-9);
        (self.bytes as f64 / MB / seconds, self.records as f64 / seconds)
    }

    fn cpu_s_per_gb(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.cpu_s / (self.bytes as f64 / 1e9)
        }
    }

    /// Kafka's columns, then the client's CPU.
    fn text(&self, date_format: &DateFormat) -> String {
        let (mb_sec, msg_sec) = self.rates(self.elapsed);
        let (fetch_mb_sec, fetch_msg_sec) = self.rates(self.fetch);
        format!(
            "{}, {}, {:.4}, {:.4}, {}, {:.4}, {}, {}, {:.4}, {:.4}, {:.3}, {:.3}",
            date_format.format(self.start_ms as i64, local_offset_s),
            date_format.format(self.end_ms as i64, local_offset_s),
            self.bytes as f64 / MB,
            mb_sec,
            self.records,
            msg_sec,
            self.rebalance.as_millis(),
            self.fetch.as_millis(),
            fetch_mb_sec,
            fetch_msg_sec,
            self.cpu_s,
            self.cpu_s_per_gb()
        )
    }

    fn json(&self) -> String {
        let (mb_sec, msg_sec) = self.rates(self.elapsed);
        let (fetch_mb_sec, fetch_msg_sec) = self.rates(self.fetch);
        serde_json::json!({
            "records": self.records,
            "bytes": self.bytes,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "mb_per_sec": mb_sec,
            "records_per_sec": msg_sec,
            "rebalance_ms": self.rebalance.as_millis() as u64,
            "fetch_ms": self.fetch.as_millis() as u64,
            "fetch_mb_per_sec": fetch_mb_sec,
            "fetch_records_per_sec": fetch_msg_sec,
            "cpu_s": self.cpu_s,
            "cpu_s_per_gb": self.cpu_s_per_gb(),
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_rates_exclude_the_join() {
        let summary = Summary {
            start_ms: 0,
            end_ms: 3000,
            records: 1000,
            bytes: 2 * 1024 * 1024,
            elapsed: Duration::from_secs(3),
            rebalance: Duration::from_secs(1),
            fetch: Duration::from_secs(2),
            cpu_s: 0.5,
        };
        let json: serde_json::Value = serde_json::from_str(&summary.json()).unwrap();
        assert_eq!(json["fetch_mb_per_sec"], 1.0);
        assert_eq!(json["fetch_records_per_sec"], 500.0);
        let text = summary.text(&DateFormat::parse(PERF_DATE_FORMAT).unwrap());
        assert_eq!(text.split(", ").count(), 12);
    }
}
