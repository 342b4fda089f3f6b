//! `dualfs inspect … extents PATH`: a file's extent map with the physical
//! blocks on the data device (filefrag -v, xfs_bmap -v, debugfs's `stat`).

use std::fmt::Write as _;

use anyhow::{Result, anyhow};
use dualfs_engine::Volume;
use dualfs_engine::types::{BLOCK_BYTES, FileKind, InodeNo};
use serde_json::{Value, json};

use crate::words::count;

/// Most extents listed: a map is bounded by the data device, and this one
/// bound keeps a corrupt map from running on.
const MAX_EXTENTS: usize = 1 << 24;

/// The extent map of `ino` as JSON.
///
/// # Errors
/// Not a regular file, or its map cannot be read.
pub fn extents_json(vol: &Volume, ino: InodeNo) -> Result<Value> {
    let a = vol.getattr(ino).map_err(|e| anyhow!("inode {ino}: {e}"))?;
    if a.kind != FileKind::Regular {
        return Err(anyhow!("inode {ino} is not a regular file: only files have extents"));
    }
    let inline = vol.is_inline(ino).map_err(|e| anyhow!("inode {ino}: {e}"))?;
    let group_blocks = vol.with_fs(|fs| u64::from(fs.log.space().group_blocks())).max(1);
    let mut list = Vec::new();
    let mut next = 0u64;
    let mut mapped = 0u64;
    if !inline {
        while list.len() < MAX_EXTENTS {
            let Some(e) = vol.with_fs(|fs| fs.next_extent(ino, next)).map_err(|e| anyhow!("inode {ino}: {e}"))? else {
                break;
            };
            list.push(json!({
                "logical": e.logical,
                "physical": e.physical.0,
                "blocks": e.len,
                "group": e.physical.0 / group_blocks,
                "unwritten": e.unwritten,
            }));
            mapped += u64::from(e.len);
            // A map is sorted; one that goes back is broken: stop.
            if e.logical_end() <= next {
                break;
            }
            next = e.logical_end();
        }
    }
    Ok(json!({
        "ino": ino.0,
        "size": a.size,
        "inline": inline,
        "mapped_blocks": mapped,
        "block_bytes": BLOCK_BYTES,
        "extents": list,
    }))
}

/// The text form.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    if v["inline"].as_bool().unwrap_or(false) {
        let _ = writeln!(
            o,
            "inode {}: {} bytes kept inline in the inode (meta-data device); no extents",
            n("ino"),
            n("size")
        );
        return o;
    }
    let list = v["extents"].as_array().map_or(&[][..], Vec::as_slice);
    let _ = writeln!(
        o,
        "inode {}: {} bytes, {}, {} mapped",
        n("ino"),
        n("size"),
        count(list.len() as u64, "extent"),
        count(n("mapped_blocks"), "block")
    );
    if list.is_empty() {
        return o;
    }
    let _ = writeln!(o, "{:>5} {:>23} {:>23} {:>10} {:>6}  flags", "ext", "logical", "physical", "blocks", "group");
    for (i, e) in list.iter().enumerate() {
        let g = |k: &str| e[k].as_u64().unwrap_or(0);
        let len = g("blocks");
        let last = |start: u64| start + len.saturating_sub(1);
        let _ = writeln!(
            o,
            "{i:>5} {:>23} {:>23} {len:>10} {:>6}  {}",
            format!("{}..{}", g("logical"), last(g("logical"))),
            format!("{}..{}", g("physical"), last(g("physical"))),
            g("group"),
            if e["unwritten"].as_bool().unwrap_or(false) { "unwritten" } else { "" }
        );
    }
    o
}
