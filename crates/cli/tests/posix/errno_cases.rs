//! The errno of every failure case of every operation, as root and as
//! unprivileged users. Each case has a directory of its own, set up by
//! root; its operation runs as the case's user and must end as expected.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use nix::errno::Errno::{self, *};
use nix::fcntl::{AT_FDCWD, FallocateFlags, OFlag, RenameFlags, fallocate, open, renameat2};
use nix::sys::stat::{Mode, SFlag, UtimensatFlags, mknod, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{AccessFlags, Gid, Uid, Whence, chown, ftruncate, lseek, mkdir, read, truncate, unlink, write};

use crate::sys;

/// What an operation returns.
pub type Res = nix::Result<()>;

/// The unprivileged user most cases run as (uid = gid).
pub const USER: u32 = 1000;
/// A second unprivileged user (uid = gid).
pub const OTHER: u32 = 1001;

/// Who runs a case's operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Who {
    Root,
    User,
}

/// Where ext4 (or another host file system) answers differently, knowingly.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Host {
    /// The same answer.
    Same,
    /// Another answer, that POSIX allows too.
    Differs(Result<(), Errno>),
}

/// One failure case (or the success next to it).
pub struct Case {
    pub name: &'static str,
    pub who: Who,
    pub setup: fn(&Path),
    pub op: fn(&Path) -> Res,
    pub expect: Result<(), Errno>,
    pub host: Host,
}

fn none(_: &Path) {}

fn long() -> String {
    "n".repeat(256)
}

fn m(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits)
}

fn file(d: &Path, name: &str, mode: u32) {
    let p = d.join(name);
    fs::write(&p, b"some data").expect("setup: write");
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("setup: chmod");
}

fn dir(d: &Path, name: &str, mode: u32) {
    let p = d.join(name);
    fs::create_dir(&p).expect("setup: mkdir");
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("setup: chmod");
}

fn own(p: &Path, uid: u32) {
    chown(p, Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid))).expect("setup: chown");
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("setup: chmod");
}

/// `rmdir(2)`, which nix does not wrap.
fn rmdir(p: &Path) -> Res {
    io(fs::remove_dir(p))
}

fn io<T>(r: std::io::Result<T>) -> Res {
    r.map(|_| ()).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
}

fn op_open(p: &Path, flags: OFlag) -> Res {
    open(p, flags, m(0o644)).map(drop)
}

fn op_rename(d: &Path, from: &str, to: &str, flags: RenameFlags) -> Res {
    renameat2(AT_FDCWD, &d.join(from), AT_FDCWD, &d.join(to), flags)
}

fn op_link(d: &Path, from: &str, to: &str) -> Res {
    io(fs::hard_link(d.join(from), d.join(to)))
}

fn op_fallocate(p: &Path, flags: OFlag, mode: FallocateFlags, off: i64, len: i64) -> Res {
    let fd = open(p, flags, m(0))?;
    fallocate(&fd, mode, off, len)
}

fn op_lseek(p: &Path, off: i64, whence: Whence) -> Res {
    let fd = open(p, OFlag::O_RDONLY, m(0))?;
    lseek(&fd, off, whence).map(drop)
}

/// A file of 4 KiB of data followed by a hole to 1 MiB.
fn data_then_hole(d: &Path) {
    let p = d.join("f");
    fs::write(&p, vec![7u8; 4096]).expect("setup: write");
    fs::File::options().write(true).open(&p).and_then(|f| f.set_len(1 << 20)).expect("setup: extend");
}

/// A directory where everyone may create, but only owners remove (1777).
fn sticky(d: &Path) {
    dir(d, "t", 0o1777);
}

macro_rules! case {
    ($name:literal, $who:ident, $setup:expr, $op:expr, $expect:expr) => {
        case!($name, $who, $setup, $op, $expect, Host::Same)
    };
    ($name:literal, $who:ident, $setup:expr, $op:expr, $expect:expr, $host:expr) => {
        Case { name: $name, who: Who::$who, setup: $setup, op: $op, expect: $expect, host: $host }
    };
}

/// Every case, in the order reported.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(open_cases());
    v.extend(dir_cases());
    v.extend(unlink_cases());
    v.extend(rename_cases());
    v.extend(link_cases());
    v.extend(data_cases());
    v.extend(xattr_cases());
    v.extend(owner_cases());
    v
}

