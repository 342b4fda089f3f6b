//! `dualfs scrub`: read and check every live block of a volume, unmounted
//! in this process or mounted through its control attribute
//! (`dualfs_fuse::scrub`), and report what is damaged and the files it
//! costs. Both print the same report, built once as JSON; the exit status
//! is fsck(8)'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::check::scrub::{Copies, scrub_unmounted_copies};
use dualfs_engine::device::BlockDevice;
use dualfs_engine::error::DeviceRole;
use dualfs_engine::format::superblock::{Role, Superblock};
use dualfs_engine::volume::ScrubOptions;
use dualfs_fuse::scrub::{SCRUB, order_text, report_json};
use nix::sys::signal::{SigSet, Signal};
use serde_json::{Value, json};

use crate::args::ScrubArgs;
use crate::control::Mounted;
use crate::devices::{Access, check_distinct, open_one, open_pair, split_source};
use crate::exit::Exit;
use crate::find::Probed;
use crate::progress::byte_bar;
use crate::words::human_bytes;

/// Every error found was corrected.
const EXIT_CORRECTED: i32 = 1;
/// Errors were left uncorrected.
const EXIT_UNCORRECTED: i32 = 4;
/// The scrub could not run.
const EXIT_OPERATIONAL: i32 = 8;
/// Stopped before the end.
const EXIT_CANCELED: i32 = 32;

/// How often a mounted scrub's progress is read.
const POLL: Duration = Duration::from_millis(100);

/// Set by SIGINT or SIGTERM: the scrub stops and reports what it read.
static STOP: AtomicBool = AtomicBool::new(false);

/// SIGINT and SIGTERM stop the scrub (a mounted volume's too, which would
/// otherwise go on in the serving process) instead of killing the command.
fn stop_on_signal() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if set.thread_block().is_err() {
        return;
    }
    let spawned = thread::Builder::new().name("dualfs-scrub-signals".into()).spawn(move || {
        if let Ok(sig) = set.wait() {
            eprintln!("dualfs: {sig}: stopping the scrub");
            STOP.store(true, Ordering::SeqCst);
        }
    });
    if spawned.is_err() {
        let _ = set.thread_unblock();
    }
}

type Dev = Arc<dyn BlockDevice>;

/// The data device's superblock, when it says the meta-data device is
/// mirrored.
fn mirrored(data: &Path) -> Option<Superblock> {
    match crate::find::probe(data) {
        Ok(Probed::DualFs(sb)) if sb.role == Role::Data && sb.mirrored() => Some(*sb),
        _ => None,
    }
}

/// The meta-data device to scrub and its copies: with a mirror, both
/// copies as a mount assembles them (`mirror`, or the copy found among the
/// block devices), opened to be written (a bad copy is mended); without,
/// `meta` read only.
fn assemble(meta: &Path, data: &Path, mirror: Option<&Path>) -> Result<(Dev, Dev, Copies)> {
    let Some(dsb) = mirrored(data) else {
        if let Some(p) = mirror {
            bail!("{} names no meta-data mirror: scrub it without --meta-mirror {}", data.display(), p.display());
        }
        let (m, d) = open_pair(meta, data, Access::ExclusiveReadOnly)?;
        return Ok((m, d, Copies::default()));
    };
    let (m, d) = open_pair(meta, data, Access::Exclusive)?;
    let second = match mirror {
        Some(p) => Some(p.to_path_buf()),
        None => match crate::find::mirror_copy(meta, &dsb, "--meta-mirror DEV") {
            Ok(p) => {
                eprintln!(
                    "dualfs: the meta-data mirror's second copy: {} (found among the block devices)",
                    p.display()
                );
                Some(p)
            }
            Err(e) => {
                eprintln!("dualfs: {e:#}");
                None
            }
        },
    };
    let mut copies = vec![m];
    if let Some(p) = &second {
        check_distinct(meta, p)?;
        check_distinct(p, data)?;
        copies.push(open_one(p, DeviceRole::Meta, Access::Exclusive)?);
    }
    let a = Volume::assemble_meta(&copies, &d, true, false).map_err(|e| anyhow!("{}: {e}", meta.display()))?;
    if let Some(why) = &a.degraded {
        eprintln!("dualfs: the meta-data mirror is degraded ({why}): scrubbing one copy");
    }
    Ok((a.meta, d, Copies { mirror: a.mirror, degraded: a.degraded }))
}

