//! `strom produce`: the console producer. One record per input line, with
//! `kafka-console-producer.sh`'s line format properties:
//!
//! ```text
//! [h1:v1,h2:v2<TAB>][key<key.separator>]value      (parse.headers, parse.key)
//! ```

use std::collections::VecDeque;
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{bail, Context};
use strom_client::config::Properties;
use strom_client::producer::{DeliveryFuture, Header};
use strom_client::{Producer, ProducerConfig, ProducerRecord};

use crate::client_args::{format_properties, property_flag, runtime, warn_idempotence_fallback, ConnectArgs};

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The topic to write to.
    #[arg(long)]
    topic: String,
    /// Read lines from this file instead of standard input.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Line format: `parse.key`, `key.separator`, `parse.headers`,
    /// `headers.delimiter`, `headers.separator`, `headers.key.separator`,
    /// `null.marker`, `ignore.error`.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// A producer config, `key=value`; repeatable.
    #[arg(long = "producer-property", value_name = "KEY=VALUE")]
    producer_properties: Vec<String>,
    /// `acks`: all, -1, 0 or 1.
    #[arg(long)]
    acks: Option<String>,
    /// `compression.type`: none, gzip, snappy, lz4 or zstd.
    #[arg(long = "compression-codec")]
    compression_codec: Option<String>,
    /// Send every record to this partition.
    #[arg(long)]
    partition: Option<i32>,
}

/// How to cut a line into headers, key and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineFormat {
    parse_key: bool,
    key_separator: String,
    parse_headers: bool,
    headers_delimiter: String,
    headers_separator: String,
    headers_key_separator: String,
    null_marker: Option<String>,
    ignore_error: bool,
}

impl LineFormat {
    fn from_properties(properties: &Properties) -> anyhow::Result<Self> {
        let text =
            |key: &str, default: &str| properties.get(key).cloned().unwrap_or_else(|| default.to_owned());
        let flag = |key: &str| property_flag(properties, key, false);
        let format = Self {
            parse_key: flag("parse.key")?,
            key_separator: text("key.separator", "\t"),
            parse_headers: flag("parse.headers")?,
            headers_delimiter: text("headers.delimiter", "\t"),
            headers_separator: text("headers.separator", ","),
            headers_key_separator: text("headers.key.separator", ":"),
            null_marker: properties.get("null.marker").cloned().filter(|m| !m.is_empty()),
            ignore_error: flag("ignore.error")?,
        };
        if [
            &format.key_separator,
            &format.headers_delimiter,
            &format.headers_separator,
            &format.headers_key_separator,
        ]
        .iter()
        .any(|s| s.is_empty())
        {
            bail!("separators must not be empty");
        }
        Ok(format)
    }

    /// Splits a line; `Err` when a separator the format needs is missing.
    fn parse<'a>(&self, line: &'a str) -> anyhow::Result<ParsedLine<'a>> {
        let mut rest = line;
        let mut headers = Vec::new();
        if self.parse_headers {
            let (head, tail) = self.split(rest, &self.headers_delimiter, "headers.delimiter")?;
            rest = tail;
            for header in head.split(self.headers_separator.as_str()).filter(|h| !h.is_empty()) {
                let (name, value) =
                    self.split(header, &self.headers_key_separator, "headers.key.separator")?;
                headers.push((name, self.nullable(value)));
            }
        }
        let (key, value) = if self.parse_key {
            let (key, value) = self.split(rest, &self.key_separator, "key.separator")?;
            (self.nullable(key), self.nullable(value))
        } else {
            (None, self.nullable(rest))
        };
        Ok(ParsedLine { headers, key, value })
    }

    fn split<'a>(&self, text: &'a str, separator: &str, name: &str) -> anyhow::Result<(&'a str, &'a str)> {
        match text.split_once(separator) {
            Some(parts) => Ok(parts),
            None if self.ignore_error => Ok((text, "")),
            None => bail!("no {name} {separator:?} in line {text:?}"),
        }
    }

    fn nullable<'a>(&self, text: &'a str) -> Option<&'a str> {
        (self.null_marker.as_deref() != Some(text)).then_some(text)
    }
}

