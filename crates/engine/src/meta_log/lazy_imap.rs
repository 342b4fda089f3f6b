//! The inode map left on disk at mount and read a block at a time: by the
//! operation that first needs an inode in a block (through the read-ahead
//! path, so a reader holding the volume lock never reads the device:
//! [`crate::Error::MustRead`]), by roll-forward for the inodes it replays,
//! and by the volume's background load in runs of blocks
//! ([`Log::unloaded_inode_runs`], [`Log::accept_inode_blocks`]). Whatever
//! needs the whole map (the cleaner, snapshots, repair, statfs's count)
//! reads what is left first ([`Log::load_whole_inode_map`]).

use super::Log;
use super::checkpoint::{open_table_block, read_scattered};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::ifile::TableId;
use crate::types::{InodeNo, MetaBlock};

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

    /// The inode-map blocks still on disk and their addresses, at most
    /// `max` of them, for a load without the lock.
    #[must_use]
    pub fn unloaded_inode_runs(&self, max: usize) -> Vec<(u32, MetaBlock)> {
        self.ifile.unloaded_inode_blocks().into_iter().take(max).map(|b| (b, self.ifile.inodes.address(b))).collect()
    }

    /// Takes inode-map blocks read without the lock (`raws` in the order of
    /// `blocks`). A block read meanwhile by an operation is kept as it is;
    /// one rewritten meanwhile cannot be (a block is written only once it
    /// was read).
    ///
    /// # Errors
    /// A block is not the inode-map block it should be.
    pub fn accept_inode_blocks(&mut self, blocks: &[(u32, MetaBlock)], raws: &[Vec<u8>]) -> Result<()> {
        for (&(b, at), raw) in blocks.iter().zip(raws) {
            // Checked before the bytes: a block read meanwhile may have been
            // written elsewhere since, and its old address reused.
            if self.ifile.inodes.is_loaded(b) {
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
