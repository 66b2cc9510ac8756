//! Client quotas (DescribeClientQuotas, AlterClientQuotas) and SCRAM
//! credentials (DescribeUserScramCredentials, AlterUserScramCredentials),
//! as Java's `Admin.describeClientQuotas` and friends.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    alter_client_quotas_request, describe_client_quotas_request, AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest, DescribeClientQuotasRequest, DescribeUserScramCredentialsRequest,
};

use super::{first_item_error, str_bytes, Admin};
use crate::error::{Error, Result};

/// A quota entity: entity type (`user`, `client-id`, `ip`) to name, `None`
/// for the type's default.
pub type QuotaEntity = BTreeMap<String, Option<String>>;

/// How a describe filter matches one entity type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaMatch {
    Exact(String),
    Default,
    /// Any entity of the type, named or default.
    Any,
}

/// A SCRAM credential change for one user and mechanism (Kafka's
/// `ScramMechanism` id: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
#[derive(Debug, Clone)]
pub enum ScramChange {
    Delete { user: String, mechanism: i8 },
    Upsert { user: String, mechanism: i8, iterations: i32, salt: Vec<u8>, salted_password: Vec<u8> },
}

impl Admin {
    /// DescribeClientQuotas: the quotas of every entity matching `filter`
    /// (with `strict`, entities of no other types).
    pub async fn describe_client_quotas(
        &self,
        filter: &[(String, QuotaMatch)],
        strict: bool,
    ) -> Result<Vec<(QuotaEntity, BTreeMap<String, f64>)>> {
        use describe_client_quotas_request::ComponentData;
        let components = filter.iter().map(|(entity_type, m)| {
            let (match_type, name) = match m {
                QuotaMatch::Exact(name) => (0, Some(str_bytes(name))),
                QuotaMatch::Default => (1, None),
                QuotaMatch::Any => (2, None),
            };
            ComponentData::default()
                .with_entity_type(str_bytes(entity_type))
                .with_match_type(match_type)
                .with_match(name)
        });
        let request =
            DescribeClientQuotasRequest::default().with_components(components.collect()).with_strict(strict);
        let cluster = self.cluster();
        let response = cluster
            .with_retries("DescribeClientQuotas", || async {
                cluster.any_connection().await?.send(&request).await
            })
            .await?;
        if let Some(e) = Error::from_code(response.error_code, response.error_message.as_deref()) {
            return Err(e);
        }
        Ok(response
            .entries
            .unwrap_or_default()
            .into_iter()
            .map(|entry| {
                let entity = entry
                    .entity
                    .into_iter()
                    .map(|e| (e.entity_type.to_string(), e.entity_name.map(|n| n.to_string())))
                    .collect();
                let values = entry.values.into_iter().map(|v| (v.key.to_string(), v.value)).collect();
                (entity, values)
            })
            .collect())
    }

    /// AlterClientQuotas of one entity: per key a new value, or `None` to remove it.
    pub async fn alter_client_quotas(
        &self,
        entity: &QuotaEntity,
        ops: &[(String, Option<f64>)],
        validate_only: bool,
    ) -> Result<()> {
        use alter_client_quotas_request::{EntityData, EntryData, OpData};
        let entity = entity.iter().map(|(entity_type, name)| {
            EntityData::default()
                .with_entity_type(str_bytes(entity_type))
                .with_entity_name(name.as_deref().map(str_bytes))
        });
        let ops = ops.iter().map(|(key, value)| {
            OpData::default()
                .with_key(str_bytes(key))
                .with_value(value.unwrap_or(0.0))
                .with_remove(value.is_none())
        });
        let request = AlterClientQuotasRequest::default()
            .with_entries(vec![EntryData::default().with_entity(entity.collect()).with_ops(ops.collect())])
            .with_validate_only(validate_only);
        let response = self.to_controller("AlterClientQuotas", &request).await?;
        first_item_error(response.entries.iter().map(|e| (e.error_code, e.error_message.as_ref())))
    }

    /// DescribeUserScramCredentials: each user's mechanisms and iterations;
    /// `users` empty means every user with a credential.
    pub async fn describe_user_scram_credentials(
        &self,
        users: &[String],
    ) -> Result<Vec<(String, Vec<(i8, i32)>)>> {
        let names = (!users.is_empty())
            .then(|| users.iter().map(|u| UserName::default().with_name(str_bytes(u))).collect());
        let request = DescribeUserScramCredentialsRequest::default().with_users(names);
        let cluster = self.cluster();
        let response = cluster
            .with_retries("DescribeUserScramCredentials", || async {
                cluster.any_connection().await?.send(&request).await
            })
            .await?;
        if let Some(e) = Error::from_code(response.error_code, response.error_message.as_deref()) {
            return Err(e);
        }
        let mut described = Vec::new();
        for result in response.results {
            // A named user without credentials is not an error to show.
            if result.error_code == kafka_protocol::error::ResponseError::ResourceNotFound.code() {
                continue;
            }
            if let Some(e) = Error::from_code(result.error_code, result.error_message.as_deref()) {
                return Err(e);
            }
            let infos = result.credential_infos.iter().map(|c| (c.mechanism, c.iterations)).collect();
            described.push((result.user.to_string(), infos));
        }
        Ok(described)
    }

    /// AlterUserScramCredentials.
    pub async fn alter_user_scram_credentials(&self, changes: &[ScramChange]) -> Result<()> {
        let mut request = AlterUserScramCredentialsRequest::default();
        for change in changes {
            match change {
                ScramChange::Delete { user, mechanism } => request.deletions.push(
                    ScramCredentialDeletion::default().with_name(str_bytes(user)).with_mechanism(*mechanism),
                ),
                ScramChange::Upsert { user, mechanism, iterations, salt, salted_password } => {
                    request.upsertions.push(
                        ScramCredentialUpsertion::default()
                            .with_name(str_bytes(user))
                            .with_mechanism(*mechanism)
                            .with_iterations(*iterations)
                            .with_salt(salt.clone().into())
                            .with_salted_password(salted_password.clone().into()),
                    )
                }
            }
        }
        let response = self.to_controller("AlterUserScramCredentials", &request).await?;
        first_item_error(response.results.iter().map(|r| (r.error_code, r.error_message.as_ref())))
    }
}
