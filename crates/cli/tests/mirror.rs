//! A mirrored meta-data device with real tools: `dualfs mkfs
//! --meta-mirror`, mounted with `-o mirror=`; a zeroed block of the first
//! copy is read from the second and counted in `dualfs stats`; a missing
//! copy refuses the mount unless `-o degraded`, and the copy that missed
//! writes is refused as stale when it comes back.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::os::unix::fs::FileExt;

use common::{Loops, TestVolume, dualfs, sh};
use serde_json::Value;

fn stats(v: &TestVolume) -> Value {
    let out = dualfs(&["stats", "--json", v.m()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn zero_block(path: &std::path::Path, block: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&[0u8; 4096], block * 4096).unwrap();
}

#[test]
fn a_mirrored_volume_heals_a_zeroed_block_and_refuses_a_missing_or_stale_copy() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    let mirror = v.dir.path().join("mirror.img");
    let len = std::fs::metadata(&v.meta).unwrap().len();
    std::fs::File::create(&mirror).unwrap().set_len(len).unwrap();
    let (m, d, mm) = (
        v.meta.to_str().unwrap().to_string(),
        v.data.to_str().unwrap().to_string(),
        mirror.to_str().unwrap().to_string(),
    );
    let (m, d, mm) = (m.as_str(), d.as_str(), mm.as_str());
    let out = dualfs(&["mkfs", "-f", "--meta-mirror", mm, m, d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sb: Value = serde_json::from_slice(&dualfs(&["inspect", "--json", m, d, "superblock"]).stdout).unwrap();
    assert_eq!(sb["mirror"]["copies"], 2, "{sb}");
    assert_eq!(sb["mirror"]["state"], "in sync");

    let with_mirror = format!("mirror={mm}");
    v.mount_with(&with_mirror);
    assert_eq!(stats(&v)["mirror_copies_in_use"], 2);
    let mnt = v.m().to_string();
    sh(&format!("mkdir {mnt}/d && for i in $(seq 1 50); do echo $i > {mnt}/d/f$i; done"));
    sh(&format!("dd if=/dev/urandom of={mnt}/synced bs=64k count=4 conv=fsync status=none"));
    let want = sh(&format!("md5sum {mnt}/synced"));
    v.umount();

    // Both checkpoint slots zeroed on the first copy: the mount reads them
    // from the second and writes them back.
    zero_block(&v.meta, 1);
    zero_block(&v.meta, 2);
    v.mount_with(&with_mirror);
    let s = stats(&v);
    assert!(s["mirror_blocks_healed"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(sh(&format!("md5sum {mnt}/synced")), want);
    assert!(v.log().contains("read from the mirror"), "{}", v.log());
    v.umount();

    // The second copy missing: refused, then degraded on the first.
    let out = v.mount_output("");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("degraded") && err.contains("missing"), "{err}");
    v.mount_with("degraded");
    let s = stats(&v);
    assert_eq!(s["mirror_degraded"], 1, "{s}");
    assert!(s["warnings"].to_string().contains("degraded"), "{s}");
    sh(&format!("echo while-degraded > {mnt}/new && sync"));
    v.umount();
    let sb: Value = serde_json::from_slice(&dualfs(&["inspect", "--json", m, d, "superblock"]).stdout).unwrap();
    assert_eq!(sb["mirror"]["state"], "degraded", "{sb}");

    // The second copy back: it missed a file, so it is refused as stale,
    // and degraded the volume runs on the first with the file.
    let out = v.mount_output(&with_mirror);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("stale"), "{}", String::from_utf8_lossy(&out.stderr));
    v.mount_with(&format!("{with_mirror},degraded"));
    assert_eq!(sh(&format!("cat {mnt}/new")), "while-degraded\n");
    v.umount();
}

/// An image file as large as the meta-data device's, for a new copy.
fn new_copy(v: &TestVolume, name: &str) -> String {
    let p = v.dir.path().join(name);
    let len = std::fs::metadata(&v.meta).unwrap().len();
    std::fs::File::create(&p).unwrap().set_len(len).unwrap();
    p.to_str().unwrap().to_string()
}

fn sums(mnt: &str) -> String {
    sh(&format!("cd {mnt} && find . -type f | sort | xargs md5sum"))
}

#[test]
fn a_copy_added_while_files_are_written_holds_every_file_when_the_first_copy_is_lost() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    let mm = new_copy(&v, "mirror.img");
    v.mount();
    let mnt = v.m().to_string();
    sh(&format!(
        "mkdir {mnt}/before && for i in $(seq 1 100); do head -c $((i*1000)) /dev/urandom > {mnt}/before/f$i; done"
    ));
    // Files written and fsync'd all the while the copy runs.
    let mut writer = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "mkdir {mnt}/during && for i in $(seq 1 300); do dd if=/dev/urandom of={mnt}/during/f$i bs=4k \
             count=$((i % 7 + 1)) conv=fsync status=none || exit 1; done"
        ))
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let out = dualfs(&["mirror", "add", &mnt, &mm]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("-o mirror={mm}")), "{said}");
    assert!(writer.wait().unwrap().success());
    let s = stats(&v);
    assert_eq!((s["mirror_copies_in_use"].as_u64(), s["mirror_degraded"].as_u64()), (Some(2), Some(0)), "{s}");
    let out = dualfs(&["mirror", "add", &mnt, &new_copy(&v, "third.img")]);
    assert!(!out.status.success(), "a third copy was taken");
    sh(&format!("echo after > {mnt}/after && sync"));
    let want = sums(&mnt);
    assert!(want.lines().count() >= 401, "{want}");
    v.umount();

    // The first copy lost, every block of it: the added copy alone holds
    // every file.
    let len = std::fs::metadata(&v.meta).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&v.meta).unwrap();
    f.set_len(0).unwrap();
    f.set_len(len).unwrap();
    drop(f);
    let out = v.mount_output(&format!("mirror={mm}"));
    assert!(!out.status.success(), "mounted with the first copy zeroed and no -o degraded");
    v.mount_with(&format!("mirror={mm},degraded"));
    assert_eq!(sums(&mnt), want);
    // fsck after the unmount reads the copy in use.
    v.meta = std::path::PathBuf::from(&mm);
    v.umount();
}

