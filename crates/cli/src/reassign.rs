//! `strom reassign`: partition reassignments (KIP-455), like
//! `kafka-reassign-partitions.sh`. `--generate` proposes new replicas for
//! the topics of a `--topics-to-move-json-file` over a `--broker-list`;
//! `--execute`, `--verify` and `--cancel` start, check and revert the
//! reassignments of a `--reassignment-json-file`; `--list` prints the
//! ongoing ones. Files use Kafka's JSON:
//! `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;
use strom_client::{Admin, ClientConfig};

use crate::client_args::{runtime, ConnectArgs};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["generate", "execute", "verify", "cancel", "list"])))]
pub struct ReassignArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Propose reassignments of the topics of --topics-to-move-json-file
    /// over the brokers of --broker-list.
    #[arg(long, requires_all = ["topics_to_move_json_file", "broker_list"])]
    generate: bool,
    /// Start the reassignments of --reassignment-json-file.
    #[arg(long, requires = "reassignment_json_file")]
    execute: bool,
    /// Say whether the reassignments of --reassignment-json-file are done.
    #[arg(long, requires = "reassignment_json_file")]
    verify: bool,
    /// Cancel the reassignments of --reassignment-json-file.
    #[arg(long, requires = "reassignment_json_file")]
    cancel: bool,
    /// List the ongoing reassignments.
    #[arg(long)]
    list: bool,
    /// With --execute: start even while other reassignments are ongoing.
    #[arg(long, requires = "execute")]
    additional: bool,
    /// With --execute: refuse targets that change a partition's
    /// replication factor (KIP-860).
    #[arg(long = "disallow-replication-factor-change", requires = "execute")]
    disallow_replication_factor_change: bool,
    /// `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}`.
    #[arg(long = "reassignment-json-file", value_name = "FILE")]
    reassignment_json_file: Option<PathBuf>,
    /// `{"version":1,"topics":[{"topic":"t"}]}`.
    #[arg(long = "topics-to-move-json-file", value_name = "FILE")]
    topics_to_move_json_file: Option<PathBuf>,
    /// The brokers to place replicas on: `1,2,3`.
    #[arg(long = "broker-list", value_name = "IDS")]
    broker_list: Option<String>,
}

/// A partition and its target replicas.
type Assignment = BTreeMap<(String, i32), Vec<i32>>;

pub fn run(args: ReassignArgs) -> anyhow::Result<()> {
    // Files and flags are checked before connecting.
    let targets = args.reassignment_json_file.as_deref().map(reassignment_json).transpose()?;
    let to_move = args.topics_to_move_json_file.as_deref().map(topics_json).transpose()?;
    let brokers = args.broker_list.as_deref().map(broker_list).transpose()?;
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        match (targets, to_move, brokers) {
            _ if args.list => list(&admin).await,
            (_, Some(topics), Some(brokers)) if args.generate => generate(&admin, &topics, &brokers).await,
            (Some(targets), _, _) if args.execute => {
                let allow_rf_change = !args.disallow_replication_factor_change;
                execute(&admin, &targets, args.additional, allow_rf_change).await
            }
            (Some(targets), _, _) if args.verify => verify(&admin, &targets).await,
            (Some(targets), _, _) => cancel(&admin, &targets).await,
            _ => bail!("no action"),
        }
    })
}

/// The current replicas of the topics to move, and new ones striped over
/// `brokers` as Kafka's `AdminUtils.assignReplicasToBrokers` places them.
async fn generate(admin: &Admin, topics: &[String], brokers: &[i32]) -> anyhow::Result<()> {
    let current = current_assignment(admin, topics).await?;
    let mut proposed = Assignment::new();
    for topic in topics {
        let partitions: Vec<(&(String, i32), &Vec<i32>)> =
            current.iter().filter(|((t, _), _)| t == topic).collect();
        let replication_factor = partitions.first().map_or(0, |(_, r)| r.len());
        let placed = stripe(brokers, partitions.len(), replication_factor, seed())?;
        for ((key, _), replicas) in partitions.into_iter().zip(placed) {
            proposed.insert(key.clone(), replicas);
        }
    }
    println!("Current partition replica assignment\n{}\n", reassignment_text(&current));
    println!("Proposed partition reassignment configuration\n{}", reassignment_text(&proposed));
    Ok(())
}

