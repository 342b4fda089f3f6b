//! Send and receive: a stream of the difference between two snapshots,
//! applied to another volume, leaves there the same tree as the source
//! snapshot, byte for byte and attribute for attribute, full and
//! incremental; what does not fit is refused, a cut stream leaves the
//! mirror as it was, and a receive a crash interrupted is finished by
//! receiving the stream again or abandoned with `receive_abort`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::error::Error;
use dualfs_engine::format::inode::{
    FLAG_APPEND, FLAG_DIRSYNC, FLAG_IMMUTABLE, FLAG_NOATIME, FLAG_NODUMP, FLAG_PROJINHERIT,
};
use dualfs_engine::types::{FileKind, InodeNo};
use dualfs_engine::volume::{
    AtimeMode, Creds, FallocateMode, MkfsOptions, MountOptions, RECEIVED_XATTR, RECEIVING_XATTR, RenameFlags,
    SendReport, SetAttr, SetMode, TimeSet, send,
};

struct Disk {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
}

impl Disk {
    fn new() -> Disk {
        let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(32768)));
        let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        Disk { meta, data }
    }

    /// Opened with no access times: walking the tree to compare it must
    /// not change it (a hard link is read once per name).
    fn open(&self) -> Volume {
        self.open_with(AtimeMode::NoAtime)
    }

    fn open_with(&self, atime: AtimeMode) -> Volume {
        let options = MountOptions { commit_interval: Duration::ZERO, atime, ..MountOptions::default() };
        Volume::open(self.meta.clone(), self.data.clone(), options).unwrap()
    }

    fn devices(&self) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        (self.meta.clone(), self.data.clone())
    }

    fn snapshot(&self, name: &str) -> Volume {
        let options = MountOptions { atime: AtimeMode::NoAtime, ..MountOptions::default() };
        Volume::open_snapshot(self.meta.clone(), self.data.clone(), name, options).unwrap()
    }

    fn send(&self, from: Option<&str>, to: &str) -> (Vec<u8>, SendReport) {
        let (m, d) = self.devices();
        let mut out = Vec::new();
        let report = send(m, d, from, to, &mut out).unwrap();
        assert_eq!(report.stream_bytes, out.len() as u64);
        (out, report)
    }
}

/// Everything a tree shows of one path.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    ino: InodeNo,
    generation: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    rdev: u64,
    times: [(i64, u32); 4],
    flags: u32,
    project: u32,
    content: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn walk(vol: &Volume) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(String::new(), InodeNo::ROOT)];
    while let Some((path, ino)) = todo.pop() {
        let a = vol.getattr(ino).unwrap();
        let content = match a.kind {
            FileKind::Regular => vol.read(ino, 0, a.size as usize).unwrap(),
            FileKind::Symlink => vol.readlink(ino).unwrap(),
            FileKind::Directory => {
                let mut names = Vec::new();
                vol.readdir(ino, 0, &mut |l| {
                    names.push((l.name, l.ino));
                    true
                })
                .unwrap();
                // Order is the per-volume hash's: compare the set of names.
                names.sort();
                let mut listing = Vec::new();
                for (name, child) in names {
                    if name == b"." || name == b".." {
                        continue;
                    }
                    listing.extend_from_slice(&name);
                    listing.push(b'/');
                    todo.push((format!("{path}/{}", String::from_utf8_lossy(&name)), child));
                }
                listing
            }
            _ => Vec::new(),
        };
        let mut xattrs = BTreeMap::new();
        for name in vol.listxattr(ino).unwrap() {
            if ino == InodeNo::ROOT && (name == RECEIVED_XATTR || name == RECEIVING_XATTR) {
                continue;
            }
            let v = vol.getxattr(ino, &name).unwrap();
            xattrs.insert(name, v);
        }
        let t = |t: dualfs_engine::types::Timestamp| (t.sec, t.nsec);
        let seen = Seen {
            ino,
            generation: a.generation,
            mode: a.perm | a.kind.mode_bits(),
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            rdev: a.rdev,
            times: [t(a.atime), t(a.mtime), t(a.ctime), t(a.crtime)],
            flags: a.flags,
            project: a.project,
            content,
            xattrs,
        };
        out.insert(path, seen);
    }
    out
}

fn assert_same(source: &Volume, target: &Volume) {
    let (s, t) = (walk(source), walk(target));
    for (path, seen) in &s {
        assert_eq!(Some(seen), t.get(path), "{path} differs");
    }
    assert_eq!(s.len(), t.len(), "paths only on the target: {:?}", t.keys().filter(|k| !s.contains_key(*k)));
}

