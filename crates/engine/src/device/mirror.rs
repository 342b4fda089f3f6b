//! [`MirrorDevice`]: the meta-data device kept on two devices alike. Every
//! write goes to both at once (two requests in flight, not one after the
//! other) and every flush flushes both, so a write is acknowledged only
//! when both copies hold it. Reads come from the first copy; a block that
//! fails its check there (the checker comes from the format layer: the
//! device layer knows no block layout) is read from the second, and when
//! that one passes it is returned and written back over the bad one.
//! Raw data, which only the record naming it can judge, is judged by the
//! caller's check ([`BlockDevice::read_checked`]).
//!
//! The second copy's part of a small write and of every flush runs on a
//! thread kept for it ([`Workers`]), not one started per request.
//!
//! A copy that fails a write or a flush is dropped: the mirror goes on on
//! the other alone, once the volume's degrade hook (which marks the mirror
//! degraded on the surviving copy and the data device) has returned, so
//! that nothing is acknowledged that only the surviving copy holds while
//! the failed one could still pass for in sync.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, mpsc};

use super::BlockDevice;
use crate::faults::{self, Fault};
use crate::types::BLOCK_SIZE;

/// What the checker says of a block read from an address.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Its checksum and address hold.
    Good,
    /// It is damaged, misplaced or was never written.
    Bad,
    /// Nothing in it can be checked (raw data an fsync record carries).
    Unknown,
}

/// What [`MirrorDevice::mend_copy`] did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mend {
    /// The bad copy was rewritten from the good one.
    Mended,
    /// The copy reads good now (a write came between): nothing written.
    AlreadyGood,
    /// The other copy fails too: nothing to mend from.
    BothBad,
}

/// A block a read found bad on the first copy and rewrote from the second
/// ([`MirrorDevice::heals_during`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Healed {
    /// Its address.
    pub at: u64,
    /// What was wrong with it on the first copy.
    pub why: String,
}

/// Checks the block read from an address.
pub type Checker = Arc<dyn Fn(u64, &[u8]) -> Verdict + Send + Sync>;

/// Called once when a copy fails (its index, the surviving copy, why):
/// must make the failure durable where a mount looks (the surviving copy
/// and the data device) before the mirror acknowledges anything more.
pub type DegradeHook = Box<dyn Fn(usize, &Arc<dyn BlockDevice>, &str) -> io::Result<()> + Send + Sync>;

/// No copy has failed.
const NONE_FAILED: usize = usize::MAX;

/// Two copies of one device, written alike, read with healing.
pub struct MirrorDevice {
    copies: [Arc<dyn BlockDevice>; 2],
    check: Checker,
    healed: AtomicU64,
    unhealed: AtomicU64,
    /// Writers share it; a heal holds it alone, so that it never writes a
    /// block back over a newer write of the same block.
    order: RwLock<()>,
    /// The copy that failed a write or flush ([`NONE_FAILED`] while both
    /// are in use).
    failed: AtomicUsize,
    /// Why it failed, for the log and `stats`.
    failure: Mutex<Option<String>>,
    on_degrade: OnceLock<DegradeHook>,
    /// Whether a block read good from the second copy is written back over
    /// the first (not by a check that writes nothing).
    write_back: AtomicBool,
    /// While a mount recovers: every block read is also made the second
    /// copy's ([`MirrorDevice::set_mending`]).
    mending: AtomicBool,
    /// The blocks reads rewrote on the first copy, kept while someone asks
    /// ([`MirrorDevice::heals_during`]).
    watched: Mutex<Option<Vec<Healed>>>,
    workers: Workers,
}

impl std::fmt::Debug for MirrorDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorDevice").field("copies", &self.copies).field("healed", &self.healed).finish()
    }
}

/// A request for the second copy, run by a kept thread.
type Job = Box<dyn FnOnce() + Send>;

/// Writes up to this many bytes are copied and handed to a kept thread;
/// larger ones (a whole segment) borrow theirs on a thread of their own,
/// whose start is small beside the write.
const KEPT_WRITE_MAX: usize = 256 << 10;

/// Threads kept between requests to run the second copy's part: starting
/// a thread for each write and each flush cost two thread starts per
/// fsync. One per request in flight at once; each ends when the mirror is
/// dropped (its sender with it).
#[derive(Default)]
struct Workers {
    idle: Mutex<Vec<mpsc::Sender<Job>>>,
}