async fn execute(
    admin: &Admin,
    targets: &Assignment,
    additional: bool,
    allow_rf_change: bool,
) -> anyhow::Result<()> {
    if !additional && !admin.list_partition_reassignments(None).await?.is_empty() {
        bail!(
            "Cannot execute because there is an existing partition assignment. Use --additional to \
             override this and create a new partition assignment in addition to the existing one."
        );
    }
    let known: BTreeSet<i32> = admin.describe_cluster().await?.brokers.iter().map(|b| b.node_id).collect();
    if let Some(unknown) = targets.values().flatten().find(|id| !known.contains(id)) {
        bail!("Unknown broker id {unknown}");
    }
    let topics: Vec<String> =
        targets.keys().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let current = current_assignment(admin, &topics).await?;
    if let Some((topic, partition)) = targets.keys().find(|key| !current.contains_key(*key)) {
        bail!("Unable to find partition: {topic}-{partition}");
    }
    let current: Assignment = current.into_iter().filter(|(key, _)| targets.contains_key(key)).collect();
    println!(
        "Current partition replica assignment\n\n{}\n\nSave this to use as the --reassignment-json-file \
         option during rollback",
        reassignment_text(&current)
    );
    let requests: Vec<(String, i32, Option<Vec<i32>>)> =
        targets.iter().map(|((t, p), replicas)| (t.clone(), *p, Some(replicas.clone()))).collect();
    let failed: Vec<String> = admin
        .alter_partition_reassignments(&requests, allow_rf_change)
        .await?
        .into_iter()
        .filter_map(|r| r.result.err().map(|e| format!("{}-{}: {e}", r.topic, r.partition)))
        .collect();
    if !failed.is_empty() {
        bail!("Error reassigning partition(s): {}", failed.join("; "));
    }
    let plural = if targets.len() == 1 { "" } else { "s" };
    println!("Successfully started partition reassignment{plural} for {}", names(targets.keys()));
    Ok(())
}

/// Kafka's `--verify`: each partition is done once no reassignment of it
/// is ongoing; its replicas then say whether it reached the target.
async fn verify(admin: &Admin, targets: &Assignment) -> anyhow::Result<()> {
    let named: Vec<(String, i32)> = targets.keys().cloned().collect();
    let ongoing: BTreeSet<(String, i32)> = admin
        .list_partition_reassignments(Some(&named))
        .await?
        .into_iter()
        .map(|r| (r.topic, r.partition))
        .collect();
    let topics: Vec<String> =
        named.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let current = current_assignment(admin, &topics).await?;
    println!("Status of partition reassignment:");
    for (key, target) in targets {
        let (topic, partition) = key;
        if ongoing.contains(key) {
            println!("Reassignment of partition {topic}-{partition} is still in progress.");
            continue;
        }
        match current.get(key) {
            Some(replicas) if replicas == target => {
                println!("Reassignment of partition {topic}-{partition} is completed.")
            }
            replicas => println!(
                "There is no active reassignment of partition {topic}-{partition}, but replica set is {} \
                 rather than {}.",
                joined(replicas.map_or(&[][..], Vec::as_slice)),
                joined(target)
            ),
        }
    }
    Ok(())
}

/// Cancels the ongoing reassignments among the file's partitions.
async fn cancel(admin: &Admin, targets: &Assignment) -> anyhow::Result<()> {
    let named: Vec<(String, i32)> = targets.keys().cloned().collect();
    let ongoing: Vec<(String, i32)> = admin
        .list_partition_reassignments(Some(&named))
        .await?
        .into_iter()
        .map(|r| (r.topic, r.partition))
        .collect();
    if ongoing.is_empty() {
        println!("None of the specified partition reassignments are active.");
        return Ok(());
    }
    let requests: Vec<(String, i32, Option<Vec<i32>>)> =
        ongoing.iter().map(|(t, p)| (t.clone(), *p, None)).collect();
    let failed: Vec<String> = admin
        .alter_partition_reassignments(&requests, true)
        .await?
        .into_iter()
        .filter_map(|r| r.result.err().map(|e| format!("{}-{}: {e}", r.topic, r.partition)))
        .collect();
    if !failed.is_empty() {
        bail!("Error cancelling partition reassignment(s): {}", failed.join("; "));
    }
    let plural = if ongoing.len() == 1 { "" } else { "s" };
    println!("Successfully cancelled partition reassignment{plural} for: {}", names(ongoing.iter()));
    Ok(())
}

