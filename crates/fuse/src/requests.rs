//! Requests served since mount, per kernel opcode: how many, how long
//! the adapter spent on them (from dispatch to reply, engine included),
//! and how much of that they waited for a lock of the volume that another
//! thread held (a seal, another request).
//!
//! `dualfs stats` shows them (`fuse_requests` in the `dualfs.stats`
//! control attribute), so anyone can see which requests a workload sends
//! and where the serving time goes, without a profiler. Three relaxed atomic
//! additions, two clock readings and two thread-local reads per request:
//! a few tens of nanoseconds against a round trip of several microseconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use dualfs_engine::volume::lock_wait_ns;
use serde_json::{Map, Value, json};

/// The requests the adapter answers, named as the kernel names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Ioctl,
    Fallocate,
    Lseek,
    CopyFileRange,
}

impl Op {
    /// Every opcode, in the order of [`Op::name`]'s table.
    pub const ALL: [Op; 34] = [
        Op::Lookup,
        Op::Forget,
        Op::Getattr,
        Op::Setattr,
        Op::Readlink,
        Op::Mknod,
        Op::Mkdir,
        Op::Unlink,
        Op::Rmdir,
        Op::Symlink,
        Op::Rename,
        Op::Link,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Release,
        Op::Fsync,
        Op::Opendir,
        Op::Readdir,
        Op::Readdirplus,
        Op::Releasedir,
        Op::Fsyncdir,
        Op::Statfs,
        Op::Setxattr,
        Op::Getxattr,
        Op::Listxattr,
        Op::Removexattr,
        Op::Access,
        Op::Create,
        Op::Ioctl,
        Op::Fallocate,
        Op::Lseek,
        Op::CopyFileRange,
    ];

    /// The kernel's name (`FUSE_LOOKUP` without the prefix).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "LOOKUP",
            Op::Forget => "FORGET",
            Op::Getattr => "GETATTR",
            Op::Setattr => "SETATTR",
            Op::Readlink => "READLINK",
            Op::Mknod => "MKNOD",
            Op::Mkdir => "MKDIR",
            Op::Unlink => "UNLINK",
            Op::Rmdir => "RMDIR",
            Op::Symlink => "SYMLINK",
            Op::Rename => "RENAME",
            Op::Link => "LINK",
            Op::Open => "OPEN",
            Op::Read => "READ",
            Op::Write => "WRITE",
            Op::Flush => "FLUSH",
            Op::Release => "RELEASE",
            Op::Fsync => "FSYNC",
            Op::Opendir => "OPENDIR",
            Op::Readdir => "READDIR",
            Op::Readdirplus => "READDIRPLUS",
            Op::Releasedir => "RELEASEDIR",
            Op::Fsyncdir => "FSYNCDIR",
            Op::Statfs => "STATFS",
            Op::Setxattr => "SETXATTR",
            Op::Getxattr => "GETXATTR",
            Op::Listxattr => "LISTXATTR",
            Op::Removexattr => "REMOVEXATTR",
            Op::Access => "ACCESS",
            Op::Create => "CREATE",
            Op::Ioctl => "IOCTL",
            Op::Fallocate => "FALLOCATE",
            Op::Lseek => "LSEEK",
            Op::CopyFileRange => "COPY_FILE_RANGE",
        }
    }
}

#[derive(Debug, Default)]
struct Counter {
    count: AtomicU64,
    nanos: AtomicU64,
    /// Of `nanos`, waited for a lock another thread held.
    wait_nanos: AtomicU64,
}

/// Counts and serving times per opcode.
#[derive(Debug)]
pub struct RequestStats {
    ops: [Counter; Op::ALL.len()],
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats { ops: std::array::from_fn(|_| Counter::default()) }
    }
}

/// Times one request; adds it to the stats when dropped (after the reply).
#[derive(Debug)]
pub struct Timer<'a> {
    counter: &'a Counter,
    start: Instant,
    /// This thread's lock waits before the request ([`lock_wait_ns`]).
    waited: u64,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counter.count.fetch_add(1, Ordering::Relaxed);
        self.counter.nanos.fetch_add(ns, Ordering::Relaxed);
        let waited = lock_wait_ns().saturating_sub(self.waited);
        if waited > 0 {
            self.counter.wait_nanos.fetch_add(waited, Ordering::Relaxed);
        }
    }
}

impl RequestStats {
    /// Starts timing a request of `op`.
    #[must_use]
    pub fn time(&self, op: Op) -> Timer<'_> {
        Timer { counter: &self.ops[op as usize], start: Instant::now(), waited: lock_wait_ns() }
    }

    /// `(count, total nanoseconds)` of `op` so far.
    #[must_use]
    pub fn get(&self, op: Op) -> (u64, u64) {
        let c = &self.ops[op as usize];
        (c.count.load(Ordering::Relaxed), c.nanos.load(Ordering::Relaxed))
    }

    /// Nanoseconds requests of `op` waited for locks so far.
    #[must_use]
    pub fn lock_wait(&self, op: Op) -> u64 {
        self.ops[op as usize].wait_nanos.load(Ordering::Relaxed)
    }

    /// The opcodes seen, each with `count`, `total_us`, `mean_us` and
    /// `lock_wait_us` (of `total_us`, waited for a lock another thread held).
    #[must_use]
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        for op in Op::ALL {
            let (count, nanos) = self.get(op);
            if count == 0 {
                continue;
            }
            let mean = nanos as f64 / count as f64 / 1000.0;
            m.insert(
                op.name().to_string(),
                json!({
                    "count": count,
                    "total_us": nanos / 1000,
                    "mean_us": (mean * 100.0).round() / 100.0,
                    "lock_wait_us": self.lock_wait(op) / 1000,
                }),
            );
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_table_and_requests_are_counted() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i, "{op:?} indexes its own counter");
        }
        let s = RequestStats::default();
        drop(s.time(Op::Lookup));
        drop(s.time(Op::Lookup));
        drop(s.time(Op::Write));
        assert_eq!(s.get(Op::Lookup).0, 2);
        let j = s.json();
        assert_eq!(j["LOOKUP"]["count"], 2);
        assert_eq!(j["WRITE"]["count"], 1);
        assert_eq!(j["WRITE"]["lock_wait_us"], 0, "nothing held a lock");
        assert!(j.get("READ").is_none(), "opcodes never seen are left out");
    }
}
