//! Strom's generator of KRaft metadata record types.
//!
//! Kafka defines its metadata records (KIP-631) in JSON schema files; the
//! copies Strom builds from live in `crates/metadata/schemas/`. This crate
//! turns them into Rust:
//!
//! - [`schema`] reads a schema file (Kafka's JSON with comments) into a model
//!   and rejects features the emitter does not handle;
//! - [`emit`] writes one struct per record and per nested struct, with
//!   per-version encode and decode, and the `MetadataRecord` enum over all
//!   record types.
//!
//! The output is checked in (`crates/metadata/src/kraft_records/generated.rs`)
//! so normal builds do not run the generator; a test in `strom-metadata`
//! regenerates it and fails on any difference. Regenerate with
//! `cargo run -p strom-metadata-codegen`.

pub mod emit;
pub mod schema;

use std::path::Path;

/// Where the output goes, relative to the `strom-metadata` crate.
pub const GENERATED_PATH: &str = "src/kraft_records/generated.rs";

/// Generates the Rust module from every `*.json` schema in `schema_dir`.
pub fn generate(schema_dir: &Path) -> Result<String, String> {
    let entries = std::fs::read_dir(schema_dir).map_err(|e| format!("{}: {e}", schema_dir.display()))?;
    let mut schemas = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", schema_dir.display()))?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            schemas.push(schema::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?);
        }
    }
    schemas.sort_by_key(|schema| schema.api_key);
    if let Some(pair) = schemas.windows(2).find(|pair| pair[0].api_key == pair[1].api_key) {
        return Err(format!("{} and {} share apiKey {}", pair[0].name, pair[1].name, pair[0].api_key));
    }
    emit::module(&schemas)
}
