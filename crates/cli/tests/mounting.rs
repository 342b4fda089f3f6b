//! Mounting and unmounting as users and mount(8) do it, and the inputs that
//! must be refused: names too long, a volume mounted twice, devices that
//! are not a pair, a full data device.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{DUALFS, TestVolume, dualfs, is_mounted, sh, sh_output, wait_unlocked};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Rolled-forward partial segments at the next open: 0 after a clean close.
fn roll_forward(v: &TestVolume) -> serde_json::Value {
    v.inspect(&["log"])["roll_forward"]["partial_segments"].clone()
}

#[test]
fn names_longer_than_255_bytes_are_refused() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let long = "n".repeat(256);
    let ok = "n".repeat(255);
    sh(&format!("cd {m} && touch {ok} && mkdir d && echo x > f"));
    for cmd in [
        format!("touch {long}"),
        format!("mkdir {long}"),
        format!("ln -s f {long}"),
        format!("ln f {long}"),
        format!("mv f {long}"),
        format!("mknod {long} p"),
        format!("stat {long}"),
    ] {
        let out = sh_output(&format!("cd {m} && {cmd}"));
        assert!(stderr(&out).contains("File name too long"), "{cmd}: {}", stderr(&out));
    }
    assert!(v.path(&ok).exists() && v.path("f").exists());
    v.umount();
}

