//! `strom leader-election`: elect preferred or unclean leaders through
//! ElectLeaders, like `kafka-leader-election.sh`: for one partition, the
//! partitions of a JSON file, or every partition, with Kafka's result lines.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context};
use kafka_protocol::error::ResponseError;
use strom_client::admin::{ElectionResult, ElectionType, ELECTION_NOT_NEEDED};
use strom_client::{Admin, ClientConfig, Error};

use crate::client_args::{runtime, ConnectArgs};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["topic", "all_topic_partitions", "path_to_json_file"])))]
pub struct LeaderElectionArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// PREFERRED: move leadership to the first replica where it does not
    /// lead; UNCLEAN: elect a replica outside the ISR where none leads.
    #[arg(long = "election-type", value_enum, ignore_case = true)]
    election_type: Election,
    /// The topic of the one partition to elect a leader for.
    #[arg(long, requires = "partition")]
    topic: Option<String>,
    /// The partition to elect a leader for.
    #[arg(long, requires = "topic")]
    partition: Option<i32>,
    /// Elect leaders for every partition the election type applies to.
    #[arg(long = "all-topic-partitions")]
    all_topic_partitions: bool,
    /// `{"partitions":[{"topic":"t","partition":0}]}`: the partitions to elect for.
    #[arg(long = "path-to-json-file", value_name = "FILE")]
    path_to_json_file: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "UPPER")]
enum Election {
    Preferred,
    Unclean,
}

impl Election {
    fn client_type(self) -> ElectionType {
        match self {
            Self::Preferred => ElectionType::Preferred,
            Self::Unclean => ElectionType::Unclean,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Preferred => "PREFERRED",
            Self::Unclean => "UNCLEAN",
        }
    }
}

pub fn run(args: LeaderElectionArgs) -> anyhow::Result<()> {
    let partitions = match (&args.path_to_json_file, &args.topic, args.partition) {
        (Some(path), ..) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            Some(election_json(&text)?)
        }
        (None, Some(topic), Some(partition)) => Some(vec![(topic.clone(), partition)]),
        _ => None, // --all-topic-partitions
    };
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        let results = match admin.elect_leaders(args.election_type.client_type(), partitions.as_deref()).await
        {
            Ok(results) => results,
            Err(e) => return Err(whole_failure(e)),
        };
        let (lines, failed) = report(args.election_type, &results);
        lines.iter().for_each(|line| println!("{line}"));
        if failed > 0 {
            bail!("{failed} replica(s) could not be elected");
        }
        Ok(())
    })
}

/// An election that failed as a whole; timeouts and refused authorization
/// are also announced on standard output, as Kafka's tool announces them.
fn whole_failure(error: Error) -> anyhow::Error {
    let announced = match &error {
        Error::Timeout { .. } => Some("Timeout waiting for election results"),
        Error::RetriesExhausted { last, .. } if matches!(**last, Error::Timeout { .. }) => {
            Some("Timeout waiting for election results")
        }
        e if e.kafka_code().is_some_and(|c| c.0 == ResponseError::ClusterAuthorizationFailed) => {
            Some("Not authorized to perform leader election")
        }
        _ => None,
    };
    match announced {
        Some(message) => {
            println!("{message}");
            anyhow::anyhow!("{message}: {error}")
        }
        None => anyhow::Error::new(error).context("leader election failed"),
    }
}

/// Kafka's result lines: the partitions elected, those whose leader was
/// already right, then one line per failed partition; and how many failed.
fn report(election: Election, results: &[ElectionResult]) -> (Vec<String>, usize) {
    let mut succeeded = BTreeSet::new();
    let mut not_needed = BTreeSet::new();
    let mut failed = Vec::new();
    for r in results {
        let partition = (r.topic.as_str(), r.partition);
        match &r.result {
            Ok(()) => {
                succeeded.insert(partition);
            }
            Err(e) if e.kafka_code().is_some_and(|c| c.code() == ELECTION_NOT_NEEDED) => {
                not_needed.insert(partition);
            }
            Err(e) => failed.push((partition, e)),
        }
    }
    failed.sort_by_key(|(partition, _)| *partition);
    let list = |set: &BTreeSet<(&str, i32)>| {
        set.iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>().join(", ")
    };
    let mut lines = Vec::new();
    if !succeeded.is_empty() {
        lines.push(format!(
            "Successfully completed leader election ({}) for partitions {}",
            election.name(),
            list(&succeeded)
        ));
    }
    if !not_needed.is_empty() {
        lines.push(format!("Valid replica already elected for partitions {}", list(&not_needed)));
    }
    for ((topic, partition), error) in &failed {
        lines.push(format!(
            "Error completing leader election ({}) for partition: {topic}-{partition}: {}",
            election.name(),
            java_exception(error)
        ));
    }
    (lines, failed.len())
}

