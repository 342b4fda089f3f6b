//! The crash-state explorer over every workload of the default run.
//!
//! Environment:
//! - `DUALFS_CRASH_REPLAY=seed:workload:state` runs one state (or, with
//!   state `-`, one whole workload) again, as a failure printed it;
//! - `DUALFS_CRASH_LONG=N` runs a long campaign: N seeds, each drawing ten
//!   times the default number of states per workload;
//! - `DUALFS_CRASH_SEED=hex` starts from another seed (another volume
//!   identity, other states);
//! - `DUALFS_CRASH_THREADS` (default 2);
//! - `DUALFS_LONG=1` also explores every named pattern on a mirrored
//!   meta-data device, with more states each.
//!
//! docs/TESTING.md describes what is checked.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use dualfs_sim::explorer::{Config, Explorer, Failure, Stats, show_events};
use dualfs_sim::record::{Dev, Event};
use dualfs_sim::workloads;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn replay(spec: &str) {
    let mut parts = spec.splitn(3, ':');
    let (Some(seed), Some(name), Some(state)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("DUALFS_CRASH_REPLAY is seed:workload:state, not {spec}");
    };
    let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("hex seed");
    let w = workloads::by_name(name).unwrap_or_else(|| panic!("no workload {name}"));
    let state = if state == "-" { None } else { Some(state.parse().expect("state number")) };
    let verbose = env("DUALFS_CRASH_VERBOSE").is_some();
    let base = if name.starts_with("discard/") {
        Config::discard()
    } else if name.starts_with("mirror/") {
        Config::mirrored()
    } else {
        Config::default()
    };
    let mount = if env("DUALFS_CRASH_STRICT").is_some() { strict_mount() } else { base.mount };
    let ex = Explorer::new(Config { seed, verbose, mount, ..base }, &workloads::setup()).expect("base image");
    match ex.replay(&w, state) {
        Ok(s) => println!("replayed {spec}: passes ({s:?})"),
        Err(f) => panic!("{f}"),
    }
}

/// Explores every workload with `config`, on `threads` threads. Each
/// thread takes the next workload not yet taken, so that none is left
/// working alone at the end when its fixed share would have cost more
/// (workloads differ in size). What is checked does not depend on which
/// thread checks it.
fn campaign(config: Config, threads: usize) -> (Stats, Vec<Failure>) {
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let list = workloads::all();
    let total = Mutex::new(Stats::default());
    let failures = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (ex, list, total, failures, next) = (&ex, &list, &total, &failures, &next);
            s.spawn(move || {
                let mut mine = Stats::default();
                while let Some(w) = list.get(next.fetch_add(1, Ordering::Relaxed)) {
                    match ex.explore(w) {
                        Ok(st) => mine.add(&st),
                        Err(f) => failures.lock().unwrap().push(f),
                    }
                }
                total.lock().unwrap().add(&mine);
            });
        }
    });
    (total.into_inner().unwrap(), failures.into_inner().unwrap())
}

