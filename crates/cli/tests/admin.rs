//! A mounted volume at the edges where kernel file systems set the
//! expectations: remount read-only and back, mount again right after an
//! unmount, options through mount(8)'s helper, refused options, volumes
//! found by UUID and label, default options stored by tune, plain messages
//! from a background mount, and ENOSPC at write(2) on a nearly full volume.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{DUALFS, Loops, TestVolume, dualfs, is_mounted, sh, sh_output, wait_unlocked};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The mount's options in /proc/self/mountinfo (per-mount, then super).
fn mount_flags(mnt: &Path) -> String {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = text.lines().rev().find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap())).unwrap();
    let (left, right) = line.split_once(" - ").unwrap();
    format!("{} {}", left.split(' ').nth(5).unwrap(), right.split(' ').nth(2).unwrap())
}

/// `mount.fuse.dualfs` as mount(8) runs it, from a link in the test's folder.
fn helper(v: &TestVolume) -> PathBuf {
    let h = v.dir.path().join("mount.fuse.dualfs");
    if !h.exists() {
        std::os::unix::fs::symlink(DUALFS, &h).unwrap();
    }
    h
}

fn source(v: &TestVolume) -> String {
    format!("{}#{}", v.meta.display(), v.data.display())
}

fn run_helper(v: &TestVolume, options: &str) -> Output {
    Command::new(helper(v)).args([source(v).as_str(), v.m(), "-o", options]).output().unwrap()
}

#[test]
fn remount_read_only_commits_refuses_writes_and_goes_back() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount_with("commit=3600");
    let m = v.m().to_string();
    sh(&format!(
        "echo before > {m}/f && head -c 3000000 /dev/urandom > {m}/big && sha256sum {m}/big > {}/sum",
        v.dir.path().display()
    ));
    // A file open for writing keeps it read-write, as on ext4.
    let mut holder = Command::new("sh").args(["-c", &format!("exec 3>>{m}/f; exec sleep 5")]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = run_helper(&v, "rw,nosuid,nodev,relatime,remount,ro,user_id=0,group_id=0");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("busy: a file is open for writing"), "{}", stderr(&out));
    holder.kill().unwrap();
    holder.wait().unwrap();

    // mount(8)'s remount: the current options, then the new ones.
    let out = run_helper(&v, "rw,nosuid,nodev,relatime,remount,ro,user_id=0,group_id=0");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(mount_flags(&v.mnt).starts_with("ro,"), "{}", mount_flags(&v.mnt));
    let out = sh_output(&format!("echo after > {m}/f"));
    assert!(stderr(&out).contains("Read-only file system"), "{}", stderr(&out));
    assert_eq!(sh(&format!("cat {m}/f")), "before\n");
    // Committed and checkpointed: the devices hold everything, with
    // nothing to roll forward, while the volume stays mounted.
    let log = v.inspect(&["log"]);
    assert_eq!(log["roll_forward"]["partial_segments"], 0, "{log}");
    let out = dualfs(&["fsck", v.meta.to_str().unwrap(), v.data.to_str().unwrap()]);
    assert!(out.status.code() == Some(8), "fsck waits for no one: the mount holds the lock");
    let mode: serde_json::Value =
        serde_json::from_str(&sh(&format!("getfattr --only-values -n dualfs.mode {m}"))).unwrap();
    assert_eq!(mode["read_only"], true);

    let out = run_helper(&v, "ro,nosuid,nodev,relatime,remount,rw");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(mount_flags(&v.mnt).starts_with("rw,"), "{}", mount_flags(&v.mnt));
    sh(&format!("echo after > {m}/f"));
    v.remount();
    assert_eq!(sh(&format!("cat {m}/f")), "after\n");
    sh(&format!("sha256sum -c {}/sum", v.dir.path().display()));
    v.umount();
}

#[test]
fn a_volume_mounted_read_only_can_be_remounted_read_write() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount_with("ro");
    let m = v.m().to_string();
    assert!(sh_output(&format!("touch {m}/x")).status.code() != Some(0));
    let (meta, data) = (v.meta.to_str().unwrap(), v.data.to_str().unwrap());
    let out = Command::new(DUALFS).args(["mount", "-o", "remount,rw", meta, data, v.m()]).output().unwrap();
    assert!(out.status.success(), "dualfs mount -o remount: {}", stderr(&out));
    sh(&format!("touch {m}/x"));
    v.umount();
}

