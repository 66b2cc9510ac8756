//! `strom groups`: list, describe and delete consumer groups, and reset or
//! delete their committed offsets, like `kafka-consumer-groups.sh`.
//!
//! Describe joins three answers: the group (DescribeGroups, whose members'
//! assignments say who consumes which partition), its committed offsets
//! (OffsetFetch) and each partition's log end (ListOffsets). A reset plans
//! new offsets from the log's bounds, the committed offsets or a time,
//! clamped into the log as Kafka clamps them, and commits them only with
//! `--execute`, as an admin (no generation, no member), which the
//! coordinator accepts only while the group has no members.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use strom_client::admin::{GroupDescription, ListedGroup, MemberDescription, OffsetSpec};
use strom_client::{Admin, ClientConfig, Error};

use crate::client_args::{column_width, pad, print_json, runtime, ConnectArgs, Format};
use crate::specs::{datetime_ms, duration_ms, local_offset_s, topic_and_partitions};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("action").required(true)
    .args(["list", "describe", "delete", "reset_offsets", "delete_offsets"])))]
#[command(group(clap::ArgGroup::new("scenario")
    .args(["to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by", "by_duration"])))]
pub struct GroupsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// List the consumer groups.
    #[arg(long)]
    list: bool,
    /// Describe groups: their partitions' offsets and lag (default), members or state.
    #[arg(long)]
    describe: bool,
    /// Delete groups (only groups without active members).
    #[arg(long)]
    delete: bool,
    /// Plan new committed offsets for groups without active members; commit them with --execute.
    #[arg(long = "reset-offsets")]
    reset_offsets: bool,
    /// Delete a group's committed offsets of the --topic partitions.
    #[arg(long = "delete-offsets")]
    delete_offsets: bool,
    /// A group to act on; repeatable.
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Act on every consumer group.
    #[arg(long = "all-groups", conflicts_with = "groups")]
    all_groups: bool,
    /// Describe: the members and how many partitions each has.
    #[arg(long, conflicts_with = "offsets")]
    members: bool,
    /// Describe: each partition's offsets and lag (the default).
    #[arg(long)]
    offsets: bool,
    /// Describe --members: also each member's assignment; --state: also the epochs.
    #[arg(long)]
    verbose: bool,
    /// List: show each group's state, or only groups in these states
    /// (`Stable,Empty`); describe: the group's coordinator, assignor and state.
    #[arg(long, num_args = 0..=1, value_name = "STATES", conflicts_with_all = ["members", "offsets"])]
    state: Option<Option<String>>,
    /// Reset and delete offsets: a topic, or `topic:0,1` for some partitions; repeatable.
    #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]")]
    topics: Vec<String>,
    /// Reset: every topic the group has committed offsets for.
    #[arg(long = "all-topics", conflicts_with = "topics")]
    all_topics: bool,
    /// Reset to the log start offset.
    #[arg(long = "to-earliest")]
    to_earliest: bool,
    /// Reset to the log end offset.
    #[arg(long = "to-latest")]
    to_latest: bool,
    /// Reset to the committed offset (the log end where none is committed).
    #[arg(long = "to-current")]
    to_current: bool,
    /// Reset to this offset, kept within the log.
    #[arg(long = "to-offset", value_name = "OFFSET", allow_hyphen_values = true)]
    to_offset: Option<i64>,
    /// Reset to the first offset at or after this time: `YYYY-MM-DDTHH:mm:SS.sss`,
    /// with `Z` or `+hh:mm` for a zone (local time without).
    #[arg(long = "to-datetime", value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// Reset by moving the committed offset by N (negative: back), kept within the log.
    #[arg(long = "shift-by", value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// Reset to the first offset at or after now minus this ISO-8601 duration (`PT1H`, `P1DT2H`).
    #[arg(long = "by-duration", value_name = "DURATION")]
    by_duration: Option<String>,
    /// Reset: only print the plan (the default).
    #[arg(long = "dry-run", conflicts_with = "execute")]
    dry_run: bool,
    /// Reset: commit the plan.
    #[arg(long)]
    execute: bool,
    /// Output: Kafka's text or JSON.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Where a reset moves each partition's committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Earliest,
    Latest,
    Current,
    Offset(i64),
    ShiftBy(i64),
    /// The first offset at or after this time (ms).
    Time(i64),
}

