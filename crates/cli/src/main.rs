//! `strom`: one binary for the broker and its tools.
//!
//! - `strom server [PROPERTIES_FILE] [--override KEY=VALUE]...` runs a broker,
//!   like `kafka-server-start.sh`.

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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server(args) => server::run(args),
    };
    if let Err(e) = result {
        eprintln!("strom: {e:#}");
        std::process::exit(1);
    }
}
