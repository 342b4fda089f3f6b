//! `dualfs metadump` and `dualfs metarestore` as a user runs them: a volume
//! with every kind of name and inline content is dumped (names replaced,
//! and kept), the dump is searched for what must not be in it, restored,
//! checked with fsck (the same report as the original, a damaged original
//! included) and mounted read-only to compare its tree with the original's.
//! The edges: a missing argument, a device that is not DualFS, a closed
//! pipe, a dump cut short, devices that must not be overwritten.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{DUALFS, Rng, TestVolume, dualfs, set_xattr, sh};
use dualfs_engine::format::checksum;
use dualfs_engine::format::superblock::INCOMPAT_SCANNED_NAMES;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs dualfs, requiring success; returns standard output.
fn ok(args: &[&str]) -> String {
    let out = dualfs(args);
    assert!(out.status.success(), "dualfs {args:?}: {:?}\n{}{}", out.status, stdout(&out), stderr(&out));
    stdout(&out)
}

/// fsck's exit status and report.
fn fsck(meta: &Path, data: &Path) -> (Option<i32>, String) {
    let out = dualfs(&["fsck", s(meta), s(data)]);
    (out.status.code(), stdout(&out))
}

/// A report with its quoted names taken out (they differ after
/// obfuscation; nothing else may).
fn without_names(report: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in report.chars() {
        if c == '"' {
            quoted = !quoted;
            out.push('"');
        } else if !quoted {
            out.push(c);
        }
    }
    out
}

/// Markers the dump must not contain when names are replaced.
const CONTENT: &str = "INLINE-CONTENT-MARKER-7f3a";
const XATTR_VALUE: &str = "XATTR-VALUE-MARKER-51bd";
/// The contents of files made durable by fsync with their data in the
/// log (raw data copies of fsync partial segments).
const FSYNC_DATA: &str = "FSYNC-DATA-COPY-MARKER-c4e1";

/// Builds the tree: nested directories, a directory large enough for a
/// B-tree, a 255-byte name, inline and block files, a hard link, short
/// and long (blob) symlinks, inline, tree and blob xattrs. Returns the
/// names used and a window of the big file's bytes.
fn build(root: &Path) -> (Vec<String>, Vec<u8>) {
    let mut names = Vec::new();
    let mut name = |n: String| {
        names.push(n.clone());
        n
    };
    let top = root.join(name("secret-top-directory".into()));
    let sub = top.join(name("secret-nested-directory".into()));
    std::fs::create_dir_all(&sub).unwrap();
    let inline = sub.join(name("secret-inline-file.txt".into()));
    std::fs::write(&inline, format!("{CONTENT} the small file's words")).unwrap();
    std::fs::hard_link(&inline, top.join(name("secret-hard-link-name".into()))).unwrap();
    let mut big = vec![0u8; 300_000];
    Rng::new(0x5eed).fill(&mut big);
    std::fs::write(top.join(name("secret-big-file.bin".into())), &big).unwrap();
    let long = format!("secret-long-{}", "n".repeat(255 - 12));
    std::fs::write(top.join(name(long)), b"x").unwrap();
    std::os::unix::fs::symlink("../secret-top-directory/secret-nested-directory/secret-inline-file.txt", {
        top.join(name("secret-short-symlink".into()))
    })
    .unwrap();
    let far: String = (0..40).map(|i| format!("secret-link-component-{i:02}/")).collect();
    std::os::unix::fs::symlink(&far, root.join(name("secret-long-symlink".into()))).unwrap();
    let many = root.join(name("secret-many-entries".into()));
    std::fs::create_dir(&many).unwrap();
    for i in 0..150 {
        std::fs::write(many.join(name(format!("secret-entry-{i:03}"))), b"").unwrap();
    }
    set_xattr(&inline, "user.secret-inline-attr", XATTR_VALUE.as_bytes()).unwrap();
    names.push("secret-inline-attr".into());
    let tree = top.join("secret-big-file.bin");
    for i in 0..30 {
        set_xattr(&tree, &format!("user.secret-tree-attr-{i:02}"), XATTR_VALUE.as_bytes()).unwrap();
    }
    names.push("secret-tree-attr-00".into());
    set_xattr(&sub, "user.secret-blob-attr", XATTR_VALUE.repeat(200).as_bytes()).unwrap();
    names.push("secret-blob-attr".into());
    (names, big[100_000..100_032].to_vec())
}

