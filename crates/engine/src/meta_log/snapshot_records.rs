//! What each snapshot's record carries so that a mount costs what the
//! snapshots keep, not the size of the devices (DESIGN.md, "A snapshot
//! costs what it keeps"): the segments its image pins, read from its
//! block instead of walking the image; and the held set read a bitmap
//! block at a time from the images' bitmaps, with the count of free
//! blocks it holds carried in the list.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use super::Log;
use super::ifile_load::IFileBlocks;
use super::snapshot::{Pending, SnapshotInfo};
use crate::data_space::HeldSource;
use crate::error::{Error, Result};
use crate::faults::{self, Fault};
use crate::format::checkpoint::Checkpoint;
use crate::format::ifile::{INDEX_PER_BLOCK, TableId};
use crate::format::snapshot::{self, Pins, SnapshotRecord};
use crate::format::superblock::INCOMPAT_SNAPSHOT_RECORDS;
use crate::table::{Fresh, Table, TableSource};
use crate::types::{MetaBlock, SegmentNo};

/// The bitmaps of the images the snapshots and kept trees keep, each
/// read a block at a time through its own index: what the live volume
/// must not hand out ([`HeldSource`]).
#[derive(Debug)]
struct ImageBitmaps {
    source: IFileBlocks,
    /// One per image: only the index chunks read so far are in memory.
    images: Vec<Mutex<Table<u64>>>,
}

impl HeldSource for ImageBitmaps {
    fn held_block(&self, b: u32, words: usize) -> Result<Vec<u64>> {
        let mut out = vec![0u64; words];
        for image in &self.images {
            let mut t = image.lock().unwrap_or_else(PoisonError::into_inner);
            t.load_chunk(b / INDEX_PER_BLOCK as u32, &self.source)?;
            let at = t.address(b);
            if at.0 == 0 {
                // Never written in that image: every block of it free.
                continue;
            }
            let payload = self.source.read_block(TableId::Bitmap, b, at)?;
            let have = t.decode_detached(b, &payload).map_err(|e| Error::corrupt_meta("data bitmap", at.0, e.0))?;
            for (o, w) in out.iter_mut().zip(have.iter()) {
                *o |= w;
            }
        }
        Ok(out)
    }
}

impl Log {
    /// Whether snapshot records carry pins and the held count
    /// (`INCOMPAT_SNAPSHOT_RECORDS`).
    pub(super) fn snapshot_records_on(&self) -> bool {
        self.sb.incompat & INCOMPAT_SNAPSHOT_RECORDS != 0
    }

    /// Image `c`'s data bitmap, its index chunks named but not read.
    fn image_bitmap(&self, c: &Checkpoint) -> Result<Table<u64>> {
        let total = self.sb.data_blocks;
        let sparse = self.sb.sparse_ifile();
        let mut t =
            Table::<u64>::for_load(TableId::Bitmap, total.div_ceil(64) as usize, Fresh::Bitmap { total }, sparse);
        let mut named = 0;
        for r in c.index.iter().filter(|r| r.table == TableId::Bitmap) {
            let chunk = r.first / INDEX_PER_BLOCK as u32;
            if r.first % INDEX_PER_BLOCK as u32 != 0 || chunk as usize >= t.chunk_count() {
                return Err(Error::corrupt_meta("snapshot block", r.address.0, "names a bitmap index block beyond it"));
            }
            t.set_index_address(chunk, r.address);
            named += 1;
        }
        if !sparse && named != t.chunk_count() {
            return Err(Error::corrupt_meta("snapshot block", 0, "its image's bitmap misses index blocks"));
        }
        Ok(t)
    }