/// An error as Kafka's tool prints the exception it maps to:
/// `org.apache.kafka.common.errors.NotControllerException: message`.
fn java_exception(error: &Error) -> String {
    let (Some(code), Error::Kafka { message, .. }) = (error.kafka_code(), error) else {
        return error.to_string();
    };
    let name = format!("{:?}", code.0);
    let class = if name.ends_with("Exception") { name } else { format!("{name}Exception") };
    match message {
        Some(message) => format!("org.apache.kafka.common.errors.{class}: {message}"),
        None => format!("org.apache.kafka.common.errors.{class}"),
    }
}

/// kafka-leader-election's `--path-to-json-file`:
/// `{"partitions":[{"topic":"t","partition":0}]}`, each partition once.
fn election_json(text: &str) -> anyhow::Result<Vec<(String, i32)>> {
    if text.trim().is_empty() {
        bail!("Replica election data is empty");
    }
    let json: serde_json::Value =
        serde_json::from_str(text).context("The input string is not a valid JSON")?;
    let partitions =
        json.get("partitions").context("Replica election data is missing \"partitions\" field")?;
    let partitions = partitions.as_array().context("partitions must be an array")?;
    let mut targets = Vec::with_capacity(partitions.len());
    for entry in partitions {
        let field = |name: &str| entry.get(name).with_context(|| format!("{entry} has no {name}"));
        let topic = field("topic")?.as_str().with_context(|| format!("topic must be a string in {entry}"))?;
        let partition = (field("partition")?.as_i64().and_then(|p| i32::try_from(p).ok()))
            .with_context(|| format!("partition must be an int in {entry}"))?;
        targets.push((topic.to_owned(), partition));
    }
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<String> =
        targets.iter().filter(|t| !seen.insert(*t)).map(|(t, p)| format!("{t}-{p}")).collect();
    if !duplicates.is_empty() {
        let list: Vec<String> = duplicates.into_iter().collect();
        bail!("Replica election data contains duplicate partitions: {}", list.join(","));
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(topic: &str, partition: i32, code: i16, message: Option<&str>) -> ElectionResult {
        let result = Error::from_code(code, message).map_or(Ok(()), Err);
        ElectionResult { topic: topic.into(), partition, result }
    }

    #[test]
    fn results_print_as_kafkas_tool_prints_them() {
        let results = [
            result("t", 1, 0, None),
            result("t", 0, 0, None),
            result("u", 0, ELECTION_NOT_NEEDED, Some("Leader election not needed for topic partition")),
            result("u", 2, 3, Some("The partition u-2 does not exist.")),
            result("u", 1, 83, None),
        ];
        let (lines, failed) = report(Election::Preferred, &results);
        assert_eq!(failed, 2);
        assert_eq!(
            lines,
            [
                "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
                "Valid replica already elected for partitions u-0",
                "Error completing leader election (PREFERRED) for partition: u-1: \
                 org.apache.kafka.common.errors.EligibleLeadersNotAvailableException",
                "Error completing leader election (PREFERRED) for partition: u-2: \
                 org.apache.kafka.common.errors.UnknownTopicOrPartitionException: The partition u-2 does not exist.",
            ]
        );
    }

    #[test]
    fn an_election_with_nothing_to_do_prints_nothing() {
        assert_eq!(report(Election::Unclean, &[]), (Vec::<String>::new(), 0));
    }

    #[test]
    fn the_json_file_names_each_partition_once() {
        let parsed =
            election_json(r#"{"partitions":[{"topic":"foo","partition":1},{"topic":"bar","partition":2}]}"#);
        assert_eq!(parsed.unwrap(), [("foo".to_string(), 1), ("bar".to_string(), 2)]);
        let twice =
            election_json(r#"{"partitions":[{"topic":"a","partition":0},{"topic":"a","partition":0}]}"#);
        assert_eq!(
            twice.unwrap_err().to_string(),
            "Replica election data contains duplicate partitions: a-0"
        );
        let missing = election_json(r#"{"topics":[]}"#).unwrap_err().to_string();
        assert_eq!(missing, "Replica election data is missing \"partitions\" field");
        assert_eq!(election_json(" ").unwrap_err().to_string(), "Replica election data is empty");
        assert!(election_json(r#"{"partitions":[{"topic":"a","partition":"x"}]}"#).is_err());
    }
}
