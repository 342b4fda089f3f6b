//! The volume takes all its time from the clock it is handed: the intervals
//! `Volume::tick` waits for pass when that clock says so, however long the
//! test really takes, so a simulation replays.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::MemoryDevice;
use dualfs_engine::types::{InodeNo, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

/// A volume on a clock the test moves by hand.
fn volume(meta_blocks: u64, options: MountOptions) -> (Volume, Arc<AtomicI64>) {
    let (meta, data) = (Arc::new(MemoryDevice::new(meta_blocks)), Arc::new(MemoryDevice::new(65536)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let now = Arc::new(AtomicI64::new(1_700_000_000));
    let n = now.clone();
    let vol =
        Volume::open_with_clock(meta, data, options, Arc::new(move || Timestamp::new(n.load(Ordering::Relaxed), 0)))
            .unwrap();
    (vol, now)
}

#[test]
fn the_commit_interval_passes_on_the_volumes_clock() {
    let (vol, now) = volume(8192, MountOptions { commit_interval: Duration::from_secs(5), ..MountOptions::default() });
    vol.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap();
    let before = vol.commit_count();
    std::thread::sleep(Duration::from_millis(20));
    vol.tick().unwrap();
    assert_eq!(vol.commit_count(), before, "committed before the clock moved");
    now.fetch_add(4, Ordering::Relaxed);
    vol.tick().unwrap();
    assert_eq!(vol.commit_count(), before, "committed after 4 s of a 5 s interval");
    now.fetch_add(1, Ordering::Relaxed);
    vol.tick().unwrap();
    assert!(vol.commit_count() > before, "no commit once the interval passed");
}

#[test]
fn idle_cleaning_waits_for_idle_time_on_the_volumes_clock() {
    let (vol, now) = volume(
        2560,
        // Cleaning because space runs low would hide the idle cleaning.
        MountOptions { commit_interval: Duration::ZERO, clean_threshold: Some(1), ..MountOptions::default() },
    );
    // Fill most of the log with inodes, then free most of them: segments
    // mostly empty, and less than half of the log free.
    let mut files = Vec::new();
    for i in 0..9000 {
        files.push(vol.create(InodeNo::ROOT, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino);
        if i % 500 == 499 {
            vol.commit().unwrap();
        }
    }
    for (i, _) in files.iter().enumerate().filter(|(i, _)| i % 8 != 0) {
        vol.unlink(InodeNo::ROOT, format!("f{i}").as_bytes()).unwrap();
    }
    vol.sync().unwrap();
    let s = vol.statfs();
    assert!(s.meta_free_segments < s.meta_segments / 2, "{s:?}");
    let passes = vol.cleaner_stats().passes;
    vol.tick().unwrap();
    assert_eq!(vol.cleaner_stats().passes, passes, "cleaned without idle time on the clock");
    now.fetch_add(10, Ordering::Relaxed);
    vol.tick().unwrap();
    assert_eq!(vol.cleaner_stats().passes, passes + 1, "no idle cleaning after 10 s without changes");
}
