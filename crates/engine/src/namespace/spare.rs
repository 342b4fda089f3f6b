//! Page buffers kept for reuse, and the whole pages of a write filled
//! before the volume lock is taken.
//!
//! A WRITE's copy into the page cache's buffers was done under the volume
//! lock: 1 MiB per request of a stream, during which every other request
//! (the next WRITEs, their SETATTRs, the background writer sealing a step)
//! waited. The blocks a write covers whole need none of their old bytes,
//! so they are copied first, into buffers taken from the spare pool
//! ([`SparePages`], its own small lock), and only handed over under the
//! volume lock ([`Prefilled`]). A buffer handed over belongs to its page
//! alone: a page whose old buffer a write-back run still holds gets the
//! new buffer in its place, and the run keeps writing the old one.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::device::{PageBuf, SharedPage};
use crate::types::{BLOCK_BYTES, BLOCK_SIZE};

/// Page buffers kept for reuse at most (64 MiB): a stream's pages come
/// back a step (16 MiB) at a time while the next steps' pages are being
/// filled, and with 16 MiB kept, a fresh buffer was faulted in for every
/// other page of a 1 GiB copy (18% of the serving process's samples).
/// Never more than half the dirty-data limit ([`SparePages::limit`]), so
/// that a small `cache=` bounds them too.
pub const SPARE_PAGES: usize = 16384;
/// Page buffers kept once nothing is dirty (16 MiB).
const SPARE_IDLE_PAGES: usize = 4096;
/// Whole pages one write fills before the lock at most (1 MiB, the
/// mount's largest WRITE); the rest of a larger write is copied under it.
pub const PREFILL_MAX_PAGES: usize = 256;

/// Buffers of pages that went (written, truncated away), for the next
/// pages: allocating a fresh 4 KiB block per page was the largest cost of
/// a small write in the PostMark profile (the allocator gave the memory
/// back after each commit and faulted it in again). Shared by the page
/// cache (under the volume lock) and the writers filling pages before it;
/// lock order: the volume lock, then this one.
#[derive(Debug, Clone, Default)]
pub struct SparePages(Arc<Mutex<Spare>>);

#[derive(Debug, Default)]
struct Spare {
    bufs: Vec<Box<PageBuf>>,
    /// Kept at most ([`SPARE_PAGES`] unless limited).
    max: Option<usize>,
}

impl Spare {
    fn max(&self) -> usize {
        self.max.unwrap_or(SPARE_PAGES)
    }
}

impl SparePages {
    fn lock(&self) -> MutexGuard<'_, Spare> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Buffers kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().bufs.len()
    }

    /// Whether none is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A kept buffer, its bytes left from its last page.
    pub(super) fn take(&self) -> Option<Box<PageBuf>> {
        self.lock().bufs.pop()
    }

    /// Keeps the buffers of pages that went, as many as there is room for;
    /// a buffer a write-back run still holds goes when the run does.
    pub(super) fn recycle(&self, pages: impl IntoIterator<Item = SharedPage>) {
        let mut s = self.lock();
        let max = s.max();
        for p in pages {
            if s.bufs.len() >= max {
                break;
            }
            if let Ok(b) = Arc::try_unwrap(p) {
                s.bufs.push(b);
            }
        }
    }

    /// Keeps at most half of `dirty_limit` bytes of buffers: they are
    /// memory the cache limit is meant to bound, beside the dirty pages.
    pub fn limit(&self, dirty_limit: usize) {
        let mut s = self.lock();
        let max = SPARE_PAGES.min(dirty_limit / 2 / BLOCK_SIZE);
        s.max = Some(max);
        s.bufs.truncate(max);
    }

    /// Gives back the buffers a stream needed (called once no page is held).
    pub(super) fn trim_idle(&self) {
        let mut s = self.lock();
        if s.bufs.len() > SPARE_IDLE_PAGES {
            s.bufs.truncate(SPARE_IDLE_PAGES);
            s.bufs.shrink_to_fit();
        }
    }
}

