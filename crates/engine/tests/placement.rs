//! Where a tree's data lands: together, in the order a walk reads it.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, send};

const GROUP_BLOCKS: u32 = 1024;

fn volume() -> Volume {
    volume_on(&devices())
}

fn devices() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(65536)))
}

fn volume_on((meta, data): &(Arc<dyn BlockDevice>, Arc<dyn BlockDevice>)) -> Volume {
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: GROUP_BLOCKS, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap()
}

/// Untar's order: a directory, then what is in it, depth first; more
/// directories than the volume has groups.
fn untar(v: &Volume, dir: InodeNo, depth: u32, n: &mut u32) {
    for i in 0..3u32 {
        let f = v.create(dir, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
        *n += 1;
        v.write(f.ino, 0, &vec![(*n % 251) as u8; 3 * 4096 + 100]).unwrap();
        if depth > 0 && i == 1 {
            for s in 0..3u32 {
                let d = v.mkdir(dir, format!("d{s}").as_bytes(), 0o755, Creds::ROOT).unwrap();
                untar(v, d.ino, depth - 1, n);
            }
        }
    }
}

/// cp -a's order: each directory's entries sorted by inode number (gnulib's
/// savedir), a subdirectory copied where it comes. Returns the files' data
/// extents, (first block, blocks), in that order.
fn walk(v: &Volume, dir: InodeNo, out: &mut Vec<(u64, u64)>) {
    let mut entries: Vec<(InodeNo, FileKind)> = Vec::new();
    v.readdir(dir, 0, &mut |e| {
        if e.name != b"." && e.name != b".." {
            entries.push((e.ino, e.kind));
        }
        true
    })
    .unwrap();
    entries.sort_by_key(|e| e.0);
    for (ino, kind) in entries {
        match kind {
            FileKind::Directory => walk(v, ino, out),
            FileKind::Regular => {
                let e = v.with_fs(|fs| fs.next_extent(ino, 0)).unwrap().unwrap();
                out.push((e.physical.0, u64::from(e.len)));
            }
            _ => {}
        }
    }
}

#[test]
fn a_tree_lies_together_in_the_order_a_walk_reads_it() {
    let v = volume();
    let top = v.mkdir(InodeNo::ROOT, b"linux", 0o755, Creds::ROOT).unwrap();
    let mut n = 0;
    untar(&v, top.ino, 3, &mut n);
    v.commit().unwrap();
    let mut files = Vec::new();
    walk(&v, top.ino, &mut files);
    assert_eq!(files.len() as u32, n);
    // Each file's data starts where the one read before it ended: the
    // walk reads on, with no seek between directories.
    for w in files.windows(2) {
        assert_eq!(w[1].0, w[0].0 + w[0].1, "a walk seeks from {:?} to {:?}", w[0], w[1]);
    }
    v.close().unwrap();
}

#[test]
fn trees_at_the_top_spread_and_a_full_group_passes_a_subdirectory_on() {
    let v = volume();
    let a = v.mkdir(InodeNo::ROOT, b"a", 0o755, Creds::ROOT).unwrap();
    let b = v.mkdir(InodeNo::ROOT, b"b", 0o755, Creds::ROOT).unwrap();
    let group = |ino: InodeNo| v.with_fs(|fs| fs.inode(ino).map(|r| r.group)).unwrap();
    assert_ne!(group(a.ino), group(b.ino), "top-level directories share a group");
    let sub = v.mkdir(a.ino, b"sub", 0o755, Creds::ROOT).unwrap();
    assert_eq!(group(sub.ino), group(a.ino));
    // Fill a's group past three quarters: the next subdirectory goes on.
    let f = v.create(a.ino, b"big", 0o644, Creds::ROOT).unwrap();
    v.write(f.ino, 0, &vec![7u8; (GROUP_BLOCKS as usize * 7 / 8) * 4096]).unwrap();
    v.commit().unwrap();
    let next = v.mkdir(a.ino, b"next", 0o755, Creds::ROOT).unwrap();
    assert_ne!(group(next.ino), group(a.ino));
    v.close().unwrap();
}

/// A directory's data group, and those of every directory below it.
fn groups(v: &Volume, dir: InodeNo, out: &mut Vec<u32>) {
    out.push(v.with_fs(|fs| fs.inode(dir).map(|r| r.group.0)).unwrap());
    let mut subdirs = Vec::new();
    v.readdir(dir, 0, &mut |e| {
        if e.kind == FileKind::Directory && e.name != b"." && e.name != b".." {
            subdirs.push(e.ino);
        }
        true
    })
    .unwrap();
    for d in subdirs {
        groups(v, d, out);
    }
}

/// A received tree is placed as an untarred one: its directories in its
/// top's group while that has room, not each in the emptiest group.
#[test]
fn a_received_tree_lies_in_one_group_as_a_written_one() {
    let devs = devices();
    let source = volume_on(&devs);
    let top = source.mkdir(InodeNo::ROOT, b"linux", 0o755, Creds::ROOT).unwrap();
    untar(&source, top.ino, 2, &mut 0);
    let mut written = Vec::new();
    groups(&source, top.ino, &mut written);
    assert!(written.iter().all(|g| *g == written[0]), "the written tree spreads over groups {written:?}");
    source.snapshot_create("a").unwrap();
    let mut stream = Vec::new();
    send(devs.0.clone(), devs.1.clone(), None, "a", &mut stream).unwrap();
    let target = volume();
    target.receive(&mut &stream[..]).unwrap();
    let mut received = Vec::new();
    groups(&target, top.ino, &mut received);
    assert_eq!(received.len(), written.len());
    assert!(received.iter().all(|g| *g == received[0]), "the received tree spreads over groups {received:?}");
    source.close().unwrap();
    target.close().unwrap();
}
