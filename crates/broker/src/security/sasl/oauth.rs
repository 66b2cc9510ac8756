//! SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768) as Kafka's
//! `OAuthBearerSaslServer`.
//!
//! The client's first message carries `auth=Bearer <token>`. A token that
//! fails validation is answered with a JSON error challenge
//! (`{"status":"invalid_token"}`); the client acknowledges it with a lone
//! `0x01` and the exchange fails with that JSON as the message.
//!
//! Tokens are validated one of two ways:
//! - unsecured JWS (`alg: none`, for development), as Kafka's
//!   `OAuthBearerUnsecuredValidatorCallbackHandler`, with its JAAS options
//!   `unsecuredValidatorPrincipalClaimName`, `unsecuredValidatorScopeClaimName`,
//!   `unsecuredValidatorRequiredScope`, `unsecuredValidatorAllowableClockSkewMs`;
//! - signed JWTs (RS256, ES256) checked against a JWKS file (read again
//!   when it changes) or HTTP(S) endpoint (refreshed, see
//!   [`super::jwks_endpoint`]), as Kafka's
//!   `OAuthBearerValidatorCallbackHandler`, when
//!   `sasl.oauthbearer.jwks.endpoint.url` names one (`file:`, `http:` or
//!   `https:` URL, or a path),
//!   with `sasl.oauthbearer.expected.audience`, `.expected.issuer`,
//!   `.scope.claim.name`, `.sub.claim.name` and `.clock.skew.seconds`.
//!
//! Either way the principal is the subject claim and the session may last
//! until the token's `exp`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64URL;
use base64::Engine;
use serde_json::Value;

use super::{Failure, Mechanism, MechanismServer, Step};

/// How tokens are checked.
#[derive(Debug)]
pub enum Validator {
    Unsecured(UnsecuredOptions),
    Signed(SignedOptions),
}

#[derive(Debug, Clone)]
pub struct UnsecuredOptions {
    pub principal_claim: String,
    pub scope_claim: String,
    pub required_scope: Vec<String>,
    pub clock_skew_ms: i64,
}

impl UnsecuredOptions {
    pub fn from_jaas(options: &BTreeMap<String, String>) -> Result<Self, String> {
        let get =
            |key: &str, default: &str| options.get(key).map_or(default, String::as_str).trim().to_owned();
        let skew = get("unsecuredValidatorAllowableClockSkewMs", "0");
        Ok(Self {
            principal_claim: get("unsecuredValidatorPrincipalClaimName", "sub"),
            scope_claim: get("unsecuredValidatorScopeClaimName", "scope"),
            required_scope: get("unsecuredValidatorRequiredScope", "")
                .split_whitespace()
                .flat_map(|s| s.split(','))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            clock_skew_ms: skew.parse().ok().filter(|ms: &i64| *ms >= 0).ok_or_else(|| {
                format!("unsecuredValidatorAllowableClockSkewMs: {skew:?} is not a non-negative number")
            })?,
        })
    }
}

#[derive(Debug)]
pub struct SignedOptions {
    pub keys: Jwks,
    pub expected_audience: Vec<String>,
    pub expected_issuer: Option<String>,
    pub scope_claim: String,
    pub sub_claim: String,
    pub clock_skew_ms: i64,
}

/// One public key of a JWKS.
#[derive(Debug, Clone)]
pub struct Jwk {
    pub kid: Option<String>,
    pub key: PublicKey,
}

#[derive(Debug, Clone)]
pub enum PublicKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed P-256 point: `04 || x || y`.
    EcP256(Vec<u8>),
}

/// The keys signed tokens are checked against: fixed, or a JWKS file that
/// is read again when it changes (a rotated key is used without a
/// restart; a file that no longer parses keeps the keys read before).
#[derive(Debug)]
pub struct Jwks {
    /// Set for a JWKS served over HTTP(S): it keeps its own keys.
    endpoint: Option<Arc<super::jwks_endpoint::EndpointJwks>>,
    path: Option<PathBuf>,
    /// The file's modification time and length when `keys` were read.
    loaded: Mutex<(Option<SystemTime>, u64, Arc<Vec<Jwk>>)>,
}

impl Jwks {
    pub fn fixed(keys: Vec<Jwk>) -> Self {
        Self { endpoint: None, path: None, loaded: Mutex::new((None, 0, Arc::new(keys))) }
    }

