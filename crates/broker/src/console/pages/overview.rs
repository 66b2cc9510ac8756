//! The overview: the cluster, its brokers and controller, partition health
//! and throughput.

use std::sync::atomic::Ordering;

use super::Page;
use crate::console::history::{BYTES_IN, BYTES_OUT, CONNECTIONS, MESSAGES_IN};
use crate::console::html::{self, escape, facts, table};
use crate::console::http::Response;
use crate::console::svg::{self, line_chart};

/// Partition health from a Metadata answer: (topics, partitions,
/// under-replicated, offline).
pub fn partition_health(
    metadata: &kafka_protocol::messages::MetadataResponse,
) -> (usize, usize, usize, usize) {
    let partitions = metadata.topics.iter().flat_map(|t| &t.partitions);
    let (mut total, mut under, mut offline) = (0, 0, 0);
    for p in partitions {
        total += 1;
        under += usize::from(p.isr_nodes.len() < p.replica_nodes.len());
        offline += usize::from(p.leader_id.0 < 0);
    }
    (metadata.topics.len(), total, under, offline)
}

pub fn page(page: &Page<'_>) -> Response {
    let cluster = page.kafka.describe_cluster();
    let quorum = page.kafka.describe_quorum();
    let metadata = page.kafka.metadata();
    let (topics, partitions, under, offline) = partition_health(&metadata);
    let rate = |series: &str| page.history.latest(series).map_or("-".to_owned(), svg::human);
    let connections = page.broker().metrics().connections.load(Ordering::Relaxed);
    let summary = facts(
        "summary",
        &[
            ("Cluster id", escape(&cluster.cluster_id)),
            ("Active controller", cluster.controller_id.0.to_string()),
            ("Brokers", cluster.brokers.len().to_string()),
            ("Topics", topics.to_string()),
            ("Partitions", partitions.to_string()),
            ("Under-replicated partitions", under.to_string()),
            ("Offline partitions", offline.to_string()),
            ("Bytes in /s", rate(BYTES_IN)),
            ("Bytes out /s", rate(BYTES_OUT)),
            ("Messages in /s", rate(MESSAGES_IN)),
            ("Live connections", connections.to_string()),
        ],
    );
    let brokers: Vec<Vec<String>> = cluster
        .brokers
        .iter()
        .map(|b| {
            let role =
                if b.broker_id == cluster.controller_id { "broker, active controller" } else { "broker" };
            vec![
                b.broker_id.0.to_string(),
                escape(&format!("{}:{}", b.host, b.port)),
                escape(b.rack.as_deref().unwrap_or("-")),
                (if b.is_fenced { "fenced" } else { "running" }).to_owned(),
                role.to_owned(),
            ]
        })
        .collect();
    let brokers = table("brokers", &["Id", "Endpoint", "Rack", "State", "Role"], &brokers);
    let quorum_rows: Vec<Vec<String>> = quorum
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| {
            let voters = p.current_voters.iter().map(move |v| (p, v, "voter"));
            voters.chain(p.observers.iter().map(move |o| (p, o, "observer")))
        })
        .map(|(p, replica, kind)| {
            let role =
                if replica.replica_id == p.leader_id { format!("{kind}, leader") } else { kind.to_owned() };
            vec![
                replica.replica_id.0.to_string(),
                role,
                p.leader_epoch.to_string(),
                replica.log_end_offset.to_string(),
                p.high_watermark.to_string(),
                html::timestamp(replica.last_caught_up_timestamp),
            ]
        })
        .collect();
    let quorum_table = table(
        "quorum",
        &["Node", "Role", "Leader epoch", "Log end offset", "High watermark", "Caught up at"],
        &quorum_rows,
    );
    let plots = format!(
        r#"<div id="plots" class="plots" data-live>{}{}{}</div>"#,
        line_chart(
            "Throughput",
            "B/s",
            &[("in", page.history.points(BYTES_IN)), ("out", page.history.points(BYTES_OUT))],
            page.now_ms
        ),
        line_chart("Messages in", "/s", &[("messages", page.history.points(MESSAGES_IN))], page.now_ms),
        line_chart("Connections", "", &[("open", page.history.points(CONNECTIONS))], page.now_ms),
    );
    let body = format!(
        "{summary}<h2>Brokers</h2>{brokers}<h2>Metadata quorum</h2>{quorum_table}<h2>Last hour</h2>{plots}"
    );
    page.render("Overview", "/", &body)
}
