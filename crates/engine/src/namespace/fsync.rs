//! Untangled fsync: deciding how to make a few files durable, and building
//! the fsync records that say so (`format::fsync`, `namespace::intents`).
//!
//! Four answers, cheapest first:
//! - nothing: nothing of the files changed since they were last durable;
//! - data only: an fdatasync whose dirty pages all overwrite blocks that
//!   are mapped and written, with the size unchanged, writes those pages in
//!   place and flushes the data device: no log block at all;
//! - a record: an fsync partial segment with the files' inodes, changed map
//!   ranges, the names of new files and new directories above them, and
//!   their data — copied into the record when it is small (one write and
//!   one flush of the meta-data device: the ZIL's answer to the order rule),
//!   written in place and flushed first when it is not;
//! - a commit, when a file is tangled (see `intents`) or the record would
//!   be too large.

use super::Fs;
use super::pages::PageState;
use crate::error::Result;
use crate::faults::{self, Fault};
use crate::format::checksum;
use crate::format::descriptor::Change;
use crate::format::fsync::{FSYNC_MAPPED, FSYNC_NEW, FsyncRecord, MAX_RANGE_EXTENTS};
use crate::format::inode::{Body, Extent, InodeRecord, Xattrs};
use crate::meta_log::Log;
use crate::types::{BLOCK_SIZE, DataBlock, FileKind, InodeNo};

/// How large an fsync record may grow, and what the mode demands.
#[derive(Clone, Copy, Debug)]
pub struct FsyncLimits {
    /// Data up to this many bytes (all files of the batch together) is
    /// copied into the record; more is written in place first.
    pub copy_bytes: usize,
    /// Most descriptor blocks of the record.
    pub desc_blocks: usize,
    /// Most blocks the whole partial segment may take (the segment size).
    pub total_blocks: usize,
    /// `order=strict`: a record may only carry a batch that leaves nothing
    /// else dirty (else a crash could show a later operation without an
    /// earlier one).
    pub strict: bool,
}

/// What it takes to make a batch of files durable.
#[derive(Debug)]
pub enum FsyncWay {
    /// Nothing to write.
    Nothing,
    /// Write these blocks in place and flush the data device.
    DataOnly(Vec<(DataBlock, Vec<u8>)>),
    /// Write an fsync partial segment.
    Record(FsyncPlan),
    /// Only a commit group can say it (why, for the statistics).
    Commit(&'static str),
}

/// An fsync partial segment to write.
#[derive(Debug, Default)]
pub struct FsyncPlan {
    /// The records.
    pub records: Vec<FsyncRecord>,
    /// The data blocks copied into it, one per `Data` record.
    pub copies: Vec<Vec<u8>>,
    /// Data to write in place and flush before it.
    pub home: Vec<(DataBlock, Vec<u8>)>,
}

/// A file's inode as an fsync record carries it, with its flags: the body
/// is left out where it is not the file's own (a map kept by range
/// records, a directory's entries of other files).
fn image(rec: &InodeRecord) -> (u8, InodeRecord) {
    let mut img = rec.clone();
    let mut flags = 0;
    match FileKind::from_mode(rec.mode) {
        Some(FileKind::Regular) if !matches!(rec.body, Body::Inline(_)) => {
            img.body = Body::Empty;
            flags |= FSYNC_MAPPED;
        }
        Some(FileKind::Directory) => img.body = Body::Empty,
        _ => {}
    }
    (flags, img)
}

impl Fs {
    /// Why `ino` cannot be made durable by a record (None: it can).
    fn fsync_ineligible(&mut self, ino: InodeNo) -> Result<Option<&'static str>> {
        let rec = self.log.inode(ino)?;
        let (mode, nlink, tree_xattrs) = (rec.mode, rec.nlink, matches!(rec.xattrs, Xattrs::Tree(_)));
        if FileKind::from_mode(mode) != Some(FileKind::Regular) {
            return Ok(Some("not a regular file"));
        }
        if nlink == 0 || self.log.is_orphan(ino) {
            return Ok(Some("unlinked, or a truncation unfinished"));
        }
        if tree_xattrs {
            return Ok(Some("extended attributes in a tree"));
        }
        if self.intents.is_tangled(ino) {
            return Ok(Some("a new file renamed, linked or unlinked"));
        }
        // The new directories above a new file go in the record too.
        let mut at = ino;
        loop {
            if self.intents.birth_is_logged(at) {
                return Ok(None);
            }
            let dir = match self.intents.birth(at) {
                None => return Ok(None),
                Some(None) => return Ok(Some("a new inode with no name yet")),
                Some(Some(b)) => b.dir,
            };
            if self.intents.birth(dir).is_none() {
                return Ok(None);
            }
            let d = self.log.inode(dir)?;
            let fit = FileKind::from_mode(d.mode) == Some(FileKind::Directory)
                && d.nlink > 0
                && !matches!(d.xattrs, Xattrs::Tree(_));
            if !fit || self.intents.is_tangled(dir) || self.log.is_orphan(dir) {
                return Ok(Some("a new directory above it moved, or has attributes in a tree"));
            }
            at = dir;
        }
    }

