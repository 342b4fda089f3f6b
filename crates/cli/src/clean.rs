//! `dualfs clean`: run the segment cleaner on demand, on an unmounted
//! volume in this process, or on a mounted one through its control
//! attributes. Both print the same report, built once as JSON.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use dualfs_engine::volume::MountOptions;
use dualfs_fuse::control::{self, CleanOrder, policy_name};
use serde_json::{Value, json};

use crate::args::CleanArgs;
use crate::control::Mounted;
use crate::devices::{Access, open_volume, split_source};
use crate::progress::segment_bar;
use crate::words::{count, human_bytes};

/// How often a mounted clean's progress is read.
const POLL: Duration = Duration::from_millis(100);

fn stat(stats: &[(&'static str, u64)], name: &str) -> u64 {
    stats.iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| *v)
}

/// Cleans an unmounted volume; refuses one that is mounted (locked).
fn offline(meta: &Path, data: &Path, order: &CleanOrder) -> Result<Value> {
    let vol = open_volume(meta, data, Access::Exclusive, MountOptions::default())?;
    let before = vol.stats();
    let req = order.request();
    let cleanable = vol.cleanable_segments(&req).map_err(|e| anyhow!("cannot read the segment usage table: {e}"))?;
    let bar = segment_bar("cleaning", cleanable);
    let report = vol
        .clean_in_passes(req, &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            true
        })
        .map_err(|e| anyhow!("cleaning failed: {e}"))?;
    bar.finish_and_clear();
    let after = vol.stats();
    vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
    Ok(json!({
        "mounted": false,
        "request": order.to_string(),
        "stopped": false,
        "segments": stat(&after, "segments"),
        "free_segments_before": stat(&before, "segments_free"),
        "free_segments_after": stat(&after, "segments_free"),
        "report": control::report_json(&report),
    }))
}

/// Asks the mount's process to clean, shows its progress, and waits.
fn mounted(target: &Path, order: &CleanOrder) -> Result<Value> {
    let mnt = Mounted::find(target)?;
    let before = mnt.get(control::STATS)?;
    let previous = mnt.get(control::CLEAN)?["id"].as_u64().unwrap_or(0);
    mnt.start_clean(&order.to_string())?;
    let bar = segment_bar("cleaning", 0);
    let status = loop {
        let s = mnt.get(control::CLEAN)?;
        bar.set_length(s["total"].as_u64().unwrap_or(0));
        bar.set_position(s["done"].as_u64().unwrap_or(0));
        if s["id"].as_u64().unwrap_or(0) > previous && s["state"] != "running" {
            break s;
        }
        thread::sleep(POLL);
    };
    bar.finish_and_clear();
    if let Some(e) = status["error"].as_str() {
        bail!("cleaning {} failed: {e}", mnt.root().display());
    }
    let after = mnt.get(control::STATS)?;
    Ok(json!({
        "mounted": true,
        "request": status["request"],
        "stopped": status["stopped"],
        "segments": after["segments"],
        "free_segments_before": before["segments_free"],
        "free_segments_after": after["segments_free"],
        "report": status["report"],
    }))
}

fn segments(n: u64) -> String {
    if n == 1 { "1 segment".into() } else { format!("{n} segments") }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The report in plain words.
fn text(v: &Value, order: &CleanOrder) -> String {
    let r = &v["report"];
    let secs = u(&r["micros"]) as f64 / 1e6;
    let mut o = String::new();
    let how = format!("{}, segments under {:.0}% live", policy_name(order.policy), order.max_utilization * 100.0);
    if u(&r["segments_read"]) == 0 {
        o.push_str(&format!("nothing to clean ({how})\n"));
    } else {
        o.push_str(&format!(
            "cleaned {} ({how}) in {secs:.2} s{}\n",
            segments(u(&r["segments_read"])),
            if v["stopped"].as_bool().unwrap_or(false) { ", stopped early" } else { "" }
        ));
    }
    o.push_str(&format!(
        "  segments read    {} ({})\n",
        u(&r["segments_read"]),
        count(u(&r["descriptor_blocks_read"]), "descriptor block")
    ));
    o.push_str(&format!(
        "  moved            {}, {}, {}\n",
        count(u(&r["nodes_moved"]), "node"),
        count(u(&r["inodes_moved"]), "inode"),
        count(u(&r["ifile_blocks_moved"]), "IFile block")
    ));
    o.push_str(&format!(
        "  segments freed   {} (free: {} before, {} after, of {})\n",
        u(&r["segments_freed"]),
        u(&v["free_segments_before"]),
        u(&v["free_segments_after"]),
        u(&v["segments"])
    ));
    o.push_str(&format!("  bytes written    {}\n", human_bytes(u(&r["bytes_written"]))));
    o
}

/// Runs `dualfs clean`.
///
/// # Errors
/// The volume cannot be opened or reached, is mounted (offline), a clean is
/// already running (mounted), or a device fails.
pub fn run(args: &CleanArgs) -> Result<()> {
    let order = CleanOrder { segments: args.segments, policy: args.policy, max_utilization: args.max_utilization };
    crate::itself::refuse_dead_mount(&args.target)?;
    let value = match &args.data {
        Some(data) => offline(&args.target, data, &order)?,
        None if args.target.is_dir() => mounted(&args.target, &order)?,
        None => {
            let (meta, data): (PathBuf, PathBuf) = split_source(&args.target.to_string_lossy(), None)?;
            offline(&meta, &data, &order)?
        }
    };
    if args.json {
        say!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        say!("{}", text(&value, &order).trim_end());
    }
    Ok(())
}
