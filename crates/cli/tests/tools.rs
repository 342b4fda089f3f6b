//! Everyday tools on a mounted volume: their results are right, and `stat`
//! says the same before and after a remount.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::{TestVolume, sh, sh_output};
use nix::unistd::{Whence, lseek};

/// `stat` of every path below `dir` that tells whether the volume kept
/// what it was given: name, type, size, blocks, links, mode, owner.
fn stat_listing(dir: &Path) -> String {
    sh(&format!("cd '{}' && find . -mindepth 1 | sort | xargs stat -c '%n|%F|%s|%b|%h|%a|%u|%g'", dir.display()))
}

/// Modification and change times, to the nanosecond, of `paths`.
fn time_listing(dir: &Path, paths: &str) -> String {
    sh(&format!("cd '{}' && stat -c '%n|%y|%z' {paths}", dir.display()))
}

/// Where data and holes are, by SEEK_DATA/SEEK_HOLE: a list of data runs.
fn data_runs(p: &Path) -> Vec<(u64, u64)> {
    let f = File::open(p).unwrap();
    let size = f.metadata().unwrap().len() as i64;
    let mut runs = Vec::new();
    let mut pos = 0i64;
    while pos < size {
        let Ok(start) = lseek(&f, pos, Whence::SeekData) else {
            break;
        };
        let end = lseek(&f, start, Whence::SeekHole).unwrap();
        runs.push((start as u64, end as u64));
        pos = end;
    }
    runs
}

