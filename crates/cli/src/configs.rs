//! `strom configs`: describe and alter topic and broker configs, like
//! `kafka-configs.sh`, through DescribeConfigs and IncrementalAlterConfigs.
//!
//! An entity is a topic, a broker (by id) or the brokers' cluster-wide
//! default (the empty name). Describe shows what was set dynamically on it
//! (or, with `--all`, every config and where its value comes from); alter
//! sets and deletes keys one by one, leaving the others as they are.
//! Users, clients and ips (client quotas, SCRAM credentials) are
//! [`crate::quota_configs`]'s.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use strom_client::admin::{config_source_name, AlterConfigOp, ConfigEntry, ResourceType};
use strom_client::{Admin, ClientConfig};

use crate::client_args::{print_json, runtime, ConnectArgs, Format};
use crate::quota_configs::{self, is_quota_type, QuotaArgs};
use crate::specs::add_config_pairs;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["describe", "alter"])))]
pub struct ConfigsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Show the entity's configs.
    #[arg(long)]
    describe: bool,
    /// Change the entity's configs (--add-config, --delete-config).
    #[arg(long)]
    alter: bool,
    /// `topics`, `brokers`, or quota entities `users`, `clients`, `ips`
    /// (users and clients may both be given, each with its name).
    #[arg(long = "entity-type", value_parser = ["topics", "brokers", "users", "clients", "ips"])]
    entity_type: Vec<String>,
    /// A topic name, broker id, user, client id or IP, in --entity-type
    /// order (describe: all of the type when omitted).
    #[arg(long = "entity-name")]
    entity_name: Vec<String>,
    /// The default of the entity type left without a name: the brokers'
    /// cluster-wide configs, or the default user, client id or IP quota.
    /// (May be given once per entity type: users and clients.)
    #[arg(long = "entity-default", action = clap::ArgAction::Count)]
    entity_default: u8,
    /// Shortcut for --entity-type topics --entity-name TOPIC.
    #[arg(long, conflicts_with_all = ["entity_type", "entity_name", "entity_default", "broker", "broker_defaults"])]
    topic: Option<String>,
    /// Shortcut for --entity-type brokers --entity-name ID.
    #[arg(long, conflicts_with_all = ["entity_type", "entity_name", "entity_default", "broker_defaults"])]
    broker: Option<String>,
    /// Shortcut for --entity-type brokers --entity-default.
    #[arg(long = "broker-defaults", conflicts_with_all = ["entity_type", "entity_name", "entity_default"])]
    broker_defaults: bool,
    /// Describe every config, defaults included, not only those set dynamically.
    #[arg(long, requires = "describe")]
    all: bool,
    /// Configs to set: `k1=v1,k2=[a,b]` (brackets group a value with commas).
    #[arg(long = "add-config", value_name = "K=V,...", requires = "alter")]
    add_config: Option<String>,
    /// Config keys to remove: `k1,k2`.
    #[arg(long = "delete-config", value_name = "K,...", value_delimiter = ',', requires = "alter")]
    delete_config: Vec<String>,
    /// Output of --describe: Kafka's text or JSON.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// What the flags name: the type, and the name (`Some("")` for the broker
/// default, `None` for every entity of the type).
struct Entity {
    resource: ResourceType,
    name: Option<String>,
}

impl Entity {
    /// `topic` or `broker`, as Kafka's messages say it.
    fn singular(&self) -> &'static str {
        match self.resource {
            ResourceType::Topic => "topic",
            _ => "broker",
        }
    }

    fn plural(&self) -> &'static str {
        match self.resource {
            ResourceType::Topic => "topics",
            _ => "brokers",
        }
    }
}

pub fn run(args: ConfigsArgs) -> anyhow::Result<()> {
    if args.entity_type.iter().any(|t| is_quota_type(t)) {
        return run_quotas(args);
    }
    let entity = entity(&args)?;
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        if args.alter {
            alter(&admin, &args, &entity).await
        } else {
            describe(&admin, &args, &entity).await
        }
    })
}

