//! The cleaner: churn many times the meta-data device's size through a small
//! volume without ENOSPC while live meta-data stays below 70%; fill it with
//! live meta-data until ENOSPC, delete, and go on.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_engine::{DeviceRole, Error, Volume};

const META_BLOCKS: u64 = 16384; // 64 MiB

fn setup() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(META_BLOCKS));
    let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 16));
    Volume::format(meta.clone(), data.clone(), &MkfsOptions::default()).unwrap();
    (meta, data)
}

fn options() -> MountOptions {
    MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() }
}

/// A small deterministic PRNG (xorshift64*): the test must replay exactly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn value(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed as usize).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

fn live_fraction(v: &Volume) -> f64 {
    v.with_fs(|fs| {
        let n = fs.log.superblock().segment_count;
        let live: u64 = (0..n).map(|s| fs.log.segment_live_bytes(dualfs_engine::types::SegmentNo(s))).sum();
        live as f64 / (f64::from(n) * f64::from(fs.log.superblock().segment_blocks) * 4096.0)
    })
}

#[test]
fn churn_of_twenty_times_the_device_never_runs_out_of_space() {
    let (meta, data) = setup();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let mut rng = Rng(0x5EED);
    // name -> (inode, xattr seed)
    let mut files: HashMap<u64, (InodeNo, u64)> = HashMap::new();
    let mut next_name = 0u64;
    let target_files = 3000;
    let mut max_live: f64 = 0.0;
    let mut ops = 0u64;
    while v.with_fs(|fs| fs.log.stats().meta_blocks_written) < 20 * META_BLOCKS {
        ops += 1;
        let r = rng.below(100);
        if files.len() < target_files || r < 30 {
            let name = next_name;
            next_name += 1;
            let seed = rng.next();
            let a = v.create(dir, format!("f{name}").as_bytes(), 0o644, Creds::ROOT).unwrap();
            v.forget(a.ino, 1).unwrap();
            v.setxattr(a.ino, b"user.v", &value(seed, 3000), SetMode::Any).unwrap();
            files.insert(name, (a.ino, seed));
        }
        if r < 30 && files.len() > target_files {
            let victim = *files.keys().nth(rng.below(files.len() as u64) as usize).unwrap();
            v.unlink(dir, format!("f{victim}").as_bytes()).unwrap();
            files.remove(&victim);
        } else if r < 90 && !files.is_empty() {
            let k = *files.keys().nth(rng.below(files.len() as u64) as usize).unwrap();
            let seed = rng.next();
            let ino = files[&k].0;
            v.setxattr(ino, b"user.v", &value(seed, 3000), SetMode::Any).unwrap();
            files.insert(k, (ino, seed));
        }
        if ops.is_multiple_of(200) {
            v.tick().unwrap();
            max_live = max_live.max(live_fraction(&v));
        }
    }
    assert!(max_live < 0.7, "the workload kept {max_live:.2} of the device live; it must stay below 0.7");
    let stats = v.cleaner_stats();
    assert!(stats.segments_freed > 50, "the cleaner freed only {} segments: {stats:?}", stats.segments_freed);
    for (name, (ino, seed)) in &files {
        let got = v.lookup(dir, format!("f{name}").as_bytes()).unwrap();
        assert_eq!(got.ino, *ino);
        assert_eq!(v.getxattr(*ino, b"user.v").unwrap(), value(*seed, 3000));
    }
    v.close().unwrap();
    let r = dualfs_engine::check::check(meta.clone(), data.clone()).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
    let v = Volume::open(meta, data, options()).unwrap();
    for (name, (_, seed)) in files.iter().take(200) {
        let a = v.lookup(dir, format!("f{name}").as_bytes()).unwrap();
        assert_eq!(v.getxattr(a.ino, b"user.v").unwrap(), value(*seed, 3000));
    }
    v.close().unwrap();
}

#[test]
fn live_meta_data_filling_the_device_gives_enospc_then_room_after_deletes() {
    let (meta, data) = setup();
    let v = Volume::open(meta.clone(), data.clone(), options()).unwrap();
    let mut made = 0u64;
    let err = loop {
        match v.create(InodeNo::ROOT, format!("f{made}").as_bytes(), 0o644, Creds::ROOT) {
            Ok(a) => {
                v.forget(a.ino, 1).unwrap();
                if let Err(e) = v.setxattr(a.ino, b"user.v", &value(made, 3000), SetMode::Any) {
                    break e;
                }
                made += 1;
            }
            Err(e) => break e,
        }
        if made.is_multiple_of(500) {
            v.tick().unwrap();
        }
        assert!(made < 100_000, "never filled");
    };
    assert!(matches!(err, Error::NoSpace(DeviceRole::Meta)), "{err}");
    let full = live_fraction(&v);
    assert!(full > 0.75, "ENOSPC with only {full:.2} of the device live");
    // Delete every other file: half the live data goes, scattered over
    // every segment; only the cleaner can turn that into free segments.
    for i in (0..made).step_by(2) {
        v.unlink(InodeNo::ROOT, format!("f{i}").as_bytes()).unwrap();
    }
    for i in 0..made / 4 {
        let a = v.create(InodeNo::ROOT, format!("g{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
        v.forget(a.ino, 1).unwrap();
        v.setxattr(a.ino, b"user.v", &value(i, 3000), SetMode::Any).unwrap();
        if i % 500 == 0 {
            v.tick().unwrap();
        }
    }
    for i in (1..made).step_by(2).take(300) {
        let a = v.lookup(InodeNo::ROOT, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(v.getxattr(a.ino, b"user.v").unwrap(), value(i, 3000));
    }
    v.close().unwrap();
    let r = dualfs_engine::check::check(meta, data).unwrap();
    assert!(r.is_clean(), "fsck: {:#?}", r.problems);
}
