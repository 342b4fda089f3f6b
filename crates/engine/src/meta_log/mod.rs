//! The meta-data log: the only home of every piece of meta-data.
//!
//! [`Log`] owns the IFile, the data-space allocator and the meta-data cache,
//! and turns dirty meta-data into partial segments ([`seal`]), partial
//! segments into checkpoints ([`checkpoint`]), and, at mount, a checkpoint
//! plus the partial segments after it back into a consistent IFile
//! ([`recovery`]).
//!
//! The commit point of a file-system operation is the durability of the
//! partial segment that holds its blocks; everything else in this module
//! arranges for each operation to land whole in one of them.

pub mod beyond;
pub mod cache;
pub mod checkpoint;
pub mod cleaner;
pub mod discard;
pub mod fsync;
pub mod ifile_load;
pub mod lazy_imap;
pub mod live;
pub mod log_end;
pub mod mend;
pub mod mount;
pub mod quota_usage;
pub mod readahead;
pub mod rebuild;
pub mod recovery;
pub mod resize;
pub mod seal;
pub mod segments;
pub mod snapshot;
mod snapshot_load;
mod snapshot_records;
pub mod tree;
pub mod tree_space;

use std::sync::Arc;

pub use cache::{InodeGuard, MetaCache, Object};
use checkpoint::DurableCheckpoint;
pub use seal::SealedGroup;

use crate::data_space::DataSpace;
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::block::{self, BlockKind, PAYLOAD_LEN};
use crate::format::checkpoint::LogPosition;
use crate::format::descriptor::Change;
use crate::format::inode::InodeRecord;
use crate::format::inode_block;
use crate::format::node::{Node, NodeSource, NodeStore};
use crate::format::superblock::Superblock;
use crate::ifile::IFile;
use crate::types::{BLOCK_SIZE, InodeNo, MetaBlock, NodeId, Seq};

/// Most blocks one operation may add to the active commit group. Every
/// operation checks for this much room before it starts, which is what makes
/// each operation land whole in one group.
pub const OP_MAX_BLOCKS: usize = 48;

/// Default limit of a commit group (16 MiB): large enough that hot
/// directory leaves are written once per commit, small enough to bound
/// memory and roll-forward.
pub const DEFAULT_GROUP_BLOCKS: usize = 4096;

/// Counters for `inspect` and benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogStats {
    /// Partial segments written.
    pub partial_segments: u64,
    /// Blocks written to the meta-data device.
    pub meta_blocks_written: u64,
    /// Blocks written to the data device.
    pub data_blocks_written: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Checkpoints that wrote every IFile index block again, to join the
    /// index's runs (`INDEX_RUNS`).
    pub index_rewrites: u64,
    /// Fsync partial segments written (included in `partial_segments`).
    pub fsync_partial_segments: u64,
    /// Blocks written as twins of partial segments a caller waited for
    /// (included in `meta_blocks_written`).
    pub twin_blocks: u64,
    /// The cleaner's work.
    pub cleaner: cleaner::CleanerStats,
}

