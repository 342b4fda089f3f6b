//! The inode map left on disk at mount and read a block at a time: by the
//! operation that first needs an inode in a block (through the read-ahead
//! path, so a reader holding the volume lock never reads the device:
//! [`crate::Error::MustRead`]), by roll-forward for the inodes it replays,
//! and by the volume's background load in runs of blocks
//! ([`Log::unloaded_inode_runs`], [`Log::accept_inode_blocks`]). Whatever
//! needs the whole map reads what is left first
//! ([`Log::load_whole_inode_map`]); a snapshot reads the blocks on disk
//! without keeping them ([`Log::inode_blocks_reached`]); what needs only the counts
//! (statfs, receive, the orphans of a writable open) waits for the
//! background load to have counted every block.
//!
//! With a budget ([`Log::set_inode_map_budget`]) a block read stays in
//! memory only while it is used or changed: between operations clean
//! blocks past the budget are given back ([`Log::trim_inode_map`]) and
//! read again, the same way as above, when next needed.

use super::Log;
use super::checkpoint::{open_table_block, read_scattered};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::ifile::TableId;
use crate::types::{BLOCK_SIZE, InodeNo, MetaBlock};

/// Inode-map blocks below which a mount reads the whole map at once: 256
/// blocks hold 62,000 inodes and take a few milliseconds to read.
pub const LAZY_INODE_MAP_MIN_BLOCKS: usize = 256;

/// The threshold in force: `DUALFS_LAZY_INODE_MAP_MIN_BLOCKS` overrides it,
/// so that the test suites can run every volume with its map on disk.
#[must_use]
pub fn lazy_inode_map_min_blocks() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("DUALFS_LAZY_INODE_MAP_MIN_BLOCKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(LAZY_INODE_MAP_MIN_BLOCKS)
    })
}

/// `DUALFS_INODE_MAP_BYTES`, if set: the inode map's budget of volumes
/// whose options do not give one, so that the test suites can run every
/// volume with its blocks given back.
#[must_use]
pub fn default_inode_map_bytes() -> Option<usize> {
    static BYTES: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| std::env::var("DUALFS_INODE_MAP_BYTES").ok().and_then(|v| v.parse().ok()))
}

/// Blocks read at a time by the background load and by
/// [`Log::load_whole_inode_map`]: 4 MiB, one request (a checkpoint writes
/// them together), then the lock is taken once to decode them.
pub const RUN_BLOCKS: usize = 1024;

/// Reads the meta-data device at `addresses`, neighbouring ones in one
/// request (no lock needed: the blocks of an inode map left on disk do not
/// move until they are read).
///
/// # Errors
/// The device fails.
pub fn read_blocks(meta: &dyn BlockDevice, addresses: &[MetaBlock]) -> Result<Vec<Vec<u8>>> {
    read_scattered(meta, addresses.iter().copied())
}

impl Log {
    /// Reads the inode-map block holding `ino` if it is not in memory yet.
    /// With reads deferred this fails with [`Error::MustRead`] for the
    /// block's read-ahead window, as a cache miss does.
    ///
    /// # Errors
    /// The device fails, or the block is not that inode-map block.
    pub(crate) fn ensure_inode_block(&mut self, ino: InodeNo) -> Result<()> {
        self.ifile.note_inode_use(ino);
        let Some(b) = self.ifile.unloaded_inode_block(ino) else { return Ok(()) };
        let at = self.ifile.inodes.address(b);
        let raw = self.read_meta_ahead(at)?;
        let payload = open_table_block(&raw, TableId::InodeMap, b, at, self.volume_id)?;
        self.take_inode_block(b, at, payload)
    }

