//! What survives a power cut (a kill -9 of the serving process: no final
//! commit, no checkpoint) besides fsync'd files: everything before a
//! `dualfs sync` or an fsync of the mount's root (`sync MOUNTPOINT`), and
//! files saved the way editors save them, without fsync: replaced by a
//! rename, or rewritten after `open(O_TRUNC)`. Those show their old
//! contents or their new ones, never an empty or partial file.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::fs::File;
use std::io::Write;
use std::process::Child;
use std::time::Duration;

use common::{Rng, TestVolume, dualfs, sh};

/// The tests of this file take turns: a fork in another test's thread
/// holds a copy of every open descriptor until it execs, and its closing
/// sends FLUSH, which ends a rewrite as a close would.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// SIGKILL, then what a reboot does: the dead mount goes, fsck, mount again.
fn power_cut(v: &mut TestVolume, mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
    sh(&format!("umount -l {}", v.m()));
    v.fsck();
    v.mount();
}

#[test]
fn dualfs_sync_and_an_fsync_of_the_root_survive_a_kill_9() {
    let _serial = serial();
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    // No periodic commit could save anything here.
    let child = v.spawn_mount(&["-o", "commit=3600"]);
    let a = bytes(1, 5 << 20);
    std::fs::write(v.path("a.bin"), &a).unwrap();
    std::fs::create_dir(v.path("d1")).unwrap();
    std::fs::write(v.path("d1/x"), b"in d1").unwrap();
    let out = dualfs(&["sync", v.m()]);
    assert!(out.status.success(), "dualfs sync: {}", String::from_utf8_lossy(&out.stderr));

    let b = bytes(2, 1 << 20);
    std::fs::write(v.path("b.bin"), &b).unwrap();
    std::fs::create_dir(v.path("d2")).unwrap();
    // coreutils' `sync FILE` fsyncs it: the root directory, here.
    sh(&format!("sync {}", v.m()));

    power_cut(&mut v, child);
    assert!(std::fs::read(v.path("a.bin")).unwrap() == a, "a.bin, before dualfs sync, is not intact");
    assert_eq!(std::fs::read(v.path("d1/x")).unwrap(), b"in d1");
    assert!(std::fs::read(v.path("b.bin")).unwrap() == b, "b.bin, before sync MOUNTPOINT, is not intact");
    assert!(v.path("d2").is_dir(), "d2, made before sync MOUNTPOINT, is gone");
    v.umount();
}

#[test]
fn dualfs_sync_of_every_mount_and_of_a_path_that_is_not_dualfs() {
    let _serial = serial();
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    // A second mount whose serving process was killed: sync passes over it,
    // syncs the others, and fails naming it.
    let dead = TestVolume::create("64M").unwrap();
    let mut child = dead.spawn_mount(&[]);
    child.kill().unwrap();
    child.wait().unwrap();
    // And one mounted read-only, which has nothing to commit.
    let mut ro = TestVolume::create("64M").unwrap();
    ro.mount_with("ro");
    let out = dualfs(&["sync", "-v"]);
    sh(&format!("umount -l {}", dead.m()));
    ro.umount();
    assert!(!out.status.success(), "dualfs sync must fail when a mount was not synced");
    // Other mounts on the machine may be listed before it.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not synced: ") && err.contains(&format!("{} (a dead mount", dead.m())),
        "it names the dead mount: {err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("{}: mounted read-only", ro.m())),
        "the read-only mount is passed over: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(v.m()), "every mount is synced and named with -v");
    assert!(String::from_utf8_lossy(&out.stderr).contains("serving process is gone"), "the dead mount is named");
    let out = dualfs(&["sync", "/"]);
    assert!(!out.status.success(), "syncing a path that is no DualFS mount must fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not DualFS"), "and say why");
    v.umount();
}

#[test]
fn files_replaced_by_rename_or_rewritten_after_o_trunc_are_never_empty_after_a_kill_9() {
    let _serial = serial();
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    let child = v.spawn_mount(&["-o", "commit=1"]);
    let old = bytes(3, 20_000);
    let new = bytes(4, 30_000);
    for name in ["cfg1", "cfg2", "cfg3"] {
        std::fs::write(v.path(name), &old).unwrap();
    }
    let out = dualfs(&["sync", v.m()]);
    assert!(out.status.success());

    // An editor's save: a new file, closed, renamed over the old one.
    std::fs::write(v.path("cfg1.tmp"), &new).unwrap();
    std::fs::rename(v.path("cfg1.tmp"), v.path("cfg1")).unwrap();
    // A rewrite in place: open(O_TRUNC), write, close.
    std::fs::write(v.path("cfg2"), &new).unwrap();
    // A rewrite still under way when the power fails: commits come and go
    // while it is open.
    let mut f = File::options().write(true).truncate(true).open(v.path("cfg3")).unwrap();
    f.write_all(&new[..12_000]).unwrap();
    std::thread::sleep(Duration::from_millis(3500));

    power_cut(&mut v, child);
    drop(f);
    let got = |n: &str| std::fs::read(v.path(n)).unwrap();
    assert!(got("cfg1") == new, "cfg1, renamed over 3 s (3 commits) before: {} bytes", got("cfg1").len());
    assert!(got("cfg2") == new, "cfg2, rewritten and closed 3 s before: {} bytes", got("cfg2").len());
    assert!(got("cfg3") == old, "cfg3, being rewritten: {} bytes, not its old contents", got("cfg3").len());
    assert!(!v.path("cfg1.tmp").exists());
    v.umount();
}
