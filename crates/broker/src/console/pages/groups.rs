//! Consumer groups: the list with total lag, a group's page (members,
//! assignments, committed offsets and lag per partition, lag over the last
//! hour), resetting offsets with the rules of `strom groups
//! --reset-offsets`, and deleting a group.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Buf;
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;

use super::Page;
use crate::console::history::group_lag_series;
use crate::console::html::{self, escape, facts, form, hidden, input, link, select, table};
use crate::console::http::{percent_encode, Response};
use crate::console::kafka::{Kafka, Tp};
use crate::console::svg::line_chart;
use crate::server::Broker;

/// A member as the page shows it.
struct Member {
    id: String,
    client_id: String,
    host: String,
    assigned: Vec<Tp>,
}

/// A group as DescribeGroups (classic) or ConsumerGroupDescribe (KIP-848) tells it.
struct Group {
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<Member>,
}

/// (topic, partition) pairs of a classic consumer's assignment bytes.
fn decode_assignment(bytes: &[u8]) -> Vec<Tp> {
    let mut buf = bytes::Bytes::copy_from_slice(bytes);
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16().clamp(0, 3);
    let Ok(assignment) = ConsumerProtocolAssignment::decode(&mut buf, version) else { return Vec::new() };
    assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.to_string(), *p)))
        .collect()
}

fn describe(kafka: &Kafka<'_>, id: &str, group_type: &str) -> Option<Group> {
    if group_type == "consumer" {
        let group = kafka.describe_consumer_group(id).filter(|g| g.error_code == 0)?;
        let members = group
            .members
            .iter()
            .map(|m| Member {
                id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assigned: m
                    .assignment
                    .topic_partitions
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_name.0.to_string(), *p)))
                    .collect(),
            })
            .collect();
        return Some(Group {
            state: group.group_state.to_string(),
            protocol_type: "consumer".into(),
            protocol: group.assignor_name.to_string(),
            members,
        });
    }
    let group = kafka.describe_group(id).filter(|g| g.error_code == 0)?;
    let members = group
        .members
        .iter()
        .map(|m| Member {
            id: m.member_id.to_string(),
            client_id: m.client_id.to_string(),
            host: m.client_host.to_string(),
            assigned: if group.protocol_type.as_str() == "consumer" {
                decode_assignment(&m.member_assignment)
            } else {
                Vec::new()
            },
        })
        .collect();
    Some(Group {
        state: group.group_state.to_string(),
        protocol_type: group.protocol_type.to_string(),
        protocol: group.protocol_data.to_string(),
        members,
    })
}

/// One row of the offsets table, as `strom groups --describe` prints it.
struct OffsetRow {
    tp: Tp,
    current: Option<i64>,
    log_end: Option<i64>,
    member: Option<usize>,
}

impl OffsetRow {
    fn lag(&self) -> Option<i64> {
        self.current.zip(self.log_end).map(|(current, end)| end - current)
    }
}

/// Assigned partitions (members with most partitions first), then the
/// committed ones nobody consumes: the rows and order of `strom groups --describe`.
fn offset_rows(kafka: &Kafka<'_>, group: &Group, committed: &BTreeMap<Tp, i64>) -> Vec<OffsetRow> {
    let mut members: Vec<(usize, Vec<Tp>)> = group
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut partitions = m.assigned.clone();
            partitions.sort();
            (i, partitions)
        })
        .filter(|(_, partitions)| !partitions.is_empty())
        .collect();
    members.sort_by_key(|(_, partitions)| std::cmp::Reverse(partitions.len()));
    let mut assigned = BTreeSet::new();
    let mut rows = Vec::new();
    for (member, partitions) in members {
        for tp in partitions {
            assigned.insert(tp.clone());
            rows.push(OffsetRow {
                current: committed.get(&tp).copied(),
                tp,
                log_end: None,
                member: Some(member),
            });
        }
    }
    for (tp, offset) in committed {
        if !assigned.contains(tp) {
            rows.push(OffsetRow { tp: tp.clone(), current: Some(*offset), log_end: None, member: None });
        }
    }
    let partitions: Vec<Tp> = rows.iter().map(|r| r.tp.clone()).collect();
    let ends: HashMap<Tp, Option<i64>> = kafka.latest_offsets(&partitions).into_iter().collect();
    for row in &mut rows {
        row.log_end = ends.get(&row.tp).copied().flatten();
    }
    rows
}

