//! The file-data operations of [`Volume`]: open and release, read and
//! write, preallocation and holes, and the durability calls.

use super::atime::Touch;
use super::{Changer, Stamp, Volume, lock};
use crate::device::AlignedBuf;
use crate::error::{Error, Result};
use crate::format::inode::{Body, FLAG_APPEND, FLAG_SYNC};
use crate::meta_log::segments::OpKind;
use crate::namespace::file::{ReadPiece, Whence};
use crate::namespace::spare::Prefilled;
use crate::types::{BLOCK_SIZE, InodeNo};

/// Pages one file may hold in memory before the background writer starts
/// on them (32 MiB): a file written this far in one go is streamed, and its
/// data had better go to the device while more arrives than all at once
/// when the dirty limit stops every writer. Small files (PostMark's) never
/// get there, so they still wait for their delayed-tail expiry.
const STREAM_PAGES: usize = 8192;

impl Volume {
    /// Takes a reference for an open file (engine users without FUSE lookups).
    ///
    /// # Errors
    /// `NotFound`.
    pub fn open_file(&self, ino: InodeNo) -> Result<()> {
        self.read_op(|fs| fs.inode(ino).map(|_| ()))?;
        self.remember(ino, 1);
        Ok(())
    }

    /// Drops the reference of [`Volume::open_file`].
    ///
    /// # Errors
    /// Freeing an unlinked inode fails.
    pub fn release_file(&self, ino: InodeNo) -> Result<()> {
        self.file_closed(ino);
        self.forget(ino, 1)
    }

    /// `ino` was closed (FUSE sends FLUSH at every close, after the
    /// kernel's dirty pages of the file): a rewrite after a truncation to
    /// zero is complete, and goes with the next commit (see
    /// `namespace::replace`).
    pub fn file_closed(&self, ino: InodeNo) {
        lock(&self.fs).replacement_closed(ino);
    }

    /// Whether `ino` was truncated to zero and its old contents are kept
    /// on disk until its new ones are complete (tests and `inspect`).
    #[must_use]
    pub fn held_for_replacement(&self, ino: InodeNo) -> bool {
        lock(&self.fs).replacing.is_held(ino)
    }

    /// Reads up to `size` bytes at `offset`, updating the access time as
    /// the mount's [`super::AtimeMode`] says.
    ///
    /// # Errors
    /// `IsDir`, `Invalid` for non-regular files; I/O errors.
    pub fn read(&self, ino: InodeNo, offset: u64, size: usize) -> Result<Vec<u8>> {
        let mut out = AlignedBuf::new();
        self.read_into(ino, offset, size, &mut out)?;
        Ok(out.bytes().to_vec())
    }

    /// As [`Volume::read`], into `out` (emptied first), which a caller
    /// keeps from one read to the next: the data device is read straight
    /// into it, page-aligned (see [`AlignedBuf`]).
    ///
    /// # Errors
    /// As [`Volume::read`].
    pub fn read_into(&self, ino: InodeNo, offset: u64, size: usize, out: &mut AlignedBuf) -> Result<()> {
        // A device piece reads whole blocks: a partial one at each end.
        out.reset(size + 2 * BLOCK_SIZE);
        let reuse = self.reuse.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (plan, touch, ahead) = self.read_op(|fs| {
            let plan = fs.read_plan(ino, offset, size)?;
            // A read of nothing is no access (as Linux's filemap_read).
            let touch = if size > 0 { self.touch_atime_locked(fs, ino) } else { Touch::Settled };
            // Last, once nothing can send this attempt back: the next files
            // of the listing this one is in, planned from memory only (the
            // read-ahead's meta-data is never read for; `read_op` sets the
            // deferral back).
            let ahead = if offset == 0 && size > 0 {
                fs.log.set_defer_reads(true);
                lock(&self.listed).ahead(fs, ino)
            } else {
                Vec::new()
            };
            Ok((plan, touch, ahead))
        })?;
        // Asked for before this read waits for its own blocks.
        for (first, count) in ahead {
            self.data.will_need(first, count);
        }
        let read = self.read_pieces(plan, out);
        // A commit takes the reuse lock exclusively: let go of it first.
        drop(reuse);
        self.touch_atime_after(ino, touch);
        read
    }

