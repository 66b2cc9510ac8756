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
    let entry = entry(&mut tokens)?;
    if !tokens.rest.trim().is_empty() {
        return Err("the JAAS config must hold exactly one login module".into());
    }
    Ok(entry)
}

/// A static JAAS file (Java's `java.security.auth.login.config`): named
/// sections of login modules, `KafkaServer { ... };` and
/// `<listener>.KafkaServer { ... };` for a broker.
pub type JaasFile = BTreeMap<String, Vec<JaasEntry>>;

/// Parses a JAAS file; `//` and `/* */` comments are skipped.
pub fn parse_file(text: &str) -> Result<JaasFile, String> {
    let text = strip_comments(text);
    let mut tokens = Tokens { rest: &text };
    let mut sections = JaasFile::new();
    while !tokens.rest.trim().is_empty() {
        let name = tokens.word().ok_or("expected a section name")?;
        if !tokens.punct('{') {
            return Err(format!("expected '{{' after section {name}"));
        }
        let mut entries = Vec::new();
        while !tokens.punct('}') {
            entries.push(entry(&mut tokens).map_err(|e| format!("section {name}: {e}"))?);
        }
        if !tokens.punct(';') {
            return Err(format!("expected ';' after section {name}"));
        }
        sections.insert(name, entries);
    }
    Ok(sections)
}

/// Removes `//` line and `/* */` block comments outside quoted strings.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' if quoted => {
                out.push(c);
                if let Some(next) = chars.next() {
                    out.push(next);
                }
                continue;
            }
            '/' if !quoted && chars.peek() == Some(&'/') => {
                chars.by_ref().take_while(|c| *c != '\n').for_each(drop);
                out.push('\n');
                continue;
            }
            '/' if !quoted && chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = ' ';
                for c in chars.by_ref() {
                    if previous == '*' && c == '/' {
                        break;
                    }
                    previous = c;
                }
                out.push(' ');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// One `LoginModule flag key=value ... ;` entry.
fn entry(tokens: &mut Tokens<'_>) -> Result<JaasEntry, String> {
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
            .find(|c: char| c.is_whitespace() || matches!(c, '=' | ';' | '"' | '{' | '}'))
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
    fn reads_a_static_jaas_file_with_sections_and_comments() {
        let file = parse_file(
            r#"
            // The broker's logins.
            KafkaServer {
                org.apache.kafka.common.security.plain.PlainLoginModule required
                username="admin" password="admin-secret" /* the inter-broker login */
                user_admin="admin-secret" user_alice="a//b";
                org.apache.kafka.common.security.scram.ScramLoginModule required;
            };
            sasl_ssl.KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="x"; };
            Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="zk"; };
            "#,
        )
        .unwrap();
        assert_eq!(file.len(), 3);
        let server = &file["KafkaServer"];
        assert_eq!(server.len(), 2);
        assert_eq!(server[0].users()["alice"], "a//b");
        assert_eq!(server[1].login_module, "org.apache.kafka.common.security.scram.ScramLoginModule");
        assert_eq!(file["sasl_ssl.KafkaServer"][0].users()["bob"], "x");
        for bad in
            ["KafkaServer {", "KafkaServer { M required; }", "KafkaServer M required;", "{ M required; };"]
        {
            assert!(parse_file(bad).is_err(), "{bad:?} accepted");
        }
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
