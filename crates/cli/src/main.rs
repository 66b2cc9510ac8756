//! `strom`: one binary for the broker and its tools.
//!
//! - `strom server [PROPERTIES_FILE] [--override KEY=VALUE]...` runs a broker,
//!   like `kafka-server-start.sh`.
//! - `strom dump-log --files A,B [--deep-iteration] [--print-data-log]` prints
//!   segment and index files, like `kafka-dump-log.sh`.
//! - `strom topics`, `strom produce`, `strom consume`, `strom perf`: client
//!   tools on `strom-client`, like `kafka-topics.sh`, the console producer and
//!   consumer, and the producer and consumer perf tests.
//! - The admin tools, on `strom-client`'s `Admin`: `strom groups`
//!   (`kafka-consumer-groups.sh`), `strom configs` (`kafka-configs.sh`),
//!   `strom offsets` (`kafka-get-offsets.sh`), `strom delete-records`
//!   (`kafka-delete-records.sh`) and `strom cluster` (cluster id, controller,
//!   brokers, and `kafka-broker-api-versions.sh`), `strom transactions`
//!   (`kafka-transactions.sh`), `strom leader-election`
//!   (`kafka-leader-election.sh`), `strom reassign`
//!   (`kafka-reassign-partitions.sh`). Kafka's flags and text
//!   output; `--format json` where a script would parse the output.
//! - `strom storage format` and `strom storage random-uuid` prepare a KRaft
//!   node's log dirs, like `kafka-storage.sh`.
//!
//! Each tool is one module; `logging` sets up log output for all of them and
//! the broker; `client_args` holds what they share (connecting,
//! `--format`, column padding) and `specs` the parsing of their argument
//! syntaxes (partition lists, datetimes, durations, offset JSON).

mod acls;
mod client_args;
mod cluster;
mod configs;
mod consume;
mod delete_records;
mod dump_log;
mod features;
mod groups;
mod leader_election;
mod logging;
mod offsets;
mod perf;
mod perf_consume;
mod produce;
mod quota_configs;
mod reassign;
mod server;
mod specs;
mod storage;
mod topics;
mod transactions;

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
    /// List, describe and delete consumer groups; reset or delete their offsets.
    Groups(groups::GroupsArgs),
    /// Describe topic and broker configs, or set and delete them.
    Configs(configs::ConfigsArgs),
    /// Add, list and remove ACLs.
    Acls(acls::AclsArgs),
    /// Partitions' earliest, latest or time-indexed offsets.
    Offsets(offsets::OffsetsArgs),
    /// Delete the records before an offset.
    DeleteRecords(delete_records::DeleteRecordsArgs),
    /// Elect preferred or unclean leaders of partitions.
    LeaderElection(leader_election::LeaderElectionArgs),
    /// Move partition replicas between brokers: generate, execute, verify, cancel and list reassignments.
    Reassign(reassign::ReassignArgs),
    /// The cluster's id, controller and brokers, or the brokers' API versions.
    Cluster(cluster::ClusterArgs),
    /// List and describe transactions; find and abort hanging ones.
    Transactions(transactions::TransactionsArgs),
    /// Describe, upgrade, downgrade and disable the cluster's feature levels.
    Features(features::FeaturesArgs),
    /// Format a KRaft node's log dirs, or print a random UUID.
    Storage(storage::StorageArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
}

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Server(_)) {
        // Tools log warnings only, unless RUST_LOG asks for more.
        if let Err(e) = logging::init(None, "warn", logging::LogFormat::Text) {
            exit_with(&e);
        }
        die_quietly_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Server(args) => server::run(args),
        Command::DumpLog(args) => dump_log::run(args),
        Command::Topics(args) => topics::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Groups(args) => groups::run(args),
        Command::Configs(args) => configs::run(args),
        Command::Acls(args) => acls::run(args),
        Command::Offsets(args) => offsets::run(args),
        Command::DeleteRecords(args) => delete_records::run(args),
        Command::LeaderElection(args) => leader_election::run(args),
        Command::Reassign(args) => reassign::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Transactions(args) => transactions::run(args),
        Command::Features(args) => features::run(args),
        Command::Storage(args) => storage::run(args),
        Command::Perf(command) => perf::run(command),
    };
    if let Err(e) = result {
        exit_with(&e);
    }
}

/// Reports `error` in one line and exits 1; a closed standard error loses
/// the line but not the exit status.
fn exit_with(error: &anyhow::Error) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "strom: {error:#}");
    std::process::exit(1);
}

/// A tool piped into `head` ends when the pipe closes, as Unix tools do,
/// instead of panicking in `println!`. (The broker keeps Rust's default,
/// SIGPIPE ignored, so a closed socket is an error it handles.)
fn die_quietly_on_closed_pipe() {
    // SAFETY: restoring the default disposition of SIGPIPE at start-up,
    // before any thread exists, has no memory-safety consequence.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