/// The meta-data log and everything it keeps consistent.
#[derive(Debug)]
pub struct Log {
    /// Geometry and identity of the volume: the geometry in use (the
    /// checkpoint's, on a resized volume).
    sb: Superblock,
    /// The meta-data device's superblock as on disk: after a resize cut
    /// short, its geometry (the devices' reach) exceeds the one in use.
    on_disk: Superblock,
    /// Segments the log may write into: those below the geometry of the
    /// durable checkpoint. Segments a grow adds wait for the checkpoint
    /// that names them, so that nothing reaches them while a crash would
    /// still mount the old size (DESIGN.md, "Resize").
    usable_segments: u32,
    /// Segments at or past this one are not written into: a shrink of the
    /// log is emptying them (`u32::MAX` otherwise).
    segment_limit: u32,
    volume_id: u64,
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    /// Inode map, node map, segment usage.
    ifile: IFile,
    /// Data-group descriptors, bitmap and the allocator.
    space: DataSpace,
    /// Decoded meta-data.
    cache: MetaCache,
    /// Where the next partial segment goes.
    head: LogPosition,
    /// Change records for the active partial segment.
    changes: Vec<Change>,
    change_bytes: usize,
    /// Newest partial segment known durable.
    durable: Seq,
    /// What each descriptor written vouches for (its header `owner`, see
    /// FORMAT.md 3.3): the newest sequence known durable *and* reachable by
    /// roll-forward from the durable checkpoint, so that a later search past
    /// a damaged block can tell acknowledged commits from a torn tail.
    vouched: Seq,
    /// The head was moved off the checkpoint's chain by recovery and no
    /// checkpoint records it yet: commits written meanwhile vouch for
    /// nothing new (a crash now would make them unreachable).
    detached: bool,
    /// The next normal commit group is one a caller waits for: its partial
    /// segments get twins (`Log::twin_next_group`).
    twin_next: bool,
    ckpt: DurableCheckpoint,
    blocks_since_checkpoint: u64,
    /// Free segments as of the last seal or checkpoint (frees in between
    /// only add to it, so it errs on the safe side).
    free_segments_cached: u32,
    /// Most blocks a commit group may grow to.
    group_limit: usize,
    /// Counters.
    stats: LogStats,
    /// Raw blocks read ahead of cold meta-data misses.
    readahead: readahead::ReadAhead,
    /// Counts the loaded checkpoint had wrong and loading recounted from
    /// what they derive from (segment live bytes), one sentence each.
    recounted: Vec<String>,
    /// Inode-map blocks kept in memory at most (None: every block read
    /// stays): [`Log::trim_inode_map`] gives back clean ones past it.
    inode_map_keep: Option<usize>,
    /// Segment-usage blocks kept in memory at most (None: every block read
    /// stays): [`Log::trim_usage_table`] gives back clean ones past it.
    usage_keep: Option<usize>,
    /// Group-table and bitmap blocks kept in memory at most (None: every
    /// block read stays): [`Log::trim_data_space`] gives back clean ones.
    space_keep: Option<usize>,
    /// A checkpoint was sealed and is not written yet: the table blocks it
    /// placed have addresses but not yet their bytes there.
    checkpoint_unwritten: bool,
    /// Fsync partial segments roll-forward found after the last complete
    /// commit group, for the volume to replay.
    pending_fsync: Vec<fsync::PendingFsync>,
    /// The snapshots and what they keep.
    snaps: snapshot::Snapshots,
    /// The record of the newest checkpoint written or loaded (a snapshot
    /// keeps one).
    last_record: Option<crate::format::checkpoint::Checkpoint>,
    /// Index entries past which a checkpoint writes every index block
    /// again to join their runs: what a snapshot block holds (lowered by
    /// tests, which cannot afford an IFile of 242 index blocks each).
    index_entry_limit: usize,
    /// What the checkpoint before the durable one needs (unknown until a
    /// checkpoint is written after the open): segments it may read are
    /// not discarded ([`discard`]).
    previous: Option<discard::PreviousCheckpoint>,
    /// The number of the checkpoint the volume was opened from.
    opened_at: u64,
    /// The other slot's (older) checkpoint lists other snapshots than the
    /// one opened from: what a snapshot deleted since holds is free here
    /// but not there, until a checkpoint overwrites that slot.
    older_lists_other: bool,
}

impl Log {
    /// Geometry and identity of the volume.
    #[must_use]
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The meta-data device's superblock as last written (its geometry is
    /// the devices' reach, at least the one in use).
    #[must_use]
    pub fn superblock_on_disk(&self) -> &Superblock {
        &self.on_disk
    }

    /// Records that `sb` was written to both devices. Its geometry must
    /// reach at least as far as the one in use.
    pub fn superblock_written(&mut self, sb: Superblock) {
        assert!(
            sb.segment_count >= self.sb.segment_count && sb.data_blocks >= self.sb.data_blocks,
            "a superblock that does not reach the geometry in use"
        );
        self.sb.incompat = sb.incompat;
        self.sb.minor = sb.minor;
        // A migration names a new device.
        self.sb.meta_uuid = sb.meta_uuid;
        self.sb.data_uuid = sb.data_uuid;
        // `dualfs mirror` changes the mirror.
        self.sb.meta_copies = sb.meta_copies;
        self.sb.mirror_state = sb.mirror_state;
        self.sb.mirror_generation = sb.mirror_generation;
        self.on_disk = sb;
    }

    /// Inode map, node map and segment usage, to read: they change only
    /// through the log's own steps, which keep them and the cache in step.
    #[must_use]
    pub fn ifile(&self) -> &IFile {
        &self.ifile
    }