async fn list(admin: &Admin) -> anyhow::Result<()> {
    let mut ongoing = admin.list_partition_reassignments(None).await?;
    if ongoing.is_empty() {
        println!("No partition reassignments found.");
        return Ok(());
    }
    ongoing.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    println!("Current partition reassignments:");
    for r in ongoing {
        let adding = if r.adding_replicas.is_empty() {
            String::new()
        } else {
            format!(" adding: {}.", joined(&r.adding_replicas))
        };
        let removing = if r.removing_replicas.is_empty() {
            String::new()
        } else {
            format!(" removing: {}.", joined(&r.removing_replicas))
        };
        println!("{}-{}: replicas: {}.{adding}{removing}", r.topic, r.partition, joined(&r.replicas));
    }
    Ok(())
}

/// The replicas of every partition of `topics`, as the metadata gives them.
async fn current_assignment(admin: &Admin, topics: &[String]) -> anyhow::Result<Assignment> {
    let mut assignment = Assignment::new();
    for described in admin.describe_topics(topics).await? {
        let topic = described.result.map_err(|_| anyhow::anyhow!("Topic {} not found.", described.name))?;
        for p in &topic.partitions {
            assignment.insert((described.name.clone(), p.partition), p.replicas.clone());
        }
    }
    Ok(assignment)
}

/// Kafka's rack-unaware `assignReplicasToBrokers`: partition leaders go
/// round the sorted brokers from a random start, followers at a shift that
/// grows once per round, so replicas spread evenly.
fn stripe(
    brokers: &[i32],
    partitions: usize,
    replication_factor: usize,
    seed: u64,
) -> anyhow::Result<Vec<Vec<i32>>> {
    let mut brokers = brokers.to_vec();
    brokers.sort_unstable();
    let n = brokers.len();
    if replication_factor > n {
        bail!("Replication factor: {replication_factor} larger than available brokers: {n}.");
    }
    let start = (seed % n as u64) as usize;
    let mut shift = ((seed >> 32) % n as u64) as usize;
    let mut placed = Vec::with_capacity(partitions);
    for partition in 0..partitions {
        if partition > 0 && partition % n == 0 {
            shift += 1;
        }
        let first = (partition + start) % n;
        let mut replicas = vec![brokers[first]];
        for j in 0..replication_factor.saturating_sub(1) {
            let step = 1 + (shift + j) % (n - 1);
            replicas.push(brokers[(first + step) % n]);
        }
        placed.push(replicas);
    }
    Ok(placed)
}

/// A different placement start per run, as Kafka's random one.
fn seed() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
}