/// Users, clients and ips: client quotas and SCRAM credentials.
fn run_quotas(args: ConfigsArgs) -> anyhow::Result<()> {
    if args.topic.is_some() || args.broker.is_some() || args.broker_defaults || args.all {
        bail!("--topic, --broker, --broker-defaults and --all do not apply to users, clients or ips");
    }
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    let quota_args = QuotaArgs {
        entity_types: &args.entity_type,
        names: quota_configs::names_in_order(std::env::args()),
        alter: args.alter,
        add_config: args.add_config.as_deref(),
        delete_config: &args.delete_config,
        format: args.format,
    };
    runtime()?.block_on(async { quota_configs::run(&Admin::connect(config).await?, quota_args).await })
}

fn entity(args: &ConfigsArgs) -> anyhow::Result<Entity> {
    if args.entity_type.len() > 1 || args.entity_name.len() > 1 {
        bail!("only users and clients may be combined; give one --entity-type for topics or brokers");
    }
    let entity_default = args.entity_default > 0;
    if args.entity_default > 1 {
        bail!("--entity-default is given twice; only users and clients may be combined");
    }
    if entity_default && !args.entity_name.is_empty() {
        bail!("--entity-default and --entity-name name different entities of one type");
    }
    let entity_name = args.entity_name.first().cloned();
    let (resource, name) = match (&args.topic, &args.broker, args.broker_defaults, args.entity_type.first().map(String::as_str)) {
        (Some(topic), ..) => (ResourceType::Topic, Some(topic.clone())),
        (_, Some(broker), ..) => (ResourceType::Broker, Some(broker.clone())),
        (_, _, true, _) => (ResourceType::Broker, Some(String::new())),
        (_, _, _, Some("topics")) if entity_default => bail!("--entity-default applies to brokers, not topics"),
        (_, _, _, Some("topics")) => (ResourceType::Topic, entity_name),
        (_, _, _, Some(_)) if entity_default => (ResourceType::Broker, Some(String::new())),
        (_, _, _, Some(_)) => (ResourceType::Broker, entity_name),
        _ => bail!("At least one entity type must be specified: --entity-type, --topic, --broker or --broker-defaults"),
    };
    if resource == ResourceType::Broker {
        if let Some(id) = name.as_deref().filter(|n| !n.is_empty()) {
            if id.parse::<i32>().is_err() {
                bail!("The entity name for brokers must be a valid integer broker id, but it is: {id}");
            }
        }
    }
    if args.alter && name.is_none() {
        bail!("an entity name must be specified with --alter (--entity-name, --topic, --broker or --broker-defaults)");
    }
    if args.alter && args.add_config.is_none() && args.delete_config.is_empty() {
        bail!("--alter needs --add-config or --delete-config");
    }
    Ok(Entity { resource, name })
}

// ------------------------------------------------------------------ describe

async fn describe(admin: &Admin, args: &ConfigsArgs, entity: &Entity) -> anyhow::Result<()> {
    let names = match &entity.name {
        Some(name) if !args.all && !exists(admin, entity, name).await? => {
            println!("The {} '{name}' doesn't exist and doesn't have dynamic config.", entity.singular());
            return Ok(());
        }
        Some(name) => vec![name.clone()],
        None => all_names(admin, entity).await?,
    };
    let mut described = Vec::new();
    for name in names {
        let entries = entries(admin, entity, &name, args.all).await?;
        match args.format {
            Format::Json => described.push(json!({
                "entity_type": entity.plural(),
                "entity_name": name,
                "configs": entries.iter().map(entry_json).collect::<Vec<_>>(),
            })),
            Format::Text => print_entries(entity, &name, &entries, args.all),
        }
    }
    if args.format == Format::Json {
        print_json(&Value::Array(described));
    }
    Ok(())
}

async fn exists(admin: &Admin, entity: &Entity, name: &str) -> anyhow::Result<bool> {
    Ok(match entity.resource {
        ResourceType::Topic => admin.list_topics(true).await?.iter().any(|t| t == name),
        _ => {
            name.is_empty()
                || admin.describe_cluster().await?.brokers.iter().any(|b| b.node_id.to_string() == name)
        }
    })
}

