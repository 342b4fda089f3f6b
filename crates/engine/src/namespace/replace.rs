//! Replacing a file's contents in place, safely without fsync.
//!
//! `open(O_TRUNC)`, write, close is how many programs save a file. With
//! delayed allocation a commit may land between the truncation and the new
//! data, and a crash then shows an empty file: the old contents gone, the
//! new never written (ext4's zero-length-file problem of 2009, which it
//! answered with `auto_da_alloc`). DualFS does better than starting
//! write-back at close: while a file truncated to zero is being rewritten,
//! periodic commits write the record it had before the truncation, and keep
//! its old data blocks allocated; the commit after the file is closed
//! writes the new record, the new data and the frees of the old blocks
//! together. A crash shows the old contents or the new, never neither.
//!
//! A *held* file is released (committed as it is) when it is closed, by
//! every commit that must write everything (fsync, sync, unmount, memory
//! pressure), when its new contents grow past [`HOLD_MAX_BYTES`] or it has
//! been held longer than the data expiry, and by any change that the old
//! record would contradict (links, names, modes, owners, extended
//! attributes, allocation).
//!
//! Only files whose record holds the whole mapping (inline bytes or up to
//! 16 extents) are held: the old record then needs no other meta-data. A
//! file with pages not yet durable is not held either: its record in memory
//! may name data that is not on disk.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::Fs;
use crate::error::Result;
use crate::format::inode::{Body, InodeRecord};
use crate::types::{BLOCK_SIZE, DataBlock, InodeNo, Timestamp};

/// New contents held back past this size are committed as they are: the
/// held pages cannot be written early, and memory is bounded.
pub const HOLD_MAX_BYTES: usize = 16 << 20;

/// Most files held at once. A commit writes an old record (at most about
/// 1.7 KiB) for each, beside what the log's estimate of the group counted:
/// this bounds the difference to a few blocks, well inside the room every
/// operation leaves (`meta_log::OP_MAX_BLOCKS`).
pub const HOLD_MAX_FILES: usize = 16;

/// A file being rewritten after a truncation to zero.
#[derive(Debug)]
pub struct Replacement {
    /// The record before the truncation: what periodic commits write.
    old: InodeRecord,
    /// The old data blocks, freed with the commit that writes the new contents.
    frees: Vec<(DataBlock, u32)>,
    /// When the truncation happened.
    since: Timestamp,
    /// Closed since the truncation: its new contents are complete.
    closed: bool,
}

/// The files being replaced, by inode.
#[derive(Debug, Default)]
pub struct Replacements {
    held: FxHashMap<InodeNo, Replacement>,
}

/// What a commit does with held files.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HoldPolicy {
    /// Release every one (fsync, sync, unmount, memory pressure).
    ReleaseAll,
    /// Keep those still being written and younger than `expire_before`.
    Keep {
        /// Files held since before this are released.
        expire_before: Timestamp,
    },
}

impl Replacements {
    /// Whether `ino` is held.
    #[must_use]
    pub fn is_held(&self, ino: InodeNo) -> bool {
        self.held.contains_key(&ino)
    }

    /// Whether any file is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

impl Fs {
    /// A truncation of `ino` to zero is about to happen at `now`: hold its
    /// current record if it can be (see the module's doc). Returns whether
    /// it is held.
    ///
    /// # Errors
    /// `NotFound`; I/O errors reading the inode.
    pub fn hold_for_replacement(&mut self, ino: InodeNo, now: Timestamp) -> Result<bool> {
        if self.replacing.is_held(ino) {
            return Ok(true);
        }
        if !self.config.hold_replacements {
            return Ok(false);
        }
        let rec = self.log.inode(ino)?;
        let whole = matches!(rec.body, Body::Inline(_) | Body::Extents(_) | Body::Empty);
        if rec.size == 0 || !whole || self.pages.has_pages(ino) || self.replacing.held.len() >= HOLD_MAX_FILES {
            return Ok(false);
        }
        let old = rec.clone();
        self.replacing.held.insert(ino, Replacement { old, frees: Vec::new(), since: now, closed: false });
        Ok(true)
    }

    /// Frees `ranges` of `ino`'s data: at once (once the freeing commit is
    /// durable), or with the commit that releases its replacement.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn free_or_hold(&mut self, ino: InodeNo, ranges: &[(DataBlock, u32)]) -> Result<()> {
        let Some(r) = self.replacing.held.get_mut(&ino) else {
            return self.free_data(ino, ranges);
        };
        r.frees.extend_from_slice(ranges);
        let total: u64 = ranges.iter().map(|&(_, n)| u64::from(n)).sum();
        if total > 0 {
            self.take_blocks(ino, total)?;
        }
        Ok(())
    }

    /// `ino` was closed: its new contents are complete and go with the next commit.
    pub fn replacement_closed(&mut self, ino: InodeNo) {
        if let Some(r) = self.replacing.held.get_mut(&ino) {
            r.closed = true;
        }
    }

    /// Commits `ino`'s replacement as it stands with the next commit: the
    /// old blocks are freed, the new record and every dirty page of the
    /// file go with it.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn release_replacement(&mut self, ino: InodeNo) -> Result<()> {
        let Some(r) = self.replacing.held.remove(&ino) else {
            return Ok(());
        };
        // Their blocks came off the inode's count when they were held.
        self.free_ranges(ino, &r.frees)?;
        // Sealed while held, the record in memory may be clean (the disk
        // has the old one): make it dirty, so that the new one is written.
        drop(self.log.inode_mut(ino)?);
        self.pages.expire(ino);
        Ok(())
    }

    /// Before a commit: releases the held files `policy` lets go, and
    /// returns the old records of the others, which the commit writes in
    /// place of the ones in memory (their pages stay unwritten).
    ///
    /// # Errors
    /// `NotFound`; I/O errors.
    pub fn settle_replacements(&mut self, policy: HoldPolicy) -> Result<HashMap<InodeNo, InodeRecord>> {
        let mut release = Vec::new();
        for (&ino, r) in &self.replacing.held {
            let go = match policy {
                HoldPolicy::ReleaseAll => true,
                HoldPolicy::Keep { expire_before } => {
                    r.closed
                        || r.since <= expire_before
                        || self.pages.file_pages(ino) * BLOCK_SIZE > HOLD_MAX_BYTES
                        || crate::faults::active(crate::faults::Fault::NoReplaceHold)
                }
            };
            if go {
                release.push(ino);
            }
        }
        for ino in release {
            self.release_replacement(ino)?;
        }
        Ok(self.replacing.held.iter().map(|(&ino, r)| (ino, r.old.clone())).collect())
    }
}
