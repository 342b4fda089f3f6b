//! Receive, migrate, mount and the admin commands under bad input, through
//! the binary (needs root and /dev/fuse; loop devices for one case): a
//! receive killed midway is a state fsck reports (status 0), `-p` passes
//! and `-y` keeps (nothing into lost+found), the mount and `dualfs stats`
//! name, and that ends by receiving the stream again or `receive --abort`;
//! a crafted stream with valid checksums is refused with the mirror left as
//! it was; a mount that cannot open its log exits non-zero, whatever form
//! it is run in; a target that lives on the volume itself (a path, a
//! symlink, a bind mount, a loop device over a file on it) is refused; a
//! dead mount is named; `dualfs sync` fails when a mount's process is gone;
//! metarestore refuses devices of 0 bytes and runs near 2^64; cache= is
//! bounded by the machine and commit=0 is the default interval.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{DUALFS, TestVolume, dualfs, is_mounted, sh, sh_output};
use dualfs_engine::format::stream::{self, FRAME_CRC_LEN, FRAME_HEAD_LEN, PRELUDE_LEN, Record, StreamCounts};
use dualfs_engine::types::{FileKind, InodeNo};

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "failed ({}):\n{}", out.status, text(out));
    text(out)
}

fn fails(out: &std::process::Output, says: &str) -> String {
    let t = text(out);
    assert!(!out.status.success(), "succeeded, expected a failure saying {says:?}:\n{t}");
    assert!(t.contains(says), "expected {says:?} in:\n{t}");
    t
}

fn devices(v: &TestVolume) -> [String; 2] {
    [v.meta.display().to_string(), v.data.display().to_string()]
}

/// A source volume holding `files` small files in 30 directories and a
/// snapshot `s` of them, sent to `stream` (a file in the source's folder).
fn source_stream(src: &mut TestVolume, files: u32) -> String {
    src.mount();
    let s = src.m().to_string();
    sh(&format!(
        "cd {s} && for d in $(seq 1 30); do mkdir d$d; done && for i in $(seq 1 {files}); do echo file $i > d$((i % \
         30 + 1))/f$i; done && ln d1/f30 hard && mkdir -p deep/er && echo x > deep/er/y"
    ));
    ok(&dualfs(&["snapshot", "create", &s, "s"]));
    let stream = src.dir.path().join("s.stream").display().to_string();
    sh(&format!("{DUALFS} send s {s} > {stream}"));
    stream
}

/// `dualfs receive META DATA` fed the first `part` of `stream` through a
/// pipe that stays open, killed with SIGKILL once it has read what it was
/// given and gone idle: a receive a crash interrupted.
fn receive_killed(dst: &TestVolume, stream: &str, part: f64) {
    let bytes = std::fs::read(stream).unwrap();
    let [m, d] = devices(dst);
    let mut child =
        Command::new(DUALFS).args(["receive", &m, &d]).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let cut = (bytes.len() as f64 * part) as usize;
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes[..cut]);
        // Held open: the receive waits for more.
        std::thread::sleep(Duration::from_secs(600));
        drop(input);
    });
    let io = format!("/proc/{}/io", child.id());
    let read = || {
        std::fs::read_to_string(&io)
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("rchar: ").and_then(|v| v.parse::<u64>().ok())))
            .unwrap_or(0)
    };
    let start = Instant::now();
    let (mut last, mut since) = (read(), Instant::now());
    while since.elapsed() < Duration::from_secs(2) || last < cut as u64 / 2 {
        assert!(start.elapsed() < Duration::from_secs(120), "the receive never read its stream");
        std::thread::sleep(Duration::from_millis(100));
        let now = read();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(writer);
    assert!(common::wait_unlocked(&dst.meta, Duration::from_secs(30)), "the killed receive still holds the volume");
}

