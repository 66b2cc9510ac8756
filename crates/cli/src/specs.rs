//! The small languages of the admin tools' arguments, parsed as Kafka's
//! scripts parse them: `topic:0,1` partition lists, GetOffsetShell's
//! `topic:0-3` rules, `--to-datetime` timestamps, ISO-8601 durations, and
//! kafka-delete-records' offset JSON. Pure functions, so they are tested here.

use std::collections::BTreeSet;

use anyhow::{bail, Context};

/// `topic` (every partition) or `topic:0,1,2`, as `--topic` takes it in
/// kafka-consumer-groups.sh.
pub fn topic_and_partitions(arg: &str) -> anyhow::Result<(String, Option<Vec<i32>>)> {
    let Some((topic, partitions)) = arg.split_once(':') else {
        return Ok((arg.to_owned(), None));
    };
    if topic.is_empty() || partitions.contains(':') {
        bail!("Invalid topic arg '{arg}', expected topic name and partitions");
    }
    let partitions = partitions
        .split(',')
        .map(|p| p.trim().parse::<i32>().ok().filter(|p| *p >= 0))
        .collect::<Option<Vec<i32>>>()
        .with_context(|| format!("Invalid partition specified in topic arg '{arg}'"))?;
    Ok((topic.to_owned(), Some(partitions)))
}

/// A comma-separated list of partition ids (`--partitions 0,1`).
pub fn partition_list(text: &str) -> anyhow::Result<BTreeSet<i32>> {
    text.split(',')
        .map(|p| p.trim().parse::<i32>().ok().filter(|p| *p >= 0))
        .collect::<Option<BTreeSet<i32>>>()
        .with_context(|| {
            format!(
                "--partitions expects a comma separated list of numeric partition ids, but received: {text}"
            )
        })
}

/// One GetOffsetShell `--topic-partitions` rule: `topic`, `topic:3`,
/// `topic:0-3` (upper bound exclusive, as in Kafka), `topic:2-`, `topic:-3`,
/// or `:0` (any topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRule {
    /// `None` matches every topic.
    pub topic: Option<String>,
    /// Partitions `lower..upper`.
    pub lower: i32,
    pub upper: i32,
}

impl PartitionRule {
    pub fn matches_topic(&self, topic: &str) -> bool {
        self.topic.as_deref().is_none_or(|t| t == topic)
    }

    pub fn matches(&self, topic: &str, partition: i32) -> bool {
        self.matches_topic(topic) && (self.lower..self.upper).contains(&partition)
    }
}

/// `rule,rule,…` of [`PartitionRule`]s.
pub fn partition_rules(text: &str) -> anyhow::Result<Vec<PartitionRule>> {
    text.split(',').map(partition_rule).collect()
}

fn partition_rule(spec: &str) -> anyhow::Result<PartitionRule> {
    let invalid = || anyhow::anyhow!("Invalid rule specification: {spec}");
    let (topic, partitions) = spec.split_once(':').unwrap_or((spec, ""));
    let topic = (!topic.is_empty()).then(|| topic.to_owned());
    if topic.is_none() && partitions.is_empty() {
        return Err(invalid());
    }
    let number = |text: &str| text.parse::<i32>().ok().filter(|n| *n >= 0).ok_or_else(invalid);
    let (lower, upper) = match partitions.split_once('-') {
        None if partitions.is_empty() => (0, i32::MAX),
        None => {
            let single = number(partitions)?;
            (single, single.saturating_add(1))
        }
        Some(("", "")) => return Err(invalid()),
        Some((lower, upper)) => (
            if lower.is_empty() { 0 } else { number(lower)? },
            if upper.is_empty() { i32::MAX } else { number(upper)? },
        ),
    };
    Ok(PartitionRule { topic, lower, upper })
}

/// `--to-datetime`: `YYYY-MM-DDTHH:mm:SS[.sss][zone]` to epoch milliseconds.
/// The zone is `Z`, `±HH:MM`, `±HHMM` or `±HH`; without one the time is
/// local, the offset coming from `local_offset_s` (seconds east of UTC at
/// a given UTC instant in seconds).
pub fn datetime_ms(text: &str, local_offset_s: impl Fn(i64) -> i64) -> anyhow::Result<i64> {
    let bad =
        || anyhow::anyhow!("Error parsing timestamp '{text}': expected YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]");
    let (date, time) = text.split_once(['T', 't']).ok_or_else(bad)?;
    let [year, month, day] = fields::<3>(date, '-').ok_or_else(bad)?;
    let (clock, zone) = match time.find(['Z', 'z', '+', '-']) {
        Some(at) => (&time[..at], Some(&time[at..])),
        None => (time, None),
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let [hour, minute, second] = fields::<3>(hms, ':').ok_or_else(bad)?;
    if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
        return Err(bad());
    }
    if hour > 23
        || minute > 59
        || second > 59
        || fraction.len() > 9
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().map_err(|_| bad())?;
    let naive_s = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    let offset_s = match zone {
        Some(zone) => zone_offset_s(zone).ok_or_else(bad)?,
        // The offset at the naive instant, then again at the corrected one,
        // settles which side of a daylight-saving change the time is on.
        None => local_offset_s(naive_s - local_offset_s(naive_s)),
    };
    Ok((naive_s - offset_s) * 1_000 + millis)
}