#[test]
fn a_mount_right_after_an_unmount_waits_for_the_close() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    let m = v.m().to_string();
    for round in 0..3 {
        v.mount_with("commit=3600");
        // Dirty data makes the close take a moment after the kernel lets go.
        sh(&format!("head -c 60000000 /dev/urandom > {m}/f{round}"));
        sh(&format!("fusermount3 -u {m}"));
        // At once, as a script would.
        let start = Instant::now();
        v.mount_with("");
        assert!(start.elapsed() < Duration::from_secs(60));
        assert_eq!(std::fs::metadata(v.path(&format!("f{round}"))).unwrap().len(), 60_000_000);
        sh(&format!("umount {m}"));
        assert!(wait_unlocked(&v.meta, Duration::from_secs(30)));
    }
    // A volume that is mounted is answered at once by the process serving
    // it, named: here a refusal, this mount asking other options (no log=).
    v.mount();
    let second = v.dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let start = Instant::now();
    let out = dualfs(&["mount", v.meta.to_str().unwrap(), v.data.to_str().unwrap(), second.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(start.elapsed() < Duration::from_secs(5), "no wait for a mount that is serving");
    assert!(stderr(&out).contains("option log differs") && stderr(&out).contains("pid"), "{}", stderr(&out));
    v.umount();
}

#[test]
fn the_helper_gives_root_what_mount_gives_a_kernel_file_system() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    // mount(8) passes neither dev nor suid (they are no flags): root's
    // mount honours both unless told otherwise.
    let out = run_helper(&v, "rw");
    assert!(out.status.success(), "{}", stderr(&out));
    let flags = mount_flags(&v.mnt);
    assert!(!flags.contains("nosuid") && !flags.contains("nodev"), "{flags}");
    sh(&format!("umount {}", v.m()));
    assert!(wait_unlocked(&v.meta, Duration::from_secs(30)));
    let out = run_helper(&v, "rw,nosuid");
    assert!(out.status.success(), "{}", stderr(&out));
    let flags = mount_flags(&v.mnt);
    assert!(flags.contains("nosuid") && !flags.contains("nodev"), "{flags}");
    sh(&format!("umount {}", v.m()));
    assert!(wait_unlocked(&v.meta, Duration::from_secs(30)));
    // `dualfs mount` keeps FUSE's defaults.
    v.mount();
    assert!(mount_flags(&v.mnt).contains("nosuid,nodev"), "{}", mount_flags(&v.mnt));
    v.umount();
}

#[test]
fn unknown_and_contradictory_options_are_refused_in_plain_words() {
    let Some(v) = TestVolume::create("64M") else {
        return;
    };
    for (opts, says) in [
        ("bogus", "unknown mount option \"bogus\""),
        ("noatime,strictatime", "noatime and strictatime contradict each other"),
        ("commit=soon", "commit=soon: give a number of seconds"),
    ] {
        let out = dualfs(&["mount", "-o", opts, v.meta.to_str().unwrap(), v.data.to_str().unwrap(), v.m()]);
        assert_eq!(out.status.code(), Some(1), "{opts}");
        assert!(stderr(&out).contains(says), "{opts}: {}", stderr(&out));
        assert!(!stderr(&out).contains("EINVAL") && !stderr(&out).contains("mount()"), "{}", stderr(&out));
        let out = run_helper(&v, opts);
        assert!(stderr(&out).contains(says), "helper, {opts}: {}", stderr(&out));
        assert!(!is_mounted(&v.mnt));
    }
}