    fn read_pieces(&self, plan: Vec<ReadPiece>, out: &mut AlignedBuf) -> Result<()> {
        for piece in plan {
            match piece {
                ReadPiece::Bytes(b) => out.extend(b.len()).copy_from_slice(&b),
                ReadPiece::Zeros(n) => out.extend(n).fill(0),
                ReadPiece::Device { at, skip, len } => {
                    // Whole blocks land at the end of `out`; the bytes
                    // before `skip` and past `len` are cut off after.
                    let start = out.len();
                    let blocks = (skip + len).div_ceil(BLOCK_SIZE);
                    let dst = out.extend(blocks * BLOCK_SIZE);
                    crate::device::read_into(self.data.as_ref(), crate::DeviceRole::Data, at.0, dst)?;
                    if skip > 0 {
                        out.copy_within(start + skip, len, start);
                    }
                    out.truncate(start + len);
                }
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`; returns the bytes written. Stamps mtime
    /// and ctime with the current time.
    ///
    /// # Errors
    /// `FileTooBig`, `NoSpace(Data)`, `IsDir`; I/O errors.
    pub fn write(&self, ino: InodeNo, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_with(ino, offset, data, Stamp::Now)
    }

    /// Writes `data` at `offset`, stamping the times or not: a caller that
    /// owns the times itself (the kernel's writeback cache, which sends them
    /// with a later setattr) writes with [`Stamp::Keep`].
    ///
    /// # Errors
    /// As [`Volume::write`].
    pub fn write_with(&self, ino: InodeNo, offset: u64, data: &[u8], stamp: Stamp) -> Result<usize> {
        self.prefetch(|fs| fs.inode(ino).map(|_| ()));
        let sync = self.may_write(ino, offset, data)?;
        // The blocks written whole are copied before the lock, so that a
        // stream's 1 MiB copies do not hold up every other request.
        let mut pre = Prefilled::fill(&self.spare, offset, data);
        let done = self.mutate(OpKind::Grow, |fs, now| {
            if !data.is_empty() {
                let size = fs.inode(ino)?.size;
                fs.pages.note_dirtied(ino, now, size);
            }
            fs.write_prefilled(ino, offset, data, &mut pre)?;
            if !data.is_empty() && stamp == Stamp::Now {
                let mut rec = fs.inode_mut(ino)?;
                rec.mtime = now;
                rec.ctime = now;
            }
            let (dirty, limit) = (fs.pages.dirty_bytes(), fs.config.dirty_data_limit);
            let pages = fs.pages.file_pages(ino);
            let streaming = pages >= STREAM_PAGES;
            // Over the limit, the writers holding the dirty data (an eighth
            // of the limit or more) wait for room; a small writer (a
            // database beside a copy) waits only past a quarter more, so
            // that its page is not queued behind the copy's relief. The
            // background writer makes room meanwhile.
            let heavy = pages * BLOCK_SIZE >= limit / 8;
            let wait = dirty > limit && (heavy || dirty > limit + limit / 4);
            Ok((wait, streaming, dirty > limit))
        });
        pre.give_back(&self.spare);
        let (dirty, streaming, over) = done?;
        if dirty {
            self.commit_under_pressure()?;
        } else if streaming {
            self.kick_write_back();
        } else if over {
            self.kick_relief();
        }
        if sync && !crate::faults::active(crate::faults::Fault::SyncFlagIgnored) {
            self.fdatasync(ino)?;
        }
        Ok(data.len())
    }

    /// EPERM for a write an immutable file refuses, or an append-only one:
    /// the bytes it would write below the end must be the ones there (the
    /// kernel writes back a whole page, so an append rewrites the start of
    /// the last page with the same bytes).
    /// Returns whether the file is sync (`chattr +S`): the write is made
    /// durable before it returns.
    fn may_write(&self, ino: InodeNo, offset: u64, data: &[u8]) -> Result<bool> {
        let (flags, size) = {
            let mut fs = lock(&self.fs);
            let rec = fs.inode(ino)?;
            (rec.flags, rec.size)
        };
        super::flags::immutable(flags)?;
        let sync = flags & FLAG_SYNC != 0;
        if flags & FLAG_APPEND == 0 || offset >= size || data.is_empty() {
            return Ok(sync);
        }
        let below = usize::try_from(size - offset).unwrap_or(usize::MAX).min(data.len());
        if self.read(ino, offset, below)? != data[..below] {
            return Err(Error::NotPermitted);
        }
        Ok(sync)
    }

    /// Drops what a write must drop before it writes (Linux's
    /// `file_remove_privs`): file capabilities always, and the set-id bits
    /// [`Changer::after_write`] says `changer` drops. Costs no commit when
    /// there is nothing to drop, the common case. Returns whether anything
    /// was dropped (a caller that caches attributes must forget them).
    ///
    /// # Errors
    /// `NotFound`; I/O errors.
    pub fn drop_privileges(&self, ino: InodeNo, changer: &Changer) -> Result<bool> {
        if !self.read_op(|fs| super::ops::has_privileges(fs, ino, changer))? {
            return Ok(false);
        }
        self.mutate(OpKind::Grow, |fs, now| {
            let dropped = super::ops::drop_privileges(fs, ino, changer)?;
            if dropped {
                fs.inode_mut(ino)?.ctime = now;
            }
            Ok(dropped)
        })
    }

    /// `SEEK_DATA` / `SEEK_HOLE`.
    ///
    /// # Errors
    /// `NoSuchOffset` at or past the end of the file.
    pub fn seek(&self, ino: InodeNo, offset: u64, whence: Whence) -> Result<u64> {
        self.read_op(|fs| fs.seek(ino, offset, whence))
    }

    /// Whether a regular file keeps its bytes in its inode.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn is_inline(&self, ino: InodeNo) -> Result<bool> {
        self.read_op(|fs| Ok(matches!(fs.inode(ino)?.body, Body::Inline(_))))
    }
}
