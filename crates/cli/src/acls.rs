//! `strom acls`: add, list and remove ACLs like `kafka-acls.sh`, through
//! CreateAcls, DescribeAcls and DeleteAcls.
//!
//! The resources are the flags' topics, groups, transactional ids, the
//! cluster and delegation tokens; the bindings are every principal with
//! every host and operation given (ALLOW for `--allow-principal`, DENY for
//! `--deny-principal`). `--producer` and `--consumer` stand for the
//! operations a producer or consumer needs, as in Kafka. Removing does not
//! ask for confirmation (Kafka's `--force` is accepted and implied).

use anyhow::{bail, Context};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use strom_client::{Admin, ClientConfig};
use strom_metadata::acl::{operation, pattern, permission, resource, CLUSTER_NAME, WILDCARD};

use crate::client_args::{runtime, ConnectArgs};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["add", "remove", "list"])))]
pub struct AclsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Add the ACLs.
    #[arg(long)]
    add: bool,
    /// Remove the ACLs matching the flags.
    #[arg(long)]
    remove: bool,
    /// List the ACLs (of the resources given, or all).
    #[arg(long)]
    list: bool,
    /// Principals to allow (`User:alice`, `User:*`).
    #[arg(long = "allow-principal", value_name = "PRINCIPAL")]
    allow_principal: Vec<String>,
    /// Principals to deny.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL")]
    deny_principal: Vec<String>,
    /// Hosts the allowed principals may connect from [default: *].
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_host: Vec<String>,
    /// Hosts the denied principals are refused from [default: *].
    #[arg(long = "deny-host", value_name = "HOST")]
    deny_host: Vec<String>,
    /// With --list: only the ACLs of this principal.
    #[arg(long, value_name = "PRINCIPAL")]
    principal: Option<String>,
    /// Operations: Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens,
    /// DescribeTokens, TwoPhaseCommit, All [default: All].
    #[arg(long, value_name = "OPERATION")]
    operation: Vec<String>,
    /// Topics.
    #[arg(long, value_name = "TOPIC")]
    topic: Vec<String>,
    /// Consumer groups.
    #[arg(long, value_name = "GROUP")]
    group: Vec<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// Transactional ids.
    #[arg(long = "transactional-id", value_name = "ID")]
    transactional_id: Vec<String>,
    /// Delegation tokens.
    #[arg(long = "delegation-token", value_name = "TOKEN")]
    delegation_token: Vec<String>,
    /// LITERAL or PREFIXED; with --list and --remove also ANY or MATCH
    /// [default: LITERAL].
    #[arg(long = "resource-pattern-type", value_name = "TYPE")]
    resource_pattern_type: Option<String>,
    /// What a producer needs: WRITE, DESCRIBE and CREATE on the topics,
    /// WRITE and DESCRIBE on the transactional ids, IDEMPOTENT_WRITE with --idempotent.
    #[arg(long)]
    producer: bool,
    /// What a consumer needs: READ and DESCRIBE on the topics, READ on the groups.
    #[arg(long)]
    consumer: bool,
    /// With --producer: IDEMPOTENT_WRITE on the cluster.
    #[arg(long)]
    idempotent: bool,
    /// Do not ask for confirmation (accepted for kafka-acls.sh compatibility).
    #[arg(long)]
    force: bool,
}

/// One resource pattern: type, name, pattern type.
type Pattern = (i8, String, i8);

/// One binding's entry: principal, host, operation, permission.
type Entry = (String, String, i8, i8);

pub fn run(args: AclsArgs) -> anyhow::Result<()> {
    let config = ClientConfig::from_properties(&args.connect.properties(&[])?)?;
    let pattern_type = pattern_type(&args)?;
    runtime()?.block_on(async {
        let admin = Admin::connect(config).await?;
        if args.list {
            return list(&admin, &args, pattern_type).await;
        }
        let bindings = bindings(&args, pattern_type)?;
        if args.add {
            add(&admin, &bindings).await?;
        } else {
            remove(&admin, &args, &bindings, pattern_type).await?;
        }
        Ok(())
    })
}

