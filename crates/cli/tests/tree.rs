//! A generated tree of 5,000 files (20,000 with `DUALFS_LONG=1`) goes onto
//! a volume with tar and cp -a,
//! and comes back equal (contents, modes, owners, times to the
//! nanosecond, links, xattrs) before and after a remount; rm -rf then leaves
//! the volume as empty as a fresh one.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Rng, TestVolume, sh};
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;

/// The tree's size: a quarter of the long run's by default, which keeps
/// the whole suite within CI's time; `DUALFS_LONG=1` makes the full one.
fn scale() -> usize {
    if std::env::var_os("DUALFS_LONG").is_some() { 4 } else { 1 }
}
const FILES: usize = 5_000;
const DIRS: usize = 150;
const SYMLINKS: usize = 250;
const HARD_LINKS: usize = 200;
const XATTR_EVERY: usize = 8;
/// The largest file.
const MAX_SIZE: usize = 4 << 20;

/// A size drawn so that most files are small (70% inline), a few large:
/// about 35 MiB in all (130 MiB in the long run), so that three copies and
/// their comparisons stay within a minute (a few in the long run).
fn file_size(rng: &mut Rng, i: usize) -> usize {
    match (i, rng.below(1000)) {
        (0, _) => 0,
        (1, _) => MAX_SIZE,
        (_, 0..700) => rng.below(1025) as usize,
        (_, 700..950) => 1024 + rng.below(15 * 1024) as usize,
        (_, 950..999) => 16 * 1024 + rng.below(48 * 1024) as usize,
        _ => 128 * 1024 + rng.below((MAX_SIZE - 128 * 1024) as u64 + 1) as usize,
    }
}

/// Names that exercise the directory code: plain, spaced, UTF-8, 255 bytes.
fn file_name(rng: &mut Rng, i: usize) -> String {
    match rng.below(20) {
        0 => format!("with space {i}"),
        1 => format!("ünïcødé-{i}-ファイル"),
        2 => {
            let stem = format!("long-{i}-");
            format!("{stem}{}", "n".repeat(255 - stem.len()))
        }
        3 => format!("-dash{i}"),
        _ => format!("f{i}.dat"),
    }
}

fn set_times(p: &Path, rng: &mut Rng) {
    let pick = |rng: &mut Rng| -> TimeSpec {
        let nsec = rng.below(1_000_000_000) as i64;
        let sec = match rng.below(10) {
            // Before 1970, with a fraction of a second.
            0 => -(rng.below(1_000_000_000) as i64) - 1,
            1 => 0,
            _ => 631_152_000 + rng.below(1_262_304_000) as i64,
        };
        TimeSpec::new(sec, nsec)
    };
    let (a, m) = (pick(rng), pick(rng));
    utimensat(nix::fcntl::AT_FDCWD, p, &a, &m, UtimensatFlags::NoFollowSymlink).expect("utimensat");
}

