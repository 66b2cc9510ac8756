//! `strom transactions`: Kafka's `kafka-transactions.sh` (KIP-664) for
//! finding and ending transactions nothing else will end.
//!
//! `list` and `describe` show what the coordinators know;
//! `describe-producers` what a partition's leader knows; `find-hanging`
//! compares the two: a transaction open in a partition whose coordinator
//! does not count the partition in it (a producer of a client or broker
//! without KIP-890's verification wrote there) is hanging, and holds back
//! every read_committed consumer of the partition until `abort` writes its
//! marker. Flags and tables are Kafka's; connection flags come before the
//! command, as in Kafka (`strom transactions --bootstrap-server H:P list`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use strom_client::admin::{AbortTransactionSpec, ListTransactionsFilter, ProducerState};
use strom_client::{Admin, ClientConfig, KafkaCode};

use crate::client_args::{print_table, runtime, ConnectArgs};

/// DescribeProducers asks for at most this many partitions at once, as Kafka's tool.
const FIND_HANGING_BATCH: usize = 500;
/// TRANSACTIONAL_ID_NOT_FOUND: the coordinator no longer knows the id.
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

#[derive(clap::Args, Debug)]
pub struct TransactionsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(subcommand)]
    command: TransactionsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum TransactionsCommand {
    /// List transactions.
    List {
        /// Only transactions running longer than this many milliseconds (< 0: all).
        #[arg(long = "duration-filter", value_name = "MS", allow_hyphen_values = true)]
        duration_filter: Option<i64>,
        /// Only transactional ids this regular expression matches whole.
        #[arg(long = "transactional-id-pattern", value_name = "REGEX")]
        transactional_id_pattern: Option<String>,
    },
    /// Describe the state of an active transactional-id.
    Describe {
        /// The transactional id.
        #[arg(long = "transactional-id")]
        transactional_id: String,
    },
    /// Describe the states of active producers for a topic partition.
    DescribeProducers {
        /// Ask this broker (one replica) instead of the partition's leader.
        #[arg(long = "broker-id")]
        broker_id: Option<i32>,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: i32,
    },
    /// Find hanging transactions.
    FindHanging {
        /// Search the partitions this broker holds a replica of.
        #[arg(long = "broker-id")]
        broker_id: Option<i32>,
        /// Only transactions idle longer than this many minutes.
        #[arg(long = "max-transaction-timeout", value_name = "MINUTES", default_value_t = 15)]
        max_transaction_timeout: i64,
        /// Search only this topic (required with --partition).
        #[arg(long)]
        topic: Option<String>,
        /// Search only this partition of --topic.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
    },
    /// Abort a hanging transaction (requires administrative privileges).
    #[command(group(clap::ArgGroup::new("transaction").required(true).args(["start_offset", "producer_id"])))]
    Abort {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: i32,
        /// The first offset of the transaction to abort.
        #[arg(long = "start-offset", conflicts_with_all = ["producer_id", "producer_epoch", "coordinator_epoch"])]
        start_offset: Option<i64>,
        /// The transaction's producer id (brokers without DescribeProducers).
        #[arg(long = "producer-id", requires_all = ["producer_epoch", "coordinator_epoch"])]
        producer_id: Option<i64>,
        /// The transaction's producer epoch.
        #[arg(long = "producer-epoch")]
        producer_epoch: Option<i16>,
        /// The coordinator epoch of the producer's last marker (-1: none yet).
        #[arg(long = "coordinator-epoch", allow_hyphen_values = true)]
        coordinator_epoch: Option<i32>,
    },
}

pub fn run(args: TransactionsArgs) -> anyhow::Result<()> {
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        match args.command {
            TransactionsCommand::List { duration_filter, transactional_id_pattern } => {
                let filter = ListTransactionsFilter {
                    min_duration_ms: duration_filter,
                    transactional_id_pattern,
                    ..Default::default()
                };
                list(&admin, &filter).await
            }
            TransactionsCommand::Describe { transactional_id } => describe(&admin, &transactional_id).await,
            TransactionsCommand::DescribeProducers { broker_id, topic, partition } => {
                describe_producers(&admin, broker_id, &topic, partition).await
            }
            TransactionsCommand::FindHanging { broker_id, max_transaction_timeout, topic, partition } => {
                if topic.is_none() && broker_id.is_none() {
                    bail!("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search");
                }
                let scope = Scope { broker_id, topic, partition };
                find_hanging(&admin, &scope, max_transaction_timeout.saturating_mul(60_000)).await
            }
            TransactionsCommand::Abort {
                topic,
                partition,
                start_offset,
                producer_id,
                producer_epoch,
                coordinator_epoch,
            } => {
                let spec = match (start_offset, producer_id, producer_epoch, coordinator_epoch) {
                    (Some(offset), ..) => spec_at_offset(&admin, &topic, partition, offset).await?,
                    (None, Some(producer_id), Some(producer_epoch), Some(coordinator_epoch)) => {
                        AbortTransactionSpec {
                            topic,
                            partition,
                            producer_id,
                            producer_epoch,
                            // -1 (no marker yet) is below any leader epoch, as 0 is.
                            coordinator_epoch: coordinator_epoch.max(0),
                        }
                    }
                    _ => bail!("The transaction to abort must be identified either with --start-offset or with --producer-id, --producer-epoch and --coordinator-epoch"),
                };
                admin
                    .abort_transaction(&spec)
                    .await
                    .with_context(|| format!("Failed to abort transaction {spec:?}"))
            }
        }
    })
}

