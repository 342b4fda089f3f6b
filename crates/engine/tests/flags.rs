//! Inode flags: what immutable and append-only forbid, for every caller
//! (the volume has no notion of root), what new inodes inherit, and that
//! flags and project ids survive a remount and mark an older volume.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dualfs_engine::Error;
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::inode::{FLAG_APPEND, FLAG_DIRSYNC, FLAG_IMMUTABLE, FLAG_NOATIME, FLAG_PROJINHERIT};
use dualfs_engine::format::superblock::INCOMPAT_INODE_FLAGS;
use dualfs_engine::namespace::xattr::SetMode;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::{Creds, FallocateMode, MkfsOptions, MountOptions, RenameFlags, SetAttr};

fn devices() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(65536)))
}

fn volume_on(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>, fsync_log: bool) -> Volume {
    let opts = MkfsOptions { segment_blocks: 128, group_blocks: 8192, fsync_log, ..MkfsOptions::default() };
    Volume::format(meta.clone(), data.clone(), &opts).unwrap();
    Volume::open(meta.clone(), data.clone(), MountOptions::default()).unwrap()
}

fn incompat(meta: &Arc<dyn BlockDevice>) -> u64 {
    let block = dualfs_engine::device::read(meta.as_ref(), dualfs_engine::DeviceRole::Meta, 0, 1).unwrap();
    dualfs_engine::format::superblock::Superblock::decode(&block).unwrap().incompat
}

fn eperm<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    assert!(matches!(r, Err(Error::NotPermitted)), "{what}: {r:?}");
}

#[test]
fn an_immutable_file_refuses_every_change() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, true);
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"hello").unwrap();
    v.set_flags(f, FLAG_IMMUTABLE, None).unwrap();
    eperm(v.write(f, 0, b"x"), "write");
    eperm(v.write(f, 5, b"x"), "append");
    eperm(v.setattr(f, &SetAttr { size: Some(0), ..SetAttr::default() }), "truncate");
    eperm(v.setattr(f, &SetAttr { mode: Some(0o600), ..SetAttr::default() }), "chmod");
    eperm(v.setattr(f, &SetAttr { uid: Some(5), ..SetAttr::default() }), "chown");
    eperm(v.setattr(f, &SetAttr { atime: Some(dualfs_engine::volume::TimeSet::Now), ..SetAttr::default() }), "touch");
    eperm(v.unlink(InodeNo::ROOT, b"f"), "unlink");
    eperm(v.rename(InodeNo::ROOT, b"f", InodeNo::ROOT, b"g", RenameFlags::default()), "rename");
    eperm(v.link(f, InodeNo::ROOT, b"h"), "link");
    eperm(v.setxattr(f, b"user.a", b"1", SetMode::Any), "setxattr");
    eperm(v.fallocate(f, 0, 4096, FallocateMode::default()), "fallocate");
    assert_eq!(v.read(f, 0, 100).unwrap(), b"hello");
    // Clearing the flag is the one change it takes (the kernel checks who).
    v.set_flags(f, 0, None).unwrap();
    v.unlink(InodeNo::ROOT, b"f").unwrap();
}

#[test]
fn an_append_only_file_grows_at_its_end_only() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, true);
    let f = v.create(InodeNo::ROOT, b"log", 0o644, Creds::ROOT).unwrap().ino;
    v.write(f, 0, b"one\n").unwrap();
    v.set_flags(f, FLAG_APPEND, None).unwrap();
    v.write(f, 4, b"two\n").unwrap();
    // A page written back whole: the bytes below the end are the same.
    v.write(f, 0, b"one\ntwo\nthree\n").unwrap();
    eperm(v.write(f, 0, b"ONE"), "rewrite");
    eperm(v.setattr(f, &SetAttr { size: Some(3), ..SetAttr::default() }), "truncate down");
    eperm(v.unlink(InodeNo::ROOT, b"log"), "unlink");
    eperm(v.rename(InodeNo::ROOT, b"log", InodeNo::ROOT, b"x", RenameFlags::default()), "rename");
    eperm(
        v.fallocate(f, 0, 4096, FallocateMode { punch_hole: true, keep_size: true, ..FallocateMode::default() }),
        "punch",
    );
    assert_eq!(v.read(f, 0, 100).unwrap(), b"one\ntwo\nthree\n");
}

