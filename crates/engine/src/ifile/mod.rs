//! The IFile (paper §3.2, Figure 2): segment usage table, inode map and node
//! map. (The data-group descriptors and bitmap are IFile tables too; their
//! allocator lives in [`crate::data_space`].)
//!
//! The IFile is written only at checkpoints. Between checkpoints it changes
//! through the same primitives whether a partial segment is being sealed or
//! rolled forward: frees and orphan changes first (change records), then the
//! placements of the blocks and inodes the partial segment carries. So every
//! commit exercises the recovery path.

use std::collections::{BTreeMap, BTreeSet};

use crate::format::ifile::{IMAP_ORPHAN, IMAP_USED, ImapEntry, SegUsage, TableId};
use crate::table::{Fresh, Table, TableAccess};

mod counted;
mod usage;
use crate::types::{BLOCK_BYTES, InodeNo, MetaBlock, NodeId, SegmentNo, Seq};

/// Where segments sit on the meta-data device.
#[derive(Clone, Copy, Debug)]
pub struct SegmentGeometry {
    /// First block of segment 0.
    pub first_block: u64,
    /// Blocks per segment.
    pub blocks: u32,
    /// Number of segments.
    pub count: u32,
}

impl SegmentGeometry {
    /// The segment holding `b`, if any.
    #[must_use]
    pub fn segment_of(&self, b: MetaBlock) -> Option<SegmentNo> {
        let rel = b.0.checked_sub(self.first_block)?;
        let s = rel / u64::from(self.blocks);
        (s < u64::from(self.count)).then_some(SegmentNo(s as u32))
    }

    /// First block of `seg`.
    #[must_use]
    pub fn start(&self, seg: SegmentNo) -> MetaBlock {
        MetaBlock(self.first_block + u64::from(seg.0) * u64::from(self.blocks))
    }
}

/// The inode map, node map and segment usage table, with the free lists
/// derived from them.
#[derive(Debug, Clone)]
pub struct IFile {
    geometry: SegmentGeometry,
    /// Live bytes and last write per segment.
    pub segments: Table<SegUsage>,
    /// Inode number to location and generation.
    pub inodes: Table<ImapEntry>,
    /// Node id to block address (0 = free).
    pub nodes: Table<u64>,
    /// Free inode numbers per counted inode-map block (not those freed by
    /// the group being built), and the blocks holding any: two bytes a
    /// block where a set of the numbers took some 20 bytes each (ten
    /// million after deleting ten million files). A number is listed iff
    /// its block was counted, it is not 0, not in use and not in
    /// `freed_inodes`; a new one is the lowest of the lowest block.
    free_in_block: Vec<u16>,
    free_blocks: BTreeSet<u32>,
    /// Inode numbers freed by the commit group being built: reused only in
    /// a later group, so that no group both frees and reuses a number
    /// (roll-forward then never confuses two lives of one inode).
    freed_inodes: BTreeSet<u64>,
    free_nodes: BTreeSet<u64>,
    used_inodes: u64,
    used_nodes: u64,
    /// Inode-map blocks whose numbers are not in the free list and counts
    /// yet (left on disk at mount and never read since); a block given
    /// back after that is counted still. Empty when every block was.
    uncounted: Vec<bool>,
    uncounted_count: usize,
    /// Inodes on the orphan list, of the blocks counted: what
    /// [`IFile::orphans`] and [`IFile::is_orphan`] answer without the map.
    orphan_set: BTreeSet<u64>,
    /// Until every inode-map block was counted: what the counted blocks
    /// and the node map hold live per segment, kept with every change, so
    /// that the last block in can check the segment usage without the
    /// whole map in memory ([`IFile::accept_inode_block`]).
    live_counted: Option<Vec<u64>>,
    /// Inode-map blocks used since the clock hand last passed them, and
    /// the hand ([`IFile::evict_inode_blocks`]).
    referenced: Vec<bool>,
    hand: usize,
    /// Changes to usage entries whose block is not at hand (`usage`).
    seg_pending: BTreeMap<u32, usage::SegDelta>,
    /// Where the last sweep giving back usage blocks stopped
    /// ([`IFile::evict_usage_blocks`]).
    usage_hand: usize,
    /// Segments in use whose entry holds no live byte and no IFile block.
    vacant: u64,
    /// Live bytes of all segments, 4096 for each IFile block counted.
    live_total: u64,
    /// The live bytes were checked against the whole maps when loaded (a
    /// complete load, or a fresh volume): a sum gone below zero is a bug.
    live_checked: bool,
    /// Segments written into since the durable checkpoint's log position.
    written_since: BTreeMap<u32, Seq>,
    /// When segments came to hold nothing, and which were discarded
    /// (`usage`; DESIGN.md, "Discard").
    pub(crate) emptied: usage::Emptied,
}

