//! A damaged log through the tools: fsck exits 4 and says which commits
//! were lost, a writable mount is refused (or, for a table block a mount
//! does not read, the first change needing it) with what to do, `-o ro` shows
//! what is left, `-o recover=older` accepts the loss, and fsck is clean
//! after. Needs root and FUSE; skipped otherwise.

#![allow(clippy::unwrap_used)]
mod common;

use std::os::unix::fs::FileExt;

use common::{TestVolume, dualfs, sh};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// First blocks of descriptors in the meta-data image, by sequence number.
fn descriptors(image: &std::path::Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(image).unwrap();
    let mut out: Vec<(u64, u64)> = bytes
        .chunks_exact(4096)
        .enumerate()
        .filter(|(_, b)| &b[..4] == b"DFSM" && b[8] == 1 && b[10..12] == [0, 0])
        .map(|(i, b)| (u64::from_le_bytes(b[32..40].try_into().unwrap()), i as u64))
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn a_damaged_log_is_reported_refused_and_recovered_on_request() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let mut child = v.spawn_mount(&["-o", "commit=3600"]);
    for i in 0..4 {
        // `sync DIR` is an fsync of the directory: one commit each time.
        sh(&format!("for j in 1 2 3; do echo data > {m}/c{i}-$j; done; sync {m}", m = v.m()));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sh(&format!("umount -l {} 2>/dev/null || true", v.m()));
    assert!(common::wait_unlocked(&v.meta, std::time::Duration::from_secs(30)));

    // Zero the descriptor of the third-from-last commit, and its twin
    // where it has one (one damaged copy alone loses nothing): two
    // acknowledged ones follow it.
    let descs = descriptors(&v.meta);
    let mut seqs: Vec<u64> = descs.iter().map(|&(s, _)| s).collect();
    seqs.dedup();
    let seq = seqs[seqs.len() - 3];
    let f = std::fs::OpenOptions::new().write(true).open(&v.meta).unwrap();
    for &(_, block) in descs.iter().filter(|&&(s, _)| s == seq) {
        f.write_all_at(&[0u8; 4096], block * 4096).unwrap();
    }
    drop(f);

    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let out = dualfs(&["fsck", &meta, &data]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{seq}..=")) && text.contains("made durable"), "{text}");

    let out = dualfs(&["mount", &meta, &data, v.m()]);
    assert!(!out.status.success(), "a damaged volume was mounted writable");
    assert!(stderr(&out).contains("recover=older") && stderr(&out).contains("-o ro"), "{}", stderr(&out));

    v.mount_with("ro");
    assert!(v.path("c0-1").exists());
    let out = dualfs(&["umount", v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(common::wait_unlocked(&v.meta, std::time::Duration::from_secs(30)));
    v.mount_with("recover=older");
    sh(&format!("echo after > {}/after", v.m()));
    v.umount();
}

/// The oldest IFile index block of the data bitmap: written by mkfs and,
/// when no file data was written since, named by both checkpoints.
fn shared_bitmap_index(image: &std::path::Path) -> u64 {
    let bytes = std::fs::read(image).unwrap();
    bytes
        .chunks_exact(4096)
        .enumerate()
        .filter(|(_, b)| &b[..4] == b"DFSM" && b[8] == 6 && b[56] == 3)
        .map(|(i, b)| (u64::from_le_bytes(b[32..40].try_into().unwrap()), i as u64))
        .min()
        .map(|(_, i)| i)
        .unwrap()
}

#[test]
fn a_damaged_ifile_both_checkpoints_share_is_rebuilt_from_the_log_on_request() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    // Small files only: inline, so the bitmap never changes after mkfs.
    sh(&format!("mkdir {m}/d && for j in $(seq 1 40); do echo small-$j > {m}/d/f$j; done", m = v.m()));
    v.umount();
    let block = shared_bitmap_index(&v.meta);
    let f = std::fs::OpenOptions::new().write(true).open(&v.meta).unwrap();
    f.write_all_at(&[0u8; 4096], block * 4096).unwrap();
    drop(f);

    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let out = dualfs(&["fsck", &meta, &data]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}{}", stderr(&out));
    assert!(text.contains("cannot be opened as it is") && text.contains("fsck -y"), "{text}");

    // A mount reads no block of the data bitmap (the IFile is sparse), so
    // it succeeds and every file reads; the first change that needs the
    // damaged block fails, turns the volume read-only and says what to do.
    v.mount();
    assert_eq!(std::fs::read_to_string(v.path("d/f17")).unwrap(), "small-17\n");
    let out = common::sh_output(&format!("dd if=/dev/zero of={}/big bs=1M count=4 conv=fsync", v.m()));
    assert!(!out.status.success(), "a write needing a damaged bitmap block succeeded");
    let log = v.log();
    assert!(
        log.contains("turned read-only")
            && log.contains("corrupt IFile index block")
            && log.contains("recover=rebuild"),
        "{log}"
    );
    let out = dualfs(&["umount", v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(common::wait_unlocked(&v.meta, std::time::Duration::from_secs(30)));

    // Read-only: the rebuilt volume, every file there, nothing written.
    let before = std::fs::read(&v.meta).unwrap();
    v.mount_with("ro");
    for j in [1, 17, 40] {
        assert_eq!(std::fs::read_to_string(v.path(&format!("d/f{j}"))).unwrap(), format!("small-{j}\n"));
    }
    let out = dualfs(&["umount", v.m()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(common::wait_unlocked(&v.meta, std::time::Duration::from_secs(30)));
    assert!(std::fs::read(&v.meta).unwrap() == before, "a read-only rescue wrote to the meta-data device");

    v.mount_with("recover=rebuild");
    assert_eq!(std::fs::read_to_string(v.path("d/f40")).unwrap(), "small-40\n");
    sh(&format!("echo after > {}/after", v.m()));
    v.umount();
    let out = dualfs(&["fsck", &meta, &data]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}
