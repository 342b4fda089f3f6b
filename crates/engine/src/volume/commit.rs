//! Commits, fsync records' home writes and checkpoints: how the volume's
//! dirty state reaches the devices, under the commit lock.

use std::collections::HashMap;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CommitState, Order, Volume, lock};
use crate::error::{Error, Result};
use crate::namespace::Fs;
use crate::namespace::pages::WriteBack;
use crate::namespace::replace::HoldPolicy;
use crate::types::{InodeNo, Timestamp};

impl Volume {
    /// The commit a write makes when dirty data passed the limit: in steps
    /// of at most a sixteenth of the limit (16 MiB by default) of delayed
    /// tails (the newly written ends of files, whose inodes record the
    /// size the written data reaches meanwhile), with the commit lock let
    /// go between steps, so that an fsync of another file waits for one
    /// step, not for the whole of it. It stops once half the limit is
    /// left. One writer does it at a time; the others wait for it, then go
    /// on.
    pub(super) fn commit_under_pressure(&self) -> Result<()> {
        if self.options.data_expire.is_zero() || self.options.order == Order::Strict {
            // No tail may wait: a crash must show a prefix of the operations.
            return self.commit();
        }
        let step_blocks = self.pressure_step_blocks();
        let Ok(_relieving) = self.pressure.try_lock() else {
            drop(lock(&self.pressure));
            return Ok(());
        };
        loop {
            let more = {
                let mut c = lock(&self.commit);
                self.commit_step(&mut c, WriteBack::Chunk(step_blocks))?
            };
            let dirty = lock(&self.fs).pages.dirty_bytes();
            if !more || dirty <= self.options.dirty_data_limit / 2 {
                return Ok(());
            }
            self.let_fsyncs_in();
        }
    }

    /// Before the fsync of a file holding much unwritten data (the closing
    /// fsync of a large copy): writes dirty data in the steps memory
    /// pressure takes, the commit lock let go between them, until the file
    /// has at most one step left, so that the fsync of another file (a
    /// database beside the copy) waits for one step and not for the whole
    /// file. Bounded by the steps the dirty data can take. Not in strict
    /// order or with `data_expire=0`, where no tail may be written early.
    pub(super) fn write_ahead_in_steps(&self, ino: crate::types::InodeNo) -> Result<()> {
        if self.options.data_expire.is_zero() || self.options.order == Order::Strict {
            return Ok(());
        }
        let step_blocks = self.pressure_step_blocks();
        let (mine, all) = {
            let fs = lock(&self.fs);
            (fs.pages.file_pages(ino) as u64, fs.pages.dirty_bytes() as u64 / crate::types::BLOCK_BYTES)
        };
        if mine <= step_blocks {
            return Ok(());
        }
        for _ in 0..all.div_ceil(step_blocks) {
            let more = {
                let mut c = lock(&self.commit);
                self.commit_step(&mut c, WriteBack::Chunk(step_blocks))?
            };
            if !more || lock(&self.fs).pages.file_pages(ino) as u64 <= step_blocks {
                break;
            }
            self.let_fsyncs_in();
        }
        Ok(())
    }

    /// The background writer's write-back (a streaming writer or memory
    /// pressure asked for it): dirty data in the steps of
    /// [`Volume::commit_under_pressure`], the commit lock let go between
    /// them, so that an fsync beside a large copy waits for one step and
    /// not for everything the copy dirtied. As many steps as the data dirty
    /// at the start takes, so that a writer that never stops cannot keep
    /// the background writer from its other work.
    pub(super) fn write_back_in_steps(&self) -> Result<()> {
        if self.options.data_expire.is_zero() || self.options.order == Order::Strict {
            return self.commit_for_room();
        }
        let step_blocks = self.pressure_step_blocks();
        let steps = (lock(&self.fs).pages.dirty_bytes() as u64 / crate::types::BLOCK_BYTES).div_ceil(step_blocks);
        for _ in 0..steps.max(1) {
            if !self.one_step(step_blocks)? {
                break;
            }
        }
        Ok(())
    }

    /// One step of `step_blocks` under the commit lock, then the fsyncs
    /// waiting for that lock go first; whether dirty data is left.
    fn one_step(&self, step_blocks: u64) -> Result<bool> {
        let more = {
            let mut c = lock(&self.commit);
            self.commit_step(&mut c, WriteBack::Chunk(step_blocks))?
        };
        if more {
            self.let_fsyncs_in();
        }
        Ok(more)
    }

