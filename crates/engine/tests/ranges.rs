//! `fallocate`'s range modes: collapse and insert move a file's contents
//! down or up by whole blocks, unshare gives a file its own copies of the
//! blocks a snapshot shares. Each shape of file (dirty pages, holes,
//! preallocated extents, inline bytes, a delayed tail, a map in the inode
//! and in a tree, blocks a snapshot holds) is checked against a byte
//! vector, in memory, after a commit, after a crash and after a remount,
//! with fsck clean.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::error::Error;
use dualfs_engine::types::{FileKind, InodeNo, Timestamp};
use dualfs_engine::volume::{Creds, FallocateMode, MkfsOptions, MountOptions};

const B: u64 = 4096;

struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
    now: Arc<AtomicI64>,
}

impl Rig {
    fn new() -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(16384)), Arc::new(MemoryDevice::new(65536)));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        Rig { meta, data, now: Arc::new(AtomicI64::new(1_700_000_000)) }
    }

    fn open(&self) -> Volume {
        let now = self.now.clone();
        let options = MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() };
        let clock = Arc::new(move || Timestamp::new(now.load(Ordering::Relaxed), 0));
        Volume::open_with_clock(self.meta.clone(), self.data.clone(), options, clock).unwrap()
    }

    /// The volume as a power cut now would leave it, recovered, fsck clean.
    fn crash(&self) -> Volume {
        let meta: Arc<dyn BlockDevice> = Arc::new(self.meta.snapshot());
        let data: Arc<dyn BlockDevice> = Arc::new(self.data.snapshot());
        let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
        let r = dualfs_engine::check::check(meta, data).unwrap();
        assert!(r.is_clean(), "fsck: {:#?}", r.problems);
        v
    }

    fn fsck_clean(&self) {
        let r = dualfs_engine::check::check(self.meta.clone(), self.data.clone()).unwrap();
        assert!(r.is_clean(), "fsck: {:#?}", r.problems);
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

/// Panics naming the first byte that differs (a whole file printed helps nobody).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!("{what}: {} bytes, {} wanted; first difference at {at} (block {})", got.len(), want.len(), at / 4096);
    }
}

fn contents(v: &Volume, ino: InodeNo) -> Vec<u8> {
    let size = v.getattr(ino).unwrap().size;
    v.read(ino, 0, size as usize).unwrap()
}

fn contents_at(v: &Volume, name: &[u8]) -> Vec<u8> {
    contents(v, v.lookup(InodeNo::ROOT, name).unwrap().ino)
}

fn collapse(model: &mut Vec<u8>, offset: u64, len: u64) {
    model.drain(offset as usize..(offset + len) as usize);
}

fn insert(model: &mut Vec<u8>, offset: u64, len: u64) {
    let at = offset as usize;
    model.splice(at..at, std::iter::repeat_n(0u8, len as usize));
}

/// A file of each shape, and the bytes it holds.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Written, never committed: only pages.
    DirtyPages,
    /// Written and committed: a few extents in the inode.
    Committed,
    /// Data with holes between, committed.
    Holes,
    /// Preallocated, partly written: unwritten extents beside written ones.
    Preallocated,
    /// A few hundred bytes kept in the inode.
    Inline,
    /// Committed, then appended to and left dirty: the tail in pages only.
    DirtyTail,
    /// Hundreds of extents: a map in a B-tree of several leaves.
    Tree,
}

const SHAPES: [Shape; 7] = [
    Shape::DirtyPages,
    Shape::Committed,
    Shape::Holes,
    Shape::Preallocated,
    Shape::Inline,
    Shape::DirtyTail,
    Shape::Tree,
];

fn make(v: &Volume, name: &[u8], shape: Shape) -> (InodeNo, Vec<u8>) {
    let f = v.create(InodeNo::ROOT, name, 0o644, Creds::ROOT).unwrap().ino;
    let mut model = Vec::new();
    let put = |v: &Volume, model: &mut Vec<u8>, at: u64, data: &[u8]| {
        v.write(f, at, data).unwrap();
        let end = at as usize + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[at as usize..end].copy_from_slice(data);
    };
    match shape {
        Shape::DirtyPages => put(v, &mut model, 0, &bytes(10 * B as usize + 123, 1)),
        Shape::Committed => {
            put(v, &mut model, 0, &bytes(12 * B as usize + 7, 2));
            v.commit().unwrap();
        }
        Shape::Holes => {
            for i in 0..6 {
                put(v, &mut model, i * 3 * B + 100, &bytes(B as usize, 3 + i as u8));
            }
            v.commit().unwrap();
        }
        Shape::Preallocated => {
            v.fallocate(f, 0, 16 * B, FallocateMode::default()).unwrap();
            model.resize(16 * B as usize, 0);
            put(v, &mut model, 2 * B, &bytes(B as usize * 2, 4));
            put(v, &mut model, 9 * B + 5, &bytes(100, 5));
            v.commit().unwrap();
        }
        Shape::Inline => put(v, &mut model, 0, &bytes(700, 6)),
        Shape::DirtyTail => {
            put(v, &mut model, 0, &bytes(6 * B as usize, 7));
            v.commit().unwrap();
            put(v, &mut model, 6 * B, &bytes(5 * B as usize + 99, 8));
        }
        Shape::Tree => {
            // Every other block: one extent each, far past the 16 an inode holds.
            for i in 0..600 {
                put(v, &mut model, i * 2 * B, &bytes(B as usize, i as u8));
            }
            v.commit().unwrap();
        }
    }
    (f, model)
}

