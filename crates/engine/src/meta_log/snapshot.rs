//! Snapshots in the log: a snapshot is a checkpoint kept (DESIGN.md,
//! "Snapshots"). What its IFile reaches (its table and index blocks, every
//! inode block its inode map names, every node its node map names) stays
//! where it is: the segments holding any of it are pinned, never cleaned
//! nor reused; and its data bitmap joins what the allocator treats as held.
//!
//! The snapshot list is named by the checkpoint, so that making or
//! deleting a snapshot takes effect with one slot write: atomic.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::Log;
use super::seal::Body;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::faults::{self, Fault};
use crate::format::block::BlockKind;
use crate::format::checkpoint::{Checkpoint, index_entries};
use crate::format::descriptor::Summary;
use crate::format::snapshot::{self, ListEntry, SnapshotList, SnapshotRecord};
use crate::types::{InodeNo, MetaBlock, SegmentNo, Timestamp};

/// One snapshot the volume holds.
#[derive(Debug, Clone)]
pub struct SnapshotInfo {
    /// Its id: never reused on this volume.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// When it was made.
    pub created: Timestamp,
    /// Its snapshot block (0 until the checkpoint that makes it is sealed).
    pub address: MetaBlock,
    /// The checkpoint it keeps.
    pub checkpoint: Checkpoint,
    /// Segments holding a block its image reaches.
    pub segments: BTreeSet<SegmentNo>,
    /// Meta-data blocks its image reaches.
    pub meta_blocks: u64,
    /// Its data bitmap.
    pub bitmap: Vec<u64>,
    /// A writable tree kept while another is live (a clone, or the tree
    /// that was live before a clone was mounted), not a snapshot.
    pub writable: bool,
    /// Its bitmap is on disk, read a block at a time into the held set
    /// (`bitmap` is empty until [`Log::load_snapshot_bitmaps`]).
    pub lazy: bool,
    /// Its image does not load: what it holds is unknown.
    pub damaged: bool,
    /// Its block carries what this format records (pins), or is written
    /// with the next list.
    pub recorded: bool,
}

/// A change of the snapshot list the next checkpoint carries.
#[derive(Debug, Clone)]
pub(crate) enum Pending {
    Create(Box<SnapshotInfo>),
    Delete(u64),
    /// The live tree is kept as `keep`, and tree `live` (named `name`)
    /// becomes the live one, its record dropped.
    Switch {
        keep: Box<SnapshotInfo>,
        live: u64,
        name: String,
    },
}

/// The snapshots of the volume, and what they keep.
#[derive(Debug, Default)]
pub(crate) struct Snapshots {
    /// The list block the durable checkpoint names.
    pub list: Option<MetaBlock>,
    pub next_id: u64,
    pub all: Vec<SnapshotInfo>,
    /// Segments pinned: by how many snapshots (the list block's counts too).
    pub pins: HashMap<SegmentNo, u32>,
    pub pending: Option<Pending>,
    /// The live tree's name, when it is not [`snapshot::DEFAULT_TREE`].
    pub live_name: Option<String>,
    /// Where the checkpoint being sealed put the new list and snapshot block.
    pub staged: Option<(Option<MetaBlock>, Option<MetaBlock>)>,
    /// Bitmaps of deleted snapshots, with the checkpoint that dropped
    /// each: still held, for the checkpoint before that one (a mount's
    /// fallback) lists the snapshot, until a newer checkpoint is durable.
    pub retiring: Vec<(u64, Vec<u64>)>,
    /// Kept writable trees that take turns with the live one: each is
    /// made live again, and moves its own blocks then.
    pub turns: Vec<String>,
    /// The held count the durable list carries (none: an older list).
    pub list_held: Option<u64>,
    /// What the checkpoint being sealed rewrote: records (id, new block)
    /// and the held count its list carries.
    pub staged_records: Option<StagedRecords>,
    /// Records found at odds with a walk of their images (fsck).
    pub record_problems: Vec<String>,
    /// The list's held count at odds with the bitmaps (fsck).
    pub held_problem: Option<String>,
}

/// Records (id, new block) a checkpoint rewrote, and the held count its
/// list carries.
pub(crate) type StagedRecords = (Vec<(u64, MetaBlock)>, Option<u64>);

/// What a snapshot's image reaches in the log.
struct Reach {
    segments: BTreeSet<SegmentNo>,
    blocks: u64,
}

