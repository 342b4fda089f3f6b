//! `st_blocks` counts data as soon as it is written, before write-back
//! allocates it, and stays the same across the commit that does.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, FallocateMode, MkfsOptions, MountOptions, SetAttr};

fn volume() -> Volume {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(16384));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    Volume::open(meta, data, MountOptions::default()).unwrap()
}

/// 512-byte units of `n` 4 KiB blocks.
const fn units(n: u64) -> u64 {
    n * 8
}

fn blocks(v: &Volume, ino: InodeNo) -> u64 {
    v.getattr(ino).unwrap().blocks
}

#[test]
fn written_data_is_counted_before_and_after_write_back() {
    let v = volume();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &[1u8; 100]).unwrap();
    assert_eq!(blocks(&v, f), 0, "inline data takes no data blocks");
    v.write(f, 0, &vec![1u8; 10 * 4096 + 1]).unwrap();
    assert_eq!(blocks(&v, f), units(11), "11 blocks reserved, none allocated yet");
    // A sparse write: only the blocks written count.
    v.write(f, 100 * 4096, &[2u8; 10]).unwrap();
    assert_eq!(blocks(&v, f), units(12));
    v.commit().unwrap();
    assert_eq!(blocks(&v, f), units(12), "write-back allocates exactly what was counted");
    // Overwriting allocated blocks adds nothing; extending does.
    v.write(f, 4096, &[3u8; 8192]).unwrap();
    assert_eq!(blocks(&v, f), units(12));
    v.write(f, 101 * 4096, &[3u8; 4096]).unwrap();
    assert_eq!(blocks(&v, f), units(13));
    // Truncating away dirty and allocated blocks gives both back.
    v.setattr(f, &SetAttr { size: Some(5 * 4096), ..SetAttr::default() }).unwrap();
    assert_eq!(blocks(&v, f), units(5));
    v.commit().unwrap();
    assert_eq!(blocks(&v, f), units(5));
}

#[test]
fn punching_and_preallocating_keep_the_count_right() {
    let v = volume();
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &vec![9u8; 8 * 4096]).unwrap();
    let punch = FallocateMode::PUNCH_HOLE;
    v.fallocate(f, 2 * 4096, 3 * 4096, punch).unwrap();
    assert_eq!(blocks(&v, f), units(5), "dirty pages punched out give their reservations back");
    v.fallocate(f, 0, 20 * 4096, FallocateMode::default()).unwrap();
    assert_eq!(blocks(&v, f), units(20), "holes preallocated, dirty pages still reserved");
    v.commit().unwrap();
    assert_eq!(blocks(&v, f), units(20));
    let g = v.create(InodeNo::ROOT, b"g", 0o644, Creds::ROOT).unwrap().ino;
    v.write(g, 0, &vec![1u8; 3 * 4096]).unwrap();
    v.unlink(InodeNo::ROOT, b"g").unwrap();
    v.commit().unwrap();
    let free_before = v.statfs().bfree;
    let h = v.create(InodeNo::ROOT, b"h", 0o644, Creds::ROOT).unwrap().ino;
    v.write(h, 0, &vec![1u8; 7 * 4096]).unwrap();
    assert_eq!(free_before - v.statfs().bfree, 7, "statfs and st_blocks agree on dirty data");
    assert_eq!(blocks(&v, h), units(7));
}
