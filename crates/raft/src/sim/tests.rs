//! Runs the simulation over many seeds.
//!
//! `STROM_SIM_SEEDS=N` sets how many seeds run (from `STROM_SIM_FIRST_SEED`,
//! default 0); `STROM_SIM_SEED=S` replays one seed exactly, and with
//! `STROM_SIM_TRACE=<node id>` prints that node's events and actions;
//! `STROM_SIM_VERBOSE=1` prints each seed's statistics.

use super::{run, SimConfig};

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(value.parse().unwrap_or_else(|_| panic!("{name} must be a number, got {value:?}")))
}

fn seeds(default_count: u64) -> std::ops::Range<u64> {
    if let Some(seed) = env_u64("STROM_SIM_SEED") {
        return seed..seed + 1;
    }
    let first = env_u64("STROM_SIM_FIRST_SEED").unwrap_or(0);
    first..first + env_u64("STROM_SIM_SEEDS").unwrap_or(default_count)
}

/// Static voters; with `DYNAMIC_SEEDS`, sized to about 30 s in a debug build.
const DEFAULT_SEEDS: u64 = 1_000;
/// Dynamic voters (KIP-853).
const DYNAMIC_SEEDS: u64 = 300;

#[test]
fn invariants_hold_and_quorum_recovers_for_every_seed() {
    let started = std::time::Instant::now();
    let mut events = 0;
    let (mut snapshots, mut installs, mut crashes_mid_snapshot) = (0, 0, 0);
    let mut recoveries_ms = Vec::new();
    let seeds = seeds(DEFAULT_SEEDS);
    for seed in seeds.clone() {
        match run(seed, SimConfig::for_seed(seed)) {
            Ok(stats) => {
                if std::env::var("STROM_SIM_VERBOSE").is_ok() {
                    eprintln!("seed {seed}: {stats:?}");
                }
                events += stats.events;
                snapshots += stats.snapshots;
                installs += stats.installs;
                crashes_mid_snapshot += stats.crashes_mid_snapshot;
                recoveries_ms.push(stats.recovery_ms);
            }
            Err(violation) => panic!(
                "seed {seed} failed: {violation}\nreplay: STROM_SIM_SEED={seed} cargo test -p strom-raft sim"
            ),
        }
    }
    recoveries_ms.sort_unstable();
    let median = recoveries_ms.get(recoveries_ms.len() / 2).copied().unwrap_or(0);
    let worst = recoveries_ms.last().copied().unwrap_or(0);
    eprintln!(
        "{} seeds, {events} events in {:?}; simulated recovery after healing: median {median} ms, worst {worst} ms; \
         {snapshots} snapshots taken, {installs} installed by followers, {crashes_mid_snapshot} crashes mid-fetch",
        seeds.count(),
        started.elapsed()
    );
}

/// KIP-853: an administrator adds observers as voters and removes voters
/// (the leader too) under the same faults, from a bootstrap voter set of
/// one or three.
#[test]
fn invariants_hold_while_voters_change_for_every_seed() {
    let started = std::time::Instant::now();
    let (mut events, mut asked, mut done, mut self_updates) = (0, 0, 0, 0);
    let seeds = seeds(DYNAMIC_SEEDS);
    for seed in seeds.clone() {
        match run(seed, SimConfig::dynamic_for_seed(seed)) {
            Ok(stats) => {
                if std::env::var("STROM_SIM_VERBOSE").is_ok() {
                    eprintln!("seed {seed}: {stats:?}");
                }
                events += stats.events;
                asked += stats.voter_changes_asked;
                done += stats.voter_changes_done;
                self_updates += stats.self_updates;
            }
            Err(violation) => panic!(
                "seed {seed} failed: {violation}\nreplay: STROM_SIM_SEED={seed} cargo test -p strom-raft \
                 invariants_hold_while_voters_change"
            ),
        }
    }
    eprintln!(
        "{} seeds with dynamic voters, {events} events in {:?}; {done} of {asked} voter changes committed; \
         {self_updates} UpdateRaftVoter sent by voters whose entry an administrator had moved",
        seeds.count(),
        started.elapsed()
    );
    assert!(done > 0, "no voter change ever committed");
    assert!(self_updates > 0, "no voter ever corrected its own entry");
}