#[test]
fn everyday_tools_give_right_results_that_survive_a_remount() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!(
        r#"cd '{m}'
mkdir -p a/b c
echo one > a/f1; echo two > a/b/f2; echo three > c/f3
mv a/f1 c/
mv c/f3 a/b/f2
ln a/b/f2 c/hard
ln -s ../a/b/f2 c/soft
chmod 4755 a/b/f2
chmod 1777 c
chown 1234:5678 c/f1
truncate -s 10000 c/f1
touch -d '2001-02-03 04:05:06.123456789' c/f1
touch -h -d '1999-12-31 23:59:59.5' c/soft
printf abcdefgh > tr; truncate -s 3 tr
setfattr -n user.color -v blue c/f1
setfattr -n user.gone -v x c/f1; setfattr -x user.gone c/f1
mkfifo c/pipe
head -c 4194304 /dev/urandom > holes
fallocate -p -o 1048576 -l 2097152 holes
truncate -s 64M sparse
printf 'at the start' | dd of=sparse conv=notrunc status=none
printf 'in the middle' | dd of=sparse bs=1M seek=32 conv=notrunc status=none
cp --sparse=always sparse sparse.copy
cp holes holes.copy
fallocate -l 1M prealloc
fallocate -n -l 2M prealloc
mknod c/null c 1 3
touch -a -d '2002-02-02 02:02:02.5' c/f1
fallocate -z -o 4096 -l 8192 holes.copy
sync .
"#
    ));
    // Times first: reading c/f1 below updates its atime (relatime: its
    // ctime, set by touch -a, is newer).
    let f1 = std::fs::metadata(v.path("c/f1")).unwrap();
    assert_eq!((f1.mtime(), f1.mtime_nsec()), (981_173_106, 123_456_789), "touch -a leaves mtime alone");
    assert_eq!((f1.atime(), f1.atime_nsec()), (1_012_615_322, 500_000_000));
    // Contents and names.
    assert_eq!(sh(&format!("cat '{m}/c/f1' | head -c 4")), "one\n");
    assert_eq!(sh(&format!("cat '{m}/a/b/f2'")), "three\n");
    assert_eq!(sh(&format!("cat '{m}/c/soft'")), "three\n");
    assert_eq!(sh(&format!("cat '{m}/tr'")), "abc");
    assert!(!v.path("a/f1").exists() && !v.path("c/f3").exists());
    assert_eq!(sh(&format!("getfattr -d --only-values -n user.color '{m}/c/f1'")), "blue");
    assert!(!sh(&format!("getfattr -d '{m}/c/f1'")).contains("user.gone"));
    let f2 = std::fs::metadata(v.path("a/b/f2")).unwrap();
    assert_eq!((f2.mode() & 0o7777, f2.nlink()), (0o4755, 2));
    assert_eq!((f1.uid(), f1.gid(), f1.size()), (1234, 5678, 10000));
    assert_eq!(sh(&format!("stat -c '%F %t %T' '{m}/c/null'")), "character special file 1 3\n");
    assert!(sh(&format!("stat -c %F '{m}/c/pipe'")).contains("fifo"));
    // Holes: punched, copied sparse, zeroed.
    assert_eq!(data_runs(&v.path("holes")), vec![(0, 1 << 20), (3 << 20, 4 << 20)]);
    let runs = data_runs(&v.path("sparse.copy"));
    assert_eq!(runs.len(), 2, "cp --sparse=always keeps the holes: {runs:?}");
    assert!(runs[0].0 == 0 && runs[1].0 <= 32 << 20 && runs[1].1 > 32 << 20);
    sh(&format!("cmp '{m}/sparse' '{m}/sparse.copy'"));
    let zeroed = sh(&format!("cmp -l '{m}/holes' '{m}/holes.copy' | wc -l"));
    let nonzero_in_range = sh(&format!("dd if='{m}/holes' bs=4096 skip=1 count=2 status=none | tr -d '\\0' | wc -c"));
    assert_eq!(zeroed.trim(), nonzero_in_range.trim(), "zero-range zeroes exactly its range");
    assert!(std::fs::metadata(v.path("sparse.copy")).unwrap().blocks() < 1024);
    let prealloc = std::fs::metadata(v.path("prealloc")).unwrap();
    assert_eq!(prealloc.len(), 1 << 20, "fallocate -n keeps the size");
    assert!(prealloc.blocks() >= 4096, "and allocates beyond it: {}", prealloc.blocks());

    // The kernel may cache attributes for a second (the TTL): let the
    // block counts settle after write-back, then compare across a remount.
    std::thread::sleep(Duration::from_millis(1100));
    // Times of what no write(2) touched last (the tests below compare
    // those that were).
    let timed = ". a a/b c c/f1 c/soft c/pipe c/null";
    let before = (stat_listing(&v.mnt), time_listing(&v.mnt, timed));
    v.remount();
    let after = (stat_listing(&v.mnt), time_listing(&v.mnt, timed));
    assert_eq!(before.0, after.0, "stat differs after a remount");
    assert_eq!(before.1, after.1, "times differ after a remount");
    v.umount();
}

/// Two writes to each file within one tick of the kernel's clock.
fn append_twice_and_compare_times_across_a_remount(v: &mut TestVolume) {
    let m = v.m().to_string();
    sh(&format!("cd '{m}' && for i in $(seq 20); do echo abc > f$i; echo def >> f$i; done"));
    std::thread::sleep(Duration::from_millis(1100));
    let files = (1..=20).map(|i| format!("f{i}")).collect::<Vec<_>>().join(" ");
    let before = time_listing(&v.mnt, &files);
    v.remount();
    assert_eq!(before, time_listing(&v.mnt, &files));
}

#[test]
fn without_the_writeback_cache_times_of_appended_files_survive_a_remount() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount_with("nowriteback");
    append_twice_and_compare_times_across_a_remount(&mut v);
    v.umount();
}

#[test]
fn times_of_appended_files_are_the_same_after_a_remount() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    // The second write does not change the kernel's (coarse) mtime, so it
    // sends no new times; the engine's clock has moved on and its
    // write-back stamps its own.
    append_twice_and_compare_times_across_a_remount(&mut v);
    v.umount();
}

