//! [`SwitchDevice`]: a device handle whose device can be replaced while the
//! volume runs (`dualfs migrate`). Between [`SwitchDevice::start_mirror`]
//! and [`SwitchDevice::switch`] every write goes to the device in use and
//! then to its replacement ("mirror update", LinLogFS), and a copier moves
//! what was there before with [`SwitchDevice::copy`]; reads keep coming
//! from the device in use until the switch.
//!
//! A copy of a range and a write to it exclude each other (the copy holds
//! the lock exclusively, writers share it), so the replacement never gets
//! an older block after a newer one: a write either lands before the copy
//! reads (and is copied) or after it wrote (and is mirrored).

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::BlockDevice;
use crate::faults::{self, Fault};
use crate::types::BLOCK_SIZE;

#[derive(Debug)]
struct Inner {
    current: Arc<dyn BlockDevice>,
    mirror: Option<Arc<dyn BlockDevice>>,
    /// Why the last write or flush to the replacement failed: the
    /// migration fails with it; the volume goes on on the device in use.
    mirror_failed: Option<String>,
    /// Devices switched away from, kept open (and so claimed) as long as
    /// the handle: `dualfs umount` waits for the mount's devices, the ones
    /// it was mounted with, to be let go at the close.
    retired: Vec<Arc<dyn BlockDevice>>,
}

/// Ranges of blocks mirrored since mirroring started (start to end,
/// merged): the copier skips them, the replacement has them already.
/// Dropped when it grows past [`MIRRORED_RANGES_MAX`] (random writes): the
/// copier then copies them again, which is only slower.
#[derive(Debug, Default)]
struct Mirrored {
    ranges: BTreeMap<u64, u64>,
    overflow: bool,
}

/// Ranges [`Mirrored`] keeps at most (some 64 MiB).
const MIRRORED_RANGES_MAX: usize = 1 << 20;

impl Mirrored {
    fn add(&mut self, first: u64, end: u64) {
        if self.overflow {
            return;
        }
        let (mut s, mut e) = (first, end);
        if let Some((&ps, &pe)) = self.ranges.range(..=s).next_back()
            && pe >= s
        {
            s = ps;
            e = e.max(pe);
            self.ranges.remove(&ps);
        }
        while let Some((&ns, &ne)) = self.ranges.range(s..=e).next() {
            e = e.max(ne);
            self.ranges.remove(&ns);
        }
        self.ranges.insert(s, e);
        if self.ranges.len() > MIRRORED_RANGES_MAX {
            self.ranges.clear();
            self.overflow = true;
        }
    }

    /// The parts of `first..end` not mirrored.
    fn gaps(&self, first: u64, end: u64) -> Vec<(u64, u64)> {
        let mut at = first;
        if let Some((_, &pe)) = self.ranges.range(..=first).next_back() {
            at = at.max(pe);
        }
        let mut out = Vec::new();
        for (&ns, &ne) in self.ranges.range(first..end) {
            if ns > at {
                out.push((at, ns));
            }
            at = at.max(ne);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }
}

/// A device that can be replaced by another while in use.
#[derive(Debug)]
pub struct SwitchDevice {
    inner: RwLock<Inner>,
    /// Blocks written to the replacement by mirrored writes.
    mirrored: AtomicU64,
    /// Where they went.
    ranges: Mutex<Mirrored>,
}

impl SwitchDevice {
    /// A handle on `dev`.
    #[must_use]
    pub fn new(dev: Arc<dyn BlockDevice>) -> SwitchDevice {
        SwitchDevice {
            inner: RwLock::new(Inner { current: dev, mirror: None, mirror_failed: None, retired: Vec::new() }),
            mirrored: AtomicU64::new(0),
            ranges: Mutex::default(),
        }
    }

