//! `strom configs --entity-type users|clients|ips`: client quotas and SCRAM
//! credentials, as `kafka-configs.sh` alters and describes them.
//!
//! Entity types pair with names in order, as kafka-configs.sh pairs them:
//! the n-th `--entity-type` with the n-th `--entity-name` or
//! `--entity-default`, whichever comes n-th on the command line. So
//! `--entity-type users --entity-default --entity-type clients
//! --entity-name app` is client `app` of the default user; a type left
//! without a name is, when describing, any entity of the type.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use strom_broker::security::sasl::scram::{random_salt, ScramMechanism};
use strom_client::admin::quotas::{QuotaEntity, QuotaMatch, ScramChange};
use strom_client::Admin;

use crate::client_args::{print_json, Format};
use crate::specs::add_config_pairs;

/// Kafka's default iterations of a credential set through the tools.
const DEFAULT_SCRAM_ITERATIONS: i32 = 4096;

/// Whether `entity_type` is one this module serves.
pub fn is_quota_type(entity_type: &str) -> bool {
    matches!(entity_type, "users" | "clients" | "ips")
}

/// The flags `strom configs` hands over.
pub struct QuotaArgs<'a> {
    pub entity_types: &'a [String],
    /// Each `--entity-name` (`Some`) and `--entity-default` (`None`), in
    /// command-line order.
    pub names: Vec<Option<String>>,
    pub alter: bool,
    pub add_config: Option<&'a str>,
    pub delete_config: &'a [String],
    pub format: Format,
}

/// One entity type of the command line and what it names.
#[derive(Debug)]
struct Component {
    /// `user`, `client-id` or `ip`.
    entity_type: &'static str,
    matching: QuotaMatch,
}

pub async fn run(admin: &Admin, args: QuotaArgs<'_>) -> anyhow::Result<()> {
    let components = components(&args)?;
    if args.alter {
        alter(admin, &args, &components).await
    } else {
        describe(admin, &args, &components).await
    }
}

fn components(args: &QuotaArgs<'_>) -> anyhow::Result<Vec<Component>> {
    let mut components: Vec<Component> = Vec::new();
    for (at, plural) in args.entity_types.iter().enumerate() {
        let entity_type = match plural.as_str() {
            "users" => "user",
            "clients" => "client-id",
            "ips" => "ip",
            other => bail!("--entity-type {other} cannot be combined with users, clients or ips"),
        };
        if components.iter().any(|c| c.entity_type == entity_type) {
            bail!("--entity-type {plural} is given twice");
        }
        let matching = match args.names.get(at) {
            Some(Some(name)) => QuotaMatch::Exact(name.clone()),
            Some(None) => QuotaMatch::Default,
            None => QuotaMatch::Any,
        };
        components.push(Component { entity_type, matching });
    }
    if args.names.len() > components.len() {
        bail!("there are more --entity-name and --entity-default than --entity-type flags");
    }
    let has_ip = components.iter().any(|c| c.entity_type == "ip");
    if has_ip && components.len() > 1 {
        bail!("Only users and clients can be combined; ips stand alone");
    }
    if args.alter && components.iter().any(|c| c.matching == QuotaMatch::Any) {
        bail!("an entity name must be specified with --alter (--entity-name or --entity-default)");
    }
    if args.alter && args.add_config.is_none() && args.delete_config.is_empty() {
        bail!("--alter needs --add-config or --delete-config");
    }
    Ok(components)
}

/// The `--entity-name` values and `--entity-default` flags of `argv`, in order.
pub fn names_in_order(argv: impl IntoIterator<Item = String>) -> Vec<Option<String>> {
    let mut names = Vec::new();
    let mut argv = argv.into_iter();
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--entity-default" => names.push(None),
            "--entity-name" => names.extend(argv.next().map(Some)),
            other => names.extend(other.strip_prefix("--entity-name=").map(|n| Some(n.to_owned()))),
        }
    }
    names
}

// ------------------------------------------------------------------ alter