#[test]
fn replace_takes_a_degraded_mirror_out_of_degraded_mode() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    let mm = new_copy(&v, "mirror.img");
    let (m, d) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let out = dualfs(&["mkfs", "-f", "--meta-mirror", &mm, &m, &d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mnt = v.m().to_string();
    // The mirror missing: degraded.
    v.mount_with("degraded");
    sh(&format!("mkdir {mnt}/d && for i in $(seq 1 50); do echo $i > {mnt}/d/f$i; done && sync"));
    assert_eq!(stats(&v)["mirror_degraded"], 1);
    let mm2 = new_copy(&v, "mirror2.img");
    let out = dualfs(&["mirror", "replace", &mnt, &mm, &mm2]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("-o mirror={mm2}")));
    let s = stats(&v);
    assert_eq!((s["mirror_degraded"].as_u64(), s["mirror_copies_in_use"].as_u64()), (Some(0), Some(2)), "{s}");
    sh(&format!("echo after > {mnt}/after && sync"));
    let want = sums(&mnt);
    v.umount();
    // The old copy is stale; the new one is in sync, no -o degraded needed.
    let out = v.mount_output(&format!("mirror={mm}"));
    assert!(!out.status.success(), "the replaced copy was taken");
    v.mount_with(&format!("mirror={mm2}"));
    assert_eq!(sums(&mnt), want);
    assert_eq!(stats(&v)["mirror_degraded"], 0);
    // And removed again: the volume mounts unmirrored.
    let out = dualfs(&["mirror", "remove", &mnt, &mm2]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    v.umount();
    v.mount();
    assert_eq!(sums(&mnt), want);
    v.umount();
}

fn read_block(path: &std::path::Path, block: u64) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    std::fs::File::open(path).unwrap().read_exact_at(&mut b, block * 4096).unwrap();
    b
}