const GROUP_ID_NOT_FOUND: i16 = 69;
const CONSUMER_GROUP_STATES: &[&str] =
    &["PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling"];
const MISSING: &str = "-";

pub fn run(args: GroupsArgs) -> anyhow::Result<()> {
    let scenario = check_args(&args)?;
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        match () {
            _ if args.list => list(&admin, &args).await,
            _ if args.describe => describe(&admin, &args).await,
            _ if args.delete => delete(&admin, &args).await,
            _ if args.reset_offsets => reset_offsets(&admin, &args, scenario).await,
            _ => delete_offsets(&admin, &args).await,
        }
    })
}

/// Kafka's option rules that clap's attributes cannot say; the reset
/// scenario when resetting.
fn check_args(args: &GroupsArgs) -> anyhow::Result<Option<Scenario>> {
    let has_groups = !args.groups.is_empty() || args.all_groups;
    if (args.describe || args.delete || args.reset_offsets) && !has_groups {
        bail!("this action needs --group or --all-groups");
    }
    if (args.members || args.offsets || args.verbose) && !args.describe {
        bail!("--members, --offsets and --verbose go with --describe");
    }
    if matches!(args.state, Some(Some(_))) && !args.list {
        bail!("--state takes a list of states only with --list");
    }
    if args.state.is_some() && !(args.list || args.describe) {
        bail!("--state goes with --list or --describe");
    }
    let takes_topics = args.reset_offsets || args.delete_offsets;
    if !args.topics.is_empty() && !takes_topics {
        bail!("--topic goes with --reset-offsets or --delete-offsets");
    }
    if args.delete_offsets && (args.groups.len() != 1 || args.topics.is_empty()) {
        bail!("--delete-offsets takes one --group and at least one --topic");
    }
    let resetting_flags = args.all_topics || args.dry_run || args.execute || scenario_given(args);
    if resetting_flags && !args.reset_offsets {
        bail!("--all-topics, --dry-run, --execute and the --to-*/--shift-by/--by-duration options go with --reset-offsets");
    }
    if !args.reset_offsets {
        return Ok(None);
    }
    if args.topics.is_empty() && !args.all_topics {
        bail!("One of the reset scopes should be defined: --all-topics, --topic.");
    }
    for topic in &args.topics {
        topic_and_partitions(topic)?;
    }
    scenario(args).map(Some)
}

fn scenario_given(args: &GroupsArgs) -> bool {
    args.to_earliest
        || args.to_latest
        || args.to_current
        || args.to_offset.is_some()
        || args.to_datetime.is_some()
        || args.shift_by.is_some()
        || args.by_duration.is_some()
}

