//! `strom cluster`: the cluster id, the controller and the brokers; with
//! `--api-versions`, each broker's API version ranges as
//! `kafka-broker-api-versions.sh` prints them; with `--quorum`, the metadata
//! quorum as `kafka-metadata-quorum.sh describe --status` (or, with
//! `--replication`, `describe --replication`) prints it.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;
use serde_json::{json, Value};
use strom_client::admin::{ClusterDescription, QuorumInfo, QuorumReplica};
use strom_client::cluster::BrokerInfo;
use strom_client::{Admin, ClientConfig};

use crate::client_args::{print_json, print_table, runtime, ConnectArgs, Format};
use crate::topics::kafka_uuid;

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Print each broker's API versions instead.
    #[arg(long = "api-versions", conflicts_with = "quorum")]
    api_versions: bool,
    /// Print the metadata quorum's status instead.
    #[arg(long)]
    quorum: bool,
    /// With --quorum: each voter's and observer's replication state.
    #[arg(long, requires = "quorum")]
    replication: bool,
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
        } else if args.quorum {
            let quorum = admin.describe_quorum().await?;
            match (args.format, args.replication) {
                (Format::Json, _) => print_json(&quorum_json(&cluster, &quorum)),
                (Format::Text, false) => quorum_status(&cluster, &quorum)?,
                (Format::Text, true) => quorum_replication(&quorum)?,
            }
            Ok(())
        } else {
            // The quorum's view is optional: an older broker may not answer it.
            let quorum = admin.describe_quorum().await.ok();
            describe(&cluster, quorum.as_ref(), args.format);
            Ok(())
        }
    })
}

fn rack(broker: &BrokerInfo) -> &str {
    broker.rack.as_deref().unwrap_or("null")
}