impl IFile {
    /// An IFile for a checkpoint to be loaded into: its tables sized, their
    /// blocks named by nothing yet.
    #[must_use]
    pub fn for_load(geometry: SegmentGeometry, sparse: bool, inodes: usize, nodes: usize) -> IFile {
        let mut f = IFile::new(geometry, sparse);
        f.segments = Table::for_load(TableId::SegmentUsage, geometry.count as usize, Fresh::Default, sparse);
        f.inodes = Table::for_load(TableId::InodeMap, inodes, Fresh::Default, sparse);
        f.nodes = Table::for_load(TableId::NodeMap, nodes, Fresh::Default, sparse);
        f.live_checked = false;
        f
    }

    /// Whether the live bytes were checked against the maps when loaded.
    #[must_use]
    pub fn live_checked(&self) -> bool {
        self.live_checked
    }

    /// An empty IFile for a fresh volume: inode 0 and node 0 are reserved.
    /// `sparse`: blocks never written need not be (`SPARSE_IFILE`).
    #[must_use]
    pub fn new(geometry: SegmentGeometry, sparse: bool) -> IFile {
        let mut f = IFile {
            geometry,
            segments: Table::new(TableId::SegmentUsage, geometry.count as usize, Fresh::Default, sparse),
            inodes: Table::new(TableId::InodeMap, 1, Fresh::Default, sparse),
            nodes: Table::new(TableId::NodeMap, 1, Fresh::Default, sparse),
            free_in_block: Vec::new(),
            free_blocks: BTreeSet::new(),
            freed_inodes: BTreeSet::new(),
            free_nodes: BTreeSet::new(),
            used_inodes: 0,
            used_nodes: 0,
            uncounted: Vec::new(),
            uncounted_count: 0,
            orphan_set: BTreeSet::new(),
            live_counted: None,
            referenced: Vec::new(),
            hand: 0,
            seg_pending: BTreeMap::new(),
            usage_hand: 0,
            vacant: u64::from(geometry.count),
            live_total: 0,
            live_checked: true,
            written_since: BTreeMap::new(),
            emptied: usage::Emptied::default(),
        };
        // Number 0 never names anything; keep it out of the free lists forever.
        f.inodes.set(0, ImapEntry { flags: IMAP_USED, ..ImapEntry::default() });
        f
    }

    /// Makes another tree's inode and node maps this IFile's (mounting a
    /// writable tree kept in the same log): the segment usage stays, as
    /// the log is one, but its live bytes are those of the new maps. A
    /// block of the maps is rewritten by the next checkpoint unless the
    /// outgoing tree's block holds the same entries
    /// ([`crate::table::Table::adopt`]), so that no live IFile block stays
    /// in the other tree's image.
    pub fn adopt_tree(&mut self, other: IFile) {
        self.inodes.adopt(other.inodes);
        self.nodes.adopt(other.nodes);
        // The other tree's maps are whole in memory: everything is counted.
        self.uncounted = Vec::new();
        self.uncounted_count = 0;
        self.live_counted = None;
        self.rebuild_free_lists();
        self.recount_live_bytes();
    }

    /// Segment geometry.
    #[must_use]
    pub fn geometry(&self) -> SegmentGeometry {
        self.geometry
    }

    /// Adds segments up to `count` (a grow of the meta-data device): never
    /// written, nothing live in them.
    pub fn grow_segments(&mut self, count: u32) {
        assert!(count >= self.geometry.count, "growing {} segments to {count}", self.geometry.count);
        self.segments.grow(count as usize);
        self.vacant += u64::from(count - self.geometry.count);
        self.geometry.count = count;
        if let Some(live) = &mut self.live_counted {
            live.resize(count as usize, 0);
        }
    }

