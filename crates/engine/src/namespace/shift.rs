//! Collapsing and inserting ranges of a file (`fallocate`'s
//! `COLLAPSE_RANGE` and `INSERT_RANGE`), and giving a file its own copies
//! of blocks a snapshot shares (`UNSHARE_RANGE`).
//!
//! A collapse or an insert moves every extent and every cached page after
//! the offset by the length, and changes the size, in one operation: one
//! commit group carries all of it, so a crash shows the file before or
//! after, never half moved. The data blocks do not move; a block a
//! snapshot holds is still held where it now sits in the file, so the
//! snapshot's view (its own inode and extent tree) is untouched. The
//! volume checks the arguments ([`crate::volume::Volume::fallocate`]) and
//! makes room in the commit group first ([`Fs::shift_cost`]).

use super::Fs;
use super::btree;
use super::extents::EXTENT_VALUE_LEN;
use crate::error::{Error, Result};
use crate::format::inode::Body;
use crate::types::{BLOCK_BYTES, InodeNo};

/// Blocks an unshare step makes pages for at most (8 MiB): each is read
/// from the data device under the volume lock.
pub const UNSHARE_STEP_BLOCKS: u64 = 2048;

impl Fs {
    /// Log blocks a collapse or insert at file block `from` may dirty: the
    /// extent-tree leaves from there on (each rewritten once, and split or
    /// merged at most once more), the change records of the extents a
    /// collapse frees, and the inode. An extent map in the inode costs
    /// nothing beyond the inode.
    ///
    /// # Errors
    /// I/O and corruption errors reading the map.
    pub fn shift_cost(&mut self, ino: InodeNo, from: u64, freed_to: u64) -> Result<usize> {
        if !matches!(self.log.inode(ino)?.body, Body::Tree(_)) {
            return Ok(1);
        }
        let moved = self.extents_around(ino, from, u64::MAX)?.len();
        let freed = self.extents_around(ino, from, freed_to)?.len();
        let leaves = btree::leaves_for(moved, EXTENT_VALUE_LEN);
        // Every level above the leaves at most as many again, halved each level.
        Ok(2 * (2 * leaves + 8) + (freed * 16).div_ceil(crate::format::block::PAYLOAD_LEN) + 1)
    }

    /// Removes `[offset, offset + len)` from `ino` and moves what follows
    /// down by `len`; the file shrinks by `len`. Both are multiples of the
    /// block size and end before the end of the file (the volume checks).
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn collapse_range(&mut self, ino: InodeNo, offset: u64, len: u64) -> Result<()> {
        let (first, blocks) = (offset / BLOCK_BYTES, len / BLOCK_BYTES);
        let end = first + blocks;
        let size = self.log.inode(ino)?.size;
        if size <= offset + len || !offset.is_multiple_of(BLOCK_BYTES) || !len.is_multiple_of(BLOCK_BYTES) {
            return Err(Error::Invalid("collapse range not block-aligned inside the file"));
        }
        // An inline file is smaller than a block: the volume refused it.
        if matches!(self.log.inode(ino)?.body, Body::Inline(_)) {
            return Err(Error::Invalid("collapse range of an inline file"));
        }
        let released = self.pages.discard(ino, first, end);
        self.pages.forget_handed(ino, first, end);
        self.log.space_mut().unreserve(released);
        let (freed, done) = self.unmap_range(ino, first, end, usize::MAX)?;
        debug_assert!(done);
        self.free_data(ino, &freed)?;
        if !crate::faults::active(crate::faults::Fault::CollapseSizeLater) {
            self.shift_extents(ino, end, -(blocks as i64))?;
            self.pages.shift(ino, end, -(blocks as i64));
        }
        self.log.inode_mut(ino)?.size = size - len;
        self.intents.resized(ino);
        Ok(())
    }

    /// The second half of a collapse split in two by
    /// `Fault::CollapseSizeLater`: the extents and pages move in an
    /// operation of their own, after the size (the broken rule the crash
    /// explorer must catch).
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn collapse_shift_later(&mut self, ino: InodeNo, offset: u64, len: u64) -> Result<()> {
        let (first, blocks) = (offset / BLOCK_BYTES, len / BLOCK_BYTES);
        self.shift_extents(ino, first + blocks, -(blocks as i64))?;
        self.pages.shift(ino, first + blocks, -(blocks as i64));
        Ok(())
    }

