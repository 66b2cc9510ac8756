//! Authorization as Kafka's StandardAuthorizer does it, over the ACLs of
//! the published metadata image.
//!
//! `authorizer.class.name` turns it on (Kafka's class name; unset, every
//! request is allowed, as in Kafka without an authorizer); `super.users`
//! (`User:a;User:b`) bypass every check; `allow.everyone.if.no.acl.found`
//! decides resources no ACL covers. The matching rules live in
//! [`strom_metadata::acl`].

use std::collections::HashSet;

use strom_metadata::acl::{self, operation, resource};
use strom_metadata::MetadataImage;

/// Kafka's KRaft authorizer, the one class name Strom accepts.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The keys this module reads.
pub const KEYS: &[&str] = &["authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found"];

/// The broker's authorization settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Off: every request is allowed.
    pub enabled: bool,
    pub super_users: HashSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Reads the keys from `get`; an authorizer other than Kafka's standard
    /// one is refused, as an unknown class fails Kafka's start.
    pub fn parse<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Self, (String, String, String)> {
        let enabled = match get("authorizer.class.name").map(str::trim) {
            None | Some("") => false,
            Some(STANDARD_AUTHORIZER) => true,
            Some(other) => {
                let reason = format!("only {STANDARD_AUTHORIZER} is supported");
                return Err(("authorizer.class.name".into(), other.into(), reason));
            }
        };
        let super_users = get("super.users")
            .unwrap_or("")
            .split(';')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        let allow = match get("allow.everyone.if.no.acl.found").map(|v| v.trim().to_ascii_lowercase()) {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(v) => {
                return Err(("allow.everyone.if.no.acl.found".into(), v, "expected true or false".into()))
            }
        };
        Ok(Self { enabled, super_users, allow_everyone_if_no_acl_found: allow })
    }

    /// Whether `principal` connecting from `host` may do `op` on the
    /// resource, under the ACLs of `image`.
    pub fn authorize(
        &self,
        image: &MetadataImage,
        principal: &str,
        host: &str,
        op: i8,
        resource_type: i8,
        name: &str,
    ) -> bool {
        if !self.enabled || self.super_users.contains(principal) {
            return true;
        }
        let default = self.allow_everyone_if_no_acl_found;
        let covering = image.acl_index().covering(resource_type, name);
        acl::authorize(covering, principal, host, op, resource_type, name, default)
    }

    /// Whether `principal` may do `op` on some resource of `resource_type`.
    pub fn authorize_any(
        &self,
        image: &MetadataImage,
        principal: &str,
        host: &str,
        op: i8,
        resource_type: i8,
    ) -> bool {
        if !self.enabled || self.super_users.contains(principal) {
            return true;
        }
        acl::authorize_any(image.acl_index().of_type(resource_type), principal, host, op, resource_type)
    }

    /// KIP-430's bit set of the operations `principal` may do on the
    /// resource, bit `op` for each allowed operation id.
    pub fn authorized_operations(
        &self,
        image: &MetadataImage,
        principal: &str,
        host: &str,
        resource_type: i8,
        name: &str,
    ) -> i32 {
        supported_operations(resource_type)
            .iter()
            .filter(|op| self.authorize(image, principal, host, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op))
    }
}

/// The operations Kafka lists for each resource type in authorized
/// operations (its `AclEntry.supportedOperations`).
fn supported_operations(resource_type: i8) -> &'static [i8] {
    use operation::*;
    match resource_type {
        resource::TOPIC => &[READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS],
        resource::GROUP => &[READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS],
        resource::CLUSTER => {
            &[CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE]
        }
        resource::TRANSACTIONAL_ID => &[DESCRIBE, WRITE, TWO_PHASE_COMMIT],
        resource::DELEGATION_TOKEN => &[DESCRIBE],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kafkas_standard_authorizer_is_accepted() {
        let config = |value: &'static str| {
            AuthorizerConfig::parse(move |k| (k == "authorizer.class.name").then_some(value))
        };
        assert!(!config("").unwrap().enabled);
        assert!(config(STANDARD_AUTHORIZER).unwrap().enabled);
        assert!(config("kafka.security.authorizer.AclAuthorizer").is_err());
    }

    #[test]
    fn super_users_bypass_and_authorized_operations_list_allowed_bits() {
        let config = AuthorizerConfig::parse(|k| match k {
            "authorizer.class.name" => Some(STANDARD_AUTHORIZER),
            "super.users" => Some("User:admin; User:ops"),
            _ => None,
        })
        .unwrap();
        let image = MetadataImage::empty();
        assert!(config.authorize(&image, "User:ops", "h", operation::WRITE, resource::TOPIC, "t"));
        assert!(!config.authorize(&image, "User:bob", "h", operation::WRITE, resource::TOPIC, "t"));
        let all_topic = config.authorized_operations(&image, "User:admin", "h", resource::TOPIC, "t");
        assert_eq!(all_topic.count_ones(), 8);
        assert_ne!(all_topic & (1 << operation::READ), 0);
        assert_eq!(config.authorized_operations(&image, "User:bob", "h", resource::TOPIC, "t"), 0);
    }
}
