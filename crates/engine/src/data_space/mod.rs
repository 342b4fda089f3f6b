//! The data-device allocator: groups, the bitmap, reservations for delayed
//! allocation, and deferred frees.
//!
//! Ordering rule 2 lives here: a freed extent stays marked in the bitmap until
//! the partial segment that freed it is durable ([`DataSpace::release`]), so a
//! crash can never leave a file pointing at blocks that another file has
//! meanwhile overwritten.

mod discard;
mod held;
mod lazy;
mod shrink;

pub use discard::Discard;
pub use held::HeldSource;

use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::ifile::{GroupDesc, TableId};
use crate::table::{Fresh, Table, TableAccess, TableSource};
use crate::types::{DataBlock, GroupNo, Seq};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The tag of a free whose commit group is not sealed yet.
const UNSEALED: Seq = Seq(u64::MAX);

/// Longest extent handed out at once.
pub const MAX_EXTENT_BLOCKS: u32 = 32768;

/// The data device's free space.
#[derive(Debug, Clone)]
pub struct DataSpace {
    total: u64,
    group_blocks: u32,
    /// Free blocks and directory count per group.
    pub groups: Table<GroupDesc>,
    /// One bit per data block; set = in use (or freed but not yet durable).
    pub bitmap: Table<u64>,
    free: u64,
    reserved: u64,
    pending: Vec<(Seq, DataBlock, u32)>,
    /// The pending ranges by start (end), to refuse a second free of one.
    pending_ranges: std::collections::BTreeMap<u64, u64>,
    pending_blocks: u64,
    /// Where the last allocation in a group ended, per group allocated in.
    cursor: BTreeMap<u32, u64>,
    /// Blocks some snapshot holds: the OR of every snapshot's bitmap, one
    /// bit per block as in `bitmap`; empty when the volume has none. Never
    /// handed out, whatever the live bitmap says (DESIGN.md, snapshots).
    held: Vec<u64>,
    /// The same, read a bitmap block at a time (a mount); `held` is
    /// empty meanwhile.
    held_lazy: Option<held::LazyHeld>,
    /// Blocks free in the live bitmap but held by a snapshot or past
    /// `limit`: never handed out.
    held_only: u64,
    /// A shrink under way: no block at or past this one is handed out, and
    /// write-back moves what is written there ([`DataSpace::is_held`]).
    /// `u64::MAX` when no shrink is.
    limit: u64,
    /// Where group descriptor and bitmap blocks not at hand are read from
    /// (a mount loads them lazily, a group at a time); `None` when all of
    /// them are.
    source: Option<Arc<dyn TableSource>>,
    /// Groups whose bitmap blocks are at hand and whose free count was
    /// checked against them, one bit each, while the bitmap is loaded
    /// lazily (`source`); grown as groups are read.
    ready: Vec<u64>,
    /// Groups not ready yet, while loading lazily.
    unready: u64,
    /// Where the sweep giving back bitmap blocks goes on from.
    bitmap_hand: usize,
    /// Blocks on their way to being discarded.
    discards: discard::Discards,
}

impl DataSpace {
    /// A fresh data device of `total` blocks in groups of `group_blocks`;
    /// block 0 (the superblock copy) is in use. `sparse`: blocks never
    /// written need not be (`SPARSE_IFILE`): a fresh volume's bitmap and
    /// group table then cost neither memory nor writes but where they
    /// differ from fresh (block 0).
    #[must_use]
    pub fn new(total: u64, group_blocks: u32, sparse: bool) -> DataSpace {
        let groups = total.div_ceil(u64::from(group_blocks)) as usize;
        let mut s = DataSpace {
            total,
            group_blocks,
            groups: Table::new(TableId::GroupDesc, groups, Fresh::Groups { total, group_blocks }, sparse),
            bitmap: Table::new(TableId::Bitmap, total.div_ceil(64) as usize, Fresh::Bitmap { total }, sparse),
            free: total,
            reserved: 0,
            pending: Vec::new(),
            pending_ranges: std::collections::BTreeMap::new(),
            pending_blocks: 0,
            cursor: BTreeMap::new(),
            held: Vec::new(),
            held_lazy: None,
            held_only: 0,
            limit: u64::MAX,
            source: None,
            ready: Vec::new(),
            unready: 0,
            bitmap_hand: 0,
            discards: discard::Discards::default(),
        };
        // Fresh entries are free blocks (bits past the device's end in use)
        // and wholly free groups: only block 0 differs.
        s.set_bits(0, 1, true);
        s.free -= 1;
        s
    }