    /// Moves everything from `offset` on up by `len`, leaving a hole of
    /// `len` bytes at `offset`; the file grows by `len`. Both are multiples
    /// of the block size, `offset` inside the file (the volume checks).
    ///
    /// # Errors
    /// `FileTooBig` when an extent (preallocated past the end of the file)
    /// would move past the largest file; `NoSpace(Data)` when an inline
    /// file's bytes cannot get a block; I/O and corruption errors.
    pub fn insert_range(&mut self, ino: InodeNo, offset: u64, len: u64) -> Result<()> {
        let (first, blocks) = (offset / BLOCK_BYTES, len / BLOCK_BYTES);
        let size = self.log.inode(ino)?.size;
        if offset >= size || !offset.is_multiple_of(BLOCK_BYTES) || !len.is_multiple_of(BLOCK_BYTES) {
            return Err(Error::Invalid("insert range not block-aligned inside the file"));
        }
        let new_size = size.checked_add(len).ok_or(Error::FileTooBig)?;
        if new_size > super::file::MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        let last = self.last_mapped_block(ino)?;
        if last.is_some_and(|l| l + blocks >= super::file::MAX_FILE_SIZE / BLOCK_BYTES) {
            return Err(Error::FileTooBig);
        }
        // The file outgrows its inode: its bytes go to page 0 first (the
        // commit writes them: the note below leaves nothing for later).
        self.uninline(ino)?;
        self.pages.expire(ino);
        self.pages.shift(ino, first, blocks as i64);
        self.shift_extents(ino, first, blocks as i64)?;
        self.log.inode_mut(ino)?.size = new_size;
        self.intents.resized(ino);
        Ok(())
    }

    /// The last file block mapped, if any.
    fn last_mapped_block(&mut self, ino: InodeNo) -> Result<Option<u64>> {
        match &self.log.inode(ino)?.body {
            Body::Extents(v) => Ok(v.last().map(|e| e.logical_end() - 1)),
            Body::Tree(t) => {
                let root = t.root;
                match btree::last_le(&mut self.log.tree(ino), Some(root), u64::MAX)? {
                    Some((k, v)) => Ok(Some(super::extents::decode(k, &v, ino)?.logical_end() - 1)),
                    None => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }

    /// One step of unsharing `[offset, offset + len)` of `ino`: every block
    /// in the range that a snapshot (or a kept tree) holds, written and
    /// with no page yet, gets a dirty page holding its bytes and a
    /// reservation, so that write-back gives it a block of the file's own
    /// (as a first overwrite would), at most [`UNSHARE_STEP_BLOCKS`] of
    /// them. Returns the block to go on from, None when the range is done.
    /// The file's contents never change, so a crash between steps shows
    /// the same file, its blocks shared or not.
    ///
    /// # Errors
    /// `NoSpace(Data)`; I/O and corruption errors.
    pub fn unshare_step(&mut self, ino: InodeNo, from: u64, end: u64) -> Result<Option<u64>> {
        let rec = self.log.inode(ino)?;
        if !matches!(rec.body, Body::Extents(_) | Body::Tree(_)) {
            return Ok(None);
        }
        let end = end.min(rec.size.div_ceil(BLOCK_BYTES));
        let mut b = from;
        let mut made = 0;
        while b < end {
            if made >= UNSHARE_STEP_BLOCKS || self.log.needs_seal() {
                return Ok(Some(b));
            }
            let Some(e) = self.next_extent(ino, b)? else { break };
            if e.logical >= end {
                break;
            }
            b = b.max(e.logical);
            let stop = e.logical_end().min(end);
            if e.unwritten {
                // Written in place whoever holds it: the snapshot reads zeros.
                b = stop;
                continue;
            }
            while b < stop && made < UNSHARE_STEP_BLOCKS {
                if self.pages.page(ino, b).is_none() && self.held_in_snapshot(&e, b) {
                    self.log.space_mut().reserve(1)?;
                    self.dirty_page(ino, b, false, false)?;
                    made += 1;
                }
                b += 1;
            }
        }
        Ok(None)
    }
}
