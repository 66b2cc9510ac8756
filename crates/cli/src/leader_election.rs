//! `strom leader-election`: preferred or unclean leader elections, like
//! `kafka-leader-election.sh`, for one partition, the partitions of a JSON
//! file (`{"partitions":[{"topic":"t","partition":0}]}`) or every
//! partition that needs one.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde_json::Value;
use strom_client::{Admin, ClientConfig};

use crate::client_args::{runtime, ConnectArgs};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["all_topic_partitions", "topic", "path_to_json_file"])))]
pub struct LeaderElectionArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// PREFERRED or UNCLEAN.
    #[arg(long = "election-type", value_parser = parse_election_type)]
    election_type: i8,
    /// Elect leaders of every partition that needs one.
    #[arg(long = "all-topic-partitions")]
    all_topic_partitions: bool,
    /// The topic of the one partition to elect a leader for.
    #[arg(long, requires = "partition")]
    topic: Option<String>,
    /// The partition to elect a leader for.
    #[arg(long, requires = "topic")]
    partition: Option<i32>,
    /// `{"partitions":[{"topic":"t","partition":0}]}`.
    #[arg(long = "path-to-json-file", value_name = "FILE")]
    path_to_json_file: Option<PathBuf>,
}

fn parse_election_type(text: &str) -> Result<i8, String> {
    match text.to_ascii_uppercase().as_str() {
        "PREFERRED" => Ok(0),
        "UNCLEAN" => Ok(1),
        _ => Err(format!("'{text}' is not an election type: PREFERRED or UNCLEAN")),
    }
}

pub fn run(args: LeaderElectionArgs) -> anyhow::Result<()> {
    let partitions = match (&args.topic, args.partition, &args.path_to_json_file) {
        (Some(topic), Some(partition), _) => Some(vec![(topic.clone(), partition)]),
        (_, _, Some(path)) => Some(partitions_json(path)?),
        _ => None,
    };
    let name = if args.election_type == 0 { "PREFERRED" } else { "UNCLEAN" };
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        let results = admin.elect_leaders(args.election_type, partitions.as_deref()).await?;
        let (mut elected, mut not_needed, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for r in results {
            let tp = format!("{}-{}", r.topic, r.partition);
            match r.result {
                Ok(()) => elected.push(tp),
                Err(e) if e.kafka_code().is_some_and(|c| c.to_string() == "ELECTION_NOT_NEEDED") => {
                    not_needed.push(tp)
                }
                Err(e) => failed.push(format!("{tp}: {e}")),
            }
        }
        if !elected.is_empty() {
            println!("Successfully completed leader election ({name}) for partitions {}", elected.join(", "));
        }
        if !not_needed.is_empty() {
            println!("Valid replica already elected for partitions {}", not_needed.join(", "));
        }
        for failure in &failed {
            println!("Error completing leader election ({name}) for partition: {failure}");
        }
        if !failed.is_empty() {
            bail!("{} replica(s) could not be elected", failed.len());
        }
        Ok(())
    })
}

/// The partitions of Kafka's election JSON file.
fn partitions_json(path: &PathBuf) -> anyhow::Result<Vec<(String, i32)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Some(entries) = json.get("partitions").and_then(Value::as_array) else {
        bail!("{} has no \"partitions\" array", path.display());
    };
    let partitions: Vec<(String, i32)> = entries
        .iter()
        .map(|entry| {
            let topic = entry.get("topic").and_then(Value::as_str);
            let partition =
                entry.get("partition").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok());
            match (topic, partition) {
                (Some(topic), Some(partition)) => Ok((topic.to_owned(), partition)),
                _ => bail!("{entry} in {} needs a \"topic\" and a \"partition\"", path.display()),
            }
        })
        .collect::<anyhow::Result<_>>()?;
    // Kafka refuses a file naming a partition twice.
    let mut seen = std::collections::BTreeSet::new();
    let twice: std::collections::BTreeSet<String> =
        partitions.iter().filter(|tp| !seen.insert(*tp)).map(|(t, p)| format!("{t}-{p}")).collect();
    if !twice.is_empty() {
        bail!(
            "{} names duplicate partitions: {}",
            path.display(),
            twice.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(partitions)
}
