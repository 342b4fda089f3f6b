//! What the kernel tests share: whether they can mount, and the fuse
//! module's `enable_uring`, set for a test's length and put back.

#![allow(dead_code, clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

pub const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Taken (flock) by whoever needs `enable_uring` to hold a value for a
/// while, across processes (the CLI's tests, bench/uring_rt.py): the
/// parameter is the whole machine's.
const PARAM_FLOCK: &str = "/run/lock/dualfs-enable-uring.lock";

pub fn can_mount() -> bool {
    if !nix::unistd::Uid::effective().is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

/// The tests of one binary that set `enable_uring` take turns.
static PARAM_LOCK: Mutex<()> = Mutex::new(());

/// Sets `enable_uring` for the test's length and puts back what was there.
pub struct UringParam {
    old: String,
    _flock: nix::fcntl::Flock<fs::File>,
    _turn: MutexGuard<'static, ()>,
}

impl UringParam {
    pub fn set(on: bool) -> Option<Self> {
        let guard = PARAM_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let file = fs::OpenOptions::new().create(true).append(true).open(PARAM_FLOCK).ok()?;
        let flock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).ok()?;
        let old = fs::read_to_string(PARAM).ok()?;
        fs::write(PARAM, if on { "Y" } else { "N" }).ok()?;
        Some(Self { old: old.trim().to_string(), _flock: flock, _turn: guard })
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let _ = fs::write(PARAM, &self.old);
    }
}

/// Requests of opcode `op` in a report's counts.
pub fn count(counts: &[(u32, u64)], op: u32) -> u64 {
    counts.iter().find(|c| c.0 == op).map_or(0, |c| c.1)
}

/// Pins the calling thread to CPU 0, so that its requests go to queue 0.
pub fn pin_to_cpu0() {
    let mut set = nix::sched::CpuSet::new();
    set.set(0).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
}

/// A GETATTR that reaches the server even with attributes cached.
pub fn forced_stat(p: &Path) {
    rustix::fs::statx(rustix::fs::CWD, p, rustix::fs::AtFlags::STATX_FORCE_SYNC, rustix::fs::StatxFlags::BASIC_STATS)
        .unwrap();
}