    /// The keys of a JWKS endpoint, which refreshes them itself.
    pub fn endpoint(endpoint: Arc<super::jwks_endpoint::EndpointJwks>) -> Self {
        Self { endpoint: Some(endpoint), ..Self::fixed(Vec::new()) }
    }

    /// A token named key id `kid` that no key has: an endpoint is asked
    /// again (rate limited); a file is read again when it changes anyway.
    pub fn missing_kid(&self, kid: &str) {
        if let Some(endpoint) = &self.endpoint {
            endpoint.missing_kid(kid);
        }
    }

    /// Reads the JWKS file at `path`.
    pub fn file(path: &Path) -> Result<Self, String> {
        let (modified, len) =
            Self::stamp(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let keys = Arc::new(parse_jwks(&text)?);
        Ok(Self { endpoint: None, path: Some(path.to_owned()), loaded: Mutex::new((modified, len, keys)) })
    }

    fn stamp(path: &Path) -> std::io::Result<(Option<SystemTime>, u64)> {
        let metadata = std::fs::metadata(path)?;
        Ok((metadata.modified().ok(), metadata.len()))
    }

    /// The current keys, re-read first if the file changed.
    pub fn keys(&self) -> Arc<Vec<Jwk>> {
        if let Some(endpoint) = &self.endpoint {
            return endpoint.keys();
        }
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = &self.path else { return loaded.2.clone() };
        let Ok((modified, len)) = Self::stamp(path) else { return loaded.2.clone() };
        if (modified, len) == (loaded.0, loaded.1) {
            return loaded.2.clone();
        }
        match std::fs::read_to_string(path).map_err(|e| e.to_string()).and_then(|text| parse_jwks(&text)) {
            Ok(keys) => {
                tracing::info!(path = %path.display(), keys = keys.len(), "JWKS changed: reloaded");
                *loaded = (modified, len, Arc::new(keys));
            }
            Err(e) => {
                tracing::error!(path = %path.display(), "JWKS changed but does not load; keeping the previous keys: {e}");
                // Do not retry until the file changes again.
                (loaded.0, loaded.1) = (modified, len);
            }
        }
        loaded.2.clone()
    }
}

/// Reads the keys of a JWKS document; keys of other types are skipped.
pub fn parse_jwks(text: &str) -> Result<Vec<Jwk>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("the JWKS is not JSON: {e}"))?;
    let keys = doc.get("keys").and_then(Value::as_array).ok_or("the JWKS has no \"keys\" array")?;
    let field = |key: &Value, name: &str| -> Result<Vec<u8>, String> {
        let text = key.get(name).and_then(Value::as_str).ok_or_else(|| format!("a JWK lacks {name}"))?;
        BASE64URL.decode(text.trim_end_matches('=')).map_err(|_| format!("a JWK's {name} is not base64url"))
    };
    let mut parsed = Vec::new();
    for key in keys {
        let kid = key.get("kid").and_then(Value::as_str).map(str::to_owned);
        let public = match (key.get("kty").and_then(Value::as_str), key.get("crv").and_then(Value::as_str)) {
            (Some("RSA"), _) => PublicKey::Rsa { n: field(key, "n")?, e: field(key, "e")? },
            (Some("EC"), Some("P-256")) => {
                let (x, y) = (field(key, "x")?, field(key, "y")?);
                if x.len() != 32 || y.len() != 32 {
                    return Err("a P-256 JWK's coordinates must be 32 bytes".into());
                }
                PublicKey::EcP256([&[4u8][..], &x, &y].concat())
            }
            _ => continue,
        };
        parsed.push(Jwk { kid, key: public });
    }
    if parsed.is_empty() {
        return Err("the JWKS holds no RSA or P-256 key".into());
    }
    Ok(parsed)
}

/// A validated token: who it names, and until when.
#[derive(Debug, PartialEq)]
pub struct ValidToken {
    pub principal: String,
    pub expires_ms: i64,
}

/// Why a token was refused: the status Kafka reports and a reason for the log.
#[derive(Debug, PartialEq)]
pub struct Invalid {
    pub status: &'static str,
    pub reason: String,
    pub scope: Option<String>,
}