#[derive(Debug, PartialEq, Eq)]
struct ParsedLine<'a> {
    headers: Vec<(&'a str, Option<&'a str>)>,
    key: Option<&'a str>,
    value: Option<&'a str>,
}

pub fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut extra = args.producer_properties.clone();
    extra.extend(args.acks.iter().map(|a| format!("acks={a}")));
    extra.extend(args.compression_codec.iter().map(|c| format!("compression.type={c}")));
    let config = ProducerConfig::from_properties(&args.connect.properties(&extra)?)?;
    let format =
        LineFormat::from_properties(&format_properties(args.properties.iter().map(String::as_str))?)?;
    let input: Box<dyn BufRead> = match &args.file {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    runtime()?.block_on(produce_lines(config, &args, &format, input))
}

/// Sends every line, reporting failed records as it goes; fails at the
/// end if any record failed.
async fn produce_lines(
    config: ProducerConfig,
    args: &ProduceArgs,
    format: &LineFormat,
    input: Box<dyn BufRead>,
) -> anyhow::Result<()> {
    let producer = Producer::connect(config).await?;
    warn_idempotence_fallback(&producer);
    let mut pending: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut failures = 0usize;
    for (number, line) in input.lines().enumerate() {
        let line = line.context("cannot read input")?;
        let parsed = format.parse(&line).with_context(|| format!("line {}", number + 1))?;
        let headers: Vec<Header<'_>> =
            parsed.headers.iter().map(|(k, v)| (*k, v.map(str::as_bytes))).collect();
        let record = ProducerRecord {
            topic: &args.topic,
            partition: args.partition,
            key: parsed.key.map(str::as_bytes),
            value: parsed.value.map(str::as_bytes),
            headers: &headers,
            timestamp: None,
        };
        pending.push_back(producer.send(record).await?);
        while let Some(result) = pending.front().and_then(DeliveryFuture::try_result) {
            pending.pop_front();
            failures += report(result);
        }
    }
    producer.flush().await;
    for delivery in pending {
        failures += report(delivery.wait().await);
    }
    producer.close().await;
    if failures > 0 {
        bail!("{failures} records were not delivered");
    }
    Ok(())
}

fn report(result: strom_client::Result<strom_client::RecordMetadata>) -> usize {
    match result {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("strom: error sending a record: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(pairs: &[&str]) -> LineFormat {
        LineFormat::from_properties(&format_properties(pairs.iter().copied()).unwrap()).unwrap()
    }

    #[test]
    fn plain_lines_are_values() {
        let parsed = format(&[]).parse("a:b\tc").unwrap();
        assert_eq!(parsed, ParsedLine { headers: vec![], key: None, value: Some("a:b\tc") });
    }

    #[test]
    fn keys_and_headers_split_as_kafka_does() {
        let f = format(&["parse.key=true", "key.separator=:", "parse.headers=true", "null.marker=NULL"]);
        let parsed = f.parse("h1:v1,h2:NULL\tk:v:w").unwrap();
        assert_eq!(parsed.headers, [("h1", Some("v1")), ("h2", None)]);
        assert_eq!((parsed.key, parsed.value), (Some("k"), Some("v:w")));
        assert_eq!(f.parse("\tNULL:v").unwrap().key, None);
        assert!(f.parse("no-delimiter").is_err());
    }

    #[test]
    fn ignore_error_keeps_lines_without_separator() {
        let f = format(&["parse.key=true", "ignore.error=true"]);
        let parsed = f.parse("lonely").unwrap();
        assert_eq!((parsed.key, parsed.value), (Some("lonely"), Some("")));
    }
}