    /// The data device's groups, bitmap and allocator, to read.
    #[must_use]
    pub fn space(&self) -> &DataSpace {
        &self.space
    }

    /// The data-device allocator, for the namespace's reservations and
    /// write-back (its frees wait for the partial segment that records them).
    pub fn space_mut(&mut self) -> &mut DataSpace {
        &mut self.space
    }

    /// Whether `ino` is on the orphan list (in use, waiting to be freed or
    /// to have its blocks beyond its size released).
    #[must_use]
    pub fn is_orphan(&self, ino: InodeNo) -> bool {
        // An inode whose map block is still on disk was not touched since
        // the mount, so no one holds it: nothing asks about it but FORGET
        // of an inode looked up (whose block was read then).
        // (The orphan list is kept for blocks given back too.)
        self.ifile.is_orphan(ino)
    }

    /// The log's and the cleaner's counters.
    #[must_use]
    pub fn stats(&self) -> LogStats {
        self.stats
    }

    /// Limits the meta-data cache to `entries` decoded inodes and objects
    /// and to `bytes` of memory (as [`MetaCache::bytes`] reckons it).
    pub fn set_cache_limits(&mut self, entries: usize, bytes: usize) {
        self.cache.set_limits(entries, bytes);
    }

    /// Evicts from the meta-data cache if it is an eighth past its limits
    /// (between operations only).
    pub fn trim_cache_if_over(&mut self) {
        self.cache.trim_if_over(self.durable);
        self.trim_tables();
    }

