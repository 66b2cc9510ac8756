//! Kafka's message schema JSON, read into a model the emitter walks.
//!
//! Only what metadata records use is accepted; anything else is an error
//! naming the schema and field, so a new schema feature is never silently
//! mis-generated.

use serde_json::{Map, Value};

/// An inclusive version range; `highest: None` is open-ended ("2+").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub lowest: i16,
    pub highest: Option<i16>,
}

impl Versions {
    fn parse(text: &str) -> Result<Self, String> {
        let number = |s: &str| s.trim().parse::<i16>().map_err(|_| format!("bad version range {text:?}"));
        if let Some(lowest) = text.strip_suffix('+') {
            return Ok(Self { lowest: number(lowest)?, highest: None });
        }
        match text.split_once('-') {
            Some((lowest, highest)) => Ok(Self { lowest: number(lowest)?, highest: Some(number(highest)?) }),
            None => Ok(Self { lowest: number(text)?, highest: Some(number(text)?) }),
        }
    }

    /// Whether these versions include every version of `within`.
    pub fn covers(&self, within: Versions) -> bool {
        let highest_ok = match (self.highest, within.highest) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(mine), Some(theirs)) => mine >= theirs,
        };
        self.lowest <= within.lowest && highest_ok
    }

    pub fn intersect(&self, other: Versions) -> Versions {
        let highest = match (self.highest, other.highest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Versions { lowest: self.lowest.max(other.lowest), highest }
    }
}

/// A field type.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    Int8,
    Int16,
    Uint16,
    Int32,
    Int64,
    Float64,
    Bool,
    Uuid,
    String,
    Bytes,
    Array(Box<Type>),
    /// A struct declared inline by the field, named by its `[]Name` type.
    Struct(std::string::String),
}

impl Type {
    fn parse(text: &str, has_fields: bool) -> Result<Self, String> {
        if let Some(element) = text.strip_prefix("[]") {
            return Ok(Type::Array(Box::new(Type::parse(element, has_fields)?)));
        }
        Ok(match text {
            "int8" => Type::Int8,
            "int16" => Type::Int16,
            "uint16" => Type::Uint16,
            "int32" => Type::Int32,
            "int64" => Type::Int64,
            "float64" => Type::Float64,
            "bool" => Type::Bool,
            "uuid" => Type::Uuid,
            "string" => Type::String,
            "bytes" => Type::Bytes,
            name if has_fields && name.starts_with(char::is_uppercase) => Type::Struct(name.to_string()),
            other => return Err(format!("unsupported type {other:?}")),
        })
    }

    /// Whether the encoding has a compact length prefix (and so can be null).
    pub fn is_compact(&self) -> bool {
        matches!(self, Type::String | Type::Bytes | Type::Array(_))
    }
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub ty: Type,
    pub versions: Versions,
    pub nullable: Option<Versions>,
    pub tag: Option<u32>,
    pub default: Option<String>,
    pub ignorable: bool,
    pub about: String,
    /// The fields of the struct this field's `[]Name` type declares.
    pub fields: Vec<Field>,
}

/// One metadata record schema.
#[derive(Debug, Clone)]
pub struct Schema {
    pub name: String,
    pub api_key: u16,
    pub valid_versions: Versions,
    pub fields: Vec<Field>,
}

/// Removes `//` and `/* */` comments outside strings: Kafka's schema files
/// carry a license header and notes that strict JSON does not allow.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('/', Some('/')) => while chars.next_if(|&c| c != '\n').is_some() {},
            ('/', Some('*')) => {
                chars.next();
                let mut previous = ' ';
                for c in chars.by_ref() {
                    if previous == '*' && c == '/' {
                        break;
                    }
                    previous = c;
                }
            }
            _ => {
                in_string = c == '"';
                out.push(c);
            }
        }
    }
    out
}

pub fn parse(text: &str) -> Result<Schema, String> {
    let value: Value =
        serde_json::from_str(&strip_comments(text)).map_err(|e| format!("invalid JSON: {e}"))?;
    let object = value.as_object().ok_or("the schema is not a JSON object")?;
    allow_keys(object, &["apiKey", "type", "name", "validVersions", "flexibleVersions", "fields"])?;
    let name = string(object, "name")?;
    let context = |e: String| format!("{name}: {e}");
    if string(object, "type").map_err(context)? != "metadata" {
        return Err(context("not a metadata record (\"type\" is not \"metadata\")".into()));
    }
    // Kafka made every metadata record flexible from version 0; the emitter
    // relies on it.
    if string(object, "flexibleVersions").map_err(context)? != "0+" {
        return Err(context("flexibleVersions must be \"0+\"".into()));
    }
    let api_key = object
        .get("apiKey")
        .and_then(Value::as_u64)
        .and_then(|key| u16::try_from(key).ok())
        .filter(|&key| key <= i16::MAX as u16)
        .ok_or_else(|| context("apiKey must be a number from 0 to 32767".into()))?;
    let valid_versions =
        Versions::parse(&string(object, "validVersions").map_err(context)?).map_err(context)?;
    if valid_versions.highest.is_none() {
        return Err(context("validVersions must be closed".into()));
    }
    let fields = parse_fields(object, &name)?;
    Ok(Schema { name, api_key, valid_versions, fields })
}

