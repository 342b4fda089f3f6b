//! `dualfs stats MOUNTPOINT`: the counters of the log and the cleaner of a
//! mounted volume, read from its `dualfs.stats` control attribute.

use std::fmt::Write as _;

use anyhow::Result;
use dualfs_fuse::control;
use serde_json::Value;

use crate::args::StatsArgs;
use crate::control::Mounted;

/// One `name value` line per counter, and the state of a clean if one runs.
fn text(stats: &Value, clean: &Value) -> String {
    let mut o = String::new();
    let width = stats.as_object().map_or(0, |m| m.keys().map(String::len).max().unwrap_or(0));
    for (k, v) in stats.as_object().into_iter().flatten().filter(|(_, v)| !v.is_null()) {
        let _ = writeln!(o, "{k:<width$}  {v}");
    }
    if clean["state"] == "running" {
        let _ = writeln!(
            o,
            "a clean is running: {} of {} ({})",
            clean["done"],
            crate::words::count(clean["total"].as_u64().unwrap_or(0), "segment"),
            clean["request"].as_str().unwrap_or_default()
        );
    }
    o
}

/// Runs `dualfs stats`.
///
/// # Errors
/// Not a DualFS mount point, or the caller may not read the counters.
pub fn run(args: &StatsArgs) -> Result<()> {
    let mnt = Mounted::find(&args.mountpoint)?;
    let stats = mnt.get(control::STATS)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        let clean = mnt.get(control::CLEAN)?;
        print!("{}", text(&stats, &clean));
    }
    Ok(())
}
