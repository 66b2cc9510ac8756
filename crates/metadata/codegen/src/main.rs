//! Regenerates `crates/metadata/src/kraft_records/generated.rs` from the
//! schemas in `crates/metadata/schemas/`:
//! `cargo run -p strom-metadata-codegen`.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let metadata_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = metadata_dir.join(strom_metadata_codegen::GENERATED_PATH);
    let code = match strom_metadata_codegen::generate(&metadata_dir.join("schemas")) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&out, code) {
        eprintln!("error: cannot write {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("wrote {}", out.display());
    ExitCode::SUCCESS
}
