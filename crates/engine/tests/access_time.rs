//! Access times under noatime, relatime (the default) and strictatime, on
//! a clock the test moves.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{AtimeMode, Creds, MkfsOptions, MountOptions};

struct Setup {
    vol: Volume,
    clock: Arc<AtomicI64>,
}

impl Setup {
    fn new(atime: AtimeMode) -> Setup {
        let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8192));
        let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(16384));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        let clock = Arc::new(AtomicI64::new(1_700_000_000));
        let c = clock.clone();
        let options = MountOptions { atime, ..MountOptions::default() };
        let vol =
            Volume::open_with_clock(meta, data, options, Arc::new(move || Timestamp::new(c.load(Ordering::SeqCst), 0)))
                .unwrap();
        Setup { vol, clock }
    }

    fn advance(&self, secs: i64) -> Timestamp {
        Timestamp::new(self.clock.fetch_add(secs, Ordering::SeqCst) + secs, 0)
    }

    fn atime(&self, ino: InodeNo) -> Timestamp {
        self.vol.getattr(ino).unwrap().atime
    }
}

#[test]
fn relatime_updates_once_after_each_change_and_once_a_day() {
    let s = Setup::new(AtimeMode::Relatime);
    let v = &s.vol;
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, &[7u8; 10_000]).unwrap();
    let created = s.atime(f);
    let t1 = s.advance(10);
    assert!(v.access_due(f), "never read since written");
    v.read(f, 0, 100).unwrap();
    assert_eq!(s.atime(f), t1, "first read after the write");
    assert!(!v.access_due(f));
    s.advance(10);
    v.read(f, 0, 100).unwrap();
    assert_eq!(s.atime(f), t1, "read again: nothing new to say");
    s.advance(10);
    v.write(f, 0, b"changed").unwrap();
    let t4 = s.advance(10);
    v.read(f, 5000, 100).unwrap();
    assert_eq!(s.atime(f), t4, "read after a change");
    s.advance(86_399);
    v.read(f, 0, 1).unwrap();
    assert_eq!(s.atime(f), t4, "not yet a day");
    let day = s.advance(1);
    v.read(f, 0, 1).unwrap();
    assert_eq!(s.atime(f), day, "a day old");
    s.advance(10);
    v.read(f, 0, 0).unwrap();
    assert_eq!(s.atime(f), day, "reading nothing is no access");
    assert!(created < t1);
}

#[test]
fn a_read_that_changes_no_time_dirties_nothing() {
    let s = Setup::new(AtimeMode::Relatime);
    let v = &s.vol;
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"data").unwrap();
    s.advance(1);
    v.read(f, 0, 4).unwrap();
    v.commit().unwrap();
    assert!(!v.with_fs(|fs| fs.log.has_dirty()));
    s.advance(1);
    v.read(f, 0, 4).unwrap();
    let mut listed = 0;
    v.readdir(InodeNo::ROOT, 0, &mut |_| {
        listed += 1;
        true
    })
    .unwrap();
    assert!(listed >= 3);
    // The root's listing was due (created, never listed); read again: not.
    v.commit().unwrap();
    s.advance(1);
    v.readdir(InodeNo::ROOT, 0, &mut |_| true).unwrap();
    v.read(f, 0, 4).unwrap();
    assert!(!v.with_fs(|fs| fs.log.has_dirty()), "no meta-data write when no time changes");
}

#[test]
fn strictatime_updates_on_every_access_and_noatime_never() {
    let s = Setup::new(AtimeMode::StrictAtime);
    let v = &s.vol;
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"data").unwrap();
    for _ in 0..3 {
        let t = s.advance(1);
        v.read(f, 0, 4).unwrap();
        assert_eq!(s.atime(f), t);
    }
    let l = v.symlink(InodeNo::ROOT, b"l", b"f", Creds::ROOT).unwrap().ino;
    let t = s.advance(1);
    v.readlink(l).unwrap();
    assert_eq!(s.atime(l), t, "readlink is an access");

    let s = Setup::new(AtimeMode::NoAtime);
    let v = &s.vol;
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"data").unwrap();
    let before = s.atime(f);
    s.advance(100_000);
    v.read(f, 0, 4).unwrap();
    v.readdir(InodeNo::ROOT, 0, &mut |_| true).unwrap();
    assert_eq!(s.atime(f), before);
    assert!(!v.access_due(f));
}

#[test]
fn listing_a_directory_updates_its_access_time() {
    let s = Setup::new(AtimeMode::Relatime);
    let v = &s.vol;
    let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    v.create(d, b"x", 0o644, Creds::ROOT).unwrap();
    let t = s.advance(5);
    v.readdir(d, 0, &mut |_| true).unwrap();
    assert_eq!(s.atime(d), t);
    s.advance(5);
    v.readdir(d, 0, &mut |_| true).unwrap();
    assert_eq!(s.atime(d), t, "listed since it changed");
    v.create(d, b"y", 0o644, Creds::ROOT).unwrap();
    let t2 = s.advance(5);
    v.readdir(d, 0, &mut |_| true).unwrap();
    assert_eq!(s.atime(d), t2, "changed since listed");
}
