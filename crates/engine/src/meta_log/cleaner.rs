//! The segment cleaner (paper §3.2, Rosenblum's cost-benefit policy).
//!
//! Cleaning a segment is: read its descriptors, find which of the blocks
//! and inodes they name are still live (the node map or inode map still
//! points at them), and mark those dirty, so that the next commit group
//! writes them elsewhere through the normal path. Nothing is copied behind
//! the log's back, so cleaning is crash-safe by construction: until the
//! group that moved them is durable, the old copies are the live ones. Once
//! a checkpoint follows, the victim holds nothing the volume needs and is
//! free (ordering rule 2 as everywhere else).

use super::Log;
use crate::error::Result;
use crate::format::block::BlockKind;
use crate::format::ifile::{INDEX_PER_BLOCK, TableId};
use crate::meta_log::checkpoint::tables;
use crate::types::{BLOCK_BYTES, InodeNo, MetaBlock, NodeId, SegmentNo};

/// How victims are chosen.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Policy {
    /// Rosenblum's benefit/cost: `(1 - u) * age / (1 + u)`. Old, half-empty
    /// segments first; cold data stops being recleaned.
    CostBenefit,
    /// Emptiest first: the most space for the least copying, right now.
    Greedy,
}

/// What the cleaner has done since the volume was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanerStats {
    /// Cleaning passes.
    pub passes: u64,
    /// Victim segments whose descriptors were read.
    pub segments_read: u64,
    /// Descriptor blocks read to find live data.
    pub blocks_read: u64,
    /// Live nodes and blobs moved.
    pub nodes_moved: u64,
    /// Live inodes moved.
    pub inodes_moved: u64,
    /// IFile table and index blocks moved.
    pub ifile_blocks_moved: u64,
    /// Segments that became free.
    pub segments_freed: u64,
}

impl CleanerStats {
    /// The work done between `before` and now (each counter only grows).
    #[must_use]
    pub fn since(&self, before: &CleanerStats) -> CleanerStats {
        CleanerStats {
            passes: self.passes - before.passes,
            segments_read: self.segments_read - before.segments_read,
            blocks_read: self.blocks_read - before.blocks_read,
            nodes_moved: self.nodes_moved - before.nodes_moved,
            inodes_moved: self.inodes_moved - before.inodes_moved,
            ifile_blocks_moved: self.ifile_blocks_moved - before.ifile_blocks_moved,
            segments_freed: self.segments_freed - before.segments_freed,
        }
    }

    /// Adds the work of a later stretch.
    pub fn add(&mut self, other: &CleanerStats) {
        self.passes += other.passes;
        self.segments_read += other.segments_read;
        self.blocks_read += other.blocks_read;
        self.nodes_moved += other.nodes_moved;
        self.inodes_moved += other.inodes_moved;
        self.ifile_blocks_moved += other.ifile_blocks_moved;
        self.segments_freed += other.segments_freed;
    }
}

/// What must move out of a victim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveSet {
    /// Nodes and blobs whose newest copy is in the victim.
    pub nodes: Vec<NodeId>,
    /// Inodes whose newest copy is in the victim.
    pub inodes: Vec<InodeNo>,
    /// IFile table blocks of the current checkpoint in the victim.
    pub ifile: Vec<(TableId, u32)>,
}

impl LiveSet {
    /// Whether nothing is live.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.inodes.is_empty() && self.ifile.is_empty()
    }

    /// Objects to move.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len() + self.inodes.len() + self.ifile.len()
    }
}

impl Log {
    /// Bytes the cleaner would have to move out of `s`: live inodes and
    /// nodes, and the durable checkpoint's IFile blocks.
    #[must_use]
    ///
    /// # Panics
    /// Its usage entry is not at hand ([`Log::load_segment_usage`]).
    pub fn segment_live_bytes(&self, s: SegmentNo) -> u64 {
        let u = self.ifile.segment(s);
        u64::from(u.live_bytes) + u64::from(u.ifile_blocks + self.ckpt.pins.get(&s).copied().unwrap_or(0)) * BLOCK_BYTES
    }

    /// Bytes live in the whole log, as [`Log::segment_live_bytes`] counts
    /// them, without reading the usage table.
    #[must_use]
    pub fn meta_live_bytes(&self) -> u64 {
        self.ifile.live_total() + self.ckpt.pins.values().map(|&n| u64::from(n)).sum::<u64>() * BLOCK_BYTES
    }

    /// Utilisation of `s`, 0 to 1.
    #[must_use]
    pub fn utilization(&self, s: SegmentNo) -> f64 {
        self.segment_live_bytes(s) as f64 / (f64::from(self.sb.segment_blocks) * BLOCK_BYTES as f64)
    }

