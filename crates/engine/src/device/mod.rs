//! The device layer: whole-block reads, writes and flushes.
//!
//! Everything above this module talks to a [`BlockDevice`]; the backends are a
//! file or block device ([`FileDevice`]) and memory ([`MemoryDevice`]). Test
//! harnesses stack their own implementations (recording, fault injection) on
//! the same seam.

mod aligned;
mod file;
mod memory;
mod mirror;
mod page;
mod switch;
pub mod tracing;

pub use aligned::AlignedBuf;
pub use file::FileDevice;
pub use memory::MemoryDevice;
pub use mirror::{Checker, DegradeHook, Healed, Mend, MirrorDevice, Verdict};
pub use page::{DataRun, PageBuf, SharedPage};
pub use switch::SwitchDevice;

use std::fmt;
use std::io;

use crate::error::{DeviceRole, Error, Result};
use crate::types::BLOCK_SIZE;

/// A device addressed in [`BLOCK_SIZE`] blocks.
///
/// Buffers are always a whole number of blocks. A write is not durable until a
/// later [`BlockDevice::flush`] returns; until then any subset of the written
/// sectors may be lost by a crash, which is exactly what the crash tests model.
pub trait BlockDevice: Send + Sync + fmt::Debug {
    /// Number of blocks the device holds.
    fn block_count(&self) -> u64;

    /// Reads `buf.len() / BLOCK_SIZE` blocks starting at `first`.
    ///
    /// # Errors
    /// The operating system's error, or `InvalidInput` beyond the end.
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes `buf.len() / BLOCK_SIZE` blocks starting at `first`.
    ///
    /// # Errors
    /// The operating system's error, or `InvalidInput` beyond the end.
    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()>;

    /// Writes the blocks of `bufs`, one after another, starting at `first`:
    /// one request where the device can take the pieces where they lie (a
    /// write-back run of page buffers, see [`DataRun`]). By default the
    /// pieces are gathered into one buffer and written as one: a device
    /// that wraps another passes the call on, or the pages are copied.
    ///
    /// # Errors
    /// As [`BlockDevice::write_blocks`].
    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        // Gathered page-aligned, in case an `O_DIRECT` device is below.
        let mut all = AlignedBuf::with_capacity(bufs.iter().map(|b| b.len()).sum());
        for b in bufs {
            all.extend_from_slice(b);
        }
        self.write_blocks(first, all.bytes())
    }

    /// Writes runs of blocks that lie apart, each `(first, pieces)` as
    /// [`BlockDevice::write_blocks_vectored`] writes it. None is durable
    /// before a later flush, so their order is free: a device that can
    /// have several requests in flight ([`FileDevice`]) issues them at
    /// once ([`write_runs_at_once`]); by default, and on every device that
    /// records or injects faults, they go one after another, in order.
    ///
    /// # Errors
    /// The first block of a run that failed, and its error (runs not yet
    /// issued then are not written).
    fn write_runs(&self, runs: &[(u64, &[&[u8]])]) -> std::result::Result<(), (u64, io::Error)> {
        for (first, pieces) in runs {
            write_pieces(self, *first, pieces).map_err(|e| (*first, e))?;
        }
        Ok(())
    }

    /// Makes every completed write durable.
    ///
    /// # Errors
    /// The operating system's error.
    fn flush(&self) -> io::Result<()>;

    /// Tells the device that `count` blocks from `first` hold nothing the
    /// volume needs (TRIM: an SSD may erase them, a sparse image file gives
    /// their space back to its host). A later read of them may return
    /// zeros, the old bytes or anything else, so the volume discards only
    /// blocks that nothing, after any crash, will read before writing
    /// (DESIGN.md, "Discard"). Like a write, it is durable only after a
    /// later [`BlockDevice::flush`]. By default a device cannot discard.
    ///
    /// # Errors
    /// `Unsupported` where the device cannot discard; the operating
    /// system's error; `InvalidInput` beyond the end.
    fn discard(&self, first: u64, count: u64) -> io::Result<()> {
        let _ = (first, count);
        Err(io::Error::new(io::ErrorKind::Unsupported, "the device cannot discard"))
    }

    /// Advice: `count` blocks from `first` are about to be read. A device
    /// with a cache below it may start reading them now, without waiting,
    /// so that the read finds them there (the volume reads the next files
    /// of a directory listing ahead, DESIGN.md "Data space"). Nothing is
    /// promised and nothing fails: by default a device ignores it, and a
    /// device that wraps another passes it on.
    fn will_need(&self, first: u64, count: u64) {
        let _ = (first, count);
    }

    /// How many copies of each block a write keeps: 2 for a mirror
    /// ([`MirrorDevice`]); a device that wraps another passes it on.
    fn copies(&self) -> usize {
        1
    }

    /// Reads blocks whose check only the caller can make (raw data, which an
    /// fsync record names by checksum): `right(i, block)` says whether
    /// block `i` of the request holds what it should. A device keeping
    /// several copies (a mirror) answers each block from a copy that is
    /// right, and makes the others hold it where it may write; a device of
    /// one copy reads, as by default, and the caller's check decides.
    ///
    /// # Errors
    /// As [`BlockDevice::read_blocks`].
    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        let _ = right;
        self.read_blocks(first, buf)
    }

    /// Reads the device's size again, after the image file or block device
    /// under it grew (`dualfs resize`), and returns it; [`block_count`]
    /// says it from then on. Devices of a fixed size keep theirs.
    ///
    /// # Errors
    /// The operating system's error.
    ///
    /// [`block_count`]: BlockDevice::block_count
    fn refresh_block_count(&self) -> io::Result<u64> {
        Ok(self.block_count())
    }
}

