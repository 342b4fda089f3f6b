//! `dualfs fsck`: the engine's independent walk of the whole volume, and
//! its repair (`-p`, `-y`, `--repair`).

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, anyhow};
use dualfs_engine::Volume;
use dualfs_engine::check::{CheckReport, check};
use dualfs_engine::device::BlockDevice;
use dualfs_engine::error::DeviceRole;
use dualfs_engine::repair::{Prepared, Severity, prepare};
use serde_json::json;

use crate::args::FsckArgs;
use crate::devices::{Access, open_pair};
use crate::exit::Exit;
use crate::progress::{Activity, Meter};
use crate::words::count;
use nix::sys::signal::{SigSet, Signal};

/// fsck(8) exit status: problems were found and repaired.
const EXIT_CORRECTED: i32 = 1;
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
        "receiving": r.receiving,
        "explained_by_receive": r.explained.iter().map(|p| json!({
            "invariant": p.invariant.map(|i| i.id()),
            "structure": p.structure,
            "ino": p.ino.map(|i| i.0),
            "message": p.message,
        })).collect::<Vec<_>>(),
        "checkpoint": r.open.checkpoint,
        "roll_forward_partial_segments": r.open.recovery.partial_segments,
        "fsync_records_pending": r.open.recovery.fsync_pending,
        "twins_taken": r.open.recovery.twins_taken,
        "log_end": crate::checkpoints::log_end_json(&r.open.recovery.end),
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
    for t in &r.open.recovery.twins_taken {
        // A torn original (a crash) or a damaged one: the twin holds it all.
        println!("note: {t}");
    }
    if let Some(b) = r.open.recovery.beyond.as_ref().filter(|_| r.open.loss.is_none()) {
        println!("past the end of the log: {b}");
    }
    for p in &r.problems {
        println!("PROBLEM: {p}");
    }
    if let Some(what) = &r.receiving {
        print_receiving(what, r.explained.len());
        for p in r.explained.iter().take(SHOWN) {
            println!("  incomplete until then: {p}");
        }
        if r.explained.len() > SHOWN {
            println!("  ... and {} more", r.explained.len() - SHOWN);
        }
    }
    if r.is_clean() && r.receiving.is_some() {
        println!("no problem found besides the receive under way");
    } else if r.is_clean() {
        println!("the volume is consistent");
    } else {
        println!(
            "{} found; nothing was changed (`dualfs fsck -p` repairs what is safe, `-y` everything)",
            count(r.problems.len() as u64, "problem")
        );
    }
}

/// Disagreements a receive under way explains, shown one per line.
const SHOWN: usize = 10;

/// A receive under way: what it is, that its tree is incomplete, how it
/// ends. Not a problem: fsck's status stays 0 for it.
fn print_receiving(what: &str, explained: usize) {
    println!(
        "a receive is under way on this volume ({what}): its tree is incomplete{}; receive the same stream again to \
         finish it, or `dualfs receive --abort` to go back to the last complete tree",
        if explained > 0 {
            format!(" ({} it explains, left as they are)", count(explained as u64, "namespace disagreement"))
        } else {
            String::new()
        }
    );
}

/// Set while a repair is written to the devices: an interruption then
/// waits for the end of the writes (a repair cut short must be run again).
static WRITING: AtomicBool = AtomicBool::new(false);
/// Set when a signal came while writing: the status is then 32.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// An interrupted check ends at once with fsck(8)'s status 32: it has
/// written nothing, so there is nothing to finish first. An interrupted
/// repair ends so too before it writes, and after its writes if they began.
fn exit_on_interrupt() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if set.thread_block().is_err() {
        return;
    }
    let spawned = std::thread::Builder::new().name("dualfs-fsck-signals".into()).spawn(move || {
        if let Ok(sig) = set.wait() {
            INTERRUPTED.store(true, Ordering::SeqCst);
            if WRITING.load(Ordering::SeqCst) {
                eprintln!("dualfs: {sig}: the repair is being written; it ends when the writes do");
                return;
            }
            eprintln!("dualfs: {sig}: check interrupted");
            std::process::exit(EXIT_CANCELED);
        }
    });
    if spawned.is_err() {
        // Without the thread, the signals must kill as they would have.
        let _ = set.thread_unblock();
    }
}

/// How the user asked fsck to repair.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Check only (`-n`, or no option).
    Check,
    /// `-p`: safe repairs only.
    Preen,
    /// `-y`: every repair.
    Yes,
    /// `--repair`: ask once.
    Ask,
}

