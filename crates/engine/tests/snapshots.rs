//! Snapshots: what one shows never changes while the live volume does,
//! its blocks are neither overwritten nor handed out again, the cleaner
//! leaves what it keeps, and deleting it gives the space back.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{Rig, clock, options};
use dualfs_engine::Volume;
use dualfs_engine::check::{Invariant, check};
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::error::Error;
use dualfs_engine::format::block::{self, BlockKind};
use dualfs_engine::format::descriptor::Change;
use dualfs_engine::format::ifile::{IndexBlock, TableId};
use dualfs_engine::format::inode::Extent;
use dualfs_engine::types::{DataBlock, InodeNo, SegmentNo};
use dualfs_engine::volume::{CleanRequest, Creds, MkfsOptions, MountOptions, Policy, RenameFlags};

fn snap(rig: &Rig, name: &str) -> Volume {
    Volume::open_snapshot(rig.meta.clone(), rig.data.clone(), name, options()).unwrap()
}

#[test]
fn a_snapshot_keeps_the_files_as_they_were() {
    let rig = Rig::new();
    let vol = rig.open();
    let before = rig.read_all(&vol, "data");
    let id = vol.snapshot_create("one").unwrap();
    assert_eq!(vol.snapshot_view("one").map(|v| v.id), Some(id));
    // Overwrite in place, append, remove and create while it exists.
    let f = rig.lookup(&vol, "data");
    vol.write(f, 100, &[9u8; 20_000]).unwrap();
    vol.write(f, 40_000, &[1u8; 8192]).unwrap();
    let d = rig.lookup(&vol, "d/sub");
    vol.unlink(d, b"inner").unwrap();
    vol.create(InodeNo::ROOT, b"new", 0o644, Creds::ROOT).unwrap();
    vol.sync().unwrap();
    {
        let s = snap(&rig, "one");
        assert_eq!(rig.read_all(&s, "data"), before);
        assert_eq!(rig.read_all(&s, "d/sub/inner"), b"inner contents");
        assert!(matches!(s.lookup(InodeNo::ROOT, b"new"), Err(Error::NotFound)));
        assert!(s.create(InodeNo::ROOT, b"x", 0o644, Creds::ROOT).is_err(), "a snapshot is read-only");
    }
    let now = rig.read_all(&vol, "data");
    assert_eq!(&now[100..20_100], &[9u8; 20_000][..]);
    vol.close().unwrap();
    rig.assert_fsck_clean();
    // And after a remount, the snapshot is still there and unchanged.
    let vol = rig.open();
    assert_eq!(vol.snapshot_list().len(), 1);
    let s = snap(&rig, "one");
    assert_eq!(rig.read_all(&s, "data"), before);
    drop(s);
    vol.close().unwrap();
}

#[test]
fn names_are_checked_and_unique() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("a").unwrap();
    assert!(matches!(vol.snapshot_create("a"), Err(Error::SnapshotRefused(_))));
    assert!(matches!(vol.snapshot_create("a/b"), Err(Error::SnapshotRefused(_))));
    assert!(matches!(vol.snapshot_delete("nope"), Err(Error::NoSnapshot(_))));
    assert!(matches!(
        Volume::open_snapshot(rig.meta.clone(), rig.data.clone(), "nope", options()),
        Err(Error::NoSnapshot(_))
    ));
    vol.close().unwrap();
}

