//! Mounts the no-work tree and exercises both transports through the
//! kernel: /dev/fuse, and io_uring (the test sets `enable_uring` and puts
//! it back). Needs root, /dev/fuse and a kernel with FUSE over io_uring
//! (see `common::skip`).

#![allow(clippy::unwrap_used)]

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::Duration;

use dualfs_wire::abi::opcode;
use dualfs_wire::{Handler, Server, Transport, Transports};

mod common;

use common::{TestFs, can_mount, count, uring_param};

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
    assert_eq!(fs::remove_dir(mnt.join("sub")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    fs::create_dir(mnt.join("gone")).unwrap();
    // Deleting entries while listing them skips none (bonnie++ does this).
    for i in 0..3000 {
        fs::write(mnt.join(format!("gone/f{i}")), b"").unwrap();
    }
    for e in fs::read_dir(mnt.join("gone")).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    fs::remove_dir(mnt.join("gone")).unwrap();
    assert!(fs::metadata(mnt.join("gone")).is_err());
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

fn run(want_uring: bool) -> Transport {
    run_with(want_uring, Arc::new(TestFs::new()), TestFs::destroyed)
}

fn run_with<H: Handler>(want_uring: bool, fs: Arc<H>, destroyed: impl Fn(&H) -> u32) -> Transport {
    let dir = tempfile::tempdir().unwrap();
    let transports = Transports { uring: want_uring, dev_threads: 2, ..Transports::default() };
    let options = ["fsname=wire-test", "subtype=wire-test"];
    let server = Server::start(dir.path(), &options, Arc::clone(&fs), transports).unwrap();
    let transport = server.transport.clone();
    exercise(dir.path());
    let report = server.stop().unwrap();
    assert_eq!(destroyed(&fs), 1, "the handler hears of the end once");
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
    assert_eq!(count(&counts, opcode::CREATE), 3052);
    assert_eq!(count(&counts, opcode::MKDIR), 2);
    assert_eq!(count(&counts, opcode::RMDIR), 2);
    assert_eq!(count(&counts, opcode::UNLINK), 3026);
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
    let Some(_param) = uring_param(true) else { return };
    match run(true) {
        Transport::Uring { queues } => assert!(queues >= 1),
        Transport::DevFuse { why } => panic!("enable_uring is on but the mount fell back to /dev/fuse: {why}"),
    }
}

#[test]
fn asking_for_io_uring_with_the_module_parameter_off_falls_back_to_dev_fuse() {
    if !can_mount() {
        return;
    }
    let Some(_param) = uring_param(false) else { return };
    match run(true) {
        Transport::DevFuse { why } => assert!(why.contains("enable_uring"), "{why}"),
        Transport::Uring { .. } => panic!("io_uring with enable_uring off"),
    }
}

/// An FSYNC held in the handler, and a GETATTR from the same CPU (on
/// io_uring: the same queue) that must be answered meanwhile.
fn blocked_fsync_stalls_nothing(want_uring: bool) {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(TestFs::new());
    let transports = Transports { uring: want_uring, dev_threads: 2, ..Transports::default() };
    let server = Server::start(dir.path(), &["subtype=wire-test"], Arc::clone(&fs), transports).unwrap();
    if want_uring {
        assert!(matches!(server.transport, Transport::Uring { .. }), "fell back: {:?}", server.transport);
    }
    let file = dir.path().join("f");
    fs::write(&file, b"data").unwrap();
    fs.hold_fsyncs();
    let syncer = std::thread::spawn(move || {
        common::pin_to_cpu0();
        fs::File::open(&file).unwrap().sync_all().unwrap();
    });
    fs.wait_for_held_fsyncs(1);
    let before = server.report();
    let (tx, rx) = channel();
    let root = dir.path().to_path_buf();
    let stat = std::thread::spawn(move || {
        common::pin_to_cpu0();
        common::forced_stat(&root);
        let _ = tx.send(());
    });
    // Not a measurement: a bound on waiting for a reply that, were the
    // queue stalled, would never come (the FSYNC is held until released).
    let answered = rx.recv_timeout(Duration::from_secs(60)).is_ok();
    fs.release_fsyncs();
    syncer.join().unwrap();
    stat.join().unwrap();
    assert!(answered, "a GETATTR waited behind an FSYNC held in the handler");
    let after = server.stop().unwrap();
    assert!(count(&after.counts, opcode::GETATTR) > count(&before.counts, opcode::GETATTR));
    assert_eq!(count(&after.counts, opcode::FSYNC), 1);
    if want_uring {
        assert!(after.ring_requests > before.ring_requests, "the GETATTR came on the ring");
    }
}

#[test]
fn a_blocked_request_does_not_stall_its_io_uring_queue() {
    if !can_mount() {
        return;
    }
    let Some(_param) = uring_param(true) else { return };
    blocked_fsync_stalls_nothing(true);
}

#[test]
fn a_blocked_request_does_not_stall_dev_fuse_with_two_readers() {
    if !can_mount() {
        return;
    }
    blocked_fsync_stalls_nothing(false);
}