#[test]
fn every_crash_state_recovers_to_a_state_the_model_allows() {
    if let Some(spec) = env("DUALFS_CRASH_REPLAY") {
        replay(&spec);
        return;
    }
    let threads = env("DUALFS_CRASH_THREADS").and_then(|s| s.parse().ok()).unwrap_or(2);
    let rounds: u64 = env("DUALFS_CRASH_LONG").and_then(|s| s.parse().ok()).unwrap_or(0);
    let started = Instant::now();
    let mut all = Stats::default();
    let mut failures = Vec::new();
    let seed = env("DUALFS_CRASH_SEED").map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex seed"));
    let base = Config { seed: seed.unwrap_or(Config::default().seed), ..Config::default() };
    if rounds == 0 {
        let (s, f) = campaign(base, threads);
        all.add(&s);
        failures.extend(f);
    } else {
        for r in 0..rounds {
            let base = base.clone();
            let config = Config {
                seed: base.seed.wrapping_add(r + 1).wrapping_mul(0x9E37_79B9),
                states_per_workload: base.states_per_workload * 10,
                second_crash_every: 2,
                ..base
            };
            let (s, f) = campaign(config, threads);
            all.add(&s);
            failures.extend(f);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "crash explorer: {} workloads, {} events, {} states drawn, {} distinct states checked ({} torn, {} rolled \
         forward, {} replayed fsync records, {} fell back to the older checkpoint), {} second-crash states, in \
         {secs:.1} s",
        all.workloads,
        all.events,
        all.states_drawn,
        all.states_checked,
        all.torn,
        all.rolled_forward,
        all.replayed,
        all.fell_back,
        all.second_crash_states
    );
    for f in failures.iter().take(env("DUALFS_CRASH_SHOW").and_then(|s| s.parse().ok()).unwrap_or(10)) {
        println!("FAILED: {f}\n");
    }
    assert!(failures.is_empty(), "{} workload(s) failed; the first: {}", failures.len(), failures[0]);
    if rounds == 0 {
        assert!(all.workloads >= 1000, "only {} workloads", all.workloads);
        assert!(all.states_checked >= 100_000, "only {} crash states", all.states_checked);
        assert!(all.replayed >= 1_000, "only {} crash states replayed fsync records", all.replayed);
    }
}

/// A fresh volume on memory devices, shaped as the explorer's
/// (`Config::default()`), on the explorer's fixed clock.
fn explorer_volume() -> dualfs_engine::Volume {
    use std::sync::Arc;

    use dualfs_engine::Volume;
    use dualfs_engine::device::MemoryDevice;
    use dualfs_engine::volume::MkfsOptions;
    use dualfs_sim::workload::fixed_clock;

    let c = Config::default();
    let meta = Arc::new(MemoryDevice::new(c.meta_blocks));
    let data = Arc::new(MemoryDevice::new(c.data_blocks));
    let mkfs = MkfsOptions { segment_blocks: c.segment_blocks, group_blocks: c.group_blocks, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &mkfs).unwrap();
    Volume::open_with_clock(meta, data, c.mount, fixed_clock()).unwrap()
}

/// The cleaning workload is only a test of cleaning if its clean steps
/// move live data and free segments on the explorer's volume.
#[test]
fn the_cleaning_workload_moves_live_data() {
    use dualfs_sim::model::Model;
    use dualfs_sim::workload::Runner;

    let vol = explorer_volume();
    let mut r = Runner::new(&vol, Model::default(), None, 0);
    let steps = workloads::setup().into_iter().chain(workloads::cleaning().steps);
    for (i, s) in steps.enumerate() {
        r.run(i + 1, &s).unwrap();
    }
    let moved = r.cleaned.cleaner.nodes_moved + r.cleaned.cleaner.inodes_moved;
    assert!(moved >= 40, "the clean steps moved only {moved} objects: {:?}", r.cleaned);
    assert!(r.cleaned.cleaner.segments_freed >= 2, "{:?}", r.cleaned);
}

/// The checkpoint workload is only a test of checkpoints that leave
/// delayed tails if the log's own checkpoint comes at one of its ticks
/// (by volume, not by a sync) and leaves the growing file's tail waiting.
#[test]
fn the_checkpoint_workload_checkpoints_with_a_tail_waiting() {
    use dualfs_sim::model::Model;
    use dualfs_sim::workload::{Runner, Step};

    let vol = explorer_volume();
    let stat = |name: &str| vol.stats().into_iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| v);
    let mut r = Runner::new(&vol, Model::default(), None, 0);
    let w = workloads::patterns().into_iter().find(|w| w.name == "pattern/checkpoint-keeps-tails").unwrap();
    let setup = workloads::setup();
    for (i, s) in setup.iter().enumerate() {
        r.run(i + 1, s).unwrap();
    }
    let mut with_tail = 0;
    for (i, s) in w.steps.iter().enumerate() {
        let before = stat("checkpoints_written");
        r.run(setup.len() + i + 1, s).unwrap();
        if *s == Step::Tick && stat("checkpoints_written") > before && stat("dirty_data_bytes") > 0 {
            with_tail += 1;
        }
    }
    assert!(with_tail >= 1, "no tick checkpointed with a tail waiting");
    assert_eq!(stat("data_blocks_by_room"), 0, "a checkpoint for room wrote young tails");
}