impl Workers {
    /// Runs `a` here and `b` on a kept thread at the same time (the second
    /// copy costs its device's time, not a second round trip); both
    /// outcomes.
    fn both(
        &self,
        a: impl FnOnce() -> io::Result<()>,
        b: impl FnOnce() -> io::Result<()> + Send + 'static,
    ) -> [io::Result<()>; 2] {
        let kept = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let worker = match kept {
            Some(w) => Some(w),
            None => {
                let (tx, rx) = mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name("dualfs-mirror".into())
                    .spawn(move || {
                        for job in rx {
                            job();
                        }
                    })
                    .ok()
                    .map(|_| tx)
            }
        };
        let (done, outcome) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = done.send(b());
        });
        let worker = match worker.map(|w| w.send(job).map(|()| w)) {
            Some(Ok(w)) => Some(w),
            // No thread could be started, or a kept one is gone: the second
            // copy's part runs here, after the first's.
            Some(Err(mpsc::SendError(job))) => {
                let first = a();
                job();
                return [first, outcome.recv().unwrap_or_else(|_| Err(io::Error::other("no outcome")))];
            }
            None => None,
        };
        let first = a();
        let second = outcome.recv().unwrap_or_else(|_| Err(io::Error::other("the second copy's writer panicked")));
        if let Some(w) = worker {
            self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(w);
        }
        [first, second]
    }
}

/// Runs `a` here and `b` on a second thread at the same time: the second
/// copy costs its device's time, not a second round trip. Returns both
/// outcomes.
fn both(a: impl FnOnce() -> io::Result<()>, b: impl FnOnce() -> io::Result<()> + Send) -> [io::Result<()>; 2] {
    std::thread::scope(|s| {
        let second = s.spawn(b);
        let first = a();
        let second = second.join().unwrap_or_else(|_| Err(io::Error::other("the second copy's writer panicked")));
        [first, second]
    })
}

impl MirrorDevice {
    /// Mirrors `first` onto `second` (the same size is not required: the
    /// smaller bounds the device).
    #[must_use]
    pub fn new(first: Arc<dyn BlockDevice>, second: Arc<dyn BlockDevice>, check: Checker) -> MirrorDevice {
        MirrorDevice {
            copies: [first, second],
            check,
            healed: AtomicU64::new(0),
            unhealed: AtomicU64::new(0),
            order: RwLock::new(()),
            failed: AtomicUsize::new(NONE_FAILED),
            failure: Mutex::new(None),
            on_degrade: OnceLock::new(),
            write_back: AtomicBool::new(true),
            mending: AtomicBool::new(false),
            watched: Mutex::new(None),
            workers: Workers::default(),
        }
    }

    /// While set, each block a read returns (but one bad on both copies)
    /// is written over the second copy where that holds anything else. A
    /// mount sets it while it recovers: after a crash each copy may hold a
    /// part of the writes in flight the other lacks, and what recovery
    /// rolls forward from the copy it reads must be on both before
    /// anything built on it is acknowledged.
    pub fn set_mending(&self, on: bool) {
        self.mending.store(on, Ordering::Relaxed);
    }

    /// Writes the blocks of `buf` (read at `first`) over the second copy
    /// where it differs.
    fn mend(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let mut other = vec![0u8; buf.len()];
        let theirs = self.copies[1].read_blocks(first, &mut other).is_ok();
        let _alone = self.order.write().unwrap_or_else(PoisonError::into_inner);
        for (i, (blk, was)) in buf.chunks_exact(BLOCK_SIZE).zip(other.chunks_exact(BLOCK_SIZE)).enumerate() {
            let at = first + i as u64;
            // Raw data is made alike by `read_checked`, whose caller can
            // tell a torn copy from a right one; here it cannot be told.
            if (theirs && blk == was) || (self.check)(at, blk) != Verdict::Good {
                continue;
            }
            self.copies[1].write_blocks(at, blk)?;
        }
        Ok(())
    }

    /// Reads heal the block returned but write nothing back (a check that
    /// must not write: `dualfs fsck -n`).
    pub fn without_write_back(&self) {
        self.write_back.store(false, Ordering::Relaxed);
    }