fn pattern_type(args: &AclsArgs) -> anyhow::Result<i8> {
    let name = args.resource_pattern_type.as_deref().unwrap_or("LITERAL").to_ascii_uppercase();
    let id = match name.as_str() {
        "LITERAL" => pattern::LITERAL,
        "PREFIXED" => pattern::PREFIXED,
        "ANY" => pattern::ANY,
        "MATCH" => pattern::MATCH,
        _ => bail!("unknown resource pattern type '{name}': LITERAL, PREFIXED, ANY or MATCH"),
    };
    if args.add && !matches!(id, pattern::LITERAL | pattern::PREFIXED) {
        bail!("A '--resource-pattern-type' value of '{name}' is not valid when adding acls.");
    }
    Ok(id)
}

/// The resource patterns the flags name.
fn patterns(args: &AclsArgs, pattern_type: i8) -> anyhow::Result<Vec<Pattern>> {
    let mut patterns = Vec::new();
    let mut named = |kind: i8, names: &[String]| {
        patterns.extend(names.iter().map(|n| (kind, n.clone(), pattern_type)));
    };
    named(resource::TOPIC, &args.topic);
    named(resource::GROUP, &args.group);
    named(resource::TRANSACTIONAL_ID, &args.transactional_id);
    named(resource::DELEGATION_TOKEN, &args.delegation_token);
    if args.cluster || (args.producer && args.idempotent) {
        patterns.push((resource::CLUSTER, CLUSTER_NAME.into(), pattern::LITERAL));
    }
    if let Some((_, name, _)) = patterns.iter().find(|(_, name, _)| name.is_empty()) {
        bail!("resource names must not be empty ('{name}')");
    }
    Ok(patterns)
}

/// The operations a binding on `kind` gets: --producer / --consumer's, or
/// --operation's (ALL by default).
fn operations(args: &AclsArgs, kind: i8) -> anyhow::Result<Vec<i8>> {
    use operation::*;
    if args.producer || args.consumer {
        let mut ops = Vec::new();
        if args.producer {
            ops.extend_from_slice(match kind {
                resource::TOPIC => &[WRITE, DESCRIBE, CREATE][..],
                resource::TRANSACTIONAL_ID => &[WRITE, DESCRIBE],
                resource::CLUSTER => &[IDEMPOTENT_WRITE],
                _ => &[],
            });
        }
        if args.consumer {
            ops.extend_from_slice(match kind {
                resource::TOPIC => &[READ, DESCRIBE][..],
                resource::GROUP => &[READ],
                _ => &[],
            });
        }
        return Ok(ops);
    }
    if args.operation.is_empty() {
        return Ok(vec![ALL]);
    }
    args.operation.iter().map(|name| parse_operation(name)).collect()
}

fn parse_operation(name: &str) -> anyhow::Result<i8> {
    let normalized: String = name.chars().filter(|c| *c != '_').collect::<String>().to_ascii_lowercase();
    let id = (operation::ALL..=operation::TWO_PHASE_COMMIT)
        .find(|op| operation_name(*op).replace('_', "").eq_ignore_ascii_case(&normalized));
    id.with_context(|| format!("unknown operation '{name}'"))
}

/// Every binding the flags describe, by resource pattern.
fn bindings(args: &AclsArgs, pattern_type: i8) -> anyhow::Result<Vec<(Pattern, Entry)>> {
    let patterns = patterns(args, pattern_type)?;
    if patterns.is_empty() {
        bail!("You must specify one of: --topic, --cluster, --group, --transactional-id, --delegation-token");
    }
    if args.consumer && args.group.is_empty() {
        bail!("With --consumer you must specify a --group");
    }
    let hosts = |hosts: &[String]| if hosts.is_empty() { vec![WILDCARD.to_owned()] } else { hosts.to_vec() };
    let grants = [
        (&args.allow_principal, hosts(&args.allow_host), permission::ALLOW),
        (&args.deny_principal, hosts(&args.deny_host), permission::DENY),
    ];
    let mut bindings = Vec::new();
    for pattern in &patterns {
        for op in operations(args, pattern.0)? {
            for (principals, hosts, permission) in &grants {
                for principal in principals.iter() {
                    check_principal(principal)?;
                    for host in hosts {
                        bindings.push((pattern.clone(), (principal.clone(), host.clone(), op, *permission)));
                    }
                }
            }
        }
    }
    if args.add && bindings.is_empty() {
        bail!("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.");
    }
    Ok(bindings)
}

