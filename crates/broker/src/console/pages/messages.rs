//! The message browser: records of one partition from an offset or a time,
//! newest or oldest first, shown as JSON, text or hex, optionally filtered
//! by a substring; and a form that produces a test record.
//!
//! Records are read as a fetch reads them (up to the high watermark), and
//! every read is bounded: at most [`MAX_LIMIT`] records shown, at most
//! [`MAX_SCAN_RECORDS`] records or [`MAX_SCAN_BYTES`] bytes examined per page.

use std::ops::Range;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::Record;

use super::Page;
use crate::console::html::{self, escape, form, hidden, input, link, select, table};
use crate::console::http::{percent_encode, Response};
use crate::console::kafka::{error_name, TestRecord};
use crate::replica::{Isolation, Partition};

pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;
/// Records examined by one search, matching or not.
pub const MAX_SCAN_RECORDS: usize = 10_000;
/// Record batch bytes read from disk for one page.
pub const MAX_SCAN_BYTES: usize = 16 << 20;
/// Bytes of a key, value or header shown before it is cut.
const SHOWN_BYTES: usize = 4096;
const READ_CHUNK_BYTES: usize = 1 << 20;

/// What the browser was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub partition: i32,
    /// Where to start: an offset, a time, or (neither) the end or the start.
    pub offset: Option<i64>,
    pub timestamp_ms: Option<i64>,
    pub newest_first: bool,
    pub limit: usize,
    pub search: String,
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON when it parses, else text when printable, else hex.
    Auto,
    Json,
    Text,
    Hex,
}

impl Query {
    fn parse(page: &Page<'_>) -> Result<Self, String> {
        let param = |name: &str| page.request.param(name).trim();
        let partition = match param("partition") {
            "" => 0,
            raw => raw.parse().map_err(|_| format!("partition {raw:?} is not a number"))?,
        };
        let offset = match param("offset") {
            "" => None,
            raw => Some(raw.parse::<i64>().map_err(|_| format!("offset {raw:?} is not a number"))?.max(0)),
        };
        let timestamp_ms = match param("time") {
            "" => None,
            raw => Some(
                html::parse_time(raw)
                    .ok_or_else(|| format!("time {raw:?} is not YYYY-MM-DDTHH:MM:SS or milliseconds"))?,
            ),
        };
        let limit = match param("limit") {
            "" => DEFAULT_LIMIT,
            raw => raw
                .parse::<usize>()
                .map_err(|_| format!("limit {raw:?} is not a number"))?
                .clamp(1, MAX_LIMIT),
        };
        let format = match param("format") {
            "json" => Format::Json,
            "text" => Format::Text,
            "hex" => Format::Hex,
            _ => Format::Auto,
        };
        let search = param("search").chars().take(256).collect();
        Ok(Self {
            partition,
            offset,
            timestamp_ms,
            newest_first: param("order") != "oldest",
            limit,
            search,
            format,
        })
    }
}

/// The records found, and how far the scan went.
#[derive(Debug, Default)]
pub struct Found {
    pub records: Vec<Record>,
    pub scanned: usize,
    /// Record batch bytes read from disk.
    pub bytes_read: usize,
    /// The scan stopped at a bound before it found `limit` records.
    pub truncated: bool,
}

/// Reads records in offset order from `read_from`, keeping those in `keep`,
/// until `accept` has taken `limit`, `max_scanned` records were examined or
/// the byte bound is reached. The first batch read may begin before
/// `read_from`: its records from `keep.start` on are kept too.
fn scan_forward(
    partition: &Partition,
    read_from: i64,
    keep: Range<i64>,
    (limit, max_scanned): (usize, usize),
    found: &mut Found,
    accept: &dyn Fn(&Record) -> bool,
) -> Result<(), String> {
    let mut offset = read_from;
    while offset < keep.end && found.records.len() < limit {
        if found.scanned >= max_scanned || found.bytes_read >= MAX_SCAN_BYTES {
            found.truncated = true;
            return Ok(());
        }
        let read = partition
            .read(offset, READ_CHUNK_BYTES, true, Isolation::ReadUncommitted)
            .map_err(|e| e.to_string())?;
        let Some(slice) = read.slice else { return Ok(()) };
        let bytes = slice.read().map_err(|e| e.to_string())?;
        found.bytes_read += bytes.len();
        let keep_from = if offset == read_from { keep.start } else { offset };
        let records = strom_storage::batch::decode_records(bytes).map_err(|e| e.to_string())?;
        for record in
            records.into_iter().filter(|r| r.offset >= keep_from && r.offset < keep.end && !r.control)
        {
            // A chunk holds thousands of small records: the bound holds within it too.
            if found.scanned >= max_scanned {
                found.truncated = true;
                return Ok(());
            }
            found.scanned += 1;
            if accept(&record) {
                found.records.push(record);
                if found.records.len() >= limit {
                    break;
                }
            }
        }
        if slice.end_offset <= offset {
            return Ok(());
        }
        offset = slice.end_offset;
    }
    Ok(())
}

