//! `strom storage`: prepare a KRaft node's log dirs, like `kafka-storage.sh`.
//!
//! `format` writes `meta.properties` (cluster id, node id, a directory id)
//! into every log dir and the metadata log dir of the node a
//! `server.properties` describes, with Kafka's flags and refusals;
//! `random-uuid` prints a new cluster id.
//!
//! As Kafka does, it writes the metadata log's bootstrap checkpoint,
//! `__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`
//! ([`strom_quorum::bootstrap`]): the feature levels the cluster starts at
//! (`--release-version`, `--feature`), which the first active controller
//! writes into the new metadata log, and for `--standalone` or
//! `--initial-controllers` the initial voters (KIP-853 VotersRecord and
//! KRaftVersionRecord); the initial voter's directory id goes into its
//! metadata dir's `meta.properties`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Subcommand;
use strom_broker::kraft_config::ProcessRole;
use strom_broker::meta_properties::{self, node_dirs, LogDirs};
use strom_broker::BrokerConfig;
use strom_quorum::bootstrap::BootstrapVoter;

#[derive(clap::Args)]
pub struct StorageArgs {
    #[command(subcommand)]
    command: StorageCommand,
}

#[derive(Subcommand)]
enum StorageCommand {
    /// Format the log dirs of the node a server.properties describes.
    Format(FormatArgs),
    /// Print a random UUID, e.g. a cluster id for `format`.
    RandomUuid,
}

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("quorum").multiple(false))]
struct FormatArgs {
    /// The server.properties file of the node.
    #[arg(long, short = 'c')]
    config: PathBuf,
    /// The cluster id to use (see `strom storage random-uuid`).
    #[arg(long = "cluster-id", short = 't')]
    cluster_id: String,
    /// Skip the dirs already formatted rather than failing.
    #[arg(long, short = 'g')]
    ignore_formatted: bool,
    /// Initialize a controller as a single-node dynamic quorum.
    #[arg(long, short = 's', group = "quorum")]
    standalone: bool,
    /// The initial dynamic quorum: id@host:port:directory-id,... (the same on every node).
    #[arg(long, short = 'I', group = "quorum", value_name = "VOTERS")]
    initial_controllers: Option<String>,
    /// Initialize a node without a dynamic quorum topology.
    #[arg(long, short = 'N', group = "quorum")]
    no_initial_controllers: bool,
    /// The release whose metadata.version and feature levels the cluster starts at, e.g. 4.1-IV1.
    #[arg(long = "release-version", short = 'r')]
    release_version: Option<String>,
    /// A feature level to start at instead of the release's, as name=level (repeatable).
    #[arg(long = "feature", short = 'f', value_name = "FEATURE=LEVEL", value_parser = crate::features::parse_feature_level)]
    features: Vec<(String, i16)>,
}

pub fn run(args: StorageArgs) -> anyhow::Result<()> {
    match args.command {
        StorageCommand::Format(args) => format(args),
        StorageCommand::RandomUuid => {
            println!("{}", meta_properties::random_uuid());
            Ok(())
        }
    }
}

/// An `--initial-controllers` entry (Kafka's `DynamicVoter`).
struct InitialVoter {
    id: i32,
    directory_id: String,
    /// Its controller endpoint: `(host, port)`; None for `--standalone`,
    /// whose endpoints are this node's controller listeners.
    endpoint: Option<(String, u16)>,
}

fn format(args: FormatArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read {}", args.config.display()))?;
    let config = BrokerConfig::from_properties(&text, &[])?;
    if !config.kraft.is_kraft() {
        bail!(
            "The configuration file has no process.roles: formatting is only for KRaft nodes (a single-node Strom without process.roles formats its log dirs itself on first start)."
        );
    }
    meta_properties::check_cluster_id(&args.cluster_id)?;
    let voters = initial_voters(&args, &config)?;
    let levels = strom_metadata::features::format_levels(
        args.release_version.as_deref(),
        &args.features,
        voters.is_some(),
    )
    .map_err(anyhow::Error::msg)?;
    let dirs = LogDirs::load(&node_dirs(&config))?;
    if let Some(formatted) = dirs.verify(config.node_id)?.filter(|id| *id != args.cluster_id) {
        let path = dirs.formatted[0].0.join(meta_properties::META_PROPERTIES);
        let (expected, path) = (&args.cluster_id, path.display());
        bail!("Invalid cluster.id in: {path}. Expected {expected}, but read {formatted}");
    }
    if let (Some((dir, _)), false) = (dirs.formatted.first(), args.ignore_formatted) {
        bail!(
            "Log directory {} is already formatted. Use --ignore-formatted to ignore this directory and format the others.",
            dir.display()
        );
    }
    if dirs.unformatted.is_empty() {
        println!("All of the log directories are already formatted.");
        return Ok(());
    }
    let own_voter = voters.as_ref().and_then(|v| v.iter().find(|voter| voter.id == config.node_id));
    let ids: Vec<(PathBuf, String)> =
        own_voter.map(|v| (config.metadata_log_dir.clone(), v.directory_id.clone())).into_iter().collect();
    let describe = |dir: &Path| match (dir == config.metadata_log_dir, &voters, own_voter) {
        (false, _, _) => "data directory",
        (true, None, _) => "metadata directory",
        (true, Some(_), None) => "dynamic metadata directory",
        (true, Some(_), Some(_)) => "dynamic metadata voter directory",
    };
    let metadata_dir_unformatted = dirs.unformatted.contains(&config.metadata_log_dir);
    dirs.format(&args.cluster_id, config.node_id, &ids, |dir| {
        println!("Formatting {} {}.", describe(dir), dir.display())
    })?;
    if !metadata_dir_unformatted {
        return Ok(());
    }
    let voters = voters.map(|voters| bootstrap_voters(&voters, &config));
    let records = strom_metadata::features::bootstrap_records(&levels);
    strom_quorum::bootstrap::write_checkpoint(&config.metadata_log_dir, voters.as_deref(), records)?;
    Ok(())
}

