//! Mounts that go through fusermount3: by a user other than root, and with
//! `auto_unmount` (the helper unmounts when the server dies, however); and
//! `allow_root` (the kernel admits everyone, the server only the owner and
//! root). A test runs its user's part, or a server to kill, by starting
//! its own binary again.
//!
//! fusermount3 opens /dev/fuse as the user, so it must be open to every
//! user, as udev makes it on a desktop; a server or container may keep it
//! root's alone. Then each test runs again in a mount namespace of its
//! own, with a /dev/fuse node open to all bound over the machine's, which
//! the machine never sees.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestFs, can_mount};
use dualfs_wire::{Server, Transports};

/// nobody: a user with no rights of its own.
const USER: u32 = 65534;
/// Set in the copy of this binary that runs as [`USER`]: what to do, and where.
const ROLE: &str = "DUALFS_WIRE_TEST_ROLE";
const MNT: &str = "DUALFS_WIRE_TEST_MNT";

/// The /proc/mounts line of `mnt`.
fn mounts_line(mnt: &Path) -> Option<String> {
    let want = mnt.to_str().unwrap();
    fs::read_to_string("/proc/mounts").unwrap().lines().find(|l| l.split(' ').nth(1) == Some(want)).map(String::from)
}

/// A folder everyone may enter, with a mount point owned by [`USER`]
/// (fusermount3 mounts only where the user may write).
fn user_mountpoint() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    nix::unistd::chown(&mnt, Some(USER.into()), Some(USER.into())).unwrap();
    (dir, mnt)
}

/// This test binary again, as [`USER`], running test `name` in `role`.
fn as_user(name: &str, role: &str, mnt: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(MNT, mnt)
        .uid(USER)
        // std drops root's supplementary groups with the uid.
        .gid(USER);
    cmd
}

/// Set in the copy of this binary that runs in a mount namespace of its own.
const NAMESPACE: &str = "DUALFS_WIRE_TEST_NAMESPACE";

/// Whether every user may open /dev/fuse.
fn dev_fuse_open_to_all() -> bool {
    fs::metadata("/dev/fuse").is_ok_and(|m| m.mode() & 0o006 == 0o006)
}

