//! `strom consume`: the console consumer, with the flags and the output
//! line of `kafka-console-consumer.sh` (its `DefaultMessageFormatter`):
//!
//! ```text
//! [CreateTime:ts<sep>][Partition:p<sep>][Offset:o<sep>][h1:v1,h2:v2<sep>][key<sep>]value
//! ```
//!
//! With `--group` the consumer joins that group and commits what it
//! printed; without one it reads the topic's partitions directly and
//! commits nothing.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use kafka_protocol::error::ResponseError;
use strom_client::cluster::TopicInfo;
use strom_client::config::Properties;
use strom_client::consumer::{NoListener, TimestampType};
use strom_client::{Cluster, Consumer, ConsumerConfig, ConsumerRecord, TopicPartition};

use crate::client_args::{format_properties, property_flag, runtime, ConnectArgs};

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The topic to read.
    #[arg(long)]
    topic: String,
    /// Join this consumer group and commit offsets in it.
    #[arg(long)]
    group: Option<String>,
    /// Read only this partition.
    #[arg(long)]
    partition: Option<i32>,
    /// With --partition: `earliest`, `latest` or an offset to start at.
    #[arg(long, requires = "partition")]
    offset: Option<String>,
    /// Start at the earliest offset when there is no committed one.
    #[arg(long = "from-beginning")]
    from_beginning: bool,
    /// Exit after this many records.
    #[arg(long = "max-messages")]
    max_messages: Option<u64>,
    /// Exit when no record arrives for this many milliseconds.
    #[arg(long = "timeout-ms")]
    timeout_ms: Option<u64>,
    /// `read_uncommitted` (default) or `read_committed`.
    #[arg(long = "isolation-level")]
    isolation_level: Option<String>,
    /// Output: `print.key`, `print.value`, `print.timestamp`,
    /// `print.partition`, `print.offset`, `print.headers`, `key.separator`,
    /// `line.separator`, `headers.separator`, `headers.key.separator`,
    /// `null.literal`.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// A consumer config, `key=value`; repeatable.
    #[arg(long = "consumer-property", value_name = "KEY=VALUE")]
    consumer_properties: Vec<String>,
    /// `text` (the formatter's line) or `json` (one object per record).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// What to print of each record, and how (Kafka's formatter properties).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Formatter {
    print_timestamp: bool,
    print_partition: bool,
    print_offset: bool,
    print_headers: bool,
    print_key: bool,
    print_value: bool,
    key_separator: String,
    line_separator: String,
    headers_separator: String,
    headers_key_separator: String,
    null_literal: String,
}

impl Formatter {
    fn from_properties(properties: &Properties) -> anyhow::Result<Self> {
        let text =
            |key: &str, default: &str| properties.get(key).cloned().unwrap_or_else(|| default.to_owned());
        let flag = |key: &str, default: bool| property_flag(properties, key, default);
        Ok(Self {
            print_timestamp: flag("print.timestamp", false)?,
            print_partition: flag("print.partition", false)?,
            print_offset: flag("print.offset", false)?,
            print_headers: flag("print.headers", false)?,
            print_key: flag("print.key", false)?,
            print_value: flag("print.value", true)?,
            key_separator: text("key.separator", "\t"),
            line_separator: text("line.separator", "\n"),
            headers_separator: text("headers.separator", ","),
            headers_key_separator: text("headers.key.separator", ":"),
            null_literal: text("null.literal", "null"),
        })
    }

    fn write(&self, out: &mut impl Write, record: &ConsumerRecord) -> std::io::Result<()> {
        let mut fields: Vec<Vec<u8>> = Vec::with_capacity(6);
        if self.print_timestamp {
            let kind = match record.timestamp_type {
                TimestampType::CreateTime => "CreateTime",
                TimestampType::LogAppendTime => "LogAppendTime",
            };
            fields.push(format!("{kind}:{}", record.timestamp).into_bytes());
        }
        if self.print_partition {
            fields.push(format!("Partition:{}", record.partition).into_bytes());
        }
        if self.print_offset {
            fields.push(format!("Offset:{}", record.offset).into_bytes());
        }
        if self.print_headers {
            fields.push(self.headers(record));
        }
        if self.print_key {
            fields.push(self.nullable(record.key.as_deref()));
        }
        if self.print_value {
            fields.push(self.nullable(record.value.as_deref()));
        }
        out.write_all(&fields.join(self.key_separator.as_bytes()))?;
        out.write_all(self.line_separator.as_bytes())
    }