fn open_cases() -> Vec<Case> {
    vec![
        case!("open: missing file", Root, none, |d| op_open(&d.join("x"), OFlag::O_RDONLY), Err(ENOENT)),
        case!(
            "open: O_CREAT in a missing directory",
            Root,
            none,
            |d| op_open(&d.join("no/x"), OFlag::O_CREAT | OFlag::O_WRONLY),
            Err(ENOENT)
        ),
        case!(
            "open: O_CREAT|O_EXCL of an existing file",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_open(&d.join("f"), OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY),
            Err(EEXIST)
        ),
        case!(
            "open: O_CREAT|O_EXCL of a dangling symlink",
            Root,
            |d| symlink("nowhere", d.join("l")).expect("setup"),
            |d| op_open(&d.join("l"), OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY),
            Err(EEXIST)
        ),
        case!(
            "open: a path through a file",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_open(&d.join("f/x"), OFlag::O_RDONLY),
            Err(ENOTDIR)
        ),
        case!(
            "open: O_DIRECTORY of a file",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_open(&d.join("f"), OFlag::O_RDONLY | OFlag::O_DIRECTORY),
            Err(ENOTDIR)
        ),
        case!(
            "open: a directory for writing",
            Root,
            |d| dir(d, "sub", 0o755),
            |d| op_open(&d.join("sub"), OFlag::O_WRONLY),
            Err(EISDIR)
        ),
        case!(
            "open: a directory read-write",
            Root,
            |d| dir(d, "sub", 0o755),
            |d| op_open(&d.join("sub"), OFlag::O_RDWR),
            Err(EISDIR)
        ),
        case!(
            "open: O_CREAT of a directory",
            Root,
            |d| dir(d, "sub", 0o755),
            |d| op_open(&d.join("sub"), OFlag::O_CREAT | OFlag::O_WRONLY),
            Err(EISDIR)
        ),
        case!(
            "open: O_NOFOLLOW of a symlink",
            Root,
            |d| {
                file(d, "f", 0o644);
                symlink("f", d.join("l")).expect("setup");
            },
            |d| op_open(&d.join("l"), OFlag::O_RDONLY | OFlag::O_NOFOLLOW),
            Err(ELOOP)
        ),
        case!(
            "open: a symlink loop",
            Root,
            |d| {
                symlink("b", d.join("a")).expect("setup");
                symlink("a", d.join("b")).expect("setup");
            },
            |d| op_open(&d.join("a"), OFlag::O_RDONLY),
            Err(ELOOP)
        ),
        case!(
            "open: O_CREAT of a 256-byte name",
            Root,
            none,
            |d| op_open(&d.join(long()), OFlag::O_CREAT | OFlag::O_WRONLY),
            Err(ENAMETOOLONG)
        ),
        case!("open: a 256-byte name", Root, none, |d| op_open(&d.join(long()), OFlag::O_RDONLY), Err(ENAMETOOLONG)),
        case!(
            "open: O_CREAT of a 255-byte name",
            Root,
            none,
            |d| op_open(&d.join("n".repeat(255)), OFlag::O_CREAT | OFlag::O_WRONLY),
            Ok(())
        ),
        case!(
            "open: a file the user may not read",
            User,
            |d| file(d, "f", 0o600),
            |d| op_open(&d.join("f"), OFlag::O_RDONLY),
            Err(EACCES)
        ),
        case!(
            "open: a file the user may not write",
            User,
            |d| file(d, "f", 0o644),
            |d| op_open(&d.join("f"), OFlag::O_WRONLY),
            Err(EACCES)
        ),
        case!(
            "open: O_TRUNC of a file the user may not write",
            User,
            |d| file(d, "f", 0o644),
            |d| op_open(&d.join("f"), OFlag::O_RDONLY | OFlag::O_TRUNC),
            Err(EACCES)
        ),
        case!(
            "open: O_CREAT in a directory the user may not write",
            User,
            none,
            |d| op_open(&d.join("new"), OFlag::O_CREAT | OFlag::O_WRONLY),
            Err(EACCES)
        ),
        case!(
            "open: through a directory the user may not search",
            User,
            |d| {
                dir(d, "sub", 0o700);
                file(&d.join("sub"), "f", 0o644);
            },
            |d| op_open(&d.join("sub/f"), OFlag::O_RDONLY),
            Err(EACCES)
        ),
        case!(
            "open: a file the user may read only by its group",
            User,
            |d| {
                file(d, "f", 0o640);
                chown(&d.join("f"), None, Some(Gid::from_raw(USER))).expect("setup");
            },
            |d| op_open(&d.join("f"), OFlag::O_RDONLY),
            Ok(())
        ),
        case!(
            "access: W_OK of a file the user may not write",
            User,
            |d| file(d, "f", 0o644),
            |d| nix::unistd::access(&d.join("f"), AccessFlags::W_OK),
            Err(EACCES)
        ),
        case!("stat: a missing file", Root, none, |d| nix::sys::stat::stat(&d.join("x")).map(drop), Err(ENOENT)),
        case!(
            "stat: a 256-byte name",
            Root,
            none,
            |d| nix::sys::stat::stat(&d.join(long())).map(drop),
            Err(ENAMETOOLONG)
        ),
        case!(
            "stat: a path through a file",
            Root,
            |d| file(d, "f", 0o644),
            |d| nix::sys::stat::stat(&d.join("f/x")).map(drop),
            Err(ENOTDIR)
        ),
    ]
}

