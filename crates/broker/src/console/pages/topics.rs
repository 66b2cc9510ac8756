//! Topics: the list (create one), and a topic's page (partitions, configs,
//! throughput; add partitions, edit configs, delete).

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::DescribeConfigsResponse;

use super::Page;
use crate::console::history::topic_series;
use crate::console::html::{self, escape, facts, form, hidden, input, link, select, table};
use crate::console::http::percent_encode;
use crate::console::http::Response;
use crate::console::kafka::TOPIC_RESOURCE;
use crate::console::svg::{self, line_chart};

/// Kafka's `ConfigSource` names.
pub fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

fn topic_name(topic: &MetadataResponseTopic) -> String {
    topic.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default()
}

/// Bytes on disk per (topic, partition), summed over log dirs.
fn sizes(page: &Page<'_>) -> HashMap<(String, i32), i64> {
    let mut sizes = HashMap::new();
    for dir in page.kafka.describe_log_dirs().results {
        for topic in dir.topics {
            for p in topic.partitions {
                *sizes.entry((topic.name.0.to_string(), p.partition_index)).or_default() += p.partition_size;
            }
        }
    }
    sizes
}

/// Each resource's configs by name: (value, source).
fn configs_by_resource(response: DescribeConfigsResponse) -> HashMap<String, BTreeMap<String, (String, i8)>> {
    response
        .results
        .into_iter()
        .map(|r| {
            let configs = r
                .configs
                .into_iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        (c.value.map(|v| v.to_string()).unwrap_or_default(), c.config_source),
                    )
                })
                .collect();
            (r.resource_name.to_string(), configs)
        })
        .collect()
}

fn rate(page: &Page<'_>, topic: &str, what: &str) -> String {
    page.history.latest(&topic_series(topic, what)).map_or("-".to_owned(), svg::human)
}

pub fn list(page: &Page<'_>) -> Response {
    let mut topics = page.kafka.metadata().topics;
    topics.sort_by_key(topic_name);
    let mut topic_sizes: HashMap<String, i64> = HashMap::new();
    for ((topic, _), size) in sizes(page) {
        *topic_sizes.entry(topic).or_default() += size;
    }
    let names: Vec<String> = topics.iter().map(topic_name).collect();
    let configs = configs_by_resource(page.kafka.describe_configs(TOPIC_RESOURCE, &names));
    let rows: Vec<Vec<String>> = topics
        .iter()
        .map(|topic| {
            let name = topic_name(topic);
            let size = topic_sizes.get(&name).copied().unwrap_or(0);
            let config = |key: &str| {
                configs.get(&name).and_then(|c| c.get(key)).map_or("-".to_owned(), |(v, _)| escape(v))
            };
            let replication = topic.partitions.first().map_or(0, |p| p.replica_nodes.len());
            let internal = if topic.is_internal { r#" <span class="tag">internal</span>"# } else { "" };
            vec![
                format!("{}{internal}", link("/topic", &[("name", &name)], &name)),
                topic.partitions.len().to_string(),
                replication.to_string(),
                html::bytes(size),
                config("retention.ms"),
                config("cleanup.policy"),
                rate(page, &name, "messages_in"),
            ]
        })
        .collect();
    let table = table(
        "topics",
        &["Topic", "Partitions", "Replication", "Size", "retention.ms", "cleanup.policy", "Messages in /s"],
        &rows,
    );
    let fields = format!(
        "{}{}{}<label>Configs <textarea name=\"configs\" rows=\"2\" placeholder=\"retention.ms=86400000\"></textarea></label>",
        input("Name", "name", "", r#"required maxlength="249" pattern="[a-zA-Z0-9._\-]+""#),
        input("Partitions", "partitions", "", r#"type="number" min="1" placeholder="num.partitions""#),
        input("Replication factor", "replication", "", r#"type="number" min="1" placeholder="default""#),
    );
    let create = form("/topics/create", page.csrf, "inline", &fields, "Create topic");
    page.render("Topics", "/topics", &format!("{table}<h2>Create a topic</h2>{create}"))
}

/// `key=value` lines into pairs (a value may hold commas: `[compact,delete]`).
fn parse_configs(text: &str) -> Result<Vec<(String, String)>, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_owned(), value.trim().to_owned()))
            }
            _ => Err(format!("config {line:?} is not key=value")),
        })
        .collect()
}