    /// Cuts the segments down to `count` (a shrink of the meta-data
    /// device): those cut off must hold nothing live.
    pub fn shrink_segments(&mut self, count: u32) {
        assert!(count <= self.geometry.count, "shrinking {} segments to {count}", self.geometry.count);
        for s in count..self.geometry.count {
            let u = self.segment(SegmentNo(s));
            assert!(u.live_bytes == 0 && u.ifile_blocks == 0, "segment {s} is cut off holding something");
        }
        self.segments.truncate(count as usize);
        self.vacant -= u64::from(self.geometry.count - count);
        self.geometry.count = count;
        if let Some(live) = &mut self.live_counted {
            live.truncate(count as usize);
        }
    }

    /// Inodes in use.
    #[must_use]
    pub fn used_inodes(&self) -> u64 {
        self.used_inodes
    }

    /// Node ids in use.
    #[must_use]
    pub fn used_nodes(&self) -> u64 {
        self.used_nodes
    }

    /// All three tables, for the checkpoint writer and loader.
    pub fn tables_mut(&mut self) -> [&mut dyn TableAccess; 3] {
        [&mut self.segments, &mut self.inodes, &mut self.nodes]
    }

    // ---- inode map ----

    /// The inode-map entry of `ino`, if the number is in range.
    ///
    /// # Panics
    /// Its block is not in memory: callers read it first
    /// ([`IFile::unloaded_inode_block`]).
    #[must_use]
    pub fn inode(&self, ino: InodeNo) -> Option<ImapEntry> {
        (ino.0 < self.inodes.len() as u64).then(|| self.inodes.get(ino.0 as usize))
    }

    /// The inode-map entry of `ino` if its block is in memory (a hint:
    /// whether a neighbour in an inode block is worth caching).
    #[must_use]
    pub fn inode_if_loaded(&self, ino: InodeNo) -> Option<ImapEntry> {
        if self.unloaded_inode_block(ino).is_some() { None } else { self.inode(ino) }
    }

    /// Takes a free inode number (the lowest) and returns it with its generation.
    pub fn alloc_inode(&mut self) -> (InodeNo, u32) {
        let n = match self.lowest_free() {
            Some(n) => {
                self.unlist_free(n);
                n
            }
            None => {
                let n = self.inodes.len() as u64;
                self.inodes.grow(n as usize + 1);
                n
            }
        };
        let generation = self.inodes.get(n as usize).generation;
        self.inodes.set(n as usize, ImapEntry { address: MetaBlock(0), generation, flags: IMAP_USED, record_len: 0 });
        self.used_inodes += 1;
        (InodeNo(n), generation)
    }

    /// Grows the inode map to hold `ino`; the numbers added below it are free.
    fn reach_inode(&mut self, ino: InodeNo) {
        if ino.0 >= self.inodes.len() as u64 {
            let old_len = self.inodes.len() as u64;
            self.inodes.grow(ino.0 as usize + 1);
            // `ino` too: its caller takes it off as it takes it.
            for i in old_len.max(1)..=ino.0 {
                self.list_free(i);
            }
        }
    }

    /// Takes the free number `ino` with entry `e` (repair re-creating the
    /// root directory as number 1).
    pub fn take_inode(&mut self, ino: InodeNo, e: ImapEntry) {
        self.reach_inode(ino);
        self.unlist_free(ino.0);
        let old = self.inodes.get(ino.0 as usize);
        if old.in_use() {
            self.sub_live(old.address, u32::from(old.record_len));
        } else {
            self.used_inodes += 1;
        }
        self.freed_inodes.remove(&ino.0);
        if e.in_use() && e.flags & IMAP_ORPHAN != 0 {
            self.orphan_set.insert(ino.0);
        } else {
            self.orphan_set.remove(&ino.0);
        }
        self.inodes.set(ino.0 as usize, e);
    }

    /// Takes inode number `ino` with `generation` out of the free list
    /// (replaying an fsync record of a new inode). Returns false when it
    /// is in use already.
    pub fn claim_inode(&mut self, ino: InodeNo, generation: u32) -> bool {
        if ino.0 == 0 || self.inode(ino).is_some_and(|e| e.in_use()) {
            return false;
        }
        self.take_inode(ino, ImapEntry { address: MetaBlock(0), generation, flags: IMAP_USED, record_len: 0 });
        true
    }