fn committed(kafka: &Kafka<'_>, id: &str) -> BTreeMap<Tp, i64> {
    kafka.committed_offsets(id).unwrap_or_default().into_iter().collect()
}

/// Each group's total lag over its committed offsets, for the history.
pub fn total_lags(broker: &Broker) -> Vec<(String, i64)> {
    let kafka = Kafka { broker, client_host: "/console".into() };
    kafka
        .list_groups()
        .groups
        .iter()
        .map(|g| {
            let id = g.group_id.0.to_string();
            let committed: Vec<(Tp, i64)> = kafka.committed_offsets(&id).unwrap_or_default();
            let keys: Vec<Tp> = committed.iter().map(|(tp, _)| tp.clone()).collect();
            let ends: HashMap<Tp, Option<i64>> = kafka.latest_offsets(&keys).into_iter().collect();
            let lag = saturating_sum(
                committed
                    .iter()
                    .filter_map(|(tp, offset)| Some(ends.get(tp).copied()??.saturating_sub(*offset))),
            );
            (id, lag)
        })
        .collect()
}

/// A total lag: a client may commit any offset, even past the log end, so
/// the lags of a group can add up beyond an `i64`.
fn saturating_sum(lags: impl Iterator<Item = i64>) -> i64 {
    lags.fold(0, i64::saturating_add)
}

fn group_type(kafka: &Kafka<'_>, id: &str) -> Option<String> {
    kafka
        .list_groups()
        .groups
        .into_iter()
        .find(|g| g.group_id.0.as_str() == id)
        .map(|g| g.group_type.to_string())
}

pub fn list(page: &Page<'_>) -> Response {
    let mut groups = page.kafka.list_groups().groups;
    groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
    let lags: HashMap<String, i64> = total_lags(page.broker()).into_iter().collect();
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let id = g.group_id.0.as_str();
            vec![
                link("/group", &[("id", id)], id),
                escape(&g.group_type),
                escape(&g.group_state),
                escape(&g.protocol_type),
                lags.get(id).map_or("-".to_owned(), i64::to_string),
            ]
        })
        .collect();
    let table = table("groups", &["Group", "Type", "State", "Protocol type", "Total lag"], &rows);
    page.render("Consumer groups", "/groups", &table)
}

pub fn detail(page: &Page<'_>) -> Response {
    let id = page.request.param("id");
    let described = group_type(&page.kafka, id).and_then(|kind| describe(&page.kafka, id, &kind));
    let Some(group) = described else {
        return page.refused(404, "/groups", "/groups", &format!("GROUP_ID_NOT_FOUND: no group {id}"));
    };
    let committed = committed(&page.kafka, id);
    let rows = offset_rows(&page.kafka, &group, &committed);
    let total_lag = saturating_sum(rows.iter().filter_map(OffsetRow::lag));
    let summary = facts(
        "summary",
        &[
            ("State", escape(&group.state)),
            ("Protocol type", escape(&group.protocol_type)),
            ("Protocol", escape(&group.protocol)),
            ("Members", group.members.len().to_string()),
            ("Total lag", total_lag.to_string()),
        ],
    );
    let member_rows: Vec<Vec<String>> = group
        .members
        .iter()
        .map(|m| {
            let assigned: Vec<String> = m.assigned.iter().map(|(t, p)| format!("{t}-{p}")).collect();
            vec![escape(&m.id), escape(&m.client_id), escape(&m.host), escape(&assigned.join(", "))]
        })
        .collect();
    let members = table("members", &["Member", "Client id", "Host", "Assignment"], &member_rows);
    let missing = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let offset_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let member = r.member.map(|i| &group.members[i]);
            vec![
                link("/topic", &[("name", &r.tp.0)], &r.tp.0),
                r.tp.1.to_string(),
                missing(r.current),
                missing(r.log_end),
                missing(r.lag()),
                escape(member.map_or("-", |m| m.id.as_str())),
            ]
        })
        .collect();
    let offsets = table(
        "offsets",
        &["Topic", "Partition", "Current offset", "Log end offset", "Lag", "Consumer"],
        &offset_rows,
    );
    let plot = format!(
        r#"<div id="plots" class="plots" data-live>{}</div>"#,
        line_chart(
            "Total lag",
            "records",
            &[("lag", page.history.points(&group_lag_series(id)))],
            page.now_ms
        )
    );
    let body = format!(
        "{summary}<h2>Members</h2>{members}<h2>Offsets</h2>{offsets}<h2>Lag over the last hour</h2>{plot}{}",
        actions(page, id)
    );
    page.render(&format!("Group {id}"), "/groups", &body)
}

