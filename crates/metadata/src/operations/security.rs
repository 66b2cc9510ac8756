//! SCRAM credentials (Kafka's `ScramControlManager`, KIP-554) and client
//! quotas (`ClientQuotaControlManager`, KIP-546): each user or entity is
//! decided on its own, so one bad entry does not refuse the others.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::controller::MetadataError;
use crate::image::{
    client_quota_record, scram_credential_record, MetadataImage, QuotaEntity, ScramCredentialImage,
    ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER,
};
use crate::kraft_records::{MetadataRecord, RemoveUserScramCredentialRecord};

/// Kafka's bounds on SCRAM iterations, the same for both mechanisms.
pub const SCRAM_MIN_ITERATIONS: i32 = 4096;
pub const SCRAM_MAX_ITERATIONS: i32 = 16384;
/// Kafka's `ScramMechanism` ids: SCRAM-SHA-256 and SCRAM-SHA-512.
const SCRAM_MECHANISMS: [i8; 2] = [1, 2];

/// One change of AlterUserScramCredentials.
#[derive(Debug, Clone)]
pub enum ScramAlteration {
    Delete {
        user: String,
        mechanism: i8,
    },
    /// The credential's keys derived from the salted password by the broker.
    Upsert {
        user: String,
        mechanism: i8,
        credential: ScramCredentialImage,
    },
}

impl ScramAlteration {
    fn user(&self) -> &str {
        match self {
            Self::Delete { user, .. } | Self::Upsert { user, .. } => user,
        }
    }

    fn mechanism(&self) -> i8 {
        match self {
            Self::Delete { mechanism, .. } | Self::Upsert { mechanism, .. } => *mechanism,
        }
    }
}

/// A user's outcome of AlterUserScramCredentials.
pub type UserOutcome = (String, Result<(), MetadataError>);

/// AlterUserScramCredentials: the records of every user whose changes are
/// all valid, and each user's outcome, in order of first mention.
pub fn alter_scram_credentials(
    image: &MetadataImage,
    alterations: &[ScramAlteration],
) -> (Vec<MetadataRecord>, Vec<UserOutcome>) {
    let mut by_user: Vec<(&str, Vec<&ScramAlteration>)> = Vec::new();
    for alteration in alterations {
        match by_user.iter_mut().find(|(user, _)| *user == alteration.user()) {
            Some((_, list)) => list.push(alteration),
            None => by_user.push((alteration.user(), vec![alteration])),
        }
    }
    let mut records = Vec::new();
    let mut outcomes = Vec::new();
    for (user, list) in by_user {
        let outcome = user_records(image, user, &list).map(|mut r| records.append(&mut r));
        outcomes.push((user.to_owned(), outcome));
    }
    (records, outcomes)
}

fn user_records(
    image: &MetadataImage,
    user: &str,
    alterations: &[&ScramAlteration],
) -> Result<Vec<MetadataRecord>, MetadataError> {
    if user.is_empty() {
        return Err(MetadataError::UnacceptableCredential("Username must not be empty".into()));
    }
    let mut seen = BTreeSet::new();
    if !alterations.iter().all(|a| seen.insert(a.mechanism())) {
        return Err(MetadataError::DuplicateResource(
            "A user credential cannot be altered twice in the same request".into(),
        ));
    }
    alterations.iter().map(|a| alteration_record(image, a)).collect()
}

fn alteration_record(
    image: &MetadataImage,
    alteration: &ScramAlteration,
) -> Result<MetadataRecord, MetadataError> {
    if !SCRAM_MECHANISMS.contains(&alteration.mechanism()) {
        return Err(MetadataError::UnsupportedSaslMechanism("Unknown SCRAM mechanism".into()));
    }
    match alteration {
        ScramAlteration::Delete { user, mechanism } => {
            if image.scram_credential(user, *mechanism).is_none() {
                return Err(MetadataError::ResourceNotFound(
                    "Attempt to delete a user credential that does not exist".into(),
                ));
            }
            let record = RemoveUserScramCredentialRecord {
                name: user.clone(),
                mechanism: *mechanism,
                ..Default::default()
            };
            Ok(record.into())
        }
        ScramAlteration::Upsert { user, mechanism, credential } => {
            if credential.iterations < SCRAM_MIN_ITERATIONS {
                return Err(MetadataError::UnacceptableCredential("Too few iterations".into()));
            }
            if credential.iterations > SCRAM_MAX_ITERATIONS {
                return Err(MetadataError::UnacceptableCredential("Too many iterations".into()));
            }
            if credential.salt.is_empty() || credential.stored_key.is_empty() {
                return Err(MetadataError::UnacceptableCredential(
                    "Salt and salted password must not be empty".into(),
                ));
            }
            Ok(scram_credential_record(user, *mechanism, credential).into())
        }
    }
}

