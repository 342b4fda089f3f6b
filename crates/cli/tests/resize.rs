//! `dualfs resize` with real tools: grow a mounted volume while files are
//! open and written, and an unmounted one; shrink the log and the data
//! device of a mounted volume in use, and the data device of an unmounted
//! one; refusals in plain words; the running-low warning and the ENOSPC
//! advice.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, dualfs, sh};

/// `df` of the mount in 4 KiB blocks: (size, avail, inodes).
fn df(v: &TestVolume) -> [u64; 3] {
    let out = sh(&format!("df -B4096 --output=size,avail,itotal '{}' | tail -n 1", v.m()));
    let n: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    [n[0], n[1], n[2]]
}

fn run(args: &[&str]) -> (bool, String) {
    let out = dualfs(args);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_full_mounted_volume_grows_while_a_file_is_open_and_takes_what_did_not_fit() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let [size, _, inodes] = df(&v);
    // Fill the data device: the write fails with ENOSPC, and the log says
    // which device is full and what resize can do.
    let full = sh(&format!("dd if=/dev/urandom of={m}/a bs=1M count=200 2>&1 || true"));
    assert!(full.contains("No space left"), "{full}");
    let (_, stats) = run(&["stats", &m]);
    assert!(stats.contains("WARNING: the data device is running low"), "{stats}");
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(
        v.log().contains("no space left on the data device: free space on it, or grow the data device"),
        "{}",
        v.log()
    );
    // Refusals, before the devices grew.
    let (ok, out) = run(&["resize", &m, "--data", "1G"]);
    assert!(!ok && out.contains("MiB, 1024 MiB were asked for: grow the device or image first"), "{out}");
    let (ok, out) = run(&["resize", &m, "--meta", "4M"]);
    assert!(!ok && out.contains("a log needs at least 16 segments"), "{out}");
    let (ok, out) = run(&["resize", &m, "--data", "16M"]);
    assert!(
        !ok && out.contains("MiB of file data past 16 MiB") && out.contains("delete files or shrink less"),
        "{out}"
    );
    // Grow both images, then the volume, with a file held open for writing.
    let sum_a = sh(&format!("md5sum < {m}/a"));
    sh(&format!("truncate -s 256M {} && truncate -s 64M {}", v.data.display(), v.meta.display()));
    let mut held = std::fs::OpenOptions::new().append(true).open(v.path("a")).unwrap();
    let (ok, out) = run(&["resize", &m]);
    assert!(ok && out.contains(" to 256 MiB"), "{out}");
    use std::io::Write as _;
    held.write_all(&[7u8; 1 << 20]).unwrap();
    drop(held);
    let [size2, avail2, inodes2] = df(&v);
    assert_eq!(size2, 256 << 8, "df shows the new size (was {size})");
    assert!(avail2 > 150 << 8, "{avail2}");
    assert!(inodes2 > inodes, "more meta-data space, more inodes: {inodes} then {inodes2}");
    sh(&format!("dd if=/dev/urandom of={m}/b bs=1M count=120 status=none && sync {m}/b"));
    let (_, stats) = run(&["stats", &m]);
    assert!(!stats.contains("WARNING"), "{stats}");
    v.umount();
    // The grow survives the remount, and every byte of what was there.
    v.mount();
    assert_eq!(df(&v)[0], 256 << 8);
    assert_eq!(
        sh(&format!(
            "head -c {} {m}/a | md5sum",
            sh(&format!("stat -c %s {m}/a")).trim().parse::<u64>().unwrap() - (1 << 20)
        )),
        sum_a
    );
    assert_eq!(sh(&format!("stat -c %s {m}/b")).trim(), "125829120");
    v.umount();
}

#[test]
fn an_unmounted_volume_grows_and_a_mounted_one_is_refused_offline() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    sh(&format!("truncate -s 100M {data}"));
    let (ok, out) = run(&["resize", &meta, &data, "--data", "100M"]);
    assert!(ok && out.contains(" to 100 MiB"), "{out}");
    let (ok, out) = run(&["resize", &meta, &data, "--data", "100M"]);
    assert!(ok && out.contains("nothing to do"), "{out}");
    v.fsck();
    v.mount();
    let (ok, out) = run(&["resize", &meta, &data]);
    assert!(!ok && out.contains("in use"), "a mounted volume's devices are locked: {out}");
    assert_eq!(df(&v)[0], 100 << 8);
    v.umount();
}