fn scenario(args: &GroupsArgs) -> anyhow::Result<Scenario> {
    Ok(match () {
        _ if args.to_earliest => Scenario::Earliest,
        _ if args.to_latest => Scenario::Latest,
        _ if args.to_current => Scenario::Current,
        _ => match (args.to_offset, args.shift_by, &args.to_datetime, &args.by_duration) {
            (Some(offset), ..) => Scenario::Offset(offset),
            (_, Some(shift), ..) => Scenario::ShiftBy(shift),
            (_, _, Some(datetime), _) => Scenario::Time(datetime_ms(datetime, local_offset_s)?),
            (_, _, _, Some(duration)) => Scenario::Time(now_ms().saturating_sub(duration_ms(duration)?)),
            _ => bail!(
                "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, \
                 --to-datetime, --shift-by, --by-duration"
            ),
        },
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn is_code(error: &Error, code: i16) -> bool {
    error.kafka_code().is_some_and(|c| c.code() == code)
}

// ------------------------------------------------------------------ list

/// Groups that speak the consumer protocol (or none yet, having only offsets).
async fn consumer_groups(admin: &Admin) -> anyhow::Result<Vec<ListedGroup>> {
    let groups = admin.list_groups().await.context("cannot list groups")?;
    Ok(groups.into_iter().filter(|g| g.protocol_type == "consumer" || g.protocol_type.is_empty()).collect())
}

async fn list(admin: &Admin, args: &GroupsArgs) -> anyhow::Result<()> {
    let mut groups = consumer_groups(admin).await?;
    if let Some(Some(states)) = &args.state {
        let wanted = parse_states(states)?;
        groups.retain(|g| wanted.contains(&g.state.to_ascii_lowercase()));
    }
    let state = |g: &ListedGroup| if g.state.is_empty() { "Unknown".to_owned() } else { g.state.clone() };
    match args.format {
        Format::Json => print_json(&Value::Array(
            groups.iter().map(|g| json!({"group": g.group_id, "state": state(g)})).collect(),
        )),
        Format::Text if args.state.is_some() => {
            let width = column_width(15, groups.iter().map(|g| g.group_id.as_str())) + 10;
            println!("{} {}", pad("GROUP", width), pad("STATE", 20));
            for group in &groups {
                println!("{} {}", pad(&group.group_id, width), pad(&state(group), 20));
            }
        }
        Format::Text => groups.iter().for_each(|g| println!("{}", g.group_id)),
    }
    Ok(())
}

/// `Stable,empty` into lower-case state names, refusing unknown ones.
fn parse_states(text: &str) -> anyhow::Result<BTreeSet<String>> {
    let known: BTreeSet<String> = CONSUMER_GROUP_STATES.iter().map(|s| s.to_ascii_lowercase()).collect();
    let states: BTreeSet<String> = text.split(',').map(|s| s.trim().to_ascii_lowercase()).collect();
    if !states.is_subset(&known) {
        bail!("Invalid state list '{text}'. Valid states are: {}", CONSUMER_GROUP_STATES.join(", "));
    }
    Ok(states)
}

// ------------------------------------------------------------------ describe

/// The named groups, or every consumer group; sorted, each once.
async fn group_ids(admin: &Admin, args: &GroupsArgs) -> anyhow::Result<Vec<String>> {
    if args.all_groups {
        return Ok(consumer_groups(admin).await?.into_iter().map(|g| g.group_id).collect());
    }
    Ok(args.groups.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect())
}

/// The group as DescribeGroups sees it; a group that does not exist is `Dead`.
async fn describe_group(admin: &Admin, id: &str) -> anyhow::Result<GroupDescription> {
    let item = admin.describe_groups(&[id.to_owned()]).await?.into_iter().next();
    let result = item.context("DescribeGroups answered no group")?.result;
    match result {
        Ok(group) => Ok(group),
        Err(e) if is_code(&e, GROUP_ID_NOT_FOUND) => Ok(GroupDescription {
            group_id: id.to_owned(),
            state: "Dead".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        }),
        Err(e) => Err(e).with_context(|| format!("cannot describe group {id}")),
    }
}

async fn describe(admin: &Admin, args: &GroupsArgs) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    let mut described = Vec::new();
    for id in group_ids(admin, args).await? {
        let group = describe_group(admin, &id).await?;
        if group.state == "Dead" {
            missing.push(format!("'{id}'"));
            continue;
        }
        if args.format == Format::Text {
            warn_about_state(&group);
        }
        let report = match () {
            _ if args.members => members_report(&group, args)?,
            _ if args.state.is_some() => state_report(admin, &group, args).await?,
            _ => offsets_report(admin, &group, args).await?,
        };
        described.push(report);
    }
    if args.format == Format::Json {
        print_json(&Value::Array(described));
    }
    match missing.len() {
        0 => Ok(()),
        1 => bail!("Consumer group {} does not exist.", missing[0]),
        _ => bail!("Consumer groups {} do not exist.", missing.join(", ")),
    }
}

/// Kafka's notes about a group whose table may be empty or changing.
fn warn_about_state(group: &GroupDescription) {
    match group.state.as_str() {
        "Empty" => eprintln!("\nConsumer group '{}' has no active members.", group.group_id),
        "PreparingRebalance" | "CompletingRebalance" | "Assigning" | "Reconciling" => {
            eprintln!("\nWarning: Consumer group '{}' is rebalancing.", group.group_id)
        }
        _ => {}
    }
}

/// One row of `--describe --offsets`.
struct OffsetRow {
    topic: String,
    partition: i32,
    current: Option<i64>,
    log_end: Option<i64>,
    /// `None` for a partition with a committed offset but no consumer.
    member: Option<MemberDescription>,
}

impl OffsetRow {
    fn lag(&self) -> Option<i64> {
        self.current.zip(self.log_end).map(|(current, end)| end - current)
    }
}

/// Rows for each member's assigned partitions (members with most partitions
/// first), then for partitions with a committed offset but no consumer.
async fn offset_rows(admin: &Admin, group: &GroupDescription) -> anyhow::Result<Vec<OffsetRow>> {
    let committed = committed_offsets(admin, &group.group_id).await?;
    let mut members: Vec<(&MemberDescription, Vec<(String, i32)>)> = Vec::new();
    for member in &group.members {
        let mut partitions = member.assigned_partitions()?;
        partitions.sort();
        if !partitions.is_empty() {
            members.push((member, partitions));
        }
    }
    members.sort_by_key(|(_, partitions)| Reverse(partitions.len()));
    let mut assigned = BTreeSet::new();
    let mut rows = Vec::new();
    for (member, partitions) in members {
        for (topic, partition) in partitions {
            assigned.insert((topic.clone(), partition));
            let current = committed.get(&(topic.clone(), partition)).copied();
            rows.push(OffsetRow { topic, partition, current, log_end: None, member: Some(member.clone()) });
        }
    }
    for ((topic, partition), offset) in &committed {
        if !assigned.contains(&(topic.clone(), *partition)) {
            let (topic, partition) = (topic.clone(), *partition);
            rows.push(OffsetRow { topic, partition, current: Some(*offset), log_end: None, member: None });
        }
    }
    let partitions: Vec<(String, i32)> = rows.iter().map(|r| (r.topic.clone(), r.partition)).collect();
    let log_ends = log_ends_where_known(admin, &partitions).await;
    for row in &mut rows {
        row.log_end = log_ends.get(&(row.topic.clone(), row.partition)).copied();
    }
    Ok(rows)
}

/// The group's committed offsets by partition (partitions without one left out).
async fn committed_offsets(admin: &Admin, group: &str) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let fetched =
        admin.fetch_offsets(group, None).await.with_context(|| format!("cannot fetch offsets of {group}"))?;
    let mut committed = BTreeMap::new();
    for item in fetched {
        if let Ok(Some(offset)) = item.result {
            committed.insert((item.topic, item.partition), offset);
        }
    }
    Ok(committed)
}

/// Log end offsets, asked topic by topic so that a deleted topic (whose
/// offsets a group may still hold) leaves only its own rows without one.
async fn log_ends_where_known(admin: &Admin, partitions: &[(String, i32)]) -> BTreeMap<(String, i32), i64> {
    let mut by_topic: BTreeMap<&str, Vec<(String, i32, OffsetSpec)>> = BTreeMap::new();
    for (topic, partition) in partitions {
        by_topic.entry(topic).or_default().push((topic.clone(), *partition, OffsetSpec::Latest));
    }
    let mut ends = BTreeMap::new();
    for queries in by_topic.values() {
        for item in admin.list_offsets(queries).await.unwrap_or_default() {
            if let Ok(listed) = item.result {
                ends.insert((item.topic, item.partition), listed.offset);
            }
        }
    }
    ends
}

fn or_missing(value: Option<impl ToString>) -> String {
    value.map_or_else(|| MISSING.to_owned(), |v| v.to_string())
}

async fn offsets_report(admin: &Admin, group: &GroupDescription, args: &GroupsArgs) -> anyhow::Result<Value> {
    let rows = offset_rows(admin, group).await?;
    let id = group.group_id.as_str();
    if args.format == Format::Json {
        let partitions: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic, "partition": r.partition, "current_offset": r.current,
                    "log_end_offset": r.log_end, "lag": r.lag(),
                    "consumer_id": r.member.as_ref().map(|m| &m.member_id),
                    "host": r.member.as_ref().map(|m| &m.client_host),
                    "client_id": r.member.as_ref().map(|m| &m.client_id),
                })
            })
            .collect();
        return Ok(json!({"group": id, "state": group.state, "partitions": partitions}));
    }
    if rows.is_empty() {
        return Ok(Value::Null);
    }
    let member_field = |row: &OffsetRow, field: fn(&MemberDescription) -> &str| {
        row.member.as_ref().map_or(MISSING.to_owned(), |m| field(m).to_owned())
    };
    let topic_width = column_width(15, rows.iter().map(|r| r.topic.as_str()));
    let consumer_ids: Vec<String> = rows.iter().map(|r| member_field(r, |m| &m.member_id)).collect();
    let hosts: Vec<String> = rows.iter().map(|r| member_field(r, |m| &m.client_host)).collect();
    let consumer_width = column_width(15, consumer_ids.iter().map(String::as_str));
    let host_width = column_width(15, hosts.iter().map(String::as_str));
    let group_width = column_width(15, [id]);
    let line = |cells: [&str; 9]| {
        let [group, topic, partition, current, end, lag, consumer, host, client] = cells;
        println!(
            "{} {} {} {} {} {} {} {} {client}",
            pad(group, group_width),
            pad(topic, topic_width),
            pad(partition, 10),
            pad(current, 15),
            pad(end, 15),
            pad(lag, 15),
            pad(consumer, consumer_width),
            pad(host, host_width),
        )
    };
    println!();
    line([
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    for (row, (consumer, host)) in rows.iter().zip(consumer_ids.iter().zip(&hosts)) {
        line([
            id,
            &row.topic,
            &row.partition.to_string(),
            &or_missing(row.current),
            &or_missing(row.log_end),
            &or_missing(row.lag()),
            consumer,
            host,
            &member_field(row, |m| &m.client_id),
        ]);
    }
    Ok(Value::Null)
}

/// `topic:0,1;other:2`, Kafka's way of writing an assignment.
fn assignment_text(partitions: &[(String, i32)]) -> String {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let topics: Vec<String> = by_topic
        .into_iter()
        .map(|(topic, mut ps)| {
            ps.sort_unstable();
            let list: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{topic}:{}", list.join(","))
        })
        .collect();
    if topics.is_empty() {
        MISSING.to_owned()
    } else {
        topics.join(";")
    }
}

fn members_report(group: &GroupDescription, args: &GroupsArgs) -> anyhow::Result<Value> {
    let assignments: Vec<Vec<(String, i32)>> =
        group.members.iter().map(MemberDescription::assigned_partitions).collect::<Result<_, _>>()?;
    let id = group.group_id.as_str();
    if args.format == Format::Json {
        let members: Vec<Value> = group
            .members
            .iter()
            .zip(&assignments)
            .map(|(m, assigned)| {
                let assignment: Vec<Value> =
                    assigned.iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect();
                json!({
                    "consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "host": m.client_host, "client_id": m.client_id,
                    "partitions": assigned.len(), "assignment": assignment,
                })
            })
            .collect();
        return Ok(json!({"group": id, "state": group.state, "members": members}));
    }
    if group.members.is_empty() {
        return Ok(Value::Null);
    }
    let with_instance = group.members.iter().any(|m| m.group_instance_id.is_some());
    let texts: Vec<String> = assignments.iter().map(|a| assignment_text(a)).collect();
    let widths = (
        column_width(15, [id]),
        column_width(15, group.members.iter().map(|m| m.member_id.as_str())),
        column_width(17, group.members.iter().filter_map(|m| m.group_instance_id.as_deref())),
        column_width(15, group.members.iter().map(|m| m.client_host.as_str())),
        column_width(15, group.members.iter().map(|m| m.client_id.as_str())),
        column_width(20, texts.iter().map(String::as_str)),
    );
    let line = |cells: [&str; 10]| {
        let [group, consumer, instance, host, client, count, epoch, current, target_epoch, target] = cells;
        let mut text = format!("{} {} ", pad(group, widths.0), pad(consumer, widths.1));
        if with_instance {
            text += &format!("{} ", pad(instance, widths.2));
        }
        text += &format!("{} {} {} ", pad(host, widths.3), pad(client, widths.4), pad(count, 15));
        if args.verbose {
            text += &format!(
                "{} {} {} {}",
                pad(epoch, 15),
                pad(current, widths.5),
                pad(target_epoch, 15),
                pad(target, 20)
            );
        }
        println!("{text}");
    };
    println!();
    line([
        "GROUP",
        "CONSUMER-ID",
        "GROUP-INSTANCE-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "CURRENT-EPOCH",
        "CURRENT-ASSIGNMENT",
        "TARGET-EPOCH",
        "TARGET-ASSIGNMENT",
    ]);
    for ((member, assigned), text) in group.members.iter().zip(&assignments).zip(&texts) {
        line([
            id,
            &member.member_id,
            member.group_instance_id.as_deref().unwrap_or(""),
            &member.client_host,
            &member.client_id,
            &assigned.len().to_string(),
            MISSING,
            text,
            MISSING,
            MISSING,
        ]);
    }
    Ok(Value::Null)
}

async fn state_report(admin: &Admin, group: &GroupDescription, args: &GroupsArgs) -> anyhow::Result<Value> {
    let (coordinator_id, coordinator_addr) = coordinator(admin, &group.group_id).await?;
    let strategy = if group.protocol.is_empty() { MISSING } else { group.protocol.as_str() };
    let id = group.group_id.as_str();
    if args.format == Format::Json {
        return Ok(json!({
            "group": id, "coordinator": {"id": coordinator_id, "address": coordinator_addr},
            "assignment_strategy": group.protocol, "state": group.state, "members": group.members.len(),
        }));
    }
    let coordinator = format!("{coordinator_addr}  ({coordinator_id})");
    let (group_width, coordinator_width) = (column_width(15, [id]), column_width(25, [coordinator.as_str()]));
    let line = |cells: [&str; 7]| {
        let [group, coordinator, strategy, state, epoch, target_epoch, members] = cells;
        let mut text = format!(
            "{} {} {} {} ",
            pad(group, group_width),
            pad(coordinator, coordinator_width),
            pad(strategy, 20),
            pad(state, 20)
        );
        if args.verbose {
            text += &format!("{} {} ", pad(epoch, 15), pad(target_epoch, 25));
        }
        println!("{text}{members}");
    };
    println!();
    line([
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "GROUP-EPOCH",
        "TARGET-ASSIGNMENT-EPOCH",
        "#MEMBERS",
    ]);
    let members = group.members.len().to_string();
    line([id, &coordinator, strategy, &group.state, MISSING, MISSING, &members]);
    Ok(Value::Null)
}

/// The group coordinator's node id (-1 if metadata does not name it) and address.
async fn coordinator(admin: &Admin, group: &str) -> anyhow::Result<(i32, String)> {
    const GROUP_KEY: i8 = 0;
    let connection = admin.cluster().coordinator(GROUP_KEY, group).await?;
    let addr = connection.addr().to_owned();
    let metadata = admin.cluster().metadata();
    let id = metadata.brokers.values().find(|b| b.addr() == addr).map_or(-1, |b| b.node_id);
    Ok((id, addr))
}

// ------------------------------------------------------------------ delete

async fn delete(admin: &Admin, args: &GroupsArgs) -> anyhow::Result<()> {
    let ids = group_ids(admin, args).await?;
    let results = admin.delete_groups(&ids).await?;
    let (deleted, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.result.is_ok());
    let quoted = |names: Vec<String>| names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
    let deleted = quoted(deleted.into_iter().map(|r| r.name).collect());
    if failed.is_empty() {
        println!("Deletion of requested consumer groups ({deleted}) was successful.");
        return Ok(());
    }
    if !deleted.is_empty() {
        println!("These consumer groups were deleted successfully: {deleted}");
    }
    let reasons: Vec<String> = failed
        .into_iter()
        .filter_map(|r| {
            r.result.err().map(|e| format!("group '{}' could not be deleted due to: {e}", r.name))
        })
        .collect();
    bail!("Deletion of some consumer groups failed: {}", reasons.join("; "))
}

async fn delete_offsets(admin: &Admin, args: &GroupsArgs) -> anyhow::Result<()> {
    let group = &args.groups[0];
    let partitions = named_partitions(admin, &args.topics).await?;
    let results = admin
        .delete_offsets(group, &partitions)
        .await
        .with_context(|| format!("cannot delete offsets of group {group}"))?;
    let failed = results.iter().any(|r| r.result.is_err());
    if !failed {
        println!("Request succeeded for deleting offsets from group {group}.");
    }
    let width = column_width(15, results.iter().map(|r| r.topic.as_str()));
    println!();
    println!("{} {} {}", pad("TOPIC", width), pad("PARTITION", 10), pad("STATUS", 15));
    for r in &results {
        let status = match &r.result {
            Ok(()) => "Successful".to_owned(),
            Err(e) => format!("Error: {e}"),
        };
        println!("{} {} {}", pad(&r.topic, width), pad(&r.partition.to_string(), 10), pad(&status, 15));
    }
    if failed {
        bail!("Encountered some partition-level error, see the follow-up details.");
    }
    Ok(())
}

/// `--topic` arguments as partitions: a bare topic means all of its
/// partitions; every partition must exist.
async fn named_partitions(admin: &Admin, topic_args: &[String]) -> anyhow::Result<Vec<(String, i32)>> {
    let mut wanted: BTreeMap<String, Option<BTreeSet<i32>>> = BTreeMap::new();
    for arg in topic_args {
        let (topic, partitions) = topic_and_partitions(arg)?;
        let entry = wanted.entry(topic).or_insert_with(|| Some(BTreeSet::new()));
        match (entry.as_mut(), partitions) {
            (Some(set), Some(partitions)) => set.extend(partitions),
            (_, None) => *entry = None,
            (None, Some(_)) => {}
        }
    }
    let names: Vec<String> = wanted.keys().cloned().collect();
    let mut partitions = Vec::new();
    let mut missing = Vec::new();
    for item in admin.describe_topics(&names).await? {
        let topic = item.result.map_err(|e| anyhow!("cannot describe topic '{}': {e}", item.name))?;
        let existing: BTreeSet<i32> = topic.partitions.iter().map(|p| p.partition).collect();
        let chosen = wanted[&item.name].clone().unwrap_or_else(|| existing.clone());
        for partition in chosen {
            if existing.contains(&partition) {
                partitions.push((item.name.clone(), partition));
            } else {
                missing.push(format!("{}-{partition}", item.name));
            }
        }
    }
    if !missing.is_empty() {
        bail!("The partitions \"{}\" do not exist", missing.join(","));
    }
    Ok(partitions)
}

// ------------------------------------------------------------------ reset

const DRY_RUN_WARNING: &str = "WARN: No action will be performed as the --execute option is missing. \
In a future major release, the default behavior of this command will be to prompt the user before executing \
the reset rather than doing a dry run. You should add the --dry-run option explicitly if you are scripting \
this command and want to keep the current default behavior without prompting.";

async fn reset_offsets(admin: &Admin, args: &GroupsArgs, scenario: Option<Scenario>) -> anyhow::Result<()> {
    let scenario = scenario.context("no reset scenario")?;
    if !args.dry_run && !args.execute {
        eprintln!("{DRY_RUN_WARNING}");
    }
    let mut plan: Vec<(String, String, i32, i64)> = Vec::new();
    let mut refused = Vec::new();
    for id in group_ids(admin, args).await? {
        let group = describe_group(admin, &id).await?;
        if !matches!(group.state.as_str(), "Empty" | "Dead") {
            refused.push(format!(
                "Assignments can only be reset if the group '{id}' is inactive, but the current state is {}.",
                group.state
            ));
            continue;
        }
        let committed = committed_offsets(admin, &id).await?;
        let partitions = if args.all_topics {
            committed.keys().cloned().collect()
        } else {
            named_partitions(admin, &args.topics).await?
        };
        let targets = target_offsets(admin, scenario, &partitions, &committed).await?;
        if args.execute {
            commit(admin, &id, &targets).await?;
        }
        plan.extend(
            targets.into_iter().map(|((topic, partition), offset)| (id.clone(), topic, partition, offset)),
        );
    }
    print_plan(&plan, args.format);
    if !refused.is_empty() {
        bail!("{}", refused.join(" "));
    }
    Ok(())
}

/// The offset `scenario` gives each partition, within [log start, log end].
async fn target_offsets(
    admin: &Admin,
    scenario: Scenario,
    partitions: &[(String, i32)],
    committed: &BTreeMap<(String, i32), i64>,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let starts = log_offsets(admin, partitions, OffsetSpec::Earliest, "starting").await?;
    let ends = log_offsets(admin, partitions, OffsetSpec::Latest, "ending").await?;
    let by_time = match scenario {
        Scenario::Time(ms) => {
            log_offsets(admin, partitions, OffsetSpec::Timestamp(ms), "time-indexed").await?
        }
        _ => BTreeMap::new(),
    };
    let mut targets = BTreeMap::new();
    for key in partitions {
        let (start, end) = (starts[key], ends[key]);
        let within_log = |offset: i64| offset.min(end).max(start);
        let offset = match scenario {
            Scenario::Earliest => start,
            Scenario::Latest => end,
            Scenario::Current => committed.get(key).copied().unwrap_or(end),
            Scenario::Offset(offset) => within_log(offset),
            Scenario::ShiftBy(shift) => {
                let current = committed.get(key).with_context(|| {
                    format!(
                        "Cannot shift offset for partition {}-{} since there is no current committed offset",
                        key.0, key.1
                    )
                })?;
                within_log(current.saturating_add(shift))
            }
            Scenario::Time(_) => match by_time[key] {
                found if found >= 0 => found,
                _ => {
                    eprintln!(
                        "Warn: Partition {} from topic {} is empty. Falling back to latest known offset.",
                        key.1, key.0
                    );
                    end
                }
            },
        };
        targets.insert(key.clone(), offset);
    }
    Ok(targets)
}

/// One ListOffsets answer per partition; any failure fails the reset.
async fn log_offsets(
    admin: &Admin,
    partitions: &[(String, i32)],
    spec: OffsetSpec,
    what: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let queries: Vec<(String, i32, OffsetSpec)> =
        partitions.iter().map(|(t, p)| (t.clone(), *p, spec)).collect();
    let mut offsets = BTreeMap::new();
    for item in admin.list_offsets(&queries).await? {
        let listed = item.result.with_context(|| {
            format!("Error getting {what} offset of topic partition: {}-{}", item.topic, item.partition)
        })?;
        offsets.insert((item.topic, item.partition), listed.offset);
    }
    if let Some((topic, partition)) = partitions.iter().find(|key| !offsets.contains_key(*key)) {
        bail!("Error getting {what} offset of topic partition: {topic}-{partition}");
    }
    Ok(offsets)
}

async fn commit(admin: &Admin, group: &str, targets: &BTreeMap<(String, i32), i64>) -> anyhow::Result<()> {
    let offsets: Vec<(String, i32, i64)> = targets.iter().map(|((t, p), o)| (t.clone(), *p, *o)).collect();
    let results = admin
        .commit_offsets(group, &offsets)
        .await
        .with_context(|| format!("cannot commit offsets of {group}"))?;
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.result.err().map(|e| format!("{}-{}: {e}", r.topic, r.partition)))
        .collect();
    if !failures.is_empty() {
        bail!("cannot commit offsets of {group}: {}", failures.join(", "));
    }
    Ok(())
}