/// Each shape, collapsed and inserted at a block inside it (and at 0),
/// matches the byte model in memory, after a commit, after a crash right
/// after that commit and after a remount; fsck is clean.
#[test]
fn collapse_and_insert_keep_every_shape_of_file_right() {
    for shape in SHAPES {
        for collapse_first in [true, false] {
            let rig = Rig::new();
            let v = rig.open();
            let name = format!("{shape:?}").into_bytes();
            let (f, mut model) = make(&v, &name, shape);
            let size = model.len() as u64;
            let mut steps: Vec<(bool, u64, u64)> = Vec::new();
            if size > 2 * B {
                steps.push((true, B, B));
            }
            steps.push((false, 0, 2 * B));
            if size > 4 * B {
                steps.push((false, 3 * B, B));
                steps.push((true, 0, B));
            }
            if !collapse_first {
                steps.reverse();
            }
            for (is_collapse, offset, len) in steps {
                let size = model.len() as u64;
                if is_collapse && offset + len >= size || !is_collapse && offset >= size {
                    continue;
                }
                let mode = if is_collapse { FallocateMode::COLLAPSE_RANGE } else { FallocateMode::INSERT_RANGE };
                v.fallocate(f, offset, len, mode).unwrap_or_else(|e| panic!("{shape:?} {mode:?} {offset}+{len}: {e}"));
                if is_collapse {
                    collapse(&mut model, offset, len);
                } else {
                    insert(&mut model, offset, len);
                }
                same(&contents(&v, f), &model, &format!("{shape:?} after {mode:?} {offset}+{len}, in memory"));
            }
            v.commit().unwrap();
            same(&contents(&v, f), &model, &format!("{shape:?} after the commit"));
            let c = rig.crash();
            same(&contents_at(&c, &name), &model, &format!("{shape:?} after a crash"));
            drop(c);
            v.close().unwrap();
            rig.fsck_clean();
            let v = rig.open();
            same(&contents_at(&v, &name), &model, &format!("{shape:?} after a remount"));
            v.close().unwrap();
        }
    }
}

/// A crash before the commit shows the file as it was, whole: nothing of
/// a collapse or an insert reaches the disk but with its commit group.
#[test]
fn a_crash_shows_a_collapse_whole_or_not_at_all() {
    let rig = Rig::new();
    let v = rig.open();
    let (f, model) = make(&v, b"tree", Shape::Tree);
    v.fallocate(f, 100 * B, 300 * B, FallocateMode::COLLAPSE_RANGE).unwrap();
    same(&contents_at(&rig.crash(), b"tree"), &model, "before the commit: as it was");
    v.commit().unwrap();
    let mut after = model;
    collapse(&mut after, 100 * B, 300 * B);
    same(&contents_at(&rig.crash(), b"tree"), &after, "contents");
    v.fsync(f).unwrap();
    v.close().unwrap();
}

/// An fsync after a collapse or an insert makes it durable, whatever the
/// way fsync takes (a record, or a commit when the map changed too much).
#[test]
fn fsync_after_a_shift_makes_it_durable() {
    for shape in [Shape::Committed, Shape::Holes, Shape::Tree, Shape::DirtyTail] {
        let rig = Rig::new();
        let v = rig.open();
        let (f, mut model) = make(&v, b"f", shape);
        v.fallocate(f, B, B, FallocateMode::COLLAPSE_RANGE).unwrap();
        collapse(&mut model, B, B);
        v.fsync(f).unwrap();
        same(&contents_at(&rig.crash(), b"f"), &model, &format!("{shape:?} after collapse and fsync"));
        v.fallocate(f, 2 * B, 3 * B, FallocateMode::INSERT_RANGE).unwrap();
        insert(&mut model, 2 * B, 3 * B);
        v.fdatasync(f).unwrap();
        same(&contents_at(&rig.crash(), b"f"), &model, &format!("{shape:?} after insert and fdatasync"));
        v.close().unwrap();
    }
}

