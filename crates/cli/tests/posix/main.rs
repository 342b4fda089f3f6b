//! A POSIX conformance suite of our own, run through a mounted volume: the
//! errno of every failure case of every operation (as root, and as
//! unprivileged users through the kernel's permission checks), which times
//! each operation changes, and explicit times kept to the nanosecond across
//! a remount.
//!
//! A test binary without libtest's harness: cases that run as another user
//! need a process of that user, which is this binary started again with
//! `--child DIR CASE...` and the user's ids.
//!
//! `DUALFS_POSIX_DIR=/some/dir cargo test --test posix` runs the suite in a
//! directory of another file system instead (ext4 is the reference): the
//! expectations are the ones Linux file systems meet, except for the few
//! cases marked as knowingly different.

// Test code: a failed expect is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod errno_cases;
mod sys;
mod time_cases;

use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use errno_cases::{Case, Host, USER, Who};
use nix::errno::Errno;

fn describe(r: &Result<(), Errno>) -> String {
    match r {
        Ok(()) => "success".into(),
        Err(e) => format!("{e:?}"),
    }
}

/// `--child DIR CASE...`: runs the operations of the named cases in their
/// directories under DIR, as whoever this process is, and prints
/// `errno<TAB>name` for each (0 for success).
fn child(args: &[String]) -> ExitCode {
    let base = PathBuf::from(&args[0]);
    let cases = errno_cases::cases();
    let mut out = std::io::stdout().lock();
    for name in &args[1..] {
        let Some(c) = cases.iter().find(|c| c.name == name) else {
            eprintln!("no case {name}");
            return ExitCode::FAILURE;
        };
        let code = match (c.op)(&base.join(dir_name(c.name))) {
            Ok(()) => 0,
            Err(e) => e as i32,
        };
        let _ = writeln!(out, "{code}\t{name}");
    }
    ExitCode::SUCCESS
}

/// A directory name for a case.
fn dir_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// Runs the operations of `cases` as `uid` (gid the same, no supplementary
/// groups) in one child process; returns their results in order.
fn run_as(uid: u32, base: &Path, cases: &[&Case]) -> Vec<Result<(), Errno>> {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .arg("--child")
        .arg(base)
        .args(cases.iter().map(|c| c.name))
        .uid(uid)
        .gid(uid)
        .output()
        .expect("start child");
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let results: Vec<Result<(), Errno>> = text
        .lines()
        .map(|l| match l.split('\t').next().and_then(|c| c.parse::<i32>().ok()) {
            Some(0) => Ok(()),
            Some(code) => Err(Errno::from_raw(code)),
            None => Err(Errno::UnknownErrno),
        })
        .collect();
    assert_eq!(results.len(), cases.len(), "child output: {text}");
    results
}

/// The errno table; returns the failures.
fn run_errno_cases(base: &Path, filter: &[String], on_host: bool) -> (usize, Vec<String>) {
    let all = errno_cases::cases();
    let selected: Vec<&Case> =
        all.iter().filter(|c| filter.is_empty() || filter.iter().any(|f| c.name.contains(f.as_str()))).collect();
    for c in &selected {
        let d = base.join(dir_name(c.name));
        std::fs::create_dir(&d).expect("case directory");
        errno_cases::prepare_dir(&d);
        (c.setup)(&d);
    }
    let mut results: Vec<Option<Result<(), Errno>>> = vec![None; selected.len()];
    for (i, c) in selected.iter().enumerate() {
        if c.who == Who::Root {
            results[i] = Some((c.op)(&base.join(dir_name(c.name))));
        }
    }
    let users: Vec<usize> = (0..selected.len()).filter(|&i| selected[i].who == Who::User).collect();
    let as_user: Vec<&Case> = users.iter().map(|&i| selected[i]).collect();
    if !as_user.is_empty() {
        for (i, r) in users.iter().zip(run_as(USER, base, &as_user)) {
            results[*i] = Some(r);
        }
    }
    let mut failures = Vec::new();
    for (c, r) in selected.iter().zip(results) {
        let got = r.expect("every case ran");
        let want = match c.host {
            Host::Differs(h) if on_host => h,
            _ => c.expect,
        };
        if got != want {
            failures.push(format!("{}: expected {}, got {}", c.name, describe(&want), describe(&got)));
        }
    }
    (selected.len(), failures)
}

/// The timestamp table; returns the failures.
fn run_time_cases(base: &Path, filter: &[String], on_host: bool) -> (usize, Vec<String>) {
    let mut n = 0;
    let mut failures = Vec::new();
    for c in time_cases::cases() {
        if !filter.is_empty() && !filter.iter().any(|f| c.name.contains(f.as_str())) {
            continue;
        }
        n += 1;
        let d = base.join(format!("time_{}", dir_name(c.name)));
        std::fs::create_dir(&d).expect("case directory");
        for w in time_cases::run(&c, &d, on_host) {
            failures.push(format!("times of {}: {w}", c.name));
        }
    }
    (n, failures)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    if args.iter().any(|a| a == "--list") {
        println!("posix: test");
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--ignored") {
        return ExitCode::SUCCESS;
    }
    let filter: Vec<String> = args.into_iter().filter(|a| !a.starts_with('-')).collect();
    if !common::can_mount() {
        return ExitCode::SUCCESS;
    }
    let host_dir = std::env::var_os("DUALFS_POSIX_DIR").map(PathBuf::from);
    let mut volume = None;
    let base = match &host_dir {
        Some(d) => {
            let base = d.join(format!("posix-{}", std::process::id()));
            std::fs::create_dir(&base).expect("base directory");
            base
        }
        None => {
            let mut v = common::TestVolume::create("512M").expect("volume");
            // Other users reach a FUSE mount only with allow_other.
            v.mount_with("allow_other");
            let base = v.path("posix");
            volume = Some(v);
            std::fs::create_dir(&base).expect("base directory");
            base
        }
    };
    errno_cases::prepare_dir(&base);
    let (errno_count, mut failures) = run_errno_cases(&base, &filter, host_dir.is_some());
    let (time_count, time_failures) = run_time_cases(&base, &filter, host_dir.is_some());
    failures.extend(time_failures);
    let explicit = base.join("explicit_times");
    std::fs::create_dir(&explicit).expect("directory");
    failures.extend(time_cases::set_explicit(&explicit));
    failures.extend(time_cases::check_explicit(&explicit));
    if let Some(v) = &mut volume {
        // Every change made durable and read back from the devices.
        v.remount();
        failures.extend(time_cases::check_explicit(&explicit).into_iter().map(|f| format!("after a remount: {f}")));
        v.umount();
    }
    println!("posix: {errno_count} errno cases, {time_count} timestamp cases, explicit times");
    for f in &failures {
        println!("FAILED {f}");
    }
    if failures.is_empty() {
        println!("posix: ok");
        ExitCode::SUCCESS
    } else {
        println!("posix: {} failures", failures.len());
        ExitCode::FAILURE
    }
}