fn describe(cluster: &ClusterDescription, quorum: Option<&QuorumInfo>, format: Format) {
    let controllers: Vec<i32> =
        quorum.map(|q| q.voters.iter().map(|v| v.replica_id).collect()).unwrap_or_default();
    if format == Format::Json {
        let brokers: Vec<Value> = cluster
            .brokers
            .iter()
            .map(|b| {
                let fenced = cluster.fenced.contains(&b.node_id);
                json!({"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "fenced": fenced})
            })
            .collect();
        print_json(&json!({
            "cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id, "brokers": brokers,
            "controllers": controllers, "quorum_leader_id": quorum.map(|q| q.leader_id),
        }));
        return;
    }
    println!("Cluster ID: {}", cluster.cluster_id.as_deref().unwrap_or("null"));
    println!("Controller: {}", cluster.controller_id);
    for broker in &cluster.brokers {
        let fenced = cluster.fenced.contains(&broker.node_id);
        println!(
            "Broker: {}\tAddress: {}\tRack: {}\tFenced: {fenced}",
            broker.node_id,
            broker.addr(),
            rack(broker)
        );
    }
    let Some(quorum) = quorum else { return };
    for id in controllers {
        let endpoints = quorum.nodes.get(&id).map(|e| e.iter().map(ToString::to_string).collect::<Vec<_>>());
        println!("Quorum voter: {id}\tEndpoints: {}", endpoints.map_or_else(String::new, |e| e.join(",")));
    }
    println!("Quorum leader: {} (epoch {})", quorum.leader_id, quorum.leader_epoch);
}

/// The leader's own entry among the voters; a leader that is no voter is
/// an answer Kafka's tool cannot print either.
fn quorum_leader(quorum: &QuorumInfo) -> anyhow::Result<&QuorumReplica> {
    let leader = quorum.voters.iter().find(|v| v.replica_id == quorum.leader_id);
    leader.ok_or_else(|| anyhow::anyhow!("the quorum leader {} is not among its voters", quorum.leader_id))
}

/// `{"id": 1, "directoryId": "…", "endpoints": ["CONTROLLER://host:port"]}`
/// per replica, in brackets, as `kafka-metadata-quorum.sh` prints them.
fn replica_list(quorum: &QuorumInfo, replicas: &[QuorumReplica]) -> String {
    let entry = |r: &QuorumReplica| {
        let directory = match r.directory_id.is_nil() {
            true => "null".to_owned(),
            false => format!("\"{}\"", kafka_uuid(r.directory_id.as_bytes())),
        };
        let endpoints =
            quorum.nodes.get(&r.replica_id).filter(|e| !e.is_empty()).map_or_else(String::new, |e| {
                let quoted: Vec<String> = e.iter().map(|e| format!("\"{e}\"")).collect();
                format!(", \"endpoints\": [{}]", quoted.join(", "))
            });
        format!("{{\"id\": {}, \"directoryId\": {directory}{endpoints}}}", r.replica_id)
    };
    format!("[{}]", replicas.iter().map(entry).collect::<Vec<_>>().join(", "))
}

fn quorum_status(cluster: &ClusterDescription, quorum: &QuorumInfo) -> anyhow::Result<()> {
    let leader = quorum_leader(quorum)?;
    // The voter furthest behind; the leader itself when none is behind it.
    let slowest = quorum.voters.iter().min_by_key(|v| v.log_end_offset).unwrap_or(leader);
    let lag_time_ms = if slowest == leader {
        0
    } else {
        match (leader.last_caught_up_timestamp, slowest.last_caught_up_timestamp) {
            (Some(leader), Some(slowest)) => leader - slowest,
            _ => -1,
        }
    };
    let fields = [
        ("ClusterId", cluster.cluster_id.clone().unwrap_or_else(|| "null".to_owned())),
        ("LeaderId", quorum.leader_id.to_string()),
        ("LeaderEpoch", quorum.leader_epoch.to_string()),
        ("HighWatermark", quorum.high_watermark.to_string()),
        ("MaxFollowerLag", (leader.log_end_offset - slowest.log_end_offset).to_string()),
        ("MaxFollowerLagTimeMs", lag_time_ms.to_string()),
        ("CurrentVoters", replica_list(quorum, &quorum.voters)),
        ("CurrentObservers", replica_list(quorum, &quorum.observers)),
    ];
    for (name, value) in fields {
        println!("{:<24}{value}", format!("{name}:"));
    }
    Ok(())
}

fn quorum_replication(quorum: &QuorumInfo) -> anyhow::Result<()> {
    let leader = quorum_leader(quorum)?;
    let followers = quorum.voters.iter().filter(|v| v.replica_id != quorum.leader_id);
    let roles = std::iter::once((leader, "Leader"))
        .chain(followers.map(|f| (f, "Follower")))
        .chain(quorum.observers.iter().map(|o| (o, "Observer")));
    let timestamp = |t: Option<i64>| t.unwrap_or(-1).to_string();
    let rows = roles
        .map(|(r, status)| {
            vec![
                r.replica_id.to_string(),
                kafka_uuid(r.directory_id.as_bytes()),
                r.log_end_offset.to_string(),
                (leader.log_end_offset - r.log_end_offset).to_string(),
                timestamp(r.last_fetch_timestamp),
                timestamp(r.last_caught_up_timestamp),
                status.to_owned(),
            ]
        })
        .collect();
    let headers = [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ];
    print_table(&headers, rows);
    Ok(())
}

fn quorum_json(cluster: &ClusterDescription, quorum: &QuorumInfo) -> Value {
    let replicas = |replicas: &[QuorumReplica]| -> Vec<Value> {
        replicas
            .iter()
            .map(|r| {
                let endpoints: Vec<String> =
                    quorum.nodes.get(&r.replica_id).into_iter().flatten().map(ToString::to_string).collect();
                json!({
                    "id": r.replica_id,
                    "directory_id": (!r.directory_id.is_nil()).then(|| kafka_uuid(r.directory_id.as_bytes())),
                    "log_end_offset": r.log_end_offset,
                    "last_fetch_timestamp": r.last_fetch_timestamp,
                    "last_caught_up_timestamp": r.last_caught_up_timestamp,
                    "endpoints": endpoints,
                })
            })
            .collect()
    };
    json!({
        "cluster_id": cluster.cluster_id, "leader_id": quorum.leader_id, "leader_epoch": quorum.leader_epoch,
        "high_watermark": quorum.high_watermark, "voters": replicas(&quorum.voters),
        "observers": replicas(&quorum.observers),
    })
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
