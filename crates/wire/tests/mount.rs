//! Mounts the prototype and exercises both transports through the kernel:
//! /dev/fuse always, io_uring when the fuse module allows it (the test sets
//! `enable_uring` and restores it). Needs root and /dev/fuse; says so and
//! skips otherwise.

#![allow(clippy::unwrap_used)]

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use dualfs_wire::abi::opcode;
use dualfs_wire::{Fs, Server, Transport, Transports};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

fn can_mount() -> bool {
    if !nix::unistd::Uid::effective().is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: mounting the prototype needs root and /dev/fuse");
        return false;
    }
    true
}

/// The tests of this file that set `enable_uring` take turns.
static PARAM_LOCK: Mutex<()> = Mutex::new(());

/// Sets `enable_uring` for the test's length and puts back what was there.
struct UringParam {
    old: String,
    _turn: MutexGuard<'static, ()>,
}

impl UringParam {
    fn set(on: bool) -> Option<Self> {
        let guard = PARAM_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = fs::read_to_string(PARAM).ok()?;
        fs::write(PARAM, if on { "Y" } else { "N" }).ok()?;
        Some(Self { old: old.trim().to_string(), _turn: guard })
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let _ = fs::write(PARAM, &self.old);
    }
}

/// What a user does on the mount, checked against what the tree must show.
fn exercise(mnt: &Path) {
    let root = fs::metadata(mnt).unwrap();
    assert!(root.is_dir());
    assert_eq!(fs::read_dir(mnt).unwrap().count(), 0);
    for i in 0..50 {
        let p = mnt.join(format!("file{i}"));
        drop(OpenOptions::new().write(true).create_new(true).mode(0o640).open(&p).unwrap());
        let m = fs::metadata(&p).unwrap();
        assert!(m.is_file());
        assert_eq!(m.len(), 0);
        assert_eq!(m.mode() & 0o777, 0o640 & !nix::sys::stat::umask(nix::sys::stat::Mode::empty()).bits());
    }
    // A second create of the same name is refused by the server.
    let again = OpenOptions::new().write(true).create_new(true).open(mnt.join("file0"));
    assert_eq!(again.unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    fs::set_permissions(mnt.join("file1"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(mnt.join("file1")).unwrap().mode() & 0o777, 0o600);
    let mut names: Vec<String> =
        fs::read_dir(mnt).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let mut want: Vec<String> = (0..50).map(|i| format!("file{i}")).collect();
    want.sort();
    assert_eq!(names, want);
    for i in (0..50).step_by(2) {
        fs::remove_file(mnt.join(format!("file{i}"))).unwrap();
    }
    assert_eq!(fs::read_dir(mnt).unwrap().count(), 25);
    assert!(fs::metadata(mnt.join("file1")).is_ok());
    assert!(fs::metadata(mnt.join("file0")).is_err());
    assert_eq!(fs::remove_file(mnt.join("missing")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    fs::create_dir(mnt.join("sub")).unwrap();
    drop(OpenOptions::new().write(true).create_new(true).open(mnt.join("sub/inner")).unwrap());
    assert!(fs::metadata(mnt.join("sub")).unwrap().is_dir());
    assert_eq!(fs::read_dir(mnt.join("sub")).unwrap().count(), 1);
    fs::write(mnt.join("file3"), vec![7u8; 300_000]).unwrap();
    assert_eq!(fs::metadata(mnt.join("file3")).unwrap().len(), 300_000);
    std::os::unix::fs::symlink("sub/inner", mnt.join("link")).unwrap();
    assert_eq!(fs::read_link(mnt.join("link")).unwrap(), Path::new("sub/inner"));
    // An unlinked file stays usable through its open descriptor.
    let mut open = OpenOptions::new().write(true).create_new(true).open(mnt.join("doomed")).unwrap();
    fs::remove_file(mnt.join("doomed")).unwrap();
    std::io::Write::write_all(&mut open, b"still here").unwrap();
    open.sync_all().unwrap();
    assert_eq!(open.metadata().unwrap().len(), 10);
    drop(open);
    let st = nix::sys::statvfs::statvfs(mnt).unwrap();
    assert_eq!(st.block_size(), 4096);
    // A forced GETATTR goes to the server even with attributes cached.
    let p = mnt.join("file1");
    for _ in 0..100 {
        rustix::fs::statx(
            rustix::fs::CWD,
            &p,
            rustix::fs::AtFlags::STATX_FORCE_SYNC,
            rustix::fs::StatxFlags::BASIC_STATS,
        )
        .unwrap();
    }
}

fn count(counts: &[(u32, u64)], op: u32) -> u64 {
    counts.iter().find(|c| c.0 == op).map_or(0, |c| c.1)
}

fn run(want_uring: bool) -> Transport {
    let dir = tempfile::tempdir().unwrap();
    let transports = Transports { uring: want_uring, dev_threads: 2, ..Transports::default() };
    let server =
        Server::start(dir.path(), &["fsname=wire-test", "subtype=wire-test"], Arc::new(Fs::new()), transports).unwrap();
    let transport = server.transport.clone();
    exercise(dir.path());
    let report = server.stop().unwrap();
    let (counts, on_ring) = (report.counts, report.ring_requests);
    assert_eq!(report.by_cpu.iter().sum::<u64>(), counts.iter().map(|c| c.1).sum::<u64>());
    let total: u64 = counts.iter().map(|c| c.1).sum();
    match transport {
        // FORGET and INTERRUPT still come through /dev/fuse; the rest must
        // have come on the ring.
        Transport::Uring { .. } => {
            let off_ring = count(&counts, opcode::FORGET)
                + count(&counts, opcode::BATCH_FORGET)
                + count(&counts, opcode::INTERRUPT);
            assert_eq!(on_ring + off_ring, total, "requests served over /dev/fuse despite the ring: {counts:?}");
        }
        Transport::DevFuse { .. } => assert_eq!(on_ring, 0),
    }
    assert_eq!(count(&counts, opcode::CREATE), 52);
    assert_eq!(count(&counts, opcode::MKDIR), 1);
    assert_eq!(count(&counts, opcode::UNLINK), 26);
    assert!(count(&counts, opcode::GETATTR) >= 100);
    assert!(count(&counts, opcode::READDIR) >= 1);
    assert!(count(&counts, opcode::STATFS) >= 1);
    transport
}

#[test]
fn dev_fuse_transport_serves_the_tree() {
    if !can_mount() {
        return;
    }
    assert!(matches!(run(false), Transport::DevFuse { .. }));
}

#[test]
fn io_uring_transport_serves_the_tree_when_the_module_allows_it() {
    if !can_mount() {
        return;
    }
    let Some(_param) = UringParam::set(true) else {
        eprintln!("skipped: io_uring path not tested: cannot set {PARAM} (kernel without CONFIG_FUSE_IO_URING?)");
        return;
    };
    match run(true) {
        Transport::Uring { queues } => assert!(queues >= 1),
        // Another process may have put the parameter back meanwhile.
        Transport::DevFuse { why } if !dualfs_wire::uring_enabled() => {
            eprintln!("skipped: io_uring path not tested: enable_uring was turned off during the test ({why})");
        }
        Transport::DevFuse { why } => panic!("enable_uring is on but the mount fell back to /dev/fuse: {why}"),
    }
}

#[test]
fn asking_for_io_uring_with_the_module_parameter_off_falls_back_to_dev_fuse() {
    if !can_mount() {
        return;
    }
    let Some(_param) = UringParam::set(false) else {
        eprintln!("skipped: cannot set {PARAM} (kernel without CONFIG_FUSE_IO_URING?)");
        return;
    };
    match run(true) {
        Transport::DevFuse { why } => assert!(why.contains("enable_uring"), "{why}"),
        Transport::Uring { .. } => panic!("io_uring with enable_uring off"),
    }
}
