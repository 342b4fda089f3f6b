//! A second mount of a mounted volume joins the process that serves it: one
//! file system at two places, as a kernel file system mounted twice. Needs
//! root and FUSE; skipped otherwise.

#![allow(clippy::unwrap_used)]
mod common;

use std::path::{Path, PathBuf};

use common::{TestVolume, dualfs, extra_mount_options, is_mounted, sh, sh_output};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A directory `name` in the test's folder.
fn dir(v: &TestVolume, name: &str) -> PathBuf {
    let p = v.dir.path().join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// `dualfs mount` of `v` on `mnt` with the options the first mount of the
/// tests gets (its log, the test transport) and `more`.
fn mount_again(v: &TestVolume, mnt: &Path, more: &str) -> std::process::Output {
    let mut opts = format!("log={},{}", v.dir.path().join("dualfs.log").display(), extra_mount_options());
    if !more.is_empty() {
        opts = format!("{opts},{more}");
    }
    dualfs(&["mount", "-o", &opts, v.meta.to_str().unwrap(), v.data.to_str().unwrap(), mnt.to_str().unwrap()])
}

/// The file system's device number at `p`: one for every mount of one file system.
fn dev(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().dev()
}

fn pid_serving(v: &TestVolume) -> u32 {
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    let ino = common::ino(&v.meta);
    locks
        .lines()
        .find(|l| l.contains(&format!(":{ino} ")) && l.contains("FLOCK") && !l.contains("->"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|p| p.parse().ok())
        .expect("a process holds the volume")
}

#[test]
fn a_second_mount_is_the_same_file_system_and_the_volume_closes_with_the_last() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let (a, b) = (v.mnt.clone(), dir(&v, "second"));
    let out = mount_again(&v, &b, "");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).is_empty() && stderr(&out).is_empty(), "a mount says nothing: {out:?}");
    assert!(is_mounted(&b));
    assert_eq!(dev(&a), dev(&b), "one file system at two places");

    // Written through one, seen through the other at once: no fsync, no
    // wait (the data may still be in the kernel's writeback cache).
    let (a_, b_) = (a.display().to_string(), b.display().to_string());
    sh(&format!("echo hello > {a_}/f && mkdir -p {a_}/d/e && ln -s f {a_}/l && chmod 640 {a_}/f"));
    assert_eq!(sh(&format!("cat {b_}/f")), "hello\n");
    assert_eq!(sh(&format!("stat -c %a:%s {b_}/f")), "640:6\n");
    assert_eq!(sh(&format!("readlink {b_}/l")), "f\n");
    sh(&format!("dd if=/dev/urandom of={b_}/d/e/big bs=64k count=40 status=none"));
    sh(&format!("cmp {a_}/d/e/big {b_}/d/e/big"));
    sh(&format!("printf x | dd of={a_}/d/e/big bs=1 seek=100000 conv=notrunc status=none"));
    sh(&format!("cmp {a_}/d/e/big {b_}/d/e/big"));
    sh(&format!("mv {b_}/f {b_}/g && rm {b_}/l"));
    assert!(!Path::new(&format!("{a_}/f")).exists() && !Path::new(&format!("{a_}/l")).exists());
    assert_eq!(sh(&format!("cat {a_}/g")), "hello\n");
    sh(&format!("cp -a /usr/include/linux {a_}/inc"));
    assert_eq!(
        sh(&format!("cd {a_}/inc && find . -type f | sort | xargs md5sum")),
        sh(&format!("cd {b_}/inc && find . -type f | sort | xargs md5sum"))
    );

    // Unmounting one leaves the other, served as before.
    let out = dualfs(&["umount", &a_]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("stays mounted on {b_}")), "{}", stdout(&out));
    assert!(!is_mounted(&a) && is_mounted(&b));
    sh(&format!("echo after >> {b_}/g && sync {b_}/g"));
    assert_eq!(sh(&format!("cat {b_}/g")), "hello\nafter\n");
    // ...and can be joined again through the one left.
    let out = mount_again(&v, &a, "");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sh(&format!("cat {a_}/g")), "hello\nafter\n");
    let out = dualfs(&["umount", &b_]);
    assert!(out.status.success(), "{}", stderr(&out));

    // The volume closes with the last mount, cleanly, with everything in it.
    v.umount();
    v.mount();
    assert_eq!(sh(&format!("cat {a_}/g")), "hello\nafter\n");
    assert_eq!(std::fs::metadata(format!("{a_}/d/e/big")).unwrap().len(), 40 * 65536);
    v.umount();
}

