//! Calls programs make of a kernel file system, through a real mount, each
//! answered as ext4 answers it: SEEK_DATA and SEEK_HOLE while data is still
//! in the kernel's page cache, chattr and lsattr, birth time through statx,
//! O_TMPFILE; and the inode flags, projects and birth times kept by the
//! tools that take files off the volume.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]
mod common;

use common::{TestVolume, dualfs, sh};

/// SEEK_DATA / SEEK_HOLE on files whose data the kernel still holds (the
/// writeback cache): each answer must agree with what read(2) returns,
/// before any fsync. Holes, preallocated (unwritten) ranges, inline files
/// and files closed with their tail still in the volume's memory.
#[test]
fn seek_data_and_hole_see_what_the_kernel_still_holds() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let script = r#"
import os, sys
D, H = os.SEEK_DATA, os.SEEK_HOLE
def seek(fd, at, how):
    try:
        return os.lseek(fd, at, how)
    except OSError as e:
        return 'ENXIO' if e.errno == 6 else 'errno %d' % e.errno
out = []
def say(name, got, want):
    out.append('%s: %s%s' % (name, got, '' if got == want else ' (want %s)' % (want,)))

# One byte at 4096 of a new file, nothing handed to the volume yet.
fd = os.open('one', os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b'x', 4096)
say('data from 0', seek(fd, 0, D), 4096)
say('hole from 0', seek(fd, 0, H), 0)
say('hole from 4096', seek(fd, 4096, H), 4097)
say('data past the end', seek(fd, 4097, D), 'ENXIO')
os.close(fd)

# Data, a hole, and dirty data far out; a reader's descriptor asks.
fd = os.open('holes', os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b'a' * 4096, 0)
os.fsync(fd)
os.pwrite(fd, b'b' * 4096, 1 << 20)
r = os.open('holes', os.O_RDONLY)
say('hole after the first block', seek(r, 0, H), 4096)
say('data after the hole', seek(r, 4096, D), 1 << 20)
say('end', seek(r, 1 << 20, H), (1 << 20) + 4096)
os.close(r)
os.close(fd)

# A preallocated range (unwritten: a hole to SEEK_DATA) with dirty data
# written into its middle.
fd = os.open('prealloc', os.O_CREAT | os.O_RDWR, 0o644)
os.posix_fallocate(fd, 0, 256 << 10)
os.pwrite(fd, b'c' * 4096, 128 << 10)
say('data in the preallocated range', seek(fd, 0, D), 128 << 10)
say('hole after it', seek(fd, 128 << 10, H), (128 << 10) + 4096)
os.close(fd)

# An inline file: all data.
fd = os.open('small', os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'hello')
say('inline data', seek(fd, 0, D), 0)
say('inline hole', seek(fd, 0, H), 5)
os.close(fd)

# Closed: the kernel wrote its pages back at close, the volume keeps the
# tail in memory; asked through a read-only descriptor.
fd = os.open('closed', os.O_CREAT | os.O_WRONLY, 0o644)
os.pwrite(fd, b'd' * 100, 8192)
os.close(fd)
r = os.open('closed', os.O_RDONLY)
say('closed: data', seek(r, 0, D), 8192)
say('closed: hole', seek(r, 8192, H), 8292)
os.close(r)
print('\n'.join(out))
"#;
    let out = sh(&format!("cd {} && python3 -c '{}'", v.m(), script.replace('\'', "'\\''")));
    assert!(!out.contains("(want"), "answers that disagree with read(2):\n{out}");
    // And cp finds the holes: the copy of a sparse file is sparse.
    sh(&format!(
        "cd {m} && truncate -s 64M sparse && echo x >> sparse && cp --sparse=auto sparse copy && cmp sparse copy \
         && [ $(stat -c %b copy) -lt 64 ]",
        m = v.m()
    ));
    v.umount();
}

