//! `strom topics`: create, list, describe, alter and delete topics, like
//! `kafka-topics.sh`, through `strom-client`'s admin API.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use strom_client::admin::{
    AlterConfigOp, ConfigEntry, NewTopic, PartitionDescription, ResourceType, TopicDescription,
};
use strom_client::config::parse_pairs;
use strom_client::{Admin, ClientConfig, Error};

use serde_json::{json, Value};

use crate::client_args::{print_json, runtime, ConnectArgs, Format};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["create", "list", "describe", "delete", "alter"])))]
pub struct TopicsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Create a topic.
    #[arg(long)]
    create: bool,
    /// List topic names.
    #[arg(long)]
    list: bool,
    /// Show partitions, leaders, replicas, ISR, eligible leader replicas and
    /// non-default configs.
    #[arg(long)]
    describe: bool,
    /// Delete a topic.
    #[arg(long)]
    delete: bool,
    /// Add partitions (`--partitions`) or change configs (`--config`).
    #[arg(long)]
    alter: bool,
    /// The topic to act on (describe and list: all topics when omitted).
    #[arg(long)]
    topic: Option<String>,
    /// Partition count (create: the broker default when omitted; alter: the new total).
    #[arg(long)]
    partitions: Option<i32>,
    /// Replication factor (create: the broker default when omitted).
    #[arg(long = "replication-factor")]
    replication_factor: Option<i16>,
    /// A topic config, `key=value`; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    configs: Vec<String>,
    /// Create: succeed quietly if the topic exists.
    #[arg(long = "if-not-exists")]
    if_not_exists: bool,
    /// Alter, delete and describe: do nothing if the topic does not exist.
    #[arg(long = "if-exists")]
    if_exists: bool,
    /// Describe: only partitions whose ISR is smaller than their replica set.
    #[arg(long = "under-replicated-partitions")]
    under_replicated_partitions: bool,
    /// Describe: only partitions without a leader or whose leader is not live.
    #[arg(long = "unavailable-partitions")]
    unavailable_partitions: bool,
    /// Describe: only partitions without a leader or whose ISR is smaller than
    /// `min.insync.replicas`.
    #[arg(long = "under-min-isr-partitions")]
    under_min_isr_partitions: bool,
    /// Describe: only partitions whose ISR is exactly `min.insync.replicas`.
    #[arg(long = "at-min-isr-partitions")]
    at_min_isr_partitions: bool,
    /// List and describe: leave out internal topics.
    #[arg(long = "exclude-internal")]
    exclude_internal: bool,
    /// Output of --list and --describe: Kafka's text or JSON.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: TopicsArgs) -> anyhow::Result<()> {
    let reports = [
        (args.under_replicated_partitions, "--under-replicated-partitions"),
        (args.unavailable_partitions, "--unavailable-partitions"),
        (args.under_min_isr_partitions, "--under-min-isr-partitions"),
        (args.at_min_isr_partitions, "--at-min-isr-partitions"),
    ];
    if let Some((_, flag)) = reports.iter().find(|(set, _)| *set && !args.describe) {
        bail!("{flag} is only allowed with --describe");
    }
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        match () {
            _ if args.create => create(&admin, &args).await,
            _ if args.list => list(&admin, &args).await,
            _ if args.describe => describe(&admin, &args).await,
            _ if args.delete => delete(&admin, &args).await,
            _ => alter(&admin, &args).await,
        }
    })
}

fn required_topic(args: &TopicsArgs) -> anyhow::Result<&str> {
    args.topic.as_deref().context("--topic is required for this action")
}

