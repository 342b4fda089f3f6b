//! The background writer: the periodic tick (seal, checkpoint, clean when
//! idle) and the requests that wake the flusher thread early.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Volume, lock};
use crate::error::Result;

/// How long without changes before the tick cleans in idle time.
const IDLE_BEFORE_CLEANING: Duration = Duration::from_secs(10);

/// What the background writer was asked for.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Kick {
    /// A file is being streamed: write back what is dirty.
    pub(super) stream: bool,
    /// Dirty data passed the limit: write until it is back under it.
    pub(super) relieve: bool,
    /// The volume is closing.
    pub(super) stop: bool,
}

impl Volume {
    /// Periodic work: seal the active partial segment once it is older than
    /// the commit interval, checkpoint once enough log was written since
    /// the last one. Called by a flusher thread (or a simulation's loop).
    ///
    /// # Errors
    /// A device fails.
    pub fn tick(&self) -> Result<()> {
        if self.no_writes.load(Ordering::Acquire) || lock(&self.failed).is_some() {
            return Ok(());
        }
        // Frees made durable by an fsync's commit since the last turn: what
        // is queued is free on disk already, so it goes before the commit.
        self.discard_queued();
        // The spare page buffers a stream needed go once writes stop, not
        // between a stream's steps (its pages are all written at times).
        let idle = self.since(*lock(&self.last_change)) >= IDLE_BEFORE_CLEANING;
        let (dirty, since_ckpt, map_dirty) = {
            let mut fs = lock(&self.fs);
            if idle {
                fs.pages.trim_spare();
            }
            let dirty = fs.log.has_dirty() || fs.pages.dirty_bytes() > 0;
            (dirty, fs.log.blocks_since_checkpoint(), fs.log.inode_map_wants_checkpoint())
        };
        // Usage blocks past their budget go here only, and not while a
        // clean or a resize (which hold `cleaning`) reads entries of the
        // table they read whole.
        if let Ok(_no_clean) = self.cleaning.try_lock() {
            let mut fs = lock(&self.fs);
            fs.log.trim_usage_table();
            fs.log.trim_data_space();
        }
        self.write_home()?;
        // A checkpoint due takes the periodic commit's place: its own
        // commit leaves what a periodic one leaves (young delayed tails).
        if since_ckpt >= self.checkpoint_interval_blocks() || map_dirty {
            self.checkpoint_for_room()?;
        } else if dirty && self.since(*lock(&self.last_commit)) >= self.options.commit_interval {
            self.commit_periodic()?;
        }
        if self.clean_if_low()?.is_none() && self.since(*lock(&self.last_change)) >= IDLE_BEFORE_CLEANING {
            self.clean_when_idle()?;
        }
        self.warn_if_low();
        self.discard_queued();
        Ok(())
    }

    /// One turn of the background writer (a mounted volume's flusher
    /// thread): waits up to `period` for a request to write back (a file
    /// being streamed, [`Volume::write_with`]) and commits if one came,
    /// then does the periodic work ([`Volume::tick`]). Returns false once
    /// [`Volume::stop_background`] was called.
    ///
    /// # Errors
    /// A device fails.
    pub fn background_step(&self, period: Duration) -> Result<bool> {
        let kick = {
            let (m, cv) = &self.background;
            let mut g = lock(m);
            if !g.stream && !g.relieve && !g.stop {
                g = cv.wait_timeout(g, period).unwrap_or_else(PoisonError::into_inner).0;
            }
            let k = *g;
            (g.stream, g.relieve) = (false, false);
            k
        };
        if kick.stop {
            return Ok(false);
        }
        if !self.options.read_only {
            if kick.stream {
                self.write_back_in_steps()?;
            } else if kick.relieve {
                self.relieve_in_steps()?;
            }
        }
        self.tick()?;
        Ok(true)
    }

    /// Ends the background writer's loop at its next turn.
    pub fn stop_background(&self) {
        let (m, cv) = &self.background;
        lock(m).stop = true;
        cv.notify_all();
    }

    /// Asks the background writer to write a streamed file now.
    pub(crate) fn kick_write_back(&self) {
        let (m, cv) = &self.background;
        let mut g = lock(m);
        if !g.stream {
            g.stream = true;
            cv.notify_all();
        }
    }

    /// Asks the background writer to bring the dirty data back under the
    /// limit.
    pub(crate) fn kick_relief(&self) {
        let (m, cv) = &self.background;
        let mut g = lock(m);
        if !g.relieve {
            g.relieve = true;
            cv.notify_all();
        }
    }

    /// Log blocks between checkpoints: the mount option, but never more than
    /// a quarter of the log, so that segments waiting for a checkpoint never
    /// pile up on a small meta-data device.
    fn checkpoint_interval_blocks(&self) -> u64 {
        let log_blocks = {
            let fs = lock(&self.fs);
            u64::from(fs.log.superblock().segment_count) * u64::from(fs.log.superblock().segment_blocks)
        };
        self.options.checkpoint_blocks.min(log_blocks / 4).max(1)
    }
}
