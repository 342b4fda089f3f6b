//! A directory's files read in the order it lists them (grep -r, tar): the
//! volume asks the data device for the next files' blocks before the
//! reader gets there, never for a block twice and never for more than the
//! files hold; and a cold read of a directory's small files reads no more
//! from the device than the files hold (DESIGN.md, "Data space").
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::disk::{cached_bytes, scratch};
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice, MemoryDevice};
use dualfs_engine::types::{BLOCK_SIZE, FileKind, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

/// What the volume asked of the data device, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Asked {
    Read(u64, u64),
    Ahead(u64, u64),
}

/// A device that records the reads and the read-ahead asked of it.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn BlockDevice>,
    asked: Mutex<Vec<Asked>>,
}

impl Recording {
    fn take(&self) -> Vec<Asked> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

impl BlockDevice for Recording {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.asked.lock().unwrap().push(Asked::Read(first, (buf.len() / BLOCK_SIZE) as u64));
        self.inner.read_blocks(first, buf)
    }
    fn will_need(&self, first: u64, count: u64) {
        self.asked.lock().unwrap().push(Asked::Ahead(first, count));
        self.inner.will_need(first, count);
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_blocks(first, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn content(file: u32, version: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 31 + file * 7 + version * 101) as u8).collect()
}

/// Sizes past the inline limit, a few past what is read through the
/// device's cache (read direct, never asked for ahead).
fn size_of(f: u32) -> usize {
    if f % 17 == 16 { 200 * 1024 } else { 2000 + (f as usize * 3137) % 30_000 }
}

/// The directory's regular files in the order readdir gives them, each
/// stat'ed after, as FUSE's readdirplus does (the read-ahead plans from
/// the inodes in memory).
fn listing(v: &Volume, dir: InodeNo) -> Vec<(Vec<u8>, InodeNo)> {
    let mut out = Vec::new();
    v.readdir(dir, 0, &mut |l| {
        if l.kind == FileKind::Regular {
            out.push((l.name, l.ino));
        }
        true
    })
    .unwrap();
    for (_, ino) in &out {
        v.getattr(*ino).unwrap();
    }
    out
}

/// Drops what the page cache holds of `path`: the next reads are cold.
fn uncache(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

/// Blocks of the data device a file's data lies in, by reading it through
/// a recording volume's plan: the reads of a file alone.
fn blocks_of(asked: &[Asked]) -> HashSet<u64> {
    asked
        .iter()
        .flat_map(|a| match *a {
            Asked::Read(f, n) => f..f + n,
            Asked::Ahead(..) => 0..0,
        })
        .collect()
}

#[test]
fn files_read_in_listed_order_are_asked_for_ahead_once_each() {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(65536));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 16384, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let n = 120u32;
    for f in 0..n {
        let ino = v.create(dir, format!("f{f}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(ino, 0, &content(f, 0, size_of(f))).unwrap();
        if f % 10 == 0 {
            v.mkdir(dir, format!("sub{f}").as_bytes(), 0o755, Creds::ROOT).unwrap();
        }
    }
    v.close().unwrap();

    // Where each file lies: read alone, one volume each, nothing listed.
    let rec = Arc::new(Recording { inner: data.clone(), asked: Mutex::new(Vec::new()) });
    let v = Volume::open(meta.clone(), rec.clone(), MountOptions::default()).unwrap();
    let mut lies = std::collections::HashMap::new();
    for f in 0..n {
        let ino = v.lookup(dir, format!("f{f}").as_bytes()).unwrap().ino;
        rec.take();
        assert_eq!(v.read(ino, 0, 1 << 20).unwrap(), content(f, 0, size_of(f)));
        let asked = rec.take();
        assert!(asked.iter().all(|a| matches!(a, Asked::Read(..))), "file {f} read alone asked ahead: {asked:?}");
        lies.insert(ino, blocks_of(&asked));
    }
    v.close().unwrap();

    // Listed, then read in listed order.
    let rec = Arc::new(Recording { inner: data.clone(), asked: Mutex::new(Vec::new()) });
    let v = Volume::open(meta.clone(), rec.clone(), MountOptions::default()).unwrap();
    let files = listing(&v, dir);
    assert_eq!(files.len(), n as usize);
    let mut ahead: HashSet<u64> = HashSet::new();
    let mut asked_twice = 0;
    for (i, (name, ino)) in files.iter().enumerate() {
        let f: u32 = std::str::from_utf8(&name[1..]).unwrap().parse().unwrap();
        let small = size_of(f) <= FileDevice::BUFFERED_READ_MAX;
        if i > 0 && small {
            assert!(
                lies[ino].iter().all(|b| ahead.contains(b)),
                "file {i} of the listing ({}) was not asked for before its read",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(v.read(*ino, 0, 1 << 20).unwrap(), content(f, 0, size_of(f)));
        for a in rec.take() {
            if let Asked::Ahead(first, count) = a {
                for b in first..first + count {
                    asked_twice += usize::from(!ahead.insert(b));
                }
            }
        }
    }
    assert_eq!(asked_twice, 0, "blocks asked for ahead twice");
    // Never more than the small files hold (the first is read, not asked for).
    let small: HashSet<u64> = files
        .iter()
        .filter(|(name, _)| {
            size_of(std::str::from_utf8(&name[1..]).unwrap().parse().unwrap()) <= FileDevice::BUFFERED_READ_MAX
        })
        .flat_map(|(_, ino)| lies[ino].iter().copied())
        .collect();
    assert!(ahead.is_subset(&small), "{} blocks asked for that no small file holds", ahead.difference(&small).count());
    v.close().unwrap();

    // Read out of order (backwards): after the first read's step, nothing.
    let rec = Arc::new(Recording { inner: data.clone(), asked: Mutex::new(Vec::new()) });
    let v = Volume::open(meta, rec.clone(), MountOptions::default()).unwrap();
    let files = listing(&v, dir);
    for (_, ino) in files.iter().rev() {
        v.read(*ino, 0, 1 << 20).unwrap();
    }
    let asked: u64 = rec
        .take()
        .iter()
        .map(|a| match *a {
            Asked::Ahead(_, n) => n,
            Asked::Read(..) => 0,
        })
        .sum();
    assert_eq!(asked, 0, "the last file listed has nothing after it, and a reader going backwards gets nothing ahead");
    v.close().unwrap();
}

/// Four directories written file by file in turn, so that their data lies
/// interleaved on the device, and one large file beside them; one
/// directory read cold in listed order, as grep -r reads it, through a
/// volume on image files with the data device direct as a mount's. The
/// device reads no more than those files hold, give or take a few windows:
/// neither the device's own read-ahead nor the volume's brings in the
/// other directories' files.
#[test]
fn a_cold_directory_read_reads_what_its_files_hold() {
    let tmp = scratch("dualfs-listing-reads");
    let (meta_path, data_path) = (tmp.path().join("meta.img"), tmp.path().join("data.img"));
    std::fs::File::create(&meta_path).unwrap().set_len(8192 * BLOCK_SIZE as u64).unwrap();
    std::fs::File::create(&data_path).unwrap().set_len(65536 * BLOCK_SIZE as u64).unwrap();
    let open = || -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        (
            Arc::new(FileDevice::open(&meta_path, false, false).unwrap()),
            Arc::new(FileDevice::open_direct(&data_path, false, false).unwrap()),
        )
    };
    let (meta, data) = open();
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 65536, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let v = Volume::open(meta, data, MountOptions::default()).unwrap();
    let dirs: Vec<InodeNo> =
        (0..4).map(|d| v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino).collect();
    let size = |f: u32| 1500 + (f as usize * 7919) % 8000;
    for f in 0..400u32 {
        let ino = v.create(dirs[f as usize % 4], format!("f{f}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(ino, 0, &content(f, 0, size(f))).unwrap();
        // A commit now and then, as the periodic one does during untar:
        // the directories' files lie interleaved, one run per commit.
        if f % 8 == 7 {
            v.commit().unwrap();
        }
    }
    let big = v.create(InodeNo::ROOT, b"big", 0o644, Creds::ROOT).unwrap().ino;
    v.write(big, 0, &vec![7u8; 8 << 20]).unwrap();
    v.close().unwrap();
    uncache(&data_path);
    assert_eq!(cached_bytes(&data_path), 0, "nothing cached before the cold reads");

    let (meta, data) = open();
    let v = Volume::open(meta, data, MountOptions::default()).unwrap();
    let files = listing(&v, dirs[1]);
    assert_eq!(files.len(), 100);
    let mut held = 0u64;
    for (name, ino) in &files {
        let f: u32 = std::str::from_utf8(&name[1..]).unwrap().parse().unwrap();
        assert_eq!(v.read(*ino, 0, 1 << 20).unwrap(), content(f, 0, size(f)));
        held += size(f).div_ceil(BLOCK_SIZE) as u64 * BLOCK_SIZE as u64;
    }
    let read = cached_bytes(&data_path);
    assert!(read >= held, "{read} bytes cached, the files hold {held}: the small reads bypassed the cache");
    // A read that happens to continue the one before on the device brings
    // the device's next window in (`FileDevice::READ_AHEAD`): reading in
    // hash order, a few of the hundred do.
    let bound = held + held / 10 + 8 * FileDevice::READ_AHEAD;
    assert!(read <= bound, "a cold read of files holding {held} bytes read {read} from the device (bound {bound})");
    v.close().unwrap();
}

/// Files read ahead from a listing, then overwritten in place before
/// their own reads come: the reads return what was written last (a direct
/// write drops the cached pages under it).
#[test]
fn files_read_ahead_then_overwritten_read_as_written() {
    let tmp = scratch("dualfs-listing-reads");
    let (meta_path, data_path) = (tmp.path().join("meta.img"), tmp.path().join("data.img"));
    std::fs::File::create(&meta_path).unwrap().set_len(8192 * BLOCK_SIZE as u64).unwrap();
    std::fs::File::create(&data_path).unwrap().set_len(65536 * BLOCK_SIZE as u64).unwrap();
    let open = || -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        (
            Arc::new(FileDevice::open(&meta_path, false, false).unwrap()),
            Arc::new(FileDevice::open_direct(&data_path, false, false).unwrap()),
        )
    };
    let (meta, data) = open();
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let v = Volume::open(meta, data, MountOptions::default()).unwrap();
    let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let size = |f: u32| 4096 + (f as usize % 7) * 2500;
    for f in 0..48u32 {
        let ino = v.create(dir, format!("f{f}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(ino, 0, &content(f, 0, size(f))).unwrap();
    }
    v.close().unwrap();

    let (meta, data) = open();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let files = listing(&v, dir);
    let f_of = |name: &[u8]| -> u32 { std::str::from_utf8(&name[1..]).unwrap().parse().unwrap() };
    // Two reads in order: the next files are asked for.
    for (name, ino) in &files[..2] {
        assert_eq!(v.read(*ino, 0, 1 << 20).unwrap(), content(f_of(name), 0, size(f_of(name))));
    }
    assert!(cached_bytes(&data_path) >= 64 * 1024, "the next files were read ahead");
    // Every later file overwritten in place (same size: the same blocks).
    for (name, ino) in &files[2..] {
        v.write(*ino, 0, &content(f_of(name), 1, size(f_of(name)))).unwrap();
    }
    v.commit().unwrap();
    for (name, ino) in &files[2..] {
        let f = f_of(name);
        assert_eq!(v.read(*ino, 0, 1 << 20).unwrap(), content(f, 1, size(f)), "file {f} after its overwrite");
    }
    v.close().unwrap();
    let r = dualfs_engine::check::check(meta, data).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}

/// Memory devices holding `dirs` directories of `per_dir` small files each.
fn directories(dirs: u32, per_dir: u32) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>, Vec<InodeNo>) {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(65536));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 16384, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let mut inos = Vec::new();
    for d in 0..dirs {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for f in 0..per_dir {
            let ino = v.create(dir, format!("f{f}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            v.write(ino, 0, &content(f, d, 3000 + f as usize * 100)).unwrap();
        }
        inos.push(dir);
    }
    v.close().unwrap();
    (meta, data, inos)
}

fn asked_ahead(asked: &[Asked]) -> HashSet<u64> {
    asked
        .iter()
        .flat_map(|a| match *a {
            Asked::Ahead(f, n) => f..f + n,
            Asked::Read(..) => 0..0,
        })
        .collect()
}

/// A reader that reads the directories it lists (grep -r) gets the next
/// directory's first files asked for as soon as it lists it, before its
/// first read; a lister that reads nothing (find, ls -l) gets nothing
/// asked for at all.
#[test]
fn a_reader_of_what_it_lists_gets_a_new_listing_read_ahead_and_a_lister_nothing() {
    let (meta, data, dirs) = directories(3, 12);
    let rec = Arc::new(Recording { inner: data.clone(), asked: Mutex::new(Vec::new()) });
    let v = Volume::open(meta.clone(), rec.clone(), MountOptions::default()).unwrap();
    for &d in &dirs {
        listing(&v, d);
        for (_, ino) in listing(&v, d) {
            v.getattr(ino).unwrap();
        }
    }
    assert_eq!(asked_ahead(&rec.take()).len(), 0, "listed and stat'ed, nothing read: nothing asked for");
    v.close().unwrap();

    let rec = Arc::new(Recording { inner: data.clone(), asked: Mutex::new(Vec::new()) });
    let v = Volume::open(meta, rec.clone(), MountOptions::default()).unwrap();
    let first = listing(&v, dirs[0]);
    v.read(first[0].1, 0, 1 << 20).unwrap();
    rec.take();
    let second = listing(&v, dirs[1]);
    let ahead = asked_ahead(&rec.take());
    assert!(!ahead.is_empty(), "the second directory was not read ahead when listed");
    v.read(second[0].1, 0, 1 << 20).unwrap();
    let read = blocks_of(&rec.take());
    assert!(!read.is_empty() && read.is_subset(&ahead), "the second directory's first file was not asked for ahead");
    v.close().unwrap();
}
