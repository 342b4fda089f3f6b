//! `dualfs fsck`: the engine's independent walk of the whole volume.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use dualfs_engine::check::{CheckReport, check};
use serde_json::json;

use crate::args::FsckArgs;
use crate::devices::{Access, open_pair};
use crate::mount::Exit;
use crate::progress::{Activity, Meter};
use crate::words::count;
use nix::sys::signal::{SigSet, Signal};

/// fsck(8) exit status: problems were found and left as they are.
const EXIT_UNCORRECTED: i32 = 4;
/// fsck(8) exit status: the check could not be done.
const EXIT_OPERATIONAL: i32 = 8;
/// fsck(8) exit status: a usage error (bad or missing arguments).
pub const EXIT_USAGE: u8 = 16;
/// fsck(8) exit status: the check was interrupted (SIGINT, SIGTERM).
const EXIT_CANCELED: i32 = 32;

fn report_json(r: &CheckReport) -> serde_json::Value {
    let s = &r.stats;
    json!({
        "clean": r.is_clean(),
        "problems": r.problems.iter().map(|p| json!({
            "invariant": p.invariant.map(|i| i.id()),
            "structure": p.structure,
            "ino": p.ino.map(|i| i.0),
            "block": p.block,
            "message": p.message,
        })).collect::<Vec<_>>(),
        "stats": {
            "inodes": s.inodes, "directories": s.directories, "files": s.files,
            "inline_files": s.inline_files, "symlinks": s.symlinks, "special": s.special,
            "entries": s.entries, "nodes": s.nodes, "data_blocks": s.data_blocks, "orphans": s.orphans,
        },
        "checkpoint": r.open.checkpoint,
        "roll_forward_partial_segments": r.open.recovery.partial_segments,
        "fsync_records_pending": r.open.recovery.fsync_pending,
        "log_end": crate::inspect::log_end_json(&r.open.recovery.end),
        "damage": r.open.damage,
        "loss": r.open.loss.as_ref().map(|l| json!({
            "first_seq": l.first.0,
            "acknowledged_through": l.acknowledged_through.0,
            "partial_segments_beyond": l.beyond.as_ref().map(|b| b.partial_segments),
            "groups_beyond": l.beyond.as_ref().map(|b| b.groups),
            "last_seq_beyond": l.beyond.as_ref().map(|b| b.last.0),
        })),
    })
}

fn print_text(r: &CheckReport) {
    let s = &r.stats;
    let end = &r.open.recovery.end;
    println!(
        "checkpoint {}, roll-forward of {} (log end: {end})",
        r.open.checkpoint,
        count(r.open.recovery.partial_segments, "partial segment")
    );
    if r.open.recovery.fsync_pending > 0 {
        // What is checked is the state before them; mount replays them.
        println!(
            "{} after the last commit group, replayed at the next mount",
            count(r.open.recovery.fsync_pending, "fsync record")
        );
    }
    println!(
        "{}: {} ({} inline), {}, {}, {} special; {}, {}, {}, {}",
        count(s.inodes, "inode"),
        count(s.files, "file"),
        s.inline_files,
        count(s.directories, "directory"),
        count(s.symlinks, "symlink"),
        s.special,
        count(s.entries, "entry"),
        count(s.nodes, "node"),
        count(s.data_blocks, "data block"),
        count(s.orphans, "orphan")
    );
    if let Some(b) = r.open.recovery.beyond.as_ref().filter(|_| r.open.loss.is_none()) {
        println!("past the end of the log: {b}");
    }
    for p in &r.problems {
        println!("PROBLEM: {p}");
    }
    if r.is_clean() {
        println!("the volume is consistent");
    } else {
        println!("{} found; nothing was changed", count(r.problems.len() as u64, "problem"));
    }
}

/// An interrupted check ends at once with fsck(8)'s status 32: it has
/// written nothing, so there is nothing to finish first.
fn exit_on_interrupt() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if set.thread_block().is_err() {
        return;
    }
    let spawned = std::thread::Builder::new().name("dualfs-fsck-signals".into()).spawn(move || {
        if let Ok(sig) = set.wait() {
            eprintln!("dualfs: {sig}: check interrupted");
            std::process::exit(EXIT_CANCELED);
        }
    });
    if spawned.is_err() {
        // Without the thread, the signals must kill as they would have.
        let _ = set.thread_unblock();
    }
}

/// Runs `dualfs fsck`.
///
/// # Errors
/// `Exit(4)` when problems were found, `Exit(8)` when the volume could not
/// be checked (after saying why).
pub fn run(args: &FsckArgs) -> Result<()> {
    let (meta, data): (PathBuf, PathBuf) = match crate::devices::named(&args.meta, args.data.as_deref()) {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("dualfs: {e:#}\nUsage: dualfs fsck META DATA (or META#DATA, UUID=…, LABEL=…)");
            return Err(Exit(i32::from(EXIT_USAGE)).into());
        }
    };
    exit_on_interrupt();
    let meter = Meter::default();
    let checked = open_pair(&meta, &data, Access::ExclusiveReadOnly).and_then(|(m, d)| {
        let _activity = Activity::start(format!("checking {}", meta.display()), meter.read.clone(), "read");
        check(meter.wrap(m), meter.wrap(d))
            .map_err(|e| anyhow!("cannot check {} and {}: {e}", meta.display(), data.display()))
    });
    let report = match checked {
        Ok(r) => r,
        Err(e) => {
            eprintln!("dualfs: {e:#}");
            return Err(Exit(EXIT_OPERATIONAL).into());
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report_json(&report))?);
    } else {
        print_text(&report);
    }
    if report.is_clean() { Ok(()) } else { Err(Exit(EXIT_UNCORRECTED).into()) }
}