impl Log {
    /// The snapshots, oldest first.
    #[must_use]
    pub fn snapshots(&self) -> &[SnapshotInfo] {
        &self.snaps.all
    }

    /// Replaces the superblock in memory after both copies were rewritten
    /// with new feature bits (the geometry and identity are unchanged).
    pub(crate) fn set_superblock(&mut self, sb: crate::format::superblock::Superblock) {
        debug_assert_eq!(sb.volume_id(), self.volume_id);
        self.sb = sb;
    }

    /// Whether segment `s` holds something a snapshot keeps.
    #[must_use]
    pub fn pinned_by_snapshot(&self, s: SegmentNo) -> bool {
        self.snaps.pins.contains_key(&s)
    }

    /// Names the kept writable trees that take turns with the live one
    /// (served beside it, made live again for their requests): the cleaner
    /// moves the live tree's blocks out of segments only their records pin
    /// ([`Log::pick_victims_moving`]).
    pub fn set_trees_taking_turns(&mut self, names: Vec<String>) {
        self.snaps.turns = names;
    }

    /// Segments pinned by anything but the records of the kept trees
    /// named in `turns` (the list block, snapshots, other kept trees);
    /// none when `turns` is empty or a list change is pending (its record
    /// is not in the list yet: every pin counts then).
    pub(super) fn pins_but(&self, turns: &[String]) -> Option<HashSet<SegmentNo>> {
        if turns.is_empty() || self.snaps.pending.is_some() {
            return None;
        }
        let mut fixed: HashSet<SegmentNo> = self
            .snaps
            .all
            .iter()
            .filter(|s| !(s.writable && turns.contains(&s.name)))
            .flat_map(|s| s.segments.iter().copied())
            .collect();
        fixed.extend(self.snaps.list.and_then(|a| self.ifile.geometry().segment_of(a)));
        Some(fixed)
    }

    /// Segments pinned by snapshots.
    #[must_use]
    pub fn snapshot_segments(&self) -> usize {
        self.snaps.pins.len()
    }

    /// The checkpoint record the last checkpoint wrote or loaded.
    #[must_use]
    pub fn last_checkpoint(&self) -> Option<&Checkpoint> {
        self.last_record.as_ref()
    }

    /// Everything the current IFile reaches in the log.
    ///
    /// # Errors
    /// An inode-map block on disk does not read back.
    fn reach(&self) -> Result<Reach> {
        let geometry = self.ifile.geometry();
        let mut segments = BTreeSet::new();
        let mut blocks = 0u64;
        let mut add = |a: MetaBlock| {
            if let Some(s) = geometry.segment_of(a) {
                segments.insert(s);
                blocks += 1;
            }
        };
        for (_, a) in self.ifile.segments.written_addresses() {
            add(a);
        }
        for (_, a) in self.ifile.inodes.written_addresses() {
            add(a);
        }
        for (_, a) in self.ifile.nodes.written_addresses() {
            add(a);
        }
        for (_, a) in self.space.groups.written_addresses() {
            add(a);
        }
        for (_, a) in self.space.bitmap.written_addresses() {
            add(a);
        }
        for a in self.ckpt.index.values() {
            add(*a);
        }
        // Inode blocks hold several records: each block counts once.
        for a in self.inode_blocks_reached()? {
            add(a);
        }
        for a in self.ifile.nodes.entries() {
            if a != 0 {
                add(MetaBlock(a));
            }
        }
        Ok(Reach { segments, blocks })
    }

    /// Loads the image a snapshot's checkpoint names, as mount loads a
    /// checkpoint (no roll-forward: the snapshot is that checkpoint).
    ///
    /// # Errors
    /// A block of the image is missing or corrupt.
    pub fn open_image(&self, c: &Checkpoint) -> Result<Log> {
        self.open_image_with(c, None)
    }