fn invalid(reason: impl Into<String>) -> Invalid {
    Invalid { status: "invalid_token", reason: reason.into(), scope: None }
}

impl Validator {
    /// Validates `token` at `now_ms`.
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidToken, Invalid> {
        match self {
            Self::Unsecured(options) => validate_unsecured(options, token, now_ms),
            Self::Signed(options) => validate_signed(options, token, now_ms),
        }
    }
}

/// Splits a compact JWS into its decoded header, claims and signature.
fn split_jws(token: &str) -> Result<(Value, Value, Vec<u8>), Invalid> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(invalid(format!("a JWS has 3 dot-separated parts, not {}", parts.len())));
    };
    let json = |part: &str, what: &str| -> Result<Value, Invalid> {
        let bytes = BASE64URL.decode(part).map_err(|_| invalid(format!("the {what} is not base64url")))?;
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|_| invalid(format!("the {what} is not JSON")))?;
        if !value.is_object() {
            return Err(invalid(format!("the {what} is not a JSON object")));
        }
        Ok(value)
    };
    let signature = BASE64URL.decode(signature).map_err(|_| invalid("the signature is not base64url"))?;
    Ok((json(header, "header")?, json(claims, "claims")?, signature))
}

/// The checks both validators make on the claims: subject, expiry,
/// issued-at and scope.
fn check_claims(
    claims: &Value,
    principal_claim: &str,
    scope_claim: &str,
    required_scope: &[String],
    skew_ms: i64,
    now_ms: i64,
) -> Result<ValidToken, Invalid> {
    let principal = match claims.get(principal_claim) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(invalid(format!(
                "the required claim {principal_claim} is missing or not a non-empty string"
            )))
        }
    };
    let seconds = |name: &str| claims.get(name).map(|v| v.as_f64().map(|s| (s * 1000.0) as i64));
    let expires_ms = match seconds("exp") {
        Some(Some(ms)) => ms,
        _ => return Err(invalid("the required claim exp is missing or not a number")),
    };
    if now_ms > expires_ms.saturating_add(skew_ms) {
        return Err(invalid(format!("the token expired at {expires_ms} ms, now is {now_ms} ms")));
    }
    match seconds("iat") {
        None => {}
        Some(None) => return Err(invalid("the claim iat is not a number")),
        Some(Some(issued_ms)) if issued_ms > now_ms.saturating_add(skew_ms) => {
            return Err(invalid("the token was issued in the future"))
        }
        Some(Some(issued_ms)) if issued_ms > expires_ms => {
            return Err(invalid("the token expires before it was issued"))
        }
        Some(Some(_)) => {}
    }
    let scope: Vec<String> = match claims.get(scope_claim) {
        None => Vec::new(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(_) => return Err(invalid(format!("the claim {scope_claim} is neither a string nor a list"))),
    };
    if let Some(missing) = required_scope.iter().find(|s| !scope.contains(s)) {
        return Err(Invalid {
            status: "insufficient_scope",
            reason: format!("the token's scope {scope:?} lacks the required scope {missing}"),
            scope: Some(required_scope.join(" ")),
        });
    }
    Ok(ValidToken { principal, expires_ms })
}

fn validate_unsecured(options: &UnsecuredOptions, token: &str, now_ms: i64) -> Result<ValidToken, Invalid> {
    let (header, claims, signature) = split_jws(token)?;
    if header.get("alg").and_then(Value::as_str) != Some("none") || !signature.is_empty() {
        return Err(invalid("an unsecured JWS must have alg none and no signature"));
    }
    let UnsecuredOptions { principal_claim, scope_claim, required_scope, clock_skew_ms } = options;
    check_claims(&claims, principal_claim, scope_claim, required_scope, *clock_skew_ms, now_ms)
}

