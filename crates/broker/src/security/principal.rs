//! The principal of a TLS client: its certificate's subject as Java's
//! `X500Principal.getName()` prints it (RFC 2253), mapped through Kafka's
//! `ssl.principal.mapping.rules`.
//!
//! The rules are a comma-separated list of `DEFAULT` and
//! `RULE:pattern/replacement/[LU]` entries; the first whose pattern matches
//! the whole distinguished name names the principal (`$1` refers to a
//! group, `L`/`U` lower- or upper-cases the result). A name no rule
//! matches fails the authentication, as Kafka's `NoMatchingRule` does.

use regex::Regex;

/// One mapping rule.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace { pattern: Regex, replacement: String, case: Case },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Kafka's `SslPrincipalMapper`.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        Self { rules: vec![Rule::Default] }
    }
}

impl PrincipalMapper {
    /// Parses `ssl.principal.mapping.rules`.
    pub fn parse(rules: &str) -> Result<Self, String> {
        let mut parsed = Vec::new();
        let mut rest = rules.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        while !rest.is_empty() {
            let (rule, after) = split_rule(rest)?;
            parsed.push(rule);
            rest = after.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        }
        if parsed.is_empty() {
            return Err("no rules given".into());
        }
        Ok(Self { rules: parsed })
    }

    /// The principal name for distinguished name `dn`.
    pub fn map(&self, dn: &str) -> Result<String, String> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_owned()),
                Rule::Replace { pattern, replacement, case } => {
                    let Some(captures) = pattern.captures(dn) else { continue };
                    let mut name = String::new();
                    captures.expand(replacement, &mut name);
                    return Ok(match case {
                        Case::Keep => name,
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    });
                }
            }
        }
        Err(format!("No rules apply to {dn}"))
    }
}

/// Reads one rule off the front of `text`, returning it and the rest.
fn split_rule(text: &str) -> Result<(Rule, &str), String> {
    if let Some(rest) = text.strip_prefix("DEFAULT") {
        return Ok((Rule::Default, rest));
    }
    let Some(body) = text.strip_prefix("RULE:") else {
        let end = text.find(',').unwrap_or(text.len());
        return Err(format!("Invalid rule: {}", text[..end].trim()));
    };
    let (pattern, rest) = until_slash(body).ok_or_else(|| format!("Invalid rule: {text}"))?;
    let (replacement, rest) = until_slash(rest).ok_or_else(|| format!("Invalid rule: {text}"))?;
    let (case, rest) = match rest.chars().next() {
        Some('L') => (Case::Lower, &rest[1..]),
        Some('U') => (Case::Upper, &rest[1..]),
        _ => (Case::Keep, rest),
    };
    // Whatever follows up to the next comma is ignored, as Kafka's `.*?`.
    let rest = rest.find(',').map_or("", |at| &rest[at..]);
    let pattern = Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| format!("Invalid rule pattern {pattern:?}: {e}"))?;
    Ok((Rule::Replace { pattern, replacement: java_replacement(&replacement), case }, rest))
}

/// The text up to the first unescaped `/` (escapes kept), and what follows it.
fn until_slash(text: &str) -> Option<(String, &str)> {
    let mut taken = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '/' => return Some((taken, &text[at + 1..])),
            '\\' => {
                taken.push(c);
                taken.push(chars.next()?.1);
            }
            _ => taken.push(c),
        }
    }
    None
}

/// A Java `replaceAll` replacement (`$1`, `\$`) in the regex crate's syntax
/// (`${1}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str("${");
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    out.push(d);
                }
                out.push('}');
            }
            '$' => out.push_str("$$"),
            _ => out.push(c),
        }
    }
    out
}

/// The subject of a DER certificate as RFC 2253 prints it, most specific
/// attribute last-in-certificate first, as `X500Principal.getName()`.
pub fn subject_dn(certificate_der: &[u8]) -> Result<String, String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, certificate) = X509Certificate::from_der(certificate_der)
        .map_err(|e| format!("unreadable client certificate: {e}"))?;
    let rdns: Vec<String> = certificate
        .subject()
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// One `TYPE=value` of a name: RFC 2253's keywords for the types it names,
/// the dotted OID with the value's DER in hex for the others.
fn attribute(attribute: &x509_parser::x509::AttributeTypeAndValue<'_>) -> String {
    let oid = attribute.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => "",
    };
    match attribute.as_str() {
        Ok(value) if !keyword.is_empty() => format!("{keyword}={}", escape_value(value)),
        _ => {
            let der = x509_parser::der_parser::asn1_rs::ToDer::to_der_vec(attribute.attr_value())
                .unwrap_or_default();
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{oid}=#{hex}")
        }
    }
}

/// RFC 2253 escaping of an attribute value.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapper(rules: &str) -> PrincipalMapper {
        PrincipalMapper::parse(rules).unwrap()
    }

    #[test]
    fn default_keeps_the_distinguished_name() {
        assert_eq!(mapper("DEFAULT").map("CN=alice,O=Example").unwrap(), "CN=alice,O=Example");
    }

    #[test]
    fn rules_apply_in_order_and_change_case() {
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT";
        let m = mapper(rules);
        assert_eq!(m.map("CN=kafka-client,OU=ServiceUsers,O=Org").unwrap(), "kafka-client");
        assert_eq!(m.map("CN=Duke,OU=JavaSoft,O=Sun,L=Cupertino,ST=CA,C=US").unwrap(), "duke@javasoft");
        assert_eq!(m.map("OU=x,cn=bob.smith,O=y").unwrap(), "BOB.SMITH");
        assert_eq!(m.map("O=nothing").unwrap(), "O=nothing");
    }

    #[test]
    fn a_name_no_rule_matches_is_refused() {
        let m = mapper("RULE:^CN=(.*)$/$1/");
        assert_eq!(m.map("CN=a").unwrap(), "a");
        assert!(m.map("O=b").unwrap_err().contains("No rules apply"));
    }

    #[test]
    fn escaped_slashes_and_dollars_are_literal() {
        let m = mapper(r"RULE:^CN=([^,]*)\/x.*$/user\$$1/");
        assert_eq!(m.map("CN=a/x,O=b").unwrap(), "user$a");
    }

    #[test]
    fn malformed_rules_are_refused() {
        for bad in ["", "RULE:abc", "RULE:(/x/", "NOPE", "DEFAULT, garbage"] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn values_are_escaped_as_rfc_2253() {
        assert_eq!(escape_value("a,b+c"), r"a\,b\+c");
        assert_eq!(escape_value(" #x "), r"\ #x\ ");
    }
}