/// Runs `dualfs fsck`.
///
/// # Errors
/// `Exit(1)` when problems were repaired, `Exit(4)` when problems were
/// found and left, `Exit(8)` when the volume could not be checked (after
/// saying why).
pub fn run(args: &FsckArgs) -> Result<()> {
    let (meta, data): (PathBuf, PathBuf) = match crate::devices::named(&args.meta, args.data.as_deref()) {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("dualfs: {e:#}\nUsage: dualfs fsck META DATA (or META#DATA, UUID=…, LABEL=…)");
            return Err(Exit(i32::from(EXIT_USAGE)).into());
        }
    };
    let mode = match (args.preen, args.yes, args.repair) {
        (true, _, _) => Mode::Preen,
        (_, true, _) => Mode::Yes,
        (_, _, true) => Mode::Ask,
        _ => Mode::Check,
    };
    exit_on_interrupt();
    if mode == Mode::Check {
        return check_only(args, &meta, &data);
    }
    if mode == Mode::Ask && !std::io::stdin().is_terminal() {
        eprintln!(
            "dualfs: --repair asks before writing and needs a terminal; -y repairs without asking, -p only what is safe"
        );
        return Err(Exit(EXIT_OPERATIONAL).into());
    }
    repair(args, &meta, &data, mode)
}

fn repair_json(p: &Prepared, written: bool) -> serde_json::Value {
    json!({
        "source": p.source,
        "receiving": p.receiving,
        "repairs": p.repairs.iter().map(|r| json!({
            "severity": r.severity.name(),
            "ino": r.ino.map(|i| i.0),
            "problem": r.problem,
            "action": r.action,
        })).collect::<Vec<_>>(),
        "written": written,
        "meta_blocks_written": if written { p.blocks_written.0 } else { 0 },
        "data_blocks_written": if written { p.blocks_written.1 } else { 0 },
        "after": p.after.as_ref().map(report_json),
    })
}

/// Works out the repair on staged devices, writes it if the mode allows,
/// and says what was done.
fn repair(args: &FsckArgs, meta: &Path, data: &Path, mode: Mode) -> Result<()> {
    let meter = Meter::default();
    let prepared = open_pair(meta, data, Access::Exclusive).and_then(|(m, d)| {
        let m = with_mirror(args, meta, m, &d, Access::Exclusive)?;
        let _activity = Activity::start(format!("checking {}", meta.display()), meter.read.clone(), "read");
        let p = prepare(meter.wrap(m.clone()), meter.wrap(d.clone()))
            .map_err(|e| anyhow!("cannot repair {} and {}: {e}", meta.display(), data.display()))?;
        Ok((p, m, d))
    });
    let (p, m, d) = match prepared {
        Ok(x) => x,
        Err(e) => {
            eprintln!("dualfs: {e:#}");
            return Err(Exit(EXIT_OPERATIONAL).into());
        }
    };
    let text = !args.json;
    if text {
        say!("{}", p.source);
        if let Some(what) = &p.receiving {
            // Its namespace is the receive's to settle: repair leaves it.
            print_receiving(what, 0);
        }
    }
    if p.is_empty() {
        if args.json {
            say!("{}", serde_json::to_string_pretty(&repair_json(&p, false))?);
        } else {
            say!("the volume is consistent");
        }
        return Ok(());
    }
    let allowed = match mode {
        Mode::Preen => p.severity() == Some(Severity::Safe),
        Mode::Yes => true,
        Mode::Ask => {
            for r in &p.repairs {
                say!("TO REPAIR ({}): {r}", r.severity.name());
            }
            ask(&format!("Write these {}? [y/N] ", count(p.repairs.len() as u64, "repair")))
        }
        Mode::Check => false,
    };
    if !allowed {
        if args.json {
            say!("{}", serde_json::to_string_pretty(&repair_json(&p, false))?);
        } else {
            if mode == Mode::Preen {
                for r in &p.repairs {
                    say!("PROBLEM ({}): {r}", r.severity.name());
                }
                say!(
                    "UNEXPECTED INCONSISTENCY: {} would change or give up what a user sees; run `dualfs fsck -y` \
                     (or --repair) by hand. Nothing was changed",
                    count(p.repairs.iter().filter(|r| r.severity > Severity::Safe).count() as u64, "repair")
                );
            } else {
                say!("nothing was changed");
            }
        }
        return Err(Exit(EXIT_UNCORRECTED).into());
    }
    WRITING.store(true, Ordering::SeqCst);
    let written = p.write(m.as_ref(), d.as_ref());
    WRITING.store(false, Ordering::SeqCst);
    if let Err(e) = written {
        eprintln!("dualfs: writing the repair failed: {e}. The volume is as it was, or needs `dualfs fsck -y` again");
        return Err(Exit(EXIT_OPERATIONAL).into());
    }
    // What is on the devices now, checked again from scratch.
    let after = check(m, d).map_err(|e| anyhow!("cannot check the repaired volume: {e}"));
    if args.json {
        say!("{}", serde_json::to_string_pretty(&repair_json(&p, true))?);
    } else {
        for r in &p.repairs {
            say!("REPAIRED ({}): {r}", r.severity.name());
        }
        say!(
            "{} written ({} meta-data blocks, {} data blocks)",
            count(p.repairs.len() as u64, "repair"),
            p.blocks_written.0,
            p.blocks_written.1
        );
    }
    let status = match after {
        Ok(r) if r.is_clean() => {
            if text {
                say!("the volume is consistent");
            }
            EXIT_CORRECTED
        }
        Ok(r) => {
            for pr in &r.problems {
                eprintln!("dualfs: left after the repair: {pr}");
            }
            EXIT_UNCORRECTED
        }
        Err(e) => {
            eprintln!("dualfs: {e:#}");
            EXIT_UNCORRECTED
        }
    };
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(Exit(EXIT_CANCELED).into());
    }
    Err(Exit(status).into())
}

