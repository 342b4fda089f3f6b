//! The data mover of a data-device shrink: finds the files that own blocks
//! past the new end and moves those blocks below it through the ordinary
//! write path, so that every move is a commit like any other (data written
//! and flushed before the group that maps it, the old block freed only
//! once that group is durable; DESIGN.md, "Resize").

use super::Fs;
use super::pages::{Page, PageState};
use crate::device;
use crate::error::{DeviceRole, Error, Result};
use crate::format::descriptor::Change;
use crate::format::inode::{Body, Extent};
use crate::types::{BLOCK_SIZE, DataBlock, FileKind, InodeNo};

/// Blocks the mover reads from the disk in one request (1 MiB).
const READ_RUN_BLOCKS: u64 = 256;

/// A file with data blocks past a shrink's new end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The file.
    pub ino: InodeNo,
    /// Its data blocks at or past the end.
    pub blocks: u64,
}

impl Fs {
    /// Scans up to `max` inode numbers from `first` for a shrink to data
    /// block `end`: returns the files with data blocks at or past `end`,
    /// and where the next scan starts (None: the inode map is done). An
    /// inode bound to a group past the end is bound again below it
    /// (directories to the emptiest group, others as
    /// [`crate::data_space::DataSpace::usable_group`] maps them). There is
    /// no reverse map from blocks to files: this reads every inode and
    /// every extent map (DESIGN.md says what that costs).
    ///
    /// # Errors
    /// I/O and corruption errors reading inodes and extent trees.
    pub fn scan_from(&mut self, end: u64, first: u64, max: u64) -> Result<(Vec<Owner>, Option<u64>)> {
        let count = self.log.ifile().inodes.len() as u64;
        let stop = first.saturating_add(max).min(count);
        let last_group = self.log.space().group_of(DataBlock(end.saturating_sub(1))).0;
        let mut out = Vec::new();
        for i in first.max(1)..stop {
            let ino = InodeNo(i);
            if !self.log.map_entry(ino)?.is_some_and(|e| e.in_use()) {
                continue;
            }
            let (group, mapped, mode) = {
                let rec = self.log.inode(ino)?;
                // A directory's body is a tree too, of entries, not extents.
                let regular = FileKind::from_mode(rec.mode) == Some(FileKind::Regular);
                (rec.group, regular && matches!(rec.body, Body::Extents(_) | Body::Tree(_)), rec.mode)
            };
            if group.0 > last_group {
                let moved = if FileKind::from_mode(mode) == Some(FileKind::Directory) {
                    self.log.space_mut().unbind_directory(group)?;
                    self.log.space_mut().bind_directory()?
                } else {
                    self.log.space().usable_group(group)
                };
                self.log.inode_mut(ino)?.group = moved;
            }
            if !mapped {
                continue;
            }
            let blocks: u64 = self.extents_around(ino, 0, u64::MAX)?.iter().map(|e| blocks_from(e, end)).sum();
            if blocks > 0 {
                out.push(Owner { ino, blocks });
            }
        }
        Ok((out, (stop < count).then_some(stop)))
    }

    /// Moves up to `budget` of `ino`'s blocks at or past `end` (a shrink's
    /// limit, set in the allocator): a written block gets a dirty page,
    /// read from the disk unless one is cached, which the next commit's
    /// write-back puts on a new block below the limit (it never writes a
    /// block past the limit in place); an unwritten extent is mapped to new
    /// unwritten blocks at once. Returns the blocks taken.
    ///
    /// # Errors
    /// `NoSpace(Data)` when the space below the end ran out; I/O errors.
    pub fn relocate_from(&mut self, ino: InodeNo, end: u64, budget: u64) -> Result<u64> {
        debug_assert_eq!(self.log.space().limit(), Some(end), "moving blocks with no limit set");
        // Deleted since the scan (its blocks are freed, not moved), or its
        // number taken by a file made since (which has none past the end).
        if !self.log.map_entry(ino)?.is_some_and(|e| e.in_use()) {
            return Ok(0);
        }
        let mut taken = 0;
        for e in self.extents_around(ino, 0, u64::MAX)? {
            if taken >= budget {
                break;
            }
            if blocks_from(&e, end) == 0 {
                continue;
            }
            let first = e.logical + end.saturating_sub(e.physical.0);
            let last = e.logical_end().min(first + (budget - taken));
            if e.unwritten {
                self.remap_unwritten(ino, first, last)?;
            } else {
                self.dirty_written(ino, &e, first, last)?;
            }
            taken += last - first;
        }
        Ok(taken)
    }

