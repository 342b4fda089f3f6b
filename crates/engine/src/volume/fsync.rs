//! fsync and fdatasync of [`Volume`]: untangled, grouped, and in one
//! device round trip when small (DESIGN.md, "fsync writes only its file").
//!
//! A file fsync is planned by the namespace (`namespace::fsync`): nothing,
//! data written in place, an fsync record, or — when only a commit group can
//! say it — a commit that still leaves other files' delayed tails and held
//! replacements alone. A directory fsync commits everything (`sync
//! MOUNTPOINT` relies on it).
//!
//! Group commit: every caller queues its file and then takes the commit
//! lock; the first to get it takes every file queued so far and makes them
//! durable with one record, one write and one flush; the others find their
//! ticket done when they get the lock in turn. A batch that fails leaves its
//! tickets undone, and each of its callers tries again on its own.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::{CommitState, Volume, lock};
use crate::error::{Error, Result};
use crate::meta_log::segments::OpKind;
use crate::meta_log::{OP_MAX_BLOCKS, fsync::MAX_FSYNC_DESC_BLOCKS};
use crate::namespace::fsync::{FsyncLimits, FsyncWay};
use crate::namespace::pages::WriteBack;
use crate::types::{BLOCK_SIZE, FileKind, InodeNo};

/// Data of one batch up to this size is copied into its fsync record (one
/// write and one flush of the meta-data device, the data written in place
/// with the next commit); more is written in place first, then the record.
pub const FSYNC_COPY_BYTES: usize = 64 << 10;

/// What a batch turned out to need, with the lock let go.
enum Step {
    Nothing,
    DataOnly(Vec<(crate::types::DataBlock, Vec<u8>)>),
    Sealed(crate::meta_log::SealedGroup),
    Commit,
}

/// Files waiting to be made durable, and the tickets done.
#[derive(Debug, Default)]
pub(super) struct FsyncQueue {
    next: u64,
    waiting: Vec<(u64, InodeNo, bool)>,
    done: HashSet<u64>,
}

impl FsyncQueue {
    /// The newest ticket handed out.
    pub(super) fn last_ticket(&self) -> u64 {
        self.next
    }

    /// Whether an fsync with a ticket up to `ticket` still waits for a
    /// batch to take it.
    pub(super) fn waits_up_to(&self, ticket: u64) -> bool {
        self.waiting.iter().any(|w| w.0 <= ticket)
    }
}

/// What fsyncs turned into, for `dualfs stats` and benchmarks.
#[derive(Debug, Default)]
pub(super) struct FsyncCounters {
    /// fsync and fdatasync calls.
    pub calls: std::sync::atomic::AtomicU64,
    /// Batches that wrote an fsync record.
    pub records: std::sync::atomic::AtomicU64,
    /// Batches that wrote data in place and no log block.
    pub data_only: std::sync::atomic::AtomicU64,
    /// Batches with nothing to write.
    pub nothing: std::sync::atomic::AtomicU64,
    /// File fsyncs that had to commit.
    pub commits: std::sync::atomic::AtomicU64,
    /// Calls answered by another caller's batch.
    pub grouped: std::sync::atomic::AtomicU64,
}

impl Volume {
    /// Makes `ino`'s data and the meta-data that reaches it durable: its
    /// inode, and for a file created since the last commit, the names that
    /// reach it. Other dirty files are left alone. A directory's fsync
    /// commits everything.
    ///
    /// # Errors
    /// `NotFound`; a device fails (the volume turns read-only).
    pub fn fsync(&self, ino: InodeNo) -> Result<()> {
        self.sync_file(ino, false)
    }

    /// Makes `ino`'s data durable, and of its meta-data only what reaching
    /// the data needs (size, block map): an overwrite in place writes the
    /// data and flushes the data device, nothing else.
    ///
    /// # Errors
    /// As [`Volume::fsync`].
    pub fn fdatasync(&self, ino: InodeNo) -> Result<()> {
        self.sync_file(ino, true)
    }

    /// Makes everything durable and writes a checkpoint.
    ///
    /// # Errors
    /// A device fails.
    pub fn sync(&self) -> Result<()> {
        self.checkpoint()
    }