/// Asks a yes/no question on the terminal; anything but y or yes is no.
fn ask(question: &str) -> bool {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The meta-data device to check: `m`, or with `--meta-mirror` both
/// copies as a mount assembles them (the copy in sync alone when the other
/// is missing or stale), a block bad on the first read from the second;
/// written back only when repairing. A check reads the copy given alone
/// unless told; a repair of a mirror in sync writes both copies, the
/// second found among the block devices when not named (repairing one
/// copy would leave the other behind while it passes for in sync).
fn with_mirror(
    args: &FsckArgs,
    meta: &Path,
    m: Arc<dyn BlockDevice>,
    d: &Arc<dyn BlockDevice>,
    access: Access,
) -> Result<Arc<dyn BlockDevice>> {
    let found;
    let path = match &args.meta_mirror {
        Some(p) => p,
        None => {
            let (Some(dsb), Access::Exclusive) = (crate::devices::mirror_in_sync(d.as_ref()), access) else {
                return Ok(m);
            };
            found = crate::find::mirror_copy(meta, &dsb, "--meta-mirror DEV")
                .map_err(|e| anyhow!("{e:#}: a repair of a mirrored meta-data device writes both copies"))?;
            eprintln!(
                "dualfs: the meta-data mirror's second copy: {} (found among the block devices)",
                found.display()
            );
            &found
        }
    };
    let second = crate::devices::open_one(path, DeviceRole::Meta, access)?;
    let a = Volume::assemble_meta(&[m, second], d, true, false).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if let Some(why) = &a.degraded {
        eprintln!("dualfs: checking one meta-data copy: {why}");
    }
    if let (Some(mirror), Access::ExclusiveReadOnly) = (&a.mirror, access) {
        mirror.without_write_back();
    }
    Ok(a.meta)
}

/// The check alone (`-n`, or no option): nothing is written.
fn check_only(args: &FsckArgs, meta: &Path, data: &Path) -> Result<()> {
    let meter = Meter::default();
    let checked = open_pair(meta, data, Access::ExclusiveReadOnly).and_then(|(m, d)| {
        let m = with_mirror(args, meta, m, &d, Access::ExclusiveReadOnly)?;
        let _activity = Activity::start(format!("checking {}", meta.display()), meter.read.clone(), "read");
        match check(meter.wrap(m.clone()), meter.wrap(d.clone())) {
            Ok(r) => Ok(Ok(r)),
            // No checkpoint loads: whether repair can rebuild the volume
            // from its log decides between "found, left" and "cannot check".
            Err(e @ dualfs_engine::Error::Corrupt { .. }) => match prepare(meter.wrap(m), meter.wrap(d)) {
                Ok(p) if p.after.as_ref().is_some_and(CheckReport::is_clean) => Ok(Err((e, p))),
                _ => Err(anyhow!("cannot check {} and {}: {e}", meta.display(), data.display())),
            },
            Err(e) => Err(anyhow!("cannot check {} and {}: {e}", meta.display(), data.display())),
        }
    });
    let report = match checked {
        Ok(Ok(r)) => r,
        Ok(Err((e, p))) => {
            if args.json {
                let mut j = repair_json(&p, false);
                j["problem"] = json!(e.to_string());
                println!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                println!("PROBLEM: the volume cannot be opened as it is: {e}");
                println!("{}; `dualfs fsck -y` would make these repairs:", p.source);
                for r in &p.repairs {
                    println!("  ({}) {r}", r.severity.name());
                }
                println!("nothing was changed");
            }
            return Err(Exit(EXIT_UNCORRECTED).into());
        }
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