#[test]
fn an_append_only_inode_takes_the_time_now_but_not_a_time_given() {
    use dualfs_engine::types::Timestamp;
    use dualfs_engine::volume::TimeSet;
    let (m, d) = devices();
    let v = volume_on(&m, &d, true);
    let f = v.create(InodeNo::ROOT, b"log", 0o644, Creds::ROOT).unwrap().ino;
    let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let epoch = TimeSet::At(Timestamp { sec: 0, nsec: 0 });
    let stamped = Some(Timestamp { sec: 1_700_000_000, nsec: 0 });
    for ino in [f, dir] {
        v.set_flags(ino, FLAG_APPEND, None).unwrap();
        // utime(2) to a given time, as the kernel sends it with and without
        // the writeback cache (which adds the change time it stamped).
        eperm(v.setattr(ino, &SetAttr { atime: Some(epoch), mtime: Some(epoch), ..SetAttr::default() }), "utime");
        let wb = SetAttr { atime: Some(epoch), mtime: Some(epoch), ctime: stamped, ..SetAttr::default() };
        eperm(v.setattr(ino, &wb), "utime under the writeback cache");
        eperm(v.setattr(ino, &SetAttr { mtime: Some(epoch), ..SetAttr::default() }), "mtime alone");
        // utime(2) to now.
        let now = SetAttr { atime: Some(TimeSet::Now), mtime: Some(TimeSet::Now), ..SetAttr::default() };
        v.setattr(ino, &now).unwrap();
    }
    // The writeback cache's own write-back of an append's times.
    let at = TimeSet::At(Timestamp { sec: 1_700_000_000, nsec: 5 });
    v.setattr(f, &SetAttr { mtime: Some(at), ctime: stamped, ..SetAttr::default() }).unwrap();
    assert_eq!(v.getattr(f).unwrap().mtime, Timestamp { sec: 1_700_000_000, nsec: 5 });
}

#[test]
fn a_name_in_a_fixed_directory_is_refused_before_its_kind_or_contents() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, true);
    for flag in [FLAG_IMMUTABLE, FLAG_APPEND] {
        let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
        let sub = v.mkdir(dir, b"full", 0o755, Creds::ROOT).unwrap().ino;
        v.create(sub, b"f", 0o644, Creds::ROOT).unwrap();
        v.create(dir, b"file", 0o644, Creds::ROOT).unwrap();
        let empty = v.mkdir(InodeNo::ROOT, b"empty", 0o755, Creds::ROOT).unwrap().ino;
        v.set_flags(dir, flag, None).unwrap();
        v.set_flags(empty, flag, None).unwrap();
        // EPERM, as the kernel's `may_delete`, not ENOTEMPTY, ENOTDIR or EISDIR.
        eperm(v.rmdir(dir, b"full"), "rmdir of a full directory in it");
        eperm(v.rmdir(dir, b"file"), "rmdir of a file in it");
        eperm(v.unlink(dir, b"full"), "unlink of a directory in it");
        eperm(v.rmdir(InodeNo::ROOT, b"empty"), "rmdir of an empty fixed directory");
        v.set_flags(dir, 0, None).unwrap();
        v.set_flags(empty, 0, None).unwrap();
        v.unlink(sub, b"f").unwrap();
        v.rmdir(dir, b"full").unwrap();
        v.unlink(dir, b"file").unwrap();
        v.rmdir(InodeNo::ROOT, b"d").unwrap();
        v.rmdir(InodeNo::ROOT, b"empty").unwrap();
    }
}

#[test]
fn directories_keep_their_names_and_pass_flags_on() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, true);
    let dir = v.mkdir(InodeNo::ROOT, b"d", 0o755, Creds::ROOT).unwrap().ino;
    let inside = v.create(dir, b"a", 0o644, Creds::ROOT).unwrap().ino;
    v.set_flags(dir, FLAG_APPEND | FLAG_NOATIME | FLAG_DIRSYNC | FLAG_PROJINHERIT, Some(42)).unwrap();
    let new = v.create(dir, b"b", 0o644, Creds::ROOT).unwrap();
    assert_eq!(new.flags, FLAG_NOATIME, "a file takes noatime, not the directory-only flags nor append-only");
    assert_eq!(new.project, 42, "the project of a PROJINHERIT directory");
    let sub = v.mkdir(dir, b"s", 0o755, Creds::ROOT).unwrap();
    assert_eq!(sub.flags, FLAG_NOATIME | FLAG_DIRSYNC | FLAG_PROJINHERIT);
    eperm(v.unlink(dir, b"a"), "unlink from an append-only directory");
    v.set_flags(dir, FLAG_IMMUTABLE, None).unwrap();
    eperm(v.create(dir, b"c", 0o644, Creds::ROOT), "create in an immutable directory");
    eperm(v.link(inside, InodeNo::ROOT, b"a2").and_then(|_| v.link(inside, dir, b"a3")), "link into it");
    v.set_flags(dir, 0, None).unwrap();
    v.unlink(dir, b"a").unwrap();
}