/// An optional number field: empty means the broker's default (-1).
fn number_or_default<T: std::str::FromStr + From<i8>>(text: &str, what: &str) -> Result<T, String> {
    match text.trim() {
        "" => Ok(T::from(-1)),
        raw => raw.parse().map_err(|_| format!("{what} {raw:?} is not a number")),
    }
}

pub fn create(page: &Page<'_>) -> Response {
    let form = page.form();
    let field = |name: &str| form.get(name).map_or("", String::as_str);
    let name = field("name").trim();
    let parsed = (|| {
        let partitions: i32 = number_or_default(field("partitions"), "partitions")?;
        let replication: i16 = number_or_default(field("replication"), "replication factor")?;
        let configs = parse_configs(field("configs"))?;
        Ok::<_, String>((partitions, replication, configs))
    })();
    let outcome = parsed.and_then(|(partitions, replication, configs)| {
        match page.kafka.create_topic(name, partitions, replication, &configs) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    });
    match outcome {
        Ok(()) => redirect_to_topic(name, &format!("created topic {name}")),
        Err(error) => page.refused(422, "/topics", "/topics", &error),
    }
}

fn find_topic(page: &Page<'_>, name: &str) -> Option<MetadataResponseTopic> {
    page.kafka.metadata().topics.into_iter().find(|t| topic_name(t) == name)
}

pub fn detail(page: &Page<'_>) -> Response {
    let name = page.request.param("name");
    let Some(topic) = find_topic(page, name) else {
        return page.refused(
            404,
            "/topics",
            "/topics",
            &format!("UNKNOWN_TOPIC_OR_PARTITION: no topic {name}"),
        );
    };
    let keys: Vec<(String, i32)> =
        topic.partitions.iter().map(|p| (name.to_owned(), p.partition_index)).collect();
    let starts: HashMap<_, _> = page.kafka.earliest_offsets(&keys).into_iter().collect();
    let ends: HashMap<_, _> = page.kafka.latest_offsets(&keys).into_iter().collect();
    let sizes = sizes(page);
    let mut partitions = topic.partitions.clone();
    partitions.sort_by_key(|p| p.partition_index);
    let ids = |ids: &[kafka_protocol::messages::BrokerId]| {
        ids.iter().map(|id| id.0.to_string()).collect::<Vec<_>>().join(",")
    };
    let offset =
        |found: Option<&Option<i64>>| found.copied().flatten().map_or("-".to_owned(), |o| o.to_string());
    let rows: Vec<Vec<String>> = partitions
        .iter()
        .map(|p| {
            let key = (name.to_owned(), p.partition_index);
            let index = p.partition_index.to_string();
            vec![
                link("/messages", &[("topic", name), ("partition", &index)], &index),
                p.leader_id.0.to_string(),
                ids(&p.replica_nodes),
                ids(&p.isr_nodes),
                offset(starts.get(&key)),
                offset(ends.get(&key)),
                html::bytes(sizes.get(&key).copied().unwrap_or(0)),
            ]
        })
        .collect();
    let partition_table = table(
        "partitions",
        &["Partition", "Leader", "Replicas", "In-sync", "Log start", "High watermark", "Size"],
        &rows,
    );
    let configs = configs_by_resource(page.kafka.describe_configs(TOPIC_RESOURCE, &[name.to_owned()]));
    let config_rows: Vec<Vec<String>> = configs
        .get(name)
        .into_iter()
        .flatten()
        .map(|(key, (value, source))| vec![escape(key), escape(value), source_name(*source).to_owned()])
        .collect();
    let config_table = table("configs", &["Config", "Value", "Source"], &config_rows);
    let summary = facts(
        "summary",
        &[
            ("Topic id", topic.topic_id.to_string()),
            ("Partitions", partitions.len().to_string()),
            ("Internal", topic.is_internal.to_string()),
            ("Bytes in /s", rate(page, name, "bytes_in")),
            ("Bytes out /s", rate(page, name, "bytes_out")),
            ("Messages in /s", rate(page, name, "messages_in")),
        ],
    );
    let series = |what: &str| page.history.points(&topic_series(name, what));
    let plots = format!(
        r#"<div id="plots" class="plots" data-live>{}{}</div>"#,
        line_chart(
            "Throughput",
            "B/s",
            &[("in", series("bytes_in")), ("out", series("bytes_out"))],
            page.now_ms
        ),
        line_chart("Messages in", "/s", &[("messages", series("messages_in"))], page.now_ms),
    );
    let actions = actions(page, name, &topic, partitions.len());
    let browse = link("/messages", &[("topic", name)], "Browse messages");
    let body = format!(
        "<p>{browse}</p>{summary}<h2>Partitions</h2>{partition_table}<h2>Last hour</h2>{plots}<h2>Configs</h2>{config_table}{actions}"
    );
    page.render(&format!("Topic {name}"), "/topics", &body)
}