/// Changes one at a time keep any two majorities overlapping: a leader
/// that starts a change before the previous one committed lets two
/// disjoint majorities decide, and the checker sees it.
#[test]
fn two_voter_changes_in_flight_are_caught() {
    let config = |seed| SimConfig { voter_change_interval_ms: 100, ..SimConfig::dynamic_for_seed(seed) };
    let caught = (0..2000).find_map(|seed| {
        let mut buggy = config(seed);
        buggy.bugs.two_voter_changes_in_flight = true;
        // A stuck quorum is a symptom too, but the point is lost safety.
        run(seed, buggy)
            .err()
            .filter(|violation| !violation.starts_with("Liveness"))
            .map(|violation| (seed, violation))
    });
    let (seed, violation) = caught.expect("the planted bug went unnoticed for 2000 seeds");
    eprintln!("seed {seed} caught the planted bug: {violation}");
    run(seed, config(seed)).expect("the same seed passes without the bug");
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 4] {
        let first = run(seed, SimConfig::for_seed(seed)).expect("seed passes");
        assert_eq!(run(seed, SimConfig::for_seed(seed)).expect("seed passes"), first);
        let first = run(seed, SimConfig::dynamic_for_seed(seed)).expect("seed passes");
        assert_eq!(run(seed, SimConfig::dynamic_for_seed(seed)).expect("seed passes"), first);
    }
}

/// The checker can fail: with votes that ignore how up to date the
/// candidate's log is, a stale voter wins an election and truncates
/// committed records, and some seed among the first few hundred shows it.
#[test]
fn a_vote_that_ignores_the_log_is_caught() {
    let caught = (0..500).find_map(|seed| {
        let mut config = SimConfig::for_seed(seed);
        config.bugs.vote_ignores_log = true;
        run(seed, config).err().map(|violation| (seed, violation))
    });
    let (seed, violation) = caught.expect("the planted bug went unnoticed for 500 seeds");
    eprintln!("seed {seed} caught the planted bug: {violation}");
    assert!(violation.contains("ConsistentCommittedData") || violation.contains("MonotonicHighWatermark"));
}

/// The subtler rule: a new leader that exposes older epochs' records before
/// one of its own commits can see them overwritten (Raft's figure 8).
#[test]
fn committing_without_a_record_of_the_leaders_epoch_is_caught() {
    let caught = (0..3000).find_map(|seed| {
        let mut config = SimConfig::for_seed(seed);
        config.bugs.commit_without_own_epoch = true;
        run(seed, config).err().map(|violation| (seed, violation))
    });
    let (seed, violation) = caught.expect("the planted bug went unnoticed for 3000 seeds");
    eprintln!("seed {seed} caught the planted bug: {violation}");
}

/// The shapes the main run leaves out, on fewer seeds: a lone voter (no
/// majority to lose, so no check-quorum) and four voters (an even quorum,
/// where three make a majority and the high watermark is the third offset).
#[test]
fn invariants_hold_for_one_and_four_voters() {
    let count = env_u64("STROM_SIM_SEEDS").map_or(OTHER_SHAPES_SEEDS, |seeds| seeds / 10);
    let first = env_u64("STROM_SIM_FIRST_SEED").unwrap_or(0);
    for seed in first..first + count {
        for voters in [1, 4] {
            let config = SimConfig { voters, ..SimConfig::for_seed(seed) };
            if let Err(violation) = run(seed, config) {
                panic!("seed {seed} with {voters} voters failed: {violation}");
            }
        }
    }
}

/// Seeds per shape in `invariants_hold_for_one_and_four_voters`.
const OTHER_SHAPES_SEEDS: u64 = 100;

/// Pre-votes must change no one's state: one that binds the voter is a
/// vote cast for a node that never ran in that epoch.
#[test]
fn a_pre_vote_that_binds_the_voter_is_caught() {
    let caught = (0..200).find_map(|seed| {
        let mut config = SimConfig::for_seed(seed);
        config.bugs.pre_vote_binds = true;
        run(seed, config).err().map(|violation| (seed, violation))
    });
    let (seed, violation) = caught.expect("the planted bug went unnoticed for 200 seeds");
    eprintln!("seed {seed} caught the planted bug: {violation}");
    assert!(violation.contains("ElectionStateDurable"), "{violation}");
}

/// Snapshots only at committed offsets: a core that lets the state machine
/// snapshot above the high watermark can snapshot records that never
/// commit, and the checker sees it.
#[test]
fn a_snapshot_above_the_high_watermark_is_caught() {
    let caught = (0..200).find_map(|seed| {
        let mut config = SimConfig::for_seed(seed);
        config.bugs.snapshot_above_high_watermark = true;
        run(seed, config).err().map(|violation| (seed, violation))
    });
    let (seed, violation) = caught.expect("the planted bug went unnoticed for 200 seeds");
    eprintln!("seed {seed} caught the planted bug: {violation}");
    assert!(violation.contains("SnapshotAtCommittedOffset"), "{violation}");
}
