//! The image's SCRAM credentials (KIP-554) and client quotas (KIP-546):
//! UserScramCredentialRecord, RemoveUserScramCredentialRecord and
//! ClientQuotaRecord, and the records a snapshot writes back for them.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::MetadataImage;
use crate::kraft_records::{
    ClientQuotaRecord, EntityData, MetadataRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord,
};

/// Kafka's `ClientQuotaEntity` types.
pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// A quota entity: each entity type it names, with a name or `None` for
/// that type's default.
pub type QuotaEntity = BTreeMap<String, Option<String>>;

/// What the brokers keep for one user and mechanism: never the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredentialImage {
    pub salt: Bytes,
    pub stored_key: Bytes,
    pub server_key: Bytes,
    pub iterations: i32,
}

impl MetadataImage {
    /// The credential of `user` for SCRAM mechanism id `mechanism`
    /// (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    pub fn scram_credential(&self, user: &str, mechanism: i8) -> Option<&ScramCredentialImage> {
        self.scram.get(user)?.get(&mechanism)
    }

    /// Every user with a credential, and their credentials by mechanism id.
    pub fn scram_users(&self) -> impl Iterator<Item = (&String, &BTreeMap<i8, ScramCredentialImage>)> {
        self.scram.iter()
    }

    /// Whether any client or IP quota is set: the fast path of every request.
    pub fn has_client_quotas(&self) -> bool {
        !self.client_quotas.is_empty()
    }

    /// The quotas set on exactly `entity`.
    pub fn client_quotas(&self, entity: &QuotaEntity) -> BTreeMap<String, f64> {
        self.client_quotas.get(entity).map(decode_values).unwrap_or_default()
    }

    /// Every entity with a quota, and its quotas.
    pub fn all_client_quotas(&self) -> impl Iterator<Item = (&QuotaEntity, BTreeMap<String, f64>)> {
        self.client_quotas.iter().map(|(entity, values)| (entity, decode_values(values)))
    }

    pub(super) fn apply_scram_credential(&mut self, r: UserScramCredentialRecord) {
        let credential = ScramCredentialImage {
            salt: r.salt,
            stored_key: r.stored_key,
            server_key: r.server_key,
            iterations: r.iterations,
        };
        self.scram.entry(r.name).or_default().insert(r.mechanism, credential);
    }

    pub(super) fn apply_remove_scram_credential(&mut self, r: RemoveUserScramCredentialRecord) {
        let Some(mechanisms) = self.scram.get_mut(&r.name) else { return };
        mechanisms.remove(&r.mechanism);
        if mechanisms.is_empty() {
            self.scram.remove(&r.name);
        }
    }

    pub(super) fn apply_client_quota(&mut self, r: ClientQuotaRecord) {
        let entity: QuotaEntity = r.entity.into_iter().map(|e| (e.entity_type, e.entity_name)).collect();
        if r.remove {
            let Some(values) = self.client_quotas.get_mut(&entity) else { return };
            values.remove(&r.key);
            if values.is_empty() {
                self.client_quotas.remove(&entity);
            }
        } else {
            self.client_quotas.entry(entity).or_default().insert(r.key, r.value.to_bits());
        }
    }
}

fn decode_values(values: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    values.iter().map(|(key, bits)| (key.clone(), f64::from_bits(*bits))).collect()
}

/// The ClientQuotaRecord that sets (`Some`) or removes (`None`) one quota.
pub fn client_quota_record(entity: &QuotaEntity, key: &str, value: Option<f64>) -> ClientQuotaRecord {
    ClientQuotaRecord {
        entity: entity
            .iter()
            .map(|(entity_type, entity_name)| EntityData {
                entity_type: entity_type.clone(),
                entity_name: entity_name.clone(),
                ..Default::default()
            })
            .collect(),
        key: key.to_owned(),
        value: value.unwrap_or(0.0),
        remove: value.is_none(),
        ..Default::default()
    }
}

/// The UserScramCredentialRecord of `credential`.
pub fn scram_credential_record(
    user: &str,
    mechanism: i8,
    credential: &ScramCredentialImage,
) -> UserScramCredentialRecord {
    UserScramCredentialRecord {
        name: user.to_owned(),
        mechanism,
        salt: credential.salt.clone(),
        stored_key: credential.stored_key.clone(),
        server_key: credential.server_key.clone(),
        iterations: credential.iterations,
        ..Default::default()
    }
}

/// The records of the image's credentials and quotas, for a snapshot.
pub(super) fn snapshot_records(image: &MetadataImage) -> Vec<MetadataRecord> {
    let mut records: Vec<MetadataRecord> = Vec::new();
    for (user, mechanisms) in &image.scram {
        records.extend(mechanisms.iter().map(|(m, c)| scram_credential_record(user, *m, c).into()));
    }
    for (entity, values) in image.all_client_quotas() {
        records
            .extend(values.iter().map(|(key, value)| client_quota_record(entity, key, Some(*value)).into()));
    }
    records
}
