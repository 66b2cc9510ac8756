//! `strom features`: the cluster's feature levels, like `kafka-features.sh`:
//! `describe` what a broker supports and the cluster finalized; `upgrade`,
//! `downgrade` and `disable` levels (to a release's with
//! `--release-version`), `--dry-run` to only check them.

use anyhow::{bail, Context};
use clap::Subcommand;
use strom_client::admin::{FeatureMetadata, UpgradeType};
use strom_client::{Admin, ClientConfig};
use strom_metadata::controller::{BOOTSTRAP_FEATURES, METADATA_VERSION_FEATURE};
use strom_metadata::features::{metadata_version_level, metadata_version_name, metadata_version_names};

use crate::client_args::{runtime, ConnectArgs};

#[derive(clap::Args)]
pub struct FeaturesArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(subcommand)]
    command: FeaturesCommand,
}

#[derive(Subcommand)]
enum FeaturesCommand {
    /// Describe the supported and finalized feature levels.
    Describe,
    /// Upgrade one or more feature levels.
    Upgrade(ChangeArgs),
    /// Downgrade one or more feature levels.
    Downgrade(ChangeArgs),
    /// Disable features: downgrade them to level 0.
    Disable(DisableArgs),
}

#[derive(clap::Args)]
struct ChangeArgs {
    /// The release whose levels every feature moves to, e.g. 4.1-IV1.
    #[arg(long = "release-version", conflicts_with_all = ["features", "metadata"])]
    release_version: Option<String>,
    /// A feature level, as name=level (repeatable).
    #[arg(long = "feature", value_name = "FEATURE=LEVEL", value_parser = parse_feature_level)]
    features: Vec<(String, i16)>,
    /// The metadata.version to move to, by release name (deprecated in Kafka).
    #[arg(long)]
    metadata: Option<String>,
    /// Downgrade even where metadata may be lost (downgrades only).
    #[arg(long = "unsafe")]
    unsafe_downgrade: bool,
    /// Only check the change.
    #[arg(long)]
    dry_run: bool,
}

#[derive(clap::Args)]
struct DisableArgs {
    /// A feature to disable (repeatable).
    #[arg(long = "feature", value_name = "FEATURE")]
    features: Vec<String>,
    /// Disable even where metadata may be lost.
    #[arg(long = "unsafe")]
    unsafe_downgrade: bool,
    /// Only check the change.
    #[arg(long)]
    dry_run: bool,
}

/// `name=level`, as `kafka-features.sh` and `kafka-storage.sh` take it.
pub fn parse_feature_level(text: &str) -> Result<(String, i16), String> {
    let Some((name, level)) = text.split_once('=') else {
        return Err(format!("Can't parse feature=level string {text}: equals sign not found."));
    };
    let level = level.trim();
    let parsed = level.parse::<i16>().map_err(|_| {
        format!("Can't parse feature=level string {text}: unable to parse {level} as a short.")
    })?;
    Ok((name.trim().to_owned(), parsed))
}

pub fn run(args: FeaturesArgs) -> anyhow::Result<()> {
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        match args.command {
            FeaturesCommand::Describe => {
                print!("{}", describe(&admin.describe_features().await?));
                Ok(())
            }
            FeaturesCommand::Upgrade(change) => {
                if change.unsafe_downgrade {
                    bail!("--unsafe applies to downgrades only");
                }
                let updates = change_updates(&change, UpgradeType::Upgrade)?;
                update(&admin, "upgrade", &updates, change.dry_run).await
            }
            FeaturesCommand::Downgrade(change) => {
                let downgrade = downgrade_type(change.unsafe_downgrade);
                let updates = change_updates(&change, downgrade)?;
                update(&admin, "downgrade", &updates, change.dry_run).await
            }
            FeaturesCommand::Disable(disable) => {
                let downgrade = downgrade_type(disable.unsafe_downgrade);
                let updates =
                    disable.features.iter().map(|name| (name.clone(), 0, downgrade)).collect::<Vec<_>>();
                update(&admin, "disable", &updates, disable.dry_run).await
            }
        }
    })
}

fn downgrade_type(unsafe_downgrade: bool) -> UpgradeType {
    if unsafe_downgrade {
        UpgradeType::UnsafeDowngrade
    } else {
        UpgradeType::SafeDowngrade
    }
}