    /// The background writer's relief when dirty data passed the limit
    /// with no stream to blame (many small files): steps of
    /// [`Volume::commit_under_pressure`], oldest data first, until the
    /// dirty data is a step below the limit. It used to write everything
    /// dirty, in steps, the moment the limit was passed: with PostMark's
    /// working set a little past it, the whole set, most of it deleted
    /// soon after. The kernel's background write-back likewise stops at
    /// its threshold.
    pub(super) fn relieve_in_steps(&self) -> Result<()> {
        if self.options.data_expire.is_zero() || self.options.order == Order::Strict {
            return self.commit_for_room();
        }
        let step_blocks = self.pressure_step_blocks();
        let step_bytes = usize::try_from(step_blocks * crate::types::BLOCK_BYTES).unwrap_or(usize::MAX);
        let low = self.options.dirty_data_limit.saturating_sub(step_bytes);
        let dirty = lock(&self.fs).pages.dirty_bytes();
        // Bounded, so that writers that never stop cannot keep the
        // background writer from its other work.
        for _ in 0..(dirty.saturating_sub(low).div_ceil(step_bytes.max(1)) + 1) {
            if lock(&self.fs).pages.dirty_bytes() <= low {
                break;
            }
            if !self.one_step(step_blocks)? {
                break;
            }
        }
        Ok(())
    }

    /// Blocks of delayed tails one step of a stepped commit writes.
    fn pressure_step_blocks(&self) -> u64 {
        (self.options.dirty_data_limit as u64 / 16 / crate::types::BLOCK_BYTES).max(16)
    }

    /// Between two steps of [`Volume::commit_under_pressure`]: waits until
    /// the fsyncs queued by now have been taken by a batch (which holds the
    /// commit lock), so that the next step queues behind them rather than
    /// winning the lock again (a mutex is not fair). Bounded, so that a
    /// caller descheduled between queueing and locking cannot stall it.
    pub(super) fn let_fsyncs_in(&self) {
        let mark = lock(&self.fsync_queue).last_ticket();
        let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
        while lock(&self.fsync_queue).waits_up_to(mark) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }

