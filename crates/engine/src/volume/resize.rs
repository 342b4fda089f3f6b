//! `dualfs resize`: growing the log and the data space of a volume, mounted
//! or not, after the devices under it grew.
//!
//! The commit point of a resize is a checkpoint: on a resized volume every
//! checkpoint names the geometry (segments, data blocks) its IFile was
//! written at, and the superblocks only say how far the devices reach.
//! A grow therefore goes, each step durable before the next:
//! 1. once per volume: the `RESIZED` feature on both superblocks, then two
//!    checkpoints, so that both slots carry their geometry (a slot without
//!    one would take the superblock's, which is about to change);
//! 2. both superblocks with the new reach (meta-data device first);
//! 3. the tables grown in memory, and a checkpoint naming the new geometry.
//!
//! A shrink of the log (meta-data device) runs the other way: the log
//! stops writing past the new end, the cleaner empties what lies there,
//! a checkpoint naming fewer segments commits it, and the superblocks'
//! reach follows ([`Volume::shrink_log`]). A shrink of the data space
//! is the same with the data mover in the cleaner's place
//! (`volume/shrink.rs`).
//!
//! A crash before the last checkpoint's slot is durable mounts at the old
//! size (its checkpoints name it), one after at the new size; nothing else
//! changes in between, so nothing is lost either way. The new segments are
//! not written into before that checkpoint ([`crate::meta_log::Log::grow`]).

use std::sync::atomic::Ordering;

use super::{Volume, lock};
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::superblock::{FORMAT_MINOR_RESIZE, Geometry, INCOMPAT_RESIZED, Role, Superblock};

/// In a [`ResizeRequest`]: as many blocks as the device holds.
pub const WHOLE_DEVICE: u64 = u64::MAX;

/// What to resize to, in blocks of each device; `None` keeps its size,
/// [`WHOLE_DEVICE`] takes all the device holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResizeRequest {
    /// Meta-data device blocks to use.
    pub meta_blocks: Option<u64>,
    /// Data device blocks to use.
    pub data_blocks: Option<u64>,
}

/// What a resize did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResizeReport {
    /// Geometry in use before.
    pub before: Geometry,
    /// Geometry in use after.
    pub after: Geometry,
    /// Meta-data device blocks in use after.
    pub meta_blocks: u64,
    /// Blocks written to the meta-data device (superblocks, checkpoints).
    pub meta_blocks_written: u64,
    /// What a shrink of the data space moved.
    pub moved: super::MoveReport,
}

impl Volume {
    /// Grows the log and the data space to `req` (blocks of each device;
    /// the devices must hold them). Crash-safe: see the module comment.
    ///
    /// # Errors
    /// [`Error::Resize`] when the request asks for less than is in use (a
    /// shrink), or for more than a device holds or a checkpoint can index;
    /// read-only; a device fails.
    pub fn resize(&self, req: ResizeRequest) -> Result<ResizeReport> {
        self.resize_with_progress(req, &mut |_, _| {})
    }