#[test]
fn a_receive_killed_midway_is_reported_kept_by_repair_and_finished_or_abandoned() {
    let Some(mut src) = TestVolume::create("256M") else { return };
    let Some(mut dst) = TestVolume::create("256M") else { return };
    let stream = source_stream(&mut src, 2500);
    let [m, d] = devices(&dst);
    receive_killed(&dst, &stream, 0.6);
    // fsck: reported, status 0 (the disagreements it explains listed apart).
    let t = ok(&dualfs(&["fsck", &m, &d]));
    assert!(t.contains("a receive is under way"), "{t}");
    // -p: no UNEXPECTED INCONSISTENCY; -y: nothing into lost+found, and
    // the receive still under way.
    let t = ok(&dualfs(&["fsck", "-p", &m, &d]));
    assert!(!t.contains("UNEXPECTED"), "{t}");
    let out = dualfs(&["fsck", "-y", &m, &d]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "fsck -y: {}", text(&out));
    assert!(!text(&out).contains("lost+found"), "{}", text(&out));
    assert!(ok(&dualfs(&["fsck", &m, &d])).contains("a receive is under way"));
    // Another stream is refused; the mount and stats say so.
    let other = src.dir.path().join("other.stream").display().to_string();
    ok(&dualfs(&["snapshot", "create", src.m(), "t"]));
    sh(&format!("{DUALFS} send t {} > {other}", src.m()));
    fails(&dualfs(&["receive", "--file", &other, &m, &d]), "--abort");
    let t = ok(&dualfs(&["mount", &m, &d, dst.m()]));
    assert!(t.contains("a receive is under way"), "{t}");
    assert!(ok(&dualfs(&["stats", dst.m()])).contains("a receive is under way"));
    fails(&dualfs(&["snapshot", "create", dst.m(), "early"]), "a receive is under way");
    // Finished through the mount by the same stream.
    let t = ok(&sh_output(&format!("{DUALFS} receive {} < {stream}", dst.m())));
    assert!(t.contains("interrupted receive finished"), "{t}");
    assert_eq!(listing(src.m()), listing(dst.m()), "the mirror is not the source");
    dst.umount();
    // Killed again, then abandoned: back to the empty volume.
    let Some(dst2) = TestVolume::create("256M") else { return };
    let [m2, d2] = devices(&dst2);
    receive_killed(&dst2, &stream, 0.5);
    let t = ok(&dualfs(&["receive", "--abort", &m2, &d2]));
    assert!(t.contains("abandoned the receive under way"), "{t}");
    let t = ok(&dualfs(&["fsck", &m2, &d2]));
    assert!(t.contains("the volume is consistent") && !t.contains("under way"), "{t}");
    fails(&dualfs(&["receive", "--abort", &m2, &d2]), "no receive is under way");
    ok(&dualfs(&["receive", "--file", &stream, &m2, &d2]));
    ok(&dualfs(&["fsck", &m2, &d2]));
    src.umount();
}

/// What a tree holds, for comparing two: names, types, modes, links,
/// sizes, inode numbers and the files' bytes.
fn listing(root: &str) -> String {
    sh(&format!(
        "cd {root} && find . -printf '%p %y %m %n %s %i\\n' | sort && cat $(find . -type f | sort) | sha256sum"
    ))
}

#[test]
fn a_stream_cut_short_is_refused_and_leaves_the_last_complete_tree_fsck_calls_clean() {
    let Some(mut src) = TestVolume::create("256M") else { return };
    let Some(mut dst) = TestVolume::create("256M") else { return };
    let full = source_stream(&mut src, 2500);
    let dir = src.dir.path().display().to_string();
    let s = src.m().to_string();
    // An increment from s: files changed, removed, moved, a hard link.
    sh(&format!(
        "cd {s} && rm -r d2 && mv d3 moved && for i in $(seq 1 400); do echo again $i > d1/n$i; done && ln d4/f3 \
         d5/h && echo more >> deep/er/y"
    ));
    ok(&dualfs(&["snapshot", "create", &s, "t"]));
    let inc = format!("{dir}/t.stream");
    sh(&format!("{DUALFS} send --from s t {s} > {inc}"));
    let [m, d] = devices(&dst);
    dst.mount();
    let empty = listing(dst.m());
    let mnt = dst.m().to_string();
    let cut = |stream: &str| {
        let half = std::fs::metadata(stream).unwrap().len() / 2;
        fails(&sh_output(&format!("head -c {half} {stream} | {DUALFS} receive {mnt}")), "cut short")
    };
    // A full stream cut short: the volume is empty again, and fsck, -p and
    // the next receive say so.
    cut(&full);
    assert_eq!(listing(dst.m()), empty, "the cut full stream left names behind");
    dst.umount();
    let t = ok(&dualfs(&["fsck", &m, &d]));
    assert!(t.contains("the volume is consistent") && !t.contains("under way"), "{t}");
    let t = ok(&dualfs(&["fsck", "-p", &m, &d]));
    assert!(!t.contains("UNEXPECTED"), "{t}");
    // The whole stream then, and an increment cut short: the tree of s.
    ok(&dualfs(&["receive", "--file", &full, &m, &d]));
    dst.mount();
    let first = listing(dst.m());
    cut(&inc);
    assert_eq!(listing(dst.m()), first, "the cut increment left the mirror changed");
    dst.umount();
    let t = ok(&dualfs(&["fsck", "-y", &m, &d]));
    assert!(t.contains("the volume is consistent") && !t.contains("lost+found"), "{t}");
    // The same increment whole: the mirror is the source.
    dst.mount();
    let t = ok(&sh_output(&format!("{DUALFS} receive {} < {inc}", dst.m())));
    assert!(!t.contains("interrupted receive"), "{t}");
    assert_eq!(listing(dst.m()), listing(&s), "the mirror is not the source");
    dst.umount();
    ok(&dualfs(&["fsck", &m, &d]));
    src.umount();
}