    /// The kept trees as a mount finds them through their records: what
    /// each pins from its record (its own block's segment added), its
    /// bitmap left on disk. `None` if the record carries no pins.
    pub(super) fn info_from_record(&self, rec: &SnapshotRecord, address: MetaBlock) -> Result<Option<SnapshotInfo>> {
        let Some(pins) = &rec.pins else { return Ok(None) };
        let geometry = self.ifile.geometry();
        if let Some(s) = pins.segments.iter().find(|s| s.0 >= geometry.count) {
            return Err(Error::corrupt_meta(
                "snapshot block",
                address.0,
                format!("pins segment {}, past the log's {}", s.0, geometry.count),
            ));
        }
        let mut segments: BTreeSet<SegmentNo> = pins.segments.iter().copied().collect();
        segments.extend(geometry.segment_of(address));
        Ok(Some(SnapshotInfo {
            id: rec.id,
            name: rec.name.clone(),
            created: rec.created,
            address,
            checkpoint: rec.checkpoint.clone(),
            segments,
            meta_blocks: pins.meta_blocks,
            bitmap: Vec::new(),
            writable: rec.writable,
            lazy: true,
            damaged: false,
            recorded: true,
        }))
    }

    /// Holds what the kept trees' images hold, read a bitmap block at a
    /// time, `held_free` of them free in the live bitmap (the list's
    /// count), and reads the usage entries of the segments they pin (the
    /// count of free segments looks at them).
    ///
    /// # Errors
    /// An image's checkpoint names its bitmap wrongly, or a usage block
    /// cannot be read.
    pub(super) fn hold_snapshots_lazily(&mut self, held_free: u64) -> Result<()> {
        let images = self
            .snaps
            .all
            .iter()
            .map(|s| self.image_bitmap(&s.checkpoint).map(Mutex::new))
            .collect::<Result<Vec<_>>>()?;
        let source = ImageBitmaps { source: self.table_source(), images };
        self.space.hold_lazily(Arc::new(source), held_free);
        let pinned: Vec<SegmentNo> = self.snaps.pins.keys().copied().collect();
        for s in pinned {
            self.ensure_usage(s)?;
        }
        Ok(())
    }

    /// Reads every kept tree's bitmap whole, as a mount of an older
    /// volume does: what a change of the list, and counting each one's
    /// space, work on. An image that does not load is kept as damaged
    /// (holding nothing more than it was read to hold: its record stays
    /// for fsck to name and the user to delete).
    ///
    /// # Errors
    /// The live bitmap cannot be read whole.
    pub fn load_snapshot_bitmaps(&mut self) -> Result<()> {
        if !self.snaps.all.iter().any(|s| s.lazy) {
            return Ok(());
        }
        self.space.load_all()?;
        for i in 0..self.snaps.all.len() {
            if !self.snaps.all[i].lazy {
                continue;
            }
            let c = self.snaps.all[i].checkpoint.clone();
            // Its inode map stays on disk: only the bitmap is wanted.
            match self.open_image_with(&c, Some(0)) {
                Ok(image) => self.snaps.all[i].bitmap = image.space.bitmap_words(),
                Err(e) => {
                    log::error!("snapshot {} is damaged: its image does not load: {e}", self.snaps.all[i].name);
                    self.snaps.all[i].damaged = true;
                }
            }
            self.snaps.all[i].lazy = false;
        }
        self.repin_snapshots();
        Ok(())
    }

    /// Data blocks free in the live bitmap that the trees listed after
    /// the pending change hold: what the list written now carries. Kept
    /// as the blocks change while no change of the list is pending and no
    /// deleted tree is retiring; else counted over their bitmaps (read
    /// whole for any change of the list).
    pub(super) fn held_free_for_list(&self) -> u64 {
        let listed: Vec<&SnapshotInfo> = match &self.snaps.pending {
            None if self.snaps.retiring.is_empty() && !self.space.past_limit(u64::MAX - 1) => {
                return self.space.held_only();
            }
            None => self.snaps.all.iter().collect(),
            Some(Pending::Create(info)) => self.snaps.all.iter().chain(std::iter::once(&**info)).collect(),
            Some(Pending::Delete(id)) => self.snaps.all.iter().filter(|s| s.id != *id).collect(),
            Some(Pending::Switch { keep, live, .. }) => {
                self.snaps.all.iter().filter(|s| s.id != *live).chain(std::iter::once(&**keep)).collect()
            }
        };
        let words = self.space.bitmap.len();
        let mut n = 0u64;
        for w in 0..words {
            let held = listed.iter().fold(0u64, |h, s| h | s.bitmap.get(w).copied().unwrap_or(0));
            if held != 0 {
                n += u64::from((held & !self.space.bitmap.get(w)).count_ones());
            }
        }
        n
    }

