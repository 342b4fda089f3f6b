//! `dualfs stats MOUNTPOINT`: the counters of the log and the cleaner of a
//! mounted volume and the FUSE requests it served, read from its
//! `dualfs.stats` control attribute.

use std::fmt::Write as _;

use anyhow::Result;
use dualfs_fuse::control;
use serde_json::Value;

use crate::args::StatsArgs;
use crate::control::Mounted;

/// One `name value` line per counter, a table of the FUSE requests served
/// since mount, and the state of a clean if one runs.
fn text(stats: &Value, clean: &Value) -> String {
    let mut o = String::new();
    for w in stats["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        let _ = writeln!(o, "WARNING: {w}\n");
    }
    let counters: Vec<(&String, &Value)> = stats
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_object() && !v.is_null() && !v.is_array())
        .collect();
    let width = counters.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in counters {
        let _ = writeln!(o, "{k:<width$}  {v}");
    }
    if let Some(reqs) = stats["fuse_requests"].as_object().filter(|m| !m.is_empty()) {
        let mut rows: Vec<(&String, &Value)> = reqs.iter().collect();
        // The opcodes that took the most serving time first.
        rows.sort_by_key(|(_, r)| std::cmp::Reverse(r["total_us"].as_u64().unwrap_or(0)));
        let _ = writeln!(
            o,
            "\nFUSE requests since mount:\n{:<16} {:>12} {:>14} {:>10} {:>14}",
            "opcode", "count", "total µs", "mean µs", "lock wait µs"
        );
        for (op, r) in rows {
            let _ = writeln!(
                o,
                "{op:<16} {:>12} {:>14} {:>10.2} {:>14}",
                r["count"].as_u64().unwrap_or(0),
                r["total_us"].as_u64().unwrap_or(0),
                r["mean_us"].as_f64().unwrap_or(0.0),
                r["lock_wait_us"].as_u64().unwrap_or(0)
            );
        }
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
