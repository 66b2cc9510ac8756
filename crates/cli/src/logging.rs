//! Log output of the broker and the tools, on standard error.
//!
//! Levels come from `RUST_LOG` when set, else the broker's `logging.level`,
//! else a default. A filter is a `tracing` filter (`info,strom_storage=debug`)
//! whose level names may also be log4j's, as a Kafka operator writes them
//! (`WARNING`, `FATAL`, `ALL`); a word that is no level stops the start with
//! a message naming where it came from, instead of silently meaning "trace
//! for a target of that name". Colour codes only go to a terminal, and
//! `log.format=json` writes one JSON object per line for log shippers.
//!
//! Writing a log line never fails the process: with standard error closed
//! (`strom server 2>&1 | head`, a dead `tee`, a restarted journald) the line
//! is dropped and the broker keeps serving.

use std::io::{IsTerminal, Write};

use anyhow::{anyhow, bail, Context};
use tracing_subscriber::EnvFilter;

/// `log.format`: how each line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// Parses `log.format` (`text` or `json`).
    pub fn parse(value: Option<&str>) -> anyhow::Result<Self> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("text") => Ok(Self::Text),
            Some("json") => Ok(Self::Json),
            Some(_) => bail!(
                "invalid value {:?} for configuration log.format: expected text or json",
                value.unwrap_or_default()
            ),
        }
    }
}

/// Installs the global subscriber: the filter from `RUST_LOG`, else
/// `configured` (`logging.level`), else `default`.
pub fn init(configured: Option<&str>, default: &str, format: LogFormat) -> anyhow::Result<()> {
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = match (from_env, configured) {
        (Some(value), _) => parse_filter(&value, "environment variable RUST_LOG")?,
        (None, Some(value)) => parse_filter(value, "configuration logging.level")?,
        (None, None) => parse_filter(default, "the default log level")?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        .log_internal_errors(false);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| anyhow!("cannot set up logging: {e}"))
}

/// A filter whose level names are checked and translated to `tracing`'s.
fn parse_filter(value: &str, source: &str) -> anyhow::Result<EnvFilter> {
    let directives = value
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(translate_directive)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| anyhow!("invalid value {value:?} for {source}: {reason}"))?;
    EnvFilter::try_new(directives.join(",")).with_context(|| format!("invalid value {value:?} for {source}"))
}

/// `LEVEL` or `TARGET=LEVEL`, with the level in `tracing`'s spelling.
fn translate_directive(directive: &str) -> Result<String, String> {
    let (target, level) = match directive.rsplit_once('=') {
        Some((target, level)) => (Some(target.trim()), level.trim()),
        None => (None, directive),
    };
    let level = tracing_level(level).ok_or_else(|| {
        format!("{level:?} is not a log level (TRACE, DEBUG, INFO, WARN, ERROR, OFF, or log4j's ALL, WARNING, FATAL)")
    })?;
    Ok(match target {
        Some(target) => format!("{target}={level}"),
        None => level.to_owned(),
    })
}

/// A level name, `tracing`'s or log4j's, as `tracing` spells it; log4j's
/// FATAL is `error`, the most severe level `tracing` has.
fn tracing_level(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_uppercase().as_str() {
        "ALL" | "TRACE" => "trace",
        "DEBUG" => "debug",
        "INFO" => "info",
        "WARN" | "WARNING" => "warn",
        "ERROR" | "FATAL" => "error",
        "OFF" => "off",
        _ => return None,
    })
}

/// Standard error that reports every write as done: a log line that cannot
/// be written is lost, and nothing else.
struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log4j_level_names_map_to_their_meaning() {
        assert_eq!(translate_directive("WARNING").unwrap(), "warn");
        assert_eq!(translate_directive("FATAL").unwrap(), "error");
        assert_eq!(translate_directive("all").unwrap(), "trace");
        assert_eq!(translate_directive("strom_storage=DEBUG").unwrap(), "strom_storage=debug");
        assert!(parse_filter("info, strom_broker=warning", "test").is_ok());
    }

    #[test]
    fn words_that_are_no_level_are_refused_by_name() {
        for bad in ["verbose", "info,strom_broker=loud", "strom_broker"] {
            let error = parse_filter(bad, "configuration logging.level").unwrap_err().to_string();
            assert!(error.contains("configuration logging.level"), "{error}");
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn log_format_is_text_or_json() {
        assert_eq!(LogFormat::parse(None).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("JSON")).unwrap(), LogFormat::Json);
        let error = LogFormat::parse(Some("xml")).unwrap_err().to_string();
        assert!(error.contains("log.format"), "{error}");
    }
}
