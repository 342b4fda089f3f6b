//! FALLOCATE requests with the range modes, as a kernel that passes them
//! sends them: collapse, insert and unshare reach the volume with the
//! kernel's rules, and the adapter refuses what `vfs_fallocate` refuses.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::device::MemoryDevice;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_fuse::{AdapterOptions, Caller, DualFs, Errno};

const B: u64 = 4096;
const ROOT: Caller = Caller { uid: 0, gid: 0, pid: 1 };

fn adapter() -> (DualFs, u64, Vec<u8>) {
    let (meta, data) = (Arc::new(MemoryDevice::new(4096)), Arc::new(MemoryDevice::new(16384)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let vol = Volume::open(meta, data, MountOptions::default()).unwrap();
    let f = vol.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    let bytes: Vec<u8> = (0..8 * B).map(|i| (i / B) as u8 + 1).collect();
    vol.write(f, 0, &bytes).unwrap();
    (DualFs::new(Arc::new(vol), AdapterOptions::default()), f.0, bytes)
}

fn contents(fs: &DualFs, node: u64, len: u64) -> Vec<u8> {
    fs.read(node, 0, len as u32, <[u8]>::to_vec).unwrap()
}

#[test]
fn collapse_insert_and_unshare_requests_reach_the_volume() {
    let (fs, f, mut model) = adapter();
    fs.fallocate(ROOT, f, B, 2 * B, libc::FALLOC_FL_COLLAPSE_RANGE).unwrap();
    model.drain(B as usize..3 * B as usize);
    assert_eq!(contents(&fs, f, 16 * B), model, "after the collapse");
    fs.fallocate(ROOT, f, 2 * B, B, libc::FALLOC_FL_INSERT_RANGE).unwrap();
    model.splice(2 * B as usize..2 * B as usize, vec![0; B as usize]);
    assert_eq!(contents(&fs, f, 16 * B), model, "after the insert");
    let unshare = libc::FALLOC_FL_UNSHARE_RANGE | libc::FALLOC_FL_KEEP_SIZE;
    fs.fallocate(ROOT, f, 0, 4 * B, unshare).unwrap();
    assert_eq!(contents(&fs, f, 16 * B), model, "an unshare changes no byte");
}

#[test]
fn the_kernels_rules_give_the_kernels_errors() {
    let (fs, f, model) = adapter();
    let err = |offset: u64, len: u64, mode: i32| fs.fallocate(ROOT, f, offset, len, mode).unwrap_err();
    assert_eq!(err(100, B, libc::FALLOC_FL_COLLAPSE_RANGE), Errno::EINVAL, "unaligned");
    assert_eq!(err(B, 7 * B, libc::FALLOC_FL_COLLAPSE_RANGE), Errno::EINVAL, "reaching the end");
    assert_eq!(err(8 * B, B, libc::FALLOC_FL_INSERT_RANGE), Errno::EINVAL, "at the end");
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(err(0, B, libc::FALLOC_FL_INSERT_RANGE | keep), Errno::EINVAL, "insert keeping the size");
    let both = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
    assert_eq!(err(0, B, both), Errno::EOPNOTSUPP, "two range modes");
    assert_eq!(contents(&fs, f, 16 * B), model, "no refused call changed a byte");
}
