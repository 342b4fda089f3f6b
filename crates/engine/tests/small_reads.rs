//! Small reads of a data device opened with `O_DIRECT` go through a second,
//! buffered descriptor, so that the device's read-ahead brings in the
//! files that follow (DESIGN.md, "Data space"). The writes stay
//! direct; these tests check that a read after a write never sees what the
//! read-ahead cached before it, on the device and through a volume, and
//! that the small reads do use the page cache while the large ones do not.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::disk::{cached_bytes, scratch};
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

fn image(path: &Path, blocks: u64) {
    std::fs::File::create(path).unwrap().set_len(blocks * BLOCK_SIZE as u64).unwrap();
}

/// A block of `tag` repeated, so that a stale one shows which it is.
fn block(tag: u32) -> Vec<u8> {
    tag.to_le_bytes().iter().copied().cycle().take(BLOCK_SIZE).collect()
}

fn tag_of(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// A small read that continues the one before leaves the window after it
/// in the page cache (the read-ahead the buffered descriptor is for), one
/// alone only its own blocks, whatever the device's read-ahead; a large
/// read and the writes leave nothing there.
#[test]
fn small_reads_are_cached_and_large_ones_are_not() {
    let tmp = scratch("dualfs-small-reads");
    let path = tmp.path().join("data.img");
    image(&path, 1024);
    let dev = FileDevice::open_direct(&path, false, false).unwrap();
    let big = FileDevice::BUFFERED_READ_MAX + BLOCK_SIZE;
    let data: Vec<u8> = (0..1024u32).flat_map(block).collect();
    dev.write_blocks(0, &data).unwrap();
    dev.flush().unwrap();
    assert_eq!(cached_bytes(&path), 0, "direct writes leave no pages behind");
    let mut large = vec![0u8; big];
    dev.read_blocks(512, &mut large).unwrap();
    assert_eq!(large, data[512 * BLOCK_SIZE..512 * BLOCK_SIZE + big]);
    assert_eq!(cached_bytes(&path), 0, "a large read is direct");
    let mut one = vec![0u8; BLOCK_SIZE];
    dev.read_blocks(0, &mut one).unwrap();
    assert_eq!(tag_of(&one), 0);
    assert_eq!(cached_bytes(&path), BLOCK_SIZE as u64, "a read alone is exactly its blocks");
    dev.read_blocks(1, &mut one).unwrap();
    assert_eq!(tag_of(&one), 1);
    let window = 2 * BLOCK_SIZE as u64 + FileDevice::READ_AHEAD;
    assert_eq!(cached_bytes(&path), window, "a read that continues a run brings in the window after it");
    dev.read_blocks(900, &mut one).unwrap();
    assert_eq!(tag_of(&one), 900);
    assert_eq!(cached_bytes(&path), window + BLOCK_SIZE as u64, "a read elsewhere: exactly its blocks again");
}

/// Blocks the read-ahead cached, then overwritten directly, read back as
/// written: Linux drops cached pages over a direct write's range.
#[test]
fn a_read_after_an_overwrite_sees_the_new_data() {
    let tmp = scratch("dualfs-small-reads");
    let path = tmp.path().join("data.img");
    image(&path, 256);
    let dev = FileDevice::open_direct(&path, false, false).unwrap();
    let old: Vec<u8> = (0..256u32).flat_map(block).collect();
    dev.write_blocks(0, &old).unwrap();
    let mut one = vec![0u8; BLOCK_SIZE];
    for b in 0..256 {
        dev.read_blocks(b, &mut one).unwrap();
        assert_eq!(tag_of(&one), b as u32);
    }
    assert!(cached_bytes(&path) > 0);
    // Every other block, one at a time and in runs.
    for b in (0..128).step_by(2) {
        dev.write_blocks(b, &block(1000 + b as u32)).unwrap();
    }
    let run: Vec<u8> = (128..256u32).map(|b| b + 1000).flat_map(block).collect();
    dev.write_blocks(128, &run).unwrap();
    for b in 0..256u64 {
        dev.read_blocks(b, &mut one).unwrap();
        let want = if b >= 128 || b.is_multiple_of(2) { 1000 + b as u32 } else { b as u32 };
        assert_eq!(tag_of(&one), want, "block {b}");
    }
}

/// Small reads all over a range while another thread overwrites it: the
/// read-ahead runs into blocks being written. Once the writer is done,
/// every block reads as its last write.
#[test]
fn read_ahead_racing_direct_writes_leaves_nothing_stale() {
    let tmp = scratch("dualfs-small-reads");
    let path = tmp.path().join("data.img");
    let blocks = 512u64;
    image(&path, blocks);
    let dev = Arc::new(FileDevice::open_direct(&path, false, false).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (dev, done) = (dev.clone(), done.clone());
        std::thread::spawn(move || {
            let mut one = vec![0u8; BLOCK_SIZE];
            let mut b = 0u64;
            while !done.load(Ordering::Acquire) {
                dev.read_blocks(b, &mut one).unwrap();
                b = (b * 7 + 13) % blocks;
            }
        })
    };
    // Runs of 1 to 8 blocks, a different length in each round, so that
    // runs and read-ahead windows fall differently each time.
    let mut last = vec![0u32; blocks as usize];
    for round in 0..100u32 {
        for first in (0..blocks).step_by(8) {
            let n = (1 + (first / 8 + u64::from(round)) % 8).min(blocks - first);
            let tags: Vec<u32> = (first..first + n).map(|b| round << 16 | b as u32).collect();
            let run: Vec<u8> = tags.iter().copied().flat_map(block).collect();
            dev.write_blocks(first, &run).unwrap();
            last[first as usize..(first + n) as usize].copy_from_slice(&tags);
        }
    }
    done.store(true, Ordering::Release);
    reader.join().unwrap();
    let mut one = vec![0u8; BLOCK_SIZE];
    for b in 0..blocks {
        dev.read_blocks(b, &mut one).unwrap();
        assert_eq!(tag_of(&one), last[b as usize], "block {b}");
    }
}

fn content(file: u32, version: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 31 + file * 7 + version * 101) as u8).collect()
}