#[test]
fn set_id_bits_and_timestamps_follow_posix() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    // Other users reach a FUSE mount only with allow_other.
    v.mount_with("allow_other");
    let m = v.m().to_string();
    sh(&format!(
        r#"cd '{m}'
printf x > setuid; chmod 4777 setuid
printf x > setgid; chmod 2777 setgid
printf x > chowned; chmod 6755 chowned
mkdir shared; chmod 2777 shared; chown 0:4242 shared
mkdir private; chmod 700 private; echo secret > private/s
"#
    ));
    let user = "setpriv --reuid=1000 --regid=1000 --clear-groups";
    // A non-owner writing or truncating clears set-user-id and the
    // set-group-id of a group-executable file.
    sh(&format!("{user} sh -c 'echo more >> {m}/setuid'"));
    sh(&format!("{user} truncate -s 0 {m}/setgid"));
    sh(&format!("chown 1234 {m}/chowned"));
    let mode = |p: &str| std::fs::metadata(v.path(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("setuid"), 0o777);
    assert_eq!(mode("setgid"), 0o777);
    assert_eq!(mode("chowned"), 0o755, "chown clears both set-id bits");
    // File capabilities (here cap_net_raw+ep) go with any write, truncation
    // or chown, even root's.
    let cap = "0x0000000200200000000000000000000000000000";
    for (f, cmd) in [("capw", "echo more >>"), ("capt", "truncate -s 0"), ("capc", "chown 1234")] {
        sh(&format!("cd {m} && echo x > {f} && setfattr -n security.capability -v {cap} {f}"));
        assert!(sh_output(&format!("getfattr -n security.capability {m}/{f}")).status.success());
        sh(&format!("cd {m} && {cmd} {f}"));
        let after = sh_output(&format!("getfattr -n security.capability {m}/{f}"));
        assert!(!after.status.success(), "{cmd} drops security.capability");
    }
    sh(&format!("printf x > {m}/rootw; chmod 4755 {m}/rootw; echo more >> {m}/rootw"));
    assert_eq!(mode("rootw"), 0o4755, "a writer with CAP_FSETID keeps the set-id bits");
    // A set-group-id directory hands on its group (and the bit to subdirectories).
    sh(&format!("{user} sh -c 'touch {m}/shared/f && mkdir {m}/shared/d'"));
    let f = std::fs::metadata(v.path("shared/f")).unwrap();
    let d = std::fs::metadata(v.path("shared/d")).unwrap();
    assert_eq!((f.uid(), f.gid()), (1000, 4242));
    assert_eq!((d.gid(), d.mode() & 0o2000), (4242, 0o2000));
    // The kernel checks permissions (default_permissions).
    let denied = sh_output(&format!("{user} cat {m}/private/s"));
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Permission denied"));

    // ctime moves on rename, link and chmod; mtime on truncate.
    let ctime = |p: &str| {
        let md = std::fs::symlink_metadata(v.path(p)).unwrap();
        (md.ctime(), md.ctime_nsec())
    };
    let mtime = |p: &str| {
        let md = std::fs::symlink_metadata(v.path(p)).unwrap();
        (md.mtime(), md.mtime_nsec())
    };
    sh(&format!("echo data > {m}/t"));
    for (what, cmd, check) in [("rename", "mv t t2", "t2"), ("link", "ln t2 t3", "t2"), ("chmod", "chmod 600 t2", "t2")]
    {
        let before = ctime(if what == "rename" { "t" } else { check });
        std::thread::sleep(Duration::from_millis(20));
        sh(&format!("cd {m} && {cmd}"));
        assert!(ctime(check) > before, "{what} updates ctime");
    }
    let before = mtime("t2");
    std::thread::sleep(Duration::from_millis(20));
    sh(&format!("truncate -s 2 {m}/t2"));
    assert!(mtime("t2") > before, "truncate updates mtime");
    // EFBIG beyond the largest file.
    let big = sh_output(&format!("truncate -s 17T {m}/t2"));
    assert!(String::from_utf8_lossy(&big.stderr).contains("File too large"));
    v.umount();
}

