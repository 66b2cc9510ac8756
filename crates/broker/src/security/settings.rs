//! One listener's view of the security keys: Kafka lets
//! `listener.name.<listener>.<key>` (listener name in lower case) override
//! `<key>`, and SASL keys be set per mechanism as
//! `listener.name.<listener>.<mechanism>.<key>`.

use std::collections::BTreeMap;

/// The security keys as one listener sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    listener: String,
    values: BTreeMap<String, String>,
}

impl ListenerSettings {
    /// The keys of `provided` that concern listener `listener`.
    pub fn new(provided: &BTreeMap<String, String>, listener: &str) -> Self {
        let values = provided
            .iter()
            .filter(|(key, _)| super::is_security_key(key))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self { listener: listener.to_ascii_lowercase(), values }
    }

    /// Settings from bare pairs, for tests.
    pub fn from_pairs(listener: &str, pairs: &[(&str, &str)]) -> Self {
        let values = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Self { listener: listener.to_ascii_lowercase(), values }
    }

    /// These settings without the broker-wide `key`: only the listener's
    /// own value of it counts.
    pub fn listener_only(&self, key: &str) -> Self {
        let mut narrowed = self.clone();
        narrowed.values.remove(key);
        narrowed
    }

    /// These settings with the listener's dynamic TLS store keys
    /// (`listener.name.<l>.ssl.keystore.*` …, set by AlterConfigs) of
    /// `dynamic` laid over them; other keys of `dynamic` are ignored.
    pub fn with_dynamic_stores(&self, dynamic: &BTreeMap<String, String>) -> Self {
        let mut merged = self.clone();
        let prefix = format!("listener.name.{}.", self.listener);
        for (key, value) in dynamic {
            let reconfigurable = key.strip_prefix(&prefix).is_some_and(super::tls::is_reconfigurable);
            if reconfigurable {
                merged.values.insert(key.clone(), value.clone());
            }
        }
        merged
    }

    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// `listener.name.<listener>.<key>`, else `<key>`; empty values count
    /// as unset, as Kafka's optional strings do.
    pub fn get(&self, key: &str) -> Option<&str> {
        let scoped = format!("listener.name.{}.{key}", self.listener);
        let value = self.values.get(&scoped).or_else(|| self.values.get(key));
        value.map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// Like [`Self::get`], but an empty value is returned as set: for keys
    /// where empty means something (`ssl.endpoint.identification.algorithm`).
    pub fn get_even_empty(&self, key: &str) -> Option<&str> {
        let scoped = format!("listener.name.{}.{key}", self.listener);
        self.values.get(&scoped).or_else(|| self.values.get(key)).map(|v| v.trim())
    }

    /// Exactly `key`, no fallback.
    pub fn get_exact(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// A SASL key for one mechanism: `listener.name.<l>.<mechanism>.<key>`
    /// first, then the listener's and the broker's own.
    pub fn get_for_mechanism(&self, mechanism: &str, key: &str) -> Option<&str> {
        let scoped = format!("listener.name.{}.{}.{key}", self.listener, mechanism.to_ascii_lowercase());
        match self.values.get(&scoped).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            Some(value) => Some(value),
            None => self.get(key),
        }
    }

    /// Which key a value came from, for error messages.
    pub fn name_of(&self, key: &str) -> String {
        let scoped = format!("listener.name.{}.{key}", self.listener);
        if self.values.contains_key(&scoped) {
            scoped
        } else {
            key.to_owned()
        }
    }

    /// A comma-separated list (empty when unset).
    pub fn list(&self, key: &str) -> Vec<String> {
        self.get(key)
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// A number of milliseconds, `default` when unset.
    pub fn millis(&self, key: &str, default: i64) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(raw) => raw.parse().map_err(|_| format!("{}: {raw:?} is not a number", self.name_of(key))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_keys_override_plain_keys() {
        let settings = ListenerSettings::from_pairs(
            "SASL_SSL",
            &[
                ("ssl.client.auth", "none"),
                ("listener.name.sasl_ssl.ssl.client.auth", "required"),
                ("sasl.enabled.mechanisms", "PLAIN"),
                ("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", "x"),
                ("listener.name.other.ssl.keystore.type", "PEM"),
            ],
        );
        assert_eq!(settings.get("ssl.client.auth"), Some("required"));
        assert_eq!(settings.get("sasl.enabled.mechanisms"), Some("PLAIN"));
        assert_eq!(settings.get("ssl.keystore.type"), None);
        assert_eq!(settings.get_for_mechanism("SCRAM-SHA-256", "sasl.jaas.config"), Some("x"));
        assert_eq!(settings.get_for_mechanism("PLAIN", "sasl.jaas.config"), None);
        assert_eq!(settings.name_of("ssl.client.auth"), "listener.name.sasl_ssl.ssl.client.auth");
        let other = ListenerSettings::from_pairs("OTHER", &[("ssl.client.auth", "required")]);
        assert_eq!(other.get("ssl.client.auth"), Some("required"));
        assert_eq!(other.listener_only("ssl.client.auth").get("ssl.client.auth"), None);
        assert_eq!(settings.listener_only("ssl.client.auth").get("ssl.client.auth"), Some("required"));
    }
}