/// The outgrown-inline workloads are only tests of I16's inline records if
/// their periodic commits leave every appended byte waiting: no data block
/// written before the sync, none for the outgrown files' first blocks.
#[test]
fn the_outgrown_inline_workloads_write_no_data_before_the_sync() {
    use dualfs_sim::model::Model;
    use dualfs_sim::workload::{Runner, Step};

    for name in ["pattern/inline-outgrown", "pattern/inline-outgrown-overwritten"] {
        let vol = explorer_volume();
        let stat = |name: &str| vol.stats().into_iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| v);
        let mut r = Runner::new(&vol, Model::default(), None, 0);
        let w = workloads::patterns().into_iter().find(|w| w.name == name).unwrap();
        let setup = workloads::setup();
        for (i, s) in setup.iter().enumerate() {
            r.run(i + 1, s).unwrap();
        }
        let written = stat("data_blocks_written");
        let mut ticks = 0;
        for (i, s) in w.steps.iter().enumerate() {
            if *s == Step::Sync {
                break;
            }
            r.run(setup.len() + i + 1, s).unwrap();
            if *s == Step::Tick {
                ticks += 1;
                assert!(stat("commits") > 0 && stat("dirty_data_bytes") > 0, "{name}: tick {ticks} left nothing");
            }
        }
        assert_eq!(ticks, 2, "{name}");
        assert_eq!(stat("data_blocks_written"), written, "{name}: a periodic commit wrote data");
        assert_eq!(stat("data_blocks_outgrown_inline"), 0, "{name}");
    }
}

/// `order=strict`: a crash shows a prefix of every operation, data
/// included. The oracle allows no file cut short, no byte of a later step
/// where an earlier one is expected, and takes every fsync for a promise
/// of all steps before it. The named patterns run in that mode.
/// (`DUALFS_CRASH_STRICT=1` replays a failure of this test.)
#[test]
fn in_strict_order_a_crash_shows_a_prefix_of_every_operation() {
    if env("DUALFS_CRASH_REPLAY").is_some() {
        return;
    }
    let config = Config { mount: strict_mount(), ..Config::default() };
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    for w in workloads::patterns() {
        if let Err(f) = ex.explore(&w) {
            panic!("{f}\n  (with DUALFS_CRASH_STRICT=1)");
        }
    }
}

fn strict_mount() -> dualfs_engine::volume::MountOptions {
    dualfs_engine::volume::MountOptions { order: dualfs_engine::volume::Order::Strict, ..Config::default().mount }
}

/// With `data_expire=0` every commit carries every written byte, and the
/// oracle allows no file cut short. The named patterns (ticks between
/// writes among them) keep that mode honest.
#[test]
fn without_delayed_tails_no_file_is_cut_short() {
    if env("DUALFS_CRASH_REPLAY").is_some() {
        return;
    }
    let mut config = Config::default();
    config.mount.data_expire = std::time::Duration::ZERO;
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    for w in workloads::patterns() {
        if let Err(f) = ex.explore(&w) {
            panic!("{f}");
        }
    }
}