    /// What the log holds in memory, as counts: cached inodes, cached
    /// objects, read-ahead blocks, inode-map and node-map entries, data
    /// bitmap blocks read.
    #[must_use]
    pub fn memory_counts(&self) -> [(&'static str, u64); 15] {
        let (inodes, objects) = self.cache.counts();
        [
            ("cache_inodes", inodes as u64),
            ("cache_objects", objects as u64),
            ("cache_bytes", self.cache.bytes() as u64),
            ("readahead_blocks", self.readahead.held() as u64),
            ("inode_map_entries", self.ifile.inodes.len() as u64),
            // Blocks the mount left on disk and nothing has read yet.
            ("inode_map_blocks_on_disk", self.ifile.inodes.unloaded_blocks() as u64),
            ("inode_map_blocks_loaded", self.ifile.inodes.loaded_blocks() as u64),
            // Kept past the budget: an inode of theirs is cached.
            ("inode_map_blocks_pinned", self.cache.map_blocks_held() as u64),
            // Kept until the next checkpoint writes them.
            ("inode_map_blocks_dirty", self.ifile.inodes.dirty_count() as u64),
            ("node_map_entries", self.ifile.nodes.len() as u64),
            ("bitmap_blocks_loaded", self.space.bitmap.loaded_blocks() as u64),
            ("usage_blocks_loaded", self.ifile.segments.loaded_blocks() as u64),
            ("group_blocks_loaded", self.space.groups.loaded_blocks() as u64),
            // Groups whose last allocation's end is remembered.
            ("group_cursors", self.space.cursors() as u64),
            // Index chunks whose addresses are in memory, and the slots
            // for them (what grows with the devices' size, as used).
            ("ifile_chunks_loaded", self.ifile_chunks().0 as u64),
        ]
    }

    /// IFile index chunks in memory, and chunk slots, over every table.
    #[must_use]
    pub fn ifile_chunks(&self) -> (usize, usize) {
        let t = [
            self.ifile.segments.chunks_in_memory(),
            self.ifile.inodes.chunks_in_memory(),
            self.ifile.nodes.chunks_in_memory(),
            self.space.groups.chunks_in_memory(),
            self.space.bitmap.chunks_in_memory(),
        ];
        t.iter().fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    }

    /// Misses that read a window ahead, and blocks served from one.
    #[must_use]
    pub fn readahead_counts(&self) -> (u64, u64) {
        (self.readahead.windows, self.readahead.hits)
    }

    /// An inode's record if it is in the cache, without reading it in or
    /// counting the use.
    #[must_use]
    pub fn cached_inode(&self, ino: InodeNo) -> Option<&InodeRecord> {
        self.cache.peek_inode(ino)
    }

    /// Whether `ino` changed since the last seal.
    #[must_use]
    pub fn inode_is_dirty(&self, ino: InodeNo) -> bool {
        self.cache.is_dirty_inode(ino)
    }

    /// Inodes changed since the last seal.
    #[must_use]
    pub fn dirty_inodes(&self) -> Vec<InodeNo> {
        self.cache.dirty_inodes()
    }

    /// The owners of the nodes and blobs changed since the last seal.
    #[must_use]
    pub fn dirty_object_owners(&self) -> std::collections::HashSet<InodeNo> {
        self.cache.dirty_objects().into_iter().map(|(owner, _)| owner).collect()
    }

    /// The change records of the active commit group.
    #[must_use]
    pub fn pending_changes(&self) -> &[Change] {
        &self.changes
    }

    /// Replaces the set of inodes the cache never evicts (those whose newest
    /// record is not yet the one on disk).
    pub fn pin_inodes(&mut self, pinned: std::collections::HashSet<InodeNo>) {
        self.cache.set_pinned(pinned);
    }

    /// The volume id stamped in every block.
    #[must_use]
    pub fn volume_id(&self) -> u64 {
        self.volume_id
    }

    /// The meta-data device.
    #[must_use]
    pub fn meta_device(&self) -> &Arc<dyn BlockDevice> {
        &self.meta
    }

    /// The data device.
    #[must_use]
    pub fn data_device(&self) -> &Arc<dyn BlockDevice> {
        &self.data
    }

    /// Newest durable partial segment.
    #[must_use]
    pub fn durable(&self) -> Seq {
        self.durable
    }

    /// Where the next partial segment goes.
    #[must_use]
    pub fn head(&self) -> LogPosition {
        self.head
    }

    /// Whether the log resumes somewhere no roll-forward from the durable
    /// checkpoint reaches (recovery moved it past a torn tail, a twin left
    /// behind or partial segments past the end): until a checkpoint names
    /// the new position, nothing written is reachable after a crash.
    #[must_use]
    pub fn is_detached(&self) -> bool {
        self.detached
    }

    /// Log blocks written since the last checkpoint (what recovery would scan).
    #[must_use]
    pub fn blocks_since_checkpoint(&self) -> u64 {
        self.blocks_since_checkpoint
    }

    /// Number of the newest durable checkpoint.
    #[must_use]
    pub fn checkpoint_number(&self) -> u64 {
        self.ckpt.number
    }

    /// The highest inode number the log could hold (30 records a block):
    /// a larger one read from disk is corruption, and would make the inode
    /// map grow without bound.
    #[must_use]
    pub fn max_inode_number(&self) -> u64 {
        self.max_node_id() * 30
    }

    /// The highest node id the log could hold (one node a block).
    #[must_use]
    pub fn max_node_id(&self) -> u64 {
        u64::from(self.sb.segment_count) * u64::from(self.sb.segment_blocks)
    }

    /// Reads `count` blocks of the meta-data device.
    ///
    /// # Errors
    /// The device fails.
    pub fn read_meta(&self, at: MetaBlock, count: usize) -> Result<Vec<u8>> {
        device::read(self.meta.as_ref(), DeviceRole::Meta, at.0, count)
    }

    /// Reads one block of the log for the cache, reading ahead the window
    /// around it on a miss (see [`readahead`]).
    fn read_meta_ahead(&mut self, at: MetaBlock) -> Result<Vec<u8>> {
        if let Some(b) = self.readahead.take(at) {
            return Ok(b.into_vec());
        }
        if self.readahead.defer {
            return Err(Error::MustRead(at.0));
        }
        let Some((start, count)) = readahead::ReadAhead::window(&self.sb, at) else {
            return self.read_meta(at, 1);
        };
        let raw = self.read_meta(start, count)?;
        let i = (at.0 - start.0) as usize * BLOCK_SIZE;
        let block = raw[i..i + BLOCK_SIZE].to_vec();
        self.readahead.fill(start, &raw, at);
        Ok(block)
    }

    /// While set, a cache miss does not read the device but fails with
    /// [`Error::MustRead`]: the caller holds the volume lock and reads the
    /// block without it ([`Log::read_window`], [`Log::fill_read_window`]).
    pub fn set_defer_reads(&mut self, on: bool) {
        self.readahead.defer = on;
    }

    /// What to read for a miss on `at`, and the read-ahead generation to
    /// hand back to [`Log::fill_read_window`] with the bytes.
    #[must_use]
    pub fn read_window(&self, at: MetaBlock) -> (MetaBlock, usize, u64) {
        let (start, count) = readahead::ReadAhead::window(&self.sb, at).unwrap_or((at, 1));
        (start, count, self.readahead.generation())
    }

    /// Keeps a window read without the lock, unless the log rewrote any
    /// block since `generation`. Returns whether it was kept.
    pub fn fill_read_window(&mut self, generation: u64, start: MetaBlock, raw: &[u8]) -> bool {
        self.readahead.fill_if(generation, start, raw)
    }

    // ---- change records ----

    /// Adds a change record to the active partial segment.
    pub fn record(&mut self, c: Change) {
        self.change_bytes += 13;
        self.changes.push(c);
    }

    /// Whether there is anything to seal.
    #[must_use]
    pub fn has_dirty(&self) -> bool {
        !self.changes.is_empty() || self.cache.dirty_inode_count() > 0 || self.cache.dirty_object_count() > 0
    }

    /// An upper bound of the blocks the active commit group would take if
    /// sealed now.
    #[must_use]
    pub fn estimate_blocks(&self) -> usize {
        let objects = self.cache.dirty_object_count();
        let inodes = self.cache.dirty_inode_count();
        let bytes = self.cache.dirty_inode_bytes() + inodes * 12;
        // Records are packed in order; a block is closed only when the next
        // record does not fit, so each loses less than the largest record.
        let per_block = PAYLOAD_LEN - 2 - self.cache.max_dirty_record().max(1);
        let inode_blocks = bytes.div_ceil(per_block) + usize::from(inodes > 0);
        let desc_bytes = 68 + objects * 19 + inodes * 14 + inode_blocks * 2 + self.change_bytes;
        let body = objects + inode_blocks + desc_bytes.div_ceil(PAYLOAD_LEN);
        // Every segment the group reaches into needs a descriptor of its own.
        body + body.div_ceil(self.sb.segment_blocks as usize - 1) + 1
    }

    /// Log blocks operations of `kind` may still fill: the rest of the
    /// current segment, and one segment for each free segment beyond the
    /// reserve (moving into the reserved next segment takes a free one to
    /// become the next after it).
    #[must_use]
    pub fn available_blocks(&self, kind: segments::OpKind) -> usize {
        let seg = self.sb.segment_blocks as usize;
        let reserve = self.reserve_for(kind);
        let spare = self.free_segments_cached.saturating_sub(reserve) as usize;
        (seg - self.head.offset as usize) + spare * seg
    }

    /// Whether the active commit group must be sealed before another
    /// operation may start: it reached its size limit, or the room left.
    #[must_use]
    pub fn needs_seal(&self) -> bool {
        let est = self.estimate_blocks();
        est > 0
            && self.has_dirty()
            && est + OP_MAX_BLOCKS > self.group_limit.min(self.available_blocks(segments::OpKind::Grow))
    }

    /// Whether an operation that may dirty `blocks` log blocks (more than
    /// [`OP_MAX_BLOCKS`]: a collapse or insert rewriting an extent tree)
    /// may start in the active commit group: within its size limit, or,
    /// when the group holds nothing yet, within the room left. An empty
    /// group takes an operation past the limit, so that the operation is
    /// never cut in two.
    #[must_use]
    pub fn has_room_for(&self, blocks: usize) -> bool {
        let est = self.estimate_blocks();
        let limit = if self.has_dirty() { self.group_limit } else { usize::MAX };
        est + blocks + OP_MAX_BLOCKS <= limit.min(self.available_blocks(segments::OpKind::Grow))
    }

    // ---- inodes ----

    /// Reads an inode (through the cache).
    ///
    /// # Errors
    /// `NotFound` for a free inode number; I/O or corruption errors.
    pub fn inode(&mut self, ino: InodeNo) -> Result<&InodeRecord> {
        self.load_inode(ino)?;
        self.cache.inode(ino).ok_or(Error::NotFound)
    }

    /// Reads an inode for modification.
    ///
    /// # Errors
    /// As [`Log::inode`].
    pub fn inode_mut(&mut self, ino: InodeNo) -> Result<InodeGuard<'_>> {
        self.load_inode(ino)?;
        self.cache.inode_mut(ino).ok_or(Error::NotFound)
    }

