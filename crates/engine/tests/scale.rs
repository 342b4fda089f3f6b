//! Scale: 200,000 files in one directory, and 200,000 in a tree of 2,000
//! directories; a 2 GiB sparse file. Every name is found, readdir lists each
//! exactly once, and the volume reopens with all of them.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::namespace::file::Whence;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_engine::{Error, Volume};

fn volume(meta_blocks: u64, data_blocks: u64) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(meta_blocks));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(data_blocks));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    (meta, data)
}

fn fsck(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) {
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", &r.problems[..r.problems.len().min(20)]);
}

fn list(v: &Volume, dir: InodeNo) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    let mut offset = 0;
    // Resume in small batches, as the kernel does, to exercise the cookies.
    loop {
        let mut batch = 0;
        v.readdir(dir, offset, &mut |l| {
            offset = l.next;
            names.push(l.name);
            batch += 1;
            batch < 500
        })
        .unwrap();
        if batch < 500 {
            break;
        }
    }
    names.into_iter().filter(|n| n != b"." && n != b"..").collect()
}

fn check_listing(names: Vec<Vec<u8>>, want: usize) {
    let unique: HashSet<_> = names.iter().cloned().collect();
    assert_eq!(unique.len(), names.len(), "readdir listed a name twice");
    assert_eq!(names.len(), want);
}

#[test]
fn two_hundred_thousand_files_in_one_directory() {
    const N: u32 = 200_000;
    let (meta, data) = volume(1 << 16, 1 << 18);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let dir = v.mkdir(InodeNo::ROOT, b"big", 0o755, Creds::ROOT).unwrap().ino;
    for i in 0..N {
        let a = v.create(dir, format!("file-{i:06}").as_bytes(), 0o644, Creds::ROOT).unwrap();
        v.forget(a.ino, 1).unwrap();
    }
    for i in (0..N).step_by(7) {
        v.lookup(dir, format!("file-{i:06}").as_bytes()).unwrap();
    }
    check_listing(list(&v, dir), N as usize);
    v.close().unwrap();
    fsck(&meta, &data);

    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    for i in 0..N {
        v.lookup(dir, format!("file-{i:06}").as_bytes()).unwrap();
    }
    assert!(matches!(v.lookup(dir, b"file-999999"), Err(Error::NotFound)));
    check_listing(list(&v, dir), N as usize);
    // Removing half keeps the rest findable.
    for i in (0..N).step_by(2) {
        v.unlink(dir, format!("file-{i:06}").as_bytes()).unwrap();
    }
    check_listing(list(&v, dir), N as usize / 2);
    v.close().unwrap();
    fsck(&meta, &data);
}

