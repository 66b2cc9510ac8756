//! `strom offsets`: partitions' offsets at a point in the log, like
//! `kafka-get-offsets.sh` (GetOffsetShell): the earliest, the latest, the
//! record with the highest timestamp, or the first at or after a time.
//! Topics are named exactly (Kafka also takes a regular expression).

use anyhow::{bail, Context};
use serde_json::{json, Value};
use strom_client::admin::OffsetSpec;
use strom_client::{Admin, ClientConfig};

use crate::client_args::{print_json, runtime, ConnectArgs, Format};
use crate::specs::{partition_list, partition_rules, PartitionRule};

#[derive(clap::Args, Debug)]
pub struct OffsetsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The topic (all topics when omitted).
    #[arg(long, conflicts_with = "topic_partitions")]
    topic: Option<String>,
    /// Partition ids, `0,1` (all when omitted).
    #[arg(long, conflicts_with = "topic_partitions")]
    partitions: Option<String>,
    /// Rules `topic:N`, `topic:N-M` (M exclusive), `topic:N-`, `topic:-M`, `topic`, `:N`; comma-separated.
    #[arg(long = "topic-partitions", value_name = "RULES")]
    topic_partitions: Option<String>,
    /// `earliest` (-2), `latest` (-1), `max-timestamp` (-3), or a timestamp in ms.
    #[arg(long, default_value = "latest", allow_hyphen_values = true)]
    time: String,
    /// Leave out internal topics (`__consumer_offsets`…).
    #[arg(long = "exclude-internal-topics")]
    exclude_internal_topics: bool,
    /// Output: Kafka's `topic:partition:offset` lines, or JSON.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: OffsetsArgs) -> anyhow::Result<()> {
    let spec = offset_spec(&args.time)?;
    let rules = rules(&args)?;
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        let partitions = matching_partitions(&admin, &rules, !args.exclude_internal_topics).await?;
        if partitions.is_empty() {
            bail!("Could not match any topic-partitions with the specified filters");
        }
        let queries: Vec<(String, i32, OffsetSpec)> =
            partitions.into_iter().map(|(t, p)| (t, p, spec)).collect();
        let mut found = Vec::new();
        for item in admin.list_offsets(&queries).await.context("cannot list offsets")? {
            match item.result {
                // No offset at that time (past the last record): nothing to print, as in Kafka.
                Ok(listed) if listed.offset < 0 => {}
                Ok(listed) => found.push((item.topic, item.partition, listed.offset)),
                Err(e) => eprintln!(
                    "Skip getting offsets for topic-partition {}-{} due to error: {e}",
                    item.topic, item.partition
                ),
            }
        }
        found.sort();
        print(&found, args.format);
        Ok(())
    })
}

/// `--time` as GetOffsetShell reads it.
fn offset_spec(time: &str) -> anyhow::Result<OffsetSpec> {
    Ok(match time {
        "earliest" | "-2" | "earliest-local" | "-4" => OffsetSpec::Earliest,
        "latest" | "-1" => OffsetSpec::Latest,
        "max-timestamp" | "-3" => OffsetSpec::MaxTimestamp,
        "latest-tiered" | "-5" | "earliest-pending-upload" | "-6" => {
            bail!("--time {time} needs tiered storage, which Strom does not have")
        }
        _ => match time.parse::<i64>() {
            Ok(ms) if ms >= 0 => OffsetSpec::Timestamp(ms),
            _ => bail!(
                "Malformed time argument {time}. Please use -1 or latest / -2 or earliest / -3 or max-timestamp, \
                 or a specified long format timestamp"
            ),
        },
    })
}

/// The partition filters: `--topic-partitions` rules, or one rule per
/// `--partitions` id (or for all partitions) of `--topic` (or any topic).
fn rules(args: &OffsetsArgs) -> anyhow::Result<Vec<PartitionRule>> {
    if let Some(text) = &args.topic_partitions {
        return partition_rules(text);
    }
    let rule = |lower: i32, upper: i32| PartitionRule { topic: args.topic.clone(), lower, upper };
    Ok(match &args.partitions {
        Some(list) => partition_list(list)?.into_iter().map(|p| rule(p, p + 1)).collect(),
        None => vec![rule(0, i32::MAX)],
    })
}

/// Every existing `(topic, partition)` some rule matches.
async fn matching_partitions(
    admin: &Admin,
    rules: &[PartitionRule],
    include_internal: bool,
) -> anyhow::Result<Vec<(String, i32)>> {
    let topics: Vec<String> = admin
        .list_topics(include_internal)
        .await?
        .into_iter()
        .filter(|t| rules.iter().any(|r| r.matches_topic(t)))
        .collect();
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let mut partitions = Vec::new();
    for item in admin.describe_topics(&topics).await? {
        let Ok(topic) = item.result else { continue };
        for p in &topic.partitions {
            if rules.iter().any(|r| r.matches(&topic.name, p.partition)) {
                partitions.push((topic.name.clone(), p.partition));
            }
        }
    }
    Ok(partitions)
}

fn print(found: &[(String, i32, i64)], format: Format) {
    match format {
        Format::Json => print_json(&Value::Array(
            found.iter().map(|(t, p, o)| json!({"topic": t, "partition": p, "offset": o})).collect(),
        )),
        Format::Text => found.iter().for_each(|(t, p, o)| println!("{t}:{p}:{o}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_get_offset_shell_reads_them() {
        assert_eq!(offset_spec("earliest").unwrap(), OffsetSpec::Earliest);
        assert_eq!(offset_spec("-2").unwrap(), OffsetSpec::Earliest);
        assert_eq!(offset_spec("latest").unwrap(), OffsetSpec::Latest);
        assert_eq!(offset_spec("-1").unwrap(), OffsetSpec::Latest);
        assert_eq!(offset_spec("max-timestamp").unwrap(), OffsetSpec::MaxTimestamp);
        assert_eq!(offset_spec("-3").unwrap(), OffsetSpec::MaxTimestamp);
        assert_eq!(offset_spec("1700000000000").unwrap(), OffsetSpec::Timestamp(1_700_000_000_000));
        assert!(offset_spec("yesterday").unwrap_err().to_string().contains("Malformed time argument"));
        assert!(offset_spec("-5").is_err());
    }
}