fn lookup(vol: &Volume, path: &str) -> InodeNo {
    let mut at = InodeNo::ROOT;
    for part in path.split('/') {
        at = vol.lookup(at, part.as_bytes()).unwrap().ino;
    }
    at
}

fn file(vol: &Volume, dir: InodeNo, name: &str, data: &[u8]) -> InodeNo {
    let f = vol.create(dir, name.as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
    vol.write(f, 0, data).unwrap();
    f
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// The first tree: every kind of inode, inline and block files, a sparse
/// one, short and long symlinks, a hard link, attributes inline and in a tree.
fn populate(vol: &Volume) {
    let r = InodeNo::ROOT;
    let d = vol.mkdir(r, b"dir", 0o750, Creds::ROOT).unwrap().ino;
    let sub = vol.mkdir(d, b"sub", 0o755, Creds { uid: 1000, gid: 100, umask: 0o022 }).unwrap().ino;
    // A project handed down from the start: what is made in `sub` is of
    // project 5, so renames within it stay in the project (across projects
    // they are refused with EXDEV, as on ext4 and XFS).
    vol.set_flags(sub, FLAG_PROJINHERIT, Some(5)).unwrap();
    file(vol, r, "small", b"inline bytes");
    let big = file(vol, d, "big", &pattern(300_000, 1));
    let sparse = vol.create(sub, b"sparse", 0o600, Creds::ROOT).unwrap().ino;
    vol.write(sparse, 1 << 20, b"far away").unwrap();
    vol.write(sparse, 0, &pattern(5000, 2)).unwrap();
    vol.symlink(r, b"short-link", b"dir/big", Creds::ROOT).unwrap();
    let long_target = "x/".repeat(900);
    vol.symlink(sub, b"long-link", long_target.as_bytes(), Creds::ROOT).unwrap();
    vol.link(big, r, b"hard").unwrap();
    vol.mknod(r, b"fifo", FileKind::Fifo, 0o644, 0, Creds::ROOT).unwrap();
    vol.mknod(d, b"chr", FileKind::CharDevice, 0o600, 0x0501, Creds::ROOT).unwrap();
    vol.setxattr(big, b"user.one", b"1", SetMode::Any).unwrap();
    for i in 0..40 {
        vol.setxattr(sparse, format!("user.many-{i:02}").as_bytes(), &pattern(40, i), SetMode::Any).unwrap();
    }
    vol.setxattr(r, b"user.on-root", b"root attr", SetMode::Any).unwrap();
    for i in 0..200 {
        file(vol, sub, &format!("entry-{i:03}-with-a-long-name"), format!("file {i}").as_bytes());
    }
    let set = SetAttr {
        mtime: Some(TimeSet::At(dualfs_engine::types::Timestamp::new(1_000_000, 5))),
        uid: Some(42),
        ..SetAttr::default()
    };
    vol.setattr(sparse, &set).unwrap();
    // Inode flags and projects travel with the attributes.
    vol.set_flags(big, FLAG_NODUMP, Some(3)).unwrap();
    vol.set_flags(sub, FLAG_PROJINHERIT | FLAG_DIRSYNC, Some(5)).unwrap();
}

/// Renames, deletes, overwrites, truncations, new directories.
fn change_one(vol: &Volume) {
    let r = InodeNo::ROOT;
    let d = lookup(vol, "dir");
    let sub = lookup(vol, "dir/sub");
    vol.rename(sub, b"entry-000-with-a-long-name", r, b"moved", RenameFlags::default()).unwrap();
    vol.unlink(sub, b"entry-001-with-a-long-name").unwrap();
    let big = lookup(vol, "dir/big");
    vol.write(big, 100_000, &pattern(10_000, 9)).unwrap();
    vol.write(big, 300_000, b"appended").unwrap();
    let sparse = lookup(vol, "dir/sub/sparse");
    vol.setattr(sparse, &SetAttr { size: Some(3000), ..SetAttr::default() }).unwrap();
    let n = vol.mkdir(r, b"new", 0o700, Creds::ROOT).unwrap().ino;
    file(vol, n, "inside", &pattern(9000, 3));
    vol.removexattr(big, b"user.one").unwrap();
    vol.setxattr(big, b"user.two", b"2", SetMode::Any).unwrap();
    vol.rename(r, b"small", d, b"small-moved", RenameFlags::default()).unwrap();
    // A rename over an existing name replaces it.
    vol.rename(sub, b"entry-002-with-a-long-name", sub, b"entry-003-with-a-long-name", RenameFlags::default()).unwrap();
    vol.unlink(r, b"hard").unwrap();
    vol.setattr(d, &SetAttr { mode: Some(0o711), ..SetAttr::default() }).unwrap();
    // Immutable on the receiver too: the next stream's change of it must
    // still apply there.
    vol.set_flags(sparse, FLAG_IMMUTABLE, None).unwrap();
    vol.set_flags(d, FLAG_APPEND, None).unwrap();
}

/// Whole trees go, freed numbers come back as other files, holes, an
/// inline file grows onto the data device and another becomes a directory.
fn change_two(vol: &Volume) {
    let r = InodeNo::ROOT;
    let sub = lookup(vol, "dir/sub");
    for i in 4..200 {
        vol.unlink(sub, format!("entry-{i:03}-with-a-long-name").as_bytes()).unwrap();
    }
    for i in 0..30 {
        file(vol, r, &format!("reborn-{i}"), &pattern(100 + i * 300, i as u8));
    }
    let big = lookup(vol, "dir/big");
    let punch = FallocateMode::PUNCH_HOLE;
    vol.fallocate(big, 8192, 65536, punch).unwrap();
    let small = lookup(vol, "dir/small-moved");
    vol.write(small, 20_000, b"grown").unwrap();
    vol.unlink(r, b"fifo").unwrap();
    vol.mkdir(r, b"fifo", 0o755, Creds::ROOT).unwrap();
    vol.unlink(lookup(vol, "dir/sub"), b"long-link").unwrap();
    vol.symlink(r, b"short-link-2", b"elsewhere", Creds::ROOT).unwrap();
}

/// Small changes everywhere, and a file cut to nothing and rewritten.
fn change_three(vol: &Volume) {
    let big = lookup(vol, "dir/big");
    vol.setattr(big, &SetAttr { size: Some(0), ..SetAttr::default() }).unwrap();
    vol.write(big, 0, &pattern(70_000, 7)).unwrap();
    let moved = lookup(vol, "moved");
    vol.write(moved, 0, b"changed").unwrap();
    vol.setxattr(InodeNo::ROOT, b"user.on-root", b"changed root attr", SetMode::Any).unwrap();
    let d = lookup(vol, "dir");
    vol.set_flags(d, 0, None).unwrap();
    vol.rename(InodeNo::ROOT, b"new", d, b"new-inside", RenameFlags::default()).unwrap();
    let sparse = lookup(vol, "dir/sub/sparse");
    vol.set_flags(sparse, 0, None).unwrap();
    vol.write(sparse, 100, b"changed while it was immutable on the receiver").unwrap();
    vol.set_flags(sparse, FLAG_IMMUTABLE | FLAG_NOATIME, Some(8)).unwrap();
}

fn receive(target: &Volume, stream: &[u8]) -> Result<dualfs_engine::volume::ReceiveReport, Error> {
    target.receive(&mut &stream[..])
}

#[test]
fn full_and_incremental_streams_rebuild_the_tree_exactly() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    let changes: [fn(&Volume); 4] = [populate, change_one, change_two, change_three];
    let mut prev: Option<String> = None;
    for (i, change) in changes.iter().enumerate() {
        change(&vol);
        let name = format!("s{i}");
        vol.snapshot_create(&name).unwrap();
        let (stream, report) = src.send(prev.as_deref(), &name);
        if prev.is_some() {
            assert!(report.counts.inodes < 80, "an increment sends what changed: {report:?}");
        }
        let target = dst.open();
        let got = receive(&target, &stream).unwrap();
        assert_eq!(got.snapshot, name);
        assert_same(&src.snapshot(&name), &target);
        target.close().unwrap();
        // And the snapshot the receive made, after a remount.
        assert_same(&src.snapshot(&name), &dst.snapshot(&name));
        let found = dualfs_engine::check::check(dst.meta.clone(), dst.data.clone()).unwrap();
        assert!(found.problems.is_empty(), "after {name}: {:#?}", found.problems);
        prev = Some(name);
    }
    vol.close().unwrap();
}

#[test]
fn an_unchanged_volume_sends_nothing_but_its_frame() {
    let src = Disk::new();
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    vol.snapshot_create("b").unwrap();
    let (_, report) = src.send(Some("a"), "b");
    assert_eq!(report.counts.inodes, 0, "{report:?}");
    assert_eq!(report.map_blocks_compared, 0, "{report:?}");
    // Sending the newer one first is refused.
    let (m, d) = src.devices();
    assert!(matches!(send(m, d, Some("b"), "a", &mut Vec::new()), Err(Error::Stream(_))));
}

#[test]
fn a_stream_the_target_has_no_base_for_is_refused() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    change_one(&vol);
    vol.snapshot_create("b").unwrap();
    change_two(&vol);
    vol.snapshot_create("c").unwrap();
    let target = dst.open();
    // An increment onto an empty volume, then onto the wrong base.
    let (b_to_c, _) = src.send(Some("b"), "c");
    let e = receive(&target, &b_to_c).unwrap_err();
    assert!(matches!(&e, Error::ReceiveRefused(m) if m.contains("does not hold")), "{e}");
    receive(&target, &src.send(None, "a").0).unwrap();
    let e = receive(&target, &b_to_c).unwrap_err();
    assert!(matches!(&e, Error::ReceiveRefused(m) if m.contains("snapshot b")), "{e}");
    // A full stream onto a volume with files.
    let e = receive(&target, &src.send(None, "b").0).unwrap_err();
    assert!(matches!(&e, Error::ReceiveRefused(m) if m.contains("empty volume")), "{e}");
    // A target changed since its base.
    target.create(InodeNo::ROOT, b"local change", 0o644, Creds::ROOT).unwrap();
    let e = receive(&target, &src.send(Some("a"), "b").0).unwrap_err();
    assert!(matches!(&e, Error::ReceiveRefused(m) if m.contains("changed since")), "{e}");
    // Undone, the change still shows in the root's times.
    target.unlink(InodeNo::ROOT, b"local change").unwrap();
    assert!(receive(&target, &src.send(Some("a"), "b").0).is_err());
    target.close().unwrap();
    vol.close().unwrap();
}