fn dir_cases() -> Vec<Case> {
    vec![
        case!(
            "mkdir: an existing directory",
            Root,
            |d| dir(d, "sub", 0o755),
            |d| mkdir(&d.join("sub"), m(0o755)),
            Err(EEXIST)
        ),
        case!("mkdir: over a file", Root, |d| file(d, "f", 0o644), |d| mkdir(&d.join("f"), m(0o755)), Err(EEXIST)),
        case!(
            "mkdir: over a dangling symlink",
            Root,
            |d| symlink("nowhere", d.join("l")).expect("setup"),
            |d| mkdir(&d.join("l"), m(0o755)),
            Err(EEXIST)
        ),
        case!("mkdir: in a missing directory", Root, none, |d| mkdir(&d.join("no/sub"), m(0o755)), Err(ENOENT)),
        case!(
            "mkdir: through a file",
            Root,
            |d| file(d, "f", 0o644),
            |d| mkdir(&d.join("f/sub"), m(0o755)),
            Err(ENOTDIR)
        ),
        case!("mkdir: a 256-byte name", Root, none, |d| mkdir(&d.join(long()), m(0o755)), Err(ENAMETOOLONG)),
        case!(
            "mkdir: in a directory the user may not write",
            User,
            none,
            |d| mkdir(&d.join("sub"), m(0o755)),
            Err(EACCES)
        ),
        case!("rmdir: a missing directory", Root, none, |d| rmdir(&d.join("x")), Err(ENOENT)),
        case!(
            "rmdir: a directory that is not empty",
            Root,
            |d| {
                dir(d, "sub", 0o755);
                file(&d.join("sub"), "f", 0o644);
            },
            |d| rmdir(&d.join("sub")),
            Err(ENOTEMPTY)
        ),
        case!("rmdir: a file", Root, |d| file(d, "f", 0o644), |d| rmdir(&d.join("f")), Err(ENOTDIR)),
        case!(
            "rmdir: a symlink to a directory",
            Root,
            |d| {
                dir(d, "sub", 0o755);
                symlink("sub", d.join("l")).expect("setup");
            },
            |d| rmdir(&d.join("l")),
            Err(ENOTDIR)
        ),
        case!("rmdir: `.`", Root, |d| dir(d, "sub", 0o755), |d| rmdir(&d.join("sub/.")), Err(EINVAL)),
        case!("rmdir: `..`", Root, |d| dir(d, "sub", 0o755), |d| rmdir(&d.join("sub/..")), Err(ENOTEMPTY)),
        case!("rmdir: a 256-byte name", Root, none, |d| rmdir(&d.join(long())), Err(ENAMETOOLONG)),
        case!(
            "rmdir: in a directory the user may not write",
            User,
            |d| dir(d, "sub", 0o777),
            |d| rmdir(&d.join("sub")),
            Err(EACCES)
        ),
        case!(
            "rmdir: another user's directory in a sticky directory",
            User,
            |d| {
                sticky(d);
                dir(&d.join("t"), "sub", 0o777);
                own(&d.join("t/sub"), OTHER);
            },
            |d| rmdir(&d.join("t/sub")),
            Err(EPERM)
        ),
        case!(
            "mknod: over an existing file",
            Root,
            |d| file(d, "f", 0o644),
            |d| mknod(&d.join("f"), SFlag::S_IFIFO, m(0o644), 0),
            Err(EEXIST)
        ),
        case!(
            "mknod: a 256-byte name",
            Root,
            none,
            |d| mknod(&d.join(long()), SFlag::S_IFIFO, m(0o644), 0),
            Err(ENAMETOOLONG)
        ),
        case!(
            "mknod: a character device as a user",
            User,
            |d| own(d, USER),
            |d| mknod(&d.join("c"), SFlag::S_IFCHR, m(0o644), nix::sys::stat::makedev(1, 3)),
            Err(EPERM)
        ),
    ]
}

