//! Scrub of a mirrored meta-data device reads every block from each copy
//! alone: damage on the first copy, on the second, and on different blocks
//! of both is found, counted per copy and rewritten from the good copy
//! until both copies hold the same blocks; a block bad on both is reported
//! with its files and left. Mounted, the same under the volume's locks.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::check::scrub::{Copies, ScrubOptions, ScrubReport, scrub_unmounted_copies};
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::block::{self, BlockKind};
use dualfs_engine::format::ifile::TableId;
use dualfs_engine::format::superblock::Superblock;
use dualfs_engine::meta_log::Log;
use dualfs_engine::meta_log::live::{LiveBlock, LiveKind};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo, MetaBlock};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

type Dev = Arc<dyn BlockDevice>;

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..MountOptions::default() }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn mem(blocks: u64) -> Dev {
    Arc::new(MemoryDevice::new(blocks))
}

/// The files written: (directory, name, length, seed).
fn files() -> Vec<(String, String, usize, u8)> {
    let mut out = Vec::new();
    for k in 0..4 {
        for i in 0..30 {
            out.push((format!("d{k}"), format!("f{i}"), 200 + 700 * i, (k * 30 + i) as u8));
        }
    }
    out
}

/// A mirrored volume with files in four directories, closed, and one more
/// file fsync'd after its last checkpoint: (copy 1, copy 2, data). The
/// process "dies" after the fsync: the log after the checkpoint is left to
/// roll forward.
fn populated() -> (Dev, Dev, Dev) {
    let (a, b, d) = (mem(8192), mem(8192), mem(32768));
    let mkfs =
        MkfsOptions { segment_blocks: 128, group_blocks: 8192, identity_seed: Some(7), ..MkfsOptions::default() };
    Volume::format_mirrored([a.clone(), b.clone()], d.clone(), &mkfs).unwrap();
    let v = open(&[a.clone(), b.clone()], &d);
    for k in 0..4 {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{k}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for (_, name, len, seed) in files().into_iter().filter(|f| f.0 == format!("d{k}")) {
            let f = v.create(dir, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(f, 0, &bytes(len, seed)).unwrap();
        }
    }
    v.close().unwrap();
    let v = open(&[a.clone(), b.clone()], &d);
    let f = v.create(InodeNo::ROOT, b"synced", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(9000, 1)).unwrap();
    v.fsync(f).unwrap();
    std::mem::forget(v);
    assert_eq!(differing(&a, &b), Vec::<u64>::new(), "the copies differ before any damage");
    (a, b, d)
}

fn open(copies: &[Dev], data: &Dev) -> Volume {
    let a = Volume::assemble_meta(copies, data, copies.len() < 2, true).unwrap();
    Volume::open_assembled(a, data.clone(), options()).unwrap()
}

/// Every file reads back as written.
fn assert_files(v: &Volume) {
    for (dir, name, len, seed) in files() {
        let d = v.lookup(InodeNo::ROOT, dir.as_bytes()).unwrap().ino;
        let f = v.lookup(d, name.as_bytes()).unwrap().ino;
        assert_eq!(v.read(f, 0, len + 10).unwrap(), bytes(len, seed), "{dir}/{name}");
    }
    let f = v.lookup(InodeNo::ROOT, b"synced").unwrap().ino;
    assert_eq!(v.read(f, 0, 9010).unwrap(), bytes(9000, 1), "the fsync'd file");
}

/// The blocks that differ between the copies.
fn differing(a: &Dev, b: &Dev) -> Vec<u64> {
    let (mut x, mut y) = (vec![0u8; BLOCK_SIZE], vec![0u8; BLOCK_SIZE]);
    (0..a.block_count())
        .filter(|&i| {
            a.read_blocks(i, &mut x).unwrap();
            b.read_blocks(i, &mut y).unwrap();
            x != y
        })
        .collect()
}

fn live(copy: &Dev, data: &Dev) -> Vec<LiveBlock> {
    let (mut log, _) = Log::open(copy.clone(), data.clone()).unwrap();
    log.live_blocks(true).unwrap()
}

/// Live blocks of several kinds: inode blocks, nodes, IFile blocks.
fn some_live(copy: &Dev, data: &Dev, n: usize, skip: usize) -> Vec<u64> {
    let all = live(copy, data);
    let pick = |f: &dyn Fn(&LiveKind) -> bool| -> Vec<u64> {
        all.iter().filter(|b| f(&b.kind)).skip(skip).take(n).map(|b| b.at.0).collect()
    };
    let mut out = pick(&|k| matches!(k, LiveKind::Inodes(_)));
    out.extend(pick(&|k| matches!(k, LiveKind::Node(_))));
    out.extend(pick(&|k| matches!(k, LiveKind::Table { .. })));
    out.sort_unstable();
    out.dedup();
    out
}

fn zero(d: &Dev, blocks: &[u64]) {
    for &b in blocks {
        d.write_blocks(b, &[0u8; BLOCK_SIZE]).unwrap();
    }
}

fn scrub(a: &Dev, b: &Dev, d: &Dev) -> ScrubReport {
    let asm = Volume::assemble_meta(&[a.clone(), b.clone()], d, true, false).unwrap();
    let copies = Copies { mirror: asm.mirror.clone(), degraded: asm.degraded.clone() };
    scrub_unmounted_copies(asm.meta, d.clone(), copies, ScrubOptions::default(), &mut |_, _| true).unwrap()
}

fn bad_blocks(r: &ScrubReport, copy: u32) -> Vec<u64> {
    let mut v: Vec<u64> = r.bad_meta.iter().filter(|b| b.copies.contains(&copy)).map(|b| b.block).collect();
    v.sort_unstable();
    v
}

/// After a scrub that mended everything: the copies are alike, a second
/// scrub finds nothing, and each copy alone holds every file.
fn assert_healed(a: &Dev, b: &Dev, d: &Dev) {
    assert_eq!(differing(a, b), Vec::<u64>::new(), "the copies still differ after the scrub");
    let again = scrub(a, b, d);
    assert!(again.bad_meta.is_empty(), "{again:#?}");
    for copy in [a, b] {
        let (c, dd) = (snap(copy), snap(d));
        let v = open(&[c], &dd);
        assert_files(&v);
        v.close().unwrap();
    }
}

fn snap(d: &Dev) -> Dev {
    let m = mem(d.block_count());
    let mut buf = vec![0u8; BLOCK_SIZE];
    for i in 0..d.block_count() {
        d.read_blocks(i, &mut buf).unwrap();
        if buf.iter().any(|&x| x != 0) {
            m.write_blocks(i, &buf).unwrap();
        }
    }
    m
}

#[test]
fn damage_on_the_first_copy_is_rewritten_from_the_second() {
    let (a, b, d) = populated();
    let hit = some_live(&a, &d, 3, 0);
    assert!(hit.len() >= 6, "{hit:?}");
    zero(&a, &hit);
    let r = scrub(&a, &b, &d);
    assert_eq!(r.copies, 2, "{r:#?}");
    assert_eq!(bad_blocks(&r, 1), hit, "{r:#?}");
    assert_eq!(r.bad_on_copy(1), (hit.len(), hit.len()));
    assert_eq!(r.bad_on_copy(2), (0, 0));
    assert_eq!((r.corrected(), r.uncorrectable()), (hit.len(), 0), "{r:#?}");
    assert_healed(&a, &b, &d);
}

#[test]
fn damage_on_the_second_copy_is_rewritten_from_the_first() {
    let (a, b, d) = populated();
    let hit = some_live(&a, &d, 3, 1);
    zero(&b, &hit);
    let r = scrub(&a, &b, &d);
    assert_eq!(bad_blocks(&r, 2), hit, "{r:#?}");
    assert_eq!((r.bad_on_copy(1), r.bad_on_copy(2)), ((0, 0), (hit.len(), hit.len())), "{r:#?}");
    assert_eq!(r.uncorrectable(), 0);
    assert_healed(&a, &b, &d);
}

#[test]
fn different_blocks_on_both_copies_each_mend_the_other() {
    let (a, b, d) = populated();
    let on_a = some_live(&a, &d, 2, 0);
    let on_b = some_live(&a, &d, 2, 3);
    assert!(on_a.iter().all(|x| !on_b.contains(x)));
    zero(&a, &on_a);
    zero(&b, &on_b);
    // The log after the checkpoint too: a checkpoint slot on the first
    // copy, the fsync'd partial segment's first block on the second.
    let slot = (1..=2).find(|&s| differing(&a, &mem(a.block_count())).contains(&s)).unwrap();
    zero(&a, &[slot]);
    let r = scrub(&a, &b, &d);
    let mut want_a = on_a.clone();
    want_a.insert(0, slot);
    assert_eq!(bad_blocks(&r, 1), want_a, "{r:#?}");
    assert_eq!(bad_blocks(&r, 2), on_b, "{r:#?}");
    assert_eq!((r.corrected(), r.uncorrectable()), (want_a.len() + on_b.len(), 0), "{r:#?}");
    assert_healed(&a, &b, &d);
}

/// The first block of the newest partial segment the log holds (the
/// original, not its twin): the fsync's, after the last checkpoint.
fn newest_descriptor(copy: &Dev) -> u64 {
    let mut raw = vec![0u8; BLOCK_SIZE];
    copy.read_blocks(0, &mut raw).unwrap();
    let vid = Superblock::decode(&raw).unwrap().volume_id();
    let mut newest: Option<(u64, u64)> = None;
    for at in 3..copy.block_count() {
        copy.read_blocks(at, &mut raw).unwrap();
        let Ok((h, _)) = block::open_block(&raw, MetaBlock(at), vid) else { continue };
        if h.kind == BlockKind::Descriptor && h.aux == 0 && newest.is_none_or(|(seq, _)| h.seq.0 > seq) {
            newest = Some((h.seq.0, at));
        }
    }
    newest.unwrap().1
}

#[test]
fn the_log_after_the_checkpoint_is_walked_and_mended_on_each_copy() {
    let (a, b, d) = populated();
    // The fsync's partial segment: its descriptor and the block after it
    // (its copy of the file's data) on the second copy. The walk stops at
    // the first, then, once it is mended, at the second.
    let at = newest_descriptor(&a);
    zero(&b, &[at, at + 1]);
    let r = scrub(&a, &b, &d);
    assert_eq!(bad_blocks(&r, 2), vec![at, at + 1], "{r:#?}");
    assert!(r.bad_meta.iter().all(|x| x.repaired), "{r:#?}");
    assert_eq!((r.bad_on_copy(1), r.uncorrectable()), ((0, 0), 0), "{r:#?}");
    assert_healed(&a, &b, &d);
}

#[test]
fn a_block_bad_on_both_copies_is_reported_with_its_files_and_left() {
    let (a, b, d) = populated();
    let both = live(&a, &d)
        .into_iter()
        .find(|b| matches!(&b.kind, LiveKind::Inodes(v) if v.len() > 3 && !v.contains(&InodeNo::ROOT)))
        .unwrap();
    let LiveKind::Inodes(inos) = &both.kind else { unreachable!() };
    let other = some_live(&a, &d, 1, 2).into_iter().find(|x| *x != both.at.0).unwrap();
    zero(&a, &[both.at.0]);
    zero(&b, &[both.at.0, other]);
    let r = scrub(&a, &b, &d);
    // (Its partial segment may follow the checkpoint: the walk of the log
    // reports it too, without files.)
    let bad = r
        .bad_meta
        .iter()
        .find(|x| x.block == both.at.0 && x.structure == "inode block")
        .unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!((bad.copies.as_slice(), bad.repaired), (&[1, 2][..], false), "{bad:#?}");
    for i in inos {
        let k = bad.inodes.iter().position(|x| x == i).unwrap_or_else(|| panic!("inode {i} not named: {bad:#?}"));
        let path = bad.paths[k].as_deref().unwrap_or_else(|| panic!("no path for inode {i}: {bad:#?}"));
        assert!(path.starts_with("/d"), "{path}");
    }
    assert_eq!(r.corrected(), 1, "{r:#?}");
    assert!(r.bad_meta.iter().filter(|x| !x.repaired).all(|x| x.block == both.at.0), "{r:#?}");
    assert_eq!(differing(&a, &b), Vec::<u64>::new(), "the block bad on one copy was mended, the other is alike");
}

#[test]
fn a_mounted_volume_scrubs_both_copies_and_mends_the_second() {
    let (a, b, d) = populated();
    let v = open(&[a.clone(), b.clone()], &d);
    assert_files(&v);
    // The second copy goes bad under the mount: reads never look at it.
    // (The blocks the mount's maps name: the open after the crash moved
    // some.)
    v.commit().unwrap();
    let live = v.with_fs(|fs| fs.log.live_blocks(true)).unwrap();
    let hit: Vec<u64> = live
        .iter()
        .filter(|b| matches!(b.kind, LiveKind::Inodes(_) | LiveKind::Node(_)))
        .skip(2)
        .step_by(3)
        .take(6)
        .map(|b| b.at.0)
        .collect();
    zero(&b, &hit);
    let r = v.scrub(ScrubOptions { meta_only: true, ..ScrubOptions::default() }, &mut |_, _| true).unwrap();
    assert_eq!((r.copies, r.degraded.as_deref()), (2, None), "{r:#?}");
    assert_eq!(bad_blocks(&r, 2), hit, "{r:#?}");
    assert_eq!((r.corrected(), r.uncorrectable()), (hit.len(), 0), "{r:#?}");
    assert_eq!(differing(&a, &b), Vec::<u64>::new());
    v.close().unwrap();
    assert_healed(&a, &b, &d);
}

#[test]
fn a_degraded_volume_scrubs_the_copy_in_use_and_says_so() {
    let (a, _b, d) = populated();
    let v = open(std::slice::from_ref(&a), &d);
    let r = v.scrub(ScrubOptions { meta_only: true, ..ScrubOptions::default() }, &mut |_, _| true).unwrap();
    assert_eq!(r.copies, 1, "{r:#?}");
    assert!(r.degraded.as_deref().is_some_and(|w| w.contains("missing")), "{r:#?}");
    assert!(r.bad_meta.is_empty(), "{r:#?}");
    v.close().unwrap();
}

#[test]
fn blocks_the_listing_heals_on_the_first_copy_are_reported_repaired_there() {
    let (a, b, d) = populated();
    // Recovered and closed: the maps stay where they are while nothing
    // changes.
    open(&[a.clone(), b.clone()], &d).close().unwrap();
    // Mounted leaving the inode map and the IFile index on disk, as a
    // mount of a large volume does: the scrub's listing reads them in
    // through the mirror, whose reads heal what fails on the first copy.
    let asm = Volume::assemble_meta(&[a.clone(), b.clone()], &d, false, true).unwrap();
    let lazy = MountOptions { lazy_inode_map_min_blocks: 1, ..options() };
    let v = Volume::open_assembled(asm, d.clone(), lazy).unwrap();
    let hit: Vec<u64> = live(&b, &d)
        .iter()
        .filter(|x| matches!(x.kind, LiveKind::Table { table: TableId::InodeMap, .. } | LiveKind::Index { .. }))
        .map(|x| x.at.0)
        .collect();
    assert!(hit.len() >= 2, "{hit:?}");
    zero(&a, &hit);
    let healed = |v: &Volume| v.stats().into_iter().find(|(k, _)| *k == "mirror_blocks_healed").unwrap().1;
    let before = healed(&v);
    let r = v.scrub(ScrubOptions { meta_only: true, ..ScrubOptions::default() }, &mut |_, _| true).unwrap();
    // Some were met by the listing (the rest by the scrub's own reads):
    // every one is in the report, repaired on copy 1.
    assert!(healed(&v) > before, "the listing read none of {hit:?}: {r:#?}");
    assert_eq!(bad_blocks(&r, 1), hit, "{r:#?}");
    assert_eq!((r.bad_on_copy(1), r.bad_on_copy(2)), ((hit.len(), hit.len()), (0, 0)), "{r:#?}");
    assert_eq!((r.corrected(), r.uncorrectable()), (hit.len(), 0), "{r:#?}");
    assert_eq!(differing(&a, &b), Vec::<u64>::new());
    v.close().unwrap();
    assert_healed(&a, &b, &d);
}