    /// An empty space of `total` blocks for a checkpoint to be loaded into.
    #[must_use]
    pub fn for_load(total: u64, group_blocks: u32, sparse: bool) -> DataSpace {
        let mut s = DataSpace::new(total, group_blocks, sparse);
        let groups = total.div_ceil(u64::from(group_blocks)) as usize;
        s.groups = Table::for_load(TableId::GroupDesc, groups, Fresh::Groups { total, group_blocks }, sparse);
        s.bitmap = Table::for_load(TableId::Bitmap, total.div_ceil(64) as usize, Fresh::Bitmap { total }, sparse);
        s.free = 0;
        s
    }

    /// Adds the blocks `[total, new_total)` as free (a grow of the data
    /// device): new groups, and the old last group filled up to its size.
    /// The bitmap is loaded whole first (a grow is rare; the recount after
    /// it reads every group), and new groups count as loaded.
    ///
    /// # Errors
    /// A group's bitmap cannot be loaded.
    pub fn grow(&mut self, new_total: u64) -> Result<()> {
        assert!(new_total >= self.total, "growing {} data blocks to {new_total}", self.total);
        self.load_all()?;
        self.hold_whole()?;
        self.settle();
        let old = self.total;
        // The bits past the old end were "in use" as beyond the device.
        let tail = old % 64;
        if tail != 0 {
            let last = self.bitmap.len() - 1;
            self.bitmap.update(last, |w| *w &= !(!0u64 << tail));
        }
        self.total = new_total;
        self.bitmap.set_fresh(Fresh::Bitmap { total: new_total });
        self.groups.set_fresh(Fresh::Groups { total: new_total, group_blocks: self.group_blocks });
        self.bitmap.grow(new_total.div_ceil(64) as usize);
        let tail = new_total % 64;
        if tail != 0 {
            let last = self.bitmap.len() - 1;
            self.bitmap.update(last, |w| *w |= !0u64 << tail);
        }
        if !self.held.is_empty() {
            // Snapshots hold nothing of the new blocks.
            self.held.resize(self.bitmap.len(), 0);
        }
        let groups = new_total.div_ceil(u64::from(self.group_blocks)) as usize;
        self.groups.grow(groups);
        // The old last group may have grown too: recounting rewrites it.
        self.recount();
        Ok(())
    }

    /// Recomputes free counts from the bitmap (after loading it whole).
    ///
    /// # Panics
    /// Part of the bitmap is not loaded ([`DataSpace::load_all`] first).
    /// Returns the groups whose count said otherwise: (group, said, true).
    pub fn recount(&mut self) -> Vec<(GroupNo, u32, u32)> {
        let mut free = 0;
        let mut wrong = Vec::new();
        for g in 0..self.groups.len() {
            let (start, end) = self.group_range(GroupNo(g as u32));
            let n = self.count_free(start, end);
            free += n;
            let said = self.groups.get(g).free_blocks;
            if said != n as u32 {
                wrong.push((GroupNo(g as u32), said, n as u32));
                self.groups.update(g, |d| d.free_blocks = n as u32);
            }
        }
        self.free = free;
        wrong
    }

