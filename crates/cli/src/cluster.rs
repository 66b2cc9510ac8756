//! `strom cluster`: the cluster id, the controller and the brokers; with
//! `--api-versions`, each broker's API version ranges as
//! `kafka-broker-api-versions.sh` prints them.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;
use serde_json::{json, Value};
use strom_client::admin::ClusterDescription;
use strom_client::cluster::BrokerInfo;
use strom_client::{Admin, ClientConfig};

use crate::client_args::{print_json, runtime, ConnectArgs, Format};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Print each broker's API versions instead.
    #[arg(long = "api-versions")]
    api_versions: bool,
    /// Output: text or JSON.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        let mut cluster = admin.describe_cluster().await?;
        cluster.brokers.sort_by_key(|b| b.node_id);
        if args.api_versions {
            api_versions(&admin, &cluster, args.format).await
        } else {
            describe(&cluster, args.format);
            Ok(())
        }
    })
}

fn rack(broker: &BrokerInfo) -> &str {
    broker.rack.as_deref().unwrap_or("null")
}

fn describe(cluster: &ClusterDescription, format: Format) {
    if format == Format::Json {
        let brokers: Vec<Value> = cluster
            .brokers
            .iter()
            .map(|b| json!({"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}))
            .collect();
        print_json(&json!({
            "cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id, "brokers": brokers,
        }));
        return;
    }
    println!("Cluster ID: {}", cluster.cluster_id.as_deref().unwrap_or("null"));
    println!("Controller: {}", cluster.controller_id);
    for broker in &cluster.brokers {
        println!("Broker: {}\tAddress: {}\tRack: {}", broker.node_id, broker.addr(), rack(broker));
    }
}

/// Every API key Kafka's protocol defines, in key order (keys are small:
/// the highest is below 100).
fn known_apis() -> impl Iterator<Item = ApiKey> {
    (0..1000).filter_map(|key| ApiKey::try_from(key).ok())
}

/// The highest version both the broker and the protocol codec speak, or
/// why there is none (Kafka's wording).
fn usable(api: ApiKey, broker: VersionRange) -> Result<i16, &'static str> {
    let codec = api.valid_versions();
    if broker.max < codec.min {
        Err("node too old")
    } else if broker.min > codec.max {
        Err("node too new")
    } else {
        Ok(broker.max.min(codec.max))
    }
}

fn range_text(range: VersionRange) -> String {
    if range.min == range.max {
        range.min.to_string()
    } else {
        format!("{} to {}", range.min, range.max)
    }
}

async fn api_versions(admin: &Admin, cluster: &ClusterDescription, format: Format) -> anyhow::Result<()> {
    let mut described = Vec::new();
    for broker in &cluster.brokers {
        let connection = admin.cluster().connection(broker.node_id).await?;
        let advertised = connection.versions().broker_ranges();
        if format == Format::Json {
            let apis: Vec<Value> = advertised
                .iter()
                .map(|(key, range)| {
                    let api = ApiKey::try_from(*key).ok();
                    json!({
                        "key": key, "name": api.map(|a| format!("{a:?}")), "min": range.min, "max": range.max,
                        "usable": api.and_then(|a| usable(a, *range).ok()),
                    })
                })
                .collect();
            described.push(
                json!({"id": broker.node_id, "address": broker.addr(), "rack": broker.rack, "apis": apis}),
            );
            continue;
        }
        let mut lines: Vec<String> = known_apis()
            .map(|api| match advertised.iter().find(|(key, _)| *key == api as i16) {
                Some((_, range)) => {
                    let usable = match usable(api, *range) {
                        Ok(version) => format!("[usable: {version}]"),
                        Err(why) => format!("[unusable: {why}]"),
                    };
                    format!("{api:?}({}): {} {usable}", api as i16, range_text(*range))
                }
                None => format!("{api:?}({}): UNSUPPORTED", api as i16),
            })
            .collect();
        lines.extend(
            advertised
                .iter()
                .filter(|(key, _)| ApiKey::try_from(*key).is_err())
                .map(|(key, range)| format!("UNKNOWN({key}): {}", range_text(*range))),
        );
        println!("{} (id: {} rack: {}) -> (", broker.addr(), broker.node_id, rack(broker));
        println!("\t{}", lines.join(",\n\t"));
        println!(")");
    }
    if format == Format::Json {
        print_json(&Value::Array(described));
    }
    Ok(())
}
