//! Calls on the volume as a whole, through a real mount, answered as ext4
//! and XFS answer them: the label (FS_IOC_GETFSLABEL, FS_IOC_SETFSLABEL),
//! renames that leave a whiteout (RENAME_WHITEOUT, and overlayfs with
//! DualFS as its upper layer), a shutdown (FS_IOC_SHUTDOWN: every call
//! fails, the unmount works, the next mount recovers), and a remount that
//! asks a volume option the volume cannot change live.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, dualfs, sh, sh_output};

/// Runs a Python script in `dir`, failing the test unless it succeeds;
/// returns what it printed.
fn py(dir: &str, script: &str) -> String {
    sh(&format!("cd '{dir}' && python3 - <<'PYEOF'\n{script}\nPYEOF"))
}

const IOCTLS: &str = r#"
import ctypes, fcntl, os, struct, errno
GETFSLABEL, SETFSLABEL, SHUTDOWN = 0x81009431, 0x41009432, 0x8004587d
def get_label(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return fcntl.ioctl(fd, GETFSLABEL, bytes(256)).rstrip(b'\0').decode()
    finally:
        os.close(fd)
def set_label(path, label):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, SETFSLABEL, label.encode().ljust(256, b'\0'))
    finally:
        os.close(fd)
def err(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
"#;

#[test]
fn the_label_is_read_and_set_through_the_mount() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    // Others reach the mount (the kernel checks their permissions).
    v.mount_with("allow_other");
    let out = py(
        v.m(),
        &format!(
            r#"{IOCTLS}
print('before', repr(get_label('.')))
set_label('.', 'backup-2')
print('after', repr(get_label('.')))
print('too long', err(lambda: set_label('.', 'x' * 65)))
pid = os.fork()
if pid == 0:
    os.setuid(65534)
    print('as nobody', err(lambda: set_label('.', 'mine')), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"#
        ),
    );
    assert_eq!(out, "before ''\nafter 'backup-2'\ntoo long EINVAL\nas nobody EPERM\n");
    // Written to both superblocks: the next mount and the tools see it.
    v.remount();
    let out = py(v.m(), &format!("{IOCTLS}\nprint(get_label('.'))"));
    assert_eq!(out.trim(), "backup-2");
    v.umount();
    let tune = dualfs(&["tune", v.meta.to_str().unwrap(), v.data.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&tune.stdout).contains("backup-2"), "{}", String::from_utf8_lossy(&tune.stdout));
}

const RENAME2: &str = r#"
import ctypes, os, stat
libc = ctypes.CDLL(None, use_errno=True)
def renameat2(a, b, flags):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
WHITEOUT, EXCHANGE = 4, 2
def what(p):
    try:
        s = os.lstat(p)
    except FileNotFoundError:
        return 'none'
    if stat.S_ISCHR(s.st_mode):
        return 'whiteout' if s.st_rdev == 0 and stat.S_IMODE(s.st_mode) == 0 else 'chr'
    return 'dir' if stat.S_ISDIR(s.st_mode) else open(p).read() if stat.S_ISREG(s.st_mode) else 'other'
"#;

#[test]
fn a_rename_with_whiteout_leaves_one_under_the_old_name() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let out = py(
        v.m(),
        &format!(
            r#"{RENAME2}
open('a', 'w').write('A')
open('b', 'w').write('B')
os.mkdir('d')
renameat2('a', 'moved', WHITEOUT)
print('a', what('a'), 'moved', what('moved'))
renameat2('moved', 'b', WHITEOUT)
print('moved', what('moved'), 'b', what('b'))
renameat2('d', 'd2', WHITEOUT)
print('d', what('d'), 'd2', what('d2'))
try:
    renameat2('b', 'd2', WHITEOUT | EXCHANGE)
    print('exchange taken')
except OSError as e:
    print('exchange', e.errno == 22)
"#
        ),
    );
    assert_eq!(out, "a whiteout moved A\nmoved whiteout b A\nd whiteout d2 dir\nexchange True\n");
    v.remount();
    let out = py(v.m(), &format!("{RENAME2}\nprint(what('a'), what('moved'), what('b'), what('d'))"));
    assert_eq!(out.trim(), "whiteout whiteout A whiteout");
    v.umount();
}