#[test]
fn a_second_mount_asking_other_volume_options_is_refused_naming_the_option() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount_with("commit=7");
    let b = dir(&v, "second");
    for (asked, option) in [
        ("commit=30", "option commit differs"),
        ("commit=7,nowriteback", "option writeback differs"),
        ("commit=7,allow_other", "option allow_other differs"),
        ("commit=7,noatime", "option atime differs"),
        ("commit=7,attr_timeout=0", "option attr_timeout differs"),
        ("commit=7,clone=other", "clone=other"),
    ] {
        let out = mount_again(&v, &b, asked);
        assert!(!out.status.success(), "{asked} was accepted");
        assert!(stderr(&out).contains(option), "{asked}: {}", stderr(&out));
        assert!(!is_mounted(&b), "{asked}");
    }
    // The wrong data device beside the right meta-data device.
    let other = TestVolume::create("64M").unwrap();
    let out = dualfs(&[
        "mount",
        "-o",
        &format!("log={},{},commit=7", v.dir.path().join("dualfs.log").display(), extra_mount_options()),
        v.meta.to_str().unwrap(),
        other.data.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not the devices of the volume"), "{}", stderr(&out));
    assert!(!is_mounted(&b));
    v.umount();
}

#[test]
fn a_second_mount_has_its_own_mount_flags() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let (a_, b) = (v.m().to_string(), dir(&v, "second"));
    let b_ = b.display().to_string();
    let out = mount_again(&v, &b, "ro,noexec");
    assert!(out.status.success(), "{}", stderr(&out));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some(b_.as_str())).unwrap();
    assert!(line.contains(" ro,") && line.contains("noexec"), "{line}");
    // Read-only here, writable there, one file system.
    let out = sh_output(&format!("touch {b_}/x"));
    assert!(stderr(&out).contains("Read-only file system"), "{}", stderr(&out));
    sh(&format!("echo w > {a_}/x"));
    assert_eq!(sh(&format!("cat {b_}/x")), "w\n");
    sh(&format!("umount {b_}"));

    // A volume served read-only takes no writable second mount.
    v.umount();
    v.mount_with("ro");
    let out = mount_again(&v, &b, "");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("option ro differs"), "{}", stderr(&out));
    let out = mount_again(&v, &b, "ro");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sh(&format!("cat {b_}/x")), "w\n");
    sh(&format!("umount {b_}"));
    v.umount();
}

#[test]
fn a_signal_to_the_serving_process_unmounts_every_mount_of_the_volume() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let (b, c) = (dir(&v, "second"), dir(&v, "third"));
    for m in [&b, &c] {
        let out = mount_again(&v, m, "");
        assert!(out.status.success(), "{}", stderr(&out));
    }
    sh(&format!("echo kept > {}/k", c.display()));
    // A snapshot served beside them goes too.
    let snap = dir(&v, "snap");
    assert!(dualfs(&["snapshot", "create", v.m(), "s"]).status.success());
    let out = mount_again(&v, &snap, "snapshot=s");
    assert!(out.status.success(), "{}", stderr(&out));
    let pid = pid_serving(&v);
    sh(&format!("kill -TERM {pid}"));
    assert!(common::wait_unlocked(&v.meta, std::time::Duration::from_secs(30)), "the volume never closed");
    let start = std::time::Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(start.elapsed().as_secs() < 30, "the serving process did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for m in [&v.mnt, &b, &c, &snap] {
        assert!(!is_mounted(m), "{} still mounted", m.display());
    }
    v.fsck();
    v.mount();
    assert_eq!(sh(&format!("cat {}/k", v.m())), "kept\n");
    v.umount();
}