fn actions(page: &Page<'_>, id: &str) -> String {
    let scenarios = [
        ("earliest", "to earliest"),
        ("latest", "to latest"),
        ("current", "to current"),
        ("offset", "to offset"),
        ("shift-by", "shift by"),
        ("datetime", "to datetime (UTC)"),
    ];
    let reset_fields = format!(
        "{}{}{}{}<label><input type=\"checkbox\" name=\"execute\" value=\"true\"> execute (otherwise a dry run)</label>",
        hidden("id", id),
        input("Topics", "topics", "", r#"placeholder="all committed; or topic, topic:0,1 (space separated)""#),
        select("Reset", "scenario", &scenarios, "earliest"),
        input("Value", "value", "", r#"placeholder="offset, shift or time""#),
    );
    let reset = form("/group/reset", page.csrf, "inline", &reset_fields, "Reset offsets");
    let delete_fields =
        format!("{}{}", hidden("id", id), input("Type the group id to confirm", "confirm", "", "required"));
    let delete = form("/group/delete", page.csrf, "inline danger", &delete_fields, "Delete group");
    format!("<h2>Reset offsets</h2><p>Only an inactive (Empty) group can be reset, as with <code>strom groups --reset-offsets</code>.</p>{reset}<h2>Delete</h2>{delete}")
}

/// Where a reset moves each partition: `strom groups --reset-offsets`' scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Earliest,
    Latest,
    Current,
    Offset(i64),
    ShiftBy(i64),
    Time(i64),
}

impl Scenario {
    pub fn parse(name: &str, value: &str) -> Result<Self, String> {
        let number =
            |what: &str| value.trim().parse::<i64>().map_err(|_| format!("{what} {value:?} is not a number"));
        Ok(match name {
            "earliest" => Self::Earliest,
            "latest" => Self::Latest,
            "current" => Self::Current,
            "offset" => Self::Offset(number("offset")?),
            "shift-by" => Self::ShiftBy(number("shift")?),
            "datetime" => Self::Time(
                html::parse_time(value)
                    .ok_or_else(|| format!("time {value:?} is not YYYY-MM-DDTHH:MM:SS.sss"))?,
            ),
            other => return Err(format!("unknown reset scenario {other:?}")),
        })
    }
}

/// The partitions a reset names: `topic` (all its partitions) or
/// `topic:0,1`, each of which must exist, as `strom groups --topic` reads them.
fn named_partitions(kafka: &Kafka<'_>, spec: &str) -> Result<Vec<Tp>, String> {
    let metadata = kafka.metadata();
    let (mut out, mut missing) = (Vec::new(), Vec::new());
    for item in spec.split_whitespace() {
        let (topic, wanted) = topic_and_partitions(item)?;
        let Some(found) =
            metadata.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        else {
            return Err(format!("UNKNOWN_TOPIC_OR_PARTITION: no topic {topic}"));
        };
        let existing: BTreeSet<i32> = found.partitions.iter().map(|p| p.partition_index).collect();
        for partition in wanted.unwrap_or_else(|| existing.iter().copied().collect()) {
            if existing.contains(&partition) {
                out.push((topic.to_owned(), partition));
            } else {
                missing.push(format!("{topic}-{partition}"));
            }
        }
    }
    if !missing.is_empty() {
        return Err(format!("The partitions \"{}\" do not exist", missing.join(",")));
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `topic` or `topic:0,1` with non-negative partitions.
fn topic_and_partitions(item: &str) -> Result<(&str, Option<Vec<i32>>), String> {
    let Some((topic, partitions)) = item.split_once(':') else { return Ok((item, None)) };
    if topic.is_empty() || partitions.contains(':') {
        return Err(format!("Invalid topic arg '{item}', expected topic name and partitions"));
    }
    let partitions = partitions
        .split(',')
        .map(|p| p.trim().parse::<i32>().ok().filter(|p| *p >= 0))
        .collect::<Option<Vec<i32>>>()
        .ok_or_else(|| format!("Invalid partition specified in topic arg '{item}'"))?;
    Ok((topic, Some(partitions)))
}

/// The offset each partition moves to, within [log start, log end], as
/// `strom groups --reset-offsets` computes it.
pub fn target_offsets(
    kafka: &Kafka<'_>,
    scenario: Scenario,
    partitions: &[Tp],
    committed: &BTreeMap<Tp, i64>,
) -> Result<BTreeMap<Tp, i64>, String> {
    let lookup = |offsets: Vec<(Tp, Option<i64>)>, what: &str| -> Result<HashMap<Tp, i64>, String> {
        offsets
            .into_iter()
            .map(|(tp, offset)| match offset {
                Some(offset) => Ok((tp, offset)),
                None if what == "time-indexed" => Ok((tp, -1)),
                None => Err(format!("Error getting {what} offset of topic partition: {}-{}", tp.0, tp.1)),
            })
            .collect()
    };
    let starts = lookup(kafka.earliest_offsets(partitions), "starting")?;
    let ends = lookup(kafka.latest_offsets(partitions), "ending")?;
    let by_time = match scenario {
        Scenario::Time(ms) => lookup(kafka.list_offsets(partitions, ms), "time-indexed")?,
        _ => HashMap::new(),
    };
    let mut targets = BTreeMap::new();
    for tp in partitions {
        let (Some(start), Some(end)) = (starts.get(tp).copied(), ends.get(tp).copied()) else {
            return Err(format!("Error getting offsets of topic partition: {}-{}", tp.0, tp.1));
        };
        let within_log = |offset: i64| offset.min(end).max(start);
        let offset = match scenario {
            Scenario::Earliest => start,
            Scenario::Latest => end,
            Scenario::Current => committed.get(tp).copied().unwrap_or(end),
            Scenario::Offset(offset) => within_log(offset),
            Scenario::ShiftBy(shift) => {
                let current = committed.get(tp).ok_or_else(|| {
                    format!(
                        "Cannot shift offset for partition {}-{} since there is no current committed offset",
                        tp.0, tp.1
                    )
                })?;
                within_log(current.saturating_add(shift))
            }
            Scenario::Time(_) => match by_time.get(tp).copied() {
                Some(found) if found >= 0 => found,
                _ => end,
            },
        };
        targets.insert(tp.clone(), offset);
    }
    Ok(targets)
}

fn back_to(id: &str) -> String {
    format!("/group?id={}", percent_encode(id))
}

pub fn reset(page: &Page<'_>) -> Response {
    let form = page.form();
    let field = |name: &str| form.get(name).map_or("", String::as_str);
    let id = field("id");
    let back = back_to(id);
    let refuse = |reason: &str| page.refused(422, "/groups", &back, reason);
    let Some(group) = group_type(&page.kafka, id).and_then(|kind| describe(&page.kafka, id, &kind)) else {
        return refuse(&format!("GROUP_ID_NOT_FOUND: no group {id}"));
    };
    if !matches!(group.state.as_str(), "Empty" | "Dead") {
        return refuse(&format!(
            "Assignments can only be reset if the group '{id}' is inactive, but the current state is {}.",
            group.state
        ));
    }
    let scenario = match Scenario::parse(field("scenario"), field("value")) {
        Ok(scenario) => scenario,
        Err(error) => return refuse(&error),
    };
    let committed = committed(&page.kafka, id);
    let partitions = match field("topics").trim() {
        "" => committed.keys().cloned().collect(),
        spec => match named_partitions(&page.kafka, spec) {
            Ok(partitions) => partitions,
            Err(error) => return refuse(&error),
        },
    };
    let targets = match target_offsets(&page.kafka, scenario, &partitions, &committed) {
        Ok(targets) => targets,
        Err(error) => return refuse(&error),
    };
    let plan: Vec<(Tp, i64)> = targets.into_iter().collect();
    if field("execute") != "true" {
        let rows: Vec<Vec<String>> = plan
            .iter()
            .map(|((t, p), o)| vec![escape(id), escape(t), p.to_string(), o.to_string()])
            .collect();
        let table = table("plan", &["Group", "Topic", "Partition", "New offset"], &rows);
        let body = format!(
            "<p>Dry run: nothing was committed. Tick <em>execute</em> to commit this plan.</p>{table}<p>{}</p>",
            link("/group", &[("id", id)], "Back to the group")
        );
        return page.render(&format!("Reset plan for {id}"), "/groups", &body);
    }
    let failures = page.kafka.commit_offsets(id, &plan);
    if !failures.is_empty() {
        return refuse(&format!("cannot commit offsets of {id}: {}", failures.join(", ")));
    }
    Response::see_other(format!(
        "{back}&notice={}",
        percent_encode(&format!("reset {} partitions", plan.len()))
    ))
}

pub fn delete(page: &Page<'_>) -> Response {
    let form = page.form();
    let id = form.get("id").map_or("", String::as_str);
    if form.get("confirm").map(String::as_str) != Some(id) {
        return page.refused(422, "/groups", &back_to(id), "type the group's id to confirm its deletion");
    }
    match page.kafka.delete_group(id) {
        None => {
            Response::see_other(format!("/groups?notice={}", percent_encode(&format!("deleted group {id}"))))
        }
        Some(error) => page.refused(422, "/groups", &back_to(id), &error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_scenarios_parse_like_the_cli_options() {
        assert_eq!(Scenario::parse("earliest", ""), Ok(Scenario::Earliest));
        assert_eq!(Scenario::parse("shift-by", "-5"), Ok(Scenario::ShiftBy(-5)));
        assert_eq!(Scenario::parse("offset", " 7 "), Ok(Scenario::Offset(7)));
        assert_eq!(Scenario::parse("datetime", "1970-01-01T00:00:01.000"), Ok(Scenario::Time(1000)));
        assert!(Scenario::parse("offset", "x").is_err());
        assert!(Scenario::parse("sideways", "").is_err());
    }

    #[test]
    fn reset_topics_read_like_the_cli_topic_option() {
        assert_eq!(topic_and_partitions("t"), Ok(("t", None)));
        assert_eq!(topic_and_partitions("t:0, 2"), Ok(("t", Some(vec![0, 2]))));
        for bad in [":0", "t:0:1", "t:-1", "t:x", "t:"] {
            assert!(topic_and_partitions(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_classic_assignment_decodes_to_its_partitions() {
        use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
        use kafka_protocol::protocol::Encodable;
        let assignment =
            ConsumerProtocolAssignment::default().with_assigned_partitions(vec![TopicPartition::default()
                .with_topic(crate::handlers::topic_name("t"))
                .with_partitions(vec![0, 2])]);
        let mut buf = bytes::BytesMut::new();
        bytes::BufMut::put_i16(&mut buf, 1);
        assignment.encode(&mut buf, 1).unwrap();
        assert_eq!(decode_assignment(&buf), vec![("t".to_owned(), 0), ("t".to_owned(), 2)]);
        assert!(decode_assignment(&[0]).is_empty());
    }
}