    /// Kept trees whose blocks lack what this format records: an older
    /// volume's, rewritten with the first list its upgrade writes (a
    /// damaged one keeps its block, and is walked at each mount).
    pub(super) fn records_to_rewrite(&self) -> Vec<usize> {
        if !self.snapshot_records_on() || self.snaps.list_held.is_some() {
            return Vec::new();
        }
        let gone = match &self.snaps.pending {
            Some(Pending::Delete(id)) => Some(*id),
            Some(Pending::Switch { live, .. }) => Some(*live),
            _ => None,
        };
        (0..self.snaps.all.len())
            .filter(|&i| {
                let s = &self.snaps.all[i];
                !s.recorded && !s.damaged && !s.lazy && Some(s.id) != gone
            })
            .collect()
    }

    /// Whether the checkpoint being written rewrites the list with no
    /// change of it pending: the count of held free blocks moved since the
    /// durable list, or records wait to be rewritten.
    pub(super) fn list_refresh_due(&self) -> bool {
        if !self.snapshot_records_on() || self.snaps.pending.is_some() || self.snaps.list.is_none() {
            return false;
        }
        let room = self.snaps.live_name.is_none() || self.snaps.all.len() <= snapshot::MAX_SNAPSHOTS_NAMED;
        if !room {
            return false;
        }
        if !self.records_to_rewrite().is_empty() {
            return true;
        }
        if faults::active(Fault::HeldCountStale) && self.snaps.list_held.is_some() {
            // The broken rule: a count that moved without the list
            // changing is not written.
            return false;
        }
        self.snaps.list_held != Some(self.held_free_for_list())
    }

    /// What a record written now says the image pins.
    pub(super) fn pins_of(&self, info: &SnapshotInfo) -> Option<Pins> {
        (self.snapshot_records_on() && !info.damaged)
            .then(|| Pins { meta_blocks: info.meta_blocks, segments: info.segments.iter().copied().collect() })
    }

    /// What a full walk of each kept tree's image says against what its
    /// record carries, and the held count against the bitmaps (fsck, on a
    /// volume loaded whole): the problems found when it was loaded.
    #[must_use]
    pub fn snapshot_record_problems(&self) -> &[String] {
        &self.snaps.record_problems
    }

    /// Checks a record's pins against what its image reaches, walked.
    pub(super) fn check_record(&self, rec: &SnapshotRecord, walked: &SnapshotInfo) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(pins) = &rec.pins else { return problems };
        let recorded: BTreeSet<SegmentNo> = pins.segments.iter().copied().collect();
        let own = self.ifile.geometry().segment_of(walked.address);
        let missing: Vec<u32> =
            walked.segments.iter().filter(|s| !recorded.contains(s) && Some(**s) != own).map(|s| s.0).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "snapshot {}: its image reaches segments {missing:?}, which its record does not pin",
                rec.name
            ));
        }
        if pins.meta_blocks != walked.meta_blocks {
            problems.push(format!(
                "snapshot {}: its record says its image reaches {} meta-data blocks, a walk {}",
                rec.name, pins.meta_blocks, walked.meta_blocks
            ));
        }
        problems
    }

    /// The list's held count at odds with the bitmaps, loaded whole
    /// (fsck; an image found damaged explains it, and is named instead).
    #[must_use]
    pub fn snapshot_held_count_problem(&self) -> Option<&str> {
        self.snaps.held_problem.as_deref()
    }

    /// Checks the list's held count against the bitmaps, loaded whole.
    pub(super) fn check_held_count(&mut self, said: Option<u64>) {
        if let Some(said) = said
            && said != self.space.held_only()
        {
            self.snaps.held_problem = Some(format!(
                "the snapshot list says {said} free data blocks are held, the bitmaps {}",
                self.space.held_only()
            ));
        }
    }
}
