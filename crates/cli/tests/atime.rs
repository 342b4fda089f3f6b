//! Access times through the mount: relatime by default, strictatime and
//! noatime on request, kept across a remount.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::{TestVolume, sh};

fn times(p: &Path) -> ((i64, i64), (i64, i64)) {
    let m = std::fs::metadata(p).unwrap();
    ((m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()))
}

fn atime(p: &Path) -> (i64, i64) {
    times(p).0
}

/// Lets the clocks move on, so that a new time differs from the last.
fn tick() {
    std::thread::sleep(Duration::from_millis(30));
}

#[test]
fn relatime_updates_the_access_time_once_after_each_change() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let f = v.path("f");
    // A file large enough that the kernel's cache would answer reads.
    sh(&format!("head -c 300000 /dev/urandom > {m}/f"));
    tick();
    sh(&format!("cat {m}/f > /dev/null"));
    let (read, written) = times(&f);
    assert!(read > written, "the first read after the write: {read:?} {written:?}");
    tick();
    sh(&format!("cat {m}/f > /dev/null && head -c 10 {m}/f > /dev/null"));
    assert_eq!(atime(&f), read, "read since the last change: nothing to update");
    sh(&format!("echo more >> {m}/f"));
    tick();
    sh(&format!("tail -c 5 {m}/f > /dev/null"));
    let (read2, written2) = times(&f);
    assert!(read2 > written2 && written2 > read, "changed, then read");
    sh(&format!("touch -a -d '2 days ago' {m}/f"));
    sh(&format!("cat {m}/f > /dev/null"));
    assert!(atime(&f) > read2, "a day old: updated again");

    // Directories: listing after a change.
    sh(&format!("mkdir {m}/d && touch {m}/d/x"));
    tick();
    sh(&format!("ls {m}/d > /dev/null"));
    let d = v.path("d");
    let (listed, changed) = times(&d);
    assert!(listed > changed);
    tick();
    sh(&format!("ls {m}/d > /dev/null"));
    assert_eq!(atime(&d), listed);

    let kept = atime(&f);
    v.remount();
    assert_eq!(atime(&f), kept, "access times are on the volume");
    assert_eq!(atime(&d), listed);
    v.umount();
}

#[test]
fn strictatime_updates_on_every_read_and_noatime_never() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount_with("strictatime");
    let m = v.m().to_string();
    let f = v.path("f");
    sh(&format!("head -c 100000 /dev/urandom > {m}/f"));
    let mut last = atime(&f);
    for _ in 0..3 {
        tick();
        sh(&format!("cat {m}/f > /dev/null"));
        let now = atime(&f);
        assert!(now > last, "every read updates");
        last = now;
    }
    v.umount();

    v.mount_with("noatime");
    assert!(sh("cat /proc/mounts").lines().any(|l| l.contains(&m) && l.contains("noatime")));
    sh(&format!("echo changed >> {m}/f && touch -a -d '2 days ago' {m}/f"));
    let old = atime(&f);
    tick();
    sh(&format!("cat {m}/f > /dev/null && ls {m} > /dev/null"));
    assert_eq!(atime(&f), old, "noatime: never");
    v.umount();
}