/// overlayfs takes an upper layer only if it answers RENAME_WHITEOUT and
/// O_TMPFILE (`ovl_make_workdir`); removing and renaming a lower file
/// through the overlay then leaves whiteouts on DualFS.
#[test]
fn overlayfs_takes_dualfs_as_its_upper_layer() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    if !std::fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("overlay") {
        common::skip("the kernel has no overlayfs");
        return;
    }
    v.mount();
    let lower = tempfile::tempdir().unwrap();
    let merged = tempfile::tempdir().unwrap();
    let (l, m) = (lower.path().to_str().unwrap(), merged.path().to_str().unwrap());
    sh(&format!(
        "echo lower > {l}/gone; echo kept > {l}/renamed; mkdir {} {}",
        v.path("up").display(),
        v.path("work").display()
    ));
    let mounted = sh_output(&format!(
        "mount -t overlay overlay -o lowerdir={l},upperdir={}/up,workdir={}/work {m}",
        v.m(),
        v.m()
    ));
    assert!(mounted.status.success(), "overlayfs refused DualFS: {}", String::from_utf8_lossy(&mounted.stderr));
    let run = sh_output(&format!(
        "set -e; rm {m}/gone; mv {m}/renamed {m}/new; echo upper > {m}/made; ls {m} | tr '\\n' ' '"
    ));
    let _ = sh_output(&format!("umount {m}"));
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "made new");
    let dmesg = sh_output("dmesg 2>/dev/null | grep -i overlayfs | tail -3");
    let out = py(
        &format!("{}/up", v.m()),
        &format!("{RENAME2}\nprint(what('gone'), what('renamed'), what('new').strip(), what('made').strip())"),
    );
    assert_eq!(out.trim(), "whiteout whiteout kept upper", "{}", String::from_utf8_lossy(&dmesg.stdout));
    v.umount();
}

#[test]
fn a_shutdown_fails_every_call_and_the_next_mount_recovers() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount_with("allow_other");
    let out = py(
        v.m(),
        &format!(
            r#"{IOCTLS}
fd = os.open('synced', os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b'durable')
os.fsync(fd)
os.close(fd)
open('handed', 'w').write('closed before the shutdown')
os.mkdir('dir')
pid = os.fork()
if pid == 0:
    os.setuid(65534)
    fd = os.open('.', os.O_RDONLY)
    print('as nobody', err(lambda: fcntl.ioctl(fd, SHUTDOWN, bytes(4))), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
fd = os.open('.', os.O_RDONLY)
print('shutdown', err(lambda: fcntl.ioctl(fd, SHUTDOWN, struct.pack('I', 2))))
os.close(fd)
print('create', err(lambda: open('new', 'w')))
print('list', err(lambda: os.listdir('dir')))
print('statfs', err(lambda: os.statvfs('.')))
print('unlink', err(lambda: os.unlink('synced')))
print('again', err(lambda: fcntl.ioctl(os.open('.', os.O_RDONLY), SHUTDOWN, bytes(4))))
"#
        ),
    );
    assert_eq!(
        out,
        "as nobody EPERM\nshutdown ok\ncreate EIO\nlist EIO\nstatfs EIO\nunlink EIO\nagain EIO\n",
        "{}",
        v.log()
    );
    // The unmount works; the close writes nothing; the next mount recovers
    // what the log holds: everything handed to the volume before.
    v.umount();
    v.mount();
    let out = py(
        v.m(),
        "import os\nprint(open('synced').read(), open('handed').read(), os.path.isdir('dir'), os.path.exists('new'))",
    );
    assert_eq!(out.trim(), "durable closed before the shutdown True False");
    assert!(v.log().contains("shut down"), "the log says it was shut down");
    v.umount();
}

#[test]
fn a_remount_refuses_a_volume_option_it_cannot_change_naming_it() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount_with("commit=7");
    let (meta, data) = (v.meta.to_str().unwrap().to_string(), v.data.to_str().unwrap().to_string());
    let remount = |opts: &str| dualfs(&["mount", "-o", &format!("remount,{opts}"), &meta, &data, v.m()]);
    let out = remount("rw,nosuid,relatime,user_id=0,group_id=0,default_permissions,discard");
    assert!(!out.status.success(), "a remount asking discard of a volume served without it succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("option discard cannot be changed by a remount"), "{err}");
    let out = remount("commit=30");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("option commit=30"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What is served already is no change: fstab's options come again.
    let out = remount("commit=7,nodiscard,ro");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = remount("rw");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(v.path("f"), b"x").unwrap();
    v.umount();
}

/// SEEK_DATA and SEEK_HOLE from before the start: ENXIO, as ext4 and XFS
/// answer (no data or hole lies there), not EINVAL.
#[test]
fn seek_data_and_hole_from_a_negative_offset_answer_enxio() {
    let Some(mut v) = TestVolume::create("64M") else {
        return;
    };
    v.mount();
    let out = py(
        v.m(),
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.lseek.restype = ctypes.c_long
libc.lseek.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
fd = os.open('f', os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'x' * 8192)
for how in (os.SEEK_DATA, os.SEEK_HOLE):
    r = libc.lseek(fd, -1, how)
    print(r, ctypes.get_errno() == 6)
"#,
    );
    assert_eq!(out, "-1 True\n-1 True\n");
    v.umount();
}