/// Exactly `N` non-negative decimal fields separated by `separator`.
fn fields<const N: usize>(text: &str, separator: char) -> Option<[i64; N]> {
    let mut out = [0i64; N];
    let mut parts = text.split(separator);
    for slot in &mut out {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 4 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

fn zone_offset_s(zone: &str) -> Option<i64> {
    if zone.eq_ignore_ascii_case("z") {
        return Some(0);
    }
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !matches!(digits.len(), 2 | 4) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = if digits.len() == 4 { digits[2..].parse().ok()? } else { 0 };
    (hours <= 18 && minutes < 60).then_some(sign * (hours * 3_600 + minutes * 60))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The civil date of a day count since 1970-01-01 (the inverse of
/// [`days_from_civil`], Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The perf tools' default `--date-format`, as in Kafka's.
pub const PERF_DATE_FORMAT: &str = "yyyy-MM-dd HH:mm:ss:SSS";

/// A `--date-format` pattern: the numeric fields of Java's
/// `SimpleDateFormat` (`y`, `M`, `d`, `H`, `m`, `s`, `S`, zero-padded to
/// the letter count; `yy` is the year's last two digits) and `'quoted'`
/// text. Other pattern letters are refused rather than printed wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateFormat(Vec<DatePart>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum DatePart {
    Text(String),
    Field(char, usize),
}

impl DateFormat {
    pub fn parse(pattern: &str) -> anyhow::Result<Self> {
        let mut parts = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => parts.push(DatePart::Text(quoted(&mut chars, pattern)?)),
                c if c.is_ascii_alphabetic() => {
                    let mut count = 1;
                    while chars.next_if_eq(&c).is_some() {
                        count += 1;
                    }
                    if !"yMdHmsS".contains(c) || (c == 'M' && count > 2) {
                        bail!(
                            "--date-format {pattern:?}: only the numeric fields y M d H m s S are supported"
                        );
                    }
                    parts.push(DatePart::Field(c, count));
                }
                c => parts.push(DatePart::Text(c.to_string())),
            }
        }
        Ok(Self(parts))
    }

    /// `utc_ms` in this format, in the zone `local_offset_s` gives.
    pub fn format(&self, utc_ms: i64, local_offset_s: impl Fn(i64) -> i64) -> String {
        let local_ms = utc_ms + local_offset_s(utc_ms.div_euclid(1000)) * 1000;
        let (days, ms_of_day) = (local_ms.div_euclid(86_400_000), local_ms.rem_euclid(86_400_000));
        let (year, month, day) = civil_from_days(days);
        let field = |letter: char, count: usize| match letter {
            'y' if count == 2 => year.rem_euclid(100),
            'y' => year,
            'M' => month,
            'd' => day,
            'H' => ms_of_day / 3_600_000,
            'm' => ms_of_day / 60_000 % 60,
            's' => ms_of_day / 1000 % 60,
            _ => ms_of_day % 1000,
        };
        self.0
            .iter()
            .map(|part| match part {
                DatePart::Text(text) => text.clone(),
                DatePart::Field(letter, count) => format!("{:0count$}", field(*letter, *count)),
            })
            .collect()
    }
}

/// The rest of a `'quoted'` run after its opening quote; `''` is a quote.
fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, pattern: &str) -> anyhow::Result<String> {
    if chars.next_if_eq(&'\'').is_some() {
        return Ok("'".into());
    }
    let mut text = String::new();
    loop {
        match chars.next() {
            Some('\'') if chars.next_if_eq(&'\'').is_some() => text.push('\''),
            Some('\'') => return Ok(text),
            Some(c) => text.push(c),
            None => bail!("--date-format {pattern:?}: unterminated quote"),
        }
    }
}

