//! The inode map held within a budget (memory bounded by the
//! cache limit, not the number of files): with a budget of a few blocks,
//! a mount counts the whole map in the background and gives its blocks
//! back, a walk over every file reads them again as it goes, changes
//! stay (a block changed since the last checkpoint is never given back),
//! and the volume reads back the same through an open that holds the map
//! whole, fsck clean.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};
use dualfs_engine::{Error, Volume};

/// 8,000 files in 40 directories: about 32 blocks of inode map.
const DIRS: u32 = 40;
const PER_DIR: u32 = 200;
/// Blocks of inode map kept.
const KEEP: u64 = 4;

fn options(budget: Option<usize>) -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        lazy_inode_map_min_blocks: if budget.is_some() { 2 } else { usize::MAX },
        inode_map_bytes: budget,
        ..MountOptions::default()
    }
}

/// The budget, and a small meta-data cache: a block an inode in the cache
/// belongs to is kept (its entry may change without a read), so the cache
/// bounds what is kept past the budget.
fn bounded() -> MountOptions {
    MountOptions { cache_budget: 64, ..options(Some(KEEP as usize * 4096)) }
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(k, _)| *k == name).map(|(_, n)| n).unwrap()
}

/// What a trim leaves at most: the budget, the eighth more it waits for,
/// the blocks of the inodes cached (64: those of a directory or two) and
/// those changed since the last checkpoint.
fn assert_bounded(v: &Volume, when: &str) {
    let loaded = stat(v, "inode_map_blocks_loaded");
    let pinned = stat(v, "inode_map_blocks_pinned");
    let dirty = stat(v, "inode_map_blocks_dirty");
    assert!(pinned <= 3, "{when}: the cache holds inodes of {pinned} blocks");
    assert!(
        // One more: the root's, which a snapshot reads to refuse one
        // taken while a receive is under way.
        loaded <= KEEP.max(pinned + dirty + 1) + KEEP / 8 + 1,
        "{when}: {loaded} inode-map blocks in memory, the budget is {KEEP}, {pinned} pinned, {dirty} dirty"
    );
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}

/// The mode file `i` of directory `d` is given.
fn mode_of(d: u32, i: u32) -> u32 {
    0o400 | ((d * 7 + i) % 0o400)
}

fn populated() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let (meta, data): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) =
        (Arc::new(MemoryDevice::new(1 << 15)), Arc::new(MemoryDevice::new(1 << 15)));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), options(None)).unwrap();
    for d in 0..DIRS {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..PER_DIR {
            let a = v.create(dir, format!("f{i}").as_bytes(), mode_of(d, i), Creds::ROOT).unwrap();
            v.forget(a.ino, 1).unwrap();
        }
        v.forget(dir, 1).unwrap();
    }
    v.close().unwrap();
    (meta, data)
}

/// Looks up and checks every file, forgetting each as the kernel would.
fn walk(v: &Volume, skip: &dyn Fn(u32, u32) -> bool) {
    for d in 0..DIRS {
        let dir = v.lookup(InodeNo::ROOT, format!("d{d}").as_bytes()).unwrap();
        for i in 0..PER_DIR {
            let name = format!("f{i}");
            match v.lookup(dir.ino, name.as_bytes()) {
                Ok(a) => {
                    assert!(!skip(d, i), "d{d}/{name} is back");
                    assert_eq!(a.perm, mode_of(d, i) & 0o7777, "d{d}/{name}");
                    v.forget(a.ino, 1).unwrap();
                }
                Err(Error::NotFound) => assert!(skip(d, i), "d{d}/{name} is lost"),
                Err(e) => panic!("d{d}/{name}: {e}"),
            }
        }
        v.forget(dir.ino, 1).unwrap();
        assert_bounded(v, &format!("after d{d}"));
    }
}

