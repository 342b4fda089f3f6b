//! Migrating the meta-data or the data device to another: the
//! volume stays in use while the copy runs, files written and fsync'd
//! between its steps and from another thread; afterwards the live volume
//! and the new pair, opened again, read the same bytes, fsck finds
//! nothing, and the old device no longer pairs. A replacement that is too
//! small is refused with nothing changed.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::error::DeviceRole;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};
use dualfs_engine::{Error, Volume};

const META_BLOCKS: u64 = 1 << 14;
const DATA_BLOCKS: u64 = 1 << 16;

type Pair = (Arc<MemoryDevice>, Arc<MemoryDevice>);

fn rig() -> Pair {
    let (meta, data) = (Arc::new(MemoryDevice::new(META_BLOCKS)), Arc::new(MemoryDevice::new(DATA_BLOCKS)));
    let opts = MkfsOptions { segment_blocks: 256, group_blocks: 4096, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    (meta, data)
}

fn open(p: &Pair) -> Result<Volume, Error> {
    Volume::open(p.0.clone(), p.1.clone(), MountOptions::default())
}

fn bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
}

/// Files of many sizes over a few directories; (path, contents).
fn fill(v: &Volume) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for d in 0..4 {
        let dir = v.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..60 {
            let name = format!("file-{i}");
            let f = v.create(dir, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            let data = bytes(d * 100 + i, 100 + (i * 4099) % 70_000);
            v.write(f, 0, &data).unwrap();
            out.push((format!("d{d}/{name}").into_bytes(), data));
        }
    }
    out
}

fn lookup(v: &Volume, path: &[u8]) -> InodeNo {
    path.split(|&b| b == b'/').fold(InodeNo::ROOT, |at, n| v.lookup(at, n).unwrap().ino)
}

fn check_files(v: &Volume, files: &[(Vec<u8>, Vec<u8>)]) {
    for (path, want) in files {
        let ino = lookup(v, path);
        assert_eq!(v.getattr(ino).unwrap().size, want.len() as u64, "{}", String::from_utf8_lossy(path));
        assert!(v.read(ino, 0, want.len()).unwrap() == *want, "{} differs", String::from_utf8_lossy(path));
    }
}

fn fsck_clean(p: &Pair) {
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (p.0.clone(), p.1.clone());
    let r = dualfs_engine::check::check(m, d).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

/// Migrates `role` of a filled volume to `new` while files are written:
/// in the copy's progress callback (between its steps) and by a thread.
fn migrate_while_writing(role: DeviceRole, new_blocks: u64) {
    let old = rig();
    let v = Arc::new(open(&old).unwrap());
    let mut files = fill(&v);
    v.sync().unwrap();
    // Something freed and not yet reused: stale blocks the copy may skip.
    let gone = v.lookup(InodeNo::ROOT, b"d3").unwrap().ino;
    for i in 0..30 {
        v.unlink(gone, format!("file-{i}").as_bytes()).unwrap();
    }
    files.retain(|(p, _)| !(p.starts_with(b"d3/") && (0..30).any(|i| p == format!("d3/file-{i}").as_bytes())));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (v, stop) = (v.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = v.create(InodeNo::ROOT, b"appended", 0o644, Creds::ROOT).unwrap().ino;
            let mut all = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) || n < 8 {
                let chunk = bytes(n, 10_000);
                v.write(f, all.len() as u64, &chunk).unwrap();
                all.extend_from_slice(&chunk);
                if n % 4 == 0 {
                    v.fsync(f).unwrap();
                }
                n += 1;
            }
            all
        })
    };
    let new = Arc::new(MemoryDevice::new(new_blocks));
    let mut written = Vec::new();
    let mut steps = 0;
    let r = v
        .migrate(role, new.clone(), &mut |_, _| {
            steps += 1;
            // Between copy steps: new files, and overwrites of old ones.
            let name = format!("during-{steps}");
            let f = v.create(InodeNo::ROOT, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
            let data = bytes(steps, 3000 + steps * 1000);
            v.write(f, 0, &data).unwrap();
            if steps % 2 == 0 {
                v.fsync(f).unwrap();
            }
            written.push((name.into_bytes(), data));
            let over = lookup(&v, b"d0/file-7");
            v.write(over, 100, &[steps as u8; 5000]).unwrap();
        })
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let appended = writer.join().unwrap();
    assert!(steps >= 2, "the copy reported progress {steps} times");
    assert!(r.copied_blocks > 0, "{r:?}");
    assert_ne!(r.old_uuid, r.new_uuid);
    let over = &mut files.iter_mut().find(|(p, _)| p == b"d0/file-7").unwrap().1;
    over[100..5100].fill(steps as u8);
    files.extend(written);
    files.push((b"appended".to_vec(), appended));
    // Files written after the switch go to the new device only.
    let after = v.create(InodeNo::ROOT, b"after", 0o644, Creds::ROOT).unwrap().ino;
    v.write(after, 0, &bytes(99, 123_456)).unwrap();
    files.push((b"after".to_vec(), bytes(99, 123_456)));
    check_files(&v, &files);
    Arc::try_unwrap(v).unwrap().close().unwrap();
    let pair = match role {
        DeviceRole::Meta => (new.clone(), old.1.clone()),
        DeviceRole::Data => (old.0.clone(), new.clone()),
    };
    let v = open(&pair).unwrap();
    check_files(&v, &files);
    v.close().unwrap();
    fsck_clean(&pair);
    // The old pair is refused, in words that say so.
    match open(&old) {
        Err(Error::WrongVolume(why)) => assert!(why.contains("not a pair"), "{why}"),
        other => panic!("the old pair opened or failed otherwise: {other:?}"),
    }
}