    /// Reads the inode-map blocks of every inode in `inos` not in memory
    /// yet, neighbouring ones in one request (roll-forward).
    ///
    /// # Errors
    /// As [`Log::ensure_inode_block`].
    pub(crate) fn ensure_inode_blocks(&mut self, inos: impl Iterator<Item = InodeNo>) -> Result<()> {
        let mut blocks: Vec<u32> = inos.filter_map(|i| self.ifile.unloaded_inode_block(i)).collect();
        blocks.sort_unstable();
        blocks.dedup();
        self.read_inode_blocks(&blocks)
    }

    /// Reads every inode-map block not in memory yet (under the lock: for
    /// the rare callers that need the whole map).
    ///
    /// # Errors
    /// As [`Log::ensure_inode_block`].
    pub fn load_whole_inode_map(&mut self) -> Result<()> {
        let missing = self.ifile.unloaded_inode_blocks();
        for run in missing.chunks(RUN_BLOCKS) {
            self.read_inode_blocks(run)?;
        }
        Ok(())
    }

    /// The inode blocks the inode map names, each once, in order: for a
    /// snapshot, which pins what its map reaches. Blocks in memory are read
    /// there; the others are read from their durable copies in runs and
    /// dropped at once, not taken in: the map of ten million inodes is
    /// 160 MiB, and the budget holds an eighth of the cache limit. (The
    /// blocks in memory are what the last checkpoint wrote: a snapshot is
    /// taken right after one, and an image never changes.)
    ///
    /// # Errors
    /// A block read is not the inode-map block it should be.
    pub(crate) fn inode_blocks_reached(&self) -> Result<Vec<MetaBlock>> {
        let inodes = &self.ifile.inodes;
        let mut reached: Vec<u64> = Vec::new();
        // Numbers handed out together have their records together: most
        // repeats are neighbours, dropped before the sort.
        let mut add = |entries: &[crate::format::ifile::ImapEntry]| {
            for e in entries {
                if e.in_use() && e.address.0 != 0 && reached.last() != Some(&e.address.0) {
                    reached.push(e.address.0);
                }
            }
        };
        for b in 0..inodes.block_count() as u32 {
            if inodes.is_loaded(b) {
                add(&inodes.block_entries(b));
            }
        }
        for run in self.ifile.unloaded_inode_blocks().chunks(RUN_BLOCKS) {
            let addresses: Vec<MetaBlock> = run.iter().map(|&b| inodes.address(b)).collect();
            let raws = read_blocks(self.meta.as_ref(), &addresses)?;
            for ((&b, &at), raw) in run.iter().zip(&addresses).zip(&raws) {
                let payload = open_table_block(raw, TableId::InodeMap, b, at, self.volume_id)?;
                let entries =
                    inodes.decode_detached(b, payload).map_err(|e| Error::corrupt_meta("inode map", at.0, e.0))?;
                let n = inodes.per_block().min(inodes.len() - b as usize * inodes.per_block());
                add(&entries[..n]);
            }
        }
        reached.sort_unstable();
        reached.dedup();
        Ok(reached.into_iter().map(MetaBlock).collect())
    }

    /// The inode-map blocks never counted since the mount and their
    /// addresses, at most `max` of them (fewer with a small budget: a run
    /// is held whole until the next trim), for a load without the lock.
    #[must_use]
    pub fn unloaded_inode_runs(&self, max: usize) -> Vec<(u32, MetaBlock)> {
        let max = self.inode_map_keep.map_or(max, |keep| max.min((keep / 2).max(16)));
        self.ifile.uncounted_inode_blocks().into_iter().take(max).map(|b| (b, self.ifile.inodes.address(b))).collect()
    }

    /// Keeps at most `bytes` of inode-map blocks in memory once the volume
    /// serves (None: every block read stays, as the offline tools that walk
    /// the whole map want). A block is reckoned at 4 KiB, its entries'
    /// allocation.
    pub fn set_inode_map_budget(&mut self, bytes: Option<usize>) {
        self.inode_map_keep = bytes.map(|b| (b / BLOCK_SIZE).max(2));
    }