/// The records of a stream.
fn records_of(s: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let version = stream::check_prelude(s[..PRELUDE_LEN].try_into().unwrap()).unwrap();
    let mut at = PRELUDE_LEN;
    while at + FRAME_HEAD_LEN <= s.len() {
        let head: [u8; FRAME_HEAD_LEN] = s[at..at + FRAME_HEAD_LEN].try_into().unwrap();
        let end = at + FRAME_HEAD_LEN + stream::frame_len(&head).unwrap() + FRAME_CRC_LEN;
        out.push(stream::decode(version, &head, &s[at + FRAME_HEAD_LEN..end]).unwrap());
        at = end;
    }
    out
}

/// A stream of `records`, sealed, with a right end record.
fn seal(records: &[Record]) -> Vec<u8> {
    let mut out = stream::prelude().to_vec();
    let mut c = StreamCounts::default();
    for r in records.iter().filter(|r| !matches!(r, Record::End(_))) {
        c.records += 1;
        match r {
            Record::Inode(_) => c.inodes += 1,
            Record::Write { data, .. } => c.data_bytes += data.len() as u64,
            Record::Gone(_) => c.gone += 1,
            _ => {}
        }
        out.extend_from_slice(&stream::encode(r));
    }
    out.extend_from_slice(&stream::encode(&Record::End(c)));
    out
}

#[test]
fn crafted_streams_are_refused_and_the_mirror_left_as_it_was() {
    let Some(mut src) = TestVolume::create("256M") else { return };
    let Some(mut dst) = TestVolume::create("256M") else { return };
    let stream = source_stream(&mut src, 40);
    let records = records_of(&std::fs::read(&stream).unwrap());
    let dir = src.dir.path().to_path_buf();
    let dir_ino = records
        .iter()
        .find_map(|r| match r {
            Record::Link { kind: FileKind::Directory, ino, .. } => Some(*ino),
            _ => None,
        })
        .unwrap();
    let root_at = records.iter().position(|r| matches!(r, Record::Inode(a) if a.ino == InodeNo::ROOT)).unwrap();
    let mut cases: Vec<(&str, Vec<Record>)> = Vec::new();
    let mut twice = records.clone();
    twice.insert(root_at + 1, Record::Link { name: b"twice".to_vec(), ino: dir_ino, kind: FileKind::Directory });
    if let Record::Inode(a) = &mut twice[root_at] {
        a.nlink += 1;
    }
    cases.push(("has 2 names", twice));
    let mut root = records.clone();
    let dir_at = records.iter().position(|r| matches!(r, Record::Inode(a) if a.ino == dir_ino)).unwrap();
    root.insert(dir_at + 1, Record::Link { name: b"up".to_vec(), ino: InodeNo::ROOT, kind: FileKind::Directory });
    cases.push(("names the root directory", root));
    let mut ghost = records.clone();
    ghost.insert(root_at + 1, Record::Link { name: b"ghost".to_vec(), ino: InodeNo(70000), kind: FileKind::Regular });
    cases.push(("never creates", ghost));
    let mut typed = records.clone();
    for r in &mut typed {
        if let Record::Link { name, kind, .. } = r
            && name == b"hard"
        {
            *kind = FileKind::Symlink;
        }
    }
    cases.push(("but it is a regular file", typed));
    dst.mount();
    let empty = sh(&format!("cd {} && find . | sort", dst.m()));
    for (i, (says, r)) in cases.iter().enumerate() {
        let path = dir.join(format!("crafted-{i}")).display().to_string();
        std::fs::write(&path, seal(r)).unwrap();
        let t = fails(&sh_output(&format!("{DUALFS} receive {} < {path}", dst.m())), says);
        assert!(t.contains("as it was"), "{t}");
        assert_eq!(sh(&format!("cd {} && find . | sort", dst.m())), empty, "case {says}: the mirror changed");
    }
    dst.umount();
    // Offline too; then the genuine stream.
    let [m, d] = devices(&dst);
    let path = dir.join("crafted-0").display().to_string();
    fails(&dualfs(&["receive", "--file", &path, &m, &d]), "has 2 names");
    ok(&dualfs(&["fsck", &m, &d]));
    ok(&dualfs(&["receive", "--file", &stream, &m, &d]));
    ok(&dualfs(&["fsck", &m, &d]));
    src.umount();
}

