//! Snapshot records (format 1.11): an older volume keeping a snapshot is
//! upgraded at its first writable mount (its records and list rewritten
//! with pins and the held count, the mount after reads them lazily), and
//! records a volume without the feature cannot carry are refused.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Volume;
use dualfs_engine::check::check;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::error::Error;
use dualfs_engine::format::superblock::{INCOMPAT_FSYNC_LOG, INCOMPAT_SNAPSHOT_RECORDS, Role, Superblock};
use dualfs_engine::meta_log::Log;
use dualfs_engine::types::{BLOCK_SIZE, InodeNo};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

fn devices() -> (Arc<MemoryDevice>, Arc<MemoryDevice>) {
    (Arc::new(MemoryDevice::new(4096)), Arc::new(MemoryDevice::new(1 << 16)))
}

fn superblock(meta: &MemoryDevice) -> Superblock {
    let mut b = vec![0u8; BLOCK_SIZE];
    meta.read_blocks(0, &mut b).unwrap();
    Superblock::decode(&b).unwrap()
}

/// Rewrites both superblock copies with `incompat` changed by `f`.
fn set_incompat(meta: &MemoryDevice, data: &MemoryDevice, f: impl Fn(u64) -> u64) {
    let sb = superblock(meta);
    let sb = Superblock { incompat: f(sb.incompat), ..sb };
    meta.write_blocks(0, &sb.encode()).unwrap();
    data.write_blocks(0, &Superblock { role: Role::Data, ..sb }.encode()).unwrap();
}

/// Files, a snapshot of them, and some of them deleted from the live tree
/// (the snapshot then holds free blocks).
fn keep_a_snapshot(v: &Volume) {
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    for j in 0..20u8 {
        let f = v.create(d, format!("f{j}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
        v.write(f, 0, &vec![j; 20_000]).unwrap();
    }
    v.snapshot_create("old").unwrap();
    for j in 0..5 {
        v.unlink(d, format!("f{j}").as_bytes()).unwrap();
    }
}

#[test]
fn an_older_volume_keeping_a_snapshot_gets_its_records_at_its_first_writable_mount() {
    let (meta, data) = devices();
    // Made for older readers: snapshots written without records.
    let opts = MkfsOptions { fsync_log: false, segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    keep_a_snapshot(&v);
    v.close().unwrap();
    assert_eq!(superblock(&meta).incompat & INCOMPAT_SNAPSHOT_RECORDS, 0);
    let (log, _) = Log::open_lazily(meta.clone(), data.clone(), 256, true).unwrap();
    assert!(!log.snapshots()[0].lazy, "a list without the held count is loaded whole");
    drop(log);
    // As a volume of a writer before 1.11 with the fsync log.
    set_incompat(&meta, &data, |i| i | INCOMPAT_FSYNC_LOG);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let free = v.statfs().bfree;
    v.close().unwrap();
    let sb = superblock(&meta);
    assert_ne!(sb.incompat & INCOMPAT_SNAPSHOT_RECORDS, 0, "the writable mount sets the feature");
    assert_eq!(sb.minor, 11);
    // The records and the list were rewritten: the next mount reads them.
    let (log, _) = Log::open_lazily(meta.clone(), data.clone(), 256, true).unwrap();
    assert!(log.snapshots()[0].lazy, "the upgraded record is read lazily");
    assert!(log.space().held_lazily());
    drop(log);
    let report = check(meta.clone(), data.clone()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    assert_eq!(v.statfs().bfree, free, "the held count carried is the one counted");
    let d = v.lookup(InodeNo::ROOT, b"d").unwrap().ino;
    let f = v.lookup(d, b"f9").unwrap().ino;
    v.write(f, 0, &[0xAAu8; 8192]).unwrap();
    v.close().unwrap();
    let snap = Volume::open_snapshot(meta.clone(), data.clone(), "old", MountOptions::default()).unwrap();
    let d = snap.lookup(InodeNo::ROOT, b"d").unwrap().ino;
    for j in [0u8, 9] {
        let f = snap.lookup(d, format!("f{j}").as_bytes()).unwrap().ino;
        assert_eq!(snap.read(f, 0, 20_000).unwrap(), vec![j; 20_000]);
    }
}

#[test]
fn records_on_a_volume_without_the_feature_are_refused() {
    let (meta, data) = devices();
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let v = Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    keep_a_snapshot(&v);
    v.close().unwrap();
    set_incompat(&meta, &data, |i| i & !INCOMPAT_SNAPSHOT_RECORDS);
    let err = Volume::open(meta.clone(), data.clone(), MountOptions::default()).err().unwrap();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("SNAPSHOT_RECORDS"), "{err}");
}