fn parse_fields(object: &Map<String, Value>, path: &str) -> Result<Vec<Field>, String> {
    let fields = object
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{path}: no \"fields\" array"))?;
    let fields = fields.iter().map(|field| parse_field(field, path)).collect::<Result<Vec<_>, _>>()?;
    let mut tags: Vec<u32> = fields.iter().filter_map(|f| f.tag).collect();
    tags.sort_unstable();
    if tags.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(format!("{path}: two fields share a tag"));
    }
    Ok(fields)
}

fn parse_field(value: &Value, parent: &str) -> Result<Field, String> {
    let object = value.as_object().ok_or_else(|| format!("{parent}: a field is not an object"))?;
    allow_keys(
        object,
        &[
            "name",
            "type",
            "versions",
            "about",
            "default",
            "nullableVersions",
            "taggedVersions",
            "tag",
            "ignorable",
            "entityType",
            "mapKey",
            "fields",
        ],
    )?;
    let name = string(object, "name").map_err(|e| format!("{parent}: {e}"))?;
    let path = format!("{parent}.{name}");
    let context = |e: String| format!("{path}: {e}");
    let ty = Type::parse(&string(object, "type").map_err(context)?, object.contains_key("fields"))
        .map_err(context)?;
    let versions = Versions::parse(&string(object, "versions").map_err(context)?).map_err(context)?;
    let nullable = optional_string(object, "nullableVersions")?
        .map(|v| Versions::parse(&v))
        .transpose()
        .map_err(context)?;
    if nullable.is_some() && !ty.is_compact() {
        return Err(context("only strings, bytes and arrays can be nullable".into()));
    }
    let tag = parse_tag(object, versions).map_err(context)?;
    let default = optional_string(object, "default")?;
    if default.as_deref() == Some("null") && nullable.is_none_or(|n| !n.covers(versions)) {
        return Err(context("a null default needs the field to be nullable in all its versions".into()));
    }
    if tag.is_some() && nullable.is_some() && default.as_deref() != Some("null") {
        return Err(context("a nullable tagged field must default to null".into()));
    }
    let fields = match object.contains_key("fields") {
        true => parse_fields(object, &path)?,
        false => Vec::new(),
    };
    if matches!(&ty, Type::Array(element) if matches!(**element, Type::Array(_))) {
        return Err(context("nested arrays are not supported".into()));
    }
    let ignorable = object.get("ignorable").and_then(Value::as_bool).unwrap_or(false);
    let about = optional_string(object, "about")?.unwrap_or_default().trim().to_string();
    Ok(Field { name, ty, versions, nullable, tag, default, ignorable, about, fields })
}

/// A tag, given as a number or a string of one. Tagged versions must equal
/// the field's versions: a field that is tagged only in some versions is not
/// used by metadata records.
fn parse_tag(object: &Map<String, Value>, versions: Versions) -> Result<Option<u32>, String> {
    let tagged_versions = optional_string(object, "taggedVersions")?;
    let tag = match object.get("tag") {
        None => None,
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Some(Value::String(s)) => s.parse().ok(),
        Some(_) => None,
    };
    match (tagged_versions, tag, object.contains_key("tag")) {
        (None, None, false) => Ok(None),
        (Some(tagged), Some(tag), true) if Versions::parse(&tagged)? == versions => Ok(Some(tag)),
        (Some(_), Some(_), true) => Err("taggedVersions must equal versions".into()),
        _ => Err("a tagged field needs both taggedVersions and a numeric tag".into()),
    }
}

fn allow_keys(object: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(format!("unsupported schema key {key:?}")),
        None => Ok(()),
    }
}

fn string(object: &Map<String, Value>, key: &str) -> Result<String, String> {
    optional_string(object, key)?.ok_or_else(|| format!("missing {key:?}"))
}

fn optional_string(object: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match object.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{key:?} must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_stripped_outside_strings_only() {
        let text = "// header\n{ \"a\": \"http://x\", /* note */ \"b\": 1 // tail\n}";
        let value: Value = serde_json::from_str(&strip_comments(text)).unwrap();
        assert_eq!(value["a"], "http://x");
        assert_eq!(value["b"], 1);
    }

    #[test]
    fn version_ranges_parse_like_kafka() {
        assert_eq!(Versions::parse("2+").unwrap(), Versions { lowest: 2, highest: None });
        assert_eq!(Versions::parse("0-3").unwrap(), Versions { lowest: 0, highest: Some(3) });
        assert_eq!(Versions::parse("1").unwrap(), Versions { lowest: 1, highest: Some(1) });
        assert!(Versions::parse("x").is_err());
    }

    #[test]
    fn unsupported_schema_features_are_errors() {
        let schema = |field: &str| {
            format!(
                r#"{{"apiKey": 1, "type": "metadata", "name": "R", "validVersions": "0",
                    "flexibleVersions": "0+", "fields": [{field}]}}"#
            )
        };
        let bad = [
            r#"{"name": "A", "type": "int32", "versions": "0+", "nullableVersions": "0+"}"#,
            r#"{"name": "A", "type": "uint64", "versions": "0+"}"#,
            r#"{"name": "A", "type": "int32", "versions": "0+", "taggedVersions": "1+", "tag": 0}"#,
            r#"{"name": "A", "type": "int32", "versions": "0+", "zeroCopy": true}"#,
        ];
        for field in bad {
            assert!(parse(&schema(field)).is_err(), "{field}");
        }
        let good = r#"{"name": "A", "type": "[]int32", "versions": "0+", "nullableVersions": "0+",
                       "taggedVersions": "0+", "tag": "3", "default": "null"}"#;
        assert_eq!(parse(&schema(good)).unwrap().fields[0].tag, Some(3));
    }
}