/// Every path of a tree, relative to its root.
fn paths(root: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                todo.push(p.clone());
            }
            out.insert(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
    out
}

fn xattr_count(p: &Path) -> usize {
    let mut buf = vec![0u8; 1 << 16];
    let n = rustix::fs::llistxattr(p, &mut buf[..]).unwrap();
    buf[..n].split(|&b| b == 0).filter(|x| !x.is_empty()).count()
}

/// A tree's shape with its names left out: each directory is the sorted
/// list of its children's shapes; a file its size, links and xattrs; a
/// symlink its target's length.
fn shape(p: &Path) -> String {
    let m = std::fs::symlink_metadata(p).unwrap();
    if m.is_dir() {
        let mut kids: Vec<String> = std::fs::read_dir(p).unwrap().map(|e| shape(&e.unwrap().path())).collect();
        kids.sort();
        format!("d{}x{}[{}]", m.nlink(), xattr_count(p), kids.join(","))
    } else if m.file_type().is_symlink() {
        format!("l{}", std::fs::read_link(p).unwrap().as_os_str().len())
    } else {
        format!("f{}n{}x{}", m.size(), m.nlink(), xattr_count(p))
    }
}

/// The bytes of every regular file of a tree, by path.
fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    paths(root)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(root.join(p)).unwrap().is_file())
        .map(|p| {
            let bytes = std::fs::read(root.join(&p)).unwrap();
            (p, bytes)
        })
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A mount of this test, detached if the test fails before unmounting it
/// (a mount left behind would meet other tests' `dualfs sync`).
struct Mounted(PathBuf);

