//! Running the cleaner: on demand, from the periodic tick when free
//! segments run low, and synchronously when an operation finds no room.

use std::sync::atomic::Ordering;

use super::{Volume, lock};
use crate::error::Result;
use crate::meta_log::OP_MAX_BLOCKS;
use crate::meta_log::cleaner::{CleanerStats, Policy};
use crate::meta_log::segments::OpKind;

/// Objects moved per step: each step is one operation, bounded like any other.
const MOVES_PER_STEP: usize = 32;

/// Victims per pass of [`Volume::clean_in_passes`]: each pass ends with a
/// checkpoint, which is what turns its victims into free segments, so a long
/// run frees space as it goes and can stop between passes.
const SEGMENTS_PER_PASS: usize = 8;

/// What one cleaning pass (or a run of them) did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CleanReport {
    /// The cleaner's counters over the pass: victims and descriptor blocks
    /// read, objects moved, and segments free after it that were not before.
    pub cleaner: CleanerStats,
    /// Blocks written to the meta-data device by the pass (moves and checkpoint).
    pub blocks_written: u64,
    /// Wall time.
    pub micros: u64,
}

impl CleanReport {
    /// Adds the figures of a later pass.
    pub fn add(&mut self, other: &CleanReport) {
        self.cleaner.add(&other.cleaner);
        self.blocks_written += other.blocks_written;
        self.micros += other.micros;
    }
}

/// What to clean.
#[derive(Clone, Copy, Debug)]
pub struct CleanRequest {
    /// At most this many victims.
    pub max_segments: usize,
    /// Victim choice.
    pub policy: Policy,
    /// Skip segments at least this full (0 to 1).
    pub max_utilization: f64,
    /// Checkpoint at the end, so that the emptied victims are free at once.
    /// Without it they become free at the next checkpoint the log writes
    /// anyway: the right choice for cleaning ahead of need, whose
    /// checkpoints would otherwise cost more than the moves.
    pub free_now: bool,
}

impl Default for CleanRequest {
    fn default() -> Self {
        CleanRequest { max_segments: 16, policy: Policy::CostBenefit, max_utilization: 0.9, free_now: true }
    }
}

impl Volume {
    /// Cleans up to `req.max_segments` segments: moves their live meta-data
    /// through the normal write path, then checkpoints so that they become
    /// free. `progress(done, total)` is called after each victim.
    ///
    /// # Errors
    /// A device fails.
    pub fn clean(&self, req: CleanRequest, progress: &mut dyn FnMut(usize, usize)) -> Result<CleanReport> {
        let _one_at_a_time = lock(&self.cleaning);
        self.clean_locked(req, None, progress)
    }