/// Found by the model-based test: deleting the last snapshot with nothing
/// else changed since the last checkpoint (right after a mount) wrote a
/// checkpoint with no partial segment, which repeated the old list.
#[test]
fn deleting_the_last_snapshot_right_after_a_mount_forgets_it() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("only").unwrap();
    vol.close().unwrap();
    let vol = rig.open();
    vol.snapshot_delete("only").unwrap();
    assert!(vol.snapshot_list().is_empty());
    vol.snapshot_create("only").unwrap();
    vol.snapshot_delete("only").unwrap();
    vol.close().unwrap();
    let vol = rig.open();
    assert!(vol.snapshot_list().is_empty(), "the deletion is on disk");
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn overwrites_of_held_blocks_move_and_later_ones_stay_in_place() {
    let rig = Rig::new();
    let vol = rig.open();
    let f = rig.lookup(&vol, "data");
    let placed = |vol: &Volume| {
        vol.with_fs(|fs| fs.extents_around(f, 0, 100).unwrap())
            .iter()
            .map(|e| (e.logical, e.physical.0))
            .collect::<Vec<_>>()
    };
    let first = placed(&vol);
    vol.write(f, 0, &[3u8; 4096]).unwrap();
    vol.sync().unwrap();
    assert_eq!(placed(&vol), first, "no snapshot: overwrites stay in place");
    vol.snapshot_create("s").unwrap();
    vol.write(f, 0, &[4u8; 4096]).unwrap();
    vol.sync().unwrap();
    let moved = placed(&vol);
    assert_ne!(moved, first, "the held block went to a new one");
    vol.write(f, 0, &[5u8; 4096]).unwrap();
    vol.sync().unwrap();
    assert_eq!(placed(&vol), moved, "a block born after the snapshot is overwritten in place");
    let s = snap(&rig, "s");
    assert_eq!(&rig.read_all(&s, "data")[..4096], &[3u8; 4096][..]);
    drop(s);
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn deleting_snapshots_gives_the_space_back() {
    let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(16384)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let rig = Rig { meta, data };
    let vol = Volume::open_with_clock(rig.meta.clone(), rig.data.clone(), options(), clock()).unwrap();
    let f = vol.create(InodeNo::ROOT, b"big", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, &vec![1u8; 4 << 20]).unwrap();
    vol.sync().unwrap();
    let free_before = vol.statfs().bfree;
    vol.snapshot_create("a").unwrap();
    vol.write(f, 0, &vec![2u8; 2 << 20]).unwrap();
    vol.snapshot_create("b").unwrap();
    vol.write(f, 0, &vec![3u8; 4 << 20]).unwrap();
    vol.sync().unwrap();
    let list = vol.snapshot_list();
    assert_eq!(list.len(), 2);
    // a alone holds the second half of the first data; b alone the first
    // half of the second; each shares nothing with the live file now.
    assert_eq!(list[0].data_only_bytes, 2 << 20, "{list:?}");
    assert_eq!(list[1].data_only_bytes, 2 << 20, "{list:?}");
    assert_eq!(list[0].data_shared_bytes, 2 << 20, "{list:?}");
    assert!(vol.statfs().bfree < free_before - 1000);
    // The blocks the snapshots hold are never handed out again.
    let g = vol.create(InodeNo::ROOT, b"more", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(g, 0, &vec![8u8; 1 << 20]).unwrap();
    vol.sync().unwrap();
    vol.unlink(InodeNo::ROOT, b"more").unwrap();
    // Created through the volume, it counts as looked up until forgotten.
    vol.forget(g, 1).unwrap();
    vol.sync().unwrap();
    {
        let s = snap(&rig, "a");
        assert!(rig.read_all(&s, "big").iter().all(|&b| b == 1));
        let s = snap(&rig, "b");
        let b = rig.read_all(&s, "big");
        assert!(b[..2 << 20].iter().all(|&x| x == 2) && b[2 << 20..].iter().all(|&x| x == 1));
    }
    vol.snapshot_delete("a").unwrap();
    vol.snapshot_delete("b").unwrap();
    vol.sync().unwrap();
    assert_eq!(vol.statfs().bfree, free_before, "df is back to where it was");
    assert!(vol.snapshot_list().is_empty());
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn the_cleaner_leaves_what_a_snapshot_keeps_and_still_frees_segments() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("keep").unwrap();
    // Churn meta-data: every directory entry rewritten several times.
    let d = rig.lookup(&vol, "d");
    for round in 0..60 {
        for i in 0..120 {
            let from = format!("a-rather-long-file-name-{i:04}");
            let to = format!("renamed-{round}-{i:04}");
            let from = if round == 0 { from } else { format!("renamed-{}-{i:04}", round - 1) };
            vol.rename(d, from.as_bytes(), d, to.as_bytes(), RenameFlags::default()).unwrap();
        }
        vol.sync().unwrap();
    }
    let pinned: Vec<SegmentNo> =
        vol.with_fs(|fs| (0..64).map(SegmentNo).filter(|&s| fs.log.pinned_by_snapshot(s)).collect());
    assert!(!pinned.is_empty());
    // What the churn left behind was freed (segments written after the
    // snapshot hold nothing it keeps), while the pinned ones, nearly empty
    // for the live volume, are never victims nor free.
    let (victims, free) = vol.with_fs(|fs| (fs.log.pick_victims(Policy::Greedy, 64, 0.99), fs.log.free_segments()));
    assert!(victims.iter().all(|v| !pinned.contains(v)), "{victims:?} {pinned:?}");
    assert!(free > 40, "{free}");
    let req = CleanRequest { policy: Policy::Greedy, max_utilization: 0.99, free_now: true, ..CleanRequest::default() };
    vol.clean(req, &mut |_, _| {}).unwrap();
    vol.sync().unwrap();
    assert!(vol.with_fs(|fs| pinned.iter().all(|&s| !fs.log.segment_is_free(s))));
    let s = snap(&rig, "keep");
    let sd = rig.lookup(&s, "d");
    assert!(s.lookup(sd, b"a-rather-long-file-name-0042").is_ok());
    assert!(s.lookup(sd, b"renamed-59-0042").is_err());
    drop(s);
    // Deleted, the snapshot lets go: its segments are cleaned and freed.
    vol.snapshot_delete("keep").unwrap();
    let report = vol.clean(req, &mut |_, _| {}).unwrap();
    assert!(report.cleaner.segments_freed > 0, "{report:?}");
    assert!(vol.with_fs(|fs| pinned.iter().any(|&s| fs.log.segment_is_free(s))));
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn fsck_checks_every_snapshot() {
    let rig = Rig::new();
    let vol = rig.open();
    vol.snapshot_create("s1").unwrap();
    vol.close().unwrap();
    let r = check(rig.meta.clone(), rig.data.clone()).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

/// A rig with snapshot `s` of the file `data`, which the live volume then
/// rewrote whole (to new blocks): `data`'s old first block is held by the
/// snapshot alone. Returns that block.
fn rig_with_moved_snapshot() -> (Rig, u64) {
    let rig = Rig::new();
    let vol = rig.open();
    let f = rig.lookup(&vol, "data");
    let old = vol.with_fs(|fs| fs.extents_around(f, 0, 1).unwrap())[0].physical.0;
    vol.snapshot_create("s").unwrap();
    vol.write(f, 0, &[5u8; 40_000]).unwrap();
    vol.sync().unwrap();
    assert_ne!(vol.with_fs(|fs| fs.extents_around(f, 0, 1).unwrap())[0].physical.0, old);
    vol.close().unwrap();
    rig.assert_fsck_clean();
    (rig, old)
}

#[test]
fn fsck_names_a_damaged_snapshot_image_i12() {
    let (rig, old) = rig_with_moved_snapshot();
    // The snapshot's own bitmap loses the block its file maps.
    let vol = rig.open();
    let index = vol.with_fs(|fs| fs.log.snapshots()[0].checkpoint.index.clone());
    vol.close().unwrap();
    let r = index.iter().find(|r| r.table == TableId::Bitmap && r.first == 0).unwrap();
    let raw = rig.read(r.address.0);
    let (_, payload) = block::open_block_of_kind(&raw, r.address, rig.volume_id(), BlockKind::IFileIndex).unwrap();
    let at = IndexBlock::decode(payload).unwrap().addresses[0];
    rig.reseal(at, |p| p[(old / 8) as usize] &= !(1 << (old % 8)));
    rig.assert_names(Invariant::I12);
    // The live volume still mounts, the snapshot does not.
    rig.open().close().unwrap();
    assert!(Volume::open_snapshot(rig.meta.clone(), rig.data.clone(), "s", options()).is_err());
}

#[test]
fn fsck_names_a_held_block_given_to_another_file_i13() {
    let (rig, old) = rig_with_moved_snapshot();
    rig.corrupt(|vol| {
        let x = vol.create(InodeNo::ROOT, b"x", 0o644, Creds::ROOT).unwrap().ino;
        vol.with_fs(|fs| {
            fs.log.space_mut().mark_used(DataBlock(old), 1).unwrap();
            fs.log.record(Change::DataAlloc { start: DataBlock(old), len: 1 });
            fs.add_extent(x, Extent { logical: 0, physical: DataBlock(old), len: 1, unwritten: false }).unwrap();
            let mut rec = fs.log.inode_mut(x).unwrap();
            rec.blocks = 1;
            rec.size = 4096;
        });
    });
    rig.assert_names(Invariant::I13);
}

/// A memory device that notes how many runs each list of scattered runs
/// handed to it held.
#[derive(Debug)]
struct RunLists {
    inner: MemoryDevice,
    lists: Mutex<Vec<usize>>,
}

impl BlockDevice for RunLists {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_blocks(first, buf)
    }
    fn write_runs(&self, runs: &[(u64, &[&[u8]])]) -> Result<(), (u64, std::io::Error)> {
        self.lists.lock().unwrap().push(runs.len());
        self.inner.write_runs(runs)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Once a snapshot is deleted no block is held, and a file's changed
/// block is written where it lies: the next snapshot's commit finds its
/// data scattered, a run per file, and hands the data device every run in
/// one list, which a device able to keep several requests in flight
/// writes at once (DESIGN.md, "A clone made while its origin is busy").
/// While a snapshot is kept, the same changes go to new blocks side by
/// side.
#[test]
fn a_snapshot_after_a_deletion_hands_its_scattered_runs_over_at_once() {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
    let data = Arc::new(RunLists { inner: MemoryDevice::new(65536), lists: Mutex::default() });
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 1024, ..MkfsOptions::default() };
    let data_dev: Arc<dyn BlockDevice> = data.clone();
    Volume::format(meta.clone(), data_dev.clone(), &opts).unwrap();
    let vol = Volume::open(meta, data_dev, MountOptions::default()).unwrap();
    let files: Vec<InodeNo> = (0..64u32)
        .map(|i| {
            let f = vol.create(InodeNo::ROOT, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
            vol.write(f.ino, 0, &[i as u8; 3 * 4096]).unwrap();
            f.ino
        })
        .collect();
    vol.sync().unwrap();
    let first_block = |ino: InodeNo| vol.with_fs(|fs| fs.next_extent(ino, 0)).unwrap().unwrap().physical;
    let rewrite = |round: u8| {
        for &f in files.iter().step_by(2) {
            vol.write(f, 0, &[round; 4096]).unwrap();
        }
    };
    let runs_of_next_snapshot = |name: &str| {
        data.lists.lock().unwrap().clear();
        vol.snapshot_create(name).unwrap();
        data.lists.lock().unwrap().iter().copied().max().unwrap_or(0)
    };
    vol.snapshot_create("old").unwrap();
    vol.snapshot_delete("old").unwrap();
    let before: Vec<DataBlock> = files.iter().map(|&f| first_block(f)).collect();
    rewrite(200);
    assert_eq!(runs_of_next_snapshot("new"), 32, "one run a rewritten file, in one list");
    let after: Vec<DataBlock> = files.iter().map(|&f| first_block(f)).collect();
    assert_eq!(before, after, "written in place");
    // "new" is kept: the same changes go to new blocks, together.
    rewrite(201);
    assert!(runs_of_next_snapshot("newer") <= 2);
    assert!(files.iter().step_by(2).zip(before.iter().step_by(2)).all(|(&f, &b)| first_block(f) != b));
    vol.close().unwrap();
}