    /// [`Volume::resize`], calling `progress(done, total)` after each
    /// segment a shrink of the log empties, then (in MiB) after each step
    /// a shrink of the data space moves.
    ///
    /// # Errors
    /// As [`Volume::resize`]; a shrink whose live meta-data would not fit
    /// is refused before anything moves.
    pub fn resize_with_progress(
        &self,
        req: ResizeRequest,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<ResizeReport> {
        if !lock(&self.fs).log.snapshots().is_empty() {
            // A snapshot's image is sized by the geometry it was taken at,
            // which its record does not carry yet.
            return Err(Error::Resize(
                "the volume holds snapshots, and resizing a volume with snapshots is not supported yet: delete them \
                 first (dualfs snapshot delete)"
                    .into(),
            ));
        }
        // One resize or clean at a time, and none from the background.
        let _one_at_a_time = lock(&self.cleaning);
        self.check_writable()?;
        let (sb, reach, written_before) = {
            let fs = lock(&self.fs);
            (fs.log.superblock().clone(), fs.log.superblock_on_disk().clone(), fs.log.stats().meta_blocks_written)
        };
        let before = sb.geometry();
        let target = target_geometry(&sb, req, self.meta.as_ref(), self.data.as_ref())?;
        // What a resize checks and moves is decided segment by segment.
        lock(&self.fs).log.load_segment_usage()?;
        let shrink = target.segment_count < before.segment_count;
        if shrink {
            lock(&self.fs).log.check_shrink(target.segment_count)?;
        }
        let data_shrink = target.data_blocks < before.data_blocks;
        if data_shrink {
            // Dirty data allocated and frees made durable first: what lies
            // past the end and what is free below it are then what the
            // bitmap says.
            self.checkpoint()?;
            lock(&self.fs).log.check_data_shrink(target.data_blocks)?;
        }
        let grow = Geometry {
            segment_count: target.segment_count.max(before.segment_count),
            data_blocks: target.data_blocks.max(before.data_blocks),
        };
        lock(&self.fs).log.check_grow(grow)?;
        let mut report = ResizeReport {
            before,
            after: before,
            meta_blocks: sb.meta_blocks,
            meta_blocks_written: 0,
            moved: super::MoveReport::default(),
        };
        if target == before {
            return Ok(report);
        }
        let mut superblocks = 0;
        if !reach.resized() {
            let mut marked = reach.clone();
            marked.incompat |= INCOMPAT_RESIZED;
            marked.minor = marked.minor.max(FORMAT_MINOR_RESIZE);
            self.write_superblocks(&marked)?;
            superblocks += 2;
            if !faults::active(Fault::ResizeWithoutGeometry) {
                // Both slots must name their geometry before the superblocks' changes.
                self.checkpoint()?;
                self.checkpoint()?;
            }
        }
        if shrink {
            self.shrink_log(target.segment_count, progress)?;
            superblocks += 2;
        }
        if data_shrink {
            report.moved = self.shrink_data(target.data_blocks, progress)?;
            superblocks += 2;
        }
        let on_disk = lock(&self.fs).log.superblock_on_disk().clone();
        // The reach never falls below what it was (a grow cut short may
        // have left it wider), except for what a shrink just cut.
        let g = Geometry {
            segment_count: if shrink { target.segment_count } else { target.segment_count.max(on_disk.segment_count) },
            data_blocks: if data_shrink { target.data_blocks } else { target.data_blocks.max(on_disk.data_blocks) },
        };
        if g != on_disk.geometry() {
            let Some(wider) = on_disk.with_geometry(g) else {
                return Err(Error::Resize(format!("{} data blocks make too many groups", g.data_blocks)));
            };
            self.write_superblocks(&wider)?;
            superblocks += 2;
        }
        let now = lock(&self.fs).log.superblock().geometry();
        // After a shrink that side is at its target already.
        let g = Geometry {
            segment_count: now.segment_count.max(target.segment_count),
            data_blocks: now.data_blocks.max(target.data_blocks),
        };
        if g != now {
            lock(&self.fs).log.grow(g)?;
            self.checkpoint()?;
        }
        let fs = lock(&self.fs);
        report.after = fs.log.superblock().geometry();
        report.meta_blocks = fs.log.superblock().meta_blocks;
        report.meta_blocks_written = fs.log.stats().meta_blocks_written - written_before + superblocks;
        log::info!(
            "resized: {} to {} segments, {} to {} data blocks",
            before.segment_count,
            report.after.segment_count,
            before.data_blocks,
            report.after.data_blocks
        );
        Ok(report)
    }

    /// Shrinks the log to `n` segments: the log stops writing past `n` and
    /// moves its head below it (a checkpoint), the cleaner empties the
    /// segments past it, then a checkpoint names `n` segments (the commit
    /// point) and the superblocks' reach follows. A crash before that
    /// checkpoint leaves the old size, every move made through the log as
    /// a clean's are; after it, the new one.
    fn shrink_log(&self, n: u32, progress: &mut dyn FnMut(usize, usize)) -> Result<()> {
        lock(&self.fs).log.limit_segments(Some(n));
        let r = (|| {
            self.checkpoint()?;
            let total = lock(&self.fs).log.segments_in_use_from(n).len();
            let mut done = 0;
            progress(0, total);
            // Each round empties what it can; the checkpoints between free
            // the segments that only the previous IFile held.
            for _ in 0..8 {
                let busy = lock(&self.fs).log.segments_in_use_from(n);
                if busy.is_empty() || faults::active(Fault::ShrinkBeforeEmpty) {
                    break;
                }
                for chunk in busy.chunks(8) {
                    let req = super::CleanRequest {
                        max_segments: chunk.len(),
                        policy: crate::meta_log::cleaner::Policy::Greedy,
                        max_utilization: 1.0,
                        free_now: true,
                    };
                    self.clean_locked(req, Some(chunk.to_vec()), &mut |_, _| {})?;
                    done = (done + chunk.len()).min(total);
                    progress(done, total);
                }
                self.checkpoint()?;
            }
            if faults::active(Fault::ShrinkBeforeEmpty) {
                lock(&self.fs).log.force_shrink_segments(n);
            } else {
                lock(&self.fs).log.shrink_segments(n)?;
            }
            self.checkpoint()?;
            let narrower = {
                let fs = lock(&self.fs);
                let on_disk = fs.log.superblock_on_disk().clone();
                let g = Geometry { segment_count: n, data_blocks: on_disk.data_blocks };
                on_disk.with_geometry(g)
            };
            let Some(narrower) = narrower else {
                return Err(Error::Resize(format!("{n} segments do not make a volume")));
            };
            self.write_superblocks(&narrower)?;
            // Both slots name the smaller log: the older one, naming more
            // segments than the superblocks reach now, would be unusable.
            self.checkpoint()
        })();
        lock(&self.fs).log.limit_segments(None);
        r
    }

    /// Writes `sb` to the meta-data device, then its copy to the data
    /// device, each durable before the next; a failure turns the volume
    /// read-only (memory and disk may disagree on the reach).
    pub(super) fn write_superblocks(&self, sb: &Superblock) -> Result<()> {
        let sb = &self.degraded_superblock(sb.clone());
        let r = (|| {
            device::write(self.meta.as_ref(), DeviceRole::Meta, 0, &sb.encode())?;
            device::flush(self.meta.as_ref(), DeviceRole::Meta)?;
            let copy = Superblock { role: Role::Data, ..sb.clone() };
            device::write(self.data.as_ref(), DeviceRole::Data, 0, &copy.encode())?;
            device::flush(self.data.as_ref(), DeviceRole::Data)
        })();
        match r {
            Ok(()) => {
                lock(&self.fs).log.superblock_written(sb.clone());
                Ok(())
            }
            Err(e) => {
                self.fail(&e);
                Err(e)
            }
        }
    }

    /// Writes the data device's superblock copy again from the meta-data
    /// device's (opening after a resize or tune cut between the two).
    pub(super) fn rewrite_data_superblock(&self) -> Result<()> {
        if self.no_writes.load(Ordering::Acquire) {
            return Ok(());
        }
        let sb = self.degraded_superblock(lock(&self.fs).log.superblock_on_disk().clone());
        let copy = Superblock { role: Role::Data, ..sb };
        device::write(self.data.as_ref(), DeviceRole::Data, 0, &copy.encode())?;
        device::flush(self.data.as_ref(), DeviceRole::Data)?;
        log::warn!("the data device's superblock copy was written again from the meta-data device's");
        Ok(())
    }
}

/// The geometry `req` asks for, checked against the devices' sizes (read
/// again: they may have grown since the mount) and the geometry in use.
fn target_geometry(
    sb: &Superblock,
    req: ResizeRequest,
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
) -> Result<Geometry> {
    let io = |role: DeviceRole| move |e| Error::Io { device: role, op: "size", block: 0, source: e };
    let meta_have = meta.refresh_block_count().map_err(io(DeviceRole::Meta))?;
    let data_have = data.refresh_block_count().map_err(io(DeviceRole::Data))?;
    let seg = u64::from(sb.segment_blocks);
    let mib = |blocks: u64| blocks / 256;
    let mut g = sb.geometry();
    let whole = |n: u64, have: u64| if n == WHOLE_DEVICE { have } else { n };
    if let Some(m) = req.meta_blocks.map(|m| whole(m, meta_have)) {
        if m > meta_have {
            return Err(Error::Resize(format!(
                "the meta-data device holds {} MiB, {} MiB were asked for: grow the device or image first",
                mib(meta_have),
                mib(m)
            )));
        }
        let count = m.saturating_sub(sb.first_segment_block) / seg;
        g.segment_count = u32::try_from(count)
            .map_err(|_| Error::Resize(format!("{count} segments are more than a volume can have ({})", u32::MAX)))?;
    }
    if let Some(d) = req.data_blocks.map(|d| whole(d, data_have)) {
        if d > data_have {
            return Err(Error::Resize(format!(
                "the data device holds {} MiB, {} MiB were asked for: grow the device or image first",
                mib(data_have),
                mib(d)
            )));
        }
        g.data_blocks = d;
    }
    Ok(g)
}