async fn alter(admin: &Admin, args: &QuotaArgs<'_>, components: &[Component]) -> anyhow::Result<()> {
    let entity: QuotaEntity = components
        .iter()
        .map(|c| {
            let name = match &c.matching {
                QuotaMatch::Exact(name) => Some(name.clone()),
                _ => None,
            };
            (c.entity_type.to_owned(), name)
        })
        .collect();
    let mut quota_ops: Vec<(String, Option<f64>)> = Vec::new();
    let mut scram: Vec<ScramChange> = Vec::new();
    for (key, value) in add_config_pairs(args.add_config.unwrap_or_default())? {
        match scram_mechanism(&key) {
            Some(mechanism) => scram.push(scram_upsert(&entity, mechanism, &value)?),
            None => {
                let parsed: f64 = value.trim().parse().map_err(|_| {
                    anyhow::anyhow!("Cannot parse quota configuration value for {key}: {value}")
                })?;
                quota_ops.push((key, Some(parsed)));
            }
        }
    }
    for key in args.delete_config.iter().map(|k| k.trim()) {
        match scram_mechanism(key) {
            Some(mechanism) => {
                scram.push(ScramChange::Delete { user: scram_user(&entity)?, mechanism: mechanism.id() })
            }
            None => quota_ops.push((key.to_owned(), None)),
        }
    }
    if !quota_ops.is_empty() {
        admin.alter_client_quotas(&entity, &quota_ops, false).await.context("cannot alter client quotas")?;
    }
    if !scram.is_empty() {
        admin.alter_user_scram_credentials(&scram).await.context("cannot alter SCRAM credentials")?;
    }
    let first = &components[0];
    let singular = match first.entity_type {
        "client-id" => "client",
        other => other,
    };
    match &first.matching {
        QuotaMatch::Exact(name) => println!("Completed updating config for {singular} {name}."),
        _ => println!("Completed updating default config for {singular}s in the cluster."),
    }
    Ok(())
}

fn scram_mechanism(key: &str) -> Option<ScramMechanism> {
    match key {
        "SCRAM-SHA-256" => Some(ScramMechanism::Sha256),
        "SCRAM-SHA-512" => Some(ScramMechanism::Sha512),
        _ => None,
    }
}

/// SCRAM credentials belong to one named user, never a default or a client.
fn scram_user(entity: &QuotaEntity) -> anyhow::Result<String> {
    match (entity.len(), entity.get("user")) {
        (1, Some(Some(user))) => Ok(user.clone()),
        _ => bail!("SCRAM credentials can only be set for a single named user (--entity-type users --entity-name NAME)"),
    }
}

/// `[iterations=8192,password=secret]`: the salted password is computed
/// here, as Kafka's tools do, so the password never leaves the client.
fn scram_upsert(entity: &QuotaEntity, mechanism: ScramMechanism, value: &str) -> anyhow::Result<ScramChange> {
    let user = scram_user(entity)?;
    let inner = value.trim().strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(value);
    let mut password = None;
    let mut iterations = DEFAULT_SCRAM_ITERATIONS;
    for part in inner.split(',') {
        match part.split_once('=') {
            Some(("password", p)) => password = Some(p.to_owned()),
            Some(("iterations", n)) => {
                iterations = n.trim().parse().with_context(|| format!("invalid SCRAM iterations {n:?}"))?
            }
            _ => bail!("invalid SCRAM credential {value:?}: expected [iterations=N,password=SECRET]"),
        }
    }
    let password = password.context("a SCRAM credential needs password=")?;
    let rounds =
        u32::try_from(iterations).ok().filter(|n| *n > 0).context("SCRAM iterations must be positive")?;
    let salt = random_salt();
    let salted_password = mechanism.salted_password(&password, &salt, rounds);
    Ok(ScramChange::Upsert { user, mechanism: mechanism.id(), iterations, salt, salted_password })
}

// ------------------------------------------------------------------ describe

