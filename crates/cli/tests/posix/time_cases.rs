//! Which of atime, mtime and ctime each operation changes, on the object
//! and on its directories, to the nanosecond; and explicit times kept to
//! the nanosecond.
//!
//! Before the operation every watched path gets an old atime and mtime
//! (utimensat, which also sets ctime to now); after it, a changed time must
//! differ from the old one and be recent, an unchanged one be exactly as it
//! was, and times one operation sets together be equal to the nanosecond.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{FileExt, symlink};
use std::path::Path;
use std::time::Duration;

use nix::fcntl::{AT_FDCWD, FallocateFlags, OFlag, RenameFlags, fallocate, open, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, UtimensatFlags, lstat, mknod, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid, chown, ftruncate, mkdir, truncate, unlink};

use crate::errno_cases::Res;
use crate::sys;

/// How a watched path's times must change: `a`, `m`, `c` where they change,
/// `-` where they must not; `new` for a path the operation creates (all
/// three equal and recent).
pub struct Watch {
    /// The path before the operation (relative to the case directory).
    pub before: &'static str,
    /// The path after it (a rename moves it).
    pub after: &'static str,
    pub rule: &'static str,
    /// The rule on the host file system, where it knowingly differs.
    pub host_rule: Option<&'static str>,
}

pub struct TimeCase {
    pub name: &'static str,
    pub setup: fn(&Path),
    pub op: fn(&Path) -> Res,
    pub watch: Vec<Watch>,
}

const OLD_ATIME: TimeSpec = TimeSpec::new(978_307_200, 111_111_111);
const OLD_MTIME: TimeSpec = TimeSpec::new(1_009_843_200, 222_222_222);

fn w(path: &'static str, rule: &'static str) -> Watch {
    Watch { before: path, after: path, rule, host_rule: None }
}

/// A rule that differs on the host file system.
fn w_host(path: &'static str, rule: &'static str, host_rule: &'static str) -> Watch {
    Watch { before: path, after: path, rule, host_rule: Some(host_rule) }
}

fn moved(before: &'static str, after: &'static str, rule: &'static str) -> Watch {
    Watch { before, after, rule, host_rule: None }
}

fn none(_: &Path) {}

fn file(d: &Path) {
    fs::write(d.join("f"), vec![5u8; 10_000]).expect("setup: write");
}

fn m(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits)
}

/// `rmdir(2)`, which nix does not wrap.
fn rmdir(p: &Path) -> Res {
    io(fs::remove_dir(p))
}

fn io<T>(r: std::io::Result<T>) -> Res {
    r.map(|_| ()).map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))
}

macro_rules! tcase {
    ($name:literal, $setup:expr, $op:expr, [$($watch:expr),* $(,)?]) => {
        TimeCase { name: $name, setup: $setup, op: $op, watch: vec![$($watch),*] }
    };
}

