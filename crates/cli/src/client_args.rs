//! What every client tool shares: where the cluster is and how to talk to it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use strom_client::config::{parse_pairs, Properties};

/// Where the tools look for a broker when neither `--bootstrap-server`,
/// the config properties nor `STROM_BOOTSTRAP_SERVER` name one: a broker
/// started with the embedded defaults.
pub const DEFAULT_BOOTSTRAP_SERVER: &str = "localhost:9092";

/// The environment variable that names the cluster for every tool.
pub const BOOTSTRAP_SERVER_ENV: &str = "STROM_BOOTSTRAP_SERVER";

/// `--bootstrap-server` and `--command-config`, as in Kafka's tools.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    /// The broker(s) to connect to: `host:port[,host:port...]` [default:
    /// `bootstrap.servers` of --command-config, else $STROM_BOOTSTRAP_SERVER, else
    /// localhost:9092].
    #[arg(long = "bootstrap-server", value_name = "HOST:PORT")]
    pub bootstrap_server: Option<String>,
    /// A properties file of client configs (`client.id`, `request.timeout.ms`, …).
    #[arg(long = "command-config", value_name = "FILE")]
    pub command_config: Option<PathBuf>,
}

impl ConnectArgs {
    /// The client properties: the file's, then `extra` pairs, then the
    /// bootstrap server, each overriding the one before.
    pub fn properties(&self, extra: &[String]) -> anyhow::Result<Properties> {
        let mut properties = load_properties(self.command_config.as_deref(), extra)?;
        set_bootstrap_servers(&mut properties, self.bootstrap_server.as_deref());
        Ok(properties)
    }
}

/// Sets `bootstrap.servers`: the flag's value wins over the properties';
/// when neither names one, `STROM_BOOTSTRAP_SERVER`, else
/// [`DEFAULT_BOOTSTRAP_SERVER`]. (The variable ranks below a config file
/// because it is ambient, the file explicit.)
pub fn set_bootstrap_servers(properties: &mut Properties, flag: Option<&str>) {
    if let Some(servers) = flag {
        properties.insert("bootstrap.servers".into(), servers.to_owned());
    }
    properties.entry("bootstrap.servers".into()).or_insert_with(|| {
        let from_env = std::env::var(BOOTSTRAP_SERVER_ENV).ok().filter(|v| !v.trim().is_empty());
        from_env.unwrap_or_else(|| DEFAULT_BOOTSTRAP_SERVER.into())
    });
}

/// Client properties from a properties file (if any), then `key=value`
/// pairs overriding it.
pub fn load_properties(file: Option<&Path>, pairs: &[String]) -> anyhow::Result<Properties> {
    let mut properties = match file {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            // Trimmed as Kafka's `ConfigDef` trims values.
            let pairs =
                strom_broker::properties::parse(&text).with_context(|| format!("in {}", path.display()))?;
            pairs.into_iter().map(|(key, value)| (key, value.trim().to_owned())).collect()
        }
        None => Properties::new(),
    };
    properties.extend(parse_pairs(pairs.iter().map(String::as_str))?);
    Ok(properties)
}

/// A current-thread runtime: the tools are I/O bound and short-lived.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// Prints the one-line reason a default-on idempotent producer fell back.
pub fn warn_idempotence_fallback(producer: &strom_client::Producer) {
    if let Some(reason) = producer.idempotence_fallback() {
        eprintln!("strom: warning: {reason}");
    }
}

/// `--format`: Kafka's text (the default), or JSON for scripts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Prints `value` as one JSON document on standard output.
pub fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// Left-aligns `text` in a column of `width`, as Java's `%-Ns` does.
pub fn pad(text: &str, width: usize) -> String {
    format!("{text:<width$}")
}

/// The width of a column: the longest of `values`, at least `min`.
pub fn column_width<'a>(min: usize, values: impl IntoIterator<Item = &'a str>) -> usize {
    values.into_iter().map(str::len).fold(min, usize::max)
}

/// `--property key=value` pairs as Kafka's console tools read them: split
/// at the first `=`, the value kept as given, since a separator may well
/// be a space.
pub fn format_properties<'a>(pairs: impl IntoIterator<Item = &'a str>) -> anyhow::Result<Properties> {
    pairs
        .into_iter()
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => Ok((key.trim().to_owned(), value.to_owned())),
            None => anyhow::bail!("--property {pair:?} is not key=value"),
        })
        .collect()
}

/// A `--property` flag: `true` or `false`, `default` when absent.
pub fn property_flag(properties: &Properties, key: &str, default: bool) -> anyhow::Result<bool> {
    match properties.get(key).map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => anyhow::bail!("--property {key}={v} is not true or false"),
    }
}

/// Kafka's `prettyPrintTable`: each column as wide as its widest cell,
/// every cell followed by a tab.
pub fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| column_width(headers[i].len(), rows.iter().map(|row| row[i].as_str())))
        .collect();
    let line = |cells: Vec<&str>| {
        cells.iter().zip(&widths).map(|(cell, width)| pad(cell, *width) + "\t").collect::<String>()
    };
    println!("{}", line(headers.to_vec()));
    for row in &rows {
        println!("{}", line(row.iter().map(String::as_str).collect()));
    }
}