/// Every topic (internal ones too), or every broker then the default.
async fn all_names(admin: &Admin, entity: &Entity) -> anyhow::Result<Vec<String>> {
    Ok(match entity.resource {
        ResourceType::Topic => admin.list_topics(true).await?,
        _ => {
            let mut ids: Vec<i32> =
                admin.describe_cluster().await?.brokers.iter().map(|b| b.node_id).collect();
            ids.sort_unstable();
            ids.iter().map(i32::to_string).chain([String::new()]).collect()
        }
    })
}

/// The entity's configs sorted by name: all of them, or only those set at
/// the entity's own dynamic level.
async fn entries(admin: &Admin, entity: &Entity, name: &str, all: bool) -> anyhow::Result<Vec<ConfigEntry>> {
    let own_source = match entity.resource {
        ResourceType::Topic => 1,  // DYNAMIC_TOPIC_CONFIG
        _ if name.is_empty() => 3, // DYNAMIC_DEFAULT_BROKER_CONFIG
        _ => 2,                    // DYNAMIC_BROKER_CONFIG
    };
    let mut entries = admin
        .describe_configs(entity.resource, name, &[])
        .await
        .with_context(|| format!("cannot describe configs of {} '{name}'", entity.singular()))?;
    entries.retain(|e| all || e.source == own_source);
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

fn print_entries(entity: &Entity, name: &str, entries: &[ConfigEntry], all: bool) {
    if name.is_empty() {
        println!("Default configs for {} in the cluster are:", entity.plural());
    } else {
        let which = if all { "All" } else { "Dynamic" };
        println!("{which} configs for {} {name} are:", entity.singular());
    }
    for entry in entries {
        let synonyms: Vec<String> = entry
            .synonyms
            .iter()
            .map(|s| {
                format!(
                    "{}:{}={}",
                    config_source_name(s.source),
                    s.name,
                    s.value.as_deref().unwrap_or("null")
                )
            })
            .collect();
        println!(
            "  {}={} sensitive={} synonyms={{{}}}",
            entry.name,
            entry.value.as_deref().unwrap_or("null"),
            entry.is_sensitive,
            synonyms.join(", ")
        );
    }
}

fn entry_json(entry: &ConfigEntry) -> Value {
    let synonyms: Vec<Value> = entry
        .synonyms
        .iter()
        .map(|s| json!({"name": s.name, "value": s.value, "source": config_source_name(s.source)}))
        .collect();
    json!({
        "name": entry.name, "value": entry.value, "sensitive": entry.is_sensitive,
        "read_only": entry.read_only, "source": config_source_name(entry.source), "synonyms": synonyms,
    })
}

// ------------------------------------------------------------------ alter

async fn alter(admin: &Admin, args: &ConfigsArgs, entity: &Entity) -> anyhow::Result<()> {
    let name = entity.name.as_deref().unwrap_or_default();
    let to_add = add_config_pairs(args.add_config.as_deref().unwrap_or_default())?;
    let to_delete: Vec<String> = args.delete_config.iter().map(|k| k.trim().to_owned()).collect();
    if !to_delete.is_empty() {
        // Kafka refuses to delete what is not set, rather than do nothing.
        let set = entries(admin, entity, name, false).await?;
        let unset: Vec<&str> =
            to_delete.iter().filter(|k| !set.iter().any(|e| &e.name == *k)).map(String::as_str).collect();
        if !unset.is_empty() {
            bail!("Invalid config(s): {}", unset.join(","));
        }
    }
    let ops: Vec<AlterConfigOp> = to_delete
        .into_iter()
        .map(AlterConfigOp::Delete)
        .chain(to_add.into_iter().map(|(k, v)| AlterConfigOp::Set(k, v)))
        .collect();
    admin
        .incremental_alter_configs(entity.resource, name, &ops, false)
        .await
        .with_context(|| format!("cannot alter configs of {} '{name}'", entity.singular()))?;
    if name.is_empty() {
        println!("Completed updating default config for {} in the cluster.", entity.plural());
    } else {
        println!("Completed updating config for {} {name}.", entity.singular());
    }
    Ok(())
}