async fn describe(admin: &Admin, args: &QuotaArgs<'_>, components: &[Component]) -> anyhow::Result<()> {
    let filter: Vec<(String, QuotaMatch)> =
        components.iter().map(|c| (c.entity_type.to_owned(), c.matching.clone())).collect();
    let quotas =
        admin.describe_client_quotas(&filter, true).await.context("cannot describe client quotas")?;
    let credentials = match components {
        [Component { entity_type: "user", matching }] => {
            let users = match matching {
                QuotaMatch::Exact(name) => vec![name.clone()],
                QuotaMatch::Default => Vec::new(),
                QuotaMatch::Any => Vec::new(),
            };
            if *matching == QuotaMatch::Default {
                Vec::new()
            } else {
                admin
                    .describe_user_scram_credentials(&users)
                    .await
                    .context("cannot describe SCRAM credentials")?
            }
        }
        _ => Vec::new(),
    };
    match args.format {
        Format::Json => print_json(&describe_json(&quotas, &credentials)),
        Format::Text => {
            for (entity, values) in &quotas {
                let values: Vec<String> = values.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                println!("Quota configs for {} are {}", entity_text(entity), values.join(", "));
            }
            for (user, infos) in &credentials {
                let infos: Vec<String> =
                    infos.iter().map(|(m, n)| format!("{}=iterations={n}", mechanism_name(*m))).collect();
                println!("SCRAM credential configs for user-principal '{user}' are {}", infos.join(", "));
            }
        }
    }
    Ok(())
}

fn describe_json(
    quotas: &[(QuotaEntity, BTreeMap<String, f64>)],
    credentials: &[(String, Vec<(i8, i32)>)],
) -> Value {
    let quotas: Vec<Value> =
        quotas.iter().map(|(entity, values)| json!({"entity": entity, "quotas": values})).collect();
    let credentials: Vec<Value> = credentials
        .iter()
        .map(|(user, infos)| {
            let infos: Vec<Value> = infos
                .iter()
                .map(|(m, n)| json!({"mechanism": mechanism_name(*m), "iterations": n}))
                .collect();
            json!({"user": user, "credentials": infos})
        })
        .collect();
    json!({"quotas": quotas, "scram_credentials": credentials})
}

fn mechanism_name(id: i8) -> String {
    ScramMechanism::from_id(id).map_or_else(|| format!("UNKNOWN({id})"), |m| m.mechanism().name().to_owned())
}

/// As kafka-configs.sh names an entity: `user-principal 'alice', client-id 'app'`.
fn entity_text(entity: &QuotaEntity) -> String {
    let order = ["user", "client-id", "ip"];
    let parts: Vec<String> = order
        .iter()
        .filter_map(|entity_type| {
            let label = if *entity_type == "user" { "user-principal" } else { entity_type };
            Some(match entity.get(*entity_type)? {
                Some(name) => format!("{label} '{name}'"),
                None => format!("the default {label}"),
            })
        })
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn names_and_defaults_pair_with_types_in_command_line_order() {
        let names = names_in_order(argv(
            "strom configs --entity-type users --entity-default --entity-type clients --entity-name=app",
        ));
        assert_eq!(names, vec![None, Some("app".to_owned())]);
        let types = ["users".to_owned(), "clients".to_owned()];
        let args = QuotaArgs {
            entity_types: &types,
            names,
            alter: true,
            add_config: Some("producer_byte_rate=1"),
            delete_config: &[],
            format: Format::Text,
        };
        let components = components(&args).unwrap();
        assert_eq!(components[0].matching, QuotaMatch::Default);
        assert_eq!(components[1].matching, QuotaMatch::Exact("app".into()));
    }

    #[test]
    fn ips_stand_alone_and_alter_needs_every_name() {
        let types = ["users".to_owned(), "ips".to_owned()];
        let args = QuotaArgs {
            entity_types: &types,
            names: vec![None, None],
            alter: false,
            add_config: None,
            delete_config: &[],
            format: Format::Text,
        };
        assert!(components(&args).is_err());
        let users = ["users".to_owned()];
        let unnamed = QuotaArgs { entity_types: &users, names: vec![], alter: true, ..args };
        assert!(components(&unnamed).unwrap_err().to_string().contains("entity name"));
    }
}