fn check_principal(principal: &str) -> anyhow::Result<()> {
    match principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(()),
        _ => bail!("principal '{principal}' is not of the form Type:name (User:alice)"),
    }
}

async fn add(admin: &Admin, bindings: &[(Pattern, Entry)]) -> anyhow::Result<()> {
    for (pattern, entries) in grouped(bindings.iter().cloned()) {
        println!("Adding ACLs for resource `{}`: ", describe_pattern(&pattern));
        for entry in &entries {
            println!(" \t{} ", describe_entry(entry));
        }
        println!();
    }
    let creations = bindings
        .iter()
        .map(|((kind, name, pattern_type), (principal, host, op, permission))| {
            AclCreation::default()
                .with_resource_type(*kind)
                .with_resource_name(StrBytes::from(name.clone()))
                .with_resource_pattern_type(*pattern_type)
                .with_principal(StrBytes::from(principal.clone()))
                .with_host(StrBytes::from(host.clone()))
                .with_operation(*op)
                .with_permission_type(*permission)
        })
        .collect();
    let connection = admin.cluster().controller_connection().await?;
    let response = connection.send(&CreateAclsRequest::default().with_creations(creations)).await?;
    for result in &response.results {
        check(result.error_code, result.error_message.as_ref())?;
    }
    Ok(())
}

async fn remove(
    admin: &Admin,
    args: &AclsArgs,
    bindings: &[(Pattern, Entry)],
    pattern_type: i8,
) -> anyhow::Result<()> {
    // Without principals, every ACL of the resources goes.
    let filters: Vec<DeleteAclsFilter> = if args.allow_principal.is_empty() && args.deny_principal.is_empty()
    {
        patterns(args, pattern_type)?.iter().map(|p| delete_filter(p, None)).collect()
    } else {
        bindings.iter().map(|(p, e)| delete_filter(p, Some(e))).collect()
    };
    if filters.is_empty() {
        bail!("You must specify one of: --topic, --cluster, --group, --transactional-id, --delegation-token");
    }
    let connection = admin.cluster().controller_connection().await?;
    let response = connection.send(&DeleteAclsRequest::default().with_filters(filters)).await?;
    for result in &response.filter_results {
        check(result.error_code, result.error_message.as_ref())?;
        for acl in &result.matching_acls {
            let pattern = (acl.resource_type, acl.resource_name.to_string(), acl.pattern_type);
            let entry = (acl.principal.to_string(), acl.host.to_string(), acl.operation, acl.permission_type);
            println!("Removed ACL for resource `{}`: {}", describe_pattern(&pattern), describe_entry(&entry));
        }
    }
    Ok(())
}

fn delete_filter(pattern: &Pattern, entry: Option<&Entry>) -> DeleteAclsFilter {
    let (kind, name, pattern_type) = pattern;
    let filter = DeleteAclsFilter::default()
        .with_resource_type_filter(*kind)
        .with_resource_name_filter(Some(StrBytes::from(name.clone())))
        .with_pattern_type_filter(*pattern_type);
    match entry {
        None => filter
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(operation::ANY)
            .with_permission_type(permission::ANY),
        Some((principal, host, op, permission)) => filter
            .with_principal_filter(Some(StrBytes::from(principal.clone())))
            .with_host_filter(Some(StrBytes::from(host.clone())))
            .with_operation(*op)
            .with_permission_type(*permission),
    }
}

