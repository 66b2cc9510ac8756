//! A JWKS served over HTTP(S), kept fresh as Kafka's `RefreshingHttpsJwks`
//! keeps it: fetched once at start (the start fails without it), fetched
//! again every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, each fetch
//! retried with backoff (`…retry.backoff.ms` doubling up to
//! `…retry.backoff.max.ms`), and a failed refresh keeps the keys it had. A
//! token naming a key id the JWKS lacks asks for a refresh at once, at most
//! once a minute per key id and for a bounded number of ids, so a flood of
//! made-up ids cannot turn into a flood of requests to the identity
//! provider.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_rustls::TlsConnector;

use super::http_get::{self, HttpUrl};
use super::oauth::{parse_jwks, Jwk};

/// Kafka's `MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`.
const MISSING_KID_RETRY: Duration = Duration::from_secs(60);
/// Kafka's `MISSING_KEY_ID_CACHE_MAX_ENTRIES`.
const MISSING_KID_MAX_ENTRIES: usize = 16;
/// Kafka's `MISSING_KEY_ID_MAX_KEY_LENGTH`: longer ids are not chased.
const MISSING_KID_MAX_LENGTH: usize = 1000;

/// How often and how hard the JWKS is fetched.
#[derive(Debug, Clone, Copy)]
pub struct RefreshPolicy {
    pub refresh: Duration,
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
}

/// The keys of a JWKS endpoint, refreshed in the background.
pub struct EndpointJwks {
    url: HttpUrl,
    tls: Option<TlsConnector>,
    policy: RefreshPolicy,
    keys: Mutex<Arc<Vec<Jwk>>>,
    /// Unknown key ids and when a refresh may next be asked for them.
    missing_kids: Mutex<HashMap<String, Instant>>,
    expedite: Notify,
}

impl EndpointJwks {
    /// Fetches the JWKS (blocking the caller, as the broker's start waits
    /// for it) and, inside a tokio runtime, starts its refresher.
    pub fn start(
        url: HttpUrl,
        tls: Option<TlsConnector>,
        policy: RefreshPolicy,
    ) -> Result<Arc<Self>, String> {
        let jwks = Arc::new(Self {
            url,
            tls,
            policy,
            keys: Mutex::new(Arc::default()),
            missing_kids: Mutex::new(HashMap::new()),
            expedite: Notify::new(),
        });
        let first = std::thread::scope(|scope| {
            let fetch = || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                runtime.map_err(|e| e.to_string())?.block_on(jwks.fetch_with_retries())
            };
            scope.spawn(fetch).join().unwrap_or_else(|_| Err("the JWKS fetch panicked".into()))
        })?;
        *jwks.keys.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(first);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(refresh_loop(Arc::downgrade(&jwks)));
        }
        Ok(jwks)
    }

    pub fn keys(&self) -> Arc<Vec<Jwk>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A token named key id `kid`, which the keys lack: refresh now, unless
    /// this id asked within the last minute (Kafka's `maybeExpediteRefresh`).
    pub fn missing_kid(&self, kid: &str) {
        if kid.len() > MISSING_KID_MAX_LENGTH {
            tracing::warn!(length = kid.len(), "a token's key id is too long to look up");
            return;
        }
        let now = Instant::now();
        let mut missing = self.missing_kids.lock().unwrap_or_else(|e| e.into_inner());
        if missing.get(kid).is_some_and(|next| *next > now) {
            return;
        }
        missing.retain(|_, next| *next > now);
        if missing.len() >= MISSING_KID_MAX_ENTRIES {
            // Like Kafka's LRU cache: the entry that would be retried soonest goes.
            if let Some(oldest) = missing.iter().min_by_key(|(_, next)| **next).map(|(k, _)| k.clone()) {
                missing.remove(&oldest);
            }
        }
        missing.insert(kid.to_owned(), now + MISSING_KID_RETRY);
        drop(missing);
        tracing::info!(kid, "a token names a key the JWKS lacks: refreshing it");
        self.expedite.notify_one();
    }

    /// One refresh: new keys replace the old, a failure keeps them.
    async fn refresh(&self) {
        match self.fetch_with_retries().await {
            Ok(keys) => {
                let mut missing = self.missing_kids.lock().unwrap_or_else(|e| e.into_inner());
                for kid in keys.iter().filter_map(|key| key.kid.as_deref()) {
                    missing.remove(kid);
                }
                drop(missing);
                tracing::info!(url = %self.url_text(), keys = keys.len(), "JWKS refreshed");
                *self.keys.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
            }
            Err(e) => tracing::warn!(url = %self.url_text(), "JWKS refresh failed, keeping the keys: {e}"),
        }
    }

    /// Fetches and parses the JWKS, retrying with a doubling backoff until
    /// the next wait would pass `retry_backoff_max` (Kafka's `Retry`).
    async fn fetch_with_retries(&self) -> Result<Vec<Jwk>, String> {
        let mut backoff = self.policy.retry_backoff;
        let mut waited = Duration::ZERO;
        loop {
            let fetched = http_get::get(&self.url, self.tls.as_ref()).await;
            let error = match fetched.and_then(|body| parse_body(&body)) {
                Ok(keys) => return Ok(keys),
                Err(e) => e,
            };
            if backoff.is_zero() || waited + backoff > self.policy.retry_backoff_max {
                return Err(format!("{}: {error}", self.url_text()));
            }
            tracing::debug!(url = %self.url_text(), "JWKS fetch failed, retrying in {backoff:?}: {error}");
            tokio::time::sleep(backoff).await;
            waited += backoff;
            backoff *= 2;
        }
    }

    fn url_text(&self) -> String {
        let scheme = if self.url.https { "https" } else { "http" };
        format!("{scheme}://{}:{}{}", self.url.host, self.url.port, self.url.path)
    }
}

impl std::fmt::Debug for EndpointJwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointJwks")
            .field("url", &self.url_text())
            .field("keys", &self.keys().len())
            .finish()
    }
}

fn parse_body(body: &[u8]) -> Result<Vec<Jwk>, String> {
    parse_jwks(std::str::from_utf8(body).map_err(|_| "the JWKS is not UTF-8")?)
}

/// Refreshes on schedule and when a missing key id asks. Ends with the
/// runtime, or one wait after the listener dropped the keys.
async fn refresh_loop(jwks: Weak<EndpointJwks>) {
    while let Some(jwks) = jwks.upgrade() {
        tokio::select! {
            _ = tokio::time::sleep(jwks.policy.refresh) => {}
            _ = jwks.expedite.notified() => {}
        }
        if Arc::strong_count(&jwks) == 1 {
            return;
        }
        jwks.refresh().await;
    }
}