#[test]
fn two_hundred_thousand_files_in_two_thousand_directories() {
    let (meta, data) = volume(1 << 16, 1 << 18);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let mut dirs = Vec::new();
    for t in 0..20 {
        let top = v.mkdir(InodeNo::ROOT, format!("t{t}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for d in 0..100 {
            dirs.push(v.mkdir(top, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino);
        }
    }
    for (k, dir) in dirs.iter().enumerate() {
        for i in 0..100 {
            let a = v.create(*dir, format!("f{k}-{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
            v.forget(a.ino, 1).unwrap();
        }
    }
    v.close().unwrap();
    fsck(&meta, &data);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let mut total = 0;
    for t in 0..20 {
        let top = v.lookup(InodeNo::ROOT, format!("t{t}").as_bytes()).unwrap().ino;
        check_listing(list(&v, top), 100);
        for d in 0..100 {
            let dir = v.lookup(top, format!("d{d}").as_bytes()).unwrap().ino;
            let k = t * 100 + d;
            for i in 0..100 {
                v.lookup(dir, format!("f{k}-{i}").as_bytes()).unwrap();
            }
            let names = list(&v, dir);
            total += names.len();
            check_listing(names, 100);
        }
    }
    assert_eq!(total, 200_000);
    v.close().unwrap();
}

#[test]
fn two_gib_sparse_file_reads_back_and_reports_its_holes() {
    let (meta, data) = volume(1 << 14, 1 << 16);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let f = v.create(InodeNo::ROOT, b"sparse", 0o644, Creds::ROOT).unwrap().ino;
    let size: u64 = 2 << 30;
    let offsets: Vec<u64> = (0..64u64).map(|i| (i * 33_554_467) % (size - 10_000)).collect();
    for (i, &o) in offsets.iter().enumerate() {
        v.write(f, o, &vec![i as u8 + 1; 5000]).unwrap();
    }
    v.write(f, size - 1, &[0xEE]).unwrap();
    v.close().unwrap();
    fsck(&meta, &data);

    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    assert_eq!(v.getattr(f).unwrap().size, size);
    for (i, &o) in offsets.iter().enumerate() {
        let later = offsets.iter().enumerate().filter(|(j, p)| *j > i && p.abs_diff(o) < 5000).count();
        if later == 0 {
            assert_eq!(v.read(f, o, 5000).unwrap(), vec![i as u8 + 1; 5000], "extent {i} at {o}");
        }
    }
    assert_eq!(v.read(f, size - 1, 10).unwrap(), vec![0xEE]);
    // A hole reads as zeros, and SEEK_DATA / SEEK_HOLE walk the map.
    let first = *offsets.iter().filter(|&&o| o > 0).min().unwrap();
    assert_eq!(v.seek(f, 0, Whence::Data).unwrap(), 0);
    assert_eq!(v.seek(f, 0, Whence::Hole).unwrap(), 8192);
    let d = v.seek(f, 8192, Whence::Data).unwrap();
    assert_eq!(d, first / 4096 * 4096);
    assert!(
        v.read(f, 100_000, 4096).unwrap().iter().all(|&b| b == 0)
            || offsets.iter().any(|&o| o < 110_000 && o + 5000 > 100_000)
    );
    assert!(matches!(v.seek(f, size, Whence::Data), Err(Error::NoSuchOffset)));
    let mut pos = 0;
    let mut runs = 0;
    while let Ok(d) = v.seek(f, pos, Whence::Data) {
        let h = v.seek(f, d, Whence::Hole).unwrap();
        assert!(h > d);
        runs += 1;
        pos = h;
        if pos >= size {
            break;
        }
    }
    assert!((40..=66).contains(&runs), "{runs} data runs");
    assert!(v.getattr(f).unwrap().blocks < 64 * 3 * 8 + 16, "holes must not take space");
    v.close().unwrap();
}

/// The kernel forgets inodes by the million when it trims its caches. A
/// FORGET of an inode that still has links must not read its record: that
/// used to load every forgotten inode into the meta-data cache, past its
/// limit (406 MiB against 256 after `drop_caches` with 1,000,000 files).
#[test]
fn forgetting_linked_inodes_keeps_the_cache_within_its_limit() {
    const N: u32 = 30_000;
    const BUDGET: usize = 2_000;
    let (meta, data) = volume(1 << 15, 1 << 15);
    let options = MountOptions { cache_budget: BUDGET, ..MountOptions::default() };
    let v = Volume::open(meta.clone(), data.clone(), options).unwrap();
    let cached = |v: &Volume| v.stats().into_iter().find(|(k, _)| *k == "cache_inodes").map(|(_, n)| n).unwrap();
    let mut inos = Vec::new();
    for d in 0..N / 1000 {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..1000 {
            let name = format!("f{i}");
            let a = v.create(dir, name.as_bytes(), 0o644, Creds::ROOT).unwrap();
            inos.push((dir, name, a.ino));
        }
    }
    v.sync().unwrap();
    // A create's reply is a lookup reference the kernel forgets in time.
    for (_, _, ino) in &inos {
        v.forget(*ino, 1).unwrap();
    }
    let mut looked_up = Vec::new();
    for (dir, name, _) in &inos {
        let a = v.lookup(*dir, name.as_bytes()).unwrap();
        v.remember(a.ino, 1);
        looked_up.push(a.ino);
    }
    let limit = (BUDGET + BUDGET / 8) as u64;
    assert!(cached(&v) <= limit, "{} inodes cached after the lookups", cached(&v));
    for ino in looked_up {
        v.forget(ino, 1).unwrap();
    }
    assert!(cached(&v) <= limit, "{} inodes cached after forgetting them, the limit is {BUDGET}", cached(&v));
    let slots = v.with_fs(|fs| fs.refs_capacity());
    assert!(slots < 10_000, "the reference table keeps {slots} slots for no reference");
    // An unlinked file the kernel still references goes with its last FORGET.
    let a = v.create(InodeNo::ROOT, b"open", 0o644, Creds::ROOT).unwrap();
    v.unlink(InodeNo::ROOT, b"open").unwrap();
    v.forget(a.ino, 1).unwrap();
    let after = v.getattr(a.ino);
    assert!(matches!(after, Err(Error::NotFound)), "the orphan outlived its last reference: {after:?}");
    v.close().unwrap();
    fsck(&meta, &data);
}
