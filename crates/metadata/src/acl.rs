//! Access control lists with Kafka's StandardAuthorizer rules (KIP-801).
//!
//! An [`Acl`] binds a resource pattern (type, name, LITERAL or PREFIXED) to
//! a principal, a host, an operation and ALLOW or DENY. [`authorize`]
//! decides one action: a matching DENY wins over any ALLOW; an ALLOW for
//! READ, WRITE, DELETE or ALTER also allows DESCRIBE, and ALTER_CONFIGS
//! allows DESCRIBE_CONFIGS; ALL matches every operation; `User:*` and host
//! `*` match everyone, and the LITERAL name `*` every resource of its type.
//! A resource with no ACL at all is decided by the caller's default
//! (`allow.everyone.if.no.acl.found`). [`AclFilter`] is the ANY/MATCH
//! filter DescribeAcls and DeleteAcls take.
//!
//! The numeric ids are Kafka's (`ResourceType`, `PatternType`,
//! `AclOperation`, `AclPermissionType`), as the wire and the records hold them.

use std::collections::{BTreeMap, HashMap};

/// Kafka's `ResourceType` ids.
pub mod resource {
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's `PatternType` ids.
pub mod pattern {
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's `AclOperation` ids.
pub mod operation {
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
    pub const TWO_PHASE_COMMIT: i8 = 15;
}

/// Kafka's `AclPermissionType` ids.
pub mod permission {
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// The name that matches every resource (LITERAL), host or user.
pub const WILDCARD: &str = "*";
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The one cluster resource's name.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// One access control entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Acl {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

/// Whether `op` names a concrete operation a binding may hold.
fn is_concrete_operation(op: i8) -> bool {
    (operation::ALL..=operation::TWO_PHASE_COMMIT).contains(&op)
}

impl Acl {
    /// Why this binding cannot be stored, as Kafka's `AclControlManager`
    /// validates a new ACL (answered with INVALID_REQUEST).
    pub fn validate(&self) -> Result<(), String> {
        if !(resource::TOPIC..=resource::USER).contains(&self.resource_type) {
            return Err(format!("invalid resource type {}", self.resource_type));
        }
        if !matches!(self.pattern_type, pattern::LITERAL | pattern::PREFIXED) {
            return Err(format!("invalid pattern type {}", self.pattern_type));
        }
        if self.resource_name.is_empty() {
            return Err("resource name should not be empty".into());
        }
        if self.resource_type == resource::CLUSTER && self.resource_name != CLUSTER_NAME {
            return Err(format!("the only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if !is_concrete_operation(self.operation) {
            return Err(format!("invalid operation {}", self.operation));
        }
        if !matches!(self.permission, permission::ALLOW | permission::DENY) {
            return Err(format!("invalid permission type {}", self.permission));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Err(format!("could not parse principal '{}'", self.principal)),
        }
        if self.host.is_empty() {
            return Err("host should not be empty".into());
        }
        Ok(())
    }

    /// Whether this binding's resource pattern covers resource `name`.
    fn covers(&self, resource_type: i8, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                pattern::LITERAL => self.resource_name == name || self.resource_name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&self.resource_name),
                _ => false,
            }
    }