#[test]
fn fsck_reads_a_block_bad_on_the_first_copy_from_the_mirror() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    let mm = new_copy(&v, "mirror.img");
    let (m, d) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let out = dualfs(&["mkfs", "-f", "--meta-mirror", &mm, &m, &d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    v.mount_with(&format!("mirror={mm}"));
    let mnt = v.m().to_string();
    sh(&format!("mkdir {mnt}/d && for i in $(seq 1 50); do echo $i > {mnt}/d/f$i; done"));
    v.umount();
    // Both checkpoint slots of the first copy zeroed: the first copy
    // alone cannot be checked; with the mirror it is clean, and the check
    // writes nothing.
    zero_block(&v.meta, 1);
    zero_block(&v.meta, 2);
    let alone = dualfs(&["fsck", &m, &d]);
    assert!(!alone.status.success(), "{}", String::from_utf8_lossy(&alone.stdout));
    let both = dualfs(&["fsck", "--meta-mirror", &mm, &m, &d]);
    assert!(
        both.status.success(),
        "{}{}",
        String::from_utf8_lossy(&both.stdout),
        String::from_utf8_lossy(&both.stderr)
    );
    assert!(read_block(&v.meta, 1).iter().all(|&x| x == 0), "fsck -n wrote to the first copy");
    // Repairing writes the good blocks back.
    let y = dualfs(&["fsck", "-y", "--meta-mirror", &mm, &m, &d]);
    assert!(y.status.code().is_some_and(|c| c <= 1), "{}", String::from_utf8_lossy(&y.stdout));
    assert_eq!(read_block(&v.meta, 1), read_block(std::path::Path::new(&mm), 1));
    let alone = dualfs(&["fsck", &m, &d]);
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stdout));
}