/// Every case.
#[allow(clippy::too_many_lines)]
pub fn cases() -> Vec<TimeCase> {
    vec![
        tcase!("create", none, |d| io(fs::File::create(d.join("f"))), [w(".", "-mc"), moved("", "f", "new")]),
        tcase!("mkdir", none, |d| mkdir(&d.join("sub"), m(0o755)), [w(".", "-mc"), moved("", "sub", "new")]),
        tcase!(
            "mkfifo",
            none,
            |d| mknod(&d.join("p"), SFlag::S_IFIFO, m(0o644), 0),
            [w(".", "-mc"), moved("", "p", "new")]
        ),
        tcase!("symlink", none, |d| io(symlink("f", d.join("l"))), [w(".", "-mc"), moved("", "l", "new")]),
        tcase!(
            "link",
            |d| {
                file(d);
                fs::create_dir(d.join("other")).expect("setup");
            },
            |d| io(fs::hard_link(d.join("f"), d.join("other/g"))),
            [w("f", "--c"), w(".", "---"), w("other", "-mc")]
        ),
        tcase!(
            "unlink of one of two links",
            |d| {
                file(d);
                fs::hard_link(d.join("f"), d.join("g")).expect("setup");
            },
            |d| unlink(&d.join("g")),
            [w("f", "--c"), w(".", "-mc")]
        ),
        tcase!("rmdir", |d| fs::create_dir(d.join("sub")).expect("setup"), |d| rmdir(&d.join("sub")), [w(".", "-mc")]),
        tcase!(
            "rename within a directory",
            file,
            |d| io(fs::rename(d.join("f"), d.join("g"))),
            [moved("f", "g", "--c"), w(".", "-mc")]
        ),
        tcase!(
            "rename of a file to another directory",
            |d| {
                fs::create_dir(d.join("a")).expect("setup");
                fs::create_dir(d.join("b")).expect("setup");
                fs::write(d.join("a/f"), b"x").expect("setup");
            },
            |d| io(fs::rename(d.join("a/f"), d.join("b/f"))),
            [moved("a/f", "b/f", "--c"), w("a", "-mc"), w("b", "-mc"), w(".", "---")]
        ),
        tcase!(
            "rename of a directory to another directory",
            |d| {
                fs::create_dir_all(d.join("a/sub")).expect("setup");
                fs::create_dir(d.join("b")).expect("setup");
            },
            |d| io(fs::rename(d.join("a/sub"), d.join("b/sub"))),
            [moved("a/sub", "b/sub", "--c"), w("a", "-mc"), w("b", "-mc")]
        ),
        tcase!(
            "rename over a file that keeps another link",
            |d| {
                file(d);
                fs::write(d.join("g"), b"x").expect("setup");
                fs::hard_link(d.join("g"), d.join("h")).expect("setup");
            },
            |d| io(fs::rename(d.join("f"), d.join("g"))),
            [moved("f", "g", "--c"), w("h", "--c"), w(".", "-mc")]
        ),
        tcase!(
            "rename exchange",
            |d| {
                fs::create_dir(d.join("a")).expect("setup");
                fs::write(d.join("a/f"), b"x").expect("setup");
                fs::write(d.join("g"), b"y").expect("setup");
            },
            |d| renameat2(AT_FDCWD, &d.join("a/f"), AT_FDCWD, &d.join("g"), RenameFlags::RENAME_EXCHANGE),
            [moved("a/f", "g", "--c"), moved("g", "a/f", "--c"), w("a", "-mc"), w(".", "-mc")]
        ),
        tcase!(
            "write",
            file,
            |d| io(fs::File::options().write(true).open(d.join("f")).and_then(|mut f| f.write_all(b"new"))),
            [w("f", "-mc"), w(".", "---")]
        ),
        tcase!(
            "write of nothing",
            file,
            |d| io(fs::File::options().write(true).open(d.join("f")).and_then(|mut f| f.write_all(b""))),
            [w("f", "---")]
        ),
        tcase!(
            "append",
            file,
            |d| io(fs::File::options().append(true).open(d.join("f")).and_then(|mut f| f.write_all(b"more"))),
            [w("f", "-mc")]
        ),
        tcase!("truncate to a smaller size", file, |d| truncate(&d.join("f"), 10), [w("f", "-mc")]),
        tcase!("truncate to a larger size", file, |d| truncate(&d.join("f"), 1 << 20), [w("f", "-mc")]),
        // Under the writeback cache the kernel owns mtime and ctime, and moves
        // them on truncate(2) only when the size changes; ext4 always does.
        tcase!("truncate to the same size", file, |d| truncate(&d.join("f"), 10_000), [w_host("f", "---", "-mc")]),
        tcase!(
            "ftruncate to the same size",
            file,
            |d| ftruncate(open(&d.join("f"), OFlag::O_WRONLY, m(0))?, 10_000),
            [w("f", "-mc")]
        ),
        tcase!(
            "open with O_TRUNC",
            file,
            |d| open(&d.join("f"), OFlag::O_WRONLY | OFlag::O_TRUNC, m(0)).map(drop),
            [w("f", "-mc")]
        ),
        tcase!(
            "open with O_TRUNC of an empty file",
            |d| fs::write(d.join("f"), b"").expect("setup"),
            |d| open(&d.join("f"), OFlag::O_WRONLY | OFlag::O_TRUNC, m(0)).map(drop),
            [w("f", "-mc")]
        ),
        tcase!(
            "open with O_CREAT of an existing file",
            file,
            |d| open(&d.join("f"), OFlag::O_WRONLY | OFlag::O_CREAT, m(0o644)).map(drop),
            [w("f", "---"), w(".", "---")]
        ),
        tcase!(
            "chmod",
            file,
            |d| io(fs::set_permissions(d.join("f"), std::os::unix::fs::PermissionsExt::from_mode(0o600))),
            [w("f", "--c")]
        ),
        tcase!(
            "chown",
            file,
            |d| chown(&d.join("f"), Some(Uid::from_raw(1000)), Some(Gid::from_raw(1000))),
            [w("f", "--c")]
        ),
        tcase!("setxattr", file, |d| sys::set(&d.join("f"), "user.a", b"v", 0), [w("f", "--c")]),
        tcase!(
            "removexattr",
            |d| {
                file(d);
                sys::set(&d.join("f"), "user.a", b"v", 0).expect("setup");
            },
            |d| sys::remove(&d.join("f"), "user.a"),
            [w("f", "--c")]
        ),
        tcase!(
            "setxattr on a directory",
            |d| fs::create_dir(d.join("sub")).expect("setup"),
            |d| sys::set(&d.join("sub"), "user.a", b"v", 0),
            [w("sub", "--c"), w(".", "---")]
        ),
        tcase!("read", file, |d| io(fs::read(d.join("f"))), [w("f", "a--"), w(".", "---")]),
        tcase!(
            "read of nothing",
            file,
            |d| io(fs::File::open(d.join("f")).and_then(|f| f.read_at(&mut [], 0))),
            [w("f", "---")]
        ),
        tcase!(
            "readdir",
            |d| fs::create_dir(d.join("sub")).expect("setup"),
            |d| io(fs::read_dir(d.join("sub")).map(|r| r.count())),
            [w("sub", "a--")]
        ),
        tcase!(
            "fallocate within the size",
            file,
            |d| fallocate(open(&d.join("f"), OFlag::O_RDWR, m(0))?, FallocateFlags::empty(), 0, 4096),
            [w("f", "-mc")]
        ),
        tcase!(
            "fallocate beyond the size",
            file,
            |d| fallocate(open(&d.join("f"), OFlag::O_RDWR, m(0))?, FallocateFlags::empty(), 0, 1 << 20),
            [w("f", "-mc")]
        ),
        tcase!(
            "fallocate beyond the size, keeping it",
            file,
            |d| fallocate(open(&d.join("f"), OFlag::O_RDWR, m(0))?, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, 1 << 20),
            [w("f", "-mc")]
        ),
        tcase!(
            "fallocate punching a hole",
            file,
            |d| fallocate(
                open(&d.join("f"), OFlag::O_RDWR, m(0))?,
                FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
                0,
                4096
            ),
            [w("f", "-mc")]
        ),
        tcase!(
            "utimensat to now",
            file,
            |d| utimensat(
                AT_FDCWD,
                &d.join("f"),
                &TimeSpec::UTIME_NOW,
                &TimeSpec::UTIME_NOW,
                UtimensatFlags::NoFollowSymlink
            ),
            [w("f", "amc")]
        ),
        tcase!(
            "utimensat of mtime only",
            file,
            |d| utimensat(
                AT_FDCWD,
                &d.join("f"),
                &TimeSpec::UTIME_OMIT,
                &TimeSpec::UTIME_NOW,
                UtimensatFlags::NoFollowSymlink
            ),
            [w("f", "-mc")]
        ),
    ]
}

