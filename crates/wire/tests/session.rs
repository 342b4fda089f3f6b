//! The session through the kernel: mount options as /proc/mounts shows
//! them, and notifications that make the kernel ask again. Needs root and
//! /dev/fuse (see `common::skip`).

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use common::{TestFs, can_mount, count, uring_param};
use dualfs_wire::abi::{ROOT_ID, opcode};
use dualfs_wire::{Server, Transport, Transports};

/// The /proc/mounts line of `mnt`.
fn mounts_line(mnt: &std::path::Path) -> Option<String> {
    let want = mnt.to_str().unwrap();
    fs::read_to_string("/proc/mounts").unwrap().lines().find(|l| l.split(' ').nth(1) == Some(want)).map(String::from)
}

#[test]
fn mount_options_are_what_proc_mounts_shows() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let options =
        ["fsname=wire-opts", "subtype=wireopts", "ro", "noexec", "noatime", "allow_other", "default_permissions"];
    let mut o: Vec<String> = options.iter().map(|s| (*s).to_string()).collect();
    o.push("max_read=65536".into());
    let server = Server::start(dir.path(), &o, Arc::new(TestFs::new()), Transports::default()).unwrap();
    let line = mounts_line(dir.path()).unwrap();
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!((fields[0], fields[2]), ("wire-opts", "fuse.wireopts"), "{line}");
    let opts: Vec<&str> = fields[3].split(',').collect();
    for want in ["ro", "nosuid", "nodev", "noexec", "noatime", "default_permissions", "allow_other", "max_read=65536"] {
        assert!(opts.contains(&want), "{want} missing from {line}");
    }
    assert!(opts.contains(&"user_id=0") && opts.contains(&"group_id=0"), "{line}");
    // Read-only: the kernel refuses a create before it reaches the server.
    let err = fs::write(dir.path().join("f"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    server.stop().unwrap();
    assert!(mounts_line(dir.path()).is_none(), "still mounted after stop");
}

#[test]
fn an_unmount_by_someone_else_ends_the_server() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(TestFs::new());
    let server = Server::start(dir.path(), &["subtype=wire-test"], Arc::clone(&fs), Transports::default()).unwrap();
    fs::create_dir(dir.path().join("d")).unwrap();
    // Not lazy: nothing is open inside.
    server.session().unmount(false).unwrap();
    let report = server.wait().unwrap();
    assert_eq!(count(&report.counts, opcode::MKDIR), 1);
    assert_eq!(fs.destroyed(), 1);
}

/// inval_entry, inval_inode and delete each make the kernel ask the server
/// again about what it had cached for an hour.
fn notifications_reach_the_kernel(want_uring: bool) {
    let dir = tempfile::tempdir().unwrap();
    let transports = Transports { uring: want_uring, ..Transports::default() };
    let server = Server::start(dir.path(), &["subtype=wire-test"], Arc::new(TestFs::new()), transports).unwrap();
    if want_uring {
        assert!(matches!(server.transport, Transport::Uring { .. }), "fell back: {:?}", server.transport);
    }
    let n = server.notifier();
    let p = dir.path().join("a");
    fs::write(&p, b"").unwrap();
    let ino = fs::metadata(&p).unwrap().ino();
    let asked = |op| count(&server.report().counts, op);
    let lookups = asked(opcode::LOOKUP);
    fs::metadata(&p).unwrap();
    assert_eq!(asked(opcode::LOOKUP), lookups, "the entry is cached");
    n.inval_entry(ROOT_ID, b"a").unwrap();
    fs::metadata(&p).unwrap();
    assert_eq!(asked(opcode::LOOKUP), lookups + 1, "inval_entry: the next stat looks the name up");
    let getattrs = asked(opcode::GETATTR);
    fs::metadata(&p).unwrap();
    assert_eq!(asked(opcode::GETATTR), getattrs, "the attributes are cached");
    n.inval_inode(ino, -1, 0).unwrap();
    fs::metadata(&p).unwrap();
    assert_eq!(asked(opcode::GETATTR), getattrs + 1, "inval_inode: the next stat asks for the attributes");
    n.delete(ROOT_ID, ino, b"a").unwrap();
    fs::metadata(&p).unwrap();
    assert_eq!(asked(opcode::LOOKUP), lookups + 2, "delete: the name is looked up again");
    // Nothing cached under that name now: the kernel says so, which is no
    // failure.
    n.inval_entry(ROOT_ID, b"never-seen").unwrap();
    server.stop().unwrap();
    // After the end the kernel has nothing cached: no failure, no hang.
    n.inval_entry(ROOT_ID, b"a").unwrap();
}

#[test]
fn notifications_reach_the_kernel_over_dev_fuse() {
    if !can_mount() {
        return;
    }
    notifications_reach_the_kernel(false);
}

#[test]
fn notifications_reach_the_kernel_beside_io_uring() {
    if !can_mount() {
        return;
    }
    let Some(_param) = uring_param(true) else { return };
    notifications_reach_the_kernel(true);
}
