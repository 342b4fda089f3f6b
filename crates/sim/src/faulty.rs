//! A seeded fault-injecting device: EIO on read, write or flush, a write
//! silently lost, a write landing at the wrong block. And [`BadBlocks`]: a
//! device whose chosen blocks fail every read, as bad sectors do (the
//! crash explorer puts one under each copy of a mirror, failing different
//! blocks).
//!
//! It models a disk with a volatile write cache over a durable medium (the
//! inner device): writes wait in the cache until a flush; a flush that
//! fails drops them, as Linux drops dirty pages after a failed write-back
//! (the PostgreSQL fsync lesson: a retried fsync would then "succeed" with
//! the data gone). What the inner device holds at any moment is what a
//! power failure would leave. Every fault drawn is logged with the request
//! it hit, so a failure replays from the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dualfs_engine::device::BlockDevice;
use dualfs_engine::types::BLOCK_SIZE;

use crate::rng::Rng;

/// What went wrong with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A read failed with EIO; nothing was read.
    ReadError,
    /// A write failed with EIO; nothing was written.
    WriteError,
    /// A flush failed with EIO; every write since the last flush is gone.
    FlushError,
    /// A write reported success and never reached the medium.
    LostWrite,
    /// A write reported success and landed at another block.
    Misdirected,
}

impl FaultKind {
    /// Whether the device said nothing about it.
    #[must_use]
    pub fn is_silent(self) -> bool {
        matches!(self, FaultKind::LostWrite | FaultKind::Misdirected)
    }
}

/// How likely each fault is, in faults per million requests of its kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultRates {
    /// EIO on a read.
    pub read_error: u32,
    /// EIO on a write.
    pub write_error: u32,
    /// EIO on a flush.
    pub flush_error: u32,
    /// A write lost.
    pub lost_write: u32,
    /// A write misdirected.
    pub misdirected: u32,
}

/// One fault that happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injected {
    /// What.
    pub kind: FaultKind,
    /// The request's number on this device (reads, writes and flushes counted together).
    pub request: u64,
    /// Its first block (0 for a flush).
    pub block: u64,
    /// Flushes that had succeeded before it.
    pub flushes_before: u64,
}

#[derive(Debug)]
struct State {
    rng: Rng,
    rates: FaultRates,
    armed: bool,
    pending: BTreeMap<u64, Box<[u8]>>,
    requests: u64,
    flushes: u64,
    log: Vec<Injected>,
}

/// A device that fails on a seeded schedule (see the module docs).
#[derive(Debug)]
pub struct FaultyDevice {
    inner: Arc<dyn BlockDevice>,
    state: Mutex<State>,
}

impl FaultyDevice {
    /// Faults drawn from `seed` at `rates` over `inner`; disarmed until
    /// [`FaultyDevice::arm`] (so that mkfs and the first mount succeed).
    #[must_use]
    pub fn new(inner: Arc<dyn BlockDevice>, seed: u64, rates: FaultRates) -> FaultyDevice {
        let state = State {
            rng: Rng::new(seed),
            rates,
            armed: false,
            pending: BTreeMap::new(),
            requests: 0,
            flushes: 0,
            log: Vec::new(),
        };
        FaultyDevice { inner, state: Mutex::new(state) }
    }

    /// Starts injecting faults.
    pub fn arm(&self) {
        self.lock().armed = true;
    }

    /// Stops injecting faults.
    pub fn disarm(&self) {
        self.lock().armed = false;
    }

    /// Every fault injected so far.
    #[must_use]
    pub fn injected(&self) -> Vec<Injected> {
        self.lock().log.clone()
    }

    /// Flushes that succeeded.
    #[must_use]
    pub fn flushes(&self) -> u64 {
        self.lock().flushes
    }

