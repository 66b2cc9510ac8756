//! `strom`: one binary for the broker and its tools.
//!
//! - `strom server [PROPERTIES_FILE] [--override KEY=VALUE]...` runs a broker,
//!   like `kafka-server-start.sh`.
//! - `strom dump-log --files A,B [--deep-iteration] [--print-data-log]` prints
//!   segment and index files, like `kafka-dump-log.sh`.

mod dump_log;
mod server;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: strom_broker::alloc::LazyLargeAlloc = strom_broker::alloc::LazyLargeAlloc;

#[derive(Parser)]
#[command(name = "strom", version, about = "An event streaming platform that speaks Kafka's protocol")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker.
    Server(server::ServerArgs),
    /// Print the batches, records and index entries of segment files.
    DumpLog(dump_log::DumpLogArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server(args) => server::run(args),
        Command::DumpLog(args) => dump_log::run(args),
    };
    if let Err(e) = result {
        eprintln!("strom: {e:#}");
        std::process::exit(1);
    }
}