async fn list(admin: &Admin, args: &AclsArgs, pattern_type: i8) -> anyhow::Result<()> {
    let patterns = patterns(args, pattern_type)?;
    let mut requests: Vec<DescribeAclsRequest> = patterns
        .iter()
        .map(|(kind, name, pattern_type)| {
            DescribeAclsRequest::default()
                .with_resource_type_filter(*kind)
                .with_resource_name_filter(Some(StrBytes::from(name.clone())))
                .with_pattern_type_filter(*pattern_type)
        })
        .collect();
    if requests.is_empty() {
        requests.push(
            DescribeAclsRequest::default()
                .with_resource_type_filter(resource::ANY)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(pattern::ANY),
        );
    }
    let connection = admin.cluster().any_connection().await?;
    let mut found = Vec::new();
    for request in requests {
        let request = request
            .with_principal_filter(args.principal.clone().map(StrBytes::from))
            .with_host_filter(None)
            .with_operation(operation::ANY)
            .with_permission_type(permission::ANY);
        let response = connection.send(&request).await?;
        check(response.error_code, response.error_message.as_ref())?;
        for r in response.resources {
            let pattern = (r.resource_type, r.resource_name.to_string(), r.pattern_type);
            for acl in r.acls {
                let entry =
                    (acl.principal.to_string(), acl.host.to_string(), acl.operation, acl.permission_type);
                found.push((pattern.clone(), entry));
            }
        }
    }
    for (pattern, entries) in grouped(found.into_iter()) {
        println!("Current ACLs for resource `{}`: ", describe_pattern(&pattern));
        for entry in &entries {
            println!(" \t{} ", describe_entry(entry));
        }
        println!();
    }
    Ok(())
}

/// Bindings grouped by resource pattern, in first-seen order.
fn grouped(bindings: impl Iterator<Item = (Pattern, Entry)>) -> Vec<(Pattern, Vec<Entry>)> {
    let mut groups: Vec<(Pattern, Vec<Entry>)> = Vec::new();
    for (pattern, entry) in bindings {
        match groups.iter_mut().find(|(p, _)| *p == pattern) {
            Some((_, entries)) if !entries.contains(&entry) => entries.push(entry),
            Some(_) => {}
            None => groups.push((pattern, vec![entry])),
        }
    }
    groups
}

fn check(code: i16, message: Option<&StrBytes>) -> anyhow::Result<()> {
    match strom_client::Error::from_code(code, message.map(|m| m.as_str())) {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}

/// Kafka's `ResourcePattern` text.
fn describe_pattern((kind, name, pattern_type): &Pattern) -> String {
    let kind = match *kind {
        resource::TOPIC => "TOPIC",
        resource::GROUP => "GROUP",
        resource::CLUSTER => "CLUSTER",
        resource::TRANSACTIONAL_ID => "TRANSACTIONAL_ID",
        resource::DELEGATION_TOKEN => "DELEGATION_TOKEN",
        resource::USER => "USER",
        _ => "UNKNOWN",
    };
    let pattern_type = if *pattern_type == pattern::PREFIXED { "PREFIXED" } else { "LITERAL" };
    format!("ResourcePattern(resourceType={kind}, name={name}, patternType={pattern_type})")
}

/// Kafka's `AccessControlEntry` text.
fn describe_entry((principal, host, op, permission): &Entry) -> String {
    let permission = if *permission == permission::DENY { "DENY" } else { "ALLOW" };
    format!(
        "(principal={principal}, host={host}, operation={}, permissionType={permission})",
        operation_name(*op)
    )
}

fn operation_name(op: i8) -> &'static str {
    use operation::*;
    match op {
        ALL => "ALL",
        READ => "READ",
        WRITE => "WRITE",
        CREATE => "CREATE",
        DELETE => "DELETE",
        ALTER => "ALTER",
        DESCRIBE => "DESCRIBE",
        CLUSTER_ACTION => "CLUSTER_ACTION",
        DESCRIBE_CONFIGS => "DESCRIBE_CONFIGS",
        ALTER_CONFIGS => "ALTER_CONFIGS",
        IDEMPOTENT_WRITE => "IDEMPOTENT_WRITE",
        CREATE_TOKENS => "CREATE_TOKENS",
        DESCRIBE_TOKENS => "DESCRIBE_TOKENS",
        TWO_PHASE_COMMIT => "TWO_PHASE_COMMIT",
        _ => "UNKNOWN",
    }
}