/// The records a query asks for, in the order to show them.
pub fn browse(partition: &Partition, query: &Query) -> Result<Found, String> {
    let (log_start, high_watermark) = (partition.log_start_offset(), partition.high_watermark());
    let by_time = match query.timestamp_ms {
        Some(ms) => Some(
            partition.offset_for_timestamp(ms).map_err(|e| e.to_string())?.map_or(high_watermark, |(_, o)| o),
        ),
        None => None,
    };
    let anchor = by_time.or(query.offset);
    let needle = query.search.to_lowercase();
    let accept = |record: &Record| needle.is_empty() || matches_search(record, &needle);
    let mut found = Found::default();
    if !query.newest_first {
        let from = anchor.unwrap_or(log_start).max(log_start);
        scan_forward(
            partition,
            from,
            from..high_watermark,
            (query.limit, MAX_SCAN_RECORDS),
            &mut found,
            &accept,
        )?;
        return Ok(found);
    }
    // Newest first: windows stepping back from the anchor (inclusive) or the
    // end. A window takes in the whole batch it starts in, so that a batch
    // holding many windows is read once, not once per window; its records
    // are then examined newest first, so the scan bound cuts off old ones.
    let mut to = anchor.map_or(high_watermark, |a| a.saturating_add(1).min(high_watermark));
    let window = query.limit.max(100) as i64;
    while to > log_start && found.records.len() < query.limit {
        let from = (to - window).max(log_start);
        let mut chunk = Found { bytes_read: found.bytes_read, ..Found::default() };
        scan_forward(partition, from, log_start..to, (usize::MAX, usize::MAX), &mut chunk, &|_| true)?;
        found.bytes_read = chunk.bytes_read;
        if chunk.truncated {
            // A window cut short would leave a gap between the records shown.
            found.truncated = true;
            break;
        }
        let lowest = chunk.records.first().map_or(from, |r| r.offset.min(from));
        for record in chunk.records.into_iter().rev() {
            if found.scanned >= MAX_SCAN_RECORDS {
                found.truncated = true;
                return Ok(found);
            }
            found.scanned += 1;
            if accept(&record) {
                found.records.push(record);
                if found.records.len() >= query.limit {
                    return Ok(found);
                }
            }
        }
        to = lowest;
    }
    Ok(found)
}

fn matches_search(record: &Record, needle: &str) -> bool {
    let contains = |bytes: &Bytes| String::from_utf8_lossy(bytes).to_lowercase().contains(needle);
    record.key.as_ref().is_some_and(contains)
        || record.value.as_ref().is_some_and(contains)
        || record
            .headers
            .iter()
            .any(|(k, v)| k.to_lowercase().contains(needle) || v.as_ref().is_some_and(contains))
}