#[test]
fn a_walk_over_every_file_holds_the_inode_map_within_its_budget() {
    let (m, d) = populated();
    let whole = {
        let v = Volume::open(m.clone(), d.clone(), options(None)).unwrap();
        let s = v.statfs();
        assert!(stat(&v, "inode_map_blocks_loaded") > 30, "too small a map to show anything");
        v.close().unwrap();
        s.files - s.ffree
    };
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    // The background load counts every block and keeps none past the budget.
    v.finish_loading().unwrap();
    assert_bounded(&v, "after the load");
    assert!(stat(&v, "inode_map_blocks_on_disk") > 20, "the load kept the map");
    let s = v.statfs();
    assert_eq!(s.files - s.ffree, whole, "the count in use is whole without the map in memory");
    walk(&v, &|_, _| false);
    // Changes all over the map, some committed, none checkpointed: their
    // blocks stay, the clean ones go.
    let unlinked = |d: u32, i: u32| d % 5 == 1 && i == 3;
    for dd in (1..DIRS).step_by(5) {
        let dir = v.lookup(InodeNo::ROOT, format!("d{dd}").as_bytes()).unwrap().ino;
        v.unlink(dir, b"f3").unwrap();
        v.forget(dir, 1).unwrap();
    }
    v.commit().unwrap();
    let dirty = stat(&v, "inode_map_blocks_loaded");
    walk(&v, &unlinked);
    assert!(stat(&v, "inode_map_blocks_loaded") >= dirty.min(KEEP), "blocks changed since the checkpoint went");
    // After a checkpoint they may go too.
    v.checkpoint().unwrap();
    walk(&v, &unlinked);
    // New files take the numbers freed, whose blocks were given back.
    let d0 = v.lookup(InodeNo::ROOT, b"d0").unwrap().ino;
    let mut made = Vec::new();
    for i in 0..8 {
        let a = v.create(d0, format!("new{i}").as_bytes(), 0o600, Creds::ROOT).unwrap();
        made.push(a.ino);
        v.forget(a.ino, 1).unwrap();
    }
    let freed: Vec<InodeNo> = made.iter().copied().filter(|i| i.0 < u64::from(DIRS * (PER_DIR + 1))).collect();
    assert!(!freed.is_empty(), "no freed number was taken again: {made:?}");
    let a = v.lookup(d0, b"f10").unwrap();
    v.setattr(a.ino, &SetAttr { mode: Some(0o640), ..SetAttr::default() }).unwrap();
    v.forget(a.ino, 1).unwrap();
    let s = v.statfs();
    assert_eq!(s.files - s.ffree, whole - u64::from(DIRS / 5) + 8);
    v.close().unwrap();
    fsck(&m, &d);
    // The same through an open that holds the map whole.
    let v = Volume::open(m.clone(), d.clone(), options(None)).unwrap();
    for i in 0..8 {
        assert!(v.lookup(d0, format!("new{i}").as_bytes()).is_ok());
    }
    assert_eq!(v.lookup(d0, b"f10").unwrap().perm, 0o640);
    assert_eq!(v.statfs().files - v.statfs().ffree, whole - u64::from(DIRS / 5) + 8);
    v.close().unwrap();
}

#[test]
fn orphans_and_a_crash_are_right_with_the_map_given_back() {
    let (m, d) = populated();
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    v.finish_loading().unwrap();
    // An open file unlinked (an orphan) in a block given back later.
    let dir = v.lookup(InodeNo::ROOT, b"d2").unwrap().ino;
    let a = v.lookup(dir, b"f5").unwrap();
    v.write(a.ino, 0, &[7u8; 9000]).unwrap();
    v.unlink(dir, b"f5").unwrap();
    v.checkpoint().unwrap();
    walk(&v, &|d, i| d == 2 && i == 5);
    // The orphan's block was given back; FORGET still knows it is one.
    v.forget(a.ino, 1).unwrap();
    assert!(matches!(v.getattr(a.ino), Err(Error::NotFound)), "the orphan outlived its last reference");
    // Changes after the checkpoint, then the power goes.
    let d9 = v.lookup(InodeNo::ROOT, b"d9").unwrap().ino;
    let b = v.lookup(d9, b"f9").unwrap();
    v.setattr(b.ino, &SetAttr { mode: Some(0o611), ..SetAttr::default() }).unwrap();
    v.commit().unwrap();
    drop(v);
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    v.finish_loading().unwrap();
    assert_bounded(&v, "after recovery and the load");
    let d9 = v.lookup(InodeNo::ROOT, b"d9").unwrap().ino;
    assert_eq!(v.lookup(d9, b"f9").unwrap().perm, 0o611);
    v.close().unwrap();
    fsck(&m, &d);
}

/// A snapshot counts the inode blocks the whole map reaches from blocks it
/// reads without taking them in, and so does a mount from a snapshot's
/// image with its map left on disk: the same count as from the map read
/// whole. A clone switch with the outgoing map mostly on disk (blocks
/// compared by address) makes the right tree live, and back.
#[test]
fn snapshots_and_a_clone_switch_read_the_map_without_keeping_it() {
    let (m, d) = populated();
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    v.finish_loading().unwrap();
    v.snapshot_create("s").unwrap();
    assert_bounded(&v, "after the snapshot");
    let counted = v.snapshot_view("s").unwrap().meta_blocks;
    v.clone_create("s", "c").unwrap();
    // Changes in the live tree, then the clone made live.
    let d3 = v.lookup(InodeNo::ROOT, b"d3").unwrap().ino;
    v.unlink(d3, b"f7").unwrap();
    v.forget(d3, 1).unwrap();
    v.close().unwrap();
    let whole = Volume::open(m.clone(), d.clone(), options(None)).unwrap();
    assert_eq!(whole.snapshot_view("s").unwrap().meta_blocks, counted, "counted from the whole map");
    whole.close().unwrap();
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    assert_eq!(v.snapshot_view("s").unwrap().meta_blocks, counted, "counted from an image's map on disk");
    assert!(stat(&v, "inode_map_blocks_on_disk") > 20, "the mount read the map");
    v.switch_tree("c").unwrap();
    v.close().unwrap();
    fsck(&m, &d);
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    assert_eq!(v.live_tree(), "c");
    // The clone is the tree the snapshot kept: f7 is there.
    walk(&v, &|_, _| false);
    v.switch_tree("main").unwrap_or_else(|e| panic!("switching back: {e}"));
    v.close().unwrap();
    fsck(&m, &d);
    let v = Volume::open(m.clone(), d.clone(), bounded()).unwrap();
    assert_eq!(v.live_tree(), "main");
    walk(&v, &|dd, i| dd == 3 && i == 7);
    v.close().unwrap();
}