    /// Sets what is done when a copy fails (once; later calls are ignored).
    /// Without a hook a failed copy fails the request instead.
    pub fn set_degrade_hook(&self, hook: DegradeHook) {
        let _ = self.on_degrade.set(hook);
    }

    /// The copy dropped after failing a write or flush, and why.
    #[must_use]
    pub fn failed_copy(&self) -> Option<(usize, String)> {
        let i = self.failed.load(Ordering::Acquire);
        (i != NONE_FAILED).then(|| {
            let why = self.failure.lock().unwrap_or_else(PoisonError::into_inner).clone().unwrap_or_default();
            (i, why)
        })
    }

    /// The copy in use alone, once the other failed.
    fn alone(&self) -> Option<usize> {
        match self.failed.load(Ordering::Acquire) {
            NONE_FAILED => None,
            i => Some(1 - i),
        }
    }

    /// Settles the outcomes of one request sent to both copies: both good
    /// is good; both failed is the first's error; one failed drops that
    /// copy, the degrade hook making it durable before this returns.
    fn settle(&self, what: &str, outcomes: [io::Result<()>; 2]) -> io::Result<()> {
        let [a, b] = outcomes;
        let (i, e) = match (a, b) {
            (Ok(()), Ok(())) => return Ok(()),
            (Err(e), Err(_)) => return Err(e),
            (Err(e), Ok(())) => (0, e),
            (Ok(()), Err(e)) => (1, e),
        };
        let Some(hook) = self.on_degrade.get() else { return Err(e) };
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if self.failed.load(Ordering::Acquire) == NONE_FAILED {
            let why = format!("meta-data copy {} failed a {what} ({e})", i + 1);
            log::error!("{why}: the mirror is degraded, the volume goes on on copy {} alone", 2 - i);
            hook(i, &self.copies[1 - i], &why)?;
            *failure = Some(why);
            self.failed.store(i, Ordering::Release);
        } else if self.failed.load(Ordering::Acquire) != i {
            // The copy left alone failed too (a request sent before the
            // other was dropped): nothing holds it.
            return Err(e);
        }
        Ok(())
    }

    /// Runs `f` and returns with its outcome the blocks that reads (its
    /// own, and any other meanwhile) rewrote on the first copy from the
    /// second while it ran: a scrub that lists the live blocks through the
    /// mirror reports what the listing's reads healed, which its own
    /// reads of each copy then find good. (Blocks a read returned from
    /// the second copy without writing them back are not among them: the
    /// first copy still holds them bad.)
    pub fn heals_during<R>(&self, f: impl FnOnce() -> R) -> (R, Vec<Healed>) {
        let outer = self.watched.lock().unwrap_or_else(PoisonError::into_inner).replace(Vec::new());
        let out = f();
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = watched.take().unwrap_or_default();
        // One watch inside another: the outer one sees these too.
        *watched = outer.map(|mut o| {
            o.extend(mine.iter().cloned());
            o
        });
        (out, mine)
    }

