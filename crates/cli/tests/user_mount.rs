//! `dualfs mount` by a user other than root: through fusermount3 (see
//! crates/wire, `fusermount.rs`), in the background, written to, unmounted
//! with `dualfs umount` (fusermount3 -u) and mounted again with what was
//! written. fusermount3 opens /dev/fuse as the user; where the machine
//! keeps it root's alone (no udev), the user's part runs in a mount
//! namespace of its own with a node open to all bound over it.

#![allow(clippy::unwrap_used)]
mod common;

use common::{DUALFS, TestVolume, sh};

/// nobody.
const USER: u32 = 65534;

#[test]
fn a_user_mounts_writes_unmounts_and_mounts_again_through_fusermount3() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    // The volume's root belongs to root: hand it and the images over.
    v.mount();
    sh(&format!("chown {USER}:{USER} '{m}' && chmod 755 '{m}'", m = v.m()));
    v.umount();
    let (meta, data, m) = (v.meta.display().to_string(), v.data.display().to_string(), v.m().to_string());
    sh(&format!("chown {USER}:{USER} '{meta}' '{data}' '{m}'"));
    // The user's own folder, for the mount's log.
    let home = v.dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    nix::unistd::chown(&home, Some(USER.into()), Some(USER.into())).unwrap();
    let log = home.join("dualfs.log");
    let opts = format!("log={},{}", log.display(), common::extra_mount_options());
    let user = v.dir.path().join("user.sh");
    std::fs::write(
        &user,
        format!(
            r#"set -ex
{DUALFS} mount -o {opts} {meta} {data} {m}
grep -q " {m} fuse.dualfs .*user_id={USER}," /proc/mounts
echo written by a user > {m}/f
{DUALFS} umount {m}
! grep -q " {m} " /proc/mounts
{DUALFS} mount -o {opts} {meta} {data} {m}
test "$(cat {m}/f)" = "written by a user"
test "$(stat -c %u {m}/f)" = {USER}
{DUALFS} umount {m}
"#
        ),
    )
    .unwrap();
    let as_user = format!("setpriv --reuid={USER} --regid={USER} --clear-groups sh '{}'", user.display());
    let open_to_all = std::fs::metadata("/dev/fuse").is_ok_and(|md| {
        use std::os::unix::fs::PermissionsExt;
        md.permissions().mode() & 0o006 == 0o006
    });
    // Over io_uring the module must allow it while the user mounts.
    let param = if common::test_transport() == "uring" { common::UringParameter::set("Y") } else { None };
    if open_to_all {
        sh(&as_user);
    } else {
        let node = v.dir.path().join("dev");
        let root = v.dir.path().join("namespace.sh");
        std::fs::write(
            &root,
            format!(
                r#"set -e
mkdir {n} && mount -t tmpfs tmpfs {n}
set -- $(stat -c '%t %T' /dev/fuse)
mknod -m 666 {n}/fuse c $((0x$1)) $((0x$2)) && mount --bind {n}/fuse /dev/fuse
{as_user}
"#,
                n = node.display()
            ),
        )
        .unwrap();
        sh(&format!("unshare --mount --propagation private -- sh '{}'", root.display()));
    }
    drop(param);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("serving over"), "{log}");
    // Root finds the volume closed cleanly and consistent.
    v.fsck();
}
