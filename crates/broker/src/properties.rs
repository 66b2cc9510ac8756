//! Java `.properties` text, read as `java.util.Properties.load` reads it,
//! so a `server.properties` (or a tool's `--command-config`) written for
//! Kafka means the same to Strom:
//!
//! - a key ends at the first unescaped `=`, `:` or whitespace; whitespace
//!   around the separator is skipped, so `key value`, `key=value` and
//!   `key : value` are the same pair, and a line with a key alone has an
//!   empty value;
//! - lines whose first non-blank character is `#` or `!` are comments;
//! - a line ending in an odd number of backslashes continues on the next
//!   one, whose leading whitespace is dropped;
//! - `\t`, `\n`, `\r`, `\f` and `\uXXXX` are escapes, and a backslash before
//!   any other character stands for that character (`\=`, `\:`, `\ `).
//!
//! Values keep their trailing whitespace, as in Java; callers that read
//! configs trim them as Kafka's `ConfigDef` does. The text is UTF-8 (Java
//! reads ISO-8859-1 from a stream, but every non-ASCII file seen in
//! practice is UTF-8).

/// A line Java's loader would refuse: only a malformed `\uXXXX` escape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: malformed \\uXXXX escape")]
pub struct PropertiesError {
    /// The 1-based line the logical line starts on.
    pub line: usize,
}

/// The `(key, value)` pairs of `text`, in file order (a later duplicate
/// overrides an earlier one when collected into a map, as in Java).
pub fn parse(text: &str) -> Result<Vec<(String, String)>, PropertiesError> {
    let mut pairs = Vec::new();
    for (line, logical) in logical_lines(text) {
        let (key, value) = split_pair(&logical);
        let resolve = |raw: &str| unescape(raw).ok_or(PropertiesError { line });
        pairs.push((resolve(key)?, resolve(value)?));
    }
    Ok(pairs)
}

const BLANKS: [char; 3] = [' ', '\t', '\u{c}'];

/// Joins continued lines and drops blank and comment lines; each logical
/// line comes with the number of the line it starts on. Escapes are left
/// in place for `split_pair` and `unescape`.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut logical = Vec::new();
    let mut natural = natural_lines(text).into_iter().enumerate();
    while let Some((index, line)) = natural.next() {
        let line = line.trim_start_matches(BLANKS);
        if line.is_empty() || line.starts_with(['#', '!']) {
            continue;
        }
        let mut joined = String::from(line);
        while ends_in_continuation(&joined) {
            joined.pop();
            let Some((_, next)) = natural.next() else { break };
            joined.push_str(next.trim_start_matches(BLANKS));
        }
        logical.push((index + 1, joined));
    }
    logical
}

/// Lines ended by `\n`, `\r` or `\r\n`, as Java's `LineReader` ends them.
fn natural_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        lines.push(&rest[..end]);
        let terminator = if rest[end..].starts_with("\r\n") { 2 } else { usize::from(end < rest.len()) };
        rest = &rest[end + terminator..];
    }
    lines
}

/// An odd number of trailing backslashes: the last one escapes the newline.
fn ends_in_continuation(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped `=`, `:` or blank; blanks
/// around the separator belong to neither side.
fn split_pair(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut key_end = line.len();
    for (at, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '=' | ':' => {
                let value = line[at + 1..].trim_start_matches(BLANKS);
                return (&line[..at], value);
            }
            c if BLANKS.contains(&c) => {
                key_end = at;
                break;
            }
            _ => {}
        }
    }
    let rest = line[key_end..].trim_start_matches(BLANKS);
    let value = rest.strip_prefix(['=', ':']).map_or(rest, |v| v.trim_start_matches(BLANKS));
    (&line[..key_end], value)
}

/// Resolves escapes; `None` for a malformed `\uXXXX`.
fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == 4)?;
                // A lone surrogate half cannot be UTF-8; Java would keep it.
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap()
    }

    fn pair(key: &str, value: &str) -> (String, String) {
        (key.to_owned(), value.to_owned())
    }

    #[test]
    fn every_separator_java_accepts() {
        let text = "a=1\nb:2\nc 3\nd\t4\ne = 5\nf : 6\ng   =   7\nh\ni=\nj=k=l\n";
        assert_eq!(
            pairs(text),
            [
                pair("a", "1"),
                pair("b", "2"),
                pair("c", "3"),
                pair("d", "4"),
                pair("e", "5"),
                pair("f", "6"),
                pair("g", "7"),
                pair("h", ""),
                pair("i", ""),
                pair("j", "k=l"),
            ]
        );
    }

    #[test]
    fn comments_blank_lines_and_leading_whitespace() {
        let text = "# a comment\n! another\n   \n\t# indented comment\n  key = value  \n";
        assert_eq!(pairs(text), [pair("key", "value  ")]);
    }

    #[test]
    fn continuations_join_lines_and_drop_their_indentation() {
        let text = "listeners = PLAINTEXT://a:1,\\\n    PLAINTEXT://b:2\nnext=1\n";
        assert_eq!(pairs(text), [pair("listeners", "PLAINTEXT://a:1,PLAINTEXT://b:2"), pair("next", "1")]);
        // An even number of backslashes is an escaped backslash, not a continuation.
        assert_eq!(pairs("path=c:\\\\\nnext=1"), [pair("path", "c:\\"), pair("next", "1")]);
        // A comment line never continues.
        assert_eq!(pairs("# note \\\nkey=1"), [pair("key", "1")]);
        // A continuation on the last line ends the value.
        assert_eq!(pairs("key=1\\"), [pair("key", "1")]);
    }

    #[test]
    fn windows_and_old_mac_line_ends() {
        assert_eq!(pairs("a=1\r\nb=2\r\n"), [pair("a", "1"), pair("b", "2")]);
        assert_eq!(pairs("a=1,\\\r\n  2\r\nb=3"), [pair("a", "1,2"), pair("b", "3")]);
        assert_eq!(pairs("a=1\rb=2"), [pair("a", "1"), pair("b", "2")]);
    }

    #[test]
    fn escapes_in_keys_and_values() {
        assert_eq!(pairs("a\\=b\\:c\\ d=v"), [pair("a=b:c d", "v")]);
        assert_eq!(pairs("k=tab\\there\\nnl\\u00e9\\q"), [pair("k", "tab\there\nnléq")]);
        assert_eq!(pairs("k=\\u0041\\u00DF"), [pair("k", "Aß")]);
        assert_eq!(parse("ok=1\nk=\\u00g1"), Err(PropertiesError { line: 2 }));
        assert_eq!(parse("k=\\u12"), Err(PropertiesError { line: 1 }));
    }

    #[test]
    fn errors_name_the_line_a_continued_value_starts_on() {
        assert_eq!(parse("a=1\r\n\r\nb=x\\\n  \\uZZZZ"), Err(PropertiesError { line: 3 }));
    }
}