    /// Forgets every write not yet flushed: what a power failure does.
    pub fn crash(&self) {
        self.lock().pending.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected EIO on {what}"))
}

impl State {
    /// Draws whether a fault of `rate` per million happens to this request.
    fn draw(&mut self, rate: u32) -> bool {
        self.armed && rate > 0 && self.rng.below(1_000_000) < u64::from(rate)
    }

    fn note(&mut self, kind: FaultKind, block: u64) {
        let request = self.requests;
        let flushes_before = self.flushes;
        self.log.push(Injected { kind, request, block, flushes_before });
    }
}

impl BlockDevice for FaultyDevice {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut s = self.lock();
        s.requests += 1;
        let rates = s.rates;
        if s.draw(rates.read_error) {
            s.note(FaultKind::ReadError, first);
            return Err(eio("read"));
        }
        self.inner.read_blocks(first, buf)?;
        for (i, chunk) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            if let Some(b) = s.pending.get(&(first + i as u64)) {
                chunk.copy_from_slice(b);
            }
        }
        Ok(())
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        let mut s = self.lock();
        s.requests += 1;
        let count = (buf.len() / BLOCK_SIZE) as u64;
        if first.checked_add(count).is_none_or(|end| end > self.inner.block_count()) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "beyond the end of the device"));
        }
        let rates = s.rates;
        if s.draw(rates.write_error) {
            s.note(FaultKind::WriteError, first);
            return Err(eio("write"));
        }
        // A silent fault hits one block of the request.
        let victim = first + s.rng.below(count.max(1));
        let mut target = None;
        if s.draw(rates.lost_write) {
            s.note(FaultKind::LostWrite, victim);
            target = Some(None);
        } else if s.draw(rates.misdirected) {
            let elsewhere = s.rng.below(self.inner.block_count());
            s.note(FaultKind::Misdirected, victim);
            target = Some(Some(elsewhere));
        }
        for (i, chunk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let at = first + i as u64;
            let at = match target {
                Some(redirect) if at == victim => match redirect {
                    None => continue,
                    Some(other) => other,
                },
                _ => at,
            };
            s.pending.insert(at, chunk.into());
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut s = self.lock();
        s.requests += 1;
        let rates = s.rates;
        if s.draw(rates.flush_error) {
            s.note(FaultKind::FlushError, 0);
            // The cache gave up on them: gone, and never reported again.
            s.pending.clear();
            return Err(eio("flush"));
        }
        let pending = std::mem::take(&mut s.pending);
        for (at, b) in pending {
            self.inner.write_blocks(at, &b)?;
        }
        self.inner.flush()?;
        s.flushes += 1;
        Ok(())
    }
}

/// A device whose chosen blocks fail every read that touches them with
/// EIO, as bad sectors do, until written again (a drive remaps a sector on
/// write).
#[derive(Debug)]
pub struct BadBlocks {
    inner: Arc<dyn BlockDevice>,
    bad: Mutex<BTreeSet<u64>>,
    failed: AtomicU64,
}

impl BadBlocks {
    /// `inner` with `blocks` unreadable.
    #[must_use]
    pub fn new(inner: Arc<dyn BlockDevice>, blocks: impl IntoIterator<Item = u64>) -> BadBlocks {
        BadBlocks { inner, bad: Mutex::new(blocks.into_iter().collect()), failed: AtomicU64::new(0) }
    }

    /// Reads failed so far.
    #[must_use]
    pub fn reads_failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    fn bad(&self) -> MutexGuard<'_, BTreeSet<u64>> {
        self.bad.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BlockDevice for BadBlocks {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = first + (buf.len() / BLOCK_SIZE) as u64;
        if let Some(b) = self.bad().range(first..end).next() {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::other(format!("injected EIO: block {b} is bad")));
        }
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_blocks(first, buf)?;
        let end = first + (buf.len() / BLOCK_SIZE) as u64;
        let mut bad = self.bad();
        let mended: Vec<u64> = bad.range(first..end).copied().collect();
        for b in mended {
            bad.remove(&b);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}