#[test]
fn mount_8_mounting_a_mounted_volume_again_gives_the_same_file_system() {
    let Some(v) = TestVolume::create("64M") else {
        return;
    };
    // As mount(8) runs the installed helper: SOURCE MOUNTPOINT -o OPTIONS -t TYPE.
    let helper = v.dir.path().join("mount.fuse.dualfs");
    std::os::unix::fs::symlink(common::DUALFS, &helper).unwrap();
    let source = format!("{}#{}", v.meta.display(), v.data.display());
    let (a, b) = (dir(&v, "a"), dir(&v, "b"));
    let opts = format!("rw,{}", extra_mount_options());
    for m in [&a, &b] {
        let out = std::process::Command::new(&helper)
            .args([source.as_str(), m.to_str().unwrap(), "-o", &opts, "-t", "fuse.dualfs"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}: {}", m.display(), stderr(&out));
        assert!(stdout(&out).is_empty() && stderr(&out).is_empty(), "{out:?}");
    }
    assert_eq!(dev(&a), dev(&b));
    // A mount by root through the helper honours devices and set-id bits;
    // a `dualfs mount` beside it keeps FUSE's nodev,nosuid on its own mount.
    let c = dir(&v, "c");
    let out = dualfs(&[
        "mount",
        "-o",
        &extra_mount_options(),
        v.meta.to_str().unwrap(),
        v.data.to_str().unwrap(),
        c.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let flags = |m: &Path| {
        info.lines().find(|l| l.split(' ').nth(4) == m.to_str()).unwrap().split(' ').nth(5).unwrap().to_string()
    };
    assert!(!flags(&b).contains("nosuid") && flags(&c).contains("nosuid,nodev"), "{} / {}", flags(&b), flags(&c));
    let (a_, b_, c_) = (a.display().to_string(), b.display().to_string(), c.display().to_string());
    sh(&format!("tar -C /usr/share -cf - doc/coreutils 2>/dev/null | tar -C {a_} -xf - && touch {a_}/stamp"));
    assert_eq!(sh(&format!("cd {a_} && tar -cf - . | md5sum")), sh(&format!("cd {c_} && tar -cf - . | md5sum")));
    // umount(8) of two of them leaves the third, and the last closes the volume.
    sh(&format!("umount {a_} && umount {c_}"));
    assert!(is_mounted(&b) && Path::new(&format!("{b_}/stamp")).exists());
    sh(&format!("umount {b_}"));
    assert!(common::wait_unlocked(&v.meta, std::time::Duration::from_secs(30)), "the volume never closed");
    v.fsck();
}

/// How many FUSE connections process `pid` serves (its /dev/fuse files).
fn connections(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter(|e| {
            e.as_ref().ok().and_then(|e| std::fs::read_link(e.path()).ok()).is_some_and(|l| l == Path::new("/dev/fuse"))
        })
        .count()
}

#[test]
fn a_snapshot_mounted_beside_the_volume_is_served_by_the_volume_s_process() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!(
        "echo before > {m}/f && dd if=/dev/urandom of={m}/big bs=64k count=16 status=none && md5sum < {m}/big > {}/big.sum",
        v.dir.path().display()
    ));
    let out = dualfs(&["snapshot", "create", &m, "one"]);
    assert!(out.status.success(), "{}", stderr(&out));
    sh(&format!("echo after > {m}/f && dd if=/dev/zero of={m}/big bs=64k count=1 conv=notrunc status=none"));
    let pid = pid_serving(&v);
    let before = connections(pid);
    let snap = dir(&v, "one");
    let out = dualfs(&[
        "mount",
        "-o",
        &format!("snapshot=one,{}", extra_mount_options()),
        v.meta.to_str().unwrap(),
        v.data.to_str().unwrap(),
        snap.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = snap.display().to_string();
    assert_eq!(connections(pid), before + 1, "the snapshot is not served by the volume's process");
    assert!(v.log().contains(&format!("serving snapshot one on {s}")), "{}", v.log());
    assert_ne!(dev(&snap), dev(&v.mnt), "another tree, another file system");
    assert_eq!(sh(&format!("cat {s}/f")), "before\n");
    assert_eq!(sh(&format!("md5sum < {s}/big")), std::fs::read_to_string(v.dir.path().join("big.sum")).unwrap());
    assert!(stderr(&sh_output(&format!("touch {s}/x"))).contains("Read-only file system"));
    let out = dualfs(&["snapshot", "delete", &m, "one"]);
    assert!(!out.status.success() && stderr(&out).contains(&s), "{}", stderr(&out));
    // The serving process refuses it too, whatever asks (not only the
    // command, which looks at the mount table first).
    let out = sh_output(&format!("setfattr -n dualfs.snapshot.delete -v one {m}"));
    assert!(stderr(&out).contains("Device or resource busy"), "{}", stderr(&out));
    let listed = String::from_utf8_lossy(&dualfs(&["snapshot", "list", &m]).stdout).into_owned();
    assert!(listed.contains("one "), "the snapshot is kept: {listed}");

    // The volume closes with its last mount and lets go of its devices; the
    // snapshot stays served until it is unmounted, and then the process ends.
    let out = dualfs(&["umount", &m]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sh(&format!("cat {s}/f")), "before\n");
    v.fsck();
    let out = dualfs(&["umount", &s]);
    assert!(out.status.success(), "{}", stderr(&out));
    let start = std::time::Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(start.elapsed().as_secs() < 30, "the serving process did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(v.log().contains("unmounted snapshot one"), "{}", v.log());
    v.mount();
    assert_eq!(sh(&format!("cat {m}/f")), "after\n");
    v.umount();
}

#[test]
fn a_clone_mounted_beside_the_volume_is_written_at_once_with_it_by_the_volume_s_process() {
    // The log of a 256 MiB volume (20 MiB): each tree is left compact, so
    // what the tree kept pins does not run it out of space.
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("echo before > {m}/f && mkdir {m}/d"));
    for args in [vec!["snapshot", "create", &m, "s"], vec!["clone", &m, "s", "c"]] {
        let out = dualfs(&args);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let pid = pid_serving(&v);
    let before = connections(pid);
    let cdir = dir(&v, "c");
    let out = mount_again(&v, &cdir, "clone=c");
    assert!(out.status.success(), "{}", stderr(&out));
    let c = cdir.display().to_string();
    assert_eq!(connections(pid), before + 1, "the clone is not served by the volume's process");
    assert!(v.log().contains(&format!("serving tree c on {c}")), "{}", v.log());
    assert_ne!(dev(&cdir), dev(&v.mnt), "another tree, another file system");
    assert_eq!(sh(&format!("cat {c}/f")), "before\n");

    // Both trees written at once by real tools, with fsyncs in both.
    let sums = v.dir.path().display().to_string();
    sh(&format!(
        "(for i in $(seq 1 150); do echo main$i > {m}/d/m$i; done) & \
         (for i in $(seq 1 150); do echo clone$i > {c}/d/c$i; done) & \
         dd if=/dev/urandom of={sums}/a bs=64k count=48 status=none && dd if={sums}/a of={m}/big bs=64k conv=fsync status=none & \
         dd if=/dev/urandom of={sums}/b bs=64k count=48 status=none && dd if={sums}/b of={c}/big bs=64k conv=fsync status=none & \
         cp -r {m}/d {c}/copy & \
         echo main > {m}/f & echo clone > {c}/f & wait"
    ));
    sh(&format!("sync -f {m}/f && sync -f {c}/f"));
    assert_eq!(sh(&format!("ls {m}/d | grep -c '^m'")), "150\n");
    assert_eq!(sh(&format!("ls {m}/d | grep -c '^c' || true")), "0\n");
    assert_eq!(sh(&format!("ls {c}/d | grep -c '^c'")), "150\n");
    assert_eq!(sh(&format!("ls {c}/d | grep -c '^m' || true")), "0\n");
    assert_eq!(sh(&format!("cat {m}/d/m77 {c}/d/c77 {m}/f {c}/f")), "main77\nclone77\nmain\nclone\n");
    assert_eq!(sh(&format!("cmp {sums}/a {m}/big && cmp {sums}/b {c}/big && echo same")), "same\n");
    assert!(!Path::new(&format!("{m}/copy")).exists());

    // The clone in use is not deleted, whatever asks.
    let out = dualfs(&["snapshot", "delete", &m, "c"]);
    assert!(!out.status.success() && stderr(&out).contains(&c), "{}", stderr(&out));

    // Unmounting the clone leaves the volume served.
    let out = dualfs(&["umount", &c]);
    assert!(out.status.success(), "{}", stderr(&out));
    sh(&format!("echo later > {m}/g && cat {m}/d/m150 > /dev/null"));
    assert_eq!(sh(&format!("cat {m}/g {m}/f")), "later\nmain\n");
    let start = std::time::Instant::now();
    while !v.log().contains("unmounted tree c") {
        assert!(start.elapsed().as_secs() < 30, "{}", v.log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    v.umount();
    v.fsck();

    // Each tree as it was written: the first mount's tree live again.
    v.mount();
    assert_eq!(sh(&format!("cat {m}/f {m}/g")), "main\nlater\n");
    v.umount();
    v.mount_with("clone=c");
    assert_eq!(sh(&format!("cat {m}/f {m}/d/c150")), "clone\nclone150\n");
    assert_eq!(sh(&format!("cmp {sums}/b {m}/big && echo same")), "same\n");
    v.umount();
    v.fsck();
}

#[test]
fn the_volume_closes_with_the_last_of_its_trees_whichever_is_unmounted_first() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("echo before > {m}/f"));
    for args in [vec!["snapshot", "create", &m, "s"], vec!["clone", &m, "s", "c"]] {
        let out = dualfs(&args);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let pid = pid_serving(&v);
    let cdir = dir(&v, "c");
    let c = cdir.display().to_string();
    assert!(mount_again(&v, &cdir, "clone=c").status.success());

    // The clone first: the command says the volume stays served.
    let out = dualfs(&["umount", &c]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("unmounted {c} (tree c); the volume stays mounted on {m}")),
        "{}",
        stdout(&out)
    );

    // The live tree first: the clone keeps the volume open, and is written on.
    assert!(mount_again(&v, &cdir, "clone=c").status.success());
    let out = dualfs(&["umount", &m]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("the volume stays mounted on {c}")), "{}", stdout(&out));
    sh(&format!("echo clone > {c}/f && sync -f {c}/f"));
    let out = dualfs(&["umount", &c]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("the volume is closed"), "{}", stdout(&out));
    let start = std::time::Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(start.elapsed().as_secs() < 30, "the serving process outlived the volume");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    v.fsck();
    v.mount_with("clone=c");
    assert_eq!(sh(&format!("cat {m}/f")), "clone\n");
    v.umount();
}

/// A tree mounted again the moment it was unmounted: the mount waits for
/// the serving process to let go of the connection that served it (here
/// held a second by a file open across a lazy unmount), rather than
/// find the tree still served and refuse.
#[test]
fn a_tree_mounted_again_right_after_its_unmount_waits_for_the_old_connection_to_end() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("echo kept > {m}/f"));
    for args in [vec!["snapshot", "create", &m, "s"], vec!["clone", &m, "s", "c"]] {
        let out = dualfs(&args);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let cdir = dir(&v, "c");
    let c = cdir.display().to_string();
    assert!(mount_again(&v, &cdir, "clone=c").status.success());
    // A reader holds the old connection open for a second after the mount
    // point is gone.
    let mut reader = std::process::Command::new("sh").args(["-c", &format!("exec 3< {c}/f; sleep 1")]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    sh(&format!("umount -l {c}"));
    let out = mount_again(&v, &cdir, "clone=c");
    assert!(out.status.success(), "mounted again right after its unmount: {}", stderr(&out));
    reader.wait().unwrap();
    assert_eq!(sh(&format!("cat {c}/f")), "kept\n");
    assert!(dualfs(&["umount", &c]).status.success());
    v.umount();
}

#[test]
fn only_root_mounts_a_mounted_volume_a_second_time() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    if !sh_output("command -v setpriv").status.success() {
        common::skip("setpriv (util-linux) is missing (scripts/install-deps)");
        return;
    }
    v.mount();
    let b = dir(&v, "second");
    sh(&format!("chmod 777 {}", b.display()));
    // Another user asks the root process serving the volume for a bind on
    // a directory of theirs: a mount of theirs root would make.
    let opts = format!("log={},{}", v.dir.path().join("dualfs.log").display(), extra_mount_options());
    let out = sh_output(&format!(
        "setpriv --reuid 1000 --regid 1000 --clear-groups {} mount -o {opts} {} {} {}",
        common::DUALFS,
        v.meta.display(),
        v.data.display(),
        b.display()
    ));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("only root mounts a mounted volume a second time"), "{}", stderr(&out));
    assert!(!is_mounted(&b));
    v.umount();
}
