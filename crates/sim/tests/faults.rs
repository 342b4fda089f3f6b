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

/// The workloads tried, in order, until one fails.
fn candidates(fault: Fault) -> Vec<dualfs_sim::workload::Workload> {
    let mut list = Vec::new();
    if fault == Fault::SegmentReuse {
        // Only a log that wraps around onto its own roll-forward range shows it.
        list.push(workloads::log_wrap(700, false));
    }
    list.extend(workloads::patterns());
    list.extend(workloads::ace().into_iter().step_by(7));
    list
}

/// The fault switch is process-wide: the two tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_explorer_catches_every_broken_ordering_rule() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut missed = Vec::new();
    for fault in Fault::ALL {
        let started = Instant::now();
        faults::set(&[fault]);
        // A small log (16 segments), so that a few hundred commits wrap it.
        let config = Config { meta_blocks: 17 * 128, ..Config::default() };
        let ex = Explorer::new(config, &workloads::setup()).expect("base image");
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
                "{fault:?}: caught after {tried} workload(s) in {:.1} s:\n  {f}\n",
                started.elapsed().as_secs_f64()
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
    let config = Config { meta_blocks: 17 * 128, ..Config::default() };
    let ex = Explorer::new(config, &workloads::setup()).expect("base image");
    let mut list = candidates(Fault::SegmentReuse);
    list.truncate(60);
    for w in list {
        if let Err(f) = ex.explore(&w) {
            panic!("with no fault: {f}");
        }
    }
}