/// chattr and lsattr: immutable and append-only hold for root, whom the
/// kernel lets past every permission check; the other flags and the
/// project id are kept.
#[test]
fn chattr_immutable_and_append_only_hold_for_root() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    if !common::sh_output("command -v chattr && command -v lsattr").status.success() {
        return common::skip("chattr/lsattr (e2fsprogs) are missing");
    }
    v.mount();
    let m = v.m().to_string();
    sh(&format!("cd {m} && echo hello > f && mkdir d && touch d/in && chattr +i f d && lsattr -d f d"));
    let flags = sh(&format!("cd {m} && lsattr -d f d | cut -d' ' -f1"));
    for l in flags.lines() {
        assert!(l.contains('i'), "lsattr shows the flag: {flags}");
    }
    for refused in [
        "rm f",
        "mv f g",
        "echo x > f",
        "echo x >> f",
        "truncate -s 0 f",
        "chmod 600 f",
        "chown 1 f",
        "touch f",
        "ln f g",
        "setfattr -n user.a -v 1 f",
        "fallocate -l 8192 f",
        "touch d/new",
        "rm d/in",
        "mv d/in in",
    ] {
        let o = common::sh_output(&format!("cd {m} && {refused}"));
        assert!(!o.status.success(), "{refused} succeeded on an immutable inode");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("not permitted"), "{refused}: {err}");
    }
    assert_eq!(sh(&format!("cat {m}/f")), "hello\n");
    sh(&format!("cd {m} && chattr -i f d && echo log > l && chattr +a l && echo more >> l"));
    for refused in ["echo x > l", "truncate -s 0 l", "rm l", "mv l k", "chmod 600 l"] {
        let o = common::sh_output(&format!("cd {m} && {refused}"));
        assert!(!o.status.success(), "{refused} succeeded on an append-only file");
    }
    assert_eq!(sh(&format!("cat {m}/l")), "log\nmore\n");
    // The others are kept, and so is a project id.
    sh(&format!("cd {m} && chattr -a l && chattr +dA l && chattr -p 42 l && chattr +P d"));
    let l = sh(&format!("cd {m} && lsattr -p l")).trim_start().to_string();
    assert!(l.starts_with("42 ") && l.contains('d') && l.contains('A'), "lsattr -p: {l}");
    v.umount();
    v.mount();
    let l = sh(&format!("cd {m} && lsattr -p l && lsattr -d d")).trim_start().to_string();
    assert!(l.starts_with("42 ") && l.contains('A') && l.contains('P'), "after a remount: {l}");
    sh(&format!("cd {m} && rm d/in && rm l f"));
    v.umount();
}

/// What the kernel asks of immutable and append-only inodes before the
/// file system sees the call, asked by the volume in the same order: a
/// time given to utime(2) refused (the time now taken) on an append-only
/// file and directory, EPERM for rmdir of a full directory inside an
/// immutable one; and chattr moves the change time, which the writeback
/// cache would otherwise keep from stat (ext4 stamps it).
#[test]
fn fixed_inodes_answer_as_the_kernel_would_and_chattr_moves_ctime() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    if !common::sh_output("command -v chattr && command -v python3").status.success() {
        return common::skip("chattr (e2fsprogs) or python3 is missing");
    }
    v.mount();
    let m = v.m().to_string();
    // A change time the kernel has cached since a remount, as xfstests'
    // generic/277 asks it.
    sh(&format!("echo log > {m}/l"));
    v.umount();
    v.mount();
    let ctime = || sh(&format!("stat -c %z {m}/l"));
    let before = ctime();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    sh(&format!("chattr +A {m}/l && chattr -A {m}/l"));
    let after = ctime();
    assert_ne!(before, after, "chattr left the change time");
    v.umount();
    v.mount();
    assert_eq!(ctime(), after, "the change time on the volume");
    sh(&format!("cd {m} && mkdir a i && mkdir i/full && touch i/full/f && chattr +a l a && chattr +i i"));
    let py = |code: &str| sh(&format!("cd {m} && python3 -c '{code}'")).trim().to_string();
    let errno = |call: &str| {
        py(&format!(
            "import os,errno\ntry:\n {call}\n print(0)\nexcept OSError as e:\n print(errno.errorcode[e.errno])"
        ))
    };
    for f in ["l", "a"] {
        assert_eq!(errno(&format!("os.utime(\"{f}\", (0, 0))")), "EPERM", "utime of {f} to a time given");
        assert_eq!(errno(&format!("os.utime(\"{f}\")")), "0", "utime of {f} to now");
    }
    assert_eq!(errno("os.rmdir(\"i/full\")"), "EPERM", "rmdir in an immutable directory");
    sh(&format!("cd {m} && chattr -a l a && chattr -i i"));
    v.umount();
}