    /// Gives every block of `[first, last)` of `ino` (written, mapped by
    /// `e`) a dirty page: cached pages turn dirty, the others are read
    /// from the disk in runs of up to 1 MiB (one request each, not one
    /// per block: the move's reads were most of its time).
    fn dirty_written(&mut self, ino: InodeNo, e: &Extent, first: u64, last: u64) -> Result<()> {
        let mut b = first;
        while b < last {
            match self.pages.page(ino, b).map(|p| p.state) {
                // Write-back moves it already.
                Some(PageState::Dirty { .. }) => b += 1,
                Some(_) => {
                    // A queued page turns dirty without a reservation (the
                    // write-back takes one), except in strict order.
                    if self.config.strict {
                        self.log.space_mut().reserve(1)?;
                    }
                    self.dirty_page(ino, b, false, false)?;
                    b += 1;
                }
                None => {
                    let mut stop = b + 1;
                    while stop < last && stop - b < READ_RUN_BLOCKS && self.pages.page(ino, stop).is_none() {
                        stop += 1;
                    }
                    let n = stop - b;
                    self.log.space_mut().reserve(n)?;
                    let at = e.physical.0 + (b - e.logical);
                    let raw = device::read(self.log.data_device().as_ref(), DeviceRole::Data, at, n as usize)?;
                    for (i, chunk) in raw.chunks(BLOCK_SIZE).enumerate() {
                        let mut data = self.pages.new_buffer(true);
                        data.copy_from_slice(chunk);
                        // Reserved: its write-back goes to a new block.
                        let page = Page::new(data, PageState::Dirty { reserved: true });
                        self.pages.files.entry(ino).or_default().insert(b + i as u64, page);
                    }
                    self.pages.dirty_pages += n as usize;
                    self.pages.count_reserved(ino, n, 0);
                    b = stop;
                }
            }
        }
        Ok(())
    }

    /// Maps the unwritten file blocks `[start, end)` of `ino` to new
    /// unwritten blocks (nothing to copy: they read as zeros).
    fn remap_unwritten(&mut self, ino: InodeNo, start: u64, end: u64) -> Result<()> {
        self.log.space_mut().reserve(end - start)?;
        let mut pos = start;
        while pos < end {
            let goal = self.allocation_goal(ino, pos)?;
            let Some((at, len)) = self.log.space_mut().allocate(goal, end - pos)? else {
                self.log.space_mut().unreserve(end - pos);
                return Err(Error::NoSpace(DeviceRole::Data));
            };
            let (old, _) = self.unmap_range(ino, pos, pos + u64::from(len), usize::MAX)?;
            self.free_data(ino, &old)?;
            self.log.record(Change::DataAlloc { start: at, len });
            self.add_extent(ino, Extent { logical: pos, physical: at, len, unwritten: true })?;
            self.log.inode_mut(ino)?.blocks += u64::from(len);
            pos += u64::from(len);
        }
        Ok(())
    }
}

/// How many of `e`'s data blocks lie at or past `end`.
fn blocks_from(e: &Extent, end: u64) -> u64 {
    let stop = e.physical.0 + u64::from(e.len);
    stop.saturating_sub(end.max(e.physical.0))
}
