//! The text form of `dualfs inspect`'s views (the JSON form is the views
//! themselves).

use std::fmt::Write as _;

use serde_json::Value;

use crate::args::Inspect;
use crate::words::{count, human_bytes};

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

fn summary(v: &Value) -> String {
    let mut o = String::new();
    let label = v["label"].as_str().unwrap_or_default();
    let _ = writeln!(
        o,
        "volume     {}{}",
        v["volume_uuid"].as_str().unwrap_or_default(),
        if label.is_empty() { String::new() } else { format!(" {label:?}") }
    );
    let _ = writeln!(
        o,
        "format     {}, created {}",
        v["format"].as_str().unwrap_or_default(),
        v["created"].as_str().unwrap_or_default()
    );
    if u(&v["mirror"]["copies"]) == 2 {
        let _ = writeln!(
            o,
            "mirror     two meta-data copies, {} (generation {})",
            v["mirror"]["state"].as_str().unwrap_or_default(),
            u(&v["mirror"]["generation"])
        );
    }
    mirror_devices(&mut o, &v["mirror"]);
    let m = &v["meta"];
    let (segs, free) = (u(&m["segments"]), u(&m["free_segments"]));
    let _ = writeln!(
        o,
        "meta-data  {} of {}: {free} free ({:.1}% used)",
        count(segs, "segment"),
        human_bytes(u(&m["segment_bytes"])),
        percent(segs - free.min(segs), segs)
    );
    let d = &v["data"];
    let (blocks, bfree) = (u(&d["blocks"]), u(&d["free_blocks"]));
    let _ = writeln!(
        o,
        "data       {}: {} free ({:.1}% used), {} of {}",
        human_bytes(blocks * 4096),
        human_bytes(bfree * 4096),
        percent(blocks - bfree.min(blocks), blocks),
        count(u(&d["groups"]), "group"),
        human_bytes(u(&d["group_bytes"]))
    );
    let _ = writeln!(o, "inodes     {} used, {} free", u(&v["inodes"]["used"]), u(&v["inodes"]["free"]));
    let l = &v["log"];
    let rf = &l["roll_forward"];
    let _ = writeln!(
        o,
        "log        checkpoint {}; roll-forward applied {} ({}) in {} µs; log end: {}",
        u(&l["checkpoint"]),
        count(u(&rf["partial_segments"]), "partial segment"),
        count(u(&rf["blocks_scanned"]), "block"),
        u(&rf["micros"]),
        rf["end"].as_str().unwrap_or_default()
    );
    let fr = &l["fsync_replay"];
    if u(&fr["partial_segments"]) > 0 {
        let _ = writeln!(
            o,
            "fsync      replayed {} after the last commit group ({}, {} created, {} put back)",
            count(u(&fr["partial_segments"]), "fsync record"),
            count(u(&fr["records"]), "change"),
            count(u(&fr["inodes_created"]), "inode"),
            count(u(&fr["data_blocks"]), "data block")
        );
    }
    if let Some(why) = l["fell_back"].as_str() {
        let _ = writeln!(o, "warning    the newest checkpoint was unusable: {why}");
    }
    o
}

/// Widest bar of the utilisation histogram, in characters.
const BAR_WIDTH: u64 = 40;

/// One line per bucket: its range, a bar, the count.
fn histogram(o: &mut String, buckets: &Value) {
    let buckets = buckets.as_array().map_or(&[][..], Vec::as_slice);
    let most = buckets.iter().map(|b| u(&b["segments"])).max().unwrap_or(0);
    let total: u64 = buckets.iter().map(|b| u(&b["segments"])).sum();
    let _ = writeln!(o, "utilisation of the {total} segments in use:");
    for b in buckets {
        let n = u(&b["segments"]);
        // Any segment at all shows at least one mark.
        let width = if n == 0 { 0 } else { (n * BAR_WIDTH).div_ceil(most.max(1)) } as usize;
        let range = format!("{}-{}%", u(&b["from_percent"]), u(&b["to_percent"]));
        let _ = writeln!(o, "{range:>9} {:<w$} {n}", "#".repeat(width), w = BAR_WIDTH as usize);
    }
}

fn segments(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} of {}: {} free, {} kept in reserve for the cleaner; {} live",
        count(u(&v["segments"]), "segment"),
        human_bytes(u(&v["segment_bytes"])),
        u(&v["free"]),
        u(&v["reserve"]),
        human_bytes(u(&v["live_bytes"]))
    );
    histogram(&mut o, &v["histogram"]);
    let _ = writeln!(o, "{:>8} {:>12} {:>7} {:>10} {:>6}", "segment", "live bytes", "used", "last seq", "state");
    for s in v["list"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "{:>8} {:>12} {:>6.1}% {:>10} {:>6}",
            u(&s["segment"]),
            u(&s["live_bytes"]),
            s["utilisation"].as_f64().unwrap_or(0.0) * 100.0,
            u(&s["last_seq"]),
            if s["free"].as_bool().unwrap_or(false) { "free" } else { "used" }
        );
    }
    o
}

