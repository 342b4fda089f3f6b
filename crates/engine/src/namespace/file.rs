//! File data: inline bytes, the page cache of dirty blocks, delayed
//! allocation at write-back, reads, truncation, holes.
//!
//! A `write` only fills pages and reserves data blocks for the holes it
//! covers. Blocks are allocated at write-back (LinLogFS's deferred
//! addresses), when the whole dirty run of a file is known, so a file
//! written sequentially gets one extent, placed after the file's previous
//! extent or in its directory's group.

use std::collections::{BTreeMap, HashMap};

use super::Fs;
use crate::error::{DeviceRole, Error, Result};
use crate::format::descriptor::Change;
use crate::format::inode::{Body, Extent};
use crate::meta_log::read_blocks;
use crate::types::{BLOCK_BYTES, BLOCK_SIZE, DataBlock, FileKind, InodeNo, Timestamp};

/// Largest file: 16 TiB, as ext4.
pub const MAX_FILE_SIZE: u64 = 1 << 44;

/// Extents freed per truncation step, bounding the change records one
/// operation adds to a partial segment.
pub const TRUNCATE_STEP_EXTENTS: usize = 256;

/// Where a page stands between `write` and the disk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PageState {
    /// Changed since last queued; `reserved` when it holds a reservation for
    /// a block not yet allocated.
    Dirty {
        /// Holds a data-block reservation.
        reserved: bool,
    },
    /// Allocated at `at`, waiting for the next partial segment.
    Queued {
        /// Its data block.
        at: DataBlock,
    },
    /// Being written to `at` by commit `commit`; dropped once that is durable.
    InFlight {
        /// Its data block.
        at: DataBlock,
        /// The commit writing it.
        commit: u64,
    },
}

/// A cached block of file data.
#[derive(Debug)]
pub struct Page {
    data: Box<[u8; BLOCK_SIZE]>,
    state: PageState,
}

/// Dirty and in-flight file data, by inode and file block.
#[derive(Debug, Default)]
pub struct PageCache {
    files: HashMap<InodeNo, BTreeMap<u64, Page>>,
    dirty_pages: usize,
    /// Per file, the pages holding a reservation (`Dirty { reserved: true }`):
    /// blocks the file will have once written back, which `stat` counts.
    reserved: HashMap<InodeNo, u64>,
    /// Per file with dirty pages: when a write first dirtied it, and its
    /// size then (a file missing here counts as old: its pages go with the
    /// next commit).
    dirtied: HashMap<InodeNo, (Timestamp, u64)>,
}

/// What a commit may leave behind of a file's dirty data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WriteBack {
    /// Every dirty page, and every file held for replacement (sync, fsync,
    /// unmount, memory pressure).
    All,
    /// Every dirty page but those of files held for replacement (see
    /// [`super::replace`]): a commit made to free room in the log or the
    /// cache, which nobody asked to be durable.
    AllButHeld,
    /// A periodic commit: the delayed tail of files first dirtied after
    /// this time may wait (see [`Fs::delayed_tail`]).
    Expired(Timestamp),
}