#[test]
fn reading_the_mirror_does_not_stop_the_next_increment() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    change_one(&vol);
    vol.snapshot_create("b").unwrap();
    let target = dst.open_with(AtimeMode::Relatime);
    receive(&target, &src.send(None, "a").0).unwrap();
    let big = lookup(&target, "dir/big");
    let before = target.getattr(big).unwrap().atime;
    std::thread::sleep(Duration::from_millis(20));
    target.read(big, 0, 100).unwrap();
    assert_ne!(target.getattr(big).unwrap().atime, before, "the read stamps the access time");
    target.commit().unwrap();
    receive(&target, &src.send(Some("a"), "b").0).unwrap();
    assert_same(&src.snapshot("b"), &target);
    target.close().unwrap();
    vol.close().unwrap();
}

#[test]
fn cut_and_corrupted_streams_are_refused_with_the_mirror_left_as_it_was() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    change_one(&vol);
    change_two(&vol);
    vol.snapshot_create("b").unwrap();
    let target = dst.open();
    receive(&target, &src.send(None, "a").0).unwrap();
    let (stream, _) = src.send(Some("a"), "b");
    // A flipped byte in the header: refused before anything changes.
    let mut bad = stream.clone();
    bad[30] ^= 1;
    assert!(matches!(receive(&target, &bad), Err(Error::Stream(_))));
    assert!(target.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_err());
    // Cut in the middle: what came before was applied, and is undone.
    let e = receive(&target, &stream[..stream.len() / 2]).unwrap_err();
    assert!(matches!(&e, Error::Stream(m) if m.contains("cut short") && m.contains("as it was")), "{e}");
    assert!(target.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_err());
    assert_same(&src.snapshot("a"), &target);
    // A byte changed near the end: the checksum refuses it.
    let mut bad = stream.clone();
    let at = stream.len() - 40;
    bad[at] ^= 0x40;
    assert!(matches!(receive(&target, &bad), Err(Error::Stream(_))));
    // Stray bytes after the end.
    let mut long = stream.clone();
    long.push(0);
    assert!(matches!(receive(&target, &long), Err(Error::Stream(_))));
    assert_same(&src.snapshot("a"), &target);
    // The mirror, brought back each time, still takes the increment: its
    // files hold a's bytes again, if not in a's blocks.
    let got = receive(&target, &stream).unwrap();
    assert!(!got.resumed);
    assert_same(&src.snapshot("b"), &target);
    // Received already.
    let e = receive(&target, &stream).unwrap_err();
    assert!(matches!(&e, Error::ReceiveRefused(m) if m.contains("received already")), "{e}");
    target.close().unwrap();
    vol.close().unwrap();
}