/// Loop devices over image files, detached (each by its name) when dropped.
/// A mirrored volume on three loop devices (copy 1, copy 2, data), the
/// test volume's paths pointing at them: (the volume, the loops).
fn on_loops() -> Option<(TestVolume, Loops)> {
    let mut v = TestVolume::create("256M")?;
    let mm = new_copy(&v, "mirror.img");
    let loops = Loops::attach(&[&v.meta, std::path::Path::new(&mm), &v.data])?;
    let (m, c2, d) = (&loops.0[0], &loops.0[1], &loops.0[2]);
    let out = dualfs(&["mkfs", "-f", "--meta-mirror", c2, m, d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    v.meta = m.into();
    v.data = d.into();
    Some((v, loops))
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_mounted_scrub_mends_blocks_zeroed_on_the_second_copy_under_the_mount() {
    use dualfs_engine::device::{BlockDevice, FileDevice};
    use dualfs_engine::meta_log::Log;
    use dualfs_engine::meta_log::live::LiveKind;

    let Some((mut v, mut loops)) = on_loops() else {
        return;
    };
    let (c2, d) = (loops.0[1].clone(), loops.0[2].clone());
    let with_mirror = format!("mirror={c2}");
    v.mount_with(&with_mirror);
    let mnt = v.m().to_string();
    sh(&format!(
        "for k in 1 2 3; do mkdir {mnt}/d$k && for i in $(seq 1 40); do head -c $((i*300)) /dev/urandom > \
         {mnt}/d$k/f$i; done; done"
    ));
    let want = sums(&mnt);
    v.umount();
    // Blocks of the files' inodes and directories: they stay where they
    // are while nothing changes the files.
    let hit: Vec<u64> = {
        let copy: std::sync::Arc<dyn BlockDevice> =
            std::sync::Arc::new(FileDevice::open(c2.as_ref(), true, false).unwrap());
        let data: std::sync::Arc<dyn BlockDevice> =
            std::sync::Arc::new(FileDevice::open(d.as_ref(), true, false).unwrap());
        let (mut log, _) = Log::open(copy, data).unwrap();
        let live = log.live_blocks(true).unwrap();
        let inodes = live.iter().filter(|b| matches!(b.kind, LiveKind::Inodes(_))).step_by(2).take(6);
        let nodes = live.iter().filter(|b| matches!(b.kind, LiveKind::Node(_))).take(4);
        inodes.chain(nodes).map(|b| b.at.0).collect()
    };
    assert!(hit.len() >= 4, "{hit:?}");
    v.mount_with(&with_mirror);
    // Zeroed on the second copy's device while mounted: the mount reads
    // the first copy only, so only a scrub finds them.
    for b in &hit {
        sh(&format!("dd if=/dev/zero of={c2} bs=4096 seek={b} count=1 oflag=direct conv=notrunc status=none"));
    }
    let out = dualfs(&["scrub", "--json", &mnt]);
    assert_eq!(out.status.code(), Some(1), "all corrected: {}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &j["report"];
    assert_eq!(
        (r["copies"].as_u64(), r["corrected"].as_u64(), r["uncorrectable"].as_u64()),
        (Some(2), Some(hit.len() as u64), Some(0)),
        "{j}"
    );
    assert_eq!(r["per_copy"][1]["repaired"].as_u64(), Some(hit.len() as u64), "{j}");
    assert_eq!(r["per_copy"][0]["bad"].as_u64(), Some(0), "{j}");
    let mut bad: Vec<u64> = r["bad_meta"].as_array().unwrap().iter().map(|b| b["block"].as_u64().unwrap()).collect();
    bad.sort_unstable();
    let mut want_bad = hit.clone();
    want_bad.sort_unstable();
    assert_eq!(bad, want_bad, "{j}");
    assert_eq!(sums(&mnt), want);
    // A second scrub finds nothing.
    let again = dualfs(&["scrub", "--json", &mnt]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stdout));
    v.umount();
    // The second copy is whole again: alike the first block for block,
    // clean alone, and alone (read-only, degraded) it holds every file.
    let cmp = common::sh_output(&format!("cmp {} {c2}", loops.0[0]));
    assert!(cmp.status.success(), "the copies differ: {}", String::from_utf8_lossy(&cmp.stdout));
    let alone = dualfs(&["fsck", &c2, &d]);
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stdout));
    // The first copy gone from the machine: the second alone, read-only
    // (nothing marks the mirror degraded), holds every file.
    let first = loops.0[0].clone();
    let _ = common::sh_output(&format!("losetup -d {first}"));
    loops.0.retain(|x| *x != first);
    v.meta = c2.clone().into();
    v.mount_with("ro,degraded");
    assert_eq!(sums(&mnt), want);
    v.umount();
}

#[test]
fn a_mirrored_volume_mounts_finding_its_copy_among_the_block_devices_and_refuses_it_stale() {
    let Some((mut v, mut loops)) = on_loops() else {
        return;
    };
    let (m, c2, d) = (loops.0[0].clone(), loops.0[1].clone(), loops.0[2].clone());
    // No mirror= given: the copy is found by the volume's UUIDs.
    v.mount();
    assert_eq!(stats(&v)["mirror_copies_in_use"], 2);
    assert!(v.log().contains(&format!("second copy {c2}, found among the block devices: in use")), "{}", v.log());
    let mnt = v.m().to_string();
    sh(&format!("mkdir {mnt}/d && for i in $(seq 1 20); do echo $i > {mnt}/d/f$i; done"));
    v.umount();
    // An unmounted scrub finds it too.
    let out = dualfs(&["scrub", "--json", &m, &d]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["report"]["copies"], 2, "{j}");
    // inspect shows both copies in sync.
    let sb: Value = serde_json::from_slice(&dualfs(&["inspect", "--json", &m, &d, "superblock"]).stdout).unwrap();
    let devs = sb["mirror"]["devices"].as_array().cloned().unwrap_or_default();
    assert_eq!(devs.len(), 2, "{sb}");
    assert!(devs.iter().all(|c| c["state"] == "in sync"), "{sb}");

    // The second copy gone from the machine: not found, and the mount
    // says so; degraded it runs on the first, which leaves the second stale.
    let c2_file = v.dir.path().join("mirror.img");
    let _ = common::sh_output(&format!("losetup -d {c2}"));
    loops.0.retain(|x| *x != c2);
    let out = v.mount_output("");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not found among the block devices") && stderr(&out).contains("-o mirror=DEV"),
        "{}",
        stderr(&out)
    );
    v.mount_with("degraded");
    sh(&format!("echo while-degraded > {mnt}/new"));
    v.umount();
    // Back on a loop device: found, and refused as stale.
    let back = Loops::attach(&[&c2_file]).unwrap();
    let out = v.mount_output("");
    assert!(!out.status.success(), "the stale copy was taken");
    let err = stderr(&out);
    assert!(err.contains("stale") && err.contains(&back.0[0]), "{err}");
    v.mount_with("degraded");
    assert_eq!(sh(&format!("cat {mnt}/new")), "while-degraded\n");
    assert!(v.log().contains("found among the block devices: not in use"), "{}", v.log());
    v.umount();
    let out = dualfs(&["inspect", "--json", "--meta-mirror", &back.0[0], &m, &d, "superblock"]);
    let sb: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(sb["mirror"]["devices"][1]["state"], "stale", "{sb}");
}