/// The initial voters as the bootstrap checkpoint records them: a
/// `--standalone` voter at this node's controller listeners, an
/// `--initial-controllers` one at its endpoint on the first controller
/// listener name (Kafka's `DynamicVoter`).
fn bootstrap_voters(voters: &[InitialVoter], config: &BrokerConfig) -> Vec<BootstrapVoter> {
    let listener_name = config.kraft.controller_listener_names.first().cloned().unwrap_or_default();
    voters
        .iter()
        .map(|voter| {
            let endpoints = match &voter.endpoint {
                Some((host, port)) => vec![(listener_name.clone(), host.clone(), *port)],
                None => config
                    .kraft
                    .controller_listeners(&config.listeners)
                    .iter()
                    .map(|l| (l.name.to_ascii_uppercase(), l.host.clone(), l.port))
                    .collect(),
            };
            let directory_id = meta_properties::parse_uuid(&voter.directory_id).unwrap_or_default();
            BootstrapVoter { id: voter.id, directory_id, endpoints }
        })
        .collect()
}

/// The initial dynamic quorum from `--standalone` or
/// `--initial-controllers`, refusing what Kafka's storage tool refuses.
fn initial_voters(args: &FormatArgs, config: &BrokerConfig) -> anyhow::Result<Option<Vec<InitialVoter>>> {
    let is_controller = config.kraft.has_role(ProcessRole::Controller);
    if args.standalone {
        if !is_controller {
            bail!("You can only use --standalone on a controller.");
        }
        let directory_id = meta_properties::random_uuid();
        return Ok(Some(vec![InitialVoter { id: config.node_id, directory_id, endpoint: None }]));
    }
    if let Some(text) = &args.initial_controllers {
        return parse_initial_controllers(text).map(Some);
    }
    if is_controller && config.kraft.voters.is_empty() && !args.no_initial_controllers {
        bail!(
            "Because controller.quorum.voters is not set on this controller, you must specify one of the following: --standalone, --initial-controllers, or --no-initial-controllers."
        );
    }
    Ok(None)
}

/// `id@host:port:directory-id,...`, the host possibly a bracketed IPv6 address.
fn parse_initial_controllers(text: &str) -> anyhow::Result<Vec<InitialVoter>> {
    let mut voters: Vec<InitialVoter> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let form = "expected id@host:port:directory-id";
        let (id, rest) =
            entry.split_once('@').with_context(|| format!("--initial-controllers {entry}: {form}"))?;
        let id: i32 = id
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .with_context(|| format!("--initial-controllers {entry}: failed to parse node id {id:?}"))?;
        let (address, directory_id) =
            rest.rsplit_once(':').with_context(|| format!("--initial-controllers {entry}: {form}"))?;
        let endpoint = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
            .filter(|(host, _)| !host.is_empty());
        let Some(endpoint) = endpoint else {
            bail!("--initial-controllers {entry}: failed to parse host and port");
        };
        if meta_properties::parse_uuid(directory_id).is_none() {
            bail!("--initial-controllers {entry}: {directory_id} is not a valid directory id");
        }
        if voters.iter().any(|v| v.id == id) {
            bail!("Node id {id} was specified more than once.");
        }
        voters.push(InitialVoter { id, directory_id: directory_id.to_owned(), endpoint: Some(endpoint) });
    }
    if voters.is_empty() {
        bail!("No voters given.");
    }
    Ok(voters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_controllers_take_kafkas_form() {
        let dir = meta_properties::random_uuid();
        let voters = parse_initial_controllers(&format!("0@a:9093:{dir},1@[::1]:9094:{dir}")).unwrap();
        assert_eq!(voters.iter().map(|v| v.id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(voters[1].directory_id, dir);
        for bad in
            ["", "0@a:9093", "x@a:9093:{dir}", "0@a:port:{dir}", "0@a:9093:nope", "0@a:1:{dir},0@b:2:{dir}"]
        {
            assert!(parse_initial_controllers(&bad.replace("{dir}", &dir)).is_err(), "{bad}");
        }
    }
}