    /// The cleaning lock, unless a clean holds it (the background cleaner
    /// then skips its turn).
    fn try_cleaning(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        match self.cleaning.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// [`Volume::clean`] with the cleaning lock held.
    /// `chosen`: these victims rather than the policy's (a shrink
    /// emptying the segments past the new end).
    pub(super) fn clean_locked(
        &self,
        req: CleanRequest,
        chosen: Option<Vec<crate::types::SegmentNo>>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CleanReport> {
        let started = self.clock.reading();
        self.check_writable()?;
        // Hot data first, into its own group: what the cleaner moves is cold
        // and lands together, away from it.
        self.commit_periodic()?;
        let (victims, free_before, written_before, stats_before) = {
            let mut fs = lock(&self.fs);
            // Victims are chosen among every segment.
            fs.log.load_segment_usage()?;
            let victims = if let Some(v) = chosen {
                v
            } else if req.free_now {
                fs.log.pick_victims(req.policy, req.max_segments, req.max_utilization)
            } else {
                // Segments already emptied wait for a checkpoint, not a clean.
                let mut v = fs.log.pick_victims(req.policy, usize::MAX, req.max_utilization);
                v.retain(|&s| fs.log.segment_live_bytes(s) > 0);
                v.truncate(req.max_segments);
                v
            };
            (victims, fs.log.free_segments(), fs.log.stats().meta_blocks_written, fs.log.stats().cleaner)
        };
        for (i, &v) in victims.iter().enumerate() {
            // Room to move this victim's live data, or else a checkpoint to
            // turn the victims already emptied into free segments; if even
            // that leaves no room, the log is truly full of live data.
            let need = |fs: &crate::namespace::Fs| {
                (fs.log.segment_live_bytes(v) / crate::types::BLOCK_BYTES) as usize + 2 * OP_MAX_BLOCKS
            };
            let fits = |fs: &crate::namespace::Fs| need(fs) <= fs.log.available_blocks(OpKind::Clean);
            if !fits(&lock(&self.fs)) {
                self.checkpoint_for_room()?;
                if !fits(&lock(&self.fs)) {
                    break;
                }
            }
            let live = lock(&self.fs).log.live_in_segment(v)?;
            for chunk in live.nodes.chunks(MOVES_PER_STEP) {
                self.mutate(OpKind::Clean, |fs, _| fs.log.relocate(chunk, &[], &[]))?;
            }
            // Inode blocks hold many records: a step moves a block's worth or so.
            for chunk in live.inodes.chunks(MOVES_PER_STEP * 8) {
                self.mutate(OpKind::Clean, |fs, _| fs.log.relocate(&[], chunk, &[]))?;
            }
            if !live.ifile.is_empty() {
                self.mutate(OpKind::Clean, |fs, _| fs.log.relocate(&[], &[], &live.ifile))?;
            }
            self.commit_periodic()?;
            progress(i + 1, victims.len());
        }
        if req.free_now {
            self.checkpoint_for_room()?;
        }
        let mut fs = lock(&self.fs);
        let freed = fs.log.finish_clean_pass(&victims);
        let mut cleaner = fs.log.stats().cleaner.since(&stats_before);
        // Victims emptied by an earlier pass may turn free at this one's
        // checkpoint: the report counts every segment the pass freed.
        cleaner.segments_freed = u64::from(fs.log.free_segments().saturating_sub(free_before)).max(freed);
        Ok(CleanReport {
            cleaner,
            blocks_written: fs.log.stats().meta_blocks_written - written_before,
            micros: self.since(started).as_micros() as u64,
        })
    }

    /// Segments `req` would clean now: those below its utilisation, at most
    /// `req.max_segments`.
    ///
    /// # Errors
    /// The segment usage table cannot be read.
    pub fn cleanable_segments(&self, req: &CleanRequest) -> Result<usize> {
        let mut fs = lock(&self.fs);
        fs.log.load_segment_usage()?;
        Ok(fs.log.pick_victims(req.policy, req.max_segments, req.max_utilization).len())
    }

    /// Cleans what [`Volume::cleanable_segments`] counts at the start, in
    /// passes of a few victims, each a [`Volume::clean`] ending with a
    /// checkpoint. Victims are chosen afresh for every pass, so segments the
    /// moves themselves filled are left alone. `progress(done, total)` is
    /// called after each victim; once it returns false the run stops at the
    /// end of the pass in hand (a few victims, then its checkpoint).
    ///
    /// # Errors
    /// A device fails.
    pub fn clean_in_passes(
        &self,
        req: CleanRequest,
        progress: &mut dyn FnMut(usize, usize) -> bool,
    ) -> Result<CleanReport> {
        let total = self.cleanable_segments(&req)?;
        let mut report = CleanReport::default();
        let mut done = 0usize;
        let mut go_on = true;
        while go_on && done < total {
            let pass_req = CleanRequest { max_segments: SEGMENTS_PER_PASS.min(total - done), ..req };
            let mut in_pass = 0usize;
            let pass = self.clean(pass_req, &mut |i, _| {
                in_pass = i;
                go_on = go_on && progress(done + i, total);
            })?;
            report.add(&pass);
            // A pass that cleaned nothing found no victims or no room to move one.
            if in_pass == 0 {
                break;
            }
            done += in_pass;
        }
        Ok(report)
    }

    /// The cleaner's counters since the volume was opened.
    #[must_use]
    pub fn cleaner_stats(&self) -> CleanerStats {
        lock(&self.fs).log.stats().cleaner
    }

    /// Counters of the log and the cleaner, and the state of the log, as
    /// named numbers (for `dualfs stats` and monitoring).
    #[must_use]
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        let fs = lock(&self.fs);
        let log = &fs.log;
        let s = log.stats();
        let (readahead_windows, readahead_hits) = log.readahead_counts();
        let c = s.cleaner;
        let mut v = vec![
            ("commits", self.commit_count()),
            ("partial_segments_written", s.partial_segments),
            ("meta_blocks_written", s.meta_blocks_written),
            ("data_blocks_written", s.data_blocks_written),
            ("checkpoints_written", s.checkpoints),
            ("index_rewrites", s.index_rewrites),
            ("segments", u64::from(log.superblock().segment_count)),
            ("segments_free", u64::from(log.free_segments())),
            ("segments_reserved", u64::from(log.reserve_segments())),
            ("clean_threshold", u64::from(self.clean_threshold_locked(log))),
            ("log_blocks_since_checkpoint", log.blocks_since_checkpoint()),
            ("checkpoint_number", log.checkpoint_number()),
            ("dirty_data_bytes", fs.pages.dirty_bytes() as u64),
            ("readahead_windows", readahead_windows),
            ("readahead_hits", readahead_hits),
            ("meta_reads_unlocked", self.deferred_reads.load(std::sync::atomic::Ordering::Relaxed)),
            ("cleaner_passes", c.passes),
            ("cleaner_segments_read", c.segments_read),
            ("cleaner_blocks_read", c.blocks_read),
            ("cleaner_nodes_moved", c.nodes_moved),
            ("cleaner_inodes_moved", c.inodes_moved),
            ("cleaner_ifile_blocks_moved", c.ifile_blocks_moved),
            ("cleaner_segments_freed", c.segments_freed),
            ("fsync_calls", self.fsyncs_count.calls.load(Ordering::Relaxed)),
            ("fsync_records", self.fsyncs_count.records.load(Ordering::Relaxed)),
            ("fsync_data_only", self.fsyncs_count.data_only.load(Ordering::Relaxed)),
            ("fsync_nothing", self.fsyncs_count.nothing.load(Ordering::Relaxed)),
            ("fsync_commits", self.fsyncs_count.commits.load(Ordering::Relaxed)),
            ("fsync_grouped", self.fsyncs_count.grouped.load(Ordering::Relaxed)),
            ("fsync_partial_segments_written", s.fsync_partial_segments),
            ("discarded_data_blocks", self.discarded_blocks.load(Ordering::Relaxed)),
            ("discarded_segments", self.discarded_segments.load(Ordering::Relaxed)),
            ("twin_blocks_written", s.twin_blocks),
        ];
        v.extend(self.mirror_stats());
        // Which commits sent data to the disk (a workload's writes, by cause).
        v.extend(self.data_writes.named());
        // Where the time of trees taking turns goes.
        v.extend(self.gate.costs.named());
        // What the serving process holds, as counts (its memory, explained).
        v.extend(log.memory_counts());
        let (pages, spare) = fs.pages.held_pages();
        v.push(("pages_held", pages as u64));
        v.push(("pages_spare", spare as u64));
        v.push(("inodes_referenced", fs.referenced_count() as u64));
        v.push(("inodes_referenced_bytes", fs.refs_memory() as u64));
        v
    }

    /// Utilisation of every segment (0 to 1), for a histogram.
    ///
    /// # Errors
    /// The segment usage table cannot be read.
    pub fn segment_utilization(&self) -> Result<Vec<f64>> {
        let mut fs = lock(&self.fs);
        fs.log.load_segment_usage()?;
        Ok((0..fs.log.superblock().segment_count).map(|s| fs.log.utilization(crate::types::SegmentNo(s))).collect())
    }

    /// Free segments below which the tick cleans: the option, or enough to
    /// keep the reserve plus some room, and a twentieth of the log.
    pub(crate) fn clean_threshold(&self) -> u32 {
        self.clean_threshold_locked(&lock(&self.fs).log)
    }

    fn clean_threshold_locked(&self, log: &crate::meta_log::Log) -> u32 {
        let segments = log.superblock().segment_count;
        let derived = (log.reserve_segments() + 4).max(segments / 20);
        self.options.clean_threshold.unwrap_or(derived).min(segments / 2)
    }

    /// In idle time, cleans one mostly empty segment per call while less
    /// than half the log is free, so that a burst of work later finds room.
    pub(crate) fn clean_when_idle(&self) -> Result<Option<CleanReport>> {
        let worth = {
            let mut fs = lock(&self.fs);
            // (The usage table is read only once less than half is free.)
            fs.log.free_segments() < fs.log.superblock().segment_count / 2 && {
                fs.log.load_segment_usage()?;
                !fs.log.pick_victims(Policy::CostBenefit, 1, 0.5).is_empty()
            }
        };
        if !worth {
            return Ok(None);
        }
        let req = CleanRequest { max_segments: 1, policy: Policy::CostBenefit, max_utilization: 0.5, free_now: false };
        let Some(_one_at_a_time) = self.try_cleaning() else { return Ok(None) };
        self.clean_locked(req, None, &mut |_, _| {}).map(Some)
    }

    /// Cleans when free segments fell below the threshold (called by the
    /// tick, and by an operation that found no room). Greedy when the
    /// reserve is close, cost-benefit otherwise.
    pub(crate) fn clean_if_low(&self) -> Result<Option<CleanReport>> {
        let threshold = self.clean_threshold();
        let (free, reserve) = {
            let fs = lock(&self.fs);
            (fs.log.free_segments(), fs.log.reserve_segments())
        };
        if free >= threshold {
            return Ok(None);
        }
        let policy = if free <= reserve + 2 { Policy::Greedy } else { Policy::CostBenefit };
        let req = CleanRequest {
            max_segments: (threshold - free + 4) as usize,
            policy,
            max_utilization: 0.95,
            free_now: true,
        };
        let Some(_one_at_a_time) = self.try_cleaning() else { return Ok(None) };
        self.clean_locked(req, None, &mut |_, _| {}).map(Some)
    }
}