/// Loop devices over the volume's images, detached when dropped.
#[test]
fn volumes_are_found_by_uuid_and_label_and_mount_with_their_stored_options() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let out = dualfs(&["tune", "-L", "findme", "-o", "noatime", &meta, &data]);
    assert!(out.status.success(), "{}", stderr(&out));
    let Some(loops) = Loops::attach(&[&v.meta, &v.data]) else {
        return;
    };
    let (lm, ld) = (loops.0[0].clone(), loops.0[1].clone());
    let probe: serde_json::Value = serde_json::from_slice(&dualfs(&["probe", "--json", &lm]).stdout).unwrap();
    let uuid = probe[0]["uuid"].as_str().unwrap().to_string();
    // Scanning every block device finds both.
    let all = String::from_utf8_lossy(&dualfs(&["probe"]).stdout).into_owned();
    assert!(
        all.contains(&format!("{lm}: UUID=\"{uuid}\"")) && all.contains(&format!("{ld}: UUID=\"{uuid}\"")),
        "{all}"
    );

    // dualfs mount, one tag per device.
    let tag = format!("UUID={uuid}");
    let out = dualfs(&["mount", &tag, "LABEL=findme", v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let flags = mount_flags(&v.mnt);
    assert!(flags.contains("noatime"), "the stored option applies: {flags}");
    let out = dualfs(&["umount", v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The helper, one tag for the volume (lower case, as fstab must write
    // it: mount(8) resolves UUID= itself, through blkid).
    let out = Command::new(helper(&v)).args(["label=findme", v.m(), "-o", "rw,strictatime"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!mount_flags(&v.mnt).contains("noatime"), "the mount's own option wins: {}", mount_flags(&v.mnt));
    assert!(
        String::from_utf8_lossy(&std::fs::read("/proc/self/mountinfo").unwrap()).contains(&format!("{lm}\\043{ld}"))
    );
    sh(&format!("umount {}", v.m()));
    assert!(wait_unlocked(Path::new(&lm), Duration::from_secs(30)));
    // One device given: its partner is found.
    let out = dualfs(&["fsck", &ld]);
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let out = dualfs(&["mount", "UUID=00000000-0000-0000-0000-000000000001", &ld, v.m()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no DualFS meta-data device with UUID="), "{}", stderr(&out));
    drop(loops);
    v.mount();
    v.umount();
}

#[test]
fn a_recovery_is_said_in_the_log_not_on_the_terminal() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let mut child = v.spawn_mount(&["-o", "commit=3600"]);
    sh(&format!("mkdir {m}/d && echo x > {m}/d/f && sync {m}/d/f", m = v.m()));
    child.kill().unwrap();
    child.wait().unwrap();
    sh(&format!("umount -l {}", v.m()));
    // A recovery is no fault: a line in the log, nothing on the terminal,
    // as a kernel file system's mount prints nothing.
    let log = v.dir.path().join("after-crash.log");
    let opts = format!("log={}", log.display());
    let out = dualfs(&["mount", "-o", &opts, v.meta.to_str().unwrap(), v.data.to_str().unwrap(), v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
    v.umount();
    let e = stderr(&out);
    assert_eq!(e, "", "the mount talked on the terminal");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("recovered 1 partial segment"), "{logged}");
}

#[test]
fn norecovery_mounts_the_last_checkpoint_read_only_and_nothing_else() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    // A file in the checkpoint (a clean unmount), one fsynced after it.
    v.mount();
    sh(&format!("echo kept > {}/old", v.m()));
    v.umount();
    let mut child = v.spawn_mount(&["-o", "commit=3600"]);
    sh(&format!("echo x > {m}/new && sync {m}/new", m = v.m()));
    child.kill().unwrap();
    child.wait().unwrap();
    sh(&format!("umount -l {}", v.m()));
    let out = v.mount_output("norecovery");
    assert!(!out.status.success() && stderr(&out).contains("give ro with it"), "{}", stderr(&out));
    v.mount_with("ro,norecovery");
    let m = v.m().to_string();
    assert_eq!(sh(&format!("cat {m}/old")), "kept\n");
    assert!(!v.path("new").exists(), "the fsync after the checkpoint was replayed");
    assert!(!sh_output(&format!("fstrim {m}")).status.success(), "fstrim of a volume not rolled forward");
    let (meta, data) = (v.meta.to_str().unwrap(), v.data.to_str().unwrap());
    let out = Command::new(DUALFS).args(["mount", "-o", "remount,rw", meta, data, &m]).output().unwrap();
    assert!(!out.status.success(), "remounted rw without roll-forward");
    assert!(stderr(&out).contains("norecovery"), "{}", stderr(&out));
    v.umount();
    // Without it the fsynced file is back.
    v.mount();
    assert_eq!(sh(&format!("cat {m}/new")), "x\n");
    v.umount();
}

#[test]
fn a_nearly_full_volume_says_enospc_at_write_time() {
    let Some(mut v) = TestVolume::create("96M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let df = |field: &str| -> u64 { sh(&format!("df -B1 --output={field} {m} | tail -n 1")).trim().parse().unwrap() };
    // Available leaves out what the kernel may hold dirty.
    assert!(df("avail") < df("size") - df("used"), "avail {} used {}", df("avail"), df("used"));
    // Fill it, durably, to within a few MiB.
    let out = sh_output(&format!("dd if=/dev/urandom of={m}/fill bs=1M count=200 conv=fsync status=none"));
    assert!(!out.status.success());
    sh(&format!("rm -f {m}/fill && sync {m}"));
    let keep = (df("size") - df("used")).saturating_sub(3 << 20);
    sh(&format!("head -c {keep} /dev/urandom > {m}/most && sync {m}/most"));
    // A writer that opens now gets ENOSPC from write(2), not only at close.
    let out = sh_output(&format!("dd if=/dev/zero of={m}/more bs=1M count=100"));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("error writing") && stderr(&out).contains("No space left"), "{}", stderr(&out));
    let size = std::fs::metadata(v.path("more")).unwrap().len();
    assert!(size < 8 << 20, "the apparent size stays near what was stored: {size}");
    sh(&format!("rm {m}/more {m}/most"));
    v.umount();
}