    /// Inode-map blocks kept at most, if bounded.
    #[must_use]
    pub fn inode_map_budget_blocks(&self) -> Option<usize> {
        self.inode_map_keep
    }

    /// Gives back clean inode-map blocks (unchanged since the checkpoint
    /// last written, which holds them) once an eighth more than the budget
    /// are in memory, down to the budget: between operations only
    /// (one counts on the blocks it read staying until it ends), and never
    /// a block an inode in the meta-data cache belongs to (a cached inode's
    /// entry is changed, by a seal, a free or the orphan list, without a
    /// read first).
    ///
    /// Blocks dirty or held by the cache (and the last) cannot go: no
    /// trim is tried unless more than those are in memory, so that a clock
    /// sweep over every block is not paid by every operation for nothing
    /// while the budget is below them.
    pub fn trim_inode_map(&mut self) {
        let Some(keep) = self.inode_map_keep else { return };
        // Clean means durable: a block the checkpoint being written placed
        // would be read back from where its bytes are not yet.
        if self.checkpoint_unwritten && !crate::faults::active(crate::faults::Fault::EvictBeforeCheckpointWritten) {
            return;
        }
        // (The broken rule counts dirty blocks as clean.)
        let dirty = if crate::faults::active(crate::faults::Fault::EvictDirtyMapBlocks) {
            0
        } else {
            self.ifile.inodes.dirty_count()
        };
        let kept = dirty + self.cache.map_blocks_held() + 1;
        if self.ifile.inodes.loaded_blocks() <= keep.max(kept) + keep / 8 {
            return;
        }
        let cache = &self.cache;
        self.ifile.evict_inode_blocks(keep, &|b| cache.holds_map_block(b));
    }

    /// Bounds the segment-usage blocks kept in memory to `bytes` (None:
    /// every block read stays).
    pub fn set_usage_budget(&mut self, bytes: Option<usize>) {
        self.usage_keep = bytes.map(|b| (b / BLOCK_SIZE).max(1));
    }

    /// What is given back between operations: clean inode-map blocks past
    /// their budget (the usage table's go in the background:
    /// [`Log::trim_usage_table`]).
    pub fn trim_tables(&mut self) {
        self.trim_inode_map();
    }

    /// Gives back clean segment-usage blocks once an eighth more than the
    /// budget are in memory, down to the budget; never while a sealed
    /// checkpoint is being written (its blocks' new addresses hold
    /// nothing yet), never the block of the segment the log writes into
    /// or of the one reserved to follow (read again at once otherwise),
    /// never while snapshots or kept trees exist (their counts read the
    /// entries of the segments they pin at any time). The caller makes
    /// sure no clean or resize is under way: they read entries of the
    /// table they read whole across several holds of the lock. The log
    /// takes a change to an entry not at hand as a delta, so a block
    /// given back costs a read when next needed and nothing else.
    pub fn trim_usage_table(&mut self) {
        let Some(keep) = self.usage_keep else { return };
        if self.checkpoint_unwritten || !self.snaps.all.is_empty() {
            return;
        }
        let pinned = [self.ifile.usage_block_of(self.head.segment), self.ifile.usage_block_of(self.head.next_segment)];
        let kept = self.ifile.segments.dirty_count() + if pinned[0] == pinned[1] { 1 } else { 2 };
        if self.ifile.segments.loaded_blocks() <= keep.max(kept) + keep / 8 {
            return;
        }
        self.ifile.evict_usage_blocks(keep, &pinned);
    }

    /// Bounds the group-table and bitmap blocks kept in memory to `bytes`
    /// (None: every block read stays).
    pub fn set_data_space_budget(&mut self, bytes: Option<usize>) {
        self.space_keep = bytes.map(|b| b / BLOCK_SIZE);
    }