/// A file's times.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Times {
    pub a: (i64, i64),
    pub m: (i64, i64),
    pub c: (i64, i64),
}

pub fn times(p: &Path) -> nix::Result<Times> {
    let st: FileStat = lstat(p)?;
    Ok(Times {
        a: (st.st_atime, st.st_atime_nsec),
        m: (st.st_mtime, st.st_mtime_nsec),
        c: (st.st_ctime, st.st_ctime_nsec),
    })
}

fn ts(t: TimeSpec) -> (i64, i64) {
    (t.tv_sec(), t.tv_nsec())
}

fn now() -> (i64, i64) {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).expect("clock");
    ts(t)
}

/// At least as late as `start`, allowing for the kernel's coarse clock
/// (a tick or two behind the fine one).
fn recent(t: (i64, i64), start: (i64, i64)) -> bool {
    let slack_ns = 20_000_000i128;
    let ns = |x: (i64, i64)| i128::from(x.0) * 1_000_000_000 + i128::from(x.1);
    ns(t) + slack_ns >= ns(start)
}

/// Runs one case in `d`; returns what is wrong, if anything.
pub fn run(case: &TimeCase, d: &Path, on_host: bool) -> Vec<String> {
    let mut wrong = Vec::new();
    (case.setup)(d);
    let mut before = Vec::new();
    for watch in &case.watch {
        if watch.rule == "new" {
            before.push(None);
            continue;
        }
        let p = d.join(watch.before);
        utimensat(AT_FDCWD, &p, &OLD_ATIME, &OLD_MTIME, UtimensatFlags::NoFollowSymlink).expect("set old times");
        before.push(Some(times(&p).expect("stat before")));
    }
    // Let the clocks move past the ctime utimensat just set.
    std::thread::sleep(Duration::from_millis(15));
    let start = now();
    if let Err(e) = (case.op)(d) {
        return vec![format!("the operation failed: {e}")];
    }
    for (watch, before) in case.watch.iter().zip(before) {
        let after = match times(&d.join(watch.after)) {
            Ok(t) => t,
            Err(e) => {
                wrong.push(format!("{}: {e}", watch.after));
                continue;
            }
        };
        let Some(before) = before else {
            if !(after.a == after.m && after.m == after.c && recent(after.c, start)) {
                wrong.push(format!("{}: new, so atime = mtime = ctime = now; got {after:?}", watch.after));
            }
            continue;
        };
        let rule = match watch.host_rule {
            Some(r) if on_host => r,
            _ => watch.rule,
        }
        .as_bytes();
        let checks = [
            ("atime", rule[0] == b'a', after.a, before.a),
            ("mtime", rule[1] == b'm', after.m, before.m),
            ("ctime", rule[2] == b'c', after.c, before.c),
        ];
        for (what, changes, now_t, old) in checks {
            if changes && (now_t == old || !recent(now_t, start)) {
                wrong.push(format!("{}: {what} should change: {old:?} -> {now_t:?}", watch.after));
            }
            if !changes && now_t != old {
                wrong.push(format!("{}: {what} should stay {old:?}, is {now_t:?}", watch.after));
            }
        }
        // One operation, one time: what it sets together is equal.
        if rule[1] == b'm' && rule[2] == b'c' && after.m != after.c {
            wrong.push(format!("{}: mtime {:?} and ctime {:?} set together differ", watch.after, after.m, after.c));
        }
    }
    wrong
}

