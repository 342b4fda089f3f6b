//! [`SwitchDevice`]: a device handle whose device can be replaced while the
//! volume runs (`dualfs migrate`). Between [`SwitchDevice::start_mirror`]
//! and [`SwitchDevice::switch`] every write goes to the device in use and
//! then to its replacement ("mirror update", LinLogFS), and a copier moves
//! what was there before with [`SwitchDevice::copy`]; reads keep coming
//! from the device in use until the switch.
//!
//! The copier reads and writes alongside the volume's writes, one step
//! read ahead of the step it writes (two requests in flight), and skips
//! what was mirrored before it came there. A block written while its step
//! was read or written may have reached the replacement before the step's
//! older copy of it: every mirrored write made while a copy runs is noted
//! ([`Watch`]), and after writing a step the copier copies the blocks of
//! it written meanwhile again, writes excluded (the handle's lock held
//! exclusively; writers share it). After that the replacement holds what
//! the device in use holds, and every later write is mirrored.

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

/// Mirrored writes made while a copy runs, numbered: the copier redoes
/// the blocks of a step that one made after the step began.
#[derive(Debug, Default)]
struct Watch {
    active: bool,
    next: u64,
    /// (number, first block, end)
    writes: Vec<(u64, u64, u64)>,
}

/// One step of the copy, read: where, the number of the first write it
/// must look at, and the parts not mirrored already with their contents.
type ReadStep = (u64, u64, u64, Vec<(u64, Vec<u8>)>);

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
    watch: Mutex<Watch>,
}

