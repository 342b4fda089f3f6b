//! A mount leaves a large inode map on disk and reads it while it serves
//! (mount time independent of the number of files). Operations
//! before the map is whole read the blocks they need, statfs waits for the
//! whole count, roll-forward reads the blocks it replays into, and the
//! orphans a crash left are finished once the map is in. Every volume is
//! checked by fsck and compared with an open that reads the map whole.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, RenameFlags, SetAttr};
use dualfs_engine::{Error, Volume};

/// Files made: 3,000 in 30 directories, about 13 blocks of inode map.
const DIRS: u32 = 30;
const PER_DIR: u32 = 100;

fn options(lazy_from: usize) -> MountOptions {
    // Every block read stays (tests/bounded_inode_map.rs gives them back).
    MountOptions {
        commit_interval: Duration::ZERO,
        lazy_inode_map_min_blocks: lazy_from,
        inode_map_bytes: None,
        ..MountOptions::default()
    }
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(k, _)| *k == name).map(|(_, n)| n).unwrap()
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}

/// A volume with the files made and checkpointed.
fn populated() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let (meta, data) = (Arc::new(MemoryDevice::new(1 << 15)), Arc::new(MemoryDevice::new(1 << 15)));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), options(usize::MAX)).unwrap();
    for d in 0..DIRS {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..PER_DIR {
            let a = v.create(dir, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
            v.forget(a.ino, 1).unwrap();
        }
        v.forget(dir, 1).unwrap();
    }
    v.close().unwrap();
    (meta, data)
}

fn dyn_pair(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (meta.clone(), data.clone())
}

fn lookup_path(v: &Volume, dir: &str, name: &str) -> Result<dualfs_engine::volume::Attr, Error> {
    let d = v.lookup(InodeNo::ROOT, dir.as_bytes())?;
    v.lookup(d.ino, name.as_bytes())
}

#[test]
fn operations_read_the_blocks_they_need_and_statfs_waits_for_the_whole_count() {
    let (meta, data) = populated();
    let (m, d) = dyn_pair(&meta, &data);
    let whole_count = {
        let v = Volume::open(m.clone(), d.clone(), options(usize::MAX)).unwrap();
        assert_eq!(stat(&v, "inode_map_blocks_on_disk"), 0, "an open below the threshold reads the whole map");
        let s = v.statfs();
        v.close().unwrap();
        s.files - s.ffree
    };
    let v = Volume::open(m.clone(), d.clone(), options(2)).unwrap();
    let on_disk = stat(&v, "inode_map_blocks_on_disk");
    assert!(on_disk >= 10, "only {on_disk} inode-map blocks were left on disk");
    // Files in the middle of the map, changed before it is whole.
    let a = lookup_path(&v, "d15", "f50").unwrap();
    assert_eq!(a.perm, 0o644);
    v.setattr(a.ino, &SetAttr { mode: Some(0o600), ..SetAttr::default() }).unwrap();
    let d3 = v.lookup(InodeNo::ROOT, b"d3").unwrap().ino;
    let d27 = v.lookup(InodeNo::ROOT, b"d27").unwrap().ino;
    v.rename(d3, b"f7", d27, b"moved", RenameFlags::default()).unwrap();
    v.unlink(d27, b"f99").unwrap();
    let made = v.create(d3, b"new", 0o640, Creds::ROOT).unwrap();
    assert!(stat(&v, "inode_map_blocks_on_disk") < on_disk, "nothing was read on demand");
    assert!(stat(&v, "inode_map_blocks_on_disk") > 0, "the whole map was read by a few operations");
    // statfs counts every inode: it reads what is left.
    let s = v.statfs();
    assert_eq!(stat(&v, "inode_map_blocks_on_disk"), 0);
    assert_eq!(s.files - s.ffree, whole_count, "one unlinked and one made: the same count");
    v.forget(made.ino, 1).unwrap();
    v.close().unwrap();
    fsck(&m, &d);
    // Everything reads back the same through an open that reads the map whole.
    let v = Volume::open(m.clone(), d.clone(), options(usize::MAX)).unwrap();
    assert_eq!(lookup_path(&v, "d15", "f50").unwrap().perm, 0o600);
    assert!(lookup_path(&v, "d27", "moved").is_ok());
    assert!(matches!(lookup_path(&v, "d3", "f7"), Err(Error::NotFound)));
    assert!(matches!(lookup_path(&v, "d27", "f99"), Err(Error::NotFound)));
    assert!(lookup_path(&v, "d3", "new").is_ok());
    v.close().unwrap();
}

#[test]
fn roll_forward_reads_the_blocks_it_replays_into() {
    let (meta, data) = populated();
    let (m, d) = dyn_pair(&meta, &data);
    let v = Volume::open(m.clone(), d.clone(), options(2)).unwrap();
    // Changes all over the map, committed but not checkpointed.
    for dir in (0..DIRS).step_by(3) {
        let a = lookup_path(&v, &format!("d{dir}"), "f10").unwrap();
        v.setattr(a.ino, &SetAttr { mode: Some(0o611), ..SetAttr::default() }).unwrap();
    }
    let d29 = v.lookup(InodeNo::ROOT, b"d29").unwrap().ino;
    v.unlink(d29, b"f0").unwrap();
    v.commit().unwrap();
    // The power goes: nothing after the last commit.
    let (m2, d2): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (Arc::new(meta.snapshot()), Arc::new(data.snapshot()));
    drop(v);
    let v = Volume::open(m2.clone(), d2.clone(), options(2)).unwrap();
    assert!(v.open_report().recovery.partial_segments > 0, "nothing was rolled forward");
    for dir in (0..DIRS).step_by(3) {
        assert_eq!(lookup_path(&v, &format!("d{dir}"), "f10").unwrap().perm, 0o611, "d{dir}/f10");
    }
    assert!(matches!(lookup_path(&v, "d29", "f0"), Err(Error::NotFound)));
    v.finish_loading().unwrap();
    v.close().unwrap();
    fsck(&m2, &d2);
}

#[test]
fn orphans_a_crash_left_are_finished_once_the_map_is_in() {
    let (meta, data) = populated();
    let (m, d) = dyn_pair(&meta, &data);
    let v = Volume::open(m.clone(), d.clone(), options(2)).unwrap();
    // An open file unlinked (an orphan), then the power goes.
    let dir = v.lookup(InodeNo::ROOT, b"d20").unwrap().ino;
    let a = v.lookup(dir, b"f5").unwrap();
    v.remember(a.ino, 1);
    v.write(a.ino, 0, &[7u8; 9000]).unwrap();
    v.unlink(dir, b"f5").unwrap();
    v.sync().unwrap();
    let (m2, d2): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (Arc::new(meta.snapshot()), Arc::new(data.snapshot()));
    drop(v);
    let v = Volume::open(m2.clone(), d2.clone(), options(2)).unwrap();
    let free_before = v.statfs().bfree;
    // statfs read the map whole and so finished the orphan: its blocks are free.
    assert!(matches!(v.getattr(a.ino), Err(Error::NotFound)), "the orphan outlived the load");
    v.finish_loading().unwrap();
    v.close().unwrap();
    fsck(&m2, &d2);
    let v = Volume::open(m2.clone(), d2.clone(), options(usize::MAX)).unwrap();
    assert_eq!(v.statfs().bfree, free_before, "the orphan's blocks were freed once");
    v.close().unwrap();
}