/// Builds the source tree under `root`; returns the directories made.
fn generate(root: &Path) -> Vec<PathBuf> {
    let mut rng = Rng::new(0x00D0_A1F5);
    let mut dirs = vec![root.to_path_buf()];
    for i in 0..DIRS * scale() {
        let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
        let d = parent.join(format!("d{i}"));
        fs::create_dir(&d).unwrap();
        dirs.push(d);
    }
    let modes = [0o644, 0o600, 0o755, 0o4755, 0o2755, 0o6711, 0o000, 0o444, 0o1644];
    let owners = [(0, 0), (1000, 1000), (65534, 65534), (123_456, 7), (0, 4242)];
    let mut files = Vec::new();
    let mut xattr_dump = String::new();
    let mut buf = vec![0u8; MAX_SIZE];
    for i in 0..FILES * scale() {
        let dir = &dirs[rng.below(dirs.len() as u64) as usize];
        let p = dir.join(file_name(&mut rng, i));
        let len = file_size(&mut rng, i);
        rng.fill(&mut buf[..len]);
        fs::write(&p, &buf[..len]).unwrap();
        if i % XATTR_EVERY == 0 {
            let vlen = [0, 1, 100, 2000, 4000][rng.below(5) as usize];
            rng.fill(&mut buf[..vlen]);
            let hex: String = buf[..vlen].iter().map(|b| format!("{b:02x}")).collect();
            let _ = writeln!(
                xattr_dump,
                "# file: {}\nuser.test=\"text {i}\"\nuser.bin={}\n",
                p.display(),
                if vlen == 0 { "\"\"".to_string() } else { format!("0x{hex}") }
            );
        }
        files.push(p);
    }
    let dump = root.with_extension("xattrs");
    fs::write(&dump, xattr_dump).unwrap();
    sh(&format!("setfattr --restore={}", dump.display()));
    for i in 0..HARD_LINKS * scale() {
        let target = &files[rng.below(files.len() as u64) as usize];
        let dir = &dirs[rng.below(dirs.len() as u64) as usize];
        fs::hard_link(target, dir.join(format!("hard{i}"))).unwrap();
    }
    for i in 0..SYMLINKS * scale() {
        let dir = &dirs[rng.below(dirs.len() as u64) as usize];
        let target = match rng.below(4) {
            0 => "dangling/target".to_string(),
            // Longer than the inline limit: stored in its own block.
            1 => format!("{}/end", "x/".repeat(700 + i)),
            _ => files[rng.below(files.len() as u64) as usize].display().to_string(),
        };
        std::os::unix::fs::symlink(target, dir.join(format!("sym{i}"))).unwrap();
    }
    for i in 0..5 {
        let p = root.join(format!("fifo{i}"));
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o640)).unwrap();
    }
    fs::create_dir(root.join("empty")).unwrap();
    // Modes and owners last, so that 0o000 files could still be written.
    for p in &files {
        let (uid, gid) = owners[rng.below(owners.len() as u64) as usize];
        std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
        let mode = modes[rng.below(modes.len() as u64) as usize];
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::set_permissions(&dirs[1], fs::Permissions::from_mode(0o1777)).unwrap();
    fs::set_permissions(&dirs[2], fs::Permissions::from_mode(0o2750)).unwrap();
    // Times last of all, deepest first, so that nothing touches them again.
    let mut all = Vec::new();
    collect(root, &mut all);
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in &all {
        set_times(p, &mut rng);
    }
    dirs
}

fn collect(p: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            collect(&path, out);
        }
        out.push(path);
    }
}

/// Everything `stat` and `readlink` say about a tree, path by path, with
/// hard links named by the first path that reached the inode.
fn describe(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    collect(root, &mut paths);
    paths.sort();
    let mut first_path: HashMap<u64, String> = HashMap::new();
    let mut out = Vec::new();
    for p in paths {
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let m = fs::symlink_metadata(&p).unwrap();
        let link = if m.nlink() > 1 && !m.is_dir() {
            first_path.entry(m.ino()).or_insert_with(|| rel.clone()).clone()
        } else {
            String::new()
        };
        let target =
            if m.file_type().is_symlink() { fs::read_link(&p).unwrap().display().to_string() } else { String::new() };
        out.push(format!(
            "{rel} mode={:o} uid={} gid={} nlink={} size={} mtime={}.{:09} link={link} target={target}",
            m.mode(),
            m.uid(),
            m.gid(),
            m.nlink(),
            if m.is_dir() { 0 } else { m.size() },
            m.mtime(),
            m.mtime_nsec(),
        ));
    }
    out
}

/// What a tree must look like: `stat` of every path, a checksum list, the
/// xattrs. Taken once from the source.
struct Expected {
    src: PathBuf,
    entries: Vec<String>,
    sums: String,
    xattrs: String,
}

fn checksums(d: &Path) -> String {
    sh(&format!("cd '{}' && find . -type f -print0 | sort -z | xargs -0 sha256sum", d.display()))
}

