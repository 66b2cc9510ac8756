//! `strom server`: start a broker from a properties file and overrides.

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::logging::{self, LogFormat};
use strom_broker::{BoundBroker, Broker, BrokerConfig};
use tokio::signal::unix::{signal, SignalKind};

#[derive(clap::Args)]
pub struct ServerArgs {
    /// A Kafka `server.properties` file; embedded defaults when omitted.
    properties: Option<PathBuf>,
    /// Set a config key, overriding the file: `--override log.dirs=/data`.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    let text = match &args.properties {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => String::new(),
    };
    let mut overrides = Vec::new();
    for item in &args.overrides {
        let Some((key, value)) = item.split_once('=') else {
            bail!("--override expects KEY=VALUE, got {item:?}");
        };
        overrides.push((key.trim().to_owned(), value.trim().to_owned()));
    }
    let format = LogFormat::parse(BrokerConfig::log_format(&text, &overrides).as_deref())?;
    logging::init(BrokerConfig::logging_filter(&text, &overrides).as_deref(), "info", format)?;
    let config = BrokerConfig::from_properties(&text, &overrides)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve(config))
}

async fn serve(config: BrokerConfig) -> anyhow::Result<()> {
    match strom_broker::server::raise_open_files_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!(before, after, "raised the open files limit (RLIMIT_NOFILE) to its hard limit")
        }
        Ok((_, limit)) => tracing::info!(limit, "open files limit (RLIMIT_NOFILE)"),
        Err(e) => tracing::warn!("cannot raise the open files limit (RLIMIT_NOFILE): {e}"),
    }
    // SIGHUP stops the broker as SIGTERM does, as it stops a JVM: a broker
    // whose terminal went away is not left running unattended.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut stop = std::pin::pin!(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
            _ = hangup.recv() => "SIGHUP",
        };
        tracing::info!(signal = name, "stop requested");
    });
    // A KRaft node waits for its quorum before it serves; a stop then
    // ends the wait (everything it wrote is already durable).
    let bound = tokio::select! {
        bound = BoundBroker::start(config) => bound?,
        _ = &mut stop => return Ok(()),
    };
    let broker = bound.broker().clone();
    log_start(&broker, &bound);
    bound.serve(stop).await?;
    Ok(())
}

/// The one line that says which broker this is and where it serves.
fn log_start(broker: &Broker, bound: &BoundBroker) {
    let config = broker.config();
    let log_dirs: Vec<String> = config.log_dirs.iter().map(|d| d.display().to_string()).collect();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        node_id = config.node_id,
        log_dirs = %log_dirs.join(","),
        cluster_id = %broker.controller().cluster_id(),
        listeners = %bound.listener_addresses().join(","),
        "Strom started"
    );
}
