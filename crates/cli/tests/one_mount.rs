//! One serving process per volume whatever path reaches it (the image files, loop
//! devices over them, another name of the same device), and mkfs never
//! writing to storage in use, `--force` or not. Needs root, FUSE and loop
//! devices; skipped otherwise.

#![allow(clippy::unwrap_used)]
mod common;

use std::path::{Path, PathBuf};

use common::{TestVolume, dualfs, sh, sh_output};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A loop device over `file`, detached when dropped.
struct Loop(PathBuf);

impl Loop {
    fn over(file: &Path) -> Option<Loop> {
        let out = sh_output(&format!("losetup -f --show {}", file.display()));
        if !out.status.success() {
            eprintln!("no loop devices here: {}", stderr(&out));
            return None;
        }
        Some(Loop(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())))
    }

    fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = sh_output(&format!("losetup -d {}", self.0.display()));
    }
}

#[test]
fn a_volume_mounted_through_its_files_is_the_same_file_system_through_loop_devices_and_back() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let (Some(lm), Some(ld)) = (Loop::over(&v.meta), Loop::over(&v.data)) else {
        return;
    };
    let second = v.dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let second = second.to_str().unwrap().to_string();
    let dev = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().dev()
    };

    // Mounted through the files: a mount through the loop devices over
    // them is a second mount of the same volume, which joins the first
    // (second_mount.rs): one file system, never a second writer.
    v.mount();
    let opts = format!("log={},{}", v.dir.path().join("dualfs.log").display(), common::extra_mount_options());
    let out = dualfs(&["mount", "-o", &opts, lm.s(), ld.s(), &second]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(dev(&second), dev(v.m()), "a second file system over the same volume");
    sh(&format!("umount {second}"));
    // So is another name of the same loop device.
    let alias = v.dir.path().join("alias");
    std::os::unix::fs::symlink(&lm.0, &alias).unwrap();
    let out = dualfs(&["mount", "-o", &opts, alias.to_str().unwrap(), ld.s(), &second]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(dev(&second), dev(v.m()));
    sh(&format!("umount {second}"));
    v.umount();

    // Mounted through the loop devices: the files are the same file
    // system, and mkfs on either name is refused, --force or not.
    let out = dualfs(&["mount", lm.s(), ld.s(), &second]);
    assert!(out.status.success(), "{}", stderr(&out));
    let third = v.dir.path().join("third");
    std::fs::create_dir(&third).unwrap();
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let out = dualfs(&["mount", &meta, &data, third.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(dev(third.to_str().unwrap()), dev(&second));
    sh(&format!("umount {}", third.display()));
    for target in [(&meta, &data), (&lm.s().to_string(), &ld.s().to_string())] {
        let out = dualfs(&["mkfs", "--force", target.0, target.1]);
        assert!(!out.status.success(), "mkfs --force wrote to a mounted volume ({target:?})");
        assert!(stderr(&out).contains("in use"), "{}", stderr(&out));
    }
    sh(&format!("umount {second}"));
    assert!(common::wait_unlocked(&lm.0, std::time::Duration::from_secs(30)));
    v.fsck();
}

#[test]
fn mkfs_force_never_overwrites_a_mounted_file_system() {
    let Some(v) = TestVolume::create("64M") else {
        return;
    };
    let ext4 = v.dir.path().join("ext4.img");
    sh(&format!("truncate -s 64M {0} && mkfs.ext4 -q -F {0}", ext4.display()));
    let Some(lo) = Loop::over(&ext4) else {
        return;
    };
    let mnt = v.dir.path().join("ext4mnt");
    std::fs::create_dir(&mnt).unwrap();
    sh(&format!("mount {} {}", lo.s(), mnt.display()));
    sh(&format!("echo precious > {}/f && sync", mnt.display()));
    let data = v.data.to_str().unwrap();
    for target in [lo.s(), ext4.to_str().unwrap()] {
        let out = dualfs(&["mkfs", "--force", target, data]);
        assert!(!out.status.success(), "mkfs --force wrote over a mounted ext4 through {target}");
        assert!(stderr(&out).contains("in use"), "{}", stderr(&out));
    }
    assert_eq!(sh(&format!("cat {}/f", mnt.display())).trim(), "precious");
    sh(&format!("umount {}", mnt.display()));
}

/// Holds `file`'s lock for `secs` as a serving process does: flock(1)
/// under `name`, the process name of a mount (`dualfs`) or of a mount
/// that has seen its unmount (`dualfs-closing`).
fn holder(dir: &Path, name: &str, file: &Path, secs: f64) -> std::process::Child {
    let fake = dir.join(name);
    if !fake.exists() {
        std::fs::copy(sh("command -v flock").trim(), &fake).unwrap();
    }
    // Another test's fork may still hold the copy open for writing for a
    // moment (it inherits the descriptor until its exec): ETXTBSY passes.
    let spawn = || std::process::Command::new(&fake).arg("-x").arg(file).args(["sleep", &secs.to_string()]).spawn();
    let start = std::time::Instant::now();
    let child = loop {
        match spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && start.elapsed().as_secs() < 10 => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => break r.unwrap(),
        }
    };
    let f = std::fs::File::open(file).unwrap();
    let start = std::time::Instant::now();
    while f.try_lock_shared().is_ok() {
        f.unlock().unwrap();
        assert!(start.elapsed().as_secs() < 10, "flock never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child
}

#[test]
fn a_mount_waiting_briefly_for_a_closing_one_prints_nothing_and_logs_the_wait() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    // A short wait, as after an unmount: nothing on the terminal (a kernel
    // file system's mount prints nothing), the wait in the log.
    let mut held = holder(v.dir.path(), "dualfs-closing", &v.meta, 0.3);
    let out = v.mount_output("");
    held.wait().unwrap();
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    let log = v.log();
    let waited = log
        .lines()
        .find_map(|l| l.split("waited ").nth(1)?.split(" ms").next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the wait is not in the log: {log}"));
    assert!(log.contains("to be closed by the process that served its last mount"), "{log}");
    // Said on stderr only once it lasted a second (a loaded machine may
    // stretch the holder's 0.3 s past it).
    if waited < 1000 {
        assert_eq!(stderr(&out), "", "a wait of {waited} ms was said on stderr");
    } else {
        eprintln!("the holder's 0.3 s took {waited} ms: the short case was not tried");
    }
    v.umount();

    // A wait a person would wonder about is said.
    let mut held = holder(v.dir.path(), "dualfs-closing", &v.meta, 2.5);
    let out = v.mount_output("");
    held.wait().unwrap();
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    assert!(stderr(&out).contains("waiting for it"), "{}", stderr(&out));
    v.umount();
}

#[test]
fn a_mount_right_after_an_unmount_waits_for_the_server_to_see_it() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    // umount(8) returns before the serving process has seen its mount go
    // and taken its closing name: it still holds the lock as `dualfs`,
    // serving no mount. The next mount waits for it, silently.
    let mut held = holder(v.dir.path(), "dualfs", &v.meta, 0.3);
    let out = v.mount_output("");
    held.wait().unwrap();
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    assert_eq!(stderr(&out), "");
    v.umount();
}