    /// Segments worth cleaning, best first: not free, not the log's head or
    /// next segment, and less than `max_utilization` full. Only segments
    /// whose usage entry is at hand are considered
    /// ([`Log::load_segment_usage`] first).
    #[must_use]
    pub fn pick_victims(&self, policy: Policy, count: usize, max_utilization: f64) -> Vec<SegmentNo> {
        self.pick_victims_among(policy, count, max_utilization, &[])
    }

    /// As [`Log::pick_victims`], and also segments pinned only by the
    /// records of kept trees that take turns with the live one
    /// ([`Log::set_trees_taking_turns`]) where the live tree has something
    /// to move out: each tree moves its own blocks out while it is live,
    /// and such a segment is free once the last of them did (DESIGN.md, "A
    /// tree is left compact").
    #[must_use]
    pub fn pick_victims_moving(&self, policy: Policy, count: usize, max_utilization: f64) -> Vec<SegmentNo> {
        self.pick_victims_among(policy, count, max_utilization, &self.snaps.turns)
    }

    /// Whether the live tree's blocks lie loose: kept now, its record
    /// would pin more than twice the segments they fill, and two more
    /// (segments pinned for another record anyway not counted). The usage
    /// table is at hand ([`Log::load_segment_usage`]).
    #[must_use]
    pub fn live_tree_is_loose(&self) -> bool {
        let fixed = self.pins_but(&self.snaps.turns);
        let (mut holding, mut bytes) = (0u64, 0u64);
        for s in (0..self.sb.segment_count).map(SegmentNo) {
            let pinned = match &fixed {
                Some(f) => f.contains(&s),
                None => self.snaps.pins.contains_key(&s),
            };
            if pinned || self.ifile.segment_known(s).is_none() {
                continue;
            }
            let live = self.segment_live_bytes(s);
            if live > 0 {
                holding += 1;
                bytes += live;
            }
        }
        holding > 2 * bytes.div_ceil(u64::from(self.sb.segment_blocks) * BLOCK_BYTES) + 2
    }