fn groups(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{:>6} {:>12} {:>12} {:>7} {:>12}", "group", "blocks", "free", "used", "directories");
    for g in v["groups"].as_array().into_iter().flatten() {
        let (blocks, free) = (u(&g["blocks"]), u(&g["free_blocks"]));
        let _ = writeln!(
            o,
            "{:>6} {:>12} {:>12} {:>6.1}% {:>12}",
            u(&g["group"]),
            blocks,
            free,
            percent(blocks - free.min(blocks), blocks),
            u(&g["directories"])
        );
    }
    o
}

/// Longest xattr value shown in full in text; JSON has them whole.
const XATTR_SHOWN: usize = 64;

fn inode(v: &Value) -> String {
    let mut o = String::new();
    let mut fields = v.clone();
    let xattrs = fields.as_object_mut().and_then(|m| m.remove("xattrs"));
    if fields["flags"] == "" {
        fields["flags"] = Value::from("none");
    }
    render_fields(&mut o, &fields, 0);
    match xattrs.as_ref().and_then(Value::as_object) {
        Some(x) if !x.is_empty() => {
            o.push_str("xattrs:\n");
            for (name, val) in x {
                let text = val.as_str().unwrap_or_default();
                if text.chars().count() > XATTR_SHOWN {
                    let head: String = text.chars().take(XATTR_SHOWN).collect();
                    let _ = writeln!(o, "  {name}: {head}... ({} characters)", text.chars().count());
                } else {
                    let _ = writeln!(o, "  {name}: {text}");
                }
            }
        }
        _ => o.push_str("xattrs: none\n"),
    }
    o
}

fn dir(v: &Value) -> String {
    let mut o = String::new();
    let entries = v["entries"].as_array().map_or(&[][..], Vec::as_slice);
    let _ = writeln!(o, "directory {}: {}", u(&v["ino"]), count(entries.len() as u64, "entry"));
    for e in entries {
        let _ = writeln!(
            o,
            "{:>10} {:<12} {}",
            u(&e["ino"]),
            e["kind"].as_str().unwrap_or_default(),
            e["name"].as_str().unwrap_or_default()
        );
    }
    o
}

/// The text for one view.
pub fn render(what: &Inspect, v: &Value) -> String {
    match what {
        Inspect::Summary => summary(v),
        Inspect::Segments { .. } => segments(v),
        Inspect::Groups => groups(v),
        Inspect::Inode { .. } => inode(v),
        Inspect::Dir { .. } => dir(v),
        Inspect::Extents { .. } => crate::extent_map::render(v),
        Inspect::Checkpoints => crate::checkpoints::render(v),
        Inspect::Superblock | Inspect::Log => {
            let mut o = String::new();
            render_fields(&mut o, v, 0);
            if let Inspect::Superblock = what {
                mirror_devices(&mut o, &v["mirror"]);
            }
            o
        }
    }
}

/// Appends `key: value` lines for every scalar of a JSON object, nested
/// objects indented: the generic text form of a view.
pub fn render_fields(out: &mut String, v: &Value, indent: usize) {
    let Some(map) = v.as_object() else { return };
    for (k, val) in map {
        match val {
            Value::Object(_) => {
                let _ = writeln!(out, "{:indent$}{k}:", "");
                render_fields(out, val, indent + 2);
            }
            Value::Array(_) => {}
            Value::String(s) => {
                let _ = writeln!(out, "{:indent$}{k}: {s}", "");
            }
            other => {
                let _ = writeln!(out, "{:indent$}{k}: {other}", "");
            }
        }
    }
}

/// Each copy of the meta-data mirror, as `--meta-mirror` (or the scan of
/// the block devices) found it.
fn mirror_devices(o: &mut String, m: &Value) {
    for (i, c) in m["devices"].as_array().into_iter().flatten().enumerate() {
        let generation = c["generation"].as_u64().map_or(String::new(), |g| format!(" generation {g},"));
        let _ = writeln!(
            o,
            "  copy {}   {}:{generation} {}",
            i + 1,
            c["device"].as_str().unwrap_or_default(),
            c["state"].as_str().unwrap_or_default()
        );
    }
    if let Some(why) = m["second_copy"].as_str() {
        let _ = writeln!(o, "  copy 2   {why}");
    }
}
