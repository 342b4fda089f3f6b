//! `fallocate` of [`Volume`]: allocation, holes, zeroing, and the range
//! modes that move a file's contents (collapse, insert) or give it its own
//! copies of shared blocks (unshare). The rules and errors are those of
//! Linux's `vfs_fallocate` and of ext4 and XFS.

use super::{FallocateMode, Volume, lock};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::meta_log::segments::OpKind;
use crate::namespace::file::MAX_FILE_SIZE;
use crate::types::{BLOCK_BYTES, FileKind, InodeNo};

/// Commits a collapse or insert may wait for to find room in a commit
/// group, before it says the log is full.
const ROOM_ATTEMPTS: usize = 4;

impl Volume {
    /// Allocates, zeroes, deallocates, collapses, inserts or unshares a
    /// range of a regular file, as `fallocate(2)` with `mode`.
    ///
    /// # Errors
    /// `Invalid` for an empty range, a collapse or insert not aligned to
    /// the block size, a collapse reaching the end of the file or an insert
    /// at or past it, a collapse or insert told to keep the size;
    /// `NotSupported` for two range modes at once or a punch that changes
    /// the size; `FileTooBig`; `IsDir`, `IllegalSeek` (a fifo), `NoDevice`
    /// (another non-regular file); `NoSpace(Data)`, `NoSpace(Meta)`.
    pub fn fallocate(&self, ino: InodeNo, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        mode.check()?;
        if len == 0 || i64::try_from(offset).is_err() || i64::try_from(len).is_err() {
            return Err(Error::Invalid("fallocate of an empty or negative range"));
        }
        let end = offset.checked_add(len).ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        match Volume::kind_of(&mut lock(&self.fs), ino)? {
            FileKind::Regular => {}
            FileKind::Directory => return Err(Error::IsDir),
            FileKind::Fifo => return Err(Error::IllegalSeek),
            _ => return Err(Error::NoDevice),
        }
        if (mode.collapse_range || mode.insert_range) && !(offset | len).is_multiple_of(BLOCK_BYTES) {
            return Err(Error::Invalid("collapse or insert range not aligned to the block size"));
        }
        {
            // Immutable: nothing; append-only: no existing byte changes
            // (ext4 refuses punching, collapsing and inserting; zeroing
            // rewrites bytes too).
            let rec = lock(&self.fs).inode(ino)?.clone();
            super::flags::immutable(rec.flags)?;
            let rewrites = mode.punch_hole || mode.zero_range || mode.collapse_range || mode.insert_range;
            if rewrites && offset < rec.size {
                super::flags::fixed(rec.flags)?;
            }
        }
        {
            let mut fs = lock(&self.fs);
            fs.pages.expire(ino);
            // Allocation changes the mapping the held record would undo.
            fs.release_replacement(ino)?;
        }
        if mode.collapse_range || mode.insert_range {
            return self.shift_range(ino, offset, len, mode.collapse_range);
        }
        if mode.unshare_range {
            let (mut b, last) = (offset / BLOCK_BYTES, end.div_ceil(BLOCK_BYTES));
            while let Some(next) = self.mutate(OpKind::Grow, |fs, _| fs.unshare_step(ino, b, last))? {
                b = next;
                if lock(&self.fs).pages.dirty_bytes() > self.options.dirty_data_limit {
                    self.commit_under_pressure()?;
                }
            }
        }
        if mode.punch_hole || mode.zero_range {
            while !self.mutate(OpKind::Shrink, |fs, _| fs.punch_hole_step(ino, offset, len))? {}
        }
        if !mode.punch_hole {
            while !self.mutate(OpKind::Grow, |fs, _| fs.preallocate_step(ino, offset, len, 8))? {}
        }
        self.mutate(OpKind::Grow, |fs, now| {
            let mut rec = fs.inode_mut(ino)?;
            let grow = !mode.keep_size && !mode.punch_hole && end > rec.size;
            if grow {
                rec.size = end;
            }
            // Every mode moves both, as on ext4 (POSIX says nothing).
            rec.mtime = now;
            rec.ctime = now;
            drop(rec);
            if grow {
                fs.intents.resized(ino);
            }
            Ok(())
        })
    }

    /// A collapse (`collapse`) or an insert of `[offset, offset + len)`,
    /// both aligned: one operation, so that one commit group carries it.
    /// A group that lacks the room the extent tree may need is committed
    /// first.
    fn shift_range(&self, ino: InodeNo, offset: u64, len: u64, collapse: bool) -> Result<()> {
        let (first, blocks) = (offset / BLOCK_BYTES, len / BLOCK_BYTES);
        let split = collapse && faults::active(Fault::CollapseSizeLater);
        for _ in 0..ROOM_ATTEMPTS {
            let done = self.mutate(OpKind::Grow, |fs, now| {
                let size = fs.inode(ino)?.size;
                // ext4 and XFS: EFBIG before the end-of-file check.
                if !collapse && size.checked_add(len).is_none_or(|n| n > MAX_FILE_SIZE) {
                    return Err(Error::FileTooBig);
                }
                if collapse && offset + len >= size {
                    return Err(Error::Invalid("collapse range reaches the end of the file"));
                }
                if !collapse && offset >= size {
                    return Err(Error::Invalid("insert range at or past the end of the file"));
                }
                let cost = if collapse {
                    fs.shift_cost(ino, first, first + blocks)?
                } else {
                    fs.shift_cost(ino, first, first)?
                };
                if !fs.log.has_room_for(cost) {
                    return if fs.log.has_dirty() { Ok(false) } else { Err(Error::NoSpace(DeviceRole::Meta)) };
                }
                if collapse {
                    fs.collapse_range(ino, offset, len)?;
                } else {
                    fs.insert_range(ino, offset, len)?;
                }
                let mut rec = fs.inode_mut(ino)?;
                rec.mtime = now;
                rec.ctime = now;
                Ok(true)
            })?;
            if done {
                if split {
                    // The broken rule: the extents move in a later group.
                    self.commit()?;
                    self.mutate(OpKind::Grow, |fs, _| fs.collapse_shift_later(ino, offset, len))?;
                }
                return Ok(());
            }
            self.commit_for_room()?;
        }
        Err(Error::NoSpace(DeviceRole::Meta))
    }
}