async fn list(admin: &Admin, filter: &ListTransactionsFilter) -> anyhow::Result<()> {
    let listed = admin.list_transactions(filter).await.context("Failed to list transactions")?;
    let rows = listed
        .iter()
        .map(|t| {
            vec![
                t.transactional_id.clone(),
                t.coordinator_id.to_string(),
                t.producer_id.to_string(),
                t.state.clone(),
            ]
        })
        .collect();
    print_table(&["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows);
    Ok(())
}

async fn describe(admin: &Admin, transactional_id: &str) -> anyhow::Result<()> {
    let failed = || format!("Failed to describe transaction state of transactional-id `{transactional_id}`");
    let described = admin.describe_transactions(&[transactional_id.to_owned()]).await.with_context(failed)?;
    let description = described.into_iter().next().context("no answer")?.result.with_context(failed)?;
    let (start, duration) = match description.start_time_ms {
        start if start < 0 => ("None".to_owned(), "None".to_owned()),
        start => (start.to_string(), (strom_storage::now_ms() - start).to_string()),
    };
    let partitions: Vec<String> = description.partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    let row = vec![
        description.coordinator_id.to_string(),
        transactional_id.to_owned(),
        description.producer_id.to_string(),
        description.producer_epoch.to_string(),
        description.state,
        description.timeout_ms.to_string(),
        start,
        duration,
        partitions.join(","),
    ];
    let headers = [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ];
    print_table(&headers, vec![row]);
    Ok(())
}

async fn describe_producers(
    admin: &Admin,
    broker_id: Option<i32>,
    topic: &str,
    partition: i32,
) -> anyhow::Result<()> {
    let on = broker_id.map_or("leader".to_owned(), |id| format!("broker {id}"));
    let failed = || format!("Failed to describe producers for partition {topic}-{partition} on {on}");
    let described =
        admin.describe_producers(&[(topic.to_owned(), partition)], broker_id).await.with_context(failed)?;
    let producers = described.into_iter().next().context("no answer")?.result.with_context(failed)?;
    let rows = producers
        .iter()
        .map(|p| {
            vec![
                p.producer_id.to_string(),
                p.producer_epoch.to_string(),
                p.coordinator_epoch.to_string(),
                p.last_sequence.to_string(),
                p.last_timestamp_ms.to_string(),
                p.current_txn_start_offset.map_or("None".to_owned(), |o| o.to_string()),
            ]
        })
        .collect();
    let headers = [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ];
    print_table(&headers, rows);
    Ok(())
}

/// Where `find-hanging` looks.
struct Scope {
    broker_id: Option<i32>,
    topic: Option<String>,
    partition: Option<i32>,
}

/// A transaction open in one partition, as its leader reports it.
struct OpenTxn {
    topic: String,
    partition: i32,
    producer: ProducerState,
}

async fn find_hanging(admin: &Admin, scope: &Scope, max_timeout_ms: i64) -> anyhow::Result<()> {
    let partitions = partitions_to_search(admin, scope).await?;
    let open = open_transactions(admin, scope.broker_id, &partitions, max_timeout_ms).await?;
    let hanging = if open.is_empty() { open } else { hanging_among(admin, open).await? };
    let now_ms = strom_storage::now_ms();
    let rows = hanging
        .iter()
        .map(|t| {
            vec![
                t.topic.clone(),
                t.partition.to_string(),
                t.producer.producer_id.to_string(),
                t.producer.producer_epoch.to_string(),
                t.producer.coordinator_epoch.to_string(),
                t.producer.current_txn_start_offset.unwrap_or(-1).to_string(),
                t.producer.last_timestamp_ms.to_string(),
                ((now_ms - t.producer.last_timestamp_ms) / 60_000).to_string(),
            ]
        })
        .collect();
    let headers = [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ];
    print_table(&headers, rows);
    Ok(())
}

/// The partitions in scope: the one named, a topic's, or every partition
/// (internal topics included) with a replica on the broker.
async fn partitions_to_search(admin: &Admin, scope: &Scope) -> anyhow::Result<Vec<(String, i32)>> {
    if let (Some(topic), Some(partition)) = (&scope.topic, scope.partition) {
        return Ok(vec![(topic.clone(), partition)]);
    }
    let topics = match &scope.topic {
        Some(topic) => vec![topic.clone()],
        None => admin.list_topics(true).await.context("Failed to list topics")?,
    };
    let mut partitions = Vec::new();
    for item in admin.describe_topics(&topics).await.context("Failed to describe topics")? {
        let topic = item.result.with_context(|| format!("Failed to describe topic {}", item.name))?;
        let on_broker = |replicas: &[i32]| scope.broker_id.is_none_or(|id| replicas.contains(&id));
        partitions.extend(
            topic
                .partitions
                .iter()
                .filter(|p| on_broker(&p.replicas))
                .map(|p| (topic.name.clone(), p.partition)),
        );
    }
    Ok(partitions)
}

/// Transactions open in `partitions` whose producer wrote nothing for longer
/// than `max_timeout_ms`: no coordinator would have let them run that long.
async fn open_transactions(
    admin: &Admin,
    broker_id: Option<i32>,
    partitions: &[(String, i32)],
    max_timeout_ms: i64,
) -> anyhow::Result<Vec<OpenTxn>> {
    let now_ms = strom_storage::now_ms();
    let mut open = Vec::new();
    for batch in partitions.chunks(FIND_HANGING_BATCH) {
        let described = admin
            .describe_producers(batch, broker_id)
            .await
            .with_context(|| format!("Failed to describe producers for {} partitions", batch.len()))?;
        for item in described {
            let producers = item.result.with_context(|| {
                format!("Failed to describe producers for {}-{}", item.topic, item.partition)
            })?;
            open.extend(
                producers
                    .into_iter()
                    .filter(|p| p.current_txn_start_offset.is_some())
                    .filter(|p| now_ms - p.last_timestamp_ms > max_timeout_ms)
                    .map(|producer| OpenTxn {
                        topic: item.topic.clone(),
                        partition: item.partition,
                        producer,
                    }),
            );
        }
    }
    Ok(open)
}

/// Kafka's rule: an open transaction hangs when no coordinator knows its
/// producer, or the producer's transactional id does not count the
/// partition in its transaction (nor among those awaiting markers).
async fn hanging_among(admin: &Admin, open: Vec<OpenTxn>) -> anyhow::Result<Vec<OpenTxn>> {
    let producer_ids: BTreeSet<i64> = open.iter().map(|t| t.producer.producer_id).collect();
    let filter =
        ListTransactionsFilter { producer_ids: producer_ids.into_iter().collect(), ..Default::default() };
    let listed = admin.list_transactions(&filter).await.context("Failed to list transactions")?;
    let ids: BTreeMap<i64, String> =
        listed.into_iter().map(|t| (t.producer_id, t.transactional_id)).collect();
    let names: Vec<String> = ids.values().cloned().collect::<BTreeSet<_>>().into_iter().collect();
    let mut in_transaction: BTreeMap<String, BTreeSet<(String, i32)>> = BTreeMap::new();
    for item in admin.describe_transactions(&names).await.context("Failed to describe transactions")? {
        match item.result {
            Ok(description) => {
                in_transaction.insert(item.name, description.partitions.into_iter().collect());
            }
            Err(e) if e.kafka_code().map(KafkaCode::code) == Some(TRANSACTIONAL_ID_NOT_FOUND) => {}
            Err(e) => return Err(e).context(format!("Failed to describe transaction {}", item.name)),
        }
    }
    Ok(open
        .into_iter()
        .filter(|t| {
            let partitions = ids.get(&t.producer.producer_id).and_then(|id| in_transaction.get(id));
            partitions.is_none_or(|p| !p.contains(&(t.topic.clone(), t.partition)))
        })
        .collect())
}

/// The abort of the transaction that starts at `start_offset`, from the
/// partition leader's producer state.
async fn spec_at_offset(
    admin: &Admin,
    topic: &str,
    partition: i32,
    start_offset: i64,
) -> anyhow::Result<AbortTransactionSpec> {
    let failed = || format!("Failed to validate producer state for partition {topic}-{partition}");
    let described =
        admin.describe_producers(&[(topic.to_owned(), partition)], None).await.with_context(failed)?;
    let producers = described.into_iter().next().context("no answer")?.result.with_context(failed)?;
    let Some(producer) = producers.iter().find(|p| p.current_txn_start_offset == Some(start_offset)) else {
        bail!("Could not find any open transactions starting at offset {start_offset} on partition {topic}-{partition}");
    };
    Ok(AbortTransactionSpec {
        topic: topic.to_owned(),
        partition,
        producer_id: producer.producer_id,
        producer_epoch: i16::try_from(producer.producer_epoch).context("producer epoch out of range")?,
        coordinator_epoch: producer.coordinator_epoch.max(0),
    })
}
