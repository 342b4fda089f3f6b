//! File operations on data: inline bytes, reads, writes into the page cache
//! ([`super::pages`]), truncation, holes, preallocation, seeking.
//!
//! A `write` only fills pages and reserves data blocks for the holes it
//! covers. Blocks are allocated at write-back ([`super::writeback`]), when
//! the whole dirty run of a file is known, so a file written sequentially
//! gets one extent, placed after the file's previous extent or in its
//! directory's group.

use super::Fs;
use super::pages::{Page, PageState};
use super::spare::Prefilled;
use crate::device::{self, PageBuf};
use crate::error::{DeviceRole, Error, Result};
use crate::format::descriptor::Change;
use crate::format::inode::{Body, Extent};
use crate::types::{BLOCK_BYTES, BLOCK_SIZE, DataBlock, FileKind, InodeNo};

/// Largest file: 16 TiB, as ext4.
pub use crate::format::inode::MAX_FILE_SIZE;

/// Extents freed per truncation step, bounding the change records one
/// operation adds to a partial segment.
pub const TRUNCATE_STEP_EXTENTS: usize = 256;

/// A piece of a read, resolved under the lock and completed without it.
#[derive(Debug)]
pub enum ReadPiece {
    /// Bytes already in memory.
    Bytes(Vec<u8>),
    /// A hole.
    Zeros(usize),
    /// `len` bytes of the data device starting `skip` bytes into block `at`.
    Device {
        /// First block.
        at: DataBlock,
        /// Bytes to skip in it.
        skip: usize,
        /// Bytes wanted.
        len: usize,
    },
}

/// `SEEK_DATA` or `SEEK_HOLE`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Whence {
    /// The next byte of data at or after the offset.
    Data,
    /// The next hole at or after the offset (end of file counts).
    Hole,
}

impl Fs {
    fn regular(&mut self, ino: InodeNo) -> Result<()> {
        match FileKind::from_mode(self.log.inode(ino)?.mode) {
            Some(FileKind::Regular) => Ok(()),
            Some(FileKind::Directory) => Err(Error::IsDir),
            _ => Err(Error::Invalid("not a regular file")),
        }
    }

    /// Reads a block of the data device.
    fn read_data_block(&self, at: DataBlock) -> Result<Vec<u8>> {
        device::read(self.log.data_device().as_ref(), DeviceRole::Data, at.0, 1)
    }

    /// Resolves a read of up to `size` bytes at `offset`.
    ///
    /// # Errors
    /// `IsDir` and friends; I/O and corruption errors.
    pub fn read_plan(&mut self, ino: InodeNo, offset: u64, size: usize) -> Result<Vec<ReadPiece>> {
        self.regular(ino)?;
        let rec = self.log.inode(ino)?;
        let file_size = rec.size;
        if offset >= file_size || size == 0 {
            return Ok(Vec::new());
        }
        let end = file_size.min(offset.saturating_add(size as u64));
        if let Body::Inline(d) = &rec.body {
            let mut v = vec![0u8; (end - offset) as usize];
            let have = d.len() as u64;
            if offset < have {
                let n = (have.min(end) - offset) as usize;
                v[..n].copy_from_slice(&d[offset as usize..offset as usize + n]);
            }
            return Ok(vec![ReadPiece::Bytes(v)]);
        }
        let mut pieces: Vec<ReadPiece> = Vec::new();
        let mut pos = offset;
        let mut extent: Option<Extent> = None;
        while pos < end {
            let block = pos / BLOCK_BYTES;
            let skip = (pos % BLOCK_BYTES) as usize;
            let len = ((BLOCK_BYTES - skip as u64).min(end - pos)) as usize;
            if let Some(p) = self.pages.page(ino, block) {
                pieces.push(ReadPiece::Bytes(p.data[skip..skip + len].to_vec()));
            } else {
                if extent.is_none_or(|e| block < e.logical || block >= e.logical_end()) {
                    extent = self.extent_at(ino, block)?;
                }
                match extent {
                    Some(e) if !e.unwritten => {
                        let at = DataBlock(e.physical.0 + (block - e.logical));
                        match pieces.last_mut() {
                            Some(ReadPiece::Device { at: a, skip: s, len: l })
                                if a.0 + ((*s + *l) / BLOCK_SIZE) as u64 == at.0
                                    && (*s + *l) % BLOCK_SIZE == 0
                                    && skip == 0 =>
                            {
                                *l += len;
                            }
                            _ => pieces.push(ReadPiece::Device { at, skip, len }),
                        }
                    }
                    _ => match pieces.last_mut() {
                        Some(ReadPiece::Zeros(n)) => *n += len,
                        _ => pieces.push(ReadPiece::Zeros(len)),
                    },
                }
            }
            pos += len as u64;
        }
        Ok(pieces)
    }