/// The blocks a write covers whole, copied into their own buffers before
/// the volume lock is taken; the write hands each to its page under the
/// lock ([`super::Fs::write_prefilled`]) instead of copying it there.
#[derive(Debug, Default)]
pub struct Prefilled {
    /// File block of the first buffer.
    first: u64,
    /// One per block from `first`; taken (None) once handed over.
    bufs: Vec<Option<Box<PageBuf>>>,
}

impl Prefilled {
    /// Copies the blocks that `data`, written at `offset`, covers whole (the
    /// first [`PREFILL_MAX_PAGES`] of them) into buffers from `spare`, or
    /// fresh ones once it has none.
    #[must_use]
    pub fn fill(spare: &SparePages, offset: u64, data: &[u8]) -> Prefilled {
        let end = offset.saturating_add(data.len() as u64);
        let first = offset.div_ceil(BLOCK_BYTES);
        let last = end / BLOCK_BYTES;
        if first >= last {
            return Prefilled::default();
        }
        let n = usize::try_from(last - first).unwrap_or(usize::MAX).min(PREFILL_MAX_PAGES);
        let mut bufs = Vec::with_capacity(n);
        {
            let mut s = spare.lock();
            let keep = s.bufs.len().saturating_sub(n);
            bufs.extend(s.bufs.drain(keep..).map(Some));
        }
        // Below a block: the cast cannot truncate.
        let skip = (first * BLOCK_BYTES - offset) as usize;
        for (i, chunk) in data[skip..].chunks_exact(BLOCK_SIZE).take(n).enumerate() {
            if i == bufs.len() {
                bufs.push(Some(PageBuf::zeroed()));
            }
            if let Some(Some(b)) = bufs.get_mut(i) {
                b.copy_from_slice(chunk);
            }
        }
        Prefilled { first, bufs }
    }

    /// The buffer holding block `block` whole, if this write filled it and
    /// it was not handed over yet.
    pub(super) fn take(&mut self, block: u64) -> Option<Box<PageBuf>> {
        let i = usize::try_from(block.checked_sub(self.first)?).ok()?;
        self.bufs.get_mut(i)?.take()
    }

    /// Buffers not handed over (the write failed, or stayed inline): back
    /// to the pool.
    pub fn give_back(self, spare: &SparePages) {
        let mut s = spare.lock();
        let room = s.max().saturating_sub(s.bufs.len());
        s.bufs.extend(self.bufs.into_iter().flatten().take(room));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_blocks_are_prefilled_and_each_once() {
        let spare = SparePages::default();
        spare.recycle((0..2).map(|_| Arc::new(PageBuf::zeroed())));
        let data: Vec<u8> = (0..3 * BLOCK_SIZE + 200).map(|i| (i / BLOCK_SIZE) as u8 + 1).collect();
        // From 100 bytes into block 0: blocks 1 and 2 are covered whole.
        let mut pre = Prefilled::fill(&spare, 100, &data);
        assert_eq!(spare.len(), 0, "both spares taken");
        assert!(pre.take(0).is_none());
        let b1 = pre.take(1).expect("block 1 filled");
        assert_eq!(&b1[..], &data[BLOCK_SIZE - 100..2 * BLOCK_SIZE - 100]);
        assert!(pre.take(1).is_none(), "handed over once");
        assert!(pre.take(3).is_none());
        pre.give_back(&spare);
        assert_eq!(spare.len(), 1, "block 2's buffer back");
        assert!(Prefilled::fill(&spare, 1, &data[..BLOCK_SIZE]).bufs.is_empty());
    }

    #[test]
    fn a_buffer_a_run_holds_is_not_kept_for_reuse() {
        let spare = SparePages::default();
        let held: SharedPage = Arc::new(PageBuf::zeroed());
        let run = Arc::clone(&held);
        spare.recycle([held]);
        assert!(spare.is_empty(), "the run still writes it");
        drop(run);
        spare.limit(2 * BLOCK_SIZE);
        spare.recycle((0..3).map(|_| Arc::new(PageBuf::zeroed())));
        assert_eq!(spare.len(), 1, "half of a two-page dirty limit");
    }
}