    fn headers(&self, record: &ConsumerRecord) -> Vec<u8> {
        if record.headers.is_empty() {
            return b"NO_HEADERS".to_vec();
        }
        let pairs: Vec<Vec<u8>> = record
            .headers
            .iter()
            .map(|(name, value)| {
                let mut pair = name.as_bytes().to_vec();
                pair.extend_from_slice(self.headers_key_separator.as_bytes());
                pair.extend(self.nullable(value.as_deref()));
                pair
            })
            .collect();
        pairs.join(self.headers_separator.as_bytes())
    }

    fn nullable(&self, bytes: Option<&[u8]>) -> Vec<u8> {
        bytes.unwrap_or(self.null_literal.as_bytes()).to_vec()
    }
}

/// A record as one JSON object; keys, values and headers as UTF-8 text
/// (lossy), null when absent.
fn json_line(record: &ConsumerRecord) -> String {
    let text = |bytes: Option<&[u8]>| match bytes {
        Some(bytes) => serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned()),
        None => serde_json::Value::Null,
    };
    let headers: Vec<serde_json::Value> = record
        .headers
        .iter()
        .map(|(name, value)| serde_json::json!({ "key": name, "value": text(value.as_deref()) }))
        .collect();
    serde_json::json!({
        "topic": &*record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": match record.timestamp_type {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        },
        "key": text(record.key.as_deref()),
        "value": text(record.value.as_deref()),
        "headers": headers,
    })
    .to_string()
}

/// Where a `--partition` read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartAt {
    Earliest,
    Latest,
    Offset(i64),
}

fn parse_start(text: &str) -> anyhow::Result<StartAt> {
    match text.trim() {
        "earliest" => Ok(StartAt::Earliest),
        "latest" => Ok(StartAt::Latest),
        n => match n.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(StartAt::Offset(offset)),
            _ => bail!("--offset {n} is not earliest, latest or a non-negative offset"),
        },
    }
}

fn consumer_properties(args: &ConsumeArgs) -> anyhow::Result<Properties> {
    let mut properties = args.connect.properties(&args.consumer_properties)?;
    let reset = if args.from_beginning { "earliest" } else { "latest" };
    properties.entry("auto.offset.reset".into()).or_insert_with(|| reset.into());
    if let Some(level) = &args.isolation_level {
        properties.insert("isolation.level".into(), level.clone());
    }
    if let Some(group) = &args.group {
        properties.insert("group.id".into(), group.clone());
    }
    properties.entry("client.id".into()).or_insert_with(|| "strom-console-consumer".into());
    Ok(properties)
}

pub fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let formatter =
        Formatter::from_properties(&format_properties(args.properties.iter().map(String::as_str))?)?;
    let start = args.offset.as_deref().map(parse_start).transpose()?;
    let config = ConsumerConfig::from_properties(&consumer_properties(&args)?)?;
    runtime()?.block_on(async {
        let mut consumer = Consumer::connect(config).await?;
        let topic = existing_topic(consumer.cluster(), &args.topic).await?;
        match (args.partition, &args.group) {
            (None, Some(_)) => consumer.subscribe(std::slice::from_ref(&args.topic), Box::new(NoListener))?,
            (partition, _) => {
                let partitions: Vec<TopicPartition> = match partition {
                    Some(p) if topic.partition(p).is_none() => {
                        bail!("topic {} has no partition {p}", args.topic)
                    }
                    Some(p) => vec![TopicPartition::new(args.topic.clone(), p)],
                    None => topic
                        .partitions
                        .iter()
                        .map(|p| TopicPartition::new(args.topic.clone(), p.partition))
                        .collect(),
                };
                consumer.assign(&partitions)?;
                match start {
                    Some(StartAt::Earliest) => consumer.seek_to_beginning(&partitions)?,
                    Some(StartAt::Latest) => consumer.seek_to_end(&partitions)?,
                    Some(StartAt::Offset(offset)) => consumer.seek(&partitions[0], offset)?,
                    None => {}
                }
            }
        }
        let outcome = print_records(&mut consumer, &args, &formatter).await;
        let closed = consumer.close().await;
        let printed = outcome?;
        eprintln!("Processed a total of {printed} messages");
        closed.context("closing the consumer")
    })
}

