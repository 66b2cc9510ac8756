//! The broker: its configs and where each value comes from, its log dirs
//! and their usage, and the transactions and producers that `strom
//! transactions` lists.

use super::topics::source_name;
use super::Page;
use crate::console::html::{self, escape, table};
use crate::console::http::Response;
use crate::console::kafka::BROKER_RESOURCE;

/// The most partitions whose producers one page lists.
const MAX_PRODUCER_PARTITIONS: usize = 1000;

pub fn page(page: &Page<'_>) -> Response {
    let body = format!(
        "<h2>Log dirs</h2>{}<h2>Transactions</h2>{}<h2>Producers</h2>{}<h2>Configs</h2>{}",
        log_dirs(page),
        transactions(page),
        producers(page),
        configs(page)
    );
    page.render(&format!("Broker {}", page.broker().config().node_id), "/broker", &body)
}

fn configs(page: &Page<'_>) -> String {
    let node = page.broker().config().node_id.to_string();
    let response = page.kafka.describe_configs(BROKER_RESOURCE, &[node]);
    let rows: Vec<Vec<String>> = response
        .results
        .iter()
        .flat_map(|r| &r.configs)
        .map(|c| {
            let value = if c.is_sensitive {
                "(sensitive)".to_owned()
            } else {
                c.value.as_deref().unwrap_or("null").to_owned()
            };
            let sources: Vec<String> =
                c.synonyms.iter().map(|s| format!("{}={}", source_name(s.source), s.name)).collect();
            vec![
                escape(&c.name),
                escape(&value),
                source_name(c.config_source).to_owned(),
                escape(&sources.join(", ")),
            ]
        })
        .collect();
    table("configs", &["Config", "Value", "Source", "Synonyms"], &rows)
}

fn log_dirs(page: &Page<'_>) -> String {
    let rows: Vec<Vec<String>> = page
        .kafka
        .describe_log_dirs()
        .results
        .iter()
        .map(|dir| {
            let used: i64 = dir.topics.iter().flat_map(|t| &t.partitions).map(|p| p.partition_size).sum();
            let partitions: usize = dir.topics.iter().map(|t| t.partitions.len()).sum();
            let size = |bytes: i64| if bytes < 0 { "-".to_owned() } else { html::bytes(bytes) };
            vec![
                escape(&dir.log_dir),
                crate::console::kafka::error_name(dir.error_code),
                partitions.to_string(),
                html::bytes(used),
                size(dir.usable_bytes),
                size(dir.total_bytes),
            ]
        })
        .collect();
    table("log-dirs", &["Log dir", "Error", "Partitions", "Used by partitions", "Usable", "Total"], &rows)
}

fn transactions(page: &Page<'_>) -> String {
    let listed = page.kafka.list_transactions();
    let ids: Vec<String> =
        listed.transaction_states.iter().map(|t| t.transactional_id.0.to_string()).collect();
    let described = page.kafka.describe_transactions(&ids);
    let rows: Vec<Vec<String>> = described
        .transaction_states
        .iter()
        .map(|t| {
            let partitions: Vec<String> = t
                .topics
                .iter()
                .flat_map(|topic| topic.partitions.iter().map(move |p| format!("{}-{p}", topic.topic.0)))
                .collect();
            vec![
                escape(&t.transactional_id.0),
                t.producer_id.0.to_string(),
                t.producer_epoch.to_string(),
                escape(&t.transaction_state),
                t.transaction_timeout_ms.to_string(),
                html::timestamp(t.transaction_start_time_ms),
                escape(&partitions.join(", ")),
            ]
        })
        .collect();
    table(
        "transactions",
        &["Transactional id", "Producer id", "Epoch", "State", "Timeout ms", "Started", "Partitions"],
        &rows,
    )
}

fn producers(page: &Page<'_>) -> String {
    let mut partitions: Vec<(String, i32)> = page
        .kafka
        .metadata()
        .topics
        .iter()
        .flat_map(|t| {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            t.partitions.iter().map(move |p| (name.clone(), p.partition_index))
        })
        .collect();
    partitions.sort();
    let truncated = partitions.len() > MAX_PRODUCER_PARTITIONS;
    partitions.truncate(MAX_PRODUCER_PARTITIONS);
    let response = page.kafka.describe_producers(&partitions);
    let rows: Vec<Vec<String>> = response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .flat_map(|(t, p)| p.active_producers.iter().map(move |producer| (t, p, producer)))
        .map(|(t, p, producer)| {
            let txn_start = if producer.current_txn_start_offset < 0 {
                "None".to_owned()
            } else {
                producer.current_txn_start_offset.to_string()
            };
            vec![
                escape(&t.name.0),
                p.partition_index.to_string(),
                producer.producer_id.0.to_string(),
                producer.producer_epoch.to_string(),
                producer.last_sequence.to_string(),
                html::timestamp(producer.last_timestamp),
                txn_start,
            ]
        })
        .collect();
    let note = if truncated {
        format!("<p>Producers of the first {MAX_PRODUCER_PARTITIONS} partitions only.</p>")
    } else {
        String::new()
    };
    note + &table(
        "producers",
        &[
            "Topic",
            "Partition",
            "Producer id",
            "Epoch",
            "Last sequence",
            "Last timestamp",
            "Current transaction start offset",
        ],
        &rows,
    )
}