impl SwitchDevice {
    /// A handle on `dev`.
    #[must_use]
    pub fn new(dev: Arc<dyn BlockDevice>) -> SwitchDevice {
        SwitchDevice {
            inner: RwLock::new(Inner { current: dev, mirror: None, mirror_failed: None, retired: Vec::new() }),
            mirrored: AtomicU64::new(0),
            ranges: Mutex::default(),
            watch: Mutex::default(),
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

    /// Copies the runs `(first, count)` of the device in use to the
    /// replacement in steps of at most `step` blocks, but what was mirrored
    /// already; calls `progress(blocks done)` after each step, no lock
    /// held (the volume may write meanwhile). Returns the blocks copied.
    ///
    /// # Errors
    /// Reading or writing fails, or nothing is being mirrored.
    pub fn copy_runs(&self, runs: &[(u64, u64)], step: u64, progress: &mut dyn FnMut(u64)) -> io::Result<u64> {
        let steps: Vec<(u64, u64)> = runs
            .iter()
            .flat_map(|&(first, n)| {
                (0..n.div_ceil(step.max(1))).map(move |k| (first + k * step, (n - k * step).min(step)))
            })
            .collect();
        {
            let mut w = self.watch_lock();
            w.active = true;
            w.writes.clear();
        }
        let r = std::thread::scope(|scope| {
            // One step read ahead of the one written.
            let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<ReadStep>>(1);
            scope.spawn(move || {
                for (first, n) in steps {
                    let read = self.read_step(first, n);
                    let failed = read.is_err();
                    if tx.send(read).is_err() || failed {
                        return;
                    }
                }
            });
            let (mut copied, mut done) = (0, 0);
            for read in rx {
                let (first, n, mark, parts) = read?;
                copied += self.write_step(first, n, mark, &parts)?;
                done += n;
                progress(done);
            }
            Ok(copied)
        });
        let mut w = self.watch_lock();
        w.active = false;
        w.writes.clear();
        r
    }

    fn watch_lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the parts of `first..first + n` not mirrored yet.
    fn read_step(&self, first: u64, n: u64) -> io::Result<ReadStep> {
        // Taken before reading: a write noted from here on may be newer
        // than what the read finds.
        let mark = self.watch_lock().next;
        let gaps = self.ranges.lock().unwrap_or_else(PoisonError::into_inner).gaps(first, first + n);
        let i = self.read_inner();
        let mut parts = Vec::new();
        for (s, e) in gaps {
            let mut buf = vec![0u8; (e - s) as usize * BLOCK_SIZE];
            i.current.read_blocks(s, &mut buf)?;
            parts.push((s, buf));
        }
        Ok((first, n, mark, parts))
    }

    /// Writes a step read by [`SwitchDevice::read_step`], then, writes
    /// excluded, copies again the blocks of it written since it was read;
    /// returns the blocks written.
    fn write_step(&self, first: u64, n: u64, mark: u64, parts: &[(u64, Vec<u8>)]) -> io::Result<u64> {
        let none = || io::Error::other("no replacement device to copy to");
        let mut copied = 0;
        {
            let i = self.read_inner();
            let mirror = i.mirror.as_ref().ok_or_else(none)?;
            for (s, buf) in parts {
                mirror.write_blocks(*s, buf)?;
                copied += (buf.len() / BLOCK_SIZE) as u64;
            }
        }
        let i = self.write_inner();
        let mirror = i.mirror.as_ref().ok_or_else(none)?;
        let mut w = self.watch_lock();
        let end = first + n;
        for &(_, s, e) in w.writes.iter().filter(|&&(no, s, e)| no >= mark && s < end && e > first) {
            let (s, e) = (s.max(first), e.min(end));
            if faults::active(Fault::MigrateCopyOverWrites) {
                // The broken rule: the step's older copy stays.
                continue;
            }
            let mut buf = vec![0u8; (e - s) as usize * BLOCK_SIZE];
            i.current.read_blocks(s, &mut buf)?;
            mirror.write_blocks(s, &buf)?;
        }
        // The step after this one began after this one: older writes
        // concern neither.
        w.writes.retain(|&(no, _, _)| no >= mark);
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

    /// The device in use.
    #[must_use]
    pub fn current(&self) -> Arc<dyn BlockDevice> {
        self.read_inner().current.clone()
    }

    /// Ends mirroring with `dev`, which the caller made of the device in
    /// use and the replacement (a meta-data mirror joined by `dualfs mirror
    /// add`), as the device in use. The old handle stays open until this
    /// one is dropped.
    ///
    /// # Errors
    /// Nothing is being mirrored.
    pub fn join(&self, dev: Arc<dyn BlockDevice>) -> io::Result<()> {
        let mut i = self.write_inner();
        if i.mirror.take().is_none() {
            return Err(io::Error::other("no replacement device to join"));
        }
        let old = std::mem::replace(&mut i.current, dev);
        i.retired.push(old);
        Ok(())
    }

    /// Makes `dev` the device in use (a meta-data copy left alone by
    /// `dualfs mirror remove`); the old handle stays open until this one is
    /// dropped.
    pub fn set_current(&self, dev: Arc<dyn BlockDevice>) {
        let mut i = self.write_inner();
        let old = std::mem::replace(&mut i.current, dev);
        i.retired.push(old);
    }

    fn mirror_error(&self, e: &io::Error) {
        let mut i = self.write_inner();
        if i.mirror_failed.is_none() {
            i.mirror_failed = Some(e.to_string());
        }
    }
}

impl BlockDevice for SwitchDevice {
    fn copies(&self) -> usize {
        self.read_inner().current.copies()
    }

    fn block_count(&self) -> u64 {
        self.read_inner().current.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_inner().current.read_blocks(first, buf)
    }

    fn will_need(&self, first: u64, count: u64) {
        self.read_inner().current.will_need(first, count);
    }

    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        self.read_inner().current.read_checked(first, buf, right)
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
                    let mut w = self.watch_lock();
                    if w.active {
                        let no = w.next;
                        w.next += 1;
                        w.writes.push((no, first, first + n));
                    }
                    return Ok(());
                }
                Err(e) => e,
            }
        };
        self.mirror_error(&failed);
        Ok(())
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        {
            let i = self.read_inner();
            if i.mirror.is_none() {
                return i.current.write_blocks_vectored(first, bufs);
            }
        }
        // Mirrored (a migration under way): the mirror's bookkeeping is
        // write_blocks'.
        self.write_blocks(first, &bufs.concat())
    }

    fn write_runs(&self, runs: &[(u64, &[&[u8]])]) -> Result<(), (u64, io::Error)> {
        {
            let i = self.read_inner();
            if i.mirror.is_none() {
                return i.current.write_runs(runs);
            }
        }
        // Mirrored (a migration under way): one at a time, each with
        // write_blocks' bookkeeping.
        for (first, pieces) in runs {
            self.write_blocks_vectored(*first, pieces).map_err(|e| (*first, e))?;
        }
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

    /// The device in use only: a migration copies what is in use, and a
    /// discarded block is in use by nothing (the replacement may keep
    /// an older copy of it, which nothing reads either).
    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        self.read_inner().current.discard(first, count)
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
        let mut steps = Vec::new();
        s.copy_runs(&[(3, 1)], 256, &mut |d| steps.push(d)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(steps, [1]);
        assert_eq!((read(old.as_ref(), 0), read(new.as_ref(), 0)), (7, 0));
        assert_eq!((read(old.as_ref(), 1), read(new.as_ref(), 1)), (8, 8));
        assert_eq!(read(new.as_ref(), 3), 1);
        assert_eq!(s.mirrored_blocks(), 1);
        // Mirrored already: not copied again (over the newer contents).
        old.write_blocks(1, &block(5)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.copy_runs(&[(0, 3)], 2, &mut |_| {}).unwrap_or_else(|e| panic!("{e}")), 2);
        assert_eq!(read(new.as_ref(), 1), 8);
        s.switch().unwrap_or_else(|e| panic!("{e}"));
        s.write_blocks(5, &block(9)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((read(old.as_ref(), 5), read(new.as_ref(), 5)), (0, 9));
        assert_eq!(read(&s, 3), 1);
    }

    /// A device that says when a read covered block `watched`.
    #[derive(Debug)]
    pub(super) struct Gate {
        pub dev: MemoryDevice,
        pub watched: u64,
        pub seen: std::sync::atomic::AtomicBool,
    }

    impl BlockDevice for Gate {
        fn block_count(&self) -> u64 {
            self.dev.block_count()
        }
        fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
            self.dev.read_blocks(first, buf)?;
            if (first..first + (buf.len() / BLOCK_SIZE) as u64).contains(&self.watched) {
                self.seen.store(true, Ordering::SeqCst);
            }
            Ok(())
        }
        fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
            self.dev.write_blocks(first, buf)
        }
        fn flush(&self) -> io::Result<()> {
            self.dev.flush()
        }
    }

    #[test]
    fn a_block_written_after_its_step_was_read_ahead_reaches_the_replacement_new() {
        let old = Arc::new(Gate { dev: MemoryDevice::new(64), watched: 20, seen: Default::default() });
        old.write_blocks(20, &block(1)).unwrap_or_else(|e| panic!("{e}"));
        let new: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(64));
        let s = SwitchDevice::new(old.clone());
        s.start_mirror(new.clone());
        let mut written = false;
        s.copy_runs(&[(1, 40)], 10, &mut |done| {
            if done == 10 {
                // The step holding block 20 is read while this one is
                // written: wait until it was, then write block 20.
                let t = std::time::Instant::now();
                while !old.seen.load(Ordering::SeqCst) && t.elapsed().as_secs() < 10 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                s.write_blocks(20, &block(2)).unwrap_or_else(|e| panic!("{e}"));
                written = true;
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(written && old.seen.load(Ordering::SeqCst));
        assert_eq!(read(new.as_ref(), 20), 2, "the step's older copy was left");
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
