//! Replacement: a file truncated to zero and rewritten keeps its old
//! contents on disk until the rewrite is complete (closed), and is let go
//! of by fsync, by age, by size, and by changes its old record would undo.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::namespace::replace::HOLD_MAX_BYTES;
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions, SetAttr};

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

    fn open(&self) -> Volume {
        let now = self.now.clone();
        let options = MountOptions {
            commit_interval: Duration::ZERO,
            data_expire: Duration::from_secs(30),
            dirty_data_limit: 64 << 20,
            ..MountOptions::default()
        };
        Volume::open_with_clock(
            self.meta.clone(),
            self.data.clone(),
            options,
            Arc::new(move || Timestamp::new(now.load(Ordering::Relaxed), 0)),
        )
        .unwrap()
    }

    /// The volume as a power cut now would leave it, recovered and checked.
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

fn contents(v: &Volume, name: &[u8]) -> Vec<u8> {
    let a = v.lookup(InodeNo::ROOT, name).unwrap();
    v.read(a.ino, 0, a.size as usize + 1).unwrap()
}

fn truncate(v: &Volume, ino: InodeNo) {
    v.setattr(ino, &SetAttr { size: Some(0), ..SetAttr::default() }).unwrap();
}

/// A file `name` with `old` on disk, synced.
fn durable_file(v: &Volume, name: &[u8], old: &[u8]) -> InodeNo {
    let f = v.create(InodeNo::ROOT, name, 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, old).unwrap();
    v.sync().unwrap();
    f
}

#[test]
fn periodic_commits_keep_the_old_contents_until_the_rewrite_is_closed() {
    let rig = Rig::new();
    let v = rig.open();
    let (old, new) = (bytes(20_000, 1), bytes(30_000, 2));
    let f = durable_file(&v, b"cfg", &old);
    truncate(&v, f);
    assert!(v.held_for_replacement(f));
    v.write(f, 0, &new[..10_000]).unwrap();
    let g = v.create(InodeNo::ROOT, b"later", 0o644, Creds::ROOT).unwrap().ino;
    v.tick().unwrap();
    let c = rig.crash();
    assert!(c.lookup(InodeNo::ROOT, b"later").is_ok(), "what came after the truncation is committed");
    assert_eq!(contents(&c, b"cfg"), old, "the file being rewritten shows its old contents");

    v.write(f, 10_000, &new[10_000..]).unwrap();
    v.file_closed(f);
    v.write(g, 0, b"x").unwrap();
    v.tick().unwrap();
    assert!(!v.held_for_replacement(f));
    let c = rig.crash();
    assert_eq!(contents(&c, b"cfg"), new, "the commit after the close writes the new contents whole");
    v.close().unwrap();
}

#[test]
fn fsync_commits_the_rewrite_as_it_stands() {
    let rig = Rig::new();
    let v = rig.open();
    let f = durable_file(&v, b"cfg", &bytes(9000, 3));
    truncate(&v, f);
    v.write(f, 0, b"half").unwrap();
    v.fsync(f).unwrap();
    assert!(!v.held_for_replacement(f));
    assert_eq!(contents(&rig.crash(), b"cfg"), b"half");
    v.close().unwrap();
}

#[test]
fn a_hold_ends_when_the_rewrite_is_old_or_large() {
    let rig = Rig::new();
    let v = rig.open();
    let (old, new) = (bytes(9000, 4), bytes(5000, 5));
    let f = durable_file(&v, b"old", &old);
    truncate(&v, f);
    v.write(f, 0, &new).unwrap();
    v.tick().unwrap();
    assert!(v.held_for_replacement(f), "young: still held");
    rig.now.fetch_add(31, Ordering::Relaxed);
    v.tick().unwrap();
    assert!(!v.held_for_replacement(f), "held past data_expire: let go");
    assert_eq!(contents(&rig.crash(), b"old"), new);

    let g = durable_file(&v, b"big", &old);
    truncate(&v, g);
    let big = bytes(HOLD_MAX_BYTES + 4096, 6);
    v.write(g, 0, &big).unwrap();
    v.tick().unwrap();
    assert!(!v.held_for_replacement(g), "more than HOLD_MAX_BYTES held: let go");
    assert_eq!(contents(&rig.crash(), b"big").len(), big.len());
    v.close().unwrap();
}

#[test]
fn changes_the_old_record_would_undo_end_the_hold() {
    let rig = Rig::new();
    let v = rig.open();
    let old = bytes(9000, 7);
    let f = durable_file(&v, b"f", &old);
    truncate(&v, f);
    v.setattr(f, &SetAttr { mode: Some(0o600), ..SetAttr::default() }).unwrap();
    assert!(!v.held_for_replacement(f), "chmod");
    v.tick().unwrap();
    let c = rig.crash();
    let a = c.lookup(InodeNo::ROOT, b"f").unwrap();
    assert_eq!((a.size, a.perm), (0, 0o600), "the mode change is not lost to the old record");

    let g = durable_file(&v, b"g", &old);
    truncate(&v, g);
    v.link(g, InodeNo::ROOT, b"g2").unwrap();
    v.forget(g, 1).unwrap();
    assert!(!v.held_for_replacement(g), "link");
    v.tick().unwrap();
    assert_eq!(rig.crash().lookup(InodeNo::ROOT, b"g2").unwrap().nlink, 2);
    v.close().unwrap();
}

#[test]
fn a_file_with_data_not_yet_durable_is_not_held() {
    let rig = Rig::new();
    let v = rig.open();
    let f = v.create(InodeNo::ROOT, b"young", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &bytes(9000, 8)).unwrap();
    truncate(&v, f);
    assert!(!v.held_for_replacement(f), "its record in memory names data that is not on disk");
    v.close().unwrap();
}
