//! Shrinking the data space of a volume, mounted or not: the allocator
//! stops handing out blocks past the new end, the data mover moves every
//! block there below it through ordinary commits, a checkpoint naming the
//! smaller geometry commits it, and the superblocks' reach follows
//! (DESIGN.md, "Resize").

use super::{Volume, lock};
use crate::error::{Error, Result};
use crate::faults::{self, Fault};
use crate::format::superblock::Geometry;
use crate::namespace::pages::WriteBack;

/// Blocks the mover dirties before it commits them (64 MiB): bounds the
/// memory a move holds and the work a crash may undo.
const MOVE_STEP_BLOCKS: u64 = 16384;

/// Inode numbers one slice of the scan for files past the end reads
/// under the volume's lock.
const SCAN_STEP_INODES: u64 = 4096;

/// Rounds of scan and move before a shrink gives up: one does it unless
/// writes meanwhile keep blocks past the end busy (a file's replacement
/// held, a free not yet durable), which the checkpoint ending each round
/// settles.
const MOVE_ROUNDS: usize = 4;

/// What a data shrink moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Files that had blocks past the new end.
    pub files: u64,
    /// Blocks moved below it (each read once and written once).
    pub blocks: u64,
    /// Time spent finding the files (scans of every inode's extent map).
    pub scan_ms: u64,
}

impl Volume {
    /// Shrinks the data space to `n` blocks (checked by
    /// [`crate::meta_log::Log::check_data_shrink`] under the same lock
    /// that sets the limit): moves what lies past `n` in rounds, each
    /// ending with a checkpoint, then commits the smaller geometry with a
    /// checkpoint and narrows the superblocks' reach. A crash before that
    /// checkpoint mounts the old size, every move made by a commit that
    /// maps the new block only once its data is durable; after it, the
    /// new size. `progress(done, total)` counts MiB moved.
    pub(super) fn shrink_data(&self, n: u64, progress: &mut dyn FnMut(usize, usize)) -> Result<MoveReport> {
        {
            let mut fs = lock(&self.fs);
            fs.log.check_data_shrink(n)?;
            fs.log.space_mut().limit_blocks(Some(n))?;
        }
        let r = self.move_and_cut(n, progress).map_err(|e| match e {
            Error::NoSpace(crate::error::DeviceRole::Data) => Error::Resize(format!(
                "the data device's space below {} MiB filled up while the shrink moved data there; nothing is \
                 lost, the volume keeps its size: free space or shrink less",
                n / 256
            )),
            e => e,
        });
        if r.is_err() {
            // The pages the mover dirtied hold reservations for new blocks:
            // write them there while the limit still says so. What fails
            // here failed above already.
            let _ = self.commit();
        }
        let lifted = lock(&self.fs).log.space_mut().limit_blocks(None);
        let report = r?;
        lifted?;
        Ok(report)
    }

    fn move_and_cut(&self, n: u64, progress: &mut dyn FnMut(usize, usize)) -> Result<MoveReport> {
        let mut report = MoveReport::default();
        let total = lock(&self.fs).log.space_mut().used_from(n)?;
        let mib = |blocks: u64| blocks.div_ceil(256) as usize;
        progress(0, mib(total));
        for _ in 0..MOVE_ROUNDS {
            if faults::active(Fault::ShrinkDataBeforeEmpty) {
                break;
            }
            let started = std::time::Instant::now();
            let mut owners = Vec::new();
            let mut next = Some(0);
            while let Some(first) = next {
                // In slices, the lock let go between them.
                let (found, after) = lock(&self.fs).scan_from(n, first, SCAN_STEP_INODES)?;
                owners.extend(found);
                next = after;
            }
            report.scan_ms += started.elapsed().as_millis() as u64;
            report.files = report.files.max(owners.len() as u64);
            // One commit per step of blocks, over as many files as fill
            // it: a commit per small file cost a flush of both devices each.
            let mut batch = 0;
            for o in owners {
                // Bounded: what a step leaves (a page written meanwhile)
                // waits for the next round.
                for _ in 0..=o.blocks.div_ceil(MOVE_STEP_BLOCKS) {
                    let budget = MOVE_STEP_BLOCKS - batch;
                    let moved = lock(&self.fs).relocate_from(o.ino, n, budget)?;
                    batch += moved;
                    report.blocks += moved;
                    if moved < budget {
                        break;
                    }
                    // The commit writes the pages to new blocks, flushed
                    // before the group that maps them.
                    self.commit()?;
                    batch = 0;
                    progress(mib(report.blocks.min(total)), mib(total));
                }
            }
            if batch > 0 {
                self.commit()?;
                progress(mib(report.blocks.min(total)), mib(total));
            }
            // Releases the old blocks (their frees durable) and ends the
            // holds of files replaced meanwhile.
            self.checkpoint()?;
            if lock(&self.fs).log.space_mut().used_from(n)? == 0 {
                break;
            }
        }
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, WriteBack::All)?;
        {
            let mut fs = lock(&self.fs);
            if faults::active(Fault::ShrinkDataBeforeEmpty) {
                fs.log.force_shrink_data(n)?;
            } else {
                fs.log.shrink_data(n)?;
            }
        }
        // The commit point: a checkpoint naming the smaller geometry.
        self.checkpoint_locked(&mut c, WriteBack::All)?;
        drop(c);
        let narrower = {
            let fs = lock(&self.fs);
            let on_disk = fs.log.superblock_on_disk().clone();
            on_disk.with_geometry(Geometry { segment_count: on_disk.segment_count, data_blocks: n })
        };
        let Some(narrower) = narrower else {
            return Err(Error::Resize(format!("{n} data blocks do not make a volume")));
        };
        self.write_superblocks(&narrower)?;
        // Both slots name the smaller space: the older one, naming more
        // blocks than the superblocks reach now, would be unusable.
        self.checkpoint()?;
        progress(mib(total), mib(total));
        Ok(report)
    }
}
