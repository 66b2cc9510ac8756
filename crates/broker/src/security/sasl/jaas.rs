//! Kafka's `sasl.jaas.config` value: one login module, its control flag
//! and its options, as in
//! `org.apache.kafka.common.security.plain.PlainLoginModule required
//! username="admin" password="secret" user_alice="alice-secret";`.

use std::collections::BTreeMap;

/// One parsed JAAS login module entry.
#[derive(Debug, Clone, PartialEq)]
pub struct JaasEntry {
    pub login_module: String,
    pub options: BTreeMap<String, String>,
}

impl JaasEntry {
    /// The `user_<name>="<password>"` options, as Kafka's PLAIN (and
    /// Strom's interim SCRAM) credentials.
    pub fn users(&self) -> BTreeMap<String, String> {
        self.options
            .iter()
            .filter_map(|(key, value)| Some((key.strip_prefix("user_")?.to_owned(), value.clone())))
            .collect()
    }
}

/// Parses a `sasl.jaas.config` value holding exactly one login module.
pub fn parse(text: &str) -> Result<JaasEntry, String> {
    let mut tokens = Tokens { rest: text };
    let login_module = tokens.word().ok_or("expected a login module class name")?;
    let flag = tokens.word().ok_or("expected a control flag after the login module")?;
    if !matches!(flag.to_ascii_lowercase().as_str(), "required" | "requisite" | "sufficient" | "optional") {
        return Err(format!(
            "invalid control flag {flag:?}: expected required, requisite, sufficient or optional"
        ));
    }
    let mut options = BTreeMap::new();
    loop {
        if tokens.punct(';') {
            break;
        }
        let key = tokens.word().ok_or("expected an option name or ';'")?;
        if !tokens.punct('=') {
            return Err(format!("expected '=' after option {key}"));
        }
        let value = tokens.value().ok_or_else(|| format!("expected a value for option {key}"))?;
        options.insert(key, value);
    }
    if !tokens.rest.trim().is_empty() {
        return Err("the JAAS config must hold exactly one login module".into());
    }
    Ok(JaasEntry { login_module, options })
}

struct Tokens<'a> {
    rest: &'a str,
}

impl Tokens<'_> {
    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn punct(&mut self, c: char) -> bool {
        self.skip_space();
        match self.rest.strip_prefix(c) {
            Some(after) => {
                self.rest = after;
                true
            }
            None => false,
        }
    }

    fn word(&mut self) -> Option<String> {
        self.skip_space();
        let end = self
            .rest
            .find(|c: char| c.is_whitespace() || matches!(c, '=' | ';' | '"'))
            .unwrap_or(self.rest.len());
        if end == 0 {
            return None;
        }
        let word = self.rest[..end].to_owned();
        self.rest = &self.rest[end..];
        Some(word)
    }

    /// A double-quoted string (`\` escapes the next character) or a bare word.
    fn value(&mut self) -> Option<String> {
        self.skip_space();
        let Some(quoted) = self.rest.strip_prefix('"') else { return self.word() };
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &quoted[at + 1..];
                    return Some(value);
                }
                '\\' => value.push(chars.next()?.1),
                _ => value.push(c),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kafkas_plain_login_module() {
        let entry = parse(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a\"b";"#,
        )
        .unwrap();
        assert_eq!(entry.login_module, "org.apache.kafka.common.security.plain.PlainLoginModule");
        assert_eq!(entry.options["username"], "admin");
        let users = entry.users();
        assert_eq!(users["alice"], "a\"b");
        assert_eq!(users.len(), 2);
    }

    #[test]
    fn refuses_malformed_entries() {
        for bad in [
            "",
            "Module",
            "Module maybe;",
            "Module required a=\"x\"",
            "Module required a;",
            "M required; N required;",
            "M required a=\"unterminated;",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse("M optional unquoted=value;").unwrap().options["unquoted"], "value");
    }
}
