//! `dualfs fsck`: the engine's independent walk of the whole volume.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use dualfs_engine::check::{CheckReport, check};
use serde_json::json;

use crate::args::FsckArgs;
use crate::devices::{Access, open_pair};
use crate::helper::split_source;
use crate::mount::Exit;
use crate::progress::{Activity, Meter};

/// fsck(8) exit status: problems were found and left as they are.
const EXIT_UNCORRECTED: i32 = 4;
/// fsck(8) exit status: the check could not be done.
const EXIT_OPERATIONAL: i32 = 8;

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
        "checkpoint {}, roll-forward of {} partial segments (log end: {end})",
        r.open.checkpoint, r.open.recovery.partial_segments
    );
    println!(
        "{} inodes: {} files ({} inline), {} directories, {} symlinks, {} special; {} entries, {} nodes, {} data blocks, {} orphans",
        s.inodes,
        s.files,
        s.inline_files,
        s.directories,
        s.symlinks,
        s.special,
        s.entries,
        s.nodes,
        s.data_blocks,
        s.orphans
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
        println!("{} problems found; nothing was changed", r.problems.len());
    }
}

/// Runs `dualfs fsck`.
///
/// # Errors
/// `Exit(4)` when problems were found, `Exit(8)` when the volume could not
/// be checked (after saying why).
pub fn run(args: &FsckArgs) -> Result<()> {
    let (meta, data): (PathBuf, PathBuf) = match &args.data {
        Some(d) => (args.meta.clone(), d.clone()),
        None => split_source(&args.meta.to_string_lossy(), None)?,
    };
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