    fn sync_file(&self, ino: InodeNo, datasync: bool) -> Result<()> {
        self.check_up()?;
        self.fsyncs_count.calls.fetch_add(1, Ordering::Relaxed);
        let (kind, enabled) = {
            let mut fs = lock(&self.fs);
            (Volume::kind_of(&mut fs, ino)?, fs.log.fsync_records_enabled())
        };
        if self.no_writes.load(Ordering::Acquire) {
            // Read-only: everything changed before the switch is durable.
            return Ok(());
        }
        if kind == FileKind::Directory || !enabled {
            // Taking the commit lock also waits for a commit already
            // writing this file's data.
            return self.commit();
        }
        self.write_ahead_in_steps(ino)?;
        let ticket = {
            let mut q = lock(&self.fsync_queue);
            q.next += 1;
            let t = q.next;
            q.waiting.push((t, ino, datasync));
            t
        };
        let mut c = lock(&self.commit);
        let batch = {
            let mut q = lock(&self.fsync_queue);
            if q.done.remove(&ticket) {
                self.fsyncs_count.grouped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let mut batch = std::mem::take(&mut q.waiting);
            if !batch.iter().any(|b| b.0 == ticket) {
                // A batch that failed took it: try again alone.
                batch.push((ticket, ino, datasync));
            }
            batch
        };
        self.check_writable()?;
        self.fsync_batch(&mut c, &batch)?;
        let mut q = lock(&self.fsync_queue);
        q.done.extend(batch.iter().map(|b| b.0).filter(|&t| t != ticket));
        Ok(())
    }

    /// Makes the files of `batch` durable, as their plan says.
    fn fsync_batch(&self, c: &mut CommitState, batch: &[(u64, InodeNo, bool)]) -> Result<()> {
        let files: Vec<InodeNo> = batch.iter().map(|b| b.1).collect();
        let datasync = batch.iter().all(|b| b.2);
        c.next_id += 1;
        let id = c.next_id;
        let planned = {
            let mut fs = lock(&self.fs);
            let sb = fs.log.superblock();
            let limits = FsyncLimits {
                copy_bytes: FSYNC_COPY_BYTES,
                desc_blocks: MAX_FSYNC_DESC_BLOCKS,
                total_blocks: sb.segment_blocks as usize,
                strict: fs.config.strict,
            };
            let room = fs.log.estimate_blocks() + OP_MAX_BLOCKS + limits.desc_blocks + FSYNC_COPY_BYTES / BLOCK_SIZE;
            if fs.log.available_blocks(OpKind::Grow) < room || fs.log.needs_seal() {
                Ok(Step::Commit)
            } else {
                match fs.plan_fsync(&files, datasync, id, &limits) {
                    Ok(FsyncWay::Nothing) => Ok(Step::Nothing),
                    Ok(FsyncWay::DataOnly(d)) => Ok(Step::DataOnly(d)),
                    Ok(FsyncWay::Commit(_)) => Ok(Step::Commit),
                    // Planned and sealed under one hold of the lock: the
                    // record says exactly the state it was built from.
                    Ok(FsyncWay::Record(plan)) => {
                        match fs.log.seal_fsync(plan.records, &plan.copies, plan.home, self.now()) {
                            Ok(sealed) => Ok(Step::Sealed(sealed)),
                            Err(e) => {
                                // The plan moved pages in flight under this id:
                                // back to the queue, for the commit below.
                                fs.pages.requeue(id);
                                log::warn!("an fsync record could not be placed ({e}); committing instead");
                                Ok(Step::Commit)
                            }
                        }
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let way = match planned {
            Ok(w) => w,
            Err(e @ (Error::Io { .. } | Error::Corrupt { .. })) => {
                self.fail(&e);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        match way {
            Step::Nothing => {
                self.fsyncs_count.nothing.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Step::DataOnly(data) => {
                self.fsyncs_count.data_only.fetch_add(1, Ordering::Relaxed);
                let written = data.iter().try_for_each(|(at, buf)| {
                    crate::device::write(self.data.as_ref(), crate::DeviceRole::Data, at.0, buf)
                });
                if let Err(e) = written.and_then(|()| crate::device::flush(self.data.as_ref(), crate::DeviceRole::Data))
                {
                    self.fail(&e);
                    return Err(e);
                }
                let mut fs = lock(&self.fs);
                fs.pages.drop_in_flight(id);
                fs.log.count_data_written(data.len() as u64);
                Ok(())
            }
            Step::Sealed(sealed) => {
                self.fsyncs_count.records.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = self.write_record(&sealed) {
                    self.fail(&e);
                    return Err(e);
                }
                let mut fs = lock(&self.fs);
                fs.log.complete_fsync(&sealed);
                fs.pages.drop_in_flight(id);
                Ok(())
            }
            Step::Commit => {
                self.fsyncs_count.commits.fetch_add(1, Ordering::Relaxed);
                let mode = {
                    let mut fs = lock(&self.fs);
                    for &ino in &files {
                        // What was asked for goes whole; other files keep
                        // their delayed tails and held replacements.
                        fs.release_replacement(ino)?;
                        fs.pages.expire(ino);
                    }
                    if fs.config.strict { WriteBack::All } else { WriteBack::Expired(self.expire_before()) }
                };
                self.commit_locked(c, mode)
            }
        }
    }
}