    fn load_inode(&mut self, ino: InodeNo) -> Result<()> {
        if self.cache.has_inode(ino) {
            return Ok(());
        }
        self.ensure_inode_block(ino)?;
        let entry = match self.ifile.inode(ino) {
            Some(e) if e.in_use() && ino.0 != 0 => e,
            _ => return Err(Error::NotFound),
        };
        if entry.address.0 == 0 {
            return Err(Error::corrupt_meta("inode map", 0, format!("inode {ino} is in use but has no location")));
        }
        let block = self.read_meta_ahead(entry.address)?;
        let (_, payload) = block::open_block_of_kind(&block, entry.address, self.volume_id, BlockKind::Inodes)
            .map_err(|e| Error::corrupt_meta("inode block", entry.address.0, e.0))?;
        let records =
            inode_block::decode_all(payload).map_err(|e| Error::corrupt_meta("inode block", entry.address.0, e.0))?;
        let mut found = false;
        // Neighbours written together are usually wanted together (a
        // directory's files); keep every record still live in this block.
        for rec in records {
            // The group indexes the allocator's tables: out of range is
            // damage, not a hint to clamp (a neighbour so damaged is not
            // cached: its own read says so).
            let group_ok = rec.group.0 < self.sb.group_count;
            // (A neighbour whose map block is still on disk is left there.)
            let live = group_ok
                && self.ifile.inode_if_loaded(rec.ino).is_some_and(|e| e.in_use() && e.address == entry.address);
            if rec.ino == ino {
                if !group_ok {
                    return Err(Error::corrupt_meta(
                        "inode block",
                        entry.address.0,
                        format!("inode {ino} names data group {}, the volume has {}", rec.group.0, self.sb.group_count),
                    ));
                }
                if rec.generation != entry.generation {
                    return Err(Error::corrupt_meta(
                        "inode block",
                        entry.address.0,
                        format!(
                            "inode {ino} has generation {} but the inode map says {}",
                            rec.generation, entry.generation
                        ),
                    ));
                }
                found = true;
            }
            if live {
                self.cache.insert_clean_inode(rec);
            }
        }
        if !found {
            return Err(Error::corrupt_meta(
                "inode block",
                entry.address.0,
                format!("inode {ino} is not in the block the inode map names"),
            ));
        }
        Ok(())
    }