#[test]
fn a_mount_that_cannot_start_exits_non_zero_in_every_form() {
    let Some(v) = TestVolume::create("128M") else { return };
    let [m, d] = devices(&v);
    let mnt = v.m();
    let source = format!("{m}#{d}");
    let log_in = format!("log={mnt}/dualfs.log");
    let log_meta = format!("log={m}");
    let trace_data = format!("trace={d}");
    let runs: Vec<(Vec<&str>, &str)> = vec![
        (vec!["mount", "-o", "log=/nonexistent/dir/x", &m, &d, mnt], "cannot open log file"),
        (vec![&source, mnt, "-o", "log=/nonexistent/dir/x"], "cannot open log file"),
        (vec!["mount", "-o", &log_meta, &m, &d, mnt], "is the volume's meta-data device"),
        (vec!["mount", "-o", &log_in, &m, &d, mnt], "lies under the mount point"),
        (vec!["mount", "-o", &trace_data, &m, &d, mnt], "is the volume's data device"),
        (vec!["mount", "-o", "cache=1T", &m, &d, mnt], "of memory"),
        (vec!["mount", "-o", "no_such_option", &m, &d, mnt], ""),
    ];
    for (args, says) in runs {
        let out = dualfs(&args);
        assert!(!out.status.success(), "{args:?} exited 0: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: expected {says:?} in {}", text(&out));
        assert!(!is_mounted(&v.mnt), "{args:?} left a mount");
    }
    // The meta-data image is as it was: nothing was logged into it.
    ok(&dualfs(&["fsck", &m, &d]));
    // commit=0 is the default interval, and the log says it.
    let log = v.dir.path().join("commit0.log").display().to_string();
    ok(&dualfs(&["mount", "-o", &format!("commit=0,log={log}"), &m, &d, mnt]));
    ok(&dualfs(&["umount", mnt]));
    let t = std::fs::read_to_string(&log).unwrap();
    assert!(t.contains("data is committed every 5 s"), "{t}");
}

/// A loop device over `file`, detached when dropped.
struct Loop(String);

