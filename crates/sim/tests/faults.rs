//! The explorer must be able to fail: with each ordering rule of DESIGN.md
//! broken on purpose (the engine's `fault-injection` hooks), it must find a
//! crash state whose recovery breaks an oracle.
//!
//! The fault switch is process-wide, so the tests of this file take turns.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use dualfs_engine::faults::{self, Fault};
use dualfs_sim::explorer::{Config, Explorer};
use dualfs_sim::workloads;

/// A small log (16 segments), so that a few hundred commits wrap it.
fn config() -> Config {
    Config { meta_blocks: 17 * 128, verbose: std::env::var("DUALFS_CRASH_VERBOSE").is_ok(), ..Config::default() }
}

/// The configuration a fault is looked for with: the rules of
/// `order=strict` are broken on a volume mounted so.
fn config_for(fault: Fault) -> Config {
    let mut c = config();
    // Overwrites go to new blocks there: more data is made reachable by the
    // commit that folds fsync records, where a missing flush shows.
    if matches!(fault, Fault::StrictFsyncUntangled | Fault::StrictInPlace | Fault::HomeWriteUnflushed) {
        c.mount.order = dualfs_engine::volume::Order::Strict;
    }
    // A map of six blocks kept to two, few inodes cached.
    if fault == Fault::EvictDirtyMapBlocks {
        c.mount.lazy_inode_map_min_blocks = 2;
        c.mount.inode_map_bytes = Some(2 * 4096);
        c.mount.cache_budget = 32;
    }
    // The group table and bitmap held to nothing.
    if fault == Fault::EvictDirtyBitmapBlocks {
        c.mount.data_space_bytes = Some(0);
    }
    // Continuous discard, and the older checkpoint recovered too.
    if matches!(
        fault,
        Fault::DiscardBeforeDurable | Fault::DiscardHeld | Fault::DiscardSegmentEarly | Fault::DiscardDeletedEarly
    ) {
        let d = Config::discard();
        c.mount.discard = true;
        c.older_checkpoint = d.older_checkpoint;
        c.meta_blocks = d.meta_blocks;
    }
    // The deleted snapshot's blocks are discarded a checkpoint early: only
    // the few states before the next one, recovered from the older slot,
    // show it, so every state is.
    if fault == Fault::DiscardDeletedEarly {
        c.second_crash_every = 1;
    }
    // Room to grow into, for the resize workloads.
    if matches!(fault, Fault::ResizeWithoutGeometry | Fault::ShrinkBeforeEmpty | Fault::ShrinkDataBeforeEmpty) {
        c.spare_meta_blocks = 8 * 128;
        c.spare_data_blocks = 8192;
    }
    c
}

/// The workloads tried, in order, until one fails.
fn candidates(fault: Fault) -> Vec<dualfs_sim::workload::Workload> {
    let mut list = Vec::new();
    if matches!(fault, Fault::ResizeWithoutGeometry | Fault::ShrinkBeforeEmpty | Fault::ShrinkDataBeforeEmpty) {
        let c = config_for(fault);
        return workloads::resizes(c.meta_blocks, c.data_blocks, c.spare_meta_blocks, c.spare_data_blocks);
    }
    if fault == Fault::DiscardDeletedEarly {
        // Only a snapshot deleted on a volume that discards shows it.
        return workloads::discards().into_iter().filter(|w| w.name == "discard/snapshot-delete").collect();
    }
    if matches!(fault, Fault::DiscardBeforeDurable | Fault::DiscardHeld | Fault::DiscardSegmentEarly) {
        // Only a volume that discards shows them.
        return workloads::discards();
    }
    if fault == Fault::UncountedCheckpointBlocks {
        // Only a log that wraps onto segments holding IFile blocks shows it.
        list.push(workloads::log_wrap(1400, false));
    }
    if fault == Fault::SegmentReuse {
        // Only a log that wraps around onto its own roll-forward range shows it.
        list.push(workloads::log_wrap(1400, false));
    }
    if fault == Fault::SnapshotInPlace {
        // Only a snapshot's blocks overwritten after it was made show it.
        list.extend(workloads::snapshots());
    }
    if fault == Fault::CollapseSizeLater {
        // Only a collapse shows it.
        list.extend(workloads::ranges());
    }
    if fault == Fault::WhiteoutApart {
        // Only a rename with RENAME_WHITEOUT shows it.
        list.extend(workloads::whiteouts());
    }
    if fault == Fault::EvictDirtyMapBlocks {
        list.push(workloads::many_inodes_bounded());
    }
    if fault == Fault::EvictDirtyBitmapBlocks {
        // Only a bounded data space gives blocks back.
        return vec![workloads::bitmap_bounded()];
    }
    if fault == Fault::SyncFlagIgnored {
        // Only a write to a sync file shows it.
        list.extend(workloads::inode_flags());
    }
    if fault == Fault::QuotaChownKeepsUsage {
        // Only a volume keeping quotas shows it.
        return workloads::quotas();
    }
    if fault == Fault::SwitchListLater {
        // Only a switch of the live tree shows it.
        list.extend(workloads::clones());
    }
    if fault == Fault::HeldCountStale {
        // Only a snapshot whose kept blocks the live tree lets go shows it.
        return vec![workloads::snapshot_held_count()];
    }
    if fault == Fault::EnterWithoutSwitch {
        // Only a tree entered beside the live one shows it.
        list.extend(workloads::trees_beside());
    }
    // The pattern where each of these was found first leads, so that the
    // hunt is seconds, not a minute; the rest follow, should it no longer be.
    let first = match fault {
        Fault::RoomTailUncapped => Some("pattern/checkpoint-keeps-tails"),
        Fault::FsyncOmitsParent => Some("pattern/deep-tree"),
        Fault::TmpfileNotOrphan => Some("pattern/tmpfile-dropped"),
        Fault::ImmediateReuse | Fault::NoReplaceHold => Some("pattern/replace-by-truncation"),
        Fault::RenameBeforeData => Some("pattern/replace-by-rename"),
        Fault::RemountWithoutCommit => Some("pattern/remount"),
        Fault::HomeWriteUnflushed => Some("pattern/flags-set-clear"),
        _ => None,
    };
    list.extend(first.and_then(workloads::by_name));
    list.extend(workloads::patterns());
    list.extend(workloads::ace().into_iter().step_by(7));
    let mut seen = std::collections::HashSet::new();
    list.retain(|w| seen.insert(w.name.clone()));
    list
}