/// `--by-duration`: an ISO-8601 duration as Java's `Duration.parse` reads
/// it (`PnDTnHnMn.nS`, signs allowed on the whole and on each part), in
/// milliseconds.
pub fn duration_ms(text: &str) -> anyhow::Result<i64> {
    let bad = || anyhow::anyhow!("Error parsing duration '{text}': expected the ISO-8601 form PnDTnHnMnS");
    let upper = text.to_ascii_uppercase();
    let (negated, rest) = match upper.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, upper.strip_prefix('+').unwrap_or(&upper)),
    };
    let rest = rest.strip_prefix('P').ok_or_else(bad)?;
    let (date, time) = match rest.split_once('T') {
        Some((_, "")) => return Err(bad()),
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut total_ms: i64 = 0;
    let mut parts = 0;
    for (value, unit) in duration_parts(date).ok_or_else(bad)? {
        if unit != 'D' || parts > 0 {
            return Err(bad());
        }
        total_ms = total_ms.checked_add(value.checked_mul(86_400_000).ok_or_else(bad)?).ok_or_else(bad)?;
        parts += 1;
    }
    let mut last_unit = 0;
    for (value, unit) in time.map(duration_parts).unwrap_or(Some(Vec::new())).ok_or_else(bad)? {
        let (rank, ms) = match unit {
            'H' => (1, 3_600_000),
            'M' => (2, 60_000),
            'S' => (3, 1),
            _ => return Err(bad()),
        };
        if rank <= last_unit {
            return Err(bad());
        }
        last_unit = rank;
        total_ms = total_ms.checked_add(value.checked_mul(ms).ok_or_else(bad)?).ok_or_else(bad)?;
        parts += 1;
    }
    if parts == 0 {
        return Err(bad());
    }
    Ok(if negated { -total_ms } else { total_ms })
}

/// `±n[.fff]U±n U…` into `(value, unit)`; seconds come back in milliseconds.
fn duration_parts(text: &str) -> Option<Vec<(i64, char)>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let unit_at = rest.find(|c: char| c.is_ascii_alphabetic())?;
        let (number, unit) = (&rest[..unit_at], rest[unit_at..].chars().next()?);
        rest = &rest[unit_at + 1..];
        let (whole, fraction) = number.split_once(['.', ',']).unwrap_or((number, ""));
        let sign = if whole.starts_with('-') { -1 } else { 1 };
        let digits = whole.trim_start_matches(['-', '+']);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || whole.len() - digits.len() > 1
        {
            return None;
        }
        let value: i64 = digits.parse().ok()?;
        let value = if unit == 'S' {
            if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let millis: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
            value.checked_mul(1_000)?.checked_add(millis)?
        } else if !fraction.is_empty() || number.contains(['.', ',']) {
            return None;
        } else {
            value
        };
        parts.push((sign * value, unit));
    }
    Some(parts)
}

/// kafka-configs' `--add-config`: `k1=v1,k2=[a,b],k3=` into pairs, in
/// order. Commas inside brackets belong to the value; the brackets go.
pub fn add_config_pairs(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (at, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items.into_iter().map(config_pair).collect()
}

/// `key=value` with exactly one `=` outside brackets.
fn config_pair(item: &str) -> anyhow::Result<(String, String)> {
    let invalid = || {
        anyhow::anyhow!("Invalid entity config: all configs to be added must be in the format \"key=val\".")
    };
    let mut depth = 0usize;
    let mut equals = Vec::new();
    for (at, c) in item.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '=' if depth == 0 => equals.push(at),
            _ => {}
        }
    }
    let [at] = equals[..] else { return Err(invalid()) };
    let key = item[..at].trim();
    if key.is_empty() {
        return Err(invalid());
    }
    Ok((key.to_owned(), item[at + 1..].replace(['[', ']'], "").trim().to_owned()))
}

