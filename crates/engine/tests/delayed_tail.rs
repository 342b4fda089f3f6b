//! Delayed tails: a periodic commit may leave the newly written end of a
//! file for later, recording on disk the size its written data reaches.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
    now: Arc<AtomicI64>,
}

impl Rig {
    fn new() -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(65536)));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        Rig { meta, data, now: Arc::new(AtomicI64::new(1_700_000_000)) }
    }

    fn open(&self, data_expire: Duration) -> Volume {
        let now = self.now.clone();
        let options = MountOptions { commit_interval: Duration::ZERO, data_expire, ..MountOptions::default() };
        Volume::open_with_clock(
            self.meta.clone(),
            self.data.clone(),
            options,
            Arc::new(move || Timestamp::new(now.load(Ordering::Relaxed), 0)),
        )
        .unwrap()
    }

    /// The volume as a power cut now would leave it, recovered.
    fn crash(&self) -> Volume {
        let meta: Arc<dyn BlockDevice> = Arc::new(self.meta.snapshot());
        let data: Arc<dyn BlockDevice> = Arc::new(self.data.snapshot());
        let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
        let r = dualfs_engine::check::check(meta, data).unwrap();
        assert!(r.is_clean(), "fsck: {:#?}", r.problems);
        v
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_young_tail_waits_and_the_disk_shows_the_file_cut_where_its_data_ends() {
    let rig = Rig::new();
    let v = rig.open(Duration::from_secs(30));
    let f = v.create(InodeNo::ROOT, b"log", 0o644, Creds::ROOT).unwrap().ino;
    let first = bytes(8192, 1);
    v.write(f, 0, &first).unwrap();
    v.fsync(f).unwrap();
    let more = bytes(5000, 2);
    v.write(f, 8192, &more).unwrap();
    let g = v.create(InodeNo::ROOT, b"later", 0o644, Creds::ROOT).unwrap().ino;
    v.tick().unwrap();

    // The create that followed the append is durable; the append's blocks
    // are not, and the size on disk stops where the written data does.
    let c = rig.crash();
    assert!(c.lookup(InodeNo::ROOT, b"later").is_ok());
    let a = c.lookup(InodeNo::ROOT, b"log").unwrap();
    assert_eq!(a.size, 8192);
    assert_eq!(c.read(a.ino, 0, 20_000).unwrap(), first);

    // Once the tail is older than data_expire, the next commit writes it.
    rig.now.fetch_add(31, Ordering::Relaxed);
    v.write(g, 0, b"x").unwrap();
    v.tick().unwrap();
    let c = rig.crash();
    let a = c.lookup(InodeNo::ROOT, b"log").unwrap();
    assert_eq!(a.size, 13_192);
    assert_eq!(c.read(a.ino, 8192, 20_000).unwrap(), more);
    v.close().unwrap();
}

#[test]
fn fsync_and_a_zero_expiry_write_every_byte() {
    let rig = Rig::new();
    let v = rig.open(Duration::from_secs(30));
    let f = v.create(InodeNo::ROOT, b"a", 0o644, Creds::ROOT).unwrap().ino;
    let d = bytes(10_000, 3);
    v.write(f, 0, &d).unwrap();
    v.fsync(f).unwrap();
    let c = rig.crash();
    assert_eq!(c.read(c.lookup(InodeNo::ROOT, b"a").unwrap().ino, 0, 20_000).unwrap(), d);
    v.close().unwrap();

    let rig = Rig::new();
    let v = rig.open(Duration::ZERO);
    let f = v.create(InodeNo::ROOT, b"a", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &d).unwrap();
    v.tick().unwrap();
    let c = rig.crash();
    assert_eq!(c.read(c.lookup(InodeNo::ROOT, b"a").unwrap().ino, 0, 20_000).unwrap(), d);
    v.close().unwrap();
}

#[test]
fn inline_bytes_that_move_to_a_block_are_never_cut_away() {
    let rig = Rig::new();
    let v = rig.open(Duration::from_secs(30));
    let f = v.create(InodeNo::ROOT, b"small", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"durable inline bytes").unwrap();
    v.fsync(f).unwrap();
    v.write(f, 20, &bytes(6000, 4)).unwrap();
    v.tick().unwrap();
    let c = rig.crash();
    let a = c.lookup(InodeNo::ROOT, b"small").unwrap();
    assert!(a.size >= 20, "the fsync'd bytes survive");
    assert_eq!(&c.read(a.ino, 0, 20).unwrap()[..], b"durable inline bytes");
    v.close().unwrap();
}
