//! HTML building blocks: escaping, the page frame, tables, forms, and the
//! formats numbers and times are shown in. Every user-controlled string that
//! reaches a page goes through [`escape`] (text and attribute values alike).

use std::fmt::Write as _;

use super::auth::CSRF_FIELD;
use super::http::percent_encode;

/// Escapes text for an element's content or a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A link to `path` with query parameters, escaped for an attribute.
pub fn href(path: &str, params: &[(&str, &str)]) -> String {
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", percent_encode(v))).collect();
    let url = if query.is_empty() { path.to_owned() } else { format!("{path}?{}", query.join("&")) };
    escape(&url)
}

/// What every page needs besides its body.
pub struct Frame<'a> {
    pub title: &'a str,
    /// The navigation entry to mark: `/`, `/topics`, `/groups` or `/broker`.
    pub section: &'a str,
    pub user: &'a str,
    pub notice: Option<&'a str>,
    pub error: Option<&'a str>,
}

pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut nav = String::new();
    for (path, label) in
        [("/", "Overview"), ("/topics", "Topics"), ("/groups", "Consumer groups"), ("/broker", "Broker")]
    {
        let current = if path == frame.section { r#" aria-current="page""# } else { "" };
        let _ = write!(nav, r#"<a href="{path}"{current}>{label}</a>"#);
    }
    let mut flash = String::new();
    if let Some(notice) = frame.notice.filter(|n| !n.is_empty()) {
        let _ = write!(flash, r#"<p class="notice" role="status">{}</p>"#, escape(notice));
    }
    if let Some(error) = frame.error.filter(|e| !e.is_empty()) {
        let _ = write!(flash, r#"<p class="error" role="alert">{}</p>"#, escape(error));
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Strom</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/assets/console.css">
<script src="/assets/console.js" defer></script></head>
<body><header><span class="brand">Strom</span><nav>{nav}</nav><span class="user">{user}</span>
<label class="refresh"><input type="checkbox" id="live" checked> live</label></header>
<main><h1>{title}</h1>{flash}{body}</main></body></html>"#,
        title = escape(frame.title),
        user = escape(frame.user),
    )
}

/// A table with a header row; cells are HTML already escaped by the caller.
pub fn table(id: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(r#"<table id="{id}" data-live><thead><tr>"#);
    for header in headers {
        let _ = write!(out, "<th>{}</th>", escape(header));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(out, r#"<tr><td colspan="{}" class="empty">none</td></tr>"#, headers.len());
    }
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// Label and value pairs, values already escaped.
pub fn facts(id: &str, pairs: &[(&str, String)]) -> String {
    let mut out = format!(r#"<dl class="facts" id="{id}" data-live>"#);
    for (label, value) in pairs {
        let _ = write!(out, "<div><dt>{}</dt><dd>{value}</dd></div>", escape(label));
    }
    out.push_str("</dl>");
    out
}

/// A POST form to `action` carrying the CSRF token; `fields` is its HTML.
pub fn form(action: &str, csrf: &str, class: &str, fields: &str, button: &str) -> String {
    format!(
        r#"<form method="post" action="{}" class="{class}"><input type="hidden" name="{CSRF_FIELD}" value="{}">{fields}<button type="submit">{}</button></form>"#,
        escape(action),
        escape(csrf),
        escape(button)
    )
}

pub fn hidden(name: &str, value: &str) -> String {
    format!(r#"<input type="hidden" name="{}" value="{}">"#, escape(name), escape(value))
}

/// A labelled text input.
pub fn input(label: &str, name: &str, value: &str, extra: &str) -> String {
    format!(
        r#"<label>{} <input name="{}" value="{}" {extra}></label>"#,
        escape(label),
        escape(name),
        escape(value)
    )
}

/// A labelled select; `options` are (value, label).
pub fn select(label: &str, name: &str, options: &[(&str, &str)], selected: &str) -> String {
    let mut out = format!(r#"<label>{} <select name="{}">"#, escape(label), escape(name));
    for (value, text) in options {
        let mark = if *value == selected { " selected" } else { "" };
        let _ = write!(out, r#"<option value="{}"{mark}>{}</option>"#, escape(value), escape(text));
    }
    out.push_str("</select></label>");
    out
}

pub fn link(path: &str, params: &[(&str, &str)], text: &str) -> String {
    format!(r#"<a href="{}">{}</a>"#, href(path, params), escape(text))
}

/// 1536 as `1.5 KiB`.
pub fn bytes(count: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// Milliseconds since the epoch as `2024-05-01T12:00:00.000Z`.
pub fn timestamp(ms: i64) -> String {
    if ms < 0 {
        return "-".into();
    }
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) =
        (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Reads milliseconds since the epoch, or a UTC time
/// `YYYY-MM-DDTHH:MM[:SS[.sss]][Z]` (a space may replace the `T`) from
/// 1970 to 9999. Negative times are refused: ListOffsets reads -1 and -2
/// as "latest" and "earliest".
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        return (ms >= 0).then_some(ms);
    }
    let text = text.trim_end_matches('Z');
    let (date, time) = text.split_once(['T', ' ']).unwrap_or((text, "00:00"));
    let mut date_parts = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date_parts.next()??, date_parts.next()??, date_parts.next()??);
    let (clock, milli) = time.split_once('.').unwrap_or((time, "0"));
    let mut clock_parts = clock.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, m) = (clock_parts.next()??, clock_parts.next()??);
    let s = clock_parts.next().unwrap_or(Some(0))?;
    let milli: i64 = format!("{milli:0<3}").get(..3)?.parse().ok()?;
    let valid = (1970..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&h)
        && (0..60).contains(&m)
        && (0..61).contains(&s)
        && (0..1000).contains(&milli);
    valid.then(|| {
        days_from_civil(year, month, day) * 86_400_000 + h * 3_600_000 + m * 60_000 + s * 1000 + milli
    })
}

// Howard Hinnant's civil calendar algorithms (public domain).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_quotes_are_escaped() {
        assert_eq!(
            escape(r#"<script>"a"&'b'</script>"#),
            "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(href("/topic", &[("name", "a&b\"")]), "/topic?name=a%26b%22");
    }

    #[test]
    fn times_print_and_parse_in_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_714_564_800_123), "2024-05-01T12:00:00.123Z");
        assert_eq!(parse_time("2024-05-01T12:00:00.123Z"), Some(1_714_564_800_123));
        assert_eq!(parse_time("2024-05-01 12:00"), Some(1_714_564_800_000));
        assert_eq!(parse_time("2024-05-01T12:00:00.1"), Some(1_714_564_800_100));
        assert_eq!(parse_time("1714564800000"), Some(1_714_564_800_000));
        for bad in [
            "",
            "yesterday",
            "2024-13-01T00:00",
            "2024-05-01T25:00",
            "-1",
            "-2",
            "1969-12-31T23:59",
            "2024-05-01T-1:00",
            "2024-05-01T00:00:00.-12",
            "99999999999999-01-01T00:00",
            "-9223372036854775807-01-01T00:00",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