    /// Writes `data` at `offset`, extending the file as needed.
    ///
    /// # Errors
    /// `FileTooBig` past the maximum size, `NoSpace(Data)` when the blocks
    /// cannot be reserved; I/O errors.
    pub fn write(&mut self, ino: InodeNo, offset: u64, data: &[u8]) -> Result<()> {
        self.write_prefilled(ino, offset, data, &mut Prefilled::default())
    }

    /// [`Fs::write`], with the blocks `data` covers whole already copied
    /// into `pre` (before the volume lock was taken): each goes to its page
    /// as it is, and is taken out of `pre`. What `pre` lacks is copied here.
    ///
    /// # Errors
    /// As [`Fs::write`].
    pub fn write_prefilled(&mut self, ino: InodeNo, offset: u64, data: &[u8], pre: &mut Prefilled) -> Result<()> {
        self.regular(ino)?;
        let end = offset.checked_add(data.len() as u64).ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        if data.is_empty() {
            return Ok(());
        }
        let inline_max = u64::from(self.config.inline_max);
        let rec = self.log.inode(ino)?;
        let stays_inline = matches!(rec.body, Body::Inline(_) | Body::Empty)
            && end <= inline_max
            && rec.size <= inline_max
            && !self.pages.files.contains_key(&ino);
        if stays_inline {
            let mut rec = self.log.inode_mut(ino)?;
            let mut bytes = match std::mem::take(&mut rec.body) {
                Body::Inline(b) => b,
                _ => Vec::new(),
            };
            let size = rec.size.max(end) as usize;
            bytes.resize(size, 0);
            bytes[offset as usize..end as usize].copy_from_slice(data);
            rec.body = Body::Inline(bytes);
            let grew = rec.size != size as u64;
            rec.size = size as u64;
            drop(rec);
            if grew {
                self.intents.resized(ino);
            }
            return Ok(());
        }
        // Moving inline bytes out takes a block.
        let uninlined = u64::from(matches!(&rec.body, Body::Inline(b) if !b.is_empty()));
        self.uninline(ino)?;

        // Reserve every block this write brings into existence before
        // touching any (with order=strict, an overwrite brings one too).
        let first = offset / BLOCK_BYTES;
        let last = (end - 1) / BLOCK_BYTES;
        let mut needed = 0;
        // Blocks the file gains (not those an overwrite moves): its quota.
        let mut grows = uninlined;
        let mut extent: Option<Extent> = None;
        for b in first..=last {
            if let Some(p) = self.pages.page(ino, b) {
                needed += u64::from(self.config.strict && !matches!(p.state, PageState::Dirty { .. }));
                continue;
            }
            if extent.is_none_or(|e| b < e.logical || b >= e.logical_end()) {
                extent = self.extent_at(ino, b)?;
            }
            if extent.is_none_or(|e| (!e.unwritten && self.config.strict) || self.held_in_snapshot(&e, b)) {
                needed += 1;
                grows += u64::from(extent.is_none());
            }
        }
        self.quota_allows_blocks(ino, grows, self.quota_now)?;
        self.log.space_mut().reserve(needed)?;

        let size = self.log.inode(ino)?.size;
        let mut pos = offset;
        let mut src = data;
        while !src.is_empty() {
            let block = pos / BLOCK_BYTES;
            let skip = (pos % BLOCK_BYTES) as usize;
            let n = (BLOCK_SIZE - skip).min(src.len());
            // A page written from its start to the block's end, or to or
            // past end of file (an append), needs none of its old bytes.
            let whole = skip == 0 && (n == BLOCK_SIZE || pos + n as u64 >= size);
            let given = if n == BLOCK_SIZE { pre.take(block) } else { None };
            if given.is_some() {
                self.dirty_page_with(ino, block, whole, true, given)?;
            } else {
                self.dirty_page(ino, block, whole, n == BLOCK_SIZE)?;
                let pages = self.pages.files.entry(ino).or_default();
                let p = pages.get_mut(&block).ok_or(Error::Invalid("page vanished"))?;
                p.bytes_mut()[skip..skip + n].copy_from_slice(&src[..n]);
            }
            pos += n as u64;
            src = &src[n..];
        }
        let mut rec = self.log.inode_mut(ino)?;
        let grew = end > rec.size;
        rec.size = rec.size.max(end);
        drop(rec);
        if grew {
            self.intents.resized(ino);
        }
        Ok(())
    }

