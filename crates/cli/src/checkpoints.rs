//! `dualfs inspect … checkpoints`: the two checkpoint slots with their
//! number, time and log position, which one a mount uses, and what the log
//! holds after it (nilfs-utils' lscp for DualFS, which keeps two).

use std::fmt::Write as _;

use dualfs_engine::DeviceRole;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::device::read as read_blocks;
use dualfs_engine::format::checkpoint::Checkpoint;
use dualfs_engine::format::superblock::CHECKPOINT_SLOTS;
use dualfs_engine::meta_log::mount::OpenReport;
use dualfs_engine::meta_log::recovery::{LogEnd, Stop};
use serde_json::{Value, json};

use crate::words::{count, date};

fn slot_json(meta: &dyn BlockDevice, block: u64) -> Value {
    let raw = match read_blocks(meta, DeviceRole::Meta, block, 1) {
        Ok(r) => r,
        Err(e) => return json!({ "block": block, "valid": false, "error": e.to_string() }),
    };
    match Checkpoint::decode(&raw) {
        Ok(c) => json!({
            "block": block,
            "valid": true,
            "number": c.number,
            "time": date(c.time),
            "log_seq": c.log.seq.0,
            "log_segment": c.log.segment.0,
            "log_offset": c.log.offset,
            "inodes": c.inode_count,
            "nodes": c.node_count,
            "free_data_blocks": c.free_data_blocks,
            "ifile_index_blocks": c.index.len(),
        }),
        Err(e) if raw.iter().all(|&b| b == 0) => {
            json!({ "block": block, "valid": false, "error": format!("empty ({})", e.0) })
        }
        Err(e) => json!({ "block": block, "valid": false, "error": e.0 }),
    }
}

/// Both slots, and what opening the volume made of them (`open`, when it
/// could be opened).
pub fn checkpoints_json(meta: &dyn BlockDevice, open: Option<&OpenReport>) -> Value {
    let mut slots: Vec<Value> = CHECKPOINT_SLOTS.iter().map(|s| slot_json(meta, s.0)).collect();
    if let Some(r) = open {
        for s in &mut slots {
            let used = s["number"].as_u64() == Some(r.checkpoint);
            s["in_use"] = json!(used);
        }
    }
    json!({
        "slots": slots,
        "in_use": open.map(|r| r.checkpoint),
        "fell_back": open.and_then(|r| r.fell_back.clone()),
        "after": open.map(|r| json!({
            "partial_segments": r.recovery.partial_segments,
            "blocks": r.recovery.blocks_scanned,
            "end": r.recovery.end.to_string(),
            "stop": log_end_json(&r.recovery.end),
        })),
    })
}

/// The text form.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:>5} {:>10} {:<35} {:>10} {:>14} {:>10} {:>10}  state",
        "slot", "number", "time", "log seq", "segment+block", "inodes", "nodes"
    );
    for s in v["slots"].as_array().into_iter().flatten() {
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        if s["valid"].as_bool().unwrap_or(false) {
            let _ = writeln!(
                o,
                "{:>5} {:>10} {:<35} {:>10} {:>14} {:>10} {:>10}  {}",
                n("block"),
                n("number"),
                s["time"].as_str().unwrap_or_default(),
                n("log_seq"),
                format!("{}+{}", n("log_segment"), n("log_offset")),
                n("inodes"),
                n("nodes"),
                if s["in_use"].as_bool().unwrap_or(false) { "in use" } else { "older" }
            );
        } else {
            let _ = writeln!(o, "{:>5} invalid: {}", n("block"), s["error"].as_str().unwrap_or_default());
        }
    }
    if let Some(why) = v["fell_back"].as_str() {
        let _ = writeln!(o, "the newest checkpoint was unusable, the older one is used: {why}");
    }
    let a = &v["after"];
    if a.is_object() {
        let _ = writeln!(
            o,
            "after checkpoint {}: {} ({}) to roll forward; log end: {}",
            v["in_use"].as_u64().unwrap_or(0),
            count(a["partial_segments"].as_u64().unwrap_or(0), "partial segment"),
            count(a["blocks"].as_u64().unwrap_or(0), "block"),
            a["end"].as_str().unwrap_or_default()
        );
    } else {
        o.push_str("the volume cannot be opened from either checkpoint\n");
    }
    o
}

/// Why roll-forward stopped, for scripts: whether the end is clean, and the
/// check each candidate place failed (its name, block and plain words).
pub fn log_end_json(end: &LogEnd) -> Value {
    let stop = |s: &Stop| json!({ "kind": s.name(), "block": s.block(), "why": s.to_string() });
    json!({
        "clean": end.is_clean(),
        "reason": stop(&end.reason),
        "next_segment": end.next_segment.as_ref().map(stop),
    })
}