/// The topic's metadata, or an error at once when the cluster does not
/// know it: a subscription to a missing topic would otherwise wait for
/// ever, and a direct read would retry for `default.api.timeout.ms`.
async fn existing_topic(cluster: &Cluster, name: &str) -> anyhow::Result<Arc<TopicInfo>> {
    let names = [name.to_owned()];
    let metadata = cluster.refresh(Some(&names), false).await?;
    let error = metadata.topic(name).and_then(|topic| topic.error);
    if let Some(code) = error.filter(|code| code.0 == ResponseError::UnknownTopicOrPartition) {
        bail!("topic {name} does not exist ({code})");
    }
    Ok(cluster.topic(name, false).await?)
}

/// Prints records until `--max-messages`, `--timeout-ms` or Ctrl-C.
async fn print_records(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    formatter: &Formatter,
) -> anyhow::Result<u64> {
    let idle_limit = args.timeout_ms.map(Duration::from_millis);
    let mut idle_since = tokio::time::Instant::now();
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    while args.max_messages.is_none_or(|max| printed < max) {
        let poll_for =
            idle_limit.map_or(Duration::from_millis(500), |limit| limit.min(Duration::from_millis(500)));
        let records = tokio::select! {
            records = consumer.poll(poll_for) => records?,
            _ = &mut interrupted => break,
        };
        if records.is_empty() {
            if idle_limit.is_some_and(|limit| idle_since.elapsed() >= limit) {
                break;
            }
            continue;
        }
        idle_since = tokio::time::Instant::now();
        let mut out = stdout.lock();
        for record in &records {
            if args.max_messages.is_some_and(|max| printed >= max) {
                break;
            }
            match args.format.as_str() {
                "json" => writeln!(out, "{}", json_line(record))?,
                _ => formatter.write(&mut out, record)?,
            }
            printed += 1;
        }
        out.flush()?;
    }
    Ok(printed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 7,
            timestamp: 1_700_000_000_000,
            timestamp_type: TimestampType::CreateTime,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![("h".into(), Some(Bytes::from_static(b"v"))), ("n".into(), None)],
            leader_epoch: 0,
        }
    }

    fn line(pairs: &[&str]) -> String {
        let formatter =
            Formatter::from_properties(&format_properties(pairs.iter().copied()).unwrap()).unwrap();
        let mut out = Vec::new();
        formatter.write(&mut out, &record()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_match_kafkas_formatter() {
        assert_eq!(line(&[]), "null\n");
        assert_eq!(
            line(&["print.timestamp=true", "print.partition=true", "print.offset=true", "print.key=true"]),
            "CreateTime:1700000000000\tPartition:2\tOffset:7\tk\tnull\n"
        );
        assert_eq!(
            line(&["print.headers=true", "print.key=true", "key.separator= | ", "null.literal=-"]),
            "h:v,n:- | k | -\n"
        );
        assert_eq!(line(&["print.value=false", "print.offset=true"]), "Offset:7\n");
        assert!(Formatter::from_properties(&format_properties(["print.key=yes"]).unwrap()).is_err());
    }

    #[test]
    fn json_lines_carry_every_field() {
        let value: serde_json::Value = serde_json::from_str(&json_line(&record())).unwrap();
        assert_eq!(value["offset"], 7);
        assert_eq!(value["key"], "k");
        assert!(value["value"].is_null());
        assert_eq!(value["headers"][1]["value"], serde_json::Value::Null);
    }

    #[test]
    fn start_offsets_parse() {
        assert_eq!(parse_start("earliest").unwrap(), StartAt::Earliest);
        assert_eq!(parse_start("42").unwrap(), StartAt::Offset(42));
        assert!(parse_start("-3").is_err());
        assert!(parse_start("soon").is_err());
    }
}