/// Birth time through statx (`stat -c %W`): set at creation, kept when
/// the file changes, and across a remount.
#[test]
fn statx_answers_the_birth_time() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let before = sh("date +%s").trim().parse::<i64>().unwrap();
    sh(&format!("cd {m} && echo a > f && mkdir d"));
    let born = |p: &str| sh(&format!("stat -c %W {m}/{p}")).trim().parse::<i64>().unwrap();
    let f = born("f");
    assert!(f >= before && f <= before + 60, "birth {f}, made at {before}");
    assert!(born("d") >= before);
    sh(&format!("cd {m} && touch -d 2001-01-01 f && echo b >> f"));
    assert_eq!(born("f"), f, "a change keeps the birth time");
    v.umount();
    v.mount();
    assert_eq!(born("f"), f, "after a remount");
    v.umount();
}

/// O_TMPFILE: an unnamed file a link can name later, freed at close
/// otherwise, and by recovery after the server is killed.
#[test]
fn tmpfiles_are_named_by_linkat_or_freed_even_across_a_crash() {
    let Some(mut v) = TestVolume::create("128M") else {
        return;
    };
    v.mount();
    let m = v.m().to_string();
    let before = v.usage();
    let script = r#"
import os, ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open('.', os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b'kept' * 1024)
assert os.listdir('.') == [], os.listdir('.')
# linkat(fd, "", AT_FDCWD, "named", AT_EMPTY_PATH)
assert libc.linkat(fd, b'', -100, b'named', 0x1000) == 0, ctypes.get_errno()
os.close(fd)
fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o600)
os.write(fd, os.urandom(8 << 20))
os.fsync(fd)
os.close(fd)
print(sorted(os.listdir('.')))
"#;
    let out = sh(&format!("cd {m} && python3 -c '{}'", script.replace('\'', "'\\''")));
    assert_eq!(out.trim(), "['named']");
    assert_eq!(sh(&format!("head -c 8 {m}/named")), "keptkept");
    sh(&format!("rm {m}/named && sync"));
    // The dropped file's blocks are back (the kernel forgets it at close).
    let start = std::time::Instant::now();
    while v.usage().0 > before.0 + 8 && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(v.usage().0 <= before.0 + 8, "blocks of a closed tmpfile: {:?} against {before:?}", v.usage());
    v.umount();

    // Held open when the server is killed: recovery frees it.
    let mut child = v.spawn_mount(&[]);
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sys, time\n\
             fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_WRONLY, 0o600)\n\
             os.write(fd, os.urandom(16 << 20)); os.fsync(fd)\n\
             print('held', flush=True); time.sleep(60)\n",
            &m,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "held");
    child.kill().unwrap();
    child.wait().unwrap();
    sh(&format!("umount -l {m}"));
    holder.kill().unwrap();
    holder.wait().unwrap();
    v.fsck();
    v.mount();
    assert!(v.usage().0 <= before.0 + 8, "after recovery: {:?} against {before:?}", v.usage());
    v.umount();
}

