//! Mount time independent of the data device's size: a mount
//! reads no data bitmap block; the allocator reads a group's when it first
//! needs it, roll-forward those of the groups its records touch; fsck still
//! reads all of it. A group whose free count disagrees with its bitmap is
//! refused when read, and fsck names it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::check::Invariant;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_engine::{Error, Volume};

/// 64 groups of 1,024 blocks: 130 bitmap blocks (505 words each).
const DATA_BLOCKS: u64 = 64 * 1024 * 64;
const GROUP: u32 = 64 * 1024;

fn rig() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let (meta, data) = (Arc::new(MemoryDevice::new(1 << 15)), Arc::new(MemoryDevice::new(DATA_BLOCKS)));
    let opts = MkfsOptions { segment_blocks: 256, group_blocks: GROUP, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    (meta, data)
}

fn open(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) -> Volume {
    Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap()
}

fn stat(v: &Volume, name: &str) -> u64 {
    v.stats().into_iter().find(|(k, _)| *k == name).unwrap().1
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}

/// Directories (each bound to its own group) with a file of 40 KiB each.
fn fill(v: &Volume, dirs: usize, tag: &str) {
    for d in 0..dirs {
        let dir = v.mkdir(InodeNo::ROOT, format!("{tag}{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        let f = v.create(dir, b"f", 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &vec![d as u8; 40_960]).unwrap();
    }
}

#[test]
fn a_mount_reads_the_bitmap_of_the_groups_it_allocates_in_only() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    fill(&v, 4, "a");
    v.close().unwrap();

    let v = open(&meta, &data);
    assert_eq!(stat(&v, "bitmap_blocks_loaded"), 0, "a clean mount reads no bitmap block");
    fill(&v, 2, "b");
    v.sync().unwrap();
    let loaded = stat(&v, "bitmap_blocks_loaded");
    assert!(loaded > 0 && loaded <= 8, "two groups' bitmap (and a neighbour's block each): {loaded} of 130");
    // Freeing reads the group of the blocks freed.
    v.unlink(v.lookup(InodeNo::ROOT, b"a1").unwrap().ino, b"f").unwrap();
    v.close().unwrap();
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (meta.clone(), data.clone());
    fsck(&m, &d);

    let v = open(&meta, &data);
    for (name, byte) in [("a0", 0u8), ("a3", 3), ("b0", 0), ("b1", 1)] {
        let f = v.lookup(v.lookup(InodeNo::ROOT, name.as_bytes()).unwrap().ino, b"f").unwrap().ino;
        assert_eq!(v.read(f, 0, 40_960).unwrap(), vec![byte; 40_960], "{name}");
    }
    assert!(matches!(v.lookup(v.lookup(InodeNo::ROOT, b"a1").unwrap().ino, b"f"), Err(Error::NotFound)));
    v.close().unwrap();
}

#[test]
fn roll_forward_reads_the_bitmap_of_the_groups_its_records_touch() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    fill(&v, 3, "a");
    v.close().unwrap();
    let v = open(&meta, &data);
    fill(&v, 2, "c");
    v.commit().unwrap();
    // A power cut now: the commit is in the log, no checkpoint after it.
    let (m, d) = (Arc::new(meta.snapshot()), Arc::new(data.snapshot()));
    drop(v);
    let r = open(&m, &d);
    assert!(r.open_report().recovery.partial_segments > 0, "the crash left log to roll forward");
    let loaded = stat(&r, "bitmap_blocks_loaded");
    assert!(loaded > 0 && loaded <= 8, "roll-forward read {loaded} of 130 bitmap blocks");
    for (name, byte) in [("c0", 0u8), ("c1", 1), ("a2", 2)] {
        let f = r.lookup(r.lookup(InodeNo::ROOT, name.as_bytes()).unwrap().ino, b"f").unwrap().ino;
        assert_eq!(r.read(f, 0, 40_960).unwrap(), vec![byte; 40_960], "{name}");
    }
    r.close().unwrap();
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (m, d);
    fsck(&m, &d);
}

#[test]
fn a_group_count_at_odds_with_its_bitmap_is_refused_when_read_and_named_by_fsck() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    fill(&v, 2, "a");
    v.close().unwrap();
    // Two groups' counts moved in opposite directions: the total the
    // checkpoint recorded still adds up, the groups do not.
    let v = open(&meta, &data);
    v.with_fs(|fs| {
        // (The group table is on disk too until a group is read.)
        for g in [0, 10] {
            fs.log.space_mut().load_group(dualfs_engine::types::GroupNo(g)).unwrap();
        }
        fs.log.space_mut().groups.update(10, |g| g.free_blocks -= 1);
        // Group 0 holds the superblock copy's block: one more free fits.
        fs.log.space_mut().groups.update(0, |g| g.free_blocks += 1);
    });
    v.close().unwrap();
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (meta.clone(), data.clone());
    let r = dualfs_engine::check::check(m, d).unwrap();
    let named: Vec<_> = r.problems.iter().map(|p| (p.invariant, p.to_string())).collect();
    assert!(
        named.iter().any(|(i, m)| *i == Some(Invariant::I8) && m.contains("data group 10 says")),
        "fsck: {named:#?}"
    );
    let v = open(&meta, &data);
    assert!(v.open_report().recounted.is_empty(), "the lazy mount took the volume: it reads no group");
    let e = v.with_fs(|fs| fs.log.space_mut().load_group(dualfs_engine::types::GroupNo(10)));
    assert!(matches!(e, Err(Error::Corrupt { .. })), "{e:?}");
}
