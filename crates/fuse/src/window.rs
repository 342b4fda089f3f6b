//! How much written data the kernel may hold for the mount before passing
//! it on: small while an fsync waits beside a stream, larger otherwise.
//!
//! With the writeback cache, the kernel passes written pages on in
//! background WRITE requests, one FIFO per connection, throttling writers
//! once the mount's dirty window (`/sys/class/bdi/MAJ:MIN/max_bytes`) is
//! full. A small window keeps an fsync's pages from waiting behind a copy's
//! (a database beside a copy: DESIGN.md, "The kernel's window follows what
//! waits"), but throttles a stream alone to half its speed. So the window
//! is the large one until an fsync of one file arrives while another file
//! streams, and the small one from then until no such fsync came for a
//! while.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A write at least this large is a stream's (the kernel's write-back of a
/// file written sequentially sends runs of pages; a database's are pages).
const STREAM_WRITE: usize = 64 << 10;
/// A file that wrote a stream's write this recently still streams.
const STREAM_FRESH: Duration = Duration::from_secs(1);
/// The small window stays this long after the last fsync beside a stream.
const SHARED_HOLD: Duration = Duration::from_secs(5);

/// The rule, apart from the clock and the kernel: each event returns the
/// window to set, when it changes.
#[derive(Debug, Clone)]
pub struct WindowPolicy {
    shared: u64,
    alone: u64,
    current: u64,
    stream: Option<(u64, Instant)>,
    shared_since: Option<Instant>,
}

impl WindowPolicy {
    /// Starts with the `alone` window, which the caller sets first.
    #[must_use]
    pub fn new(shared: u64, alone: u64) -> WindowPolicy {
        WindowPolicy { shared, alone, current: alone, stream: None, shared_since: None }
    }

    /// The window in force.
    #[must_use]
    pub fn current(&self) -> u64 {
        self.current
    }

    /// A WRITE of `len` bytes to inode `ino` arrived at `now`.
    pub fn on_write(&mut self, ino: u64, len: usize, now: Instant) -> Option<u64> {
        if len >= STREAM_WRITE {
            self.stream = Some((ino, now));
        }
        let held = self.shared_since.is_some_and(|t| now.saturating_duration_since(t) < SHARED_HOLD);
        (self.current != self.alone && !held).then(|| {
            self.current = self.alone;
            self.alone
        })
    }

    /// An fsync of inode `ino` arrived at `now`.
    pub fn on_fsync(&mut self, ino: u64, now: Instant) -> Option<u64> {
        let beside = self.stream.is_some_and(|(s, t)| s != ino && now.saturating_duration_since(t) < STREAM_FRESH);
        if !beside {
            return None;
        }
        self.shared_since = Some(now);
        (self.current != self.shared).then(|| {
            self.current = self.shared;
            self.shared
        })
    }
}

/// The policy and how to set the kernel's window (the mounting code
/// knows where it lives).
pub struct DirtyWindow {
    policy: Mutex<WindowPolicy>,
    set: Box<dyn Fn(u64) + Send + Sync>,
}

impl fmt::Debug for DirtyWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirtyWindow").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl DirtyWindow {
    /// Sets `alone` now through `set`, and `shared` when an fsync comes
    /// beside a stream.
    pub fn new(shared: u64, alone: u64, set: Box<dyn Fn(u64) + Send + Sync>) -> DirtyWindow {
        set(alone);
        DirtyWindow { policy: Mutex::new(WindowPolicy::new(shared, alone)), set }
    }

    fn apply(&self, event: impl FnOnce(&mut WindowPolicy) -> Option<u64>) {
        let change = event(&mut self.policy.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if let Some(bytes) = change {
            (self.set)(bytes);
        }
    }

    /// See [`WindowPolicy::on_write`].
    pub fn write(&self, ino: u64, len: usize) {
        self.apply(|p| p.on_write(ino, len, Instant::now()));
    }

    /// See [`WindowPolicy::on_fsync`].
    pub fn fsync(&self, ino: u64) {
        self.apply(|p| p.on_fsync(ino, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 2 << 20;
    const A: u64 = 8 << 20;

    #[test]
    fn an_fsync_beside_a_stream_shrinks_the_window_until_a_while_after_the_last() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut p = WindowPolicy::new(S, A);
        assert_eq!(p.on_write(7, 1 << 20, at(0)), None);
        // The stream's own fsync (dd conv=fsync) leaves the window large.
        assert_eq!(p.on_fsync(7, at(10)), None);
        // A database's fsync beside it shrinks it, once.
        assert_eq!(p.on_write(9, 4096, at(20)), None);
        assert_eq!(p.on_fsync(9, at(30)), Some(S));
        assert_eq!(p.on_fsync(9, at(40)), None);
        assert_eq!(p.current(), S);
        // Writes keep it small while fsyncs keep coming.
        assert_eq!(p.on_write(7, 1 << 20, at(3_000)), None);
        assert_eq!(p.on_fsync(9, at(3_500)), None);
        assert_eq!(p.on_write(7, 1 << 20, at(8_000)), None);
        // Five seconds after the last, the stream has the large window back.
        assert_eq!(p.on_write(7, 1 << 20, at(8_600)), Some(A));
        assert_eq!(p.current(), A);
    }

    #[test]
    fn an_fsync_long_after_a_stream_or_beside_small_writes_changes_nothing() {
        let t0 = Instant::now();
        let mut p = WindowPolicy::new(S, A);
        assert_eq!(p.on_write(7, 1 << 20, t0), None);
        assert_eq!(p.on_fsync(9, t0 + Duration::from_secs(2)), None);
        let mut q = WindowPolicy::new(S, A);
        assert_eq!(q.on_write(7, 4096, t0), None);
        assert_eq!(q.on_fsync(9, t0), None);
        assert_eq!(q.current(), A);
    }

    #[test]
    fn the_kernel_is_told_only_changes() {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let w = DirtyWindow::new(S, A, Box::new(move |b| log.lock().unwrap().push(b)));
        w.write(7, 1 << 20);
        w.fsync(9);
        w.fsync(9);
        assert_eq!(*seen.lock().unwrap(), vec![A, S]);
    }
}
