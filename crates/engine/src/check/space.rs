//! The space accounting against the walk's load: the data bitmap and the
//! group counts against the data blocks files map, the segment usage table
//! against the live inodes and nodes (invariants I7 and I8), and the map
//! of data blocks to files that snapshots are checked with (I13).

use super::walk::{Source, problem};
use super::{CheckStats, Invariant, Loaded, Problem, tree};
use crate::format::codec::Reader;
use crate::format::inode::{Body, InodeRecord};
use crate::meta_log::Log;
use crate::types::{BLOCK_BYTES, FileKind, InodeNo, NodeId};

/// The data an inode maps, as `(first data block, blocks, first file
/// block)`: its extent list, or the leaves of a regular file's extent tree
/// (other trees map names, not data). Entries that do not decode are left
/// out; the namespace walk reports them.
fn data_extents(loaded: &Loaded, rec: &InodeRecord) -> Vec<(u64, u64, u64)> {
    match &rec.body {
        Body::Extents(v) => v.iter().map(|e| (e.physical.0, u64::from(e.len), e.logical)).collect(),
        Body::Tree(t) if FileKind::from_mode(rec.mode) == Some(FileKind::Regular) => {
            let mut entries = Vec::new();
            tree::leaf_entries(&mut Source { loaded }, t.root, &mut entries);
            entries
                .into_iter()
                .filter_map(|(k, v)| {
                    let mut r = Reader::new(&v);
                    match (r.u64(), r.u32()) {
                        (Ok(p), Ok(n)) => Some((p, u64::from(n), k)),
                        _ => None,
                    }
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Every extent of regular files as `(first data block, blocks, inode,
/// first file block)`, sorted by data block (snapshot invariant I13).
pub(super) fn data_map(loaded: &Loaded) -> Vec<(u64, u64, InodeNo, u64)> {
    let mut out: Vec<_> = loaded
        .inodes
        .iter()
        .flat_map(|(&ino, rec)| data_extents(loaded, rec).into_iter().map(move |(p, n, k)| (p, n, ino, k)))
        .collect();
    out.sort_unstable();
    out
}

/// The bitmap, the group counts and the segment usage table against what is live.
pub(super) fn check_space(log: &Log, loaded: &Loaded, problems: &mut Vec<Problem>, _stats: &mut CheckStats) {
    let total = log.superblock().data_blocks;
    let words = total.div_ceil(64) as usize;
    let mut want = vec![0u64; words];
    let mut set = |b: u64| want[(b / 64) as usize] |= 1 << (b % 64);
    set(0);
    for rec in loaded.inodes.values() {
        for (first, len, _) in data_extents(loaded, rec) {
            for b in first..first.saturating_add(len).min(total) {
                set(b);
            }
        }
    }
    if !total.is_multiple_of(64) {
        want[words - 1] |= !0u64 << (total % 64);
    }
    let mut marked_free_but_used = 0u64;
    let mut marked_used_but_free = 0u64;
    let mut first_bad = None;
    for (i, &w) in want.iter().enumerate() {
        let have = log.space().bitmap.get(i);
        if have != w {
            marked_free_but_used += u64::from((w & !have).count_ones());
            marked_used_but_free += u64::from((have & !w).count_ones());
            first_bad.get_or_insert(i as u64 * 64 + u64::from((have ^ w).trailing_zeros()));
        }
    }
    if marked_free_but_used > 0 {
        problems.push(problem(
            Invariant::I8,
            "bitmap",
            None,
            first_bad,
            format!("{marked_free_but_used} data blocks in use by files are marked free"),
        ));
    }
    if marked_used_but_free > 0 {
        problems.push(problem(
            Invariant::I8,
            "bitmap",
            None,
            first_bad,
            format!("{marked_used_but_free} data blocks are marked in use but no file maps them"),
        ));
    }
    for g in 0..log.space().groups.len() {
        let start = g as u64 * u64::from(log.superblock().group_blocks);
        let end = (start + u64::from(log.superblock().group_blocks)).min(total);
        let free =
            (start..end).filter(|&b| log.space().bitmap.get((b / 64) as usize) >> (b % 64) & 1 == 0).count() as u32;
        let said = log.space().groups.get(g).free_blocks;
        if said != free {
            problems.push(problem(
                Invariant::I8,
                "group descriptor",
                None,
                None,
                format!("group {g} says {said} free blocks, its bitmap {free}"),
            ));
        }
    }

    // Segment usage: 4096 bytes per live node, the record length per live inode.
    let geometry = log.ifile().geometry();
    let mut live = vec![0u64; geometry.count as usize];
    for i in 1..log.ifile().inodes.len() {
        let e = log.ifile().inodes.get(i);
        if e.in_use()
            && let Some(s) = geometry.segment_of(e.address)
        {
            live[s.0 as usize] += u64::from(e.record_len);
        }
    }
    for id in 1..log.ifile().nodes.len() as u64 {
        if let Some(s) = geometry.segment_of(log.ifile().node_address(NodeId(id))) {
            live[s.0 as usize] += BLOCK_BYTES;
        }
    }
    for (s, &want) in live.iter().enumerate() {
        let have = u64::from(log.ifile().segments.get(s).live_bytes);
        if have != want {
            problems.push(problem(
                Invariant::I7,
                "segment usage",
                None,
                Some(geometry.start(crate::types::SegmentNo(s as u32)).0),
                format!("segment {s} says {have} live bytes, its live inodes and nodes hold {want}"),
            ));
        }
    }
}