    /// ALLOW, DENY, or nothing to say about `op` by `principal` from `host`
    /// (Kafka's `StandardAuthorizerData.findResult`).
    fn verdict(&self, principal: &str, host: &str, op: i8) -> Option<bool> {
        if self.principal != principal && self.principal != WILDCARD_PRINCIPAL {
            return None;
        }
        if self.host != WILDCARD && self.host != host {
            return None;
        }
        let allow = self.permission == permission::ALLOW;
        let op_matches = self.operation == operation::ALL
            || self.operation == op
            // Implied DESCRIBEs only widen ALLOWs: a DENY of READ keeps DESCRIBE.
            || (allow && implies(self.operation, op));
        op_matches.then_some(allow)
    }
}

/// Whether an ALLOW of `granted` also allows `wanted`.
fn implies(granted: i8, wanted: i8) -> bool {
    use operation::*;
    match wanted {
        DESCRIBE => matches!(granted, READ | WRITE | DELETE | ALTER),
        DESCRIBE_CONFIGS => granted == ALTER_CONFIGS,
        _ => false,
    }
}

/// Whether `principal` from `host` may do `op` on resource
/// (`resource_type`, `name`) under `acls`; `no_acl_default` decides a
/// resource no ACL covers. Super users are the caller's business.
pub fn authorize<'a>(
    acls: impl IntoIterator<Item = &'a Acl>,
    principal: &str,
    host: &str,
    op: i8,
    resource_type: i8,
    name: &str,
    no_acl_default: bool,
) -> bool {
    let mut covered = false;
    let mut allowed = false;
    for acl in acls.into_iter().filter(|acl| acl.covers(resource_type, name)) {
        covered = true;
        match acl.verdict(principal, host, op) {
            Some(false) => return false,
            Some(true) => allowed = true,
            None => {}
        }
    }
    allowed || (!covered && no_acl_default)
}

/// Whether `principal` from `host` may do `op` on some resource of
/// `resource_type` (Kafka's `authorizeByResourceType`, KIP-679): an ALLOW
/// somewhere that no DENY of the same or a wider pattern takes back.
pub fn authorize_any<'a>(
    acls: impl IntoIterator<Item = &'a Acl> + Clone,
    principal: &str,
    host: &str,
    op: i8,
    resource_type: i8,
) -> bool {
    let applies = |acl: &&Acl, allow: bool| {
        acl.resource_type == resource_type && acl.verdict(principal, host, op) == Some(allow)
    };
    let denials: Vec<&Acl> = acls.clone().into_iter().filter(|acl| applies(acl, false)).collect();
    let denied = |allow: &Acl| {
        denials.iter().any(|deny| match deny.pattern_type {
            pattern::LITERAL => {
                deny.resource_name == WILDCARD
                    || (allow.pattern_type == pattern::LITERAL && allow.resource_name == deny.resource_name)
            }
            pattern::PREFIXED => allow.resource_name.starts_with(&deny.resource_name),
            _ => false,
        })
    };
    acls.into_iter().filter(|acl| applies(acl, true)).any(|allow| !denied(allow))
}

/// The ACLs indexed by the resources they cover, so a check reads only
/// the bindings that may apply instead of every ACL (Kafka's
/// `StandardAuthorizerData` keeps them sorted for the same reason).
///
/// LITERAL bindings are found by (resource type, name) and the type's
/// wildcard `*`; PREFIXED ones sit in a map sorted by prefix per resource
/// type, where the prefixes of a name are looked up one length at a time
/// (at most the name's length lookups, however many ACLs there are).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclIndex {
    literal: HashMap<i8, HashMap<String, Vec<Acl>>>,
    prefixed: HashMap<i8, BTreeMap<String, Vec<Acl>>>,
}

impl AclIndex {
    pub fn insert(&mut self, acl: Acl) {
        let name = acl.resource_name.clone();
        self.bucket(acl.resource_type, acl.pattern_type, name).push(acl);
    }

    /// Removes one binding equal to `acl`.
    pub fn remove(&mut self, acl: &Acl) {
        let name = acl.resource_name.as_str();
        if acl.pattern_type == pattern::LITERAL {
            if let Some(names) = self.literal.get_mut(&acl.resource_type) {
                if remove_one(names.get_mut(name), acl) {
                    names.remove(name);
                }
            }
        } else if let Some(names) = self.prefixed.get_mut(&acl.resource_type) {
            if remove_one(names.get_mut(name), acl) {
                names.remove(name);
            }
        }
    }