/// A key, value or header for the page, escaped, cut at [`SHOWN_BYTES`].
pub fn show(bytes: Option<&Bytes>, format: Format) -> String {
    let Some(bytes) = bytes else { return r#"<span class="null">null</span>"#.to_owned() };
    let cut = &bytes[..bytes.len().min(SHOWN_BYTES)];
    let more =
        if bytes.len() > SHOWN_BYTES { format!(" … ({} bytes)", bytes.len()) } else { String::new() };
    let text = match std::str::from_utf8(cut) {
        Ok(text) => Some(text),
        // The cut went through a character: show the whole ones before it.
        Err(e) if e.error_len().is_none() && bytes.len() > SHOWN_BYTES => {
            std::str::from_utf8(&cut[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    let json = || text.and_then(pretty_json);
    let printable = text.filter(|t| !t.chars().any(|c| c.is_control() && !c.is_whitespace()));
    let shown = match format {
        Format::Json => json().map(|j| format!("<pre>{}</pre>", escape(&j))),
        Format::Text => text.map(escape),
        Format::Hex => None,
        Format::Auto => json()
            .filter(|_| cut.first().is_some_and(|b| *b == b'{' || *b == b'['))
            .map(|j| format!("<pre>{}</pre>", escape(&j)))
            .or(printable.map(escape)),
    };
    let shown = shown.unwrap_or_else(|| format!(r#"<code class="hex">{}</code>"#, hex(cut)));
    format!("{shown}{}", escape(&more))
}

/// JSON indented two spaces a level, its numbers and strings kept as
/// written: parsed, a number beyond an `f64`'s precision would show rounded.
/// `None` unless `text` is JSON.
fn pretty_json(text: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text).ok()?;
    let mut out = String::with_capacity(text.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
                // An empty object or array stays on one line.
                if let Some(close) = chars.next_if(|c| *c == '}' || *c == ']') {
                    out.push(close);
                    continue;
                }
                depth += 1;
                newline(&mut out, depth);
            }
            '}' | ']' => {
                depth -= 1;
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

fn query_form(page: &Page<'_>, topic: &str, query: &Query, partitions: i32) -> String {
    let partition_options: Vec<(String, String)> =
        (0..partitions).map(|p| (p.to_string(), p.to_string())).collect();
    let options: Vec<(&str, &str)> =
        partition_options.iter().map(|(v, l)| (v.as_str(), l.as_str())).collect();
    let order = if query.newest_first { "newest" } else { "oldest" };
    let format = match query.format {
        Format::Auto => "auto",
        Format::Json => "json",
        Format::Text => "text",
        Format::Hex => "hex",
    };
    format!(
        r#"<form method="get" action="/messages" class="inline">{}{}{}{}{}{}{}{}<button type="submit">Show</button></form>"#,
        hidden("topic", topic),
        select("Partition", "partition", &options, &query.partition.to_string()),
        input(
            "Offset",
            "offset",
            &query.offset.map(|o| o.to_string()).unwrap_or_default(),
            r#"type="number" min="0""#
        ),
        input("or time (UTC)", "time", page.request.param("time"), r#"placeholder="2024-05-01T12:00:00""#),
        select("Order", "order", &[("newest", "newest first"), ("oldest", "oldest first")], order),
        select(
            "Show values as",
            "format",
            &[("auto", "auto"), ("json", "JSON"), ("text", "text"), ("hex", "hex")],
            format
        ),
        input(
            "Limit",
            "limit",
            &query.limit.to_string(),
            &format!(r#"type="number" min="1" max="{MAX_LIMIT}""#)
        ),
        input("Search", "search", &query.search, r#"maxlength="256""#),
    )
}

pub fn page(page: &Page<'_>) -> Response {
    let topic = page.request.param("topic");
    let query = match Query::parse(page) {
        Ok(query) => query,
        Err(error) => return page.refused(400, "/topics", "/topics", &error),
    };
    if !page.kafka.may_read_topic(topic) {
        let reason = format!("TOPIC_AUTHORIZATION_FAILED: not authorized to read topic {topic}");
        return page.refused(403, "/topics", "/topics", &reason);
    }
    let image = page.broker().replicas().image();
    let Some(partition_count) = image.topic(topic).map(|t| t.partitions.len() as i32) else {
        return page.refused(
            404,
            "/topics",
            "/topics",
            &format!("UNKNOWN_TOPIC_OR_PARTITION: no topic {topic}"),
        );
    };
    // Records are read from the partition's leader, as a consumer reads them.
    let partition = match page.broker().replicas().leader_partition(topic, query.partition) {
        Ok(partition) => partition,
        Err(error) => {
            let why = match error {
                ResponseError::NotLeaderOrFollower => "is led by another broker",
                _ => "does not exist",
            };
            let message =
                format!("{}: partition {topic}-{} {why}", error_name(error.code()), query.partition);
            return page.refused(404, "/topics", "/topics", &message);
        }
    };
    let found = match browse(&partition, &query) {
        Ok(found) => found,
        Err(error) => {
            return page.refused(500, "/topics", "/topics", &format!("KAFKA_STORAGE_ERROR: {error}"))
        }
    };
    let rows: Vec<Vec<String>> = found
        .records
        .iter()
        .map(|r| {
            let headers: Vec<String> = r
                .headers
                .iter()
                .map(|(k, v)| format!("<div>{}: {}</div>", escape(k), show(v.as_ref(), query.format)))
                .collect();
            vec![
                r.offset.to_string(),
                html::timestamp(r.timestamp),
                show(r.key.as_ref(), query.format),
                show(r.value.as_ref(), query.format),
                headers.concat(),
            ]
        })
        .collect();
    let summary = format!(
        r#"<p id="scan" data-live>Partition {} holds offsets {} to {} (high watermark). Showing {} records; {} examined{}.</p>"#,
        query.partition,
        partition.log_start_offset(),
        partition.high_watermark(),
        found.records.len(),
        found.scanned,
        if found.truncated {
            format!(" — stopped at the scan bound of {MAX_SCAN_RECORDS} records; narrow the range")
        } else {
            String::new()
        },
    );
    let records = table("records", &["Offset", "Timestamp", "Key", "Value", "Headers"], &rows);
    let produce_fields = format!(
        "{}{}{}{}{}",
        hidden("topic", topic),
        hidden("partition", &query.partition.to_string()),
        input("Key", "key", "", ""),
        r#"<label>Value <textarea name="value" rows="2"></textarea></label>"#,
        r#"<label>Headers <textarea name="headers" rows="2" placeholder="name=value per line"></textarea></label>"#,
    );
    let produce = form("/messages/produce", page.csrf, "inline", &produce_fields, "Produce");
    let back = link("/topic", &[("name", topic)], &format!("Topic {topic}"));
    let body = format!(
        "<p>{back}</p>{}{summary}{records}<h2>Produce a test record to partition {}</h2>{produce}",
        query_form(page, topic, &query, partition_count),
        query.partition
    );
    page.render(&format!("Messages in {topic}"), "/topics", &body)
}

pub fn produce(page: &Page<'_>) -> Response {
    let form = page.form();
    let field = |name: &str| form.get(name).map_or("", String::as_str);
    let topic = field("topic");
    let back = format!("/messages?topic={}", percent_encode(topic));
    let Ok(partition) = field("partition").trim().parse::<i32>() else {
        return page.refused(422, "/topics", &back, "the partition must be a number");
    };
    let headers: Result<Vec<(String, Bytes)>, String> = field("headers")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.split_once('=') {
            Some((name, value)) => Ok((name.trim().to_owned(), Bytes::copy_from_slice(value.as_bytes()))),
            None => Err(format!("header {line:?} is not name=value")),
        })
        .collect();
    let headers = match headers {
        Ok(headers) => headers,
        Err(error) => return page.refused(422, "/topics", &back, &error),
    };
    let text = |name: &str| {
        Some(field(name)).filter(|t| !t.is_empty()).map(|t| Bytes::copy_from_slice(t.as_bytes()))
    };
    let record = TestRecord { key: text("key"), value: text("value"), headers, timestamp_ms: page.now_ms };
    match page.kafka.produce(topic, partition, record) {
        Ok(offset) => Response::see_other(format!(
            "/messages?topic={}&partition={partition}&notice={}",
            percent_encode(topic),
            percent_encode(&format!("produced at offset {offset}"))
        )),
        Err(error) => page.refused(422, "/topics", &back, &error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition holding one batch of `hay` records, then one "needle".
    fn haystack(dir: &std::path::Path, hay: usize) -> Partition {
        use strom_storage::{LogConfig, LogManager, TopicPartition};
        let logs = LogManager::new(vec![dir.to_owned()]).unwrap();
        let tp = TopicPartition::new("haystack", 0);
        let log = logs.get_or_create(&tp, LogConfig::default(), 0).unwrap();
        let partition = Partition::new(tp.clone(), 0, log, logs.dir_of(&tp).unwrap());
        let value = |v: &'static [u8]| (None, Some(Bytes::from_static(v)));
        let hay = vec![value(b"hay"); hay];
        for batch in [hay, vec![value(b"needle")]] {
            partition.append(&strom_storage::batch::encode_batch(&batch, 1), 1).unwrap();
        }
        partition
    }

    fn search(partition: &Partition, needle: &str, newest_first: bool) -> Found {
        let query = Query {
            partition: 0,
            offset: None,
            timestamp_ms: None,
            newest_first,
            limit: DEFAULT_LIMIT,
            search: needle.into(),
            format: Format::Auto,
        };
        browse(partition, &query).unwrap()
    }

    #[test]
    fn newest_first_examines_the_newest_records_of_a_batch_larger_than_the_scan_bound() {
        let dir = tempfile::tempdir().unwrap();
        let partition = haystack(dir.path(), MAX_SCAN_RECORDS + 50);

        let newest = search(&partition, "needle", true);
        let offsets: Vec<i64> = newest.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![MAX_SCAN_RECORDS as i64 + 50]);

        let oldest = search(&partition, "needle", false);
        assert!(oldest.records.is_empty() && oldest.truncated);
        assert_eq!(oldest.scanned, MAX_SCAN_RECORDS);

        let absent = search(&partition, "absent", true);
        assert!(absent.records.is_empty() && absent.truncated);
        assert_eq!(absent.scanned, MAX_SCAN_RECORDS);
    }

    #[test]
    fn values_show_as_json_text_or_hex_and_are_escaped() {
        let value = |s: &[u8]| Bytes::copy_from_slice(s);
        assert!(show(Some(&value(br#"{"a":"<b>"}"#)), Format::Auto)
            .contains("&quot;a&quot;: &quot;&lt;b&gt;&quot;"));
        assert_eq!(show(Some(&value(b"<i>hi</i>")), Format::Auto), "&lt;i&gt;hi&lt;/i&gt;");
        assert_eq!(show(Some(&value(&[0, 255])), Format::Auto), r#"<code class="hex">00 ff</code>"#);
        assert_eq!(show(Some(&value(b"ab")), Format::Hex), r#"<code class="hex">61 62</code>"#);
        assert!(show(None, Format::Auto).contains("null"));
        let long = value(&vec![b'x'; SHOWN_BYTES + 10]);
        assert!(show(Some(&long), Format::Text).ends_with(&format!("({} bytes)", SHOWN_BYTES + 10)));
        let cut_in_a_character = value(format!("{}é", "x".repeat(SHOWN_BYTES - 1)).as_bytes());
        let shown = show(Some(&cut_in_a_character), Format::Auto);
        assert!(
            shown.starts_with("xxx") && shown.ends_with(&format!("({} bytes)", SHOWN_BYTES + 1)),
            "{shown}"
        );
        assert_eq!(show(Some(&value(&[b'a', 0xc3])), Format::Text), r#"<code class="hex">61 c3</code>"#);
    }

    #[test]
    fn json_is_indented_with_its_numbers_and_strings_as_written() {
        let text = r#" {"id":12345678901234567890123, "price":1.10,"e":[ ],"o":{},"s":["a\"]b\\",1e3]}"#;
        let expected = "{\n  \"id\": 12345678901234567890123,\n  \"price\": 1.10,\n  \"e\": [],\n  \"o\": {},\n  \"s\": [\n    \"a\\\"]b\\\\\",\n    1e3\n  ]\n}";
        assert_eq!(pretty_json(text).as_deref(), Some(expected));
        assert_eq!(pretty_json("7").as_deref(), Some("7"));
        assert_eq!(pretty_json("{\"a\":"), None);
    }

    #[test]
    fn search_looks_at_keys_values_and_headers_in_any_case() {
        let mut record = Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: kafka_protocol::records::TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 0,
            key: Some(Bytes::from_static(b"User-1")),
            value: None,
            headers: Default::default(),
            delete_horizon: false,
        };
        assert!(matches_search(&record, "user-1"));
        assert!(!matches_search(&record, "paid"));
        record.headers.insert("trace".into(), Some(Bytes::from_static(b"PAID")));
        assert!(matches_search(&record, "paid"));
    }
}