#[test]
fn the_errors_are_ext4s() {
    let rig = Rig::new();
    let v = rig.open();
    let (f, _) = make(&v, b"f", Shape::Committed);
    let size = v.getattr(f).unwrap().size;
    let err = |offset: u64, len: u64, mode: FallocateMode| v.fallocate(f, offset, len, mode).unwrap_err().errno();
    let (col, ins) = (FallocateMode::COLLAPSE_RANGE, FallocateMode::INSERT_RANGE);
    assert_eq!(err(100, B, col), libc::EINVAL, "offset not aligned");
    assert_eq!(err(B, 100, ins), libc::EINVAL, "length not aligned");
    assert_eq!(err(B, size - B, col), libc::EINVAL, "collapse reaching the end of the file");
    assert_eq!(err(0, 100 * B, col), libc::EINVAL, "collapse past the end of the file");
    assert_eq!(err(size.next_multiple_of(B), B, ins), libc::EINVAL, "insert at the end of the file");
    assert_eq!(err(0, 0, col), libc::EINVAL, "empty range");
    assert_eq!(err(0, 1 << 44, ins), libc::EFBIG, "insert growing past 16 TiB");
    assert_eq!(err(0, B, FallocateMode { keep_size: true, ..col }), libc::EINVAL);
    assert_eq!(err(0, B, FallocateMode { keep_size: true, ..ins }), libc::EINVAL);
    assert_eq!(err(0, B, FallocateMode { insert_range: true, ..col }), libc::EOPNOTSUPP);
    assert_eq!(err(0, B, FallocateMode { unshare_range: true, ..FallocateMode::PUNCH_HOLE }), libc::EOPNOTSUPP);
    assert_eq!(err(0, B, FallocateMode { keep_size: false, ..FallocateMode::PUNCH_HOLE }), libc::EOPNOTSUPP);
    assert_eq!(contents(&v, f).len() as u64, size, "nothing changed");
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    assert!(matches!(v.fallocate(d, 0, B, col), Err(Error::IsDir)));
    let p = v.mknod(InodeNo::ROOT, b"p", FileKind::Fifo, 0o644, 0, Creds::ROOT).unwrap().ino;
    assert_eq!(v.fallocate(p, 0, B, ins).unwrap_err().errno(), libc::ESPIPE);
    let s = v.symlink(InodeNo::ROOT, b"s", b"f", Creds::ROOT).unwrap().ino;
    assert_eq!(v.fallocate(s, 0, B, FallocateMode::default()).unwrap_err().errno(), libc::ENODEV);
    v.close().unwrap();
}

/// Both times move, as on ext4; a failed call moves neither.
#[test]
fn a_shift_moves_mtime_and_ctime() {
    let rig = Rig::new();
    let v = rig.open();
    let (f, _) = make(&v, b"f", Shape::Committed);
    let before = v.getattr(f).unwrap();
    rig.now.fetch_add(10, Ordering::Relaxed);
    assert!(v.fallocate(f, 0, 100 * B, FallocateMode::COLLAPSE_RANGE).is_err());
    assert_eq!(v.getattr(f).unwrap().mtime, before.mtime);
    v.fallocate(f, 0, B, FallocateMode::INSERT_RANGE).unwrap();
    let after = v.getattr(f).unwrap();
    assert_eq!(after.mtime, Timestamp::new(before.mtime.sec + 10, 0));
    assert_eq!(after.ctime, after.mtime);
    assert_eq!(after.size, before.size + B);
    v.close().unwrap();
}

/// A snapshot keeps its view of a file collapsed and inserted in the live
/// tree, and the live file's shifted blocks are still not overwritten in
/// place: a write to one goes to a new block.
#[test]
fn a_snapshot_keeps_its_view_across_collapse_and_insert() {
    let rig = Rig::new();
    let v = rig.open();
    let (f, model) = make(&v, b"f", Shape::Holes);
    v.snapshot_create("before").unwrap();
    let mut live = model.clone();
    v.fallocate(f, 0, 3 * B, FallocateMode::COLLAPSE_RANGE).unwrap();
    collapse(&mut live, 0, 3 * B);
    v.fallocate(f, B, 2 * B, FallocateMode::INSERT_RANGE).unwrap();
    insert(&mut live, B, 2 * B);
    let patch = bytes(B as usize, 99);
    v.write(f, 3 * B, &patch).unwrap();
    live[3 * B as usize..4 * B as usize].copy_from_slice(&patch);
    v.commit().unwrap();
    same(&contents(&v, f), &live, "contents");
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (rig.meta.clone(), rig.data.clone());
    let snap = Volume::open_snapshot(m, d, "before", MountOptions::default()).unwrap();
    same(&contents_at(&snap, b"f"), &model, "the snapshot's file is as it was");
    drop(snap);
    v.close().unwrap();
    rig.fsck_clean();
}