impl Mounted {
    fn umount(self) {
        ok(&["umount", s(&self.0)]);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if common::is_mounted(&self.0) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Mounts `meta`/`data` read-only at `mnt` in the background.
fn mount_ro(meta: &Path, data: &Path, mnt: &Path) -> Mounted {
    std::fs::create_dir_all(mnt).unwrap();
    ok(&["mount", "-o", "ro", s(meta), s(data), s(mnt)]);
    Mounted(mnt.to_path_buf())
}

/// Clears the scanned-names bit in both superblocks, resealed: what a
/// restored volume would be if metarestore forgot to mark it.
fn clear_scanned_names(meta: &Path, data: &Path) {
    for p in [meta, data] {
        let mut img = std::fs::read(p).unwrap();
        let block = &mut img[..4096];
        let incompat = u64::from_le_bytes(block[32..40].try_into().unwrap()) & !INCOMPAT_SCANNED_NAMES;
        block[32..40].copy_from_slice(&incompat.to_le_bytes());
        checksum::seal(block, 4);
        std::fs::write(p, img).unwrap();
    }
}

#[test]
fn a_volume_dumps_and_restores_with_its_shape_its_fsck_report_and_none_of_its_names() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let (mut names, big_window) = build(&v.mnt);
    v.umount();
    // Commits after the last checkpoint, then a crash: the restored log
    // must roll forward as far, through resealed descriptor chains.
    // The fsyncs write fsync partial segments (names in Link records,
    // inline bytes in Inode records, small files' blocks as raw data
    // copies), pending at the crash.
    let mut child = v.spawn_mount(&[]);
    for i in 0..20 {
        let p = v.path(&format!("secret-top-directory/secret-after-crash-{i:02}"));
        std::fs::write(&p, format!("{CONTENT} {i}")).unwrap();
        std::fs::File::open(&p).unwrap().sync_all().unwrap();
    }
    let copied = v.path("secret-top-directory/secret-fsync-copies");
    std::fs::create_dir(&copied).unwrap();
    for i in 0..4 {
        let p = copied.join(format!("secret-copied-{i}"));
        std::fs::write(&p, FSYNC_DATA.repeat(300 + i)).unwrap();
        std::fs::File::open(&p).unwrap().sync_all().unwrap();
    }
    names.extend(["secret-after-crash-07".into(), "secret-fsync-copies".into(), "secret-copied-2".into()]);
    child.kill().unwrap();
    child.wait().unwrap();
    sh(&format!("umount -l {}", v.m()));
    let (code, original) = fsck(&v.meta, &v.data);
    assert_eq!(code, Some(0), "{original}");
    assert!(original.contains("roll-forward of") && !original.contains("roll-forward of 0 "), "{original}");
    assert!(original.contains("fsync records after the last commit group"), "no fsync record pending: {original}");

    let dir = v.dir.path().to_path_buf();
    let orig_mnt = dir.join("orig");
    let orig = mount_ro(&v.meta, &v.data, &orig_mnt);
    // A volume in use is never overwritten, --force or not.
    let probe_dump = dir.join("probe.dump");
    ok(&["metadump", s(&v.meta), s(&v.data), s(&probe_dump)]);
    let out = dualfs(&["metarestore", "--force", s(&probe_dump), s(&v.meta), s(&v.data)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let original_paths = paths(&orig_mnt);
    let original_shape = shape(&orig_mnt);
    let original_contents = contents(&orig_mnt);
    // The fsync'd files as the original shows them: their sizes, and the
    // copies' data (replayed from the log: the data device never had it).
    let fsynced = |root: &Path| -> Vec<u64> {
        let mut sizes: Vec<u64> = contents(root)
            .iter()
            .filter(|(_, b)| b.starts_with(CONTENT.as_bytes()) && b.len() < 40 || b.starts_with(FSYNC_DATA.as_bytes()))
            .map(|(_, b)| b.len() as u64)
            .collect();
        sizes.sort_unstable();
        sizes
    };
    let fsynced_sizes = fsynced(&orig_mnt);
    assert_eq!(fsynced_sizes.len(), 24, "the fsync'd files in the original");

    for obfuscate in [true, false] {
        let tag = if obfuscate { "obfuscated" } else { "kept" };
        let dump = dir.join(format!("{tag}.dump"));
        let mut args = vec!["metadump", s(&v.meta), s(&v.data), s(&dump)];
        if !obfuscate {
            args.insert(1, "--no-obfuscate");
        }
        let said = ok(&args);
        assert!(said.contains("dumped"), "{said}");
        let bytes = std::fs::read(&dump).unwrap();
        assert!(!contains(&bytes, &big_window), "{tag}: the big file's contents are in the dump");
        for n in &names {
            assert_eq!(contains(&bytes, n.as_bytes()), !obfuscate, "{tag}: {n}");
        }
        for marker in [CONTENT, XATTR_VALUE, FSYNC_DATA] {
            assert_eq!(contains(&bytes, marker.as_bytes()), !obfuscate, "{tag}: {marker}");
        }

        let (meta, data) = (dir.join(format!("{tag}-meta.img")), dir.join(format!("{tag}-data.img")));
        let said = ok(&["metarestore", s(&dump), s(&meta), s(&data)]);
        assert!(said.contains("restored volume"), "{said}");
        assert_eq!(std::fs::metadata(&data).unwrap().len(), std::fs::metadata(&v.data).unwrap().len());
        assert_eq!(fsck(&meta, &data), (Some(0), original.clone()), "{tag}: fsck of the restored pair");

        let mnt = dir.join(format!("{tag}-mnt"));
        std::fs::create_dir_all(&mnt).unwrap();
        let rw = dualfs(&["mount", s(&meta), s(&data), s(&mnt)]);
        if obfuscate {
            assert_eq!(rw.status.code(), Some(1), "a read-write mount of replaced names");
            assert!(stderr(&rw).contains("read-only (-o ro)"), "{}", stderr(&rw));
        } else {
            assert!(rw.status.success(), "{}", stderr(&rw));
            Mounted(mnt.clone()).umount();
        }
        let restored = mount_ro(&meta, &data, &mnt);
        assert_eq!(shape(&mnt), original_shape, "{tag}: the tree's shape");
        let restored_paths = paths(&mnt);
        if obfuscate {
            let old: BTreeSet<_> = original_paths.iter().flat_map(|p| p.iter().map(|c| c.to_owned())).collect();
            let new: BTreeSet<_> = restored_paths.iter().flat_map(|p| p.iter().map(|c| c.to_owned())).collect();
            assert_eq!(old.intersection(&new).count(), 0, "{tag}: names survived");
            // Names are looked up by scanning: every path opens, symlinks
            // resolve through replaced components.
            let link = restored_paths
                .iter()
                .find(|p| {
                    let m = std::fs::symlink_metadata(mnt.join(p)).unwrap();
                    m.file_type().is_symlink() && std::fs::metadata(mnt.join(p)).is_ok()
                })
                .expect("a symlink that resolves");
            assert!(std::fs::metadata(mnt.join(link)).unwrap().is_file());
            for (p, bytes) in contents(&mnt) {
                assert!(bytes.iter().all(|&b| b == 0), "{tag}: {} holds data", p.display());
            }
            // The fsync'd files are there, by size: 20 inline and 4 whose
            // data copies read as zeros.
            let mut sizes: Vec<u64> = paths(&mnt)
                .iter()
                .filter_map(|p| std::fs::symlink_metadata(mnt.join(p)).ok())
                .filter(|m| m.is_file() && m.nlink() == 1 && fsynced_sizes.contains(&m.size()))
                .map(|m| m.size())
                .collect();
            sizes.sort_unstable();
            assert_eq!(sizes, fsynced_sizes, "{tag}: the fsync'd files");
            let mut value = vec![0u8; 4096];
            let inline = restored_paths
                .iter()
                .find(|p| std::fs::symlink_metadata(mnt.join(p)).unwrap().nlink() == 2 && mnt.join(p).is_file())
                .unwrap();
            let mut list = vec![0u8; 4096];
            let n = rustix::fs::llistxattr(mnt.join(inline), &mut list[..]).unwrap();
            let name = std::ffi::CStr::from_bytes_until_nul(&list[..n]).unwrap();
            assert!(name.to_bytes().starts_with(b"user."));
            let len = rustix::fs::lgetxattr(mnt.join(inline), name, &mut value[..]).unwrap();
            assert_eq!(len, XATTR_VALUE.len());
            assert!(value[..len].iter().all(|&b| b == 0), "an xattr value survived");
        } else {
            assert_eq!(restored_paths, original_paths, "{tag}: names");
            for (p, bytes) in contents(&mnt) {
                let was = &original_contents[&p];
                // Inline data and fsync records' data copies live on the
                // meta-data device; the rest was on the data device, which
                // the dump does not carry.
                let in_log = was.len() <= 1024 || was.starts_with(FSYNC_DATA.as_bytes());
                let expect = if in_log { was.clone() } else { vec![0; was.len()] };
                assert!(bytes == expect, "{tag}: {}", p.display());
            }
        }
        restored.umount();
    }
    orig.umount();

    // Without the mark, the replaced names sit where their hashes do not
    // point: fsck sees it, so the mark is what keeps the volume sound.
    let (meta, data) = (dir.join("obfuscated-meta.img"), dir.join("obfuscated-data.img"));
    clear_scanned_names(&meta, &data);
    let (code, report) = fsck(&meta, &data);
    assert_eq!(code, Some(4), "{report}");
    assert!(report.contains("sits at a position its hash does not give"), "{report}");

    // A damaged volume dumps and restores to the same report: a zeroed
    // block and a block with a flipped byte inside the roll-forward range.
    let end: u64 = original
        .split("no partial segment at block ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .expect("the log's end in the fsck report");
    // Zeroed: sixteen blocks, partial segments and the twins beside them.
    for (what, at, bytes) in [("zeroed", end - 16, vec![0u8; 16 * 4096]), ("flipped", end - 20, vec![0x5a])] {
        let (meta, data) = (dir.join(format!("{what}-meta.img")), dir.join(format!("{what}-data.img")));
        std::fs::copy(&v.meta, &meta).unwrap();
        std::fs::copy(&v.data, &data).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&meta).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &bytes, at * 4096 + 200).unwrap();
        drop(f);
        // The damage shows in fsck's report: as a problem, or (where the
        // twin of a partial segment an fsync waited for holds it all) as a
        // note and a log that ends elsewhere.
        let damaged = fsck(&meta, &data);
        assert_ne!(damaged.1, original, "{what}: the damage shows");
        for obfuscate in [true, false] {
            let dump = dir.join(format!("{what}-{obfuscate}.dump"));
            let mut args = vec!["metadump", s(&meta), s(&data), s(&dump)];
            if !obfuscate {
                args.insert(1, "--no-obfuscate");
            }
            ok(&args);
            let (rm, rd) = (dir.join(format!("{what}-{obfuscate}-rm")), dir.join(format!("{what}-{obfuscate}-rd")));
            ok(&["metarestore", s(&dump), s(&rm), s(&rd)]);
            let restored = fsck(&rm, &rd);
            assert_eq!(restored.0, damaged.0, "{what}, obfuscate {obfuscate}: {}", restored.1);
            if obfuscate {
                assert_eq!(without_names(&restored.1), without_names(&damaged.1), "{what}");
            } else {
                assert_eq!(restored.1, damaged.1, "{what}");
            }
        }
    }
}

/// The snapshots and trees `dualfs snapshot list` shows, `(name, kind)` in
/// its order (oldest first), and the live tree's name.
fn trees(meta: &Path, data: &Path) -> (Vec<(String, String)>, String) {
    let out = dualfs(&["snapshot", "list", s(meta), s(data)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let live = text.lines().find_map(|l| l.strip_prefix("live tree: ")).unwrap_or("main").to_string();
    let list = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (name, kind) = (w.next()?, w.next()?);
            ["snapshot", "clone"].contains(&kind).then(|| (name.to_string(), kind.to_string()))
        })
        .collect();
    (list, live)
}

/// The shape of every read-only snapshot of a volume, in list order.
fn snapshot_shapes(meta: &Path, data: &Path, mnt: &Path) -> Vec<String> {
    let (list, _) = trees(meta, data);
    let mut out = Vec::new();
    for (name, kind) in list.iter().filter(|(_, k)| k == "snapshot") {
        std::fs::create_dir_all(mnt).unwrap();
        ok(&["mount", "-o", &format!("ro,snapshot={name}"), s(meta), s(data), s(mnt)]);
        let m = Mounted(mnt.to_path_buf());
        out.push(format!("{kind} {}", shape(mnt)));
        m.umount();
    }
    out
}

#[test]
fn a_volume_with_snapshots_and_a_live_clone_dumps_to_one_that_opens() {
    let Some(mut v) = TestVolume::create("256M") else {
        return;
    };
    v.mount();
    let top = v.path("secret-snapped-directory");
    std::fs::create_dir_all(top.join("secret-sub")).unwrap();
    // Enough entries for a directory tree, whose nodes the snapshots keep.
    for i in 0..200 {
        std::fs::write(top.join(format!("secret-kept-{i:03}")), format!("{CONTENT} {i}")).unwrap();
    }
    ok(&["snapshot", "create", v.m(), "secret-first-snapshot"]);
    // Blocks only the first snapshot reaches: entries removed, a
    // directory moved, new ones beside them.
    for i in 0..120 {
        std::fs::remove_file(top.join(format!("secret-kept-{i:03}"))).unwrap();
    }
    std::fs::create_dir(v.path("secret-later")).unwrap();
    std::fs::rename(top.join("secret-sub"), v.path("secret-later/secret-moved")).unwrap();
    for i in 0..60 {
        std::fs::write(v.path(&format!("secret-later/secret-new-{i:02}")), b"n").unwrap();
    }
    ok(&["snapshot", "create", v.m(), "secret-second-snapshot"]);
    ok(&["clone", v.m(), "secret-first-snapshot", "secret-clone-tree"]);
    v.umount();
    // The clone made live: the list names it, and `main` is kept beside.
    v.mount_with("clone=secret-clone-tree");
    std::fs::write(v.path("secret-snapped-directory/secret-in-clone"), b"c").unwrap();
    // Unmounted without TestVolume's fsck: what fsck says of the volume,
    // whatever it is, the restored volume must say too.
    ok(&["umount", v.m()]);
    let secrets = ["secret-first-snapshot", "secret-second-snapshot", "secret-clone-tree", "secret-kept-150"];

    let dir = v.dir.path().to_path_buf();
    let (code, original) = fsck(&v.meta, &v.data);
    let (original_trees, original_live) = trees(&v.meta, &v.data);
    assert_eq!(original_trees.len(), 3, "{original_trees:?}");
    assert_eq!(original_live, "secret-clone-tree");
    let original_shapes = snapshot_shapes(&v.meta, &v.data, &dir.join("orig-snap"));
    let live_mnt = dir.join("orig-live");
    let live = mount_ro(&v.meta, &v.data, &live_mnt);
    let original_live_shape = shape(&live_mnt);
    live.umount();

    let dump = dir.join("snapshots.dump");
    let said = ok(&["metadump", s(&v.meta), s(&v.data), s(&dump)]);
    assert!(said.contains("replaced 4 snapshot and tree names"), "{said}");
    assert!(!said.contains("unknown kinds"), "{said}");
    let bytes = std::fs::read(&dump).unwrap();
    for n in secrets {
        assert!(!contains(&bytes, n.as_bytes()), "{n} is in the dump");
    }
    let (meta, data) = (dir.join("r-meta.img"), dir.join("r-data.img"));
    ok(&["metarestore", s(&dump), s(&meta), s(&data)]);
    let restored = fsck(&meta, &data);
    assert_eq!((restored.0, without_names(&restored.1)), (code, without_names(&original)), "{}", restored.1);

    let (restored_trees, restored_live) = trees(&meta, &data);
    let kinds = |t: &[(String, String)]| t.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>();
    assert_eq!(kinds(&restored_trees), kinds(&original_trees));
    for ((new, _), (old, _)) in restored_trees.iter().zip(&original_trees) {
        assert_eq!(new.len(), old.len());
        // `main`, the tree that was live before the clone, keeps its name.
        assert_eq!(new == old, old == "main", "{new} for {old}");
    }
    assert_eq!(restored_live.len(), original_live.len());
    assert_ne!(restored_live, original_live);
    assert_eq!(snapshot_shapes(&meta, &data, &dir.join("r-snap")), original_shapes);
    let live_mnt = dir.join("r-live");
    let live = mount_ro(&meta, &data, &live_mnt);
    assert_eq!(shape(&live_mnt), original_live_shape);
    live.umount();
}

/// A fresh volume of image files (mkfs as a user runs it).
fn fresh(dir: &Path) -> (PathBuf, PathBuf) {
    let (m, d) = (dir.join("meta.img"), dir.join("data.img"));
    ok(&["mkfs", "--size", "64M", s(&m), s(&d)]);
    (m, d)
}

#[test]
fn metadump_and_metarestore_at_the_edges() {
    let tmp = tempfile::Builder::new().prefix("dualfs-metadump").tempdir().unwrap();
    let dir = tmp.path();
    let (m, d) = fresh(dir);
    // Missing arguments: clap's usage status.
    for args in [&["metadump"][..], &["metadump", s(&m), s(&d)], &["metarestore", "x.dump", s(&m)]] {
        let out = dualfs(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    // Devices that are not DualFS, or given the wrong way round.
    let (za, zb) = (dir.join("zero-a"), dir.join("zero-b"));
    for p in [&za, &zb] {
        std::fs::File::create(p).unwrap().set_len(16 << 20).unwrap();
    }
    let out = dualfs(&["metadump", s(&za), s(&zb), s(&dir.join("z.dump"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a DualFS volume"), "{}", stderr(&out));
    assert!(!dir.join("z.dump").exists(), "a refused dump leaves no file");
    let out = dualfs(&["metadump", s(&d), s(&m), s(&dir.join("z.dump"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("give the meta-data device first"), "{}", stderr(&out));
    let out = dualfs(&["metarestore", s(&za), s(&dir.join("r-m")), s(&dir.join("r-d"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a DualFS meta-data dump"), "{}", stderr(&out));

    // A dump of a fresh volume restores to the same fsck report, from a
    // file or from standard input.
    let dump = dir.join("fresh.dump");
    ok(&["metadump", s(&m), s(&d), s(&dump)]);
    let out = dualfs(&["metadump", s(&m), s(&d), s(&dump)]);
    assert_eq!(out.status.code(), Some(1), "an existing dump is not overwritten");
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    ok(&["metadump", "--force", s(&m), s(&d), s(&dump)]);
    // Neither command writes over what it reads, --force or not.
    let out = dualfs(&["metadump", "--force", s(&m), s(&d), s(&d)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the dump must go elsewhere"), "{}", stderr(&out));
    let out = dualfs(&["metarestore", "--force", s(&dump), s(&dir.join("other")), s(&dump)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is the dump itself"), "{}", stderr(&out));
    let report = fsck(&m, &d);
    assert_eq!(report.0, Some(0));
    let (rm, rd) = (dir.join("r-meta.img"), dir.join("r-data.img"));
    ok(&["metarestore", s(&dump), s(&rm), s(&rd)]);
    assert_eq!(fsck(&rm, &rd), report);
    // A DualFS volume (or any file system) is not overwritten without --force.
    let out = dualfs(&["metarestore", s(&dump), s(&rm), s(&rd)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already holds a DualFS file system (use --force"), "{}", stderr(&out));
    let piped = Command::new(DUALFS)
        .args(["metarestore", "--force", "-", s(&rm), s(&rd)])
        .stdin(std::fs::File::open(&dump).unwrap())
        .output()
        .unwrap();
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert_eq!(fsck(&rm, &rd), report);

    // A dump cut short, or damaged, is refused with what it means.
    let bytes = std::fs::read(&dump).unwrap();
    let cut = dir.join("cut.dump");
    std::fs::write(&cut, &bytes[..bytes.len() - 5000]).unwrap();
    let out = dualfs(&["metarestore", "--force", s(&cut), s(&rm), s(&rd)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cut short"), "{}", stderr(&out));
    let mut bad = bytes.clone();
    bad[64 + 24 + 100] ^= 1;
    std::fs::write(&cut, &bad).unwrap();
    let out = dualfs(&["metarestore", "--force", s(&cut), s(&rm), s(&rd)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("fail their checksum"), "{}", stderr(&out));

    // To standard output: the same bytes as to a file; a reader that goes away ends it quietly (SIGPIPE, as cat).
    let out = Command::new(DUALFS).args(["metadump", "--no-obfuscate", s(&m), s(&d), "-"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let kept = dir.join("kept.dump");
    ok(&["metadump", "--no-obfuscate", s(&m), s(&d), s(&kept)]);
    assert!(out.stdout == std::fs::read(&kept).unwrap(), "the dump on standard output differs");
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let out = Command::new(DUALFS)
        .args(["metadump", s(&m), s(&d), "-"])
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(101), "{}", stderr(&out));
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?} {}", out.status, stderr(&out));
    // metarestore writes devices: a closed standard output does not cut it.
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let out = Command::new(DUALFS)
        .args(["metarestore", "--force", s(&dump), s(&rm), s(&rd)])
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?} {}", out.status, stderr(&out));
    assert_eq!(fsck(&rm, &rd), report);
}
