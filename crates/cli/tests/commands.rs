//! Every command run as a user runs it, at the edges: a missing argument,
//! a device that is not DualFS, a reader that has gone away (a closed
//! pipe), exit statuses as documented; and the offline commands' work:
//! mkfs cleaning up after itself, probe, tune, inspect's extent and
//! checkpoint views, cat and get, on healthy and damaged volumes. None of
//! these needs root or a mount.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{DUALFS, dualfs, sh};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Two image files holding a fresh volume (mkfs as a user runs it).
struct Images {
    dir: tempfile::TempDir,
    meta: String,
    data: String,
}

impl Images {
    fn new(size: &str, extra: &[&str]) -> Images {
        let dir = tempfile::Builder::new().prefix("dualfs-cmd").tempdir().unwrap();
        let meta = dir.path().join("meta.img").to_str().unwrap().to_string();
        let data = dir.path().join("data.img").to_str().unwrap().to_string();
        let mut args = vec!["mkfs", "--size", size];
        args.extend_from_slice(extra);
        args.extend([meta.as_str(), data.as_str()]);
        let out = dualfs(&args);
        assert!(out.status.success(), "mkfs: {}", stderr(&out));
        Images { dir, meta, data }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Two files of zeros: devices that hold no DualFS volume.
fn not_dualfs(dir: &Path) -> (String, String) {
    let (a, b) = (dir.join("zero-a"), dir.join("zero-b"));
    for p in [&a, &b] {
        std::fs::File::create(p).unwrap().set_len(64 << 20).unwrap();
    }
    (a.to_str().unwrap().to_string(), b.to_str().unwrap().to_string())
}

/// Runs dualfs with its standard output a pipe nobody reads any more.
fn into_closed_pipe(args: &[&str]) -> Output {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    Command::new(DUALFS).args(args).stdout(Stdio::from(write)).stderr(Stdio::piped()).output().unwrap()
}

/// A closed pipe ends a reporting command quietly: killed by SIGPIPE (as
/// cat), never a panic (status 101) nor a message.
fn assert_quiet_on_closed_pipe(args: &[&str]) {
    let out = into_closed_pipe(args);
    assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {}", stderr(&out));
    assert!(!stderr(&out).contains("panicked") && !stderr(&out).contains("Broken pipe"), "{args:?}: {}", stderr(&out));
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{args:?}: {:?} {}", out.status, stderr(&out));
}

#[test]
fn reporting_commands_die_quietly_when_their_reader_goes_away() {
    let v = Images::new("256M", &[]);
    let (m, d) = (v.meta.as_str(), v.data.as_str());
    for view in
        [&[][..], &["superblock"], &["log"], &["segments", "--all"], &["groups"], &["checkpoints"], &["dir", "/"]]
    {
        let mut args = vec!["inspect", m, d];
        args.extend_from_slice(view);
        assert_quiet_on_closed_pipe(&args);
    }
    assert_quiet_on_closed_pipe(&["fsck", m, d]);
    assert_quiet_on_closed_pipe(&["probe", m, d]);
    assert_quiet_on_closed_pipe(&["--help"]);
    let trace = v.path("t.trace");
    std::fs::write(&trace, "# dualfs-trace v1\n").unwrap();
    let out = into_closed_pipe(&["trace", "summary", trace.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(101), "{}", stderr(&out));
    // Commands that change a volume finish their work and say nothing of
    // the pipe: tune must not be cut between its two superblocks.
    let out = into_closed_pipe(&["tune", "-L", "piped", m, d]);
    assert!(out.status.success(), "{:?} {}", out.status, stderr(&out));
    let out = dualfs(&["probe", m]);
    assert!(stdout(&out).contains("LABEL=\"piped\""), "{}", stdout(&out));
    let other = v.path("other");
    let out = into_closed_pipe(&[
        "mkfs",
        "--size",
        "64M",
        other.join("m").to_str().unwrap_or_default(),
        other.join("d").to_str().unwrap_or_default(),
    ]);
    assert_eq!(out.status.code(), Some(1), "the folder is missing: {}", stderr(&out));
    std::fs::create_dir(&other).unwrap();
    let out = into_closed_pipe(&[
        "mkfs",
        "--size",
        "64M",
        other.join("m").to_str().unwrap(),
        other.join("d").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{:?} {}", out.status, stderr(&out));
}

#[test]
fn a_missing_argument_is_a_usage_error_with_the_documented_status() {
    // fsck(8)'s usage status is 16; every other command has clap's 2.
    for (args, code) in [
        (&["fsck"][..], 16),
        (&["fsck", "/no/such/meta.img"], 16),
        (&["mkfs"], 2),
        (&["mkfs", "only-one.img"], 2),
        (&["mount", "a", "b"], 2),
        (&["umount"], 2),
        (&["inspect", "a"], 2),
        (&["clean"], 2),
        (&["stats"], 2),
        (&["probe", "--export", "--json"], 2),
        (&["tune"], 2),
        (&["cat", "a", "b"], 2),
        (&["get", "a", "b", "/"], 2),
        (&["trace", "summary"], 2),
    ] {
        let out = dualfs(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("Usage"), "{args:?} says how to call it: {}", stderr(&out));
    }
    // As fsck(8) runs it.
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("fsck.dualfs");
    std::os::unix::fs::symlink(DUALFS, &helper).unwrap();
    let out = Command::new(&helper).output().unwrap();
    assert_eq!(out.status.code(), Some(16), "{}", stderr(&out));
}

#[test]
fn every_command_refuses_a_device_that_is_not_dualfs_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = not_dualfs(dir.path());
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = mnt.to_str().unwrap();
    for (args, code) in [
        (vec!["fsck", &a, &b], 8),
        (vec!["inspect", &a, &b], 1),
        (vec!["inspect", &a, &b, "superblock"], 1),
        (vec!["inspect", &a, &b, "checkpoints"], 1),
        (vec!["clean", &a, &b], 1),
        (vec!["tune", "-L", "x", &a, &b], 1),
        (vec!["cat", &a, &b, "/f"], 1),
        (vec!["get", &a, &b, "/", mnt], 1),
        (vec!["probe", &a, &b], 2),
        (vec!["mount", &a, &b, mnt], 1),
    ] {
        let out = dualfs(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("DualFS") && !e.contains("panicked"), "{args:?}: {e}");
        assert!(!e.contains("[20"), "no log-style lines: {e}");
    }
    let out = dualfs(&["stats", mnt]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a mount point"), "{}", stderr(&out));
}

#[test]
fn mkfs_leaves_nothing_behind_when_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = (dir.path().join("m.img"), dir.path().join("d.img"));
    // Too large for one checkpoint to index its bitmap: fails after
    // creating the sparse files (or at creating them, where the file
    // system stops short of 4,000 TiB), which must go again.
    let out = dualfs(&["mkfs", "--size", "4000T", m.to_str().unwrap(), d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("too large"), "{}", stderr(&out));
    assert!(!m.exists() && !d.exists(), "the images it made are removed");
    // A folder for a device: refused before anything is made.
    let out = dualfs(&["mkfs", "--size", "64M", dir.path().to_str().unwrap(), d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    assert!(!d.exists());
    // Swap space is a signature like a file system's.
    std::fs::File::create(&m).unwrap().set_len(64 << 20).unwrap();
    std::fs::File::create(&d).unwrap().set_len(64 << 20).unwrap();
    sh(&format!("mkswap -f {} >/dev/null 2>&1 || /sbin/mkswap -f {} >/dev/null", d.display(), d.display()));
    let out = dualfs(&["mkfs", m.to_str().unwrap(), d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the data device already holds swap space (use --force"), "{}", stderr(&out));
    assert!(m.exists() && d.exists(), "devices given are never removed");
}

#[test]
fn counts_read_as_english() {
    let v = Images::new("64M", &[]);
    let out = dualfs(&["fsck", &v.meta, &v.data]);
    let text = stdout(&out);
    assert!(text.contains("1 directory, 0 symlinks") && text.contains("0 partial segments"), "{text}");
    let out = dualfs(&["inspect", &v.meta, &v.data]);
    assert!(stdout(&out).contains("1 group of"), "{}", stdout(&out));
    let e = dualfs(&["mkfs", &v.meta, &v.data]);
    assert!(stderr(&e).contains("already holds a DualFS file system"), "{}", stderr(&e));
}

#[test]
fn probe_says_what_blkid_would_and_tune_changes_identity_on_both_devices() {
    let v = Images::new("64M", &["--label", "before"]);
    let (m, d) = (v.meta.as_str(), v.data.as_str());
    let out = dualfs(&["probe", "--json", m, d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let uuid = list[0]["uuid"].as_str().unwrap().to_string();
    assert_eq!(list[1]["uuid"], uuid.as_str(), "one volume UUID on both devices");
    assert_ne!(list[0]["uuid_sub"], list[1]["uuid_sub"]);
    assert_eq!((list[0]["role"].as_str(), list[1]["role"].as_str()), (Some("meta"), Some("data")));
    assert_eq!(list[0]["label"], "before");
    let text = stdout(&dualfs(&["probe", m]));
    assert!(text.starts_with(&format!("{m}: UUID=\"{uuid}\" UUID_SUB=")), "{text}");
    assert!(text.contains("LABEL=\"before\" BLOCK_SIZE=\"4096\" TYPE=\"dualfs\" ROLE=\"meta\""), "{text}");
    let udev = stdout(&dualfs(&["probe", "--udev", d]));
    assert!(udev.contains("ID_FS_TYPE=dualfs\n") && udev.contains("ID_FS_DUALFS_ROLE=data\n"), "{udev}");

    let out = dualfs(&["tune", "-L", "after", "-U", "random", "-o", "noatime,commit=30", m, d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("label          \"after\" (was \"before\")"), "{}", stdout(&out));
    let list: serde_json::Value = serde_json::from_slice(&dualfs(&["probe", "--json", m, d]).stdout).unwrap();
    let new = list[0]["uuid"].as_str().unwrap();
    assert_ne!(new, uuid);
    assert_eq!(list[1]["uuid"], new);
    assert_eq!(list[1]["label"], "after");
    // Every meta-data block still names the volume as it did: fsck agrees.
    let out = dualfs(&["fsck", m, d]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let sb: serde_json::Value =
        serde_json::from_slice(&dualfs(&["inspect", "--json", m, d, "superblock"]).stdout).unwrap();
    use dualfs_engine::format::superblock::{FORMAT_MAJOR, FORMAT_MINOR};
    assert_eq!(sb["format"], format!("{FORMAT_MAJOR}.{FORMAT_MINOR}"));
    let out = dualfs(&["tune", "-o", "^commit", m, d]);
    assert!(stdout(&out).contains("\"noatime\" (was \"noatime,commit=30\")"), "{}", stdout(&out));
    let out = dualfs(&["tune", "-o", "nosuchoption", m, d]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown mount option \"nosuchoption\""), "{}", stderr(&out));
    let out = dualfs(&["tune", "-U", "not-a-uuid", m, d]);
    assert!(stderr(&out).contains("is not a UUID"), "{}", stderr(&out));

    // A tune cut between its two superblocks (here: the data device's
    // copy put back as it was) is refused by mount and finished by tune.
    let before_data = std::fs::read(d).unwrap()[..4096].to_vec();
    let out = dualfs(&["tune", "-U", "random", m, d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut img = std::fs::read(d).unwrap();
    img[..4096].copy_from_slice(&before_data);
    std::fs::write(d, &img).unwrap();
    assert!(!dualfs(&["fsck", m, d]).status.success(), "a half-tuned pair is refused");
    let out = dualfs(&["tune", m, d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("lags"), "{}", stderr(&out));
    assert!(dualfs(&["fsck", m, d]).status.success());
}

#[test]
fn tune_refuses_a_volume_in_use() {
    let v = Images::new("64M", &[]);
    // A lock as a mount holds it.
    let f = std::fs::File::open(&v.meta).unwrap();
    f.lock().unwrap();
    let out = dualfs(&["tune", "-L", "x", &v.meta, &v.data]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already mounted or in use"), "{}", stderr(&out));
}

/// Writes files straight through the engine's API (no mount needed):
/// what `cat`, `get` and `inspect extents` read back.
fn populate(v: &Images) {
    use dualfs_engine::device::FileDevice;
    use dualfs_engine::volume::{Creds, MountOptions};
    use std::sync::Arc;
    let m = Arc::new(FileDevice::open(Path::new(&v.meta), false, true).unwrap());
    let d = Arc::new(FileDevice::open(Path::new(&v.data), false, true).unwrap());
    let vol = dualfs_engine::Volume::open(m, d, MountOptions::default()).unwrap();
    let root = dualfs_engine::types::InodeNo::ROOT;
    let c = Creds { uid: 0, gid: 0, umask: 0o022 };
    let dir = vol.mkdir(root, b"docs", 0o750, c).unwrap().ino;
    let big = vol.create(dir, b"big", 0o640, c).unwrap().ino;
    let mut rng = common::Rng::new(7);
    let mut data = vec![0u8; 3 << 20];
    rng.fill(&mut data);
    vol.write(big, 0, &data).unwrap();
    // A hole, then more data: the copy must keep the hole.
    vol.write(big, 8 << 20, b"end").unwrap();
    let small = vol.create(dir, b"small", 0o644, c).unwrap().ino;
    vol.write(small, 0, b"hello\n").unwrap();
    vol.link(small, root, b"hardlink").unwrap();
    vol.symlink(root, b"link", b"docs/small", c).unwrap();
    vol.setxattr(small, b"user.colour", b"blue", dualfs_engine::namespace::xattr::SetMode::Any).unwrap();
    vol.close().unwrap();
    std::fs::write(v.path("big.expected"), {
        let mut e = data;
        e.resize(8 << 20, 0);
        e.extend_from_slice(b"end");
        e
    })
    .unwrap();
}

#[test]
fn cat_get_and_extents_read_an_unmounted_volume() {
    let v = Images::new("128M", &[]);
    populate(&v);
    let (m, d) = (v.meta.as_str(), v.data.as_str());
    let out = dualfs(&["cat", m, d, "/docs/small"]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), "hello\n"));
    let out = dualfs(&["cat", m, d, "/docs/big"]);
    assert_eq!(out.stdout, std::fs::read(v.path("big.expected")).unwrap());
    for (path, says) in
        [("/docs", "is a directory"), ("/link", "symbolic link to docs/small"), ("/nope", "no such file")]
    {
        let out = dualfs(&["cat", m, d, path]);
        assert_eq!(out.status.code(), Some(1), "{path}");
        assert!(stderr(&out).contains(says), "{path}: {}", stderr(&out));
    }
    assert_quiet_on_closed_pipe(&["cat", m, d, "/docs/big"]);

    let dest = v.path("copy");
    let out = dualfs(&["get", m, d, "/", dest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("copied 2 files, 2 directories, 1 symlink"), "{}", stdout(&out));
    assert_eq!(std::fs::read(dest.join("docs/big")).unwrap(), std::fs::read(v.path("big.expected")).unwrap());
    use std::os::unix::fs::MetadataExt;
    let big = std::fs::metadata(dest.join("docs/big")).unwrap();
    assert!(big.blocks() * 512 < 4 << 20, "the hole stayed a hole: {} blocks", big.blocks());
    assert_eq!(big.permissions().mode() & 0o7777, 0o640);
    let small = std::fs::metadata(dest.join("docs/small")).unwrap();
    assert_eq!(small.ino(), std::fs::metadata(dest.join("hardlink")).unwrap().ino(), "hard links kept");
    assert_eq!(std::fs::read_link(dest.join("link")).unwrap(), PathBuf::from("docs/small"));
    assert_eq!(sh(&format!("getfattr --only-values -n user.colour {}", dest.join("docs/small").display())), "blue");
    // Into an existing folder, under its own name.
    let out = dualfs(&["get", m, d, "/docs/small", dest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(dest.join("small")).unwrap(), b"hello\n");

    let out = dualfs(&["inspect", m, d, "extents", "/docs/big"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("2 extents"), "{}", stdout(&out));
    let ext: serde_json::Value =
        serde_json::from_slice(&dualfs(&["inspect", "--json", m, d, "extents", "/docs/big"]).stdout).unwrap();
    let list = ext["extents"].as_array().unwrap();
    assert_eq!((list[0]["logical"].as_u64(), list[0]["blocks"].as_u64()), (Some(0), Some(768)));
    assert_eq!(list[1]["logical"], 2048);
    let inline = dualfs(&["inspect", m, d, "extents", "/docs/small"]);
    assert!(stdout(&inline).contains("kept inline"), "{}", stdout(&inline));
    let out = dualfs(&["inspect", m, d, "extents", "/docs"]);
    assert!(stderr(&out).contains("not a regular file"), "{}", stderr(&out));

    let cp: serde_json::Value =
        serde_json::from_slice(&dualfs(&["inspect", "--json", m, d, "checkpoints"]).stdout).unwrap();
    let slots = cp["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 2);
    let in_use: Vec<_> = slots.iter().filter(|s| s["in_use"] == true).collect();
    assert_eq!(in_use.len(), 1);
    assert_eq!(in_use[0]["number"], cp["in_use"]);
    assert_eq!(cp["after"]["partial_segments"], 0, "closed cleanly");
}

/// Two commits: /keep and /keep/a in the first, /lost, /lost/x and the
/// root's new entry in the second, so that each lands in inode blocks of
/// its own.
fn populate_in_two_commits(v: &Images) {
    use dualfs_engine::device::FileDevice;
    use dualfs_engine::volume::{Creds, MountOptions};
    use std::sync::Arc;
    let m = Arc::new(FileDevice::open(Path::new(&v.meta), false, true).unwrap());
    let d = Arc::new(FileDevice::open(Path::new(&v.data), false, true).unwrap());
    let vol = dualfs_engine::Volume::open(m, d, MountOptions::default()).unwrap();
    let root = dualfs_engine::types::InodeNo::ROOT;
    let c = Creds { uid: 0, gid: 0, umask: 0o022 };
    let keep = vol.mkdir(root, b"keep", 0o755, c).unwrap().ino;
    let a = vol.create(keep, b"a", 0o644, c).unwrap().ino;
    vol.write(a, 0, &vec![b'a'; 10_000]).unwrap();
    vol.commit().unwrap();
    let lost = vol.mkdir(root, b"lost", 0o755, c).unwrap().ino;
    let x = vol.create(lost, b"x", 0o644, c).unwrap().ino;
    vol.write(x, 0, &vec![b'x'; 20_000]).unwrap();
    vol.close().unwrap();
}

/// Overwrites 8 bytes inside the inode block holding `path`'s record.
fn damage_record_of(meta: &str, data: &str, path: &str) {
    let inode: serde_json::Value =
        serde_json::from_slice(&dualfs(&["inspect", "--json", meta, data, "inode", path]).stdout).unwrap();
    let block = inode["record_block"].as_u64().unwrap();
    let mut img = std::fs::read(meta).unwrap();
    let at = usize::try_from(block * 4096 + 200).unwrap();
    img[at..at + 8].copy_from_slice(b"garbage!");
    std::fs::write(meta, &img).unwrap();
}

#[test]
fn get_salvages_what_a_damaged_volume_still_holds() {
    for (damaged, kept, salvaged) in [("/keep/a", "lost/x", None), ("/lost/x", "", Some(b'a'))] {
        let v = Images::new("128M", &[]);
        populate_in_two_commits(&v);
        let (m, d) = (v.meta.as_str(), v.data.as_str());
        damage_record_of(m, d, damaged);
        let dest = v.path("rescue");
        let out = dualfs(&["get", m, d, "/", dest.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(4), "incomplete: {}", stderr(&out));
        assert!(stderr(&out).contains("checksum mismatch"), "says why: {}", stderr(&out));
        assert!(stderr(&out).contains("the copy is incomplete"), "{}", stderr(&out));
        if !kept.is_empty() {
            // What the damage left reachable is copied whole.
            assert_eq!(std::fs::read(dest.join(kept)).unwrap(), vec![b'x'; 20_000]);
        }
        if let Some(byte) = salvaged {
            // The root itself is unreadable: the files no directory leads
            // to any more go to lost+found, as e2fsck puts them.
            let found: Vec<_> =
                std::fs::read_dir(dest.join("lost+found")).unwrap().map(|e| e.unwrap().path()).collect();
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(std::fs::read(&found[0]).unwrap(), vec![byte; 10_000]);
        }
        let out = dualfs(&["cat", m, d, damaged]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let out = dualfs(&["fsck", m, d]);
        assert_eq!(out.status.code(), Some(4), "fsck finds the damage: {}", stdout(&out));
    }
}

/// Sets the link count of `path` wrong through the engine (valid checksums).
fn wrong_link_count(v: &Images, path: &[u8]) {
    use dualfs_engine::device::FileDevice;
    use dualfs_engine::volume::MountOptions;
    use std::sync::Arc;
    let m = Arc::new(FileDevice::open(Path::new(&v.meta), false, true).unwrap());
    let d = Arc::new(FileDevice::open(Path::new(&v.data), false, true).unwrap());
    let vol = dualfs_engine::Volume::open(m, d, MountOptions::default()).unwrap();
    let root = dualfs_engine::types::InodeNo::ROOT;
    let keep = vol.lookup(root, b"keep").unwrap().ino;
    let f = vol.lookup(keep, path).unwrap().ino;
    vol.with_fs(|fs| fs.inode_mut(f).unwrap().nlink = 7);
    vol.close().unwrap();
}

#[test]
fn fsck_repairs_with_e2fsck_options_and_statuses() {
    let v = Images::new("128M", &[]);
    populate_in_two_commits(&v);
    let (m, d) = (v.meta.as_str(), v.data.as_str());
    // Clean: every mode says so, status 0.
    for opt in ["-n", "-p", "-a", "-y"] {
        let out = dualfs(&["fsck", opt, m, d]);
        assert_eq!(out.status.code(), Some(0), "{opt}: {}{}", stdout(&out), stderr(&out));
    }
    // What -p may do: a link count. Repaired, status 1, then clean.
    wrong_link_count(&v, b"a");
    let out = dualfs(&["fsck", m, d]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let out = dualfs(&["fsck", "-p", m, d]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("REPAIRED (safe)") && stdout(&out).contains("link count 7"), "{}", stdout(&out));
    assert_eq!(dualfs(&["fsck", m, d]).status.code(), Some(0));

    // What -p may not: a damaged record (its inode and the names of it go).
    damage_record_of(m, d, "/lost/x");
    let image = std::fs::read(m).unwrap();
    let out = dualfs(&["fsck", "-p", m, d]);
    assert_eq!(out.status.code(), Some(4), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("UNEXPECTED INCONSISTENCY") && stdout(&out).contains("-y"), "{}", stdout(&out));
    assert_eq!(std::fs::read(m).unwrap(), image, "-p changed the volume");
    let out = dualfs(&["fsck", "--repair", m, d]);
    assert_eq!(out.status.code(), Some(8), "no terminal to ask on: {}", stderr(&out));
    assert_eq!(std::fs::read(m).unwrap(), image, "--repair without an answer changed the volume");
    let out = dualfs(&["fsck", "-y", "--json", m, d]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["written"], true);
    assert!(j["repairs"].as_array().unwrap().iter().any(|r| r["severity"] == "loses"), "{j}");
    assert_eq!(j["after"]["clean"], true, "{j}");
    // Clean after, and a second repair finds nothing.
    assert_eq!(dualfs(&["fsck", m, d]).status.code(), Some(0));
    assert_eq!(dualfs(&["fsck", "-y", m, d]).status.code(), Some(0));
    // What the damage left is there, whole: /keep/a under its name or in
    // lost+found (the damaged block may have held the directories too).
    let dest = v.path("after-repair");
    let out = dualfs(&["get", m, d, "/", dest.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "a repaired volume copies whole: {}", stderr(&out));
    let mut found = false;
    let mut stack = vec![dest];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let e = e.unwrap().path();
            if e.is_dir() {
                stack.push(e);
            } else if std::fs::read(&e).is_ok_and(|b| b == vec![b'a'; 10_000]) {
                found = true;
            }
        }
    }
    assert!(found, "the file the damage spared is gone");
    // -n and -y together make no sense: fsck(8)'s usage status.
    assert_eq!(dualfs(&["fsck", "-n", "-y", m, d]).status.code(), Some(16));
}