    fn bucket(&mut self, resource_type: i8, pattern_type: i8, name: String) -> &mut Vec<Acl> {
        match pattern_type {
            pattern::LITERAL => self.literal.entry(resource_type).or_default().entry(name).or_default(),
            _ => self.prefixed.entry(resource_type).or_default().entry(name).or_default(),
        }
    }

    /// The bindings whose pattern covers resource (`resource_type`, `name`).
    pub fn covering<'a>(&'a self, resource_type: i8, name: &'a str) -> impl Iterator<Item = &'a Acl> + 'a {
        let literal = self.literal.get(&resource_type);
        let exact = literal.and_then(|names| names.get(name));
        let wildcard = literal.filter(|_| name != WILDCARD).and_then(|names| names.get(WILDCARD));
        let prefixed = self.prefixed.get(&resource_type).filter(|names| !names.is_empty());
        let prefixes = prefixed.into_iter().flat_map(move |names| {
            let lengths = name.char_indices().map(|(at, c)| at + c.len_utf8());
            lengths.filter_map(move |length| names.get(&name[..length]))
        });
        exact.into_iter().chain(wildcard).chain(prefixes).flatten()
    }

    /// Every binding on resources of `resource_type`.
    pub fn of_type(&self, resource_type: i8) -> impl Iterator<Item = &Acl> + Clone {
        let literal = self.literal.get(&resource_type).into_iter().flat_map(|names| names.values());
        let prefixed = self.prefixed.get(&resource_type).into_iter().flat_map(|names| names.values());
        literal.chain(prefixed).flatten()
    }
}

/// Removes one binding equal to `acl` from `bucket`; whether it is empty now.
fn remove_one(bucket: Option<&mut Vec<Acl>>, acl: &Acl) -> bool {
    let Some(bucket) = bucket else { return false };
    if let Some(at) = bucket.iter().position(|held| held == acl) {
        bucket.swap_remove(at);
    }
    bucket.is_empty()
}

/// A DescribeAcls or DeleteAcls filter: ANY fields match everything, and the
/// MATCH pattern type matches every binding that would apply to the named
/// resource (its LITERAL name, the LITERAL wildcard, and covering prefixes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// Why the filter is not one Kafka accepts.
    pub fn validate(&self) -> Result<(), String> {
        if !(resource::ANY..=resource::USER).contains(&self.resource_type) {
            return Err(format!("invalid resource type {}", self.resource_type));
        }
        if !(pattern::ANY..=pattern::PREFIXED).contains(&self.pattern_type) {
            return Err(format!("invalid pattern type {}", self.pattern_type));
        }
        if !(operation::ANY..=operation::TWO_PHASE_COMMIT).contains(&self.operation) {
            return Err(format!("invalid operation {}", self.operation));
        }
        if !(permission::ANY..=permission::ALLOW).contains(&self.permission) {
            return Err(format!("invalid permission type {}", self.permission));
        }
        Ok(())
    }

    pub fn matches(&self, acl: &Acl) -> bool {
        let any_or = |want: i8, any: i8, have: i8| want == any || want == have;
        any_or(self.resource_type, resource::ANY, acl.resource_type)
            && self.matches_pattern(acl)
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && any_or(self.operation, operation::ANY, acl.operation)
            && any_or(self.permission, permission::ANY, acl.permission)
    }

    fn matches_pattern(&self, acl: &Acl) -> bool {
        let Some(name) = &self.resource_name else {
            return matches!(self.pattern_type, pattern::ANY | pattern::MATCH)
                || self.pattern_type == acl.pattern_type;
        };
        match self.pattern_type {
            pattern::ANY => acl.resource_name == *name,
            pattern::MATCH => match acl.pattern_type {
                pattern::LITERAL => acl.resource_name == *name || acl.resource_name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&acl.resource_name),
                _ => false,
            },
            exact => acl.pattern_type == exact && acl.resource_name == *name,
        }
    }
}

#[cfg(test)]
mod tests;