/// kafka-delete-records' `--offset-json-file`:
/// `{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}`.
pub fn offset_json(text: &str) -> anyhow::Result<Vec<(String, i32, i64)>> {
    let json: serde_json::Value =
        serde_json::from_str(text).context("The input string is not a valid JSON")?;
    let version = match json.get("version") {
        None => 1,
        Some(v) => v.as_i64().with_context(|| format!("version must be an integer, not {v}"))?,
    };
    if version != 1 {
        bail!("Not supported version field value {version}");
    }
    let partitions = json.get("partitions").context("Missing partitions field")?;
    let partitions = partitions.as_array().context("partitions must be an array")?;
    let mut targets: Vec<(String, i32, i64)> = Vec::with_capacity(partitions.len());
    for entry in partitions {
        let field = |name: &str| entry.get(name).with_context(|| format!("{entry} has no {name}"));
        let topic = field("topic")?.as_str().with_context(|| format!("topic must be a string in {entry}"))?;
        let partition = field("partition")?
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .with_context(|| format!("partition must be an int in {entry}"))?;
        let offset =
            field("offset")?.as_i64().with_context(|| format!("offset must be a long in {entry}"))?;
        targets.push((topic.to_owned(), partition, offset));
    }
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<String> = targets
        .iter()
        .filter(|(t, p, _)| !seen.insert((t.clone(), *p)))
        .map(|(t, p, _)| format!("{t}-{p}"))
        .collect();
    if !duplicates.is_empty() {
        let list: Vec<String> = duplicates.into_iter().collect();
        bail!("Offset json file contains duplicate topic partitions: {}", list.join(","));
    }
    Ok(targets)
}

/// Seconds east of UTC that local time is at `utc_s`, from the C library
/// (which reads `TZ` and the zone database as Java's default zone does).
pub fn local_offset_s(utc_s: i64) -> i64 {
    let time: libc::time_t = utc_s as libc::time_t;
    let mut tm = std::mem::MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: localtime_r reads the time_t we own and fills the `tm` we
    // pass, which points to writable memory of exactly that type; it is
    // the thread-safe variant, so no static buffer is shared.
    #[allow(unsafe_code)]
    let tm = unsafe {
        if libc::localtime_r(&time, tm.as_mut_ptr()).is_null() {
            return 0;
        }
        tm.assume_init()
    };
    tm.tm_gmtoff
}

#[cfg(test)]
mod tests {
    use super::*;

    const UTC: fn(i64) -> i64 = |_| 0;