/// The fault switch is process-wide: the two tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_explorer_catches_every_broken_ordering_rule() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut missed = Vec::new();
    // DUALFS_FAULTS_ONLY=SegmentReuse (say) runs one fault only.
    let only = std::env::var("DUALFS_FAULTS_ONLY").ok().filter(|s| !s.is_empty());
    for fault in Fault::ALL {
        if only.as_ref().is_some_and(|o| *o != format!("{fault:?}")) {
            continue;
        }
        // Receive is not an operation of the model: its own crash test
        // (tests/receive_crash.rs) breaks this rule and catches it.
        if fault == Fault::ReceiveWithoutMark {
            continue;
        }
        // Nor is a reader between a checkpoint's seal and its write (no
        // crash needed): tests/checkpoint_window.rs.
        if fault == Fault::EvictBeforeCheckpointWritten {
            continue;
        }
        // Nor is a migration (three devices): tests/migrate_crash.rs.
        if matches!(fault, Fault::MigrateCopyUnsynced | Fault::MigrateCopyOverWrites) {
            continue;
        }
        // Nor is a damaged block (tests/damage.rs breaks the twins) or a
        // second meta-data copy (tests/mirror.rs, tests/mirror_resync.rs).
        if matches!(
            fault,
            Fault::NoTwins | Fault::MirrorAckBeforeSecond | Fault::MirrorTrustStale | Fault::MirrorSyncBeforeCopy
        ) {
            continue;
        }
        let started = Instant::now();
        faults::set(&[fault]);
        let ex = Explorer::new(config_for(fault), &workloads::setup()).expect("base image");
        if let Some(spec) = std::env::var("DUALFS_CRASH_REPLAY").ok().filter(|s| !s.is_empty()) {
            let (name, state) =
                spec.split_once(':').and_then(|(_, r)| r.rsplit_once(':')).expect("seed:workload:state");
            let w = candidates(fault).into_iter().find(|w| w.name == name).expect("a workload of this test");
            let r = ex.replay(&w, state.parse().ok());
            faults::set(&[]);
            println!("{fault:?}, replay of {spec}: {}", r.map_or_else(|f| f.to_string(), |s| format!("passes {s:?}")));
            return;
        }
        let mut caught = None;
        let mut tried = 0;
        for w in candidates(fault) {
            tried += 1;
            if let Err(f) = ex.explore(&w) {
                caught = Some(f);
                break;
            }
        }
        faults::set(&[]);
        match caught {
            Some(f) => println!(
                "{fault:?}: caught after {tried} workload(s) in {:.1} s:\n  {}\n  replay with \
                 DUALFS_FAULTS_ONLY={fault:?} DUALFS_CRASH_REPLAY={} (this test)\n",
                started.elapsed().as_secs_f64(),
                f.message,
                f.replay
            ),
            None => {
                println!("{fault:?}: NOT caught by {tried} workloads");
                missed.push(fault);
            }
        }
    }
    assert!(missed.is_empty(), "the explorer missed {missed:?}");
}

/// The control: with every rule kept, the workloads and the small log the
/// faults test uses pass, so each failure above is the broken rule's doing.
#[test]
fn with_no_rule_broken_the_same_workloads_pass() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    faults::set(&[]);
    let ex = Explorer::new(config(), &workloads::setup()).expect("base image");
    let mut list = candidates(Fault::SegmentReuse);
    list.truncate(60);
    // Two threads, as the crash test runs: the workloads are independent.
    let failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..2 {
            let (ex, list, failed) = (&ex, &list, &failed);
            s.spawn(move || {
                for w in list.iter().skip(t).step_by(2) {
                    if let Err(f) = ex.explore(w) {
                        failed.lock().unwrap().push(f.to_string());
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(failed.is_empty(), "with no fault: {}", failed.join("\n"));
}
