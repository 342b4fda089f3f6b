//! Discard on a volume: a trim gives back the free space of both devices
//! (the memory device reads discarded blocks as zeros) and nothing a file
//! or a snapshot holds; `-o discard` discards frees once durable.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Rig, options};
use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MountOptions, TrimRange};

fn stat(vol: &Volume, name: &str) -> u64 {
    vol.stats().iter().find(|(k, _)| *k == name).map(|(_, v)| *v).unwrap()
}

/// Blocks of the device that hold anything (discarded ones hold nothing).
fn held(dev: &dyn BlockDevice) -> u64 {
    let mut buf = vec![0u8; BLOCK_SIZE];
    (0..dev.block_count())
        .filter(|&b| {
            dev.read_blocks(b, &mut buf).unwrap();
            buf.iter().any(|&x| x != 0)
        })
        .count() as u64
}

#[test]
fn a_trim_discards_free_space_and_keeps_what_files_and_snapshots_hold() {
    let rig = Rig::new();
    let vol = rig.open();
    let big = vol.create(InodeNo::ROOT, b"big", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(big, 0, &vec![5u8; 4 << 20]).unwrap();
    let gone = vol.create(InodeNo::ROOT, b"gone", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(gone, 0, &vec![6u8; 2 << 20]).unwrap();
    vol.sync().unwrap();
    // Whole free runs, nothing yet discarded: every unused block was never
    // written (it reads as zeros already), so count what a trim takes.
    vol.snapshot_create("keep").unwrap();
    vol.unlink(InodeNo::ROOT, b"big").unwrap();
    vol.unlink(InodeNo::ROOT, b"gone").unwrap();
    vol.forget(big, 1).unwrap();
    vol.forget(gone, 1).unwrap();
    let r = vol.trim(TrimRange::ALL).unwrap();
    assert!(r.data_bytes > 0 && r.meta_bytes > 0, "{r:?}");
    // What the snapshot holds was not discarded.
    let data_before = held(rig.data.as_ref());
    assert!(data_before >= 6 << 20 >> 12, "the snapshot's 6 MiB are still there ({data_before} blocks)");
    {
        let s = Volume::open_snapshot(rig.meta.clone(), rig.data.clone(), "keep", options()).unwrap();
        assert_eq!(rig.read_all(&s, "big"), vec![5u8; 4 << 20]);
        assert_eq!(rig.read_all(&s, "gone"), vec![6u8; 2 << 20]);
    }
    assert_eq!(rig.read_all(&vol, "data"), vec![7u8; 40_000], "a live file keeps its bytes");
    // Nothing freed since: a second trim finds no data to discard.
    assert_eq!(vol.trim(TrimRange::ALL).unwrap().data_bytes, 0);
    // Deleting the snapshot frees its blocks; the next trim discards them.
    vol.snapshot_delete("keep").unwrap();
    let r = vol.trim(TrimRange::ALL).unwrap();
    assert!(r.data_bytes >= 6 << 20, "{r:?}");
    assert!(held(rig.data.as_ref()) + (6 << 20 >> 12) <= data_before, "the snapshot's blocks were discarded");
    assert_eq!(rig.read_all(&vol, "data"), vec![7u8; 40_000]);
    assert!(stat(&vol, "discarded_data_blocks") >= 6 << 20 >> 12);
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn a_trim_takes_the_range_asked_for() {
    let rig = Rig::new();
    let vol = rig.open();
    let data_bytes = rig.data.block_count() * BLOCK_SIZE as u64;
    // The data device only, runs of at least 1 MiB.
    let r = vol.trim(TrimRange { start: 0, len: data_bytes, min_len: 1 << 20 }).unwrap();
    assert!(r.data_bytes > 0 && r.meta_bytes == 0, "{r:?}");
    // The meta-data device only.
    let r = vol.trim(TrimRange { start: data_bytes, len: u64::MAX, min_len: 0 }).unwrap();
    assert!(r.data_bytes == 0 && r.meta_bytes > 0, "{r:?}");
    assert!(vol.trim(TrimRange { start: u64::MAX - 10, len: 4096, min_len: 0 }).is_err(), "past the end");
    assert!(vol.trim(TrimRange { start: 0, len: 100, min_len: 0 }).is_err(), "shorter than a block");
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

#[test]
fn with_discard_on_frees_are_discarded_once_durable() {
    let rig = Rig::new();
    let vol = Volume::open_with_clock(
        rig.meta.clone(),
        rig.data.clone(),
        MountOptions { discard: true, ..options() },
        common::clock(),
    )
    .unwrap();
    let f = vol.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, &vec![3u8; 1 << 20]).unwrap();
    vol.sync().unwrap();
    let before = held(rig.data.as_ref());
    vol.unlink(InodeNo::ROOT, b"f").unwrap();
    // The kernel's reference from the create goes: the file is freed.
    vol.forget(f, 1).unwrap();
    assert_eq!(held(rig.data.as_ref()), before, "nothing discarded before the free is durable");
    vol.tick().unwrap();
    vol.tick().unwrap();
    assert_eq!(held(rig.data.as_ref()) + 256, before, "the file's 256 blocks discarded");
    // They are handed out again.
    let g = vol.create(InodeNo::ROOT, b"g", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(g, 0, &vec![4u8; 1 << 20]).unwrap();
    vol.sync().unwrap();
    assert_eq!(rig.read_all(&vol, "g"), vec![4u8; 1 << 20]);
    assert_eq!(stat(&vol, "discarded_data_blocks"), 256);
    assert_eq!(rig.read_all(&vol, "data"), vec![7u8; 40_000]);
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

/// Blocks a snapshot alone held, free in the live volume: (held back from
/// the allocator, queued for discard).
fn held_back(vol: &Volume) -> (u64, bool) {
    vol.with_fs(|fs| (fs.log.space().held_only(), fs.log.space().discards_queued()))
}

#[test]
fn with_discard_on_a_deleted_snapshots_blocks_are_discarded_once_no_checkpoint_lists_it() {
    let rig = Rig::new();
    let vol = Volume::open_with_clock(
        rig.meta.clone(),
        rig.data.clone(),
        MountOptions { discard: true, ..options() },
        common::clock(),
    )
    .unwrap();
    let f = vol.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, &vec![3u8; 1 << 20]).unwrap();
    vol.sync().unwrap();
    vol.snapshot_create("keep").unwrap();
    vol.unlink(InodeNo::ROOT, b"f").unwrap();
    vol.forget(f, 1).unwrap();
    vol.tick().unwrap();
    vol.tick().unwrap();
    let before = held(rig.data.as_ref());
    assert_eq!(held_back(&vol), (256, false), "the snapshot holds the file's blocks");
    // The checkpoint that drops the snapshot: the one before it, which a
    // mount falls back to, still lists it, so its blocks stay held.
    vol.with_fs(|fs| fs.log.stage_snapshot_delete("keep")).unwrap();
    vol.checkpoint().unwrap();
    assert!(vol.snapshot_list().is_empty());
    assert_eq!(held_back(&vol), (256, false), "let go with the checkpoint that dropped the snapshot");
    assert_eq!(held(rig.data.as_ref()), before);
    // The background writer's next turn writes the checkpoint after it,
    // then discards them.
    vol.tick().unwrap();
    assert_eq!(held_back(&vol), (0, false));
    assert_eq!(held(rig.data.as_ref()) + 256, before, "the snapshot's 256 blocks discarded");
    assert_eq!(stat(&vol, "discarded_data_blocks"), 256);
    // Deleted as the command does, the second checkpoint is written and
    // the blocks discarded before the call returns.
    let g = vol.create(InodeNo::ROOT, b"g", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(g, 0, &vec![4u8; 1 << 20]).unwrap();
    vol.sync().unwrap();
    vol.snapshot_create("again").unwrap();
    vol.unlink(InodeNo::ROOT, b"g").unwrap();
    vol.forget(g, 1).unwrap();
    vol.tick().unwrap();
    vol.tick().unwrap();
    let before = held(rig.data.as_ref());
    let bfree = vol.statfs().bfree;
    vol.snapshot_delete("again").unwrap();
    assert_eq!(held_back(&vol), (0, false));
    assert_eq!(held(rig.data.as_ref()) + 256, before, "discarded by the deletion");
    assert_eq!(vol.statfs().bfree, bfree + 256, "and free");
    assert_eq!(stat(&vol, "discarded_data_blocks"), 512);
    assert_eq!(rig.read_all(&vol, "data"), vec![7u8; 40_000]);
    vol.close().unwrap();
    rig.assert_fsck_clean();
}

/// The checkpoint of the two slots with the higher number, zeroed: a slot
/// the medium lost.
fn lose_newer_slot(rig: &Rig) {
    use dualfs_engine::format::checkpoint::Checkpoint;
    use dualfs_engine::format::superblock::CHECKPOINT_SLOTS;
    let number = |b: u64| Checkpoint::decode(&rig.read(b)).map_or(0, |c| c.number);
    let newer = CHECKPOINT_SLOTS.iter().max_by_key(|s| number(s.0)).unwrap();
    rig.meta.write_blocks(newer.0, &[0u8; BLOCK_SIZE]).unwrap();
}

#[test]
fn a_mount_whose_older_slot_lists_a_deleted_snapshot_writes_nothing_it_holds_before_a_checkpoint() {
    let rig = Rig::new();
    let vol = Volume::open_with_clock(
        rig.meta.clone(),
        rig.data.clone(),
        MountOptions { discard: true, ..options() },
        common::clock(),
    )
    .unwrap();
    let f = vol.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, &vec![3u8; 1 << 20]).unwrap();
    vol.sync().unwrap();
    vol.snapshot_create("keep").unwrap();
    vol.unlink(InodeNo::ROOT, b"f").unwrap();
    vol.forget(f, 1).unwrap();
    // Dropped by one checkpoint, then a crash: the other slot lists it.
    vol.with_fs(|fs| fs.log.stage_snapshot_delete("keep")).unwrap();
    vol.checkpoint().unwrap();
    drop(vol);
    // The mount checkpoints before anything takes the snapshot's blocks.
    let vol = Volume::open_with_clock(
        rig.meta.clone(),
        rig.data.clone(),
        MountOptions { discard: true, ..options() },
        common::clock(),
    )
    .unwrap();
    // Written and committed (no checkpoint), then a crash.
    let g = vol.create(InodeNo::ROOT, b"g", 0o644, Creds::ROOT).unwrap().ino;
    vol.write(g, 0, &vec![4u8; 2 << 20]).unwrap();
    vol.commit().unwrap();
    drop(vol);
    // With the newer slot lost, the older checkpoint shows the snapshot
    // whole, or not at all.
    lose_newer_slot(&rig);
    let vol = Volume::open_with_clock(
        rig.meta.clone(),
        rig.data.clone(),
        MountOptions { accept_loss: true, ..options() },
        common::clock(),
    )
    .unwrap();
    let listed = vol.snapshot_list().iter().any(|s| s.name == "keep");
    drop(vol);
    if listed {
        let s = Volume::open_snapshot(rig.meta.clone(), rig.data.clone(), "keep", options()).unwrap();
        assert_eq!(rig.read_all(&s, "f"), vec![3u8; 1 << 20], "the snapshot's file was overwritten");
    }
}
