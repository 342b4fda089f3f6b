//! Write-back: turning a file's dirty pages into allocated, queued blocks
//! at commit time (LinLogFS's deferred addresses), and what a periodic
//! commit may leave for later (the delayed tail, capped on disk at the
//! size the written data reaches).

use super::Fs;
use super::pages::{PageState, WriteBack};
use crate::error::{DeviceRole, Error, Result};
use crate::format::descriptor::Change;
use crate::format::inode::{Body, Extent, InodeRecord};
use crate::types::{BLOCK_BYTES, DataBlock, InodeNo};

impl Fs {
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
            (WriteBack::Expired(before) | WriteBack::Room(before), Some(d)) if d.at > before => d.floor,
            _ => return Ok(None),
        };
        let Some(first) = self.delayed_tail(ino)? else {
            return Ok(None);
        };
        let size = self.log.inode(ino)?.size;
        Ok(Some((first, size.min(floor.max(first * BLOCK_BYTES)))))
    }

    /// Whether a commit of kind `mode` writes block 0 of `ino` only because
    /// the file outgrew its inode since a record of it may have been made
    /// durable (its `keep_below`): without that rule the block would wait
    /// with the rest of a young tail. Counted for `dualfs stats`.
    #[must_use]
    pub fn outgrown_block_due(&self, ino: InodeNo, mode: WriteBack) -> bool {
        let young = match (mode, self.pages.dirtied.get(&ino)) {
            (WriteBack::Expired(before) | WriteBack::Room(before), Some(d)) => d.at > before && d.keep_below > 0,
            _ => false,
        };
        young && self.pages.page(ino, 0).is_some_and(|p| p.state == PageState::Dirty { reserved: true })
    }

    /// The record a commit of kind `mode` may write for `ino` in place of
    /// any of its data, when the file outgrew its inode after a record of
    /// it may have been made durable, and nothing of it is mapped yet:
    /// inline again, at that durable record's size, with the bytes page 0
    /// holds now below that size. That is what a capped record shows of a
    /// file on the data device (its state now, cut at a durable length;
    /// I16), so the whole file may wait as a delayed tail: writing block 0
    /// to keep the durable inline bytes reachable was most of PostMark's
    /// data write requests. A write below that size since changed page 0,
    /// and the record carries it: those bytes are not tail, and are
    /// durable after the commit as they would be in block 0. None when
    /// the file's data must go (old, expired, something mapped): block 0
    /// goes then ([`Fs::delayed_tail`] keeps it out of the tail).
    ///
    /// # Errors
    /// `NotFound`.
    pub fn outgrown_record(&mut self, ino: InodeNo, mode: WriteBack) -> Result<Option<InodeRecord>> {
        let size = match (mode, self.pages.dirtied.get(&ino)) {
            (WriteBack::Expired(before) | WriteBack::Room(before), Some(d)) if d.at > before => match d.outgrown {
                Some(size) if size >= d.floor => size,
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let rec = self.log.inode(ino)?;
        if !matches!(rec.body, Body::Empty)
            || rec.blocks != 0
            || rec.size < size
            || size > u64::from(self.config.inline_max)
        {
            return Ok(None);
        }
        let Some(page) = self.pages.page(ino, 0).filter(|p| p.state == PageState::Dirty { reserved: true }) else {
            return Ok(None);
        };
        let mut bytes = page.data[..size as usize].to_vec();
        if crate::faults::active(crate::faults::Fault::OutgrownInlineStale)
            && let Some(old) = self.pages.stale_inline.get(&ino)
        {
            // The broken rule: the bytes as they were, not as they are.
            bytes.clone_from(old);
        }
        let body = if bytes.is_empty() { Body::Empty } else { Body::Inline(bytes) };
        Ok(Some(InodeRecord { size, body, ..rec.clone() }))
    }

    /// Where one step of a commit relieving memory stops writing `ino`
    /// when `budget` blocks of delayed tails may still be written: the
    /// block from which its tail waits (None: the whole file goes, for it
    /// has no tail, or the tail fits, or it was expired — a truncation or
    /// a rename over another file made its size matter), and the tail
    /// blocks this step writes.
    ///
    /// # Errors
    /// As [`Fs::delayed_cap`].
    pub fn chunk_limit(&mut self, ino: InodeNo, budget: u64) -> Result<(Option<u64>, u64)> {
        if !self.tail_may_wait(ino) {
            return Ok((None, 0));
        }
        let Some(first) = self.delayed_tail(ino)? else {
            return Ok((None, 0));
        };
        let Some(pages) = self.pages.files.get(&ino) else {
            return Ok((None, 0));
        };
        let n = usize::try_from(budget).unwrap_or(usize::MAX);
        match pages.range(first..).nth(n) {
            Some((&limit, _)) => Ok((Some(limit), budget)),
            None => Ok((None, pages.range(first..).count() as u64)),
        }
    }

    /// The size `ino`'s record must show on disk after a step of a commit
    /// relieving memory, taken once its write-back is done: the size its
    /// written data reaches, found again from the pages still waiting, so
    /// that a step cut short (the group full) caps at what it did write.
    /// None when nothing waits, or the file's size matters (expired).
    ///
    /// # Errors
    /// As [`Fs::delayed_cap`].
    /// `reached`: the step wrote every page of `ino` below this block,
    /// which its [`Fs::chunk_limit`] was: the tail starts there (what
    /// follows it is unchanged), and need not be searched for again.
    pub fn written_cap(&mut self, ino: InodeNo, reached: Option<u64>) -> Result<Option<u64>> {
        let Some(floor) = self.pages.dirtied.get(&ino).map(|d| d.floor) else {
            return Ok(None);
        };
        if !self.tail_may_wait(ino) {
            return Ok(None);
        }
        let first = match reached {
            Some(b) => Some(b),
            None => self.delayed_tail(ino)?,
        };
        let Some(first) = first else {
            return Ok(None);
        };
        let size = self.log.inode(ino)?.size;
        Ok(Some(size.min(floor.max(first * BLOCK_BYTES))))
    }

    /// Whether `ino`'s delayed tail may wait at all: it was noted dirtied
    /// by a write, and not expired since.
    fn tail_may_wait(&self, ino: InodeNo) -> bool {
        self.pages.dirtied.get(&ino).is_some_and(|d| d.at.sec != i64::MIN)
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
        let keep_below = self.pages.dirtied.get(&ino).map_or(0, |d| d.keep_below);
        let mut first = match tail.iter().find(|&&b| b >= keep_below) {
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
        // Nothing below the last run's start is dirty any more: the search
        // starts there, not at the file's first page (a stream's queued and
        // in-flight pages were scanned again for every run).
        let mut from = 0;
        loop {
            let Some(pages) = self.pages.files.get(&ino) else {
                return Ok(true);
            };
            let Some(start) =
                pages.range(from..limit).find(|(_, p)| matches!(p.state, PageState::Dirty { .. })).map(|(b, _)| *b)
            else {
                return Ok(true);
            };
            if steps >= budget || self.log.needs_seal() {
                return Ok(false);
            }
            steps += 1;
            // The run of consecutive dirty pages from `start`, walked in
            // order (a lookup per block was 2.8% of a stream's samples).
            let max_end = limit.min(start.saturating_add(u64::from(crate::data_space::MAX_EXTENT_BLOCKS)));
            let mut end = start;
            for (&b, p) in pages.range(start..max_end) {
                if b != end || !matches!(p.state, PageState::Dirty { .. }) {
                    break;
                }
                end += 1;
            }
            self.write_back_run(ino, start, end)?;
            from = start;
        }
    }

    /// Queues the dirty pages of `[start, end)`, allocating where unmapped.
    /// Handles the first mapping change of the run; the caller loops.
    fn write_back_run(&mut self, ino: InodeNo, start: u64, end: u64) -> Result<()> {
        match self.extent_at(ino, start)? {
            Some(e)
                if self.config.strict
                    && !e.unwritten
                    && !crate::faults::active(crate::faults::Fault::StrictInPlace) =>
            {
                self.relocate_run(ino, start, end.min(e.logical_end()))?;
            }
            // A block a snapshot holds is never written in place, not even
            // a preallocated one (a clone of the snapshot maps it too, and
            // would write it in place as well): the run it starts goes to
            // new blocks (DESIGN.md, snapshots).
            Some(e) if self.held_in_snapshot(&e, start) => {
                let mut stop = start + 1;
                while stop < end.min(e.logical_end()) && self.held_in_snapshot(&e, stop) {
                    stop += 1;
                }
                self.relocate_run(ino, start, stop)?;
            }
            Some(e) => {
                let mut stop = end.min(e.logical_end());
                if let Some(h) = (start..stop).find(|&b| self.held_in_snapshot(&e, b)) {
                    stop = h;
                }
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
                self.log.space_mut().unreserve(stray);
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
                    self.log.space_mut().reserve(unreserved.len() as u64)?;
                    self.pages.count_reserved(ino, unreserved.len() as u64, 0);
                    for b in unreserved {
                        if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&b)) {
                            p.state = PageState::Dirty { reserved: true };
                        }
                    }
                }
                let goal = self.allocation_goal(ino, start)?;
                let (at, len) =
                    self.log.space_mut().allocate(goal, stop - start)?.ok_or(Error::NoSpace(DeviceRole::Data))?;
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

    /// `order=strict`: dirty pages over written blocks `[start, stop)` go to
    /// new blocks, and the old ones are freed with the commit that maps the
    /// new: until it is durable, the disk shows the old data under the old
    /// meta-data, never the new data under it (no overwrite in place).
    fn relocate_run(&mut self, ino: InodeNo, start: u64, stop: u64) -> Result<()> {
        let unreserved = (start..stop)
            .filter(|b| matches!(self.pages.page(ino, *b).map(|p| p.state), Some(PageState::Dirty { reserved: false })))
            .collect::<Vec<u64>>();
        if !unreserved.is_empty() {
            self.log.space_mut().reserve(unreserved.len() as u64)?;
            self.pages.count_reserved(ino, unreserved.len() as u64, 0);
            for b in unreserved {
                if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&b)) {
                    p.state = PageState::Dirty { reserved: true };
                }
            }
        }
        let goal = self.allocation_goal(ino, start)?;
        let (at, len) = self.log.space_mut().allocate(goal, stop - start)?.ok_or(Error::NoSpace(DeviceRole::Data))?;
        let (old, _) = self.unmap_range(ino, start, start + u64::from(len), usize::MAX)?;
        self.free_data(ino, &old)?;
        self.log.record(Change::DataAlloc { start: at, len });
        self.add_extent(ino, Extent { logical: start, physical: at, len, unwritten: false })?;
        self.log.inode_mut(ino)?.blocks += u64::from(len);
        for (i, b) in (start..start + u64::from(len)).enumerate() {
            self.queue_page(ino, b, DataBlock(at.0 + i as u64));
        }
        Ok(())
    }

    /// Whether file block `b`, mapped by `e`, lies on a data block a
    /// snapshot holds, or past the new end of a data shrink under way:
    /// either way it is never overwritten in place, and its next write
    /// goes to a new block. ([`crate::faults::Fault::SnapshotInPlace`]
    /// makes it answer no for snapshots: the broken rule the tests must
    /// catch.)
    pub(super) fn held_in_snapshot(&self, e: &Extent, b: u64) -> bool {
        let at = e.physical.0 + (b - e.logical);
        self.log.space().past_limit(at)
            || (!crate::faults::active(crate::faults::Fault::SnapshotInPlace) && self.log.space().is_held(at))
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
    pub(super) fn allocation_goal(&mut self, ino: InodeNo, block: u64) -> Result<DataBlock> {
        if block > 0
            && let Some(prev) = self.extent_at(ino, block - 1)?
        {
            return Ok(DataBlock(prev.physical.0 + (block - prev.logical)));
        }
        let group = self.log.inode(ino)?.group;
        Ok(self.log.space_mut().group_goal(group))
    }
}
