//! AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554):
//! SCRAM credentials in the metadata log, read by every SASL listener.

use std::collections::HashSet;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use strom_metadata::image::ScramCredentialImage;
use strom_metadata::operations::{ScramAlteration, UserOutcome};
use strom_metadata::MetadataImage;

use super::str_bytes;
use crate::dispatch::RequestContext;
use crate::error::metadata_error;
use crate::security::sasl::scram::{ScramCredential, ScramMechanism};

pub async fn alter(
    ctx: &RequestContext<'_>,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    if !ctx.authorize_cluster(strom_metadata::acl::operation::ALTER) {
        return failed(&request, ResponseError::ClusterAuthorizationFailed);
    }
    let deletions = request
        .deletions
        .into_iter()
        .map(|d| ScramAlteration::Delete { user: d.name.to_string(), mechanism: d.mechanism });
    let upsertions = request.upsertions.into_iter().map(|u| ScramAlteration::Upsert {
        user: u.name.to_string(),
        mechanism: u.mechanism,
        credential: credential_of(u.mechanism, &u.salted_password, &u.salt, u.iterations),
    });
    let alterations: Vec<ScramAlteration> = deletions.chain(upsertions).collect();
    let outcomes: Vec<UserOutcome> = match ctx.controller().alter_scram_credentials(&alterations).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            // The write failed: every user gets its error.
            let (code, message) = (metadata_error(&e).code(), e.to_string());
            tracing::warn!("SCRAM credential change not written: {message}");
            let results = users_of(&alterations).into_iter().map(|user| {
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(&user))
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(&message)))
            });
            return AlterUserScramCredentialsResponse::default().with_results(results.collect());
        }
    };
    let results = outcomes.into_iter().map(|(user, outcome)| {
        let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
        match outcome {
            Ok(()) => result,
            Err(e) => {
                tracing::info!(%user, "SCRAM credential change refused: {e}");
                result
                    .with_error_code(metadata_error(&e).code())
                    .with_error_message(Some(str_bytes(&e.to_string())))
            }
        }
    });
    AlterUserScramCredentialsResponse::default().with_results(results.collect())
}

/// Every user of the request failing with `error`.
pub fn failed(
    request: &AlterUserScramCredentialsRequest,
    error: ResponseError,
) -> AlterUserScramCredentialsResponse {
    let deleted = request.deletions.iter().map(|d| d.name.to_string());
    let names = deleted.chain(request.upsertions.iter().map(|u| u.name.to_string()));
    let mut seen = HashSet::new();
    let results = names.filter(|name| seen.insert(name.clone())).map(|user| {
        AlterUserScramCredentialsResult::default().with_user(str_bytes(&user)).with_error_code(error.code())
    });
    AlterUserScramCredentialsResponse::default().with_results(results.collect())
}

/// The keys the server keeps, derived from the client's salted password.
/// An unknown mechanism or bad numbers leave the keys empty; the controller
/// refuses them with Kafka's error.
fn credential_of(
    mechanism: i8,
    salted_password: &Bytes,
    salt: &Bytes,
    iterations: i32,
) -> ScramCredentialImage {
    let derived = ScramMechanism::from_id(mechanism)
        .filter(|_| !salted_password.is_empty() && !salt.is_empty())
        .zip(u32::try_from(iterations).ok())
        .map(|(m, n)| ScramCredential::from_salted_password(m, salted_password, salt, n));
    match derived {
        Some(c) => ScramCredentialImage {
            salt: Bytes::from(c.salt),
            stored_key: Bytes::from(c.stored_key),
            server_key: Bytes::from(c.server_key),
            iterations,
        },
        None => ScramCredentialImage {
            salt: salt.clone(),
            stored_key: Bytes::new(),
            server_key: Bytes::new(),
            iterations,
        },
    }
}

fn users_of(alterations: &[ScramAlteration]) -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    for a in alterations {
        let user = match a {
            ScramAlteration::Delete { user, .. } | ScramAlteration::Upsert { user, .. } => user,
        };
        if !users.contains(user) {
            users.push(user.clone());
        }
    }
    users
}

pub fn describe(
    ctx: &RequestContext<'_>,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let image = ctx.controller().image();
    let results = match request.users {
        // Null or empty: every user with a credential.
        None => all_users(&image),
        Some(users) if users.is_empty() => all_users(&image),
        Some(users) => {
            let names: Vec<String> = users.into_iter().map(|u| u.name.to_string()).collect();
            let mut seen = HashSet::new();
            let duplicates: HashSet<&String> = names.iter().filter(|n| !seen.insert(*n)).collect();
            let mut described = HashSet::new();
            names
                .iter()
                .filter(|n| described.insert(*n))
                .map(|name| match duplicates.contains(name) {
                    true => failure(
                        name,
                        ResponseError::DuplicateResource,
                        "Cannot describe SCRAM credentials for the same user twice in a single request",
                    ),
                    false => describe_user(&image, name),
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

fn all_users(image: &MetadataImage) -> Vec<DescribeUserScramCredentialsResult> {
    image.scram_users().map(|(user, _)| describe_user(image, user)).collect()
}

fn describe_user(image: &MetadataImage, user: &str) -> DescribeUserScramCredentialsResult {
    let infos: Vec<CredentialInfo> = image
        .scram_users()
        .filter(|(name, _)| name.as_str() == user)
        .flat_map(|(_, mechanisms)| mechanisms.iter())
        .map(|(mechanism, c)| {
            CredentialInfo::default().with_mechanism(*mechanism).with_iterations(c.iterations)
        })
        .collect();
    if infos.is_empty() {
        return failure(
            user,
            ResponseError::ResourceNotFound,
            "Attempt to describe a user credential that does not exist",
        );
    }
    DescribeUserScramCredentialsResult::default().with_user(str_bytes(user)).with_credential_infos(infos)
}

fn failure(user: &str, error: ResponseError, message: &str) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(str_bytes(user))
        .with_error_code(error.code())
        .with_error_message(Some(str_bytes(message)))
}