fn unlink_cases() -> Vec<Case> {
    vec![
        case!("unlink: a missing file", Root, none, |d| unlink(&d.join("x")), Err(ENOENT)),
        case!("unlink: a directory", Root, |d| dir(d, "sub", 0o755), |d| unlink(&d.join("sub")), Err(EISDIR)),
        case!("unlink: through a file", Root, |d| file(d, "f", 0o644), |d| unlink(&d.join("f/x")), Err(ENOTDIR)),
        case!("unlink: a 256-byte name", Root, none, |d| unlink(&d.join(long())), Err(ENAMETOOLONG)),
        case!(
            "unlink: in a directory the user may not write",
            User,
            |d| {
                file(d, "f", 0o666);
                own(&d.join("f"), USER);
            },
            |d| unlink(&d.join("f")),
            Err(EACCES)
        ),
        case!(
            "unlink: another user's file in a sticky directory",
            User,
            |d| {
                sticky(d);
                file(&d.join("t"), "f", 0o666);
                own(&d.join("t/f"), OTHER);
            },
            |d| unlink(&d.join("t/f")),
            Err(EPERM)
        ),
        case!(
            "unlink: the user's own file in a sticky directory",
            User,
            |d| {
                sticky(d);
                file(&d.join("t"), "f", 0o644);
                own(&d.join("t/f"), USER);
            },
            |d| unlink(&d.join("t/f")),
            Ok(())
        ),
        case!(
            "unlink: another user's file in the user's sticky directory",
            User,
            |d| {
                sticky(d);
                own(&d.join("t"), USER);
                file(&d.join("t"), "f", 0o644);
                own(&d.join("t/f"), OTHER);
            },
            |d| unlink(&d.join("t/f")),
            Ok(())
        ),
    ]
}

