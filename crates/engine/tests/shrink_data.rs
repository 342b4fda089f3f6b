//! Shrinking the data device: the data mover moves every block
//! past the new end below it, files written, fsync'd, preallocated, open
//! and dirty alike; the volume then names the smaller size, reads the same
//! bytes, and checks clean after a remount. A shrink whose data would not
//! fit is refused before anything moves.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, FallocateMode, MkfsOptions, MountOptions, ResizeRequest};
use dualfs_engine::{Error, Volume};

const GROUP: u32 = 4096;
/// 16 groups of 16 MiB.
const DATA_BLOCKS: u64 = 16 * GROUP as u64;

fn rig() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    let (meta, data) = (Arc::new(MemoryDevice::new(1 << 15)), Arc::new(MemoryDevice::new(DATA_BLOCKS)));
    let opts = MkfsOptions { segment_blocks: 256, group_blocks: GROUP, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    (meta, data)
}

fn open(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) -> Volume {
    Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap()
}

fn fsck(meta: &Arc<MemoryDevice>, data: &Arc<MemoryDevice>) -> dualfs_engine::check::CheckReport {
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (meta.clone(), data.clone());
    dualfs_engine::check::check(m, d).unwrap()
}

fn bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
}

/// One directory per group (each bound to the emptiest), a file of
/// `kib` KiB in each; returns (file, contents).
fn fill(v: &Volume, dirs: usize, kib: usize) -> Vec<(InodeNo, Vec<u8>)> {
    let mut out = Vec::new();
    for d in 0..dirs {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        let f = v.create(dir, b"f", 0o644, Creds::ROOT).unwrap().ino;
        let data = bytes(d, kib << 10);
        v.write(f, 0, &data).unwrap();
        out.push((f, data));
    }
    out
}

fn read_all(v: &Volume, ino: InodeNo, len: usize) -> Vec<u8> {
    v.read(ino, 0, len).unwrap()
}

#[test]
fn a_shrink_moves_every_block_past_the_end_and_keeps_every_byte() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    let mut files = fill(&v, 14, 300);
    // A directory large enough that its entries are a tree, which the
    // scan must not read as an extent map.
    let many = v.lookup(InodeNo::ROOT, b"d13").unwrap().ino;
    for i in 0..600 {
        let f = v.create(many, format!("small-file-with-a-long-name-{i:04}").as_bytes(), 0o644, Creds::ROOT).unwrap();
        v.write(f.ino, 0, &bytes(i, 5000)).unwrap();
    }
    v.sync().unwrap();
    // Preallocated blocks (unwritten, read as zeros) in the last group.
    let pre = v.create(InodeNo::ROOT, b"pre", 0o644, Creds::ROOT).unwrap().ino;
    v.fallocate(pre, 0, 1 << 20, FallocateMode::default()).unwrap();
    v.write(pre, 8192, &[9u8; 4096]).unwrap();
    v.fsync(files[13].0).unwrap();
    // Dirty data over blocks past the end, not yet written.
    let mut dirty = files[12].1.clone();
    dirty[5000..9000].fill(0xee);
    v.write(files[12].0, 5000, &dirty[5000..9000]).unwrap();
    files[12].1 = dirty;
    let new_end = 4 * u64::from(GROUP);
    let r = v.resize(ResizeRequest { meta_blocks: None, data_blocks: Some(new_end) }).unwrap();
    assert_eq!(r.after.data_blocks, new_end);
    assert!(r.moved.files >= 10, "{r:?}");
    assert!(r.moved.blocks >= 10 * 75, "{r:?}");
    assert_eq!(v.statfs().blocks, new_end);
    for (f, want) in &files {
        assert!(read_all(&v, *f, want.len()) == *want, "file {f:?} changed by the move");
    }
    let mut want_pre = vec![0u8; 1 << 20];
    want_pre[8192..12288].fill(9);
    assert!(read_all(&v, pre, 1 << 20) == want_pre);
    // Writes after the shrink land below the end.
    let after = v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
    v.write(after, 0, &bytes(99, 1 << 20)).unwrap();
    v.close().unwrap();
    let report = fsck(&meta, &data);
    assert!(report.is_clean(), "{:#?}", report.problems);
    let v = open(&meta, &data);
    assert_eq!(v.statfs().blocks, new_end);
    for (f, want) in &files {
        assert!(read_all(&v, *f, want.len()) == *want, "file {f:?} changed after the remount");
    }
    assert!(read_all(&v, after, 1 << 20) == bytes(99, 1 << 20));
    v.close().unwrap();
}