    /// Takes a free inode number, caches `rec` under it as dirty, and returns it.
    ///
    /// # Errors
    /// The map block of the number to take cannot be read.
    pub fn create_inode(&mut self, mut rec: InodeRecord) -> Result<InodeNo> {
        self.ready_free_inode()?;
        let (ino, generation) = self.ifile.alloc_inode();
        rec.ino = ino;
        rec.generation = generation;
        self.cache.insert_dirty_inode(rec);
        Ok(ino)
    }

    /// Brings inode number `rec.ino` into use with `rec` as its record
    /// (replaying an fsync record of a new inode): it is written with the
    /// next commit group.
    ///
    /// # Errors
    /// `Corrupt` when the number is in use already.
    pub fn claim_inode(&mut self, rec: InodeRecord) -> Result<()> {
        self.ensure_inode_block(rec.ino)?;
        if !self.ifile.claim_inode(rec.ino, rec.generation) {
            return Err(Error::corrupt_meta(
                "fsync record",
                0,
                format!("it creates inode {}, which is in use", rec.ino),
            ));
        }
        self.cache.insert_dirty_inode(rec);
        Ok(())
    }

    /// Releases an inode whose blocks are already gone.
    ///
    /// # Errors
    /// The inode cannot be read.
    pub fn destroy_inode(&mut self, ino: InodeNo) -> Result<()> {
        let generation = self.inode(ino)?.generation.wrapping_add(1);
        self.cache.remove_inode(ino);
        self.ifile.free_inode(ino, generation);
        self.record(Change::InodeFree { ino, generation });
        Ok(())
    }

    /// Puts `ino` on the orphan list or takes it off.
    ///
    /// # Errors
    /// Its inode-map block, given back, cannot be read again.
    pub fn set_orphan(&mut self, ino: InodeNo, orphan: bool) -> Result<()> {
        self.ensure_inode_block(ino)?;
        self.ifile.set_orphan(ino, orphan);
        self.record(if orphan { Change::OrphanAdd(ino) } else { Change::OrphanRemove(ino) });
        Ok(())
    }

    // ---- nodes and blobs ----