fn rename_cases() -> Vec<Case> {
    vec![
        case!("rename: a missing source", Root, none, |d| op_rename(d, "x", "y", RenameFlags::empty()), Err(ENOENT)),
        case!(
            "rename: a directory over a non-empty one",
            Root,
            |d| {
                dir(d, "a", 0o755);
                dir(d, "b", 0o755);
                file(&d.join("b"), "f", 0o644);
            },
            |d| op_rename(d, "a", "b", RenameFlags::empty()),
            Err(ENOTEMPTY)
        ),
        case!(
            "rename: a directory over a file",
            Root,
            |d| {
                dir(d, "a", 0o755);
                file(d, "f", 0o644);
            },
            |d| op_rename(d, "a", "f", RenameFlags::empty()),
            Err(ENOTDIR)
        ),
        case!(
            "rename: a file over a directory",
            Root,
            |d| {
                dir(d, "a", 0o755);
                file(d, "f", 0o644);
            },
            |d| op_rename(d, "f", "a", RenameFlags::empty()),
            Err(EISDIR)
        ),
        case!(
            "rename: a directory into itself",
            Root,
            |d| dir(d, "a", 0o755),
            |d| op_rename(d, "a", "a/b", RenameFlags::empty()),
            Err(EINVAL)
        ),
        case!(
            "rename: a directory below itself",
            Root,
            |d| {
                dir(d, "a", 0o755);
                dir(&d.join("a"), "b", 0o755);
            },
            |d| op_rename(d, "a", "a/b/c", RenameFlags::empty()),
            Err(EINVAL)
        ),
        case!(
            "rename: a name to itself",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_rename(d, "f", "f", RenameFlags::empty()),
            Ok(())
        ),
        case!(
            "rename: `.`",
            Root,
            |d| dir(d, "a", 0o755),
            |d| op_rename(d, "a/.", "b", RenameFlags::empty()),
            Err(EBUSY)
        ),
        case!(
            "rename: NOREPLACE over an existing name",
            Root,
            |d| {
                file(d, "f", 0o644);
                file(d, "g", 0o644);
            },
            |d| op_rename(d, "f", "g", RenameFlags::RENAME_NOREPLACE),
            Err(EEXIST)
        ),
        case!(
            "rename: EXCHANGE with a missing name",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_rename(d, "f", "g", RenameFlags::RENAME_EXCHANGE),
            Err(ENOENT)
        ),
        case!(
            "rename: EXCHANGE and NOREPLACE together",
            Root,
            |d| {
                file(d, "f", 0o644);
                file(d, "g", 0o644);
            },
            |d| op_rename(d, "f", "g", RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_NOREPLACE),
            Err(EINVAL)
        ),
        case!(
            "rename: WHITEOUT leaves a whiteout",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_rename(d, "f", "g", RenameFlags::RENAME_WHITEOUT),
            Ok(())
        ),
        case!(
            "rename: to a 256-byte name",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_rename(d, "f", &long(), RenameFlags::empty()),
            Err(ENAMETOOLONG)
        ),
        case!(
            "rename: into a missing directory",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_rename(d, "f", "no/f", RenameFlags::empty()),
            Err(ENOENT)
        ),
        case!(
            "rename: to a path through a file",
            Root,
            |d| {
                file(d, "f", 0o644);
                file(d, "g", 0o644);
            },
            |d| op_rename(d, "f", "g/f", RenameFlags::empty()),
            Err(ENOTDIR)
        ),
        case!(
            "rename: in a directory the user may not write",
            User,
            |d| file(d, "f", 0o666),
            |d| op_rename(d, "f", "g", RenameFlags::empty()),
            Err(EACCES)
        ),
        case!(
            "rename: another user's file in a sticky directory",
            User,
            |d| {
                sticky(d);
                file(&d.join("t"), "f", 0o666);
                own(&d.join("t/f"), OTHER);
            },
            |d| op_rename(d, "t/f", "t/g", RenameFlags::empty()),
            Err(EPERM)
        ),
        case!(
            "rename: over another user's file in a sticky directory",
            User,
            |d| {
                sticky(d);
                file(&d.join("t"), "mine", 0o644);
                own(&d.join("t/mine"), USER);
                file(&d.join("t"), "theirs", 0o666);
                own(&d.join("t/theirs"), OTHER);
            },
            |d| op_rename(d, "t/mine", "t/theirs", RenameFlags::empty()),
            Err(EPERM)
        ),
        case!(
            "rename: a directory the user may not write to another parent",
            User,
            |d| {
                own(d, USER);
                dir(d, "a", 0o755);
                dir(d, "b", 0o755);
                own(&d.join("b"), USER);
            },
            // Its `..` must change, which needs write permission on it.
            |d| op_rename(d, "a", "b/a", RenameFlags::empty()),
            Err(EACCES)
        ),
    ]
}

fn link_cases() -> Vec<Case> {
    vec![
        case!("link: a missing source", Root, none, |d| op_link(d, "x", "y"), Err(ENOENT)),
        case!(
            "link: over an existing name",
            Root,
            |d| {
                file(d, "f", 0o644);
                file(d, "g", 0o644);
            },
            |d| op_link(d, "f", "g"),
            Err(EEXIST)
        ),
        case!("link: a directory", Root, |d| dir(d, "sub", 0o755), |d| op_link(d, "sub", "l"), Err(EPERM)),
        case!(
            "link: to a 256-byte name",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_link(d, "f", &long()),
            Err(ENAMETOOLONG)
        ),
        case!(
            "link: into a missing directory",
            Root,
            |d| file(d, "f", 0o644),
            |d| op_link(d, "f", "no/f"),
            Err(ENOENT)
        ),
        case!(
            "link: the 65001st link",
            Root,
            |d| {
                file(d, "f", 0o644);
                for i in 1..65000 {
                    fs::hard_link(d.join("f"), d.join(format!("l{i}"))).expect("setup: link");
                }
            },
            |d| op_link(d, "f", "one-too-many"),
            Err(EMLINK)
        ),
        case!(
            "symlink: over an existing name",
            Root,
            |d| file(d, "f", 0o644),
            |d| io(symlink("x", d.join("f"))),
            Err(EEXIST)
        ),
        case!("symlink: a 256-byte name", Root, none, |d| io(symlink("x", d.join(long()))), Err(ENAMETOOLONG)),
        case!(
            "symlink: a 4096-byte target",
            Root,
            none,
            |d| io(symlink("t".repeat(4096), d.join("l"))),
            Err(ENAMETOOLONG)
        ),
        case!("symlink: a 4095-byte target", Root, none, |d| io(symlink("t".repeat(4095), d.join("l"))), Ok(())),
        case!("symlink: an empty target", Root, none, |d| io(symlink("", d.join("l"))), Err(ENOENT)),
        case!(
            "readlink: a file",
            Root,
            |d| file(d, "f", 0o644),
            |d| nix::fcntl::readlink(&d.join("f")).map(drop),
            Err(EINVAL)
        ),
        case!("readlink: a missing name", Root, none, |d| nix::fcntl::readlink(&d.join("x")).map(drop), Err(ENOENT)),
    ]
}

