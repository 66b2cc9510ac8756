//! `strom`: one binary for the broker and its tools.
//!
//! - `strom server [PROPERTIES_FILE] [--override KEY=VALUE]...` runs a broker,
//!   like `kafka-server-start.sh`.
//! - `strom dump-log --files A,B [--deep-iteration] [--print-data-log]` prints
//!   segment and index files, like `kafka-dump-log.sh`.
//! - `strom topics`, `strom produce`, `strom consume`, `strom perf`: client
//!   tools on `strom-client`, like `kafka-topics.sh`, the console producer and
//!   consumer, and the producer and consumer perf tests.

mod client_args;
mod consume;
mod dump_log;
mod perf;
mod perf_consume;
mod produce;
mod server;
mod topics;

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
    /// Create, list, describe, alter and delete topics.
    Topics(topics::TopicsArgs),
    /// Send lines from standard input or a file as records.
    Produce(produce::ProduceArgs),
    /// Print records of a topic, alone or in a consumer group.
    Consume(consume::ConsumeArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
}

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Server(_)) {
        // Tools log warnings only, unless RUST_LOG asks for more.
        let _ = server::init_logging(Some("warn".into()));
    }
    let result = match cli.command {
        Command::Server(args) => server::run(args),
        Command::DumpLog(args) => dump_log::run(args),
        Command::Topics(args) => topics::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Perf(command) => perf::run(command),
    };
    if let Err(e) = result {
        eprintln!("strom: {e:#}");
        std::process::exit(1);
    }
}