    /// Makes sure block `block` of `ino` has a dirty page, filled from disk
    /// unless its old bytes are not needed (`whole`). A new page over a hole
    /// takes one of the caller's reservations. With `covered` the caller
    /// writes every byte of a new page at once, so it is not cleared first.
    pub(super) fn dirty_page(&mut self, ino: InodeNo, block: u64, whole: bool, covered: bool) -> Result<()> {
        self.dirty_page_with(ino, block, whole, covered, None)
    }

    /// [`Fs::dirty_page`]; with `given`, a buffer already holding all of
    /// the block's new bytes, which becomes the page's. A page whose old
    /// buffer a write-back run holds gets it in that buffer's place: the
    /// run writes the old bytes, as sealed, and nothing writes into a
    /// buffer a run holds.
    fn dirty_page_with(
        &mut self,
        ino: InodeNo,
        block: u64,
        whole: bool,
        covered: bool,
        given: Option<Box<PageBuf>>,
    ) -> Result<()> {
        let strict = self.config.strict;
        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&block)) {
            let old = given.map(|b| std::mem::replace(&mut p.data, std::sync::Arc::new(b)));
            let was_dirty = matches!(p.state, PageState::Dirty { .. });
            if !was_dirty {
                // Queued or in flight: its block is allocated; rewrite in
                // place (order=strict: to a new block, reserved by the caller).
                p.state = PageState::Dirty { reserved: strict };
                self.pages.dirty_pages += 1;
                self.pages.count_reserved(ino, u64::from(strict), 0);
            }
            if let Some(old) = old {
                self.pages.recycle(old);
            }
            return Ok(());
        }
        let extent = self.extent_at(ino, block)?;
        let filled = given.is_none() && !whole && extent.is_some_and(|e| !e.unwritten);
        let mut data = match given {
            Some(b) => b,
            None => self.pages.new_buffer(covered || filled),
        };
        let reserved = match extent {
            Some(e) => {
                if filled {
                    let old = self.read_data_block(DataBlock(e.physical.0 + (block - e.logical)))?;
                    data.copy_from_slice(&old);
                }
                // order=strict writes an overwrite to a new block, and so
                // does any write to a block a snapshot holds, preallocated
                // ones too: a clone of the snapshot maps it as well.
                (!e.unwritten && strict) || self.held_in_snapshot(&e, block)
            }
            None => true,
        };
        self.pages.files.entry(ino).or_default().insert(block, Page::new(data, PageState::Dirty { reserved }));
        self.pages.dirty_pages += 1;
        self.pages.count_reserved(ino, u64::from(reserved), 0);
        Ok(())
    }

    /// Moves inline bytes into a page so that the file can grow past the inline limit.
    pub(super) fn uninline(&mut self, ino: InodeNo) -> Result<()> {
        let Body::Inline(bytes) = &self.log.inode(ino)?.body else {
            return Ok(());
        };
        let bytes = bytes.clone();
        self.log.space_mut().reserve(1)?;
        self.log.inode_mut(ino)?.body = Body::Empty;
        let mut data = self.pages.new_buffer(false);
        data[..bytes.len()].copy_from_slice(&bytes);
        self.pages.files.entry(ino).or_default().insert(0, Page::new(data, PageState::Dirty { reserved: true }));
        self.pages.dirty_pages += 1;
        self.pages.count_reserved(ino, 1, 0);
        // Inline bytes that may be durable (a commit group or an fsync
        // record carried the inode) must not hide in a delayed tail: the
        // next commit records the file inline again at the size of its
        // durable record, or, once something of it is mapped, writes block
        // 0; what was written after them may still wait.
        let logged = self.intents.logged_image(ino).map(|r| r.size);
        let on_disk = self.log.ifile().inode(ino).is_some_and(|e| e.address.0 != 0) || logged.is_some();
        if on_disk
            && !crate::faults::active(crate::faults::Fault::UninlineInTail)
            && let Some(durable) = self.pages.outgrown(ino, bytes.len() as u64, logged)
            && crate::faults::active(crate::faults::Fault::OutgrownInlineStale)
        {
            self.pages.stale_inline.insert(ino, bytes[..durable as usize].to_vec());
        }
        Ok(())
    }

    /// Frees data blocks once the partial segment recording the free is durable.
    ///
    /// # Errors
    /// A range the allocator cannot free (not in use, freed twice, outside
    /// the device), or more blocks than the inode counts: the volume is
    /// damaged (`dualfs fsck` names how).
    pub fn free_data(&mut self, ino: InodeNo, ranges: &[(DataBlock, u32)]) -> Result<()> {
        let total = self.free_ranges(ino, ranges)?;
        if total > 0 {
            self.take_blocks(ino, total)?;
        }
        Ok(())
    }

    /// Frees data blocks no longer mapped, recording the frees; returns how
    /// many (the caller counts them off the inode).
    ///
    /// # Errors
    /// As [`Fs::free_data`].
    pub(crate) fn free_ranges(&mut self, ino: InodeNo, ranges: &[(DataBlock, u32)]) -> Result<u64> {
        let mut total = 0u64;
        for &(start, len) in ranges {
            if let Some(why) = self.log.space_mut().check_free(start, len)? {
                return Err(Error::corrupt_meta("extent map", 0, format!("inode {ino}: {why}")));
            }
            self.log.record(Change::DataFree { start, len });
            self.log.space_mut().free_deferred(start, len)?;
            total += u64::from(len);
        }
        Ok(total)
    }

    /// Takes `n` freed blocks off the inode's count.
    ///
    /// # Errors
    /// The inode counts fewer: its record is damaged.
    pub(crate) fn take_blocks(&mut self, ino: InodeNo, n: u64) -> Result<()> {
        let mut rec = self.log.inode_mut(ino)?;
        let Some(left) = rec.blocks.checked_sub(n) else {
            let had = rec.blocks;
            return Err(Error::corrupt_meta(
                "inode",
                0,
                format!("inode {ino} counts {had} data blocks, {n} are freed"),
            ));
        };
        rec.blocks = left;
        Ok(())
    }

    /// One step of setting the size of `ino` to `size`: the first step
    /// changes the size, drops pages and zeroes the tail of the last block;
    /// each step frees at most [`TRUNCATE_STEP_EXTENTS`] extents. Returns
    /// whether nothing is left beyond the new end.
    ///
    /// # Errors
    /// `FileTooBig`; I/O errors.
    pub fn truncate_step(&mut self, ino: InodeNo, size: u64) -> Result<bool> {
        if size > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        let old = self.log.inode(ino)?.size;
        if let Body::Inline(_) = self.log.inode(ino)?.body {
            if size <= u64::from(self.config.inline_max) {
                let mut rec = self.log.inode_mut(ino)?;
                if let Body::Inline(b) = &mut rec.body {
                    b.resize(size as usize, 0);
                }
                rec.size = size;
                drop(rec);
                self.intents.resized(ino);
                return Ok(true);
            }
            self.uninline(ino)?;
        }
        if size < old {
            let keep = size.div_ceil(BLOCK_BYTES);
            let released = self.pages.discard(ino, keep, u64::MAX);
            self.log.space_mut().unreserve(released);
            if !size.is_multiple_of(BLOCK_BYTES) {
                self.zero_block_range(ino, size / BLOCK_BYTES, (size % BLOCK_BYTES) as usize, BLOCK_SIZE)?;
            }
        }
        if size != old {
            self.log.inode_mut(ino)?.size = size;
            self.intents.resized(ino);
        }
        let keep = size.div_ceil(BLOCK_BYTES);
        let (freed, done) = self.unmap_range(ino, keep, u64::MAX, TRUNCATE_STEP_EXTENTS)?;
        self.free_or_hold(ino, &freed)?;
        if keep == 0 && done {
            let mut rec = self.log.inode_mut(ino)?;
            if matches!(rec.body, Body::Extents(_)) || matches!(rec.body, Body::Tree(_)) {
                rec.body = Body::Empty;
            }
        }
        Ok(done)
    }

    /// Zeroes `[from, to)` of block `block` (a truncation's or a punched
    /// hole's partial block), through a dirty page when the block holds data.
    fn zero_block_range(&mut self, ino: InodeNo, block: u64, from: usize, to: usize) -> Result<()> {
        let page = self.pages.page(ino, block).map(|p| p.state);
        let extent = self.extent_at(ino, block)?;
        let written = extent.is_some_and(|e| !e.unwritten);
        if page.is_none() && !written {
            return Ok(());
        }
        let held = page.is_none() && extent.is_some_and(|e| self.held_in_snapshot(&e, block));
        if (self.config.strict || held) && !matches!(page, Some(PageState::Dirty { .. })) {
            // The zeroed block goes to a new block, like any overwrite.
            self.log.space_mut().reserve(1)?;
        }
        self.dirty_page(ino, block, false, false)?;
        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&block)) {
            p.bytes_mut()[from..to].fill(0);
        }
        Ok(())
    }

    /// Deallocates `[offset, offset + len)`: partial blocks are zeroed,
    /// whole blocks unmapped. Returns whether all extents were freed (else
    /// call again).
    ///
    /// # Errors
    /// I/O errors.
    pub fn punch_hole_step(&mut self, ino: InodeNo, offset: u64, len: u64) -> Result<bool> {
        self.regular(ino)?;
        let size = self.log.inode(ino)?.size;
        let end = offset.saturating_add(len).min(size.max(offset));
        if end <= offset {
            return Ok(true);
        }
        if let Body::Inline(_) = self.log.inode(ino)?.body {
            let mut rec = self.log.inode_mut(ino)?;
            if let Body::Inline(b) = &mut rec.body {
                let e = (end as usize).min(b.len());
                if (offset as usize) < e {
                    b[offset as usize..e].fill(0);
                }
            }
            return Ok(true);
        }
        let first_whole = offset.div_ceil(BLOCK_BYTES);
        let end_whole = end / BLOCK_BYTES;
        let head_block = offset / BLOCK_BYTES;
        if !offset.is_multiple_of(BLOCK_BYTES) {
            let to =
                if head_block == (end - 1) / BLOCK_BYTES { ((end - 1) % BLOCK_BYTES + 1) as usize } else { BLOCK_SIZE };
            self.zero_block_range(ino, head_block, (offset % BLOCK_BYTES) as usize, to)?;
        }
        if end % BLOCK_BYTES != 0 && end / BLOCK_BYTES >= first_whole {
            self.zero_block_range(ino, end / BLOCK_BYTES, 0, (end % BLOCK_BYTES) as usize)?;
        }
        if first_whole >= end_whole {
            return Ok(true);
        }
        let released = self.pages.discard(ino, first_whole, end_whole);
        self.log.space_mut().unreserve(released);
        let (freed, done) = self.unmap_range(ino, first_whole, end_whole, TRUNCATE_STEP_EXTENTS)?;
        self.free_data(ino, &freed)?;
        Ok(done)
    }

    /// Allocates unwritten extents for the holes of `[offset, offset + len)`
    /// (fallocate without punch). Returns whether the whole range is done.
    ///
    /// # Errors
    /// `NoSpace(Data)`; I/O errors.
    pub fn preallocate_step(&mut self, ino: InodeNo, offset: u64, len: u64, budget: usize) -> Result<bool> {
        self.regular(ino)?;
        let end = offset.checked_add(len).ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        self.uninline(ino)?;
        let mut b = offset / BLOCK_BYTES;
        let last = end.div_ceil(BLOCK_BYTES);
        let mut steps = 0;
        while b < last {
            if steps >= budget || self.log.needs_seal() {
                return Ok(false);
            }
            if let Some(e) = self.extent_at(ino, b)? {
                b = e.logical_end();
                continue;
            }
            let stop = match self.next_extent(ino, b)? {
                Some(n) if n.logical < last => n.logical,
                _ => last,
            };
            // Pages over the hole already hold reservations for their blocks.
            let covered = self.pages.files.get(&ino).map_or(0, |f| f.range(b..stop).count()) as u64;
            if covered > 0 {
                // Leave page-backed blocks to write-back; allocate the rest one run at a time.
                let first_page = self.pages.files.get(&ino).and_then(|f| f.range(b..stop).next().map(|(k, _)| *k));
                if first_page == Some(b) {
                    let mut n = b;
                    while n < stop && self.pages.page(ino, n).is_some() {
                        n += 1;
                    }
                    b = n;
                    continue;
                }
            }
            let run_end =
                self.pages.files.get(&ino).and_then(|f| f.range(b..stop).next().map(|(k, _)| *k)).unwrap_or(stop);
            self.quota_allows_blocks(ino, run_end - b, self.quota_now)?;
            self.log.space_mut().reserve(run_end - b)?;
            let goal = self.allocation_goal(ino, b)?;
            let (at, n) = self.log.space_mut().allocate(goal, run_end - b)?.ok_or(Error::NoSpace(DeviceRole::Data))?;
            self.log.record(Change::DataAlloc { start: at, len: n });
            self.log.space_mut().unreserve((run_end - b) - u64::from(n));
            self.add_extent(ino, Extent { logical: b, physical: at, len: n, unwritten: true })?;
            self.log.inode_mut(ino)?.blocks += u64::from(n);
            b += u64::from(n);
            steps += 1;
        }
        Ok(true)
    }

    /// The next data or hole at or after `offset`.
    ///
    /// # Errors
    /// `NoSuchOffset` (`ENXIO`) past the end; I/O errors.
    pub fn seek(&mut self, ino: InodeNo, offset: u64, whence: Whence) -> Result<u64> {
        self.regular(ino)?;
        let rec = self.log.inode(ino)?;
        let size = rec.size;
        if offset >= size {
            return Err(Error::NoSuchOffset);
        }
        if let Body::Inline(_) = rec.body {
            return Ok(match whence {
                Whence::Data => offset,
                Whence::Hole => size,
            });
        }
        let mut b = offset / BLOCK_BYTES;
        let last = size.div_ceil(BLOCK_BYTES);
        while b < last {
            let has_page = self.pages.page(ino, b).is_some();
            let extent = self.extent_at(ino, b)?;
            let is_data = has_page || extent.is_some_and(|e| !e.unwritten);
            match (whence, is_data) {
                (Whence::Data, true) | (Whence::Hole, false) => {
                    return Ok((b * BLOCK_BYTES).max(offset).min(size));
                }
                _ => {}
            }
            // Skip ahead: past this extent, or to the next extent or page.
            b = match extent {
                Some(e) if !has_page => e.logical_end().min(self.next_page(ino, b + 1).unwrap_or(u64::MAX)),
                None if !has_page => {
                    let next_e = self.next_extent(ino, b)?.map_or(u64::MAX, |e| e.logical);
                    next_e.min(self.next_page(ino, b + 1).unwrap_or(u64::MAX)).max(b + 1)
                }
                _ => b + 1,
            };
        }
        match whence {
            Whence::Data => Err(Error::NoSuchOffset),
            Whence::Hole => Ok(size),
        }
    }

    fn next_page(&self, ino: InodeNo, from: u64) -> Option<u64> {
        self.pages.files.get(&ino)?.range(from..).next().map(|(b, _)| *b)
    }

    /// Drops every page of a file being deleted.
    pub fn discard_pages(&mut self, ino: InodeNo) {
        let released = self.pages.discard(ino, 0, u64::MAX);
        self.log.space_mut().unreserve(released);
    }
}