#[test]
fn a_shrink_whose_data_would_not_fit_is_refused_before_anything_moves() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    let files = fill(&v, 12, 6 << 10);
    v.sync().unwrap();
    let before = v.statfs();
    let e = v.resize(ResizeRequest { meta_blocks: None, data_blocks: Some(4 * u64::from(GROUP)) }).unwrap_err();
    assert!(matches!(&e, Error::Resize(m) if m.contains("MiB of file data past") && m.contains("free below")), "{e}");
    assert_eq!(v.statfs().blocks, before.blocks);
    assert_eq!(v.statfs().bfree, before.bfree, "the refusal gave back the space past the end");
    // What is free is handed out again, past the refused end too.
    let f = v.create(InodeNo::ROOT, b"more", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(1, 4 << 20)).unwrap();
    v.sync().unwrap();
    assert!(read_all(&v, files[11].0, 6 << 20) == files[11].1);
    v.close().unwrap();
    assert!(fsck(&meta, &data).is_clean());
}

#[test]
fn a_volume_with_snapshots_is_not_shrunk() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    fill(&v, 2, 8);
    v.snapshot_create("s").unwrap();
    let e = v.resize(ResizeRequest { meta_blocks: None, data_blocks: Some(8 * u64::from(GROUP)) }).unwrap_err();
    assert!(matches!(&e, Error::Resize(m) if m.contains("snapshots")), "{e}");
    v.close().unwrap();
}

/// fsck's side of the rule: a geometry committed with a file's extent past
/// its end (the broken rule `Fault::ShrinkDataBeforeEmpty` makes) is named
/// as an I8 problem, extent and group alike.
#[test]
fn fsck_names_an_extent_past_the_committed_end_i8() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    let files = fill(&v, 16, 40);
    v.sync().unwrap();
    // A shrink done right first: the volume is RESIZED, so that its
    // checkpoints name their geometry.
    v.resize(ResizeRequest { meta_blocks: None, data_blocks: Some(DATA_BLOCKS - u64::from(GROUP)) }).unwrap();
    let end = 8 * u64::from(GROUP);
    v.with_fs(|fs| fs.log.force_shrink_data(end)).unwrap();
    v.checkpoint().unwrap();
    drop(v);
    let report = fsck(&meta, &data);
    let text: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|p| p.starts_with("[I8]") && p.contains("outside the data device")),
        "{text:#?} ({} files)",
        files.len()
    );
    assert!(text.iter().any(|p| p.contains("names data group")), "{text:#?}");
}

/// A file the scan listed and that is deleted before the mover reaches it
/// is passed over (its blocks are freed, not moved), not an error that
/// would stop the shrink.
#[test]
fn a_file_deleted_between_the_scan_and_its_move_is_passed_over() {
    let (meta, data) = rig();
    let v = open(&meta, &data);
    let files = fill(&v, 16, 40);
    v.sync().unwrap();
    let end = 8 * u64::from(GROUP);
    let owners = v.with_fs(|fs| {
        fs.log.space_mut().limit_blocks(Some(end)).unwrap();
        fs.scan_from(end, 0, u64::MAX).unwrap().0
    });
    let gone = owners.last().unwrap().ino;
    let d = files.iter().position(|(f, _)| *f == gone).unwrap();
    let dir = v.lookup(InodeNo::ROOT, format!("d{d}").as_bytes()).unwrap().ino;
    v.unlink(dir, b"f").unwrap();
    // The create's lookup let go: nothing holds it, it is freed.
    v.forget(gone, 1).unwrap();
    assert_eq!(v.with_fs(|fs| fs.relocate_from(gone, end, 1000)).unwrap(), 0);
    assert!(v.with_fs(|fs| fs.relocate_from(owners[0].ino, end, 1000)).unwrap() > 0);
    v.with_fs(|fs| fs.log.space_mut().limit_blocks(None)).unwrap();
    v.sync().unwrap();
    v.close().unwrap();
    assert!(fsck(&meta, &data).is_clean());
}