/// One entry of AlterClientQuotas: per key, a new value or `None` to remove it.
#[derive(Debug, Clone)]
pub struct QuotaAlteration {
    pub entity: QuotaEntity,
    pub ops: Vec<(String, Option<f64>)>,
}

/// The quota keys of user and client-id entities, and whether each is an
/// integer (Kafka's LONG) rather than a DOUBLE.
const CLIENT_QUOTA_KEYS: [(&str, bool); 4] = [
    ("producer_byte_rate", true),
    ("consumer_byte_rate", true),
    ("request_percentage", false),
    ("controller_mutation_rate", false),
];
/// The quota key of ip entities (Kafka's INT).
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// AlterClientQuotas for one entity: its records, or why it is refused.
pub fn alter_client_quotas(
    image: &MetadataImage,
    alteration: &QuotaAlteration,
) -> Result<Vec<MetadataRecord>, MetadataError> {
    validate_entity(&alteration.entity)?;
    let current = image.client_quotas(&alteration.entity);
    let mut seen = BTreeSet::new();
    let mut records = Vec::new();
    for (key, value) in &alteration.ops {
        if !seen.insert(key) {
            return Err(MetadataError::InvalidRequest(format!(
                "Duplicate quota key {key} in the same entry"
            )));
        }
        validate_quota(&alteration.entity, key, *value)?;
        if value.is_some() || current.contains_key(key) {
            records.push(client_quota_record(&alteration.entity, key, *value).into());
        }
    }
    Ok(records)
}

/// Kafka's entity rules: known types only, and an ip alone.
pub fn validate_entity(entity: &QuotaEntity) -> Result<(), MetadataError> {
    let invalid = |why: String| Err(MetadataError::InvalidRequest(why));
    if entity.is_empty() {
        return invalid("Invalid empty client quota entity".into());
    }
    for (entity_type, name) in entity {
        match entity_type.as_str() {
            ENTITY_USER | ENTITY_CLIENT_ID => {}
            ENTITY_IP => {
                if entity.len() > 1 {
                    return invalid(
                        "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
                            .into(),
                    );
                }
                if let Some(ip) = name {
                    if ip.parse::<IpAddr>().is_err() {
                        return invalid(format!("{ip} is not a valid IP or resolvable host."));
                    }
                }
            }
            other => return invalid(format!("Unhandled client quota entity type: {other}")),
        }
    }
    Ok(())
}