fn data_cases() -> Vec<Case> {
    vec![
        case!("truncate: a negative size", Root, |d| file(d, "f", 0o644), |d| truncate(&d.join("f"), -1), Err(EINVAL)),
        case!("truncate: a directory", Root, |d| dir(d, "sub", 0o755), |d| truncate(&d.join("sub"), 0), Err(EISDIR)),
        case!(
            "truncate: past the largest file (16 TiB)",
            Root,
            |d| file(d, "f", 0o644),
            |d| truncate(&d.join("f"), (1 << 44) + 1),
            Err(EFBIG)
        ),
        case!("truncate: a missing file", Root, none, |d| truncate(&d.join("x"), 0), Err(ENOENT)),
        case!(
            "truncate: a file the user may not write",
            User,
            |d| file(d, "f", 0o644),
            |d| truncate(&d.join("f"), 0),
            Err(EACCES)
        ),
        case!(
            "ftruncate: a descriptor open for reading",
            Root,
            |d| file(d, "f", 0o644),
            |d| ftruncate(open(&d.join("f"), OFlag::O_RDONLY, m(0))?, 0),
            Err(EINVAL)
        ),
        case!(
            "write: a descriptor open for reading",
            Root,
            |d| file(d, "f", 0o644),
            |d| write(open(&d.join("f"), OFlag::O_RDONLY, m(0))?, b"x").map(drop),
            Err(EBADF)
        ),
        case!(
            "read: a descriptor open for writing",
            Root,
            |d| file(d, "f", 0o644),
            |d| read(open(&d.join("f"), OFlag::O_WRONLY, m(0))?, &mut [0u8; 4]).map(drop),
            Err(EBADF)
        ),
        case!(
            "read: a directory",
            Root,
            |d| dir(d, "sub", 0o755),
            |d| read(open(&d.join("sub"), OFlag::O_RDONLY, m(0))?, &mut [0u8; 4]).map(drop),
            Err(EISDIR)
        ),
        case!(
            "write: at the largest size (16 TiB)",
            Root,
            |d| file(d, "f", 0o644),
            |d| {
                let f = fs::File::options().write(true).open(d.join("f")).map_err(|_| EIO)?;
                io(std::os::unix::fs::FileExt::write_at(&f, b"x", 1 << 44).and_then(|_| f.sync_all()))
            },
            Err(EFBIG)
        ),
        case!(
            "lseek: SEEK_DATA past the end",
            Root,
            data_then_hole,
            |d| op_lseek(&d.join("f"), 2 << 20, Whence::SeekData),
            Err(ENXIO)
        ),
        case!(
            "lseek: SEEK_HOLE past the end",
            Root,
            data_then_hole,
            |d| op_lseek(&d.join("f"), 2 << 20, Whence::SeekHole),
            Err(ENXIO)
        ),
        case!(
            "lseek: SEEK_DATA in a trailing hole",
            Root,
            data_then_hole,
            |d| op_lseek(&d.join("f"), 512 << 10, Whence::SeekData),
            Err(ENXIO)
        ),
        case!(
            "lseek: SEEK_HOLE in data",
            Root,
            data_then_hole,
            |d| op_lseek(&d.join("f"), 0, Whence::SeekHole),
            Ok(())
        ),
        case!(
            "lseek: a negative offset",
            Root,
            data_then_hole,
            |d| op_lseek(&d.join("f"), -1, Whence::SeekSet),
            Err(EINVAL)
        ),
        case!(
            "fallocate: collapse-range (not supported)",
            Root,
            data_then_hole,
            |d| op_fallocate(&d.join("f"), OFlag::O_RDWR, FallocateFlags::FALLOC_FL_COLLAPSE_RANGE, 0, 4096),
            Err(EOPNOTSUPP),
            Host::Differs(Ok(()))
        ),
        case!(
            "fallocate: an empty range",
            Root,
            data_then_hole,
            |d| op_fallocate(&d.join("f"), OFlag::O_RDWR, FallocateFlags::empty(), 0, 0),
            Err(EINVAL)
        ),
        case!(
            "fallocate: punching without keeping the size",
            Root,
            data_then_hole,
            |d| op_fallocate(&d.join("f"), OFlag::O_RDWR, FallocateFlags::FALLOC_FL_PUNCH_HOLE, 0, 4096),
            Err(EOPNOTSUPP)
        ),
        case!(
            "fallocate: past the largest file",
            Root,
            data_then_hole,
            |d| op_fallocate(&d.join("f"), OFlag::O_RDWR, FallocateFlags::FALLOC_FL_KEEP_SIZE, 1 << 44, 4096),
            Err(EFBIG)
        ),
        case!(
            "fallocate: a descriptor open for reading",
            Root,
            data_then_hole,
            |d| op_fallocate(&d.join("f"), OFlag::O_RDONLY, FallocateFlags::empty(), 0, 4096),
            Err(EBADF)
        ),
    ]
}