fn print_plan(plan: &[(String, String, i32, i64)], format: Format) {
    if format == Format::Json {
        let rows =
            plan.iter().map(|(g, t, p, o)| json!({"group": g, "topic": t, "partition": p, "offset": o}));
        print_json(&Value::Array(rows.collect()));
        return;
    }
    if plan.is_empty() {
        return;
    }
    let group_width = column_width(15, plan.iter().map(|row| row.0.as_str()));
    let topic_width = column_width(15, plan.iter().map(|row| row.1.as_str()));
    println!();
    println!(
        "{} {} {} NEW-OFFSET",
        pad("GROUP", group_width),
        pad("TOPIC", topic_width),
        pad("PARTITION", 10)
    );
    for (group, topic, partition, offset) in plan {
        println!(
            "{} {} {} {offset}",
            pad(group, group_width),
            pad(topic, topic_width),
            pad(&partition.to_string(), 10)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_print_as_kafka_prints_them() {
        let partitions = vec![("b".to_owned(), 1), ("a".to_owned(), 2), ("a".to_owned(), 0)];
        assert_eq!(assignment_text(&partitions), "a:0,2;b:1");
        assert_eq!(assignment_text(&[]), "-");
    }

    #[test]
    fn state_filters_are_kafkas_states_in_any_case() {
        let states = parse_states("stable,Empty").unwrap();
        assert_eq!(states, BTreeSet::from(["stable".to_owned(), "empty".to_owned()]));
        assert!(parse_states("Sleeping").unwrap_err().to_string().contains("Valid states are"));
    }
}