fn validate_quota(entity: &QuotaEntity, key: &str, value: Option<f64>) -> Result<(), MetadataError> {
    let is_ip = entity.contains_key(ENTITY_IP);
    let integer = match CLIENT_QUOTA_KEYS.iter().find(|(k, _)| *k == key) {
        Some((_, integer)) if !is_ip => *integer,
        None if is_ip && key == CONNECTION_CREATION_RATE => true,
        _ => return Err(MetadataError::InvalidRequest(format!("Invalid configuration key {key}"))),
    };
    let Some(value) = value else { return Ok(()) };
    if !value.is_finite() || value < 0.0 {
        return Err(MetadataError::InvalidRequest(format!(
            "Invalid value {value} for configuration key {key}"
        )));
    }
    if integer && value.fract() != 0.0 {
        return Err(MetadataError::InvalidRequest(format!("Configuration {key} must be a Long value")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn upsert(user: &str, mechanism: i8, iterations: i32) -> ScramAlteration {
        let credential = ScramCredentialImage {
            salt: Bytes::from_static(b"salt"),
            stored_key: Bytes::from_static(b"stored"),
            server_key: Bytes::from_static(b"server"),
            iterations,
        };
        ScramAlteration::Upsert { user: user.into(), mechanism, credential }
    }

    fn apply(image: &mut MetadataImage, records: Vec<MetadataRecord>) {
        records.into_iter().for_each(|r| image.apply(r));
    }

    #[test]
    fn scram_changes_are_decided_per_user_with_kafkas_errors() {
        let mut image = MetadataImage::empty();
        let (records, outcomes) = alter_scram_credentials(
            &image,
            &[
                upsert("ok", 1, 4096),
                upsert("few", 1, 4095),
                upsert("many", 2, 16385),
                upsert("odd", 3, 4096),
                ScramAlteration::Delete { user: "ghost".into(), mechanism: 1 },
                upsert("twice", 1, 8192),
                ScramAlteration::Delete { user: "twice".into(), mechanism: 1 },
                upsert("", 1, 4096),
            ],
        );
        let errors: Vec<(&str, Option<String>)> =
            outcomes.iter().map(|(u, r)| (u.as_str(), r.as_ref().err().map(|e| format!("{e:?}")))).collect();
        assert_eq!(errors[0], ("ok", None));
        assert!(errors[1].1.as_deref().unwrap().starts_with("UnacceptableCredential(\"Too few"));
        assert!(errors[2].1.as_deref().unwrap().starts_with("UnacceptableCredential(\"Too many"));
        assert!(errors[3].1.as_deref().unwrap().starts_with("UnsupportedSaslMechanism"));
        assert!(errors[4].1.as_deref().unwrap().starts_with("ResourceNotFound"));
        assert!(errors[5].1.as_deref().unwrap().starts_with("DuplicateResource"));
        assert!(errors[6].1.as_deref().unwrap().starts_with("UnacceptableCredential(\"Username"));
        assert_eq!(records.len(), 1, "only the valid user is written");
        apply(&mut image, records);
        assert_eq!(image.scram_credential("ok", 1).unwrap().iterations, 4096);

        let (records, _) =
            alter_scram_credentials(&image, &[ScramAlteration::Delete { user: "ok".into(), mechanism: 1 }]);
        apply(&mut image, records);
        assert!(image.scram_credential("ok", 1).is_none());
        assert_eq!(image.scram_users().count(), 0);
    }

    fn quota(pairs: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> QuotaAlteration {
        QuotaAlteration {
            entity: pairs.iter().map(|(t, n)| (t.to_string(), n.map(str::to_owned))).collect(),
            ops: ops.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn client_quotas_follow_kafkas_validation() {
        let image = MetadataImage::empty();
        let refused = |a: QuotaAlteration| alter_client_quotas(&image, &a).unwrap_err().to_string();
        assert!(refused(quota(&[], &[("producer_byte_rate", Some(1.0))])).contains("empty"));
        assert!(
            refused(quota(&[("group", Some("g"))], &[("producer_byte_rate", Some(1.0))])).contains("group")
        );
        assert!(refused(quota(&[("ip", None), ("user", None)], &[("connection_creation_rate", Some(1.0))]))
            .contains("combination"));
        assert!(refused(quota(&[("ip", Some("nope"))], &[("connection_creation_rate", Some(1.0))]))
            .contains("not a valid IP"));
        assert!(refused(quota(&[("ip", None)], &[("producer_byte_rate", Some(1.0))]))
            .contains("Invalid configuration key"));
        assert!(refused(quota(&[("user", None)], &[("connection_creation_rate", Some(1.0))])).contains("key"));
        assert!(refused(quota(&[("user", None)], &[("producer_byte_rate", Some(1.5))])).contains("Long"));
        assert!(refused(quota(&[("user", None)], &[("request_percentage", Some(-1.0))]))
            .contains("Invalid value"));
        let fine = quota(&[("user", Some("a")), ("client-id", None)], &[("request_percentage", Some(12.5))]);
        let mut image = MetadataImage::empty();
        let records = alter_client_quotas(&image, &fine).unwrap();
        apply(&mut image, records);
        assert_eq!(image.client_quotas(&fine.entity)["request_percentage"], 12.5);
        // Removing what is not set writes nothing; removing the last key drops the entity.
        assert!(alter_client_quotas(&image, &quota(&[("user", None)], &[("producer_byte_rate", None)]))
            .unwrap()
            .is_empty());
        let removal = quota(&[("user", Some("a")), ("client-id", None)], &[("request_percentage", None)]);
        let records = alter_client_quotas(&image, &removal).unwrap();
        apply(&mut image, records);
        assert!(!image.has_client_quotas());
    }

    #[test]
    fn credentials_and_quotas_survive_a_snapshot() {
        let mut image = MetadataImage::empty();
        let records = alter_scram_credentials(&image, &[upsert("u", 2, 8192)]).0;
        apply(&mut image, records);
        let q = quota(&[("client-id", Some("c"))], &[("consumer_byte_rate", Some(2048.0))]);
        let records = alter_client_quotas(&image, &q).unwrap();
        apply(&mut image, records);
        let mut rebuilt = MetadataImage::empty();
        apply(&mut rebuilt, crate::image::snapshot_records(&image));
        assert_eq!(rebuilt.scram_credential("u", 2), image.scram_credential("u", 2));
        assert_eq!(rebuilt.client_quotas(&q.entity), image.client_quotas(&q.entity));
    }
}