/// Kafka's reassignment JSON, on one line, its keys in Kafka's order.
fn reassignment_text(assignment: &Assignment) -> String {
    let partitions: Vec<String> = assignment
        .iter()
        .map(|((topic, partition), replicas)| {
            format!(
                r#"{{"topic":{},"partition":{partition},"replicas":[{}],"log_dirs":[{}]}}"#,
                Value::from(topic.as_str()),
                joined(replicas),
                vec![r#""any""#; replicas.len()].join(",")
            )
        })
        .collect();
    format!(r#"{{"version":1,"partitions":[{}]}}"#, partitions.join(","))
}

fn names<'a>(partitions: impl Iterator<Item = &'a (String, i32)>) -> String {
    partitions.map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>().join(",")
}

fn joined(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    match json.get("version").map(Value::as_i64) {
        None | Some(Some(1)) => Ok(json),
        Some(_) => bail!("Not supported version field value {} in {}", json["version"], path.display()),
    }
}

/// The partitions and target replicas of a reassignment file, checked as
/// Kafka checks them.
fn reassignment_json(path: &Path) -> anyhow::Result<Assignment> {
    let json = read_json(path)?;
    let Some(entries) = json.get("partitions").and_then(Value::as_array) else {
        bail!("{} has no \"partitions\" array", path.display());
    };
    if entries.is_empty() {
        bail!("Partition reassignment list cannot be empty");
    }
    let mut assignment = Assignment::new();
    let mut twice = BTreeSet::new();
    for entry in entries {
        let topic = entry.get("topic").and_then(Value::as_str);
        let partition = entry.get("partition").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok());
        let replicas: Option<Vec<i32>> = entry
            .get("replicas")
            .and_then(Value::as_array)
            .and_then(|ids| ids.iter().map(|id| id.as_i64().and_then(|id| i32::try_from(id).ok())).collect());
        let (Some(topic), Some(partition), Some(replicas)) = (topic, partition, replicas) else {
            bail!(
                "{entry} in {} needs a \"topic\", a \"partition\" and \"replicas\" broker ids",
                path.display()
            );
        };
        if replicas.is_empty() {
            bail!("Partition replica list cannot be empty");
        }
        if replicas.iter().enumerate().any(|(i, id)| replicas[..i].contains(id)) {
            bail!("Partition replica lists may not contain duplicate entries: {topic}-{partition}");
        }
        if let Some(dirs) = entry.get("log_dirs").and_then(Value::as_array) {
            if dirs.len() != replicas.len() {
                bail!(
                    "Size of replicas list {replicas:?} is different from size of log dirs list {dirs:?} for \
                     partition {topic}-{partition}"
                );
            }
            if dirs.iter().any(|d| d.as_str() != Some("any")) {
                bail!(
                    "moving replicas between log dirs is not supported: use \"any\" for {topic}-{partition}"
                );
            }
        }
        if assignment.insert((topic.to_owned(), partition), replicas).is_some() {
            twice.insert(format!("{topic}-{partition}"));
        }
    }
    if !twice.is_empty() {
        bail!(
            "Partition reassignment contains duplicate topic partitions: {}",
            twice.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    Ok(assignment)
}

/// The topic names of a topics-to-move file.
fn topics_json(path: &Path) -> anyhow::Result<Vec<String>> {
    let json = read_json(path)?;
    let Some(entries) = json.get("topics").and_then(Value::as_array) else {
        bail!("{} has no \"topics\" array", path.display());
    };
    let topics: Vec<String> = entries
        .iter()
        .map(|e| match e.get("topic").and_then(Value::as_str) {
            Some(topic) => Ok(topic.to_owned()),
            None => bail!("{e} in {} needs a \"topic\"", path.display()),
        })
        .collect::<anyhow::Result<_>>()?;
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = topics.iter().filter(|t| !seen.insert(*t)).collect();
    if !twice.is_empty() {
        bail!(
            "List of topics to reassign contains duplicate entries: {}",
            twice.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
        );
    }
    if topics.is_empty() {
        bail!("{} names no topics", path.display());
    }
    Ok(topics)
}

/// `--broker-list`: distinct broker ids separated by commas.
fn broker_list(text: &str) -> anyhow::Result<Vec<i32>> {
    let ids: Vec<i32> = text
        .split(',')
        .map(|id| {
            id.trim().parse::<i32>().with_context(|| format!("'{id}' in --broker-list is not a broker id"))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut seen = BTreeSet::new();
    let twice: Vec<String> = ids.iter().filter(|id| !seen.insert(**id)).map(i32::to_string).collect();
    if !twice.is_empty() {
        bail!("Broker list contains duplicate entries: {}", twice.join(","));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striping_spreads_leaders_and_followers_over_every_broker() {
        let placed = stripe(&[3, 1, 2], 3, 2, 0).unwrap();
        assert_eq!(placed, vec![vec![1, 2], vec![2, 3], vec![3, 1]]);
        for replicas in stripe(&[1, 2, 3, 4], 8, 3, 12345).unwrap() {
            let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
            assert_eq!(distinct.len(), 3);
        }
        assert!(stripe(&[1], 1, 2, 0).is_err());
    }

    #[test]
    fn the_json_is_kafkas_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("strom-reassign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plan.json");
        let assignment = Assignment::from([(("t".to_owned(), 0), vec![2, 3])]);
        let text = reassignment_text(&assignment);
        assert_eq!(
            text,
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],"log_dirs":["any","any"]}]}"#
        );
        std::fs::write(&path, &text).unwrap();
        assert_eq!(reassignment_json(&path).unwrap(), assignment);
        std::fs::write(&path, r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,2]}]}"#)
            .unwrap();
        assert!(reassignment_json(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