#[test]
fn a_volume_cannot_be_mounted_twice_nor_with_the_wrong_partner() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let Some(other) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let second = v.dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let (meta, data) = (v.meta.clone(), v.data.clone());
    let (meta, data) = (meta.to_str().unwrap(), data.to_str().unwrap());
    let out = dualfs(&["mount", meta, data, second.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already mounted"), "{}", stderr(&out));
    v.umount();

    let other_data = other.data.to_str().unwrap();
    let out = dualfs(&["mount", meta, other_data, second.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a pair"), "{}", stderr(&out));
    let out = dualfs(&["mount", data, meta, second.to_str().unwrap()]);
    assert!(stderr(&out).contains("is a DualFS data device"), "{}", stderr(&out));
    let out = dualfs(&["mount", meta, meta, second.to_str().unwrap()]);
    assert!(stderr(&out).contains("are the same file"), "{}", stderr(&out));
    let out = dualfs(&["mkfs", meta, data]);
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    assert!(!is_mounted(&second));
}

#[test]
fn mount_helpers_and_fstab_style_mounts_work() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let source = format!("{}#{}", v.meta.display(), v.data.display());
    // As mount.fuse3 runs it: `dualfs SOURCE MOUNTPOINT -o OPTIONS`.
    let out = Command::new(DUALFS).args([source.as_str(), v.m(), "-o", "rw,noatime,dev,suid"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    sh(&format!("echo helper > {}/f", v.m()));
    // Unmounted by umount(8): the daemon still closes the volume cleanly.
    sh(&format!("umount {}", v.m()));
    assert!(wait_unlocked(&v.meta, Duration::from_secs(30)));
    assert_eq!(roll_forward(&v), 0);
    v.fsck();

    // mount -t fuse.dualfs runs mount.fuse3 (when no mount.fuse.dualfs is
    // installed), which runs `dualfs` from PATH; mount(8) itself resets
    // PATH, so call mount.fuse3 as it would.
    let bin = std::path::Path::new(DUALFS).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("mount.fuse3")
        .args([&source, v.m(), "-t", "fuse.dualfs", "-o", "noatime"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount.fuse3: {}", stderr(&out));
    assert_eq!(sh(&format!("cat {}/f", v.m())), "helper\n");
    sh(&format!("fusermount3 -u {}", v.m()));
    assert!(wait_unlocked(&v.meta, Duration::from_secs(30)));
    assert_eq!(roll_forward(&v), 0);
    v.fsck();

    // What `make install` sets up: mount(8) runs /sbin/mount.fuse.dualfs
    // SOURCE MOUNTPOINT -o OPTIONS -t fuse.dualfs.
    let helper = v.dir.path().join("mount.fuse.dualfs");
    std::os::unix::fs::symlink(DUALFS, &helper).unwrap();
    let out = Command::new(&helper).args([&source, v.m(), "-o", "rw", "-t", "fuse.dualfs"]).output().unwrap();
    assert!(out.status.success(), "mount.fuse.dualfs: {}", stderr(&out));
    assert!(is_mounted(&v.mnt));
    sh(&format!("umount {}", v.m()));
    assert!(wait_unlocked(&v.meta, Duration::from_secs(30)));
    // Mounted state is tracked by the guard from here on.
    v.mount();
    v.umount();
}

#[test]
fn sigterm_unmounts_and_closes_the_volume_cleanly() {
    let Some(v) = TestVolume::create("64M") else {
        return;
    };
    let mut child = v.spawn_mount(&[]);
    // Written but not yet committed when the signal comes.
    sh(&format!("echo dirty > {}/f", v.m()));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!is_mounted(&v.mnt));
    assert_eq!(roll_forward(&v), 0, "closed with a final checkpoint");
    v.fsck();
    let mut v = v;
    v.mount();
    assert_eq!(sh(&format!("cat {}/f", v.m())), "dirty\n");
    v.umount();
}

#[test]
fn a_read_only_mount_changes_nothing() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    sh(&format!("echo before > {}/f", v.m()));
    v.umount();
    let before = sh(&format!("sha256sum {} {}", v.meta.display(), v.data.display()));
    v.mount_with("ro");
    let out = sh_output(&format!("echo after > {}/f", v.m()));
    assert!(stderr(&out).contains("Read-only file system"), "{}", stderr(&out));
    assert_eq!(sh(&format!("cat {}/f", v.m())), "before\n");
    v.umount();
    let after = sh(&format!("sha256sum {} {}", v.meta.display(), v.data.display()));
    assert_eq!(before, after, "the images are untouched");
}

#[test]
fn a_full_data_device_says_enospc_and_recovers_after_deletes() {
    let Some(mut v) = TestVolume::create("96M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let fresh = v.usage();
    let out = sh_output(&format!("dd if=/dev/zero of={m}/fill bs=1M count=200 conv=fsync"));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("No space left on device"), "{}", stderr(&out));
    sh(&format!("rm {m}/fill && sync {m}"));
    let start = Instant::now();
    while v.usage() != fresh && start.elapsed() < Duration::from_secs(15) {
        sh(&format!("sync {m}"));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(v.usage(), fresh, "the space came back");
    sh(&format!("head -c 10485760 /dev/urandom > {m}/after && sync {m}/after"));
    v.remount();
    assert_eq!(std::fs::metadata(v.path("after")).unwrap().len(), 10 << 20);
    v.umount();
    assert_eq!(roll_forward(&v), 0);
}

#[test]
fn a_killed_mount_recovers_what_fsync_made_durable() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let mut child = v.spawn_mount(&["-o", "commit=3600"]);
    let m = v.m().to_string();
    sh(&format!(
        "mkdir {m}/d && head -c 3000000 /dev/urandom > {m}/d/kept && sync {m}/d/kept && sync {m}/d && sha256sum {m}/d/kept > {}/sum",
        v.dir.path().display()
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel keeps a dead mount until it is unmounted.
    sh(&format!("umount -l {m}"));
    assert!(roll_forward(&v).as_u64().unwrap() > 0, "the log after the checkpoint is rolled forward");
    v.fsck();
    v.mount();
    sh(&format!("sha256sum -c {}/sum", v.dir.path().display()));
    v.umount();
    assert_eq!(roll_forward(&v), 0);
}

#[test]
fn inspect_shows_every_view_as_text_and_json() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    sh(&format!("cd {} && mkdir -p d/e && echo x > d/f && setfattr -n user.k -v val d/f", v.m()));
    let ino = common::ino(&v.path("d/f"));
    // A mounted volume may be inspected; what is on disk lags, so unmount first.
    v.umount();
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    for view in [
        vec![],
        vec!["superblock"],
        vec!["log"],
        vec!["segments"],
        vec!["segments", "--all"],
        vec!["groups"],
        vec!["inode", "/d/f"],
        vec!["dir", "/d"],
    ] {
        let mut args = vec!["inspect", meta.as_str(), data.as_str()];
        args.extend(view.iter().copied());
        let out = dualfs(&args);
        assert!(out.status.success(), "inspect {view:?}: {}", stderr(&out));
        assert!(!out.stdout.is_empty());
    }
    let inode = v.inspect(&["inode", &ino.to_string()]);
    assert_eq!(inode["size"], 2);
    assert_eq!(inode["xattrs"]["user.k"], "val");
    let dir = v.inspect(&["dir", "/d"]);
    let names: Vec<&str> = dir["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 4);
    assert!(names.contains(&"e") && names.contains(&"f"));
    let summary = v.inspect(&[]);
    assert_eq!(summary["inodes"]["used"], 4);
    let out = dualfs(&["inspect", &meta, &data, "inode", "/nope"]);
    assert!(stderr(&out).contains("no such file or directory"), "{}", stderr(&out));
}

/// The kernel's read-ahead for the mount (`/sys/class/bdi/MAJ:MIN`), as
/// the mount set it.
fn read_ahead_kb(v: &TestVolume) -> u64 {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dev = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4 && f[4] == v.m()).then(|| f[2].to_string())
        })
        .next_back()
        .unwrap();
    std::fs::read_to_string(format!("/sys/class/bdi/{dev}/read_ahead_kb")).unwrap().trim().parse().unwrap()
}

#[test]
fn the_mount_sets_the_kernels_read_ahead() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    assert_eq!(read_ahead_kb(&v), 2048, "the default, 2M");
    v.umount();
    v.mount_with("readahead=512K");
    assert_eq!(read_ahead_kb(&v), 512);
    v.umount();
    // 0 leaves the kernel's own default (128 KiB for a FUSE mount).
    v.mount_with("readahead=0");
    assert_eq!(read_ahead_kb(&v), 128);
    v.umount();
}