    #[test]
    fn topic_args_name_all_partitions_or_a_list() {
        assert_eq!(topic_and_partitions("orders").unwrap(), ("orders".into(), None));
        assert_eq!(topic_and_partitions("orders:0,2").unwrap(), ("orders".into(), Some(vec![0, 2])));
        for bad in ["orders:", "orders:x", "orders:1:2", ":1", "orders:-1"] {
            assert!(topic_and_partitions(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn partition_lists_are_numbers() {
        assert_eq!(partition_list("2,0,1").unwrap().into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(partition_list("0,a").is_err());
        assert!(partition_list("").is_err());
    }

    #[test]
    fn offset_shell_rules_follow_kafkas_ranges() {
        let rule =
            |topic: Option<&str>, lower, upper| PartitionRule { topic: topic.map(Into::into), lower, upper };
        assert_eq!(
            partition_rules("t1:1,t2:0-3,t3,t4:5-,t5:-3,:7").unwrap(),
            vec![
                rule(Some("t1"), 1, 2),
                rule(Some("t2"), 0, 3),
                rule(Some("t3"), 0, i32::MAX),
                rule(Some("t4"), 5, i32::MAX),
                rule(Some("t5"), 0, 3),
                rule(None, 7, 8),
            ]
        );
        let range = &partition_rules("t:0-2").unwrap()[0];
        assert!(
            range.matches("t", 0) && range.matches("t", 1) && !range.matches("t", 2),
            "upper bound is exclusive"
        );
        assert!(!range.matches("u", 0));
        for bad in [":", "t:x", "t:-", "t:1-x", ""] {
            assert!(partition_rules(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn datetimes_with_a_zone_are_absolute() {
        assert_eq!(datetime_ms("1970-01-01T00:00:00.000Z", UTC).unwrap(), 0);
        assert_eq!(datetime_ms("2024-02-29T12:34:56.789Z", UTC).unwrap(), 1_709_210_096_789);
        assert_eq!(datetime_ms("2024-02-29T13:34:56.789+01:00", UTC).unwrap(), 1_709_210_096_789);
        assert_eq!(datetime_ms("2024-02-29T07:04:56.789-0530", UTC).unwrap(), 1_709_210_096_789);
        assert_eq!(datetime_ms("2024-02-29T12:34:56Z", UTC).unwrap(), 1_709_210_096_000, "millis optional");
        assert_eq!(datetime_ms("1969-12-31T23:59:59.000Z", UTC).unwrap(), -1_000);
    }

    #[test]
    fn datetimes_without_a_zone_are_local() {
        let one_hour_east = |_| 3_600;
        assert_eq!(datetime_ms("1970-01-01T01:00:00.000", one_hour_east).unwrap(), 0);
        assert_eq!(datetime_ms("1970-01-01T01:00:00.000", UTC).unwrap(), 3_600_000);
    }

    #[test]
    fn malformed_datetimes_are_refused() {
        for bad in [
            "2024-02-30T00:00:00.000Z",
            "2023-02-29T00:00:00.000Z",
            "2024-13-01T00:00:00.000Z",
            "2024-01-01 00:00:00.000",
            "2024-01-01T24:00:00.000Z",
            "2024-01-01T00:00.000Z",
            "2024-01-01T00:00:00.000+25:00",
            "2024-01-01T00:00:00.0x0Z",
            "yesterday",
        ] {
            assert!(datetime_ms(bad, UTC).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_read_as_java_reads_them() {
        assert_eq!(duration_ms("PT0S").unwrap(), 0);
        assert_eq!(duration_ms("PT15M").unwrap(), 900_000);
        assert_eq!(duration_ms("P1DT2H3M4.5S").unwrap(), 93_784_500);
        assert_eq!(duration_ms("pt1h").unwrap(), 3_600_000);
        assert_eq!(duration_ms("P2D").unwrap(), 172_800_000);
        assert_eq!(duration_ms("-PT1M").unwrap(), -60_000);
        assert_eq!(duration_ms("PT-1M30S").unwrap(), -30_000);
        for bad in ["", "P", "PT", "1H", "PT1D", "PT1S1M", "P1H", "PT1.5M", "PTxS", "P1DT", "P1D2D"] {
            assert!(duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn add_config_keeps_bracketed_commas_in_the_value() {
        let pairs = add_config_pairs("retention.ms=1000, cleanup.policy=[compact,delete],k3=").unwrap();
        let expected = [("retention.ms", "1000"), ("cleanup.policy", "compact,delete"), ("k3", "")];
        assert_eq!(pairs, expected.map(|(k, v)| (k.to_owned(), v.to_owned())));
        assert_eq!(add_config_pairs("").unwrap(), Vec::new());
        for bad in ["novalue", "a=b=c", "=v", "a=1,,b=2"] {
            assert!(add_config_pairs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn offset_json_reads_kafkas_format() {
        let text = r#"{"partitions":[{"topic":"t","partition":0,"offset":5},{"topic":"u","partition":2,"offset":-1}],"version":1}"#;
        assert_eq!(offset_json(text).unwrap(), vec![("t".into(), 0, 5), ("u".into(), 2, -1)]);
        let no_version = r#"{"partitions":[{"topic":"t","partition":1,"offset":0}]}"#;
        assert_eq!(offset_json(no_version).unwrap(), vec![("t".into(), 1, 0)]);
    }

    #[test]
    fn offset_json_errors_name_the_problem() {
        let error = |text: &str| offset_json(text).unwrap_err().to_string();
        assert!(error("{").contains("not a valid JSON"));
        assert!(error(r#"{"version":2,"partitions":[]}"#).contains("Not supported version field value 2"));
        assert!(error(r#"{"version":1}"#).contains("Missing partitions field"));
        assert!(error(r#"{"partitions":[{"topic":"t","offset":1}]}"#).contains("partition"));
        let duplicate = r#"{"partitions":[{"topic":"t","partition":0,"offset":1},{"topic":"t","partition":0,"offset":2}]}"#;
        assert!(error(duplicate).contains("duplicate topic partitions: t-0"));
    }

    #[test]
    fn perf_datetimes_read_as_kafkas_date_format() {
        let kafka = DateFormat::parse(PERF_DATE_FORMAT).unwrap();
        assert_eq!(kafka.format(0, |_| 0), "1970-01-01 00:00:00:000");
        assert_eq!(kafka.format(1_709_251_199_007, |_| 0), "2024-02-29 23:59:59:007");
        assert_eq!(kafka.format(1_709_251_199_007, |_| 3600), "2024-03-01 00:59:59:007");
        assert_eq!(kafka.format(-1, |_| 0), "1969-12-31 23:59:59:999");
        let custom = DateFormat::parse("yy/M/d 'at' H'h'mm ''s.S").unwrap();
        assert_eq!(custom.format(1_709_251_199_007, |_| 0), "24/2/29 at 23h59 '59.7");
        for bad in ["yyyy-MMM-dd", "EEE HH", "'open"] {
            assert!(DateFormat::parse(bad).is_err(), "{bad}");
        }
        for days in [-800_000, -1, 0, 59, 11_016, 20_000, 2_932_896] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
        }
    }

    #[test]
    fn local_offset_is_a_plausible_zone_offset() {
        let offset = local_offset_s(1_700_000_000);
        assert!((-18 * 3_600..=18 * 3_600).contains(&offset));
    }
}