/// Unshare: the blocks a snapshot shares with the file become the file's
/// own after the next commit (the snapshot then holds them alone); the
/// contents do not change, and the range is allocated as mode 0 would.
#[test]
fn unshare_gives_the_file_its_own_copies() {
    let rig = Rig::new();
    let v = rig.open();
    let (f, model) = make(&v, b"f", Shape::Holes);
    v.snapshot_create("s").unwrap();
    let shared = |v: &Volume| v.snapshot_view("s").unwrap().data_shared_bytes;
    let held = shared(&v);
    assert_eq!(held, 12 * B, "the twelve written blocks are shared");
    let blocks = v.getattr(f).unwrap().blocks;
    v.fallocate(f, 0, 3 * B, FallocateMode { keep_size: true, ..FallocateMode::UNSHARE_RANGE }).unwrap();
    same(&contents(&v, f), &model, "contents");
    v.commit().unwrap();
    assert_eq!(shared(&v), 10 * B, "the two blocks written in the range are the file's own");
    assert_eq!(v.getattr(f).unwrap().blocks, blocks + 8, "and the hole in the range is allocated");
    let size = model.len() as u64;
    v.fallocate(f, 0, size + 5 * B, FallocateMode::UNSHARE_RANGE).unwrap();
    v.commit().unwrap();
    assert_eq!(shared(&v), 0, "nothing is shared any more");
    assert_eq!(v.getattr(f).unwrap().size, size + 5 * B, "without keep-size the file grows");
    let mut grown = model.clone();
    grown.resize((size + 5 * B) as usize, 0);
    same(&contents(&v, f), &grown, "contents");
    v.close().unwrap();
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (rig.meta.clone(), rig.data.clone());
    let snap = Volume::open_snapshot(m, d, "s", MountOptions::default()).unwrap();
    same(&contents_at(&snap, b"f"), &model, "contents");
    drop(snap);
    rig.fsck_clean();
}

/// A map of thousands of extents, collapsed near its start: more leaves
/// than one operation's usual room, still one commit group.
#[test]
fn a_collapse_of_a_large_map_is_one_commit_group() {
    let rig = Rig::new();
    let v = rig.open();
    let f = v.create(InodeNo::ROOT, b"big", 0o644, Creds::ROOT).unwrap().ino;
    let mut model = Vec::new();
    for i in 0..6000u64 {
        let data = [(i % 251) as u8 | 1; 64];
        v.write(f, i * 2 * B, &data).unwrap();
        model.resize((i * 2 * B) as usize, 0);
        model.extend_from_slice(&data);
    }
    v.commit().unwrap();
    v.fallocate(f, 2 * B, 4 * B, FallocateMode::COLLAPSE_RANGE).unwrap();
    collapse(&mut model, 2 * B, 4 * B);
    v.fallocate(f, 10 * B, 6 * B, FallocateMode::INSERT_RANGE).unwrap();
    insert(&mut model, 10 * B, 6 * B);
    same(&contents(&v, f), &model, "contents");
    v.commit().unwrap();
    same(&contents_at(&rig.crash(), b"big"), &model, "contents");
    v.close().unwrap();
    rig.fsck_clean();
}

/// Punch and zero range still compose with the shifts on the same file.
#[test]
fn punch_and_zero_range_compose_with_shifts() {
    let rig = Rig::new();
    let v = rig.open();
    let (f, mut model) = make(&v, b"f", Shape::Preallocated);
    v.fallocate(f, B + 10, 2 * B, FallocateMode::PUNCH_HOLE).unwrap();
    model[(B + 10) as usize..(3 * B + 10) as usize].fill(0);
    v.fallocate(f, 2 * B, 4 * B, FallocateMode::COLLAPSE_RANGE).unwrap();
    collapse(&mut model, 2 * B, 4 * B);
    let zero = FallocateMode { zero_range: true, keep_size: true, ..FallocateMode::default() };
    v.fallocate(f, 100, 50, zero).unwrap();
    model[100..150].fill(0);
    v.fallocate(f, 0, B, FallocateMode::INSERT_RANGE).unwrap();
    insert(&mut model, 0, B);
    v.write(f, 5, b"hello").unwrap();
    model[5..10].copy_from_slice(b"hello");
    same(&contents(&v, f), &model, "contents");
    v.commit().unwrap();
    same(&contents_at(&rig.crash(), b"f"), &model, "contents");
    v.close().unwrap();
    rig.fsck_clean();
}