/// A reader that gives `limit` bytes of `bytes`, then takes a copy of the
/// mirror's devices as a crash there would leave them (everything written
/// so far; the receive writes nothing while it reads), then fails.
struct CrashAt<'a> {
    bytes: &'a [u8],
    at: usize,
    limit: usize,
    disk: &'a Disk,
    copy: Option<Disk>,
}

impl std::io::Read for CrashAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at >= self.limit {
            if self.copy.is_none() {
                self.copy =
                    Some(Disk { meta: Arc::new(self.disk.meta.snapshot()), data: Arc::new(self.disk.data.snapshot()) });
            }
            return Err(std::io::Error::other("killed"));
        }
        let n = buf.len().min(self.limit - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn a_receive_a_crash_interrupted_is_finished_by_the_same_stream_or_abandoned() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    change_one(&vol);
    change_two(&vol);
    vol.snapshot_create("b").unwrap();
    let target = dst.open();
    receive(&target, &src.send(None, "a").0).unwrap();
    target.commit().unwrap();
    let (stream, _) = src.send(Some("a"), "b");
    // The crash: the devices as they are when the stream stops, mid-way.
    let mut input = CrashAt { bytes: &stream, at: 0, limit: stream.len() * 3 / 4, disk: &dst, copy: None };
    assert!(target.receive(&mut input).is_err());
    let crashed = input.copy.take().unwrap();
    target.close().unwrap();
    let (m, d) = crashed.devices();
    let report = dualfs_engine::check::check(m.clone(), d.clone()).unwrap();
    assert!(report.receiving.is_some(), "fsck names the receive under way");
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    let copy = Disk { meta: Arc::new(crashed.meta.snapshot()), data: Arc::new(crashed.data.snapshot()) };
    // Finished by the same stream; other streams refused until then.
    let mirror = crashed.open();
    assert!(mirror.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_ok());
    let e = mirror.snapshot_create("now").unwrap_err();
    assert!(e.to_string().contains("receive is under way"), "{e}");
    let e = mirror.snapshot_delete("a").unwrap_err();
    assert!(e.to_string().contains("base of the receive under way"), "{e}");
    let e = receive(&mirror, &src.send(None, "b").0).unwrap_err();
    assert!(matches!(&e, Error::ReceiveRefused(m) if m.contains("--abort")), "{e}");
    let got = receive(&mirror, &stream).unwrap();
    assert!(got.resumed);
    assert_same(&src.snapshot("b"), &mirror);
    mirror.close().unwrap();
    let (m, d) = crashed.devices();
    assert!(dualfs_engine::check::check(m, d).unwrap().is_clean());
    // Or abandoned: back to a, and a's increment received afterwards.
    let mirror = copy.open();
    let r = mirror.receive_abort(&mut dualfs_engine::volume::Touched::default()).unwrap();
    assert_eq!(r.base.as_deref(), Some("a"));
    assert!(mirror.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_err());
    assert_same(&src.snapshot("a"), &mirror);
    assert!(mirror.receive_abort(&mut dualfs_engine::volume::Touched::default()).is_err(), "nothing left to abort");
    receive(&mirror, &stream).unwrap();
    assert_same(&src.snapshot("b"), &mirror);
    mirror.close().unwrap();
    let (m, d) = copy.devices();
    assert!(dualfs_engine::check::check(m, d).unwrap().is_clean());
    vol.close().unwrap();
}