fn is_code(error: &Error, code: i16) -> bool {
    error.kafka_code().is_some_and(|c| c.code() == code)
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_ALREADY_EXISTS: i16 = 36;

async fn create(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<()> {
    let name = required_topic(args)?;
    let mut topic = NewTopic::new(name, args.partitions.unwrap_or(-1), args.replication_factor.unwrap_or(-1));
    topic.configs = parse_pairs(args.configs.iter().map(String::as_str))?;
    let result =
        admin.create_topics(&[topic], false).await?.into_iter().next().context("no result for the topic")?;
    match result.result {
        Ok(()) => println!("Created topic {name}."),
        Err(e) if args.if_not_exists && is_code(&e, TOPIC_ALREADY_EXISTS) => {}
        Err(e) => bail!("cannot create topic {name}: {e}"),
    }
    Ok(())
}

async fn list(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<()> {
    let mut names = admin.list_topics(!args.exclude_internal).await?;
    names.retain(|name| args.topic.as_deref().is_none_or(|t| t == name));
    match args.format {
        Format::Json => print_json(&json!(names)),
        Format::Text => names.iter().for_each(|name| println!("{name}")),
    }
    Ok(())
}

/// The topics to describe: the named one, or all.
async fn topics_to_describe(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<Vec<TopicDescription>> {
    let names: Vec<String> = args.topic.iter().cloned().collect();
    let mut topics = Vec::new();
    for item in admin.describe_topic_partitions(&names).await? {
        match item.result {
            Ok(topic) if args.exclude_internal && topic.is_internal => {}
            Ok(topic) => topics.push(topic),
            Err(e) if is_code(&e, UNKNOWN_TOPIC_OR_PARTITION) && args.if_exists => {}
            Err(e) if is_code(&e, UNKNOWN_TOPIC_OR_PARTITION) => {
                bail!("topic '{}' does not exist", item.name)
            }
            Err(e) => bail!("cannot describe topic {}: {e}", item.name),
        }
    }
    Ok(topics)
}

/// Which partitions `--describe` prints, as kafka-topics.sh chooses them:
/// every one, or with report flags those matching any of them (and then
/// no topic lines).
struct Reports {
    under_replicated: bool,
    unavailable: bool,
    under_min_isr: bool,
    at_min_isr: bool,
    /// Brokers registered and not fenced.
    live_brokers: BTreeSet<i32>,
}

impl Reports {
    fn any(&self) -> bool {
        self.under_replicated || self.unavailable || self.under_min_isr || self.at_min_isr
    }

    /// `min_isr` is the topic's `min.insync.replicas`, when known.
    fn shows(&self, p: &PartitionDescription, min_isr: Option<usize>) -> bool {
        let under_min_isr = p.leader.is_none() || min_isr.is_some_and(|min| p.isr.len() < min);
        !self.any()
            || (self.under_replicated && p.isr.len() < p.replicas.len())
            || (self.unavailable && p.leader.is_none_or(|leader| !self.live_brokers.contains(&leader)))
            || (self.under_min_isr && under_min_isr)
            || (self.at_min_isr && min_isr == Some(p.isr.len()))
    }
}

async fn reports(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<Reports> {
    let mut reports = Reports {
        under_replicated: args.under_replicated_partitions,
        unavailable: args.unavailable_partitions,
        under_min_isr: args.under_min_isr_partitions,
        at_min_isr: args.at_min_isr_partitions,
        live_brokers: BTreeSet::new(),
    };
    if reports.unavailable {
        let cluster = admin.describe_cluster().await?;
        let live = cluster.brokers.iter().map(|b| b.node_id).filter(|id| !cluster.fenced.contains(id));
        reports.live_brokers = live.collect();
    }
    Ok(reports)
}

async fn describe(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<()> {
    let reports = reports(admin, args).await?;
    let mut described = Vec::new();
    for topic in topics_to_describe(admin, args).await? {
        let configs = topic_configs(admin, &topic.name).await;
        let min_isr = configs
            .iter()
            .find(|e| e.name == MIN_INSYNC_REPLICAS)
            .and_then(|e| e.value.as_deref()?.parse().ok());
        let partitions: Vec<_> = topic.partitions.iter().filter(|p| reports.shows(p, min_isr)).collect();
        let overrides: Vec<&ConfigEntry> =
            configs.iter().filter(|e| !e.is_default() && !e.is_sensitive).collect();
        if args.format == Format::Json {
            if !reports.any() || !partitions.is_empty() {
                described.push(topic_json(&topic, &partitions, &overrides));
            }
            continue;
        }
        if !reports.any() {
            print_topic_line(&topic, &overrides);
        }
        for p in partitions {
            print_partition_line(&topic.name, p);
        }
    }
    if args.format == Format::Json {
        print_json(&Value::Array(described));
    }
    Ok(())
}

const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";

fn replication_factor(topic: &TopicDescription) -> usize {
    topic.partitions.first().map_or(0, |p| p.replicas.len())
}

fn print_topic_line(topic: &TopicDescription, overrides: &[&ConfigEntry]) {
    let configs: Vec<String> =
        overrides.iter().map(|e| format!("{}={}", e.name, e.value.as_deref().unwrap_or("null"))).collect();
    println!(
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
        topic.name,
        kafka_uuid(topic.topic_id.as_bytes()),
        topic.partitions.len(),
        replication_factor(topic),
        configs.join(",")
    );
}

/// A partition as kafka-topics.sh prints it; the eligible leader replicas
/// are `N/A` when the broker described the partition through Metadata.
fn partition_line(topic: &str, p: &PartitionDescription) -> String {
    let elr = |ids: &Option<Vec<i32>>| ids.as_deref().map_or_else(|| "N/A".to_owned(), join);
    format!(
        "\tTopic: {topic}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tElr: {}\tLastKnownElr: {}",
        p.partition,
        p.leader.map_or_else(|| "none".to_owned(), |l| l.to_string()),
        join(&p.replicas),
        join(&p.isr),
        elr(&p.elr),
        elr(&p.last_known_elr),
    )
}

fn print_partition_line(topic: &str, p: &PartitionDescription) {
    println!("{}", partition_line(topic, p));
}

fn topic_json(
    topic: &TopicDescription,
    partitions: &[&PartitionDescription],
    overrides: &[&ConfigEntry],
) -> Value {
    let partitions: Vec<Value> = partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": p.replicas, "isr": p.isr, "elr": p.elr, "last_known_elr": p.last_known_elr,
                "offline_replicas": p.offline_replicas,
            })
        })
        .collect();
    let configs: serde_json::Map<String, Value> =
        overrides.iter().map(|e| (e.name.clone(), json!(e.value))).collect();
    json!({
        "name": topic.name,
        "topic_id": kafka_uuid(topic.topic_id.as_bytes()),
        "internal": topic.is_internal,
        "replication_factor": replication_factor(topic),
        "partitions": partitions,
        "configs": configs,
    })
}

/// The topic's configs, defaults included; none when the broker cannot say
/// (no DescribeConfigs).
async fn topic_configs(admin: &Admin, topic: &str) -> Vec<ConfigEntry> {
    admin.describe_configs(ResourceType::Topic, topic, &[]).await.unwrap_or_default()
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

async fn delete(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<()> {
    let name = required_topic(args)?;
    let result = admin
        .delete_topics(&[name.to_owned()])
        .await?
        .into_iter()
        .next()
        .context("no result for the topic")?;
    match result.result {
        Ok(()) => Ok(()),
        Err(e) if args.if_exists && is_code(&e, UNKNOWN_TOPIC_OR_PARTITION) => Ok(()),
        Err(e) if is_code(&e, UNKNOWN_TOPIC_OR_PARTITION) => bail!("topic '{name}' does not exist"),
        Err(e) => bail!("cannot delete topic {name}: {e}"),
    }
}

async fn alter(admin: &Admin, args: &TopicsArgs) -> anyhow::Result<()> {
    let name = required_topic(args)?;
    if args.partitions.is_none() && args.configs.is_empty() {
        bail!("--alter needs --partitions or --config");
    }
    if topics_to_describe(admin, args).await?.is_empty() {
        return Ok(()); // --if-exists and the topic is absent
    }
    if let Some(count) = args.partitions {
        let result = admin.create_partitions(&[(name.to_owned(), count)], false).await?;
        if let Some(Err(e)) = result.into_iter().next().map(|r| r.result) {
            bail!("cannot add partitions to {name}: {e}");
        }
    }
    if !args.configs.is_empty() {
        let configs: BTreeMap<String, String> = parse_pairs(args.configs.iter().map(String::as_str))?;
        let ops: Vec<AlterConfigOp> = configs.into_iter().map(|(k, v)| AlterConfigOp::Set(k, v)).collect();
        admin
            .incremental_alter_configs(ResourceType::Topic, name, &ops, false)
            .await
            .with_context(|| format!("cannot alter configs of {name}"))?;
    }
    Ok(())
}

/// A topic id as Kafka prints it: URL-safe base64 without padding.
pub(crate) fn kafka_uuid(bytes: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_as_kafka_prints_them() {
        assert_eq!(kafka_uuid(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        let mut bytes = [0u8; 16];
        bytes[15] = 1;
        assert_eq!(kafka_uuid(&bytes), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(kafka_uuid(&[0xff; 16]), "_____________________w");
    }
}