fn actions(page: &Page<'_>, name: &str, topic: &MetadataResponseTopic, count: usize) -> String {
    let config_fields = format!(
        "{}{}{}{}",
        hidden("name", name),
        input("Config", "key", "", "required"),
        input("Value", "value", "", ""),
        select("Operation", "op", &[("set", "set"), ("delete", "delete (back to default)")], "set"),
    );
    let mut out = format!(
        "<h2>Edit configs</h2>{}",
        form("/topic/config", page.csrf, "inline", &config_fields, "Apply")
    );
    let partition_fields = format!(
        "{}{}",
        hidden("name", name),
        input("New partition count", "count", &(count + 1).to_string(), r#"type="number" required"#)
    );
    out.push_str(&format!(
        "<h2>Add partitions</h2>{}",
        form("/topic/partitions", page.csrf, "inline", &partition_fields, "Add partitions")
    ));
    if topic.is_internal {
        out.push_str("<p>Internal topics cannot be deleted from the console.</p>");
    } else {
        let fields = format!(
            "{}{}",
            hidden("name", name),
            input("Type the topic name to confirm", "confirm", "", "required")
        );
        out.push_str(&format!(
            "<h2>Delete</h2>{}",
            form("/topic/delete", page.csrf, "inline danger", &fields, "Delete topic")
        ));
    }
    out
}

fn redirect_to_topic(name: &str, notice: &str) -> Response {
    Response::see_other(format!("/topic?name={}&notice={}", percent_encode(name), percent_encode(notice)))
}

pub fn delete(page: &Page<'_>) -> Response {
    let form = page.form();
    let name = form.get("name").map_or("", String::as_str);
    let back = format!("/topic?name={}", percent_encode(name));
    if form.get("confirm").map(String::as_str) != Some(name) {
        return page.refused(422, "/topics", &back, "type the topic's name to confirm its deletion");
    }
    match find_topic(page, name) {
        Some(topic) if topic.is_internal => {
            return page.refused(
                422,
                "/topics",
                &back,
                &format!("{name} is an internal topic; the console does not delete it"),
            )
        }
        _ => {}
    }
    match page.kafka.delete_topic(name) {
        None => Response::see_other(format!(
            "/topics?notice={}",
            percent_encode(&format!("deleted topic {name}"))
        )),
        Some(error) => page.refused(422, "/topics", &back, &error),
    }
}

pub fn add_partitions(page: &Page<'_>) -> Response {
    let form = page.form();
    let name = form.get("name").map_or("", String::as_str);
    let back = format!("/topic?name={}", percent_encode(name));
    let Some(count) = form.get("count").and_then(|c| c.trim().parse::<i32>().ok()) else {
        return page.refused(422, "/topics", &back, "the partition count must be a number");
    };
    match page.kafka.create_partitions(name, count) {
        None => redirect_to_topic(name, &format!("{name} now has {count} partitions")),
        Some(error) => page.refused(422, "/topics", &back, &error),
    }
}

pub fn alter_config(page: &Page<'_>) -> Response {
    let form = page.form();
    let field = |key: &str| form.get(key).map_or("", |v| v.trim());
    let (name, key) = (field("name"), field("key"));
    let back = format!("/topic?name={}", percent_encode(name));
    let value = (field("op") != "delete").then(|| field("value"));
    match page.kafka.alter_config(TOPIC_RESOURCE, name, key, value) {
        None => redirect_to_topic(name, &format!("{key} updated")),
        Some(error) => page.refused(422, "/topics", &back, &error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_key_value_lines() {
        assert_eq!(
            parse_configs("retention.ms=1000\r\n cleanup.policy = compact,delete \n\n").unwrap(),
            vec![
                ("retention.ms".to_owned(), "1000".to_owned()),
                ("cleanup.policy".to_owned(), "compact,delete".to_owned()),
            ]
        );
        assert!(parse_configs("retention.ms").is_err());
        assert!(parse_configs("=1").is_err());
        assert_eq!(number_or_default::<i32>(" ", "partitions"), Ok(-1));
        assert!(number_or_default::<i16>("x", "replication").is_err());
    }
}