fn offline(meta: &Path, data: &Path, mirror: Option<&Path>, opts: ScrubOptions) -> Result<Value> {
    let (m, d, copies) = assemble(meta, data, mirror)?;
    let bar = byte_bar("scrubbing", 0);
    let report = scrub_unmounted_copies(m, d, copies, opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        !STOP.load(Ordering::SeqCst)
    })
    .map_err(|e| anyhow!("cannot scrub {} and {}: {e}", meta.display(), data.display()))?;
    bar.finish_and_clear();
    Ok(json!({ "mounted": false, "report": report_json(&report) }))
}

fn mounted(target: &Path, opts: ScrubOptions) -> Result<Value> {
    let mnt = Mounted::find(target)?;
    let previous = mnt.get(SCRUB)?["id"].as_u64().unwrap_or(0);
    mnt.set(SCRUB, Some(&order_text(&opts)), "a scrub is already running")?;
    let bar = byte_bar("scrubbing", 0);
    let mut asked_stop = false;
    let status = loop {
        let s = mnt.get(SCRUB)?;
        bar.set_length(s["total"].as_u64().unwrap_or(0));
        bar.set_position(s["done"].as_u64().unwrap_or(0));
        if s["id"].as_u64().unwrap_or(0) > previous && s["state"] != "running" {
            break s;
        }
        if STOP.load(Ordering::SeqCst) && !asked_stop {
            mnt.set(SCRUB, None, "a scrub is already running")?;
            asked_stop = true;
        }
        thread::sleep(POLL);
    };
    bar.finish_and_clear();
    if let Some(e) = status["error"].as_str() {
        bail!("scrubbing {} failed: {e}", mnt.root().display());
    }
    Ok(json!({ "mounted": true, "report": status["report"] }))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn files(v: &Value) -> String {
    let names: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| match f["path"].as_str() {
            Some(p) => p.to_string(),
            None => format!("inode {} (no path reaches it)", u(&f["inode"])),
        })
        .collect();
    if names.is_empty() { "no file named".into() } else { names.join(", ") }
}