#[test]
fn a_mounted_log_shrinks_with_its_files_in_use_and_refuses_to_shrink_below_what_is_live() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    let meta = v.meta.to_str().unwrap().to_string();
    sh(&format!("truncate -s 64M {meta}"));
    v.mount();
    let m = v.m().to_string();
    let (ok, out) = run(&["resize", &m, "--meta", "max"]);
    assert!(ok, "{out}");
    // Meta-data spread over the grown log: files made and deleted, some kept.
    sh(&format!(
        "cd {m} && mkdir d && for r in 1 2 3 4 5 6; do (cd d && seq 1 4000 | sed s/^/f$r./ | xargs touch); \
         rm -f d/f$r.*[13579]; done"
    ));
    sh(&format!(
        "cd {m} && v=$(head -c 3000 /dev/zero | tr '\\0' a); for i in $(seq 1 2500); do setfattr -n user.x -v $v d/f1.$((i*2)) 2>/dev/null || setfattr -n user.x -v $v d/f2.$((i*2-4000)); done"
    ));
    let before = sh(&format!("ls {m}/d | wc -l"));
    let (ok, out) = run(&["resize", &m, "--meta", "17M"]);
    assert!(!ok && out.contains("of live meta-data: it needs at least"), "{out}");
    let (ok, out) = run(&["resize", &m, "--meta", "40M"]);
    assert!(ok && out.contains("segments") && out.contains("may now be cut to"), "{out}");
    assert_eq!(sh(&format!("ls {m}/d | wc -l")), before);
    sh(&format!("cd {m} && touch d/after && getfattr -n user.x d/f1.100 >/dev/null"));
    v.umount();
    // Cut the image as the report says: the volume mounts and checks clean.
    let blocks = v.inspect(&["superblock"])["meta_blocks"].as_u64().unwrap_or(0);
    assert!(blocks > 0 && blocks * 4096 <= 40 << 20, "{blocks}");
    sh(&format!("truncate -s {} {meta}", blocks * 4096));
    v.fsck();
    v.mount();
    assert_eq!(
        sh(&format!("ls {m}/d | wc -l")).trim().parse::<u64>().unwrap(),
        before.trim().parse::<u64>().unwrap() + 1
    );
    v.umount();
}

#[test]
fn a_mounted_data_device_shrinks_while_files_are_written_and_read_and_every_byte_stays() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    // A file at the start of the device, then a tree, a preallocated file
    // and another large file after it; the first goes, leaving the tree and
    // the last file past the new end with room for them below it.
    sh(&format!(
        "cd {m} && head -c 30M /dev/urandom > first && sync first && for d in $(seq 1 12); do mkdir d$d && \
         head -c $((d * 300000)) /dev/urandom > d$d/f && seq 1 $((d * 500)) > d$d/list; done && \
         fallocate -l 8M pre && printf data | dd of=pre bs=1 seek=5000000 conv=notrunc status=none && \
         head -c 30M /dev/urandom > last && sync && rm first"
    ));
    let sums = sh(&format!("cd {m} && find . -type f | sort | xargs md5sum"));
    // A writer appending and a reader reading through the move.
    let mut busy = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("for i in $(seq 1 300); do echo line $i >> {m}/d1/log; cat {m}/d5/f > /dev/null; done"))
        .spawn()
        .unwrap();
    let (ok, out) = run(&["resize", &m, "--data", "72M"]);
    assert!(busy.wait().unwrap().success());
    assert!(ok && out.contains("to 72 MiB") && out.contains("MiB of file data ("), "{out}");
    assert!(out.contains("the data device may now be cut to 72 MiB (75497472 bytes)"), "{out}");
    assert_eq!(df(&v)[0], 72 << 8);
    assert_eq!(sh(&format!("cd {m} && find . -type f ! -name log | sort | xargs md5sum")), sums);
    assert_eq!(sh(&format!("wc -l < {m}/d1/log")).trim(), "300");
    // Too little room below a smaller end: refused, nothing moved.
    let (ok, out) = run(&["resize", &m, "--data", "40M"]);
    assert!(!ok && out.contains("MiB of file data past 40 MiB"), "{out}");
    sh(&format!("rm {m}/last"));
    v.umount();
    // Cut the image as the report says: the volume checks clean, and an
    // unmounted shrink works the same way.
    sh(&format!("truncate -s 72M {}", v.data.display()));
    v.fsck();
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let (ok, out) = run(&["resize", &meta, &data, "--data", "44M"]);
    assert!(ok && out.contains("72 MiB to 44 MiB"), "{out}");
    sh(&format!("truncate -s 44M {data}"));
    v.fsck();
    v.mount();
    assert_eq!(df(&v)[0], 44 << 8);
    let sums_after = sh(&format!("cd {m} && find . -type f ! -name log | sort | xargs md5sum"));
    let want: String = sums.lines().filter(|l| !l.ends_with("./last")).map(|l| format!("{l}\n")).collect();
    assert_eq!(sums_after, want);
    v.umount();
}
