//! `dualfs clean`, `dualfs stats` and the utilisation histogram of
//! `dualfs inspect segments`, on an unmounted volume churned through the
//! engine and on a mounted one churned through the kernel.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{TestVolume, dualfs};
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, MountOptions};
use serde_json::Value;

/// Files the churn makes; every other one is then deleted.
const FILES: u64 = 3000;
/// An xattr this large fills most of an inode block, so every file costs
/// the log about a block and deleting half empties segments by half.
const XATTR_BYTES: usize = 3000;

fn value(i: u64) -> Vec<u8> {
    (0..XATTR_BYTES).map(|k| (i as usize).wrapping_mul(7).wrapping_add(k) as u8).collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "dualfs failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn open(meta: &Path, data: &Path) -> Volume {
    let m: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(meta, false, true).unwrap());
    let d: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(data, false, true).unwrap());
    Volume::open(m, d, MountOptions::default()).unwrap()
}

/// Segments in use less than half full, from the histogram.
fn half_empty(segments: &Value) -> u64 {
    segments["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["to_percent"].as_u64().unwrap() <= 50)
        .map(|b| b["segments"].as_u64().unwrap())
        .sum()
}

#[test]
fn offline_clean_frees_the_segments_a_churn_left_half_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    assert!(dualfs(&["mkfs", "--size", "512M", s(&meta), s(&data)]).status.success());
    {
        // The engine directly: no tick, so nothing cleans behind the test's back.
        let v = open(&meta, &data);
        let d = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..FILES {
            let a = v.create(d, format!("f{i}").as_bytes(), 0o644, Creds::ROOT).unwrap();
            v.forget(a.ino, 1).unwrap();
            v.setxattr(a.ino, b"user.v", &value(i), SetMode::Any).unwrap();
        }
        for i in (0..FILES).step_by(2) {
            v.unlink(d, format!("f{i}").as_bytes()).unwrap();
        }
        v.close().unwrap();
    }
    let inspect = |what: &str| json(&dualfs(&["inspect", "--json", s(&meta), s(&data), what]));
    let before = inspect("segments");
    assert!(half_empty(&before) >= 6, "the churn should leave half-empty segments: {}", before["histogram"]);
    let text = dualfs(&["inspect", s(&meta), s(&data), "segments"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("utilisation of the"), "the text view has the histogram");

    let out = dualfs(&["clean", s(&meta), s(&data)]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "clean failed: {said}{}", String::from_utf8_lossy(&out.stderr));
    for words in ["segments read", "moved", "segments freed", "bytes written"] {
        assert!(said.contains(words), "the summary says {words:?}:\n{said}");
    }
    let after = inspect("segments");
    let freed = after["free"].as_u64().unwrap() - before["free"].as_u64().unwrap();
    assert!(freed >= 3, "cleaning should free segments on balance: {said}\n{}", after["histogram"]);
    // The segment the moves ended in and the log's head may be half full.
    assert!(half_empty(&after) <= 2, "half-empty segments are left: {}", after["histogram"]);

    // A second run has little left to do, and --json says so in numbers.
    let report = json(&dualfs(&["clean", "--json", "--policy", "greedy", s(&meta), s(&data)]));
    assert_eq!(report["mounted"], false);
    assert!(report["report"]["segments_read"].as_u64().unwrap() <= 2, "{report}");

    let fsck = dualfs(&["fsck", s(&meta), s(&data)]);
    assert!(fsck.status.success(), "fsck: {}", String::from_utf8_lossy(&fsck.stdout));
    let v = open(&meta, &data);
    let d = v.lookup(InodeNo::ROOT, b"d").unwrap().ino;
    for i in (1..FILES).step_by(2) {
        let a = v.lookup(d, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(v.getxattr(a.ino, b"user.v").unwrap(), value(i), "file {i}");
    }
    v.close().unwrap();
}

#[test]
fn offline_clean_refuses_a_volume_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    assert!(dualfs(&["mkfs", "--size", "64M", s(&meta), s(&data)]).status.success());
    let v = open(&meta, &data);
    let out = dualfs(&["clean", s(&meta), s(&data)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already mounted or in use"), "{out:?}");
    v.close().unwrap();
    let bad = dualfs(&["clean", "--max-utilization", "1.5", s(&meta), s(&data)]);
    assert!(!bad.status.success(), "a utilisation above 1 is refused");
}

fn stats(v: &TestVolume) -> Value {
    json(&dualfs(&["stats", "--json", v.m()]))
}

#[test]
fn a_mounted_volume_is_cleaned_through_its_mount_point_and_counts_it() {
    let Some(mut v) = TestVolume::create("1G") else {
        return;
    };
    v.mount_with("allow_other");
    let d = v.path("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..FILES {
        let p = d.join(format!("f{i}"));
        std::fs::write(&p, format!("{i}\n")).unwrap();
        common::set_xattr(&p, "user.v", &value(i)).unwrap();
    }
    for i in (0..FILES).step_by(2) {
        std::fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    // Everything on the log before cleaning, so there is something to move.
    common::sh(&format!("sync -f {}", v.m()));
    let before = stats(&v);
    for name in ["commits", "segments_free", "cleaner_passes", "cleaner_segments_read", "cleaner_segments_freed"] {
        assert!(before[name].is_u64(), "stats has {name}: {before}");
    }
    let text = dualfs(&["stats", v.m()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("cleaner_segments_freed"), "{text:?}");

    let report = json(&dualfs(&["clean", "--json", v.m()]));
    assert_eq!(report["mounted"], true);
    let r = &report["report"];
    assert!(r["segments_read"].as_u64().unwrap() >= 3, "{report}\n{}", v.log());
    assert!(r["segments_freed"].as_u64().unwrap() >= 3, "{report}");
    assert!(r["nodes_moved"].as_u64().unwrap() + r["inodes_moved"].as_u64().unwrap() > 0, "{report}");
    let after = stats(&v);
    let grew = |name: &str| after[name].as_u64().unwrap() - before[name].as_u64().unwrap();
    assert!(grew("cleaner_passes") >= 1, "{before}\n{after}");
    assert!(grew("cleaner_segments_read") >= r["segments_read"].as_u64().unwrap(), "{before}\n{after}");
    assert!(grew("cleaner_segments_freed") >= 3, "{before}\n{after}");

    // The control attributes are root's (and the mounting user's), and hidden.
    let stranger = common::sh_output(&format!(
        "setpriv --reuid=1001 --regid=1001 --clear-groups getfattr -n dualfs.stats {}",
        v.m()
    ));
    assert!(!stranger.status.success());
    assert!(String::from_utf8_lossy(&stranger.stderr).contains("Operation not permitted"), "{stranger:?}");
    let listed = common::sh(&format!("getfattr -d -m - {}", v.m()));
    assert!(!listed.contains("dualfs."), "listxattr shows no control attribute: {listed}");

    for i in (1..FILES).step_by(2) {
        let p = d.join(format!("f{i}"));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{i}\n"));
    }
    v.umount();
    for i in (1..FILES).step_by(2).step_by(49) {
        assert!(v.inspect(&["inode", &format!("/d/f{i}")])["xattrs"]["user.v"].is_string());
    }
}
