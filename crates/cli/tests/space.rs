//! Space through the mount: `du` right after writing, `df` and `df -i`
//! before and after creating and deleting files, and a full meta-data
//! device.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::{Duration, Instant};

use common::{TestVolume, dualfs, sh};

/// `df` of the mount in 4 KiB blocks and inodes: (size, used, free, inodes, iused, ifree).
fn df(v: &TestVolume) -> [u64; 6] {
    let out = sh(&format!("df -B4096 --output=size,used,avail,itotal,iused,iavail '{}' | tail -n 1", v.m()));
    let n: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    [n[0], n[1], n[2], n[3], n[4], n[5]]
}

fn du_kib(v: &TestVolume, rel: &str) -> u64 {
    sh(&format!("du -k '{}' | tail -n 1 | cut -f1", v.path(rel).display())).trim().parse().unwrap()
}

/// Waits until `df`'s used blocks are `want` (frees come back with the
/// commit after a delete).
fn wait_used(v: &TestVolume, want: u64) -> u64 {
    let start = Instant::now();
    loop {
        sh(&format!("sync '{}'", v.m()));
        let used = df(v)[1];
        if used == want || start.elapsed() > Duration::from_secs(15) {
            return used;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn du_counts_data_as_soon_as_it_is_written() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    // No commit while the test looks: blocks are only reserved, not allocated.
    v.mount_with("commit=3600");
    let m = v.m().to_string();
    let before = df(&v)[1];
    sh(&format!(
        "cd {m} && dd if=/dev/urandom of=f bs=1M count=10 status=none && cp f g \
         && truncate -s 100M sparse && dd if=/dev/zero of=sparse bs=4096 seek=1000 count=1 conv=notrunc status=none \
         && fallocate -l 8M pre && head -c 100 /dev/zero > tiny"
    ));
    let expect = [("f", 10240), ("g", 10240), ("sparse", 4), ("pre", 8192), ("tiny", 0)];
    for (name, kib) in expect {
        assert_eq!(du_kib(&v, name), kib, "du {name} right after writing");
    }
    let total: u64 = expect.iter().map(|(_, k)| k / 4).sum();
    assert_eq!(df(&v)[1] - before, total, "df agrees with du");
    sh(&format!("sync {m}"));
    for (name, kib) in expect {
        assert_eq!(du_kib(&v, name), kib, "du {name} after write-back");
    }
    v.remount();
    for (name, kib) in expect {
        assert_eq!(du_kib(&v, name), kib, "du {name} after a remount");
    }
    assert_eq!(df(&v)[1] - before, total);
    v.umount();
}

#[test]
fn df_reports_the_data_device_and_inodes_that_grow_with_the_inode_map() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let data_blocks = std::fs::metadata(&v.data).unwrap().len() / 4096;
    let meta_bytes = std::fs::metadata(&v.meta).unwrap().len();
    let fresh = df(&v);
    let [size, used, avail, inodes, iused, ifree] = fresh;
    assert_eq!(size, data_blocks, "df's size is the data device's");
    // Available leaves out what the kernel may hold dirty: 64 MiB or an
    // eighth of the data device (docs/FUSE.md, a full data device).
    let window = (64 << 20) / 4096u64;
    assert_eq!(used + avail + window.min(size / 8), size);
    assert!(used <= 1, "a fresh volume uses the data device's superblock at most: {used}");
    assert_eq!(iused, 1, "the root directory");
    assert_eq!(inodes, iused + ifree);
    assert!(ifree > 10_000 && ifree < meta_bytes / 128, "free inodes as the log can hold them: {ifree}");

    // Inodes are not made at mkfs: the inode map grows with the files.
    sh(&format!("mkdir {m}/many && cd {m}/many && seq 1 3000 | xargs touch && sync ."));
    let [_, _, _, inodes2, iused2, ifree2] = df(&v);
    assert_eq!(iused2, 1 + 3001);
    assert_eq!(inodes2, iused2 + ifree2);
    // Free inodes are the room left in the log, counted by whole segments.
    assert!(ifree2 <= ifree && ifree2 > ifree - 3 * 3001, "{ifree} -> {ifree2}");
    assert!(inodes2 > inodes, "the total grows with the inode map: {inodes} -> {inodes2}");

    sh(&format!("head -c 20971520 /dev/urandom > {m}/big && sync {m}/big"));
    assert_eq!(df(&v)[1], used + 5120, "20 MiB of data");
    sh(&format!("rm -rf {m}/many {m}/big"));
    assert_eq!(wait_used(&v, used), used, "every block comes back");
    assert_eq!(df(&v)[4], 1, "and every inode");
    v.remount();
    let after = df(&v);
    assert_eq!((after[0], after[1], after[4]), (size, used, 1));
    v.umount();
}

/// Through the mount, what `a_full_meta_data_device_is_emptied_by_deletes`
/// (crates/engine/tests/meta_device_full.rs) shows of the engine: a log
/// filled by small files says ENOSPC, and deletes empty it again (the
/// releasing operations' layer of the log reserve, DESIGN.md "Full devices").
#[test]
fn a_full_meta_data_device_says_enospc_and_recovers_after_deletes() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    // A small log: 20 segments of 512 KiB.
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    sh(&format!("rm {meta} && truncate -s 10M {meta}"));
    let out = dualfs(&["mkfs", "--force", "--segment-size", "512K", &meta, &data]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    v.mount();
    let dir = v.path("d");
    std::fs::create_dir(&dir).unwrap();
    let mut n = 0u32;
    let full = loop {
        let p = dir.join(format!("f{n:06}"));
        let r = std::fs::write(&p, format!("file {n}\n"))
            .and_then(|()| common::set_xattr(&p, "user.x", format!("{n:0200}").as_bytes()));
        match r {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
    assert!(n > 1000, "only {n} files");
    assert_eq!(df(&v)[5], 0, "df -i says the inodes are used up");
    sh(&format!("rm -rf {}", dir.display()));
    sh(&format!("echo after > {}/after && setfattr -n user.x -v 1 {}/after", v.m(), v.m()));
    v.remount();
    assert_eq!(sh(&format!("cat {}/after", v.m())), "after\n");
    v.umount();
}