fn xattr_cases() -> Vec<Case> {
    vec![
        case!(
            "getxattr: a missing attribute",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::get(&d.join("f"), "user.x", 64).map(drop),
            Err(ENODATA)
        ),
        case!(
            "getxattr: a buffer too small",
            Root,
            |d| {
                file(d, "f", 0o644);
                sys::set(&d.join("f"), "user.a", b"value", 0).expect("setup: setxattr");
            },
            |d| sys::get(&d.join("f"), "user.a", 2).map(drop),
            Err(ERANGE)
        ),
        case!(
            "getxattr: of a missing file",
            Root,
            none,
            |d| sys::get(&d.join("x"), "user.a", 64).map(drop),
            Err(ENOENT)
        ),
        case!(
            "listxattr: a buffer too small",
            Root,
            |d| {
                file(d, "f", 0o644);
                sys::set(&d.join("f"), "user.a", b"value", 0).expect("setup: setxattr");
            },
            |d| sys::list(&d.join("f"), 3).map(drop),
            Err(ERANGE)
        ),
        case!(
            "setxattr: XATTR_CREATE of an existing attribute",
            Root,
            |d| {
                file(d, "f", 0o644);
                sys::set(&d.join("f"), "user.a", b"value", 0).expect("setup: setxattr");
            },
            |d| sys::set(&d.join("f"), "user.a", b"new", libc::XATTR_CREATE),
            Err(EEXIST)
        ),
        case!(
            "setxattr: XATTR_REPLACE of a missing attribute",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "user.a", b"new", libc::XATTR_REPLACE),
            Err(ENODATA)
        ),
        case!(
            "removexattr: a missing attribute",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::remove(&d.join("f"), "user.x"),
            Err(ENODATA)
        ),
        case!(
            "setxattr: a 256-byte name",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), &format!("user.{}", "n".repeat(251)), b"v", 0),
            Err(ERANGE)
        ),
        case!(
            "setxattr: a 255-byte name",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), &format!("user.{}", "n".repeat(250)), b"v", 0),
            Ok(())
        ),
        case!(
            "setxattr: a value over 64 KiB",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "user.big", &vec![0u8; 65537], 0),
            Err(E2BIG)
        ),
        case!(
            "setxattr: a 64 KiB value",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "user.big", &vec![1u8; 65536], 0),
            Ok(()),
            // ext4 without the ea_inode feature keeps a value in one block.
            Host::Differs(Err(ENOSPC))
        ),
        case!(
            "setxattr: an unknown namespace",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "nosuch.a", b"v", 0),
            Err(EOPNOTSUPP)
        ),
        case!(
            "getxattr: an unknown namespace",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::get(&d.join("f"), "nosuch.a", 64).map(drop),
            Err(EOPNOTSUPP)
        ),
        case!(
            "removexattr: an unknown namespace",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::remove(&d.join("f"), "nosuch.a"),
            Err(EOPNOTSUPP)
        ),
        case!(
            "setxattr: an unknown system.* attribute",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "system.nosuch", b"v", 0),
            Err(EOPNOTSUPP)
        ),
        case!(
            "setxattr: an empty name in user.*",
            Root,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "user.", b"v", 0),
            Err(EINVAL)
        ),
        case!(
            "setxattr: user.* on a symlink",
            Root,
            |d| symlink("nowhere", d.join("l")).expect("setup"),
            |d| sys::set(&d.join("l"), "user.a", b"v", 0),
            Err(EPERM)
        ),
        case!(
            "setxattr: a file the user may not write",
            User,
            |d| file(d, "f", 0o644),
            |d| sys::set(&d.join("f"), "user.a", b"v", 0),
            Err(EACCES)
        ),
        case!(
            "setxattr: trusted.* as a user",
            User,
            |d| {
                file(d, "f", 0o666);
                own(&d.join("f"), USER);
            },
            |d| sys::set(&d.join("f"), "trusted.a", b"v", 0),
            Err(EPERM)
        ),
        case!(
            "setxattr: an ACL on another user's file",
            User,
            |d| file(d, "f", 0o666),
            |d| sys::set(&d.join("f"), "system.posix_acl_access", &acl_rw(), 0),
            Err(EPERM)
        ),
    ]
}

