//! The inode map read block by block and given back within a budget: what
//! was derived from the whole map (free numbers, the count in use, the
//! orphans, the segments' live bytes) is kept per block *counted* (read
//! once since the mount), so that a block may leave memory once clean and
//! come back, read again, without being counted twice.

use super::IFile;
use crate::format::codec::DecodeResult;
use crate::format::ifile::IMAP_ORPHAN;
use crate::types::{BLOCK_BYTES, InodeNo, MetaBlock, SegmentNo};

impl IFile {
    /// Rebuilds the free lists and counters after the tables were loaded or
    /// rolled forward. An inode map loaded lazily contributes the blocks it
    /// has in memory; each block read later adds its own
    /// ([`IFile::accept_inode_block`]).
    ///
    /// # Panics
    /// A block counted before was given back: its numbers would be lost
    /// (blocks are given back only once the volume serves).
    pub fn rebuild_free_lists(&mut self) {
        self.free_in_block.clear();
        self.free_blocks.clear();
        self.freed_inodes.clear();
        self.orphan_set.clear();
        self.used_inodes = 0;
        if self.live_counted.is_some() {
            self.live_counted = Some(vec![0; self.geometry.count as usize]);
        }
        let per = self.inodes.per_block();
        for b in 0..self.inodes.block_count() as u32 {
            if self.inodes.is_loaded(b) {
                self.count_inode_block(b as usize, per);
            } else {
                assert!(!self.is_counted(b), "inode-map block {b} was given back before the free lists were rebuilt");
            }
        }
        self.free_nodes = (1..self.nodes.len() as u64).filter(|&i| self.nodes.get(i as usize) == 0).collect();
        self.used_nodes = (self.nodes.len() as u64 - 1) - self.free_nodes.len() as u64;
        if let Some(live) = &mut self.live_counted {
            for i in 1..self.nodes.len() {
                if let Some(s) = self.geometry.segment_of(MetaBlock(self.nodes.get(i))) {
                    live[s.0 as usize] += BLOCK_BYTES;
                }
            }
        }
    }

    /// Adds block `b`'s free numbers to the free list, its numbers in use
    /// to the count, its orphans to theirs and its live bytes to those
    /// counted.
    pub(super) fn count_inode_block(&mut self, b: usize, per: usize) {
        let end = ((b + 1) * per).min(self.inodes.len());
        for i in (b * per).max(1)..end {
            let e = self.inodes.get(i);
            if e.in_use() {
                self.used_inodes += 1;
                if e.flags & IMAP_ORPHAN != 0 {
                    self.orphan_set.insert(i as u64);
                }
                if let Some(live) = &mut self.live_counted
                    && let Some(s) = self.geometry.segment_of(e.address)
                {
                    live[s.0 as usize] += u64::from(e.record_len);
                }
            } else if !self.freed_inodes.contains(&(i as u64)) {
                self.list_free(i as u64);
            }
        }
    }

    /// Lists free number `i`.
    pub(super) fn list_free(&mut self, i: u64) {
        let b = i as usize / self.inodes.per_block();
        if self.free_in_block.len() <= b {
            self.free_in_block.resize(b + 1, 0);
        }
        self.free_in_block[b] += 1;
        self.free_blocks.insert(b as u32);
    }