    /// Gives back clean group-table and bitmap blocks once an eighth more
    /// than the budget are in memory, down to the budget
    /// ([`crate::data_space::DataSpace::evict_groups`]); never while a
    /// sealed checkpoint is being written (as for the usage table), nor
    /// while snapshots or kept trees exist (what they hold is counted
    /// against the whole bitmap). The caller makes sure no clean or
    /// resize is under way: they read groups across several holds of the
    /// lock. A group given back costs a read when the allocator or a
    /// free next needs it.
    pub fn trim_data_space(&mut self) {
        let Some(keep) = self.space_keep else { return };
        if self.checkpoint_unwritten || !self.snaps.all.is_empty() {
            return;
        }
        if self.space.blocks_in_memory() <= keep + keep / 8 {
            return;
        }
        let source = std::sync::Arc::new(self.table_source());
        self.space.evict_groups(keep, source);
    }

    /// Whether half the inode map's budget is dirty: only a checkpoint makes
    /// those blocks clean and so given back (a walk that stamps access
    /// times on directories dirties a block per directory).
    #[must_use]
    pub fn inode_map_wants_checkpoint(&self) -> bool {
        self.inode_map_keep.is_some_and(|keep| self.ifile.inodes.dirty_count() > keep / 2)
    }

    /// Reads the map block of the lowest free inode number if it is not in
    /// memory, so that [`crate::ifile::IFile::alloc_inode`] may take it.
    ///
    /// # Errors
    /// As [`Log::ensure_inode_block`].
    pub fn ready_free_inode(&mut self) -> Result<()> {
        match self.ifile.next_free_inode_unloaded() {
            Some(free) => self.ensure_inode_block(free),
            None => Ok(()),
        }
    }

    /// The inode-map entry of `ino` (None past the map's end), its block
    /// read first if needed: for walks over every number (the data mover,
    /// extract), which read under the lock.
    ///
    /// # Errors
    /// As [`Log::ensure_inode_block`].
    pub fn map_entry(&mut self, ino: InodeNo) -> Result<Option<crate::format::ifile::ImapEntry>> {
        self.ensure_inode_block(ino)?;
        Ok(self.ifile.inode(ino))
    }

    /// Takes inode-map blocks read without the lock (`raws` in the order of
    /// `blocks`). A block read meanwhile by an operation is kept as it is;
    /// one rewritten meanwhile (a block is written only once it was read)
    /// and given back since has another address, and is skipped too.
    ///
    /// # Errors
    /// A block is not the inode-map block it should be.
    pub fn accept_inode_blocks(&mut self, blocks: &[(u32, MetaBlock)], raws: &[Vec<u8>]) -> Result<()> {
        for (&(b, at), raw) in blocks.iter().zip(raws) {
            // Checked before the bytes: a block read meanwhile may have been
            // written elsewhere since, and its old address reused.
            if self.ifile.inodes.is_loaded(b) || self.ifile.inodes.address(b) != at {
                continue;
            }
            let payload = open_table_block(raw, TableId::InodeMap, b, at, self.volume_id)?;
            self.take_inode_block(b, at, payload)?;
        }
        Ok(())
    }

    fn read_inode_blocks(&mut self, blocks: &[u32]) -> Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let with_at: Vec<(u32, MetaBlock)> = blocks.iter().map(|&b| (b, self.ifile.inodes.address(b))).collect();
        let addresses: Vec<MetaBlock> = with_at.iter().map(|x| x.1).collect();
        let raws = read_blocks(self.meta.as_ref(), &addresses)?;
        self.accept_inode_blocks(&with_at, &raws)
    }

    fn take_inode_block(&mut self, b: u32, at: MetaBlock, payload: &[u8]) -> Result<()> {
        let wrong =
            self.ifile.accept_inode_block(b, payload).map_err(|e| Error::corrupt_meta("inode map", at.0, e.0))?;
        for (seg, had, want) in wrong {
            // What a complete load reports in its open report, said when
            // the last block came in.
            log::warn!("segment {} said {had} live bytes, its live inodes and nodes hold {want} (recounted)", seg.0);
        }
        Ok(())
    }
}