    /// As [`Log::open_image`], read through `meta` and `data` (handles of
    /// the same devices the caller holds apart from this log's).
    ///
    /// # Errors
    /// As [`Log::open_image`].
    pub fn open_image_on(&self, c: &Checkpoint, meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<Log> {
        let mut image = Log::fresh(self.sb.clone(), meta, data);
        let c = Checkpoint { snapshot_list: None, ..c.clone() };
        image.load_checkpoint_with(&c, false, None, false)?;
        Ok(image)
    }

    /// As [`Log::open_image`], but a large inode map is left on disk (as
    /// a mount leaves it): for counting what the image reaches, which
    /// reads the map's blocks without keeping them.
    pub(super) fn open_image_with(&self, c: &Checkpoint, imap_lazy_from: Option<usize>) -> Result<Log> {
        let mut image = Log::fresh(self.sb.clone(), self.meta.clone(), self.data.clone());
        // Its bitmap whole: it is what the live volume must not hand out. An
        // image never allocates, so the snapshots its checkpoint listed
        // (older ones) are not loaded with it: each would load its own.
        let c = Checkpoint { snapshot_list: None, ..c.clone() };
        image.load_checkpoint_with(&c, false, imap_lazy_from, false)?;
        Ok(image)
    }

    /// What the live tree is called.
    #[must_use]
    pub fn live_tree_name(&self) -> &str {
        self.snaps.live_name.as_deref().unwrap_or(snapshot::DEFAULT_TREE)
    }

    pub(super) fn info_from(
        &self,
        id: u64,
        name: String,
        created: Timestamp,
        address: MetaBlock,
        c: Checkpoint,
    ) -> Result<SnapshotInfo> {
        let reach = self.reach()?;
        let mut segments = reach.segments;
        if let Some(s) = self.ifile.geometry().segment_of(address) {
            segments.insert(s);
        }
        Ok(SnapshotInfo {
            id,
            name,
            created,
            address,
            checkpoint: c,
            segments,
            meta_blocks: reach.blocks + 1,
            bitmap: self.space.bitmap_words(),
            writable: false,
            lazy: false,
            damaged: false,
            recorded: false,
        })
    }

    /// Recounts the pins and the held data blocks from the snapshots (and
    /// the deleted ones still retiring).
    pub(super) fn repin_snapshots(&mut self) {
        self.recount_pins();
        let mut held: Vec<u64> = Vec::new();
        let words = self.space.bitmap.len();
        let bitmaps = self.snaps.all.iter().map(|s| &s.bitmap).chain(self.snaps.retiring.iter().map(|(_, b)| b));
        for bitmap in bitmaps {
            if held.is_empty() && !bitmap.is_empty() {
                held = vec![0; words];
            }
            for (h, b) in held.iter_mut().zip(bitmap) {
                *h |= b;
            }
        }
        self.space.set_held(held);
    }

    /// After checkpoint `self.ckpt.number` became durable: the deleted
    /// snapshots dropped by an older checkpoint are listed by neither
    /// checkpoint a mount may start from, so their blocks are held no
    /// longer (free ones go to the allocator and, with `-o discard`, are
    /// queued for discard).
    pub(crate) fn retire_deleted(&mut self) {
        let number = self.ckpt.number;
        if !self.snaps.retiring.iter().any(|(dropped, _)| *dropped < number) {
            return;
        }
        let (gone, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.snaps.retiring).into_iter().partition(|(dropped, _)| *dropped < number);
        self.snaps.retiring = kept;
        self.repin_snapshots();
        for (_, bitmap) in gone {
            self.space.let_go(&bitmap);
        }
    }

    /// Whether blocks of a deleted snapshot wait for a checkpoint to be
    /// let go.
    #[must_use]
    pub fn deleted_snapshots_retiring(&self) -> bool {
        !self.snaps.retiring.is_empty()
    }

    /// Recounts the pins from the snapshots and the list block.
    pub(super) fn recount_pins(&mut self) {
        let mut pins: HashMap<SegmentNo, u32> = HashMap::new();
        for s in &self.snaps.all {
            for seg in &s.segments {
                *pins.entry(*seg).or_default() += 1;
            }
        }
        if let Some(seg) = self.snaps.list.and_then(|a| self.ifile.geometry().segment_of(a)) {
            *pins.entry(seg).or_default() += 1;
        }
        self.snaps.pins = pins;
    }

    /// Why a snapshot named `name` cannot be made now, if it cannot.
    #[must_use]
    pub fn snapshot_refusal(&self, name: &str) -> Option<String> {
        if let Some(why) = snapshot::bad_name(name) {
            return Some(why.to_string());
        }
        if self.snaps.all.iter().any(|s| s.name == name) {
            return Some(format!("a snapshot or tree named {name} exists already"));
        }
        if self.live_tree_name() == name {
            return Some(format!("the live tree is named {name}"));
        }
        if self.sb.incompat & crate::format::superblock::INCOMPAT_RESIZED != 0 {
            // A snapshot record does not carry the geometry it was taken
            // at, which a resized volume's images need.
            return Some("the volume was resized, and snapshots of a resized volume are not supported yet".into());
        }
        let max = if self.snaps.live_name.is_some() { snapshot::MAX_SNAPSHOTS_NAMED } else { snapshot::MAX_SNAPSHOTS };
        if self.snaps.all.len() >= max {
            return Some(format!("the volume holds {max} snapshots and trees, the most it can"));
        }
        None
    }

    /// Takes the checkpoint just written as snapshot `name`: what it
    /// reaches is pinned and its data held from now on (before the
    /// checkpoint that records the snapshot: holding more than needed is
    /// always safe), and the next checkpoint records it.
    ///
    /// # Errors
    /// No checkpoint was written, or its IFile is too large for a snapshot.
    pub fn stage_snapshot(&mut self, name: &str, now: Timestamp) -> Result<()> {
        if let Some(why) = self.snapshot_refusal(name) {
            return Err(Error::SnapshotRefused(why));
        }
        // (A snapshot record keeps no tail: its image is read whole.)
        let Some(c) = self.last_record.clone().map(|c| Checkpoint { sparse: None, ..c }) else {
            return Err(Error::SnapshotRefused("no checkpoint was written to keep".into()));
        };
        // The snapshot keeps a copy of the live bitmap, all of it, and
        // counts the inode blocks the whole inode map reaches (read, not
        // kept: `inode_blocks_reached`) and every IFile block. The others'
        // bitmaps are read whole too: a change of the list recounts them.
        self.load_snapshot_bitmaps()?;
        self.space.load_all()?;
        self.load_ifile_index()?;
        self.load_segment_usage()?;
        let entries = index_entries(&c.index, self.sb.index_runs()).len();
        if entries > snapshot::MAX_SNAPSHOT_INDEX {
            return Err(Error::SnapshotRefused(format!(
                "the IFile's index takes {entries} entries, more than a snapshot can hold ({})",
                snapshot::MAX_SNAPSHOT_INDEX
            )));
        }
        let id = self.snaps.next_id.max(1);
        let info = self.info_from(id, name.to_string(), now, MetaBlock(0), c)?;
        for seg in &info.segments {
            *self.snaps.pins.entry(*seg).or_default() += 1;
        }
        self.space.add_held(&info.bitmap);
        self.snaps.pending = Some(Pending::Create(Box::new(info)));
        Ok(())
    }

    /// Drops snapshot `name` with the next checkpoint.
    ///
    /// # Errors
    /// No such snapshot.
    pub fn stage_snapshot_delete(&mut self, name: &str) -> Result<u64> {
        // What only it holds is let go by bitmap, and the list's count
        // recounted over the others'.
        self.load_snapshot_bitmaps()?;
        let Some(s) = self.snaps.all.iter().find(|s| s.name == name) else {
            if self.live_tree_name() == name {
                return Err(Error::SnapshotRefused(format!(
                    "{name} is the live tree: mount another tree (-o clone=NAME) before deleting it"
                )));
            }
            return Err(Error::NoSnapshot(name.to_string()));
        };
        let id = s.id;
        self.snaps.pending = Some(Pending::Delete(id));
        Ok(id)
    }

    /// The bodies a checkpoint adds for a pending list change (or a list
    /// rewritten for its held count, [`Log::list_refresh_due`]): the new
    /// snapshot block, the records an upgrade rewrites, then the list
    /// block (whose payloads the fill step writes,
    /// [`Log::fill_snapshot_bodies`]).
    pub(crate) fn snapshot_bodies(&self) -> Vec<Body> {
        let mut bodies = Vec::new();
        let runs = self.sb.index_runs();
        let remaining = match &self.snaps.pending {
            None if self.list_refresh_due() => self.snaps.all.len(),
            None => return bodies,
            Some(Pending::Create(info)) => {
                bodies.push(self.record_body(info, runs));
                self.snaps.all.len() + 1
            }
            Some(Pending::Delete(_)) => self.snaps.all.len() - 1,
            Some(Pending::Switch { keep, .. }) => {
                bodies.push(self.record_body(keep, runs));
                self.snaps.all.len()
            }
        };
        for i in self.records_to_rewrite() {
            bodies.push(self.record_body(&self.snaps.all[i], runs));
        }
        if remaining > 0 || self.pending_live_name().is_some() {
            bodies.push(Body {
                summary: Summary { kind: BlockKind::SnapshotList, owner: InodeNo(0), name: 0 },
                aux: 0,
                payload: Vec::new(),
                inodes: None,
            });
        }
        bodies
    }

    /// Fills the bodies of [`Log::snapshot_bodies`], placed at
    /// `addresses` (those bodies' addresses, in order), and notes where
    /// they went.
    pub(crate) fn fill_snapshot_bodies(&mut self, addresses: &[MetaBlock], bodies: &mut [Body]) {
        let mut entries: Vec<ListEntry> =
            self.snaps.all.iter().map(|s| ListEntry { id: s.id, address: s.address }).collect();
        let mut next_id = self.snaps.next_id.max(1);
        let mut snap_at = None;
        let mut k = 0;
        match &self.snaps.pending {
            None if self.list_refresh_due() => {}
            None => return,
            Some(Pending::Create(info)) => {
                entries.push(ListEntry { id: info.id, address: addresses[0] });
                next_id = info.id + 1;
                snap_at = Some(addresses[0]);
                k = 1;
            }
            Some(Pending::Delete(id)) => entries.retain(|e| e.id != *id),
            Some(Pending::Switch { keep, live, .. }) => {
                entries.retain(|e| e.id != *live);
                entries.push(ListEntry { id: keep.id, address: addresses[0] });
                next_id = keep.id + 1;
                snap_at = Some(addresses[0]);
                k = 1;
            }
        }
        let mut rewritten = Vec::new();
        for i in self.records_to_rewrite() {
            let id = self.snaps.all[i].id;
            if let Some(e) = entries.iter_mut().find(|e| e.id == id) {
                e.address = addresses[k];
            }
            rewritten.push((id, addresses[k]));
            k += 1;
        }
        let live_name = self.pending_live_name();
        let held_free = self.snapshot_records_on().then(|| self.held_free_for_list());
        let list_at = if entries.is_empty() && live_name.is_none() {
            None
        } else {
            let i = addresses.len() - 1;
            bodies[i].payload = SnapshotList { next_id, entries, live_name, held_free }.encode();
            Some(addresses[i])
        };
        self.snaps.next_id = next_id;
        self.snaps.staged = Some((list_at, snap_at));
        // (A list too full for the count does not carry it: `encode`.)
        let carried = list_at.and_then(|a| {
            let i = addresses.iter().position(|x| *x == a)?;
            SnapshotList::decode(&bodies[i].payload).ok()?.held_free
        });
        self.snaps.staged_records = Some((rewritten, carried));
    }

    /// The list block the checkpoint being sealed names.
    pub(crate) fn list_for_checkpoint(&self) -> Option<MetaBlock> {
        match self.snaps.staged {
            Some((list, _)) => list,
            None => self.snaps.list,
        }
    }

    /// The checkpoint that carried a list change is durable: the change
    /// takes effect (a deleted snapshot's segments and blocks are let go).
    pub(crate) fn complete_snapshots(&mut self) {
        let Some((list, snap_at)) = self.snaps.staged.take() else { return };
        let (rewritten, held) = self.snaps.staged_records.take().unwrap_or_default();
        let records = self.snapshot_records_on();
        let geometry = self.ifile.geometry();
        for (id, a) in rewritten {
            if let Some(s) = self.snaps.all.iter_mut().find(|s| s.id == id) {
                s.address = a;
                s.recorded = true;
                s.segments.extend(geometry.segment_of(a));
            }
        }
        self.snaps.list_held = held;
        match self.snaps.pending.take() {
            Some(Pending::Create(mut info)) => {
                info.recorded = records;
                if let Some(a) = snap_at {
                    info.address = a;
                    if let Some(s) = self.ifile.geometry().segment_of(a) {
                        info.segments.insert(s);
                    }
                }
                self.snaps.all.push(*info);
                self.snaps.list = list;
                // Its blocks were added to the held set when it was staged:
                // only the pins move (its block, the new list's).
                self.recount_pins();
            }
            Some(Pending::Delete(id)) => {
                let deleted = self.snaps.all.iter().position(|s| s.id == id).map(|i| self.snaps.all.remove(i));
                self.snaps.list = list;
                // What only it held stays held until a checkpoint after
                // this one is durable: the one before still lists it
                // ([`Log::retire_deleted`]).
                let bitmap = deleted.map(|s| s.bitmap).filter(|b| !b.is_empty());
                let early = faults::active(Fault::DiscardDeletedEarly);
                if let Some(b) = &bitmap
                    && !early
                {
                    self.snaps.retiring.push((self.ckpt.number, b.clone()));
                }
                self.repin_snapshots();
                if let Some(b) = bitmap.filter(|_| early) {
                    self.space.let_go(&b);
                }
            }
            Some(Pending::Switch { mut keep, live, name }) => {
                keep.recorded = records;
                if let Some(a) = snap_at {
                    keep.address = a;
                    if let Some(s) = self.ifile.geometry().segment_of(a) {
                        keep.segments.insert(s);
                    }
                }
                // The new live tree's blocks are the live volume's now, no
                // longer held nor pinned for its record.
                self.snaps.all.retain(|s| s.id != live);
                self.snaps.all.push(*keep);
                self.snaps.live_name = (name != snapshot::DEFAULT_TREE).then_some(name);
                self.snaps.list = list;
                self.repin_snapshots();
            }
            None => {
                self.snaps.list = list;
                self.recount_pins();
            }
        }
    }

    /// Space of every snapshot, in list order: data blocks only it holds
    /// (neither the live volume nor another snapshot maps them), data
    /// blocks it shares, and the same for meta-data segments. Two passes
    /// over the bitmaps for all of them, O(snapshots × bitmap words): the
    /// first finds the blocks two or more snapshots hold (bit-sliced
    /// counting), the second counts each snapshot's blocks held elsewhere
    /// (by the live volume or by two snapshots, itself one of them).
    #[must_use]
    pub fn snapshot_spaces(&self) -> Vec<SnapshotSpace> {
        let all = &self.snaps.all;
        if all.is_empty() {
            // The bitmap may be loaded lazily then (it is whole with snapshots).
            return Vec::new();
        }
        let words = all.iter().map(|s| s.bitmap.len()).max().unwrap_or(0);
        let (mut once, mut twice) = (vec![0u64; words], vec![0u64; words]);
        for s in all {
            for ((o, t), &b) in once.iter_mut().zip(twice.iter_mut()).zip(&s.bitmap) {
                *t |= *o & b;
                *o |= b;
            }
        }
        let live: Vec<u64> = self.space.bitmap.entries().collect();
        let mut out: Vec<SnapshotSpace> = all
            .iter()
            .map(|s| {
                let (mut only, mut shared) = (0u64, 0u64);
                for (w, (&mine, &t)) in s.bitmap.iter().zip(&twice).enumerate() {
                    let elsewhere = live.get(w).copied().unwrap_or(0) | t;
                    only += u64::from((mine & !elsewhere).count_ones());
                    shared += u64::from((mine & elsewhere).count_ones());
                }
                SnapshotSpace { data_only: only, data_shared: shared, meta_segments_only: 0 }
            })
            .collect();
        // Block 0 (the superblock copy) and the bits past the device's end
        // are set in every bitmap and belong to nobody.
        let total = self.space.total_blocks();
        for (me, space) in all.iter().zip(&mut out) {
            if me.bitmap.is_empty() {
                *space = SnapshotSpace::default();
                continue;
            }
            space.data_shared = space.data_shared.saturating_sub(1 + (64 - total % 64) % 64);
            space.meta_segments_only = me
                .segments
                .iter()
                .filter(|s| self.snaps.pins.get(s).copied() == Some(1) && self.segment_dead_but_pinned(**s))
                .count() as u64;
        }
        out
    }

    /// The snapshot block holding `info`'s record, with what its image
    /// pins where the format records it; `runs`: the volume has
    /// `INDEX_RUNS`.
    fn record_body(&self, info: &SnapshotInfo, runs: bool) -> Body {
        let rec = SnapshotRecord {
            id: info.id,
            created: info.created,
            name: info.name.clone(),
            checkpoint: info.checkpoint.clone(),
            writable: info.writable,
            pins: self.pins_of(info),
        };
        Body {
            summary: Summary { kind: BlockKind::Snapshot, owner: InodeNo(0), name: info.id },
            aux: 0,
            payload: rec.encode(runs),
            inodes: None,
        }
    }

    /// A segment the live volume does not need, kept by snapshots alone.
    fn segment_dead_but_pinned(&self, s: SegmentNo) -> bool {
        self.ifile.segment(s).live_bytes == 0 && !self.ckpt.pins.contains_key(&s)
    }
}

/// What one snapshot holds (counted in blocks and segments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotSpace {
    /// Data blocks no other tree maps: freed when it is deleted.
    pub data_only: u64,
    /// Data blocks the live volume or another snapshot maps too.
    pub data_shared: u64,
    /// Meta-data segments kept for it alone.
    pub meta_segments_only: u64,
}