/// Reads `count` blocks of the volume's `role` device. This and [`write`]
/// and [`flush`] are how the engine talks to its devices: an error names the
/// device, the request and its first block.
///
/// # Errors
/// The device fails.
pub fn read(dev: &dyn BlockDevice, role: DeviceRole, first: u64, count: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; count * BLOCK_SIZE];
    dev.read_blocks(first, &mut buf).map_err(|source| Error::Io { device: role, op: "read", block: first, source })?;
    Ok(buf)
}

/// Reads whole blocks into `buf` from the volume's `role` device, each
/// checked by `right` (see [`BlockDevice::read_checked`]).
///
/// # Errors
/// The device fails.
pub fn read_checked(
    dev: &dyn BlockDevice,
    role: DeviceRole,
    first: u64,
    buf: &mut [u8],
    right: &dyn Fn(usize, &[u8]) -> bool,
) -> Result<()> {
    dev.read_checked(first, buf, right).map_err(|source| Error::Io { device: role, op: "read", block: first, source })
}

/// Reads whole blocks into `buf` from the volume's `role` device (see [`read`]).
///
/// # Errors
/// The device fails.
pub fn read_into(dev: &dyn BlockDevice, role: DeviceRole, first: u64, buf: &mut [u8]) -> Result<()> {
    dev.read_blocks(first, buf).map_err(|source| Error::Io { device: role, op: "read", block: first, source })
}

/// Writes whole blocks to the volume's `role` device (see [`read`]).
///
/// # Errors
/// The device fails.
pub fn write(dev: &dyn BlockDevice, role: DeviceRole, first: u64, buf: &[u8]) -> Result<()> {
    dev.write_blocks(first, buf).map_err(|source| Error::Io { device: role, op: "write", block: first, source })
}

/// Writes runs of blocks that lie apart to the volume's `role` device
/// (see [`BlockDevice::write_runs`]).
///
/// # Errors
/// The device fails (the error names the first block of the run).
pub fn write_runs(dev: &dyn BlockDevice, role: DeviceRole, runs: &[(u64, &[&[u8]])]) -> Result<()> {
    dev.write_runs(runs).map_err(|(block, source)| Error::Io { device: role, op: "write", block, source })
}

/// One run of [`BlockDevice::write_runs`]: a run in one buffer as a
/// plain write, one of several pieces vectored.
fn write_pieces<D: BlockDevice + ?Sized>(dev: &D, first: u64, pieces: &[&[u8]]) -> io::Result<()> {
    match pieces {
        [one] => dev.write_blocks(first, one),
        _ => dev.write_blocks_vectored(first, pieces),
    }
}

/// Requests [`write_runs_at_once`] keeps in flight at most: a queue deep
/// enough for an SSD or a loop device to take scattered 4 KiB writes at
/// several times the rate of one at a time (DESIGN.md, Data space, "A
/// commit's scattered runs are written several at a time"), few enough
/// threads to start per call.
pub const RUNS_IN_FLIGHT: usize = 8;