fn validate_signed(options: &SignedOptions, token: &str, now_ms: i64) -> Result<ValidToken, Invalid> {
    let (header, claims, signature) = split_jws(token)?;
    let signed_part = &token[..token.rfind('.').expect("three parts")];
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    let kid = header.get("kid").and_then(Value::as_str);
    let fits = |jwk: &&Jwk| match (alg, &jwk.key) {
        ("RS256", PublicKey::Rsa { .. }) | ("ES256", PublicKey::EcP256(_)) => {
            kid.is_none() || jwk.kid.as_deref() == kid
        }
        _ => false,
    };
    let keys = options.keys.keys();
    let verified = keys.iter().filter(fits).any(|jwk| verify(&jwk.key, signed_part.as_bytes(), &signature));
    if !verified {
        if let Some(kid) = kid.filter(|kid| !keys.iter().any(|jwk| jwk.kid.as_deref() == Some(*kid))) {
            options.keys.missing_kid(kid);
        }
        return Err(invalid(format!("no key of the JWKS verifies the {alg} signature (kid {kid:?})")));
    }
    if let Some(issuer) = &options.expected_issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(issuer) {
            return Err(invalid(format!("the issuer is not {issuer}")));
        }
    }
    if !options.expected_audience.is_empty() {
        let audience: Vec<&str> = match claims.get("aud") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audience.iter().any(|a| options.expected_audience.iter().any(|e| e == a)) {
            return Err(invalid(format!("the audience {audience:?} is not one expected")));
        }
    }
    check_claims(&claims, &options.sub_claim, &options.scope_claim, &[], options.clock_skew_ms, now_ms)
}

fn verify(key: &PublicKey, message: &[u8], signature: &[u8]) -> bool {
    use ring::signature;
    match key {
        PublicKey::Rsa { n, e } => signature::RsaPublicKeyComponents { n, e }
            .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
            .is_ok(),
        PublicKey::EcP256(point) => {
            signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(message, signature)
                .is_ok()
        }
    }
}

/// The parts of the client's first message.
#[derive(Debug, PartialEq)]
pub struct InitialResponse {
    pub authorization_id: String,
    pub token: String,
}

/// Parses `n,[a=authzid],\x01auth=Bearer <token>\x01[key=value\x01...]\x01`.
pub fn parse_initial_response(message: &[u8]) -> Result<InitialResponse, String> {
    let text = std::str::from_utf8(message).map_err(|_| "not UTF-8")?;
    let rest = text.strip_prefix("n,").ok_or("invalid GS2 header")?;
    let (authzid, rest) = rest.split_once(',').ok_or("invalid GS2 header")?;
    let authorization_id = match authzid {
        "" => String::new(),
        _ => authzid.strip_prefix("a=").ok_or("invalid authorization id")?.to_owned(),
    };
    let pairs = rest
        .strip_prefix('\x01')
        .and_then(|r| r.strip_suffix("\x01\x01"))
        .ok_or("key-value pairs must be separated by 0x01 and end with 0x01 0x01")?;
    let mut token = None;
    for pair in pairs.split('\x01') {
        let (key, value) = pair.split_once('=').ok_or("invalid key-value pair")?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err("invalid key in key-value pair".into());
        }
        if key == "auth" {
            let bearer = value.strip_prefix("Bearer").ok_or("auth must be Bearer <token>")?;
            let value = bearer.trim_start_matches(' ');
            if value.len() == bearer.len() || value.is_empty() {
                return Err("auth must be Bearer <token>".into());
            }
            token = Some(value.to_owned());
        }
    }
    let token = token.ok_or("no auth key in the message")?;
    Ok(InitialResponse { authorization_id, token })
}

/// One OAUTHBEARER exchange.
pub struct OAuthServer {
    validator: Arc<Validator>,
    /// The JSON error sent as a challenge, awaiting the client's 0x01.
    error: Option<String>,
}

impl OAuthServer {
    pub fn new(validator: Arc<Validator>) -> Self {
        Self { validator, error: None }
    }
}

