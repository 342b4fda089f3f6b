//! A mirrored meta-data device with real tools: `dualfs mkfs
//! --meta-mirror`, mounted with `-o mirror=`; a zeroed block of the first
//! copy is read from the second and counted in `dualfs stats`; a missing
//! copy refuses the mount unless `-o degraded`, and the copy that missed
//! writes is refused as stale when it comes back.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::os::unix::fs::FileExt;

use common::{TestVolume, dualfs, sh};
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