    fn read_inner(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_inner(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on every write also goes to `new`, block 0 (the superblock,
    /// which names the device) excepted: the migration writes the
    /// replacement's own.
    pub fn start_mirror(&self, new: Arc<dyn BlockDevice>) {
        let mut i = self.write_inner();
        i.mirror = Some(new);
        i.mirror_failed = None;
        self.mirrored.store(0, Ordering::Relaxed);
        *self.ranges.lock().unwrap_or_else(PoisonError::into_inner) = Mirrored::default();
    }

    /// Stops mirroring (a migration given up); the replacement is let go.
    pub fn stop_mirror(&self) {
        self.write_inner().mirror = None;
    }

    /// Why writing to the replacement failed, if it did.
    #[must_use]
    pub fn mirror_failed(&self) -> Option<String> {
        self.read_inner().mirror_failed.clone()
    }

    /// Blocks mirrored to the replacement since mirroring started.
    #[must_use]
    pub fn mirrored_blocks(&self) -> u64 {
        self.mirrored.load(Ordering::Relaxed)
    }

    /// Copies `count` blocks from `first` of the device in use to the
    /// replacement, no write to the device coming in between, but those
    /// mirrored already; returns how many it copied.
    ///
    /// # Errors
    /// Reading or writing fails, or nothing is being mirrored.
    pub fn copy(&self, first: u64, count: usize) -> io::Result<u64> {
        let i = self.write_inner();
        let Some(mirror) = &i.mirror else {
            return Err(io::Error::other("no replacement device to copy to"));
        };
        let gaps = self.ranges.lock().unwrap_or_else(PoisonError::into_inner).gaps(first, first + count as u64);
        let mut copied = 0;
        for (s, e) in gaps {
            let mut buf = vec![0u8; (e - s) as usize * BLOCK_SIZE];
            i.current.read_blocks(s, &mut buf)?;
            mirror.write_blocks(s, &buf)?;
            copied += e - s;
        }
        Ok(copied)
    }

    /// The replacement becomes the device in use; the old one is no
    /// longer read nor written, but stays open until the handle is
    /// dropped. The caller has made the replacement whole and durable.
    ///
    /// # Errors
    /// Nothing is being mirrored.
    pub fn switch(&self) -> io::Result<()> {
        let mut i = self.write_inner();
        let Some(new) = i.mirror.take() else {
            return Err(io::Error::other("no replacement device to switch to"));
        };
        let old = std::mem::replace(&mut i.current, new);
        i.retired.push(old);
        Ok(())
    }

    fn mirror_error(&self, e: &io::Error) {
        let mut i = self.write_inner();
        if i.mirror_failed.is_none() {
            i.mirror_failed = Some(e.to_string());
        }
    }
}

impl BlockDevice for SwitchDevice {
    fn block_count(&self) -> u64 {
        self.read_inner().current.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_inner().current.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let failed = {
            let i = self.read_inner();
            i.current.write_blocks(first, buf)?;
            let Some(mirror) = i.mirror.as_ref().filter(|_| i.mirror_failed.is_none()) else {
                return Ok(());
            };
            // Block 0 names the device: the replacement keeps its own.
            let (first, buf) = if first == 0 { (1, buf.get(BLOCK_SIZE..).unwrap_or(&[])) } else { (first, buf) };
            if buf.is_empty() {
                return Ok(());
            }
            match mirror.write_blocks(first, buf) {
                Ok(()) => {
                    let n = (buf.len() / BLOCK_SIZE) as u64;
                    self.mirrored.fetch_add(n, Ordering::Relaxed);
                    self.ranges.lock().unwrap_or_else(PoisonError::into_inner).add(first, first + n);
                    return Ok(());
                }
                Err(e) => e,
            }
        };
        self.mirror_error(&failed);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let failed = {
            let i = self.read_inner();
            i.current.flush()?;
            let Some(mirror) = i.mirror.as_ref().filter(|_| i.mirror_failed.is_none()) else {
                return Ok(());
            };
            if faults::active(Fault::MigrateCopyUnsynced) {
                // The broken rule: the replacement is never flushed with
                // the device in use, so the copy is not durable when the
                // superblocks come to name it.
                return Ok(());
            }
            match mirror.flush() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            }
        };
        self.mirror_error(&failed);
        Ok(())
    }

    fn refresh_block_count(&self) -> io::Result<u64> {
        self.read_inner().current.refresh_block_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    #[test]
    fn mirrored_ranges_merge_and_leave_the_gaps() {
        let mut m = Mirrored::default();
        m.add(10, 20);
        m.add(30, 40);
        m.add(20, 25);
        m.add(35, 50);
        assert_eq!(m.ranges.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(), vec![(10, 25), (30, 50)]);
        assert_eq!(m.gaps(0, 60), vec![(0, 10), (25, 30), (50, 60)]);
        assert_eq!(m.gaps(12, 33), vec![(25, 30)]);
        assert_eq!(m.gaps(40, 45), vec![]);
        m.add(0, 100);
        assert_eq!(m.ranges.len(), 1);
    }

    fn block(b: u8) -> Vec<u8> {
        vec![b; BLOCK_SIZE]
    }

    fn read(dev: &dyn BlockDevice, n: u64) -> u8 {
        let mut buf = block(0);
        dev.read_blocks(n, &mut buf).unwrap_or_else(|e| panic!("read: {e}"));
        buf[0]
    }

    #[test]
    fn writes_reach_both_devices_but_block_0_only_the_old_one() {
        let old: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8));
        let new: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8));
        let s = SwitchDevice::new(old.clone());
        s.write_blocks(3, &block(1)).unwrap_or_else(|e| panic!("{e}"));
        s.start_mirror(new.clone());
        s.write_blocks(0, &[block(7), block(8)].concat()).unwrap_or_else(|e| panic!("{e}"));
        s.copy(3, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((read(old.as_ref(), 0), read(new.as_ref(), 0)), (7, 0));
        assert_eq!((read(old.as_ref(), 1), read(new.as_ref(), 1)), (8, 8));
        assert_eq!(read(new.as_ref(), 3), 1);
        assert_eq!(s.mirrored_blocks(), 1);
        // Mirrored already: not copied again (over the newer contents).
        old.write_blocks(1, &block(5)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.copy(0, 3).unwrap_or_else(|e| panic!("{e}")), 2);
        assert_eq!(read(new.as_ref(), 1), 8);
        s.switch().unwrap_or_else(|e| panic!("{e}"));
        s.write_blocks(5, &block(9)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((read(old.as_ref(), 5), read(new.as_ref(), 5)), (0, 9));
        assert_eq!(read(&s, 3), 1);
    }

    #[test]
    fn a_failing_replacement_fails_the_migration_not_the_writes() {
        let old: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(8));
        let small: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(2));
        let s = SwitchDevice::new(old.clone());
        s.start_mirror(small);
        s.write_blocks(6, &block(4)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(old.as_ref(), 6), 4);
        assert!(s.mirror_failed().is_some());
    }
}