    /// Whether anything of `ino` is not yet durable (for fdatasync: of its
    /// data and what reaches it).
    fn fsync_needed(&mut self, ino: InodeNo, datasync: bool) -> Result<bool> {
        if self.pages.has_dirty(ino)
            || self.intents.is_unlogged(ino)
            || self.replacing.is_held(ino)
            || (self.intents.birth(ino).is_some() && !self.intents.birth_is_logged(ino))
        {
            return Ok(true);
        }
        if !self.log.inode_is_dirty(ino) {
            return Ok(false);
        }
        let rec = self.log.inode(ino)?;
        if datasync && !matches!(rec.body, Body::Inline(_)) {
            // Only times or modes changed: fdatasync leaves them.
            return Ok(false);
        }
        let (_, img) = image(rec);
        Ok(self.intents.logged_image(ino) != Some(&img))
    }

    /// Whether an fdatasync of `ino` may write its dirty pages in place
    /// and nothing else: no size or map change to log, no copy in a record
    /// that replay would put back over them.
    fn datasync_in_place(&mut self, ino: InodeNo) -> Result<bool> {
        if self.config.strict
            || self.intents.birth(ino).is_some()
            || self.intents.is_unlogged(ino)
            || self.intents.has_copies(ino)
            || self.replacing.is_held(ino)
        {
            return Ok(false);
        }
        let dirty: Vec<u64> = self
            .pages
            .files
            .get(&ino)
            .map(|f| f.iter().filter(|(_, p)| matches!(p.state, PageState::Dirty { .. })).map(|(b, _)| *b).collect())
            .unwrap_or_default();
        for b in dirty {
            // A block that must not be overwritten in place (a snapshot
            // holds it, a shrink empties its group) moves: a map change.
            if self.extent_at(ino, b)?.is_none_or(|e| e.unwritten || self.held_in_snapshot(&e, b)) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether `ino` has nothing a record since the seal did not carry.
    fn fully_logged(&mut self, ino: InodeNo) -> Result<bool> {
        Ok(!self.fsync_needed(ino, false)? && self.intents.logged_image(ino).is_some())
    }

    /// `order=strict`: whether a record of `files` leaves the disk at a
    /// prefix of the operations, that is, whether everything dirty belongs
    /// to them or to files a record since the seal already carries whole.
    fn covers_everything(&mut self, files: &[InodeNo]) -> Result<bool> {
        if faults::active(Fault::StrictFsyncUntangled) {
            return Ok(true);
        }
        let data_only =
            |c: &Change| matches!(c, Change::DataAlloc { .. } | Change::DataFree { .. } | Change::NodeFree(_));
        if !self.log.pending_changes().iter().all(data_only) || !self.replacing.is_empty() {
            return Ok(false);
        }
        let mut others: Vec<InodeNo> = self.log.dirty_inodes();
        others.extend(self.log.dirty_object_owners());
        others.extend(self.pages.dirty_files());
        others.sort_unstable();
        others.dedup();
        for o in others {
            if !files.contains(&o) && !self.fully_logged(o)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Decides how to make `files` durable (their data and what reaches
    /// it; all of each inode unless `datasync`) and prepares it: pages to
    /// write in place become in flight under commit `id`.
    ///
    /// # Errors
    /// `NotFound` for a file gone; I/O errors reading meta-data.
    pub fn plan_fsync(&mut self, files: &[InodeNo], datasync: bool, id: u64, limits: &FsyncLimits) -> Result<FsyncWay> {
        let mut files = files.to_vec();
        files.sort_unstable();
        files.dedup();
        for &ino in &files {
            if let Some(why) = self.fsync_ineligible(ino)? {
                return Ok(FsyncWay::Commit(why));
            }
        }
        let mut need = Vec::new();
        for &ino in &files {
            if self.fsync_needed(ino, datasync)? {
                need.push(ino);
            }
        }
        if need.is_empty() {
            return Ok(FsyncWay::Nothing);
        }
        if limits.strict && !self.covers_everything(&need)? {
            return Ok(FsyncWay::Commit("order=strict: other operations are not yet durable"));
        }
        for &ino in &need {
            // Its new contents are what the caller wants durable.
            self.release_replacement(ino)?;
        }
        if datasync {
            let mut in_place = true;
            for &ino in &need {
                in_place &= self.datasync_in_place(ino)?;
            }
            if in_place {
                return self.take_in_place(&need, id).map(FsyncWay::DataOnly);
            }
        }
        // Only pages dirtied since the last record go in this one: a page
        // still queued from an earlier record is in that record's copy,
        // which replay applies first.
        let mut fresh: Vec<(InodeNo, u64)> = Vec::new();
        for &ino in &need {
            if let Some(pages) = self.pages.files.get(&ino) {
                fresh.extend(
                    pages.iter().filter(|(_, p)| matches!(p.state, PageState::Dirty { .. })).map(|(b, _)| (ino, *b)),
                );
            }
            if !self.write_back(ino, usize::MAX)? {
                return Ok(FsyncWay::Commit("the active commit group is full"));
            }
        }
        self.pages.forget_clean();
        let mut plan = FsyncPlan::default();
        for &ino in &need {
            if !self.file_records(ino, &mut plan.records)? {
                return Ok(FsyncWay::Commit("a range of the map holds too many extents"));
            }
        }
        let queued: Vec<(InodeNo, u64, DataBlock)> = fresh
            .into_iter()
            .filter_map(|(ino, b)| match self.pages.page(ino, b).map(|p| p.state) {
                Some(PageState::Queued { at }) => Some((ino, b, at)),
                _ => None,
            })
            .collect();
        let copy = queued.len() * BLOCK_SIZE <= limits.copy_bytes;
        let (desc_blocks, _) = Log::fsync_blocks(&plan.records);
        let extra = if copy { queued.len() * 29 } else { queued.len() * 13 };
        let desc_blocks = desc_blocks + extra.div_ceil(crate::format::block::PAYLOAD_LEN);
        if desc_blocks > limits.desc_blocks || desc_blocks + if copy { queued.len() } else { 0 } > limits.total_blocks {
            return Ok(FsyncWay::Commit("the fsync record would be too large"));
        }
        // The choice is made: now the pages change state.
        for (ino, b, at) in queued {
            let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&b)) else { continue };
            if copy {
                plan.records.push(FsyncRecord::Data { ino, block: b, at, crc: checksum::crc32c(&p.data[..]) });
                plan.copies.push(p.data.to_vec());
            } else {
                p.state = PageState::InFlight { at, commit: id };
                plan.home.push((at, p.data.to_vec()));
            }
        }
        if !copy {
            let mut blocks: Vec<u64> = plan.home.iter().map(|(at, _)| at.0).collect();
            blocks.sort_unstable();
            for run in blocks.chunk_by(|a, b| a + 1 == *b) {
                plan.records.push(FsyncRecord::Written { start: DataBlock(run[0]), len: run.len() as u32 });
            }
        }
        for &ino in &need {
            // Dirty, so that the next commit group writes it and folds the
            // record away (an overwrite under the kernel's writeback cache
            // need not have touched the inode).
            let (_, img) = image(&*self.log.inode_mut(ino)?);
            self.intents.logged(ino, img, copy);
        }
        Ok(FsyncWay::Record(plan))
    }

    /// Hands the dirty pages of `files` (all over written, mapped blocks)
    /// to commit `id`, to be written in place.
    fn take_in_place(&mut self, files: &[InodeNo], id: u64) -> Result<Vec<(DataBlock, Vec<u8>)>> {
        let mut out = Vec::new();
        for &ino in files {
            let blocks: Vec<u64> = self
                .pages
                .files
                .get(&ino)
                .map(|f| {
                    f.iter().filter(|(_, p)| matches!(p.state, PageState::Dirty { .. })).map(|(b, _)| *b).collect()
                })
                .unwrap_or_default();
            for b in blocks {
                let Some(e) = self.extent_at(ino, b)? else { continue };
                let at = DataBlock(e.physical.0 + (b - e.logical));
                if let Some(p) = self.pages.files.get_mut(&ino).and_then(|f| f.get_mut(&b)) {
                    p.state = PageState::InFlight { at, commit: id };
                    self.pages.dirty_pages -= 1;
                    out.push((at, p.data.to_vec()));
                }
            }
        }
        self.pages.forget_clean();
        Ok(out)
    }

    /// Appends the records of `ino`: the new directories above it and its
    /// own name when it is new, its inode, its changed map ranges. Returns
    /// false when a range holds too many extents for one record.
    fn file_records(&mut self, ino: InodeNo, out: &mut Vec<FsyncRecord>) -> Result<bool> {
        // New ancestors whose birth no record carries yet, nearest first.
        let mut chain = Vec::new();
        let mut at = ino;
        while let Some(Some(b)) = self.intents.birth(at) {
            if self.intents.birth_is_logged(at) {
                break;
            }
            chain.push((at, b.clone()));
            at = b.dir;
        }
        for (i, (new, birth)) in chain.iter().enumerate().rev() {
            let (flags, img) = image(self.log.inode(*new)?);
            out.push(FsyncRecord::Inode { flags: flags | FSYNC_NEW, record: img });
            if *new == ino && !self.ranges_records(ino, out)? {
                return Ok(false);
            }
            // The fault leaves out the names of the new directories above.
            if i == 0 || !faults::active(Fault::FsyncOmitsParent) {
                out.push(FsyncRecord::Link {
                    dir: birth.dir,
                    ino: *new,
                    kind: birth.kind,
                    name: birth.name.as_bytes().to_vec(),
                });
            }
            self.intents.birth_logged(*new);
        }
        if chain.first().is_none_or(|(first, _)| *first != ino) {
            let (flags, img) = image(self.log.inode(ino)?);
            out.push(FsyncRecord::Inode { flags, record: img });
            if !self.ranges_records(ino, out)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The range records of `ino`: for each changed range, its map now
    /// (none when its inode carries its bytes, which replace any map).
    fn ranges_records(&mut self, ino: InodeNo, out: &mut Vec<FsyncRecord>) -> Result<bool> {
        if image(self.log.inode(ino)?).0 & FSYNC_MAPPED == 0 {
            return Ok(true);
        }
        let ranges = self.intents.ranges(ino).to_vec();
        for (first, end) in ranges {
            let extents: Vec<Extent> = self
                .extents_around(ino, first, end)?
                .iter()
                .filter_map(|e| {
                    let s = e.logical.max(first);
                    let t = e.logical_end().min(end);
                    (s < t).then(|| Extent {
                        logical: s,
                        physical: DataBlock(e.physical.0 + (s - e.logical)),
                        len: (t - s) as u32,
                        unwritten: e.unwritten,
                    })
                })
                .collect();
            if extents.len() > MAX_RANGE_EXTENTS {
                return Ok(false);
            }
            out.push(FsyncRecord::Range { ino, first, end, extents });
        }
        Ok(true)
    }
}
