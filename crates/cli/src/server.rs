//! `strom server`: start a broker from a properties file and overrides.

use std::path::PathBuf;

use anyhow::{bail, Context};
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
    init_logging(BrokerConfig::logging_filter(&text, &overrides))?;
    let config = BrokerConfig::from_properties(&text, &overrides)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve(config))
}

/// Log levels come from `RUST_LOG` when set, else `logging.level`, else `info`.
pub fn init_logging(configured: Option<String>) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match (EnvFilter::try_from_default_env(), configured) {
        (Ok(from_env), _) => from_env,
        (Err(_), Some(directives)) => EnvFilter::try_new(&directives)
            .with_context(|| format!("invalid value {directives:?} for configuration logging.level"))?,
        (Err(_), None) => EnvFilter::new("info"),
    };
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    Ok(())
}

async fn serve(config: BrokerConfig) -> anyhow::Result<()> {
    match strom_broker::server::raise_open_files_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!(before, after, "raised the open files limit (RLIMIT_NOFILE) to its hard limit")
        }
        Ok((_, limit)) => tracing::info!(limit, "open files limit (RLIMIT_NOFILE)"),
        Err(e) => tracing::warn!("cannot raise the open files limit (RLIMIT_NOFILE): {e}"),
    }
    let node_id = config.node_id;
    let broker = Broker::open(config)?;
    let bound = BoundBroker::bind(broker).await?;
    tracing::info!(node_id, "broker started");
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    bound
        .serve(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
        .await?;
    Ok(())
}
