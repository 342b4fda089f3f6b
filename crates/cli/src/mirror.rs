//! `dualfs mirror add|remove|replace MOUNTPOINT`: asks the serving process
//! of a mounted volume to change its meta-data mirror through the control
//! attribute `dualfs.mirror` (`dualfs_fuse::mirror`), showing the copy's
//! progress, and says which devices the next mount names.

use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_fuse::mirror::{MIRROR, MirrorOrder, mirror_order};
use rustix::fs::XattrFlags;
use serde_json::{Value, json};

use crate::args::{MirrorAction, MirrorArgs};
use crate::control::Mounted;
use crate::progress::unit_bar;
use crate::words::human_bytes;

fn canonical(p: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(p).map_err(|e| anyhow!("{}: {e}", p.display()))
}

/// The order, with the new device canonical (it must exist); an old copy
/// may be gone (a failed disk), so it is taken as given, made absolute.
fn order(action: &MirrorAction) -> Result<(PathBuf, MirrorOrder, bool)> {
    let absolute = |p: &Path| canonical(p).or_else(|_| std::path::absolute(p).map_err(|e| anyhow!("{e}")));
    Ok(match action {
        MirrorAction::Add { mountpoint, new, json } => (mountpoint.clone(), MirrorOrder::Add(canonical(new)?), *json),
        MirrorAction::Remove { mountpoint, old, json } => {
            (mountpoint.clone(), MirrorOrder::Remove(absolute(old)?), *json)
        }
        MirrorAction::Replace { mountpoint, old, new, json } => {
            (mountpoint.clone(), MirrorOrder::Replace(absolute(old)?, canonical(new)?), *json)
        }
    })
}

/// Asks the mount's process to change the mirror, and waits.
fn mounted(target: &Path, o: &MirrorOrder) -> Result<Value> {
    let mnt = Mounted::find(target)?;
    if let MirrorOrder::Add(new) | MirrorOrder::Replace(_, new) = o {
        crate::itself::Itself::mounted(mnt.root()).refuse(new, "the new meta-data copy")?;
    }
    let text = mirror_order(o);
    let root = mnt.root().to_path_buf();
    let value = text.clone();
    let worker = thread::spawn(move || rustix::fs::setxattr(&root, MIRROR, value.as_bytes(), XattrFlags::empty()));
    let bar = unit_bar("copying to the new copy", 0, "MiB");
    while !worker.is_finished() {
        if let Ok(s) = mnt.get(MIRROR)
            && s["state"] == "running"
        {
            bar.set_length(s["total"].as_u64().unwrap_or(0));
            bar.set_position(s["done"].as_u64().unwrap_or(0));
        }
        thread::sleep(Duration::from_millis(20));
    }
    bar.finish_and_clear();
    let r = worker.join().map_err(|_| anyhow!("the mirror request's thread panicked"))?;
    let status = mnt.get(MIRROR)?;
    if let Err(e) = r
        && status["error"].is_null()
    {
        if e == rustix::io::Errno::BUSY {
            bail!("a change of the mirror is already running on {}", mnt.root().display());
        }
        bail!("changing the mirror of {}: {}", mnt.root().display(), io::Error::from(e));
    }
    Ok(json!({ "mountpoint": mnt.root().display().to_string(), "request": text, "result": status }))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The report in plain words, ending with how to mount next.
fn text(r: &Value) -> String {
    let meta = r["meta_device"].as_str().unwrap_or("META");
    let mut o = String::new();
    match r["mirror_device"].as_str() {
        Some(mirror) => {
            o.push_str(&format!("the meta-data device is mirrored: {meta} and {mirror}, in sync\n"));
            o.push_str(&format!("  copied     {}\n", human_bytes(u(&r["copied_blocks"]) * BLOCK_BYTES)));
            o.push_str(&format!(
                "  mirrored   {} written to both copies while the copy ran\n",
                human_bytes(u(&r["mirrored_blocks"]) * BLOCK_BYTES)
            ));
            o.push_str(&format!("  took       {:.1} s\n", u(&r["micros"]) as f64 / 1e6));
            o.push_str(&format!(
                "from now on mount with the meta-data device {meta} and -o mirror={mirror}; any other copy is no \
                 longer the volume's"
            ));
        }
        None => {
            o.push_str(&format!(
                "the meta-data device is no longer mirrored: the volume runs on {meta} alone\nfrom now on mount with \
                 the meta-data device {meta} and no mirror= option; the removed copy is no longer the volume's"
            ));
        }
    }
    o
}

/// Runs `dualfs mirror`.
///
/// # Errors
/// The mount cannot be reached, the change does not apply or fails (the
/// reason said plainly).
pub fn run(args: &MirrorArgs) -> Result<()> {
    let (target, o, json) = order(&args.action)?;
    crate::itself::refuse_dead_mount(&target)?;
    if !target.is_dir() {
        bail!("{} is not a mount point: dualfs mirror changes the mirror of a mounted volume", target.display());
    }
    let value = mounted(&target, &o)?;
    if let Some(e) = value["result"]["error"].as_str() {
        bail!("{e}");
    }
    if json {
        say!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        say!("{}", text(&value["result"]));
    }
    Ok(())
}