/// Through a volume on image files, its data device direct as a mount's:
/// files read cold (each read pulls the next ones into the page cache),
/// then overwritten in place, new files written into the space the
/// read-ahead cached, others deleted: every read after a commit, and after
/// a reopen, returns what was last written.
#[test]
fn a_volume_never_reads_stale_read_ahead() {
    let tmp = scratch("dualfs-small-reads");
    let (meta_path, data_path) = (tmp.path().join("meta.img"), tmp.path().join("data.img"));
    image(&meta_path, 8192);
    image(&data_path, 65536);
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
    let sizes = |f: u32| 4096 + (f as usize % 5) * 3000;
    for f in 0..64u32 {
        let ino = v.create(dir, format!("f{f}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(ino, 0, &content(f, 0, sizes(f))).unwrap();
    }
    v.close().unwrap();

    let (meta, data) = open();
    let v = Volume::open(meta, data, MountOptions::default()).unwrap();
    let ino = |f: u32| v.lookup(dir, format!("f{f}").as_bytes()).unwrap().ino;
    for f in 0..64u32 {
        assert_eq!(v.read(ino(f), 0, 1 << 20).unwrap(), content(f, 0, sizes(f)), "file {f} cold");
    }
    assert!(cached_bytes(&data_path) > 0, "the cold reads went through the page cache");
    // Overwrite half in place, delete a quarter, create new ones after.
    for f in (0..64u32).step_by(2) {
        v.write(ino(f), 0, &content(f, 1, sizes(f))).unwrap();
    }
    for f in (1..64u32).step_by(4) {
        v.unlink(dir, format!("f{f}").as_bytes()).unwrap();
    }
    for f in 64..96u32 {
        let n = v.create(dir, format!("f{f}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(n, 0, &content(f, 1, sizes(f))).unwrap();
    }
    v.commit().unwrap();
    let expect = |f: u32| -> Option<Vec<u8>> {
        match f {
            _ if f >= 64 || f.is_multiple_of(2) => Some(content(f, 1, sizes(f))),
            _ if f % 4 == 1 => None,
            _ => Some(content(f, 0, sizes(f))),
        }
    };
    let check = |v: &Volume, when: &str| {
        for f in 0..96u32 {
            match (expect(f), v.lookup(dir, format!("f{f}").as_bytes())) {
                (Some(want), Ok(a)) => assert_eq!(v.read(a.ino, 0, 1 << 20).unwrap(), want, "file {f} {when}"),
                (None, Err(_)) => {}
                (want, got) => panic!("file {f} {when}: expected {:?}, lookup {:?}", want.map(|w| w.len()), got),
            }
        }
    };
    check(&v, "after the commit");
    v.close().unwrap();
    let (meta, data) = open();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    check(&v, "after a reopen");
    v.close().unwrap();
    let r = dualfs_engine::check::check(meta, data).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}