#[test]
fn flags_and_projects_survive_a_remount_and_mark_an_older_volume() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, false);
    assert_eq!(incompat(&m) & INCOMPAT_INODE_FLAGS, 0, "an older volume's mkfs");
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    v.set_flags(f, FLAG_NOATIME, Some(7)).unwrap();
    assert_ne!(incompat(&m) & INCOMPAT_INODE_FLAGS, 0, "marked before the first flag");
    v.close().unwrap();
    let v = Volume::open(m, d, MountOptions::default()).unwrap();
    let a = v.getattr(f).unwrap();
    assert_eq!((a.flags, a.project), (FLAG_NOATIME, 7));
    assert!(matches!(v.set_flags(f, 0x4000_0000, None), Err(Error::NotSupported)));
}

fn fsck(m: &Arc<dyn BlockDevice>, d: &Arc<dyn BlockDevice>) -> Vec<String> {
    let r = dualfs_engine::check::check(m.clone(), d.clone()).unwrap();
    r.problems.iter().map(ToString::to_string).collect()
}

#[test]
fn fsck_names_flags_on_a_volume_not_marked_for_them() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, false);
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    let g = v.create(InodeNo::ROOT, b"g", 0o644, Creds::ROOT).unwrap().ino;
    // Written past `set_flags`, which would mark the volume first.
    v.with_fs(|fs| fs.inode_mut(f).unwrap().flags = FLAG_IMMUTABLE);
    v.with_fs(|fs| fs.inode_mut(g).unwrap().project = 9);
    v.commit().unwrap();
    v.close().unwrap();
    let found = fsck(&m, &d);
    assert_eq!(found.len(), 2, "{found:#?}");
    for (ino, what) in [(f, "flags 0x10 and project 0"), (g, "flags 0x0 and project 9")] {
        let p = format!("[I8] inode of inode {ino}: has inode {what} on a volume not marked INODE_FLAGS");
        assert!(found.iter().any(|m| m.starts_with(&p)), "{p}: {found:#?}");
    }
    // The same change through the volume marks it first: fsck is clean.
    let v = Volume::open(m.clone(), d.clone(), MountOptions::default()).unwrap();
    v.set_flags(f, FLAG_IMMUTABLE, Some(0)).unwrap();
    v.close().unwrap();
    assert_eq!(fsck(&m, &d), Vec::<String>::new());
}

#[test]
fn fsck_names_flags_a_kind_does_not_keep_and_unknown_flags() {
    let (m, d) = devices();
    let v = volume_on(&m, &d, true);
    let f = v.create(InodeNo::ROOT, b"f", 0o644, Creds::ROOT).unwrap().ino;
    let l = v.symlink(InodeNo::ROOT, b"l", b"f", Creds::ROOT).unwrap().ino;
    v.with_fs(|fs| fs.inode_mut(f).unwrap().flags = FLAG_DIRSYNC);
    v.with_fs(|fs| fs.inode_mut(l).unwrap().flags = FLAG_IMMUTABLE | FLAG_NOATIME);
    v.commit().unwrap();
    v.close().unwrap();
    let found = fsck(&m, &d);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().any(|p| p.starts_with(&format!(
        "[I8] inode of inode {f}: a regular file with inode flags 0x10000 that its kind does not keep"
    ))));
    assert!(found.iter().any(|p| p.starts_with(&format!(
        "[I8] inode of inode {l}: a symbolic link with inode flags 0x10 that its kind does not keep"
    ))));

    // A flag no version defines: the record does not decode, and fsck
    // names its inode block and the inode.
    let v = Volume::open(m.clone(), d.clone(), MountOptions::default()).unwrap();
    v.with_fs(|fs| fs.inode_mut(f).unwrap().flags = 0x4000_0000);
    v.commit().unwrap();
    drop(v);
    let found = fsck(&m, &d);
    assert!(
        found.iter().any(|p| p.starts_with("[I5] inode block") && p.contains(&format!("inode {f} has unknown flags"))),
        "{found:#?}"
    );
}