    /// Notes block `at` rewritten on the first copy, for a watch.
    fn rewrote(&self, at: u64, why: impl FnOnce() -> String) {
        if let Some(w) = self.watched.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            w.push(Healed { at, why: why() });
        }
    }

    /// Blocks read bad from one copy and rewritten from the other.
    #[must_use]
    pub fn healed(&self) -> u64 {
        self.healed.load(Ordering::Relaxed)
    }

    /// Blocks bad on the first copy that the second could not mend either.
    #[must_use]
    pub fn unhealed(&self) -> u64 {
        self.unhealed.load(Ordering::Relaxed)
    }

    /// The two copies.
    #[must_use]
    pub fn copies(&self) -> &[Arc<dyn BlockDevice>; 2] {
        &self.copies
    }

    /// Reads `buf.len() / BLOCK_SIZE` blocks from copy `i` alone.
    ///
    /// # Errors
    /// That copy fails.
    pub fn read_copy(&self, i: usize, first: u64, buf: &mut [u8]) -> io::Result<()> {
        self.copies[i].read_blocks(first, buf)
    }

    /// The copies still in use: both, or the one left after the other
    /// failed a write or a flush.
    #[must_use]
    pub fn in_use(&self) -> Vec<usize> {
        match self.alone() {
            Some(i) => vec![i],
            None => vec![0, 1],
        }
    }

    /// Rewrites block `at` of copy `bad` from the other copy, as a heal
    /// does but for either copy: writes held off meanwhile (a write since
    /// the caller's read wins), both copies read again under that lock, and
    /// the block written only if `good` still rejects it on `bad` and
    /// accepts it on the other; then `bad` is flushed.
    ///
    /// # Errors
    /// A copy fails to read, or `bad` to write or flush.
    pub fn mend_copy(&self, bad: usize, at: u64, good: &dyn Fn(&[u8]) -> bool) -> io::Result<Mend> {
        let Some(from) = [1usize, 0].get(bad).copied() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no meta-data copy {}", bad + 1)));
        };
        let _alone = self.order.write().unwrap_or_else(PoisonError::into_inner);
        let mut mine = vec![0u8; BLOCK_SIZE];
        if self.copies[bad].read_blocks(at, &mut mine).is_ok() && good(&mine) {
            return Ok(Mend::AlreadyGood);
        }
        let mut other = vec![0u8; BLOCK_SIZE];
        self.copies[from].read_blocks(at, &mut other)?;
        if !good(&other) {
            return Ok(Mend::BothBad);
        }
        log::warn!("meta-data block {at} failed its check on copy {}: rewritten from copy {}", bad + 1, from + 1);
        self.copies[bad].write_blocks(at, &other)?;
        self.copies[bad].flush()?;
        Ok(Mend::Mended)
    }

    /// [`BlockDevice::read_checked`] of both copies: each block from the
    /// first copy where `right` takes it, else from the second where `right`
    /// takes that (then written back over the first, as a heal); while
    /// mending, a block right on the first copy is written over a second
    /// that holds anything else. Writes are held off meanwhile.
    fn read_checked_copies(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        let _alone = self.order.write().unwrap_or_else(PoisonError::into_inner);
        let whole = self.copies[0].read_blocks(first, buf).is_ok();
        let write_back = self.write_back.load(Ordering::Relaxed);
        let mending = write_back && self.mending.load(Ordering::Relaxed);
        let mut other = vec![0u8; BLOCK_SIZE];
        let mut healed = 0;
        for (i, blk) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            let at = first + i as u64;
            let mine = whole || self.copies[0].read_blocks(at, blk).is_ok();
            let theirs = self.copies[1].read_blocks(at, &mut other).is_ok();
            if mine && right(i, blk) {
                if mending && (!theirs || other != *blk) {
                    self.copies[1].write_blocks(at, blk)?;
                }
                continue;
            }
            if !theirs || !right(i, &other) {
                // Wrong on both: the caller's check fails on what the first
                // copy holds (or on zeros, where it reads nothing).
                if !mine {
                    blk.fill(0);
                }
                continue;
            }
            blk.copy_from_slice(&other);
            log::warn!("meta-data block {at} is not what its record names on the first copy: read from the mirror");
            if write_back {
                self.copies[0].write_blocks(at, &other)?;
                self.rewrote(at, || "it is not what its record names".to_string());
            }
            healed += 1;
        }
        self.healed.fetch_add(healed, Ordering::Relaxed);
        Ok(())
    }

    /// Checks each block of `buf` (read from copy 0 at `first`) and mends
    /// the bad ones from copy 1. Returns how many were mended.
    fn heal(&self, first: u64, buf: &mut [u8]) -> io::Result<u64> {
        let mut mended = 0;
        let mut other = vec![0u8; BLOCK_SIZE];
        for (i, blk) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            let at = first + i as u64;
            if (self.check)(at, blk) == Verdict::Good {
                continue;
            }
            // Raw data the checker cannot judge (an fsync record's data
            // copy) is never taken from the other copy here: the record's
            // checksum decides, through `read_checked`.
            let takes = |v: Verdict| v == Verdict::Good;
            if self.copies[1].read_blocks(at, &mut other).is_err() || !takes((self.check)(at, &other)) {
                if (self.check)(at, blk) == Verdict::Bad && other != *blk {
                    self.unhealed.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            // Again, writes held off: a write since the first read wins.
            let _alone = self.order.write().unwrap_or_else(PoisonError::into_inner);
            self.copies[1].read_blocks(at, &mut other)?;
            if !takes((self.check)(at, &other)) {
                continue;
            }
            let zeros = blk.iter().all(|&x| x == 0);
            blk.copy_from_slice(&other);
            if !self.write_back.load(Ordering::Relaxed) {
                log::warn!("meta-data block {at} failed its check on the first copy: read from the mirror");
                mended += 1;
                continue;
            }
            log::warn!("meta-data block {at} failed its check on the first copy: read from the mirror and rewritten");
            self.copies[0].write_blocks(at, &other)?;
            self.rewrote(at, || if zeros { "it reads as zeros" } else { "it fails its check" }.to_string());
            mended += 1;
        }
        self.healed.fetch_add(mended, Ordering::Relaxed);
        Ok(mended)
    }
}