    /// Releases `ino`; its next use gets `next_generation`.
    pub fn free_inode(&mut self, ino: InodeNo, next_generation: u32) {
        let Some(old) = self.inode(ino) else { return };
        // A free entry's address and length count nothing (4.5).
        if old.in_use() {
            self.sub_live(old.address, u32::from(old.record_len));
        }
        self.inodes.set(ino.0 as usize, ImapEntry { generation: next_generation, ..ImapEntry::default() });
        self.orphan_set.remove(&ino.0);
        if old.in_use() {
            self.freed_inodes.insert(ino.0);
            self.used_inodes -= 1;
        }
    }

    /// The commit group that freed inode numbers was sealed: they may be reused.
    pub fn release_freed_inodes(&mut self) {
        for i in std::mem::take(&mut self.freed_inodes) {
            self.list_free(i);
        }
    }

    /// Records that the newest copy of `ino` (generation `generation`,
    /// `len` bytes) now lives in inode block `at`.
    pub fn place_inode(&mut self, ino: InodeNo, generation: u32, at: MetaBlock, len: u16) {
        // Roll-forward meets inodes allocated after the checkpoint.
        self.reach_inode(ino);
        self.unlist_free(ino.0);
        let old = self.inodes.get(ino.0 as usize);
        if old.in_use() {
            self.sub_live(old.address, u32::from(old.record_len));
        }
        self.add_live(at, u32::from(len));
        if !old.in_use() {
            self.used_inodes += 1;
        }
        let flags = IMAP_USED | (old.flags & IMAP_ORPHAN);
        self.inodes.set(ino.0 as usize, ImapEntry { address: at, generation, flags, record_len: len });
    }

    /// Adds `ino` to, or removes it from, the orphan list.
    pub fn set_orphan(&mut self, ino: InodeNo, orphan: bool) {
        if ino.0 < self.inodes.len() as u64 {
            let mut on = false;
            self.inodes.update(ino.0 as usize, |e| {
                on = orphan && e.in_use();
                if on {
                    e.flags |= IMAP_ORPHAN;
                } else {
                    e.flags &= !IMAP_ORPHAN;
                }
            });
            if on {
                self.orphan_set.insert(ino.0);
            } else {
                self.orphan_set.remove(&ino.0);
            }
        }
    }

    /// Inodes on the orphan list (of the blocks counted: all of them once
    /// [`IFile::inodes_complete`]).
    #[must_use]
    pub fn orphans(&self) -> Vec<InodeNo> {
        self.orphan_set.iter().map(|&i| InodeNo(i)).collect()
    }

    // ---- node map ----

    /// Where node `id` lives (0 = nowhere yet, or free).
    #[must_use]
    pub fn node_address(&self, id: NodeId) -> MetaBlock {
        if id.0 < self.nodes.len() as u64 { MetaBlock(self.nodes.get(id.0 as usize)) } else { MetaBlock(0) }
    }

    /// Takes a free node id.
    pub fn alloc_node(&mut self) -> NodeId {
        let n = match self.free_nodes.pop_first() {
            Some(n) => n,
            None => {
                let n = self.nodes.len() as u64;
                self.nodes.grow(n as usize + 1);
                n
            }
        };
        self.used_nodes += 1;
        NodeId(n)
    }

    /// Releases node `id`.
    pub fn free_node(&mut self, id: NodeId) {
        if id.0 == 0 || id.0 >= self.nodes.len() as u64 {
            return;
        }
        let old = MetaBlock(self.nodes.get(id.0 as usize));
        self.sub_live(old, BLOCK_BYTES as u32);
        self.nodes.set(id.0 as usize, 0);
        if self.free_nodes.insert(id.0) {
            self.used_nodes -= 1;
        }
    }

    /// Records that node `id` now lives at `at`.
    pub fn place_node(&mut self, id: NodeId, at: MetaBlock) {
        if id.0 >= self.nodes.len() as u64 {
            let old_len = self.nodes.len() as u64;
            self.nodes.grow(id.0 as usize + 1);
            self.free_nodes.extend(old_len..id.0);
        }
        let old = MetaBlock(self.nodes.get(id.0 as usize));
        self.sub_live(old, BLOCK_BYTES as u32);
        self.add_live(at, BLOCK_BYTES as u32);
        if self.free_nodes.remove(&id.0) {
            self.used_nodes += 1;
        }
        self.nodes.set(id.0 as usize, at.0);
    }

    // ---- segment usage (see `usage`) ----