/// `u::rw-,g::r--,o::r--` in the xattr form.
fn acl_rw() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm) in [(1u16, 6u16), (4, 4), (0x20, 4)] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    v
}

fn owner_cases() -> Vec<Case> {
    vec![
        case!(
            "chmod: another user's file",
            User,
            |d| file(d, "f", 0o666),
            |d| nix::sys::stat::fchmodat(
                AT_FDCWD,
                &d.join("f"),
                m(0o600),
                nix::sys::stat::FchmodatFlags::FollowSymlink
            ),
            Err(EPERM)
        ),
        case!(
            "chown: the user's file to another user",
            User,
            |d| {
                file(d, "f", 0o644);
                own(&d.join("f"), USER);
            },
            |d| chown(&d.join("f"), Some(Uid::from_raw(OTHER)), None),
            Err(EPERM)
        ),
        case!(
            "chown: the user's file to a group the user is not in",
            User,
            |d| {
                file(d, "f", 0o644);
                own(&d.join("f"), USER);
            },
            |d| chown(&d.join("f"), None, Some(Gid::from_raw(OTHER))),
            Err(EPERM)
        ),
        case!(
            "chown: the user's file to the user's own group",
            User,
            |d| {
                file(d, "f", 0o644);
                chown(&d.join("f"), Some(Uid::from_raw(USER)), Some(Gid::from_raw(0))).expect("setup");
            },
            |d| chown(&d.join("f"), None, Some(Gid::from_raw(USER))),
            Ok(())
        ),
        case!(
            "utimensat: explicit times on another user's file",
            User,
            |d| file(d, "f", 0o666),
            |d| utimensat(
                AT_FDCWD,
                &d.join("f"),
                &TimeSpec::new(1, 0),
                &TimeSpec::new(1, 0),
                UtimensatFlags::FollowSymlink
            ),
            Err(EPERM)
        ),
        case!(
            "utimensat: now on another user's file the user may not write",
            User,
            |d| file(d, "f", 0o644),
            |d| utimensat(
                AT_FDCWD,
                &d.join("f"),
                &TimeSpec::UTIME_NOW,
                &TimeSpec::UTIME_NOW,
                UtimensatFlags::FollowSymlink
            ),
            Err(EACCES)
        ),
        case!(
            "utimensat: now on another user's file the user may write",
            User,
            |d| file(d, "f", 0o666),
            |d| utimensat(
                AT_FDCWD,
                &d.join("f"),
                &TimeSpec::UTIME_NOW,
                &TimeSpec::UTIME_NOW,
                UtimensatFlags::FollowSymlink
            ),
            Ok(())
        ),
        case!(
            "setgid: a user's new file in a set-gid directory takes its group",
            User,
            |d| {
                dir(d, "g", 0o2777);
                chown(&d.join("g"), None, Some(Gid::from_raw(4242))).expect("setup");
            },
            |d| {
                fs::write(d.join("g/f"), b"x").map_err(|_| EIO)?;
                let st = nix::sys::stat::stat(&d.join("g/f"))?;
                if st.st_gid == 4242 { Ok(()) } else { Err(EPROTO) }
            },
            Ok(())
        ),
    ]
}

/// The directories of the cases that run as `USER` must be reachable by it.
pub fn prepare_dir(d: &Path) {
    chmod(d, 0o755);
}