/// The snapshot workloads on their own (they are in the campaign above
/// too): every crash state, cut inside a create or a delete or anywhere
/// else, shows each snapshot whole and as it was made, or not at all.
#[test]
fn crashes_around_snapshots_keep_them_whole() {
    let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
    for w in workloads::snapshots() {
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// Inode flags (docs/TESTING.md): every crash state keeps each sync file's
/// writes that returned and each dirsync directory's changes of names
/// with what came before them, and shows the flags of a state the
/// history allows.
#[test]
fn crashes_around_inode_flags_keep_sync_writes() {
    let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
    for w in workloads::inode_flags() {
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// Discard with `-o discard` and trims (docs/TESTING.md): discarded blocks
/// read as zeros or garbage in every later crash state, and each sampled
/// state recovers from either checkpoint alone, so that nothing a file, a
/// snapshot, an fsync record or the older checkpoint needs was discarded.
#[test]
fn crashes_around_discards_lose_nothing() {
    let ex = Explorer::new(Config::discard(), &workloads::setup()).expect("base image");
    for w in workloads::discards() {
        let run = ex.record(&w).unwrap_or_else(|e| panic!("{}: {e}", w.name));
        let discards = run.recording.events.iter().filter(|e| matches!(e, dualfs_sim::record::Event::Discard { .. }));
        let (data, meta) = discards.fold((0, 0), |(d, m), e| match e {
            dualfs_sim::record::Event::Discard { dev: dualfs_sim::record::Dev::Data, .. } => (d + 1, m),
            _ => (d, m + 1),
        });
        assert!(data > 0, "{}: no data block discarded", w.name);
        if w.name == "discard/segments" {
            assert!(meta > 0, "{}: no log segment discarded", w.name);
        }
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// The clone workloads on their own (they are in the campaign above too):
/// every crash state, cut inside a switch of the live tree or anywhere
/// else, shows one tree live under its own name and every kept tree whole.
#[test]
fn crashes_around_clones_keep_every_tree_whole() {
    let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
    for w in workloads::clones() {
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// Trees served beside each other on their own (in the campaign above
/// too): every crash state, with fsyncs in two trees and a file held open
/// in a tree left, shows the entered tree live with what it promised and
/// every other tree whole.
#[test]
fn crashes_around_trees_beside_each_other_keep_every_tree_whole() {
    let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
    for w in workloads::trees_beside() {
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// Two trees taking many turns on a log of 16 segments: the log runs
/// short, and each tree is left compact, its blocks moved out of segments
/// the other's record pins. Every crash state, inside the moves and the
/// switches, shows every tree whole.
#[test]
fn crashes_while_trees_taking_turns_are_left_compact_keep_every_tree_whole() {
    let config = Config { meta_blocks: 17 * 128, ..Config::default() };
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let w = workloads::trees_turns(60);
    let run = ex.record(&w).expect("the workload runs");
    assert!(run.cleaner.nodes_moved + run.cleaner.inodes_moved > 0, "the log never ran short: {:?}", run.cleaner);
    match ex.explore(&w) {
        Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
        Err(f) => panic!("{f}"),
    }
}

/// The range workloads on their own (they are in the campaign above
/// too): every crash state shows each collapse and insert whole or not at
/// all, and the snapshot as it was made.
#[test]
fn crashes_around_collapse_and_insert_show_them_whole() {
    let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
    for w in workloads::ranges() {
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 50, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// The whiteout renames on their own (in the campaign above too): every
/// crash state shows each rename with its whiteout, or neither.
#[test]
fn crashes_around_whiteout_renames_show_them_whole() {
    let ex = Explorer::new(Config::default(), &workloads::setup()).expect("base image");
    for w in workloads::whiteouts() {
        match ex.explore(&w) {
            Ok(s) => assert!(s.states_checked >= 20, "{}: only {} states", w.name, s.states_checked),
            Err(f) => panic!("{f}"),
        }
    }
}

/// A volume with more inodes than the threshold leaves its inode map on
/// disk at every recovery: roll-forward reads the blocks it replays into,
/// the oracle's reads read the rest on demand, and orphans wait on the
/// list for the load (`pattern/many-inodes`; the other workloads' volumes
/// hold one block of map, which is always read). Replay a failure with
/// `DUALFS_CRASH_REPLAY=seed:pattern/many-inodes:state
/// DUALFS_LAZY_INODE_MAP_MIN_BLOCKS=2`.
/// The same with the inode map kept to two blocks (a tiny cache limit):
/// clean blocks are given back between operations, while commits,
/// checkpoints, recovery and the oracle's reads run, and read again on
/// demand (`pattern/many-inodes-bounded`). Replay a failure with
/// `DUALFS_CRASH_REPLAY=seed:pattern/many-inodes-bounded:state
/// DUALFS_LAZY_INODE_MAP_MIN_BLOCKS=2 DUALFS_INODE_MAP_BYTES=8192`.
#[test]
fn crashes_with_the_inode_map_given_back() {
    if env("DUALFS_CRASH_REPLAY").is_some() {
        return;
    }
    let mut config = Config::default();
    config.mount.lazy_inode_map_min_blocks = 2;
    config.mount.inode_map_bytes = Some(2 * 4096);
    // Few inodes cached: their blocks are kept past the budget.
    config.mount.cache_budget = 32;
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let stats = ex.explore(&workloads::many_inodes_bounded()).unwrap_or_else(|f| panic!("{f}"));
    assert!(stats.states_checked > 40 && stats.rolled_forward > 10, "too few states: {stats:?}");
}

/// The group table and bitmap held to nothing: every turn of the
/// background writer gives back every clean block (`pattern/bitmap-bounded`).
#[test]
fn crashes_with_the_data_space_given_back() {
    if env("DUALFS_CRASH_REPLAY").is_some() {
        return;
    }
    let mut config = Config::default();
    config.mount.data_space_bytes = Some(0);
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let stats = ex.explore(&workloads::bitmap_bounded()).unwrap_or_else(|f| panic!("{f}"));
    assert!(stats.states_checked > 40 && stats.rolled_forward > 10, "too few states: {stats:?}");
}

#[test]
fn crashes_with_the_inode_map_left_on_disk() {
    if env("DUALFS_CRASH_REPLAY").is_some() {
        return;
    }
    let mut config = Config::default();
    config.mount.lazy_inode_map_min_blocks = 2;
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let stats = ex.explore(&workloads::many_inodes()).unwrap_or_else(|f| panic!("{f}"));
    assert!(stats.states_checked > 40 && stats.rolled_forward > 10, "too few states: {stats:?}");
}

/// A sparse IFile over a data device of 64 groups and a log of 300
/// segments (two blocks of segment usage): the group table and the bitmap
/// are read a group at a time by roll-forward and the allocator, their
/// blocks never written stay so, and every recovery walks the
/// checkpoint's own partial segments for their IFile blocks. Replay with
/// `DUALFS_CRASH_REPLAY=seed:workload:state DUALFS_CRASH_MANY_GROUPS=1`.
#[test]
fn crashes_on_a_sparse_ifile_of_many_groups() {
    let replaying = env("DUALFS_CRASH_REPLAY");
    if replaying.is_some() && env("DUALFS_CRASH_MANY_GROUPS").is_none() {
        return;
    }
    let config = Config { data_blocks: 64 * 1024, group_blocks: 1024, meta_blocks: 301 * 128, ..Config::default() };
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    if let Some(spec) = replaying {
        let (name, state) = spec.split_once(':').and_then(|(_, r)| r.rsplit_once(':')).expect("seed:workload:state");
        let w = if name == "pattern/every-structure" {
            workloads::every_structure(name, 24, 6)
        } else {
            workloads::by_name(name).expect("a workload")
        };
        println!("{}", ex.replay(&w, state.parse().ok()).map_or_else(|f| f.to_string(), |s| format!("passes {s:?}")));
        return;
    }
    let mut checked = 0;
    for w in [workloads::every_structure("pattern/every-structure", 24, 6), workloads::log_wrap(160, true)] {
        let stats = ex.explore(&w).unwrap_or_else(|f| panic!("{f}"));
        checked += stats.states_checked;
    }
    assert!(checked > 40, "too few states: {checked}");
}

/// A mirrored meta-data device (docs/TESTING.md): the two copies recorded
/// apart, each keeping its own subset of what was in flight. Every crash
/// state mounts from both copies, from each alone (the other lost), and
/// from both failing reads of different blocks, with every acknowledged
/// write; a copy lost while the other took new work comes back refused.
/// A few workloads by default; every named pattern with `DUALFS_LONG=1`.
#[test]
fn crashes_on_a_mirrored_meta_data_device_lose_nothing_from_either_copy() {
    if env("DUALFS_CRASH_REPLAY").is_some() {
        return;
    }
    let long = env("DUALFS_LONG").is_some_and(|v| v != "0");
    let started = Instant::now();
    let states_per_workload = if long { 60 } else { 5 };
    let config = Config { states_per_workload, ..Config::mirrored() };
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let mut all = Stats::default();
    for w in workloads::mirrors(long) {
        let run = ex.record(&w).unwrap_or_else(|e| panic!("{}: {e}", w.name));
        let copies =
            |dev| run.recording.events.iter().filter(|e| matches!(e, Event::Write { dev: d, .. } if *d == dev)).count();
        assert!(
            copies(Dev::Mirror) > 0 && copies(Dev::Mirror) == copies(Dev::Meta),
            "{}: {} writes on copy 1, {} on copy 2",
            w.name,
            copies(Dev::Meta),
            copies(Dev::Mirror)
        );
        // The copies' writes go out on two threads: the recording must
        // not depend on which came first, or no replay string would hold.
        let again = ex.record(&w).unwrap_or_else(|e| panic!("{}: {e}", w.name));
        assert!(
            show_events(&run.recording.events) == show_events(&again.recording.events),
            "{}: two recordings differ",
            w.name
        );
        match ex.explore(&w) {
            Ok(s) => {
                assert!(s.states_checked >= 20, "{}: only {} states", w.name, s.states_checked);
                all.add(&s);
            }
            Err(f) => panic!("{f}"),
        }
    }
    println!(
        "mirrored: {} workloads, {} events, {} distinct states checked ({} torn, {} rolled forward, {} mounted with \
         a read error on each copy), {} second-crash states, in {:.1} s",
        all.workloads,
        all.events,
        all.states_checked,
        all.torn,
        all.rolled_forward,
        all.both_copies_failed,
        all.second_crash_states,
        started.elapsed().as_secs_f64()
    );
    // Errors on both copies are only tested where a mount reads both blocks.
    assert!(all.both_copies_failed >= 10, "only {} states met a read error on each copy", all.both_copies_failed);
}