    fn pick_victims_among(
        &self,
        policy: Policy,
        count: usize,
        max_utilization: f64,
        turns: &[String],
    ) -> Vec<SegmentNo> {
        let fixed = self.pins_but(turns);
        let movable = |s: &SegmentNo| match &fixed {
            None => !self.snaps.pins.contains_key(s),
            Some(fixed) => !fixed.contains(s) && (!self.snaps.pins.contains_key(s) || self.segment_live_bytes(*s) > 0),
        };
        let now = self.head.seq.0;
        let mut scored: Vec<(f64, SegmentNo)> = (0..self.sb.segment_count)
            .map(SegmentNo)
            .filter(|&s| self.ifile.segment_known(s).is_some())
            .filter(|&s| s != self.head.segment && s != self.head.next_segment && !self.segment_is_free(s))
            // What a snapshot keeps stays where its image names it.
            .filter(movable)
            .filter_map(|s| {
                let u = self.utilization(s);
                if u >= max_utilization {
                    return None;
                }
                let score = match policy {
                    Policy::Greedy => 1.0 - u,
                    Policy::CostBenefit => {
                        let age = now.saturating_sub(self.ifile.segment(s).last_seq.0) as f64 + 1.0;
                        (1.0 - u) * age / (1.0 + u)
                    }
                };
                Some((score, s))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(count).map(|(_, s)| s).collect()
    }

    /// Reads the descriptors of segment `s` and returns what is still live
    /// in it, counting the segment and the blocks read in the cleaner's stats.
    ///
    /// # Errors
    /// The device fails.
    pub fn live_in_segment(&mut self, s: SegmentNo) -> Result<LiveSet> {
        // Inodes anywhere may have records here: the map blocks of those
        // the descriptors name are read as they come (inode-map blocks
        // here to move are told by their addresses, always in memory).
        let mut live = LiveSet::default();
        let mut off = 0u32;
        let mut read = 0u64;
        let mut last_seq = None;
        let start = self.ifile.geometry().start(s).0;
        // A segment is written from its start in one pass; the first
        // descriptor that does not decode, or goes back in sequence, ends it.
        while off < self.sb.segment_blocks {
            let Ok((desc, _, n)) = self.read_descriptor(s, off, None)? else { break };
            // A twin repeats the sequence of the partial segment before it.
            let twin = desc.flags & crate::format::descriptor::PS_TWIN != 0;
            if last_seq.is_some_and(|l| desc.seq < l || (desc.seq == l && !twin)) {
                break;
            }
            last_seq = Some(desc.seq);
            read += n as u64;
            let first_body = start + u64::from(off) + n as u64;
            for (i, sum) in desc.blocks.iter().enumerate() {
                let at = MetaBlock(first_body + i as u64);
                match sum.kind {
                    BlockKind::Node | BlockKind::Blob => {
                        if self.ifile.node_address(NodeId(sum.name)) == at {
                            live.nodes.push(NodeId(sum.name));
                        }
                    }
                    BlockKind::IFileTable | BlockKind::IFileIndex => {
                        let table = TableId::from_code((sum.name >> 32) as u8);
                        let b = sum.name as u32;
                        if let Some(t) = table {
                            let current = if sum.kind == BlockKind::IFileTable {
                                self.table_block_address(t, b)?
                            } else {
                                self.ckpt.index.get(&(t, b / INDEX_PER_BLOCK as u32)).copied()
                            };
                            // Moving an index block means rewriting one table
                            // block it lists: the chunk then goes out whole.
                            if current == Some(at) {
                                live.ifile.push((t, b));
                            }
                        }
                    }
                    // Kept in place by their pins while they matter.
                    BlockKind::Descriptor | BlockKind::Inodes | BlockKind::SnapshotList | BlockKind::Snapshot => {}
                }
            }
            let first_inode_block = first_body + desc.blocks.len() as u64;
            for (i, list) in desc.inode_blocks.iter().enumerate() {
                let at = MetaBlock(first_inode_block + i as u64);
                for sum in list {
                    self.ensure_inode_block(sum.ino)?;
                    if self.ifile.inode(sum.ino).is_some_and(|e| e.in_use() && e.address == at) {
                        live.inodes.push(sum.ino);
                    }
                }
            }
            off += desc.total_blocks() as u32;
        }
        self.stats.cleaner.segments_read += 1;
        self.stats.cleaner.blocks_read += read;
        Ok(live)
    }

    /// Ends a cleaning pass over `victims`: counts it, and the victims that
    /// are free now, in the cleaner's stats. Returns that count.
    pub fn finish_clean_pass(&mut self, victims: &[SegmentNo]) -> u64 {
        let freed = victims.iter().filter(|&&v| self.segment_is_free(v)).count() as u64;
        self.stats.cleaner.passes += 1;
        self.stats.cleaner.segments_freed += freed;
        freed
    }

    /// Where block `b` of table `t` durably lives (its chunk's index block
    /// read first), if the table has it.
    fn table_block_address(&mut self, t: TableId, b: u32) -> Result<Option<MetaBlock>> {
        let source = self.table_source();
        for tab in tables(self) {
            if tab.table_id() == t {
                if b as usize >= tab.blocks() {
                    return Ok(None);
                }
                tab.read_chunk(b / INDEX_PER_BLOCK as u32, &source)?;
                return Ok(Some(tab.block_address(b)));
            }
        }
        Ok(None)
    }

    /// Marks live objects dirty so that the next commit group (and, for
    /// IFile blocks, the next checkpoint) writes them elsewhere.
    ///
    /// # Errors
    /// A live object cannot be read.
    pub fn relocate(&mut self, nodes: &[NodeId], inodes: &[InodeNo], ifile: &[(TableId, u32)]) -> Result<()> {
        for &id in nodes {
            // Freed or rewritten since the scan: nothing to move.
            if self.ifile.node_address(id).0 == 0 {
                continue;
            }
            self.object(id)?;
            self.cache.touch_object(id);
            self.stats.cleaner.nodes_moved += 1;
        }
        for &ino in inodes {
            // (Its map block may have been given back since the scan.)
            self.ensure_inode_block(ino)?;
            if !self.ifile.inode(ino).is_some_and(|e| e.in_use()) {
                continue;
            }
            drop(self.inode_mut(ino)?);
            self.stats.cleaner.inodes_moved += 1;
        }
        for &(t, b) in ifile {
            // A table block is written from memory: read it first.
            match t {
                TableId::Bitmap => self.space.load_bitmap_block(b)?,
                TableId::GroupDesc => self.space.load_group_block(b)?,
                TableId::InodeMap => {
                    let first = u64::from(b) * self.ifile.inodes.per_block() as u64;
                    self.ensure_inode_block(InodeNo(first))?;
                }
                TableId::SegmentUsage => {
                    let first = b as usize * self.ifile.segments.per_block();
                    if first < self.ifile.segments.len() {
                        self.ensure_usage(SegmentNo(first as u32))?;
                    }
                }
                TableId::NodeMap => {}
            }
            for tab in tables(self) {
                if tab.table_id() == t {
                    tab.touch(b);
                }
            }
            self.stats.cleaner.ifile_blocks_moved += 1;
        }
        Ok(())
    }
}