#[test]
fn rename_flags_are_honoured_or_refused() {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    sh(&format!("cd {m} && echo a > a && echo b > b && mkdir d && echo c > d/c"));
    let (a, b, dc) = (v.path("a"), v.path("b"), v.path("d/c"));
    assert_eq!(renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_NOREPLACE), Err(Errno::EEXIST));
    renameat2(AT_FDCWD, &a, AT_FDCWD, &dc, RenameFlags::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "c\n");
    assert_eq!(std::fs::read_to_string(&dc).unwrap(), "a\n");
    // A whiteout rename leaves a character device 0:0 where the name was.
    renameat2(AT_FDCWD, &a, AT_FDCWD, &v.path("new"), RenameFlags::RENAME_WHITEOUT).unwrap();
    assert_eq!(std::fs::read_to_string(v.path("new")).unwrap(), "c\n");
    let wh = std::fs::symlink_metadata(&a).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&wh.file_type()));
    assert_eq!(std::os::unix::fs::MetadataExt::rdev(&wh), 0);
    // A directory exchanged with a file keeps its contents and its `..`.
    renameat2(AT_FDCWD, &v.path("d"), AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read_to_string(v.path("b/c")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(v.path("d")).unwrap(), "b\n");
    v.remount();
    assert_eq!(std::fs::read_to_string(v.path("b/c")).unwrap(), "a\n");
    assert_eq!(sh(&format!("cd {m}/b && cat ../d")), "b\n");
    v.umount();
}

#[test]
fn an_unlinked_file_lives_until_its_last_close() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let fresh = v.usage();
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let mut f = std::fs::OpenOptions::new().create_new(true).read(true).write(true).open(v.path("f")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    std::fs::remove_file(v.path("f")).unwrap();
    assert!(!v.path("f").exists());
    // Still readable and writable through the open descriptor.
    f.write_all(b"tail").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    assert_eq!(&back[data.len()..], b"tail");
    assert_ne!(v.usage(), fresh, "its blocks and inode are still in use");
    drop(f);
    let start = std::time::Instant::now();
    while v.usage() != fresh && start.elapsed() < Duration::from_secs(15) {
        sh(&format!("sync '{}'", v.m()));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(v.usage(), fresh, "the last close frees it");
    v.umount();
}

/// Whether the kernel sizes a READDIR(PLUS) request from the caller's
/// getdents buffer (Linux 6.16 and later; before, one page a request).
fn kernel_sizes_listings_from_the_buffer() -> bool {
    let release = sh("uname -r");
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 16)
}

#[test]
fn a_cold_walk_that_stats_a_directory_of_a_thousand_names_looks_none_of_them_up() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    if !kernel_sizes_listings_from_the_buffer() {
        common::skip("this kernel sends listings one page at a time, whatever the directory asks for (Linux 6.16+)");
        return;
    }
    v.mount();
    let m = v.m().to_string();
    sh(&format!(
        "cd '{m}' && mkdir big && cd big && seq -f 'file-%04.0f' 1 1000 | xargs touch && head -c 3000 /dev/zero > large"
    ));
    v.remount();
    assert_eq!(sh(&format!("cd '{m}' && find big -size +2k")), "big/large\n");
    let stats = common::dualfs(&["stats", "--json", &m]);
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let count = |op: &str| stats["fuse_requests"][op]["count"].as_u64().unwrap_or(0);
    // One LOOKUP for `big` itself; under the kernel's 32 KiB chunks the
    // names after the first 190 or so were looked up one by one.
    assert!(count("LOOKUP") <= 2, "{} LOOKUPs: {stats}", count("LOOKUP"));
    assert_eq!(count("READDIRPLUS"), 1, "{stats}");
    // Because the directory asks readers for a buffer its whole listing
    // with attributes fits in (a READDIRPLUS entry is 152 bytes and the name).
    let blksize = std::fs::metadata(v.path("big")).unwrap().blksize();
    assert!(blksize >= 1003 * 168, "st_blksize {blksize}");
    v.umount();
}
