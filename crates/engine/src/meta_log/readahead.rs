//! Read-ahead of cold meta-data.
//!
//! Meta-data written together is read together: a directory's inodes and
//! nodes went into the same partial segments. So a miss reads the aligned
//! window around the block, clipped to its segment, in one request, and
//! keeps the other raw blocks until they are asked for. Each block is
//! handed out once (then the decoded cache has it) and every block the log
//! writes is forgotten first, so nothing here outlives the bytes on disk.

use std::collections::{HashMap, VecDeque};

use crate::format::superblock::Superblock;
use crate::types::{BLOCK_SIZE, MetaBlock};

/// Blocks read per miss (128 KiB: a small fraction of a disk's seek time).
pub const WINDOW_BLOCKS: u64 = 32;
/// Raw blocks kept at most (4 MiB).
const CAPACITY: usize = 1024;

/// Raw meta-data blocks read ahead and not asked for yet.
#[derive(Debug, Default)]
pub struct ReadAhead {
    blocks: HashMap<u64, Box<[u8]>>,
    /// Insertion order, for eviction; may name blocks already taken.
    order: VecDeque<u64>,
    /// Misses that read a window.
    pub windows: u64,
    /// Blocks served without a device request.
    pub hits: u64,
    /// Bumped whenever blocks are forgotten (the log rewrites them): a
    /// window read without the volume lock is kept only if no forget came
    /// between the miss and the read's end ([`ReadAhead::fill_if`]).
    generation: u64,
    /// Set while a reader runs that must not read the device itself (it
    /// holds the volume lock): a miss returns `Error::MustRead` instead.
    pub defer: bool,
}

impl ReadAhead {
    /// Blocks held.
    #[must_use]
    pub fn held(&self) -> usize {
        self.blocks.len()
    }

    /// Takes block `b` if it was read ahead.
    pub fn take(&mut self, b: MetaBlock) -> Option<Box<[u8]>> {
        let got = self.blocks.remove(&b.0);
        if got.is_some() {
            self.hits += 1;
        }
        got
    }

    /// The window to read for a miss on `b`: aligned, inside `b`'s segment
    /// (None outside the segment area, where nothing is read ahead).
    #[must_use]
    pub fn window(sb: &Superblock, b: MetaBlock) -> Option<(MetaBlock, usize)> {
        let seg = sb.segment_of(b)?;
        let seg_start = sb.segment_start(seg).0;
        let seg_end = (seg_start + u64::from(sb.segment_blocks)).min(sb.meta_blocks);
        let start = seg_start + (b.0 - seg_start) / WINDOW_BLOCKS * WINDOW_BLOCKS;
        let end = (start + WINDOW_BLOCKS).min(seg_end);
        (end > b.0).then(|| (MetaBlock(start), (end - start) as usize))
    }

    /// Keeps the blocks of a window read from `start`, except `skip` (the
    /// one asked for) and any already held.
    pub fn fill(&mut self, start: MetaBlock, raw: &[u8], skip: MetaBlock) {
        self.windows += 1;
        for (i, block) in raw.chunks_exact(BLOCK_SIZE).enumerate() {
            let b = start.0 + i as u64;
            if b == skip.0 || self.blocks.contains_key(&b) {
                continue;
            }
            self.blocks.insert(b, block.into());
            self.order.push_back(b);
        }
        while self.blocks.len() > CAPACITY {
            match self.order.pop_front() {
                Some(old) => {
                    self.blocks.remove(&old);
                }
                None => break,
            }
        }
        if self.order.len() > 4 * CAPACITY {
            self.order.retain(|b| self.blocks.contains_key(b));
        }
    }

    /// The count of forgets so far (see [`ReadAhead::fill_if`]).
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps every block of a window read from `start` without the volume
    /// lock, if nothing was forgotten since `generation` was taken before
    /// the read (else the window may hold blocks the log has rewritten
    /// since, and is dropped: the reader will miss and read again).
    pub fn fill_if(&mut self, generation: u64, start: MetaBlock, raw: &[u8]) -> bool {
        if generation != self.generation {
            return false;
        }
        self.fill(start, raw, MetaBlock(u64::MAX));
        true
    }

    /// Forgets blocks `start..start + count`: they are being rewritten.
    pub fn forget(&mut self, start: MetaBlock, count: usize) {
        self.generation += 1;
        if self.blocks.is_empty() {
            return;
        }
        if count > self.blocks.len() {
            self.blocks.retain(|&b, _| b < start.0 || b >= start.0 + count as u64);
        } else {
            for b in start.0..start.0 + count as u64 {
                self.blocks.remove(&b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_served_once_and_forgotten_when_rewritten() {
        let mut ra = ReadAhead::default();
        let raw: Vec<u8> = (0..4).flat_map(|i| vec![i as u8; BLOCK_SIZE]).collect();
        ra.fill(MetaBlock(100), &raw, MetaBlock(101));
        assert!(ra.take(MetaBlock(101)).is_none(), "the block asked for is not kept");
        assert_eq!(ra.take(MetaBlock(102)).unwrap()[0], 2);
        assert!(ra.take(MetaBlock(102)).is_none(), "served once");
        ra.forget(MetaBlock(103), 1);
        assert!(ra.take(MetaBlock(103)).is_none());
        assert_eq!(ra.take(MetaBlock(100)).unwrap()[0], 0);
    }

    #[test]
    fn a_window_read_across_a_forget_is_dropped() {
        let mut ra = ReadAhead::default();
        let raw = vec![7u8; BLOCK_SIZE * 2];
        let g = ra.generation();
        ra.forget(MetaBlock(500), 1);
        assert!(!ra.fill_if(g, MetaBlock(10), &raw), "a forget came between the miss and the read");
        assert!(ra.take(MetaBlock(10)).is_none());
        let g = ra.generation();
        assert!(ra.fill_if(g, MetaBlock(10), &raw));
        assert!(ra.take(MetaBlock(10)).is_some(), "the block asked for is kept too");
        assert!(ra.take(MetaBlock(11)).is_some());
    }

    #[test]
    fn capacity_bounds_what_is_kept() {
        let mut ra = ReadAhead::default();
        let raw = vec![0u8; BLOCK_SIZE * 32];
        for w in 0..64 {
            ra.fill(MetaBlock(w * 32), &raw, MetaBlock(u64::MAX));
        }
        assert!(ra.blocks.len() <= CAPACITY);
        assert!(ra.take(MetaBlock(63 * 32)).is_some(), "the newest window is kept");
        assert!(ra.take(MetaBlock(0)).is_none(), "the oldest went first");
    }
}