    /// Sets the bitmap to exactly block 0 and the ranges given (repair:
    /// what the files map), recounting the groups. Returns how many blocks
    /// were marked free while in use, and in use while free.
    pub fn rebuild_bitmap(&mut self, used: &[(DataBlock, u32)]) -> (u64, u64) {
        let words = self.bitmap.len();
        let mut want = vec![0u64; words];
        let mut set = |b: u64| want[(b / 64) as usize] |= 1 << (b % 64);
        set(0);
        for &(start, len) in used {
            let end = start.0.saturating_add(u64::from(len)).min(self.total);
            for b in start.0..end {
                set(b);
            }
        }
        let tail = self.total % 64;
        if tail != 0 {
            want[words - 1] |= !0u64 << tail;
        }
        let (mut were_free, mut were_used) = (0u64, 0u64);
        for (i, w) in want.into_iter().enumerate() {
            let have = self.bitmap.get(i);
            if have != w {
                were_free += u64::from((w & !have).count_ones());
                were_used += u64::from((have & !w).count_ones());
                self.bitmap.set(i, w);
            }
        }
        self.recount();
        (were_free, were_used)
    }

    /// Both tables, for the checkpoint writer and loader.
    pub fn tables_mut(&mut self) -> [&mut dyn TableAccess; 2] {
        [&mut self.groups, &mut self.bitmap]
    }

    /// Blocks on the device.
    #[must_use]
    pub fn total_blocks(&self) -> u64 {
        self.total
    }

    /// Blocks per group.
    #[must_use]
    pub fn group_blocks(&self) -> u32 {
        self.group_blocks
    }

    /// Blocks neither in use nor reserved nor waiting for a durable free.
    ///
    /// # Panics
    /// More blocks reserved than free: reservations are taken only from
    /// what is available, so that would be a bug.
    #[must_use]
    pub fn available(&self) -> u64 {
        let busy = self.busy_blocks();
        assert!(
            self.reserved + self.held_only + busy <= self.free,
            "{} blocks reserved, {} held by snapshots and {busy} being discarded, {} free",
            self.reserved,
            self.held_only,
            self.free
        );
        self.free - self.held_only - self.reserved - busy
    }

    /// Sets what snapshots hold (the OR of their bitmaps; empty: nothing)
    /// and recounts what they alone keep from being free.
    ///
    /// # Panics
    /// A bitmap of another size than the live one: a bug.
    pub fn set_held(&mut self, held: Vec<u64>) {
        assert!(held.is_empty() || held.len() == self.bitmap.len(), "held bitmap of {} words", held.len());
        assert!(held.is_empty() || self.fully_loaded(), "snapshots held against a bitmap not all read");
        self.held = held;
        self.held_lazy = None;
        self.held_only = self.count_held_only();
        // Blocks a deleted snapshot held may be free now: the next trim
        // looks at every group again.
        self.forget_trimmed();
    }

    /// Makes another tree's bitmap and group descriptors this space's
    /// (mounting a writable tree): the next checkpoint writes the blocks
    /// that differ from the outgoing tree's.
    /// What snapshots and kept trees hold stays held.
    ///
    /// # Panics
    /// Either bitmap is not all in memory, frees or reservations are still
    /// pending (the caller checkpointed first), or the sizes differ.
    pub fn adopt_tree(&mut self, other: DataSpace) {
        assert!(self.fully_loaded() && other.fully_loaded(), "adopting a tree with a bitmap not all read");
        self.settle();
        assert!(self.pending.is_empty() && self.reserved == 0, "adopting a tree with data frees pending");
        assert_eq!(self.total, other.total, "adopting a tree of another size");
        // Moved, not copied: the incoming image goes with the switch (a
        // bitmap is 64 MiB at 16 TiB).
        self.groups.adopt(other.groups);
        self.bitmap.adopt(other.bitmap);
        self.free = other.free;
        self.cursor = other.cursor;
        assert!(self.held_lazy.is_none(), "adopting a tree while the held set is read lazily");
        let held = std::mem::take(&mut self.held);
        self.set_held(held);
    }

    /// Adds a snapshot's bitmap to what snapshots hold.
    ///
    /// # Panics
    /// The held set is read lazily: the caller reads every snapshot's
    /// bitmap first.
    pub fn add_held(&mut self, bitmap: &[u64]) {
        assert!(self.held_lazy.is_none(), "a snapshot added to a held set read lazily");
        let mut held = std::mem::take(&mut self.held);
        if held.is_empty() {
            held = vec![0; self.bitmap.len()];
        }
        for (h, b) in held.iter_mut().zip(bitmap) {
            *h |= b;
        }
        self.set_held(held);
    }