#[test]
fn an_abandoned_full_receive_leaves_the_empty_volume_it_started_from() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    let (stream, _) = src.send(None, "a");
    let target = dst.open();
    let empty = walk(&target);
    let mut input = CrashAt { bytes: &stream, at: 0, limit: stream.len() / 2, disk: &dst, copy: None };
    assert!(target.receive(&mut input).is_err());
    assert_eq!(walk(&target), empty, "a cut stream leaves the volume as it was");
    let crashed = input.copy.take().unwrap();
    target.close().unwrap();
    let mirror = crashed.open();
    assert!(mirror.getxattr(InodeNo::ROOT, RECEIVING_XATTR).is_ok());
    let r = mirror.receive_abort(&mut dualfs_engine::volume::Touched::default()).unwrap();
    assert_eq!(r.base, None);
    assert_eq!(walk(&mirror), empty);
    receive(&mirror, &stream).unwrap();
    assert_same(&src.snapshot("a"), &mirror);
    mirror.close().unwrap();
    vol.close().unwrap();
}

#[test]
fn send_costs_what_changed_not_the_volume() {
    let src = Disk::new();
    let vol = src.open();
    let r = InodeNo::ROOT;
    let mut files = Vec::new();
    for d in 0..20 {
        let dir = vol.mkdir(r, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..100 {
            files.push(file(&vol, dir, &format!("f{i}"), &pattern(2000, i as u8)));
        }
    }
    vol.snapshot_create("a").unwrap();
    vol.write(files[1500], 0, b"one change").unwrap();
    vol.snapshot_create("b").unwrap();
    let (_, report) = src.send(Some("a"), "b");
    assert_eq!(report.counts.inodes, 1, "{report:?}");
    assert!(report.inodes_compared <= 4, "{report:?}");
    assert!(report.map_blocks_compared <= 2, "{report:?}");
    vol.close().unwrap();
}

#[test]
fn flags_received_by_an_older_volume_mark_it_first() {
    let src = Disk::new();
    let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(32768)));
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, fsync_log: false, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    let dst = Disk { meta, data };
    let incompat = |d: &Disk| {
        let block = dualfs_engine::device::read(d.meta.as_ref(), dualfs_engine::DeviceRole::Meta, 0, 1).unwrap();
        dualfs_engine::format::superblock::Superblock::decode(&block).unwrap().incompat
    };
    let flags_bit = dualfs_engine::format::superblock::INCOMPAT_INODE_FLAGS;
    assert_eq!(incompat(&dst) & flags_bit, 0);
    let vol = src.open();
    populate(&vol);
    vol.snapshot_create("a").unwrap();
    let target = dst.open();
    receive(&target, &src.send(None, "a").0).unwrap();
    assert_ne!(incompat(&dst) & flags_bit, 0, "marked before the first flag was written");
    assert_same(&src.snapshot("a"), &target);
    target.close().unwrap();
    let found = dualfs_engine::check::check(dst.meta.clone(), dst.data.clone()).unwrap();
    assert!(found.problems.is_empty(), "{:#?}", found.problems);
    vol.close().unwrap();
}