    /// What the maps say each segment holds live (FORMAT.md 4.5): 4096
    /// bytes per node, the record length per inode in use.
    #[must_use]
    pub fn live_bytes_from_maps(&self) -> Vec<u64> {
        let mut live = vec![0u64; self.geometry.count as usize];
        for i in 1..self.inodes.len() {
            let e = self.inodes.get(i);
            if e.in_use()
                && let Some(s) = self.geometry.segment_of(e.address)
            {
                live[s.0 as usize] += u64::from(e.record_len);
            }
        }
        for i in 1..self.nodes.len() {
            if let Some(s) = self.geometry.segment_of(MetaBlock(self.nodes.get(i))) {
                live[s.0 as usize] += BLOCK_BYTES;
            }
        }
        live
    }

    /// Sets every segment's live bytes to what the maps say; returns the
    /// segments that said otherwise, with what they said and what is true.
    ///
    /// # Panics
    /// The maps are not whole in memory.
    pub fn recount_live_bytes(&mut self) -> Vec<(SegmentNo, u32, u64)> {
        let live = self.live_bytes_from_maps();
        self.set_live_bytes(live)
    }

    fn set_live_bytes(&mut self, live: Vec<u64>) -> Vec<(SegmentNo, u32, u64)> {
        let mut wrong = Vec::new();
        for (s, want) in live.into_iter().enumerate() {
            let have = self.segment(SegmentNo(s as u32)).live_bytes;
            if u64::from(have) != want {
                wrong.push((SegmentNo(s as u32), have, want));
                let v = u32::try_from(want).unwrap_or(u32::MAX);
                self.change_segment_live(SegmentNo(s as u32), v);
            }
        }
        self.live_checked = true;
        wrong
    }

    // Live bytes are checked against the maps when a checkpoint is loaded
    // whole (and recounted if they disagree), and every change after that
    // adds and takes what the maps say: the engine keeps them, so a wrong
    // sum is then a bug, not damage. (A segment holds at most 65,536
    // blocks of 4 KiB: the sum cannot overflow, inode lists being checked
    // to fit their block.)
    fn add_live(&mut self, at: MetaBlock, bytes: u32) {
        if let Some(seg) = self.geometry.segment_of(at) {
            if let Some(live) = &mut self.live_counted {
                live[seg.0 as usize] += u64::from(bytes);
            }
            self.usage_add(seg, bytes);
        }
    }