impl PageCache {
    /// Bytes of data not yet queued for writing.
    #[must_use]
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_pages * BLOCK_SIZE
    }

    /// Files with pages not yet queued.
    #[must_use]
    pub fn dirty_files(&self) -> Vec<InodeNo> {
        let mut v: Vec<InodeNo> = self
            .files
            .iter()
            .filter(|(_, p)| p.values().any(|p| matches!(p.state, PageState::Dirty { .. })))
            .map(|(i, _)| *i)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether `ino` has pages not yet queued.
    #[must_use]
    pub fn has_dirty(&self, ino: InodeNo) -> bool {
        self.files.get(&ino).is_some_and(|p| p.values().any(|p| matches!(p.state, PageState::Dirty { .. })))
    }

    /// Whether `ino` has any cached page (dirty, queued or in flight).
    #[must_use]
    pub fn has_pages(&self, ino: InodeNo) -> bool {
        self.files.contains_key(&ino)
    }

    /// Pages cached for `ino`.
    #[must_use]
    pub fn file_pages(&self, ino: InodeNo) -> usize {
        self.files.get(&ino).map_or(0, BTreeMap::len)
    }

    fn page(&self, ino: InodeNo, block: u64) -> Option<&Page> {
        self.files.get(&ino)?.get(&block)
    }

    /// Notes that a write is about to dirty `ino`, `size` bytes long, at
    /// `now` (a file already dirty keeps its older note).
    pub fn note_dirtied(&mut self, ino: InodeNo, now: Timestamp, size: u64) {
        self.dirtied.entry(ino).or_insert((now, size));
    }

    /// Makes `ino`'s dirty pages go with the next commit, whatever their
    /// age: a truncation, an allocation or an inline file's bytes moving to
    /// a page changed what the delayed tail may hide.
    pub fn expire(&mut self, ino: InodeNo) {
        self.dirtied.insert(ino, (Timestamp::new(i64::MIN, 0), 0));
    }

    /// Forgets the notes of files with no dirty page left.
    pub fn forget_clean(&mut self) {
        let files = &self.files;
        self.dirtied.retain(|ino, _| {
            files.get(ino).is_some_and(|p| p.values().any(|p| matches!(p.state, PageState::Dirty { .. })))
        });
    }

    /// Blocks `ino` holds reservations for: written, not yet allocated.
    /// Kept as a count, so that `getattr` need not walk the pages.
    #[must_use]
    pub fn reserved_blocks(&self, ino: InodeNo) -> u64 {
        let n = self.reserved.get(&ino).copied().unwrap_or(0);
        debug_assert_eq!(
            n,
            self.files
                .get(&ino)
                .map_or(0, |f| f.values().filter(|p| p.state == PageState::Dirty { reserved: true }).count() as u64),
            "reserved-page count of inode {ino}"
        );
        n
    }

    fn count_reserved(&mut self, ino: InodeNo, added: u64, removed: u64) {
        let n = self.reserved.entry(ino).or_default();
        debug_assert!(*n + added >= removed, "reserved-page count of inode {ino} below zero");
        *n = (*n + added).saturating_sub(removed);
        if *n == 0 {
            self.reserved.remove(&ino);
        }
    }

    /// Hands every queued page to commit `commit`, copying its bytes.
    pub fn take_queued(&mut self, commit: u64) -> Vec<(DataBlock, Vec<u8>)> {
        let mut out = Vec::new();
        for pages in self.files.values_mut() {
            for p in pages.values_mut() {
                if let PageState::Queued { at } = p.state {
                    out.push((at, p.data.to_vec()));
                    p.state = PageState::InFlight { at, commit };
                }
            }
        }
        out
    }

    /// Commit `commit` is durable: its pages may go (the kernel caches data).
    pub fn drop_in_flight(&mut self, commit: u64) {
        self.files.retain(|_, pages| {
            pages.retain(|_, p| !matches!(p.state, PageState::InFlight { commit: c, .. } if c == commit));
            !pages.is_empty()
        });
    }

    /// Removes pages of `ino` at blocks `>= from` (and `< to`); returns how
    /// many held reservations.
    fn discard(&mut self, ino: InodeNo, from: u64, to: u64) -> u64 {
        let Some(pages) = self.files.get_mut(&ino) else {
            return 0;
        };
        let doomed: Vec<u64> = pages.range(from..to).map(|(b, _)| *b).collect();
        let mut reserved = 0;
        for b in doomed {
            if let Some(p) = pages.remove(&b)
                && let PageState::Dirty { reserved: r } = p.state
            {
                self.dirty_pages -= 1;
                reserved += u64::from(r);
            }
        }
        if pages.is_empty() {
            self.files.remove(&ino);
        }
        self.count_reserved(ino, 0, reserved);
        reserved
    }
}

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
        read_blocks(self.log.data_device().as_ref(), DeviceRole::Data, at.0, 1)
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
            rec.size = size as u64;
            return Ok(());
        }
        self.uninline(ino)?;

        // Reserve every block this write brings into existence before touching any.
        let first = offset / BLOCK_BYTES;
        let last = (end - 1) / BLOCK_BYTES;
        let mut needed = 0;
        let mut extent: Option<Extent> = None;
        for b in first..=last {
            if self.pages.page(ino, b).is_some() {
                continue;
            }
            if extent.is_none_or(|e| b < e.logical || b >= e.logical_end()) {
                extent = self.extent_at(ino, b)?;
            }
            if extent.is_none() {
                needed += 1;
            }
        }
        self.log.space.reserve(needed)?;

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
            self.dirty_page(ino, block, whole)?;
            let pages = self.pages.files.entry(ino).or_default();
            let p = pages.get_mut(&block).ok_or(Error::Invalid("page vanished"))?;
            p.data[skip..skip + n].copy_from_slice(&src[..n]);
            pos += n as u64;
            src = &src[n..];
        }
        let mut rec = self.log.inode_mut(ino)?;
        rec.size = rec.size.max(end);
        Ok(())
    }

    /// Makes sure block `block` of `ino` has a dirty page, filled from disk
    /// unless it is about to be overwritten whole. A new page over a hole
    /// takes one of the caller's reservations.
    fn dirty_page(&mut self, ino: InodeNo, block: u64, whole: bool) -> Result<()> {
        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&block)) {
            if !matches!(p.state, PageState::Dirty { .. }) {
                // Queued or in flight: its block is allocated; rewrite in place.
                p.state = PageState::Dirty { reserved: false };
                self.pages.dirty_pages += 1;
            }
            return Ok(());
        }
        let mut data: Box<[u8; BLOCK_SIZE]> = Box::new([0; BLOCK_SIZE]);
        let reserved = match self.extent_at(ino, block)? {
            Some(e) => {
                if !whole && !e.unwritten {
                    let old = self.read_data_block(DataBlock(e.physical.0 + (block - e.logical)))?;
                    data.copy_from_slice(&old);
                }
                false
            }
            None => true,
        };
        self.pages.files.entry(ino).or_default().insert(block, Page { data, state: PageState::Dirty { reserved } });
        self.pages.dirty_pages += 1;
        self.pages.count_reserved(ino, u64::from(reserved), 0);
        Ok(())
    }

    /// Moves inline bytes into a page so that the file can grow past the inline limit.
    fn uninline(&mut self, ino: InodeNo) -> Result<()> {
        let Body::Inline(bytes) = &self.log.inode(ino)?.body else {
            return Ok(());
        };
        let bytes = bytes.clone();
        self.log.space.reserve(1)?;
        self.log.inode_mut(ino)?.body = Body::Empty;
        let mut data: Box<[u8; BLOCK_SIZE]> = Box::new([0; BLOCK_SIZE]);
        data[..bytes.len()].copy_from_slice(&bytes);
        self.pages.files.entry(ino).or_default().insert(0, Page { data, state: PageState::Dirty { reserved: true } });
        self.pages.dirty_pages += 1;
        self.pages.count_reserved(ino, 1, 0);
        // The inline bytes were durable: they must not hide in a delayed tail.
        self.pages.expire(ino);
        Ok(())
    }

    /// Allocates blocks for, and queues, up to `budget` runs of dirty pages
    /// of `ino`. Returns whether every dirty page of the file is queued.
    ///
    /// # Errors
    /// `NoSpace(Data)` if a reservation was not honoured (a bug); I/O errors.
    pub fn write_back(&mut self, ino: InodeNo, budget: usize) -> Result<bool> {
        self.write_back_below(ino, budget, u64::MAX)
    }

    /// What a commit of kind `mode` may leave of `ino`: the first block of
    /// its delayed tail, and the size the inode's record must show on disk
    /// while the tail waits (ext4's i_disksize): at least the file's size
    /// when first dirtied, never past the tail's first block, so that a
    /// crash shows the file cut short, never a hole where data was written.
    ///
    /// # Errors
    /// `NotFound`; I/O errors reading the extent tree.
    pub fn delayed_cap(&mut self, ino: InodeNo, mode: WriteBack) -> Result<Option<(u64, u64)>> {
        let floor = match (mode, self.pages.dirtied.get(&ino)) {
            (WriteBack::Expired(before), Some(&(at, floor))) if at > before => floor,
            _ => return Ok(None),
        };
        let Some(first) = self.delayed_tail(ino)? else {
            return Ok(None);
        };
        let size = self.log.inode(ino)?.size;
        Ok(Some((first, size.min(floor.max(first * BLOCK_BYTES)))))
    }

    /// The first block of `ino`'s delayed tail: the dirty pages at the end
    /// of the file that hold reservations (no block yet), with nothing
    /// mapped or queued after them. Leaving them out of a commit needs no
    /// change but a shorter size on disk.
    fn delayed_tail(&mut self, ino: InodeNo) -> Result<Option<u64>> {
        let Some(pages) = self.pages.files.get(&ino) else {
            return Ok(None);
        };
        let mut tail: Vec<u64> = pages
            .iter()
            .rev()
            .take_while(|(_, p)| p.state == PageState::Dirty { reserved: true })
            .map(|(b, _)| *b)
            .collect();
        tail.reverse();
        let mut first = match tail.first() {
            Some(&b) => b,
            None => return Ok(None),
        };
        // Data mapped beyond the tail's start must stay reachable.
        while let Some(e) = self.next_extent(ino, first)? {
            let after = e.logical_end();
            match tail.iter().find(|&&b| b >= after) {
                Some(&b) => first = b,
                None => return Ok(None),
            }
        }
        Ok(Some(first))
    }

    /// [`Fs::write_back`] of the pages below block `limit` only.
    ///
    /// # Errors
    /// As [`Fs::write_back`].
    pub fn write_back_below(&mut self, ino: InodeNo, budget: usize, limit: u64) -> Result<bool> {
        let mut steps = 0;
        loop {
            let Some(pages) = self.pages.files.get(&ino) else {
                return Ok(true);
            };
            let Some(start) =
                pages.range(..limit).find(|(_, p)| matches!(p.state, PageState::Dirty { .. })).map(|(b, _)| *b)
            else {
                return Ok(true);
            };
            if steps >= budget || self.log.needs_seal() {
                return Ok(false);
            }
            steps += 1;
            let mut end = start;
            while end - start < u64::from(crate::data_space::MAX_EXTENT_BLOCKS)
                && end < limit
                && pages.get(&end).is_some_and(|p| matches!(p.state, PageState::Dirty { .. }))
            {
                end += 1;
            }
            self.write_back_run(ino, start, end)?;
        }
    }

    /// Queues the dirty pages of `[start, end)`, allocating where unmapped.
    /// Handles the first mapping change of the run; the caller loops.
    fn write_back_run(&mut self, ino: InodeNo, start: u64, end: u64) -> Result<()> {
        match self.extent_at(ino, start)? {
            Some(e) => {
                let stop = end.min(e.logical_end());
                if e.unwritten {
                    self.mark_written(ino, start, stop)?;
                }
                // Pages over mapped blocks never hold reservations; keep the
                // count right even if one slipped through.
                let stray = (start..stop)
                    .filter(|b| {
                        matches!(self.pages.page(ino, *b).map(|p| p.state), Some(PageState::Dirty { reserved: true }))
                    })
                    .count() as u64;
                debug_assert_eq!(stray, 0, "reserved page over a mapped block");
                self.log.space.unreserve(stray);
                for b in start..stop {
                    self.queue_page(ino, b, DataBlock(e.physical.0 + (b - e.logical)));
                }
            }
            None => {
                let stop = match self.next_extent(ino, start)? {
                    Some(n) if n.logical < end => n.logical,
                    _ => end,
                };
                // Pages that never held a reservation (their block was
                // unmapped under them) take one now.
                let unreserved: Vec<u64> = (start..stop)
                    .filter(|b| {
                        matches!(self.pages.page(ino, *b).map(|p| p.state), Some(PageState::Dirty { reserved: false }))
                    })
                    .collect();
                if !unreserved.is_empty() {
                    self.log.space.reserve(unreserved.len() as u64)?;
                    self.pages.count_reserved(ino, unreserved.len() as u64, 0);
                    for b in unreserved {
                        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&b)) {
                            p.state = PageState::Dirty { reserved: true };
                        }
                    }
                }
                let goal = self.allocation_goal(ino, start)?;
                let (at, len) = self.log.space.allocate(goal, stop - start).ok_or(Error::NoSpace(DeviceRole::Data))?;
                self.log.record(Change::DataAlloc { start: at, len });
                self.add_extent(ino, Extent { logical: start, physical: at, len, unwritten: false })?;
                self.log.inode_mut(ino)?.blocks += u64::from(len);
                for (i, b) in (start..start + u64::from(len)).enumerate() {
                    self.queue_page(ino, b, DataBlock(at.0 + i as u64));
                }
            }
        }
        Ok(())
    }

    fn queue_page(&mut self, ino: InodeNo, block: u64, at: DataBlock) {
        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&block))
            && let PageState::Dirty { reserved } = p.state
        {
            p.state = PageState::Queued { at };
            self.pages.dirty_pages -= 1;
            // Its reservation became the block the caller allocated.
            self.pages.count_reserved(ino, 0, u64::from(reserved));
        }
    }

    /// Where a new extent at `block` should go: right after the file's
    /// previous block if it has one, else in its group, after the group's
    /// last allocation.
    fn allocation_goal(&mut self, ino: InodeNo, block: u64) -> Result<DataBlock> {
        if block > 0
            && let Some(prev) = self.extent_at(ino, block - 1)?
        {
            return Ok(DataBlock(prev.physical.0 + (block - prev.logical)));
        }
        let group = self.log.inode(ino)?.group;
        Ok(self.log.space.group_goal(group))
    }

    /// Frees data blocks once the partial segment recording the free is durable.
    pub fn free_data(&mut self, ino: InodeNo, ranges: &[(DataBlock, u32)]) -> Result<()> {
        let seq = self.log.head().seq;
        let mut total = 0u64;
        for &(start, len) in ranges {
            self.log.record(Change::DataFree { start, len });
            self.log.space.free_deferred(start, len, seq);
            total += u64::from(len);
        }
        if total > 0 {
            let mut rec = self.log.inode_mut(ino)?;
            rec.blocks = rec.blocks.saturating_sub(total);
        }
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
                return Ok(true);
            }
            self.uninline(ino)?;
        }
        if size < old {
            let keep = size.div_ceil(BLOCK_BYTES);
            let released = self.pages.discard(ino, keep, u64::MAX);
            self.log.space.unreserve(released);
            if !size.is_multiple_of(BLOCK_BYTES) {
                self.zero_block_range(ino, size / BLOCK_BYTES, (size % BLOCK_BYTES) as usize, BLOCK_SIZE)?;
            }
        }
        if size != old {
            self.log.inode_mut(ino)?.size = size;
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
        let holds_data =
            self.pages.page(ino, block).is_some() || self.extent_at(ino, block)?.is_some_and(|e| !e.unwritten);
        if !holds_data {
            return Ok(());
        }
        self.dirty_page(ino, block, false)?;
        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&block)) {
            p.data[from..to].fill(0);
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
        self.log.space.unreserve(released);
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
            self.log.space.reserve(run_end - b)?;
            let goal = self.allocation_goal(ino, b)?;
            let (at, n) = self.log.space.allocate(goal, run_end - b).ok_or(Error::NoSpace(DeviceRole::Data))?;
            self.log.record(Change::DataAlloc { start: at, len: n });
            self.log.space.unreserve((run_end - b) - u64::from(n));
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
        self.log.space.unreserve(released);
    }
}
