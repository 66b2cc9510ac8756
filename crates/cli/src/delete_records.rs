//! `strom delete-records`: move partitions' log start offsets forward, like
//! `kafka-delete-records.sh`, from Kafka's offset JSON file or, for one
//! partition, from flags. Offset -1 means the high watermark.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use strom_client::{Admin, ClientConfig};

use crate::client_args::{print_json, runtime, ConnectArgs, Format};
use crate::specs::offset_json;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["offset_json_file", "topic"])))]
pub struct DeleteRecordsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// `{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}`.
    #[arg(long = "offset-json-file", value_name = "FILE", conflicts_with_all = ["topic", "partition", "offset"])]
    offset_json_file: Option<PathBuf>,
    /// The topic of the one partition to delete from.
    #[arg(long, requires_all = ["partition", "offset"])]
    topic: Option<String>,
    /// The partition to delete from.
    #[arg(long, requires = "topic")]
    partition: Option<i32>,
    /// Delete the records before this offset (-1: the high watermark).
    #[arg(long, requires = "topic", allow_hyphen_values = true)]
    offset: Option<i64>,
    /// Output: Kafka's lines or JSON.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: DeleteRecordsArgs) -> anyhow::Result<()> {
    let targets = targets(&args)?;
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        if args.format == Format::Text {
            println!("Executing records delete operation");
        }
        let outcomes = delete(&admin, &targets).await?;
        if args.format == Format::Text {
            println!("Records delete operation completed:");
        }
        print(&outcomes, args.format);
        let failed = outcomes.iter().filter(|(.., outcome)| outcome.is_err()).count();
        if failed > 0 {
            bail!("records could not be deleted from {failed} of {} partitions", outcomes.len());
        }
        Ok(())
    })
}

fn targets(args: &DeleteRecordsArgs) -> anyhow::Result<Vec<(String, i32, i64)>> {
    if let Some(path) = &args.offset_json_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        return offset_json(&text).with_context(|| format!("in {}", path.display()));
    }
    match (&args.topic, args.partition, args.offset) {
        (Some(topic), Some(partition), Some(offset)) => Ok(vec![(topic.clone(), partition, offset)]),
        _ => bail!("--topic needs --partition and --offset"),
    }
}

/// Each target's new low watermark, or why it has none. Partitions the
/// cluster does not know are refused here, so that the others still go.
async fn delete(
    admin: &Admin,
    targets: &[(String, i32, i64)],
) -> anyhow::Result<Vec<(String, i32, Result<i64, String>)>> {
    let names: Vec<String> =
        targets.iter().map(|(t, ..)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let mut known = BTreeSet::new();
    for item in admin.describe_topics(&names).await? {
        if let Ok(topic) = item.result {
            known.extend(topic.partitions.iter().map(|p| (item.name.clone(), p.partition)));
        }
    }
    let (existing, unknown): (Vec<_>, Vec<_>) =
        targets.iter().cloned().partition(|(t, p, _)| known.contains(&(t.clone(), *p)));
    let mut outcomes: Vec<(String, i32, Result<i64, String>)> = unknown
        .into_iter()
        .map(|(t, p, _)| {
            (t, p, Err("UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.".into()))
        })
        .collect();
    if !existing.is_empty() {
        for item in admin.delete_records(&existing).await.context("cannot delete records")? {
            outcomes.push((item.topic, item.partition, item.result.map_err(|e| e.to_string())));
        }
    }
    outcomes.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    Ok(outcomes)
}

fn print(outcomes: &[(String, i32, Result<i64, String>)], format: Format) {
    if format == Format::Json {
        let rows = outcomes.iter().map(|(topic, partition, outcome)| match outcome {
            Ok(low) => json!({"topic": topic, "partition": partition, "low_watermark": low}),
            Err(e) => json!({"topic": topic, "partition": partition, "error": e}),
        });
        print_json(&Value::Array(rows.collect()));
        return;
    }
    for (topic, partition, outcome) in outcomes {
        match outcome {
            Ok(low) => println!("partition: {topic}-{partition}\tlow_watermark: {low}"),
            Err(e) => println!("partition: {topic}-{partition}\terror: {e}"),
        }
    }
}