/// Unmounts (detached) what is left on the mount point when a test fails
/// while a volume it mounted by tag is mounted.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if common::is_mounted(&self.0) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Mounts `source` as mount(8) runs a helper for an fstab line (`dualfs
/// SOURCE MOUNTPOINT -o OPTIONS`), the mount's log in the test's folder
/// (over the transport the machine gives, as a helper mount is).
fn mount_source(v: &TestVolume, source: &str, options: &str) -> std::process::Output {
    let log = v.dir.path().join("dualfs.log");
    let opts = format!("log={}{options}", log.display());
    dualfs(&[source, v.m(), "-o", &opts])
}

fn umount_tagged(v: &TestVolume) {
    let out = dualfs(&["umount", v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_mirrored_volume_is_named_by_its_uuid_or_label_its_two_copies_one_device() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    let c2_file = std::path::PathBuf::from(new_copy(&v, "mirror.img"));
    let Some(mut loops) = Loops::attach(&[&v.meta, &c2_file, &v.data]) else {
        return;
    };
    let (m, c2, d) = (loops.0[0].clone(), loops.0[1].clone(), loops.0[2].clone());
    // A label no other test's volume has: two volumes answering to one
    // label are refused (below), and tests run side by side.
    let label = format!("mirror-tag-{}", std::process::id());
    let out = dualfs(&["mkfs", "-f", "-L", &label, "--meta-mirror", &c2, &m, &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    (v.meta, v.data) = (m.clone().into(), d.clone().into());
    let probe: Value = serde_json::from_slice(&dualfs(&["probe", "--json", &m]).stdout).unwrap();
    let uuid = probe[0]["uuid"].as_str().unwrap().to_string();
    let _unmount = Unmount(v.mnt.clone());

    // One tag, as fstab names the volume: the two copies carry its UUID,
    // and are one meta-data device; the other copy is the mirror.
    let out = mount_source(&v, &format!("uuid={uuid}"), "");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stats(&v)["mirror_copies_in_use"], 2);
    assert!(v.log().contains("found among the block devices: in use"), "{}", v.log());
    let mnt = v.m().to_string();
    sh(&format!("mkdir {mnt}/d && for i in $(seq 1 20); do echo $i > {mnt}/d/f$i; done"));
    let want = sums(&mnt);
    umount_tagged(&v);
    // A tag for each device, and the label.
    let tag = format!("UUID={uuid}");
    let opts = format!("log={}", v.dir.path().join("dualfs.log").display());
    let out = dualfs(&["mount", "-o", &opts, &tag, &format!("LABEL={label}"), &mnt]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stats(&v)["mirror_copies_in_use"], 2);
    assert_eq!(sums(&mnt), want);
    umount_tagged(&v);
    // The tools that look a tag up: fsck, scrub (both copies), inspect.
    let out = dualfs(&["fsck", &tag]);
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let out = dualfs(&["scrub", "--json", &format!("LABEL={label}")]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["report"]["copies"], 2, "{j}");
    let out = dualfs(&["inspect", "--json", &tag, &tag, "superblock"]);
    let sb: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    let devs = sb["mirror"]["devices"].as_array().cloned().unwrap_or_default();
    assert!(devs.len() == 2 && devs.iter().all(|c| c["state"] == "in sync"), "{sb}");

    // The second copy away while the first runs degraded: back, it names
    // an older generation. The tag takes the copy in sync, and the mount
    // refuses the stale one as its mirror unless -o degraded.
    let _ = common::sh_output(&format!("losetup -d {c2}"));
    loops.0.retain(|x| *x != c2);
    v.mount_with("degraded");
    sh(&format!("echo while-degraded > {mnt}/new"));
    v.umount();
    let back = Loops::attach(&[&c2_file]).unwrap();
    let out = mount_source(&v, &tag, "");
    assert!(!out.status.success(), "the stale copy was taken");
    let err = stderr(&out);
    assert!(err.contains("stale") && err.contains(&back.0[0]), "{err}");
    let out = mount_source(&v, &tag, ",degraded");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sh(&format!("cat {mnt}/new")), "while-degraded\n");
    let log = v.log();
    let last = log.lines().rev().find(|l| l.contains("mounted /dev/")).unwrap_or_default();
    assert!(last.contains(&format!("mounted {m} and {d}")), "{log}");
    umount_tagged(&v);

    // Another volume with the same label: two volumes, refused by label.
    let Some(other) = TestVolume::create("64M") else {
        return;
    };
    let Some(two) = Loops::attach(&[&other.meta, &other.data]) else {
        return;
    };
    let out = dualfs(&["mkfs", "-f", "-L", &label, &two.0[0], &two.0[1]]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mount_source(&v, &format!("label={label}"), ",degraded");
    assert!(!out.status.success(), "two volumes with one label were taken as one");
    assert!(stderr(&out).contains("several DualFS meta-data devices answer to LABEL="), "{}", stderr(&out));
    assert!(stderr(&out).contains(&two.0[0]), "{}", stderr(&out));
    let out = mount_source(&v, &tag, ",degraded");
    assert!(out.status.success(), "{}", stderr(&out));
    umount_tagged(&v);
}

#[test]
fn tune_changes_both_copies_of_a_mirror_and_refuses_without_the_second() {
    let Some((mut v, mut loops)) = on_loops() else {
        return;
    };
    let (m, c2, d) = (loops.0[0].clone(), loops.0[1].clone(), loops.0[2].clone());
    let probe = |dev: &str| -> Value {
        let out = dualfs(&["probe", "--json", dev]);
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)))[0].clone()
    };
    // The second copy found among the block devices: both take the new
    // label and UUID, and still mount as a mirror in sync.
    let out = dualfs(&["tune", "-L", "twins", "-U", "random", &m, &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("second copy: {c2}")), "{}", stderr(&out));
    let (first, second) = (probe(&m), probe(&c2));
    assert_eq!(second["label"], "twins", "{second}");
    assert_eq!(first["uuid"], second["uuid"], "{first} {second}");
    v.mount();
    assert_eq!(stats(&v)["mirror_copies_in_use"], 2);
    assert_eq!(stats(&v)["mirror_degraded"], 0);
    v.umount();

    // The second copy gone: a mirror in sync is not tuned on one copy.
    let c2_file = v.dir.path().join("mirror.img");
    let _ = common::sh_output(&format!("losetup -d {c2}"));
    loops.0.retain(|x| *x != c2);
    let out = dualfs(&["tune", "-L", "one", &m, &d]);
    assert!(!out.status.success(), "tuned one copy of a mirror in sync");
    assert!(stderr(&out).contains("--meta-mirror DEV"), "{}", stderr(&out));
    assert_eq!(probe(&m)["label"], "twins", "nothing written");
    // Named, it is tuned with the first.
    let back = Loops::attach(&[&c2_file]).unwrap();
    let out = dualfs(&["tune", "--meta-mirror", &back.0[0], "-L", "named", &m, &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(probe(&back.0[0])["label"], "named");
    v.mount();
    assert_eq!(stats(&v)["mirror_copies_in_use"], 2);
    v.umount();
}

#[test]
fn a_command_run_on_an_unmounted_mirror_writes_both_copies_or_nothing() {
    let Some((_v, mut loops)) = on_loops() else {
        return;
    };
    let (m, c2, d) = (loops.0[0].clone(), loops.0[1].clone(), loops.0[2].clone());
    // The second copy found among the block devices: the snapshot is on
    // both copies (copy 2 read alone lists it).
    let out = dualfs(&["snapshot", "create", &m, &d, "both"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = |meta: &str| String::from_utf8_lossy(&dualfs(&["snapshot", "list", meta, &d]).stdout).into_owned();
    assert!(listed(&c2).contains("both"), "copy 2 alone: {}", listed(&c2));
    // A repair takes both copies too.
    let out = dualfs(&["fsck", "-y", &m, &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("second copy: {c2}")), "{}", stderr(&out));
    // Without it, nothing is written to copy 1 alone.
    let _ = common::sh_output(&format!("losetup -d {c2}"));
    loops.0.retain(|x| *x != c2);
    let out = dualfs(&["snapshot", "create", &m, &d, "one"]);
    assert!(!out.status.success(), "a snapshot was made on one copy of a mirror in sync");
    assert!(stderr(&out).contains("not found among the block devices"), "{}", stderr(&out));
    assert!(!listed(&m).contains("one"), "{}", listed(&m));
    let out = dualfs(&["fsck", "-y", &m, &d]);
    assert!(!out.status.success(), "a repair of one copy of a mirror in sync");
    assert!(stderr(&out).contains("--meta-mirror DEV"), "{}", stderr(&out));
    // A check reads the one copy.
    assert!(dualfs(&["fsck", &m, &d]).status.success());
}
