//! Which inodes the kernel holds open for writing, so that an LSEEK knows
//! whether the kernel's page cache may hold data the volume has not been
//! handed (docs/DESIGN.md, "SEEK_DATA and SEEK_HOLE under the writeback
//! cache").
//!
//! With the writeback cache a write(2) ends in the kernel's pages; they
//! reach the volume at write-back, and at every close (the kernel's
//! `fuse_flush` writes a file's dirty pages before anything else). So a
//! file nobody holds open for writing has no dirty page, and one that is
//! held may have some. A shared writable mapping holds its file open until
//! unmapped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Open-for-writing handles per node id, counted from OPEN, CREATE and
/// TMPFILE to RELEASE.
#[derive(Debug, Default)]
pub struct Writers {
    open: Mutex<HashMap<u64, u32>>,
    /// LSEEKs waiting for the kernel's write-back right now.
    flushing: AtomicUsize,
}

/// Whether `open(2)` flags `flags` open for writing.
fn writes(flags: u32) -> bool {
    flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
}

impl Writers {
    /// A handle of `node` opened with `flags`.
    pub fn opened(&self, node: u64, flags: u32) {
        if writes(flags) {
            *self.lock().entry(node).or_insert(0) += 1;
        }
    }

    /// A handle of `node` opened with `flags` was released.
    pub fn released(&self, node: u64, flags: u32) {
        if !writes(flags) {
            return;
        }
        let mut open = self.lock();
        if let Some(n) = open.get_mut(&node) {
            *n -= 1;
            if *n == 0 {
                open.remove(&node);
            }
        }
    }

    /// Whether some handle of `node` is open for writing.
    pub fn any(&self, node: u64) -> bool {
        self.lock().contains_key(&node)
    }

    /// A place among at most `limit` LSEEKs waiting for write-back at once,
    /// or None: each holds a serving thread, and the write-back it waits
    /// for needs another.
    pub fn flush_slot(&self, limit: usize) -> Option<FlushSlot<'_>> {
        let mut now = self.flushing.load(Ordering::Relaxed);
        loop {
            if now >= limit {
                return None;
            }
            match self.flushing.compare_exchange(now, now + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(FlushSlot(&self.flushing)),
                Err(seen) => now = seen,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u32>> {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One LSEEK's place while it waits for write-back; freed when dropped.
#[derive(Debug)]
pub struct FlushSlot<'a>(&'a AtomicUsize);

impl Drop for FlushSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_handles_open_for_writing_count_until_released() {
        let w = Writers::default();
        w.opened(5, libc::O_RDONLY as u32);
        assert!(!w.any(5));
        w.opened(5, libc::O_WRONLY as u32);
        w.opened(5, (libc::O_RDWR | libc::O_APPEND) as u32);
        w.released(5, libc::O_RDONLY as u32);
        w.released(5, libc::O_WRONLY as u32);
        assert!(w.any(5), "one writer is left");
        w.released(5, libc::O_RDWR as u32);
        assert!(!w.any(5));
        w.released(5, libc::O_RDWR as u32);
        assert!(!w.any(5), "a stray release changes nothing");
    }

    #[test]
    fn flush_slots_are_bounded_and_come_back() {
        let w = Writers::default();
        let a = w.flush_slot(2).unwrap();
        let _b = w.flush_slot(2).unwrap();
        assert!(w.flush_slot(2).is_none());
        drop(a);
        assert!(w.flush_slot(2).is_some());
        assert!(w.flush_slot(0).is_none());
    }
}