/// Where /dev/fuse is root's alone: runs test `name` again in a mount
/// namespace of its own (`unshare --mount`, private propagation), where a
/// node open to all is bound over /dev/fuse, checks that it passed there,
/// and returns true. Returns false where the test goes on in this process:
/// /dev/fuse was open to all already, or this is the copy in the
/// namespace (which makes the node first).
fn elsewhere_if_dev_fuse_is_roots(name: &str) -> bool {
    if dev_fuse_open_to_all() {
        return false;
    }
    if std::env::var_os(NAMESPACE).is_some() {
        let dir = tempfile::tempdir().unwrap();
        nix::mount::mount(Some("tmpfs"), dir.path(), Some("tmpfs"), nix::mount::MsFlags::empty(), None::<&str>)
            .unwrap();
        let node = dir.path().join("fuse");
        let fuse = fs::metadata("/dev/fuse").unwrap().rdev();
        nix::sys::stat::mknod(&node, nix::sys::stat::SFlag::S_IFCHR, nix::sys::stat::Mode::empty(), fuse).unwrap();
        fs::set_permissions(&node, fs::Permissions::from_mode(0o666)).unwrap();
        let bind = nix::mount::MsFlags::MS_BIND;
        nix::mount::mount(Some(&node), "/dev/fuse", None::<&str>, bind, None::<&str>).unwrap();
        // The namespace ends with this process; the tmpfs with it.
        std::mem::forget(dir);
        assert!(dev_fuse_open_to_all());
        return false;
    }
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(NAMESPACE, "1")
        .output()
        .expect("unshare (util-linux)");
    assert!(
        out.status.success(),
        "in a mount namespace of its own:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// The role this process plays, if it is the user's copy.
fn role() -> Option<(String, PathBuf)> {
    Some((std::env::var(ROLE).ok()?, PathBuf::from(std::env::var_os(MNT)?)))
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_user_mounts_serves_and_unmounts_through_fusermount3() {
    if let Some((role, mnt)) = role() {
        assert_eq!(role, "serve");
        assert!(!nix::unistd::geteuid().is_root());
        let server = Server::start(&mnt, &["subtype=wire-test"], Arc::new(TestFs::new()), Transports::default())
            .expect("a user's mount through fusermount3");
        let line = mounts_line(&mnt).expect("mounted");
        assert!(line.contains(&format!("user_id={USER}")), "{line}");
        fs::write(mnt.join("f"), b"hello").unwrap();
        assert_eq!(fs::metadata(mnt.join("f")).unwrap().len(), 5);
        assert_eq!(fs::metadata(mnt.join("f")).unwrap().uid(), USER);
        // Not lazy: fusermount3 -u, as umount(2) is root's.
        server.session().unmount(false).unwrap();
        server.wait().unwrap();
        assert!(mounts_line(&mnt).is_none(), "still mounted");
        return;
    }
    if !can_mount() {
        return;
    }
    if elsewhere_if_dev_fuse_is_roots("a_user_mounts_serves_and_unmounts_through_fusermount3") {
        return;
    }
    let (_dir, mnt) = user_mountpoint();
    let out = as_user("a_user_mounts_serves_and_unmounts_through_fusermount3", "serve", &mnt).output().unwrap();
    assert!(
        out.status.success(),
        "the user's part failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mounts_line(&mnt).is_none());
}

#[test]
fn a_users_allow_other_is_fusermount3s_to_allow_or_refuse_with_its_reason() {
    if let Some((_, mnt)) = role() {
        // allow_other needs user_allow_other in /etc/fuse.conf (which the
        // test does not change).
        let allowed =
            fs::read_to_string("/etc/fuse.conf").is_ok_and(|c| c.lines().any(|l| l.trim() == "user_allow_other"));
        match Server::start(&mnt, &["allow_other"], Arc::new(TestFs::new()), Transports::default()) {
            Ok(server) => {
                assert!(allowed, "allow_other without user_allow_other");
                server.stop().unwrap();
            }
            Err(e) => {
                let said = e.to_string();
                assert!(!allowed && said.starts_with("fusermount3: ") && said.contains("user_allow_other"), "{said}");
            }
        }
        assert!(mounts_line(&mnt).is_none());
        return;
    }
    if !can_mount() {
        return;
    }
    if elsewhere_if_dev_fuse_is_roots("a_users_allow_other_is_fusermount3s_to_allow_or_refuse_with_its_reason") {
        return;
    }
    let (_dir, mnt) = user_mountpoint();
    let out = as_user("a_users_allow_other_is_fusermount3s_to_allow_or_refuse_with_its_reason", "other", &mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn with_auto_unmount_a_killed_server_leaves_no_mount() {
    if let Some((_, mnt)) = role() {
        // fusermount3 must see the mount to unmount it: allow_root.
        let options = ["subtype=wire-test", "auto_unmount", "allow_root"];
        let _server = Server::start(&mnt, &options, Arc::new(TestFs::new()), Transports::default()).unwrap();
        // Killed here by the test.
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    if !can_mount() {
        return;
    }
    let (_dir, mnt) = user_mountpoint();
    // Root's server, through fusermount3 all the same (auto_unmount).
    let mut server = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "with_auto_unmount_a_killed_server_leaves_no_mount", "--nocapture", "--test-threads=1"])
        .env(ROLE, "killed")
        .env(MNT, &mnt)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the server's mount", || mounts_line(&mnt).is_some());
    let helper = Command::new("pgrep").args(["-x", "-P", &server.id().to_string(), "fusermount3"]).output().unwrap();
    assert!(helper.status.success(), "fusermount3 stays beside the server");
    server.kill().unwrap();
    server.wait().unwrap();
    // SIGKILL: nothing of the server ran; fusermount3 saw its socket close.
    wait_until("fusermount3 to unmount", || mounts_line(&mnt).is_none());
}

#[test]
fn allow_root_serves_the_owner_and_root_and_refuses_everyone_else() {
    if let Some((_, mnt)) = role() {
        let e = fs::metadata(mnt.join("f")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        return;
    }
    if !can_mount() {
        return;
    }
    let (_dir, mnt) = user_mountpoint();
    let server =
        Server::start(&mnt, &["subtype=wire-test", "allow_root"], Arc::new(TestFs::new()), Transports::default())
            .unwrap();
    let line = mounts_line(&mnt).unwrap();
    assert!(line.contains("allow_other"), "the kernel admits everyone: {line}");
    fs::write(mnt.join("f"), b"root's").unwrap();
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(mnt.join("f"), fs::Permissions::from_mode(0o666)).unwrap();
    let out =
        as_user("allow_root_serves_the_owner_and_root_and_refuses_everyone_else", "refused", &mnt).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(mnt.join("f")).unwrap().len(), 6, "root is served");
    server.stop().unwrap();
}