/// Writes `runs` through `dev` with up to [`RUNS_IN_FLIGHT`] of them in
/// flight, each on a thread of its own taking the next run not yet
/// issued (fewer than two runs go one after another on the caller's, and
/// so do all of them if no thread can be started).
/// After a failure no further run is issued; the first failure is
/// returned once those in flight are done.
///
/// # Errors
/// As [`BlockDevice::write_runs`].
pub fn write_runs_at_once<D: BlockDevice + ?Sized>(
    dev: &D,
    runs: &[(u64, &[&[u8]])],
) -> std::result::Result<(), (u64, io::Error)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};
    let writers = runs.len().min(RUNS_IN_FLIGHT);
    if writers < 2 {
        for (first, pieces) in runs {
            write_pieces(dev, *first, pieces).map_err(|e| (*first, e))?;
        }
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failed: Mutex<Option<(u64, io::Error)>> = Mutex::new(None);
    let writer = || {
        while !stop.load(Ordering::Acquire) {
            let Some((first, pieces)) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else { return };
            if let Err(e) = write_pieces(dev, *first, pieces) {
                stop.store(true, Ordering::Release);
                failed.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert((*first, e));
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..writers {
            // A thread the system refuses leaves its share to the others.
            if std::thread::Builder::new().name("dualfs-runs".into()).spawn_scoped(s, writer).is_err() {
                break;
            }
        }
        writer();
    });
    match failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Flushes the volume's `role` device (see [`read`]).
///
/// # Errors
/// The device fails.
pub fn flush(dev: &dyn BlockDevice, role: DeviceRole) -> Result<()> {
    dev.flush().map_err(|source| Error::Io { device: role, op: "flush", block: 0, source })
}

/// Discards `count` blocks of the volume's `role` device (see [`read`]).
/// A device that cannot discard is `NotSupported`.
///
/// # Errors
/// The device fails, or cannot discard.
pub fn discard(dev: &dyn BlockDevice, role: DeviceRole, first: u64, count: u64) -> Result<()> {
    dev.discard(first, count).map_err(|source| {
        if is_unsupported(&source) {
            Error::NotSupported
        } else {
            Error::Io { device: role, op: "discard", block: first, source }
        }
    })
}

/// Whether a device's error says it cannot discard (or a file system
/// under an image file cannot punch holes).
#[must_use]
pub fn is_unsupported(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Unsupported || matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY))
}

/// Checks that a request is block-aligned and inside a device of `count` blocks.
pub(crate) fn check_range(count: u64, first: u64, len: usize) -> io::Result<()> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer is not a whole number of blocks"));
    }
    let blocks = (len / BLOCK_SIZE) as u64;
    match first.checked_add(blocks) {
        Some(end) if end <= count => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("blocks {first}..+{blocks} lie beyond the end of a {count}-block device"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    use super::*;

    /// A memory device whose writes wait until `want` of them are in
    /// flight together (or, if that never happens, give up after a while
    /// and let the rest through): the most seen at once is noted.
    #[derive(Debug)]
    struct Gate {
        inner: MemoryDevice,
        want: usize,
        state: Mutex<(usize, usize, bool)>,
        turn: Condvar,
    }

    impl BlockDevice for Gate {
        fn block_count(&self) -> u64 {
            self.inner.block_count()
        }
        fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
            self.inner.read_blocks(first, buf)
        }
        fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
            let mut s = self.state.lock().unwrap();
            s.0 += 1;
            s.1 = s.1.max(s.0);
            if s.1 >= self.want {
                s.2 = true;
                self.turn.notify_all();
            }
            while !s.2 {
                let (next, waited) = self.turn.wait_timeout(s, Duration::from_secs(20)).unwrap();
                s = next;
                if waited.timed_out() {
                    s.2 = true;
                }
            }
            s.0 -= 1;
            drop(s);
            self.inner.write_blocks(first, buf)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn runs_of(blocks: &[Vec<u8>]) -> Vec<(u64, Vec<&[u8]>)> {
        blocks.iter().enumerate().map(|(i, b)| (3 * i as u64 + 1, vec![&b[..]])).collect()
    }

    /// Scattered runs are written with several requests in flight, every
    /// one of them to its place.
    #[test]
    fn scattered_runs_are_in_flight_together() {
        let gate =
            Gate { inner: MemoryDevice::new(256), want: RUNS_IN_FLIGHT, state: Mutex::default(), turn: Condvar::new() };
        let blocks: Vec<Vec<u8>> = (0..3 * RUNS_IN_FLIGHT).map(|i| vec![i as u8 + 1; BLOCK_SIZE]).collect();
        let runs = runs_of(&blocks);
        let runs: Vec<(u64, &[&[u8]])> = runs.iter().map(|(at, p)| (*at, p.as_slice())).collect();
        write_runs_at_once(&gate, &runs).unwrap();
        assert_eq!(gate.state.lock().unwrap().1, RUNS_IN_FLIGHT, "the most writes in flight at once");
        for (i, b) in blocks.iter().enumerate() {
            let mut back = vec![0u8; BLOCK_SIZE];
            gate.inner.read_blocks(3 * i as u64 + 1, &mut back).unwrap();
            assert_eq!(&back, b, "run {i}");
        }
    }

    /// A run that fails is named by its first block, at once or not.
    #[test]
    fn a_failed_run_is_named() {
        let dev = MemoryDevice::new(128);
        let blocks: Vec<Vec<u8>> = (0..30).map(|i| vec![i as u8; BLOCK_SIZE]).collect();
        let mut runs = runs_of(&blocks);
        runs[20].0 = 200;
        let runs: Vec<(u64, &[&[u8]])> = runs.iter().map(|(at, p)| (*at, p.as_slice())).collect();
        assert_eq!(write_runs_at_once(&dev, &runs).map_err(|(b, _)| b), Err(200));
        assert_eq!(dev.write_runs(&runs).map_err(|(b, _)| b), Err(200), "one at a time");
    }
}