    /// Reads an object (through the cache).
    ///
    /// # Errors
    /// A free node id, or I/O or corruption errors.
    pub fn object(&mut self, id: NodeId) -> Result<&Object> {
        self.load_object(id)?;
        self.cache.object(id).ok_or(Error::NotFound)
    }

    /// Reads an object for modification.
    ///
    /// # Errors
    /// As [`Log::object`].
    pub fn object_mut(&mut self, id: NodeId) -> Result<&mut Object> {
        self.load_object(id)?;
        self.cache.object_mut(id).ok_or(Error::NotFound)
    }

    fn load_object(&mut self, id: NodeId) -> Result<()> {
        if self.cache.peek_object(id).is_some() {
            return Ok(());
        }
        let at = self.ifile.node_address(id);
        if at.0 == 0 {
            return Err(Error::corrupt_meta("node map", 0, format!("node {id} is referenced but not allocated")));
        }
        let raw = self.read_meta_ahead(at)?;
        let (h, payload) = block::open_block(&raw, at, self.volume_id)
            .map_err(|e| Error::corrupt_meta("meta-data block", at.0, e.0))?;
        if h.name != id.0 {
            return Err(Error::corrupt_meta(
                "meta-data block",
                at.0,
                format!("holds node {} where node {id} was expected", h.name),
            ));
        }
        let obj = match h.kind {
            BlockKind::Node => {
                Object::Node(Node::decode(payload, h.aux).map_err(|e| Error::corrupt_meta("B-tree node", at.0, e.0))?)
            }
            BlockKind::Blob => Object::Blob(payload.to_vec()),
            other => {
                return Err(Error::corrupt_meta("meta-data block", at.0, format!("node {id} is a {}", other.name())));
            }
        };
        self.cache.insert_clean_object(id, h.owner, obj);
        Ok(())
    }

    /// Names a new object owned by `owner`; it is written with the next partial segment.
    pub fn create_object(&mut self, owner: InodeNo, obj: Object) -> NodeId {
        let id = self.ifile.alloc_node();
        self.cache.insert_dirty_object(id, owner, obj);
        id
    }

    /// Releases an object.
    pub fn free_object(&mut self, id: NodeId) {
        self.cache.remove_object(id);
        self.ifile.free_node(id);
        self.record(Change::NodeFree(id));
    }

    /// The tree store through which B-trees owned by `owner` reach their nodes.
    pub fn tree(&mut self, owner: InodeNo) -> TreeStore<'_> {
        TreeStore { log: self, owner }
    }
}

/// The B-tree's view of the log: nodes by id, through the cache.
#[derive(Debug)]
pub struct TreeStore<'a> {
    log: &'a mut Log,
    owner: InodeNo,
}

fn not_a_node(id: NodeId, at: MetaBlock) -> Error {
    Error::corrupt_meta("meta-data block", at.0, format!("node {id} is a blob where a B-tree node was expected"))
}

impl TreeStore<'_> {
    /// A node reached from `owner`'s tree must say it belongs to `owner`.
    fn check_owner(&mut self, id: NodeId) -> Result<()> {
        self.log.load_object(id)?;
        match self.log.cache.owner(id) {
            Some(o) if o == self.owner => Ok(()),
            other => Err(Error::corrupt_meta(
                "B-tree node",
                self.log.ifile.node_address(id).0,
                format!(
                    "node {id} belongs to inode {} but was reached from inode {}",
                    other.unwrap_or_default(),
                    self.owner
                ),
            )),
        }
    }
}

impl NodeSource for TreeStore<'_> {
    fn node(&mut self, id: NodeId) -> Result<&Node> {
        self.check_owner(id)?;
        let at = self.log.ifile.node_address(id);
        match self.log.object(id)? {
            Object::Node(n) => Ok(n),
            Object::Blob(_) => Err(not_a_node(id, at)),
        }
    }
}

impl NodeStore for TreeStore<'_> {
    fn node_mut(&mut self, id: NodeId) -> Result<&mut Node> {
        self.check_owner(id)?;
        let at = self.log.ifile.node_address(id);
        match self.log.object_mut(id)? {
            Object::Node(n) => Ok(n),
            Object::Blob(_) => Err(not_a_node(id, at)),
        }
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        self.log.create_object(self.owner, Object::Node(node))
    }

    fn free(&mut self, id: NodeId) {
        self.log.free_object(id);
    }
}
