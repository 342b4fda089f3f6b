//! The space each tree holds, as `dualfs snapshot list` shows it
//! (DESIGN.md, "Space per tree").

use super::{Volume, lock};
use crate::meta_log::tree_space::TreeBlocks;
use crate::types::BLOCK_BYTES;

/// What a tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    /// The live tree.
    Live,
    /// A writable tree kept while another is live.
    Clone,
    /// A read-only snapshot.
    Snapshot,
}

/// The data space one tree or snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeSpace {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: TreeKind,
    /// Bytes of data no other tree or snapshot reaches: what deleting it
    /// frees on the data device.
    pub only_bytes: u64,
    /// Bytes of data it reaches that another tree or snapshot reaches too.
    pub shared_bytes: u64,
}

impl TreeSpace {
    /// Every byte of data it reaches.
    #[must_use]
    pub fn referenced_bytes(&self) -> u64 {
        self.only_bytes + self.shared_bytes
    }
}

impl Volume {
    /// The live tree, then every snapshot and kept tree oldest first, each
    /// with the data space only it holds and the space it shares, counted
    /// now from the trees' bitmaps.
    #[must_use]
    pub fn tree_spaces(&self) -> Vec<TreeSpace> {
        let mut fs = lock(&self.fs);
        // Counting takes every bitmap whole: a mount left the records'
        // bitmaps on disk, to be read a block at a time.
        if let Err(e) = fs.log.load_snapshot_bitmaps() {
            log::error!("the trees' bitmaps cannot be read to count their space: {e}");
        }
        let log = &fs.log;
        let blocks = log.tree_blocks();
        let live = (log.live_tree_name().to_string(), TreeKind::Live);
        let kept = log
            .snapshots()
            .iter()
            .map(|s| (s.name.clone(), if s.writable { TreeKind::Clone } else { TreeKind::Snapshot }));
        std::iter::once(live)
            .chain(kept)
            .zip(blocks)
            .map(|((name, kind), TreeBlocks { only, shared })| TreeSpace {
                name,
                kind,
                only_bytes: only * BLOCK_BYTES,
                shared_bytes: shared * BLOCK_BYTES,
            })
            .collect()
    }
}