/// A clone's snapshot shares its origin's snapshot's blocks where the clone
/// did not change them, so a stream from the origin's snapshot to it is
/// what the clone changed: a mirror holding the origin's snapshot takes
/// the clone's with a stream of one file, and what the live tree changed
/// after the clone was cut is not in it.
#[test]
fn a_clones_snapshot_sent_against_its_origins_snapshot_carries_what_the_clone_changed() {
    let src = Disk::new();
    let dst = Disk::new();
    let vol = src.open();
    let mut files = Vec::new();
    for d in 0..20 {
        let dir = vol.mkdir(InodeNo::ROOT, format!("d{d}").as_bytes(), 0o755, Creds::ROOT).unwrap().ino;
        for i in 0..100 {
            files.push(file(&vol, dir, &format!("f{i}"), &pattern(2000, i as u8)));
        }
    }
    vol.snapshot_create("a").unwrap();
    vol.clone_create("a", "c").unwrap();
    // The origin goes on: none of it is the clone's.
    vol.write(files[10], 0, b"the origin's own").unwrap();
    file(&vol, InodeNo::ROOT, "origin-only", b"not in the clone");
    // Closed first: what the creates looked up is let go, as a mount's end
    // lets go of the kernel's lookups.
    vol.close().unwrap();
    let vol = src.open();
    vol.switch_tree("c").unwrap();
    vol.write(files[1500], 0, b"the clone's change").unwrap();
    vol.snapshot_create("c1").unwrap();
    let (full, _) = src.send(None, "a");
    let (increment, report) = src.send(Some("a"), "c1");
    assert_eq!(report.counts.inodes, 1, "only the file the clone changed: {report:?}");
    // A few of the map's blocks (the file's, and what the switch and the
    // snapshot rewrote), not the 2,000 files'.
    assert!(report.inodes_compared <= 4, "{report:?}");
    assert!(report.map_blocks_compared <= 4, "{report:?}");
    let target = dst.open();
    receive(&target, &full).unwrap();
    let got = receive(&target, &increment).unwrap();
    assert_eq!(got.snapshot, "c1");
    assert_same(&src.snapshot("c1"), &target);
    assert!(target.lookup(InodeNo::ROOT, b"origin-only").is_err(), "the origin's change reached the clone's mirror");
    target.close().unwrap();
    vol.close().unwrap();
}