    /// Seals and writes everything dirty: all file data, then all meta-data,
    /// in as many partial segments as it takes.
    ///
    /// # Errors
    /// A device fails (the volume turns read-only).
    pub fn commit(&self) -> Result<()> {
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, WriteBack::All)
    }

    /// A commit nobody asked to be durable, made to free room (in the
    /// active group, the log or the cache): like the periodic commit, files
    /// held for replacement keep their old records on disk and the delayed
    /// tails of files written less than `data_expire` ago wait.
    pub(super) fn commit_for_room(&self) -> Result<()> {
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, WriteBack::Room(self.expire_before()))
    }

    /// The periodic commit: like [`Volume::commit`], except that files held
    /// for replacement keep their old records on disk and the delayed tails
    /// of files written less than `data_expire` ago may wait (their inodes
    /// record the size their written data reaches).
    pub(super) fn commit_periodic(&self) -> Result<()> {
        let mut c = lock(&self.commit);
        let before = self.expire_before();
        self.commit_locked(&mut c, WriteBack::Expired(before))
    }

    /// Data first dirtied before this is old enough to be written by a
    /// periodic commit; a replacement held since before it is released.
    pub(super) fn expire_before(&self) -> Timestamp {
        let now = self.now();
        let expire = i64::try_from(self.options.data_expire.as_secs()).unwrap_or(i64::MAX);
        Timestamp::new(now.sec.saturating_sub(expire), now.nsec)
    }

    pub(super) fn commit_locked(&self, c: &mut CommitState, mode: WriteBack) -> Result<()> {
        while self.commit_step(c, mode)? {}
        Ok(())
    }

    /// Seals and writes one commit group; returns whether dirty data is
    /// left for another.
    pub(super) fn commit_step(&self, c: &mut CommitState, mode: WriteBack) -> Result<bool> {
        // An fsync waiting on a commit when the volume shuts down fails.
        self.check_up()?;
        if self.no_writes.load(Ordering::Acquire) {
            return Ok(false);
        }
        if let Some(why) = lock(&self.failed).as_ref() {
            return Err(Error::ReadOnly(format!("turned read-only after an error: {why}")));
        }
        c.next_id += 1;
        let id = c.next_id;
        let (mut sealed, more) = {
            let mut fs = lock(&self.fs);
            self.seal_step(&mut fs, id, mode)?
        };
        if let Some(s) = &mut sealed {
            if let Err(e) = self.write_group(s) {
                self.fail(&e);
                return Err(e);
            }
            self.data_writes.count(mode, s.data_blocks());
            let _reuse = self.reuse.write().unwrap_or_else(PoisonError::into_inner);
            let mut fs = lock(&self.fs);
            Volume::completed(&mut fs, s, id);
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        *lock(&self.last_commit) = self.clock.reading();
        Ok(more)
    }

    /// Writes back dirty data (while the group has room) and seals one
    /// commit group. Returns it, and whether dirty data is left over.
    pub(super) fn seal_step(
        &self,
        fs: &mut Fs,
        id: u64,
        mode: WriteBack,
    ) -> Result<(Option<crate::meta_log::SealedGroup>, bool)> {
        let mut more = false;
        // Files held for replacement that this commit lets go are released
        // first, so that their new contents go with it; the others are
        // written as they were before their truncation, data and all left
        // for later.
        let hold = match mode {
            WriteBack::All => HoldPolicy::ReleaseAll,
            WriteBack::Expired(before) | WriteBack::Room(before) => HoldPolicy::Keep { expire_before: before },
            WriteBack::Chunk(_) => HoldPolicy::ReleaseAll,
        };
        let mut substitutes = match fs.settle_replacements(hold) {
            Ok(s) => s,
            Err(e) => {
                self.fail(&e);
                return Err(e);
            }
        };
        // A step relieving memory takes the oldest data first: it is what
        // expiry would write soonest anyway, and the youngest is the likeliest
        // to be deleted before it must be written.
        let files = if matches!(mode, WriteBack::Chunk(_)) {
            fs.pages.dirty_files_oldest_first()
        } else {
            fs.pages.dirty_files()
        };
        let dirty: Vec<InodeNo> = files.into_iter().filter(|i| !substitutes.contains_key(i)).collect();
        // Every capped inode's cap is known before any is sealed: a group
        // cut short below still carries the inodes of files it did not
        // reach. A step relieving memory stops each file's write-back at a
        // limit instead, and takes its caps after it (below).
        let mut tails: HashMap<InodeNo, (u64, Option<u64>)> = HashMap::new();
        let mut budget = match mode {
            WriteBack::Chunk(b) => b,
            _ => 0,
        };
        for &ino in &dirty {
            let capped = match mode {
                WriteBack::Chunk(_) => fs.chunk_limit(ino, budget).map(|(limit, used)| {
                    budget -= used;
                    // A tail waits for the next step.
                    more |= limit.is_some();
                    limit.map(|l| (l, None))
                }),
                // An inline file that outgrew its inode, nothing of it
                // mapped: recorded inline as it was, all of its data waits.
                _ => match fs.outgrown_record(ino, mode) {
                    Ok(Some(rec)) => {
                        substitutes.insert(ino, rec);
                        Ok(Some((0, None)))
                    }
                    Ok(None) => {
                        if fs.outgrown_block_due(ino, mode) {
                            self.data_writes.outgrown.fetch_add(1, Ordering::Relaxed);
                        }
                        fs.delayed_cap(ino, mode).map(|c| c.map(|(first, cap)| (first, Some(cap))))
                    }
                    Err(e) => Err(e),
                },
            };
            match capped {
                Ok(Some(t)) => {
                    tails.insert(ino, t);
                }
                Ok(None) => {}
                Err(e) => {
                    self.fail(&e);
                    return Err(e);
                }
            }
        }
        // Files written up to their step's limit: their tails start there.
        let mut reached: HashMap<InodeNo, u64> = HashMap::new();
        for &ino in &dirty {
            let limit = tails.get(&ino).map_or(u64::MAX, |t| t.0);
            match fs.write_back_below(ino, usize::MAX, limit) {
                Ok(true) => {
                    if limit != u64::MAX {
                        reached.insert(ino, limit);
                    }
                }
                Ok(false) => {
                    more = true;
                    break;
                }
                Err(e) => {
                    self.fail(&e);
                    return Err(e);
                }
            }
        }
        // The capped records are taken after the write-back, whose blocks
        // they map. A step relieving memory caps every file whose written
        // end waits, at what this step (or one before) did write: its limit,
        // or less when the group filled first.
        let mut caps: Vec<(InodeNo, u64)> = tails.iter().filter_map(|(&i, &(_, c))| c.map(|c| (i, c))).collect();
        if matches!(mode, WriteBack::Room(_)) && crate::faults::active(crate::faults::Fault::RoomTailUncapped) {
            // The broken rule: the tails wait, but the records say the
            // files are whole.
            caps.clear();
        }
        if matches!(mode, WriteBack::Chunk(_)) {
            for &ino in &dirty {
                match fs.written_cap(ino, reached.get(&ino).copied()) {
                    Ok(Some(cap)) => caps.push((ino, cap)),
                    Ok(None) => {}
                    Err(e) => {
                        self.fail(&e);
                        return Err(e);
                    }
                }
            }
        }
        for (ino, cap) in caps {
            if let Some(rec) = fs.log.cached_inode(ino)
                && rec.size > cap
            {
                substitutes.insert(ino, crate::format::inode::InodeRecord { size: cap, ..rec.clone() });
            }
        }
        fs.pages.forget_clean();
        let data = fs.pages.take_queued(id, crate::meta_log::seal::MAX_DATA_RUN_BLOCKS);
        let sealed = match fs.log.seal_substituted(data, &substitutes, self.now()) {
            Ok(s) => s,
            Err(e) => {
                self.fail(&e);
                return Err(e);
            }
        };
        if sealed.as_ref().is_some_and(|s| s.seq.is_some()) {
            fs.intents.sealed(substitutes.keys().copied());
        }
        // A capped or held inode stays cached until its new record is
        // written, so that the one on disk never replaces it.
        fs.log.pin_inodes(substitutes.into_keys().collect());
        Ok((sealed, more))
    }

    /// Writes a sealed group (or fsync record) once no data written in
    /// place outside a commit is still under way (see `home`).
    pub(super) fn write_group(&self, g: &crate::meta_log::SealedGroup) -> Result<()> {
        let _home = lock(&self.home);
        self.write_group_home_held(g)
    }

    /// Writes an fsync record. One that carries its data (or needs none)
    /// makes no page of [`Volume::write_home`] reachable and folds nothing:
    /// it need not wait for those writes. One that writes data in place
    /// first does, so that an older copy written in the background never
    /// lands after the newer data.
    pub(super) fn write_record(&self, g: &crate::meta_log::SealedGroup) -> Result<()> {
        if g.data_blocks() == 0 { g.write(&self.meta, &self.data) } else { self.write_group(g) }
    }

    /// [`Volume::write_group`] with `home` held by the caller.
    pub(super) fn write_group_home_held(&self, g: &crate::meta_log::SealedGroup) -> Result<()> {
        let unflushed = self.home_unflushed.load(Ordering::Acquire)
            && !crate::faults::active(crate::faults::Fault::HomeWriteUnflushed);
        g.write_after(&self.meta, &self.data, unflushed)?;
        if unflushed && g.meta_blocks() > 0 {
            self.home_unflushed.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Writes the data copied into fsync records to its place on the data
    /// device, a megabyte at a time, without the commit lock: then the
    /// next commit, which must make it durable before folding the records
    /// away, has little data left to write, and fsyncs do not wait behind
    /// it. Nothing is flushed: the records keep the data durable until the
    /// commit's flush does.
    ///
    /// # Errors
    /// A device fails (the volume turns read-only).
    pub fn write_home(&self) -> Result<()> {
        // Small batches: a commit group waits for the batch under way.
        const BATCH_PAGES: usize = 32;
        loop {
            let id = self.home_ids.fetch_add(1, Ordering::Relaxed);
            let home = lock(&self.home);
            let pages = lock(&self.fs).pages.take_queued_up_to(id, BATCH_PAGES);
            if pages.is_empty() {
                return Ok(());
            }
            let n = pages.len();
            self.home_unflushed.store(true, Ordering::Release);
            for (at, buf) in &crate::meta_log::seal::coalesce(pages) {
                if let Err(e) = buf.write(self.data.as_ref(), crate::DeviceRole::Data, at.0) {
                    self.fail(&e);
                    return Err(e);
                }
            }
            drop(home);
            let mut fs = lock(&self.fs);
            fs.pages.drop_in_flight(id);
            fs.log.count_data_written(n as u64);
            if n < BATCH_PAGES {
                return Ok(());
            }
        }
    }

    pub(super) fn completed(fs: &mut Fs, sealed: &mut crate::meta_log::SealedGroup, id: u64) {
        fs.log.complete(sealed);
        // Before the pages go: their buffers are then the cache's alone,
        // and come back for reuse.
        sealed.release_data();
        fs.pages.drop_in_flight(id);
    }

    /// Commits, then writes a checkpoint of the IFile.
    ///
    /// # Errors
    /// A device fails (the volume turns read-only).
    pub fn checkpoint(&self) -> Result<()> {
        self.checkpoint_with(WriteBack::All)
    }

    /// A checkpoint nobody asked to be durable (by log volume, the inode
    /// map's budget, or to turn segments waiting for one into free ones):
    /// its commit is a periodic one (files held for replacement stay held,
    /// young delayed tails wait). A checkpoint needs no file data: the
    /// IFile maps the records the log holds, capped ones included.
    pub(super) fn checkpoint_for_room(&self) -> Result<()> {
        self.checkpoint_with(WriteBack::Room(self.expire_before()))
    }

    pub(super) fn checkpoint_with(&self, mode: WriteBack) -> Result<()> {
        let mut c = lock(&self.commit);
        self.commit_locked(&mut c, mode)?;
        self.checkpoint_locked(&mut c, mode)
    }

    /// Writes a checkpoint, the commit lock held and the commit made.
    pub(super) fn checkpoint_locked(&self, c: &mut CommitState, mode: WriteBack) -> Result<()> {
        self.check_up()?;
        if self.no_writes.load(Ordering::Acquire) {
            return Ok(());
        }
        let sealed = {
            // Whatever slipped in since the commit is drained with the locks
            // held, so that the checkpoint sees no pending change and no
            // pending free (a free not yet released would be lost: the
            // checkpoint's roll-forward starts after it).
            let _home = lock(&self.home);
            let _reuse = self.reuse.write().unwrap_or_else(PoisonError::into_inner);
            let mut fs = lock(&self.fs);
            loop {
                c.next_id += 1;
                let id = c.next_id;
                let (mut group, more) = self.seal_step(&mut fs, id, mode)?;
                if let Some(g) = &mut group {
                    if let Err(e) = self.write_group_home_held(g) {
                        self.fail(&e);
                        return Err(e);
                    }
                    self.data_writes.count(mode, g.data_blocks());
                    Volume::completed(&mut fs, g, id);
                }
                if !more && !fs.log.has_dirty() {
                    break;
                }
            }
            // A shrink of the log under way: the checkpoint starts the log
            // again below the new end.
            match fs.log.leave_limited_segments().and_then(|()| fs.log.seal_checkpoint(self.now())) {
                Ok(s) => s,
                Err(e) => {
                    self.fail(&e);
                    return Err(e);
                }
            }
        };
        if let Err(e) = sealed.write(&self.meta, &self.data) {
            self.fail(&e);
            return Err(e);
        }
        {
            let _reuse = self.reuse.write().unwrap_or_else(PoisonError::into_inner);
            lock(&self.fs).log.complete_checkpoint(&sealed);
        }
        // Still under the commit lock: nothing is written into a segment
        // while it is discarded.
        self.discard_emptied_segments();
        Ok(())
    }
}

/// Data blocks written by commit groups, by what the commit was for
/// (`dualfs stats`): which mechanism sends a workload's data to the disk.
#[derive(Debug, Default)]
pub(super) struct DataWrites {
    /// Every byte asked for: sync, unmount, a directory's fsync, snapshots.
    all: AtomicU64,
    /// Commits and checkpoints made for room (the log's own checkpoints,
    /// a full group or log, the cleaner).
    room: AtomicU64,
    /// Periodic commits and fsyncs that commit: expired data.
    periodic: AtomicU64,
    /// Steps relieving memory, and the background writer's for a stream.
    relief: AtomicU64,
    /// Of `room` and `periodic`: the first blocks of inline files with a
    /// record on disk that outgrew their inodes, written only to keep the
    /// durable inline bytes reachable (I16).
    outgrown: AtomicU64,
}

impl DataWrites {
    fn count(&self, mode: WriteBack, blocks: usize) {
        let c = match mode {
            WriteBack::All => &self.all,
            WriteBack::Room(_) => &self.room,
            WriteBack::Expired(_) => &self.periodic,
            WriteBack::Chunk(_) => &self.relief,
        };
        c.fetch_add(blocks as u64, Ordering::Relaxed);
    }

    /// The counters, named for `Volume::stats`.
    pub(super) fn named(&self) -> [(&'static str, u64); 5] {
        [
            ("data_blocks_by_sync", self.all.load(Ordering::Relaxed)),
            ("data_blocks_by_room", self.room.load(Ordering::Relaxed)),
            ("data_blocks_by_periodic", self.periodic.load(Ordering::Relaxed)),
            ("data_blocks_by_relief", self.relief.load(Ordering::Relaxed)),
            ("data_blocks_outgrown_inline", self.outgrown.load(Ordering::Relaxed)),
        ]
    }
}