#[test]
fn migrating_the_meta_data_device_keeps_every_byte_while_files_are_written() {
    // A larger device: the volume keeps its size (growing is resize's).
    migrate_while_writing(DeviceRole::Meta, META_BLOCKS + 4096);
}

#[test]
fn migrating_the_data_device_keeps_every_byte_while_files_are_written() {
    migrate_while_writing(DeviceRole::Data, DATA_BLOCKS);
}

#[test]
fn a_migrated_volume_keeps_its_size_on_a_larger_device_and_migrates_back() {
    let old = rig();
    let v = open(&old).unwrap();
    let files = fill(&v);
    let before = v.statfs().blocks;
    let bigger = Arc::new(MemoryDevice::new(DATA_BLOCKS * 2));
    v.migrate(DeviceRole::Data, bigger.clone(), &mut |_, _| {}).unwrap();
    assert_eq!(v.statfs().blocks, before, "a migration does not grow the volume");
    // And again, onto the first device: it pairs anew under a new uuid.
    v.migrate(DeviceRole::Data, old.1.clone(), &mut |_, _| {}).unwrap();
    let m2 = Arc::new(MemoryDevice::new(META_BLOCKS));
    v.migrate(DeviceRole::Meta, m2.clone(), &mut |_, _| {}).unwrap();
    v.close().unwrap();
    let pair = (m2, old.1.clone());
    let v = open(&pair).unwrap();
    check_files(&v, &files);
    v.close().unwrap();
    fsck_clean(&pair);
    assert!(open(&(old.0.clone(), bigger)).is_err());
}

#[test]
fn a_snapshot_survives_a_migration_of_the_data_device() {
    let old = rig();
    let v = open(&old).unwrap();
    let files = fill(&v);
    v.snapshot_create("before").unwrap();
    // Overwritten and deleted in the live tree: the snapshot alone holds
    // the old blocks, free in the live bitmap.
    let f = lookup(&v, b"d1/file-3");
    v.write(f, 0, &[0xab; 9000]).unwrap();
    let d2 = v.lookup(InodeNo::ROOT, b"d2").unwrap().ino;
    for i in 0..60 {
        v.unlink(d2, format!("file-{i}").as_bytes()).unwrap();
    }
    v.sync().unwrap();
    let new = Arc::new(MemoryDevice::new(DATA_BLOCKS));
    v.migrate(DeviceRole::Data, new.clone(), &mut |_, _| {}).unwrap();
    v.close().unwrap();
    let snap = Volume::open_snapshot(old.0.clone(), new.clone(), "before", MountOptions::default()).unwrap();
    check_files(&snap, &files);
    fsck_clean(&(old.0.clone(), new));
}

#[test]
fn a_replacement_smaller_than_what_the_volume_uses_is_refused() {
    let old = rig();
    let v = open(&old).unwrap();
    let files = fill(&v);
    for (role, blocks) in [(DeviceRole::Meta, META_BLOCKS - 1), (DeviceRole::Data, DATA_BLOCKS - 256)] {
        let small = Arc::new(MemoryDevice::new(blocks));
        match v.migrate(role, small.clone(), &mut |_, _| {}) {
            Err(Error::Migrate(why)) => assert!(why.contains("at least that large"), "{why}"),
            other => panic!("a small {role} was not refused: {other:?}"),
        }
        assert_eq!(small.blocks_in_use(), 0, "nothing is written to a refused device");
    }
    v.close().unwrap();
    let v = open(&old).unwrap();
    check_files(&v, &files);
    v.close().unwrap();
    fsck_clean(&old);
}

#[test]
fn a_replacement_that_fails_leaves_the_volume_on_the_old_device() {
    let old = rig();
    let v = open(&old).unwrap();
    let files = fill(&v);
    v.sync().unwrap();
    let bad = Arc::new(Failing(MemoryDevice::new(DATA_BLOCKS)));
    match v.migrate(DeviceRole::Data, bad, &mut |_, _| {}) {
        Err(Error::Migrate(why)) => assert!(why.contains("nothing changed"), "{why}"),
        other => panic!("{other:?}"),
    }
    let f = v.create(InodeNo::ROOT, b"still", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"writable").unwrap();
    v.close().unwrap();
    let v = open(&old).unwrap();
    check_files(&v, &files);
    v.close().unwrap();
    fsck_clean(&old);
}

/// A device whose writes past block 1000 fail.
#[derive(Debug)]
struct Failing(MemoryDevice);

impl BlockDevice for Failing {
    fn block_count(&self) -> u64 {
        self.0.block_count()
    }
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_blocks(first, buf)
    }
    fn write_blocks(&self, first: u64, buf: &[u8]) -> std::io::Result<()> {
        if first > 1000 {
            return Err(std::io::Error::other("injected write error"));
        }
        self.0.write_blocks(first, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}