/// The report in plain words.
fn text(v: &Value) -> String {
    let r = &v["report"];
    let secs = u(&r["micros"]) as f64 / 1e6;
    let bytes = u(&r["bytes"]);
    let mut o = String::new();
    o.push_str(&format!(
        "scrubbed {} in {secs:.2} s ({}/s){}\n",
        human_bytes(bytes),
        human_bytes((bytes as f64 / secs.max(1e-6)) as u64),
        if r["stopped"].as_bool().unwrap_or(false) { ", stopped before the end" } else { "" }
    ));
    o.push_str(&format!(
        "  meta-data  {} blocks checked ({} cop{}), {} bad\n",
        u(&r["meta_blocks"]),
        u(&r["copies"]),
        if u(&r["copies"]) == 1 { "y" } else { "ies" },
        r["bad_meta"].as_array().map_or(0, Vec::len)
    ));
    o.push_str(&format!(
        "  data       {} blocks read, {} read errors (data carries no checksums: only read errors are found)\n",
        u(&r["data_blocks"]),
        r["data_errors"].as_array().map_or(0, Vec::len)
    ));
    if let Some(why) = r["degraded"].as_str() {
        o.push_str(&format!("  the meta-data mirror is degraded ({why}): one copy read\n"));
    }
    if u(&r["copies"]) > 1 {
        for c in r["per_copy"].as_array().into_iter().flatten() {
            o.push_str(&format!(
                "  copy {}     {} bad blocks: {} repaired from the other copy, {} not\n",
                u(&c["copy"]),
                u(&c["bad"]),
                u(&c["repaired"]),
                u(&c["unrepaired"])
            ));
        }
    }
    if u(&r["moved"]) > 0 {
        o.push_str(&format!("  {} blocks changed while being read, and were found good\n", u(&r["moved"])));
    }
    for b in r["bad_meta"].as_array().into_iter().flatten() {
        let on: Vec<String> = b["copies"].as_array().into_iter().flatten().map(|c| u(c).to_string()).collect();
        let on = if u(&r["copies"]) > 1 { format!(" on copy {}", on.join(" and ")) } else { String::new() };
        o.push_str(&format!(
            "BAD meta-data block {}{on} ({}, {}): {}; {}; files: {}\n",
            u(&b["block"]),
            b["structure"].as_str().unwrap_or("?"),
            b["tree"].as_str().unwrap_or("?"),
            b["error"].as_str().unwrap_or("?"),
            if b["repaired"].as_bool().unwrap_or(false) { "repaired from the other copy" } else { "not repaired" },
            files(&b["files"])
        ));
    }
    for e in r["data_errors"].as_array().into_iter().flatten() {
        let file = match e["path"].as_str() {
            Some(p) => p.to_string(),
            None => format!("inode {}", u(&e["inode"])),
        };
        o.push_str(&format!(
            "READ ERROR data block {} (block {} of {file}, {}): {}\n",
            u(&e["block"]),
            u(&e["file_block"]),
            e["tree"].as_str().unwrap_or("?"),
            e["error"].as_str().unwrap_or("?")
        ));
    }
    let (fixed, left) = (u(&r["corrected"]), u(&r["uncorrectable"]));
    o.push_str(&match (fixed, left) {
        (0, 0) => "no errors found\n".to_string(),
        (f, 0) => format!("{f} errors found, all corrected\n"),
        (f, l) => format!(
            "{} errors found: {f} corrected, {l} uncorrectable{}\n",
            f + l,
            if u(&r["copies"]) == 1 { " (one meta-data copy: nothing to repair from)" } else { "" }
        ),
    });
    o
}

fn scrub(args: &ScrubArgs) -> Result<Value> {
    let opts = ScrubOptions { rate: args.rate, meta_only: args.meta_only };
    crate::itself::refuse_dead_mount(&args.target)?;
    let mirror = args.meta_mirror.as_deref();
    match &args.data {
        Some(data) => offline(&args.target, data, mirror, opts),
        None if args.target.is_dir() => {
            if mirror.is_some() {
                bail!("--meta-mirror is for an unmounted volume: a mounted one is scrubbed on the copies it runs on");
            }
            mounted(&args.target, opts)
        }
        None => {
            let (meta, data): (PathBuf, PathBuf) = split_source(&args.target.to_string_lossy(), None)?;
            offline(&meta, &data, mirror, opts)
        }
    }
}

/// Runs `dualfs scrub`.
///
/// # Errors
/// `Exit` with fsck(8)'s status: 1 every error corrected, 4 errors left, 8
/// the scrub could not run (after saying why), 32 stopped.
pub fn run(args: &ScrubArgs) -> Result<()> {
    stop_on_signal();
    let value = match scrub(args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("dualfs: {e:#}");
            return Err(Exit(EXIT_OPERATIONAL).into());
        }
    };
    if args.json {
        say!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        say!("{}", text(&value).trim_end());
    }
    let r = &value["report"];
    let status = if r["stopped"].as_bool().unwrap_or(false) {
        EXIT_CANCELED
    } else if u(&r["uncorrectable"]) > 0 {
        EXIT_UNCORRECTED
    } else if u(&r["corrected"]) > 0 {
        EXIT_CORRECTED
    } else {
        return Ok(());
    };
    Err(Exit(status).into())
}