/// Explicit times kept to the nanosecond: (name, atime, mtime).
pub const EXPLICIT: [(&str, TimeSpec, TimeSpec); 4] = [
    ("ns", TimeSpec::new(1_234_567_890, 123_456_789), TimeSpec::new(1_600_000_000, 999_999_999)),
    ("before-1970", TimeSpec::new(-1, 999_999_999), TimeSpec::new(-86_400 * 365 * 30, 1)),
    ("epoch", TimeSpec::new(0, 0), TimeSpec::new(0, 1)),
    ("far-future", TimeSpec::new(8_000_000_000, 500_000_000), TimeSpec::new(4_102_444_800, 7)),
];

/// Sets the explicit times on files in `d`.
pub fn set_explicit(d: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, a, m_) in EXPLICIT {
        let p = d.join(name);
        fs::write(&p, b"x").expect("setup");
        if let Err(e) = utimensat(AT_FDCWD, &p, &a, &m_, UtimensatFlags::NoFollowSymlink) {
            wrong.push(format!("utimensat {name}: {e}"));
        }
    }
    // UTIME_OMIT leaves atime exactly as it was.
    let p = d.join("omit");
    fs::write(&p, b"x").expect("setup");
    let _ = utimensat(AT_FDCWD, &p, &OLD_ATIME, &OLD_MTIME, UtimensatFlags::NoFollowSymlink);
    let _ = utimensat(AT_FDCWD, &p, &TimeSpec::UTIME_OMIT, &TimeSpec::new(5, 5), UtimensatFlags::NoFollowSymlink);
    wrong
}

/// Checks the explicit times (again after a remount).
pub fn check_explicit(d: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, a, m_) in EXPLICIT {
        match times(&d.join(name)) {
            Ok(t) if t.a == ts(a) && t.m == ts(m_) => {}
            Ok(t) => wrong.push(format!("{name}: set {:?} {:?}, read {:?} {:?}", ts(a), ts(m_), t.a, t.m)),
            Err(e) => wrong.push(format!("{name}: {e}")),
        }
    }
    match times(&d.join("omit")) {
        Ok(t) if t.a == ts(OLD_ATIME) && t.m == (5, 5) => {}
        Ok(t) => wrong.push(format!("omit: UTIME_OMIT changed atime: {t:?}")),
        Err(e) => wrong.push(format!("omit: {e}")),
    }
    wrong
}
