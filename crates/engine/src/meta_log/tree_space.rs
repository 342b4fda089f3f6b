//! The data space each tree holds (DESIGN.md, "Space per tree"): for the
//! live tree and every kept record (snapshot or writable tree), the data
//! blocks only it reaches and those it shares, counted on demand from the
//! trees' bitmaps, as `zfs list` shows used and referenced and btrfs
//! qgroups exclusive and referenced.

use super::Log;

/// The data blocks one tree reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeBlocks {
    /// Reached by no other tree or snapshot: what deleting it frees.
    pub only: u64,
    /// Reached by at least one other tree or snapshot as well.
    pub shared: u64,
}

impl Log {
    /// The data blocks the live tree reaches, then each record's in the
    /// list's order. A deleted snapshot's bitmap still held (its
    /// checkpoint a mount's fallback) counts as another holder. Two passes
    /// over every bitmap, O(trees × bitmap words): the first finds the
    /// blocks two or more hold (bit-sliced counting), the second splits
    /// each tree's blocks by it.
    #[must_use]
    pub fn tree_blocks(&self) -> Vec<TreeBlocks> {
        let total = self.space.total_blocks();
        if !self.space.fully_loaded() {
            // Read as it is needed: nothing else holds anything then (a
            // volume keeping records loads it whole before counting,
            // `load_snapshot_bitmaps`), and the live tree holds what is
            // used but block 0 (the superblock copy).
            let used = total.saturating_sub(self.space.free_blocks() + self.space.pending_blocks()).saturating_sub(1);
            return std::iter::once(TreeBlocks { only: used, shared: 0 })
                .chain(self.snaps.all.iter().map(|_| TreeBlocks::default()))
                .collect();
        }
        let mut live: Vec<u64> = self.space.bitmap.entries().collect();
        // Freed by the live tree, set until the free is durable.
        for (first, end) in self.space.pending_runs() {
            for b in first..end {
                if let Some(w) = live.get_mut((b / 64) as usize) {
                    *w &= !(1u64 << (b % 64));
                }
            }
        }
        let mut trees: Vec<&[u64]> = vec![&live];
        trees.extend(self.snaps.all.iter().map(|s| s.bitmap.as_slice()));
        let retiring = self.snaps.retiring.iter().map(|(_, b)| b.as_slice());
        let words = trees.iter().copied().chain(retiring.clone()).map(<[u64]>::len).max().unwrap_or(0);
        let (mut once, mut twice) = (vec![0u64; words], vec![0u64; words]);
        for bitmap in trees.iter().copied().chain(retiring) {
            for ((o, t), &b) in once.iter_mut().zip(twice.iter_mut()).zip(bitmap) {
                *t |= *o & b;
                *o |= b;
            }
        }
        // Block 0 (the superblock copy) and the bits past the device's end
        // are set in every bitmap and belong to nobody: counted as shared
        // when two bitmaps or more are, else as the one's own.
        let nobody = 1 + (64 - total % 64) % 64;
        let holders = trees.iter().filter(|b| !b.is_empty()).count() + self.snaps.retiring.len();
        trees
            .iter()
            .map(|bitmap| {
                if bitmap.is_empty() {
                    return TreeBlocks::default();
                }
                let (mut only, mut shared) = (0u64, 0u64);
                for (&mine, &t) in bitmap.iter().zip(&twice) {
                    only += u64::from((mine & !t).count_ones());
                    shared += u64::from((mine & t).count_ones());
                }
                if holders >= 2 {
                    shared = shared.saturating_sub(nobody);
                } else {
                    only = only.saturating_sub(nobody);
                }
                TreeBlocks { only, shared }
            })
            .collect()
    }
}
