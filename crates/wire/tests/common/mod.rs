//! What the kernel tests share: whether they can mount, the fuse module's
//! `enable_uring`, set for a test's length and put back, and the file
//! system they serve: the benchmarks' no-work tree, watched.

#![allow(dead_code, clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use dualfs_wire::abi::{InHeader, InitIn, InitOut, ReplyBuf, Request};
use dualfs_wire::{Handler, Outcome};

// The in-memory tree of the no-work server (crates/bench), one copy for
// both: a handler that answers every request the kernel tests send.
#[path = "../../../bench/src/no_work/tree.rs"]
mod tree;

pub const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Taken (flock) by whoever needs `enable_uring` to hold a value for a
/// while, across processes (the CLI's tests, bench/uring_rt.py): the
/// parameter is the whole machine's.
const PARAM_FLOCK: &str = "/run/lock/dualfs-enable-uring.lock";

/// Says why a test cannot run here and fails it, unless the developer
/// allowed that with `DUALFS_ALLOW_SKIP=1` (CI never does): a machine that
/// cannot run the kernel tests must not report them passed.
pub fn skip(why: &str) {
    if std::env::var_os("DUALFS_ALLOW_SKIP").is_some_and(|v| v == "1") {
        println!("SKIPPED: {why}");
        return;
    }
    panic!("cannot run here: {why} (DUALFS_ALLOW_SKIP=1 lets tests that cannot run pass)");
}

/// Whether the kernel tests can run here; if not, [`skip`] says why.
pub fn can_mount() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        skip("the kernel tests mount, which needs root");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        skip("/dev/fuse is missing (modprobe fuse)");
        return false;
    }
    true
}

/// Sets `enable_uring` (see [`UringParam`]) or, where the kernel has no
/// such parameter, [`skip`]s.
pub fn uring_param(on: bool) -> Option<UringParam> {
    let p = UringParam::set(on);
    if p.is_none() {
        skip(&format!("cannot set {PARAM} (a kernel before 6.14, or without CONFIG_FUSE_IO_URING)"));
    }
    p
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

/// FSYNCs held back by a test: `held` while the test wants them to wait,
/// `waiting` how many are waiting now.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(bool, u32)>,
    cv: Condvar,
}

/// The no-work tree, with what the tests watch: how often the transport
/// said the session ended, and FSYNCs held in the handler on demand (a
/// request that blocks, for the tests that it stalls no other).
#[derive(Debug, Default)]
pub struct TestFs {
    tree: tree::Fs,
    gate: Gate,
    destroyed: AtomicU32,
}

impl TestFs {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times the transport said the session ended (once, or a bug).
    pub fn destroyed(&self) -> u32 {
        self.destroyed.load(Ordering::Acquire)
    }

    /// From now on FSYNC waits in the handler until [`TestFs::release_fsyncs`].
    pub fn hold_fsyncs(&self) {
        self.gate.state.lock().unwrap().0 = true;
    }

    /// Lets the waiting FSYNCs (and later ones) go.
    pub fn release_fsyncs(&self) {
        self.gate.state.lock().unwrap().0 = false;
        self.gate.cv.notify_all();
    }

    /// Waits until `n` FSYNCs are held in the handler.
    pub fn wait_for_held_fsyncs(&self, n: u32) {
        let mut g = self.gate.state.lock().unwrap();
        while g.1 < n {
            g = self.gate.cv.wait(g).unwrap();
        }
    }

    fn fsync_gate(&self) {
        let mut g = self.gate.state.lock().unwrap();
        if !g.0 {
            return;
        }
        g.1 += 1;
        self.gate.cv.notify_all();
        while g.0 {
            g = self.gate.cv.wait(g).unwrap();
        }
        g.1 -= 1;
    }
}

impl Handler for TestFs {
    fn init(&self, offer: &InitIn) -> InitOut {
        self.tree.init(offer)
    }

    fn handle(&self, h: &InHeader, req: Request<'_>, out: &mut ReplyBuf<'_>) -> Outcome {
        if matches!(req, Request::Fsync { .. }) {
            self.fsync_gate();
        }
        self.tree.handle(h, req, out)
    }

    fn destroy(&self) {
        self.destroyed.fetch_add(1, Ordering::AcqRel);
    }
}