impl MechanismServer for OAuthServer {
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure> {
        if let Some(error) = self.error.take() {
            // Whatever the client answers, the exchange has failed.
            return Err(Failure::new(Mechanism::OAuthBearer, error));
        }
        let initial = parse_initial_response(token).map_err(|e| {
            Failure::invalid_credentials(Mechanism::OAuthBearer, format!("invalid OAUTHBEARER message: {e}"))
        })?;
        let now_ms = super::now_ms();
        let valid = match self.validator.validate(&initial.token, now_ms) {
            Ok(valid) => valid,
            Err(refused) => {
                tracing::debug!(status = refused.status, "OAUTHBEARER token refused: {}", refused.reason);
                let mut error = serde_json::json!({ "status": refused.status });
                if let Some(scope) = refused.scope {
                    error["scope"] = Value::String(scope);
                }
                let error = error.to_string();
                self.error = Some(error.clone());
                return Ok(Step::Challenge(error.into_bytes()));
            }
        };
        if !initial.authorization_id.is_empty() && initial.authorization_id != valid.principal {
            let message = format!(
                "Authentication failed: Client requested an authorization id ({}) that is different from the token's principal name ({})",
                initial.authorization_id, valid.principal
            );
            return Err(Failure::new(Mechanism::OAuthBearer, message));
        }
        let lifetime_ms = valid.expires_ms.saturating_sub(now_ms).max(0);
        Ok(Step::Done { response: Vec::new(), user: valid.principal, lifetime_ms: Some(lifetime_ms) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_700_000_000_000;

    fn unsecured(claims: &str) -> String {
        format!("{}.{}.", BASE64URL.encode(r#"{"alg":"none"}"#), BASE64URL.encode(claims))
    }

    fn options() -> UnsecuredOptions {
        UnsecuredOptions::from_jaas(&BTreeMap::new()).unwrap()
    }

    #[test]
    fn unsecured_tokens_need_a_subject_and_a_future_expiry() {
        let validator = Validator::Unsecured(options());
        let exp = NOW_MS / 1000 + 60;
        let good = unsecured(&format!(r#"{{"sub":"alice","exp":{exp},"iat":{}}}"#, NOW_MS / 1000));
        assert_eq!(
            validator.validate(&good, NOW_MS).unwrap(),
            ValidToken { principal: "alice".into(), expires_ms: exp * 1000 }
        );
        let bad = [
            unsecured(&format!(r#"{{"sub":"alice","exp":{}}}"#, NOW_MS / 1000 - 1)),
            unsecured(r#"{"sub":"alice"}"#),
            unsecured(&format!(r#"{{"exp":{exp}}}"#)),
            unsecured(&format!(r#"{{"sub":"","exp":{exp}}}"#)),
            unsecured(&format!(r#"{{"sub":"a","exp":{exp},"iat":{}}}"#, exp + 10)),
            unsecured(&format!(r#"{{"sub":"a","exp":"{exp}"}}"#)),
            format!(
                "{}.{}.",
                BASE64URL.encode(r#"{"alg":"RS256"}"#),
                BASE64URL.encode(r#"{"sub":"a","exp":9999999999}"#)
            ),
            "a.b".into(),
            "!!.!!.".into(),
            format!("{}.{}.", BASE64URL.encode("[1]"), BASE64URL.encode("{}")),
            format!(
                "{}.{}.AAAA",
                BASE64URL.encode(r#"{"alg":"none"}"#),
                BASE64URL.encode(r#"{"sub":"a","exp":9999999999}"#)
            ),
        ];
        for token in bad {
            assert!(validator.validate(&token, NOW_MS).is_err(), "{token} accepted");
        }
    }

    #[test]
    fn required_scope_and_clock_skew_follow_the_jaas_options() {
        let jaas = BTreeMap::from([
            ("unsecuredValidatorRequiredScope".to_owned(), "read write".to_owned()),
            ("unsecuredValidatorAllowableClockSkewMs".to_owned(), "5000".to_owned()),
            ("unsecuredValidatorPrincipalClaimName".to_owned(), "user".to_owned()),
        ]);
        let validator = Validator::Unsecured(UnsecuredOptions::from_jaas(&jaas).unwrap());
        let exp = NOW_MS / 1000 - 2; // expired 2 s ago, within the 5 s skew
        let ok = unsecured(&format!(r#"{{"user":"bob","exp":{exp},"scope":["read","write"]}}"#));
        assert_eq!(validator.validate(&ok, NOW_MS).unwrap().principal, "bob");
        let narrow = unsecured(&format!(r#"{{"user":"bob","exp":{exp},"scope":"read"}}"#));
        assert_eq!(validator.validate(&narrow, NOW_MS).unwrap_err().status, "insufficient_scope");
    }

    /// A fresh P-256 key pair and a JWKS document holding its public key as `kid`.
    fn ec_key(kid: &str) -> (ring::signature::EcdsaKeyPair, String) {
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let jwks = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"{kid}","x":"{}","y":"{}"}}]}}"#,
            BASE64URL.encode(&point[1..33]),
            BASE64URL.encode(&point[33..])
        );
        (pair, jwks)
    }

    #[test]
    fn a_jwks_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        let (_, first) = ec_key("first");
        std::fs::write(&path, &first).unwrap();
        let jwks = Jwks::file(&path).unwrap();
        assert_eq!(jwks.keys()[0].kid.as_deref(), Some("first"));
        let (_, second) = ec_key("second-key");
        std::fs::write(&path, &second).unwrap();
        assert_eq!(jwks.keys()[0].kid.as_deref(), Some("second-key"));
        std::fs::write(&path, "not json at all").unwrap();
        assert_eq!(jwks.keys()[0].kid.as_deref(), Some("second-key"), "a broken file keeps the keys");
        assert!(Jwks::file(&dir.path().join("missing.json")).is_err());
    }

    #[test]
    fn signed_tokens_are_checked_against_the_jwks() {
        let rng = ring::rand::SystemRandom::new();
        let (pair, jwks) = ec_key("k1");
        let options = SignedOptions {
            keys: Jwks::fixed(parse_jwks(&jwks).unwrap()),
            expected_audience: vec!["strom".into()],
            expected_issuer: Some("https://issuer".into()),
            scope_claim: "scope".into(),
            sub_claim: "sub".into(),
            clock_skew_ms: 30_000,
        };
        let validator = Validator::Signed(options);
        let sign = |claims: &str| {
            let signed =
                format!("{}.{}", BASE64URL.encode(r#"{"alg":"ES256","kid":"k1"}"#), BASE64URL.encode(claims));
            let signature = pair.sign(&rng, signed.as_bytes()).unwrap();
            format!("{signed}.{}", BASE64URL.encode(signature.as_ref()))
        };
        let exp = NOW_MS / 1000 + 60;
        let good = sign(&format!(r#"{{"sub":"carol","exp":{exp},"aud":"strom","iss":"https://issuer"}}"#));
        assert_eq!(validator.validate(&good, NOW_MS).unwrap().principal, "carol");
        let tampered = good.replace(&good[good.len() - 4..], "AAAA");
        assert!(validator.validate(&tampered, NOW_MS).is_err());
        let wrong_audience =
            sign(&format!(r#"{{"sub":"carol","exp":{exp},"aud":"other","iss":"https://issuer"}}"#));
        assert!(validator.validate(&wrong_audience, NOW_MS).is_err());
        let expired = sign(&format!(
            r#"{{"sub":"carol","exp":{},"aud":"strom","iss":"https://issuer"}}"#,
            NOW_MS / 1000 - 60
        ));
        assert!(validator.validate(&expired, NOW_MS).is_err());
        let unsigned =
            unsecured(&format!(r#"{{"sub":"carol","exp":{exp},"aud":"strom","iss":"https://issuer"}}"#));
        assert!(validator.validate(&unsigned, NOW_MS).is_err());
    }

    #[test]
    fn initial_responses_parse_strictly() {
        let ok = parse_initial_response(b"n,a=alice,\x01auth=Bearer abc.def.\x01ext=1\x01\x01").unwrap();
        assert_eq!(ok, InitialResponse { authorization_id: "alice".into(), token: "abc.def.".into() });
        for bad in [
            &b""[..],
            b"n,,",
            b"n,,\x01auth=Bearer x\x01",
            b"y,,\x01auth=Bearer x\x01\x01",
            b"n,,\x01auth=Basic x\x01\x01",
            b"n,,\x01auth=Bearerx\x01\x01",
            b"n,,\x01k1=v\x01\x01",
            b"n,,\x01noequals\x01\x01",
            b"n,,\x01x=y\x01\x01",
            b"\xff",
        ] {
            assert!(parse_initial_response(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_refused_token_gets_a_json_challenge_then_fails() {
        let mut server = OAuthServer::new(Arc::new(Validator::Unsecured(options())));
        let token = unsecured(r#"{"sub":"alice","exp":1}"#);
        let message = format!("n,,\x01auth=Bearer {token}\x01\x01");
        let Ok(Step::Challenge(challenge)) = server.step(message.as_bytes()) else { panic!("no challenge") };
        assert_eq!(challenge, br#"{"status":"invalid_token"}"#);
        let failure = server.step(b"\x01").err().unwrap();
        assert_eq!(failure.message, r#"{"status":"invalid_token"}"#);
    }
}