impl BlockDevice for MirrorDevice {
    fn copies(&self) -> usize {
        self.in_use().len()
    }

    fn block_count(&self) -> u64 {
        self.copies[0].block_count().min(self.copies[1].block_count())
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        // A failed copy is neither read nor healed.
        if let Some(i) = self.alone() {
            return self.copies[i].read_blocks(first, buf);
        }
        if let Err(e) = self.copies[0].read_blocks(first, buf) {
            // Each copy may fail another block of the request: block by
            // block, each block comes from a copy that reads it.
            if buf.len() > BLOCK_SIZE {
                for (i, blk) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
                    self.read_blocks(first + i as u64, blk)?;
                }
                return Ok(());
            }
            // The first copy cannot read it at all: the second answers, and
            // each block it holds good is written back.
            log::warn!("meta-data blocks {first}..: the first copy fails to read ({e}): read from the mirror");
            self.copies[1].read_blocks(first, buf)?;
            let mut n = 0;
            let write_back = self.write_back.load(Ordering::Relaxed);
            for (i, blk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
                let at = first + i as u64;
                if (self.check)(at, blk) != Verdict::Good {
                    continue;
                }
                if !write_back {
                    n += 1;
                } else if self.copies[0].write_blocks(at, blk).is_ok() {
                    self.rewrote(at, || format!("the device fails to read it: {e}"));
                    n += 1;
                }
            }
            self.healed.fetch_add(n, Ordering::Relaxed);
            return Ok(());
        }
        self.heal(first, buf)?;
        if self.mending.load(Ordering::Relaxed) && self.write_back.load(Ordering::Relaxed) {
            self.mend(first, buf)?;
        }
        Ok(())
    }

    fn read_checked(&self, first: u64, buf: &mut [u8], right: &dyn Fn(usize, &[u8]) -> bool) -> io::Result<()> {
        match self.alone() {
            Some(i) => self.copies[i].read_blocks(first, buf),
            None => self.read_checked_copies(first, buf, right),
        }
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let _shared = self.order.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = self.alone() {
            return self.copies[i].write_blocks(first, buf);
        }
        let [a, b] = &self.copies;
        if buf.len() <= KEPT_WRITE_MAX {
            let (second, owned) = (b.clone(), buf.to_vec());
            let out = self.workers.both(|| a.write_blocks(first, buf), move || second.write_blocks(first, &owned));
            return self.settle("write", out);
        }
        self.settle("write", both(|| a.write_blocks(first, buf), || b.write_blocks(first, buf)))
    }

    fn write_blocks_vectored(&self, first: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let _shared = self.order.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = self.alone() {
            return self.copies[i].write_blocks_vectored(first, bufs);
        }
        let [a, b] = &self.copies;
        if bufs.iter().map(|x| x.len()).sum::<usize>() <= KEPT_WRITE_MAX {
            let (second, owned) = (b.clone(), bufs.concat());
            let out =
                self.workers.both(|| a.write_blocks_vectored(first, bufs), move || second.write_blocks(first, &owned));
            return self.settle("write", out);
        }
        self.settle("write", both(|| a.write_blocks_vectored(first, bufs), || b.write_blocks_vectored(first, bufs)))
    }

    fn flush(&self) -> io::Result<()> {
        if let Some(i) = self.alone() {
            return self.copies[i].flush();
        }
        let [a, b] = &self.copies;
        if faults::active(Fault::MirrorAckBeforeSecond) {
            return a.flush();
        }
        let second = b.clone();
        self.settle("flush", self.workers.both(|| a.flush(), move || second.flush()))
    }

    fn refresh_block_count(&self) -> io::Result<u64> {
        let [a, b] = &self.copies;
        Ok(a.refresh_block_count()?.min(b.refresh_block_count()?))
    }
}