    /// Takes number `i` off the free list if it is listed (before its entry
    /// changes: whether it is listed follows from the entry).
    pub(super) fn unlist_free(&mut self, i: u64) {
        let b = i as usize / self.inodes.per_block();
        let listed = i != 0
            && self.is_counted(b as u32)
            && !self.inodes.get(i as usize).in_use()
            && !self.freed_inodes.contains(&i);
        if listed && let Some(n) = self.free_in_block.get_mut(b) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.free_blocks.remove(&(b as u32));
            }
        }
    }

    /// The lowest listed free number: the lowest of the lowest block with
    /// any (whose entries must be in memory).
    pub(super) fn lowest_free(&mut self) -> Option<u64> {
        let per = self.inodes.per_block();
        while let Some(&b) = self.free_blocks.first() {
            let start = (b as usize * per).max(1);
            let end = ((b as usize + 1) * per).min(self.inodes.len());
            if let Some(i) =
                (start..end).find(|&i| !self.inodes.get(i).in_use() && !self.freed_inodes.contains(&(i as u64)))
            {
                return Some(i as u64);
            }
            // A count that says more than the block holds: a bug, but
            // the block has nothing to give.
            debug_assert!(false, "inode-map block {b} was counted with free numbers it does not hold");
            self.free_blocks.remove(&b);
        }
        None
    }

    pub(super) fn is_counted(&self, b: u32) -> bool {
        !self.uncounted.get(b as usize).copied().unwrap_or(false)
    }

    /// Leaves the inode map's blocks on disk, to be read when an inode in
    /// one is first needed ([`IFile::unloaded_inode_block`]) or by the
    /// volume's background load: a mount then takes the same time whatever
    /// the number of files. Block `keep`, the last, was loaded: it is where
    /// the map grows. Until every block is counted, free numbers come from
    /// the blocks read (lowest first among them) or past the end, the
    /// count of inodes in use covers the blocks read, and the live bytes
    /// the segment usage table says are trusted; the last block counted
    /// checks them ([`IFile::accept_inode_block`]).
    pub fn leave_inodes_on_disk_but(&mut self, keep: u32) {
        self.inodes.set_all_unloaded_but(keep);
        self.uncounted = (0..self.inodes.block_count() as u32).map(|b| !self.inodes.is_loaded(b)).collect();
        self.uncounted_count = self.inodes.unloaded_blocks();
        // A sparse IFile's usage table is not read at mount: its sums are
        // trusted, and checked by fsck only (not when the last block of
        // the map comes in, which would read the whole table).
        self.live_counted = (self.uncounted_count > 0 && !self.segments.is_sparse()).then(Vec::new);
        self.rebuild_free_lists();
    }

    /// The block of the inode map holding `ino` when it is not in memory
    /// (never read, or given back).
    #[must_use]
    pub fn unloaded_inode_block(&self, ino: InodeNo) -> Option<u32> {
        if self.inodes.unloaded_blocks() == 0 || ino.0 >= self.inodes.len() as u64 {
            return None;
        }
        let b = (ino.0 / self.inodes.per_block() as u64) as u32;
        (!self.inodes.is_loaded(b)).then_some(b)
    }

    /// Inode-map blocks not in memory, in order.
    #[must_use]
    pub fn unloaded_inode_blocks(&self) -> Vec<u32> {
        if self.inodes.unloaded_blocks() == 0 {
            return Vec::new();
        }
        (0..self.inodes.block_count() as u32).filter(|&b| !self.inodes.is_loaded(b)).collect()
    }

    /// Inode-map blocks never counted (nor read) since the mount, in order:
    /// what the background load reads.
    #[must_use]
    pub fn uncounted_inode_blocks(&self) -> Vec<u32> {
        if self.uncounted_count == 0 {
            return Vec::new();
        }
        (0..self.uncounted.len() as u32).filter(|&b| self.uncounted[b as usize]).collect()
    }

    /// Whether every inode-map block was counted: the free list, the count
    /// in use, the orphans and the segments' live bytes are whole (blocks
    /// may have been given back since).
    #[must_use]
    pub fn inodes_complete(&self) -> bool {
        self.uncounted_count == 0
    }

    /// Whether the whole inode map is in memory.
    #[must_use]
    pub fn inodes_in_memory(&self) -> bool {
        self.inodes.unloaded_blocks() == 0
    }

    /// Takes inode-map block `b`'s payload, read from disk (a block already
    /// in memory is left as it is: it may have changed since). When it was
    /// the last one never counted, the segments' live bytes are checked
    /// against what the maps hold and recounted; the segments that said
    /// otherwise are returned, as at a complete load.
    ///
    /// # Errors
    /// The payload does not decode as that block.
    pub fn accept_inode_block(&mut self, b: u32, payload: &[u8]) -> DecodeResult<Vec<(SegmentNo, u32, u64)>> {
        if self.inodes.is_loaded(b) {
            return Ok(Vec::new());
        }
        self.inodes.decode_block(b, payload)?;
        if self.is_counted(b) {
            // Given back and read again: counted when first read.
            return Ok(Vec::new());
        }
        self.count_inode_block(b as usize, self.inodes.per_block());
        self.uncounted[b as usize] = false;
        self.uncounted_count -= 1;
        if self.uncounted_count > 0 {
            return Ok(Vec::new());
        }
        self.uncounted = Vec::new();
        let live = self.live_counted.take().unwrap_or_default();
        Ok(self.set_live_bytes(live))
    }

    /// Notes that an inode of block `ino` was needed: the clock passes
    /// over its block once before giving it back.
    pub fn note_inode_use(&mut self, ino: InodeNo) {
        let b = ino.0 as usize / self.inodes.per_block();
        if let Some(r) = self.referenced.get_mut(b) {
            *r = true;
        } else if b < self.inodes.block_count() {
            self.referenced.resize(self.inodes.block_count(), false);
            self.referenced[b] = true;
        }
    }

    /// Gives back clean inode-map blocks until at most `keep` are in memory
    /// (a clock: a block used since the hand last passed is passed over
    /// once), never the last block (where the map grows) nor a block
    /// `pinned` says an inode of is in use in memory. Returns how many.
    pub fn evict_inode_blocks(&mut self, keep: usize, pinned: &dyn Fn(u32) -> bool) -> usize {
        let count = self.inodes.block_count();
        if self.inodes.loaded_blocks() <= keep || count < 2 {
            return 0;
        }
        self.referenced.resize(count, false);
        let mut evicted = 0;
        // Twice round: the first pass may only clear the used marks.
        for _ in 0..2 * count {
            if self.inodes.loaded_blocks() <= keep {
                break;
            }
            let b = self.hand % count;
            self.hand = (b + 1) % count;
            if b + 1 == count || pinned(b as u32) {
                continue;
            }
            if crate::faults::active(crate::faults::Fault::EvictDirtyMapBlocks) && self.inodes.is_loaded(b as u32) {
                #[cfg(feature = "fault-injection")]
                self.inodes.evict_even_dirty(b as u32);
                evicted += 1;
                continue;
            }
            if !self.inodes.is_evictable(b as u32) {
                continue;
            }
            if std::mem::take(&mut self.referenced[b]) {
                continue;
            }
            self.inodes.evict(b as u32);
            evicted += 1;
        }
        evicted
    }

    /// The lowest free inode number, if its map block is not in memory:
    /// it must be read before [`IFile::alloc_inode`] takes the number.
    #[must_use]
    pub fn next_free_inode_unloaded(&self) -> Option<InodeNo> {
        let b = *self.free_blocks.first()?;
        let first = InodeNo(u64::from(b) * self.inodes.per_block() as u64);
        self.unloaded_inode_block(first).map(|_| first)
    }

    /// Whether `ino` is on the orphan list (as far as the blocks counted
    /// say: one never read since the mount was touched by nothing).
    #[must_use]
    pub fn is_orphan(&self, ino: InodeNo) -> bool {
        self.orphan_set.contains(&ino.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ifile::ImapEntry;
    use crate::ifile::SegmentGeometry;

    /// Three blocks of inode map, all written (clean, with addresses).
    fn written() -> (IFile, usize) {
        let mut f = IFile::new(SegmentGeometry { first_block: 256, blocks: 256, count: 8 }, false);
        f.rebuild_free_lists();
        let per = f.inodes.per_block();
        for _ in 0..3 * per - 1 {
            let (ino, g) = f.alloc_inode();
            f.place_inode(ino, g, MetaBlock(300), 100);
        }
        for b in 0..3 {
            f.inodes.set_address(b, MetaBlock(600 + u64::from(b)));
        }
        (f, per)
    }

    #[test]
    fn a_block_given_back_and_read_again_is_not_counted_twice() {
        let (mut f, per) = written();
        f.set_orphan(InodeNo(5), true);
        // (The orphan flag dirtied block 0: written again.)
        f.inodes.set_address(0, MetaBlock(610));
        let payload = f.inodes.encode_block(0);
        let used = f.used_inodes();
        assert_eq!(f.evict_inode_blocks(1, &|_| false), 2, "every block but the last");
        assert!(f.inodes_complete(), "given back is not uncounted");
        assert_eq!(f.unloaded_inode_block(InodeNo(5)), Some(0));
        // The orphan list and the counts do not need the block.
        assert!(f.is_orphan(InodeNo(5)));
        assert_eq!(f.orphans(), vec![InodeNo(5)]);
        assert!(f.accept_inode_block(0, &payload).unwrap().is_empty());
        assert_eq!(f.used_inodes(), used);
        assert_eq!(f.inode(InodeNo(per as u64 - 1)).map(|e| e.record_len), Some(100));
    }

    #[test]
    fn the_clock_spares_dirty_pinned_and_recently_used_blocks() {
        let (mut f, per) = written();
        f.note_inode_use(InodeNo(1));
        f.free_inode(InodeNo(per as u64 + 1), 1);
        assert_eq!(f.evict_inode_blocks(0, &|_| false), 1, "block 0 once passed over, then given back");
        assert!(!f.inodes.is_loaded(0) && f.inodes.is_loaded(1) && f.inodes.is_loaded(2));
        let (mut f, _) = written();
        assert_eq!(f.evict_inode_blocks(0, &|b| b == 1), 1);
        assert!(f.inodes.is_loaded(1), "pinned");
    }

    #[test]
    fn a_free_number_in_a_block_given_back_is_taken_once_it_is_read() {
        let (mut f, per) = written();
        f.free_inode(InodeNo(3), 1);
        f.release_freed_inodes();
        let payload = f.inodes.encode_block(0);
        f.inodes.set_address(0, MetaBlock(600));
        assert_eq!(f.evict_inode_blocks(1, &|_| false), 2);
        assert_eq!(f.next_free_inode_unloaded(), Some(InodeNo(0)), "block 0 must be read first");
        assert!(f.accept_inode_block(0, &payload).unwrap().is_empty());
        assert_eq!(f.next_free_inode_unloaded(), None);
        assert_eq!(f.alloc_inode(), (InodeNo(3), 1));
        // Then past the end: the last block is full.
        assert_eq!(f.alloc_inode().0, InodeNo(3 * per as u64));
        assert_eq!(f.inode(InodeNo(3)).map(|e: ImapEntry| e.in_use()), Some(true));
    }

    #[test]
    fn the_last_block_counted_checks_live_bytes_without_the_map_in_memory() {
        let (mut f, _) = written();
        let payloads: Vec<Vec<u8>> = (0..2).map(|b| f.inodes.encode_block(b)).collect();
        f.leave_inodes_on_disk_but(2);
        // A wrong sum, as a damaged checkpoint could hold.
        f.segments.update(0, |u| u.live_bytes += 7);
        assert!(f.accept_inode_block(0, &payloads[0]).unwrap().is_empty());
        assert_eq!(f.evict_inode_blocks(1, &|_| false), 1, "block 0, counted, is given back");
        let wrong = f.accept_inode_block(1, &payloads[1]).unwrap();
        // Every record, 100 bytes, lives in segment 0; no node does.
        let want = f.used_inodes() * 100;
        assert_eq!(wrong, vec![(SegmentNo(0), want as u32 + 7, want)]);
        assert_eq!(u64::from(f.segment(SegmentNo(0)).live_bytes), want);
    }
}
