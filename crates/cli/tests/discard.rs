//! Discard with real tools: `fstrim` through the mount on a volume with a
//! snapshot, `-o discard`, and `dualfs trim` on the unmounted volume. The
//! volume's devices are sparse image files, so what is discarded shows as
//! space the images give back (holes punched).
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{TestVolume, dualfs, sh};

/// Bytes an image file holds on its host.
fn held(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks() * 512
}

const MIB: u64 = 1 << 20;

fn trimmed(out: &str) -> u64 {
    // fstrim -v: "MNT: 985 MiB (1032843264 bytes) trimmed".
    let n = out.split('(').nth(1).and_then(|r| r.split(' ').next()).unwrap_or_else(|| panic!("fstrim said {out:?}"));
    n.parse().unwrap()
}

#[test]
fn fstrim_gives_back_free_space_and_keeps_what_a_snapshot_holds() {
    let Some(mut v) = TestVolume::create("1G") else { return };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("head -c 64M /dev/urandom > {m}/a; sha256sum {m}/a > {m}/../a.sum"));
    assert!(dualfs(&["sync", &m]).status.success());
    assert!(dualfs(&["snapshot", "create", &m, "s1"]).status.success());
    sh(&format!("head -c 32M /dev/urandom > {m}/b"));
    assert!(dualfs(&["sync", &m]).status.success());
    sh(&format!("rm {m}/a {m}/b"));
    assert!(dualfs(&["sync", &m]).status.success());
    let before = held(&v.data);
    let first = trimmed(&sh(&format!("fstrim -v {m}")));
    assert!(first > 512 * MIB, "fstrim trimmed {first} bytes");
    let after = held(&v.data);
    // b's 32 MiB were discarded; a's 64 MiB, which s1 holds, were not.
    assert!(after + 32 * MIB <= before, "{before} bytes held before, {after} after");
    assert!(after >= 64 * MIB, "the snapshot's blocks are gone: {after} bytes held");
    let snap = v.dir.path().join("s1");
    std::fs::create_dir(&snap).unwrap();
    let s = snap.to_str().unwrap();
    assert!(
        dualfs(&["mount", "-o", "snapshot=s1", v.meta.to_str().unwrap(), v.data.to_str().unwrap(), s]).status.success()
    );
    let check = sh(&format!("cd {s} && sed 's#{m}/a#a#' {m}/../a.sum | sha256sum -c"));
    assert!(dualfs(&["umount", s]).status.success());
    assert!(check.contains("a: OK"), "{check}");
    // Nothing freed since: ext4 says 0 bytes then too.
    assert_eq!(trimmed(&sh(&format!("fstrim -v {m}"))), 0);
    // Once the snapshot is gone its blocks are discarded by the next trim.
    assert!(dualfs(&["snapshot", "delete", &m, "s1"]).status.success());
    assert!(trimmed(&sh(&format!("fstrim -v {m}"))) >= 64 * MIB);
    assert!(held(&v.data) + 64 * MIB <= after, "a's blocks were not discarded");
    v.umount();
}

#[test]
fn fstrim_counts_within_the_size_statfs_gives() {
    let Some(mut v) = TestVolume::create("1G") else { return };
    v.mount();
    let m = v.m().to_string();
    // statfs's size: the data device's.
    let size: u64 =
        sh(&format!("stat -f -c '%b*%S' {m}")).trim().split('*').map(|w| w.parse::<u64>().unwrap()).product();
    let all = trimmed(&sh(&format!("fstrim -v {m}")));
    assert!(all <= size && all > size / 2, "fstrim trimmed {all} bytes of a file system of {size}");
    // A start at or past statfs's size is past the end (EINVAL).
    let past = std::process::Command::new("fstrim").args(["-o", &size.to_string(), &m]).output().unwrap();
    assert!(!past.status.success(), "a trim past the end: {}", String::from_utf8_lossy(&past.stdout));
    assert!(trimmed(&sh(&format!("fstrim -v -o 10M {m}"))) <= size - (10 << 20));
    v.umount();
}

#[test]
fn with_discard_freed_blocks_are_given_back_as_they_are_freed() {
    let Some(mut v) = TestVolume::create("1G") else { return };
    v.mount_with("discard");
    let m = v.m().to_string();
    sh(&format!("head -c 48M /dev/urandom > {m}/a; mkdir {m}/d; for i in $(seq 1 400); do echo $i > {m}/d/f$i; done"));
    assert!(dualfs(&["sync", &m]).status.success());
    let before = held(&v.data);
    sh(&format!("rm -r {m}/a {m}/d"));
    // The background writer commits and discards (commit=5 by default).
    let started = Instant::now();
    while held(&v.data) + 48 * MIB > before {
        assert!(started.elapsed() < Duration::from_secs(30), "{} bytes held, {before} before", held(&v.data));
        std::thread::sleep(Duration::from_millis(200));
    }
    // A file written after the discard reads back whole.
    sh(&format!("head -c 16M /dev/urandom > {m}/c; sha256sum {m}/c > {m}/../c.sum"));
    v.umount();
    v.mount();
    sh(&format!("sha256sum -c {m}/../c.sum"));
    v.umount();
}

#[test]
fn dualfs_trim_trims_an_unmounted_volume() {
    let Some(mut v) = TestVolume::create("1G") else { return };
    v.mount();
    let m = v.m().to_string();
    // Enough names to fill several log segments, all emptied by the rm.
    sh(&format!("head -c 32M /dev/urandom > {m}/a; mkdir {m}/d; cd {m}/d; seq 1 20000 | xargs touch"));
    assert!(dualfs(&["sync", &m]).status.success());
    sh(&format!("rm -r {m}/a {m}/d"));
    v.umount();
    let (data_before, meta_before) = (held(&v.data), held(&v.meta));
    let out = dualfs(&["trim", v.meta.to_str().unwrap(), v.data.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("trimmed"), "{text}");
    assert!(held(&v.data) + 32 * MIB <= data_before, "{text}");
    assert!(held(&v.meta) + 2 * MIB <= meta_before, "no log segment given back: {text}");
    v.fsck();
    v.mount();
    assert_eq!(std::fs::read_dir(&v.mnt).unwrap().count(), 0);
    v.umount();
}