/// Inode flags, project ids and birth times leave the volume with it:
/// send and receive keep them, `dualfs get` sets them on its copy and
/// says what it could not, `dualfs inspect` shows them, and a metadump's
/// restored volume (names replaced or not) has them.
#[test]
fn flags_projects_and_birth_times_travel_with_send_receive_get_and_metadump() {
    let Some(mut src) = TestVolume::create("128M") else { return };
    let Some(mut dst) = TestVolume::create("128M") else { return };
    if !common::sh_output("command -v chattr && command -v lsattr").status.success() {
        return common::skip("chattr/lsattr (e2fsprogs) are missing");
    }
    src.mount();
    let s = src.m().to_string();
    // d: +P +d, project 7 (passed on); d/f: +i +A, project 42; g: +a;
    // d/l: a symlink, nodump from d.
    sh(&format!(
        "cd {s} && mkdir d && echo a > d/f && echo b > g && chattr +P +d -p 7 d && ln -s f d/l && \
         chattr -p 42 d/f && chattr +iA d/f && chattr +a g"
    ));
    let attrs =
        |root: &str| sh(&format!("cd {root} && lsattr -d -p d d/f g | sed 's/  */ /g' && stat -c '%n %W' d d/f g d/l"));
    let want = attrs(&s);
    let line = |name: &str| want.lines().map(str::trim_start).find(|l| l.ends_with(&format!(" {name}"))).unwrap_or("");
    let (f, g) = (line("d/f"), line("g"));
    assert!(f.starts_with("42 ") && f.contains('i') && f.contains('A'), "{want}");
    assert!(g.starts_with("0 ") && g.contains('a'), "{want}");
    src.umount();
    let (sm, sd) = (src.meta.display().to_string(), src.data.display().to_string());

    // inspect, and a metadump's restored volume, by path and by number
    // (before a snapshot: an obfuscated dump drops the snapshot list).
    let inspect = |m: &str, d: &str, what: &str| {
        let out = dualfs(&["inspect", "--json", m, d, "inode", what]);
        ok(&out);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let f = inspect(&sm, &sd, "/d/f");
    assert_eq!((f["flags"].as_str(), f["project"].as_u64()), (Some("iA"), Some(42)), "{f}");
    assert_eq!(inspect(&sm, &sd, "/d/l")["flags"], "d");
    let text = String::from_utf8_lossy(&dualfs(&["inspect", &sm, &sd, "inode", "/g"]).stdout).into_owned();
    assert!(text.contains("flags: a\n") && text.contains("project: 0\n"), "{text}");
    let ino = f["ino"].as_u64().unwrap().to_string();
    let dir = src.dir.path().display().to_string();
    for (tag, extra) in [("kept", Some("--no-obfuscate")), ("obfuscated", None)] {
        let dump = format!("{dir}/{tag}.dump");
        let mut args = vec!["metadump"];
        args.extend(extra);
        args.extend([sm.as_str(), sd.as_str(), dump.as_str()]);
        ok(&dualfs(&args));
        let (rm, rd) = (format!("{dir}/{tag}-meta.img"), format!("{dir}/{tag}-data.img"));
        ok(&dualfs(&["metarestore", &dump, &rm, &rd]));
        let r = inspect(&rm, &rd, &ino);
        assert_eq!((r["flags"].as_str(), r["project"].as_u64()), (Some("iA"), Some(42)), "{tag}: {r}");
        assert_eq!(r["crtime"], f["crtime"], "{tag}: birth time");
    }

    src.mount();
    ok(&dualfs(&["snapshot", "create", &s, "one"]));
    let (dm, dd) = (dst.meta.display().to_string(), dst.data.display().to_string());
    let bin = env!("CARGO_BIN_EXE_dualfs");
    sh(&format!("{bin} send one {s} | {bin} receive {dm} {dd}"));
    src.umount();

    dst.mount();
    let d = dst.m().to_string();
    assert_eq!(attrs(&d), want, "after send and receive");
    // Into a mounted DualFS: every flag and project can be set there.
    let out = dualfs(&["get", &sm, &sd, "/d", &format!("{d}/copy")]);
    ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("inode flags or projects set on 2 copies"), "{said}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/d/l: inode flags d not set: chattr cannot reach a symbolic link"), "{err}");
    let copy = sh(&format!("cd {d}/copy && lsattr -d -p . f | sed 's/  */ /g'"));
    let orig = sh(&format!("cd {d}/d && lsattr -d -p . f | sed 's/  */ /g'"));
    assert_eq!(copy, orig, "the copy's flags and projects");
    let refused = common::sh_output(&format!("rm -f {d}/copy/f"));
    assert!(!refused.status.success(), "the copy is immutable");
    dst.umount();
}

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