    /// Whether a snapshot holds block `b`, or it lies past a shrink's new
    /// end: it may be neither overwritten in place nor handed out again.
    #[must_use]
    pub fn is_held(&self, b: u64) -> bool {
        b >= self.limit || self.held_word((b / 64) as usize) >> (b % 64) & 1 != 0
    }

    /// Blocks free in the live bitmap that snapshots alone keep.
    #[must_use]
    pub fn held_only(&self) -> u64 {
        self.held_only
    }

    /// The live bitmap's words (a snapshot keeps a copy).
    #[must_use]
    pub fn bitmap_words(&self) -> Vec<u64> {
        assert!(self.fully_loaded(), "a copy of a bitmap not all read");
        self.bitmap.entries().collect()
    }

    /// Blocks free or about to be (pending frees count: they are freed by a
    /// partial segment already sealed), minus reservations. What `df` shows.
    #[must_use]
    pub fn free_for_statfs(&self) -> u64 {
        self.available() + self.pending_blocks
    }

    /// The runs freed but not yet durable, as `(first, end)`: still set in
    /// the bitmap, reached by no tree.
    pub fn pending_runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pending_ranges.iter().map(|(&a, &b)| (a, b))
    }

    /// Blocks freed but not yet durable.
    #[must_use]
    pub fn pending_blocks(&self) -> u64 {
        self.pending_blocks
    }

    /// Bitmap zeros (free blocks, reservations included).
    #[must_use]
    pub fn free_blocks(&self) -> u64 {
        self.free
    }

    /// Reserves `n` blocks for data not yet allocated.
    ///
    /// # Errors
    /// `NoSpace(Data)` when fewer than `n` blocks are available.
    pub fn reserve(&mut self, n: u64) -> Result<()> {
        if self.available() < n {
            return Err(Error::NoSpace(DeviceRole::Data));
        }
        self.reserved += n;
        Ok(())
    }

    /// Returns a reservation that will not be used.
    ///
    /// # Panics
    /// More than is reserved: the engine returns only what it took.
    pub fn unreserve(&mut self, n: u64) {
        assert!(self.reserved >= n, "unreserving {n} of {} reserved blocks", self.reserved);
        self.reserved -= n;
    }

    /// Blocks reserved.
    #[must_use]
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// The group a block belongs to.
    #[must_use]
    pub fn group_of(&self, b: DataBlock) -> GroupNo {
        GroupNo((b.0 / u64::from(self.group_blocks)) as u32)
    }

    /// First block of a group.
    #[must_use]
    pub fn group_start(&self, g: GroupNo) -> DataBlock {
        DataBlock(u64::from(g.0) * u64::from(self.group_blocks))
    }

    fn group_range(&self, g: GroupNo) -> (u64, u64) {
        let start = u64::from(g.0) * u64::from(self.group_blocks);
        (start, (start + u64::from(self.group_blocks)).min(self.total))
    }

    /// The group with the most free blocks (ties: fewest directories, then
    /// lowest number); it is bound to a new directory. A whole group with
    /// no directory cannot be beaten: the search stops at the first, so
    /// that on a volume mostly empty it reads one block of the group table.
    ///
    /// # Errors
    /// A block of the group table cannot be read.
    pub fn bind_directory(&mut self) -> Result<GroupNo> {
        // A shrink under way binds nothing past its end.
        let usable = self.groups.len().min(self.limit.div_ceil(u64::from(self.group_blocks)) as usize);
        let mut best: Option<(u32, std::cmp::Reverse<u32>, usize)> = None;
        for g in 0..usable {
            self.load_desc(GroupNo(g as u32))?;
            let d = self.groups.get(g);
            let key = (d.free_blocks, std::cmp::Reverse(d.directories), g);
            if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                best = Some(key);
            }
            if d.free_blocks == self.group_blocks && d.directories == 0 {
                break;
            }
        }
        let g = best.map_or(0, |b| b.2);
        self.load_desc(GroupNo(g as u32))?;
        self.groups.update(g, |d| d.directories = d.directories.saturating_add(1));
        Ok(GroupNo(g as u32))
    }

    /// The group bound to a directory made inside another (not at the top
    /// of a tree): its parent's group `near` while that group has a
    /// quarter of its blocks free, else the first group after it that has,
    /// else the emptiest ([`DataSpace::bind_directory`]). A tree then lies
    /// together, in the order its files were written, so a walk of it
    /// (tar, cp -a, grep) reads on where the last read ended instead of
    /// seeking to another group at every directory (DESIGN.md, "Data
    /// space").
    ///
    /// # Errors
    /// A block of the group table cannot be read.
    pub fn bind_subdirectory(&mut self, near: GroupNo) -> Result<GroupNo> {
        let usable = self.groups.len().min(self.limit.div_ceil(u64::from(self.group_blocks)) as usize);
        let want = self.group_blocks / 4;
        let first = near.0 as usize;
        if first >= usable {
            return self.bind_directory();
        }
        for i in 0..usable {
            let g = (first + i) % usable;
            self.load_desc(GroupNo(g as u32))?;
            if self.groups.get(g).free_blocks >= want.max(1) {
                self.groups.update(g, |d| d.directories = d.directories.saturating_add(1));
                return Ok(GroupNo(g as u32));
            }
        }
        self.bind_directory()
    }

    /// A directory bound to `g` went away. (The count only steers
    /// placement, and change records do not carry it: after a crash it
    /// may be off, so it stops at zero rather than assert.)
    ///
    /// # Errors
    /// The group table's block cannot be read.
    pub fn unbind_directory(&mut self, g: GroupNo) -> Result<()> {
        if (g.0 as usize) < self.groups.len() {
            self.load_desc(g)?;
            self.groups.update(g.0 as usize, |d| d.directories = d.directories.saturating_sub(1));
        }
        Ok(())
    }

    fn bit(&self, b: u64) -> bool {
        self.bitmap.get((b / 64) as usize) >> (b % 64) & 1 != 0
    }

    fn count_free(&self, start: u64, end: u64) -> u64 {
        // Word by word: mkfs and fsck count every block of the device.
        let mut free = 0;
        let mut b = start;
        while b < end {
            let w = b / 64;
            let lo = b % 64;
            let hi = (end - w * 64).min(64);
            let mask = if hi - lo == 64 { !0u64 } else { ((1u64 << (hi - lo)) - 1) << lo };
            free += u64::from((!self.bitmap.get(w as usize) & mask).count_ones());
            b = w * 64 + hi;
        }
        free
    }

    fn set_bits(&mut self, start: u64, len: u64, used: bool) -> u64 {
        let mut changed = 0;
        for b in start..start + len {
            if self.bit(b) != used {
                self.bitmap.update((b / 64) as usize, |w| *w ^= 1 << (b % 64));
                if self.is_held(b) {
                    // A block the live tree lets go of that a snapshot
                    // keeps stays out of reach (and back: roll-forward).
                    if used {
                        // (Saturating: a count carried from disk may be
                        // damaged; fsck says so.)
                        self.held_only = self.held_only.saturating_sub(1);
                    } else {
                        self.held_only += 1;
                    }
                }
                let g = self.group_of(DataBlock(b)).0 as usize;
                self.groups.update(g, |d| {
                    if used {
                        d.free_blocks -= 1;
                    } else {
                        d.free_blocks += 1;
                    }
                });
                changed += 1;
            }
        }
        changed
    }

    /// Marks blocks in use (mkfs, roll-forward of an allocation). Returns how
    /// many were free before.
    ///
    /// # Panics
    /// A range beyond the device: values read from disk are checked first.
    ///
    /// # Errors
    /// The bitmap of the groups it touches cannot be loaded.
    pub fn mark_used(&mut self, start: DataBlock, len: u32) -> Result<u64> {
        self.assert_inside(start, len);
        self.load_range(start, len)?;
        let n = self.set_bits(start.0, u64::from(len), true);
        self.free -= n;
        Ok(n)
    }

    /// Marks blocks free at once (roll-forward of a free, which is durable by
    /// definition). Returns how many were in use before.
    ///
    /// # Panics
    /// A range beyond the device: values read from disk are checked first.
    ///
    /// # Errors
    /// The bitmap of the groups it touches cannot be loaded.
    pub fn mark_free(&mut self, start: DataBlock, len: u32) -> Result<u64> {
        self.assert_inside(start, len);
        self.load_range(start, len)?;
        Ok(self.mark_free_loaded(start, len))
    }

    fn mark_free_loaded(&mut self, start: DataBlock, len: u32) -> u64 {
        let n = self.set_bits(start.0, u64::from(len), false);
        self.free += n;
        n
    }

    fn assert_inside(&self, start: DataBlock, len: u32) {
        assert!(
            start.0.checked_add(u64::from(len)).is_some_and(|end| end <= self.total),
            "data blocks {}+{len} lie beyond the device's {}",
            start.0,
            self.total
        );
    }

    /// Whether every block of the range is free in the bitmap.
    ///
    /// # Errors
    /// The bitmap of the groups it touches cannot be loaded.
    pub fn all_free(&mut self, start: DataBlock, len: u32) -> Result<bool> {
        if start.0.checked_add(u64::from(len)).is_none_or(|end| end > self.total) {
            return Ok(false);
        }
        self.load_range(start, len)?;
        Ok((start.0..start.0 + u64::from(len)).all(|b| !self.bit(b)))
    }

    /// Whether every block of the range is marked in use (loaded already).
    fn all_used(&self, start: DataBlock, len: u32) -> bool {
        start.0.checked_add(u64::from(len)).is_some_and(|end| end <= self.total)
            && (start.0..start.0 + u64::from(len)).all(|b| self.bit(b))
    }

    /// Why freeing `[start, start + len)` would be wrong, if it would: a
    /// block beyond the device, not in use, or already waiting to be freed.
    /// What a file's extents name comes from the disk: a caller checks
    /// here first and reports a damaged volume, never a broken allocator.
    ///
    /// # Errors
    /// The bitmap of the groups it touches cannot be loaded.
    pub fn check_free(&mut self, start: DataBlock, len: u32) -> Result<Option<String>> {
        let Some(end) = start.0.checked_add(u64::from(len)).filter(|&e| e <= self.total && start.0 > 0) else {
            return Ok(Some(format!("data blocks {}+{len} lie outside the data device", start.0)));
        };
        self.load_range(start, len)?;
        Ok(self.check_free_loaded(start, len, end))
    }

    fn check_free_loaded(&self, start: DataBlock, len: u32, end: u64) -> Option<String> {
        if !self.all_used(start, len) {
            return Some(format!("data blocks {}+{len} are mapped by a file but marked free", start.0));
        }
        let before = self.pending_ranges.range(..end).next_back();
        if before.is_some_and(|(_, &e)| e > start.0) {
            return Some(format!("data blocks {}+{len} are freed twice (another file maps them too)", start.0));
        }
        None
    }

    /// Frees blocks once the commit group that records the free is durable
    /// ([`DataSpace::seal_frees`] names it when it is sealed).
    ///
    /// # Panics
    /// The range cannot be freed ([`DataSpace::check_free`]): callers check
    /// what comes from the disk first, so this is a bug of the engine.
    ///
    /// # Errors
    /// The bitmap of the groups it touches cannot be loaded.
    pub fn free_deferred(&mut self, start: DataBlock, len: u32) -> Result<()> {
        if let Some(why) = self.check_free(start, len)? {
            panic!("the allocator was asked to free what it cannot: {why}");
        }
        if faults::active(Fault::ImmediateReuse) {
            self.mark_free_loaded(start, len);
            return Ok(());
        }
        // Its groups are loaded now and stay so: `release` needs no device.
        self.discard_at_free(start, len);
        self.pending.push((UNSEALED, start, len));
        self.pending_ranges.insert(start.0, start.0 + u64::from(len));
        self.pending_blocks += u64::from(len);
        Ok(())
    }

    /// The commit group ending with partial segment `seq` carries every free
    /// not yet sealed: they wait for it. (Tagging a free with the log head
    /// when it happens would not do: an fsync partial segment written in
    /// between takes that sequence number, and its durability would release
    /// the free before the group recording it is on disk.)
    pub fn seal_frees(&mut self, seq: Seq) {
        for p in &mut self.pending {
            if p.0 == UNSEALED {
                p.0 = seq;
            }
        }
    }

    /// Partial segments up to `durable` reached the disk: their frees may be reused.
    pub fn release(&mut self, durable: Seq) {
        let pending = std::mem::take(&mut self.pending);
        for (seq, start, len) in pending {
            if seq <= durable {
                self.pending_blocks -= u64::from(len);
                self.pending_ranges.remove(&start.0);
                let freed = self.mark_free_loaded(start, len);
                assert_eq!(freed, u64::from(len), "a pending free of data blocks {}+{len} found some free", start.0);
                self.released(start, len);
            } else {
                self.pending.push((seq, start, len));
            }
        }
    }

    /// Allocates a run of up to `want` free blocks, preferring `goal` and
    /// what follows it, then the rest of the device. The caller holds a
    /// reservation for them, which this consumes.
    ///
    /// # Errors
    /// The bitmap of a group it looks into cannot be loaded.
    pub fn allocate(&mut self, goal: DataBlock, want: u64) -> Result<Option<(DataBlock, u32)>> {
        let want = want.clamp(1, u64::from(MAX_EXTENT_BLOCKS));
        let end = self.total.min(self.limit);
        let goal = if goal.0 >= end { 0 } else { goal.0 };
        let found = match self.find_free(goal, end)? {
            Some(b) => Some(b),
            None => self.find_free(0, goal)?,
        };
        let Some(start) = found else { return Ok(None) };
        // The run may reach into the next group: load it before looking.
        let reach = (want - 1).min(self.total - 1 - start);
        self.load_range(DataBlock(start), reach as u32 + 1)?;
        let mut len = 1;
        while len < want
            && start + len < self.total
            && !self.bit(start + len)
            && !self.is_held(start + len)
            && !self.is_busy(start + len)
        {
            len += 1;
        }
        self.set_bits(start, len, true);
        self.free -= len;
        assert!(self.reserved >= len, "allocating {len} blocks on a reservation of {}", self.reserved);
        self.reserved -= len;
        let g = self.group_of(DataBlock(start)).0;
        self.cursor.insert(g, start + len);
        Ok(Some((DataBlock(start), len as u32)))
    }

    /// Groups whose last allocation's end is remembered.
    #[must_use]
    pub fn cursors(&self) -> usize {
        self.cursor.len()
    }

    /// Where a new file in group `g` should start looking: just after the
    /// last allocation there, so that files created together lie together.
    #[must_use]
    pub fn group_goal(&self, g: GroupNo) -> DataBlock {
        let (start, end) = self.group_range(g);
        let c = self.cursor.get(&g.0).copied().unwrap_or(0);
        DataBlock(if (start..end).contains(&c) { c } else { start })
    }

    /// First free block in `from..to`, skipping full groups and words.
    fn find_free(&mut self, from: u64, to: u64) -> Result<Option<u64>> {
        let mut b = from;
        while b < to {
            let g = self.group_of(DataBlock(b));
            self.load_desc(g)?;
            if self.groups.get(g.0 as usize).free_blocks == 0 {
                b = self.group_range(g).1;
                continue;
            }
            self.load_group(g)?;
            let w = (b / 64) as usize;
            let word = (self.bitmap.get(w) | self.held_word(w) | self.busy_word(w)) >> (b % 64);
            if word == !0u64 >> (b % 64) {
                b = (b / 64 + 1) * 64;
                continue;
            }
            let off = u64::from((!word).trailing_zeros());
            let found = b + off;
            if found < to && found < self.total {
                return Ok(Some(found));
            }
            b = (b / 64 + 1) * 64;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