impl Loop {
    fn over(file: &str) -> Option<Loop> {
        let out = sh_output(&format!("losetup -f --show {file}"));
        if !out.status.success() {
            println!("SKIPPED (loop device): {}", text(&out));
            return None;
        }
        Some(Loop(String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = sh_output(&format!("losetup -d {}", self.0));
    }
}

#[test]
fn a_target_on_the_volume_itself_is_refused_however_it_is_reached() {
    let Some(mut v) = TestVolume::create("256M") else { return };
    v.mount();
    let mnt = v.m().to_string();
    let dir = v.dir.path().display().to_string();
    sh(&format!("truncate -s 64M {mnt}/inside.img && ln -s {mnt}/inside.img {dir}/link.img && mkdir {dir}/bind"));
    sh(&format!("mount --bind {mnt} {dir}/bind"));
    let inside = format!("{mnt}/inside.img");
    let through_link = format!("{dir}/link.img");
    let through_bind = format!("{dir}/bind/inside.img");
    for new in [&inside, &through_link, &through_bind] {
        fails(&dualfs(&["migrate", "--meta", new, &mnt]), "through its own mount");
        fails(&dualfs(&["migrate", "--data", new, &mnt]), "through its own mount");
    }
    // Relative, from inside the mount.
    let out = Command::new(DUALFS).args(["migrate", "--meta", "inside.img", &mnt]).current_dir(&mnt).output().unwrap();
    fails(&out, "through its own mount");
    // A loop device whose backing file lies on the volume.
    if let Some(dev) = Loop::over(&inside) {
        fails(&dualfs(&["migrate", "--meta", &dev.0, &mnt]), "loop device whose backing file lies");
    }
    // Streams and their spool.
    ok(&dualfs(&["snapshot", "create", &mnt, "s"]));
    fails(&dualfs(&["send", "--file", &format!("{mnt}/s.stream"), "s", &mnt]), "through its own mount");
    sh(&format!("{DUALFS} send s {mnt} > {dir}/s.stream && cp {dir}/s.stream {mnt}/copy.stream"));
    fails(&dualfs(&["receive", "--file", &format!("{mnt}/copy.stream"), &mnt]), "through its own mount");
    fails(&sh_output(&format!("TMPDIR={mnt} {DUALFS} receive {mnt} < {dir}/s.stream")), "spool file");
    // The volume was never held up: it still answers and writes.
    sh(&format!("echo still > {mnt}/after && {DUALFS} sync {mnt} && cat {mnt}/after"));
    sh(&format!("umount {dir}/bind"));
    v.umount();
    // Unmounted: a device named twice, or a loop device over one of them.
    let [m, d] = devices(&v);
    fails(&dualfs(&["migrate", "--meta", &d, &m, &d]), "is the volume's data device");
    if let Some(dev) = Loop::over(&m) {
        fails(&dualfs(&["migrate", "--data", &dev.0, &m, &d]), "is the volume's meta-data device");
    }
}

#[test]
fn a_dead_mount_is_named_and_sync_says_it_did_not_sync() {
    let Some(v) = TestVolume::create("128M") else { return };
    let mut child = v.spawn_mount(&[]);
    child.kill().unwrap();
    child.wait().unwrap();
    let mnt = v.m();
    // Whatever happens below, the dead mount goes.
    struct Detach<'a>(&'a str);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _detach = Detach(mnt);
    // A directory listing goes to the server (the root's attributes may
    // still be cached in the kernel and answer a stat).
    assert!(std::fs::read_dir(mnt).is_err(), "the mount is dead");
    for args in [
        vec!["snapshot", "create", mnt, "x"],
        vec!["snapshot", "list", mnt],
        vec!["resize", mnt],
        vec!["migrate", "--meta", "/tmp/never", mnt],
        vec!["clean", mnt],
        vec!["stats", mnt],
        vec!["sync", mnt],
        vec!["receive", "--abort", mnt],
    ] {
        fails(&dualfs(&args), "dead mount");
    }
    fails(&sh_output(&format!("echo | {DUALFS} receive {mnt}")), "dead mount");
    let [m, d] = devices(&v);
    fails(&dualfs(&["mount", &m, &d, mnt]), "dead mount");
    // Every mount: the others (other tests') are synced, this one named.
    let t = fails(&dualfs(&["sync"]), "not synced");
    assert!(t.contains(&format!("{mnt} (a dead mount")), "{t}");
    ok(&dualfs(&["umount", mnt]));
}

#[test]
fn metarestore_refuses_empty_devices_and_runs_past_the_end() {
    let Some(v) = TestVolume::create("128M") else { return };
    let [m, d] = devices(&v);
    let dir = v.dir.path().display().to_string();
    let dump = format!("{dir}/v.dump");
    ok(&dualfs(&["metadump", &m, &d, &dump]));
    let bytes = std::fs::read(&dump).unwrap();
    let restore = |name: &str, b: &[u8]| {
        let path = format!("{dir}/{name}.dump");
        std::fs::write(&path, b).unwrap();
        dualfs(&["metarestore", &path, &format!("{dir}/{name}-m.img"), &format!("{dir}/{name}-d.img")])
    };
    // Devices of 0 bytes, the header sealed again.
    for at in [16usize, 24] {
        let mut b = bytes.clone();
        b[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
        dualfs_engine::format::checksum::seal(&mut b[..64], 60);
        fails(&restore(&format!("zero{at}"), &b), "0 bytes");
    }
    // A run starting near 2^64, its header sealed again.
    let mut b = bytes.clone();
    b[64 + 8..64 + 16].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    dualfs_engine::format::checksum::seal(&mut b[64..64 + 24], 20);
    fails(&restore("far", &b), "past the end");
    ok(&restore("good", &bytes));
}