    fn sub_live(&mut self, at: MetaBlock, bytes: u32) {
        if at.0 == 0 {
            return;
        }
        if let Some(seg) = self.geometry.segment_of(at) {
            if let Some(live) = &mut self.live_counted {
                live[seg.0 as usize] = live[seg.0 as usize].saturating_sub(u64::from(bytes));
            }
            self.usage_sub(seg, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifile() -> IFile {
        let mut f = IFile::new(SegmentGeometry { first_block: 256, blocks: 256, count: 8 }, false);
        f.rebuild_free_lists();
        f
    }

    #[test]
    fn inode_numbers_are_reused_lowest_first_with_a_new_generation() {
        let mut f = ifile();
        let (a, ga) = f.alloc_inode();
        let (b, _) = f.alloc_inode();
        assert_eq!((a, b), (InodeNo(1), InodeNo(2)));
        f.place_inode(a, ga, MetaBlock(300), 200);
        assert_eq!(f.segment(SegmentNo(0)).live_bytes, 200);
        f.free_inode(a, ga + 1);
        assert_eq!(f.segment(SegmentNo(0)).live_bytes, 0);
        assert_eq!(f.alloc_inode().0, InodeNo(3), "reused before its free was sealed");
        f.release_freed_inodes();
        assert_eq!(f.alloc_inode(), (InodeNo(1), ga + 1));
        assert_eq!(f.used_inodes(), 3);
    }

    #[test]
    fn moving_a_node_moves_its_live_bytes() {
        let mut f = ifile();
        let n = f.alloc_node();
        f.place_node(n, MetaBlock(256 + 10));
        f.place_node(n, MetaBlock(256 + 256 + 3));
        assert_eq!(f.segment(SegmentNo(0)).live_bytes, 0);
        assert_eq!(f.segment(SegmentNo(1)).live_bytes, 4096);
        f.free_node(n);
        assert_eq!(f.segment(SegmentNo(1)).live_bytes, 0);
        assert_eq!(f.used_nodes(), 0);
    }

    #[test]
    fn roll_forward_placements_grow_the_maps() {
        let mut f = ifile();
        f.place_inode(InodeNo(10), 0, MetaBlock(400), 150);
        f.place_node(NodeId(7), MetaBlock(401));
        f.rebuild_free_lists();
        assert_eq!(f.used_inodes(), 1);
        assert_eq!(f.used_nodes(), 1);
        assert_eq!(f.alloc_inode().0, InodeNo(1));
        assert_eq!(f.alloc_node(), NodeId(1));
    }

    #[test]
    #[should_panic(expected = "live bytes leave")]
    fn live_bytes_below_zero_are_a_bug_asserted() {
        let mut f = ifile();
        let n = f.alloc_node();
        f.place_node(n, MetaBlock(300));
        // The table says less than the maps: what a load would have recounted.
        f.segments.update(0, |u| u.live_bytes = 0);
        f.free_node(n);
    }

    #[test]
    fn a_wrong_live_count_is_recounted_from_the_maps() {
        let mut f = ifile();
        let (a, g) = f.alloc_inode();
        f.place_inode(a, g, MetaBlock(300), 200);
        f.segments.update(0, |u| u.live_bytes = 999);
        assert_eq!(f.recount_live_bytes(), vec![(SegmentNo(0), 999, 200)]);
        assert_eq!(f.segment(SegmentNo(0)).live_bytes, 200);
        assert!(f.recount_live_bytes().is_empty());
    }

    /// An IFile whose inode map holds three blocks, the first two left on
    /// disk as a large map's are at mount; their payloads are returned.
    fn lazily_loaded() -> (IFile, usize, Vec<Vec<u8>>) {
        let mut f = ifile();
        let per = f.inodes.per_block();
        for _ in 0..2 * per + 10 {
            let (ino, g) = f.alloc_inode();
            f.place_inode(ino, g, MetaBlock(300), 100);
        }
        f.free_inode(InodeNo(7), 1);
        f.release_freed_inodes();
        let payloads = vec![f.inodes.encode_block(0), f.inodes.encode_block(1)];
        for b in 0..3 {
            f.inodes.set_address(b, MetaBlock(600 + u64::from(b)));
        }
        f.leave_inodes_on_disk_but(2);
        (f, per, payloads)
    }

    #[test]
    #[should_panic(expected = "used before its block 0 was loaded")]
    fn an_inode_map_entry_left_on_disk_is_never_read_as_free() {
        let (f, _, _) = lazily_loaded();
        let _ = f.inode(InodeNo(7));
    }

    #[test]
    fn numbers_come_from_blocks_read_and_the_count_is_whole_with_the_last() {
        let (mut f, per, payloads) = lazily_loaded();
        assert_eq!(f.used_inodes(), 11, "only the last block is counted");
        assert_eq!(f.unloaded_inode_block(InodeNo(7)), Some(0));
        assert_eq!(f.inode_if_loaded(InodeNo(7)), None);
        // Free number 7 is on disk: a new inode goes past the end.
        assert_eq!(f.alloc_inode().0, InodeNo((2 * per + 11) as u64));
        assert!(f.accept_inode_block(0, &payloads[0]).unwrap().is_empty());
        assert_eq!(f.alloc_inode().0, InodeNo(7), "the lowest free number of a block read");
        assert!(!f.inodes_complete());
        // The last block in: live bytes were right, nothing recounted.
        assert!(f.accept_inode_block(1, &payloads[1]).unwrap().is_empty());
        assert!(f.inodes_complete());
        assert_eq!(f.used_inodes(), (2 * per + 11) as u64);
        // A block read again is left alone.
        assert!(f.accept_inode_block(1, &payloads[1]).unwrap().is_empty());
        assert_eq!(f.used_inodes(), (2 * per + 11) as u64);
    }

    #[test]
    fn orphan_flag_survives_a_move() {
        let mut f = ifile();
        let (a, g) = f.alloc_inode();
        f.place_inode(a, g, MetaBlock(300), 150);
        f.set_orphan(a, true);
        f.place_inode(a, g, MetaBlock(301), 150);
        assert_eq!(f.orphans(), vec![a]);
        f.set_orphan(a, false);
        assert!(f.orphans().is_empty());
    }
}