fn xattr_dump(d: &Path) -> String {
    sh(&format!("cd '{}' && getfattr -R -h -d -m '^user\\.' -e hex . 2>/dev/null | sort", d.display()))
}

impl Expected {
    fn of(src: &Path) -> Expected {
        let xattrs = xattr_dump(src);
        assert!(xattrs.contains("user.bin"), "the source tree has xattrs");
        Expected { src: src.to_path_buf(), entries: describe(src), sums: checksums(src), xattrs }
    }
}

fn assert_same_tree(want: &Expected, dst: &Path, what: &str) {
    let got = describe(dst);
    assert_eq!(want.entries.len(), got.len(), "{what}: entry counts differ");
    for (x, y) in want.entries.iter().zip(&got) {
        assert_eq!(x, y, "{what}: metadata differs");
    }
    sh(&format!("diff -r --no-dereference -x 'fifo*' '{}' '{}'", want.src.display(), dst.display()));
    assert_eq!(want.sums, checksums(dst), "{what}: checksum lists differ");
    assert_eq!(want.xattrs, xattr_dump(dst), "{what}: xattrs differ");
}

/// `df`'s used blocks and inodes, waiting a little for frees to land.
fn df_used(v: &TestVolume) -> (u64, u64) {
    let out = sh(&format!("df -B1 --output=used,iused '{}' | tail -n 1", v.m()));
    let mut it = out.split_whitespace().map(|x| x.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

fn wait_for_usage(v: &TestVolume, want: (u64, u64)) -> (u64, u64) {
    let start = Instant::now();
    loop {
        // fsync of the root directory commits: deferred frees come back.
        sh(&format!("sync '{}'", v.m()));
        let got = df_used(v);
        if got == want || start.elapsed() > Duration::from_secs(15) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_generated_tree_survives_tar_cp_remount_and_rm() {
    let Some(mut v) = TestVolume::create("1G") else {
        return;
    };
    let mut clock = Instant::now();
    let mut phase = |what: &str| {
        eprintln!("{what}: {:.1?}", clock.elapsed());
        clock = Instant::now();
    };
    let src = v.dir.path().join("src");
    fs::create_dir(&src).unwrap();
    generate(&src);
    let files: usize = sh(&format!("find '{}' -type f | wc -l", src.display())).trim().parse().unwrap();
    assert!(files >= FILES * scale(), "{files} files");
    let want = Expected::of(&src);
    let tar = v.dir.path().join("tree.tar");
    sh(&format!(
        "tar --format=posix --xattrs --xattrs-include='user.*' -C '{}' -cf '{}' .",
        src.display(),
        tar.display()
    ));
    phase("generate and tar -c");

    v.mount();
    let fresh = df_used(&v);
    let tree = v.path("tree");
    let copy = v.path("copy");
    fs::create_dir(&tree).unwrap();
    sh(&format!("tar --xattrs --xattrs-include='user.*' -C '{}' -xpf '{}'", tree.display(), tar.display()));
    phase("tar -x");
    sh(&format!("cp -a '{}' '{}'", src.display(), copy.display()));
    phase("cp -a");
    // The root of the copies is the one directory whose times tar and cp
    // set from the source's: compare below it.
    assert_same_tree(&want, &tree, "tar -x");
    assert_same_tree(&want, &copy, "cp -a");
    phase("compare");

    v.umount();
    let log = v.inspect(&["log"]);
    assert_eq!(log["roll_forward"]["partial_segments"], 0, "a clean unmount leaves nothing to roll forward: {log}");
    v.mount();
    assert_same_tree(&want, &tree, "tar -x after remount");
    assert_same_tree(&want, &copy, "cp -a after remount");
    phase("remount and compare");

    sh(&format!("rm -rf '{}' '{}'", tree.display(), copy.display()));
    assert_eq!(wait_for_usage(&v, fresh), fresh, "rm -rf leaves the volume empty");
    phase("rm -rf");
    v.remount();
    assert_eq!(df_used(&v), fresh, "and it stays empty after a remount");
    v.umount();
}