/// One line per supported feature, sorted, as `kafka-features.sh describe`.
fn describe(metadata: &FeatureMetadata) -> String {
    let mut features = metadata.features.clone();
    features.sort_by(|a, b| a.name.cmp(&b.name));
    features
        .iter()
        .map(|f| {
            let level = |l: i16| level_name(&f.name, l);
            format!(
                "Feature: {}\tSupportedMinVersion: {}\tSupportedMaxVersion: {}\tFinalizedVersionLevel: {}\tEpoch: {}\n",
                f.name,
                level(f.supported_min),
                level(f.supported_max),
                level(f.finalized.unwrap_or(0)),
                metadata.finalized_epoch
            )
        })
        .collect()
}

/// A level as Kafka prints it: `metadata.version` by release name.
fn level_name(feature: &str, level: i16) -> String {
    if feature != METADATA_VERSION_FEATURE {
        return level.to_string();
    }
    metadata_version_name(level).map_or_else(|| format!("UNKNOWN {level}"), str::to_owned)
}

fn release_level(release: &str) -> anyhow::Result<i16> {
    metadata_version_level(release).with_context(|| {
        format!(
            "Unknown metadata.version {release}. Supported metadata.version are {}",
            metadata_version_names()
        )
    })
}

/// The updates an upgrade or downgrade names: a release's levels (Strom's
/// for the release it serves), or each `--feature` and `--metadata`.
fn change_updates(
    change: &ChangeArgs,
    upgrade_type: UpgradeType,
) -> anyhow::Result<Vec<(String, i16, UpgradeType)>> {
    if let Some(release) = &change.release_version {
        let level = release_level(release)?;
        let defaults = BOOTSTRAP_FEATURES.iter().filter(|(name, _)| *name != METADATA_VERSION_FEATURE);
        let mut updates = vec![(METADATA_VERSION_FEATURE.to_owned(), level, upgrade_type)];
        updates.extend(defaults.map(|(name, level)| ((*name).to_owned(), *level, upgrade_type)));
        return Ok(updates);
    }
    let mut updates = Vec::new();
    if let Some(release) = &change.metadata {
        updates.push((METADATA_VERSION_FEATURE.to_owned(), release_level(release)?, upgrade_type));
    }
    for (name, level) in &change.features {
        if updates.iter().any(|(n, ..)| n == name) {
            bail!("Feature {name} was specified more than once.");
        }
        updates.push((name.clone(), *level, upgrade_type));
    }
    Ok(updates)
}

/// Sends the updates; prints, as Kafka's tool, a line per feature.
async fn update(
    admin: &Admin,
    op: &str,
    updates: &[(String, i16, UpgradeType)],
    dry_run: bool,
) -> anyhow::Result<()> {
    if updates.is_empty() {
        bail!("You must specify at least one feature to {op}");
    }
    let outcome = admin.update_features(updates, dry_run).await;
    let mut sorted = updates.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, level, _) in &sorted {
        let what = match op {
            "disable" => format!("disable {name}"),
            _ => format!("{op} {name} to {level}"),
        };
        match (&outcome, dry_run) {
            (Err(e), true) => println!("Can not {what}. {e}"),
            (Err(e), false) => println!("Could not {what}. {e}"),
            (Ok(()), _) => {
                let verb = if dry_run { "can be" } else { "was" };
                let done =
                    if op == "disable" { "disabled.".to_owned() } else { format!("{op}d to {level}.") };
                println!("{name} {verb} {done}");
            }
        }
    }
    if outcome.is_err() {
        bail!("{} out of {} operation(s) failed.", updates.len(), updates.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use strom_client::admin::FeatureDescription;

    use super::*;

    #[test]
    fn feature_levels_parse_as_kafka_parses_them() {
        assert_eq!(parse_feature_level("group.version=1"), Ok(("group.version".into(), 1)));
        assert!(parse_feature_level("group.version").unwrap_err().contains("equals sign not found"));
        assert!(parse_feature_level("group.version=x").unwrap_err().contains("unable to parse x as a short"));
    }

    #[test]
    fn describe_prints_metadata_version_by_release_name() {
        let metadata = FeatureMetadata {
            features: vec![
                FeatureDescription {
                    name: "metadata.version".into(),
                    supported_min: 27,
                    supported_max: 27,
                    finalized: Some(27),
                },
                FeatureDescription {
                    name: "group.version".into(),
                    supported_min: 0,
                    supported_max: 1,
                    finalized: None,
                },
            ],
            finalized_epoch: 12,
        };
        assert_eq!(
            describe(&metadata),
            "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\tEpoch: 12\n\
             Feature: metadata.version\tSupportedMinVersion: 4.1-IV1\tSupportedMaxVersion: 4.1-IV1\tFinalizedVersionLevel: 4.1-IV1\tEpoch: 12\n"
        );
    }
}
